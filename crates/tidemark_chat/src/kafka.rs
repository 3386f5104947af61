//! The production outbox on a Kafka-protocol broker (DESIGN.md "Backends": outbox log) with
//! rdkafka (bundled librdkafka).
//!
//! Data flow: the staged commit appends each committed envelope (the full record as JSON) with
//! an idempotent producer, `acks=all`, key = the conversation (`<tenant>/<conversation_id>`)
//! and record timestamp = `committed_at`; [`Outbox::append`] returns only once the broker has
//! acknowledged every record, so SEND_ACK never precedes durability. A broker that does not
//! answer within 5 s (`message.timeout.ms`) fails the append: the SEND fails with 503 and
//! nothing is acknowledged.
//!
//! The topic has P partitions (`chat.outbox_partitions`, fixed when the topic is created: a
//! missing topic is created with P, an existing one with another count is refused). Each
//! record goes to its conversation's partition ([`crate::ports::partition_of`], computed here,
//! not by librdkafka's partitioner, so every backend and every build agrees), so one
//! conversation's records stay in order in one offset range `[low, high]`; the archiver's start
//! rule, position and watermark are per partition.
//!
//! Consumer positions ([`Outbox::position`]) are the broker's committed offsets of the
//! consumer group `tidemark.<consumer>` (the archiver: `tidemark.archiver`), committed
//! synchronously. The archivers of every node are members of that group, which assigns them
//! the partitions; a member commits only for the partitions it owns, with its group
//! generation ([`group`]). They live beside the log, as the SQLite outbox keeps them in its own file:
//! the position shares the log's fate (a recreated topic shows up as a position outside
//! `[low, high]` and the archiver refuses to start), and nothing else needs to be durable for
//! the archiver to resume.
//!
//! Retention ([`Outbox::truncate`]) drops a prefix: up to the first record at or above `below`,
//! the first one not older than the cutoff, or `max` records, whichever comes first. The new
//! start of the log is committed as the offset of the reserved group `tidemark.retention` and
//! from then on is the log's `low` for this outbox (reads start there); the records themselves
//! are deleted with the `DeleteRecords` admin call where the broker has it (Kafka, Redpanda). A
//! broker that refuses it is noted once in the log; one that cannot be trusted with it is
//! given `?delete_records=false` (tansu 0.6: its memory storage drops the connection, its
//! SQLite engine stops serving every client). Either way the broker's own retention
//! (`retention.ms`, to be set above `chat.outbox_retention` plus the archive-lag alert) frees
//! the space.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use tidemark_core::clock::SharedClock;
use tidemark_core::store::{ErrorKind, StoreError};

mod group;

use crate::archiver::ARCHIVER_CONSUMER;
use crate::error::{ChatError, Result};
use crate::model::MessageRecord;
use crate::ports::{Outbox, partition_of};

/// How long a broker call may take before the outbox reports the broker unavailable.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);

/// `e`, which happened while doing `what`, as a store failure of the kind [`error_kind`] says.
pub(crate) fn unavailable(what: &str, e: KafkaError) -> ChatError {
    ChatError::Store(StoreError::new(error_kind(&e), "kafka", e).with_context(what.to_owned()))
}

/// A failure that is no broker error (a lock, a worker thread, an answer out of order),
/// retryable: the next call starts afresh.
fn internal(what: &str) -> ChatError {
    ChatError::Store(StoreError::new(
        ErrorKind::Unavailable,
        "kafka",
        what.to_owned(),
    ))
}

/// The kind of a broker error: a message, topic or configuration the broker refuses as such
/// (too large, invalid, not authorized, an unsupported version or policy, a bad client
/// setting) is [`ErrorKind::Rejected`]; everything else (no broker, timeouts, leader
/// elections, a replica's storage error, not enough replicas) [`ErrorKind::Unavailable`], as
/// librdkafka itself retries those.
pub fn error_kind(e: &KafkaError) -> ErrorKind {
    use RDKafkaErrorCode as C;
    match (e, e.rdkafka_error_code()) {
        (KafkaError::ClientConfig(..) | KafkaError::Nul(_), _) => ErrorKind::Rejected,
        (
            _,
            Some(
                C::InvalidMessage
                | C::InvalidMessageSize
                | C::MessageSizeTooLarge
                | C::MessageBatchTooLarge
                | C::InvalidRecord
                | C::InvalidTopic
                | C::TopicAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::UnsupportedVersion
                | C::InvalidConfig
                | C::PolicyViolation,
            ),
        ) => ErrorKind::Rejected,
        _ => ErrorKind::Unavailable,
    }
}

/// A parsed outbox URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaUrl {
    /// Bootstrap servers (`host:port[,host:port…]`).
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// Whether the producer is idempotent (default; `?idempotence=false` turns it off for a
    /// broker whose idempotence cannot be trusted, see [`new_producer`]).
    pub idempotence: bool,
    /// Most records per produce batch (`?max_batch=N`; default: librdkafka's 10,000). `1`
    /// for a broker that mishandles multi-record batches (see [`new_producer`]).
    pub max_batch: Option<u32>,
    /// Whether retention deletes the records it drops with `DeleteRecords` (default;
    /// `?delete_records=false` leaves them to the broker's own `retention.ms`, for a broker
    /// whose `DeleteRecords` cannot be trusted: tansu 0.6's SQLite engine stops serving every
    /// client on one).
    pub delete_records: bool,
}

/// Parses `kafka://host:port[,host:port…]/topic[?option&…]` with the options
/// `idempotence=true|false`, `max_batch=N` (1..=1,000,000) and `delete_records=true|false`.
/// Errors: [`ChatError::Invalid`] naming what is wrong.
pub fn parse_url(url: &str) -> Result<KafkaUrl> {
    let bad = |why: &str| ChatError::Invalid(format!("bad Kafka URL {url:?}: {why}"));
    let rest = url
        .strip_prefix("kafka://")
        .ok_or_else(|| bad("the scheme must be kafka://"))?;
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (brokers, topic) = rest
        .split_once('/')
        .ok_or_else(|| bad("the path must name the topic"))?;
    if brokers.is_empty() {
        return Err(bad("no broker address"));
    }
    if topic.is_empty()
        || topic.len() > 249
        || !topic
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(bad("the topic must be 1-249 characters of [A-Za-z0-9._-]"));
    }
    let mut parsed = KafkaUrl {
        brokers: brokers.to_owned(),
        topic: topic.to_owned(),
        idempotence: true,
        max_batch: None,
        delete_records: true,
    };
    for option in query.split('&').filter(|o| !o.is_empty()) {
        match option.split_once('=') {
            Some(("idempotence", "true")) => parsed.idempotence = true,
            Some(("idempotence", "false")) => parsed.idempotence = false,
            Some(("delete_records", "true")) => parsed.delete_records = true,
            Some(("delete_records", "false")) => parsed.delete_records = false,
            Some(("max_batch", n)) => {
                parsed.max_batch = Some(
                    n.parse()
                        .ok()
                        .filter(|n| (1..=1_000_000).contains(n))
                        .ok_or_else(|| bad("max_batch must be 1..=1000000"))?,
                );
            }
            _ => {
                return Err(bad(
                    "the options are idempotence=true|false, max_batch=N and \
                     delete_records=true|false",
                ));
            }
        }
    }
    Ok(parsed)
}

/// The reader's state: the consumer and the offset its assignment will deliver next.
struct Reader {
    consumer: OutboxConsumer,
    next: Option<i64>,
}

/// The Kafka-protocol outbox (see the module docs).
pub struct KafkaOutbox {
    brokers: String,
    topic: String,
    idempotence: bool,
    max_batch: Option<u32>,
    /// P.
    partitions: u32,
    /// This node's member of the archivers' consumer group, once its archivers asked what
    /// they own ([`group`]).
    member: tokio::sync::OnceCell<Arc<group::Member>>,
    /// Replaced when librdkafka declares it fatally failed (see [`KafkaOutbox::append`]).
    producer: RwLock<FutureProducer>,
    /// One reader per partition: each keeps its fetch position between calls.
    readers: Vec<Arc<Mutex<Reader>>>,
    groups: Mutex<HashMap<String, Arc<OutboxConsumer>>>,
    admin: AdminClient<DefaultClientContext>,
    /// Per partition, the retention floor: offsets below it are truncated (see the module
    /// docs).
    floors: Vec<AtomicU64>,
    /// Whether the broker still looks like it supports `DeleteRecords`.
    delete_records: AtomicBool,
}

/// The consumer name under which the retention floor is committed (reserved).
pub const RETENTION_CONSUMER: &str = "retention";

impl std::fmt::Debug for KafkaOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaOutbox")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .finish()
    }
}

/// The context of the outbox's consumers: the end of a partition, which the reader asks to be
/// told of (`enable.partition.eof`: a fetch that reached it has everything there is), is not
/// logged as an error when librdkafka reports it outside a poll (as a partition's error or as
/// a global one); every other client error is.
struct OutboxContext;

impl ClientContext for OutboxContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        ) {
            tracing::debug!("librdkafka: {error}: {reason}");
        } else {
            tracing::error!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for OutboxContext {}

/// A consumer of the outbox's topic (the reader, or a named group's positions).
type OutboxConsumer = BaseConsumer<OutboxContext>;

fn consumer(brokers: &str, group: &str) -> Result<OutboxConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "true")
        .create_with_context(OutboxContext)
        .map_err(|e| unavailable("consumer", e))
}

impl KafkaOutbox {
    /// Connects to the brokers of `url` (`kafka://host:port/topic`), creates the topic with
    /// `partitions` (P ≥ 1) partitions if it is missing and checks that it has P. Errors:
    /// [`ChatError::Invalid`] for a bad URL or a topic with another partition count (naming
    /// both), [`ChatError::Store`] when the broker does not answer within 5 s.
    pub async fn connect(url: &str, partitions: u32) -> Result<Self> {
        if partitions == 0 {
            return Err(ChatError::Invalid(
                "chat.outbox_partitions must be at least 1".into(),
            ));
        }
        let KafkaUrl {
            brokers,
            topic,
            idempotence,
            max_batch,
            delete_records,
        } = parse_url(url)?;
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()
            .map_err(|e| unavailable("admin client", e))?;
        let opts = admin_options();
        let created = admin
            .create_topics(
                &[NewTopic::new(
                    &topic,
                    partitions as i32,
                    TopicReplication::Fixed(1),
                )],
                &opts,
            )
            .await
            .map_err(|e| unavailable("create topic", e))?;
        for result in created {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, code)) => {
                    return Err(unavailable(
                        &format!("create topic {t}"),
                        KafkaError::AdminOp(code),
                    ));
                }
            }
        }
        let producer = new_producer(&brokers, idempotence, max_batch)?;
        let readers = (0..partitions)
            .map(|_| {
                Ok(Arc::new(Mutex::new(Reader {
                    consumer: consumer(&brokers, "tidemark.outbox-reader")?,
                    next: None,
                })))
            })
            .collect::<Result<Vec<_>>>()?;
        let found = {
            let t = topic.clone();
            let reader = readers[0].lock().map_err(|_| internal("reader poisoned"))?;
            let metadata = reader
                .consumer
                .fetch_metadata(Some(&t), TIMEOUT)
                .map_err(|e| unavailable("metadata", e))?;
            metadata
                .topics()
                .iter()
                .find(|m| m.name() == t)
                .map_or(0, |m| m.partitions().len())
        };
        if found != partitions as usize {
            return Err(ChatError::Invalid(format!(
                "outbox topic {topic} has {found} partitions, chat.outbox_partitions is \
                 {partitions}: the count is fixed when the topic is created (a conversation's \
                 records must stay in one partition); set chat.outbox_partitions = {found}"
            )));
        }
        let outbox = Self {
            brokers: brokers.clone(),
            topic,
            idempotence,
            max_batch,
            partitions,
            member: tokio::sync::OnceCell::new(),
            producer: RwLock::new(producer),
            readers,
            groups: Mutex::new(HashMap::new()),
            admin,
            floors: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            delete_records: AtomicBool::new(delete_records),
        };
        for p in 0..partitions {
            let floor = outbox.position(RETENTION_CONSUMER, p).await?.unwrap_or(0);
            outbox.floors[p as usize].store(floor, Ordering::SeqCst);
        }
        Ok(outbox)
    }

    /// This node's member of the archivers' group, joined on first use.
    async fn member(&self) -> Result<Arc<group::Member>> {
        let member = self
            .member
            .get_or_try_init(|| async {
                let (brokers, topic) = (self.brokers.clone(), self.topic.clone());
                let group = format!("tidemark.{ARCHIVER_CONSUMER}");
                blocking(move || group::Member::join(&brokers, &group, &topic).map(Arc::new)).await
            })
            .await?;
        Ok(Arc::clone(member))
    }

    /// The group member, if `consumer` is the archiver and this node joined the group: the
    /// archiver's positions then go through it (fenced by the group generation).
    fn joined(&self, consumer: &str) -> Option<Arc<group::Member>> {
        (consumer == ARCHIVER_CONSUMER)
            .then(|| self.member.get().cloned())
            .flatten()
    }

    /// `partition` as librdkafka's partition number, or [`ChatError::Invalid`] if the topic
    /// has no such partition.
    fn check(&self, partition: u32) -> Result<i32> {
        if partition < self.partitions {
            Ok(partition as i32)
        } else {
            Err(ChatError::Invalid(format!(
                "outbox topic {} has {} partitions, not partition {partition}",
                self.topic, self.partitions
            )))
        }
    }

    /// The consumer of group `tidemark.<name>`, created on first use.
    fn group(&self, name: &str) -> Result<Arc<OutboxConsumer>> {
        let mut groups = self
            .groups
            .lock()
            .map_err(|_| internal("consumer table poisoned"))?;
        if let Some(c) = groups.get(name) {
            return Ok(Arc::clone(c));
        }
        let c = Arc::new(consumer(&self.brokers, &format!("tidemark.{name}"))?);
        groups.insert(name.to_owned(), Arc::clone(&c));
        Ok(c)
    }

    fn partition_list(&self, partition: u32, offset: Option<u64>) -> Result<TopicPartitionList> {
        let partition = self.check(partition)?;
        let mut tpl = TopicPartitionList::new();
        match offset {
            Some(o) => tpl
                .add_partition_offset(&self.topic, partition, Offset::Offset(o as i64))
                .map_err(|e| unavailable("offset", e))?,
            None => {
                tpl.add_partition(&self.topic, partition);
            }
        }
        Ok(tpl)
    }
}

/// The producer: `acks=all`, 5 s delivery timeout, 1 ms linger, a `client.id` of its own
/// (`tidemark-outbox-<uuid v7>`), idempotent unless the URL says `?idempotence=false`.
///
/// Seen against tansu 0.6 (the test broker): after `kill -9` of tidemark, the restarted
/// process's idempotent producer had records acknowledged (`acks=all`) that never reached the
/// log — the broker took them for duplicates of the dead producer's — and the archiver then let
/// the trimmer delete them from Redis: acknowledged messages lost. A broker whose idempotence
/// cannot be trusted must run with `?idempotence=false`: the outbox tolerates duplicates
/// (DESIGN.md: the archiver's inserts are idempotent), so retries without idempotence are safe.
/// The tests against tansu do so; Kafka and Redpanda keep the default.
///
/// `max_batch` (`?max_batch=N`) bounds the records of one produce batch, for a broker that
/// cannot be trusted with larger ones: tansu 0.6 on its memory storage acknowledged a batch of
/// several records whole but advanced the log by one offset, and the next batch overwrote the
/// rest (its SQLite engine keeps them: `tests/kafka_restart.rs`). Kafka, Redpanda and that
/// engine keep librdkafka's default.
pub fn new_producer(
    brokers: &str,
    idempotence: bool,
    max_batch: Option<u32>,
) -> Result<FutureProducer> {
    let mut cfg = ClientConfig::new();
    if let Some(n) = max_batch {
        cfg.set("batch.num.messages", n.to_string());
    }
    cfg.set("bootstrap.servers", brokers)
        .set(
            "client.id",
            format!("tidemark-outbox-{}", uuid::Uuid::now_v7()),
        )
        .set("enable.idempotence", idempotence.to_string())
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", TIMEOUT.as_millis().to_string())
        .create()
        .map_err(|e| unavailable("producer", e))
}

fn admin_options() -> AdminOptions {
    AdminOptions::new()
        .operation_timeout(Some(TIMEOUT))
        .request_timeout(Some(TIMEOUT))
}

/// Runs a blocking librdkafka call off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| internal(&format!("worker: {e}")))?
}

/// Positions the reader at `from`: `unassign`, then `assign` at the offset. (A second `assign`
/// over a live assignment, or a `seek`, was seen to keep delivering from the old fetch position
/// on tansu; replacing the consumer instead hung in its close.)
fn position_at(reader: &mut Reader, topic: &str, partition: i32, from: i64) -> Result<()> {
    if reader.next.is_some() {
        reader
            .consumer
            .unassign()
            .map_err(|e| unavailable("unassign", e))?;
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(|e| unavailable("assign", e))?;
    reader
        .consumer
        .assign(&tpl)
        .map_err(|e| unavailable("assign", e))?;
    reader.next = Some(from);
    Ok(())
}

/// How often a read steps back before it gives up (the step grows 8, 64, 512, … offsets).
const MAX_STEPS_BACK: u32 = 6;

/// Reads up to `max` records from `from` on (below `high`), re-positioning only when the reader
/// is not already at `from`.
///
/// Offsets must follow each other without a gap (this outbox writes no transactions and no
/// compaction runs on it). A message below the expected offset is skipped. A message above it,
/// or the end of the partition below `high`, means the broker answered a fetch at an offset
/// inside a record batch with the next batch or nothing (seen on tansu 0.6): the reader steps
/// back (8, 64, 512, … offsets, never below `low`) and skips forward to the expected offset.
/// After [`MAX_STEPS_BACK`] the read fails (retryable) rather than skipping a record: the
/// archiver would otherwise store a position past a record it never wrote, and the trimmer
/// would delete that record from the hot tier.
fn read(
    reader: &mut Reader,
    topic: &str,
    partition: i32,
    from: i64,
    (low, high): (i64, i64),
    max: usize,
) -> Result<Vec<(u64, MessageRecord)>> {
    if reader.next != Some(from) {
        position_at(reader, topic, partition, from)?;
    }
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut out = Vec::new();
    let mut next = from;
    let mut steps_back = 0;
    let mut step_back = |reader: &mut Reader, next: i64, seen: String| -> Result<()> {
        steps_back += 1;
        if steps_back > MAX_STEPS_BACK {
            reader.next = None;
            return Err(internal(&format!(
                "fetch: expected offset {next} of {topic}, the broker answers {seen}"
            )));
        }
        let back = 8i64 << (3 * (steps_back - 1));
        position_at(reader, topic, partition, next.saturating_sub(back).max(low))?;
        reader.next = None; // the consumer is below `next` until it has skipped forward
        Ok(())
    };
    while out.len() < max && next < high && std::time::Instant::now() < deadline {
        match reader.consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => {
                step_back(reader, next, "end of partition".into())?;
            }
            Some(Err(e)) => {
                reader.next = None;
                return Err(unavailable("fetch", e));
            }
            Some(Ok(msg)) => {
                let offset = msg.offset();
                if offset < next {
                    continue;
                }
                if offset > next {
                    step_back(reader, next, format!("offset {offset}"))?;
                    continue;
                }
                let payload = msg.payload().unwrap_or_default();
                let record: MessageRecord = serde_json::from_slice(payload).map_err(|e| {
                    ChatError::Corrupt(format!(
                        "outbox {topic} partition {partition} offset {offset}: {e}"
                    ))
                })?;
                next = offset + 1;
                reader.next = Some(next);
                out.push((offset as u64, record));
            }
        }
    }
    Ok(out)
}

#[async_trait]
impl Outbox for KafkaOutbox {
    fn partitions(&self) -> u32 {
        self.partitions
    }

    async fn owned_partitions(&self) -> Result<Vec<u32>> {
        let member = self.member().await?;
        blocking(move || member.owned()).await
    }

    /// Produces every record and waits for all acknowledgements. An idempotent producer whose
    /// delivery timed out may be fenced by the broker (a fatal librdkafka state): it is then
    /// replaced by a fresh one, so that the client's retry can succeed.
    async fn append(&self, records: &[MessageRecord]) -> Result<()> {
        let producer = self
            .producer
            .read()
            .map_err(|_| internal("producer poisoned"))?
            .clone();
        let encoded = records
            .iter()
            .map(|r| {
                let key = format!("{}/{}", r.tenant, r.conversation_id);
                let payload = serde_json::to_vec(r)
                    .map_err(|e| ChatError::Invalid(format!("encoding envelope: {e}")))?;
                let partition = partition_of(&r.tenant, &r.conversation_id, self.partitions);
                Ok((r, key, payload, partition as i32))
            })
            .collect::<Result<Vec<_>>>()?;
        let sends = encoded.iter().map(|(r, key, payload, partition)| {
            let producer = &producer;
            async move {
                let record = FutureRecord::to(&self.topic)
                    .partition(*partition)
                    .key(key)
                    .payload(payload)
                    .timestamp(r.committed_at_ms);
                producer.send(record, TIMEOUT).await.map_err(|(e, _)| e)?;
                Ok::<_, KafkaError>(())
            }
        });
        let Err(error) = futures::future::try_join_all(sends).await else {
            return Ok(());
        };
        let fenced = matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
                    | RDKafkaErrorCode::UnknownProducerId
                    | RDKafkaErrorCode::OutOfOrderSequenceNumber
            )
        );
        if fenced || producer.client().fatal_error().is_some() {
            tracing::warn!(%error, "kafka producer can no longer produce; replacing it");
            let fresh = new_producer(&self.brokers, self.idempotence, self.max_batch)?;
            if let Ok(mut p) = self.producer.write() {
                *p = fresh;
            }
        }
        Err(unavailable("produce", error))
    }

    async fn offsets(&self, partition: u32) -> Result<(u64, u64)> {
        let p = self.check(partition)?;
        let (reader, topic) = (Arc::clone(&self.readers[p as usize]), self.topic.clone());
        let floor = self.floors[p as usize].load(Ordering::SeqCst);
        blocking(move || {
            let reader = reader.lock().map_err(|_| internal("reader poisoned"))?;
            let (low, high) = reader
                .consumer
                .fetch_watermarks(&topic, p, TIMEOUT)
                .map_err(|e| unavailable("watermarks", e))?;
            let high = high.max(0) as u64;
            Ok(((low.max(0) as u64).max(floor).min(high), high))
        })
        .await
    }

    /// `T0` is read before `H0`: a commit that completed before `T0` had its append
    /// acknowledged (`acks=all`) before it, so its offset is below any high watermark read
    /// afterwards.
    async fn watermark_snapshot(&self, partition: u32, clock: &SharedClock) -> Result<(i64, u64)> {
        let t0 = clock.now_ms();
        let (_, h0) = self.offsets(partition).await?;
        Ok((t0, h0))
    }

    async fn fetch(
        &self,
        partition: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<(u64, MessageRecord)>> {
        let p = self.check(partition)?;
        let (reader, topic) = (Arc::clone(&self.readers[p as usize]), self.topic.clone());
        let floor = self.floors[p as usize].load(Ordering::SeqCst) as i64;
        blocking(move || {
            let mut reader = reader.lock().map_err(|_| internal("reader poisoned"))?;
            let (low, high) = reader
                .consumer
                .fetch_watermarks(&topic, p, TIMEOUT)
                .map_err(|e| unavailable("watermarks", e))?;
            let from = (from as i64).max(low).max(floor);
            if from >= high || max == 0 {
                return Ok(Vec::new());
            }
            read(&mut reader, &topic, p, from, (low, high), max)
        })
        .await
    }

    async fn position(&self, consumer: &str, partition: u32) -> Result<Option<u64>> {
        self.check(partition)?;
        if let Some(member) = self.joined(consumer) {
            return blocking(move || member.committed(partition)).await;
        }
        let group = self.group(consumer)?;
        let tpl = self.partition_list(partition, None)?;
        blocking(move || {
            let committed = group
                .committed_offsets(tpl, TIMEOUT)
                .map_err(|e| unavailable("committed offsets", e))?;
            Ok(committed.elements().first().and_then(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some(o as u64),
                _ => None,
            }))
        })
        .await
    }

    async fn store_position(&self, consumer: &str, partition: u32, position: u64) -> Result<()> {
        self.check(partition)?;
        if let Some(member) = self.joined(consumer) {
            return blocking(move || member.commit(partition, position)).await;
        }
        let group = self.group(consumer)?;
        let tpl = self.partition_list(partition, Some(position))?;
        blocking(move || {
            group
                .commit(&tpl, CommitMode::Sync)
                .map_err(|e| unavailable("commit offset", e))
        })
        .await
    }

    async fn truncate(
        &self,
        partition: u32,
        below: u64,
        older_than_ms: i64,
        max: usize,
    ) -> Result<usize> {
        let (low, _) = self.offsets(partition).await?;
        // The prefix to delete ends at `below`, after `max` records, or at the first record
        // not old enough.
        let end = below.min(low.saturating_add(max as u64));
        let mut cut = low;
        'scan: while cut < end {
            let batch = self
                .fetch(partition, cut, (end - cut).min(1000) as usize)
                .await?;
            if batch.is_empty() {
                break;
            }
            for (offset, record) in batch {
                if offset >= end || record.committed_at_ms >= older_than_ms {
                    break 'scan;
                }
                cut = offset + 1;
            }
        }
        if cut <= low {
            return Ok(0);
        }
        self.store_position(RETENTION_CONSUMER, partition, cut)
            .await?;
        self.floors[partition as usize].fetch_max(cut, Ordering::SeqCst);
        if self.delete_records.load(Ordering::SeqCst) {
            let tpl = self.partition_list(partition, Some(cut))?;
            let deleted = match self.admin.delete_records(&tpl, &admin_options()).await {
                Ok(result) => result.elements().iter().try_for_each(|e| e.error()),
                Err(e) => Err(e),
            };
            if let Err(error) = deleted {
                self.delete_records.store(false, Ordering::SeqCst);
                tracing::warn!(%error, topic = %self.topic,
                    "the broker did not delete records; its own retention must free the outbox");
            }
        }
        Ok((cut - low) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_errors_sort_into_kinds() {
        use RDKafkaErrorCode as C;
        let produce = |c| error_kind(&KafkaError::MessageProduction(c));
        assert_eq!(produce(C::MessageTimedOut), ErrorKind::Unavailable);
        assert_eq!(produce(C::AllBrokersDown), ErrorKind::Unavailable);
        assert_eq!(produce(C::NotEnoughReplicas), ErrorKind::Unavailable);
        assert_eq!(produce(C::KafkaStorageError), ErrorKind::Unavailable);
        assert_eq!(produce(C::MessageSizeTooLarge), ErrorKind::Rejected);
        assert_eq!(produce(C::TopicAuthorizationFailed), ErrorKind::Rejected);
        assert_eq!(
            error_kind(&KafkaError::ClientCreation("x".into())),
            ErrorKind::Unavailable
        );
        let e = unavailable(
            "produce",
            KafkaError::MessageProduction(C::MessageSizeTooLarge),
        );
        assert!(!e.is_retryable());
        assert!(e.to_string().starts_with("kafka: produce: "), "{e}");
    }

    /// What the subscriber wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_end_of_a_partition_is_not_logged_as_an_error() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            OutboxContext.error(KafkaError::PartitionEOF(3), "reached the end at offset 347");
            // The same end of a partition, as librdkafka reports it outside a poll.
            OutboxContext.error(
                KafkaError::Global(RDKafkaErrorCode::PartitionEOF),
                "Fetch from broker 111 reached end of partition at offset 54",
            );
            OutboxContext.error(
                KafkaError::Global(RDKafkaErrorCode::AllBrokersDown),
                "all brokers are down",
            );
        });
        let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(!logged.contains("offset 347"), "{logged}");
        assert!(!logged.contains("offset 54"), "{logged}");
        assert_eq!(logged.matches("ERROR").count(), 1, "{logged}");
        assert!(logged.contains("all brokers are down"), "{logged}");
    }

    #[test]
    fn urls_name_brokers_and_one_topic() {
        assert_eq!(
            parse_url("kafka://127.0.0.1:9092/tidemark.chat.outbox").unwrap(),
            KafkaUrl {
                brokers: "127.0.0.1:9092".into(),
                topic: "tidemark.chat.outbox".into(),
                idempotence: true,
                max_batch: None,
                delete_records: true,
            }
        );
        let u =
            parse_url("kafka://h:1/t?idempotence=false&max_batch=1&delete_records=false").unwrap();
        assert_eq!(
            (u.idempotence, u.max_batch, u.delete_records),
            (false, Some(1), false)
        );
        for bad in [
            "http://x/y",
            "kafka://127.0.0.1:9092",
            "kafka:///t",
            "kafka://h:1/a b",
            "kafka://h:1/t?acks=1",
            "kafka://h:1/t?max_batch=0",
            "kafka://h:1/t?max_batch=x",
            "kafka://h:1/t?delete_records=no",
        ] {
            assert!(
                matches!(parse_url(bad), Err(ChatError::Invalid(_))),
                "{bad}"
            );
        }
    }
}
