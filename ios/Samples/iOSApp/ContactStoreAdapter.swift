// Reads the address book with CNContactStore (Apple platforms only: NOT COMPILED on the
// project's Linux machines). One SampleContact per phone number and per email, so that each
// can match on its own.
#if canImport(Contacts)
import Contacts
import DiscoverySampleKit

struct ContactStoreAdapter {
    enum Failure: Error { case denied }

    func contacts() async throws -> [SampleContact] {
        let store = CNContactStore()
        guard try await store.requestAccess(for: .contacts) else { throw Failure.denied }
        let keys: [CNKeyDescriptor] = [
            CNContactFormatter.descriptorForRequiredKeys(for: .fullName),
            CNContactPhoneNumbersKey as CNKeyDescriptor,
            CNContactEmailAddressesKey as CNKeyDescriptor,
        ]
        return try await Task.detached {
            var out: [SampleContact] = []
            try store.enumerateContacts(with: CNContactFetchRequest(keysToFetch: keys)) { contact, _ in
                let name = CNContactFormatter.string(from: contact, style: .fullName) ?? ""
                for phone in contact.phoneNumbers {
                    out.append(SampleContact(name: name, value: phone.value.stringValue))
                }
                for email in contact.emailAddresses {
                    out.append(SampleContact(name: name, value: email.value as String))
                }
            }
            return out
        }.value
    }
}
#endif
