package dev.psisdk.android

import android.content.Context
import dev.psisdk.ContactDiscovery
import dev.psisdk.DiscoveryConfig
import java.io.File

/** Android conveniences for [ContactDiscovery]. */
object AndroidDiscovery {
    /** Name of the SDK's folder in the app's cache directory. */
    const val CACHE_FOLDER = "psi-sdk"

    /**
     * [config] with the encoded-registry cache in the app's cache directory
     * (`Context.getCacheDir()/psi-sdk`), which Android may clear when storage runs low: the
     * SDK then downloads the registry again. The automatic protocol choice's measurements
     * (`measurements.json`) go there too unless [DiscoveryConfig.measurementsDirectory] is set.
     */
    @JvmStatic
    fun withAppCache(context: Context, config: DiscoveryConfig): DiscoveryConfig =
        config.withCacheDirectory(File(context.cacheDir, CACHE_FOLDER).path)

    /** A client for [serverUrl] whose registry cache is in the app's cache directory. */
    @JvmStatic
    @JvmOverloads
    fun create(context: Context, serverUrl: String, config: DiscoveryConfig = DiscoveryConfig()) =
        ContactDiscovery(serverUrl, withAppCache(context, config))
}
