package dev.psisdk.sample.desktop

import ezvcard.VCard
import ezvcard.io.text.VCardReader
import java.io.IOException
import java.io.StringReader
import java.nio.ByteBuffer
import java.nio.charset.CharacterCodingException
import java.nio.charset.Charset
import java.nio.charset.CodingErrorAction
import java.nio.file.Files
import java.nio.file.Path

/**
 * An address book read from a file: the phone numbers and emails to match, each with the
 * name of the contact it belongs to (for display only: names are never sent).
 *
 * Two formats are read:
 * - **vCard** (`.vcf`, versions 2.1, 3.0 and 4.0, as phones and mail clients export them),
 *   parsed with ez-vcard: every `TEL` and `EMAIL` of a card becomes an [Entry] carrying the
 *   card's display name.
 * - **CSV**: one or more columns of phone numbers or emails, optionally a name column, with
 *   or without a header row; `,`, `;` or tab separated, RFC 4180 quoting.
 *
 * Nothing is dropped silently: a card or row with a name but neither a phone number nor an
 * email becomes an entry with an empty value, which the SDK then reports as rejected.
 *
 * @property source where the entries come from (the file name), for display.
 * @property format the format that was read.
 * @property entries the entries, in file order.
 * @property records the cards (vCard) or data rows (CSV) read.
 */
class AddressBook(
    val source: String,
    val format: Format,
    val entries: List<Entry>,
    val records: Int,
) {
    /** The file formats [AddressBook] reads. */
    enum class Format { CSV, VCARD }

    /** What an entry looks like, by its shape (the SDK decides whether it is valid). */
    enum class Kind { PHONE, EMAIL }

    /**
     * One phone number or email of the address book.
     *
     * @property name the contact's display name, if the file gives one.
     * @property value the phone number or email as written in the file (may be empty).
     * @property kind phone number or email, by its shape.
     * @property type the file's own type for it, such as `cell` or `work` (vCard `TYPE`).
     */
    data class Entry(
        val name: String?,
        val value: String,
        val kind: Kind,
        val type: String? = null,
    ) {
        /** Keeps the contact's data out of logs. */
        override fun toString() = "Entry($kind)"
    }

    override fun toString() = "AddressBook($source, $format, ${entries.size} entries from $records records)"

    companion object {
        /** Largest file read, so that a wrong file cannot exhaust the memory. */
        const val MAX_FILE_BYTES: Long = 32L shl 20

        /**
         * Reads the address book at [path]: vCard if the content starts with `BEGIN:VCARD`
         * or the name ends with `.vcf` / `.vcard`, CSV otherwise.
         *
         * @throws AddressBookException if the file cannot be read or is not an address book.
         */
        fun load(path: Path): AddressBook {
            val name = path.fileName?.toString() ?: path.toString()
            val bytes = try {
                val size = Files.size(path)
                if (size > MAX_FILE_BYTES) {
                    throw AddressBookException("$name is too large (${size shr 20} MiB, at most ${MAX_FILE_BYTES shr 20} MiB)")
                }
                Files.readAllBytes(path)
            } catch (e: IOException) {
                throw AddressBookException("$name cannot be read (${e.javaClass.simpleName})", e)
            }
            val text = decode(bytes)
            val vcard = looksLikeVCard(text) ||
                name.lowercase().let { it.endsWith(".vcf") || it.endsWith(".vcard") }
            return if (vcard) parseVCard(text, name) else parseCsv(text, name)
        }

        /**
         * Parses vCard [text] (one or more cards, any version).
         *
         * @throws AddressBookException if it holds no card.
         */
        fun parseVCard(text: String, source: String = "vCard"): AddressBook {
            if (text.isBlank()) throw AddressBookException("$source is empty")
            val cards = try {
                VCardReader(StringReader(stripBom(text))).use { it.readAll() }
            } catch (e: IOException) {
                throw AddressBookException("$source is not a readable vCard file (${e.javaClass.simpleName})", e)
            } catch (e: RuntimeException) {
                // ez-vcard is lenient; anything it still throws means the file is unusable.
                throw AddressBookException("$source is not a readable vCard file (${e.javaClass.simpleName})", e)
            }
            if (cards.isEmpty()) {
                throw AddressBookException("$source contains no vCard (no BEGIN:VCARD ... END:VCARD block)")
            }
            return AddressBook(source, Format.VCARD, cards.flatMap(::entriesOf), cards.size)
        }

        /**
         * Parses CSV [text]; see [AddressBook] for the columns it understands.
         *
         * @throws AddressBookException if it is empty, has an unclosed quote, or has no
         *   column that can hold phone numbers or emails.
         */
        fun parseCsv(text: String, source: String = "CSV"): AddressBook {
            val rows = CsvParser.parse(stripBom(text), source)
                .filter { row -> row.any { it.isNotBlank() } }
            if (rows.isEmpty()) throw AddressBookException("$source is empty")
            val width = rows.maxOf { it.size }
            val header = rows.first().takeIf { isHeader(it) }
            val data = if (header != null) rows.drop(1) else rows
            if (data.isEmpty()) throw AddressBookException("$source has a header row but no contacts")

            val columns = header?.let { headerColumns(it) } ?: dataColumns(data, width)
                ?: throw AddressBookException(
                    "$source has no column of phone numbers or emails " +
                        "(name a column \"phone\" or \"email\" in a header row)",
                )
            val entries = data.flatMap { row ->
                val name = columns.name?.let { row.getOrNull(it) }?.trim()?.ifEmpty { null }
                val values = columns.identifiers.mapNotNull { row.getOrNull(it)?.trim()?.ifEmpty { null } }
                if (values.isEmpty()) listOf(Entry(name, "", Kind.PHONE))
                else values.map { Entry(name, it, kindOf(it)) }
            }
            return AddressBook(source, Format.CSV, entries, data.size)
        }

        // --- vCard ---------------------------------------------------------------------

        private fun entriesOf(card: VCard): List<Entry> {
            val name = displayName(card)
            val phones = card.telephoneNumbers.mapNotNull { tel ->
                val number = tel.text ?: tel.uri?.let { uri ->
                    uri.number + (uri.extension?.let { " ext $it" } ?: "")
                }
                number?.trim()?.takeIf { it.isNotEmpty() }?.let {
                    Entry(name, it, Kind.PHONE, typeOf(tel.types.map { t -> t.value }))
                }
            }
            val emails = card.emails.mapNotNull { email ->
                email.value?.trim()?.takeIf { it.isNotEmpty() }?.let {
                    Entry(name, it, Kind.EMAIL, typeOf(email.types.map { t -> t.value }))
                }
            }
            return (phones + emails).ifEmpty { listOf(Entry(name, "", Kind.PHONE)) }
        }

        /** The first `TYPE` that tells something (`cell`, `work`), not `internet` or `pref`. */
        private fun typeOf(types: List<String?>): String? =
            types.mapNotNull { it?.lowercase() }.firstOrNull { it !in UNINFORMATIVE_TYPES }

        private val UNINFORMATIVE_TYPES = setOf("internet", "voice", "pref", "x400")

        /** `FN`, else the structured name `N`, else the nickname or organization. */
        private fun displayName(card: VCard): String? {
            card.formattedName?.value?.trim()?.takeIf { it.isNotEmpty() }?.let { return it }
            card.structuredName?.let { n ->
                listOfNotNull(n.prefixes.joinToString(" "), n.given, n.additionalNames.joinToString(" "), n.family)
                    .map { it.trim() }.filter { it.isNotEmpty() }.joinToString(" ")
                    .takeIf { it.isNotEmpty() }?.let { return it }
            }
            card.nickname?.values?.firstOrNull()?.trim()?.takeIf { it.isNotEmpty() }?.let { return it }
            return card.organization?.values?.firstOrNull()?.trim()?.takeIf { it.isNotEmpty() }
        }

        private fun looksLikeVCard(text: String) =
            stripBom(text).trimStart().startsWith("BEGIN:VCARD", ignoreCase = true)

        // --- CSV -----------------------------------------------------------------------

        /** The columns of a CSV file that are read: identifiers, and the name. */
        private class Columns(val identifiers: List<Int>, val name: Int?)

        private val IDENTIFIER_HEADER =
            Regex("phone|mobile|cell|tel|e-?mail|mail|number|contact|identifier|msisdn|value|^id$", RegexOption.IGNORE_CASE)
        private val NOT_IDENTIFIER_HEADER = Regex("type|label|kind|note", RegexOption.IGNORE_CASE)
        private val NAME_HEADER = Regex("name", RegexOption.IGNORE_CASE)
        private val EXACT_NAME_HEADER =
            Regex("^(name|full ?name|display ?name|contact ?name)$", RegexOption.IGNORE_CASE)

        /** A cell that could be a phone number or an email: an `@`, or three digits. */
        private fun looksLikeIdentifier(cell: String) = '@' in cell || cell.count { it.isDigit() } >= 3

        private fun kindOf(value: String) = if ('@' in value) Kind.EMAIL else Kind.PHONE

        /**
         * The first row is a header if none of its cells looks like a phone number or email
         * and one of them is a known column name.
         */
        private fun isHeader(row: List<String>) =
            row.none { looksLikeIdentifier(it) } &&
                row.any { IDENTIFIER_HEADER.containsMatchIn(it) || NAME_HEADER.containsMatchIn(it) }

        private fun headerColumns(header: List<String>): Columns? {
            val cells = header.map { it.trim() }
            val identifiers = cells.indices.filter {
                IDENTIFIER_HEADER.containsMatchIn(cells[it]) && !NOT_IDENTIFIER_HEADER.containsMatchIn(cells[it]) &&
                    !NAME_HEADER.containsMatchIn(cells[it])
            }
            if (identifiers.isEmpty()) return null
            val name = cells.indices.firstOrNull { EXACT_NAME_HEADER.matches(cells[it]) }
                ?: cells.indices.firstOrNull { NAME_HEADER.containsMatchIn(cells[it]) && it !in identifiers }
            return Columns(identifiers, name)
        }

        /**
         * Without a header: the columns where most cells look like phone numbers or emails,
         * and the first other non-empty column as the name. A single column is read as
         * identifiers whatever it holds (the SDK reports the invalid ones).
         */
        private fun dataColumns(rows: List<List<String>>, width: Int): Columns? {
            val identifiers = (0 until width).filter { col ->
                val cells = rows.mapNotNull { it.getOrNull(col)?.trim() }.filter { it.isNotEmpty() }
                cells.isNotEmpty() && cells.count(::looksLikeIdentifier) * 2 >= cells.size
            }
            if (identifiers.isEmpty()) return if (width == 1) Columns(listOf(0), null) else null
            val name = (0 until width).firstOrNull { col ->
                col !in identifiers && rows.any { !it.getOrNull(col).isNullOrBlank() }
            }
            return Columns(identifiers, name)
        }

        // --- text ----------------------------------------------------------------------

        /** UTF-8 if the bytes are valid UTF-8, else Windows-1252 (older spreadsheet exports). */
        private fun decode(bytes: ByteArray): String = try {
            Charsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(ByteBuffer.wrap(bytes)).toString()
        } catch (_: CharacterCodingException) {
            String(bytes, Charset.forName("windows-1252"))
        }

        private fun stripBom(text: String) = text.removePrefix("\uFEFF")
    }
}

/**
 * A small RFC 4180 CSV reader: quoted fields (with `""` for a quote, and line breaks
 * inside), `\n` or `\r\n` line ends, and `,`, `;` or tab as separator (the one found
 * outside quotes on the most lines of the file).
 */
private object CsvParser {
    /**
     * The rows of [text].
     *
     * @throws AddressBookException if a quoted field is not closed, or text follows a
     *   closing quote; the message gives the line number (never the content).
     */
    fun parse(text: String, source: String): List<List<String>> {
        val separator = separatorOf(text)
        val rows = mutableListOf<List<String>>()
        var row = mutableListOf<String>()
        val field = StringBuilder()
        var line = 1
        var i = 0
        var quoted = false
        var quoteLine = 0
        var afterQuote = false
        while (i < text.length) {
            val c = text[i]
            if (quoted) {
                when {
                    c == '"' && text.getOrNull(i + 1) == '"' -> { field.append('"'); i++ }
                    c == '"' -> { quoted = false; afterQuote = true }
                    else -> { if (c == '\n') line++; field.append(c) }
                }
            } else {
                when (c) {
                    separator -> { row.add(field.toString()); field.clear(); afterQuote = false }
                    '\n', '\r' -> {
                        if (c == '\r' && text.getOrNull(i + 1) == '\n') i++
                        row.add(field.toString()); field.clear(); afterQuote = false
                        rows.add(row); row = mutableListOf()
                        line++
                    }
                    '"' -> when {
                        afterQuote -> throw AddressBookException("$source line $line: text after a closing quote")
                        // A quote inside an unquoted field (`Jo "JJ" Doe`) is kept as written.
                        field.isNotBlank() -> field.append(c)
                        else -> { field.clear(); quoted = true; quoteLine = line }
                    }
                    else -> {
                        if (afterQuote && !c.isWhitespace()) {
                            throw AddressBookException("$source line $line: text after a closing quote")
                        }
                        if (!afterQuote) field.append(c)
                    }
                }
            }
            i++
        }
        if (quoted) throw AddressBookException("$source line $quoteLine: a quoted field is not closed")
        if (field.isNotEmpty() || row.isNotEmpty()) { row.add(field.toString()); rows.add(row) }
        return rows
    }

    /**
     * The separator of [text], decided by all of its lines (as `psi import` decides a file's
     * format from all of its lines, not the first): of `,`, `;` and tab, the one found
     * outside quotes on the most lines, `,` on a tie or when none is.
     */
    private fun separatorOf(text: String): Char {
        val candidates = listOf(',', ';', '\t')
        val lines = mutableMapOf(',' to 0, ';' to 0, '\t' to 0)
        val onThisLine = mutableSetOf<Char>()
        var quoted = false
        for (c in text) {
            when {
                c == '"' -> quoted = !quoted
                quoted -> Unit
                c == '\n' || c == '\r' -> {
                    for (sep in onThisLine) lines[sep] = lines.getValue(sep) + 1
                    onThisLine.clear()
                }
                c in candidates -> onThisLine.add(c)
            }
        }
        for (sep in onThisLine) lines[sep] = lines.getValue(sep) + 1
        return candidates.maxWith(compareBy<Char> { lines.getValue(it) }.thenBy { if (it == ',') 1 else 0 })
    }
}
