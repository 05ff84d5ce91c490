#if canImport(Network)
import Foundation
import Network

/// Link hints from `NWPathMonitor` (Apple platforms): whether the path is expensive
/// (cellular, a personal hotspot) or constrained (Low Data Mode), and its interface type as
/// the network's name, under which the SDK keeps its link estimates. Not compiled on Linux
/// (no Network framework): pass ``LinkHints/unknown`` or hints of your own there.
///
/// ```swift
/// let monitor = LinkHintsMonitor()       // keep it for the app's life
/// let result = try await discovery.match(contacts, linkHints: monitor.current)
/// ```
public final class LinkHintsMonitor: Sendable {
    private let monitor = NWPathMonitor()
    private let state = Mutex(LinkHints.unknown)

    /// Starts monitoring on a queue of its own.
    public init() {
        let state = self.state
        monitor.pathUpdateHandler = { path in
            let hints = LinkHintsMonitor.hints(for: path)
            state.withLock { $0 = hints }
        }
        monitor.start(queue: DispatchQueue(label: "dev.psisdk.link-hints"))
    }

    deinit { monitor.cancel() }

    /// The hints for the current path (``LinkHints/unknown`` until the first update).
    public var current: LinkHints { state.withLock { $0 } }

    /// The hints for `path`.
    public static func hints(for path: NWPath) -> LinkHints {
        let network: String
        if path.usesInterfaceType(.wifi) {
            network = "wifi"
        } else if path.usesInterfaceType(.cellular) {
            network = "cellular"
        } else if path.usesInterfaceType(.wiredEthernet) {
            network = "ethernet"
        } else {
            network = ""
        }
        return LinkHints(
            network: network, downMbit: nil, upMbit: nil, rttMs: nil,
            metered: path.isExpensive, constrained: path.isConstrained)
    }
}

/// A lock around a value (`Synchronization.Mutex` needs iOS 18; this works from iOS 15).
final class Mutex<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
#endif
