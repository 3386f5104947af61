//! [`HotStore`] on Redis: each method is one script or one command; the work across shards
//! (trimming, queues, leases, counts) is in [`super::shards`]. See [`super::keys`] for the
//! layout and `scripts/*.lua` for the atomic steps.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use futures::future::try_join_all;
use redis::Value;

use super::RedisHot;
use super::keys::{self, CLOCK_FLOOR, ConvKeys, SHARDS, dedup_field};
use crate::error::{ChatError, Result};
use crate::model::{
    ConversationMeta, HotSlice, HotUnread, Membership, MessageClass, MessageRecord, RecordKey,
    Reservation, SendAck, SendCommand, SendOutcome,
};
use crate::ports::{
    CommitParams, FusedCommit, HOT_WINDOW_FLOOR_KEY, HotStore, ShardLease, partition_key,
    partition_of_key,
};
use crate::trimmer::first_recorded_window;
use tidemark_core::clock::SharedClock;
use tidemark_core::store::{ErrorKind, StoreError};

/// How many times a reservation is dated again because the conversation's latest message is
/// dated later ([`RedisHot::reserve_as`]): each try moves to the time the store answered, so
/// only a conversation written ever faster by nodes with faster clocks needs more than two.
const CLOCK_RETRIES: usize = 8;

/// The state `reserve_and_record.lua` writes a fresh record in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RecordState {
    /// RESERVED: step 1 of the staged commit (an outbox append and COMMITTED follow).
    Reserved,
    /// COMMITTED and indexed at once: the whole commit of `hot-only` mode, which has no outbox.
    Committed,
}

impl RecordState {
    /// The first byte of the record value (see `prelude.lua`).
    pub(super) fn tag(self) -> &'static str {
        match self {
            RecordState::Reserved => "R",
            RecordState::Committed => "C",
        }
    }

    /// The shard queue a fresh record in this state goes in: `rsv` (RESERVED, for the recovery
    /// worker) or `ut` (committed in hot-only mode, for the backfill into the outbox).
    pub(super) fn queue(self) -> &'static str {
        match self {
            RecordState::Reserved => "rsv",
            RecordState::Committed => "ut",
        }
    }
}

/// The JSON part of a record value: `[message_id, sender, client_msg_id, body, class,
/// committed_at]`; tenant, conversation and seq are in the key and field, the expiry in the
/// value's prefix.
type StoredRecord = (String, String, String, String, i64, i64);

/// `(expiry digits, json)` of a record value `<state><expiry>|<json>`.
pub(super) fn encode_record(r: &MessageRecord) -> Result<(String, String)> {
    let json = serde_json::to_string(&(
        &r.message_id,
        &r.sender,
        &r.client_msg_id,
        &r.body,
        r.class.code(),
        r.committed_at_ms,
    ))
    .map_err(|e| ChatError::Invalid(format!("encoding record: {e}")))?;
    Ok((
        r.expires_at_ms.map(|e| e.to_string()).unwrap_or_default(),
        json,
    ))
}

pub(super) fn decode_record(
    tenant: &str,
    cid: &str,
    seq: u64,
    value: &[u8],
) -> Result<MessageRecord> {
    let bad = |why: String| ChatError::Corrupt(format!("redis record {tenant}/{cid}/{seq}: {why}"));
    let bar = value
        .iter()
        .position(|&b| b == b'|')
        .ok_or_else(|| bad("no '|'".into()))?;
    let expiry = std::str::from_utf8(value.get(1..bar).unwrap_or_default())
        .map_err(|e| bad(e.to_string()))?;
    let expires_at_ms = if expiry.is_empty() {
        None
    } else {
        Some(expiry.parse().map_err(|e| bad(format!("expiry: {e}")))?)
    };
    let (message_id, sender, client_msg_id, body, class, committed_at_ms): StoredRecord =
        serde_json::from_slice(&value[bar + 1..]).map_err(|e| bad(e.to_string()))?;
    Ok(MessageRecord {
        tenant: tenant.to_owned(),
        conversation_id: cid.to_owned(),
        conversation_seq: seq,
        message_id,
        sender,
        client_msg_id,
        body,
        class: MessageClass::from_code(class),
        committed_at_ms,
        expires_at_ms,
    })
}

pub(super) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ChatError::Corrupt(format!("redis: expected a number, got {v:?}"))),
        other => Err(ChatError::Corrupt(format!(
            "redis: expected a number, got {other:?}"
        ))),
    }
}

pub(super) fn bytes(v: &Value) -> Result<&[u8]> {
    match v {
        Value::BulkString(b) => Ok(b),
        other => Err(ChatError::Corrupt(format!(
            "redis: expected a string, got {other:?}"
        ))),
    }
}

pub(super) fn text(v: &Value) -> Result<String> {
    String::from_utf8(bytes(v)?.to_vec())
        .map_err(|e| ChatError::Corrupt(format!("redis: not UTF-8: {e}")))
}

/// Shard `shard` as an index into the shards, or [`ChatError::Invalid`] past the last.
pub(super) fn shard_index(shard: u32) -> Result<usize> {
    let n = shard as usize;
    if n < SHARDS {
        Ok(n)
    } else {
        Err(ChatError::Invalid(format!(
            "the Redis hot store has {SHARDS} shards, not shard {shard}"
        )))
    }
}

pub(super) fn seq_of(s: &str) -> Result<u64> {
    s.parse()
        .map_err(|_| ChatError::Corrupt(format!("redis: bad seq {s:?}")))
}

impl RedisHot {
    /// `reserve_and_record.lua`: the dedup lookup and seq allocation, writing the fresh record
    /// in `state` (see [`RecordState`]). A conversation whose latest message is dated after
    /// `now_ms` (a node with a faster clock wrote it) answers `behind` and writes nothing; the
    /// record is dated at that time and tried again, up to [`CLOCK_RETRIES`] times.
    async fn reserve_as(
        &self,
        cmd: SendCommand,
        now_ms: i64,
        params: CommitParams,
        state: RecordState,
    ) -> Result<Reservation> {
        let k = ConvKeys::new(&cmd.tenant, &cmd.conversation_id);
        let field = dedup_field(&cmd.sender, &cmd.client_msg_id);
        // The record as it will be if this call allocates the seq (filled in below).
        let mut record = cmd.into_record(0, now_ms);
        for _ in 0..CLOCK_RETRIES {
            let (expiry, json) = encode_record(&record)?;
            let now_ms = record.committed_at_ms;
            let mut inv = self.scripts.reserve.prepare_invoke();
            inv.key(k.conv())
                .key(k.messages())
                .key(k.dedup())
                .key(k.shard(state.queue()))
                .key(k.shard("dx"))
                .key(k.shard("n"))
                .key(k.index())
                .arg(&k.part)
                .arg(&field)
                .arg(now_ms)
                .arg(now_ms + params.dedup_window_ms)
                .arg(expiry)
                .arg(json)
                .arg(&record.message_id)
                .arg(state.tag());
            let reply: Vec<Value> = inv.invoke_async(&mut self.conn()).await?;
            let tag = reply.first().map(text).transpose()?.unwrap_or_default();
            let at = |i: usize| {
                reply.get(i).ok_or_else(|| {
                    ChatError::Corrupt(format!("redis reserve: short reply {reply:?}"))
                })
            };
            return match tag.as_str() {
                "behind" => {
                    record.redate(int(at(1)?)?);
                    continue;
                }
                "unknown" => Err(ChatError::UnknownConversation(record.conversation_id)),
                "fresh" => {
                    record.conversation_seq = int(at(1)?)? as u64;
                    Ok(Reservation::Reserved {
                        record,
                        fresh: true,
                    })
                }
                "reserved" => {
                    let seq = int(at(1)?)? as u64;
                    Ok(Reservation::Reserved {
                        record: decode_record(
                            &record.tenant,
                            &record.conversation_id,
                            seq,
                            bytes(at(2)?)?,
                        )?,
                        fresh: false,
                    })
                }
                "committed" => Ok(Reservation::Committed(SendAck {
                    conversation_seq: int(at(1)?)? as u64,
                    committed_at_ms: int(at(2)?)?,
                    message_id: text(at(3)?)?,
                })),
                other => Err(ChatError::Corrupt(format!(
                    "redis reserve: unexpected reply {other:?}"
                ))),
            };
        }
        Err(ChatError::Store(StoreError::new(
            ErrorKind::Unavailable,
            "redis",
            format!(
                "conversation {:?}: newer messages kept arriving from faster clocks over {CLOCK_RETRIES} tries",
                record.conversation_id
            ),
        )))
    }
}

/// `hot-only` mode on Redis: one `reserve_and_record.lua` call writes the record COMMITTED and
/// indexed (one round trip, one fsync under `appendfsync always`). No trim candidate is
/// registered: nothing is archived in this mode, so nothing may leave the hot tier.
#[async_trait]
impl FusedCommit for RedisHot {
    /// Errors: `with_outbox` ([`ChatError::Invalid`]: a Redis hot store commits through a separate
    /// outbox, [`crate::commit::staged_commit`]); a retry whose first try is still RESERVED from a
    /// tiered run (a retryable [`ChatError::Store`]: committing it without the outbox would let the
    /// trimmer of a later tiered run drop a record the archive never saw — the recovery worker of a
    /// tiered server finishes it).
    async fn commit_fused(
        &self,
        cmd: SendCommand,
        clock: &SharedClock,
        params: CommitParams,
        with_outbox: bool,
    ) -> Result<SendOutcome> {
        if with_outbox {
            return Err(ChatError::Invalid(
                "a Redis hot store commits through a separate outbox (staged commit)".into(),
            ));
        }
        match self
            .reserve_as(cmd, clock.now_ms(), params, RecordState::Committed)
            .await?
        {
            Reservation::Committed(ack) => Ok(SendOutcome::Duplicate(ack)),
            Reservation::Reserved {
                record,
                fresh: true,
            } => Ok(SendOutcome::Committed(record)),
            Reservation::Reserved { record, .. } => Err(StoreError::unavailable(
                "redis",
                format!(
                    "message {} of conversation {} is still RESERVED from a tiered run: a \
                     tiered server's recovery worker commits it",
                    record.conversation_seq, record.conversation_id
                ),
            )
            .into()),
        }
    }
}

#[async_trait]
impl HotStore for RedisHot {
    async fn create_conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
        members: &[String],
        listing_id: Option<u64>,
        now_ms: i64,
    ) -> Result<bool> {
        let k = ConvKeys::new(tenant, conversation_id);
        let members_json = serde_json::to_string(members)
            .map_err(|e| ChatError::Invalid(format!("members: {e}")))?;
        let mut inv = self.scripts.create_conversation.prepare_invoke();
        inv.key(k.conv())
            .arg("members")
            .arg(members_json)
            .arg("latest")
            .arg(0)
            .arg("floor")
            .arg(0)
            .arg("created")
            .arg(now_ms);
        if let Some(l) = listing_id {
            inv.arg("listing").arg(l);
        }
        // The conversation first: a crash before the memberships leaves a conversation that
        // nobody lists, never a membership pointing nowhere; a retry with the same id writes
        // the stored members' memberships then.
        let (created, stored): (i64, String) = inv.invoke_async(&mut self.conn()).await?;
        let stored: Vec<String> = serde_json::from_str(&stored)
            .map_err(|e| ChatError::Corrupt(format!("members of {conversation_id}: {e}")))?;
        // One command per member: each membership hash has a slot of its own.
        try_join_all(stored.iter().map(|m| async move {
            let _: i64 = redis::cmd("HSETNX")
                .arg(keys::memberships(tenant, m))
                .arg(conversation_id)
                .arg(0)
                .query_async(&mut self.conn())
                .await?;
            Ok::<_, ChatError>(())
        }))
        .await?;
        Ok(created == 1)
    }

    async fn conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
    ) -> Result<Option<ConversationMeta>> {
        let k = ConvKeys::new(tenant, conversation_id);
        let (members, listing, latest, floor, at): (
            Option<String>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<i64>,
        ) = redis::cmd("HMGET")
            .arg(k.conv())
            .arg("members")
            .arg("listing")
            .arg("latest")
            .arg("floor")
            .arg("at")
            .query_async(&mut self.conn())
            .await?;
        let Some(members) = members else {
            return Ok(None);
        };
        let members: Vec<String> = serde_json::from_str(&members)
            .map_err(|e| ChatError::Corrupt(format!("members of {conversation_id}: {e}")))?;
        Ok(Some(ConversationMeta {
            conversation_id: conversation_id.to_owned(),
            members,
            listing_id: listing,
            latest_seq: latest.unwrap_or(0),
            latest_at_ms: at,
            floor: floor.unwrap_or(0),
        }))
    }

    async fn reserve(
        &self,
        cmd: SendCommand,
        now_ms: i64,
        params: CommitParams,
    ) -> Result<Reservation> {
        self.reserve_as(cmd, now_ms, params, RecordState::Reserved)
            .await
    }

    async fn mark_committed(
        &self,
        keys: &[RecordKey],
        now_ms: i64,
        params: CommitParams,
    ) -> Result<()> {
        try_join_all(keys.iter().map(|key| async move {
            let k = ConvKeys::new(&key.tenant, &key.conversation_id);
            let mut inv = self.scripts.mark_committed.prepare_invoke();
            inv.key(k.messages())
                .key(k.index())
                .key(k.shard("rsv"))
                .key(k.shard("trim"))
                .key(k.shard(CLOCK_FLOOR))
                .arg(&k.part)
                .arg(key.conversation_seq)
                .arg(now_ms)
                .arg(params.hot_window_ms);
            let _: i64 = inv.invoke_async(&mut self.conn()).await?;
            Ok::<_, ChatError>(())
        }))
        .await?;
        Ok(())
    }

    async fn stale_reserved(
        &self,
        lease: &ShardLease,
        reserved_before_ms: i64,
        limit: usize,
    ) -> Result<Vec<MessageRecord>> {
        let n = shard_index(lease.shard)?;
        self.queued_in_shard(
            n,
            RecordState::Reserved,
            reserved_before_ms,
            limit,
            Some(lease),
        )
        .await
    }

    async fn hot_slice(
        &self,
        tenant: &str,
        conversation_id: &str,
        lo: u64,
        hi: u64,
        now_ms: i64,
    ) -> Result<HotSlice> {
        let k = ConvKeys::new(tenant, conversation_id);
        let mut inv = self.scripts.hot_slice.prepare_invoke();
        inv.key(k.conv())
            .key(k.messages())
            .key(k.index())
            .arg(lo)
            .arg(hi)
            .arg(now_ms);
        let reply: Vec<Value> = inv.invoke_async(&mut self.conn()).await?;
        let [floor, latest, earliest, held, rest @ ..] = reply.as_slice() else {
            return Err(ChatError::UnknownConversation(conversation_id.to_owned()));
        };
        let records = rest
            .chunks_exact(2)
            .map(|pair| {
                decode_record(
                    tenant,
                    conversation_id,
                    int(&pair[0])? as u64,
                    bytes(&pair[1])?,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let earliest = int(earliest)? as u64;
        Ok(HotSlice {
            floor: int(floor)? as u64,
            latest_seq: int(latest)? as u64,
            records,
            earliest_seq: (earliest > 0).then_some(earliest),
            held: int(held)? as u64,
        })
    }

    async fn hot_unread(
        &self,
        tenant: &str,
        conversation_id: &str,
        user: &str,
        read_seq: u64,
        now_ms: i64,
    ) -> Result<HotUnread> {
        let k = ConvKeys::new(tenant, conversation_id);
        let mut inv = self.scripts.hot_unread.prepare_invoke();
        inv.key(k.conv())
            .key(k.messages())
            .key(k.index())
            .arg(user)
            .arg(read_seq)
            .arg(now_ms);
        let reply: Vec<i64> = inv.invoke_async(&mut self.conn()).await?;
        let [floor, latest, unread, held] = reply.as_slice() else {
            return Err(ChatError::UnknownConversation(conversation_id.to_owned()));
        };
        Ok(HotUnread {
            floor: *floor as u64,
            latest_seq: *latest as u64,
            unread_above_floor: *unread as u64,
            held: *held as u64,
        })
    }

    async fn set_read(
        &self,
        tenant: &str,
        conversation_id: &str,
        user: &str,
        seq: u64,
    ) -> Result<()> {
        let mut inv = self.scripts.raise.prepare_invoke();
        inv.key(keys::memberships(tenant, user))
            .arg(conversation_id)
            .arg(seq)
            .arg("0");
        let _: i64 = inv.invoke_async(&mut self.conn()).await?;
        Ok(())
    }

    async fn read_seq(&self, tenant: &str, conversation_id: &str, user: &str) -> Result<u64> {
        let v: Option<u64> = redis::cmd("HGET")
            .arg(keys::memberships(tenant, user))
            .arg(conversation_id)
            .query_async(&mut self.conn())
            .await?;
        Ok(v.unwrap_or(0))
    }

    async fn memberships(&self, tenant: &str, user: &str) -> Result<Vec<Membership>> {
        let mut all: Vec<(String, u64)> = redis::cmd("HGETALL")
            .arg(keys::memberships(tenant, user))
            .query_async(&mut self.conn())
            .await?;
        all.sort();
        Ok(all
            .into_iter()
            .map(|(conversation_id, read_seq)| Membership {
                conversation_id,
                read_seq,
            })
            .collect())
    }

    async fn watermarks(&self) -> Result<BTreeMap<u32, i64>> {
        let meta: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(keys::META)
            .query_async(&mut self.conn())
            .await?;
        meta.iter()
            .filter_map(|(field, value)| {
                let partition = partition_of_key(keys::WATERMARK, field)?;
                Some(value.parse::<i64>().map(|t| (partition, t)).map_err(|_| {
                    ChatError::Corrupt(format!("redis {}: {field} = {value:?}", keys::META))
                }))
            })
            .collect()
    }

    async fn raise_clock_floor(&self, t_ms: i64) -> Result<()> {
        self.raise_clock_floor_impl(t_ms).await
    }

    /// The latest watermark or the highest shard clock floor (the latest mark), whichever is
    /// later.
    async fn clock_high_water(&self) -> Result<Option<i64>> {
        let floors: Vec<Option<i64>> = self
            .each_shard(|prefix| {
                let mut c = redis::cmd("GET");
                c.arg(format!("{prefix}{CLOCK_FLOOR}"));
                c
            })
            .await?;
        let watermarks = self.watermarks().await?;
        Ok(floors
            .into_iter()
            .flatten()
            .chain(watermarks.into_values())
            .max())
    }

    async fn archive_identity(&self) -> Result<Option<i64>> {
        Ok(redis::cmd("HGET")
            .arg(keys::META)
            .arg("archive_identity")
            .query_async(&mut self.conn())
            .await?)
    }

    async fn record_archive_identity(&self, id: i64) -> Result<()> {
        let _: i64 = redis::cmd("HSETNX")
            .arg(keys::META)
            .arg("archive_identity")
            .arg(id)
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    async fn publish_watermark(&self, partition: u32, t_ms: i64) -> Result<()> {
        let mut inv = self.scripts.raise.prepare_invoke();
        inv.key(keys::META)
            .arg(partition_key(keys::WATERMARK, partition))
            .arg(t_ms)
            .arg("1");
        let _: i64 = inv.invoke_async(&mut self.conn()).await?;
        Ok(())
    }

    async fn hot_window_floor(&self, hot_window_ms: i64, now_ms: i64) -> Result<i64> {
        let recorded: Option<i64> = redis::cmd("HGET")
            .arg(keys::META)
            .arg(HOT_WINDOW_FLOOR_KEY)
            .query_async(&mut self.conn())
            .await?;
        let window = if recorded.is_some() {
            hot_window_ms
        } else {
            // The oldest candidate of each shard; a candidate scored meanwhile by another
            // process came after that process recorded its window, which `lower` keeps.
            let firsts: Vec<Vec<(String, f64)>> = self
                .each_shard(|prefix| {
                    let mut c = redis::cmd("ZRANGE");
                    c.arg(format!("{prefix}trim"))
                        .arg(0)
                        .arg(0)
                        .arg("WITHSCORES");
                    c
                })
                .await?;
            let oldest = firsts.iter().flatten().map(|(_, s)| *s as i64).min();
            first_recorded_window(hot_window_ms, oldest, now_ms)
        };
        let mut inv = self.scripts.lower.prepare_invoke();
        inv.key(keys::META).arg(HOT_WINDOW_FLOOR_KEY).arg(window);
        Ok(inv.invoke_async(&mut self.conn()).await?)
    }

    async fn trim(
        &self,
        lease: &ShardLease,
        cutoff_ms: i64,
        batch: usize,
    ) -> Result<Vec<RecordKey>> {
        self.trim_impl(lease, cutoff_ms, batch).await
    }

    fn shards(&self) -> u32 {
        SHARDS as u32
    }

    async fn lease_shard(&self, shard: u32, holder: &str, ttl_ms: u64) -> Result<Option<u64>> {
        self.lease_shard_impl(shard, holder, ttl_ms).await
    }

    async fn release_shard(&self, lease: &ShardLease) -> Result<()> {
        self.release_shard_impl(lease).await
    }

    async fn purge_dedup(&self, now_ms: i64, batch: usize) -> Result<usize> {
        let replies = self
            .walk_shards(&self.scripts.purge_dedup, "dx", false, now_ms, batch)
            .await?;
        replies.iter().map(|r| Ok(int(r)? as usize)).sum()
    }

    /// The records committed in `hot-only` mode (Redis alone, see `ChatStores::open`) and not
    /// yet in an outbox: the `ut` queues of the shards, oldest first.
    async fn untracked_committed(&self, limit: usize) -> Result<Vec<MessageRecord>> {
        self.queued_records(RecordState::Committed, i64::MAX, limit)
            .await
    }

    async fn register_trim_candidates(
        &self,
        keys: &[RecordKey],
        now_ms: i64,
        params: CommitParams,
    ) -> Result<()> {
        try_join_all(keys.iter().map(|key| async move {
            let k = ConvKeys::new(&key.tenant, &key.conversation_id);
            let mut inv = self.scripts.register_trim.prepare_invoke();
            inv.key(k.messages())
                .key(k.shard("trim"))
                .key(k.shard(RecordState::Committed.queue()))
                .key(k.shard(CLOCK_FLOOR))
                .arg(&k.part)
                .arg(key.conversation_seq)
                .arg(now_ms)
                .arg(params.hot_window_ms);
            let _: i64 = inv.invoke_async(&mut self.conn()).await?;
            Ok::<_, ChatError>(())
        }))
        .await?;
        Ok(())
    }

    async fn archivable_page(
        &self,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<(Vec<MessageRecord>, Option<String>)> {
        self.archivable_page_impl(cursor, limit).await
    }

    async fn hot_len(&self) -> Result<u64> {
        self.hot_len_impl().await
    }
}
