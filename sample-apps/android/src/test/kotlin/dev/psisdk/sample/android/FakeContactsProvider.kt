package dev.psisdk.sample.android

import android.Manifest
import android.content.ContentProvider
import android.content.ContentValues
import android.content.pm.PackageManager
import android.database.Cursor
import android.database.MatrixCursor
import android.net.Uri
import android.provider.ContactsContract.CommonDataKinds.Email
import android.provider.ContactsContract.CommonDataKinds.Phone
import android.provider.ContactsContract.Data

/**
 * The contacts provider of the tests, registered for `ContactsContract.AUTHORITY`: serves
 * [rows] as the phone ([Phone.CONTENT_URI]) and email ([Email.CONTENT_URI]) data rows, with
 * the columns asked for, and like the real one throws [SecurityException] unless the app
 * holds `READ_CONTACTS`.
 */
class FakeContactsProvider : ContentProvider() {
    /** A data row: the contact it belongs to, the contact's display name, and the number or address. */
    data class Row(val contactId: Long, val name: String?, val kind: Contact.Kind, val value: String?)

    /** The address book. */
    val rows = mutableListOf<Row>()

    /** The URIs queried, in order. */
    val queried = mutableListOf<Uri>()

    override fun onCreate() = true

    override fun query(
        uri: Uri,
        projection: Array<out String>?,
        selection: String?,
        selectionArgs: Array<out String>?,
        sortOrder: String?,
    ): Cursor {
        if (context!!.checkSelfPermission(Manifest.permission.READ_CONTACTS) != PackageManager.PERMISSION_GRANTED) {
            throw SecurityException("Permission Denial: reading contacts requires android.permission.READ_CONTACTS")
        }
        queried += uri
        val (kind, mimeType) = when (uri) {
            Phone.CONTENT_URI -> Contact.Kind.PHONE to Phone.CONTENT_ITEM_TYPE
            Email.CONTENT_URI -> Contact.Kind.EMAIL to Email.CONTENT_ITEM_TYPE
            else -> throw IllegalArgumentException("not served here: $uri")
        }
        val columns = projection ?: arrayOf(Data._ID, Data.CONTACT_ID, Data.DISPLAY_NAME, Data.MIMETYPE, Data.DATA1)
        val cursor = MatrixCursor(columns)
        rows.filter { it.kind == kind }.forEachIndexed { i, row ->
            cursor.addRow(
                columns.map { column ->
                    when (column) {
                        Data._ID -> i + 1L
                        Data.CONTACT_ID -> row.contactId
                        Data.DISPLAY_NAME -> row.name
                        Data.MIMETYPE -> mimeType
                        Data.DATA1 -> row.value // Phone.NUMBER and Email.ADDRESS
                        else -> null
                    }
                },
            )
        }
        return cursor
    }

    override fun getType(uri: Uri): String? = null

    override fun insert(uri: Uri, values: ContentValues?): Uri = throw UnsupportedOperationException()

    override fun delete(uri: Uri, selection: String?, selectionArgs: Array<out String>?): Int =
        throw UnsupportedOperationException()

    override fun update(uri: Uri, values: ContentValues?, selection: String?, selectionArgs: Array<out String>?): Int =
        throw UnsupportedOperationException()
}
