//! First contact about a listing (chat → events): a conversation created with a `listing_id`
//! yields exactly one `contact` for that listing, when its first message (seq 1) commits.
//!
//! Data flow: [`crate::service::ChatService::send`] sees the commit outcome. Only a *fresh*
//! commit of seq 1 produces a [`FirstContact`] — an idempotent retry is answered as a duplicate
//! and never counts again. The contact is handed to a [`ContactSink`] (the server wires the
//! events subsystem's ingest) on a tracked background task, so the sender's SEND_ACK never
//! waits for the analytics store (DESIGN principle 1); shutdown waits for the tracked tasks.
//!
//! Known window: a crash after the message committed and before the sink stored the contact
//! loses that one contact (at most once, never twice).

use async_trait::async_trait;

/// The first committed message of a conversation that is about a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstContact {
    /// Tenant of the conversation.
    pub tenant: String,
    /// The conversation.
    pub conversation_id: String,
    /// The listing it is about.
    pub listing_id: u64,
    /// Who wrote first (normally the buyer).
    pub sender: String,
    /// Commit time of that first message (Unix ms).
    pub committed_at_ms: i64,
}

/// Where first contacts go (the events subsystem in `tidemark serve`).
#[async_trait]
pub trait ContactSink: Send + Sync + std::fmt::Debug {
    /// Stores one contact durably. Errors are counted and logged by the caller; the message
    /// itself is already committed.
    async fn record(&self, contact: FirstContact) -> Result<(), String>;
}
