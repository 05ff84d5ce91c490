package dev.psisdk

/**
 * The result of a match: which of the caller's contacts are in the server's registry, which
 * could not be matched and why, and how the run went.
 *
 * @param C the caller's contact type (a `String` when matching plain identifiers).
 * @property matches the matched contacts, in the order given.
 * @property rejected the contacts that are not a valid phone number or email, in the order
 *   given, each with the reason. They were not sent.
 * @property protocol the protocol that ran.
 * @property stats bytes, round trips and time per phase.
 * @property labelError why labels are missing, if fetching them failed after the match
 *   succeeded (the matches are still returned, without labels).
 * @property requested how the protocol was to be picked (the call's choice or the config's).
 * @property choice how the automatic choice picked [protocol]: every candidate's predicted
 *   time and bytes, and the inputs. `null` when [requested] was a fixed [Protocol].
 * @property labelStatus what became of the labels: [LabelStatus.OFF] (not asked for),
 *   [LabelStatus.COMPLETE] (a match without a label has none in the registry),
 *   [LabelStatus.CAPPED] ([labelsSkipped] did not fit the label step) or [LabelStatus.FAILED]
 *   ([labelError] says why; the matches are still right).
 * @property labelsMissing matches without a label, whatever the reason ([labelStatus] says
 *   which applies).
 * @property labelsSkipped matches that came back without their label because the label
 *   step's fixed size is too small for them; 0 when labels are off or the step failed.
 * @property registryVersion the registry's version that answered the run (the ETag of its
 *   encoded set, without HTTP's quotes). It changes with every import and key rotation:
 *   compare it with an earlier run's to tell whether the registry changed. Empty if the
 *   server named none.
 */
class MatchResult<C>(
    val matches: List<MatchedContact<C>>,
    val rejected: List<RejectedContact<C>>,
    val protocol: Protocol,
    val stats: RunStats,
    val labelError: String?,
    val requested: ProtocolChoice,
    val choice: ChoiceReport?,
    val labelStatus: LabelStatus = LabelStatus.OFF,
    val labelsMissing: Long = 0,
    val labelsSkipped: Long = 0,
    val registryVersion: String = "",
) {
    /** The server's key epoch that answered the run ([RunStats.epoch]). */
    val epoch: Long get() = stats.epoch

    override fun toString() =
        "MatchResult(matches=${matches.size}, rejected=${rejected.size}, protocol=$protocol, " +
            "requested=$requested, labelStatus=$labelStatus, labelsMissing=$labelsMissing, " +
            "registryVersion=$registryVersion, stats=$stats)"
}

/** What became of the labels of a run's matches (docs/protocol/labels.md §6). */
enum class LabelStatus {
    /** Labels were not asked for ([DiscoveryConfig.fetchLabels] off): no match has one. */
    OFF,

    /** The label step had a slot for every match: a match without a label has none. */
    COMPLETE,

    /** Some matches ([MatchResult.labelsSkipped]) did not fit the label step's fixed size. */
    CAPPED,

    /** The label step failed after the matching ([MatchResult.labelError] says why). */
    FAILED,
}

/**
 * A contact that is in the registry.
 *
 * @property contact the caller's own contact object.
 * @property index its position in the list given (0-based).
 * @property identifier its normalized identifier (E.164 phone number or lower-case email).
 * @property label its label in the registry (a display name, a user id), if it has one.
 */
data class MatchedContact<C>(
    val contact: C,
    val index: Int,
    val identifier: String,
    val label: String?,
)

/**
 * A contact that could not be matched.
 *
 * @property contact the caller's own contact object.
 * @property index its position in the list given (0-based).
 * @property reason why it is not a valid identifier.
 */
data class RejectedContact<C>(
    val contact: C,
    val index: Int,
    val reason: RejectReason,
)

/** Why a contact is not a valid identifier. */
enum class RejectReason {
    /** Nothing but whitespace. */
    EMPTY,

    /** Too long after normalization. */
    TOO_LONG,

    /** Contains an `@` but is not `local@domain.tld`. */
    BAD_EMAIL,

    /** Neither a phone number nor an email. */
    NOT_A_PHONE_NUMBER,

    /** The phone number could not be parsed (with the default region if it has no `+`). */
    UNPARSABLE_PHONE,

    /** Parsed, but not a valid number for its region. */
    INVALID_PHONE,

    /** A reason this version of the SDK does not know. */
    OTHER,
}
