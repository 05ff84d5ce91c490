package dev.psisdk.sample.desktop

import dev.psisdk.sample.desktop.AddressBook.Entry
import dev.psisdk.sample.desktop.AddressBook.Kind.EMAIL
import dev.psisdk.sample.desktop.AddressBook.Kind.PHONE
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.TimeUnit
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.api.io.TempDir

/** Reading address books: CSV with and without header, vCard 2.1 / 3.0 / 4.0, bad files. */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class AddressBookTest {
    @TempDir
    lateinit var dir: Path

    private fun file(name: String, text: String): Path = dir.resolve(name).also { Files.writeString(it, text) }

    // --- CSV -----------------------------------------------------------------------------

    @Test
    fun `CSV with a header row reads the name and every phone and email column`() {
        val book = AddressBook.parseCsv(
            """
            Name,Phone,Email
            Alice Walker,+1 415 555 0101,alice@example.com
            "Ruiz, Hector",,hector@example.org
            Dan Okafor,(415) 555-0104,
            Jamal Reed,,
            """.trimIndent(),
        )
        assertEquals(AddressBook.Format.CSV, book.format)
        assertEquals(4, book.records)
        assertEquals(
            listOf(
                Entry("Alice Walker", "+1 415 555 0101", PHONE),
                Entry("Alice Walker", "alice@example.com", EMAIL),
                Entry("Ruiz, Hector", "hector@example.org", EMAIL),
                Entry("Dan Okafor", "(415) 555-0104", PHONE),
                // A contact without phone or email is kept: the SDK reports it as EMPTY.
                Entry("Jamal Reed", "", PHONE),
            ),
            book.entries,
        )
    }

    @Test
    fun `CSV without a header, a single column of identifiers`() {
        val book = AddressBook.parseCsv("+1 415 555 0101\nalice@example.com\n\nnot a contact\n")
        assertEquals(listOf("+1 415 555 0101", "alice@example.com", "not a contact"), book.entries.map { it.value })
        assertTrue(book.entries.all { it.name == null })
        assertEquals(listOf(PHONE, EMAIL, PHONE), book.entries.map { it.kind })
    }

    @Test
    fun `CSV without a header finds the identifier column and takes the other as the name`() {
        val book = AddressBook.parseCsv("Alice Walker,alice@example.com\nBob Martin,415-555-0102\nCarol,\n")
        assertEquals(
            listOf(
                Entry("Alice Walker", "alice@example.com", EMAIL),
                Entry("Bob Martin", "415-555-0102", PHONE),
                Entry("Carol", "", PHONE),
            ),
            book.entries,
        )
    }

    @Test
    fun `semicolon CSV with a byte order mark, CRLF and quoted fields as spreadsheets write them`() {
        val text = "\uFEFFFull name;Mobile;E-mail\r\n\"O\"\"Neil; Kate\";+1-415-555-0111;\"kate@example.com\"\r\n"
        val book = AddressBook.parseCsv(text)
        assertEquals(
            listOf(
                Entry("O\"Neil; Kate", "+1-415-555-0111", PHONE),
                Entry("O\"Neil; Kate", "kate@example.com", EMAIL),
            ),
            book.entries,
        )
    }

    @Test
    fun `the separator is decided by all rows, not the first`() {
        // The first row holds a comma and a semicolon once each (a tie, which alone would
        // give `,`); every row has a semicolon: the file is semicolon-separated.
        val text = "Walker, Alice;+1 415 555 0101\nBob Martin;+1 415 555 0102\nCarol;carol@example.com\n"
        val book = AddressBook.parseCsv(text)
        assertEquals(
            listOf(
                Entry("Walker, Alice", "+1 415 555 0101", PHONE),
                Entry("Bob Martin", "+1 415 555 0102", PHONE),
                Entry("Carol", "carol@example.com", EMAIL),
            ),
            book.entries,
        )
    }

    @Test
    fun `a Google Contacts style header picks the value columns, not the type columns`() {
        val book = AddressBook.parseCsv(
            "Given Name,Family Name,E-mail 1 - Type,E-mail 1 - Value,Phone 1 - Type,Phone 1 - Value\n" +
                "Liam,Novak,* Work,liam@example.net,Mobile,+1 415 555 0112\n",
        )
        assertEquals(
            listOf(Entry("Liam", "liam@example.net", EMAIL), Entry("Liam", "+1 415 555 0112", PHONE)),
            book.entries,
        )
    }

    // --- vCard ---------------------------------------------------------------------------

    @Test
    fun `vCard 3_0 with several cards and several TEL and EMAIL per card`() {
        val book = AddressBook.parseVCard(
            """
            BEGIN:VCARD
            VERSION:3.0
            N:Walker;Alice;;;
            FN:Alice Walker
            TEL;TYPE=CELL:+1 415 555 0101
            TEL;TYPE=WORK,VOICE:(415) 555-0150
            EMAIL;TYPE=INTERNET,HOME:alice@example.com
            EMAIL;TYPE=INTERNET,WORK:alice.walker@work.example.com
            END:VCARD
            BEGIN:VCARD
            VERSION:3.0
            N:O'Neil;Kate;;;
            TEL;TYPE=HOME:+1-415-555-0111
            END:VCARD
            BEGIN:VCARD
            VERSION:3.0
            FN:Jamal Reed
            ORG:Reed Plumbing
            END:VCARD
            """.trimIndent().replace("\n", "\r\n"),
        )
        assertEquals(AddressBook.Format.VCARD, book.format)
        assertEquals(3, book.records)
        assertEquals(
            listOf(
                Entry("Alice Walker", "+1 415 555 0101", PHONE, "cell"),
                Entry("Alice Walker", "(415) 555-0150", PHONE, "work"),
                Entry("Alice Walker", "alice@example.com", EMAIL, "home"),
                Entry("Alice Walker", "alice.walker@work.example.com", EMAIL, "work"),
                // No FN: the name comes from N.
                Entry("Kate O'Neil", "+1-415-555-0111", PHONE, "home"),
                // No phone or email: kept, so that it shows as rejected (EMPTY).
                Entry("Jamal Reed", "", PHONE),
            ),
            book.entries,
        )
    }

    @Test
    fun `vCard 4_0 with tel URIs, folded lines and several emails`() {
        val book = AddressBook.parseVCard(
            """
            BEGIN:VCARD
            VERSION:4.0
            FN:Liam Novak
            N:Novak;Liam;;;
            TEL;VALUE=uri;TYPE="cell,voice";PREF=1:tel:+1-415-555-0112
            TEL;VALUE=uri;TYPE=work:tel:+1-415-555-0180;ext=42
            EMAIL;TYPE=home:liam@example.net
            EMAIL;TYPE=work:liam.novak@exa
             mple.com
            END:VCARD
            BEGIN:VCARD
            VERSION:4.0
            FN:Ivy Chen
            EMAIL:IVY.CHEN@Example.COM
            TEL;VALUE=text:+1 415 555 0109
            END:VCARD
            """.trimIndent(),
        )
        assertEquals(2, book.records)
        assertEquals(
            listOf(
                Entry("Liam Novak", "+1-415-555-0112", PHONE, "cell"),
                Entry("Liam Novak", "+1-415-555-0180 ext 42", PHONE, "work"),
                Entry("Liam Novak", "liam@example.net", EMAIL, "home"),
                Entry("Liam Novak", "liam.novak@example.com", EMAIL, "work"),
                Entry("Ivy Chen", "+1 415 555 0109", PHONE),
                Entry("Ivy Chen", "IVY.CHEN@Example.COM", EMAIL),
            ),
            book.entries,
        )
    }

    @Test
    fun `vCard 2_1 as older phones export it, with a quoted-printable name`() {
        val book = AddressBook.parseVCard(
            "BEGIN:VCARD\r\nVERSION:2.1\r\nN;CHARSET=UTF-8;ENCODING=QUOTED-PRINTABLE:M=C3=BCller;J=C3=BCrgen;;;\r\n" +
                "FN;CHARSET=UTF-8;ENCODING=QUOTED-PRINTABLE:J=C3=BCrgen M=C3=BCller\r\n" +
                "TEL;CELL;PREF:+14155550113\r\nTEL;HOME:+14155550114\r\nEMAIL;INTERNET:juergen@example.com\r\nEND:VCARD\r\n",
        )
        assertEquals(listOf("Jürgen Müller"), book.entries.map { it.name }.distinct())
        assertEquals(listOf("+14155550113", "+14155550114", "juergen@example.com"), book.entries.map { it.value })
    }

    // --- files and errors ----------------------------------------------------------------

    @Test
    fun `load tells vCard from CSV by content and extension`() {
        val vcf = file("export.txt", "BEGIN:VCARD\nVERSION:3.0\nFN:A\nEMAIL:a@example.com\nEND:VCARD\n")
        assertEquals(AddressBook.Format.VCARD, AddressBook.load(vcf).format)
        val csv = file("book.csv", "email\na@example.com\n")
        assertEquals(AddressBook.Format.CSV, AddressBook.load(csv).format)
        assertEquals("book.csv", AddressBook.load(csv).source)
    }

    @Test
    fun `a Windows-1252 CSV is still read`() {
        val path = dir.resolve("latin.csv")
        Files.write(path, "Name,Email\nJürgen,j@example.com\n".toByteArray(charset("windows-1252")))
        assertEquals(listOf(Entry("Jürgen", "j@example.com", EMAIL)), AddressBook.load(path).entries)
    }

    @Test
    fun `malformed files give a clear error, never a crash or the file's content`() {
        val unclosed = assertThrows<AddressBookException> {
            AddressBook.load(file("bad.csv", "name,phone\nAlice,+1 415 555 0101\n\"Bob,+1 415 555 0102\n"))
        }
        assertEquals("bad.csv line 3: a quoted field is not closed", unclosed.message)

        val after = assertThrows<AddressBookException> { AddressBook.parseCsv("\"Alice\"x,+1 415 555 0101", "a.csv") }
        assertEquals("a.csv line 1: text after a closing quote", after.message)

        val empty = assertThrows<AddressBookException> { AddressBook.load(file("empty.csv", "\n \n")) }
        assertEquals("empty.csv is empty", empty.message)

        val noCard = assertThrows<AddressBookException> { AddressBook.load(file("notes.vcf", "hello\nworld\n")) }
        assertEquals("notes.vcf contains no vCard (no BEGIN:VCARD ... END:VCARD block)", noCard.message)

        val noColumn = assertThrows<AddressBookException> {
            AddressBook.parseCsv("Alice,Walker,friend\nBob,Martin,colleague\n", "names.csv")
        }
        assertTrue(noColumn.message!!.startsWith("names.csv has no column of phone numbers or emails"))
        assertFalse("Alice" in noColumn.message!!)

        val headerOnly = assertThrows<AddressBookException> { AddressBook.parseCsv("name,email\n", "h.csv") }
        assertEquals("h.csv has a header row but no contacts", headerOnly.message)

        val binary = dir.resolve("photo.vcf")
        Files.write(binary, ByteArray(4096) { (it * 31 + 7).toByte() })
        assertThrows<AddressBookException> { AddressBook.load(binary) }

        val missing = assertThrows<AddressBookException> { AddressBook.load(dir.resolve("missing.csv")) }
        assertEquals("missing.csv cannot be read (NoSuchFileException)", missing.message)
    }

    @Test
    fun `a broken card among good ones does not lose the others`() {
        val book = AddressBook.parseVCard(
            "BEGIN:VCARD\nVERSION:3.0\nFN:Good\nTEL:+14155550101\nEND:VCARD\n" +
                "BEGIN:VCARD\nVERSION:3.0\nthis line is not a property\nFN:Odd\nEMAIL:odd@example.com\nEND:VCARD\n",
        )
        assertEquals(listOf("+14155550101", "odd@example.com"), book.entries.map { it.value })
    }

    @Test
    fun `the bundled samples parse`() {
        val samples = Path.of(System.getProperty("samples.dir") ?: "samples")
        val vcf = AddressBook.load(samples.resolve("contacts.vcf"))
        assertEquals(12, vcf.records)
        assertEquals(22, vcf.entries.size)
        val csv = AddressBook.load(samples.resolve("contacts.csv"))
        assertEquals(10, csv.records)
        assertEquals(15, csv.entries.size)
    }

    @Test
    fun `entries keep contacts out of logs`() {
        val entry = Entry("Alice Walker", "alice@example.com", EMAIL)
        assertFalse("alice" in entry.toString().lowercase())
    }
}
