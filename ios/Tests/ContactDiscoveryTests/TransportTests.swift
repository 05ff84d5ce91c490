import ContactDiscovery
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

/// The URLSession transport and the error mapping, against a small server of the tests'
/// own (broken responses, hangs) and a relay in front of the real server (to hold a request
/// and see the client go away).
final class TransportTests: XCTestCase {
    override class func tearDown() {
        Servers.stopAll()
        super.tearDown()
    }

    /// A client of `stub` that does not retry (each test sees the first failure).
    func client(_ stub: StubServer, _ change: (inout DiscoveryConfiguration) -> Void = { _ in }) throws -> ContactDiscovery {
        var c = DiscoveryConfiguration(token: Servers.token, defaultRegion: "US", retries: 0)
        change(&c)
        return try ContactDiscovery(serverURL: stub.url, configuration: c)
    }

    func expectError(_ d: ContactDiscovery, protocol p: ProtocolChoice = .dh,
                     file: StaticString = #filePath, line: UInt = #line) async -> ContactDiscoveryError? {
        do {
            _ = try await d.match(TestData.contacts, protocol: p)
            XCTFail("expected an error", file: file, line: line)
        } catch let e as ContactDiscoveryError {
            return e
        } catch {
            XCTFail("not a ContactDiscoveryError: \(error)", file: file, line: line)
        }
        return nil
    }

    static func json(_ status: Int, _ code: String, headers: [String] = []) -> Data {
        StubServer.response(status: status, headers: headers,
                            body: Data(#"{"error":"\#(code)","message":"from the stub"}"#.utf8))
    }

    /// A relay to `upstream` that holds every OT-PSI round for 20 s (a cancel comes meanwhile).
    static func relayHoldingOTRounds(to upstream: PsiServer) throws -> StubServer {
        let port = UInt16(upstream.url.port!)
        return try StubServer { r in
            .forward(port: port, holdMs: r.method == "POST" && r.path.hasSuffix("/ot/round") ? 20_000 : 0)
        }
    }

    func testATruncatedResponseIsANetworkError() async throws {
        let stub = try StubServer { _ in
            .respond(Data("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\nconnection: close\r\n\r\n{\"epoch\"".utf8))
        }
        defer { stub.stop() }
        let e = await expectError(try client(stub))
        guard case .network(let reason, let timeout)? = e else { return XCTFail("\(String(describing: e))") }
        XCTAssertFalse(timeout)
        // The underlying cause (the transport's own message) comes with the error.
        XCTAssertFalse(reason.isEmpty)
        XCTAssertEqual(e?.failureReason, reason)
        XCTAssertEqual(e?.errorDescription, "network error: \(reason)")
    }

    func testAResponseOverTheCapIsRefusedByItsContentLength() async throws {
        let stub = try StubServer { _ in
            .respond(StubServer.response(status: 200, contentType: "application/octet-stream",
                                         body: Data(repeating: 7, count: 50_000)))
        }
        defer { stub.stop() }
        let e = await expectError(try client(stub) { $0.maxResponseBytes = 10_000 })
        guard case .network(let reason, _)? = e else { return XCTFail("\(String(describing: e))") }
        XCTAssertTrue(reason.contains("larger than 10000"), reason)
    }

    func testAStreamedResponseOverTheCapIsCutOff() async throws {
        // No Content-Length: the body ends when the connection closes.
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\n"
        let stub = try StubServer { _ in .respond(Data(head.utf8) + Data(repeating: 1, count: 200_000)) }
        defer { stub.stop() }
        let e = await expectError(try client(stub) { $0.maxResponseBytes = 10_000 })
        guard case .network(let reason, _)? = e else { return XCTFail("\(String(describing: e))") }
        XCTAssertTrue(reason.contains("larger than 10000"), reason)
    }

    func testANonJSONHealthIsAProtocolViolation() async throws {
        let stub = try StubServer { _ in
            .respond(StubServer.response(status: 200, contentType: "text/html", body: Data("<html>hi</html>".utf8)))
        }
        defer { stub.stop() }
        do {
            _ = try await client(stub).health()
            XCTFail("expected an error")
        } catch let e as ContactDiscoveryError {
            guard case .protocolViolation = e else { return XCTFail("\(e)") }
        }
    }

    /// The first session is refused with a 503: the run starts again, and the event stream
    /// says so with the cause and the wait, between the two attempts' phases.
    func testARetryIsAnEventWithItsCauseAndWait() async throws {
        let upstream = try Servers.main
        let port = UInt16(upstream.url.port!)
        let sessions = Locked(0)
        let stub = try StubServer { r in
            let first = r.method == "POST" && r.path == "/v1/sessions"
                && sessions.withLock { n -> Bool in
                    n += 1
                    return n == 1
                }
            return first ? .respond(Self.json(503, "internal", headers: ["retry-after: 0"]))
                : .forward(port: port, holdMs: 0)
        }
        defer { stub.stop() }
        let d = try client(stub) { $0.retries = 2 }
        var retries: [RetryEvent] = []
        var phases: [Phase] = []
        var result: MatchResult<String>?
        for try await e in d.matchEvents(TestData.contacts, protocol: .dh) {
            switch e {
            case .progress(let p):
                XCTAssertNil(p.retry, "a retry comes as .retry")
                phases.append(p.phase)
            case .retry(let r): retries.append(r)
            case .result(let r): result = r
            }
        }
        XCTAssertEqual(result?.matches.count, TestData.expected.count)
        XCTAssertEqual(retries.count, 1, "\(retries)")
        let r = try XCTUnwrap(retries.first)
        XCTAssertEqual(r.attempt, 1)
        XCTAssertEqual(r.retries, 2)
        XCTAssertEqual(r.status, 503)
        XCTAssertEqual(r.code, .internal)
        XCTAssertFalse(r.timeout)
        XCTAssertEqual(r.reason, "HTTP 503 (internal)")
        XCTAssertLessThanOrEqual(r.waitMs, 250, "Retry-After 0: the first backoff")
        XCTAssertEqual(phases.first, .createSession)
        XCTAssertEqual(phases.filter { $0 == .createSession }.count, 2, "\(phases)")
        XCTAssertEqual(stub.seen.filter { $0 == "POST /v1/sessions" }.count, 2)
    }

    func testAnErrorCodedResponseIsATypedServerError() async throws {
        let stub = try StubServer { _ in .respond(Self.json(409, "wrong_phase")) }
        defer { stub.stop() }
        let e = await expectError(try client(stub))
        guard case .server(let status, let code, let reason, _)? = e else { return XCTFail("\(String(describing: e))") }
        XCTAssertEqual(status, 409)
        XCTAssertEqual(code, .wrongPhase)
        XCTAssertTrue(reason.contains("from the stub"), reason)
    }

    func testAnUnknownErrorCodeIsKeptAsUnknown() async throws {
        let stub = try StubServer { _ in .respond(Self.json(500, "brand_new_code")) }
        defer { stub.stop() }
        let e = await expectError(try client(stub))
        guard case .server(500, .unknown, _, _)? = e else { return XCTFail("\(String(describing: e))") }
    }

    func testA429CarriesItsRetryAfterHeader() async throws {
        let stub = try StubServer { _ in .respond(Self.json(429, "rate_limited", headers: ["retry-after: 7"])) }
        defer { stub.stop() }
        let e = await expectError(try client(stub))
        guard case .rateLimited(_, let after)? = e else { return XCTFail("\(String(describing: e))") }
        XCTAssertEqual(after, 7)
    }

    func testA401IsUnauthorized() async throws {
        let stub = try StubServer { _ in .respond(Self.json(401, "invalid_token")) }
        defer { stub.stop() }
        let e = await expectError(try client(stub))
        guard case .unauthorized? = e else { return XCTFail("\(String(describing: e))") }
    }

    /// No redirect is followed (an https server could otherwise send the run to plain
    /// http, or elsewhere): the 3xx reaches the driver, which refuses it.
    func testARedirectIsNotFollowed() async throws {
        let target = try StubServer { _ in .respond(Self.json(500, "from_the_target")) }
        defer { target.stop() }
        let location = "\(target.url.absoluteString)/v1/sessions"
        let origin = try StubServer { _ in
            .respond(StubServer.response(status: 307, reason: "Temporary Redirect", headers: ["location: \(location)"], body: Data()))
        }
        defer { origin.stop() }
        let e = await expectError(try client(origin))
        guard case .protocolViolation(let reason, _)? = e else { return XCTFail("\(String(describing: e))") }
        XCTAssertTrue(reason.contains("redirect"), reason)
        XCTAssertEqual(target.seen, [])
    }

    /// An error body over 16 KiB is dropped: the status still counts.
    func testAnOversizedErrorBodyKeepsItsStatus() async throws {
        let stub = try StubServer { _ in
            .respond(StubServer.response(status: 503, headers: ["retry-after: 31"], body: Data(repeating: 120, count: 1 << 20)))
        }
        defer { stub.stop() }
        let e = await expectError(try client(stub))
        guard case .server(503, .unknown, _, let retryable)? = e else { return XCTFail("\(String(describing: e))") }
        XCTAssertTrue(retryable)
    }

    func testAServerThatNeverAnswersTimesOut() async throws {
        let stub = try StubServer { _ in .hang }
        defer { stub.stop() }
        let start = Date()
        // 1.5 s: FoundationNetworking would round a sub-second timeout to 0; ours is exact.
        let e = await expectError(try client(stub) { $0.timeoutMilliseconds = 1_500 })
        guard case .network(_, let timeout)? = e else { return XCTFail("\(String(describing: e))") }
        XCTAssertTrue(timeout)
        XCTAssertLessThan(Date().timeIntervalSince(start), 10)
    }

    func testRequestsCarryTheTokenAndTheAppsSessionIsUsed() async throws {
        let upstream = try Servers.main
        let relay = try StubServer { _ in .forward(port: UInt16(upstream.url.port!), holdMs: 0) }
        defer { relay.stop() }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpAdditionalHeaders = ["x-app-session": "mine"]
        configuration.urlCache = nil
        let session = URLSession(configuration: configuration)
        let d = try ContactDiscovery(
            serverURL: relay.url,
            configuration: DiscoveryConfiguration(token: Servers.token, defaultRegion: "US"), session: session)
        let result = try await d.match(TestData.contacts, protocol: .dh)
        XCTAssertEqual(result.matches.count, TestData.expected.count)
        let headers = try XCTUnwrap(relay.headers("POST /v1/sessions"))
        XCTAssertEqual(headers["authorization"], "Bearer \(Servers.token)")
        XCTAssertEqual(headers["x-app-session"], "mine")
    }

    /// Cancels the task while an OT-PSI round is held by the relay: the URLSession task is
    /// cancelled (the relay sees the client go), the run deletes its session, the caller
    /// gets CancellationError, and the server no longer knows the session.
    func testCancellingAnOTRunCancelsTheRequestAndDeletesTheSession() async throws {
        let upstream = try Servers.main
        let relay = try Self.relayHoldingOTRounds(to: upstream)
        defer { relay.stop() }
        let d = try ContactDiscovery(
            serverURL: relay.url, configuration: DiscoveryConfiguration(token: Servers.token, defaultRegion: "US"))
        let task = Task { try await d.match(TestData.contacts, protocol: .ot) }
        let deadline = Date().addingTimeInterval(30)
        while !relay.seen.contains(where: { $0.hasSuffix("/ot/round") }) && Date() < deadline {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        XCTAssertTrue(relay.seen.contains { $0.hasSuffix("/ot/round") }, "\(relay.seen)")
        let cancelledAt = Date()
        task.cancel()
        do {
            _ = try await task.value
            XCTFail("expected CancellationError")
        } catch is CancellationError {
        }
        XCTAssertLessThan(Date().timeIntervalSince(cancelledAt), 10, "the cancel took effect at once")
        // The held request's connection was closed by the client: the URLSession task was cancelled.
        while relay.goneDuringHold.isEmpty && Date() < deadline { try await Task.sleep(nanoseconds: 20_000_000) }
        XCTAssertEqual(relay.goneDuringHold.count, 1, "\(relay.seen)")
        let created = try XCTUnwrap(relay.response("POST /v1/sessions"))
        let text = String(decoding: created, as: UTF8.self)
        let match = try XCTUnwrap(text.range(of: #""session_id"\s*:\s*"[^"]+""#, options: .regularExpression))
        let id = String(text[match]).split(separator: "\"").last.map(String.init) ?? ""
        XCTAssertTrue(relay.seen.contains("DELETE /v1/sessions/\(id)"), "\(relay.seen)")
        // The server no longer knows it.
        var probe = URLRequest(url: upstream.url.appendingPathComponent("v1/sessions/\(id)"))
        probe.httpMethod = "DELETE"
        probe.setValue("Bearer \(Servers.token)", forHTTPHeaderField: "authorization")
        let (_, response) = try await URLSession.shared.data(for: probe)
        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 404)
    }

    func testACallCancelledBeforeItStartsSendsNothing() async throws {
        let stub = try StubServer { _ in .respond(Self.json(500, "internal")) }
        defer { stub.stop() }
        let d = try client(stub)
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await d.match(TestData.contacts, protocol: .dh)
        }
        do {
            _ = try await task.value
            XCTFail("expected CancellationError")
        } catch is CancellationError {
        }
        XCTAssertEqual(stub.seen, [], "a cancel that came first is kept: no request")
    }

    func testEndingTheEventStreamEarlyCancelsTheRun() async throws {
        let upstream = try Servers.main
        let relay = try Self.relayHoldingOTRounds(to: upstream)
        defer { relay.stop() }
        let d = try ContactDiscovery(
            serverURL: relay.url, configuration: DiscoveryConfiguration(token: Servers.token, defaultRegion: "US"))
        // The first event after `createSession` comes once the session exists (the events
        // before the held OT round); the loop ends there.
        var phases: [Phase] = []
        for try await e in d.matchEvents(TestData.contacts, protocol: .ot) {
            guard case .progress(let p) = e else { return XCTFail("the result came first") }
            phases.append(p.phase)
            if p.phase != .createSession { break }
        }
        XCTAssertEqual(phases.first, .createSession)
        XCTAssertTrue(relay.seen.contains("POST /v1/sessions"), "\(relay.seen)")
        let deadline = Date().addingTimeInterval(30)
        while !relay.seen.contains(where: { $0.hasPrefix("DELETE") }) && Date() < deadline {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        XCTAssertTrue(relay.seen.contains { $0.hasPrefix("DELETE /v1/sessions/") }, "\(relay.seen)")
    }
}
