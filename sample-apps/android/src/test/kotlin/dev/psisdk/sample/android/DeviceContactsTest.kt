package dev.psisdk.sample.android

import android.Manifest
import android.app.Application
import android.provider.ContactsContract
import android.provider.ContactsContract.CommonDataKinds.Email
import android.provider.ContactsContract.CommonDataKinds.Phone
import dev.psisdk.sample.android.Contact.Kind.EMAIL
import dev.psisdk.sample.android.Contact.Kind.PHONE
import dev.psisdk.sample.android.FakeContactsProvider.Row
import org.junit.Assert.assertEquals
import org.junit.Before
import org.junit.Test
import org.junit.runner.RunWith
import org.robolectric.Robolectric
import org.robolectric.RobolectricTestRunner
import org.robolectric.RuntimeEnvironment
import org.robolectric.Shadows.shadowOf
import org.robolectric.annotation.Config

/** [DeviceContacts] on Robolectric's Android 14, against a contacts provider of the test's own. */
@RunWith(RobolectricTestRunner::class)
@Config(sdk = [34])
class DeviceContactsTest {
    private val app: Application get() = RuntimeEnvironment.getApplication()
    private lateinit var provider: FakeContactsProvider

    @Before
    fun registerProvider() {
        provider = Robolectric.buildContentProvider(FakeContactsProvider::class.java)
            .create(ContactsContract.AUTHORITY)
            .get()
    }

    private fun read() = DeviceContacts(app.contentResolver).read()

    @Test
    fun readsEveryPhoneNumberAndEmailWithItsContactsName() {
        shadowOf(app).grantPermissions(Manifest.permission.READ_CONTACTS)
        provider.rows += listOf(
            Row(1, "Carol Diaz", EMAIL, "CAROL@Example.com"),
            Row(2, "alice Walker", PHONE, "+1 415 555 0101"),
            Row(2, "alice Walker", EMAIL, "alice@example.org"),
            Row(3, "Bob Martin", PHONE, "415-555-0102"),
            Row(3, "Bob Martin", PHONE, " +1 415 555 0190 "),
            Row(4, null, PHONE, "+44 20 7946 0000"), // a contact without a name
            Row(5, "Dan Blank", PHONE, "  "), // nothing to match: skipped
            Row(6, "Erin Empty", EMAIL, null),
        )

        val read = read()

        // Sorted by name, case-insensitively; a contact's numbers before its emails.
        assertEquals(
            ContactsRead.Entries(
                listOf(
                    Contact("+44 20 7946 0000", "+44 20 7946 0000", PHONE),
                    Contact("alice Walker", "+1 415 555 0101", PHONE),
                    Contact("alice Walker", "alice@example.org", EMAIL),
                    Contact("Bob Martin", "415-555-0102", PHONE),
                    Contact("Bob Martin", "+1 415 555 0190", PHONE),
                    Contact("Carol Diaz", "CAROL@Example.com", EMAIL),
                ),
            ),
            read,
        )
        assertEquals(listOf(Phone.CONTENT_URI, Email.CONTENT_URI), provider.queried)
    }

    @Test
    fun withoutReadContactsThePermissionIsReportedMissing() {
        shadowOf(app).denyPermissions(Manifest.permission.READ_CONTACTS)
        provider.rows += Row(1, "Alice Walker", PHONE, "+1 415 555 0101")

        assertEquals(ContactsRead.PermissionMissing, read())
        assertEquals(emptyList<Any>(), provider.queried)
    }

    @Test
    fun anEmptyAddressBookReadsAsNoEntries() {
        shadowOf(app).grantPermissions(Manifest.permission.READ_CONTACTS)

        assertEquals(ContactsRead.Entries(emptyList()), read())
        assertEquals(listOf(Phone.CONTENT_URI, Email.CONTENT_URI), provider.queried)
    }
}
