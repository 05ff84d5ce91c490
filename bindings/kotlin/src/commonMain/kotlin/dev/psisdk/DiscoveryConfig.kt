package dev.psisdk

import kotlin.jvm.JvmOverloads

/**
 * Settings of a [ContactDiscovery] client. Every property has a default; change them with
 * the `with...` methods (from Java: `new DiscoveryConfig().withToken("...")`).
 *
 * The defaults are the native library's own (`defaultDiscoveryConfig()` of the bindings, the
 * same on every platform): region `US` (Android: `AndroidDiscovery.defaultConfig` takes the
 * device's), the automatic choice for the fastest run, one worker thread per core, 60 s per
 * request, responses up to 32 MiB, labels fetched, a 64 MiB registry cache, `http://` only
 * to loopback, 2 retries, a whole run within 2 minutes. Creating a config therefore loads the
 * native library.
 *
 * @property token bearer token, if the server requires one. Kept out of [toString].
 * @property defaultRegion region for phone numbers written without a country code
 *   (ISO 3166 alpha-2, such as `US`, `GB`, `DE`).
 * @property protocol how runs pick their protocol unless a call says otherwise: by default
 *   [ProtocolChoice.Auto] with [ChoicePolicy.FASTEST]; a [Protocol] fixes it.
 * @property threads worker threads for the protocol's computation; 0 means one per core.
 * @property timeoutMillis limit on each HTTP request (connect, send, receive).
 * @property maxResponseBytes largest response body accepted.
 * @property fetchLabels whether to fetch the labels of matched contacts.
 * @property cacheDirectory directory for the server's encoded registry (use the app's
 *   cache directory), so a second run downloads nothing while the registry is unchanged.
 *   `null` keeps it in memory for the life of the client.
 * @property cacheMaxBytes largest encoded registry kept on disk.
 * @property allowInsecureHttp allow an `http://` server URL whose host is not loopback
 *   (default false: such a URL is refused with [ContactDiscoveryException.InvalidInput]
 *   before any connection). For development only: the token and the protocol messages then
 *   travel in the clear. `http://` to `localhost`, `127.0.0.0/8` and `::1` is always allowed.
 * @property retries how many times a run that failed with a retryable error (no response,
 *   a 5xx, a busy or rate-limited server with a short `Retry-After`, an expired session or a
 *   key rotation) is started again from a new session, after a backoff; 0 turns retries off.
 *   Each attempt counts against the caller's budget on the server.
 * @property linkHints what the platform knows of the network, for runs that pass no hints
 *   of their own (the network changes during an app's life: prefer passing them per run).
 * @property measurementsDirectory directory of `measurements.json`, the automatic choice's
 *   measurements: this device's unit costs, a link estimate per network
 *   ([LinkHints.networkKey]) and each server's last health (its protocols, limits and costs).
 *   Read when the client is created and written after each run, so a later run (or app
 *   start) needs no calibration or health request and starts from the measured link.
 *   `null`: [cacheDirectory] if set, else kept in memory for the life of the client.
 * @property deadlineMillis a deadline for the whole run, from the call: its retries and their
 *   waits, and every request (each request's timeout is cut to what is left); a run that
 *   reaches it fails with [ContactDiscoveryException.Network] whose `isTimeout` is true.
 *   0: none (only [timeoutMillis] bounds each request). Default 2 minutes.
 */
class DiscoveryConfig @JvmOverloads constructor(
    val token: String? = null,
    val defaultRegion: String = SdkDefaults.defaultRegion,
    val protocol: ProtocolChoice = SdkDefaults.protocol,
    val threads: Int = SdkDefaults.threads,
    val timeoutMillis: Long = SdkDefaults.timeoutMillis,
    val maxResponseBytes: Long = SdkDefaults.maxResponseBytes,
    val fetchLabels: Boolean = SdkDefaults.fetchLabels,
    val cacheDirectory: String? = null,
    val cacheMaxBytes: Long = SdkDefaults.cacheMaxBytes,
    val allowInsecureHttp: Boolean = SdkDefaults.allowInsecureHttp,
    val retries: Int = SdkDefaults.retries,
    val linkHints: LinkHints = LinkHints.UNKNOWN,
    val measurementsDirectory: String? = null,
    val deadlineMillis: Long = SdkDefaults.deadlineMillis,
) {
    /** A copy with the bearer token [token]. */
    fun withToken(token: String?) = copy(token = token)

    /** A copy with the default region [region] for phone numbers. */
    fun withDefaultRegion(region: String) = copy(defaultRegion = region)

    /** A copy whose runs pick their protocol by [protocol] (a [Protocol] fixes it). */
    fun withProtocol(protocol: ProtocolChoice) = copy(protocol = protocol)

    /** A copy with [threads] worker threads (0: one per core). */
    fun withThreads(threads: Int) = copy(threads = threads)

    /** A copy with a per-request timeout of [millis] milliseconds. */
    fun withTimeoutMillis(millis: Long) = copy(timeoutMillis = millis)

    /** A copy that accepts response bodies up to [bytes] bytes. */
    fun withMaxResponseBytes(bytes: Long) = copy(maxResponseBytes = bytes)

    /** A copy that fetches labels or not. */
    fun withLabels(fetch: Boolean) = copy(fetchLabels = fetch)

    /** A copy that caches the encoded registry in [directory], up to [maxBytes] bytes. */
    @JvmOverloads
    fun withCacheDirectory(directory: String?, maxBytes: Long = cacheMaxBytes) =
        copy(cacheDirectory = directory, cacheMaxBytes = maxBytes)

    /** A copy that allows `http://` to hosts that are not loopback (development only). */
    fun withInsecureHttp(allow: Boolean) = copy(allowInsecureHttp = allow)

    /** A copy that starts a failed run again at most [retries] times (0: never). */
    fun withRetries(retries: Int) = copy(retries = retries)

    /** A copy whose runs use [hints] unless a call passes its own. */
    fun withLinkHints(hints: LinkHints) = copy(linkHints = hints)

    /** A copy whose runs end within [millis] milliseconds in all (0: no deadline). */
    fun withDeadlineMillis(millis: Long) = copy(deadlineMillis = millis)

    /** A copy that keeps the automatic choice's measurements in [directory]. */
    fun withMeasurementsDirectory(directory: String?) = copy(measurementsDirectory = directory)

    private fun copy(
        token: String? = this.token,
        defaultRegion: String = this.defaultRegion,
        protocol: ProtocolChoice = this.protocol,
        threads: Int = this.threads,
        timeoutMillis: Long = this.timeoutMillis,
        maxResponseBytes: Long = this.maxResponseBytes,
        fetchLabels: Boolean = this.fetchLabels,
        cacheDirectory: String? = this.cacheDirectory,
        cacheMaxBytes: Long = this.cacheMaxBytes,
        allowInsecureHttp: Boolean = this.allowInsecureHttp,
        retries: Int = this.retries,
        linkHints: LinkHints = this.linkHints,
        measurementsDirectory: String? = this.measurementsDirectory,
        deadlineMillis: Long = this.deadlineMillis,
    ) = DiscoveryConfig(
        token, defaultRegion, protocol, threads, timeoutMillis, maxResponseBytes, fetchLabels,
        cacheDirectory, cacheMaxBytes, allowInsecureHttp, retries, linkHints, measurementsDirectory,
        deadlineMillis,
    )

    override fun toString() =
        "DiscoveryConfig(token=${if (token == null) "none" else "set"}, defaultRegion=$defaultRegion, " +
            "protocol=$protocol, threads=$threads, timeoutMillis=$timeoutMillis, " +
            "maxResponseBytes=$maxResponseBytes, fetchLabels=$fetchLabels, " +
            "cacheDirectory=$cacheDirectory, cacheMaxBytes=$cacheMaxBytes, " +
            "allowInsecureHttp=$allowInsecureHttp, retries=$retries, linkHints=$linkHints, " +
            "measurementsDirectory=$measurementsDirectory, deadlineMillis=$deadlineMillis)"
}
