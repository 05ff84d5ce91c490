// The iOS sample app's SwiftUI views. Apple platforms only: NOT COMPILED on the project's
// Linux machines (no SwiftUI there). Add this folder and ContactStoreAdapter.swift to an
// Xcode app target that depends on the package's `ContactDiscovery` and
// `DiscoverySampleKit` (the view model and address book logic, built and tested on Linux).
#if canImport(SwiftUI)
import ContactDiscovery
import DiscoverySampleKit
import SwiftUI

@main
struct ContactDiscoveryApp: App {
    var body: some Scene {
        WindowGroup { ContentView() }
    }
}

@MainActor
final class ScreenModel: ObservableObject {
    @Published var state: DiscoveryViewModel.State = .idle
    @Published var serverURL = "https://discovery.example.com"
    @Published var token = ""
    private var model: DiscoveryViewModel?
    private let links = LinkHintsMonitor()

    func run() async {
        do {
            guard let url = URL(string: serverURL) else { return }
            let caches = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first
            let discovery = try ContactDiscovery(
                serverURL: url,
                configuration: DiscoveryConfiguration(
                    token: token.isEmpty ? nil : token, cacheDirectory: caches, linkHints: links.current))
            let model = DiscoveryViewModel(discovery: discovery)
            model.onChange = { [weak self] in self?.state = $0 }
            self.model = model
            let contacts = try await ContactStoreAdapter().contacts()
            await model.match(contacts)
        } catch {
            state = .failed(message: error.localizedDescription, retryable: false)
        }
    }

    func cancel() { model?.cancel() }
}

struct ContentView: View {
    @StateObject private var screen = ScreenModel()

    var body: some View {
        NavigationStack {
            Form {
                Section("Server") {
                    TextField("URL", text: $screen.serverURL).textInputAutocapitalization(.never)
                    SecureField("Token", text: $screen.token)
                }
                Section {
                    switch screen.state {
                    case .idle:
                        Button("Find my contacts") { Task { await screen.run() } }
                    case .running(let phase):
                        HStack {
                            ProgressView()
                            Text(phase.map { "\($0)" } ?? "starting")
                            Spacer()
                            Button("Cancel", role: .cancel) { screen.cancel() }
                        }
                    case .finished(let result):
                        Text(DiscoveryViewModel.summary(result)).font(.footnote)
                        ForEach(Array(DiscoveryViewModel.rows(result).enumerated()), id: \.offset) { _, row in
                            LabeledContent(row.name, value: row.label)
                        }
                        Button("Again") { Task { await screen.run() } }
                    case .failed(let message, let retryable):
                        Text(message).foregroundStyle(.red)
                        if retryable { Button("Try again") { Task { await screen.run() } } }
                    case .cancelled:
                        Text("Cancelled")
                        Button("Start again") { Task { await screen.run() } }
                    }
                }
            }
            .navigationTitle("Contact discovery")
        }
    }
}
#endif
