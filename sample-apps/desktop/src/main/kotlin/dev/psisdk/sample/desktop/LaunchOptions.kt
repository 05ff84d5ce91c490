package dev.psisdk.sample.desktop

import dev.psisdk.Protocol
import dev.psisdk.ProtocolChoice
import java.nio.file.Path
import java.util.Locale

/**
 * The command line: values that prefill the window, and [autoMatch] to press Match once the
 * file is loaded (for demos and screenshots).
 *
 * @property server the server URL, if given.
 * @property token the bearer token, if given (else from the `PSI_TOKEN` environment variable).
 * @property file the address book to open at start, if given.
 * @property region the default region for phone numbers, if given.
 * @property protocol the protocol (or the automatic choice), if given.
 * @property autoMatch whether to match at start (needs [file]).
 */
data class LaunchOptions(
    val server: String? = null,
    val token: String? = null,
    val file: Path? = null,
    val region: String? = null,
    val protocol: ProtocolChoice? = null,
    val autoMatch: Boolean = false,
) {
    /** Keeps the token out of logs. */
    override fun toString() =
        "LaunchOptions(server=$server, token=${if (token == null) "none" else "set"}, file=$file, " +
            "region=$region, protocol=$protocol, autoMatch=$autoMatch)"

    /** The first state of the window: the defaults, overridden by these options. */
    fun initialState(defaults: MatchUiState = MatchUiState()): MatchUiState = defaults.copy(
        serverUrl = server ?: defaults.serverUrl,
        token = token ?: defaults.token,
        region = region ?: defaults.region,
        protocol = protocol ?: defaults.protocol,
    )

    companion object {
        /** The command line's help text. */
        const val USAGE = """Usage: psi-desktop-sample [--server URL] [--token TOKEN] [--file PATH]
                          [--region CC] [--protocol dh|ot|auto] [--auto-match]
  --server URL       the psi server (default http://127.0.0.1:8080)
  --token TOKEN      bearer token (default: the PSI_TOKEN environment variable)
  --file PATH        address book to open: vCard (.vcf) or CSV
  --region CC        region for phone numbers without a country code (default US)
  --protocol dh|ot|auto  DH-PSI (default), OT-PSI, or the SDK's automatic choice
  --auto-match       press Match once the file is loaded"""

        /**
         * Parses [args] (`--name value` or `--name=value`); [environment] supplies
         * `PSI_TOKEN` when `--token` is absent.
         *
         * @throws IllegalArgumentException with a message for the user on an unknown or
         *   incomplete option.
         */
        fun parse(args: Array<String>, environment: Map<String, String> = System.getenv()): LaunchOptions {
            var options = LaunchOptions(token = environment["PSI_TOKEN"]?.takeIf { it.isNotBlank() })
            var i = 0
            while (i < args.size) {
                val arg = args[i]
                val name = arg.substringBefore('=')
                val inline = if ('=' in arg) arg.substringAfter('=') else null
                fun value(): String = inline ?: args.getOrNull(++i)
                    ?: throw IllegalArgumentException("$name needs a value")
                options = when (name) {
                    "--server" -> options.copy(server = value())
                    "--token" -> options.copy(token = value())
                    "--file" -> options.copy(file = Path.of(value()))
                    "--region" -> options.copy(region = value().uppercase(Locale.ROOT))
                    "--protocol" -> options.copy(
                        protocol = when (value().lowercase(Locale.ROOT)) {
                            "dh", "dh-psi" -> Protocol.DH
                            "ot", "ot-psi" -> Protocol.OT
                            "cm20", "cm20-psi" -> Protocol.CM20
                            "gbf", "gbf-psi" -> Protocol.GBF
                            "auto" -> ProtocolChoice.AUTO
                            else -> throw IllegalArgumentException("--protocol is dh, ot, cm20, gbf or auto")
                        },
                    )
                    "--auto-match" -> options.copy(autoMatch = true)
                    else -> throw IllegalArgumentException("unknown option $arg")
                }
                i++
            }
            require(!options.autoMatch || options.file != null) { "--auto-match needs --file" }
            return options
        }
    }
}
