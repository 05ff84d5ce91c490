import ContactDiscovery
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

/// The servers the tests share: one with a token (DH and OT), one with CM20 on too. Started
/// on first use, stopped when the test process's last class tears down.
enum Servers {
    static let token = "secret-token"
    private static let lock = NSLock()
    nonisolated(unsafe) private static var started: [String: PsiServer] = [:]

    static func get(_ name: String, _ make: () throws -> PsiServer) throws -> PsiServer {
        try lock.withLock {
            if let s = started[name] { return s }
            let s = try make()
            started[name] = s
            return s
        }
    }

    static var main: PsiServer {
        get throws { try get("main") { try PsiServer(registry: TestData.registry, arguments: ["--token", token]) } }
    }

    static var cm20: PsiServer {
        get throws {
            try get("cm20") {
                try PsiServer(registry: TestData.registry, arguments: ["--token", token, "--enable-cm20"])
            }
        }
    }

    static func stopAll() {
        let all = lock.withLock { () -> [PsiServer] in
            defer { started = [:] }
            return Array(started.values)
        }
        all.forEach { $0.stop() }
    }
}

/// The Swift SDK against the real native library and a real `psi serve` on loopback.
final class ContactDiscoveryTests: XCTestCase {
    override class func tearDown() {
        Servers.stopAll()
        super.tearDown()
    }

    var config: DiscoveryConfiguration { DiscoveryConfiguration(token: Servers.token, defaultRegion: "US") }

    func client(_ configuration: DiscoveryConfiguration? = nil, session: URLSession? = nil) throws -> ContactDiscovery {
        try ContactDiscovery(serverURL: try Servers.main.url, configuration: configuration ?? config, session: session)
    }

    func assertExpected(_ result: MatchResult<String>, _ p: PSIProtocol, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(result.protocol, p, file: file, line: line)
        XCTAssertEqual(Dictionary(uniqueKeysWithValues: result.matches.map { ($0.index, $0.label ?? "") }),
                       TestData.expected, file: file, line: line)
        for m in result.matches { XCTAssertEqual(m.contact, TestData.contacts[m.index], file: file, line: line) }
        XCTAssertEqual(Set(result.rejected.map(\.index)), TestData.invalid, file: file, line: line)
        XCTAssertNil(result.labelError, file: file, line: line)
        XCTAssertEqual(result.labelStatus, .complete, file: file, line: line)
        XCTAssertEqual(result.labelsMissing, 0, file: file, line: line)
        XCTAssertEqual(result.labelsSkipped, 0, file: file, line: line)
        XCTAssertEqual(result.stats.clientItems, 115, file: file, line: line)
        XCTAssertEqual(result.stats.serverItems, UInt64(TestData.registry.count), file: file, line: line)
        XCTAssertGreaterThan(result.stats.bytesSent, 0, file: file, line: line)
        XCTAssertGreaterThan(result.stats.bytesReceived, 0, file: file, line: line)
        XCTAssertGreaterThan(result.stats.totalMicros, 0, file: file, line: line)
    }

    // MARK: Every protocol, and the automatic choice

    func testDHFindsTheRegisteredContactsWithTheirLabels() async throws {
        let result = try await client().match(TestData.contacts, protocol: .dh)
        assertExpected(result, .dh)
        XCTAssertEqual(result.requested, .dh)
        XCTAssertNil(result.choice, "a fixed protocol has no choice report")
        XCTAssertEqual(result.matches.first { $0.index == 37 }?.identifier, "+14155550123")
        XCTAssertEqual(result.matches.first { $0.index == 4 }?.identifier, "user5@example.com")
        XCTAssertEqual(result.stats.workAheadMicros, 0)
    }

    func testOTFindsTheSameContacts() async throws {
        let result = try await client().match(TestData.contacts, protocol: .ot)
        assertExpected(result, .ot)
        XCTAssertGreaterThanOrEqual(result.stats.roundTrips, 2)
    }

    func testTheConfiguredProtocolIsUsedWhenTheCallNamesNone() async throws {
        var configuration = config
        configuration.protocolChoice = .ot
        let result = try await client(configuration).match(TestData.contacts)
        assertExpected(result, .ot)
        XCTAssertEqual(result.requested, .ot)
    }

    func testCM20FindsTheSameContactsWhereTheServerOffersIt() async throws {
        let d = try ContactDiscovery(serverURL: try Servers.cm20.url, configuration: config)
        let result = try await d.match(TestData.contacts, protocol: .cm20)
        assertExpected(result, .cm20)
    }

    func testCM20IsRefusedByAServerThatDoesNotOfferIt() async throws {
        do {
            _ = try await client().match(TestData.contacts, protocol: .cm20)
            XCTFail("expected an error")
        } catch let e as ContactDiscoveryError {
            guard case .server(_, let code, _, _) = e else { return XCTFail("\(e)") }
            XCTAssertEqual(code, .unsupportedProtocol)
        }
    }

    func testAutoReportsEveryCandidatesPrediction() async throws {
        let d = try ContactDiscovery(serverURL: try Servers.cm20.url, configuration: config)
        let result = try await d.match(TestData.contacts, protocol: .auto)
        assertExpected(result, result.protocol)
        XCTAssertEqual(result.requested, .auto(.fastest))
        let choice = try XCTUnwrap(result.choice)
        XCTAssertEqual(choice.protocol, result.protocol)
        XCTAssertEqual(choice.policy, .fastest)
        XCTAssertEqual(Set(choice.predictions.map(\.protocol)), [.dh, .ot, .cm20])
        XCTAssertEqual(choice.workload.clientItems, 115)
        let best = try XCTUnwrap(choice.predictions.min { $0.totalMicros < $1.totalMicros })
        XCTAssertEqual(best.protocol, choice.protocol, "auto(fastest) takes the least predicted time")
        // Each figure of the link names its own source: measured exactly when it has samples
        // (the health request measures the RTT only; the rates stay a prior unless probed).
        let link = choice.link, sources = choice.linkSources
        XCTAssertEqual(sources.rtt, .measured)
        XCTAssertEqual(sources.up == .measured, link.upSamples > 0)
        XCTAssertEqual(sources.down == .measured, link.downSamples > 0)
        XCTAssertEqual(choice.linkSource, .measured)
    }

    func testAutoFewestBytesTakesTheSmallestPrediction() async throws {
        let result = try await client().match(TestData.contacts, protocol: .auto(.fewestBytes))
        let choice = try XCTUnwrap(result.choice)
        XCTAssertEqual(choice.policy, .fewestBytes)
        let bytes = { (p: Prediction) in p.bytesUp + p.bytesDown }
        let least = try XCTUnwrap(choice.predictions.map(bytes).min())
        XCTAssertEqual(bytes(try XCTUnwrap(choice.predictions.first { $0.protocol == result.protocol })), least)
        assertExpected(result, result.protocol)
    }

    // MARK: Contacts, labels, cache

    struct Person: Sendable, Hashable {
        let name: String
        let phone: String
    }

    func testTheCallersOwnContactValuesComeBack() async throws {
        let people = [Person(name: "Ann", phone: "(415) 555-0123"), Person(name: "Bob", phone: "+1 212 555 0100"),
                      Person(name: "Cy", phone: "?")]
        let result = try await client().match(people, protocol: .dh) { $0.phone }
        XCTAssertEqual(result.matches.map(\.contact), [people[0]])
        XCTAssertEqual(result.matches.first?.label, "Phone A")
        XCTAssertEqual(result.rejected.map(\.contact), [people[2]])
        XCTAssertEqual(result.rejected.first?.index, 2)
    }

    func testRejectedRowsCarryTheirReasons() async throws {
        let result = try await client().match(TestData.contacts, protocol: .dh)
        let reasons = Dictionary(uniqueKeysWithValues: result.rejected.map { ($0.index, $0.reason) })
        XCTAssertEqual(reasons[115], .empty)
        XCTAssertEqual(reasons[117], .badEmail)
        XCTAssertEqual(result.rejected.map(\.contact), Array(TestData.contacts[115...119]))
    }

    func testLabelsCanBeTurnedOff() async throws {
        var configuration = config
        configuration.fetchLabels = false
        let result = try await client(configuration).match(TestData.contacts, protocol: .ot)
        XCTAssertEqual(Set(result.matches.map(\.index)), Set(TestData.expected.keys))
        XCTAssertTrue(result.matches.allSatisfy { $0.label == nil })
    }

    func testASecondClientReusesTheRegistryCachedOnDisk() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("psi-swift-cache-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        var cached = config
        cached.cacheDirectory = dir
        let first = try await client(cached).match(TestData.contacts, protocol: .dh)
        XCTAssertFalse(first.stats.setFromCache)
        XCTAssertGreaterThan(first.stats.setBytesDownloaded, 0)
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path)
        XCTAssertTrue(files.contains { $0.hasSuffix(".set") }, "\(files)")
        XCTAssertTrue(files.contains("measurements.json"), "\(files)")
        let second = try await client(cached).match(TestData.contacts, protocol: .dh)
        XCTAssertTrue(second.stats.setFromCache)
        XCTAssertEqual(second.stats.setBytesDownloaded, 0)
        XCTAssertLessThan(second.stats.bytesReceived, first.stats.bytesReceived)
        assertExpected(second, .dh)
    }

    /// An address book that is mostly registered: every match gets its label, with either
    /// protocol (the label step used to fetch at most a quarter of the contacts' labels).
    func testEveryMatchGetsItsLabelWhenMostContactsAreRegistered() async throws {
        let contacts = (1...300).map { "user\($0)@example.com" } + (1...20).map { "nobody\($0)@example.org" }
        for p in [ProtocolChoice.dh, .ot] {
            let result = try await client().match(contacts, protocol: p)
            XCTAssertEqual(result.matches.count, 300, "\(p)")
            XCTAssertEqual(result.labelStatus, .complete, "\(p)")
            XCTAssertEqual(result.labelsMissing, 0, "\(p)")
            XCTAssertEqual(result.labelsSkipped, 0, "\(p)")
            for m in result.matches {
                XCTAssertEqual(m.label, "User \(m.index + 1)", "\(p)")
            }
        }
        var off = config
        off.fetchLabels = false
        let plain = try await client(off).match(contacts, protocol: .dh)
        XCTAssertEqual(plain.labelStatus, .off)
        XCTAssertEqual(plain.labelsMissing, 300)
    }

    func testTwoRunsGoOnInParallelOnOneClient() async throws {
        let d = try client()
        async let a = d.match(TestData.contacts, protocol: .dh)
        async let b = d.match(TestData.contacts, protocol: .ot)
        let (ra, rb) = try await (a, b)
        assertExpected(ra, .dh)
        assertExpected(rb, .ot)
    }

    func testTheResultReportsTheKeyEpochAndTheRegistryVersion() async throws {
        let d = try client()
        let health = try await d.health()
        let result = try await d.match(TestData.contacts, protocol: .dh)
        XCTAssertEqual(result.epoch, health.epoch)
        XCTAssertTrue(result.registryETag.hasPrefix("\""), result.registryETag)
        XCTAssertEqual(result.labelsSkipped, 0)
        let again = try await d.match(TestData.contacts, protocol: .ot)
        XCTAssertEqual(again.registryETag, result.registryETag, "the same registry, whatever the protocol")
        // Another registry (another server's key) has another version.
        let other = try await ContactDiscovery(serverURL: try Servers.cm20.url, configuration: config)
            .match(TestData.contacts, protocol: .dh)
        XCTAssertNotEqual(other.registryETag, result.registryETag)
    }

    // MARK: Errors from the real server

    func testAWrongTokenIsUnauthorized() async throws {
        var wrong = config
        wrong.token = "wrong"
        do {
            _ = try await client(wrong).match(TestData.contacts)
            XCTFail("expected an error")
        } catch let e as ContactDiscoveryError {
            guard case .unauthorized = e else { return XCTFail("\(e)") }
            XCTAssertFalse(e.isRetryable)
            XCTAssertFalse(e.localizedDescription.contains("example"), "no contact data in errors")
            XCTAssertFalse(e.localizedDescription.contains("wrong"), "no token in errors")
        }
    }

    func testAMissingTokenIsUnauthorized() async throws {
        var none = config
        none.token = nil
        do {
            _ = try await client(none).match(TestData.contacts)
            XCTFail("expected an error")
        } catch ContactDiscoveryError.unauthorized {
        }
    }

    func testATokenWithSurroundingWhitespaceIsAccepted() async throws {
        var padded = config
        padded.token = Servers.token + "\n"
        let result = try await client(padded).match(TestData.contacts, protocol: .dh)
        assertExpected(result, .dh)
    }

    func testTheServersRateLimitComesWithItsRetryAfter() async throws {
        let limited = try PsiServer(registry: TestData.registry, arguments: ["--items-per-hour", "50"])
        defer { limited.stop() }
        let d = try ContactDiscovery(serverURL: limited.url, configuration: DiscoveryConfiguration(defaultRegion: "US"))
        do {
            _ = try await d.match(TestData.contacts)
            XCTFail("expected an error")
        } catch let e as ContactDiscoveryError {
            guard case .rateLimited(_, let after) = e else { return XCTFail("\(e)") }
            XCTAssertTrue(e.isRetryable)
            XCTAssertGreaterThan(try XCTUnwrap(after), 0)
        }
    }

    func testAServerThatIsDownIsARetryableNetworkError() async throws {
        let stub = try StubServer { _ in .hang }
        let url = stub.url
        stub.stop()  // the port is closed now
        var quick = config
        quick.retries = 0
        let d = try ContactDiscovery(serverURL: url, configuration: quick)
        do {
            _ = try await d.match(TestData.contacts, protocol: .dh)
            XCTFail("expected an error")
        } catch let e as ContactDiscoveryError {
            guard case .network(_, let timeout) = e else { return XCTFail("\(e)") }
            XCTAssertFalse(timeout)
            XCTAssertTrue(e.isRetryable)
        }
    }

    func testInvalidInputAndSettingsAreInvalidInput() async throws {
        let d = try client()
        // No valid contact is a result, not an error: every row comes back rejected and
        // nothing is sent (issue 34; psi_client::MatchReport::nothing_sent).
        for contacts in [["", "nope"], []] {
            let r = try await d.match(contacts)
            XCTAssertTrue(r.matches.isEmpty)
            XCTAssertEqual(r.rejected.map(\.index), Array(contacts.indices))
            XCTAssertEqual(r.stats.requests, 0)
        }
        let url = try Servers.main.url
        XCTAssertThrowsError(try ContactDiscovery(serverURL: URL(string: "ftp://x")!, configuration: config)) {
            guard case ContactDiscoveryError.invalidInput = $0 else { return XCTFail("\($0)") }
        }
        var badRegion = config
        badRegion.defaultRegion = "XX"
        var zeroTimeout = config
        zeroTimeout.timeoutMilliseconds = 0
        var negative = config
        negative.retries = -1
        var badToken = config
        badToken.token = "bad token"
        for c in [badRegion, zeroTimeout, negative, badToken] {
            XCTAssertThrowsError(try ContactDiscovery(serverURL: url, configuration: c)) {
                guard case ContactDiscoveryError.invalidInput = $0 else { return XCTFail("\($0)") }
            }
        }
    }

    func testPlainHTTPToAHostThatIsNotLoopbackIsRefused() throws {
        XCTAssertThrowsError(try ContactDiscovery(serverURL: URL(string: "http://discovery.example.com")!,
                                                  configuration: config)) {
            guard case ContactDiscoveryError.invalidInput = $0 else { return XCTFail("\($0)") }
        }
        var insecure = config
        insecure.allowInsecureHTTP = true
        XCTAssertNoThrow(try ContactDiscovery(serverURL: URL(string: "http://discovery.example.com")!,
                                              configuration: insecure))
    }

    // MARK: Progress, health, configuration

    func testProgressEventsArriveInOrderThenTheResult() async throws {
        let d = try client()
        var events: [MatchEvent<String>] = []
        for try await e in d.matchEvents(TestData.contacts, protocol: .dh) { events.append(e) }
        guard case .result(let result) = events.last else { return XCTFail("no result last") }
        assertExpected(result, .dh)
        let phases = events.dropLast().map { e -> Phase? in
            if case .progress(let p) = e { return p.phase }
            return nil
        }
        XCTAssertEqual(phases, [.createSession, .clientStart, .roundTrip, .clientFinalize, .encodedSet,
                                .clientFinish, .labels])

        var ot: [ProgressEvent] = []
        var finished = false
        for try await e in d.matchEvents(TestData.contacts, protocol: .ot) {
            switch e {
            case .progress(let p): ot.append(p)
            case .retry(let r): XCTFail("no retry expected: \(r)")
            case .result: finished = true
            }
        }
        XCTAssertTrue(finished)
        XCTAssertEqual(ot.first?.phase, .createSession)
        XCTAssertEqual(ot.last?.phase, .labels)
        XCTAssertEqual(ot.map(\.round), ot.map(\.round).sorted())
    }

    func testOnProgressHearsEveryPhase() async throws {
        let heard = Locked<[Phase]>([])
        let result = try await client().match(TestData.contacts, protocol: .dh, onProgress: { e in
            heard.withLock { $0.append(e.phase) }
        })
        assertExpected(result, .dh)
        XCTAssertEqual(heard.withLock { $0.first }, .createSession)
        XCTAssertEqual(heard.withLock { $0.last }, .labels)
    }

    func testHealthReportsTheRegistryAndProtocols() async throws {
        let h = try await client().health()
        XCTAssertEqual(h.registryItems, UInt64(TestData.registry.count))
        XCTAssertEqual(Set(h.protocols), [.dh, .ot])
        XCTAssertGreaterThan(h.maxClientItems, 0)
        let cm20 = try await ContactDiscovery(serverURL: try Servers.cm20.url, configuration: config).health()
        XCTAssertEqual(Set(cm20.protocols), [.dh, .ot, .cm20])
    }

    func testTheDefaultsComeFromTheNativeLibrary() {
        let c = DiscoveryConfiguration()
        XCTAssertEqual(c.timeoutMilliseconds, 60_000)
        XCTAssertEqual(c.maxResponseBytes, 32 << 20) // a phone's cap, not the desktop client's 256 MiB
        XCTAssertEqual(c.cacheMaxBytes, 64 << 20)
        XCTAssertEqual(c.retries, 2)
        XCTAssertEqual(c.protocolChoice, .auto(.fastest))
        XCTAssertTrue(c.fetchLabels)
        XCTAssertFalse(c.allowInsecureHTTP)
        XCTAssertEqual(c.linkHints, .unknown)
        XCTAssertEqual(c.defaultRegion.count, 2, "a region code: the device's, or US")
    }

    func testDescriptionsKeepTheTokenOut() throws {
        let d = try client()
        XCTAssertFalse(String(describing: config).contains(Servers.token))
        XCTAssertTrue(String(describing: config).contains("token: set"))
        XCTAssertFalse(d.description.contains(Servers.token))
        XCTAssertTrue(d.description.contains(try Servers.main.url.absoluteString.replacingOccurrences(of: "/", with: "/")
            .prefix(16)))
    }

    func testReleasedClientsFreeTheirNativeClient() async throws {
        // Clients of tests running before may still be finishing (a cancelled run's DELETE).
        func settle(below n: UInt64) async {
            for _ in 0..<600 where ContactDiscovery.liveNativeClients > n {
                try? await Task.sleep(nanoseconds: 50_000_000)
            }
        }
        await settle(below: 0)
        let before = ContactDiscovery.liveNativeClients
        XCTAssertEqual(before, 0, "clients of earlier tests were not released")
        do {
            let d = try client()
            XCTAssertEqual(ContactDiscovery.liveNativeClients, before + 1)
            _ = try await d.match(TestData.contacts, protocol: .dh)
            let many = try (0..<20).map { _ in try client() }
            XCTAssertEqual(ContactDiscovery.liveNativeClients, before + 21)
            _ = many
        }
        await settle(below: before)
        XCTAssertEqual(ContactDiscovery.liveNativeClients, before)
    }
}

/// A value behind a lock, for closures that run on other threads.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
