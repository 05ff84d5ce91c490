package dev.psisdk.sample.android

import dev.psisdk.ContactDiscoveryException
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineDispatcher
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.cancel
import kotlinx.coroutines.flow.MutableStateFlow
import kotlinx.coroutines.flow.StateFlow
import kotlinx.coroutines.flow.asStateFlow
import kotlinx.coroutines.flow.update
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext

/**
 * The app's state and its one action, without Android's UI classes: the Activity (or a
 * test) reads [state] and calls [match] and [permissionDenied].
 *
 * A run reads the address book from [contacts] (on [io]), then matches it with [matcher],
 * whose progress events drive [UiState.Matching]. The Activity asks for `READ_CONTACTS`
 * before [match]; if the permission is missing all the same (revoked since), the run ends in
 * [UiState.NeedsPermission].
 *
 * @param contacts the address book ([DeviceContacts] in the app).
 * @param matcher the SDK ([SdkMatcher] in the app); closed by [close] if it is [AutoCloseable].
 * @param dispatcher where runs go on.
 * @param io where the address book is read (a blocking content provider query).
 */
class MatchViewModel(
    private val contacts: ContactSource,
    private val matcher: ContactMatcher,
    dispatcher: CoroutineDispatcher = Dispatchers.Default,
    private val io: CoroutineDispatcher = Dispatchers.IO,
) : AutoCloseable {
    private val scope = CoroutineScope(SupervisorJob() + dispatcher)
    private val mutableState = MutableStateFlow<UiState>(UiState.Idle)
    private val lock = Any()
    private var run: Job? = null

    /** The current state; a new value on every change. */
    val state: StateFlow<UiState> = mutableState.asStateFlow()

    /**
     * Reads the address book and matches it against the server at [serverUrl], in the
     * background. Does nothing (returns `null`) while a run is in progress; a blank
     * [serverUrl] gives [UiState.Failed] at once.
     *
     * @return the run's job.
     */
    fun match(serverUrl: String): Job? = synchronized(lock) {
        if (run?.isActive == true) return null
        val url = serverUrl.trim()
        if (url.isEmpty()) {
            mutableState.value = UiState.Failed(UserMessages.NO_SERVER, retryable = false)
            return null
        }
        mutableState.value = UiState.Loading
        scope.launch { runMatch(url) }.also { run = it }
    }

    /** The user refused `READ_CONTACTS` (the Activity's permission request). */
    fun permissionDenied() {
        synchronized(lock) {
            if (run?.isActive != true) mutableState.value = UiState.NeedsPermission
        }
    }

    /** Cancels the run in progress and closes the matcher; the view model cannot be used afterwards. */
    override fun close() {
        scope.cancel()
        (matcher as? AutoCloseable)?.close()
    }

    private suspend fun runMatch(url: String) {
        try {
            val entries = when (val read = withContext(io) { contacts.read() }) {
                ContactsRead.PermissionMissing -> return publish(UiState.NeedsPermission)
                is ContactsRead.Entries -> read.contacts
            }
            if (entries.isEmpty()) {
                return publish(UiState.Failed(UserMessages.EMPTY_ADDRESS_BOOK, retryable = false))
            }
            publish(UiState.Matching(null))
            val outcome = matcher.match(url, entries) { progress ->
                // From the SDK's threads; never after the run has ended.
                mutableState.update { if (it is UiState.Matching) UiState.Matching(progress) else it }
            }
            publish(UiState.Done(outcome.matches, outcome.protocol, outcome.rejectedCount))
        } catch (e: CancellationException) {
            throw e
        } catch (e: Exception) {
            // A ContactDiscoveryException, or anything else the contacts provider or the SDK threw.
            val retryable = (e as? ContactDiscoveryException)?.isRetryable ?: false
            publish(UiState.Failed(UserMessages.error(e, url), retryable))
        }
    }

    private fun publish(state: UiState) {
        synchronized(lock) { mutableState.value = state }
    }
}
