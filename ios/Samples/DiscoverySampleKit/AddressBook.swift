import Foundation

/// One person of a sample address book: a name and one phone number or email.
public struct SampleContact: Sendable, Hashable {
    /// The name shown to the user.
    public let name: String
    /// A phone number or email, as the user wrote it.
    public let value: String

    /// A contact.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// Why an address book file could not be read.
public enum AddressBookError: Error, Sendable, Hashable, LocalizedError {
    /// Line `line` does not have the two columns `name,value`.
    case badRow(line: Int)
    /// A quoted field that never ends, starting on line `line`.
    case unterminatedQuote(line: Int)
    /// The file is not UTF-8 text.
    case notText

    /// What is wrong, with the line number (never the row's content).
    public var errorDescription: String? {
        switch self {
        case .badRow(let line): return "line \(line): expected two columns, name,phone-or-email"
        case .unterminatedQuote(let line): return "line \(line): a quoted field never ends"
        case .notText: return "the file is not UTF-8 text"
        }
    }
}

/// Reads the sample apps' address books: CSV with the columns `name,value` (a header line
/// `name,...` is skipped; fields may be quoted with `"`, a doubled `""` inside for a quote).
/// Blank lines are ignored. Every row must have two columns: a file whose rows do not parse
/// the same way is refused with the line number, never read in part.
public enum AddressBook {
    /// The contacts of the CSV `data`.
    public static func parse(_ data: Data) throws -> [SampleContact] {
        guard let text = String(data: data, encoding: .utf8) else { throw AddressBookError.notText }
        return try parse(text)
    }

    /// The contacts of the CSV `text`.
    public static func parse(_ text: String) throws -> [SampleContact] {
        var contacts: [SampleContact] = []
        for (line, fields) in try rows(text) {
            if fields.count == 1 && fields[0].trimmingCharacters(in: .whitespaces).isEmpty { continue }
            guard fields.count == 2 else { throw AddressBookError.badRow(line: line) }
            if contacts.isEmpty && line == 1 && fields[0].lowercased() == "name" { continue }
            contacts.append(SampleContact(name: fields[0], value: fields[1]))
        }
        return contacts
    }

    /// The rows of `text` with the line each starts on (1-based).
    static func rows(_ text: String) throws -> [(Int, [String])] {
        var rows: [(Int, [String])] = []
        var fields: [String] = []
        var field = ""
        var quoted = false
        var line = 1
        var rowStart = 1
        var chars = Array(text.replacingOccurrences(of: "\r\n", with: "\n"))[...]
        while let c = chars.popFirst() {
            if quoted {
                if c == "\"" {
                    if chars.first == "\"" {
                        chars.removeFirst()
                        field.append("\"")
                    } else {
                        quoted = false
                    }
                } else {
                    if c == "\n" { line += 1 }
                    field.append(c)
                }
                continue
            }
            switch c {
            case "\"" where field.isEmpty: quoted = true
            case ",":
                fields.append(field)
                field = ""
            case "\n":
                fields.append(field)
                rows.append((rowStart, fields))
                fields = []
                field = ""
                line += 1
                rowStart = line
            default: field.append(c)
            }
        }
        if quoted { throw AddressBookError.unterminatedQuote(line: rowStart) }
        if !field.isEmpty || !fields.isEmpty {
            fields.append(field)
            rows.append((rowStart, fields))
        }
        return rows
    }
}
