// Timed matches through the Swift SDK, for ci/bench-swift.sh: reads the contact file (one
// identifier per line), runs `warmups` untimed matches, then `runs` timed ones, each with a
// new client and so no registry cache (as `psi match` without --cache-dir), and prints one
// line per timed run:
// `swift-<warmups> <protocol> <millis> <matches> <bytes sent> <bytes received> <run millis>`,
// where the last is the native run's own wall time (RunStats.totalMicros).
//
// Usage: psi-swift-bench <server url> <contacts file> <dh|ot> <runs> <warmups>
import ContactDiscovery
import Foundation

let args = CommandLine.arguments
guard args.count == 6, let url = URL(string: args[1]), let runs = Int(args[4]), let warmups = Int(args[5]),
    let text = try? String(contentsOfFile: args[2], encoding: .utf8)
else {
    FileHandle.standardError.write(Data("usage: psi-swift-bench <server url> <contacts file> <dh|ot> <runs> <warmups>\n".utf8))
    exit(2)
}
let protocolName = args[3]
let choice: ProtocolChoice = protocolName == "ot" ? .ot : .dh
let contacts = text.split(separator: "\n").map(String.init).filter { !$0.isEmpty }

func once() async throws -> (Int, String) {
    let started = DispatchTime.now()
    let discovery = try ContactDiscovery(
        serverURL: url, configuration: DiscoveryConfiguration(defaultRegion: "US", protocolChoice: choice))
    let result = try await discovery.match(contacts)
    let millis = Int((DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000)
    let s = result.stats
    return (millis, "\(result.matches.count) \(s.bytesSent) \(s.bytesReceived) \(s.totalMicros / 1000)")
}

do {
    for _ in 0..<warmups { _ = try await once() }
    for _ in 0..<runs {
        let (millis, rest) = try await once()
        print("swift-\(warmups) \(protocolName) \(millis) \(rest)")
    }
} catch {
    FileHandle.standardError.write(Data("psi-swift-bench: \(error.localizedDescription)\n".utf8))
    exit(1)
}
