package dev.psisdk.sample.desktop

import dev.psisdk.MatchResult
import dev.psisdk.MatchedContact
import dev.psisdk.Phase
import dev.psisdk.Protocol
import dev.psisdk.RetryEvent
import dev.psisdk.ProtocolChoice
import dev.psisdk.RejectedContact

/**
 * Everything the window shows, as one immutable value: [MatchViewModel] publishes a new one
 * on each change, and the window renders it.
 *
 * @property serverUrl the psi server's base URL.
 * @property token the bearer token (empty: none).
 * @property region the default region for phone numbers written without a country code.
 * @property protocol the protocol the next run uses, or the automatic choice.
 * @property addressBook the address book loaded, if any.
 * @property status what the app is doing, or how the last action ended.
 * @property result the last run's result (cleared when a new run starts or a new file is loaded).
 */
data class MatchUiState(
    val serverUrl: String = "http://127.0.0.1:8080",
    val token: String = "",
    val region: String = "US",
    val protocol: ProtocolChoice = Protocol.DH,
    val addressBook: AddressBook? = null,
    val status: Status = Status.Idle("Open an address book (vCard or CSV) to start."),
    val result: MatchResult<AddressBook.Entry>? = null,
) {
    /** The matched entries of the last run, with their labels. */
    val matches: List<MatchedContact<AddressBook.Entry>> get() = result?.matches.orEmpty()

    /** The entries of the last run that are not a valid phone number or email. */
    val rejected: List<RejectedContact<AddressBook.Entry>> get() = result?.rejected.orEmpty()

    /** Reading a file or matching. */
    val isBusy: Boolean get() = status is Status.Loading || status is Status.Matching

    /** Whether Match may be pressed: an address book with entries, a URL, nothing running. */
    val canMatch: Boolean
        get() = !isBusy && !addressBook?.entries.isNullOrEmpty() && serverUrl.isNotBlank()

    /** Whether Cancel may be pressed. */
    val canCancel: Boolean get() = status is Status.Matching

    /** Which protocol ran, bytes, round trips and time of the last run. */
    val summary: String? get() = result?.let(UserMessages::summary)

    /** What the app is doing. Each case has the [message] for the status line. */
    sealed interface Status {
        /** The status line's text. */
        val message: String

        /** Waiting for the user; [message] says what happened last (loaded, cancelled). */
        data class Idle(override val message: String) : Status

        /** Reading the address book [file]. */
        data class Loading(val file: String) : Status {
            override val message get() = "Reading $file…"
        }

        /**
         * A run is in progress: in [phase] (null before the first progress event), after
         * [round] round trips; [fraction] estimates how far it is (0 to 1).
         */
        data class Matching(
            val phase: Phase?,
            val round: Int,
            val fraction: Double,
            val retry: RetryEvent? = null,
        ) : Status {
            override val message get() = retry?.let(UserMessages::retrying) ?: UserMessages.progress(phase, round)
        }

        /** The run finished; [message] says how many entries matched. */
        data class Done(override val message: String) : Status

        /** The last action failed; [message] says why and what to do. */
        data class Failed(override val message: String, val retryable: Boolean) : Status
    }
}
