package dev.psisdk

import java.util.concurrent.TimeUnit
import kotlinx.coroutines.runBlocking
import mockwebserver3.MockResponse
import mockwebserver3.MockWebServer
import mockwebserver3.SocketEffect
import org.junit.jupiter.api.AfterEach
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeEach
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows

/**
 * The mapping of HTTP failures that a real server does not easily produce, through the real
 * native library and the OkHttp transport, against MockWebServer.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class HttpErrorMappingTest {
    private lateinit var server: MockWebServer
    private lateinit var discovery: ContactDiscovery

    @BeforeEach
    fun start() {
        server = MockWebServer()
        server.start()
        val url = server.url("/").toString().trimEnd('/')
        // No retries: each test scripts exactly one answer (the retry policy is tested below
        // and in psi-client). A fixed protocol: the automatic choice would first ask for the
        // server's health, which these scripts do not answer.
        discovery = ContactDiscovery(
            url,
            DiscoveryConfig(timeoutMillis = 20_000, maxResponseBytes = 10_000, retries = 0, protocol = Protocol.DH),
        )
    }

    @AfterEach
    fun stop() {
        discovery.close()
        server.close()
    }

    private fun json(code: Int, body: String) = MockResponse.Builder()
        .code(code).addHeader("content-type", "application/json").body(body)

    @Test
    fun `a truncated body is a network error`(): Unit = runBlocking {
        server.enqueue(
            json(200, "{\"status\":\"ok\",\"epoch\":1,\"registry_items\":5,\"protocols\":[\"dh\"]}")
                .onResponseBody(SocketEffect.ShutdownConnection)
                .build(),
        )
        val e = assertThrows<ContactDiscoveryException.Network> { discovery.health() }
        assertTrue(e.isRetryable)
    }

    @Test
    fun `a 500 without the API's JSON is a retryable server error`(): Unit = runBlocking {
        server.enqueue(MockResponse.Builder().code(500).body("<html>oops</html>").build())
        val e = assertThrows<ContactDiscoveryException.Server> { discovery.health() }
        assertEquals(500, e.status)
        assertEquals(ServerErrorCode.UNKNOWN, e.code)
        assertTrue(e.isRetryable)
    }

    @Test
    fun `an API error keeps its code`(): Unit = runBlocking {
        server.enqueue(json(409, "{\"error\":\"epoch_mismatch\",\"message\":\"key rotated\"}").build())
        val e = assertThrows<ContactDiscoveryException.Server> { discovery.match(listOf("a@example.com")) }
        assertEquals(409, e.status)
        assertEquals(ServerErrorCode.EPOCH_MISMATCH, e.code)
        assertTrue(e.isRetryable)
        assertFalse(e.message!!.contains("a@example.com"))
    }

    @Test
    fun `a retryable error starts the run again as many times as configured`(): Unit = runBlocking {
        val url = server.url("/").toString().trimEnd('/')
        ContactDiscovery(url, DiscoveryConfig(timeoutMillis = 20_000, retries = 1, protocol = Protocol.DH)).use { retrying ->
            repeat(2) {
                server.enqueue(json(409, "{\"error\":\"epoch_mismatch\",\"message\":\"key rotated\"}").build())
            }
            val e = assertThrows<ContactDiscoveryException.Server> { retrying.match(listOf("a@example.com")) }
            assertEquals(ServerErrorCode.EPOCH_MISMATCH, e.code)
            // One session request, then one more after the backoff; no session was created.
            assertEquals(2, server.requestCount)
        }
    }

    @Test
    fun `a 429 carries Retry-After`(): Unit = runBlocking {
        server.enqueue(
            json(429, "{\"error\":\"rate_limited\",\"message\":\"budget spent\"}")
                .addHeader("retry-after", "7").build(),
        )
        val e = assertThrows<ContactDiscoveryException.RateLimited> { discovery.match(listOf("a@example.com")) }
        assertEquals(7L, e.retryAfterSeconds)
    }

    @Test
    fun `a slow response hits the request timeout`(): Unit = runBlocking {
        server.enqueue(json(200, "{}").headersDelay(10, TimeUnit.SECONDS).build())
        val url = server.url("/").toString().trimEnd('/')
        ContactDiscovery(url, DiscoveryConfig(timeoutMillis = 1_000)).use { impatient ->
            val started = System.nanoTime()
            val e = assertThrows<ContactDiscoveryException.Network> { impatient.health() }
            assertTrue(e.isTimeout, e.message)
            assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(8))
        }
    }

    @Test
    fun `a response over the size cap is refused`(): Unit = runBlocking {
        server.enqueue(json(200, "{\"pad\":\"" + "x".repeat(20_000) + "\"}").build())
        val e = assertThrows<ContactDiscoveryException.Network> { discovery.health() }
        assertTrue(e.message!!.contains("larger than"), e.message)
    }

    @Test
    fun `a body that is not the API's is a protocol violation`(): Unit = runBlocking {
        server.enqueue(json(200, "{\"unexpected\":true}").build())
        assertThrows<ContactDiscoveryException.ProtocolViolation> { discovery.health() }
    }
}
