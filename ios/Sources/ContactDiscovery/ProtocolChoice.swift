import PsiFFI

/// How a run picks its protocol.
///
/// `.auto(.fastest)` (the default) predicts every protocol the server runs from the
/// workload, this device, the server and the network, and takes the fastest;
/// `.auto(.fewestBytes)` the one that sends the fewest bytes (metered networks). `.dh`,
/// `.ot` and `.cm20` fix the protocol.
public enum ProtocolChoice: Sendable, Hashable, CustomStringConvertible {
    /// Chosen per run by the cost model, optimising `policy`.
    case auto(ChoicePolicy)
    /// Always this protocol.
    case fixed(PSIProtocol)

    /// The automatic choice for the fastest run (the default).
    public static let auto: ProtocolChoice = .auto(.fastest)
    /// DH-PSI: the fewest bytes; the registry's encoding is cached between runs.
    public static let dh: ProtocolChoice = .fixed(.dh)
    /// OT-PSI (KKRT16).
    public static let ot: ProtocolChoice = .fixed(.ot)
    /// CM20-PSI (Chase-Miao), where the server offers it.
    public static let cm20: ProtocolChoice = .fixed(.cm20)

    /// A short description, such as `auto(fastest)` or `ot`.
    public var description: String {
        switch self {
        case .auto(let policy): return "auto(\(policy == .fastest ? "fastest" : "fewestBytes"))"
        case .fixed(let p): return String(describing: p)
        }
    }

    var ffi: PsiFFI.ProtocolChoice {
        switch self {
        case .auto(let policy): return .auto(policy: policy)
        case .fixed(let p): return .fixed(protocol: p)
        }
    }

    init(_ ffi: PsiFFI.ProtocolChoice) {
        switch ffi {
        case .auto(let policy): self = .auto(policy)
        case .fixed(let p): self = .fixed(p)
        }
    }
}
