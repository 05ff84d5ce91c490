package dev.psisdk

import kotlin.jvm.JvmField
import kotlin.jvm.JvmOverloads

/**
 * How a run picks its protocol: [Auto] predicts every protocol the server runs from the
 * workload, the network, this device and the server, and takes the best by its [ChoicePolicy];
 * a [Protocol] (`Protocol.DH`, `Protocol.OT`, `Protocol.CM20`, `Protocol.GBF`) is itself a fixed choice.
 *
 * ```
 * DiscoveryConfig()                                                 // Auto(FASTEST), the default
 * DiscoveryConfig().withProtocol(ProtocolChoice.Auto(ChoicePolicy.FEWEST_BYTES))
 * DiscoveryConfig().withProtocol(Protocol.OT)                       // always OT-PSI
 * ```
 *
 * The result says what was chosen and why: [MatchResult.choice].
 */
sealed interface ProtocolChoice {
    /** Predict every protocol the server runs and take the best by [policy]. */
    data class Auto @JvmOverloads constructor(val policy: ChoicePolicy = ChoicePolicy.FASTEST) : ProtocolChoice

    companion object {
        /** `Auto(FASTEST)`, the default. */
        @JvmField
        val AUTO: ProtocolChoice = Auto()
    }
}

/** What an automatic choice optimises. */
enum class ChoicePolicy {
    /** The least predicted time (the default). */
    FASTEST,

    /**
     * The fewest bytes both ways, time breaking ties: for metered or slow networks. Used
     * whatever the policy when [LinkHints.constrained] is set.
     */
    FEWEST_BYTES,
}
