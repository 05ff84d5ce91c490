//! An HTTP body across the FFI, copied once each way.
//!
//! uniffi 0.32 passes a `Vec<u8>` as a sequence of `u8`: its Rust side reads and writes it
//! one byte at a time, with a bounds check per byte (about 2.5 ns a byte here: 8-9 ms for
//! an OT-PSI run's 3.4 MB of responses, the largest part of the gap between the Kotlin SDK
//! over OkHttp and `psi match`; docs/benchmarks.md, 2026-12-02). [`Body`] has exactly the
//! same wire form (a big-endian `i32` length, then the bytes) and the same type metadata
//! (`Vec<u8>`: `ByteArray` in Kotlin, `Data` in Swift), so the generated bindings do not
//! change; only the Rust side copies the bytes with one `memcpy`.

use uniffi::{FfiConverter, MetadataBuffer, RustBuffer, TypeId};

/// The bytes of a request or response body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body(pub Vec<u8>);

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Body {
        Body(v)
    }
}

impl From<Body> for Vec<u8> {
    fn from(b: Body) -> Vec<u8> {
        b.0
    }
}

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

// SAFETY: the wire form and the metadata are those of uniffi's own `Vec<u8>` converter
// (ffi_converter_impls.rs: an `i32` count, then each `u8`), which the generated Kotlin and
// Swift read and write (`FfiConverterByteArray`, `FfiConverterData`); `tests` below check
// both against it.
unsafe impl FfiConverter<crate::UniFfiTag> for Body {
    type FfiType = RustBuffer;

    fn lower(obj: Body) -> RustBuffer {
        let mut buf = Vec::with_capacity(4 + obj.0.len());
        <Body as FfiConverter<crate::UniFfiTag>>::write(obj, &mut buf);
        RustBuffer::from_vec(buf)
    }

    fn try_lift(v: RustBuffer) -> uniffi::Result<Body> {
        let vec = v.destroy_into_vec();
        let mut buf = vec.as_slice();
        let value = <Body as FfiConverter<crate::UniFfiTag>>::try_read(&mut buf)?;
        if !buf.is_empty() {
            uniffi::deps::anyhow::bail!(
                "junk data left in buffer after lifting (count: {})",
                buf.len()
            );
        }
        Ok(value)
    }

    fn write(obj: Body, buf: &mut Vec<u8>) {
        // uniffi limits sequences to i32::MAX items; a body is capped far below that by
        // the driver's response limits (32 MiB by default).
        let len = i32::try_from(obj.0.len()).unwrap_or(i32::MAX);
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(&obj.0[..len as usize]);
    }

    fn try_read(buf: &mut &[u8]) -> uniffi::Result<Body> {
        let Some((head, rest)) = buf.split_first_chunk::<4>() else {
            uniffi::deps::anyhow::bail!("not enough bytes remaining in buffer for a length");
        };
        let len = usize::try_from(i32::from_be_bytes(*head))?;
        if rest.len() < len {
            uniffi::deps::anyhow::bail!(
                "not enough bytes remaining in buffer ({} < {len})",
                rest.len()
            );
        }
        let (bytes, rest) = rest.split_at(len);
        *buf = rest;
        Ok(Body(bytes.to_vec()))
    }

    const TYPE_ID_META: MetadataBuffer = <Vec<u8> as TypeId<crate::UniFfiTag>>::TYPE_ID_META;
}

uniffi::derive_ffi_traits!(local Body);

#[cfg(test)]
mod tests {
    use super::*;
    use uniffi::{Lift, Lower};

    type Tag = crate::UniFfiTag;

    fn bodies() -> Vec<Vec<u8>> {
        vec![vec![], vec![7], (0..=255).collect(), vec![0xa5; 100_003]]
    }

    #[test]
    fn writes_what_uniffi_writes_for_a_vec_of_bytes() {
        for b in bodies() {
            let mut ours = Vec::new();
            <Body as Lower<Tag>>::write(Body(b.clone()), &mut ours);
            let mut theirs = Vec::new();
            <Vec<u8> as Lower<Tag>>::write(b, &mut theirs);
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn reads_what_uniffi_writes_and_leaves_the_rest() {
        for b in bodies() {
            let mut wire = Vec::new();
            <Vec<u8> as Lower<Tag>>::write(b.clone(), &mut wire);
            wire.extend_from_slice(b"next field");
            let mut buf = wire.as_slice();
            let read = <Body as Lift<Tag>>::try_read(&mut buf).expect("read");
            assert_eq!(read.0, b);
            assert_eq!(buf, b"next field");
            // And the lowered buffer lifts back to the same bytes.
            let lifted =
                <Body as Lift<Tag>>::try_lift(<Body as Lower<Tag>>::lower(Body(b.clone())))
                    .expect("lift");
            assert_eq!(lifted.0, b);
        }
    }

    #[test]
    fn refuses_short_negative_and_trailing_input() {
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![0, 0, 1],
            vec![0, 0, 0, 5, 1, 2, 3, 4],
            (-1i32).to_be_bytes().to_vec(),
        ];
        for wire in cases {
            let mut buf = wire.as_slice();
            assert!(<Body as Lift<Tag>>::try_read(&mut buf).is_err(), "{wire:?}");
        }
        let mut wire = Vec::new();
        <Vec<u8> as Lower<Tag>>::write(vec![1, 2], &mut wire);
        wire.push(0);
        assert!(<Body as Lift<Tag>>::try_lift(RustBuffer::from_vec(wire)).is_err());
    }

    #[test]
    fn has_the_metadata_of_a_vec_of_bytes() {
        let ours = <Body as TypeId<Tag>>::TYPE_ID_META;
        let theirs = <Vec<u8> as TypeId<Tag>>::TYPE_ID_META;
        assert_eq!(ours.as_ref(), theirs.as_ref());
    }
}
