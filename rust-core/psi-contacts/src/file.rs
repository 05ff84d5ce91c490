//! Reading contact lists: CSV (with or without a header) or one entry per line.

use std::io::Read;
use thiserror::Error;

/// One input row: the raw identifier and an optional label (a name or user id).
#[derive(Clone, PartialEq, Eq)]
pub struct Row {
    /// 1-based line (or CSV record) number in the file, for reports.
    pub line: usize,
    /// The identifier as written in the file (not yet normalized).
    pub identifier: String,
    /// The label column, if any (empty cells are `None`).
    pub label: Option<String>,
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Row")
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

/// A file that could not be read at all (individual bad rows are not errors; they
/// are normalized and rejected one by one).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FileError {
    /// Reading failed.
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
    /// The CSV structure is broken (e.g. an unterminated quote) at this record.
    #[error("malformed CSV at record {line}")]
    Csv {
        /// 1-based record number.
        line: usize,
    },
    /// A CSV header was found but names no identifier column.
    #[error(
        "CSV header has no identifier column (expected one of: identifier, contact, phone, email, number)"
    )]
    NoIdentifierColumn,
}

const ID_COLUMNS: &[&str] = &[
    "identifier",
    "id",
    "contact",
    "phone",
    "email",
    "number",
    "value",
];
const LABEL_COLUMNS: &[&str] = &["label", "name", "user", "user_id", "userid", "display_name"];

/// Reads rows from CSV or plain text.
///
/// - If the first non-empty line contains a comma, the input is CSV. A first record
///   whose cells are all known column names (`identifier`/`phone`/`email`/... and
///   `label`/`name`/...) is a header; otherwise column 1 is the identifier and column 2
///   (if present) the label.
/// - Otherwise every line is one identifier. Lines starting with `#` are comments.
/// - Blank lines are skipped (they carry no entry); every other row is returned, valid
///   or not.
pub fn read_rows(mut input: impl Read) -> Result<Vec<Row>, FileError> {
    let mut text = String::new();
    input.read_to_string(&mut text)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with('#'));
    match first {
        Some(l) if l.contains(',') => read_csv(text),
        _ => Ok(text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|(i, l)| Row {
                line: i + 1,
                identifier: l.trim().to_string(),
                label: None,
            })
            .collect()),
    }
}

fn read_csv(text: &str) -> Result<Vec<Row>, FileError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut rows = Vec::new();
    let (mut id_col, mut label_col) = (0usize, Some(1usize));
    for (i, record) in reader.records().enumerate() {
        let line = record
            .as_ref()
            .ok()
            .and_then(|r| r.position())
            .map(|p| p.line() as usize)
            .unwrap_or(i + 1);
        let record = record.map_err(|_| FileError::Csv { line })?;
        if i == 0 {
            let names: Vec<String> = record.iter().map(|c| c.to_ascii_lowercase()).collect();
            let known = |n: &String| {
                ID_COLUMNS.contains(&n.as_str()) || LABEL_COLUMNS.contains(&n.as_str())
            };
            if !names.is_empty() && names.iter().all(known) {
                id_col = names
                    .iter()
                    .position(|n| ID_COLUMNS.contains(&n.as_str()))
                    .ok_or(FileError::NoIdentifierColumn)?;
                label_col = names
                    .iter()
                    .position(|n| LABEL_COLUMNS.contains(&n.as_str()));
                continue;
            }
        }
        if record.iter().all(|c| c.is_empty()) {
            continue;
        }
        rows.push(Row {
            line,
            identifier: record.get(id_col).unwrap_or("").to_string(),
            label: label_col
                .and_then(|c| record.get(c))
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lines() {
        let rows = read_rows("# comment\n+14155550123\n\n a@b.co \n".as_bytes()).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].line, 2);
        assert_eq!(rows[1].identifier, "a@b.co");
        assert_eq!(rows[1].line, 4);
    }

    #[test]
    fn csv_with_header_in_any_order() {
        let rows =
            read_rows("name,phone\nAlice,+14155550123\n\"Bob, Jr.\",x\n".as_bytes()).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].identifier, "+14155550123");
        assert_eq!(rows[0].label.as_deref(), Some("Alice"));
        assert_eq!(rows[1].label.as_deref(), Some("Bob, Jr."));
        assert_eq!(rows[1].line, 3);
    }

    #[test]
    fn csv_without_header() {
        let rows = read_rows("+14155550123,user-1\na@b.co,\n".as_bytes()).unwrap();
        assert_eq!(rows[0].label.as_deref(), Some("user-1"));
        assert_eq!(rows[1].label, None);
    }

    #[test]
    fn csv_errors() {
        assert!(matches!(
            read_rows("name,label\nx,y\n".as_bytes()),
            Err(FileError::NoIdentifierColumn)
        ));
        assert!(matches!(
            read_rows("a,b\n\"unterminated,c\n".as_bytes()),
            Ok(_) | Err(FileError::Csv { .. })
        ));
    }
}
