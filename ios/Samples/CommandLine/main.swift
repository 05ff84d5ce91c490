// psi-swift-sample: the Swift SDK from the command line. Reads a CSV address book
// (name,phone-or-email), matches it against a server, prints the matches with their
// labels, the rejected rows and how the protocol was chosen.
//
//   psi-swift-sample --server http://127.0.0.1:8080 [--token-file FILE] [--protocol auto|fewest-bytes|dh|ot|cm20]
//                    [--region US] [--cache-dir DIR] contacts.csv
import ContactDiscovery
import DiscoverySampleKit
import Foundation

struct Usage: Error, CustomStringConvertible {
    let description: String
}

/// `-h` or `--help`: the usage on standard output, exit status 0.
struct HelpAsked: Error {}

func parseArguments(_ args: [String]) throws -> (server: URL, file: String, configuration: DiscoveryConfiguration) {
    var server: URL?
    var file: String?
    var configuration = DiscoveryConfiguration()
    var i = 0
    func value() throws -> String {
        i += 1
        guard i < args.count else { throw Usage(description: "\(args[i - 1]) needs a value") }
        return args[i]
    }
    while i < args.count {
        switch args[i] {
        case "--server": server = URL(string: try value())
        case "--token-file":
            let path = try value()
            guard let token = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw Usage(description: "cannot read the token file \(path)")
            }
            configuration.token = token
        case "--protocol":
            switch try value() {
            case "auto": configuration.protocolChoice = .auto
            case "fewest-bytes": configuration.protocolChoice = .auto(.fewestBytes)
            case "dh": configuration.protocolChoice = .dh
            case "ot": configuration.protocolChoice = .ot
            case "cm20": configuration.protocolChoice = .cm20
            case let other: throw Usage(description: "unknown protocol \(other)")
            }
        case "--region": configuration.defaultRegion = try value()
        case "--cache-dir": configuration.cacheDirectory = URL(fileURLWithPath: try value())
        case "-h", "--help": throw HelpAsked()
        case let arg where arg.hasPrefix("-"): throw Usage(description: "unknown option \(arg)")
        case let arg:
            guard file == nil else { throw Usage(description: "one address book only") }
            file = arg
        }
        i += 1
    }
    guard let server else { throw Usage(description: "--server URL is required") }
    guard let file else { throw Usage(description: "the address book (CSV) is required") }
    return (server, file, configuration)
}

func run() async -> Int32 {
    let usage = "usage: psi-swift-sample --server URL [--token-file FILE] [--protocol auto|fewest-bytes|dh|ot|cm20] [--region CC] [--cache-dir DIR] contacts.csv"
    do {
        let (server, file, configuration) = try parseArguments(Array(CommandLine.arguments.dropFirst()))
        guard let data = FileManager.default.contents(atPath: file) else {
            throw Usage(description: "cannot read \(file)")
        }
        let contacts = try AddressBook.parse(data)
        let discovery = try ContactDiscovery(serverURL: server, configuration: configuration)
        let result = try await discovery.match(contacts) { $0.value }
        print(DiscoveryViewModel.summary(result))
        for row in DiscoveryViewModel.rows(result) {
            print("match: \(row.name)\t\(row.label)")
        }
        for r in result.rejected {
            print("rejected: row \(r.index + 1) (\(r.contact.name)): \(r.reason)")
        }
        if let choice = result.choice {
            print("choice: \(choice.protocol) by \(choice.policy), network '\(choice.network)'")
            for p in choice.predictions {
                print("  \(p.protocol): predicted \(p.totalMicros / 1000) ms, \(p.bytesUp + p.bytesDown) B")
            }
        } else {
            print("choice: fixed \(result.protocol)")
        }
        return 0
    } catch is HelpAsked {
        print(usage)
        return 0
    } catch let e as Usage {
        FileHandle.standardError.write(Data(((e.description.isEmpty ? "" : "psi-swift-sample: \(e.description)\n") + usage + "\n").utf8))
        return 2
    } catch {
        FileHandle.standardError.write(Data("psi-swift-sample: \(error.localizedDescription)\n".utf8))
        return 1
    }
}

exit(await run())
