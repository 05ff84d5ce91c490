package dev.psisdk.sample.android

import android.content.Context
import dev.psisdk.ContactDiscovery
import dev.psisdk.DiscoveryConfig
import dev.psisdk.LinkHints
import dev.psisdk.Progress
import dev.psisdk.ProtocolChoice
import dev.psisdk.android.AndroidDiscovery
import dev.psisdk.android.AndroidLinkHints

/**
 * The [ContactMatcher] of the app: the SDK's [ContactDiscovery], one client per server URL
 * (made on first use, kept for the next runs, so DH-PSI's registry cache and the automatic
 * choice's measurements carry over), with the network's [LinkHints] read just before each
 * run.
 *
 * @param newClient makes the client for a server URL ([forAndroid]: `AndroidDiscovery.create`).
 * @param protocol how each run picks its protocol.
 * @param linkHints the current network's hints ([forAndroid]: `AndroidLinkHints.read`).
 */
class SdkMatcher(
    private val newClient: (serverUrl: String) -> ContactDiscovery,
    private val protocol: ProtocolChoice = ProtocolChoice.AUTO,
    private val linkHints: () -> LinkHints = { LinkHints.UNKNOWN },
) : ContactMatcher, AutoCloseable {
    private val clients = HashMap<String, ContactDiscovery>()

    override suspend fun match(
        serverUrl: String,
        contacts: List<Contact>,
        onProgress: (Progress) -> Unit,
    ): MatchOutcome {
        val discovery = synchronized(clients) { clients.getOrPut(serverUrl) { newClient(serverUrl) } }
        val result = discovery.match(contacts, protocol, onProgress, linkHints()) { it.value }
        return MatchOutcome(
            matches = result.matches.map { Match(it.contact, it.identifier, it.label) },
            protocol = result.protocol,
            rejectedCount = result.rejected.size,
        )
    }

    /** Closes every client made. */
    override fun close() {
        val all = synchronized(clients) { clients.values.toList().also { clients.clear() } }
        all.forEach { it.close() }
    }

    companion object {
        /**
         * The app's matcher: clients from `AndroidDiscovery.create` (registry cache and
         * measurements in the app's cache directory) with [config] (by default the SDK's
         * defaults with the device's region), the link hints of `AndroidLinkHints.read` on
         * each run, and the protocol choice of [config].
         */
        @JvmStatic
        fun forAndroid(context: Context, config: DiscoveryConfig = AndroidDiscovery.defaultConfig(context)): SdkMatcher {
            val app = context.applicationContext
            return SdkMatcher(
                newClient = { url -> AndroidDiscovery.create(app, url, config) },
                protocol = config.protocol,
                linkHints = { AndroidLinkHints.read(app) },
            )
        }
    }
}
