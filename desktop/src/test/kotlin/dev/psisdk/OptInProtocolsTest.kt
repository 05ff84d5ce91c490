package dev.psisdk

import dev.psisdk.TestData.CONTACTS
import dev.psisdk.TestData.EXPECTED
import dev.psisdk.testing.PsiServer
import java.util.concurrent.TimeUnit
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows

/**
 * The protocols a server offers only when started with their flag (CM20-PSI with
 * `--enable-cm20`, GBF-PSI with `--enable-gbf`), forced from Kotlin through the real native
 * library against a real `psi serve` on loopback: health lists them, a run finds the
 * registered contacts with their labels, and a server without the flag refuses the run.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class OptInProtocolsTest {
    private val server = PsiServer(TestData.REGISTRY, "--enable-cm20", "--enable-gbf")
    private val plain = PsiServer(TestData.REGISTRY)

    @AfterAll
    fun stop() {
        server.close()
        plain.close()
    }

    @Test
    fun `health lists the opt-in protocols only where they are on`(): Unit = runBlocking {
        ContactDiscovery(server.url, DiscoveryConfig()).use { d ->
            assertEquals(listOf(Protocol.DH, Protocol.OT, Protocol.CM20, Protocol.GBF), d.health().protocols)
        }
        ContactDiscovery(plain.url, DiscoveryConfig()).use { d ->
            assertEquals(listOf(Protocol.DH, Protocol.OT), d.health().protocols)
        }
    }

    @Test
    fun `CM20-PSI and GBF-PSI find the registered contacts with their labels`(): Unit = runBlocking {
        for (protocol in listOf(Protocol.CM20, Protocol.GBF)) {
            ContactDiscovery(server.url, DiscoveryConfig().withProtocol(protocol)).use { d ->
                val result = d.match(CONTACTS)
                assertEquals(protocol, result.protocol, "$protocol")
                assertEquals(EXPECTED, result.matches.associate { it.index to it.label }, "$protocol")
                for (m in result.matches) assertEquals(CONTACTS[m.index], m.contact)
                assertTrue(result.stats.bytesSent > 0, "$protocol")
            }
        }
    }

    @Test
    fun `a server without the flag refuses GBF-PSI`(): Unit = runBlocking {
        ContactDiscovery(plain.url, DiscoveryConfig().withProtocol(Protocol.GBF)).use { d ->
            val e = assertThrows<ContactDiscoveryException> { d.match(CONTACTS) }
            assertFalse(e is ContactDiscoveryException.Internal, "$e")
        }
    }
}
