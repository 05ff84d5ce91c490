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
 * whether it is metered, and the bandwidth estimates of `NetworkCapabilities`. Needs the
 * `ACCESS_NETWORK_STATE` permission (the library's manifest declares it); without it, or
 * without an active network, the hints say so instead of throwing.
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
        return fromCapabilities(caps, cm.isActiveNetworkMetered)
    }

    /** The hints that [caps] give; [metered] as `ConnectivityManager` reports it. */
    @JvmStatic
    fun fromCapabilities(caps: NetworkCapabilities, metered: Boolean): LinkHints {
        val transport = when {
            caps.hasTransport(NetworkCapabilities.TRANSPORT_VPN) -> LinkTransport.VPN
            caps.hasTransport(NetworkCapabilities.TRANSPORT_WIFI) -> LinkTransport.WIFI
            caps.hasTransport(NetworkCapabilities.TRANSPORT_CELLULAR) -> LinkTransport.CELLULAR
            caps.hasTransport(NetworkCapabilities.TRANSPORT_ETHERNET) -> LinkTransport.ETHERNET
            else -> LinkTransport.OTHER
        }
        return LinkHints(
            metered = metered || !caps.hasCapability(NetworkCapabilities.NET_CAPABILITY_NOT_METERED),
            transport = transport,
            downstreamKbps = caps.linkDownstreamBandwidthKbps.takeIf { it > 0 },
            upstreamKbps = caps.linkUpstreamBandwidthKbps.takeIf { it > 0 },
        )
    }
}
