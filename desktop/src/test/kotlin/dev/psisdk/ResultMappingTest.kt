package dev.psisdk

import dev.psisdk.ffi.PsiException
import dev.psisdk.ffi.defaultDiscoveryConfig
import dev.psisdk.testing.PsiServer
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertInstanceOf
import org.junit.jupiter.api.Assertions.assertNotEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows

/**
 * What the FFI's results carry, mapped onto the public types (issue 36's list): the label
 * status and counts, the registry version, the progress fraction and its thread, the choice
 * report's link sources, the native error as the cause, the defaults read from Rust. Against
 * the real native library and a real `psi serve` on loopback.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ResultMappingTest {
    /** Three labelled entries and one without a label. */
    private val server = PsiServer(
        listOf(
            "alice@example.com,Alice",
            "bob@example.com,Bob",
            "+14155550123,Carol",
            "nolabel@example.com",
        ) + (1..200).map { "filler$it@example.com,Filler $it" },
    )
    private val contacts = listOf(
        "alice@example.com",
        "nolabel@example.com",
        "stranger@example.org",
        "(415) 555-0123",
        "not a contact",
        // A second row of the identifier without a label.
        " NoLabel@Example.com",
    )

    @AfterAll
    fun stop() = server.close()

    @Test
    fun `the defaults are the native library's, not a second copy`() {
        val config = DiscoveryConfig()
        val native = defaultDiscoveryConfig()
        assertEquals(native.defaultRegion, config.defaultRegion)
        assertEquals(native.timeoutMs.toLong(), config.timeoutMillis)
        assertEquals(native.maxResponseBytes.toLong(), config.maxResponseBytes)
        assertEquals(32L shl 20, config.maxResponseBytes, "a phone's cap, not the desktop client's 256 MiB")
        assertEquals(native.retries.toInt(), config.retries)
        assertEquals(native.threads.toInt(), config.threads)
        assertEquals(native.cacheMaxBytes.toLong(), config.cacheMaxBytes)
        assertEquals(native.fetchLabels, config.fetchLabels)
        assertEquals(native.allowInsecureHttp, config.allowInsecureHttp)
        assertEquals(ProtocolChoice.AUTO, config.protocol)
        assertEquals(native.deadlineMs.toLong(), config.deadlineMillis)
        assertEquals(120_000L, config.deadlineMillis, "a whole run within 2 minutes")
    }

    @Test
    fun `a labelled run reports complete labels, the rows without one and the registry version`(): Unit =
        runBlocking {
            ContactDiscovery(server.url, DiscoveryConfig()).use { d ->
                val result = d.match(contacts, Protocol.DH)
                assertEquals(
                    mapOf(0 to "Alice", 1 to null, 3 to "Carol", 5 to null),
                    result.matches.associate { it.index to it.label },
                )
                assertEquals(LabelStatus.COMPLETE, result.labelStatus)
                // Rows, as the matches are: both rows of the identifier without a label.
                assertEquals(2L, result.labelsMissing)
                assertEquals(0L, result.labelsSkipped)
                assertTrue(result.registryVersion.isNotEmpty())
                assertFalse(result.registryVersion.contains('"'), result.registryVersion)
                assertEquals(result.stats.epoch, result.epoch)
                // Health names the same version, so an app can ask without a run.
                val health = d.health()
                assertEquals(result.registryVersion, health.registryVersion)
                assertEquals(result.epoch, health.epoch)
                // The same registry answers the next run with the same version.
                assertEquals(result.registryVersion, d.match(contacts, Protocol.OT).registryVersion)
            }
        }

    @Test
    fun `with labels off no match has one and the status says so`(): Unit = runBlocking {
        ContactDiscovery(server.url, DiscoveryConfig().withLabels(false)).use { d ->
            val result = d.match(contacts, Protocol.DH)
            assertEquals(4, result.matches.size)
            assertTrue(result.matches.all { it.label == null })
            assertEquals(LabelStatus.OFF, result.labelStatus)
            assertEquals(4L, result.labelsMissing)
        }
    }

    private suspend fun progressOf(d: ContactDiscovery, protocol: Protocol): List<Progress> {
        val seen = CopyOnWriteArrayList<Progress>()
        d.match(contacts, protocol, { seen.add(it) }) { it }
        return seen.toList()
    }

    @Test
    fun `the progress fraction starts at 0, never goes back and stays below 1`(): Unit = runBlocking {
        ContactDiscovery(server.url, DiscoveryConfig()).use { d ->
            for (protocol in listOf(Protocol.DH, Protocol.OT)) {
                val progress = progressOf(d, protocol)
                val fractions = progress.map { it.fraction }
                assertEquals(Phase.CREATE_SESSION, progress.first().phase)
                assertEquals(0.0, fractions.first())
                assertEquals(fractions.sorted(), fractions, "$protocol: $fractions")
                assertTrue(fractions.all { it in 0.0..0.99 }, "$protocol: $fractions")
                // By the label step most of the run's requests are done.
                assertTrue(progress.last().fraction >= 0.5, "$protocol: $fractions")
                assertTrue(progress.all { it.retry == null })
            }
        }
    }

    @Test
    fun `onProgress runs in the caller's context, and every event before the call returns`(): Unit =
        runBlocking {
            val executor = Executors.newSingleThreadExecutor { Thread(it, "the-app's-thread") }
            try {
                ContactDiscovery(server.url, DiscoveryConfig()).use { d ->
                    val threads = CopyOnWriteArrayList<String>()
                    val phases = CopyOnWriteArrayList<Phase>()
                    val result = withContext(executor.asCoroutineDispatcher()) {
                        d.match(contacts, Protocol.OT, { p ->
                            threads.add(Thread.currentThread().name)
                            phases.add(p.phase)
                        }) { it }
                    }
                    // Nothing arrives after the result.
                    val delivered = phases.size
                    Thread.sleep(200)
                    assertEquals(delivered, phases.size)
                    assertEquals(Phase.LABELS, phases.last())
                    // (Coroutines' debug mode, on in tests, appends the coroutine to the name.)
                    assertTrue(threads.all { it.startsWith("the-app's-thread") }, "$threads")
                    assertEquals(4, result.matches.size)
                }
            } finally {
                executor.shutdownNow()
            }
        }

    @Test
    fun `the native run calls back on one named thread, not a new thread per event`(): Unit = runBlocking {
        DiscoveryConfig() // loads the library through the SDK, which sets how its threads attach
        val threads = CopyOnWriteArrayList<Thread>()
        val listener = object : dev.psisdk.ffi.ProgressListener {
            override fun onProgress(event: dev.psisdk.ffi.ProgressEvent) {
                threads.add(Thread.currentThread())
            }
        }
        val native = dev.psisdk.ffi.DiscoveryClient(
            server.url,
            defaultDiscoveryConfig(),
            OkHttpTransport(OkHttpTransport.sharedClient),
        )
        try {
            native.matchContacts(contacts, dev.psisdk.ffi.ProtocolChoice.Fixed(dev.psisdk.ffi.Protocol.OT), null, listener)
        } finally {
            native.close()
        }
        assertTrue(threads.size > 5, "$threads")
        assertEquals(setOf(NativeLibrary.NATIVE_THREAD), threads.map { it.name }.toSet())
        assertEquals(1, threads.map { System.identityHashCode(it) }.toSet().size, "one Thread for the run's events")
        assertTrue(threads.first().isDaemon)
    }

    @Test
    fun `a listener that throws does not break the run`(): Unit = runBlocking {
        ContactDiscovery(server.url, DiscoveryConfig()).use { d ->
            var calls = 0
            val result = d.match(contacts, Protocol.DH, {
                calls++
                throw IllegalStateException("the app's bug")
            }) { it }
            assertEquals(4, result.matches.size)
            assertTrue(calls > 3, "every event is still delivered: $calls")
        }
    }

    @Test
    fun `the choice report says where each link figure came from`(): Unit = runBlocking {
        val hints = LinkHints(metered = false, LinkTransport.WIFI, downstreamKbps = 40_000, upstreamKbps = 10_000, network = "mapping-test")
        ContactDiscovery(server.url, DiscoveryConfig()).use { d ->
            val choice = d.match(contacts, linkHints = hints).choice!!
            assertEquals(InputSource.GIVEN, choice.linkSources.down, choice.toString())
            assertEquals(InputSource.GIVEN, choice.linkSources.up, choice.toString())
            assertNull(choice.fellBackFrom)
        }
        ContactDiscovery(server.url, DiscoveryConfig()).use { d ->
            val choice = d.match(contacts, linkHints = LinkHints.UNKNOWN).choice!!
            assertNotEquals(InputSource.GIVEN, choice.linkSources.down, choice.toString())
        }
    }

    @Test
    fun `a native error is the public exception's cause`() {
        val e = assertThrows<ContactDiscoveryException.InvalidInput> {
            ContactDiscovery("ftp://example.com", DiscoveryConfig())
        }
        val cause = assertInstanceOf(PsiException.InvalidInput::class.java, e.cause)
        assertEquals(e.message, cause.reason)
    }

    @Test
    fun `a refused connection is a Network error carrying the native one`(): Unit = runBlocking {
        // A port nothing listens on: bound, then closed.
        val port = java.net.ServerSocket(0).use { it.localPort }
        ContactDiscovery("http://127.0.0.1:$port", DiscoveryConfig(retries = 0, protocol = Protocol.DH)).use { d ->
            val e = assertThrows<ContactDiscoveryException.Network> { d.match(contacts) }
            assertInstanceOf(PsiException.Network::class.java, e.cause)
        }
    }
}
