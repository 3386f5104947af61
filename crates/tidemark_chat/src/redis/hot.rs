//! [`HotStore`] on Redis: each method is one script or one command (pipelined per shard for the
//! queue walks); see [`super::keys`] for the layout and `scripts/*.lua` for the atomic steps.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use futures::future::try_join_all;
use redis::Value;

use super::RedisHot;
use super::keys::{
    self, CLOCK_FLOOR, ConvKeys, FENCE, LEASE, SHARDS, dedup_field, shard_prefix, split_member,
};
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
enum RecordState {
    /// RESERVED: step 1 of the staged commit (an outbox append and COMMITTED follow).
    Reserved,
    /// COMMITTED and indexed at once: the whole commit of `hot-only` mode, which has no outbox.
    Committed,
}

impl RecordState {
    /// The first byte of the record value (see `prelude.lua`).
    fn tag(self) -> &'static str {
        match self {
            RecordState::Reserved => "R",
            RecordState::Committed => "C",
        }
    }

    /// The shard queue a fresh record in this state goes in: `rsv` (RESERVED, for the recovery
    /// worker) or `ut` (committed in hot-only mode, for the backfill into the outbox).
    fn queue(self) -> &'static str {
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
fn encode_record(r: &MessageRecord) -> Result<(String, String)> {
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

fn decode_record(tenant: &str, cid: &str, seq: u64, value: &[u8]) -> Result<MessageRecord> {
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

fn int(v: &Value) -> Result<i64> {
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

fn bytes(v: &Value) -> Result<&[u8]> {
    match v {
        Value::BulkString(b) => Ok(b),
        other => Err(ChatError::Corrupt(format!(
            "redis: expected a string, got {other:?}"
        ))),
    }
}

fn text(v: &Value) -> Result<String> {
    String::from_utf8(bytes(v)?.to_vec())
        .map_err(|e| ChatError::Corrupt(format!("redis: not UTF-8: {e}")))
}

/// Shard `shard` as an index into the shards, or [`ChatError::Invalid`] past the last.
fn shard_index(shard: u32) -> Result<usize> {
    let n = shard as usize;
    if n < SHARDS {
        Ok(n)
    } else {
        Err(ChatError::Invalid(format!(
            "the Redis hot store has {SHARDS} shards, not shard {shard}"
        )))
    }
}

fn seq_of(s: &str) -> Result<u64> {
    s.parse()
        .map_err(|_| ChatError::Corrupt(format!("redis: bad seq {s:?}")))
}

impl RedisHot {
    /// Every seq the hot tier holds for the conversation, RESERVED or COMMITTED, ascending (one
    /// `HKEYS`). With the `testing` feature only: tests look behind the store's back with it.
    #[cfg(feature = "testing")]
    pub async fn held_seqs(&self, tenant: &str, conversation_id: &str) -> Result<Vec<u64>> {
        let k = ConvKeys::new(tenant, conversation_id);
        let mut seqs: Vec<u64> = redis::cmd("HKEYS")
            .arg(k.messages())
            .query_async(&mut self.conn())
            .await?;
        seqs.sort_unstable();
        Ok(seqs)
    }

    /// Each shard's lease holder, by shard (`None` where no lease runs). With the `testing`
    /// feature only: tests check which node holds which shard.
    #[cfg(feature = "testing")]
    pub async fn lease_holders(&self) -> Result<Vec<Option<String>>> {
        self.each_shard(|prefix| {
            let mut c = redis::cmd("HGET");
            c.arg(format!("{prefix}{LEASE}")).arg("holder");
            c
        })
        .await
    }

    /// The RESERVED records of every shard reserved at or before `reserved_before_ms`, oldest
    /// first, at most `limit`, read without a lease. With the `testing` feature only: tests
    /// look at what a crash left behind while a server holds the leases.
    #[cfg(feature = "testing")]
    pub async fn reserved_records(
        &self,
        reserved_before_ms: i64,
        limit: usize,
    ) -> Result<Vec<MessageRecord>> {
        self.queued_records(RecordState::Reserved, reserved_before_ms, limit)
            .await
    }

    /// The command `cmd(shard prefix)` on every shard, concurrently, answers by shard. One
    /// command per shard rather than one pipeline: on a Redis Cluster the shards' hash tags
    /// live in different slots, and a pipeline goes to one.
    async fn each_shard<T: redis::FromRedisValue>(
        &self,
        cmd: impl Fn(&str) -> redis::Cmd,
    ) -> Result<Vec<T>> {
        let cmds: Vec<redis::Cmd> = (0..SHARDS).map(|n| cmd(&shard_prefix(n))).collect();
        Ok(try_join_all(
            cmds.iter()
                .map(|c| async move { c.query_async::<T>(&mut self.conn()).await }),
        )
        .await?)
    }

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

    /// `queued_records.lua` on shard `n`, fenced by `lease` if one is given.
    async fn queued_in_shard(
        &self,
        n: usize,
        state: RecordState,
        max_score: i64,
        limit: usize,
        lease: Option<&ShardLease>,
    ) -> Result<Vec<MessageRecord>> {
        let prefix = shard_prefix(n);
        let mut inv = self.scripts.queued_records.prepare_invoke();
        inv.key(format!("{prefix}{}", state.queue()))
            .key(format!("{prefix}{LEASE}"))
            .arg(max_score)
            .arg(limit)
            .arg(&prefix)
            .arg(state.tag());
        match lease {
            Some(l) => inv.arg(&l.holder).arg(l.token).arg(l.ttl_ms),
            None => inv.arg("").arg(0).arg(0),
        };
        let reply: Vec<Vec<u8>> = inv.invoke_async(&mut self.conn()).await?;
        if reply.first().map(Vec::as_slice) == Some(b"fenced".as_slice()) {
            return Err(ChatError::LeaseLost { shard: n as u32 });
        }
        reply
            .chunks_exact(2)
            .map(|pair| {
                let (tenant, cid, seq) = split_member(&pair[0])?;
                decode_record(&tenant, &cid, seq_of(&seq)?, &pair[1])
            })
            .collect()
    }

    /// The oldest `limit` records (by score, then key) of the shard queues of `state` with a
    /// score ≤ `max_score` whose value is still in `state` (`queued_records.lua` per busy shard).
    async fn queued_records(
        &self,
        state: RecordState,
        max_score: i64,
        limit: usize,
    ) -> Result<Vec<MessageRecord>> {
        let mut out = Vec::new();
        for n in self.busy_shards(state.queue(), max_score).await? {
            out.extend(
                self.queued_in_shard(n, state, max_score, limit, None)
                    .await?,
            );
        }
        // Each shard gave its oldest `limit`; the oldest `limit` overall are among them.
        out.sort_by(|a, b| {
            (
                a.committed_at_ms,
                &a.tenant,
                &a.conversation_id,
                a.conversation_seq,
            )
                .cmp(&(
                    b.committed_at_ms,
                    &b.tenant,
                    &b.conversation_id,
                    b.conversation_seq,
                ))
        });
        out.truncate(limit);
        Ok(out)
    }

    /// `ZCOUNT <queue> -inf <max>` of every shard, concurrently: the shards worth a script
    /// call.
    async fn busy_shards(&self, queue: &str, max: i64) -> Result<Vec<usize>> {
        let counts: Vec<i64> = self
            .each_shard(|prefix| {
                let mut c = redis::cmd("ZCOUNT");
                c.arg(format!("{prefix}{queue}")).arg("-inf").arg(max);
                c
            })
            .await?;
        Ok(counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(n, _)| n)
            .collect())
    }

    /// Runs a shard-queue script (KEYS: the queue [+ the shard counter], ARGV: max score,
    /// budget, shard prefix) over the busy shards while `budget` lasts; returns the raw replies.
    async fn walk_shards(
        &self,
        script: &redis::Script,
        queue: &str,
        with_counter: bool,
        max: i64,
        budget: usize,
    ) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut left = budget;
        for n in self.busy_shards(queue, max).await? {
            if left == 0 {
                break;
            }
            let prefix = shard_prefix(n);
            let mut inv = script.prepare_invoke();
            inv.key(format!("{prefix}{queue}"));
            if with_counter {
                inv.key(format!("{prefix}n"));
            }
            inv.arg(max).arg(left).arg(&prefix);
            let reply: Value = inv.invoke_async(&mut self.conn()).await?;
            let taken = match &reply {
                Value::Array(items) => items.len(),
                other => int(other)? as usize,
            };
            left = left.saturating_sub(taken);
            out.push(reply);
        }
        Ok(out)
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
        let (members, listing, latest, floor): (
            Option<String>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
        ) = redis::cmd("HMGET")
            .arg(k.conv())
            .arg("members")
            .arg("listing")
            .arg("latest")
            .arg("floor")
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

    /// `raise_clock_floor.lua` on every shard, concurrently (a mark is atomic with its own
    /// shard's floor, so each shard keeps one).
    async fn raise_clock_floor(&self, t_ms: i64) -> Result<()> {
        try_join_all((0..SHARDS).map(|n| async move {
            let mut inv = self.scripts.raise_clock_floor.prepare_invoke();
            inv.key(format!("{}{CLOCK_FLOOR}", shard_prefix(n)))
                .arg(t_ms);
            let _: i64 = inv.invoke_async(&mut self.conn()).await?;
            Ok::<_, ChatError>(())
        }))
        .await?;
        Ok(())
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
        let prefix = shard_prefix(shard_index(lease.shard)?);
        let mut inv = self.scripts.trim.prepare_invoke();
        inv.key(format!("{prefix}trim"))
            .key(format!("{prefix}n"))
            .key(format!("{prefix}{LEASE}"))
            .arg(cutoff_ms)
            .arg(batch)
            .arg(&prefix)
            .arg(&lease.holder)
            .arg(lease.token)
            .arg(lease.ttl_ms);
        let members: Vec<Vec<u8>> = inv.invoke_async(&mut self.conn()).await?;
        if members.first().map(Vec::as_slice) == Some(b"fenced".as_slice()) {
            return Err(ChatError::LeaseLost { shard: lease.shard });
        }
        members
            .iter()
            .map(|m| {
                let (tenant, conversation_id, seq) = split_member(m)?;
                Ok(RecordKey {
                    tenant,
                    conversation_id,
                    conversation_seq: seq_of(&seq)?,
                })
            })
            .collect()
    }

    fn shards(&self) -> u32 {
        SHARDS as u32
    }

    async fn lease_shard(&self, shard: u32, holder: &str, ttl_ms: u64) -> Result<Option<u64>> {
        let prefix = shard_prefix(shard_index(shard)?);
        let mut inv = self.scripts.lease.prepare_invoke();
        inv.key(format!("{prefix}{LEASE}"))
            .key(format!("{prefix}{FENCE}"))
            .arg(holder)
            .arg(ttl_ms.max(1));
        let token: Option<String> = inv.invoke_async(&mut self.conn()).await?;
        token
            .map(|t| {
                t.parse()
                    .map_err(|_| ChatError::Corrupt(format!("redis lease token {t:?}")))
            })
            .transpose()
    }

    async fn release_shard(&self, lease: &ShardLease) -> Result<()> {
        let prefix = shard_prefix(shard_index(lease.shard)?);
        let mut inv = self.scripts.release_lease.prepare_invoke();
        inv.key(format!("{prefix}{LEASE}"))
            .arg(&lease.holder)
            .arg(lease.token);
        let _: i64 = inv.invoke_async(&mut self.conn()).await?;
        Ok(())
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

    /// Shard by shard, each shard's trim candidates by score then member
    /// (`archivable_page.lua`); the cursor is `<shard>|<score>|<member>`.
    async fn archivable_page(
        &self,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<(Vec<MessageRecord>, Option<String>)> {
        let (mut shard, mut score, mut member) = match &cursor {
            None => (0, String::new(), Vec::new()),
            Some(c) => {
                let bad = || ChatError::Invalid(format!("bad backfill cursor {c:?}"));
                let mut parts = c.splitn(3, '|');
                let shard: usize = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                let score = parts.next().ok_or_else(bad)?.to_owned();
                let member = parts.next().ok_or_else(bad)?.as_bytes().to_vec();
                (shard, score, member)
            }
        };
        let mut out = Vec::new();
        while shard < SHARDS && out.len() < limit.max(1) {
            let prefix = shard_prefix(shard);
            let want = limit.max(1) - out.len();
            let mut inv = self.scripts.archivable_page.prepare_invoke();
            inv.key(format!("{prefix}trim"))
                .arg(&prefix)
                .arg(&score)
                .arg(&member)
                .arg(want);
            let reply: Vec<Vec<u8>> = inv.invoke_async(&mut self.conn()).await?;
            let bad = || ChatError::Corrupt(format!("redis archivable page: reply {reply:?}"));
            let visited: usize = std::str::from_utf8(reply.first().ok_or_else(bad)?)
                .ok()
                .and_then(|v| v.parse().ok())
                .ok_or_else(bad)?;
            for pair in reply.get(3..).unwrap_or_default().chunks_exact(2) {
                let (tenant, cid, seq) = split_member(&pair[0])?;
                out.push(decode_record(&tenant, &cid, seq_of(&seq)?, &pair[1])?);
            }
            if visited < want {
                // The shard is done: the next one from its start.
                (shard, score, member) = (shard + 1, String::new(), Vec::new());
            } else {
                score = String::from_utf8_lossy(&reply[1]).into_owned();
                member = reply[2].clone();
            }
        }
        let next = (shard < SHARDS)
            .then(|| format!("{shard}|{score}|{}", String::from_utf8_lossy(&member)));
        Ok((out, next))
    }

    async fn hot_len(&self) -> Result<u64> {
        let counts: Vec<Option<i64>> = self
            .each_shard(|prefix| {
                let mut c = redis::cmd("GET");
                c.arg(format!("{prefix}n"));
                c
            })
            .await?;
        Ok(counts.into_iter().flatten().sum::<i64>().max(0) as u64)
    }
}
