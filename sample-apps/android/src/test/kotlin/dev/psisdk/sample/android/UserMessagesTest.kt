package dev.psisdk.sample.android

import dev.psisdk.Protocol
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
}
