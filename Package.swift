// swift-tools-version: 6.2
// The Swift SDK of private contact discovery (ios/README.md). An app adds this repository
// by its URL and depends on the library product `ContactDiscovery`.
//
// The native library (bindings/psi-ffi, Rust) comes in as the module `PsiFFIFfi`:
// - on Apple platforms, a binary target: the XCFramework that ios/build-xcframework.sh
//   builds on a Mac (iOS device, iOS simulator arm64 + x86_64, macOS);
// - on Linux, a system library: ios/Sources/PsiFFIFfi holds the uniffi header and a module
//   map that links `psi_ffi`; the static library comes from cargo, and its folder is given on
//   the command line (`swift build -Xlinker -L<dir>`, as ci/swift.sh does).
// No unsafe flags: an app can consume this package as a versioned dependency.
import PackageDescription

#if os(Linux)
let nativeLibrary: Target = .systemLibrary(name: "PsiFFIFfi", path: "ios/Sources/PsiFFIFfi")
#else
let nativeLibrary: Target = .binaryTarget(name: "PsiFFIFfi", path: "ios/build/PsiFFIFfi.xcframework")
#endif

/// The hand-written targets: Swift 6 mode (complete strict concurrency), warnings are errors.
let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]

let package = Package(
    name: "ContactDiscovery",
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [
        .library(name: "ContactDiscovery", targets: ["ContactDiscovery"]),
        .executable(name: "psi-swift-sample", targets: ["psi-swift-sample"]),
    ],
    targets: [
        nativeLibrary,
        // uniffi's generated Swift (committed; checked against the generator by ci/swift.sh).
        // Swift 5 mode: uniffi 0.32.2's async foreign-trait code is an error in Swift 6 mode
        // (uniffi-rs #2929, fixed after 0.32.2 by #2943). See docs/adr/0031-swift-sdk.md.
        .target(
            name: "PsiFFI",
            dependencies: ["PsiFFIFfi"],
            path: "ios/Sources/PsiFFI",
            swiftSettings: [.swiftLanguageMode(.v5)]
        ),
        // The public API: maps types, threads and errors; no protocol logic.
        .target(
            name: "ContactDiscovery",
            dependencies: ["PsiFFI"],
            path: "ios/Sources/ContactDiscovery",
            swiftSettings: strict
        ),
        // The sample apps' platform-neutral logic: address book parsing, the view model.
        .target(
            name: "DiscoverySampleKit",
            dependencies: ["ContactDiscovery"],
            path: "ios/Samples/DiscoverySampleKit",
            swiftSettings: strict
        ),
        // The command-line sample (runs on Linux and macOS).
        .executableTarget(
            name: "psi-swift-sample",
            dependencies: ["DiscoverySampleKit", "ContactDiscovery"],
            path: "ios/Samples/CommandLine",
            swiftSettings: strict
        ),
        // ci/bench-swift.sh: the SDK's time against `psi match` (not a product).
        .executableTarget(
            name: "psi-swift-bench",
            dependencies: ["ContactDiscovery"],
            path: "ios/Benchmarks",
            swiftSettings: strict
        ),
        .testTarget(
            name: "ContactDiscoveryTests",
            dependencies: ["ContactDiscovery", "DiscoverySampleKit"],
            path: "ios/Tests/ContactDiscoveryTests",
            swiftSettings: strict
        ),
    ]
)
