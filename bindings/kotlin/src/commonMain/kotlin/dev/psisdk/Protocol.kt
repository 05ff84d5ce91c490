package dev.psisdk

/**
 * The private-set-intersection protocol a run uses (docs/protocol/ in the repository). Each
 * is also a fixed [ProtocolChoice].
 */
enum class Protocol : ProtocolChoice {
    /**
     * DH-PSI (RFC 9497 OPRF over ristretto255): the fewest bytes. The server's encoded
     * registry is downloaded once and cached on disk until the registry changes.
     */
    DH,

    /** OT-PSI (KKRT16 OT extension): far less computation, more bytes, several round trips. */
    OT,

    /**
     * CM20-PSI (Chase-Miao OPRF from OT extension): OT-like computation, fewer bytes than
     * OT-PSI. Only servers that enable it accept it (it trusts the client to follow the
     * protocol).
     */
    CM20,

    /**
     * GBF-PSI (PSZ14's random garbled Bloom filter over OT extension): no group operations per
     * item, the most bytes up. Only servers that enable it accept it (it trusts the client to
     * follow the protocol).
     */
    GBF,
}
