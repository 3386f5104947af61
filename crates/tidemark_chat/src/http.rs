//! Chat's HTTP routes under `/v1` (the binary adds auth in front of them).
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/conversations` `{"members": [..], "listing_id"?}` | 201 `{"conversation_id"}` |
//! | `POST /v1/conversations/{cid}/messages` `{"client_msg_id","sender","body","class"?}` | 201 new / 200 retry: `{"conversation_seq","message_id","committed_at"}` |
//! | `GET /v1/conversations/{cid}/messages?before=|after=&limit=` | 200 `{"messages": [..], "earliest_available_seq", "latest_seq"}` |
//! | `PUT /v1/conversations/{cid}/read` `{"user","seq"}` | 204 |
//! | `GET /v1/users/{user}/conversations` | 200 `{"conversations": [{"conversation_id","latest_seq","unread"}]}` |

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::{Deserialize, Serialize};
use tidemark_core::http::{ApiError, ApiJson, ApiQuery, Tenant};
use tidemark_core::timefmt::rfc3339_ms;

use crate::model::{MessageRecord, SendAck, SendCommand, SendOutcome};
use crate::reads::Anchor;
use crate::service::{ChatService, NewConversation, parse_class};

/// The chat routes, with `service` as their state.
pub fn router(service: ChatService) -> Router {
    Router::new()
        .route("/v1/conversations", post(create_conversation))
        .route(
            "/v1/conversations/{cid}/messages",
            post(send_message).get(list_messages),
        )
        .route("/v1/conversations/{cid}/read", put(mark_read))
        .route("/v1/users/{user}/conversations", get(user_conversations))
        .with_state(service)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateConversation {
    members: Vec<String>,
    listing_id: Option<u64>,
}

#[derive(Debug, Serialize)]
struct ConversationCreated {
    conversation_id: String,
}

async fn create_conversation(
    State(svc): State<ChatService>,
    tenant: Tenant,
    ApiJson(req): ApiJson<CreateConversation>,
) -> Result<Response, ApiError> {
    let conversation_id = svc
        .create_conversation(
            &tenant.0,
            NewConversation {
                members: req.members,
                listing_id: req.listing_id,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(ConversationCreated { conversation_id }),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SendMessage {
    client_msg_id: String,
    sender: String,
    body: String,
    class: Option<String>,
}

#[derive(Debug, Serialize)]
struct AckBody {
    conversation_seq: u64,
    message_id: String,
    committed_at: String,
}

impl From<SendAck> for AckBody {
    fn from(a: SendAck) -> Self {
        Self {
            conversation_seq: a.conversation_seq,
            message_id: a.message_id,
            committed_at: rfc3339_ms(a.committed_at_ms),
        }
    }
}

async fn send_message(
    State(svc): State<ChatService>,
    tenant: Tenant,
    Path(cid): Path<String>,
    ApiJson(req): ApiJson<SendMessage>,
) -> Result<Response, ApiError> {
    if req.body.len() > svc.config().max_body_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "body is {} bytes; the limit is {} bytes",
                req.body.len(),
                svc.config().max_body_bytes
            ),
        ));
    }
    let cmd = SendCommand {
        tenant: tenant.0,
        conversation_id: cid,
        sender: req.sender,
        client_msg_id: req.client_msg_id,
        body: req.body,
        class: parse_class(req.class.as_deref())?,
    };
    let outcome = svc.send(cmd).await?;
    let status = match outcome {
        SendOutcome::Committed(_) => StatusCode::CREATED,
        SendOutcome::Duplicate(_) => StatusCode::OK,
    };
    Ok((status, axum::Json(AckBody::from(outcome.ack()))).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryParams {
    before: Option<u64>,
    after: Option<u64>,
    limit: Option<u64>,
}

#[derive(Debug, Serialize)]
struct MessageBody {
    conversation_seq: u64,
    message_id: String,
    sender: String,
    body: String,
    class: crate::model::MessageClass,
    committed_at: String,
}

impl From<MessageRecord> for MessageBody {
    fn from(r: MessageRecord) -> Self {
        Self {
            conversation_seq: r.conversation_seq,
            message_id: r.message_id,
            sender: r.sender,
            body: r.body,
            class: r.class,
            committed_at: rfc3339_ms(r.committed_at_ms),
        }
    }
}

#[derive(Debug, Serialize)]
struct HistoryBody {
    messages: Vec<MessageBody>,
    earliest_available_seq: u64,
    latest_seq: u64,
}

async fn list_messages(
    State(svc): State<ChatService>,
    tenant: Tenant,
    Path(cid): Path<String>,
    ApiQuery(q): ApiQuery<HistoryParams>,
) -> Result<Response, ApiError> {
    let anchor = match (q.before, q.after) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give either before or after, not both",
            ));
        }
        (Some(b), None) => Anchor::Before(b),
        (None, Some(a)) => Anchor::After(a),
        (None, None) => Anchor::Latest,
    };
    let page = svc
        .history(&tenant.0, &cid, anchor, q.limit.unwrap_or(50))
        .await?;
    Ok(axum::Json(HistoryBody {
        messages: page.messages.into_iter().map(MessageBody::from).collect(),
        earliest_available_seq: page.earliest_available_seq,
        latest_seq: page.latest_seq,
    })
    .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MarkRead {
    user: String,
    seq: u64,
}

async fn mark_read(
    State(svc): State<ChatService>,
    tenant: Tenant,
    Path(cid): Path<String>,
    ApiJson(req): ApiJson<MarkRead>,
) -> Result<StatusCode, ApiError> {
    svc.mark_read(&tenant.0, &cid, &req.user, req.seq).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize)]
struct SummaryBody {
    conversation_id: String,
    latest_seq: u64,
    unread: u64,
}

#[derive(Debug, Serialize)]
struct ConversationsBody {
    conversations: Vec<SummaryBody>,
}

async fn user_conversations(
    State(svc): State<ChatService>,
    tenant: Tenant,
    Path(user): Path<String>,
) -> Result<Response, ApiError> {
    let list = svc.user_conversations(&tenant.0, &user).await?;
    Ok(axum::Json(ConversationsBody {
        conversations: list
            .into_iter()
            .map(|c| SummaryBody {
                conversation_id: c.conversation_id,
                latest_seq: c.latest_seq,
                unread: c.unread,
            })
            .collect(),
    })
    .into_response())
}
