package dev.psisdk

import kotlinx.coroutines.flow.Flow

/**
 * Private contact discovery against one server: learns which of the user's contacts are in
 * the server's registry, and the server learns nothing about the others (nor the client
 * about the rest of the registry).
 *
 * ```
 * ContactDiscovery("https://discovery.example.com", DiscoveryConfig(token = token,
 *         cacheDirectory = cacheDir.path)).use { discovery ->
 *     val result = discovery.match(listOf("+1 415 555 0123", "alice@example.com"))
 *     result.matches.forEach { println("${it.contact} is ${it.label}") }
 * }
 * ```
 *
 * One instance per server is enough: it is safe to share, and runs may go on in parallel.
 * The protocol's computation runs on the SDK's own native threads, never on the caller's
 * dispatcher. Cancelling the calling coroutine cancels the run: the HTTP call in flight is
 * cancelled and the server session deleted. [close] releases the native client (the
 * garbage collector does it too, later, if the app forgets).
 *
 * Errors are [ContactDiscoveryException]s.
 */
expect class ContactDiscovery(serverUrl: String, config: DiscoveryConfig) : AutoCloseable {
    /** The settings. */
    val config: DiscoveryConfig

    /**
     * Matches [contacts] (phone numbers in any common format, emails) with the protocol
     * [protocol] picks (by default automatically: [MatchResult.choice] says how), on the
     * network [linkHints] describe. Invalid entries come back in [MatchResult.rejected] with
     * the reason; if none is valid (or [contacts] is empty) nothing is sent and the result has
     * no match and every row in [MatchResult.rejected].
     */
    suspend fun match(
        contacts: List<String>,
        protocol: ProtocolChoice = config.protocol,
        linkHints: LinkHints = config.linkHints,
    ): MatchResult<String>

    /**
     * Matches the caller's own contact objects: [identifier] gives each one's phone number
     * or email. The result refers to the same objects.
     *
     * [onProgress] hears each phase (with [Progress.fraction] for a progress bar) and each
     * retry ([Progress.retry]), in order, in the calling coroutine's context: called from
     * `Dispatchers.Main`, it runs on the main thread. Every event is delivered before the
     * call returns. An exception it throws is ignored.
     */
    suspend fun <C> match(
        contacts: List<C>,
        protocol: ProtocolChoice = config.protocol,
        onProgress: (Progress) -> Unit = {},
        linkHints: LinkHints = config.linkHints,
        identifier: (C) -> String,
    ): MatchResult<C>

    /**
     * The same run as [match], as a cold flow for UIs: collecting it starts the run, which
     * emits [MatchEvent.Progressed] for each phase in order ([MatchEvent.Retrying] before a
     * retry starts the phases again), then [MatchEvent.Finished]. Cancelling the collection
     * cancels the run.
     */
    fun <C> matchFlow(
        contacts: List<C>,
        protocol: ProtocolChoice = config.protocol,
        linkHints: LinkHints = config.linkHints,
        identifier: (C) -> String,
    ): Flow<MatchEvent<C>>

    /** What the server says about itself: epoch, registry size, protocols, limits. */
    suspend fun health(): ServerHealth

    /** Releases the native client; later calls fail with `IllegalStateException`. */
    override fun close()
}
