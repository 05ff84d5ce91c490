package dev.psisdk.sample.android

import dev.psisdk.Progress
import java.util.concurrent.CopyOnWriteArrayList

/**
 * A [ContactMatcher] whose runs the test scripts with [run]; it records the calls and
 * whether it was closed.
 */
class FakeMatcher(
    private val run: suspend (onProgress: (Progress) -> Unit) -> MatchOutcome,
) : ContactMatcher, AutoCloseable {
    /** Each call's server URL and contacts. */
    val calls = CopyOnWriteArrayList<Pair<String, List<Contact>>>()

    @Volatile
    var closed = false
        private set

    override suspend fun match(serverUrl: String, contacts: List<Contact>, onProgress: (Progress) -> Unit): MatchOutcome {
        calls += serverUrl to contacts
        return run(onProgress)
    }

    override fun close() {
        closed = true
    }
}
