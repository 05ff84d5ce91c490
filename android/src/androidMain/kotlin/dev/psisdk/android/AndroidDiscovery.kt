package dev.psisdk.android

import android.content.Context
import dev.psisdk.ContactDiscovery
import dev.psisdk.DiscoveryConfig
import java.io.File
import java.util.Locale

/** Android conveniences for [ContactDiscovery]. */
object AndroidDiscovery {
    /** Name of the SDK's folder in the app's cache directory. */
    const val CACHE_FOLDER = "psi-sdk"

    /**
     * The region of the device's first locale (`Configuration.getLocales()`, the user's
     * language and region settings), as the ISO 3166 alpha-2 code phone numbers written
     * without a country code are read in; `null` when the locale names no region (such as
     * plain `en`) or a code that is not two letters (a UN M.49 area such as `419`).
     */
    @JvmStatic
    fun deviceRegion(context: Context): String? {
        val locales = context.resources.configuration.locales
        val locale = if (locales.isEmpty) Locale.getDefault() else locales[0]
        return locale.country.takeIf { it.length == 2 && it.all { c -> c in 'A'..'Z' } }
    }

    /**
     * The SDK's default settings with the device's region ([deviceRegion]) for phone
     * numbers without a country code, when the locale names one (else the SDK's default).
     */
    @JvmStatic
    fun defaultConfig(context: Context): DiscoveryConfig {
        val config = DiscoveryConfig()
        return deviceRegion(context)?.let { config.withDefaultRegion(it) } ?: config
    }

    /**
     * Loads the SDK's native library and its phone-number metadata on a background thread
     * ([ContactDiscovery.preload]): call it in `Application.onCreate`, so that the first
     * [DiscoveryConfig], [ContactDiscovery] and run do not pay for it on the main thread.
     */
    @JvmStatic
    fun preload() = ContactDiscovery.preload()

    /**
     * [config] with the encoded-registry cache in the app's cache directory
     * (`Context.getCacheDir()/psi-sdk`), which Android may clear when storage runs low: the
     * SDK then downloads the registry again. The automatic protocol choice's measurements
     * (`measurements.json`) go there too unless [DiscoveryConfig.measurementsDirectory] is set.
     */
    @JvmStatic
    fun withAppCache(context: Context, config: DiscoveryConfig): DiscoveryConfig =
        config.withCacheDirectory(File(context.cacheDir, CACHE_FOLDER).path)

    /**
     * A client for [serverUrl] whose registry cache is in the app's cache directory. By
     * default its settings are [defaultConfig]'s: the device's region for phone numbers.
     */
    @JvmStatic
    @JvmOverloads
    fun create(context: Context, serverUrl: String, config: DiscoveryConfig = defaultConfig(context)) =
        ContactDiscovery(serverUrl, withAppCache(context, config))
}
