package dev.psisdk

import dev.psisdk.ffi.DiscoveryClient
import dev.psisdk.ffi.GroupException
import dev.psisdk.ffi.HttpTransport
import dev.psisdk.ffi.InternalException
import dev.psisdk.ffi.ProgressEvent
import dev.psisdk.ffi.ProgressListener
import dev.psisdk.ffi.PsiException
import java.util.concurrent.CompletableFuture
import java.util.function.Consumer
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.cancel
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.launch
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.channelFlow
import kotlinx.coroutines.future.future
import okhttp3.OkHttpClient
import kotlin.concurrent.thread
import dev.psisdk.ffi.preload as nativePreload
import dev.psisdk.ffi.hasNativeHttpTransport as nativeHasNativeHttpTransport
import dev.psisdk.ffi.nativeHttpTransport as nativeNativeHttpTransport
import com.sun.jna.Callback
import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native
import dev.psisdk.ffi.uniffiCallbackInterfaceHttpTransport
import dev.psisdk.ffi.uniffiCallbackInterfaceProgressListener
import dev.psisdk.ffi.uniffiForeignFutureDroppedCallbackImpl
import dev.psisdk.ffi.uniffiRustFutureContinuationCallbackImpl

actual class ContactDiscovery private constructor(
    private val serverUrl: String,
    actual val config: DiscoveryConfig,
    transport: HttpTransport,
) : AutoCloseable {
    /**
     * A client that sends its requests with a default [OkHttpClient].
     *
     * @throws ContactDiscoveryException.InvalidInput if [serverUrl] or [config] cannot be
     *   used (not `http(s)://`, `http://` to a host that is not loopback without
     *   [DiscoveryConfig.allowInsecureHttp], a setting out of range).
     * @throws ContactDiscoveryException.Internal if the native library cannot be loaded.
     */
    @Throws(ContactDiscoveryException::class)
    actual constructor(serverUrl: String, config: DiscoveryConfig) :
        this(serverUrl, config, OkHttpTransport(OkHttpTransport.shared))

    /**
     * A client that sends its requests with the app's own [httpClient] (its interceptors,
     * certificate pinning, proxy and connection pool). The SDK sets each call's timeout
     * from [DiscoveryConfig.timeoutMillis]; the client's read timeout must outlast the
     * server's longest computation (OkHttp's default is 10 s). Nagle's algorithm is turned
     * off on its sockets unless it has its own socket factory.
     */
    @Throws(ContactDiscoveryException::class)
    constructor(serverUrl: String, config: DiscoveryConfig, httpClient: OkHttpClient) :
        this(serverUrl, config, OkHttpTransport(lazy { OkHttpTransport.adopt(httpClient) }))

    private val native: DiscoveryClient = NativeLibrary.call {
        DiscoveryClient(serverUrl, config.toFfi(), transport)
    }

    /** Runs the futures of the Java API, made on first use; [close] cancels them. */
    private val lazyFutures = lazy { CoroutineScope(SupervisorJob() + Dispatchers.Default) }
    private val futures by lazyFutures

    @Volatile
    private var closed = false

    private fun checkOpen() = check(!closed) { "this ContactDiscovery is closed" }

    actual suspend fun match(
        contacts: List<String>,
        protocol: ProtocolChoice,
        linkHints: LinkHints,
    ): MatchResult<String> = match(contacts, protocol, {}, linkHints) { it }

    actual suspend fun <C> match(
        contacts: List<C>,
        protocol: ProtocolChoice,
        onProgress: (Progress) -> Unit,
        linkHints: LinkHints,
        identifier: (C) -> String,
    ): MatchResult<C> {
        checkOpen()
        val identifiers = contacts.map(identifier)
        // The native run calls the listener on its own thread; the events go through a
        // channel to a coroutine of the caller's, so [onProgress] runs in the calling
        // coroutine's context (its dispatcher: the main thread for a call from the UI),
        // in order, and every event is delivered before the call returns.
        val events = Channel<Progress>(Channel.UNLIMITED)
        val listener = object : ProgressListener {
            override fun onProgress(event: ProgressEvent) {
                events.trySend(event.toPublic())
            }
        }
        return coroutineScope {
            val delivery = launch {
                for (event in events) {
                    // The app's callback must not break the run.
                    runCatching { onProgress(event) }
                }
            }
            try {
                val report = NativeLibrary.call {
                    native.matchContacts(identifiers, protocol.toFfi(), linkHints.toFfi(), listener)
                }
                events.close()
                delivery.join()
                report.toResult(contacts)
            } finally {
                events.close()
            }
        }
    }

    actual fun <C> matchFlow(
        contacts: List<C>,
        protocol: ProtocolChoice,
        linkHints: LinkHints,
        identifier: (C) -> String,
    ): Flow<MatchEvent<C>> = channelFlow {
        val result = match(contacts, protocol, { progress ->
            val retry = progress.retry
            trySend(if (retry != null) MatchEvent.Retrying(retry) else MatchEvent.Progressed(progress))
        }, linkHints, identifier)
        send(MatchEvent.Finished(result))
    }.buffer(Channel.UNLIMITED)

    actual suspend fun health(): ServerHealth {
        checkOpen()
        return NativeLibrary.call { native.health() }.toPublic()
    }

    /**
     * [match] for Java callers: the result as a [CompletableFuture]; a failure completes it
     * with a [ContactDiscoveryException]. Cancelling the future (`cancel(true)`) cancels
     * the run; [close] cancels every future still running. [onProgress] is called in
     * order on a thread of the SDK's pool (`Dispatchers.Default`), never on the native
     * run's thread, and every event before the future completes: return quickly.
     *
     * @throws IllegalStateException if the client is closed.
     */
    @JvmOverloads
    fun matchAsync(
        contacts: List<String>,
        protocol: ProtocolChoice = config.protocol,
        onProgress: Consumer<Progress>? = null,
        linkHints: LinkHints = config.linkHints,
    ): CompletableFuture<MatchResult<String>> {
        checkOpen()
        return futures.future { match(contacts, protocol, { onProgress?.accept(it) }, linkHints) { it } }
    }

    /** [matchAsync] of the caller's own contact objects. */
    @JvmOverloads
    fun <C> matchAsync(
        contacts: List<C>,
        protocol: ProtocolChoice,
        onProgress: Consumer<Progress>?,
        identifier: java.util.function.Function<C, String>,
        linkHints: LinkHints = config.linkHints,
    ): CompletableFuture<MatchResult<C>> {
        checkOpen()
        return futures.future {
            match(contacts, protocol, { onProgress?.accept(it) }, linkHints) { identifier.apply(it) }
        }
    }

    /**
     * Creates a group overlap of [size] parties (2 to 16, this one included) on the
     * server, with this caller as its leader: show [GroupSession.code] to the others, then
     * call [GroupSession.run]. See [GroupSession].
     *
     * @throws ContactDiscoveryException.InvalidInput if [size] is not 2 to 16 (nothing is sent).
     * @throws ContactDiscoveryException.Group if the server's group limits are reached.
     * @throws ContactDiscoveryException another failure, as a match reports it.
     */
    @Throws(ContactDiscoveryException::class)
    suspend fun createGroup(size: Int): GroupSession {
        checkOpen()
        if (size < 0) throw ContactDiscoveryException.InvalidInput("a group size must not be negative")
        return GroupSession(NativeLibrary.call { native.groupCreate(size.toUInt()) })
    }

    /**
     * Joins the group overlap whose leader shows [code], as a member; then call
     * [GroupSession.run].
     *
     * @throws ContactDiscoveryException.Group with [GroupFailure.BAD_CODE] for a code that is
     *   not one (nothing is sent), [GroupFailure.UNKNOWN_GROUP] for one the server does not
     *   know, [GroupFailure.GROUP_FULL] when every party has joined.
     * @throws ContactDiscoveryException another failure, as a match reports it.
     */
    @Throws(ContactDiscoveryException::class)
    suspend fun joinGroup(code: String): GroupSession {
        checkOpen()
        return GroupSession(NativeLibrary.call { native.groupJoin(code) })
    }

    /** [createGroup] for Java callers. */
    fun createGroupAsync(size: Int): CompletableFuture<GroupSession> {
        checkOpen()
        return futures.future { createGroup(size) }
    }

    /** [joinGroup] for Java callers. */
    fun joinGroupAsync(code: String): CompletableFuture<GroupSession> {
        checkOpen()
        return futures.future { joinGroup(code) }
    }

    /** [health] for Java callers. */
    fun healthAsync(): CompletableFuture<ServerHealth> {
        checkOpen()
        return futures.future { health() }
    }

    actual override fun close() {
        closed = true
        if (lazyFutures.isInitialized()) futures.cancel()
        native.close()
    }

    override fun toString() = "ContactDiscovery($serverUrl, $config)"

    companion object {
        /**
         * A client whose requests the native library sends itself, with its own HTTP stack
         * (the one `psi match` uses: ureq and rustls), instead of OkHttp: on the desktop JVM,
         * where it makes a run about as fast as `psi match` (docs/benchmarks.md,
         * docs/adr/0049-native-transport-on-the-desktop-jvm.md). Opt-in and desktop only:
         * the Android library does not carry it (see [hasNativeTransport]). HTTPS trusts
         * Mozilla's root certificates, not the JVM's trust store; no OkHttp interceptor,
         * proxy or certificate pinning applies. A request already sent finishes (within its
         * timeout) when the run is cancelled; the run stops right after it.
         *
         * @throws ContactDiscoveryException.InvalidInput if this native library has no
         *   native transport (Android), or if [serverUrl] or [config] cannot be used.
         * @throws ContactDiscoveryException.Internal if the native library cannot be loaded.
         */
        @JvmStatic
        @Throws(ContactDiscoveryException::class)
        fun withNativeTransport(serverUrl: String, config: DiscoveryConfig): ContactDiscovery {
            val transport = NativeLibrary.call { nativeNativeHttpTransport() }
            // The native client keeps its own reference: this one is released at once.
            return try {
                ContactDiscovery(serverUrl, config, transport)
            } finally {
                (transport as? AutoCloseable)?.close()
            }
        }

        /** True when this native library carries the transport of [withNativeTransport]. */
        @JvmStatic
        val hasNativeTransport: Boolean
            get() = NativeLibrary.call { nativeHasNativeHttpTransport() }

        /**
         * Loads the native library and the phone-number metadata on a background thread
         * (`psi-sdk preload`) and returns at once. The first [DiscoveryConfig] or
         * [ContactDiscovery] of a process otherwise loads the library on the caller's thread
         * (about 0.2 s on a desktop, more on a phone), and the first run the metadata: call
         * this early, such as in `Application.onCreate`, so that neither happens on the main
         * thread. Idempotent; a failure here is reported by the call that needs the library.
         */
        @JvmStatic
        fun preload() {
            thread(isDaemon = true, name = "psi-sdk preload") {
                runCatching { NativeLibrary.call { nativePreload() } }
            }
        }
    }
}

/**
 * The native library's entry: maps its errors to the public ones, in one place, and sets
 * how its threads enter the JVM before the library is first loaded.
 *
 * The native runs call back into Kotlin (the transport's `send`, progress, the async
 * machinery's wake-ups) from their own threads. By default JNA attaches such a thread for
 * each callback and detaches it after: a new, unnamed `Thread` per call, and an attach and a
 * detach per request. Here each callback keeps its native thread attached, as a daemon
 * named [NATIVE_THREAD] (JNA detaches it when the native thread ends).
 */
internal object NativeLibrary {
    /** The name the native library's threads have in the JVM (thread dumps, profilers). */
    const val NATIVE_THREAD = "psi-sdk native"

    init {
        val attach = CallbackThreadInitializer(true, false, NATIVE_THREAD)
        val callbacks: List<Callback> = listOf(
            uniffiCallbackInterfaceHttpTransport.send,
            uniffiCallbackInterfaceHttpTransport.uniffiFree,
            uniffiCallbackInterfaceHttpTransport.uniffiClone,
            uniffiCallbackInterfaceProgressListener.onProgress,
            uniffiCallbackInterfaceProgressListener.uniffiFree,
            uniffiCallbackInterfaceProgressListener.uniffiClone,
            uniffiRustFutureContinuationCallbackImpl,
            uniffiForeignFutureDroppedCallbackImpl,
        )
        for (callback in callbacks) Native.setCallbackThreadInitializer(callback, attach)
    }

    /** Runs the initializer above (an inline [call] alone would not). */
    @PublishedApi
    internal fun ready() = Unit

    inline fun <T> call(block: () -> T): T =
        try {
            ready()
            block()
        } catch (e: PsiException) {
            throw e.toPublic()
        } catch (e: GroupException) {
            throw e.toPublic()
        } catch (e: InternalException) {
            // uniffi's own failure (a panic it caught, a broken call): a bug.
            throw ContactDiscoveryException.Internal(e.message ?: "internal error in the native library", e)
        } catch (e: UnsatisfiedLinkError) {
            throw ContactDiscoveryException.Internal(
                "the native library psi_ffi could not be loaded for ${platform()}: " +
                    "the SDK jar carries it as a JNA resource (linux-x86-64/libpsi_ffi.so); " +
                    "an Android app carries it in jniLibs",
                e,
            )
        }

    fun platform() = "${System.getProperty("os.name")} ${System.getProperty("os.arch")}"
}
