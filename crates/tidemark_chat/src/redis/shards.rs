//! The hot store's work across its shards on Redis: trimming, RESERVED and untracked records,
//! leases, the clock floor, backfill pages and counts. Each shard's keys share its hash tag
//! (`{tm:NN}`, one Redis Cluster slot), so every script here touches one shard; what spans
//! shards is one command per shard ([`RedisHot::each_shard`]), never a cross-slot pipeline.

use futures::future::try_join_all;
use redis::Value;

use super::RedisHot;
use super::hot::{RecordState, decode_record, int, seq_of, shard_index};
use super::keys::{CLOCK_FLOOR, FENCE, LEASE, SHARDS, shard_prefix, split_member};
use crate::error::{ChatError, Result};
use crate::model::{MessageRecord, RecordKey};
use crate::ports::ShardLease;

impl RedisHot {
    /// Every seq the hot tier holds for the conversation, RESERVED or COMMITTED, ascending (one
    /// `HKEYS`). With the `testing` feature only: tests look behind the store's back with it.
    #[cfg(feature = "testing")]
    pub async fn held_seqs(&self, tenant: &str, conversation_id: &str) -> Result<Vec<u64>> {
        let k = super::keys::ConvKeys::new(tenant, conversation_id);
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
    pub(super) async fn each_shard<T: redis::FromRedisValue>(
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

    /// `queued_records.lua` on shard `n`, fenced by `lease` if one is given.
    pub(super) async fn queued_in_shard(
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
    pub(super) async fn queued_records(
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
    pub(super) async fn busy_shards(&self, queue: &str, max: i64) -> Result<Vec<usize>> {
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
    pub(super) async fn walk_shards(
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

    /// `raise_clock_floor.lua` on every shard, concurrently (a mark is atomic with its own
    /// shard's floor, so each shard keeps one).
    pub(super) async fn raise_clock_floor_impl(&self, t_ms: i64) -> Result<()> {
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

    pub(super) async fn trim_impl(
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

    pub(super) async fn lease_shard_impl(
        &self,
        shard: u32,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<Option<u64>> {
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

    pub(super) async fn release_shard_impl(&self, lease: &ShardLease) -> Result<()> {
        let prefix = shard_prefix(shard_index(lease.shard)?);
        let mut inv = self.scripts.release_lease.prepare_invoke();
        inv.key(format!("{prefix}{LEASE}"))
            .arg(&lease.holder)
            .arg(lease.token);
        let _: i64 = inv.invoke_async(&mut self.conn()).await?;
        Ok(())
    }

    /// Shard by shard, each shard's trim candidates by score then member
    /// (`archivable_page.lua`); the cursor is `<shard>|<score>|<member>`.
    pub(super) async fn archivable_page_impl(
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

    pub(super) async fn hot_len_impl(&self) -> Result<u64> {
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
