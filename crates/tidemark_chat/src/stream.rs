//! Live delivery (`GET /v1/users/{user}/stream`, Server-Sent Events): every message committed
//! to one user's conversations, in seq order per conversation, and the user's own read-pointer
//! moves, each with a position the client resumes from without a gap.
//!
//! Data flow:
//! 1. A SEND the commit path acknowledged, or a mark-read, tells the node's [`StreamHub`] which
//!    conversation changed ([`StreamHub::committed`], [`StreamHub::read_moved`]). The hub only
//!    marks the conversation in the open streams of its members and wakes them; it never
//!    waits, so no client holds up a commit.
//! 2. Each stream reads what changed through the tiered history reads
//!    ([`ChatService::history`]), from the seq after the last one it delivered. What it sends is
//!    what a history page holds, so only committed, durable messages, in seq order.
//! 3. Each event carries the client's [`Position`] as its SSE `id`: a watermark one gap
//!    patience before the stream last took its wake-ups, and the last seq delivered in each
//!    conversation active since, or not read yet (so its length follows the user's recent
//!    activity, not how many conversations the user has; `Stream::position`). A
//!    client that reconnects with it (`Last-Event-ID`, or `?since=`) first gets everything
//!    committed since, from the hot tier or the archive, then `ready`, then what comes live.
//!    Without a position the stream starts at the conversations' latest seqs, or below a seq
//!    still RESERVED there, so that it arrives when it commits.
//!
//! **Gaps.** On the staged commit path (a Redis hot tier) seq n may still be RESERVED while
//! n + 1 is committed, and a page then leaves n out. A stream delivers up to such a gap and
//! waits: n's own commit wakes it, or, after a crash, the recovery worker re-publishes n within
//! `outbox_recovery_window` (the stream looks again every second). A gap still open after
//! [`gap_patience`] (or after a message committed longer ago than that) is one that will never
//! be readable: an expired ephemeral message, or history deleted before the client got it. The
//! stream passes over it and says so with a `reload` event naming the seqs missed, never
//! silently.
//!
//! **Across nodes** ([`follow_outbox`]): where the outbox is a shared broker, each API node
//! follows it and wakes its streams for SENDs committed on other nodes.
//!
//! **Bounds.** A stream buffers [`STREAM_BUFFER`] events; a client that does not take them for
//! `chat.stream_lag_timeout` is disconnected and resumes from the last event it got. Streams
//! per user and per node are bounded (`chat.stream_max_per_user`, `chat.stream_max_connections`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::{ChatError, Result};
use crate::model::MessageRecord;
use crate::reads::Anchor;
use crate::service::{ChatService, MAX_PAGE};

mod follow;
mod hub;
mod position;
mod start;

pub use follow::{FOLLOW_INTERVAL, follow_outbox};
use hub::Registration;
pub use hub::StreamHub;
pub use position::{MAX_POSITION_ENTRIES, Position};
use start::Start;

/// Events a stream buffers for its client.
pub const STREAM_BUFFER: usize = 64;

/// How often a stream waiting at a gap looks again.
const GAP_RETRY: Duration = Duration::from_secs(1);

/// How long a gap in a conversation may stay open before the stream stops waiting for it:
/// twice the recovery window, in which a RESERVED record is committed or re-published.
pub fn gap_patience(outbox_recovery_window: Duration) -> Duration {
    outbox_recovery_window * 2
}

/// One event of a stream. Each carries the client's position after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// A committed message.
    Message {
        /// The position after it.
        position: String,
        /// The message.
        record: MessageRecord,
    },
    /// The user's read pointer in a conversation moved (on any device) while the stream was open;
    /// moves made while the client was away are not replayed.
    Read {
        /// The position after it.
        position: String,
        /// The conversation.
        conversation_id: String,
        /// The new read pointer.
        read_seq: u64,
    },
    /// Seqs of a conversation the client never got and never will (expired ephemeral
    /// messages, history deleted meanwhile): reload the conversation's history if it matters;
    /// the stream goes on after them.
    Reload {
        /// The position after it.
        position: String,
        /// The conversation.
        conversation_id: String,
        /// The first seq missed.
        missed_from: u64,
        /// The last seq missed.
        missed_to: u64,
    },
    /// Everything committed before the stream opened that the position asked for was sent;
    /// what follows is live.
    Ready {
        /// The position.
        position: String,
    },
}

/// What a client asks to stream.
#[derive(Debug, Clone)]
pub struct StreamRequest {
    /// The tenant.
    pub tenant: String,
    /// The user whose conversations are streamed.
    pub user: String,
    /// Only these conversations (a user token's `conversations`); `None`: all of the user's.
    pub conversations: Option<BTreeSet<String>>,
    /// Where to resume; `None`: from now.
    pub since: Option<Position>,
    /// When the stream must end (a user token's expiry, Unix seconds, leeway included); the
    /// client then reconnects with a fresh token. `None`: never.
    pub until_s: Option<u64>,
}

impl StreamRequest {
    /// Whether the stream may carry conversation `cid` (a user token's `conversations`).
    fn may_open(&self, cid: &str) -> bool {
        self.conversations.as_ref().is_none_or(|c| c.contains(cid))
    }
}

/// An open stream: its events, and `cut`, which fires when the stream ended for a reason the
/// client must see as a broken connection rather than a finished answer (it lagged, the node
/// is stopping, the token expired): the HTTP layer then drops the connection at once instead
/// of flushing what a stalled client would never read.
#[derive(Debug)]
pub struct OpenStream {
    /// The events, in order.
    pub events: mpsc::Receiver<StreamEvent>,
    /// Fires when the connection must be cut.
    pub cut: CancellationToken,
}

/// Opens a stream: registers it (errors: [`ChatError::TooManyStreams`]), reads where each of
/// the user's conversations starts (errors: a bad user id, a store down), and spawns the task
/// that replays and then follows commits. Events arrive on [`OpenStream::events`]; dropping it
/// ends the stream.
pub async fn open(svc: &ChatService, req: StreamRequest) -> Result<OpenStream> {
    crate::service::check_id("user", &req.user)?;
    // Registered first: a commit from here on wakes the stream, so none falls between the
    // start positions read below and the live part.
    let registration = svc.streams().subscribe(&req.tenant, &req.user)?;
    // Read after registering: what was committed before it is in the reads below, and what is
    // committed after it wakes the stream.
    let now_ms = svc.now_ms();
    let memberships = svc.stores().hot.memberships(&req.tenant, &req.user).await?;
    let patience = gap_patience(svc.config().outbox_recovery_window);
    let patience_ms = i64::try_from(patience.as_millis()).unwrap_or(i64::MAX);
    if let Some(w) = req.since.as_ref().and_then(Position::watermark_ms)
        && w > now_ms
    {
        return Err(ChatError::Invalid(
            "the position's watermark is ahead of this server's clock: give the id of an \
             event of this stream"
                .into(),
        ));
    }
    let mut convs = BTreeMap::new();
    let mut replay = Vec::new();
    for m in memberships {
        let cid = m.conversation_id;
        if !req.may_open(&cid) {
            continue;
        }
        let (tenant, user) = (&req.tenant, &req.user);
        let start = match &req.since {
            Some(p) => match (p.get(&cid), p.watermark_ms()) {
                (Some(seq), _) => Start::unread(seq),
                (None, Some(w)) => start::at_watermark(svc, tenant, &cid, user, w).await?,
                (None, None) => Start::unread(0),
            },
            None => start::from_now(svc, tenant, &cid, user, now_ms, patience_ms).await?,
        };
        if start.seq < start.latest {
            replay.push(cid.clone());
        }
        convs.insert(cid, Conv::new(start, m.read_seq));
    }
    if req.since.is_some() {
        svc.metrics().stream_replays.inc();
    }
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let from_first = req
        .since
        .as_ref()
        .is_some_and(|p| p.watermark_ms().is_none());
    let stream = Stream {
        svc: svc.clone(),
        req,
        convs,
        pending: replay.iter().cloned().collect(),
        from_first,
        synced_ms: now_ms,
        tx,
        patience,
        lag_timeout: svc.config().stream_lag_timeout,
    };
    let cut = CancellationToken::new();
    tokio::spawn(stream.run(registration, replay, cut.clone()));
    Ok(OpenStream { events: rx, cut })
}

/// One conversation of a stream.
#[derive(Debug)]
struct Conv {
    /// The last seq delivered (or passed over).
    delivered: u64,
    /// The commit time (Unix ms) of seq `delivered`, when the stream has read it.
    delivered_at_ms: Option<i64>,
    /// The latest seq at the stream's last read (`u64::MAX` until the stream has read it).
    latest: u64,
    /// The user's read pointer as last sent.
    read: u64,
    /// When the stream first found the conversation waiting at a gap.
    gap_since: Option<Instant>,
}

impl Conv {
    /// A conversation the stream starts at `start`, the user's read pointer at `read`.
    fn new(start: Start, read: u64) -> Self {
        Self {
            delivered: start.seq,
            delivered_at_ms: start.at_ms,
            latest: start.latest,
            read,
            gap_since: None,
        }
    }

    /// Whether a position under `watermark_ms` may leave the conversation out: the stream has
    /// read it, the client has every seq up to the latest read, the last one committed by the
    /// watermark, and the stream waits at no gap.
    fn settled_by(&self, watermark_ms: i64) -> bool {
        self.gap_since.is_none()
            && self.delivered >= self.latest
            && (self.delivered == 0 || self.delivered_at_ms.is_some_and(|t| t <= watermark_ms))
    }
}

/// Why a stream ended.
#[derive(Debug)]
enum End {
    /// The client went away.
    Gone,
    /// The client did not take its events within the lag timeout.
    Lagged,
    /// The node is stopping.
    Closed,
    /// The user token it was opened with expired.
    Expired,
}

struct Stream {
    svc: ChatService,
    req: StreamRequest,
    /// By conversation id, the order a position lists them in.
    convs: BTreeMap<String, Conv>,
    /// Conversations woken (or to replay) that the stream has not read since: a position
    /// names them.
    pending: BTreeSet<String>,
    /// Resumed from a position without a watermark (`v1`): until the replay is done, a
    /// conversation not yet replayed resumes from its first message.
    from_first: bool,
    /// When (Unix ms) the stream last took its wake-ups: everything committed and marked
    /// before then has been read, or is pending.
    synced_ms: i64,
    tx: mpsc::Sender<StreamEvent>,
    patience: Duration,
    lag_timeout: Duration,
}

impl Stream {
    async fn run(
        mut self,
        registration: Registration,
        replay: Vec<String>,
        cut: CancellationToken,
    ) {
        let sub = Arc::clone(&registration.sub);
        let closed = registration.hub.closing();
        let until_s = self.req.until_s;
        let expiry = async move {
            match until_s {
                Some(s) => {
                    let left = std::time::UNIX_EPOCH + Duration::from_secs(s);
                    let left = left
                        .duration_since(std::time::SystemTime::now())
                        .unwrap_or_default();
                    tokio::time::sleep(left).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let ended = async {
            let mut waiting: BTreeSet<String> = BTreeSet::new();
            for cid in replay {
                self.read_pending(cid, &mut waiting).await?;
            }
            self.from_first = false;
            self.emit(StreamEvent::Ready {
                position: self.position(),
            })
            .await?;
            loop {
                let retry = async {
                    if waiting.is_empty() {
                        std::future::pending::<()>().await;
                    }
                    tokio::time::sleep(GAP_RETRY).await;
                };
                tokio::select! {
                    () = sub.wake.notified() => {}
                    () = retry => {}
                    () = self.tx.closed() => return Err(End::Gone),
                }
                // The time first: whatever was marked before it is in the set taken.
                let taken_ms = self.svc.now_ms();
                let dirty = sub.take();
                let mut reads = dirty.reads;
                let due: BTreeSet<String> = dirty.messages.into_iter().chain(waiting).collect();
                waiting = BTreeSet::new();
                self.pending.clone_from(&due);
                self.synced_ms = taken_ms;
                for cid in due {
                    if !self.convs.contains_key(&cid) {
                        if !self.joined(&cid).await {
                            self.pending.remove(&cid);
                            continue;
                        }
                        // Its read pointer may have moved before the stream knew it.
                        reads.insert(cid.clone());
                    }
                    self.read_pending(cid, &mut waiting).await?;
                }
                for cid in &reads {
                    self.read_moved(cid).await?;
                }
            }
        };
        // Replay included: a stop or an expiry does not wait for a slow client.
        let end = tokio::select! {
            end = ended => end,
            () = closed.cancelled() => Err(End::Closed),
            () = expiry => Err(End::Expired),
        };
        match end {
            Err(End::Lagged) => {
                self.svc.metrics().stream_dropped.inc();
                cut.cancel();
            }
            Err(End::Closed | End::Expired) => cut.cancel(),
            Ok(()) | Err(End::Gone) => {}
        }
        drop(registration);
    }

    /// Catches `cid` up ([`Stream::catch_up`]), after which it is no longer pending; one left
    /// at a gap goes into `waiting`, to look at again.
    async fn read_pending(
        &mut self,
        cid: String,
        waiting: &mut BTreeSet<String>,
    ) -> Result<(), End> {
        let gap = self.catch_up(&cid).await?;
        self.pending.remove(&cid);
        if gap {
            waiting.insert(cid);
        }
        Ok(())
    }

    /// A conversation the stream did not know: one created after it opened, if the user is a
    /// member and may open it. Delivered from its first message.
    async fn joined(&mut self, cid: &str) -> bool {
        if !self.req.may_open(cid) {
            return false;
        }
        let Ok(conv) = self.svc.conversation(&self.req.tenant, cid).await else {
            return false;
        };
        if !conv.members.contains(&self.req.user) {
            return false;
        }
        self.convs
            .insert(cid.to_owned(), Conv::new(Start::unread(0), 0));
        true
    }

    /// Delivers `cid`'s messages after the last one delivered, page by page, up to its latest
    /// seq or a gap. `Ok(true)`: waiting at a gap (or after a failed read), to look again.
    async fn catch_up(&mut self, cid: &str) -> Result<bool, End> {
        loop {
            let Some(delivered) = self.convs.get(cid).map(|c| c.delivered) else {
                return Ok(false);
            };
            let page = match self
                .svc
                .history(
                    &self.req.tenant,
                    cid,
                    &self.req.user,
                    Anchor::After(delivered),
                    MAX_PAGE,
                )
                .await
            {
                Ok(page) => page,
                Err(error) => {
                    tracing::debug!(%error, conversation_id = cid, "stream read failed; retrying");
                    return Ok(true);
                }
            };
            if let Some(c) = self.convs.get_mut(cid) {
                c.latest = page.latest_seq;
            }
            if delivered > page.latest_seq {
                // A position ahead of the conversation (kept from before its store was reset or
                // restored): the client is told, and the stream goes on from the latest seq.
                self.set_delivered(cid, page.latest_seq, None);
                self.emit(StreamEvent::Reload {
                    position: self.position(),
                    conversation_id: cid.to_owned(),
                    missed_from: page.latest_seq + 1,
                    missed_to: delivered,
                })
                .await?;
                return Ok(false);
            }
            let now = self.svc.now_ms();
            let mut next = delivered;
            for m in page.messages {
                if m.conversation_seq <= next {
                    continue;
                }
                if m.conversation_seq > next + 1 {
                    let old = now.saturating_sub(m.committed_at_ms) > self.patience_ms();
                    if !old && !self.gap_outwaited(cid) {
                        self.wait_at_gap(cid);
                        return Ok(true);
                    }
                    self.missed(cid, next + 1, m.conversation_seq - 1).await?;
                }
                next = m.conversation_seq;
                self.set_delivered(cid, next, Some(m.committed_at_ms));
                self.emit(StreamEvent::Message {
                    position: self.position(),
                    record: m,
                })
                .await?;
                self.svc.metrics().stream_events.inc();
            }
            if next >= page.latest_seq {
                self.learn_delivered_at(cid).await;
                return Ok(false);
            }
            if next == delivered {
                // Nothing readable in the page's window: seqs RESERVED, or gone for good.
                if !self.gap_outwaited(cid) {
                    self.wait_at_gap(cid);
                    return Ok(true);
                }
                let skip_to = (delivered + MAX_PAGE).min(page.latest_seq);
                self.missed(cid, delivered + 1, skip_to).await?;
            }
        }
    }

    /// Seqs `from..=to` of `cid` will never be readable: passed over, and the client told.
    async fn missed(&mut self, cid: &str, from: u64, to: u64) -> Result<(), End> {
        self.set_delivered(cid, to, None);
        self.emit(StreamEvent::Reload {
            position: self.position(),
            conversation_id: cid.to_owned(),
            missed_from: from,
            missed_to: to,
        })
        .await
    }

    /// The gap patience in ms.
    fn patience_ms(&self) -> i64 {
        i64::try_from(self.patience.as_millis()).unwrap_or(i64::MAX)
    }

    /// Whether `cid` has waited at a gap longer than the patience.
    fn gap_outwaited(&self, cid: &str) -> bool {
        self.convs
            .get(cid)
            .and_then(|c| c.gap_since)
            .is_some_and(|t| t.elapsed() > self.patience)
    }

    /// Seq `seq` of `cid`, committed at `at_ms` if it was read, was delivered or passed over.
    fn set_delivered(&mut self, cid: &str, seq: u64, at_ms: Option<i64>) {
        if let Some(c) = self.convs.get_mut(cid) {
            c.delivered = seq;
            c.delivered_at_ms = at_ms;
            c.gap_since = None;
        }
    }

    /// `cid` waits at a gap after its delivered seq.
    fn wait_at_gap(&mut self, cid: &str) {
        if let Some(c) = self.convs.get_mut(cid) {
            c.gap_since.get_or_insert_with(Instant::now);
        }
    }

    /// Reads the commit time of `cid`'s delivered seq where the stream took the seq from a
    /// position, so that the conversation can leave the position once the watermark passes
    /// it. Best effort: unread (a read failed, the message expired), it stays named.
    async fn learn_delivered_at(&mut self, cid: &str) {
        let Some(delivered) = self
            .convs
            .get(cid)
            .filter(|c| c.delivered > 0 && c.delivered_at_ms.is_none())
            .map(|c| c.delivered)
        else {
            return;
        };
        let (tenant, user) = (&self.req.tenant, &self.req.user);
        let anchor = Anchor::Before(delivered + 1);
        if let Ok(page) = self.svc.history(tenant, cid, user, anchor, 1).await
            && let Some(m) = page
                .messages
                .first()
                .filter(|m| m.conversation_seq == delivered)
            && let Some(c) = self.convs.get_mut(cid)
        {
            c.delivered_at_ms = Some(m.committed_at_ms);
        }
    }

    async fn read_moved(&mut self, cid: &str) -> Result<(), End> {
        if !self.convs.contains_key(cid) {
            return Ok(());
        }
        let read = match self
            .svc
            .stores()
            .hot
            .read_seq(&self.req.tenant, cid, &self.req.user)
            .await
        {
            Ok(r) => r,
            Err(error) => {
                tracing::debug!(%error, conversation_id = cid, "stream read pointer not read");
                return Ok(());
            }
        };
        let Some(c) = self.convs.get_mut(cid) else {
            return Ok(());
        };
        if read <= c.read {
            return Ok(());
        }
        c.read = read;
        self.emit(StreamEvent::Read {
            position: self.position(),
            conversation_id: cid.to_owned(),
            read_seq: read,
        })
        .await
    }

    /// The client's position now, under a watermark one gap patience before the stream last
    /// took its wake-ups: what was committed by then has been read, is pending, or never
    /// will be readable (the gap rule), so only conversations active since, pending, behind,
    /// or waiting at a gap are named. While a replay from a `v1` position is under way, the
    /// conversations not replayed yet resume from their first message, so the position is a
    /// `v1` one naming every conversation delivered from.
    fn position(&self) -> String {
        if self.from_first {
            return Position::encode_from_first(
                self.convs
                    .iter()
                    .filter(|(_, c)| c.delivered > 0)
                    .map(|(cid, c)| (cid.as_str(), c.delivered)),
            );
        }
        let watermark_ms = self.synced_ms.saturating_sub(self.patience_ms());
        Position::encode_entries(
            watermark_ms,
            self.convs
                .iter()
                .filter(|(cid, c)| self.pending.contains(*cid) || !c.settled_by(watermark_ms))
                .map(|(cid, c)| (cid.as_str(), c.delivered)),
        )
    }

    /// Hands `event` to the client. Errors: the client went away (`Gone`), or it took nothing
    /// for the lag timeout (`Lagged`).
    async fn emit(&self, event: StreamEvent) -> Result<(), End> {
        match tokio::time::timeout(self.lag_timeout, self.tx.send(event)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(End::Gone),
            Err(_) => Err(End::Lagged),
        }
    }
}

#[cfg(test)]
mod tests;
