package dev.psisdk

import dev.psisdk.testing.PsiServer
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
    fun `https to a plain HTTP server is a TLS error, not retried`(): Unit = runBlocking {
        // The case: the app's URL says https://, the server's port (a real `psi
        // serve`) speaks plain HTTP. Retries on and the automatic choice (which retries its
        // health request): a TLS failure ends the call at once.
        PsiServer(listOf("alice@example.com,Alice")).use { plain ->
            val https = plain.url.replace("http://", "https://")
            ContactDiscovery(https, DiscoveryConfig(timeoutMillis = 20_000, retries = 3)).use { d ->
                val e = assertThrows<ContactDiscoveryException.Tls> { d.match(listOf("alice@example.com")) }
                assertFalse(e.isRetryable)
                assertTrue(e.message!!.contains("SSL"), e.message)
                assertTrue(e.cause is dev.psisdk.ffi.PsiException.Tls, "${e.cause}")
                // Still a kind of Network for an app's existing `when`.
                assertTrue((e as ContactDiscoveryException) is ContactDiscoveryException.Network)
                assertThrows<ContactDiscoveryException.Tls> { d.health() }
            }
        }
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
    fun `a retry is heard as a retry event, in the callback and in the flow`(): Unit = runBlocking {
        val url = server.url("/").toString().trimEnd('/')
        ContactDiscovery(url, DiscoveryConfig(timeoutMillis = 20_000, retries = 1, protocol = Protocol.DH)).use { retrying ->
            repeat(4) {
                server.enqueue(json(409, "{\"error\":\"epoch_mismatch\",\"message\":\"key rotated\"}").build())
            }
            val heard = java.util.concurrent.CopyOnWriteArrayList<Progress>()
            assertThrows<ContactDiscoveryException.Server> {
                retrying.match(listOf("a@example.com"), Protocol.DH, { heard.add(it) }) { it }
            }
            val retry = heard.mapNotNull { it.retry }.single()
            assertEquals(1, retry.attempt)
            assertEquals(1, retry.retries)
            assertEquals(409, retry.status)
            assertEquals(ServerErrorCode.EPOCH_MISMATCH, retry.code)
            assertFalse(retry.isTimeout)
            assertTrue(retry.waitMillis in 0..30_000, "${retry.waitMillis}")
            assertFalse(retry.reason.contains("a@example.com"))
            // The retry event starts the bar again; the phases are heard again after it.
            assertEquals(0.0, heard.first { it.retry != null }.fraction)
            assertEquals(Phase.CREATE_SESSION, heard.last().phase)

            val events = java.util.concurrent.CopyOnWriteArrayList<MatchEvent<String>>()
            assertThrows<ContactDiscoveryException.Server> {
                retrying.matchFlow(listOf("a@example.com"), Protocol.DH) { it }.collect { events.add(it) }
            }
            val retrying1 = events.filterIsInstance<MatchEvent.Retrying<String>>().single()
            assertEquals(1, retrying1.retry.attempt)
            // A retry is not a phase: no Progressed event carries one.
            assertTrue(events.filterIsInstance<MatchEvent.Progressed<String>>().all { it.progress.retry == null })
        }
    }

    @Test
    fun `a redirect is not followed`(): Unit = runBlocking {
        MockWebServer().use { elsewhere ->
            elsewhere.start()
            elsewhere.enqueue(json(200, "{\"status\":\"ok\"}").build())
            server.enqueue(
                MockResponse.Builder().code(307)
                    .addHeader("location", elsewhere.url("/v1/health").toString()).build(),
            )
            assertThrows<ContactDiscoveryException> { discovery.health() }
            assertEquals(1, server.requestCount)
            assertEquals(0, elsewhere.requestCount, "the SDK followed the redirect")
        }
    }

    @Test
    fun `a long error body is not read, its status is kept`(): Unit = runBlocking {
        // 1 MiB at 64 KiB a second: read whole, it would outlast the 5 s timeout.
        val body = "{\"error\":\"internal\",\"message\":\"" + "x".repeat(1 shl 20) + "\"}"
        server.enqueue(json(500, body).throttleBody(64L * 1024, 1, TimeUnit.SECONDS).build())
        val url = server.url("/").toString().trimEnd('/')
        ContactDiscovery(url, DiscoveryConfig(timeoutMillis = 5_000, retries = 0, protocol = Protocol.DH)).use { d ->
            val started = System.nanoTime()
            val e = assertThrows<ContactDiscoveryException.Server> { d.health() }
            assertEquals(500, e.status)
            // The body was dropped: its code is unknown, and no text of it is in the message.
            assertEquals(ServerErrorCode.UNKNOWN, e.code)
            assertFalse(e.message!!.contains("xxxx"))
            assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(4))
        }
    }

    @Test
    fun `a short error body is read whole`(): Unit = runBlocking {
        server.enqueue(json(500, "{\"error\":\"internal\",\"message\":\"" + "y".repeat(8_000) + "\"}").build())
        val e = assertThrows<ContactDiscoveryException.Server> { discovery.health() }
        assertEquals(500, e.status)
        assertEquals(ServerErrorCode.INTERNAL, e.code)
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
    fun `the run's deadline bounds a hung server across its retries`(): Unit = runBlocking {
        // Each attempt's first request would wait 5 s (its timeout) three times over, with
        // backoffs between: about 16 s. The run's deadline of 1.5 s ends it.
        repeat(3) { server.enqueue(json(200, "{}").headersDelay(10, TimeUnit.SECONDS).build()) }
        val url = server.url("/").toString().trimEnd('/')
        val config = DiscoveryConfig(timeoutMillis = 5_000, retries = 2, protocol = Protocol.DH, deadlineMillis = 1_500)
        ContactDiscovery(url, config).use { bounded ->
            val started = System.nanoTime()
            val e = assertThrows<ContactDiscoveryException.Network> { bounded.match(listOf("a@example.com")) }
            val took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started)
            assertTrue(e.isTimeout, e.message)
            assertTrue(took in 1_000..4_500, "took $took ms")
        }
        assertThrows<ContactDiscoveryException.InvalidInput> {
            ContactDiscovery(url, DiscoveryConfig(deadlineMillis = -1))
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
