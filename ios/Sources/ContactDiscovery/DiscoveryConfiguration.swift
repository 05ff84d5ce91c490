import Foundation
import PsiFFI

/// Settings of a ``ContactDiscovery`` client. Every property starts at the native library's
/// default (`defaultDiscoveryConfig()`, owned by the Rust client: a 60 s timeout per request,
/// responses up to 32 MiB (a phone's cap; each request has a smaller one of its own), 2 retries, a 64 MiB registry cache, labels fetched, the automatic
/// choice for the fastest run), except ``defaultRegion``, which starts at the device's region.
public struct DiscoveryConfiguration: Sendable, Hashable, CustomStringConvertible {
    /// Bearer token, if the server requires one. Surrounding whitespace (a token file's
    /// final newline) is ignored by the native library. Kept out of ``description``.
    public var token: String?
    /// Region for phone numbers written without a country code (ISO 3166 alpha-2, such as
    /// `US`, `GB`, `DE`). Default: the device's region (`Locale.current`), or `US` where the
    /// device has none.
    public var defaultRegion: String
    /// How runs pick their protocol unless a call says otherwise.
    public var protocolChoice: ProtocolChoice
    /// Worker threads for the protocol's computation; 0 means one per core.
    public var threads: Int
    /// Limit on each HTTP request (connect, send, receive), in milliseconds.
    public var timeoutMilliseconds: Int
    /// Largest response body accepted, in bytes (default 32 MiB: every protocol's largest
    /// response up to about 1.1 M registry entries). The ceiling of each request's own cap:
    /// health and session answers are capped at a few KB, protocol steps at what the
    /// protocol needs, error bodies at 16 KiB.
    public var maxResponseBytes: Int
    /// Whether to fetch the labels of matched contacts.
    public var fetchLabels: Bool
    /// Directory for the server's encoded registry (use the app's caches directory), so a
    /// second run downloads nothing while the registry is unchanged. `nil` keeps it in
    /// memory for the life of the client.
    public var cacheDirectory: URL?
    /// Largest encoded registry kept on disk, in bytes.
    public var cacheMaxBytes: Int
    /// Allow an `http://` server URL whose host is not loopback (development only: the token
    /// and the protocol messages then travel in the clear). Loopback is always allowed.
    public var allowInsecureHTTP: Bool
    /// How many times a run that failed with a retryable error is started again from a new
    /// session, after a backoff; 0 turns retries off. Each attempt counts against the
    /// caller's budget on the server.
    public var retries: Int
    /// What the app knows of the network, for runs that pass no hints of their own.
    public var linkHints: LinkHints
    /// Directory of `measurements.json`, the automatic choice's measurements (this device's
    /// costs, a link estimate per network, each server's last health). `nil`:
    /// ``cacheDirectory`` if set, else in memory for the life of the client.
    public var measurementsDirectory: URL?

    /// Settings with the given values; each omitted one takes its default.
    public init(
        token: String? = nil,
        defaultRegion: String? = nil,
        protocolChoice: ProtocolChoice? = nil,
        threads: Int? = nil,
        timeoutMilliseconds: Int? = nil,
        maxResponseBytes: Int? = nil,
        fetchLabels: Bool? = nil,
        cacheDirectory: URL? = nil,
        cacheMaxBytes: Int? = nil,
        allowInsecureHTTP: Bool? = nil,
        retries: Int? = nil,
        linkHints: LinkHints? = nil,
        measurementsDirectory: URL? = nil
    ) {
        let d = defaultDiscoveryConfig()
        self.token = token
        self.defaultRegion = defaultRegion ?? Self.deviceRegion ?? d.defaultRegion
        self.protocolChoice = protocolChoice ?? ProtocolChoice(d.protocol)
        self.threads = threads ?? Int(d.threads)
        self.timeoutMilliseconds = timeoutMilliseconds ?? Int(clamping: d.timeoutMs)
        self.maxResponseBytes = maxResponseBytes ?? Int(clamping: d.maxResponseBytes)
        self.fetchLabels = fetchLabels ?? d.fetchLabels
        self.cacheDirectory = cacheDirectory
        self.cacheMaxBytes = cacheMaxBytes ?? Int(clamping: d.cacheMaxBytes)
        self.allowInsecureHTTP = allowInsecureHTTP ?? d.allowInsecureHttp
        self.retries = retries ?? Int(d.retries)
        self.linkHints = linkHints ?? d.linkHints
        self.measurementsDirectory = measurementsDirectory
    }

    /// The device's region (`Locale.current`), if it has one: an ISO 3166 alpha-2 code. A
    /// locale without a country (`en`, or Linux's C locale: region `001`, the world) has none.
    static var deviceRegion: String? {
        #if canImport(Darwin)
        let region: String?
        if #available(iOS 16, macOS 13, *) {
            region = Locale.current.region?.identifier
        } else {
            region = Locale.current.regionCode
        }
        #else
        let region = Locale.current.region?.identifier
        #endif
        guard let region, region.count == 2, region.allSatisfy({ $0.isASCII && $0.isLetter }) else { return nil }
        return region.uppercased()
    }

    /// The settings without the token.
    public var description: String {
        "DiscoveryConfiguration(token: \(token == nil ? "none" : "set"), defaultRegion: \(defaultRegion), "
            + "protocolChoice: \(protocolChoice), threads: \(threads), timeoutMilliseconds: \(timeoutMilliseconds), "
            + "maxResponseBytes: \(maxResponseBytes), fetchLabels: \(fetchLabels), "
            + "cacheDirectory: \(cacheDirectory?.path ?? "none"), cacheMaxBytes: \(cacheMaxBytes), "
            + "allowInsecureHTTP: \(allowInsecureHTTP), retries: \(retries), "
            + "measurementsDirectory: \(measurementsDirectory?.path ?? "none"))"
    }

    /// The native record; negative numbers are refused here (the rest is checked in Rust).
    func ffi() throws -> DiscoveryConfig {
        func count(_ value: Int, _ name: String) throws -> UInt64 {
            guard value >= 0 else {
                throw ContactDiscoveryError.invalidInput(reason: "\(name) must not be negative")
            }
            return UInt64(value)
        }
        return DiscoveryConfig(
            token: token,
            defaultRegion: defaultRegion,
            threads: UInt32(clamping: try count(threads, "threads")),
            timeoutMs: try count(timeoutMilliseconds, "timeoutMilliseconds"),
            maxResponseBytes: try count(maxResponseBytes, "maxResponseBytes"),
            fetchLabels: fetchLabels,
            cacheDir: cacheDirectory?.path,
            cacheMaxBytes: try count(cacheMaxBytes, "cacheMaxBytes"),
            allowInsecureHttp: allowInsecureHTTP,
            retries: UInt32(clamping: try count(retries, "retries")),
            protocol: protocolChoice.ffi,
            linkHints: linkHints,
            measurementsDir: measurementsDirectory?.path
        )
    }
}
