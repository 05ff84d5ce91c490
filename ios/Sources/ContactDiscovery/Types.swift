import PsiFFI

// The records and enums the native library exports as they are: plain data, `Sendable`
// and `Hashable` as generated, named and documented in bindings/psi-ffi. The Swift SDK
// mirrors only what needs Swift idiom (the configuration, the protocol choice, the
// result with the caller's own contacts, the errors): docs/adr/0031-swift-sdk.md.

/// A PSI protocol: `.dh` (DH-PSI), `.ot` (OT-PSI, KKRT16), `.cm20` (CM20-PSI).
public typealias PSIProtocol = PsiFFI.`Protocol`

/// What an automatic choice optimises: `.fastest` or `.fewestBytes`.
public typealias ChoicePolicy = PsiFFI.Policy

/// A phase of a run, in the order the run goes through them (docs/protocol-choice.md).
public typealias Phase = PsiFFI.Phase

/// A run entered `phase` (in round `round` for multi-round protocols), or, with `retry`
/// set, is about to start again.
public typealias ProgressEvent = PsiFFI.ProgressEvent

/// Why and when a run starts again: the attempt, the retries allowed, the cause (a log-safe
/// `reason`, `timeout`, the HTTP `status` and API `code` if the server answered) and the
/// wait in milliseconds.
public typealias RetryEvent = PsiFFI.RetryEvent

/// What became of a run's labels: `.off`, `.complete` (a match without a label has none in
/// the registry), `.capped` (some matches did not fit the label step) or `.failed`.
public typealias LabelStatus = PsiFFI.LabelStatus

/// Why a contact could not be matched (empty, too long, not an email or phone number...).
public typealias RejectReason = PsiFFI.RejectReason

/// The server's API error codes (docs/api.md, "Errors").
public typealias ServerErrorCode = PsiFFI.ServerErrorCode

/// Counters and times of one run: requests, bytes each way, the registry download, the
/// key epoch, the time per phase.
public typealias RunStats = PsiFFI.RunStats

/// The time one phase took.
public typealias PhaseTime = PsiFFI.PhaseTime

/// What the server says about itself (`GET /v1/health`).
public typealias ServerHealth = PsiFFI.ServerHealth

/// How a run's protocol was chosen: every candidate's prediction and the inputs.
public typealias ChoiceReport = PsiFFI.ChoiceReport

/// One candidate protocol's predicted time and bytes.
public typealias Prediction = PsiFFI.Prediction

/// The workload the automatic choice predicted.
public typealias ChoiceWorkload = PsiFFI.ChoiceWorkload

/// The link the automatic choice assumed.
public typealias LinkEstimate = PsiFFI.LinkEstimate

/// Per-operation costs of a device or server.
public typealias UnitCosts = PsiFFI.UnitCosts

/// Where an input of the automatic choice came from.
public typealias InputSource = PsiFFI.InputSource

/// Where each figure of the link the automatic choice assumed came from: the RTT, the
/// upstream and the downstream rate (``ChoiceReport/linkSources``).
public typealias LinkSources = PsiFFI.LinkSources

/// What the app knows of the current network (see ``LinkHintsMonitor`` on Apple platforms).
public typealias LinkHints = PsiFFI.LinkHints

extension PsiFFI.LinkHints {
    /// Nothing known: the choice starts from its defaults and the measured link.
    public static let unknown = LinkHints(
        network: "", downMbit: nil, upMbit: nil, rttMs: nil, metered: false, constrained: false)
}
