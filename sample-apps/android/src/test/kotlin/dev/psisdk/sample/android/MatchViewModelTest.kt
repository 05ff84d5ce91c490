package dev.psisdk.sample.android

import dev.psisdk.ContactDiscoveryException
import dev.psisdk.Phase
import dev.psisdk.Progress
import dev.psisdk.Protocol
import dev.psisdk.ServerErrorCode
import dev.psisdk.sample.android.Contact.Kind.EMAIL
import dev.psisdk.sample.android.Contact.Kind.PHONE
import java.util.concurrent.atomic.AtomicInteger
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.ExperimentalCoroutinesApi
import kotlinx.coroutines.awaitCancellation
import kotlinx.coroutines.test.StandardTestDispatcher
import kotlinx.coroutines.test.TestScope
import kotlinx.coroutines.test.advanceUntilIdle
import kotlinx.coroutines.test.runTest
import org.junit.After
import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertNull
import org.junit.Assert.assertTrue
import org.junit.Test

/** [MatchViewModel]'s states with a fake address book and a fake matcher, on a test dispatcher. */
@OptIn(ExperimentalCoroutinesApi::class)
class MatchViewModelTest {
    private val alice = Contact("Alice Walker", "+1 415 555 0101", PHONE)
    private val bob = Contact("Bob Martin", "bob@example.com", EMAIL)
    private val broken = Contact("Carol Diaz", "carol@", EMAIL)
    private val addressBook = ContactsRead.Entries(listOf(alice, bob, broken))
    private val viewModels = mutableListOf<MatchViewModel>()

    @After
    fun closeViewModels() = viewModels.forEach { it.close() }

    private fun TestScope.viewModel(matcher: ContactMatcher, contacts: ContactSource = ContactSource { addressBook }): MatchViewModel {
        val dispatcher = StandardTestDispatcher(testScheduler)
        return MatchViewModel(contacts, matcher, dispatcher, dispatcher).also { viewModels += it }
    }

    private fun outcome(protocol: Protocol = Protocol.DH) = MatchOutcome(
        matches = listOf(Match(alice, "+14155550101", "Alice (@alice)"), Match(bob, "bob@example.com", null)),
        protocol = protocol,
        rejectedCount = 1,
    )

    @Test
    fun aRunGoesFromLoadingThroughItsPhasesToTheMatchesWithLabels() = runTest {
        val sessionOpen = CompletableDeferred<Unit>()
        val roundDone = CompletableDeferred<Unit>()
        val matcher = FakeMatcher { onProgress ->
            onProgress(Progress(Phase.CREATE_SESSION, 0))
            sessionOpen.await()
            onProgress(Progress(Phase.ROUND_TRIP, 1))
            roundDone.await()
            outcome(Protocol.OT)
        }
        val vm = viewModel(matcher)
        assertEquals(UiState.Idle, vm.state.value)

        vm.match("  https://psi.example.com ")
        assertEquals(UiState.Loading, vm.state.value)
        assertFalse(vm.state.value.canMatch)

        advanceUntilIdle()
        assertEquals(UiState.Matching(Progress(Phase.CREATE_SESSION, 0)), vm.state.value)
        assertEquals("Matching: Connecting to the server…", vm.state.value.message)
        assertNull("Match is ignored while a run is in progress", vm.match("https://other.example.com"))

        sessionOpen.complete(Unit)
        advanceUntilIdle()
        assertEquals(UiState.Matching(Progress(Phase.ROUND_TRIP, 1)), vm.state.value)
        assertEquals("Matching: Waiting for the server (round trip 1)…", vm.state.value.message)

        roundDone.complete(Unit)
        advanceUntilIdle()
        val done = vm.state.value
        assertEquals(UiState.Done(outcome().matches, Protocol.OT, rejectedCount = 1), done)
        assertEquals(
            "2 of your contacts use this service (matched with OT-PSI). " +
                "1 entry is not a valid phone number or email and was not sent.",
            done.message,
        )
        assertTrue(done.canMatch)
        // The whole address book went to the matcher once, with the trimmed URL.
        assertEquals(listOf("https://psi.example.com" to listOf(alice, bob, broken)), matcher.calls.toList())
    }

    @Test
    fun eachKindOfErrorBecomesASentenceAndSaysWhetherToRetry() = runTest {
        val url = "https://psi.example.com"
        val cases = listOf(
            ContactDiscoveryException.InvalidInput("more contacts than the server accepts (5000)") to
                UiState.Failed("Cannot match: more contacts than the server accepts (5000). Check the server address and your contacts.", false),
            ContactDiscoveryException.Network("connection refused", isTimeout = false) to
                UiState.Failed("Cannot reach the server at $url. Check your connection and the address.", true),
            ContactDiscoveryException.Network("read timed out", isTimeout = true) to
                UiState.Failed("The server at $url did not answer in time. Try again later.", true),
            ContactDiscoveryException.Unauthorized("invalid token") to
                UiState.Failed("The server did not accept this app's access. Ask the server's operator for a new token.", false),
            ContactDiscoveryException.RateLimited("rate limited", retryAfterSeconds = 30) to
                UiState.Failed("The server is busy with too many requests. Try again in 30 s.", true),
            ContactDiscoveryException.RateLimited("rate limited", retryAfterSeconds = null) to
                UiState.Failed("The server is busy with too many requests. Try again later.", true),
            ContactDiscoveryException.Server("internal", 503, ServerErrorCode.INTERNAL, isRetryable = true) to
                UiState.Failed("The server answered with an error (HTTP 503). Try again later.", true),
            ContactDiscoveryException.Server("bad request", 400, ServerErrorCode.BAD_REQUEST, isRetryable = false) to
                UiState.Failed("The server answered with an error (HTTP 400).", false),
            ContactDiscoveryException.ProtocolViolation("epoch changed", isRetryable = true) to
                UiState.Failed("The server's directory changed during the run. Match again.", true),
            ContactDiscoveryException.ProtocolViolation("bad point", isRetryable = false) to
                UiState.Failed("The server's answer could not be understood: is it a compatible psi server?", false),
            ContactDiscoveryException.Internal("native panic") to
                UiState.Failed("Something went wrong inside the app (native panic). Please report it.", false),
            IllegalStateException("client closed") to
                UiState.Failed("Unexpected error (IllegalStateException).", false),
        )
        for ((error, expected) in cases) {
            val vm = viewModel(FakeMatcher { throw error })
            vm.match(url)
            advanceUntilIdle()
            assertEquals(error.javaClass.name, expected, vm.state.value)
            assertTrue(vm.state.value.canMatch)
            // Error texts never carry contacts.
            listOf(alice, bob, broken).forEach { assertFalse(it.value in vm.state.value.message) }
        }
    }

    @Test
    fun aRetryableFailureCanBeRetriedAndThenSucceeds() = runTest {
        val attempts = AtomicInteger()
        val vm = viewModel(
            FakeMatcher {
                if (attempts.incrementAndGet() == 1) throw ContactDiscoveryException.Network("reset", isTimeout = false)
                outcome()
            },
        )
        vm.match("https://psi.example.com")
        advanceUntilIdle()
        assertEquals(true, (vm.state.value as UiState.Failed).retryable)

        vm.match("https://psi.example.com")
        assertEquals(UiState.Loading, vm.state.value)
        advanceUntilIdle()
        assertEquals(UiState.Done(outcome().matches, Protocol.DH, 1), vm.state.value)
        assertEquals(2, attempts.get())
    }

    @Test
    fun aMissingOrRefusedPermissionGivesNeedsPermissionWithoutARun() = runTest {
        val matcher = FakeMatcher { outcome() }
        val vm = viewModel(matcher, contacts = ContactSource { ContactsRead.PermissionMissing })

        vm.permissionDenied() // the user said no to the Activity's request
        assertEquals(UiState.NeedsPermission, vm.state.value)
        assertEquals(UserMessages.NEEDS_PERMISSION, vm.state.value.message)

        vm.match("https://psi.example.com") // granted once, revoked since
        advanceUntilIdle()
        assertEquals(UiState.NeedsPermission, vm.state.value)
        assertTrue(vm.state.value.canMatch)
        assertTrue(matcher.calls.isEmpty())
    }

    @Test
    fun anEmptyAddressBookOrNoServerAddressEndsWithoutCallingTheServer() = runTest {
        val reads = AtomicInteger()
        val matcher = FakeMatcher { outcome() }
        val vm = viewModel(matcher, contacts = ContactSource { reads.incrementAndGet(); ContactsRead.Entries(emptyList()) })

        assertNull(vm.match("   "))
        assertEquals(UiState.Failed(UserMessages.NO_SERVER, retryable = false), vm.state.value)
        assertEquals(0, reads.get())

        vm.match("https://psi.example.com")
        advanceUntilIdle()
        assertEquals(UiState.Failed(UserMessages.EMPTY_ADDRESS_BOOK, retryable = false), vm.state.value)
        assertEquals(1, reads.get())
        assertTrue(matcher.calls.isEmpty())
    }

    @Test
    fun closeCancelsTheRunAndClosesTheMatcher() = runTest {
        val matcher = FakeMatcher { onProgress ->
            onProgress(Progress(Phase.CLIENT_START, 0))
            awaitCancellation()
        }
        val vm = viewModel(matcher)
        val run = checkNotNull(vm.match("https://psi.example.com"))
        advanceUntilIdle()
        assertEquals(UiState.Matching(Progress(Phase.CLIENT_START, 0)), vm.state.value)

        vm.close()
        advanceUntilIdle()
        assertTrue(run.isCancelled)
        assertTrue(matcher.closed)
        // A cancelled run is not an error.
        assertEquals(UiState.Matching(Progress(Phase.CLIENT_START, 0)), vm.state.value)
    }
}
