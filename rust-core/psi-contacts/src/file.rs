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
    /// The label column, if any. A blank cell (empty or only whitespace) is `None`: CSV
    /// cannot tell an empty label from an absent one, so a blank cell means "no label".
    pub label: Option<String>,
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Row")
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

/// How a contact file was read: decided once per file, from all of its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// No line has a comma: one identifier per line, no labels.
    Text,
    /// Some line has a comma, and the first record is not a header: every record is
    /// `identifier[,label]`.
    Csv,
    /// Some line has a comma, and the first record names the columns.
    CsvWithHeader,
}

impl Format {
    /// A stable name for reports and JSON: `text`, `csv` or `csv-header`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Csv => "csv",
            Format::CsvWithHeader => "csv-header",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Text => "plain text, one identifier per line",
            Format::Csv => "CSV without a header, identifier[,label]",
            Format::CsvWithHeader => "CSV with a header",
        })
    }
}

/// A contact file as read: its format and its rows.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ContactFile {
    /// How the file was read.
    pub format: Format,
    /// Every row that carries an entry, valid or not, in file order.
    pub rows: Vec<Row>,
}

impl ContactFile {
    /// Rows that carry a label (a non-blank label cell).
    pub fn labeled(&self) -> usize {
        self.rows.iter().filter(|r| r.label.is_some()).count()
    }
}

/// A file that could not be read at all (individual bad rows are not errors; they
/// are normalized and rejected one by one). Never carries contact data: line numbers
/// and counts only.
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
        "CSV header has no identifier column (expected one of: identifier, id, contact, phone, email, number, value)"
    )]
    NoIdentifierColumn,
    /// A CSV record has more non-blank cells than the file has columns (two without a
    /// header: identifier and label), so it cannot be read like the other rows: usually
    /// an unquoted comma inside a label.
    #[error(
        "line {line} has {cells} cells, but {} (quote a cell that contains a comma)",
        if *.header { format!("the header names {columns} columns") } else { format!("a CSV file without a header has at most {columns}: identifier,label") }
    )]
    TooManyCells {
        /// 1-based line the record starts on.
        line: usize,
        /// Cells up to the last non-blank one.
        cells: usize,
        /// Columns the file has: the header's, or 2.
        columns: usize,
        /// Whether the file has a header row.
        header: bool,
    },
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

/// Reads a contact file: CSV or plain text, decided from all of its lines.
///
/// - If any line that is not blank and not a `#` comment contains a comma, the file is
///   CSV; a record without a comma is then an identifier without a label (as in
///   `identifier,`). A first record whose cells are all known column names
///   (`identifier`/`phone`/`email`/... and `label`/`name`/...) is a header; otherwise
///   column 1 is the identifier and column 2 (if present) the label. A record with more
///   non-blank cells than that (2 without a header) is refused ([`FileError::TooManyCells`]):
///   its extra cells would be lost. Quoted cells (`"Bob, Jr."`, `""` for a quote, line
///   breaks inside quotes) follow RFC 4180; cells are trimmed; a blank cell is absent.
/// - Otherwise every line is one identifier (no labels). Lines starting with `#` are
///   comments.
/// - Blank lines are skipped (they carry no entry); every other row is returned, valid
///   or not, with the line it starts on. Lines end with `\n`, `\r\n` or a lone `\r`; a
///   leading UTF-8 byte order mark is ignored.
pub fn read_contacts(mut input: impl Read) -> Result<ContactFile, FileError> {
    let mut text = String::new();
    input.read_to_string(&mut text)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let text = unify_line_ends(text);
    // Phone numbers and emails never contain a comma (docs/contacts.md), so one comma
    // anywhere means a second column.
    let csv = text.lines().any(|l| !l.starts_with('#') && l.contains(','));
    if csv {
        return read_csv(&text);
    }
    let rows = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(i, l)| Row {
            line: i + 1,
            identifier: l.trim().to_string(),
            label: None,
        })
        .collect();
    Ok(ContactFile {
        format: Format::Text,
        rows,
    })
}

/// The rows of [`read_contacts`].
pub fn read_rows(input: impl Read) -> Result<Vec<Row>, FileError> {
    read_contacts(input).map(|f| f.rows)
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
fn read_csv(text: &str) -> Result<ContactFile, FileError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let bytes = text.as_bytes();
    let mut rows = Vec::new();
    let (mut id_col, mut label_col) = (0usize, Some(1usize));
    let (mut columns, mut format) = (2usize, Format::Csv);
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
                (columns, format) = (names.len(), Format::CsvWithHeader);
                continue;
            }
        }
        // Trailing blank cells (`a,b,,`) carry nothing; any other extra cell would be lost.
        let cells = record
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_empty())
            .last()
            .map_or(0, |(i, _)| i + 1);
        if cells == 0 {
            continue;
        }
        if cells > columns {
            return Err(FileError::TooManyCells {
                line,
                cells,
                columns,
                header: format == Format::CsvWithHeader,
            });
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
    Ok(ContactFile { format, rows })
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

    /// Issue 26: a labelled registry whose first row has no label was read as plain text
    /// and every labelled row was rejected. The whole file decides: it is CSV.
    #[test]
    fn first_row_without_a_label_is_still_csv() {
        let text = "+15551234567\n+15551234568,Bob\n\n# note, with a comma\n\"+15551234569\",\"Smith, J\"\n+15551234560\n";
        let file = read_contacts(text.as_bytes()).unwrap();
        assert_eq!(file.format, Format::Csv);
        let got: Vec<(usize, &str, Option<&str>)> = file
            .rows
            .iter()
            .map(|r| (r.line, r.identifier.as_str(), r.label.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "+15551234567", None),
                (2, "+15551234568", Some("Bob")),
                (5, "+15551234569", Some("Smith, J")),
                (6, "+15551234560", None),
            ]
        );
        assert_eq!(file.labeled(), 2);
    }

    /// Only lines that carry data decide: a comma in a comment does not make CSV.
    #[test]
    fn text_when_no_data_line_has_a_comma() {
        let file = read_contacts("# name, number\n+15551234567\n\"x\"\n".as_bytes()).unwrap();
        assert_eq!(file.format, Format::Text);
        assert_eq!(file.rows[1].identifier, "\"x\"");
        assert_eq!(file.labeled(), 0);
        let file = read_contacts("phone,name\n+15551234567,A\n".as_bytes()).unwrap();
        assert_eq!(file.format, Format::CsvWithHeader);
    }

    /// A blank label cell (empty or only spaces) means the entry has no label.
    #[test]
    fn blank_label_cell_is_no_label() {
        let file = read_contacts("+15551234567,\n+15551234568,   \n+15551234569,\"\"\n".as_bytes())
            .unwrap();
        assert_eq!(file.format, Format::Csv);
        assert_eq!(file.rows.len(), 3);
        assert!(file.rows.iter().all(|r| r.label.is_none()));
        let file = read_contacts("phone,label\n+15551234567,\n".as_bytes()).unwrap();
        assert_eq!(file.rows[0].label, None);
    }

    /// A record with more cells than the file's columns cannot be read like the others:
    /// refused with its line, and the message names no contact data.
    #[test]
    fn extra_cells_are_refused_with_the_line() {
        let err = read_contacts("+15551234567\n+15551234568,Smith, John\n".as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                FileError::TooManyCells {
                    line: 2,
                    cells: 3,
                    columns: 2,
                    header: false
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("line 2"), "{message}");
        assert!(
            !message.contains("Smith") && !message.contains("555"),
            "{message}"
        );
        let err = read_contacts("phone,name\n\n+15551234567,Alice,x\n".as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                FileError::TooManyCells {
                    line: 3,
                    cells: 3,
                    columns: 2,
                    header: true
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("the header names 2 columns"),
            "{err}"
        );
        // Trailing blank cells carry nothing and are allowed.
        let file = read_contacts("+15551234567,Alice,,\n+15551234568,, \n".as_bytes()).unwrap();
        assert_eq!(file.rows[0].label.as_deref(), Some("Alice"));
        assert_eq!(file.rows[1].label, None);
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
