//! Where a stream starts in a conversation it has no seq for: found by walking the
//! conversation's history newest first, a short page and then full ones, until the rule has
//! its answer (one short read for a conversation idle since then).

use crate::error::Result;
use crate::model::MessageRecord;
use crate::reads::Anchor;
use crate::service::{ChatService, MAX_PAGE};

/// The first page's size: enough for a conversation idle since the start point.
const FIRST_PAGE: u64 = 8;

/// A start: the last seq taken as delivered, and its message's commit time if it is readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Start {
    /// The last seq taken as delivered (0: none).
    pub seq: u64,
    /// Its commit time (Unix ms), when known.
    pub at_ms: Option<i64>,
    /// The conversation's latest seq at the read (`u64::MAX`: not read yet).
    pub latest: u64,
}

impl Start {
    /// Seq `seq` taken as delivered, in a conversation not read yet (its latest seq unknown).
    pub(super) fn unread(seq: u64) -> Self {
        Self {
            seq,
            at_ms: None,
            latest: u64::MAX,
        }
    }
}

/// A conversation's readable messages, newest first.
struct Backwards<'a> {
    svc: &'a ChatService,
    tenant: &'a str,
    cid: &'a str,
    user: &'a str,
    anchor: Option<Anchor>,
    latest: u64,
}

impl<'a> Backwards<'a> {
    fn new(svc: &'a ChatService, tenant: &'a str, cid: &'a str, user: &'a str) -> Self {
        Self {
            svc,
            tenant,
            cid,
            user,
            anchor: Some(Anchor::Latest),
            latest: 0,
        }
    }

    /// The next page, newest first; `None` when nothing older is left.
    async fn next(&mut self) -> Result<Option<Vec<MessageRecord>>> {
        let Some(anchor) = self.anchor else {
            return Ok(None);
        };
        let limit = if anchor == Anchor::Latest {
            FIRST_PAGE
        } else {
            MAX_PAGE
        };
        let page = self
            .svc
            .history(self.tenant, self.cid, self.user, anchor, limit)
            .await?;
        if anchor == Anchor::Latest {
            self.latest = page.latest_seq;
        }
        // The window just read starts at `top - limit + 1`; a page cut at its byte budget
        // goes on from its oldest message instead.
        let top = match anchor {
            Anchor::Before(below) => below - 1,
            _ => page.latest_seq,
        };
        let below = match page.messages.first() {
            Some(m) if page.truncated => m.conversation_seq,
            _ => top.saturating_sub(limit) + 1,
        };
        self.anchor = (below > page.earliest_available_seq.max(1)).then_some(Anchor::Before(below));
        let mut messages = page.messages;
        messages.reverse();
        Ok(Some(messages))
    }
}

/// Resuming under a watermark: after the newest seq committed at or before `watermark_ms`.
/// Along a conversation's seqs commit times never decrease, so that seq splits what the
/// client had from what it had not. A conversation idle since the watermark costs one read
/// of its meta; otherwise the walk finds the newest readable message at or before it (seqs
/// above that one whose time cannot be read are taken as after it: delivered, or named in a
/// `reload`, rather than skipped).
pub(super) async fn at_watermark(
    svc: &ChatService,
    tenant: &str,
    cid: &str,
    user: &str,
    watermark_ms: i64,
) -> Result<Start> {
    let meta = svc.conversation(tenant, cid).await?;
    if meta.latest_at_ms.is_none_or(|at| at <= watermark_ms) {
        return Ok(Start {
            seq: meta.latest_seq,
            at_ms: meta.latest_at_ms,
            latest: meta.latest_seq,
        });
    }
    let mut walk = Backwards::new(svc, tenant, cid, user);
    while let Some(page) = walk.next().await? {
        if let Some(m) = page.iter().find(|m| m.committed_at_ms <= watermark_ms) {
            return Ok(Start {
                seq: m.conversation_seq,
                at_ms: Some(m.committed_at_ms),
                latest: walk.latest,
            });
        }
    }
    Ok(Start {
        seq: 0,
        at_ms: None,
        latest: walk.latest,
    })
}

/// Starting from now: the latest seq, unless seqs up to it may still commit (RESERVED on the
/// staged path less than `patience_ms` ago): then just below the lowest such seq, so that
/// those messages reach the client when they commit. A conversation with nothing younger
/// than the patience costs one read of its meta. A gap under a message older than the
/// patience is one that never fills (the stream's gap rule), and the walk stops there.
pub(super) async fn from_now(
    svc: &ChatService,
    tenant: &str,
    cid: &str,
    user: &str,
    now_ms: i64,
    patience_ms: i64,
) -> Result<Start> {
    let meta = svc.conversation(tenant, cid).await?;
    let young = |at: i64| now_ms - at <= patience_ms;
    let mut start = Start {
        seq: meta.latest_seq,
        at_ms: meta.latest_at_ms,
        latest: meta.latest_seq,
    };
    if !meta.latest_at_ms.is_some_and(young) {
        return Ok(start);
    }
    let mut walk = Backwards::new(svc, tenant, cid, user);
    // The lowest readable message seen so far, and its commit time; above the first one, the
    // latest seq dated `latest_at_ms`.
    let mut above = (meta.latest_seq + 1, meta.latest_at_ms.unwrap_or(now_ms));
    while let Some(page) = walk.next().await? {
        for m in page {
            let seq = m.conversation_seq;
            if seq >= above.0 {
                continue;
            }
            if seq + 1 < above.0 && young(above.1) {
                start = Start {
                    seq,
                    at_ms: Some(m.committed_at_ms),
                    latest: start.latest,
                };
            } else if seq == start.seq {
                start.at_ms = Some(m.committed_at_ms);
            }
            if !young(m.committed_at_ms) {
                return Ok(start);
            }
            above = (seq, m.committed_at_ms);
        }
    }
    // Nothing older is readable: seqs under the oldest message may still commit.
    if above.0 > 1 && young(above.1) {
        start = Start {
            seq: 0,
            at_ms: None,
            latest: start.latest,
        };
    }
    Ok(start)
}
