import Foundation

/// A real `psi serve` on loopback for the tests, with `registry` (`identifier,label` lines)
/// imported into a fresh database. The `psi` command comes from the environment variable
/// `PSI_BIN` (ci/swift.sh sets it). `arguments` go to `psi serve` (such as `--token`).
final class PsiServer: @unchecked Sendable {
    /// The server's base URL, `http://127.0.0.1:PORT`.
    let url: URL
    let directory: URL
    private let process: Process
    private let lock = NSLock()
    private var stopped = false

    static var psi: String {
        get throws {
            guard let path = ProcessInfo.processInfo.environment["PSI_BIN"], !path.isEmpty else {
                throw HarnessError("set PSI_BIN to the psi command (ci/swift.sh does)")
            }
            return path
        }
    }

    init(registry: [String], arguments: [String] = [], importArguments: [String] = []) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("psi-swift-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let csv = directory.appendingPathComponent("registry.csv")
        try (registry.joined(separator: "\n") + "\n").write(to: csv, atomically: true, encoding: .utf8)
        let db = directory.appendingPathComponent("registry.sqlite").path
        try Self.run([try Self.psi, "import", "--db", db] + importArguments + [csv.path])
        process = Process()
        process.executableURL = URL(fileURLWithPath: try Self.psi)
        process.arguments = ["serve", "--db", db, "--listen", "127.0.0.1:0"] + arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        // `psi serve` prints `psi serve: listening on http://...` once it accepts connections.
        let deadline = Date().addingTimeInterval(30)
        var text = ""
        while !text.contains("\n") && Date() < deadline && process.isRunning {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        guard let range = text.range(of: #"http://\S+"#, options: .regularExpression),
            let url = URL(string: String(text[range]))
        else {
            process.terminate()
            throw HarnessError("psi serve did not print its address: \(text)")
        }
        self.url = url
    }

    func stop() {
        let first: Bool = lock.withLock {
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        if process.isRunning {
            // SIGTERM: the server finishes requests in flight; a kept-alive idle connection
            // of the SDK's long-lived session can hold that up, so SIGKILL after 5 s.
            process.terminate()
            let deadline = Date().addingTimeInterval(5)
            while process.isRunning && Date() < deadline { usleep(20_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { stop() }

    /// Runs a command to its end, failing on a non-zero exit.
    static func run(_ command: [String]) throws {
        let (status, output) = try runProcess(command[0], Array(command.dropFirst()))
        guard status == 0 else {
            throw HarnessError("\(command.dropFirst().first ?? "") failed: \(output)")
        }
    }
}

/// Runs `binary` with `arguments` to its end: its exit status and its output (stdout and
/// stderr together).
func runProcess(_ binary: String, _ arguments: [String]) throws -> (Int32, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: binary)
    p.arguments = arguments
    let out = Pipe()
    p.standardOutput = out
    p.standardError = out
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The registry and the address book the SDK's tests share (the Kotlin SDK's TestData).
enum TestData {
    /// Registered: 2,000 emails with labels, and three phone numbers (`identifier,label`).
    static let registry: [String] =
        (1...2000).map { "user\($0)@example.com,User \($0)" }
        + ["+14155550123,Phone A", "+14155550124,Phone B", "+442079460958,Phone UK"]

    /// 120 rows: 40 registered (some written differently from the registry), 75 not, 5 invalid.
    static let contacts: [String] = {
        var c: [String] = []
        for i in 1...37 { c.append(i % 5 == 0 ? "  USER\(i)@Example.COM " : "user\(i)@example.com") }
        c += ["(415) 555-0123", "+1 415 555 0124", "+44 20 7946 0958"]
        for i in 1...75 { c.append("stranger\(i)@example.org") }
        c += ["", "not a contact", "broken@", "+1 (415) abc", "12"]
        return c
    }()

    /// The indices of `contacts` in the registry, with their labels.
    static let expected: [Int: String] = {
        var e: [Int: String] = [:]
        for i in 1...37 { e[i - 1] = "User \(i)" }
        e[37] = "Phone A"
        e[38] = "Phone B"
        e[39] = "Phone UK"
        return e
    }()

    /// The indices of `contacts` that are not valid identifiers.
    static let invalid: Set<Int> = Set(115...119)
}
