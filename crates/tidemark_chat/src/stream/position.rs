//! A stream client's position: what it has been sent, in a form it keeps (the SSE `id`) and
//! hands back to resume.

use std::collections::BTreeMap;

use crate::error::{ChatError, Result};

/// Most conversations a [`Position`] may name.
pub const MAX_POSITION_ENTRIES: usize = 10_000;

/// Where a client is.
///
/// - A named conversation: the last seq delivered to the client (or passed over with a
///   `reload`); `0` for none yet.
/// - An unnamed conversation, under a watermark W (Unix ms): the client has every readable
///   message committed at or before W and none after, so it resumes after the newest message
///   committed at or before W. A stream names a conversation only while that does not hold
///   of it (it delivered something newer than W, is behind, or waits at a gap), so a position
///   stays as short as the conversations active lately, however many the user has.
/// - Without a watermark (the `v1` form), an unnamed conversation resumes from its first
///   message.
///
/// The read pointer plays no part: it moves on other devices while this client is away, and
/// what those devices read this client has still to get.
///
/// Text form: `v2;<watermark_ms>` then `;<conversation_id>:<seq>` per named conversation, in
/// id order; `v1` then the entries (no watermark) is read too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    watermark_ms: Option<i64>,
    seqs: BTreeMap<String, u64>,
}

impl Position {
    /// Parses the text form. Errors: [`ChatError::Invalid`] saying what is wrong.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            ChatError::Invalid(format!(
                "position {:?} {why}: give the id of an event of this stream",
                tidemark_core::http::quoted(text, 64)
            ))
        };
        let mut parts = text.split(';');
        let watermark_ms = match parts.next() {
            Some("v1") => None,
            Some("v2") => {
                let w = parts.next().ok_or_else(|| bad("has no watermark"))?;
                let w = plain_number(w).ok_or_else(|| bad("has a bad watermark"))?;
                Some(i64::try_from(w).map_err(|_| bad("has a watermark out of range"))?)
            }
            _ => return Err(bad("does not start with v1 or v2")),
        };
        let mut seqs = BTreeMap::new();
        for part in parts {
            let (cid, seq) = part.split_once(':').ok_or_else(|| bad("is malformed"))?;
            crate::service::check_conversation_id(cid).map_err(|_| bad("names no conversation"))?;
            let seq = plain_number(seq).ok_or_else(|| bad("has a bad seq"))?;
            if i64::try_from(seq).is_err() {
                return Err(bad("has a seq out of range"));
            }
            if seqs.insert(cid.to_owned(), seq).is_some() {
                return Err(bad("names a conversation twice"));
            }
            if seqs.len() > MAX_POSITION_ENTRIES {
                return Err(bad("names too many conversations"));
            }
        }
        Ok(Self { watermark_ms, seqs })
    }

    /// A position with watermark `watermark_ms` naming `(conversation_id, seq)` entries, which
    /// come in conversation id order.
    pub(super) fn encode_entries<'a>(
        watermark_ms: i64,
        entries: impl Iterator<Item = (&'a str, u64)>,
    ) -> String {
        let mut out = format!("v2;{}", watermark_ms.max(0));
        push_entries(&mut out, entries);
        out
    }

    /// A position without a watermark (`v1`): unnamed conversations resume from their first
    /// message. `entries` come in conversation id order.
    pub(super) fn encode_from_first<'a>(entries: impl Iterator<Item = (&'a str, u64)>) -> String {
        let mut out = String::from("v1");
        push_entries(&mut out, entries);
        out
    }

    /// The last seq delivered in `cid`, if the position names it.
    pub fn get(&self, cid: &str) -> Option<u64> {
        self.seqs.get(cid).copied()
    }

    /// The watermark (Unix ms), if the position has one: unnamed conversations resume after
    /// their newest message committed at or before it.
    pub fn watermark_ms(&self) -> Option<i64> {
        self.watermark_ms
    }

    /// How many conversations the position names.
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    /// Whether the position names no conversation.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }
}

fn push_entries<'a>(out: &mut String, entries: impl Iterator<Item = (&'a str, u64)>) {
    for (cid, seq) in entries {
        out.push(';');
        out.push_str(cid);
        out.push(':');
        out.push_str(&seq.to_string());
    }
}

/// Digits only, as the stream writes them: no sign, no leading zero (but `0` itself).
fn plain_number(text: &str) -> Option<u64> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0190f5a4-1c2b-7d3e-8f90-123456789abc";
    const B: &str = "0190f5a4-1c2b-7d3e-8f90-123456789abd";

    #[test]
    fn positions_round_trip() {
        let p = Position::parse(&format!("v2;1700000000000;{B}:7;{A}:0")).unwrap();
        assert_eq!((p.get(A), p.get(B), p.get("x")), (Some(0), Some(7), None));
        assert_eq!(p.watermark_ms(), Some(1_700_000_000_000));
        let again = Position::encode_entries(1_700_000_000_000, [(A, 0), (B, 7)].into_iter());
        assert_eq!(again, format!("v2;1700000000000;{A}:0;{B}:7"));
        assert_eq!(Position::parse(&again).unwrap(), p);
        assert_eq!(Position::parse("v1").unwrap(), Position::default());
        let v1 = Position::parse(&format!("v1;{A}:12")).unwrap();
        assert_eq!(
            (v1.get(A), v1.watermark_ms(), v1.len()),
            (Some(12), None, 1)
        );
        assert!(Position::parse("v2;0").unwrap().is_empty());
    }

    #[test]
    fn bad_positions_are_refused() {
        for bad in [
            String::new(),
            "v2".into(),
            "v3;1".into(),
            "v2;-1".into(),
            "v2;01".into(),
            format!("v2;{}", u64::MAX),
            format!("v2;{A}:1"),
            format!("v1;{A}"),
            format!("v1;{A}:-1"),
            format!("v1;{A}:01"),
            format!("v1;{A}:x"),
            format!("v1;{A}:1;{A}:2"),
            "v1;not-a-conversation:1".into(),
            format!("v1;{}:1", A.to_uppercase()),
            format!("v1;{A}:{}", u64::MAX),
        ] {
            let e = Position::parse(&bad).unwrap_err();
            assert!(matches!(e, ChatError::Invalid(_)), "{bad}: {e}");
        }
    }
}
