//! # psi-contacts
//!
//! Contact normalization shared by the PSI client and server, so that the same person is
//! the same byte string on both sides (docs/contacts.md has the rules):
//!
//! - phone numbers: parsed with a default region and written in E.164 (`+14155550123`),
//!   using the `phonenumber` crate (libphonenumber's metadata);
//! - emails: trimmed and lowercased (`Alice@Example.COM ` -> `alice@example.com`).
//!
//! Invalid entries are returned to the caller with their position and a reason; they are
//! never dropped silently. Reasons never contain the entry itself (contact data stays out
//! of logs and errors).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod file;

pub use file::{ContactFile, FileError, Format, Row, read_contacts, read_rows};

use phonenumber::country::Id;
use std::str::FromStr;
use thiserror::Error;

/// Longest normalized identifier accepted (bytes). Emails are at most 254 by RFC 5321.
pub const MAX_IDENTIFIER_LEN: usize = 254;

/// What kind of identifier a contact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A phone number in E.164.
    Phone,
    /// An email address.
    Email,
}

/// Why an entry could not be normalized. Never contains the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Invalid {
    /// Nothing but whitespace.
    #[error("empty entry")]
    Empty,
    /// Longer than [`MAX_IDENTIFIER_LEN`] bytes after normalization.
    #[error("entry too long")]
    TooLong,
    /// Contains an `@` but is not `local@domain.tld`.
    #[error("malformed email address")]
    BadEmail,
    /// Characters other than digits, spaces and `+ - ( ) . /`.
    #[error("not a phone number or email")]
    NotAPhoneNumber,
    /// The phone number could not be parsed (with the default region if it has no `+`).
    #[error("phone number could not be parsed")]
    UnparsablePhone,
    /// Parsed, but not a valid number for its region (libphonenumber metadata).
    #[error("phone number is not valid for its region")]
    InvalidPhone,
}

impl Invalid {
    /// The reason's stable name, as docs/contacts.md lists it and `psi import --json` and
    /// `psi match --json` report it (`reason`): the variant's name, e.g. `NotAPhoneNumber`.
    /// The `Display` text is a message for people and may change.
    pub fn name(self) -> &'static str {
        match self {
            Invalid::Empty => "Empty",
            Invalid::TooLong => "TooLong",
            Invalid::BadEmail => "BadEmail",
            Invalid::NotAPhoneNumber => "NotAPhoneNumber",
            Invalid::UnparsablePhone => "UnparsablePhone",
            Invalid::InvalidPhone => "InvalidPhone",
        }
    }
}

/// The default region is not a CLDR two-letter region code known to libphonenumber.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown region code {0:?} (expected an ISO 3166 two-letter code such as US, GB, DE)")]
pub struct UnknownRegion(pub String);

/// A normalized contact identifier.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Contact {
    /// Phone or email.
    pub kind: Kind,
    /// The normalized identifier: the exact bytes both sides feed to the PSI protocol.
    pub value: String,
}

impl std::fmt::Debug for Contact {
    // Contact data stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contact")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Normalizes raw contact strings; phone numbers without a `+` use the default region.
#[derive(Debug, Clone, Copy)]
pub struct Normalizer {
    region: Id,
}

impl Default for Normalizer {
    /// Default region `US`.
    fn default() -> Self {
        Normalizer { region: Id::US }
    }
}

/// Result of normalizing a list: accepted entries with their position, rejected ones
/// with their position and reason. Every input position is in exactly one list.
#[derive(Debug, Clone, Default)]
pub struct Normalized {
    /// `(position in the input, contact)`, in input order.
    pub accepted: Vec<(usize, Contact)>,
    /// `(position in the input, reason)`, in input order.
    pub rejected: Vec<(usize, Invalid)>,
}

impl Normalizer {
    /// A normalizer whose default region is `region` (ISO 3166 alpha-2, case-insensitive).
    pub fn new(region: &str) -> Result<Self, UnknownRegion> {
        let code = region.trim().to_ascii_uppercase();
        if code.len() != 2 {
            return Err(UnknownRegion(region.to_string()));
        }
        Id::from_str(&code)
            .map(|region| Normalizer { region })
            .map_err(|_| UnknownRegion(region.to_string()))
    }

    /// The default region code.
    pub fn region(&self) -> &str {
        self.region.as_ref()
    }

    /// Normalizes one entry: an email if it contains `@`, otherwise a phone number.
    pub fn normalize(&self, raw: &str) -> Result<Contact, Invalid> {
        let s = raw.trim();
        if s.is_empty() {
            return Err(Invalid::Empty);
        }
        let lower = s.to_lowercase();
        if let Some(rest) = lower.strip_prefix("mailto:") {
            return normalize_email(rest);
        }
        if s.contains('@') {
            return normalize_email(&lower);
        }
        let phone = lower.strip_prefix("tel:").unwrap_or(&lower);
        self.normalize_phone(phone)
    }

    /// Normalizes a list; see [`Normalized`].
    pub fn normalize_all<I, S>(&self, raws: I) -> Normalized
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Normalized::default();
        for (i, raw) in raws.into_iter().enumerate() {
            match self.normalize(raw.as_ref()) {
                Ok(c) => out.accepted.push((i, c)),
                Err(e) => out.rejected.push((i, e)),
            }
        }
        out
    }

    fn normalize_phone(&self, s: &str) -> Result<Contact, Invalid> {
        preload_metadata();
        let s = s.trim();
        let allowed = |c: char| c.is_ascii_digit() || " +-().\u{a0}/".contains(c);
        // `x`, `ext`, `;` (RFC 3966's `;ext=` and other parameters) or `#` introduces an
        // extension, which E.164 has no place for: the number is cut at the earliest of
        // these markers and the rest dropped (`+12012760829;ext=12`, `... # ext 5`).
        let cut = [s.find("ext"), s.find(['x', ';', '#'])]
            .into_iter()
            .flatten()
            .min();
        let main = match cut {
            Some(i) => &s[..i],
            None => s,
        };
        if main.is_empty()
            || !main.chars().all(allowed)
            || !main.chars().any(|c| c.is_ascii_digit())
        {
            return Err(Invalid::NotAPhoneNumber);
        }
        if main.chars().filter(|&c| c == '+').count() > 1
            || main.contains('+') && !main.trim_start_matches(['(', ' ']).starts_with('+')
        {
            return Err(Invalid::NotAPhoneNumber);
        }
        let number =
            phonenumber::parse(Some(self.region), main).map_err(|_| Invalid::UnparsablePhone)?;
        if !phonenumber::is_valid(&number) {
            return Err(Invalid::InvalidPhone);
        }
        let value = number.format().mode(phonenumber::Mode::E164).to_string();
        Ok(Contact {
            kind: Kind::Phone,
            value,
        })
    }
}

/// Loads the phone-number metadata (libphonenumber's, parsed once per process on first
/// use: about 100 ms on a phone-class CPU) now, so that the first normalization does not
/// pay for it. Idempotent and cheap once done; the platform clients call it on a thread of
/// their own when a client is created, off the caller's thread and before the first run.
pub fn preload_metadata() {
    METADATA.get_or_init(|| {
        let _ = phonenumber::parse(Some(Id::US), "+14155550123");
    });
}

/// Whether the phone-number metadata is loaded ([`preload_metadata`], or a first phone
/// number normalized).
pub fn metadata_loaded() -> bool {
    METADATA.get().is_some()
}

/// Set once the phone-number metadata has been loaded (it loads on its first use).
static METADATA: std::sync::OnceLock<()> = std::sync::OnceLock::new();

fn normalize_email(lower: &str) -> Result<Contact, Invalid> {
    let s = lower.trim();
    if s.len() > MAX_IDENTIFIER_LEN {
        return Err(Invalid::TooLong);
    }
    let Some((local, domain)) = s.split_once('@') else {
        return Err(Invalid::BadEmail);
    };
    let bad_char = |c: char| c.is_whitespace() || c.is_control() || "<>,;\"@".contains(c);
    if local.is_empty()
        || domain.len() < 3
        || local.chars().any(bad_char)
        || domain.chars().any(bad_char)
        || !domain.contains('.')
        || domain.starts_with(['.', '-'])
        || domain.ends_with(['.', '-'])
        || domain.contains("..")
    {
        return Err(Invalid::BadEmail);
    }
    Ok(Contact {
        kind: Kind::Email,
        value: s.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Result<String, Invalid> {
        Normalizer::default().normalize(s).map(|c| c.value)
    }

    #[test]
    fn phones_to_e164() {
        assert_eq!(n("(415) 555-0123"), Ok("+14155550123".into()));
        assert_eq!(n(" +1 415 555 0123 "), Ok("+14155550123".into()));
        assert_eq!(n("tel:+1-415-555-0123"), Ok("+14155550123".into()));
        assert_eq!(n("415.555.0123 ext. 12"), Ok("+14155550123".into()));
        // Every spelling of an extension is cut at its earliest marker (issue 34).
        for spelling in [
            "+12012760829;ext=12",
            "tel:+1-201-276-0829;ext=12",
            "TEL:+1-201-276-0829;EXT=12",
            "+12012760829 # ext 5",
            "+12012760829#5",
            "+1 201 276 0829 x 7",
            "+1 201 276 0829 ext. 7",
            "+12012760829;phone-context=example.com",
        ] {
            assert_eq!(n(spelling), Ok("+12012760829".into()), "{spelling}");
        }
        assert_eq!(n("+44 20 7946 0958"), Ok("+442079460958".into()));
        let gb = Normalizer::new("gb").unwrap();
        assert_eq!(gb.region(), "GB");
        assert_eq!(
            gb.normalize("020 7946 0958").map(|c| c.value),
            Ok("+442079460958".into())
        );
        assert_eq!(
            Normalizer::new("DE")
                .unwrap()
                .normalize("030 901820")
                .map(|c| c.value),
            Ok("+4930901820".into())
        );
    }

    #[test]
    fn emails_trimmed_and_lowercased() {
        assert_eq!(n("  Alice@Example.COM "), Ok("alice@example.com".into()));
        assert_eq!(n("MAILTO:Bob@x.org"), Ok("bob@x.org".into()));
        assert_eq!(n("Ünï@Bücher.de"), Ok("ünï@bücher.de".into()));
    }

    #[test]
    fn invalid_entries_have_reasons() {
        assert_eq!(n("   "), Err(Invalid::Empty));
        assert_eq!(n("alice@"), Err(Invalid::BadEmail));
        assert_eq!(n("a@b@c.d"), Err(Invalid::BadEmail));
        assert_eq!(n("alice@localhost"), Err(Invalid::BadEmail));
        assert_eq!(n("call me"), Err(Invalid::NotAPhoneNumber));
        assert_eq!(n("12+34"), Err(Invalid::NotAPhoneNumber));
        assert!(matches!(
            n("+1 555"),
            Err(Invalid::InvalidPhone | Invalid::UnparsablePhone)
        ));
        assert!(n("123").is_err());
        let long = format!("{}@example.com", "a".repeat(300));
        assert_eq!(n(&long), Err(Invalid::TooLong));
        assert!(Normalizer::new("XX").is_err());
        assert!(Normalizer::new("usa").is_err());
    }

    /// The names are an interface (docs/contacts.md, `psi match --json`): pinned.
    #[test]
    fn reason_names_are_stable() {
        let all = [
            (Invalid::Empty, "Empty"),
            (Invalid::TooLong, "TooLong"),
            (Invalid::BadEmail, "BadEmail"),
            (Invalid::NotAPhoneNumber, "NotAPhoneNumber"),
            (Invalid::UnparsablePhone, "UnparsablePhone"),
            (Invalid::InvalidPhone, "InvalidPhone"),
        ];
        for (reason, name) in all {
            assert_eq!(reason.name(), name);
        }
    }

    /// No phone number or email contains a comma, so a comma always separates cells in
    /// a contact file (file.rs decides CSV from it).
    #[test]
    fn no_identifier_contains_a_comma() {
        for s in [
            "+1 415,555 0123",
            "415,5550123",
            "a,b@example.com",
            "a@ex,ample.com",
        ] {
            assert!(n(s).is_err(), "{s}");
        }
    }

    #[test]
    fn normalize_all_reports_every_position() {
        let r = Normalizer::default().normalize_all(["+14155550123", "nope", "a@b.co", ""]);
        let acc: Vec<usize> = r.accepted.iter().map(|(i, _)| *i).collect();
        let rej: Vec<(usize, Invalid)> = r.rejected.clone();
        assert_eq!(acc, vec![0, 2]);
        assert_eq!(
            rej,
            vec![(1, Invalid::NotAPhoneNumber), (3, Invalid::Empty)]
        );
        // Debug output never shows the identifier.
        assert!(!format!("{:?}", r.accepted[0].1).contains("415"));
    }
}
