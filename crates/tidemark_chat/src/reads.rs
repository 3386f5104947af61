//! Tiered reads (DESIGN.md part A "Reads", seed 000 decision 4).
//!
//! The hot store answers atomically with its floor F: seq > F comes from the hot tier, seq ≤ F
//! from the archive, merged by seq. Both tiers are dense over the seqs a read needs, so a
//! missing one is corruption, and it fails the whole request with [`ChatError::Corrupt`]
//! rather than returning a partial page or a low unread count (DESIGN.md part A "Reads"):
//!
//! - hot, `F < seq ≤ latest`: every seq has a row (committed, RESERVED or expired) until the
//!   trimmer removes it and raises F past it ([`check_held`]);
//! - archive, `seq ≤ F`: every seq has an index entry — an expired ephemeral message's entry
//!   stays as a tombstone after its record is purged — and every unexpired entry has its
//!   record, with the same message id ([`archive_range`]).
//!
//! So a page leaves out only expired ephemeral messages and, above F, seqs still RESERVED (a
//! send in flight on the staged commit path, held but not yet committed).
//!
//! An archive that purged ephemeral messages without leaving tombstones lacks their index
//! entries; a read over one of those seqs fails as corrupt.

use std::collections::HashMap;

use crate::error::{ChatError, Result};
use crate::model::{IndexEntry, MessageRecord};
use crate::ports::{Archive, HotStore};

/// Where a page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// The newest page.
    Latest,
    /// Seqs strictly below this one.
    Before(u64),
    /// Seqs strictly above this one.
    After(u64),
}

/// One page of history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryPage {
    /// Messages in ascending seq order.
    pub messages: Vec<MessageRecord>,
    /// Lowest seq still readable (`latest_seq + 1` when nothing is).
    pub earliest_available_seq: u64,
    /// Highest allocated seq.
    pub latest_seq: u64,
    /// The page was cut at its byte budget ([`cap_page`]): it holds the messages of its window
    /// nearest the anchor, and the next page starts from its first message (paging back) or
    /// its last (paging forward), not from the window's edge.
    pub truncated: bool,
}

/// The JSON bytes a message is counted at against a page's byte budget: its strings as
/// `serde_json` escapes them (a control character takes six bytes) plus
/// [`MESSAGE_JSON_OVERHEAD`] for the field names, numbers and the timestamp.
pub fn message_json_bytes(m: &MessageRecord) -> usize {
    [&m.body, &m.sender, &m.message_id]
        .into_iter()
        .map(|s| json_string_bytes(s))
        .sum::<usize>()
        + MESSAGE_JSON_OVERHEAD
}

/// What a history message's JSON holds besides its three strings, rounded up: the field
/// names and punctuation (~90 bytes), a seq of up to 19 digits, the longest class name and an
/// RFC 3339 timestamp.
pub const MESSAGE_JSON_OVERHEAD: usize = 160;

/// The length of `s` as a JSON string, quotes included, as `serde_json` writes it.
fn json_string_bytes(s: &str) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `str` to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, s);
    count.0
}

/// Cuts `page` to at most `budget` bytes of message JSON ([`message_json_bytes`]), keeping
/// the messages nearest its anchor: the newest for [`Anchor::Latest`] and [`Anchor::Before`]
/// (a client paging back goes on from the first one it got), the oldest for
/// [`Anchor::After`] (one paging forward goes on from the last). The message nearest the
/// anchor is kept whatever its size, so paging always moves on. Sets
/// [`HistoryPage::truncated`] when it dropped any. Why: a page is up to 200 seqs wide and a
/// body up to `max_body_bytes`, so without a budget one answer could hold 200 × 64 KiB of
/// control characters spelled in six bytes each (79 MB; 30 such reads at once took a server
/// to 2.5 GB).
pub fn cap_page(page: &mut HistoryPage, anchor: Anchor, budget: usize) {
    let newest_first = !matches!(anchor, Anchor::After(_));
    let keep = if newest_first {
        within_budget(page.messages.iter().rev(), budget)
    } else {
        within_budget(page.messages.iter(), budget)
    };
    let drop = page.messages.len() - keep;
    if drop == 0 {
        return;
    }
    if newest_first {
        page.messages.drain(..drop);
    } else {
        page.messages.truncate(keep);
    }
    page.truncated = true;
}

/// The inclusive seq window `[lo, hi]` a page covers (`limit` seqs wide), or `None` if empty.
pub fn page_window(anchor: Anchor, limit: u64, latest_seq: u64) -> Option<(u64, u64)> {
    let (lo, hi) = match anchor {
        Anchor::Latest => (latest_seq.saturating_sub(limit - 1).max(1), latest_seq),
        Anchor::Before(b) => (
            b.saturating_sub(limit).max(1),
            b.saturating_sub(1).min(latest_seq),
        ),
        Anchor::After(a) => (a.saturating_add(1), a.saturating_add(limit).min(latest_seq)),
    };
    (lo <= hi).then_some((lo, hi))
}

/// What page to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// Where the page starts.
    pub anchor: Anchor,
    /// Width of the page in seqs (1..=200 over HTTP).
    pub limit: u64,
    /// The conversation's latest seq as last seen (bounds `Latest` and `After` pages).
    pub latest_seq: u64,
}

/// PULL_HISTORY over both tiers. `archive` is `None` in `hot-only` mode.
pub async fn pull_history(
    hot: &dyn HotStore,
    archive: Option<&dyn Archive>,
    tenant: &str,
    conversation_id: &str,
    page: PageRequest,
    now_ms: i64,
) -> Result<HistoryPage> {
    let (lo, hi) = page_window(page.anchor, page.limit, page.latest_seq).unwrap_or((1, 0));
    let slice = hot
        .hot_slice(tenant, conversation_id, lo, hi, now_ms)
        .await?;
    check_held(
        conversation_id,
        lo.max(slice.floor + 1),
        hi.min(slice.latest_seq),
        slice.held,
    )?;
    let mut messages = Vec::new();
    let mut earliest = slice.earliest_seq;
    if slice.floor > 0 {
        let archive = archive.ok_or_else(|| {
            ChatError::Corrupt(format!(
                "{conversation_id}: floor {} but no archive",
                slice.floor
            ))
        })?;
        if lo <= slice.floor && lo <= hi {
            messages = archive_range(
                archive,
                tenant,
                conversation_id,
                lo,
                hi.min(slice.floor),
                now_ms,
            )
            .await?;
        }
        if let Some(e) = archive
            .earliest_seq(tenant, conversation_id, now_ms)
            .await?
        {
            earliest = Some(e);
        }
    }
    messages.extend(slice.records);
    // The seq the page was cut at: sends committed since (the hot read sees them) lie past the
    // page, and a client that pages on from `latest_seq` reads them next.
    let latest_seq = page.latest_seq.min(slice.latest_seq);
    Ok(HistoryPage {
        messages,
        earliest_available_seq: earliest.unwrap_or(latest_seq + 1),
        latest_seq,
        truncated: false,
    })
}

/// How many of `messages`, taken in order, fit in `budget` JSON bytes (at least one).
fn within_budget<'a>(messages: impl Iterator<Item = &'a MessageRecord>, budget: usize) -> usize {
    let mut used = 0;
    let mut keep = 0;
    for m in messages {
        used += message_json_bytes(m);
        if keep > 0 && used > budget {
            break;
        }
        keep += 1;
    }
    keep
}

/// An unread count and the latest seq it was counted against (read atomically with F).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnreadCount {
    /// Messages in `(read_seq, latest_seq]` not sent by the user.
    pub unread: u64,
    /// The conversation's latest seq at the time of the hot read.
    pub latest_seq: u64,
}

/// Unread count for `user`: messages in `(read_seq, latest]` not sent by `user`, over both tiers.
pub async fn unread_count(
    hot: &dyn HotStore,
    archive: Option<&dyn Archive>,
    tenant: &str,
    conversation_id: &str,
    user: &str,
    read_seq: u64,
    now_ms: i64,
) -> Result<UnreadCount> {
    let h = hot
        .hot_unread(tenant, conversation_id, user, read_seq, now_ms)
        .await?;
    check_held(
        conversation_id,
        read_seq.max(h.floor) + 1,
        h.latest_seq,
        h.held,
    )?;
    let mut unread = h.unread_above_floor;
    if read_seq < h.floor {
        let archive = archive.ok_or_else(|| {
            ChatError::Corrupt(format!(
                "{conversation_id}: floor {} but no archive",
                h.floor
            ))
        })?;
        const CHUNK: u64 = 1000;
        let mut lo = read_seq + 1;
        while lo <= h.floor {
            let hi = (lo + CHUNK - 1).min(h.floor);
            let records = archive_range(archive, tenant, conversation_id, lo, hi, now_ms).await?;
            unread += records.iter().filter(|r| r.sender != user).count() as u64;
            lo = hi + 1;
        }
    }
    Ok(UnreadCount {
        unread,
        latest_seq: h.latest_seq,
    })
}

/// Fails with [`ChatError::Corrupt`] unless the hot tier holds all of `lo..=hi` (`held` of
/// them, in any state: [`crate::model::HotSlice::held`]). Seqs above F are dense and leave the
/// hot tier only when the trimmer raises F past them, so a missing one was lost behind the
/// server's back. An empty range (`lo > hi`) wants none.
pub fn check_held(conversation_id: &str, lo: u64, hi: u64, held: u64) -> Result<()> {
    let want = if lo > hi { 0 } else { hi - lo + 1 };
    if held == want {
        return Ok(());
    }
    Err(ChatError::Corrupt(format!(
        "conversation {conversation_id} seqs {lo}..={hi}: the hot tier holds {held} of their \
         {want} records"
    )))
}

/// The first seq of `lo..=hi` that `index` (ascending, one entry per seq) has no entry for.
fn first_unindexed(index: &[IndexEntry], lo: u64, hi: u64) -> Option<u64> {
    let mut want = lo;
    for e in index {
        if e.conversation_seq != want {
            return Some(want);
        }
        want += 1;
    }
    (want <= hi).then_some(want)
}

/// Unexpired archive records in `[lo, hi]`, ascending, checked: every seq has an index entry
/// (a tombstone if it expired), and every unexpired entry its record with the same message id.
pub async fn archive_range(
    archive: &dyn Archive,
    tenant: &str,
    conversation_id: &str,
    lo: u64,
    hi: u64,
    now_ms: i64,
) -> Result<Vec<MessageRecord>> {
    let mut index = archive.index_range(tenant, conversation_id, lo, hi).await?;
    if let Some(seq) = first_unindexed(&index, lo, hi) {
        return Err(ChatError::Corrupt(format!(
            "conversation {conversation_id} seq {seq}: no index entry in the archive"
        )));
    }
    index.retain(|e| !e.is_expired(now_ms));
    if index.is_empty() {
        return Ok(Vec::new());
    }
    let seqs: Vec<u64> = index.iter().map(|e| e.conversation_seq).collect();
    let mut by_seq: HashMap<u64, MessageRecord> = archive
        .records(tenant, conversation_id, &seqs)
        .await?
        .into_iter()
        .map(|r| (r.conversation_seq, r))
        .collect();
    index
        .iter()
        .map(|e| {
            let seq = e.conversation_seq;
            match by_seq.remove(&seq) {
                Some(r) if r.message_id == e.message_id && !r.is_expired(now_ms) => Ok(r),
                Some(_) => Err(ChatError::Corrupt(format!(
                    "conversation {conversation_id} seq {seq}: archive record does not match its index entry"
                ))),
                None => Err(ChatError::Corrupt(format!(
                    "conversation {conversation_id} seq {seq}: index entry without its record"
                ))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tidemark_core::clock::{ManualClock, SharedClock};

    use super::*;
    use crate::model::{MessageClass, SendCommand};
    use crate::ports::{CommitParams, FusedCommit};
    use crate::sqlite::SqliteHot;

    /// A page is cut at the latest seq read before it (`PageRequest::latest_seq`); sends that
    /// land between that read and the hot read must not show as a `latest_seq` past the page's
    /// end (found end to end: a newest page of 12822..12828 said `latest_seq` 12833).
    #[tokio::test]
    async fn a_page_reports_the_latest_seq_it_was_cut_at() {
        let dir = tempfile::tempdir().unwrap();
        let hot = SqliteHot::open(&dir.path().join("hot.db"), 8).unwrap();
        let clock: SharedClock = Arc::new(ManualClock::new(1_800_000_000_000));
        let members = ["u1".to_owned(), "u2".to_owned()];
        let cid = "c-1".to_string();
        hot.create_conversation("t", &cid, &members, None, clock.now_ms())
            .await
            .unwrap();
        let params = CommitParams {
            dedup_window_ms: 60_000,
            hot_window_ms: 60_000,
        };
        for i in 1..=8 {
            let cmd = SendCommand {
                tenant: "t".into(),
                conversation_id: cid.clone(),
                sender: "u1".into(),
                client_msg_id: format!("k{i}"),
                body: format!("m{i}"),
                class: MessageClass::Standard,
            };
            hot.commit_fused(cmd, &clock, params, true).await.unwrap();
        }
        // The latest seq was 5 when the page was cut; seqs 6..8 came before the hot read.
        for anchor in [Anchor::Latest, Anchor::After(2), Anchor::Before(10)] {
            let page = PageRequest {
                anchor,
                limit: 7,
                latest_seq: 5,
            };
            let got = pull_history(&hot, None, "t", &cid, page, clock.now_ms())
                .await
                .unwrap();
            let seqs: Vec<u64> = got.messages.iter().map(|m| m.conversation_seq).collect();
            assert_eq!(seqs.last(), Some(&5), "{anchor:?}");
            assert_eq!(got.latest_seq, 5, "{anchor:?}");
        }
    }

    #[test]
    fn windows() {
        assert_eq!(page_window(Anchor::Latest, 50, 1000), Some((951, 1000)));
        assert_eq!(page_window(Anchor::Latest, 50, 10), Some((1, 10)));
        assert_eq!(page_window(Anchor::Latest, 50, 0), None);
        assert_eq!(page_window(Anchor::Before(51), 50, 1000), Some((1, 50)));
        assert_eq!(page_window(Anchor::Before(30), 50, 1000), Some((1, 29)));
        assert_eq!(page_window(Anchor::Before(1), 50, 1000), None);
        assert_eq!(page_window(Anchor::After(990), 50, 1000), Some((991, 1000)));
        assert_eq!(page_window(Anchor::After(1000), 50, 1000), None);
    }

    fn page_of(bodies: &[&str]) -> HistoryPage {
        HistoryPage {
            messages: (1..)
                .zip(bodies)
                .map(|(s, b)| MessageRecord::sample(s, b))
                .collect(),
            earliest_available_seq: 1,
            latest_seq: bodies.len() as u64,
            truncated: false,
        }
    }

    fn seqs(page: &HistoryPage) -> Vec<u64> {
        page.messages.iter().map(|m| m.conversation_seq).collect()
    }

    #[test]
    fn a_message_counts_its_strings_as_json_spells_them() {
        let plain = message_json_bytes(&MessageRecord::sample(1, "abc"));
        // "m1", "u1", "abc" with their quotes.
        assert_eq!(plain, 4 + 4 + 5 + MESSAGE_JSON_OVERHEAD);
        // A control character is six bytes (\u0001), a quote two.
        assert_eq!(
            message_json_bytes(&MessageRecord::sample(1, "\u{1}\"c")),
            plain - 5 + 11
        );
        // The overhead covers what serde_json writes besides the strings, for a long seq.
        let mut m = MessageRecord::sample(u64::MAX >> 1, "x");
        m.class = MessageClass::Ephemeral24h;
        m.committed_at_ms = 253_402_300_799_999;
        let whole = serde_json::json!({
            "conversation_seq": m.conversation_seq, "message_id": m.message_id,
            "sender": m.sender, "body": m.body, "class": "ephemeral24h",
            "committed_at": tidemark_core::timefmt::rfc3339_ms(m.committed_at_ms),
        });
        assert!(serde_json::to_vec(&whole).unwrap().len() < message_json_bytes(&m));
    }

    #[test]
    fn a_page_over_its_budget_keeps_the_messages_nearest_its_anchor() {
        let body = "x".repeat(1000);
        let bodies = [body.as_str(); 5];
        let one = message_json_bytes(&MessageRecord::sample(1, &body));

        // Within the budget: untouched.
        let mut page = page_of(&bodies);
        cap_page(&mut page, Anchor::Latest, 5 * one);
        assert_eq!((seqs(&page), page.truncated), (vec![1, 2, 3, 4, 5], false));

        // Paging back (newest page, before=): the newest that fit.
        for anchor in [Anchor::Latest, Anchor::Before(6)] {
            let mut page = page_of(&bodies);
            cap_page(&mut page, anchor, 2 * one + one / 2);
            assert_eq!(
                (seqs(&page), page.truncated),
                (vec![4, 5], true),
                "{anchor:?}"
            );
            assert_eq!(page.latest_seq, 5, "the page's other fields stay");
        }

        // Paging forward: the oldest that fit.
        let mut page = page_of(&bodies);
        cap_page(&mut page, Anchor::After(0), 3 * one);
        assert_eq!((seqs(&page), page.truncated), (vec![1, 2, 3], true));

        // One message over the whole budget is still answered, alone.
        let mut page = page_of(&bodies);
        cap_page(&mut page, Anchor::Latest, 10);
        assert_eq!((seqs(&page), page.truncated), (vec![5], true));
        let mut page = page_of(&bodies);
        cap_page(&mut page, Anchor::After(0), 10);
        assert_eq!((seqs(&page), page.truncated), (vec![1], true));

        // An empty page stays empty.
        let mut page = page_of(&[]);
        cap_page(&mut page, Anchor::Latest, 10);
        assert_eq!((seqs(&page), page.truncated), (vec![], false));
    }
}
