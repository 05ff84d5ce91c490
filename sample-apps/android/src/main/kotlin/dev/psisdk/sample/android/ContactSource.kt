package dev.psisdk.sample.android

/**
 * Where the view model gets the address book: [DeviceContacts] on a device, a fake in tests.
 * [read] blocks (a content provider query); the view model calls it off the main thread.
 */
fun interface ContactSource {
    /** The address book now, or why it cannot be read. */
    fun read(): ContactsRead
}

/** What reading the address book gave. */
sealed interface ContactsRead {
    /** The phone numbers and emails, grouped by contact name (possibly none). */
    data class Entries(val contacts: List<Contact>) : ContactsRead

    /** The app may not read the contacts: `READ_CONTACTS` is not granted. */
    data object PermissionMissing : ContactsRead
}
