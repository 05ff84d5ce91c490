package dev.psisdk.sample.desktop

import java.awt.GraphicsEnvironment
import javax.swing.SwingUtilities
import javax.swing.UIManager
import kotlin.system.exitProcess

/**
 * Starts the desktop sample: `[--server URL] [--token T] [--file PATH] [--region CC]
 * [--protocol dh|ot] [--auto-match]` (see [LaunchOptions.USAGE]).
 */
fun main(args: Array<String>) {
    if ("--help" in args || "-h" in args) {
        println(LaunchOptions.USAGE)
        return
    }
    val options = try {
        LaunchOptions.parse(args)
    } catch (e: IllegalArgumentException) {
        System.err.println("psi-desktop-sample: ${e.message}\n${LaunchOptions.USAGE}")
        exitProcess(2)
    }
    if (GraphicsEnvironment.isHeadless()) {
        System.err.println("psi-desktop-sample: no display (set DISPLAY, or run it under Xvfb)")
        exitProcess(1)
    }

    val viewModel = MatchViewModel(options.initialState())
    SwingUtilities.invokeLater {
        useNimbusLookAndFeel()
        MainWindow(viewModel).isVisible = true
    }
    options.file?.let { file ->
        val loading = viewModel.loadFile(file)
        if (options.autoMatch) {
            // For scripts (screenshot.sh): the outcome's status line on stdout once the run
            // ends. It holds counts and the server URL, never contacts.
            val report = { _: Throwable? -> println("psi-desktop-sample: ${viewModel.state.value.status.message}") }
            loading.invokeOnCompletion {
                // match() does nothing if the file could not be loaded: the window shows why.
                viewModel.match()?.invokeOnCompletion(report) ?: report(null)
            }
        }
    }
}

/** Nimbus (part of every JDK) if present, else Swing's default look and feel. */
private fun useNimbusLookAndFeel() {
    val nimbus = UIManager.getInstalledLookAndFeels().firstOrNull { it.name == "Nimbus" } ?: return
    runCatching { UIManager.setLookAndFeel(nimbus.className) }
}
