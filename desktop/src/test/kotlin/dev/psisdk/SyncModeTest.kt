package dev.psisdk

import dev.psisdk.TestData.CONTACTS
import dev.psisdk.TestData.EXPECTED
import dev.psisdk.testing.PsiServer
import java.io.File
import java.nio.file.Files
import java.util.concurrent.TimeUnit
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.Timeout

/**
 * DH-PSI's sync mode (docs/protocol/sync.md) from Kotlin, through the real native library,
 * against a real `psi serve --enable-sync` on loopback: once the client knows the server
 * serves it, a run keeps the synced set (short tags) in the cache directory instead of the
 * encoded registry and finds the same matches and labels; an app restarted on that directory
 * downloads nothing; and a cache file that is damaged, cut short or of the other kind (an
 * encoded registry, as an older SDK kept) is discarded and synced again, never misread.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SyncModeTest {
    private val server = PsiServer(TestData.REGISTRY, "--enable-sync")
    private val plain = PsiServer(TestData.REGISTRY)

    @AfterAll
    fun stop() {
        server.close()
        plain.close()
    }

    private fun assertExpected(result: MatchResult<String>) {
        assertEquals(Protocol.DH, result.protocol)
        assertEquals(EXPECTED, result.matches.associate { it.index to it.label })
        for (m in result.matches) assertEquals(CONTACTS[m.index], m.contact)
    }

    private fun withDir(block: suspend (File) -> Unit) = runBlocking {
        val dir = Files.createTempDirectory("psi-sync").toFile()
        try {
            block(dir)
        } finally {
            dir.deleteRecursively()
        }
    }

    /** The cache files of a directory (the synced set and the fill key, or an encoded registry). */
    private fun setFiles(dir: File): List<File> = dir.listFiles()!!.filter { it.name.endsWith(".set") }

    /** A first run in sync mode in [dir]; returns it and its synced-set file. */
    private suspend fun firstSync(dir: File): Pair<MatchResult<String>, File> {
        val config = DiscoveryConfig(cacheDirectory = dir.path)
        val first = ContactDiscovery(server.url, config).use { d ->
            // The client learns from the server's health that it serves sync mode.
            d.health()
            d.match(CONTACTS, Protocol.DH)
        }
        assertExpected(first)
        // No encoded registry came down: the snapshot did, and only the synced set is cached.
        assertEquals(0, first.stats.setBytesDownloaded)
        assertFalse(first.stats.setFromCache)
        val sync = first.stats.sync ?: error("not a sync-mode run")
        assertTrue(sync.snapshotBytes > 0)
        assertEquals(0, sync.deltaBytes)
        assertFalse(sync.fromCache)
        assertTrue(sync.candidates >= EXPECTED.size, "${sync.candidates}")
        assertEquals(sync.haveVersion, sync.servedVersion)
        // Beside it, the client's 32-byte fill key (ADR 0056), the smaller file.
        val files = setFiles(dir).sortedBy { it.length() }
        assertEquals(2, files.size, "$files")
        return first to files.last()
    }

    @Test
    fun `a synced client finds the same matches and after a restart downloads nothing`() = withDir { dir ->
        val (first, synced) = firstSync(dir)
        val plainRun = ContactDiscovery(server.url, DiscoveryConfig()).use { it.match(CONTACTS, Protocol.DH) }
        assertExpected(plainRun)
        assertEquals(null, plainRun.stats.sync, "a client without stored health asks plainly")
        // The short tags are a fraction of the encoded registry.
        assertTrue(synced.length() * 2 < plainRun.stats.setBytesDownloaded, "${synced.length()} vs ${plainRun.stats.setBytesDownloaded}")
        val bytes = synced.readBytes()
        // An app restarted on the same directory: its stored health names sync mode, its
        // synced set is current, so the run downloads no set at all.
        val second = ContactDiscovery(server.url, DiscoveryConfig(cacheDirectory = dir.path)).use { it.match(CONTACTS, Protocol.DH) }
        assertExpected(second)
        assertEquals(0, second.stats.setBytesDownloaded)
        val again = second.stats.sync ?: error("not a sync-mode run")
        assertTrue(again.fromCache)
        assertEquals(0, again.bytesDownloaded)
        assertEquals(first.stats.sync!!.haveVersion, again.haveVersion)
        assertTrue(bytes.contentEquals(synced.readBytes()), "the synced set is unchanged")
    }

    @Test
    fun `a damaged, cut or wrong-kind cache file is discarded and synced again`() = withDir { dir ->
        // An encoded registry, as an older SDK cached it (from a server without sync mode).
        val old = Files.createTempDirectory("psi-old").toFile()
        val encoded = try {
            ContactDiscovery(plain.url, DiscoveryConfig(cacheDirectory = old.path)).use { it.match(CONTACTS, Protocol.DH) }
            setFiles(old).single().readBytes()
        } finally {
            old.deleteRecursively()
        }
        val (first, synced) = firstSync(dir)
        val good = synced.readBytes()
        val damaged = good.copyOf().also { it[it.size / 2] = (it[it.size / 2].toInt() xor 0x10).toByte() }
        val cut = good.copyOf(good.size / 2)
        for ((what, bytes) in listOf("a flipped bit" to damaged, "cut short" to cut, "an encoded registry" to encoded, "empty" to ByteArray(0))) {
            synced.writeBytes(bytes)
            val again = ContactDiscovery(server.url, DiscoveryConfig(cacheDirectory = dir.path)).use { it.match(CONTACTS, Protocol.DH) }
            assertExpected(again)
            // Synced again from the server (the snapshot came down once more) and cached.
            val sync = again.stats.sync ?: error("$what: not a sync-mode run")
            assertFalse(sync.fromCache, what)
            assertEquals(first.stats.sync!!.snapshotBytes, sync.snapshotBytes, what)
            assertTrue(good.contentEquals(synced.readBytes()), "$what: the bad file was replaced by the synced set")
        }
    }
}
