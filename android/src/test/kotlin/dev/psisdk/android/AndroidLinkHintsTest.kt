package dev.psisdk.android

import android.Manifest
import android.content.Context
import android.net.ConnectivityManager
import android.net.NetworkCapabilities
import dev.psisdk.DiscoveryConfig
import dev.psisdk.LinkHints
import dev.psisdk.LinkTransport
import java.io.File
import org.junit.Assert.assertEquals
import org.junit.Test
import org.junit.runner.RunWith
import org.robolectric.RobolectricTestRunner
import org.robolectric.RuntimeEnvironment
import org.robolectric.Shadows.shadowOf
import org.robolectric.annotation.Config
import org.robolectric.shadows.ShadowNetworkCapabilities

/** The Android-specific code on Robolectric's Android 14 (API 34). */
@RunWith(RobolectricTestRunner::class)
@Config(sdk = [34])
class AndroidLinkHintsTest {
    private val context: Context get() = RuntimeEnvironment.getApplication()

    private fun capabilities(transport: Int, notMetered: Boolean, downKbps: Int): NetworkCapabilities {
        val caps = ShadowNetworkCapabilities.newInstance()
        shadowOf(caps).addTransportType(transport)
        if (notMetered) shadowOf(caps).addCapability(NetworkCapabilities.NET_CAPABILITY_NOT_METERED)
        shadowOf(caps).setLinkDownstreamBandwidthKbps(downKbps)
        return caps
    }

    @Test
    fun wifiWithoutMeteringIsUnmetered() {
        val hints = AndroidLinkHints.fromCapabilities(
            capabilities(NetworkCapabilities.TRANSPORT_WIFI, notMetered = true, downKbps = 50_000),
            metered = false,
        )
        assertEquals(LinkHints(false, LinkTransport.WIFI, 50_000, null), hints)
    }

    @Test
    fun cellularIsMeteredAndUnknownBandwidthIsNull() {
        val hints = AndroidLinkHints.fromCapabilities(
            capabilities(NetworkCapabilities.TRANSPORT_CELLULAR, notMetered = false, downKbps = 0),
            metered = true,
        )
        assertEquals(LinkHints(true, LinkTransport.CELLULAR, null, null), hints)
    }

    @Test
    fun dataSaverConstrainsOnlyMeteredNetworks() {
        val cell = capabilities(NetworkCapabilities.TRANSPORT_CELLULAR, notMetered = false, downKbps = 5_000)
        val saving = AndroidLinkHints.fromCapabilities(cell, metered = true, dataSaver = true)
        assertEquals(LinkHints(true, LinkTransport.CELLULAR, 5_000, null, constrained = true), saving)
        assertEquals("cellular", saving.networkKey)
        val wifi = capabilities(NetworkCapabilities.TRANSPORT_WIFI, notMetered = true, downKbps = 50_000)
        assertEquals(false, AndroidLinkHints.fromCapabilities(wifi, metered = false, dataSaver = true).constrained)
    }

    @Test
    fun readsDataSaverFromConnectivityManager() {
        grantNetworkState()
        val cm = context.getSystemService(ConnectivityManager::class.java)
        val caps = capabilities(NetworkCapabilities.TRANSPORT_CELLULAR, notMetered = false, downKbps = 3_000)
        shadowOf(cm).setNetworkCapabilities(cm.activeNetwork, caps)
        shadowOf(cm).setRestrictBackgroundStatus(ConnectivityManager.RESTRICT_BACKGROUND_STATUS_ENABLED)
        assertEquals(true, AndroidLinkHints.read(context).constrained)
        shadowOf(cm).setRestrictBackgroundStatus(ConnectivityManager.RESTRICT_BACKGROUND_STATUS_DISABLED)
        assertEquals(false, AndroidLinkHints.read(context).constrained)
    }

    private fun grantNetworkState() =
        shadowOf(RuntimeEnvironment.getApplication()).grantPermissions(Manifest.permission.ACCESS_NETWORK_STATE)

    @Test
    fun withoutThePermissionNothingIsKnown() {
        shadowOf(RuntimeEnvironment.getApplication()).denyPermissions(Manifest.permission.ACCESS_NETWORK_STATE)
        assertEquals(LinkHints.UNKNOWN, AndroidLinkHints.read(context))
    }

    @Test
    fun readsTheActiveNetworkFromConnectivityManager() {
        grantNetworkState()
        val cm = context.getSystemService(ConnectivityManager::class.java)
        val caps = capabilities(NetworkCapabilities.TRANSPORT_CELLULAR, notMetered = false, downKbps = 12_000)
        shadowOf(cm).setNetworkCapabilities(cm.activeNetwork, caps)
        val hints = AndroidLinkHints.read(context)
        assertEquals(LinkTransport.CELLULAR, hints.transport)
        assertEquals(true, hints.metered)
        assertEquals(12_000, hints.downstreamKbps)
    }

    @Test
    fun noActiveNetworkSaysNone() {
        grantNetworkState()
        val cm = context.getSystemService(ConnectivityManager::class.java)
        shadowOf(cm).setDefaultNetworkActive(false)
        shadowOf(cm).setActiveNetworkInfo(null)
        assertEquals(LinkTransport.NONE, AndroidLinkHints.read(context).transport)
    }

    @Test
    @Config(qualifiers = "de-rDE")
    fun theDefaultRegionIsTheDevicesRegion() {
        assertEquals("DE", AndroidDiscovery.deviceRegion(context))
        val config = AndroidDiscovery.defaultConfig(context)
        assertEquals("DE", config.defaultRegion)
        // Everything else is the SDK's default.
        assertEquals(DiscoveryConfig().timeoutMillis, config.timeoutMillis)
    }

    @Test
    @Config(qualifiers = "en")
    fun aLocaleWithoutRegionKeepsTheSdkDefault() {
        assertEquals(null, AndroidDiscovery.deviceRegion(context))
        assertEquals(DiscoveryConfig().defaultRegion, AndroidDiscovery.defaultConfig(context).defaultRegion)
    }

    @Test
    fun theRegistryCacheGoesToTheAppCacheDirectory() {
        val config = AndroidDiscovery.withAppCache(context, DiscoveryConfig(token = "t"))
        assertEquals(File(context.cacheDir, "psi-sdk").path, config.cacheDirectory)
        assertEquals("t", config.token)
    }
}
