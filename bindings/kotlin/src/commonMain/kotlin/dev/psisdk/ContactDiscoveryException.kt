package dev.psisdk

/**
 * Why a call failed. Each case says what the app can do; [isRetryable] says whether the
 * same call may succeed later. Messages never contain contacts, labels or keys.
 *
 * A cancelled call throws `CancellationException` (coroutines) or completes its
 * `CompletableFuture` as cancelled, not one of these.
 *
 * An error of the native library carries it as its [cause] (the generated
 * `dev.psisdk.ffi.PsiException`, with the same message), for logs and bug reports.
 */
sealed class ContactDiscoveryException(message: String, cause: Throwable? = null) :
    Exception(message, cause) {
    /** True if the same call may succeed later. */
    abstract val isRetryable: Boolean

    /**
     * The input or the settings cannot be used: more contacts than the
     * server accepts in one run, an unknown region, a bad URL. Fix the input.
     */
    class InvalidInput(message: String, cause: Throwable? = null) :
        ContactDiscoveryException(message, cause) {
        override val isRetryable get() = false
    }

    /**
     * No response from the server: connection refused or reset, a timeout ([isTimeout]), a
     * response larger than allowed. Retry later, on a better connection. One kind is not
     * retryable: [Tls].
     */
    open class Network(message: String, val isTimeout: Boolean, cause: Throwable? = null) :
        ContactDiscoveryException(message, cause) {
        override val isRetryable get() = true
    }

    /**
     * The secure connection could not be set up: the server's certificate is not trusted
     * (expired, for another name, an unknown CA, a network intercepting the connection) or
     * the server does not speak TLS (an `https://` URL to a plain HTTP port). Not
     * retryable: fix the URL, the server's certificate or the trusted roots.
     *
     * A kind of [Network] (an app's `when` that handles [Network] keeps compiling and
     * catches it), but [isRetryable] is false: docs/adr/0043-tls-failure-reason.md.
     */
    class Tls(message: String, cause: Throwable? = null) :
        Network(message, isTimeout = false, cause = cause) {
        override val isRetryable get() = false
    }

    /** The server refused the token (missing or not accepted). Get a new one. */
    class Unauthorized(message: String, cause: Throwable? = null) :
        ContactDiscoveryException(message, cause) {
        override val isRetryable get() = false
    }

    /**
     * The server's limits are reached (this caller's contacts per hour, or its sessions).
     * Retry after [retryAfterSeconds] if the server said, or later.
     */
    class RateLimited(message: String, val retryAfterSeconds: Long?, cause: Throwable? = null) :
        ContactDiscoveryException(message, cause) {
        override val isRetryable get() = true
    }

    /** The server answered with another error: [status] and its [code]. */
    class Server(
        message: String,
        val status: Int,
        val code: ServerErrorCode,
        override val isRetryable: Boolean,
        cause: Throwable? = null,
    ) : ContactDiscoveryException(message, cause)

    /**
     * The server's answer broke the protocol or the API: an incompatible or faulty server,
     * or the registry changed during the run (then [isRetryable]).
     */
    class ProtocolViolation(
        message: String,
        override val isRetryable: Boolean,
        cause: Throwable? = null,
    ) : ContactDiscoveryException(message, cause)

    /** A bug in the SDK. Please report it. */
    class Internal(message: String, cause: Throwable? = null) :
        ContactDiscoveryException(message, cause) {
        override val isRetryable get() = false
    }

    /**
     * A group call failed (group overlap: `createGroup`, `joinGroup`, [GroupSession.run]):
     * [failure] says how. [isRetryable] when a new group (or the same call after
     * [retryAfterSeconds]) may succeed. Other failures of a group call (no network, the
     * token refused, a size outside 2..16) are the other cases of this class.
     */
    class Group(
        message: String,
        val failure: GroupFailure,
        override val isRetryable: Boolean,
        val retryAfterSeconds: Long?,
        cause: Throwable? = null,
    ) : ContactDiscoveryException(message, cause)
}

/** Why a group failed ([ContactDiscoveryException.Group]). */
enum class GroupFailure {
    /** The code is not a group code (`GROUP_ID.SECRET`): mistyped or cut. Nothing was sent. */
    BAD_CODE,

    /** The server knows no group of this code: never created, ended, or expired. */
    UNKNOWN_GROUP,

    /** Every party of the group has joined: no one else may. */
    GROUP_FULL,

    /** Another party ended the group (left, failed or was cancelled) before this run finished. */
    GROUP_ENDED,

    /** The group's lifetime on the server passed. */
    GROUP_EXPIRED,

    /** The server does not take this party's credential for the group. */
    INVALID_PARTY,

    /** A party's mailbox on the server stayed full until the run's deadline. */
    MAILBOX_FULL,

    /** The server's group limits are reached: retry after [ContactDiscoveryException.Group.retryAfterSeconds]. */
    TOO_MANY_GROUPS,

    /** The group did not fill, or the run did not finish, within [GroupRunOptions.deadline]. */
    TIMED_OUT,

    /**
     * A key announcement or a message that is not the group's (altered, replayed, reordered
     * or dropped on the way, by the server or by someone without the code): the run gives
     * no answer rather than a wrong one.
     */
    TAMPERED,

    /** A failure this version of the SDK does not know. */
    OTHER,
}

/** The server API's error codes (docs/api.md, "Errors"). */
enum class ServerErrorCode {
    BAD_REQUEST,
    INVALID_MESSAGE,
    COUNT_MISMATCH,
    TOO_MANY_ITEMS,
    UNSUPPORTED_PROTOCOL,
    MISSING_TOKEN,
    INVALID_TOKEN,
    NOT_FOUND,
    UNKNOWN_SESSION,
    METHOD_NOT_ALLOWED,
    REQUEST_TIMEOUT,
    WRONG_PHASE,
    EPOCH_MISMATCH,
    SESSION_EXPIRED,
    BODY_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    RATE_LIMITED,
    INTERNAL,
    TOO_MANY_SESSIONS,

    /** A code this version of the SDK does not know (a newer server). */
    UNKNOWN,
}
