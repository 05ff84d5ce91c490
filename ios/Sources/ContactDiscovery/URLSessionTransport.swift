import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PsiFFI

/// The native library's HTTP transport over `URLSession`: it moves the bytes of each request
/// the Rust driver makes and maps types and errors, nothing more.
///
/// What it guarantees whatever the platform does:
/// - the request's own timeout is a deadline for the whole exchange (FoundationNetworking
///   on Linux rounds sub-second timeouts down to 0 and only resets an idle timer per chunk,
///   so the deadline is a timer of ours; `timeoutInterval` is set a second longer);
/// - a response body longer than the request's cap fails as soon as the cap is passed
///   (a `Content-Length` over it fails before the body is read);
/// - an error body (status 400 and above) is read at most to `maxErrorBodyBytes()` (16 KiB,
///   the Rust transport contract's): a longer one is dropped, and the status comes back
///   with an empty body;
/// - no redirect is followed: the 3xx comes back as the response, and the Rust driver
///   refuses it (a redirect could move the run to another host, or from https to http).
///   On the SDK's own session and, on Apple platforms, on an app's session (through the
///   task delegate); on Linux an app's session follows its own delegate's policy;
/// - no URL cache, and no cookies or credentials stored by the SDK's own session;
/// - a cancelled Swift task (the Rust run abandoned the request) cancels the
///   `URLSessionTask`. The cancel is sent asynchronously: on Swift 6.3 for Linux, cancelling
///   a task synchronously from a cancellation handler can deadlock (swift-corelibs-foundation
///   #5412), so no `data(for:)` either.
/// - `URLError`s become the FFI's `TransportError` here: an undeclared error would cross
///   the boundary as free text.
///
/// TCP_NODELAY: URLSession has no setting for it. libcurl (FoundationNetworking's backend on
/// Linux) enables it by default; Apple's stack decides for itself.
final class URLSessionTransport: HttpTransport, Sendable {
    private let session: URLSession
    /// Whether `session` is the SDK's own, whose delegate routes each task's callbacks to its
    /// exchange.
    private let ownSession: Bool

    /// The delegate of the SDK's own session.
    static let router = SessionRouter()

    /// One long-lived session for every client that brings none (a session per request
    /// races in teardown on Linux). Its delegate gets each task's data as it arrives: on
    /// Linux, FoundationNetworking does not call a task's own delegate for data tasks.
    static let sharedSession: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCredentialStorage = nil
        configuration.httpMaximumConnectionsPerHost = 8
        return URLSession(configuration: configuration, delegate: router, delegateQueue: nil)
    }()

    /// A transport on `session` (the app's, for pinning or a proxy), or on the SDK's own.
    init(session: URLSession?) {
        self.session = session ?? Self.sharedSession
        self.ownSession = session == nil
    }

    func send(request: HttpRequest) async throws -> HttpResponse {
        guard let url = URL(string: request.url) else {
            throw TransportError.Failed(reason: "not a valid URL")
        }
        var urlRequest = URLRequest(url: url)
        switch request.method {
        case .get: urlRequest.httpMethod = "GET"
        case .post: urlRequest.httpMethod = "POST"
        case .delete: urlRequest.httpMethod = "DELETE"
        }
        for header in request.headers {
            urlRequest.setValue(header.value, forHTTPHeaderField: header.name)
        }
        if !request.body.isEmpty {
            urlRequest.httpBody = request.body
        }
        urlRequest.cachePolicy = .reloadIgnoringLocalAndRemoteCacheData
        // Whole seconds, and longer than our own deadline (see the type's documentation).
        urlRequest.timeoutInterval = (Double(request.timeoutMs) / 1000).rounded(.up) + 1

        let exchange = Exchange(limit: request.maxResponseBytes)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HttpResponse, any Error>) in
                let task: URLSessionDataTask
                if ownSession {
                    task = session.dataTask(with: urlRequest)
                    Self.router.register(task, exchange)
                } else {
                    #if canImport(Darwin)
                    // The app's session keeps its own delegate (pinning); a task delegate
                    // (iOS 15, macOS 12) gets this task's data as it arrives.
                    task = session.dataTask(with: urlRequest)
                    task.delegate = exchange
                    #else
                    // FoundationNetworking calls no task delegate: the whole body arrives at
                    // once, and the cap is checked then.
                    task = session.dataTask(with: urlRequest) { data, response, error in
                        exchange.completed(data: data, response: response, error: error)
                    }
                    #endif
                }
                exchange.start(task: task, continuation: continuation, timeoutMs: request.timeoutMs)
            }
        } onCancel: {
            exchange.finish(.failure(.Failed(reason: "request cancelled")))
        }
    }
}

/// One request's state: the body as it arrives, the size cap, the deadline, and the one
/// resumption of the caller's continuation (whichever comes first: the response, an error,
/// the cap, the deadline or a cancel).
final class Exchange: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    /// The most of an error body that is read (the Rust transport contract's).
    static let errorBodyLimit: UInt64 = maxErrorBodyBytes()

    private let lock = NSLock()
    private let limit: UInt64
    private var continuation: CheckedContinuation<HttpResponse, any Error>?
    private var task: URLSessionDataTask?
    private var response: HTTPURLResponse?
    private var body = Data()
    private var finished = false

    init(limit: UInt64) {
        self.limit = limit
    }

    func start(task: URLSessionDataTask, continuation: CheckedContinuation<HttpResponse, any Error>, timeoutMs: UInt64) {
        let alreadyDone: Bool = lock.withLock {
            self.task = task
            self.continuation = continuation
            return finished
        }
        if alreadyDone {
            // Cancelled before the task started: resume now, never start the request (the
            // cancel ends the task, so the session's delegate forgets it).
            DispatchQueue.global().async { task.cancel() }
            resumeIfNeeded()
            return
        }
        task.resume()
        let deadline = DispatchTime.now() + .milliseconds(Int(clamping: timeoutMs))
        DispatchQueue.global().asyncAfter(deadline: deadline) { [weak self] in
            self?.finish(.failure(.Timeout(reason: "no complete response within \(timeoutMs) ms")))
        }
    }

    private var outcome: Result<HttpResponse, TransportError>?

    /// Records the outcome once, cancels the task (asynchronously) if it is still running
    /// and the outcome is a failure (or `cancelTask` says so), and resumes the caller.
    func finish(_ result: Result<HttpResponse, TransportError>, cancelTask: Bool = false) {
        let task: URLSessionDataTask? = lock.withLock {
            if finished { return nil }
            finished = true
            outcome = result
            return self.task
        }
        var failed = false
        if case .failure = result { failed = true }
        if failed || cancelTask, let task {
            DispatchQueue.global().async { task.cancel() }
        }
        resumeIfNeeded()
    }

    private func resumeIfNeeded() {
        let (continuation, outcome): (CheckedContinuation<HttpResponse, any Error>?, Result<HttpResponse, TransportError>?) = lock.withLock {
            guard finished, let c = self.continuation else { return (nil, nil) }
            self.continuation = nil
            return (c, self.outcome)
        }
        guard let continuation, let outcome else { return }
        continuation.resume(with: outcome.mapError { $0 as any Error })
    }

    /// The cap of a response with `status`: an error body's is smaller.
    private func cap(status: Int) -> UInt64 {
        status >= 400 ? min(limit, Self.errorBodyLimit) : limit
    }

    /// An oversized error body is dropped: the status and headers, with no body.
    private func withoutBody(_ http: HTTPURLResponse) -> HttpResponse {
        HttpResponse(status: UInt16(clamping: http.statusCode), headers: Self.headers(http), body: Data())
    }

    /// The response head arrived: refuse a body announced over the cap.
    func received(response: URLResponse) -> URLSession.ResponseDisposition {
        guard let http = response as? HTTPURLResponse else {
            finish(.failure(.Failed(reason: "not an HTTP response")))
            return .cancel
        }
        if http.expectedContentLength > 0 && UInt64(http.expectedContentLength) > cap(status: http.statusCode) {
            if http.statusCode >= 400 {
                finish(.success(withoutBody(http)), cancelTask: true)
            } else {
                finish(.failure(.TooLarge(limit: limit)))
            }
            return .cancel
        }
        lock.withLock { self.response = http }
        return .allow
    }

    /// Body bytes arrived: fail as soon as the cap is passed (an error body: drop it).
    func received(data: Data) {
        let (tooLarge, http): (Bool, HTTPURLResponse?) = lock.withLock {
            if finished { return (false, nil) }
            body.append(data)
            let status = response?.statusCode ?? 0
            return (UInt64(body.count) > cap(status: status), response)
        }
        guard tooLarge else { return }
        if let http, http.statusCode >= 400 {
            lock.withLock { body = Data() }
            finish(.success(withoutBody(http)), cancelTask: true)
        } else {
            finish(.failure(.TooLarge(limit: limit)))
        }
    }

    static func headers(_ response: HTTPURLResponse) -> [HttpHeader] {
        var headers: [HttpHeader] = []
        for (name, value) in response.allHeaderFields {
            headers.append(HttpHeader(name: String(describing: name).lowercased(), value: String(describing: value)))
        }
        return headers
    }

    /// The exchange ended, with `error` or the whole response.
    func completed(error: (any Error)?) {
        if let error {
            finish(.failure(Self.transportError(error)))
            return
        }
        let (response, body) = lock.withLock { (self.response, self.body) }
        guard let response else {
            finish(.failure(.Failed(reason: "no HTTP response")))
            return
        }
        finish(.success(HttpResponse(status: UInt16(clamping: response.statusCode), headers: Self.headers(response), body: body)))
    }

    /// The completion-handler path (an app's session on Linux): everything at once.
    func completed(data: Data?, response: URLResponse?, error: (any Error)?) {
        if error == nil, let response {
            guard received(response: response) == .allow else { return }
            if let data { received(data: data) }
        }
        completed(error: error)
    }

    // A task delegate (an app's session on Apple platforms).
    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        completionHandler(received(response: response))
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        received(data: data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        completed(error: error)
    }

    /// No redirect is followed: the 3xx is the response (the Rust driver refuses it).
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }

    /// `URLError` (and anything else URLSession reports) as the FFI's transport error; the
    /// reason names the error code, never the URL or data.
    static func transportError(_ error: any Error) -> TransportError {
        guard let urlError = error as? URLError else {
            return .Failed(reason: "the request failed (\(type(of: error)))")
        }
        switch urlError.code {
        case .timedOut:
            return .Timeout(reason: "the platform's request timeout expired")
        case .cancelled:
            return .Failed(reason: "request cancelled")
        case .cannotConnectToHost:
            return .Failed(reason: "connection refused (URLError \(urlError.code.rawValue))")
        case .networkConnectionLost:
            return .Failed(reason: "connection lost (URLError \(urlError.code.rawValue))")
        case .cannotFindHost, .dnsLookupFailed:
            return .Failed(reason: "host not found (URLError \(urlError.code.rawValue))")
        case .notConnectedToInternet:
            return .Failed(reason: "not connected to the internet (URLError \(urlError.code.rawValue))")
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
            .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot, .clientCertificateRejected:
            return .Tls(reason: "secure connection failed (URLError \(urlError.code.rawValue))")
        case .badServerResponse, .cannotParseResponse:
            return .Failed(reason: "malformed HTTP response (URLError \(urlError.code.rawValue))")
        default:
            return .Failed(reason: "the request failed (URLError \(urlError.code.rawValue))")
        }
    }
}

/// The SDK's own session's delegate: hands each task's callbacks to its exchange, and forgets
/// the task when it completes.
final class SessionRouter: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var exchanges: [Int: Exchange] = [:]

    func register(_ task: URLSessionTask, _ exchange: Exchange) {
        lock.withLock { exchanges[task.taskIdentifier] = exchange }
    }

    private func exchange(_ task: URLSessionTask) -> Exchange? {
        lock.withLock { exchanges[task.taskIdentifier] }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        completionHandler(exchange(dataTask)?.received(response: response) ?? .cancel)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        exchange(dataTask)?.received(data: data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let exchange = lock.withLock { exchanges.removeValue(forKey: task.taskIdentifier) }
        exchange?.completed(error: error)
    }

    /// No redirect is followed: the 3xx is the response (the Rust driver refuses it).
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}
