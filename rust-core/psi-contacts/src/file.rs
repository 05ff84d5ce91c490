//! Reading contact lists: CSV (with or without a header) or one entry per line.

use std::borrow::Cow;
use std::io::Read;
use thiserror::Error;

/// One input row: the raw identifier and an optional label (a name or user id).
#[derive(Clone, PartialEq, Eq)]
pub struct Row {
    /// 1-based number of the line the entry (its CSV record) starts on, for reports;
    /// `\n`, `\r\n` and a lone `\r` each end a line.
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
    #[error("malformed CSV at line {line}")]
    Csv {
        /// 1-based line the record starts on.
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
///   or not, with the line it starts on. Lines end with `\n`, `\r\n` or a lone `\r`; a
///   leading UTF-8 byte order mark is ignored.
pub fn read_rows(mut input: impl Read) -> Result<Vec<Row>, FileError> {
    let mut text = String::new();
    input.read_to_string(&mut text)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let text = unify_line_ends(text);
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with('#'));
    match first {
        Some(l) if l.contains(',') => read_csv(&text),
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

/// `text` with every line end (`\r\n`, or a lone `\r` as in old Mac files) written as
/// `\n`, so that text and CSV files count lines alike (the CSV reader counts only `\n`,
/// and ends a comment only at `\n`).
fn unify_line_ends(text: &str) -> Cow<'_, str> {
    if text.contains('\r') {
        Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Where the record that the CSV reader reads from byte `at` of `text` (`\n` line ends)
/// begins: the reader first skips blank lines and `#` comment lines.
fn record_start(text: &[u8], mut at: usize) -> usize {
    loop {
        match text.get(at) {
            Some(b'\n') => at += 1,
            Some(b'#') => {
                at = text[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(text.len(), |p| at + p + 1);
            }
            _ => return at,
        }
    }
}

/// `text` with `\n` line ends (see [`unify_line_ends`]).
fn read_csv(text: &str) -> Result<Vec<Row>, FileError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let bytes = text.as_bytes();
    let mut rows = Vec::new();
    let (mut id_col, mut label_col) = (0usize, Some(1usize));
    let mut record = csv::StringRecord::new();
    // `line` is the line of byte `counted`. Not the reader's own `Position::line`: that
    // is where the previous record ended, before the blank and comment lines the reader
    // skips (and, with `\r\n`, before the `\n` of the previous line end).
    let (mut counted, mut line) = (0usize, 1usize);
    for i in 0.. {
        let start = record_start(bytes, reader.position().byte() as usize).min(bytes.len());
        line += bytes[counted..start]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        counted = start;
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => return Err(FileError::Csv { line }),
        }
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

    /// `(line, identifier)` for every row of `text`.
    fn lines_of(text: &str) -> Vec<(usize, String)> {
        read_rows(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(|r| (r.line, r.identifier))
            .collect()
    }

    fn expect(pairs: &[(usize, &str)]) -> Vec<(usize, String)> {
        pairs.iter().map(|&(l, s)| (l, s.to_string())).collect()
    }

    /// The same file with `\n`, `\r\n` and lone `\r` line ends, with and without a BOM.
    fn variants(lf: &str) -> Vec<String> {
        let mut out = Vec::new();
        for ending in ["\n", "\r\n", "\r"] {
            let text = lf.replace('\n', ending);
            out.push(format!("\u{feff}{text}"));
            out.push(text);
        }
        out
    }

    #[test]
    fn text_line_numbers_for_every_line_ending() {
        let lf = "# comment\n+14155550123\n\n a@b.co \n\n\n# another\nx\n";
        for text in variants(lf) {
            assert_eq!(
                lines_of(&text),
                expect(&[(2, "+14155550123"), (4, "a@b.co"), (8, "x")]),
                "{text:?}"
            );
        }
    }

    #[test]
    fn csv_line_numbers_for_every_line_ending() {
        let with_header =
            "# exported\nname,phone\n\nAlice,+14155550123\n# skip\n\n\nBob,x\n,\nCarol,y";
        for text in variants(with_header) {
            assert_eq!(
                lines_of(&text),
                expect(&[(4, "+14155550123"), (8, "x"), (10, "y")]),
                "{text:?}"
            );
        }
        let without_header = "\n+14155550123,user-1\n\n# c\na@b.co,\n\nz,w\n";
        for text in variants(without_header) {
            assert_eq!(
                lines_of(&text),
                expect(&[(2, "+14155550123"), (5, "a@b.co"), (7, "z")]),
                "{text:?}"
            );
        }
    }

    #[test]
    fn csv_line_numbers_after_a_quoted_line_break() {
        let lf = "name,phone\n\"Bob\nJr.\",x\n\nAlice,y\n";
        for ending in ["\n", "\r\n"] {
            let text = lf.replace('\n', ending);
            assert_eq!(lines_of(&text), expect(&[(2, "x"), (5, "y")]), "{text:?}");
        }
    }
}
