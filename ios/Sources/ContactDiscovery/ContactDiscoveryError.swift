import Foundation
import PsiFFI

/// Why a call of ``ContactDiscovery`` failed. Each case says what the app can do. Messages
/// never contain contact data, labels or the token. A cancelled call throws
/// `CancellationError` instead (its server session was deleted).
public enum ContactDiscoveryError: Error, Sendable, Hashable, LocalizedError {
    /// The input or the configuration cannot be used (no valid contact, too many contacts
    /// for this server, an unknown region, a bad URL or timeout). Retrying the same call
    /// fails the same way.
    case invalidInput(reason: String)
    /// No response from the server: connection refused or reset, a timeout (`timeout` is
    /// true), a response too large. Retrying later may help.
    case network(reason: String, timeout: Bool)
    /// The server refused the token (missing or not accepted).
    case unauthorized(reason: String)
    /// The server's limits are reached for this caller or for everyone. Retry after
    /// `retryAfterSeconds`, if the server gave it.
    case rateLimited(reason: String, retryAfterSeconds: UInt64?)
    /// The server answered with another error: its HTTP status and API error code.
    /// `retryable` is true when the same call may succeed later.
    case server(status: Int, code: ServerErrorCode, reason: String, retryable: Bool)
    /// The server's answer broke the protocol or the API. `retryable` is true when the
    /// registry changed during the run.
    case protocolViolation(reason: String, retryable: Bool)
    /// A bug in the SDK (a panic in the native library was caught). Please report it.
    case `internal`(reason: String)

    /// True when the same call may succeed later.
    public var isRetryable: Bool {
        switch self {
        case .network, .rateLimited: return true
        case .server(_, _, _, let retryable), .protocolViolation(_, let retryable): return retryable
        case .invalidInput, .unauthorized, .internal: return false
        }
    }

    /// The underlying cause as the native library reported it, for logs (no contact data):
    /// for ``network(reason:timeout:)`` the transport's own error (e.g. "connection refused
    /// (URLError -1004)"), for a server error its explanation.
    public var failureReason: String? {
        switch self {
        case .invalidInput(let reason), .network(let reason, _), .unauthorized(let reason),
             .rateLimited(let reason, _), .server(_, _, let reason, _),
             .protocolViolation(let reason, _), .internal(let reason):
            return reason
        }
    }

    /// What went wrong, for logs and developers (no contact data).
    public var errorDescription: String? {
        switch self {
        case .invalidInput(let reason): return "invalid input: \(reason)"
        case .network(let reason, _): return "network error: \(reason)"
        case .unauthorized(let reason): return "unauthorized: \(reason)"
        case .rateLimited(let reason, let after):
            return "rate limited: \(reason)" + (after.map { " (retry after \($0) s)" } ?? "")
        case .server(let status, let code, let reason, _): return "server error \(status) (\(code)): \(reason)"
        case .protocolViolation(let reason, _): return "protocol error: \(reason)"
        case .internal(let reason): return "internal error: \(reason)"
        }
    }
}

extension ContactDiscoveryError {
    /// The one conversion from the native library's error. `nil` for a cancelled run,
    /// which the caller turns into `CancellationError`.
    static func from(_ error: PsiError) -> ContactDiscoveryError? {
        switch error {
        case .InvalidInput(let reason): return .invalidInput(reason: reason)
        case .Network(let reason, let timeout): return .network(reason: reason, timeout: timeout)
        case .Unauthorized(let reason): return .unauthorized(reason: reason)
        case .RateLimited(let reason, let after): return .rateLimited(reason: reason, retryAfterSeconds: after)
        case .Server(let status, let code, let reason, let retryable):
            return .server(status: Int(status), code: code, reason: reason, retryable: retryable)
        case .Protocol(let reason, let retryable): return .protocolViolation(reason: reason, retryable: retryable)
        case .Cancelled: return nil
        case .Internal(let reason): return .internal(reason: reason)
        // Not retryable, as the native library says. Until the Swift SDK has its own case
        // for it (docs/adr/0043-tls-failure-reason.md), the configuration that cannot be
        // used: the URL's scheme, the server's certificate or the trusted roots.
        case .Tls(let reason): return .invalidInput(reason: "TLS failed: \(reason)")
        }
    }

    /// Maps whatever a native call threw: `CancellationError` for a cancelled run, a
    /// ``ContactDiscoveryError`` otherwise.
    static func mapping(_ error: any Error) -> any Error {
        if let e = error as? PsiError {
            return from(e) ?? CancellationError()
        }
        if error is CancellationError || error is ContactDiscoveryError { return error }
        return ContactDiscoveryError.internal(reason: "unexpected error from the native library: \(type(of: error))")
    }
}
