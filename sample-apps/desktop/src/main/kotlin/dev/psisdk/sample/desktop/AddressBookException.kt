package dev.psisdk.sample.desktop

/**
 * An address book file that cannot be used: unreadable, empty, malformed, or without any
 * phone number or email. The [message] is meant for the user; it names the file and, for
 * CSV, the line, but never repeats the file's content.
 */
class AddressBookException(message: String, cause: Throwable? = null) : Exception(message, cause)
