package dev.psisdk

import dev.psisdk.ffi.HttpHeader
import dev.psisdk.ffi.HttpMethod
import dev.psisdk.ffi.HttpRequest
import dev.psisdk.ffi.HttpResponse
import dev.psisdk.ffi.HttpTransport
import dev.psisdk.ffi.TransportException
import dev.psisdk.ffi.maxErrorBodyBytes as nativeMaxErrorBodyBytes
import java.io.IOException
import java.io.InterruptedIOException
import java.net.InetAddress
import java.net.Socket
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit
import javax.net.SocketFactory
import javax.net.ssl.SSLException
import kotlin.coroutines.resume
import kotlin.coroutines.resumeWithException
import kotlinx.coroutines.suspendCancellableCoroutine
import okhttp3.Call
import okhttp3.Callback
import okhttp3.Dispatcher
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.RequestBody.Companion.toRequestBody
import okhttp3.Response
import okio.Buffer

/**
 * The SDK's transport: moves the requests the native client makes with OkHttp. It maps
 * types only; each request carries its own timeout (applied as OkHttp's call timeout) and
 * response size cap. Cancelling the coroutine (the native run was cancelled) cancels the
 * OkHttp call. Calls are enqueued, so no thread waits on the network.
 *
 * Two rules of every transport (psi-ffi's `HttpRequest`): no redirect is followed (the 3xx
 * goes back as it is and the native client refuses it: a redirect could send the token
 * elsewhere), and at most [maxErrorBodyBytes] of an error body (status 400 and above) are
 * read: a longer one comes back as the status with an empty body.
 */
internal class OkHttpTransport(private val lazyClient: Lazy<OkHttpClient>) : HttpTransport {
    /** A transport over [client], built already. */
    constructor(client: OkHttpClient) : this(lazyOf(client))

    /**
     * Built on the first request, on the thread that sends it (never the thread that
     * created the [ContactDiscovery]: building an OkHttp client initialises its TLS
     * platform, about 100-200 ms the first time in a process).
     */
    private val client: OkHttpClient get() = lazyClient.value

    override suspend fun send(request: HttpRequest): HttpResponse {
        val call = client.newCall(request.toOkHttp())
        call.timeout().timeout(request.timeoutMs.toLong(), TimeUnit.MILLISECONDS)
        val limit = request.maxResponseBytes.toLong()
        return suspendCancellableCoroutine { cont ->
            cont.invokeOnCancellation { call.cancel() }
            call.enqueue(object : Callback {
                override fun onFailure(call: Call, e: IOException) {
                    cont.resumeWithException(e.toTransport())
                }

                override fun onResponse(call: Call, response: Response) {
                    val result = runCatching { response.use { it.read(limit) } }
                    result.fold(
                        onSuccess = { cont.resume(it) },
                        onFailure = {
                            cont.resumeWithException(
                                if (it is IOException) it.toTransport() else it,
                            )
                        },
                    )
                }
            })
        }
    }

    private fun HttpRequest.toOkHttp(): Request {
        val builder = Request.Builder().url(url)
        for (h in headers) builder.addHeader(h.name, h.value)
        when (method) {
            HttpMethod.GET -> builder.get()
            HttpMethod.DELETE -> builder.delete()
            HttpMethod.POST -> builder.post(body.toRequestBody(null))
        }
        return builder.build()
    }

    /**
     * Reads the body, failing as soon as it exceeds [limit] bytes; an error body longer
     * than [maxErrorBodyBytes] is dropped (empty), the status kept.
     */
    private fun Response.read(limit: Long): HttpResponse {
        val declared = body.contentLength()
        val source = body.source()
        if (code >= 400) {
            // At most the cap plus one byte, so a longer body is known without reading it.
            val cap = maxErrorBodyBytes
            val buffer = Buffer()
            while (buffer.size <= cap && source.read(buffer, cap + 1 - buffer.size) != -1L) Unit
            val bytes = if (buffer.size > cap) ByteArray(0) else buffer.readByteArray()
            return HttpResponse(status = code.toUShort(), headers = headerList(), body = bytes)
        }
        if (declared > limit) throw TransportException.TooLarge(limit.toULong())
        val bytes = if (declared >= 0) {
            // The usual case: one array of the announced size (a shorter body is an error).
            source.readByteArray(declared)
        } else {
            val buffer = Buffer()
            while (!source.exhausted()) {
                source.read(buffer, 64 * 1024)
                if (buffer.size > limit) throw TransportException.TooLarge(limit.toULong())
            }
            buffer.readByteArray()
        }
        return HttpResponse(status = code.toUShort(), headers = headerList(), body = bytes)
    }

    private fun Response.headerList() = headers.map { (name, value) -> HttpHeader(name.lowercase(), value) }

    private fun IOException.toTransport(): TransportException {
        val what = this::class.java.simpleName
        // OkHttp's call timeout and socket timeouts are InterruptedIOExceptions; a
        // cancelled call is a plain IOException ("Canceled").
        // A failed handshake (an untrusted or wrong certificate, a peer that does not
        // speak TLS) is an SSLException: its own, non-retryable reason.
        return when (this) {
            is InterruptedIOException ->
                TransportException.Timeout("no response within the request timeout ($what)")
            is SSLException -> TransportException.Tls("$what: ${message ?: "handshake failed"}")
            else -> TransportException.Failed("$what: ${message ?: "I/O error"}")
        }
    }

    companion object {
        /** The most of an error body read (psi-ffi's `max_error_body_bytes`, 16 KiB). */
        val maxErrorBodyBytes: Long by lazy { NativeLibrary.call { nativeMaxErrorBodyBytes() }.toLongClamped() }

        /**
         * The app's [client] with redirects off (the SDK's rule, whatever the app's client
         * does), and with Nagle's algorithm turned off if it uses the default socket factory
         * (a client with its own socket factory keeps it). Shares the app's connection pool,
         * dispatcher and interceptors.
         */
        fun adopt(client: OkHttpClient): OkHttpClient {
            val builder = client.newBuilder().followRedirects(false).followSslRedirects(false)
            if (client.socketFactory === SocketFactory.getDefault()) builder.socketFactory(NoDelaySocketFactory)
            return builder.build()
        }

        /** The client every [ContactDiscovery] without an app client shares (one pool). */
        val shared: Lazy<OkHttpClient> = lazy { defaultClient() }

        /** [shared], built. */
        val sharedClient: OkHttpClient get() = shared.value

        /**
         * The client used when the app gives none: OkHttp's defaults, except that reads and
         * writes have no idle timeout of their own (a large OT-PSI round can keep the server
         * busy longer than OkHttp's 10 s before the first byte; each call's timeout bounds
         * it), up to 64 calls at once to one server (OkHttp's default of 5 would queue
         * parallel runs, and a queued call's time counts against its timeout), and daemon
         * dispatcher threads, so they do not keep a JVM alive for OkHttp's idle minute.
         */
        fun defaultClient(): OkHttpClient = OkHttpClient.Builder()
            .dispatcher(
                Dispatcher(
                    Executors.newCachedThreadPool { task ->
                        Thread(task, "psi-sdk OkHttp").apply { isDaemon = true }
                    },
                ).apply {
                    maxRequests = 256
                    maxRequestsPerHost = 64
                },
            )
            .socketFactory(NoDelaySocketFactory)
            .followRedirects(false)
            .followSslRedirects(false)
            .readTimeout(0, TimeUnit.MILLISECONDS)
            .writeTimeout(0, TimeUnit.MILLISECONDS)
            .build()
    }
}

/**
 * Sockets with Nagle's algorithm off. OkHttp writes a request's headers and body separately;
 * with Nagle on, the body's last segment waits for the server's delayed ACK (40 ms on Linux)
 * on every POST, which doubled the time of a DH-PSI run over loopback.
 */
internal object NoDelaySocketFactory : SocketFactory() {
    private val default = getDefault()

    private fun Socket.noDelay() = apply { tcpNoDelay = true }

    override fun createSocket(): Socket = default.createSocket().noDelay()

    override fun createSocket(host: String, port: Int): Socket = default.createSocket(host, port).noDelay()

    override fun createSocket(host: String, port: Int, localHost: InetAddress, localPort: Int): Socket =
        default.createSocket(host, port, localHost, localPort).noDelay()

    override fun createSocket(host: InetAddress, port: Int): Socket = default.createSocket(host, port).noDelay()

    override fun createSocket(address: InetAddress, port: Int, localAddress: InetAddress, localPort: Int): Socket =
        default.createSocket(address, port, localAddress, localPort).noDelay()
}
