package dev.psisdk.sample.android

import android.content.ContentResolver
import android.net.Uri
import android.provider.ContactsContract.CommonDataKinds.Email
import android.provider.ContactsContract.CommonDataKinds.Phone

/**
 * The device's address book through `ContactsContract`: every phone number
 * ([Phone.CONTENT_URI]) and email ([Email.CONTENT_URI]) data row, with its contact's display
 * name. Rows without a number or address are skipped (there is nothing to match).
 *
 * Without the `READ_CONTACTS` permission the contacts provider throws [SecurityException];
 * [read] then returns [ContactsRead.PermissionMissing] (asking for the permission is the
 * Activity's job). A device without a contacts provider (the query returns `null`) reads as
 * an empty address book.
 */
class DeviceContacts(private val resolver: ContentResolver) : ContactSource {
    override fun read(): ContactsRead = try {
        val contacts = rows(Phone.CONTENT_URI, Phone.NUMBER, Contact.Kind.PHONE) +
            rows(Email.CONTENT_URI, Email.ADDRESS, Contact.Kind.EMAIL)
        // Stable: a contact's numbers stay in the provider's order, before its emails.
        ContactsRead.Entries(contacts.sortedWith(compareBy(String.CASE_INSENSITIVE_ORDER) { it.name }))
    } catch (e: SecurityException) {
        ContactsRead.PermissionMissing
    }

    /** The data rows of [uri]: the display name and the [valueColumn] of each. */
    private fun rows(uri: Uri, valueColumn: String, kind: Contact.Kind): List<Contact> {
        val projection = arrayOf(DISPLAY_NAME, valueColumn)
        val cursor = resolver.query(uri, projection, null, null, null) ?: return emptyList()
        return cursor.use {
            val nameAt = it.getColumnIndexOrThrow(DISPLAY_NAME)
            val valueAt = it.getColumnIndexOrThrow(valueColumn)
            buildList {
                while (it.moveToNext()) {
                    val value = it.getString(valueAt)?.trim().orEmpty()
                    if (value.isEmpty()) continue
                    val name = it.getString(nameAt)?.trim().orEmpty().ifEmpty { value }
                    add(Contact(name, value, kind))
                }
            }
        }
    }

    private companion object {
        /** The same column for phone and email rows (`ContactsContract.Contacts.DISPLAY_NAME`). */
        const val DISPLAY_NAME = Phone.DISPLAY_NAME
    }
}
