import ContactDiscovery
import DiscoverySampleKit
import Foundation
import XCTest

/// The samples' platform-neutral logic (address book, view model) and the command-line
/// sample, against the real server.
final class SampleTests: XCTestCase {
    override class func tearDown() {
        Servers.stopAll()
        super.tearDown()
    }

    func testAnAddressBookWithAHeaderQuotesAndBlankLines() throws {
        let csv = "name,value\r\nAnn,(415) 555-0123\n\n\"Bob, Jr.\",\"bob@example.com\"\n\"Cy \"\"C\"\"\",+44 20 7946 0958\n"
        XCTAssertEqual(try AddressBook.parse(csv), [
            SampleContact(name: "Ann", value: "(415) 555-0123"),
            SampleContact(name: "Bob, Jr.", value: "bob@example.com"),
            SampleContact(name: "Cy \"C\"", value: "+44 20 7946 0958"),
        ])
    }

    func testARowThatDoesNotParseLikeTheOthersIsRefusedWithItsLine() {
        XCTAssertThrowsError(try AddressBook.parse("Ann,ann@example.com\nBob\nCy,cy@example.com\n")) {
            XCTAssertEqual($0 as? AddressBookError, .badRow(line: 2))
            XCTAssertFalse($0.localizedDescription.contains("Bob"), "no contact data in errors")
        }
        XCTAssertThrowsError(try AddressBook.parse("Ann,\"ann@example.com\nBob,b@example.com\n")) {
            XCTAssertEqual($0 as? AddressBookError, .unterminatedQuote(line: 1))
        }
        XCTAssertThrowsError(try AddressBook.parse(Data([0xff, 0xfe, 0x00]))) {
            XCTAssertEqual($0 as? AddressBookError, .notText)
        }
    }

    @MainActor
    func testTheViewModelRunsAMatchAndShowsItsRows() async throws {
        let d = try ContactDiscovery(
            serverURL: try Servers.main.url,
            configuration: DiscoveryConfiguration(token: Servers.token, defaultRegion: "US"))
        let model = DiscoveryViewModel(discovery: d)
        var states: [String] = []
        model.onChange = { state in
            switch state {
            case .idle: states.append("idle")
            case .running: states.append("running")
            case .finished: states.append("finished")
            case .failed: states.append("failed")
            case .cancelled: states.append("cancelled")
            }
        }
        let contacts = [SampleContact(name: "Zed", value: "user3@example.com"),
                        SampleContact(name: "Ann", value: "(415) 555-0123"),
                        SampleContact(name: "Nobody", value: "nobody@example.org")]
        await model.match(contacts, protocol: .dh)
        guard case .finished(let result) = model.state else { return XCTFail("\(model.state)") }
        XCTAssertEqual(DiscoveryViewModel.rows(result).map(\.name), ["Ann", "Zed"])
        XCTAssertEqual(DiscoveryViewModel.rows(result).map(\.label), ["Phone A", "User 3"])
        XCTAssertTrue(DiscoveryViewModel.summary(result).hasPrefix("2 contacts found, 0 not usable, with dh"))
        XCTAssertEqual(states.first, "running")
        XCTAssertEqual(states.last, "finished")
    }

    @MainActor
    func testTheViewModelShowsAFailureWithoutContactData() async throws {
        let d = try ContactDiscovery(
            serverURL: try Servers.main.url,
            configuration: DiscoveryConfiguration(token: "not-the-token", defaultRegion: "US"))
        let model = DiscoveryViewModel(discovery: d)
        await model.match([SampleContact(name: "Ann", value: "ann@example.com")])
        guard case .failed(let message, let retryable) = model.state else { return XCTFail("\(model.state)") }
        XCTAssertTrue(message.contains("unauthorized"), message)
        XCTAssertFalse(message.contains("ann@"))
        XCTAssertFalse(retryable)
    }

    /// The command-line sample, as a user runs it: a CSV file in, matches and the choice out.
    func testTheCommandLineSamplePrintsMatchesLabelsAndTheChoice() throws {
        let server = try Servers.main
        let binary = try Self.sampleBinary()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("psi-swift-sample-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let csv = dir.appendingPathComponent("contacts.csv")
        try "name,value\nAnn,(415) 555-0123\nBob,user7@example.com\nCy,nope\nDee,dee@example.org\n"
            .write(to: csv, atomically: true, encoding: .utf8)
        let tokenFile = dir.appendingPathComponent("token")
        try (Servers.token + "\n").write(to: tokenFile, atomically: true, encoding: .utf8)
        let (status, out) = try runProcess(binary, ["--server", server.url.absoluteString, "--token-file", tokenFile.path,
                                                 "--region", "US", csv.path])
        XCTAssertEqual(status, 0, out)
        XCTAssertTrue(out.contains("match: Ann\tPhone A"), out)
        XCTAssertTrue(out.contains("match: Bob\tUser 7"), out)
        XCTAssertTrue(out.contains("rejected: row 3 (Cy)"), out)
        XCTAssertTrue(out.contains("choice: "), out)
        XCTAssertTrue(out.contains("2 contacts found, 1 not usable"), out)

        let (bad, usage) = try runProcess(binary, ["--server", server.url.absoluteString])
        XCTAssertEqual(bad, 2)
        XCTAssertTrue(usage.contains("usage:"), usage)
        // Asking for help is not an error (issue 34).
        for flag in ["--help", "-h"] {
            let (help, text) = try runProcess(binary, [flag])
            XCTAssertEqual(help, 0, text)
            XCTAssertTrue(text.hasPrefix("usage: psi-swift-sample"), text)
        }
    }

    static func sampleBinary() throws -> String {
        if let path = ProcessInfo.processInfo.environment["PSI_SWIFT_SAMPLE"], !path.isEmpty { return path }
        // Next to the test bundle in SwiftPM's build folder.
        var dir = Bundle(for: SampleTests.self).bundleURL
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent("psi-swift-sample").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        throw HarnessError("psi-swift-sample not found: set PSI_SWIFT_SAMPLE (ci/swift.sh does)")
    }
}
