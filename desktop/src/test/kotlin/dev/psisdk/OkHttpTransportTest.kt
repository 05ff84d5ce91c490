package dev.psisdk

import javax.net.SocketFactory
import okhttp3.OkHttpClient
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertSame
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** The OkHttp client settings the SDK relies on. */
class OkHttpTransportTest {
    @Test
    fun `the SDK's sockets have Nagle's algorithm off`() {
        NoDelaySocketFactory.createSocket().use { assertTrue(it.tcpNoDelay) }
        assertSame(NoDelaySocketFactory, OkHttpTransport.defaultClient().socketFactory)
    }

    @Test
    fun `an app's client keeps its interceptors and its own socket factory`() {
        val app = OkHttpClient.Builder().addInterceptor { it.proceed(it.request()) }.build()
        val adopted = OkHttpTransport.adopt(app)
        assertSame(NoDelaySocketFactory, adopted.socketFactory)
        assertSame(app.interceptors.single(), adopted.interceptors.single())
        assertSame(app.connectionPool, adopted.connectionPool)
        val custom = object : SocketFactory() {
            override fun createSocket() = java.net.Socket()
            override fun createSocket(h: String, p: Int) = throw UnsupportedOperationException()
            override fun createSocket(h: String, p: Int, l: java.net.InetAddress, lp: Int) = throw UnsupportedOperationException()
            override fun createSocket(h: java.net.InetAddress, p: Int) = throw UnsupportedOperationException()
            override fun createSocket(a: java.net.InetAddress, p: Int, l: java.net.InetAddress, lp: Int) =
                throw UnsupportedOperationException()
        }
        val own = OkHttpClient.Builder().socketFactory(custom).build()
        assertSame(custom, OkHttpTransport.adopt(own).socketFactory)
    }

    @Test
    fun `no client of the SDK follows redirects, whatever the app's does`() {
        val app = OkHttpClient.Builder().followRedirects(true).followSslRedirects(true).build()
        for (client in listOf(OkHttpTransport.adopt(app), OkHttpTransport.defaultClient())) {
            assertFalse(client.followRedirects)
            assertFalse(client.followSslRedirects)
        }
        // The app's own client is left as it was.
        assertTrue(app.followRedirects)
    }

    @Test
    fun `the transport builds its OkHttp client on the first request, not when it is made`(): Unit =
        kotlinx.coroutines.runBlocking {
            mockwebserver3.MockWebServer().use { server ->
                server.start()
                server.enqueue(mockwebserver3.MockResponse.Builder().code(200).body("ok").build())
                val client = lazy { OkHttpTransport.defaultClient() }
                val transport = OkHttpTransport(client)
                assertFalse(client.isInitialized(), "a ContactDiscovery's construction builds no client")
                val response = transport.send(
                    dev.psisdk.ffi.HttpRequest(
                        dev.psisdk.ffi.HttpMethod.GET, server.url("/v1/health").toString(),
                        emptyList(), ByteArray(0), 5_000u, 1_000u,
                    ),
                )
                assertTrue(client.isInitialized())
                assertEquals(200, response.status.toInt())
                assertEquals("ok", String(response.body))
            }
        }

    @Test
    fun `the error body cap is the native library's`() {
        assertEquals(dev.psisdk.ffi.maxErrorBodyBytes().toLong(), OkHttpTransport.maxErrorBodyBytes)
        assertEquals(16L * 1024, OkHttpTransport.maxErrorBodyBytes)
    }
}
