package dev.psisdk

import dev.psisdk.TestData.CONTACTS
import dev.psisdk.TestData.EXPECTED
import dev.psisdk.TestData.INVALID
import dev.psisdk.TestData.REGISTRY
import dev.psisdk.testing.PsiServer
import java.nio.file.Files
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import dev.psisdk.ffi.liveClients
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.launch
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import okhttp3.Call
import okhttp3.EventListener
import okhttp3.Interceptor
import okhttp3.OkHttpClient
import okhttp3.Request
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows

/** The SDK against the real native library and a real `psi serve` on loopback. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ContactDiscoveryTest {
    private val server = PsiServer(REGISTRY, "--token", "secret-token")
    private val config = DiscoveryConfig(token = "secret-token")

    @AfterAll
    fun stop() = server.close()

    private fun assertExpected(result: MatchResult<String>, protocol: Protocol) {
        assertEquals(protocol, result.protocol)
        assertEquals(EXPECTED, result.matches.associate { it.index to it.label })
        for (m in result.matches) assertEquals(CONTACTS[m.index], m.contact)
        assertEquals(INVALID, result.rejected.map { it.index }.toSet())
        assertEquals(RejectReason.EMPTY, result.rejected.first { it.index == 115 }.reason)
        assertEquals(RejectReason.BAD_EMAIL, result.rejected.first { it.index == 117 }.reason)
        assertNull(result.labelError)
        assertEquals(115, result.stats.clientItems)
        assertEquals(REGISTRY.size.toLong(), result.stats.serverItems)
        assertTrue(result.stats.bytesSent > 0 && result.stats.bytesReceived > 0)
        assertTrue(result.stats.totalMicros > 0)
    }

    @Test
    fun `DH-PSI finds the registered contacts with their labels`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            val result = d.match(CONTACTS, Protocol.DH)
            assertExpected(result, Protocol.DH)
            assertEquals(0L, result.stats.workAheadMicros)
            assertEquals("+14155550123", result.matches.first { it.index == 37 }.identifier)
            assertEquals("user5@example.com", result.matches.first { it.index == 4 }.identifier)
        }
    }

    @Test
    fun `OT-PSI finds the same contacts`(): Unit = runBlocking {
        ContactDiscovery(server.url, config.withProtocol(Protocol.OT)).use { d ->
            val result = d.match(CONTACTS)
            assertExpected(result, Protocol.OT)
            assertTrue(result.stats.roundTrips >= 2)
            // The SDK built its side of the matching while the outputs were on the way.
            assertTrue(result.stats.workAheadMicros > 0, "${result.stats}")
        }
    }

    data class Person(val name: String, val phone: String)

    @Test
    fun `the caller's own contact objects come back`(): Unit = runBlocking {
        val people = listOf(Person("Ann", "(415) 555-0123"), Person("Bob", "+1 212 555 0100"), Person("Cy", "?"))
        ContactDiscovery(server.url, config).use { d ->
            val result = d.match(people) { it.phone }
            assertEquals(listOf(people[0]), result.matches.map { it.contact })
            assertEquals("Phone A", result.matches.single().label)
            assertEquals(listOf(people[2]), result.rejected.map { it.contact })
        }
    }

    @Test
    fun `a second client reuses the registry cached on disk`(): Unit = runBlocking {
        val dir = Files.createTempDirectory("psi-cache").toFile()
        try {
            val cached = config.withCacheDirectory(dir.path)
            val first = ContactDiscovery(server.url, cached).use { it.match(CONTACTS, Protocol.DH) }
            assertFalse(first.stats.setFromCache)
            assertTrue(first.stats.setBytesDownloaded > 0)
            assertTrue(dir.listFiles()!!.any { it.name.endsWith(".set") })
            val second = ContactDiscovery(server.url, cached).use { it.match(CONTACTS, Protocol.DH) }
            assertTrue(second.stats.setFromCache)
            assertEquals(0, second.stats.setBytesDownloaded)
            assertTrue(second.stats.bytesReceived < first.stats.bytesReceived)
            assertExpected(second, Protocol.DH)
        } finally {
            dir.deleteRecursively()
        }
    }

    @Test
    fun `two matches run in parallel on one client`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            val (a, b) = coroutineScope {
                val a = async { d.match(CONTACTS, Protocol.DH) }
                val b = async { d.match(CONTACTS, Protocol.OT) }
                a.await() to b.await()
            }
            assertExpected(a, Protocol.DH)
            assertExpected(b, Protocol.OT)
        }
    }

    @Test
    fun `a wrong token is Unauthorized`(): Unit = runBlocking {
        ContactDiscovery(server.url, config.withToken("wrong")).use { d ->
            val e = assertThrows<ContactDiscoveryException.Unauthorized> { d.match(CONTACTS) }
            assertFalse(e.isRetryable)
            assertFalse(e.message!!.contains("example"))
        }
        ContactDiscovery(server.url, config.withToken(null)).use { d ->
            assertThrows<ContactDiscoveryException.Unauthorized> { d.match(CONTACTS) }
        }
    }

    @Test
    fun `a server that is down is a retryable network error`(): Unit = runBlocking {
        val port = java.net.ServerSocket(0).use { it.localPort }
        ContactDiscovery("http://127.0.0.1:$port", config).use { d ->
            val e = assertThrows<ContactDiscoveryException.Network> { d.match(CONTACTS) }
            assertTrue(e.isRetryable)
            assertFalse(e.isTimeout)
        }
    }

    @Test
    fun `the server's rate limit comes with its Retry-After`(): Unit = runBlocking {
        PsiServer(REGISTRY, "--items-per-hour", "50").use { limited ->
            ContactDiscovery(limited.url, DiscoveryConfig()).use { d ->
                val e = assertThrows<ContactDiscoveryException.RateLimited> { d.match(CONTACTS) }
                assertTrue(e.isRetryable)
                assertNotNull(e.retryAfterSeconds)
                assertTrue(e.retryAfterSeconds!! > 0)
            }
        }
    }

    @Test
    fun `no valid contact is an empty result, invalid settings are InvalidInput`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            // No valid contact is a result, not an error: the rejected rows come back, and
            // nothing is sent (issue 34).
            val nothing = d.match(listOf("", "nope"))
            assertTrue(nothing.matches.isEmpty())
            assertEquals(listOf(0, 1), nothing.rejected.map { it.index })
            assertEquals(listOf(RejectReason.EMPTY, RejectReason.NOT_A_PHONE_NUMBER), nothing.rejected.map { it.reason })
            assertEquals(0, nothing.stats.requests)
            assertNull(nothing.choice)
            val empty = d.match(emptyList())
            assertTrue(empty.matches.isEmpty() && empty.rejected.isEmpty())
            assertEquals(0, empty.stats.requests)
        }
        assertThrows<ContactDiscoveryException.InvalidInput> { ContactDiscovery("ftp://x", config) }
        assertThrows<ContactDiscoveryException.InvalidInput> {
            ContactDiscovery(server.url, config.withDefaultRegion("XX"))
        }
        assertThrows<ContactDiscoveryException.InvalidInput> {
            ContactDiscovery(server.url, config.withTimeoutMillis(0))
        }
        assertThrows<ContactDiscoveryException.InvalidInput> {
            ContactDiscovery(server.url, config.withToken("bad token"))
        }
    }

    @Test
    fun `progress events arrive in order, then the result`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            val events = d.matchFlow(CONTACTS, Protocol.DH) { it }.toList()
            val finished = events.last() as MatchEvent.Finished
            assertExpected(finished.result, Protocol.DH)
            val phases = events.dropLast(1).map { (it as MatchEvent.Progressed).progress.phase }
            assertEquals(
                listOf(
                    Phase.CREATE_SESSION, Phase.CLIENT_START, Phase.ROUND_TRIP, Phase.CLIENT_FINALIZE,
                    Phase.ENCODED_SET, Phase.CLIENT_FINISH, Phase.LABELS,
                ),
                phases,
            )
            val ot = d.matchFlow(CONTACTS, Protocol.OT) { it }.toList()
            val otProgress = ot.dropLast(1).map { (it as MatchEvent.Progressed).progress }
            assertEquals(Phase.CREATE_SESSION, otProgress.first().phase)
            assertEquals(Phase.LABELS, otProgress.last().phase)
            assertEquals(otProgress.map { it.round }.sorted(), otProgress.map { it.round })
            assertTrue(ot.last() is MatchEvent.Finished)
        }
    }

    /**
     * Cancels the coroutine while an OT-PSI round is in flight (the interceptor holds it):
     * the OkHttp call is cancelled, the run deletes its session, the caller sees
     * CancellationException, and the server no longer knows the session.
     */
    @Test
    fun `cancelling an OT-PSI run cancels the call and deletes the session`(): Unit = runBlocking {
        val seen = CopyOnWriteArrayList<String>()
        val deleted = CopyOnWriteArrayList<String>()
        val roundInFlight = CountDownLatch(1)
        var sessionId: String? = null
        val callCancelled = CountDownLatch(1)
        val http = OkHttpClient.Builder().eventListener(object : EventListener() {
            override fun canceled(call: Call) = callCancelled.countDown()
        }).addInterceptor(Interceptor { chain ->
            val req = chain.request()
            seen.add("${req.method} ${req.url.encodedPath}")
            val isRound = req.method == "POST" && req.url.encodedPath.endsWith("/ot/round")
            if (isRound) {
                roundInFlight.countDown()
                Thread.sleep(3_000) // the call is cancelled meanwhile
            }
            val resp = chain.proceed(req)
            if (req.method == "DELETE") deleted.add("${req.url.encodedPath} ${resp.code}")
            if (req.url.encodedPath == "/v1/sessions") {
                sessionId = Regex("\"session_id\"\\s*:\\s*\"([^\"]+)\"")
                    .find(resp.peekBody(4096).string())?.groupValues?.get(1)
            }
            resp
        }).build()
        ContactDiscovery(server.url, config, http).use { d ->
            val job = launch(kotlinx.coroutines.Dispatchers.Default) {
                assertThrows<CancellationException> { d.match(CONTACTS, Protocol.OT) }
            }
            assertTrue(roundInFlight.await(30, TimeUnit.SECONDS))
            job.cancel()
            job.join()
            assertTrue(callCancelled.await(10, TimeUnit.SECONDS), "the OkHttp call was not cancelled")
        }
        val id = sessionId ?: error("no session id seen")
        // The run's thread deletes the session after the cancelled call returns.
        val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20)
        while (deleted.isEmpty() && System.nanoTime() < deadline) Thread.sleep(20)
        assertEquals(listOf("/v1/sessions/$id 204"), deleted.toList(), "requests: $seen")
        val probe = OkHttpClient().newCall(
            Request.Builder().url("${server.url}/v1/sessions/$id")
                .header("authorization", "Bearer secret-token").delete().build(),
        ).execute()
        probe.use { assertEquals(404, it.code, "the session should be gone") }
    }

    @Test
    fun `health reports the registry and protocols`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            val h = d.health()
            assertEquals(REGISTRY.size.toLong(), h.registryItems)
            assertEquals(setOf(Protocol.DH, Protocol.OT), h.protocols.toSet())
            assertTrue(h.maxClientItems > 0)
        }
    }

    @Test
    fun `closed and forgotten clients release their native client`() {
        // Clients of earlier tests may still be finishing a cancelled run's DELETE.
        fun settle() {
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30)
            while (liveClients() > 0u && System.nanoTime() < deadline) {
                System.gc()
                Thread.sleep(50)
            }
        }
        settle()
        assertEquals(0uL, liveClients(), "clients of earlier tests were not released")
        val d = ContactDiscovery(server.url, config)
        assertEquals(1uL, liveClients())
        d.close()
        assertEquals(0uL, liveClients())
        repeat(20) { ContactDiscovery(server.url, config) } // never closed
        assertTrue(liveClients() > 0u)
        settle()
        assertEquals(0uL, liveClients(), "forgotten clients were not released by the garbage collector")
    }

    @Test
    fun `a caller on an unconfined dispatcher gets its result`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            // The run's thread resumes the coroutine itself: nothing may hold a lock then.
            val result = withContext(Dispatchers.Unconfined) { d.match(CONTACTS, Protocol.DH) }
            assertExpected(result, Protocol.DH)
        }
    }

    @Test
    fun `a closed client refuses calls`(): Unit = runBlocking {
        val d = ContactDiscovery(server.url, config)
        d.close()
        assertThrows<IllegalStateException> { d.match(CONTACTS) }
        assertThrows<IllegalStateException> { d.matchAsync(CONTACTS) }
        assertTrue(d.toString().contains(server.url))
        d.close() // twice is fine
    }
}
