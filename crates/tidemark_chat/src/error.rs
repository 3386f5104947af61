//! Errors of the chat subsystem and how each maps to HTTP.

use axum::http::StatusCode;
use tidemark_core::http::ApiError;
use tidemark_core::sqlite::SqliteError;
use tidemark_core::store::{AsStoreError, StoreError};

/// Everything that can go wrong in chat, from bad input to a corrupt archive.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The request is malformed; nothing was written.
    #[error("{0}")]
    Invalid(String),
    /// No such conversation for this tenant.
    #[error("unknown conversation {0}")]
    UnknownConversation(String),
    /// The user is not a member of the conversation.
    #[error("{user} is not a member of conversation {conversation_id}")]
    NotMember {
        /// The user.
        user: String,
        /// The conversation.
        conversation_id: String,
    },
    /// Data a read needs is missing or corrupt (e.g. an index entry without its record); the
    /// whole request fails rather than returning a partial answer (DESIGN principle 7).
    #[error("corrupt history: {0}")]
    Corrupt(String),
    /// An idempotency key already names something other than what the request asks for.
    #[error("{0}")]
    KeyReused(String),
    /// `sync-archive` mode: the message is committed (hot tier and outbox) as
    /// `conversation_seq`, but its archive write before the ACK failed. The archiver archives
    /// it later; a retry with the same `client_msg_id` writes the archive again and, once that
    /// succeeds, answers the original ACK (see [`crate::commit`]).
    #[error(
        "message committed as conversation_seq {conversation_seq} (message_id {message_id}) but not archived: {cause}; retry with the same client_msg_id for its ACK"
    )]
    NotArchived {
        /// The committed message's seq.
        conversation_seq: u64,
        /// Its id.
        message_id: String,
        /// The archive's error.
        cause: String,
    },
    /// Startup rule ([`crate::stores::check_archive`]): the archive is missing, or is not the
    /// one the hot tier's history is archived into, or holds more of the outbox than the outbox
    /// does (a hot tier put back from an older copy).
    #[error("refusing to start: {0}")]
    WrongArchive(String),
    /// A store failed; nothing was acknowledged. Its [`tidemark_core::store::ErrorKind`] says
    /// whether to retry and how it answers over HTTP.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A live stream past a bound (`chat.stream_max_per_user`: 429 `too_many_streams`;
    /// `chat.stream_max_connections`: 503 `unavailable`).
    #[error("{message}")]
    TooManyStreams {
        /// What bound was reached, for the client.
        message: String,
        /// The node's bound (503) rather than the user's (429).
        node: bool,
    },
    /// A store's server is configured so that it could lose acknowledged writes (DESIGN.md
    /// "Durability"); Tidemark refuses to start on it.
    #[error(
        "refusing the hot store at {url}: {setting} is {value:?}, Tidemark needs {required:?} (DESIGN.md, Durability)"
    )]
    NotDurable {
        /// The server.
        url: String,
        /// The setting.
        setting: String,
        /// Its value on the server.
        value: String,
        /// The value required.
        required: String,
    },
    /// A fenced step found its shard's lease held by another holder, or expired: the worker
    /// that paused past its lease does nothing (DESIGN.md "Many nodes": leases with fencing
    /// tokens).
    #[error(
        "the lease on hot store shard {shard} was lost (expired or taken over); nothing was done"
    )]
    LeaseLost {
        /// The shard.
        shard: u32,
    },
    /// An archiver's outbox partition is no longer its node's: the consumer group gave it to
    /// another node's archiver (DESIGN.md "Many nodes": a fenced archiver cannot commit).
    /// Nothing was stored.
    #[error(
        "outbox partition {partition} is no longer this node's archiver's (the consumer group gave it to another); nothing was stored"
    )]
    PartitionLost {
        /// The partition.
        partition: u32,
    },
    /// Archiver start rule: no stored position and the outbox partition no longer starts at
    /// 0.
    #[error(
        "archiver refuses to start: no stored position and outbox partition {partition} starts at offset {low}, not 0; archive what the outbox no longer holds with `tidemark chat backfill`"
    )]
    BackfillNeeded {
        /// The outbox partition.
        partition: u32,
        /// Earliest offset still in it.
        low: u64,
    },
    /// Archiver start rule: the stored position lies outside `[low, high]` of the outbox
    /// partition.
    #[error(
        "archiver refuses to start: stored position {position} is outside outbox partition {partition}'s range [{low}, {high}]; archive what the outbox no longer holds with `tidemark chat backfill`"
    )]
    PositionOutOfRange {
        /// The outbox partition.
        partition: u32,
        /// The stored position.
        position: u64,
        /// Earliest offset in the outbox.
        low: u64,
        /// Next offset to be written.
        high: u64,
    },
}

impl ChatError {
    /// Whether a worker should simply try again later: a store failure that is retryable
    /// (unavailable, full), or a message committed but not archived yet.
    pub fn is_retryable(&self) -> bool {
        match self {
            ChatError::Store(e) => e.is_retryable(),
            ChatError::NotArchived { .. } => true,
            _ => false,
        }
    }
}

impl AsStoreError for ChatError {
    fn as_store_error(&self) -> Option<&StoreError> {
        match self {
            ChatError::Store(e) => Some(e),
            _ => None,
        }
    }
    fn as_store_error_mut(&mut self) -> Option<&mut StoreError> {
        match self {
            ChatError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SqliteError> for ChatError {
    fn from(e: SqliteError) -> Self {
        ChatError::Store(e.into())
    }
}

impl From<rusqlite::Error> for ChatError {
    fn from(e: rusqlite::Error) -> Self {
        ChatError::Store(e.into())
    }
}

impl From<ChatError> for ApiError {
    fn from(e: ChatError) -> Self {
        let msg = e.to_string();
        match e {
            ChatError::Invalid(_) => ApiError::bad_request(msg),
            ChatError::UnknownConversation(_) => ApiError::not_found(msg),
            ChatError::NotMember { .. } => ApiError::forbidden(msg),
            ChatError::KeyReused(_) => {
                ApiError::new(StatusCode::CONFLICT, "idempotency_key_reused", msg)
            }
            ChatError::Corrupt(_) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt_history", msg)
            }
            ChatError::NotArchived { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_archived", msg)
            }
            ChatError::Store(e) => ApiError::from(e),
            ChatError::TooManyStreams { node: false, .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_streams", msg)
            }
            ChatError::TooManyStreams { node: true, .. } => ApiError::unavailable(msg),
            ChatError::WrongArchive(_)
            | ChatError::NotDurable { .. }
            | ChatError::BackfillNeeded { .. }
            | ChatError::PositionOutOfRange { .. }
            | ChatError::LeaseLost { .. }
            | ChatError::PartitionLost { .. } => ApiError::unavailable(msg),
        }
    }
}

/// Chat results.
pub type Result<T, E = ChatError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_keep_their_source_and_answer_by_kind() {
        tidemark_core::http::assert_store_failures_pass_through(ChatError::is_retryable);
    }
}
