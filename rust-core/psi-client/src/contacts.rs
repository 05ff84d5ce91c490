//! Matching raw contacts: normalization, the run, and the results mapped back to the
//! caller's rows. What `psi match` and the platform SDKs call.

use crate::cancel::CancelToken;
use crate::driver::Client;
use crate::error::ClientError;
use crate::measure::ProtocolChoice;
use crate::report::{MatchReport, Progress};
use psi_contacts::{Invalid, Normalizer};

/// A contact row that is in the registry.
#[derive(Clone, PartialEq, Eq)]
pub struct ContactMatch {
    /// Index of the row in the caller's list (0-based). Rows that normalize to the same
    /// identifier all appear, each with its own index.
    pub row: usize,
    /// The normalized identifier (E.164 phone number or lower-cased email).
    pub identifier: String,
    /// Its label in the registry, if it has one (and labels were fetched).
    pub label: Option<String>,
}

impl std::fmt::Debug for ContactMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContactMatch")
            .field("row", &self.row)
            .field("has_label", &self.label.is_some())
            .finish_non_exhaustive()
    }
}

/// A contact row that could not be matched because it is not a valid identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// Index of the row in the caller's list (0-based).
    pub row: usize,
    /// Why (log-safe: never the entry itself).
    pub reason: Invalid,
}

/// The result of [`Client::match_contacts`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ContactReport {
    /// Matched rows, in row order.
    pub matches: Vec<ContactMatch>,
    /// Rows that were not valid identifiers, in row order.
    pub rejected: Vec<Rejected>,
    /// Rows given.
    pub rows: usize,
    /// The run (protocol, statistics, label error); its `matches` index the list of
    /// accepted identifiers, not the rows. Its `labels_missing` counts rows: the rows of
    /// [`ContactReport::matches`] without a label (two rows of one identifier count twice);
    /// `labels_skipped` counts distinct identifiers, as the label step does.
    pub run: MatchReport,
}

impl Client {
    /// Normalizes `contacts` (phone numbers with [`crate::ClientConfig::default_region`],
    /// emails), matches the valid ones, and maps the results back to the rows. Invalid
    /// rows are returned with their reason, never dropped silently; if no row is valid
    /// (or there is none) no request is sent and the report has no match, every row in
    /// `rejected` and the run of [`MatchReport::nothing_sent`].
    pub fn match_contacts<S: AsRef<str>>(
        &self,
        contacts: &[S],
        protocol: impl Into<ProtocolChoice>,
        progress: &mut dyn FnMut(Progress),
        cancel: &CancelToken,
    ) -> Result<ContactReport, ClientError> {
        let normalizer = Normalizer::new(&self.config().default_region)
            .map_err(|e| ClientError::BadInput(e.to_string()))?;
        let normalized = normalizer.normalize_all(contacts);
        let rejected: Vec<Rejected> = normalized
            .rejected
            .iter()
            .map(|&(row, reason)| Rejected { row, reason })
            .collect();
        let choice: ProtocolChoice = protocol.into();
        if normalized.accepted.is_empty() {
            // Nothing to match (an empty address book, or only invalid rows): a result with
            // every rejected row and no request sent, not an error that would lose them.
            return Ok(ContactReport {
                matches: Vec::new(),
                rejected,
                rows: contacts.len(),
                run: MatchReport::nothing_sent(choice, self.config().fetch_labels),
            });
        }
        let items: Vec<Vec<u8>> = normalized
            .accepted
            .iter()
            .map(|(_, c)| c.value.as_bytes().to_vec())
            .collect();
        let mut run = self.match_items(items, choice, progress, cancel)?;
        // A matched identifier stands for every row that normalized to it.
        let mut matched: std::collections::HashMap<&str, Option<&String>> =
            std::collections::HashMap::new();
        for m in &run.matches {
            let id = normalized.accepted[m.index].1.value.as_str();
            matched.insert(id, m.label.as_ref());
        }
        let matches = normalized
            .accepted
            .iter()
            .filter_map(|(row, c)| {
                matched.get(c.value.as_str()).map(|label| ContactMatch {
                    row: *row,
                    identifier: c.value.clone(),
                    label: label.cloned(),
                })
            })
            .collect::<Vec<ContactMatch>>();
        // Counted in rows, as the matches are: every row of an identifier without a label.
        run.labels_missing = matches.iter().filter(|m| m.label.is_none()).count();
        Ok(ContactReport {
            matches,
            rejected,
            rows: contacts.len(),
            run,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientConfig;
    use crate::report::LabelStatus;
    use psi_core::Protocol;

    /// An address book with no valid row (or none at all) is a result, not an error: every
    /// row comes back rejected with its reason, and nothing is sent (the server here does
    /// not exist: a request would fail the call).
    #[test]
    fn nothing_valid_is_a_result_with_every_rejected_row_and_no_request() {
        let c = Client::new("http://127.0.0.1:9", ClientConfig::default());
        let mut events = 0;
        let r = c
            .match_contacts(
                &["", "not a contact", "broken@"],
                ProtocolChoice::default(),
                &mut |_| events += 1,
                &CancelToken::new(),
            )
            .unwrap();
        assert!(r.matches.is_empty());
        assert_eq!(
            r.rejected.iter().map(|x| x.row).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(r.rejected[0].reason, Invalid::Empty);
        assert_eq!(r.rows, 3);
        assert_eq!(r.run.stats.requests, 0);
        assert_eq!(events, 0);
        assert!(r.run.choice.is_none());
        assert_eq!(r.run.label_status, LabelStatus::Complete);
        let none: [&str; 0] = [];
        let r = Client::new(
            "http://127.0.0.1:9",
            ClientConfig::default().with_labels(false),
        )
        .match_contacts(&none, Protocol::Ot, &mut |_| {}, &CancelToken::new())
        .unwrap();
        assert!(r.matches.is_empty() && r.rejected.is_empty());
        assert_eq!(r.run.protocol, Protocol::Ot);
        assert_eq!(r.run.label_status, LabelStatus::Off);
    }
}
