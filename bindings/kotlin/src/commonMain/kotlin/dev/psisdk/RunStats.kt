package dev.psisdk

import kotlin.jvm.JvmOverloads

/**
 * Traffic and time of one run, measured by the SDK.
 *
 * @property requests HTTP requests made.
 * @property bytesSent request body bytes.
 * @property bytesReceived response body bytes.
 * @property setBytesDownloaded bytes of the encoded registry downloaded (0 when it came from
 *   the cache).
 * @property setFromCache whether the encoded registry came from the cache (DH-PSI).
 * @property roundTrips protocol round trips.
 * @property clientItems distinct identifiers sent.
 * @property duplicates contacts that normalized to an identifier already sent.
 * @property serverItems entries in the server's registry.
 * @property epoch the server's key epoch.
 * @property phases wall time per phase, in the order first entered.
 * @property serverMicros computation time the server reported.
 * @property totalMicros wall time of the whole run.
 * @property workAheadMicros OT-PSI and CM20-PSI: time the SDK spent building its next request
 *   while the previous one was out (it overlaps the round trips and is not in [phases]; 0 for
 *   DH-PSI). Last, with a default, so code that built a [RunStats] by position still compiles.
 * @property sync a DH-PSI run in sync mode (a server started with `--enable-sync`, for large
 *   registries): what the run downloaded to be in sync and what it confirmed; `null` for
 *   every other run. In sync mode [setBytesDownloaded] is 0: the short tags are cached
 *   instead of the encoded registry.
 */
data class RunStats(
    val requests: Int,
    val bytesSent: Long,
    val bytesReceived: Long,
    val setBytesDownloaded: Long,
    val setFromCache: Boolean,
    val roundTrips: Int,
    val clientItems: Long,
    val duplicates: Long,
    val serverItems: Long,
    val epoch: Long,
    val phases: List<PhaseTime>,
    val serverMicros: Long,
    val totalMicros: Long,
    val workAheadMicros: Long = 0,
    val sync: SyncStats? = null,
)

/**
 * What a sync-mode run did with its synced set ([RunStats.sync]; docs/protocol/sync.md).
 *
 * @property snapshotBytes bytes of the snapshot downloaded: a first sync, or one after a key
 *   rotation or a discarded cache; 0 when none was.
 * @property deltaBytes bytes of the delta downloaded (the registry's changes since the cached
 *   version); 0 when none was.
 * @property fromCache whether a synced set of the session's key epoch came from the cache.
 * @property candidates contacts whose short tag was in the synced set, confirmed by the
 *   label fetch (the matches and a few false candidates).
 * @property haveVersion the registry version of the synced set the run used.
 * @property servedVersion the registry version the server answered from.
 */
data class SyncStats(
    val snapshotBytes: Long,
    val deltaBytes: Long,
    val fromCache: Boolean,
    val candidates: Long,
    val haveVersion: Long,
    val servedVersion: Long,
) {
    /** Bytes downloaded to be in sync: the snapshot and the delta. */
    val bytesDownloaded: Long get() = snapshotBytes + deltaBytes
}

/** Time spent in [phase], in microseconds (repeated phases summed). */
data class PhaseTime(val phase: Phase, val micros: Long)

/** A phase of a run, for progress displays and timings. */
enum class Phase {
    /** Opening the session with the server. */
    CREATE_SESSION,

    /** Preparing the first message (DH-PSI: blinding every contact). */
    CLIENT_START,

    /** Waiting for the server. */
    ROUND_TRIP,

    /** The server answering the first message (only timed when both sides run in one process). */
    SERVER_HELLO,

    /** DH-PSI: unblinding the server's answers. */
    CLIENT_FINALIZE,

    /** OT-PSI: the reply to the server's setup. */
    CLIENT_SETUP,

    /** OT-PSI: the server absorbing a chunk (only timed in one process). */
    SERVER_CHUNK,

    /** OT-PSI: producing a further chunk. */
    CLIENT_CHUNK,

    /** OT-PSI: the server's outputs (only timed in one process). */
    SERVER_OUTPUTS,

    /** DH-PSI: obtaining the encoded registry (download, or the cache). */
    ENCODED_SET,

    /** Comparing the client's values with the server's. */
    CLIENT_FINISH,

    /** Fetching and opening the labels of the matches. */
    LABELS,

    /** A phase this version of the SDK does not know. */
    OTHER,
}

/**
 * A progress event: the run entered [phase]; [round] counts the protocol's round trips
 * started so far; [fraction] is how far the run has come, from 0 to 1, for a progress bar
 * (it never goes back within an attempt; a retry starts again from 0).
 *
 * A retry event ([retry] set) enters no phase: the attempt that was in [phase] failed with
 * an error that may pass, and the run starts again from a new session after
 * [RetryEvent.waitMillis]; its phases are heard again.
 */
data class Progress @JvmOverloads constructor(
    val phase: Phase,
    val round: Int,
    val retry: RetryEvent? = null,
    val fraction: Double = 0.0,
)

/**
 * Why and when a run starts again (the configuration's [DiscoveryConfig.retries]). Log-safe:
 * the kind of error and its code, never its text or a contact.
 *
 * @property attempt the attempt about to start, counting retries: 1 for the first retry.
 * @property retries the retries allowed in all.
 * @property reason what failed the previous attempt, for logs (`network error`, `timeout`,
 *   `HTTP 503 (internal)`, `key epoch changed`).
 * @property isTimeout whether the previous attempt failed for a timeout.
 * @property status the HTTP status, when the server answered the previous attempt with an error.
 * @property code the API error code, when the server answered with an error.
 * @property waitMillis the wait before the new attempt (the backoff, or the server's
 *   `Retry-After`).
 */
data class RetryEvent(
    val attempt: Int,
    val retries: Int,
    val reason: String,
    val isTimeout: Boolean,
    val status: Int?,
    val code: ServerErrorCode?,
    val waitMillis: Long,
)

/** What [ContactDiscovery.matchFlow] emits: progress (and retries), then the result. */
sealed interface MatchEvent<C> {
    /** The run entered a new phase. */
    data class Progressed<C>(val progress: Progress) : MatchEvent<C>

    /**
     * An attempt failed with an error that may pass: the run starts again from a new
     * session after [RetryEvent.waitMillis] (its phases are heard again, from
     * [Phase.CREATE_SESSION]).
     */
    data class Retrying<C>(val retry: RetryEvent) : MatchEvent<C>

    /** The run finished; the flow completes after this event. */
    data class Finished<C>(val result: MatchResult<C>) : MatchEvent<C>
}

/**
 * What a server says about itself.
 *
 * @property epoch the current key epoch.
 * @property registryItems entries in the registry.
 * @property protocols the protocols the server runs (that this SDK knows).
 * @property maxClientItems the most contacts one run may send.
 * @property maxBodyBytes the largest request body the server accepts.
 * @property registryVersion the registry's current version, as [MatchResult.registryVersion]
 *   names it: compare it with the last run's to know whether the registry changed (an
 *   import, a key rotation) without running a match. Empty if the server names none.
 */
data class ServerHealth @JvmOverloads constructor(
    val epoch: Long,
    val registryItems: Long,
    val protocols: List<Protocol>,
    val maxClientItems: Long,
    val maxBodyBytes: Long,
    val registryVersion: String = "",
)
