package dev.psisdk

/**
 * The defaults of [DiscoveryConfig], read from the native library (one source for every
 * platform: psi-ffi's `default_discovery_config`), never restated here.
 */
internal expect object SdkDefaults {
    val defaultRegion: String
    val protocol: ProtocolChoice
    val threads: Int
    val timeoutMillis: Long
    val maxResponseBytes: Long
    val fetchLabels: Boolean
    val cacheMaxBytes: Long
    val allowInsecureHttp: Boolean
    val retries: Int
    val deadlineMillis: Long
}
