//! The commit path: SEND → SEND_ACK (DESIGN.md part A, seed 000 decision 1).
//!
//! Staged (separate hot store and outbox, e.g. Redis + Kafka):
//! 1. `reserve`: dedup lookup, seq allocation, record RESERVED — atomic in the hot store;
//! 2. append the committed envelope (the full record) to the outbox and wait until durable;
//! 3. `mark_committed`: COMMITTED, hot index, trim candidate `now + hot_window`.
//!
//! SEND_ACK only after step 2. A crash between the steps leaves a RESERVED record that the
//! recovery worker ([`crate::recovery`]) finishes with [`publish_and_commit`], the same code.
//! Fused (the embedded default): all three steps in one group-committed transaction.
//!
//! `sync-archive` mode additionally writes the archive (records, then index) before the ACK
//! ([`Committer::archive_before_ack`]), after the commit: a SEND whose archive write fails is
//! committed all the same (hot tier and outbox; the archiver archives it later), and answers
//! 503 `not_archived` naming its seq instead of an ACK. A retry with the same `client_msg_id`
//! writes the archive before its 200 if it still lacks the message, so every ACK of that mode
//! means archived.

use std::borrow::Cow;
use std::sync::Arc;

use tidemark_core::clock::SharedClock;

use crate::error::{ChatError, Result};
use crate::model::{MessageRecord, Reservation, SendCommand, SendOutcome};
use crate::ports::{Archive, CommitParams, FusedCommit, HotStore, Outbox};

/// How commits reach the stores.
#[derive(Debug, Clone)]
pub enum CommitPath {
    /// One transaction in a store that holds hot tier and outbox together.
    Fused {
        /// The store.
        store: Arc<dyn FusedCommit>,
        /// Whether the outbox is written (off in `hot-only` mode).
        with_outbox: bool,
    },
    /// The three steps over separate stores.
    Staged {
        /// Hot store.
        hot: Arc<dyn HotStore>,
        /// Outbox.
        outbox: Arc<dyn Outbox>,
    },
}

/// Runs SENDs through the commit path.
#[derive(Debug, Clone)]
pub struct Committer {
    path: CommitPath,
    clock: SharedClock,
    params: CommitParams,
    sync_archive: Option<Arc<dyn Archive>>,
}

impl Committer {
    /// A committer; `sync_archive` is `Some` only in `sync-archive` mode.
    pub fn new(
        path: CommitPath,
        clock: SharedClock,
        params: CommitParams,
        sync_archive: Option<Arc<dyn Archive>>,
    ) -> Self {
        Self {
            path,
            clock,
            params,
            sync_archive,
        }
    }

    /// Commits one SEND. Returns once the message is durable (or the original ACK of a retry).
    pub async fn commit(&self, cmd: SendCommand) -> Result<SendOutcome> {
        let outcome = match &self.path {
            CommitPath::Fused { store, with_outbox } => {
                store
                    .commit_fused(cmd, &self.clock, self.params, *with_outbox)
                    .await?
            }
            CommitPath::Staged { hot, outbox } => {
                staged_commit(hot.as_ref(), outbox.as_ref(), &self.clock, self.params, cmd).await?
            }
        };
        Ok(outcome)
    }

    /// Whether SENDs are archived before their ACK (`sync-archive` mode).
    pub fn archives_before_ack(&self) -> bool {
        self.sync_archive.is_some()
    }

    /// In `sync-archive` mode, writes the archive for a committed SEND (records, then index:
    /// seed 000, index after record) before its ACK; elsewhere nothing. A retry writes nothing
    /// if the archive's index has its entry (index after record: the record is there too);
    /// otherwise it reads the original record back from `hot` and writes it again (both writes
    /// are idempotent); one no longer in the hot tier was archived before the trimmer removed
    /// it. (Were every retry to write the archive again, a retry of an archived message
    /// would answer `not_archived` on a full archive disk.)
    ///
    /// # Errors
    /// [`ChatError::NotArchived`] if a write fails: the message stays committed.
    pub async fn archive_before_ack(
        &self,
        hot: &dyn HotStore,
        tenant: &str,
        conversation_id: &str,
        outcome: &SendOutcome,
    ) -> Result<()> {
        let Some(archive) = &self.sync_archive else {
            return Ok(());
        };
        let ack = outcome.ack();
        let write = async {
            let record: Cow<'_, MessageRecord> = match outcome {
                SendOutcome::Committed(record) => Cow::Borrowed(record),
                SendOutcome::Duplicate(ack) => {
                    let (seq, now) = (ack.conversation_seq, self.clock.now_ms());
                    let indexed = archive.index_range(tenant, conversation_id, seq, seq);
                    if !indexed.await?.is_empty() {
                        return Ok(());
                    }
                    let slice = hot
                        .hot_slice(tenant, conversation_id, seq, seq, now)
                        .await?;
                    match slice.records.into_iter().next() {
                        Some(record) => Cow::Owned(record),
                        None => return Ok(()),
                    }
                }
            };
            archive.put_records(std::slice::from_ref(&*record)).await?;
            archive.put_index(&[record.index_entry()], None).await
        };
        write.await.map_err(|e| ChatError::NotArchived {
            conversation_seq: ack.conversation_seq,
            message_id: ack.message_id,
            cause: e.to_string(),
        })
    }
}

/// The staged commit: reserve, then [`publish_and_commit`]. A retry that finds its record still
/// RESERVED finishes the protocol itself (outbox duplicates are harmless) before answering.
pub async fn staged_commit(
    hot: &dyn HotStore,
    outbox: &dyn Outbox,
    clock: &SharedClock,
    params: CommitParams,
    cmd: SendCommand,
) -> Result<SendOutcome> {
    match hot.reserve(cmd, clock.now_ms(), params).await? {
        Reservation::Committed(ack) => Ok(SendOutcome::Duplicate(ack)),
        Reservation::Reserved { record, fresh } => {
            // Dated after a message of a node with a faster clock: this node's clock moves past
            // it (HLC receive), so that its next commits need no second try.
            clock.observe(record.committed_at_ms);
            // A crash test holds the SEND here, reserved but not in the outbox, and kills us.
            // Only test builds have failpoints: in the product this is no code at all.
            #[cfg(feature = "testing")]
            if fresh && crate::failpoint::active("after-reserve") {
                std::future::pending::<()>().await;
            }
            publish_and_commit(hot, outbox, std::slice::from_ref(&record), clock, params).await?;
            Ok(if fresh {
                SendOutcome::Committed(record)
            } else {
                SendOutcome::Duplicate(record.ack())
            })
        }
    }
}

/// Steps 2 and 3: append the envelopes to the outbox (durable), then mark them COMMITTED with a
/// commit time read *after* the append, so the watermark rule holds.
pub async fn publish_and_commit(
    hot: &dyn HotStore,
    outbox: &dyn Outbox,
    records: &[MessageRecord],
    clock: &SharedClock,
    params: CommitParams,
) -> Result<()> {
    outbox.append(records).await?;
    let keys: Vec<_> = records.iter().map(MessageRecord::key).collect();
    hot.mark_committed(&keys, clock.now_ms(), params).await
}
