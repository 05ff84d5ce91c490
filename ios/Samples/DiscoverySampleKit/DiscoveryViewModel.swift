import ContactDiscovery
import Foundation

/// The sample apps' screen state, platform-neutral: the iOS app's SwiftUI views and the
/// command-line sample show it. Runs one match at a time; ``cancel()`` stops it.
@MainActor
public final class DiscoveryViewModel {
    /// What the screen shows.
    public enum State: Sendable {
        /// Nothing run yet.
        case idle
        /// A run is going on, in this phase (nil before the first event).
        case running(Phase?)
        /// The run finished.
        case finished(MatchResult<SampleContact>)
        /// The run failed: a message for the user, and whether trying again may help.
        case failed(message: String, retryable: Bool)
        /// The user cancelled the run.
        case cancelled
    }

    /// The current state; ``onChange`` hears every change.
    public private(set) var state: State = .idle {
        didSet { onChange?(state) }
    }

    /// Called on the main actor after each change of ``state``.
    public var onChange: ((State) -> Void)?

    private let discovery: ContactDiscovery
    private var task: Task<Void, Never>?

    /// A view model matching through `discovery`.
    public init(discovery: ContactDiscovery) {
        self.discovery = discovery
    }

    /// The rows to show for a finished run: each match's name and label, sorted by name.
    nonisolated public static func rows(_ result: MatchResult<SampleContact>) -> [(name: String, label: String)] {
        result.matches
            .map { ($0.contact.name, $0.label ?? "(no label)") }
            .sorted { $0.0 < $1.0 }
    }

    /// A one-line summary: matches, rows that are not phone numbers or emails, protocol and bytes.
    nonisolated public static func summary(_ result: MatchResult<SampleContact>) -> String {
        "\(result.matches.count) contacts found, \(result.rejected.count) not usable, with \(result.protocol), "
            + "\(result.stats.bytesSent) B up, \(result.stats.bytesReceived) B down"
    }

    /// Starts matching `contacts` (cancelling a run already going on) and returns when done.
    public func match(_ contacts: [SampleContact], protocol choice: ProtocolChoice? = nil) async {
        task?.cancel()
        state = .running(nil)
        let discovery = self.discovery
        let task = Task { @MainActor in
            do {
                let result = try await discovery.match(
                    contacts, protocol: choice,
                    onProgress: { event in Task { @MainActor in self.progressed(event.phase) } }
                ) { $0.value }
                state = .finished(result)
            } catch is CancellationError {
                state = .cancelled
            } catch let error as ContactDiscoveryError {
                state = .failed(message: error.localizedDescription, retryable: error.isRetryable)
            } catch {
                state = .failed(message: error.localizedDescription, retryable: false)
            }
        }
        self.task = task
        await task.value
    }

    private func progressed(_ phase: Phase) {
        if case .running = state { state = .running(phase) }
    }

    /// Cancels the run going on, if any.
    public func cancel() {
        task?.cancel()
    }
}
