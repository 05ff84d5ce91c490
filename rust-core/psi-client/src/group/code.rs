//! The group code the leader shows the other phones (QR, message): the group id the
//! server sees, `.`, and the 128-bit secret it never sees, in RFC 4648 base32 without
//! padding (26 letters and digits; read case-insensitively).

use super::GroupError;
use super::envelope::SECRET_BYTES;
use zeroize::Zeroizing;

const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// A parsed group code. Its `Display` is the code to show; `Debug` hides the secret.
#[derive(Clone)]
pub struct GroupCode {
    /// The server's group id.
    pub group_id: String,
    pub(crate) secret: Zeroizing<[u8; SECRET_BYTES]>,
}

impl std::fmt::Debug for GroupCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCode")
            .field("group_id", &self.group_id)
            .finish_non_exhaustive()
    }
}

fn base32(bytes: &[u8]) -> String {
    let mut out = String::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in bytes {
        acc = (acc << 8) | b as u32;
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (5 - bits)) & 31) as usize] as char);
    }
    out
}

/// Base32 characters of the secret: `ceil(8 * 16 / 5)`.
const SECRET_CHARS: usize = (8 * SECRET_BYTES).div_ceil(5);

fn unbase32(text: &str) -> Option<Zeroizing<[u8; SECRET_BYTES]>> {
    if text.len() != SECRET_CHARS {
        return None;
    }
    let mut out = Zeroizing::new([0u8; SECRET_BYTES]);
    let (mut acc, mut bits, mut n) = (0u32, 0u32, 0usize);
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c.to_ascii_uppercase())? as u32;
        acc = (acc << 5) | v;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            *out.get_mut(n)? = (acc >> bits) as u8;
            n += 1;
        }
        acc &= (1 << bits) - 1;
    }
    // Exactly the secret's bytes, and the unused low bits zero (one spelling per secret).
    (n == SECRET_BYTES && acc == 0).then_some(out)
}

impl GroupCode {
    pub(crate) fn new(group_id: String, secret: [u8; SECRET_BYTES]) -> GroupCode {
        GroupCode {
            group_id,
            secret: Zeroizing::new(secret),
        }
    }
}

impl std::str::FromStr for GroupCode {
    type Err = GroupError;

    fn from_str(s: &str) -> Result<Self, GroupError> {
        let (id, secret) = s.trim().rsplit_once('.').ok_or(GroupError::BadCode)?;
        let ok_id = !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok_id {
            return Err(GroupError::BadCode);
        }
        let secret = unbase32(secret).ok_or(GroupError::BadCode)?;
        Ok(GroupCode {
            group_id: id.to_string(),
            secret,
        })
    }
}

impl std::fmt::Display for GroupCode {
    /// The code to show: holds the secret, so show it only to the group.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.group_id, base32(self.secret.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_refuse_other_spellings() {
        let c = GroupCode::new("ab12-00ff".into(), [0xa5; 16]);
        let text = c.to_string();
        assert_eq!(text.split('.').nth(1).unwrap().len(), 26);
        let back: GroupCode = text.parse().unwrap();
        assert_eq!(back.group_id, "ab12-00ff");
        assert_eq!(*back.secret, [0xa5; 16]);
        let lower: GroupCode = text.to_lowercase().parse().unwrap();
        assert_eq!(*lower.secret, [0xa5; 16]);
        assert!(
            !format!("{c:?}").contains(&text[10..]),
            "Debug hides the secret"
        );
        // RFC 4648 §10: "foobar" is MZXW6YTBOI.
        assert_eq!(base32(b"foobar"), "MZXW6YTBOI");
        for bad in [
            "",
            "nodot",
            ".AAAAAAAAAAAAAAAAAAAAAAAAAA",
            "a-1.AAAA",
            "a-1.AAAAAAAAAAAAAAAAAAAAAAAAAB",
            "a-1.AAAAAAAAAAAAAAAAAAAAAAAAA1",
            "A-1.AAAAAAAAAAAAAAAAAAAAAAAAAA",
            "a-1.AAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert!(bad.parse::<GroupCode>().is_err(), "{bad:?}");
        }
        assert!(
            "a-1.AAAAAAAAAAAAAAAAAAAAAAAAAA"
                .parse::<GroupCode>()
                .is_ok()
        );
    }
}
