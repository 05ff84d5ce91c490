package dev.psisdk

import java.io.File
import java.nio.file.Files
import java.util.concurrent.TimeUnit

/**
 * A real `psi serve` on loopback with a generated registry, for the tests. The `psi`
 * binary comes from the `psi.bin` system property (ci/kotlin.sh sets it).
 */
class PsiServer(vararg serveArgs: String) : AutoCloseable {
    private val dir: File = Files.createTempDirectory("psi-sdk-test").toFile()
    private val process: Process
    val url: String

    init {
        val csv = File(dir, "registry.csv")
        csv.writeText(REGISTRY.joinToString("\n") { (id, label) -> "$id,$label" } + "\n")
        run(psi, "import", "--db", db(), csv.path)
        process = ProcessBuilder(listOf(psi, "serve", "--db", db(), "--listen", "127.0.0.1:0") + serveArgs)
            .redirectError(File(dir, "server.log"))
            .start()
        url = readAddress()
    }

    private fun db() = File(dir, "registry.sqlite").path

    private fun readAddress(): String {
        val reader = process.inputStream.bufferedReader()
        val line = java.util.concurrent.CompletableFuture.supplyAsync { reader.readLine() }
            .get(30, TimeUnit.SECONDS) ?: error("psi serve exited: ${File(dir, "server.log").readText()}")
        return Regex("http://\\S+").find(line)?.value ?: error("no address in: $line")
    }

    override fun close() {
        process.destroy()
        if (!process.waitFor(10, TimeUnit.SECONDS)) process.destroyForcibly().waitFor()
        dir.deleteRecursively()
    }

    companion object {
        val psi: String = System.getProperty("psi.bin")
            ?: error("set -Dpsi.bin to the psi command (ci/kotlin.sh does)")

        /** Registered: 2,000 emails with labels, and three phone numbers. */
        val REGISTRY: List<Pair<String, String>> =
            (1..2000).map { "user$it@example.com" to "User $it" } +
                listOf(
                    "+14155550123" to "Phone A",
                    "+14155550124" to "Phone B",
                    "+442079460958" to "Phone UK",
                )

        /**
         * An address book of 120 rows: 40 registered (some written differently from the
         * registry), 75 not registered, 5 invalid.
         */
        val CONTACTS: List<String> = buildList {
            for (i in 1..37) add(if (i % 5 == 0) "  USER$i@Example.COM " else "user$i@example.com")
            add("(415) 555-0123")
            add("+1 415 555 0124")
            add("+44 20 7946 0958")
            for (i in 1..75) add("stranger$i@example.org")
            add("")
            add("not a contact")
            add("broken@")
            add("+1 (415) abc")
            add("12")
        }

        /** The indices of [CONTACTS] in the registry, with their labels. */
        val EXPECTED: Map<Int, String> = buildMap {
            for (i in 1..37) put(i - 1, "User $i")
            put(37, "Phone A")
            put(38, "Phone B")
            put(39, "Phone UK")
        }

        /** The indices of [CONTACTS] that are not valid identifiers. */
        val INVALID: Set<Int> = (115..119).toSet()

        fun run(vararg cmd: String) {
            val p = ProcessBuilder(*cmd).redirectErrorStream(true).start()
            val out = p.inputStream.bufferedReader().readText()
            check(p.waitFor(120, TimeUnit.SECONDS) && p.exitValue() == 0) { "${cmd.toList()} failed: $out" }
        }
    }
}
