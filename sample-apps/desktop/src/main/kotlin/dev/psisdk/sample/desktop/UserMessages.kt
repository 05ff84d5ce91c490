package dev.psisdk.sample.desktop

import dev.psisdk.ChoiceReport
import dev.psisdk.ContactDiscoveryException
import dev.psisdk.MatchResult
import dev.psisdk.Phase
import dev.psisdk.Protocol
import dev.psisdk.RejectReason
import dev.psisdk.RetryEvent
import java.util.Locale

/**
 * The texts the user reads: errors (from the exception's type, never from contacts),
 * reject reasons, progress and the run summary. No Swing here, so they are tested headless.
 */
object UserMessages {
    /** What went wrong with a run against [serverUrl], and what the user can do. */
    fun error(e: Throwable, serverUrl: String): String = when (e) {
        is ContactDiscoveryException.InvalidInput ->
            "Cannot match: ${e.message}. Check the server URL, the region and the address book."
        is ContactDiscoveryException.Network ->
            if (e.isTimeout) "The server at $serverUrl did not answer in time. Try again later."
            else "Cannot reach the server at $serverUrl. Is it running, and is the URL right?"
        is ContactDiscoveryException.Unauthorized ->
            "The server refused the token. Check the Token field (or ask for a new token)."
        is ContactDiscoveryException.RateLimited ->
            "The server's rate limit is reached. " +
                (e.retryAfterSeconds?.let { "Try again in $it s." } ?: "Try again later.")
        is ContactDiscoveryException.Server ->
            "The server answered with an error (HTTP ${e.status}, ${e.code})." +
                if (e.isRetryable) " Try again later." else ""
        is ContactDiscoveryException.ProtocolViolation ->
            if (e.isRetryable) "The server's registry changed during the run. Match again."
            else "The server's answer broke the protocol: is it a compatible psi server?"
        is ContactDiscoveryException.Internal ->
            "Internal error in the SDK (${e.message}). Please report it."
        is AddressBookException -> e.message ?: "The address book cannot be used."
        else -> "Unexpected error (${e.javaClass.simpleName})."
    }

    /** Why an entry was not sent. */
    fun reason(reason: RejectReason): String = when (reason) {
        RejectReason.EMPTY -> "No phone number or email"
        RejectReason.TOO_LONG -> "Too long"
        RejectReason.BAD_EMAIL -> "Not a valid email address"
        RejectReason.NOT_A_PHONE_NUMBER -> "Neither a phone number nor an email"
        RejectReason.UNPARSABLE_PHONE -> "Phone number not understood (country code or region?)"
        RejectReason.INVALID_PHONE -> "Not a valid phone number for its region"
        RejectReason.OTHER -> "Rejected"
    }

    /** The status line during a run. */
    fun progress(phase: Phase?, round: Int): String {
        val what = when (phase) {
            null -> "Starting"
            Phase.CREATE_SESSION -> "Opening a session with the server"
            Phase.CLIENT_START -> "Preparing the contacts (blinding)"
            Phase.ROUND_TRIP, Phase.SERVER_HELLO, Phase.SERVER_CHUNK, Phase.SERVER_OUTPUTS ->
                "Waiting for the server"
            Phase.CLIENT_FINALIZE -> "Unblinding the server's answer"
            Phase.CLIENT_SETUP -> "Setting up the oblivious transfer"
            Phase.CLIENT_CHUNK -> "Sending the next chunk"
            Phase.ENCODED_SET -> "Getting the server's encoded registry"
            Phase.CLIENT_FINISH -> "Comparing"
            Phase.LABELS -> "Fetching the labels of the matches"
            Phase.OTHER -> "Working"
        }
        return if (round > 0) "Matching: $what (round trip $round)…" else "Matching: $what…"
    }

    /** The status line while a run waits to start again after a failure that may pass. */
    fun retrying(retry: RetryEvent): String {
        val seconds = (retry.waitMillis + 999) / 1000
        val why = when {
            retry.isTimeout -> "the server did not answer in time"
            retry.status != null -> "the server had a problem (HTTP ${retry.status})"
            else -> "the connection failed"
        }
        val wait = if (seconds == 1L) "1 second" else "$seconds seconds"
        return "Trying again in $wait ($why; attempt ${retry.attempt + 1} of ${retry.retries + 1})…"
    }

    /** The protocol's name as the user sees it. */
    fun protocolName(protocol: Protocol) = when (protocol) {
        Protocol.DH -> "DH-PSI"
        Protocol.OT -> "OT-PSI"
        Protocol.CM20 -> "CM20-PSI"
        Protocol.GBF -> "GBF-PSI"
    }

    /** The status line after a run. */
    fun done(result: MatchResult<*>): String {
        val sent = result.stats.clientItems
        val text = "${result.matches.size} of $sent ${if (sent == 1L) "entry" else "entries"} sent " +
            "${if (result.matches.size == 1) "is" else "are"} registered" +
            (if (result.rejected.isNotEmpty()) "; ${result.rejected.size} not valid (see Rejected)" else "") + "."
        return result.labelError?.let { "$text Labels unavailable: $it." } ?: text
    }

    /** Which protocol ran, bytes sent and received, round trips and time. */
    fun summary(result: MatchResult<*>): String {
        val s = result.stats
        val cache = if (result.protocol == Protocol.DH && s.setFromCache) " (registry from the cache)" else ""
        return "${protocolName(result.protocol)}: sent ${bytes(s.bytesSent)}, received ${bytes(s.bytesReceived)}, " +
            "${s.roundTrips} round ${if (s.roundTrips == 1) "trip" else "trips"}, " +
            String.format(Locale.ROOT, "%.2f s", s.totalMicros / 1e6) + cache +
            " — registry of ${s.serverItems} entries" + (result.choice?.let { choice(it) } ?: "")
    }

    /** How the automatic choice picked: each candidate's predicted time and bytes. */
    private fun choice(c: ChoiceReport) = "; chosen automatically (" +
        c.predictions.joinToString(", ") {
            "${protocolName(it.protocol)} predicted " +
                String.format(Locale.ROOT, "%.2f s", it.totalMicros / 1e6) + " and ${bytes(it.bytes)}"
        } + ")"

    /** A byte count for people: `512 B`, `3.4 KiB`, `1.2 MiB`. */
    fun bytes(n: Long): String = when {
        n < 1024 -> "$n B"
        n < 1024 * 1024 -> String.format(Locale.ROOT, "%.1f KiB", n / 1024.0)
        else -> String.format(Locale.ROOT, "%.1f MiB", n / (1024.0 * 1024.0))
    }
}
