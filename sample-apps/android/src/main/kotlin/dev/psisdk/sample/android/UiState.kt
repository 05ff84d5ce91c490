package dev.psisdk.sample.android

import dev.psisdk.Progress
import dev.psisdk.Protocol

/**
 * What the screen shows, as one immutable value: [MatchViewModel] publishes a new one on each
 * change and the Activity renders it. [message] is the status line.
 */
sealed interface UiState {
    /** The status line's text. */
    val message: String get() = UserMessages.status(this)

    /** Whether Match may be pressed (nothing is running). */
    val canMatch: Boolean get() = this !is Loading && this !is Matching

    /** Nothing has run yet. */
    data object Idle : UiState

    /** `READ_CONTACTS` is not granted (denied, or revoked since): the app cannot match. */
    data object NeedsPermission : UiState

    /** Reading the address book. */
    data object Loading : UiState

    /** A run is in progress; [progress] is the phase it entered (null before the first). */
    data class Matching(val progress: Progress?) : UiState

    /**
     * The run finished: [matches] with their labels, the [protocol] that ran, and how many
     * entries were not a valid phone number or email ([rejectedCount]).
     */
    data class Done(val matches: List<Match>, val protocol: Protocol, val rejectedCount: Int) : UiState

    /** The run failed: [message] says why and what to do; [retryable] whether Match may work later. */
    data class Failed(override val message: String, val retryable: Boolean) : UiState
}
