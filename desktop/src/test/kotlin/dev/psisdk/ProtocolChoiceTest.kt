package dev.psisdk

import dev.psisdk.TestData.CONTACTS
import dev.psisdk.TestData.EXPECTED
import dev.psisdk.TestData.REGISTRY
import dev.psisdk.testing.PsiServer
import java.io.File
import java.nio.file.Files
import java.util.concurrent.TimeUnit
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.Timeout

/** The automatic protocol choice through the SDK, against a real `psi serve` on loopback. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ProtocolChoiceTest {
    private val server = PsiServer(REGISTRY)
    private val config = DiscoveryConfig()
    private val wifi = LinkHints(metered = false, LinkTransport.WIFI, null, null, network = "test-wifi")

    @AfterAll
    fun stop() = server.close()

    private inline fun <T> withTempDir(block: (File) -> T): T {
        val dir = Files.createTempDirectory("psi-measurements").toFile()
        try {
            return block(dir)
        } finally {
            dir.deleteRecursively()
        }
    }

    private fun assertMatched(result: MatchResult<String>) {
        assertEquals(EXPECTED, result.matches.associate { it.index to it.label })
        assertEquals(115, result.stats.clientItems)
    }

    @Test
    fun `by default the choice is automatic, among the server's protocols, with every candidate predicted`(): Unit =
        runBlocking {
            // Asked by another client: a client keeps the health it fetches, and this test
            // is about a client that has none yet.
            val served = ContactDiscovery(server.url, config).use { it.health().protocols.toSet() }
            ContactDiscovery(server.url, config).use { d ->
                val result = d.match(CONTACTS, linkHints = wifi)
                assertMatched(result)
                assertEquals(ProtocolChoice.Auto(ChoicePolicy.FASTEST), result.requested)
                val choice = result.choice!!
                assertEquals(result.protocol, choice.protocol)
                assertTrue(result.protocol in served, "${result.protocol} not in $served")
                assertEquals(ChoicePolicy.FASTEST, choice.policy)
                assertEquals(served, choice.predictions.map { it.protocol }.toSet())
                for (p in choice.predictions) {
                    assertTrue(p.requests > 0 && p.bytesUp > 0 && p.bytesDown > 0, "$p")
                    assertTrue(p.totalMicros > 0, "$p")
                    val parts = p.networkMicros + p.clientMicros + p.serverMicros
                    assertTrue(kotlin.math.abs(parts - p.totalMicros) <= 2, "$p")
                }
                // Fastest: the least predicted time.
                assertEquals(choice.predictions.minBy { it.totalMicros }.protocol, choice.protocol)
                assertEquals(ChoiceWorkload(115, REGISTRY.size.toLong(), labels = true, cachedSet = false), choice.workload)
                assertEquals("test-wifi", choice.network)
                assertFalse(choice.metered || choice.constrained)
                // No measurements yet: the server's health came from the server, and that
                // request's timing is already the link's first RTT sample; the device was
                // calibrated where it could change the pick, else the reference machine's
                // costs stand in (ADR 0054).
                assertTrue(choice.healthRequested)
                assertEquals(InputSource.MEASURED, choice.linkSource)
                assertTrue(choice.link.rttSamples >= 1 && choice.link.rttMillis > 0, "${choice.link}")
                assertTrue(choice.deviceSource in setOf(InputSource.MEASURED, InputSource.DEFAULT), "${choice.deviceSource}")
                assertTrue(choice.device.scalarMultNanos > 0 && choice.device.threads >= 1)
                // psi serve measures and advertises its own costs.
                assertEquals(InputSource.MEASURED, choice.serverSource)
                assertTrue(choice.server.scalarMultNanos > 0)
            }
        }

    @Test
    fun `FEWEST_BYTES picks the candidate with the fewest predicted bytes`(): Unit = runBlocking {
        val fewest = config.withProtocol(ProtocolChoice.Auto(ChoicePolicy.FEWEST_BYTES))
        ContactDiscovery(server.url, fewest).use { d ->
            val result = d.match(CONTACTS, linkHints = wifi)
            assertMatched(result)
            val choice = result.choice!!
            assertEquals(ChoicePolicy.FEWEST_BYTES, choice.policy)
            assertTrue(choice.predictions.size >= 2, "${choice.predictions}")
            assertEquals(choice.predictions.minBy { it.bytes }.protocol, result.protocol)
            // The bytes the run really moved are close to the chosen prediction (within a quarter).
            val predicted = choice.prediction(result.protocol)!!.bytes.toDouble()
            val moved = (result.stats.bytesSent + result.stats.bytesReceived).toDouble()
            assertTrue(moved / predicted in 0.75..1.25, "moved $moved, predicted $predicted")
        }
    }

    @Test
    fun `constrained hints turn FASTEST into FEWEST_BYTES and are reported`(): Unit = runBlocking {
        val saver = LinkHints(metered = true, LinkTransport.CELLULAR, 2_000, null, constrained = true)
        ContactDiscovery(server.url, config).use { d ->
            val result = d.match(CONTACTS, linkHints = saver)
            assertEquals(ProtocolChoice.AUTO, result.requested)
            val choice = result.choice!!
            assertEquals(ChoicePolicy.FEWEST_BYTES, choice.policy)
            assertEquals(choice.predictions.minBy { it.bytes }.protocol, result.protocol)
            assertEquals("cellular", choice.network)
            assertTrue(choice.metered && choice.constrained)
        }
    }

    @Test
    fun `a fixed protocol is honoured, from the call or the config, with no choice record`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            for (p in listOf(Protocol.DH, Protocol.OT)) {
                val result = d.match(CONTACTS, p)
                assertMatched(result)
                assertEquals(p, result.protocol)
                assertEquals(p, result.requested)
                assertNull(result.choice)
            }
        }
        ContactDiscovery(server.url, config.withProtocol(Protocol.OT)).use { d ->
            val result = d.match(CONTACTS)
            assertEquals(Protocol.OT, result.protocol)
            assertNull(result.choice)
            // A call can still ask for the automatic choice.
            assertNotNull(d.match(CONTACTS, ProtocolChoice.AUTO).choice)
        }
    }

    @Test
    fun `measurements persist in the directory, so the next client starts from them`(): Unit = runBlocking {
        withTempDir { dir ->
            val stored = config.withMeasurementsDirectory(dir.path)
            val first = ContactDiscovery(server.url, stored).use { it.match(CONTACTS, linkHints = wifi) }
            val firstChoice = first.choice!!
            assertTrue(firstChoice.healthRequested)
            val file = File(dir, "measurements.json")
            assertTrue(file.isFile)
            assertTrue(file.readText().contains("\"test-wifi\""))

            // A new client (as after an app restart) reads the file: no health request,
            // and the link estimate of this network is the one the first run measured.
            val second = ContactDiscovery(server.url, stored).use { it.match(CONTACTS, linkHints = wifi) }
            val secondChoice = second.choice!!
            assertFalse(secondChoice.healthRequested)
            assertEquals(InputSource.MEASURED, secondChoice.linkSource)
            assertTrue(
                secondChoice.link.rttSamples > firstChoice.link.rttSamples,
                "first ${firstChoice.link}, second ${secondChoice.link}",
            )
            // The calibration stored by the first client (equal up to the JSON's last digit),
            // if it calibrated (ADR 0054: only where the device could change the pick).
            if (firstChoice.deviceSource == InputSource.MEASURED) {
                assertEquals(InputSource.MEASURED, secondChoice.deviceSource)
                val (a, b) = firstChoice.device to secondChoice.device
                assertEquals(a.threads, b.threads)
                for ((x, y) in listOf(a.scalarMultNanos to b.scalarMultNanos, a.aesBlockNanos to b.aesBlockNanos, a.entryNanos to b.entryNanos)) {
                    assertEquals(x, y, x * 1e-9)
                }
            }

            // A network never seen before starts from its hints.
            val cell = LinkHints(metered = true, LinkTransport.CELLULAR, 2_000, null)
            val third = ContactDiscovery(server.url, stored).use { it.match(CONTACTS, linkHints = cell) }
            val thirdChoice = third.choice!!
            assertFalse(thirdChoice.healthRequested)
            assertEquals(InputSource.GIVEN, thirdChoice.linkSource)
            assertEquals(0, thirdChoice.link.rttSamples)
            assertEquals(2.0, thirdChoice.link.downMbit, 1e-9)
        }
        // Without the file (another directory), the server's health is asked for again.
        withTempDir { other ->
            val fresh = ContactDiscovery(server.url, config.withMeasurementsDirectory(other.path))
                .use { it.match(CONTACTS, linkHints = wifi) }
            assertTrue(fresh.choice!!.healthRequested)
        }
    }
}
