package dev.psisdk

/**
 * What the platform says about the current network link, for the SDK's choice between the
 * fewest bytes (metered links) and the fastest run. Android reads it from
 * `ConnectivityManager` (`dev.psisdk.android.AndroidLinkHints`); the automatic protocol
 * choice (a later release) uses it. Values the platform does not know are `null`.
 *
 * @property metered whether the user pays by the byte (cellular plans, hotspots).
 * @property transport the kind of link.
 * @property downstreamKbps the platform's estimate of the downstream bandwidth.
 * @property upstreamKbps the platform's estimate of the upstream bandwidth.
 */
data class LinkHints(
    val metered: Boolean?,
    val transport: LinkTransport,
    val downstreamKbps: Int?,
    val upstreamKbps: Int?,
) {
    companion object {
        /** Nothing known. */
        val UNKNOWN = LinkHints(null, LinkTransport.UNKNOWN, null, null)
    }
}

/** The kind of network link. */
enum class LinkTransport { WIFI, CELLULAR, ETHERNET, VPN, OTHER, NONE, UNKNOWN }
