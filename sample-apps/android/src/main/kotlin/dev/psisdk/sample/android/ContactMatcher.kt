package dev.psisdk.sample.android

import dev.psisdk.ContactDiscoveryException
import dev.psisdk.Progress
import dev.psisdk.Protocol

/**
 * How the view model matches: [SdkMatcher] (the SDK) in the app, a fake in tests.
 */
fun interface ContactMatcher {
    /**
     * Matches [contacts] against the server at [serverUrl], calling [onProgress] as the run
     * enters each phase (from any thread).
     *
     * @throws ContactDiscoveryException when the run fails.
     */
    suspend fun match(serverUrl: String, contacts: List<Contact>, onProgress: (Progress) -> Unit): MatchOutcome
}

/**
 * What a run found, as the screen shows it.
 *
 * @property matches the contacts in the server's registry, in address book order.
 * @property protocol the protocol that ran.
 * @property rejectedCount the entries that are not a valid phone number or email (not sent).
 */
data class MatchOutcome(
    val matches: List<Match>,
    val protocol: Protocol,
    val rejectedCount: Int,
)

/**
 * A contact in the registry.
 *
 * @property contact the address book entry.
 * @property identifier its normalized form (E.164 number or lower-case email).
 * @property label its label in the registry (a display name, a user id), if it has one.
 */
data class Match(
    val contact: Contact,
    val identifier: String,
    val label: String?,
) {
    /** Keeps the contact's data out of logs. */
    override fun toString() = "Match($contact)"
}
