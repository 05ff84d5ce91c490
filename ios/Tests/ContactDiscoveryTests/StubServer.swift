import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A small HTTP/1.1 server of the tests' own on loopback: answers each request with what
/// `handler` says (raw bytes, a forward to a real server, a hold, or nothing at all), and
/// records what it saw. One thread per connection; every connection is closed after one
/// exchange. Bounded: a request head over 64 KiB or a body over 16 MiB closes the connection.
final class StubServer: @unchecked Sendable {
    struct Request: Sendable {
        let method: String
        let path: String
        let headers: [String: String]
        let body: Data
    }

    enum Action: Sendable {
        /// Write these bytes (a status line, headers, a body: possibly broken on purpose).
        case respond(Data)
        /// Forward to the real server at `port` after holding the request `holdMs`
        /// milliseconds; if the client goes away during the hold, nothing is forwarded.
        case forward(port: UInt16, holdMs: Int)
        /// Never answer; close when the client does (or after 60 s).
        case hang
    }

    let port: UInt16
    private let fd: Int32
    private let handler: @Sendable (Request) -> Action
    private let lock = NSLock()
    private var _seen: [String] = []
    private var _headers: [String: [String: String]] = [:]
    private var _responses: [String: Data] = [:]
    private var _goneDuringHold: [String] = []
    private var _stopped = false

    /// `METHOD path` of every request, in arrival order.
    var seen: [String] { lock.withLock { _seen } }
    /// Requests whose client closed the connection while the server held them.
    var goneDuringHold: [String] { lock.withLock { _goneDuringHold } }
    /// The headers of the last request `METHOD path`.
    func headers(_ key: String) -> [String: String]? { lock.withLock { _headers[key] } }
    /// The last forwarded response to `METHOD path`.
    func response(_ key: String) -> Data? { lock.withLock { _responses[key] } }

    init(handler: @escaping @Sendable (Request) -> Action) throws {
        self.handler = handler
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw HarnessError("socket failed") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw HarnessError("bind/listen failed")
        }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        port = UInt16(bigEndian: addr.sin_port)
        self.fd = fd
        let server = self
        Thread.detachNewThread { server.acceptLoop() }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    func stop() {
        let first: Bool = lock.withLock {
            defer { _stopped = true }
            return !_stopped
        }
        if first {
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
        }
    }

    deinit { stop() }

    private func acceptLoop() {
        while true {
            let client = accept(fd, nil, nil)
            if client < 0 {
                if lock.withLock({ _stopped }) { return }
                continue
            }
            Thread.detachNewThread { [self] in
                serve(client)
                close(client)
            }
        }
    }

    private func serve(_ client: Int32) {
        guard let request = Self.readRequest(client) else { return }
        let key = "\(request.method) \(request.path)"
        lock.withLock {
            _seen.append(key)
            _headers[key] = request.headers
        }
        switch handler(request) {
        case .respond(let bytes):
            Self.writeAll(client, bytes)
        case .hang:
            _ = Self.waitForClose(client, ms: 60_000)
        case .forward(let port, let holdMs):
            if holdMs > 0 && Self.waitForClose(client, ms: holdMs) {
                lock.withLock { _goneDuringHold.append(key) }
                return
            }
            guard let response = Self.forward(request, port: port) else { return }
            lock.withLock { _responses[key] = response }
            Self.writeAll(client, response)
        }
    }

    /// A complete response with `status`, a JSON or other `body`, and `Connection: close`.
    static func response(status: Int, reason: String = "X", contentType: String = "application/json",
                         headers: [String] = [], body: Data) -> Data {
        var head = "HTTP/1.1 \(status) \(reason)\r\ncontent-type: \(contentType)\r\ncontent-length: \(body.count)\r\nconnection: close\r\n"
        for h in headers { head += h + "\r\n" }
        return Data((head + "\r\n").utf8) + body
    }

    /// True if the client closed the connection within `ms` milliseconds.
    static func waitForClose(_ client: Int32, ms: Int) -> Bool {
        let deadline = Date().addingTimeInterval(Double(ms) / 1000)
        while Date() < deadline {
            var p = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, 20)
            if r > 0 {
                var byte: UInt8 = 0
                let n = recv(client, &byte, 1, Int32(MSG_PEEK))
                if n <= 0 { return true }
            }
        }
        return false
    }

    static func writeAll(_ fd: Int32, _ data: Data) {
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                #if canImport(Glibc)
                let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                #else
                let n = send(fd, raw.baseAddress! + offset, raw.count - offset, 0)
                #endif
                if n <= 0 { return }
                offset += n
            }
        }
    }

    static func readRequest(_ fd: Int32) -> Request? {
        var buffer = Data()
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let separator = Data("\r\n\r\n".utf8)
        while buffer.range(of: separator) == nil {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 || buffer.count > 65_536 { return nil }
            buffer.append(contentsOf: chunk[0..<n])
        }
        let headEnd = buffer.range(of: separator)!
        let head = String(decoding: buffer[..<headEnd.lowerBound], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        guard length <= 16 << 20 else { return nil }
        var body = Data(buffer[headEnd.upperBound...])
        while body.count < length {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            body.append(contentsOf: chunk[0..<n])
        }
        return Request(method: String(requestLine[0]), path: String(requestLine[1]), headers: headers, body: body)
    }

    /// Sends `request` to the server on `port` (with `Connection: close`) and returns its
    /// whole response, with `connection: close` added.
    static func forward(_ request: Request, port: UInt16) -> Data? {
        #if canImport(Glibc)
        let up = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let up = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard up >= 0 else { return nil }
        defer { close(up) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(up, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return nil }
        var head = "\(request.method) \(request.path) HTTP/1.1\r\n"
        for (name, value) in request.headers where name != "connection" && name != "content-length" {
            head += "\(name): \(value)\r\n"
        }
        head += "content-length: \(request.body.count)\r\nconnection: close\r\n\r\n"
        writeAll(up, Data(head.utf8) + request.body)
        var response = Data()
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = recv(up, &chunk, chunk.count, 0)
            if n <= 0 { break }
            response.append(contentsOf: chunk[0..<n])
        }
        guard let lineEnd = response.range(of: Data("\r\n".utf8)) else { return nil }
        var out = Data(response[..<lineEnd.upperBound])
        out.append(Data("connection: close\r\n".utf8))
        out.append(response[lineEnd.upperBound...])
        return out
    }
}
