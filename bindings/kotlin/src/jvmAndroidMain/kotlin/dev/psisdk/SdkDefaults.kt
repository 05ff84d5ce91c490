package dev.psisdk

import dev.psisdk.ffi.defaultDiscoveryConfig

/** The native library's defaults (psi-ffi's `default_discovery_config`), read once. */
internal actual object SdkDefaults {
    private val native = NativeLibrary.call { defaultDiscoveryConfig() }

    actual val defaultRegion: String get() = native.defaultRegion
    actual val protocol: ProtocolChoice = native.protocol.toPublic()
    actual val threads: Int get() = native.threads.toIntClamped()
    actual val timeoutMillis: Long get() = native.timeoutMs.toLongClamped()
    actual val maxResponseBytes: Long get() = native.maxResponseBytes.toLongClamped()
    actual val fetchLabels: Boolean get() = native.fetchLabels
    actual val cacheMaxBytes: Long get() = native.cacheMaxBytes.toLongClamped()
    actual val allowInsecureHttp: Boolean get() = native.allowInsecureHttp
    actual val retries: Int get() = native.retries.toIntClamped()
    actual val deadlineMillis: Long get() = native.deadlineMs.toLongClamped()
}
