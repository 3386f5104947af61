//! Key layout of the Redis hot store.
//!
//! A conversation is named by `P = "<len(tenant)>:<tenant><len(cid)>:<cid>"` (byte lengths, so
//! any tenant or id splits back unambiguously) and lives in one of [`SHARDS`] shards chosen by
//! FNV-1a of P. Every key of a shard starts with the hash tag `{tm:NN}`, so all keys of a
//! conversation — and the shard-wide queues its scripts update in the same atomic step — hash
//! to one Redis Cluster slot:
//!
//! | key | type | content |
//! |---|---|---|
//! | `{tm:NN}:c:P` | hash | `members` (JSON), `listing`, `latest` (seq counter), `floor` (F), `created`, `at` (the latest message's `committed_at`) |
//! | `{tm:NN}:m:P` | hash | seq → record value `<R/C><expiry>\|<json>` |
//! | `{tm:NN}:h:P` | string (bitmap) | the hot history index: bit s set while seq s is committed and hot |
//! | `{tm:NN}:d:P` | hash | dedup field `<len(sender)>:<sender><client_msg_id>` → `seq\|committed_at\|expires_at\|message_id` |
//! | `{tm:NN}:rsv` | zset | `P<seq>` of RESERVED records, score = reserve time |
//! | `{tm:NN}:ut` | zset | `P<seq>` committed in hot-only mode and not yet in an outbox (no trim candidate), score = commit time |
//! | `{tm:NN}:trim` | zset | `P<seq>` trim candidates, score = commit time + hot window |
//! | `{tm:NN}:dx` | zset | `P<dedup field>`, score = dedup expiry |
//! | `{tm:NN}:n` | string | records held by the shard |
//! | `{tm:NN}:lease` | hash, expiring | the shard's lease: `holder`, `token` (`HotStore::lease_shard`) |
//! | `{tm:NN}:fence` | string | the last fencing token given for the shard (never expires) |
//! | `{tm:NN}:clk` | string | the shard's clock floor (Unix ms): its latest commit time, raised by the archiver to its T0 (`HotStore::raise_clock_floor`) |
//! | `tm:mb:{<len(tenant)>:<tenant><user>}` | hash | conversation id → read pointer |
//! | `tm:meta` | hash | `watermark` and `watermark:<p>` (`T_p` of outbox partition p, Unix ms), `hot_window_floor` (ms, see `crate::trimmer`), `archive_identity` (see `crate::stores::check_archive`), `layout_version` ([`LAYOUT_VERSION`]) |
//!
//! Why a bitmap for the history index: it costs one bit per seq ever allocated (bits at or below
//! the floor are cleared, not freed: 125 KB per million messages of one conversation) where a
//! sorted set cost about 94 bytes per hot message (`tests/redis_memory.rs`); `BITPOS … BIT`
//! finds the next committed seq of a range as fast.
//!
//! Why shards rather than a tag per conversation: the trimmer, the recovery worker and the
//! dedup purge walk queues across conversations; with the queues in the conversation's own
//! slot every script stays single-slot (Cluster-safe) and atomic, and a pass visits
//! [`SHARDS`] queues, not every conversation. The shard count is part of the data layout:
//! changing it needs a migration.
//!
//! The layout's version is [`LAYOUT_VERSION`], recorded in `tm:meta` by the first start
//! ([`super::RedisHot::connect`]); a server whose recorded version is above it was written by a
//! newer build and is refused. Version 1 is the layout above; a change to it is version 2,
//! with the code that moves a server's keys from 1 to 2.

use crate::error::{ChatError, Result};

/// The version of the key layout this build reads and writes (see the module docs).
pub const LAYOUT_VERSION: i64 = 1;

/// The `tm:meta` field of the recorded [`LAYOUT_VERSION`].
pub(crate) const LAYOUT_VERSION_FIELD: &str = "layout_version";

/// Number of shards (hash tags) conversations are spread over.
pub const SHARDS: usize = 64;

/// The kind of a shard key, as in the table above: `{tm:NN}:<kind>…` → `<kind>` (`m`
/// records, `h` hot index, `d` dedup, `dx`, `trim`, `rsv`, `ut`, `n`, `c`); `None` for the keys
/// outside the shards (memberships, `tm:meta`). With the `testing` feature only: the memory
/// accounting of tests and benchmarks.
#[cfg(feature = "testing")]
pub fn kind_of(key: &str) -> Option<&str> {
    let (_, rest) = key.split_once("}:")?;
    rest.split(':').next()
}

/// The membership hash of `(tenant, user)`.
pub(crate) fn memberships(tenant: &str, user: &str) -> String {
    format!("tm:mb:{{{}:{tenant}{user}}}", tenant.len())
}

/// The shard key (`{tm:NN}:lease`) of the shard's lease (see the table above).
pub(crate) const LEASE: &str = "lease";

/// The shard key (`{tm:NN}:fence`) of the shard's last fencing token (see the table above).
pub(crate) const FENCE: &str = "fence";

/// The shard key (`{tm:NN}:clk`) of the shard's clock floor (see the table above).
pub(crate) const CLOCK_FLOOR: &str = "clk";

/// The `tm:meta` field of outbox partition 0's watermark `T_0`; partition p's is
/// `watermark:p` (`crate::ports::partition_key`).
pub(crate) const WATERMARK: &str = "watermark";

/// The hash holding the archive watermark, the hot window's floor and the archive's identity.
pub(crate) const META: &str = "tm:meta";

/// The prefix (hash tag and colon) of shard `n`.
pub(crate) fn shard_prefix(n: usize) -> String {
    format!("{{tm:{n:02}}}:")
}

/// The key of a conversation's records hash (`{tm:NN}:m:P`: seq → record value), for tests
/// that look at the hot tier behind the store's back. With the `testing` feature only.
#[cfg(feature = "testing")]
pub fn records_key(tenant: &str, conversation_id: &str) -> String {
    ConvKeys::new(tenant, conversation_id).messages()
}

/// A conversation's name P and its keys.
#[derive(Debug, Clone)]
pub(crate) struct ConvKeys {
    /// P.
    pub(crate) part: String,
    /// Shard prefix.
    pub(crate) prefix: String,
}

impl ConvKeys {
    pub(crate) fn new(tenant: &str, conversation_id: &str) -> Self {
        let part = format!(
            "{}:{tenant}{}:{conversation_id}",
            tenant.len(),
            conversation_id.len()
        );
        let prefix = shard_prefix(shard_of(&part));
        Self { part, prefix }
    }
    fn key(&self, kind: &str) -> String {
        format!("{}{kind}:{}", self.prefix, self.part)
    }
    pub(crate) fn conv(&self) -> String {
        self.key("c")
    }
    pub(crate) fn messages(&self) -> String {
        self.key("m")
    }
    pub(crate) fn index(&self) -> String {
        self.key("h")
    }
    pub(crate) fn dedup(&self) -> String {
        self.key("d")
    }
    pub(crate) fn shard(&self, queue: &str) -> String {
        format!("{}{queue}", self.prefix)
    }
}

/// FNV-1a (64 bit) of P modulo [`SHARDS`]: stable across builds and versions.
fn shard_of(part: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in part.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % SHARDS as u64) as usize
}

/// The dedup field of `(sender, client_msg_id)`.
pub(crate) fn dedup_field(sender: &str, client_msg_id: &str) -> String {
    format!("{}:{sender}{client_msg_id}", sender.len())
}

/// Splits a queue member `P<suffix>` into `(tenant, conversation_id, suffix)`.
pub(crate) fn split_member(member: &[u8]) -> Result<(String, String, String)> {
    let bad = || {
        ChatError::Corrupt(format!(
            "redis queue member {:?}",
            String::from_utf8_lossy(member)
        ))
    };
    let s = std::str::from_utf8(member).map_err(|_| bad())?;
    let take = |s: &str| -> Option<(String, usize)> {
        let colon = s.find(':')?;
        let len: usize = s[..colon].parse().ok()?;
        let value = s.get(colon + 1..colon + 1 + len)?;
        Some((value.to_owned(), colon + 1 + len))
    };
    let (tenant, used) = take(s).ok_or_else(bad)?;
    let (cid, used2) = take(&s[used..]).ok_or_else(bad)?;
    Ok((tenant, cid, s[used + used2..].to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_split_back_whatever_the_ids_contain() {
        let k = ConvKeys::new("t:1{", "c}9:");
        let member = format!("{}42", k.part);
        assert_eq!(
            split_member(member.as_bytes()).unwrap(),
            ("t:1{".into(), "c}9:".into(), "42".into())
        );
        assert!(split_member(b"9:ab").is_err());
        assert!(k.conv().starts_with("{tm:") && k.conv().contains("}:c:4:t:1{4:c}9:"));
    }

    #[test]
    fn shards_are_stable() {
        assert_eq!(shard_of("2:t14:conv"), shard_of("2:t14:conv"));
        assert!(shard_of("x") < SHARDS);
    }
}
