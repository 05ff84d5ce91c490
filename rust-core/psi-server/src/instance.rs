//! Which instance a session lives on. Several `psi serve` instances share one store behind a
//! load balancer, but a session stays in the memory of the instance that created it, so its
//! id names that instance: `NAME-` followed by 32 lowercase hex digits (16 random bytes).
//! A proxy routes `/v1/sessions/{id}/...` by the part before the first `-`
//! (docs/deploy/nginx.conf); a client treats the whole id as opaque. The separator `-` is
//! URL-safe, never occurs in a name (`[a-z0-9]`), and is one of the characters every
//! released client already accepts in a session id, so older clients keep working.

use std::fmt;
use std::str::FromStr;

/// Separates the instance name from the random part of a session id.
const SEPARATOR: char = '-';

/// Longest instance name, in characters.
pub const MAX_INSTANCE_NAME_LEN: usize = 16;

/// An instance's name: 1 to [`MAX_INSTANCE_NAME_LEN`] characters of `[a-z0-9]`, the prefix
/// of every session id it makes (`psi serve --instance NAME`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InstanceName(String);

/// A string that is not an instance name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an instance name is 1 to 16 characters of a-z and 0-9")]
pub struct InvalidInstanceName;

impl InstanceName {
    /// 8 random hex digits: the name of an instance started without one. Distinct
    /// instances get distinct names with overwhelming probability, so an unnamed
    /// instance still answers another's session `wrong_instance`, but a proxy cannot
    /// route to a name it does not know: give each instance behind a balancer its name.
    /// (Without an OS random source, which the first session would need anyway, the
    /// digits come from the process id and the clock: still distinct between processes.)
    pub fn random() -> InstanceName {
        let mut raw = [0u8; 4];
        match psi_core::rng::os_rng() {
            Ok(mut rng) => rand_core::Rng::fill_bytes(&mut rng, &mut raw),
            Err(_) => {
                use sha2::Digest;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                let d = sha2::Sha256::new()
                    .chain_update(std::process::id().to_le_bytes())
                    .chain_update(now.as_nanos().to_le_bytes())
                    .finalize();
                raw.copy_from_slice(&d[..4]);
            }
        }
        InstanceName(hex::encode(raw))
    }

    /// The name as written in session ids.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A new session id of this instance: the name, `-`, 32 hex digits of `random`.
    pub(crate) fn session_id(&self, random: &[u8; 16]) -> String {
        format!("{}{SEPARATOR}{}", self.0, hex::encode(random))
    }

    /// Who holds session `id`: this instance, another named one, or nobody (an id of
    /// another form, e.g. the 32 bare hex digits of servers before instance names).
    pub(crate) fn owner_of<'a>(&self, id: &'a str) -> Owner<'a> {
        match id.split_once(SEPARATOR) {
            Some((name, _)) if valid(name) => {
                if name == self.0 {
                    Owner::This
                } else {
                    Owner::Other(name)
                }
            }
            _ => Owner::Nobody,
        }
    }
}

/// The instance a session id names ([`InstanceName::owner_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner<'a> {
    /// This instance: the id is looked up here.
    This,
    /// Another instance (its name): the request reached the wrong instance.
    Other(&'a str),
    /// No instance: no such session anywhere.
    Nobody,
}

fn valid(name: &str) -> bool {
    (1..=MAX_INSTANCE_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl FromStr for InstanceName {
    type Err = InvalidInstanceName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if valid(s) {
            Ok(InstanceName(s.to_string()))
        } else {
            Err(InvalidInstanceName)
        }
    }
}

impl fmt::Display for InstanceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_lowercase_alphanumerics() {
        for ok in ["a", "0", "a1", "abcdefghij012345"] {
            assert_eq!(ok.parse::<InstanceName>().unwrap().as_str(), ok);
        }
        for bad in ["", "A", "a-b", "a.b", "a_b", "abcdefghij0123456", "é", " a"] {
            assert_eq!(
                bad.parse::<InstanceName>(),
                Err(InvalidInstanceName),
                "{bad:?}"
            );
        }
        let r = InstanceName::random();
        assert_eq!(r.as_str().len(), 8);
        assert!(valid(r.as_str()));
    }

    #[test]
    fn ids_name_their_instance() {
        let a: InstanceName = "a1".parse().unwrap();
        let b: InstanceName = "b2".parse().unwrap();
        let id = a.session_id(&[0xab; 16]);
        assert_eq!(id, format!("a1-{}", "ab".repeat(16)));
        assert_eq!(a.owner_of(&id), Owner::This);
        assert_eq!(b.owner_of(&id), Owner::Other("a1"));
        // The old form (32 bare hex digits) and odd ids name nobody.
        for id in ["ab".repeat(16), "-abc".into(), "A1-abc".into(), "".into()] {
            assert_eq!(a.owner_of(&id), Owner::Nobody, "{id:?}");
        }
    }
}
