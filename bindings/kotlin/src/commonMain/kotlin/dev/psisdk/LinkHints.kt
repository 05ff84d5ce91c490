package dev.psisdk

/**
 * What the platform says about the current network, for the automatic protocol choice
 * ([ProtocolChoice.Auto]). Before any run has been timed on a network, its bandwidth hints
 * are the choice's prior for the link; after that the SDK's own measurements, kept per
 * [networkKey], take over. Android reads the hints from `ConnectivityManager`
 * (`dev.psisdk.android.AndroidLinkHints`); pass them with each run
 * (`match(contacts, linkHints = ...)`) or set them in [DiscoveryConfig.linkHints]. Values the
 * platform does not know are `null`.
 *
 * @property metered whether the user pays by the byte (cellular plans, hotspots). Reported
 *   back in [ChoiceReport.metered]; pick [ChoicePolicy.FEWEST_BYTES] yourself if you want it
 *   on metered networks.
 * @property transport the kind of link.
 * @property downstreamKbps the platform's estimate of the downstream bandwidth.
 * @property upstreamKbps the platform's estimate of the upstream bandwidth (if only the
 *   downstream is known, the SDK assumes a quarter of it).
 * @property constrained the user asked to save data (Android Data Saver on a metered network,
 *   iOS Low Data Mode): automatic choices then use [ChoicePolicy.FEWEST_BYTES].
 * @property network the app's name for this network, under which link estimates are kept
 *   (for example a hash of the Wi-Fi network's name: it is stored in the measurements file,
 *   so not the name itself). `null`: the transport's name (`wifi`, `cellular`, ...).
 * @property rttMillis the round-trip time, if the app knows one.
 */
data class LinkHints(
    val metered: Boolean?,
    val transport: LinkTransport,
    val downstreamKbps: Int?,
    val upstreamKbps: Int?,
    val constrained: Boolean = false,
    val network: String? = null,
    val rttMillis: Int? = null,
) {
    /** The name link estimates are kept under: [network], else the transport's name. */
    val networkKey: String get() = network ?: transport.name.lowercase()

    companion object {
        /** Nothing known. */
        val UNKNOWN = LinkHints(null, LinkTransport.UNKNOWN, null, null)
    }
}

/** The kind of network link. */
enum class LinkTransport { WIFI, CELLULAR, ETHERNET, VPN, OTHER, NONE, UNKNOWN }
