//! Tracking ids (DESIGN.md part B "Ids", seed 001 problems 1 and 3).
//!
//! 32 characters of the URL-safe base64 alphabet (`A–Z a–z 0–9 - _`):
//!
//! | chars | content |
//! |---|---|
//! | 0..7 | creation time, Unix ms, 42 bits big-endian — the day partition is known from the id alone, and ids sort by time |
//! | 7..29 | 132 bits from a CSPRNG (`rand::rng()`, ChaCha) — unguessable, so an id never reveals another recipient's link |
//! | 29..32 | 18-bit keyed check (SipHash-2-4 with the server's secret) over chars 0..29 |
//!
//! A malformed or forged id fails [`IdCodec::parse`] without touching storage: a random
//! 32-character string passes the check with probability 2⁻¹⁸.

use rand::Rng;
use siphasher::sip::SipHasher24;
use std::hash::Hasher;
use tidemark_core::day::Day;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// Length of an id in characters.
pub const ID_LEN: usize = 32;
const TIME_CHARS: usize = 7;
const RANDOM_CHARS: usize = 22;
const CHECK_CHARS: usize = 3;
const BODY_LEN: usize = TIME_CHARS + RANDOM_CHARS;

fn value_of(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'-' => Some(62),
        b'_' => Some(63),
        _ => None,
    }
}

/// A valid tracking id and the time it carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LinkId {
    text: String,
    created_ms: i64,
}

impl LinkId {
    /// The 32 characters.
    pub fn as_str(&self) -> &str {
        &self.text
    }
    /// Creation time (Unix ms) embedded in the id.
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    /// The day partition that holds the record.
    pub fn day(&self) -> Day {
        Day::of_utc_ms(self.created_ms)
    }
}

impl std::fmt::Display for LinkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why an id was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadId {
    /// Not 32 characters.
    #[error("a tracking id has 32 characters")]
    Length,
    /// A character outside the URL-safe base64 alphabet.
    #[error("a tracking id uses only A-Z a-z 0-9 - _")]
    Alphabet,
    /// The keyed check does not match: forged or mistyped.
    #[error("tracking id check failed")]
    Check,
}

/// Makes and checks ids with one secret key (keep it stable: ids made with another key are
/// rejected).
#[derive(Clone)]
pub struct IdCodec {
    key: [u8; 16],
}

impl std::fmt::Debug for IdCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdCodec { key: <secret> }")
    }
}

impl IdCodec {
    /// A codec with this 128-bit secret.
    pub fn new(key: [u8; 16]) -> Self {
        Self { key }
    }

    /// A value that tells two secrets apart without revealing either: SipHash-2-4 keyed by the
    /// secret over a fixed label, 16 hex digits. Nodes sharing a link store compare it, so a
    /// node with another `links.id_secret` is refused instead of rejecting every id the
    /// others made.
    pub fn fingerprint(&self) -> String {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(b"tidemark links id secret fingerprint");
        format!("{:016x}", h.finish())
    }

    fn check(&self, body: &[u8]) -> [u8; CHECK_CHARS] {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(body);
        let v = h.finish();
        let mut out = [0u8; CHECK_CHARS];
        for (i, o) in out.iter_mut().enumerate() {
            *o = ALPHABET[((v >> (6 * i)) & 63) as usize];
        }
        out
    }

    /// A new id created at `now_ms` (Unix ms, must be ≥ 0 and < 2⁴²).
    pub fn generate(&self, now_ms: i64) -> LinkId {
        let mut rng = rand::rng();
        let mut buf = [0u8; ID_LEN];
        let t = now_ms.clamp(0, (1 << 42) - 1) as u64;
        for (i, b) in buf[..TIME_CHARS].iter_mut().enumerate() {
            *b = ALPHABET[((t >> (6 * (TIME_CHARS - 1 - i))) & 63) as usize];
        }
        for b in &mut buf[TIME_CHARS..BODY_LEN] {
            *b = ALPHABET[rng.random_range(0..64)];
        }
        let check = self.check(&buf[..BODY_LEN]);
        buf[BODY_LEN..].copy_from_slice(&check);
        LinkId {
            text: String::from_utf8_lossy(&buf).into_owned(),
            created_ms: t as i64,
        }
    }

    /// Validates an id without any storage access.
    pub fn parse(&self, s: &str) -> Result<LinkId, BadId> {
        let b = s.as_bytes();
        if b.len() != ID_LEN {
            return Err(BadId::Length);
        }
        let mut t: u64 = 0;
        for (i, &c) in b.iter().enumerate() {
            let v = value_of(c).ok_or(BadId::Alphabet)?;
            if i < TIME_CHARS {
                t = (t << 6) | u64::from(v);
            }
        }
        if self.check(&b[..BODY_LEN]) != b[BODY_LEN..] {
            return Err(BadId::Check);
        }
        Ok(LinkId {
            text: s.to_owned(),
            created_ms: t as i64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_999_534_123; // 2026-11-30T00:45:34.123Z

    #[test]
    fn generated_ids_parse_back_with_their_time() {
        let codec = IdCodec::new(*b"0123456789abcdef");
        let id = codec.generate(NOW);
        assert_eq!(id.as_str().len(), 32);
        let parsed = codec.parse(id.as_str()).unwrap();
        assert_eq!(parsed.created_ms(), NOW);
        assert_eq!(parsed.day().to_string(), "2026-11-30");
        assert!(id.as_str().bytes().all(|c| value_of(c).is_some()));
    }

    #[test]
    fn ids_are_distinct_and_time_ordered() {
        let codec = IdCodec::new([7; 16]);
        let a = codec.generate(NOW);
        let b = codec.generate(NOW);
        let c = codec.generate(NOW + 1);
        assert_ne!(a, b);
        assert_eq!(a.as_str()[..7], b.as_str()[..7]);
        assert!(a.as_str()[..7] < c.as_str()[..7]);
    }

    #[test]
    fn malformed_and_forged_ids_are_rejected() {
        let codec = IdCodec::new([7; 16]);
        let id = codec.generate(NOW).as_str().to_owned();
        assert_eq!(codec.parse(&id[..31]), Err(BadId::Length));
        assert_eq!(
            codec.parse(&format!("{}!", &id[..31])),
            Err(BadId::Alphabet)
        );
        // Change one random character: the check fails.
        let mut forged = id.clone().into_bytes();
        forged[10] = if forged[10] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            codec.parse(std::str::from_utf8(&forged).unwrap()),
            Err(BadId::Check)
        );
        // Another key's ids are not ours.
        let other = IdCodec::new([8; 16]).generate(NOW);
        assert_eq!(codec.parse(other.as_str()), Err(BadId::Check));
        // Random strings almost never pass (2^-18 each).
        let passes = (0..2000)
            .filter(|i| {
                let mut s = IdCodec::new([*i as u8; 16])
                    .generate(NOW)
                    .as_str()
                    .to_owned();
                s.replace_range(31.., "A");
                codec.parse(&s).is_ok()
            })
            .count();
        assert!(passes < 5, "{passes}");
    }
}
