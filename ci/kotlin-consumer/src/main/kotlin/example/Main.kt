package example

import dev.psisdk.ContactDiscovery
import dev.psisdk.DiscoveryConfig
import kotlinx.coroutines.runBlocking

/** Matches the contacts given after the server's URL and prints the ones in its registry. */
fun main(args: Array<String>): Unit = runBlocking {
    ContactDiscovery(args[0], DiscoveryConfig()).use { discovery ->
        val health = discovery.health()
        println("server: ${health.registryItems} entries, protocols ${health.protocols}")
        val result = discovery.match(args.drop(1))
        println("protocol: ${result.protocol}")
        for (m in result.matches) println("match: ${m.contact} -> ${m.identifier} (${m.label ?: "no label"})")
    }
}
