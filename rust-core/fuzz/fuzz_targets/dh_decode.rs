//! DH-PSI decoders: QUERY and EVALUATION (`Elements::from_bytes`) and ENCODED_SET
//! (`EncodedSet::from_bytes`, then every coded value streamed). Whatever decodes must
//! encode back to the same bytes, and the values must come out sorted and below 2^L.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::Protocol;
use psi_core::dh::{Elements, EncodedSet, message_type};
use psi_fuzz::Framed;

fuzz_target!(|data: &[u8]| {
    let input = Framed::from_input(data);
    let msg = input.message(Protocol::Dh);
    for t in [message_type::QUERY, message_type::EVALUATION] {
        if let Ok(e) = Elements::from_bytes(&msg, t) {
            assert_eq!(e.to_bytes(t), msg, "elements round trip");
        }
    }
    if let Ok(set) = EncodedSet::from_bytes(&msg) {
        assert_eq!(set.to_bytes(), msg, "encoded set round trip");
        assert_eq!(set.encoded_len(), msg.len());
        let l = set.truncation_bits;
        let mut values = set.values();
        let mut last = 0u128;
        let mut n = 0u64;
        while let Ok(Some(v)) = values.next_value() {
            assert!(v >= last, "values sorted");
            assert!(l == 128 || v >> l == 0, "value below 2^L");
            last = v;
            n += 1;
            assert!(n <= u64::from(set.element_count), "no more than the count");
        }
    }
});
