//! The chat data model: sends, canonical message records, acknowledgements, conversations.

use serde::{Deserialize, Serialize};

/// Records per archive partition bucket: the archive key is
/// `(tenant, conversation, seq_bucket, conversation_seq)` with
/// `seq_bucket = conversation_seq / SEQ_BUCKET_SIZE` (seed 000: bounded partitions).
pub const SEQ_BUCKET_SIZE: u64 = 1000;

/// The archive bucket of `conversation_seq` (see [`SEQ_BUCKET_SIZE`]).
pub fn seq_bucket(conversation_seq: u64) -> u64 {
    conversation_seq / SEQ_BUCKET_SIZE
}

/// Lifetime of an `ephemeral24h` message: 24 h in ms.
pub const EPHEMERAL_TTL_MS: i64 = 24 * 3600 * 1000;

/// Retention class of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MessageClass {
    /// Kept for the life of the history.
    #[default]
    Standard,
    /// Vanishes from reads in both tiers 24 h after commit; the archive then purges its
    /// record and keeps its index entry (seq, message id, expiry) as a tombstone.
    #[serde(rename = "ephemeral24h")]
    Ephemeral24h,
}

impl MessageClass {
    /// Storage code: 0 standard, 1 ephemeral24h.
    pub fn code(self) -> i64 {
        match self {
            MessageClass::Standard => 0,
            MessageClass::Ephemeral24h => 1,
        }
    }
    /// From the storage code; unknown codes read as standard.
    pub fn from_code(code: i64) -> Self {
        if code == 1 {
            MessageClass::Ephemeral24h
        } else {
            MessageClass::Standard
        }
    }
    /// Expiry (Unix ms) of a message of this class committed at `committed_at_ms`.
    pub fn expires_at(self, committed_at_ms: i64) -> Option<i64> {
        match self {
            MessageClass::Standard => None,
            MessageClass::Ephemeral24h => Some(committed_at_ms + EPHEMERAL_TTL_MS),
        }
    }
}

/// A validated SEND: what a member asks to append to a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendCommand {
    /// Tenant the conversation belongs to.
    pub tenant: String,
    /// Conversation id.
    pub conversation_id: String,
    /// Sending member.
    pub sender: String,
    /// The client's idempotency key; `(sender, client_msg_id)` is unique per conversation.
    pub client_msg_id: String,
    /// Message body (UTF-8, bounded by `max_body_bytes`).
    pub body: String,
    /// Retention class.
    pub class: MessageClass,
}

/// The canonical message record: what the outbox envelope carries and what both tiers store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRecord {
    /// Tenant.
    pub tenant: String,
    /// Conversation id.
    pub conversation_id: String,
    /// Dense per-conversation sequence number, from 1.
    pub conversation_seq: u64,
    /// Globally unique message id.
    pub message_id: String,
    /// Sending member.
    pub sender: String,
    /// The client's idempotency key.
    pub client_msg_id: String,
    /// Body.
    pub body: String,
    /// Retention class.
    pub class: MessageClass,
    /// Commit time shown to clients (Unix ms, UTC): when the seq was allocated, by the
    /// committing node's HLC; never earlier than the conversation's previous message's.
    pub committed_at_ms: i64,
    /// When an ephemeral message vanishes (Unix ms); `None` for standard messages.
    pub expires_at_ms: Option<i64>,
}

impl MessageRecord {
    /// Dates the record `committed_at_ms` (its expiry moves with it).
    pub fn redate(&mut self, committed_at_ms: i64) {
        self.committed_at_ms = committed_at_ms;
        self.expires_at_ms = self.class.expires_at(committed_at_ms);
    }

    /// A standard record for unit tests: seq `seq` of conversation `c` of tenant `t`, id
    /// `m<seq>`, sent by `u1` with key `k<seq>`, committed at 1,000 ms.
    #[cfg(test)]
    pub(crate) fn sample(seq: u64, body: &str) -> Self {
        Self {
            tenant: "t".into(),
            conversation_id: "c".into(),
            conversation_seq: seq,
            message_id: format!("m{seq}"),
            sender: "u1".into(),
            client_msg_id: format!("k{seq}"),
            body: body.into(),
            class: MessageClass::Standard,
            committed_at_ms: 1_000,
            expires_at_ms: None,
        }
    }

    /// The acknowledgement a SEND of this record returns (and a retry returns again).
    pub fn ack(&self) -> SendAck {
        SendAck {
            conversation_seq: self.conversation_seq,
            message_id: self.message_id.clone(),
            committed_at_ms: self.committed_at_ms,
        }
    }
    /// Whether the record is expired (hidden from reads) at `now_ms` ([`expired_at`]).
    pub fn is_expired(&self, now_ms: i64) -> bool {
        expired_at(self.expires_at_ms, now_ms)
    }
    /// The archive bucket of this record.
    pub fn seq_bucket(&self) -> u64 {
        seq_bucket(self.conversation_seq)
    }
    /// The history-index entry pointing at this record.
    pub fn index_entry(&self) -> IndexEntry {
        IndexEntry {
            tenant: self.tenant.clone(),
            conversation_id: self.conversation_id.clone(),
            conversation_seq: self.conversation_seq,
            message_id: self.message_id.clone(),
            expires_at_ms: self.expires_at_ms,
        }
    }
    /// The key of this record.
    pub fn key(&self) -> RecordKey {
        RecordKey {
            tenant: self.tenant.clone(),
            conversation_id: self.conversation_id.clone(),
            conversation_seq: self.conversation_seq,
        }
    }
}

/// Identifies one message: `(tenant, conversation, conversation_seq)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    /// Tenant.
    pub tenant: String,
    /// Conversation id.
    pub conversation_id: String,
    /// Sequence number.
    pub conversation_seq: u64,
}

/// An archive history-index entry. Written only after its record (seed 000: a reader treats
/// an unexpired index entry without its record as corruption).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// Tenant.
    pub tenant: String,
    /// Conversation id.
    pub conversation_id: String,
    /// Sequence number.
    pub conversation_seq: u64,
    /// Id of the record it points at.
    pub message_id: String,
    /// Expiry of an ephemeral message (Unix ms). From then on the entry is a tombstone: its
    /// record is hidden, then purged, and the entry stays ([`crate::ports::Archive::index_range`]).
    pub expires_at_ms: Option<i64>,
}

impl IndexEntry {
    /// Whether the entry's message expired at `now_ms` ([`expired_at`]).
    pub fn is_expired(&self, now_ms: i64) -> bool {
        expired_at(self.expires_at_ms, now_ms)
    }
}

/// The one expiry rule of records and index entries: an ephemeral message (`expires_at_ms`
/// Some, Unix ms) is expired from that instant on; a standard one never.
pub fn expired_at(expires_at_ms: Option<i64>, now_ms: i64) -> bool {
    expires_at_ms.is_some_and(|e| e <= now_ms)
}

/// SEND_ACK: returned only once the message is durable in the outbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendAck {
    /// The message's dense sequence number.
    pub conversation_seq: u64,
    /// The message id.
    pub message_id: String,
    /// Commit time (Unix ms).
    pub committed_at_ms: i64,
}

/// What a SEND did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// A new message was committed (HTTP 201); the committed record.
    Committed(MessageRecord),
    /// A retry of an earlier send: the original ACK (HTTP 200).
    Duplicate(SendAck),
}

impl SendOutcome {
    /// The ACK, new or original.
    pub fn ack(&self) -> SendAck {
        match self {
            SendOutcome::Committed(r) => r.ack(),
            SendOutcome::Duplicate(a) => a.clone(),
        }
    }
}

/// Result of the reserve step of the staged commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// `(sender, client_msg_id)` was already committed: the original ACK.
    Committed(SendAck),
    /// The record is RESERVED (just now if `fresh`, else by an earlier try that has not
    /// finished): it must be appended to the outbox and marked committed before an ACK.
    Reserved {
        /// The canonical record.
        record: MessageRecord,
        /// Whether this call allocated it.
        fresh: bool,
    },
}

/// A conversation's immutable facts and its moving counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationMeta {
    /// Conversation id.
    pub conversation_id: String,
    /// Members (at least two, distinct).
    pub members: Vec<String>,
    /// The listing the conversation is about, if any.
    pub listing_id: Option<u64>,
    /// Highest allocated seq (0 when empty).
    pub latest_seq: u64,
    /// Commit time (Unix ms) of the highest allocated seq, RESERVED or committed, while the hot
    /// tier holds it; `None` when the conversation is empty or its hot records were all
    /// trimmed (then every seq is archived and older than the archive watermark). Along a
    /// conversation's seqs commit times never decrease.
    pub latest_at_ms: Option<i64>,
    /// Floor F: seq ≤ F lives in the archive, seq > F in the hot tier. Only grows.
    pub floor: u64,
}

/// An atomic read of the hot tier: the floor and latest seq at the moment of the read and the
/// committed, unexpired records in the asked range above that floor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HotSlice {
    /// Floor F at the time of the read.
    pub floor: u64,
    /// Latest seq at the time of the read.
    pub latest_seq: u64,
    /// Records with `F < seq`, inside the asked range, ascending.
    pub records: Vec<MessageRecord>,
    /// Lowest committed, unexpired seq above F (whatever the asked range).
    pub earliest_seq: Option<u64>,
    /// How many seqs of `max(lo, F + 1)..=min(hi, latest)` the hot tier holds a row for, in any
    /// state (committed, RESERVED, expired). Seqs above F are dense and leave the hot tier only
    /// by trimming (which raises F past them), so a smaller count is a lost hot record, and
    /// the read fails whole ([`crate::reads::check_held`]).
    pub held: u64,
}

/// An atomic unread count over the hot tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HotUnread {
    /// Floor F at the time of the read.
    pub floor: u64,
    /// Latest seq at the time of the read.
    pub latest_seq: u64,
    /// Messages in `(max(read_seq, F), latest]` not sent by the user.
    pub unread_above_floor: u64,
    /// How many seqs of `(max(read_seq, F), latest]` the hot tier holds a row for, in any
    /// state (see [`HotSlice::held`]).
    pub held: u64,
}

/// One of a user's conversations with its read pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Conversation id.
    pub conversation_id: String,
    /// The user's read pointer (0 = nothing read).
    pub read_seq: u64,
}

impl SendCommand {
    /// The canonical record this send becomes once `conversation_seq` is allocated at `now_ms`.
    pub fn into_record(self, conversation_seq: u64, now_ms: i64) -> MessageRecord {
        MessageRecord {
            expires_at_ms: self.class.expires_at(now_ms),
            tenant: self.tenant,
            conversation_id: self.conversation_id,
            conversation_seq,
            message_id: uuid::Uuid::now_v7().to_string(),
            sender: self.sender,
            client_msg_id: self.client_msg_id,
            body: self.body,
            class: self.class,
            committed_at_ms: now_ms,
        }
    }
}
