//! The archivers' membership in the outbox topic's consumer group (DESIGN.md "Many nodes":
//! archivers share a consumer group and own partitions; a fenced archiver cannot commit).
//!
//! Each node's outbox joins the group `tidemark.archiver` with one member ([`Member`]) the
//! first time its archivers ask what they own. The broker's group protocol assigns the
//! topic's partitions among the members and moves them when a member joins, leaves or stops
//! heartbeating. The member only owns and commits: records are read by the outbox's own
//! per-partition readers at the archiver's offsets, so the member pauses every partition it is
//! assigned and its polling thread fetches nothing — it answers heartbeats and rebalances.
//!
//! Fencing: a position is committed through the member, with the group generation it holds,
//! and only for a partition in its current assignment ([`Member::commit`]). A member that lost
//! the partition (a rebalance gave it away, or the broker expired the member) gets
//! [`ChatError::PartitionLost`] and stores nothing: the archiver stops, and the new owner goes
//! on from the last position committed. A position that slips through between the check and a
//! rebalance is still true — the archive holds everything below it — and the new owner at worst
//! archives a batch again (the archive's writes are idempotent).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{Offset, TopicPartitionList};

use super::{TIMEOUT, unavailable};
use crate::error::{ChatError, Result};

/// How long [`Member::owned`] waits for the first assignment after joining.
const FIRST_ASSIGNMENT: Duration = Duration::from_secs(15);

/// Pauses every partition it is assigned, and notes that an assignment came.
struct PauseOnAssign {
    assigned: AtomicBool,
}

impl ClientContext for PauseOnAssign {}

impl ConsumerContext for PauseOnAssign {
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(partitions) = rebalance {
            if let Err(error) = consumer.pause(partitions) {
                tracing::warn!(%error, "outbox group member: pausing its partitions");
            }
            self.assigned.store(true, Ordering::SeqCst);
        }
    }
}

/// One node's member of the archivers' consumer group (see the module docs). Leaves the group
/// when dropped.
pub(super) struct Member {
    consumer: Arc<BaseConsumer<PauseOnAssign>>,
    topic: String,
    stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
    joined: Instant,
}

impl Member {
    /// Joins `group` on `topic` and starts the thread that keeps the membership.
    pub(super) fn join(brokers: &str, group: &str, topic: &str) -> Result<Self> {
        let consumer: BaseConsumer<PauseOnAssign> = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // A member that stops heartbeating (a node killed) is out of the group after
            // 6 s, and a rebalance waits at most 10 s for the members to rejoin (the JoinGroup
            // rebalance timeout is max.poll.interval.ms; the polling thread polls every
            // 100 ms), so its partitions reach the others within seconds.
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "1000")
            .set("max.poll.interval.ms", "10000")
            .create_with_context(PauseOnAssign {
                assigned: AtomicBool::new(false),
            })
            .map_err(|e| unavailable("group member", e))?;
        consumer
            .subscribe(&[topic])
            .map_err(|e| unavailable("subscribe", e))?;
        let consumer = Arc::new(consumer);
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (consumer, stop) = (Arc::clone(&consumer), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("tidemark-outbox-group".into())
                .spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        // Paused partitions deliver nothing; a message that came before the
                        // pause is dropped (the readers read the log themselves).
                        if let Some(Err(error)) = consumer.poll(Duration::from_millis(100)) {
                            tracing::debug!(%error, "outbox group member");
                        }
                    }
                })
                .map_err(|e| {
                    ChatError::Store(tidemark_core::store::StoreError::new(
                        tidemark_core::store::ErrorKind::Unavailable,
                        "kafka",
                        e,
                    ))
                })?
        };
        Ok(Self {
            consumer,
            topic: topic.to_owned(),
            stop,
            poller: Some(poller),
            joined: Instant::now(),
        })
    }

    /// The partitions it is assigned now, ascending. Right after joining, waits (up to
    /// [`FIRST_ASSIGNMENT`]) for the group's first assignment.
    pub(super) fn owned(&self) -> Result<Vec<u32>> {
        while !self.consumer.context().assigned.load(Ordering::SeqCst)
            && self.joined.elapsed() < FIRST_ASSIGNMENT
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let assignment = self
            .consumer
            .assignment()
            .map_err(|e| unavailable("assignment", e))?;
        let mut owned: Vec<u32> = assignment
            .elements()
            .iter()
            .filter(|e| e.topic() == self.topic)
            .map(|e| e.partition() as u32)
            .collect();
        owned.sort_unstable();
        Ok(owned)
    }

    /// Commits `position` for `partition` with the member's group generation, if the
    /// partition is in its assignment; [`ChatError::PartitionLost`] otherwise, or if the broker
    /// refuses the generation.
    pub(super) fn commit(&self, partition: u32, position: u64) -> Result<()> {
        if !self.owned()?.contains(&partition) {
            return Err(ChatError::PartitionLost { partition });
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(
            &self.topic,
            partition as i32,
            Offset::Offset(position as i64),
        )
        .map_err(|e| unavailable("offset", e))?;
        self.consumer
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| match e.rdkafka_error_code() {
                Some(
                    rdkafka::types::RDKafkaErrorCode::IllegalGeneration
                    | rdkafka::types::RDKafkaErrorCode::UnknownMemberId
                    | rdkafka::types::RDKafkaErrorCode::RebalanceInProgress
                    | rdkafka::types::RDKafkaErrorCode::FencedInstanceId,
                ) => ChatError::PartitionLost { partition },
                _ => unavailable("commit offset", e),
            })
    }

    /// The group's committed position of `partition`, if any.
    pub(super) fn committed(&self, partition: u32) -> Result<Option<u64>> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, partition as i32);
        let committed = self
            .consumer
            .committed_offsets(tpl, TIMEOUT)
            .map_err(|e| unavailable("committed offsets", e))?;
        Ok(committed.elements().first().and_then(|e| match e.offset() {
            Offset::Offset(o) if o >= 0 => Some(o as u64),
            _ => None,
        }))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(poller) = self.poller.take() {
            let _ = poller.join();
        }
    }
}
