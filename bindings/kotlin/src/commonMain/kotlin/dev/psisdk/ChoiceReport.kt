package dev.psisdk

/**
 * How an automatic choice picked its protocol: the policy applied, every candidate's
 * predicted cost, and the inputs of the prediction (docs/protocol-choice.md).
 *
 * @property protocol the protocol chosen (the one that ran).
 * @property policy the policy applied: the one asked for, or [ChoicePolicy.FEWEST_BYTES]
 *   when the hints said the network is constrained.
 * @property predictions every candidate's prediction (the protocols the server runs).
 * @property workload what was predicted.
 * @property network the name the link estimate is kept under ([LinkHints.networkKey]).
 * @property metered whether the hints said the network is metered.
 * @property constrained whether the hints said the network is constrained.
 * @property link the link assumed.
 * @property linkSource where it came from: measured by runs on this network (stored in the
 *   measurements directory, or this run's first request), the platform's hints, or the
 *   built-in default.
 * @property device this device's unit costs (calibrated once, about 40 ms, then stored).
 * @property deviceSource where they came from.
 * @property server the server's unit costs (advertised in its health, else a reference machine).
 * @property serverSource where they came from.
 * @property healthRequested whether the choice asked the server for its health (one extra
 *   request) rather than using the stored one.
 * @property probeRequests requests of the bounded link probe made for this choice (0: none;
 *   made only when the link is unknown and could change the choice).
 * @property probeBytes body bytes of that probe, both ways.
 * @property overheadMicros time spent choosing (calibration, health request).
 * @property linkSources where each figure of [link] came from: the round-trip time, the
 *   upstream and the downstream rate separately ([linkSource] is the whole's: measured as
 *   soon as one figure was, often only the RTT).
 * @property fellBackFrom the protocol the choice picked when the server refused it for lack
 *   of capacity and the run went on with DH-PSI ([protocol]); `null` otherwise.
 */
data class ChoiceReport(
    val protocol: Protocol,
    val policy: ChoicePolicy,
    val predictions: List<Prediction>,
    val workload: ChoiceWorkload,
    val network: String,
    val metered: Boolean,
    val constrained: Boolean,
    val link: LinkEstimate,
    val linkSource: InputSource,
    val device: UnitCosts,
    val deviceSource: InputSource,
    val server: UnitCosts,
    val serverSource: InputSource,
    val healthRequested: Boolean,
    val overheadMicros: Long,
    val probeRequests: Int = 0,
    val probeBytes: Long = 0,
    val linkSources: LinkSources = LinkSources(linkSource, linkSource, linkSource),
    val fellBackFrom: Protocol? = null,
) {
    /** The prediction of [protocol], if it was a candidate. */
    fun prediction(protocol: Protocol): Prediction? = predictions.firstOrNull { it.protocol == protocol }
}

/**
 * One candidate's predicted cost.
 *
 * @property requests HTTP requests of the run.
 * @property bytesUp request body bytes.
 * @property bytesDown response body bytes.
 * @property totalMicros predicted time of the whole run, the sum of the three parts below.
 * @property networkMicros latency and transfer.
 * @property clientMicros this device's computation.
 * @property serverMicros the server's computation.
 */
data class Prediction(
    val protocol: Protocol,
    val requests: Int,
    val bytesUp: Long,
    val bytesDown: Long,
    val totalMicros: Long,
    val networkMicros: Long,
    val clientMicros: Long,
    val serverMicros: Long,
) {
    /** Body bytes both ways. */
    val bytes: Long get() = bytesUp + bytesDown
}

/**
 * The workload predicted: [clientItems] distinct identifiers against [serverItems] entries,
 * with or without [labels], and whether the server's current encoded registry was cached
 * ([cachedSet]).
 */
data class ChoiceWorkload(
    val clientItems: Long,
    val serverItems: Long,
    val labels: Boolean,
    val cachedSet: Boolean,
)

/**
 * A link estimate: round-trip time, throughput each way, and how many timings each rests
 * on (all 0: a prior from the hints or the default).
 */
data class LinkEstimate(
    val rttMillis: Double,
    val upMbit: Double,
    val downMbit: Double,
    val rttSamples: Int,
    val upSamples: Int,
    val downSamples: Int,
)

/**
 * A side's cost per operation in nanoseconds on one thread, and the threads it uses.
 * [cm20LookupNanos] (a CM20-PSI column lookup) is null where it was not measured (a server
 * that does not advertise it); the model then uses a reference machine's.
 */
data class UnitCosts(
    val scalarMultNanos: Double,
    val hashToGroupNanos: Double,
    val elementDecodeNanos: Double,
    val aesBlockNanos: Double,
    val hashBlockNanos: Double,
    val entryNanos: Double,
    val threads: Int,
    val cm20LookupNanos: Double? = null,
)

/** Where each figure of a [LinkEstimate] came from. */
data class LinkSources(val rtt: InputSource, val up: InputSource, val down: InputSource)

/** Where an input of the choice came from. */
enum class InputSource {
    /** Measured by runs (the link, the device) or advertised by the server (its costs). */
    MEASURED,

    /** The platform's hints. */
    GIVEN,

    /** The built-in default: nothing measured or hinted. */
    DEFAULT,
}
