//! The frame header (psi_core::wire::parse_frame) on raw bytes, for both protocols.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::Protocol;
use psi_core::wire::{HEADER_LEN, parse_frame};

fuzz_target!(|data: &[u8]| {
    for p in [Protocol::Dh, Protocol::Ot] {
        if let Ok(f) = parse_frame(data, p) {
            // Accepted: exactly a header and the body it announces.
            assert_eq!(f.body.len() + HEADER_LEN, data.len());
            assert_eq!(f.message_type, data[4]);
            assert_eq!(data[3], p.wire_id());
        }
    }
});
