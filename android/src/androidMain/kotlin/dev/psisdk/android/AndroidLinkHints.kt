package dev.psisdk.android

import android.Manifest
import android.content.Context
import android.content.pm.PackageManager
import android.net.ConnectivityManager
import android.net.NetworkCapabilities
import dev.psisdk.LinkHints
import dev.psisdk.LinkTransport

/**
 * Reads [LinkHints] from Android's `ConnectivityManager`: the active network's transport,
 * whether it is metered, the bandwidth estimates of `NetworkCapabilities`, and whether Data
 * Saver restricts this app on a metered network (then the hints are `constrained` and
 * automatic choices send the fewest bytes). Needs the `ACCESS_NETWORK_STATE` permission
 * (the library's manifest declares it); without it, or without an active network, the hints
 * say so instead of throwing. Read them just before each run, since the network changes:
 *
 * ```
 * discovery.match(contacts, linkHints = AndroidLinkHints.read(context))
 * ```
 *
 * Link estimates are kept per transport (`wifi`, `cellular`, ...); an app that can tell
 * networks apart (for example by a hash of the Wi-Fi network's name, which needs location
 * permission) sets [LinkHints.network] with `copy(network = ...)`.
 */
object AndroidLinkHints {
    /** The hints for the active network now. */
    @JvmStatic
    fun read(context: Context): LinkHints {
        if (context.checkSelfPermission(Manifest.permission.ACCESS_NETWORK_STATE) !=
            PackageManager.PERMISSION_GRANTED
        ) {
            return LinkHints.UNKNOWN
        }
        val cm = context.getSystemService(ConnectivityManager::class.java) ?: return LinkHints.UNKNOWN
        val network = cm.activeNetwork
            ?: return LinkHints(metered = null, transport = LinkTransport.NONE, null, null)
        val caps = cm.getNetworkCapabilities(network) ?: return LinkHints.UNKNOWN
        val dataSaver =
            cm.restrictBackgroundStatus == ConnectivityManager.RESTRICT_BACKGROUND_STATUS_ENABLED
        return fromCapabilities(caps, cm.isActiveNetworkMetered, dataSaver)
    }

    /**
     * The hints that [caps] give; [metered] as `ConnectivityManager` reports it; [dataSaver]
     * whether Data Saver restricts this app (`RESTRICT_BACKGROUND_STATUS_ENABLED`), which
     * applies on metered networks only.
     */
    @JvmStatic
    @JvmOverloads
    fun fromCapabilities(caps: NetworkCapabilities, metered: Boolean, dataSaver: Boolean = false): LinkHints {
        val transport = when {
            caps.hasTransport(NetworkCapabilities.TRANSPORT_VPN) -> LinkTransport.VPN
            caps.hasTransport(NetworkCapabilities.TRANSPORT_WIFI) -> LinkTransport.WIFI
            caps.hasTransport(NetworkCapabilities.TRANSPORT_CELLULAR) -> LinkTransport.CELLULAR
            caps.hasTransport(NetworkCapabilities.TRANSPORT_ETHERNET) -> LinkTransport.ETHERNET
            else -> LinkTransport.OTHER
        }
        val isMetered = metered || !caps.hasCapability(NetworkCapabilities.NET_CAPABILITY_NOT_METERED)
        return LinkHints(
            metered = isMetered,
            transport = transport,
            downstreamKbps = caps.linkDownstreamBandwidthKbps.takeIf { it > 0 },
            upstreamKbps = caps.linkUpstreamBandwidthKbps.takeIf { it > 0 },
            constrained = isMetered && dataSaver,
        )
    }
}
