package dev.psisdk.sample.desktop

import dev.psisdk.Protocol
import dev.psisdk.ProtocolChoice
import java.nio.file.Path
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** The command line that prefills the window. */
class LaunchOptionsTest {
    @Test
    fun `options prefill the first state`() {
        val options = LaunchOptions.parse(
            arrayOf("--server", "http://127.0.0.1:4000", "--token=t0k", "--file", "samples/contacts.vcf", "--protocol", "ot", "--region", "gb", "--auto-match"),
            environment = emptyMap(),
        )
        assertEquals(LaunchOptions("http://127.0.0.1:4000", "t0k", Path.of("samples/contacts.vcf"), "GB", Protocol.OT, true), options)
        val state = options.initialState()
        assertEquals("http://127.0.0.1:4000", state.serverUrl)
        assertEquals("t0k", state.token)
        assertEquals(Protocol.OT, state.protocol)
        assertEquals("GB", state.region)
        assertFalse("t0k" in options.toString())
    }

    @Test
    fun `the token may come from PSI_TOKEN, defaults stay otherwise`() {
        val state = LaunchOptions.parse(emptyArray(), mapOf("PSI_TOKEN" to "from-env")).initialState()
        assertEquals("from-env", state.token)
        assertEquals(MatchUiState().serverUrl, state.serverUrl)
        assertEquals(Protocol.DH, state.protocol)
    }

    @Test
    fun `bad command lines are refused with a message`() {
        assertEquals("unknown option --colour", assertThrows<IllegalArgumentException> { LaunchOptions.parse(arrayOf("--colour"), emptyMap()) }.message)
        assertEquals("--server needs a value", assertThrows<IllegalArgumentException> { LaunchOptions.parse(arrayOf("--server"), emptyMap()) }.message)
        assertEquals("--auto-match needs --file", assertThrows<IllegalArgumentException> { LaunchOptions.parse(arrayOf("--auto-match"), emptyMap()) }.message)
        assertThrows<IllegalArgumentException> { LaunchOptions.parse(arrayOf("--protocol", "rsa"), emptyMap()) }
        assertEquals(ProtocolChoice.AUTO, LaunchOptions.parse(arrayOf("--protocol", "auto"), emptyMap()).initialState().protocol)
    }
}
