package dev.psisdk

import dev.psisdk.ffi.ContactReport
import dev.psisdk.ffi.ProgressEvent
import dev.psisdk.ffi.PsiException
import dev.psisdk.ffi.RetryEvent as FfiRetry
import dev.psisdk.ffi.LabelStatus as FfiLabelStatus
import dev.psisdk.ffi.LinkSources as FfiLinkSources
import kotlin.coroutines.cancellation.CancellationException
import dev.psisdk.ffi.ChoiceReport as FfiChoiceReport
import dev.psisdk.ffi.DiscoveryConfig as FfiConfig
import dev.psisdk.ffi.InputSource as FfiSource
import dev.psisdk.ffi.LinkHints as FfiLinkHints
import dev.psisdk.ffi.Policy as FfiPolicy
import dev.psisdk.ffi.ProtocolChoice as FfiChoice
import dev.psisdk.ffi.UnitCosts as FfiUnitCosts
import dev.psisdk.ffi.Phase as FfiPhase
import dev.psisdk.ffi.Protocol as FfiProtocol
import dev.psisdk.ffi.RejectReason as FfiRejectReason
import dev.psisdk.ffi.ServerErrorCode as FfiCode
import dev.psisdk.ffi.ServerHealth as FfiHealth
import dev.psisdk.ffi.GroupException
import dev.psisdk.ffi.GroupFailure as FfiGroupFailure
import dev.psisdk.ffi.GroupResult as FfiGroupResult
import dev.psisdk.ffi.GroupRunOptions as FfiGroupRunOptions
import java.time.Duration

// Conversions between the generated bindings (dev.psisdk.ffi) and the public API, in this
// one file. Every `when` is exhaustive, so a case added on the Rust side fails this
// compilation. Unsigned numbers become signed ones, clamped (Java has no unsigned types).

internal fun UInt.toIntClamped(): Int = if (this > Int.MAX_VALUE.toUInt()) Int.MAX_VALUE else toInt()

internal fun ULong.toLongClamped(): Long = if (this > Long.MAX_VALUE.toULong()) Long.MAX_VALUE else toLong()

/** The settings for the native client, which checks them; negative numbers cannot cross as unsigned. */
internal fun DiscoveryConfig.toFfi(): FfiConfig {
    for ((name, value) in listOf(
        "threads" to threads.toLong(),
        "timeoutMillis" to timeoutMillis,
        "maxResponseBytes" to maxResponseBytes,
        "cacheMaxBytes" to cacheMaxBytes,
        "retries" to retries.toLong(),
        "deadlineMillis" to deadlineMillis,
    )) {
        if (value < 0) throw ContactDiscoveryException.InvalidInput("$name must not be negative")
    }
    return FfiConfig(
        token = token,
        defaultRegion = defaultRegion,
        threads = threads.toUInt(),
        timeoutMs = timeoutMillis.toULong(),
        maxResponseBytes = maxResponseBytes.toULong(),
        fetchLabels = fetchLabels,
        cacheDir = cacheDirectory,
        cacheMaxBytes = cacheMaxBytes.toULong(),
        allowInsecureHttp = allowInsecureHttp,
        retries = retries.toUInt(),
        protocol = protocol.toFfi(),
        linkHints = linkHints.toFfi(),
        measurementsDir = measurementsDirectory,
        deadlineMs = deadlineMillis.toULong(),
    )
}

internal fun ProtocolChoice.toFfi(): FfiChoice = when (val choice = this) {
    is ProtocolChoice.Auto -> FfiChoice.Auto(choice.policy.toFfi())
    is Protocol -> FfiChoice.Fixed(choice.toFfi())
}

internal fun FfiChoice.toPublic(): ProtocolChoice = when (this) {
    is FfiChoice.Auto -> ProtocolChoice.Auto(policy.toPublic())
    is FfiChoice.Fixed -> protocol.toPublic()
}

internal fun ChoicePolicy.toFfi() = when (this) {
    ChoicePolicy.FASTEST -> FfiPolicy.FASTEST
    ChoicePolicy.FEWEST_BYTES -> FfiPolicy.FEWEST_BYTES
}

internal fun FfiPolicy.toPublic() = when (this) {
    FfiPolicy.FASTEST -> ChoicePolicy.FASTEST
    FfiPolicy.FEWEST_BYTES -> ChoicePolicy.FEWEST_BYTES
}

/** Kbit/s (Android's unit) to Mbit/s; unknown or not positive: unknown. */
private fun Int?.kbpsToMbit(): Double? = this?.takeIf { it > 0 }?.let { it / 1000.0 }

internal fun LinkHints.toFfi() = FfiLinkHints(
    network = networkKey,
    downMbit = downstreamKbps.kbpsToMbit(),
    upMbit = upstreamKbps.kbpsToMbit(),
    rttMs = rttMillis?.takeIf { it > 0 }?.toDouble(),
    metered = metered == true,
    constrained = constrained,
)

internal fun FfiSource.toPublic() = when (this) {
    FfiSource.MEASURED -> InputSource.MEASURED
    FfiSource.GIVEN -> InputSource.GIVEN
    FfiSource.DEFAULT -> InputSource.DEFAULT
}

internal fun FfiUnitCosts.toPublic() = UnitCosts(
    scalarMultNanos = scalarMultNs,
    hashToGroupNanos = hashToGroupNs,
    elementDecodeNanos = elementDecodeNs,
    aesBlockNanos = aesBlockNs,
    hashBlockNanos = hashBlockNs,
    entryNanos = entryNs,
    threads = threads.toInt(),
    cm20LookupNanos = cm20LookupNs,
)

internal fun FfiChoiceReport.toPublic() = ChoiceReport(
    protocol = protocol.toPublic(),
    policy = policy.toPublic(),
    predictions = predictions.map {
        Prediction(
            protocol = it.protocol.toPublic(),
            requests = it.requests.toInt(),
            bytesUp = it.bytesUp.toLong(),
            bytesDown = it.bytesDown.toLong(),
            totalMicros = it.totalMicros.toLong(),
            networkMicros = it.networkMicros.toLong(),
            clientMicros = it.clientMicros.toLong(),
            serverMicros = it.serverMicros.toLong(),
        )
    },
    workload = ChoiceWorkload(
        clientItems = workload.clientItems.toLong(),
        serverItems = workload.serverItems.toLong(),
        labels = workload.labels,
        cachedSet = workload.cachedSet,
    ),
    network = network,
    metered = metered,
    constrained = constrained,
    link = LinkEstimate(
        rttMillis = link.rttMs,
        upMbit = link.upMbit,
        downMbit = link.downMbit,
        rttSamples = link.rttSamples.toInt(),
        upSamples = link.upSamples.toInt(),
        downSamples = link.downSamples.toInt(),
    ),
    linkSource = linkSource.toPublic(),
    device = device.toPublic(),
    deviceSource = deviceSource.toPublic(),
    server = server.toPublic(),
    serverSource = serverSource.toPublic(),
    healthRequested = healthRequested,
    overheadMicros = overheadMicros.toLong(),
    probeRequests = probeRequests.toInt(),
    probeBytes = probeBytes.toLong(),
    linkSources = linkSources.toPublic(),
    fellBackFrom = fellBackFrom?.toPublic(),
)

internal fun FfiLinkSources.toPublic() = LinkSources(rtt.toPublic(), up.toPublic(), down.toPublic())

internal fun Protocol.toFfi() = when (this) {
    Protocol.DH -> FfiProtocol.DH
    Protocol.OT -> FfiProtocol.OT
    Protocol.CM20 -> FfiProtocol.CM20
    Protocol.GBF -> FfiProtocol.GBF
}

internal fun FfiProtocol.toPublic() = when (this) {
    FfiProtocol.DH -> Protocol.DH
    FfiProtocol.OT -> Protocol.OT
    FfiProtocol.CM20 -> Protocol.CM20
    FfiProtocol.GBF -> Protocol.GBF
}

internal fun FfiPhase.toPublic() = when (this) {
    FfiPhase.CREATE_SESSION -> Phase.CREATE_SESSION
    FfiPhase.CLIENT_START -> Phase.CLIENT_START
    FfiPhase.ROUND_TRIP -> Phase.ROUND_TRIP
    FfiPhase.SERVER_HELLO -> Phase.SERVER_HELLO
    FfiPhase.CLIENT_FINALIZE -> Phase.CLIENT_FINALIZE
    FfiPhase.CLIENT_SETUP -> Phase.CLIENT_SETUP
    FfiPhase.SERVER_CHUNK -> Phase.SERVER_CHUNK
    FfiPhase.CLIENT_CHUNK -> Phase.CLIENT_CHUNK
    FfiPhase.SERVER_OUTPUTS -> Phase.SERVER_OUTPUTS
    FfiPhase.ENCODED_SET -> Phase.ENCODED_SET
    FfiPhase.CLIENT_FINISH -> Phase.CLIENT_FINISH
    FfiPhase.LABELS -> Phase.LABELS
    FfiPhase.OTHER -> Phase.OTHER
}

internal fun ProgressEvent.toPublic() =
    Progress(phase.toPublic(), round.toIntClamped(), retry?.toPublic(), fraction)

internal fun FfiRetry.toPublic() = RetryEvent(
    attempt = attempt.toIntClamped(),
    retries = retries.toIntClamped(),
    reason = reason,
    isTimeout = timeout,
    status = status?.toInt(),
    code = code?.toPublic(),
    waitMillis = waitMs.toLongClamped(),
)

internal fun FfiLabelStatus.toPublic() = when (this) {
    FfiLabelStatus.OFF -> LabelStatus.OFF
    FfiLabelStatus.COMPLETE -> LabelStatus.COMPLETE
    FfiLabelStatus.CAPPED -> LabelStatus.CAPPED
    FfiLabelStatus.FAILED -> LabelStatus.FAILED
}

internal fun FfiRejectReason.toPublic() = when (this) {
    FfiRejectReason.EMPTY -> RejectReason.EMPTY
    FfiRejectReason.TOO_LONG -> RejectReason.TOO_LONG
    FfiRejectReason.BAD_EMAIL -> RejectReason.BAD_EMAIL
    FfiRejectReason.NOT_A_PHONE_NUMBER -> RejectReason.NOT_A_PHONE_NUMBER
    FfiRejectReason.UNPARSABLE_PHONE -> RejectReason.UNPARSABLE_PHONE
    FfiRejectReason.INVALID_PHONE -> RejectReason.INVALID_PHONE
    FfiRejectReason.OTHER -> RejectReason.OTHER
}

internal fun <C> ContactReport.toResult(contacts: List<C>): MatchResult<C> {
    val s = stats
    fun row(r: ULong): Int {
        if (r >= contacts.size.toULong()) {
            throw ContactDiscoveryException.Internal("the native library returned row $r of ${contacts.size}")
        }
        return r.toInt()
    }
    return MatchResult(
        matches = matches.map {
            val i = row(it.row)
            MatchedContact(contacts[i], i, it.identifier, it.label)
        },
        rejected = rejected.map {
            val i = row(it.row)
            RejectedContact(contacts[i], i, it.reason.toPublic())
        },
        protocol = protocol.toPublic(),
        stats = RunStats(
            requests = s.requests.toInt(),
            bytesSent = s.bytesSent.toLong(),
            bytesReceived = s.bytesReceived.toLong(),
            setBytesDownloaded = s.setBytesDownloaded.toLong(),
            setFromCache = s.setFromCache,
            roundTrips = s.roundTrips.toInt(),
            clientItems = s.clientItems.toLong(),
            duplicates = s.duplicates.toLong(),
            serverItems = s.serverItems.toLong(),
            epoch = s.epoch.toLong(),
            phases = s.phases.map { PhaseTime(it.phase.toPublic(), it.micros.toLong()) },
            serverMicros = s.serverMicros.toLong(),
            totalMicros = s.totalMicros.toLong(),
            workAheadMicros = s.workAheadMicros.toLong(),
            sync = s.sync?.let {
                SyncStats(
                    snapshotBytes = it.snapshotBytes.toLongClamped(),
                    deltaBytes = it.deltaBytes.toLongClamped(),
                    fromCache = it.fromCache,
                    candidates = it.candidates.toLongClamped(),
                    haveVersion = it.haveVersion.toLongClamped(),
                    servedVersion = it.servedVersion.toLongClamped(),
                )
            },
        ),
        labelError = labelError,
        requested = requested.toPublic(),
        choice = choice?.toPublic(),
        labelStatus = labelStatus.toPublic(),
        labelsMissing = labelsMissing.toLongClamped(),
        labelsSkipped = labelsSkipped.toLongClamped(),
        registryVersion = registryVersion,
    )
}

internal fun FfiHealth.toPublic() = ServerHealth(
    epoch = epoch.toLong(),
    registryItems = registryItems.toLong(),
    protocols = protocols.map { it.toPublic() },
    maxClientItems = maxClientItems.toLong(),
    maxBodyBytes = maxBodyBytes.toLong(),
    registryVersion = registryVersion,
)

internal fun FfiCode.toPublic() = when (this) {
    FfiCode.BAD_REQUEST -> ServerErrorCode.BAD_REQUEST
    FfiCode.INVALID_MESSAGE -> ServerErrorCode.INVALID_MESSAGE
    FfiCode.COUNT_MISMATCH -> ServerErrorCode.COUNT_MISMATCH
    FfiCode.TOO_MANY_ITEMS -> ServerErrorCode.TOO_MANY_ITEMS
    FfiCode.UNSUPPORTED_PROTOCOL -> ServerErrorCode.UNSUPPORTED_PROTOCOL
    FfiCode.MISSING_TOKEN -> ServerErrorCode.MISSING_TOKEN
    FfiCode.INVALID_TOKEN -> ServerErrorCode.INVALID_TOKEN
    FfiCode.NOT_FOUND -> ServerErrorCode.NOT_FOUND
    FfiCode.UNKNOWN_SESSION -> ServerErrorCode.UNKNOWN_SESSION
    FfiCode.METHOD_NOT_ALLOWED -> ServerErrorCode.METHOD_NOT_ALLOWED
    FfiCode.REQUEST_TIMEOUT -> ServerErrorCode.REQUEST_TIMEOUT
    FfiCode.WRONG_PHASE -> ServerErrorCode.WRONG_PHASE
    FfiCode.EPOCH_MISMATCH -> ServerErrorCode.EPOCH_MISMATCH
    FfiCode.SESSION_EXPIRED -> ServerErrorCode.SESSION_EXPIRED
    FfiCode.BODY_TOO_LARGE -> ServerErrorCode.BODY_TOO_LARGE
    FfiCode.UNSUPPORTED_MEDIA_TYPE -> ServerErrorCode.UNSUPPORTED_MEDIA_TYPE
    FfiCode.RATE_LIMITED -> ServerErrorCode.RATE_LIMITED
    FfiCode.INTERNAL -> ServerErrorCode.INTERNAL
    FfiCode.TOO_MANY_SESSIONS -> ServerErrorCode.TOO_MANY_SESSIONS
    FfiCode.UNKNOWN -> ServerErrorCode.UNKNOWN
}

/**
 * The public exception for a native error, which it carries as its cause; `Cancelled`
 * becomes a [CancellationException].
 */
internal fun PsiException.toPublic(): Exception = when (this) {
    is PsiException.InvalidInput -> ContactDiscoveryException.InvalidInput(reason, this)
    is PsiException.Network -> ContactDiscoveryException.Network(reason, timeout, this)
    is PsiException.Unauthorized -> ContactDiscoveryException.Unauthorized(reason, this)
    is PsiException.RateLimited ->
        ContactDiscoveryException.RateLimited(reason, retryAfterSecs?.toLongClamped(), this)
    is PsiException.Server ->
        ContactDiscoveryException.Server(reason, status.toInt(), code.toPublic(), retryable, this)
    is PsiException.Protocol -> ContactDiscoveryException.ProtocolViolation(reason, retryable, this)
    is PsiException.Cancelled -> CancellationException("the run was cancelled").also { it.initCause(this) }
    is PsiException.Internal -> ContactDiscoveryException.Internal(reason, this)
    is PsiException.Tls -> ContactDiscoveryException.Tls(reason, this)
}

/** A group run's settings for the native library, which checks them; a negative duration cannot cross as unsigned. */
internal fun GroupRunOptions.toFfi(): FfiGroupRunOptions {
    if (deadline.isNegative) throw ContactDiscoveryException.InvalidInput("deadline must not be negative")
    val millis = runCatching { deadline.toMillis() }.getOrDefault(Long.MAX_VALUE)
    return FfiGroupRunOptions(shareResult = shareResult, deadlineMs = millis.toULong())
}

internal fun <C> FfiGroupResult.toResult(contacts: List<C>): GroupResult<C> {
    fun row(r: ULong): Int {
        if (r >= contacts.size.toULong()) {
            throw ContactDiscoveryException.Internal("the native library returned row $r of ${contacts.size}")
        }
        return r.toInt()
    }
    fun ms(v: ULong) = Duration.ofMillis(v.toLongClamped())
    val s = stats
    return GroupResult(
        party = party.toIntClamped(),
        size = size.toIntClamped(),
        common = common,
        matches = matches.map {
            val i = row(it.row)
            GroupMatch(contacts[i], i, it.identifier)
        },
        rejected = rejected.map {
            val i = row(it.row)
            RejectedContact(contacts[i], i, it.reason.toPublic())
        },
        stats = GroupStats(
            requests = s.requests.toLongClamped(),
            bytesSent = s.bytesSent.toLongClamped(),
            bytesReceived = s.bytesReceived.toLongClamped(),
            protocolBytesSent = s.protocolBytesSent.toLongClamped(),
            protocolBytesReceived = s.protocolBytesReceived.toLongClamped(),
            elapsed = ms(s.elapsedMs),
            waited = ms(s.waitedMs),
            compute = ms(s.computeMs),
        ),
    )
}

internal fun FfiGroupFailure.toPublic() = when (this) {
    FfiGroupFailure.BAD_CODE -> GroupFailure.BAD_CODE
    FfiGroupFailure.UNKNOWN_GROUP -> GroupFailure.UNKNOWN_GROUP
    FfiGroupFailure.GROUP_FULL -> GroupFailure.GROUP_FULL
    FfiGroupFailure.GROUP_ENDED -> GroupFailure.GROUP_ENDED
    FfiGroupFailure.GROUP_EXPIRED -> GroupFailure.GROUP_EXPIRED
    FfiGroupFailure.INVALID_PARTY -> GroupFailure.INVALID_PARTY
    FfiGroupFailure.MAILBOX_FULL -> GroupFailure.MAILBOX_FULL
    FfiGroupFailure.TOO_MANY_GROUPS -> GroupFailure.TOO_MANY_GROUPS
    FfiGroupFailure.TIMED_OUT -> GroupFailure.TIMED_OUT
    FfiGroupFailure.TAMPERED -> GroupFailure.TAMPERED
    FfiGroupFailure.OTHER -> GroupFailure.OTHER
}

/**
 * The public exception for a group call's native error: a group failure becomes
 * [ContactDiscoveryException.Group], anything else what a match would throw.
 */
internal fun GroupException.toPublic(): Exception = when (this) {
    is GroupException.Failed ->
        ContactDiscoveryException.Group(reason, failure.toPublic(), retryable, retryAfterSecs?.toLongClamped(), this)
    is GroupException.Call -> error.toPublic()
}
