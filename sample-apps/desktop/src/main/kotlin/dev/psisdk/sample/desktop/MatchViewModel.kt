package dev.psisdk.sample.desktop

import dev.psisdk.ContactDiscovery
import dev.psisdk.ContactDiscoveryException
import dev.psisdk.DiscoveryConfig
import dev.psisdk.MatchEvent
import dev.psisdk.Phase
import dev.psisdk.Progress
import dev.psisdk.Protocol
import dev.psisdk.ProtocolChoice
import java.io.File
import java.nio.file.Path
import java.util.Locale
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
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext

/**
 * The app's state and actions, without any UI toolkit: the window (or a test) reads
 * [state] and calls [loadFile], [match] and [cancel].
 *
 * A run uses only the SDK's public API: a [ContactDiscovery] client is made for each run
 * from the current settings (so a changed URL or token takes effect at once) and closed
 * after it; with [cacheDirectory] set, DH-PSI's encoded registry is cached on disk between
 * runs. The run's progress events ([ContactDiscovery.matchFlow]) drive
 * [MatchUiState.Status.Matching].
 *
 * Every action starts a new *generation*: the results of an older one (a cancelled run
 * whose native thread is still finishing, a file superseded by another) are dropped, so
 * the state never goes back to an action the user left.
 *
 * @param initial the first state (settings given on the command line).
 * @param cacheDirectory where DH-PSI's encoded registry is cached; `null` keeps it in memory.
 * @param newClient makes the SDK client for a run (tests pass one with their own HTTP client).
 * @param dispatcher where the actions run.
 */
class MatchViewModel(
    initial: MatchUiState = MatchUiState(),
    private val cacheDirectory: String? = defaultCacheDirectory(),
    private val newClient: (serverUrl: String, config: DiscoveryConfig) -> ContactDiscovery = ::ContactDiscovery,
    dispatcher: CoroutineDispatcher = Dispatchers.Default,
) : AutoCloseable {
    private val scope = CoroutineScope(SupervisorJob() + dispatcher)
    private val mutableState = MutableStateFlow(initial)
    private val lock = Any()
    private var generation = 0L
    private var matchJob: Job? = null

    /** The current state; a new value on every change. */
    val state: StateFlow<MatchUiState> = mutableState.asStateFlow()

    /** Sets the server's base URL. */
    fun setServerUrl(url: String) = edit { it.copy(serverUrl = url.trim()) }

    /** Sets the bearer token (blank: none). */
    fun setToken(token: String) = edit { it.copy(token = token.trim()) }

    /** Sets the default region for phone numbers without a country code (`US`, `GB`...). */
    fun setRegion(region: String) = edit { it.copy(region = region.trim().uppercase(Locale.ROOT)) }

    /** Sets the protocol of the next run (or the automatic choice). */
    fun setProtocol(protocol: ProtocolChoice) = edit { it.copy(protocol = protocol) }

    /**
     * Reads the address book at [path] (vCard or CSV) in the background, replacing the one
     * loaded and the last result. A run in progress is cancelled first.
     *
     * @return the job reading it (tests join it).
     */
    fun loadFile(path: Path): Job {
        cancelRun()
        val name = path.fileName?.toString() ?: path.toString()
        val gen = begin { it.copy(status = MatchUiState.Status.Loading(name), result = null) }
        return scope.launch {
            try {
                val book = withContext(Dispatchers.IO) { AddressBook.load(path) }
                val from = if (book.format == AddressBook.Format.VCARD) "card" else "row"
                publish(gen) {
                    it.copy(
                        addressBook = book,
                        status = MatchUiState.Status.Idle(
                            "Loaded $name: ${plural(book.entries.size, "entry", "entries")} " +
                                "from ${plural(book.records, from, from + "s")}. Press Match.",
                        ),
                    )
                }
            } catch (e: AddressBookException) {
                publish(gen) {
                    it.copy(addressBook = null, status = MatchUiState.Status.Failed(UserMessages.error(e, it.serverUrl), false))
                }
            }
        }
    }

    /**
     * Matches the loaded address book against the server with the current settings, in
     * the background. Does nothing (returns `null`) unless [MatchUiState.canMatch].
     *
     * @return the job of the run (tests join it; [cancel] cancels it).
     */
    fun match(): Job? {
        val settings = state.value
        val book = settings.addressBook
        if (!settings.canMatch || book == null) return null
        val gen = begin { it.copy(status = MatchUiState.Status.Matching(null, 0, 0.0), result = null) }
        val job = scope.launch {
            try {
                val config = DiscoveryConfig(
                    token = settings.token.ifBlank { null },
                    defaultRegion = settings.region.ifBlank { DiscoveryConfig().defaultRegion },
                    protocol = settings.protocol,
                    cacheDirectory = cacheDirectory,
                )
                newClient(settings.serverUrl, config).use { discovery ->
                    discovery.matchFlow(book.entries, settings.protocol) { it.value }.collect { event ->
                        when (event) {
                            is MatchEvent.Progressed -> publish(gen) { current ->
                                current.status as? MatchUiState.Status.Matching ?: return@publish current
                                current.copy(
                                    status = MatchUiState.Status.Matching(
                                        event.progress.phase,
                                        event.progress.round,
                                        event.progress.fraction,
                                    ),
                                )
                            }
                            // The run starts again from a new session: the bar starts again.
                            is MatchEvent.Retrying -> publish(gen) { current ->
                                current.status as? MatchUiState.Status.Matching ?: return@publish current
                                current.copy(status = MatchUiState.Status.Matching(null, 0, 0.0, event.retry))
                            }
                            is MatchEvent.Finished -> publish(gen) {
                                it.copy(status = MatchUiState.Status.Done(UserMessages.done(event.result)), result = event.result)
                            }
                        }
                    }
                }
            } catch (e: CancellationException) {
                publish(gen) { it.copy(status = MatchUiState.Status.Idle("Cancelled.")) }
                throw e
            } catch (e: Exception) {
                // ContactDiscoveryException, or IllegalArgumentException for settings the SDK refuses.
                val retryable = (e as? ContactDiscoveryException)?.isRetryable ?: false
                publish(gen) {
                    it.copy(status = MatchUiState.Status.Failed(UserMessages.error(e, settings.serverUrl), retryable))
                }
            }
        }
        synchronized(lock) { matchJob = job }
        return job
    }

    /**
     * Cancels the run in progress: the state returns at once to
     * [MatchUiState.Status.Idle] ("Cancelled."), and the SDK cancels the HTTP call in
     * flight and deletes the server session.
     */
    fun cancel() {
        cancelRun()
    }

    /** Cancels whatever is running; the view model cannot be used afterwards. */
    override fun close() {
        scope.cancel()
    }

    private fun cancelRun() {
        val job = synchronized(lock) {
            val job = matchJob ?: return
            matchJob = null
            if (mutableState.value.status is MatchUiState.Status.Matching) {
                generation++
                mutableState.value = mutableState.value.copy(status = MatchUiState.Status.Idle("Cancelled."))
            }
            job
        }
        job.cancel()
    }

    /** A settings change: applies to the current state whatever is running. */
    private fun edit(change: (MatchUiState) -> MatchUiState) {
        synchronized(lock) { mutableState.value = change(mutableState.value) }
    }

    /** Starts a new generation with [change]; older ones can no longer publish. */
    private fun begin(change: (MatchUiState) -> MatchUiState): Long = synchronized(lock) {
        generation++
        mutableState.value = change(mutableState.value)
        generation
    }

    /** Applies [change] if [gen] is still the current generation. */
    private fun publish(gen: Long, change: (MatchUiState) -> MatchUiState) {
        synchronized(lock) {
            if (gen == generation) mutableState.value = change(mutableState.value)
        }
    }

    companion object {
        /**
         * The app's cache directory for DH-PSI's encoded registry:
         * `$XDG_CACHE_HOME/psi-sdk-desktop-sample`, else `~/.cache/psi-sdk-desktop-sample`.
         */
        fun defaultCacheDirectory(): String? {
            val base = System.getenv("XDG_CACHE_HOME")?.takeIf { it.isNotBlank() }
                ?: System.getProperty("user.home")?.let { "$it${File.separator}.cache" }
                ?: return null
            val dir = File(base, "psi-sdk-desktop-sample")
            return if (dir.isDirectory || dir.mkdirs()) dir.path else null
        }

        private fun plural(n: Int, one: String, many: String) = "$n ${if (n == 1) one else many}"
    }
}
