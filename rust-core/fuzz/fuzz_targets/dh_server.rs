//! The DH-PSI server: `DhServer::handle_query` on any message, and the driver's path
//! (`Elements::from_bytes`, a count check, `DhServer::evaluate`). The two must agree,
//! and an answer is an EVALUATION of the query's size under the server's epoch.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::Protocol;
use psi_core::dh::{Elements, message_type};
use psi_fuzz::Framed;

fuzz_target!(|data: &[u8]| {
    let input = Framed::from_input(data);
    let f = psi_fuzz::dh();
    let msg = input.message(Protocol::Dh);
    let direct = f.server.handle_query(&msg);
    let driver = Elements::from_bytes(&msg, message_type::QUERY).and_then(|q| {
        let n = q.len();
        f.server.evaluate(&q).map(|e| (n, e))
    });
    match (direct, driver) {
        (Ok(a), Ok((n, b))) => {
            assert_eq!(a, b, "handle_query and evaluate agree");
            let e = Elements::from_bytes(&a, message_type::EVALUATION).expect("own evaluation");
            assert_eq!((e.len(), e.epoch), (n, f.epoch));
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "handle_query {:?} but decode + evaluate {:?}",
            a.is_ok(),
            b.is_ok()
        ),
    }
});
