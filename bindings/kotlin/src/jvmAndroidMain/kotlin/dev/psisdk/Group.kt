package dev.psisdk

import dev.psisdk.ffi.GroupSession as FfiGroupSession
import dev.psisdk.ffi.defaultGroupRunOptions
import java.time.Duration
import java.util.concurrent.CompletableFuture
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.cancel
import kotlinx.coroutines.future.future

/**
 * Settings of one group run. The defaults are the native library's
 * (`default_group_run_options`).
 *
 * @property shareResult leader: send the common contacts to every member at the end (the
 *   members learn them only then). Ignored on a member.
 * @property deadline the longest the whole run may take, waiting for the group to fill
 *   included (1 ms to 24 hours).
 */
data class GroupRunOptions @JvmOverloads constructor(
    val shareResult: Boolean = GroupDefaults.shareResult,
    val deadline: Duration = GroupDefaults.deadline,
)

/** The native library's defaults of a group run, read once. */
internal object GroupDefaults {
    private val native by lazy { NativeLibrary.call { defaultGroupRunOptions() } }
    val shareResult: Boolean get() = native.shareResult
    val deadline: Duration get() = Duration.ofMillis(native.deadlineMs.toLongClamped())
}

/**
 * What a group run tells this party.
 *
 * @property party this party's index: 0 for the leader.
 * @property size parties in the group, the leader included.
 * @property common the identifiers (normalized: E.164 phone numbers, lower-cased emails)
 *   every party holds: the leader's result, or on a member the result the leader shared;
 *   `null` on a member the leader did not share it with ([GroupRunOptions.shareResult]).
 * @property matches this party's own contacts whose identifier is in [common], in list order.
 * @property rejected this party's contacts that are not valid identifiers (left out of the run).
 * @property stats this party's traffic and time.
 */
data class GroupResult<C>(
    val party: Int,
    val size: Int,
    val common: List<String>?,
    val matches: List<GroupMatch<C>>,
    val rejected: List<RejectedContact<C>>,
    val stats: GroupStats,
) {
    /** True on the party that created the group. */
    val isLeader: Boolean get() = party == 0
}

/**
 * One of this party's contacts that every party of the group holds.
 *
 * @property contact the caller's own contact object.
 * @property index its position in the list given (0-based).
 * @property identifier its normalized identifier.
 */
data class GroupMatch<C>(val contact: C, val index: Int, val identifier: String)

/**
 * This party's traffic and time in a group run.
 *
 * @property requests HTTP requests to the server's relay (the create or join and the end included).
 * @property bytesSent HTTP body bytes sent.
 * @property bytesReceived HTTP body bytes received.
 * @property protocolBytesSent group PSI message bytes sent (inside the end-to-end envelopes).
 * @property protocolBytesReceived group PSI message bytes received.
 * @property elapsed the whole run, waiting for the group included.
 * @property waited waiting: for the group to fill (the leader) or the leader's first message (a member).
 * @property compute this party's own computation.
 */
data class GroupStats(
    val requests: Long,
    val bytesSent: Long,
    val bytesReceived: Long,
    val protocolBytesSent: Long,
    val protocolBytesReceived: Long,
    val elapsed: Duration,
    val waited: Duration,
    val compute: Duration,
)

/**
 * One party of a group overlap: which contacts do all of us share. Made by
 * [ContactDiscovery.createGroup] (the leader, who shows [code] to the others) or
 * [ContactDiscovery.joinGroup] (a member, with that code); then every party calls [run]
 * with its own contacts. The server only relays end-to-end encrypted messages: it never
 * sees a contact (docs/protocol/group-psi.md).
 *
 * ```
 * val group = discovery.createGroup(size = 3)
 * showToFriends(group.code)
 * val result = group.run(myContacts)            // waits for the other two
 * result.matches.forEach { println("we all know ${it.contact}") }
 * ```
 *
 * A session runs once. Cancelling the coroutine of [run] (or [cancel]) stops it and ends
 * the group for everyone; [close] without a run leaves the group too.
 */
class GroupSession internal constructor(private val native: FfiGroupSession) : AutoCloseable {
    /**
     * The code to show the other parties (`GROUP_ID.SECRET`). It holds the group's
     * secret: show it to the group only, and never log it.
     */
    val code: String = native.code()

    /** This party's index: 0 for the leader, 1 until [size] for the members. */
    val party: Int = native.party().toIntClamped()

    /** Parties in the group, the leader included (2 to 16). */
    val size: Int = native.size().toIntClamped()

    /** True on the party that created the group. */
    val isLeader: Boolean get() = party == 0

    private val lazyFutures = lazy { CoroutineScope(SupervisorJob() + Dispatchers.Default) }
    private val futures by lazyFutures

    /**
     * Runs the group overlap with [contacts] (phone numbers in any common format, emails;
     * normalized with the client's default region): the leader waits for the group to
     * fill and learns the contacts every party holds; a member learns them if the leader
     * shares them. The computation runs on the SDK's native threads. Cancelling the calling
     * coroutine cancels the run and ends the group.
     *
     * @throws ContactDiscoveryException.Group if the group failed ([GroupFailure]).
     * @throws ContactDiscoveryException.InvalidInput if this session already ran or ended, or
     *   [options] cannot be used.
     * @throws ContactDiscoveryException another failure, as a match reports it.
     */
    @Throws(ContactDiscoveryException::class)
    suspend fun run(contacts: List<String>, options: GroupRunOptions = GroupRunOptions()): GroupResult<String> =
        run(contacts, options) { it }

    /** [run] with the caller's own contact objects: [identifier] gives each one's phone number or email. */
    @Throws(ContactDiscoveryException::class)
    suspend fun <C> run(
        contacts: List<C>,
        options: GroupRunOptions = GroupRunOptions(),
        identifier: (C) -> String,
    ): GroupResult<C> {
        val ffiOptions = options.toFfi()
        val identifiers = contacts.map(identifier)
        return NativeLibrary.call { native.run(identifiers, ffiOptions) }.toResult(contacts)
    }

    /**
     * [run] for Java callers: a failure completes the future with a
     * [ContactDiscoveryException]; cancelling the future cancels the run.
     */
    @JvmOverloads
    fun runAsync(
        contacts: List<String>,
        options: GroupRunOptions = GroupRunOptions(),
    ): CompletableFuture<GroupResult<String>> = futures.future { run(contacts, options) }

    /**
     * Cancels this session's run, now or before it starts: [run] throws
     * `CancellationException` and the group ends for everyone. Any thread, any number of times.
     */
    fun cancel() = native.cancel()

    /**
     * Leaves the group without running: it ends for every party. Does nothing after a run.
     *
     * @throws ContactDiscoveryException if the server could not be told.
     */
    @Throws(ContactDiscoveryException::class)
    suspend fun end() = NativeLibrary.call { native.end() }

    /** Releases the native session; one that has not run leaves the group (in the background). */
    override fun close() {
        if (lazyFutures.isInitialized()) futures.cancel()
        native.close()
    }

    /** Not the code: it holds the group's secret. */
    override fun toString() = "GroupSession(party $party of $size)"
}
