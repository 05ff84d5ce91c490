package dev.psisdk.sample.desktop

import dev.psisdk.ContactDiscovery
import dev.psisdk.Protocol
import dev.psisdk.ProtocolChoice
import dev.psisdk.RejectReason
import dev.psisdk.sample.desktop.MatchUiState.Status
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import okhttp3.Interceptor
import okhttp3.OkHttpClient
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.AfterEach
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.Timeout
import dev.psisdk.testing.PsiServer

/**
 * [MatchViewModel] headless, against a real `psi serve` on loopback: load a file, match,
 * errors, cancel. No window is opened.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class MatchViewModelTest {
    private val server = PsiServer(REGISTRY, "--token", TOKEN)
    private val dir: Path = Files.createTempDirectory("psi-desktop-sample-vm-test")
    private val viewModels = mutableListOf<MatchViewModel>()

    @AfterEach
    fun closeViewModels() {
        viewModels.forEach { it.close() }
        viewModels.clear()
    }

    @AfterAll
    fun stop() {
        server.close()
        dir.toFile().deleteRecursively()
    }

    private fun viewModel(
        token: String = TOKEN,
        serverUrl: String = server.url,
        newClient: ((String, dev.psisdk.DiscoveryConfig) -> ContactDiscovery)? = null,
    ): MatchViewModel {
        val initial = MatchUiState(serverUrl = serverUrl, token = token)
        val cache = dir.resolve("cache").toString()
        val vm = if (newClient == null) MatchViewModel(initial, cache) else MatchViewModel(initial, cache, newClient)
        return vm.also { viewModels.add(it) }
    }

    private fun contactsFile(): Path = dir.resolve("contacts.vcf").also { Files.writeString(it, VCARD) }

    private suspend fun MatchViewModel.awaitState(predicate: (MatchUiState) -> Boolean): MatchUiState =
        withTimeout(30_000) { state.first(predicate) }

    private suspend fun MatchViewModel.load(path: Path = contactsFile()) {
        loadFile(path).join()
        assertNotNull(state.value.addressBook, state.value.status.message)
    }

    private fun assertExpectedResult(state: MatchUiState, protocol: Protocol) {
        assertTrue(state.status is Status.Done, state.status.message)
        assertEquals(
            mapOf(
                0 to ("Alice Walker" to "Alice (@alice)"),
                2 to ("Bob Martin" to "Bob (@bob)"),
                4 to ("Carol Diaz" to "Carol (@carol)"),
            ),
            state.matches.associate { it.index to (it.contact.name to it.label) },
        )
        assertEquals(listOf("+14155550101", "+14155550102", "carol@example.com"), state.matches.map { it.identifier })
        assertEquals(setOf(5, 6, 7), state.rejected.map { it.index }.toSet())
        assertEquals(RejectReason.BAD_EMAIL, state.rejected.first { it.index == 5 }.reason)
        assertEquals(RejectReason.EMPTY, state.rejected.first { it.index == 7 }.reason)
        assertEquals("Jamal Reed", state.rejected.first { it.index == 7 }.contact.name)
        assertEquals("3 of 5 entries sent are registered; 3 not valid (see Rejected).", state.status.message)
        val summary = checkNotNull(state.summary)
        assertTrue(summary.startsWith(UserMessages.protocolName(protocol) + ": sent "), summary)
        assertTrue(Regex("\\d+ round trips?").containsMatchIn(summary), summary)
        assertEquals(protocol, state.result?.protocol)
        assertFalse(state.isBusy)
        assertTrue(state.canMatch)
    }

    @Test
    fun `loading a vCard then matching with DH-PSI gives the matches with labels and the rejected entries`() = runBlocking {
        val vm = viewModel()
        assertNull(vm.match(), "no address book yet: Match does nothing")
        vm.load()
        val loaded = vm.state.value
        assertEquals(8, loaded.addressBook!!.entries.size)
        assertEquals("Loaded contacts.vcf: 8 entries from 5 cards. Press Match.", loaded.status.message)
        assertTrue(loaded.canMatch)

        val seen = CopyOnWriteArrayList<Status.Matching>()
        val watcher = launch(Dispatchers.Unconfined) {
            vm.state.collect { (it.status as? Status.Matching)?.let(seen::add) }
        }
        val run = checkNotNull(vm.match())
        assertTrue(vm.state.value.status is Status.Matching)
        assertFalse(vm.state.value.canMatch, "Match is disabled while a run is in progress")
        assertTrue(vm.state.value.canCancel)
        run.join()
        watcher.cancel()

        assertExpectedResult(vm.state.value, Protocol.DH)
        // The SDK's progress events drove the status: phases in order, a bar that never goes back.
        assertTrue(seen.isNotEmpty())
        assertEquals(seen.map { it.fraction }.sorted(), seen.map { it.fraction })
    }

    @Test
    fun `the automatic choice runs a protocol and the summary says why`() = runBlocking {
        val vm = viewModel()
        vm.load()
        vm.setProtocol(ProtocolChoice.AUTO)
        vm.match()!!.join()
        val result = checkNotNull(vm.state.value.result)
        val choice = checkNotNull(result.choice)
        assertEquals(choice.protocol, result.protocol)
        assertExpectedResult(vm.state.value, result.protocol)
        val summary = UserMessages.summary(result)
        assertTrue("chosen automatically" in summary, summary)
        for (p in choice.predictions) assertTrue(UserMessages.protocolName(p.protocol) + " predicted" in summary, summary)
    }

    @Test
    fun `OT-PSI finds the same contacts`() = runBlocking {
        val vm = viewModel()
        vm.load()
        vm.setProtocol(Protocol.OT)
        vm.match()!!.join()
        assertExpectedResult(vm.state.value, Protocol.OT)
    }

    @Test
    fun `the bundled samples match as the README says`() = runBlocking {
        val samples = Path.of(System.getProperty("samples.dir") ?: "samples")
        PsiServer(Files.readAllLines(samples.resolve("registry.csv"))).use { sampleServer ->
            val vm = viewModel(token = "", serverUrl = sampleServer.url)
            vm.load(samples.resolve("contacts.vcf"))
            vm.match()!!.join()
            val state = vm.state.value
            assertTrue(state.status is Status.Done, state.status.message)
            assertEquals(11, state.matches.size)
            assertEquals(3, state.rejected.size)
            assertTrue(state.matches.all { it.label != null })
            assertEquals("Alice Walker (@alicew)", state.matches.first().label)
        }
    }

    @Test
    fun `a wrong token gives an error state that says so`() = runBlocking {
        val vm = viewModel(token = "not-the-token")
        vm.load()
        vm.match()!!.join()
        val state = vm.state.value
        val failed = state.status as? Status.Failed ?: error("expected Failed, got ${state.status}")
        assertEquals("The server refused the token. Check the Token field (or ask for a new token).", failed.message)
        assertFalse(failed.retryable)
        assertNull(state.result)
        assertTrue(state.canMatch, "the user can fix the token and match again")

        vm.setToken(TOKEN)
        vm.match()!!.join()
        assertExpectedResult(vm.state.value, Protocol.DH)
    }

    @Test
    fun `a server that is not running gives a network error state`() = runBlocking {
        val vm = viewModel(serverUrl = "http://127.0.0.1:9")
        vm.load()
        vm.match()!!.join()
        val failed = vm.state.value.status as? Status.Failed ?: error("expected Failed, got ${vm.state.value.status}")
        assertEquals("Cannot reach the server at http://127.0.0.1:9. Is it running, and is the URL right?", failed.message)
        assertTrue(failed.retryable)
    }

    @Test
    fun `cancel returns to an idle state at once and a new run then works`() = runBlocking {
        // The session request is held until the test releases it, so the run is surely in flight.
        val requestHeld = CountDownLatch(1)
        val release = CountDownLatch(1)
        val http = OkHttpClient.Builder().addInterceptor(Interceptor { chain ->
            if (release.count > 0) {
                requestHeld.countDown()
                release.await(20, TimeUnit.SECONDS)
            }
            chain.proceed(chain.request())
        }).build()
        val vm = viewModel(newClient = { url, config -> ContactDiscovery(url, config, http) })
        try {
            vm.load()
            val run = checkNotNull(vm.match())
            assertTrue(requestHeld.await(20, TimeUnit.SECONDS), "the run never sent a request")
            assertTrue(vm.state.value.status is Status.Matching)

            vm.cancel()
            val state = vm.state.value
            assertEquals(Status.Idle("Cancelled."), state.status)
            assertNull(state.result)
            assertFalse(state.isBusy)
            assertFalse(state.canCancel)
            assertTrue(state.canMatch)
            withTimeout(20_000) { run.join() }
            assertTrue(run.isCancelled)
            assertEquals(Status.Idle("Cancelled."), vm.state.value.status, "a cancelled run publishes nothing later")
        } finally {
            release.countDown()
        }
        vm.match()!!.join()
        assertExpectedResult(vm.state.value, Protocol.DH)
    }

    @Test
    fun `a malformed file gives an error state and nothing to match`() = runBlocking {
        val vm = viewModel()
        vm.load()
        val bad = dir.resolve("broken.csv").also { Files.writeString(it, "name,phone\n\"Alice,+1 415 555 0101\n") }
        vm.loadFile(bad).join()
        val state = vm.state.value
        assertEquals(Status.Failed("broken.csv line 2: a quoted field is not closed", false), state.status)
        assertNull(state.addressBook)
        assertFalse(state.canMatch)
        assertNull(vm.match())
    }

    @Test
    fun `settings edits reach the state`() = runBlocking {
        val vm = viewModel()
        vm.setServerUrl("  http://example.com:8080 ")
        vm.setRegion("gb")
        vm.setProtocol(Protocol.OT)
        val state = vm.awaitState { it.protocol == Protocol.OT }
        assertEquals("http://example.com:8080", state.serverUrl)
        assertEquals("GB", state.region)
    }

    companion object {
        const val TOKEN = "sample-token"

        /** The server's registry: four known people, and 50 others. */
        val REGISTRY: List<String> = listOf(
            "+14155550101,Alice (@alice)",
            "+14155550102,Bob (@bob)",
            "carol@example.com,Carol (@carol)",
            "dan@example.com,Dan (@dan)",
        ) + (1..50).map { "member$it@example.com,Member $it" }

        /**
         * Five cards, eight entries: 0 Alice's phone (registered), 1 her email (not),
         * 2 Bob's phone without country code (registered), 3 his other phone (not),
         * 4 Carol's email in capitals (registered), 5 a broken email, 6 a number too short,
         * 7 a card without phone or email.
         */
        val VCARD = """
            BEGIN:VCARD
            VERSION:3.0
            FN:Alice Walker
            TEL;TYPE=CELL:+1 415 555 0101
            EMAIL:alice@example.org
            END:VCARD
            BEGIN:VCARD
            VERSION:3.0
            FN:Bob Martin
            TEL;TYPE=CELL:415-555-0102
            TEL;TYPE=WORK:+1 415 555 0190
            END:VCARD
            BEGIN:VCARD
            VERSION:4.0
            FN:Carol Diaz
            EMAIL;TYPE=home:CAROL@Example.com
            EMAIL;TYPE=work:broken@
            END:VCARD
            BEGIN:VCARD
            VERSION:3.0
            FN:Erin Svensson
            TEL:12
            END:VCARD
            BEGIN:VCARD
            VERSION:3.0
            FN:Jamal Reed
            ORG:Reed Plumbing
            END:VCARD
        """.trimIndent()
    }
}
