import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PsiFFI

/// Private contact discovery against one server: learns which of the user's contacts are
/// in the server's registry, and nothing else, without the server learning the contacts.
///
/// ```swift
/// let discovery = try ContactDiscovery(
///     serverURL: URL(string: "https://discovery.example.com")!,
///     configuration: DiscoveryConfiguration(token: token, cacheDirectory: cachesURL))
/// let result = try await discovery.match(addressBook) { $0.phone }
/// for m in result.matches { print(m.contact.name, m.label ?? "") }
/// ```
///
/// One client per server; it is `Sendable`, and runs may go on in parallel. Each run
/// executes on a native thread of its own (the protocol's CPU work never blocks a Swift
/// executor); `URLSession` moves the bytes. Cancelling the calling task cancels the run:
/// the request in flight is cancelled and the server session deleted.
public final class ContactDiscovery: Sendable, CustomStringConvertible {
    /// The server's base URL, as the native library normalized it.
    public let serverURL: URL
    /// The client's settings.
    public let configuration: DiscoveryConfiguration
    private let client: DiscoveryClient

    /// A client for the server at `serverURL` (`https://`; `http://` only to loopback unless
    /// ``DiscoveryConfiguration/allowInsecureHTTP``), sending requests through `session`
    /// (the app's own, for certificate pinning or a proxy; `nil`: the SDK's own session,
    /// without a cache).
    ///
    /// - Throws: ``ContactDiscoveryError/invalidInput(reason:)`` for a bad URL or setting.
    public init(
        serverURL: URL,
        configuration: DiscoveryConfiguration = DiscoveryConfiguration(),
        session: URLSession? = nil
    ) throws {
        self.configuration = configuration
        let transport = URLSessionTransport(session: session)
        do {
            client = try DiscoveryClient(
                serverUrl: serverURL.absoluteString, config: try configuration.ffi(), transport: transport)
        } catch {
            throw ContactDiscoveryError.mapping(error)
        }
        self.serverURL = URL(string: client.serverUrl()) ?? serverURL
    }

    /// Matches `contacts` (phone numbers and emails, as the user wrote them) against the
    /// registry.
    ///
    /// - Parameters:
    ///   - contacts: the address book's values; invalid ones come back in
    ///     ``MatchResult/rejected`` and are never sent.
    ///   - protocol: how this run picks its protocol (`nil`: the configuration's choice).
    ///   - linkHints: what the app knows of the network now (`nil`: the configuration's).
    ///   - onProgress: hears each phase, and each retry (``ProgressEvent/retry`` set: the
    ///     attempt, its cause and the wait; `phase` is then where the failed attempt was),
    ///     on a native thread: return quickly.
    /// - Returns: the matches with their labels, the rejected rows, the protocol and stats.
    /// - Throws: ``ContactDiscoveryError``, or `CancellationError` when the task is cancelled.
    public func match(
        _ contacts: [String],
        protocol choice: ProtocolChoice? = nil,
        linkHints: LinkHints? = nil,
        onProgress: (@Sendable (ProgressEvent) -> Void)? = nil
    ) async throws -> MatchResult<String> {
        try await match(contacts, protocol: choice, linkHints: linkHints, onProgress: onProgress) { $0 }
    }

    /// Matches the caller's own contact values: `identifier` gives each one's phone number or
    /// email, and the result hands back the values themselves.
    ///
    /// `identifier` runs on the caller's actor, before the run starts (the call stays on the
    /// caller's actor until it waits for the native run).
    ///
    /// - Throws: ``ContactDiscoveryError``, or `CancellationError` when the task is cancelled;
    ///   whatever `identifier` throws.
    nonisolated(nonsending) public func match<C: Sendable>(
        _ contacts: [C],
        protocol choice: ProtocolChoice? = nil,
        linkHints: LinkHints? = nil,
        onProgress: (@Sendable (ProgressEvent) -> Void)? = nil,
        identifier: (C) throws -> String
    ) async throws -> MatchResult<C> {
        let identifiers = try contacts.map(identifier)
        let listener = onProgress.map(Listener.init)
        let cancel = CancelHandle()
        let report: ContactReport
        do {
            report = try await withTaskCancellationHandler {
                try await client.matchContactsCancellable(
                    contacts: identifiers, protocol: choice?.ffi, hints: linkHints, listener: listener,
                    cancel: cancel)
            } onCancel: {
                cancel.cancel()
            }
        } catch {
            throw ContactDiscoveryError.mapping(error)
        }
        return try MatchResult(report, contacts: contacts)
    }

    /// The same run as ``match(_:protocol:linkHints:onProgress:identifier:)`` as a stream:
    /// progress events in phase order (with a ``MatchEvent/retry(_:)`` before each retry,
    /// whose phases follow from the start), then the result, then the end. Ending the iteration
    /// early (or cancelling the iterating task) cancels the run.
    public func matchEvents<C: Sendable>(
        _ contacts: [C],
        protocol choice: ProtocolChoice? = nil,
        linkHints: LinkHints? = nil,
        identifier: @escaping @Sendable (C) throws -> String
    ) -> AsyncThrowingStream<MatchEvent<C>, any Error> {
        let (stream, continuation) = AsyncThrowingStream<MatchEvent<C>, any Error>.makeStream()
        let task = Task {
            do {
                let result = try await self.match(
                    contacts, protocol: choice, linkHints: linkHints,
                    onProgress: { e in
                        if let r = e.retry {
                            continuation.yield(.retry(r))
                        } else {
                            continuation.yield(.progress(e))
                        }
                    }, identifier: identifier)
                continuation.yield(.result(result))
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// ``matchEvents(_:protocol:linkHints:identifier:)`` for plain strings.
    public func matchEvents(
        _ contacts: [String],
        protocol choice: ProtocolChoice? = nil,
        linkHints: LinkHints? = nil
    ) -> AsyncThrowingStream<MatchEvent<String>, any Error> {
        matchEvents(contacts, protocol: choice, linkHints: linkHints) { $0 }
    }

    /// The server's key epoch, registry size, protocols and limits (`GET /v1/health`).
    ///
    /// - Throws: ``ContactDiscoveryError``, or `CancellationError` when the task is cancelled.
    public func health() async throws -> ServerHealth {
        let cancel = CancelHandle()
        do {
            return try await withTaskCancellationHandler {
                try await client.healthCancellable(cancel: cancel)
            } onCancel: {
                cancel.cancel()
            }
        } catch {
            throw ContactDiscoveryError.mapping(error)
        }
    }

    /// How many native clients are alive in this process (a diagnostic: a released
    /// ``ContactDiscovery`` frees its native client once its runs have finished).
    public static var liveNativeClients: UInt64 { liveClients() }

    /// The client's server and settings (without the token).
    public var description: String { "ContactDiscovery(\(serverURL.absoluteString), \(configuration))" }
}

/// Hands the native run's progress to the app's closure.
private final class Listener: ProgressListener, Sendable {
    private let onProgress: @Sendable (ProgressEvent) -> Void
    init(_ onProgress: @escaping @Sendable (ProgressEvent) -> Void) { self.onProgress = onProgress }
    func onProgress(event: ProgressEvent) { onProgress(event) }
}
