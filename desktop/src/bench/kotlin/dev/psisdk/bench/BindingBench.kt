package dev.psisdk.bench

import dev.psisdk.ContactDiscovery
import dev.psisdk.DiscoveryConfig
import dev.psisdk.Protocol
import java.io.File
import kotlinx.coroutines.runBlocking

/**
 * One timed match through the Kotlin SDK, for ci/bench-kotlin.sh: reads the contact file
 * (one identifier per line), runs `runs` matches, each with a new client and no registry
 * cache (as `psi match` without --cache-dir), after one warm-up run, and prints one line
 * per run: `kotlin <protocol> <millis> <matches> <bytes sent> <bytes received>`.
 *
 * Usage: BindingBench <server url> <contacts file> <dh|ot> <runs>
 */
fun main(args: Array<String>): Unit = runBlocking {
    val (url, file, protocolName, runs) = args
    val protocol = if (protocolName == "ot") Protocol.OT else Protocol.DH
    val contacts = File(file).readLines().filter { it.isNotBlank() }
    suspend fun once(): Pair<Long, String> {
        val started = System.nanoTime()
        val result = ContactDiscovery(url, DiscoveryConfig(protocol = protocol)).use { it.match(contacts) }
        val millis = (System.nanoTime() - started) / 1_000_000
        return millis to "${result.matches.size} ${result.stats.bytesSent} ${result.stats.bytesReceived}"
    }
    once() // warm-up: class loading, JIT, native library load
    repeat(runs.toInt()) {
        val (millis, rest) = once()
        println("kotlin $protocolName $millis $rest")
    }
}
