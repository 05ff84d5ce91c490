package dev.psisdk

/** The registry and the address book the SDK's tests share. */
object TestData {
    /** Registered: 2,000 emails with labels, and three phone numbers (`identifier,label`). */
    @JvmField
    val REGISTRY: List<String> =
        (1..2000).map { "user$it@example.com,User $it" } +
            listOf("+14155550123,Phone A", "+14155550124,Phone B", "+442079460958,Phone UK")

    /**
     * An address book of 120 rows: 40 registered (some written differently from the
     * registry), 75 not registered, 5 invalid.
     */
    @JvmField
    val CONTACTS: List<String> = buildList {
        for (i in 1..37) add(if (i % 5 == 0) "  USER$i@Example.COM " else "user$i@example.com")
        add("(415) 555-0123")
        add("+1 415 555 0124")
        add("+44 20 7946 0958")
        for (i in 1..75) add("stranger$i@example.org")
        add("")
        add("not a contact")
        add("broken@")
        add("+1 (415) abc")
        add("12")
    }

    /** The indices of [CONTACTS] in the registry, with their labels. */
    @JvmField
    val EXPECTED: Map<Int, String> = buildMap {
        for (i in 1..37) put(i - 1, "User $i")
        put(37, "Phone A")
        put(38, "Phone B")
        put(39, "Phone UK")
    }

    /** The indices of [CONTACTS] that are not valid identifiers. */
    @JvmField
    val INVALID: Set<Int> = (115..119).toSet()
}
