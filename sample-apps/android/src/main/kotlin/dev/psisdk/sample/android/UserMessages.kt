package dev.psisdk.sample.android

import dev.psisdk.ContactDiscoveryException
import dev.psisdk.Phase
import dev.psisdk.Progress
import dev.psisdk.Protocol

/**
 * The texts the user reads: what the app is doing, what a run found, and errors chosen from
 * the exception's type (never from contacts). No Android classes here, so they are tested
 * on the JVM.
 */
object UserMessages {
    /** Before the first run. */
    const val IDLE = "Press Match to find which of your contacts use this service."

    /** `READ_CONTACTS` is not granted. */
    const val NEEDS_PERMISSION =
        "The app needs access to your contacts to match them. Press Match to allow it, " +
            "or allow Contacts in the app's settings."

    /** Reading the address book. */
    const val LOADING = "Reading your contacts…"

    /** The address book has no phone number or email. */
    const val EMPTY_ADDRESS_BOOK = "Your address book has no phone numbers or emails to match."

    /** No server address typed. */
    const val NO_SERVER = "Enter the server's address (https://…) first."

    /** The status line for [state]. */
    fun status(state: UiState): String = when (state) {
        UiState.Idle -> IDLE
        UiState.NeedsPermission -> NEEDS_PERMISSION
        UiState.Loading -> LOADING
        is UiState.Matching -> progress(state.progress)
        is UiState.Done -> done(state.matches.size, state.protocol, state.rejectedCount)
        is UiState.Failed -> state.message
    }

    /** What went wrong with a run against [serverUrl], and what the user can do. */
    fun error(e: Throwable, serverUrl: String): String = when (e) {
        is ContactDiscoveryException.InvalidInput ->
            "Cannot match: ${e.message}. Check the server address and your contacts."
        is ContactDiscoveryException.Network ->
            if (e.isTimeout) "The server at $serverUrl did not answer in time. Try again later."
            else "Cannot reach the server at $serverUrl. Check your connection and the address."
        is ContactDiscoveryException.Unauthorized ->
            "The server did not accept this app's access. Ask the server's operator for a new token."
        is ContactDiscoveryException.RateLimited ->
            "The server is busy with too many requests. " +
                (e.retryAfterSeconds?.let { "Try again in $it s." } ?: "Try again later.")
        is ContactDiscoveryException.Server ->
            "The server answered with an error (HTTP ${e.status})." +
                if (e.isRetryable) " Try again later." else ""
        is ContactDiscoveryException.ProtocolViolation ->
            if (e.isRetryable) "The server's directory changed during the run. Match again."
            else "The server's answer could not be understood: is it a compatible psi server?"
        is ContactDiscoveryException.Internal ->
            "Something went wrong inside the app (${e.message}). Please report it."
        else -> "Unexpected error (${e.javaClass.simpleName})."
    }

    /** The status line during a run; [progress] is null before the first phase. */
    fun progress(progress: Progress?): String {
        progress?.retry?.let { retry ->
            val seconds = (retry.waitMillis + 999) / 1000
            return "The server did not answer as expected; trying again in $seconds s " +
                "(attempt ${retry.attempt + 1} of ${retry.retries + 1})…"
        }
        val what = when (progress?.phase) {
            null -> "Starting"
            Phase.CREATE_SESSION -> "Connecting to the server"
            Phase.CLIENT_START -> "Preparing your contacts (blinding)"
            Phase.ROUND_TRIP, Phase.SERVER_HELLO, Phase.SERVER_CHUNK, Phase.SERVER_OUTPUTS ->
                "Waiting for the server"
            Phase.CLIENT_FINALIZE -> "Unblinding the server's answer"
            Phase.CLIENT_SETUP -> "Setting up the oblivious transfer"
            Phase.CLIENT_CHUNK -> "Sending the next part"
            Phase.ENCODED_SET -> "Getting the server's directory"
            Phase.CLIENT_FINISH -> "Comparing"
            Phase.LABELS -> "Fetching the names of the matches"
            Phase.OTHER -> "Working"
        }
        val round = progress?.round ?: 0
        return if (round > 0) "Matching: $what (round trip $round)…" else "Matching: $what…"
    }

    /** The protocol's name as the user sees it. */
    fun protocolName(protocol: Protocol) = when (protocol) {
        Protocol.DH -> "DH-PSI"
        Protocol.OT -> "OT-PSI"
        Protocol.CM20 -> "CM20-PSI"
        Protocol.GBF -> "GBF-PSI"
    }

    /** The status line after a run. */
    fun done(matches: Int, protocol: Protocol, rejected: Int): String {
        val found = when (matches) {
            0 -> "None of your contacts use this service"
            1 -> "1 of your contacts uses this service"
            else -> "$matches of your contacts use this service"
        }
        val skipped = when (rejected) {
            0 -> ""
            1 -> " 1 entry is not a valid phone number or email and was not sent."
            else -> " $rejected entries are not a valid phone number or email and were not sent."
        }
        return "$found (matched with ${protocolName(protocol)}).$skipped"
    }

    /** A line of the match list: the contact's name, its label in the registry, the entry. */
    fun matchLine(match: Match): String =
        match.contact.name + (match.label?.let { " — $it" } ?: "") + "\n" + match.contact.value
}
