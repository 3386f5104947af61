//! `GET /v1/users/{user}/stream`: the user's live stream as Server-Sent Events
//! ([`crate::stream`] holds the rules).
//!
//! Events (`event:` name, `data:` JSON, and an `id:` holding the client's position after it):
//! - `message`: `{"conversation_id","conversation_seq","message_id","sender","body","class","committed_at"}`;
//! - `read`: `{"conversation_id","read_seq"}`, the user's own read pointer moved (live only:
//!   after a reconnect, read pointers come from the conversation list);
//! - `reload`: `{"conversation_id","missed_from","missed_to"}`, seqs the client never got and
//!   never will (expired ephemeral messages, deleted history): reload that conversation's
//!   history if it matters;
//! - `ready`: `{}`, the replay asked for is done and what follows is live.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::{Deserialize, Serialize};
use tidemark_core::http::{ApiError, ApiQuery, Caller, ErrorBody};
use tidemark_core::user_token::LEEWAY_S;
use utoipa::{IntoParams, ToSchema};

use super::MessageBody;
use crate::service::ChatService;
use crate::stream::{Position, StreamEvent, StreamRequest};

/// Where a stream starts.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct StreamParams {
    /// Resume after this position: the `id` of the last event received (`Last-Event-ID`, which
    /// browsers send on reconnect, takes precedence). `v1` alone replays every conversation from
    /// its first message. Without either, the stream starts at the latest seqs.
    /// A position names only conversations active in the last two `outbox_recovery_window`s; a
    /// URL holds about 150 of them percent-encoded, `Last-Event-ID` up to 10,000.
    #[param(max_length = 8_000)]
    since: Option<String>,
}

/// A message event's data.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct StreamMessage {
    /// The conversation.
    conversation_id: String,
    /// The message, as a history page holds it.
    #[serde(flatten)]
    message: MessageBody,
}

/// A read event's data.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct StreamRead {
    /// The conversation.
    conversation_id: String,
    /// The user's read pointer there now.
    read_seq: u64,
}

/// A reload event's data: seqs passed over, never to be delivered.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct StreamReload {
    /// The conversation.
    conversation_id: String,
    /// The first seq missed.
    missed_from: u64,
    /// The last seq missed; the stream goes on after it.
    missed_to: u64,
}

fn sse_event(event: StreamEvent) -> Event {
    let (name, id, data) = match event {
        StreamEvent::Message { position, record } => (
            "message",
            position,
            serde_json::to_string(&StreamMessage {
                conversation_id: record.conversation_id.clone(),
                message: MessageBody::from(record),
            }),
        ),
        StreamEvent::Read {
            position,
            conversation_id,
            read_seq,
        } => (
            "read",
            position,
            serde_json::to_string(&StreamRead {
                conversation_id,
                read_seq,
            }),
        ),
        StreamEvent::Reload {
            position,
            conversation_id,
            missed_from,
            missed_to,
        } => (
            "reload",
            position,
            serde_json::to_string(&StreamReload {
                conversation_id,
                missed_from,
                missed_to,
            }),
        ),
        StreamEvent::Ready { position } => ("ready", position, Ok("{}".to_owned())),
    };
    Event::default()
        .event(name)
        .id(id)
        .data(data.unwrap_or_else(|_| "{}".to_owned()))
}

/// Streams a user's conversations live: every message committed to them after the position, in
/// seq order per conversation, and the user's read-pointer moves (Server-Sent Events).
#[utoipa::path(
    get,
    path = "/v1/users/{user}/stream",
    tag = "chat",
    params(
        ("user" = String, Path, description = "User id"),
        ("Last-Event-ID" = Option<String>, Header, description = "The `id` of the last event received; takes precedence over `since`"),
        StreamParams
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream` of `message`, `read`, `reload` and `ready` events (see the data schemas `StreamMessage`, `StreamRead`, `StreamReload`); each `id` is the client's position", content_type = "text/event-stream", body = String),
        (status = 400, description = "A bad position or user id (`bad_request`)", body = ErrorBody),
        (status = 403, description = "A user token for another user (`forbidden`)", body = ErrorBody),
        (status = 429, description = "The user has `chat.stream_max_per_user` streams open on this node (`too_many_streams`)", body = ErrorBody),
        (status = 503, description = "The node holds its most live streams (`chat.stream_max_connections`), or a store could not be reached (`unavailable`)", body = ErrorBody),
    )
)]
pub(super) async fn user_stream(
    State(svc): State<Arc<ChatService>>,
    caller: Caller,
    Path(user): Path<String>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<StreamParams>,
) -> Result<Sse<impl Stream<Item = Result<Event, std::io::Error>>>, ApiError> {
    caller.may_act_as(&user, "user")?;
    let since = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("Last-Event-ID is not visible ASCII"))?
                .to_owned(),
        ),
        None => q.since,
    };
    let since = since.as_deref().map(Position::parse).transpose()?;
    let (conversations, until_s): (Option<BTreeSet<String>>, _) = match &caller {
        Caller::User(u) => (
            u.conversations.clone(),
            Some(u.expires_at_s.saturating_add(LEEWAY_S)),
        ),
        Caller::Tenant(_) => (None, None),
    };
    let open = crate::stream::open(
        &svc,
        StreamRequest {
            tenant: caller.tenant().to_owned(),
            user,
            conversations,
            since,
            until_s,
        },
    )
    .await?;
    // A cut stream ends with an error, which makes hyper drop the connection instead of
    // flushing to a client that may never read again.
    let events = futures::stream::unfold(Some(open), |state| async move {
        let mut open = state?;
        tokio::select! {
            biased;
            () = open.cut.cancelled() => Some((Err(std::io::Error::other("stream cut")), None)),
            event = open.events.recv() => event.map(|e| (Ok(sse_event(e)), Some(open))),
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}
