package dev.psisdk.testing

import java.io.File
import java.nio.file.Files
import java.util.concurrent.CompletableFuture
import java.util.concurrent.TimeUnit

/**
 * A real `psi serve` on loopback for tests, with [registry] (`identifier,label` lines)
 * imported into a fresh database. The `psi` command comes from the `psi.bin` system
 * property (ci/kotlin.sh passes it). [serveArgs] are passed to `psi serve` (such as
 * `--token`). Shared with the sample apps through this module's test jar.
 */
class PsiServer(registry: List<String>, vararg serveArgs: String) : AutoCloseable {
    private val dir: File = Files.createTempDirectory("psi-sdk-test").toFile()
    private val process: Process

    /** The server's base URL, `http://127.0.0.1:PORT`. */
    val url: String

    init {
        val csv = File(dir, "registry.csv")
        csv.writeText(registry.joinToString("\n", postfix = "\n"))
        run(psi, "import", "--db", db(), csv.path)
        process = ProcessBuilder(listOf(psi, "serve", "--db", db(), "--listen", "127.0.0.1:0") + serveArgs)
            .redirectError(File(dir, "server.log"))
            .start()
        url = try {
            readAddress()
        } catch (e: Exception) {
            close()
            throw e
        }
    }

    private fun db() = File(dir, "registry.sqlite").path

    /** `psi serve` prints `psi serve: listening on http://...` once it accepts connections. */
    private fun readAddress(): String {
        val reader = process.inputStream.bufferedReader()
        val line = CompletableFuture.supplyAsync { reader.readLine() }.get(30, TimeUnit.SECONDS)
            ?: error("psi serve exited: ${File(dir, "server.log").readText()}")
        return Regex("http://\\S+").find(line)?.value ?: error("no address in: $line")
    }

    override fun close() {
        process.destroy()
        if (!process.waitFor(10, TimeUnit.SECONDS)) process.destroyForcibly().waitFor()
        dir.deleteRecursively()
    }

    companion object {
        /** The `psi` command. */
        val psi: String = System.getProperty("psi.bin")
            ?: error("set -Dpsi.bin to the psi command (ci/kotlin.sh does)")

        private fun run(vararg cmd: String) {
            val p = ProcessBuilder(*cmd).redirectErrorStream(true).start()
            val out = p.inputStream.bufferedReader().readText()
            check(p.waitFor(120, TimeUnit.SECONDS) && p.exitValue() == 0) { "${cmd.toList()} failed: $out" }
        }
    }
}
