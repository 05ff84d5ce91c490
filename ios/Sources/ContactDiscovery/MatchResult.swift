import PsiFFI

/// The outcome of one run over the caller's contacts of type `C`.
public struct MatchResult<C: Sendable>: Sendable {
    /// The contacts that are in the registry, in input order, each with its label.
    public let matches: [MatchedContact<C>]
    /// The contacts that are not phone numbers or emails (never sent), in input order.
    public let rejected: [RejectedContact<C>]
    /// The protocol the run used.
    public let `protocol`: PSIProtocol
    /// How the run was asked to choose.
    public let requested: ProtocolChoice
    /// How an automatic choice was made (every candidate's prediction and the inputs);
    /// `nil` when the protocol was fixed.
    public let choice: ChoiceReport?
    /// Counters and times of the run (bytes each way, requests, the key epoch).
    public let stats: RunStats
    /// Why labels are missing, if the label step failed (the matches are still right).
    public let labelError: String?
    /// Matches that came back without their label because the label step's fixed size is too
    /// small for them (docs/protocol/labels.md); 0 when labels are off or the step failed.
    /// The label step has a slot for every contact, so this is 0 with today's servers.
    public let labelsSkipped: Int
    /// Matches without a label, whatever the reason: ``labelStatus`` says which applies.
    public let labelsMissing: Int
    /// What became of the labels: `.off` (not asked for), `.complete` (a match without a
    /// label has none in the registry), `.capped` (``labelsSkipped`` did not fit) or
    /// `.failed` (``labelError`` says why; the matches are still right).
    public let labelStatus: LabelStatus
    /// The registry's version that answered: the ETag of its encoded set. It changes with
    /// every import and key rotation: compare it with an earlier run's to tell whether the
    /// registry changed. Empty if the server named none.
    public let registryETag: String
    /// The server's key epoch that answered the run.
    public var epoch: UInt32 { stats.epoch }
}

extension MatchResult: Equatable where C: Equatable {}
extension MatchResult: Hashable where C: Hashable {}

/// A contact that is in the registry.
public struct MatchedContact<C: Sendable>: Sendable {
    /// The caller's own value.
    public let contact: C
    /// Its position in the list the caller passed.
    public let index: Int
    /// The normalized identifier that matched (E.164 phone number or lower-case email).
    public let identifier: String
    /// The registry's label for it (such as an account id), if it has one.
    public let label: String?
}

extension MatchedContact: Equatable where C: Equatable {}
extension MatchedContact: Hashable where C: Hashable {}

/// A contact that could not be used.
public struct RejectedContact<C: Sendable>: Sendable {
    /// The caller's own value.
    public let contact: C
    /// Its position in the list the caller passed.
    public let index: Int
    /// Why.
    public let reason: RejectReason
}

extension RejectedContact: Equatable where C: Equatable {}
extension RejectedContact: Hashable where C: Hashable {}

/// An event of ``ContactDiscovery/matchEvents(_:protocol:linkHints:identifier:)``: progress
/// in phase order (a retry starts the phases again, from `createSession`), then the result.
public enum MatchEvent<C: Sendable>: Sendable {
    /// The run entered a new phase.
    case progress(ProgressEvent)
    /// An attempt failed with an error that may pass (no response, a 5xx, the key epoch
    /// changed...): the run starts again from a new session after `waitMs`. The event
    /// says which attempt, why (log-safe: the kind of error and its code) and the wait.
    case retry(RetryEvent)
    /// The run finished; the stream ends after this event.
    case result(MatchResult<C>)
}

extension MatchResult {
    /// Maps the native report back onto the caller's contacts (rows are their indices).
    init(_ report: ContactReport, contacts: [C]) throws {
        func row(_ r: UInt64) throws -> Int {
            guard r < contacts.count else {
                throw ContactDiscoveryError.internal(reason: "the native library returned row \(r) of \(contacts.count)")
            }
            return Int(r)
        }
        matches = try report.matches.map { m in
            let i = try row(m.row)
            return MatchedContact(contact: contacts[i], index: i, identifier: m.identifier, label: m.label)
        }
        rejected = try report.rejected.map { r in
            let i = try row(r.row)
            return RejectedContact(contact: contacts[i], index: i, reason: r.reason)
        }
        `protocol` = report.protocol
        requested = ProtocolChoice(report.requested)
        choice = report.choice
        stats = report.stats
        labelError = report.labelError
        labelsSkipped = Int(clamping: report.labelsSkipped)
        labelsMissing = Int(clamping: report.labelsMissing)
        labelStatus = report.labelStatus
        registryETag = report.registryEtag
    }
}
