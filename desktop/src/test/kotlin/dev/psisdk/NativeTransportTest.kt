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
 * [ContactDiscovery.withNativeTransport]: the desktop library's own HTTP stack (ureq)
 * instead of OkHttp, against the real native library and a real `psi serve` on loopback.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class NativeTransportTest {
    private val server = PsiServer(TestData.REGISTRY, "--token", "secret-token")
    private val config = DiscoveryConfig(token = "secret-token")

    @AfterAll
    fun stop() = server.close()

    @Test
    fun `the desktop library carries the native transport`() {
        assertTrue(ContactDiscovery.hasNativeTransport)
    }

    @Test
    fun `DH-PSI and OT-PSI find the registered contacts through the native transport`(): Unit = runBlocking {
        for (protocol in listOf(Protocol.DH, Protocol.OT)) {
            ContactDiscovery.withNativeTransport(server.url, config.withProtocol(protocol)).use { d ->
                val result = d.match(CONTACTS)
                assertEquals(protocol, result.protocol)
                assertEquals(EXPECTED, result.matches.associate { it.index to it.label })
                for (m in result.matches) assertEquals(CONTACTS[m.index], m.contact)
                assertTrue(result.stats.requests > 0 && result.stats.bytesReceived > 0)
            }
        }
    }

    @Test
    fun `one native client runs twice and reports health`(): Unit = runBlocking {
        ContactDiscovery.withNativeTransport(server.url, config.withProtocol(Protocol.DH)).use { d ->
            assertEquals(TestData.REGISTRY.size.toLong(), d.health().registryItems)
            val first = d.match(CONTACTS)
            val second = d.match(CONTACTS)
            assertEquals(first.matches.map { it.index }, second.matches.map { it.index })
        }
    }

    @Test
    fun `a wrong token is Unauthorized through the native transport`(): Unit = runBlocking {
        ContactDiscovery.withNativeTransport(server.url, config.withToken("wrong")).use { d ->
            val e = assertThrows<ContactDiscoveryException.Unauthorized> { d.match(CONTACTS) }
            assertFalse(e.isRetryable)
        }
    }

    @Test
    fun `a server that is down is a retryable network error through the native transport`(): Unit = runBlocking {
        val port = java.net.ServerSocket(0).use { it.localPort }
        ContactDiscovery.withNativeTransport("http://127.0.0.1:$port", config.withRetries(0)).use { d ->
            val e = assertThrows<ContactDiscoveryException.Network> { d.match(CONTACTS) }
            assertTrue(e.isRetryable)
            assertFalse(e.isTimeout)
        }
    }

    @Test
    fun `https to a plain HTTP server is a TLS error through the native transport`(): Unit = runBlocking {
        val https = server.url.replace("http://", "https://")
        ContactDiscovery.withNativeTransport(https, DiscoveryConfig(timeoutMillis = 20_000, retries = 3)).use { d ->
            val e = assertThrows<ContactDiscoveryException.Tls> { d.health() }
            assertFalse(e.isRetryable)
            assertTrue(e.cause is dev.psisdk.ffi.PsiException.Tls, "${e.cause}")
        }
    }

    @Test
    fun `the native transport honours the URL rules`() {
        // Plain http:// to a host that is not loopback is refused, as with OkHttp.
        assertThrows<ContactDiscoveryException.InvalidInput> {
            ContactDiscovery.withNativeTransport("http://example.com", config)
        }
    }
}
