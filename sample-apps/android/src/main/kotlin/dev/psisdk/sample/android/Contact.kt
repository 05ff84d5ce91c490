package dev.psisdk.sample.android

/**
 * One phone number or email of the device's address book, with the name of the contact it
 * belongs to (shown on screen only: names are never sent).
 *
 * @property name the contact's display name (the [value] itself when the contact has none).
 * @property value the phone number or email as stored in the address book; the SDK
 *   normalizes it.
 * @property kind phone number or email, by the row it came from.
 */
data class Contact(
    val name: String,
    val value: String,
    val kind: Kind,
) {
    /** Which `ContactsContract.CommonDataKinds` row the entry came from. */
    enum class Kind { PHONE, EMAIL }

    /** Keeps the contact's data out of logs. */
    override fun toString() = "Contact($kind)"
}
