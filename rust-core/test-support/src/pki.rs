//! Test-only PKI shared by the TLS tests of psi-server, psi-client and psi-cli.

/// A private CA and a certificate for `localhost` and `127.0.0.1` signed by it:
/// (CA PEM, server chain PEM, server key PEM).
pub fn pki() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}
