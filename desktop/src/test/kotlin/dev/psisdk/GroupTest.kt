package dev.psisdk

import dev.psisdk.TestData.REGISTRY
import dev.psisdk.testing.PsiServer
import java.time.Duration
import java.util.concurrent.TimeUnit
import kotlin.random.Random
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows

/**
 * Group overlap (IOP18 multiparty PSI through the relay of a real `psi serve` on loopback):
 * several parties in one JVM, each with its own [ContactDiscovery], as phones would be.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class GroupTest {
    // Every test creates groups from one address: more than the default 4 live ones per caller.
    private val server = PsiServer(REGISTRY, "--max-groups-per-client", "64")
    private val config = DiscoveryConfig()

    @AfterAll
    fun stop() = server.close()

    /** The identifier the SDK makes of a contact written in any of the test's spellings. */
    private fun canonical(contact: String): String =
        if ('@' in contact) contact.trim().lowercase() else "+" + contact.filter { it.isDigit() }

    /**
     * Three address books drawn at random from one pool of emails and US phone numbers,
     * each spelt its own way (case, spaces, punctuation), plus a few invalid rows.
     */
    private fun addressBooks(random: Random, parties: Int, perParty: Int): List<List<String>> {
        val pool = (1..perParty * 2).map { i ->
            if (i % 4 == 0) "+1415555%04d".format(i) else "friend$i@example.net"
        }
        return (0 until parties).map { p ->
            val book = pool.shuffled(random).take(perParty).map { id ->
                when {
                    '@' in id && p == 1 -> "  ${id.uppercase()} "
                    '@' in id -> id
                    p == 2 -> "+1 (415) 555-${id.takeLast(4)}"
                    else -> id
                }
            }
            book + listOf("not a contact", "")
        }
    }

    @Test
    fun `a group of three finds exactly the contacts all of them hold`(): Unit = runBlocking {
        val books = addressBooks(Random(38), parties = 3, perParty = 150)
        val expected = books.map { b -> b.filter { it.isNotBlank() && it != "not a contact" }.map(::canonical).toSet() }
            .reduce { a, b -> a intersect b }
        // The draw overlaps, but not entirely: the test means something.
        assertTrue(expected.size in 5..140, "${expected.size}")
        val discoveries = List(3) { ContactDiscovery(server.url, config) }
        try {
            val leader = discoveries[0].createGroup(3)
            assertTrue(leader.isLeader)
            assertEquals(0, leader.party)
            assertEquals(3, leader.size)
            assertTrue('.' in leader.code)
            assertFalse(leader.code in leader.toString())
            // The leader waits for the group while the members join and run, concurrently.
            val leaderRun = async { leader.run(books[0]) }
            val memberRuns = (1..2).map { p ->
                async {
                    val member = discoveries[p].joinGroup(leader.code)
                    assertFalse(member.isLeader)
                    assertEquals(3, member.size)
                    member.run(books[p])
                }
            }
            val results = listOf(leaderRun.await()) + memberRuns.awaitAll()
            assertEquals(setOf(0, 1, 2), results.map { it.party }.toSet())
            for ((p, r) in results.withIndex()) {
                val book = books[p]
                assertEquals(expected, r.common!!.toSet(), "party $p")
                // Every row of this party's own list whose identifier all hold, and no other.
                val rows = book.indices.filter { book[it].isNotBlank() && book[it] != "not a contact" && canonical(book[it]) in expected }
                assertEquals(rows, r.matches.map { it.index }, "party $p")
                for (m in r.matches) {
                    assertEquals(book[m.index], m.contact)
                    assertEquals(canonical(m.contact), m.identifier)
                }
                assertEquals(listOf(book.size - 2, book.size - 1), r.rejected.map { it.index })
                assertEquals(RejectReason.EMPTY, r.rejected.last().reason)
                assertTrue(r.stats.bytesSent > 0 && r.stats.bytesReceived > 0, "${r.stats}")
                assertTrue(r.stats.protocolBytesSent > 0 && r.stats.protocolBytesReceived > 0, "${r.stats}")
                assertTrue(r.stats.requests >= 3, "${r.stats}")
                assertTrue(r.stats.elapsed > Duration.ZERO && r.stats.elapsed >= r.stats.compute, "${r.stats}")
            }
            // A session runs once.
            val again = assertThrows<ContactDiscoveryException.InvalidInput> { leader.run(books[0]) }
            assertFalse("@" in again.message!!)
            leader.close()
        } finally {
            discoveries.forEach { it.close() }
        }
    }

    @Test
    fun `a leader that does not share leaves the members without a result`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { a ->
            ContactDiscovery(server.url, config).use { b ->
                val leader = a.createGroup(2)
                val mine = listOf("ann@example.com", "bob@example.com", "+14155550100")
                val theirs = listOf("BOB@example.com", "+1 415 555 0100", "cy@example.com")
                val led = async { leader.run(mine, GroupRunOptions(shareResult = false)) }
                val member = b.joinGroup(leader.code).run(theirs)
                assertEquals(setOf("bob@example.com", "+14155550100"), led.await().common!!.toSet())
                assertNull(member.common)
                assertTrue(member.matches.isEmpty())
            }
        }
    }

    @Test
    fun `a code that is not one, or names no group, is a typed group error`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            val bad = assertThrows<ContactDiscoveryException.Group> { d.joinGroup("not-a-code") }
            assertEquals(GroupFailure.BAD_CODE, bad.failure)
            assertFalse(bad.isRetryable)
            val leader = d.createGroup(2)
            val (id, secret) = leader.code.split('.', limit = 2)
            val otherId = id.dropLast(1) + (if (id.last() == 'a') 'b' else 'a')
            val unknown = assertThrows<ContactDiscoveryException.Group> { d.joinGroup("$otherId.$secret") }
            assertEquals(GroupFailure.UNKNOWN_GROUP, unknown.failure)
            assertTrue(unknown.cause is dev.psisdk.ffi.GroupException, "${unknown.cause}")
            assertFalse(secret in unknown.message!!, "the error must not carry the code's secret")
            // A full group takes no one else.
            val member = d.joinGroup(leader.code)
            val full = assertThrows<ContactDiscoveryException.Group> { d.joinGroup(leader.code) }
            assertEquals(GroupFailure.GROUP_FULL, full.failure)
            member.close()
            leader.end()
        }
    }

    @Test
    fun `a size outside 2 to 16 is invalid input, sent nowhere`(): Unit = runBlocking {
        // A server that does not exist: a request would fail as a network error instead.
        ContactDiscovery("http://127.0.0.1:9", config).use { d ->
            for (size in listOf(-1, 0, 1, 17, 256)) {
                val e = runCatching { d.createGroup(size) }.exceptionOrNull()
                assertTrue(e is ContactDiscoveryException.InvalidInput, "$size: $e")
            }
        }
        ContactDiscovery(server.url, config).use { d ->
            val s = d.createGroup(16)
            assertEquals(16, s.size)
            s.end()
            // A deadline out of range is refused before the run (the session can still run).
            val t = d.createGroup(2)
            for (deadline in listOf(Duration.ofSeconds(-1), Duration.ZERO, Duration.ofDays(2), Duration.ofSeconds(Long.MAX_VALUE))) {
                val e = runCatching { t.run(listOf("a@example.com"), GroupRunOptions(deadline = deadline)) }.exceptionOrNull()
                assertTrue(e is ContactDiscoveryException.InvalidInput, "$deadline: $e")
            }
            t.close()
        }
    }

    @Test
    fun `cancelling a waiting leader ends the group for everyone`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            val leader = d.createGroup(3)
            val waiting = launch { leader.run(listOf("a@example.com")) }
            delay(500)
            waiting.cancel()
            waiting.join()
            // The group was ended on the way out: a late member cannot join it.
            delay(1000)
            withTimeout(10_000) {
                while (true) {
                    val e = try {
                        d.joinGroup(leader.code).close()
                        null
                    } catch (e: ContactDiscoveryException.Group) {
                        e
                    }
                    if (e != null) {
                        assertTrue(e.failure in setOf(GroupFailure.GROUP_ENDED, GroupFailure.UNKNOWN_GROUP), "${e.failure}")
                        break
                    }
                    delay(100)
                }
            }
        }
    }

    @Test
    fun `cancel() stops a run, a member's run then fails with a typed group error`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            val leader = d.createGroup(3)
            val member = d.joinGroup(leader.code)
            // The member waits for the leader's first message; the leader waits for the third party.
            val memberRun = async { runCatching { member.run(listOf("a@example.com")) } }
            val leaderRun = async { runCatching { leader.run(listOf("a@example.com")) } }
            delay(500)
            leader.cancel()
            assertTrue(leaderRun.await().exceptionOrNull() is CancellationException, "${leaderRun.await()}")
            val e = memberRun.await().exceptionOrNull()
            assertTrue(e is ContactDiscoveryException.Group && e.failure == GroupFailure.GROUP_ENDED, "$e")
        }
    }

    @Test
    fun `a group that does not fill times out with a typed error`(): Unit = runBlocking {
        ContactDiscovery(server.url, config).use { d ->
            val leader = d.createGroup(2)
            val e = assertThrows<ContactDiscoveryException.Group> {
                leader.run(listOf("a@example.com"), GroupRunOptions(deadline = Duration.ofMillis(700)))
            }
            assertEquals(GroupFailure.TIMED_OUT, e.failure)
            assertTrue(e.isRetryable)
        }
    }

    @Test
    fun `Java callers get futures`() {
        ContactDiscovery(server.url, config).use { d ->
            val leader = d.createGroupAsync(2).get(30, TimeUnit.SECONDS)
            val led = leader.runAsync(listOf("x@example.com", "y@example.com"))
            val member = d.joinGroupAsync(leader.code).get(30, TimeUnit.SECONDS)
            val r = member.runAsync(listOf("y@example.com", "z@example.com")).get(60, TimeUnit.SECONDS)
            assertEquals(listOf("y@example.com"), r.common)
            assertEquals(listOf("y@example.com"), led.get(60, TimeUnit.SECONDS).common)
            val failed = runCatching { d.createGroupAsync(1).get(30, TimeUnit.SECONDS) }.exceptionOrNull()
            assertTrue(failed?.cause is ContactDiscoveryException.InvalidInput, "$failed")
        }
    }
}
