package dev.psisdk.sample.android

import dev.psisdk.Phase
import dev.psisdk.Progress
import dev.psisdk.Protocol
import dev.psisdk.RetryEvent
import dev.psisdk.ServerErrorCode
import org.junit.Assert.assertEquals
import org.junit.Test

/** The texts of [UserMessages] that the view model tests do not reach. */
class UserMessagesTest {
    @Test
    fun theOutcomeSaysHowManyMatchedWithWhichProtocolAndHowManyWereNotSent() {
        assertEquals(
            "None of your contacts use this service (matched with DH-PSI).",
            UserMessages.done(0, Protocol.DH, 0),
        )
        assertEquals(
            "1 of your contacts uses this service (matched with CM20-PSI). " +
                "3 entries are not a valid phone number or email and were not sent.",
            UserMessages.done(1, Protocol.CM20, 3),
        )
        val alice = Contact("Alice Walker", "+1 415 555 0101", Contact.Kind.PHONE)
        assertEquals(
            "Alice Walker — Alice (@alice)\n+1 415 555 0101",
            UserMessages.matchLine(Match(alice, "+14155550101", "Alice (@alice)")),
        )
        assertEquals("Alice Walker\n+1 415 555 0101", UserMessages.matchLine(Match(alice, "+14155550101", null)))
        assertEquals("Matching: Starting…", UserMessages.progress(null))
    }

    @Test
    fun aRetryIsShownAsSuchNotAsThePhaseItFailedIn() {
        val retry = RetryEvent(
            attempt = 1, retries = 2, reason = "HTTP 503 (internal)", isTimeout = false,
            status = 503, code = ServerErrorCode.INTERNAL, waitMillis = 1_200,
        )
        assertEquals(
            "The server did not answer as expected; trying again in 2 s (attempt 2 of 3)…",
            UserMessages.progress(Progress(Phase.ROUND_TRIP, 1, retry)),
        )
        assertEquals(
            "Matching: Waiting for the server (round trip 1)…",
            UserMessages.progress(Progress(Phase.ROUND_TRIP, 1, null, 0.5)),
        )
    }
}
