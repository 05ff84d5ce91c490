package dev.psisdk.bench

import dev.psisdk.ContactDiscovery
import dev.psisdk.DiscoveryConfig
import dev.psisdk.Protocol
import java.io.File
import kotlinx.coroutines.runBlocking

/**
 * Timed matches through the Kotlin SDK, for ci/bench-kotlin.sh: reads the contact file
 * (one identifier per line), runs `warmups` untimed matches (class loading, JIT, the native
 * library), then `runs` timed ones, each with a new client and so no registry cache (as
 * `psi match` without --cache-dir), and prints one line per timed run:
 * `<transport>-<warmups> <protocol> <millis> <matches> <bytes sent> <bytes received> <run millis>
 * <phases>`, where `<run millis>` is the native run's own wall time (RunStats.totalMicros):
 * the difference is what crossing the binding costs; `<phases>` is `phase=ms,...`.
 *
 * `<transport>` is `kotlin` (the default OkHttp transport) or `native`
 * ([ContactDiscovery.withNativeTransport]).
 *
 * Usage: BindingBench <server url> <contacts file> <dh|ot> <runs> <warmups> [okhttp|native]
 */
fun main(args: Array<String>): Unit = runBlocking {
    val (url, file, protocolName, runs, warmups) = args
    val native = args.getOrNull(5) == "native"
    val tag = if (native) "native" else "kotlin"
    val protocol = if (protocolName == "ot") Protocol.OT else Protocol.DH
    val contacts = File(file).readLines().filter { it.isNotBlank() }
    suspend fun once(): Pair<Long, String> {
        val started = System.nanoTime()
        val config = DiscoveryConfig(protocol = protocol)
        val client = if (native) ContactDiscovery.withNativeTransport(url, config) else ContactDiscovery(url, config)
        val result = client.use { it.match(contacts) }
        val millis = (System.nanoTime() - started) / 1_000_000
        val s = result.stats
        val phases = s.phases.joinToString(",") { "${it.phase.name.lowercase()}=${it.micros / 1000.0}" }
        return millis to "${result.matches.size} ${s.bytesSent} ${s.bytesReceived} ${s.totalMicros / 1000} $phases"
    }
    repeat(warmups.toInt()) { once() }
    repeat(runs.toInt()) {
        val (millis, rest) = once()
        println("$tag-$warmups $protocolName $millis $rest")
    }
}
