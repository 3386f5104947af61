//! Chat's HTTP routes under `/v1` (the binary adds auth in front of them).
//!
//! Each route takes the tenant's API key or a user token ([`Caller`]). With a user token, every
//! user a request names (`sender`, `user`, the members of a new conversation) must be the
//! token's own, and a token limited to some `conversations` opens only those (403 otherwise);
//! membership is then checked as for the tenant key.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/conversations` `{"members": [..], "listing_id"?}` | 201 `{"conversation_id"}` |
//! | `POST /v1/conversations/{cid}/messages` `{"client_msg_id","sender","body","class"?}` | 201 new / 200 retry: `{"conversation_seq","message_id","committed_at"}` |
//! | `GET /v1/conversations/{cid}/messages?user=&before=|after=&limit=` | 200 `{"messages": [..], "earliest_available_seq", "latest_seq", "truncated"}` |
//! | `PUT /v1/conversations/{cid}/read` `{"user","seq"}` | 204 |
//! | `GET /v1/users/{user}/conversations?after=&limit=` | 200 `{"conversations": [{"conversation_id","latest_seq","unread"}], "next_after"}` |
//! | `GET /v1/users/{user}/stream?since=` | 200 `text/event-stream` ([`stream`](crate::stream)) |

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::{Deserialize, Serialize};
use tidemark_core::http::{ApiError, ApiJson, ApiQuery, Caller, ErrorBody, NoQuery, body_limit};
use tidemark_core::openapi::JsonBodyErrors;
use tidemark_core::timefmt::rfc3339_ms;
use utoipa::{IntoParams, ToSchema};

use crate::model::{MessageClass, MessageRecord, SendAck, SendCommand, SendOutcome};
use crate::reads::Anchor;
use crate::service::{ChatService, MAX_ID_BYTES, NewConversation, check_send, parse_class};

mod stream;

/// The OpenAPI description of the chat routes (the server merges it into `/v1/openapi.json`).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(
        create_conversation,
        send_message,
        list_messages,
        mark_read,
        user_conversations,
        stream::user_stream
    ),
    components(schemas(stream::StreamMessage, stream::StreamRead, stream::StreamReload)),
    tags((name = "chat", description = "Conversations, messages, read pointers and unread counts"))
)]
pub struct ChatApi;

/// The chat routes, with `service` as their state (shared: one reference count per request,
/// not a copy of the service's config and metrics handles).
pub fn router(service: ChatService) -> Router {
    let limit = request_limit(service.config().max_body_bytes);
    let service = Arc::new(service);
    let routes = Router::new()
        .route("/v1/conversations", post(create_conversation))
        .route(
            "/v1/conversations/{cid}/messages",
            post(send_message).get(list_messages),
        )
        .route("/v1/conversations/{cid}/read", put(mark_read))
        .route("/v1/users/{user}/conversations", get(user_conversations))
        .route("/v1/users/{user}/stream", get(stream::user_stream));
    body_limit(routes, limit).with_state(service)
}

/// The largest chat request accepted, in bytes, for a body limit of `max_body_bytes`
/// (`chat.max_body_bytes`): JSON may spell a body byte in six (`\u0001`), and the other fields
/// (ids of at most 128 bytes, escaped too) fit in 64 KiB. Without it axum's default of 2 MiB
/// would silently cap a larger configured limit; with it a request that cannot hold a valid
/// SEND is refused (413) before it is read whole.
pub fn request_limit(max_body_bytes: usize) -> usize {
    max_body_bytes.saturating_mul(6).saturating_add(64 * 1024)
}

/// The schema of a user id in `CreateConversation::members`: not blank, at most 128 bytes, no
/// control characters, no whitespace at either end.
#[derive(Debug)]
struct UserId;

impl utoipa::PartialSchema for UserId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "A user id: not blank, at most 128 bytes, no control characters, no whitespace at either end.",
            ))
            .min_length(Some(1))
            .max_length(Some(MAX_ID_BYTES))
            .into()
    }
}

impl ToSchema for UserId {}

/// A new conversation.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateConversation {
    /// Its members, fixed for its life: 2 to 100 distinct non-blank user ids of at most 128
    /// bytes each, without control characters or whitespace at either end.
    #[schema(min_items = 2, max_items = 100, value_type = Vec<UserId>)]
    members: Vec<String>,
    /// The listing it is about, if any: its first message then records one `contact` event
    /// for that listing.
    #[schema(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    listing_id: Option<u64>,
    /// The client's idempotency key, unique within the tenant (non-blank, at most 128 bytes,
    /// no control characters, no whitespace at either end): a retry with the same key gets the
    /// conversation the first request created back (200) and creates nothing; the same key
    /// with other members or another listing is refused (409 `idempotency_key_reused`).
    /// Without it every request creates a new conversation.
    #[schema(min_length = 1, max_length = 128)]
    client_conversation_id: Option<String>,
}

/// A created (or, on a retry with the same `client_conversation_id`, found) conversation.
#[derive(Debug, Serialize, ToSchema)]
struct ConversationCreated {
    /// The conversation's id.
    conversation_id: String,
}

/// Creates a conversation between members, optionally about a listing.
#[utoipa::path(
    post,
    path = "/v1/conversations",
    tag = "chat",
    request_body = CreateConversation,
    responses(
        (status = 201, description = "Created", body = ConversationCreated),
        (status = 200, description = "Found: a retry with the `client_conversation_id` of an earlier request", body = ConversationCreated),
        (status = 403, description = "A user token whose user is not among the members, or one limited to some `conversations` (`forbidden`)", body = ErrorBody),
        (status = 409, description = "The `client_conversation_id` names a conversation with other members or another listing", body = ErrorBody),
        JsonBodyErrors,
    )
)]
async fn create_conversation(
    State(svc): State<Arc<ChatService>>,
    _: NoQuery,
    caller: Caller,
    ApiJson(req): ApiJson<CreateConversation>,
) -> Result<Response, ApiError> {
    if let Caller::User(u) = &caller {
        if u.conversations.is_some() {
            return Err(ApiError::forbidden(
                "this user token is limited to its `conversations`; it cannot create one",
            ));
        }
        if !req.members.contains(&u.user) {
            return Err(ApiError::forbidden(format!(
                "a user token creates only conversations its user {:?} is a member of",
                u.user
            )));
        }
        if req.listing_id.is_some() {
            return Err(ApiError::forbidden(
                "a conversation about a listing is created with the tenant's API key: its first \
                 message counts as a contact in the listing's analytics",
            ));
        }
    }
    let done = svc
        .create_conversation(
            caller.tenant(),
            NewConversation {
                members: req.members,
                listing_id: req.listing_id,
                client_conversation_id: req.client_conversation_id,
                key_owner: match &caller {
                    Caller::User(u) => Some(u.user.clone()),
                    Caller::Tenant(_) => None,
                },
            },
        )
        .await?;
    let status = if done.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let body = ConversationCreated {
        conversation_id: done.conversation_id,
    };
    Ok((status, axum::Json(body)).into_response())
}

/// A message to append to a conversation: the body of a SEND request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// The client's idempotency key (non-blank, at most 128 bytes, no control characters, no
    /// whitespace at either end): a retry with the same `(sender, client_msg_id)` gets the
    /// first acknowledgement back (200) and appends nothing.
    #[schema(min_length = 1, max_length = 128)]
    pub client_msg_id: String,
    /// The sending member (non-blank, at most 128 bytes, no whitespace at either end).
    #[schema(min_length = 1, max_length = 128)]
    pub sender: String,
    /// The text, 1 byte up to the configured limit (`chat.max_body_bytes`, 64 KiB by default).
    #[schema(min_length = 1)]
    pub body: String,
    /// Retention class; `standard` when absent.
    #[schema(value_type = Option<MessageClass>)]
    pub class: Option<String>,
}

impl SendMessage {
    /// Decodes a SEND request body as the route does once the content type and size are
    /// checked ([`tidemark_core::http::json_body_from_bytes`]): JSON syntax and repeated keys
    /// (400), not an object or an unknown, missing or mistyped field (422).
    pub fn from_bytes(body: &[u8]) -> Result<Self, ApiError> {
        tidemark_core::http::json_body_from_bytes(body, '{', "an object")
    }

    /// The command for `tenant` and conversation `conversation_id`, its fields checked as SEND
    /// checks them before touching a store ([`crate::service::check_send`]) with a body limit of
    /// `max_body_bytes` (`chat.max_body_bytes`): a body over it is 413, any other bad field 400.
    pub fn into_command(
        self,
        tenant: String,
        conversation_id: String,
        max_body_bytes: usize,
    ) -> Result<SendCommand, ApiError> {
        if self.body.len() > max_body_bytes {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!(
                    "body is {} bytes; the limit is {max_body_bytes} bytes",
                    self.body.len()
                ),
            ));
        }
        let cmd = SendCommand {
            tenant,
            conversation_id,
            sender: self.sender,
            client_msg_id: self.client_msg_id,
            body: self.body,
            class: parse_class(self.class.as_deref())?,
        };
        check_send(&cmd, max_body_bytes)?;
        Ok(cmd)
    }
}

/// The acknowledgement of a committed message.
#[derive(Debug, Serialize, ToSchema)]
struct AckBody {
    /// Its position in the conversation, from 1, without gaps.
    conversation_seq: u64,
    /// Its id.
    message_id: String,
    /// When it was committed, RFC 3339 UTC.
    #[schema(format = DateTime)]
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

/// Appends a message (SEND); idempotent per `(sender, client_msg_id)`.
#[utoipa::path(
    post,
    path = "/v1/conversations/{cid}/messages",
    tag = "chat",
    params(("cid" = String, Path, description = "Conversation id")),
    request_body = SendMessage,
    responses(
        (status = 201, description = "Committed now", body = AckBody),
        (status = 200, description = "A retry of a committed message: its first acknowledgement", body = AckBody),
        (status = 403, description = "The sender is not a member, or not the user token's user, or the token is limited to other conversations (`forbidden`)", body = ErrorBody),
        (status = 404, description = "No such conversation (`not_found`)", body = ErrorBody),
        JsonBodyErrors,
    )
)]
async fn send_message(
    State(svc): State<Arc<ChatService>>,
    _: NoQuery,
    caller: Caller,
    Path(cid): Path<String>,
    ApiJson(req): ApiJson<SendMessage>,
) -> Result<Response, ApiError> {
    caller.may_open(&cid)?;
    caller.may_act_as(&req.sender, "sender")?;
    let cmd = req.into_command(caller.tenant().to_owned(), cid, svc.config().max_body_bytes)?;
    let outcome = svc.send(cmd).await?;
    let status = match outcome {
        SendOutcome::Committed(_) => StatusCode::CREATED,
        SendOutcome::Duplicate(_) => StatusCode::OK,
    };
    Ok((status, axum::Json(AckBody::from(outcome.ack()))).into_response())
}

/// Which page of history: the newest (no anchor), or the page before or after a seq.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct HistoryParams {
    /// The reader: a member of the conversation (403 otherwise), as a SEND names its sender.
    /// Required, with the tenant key too, so a backend cannot hand one user's conversation to
    /// another by mistake.
    #[param(required = true, min_length = 1, max_length = 128)]
    user: Option<String>,
    /// The page of messages just before this seq (not together with `after`).
    #[param(maximum = 9_223_372_036_854_775_807_i64)]
    before: Option<u64>,
    /// The page of messages just after this seq (not together with `before`).
    #[param(maximum = 9_223_372_036_854_775_807_i64)]
    after: Option<u64>,
    /// Page width in seqs, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u64>,
}

/// One message of a history page.
#[derive(Debug, Serialize, ToSchema)]
struct MessageBody {
    /// Its position in the conversation.
    conversation_seq: u64,
    /// Its id.
    message_id: String,
    /// The sending member.
    sender: String,
    /// The text.
    body: String,
    /// Retention class.
    class: MessageClass,
    /// When it was committed, RFC 3339 UTC.
    #[schema(format = DateTime)]
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

/// A page of history, oldest first.
#[derive(Debug, Serialize, ToSchema)]
struct HistoryBody {
    /// The page's messages, oldest first (expired ephemeral messages and trimmed seqs are
    /// absent).
    messages: Vec<MessageBody>,
    /// The lowest seq still readable.
    earliest_available_seq: u64,
    /// The conversation's newest seq (0 before its first message).
    latest_seq: u64,
    /// The page was cut at `chat.page_bytes_max` bytes of messages (4 MiB by default): it
    /// holds the messages of its window nearest the anchor, and the next page starts from its
    /// first message (`before=`, paging back) or its last (`after=`), not `limit` seqs on.
    truncated: bool,
}

/// Reads a page of a conversation's history (PULL_HISTORY), from both tiers.
#[utoipa::path(
    get,
    path = "/v1/conversations/{cid}/messages",
    tag = "chat",
    params(("cid" = String, Path, description = "Conversation id"), HistoryParams),
    responses(
        (status = 200, description = "The page", body = HistoryBody),
        (status = 400, description = "No `user`, a blank one, or a bad `before`, `after` or `limit` (`bad_request`)", body = ErrorBody),
        (status = 403, description = "The user is not a member, or not the user token's user, or the token is limited to other conversations (`forbidden`); no message is sent", body = ErrorBody),
        (status = 404, description = "No such conversation (`not_found`)", body = ErrorBody),
        (status = 500, description = "Data the page needs is missing or corrupt (`corrupt_history`); never a partial page", body = ErrorBody),
    )
)]
async fn list_messages(
    State(svc): State<Arc<ChatService>>,
    caller: Caller,
    Path(cid): Path<String>,
    ApiQuery(q): ApiQuery<HistoryParams>,
) -> Result<Response, ApiError> {
    for (name, seq) in [("before", q.before), ("after", q.after)] {
        if let Some(s) = seq
            && i64::try_from(s).is_err()
        {
            return Err(ApiError::bad_request(format!(
                "{name} {s} is out of range (at most {})",
                i64::MAX
            )));
        }
    }
    let reader = q.user.ok_or_else(|| {
        ApiError::bad_request(
            "user is required: the reader of the history, a member of the conversation",
        )
    })?;
    caller.may_open(&cid)?;
    caller.may_act_as(&reader, "user")?;
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
        .history(
            caller.tenant(),
            &cid,
            &reader,
            anchor,
            q.limit.unwrap_or(50),
        )
        .await?;
    Ok(axum::Json(HistoryBody {
        messages: page.messages.into_iter().map(MessageBody::from).collect(),
        earliest_available_seq: page.earliest_available_seq,
        latest_seq: page.latest_seq,
        truncated: page.truncated,
    })
    .into_response())
}

/// Moves a member's read pointer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct MarkRead {
    /// The member (non-blank, at most 128 bytes, no whitespace at either end).
    #[schema(min_length = 1, max_length = 128)]
    user: String,
    /// The last seq they have read: at most the latest seq; the pointer never moves back.
    seq: u64,
}

/// Moves a member's read pointer (never backwards).
#[utoipa::path(
    put,
    path = "/v1/conversations/{cid}/read",
    tag = "chat",
    params(("cid" = String, Path, description = "Conversation id")),
    request_body = MarkRead,
    responses(
        (status = 204, description = "Stored"),
        (status = 403, description = "The user is not a member, or not the user token's user, or the token is limited to other conversations (`forbidden`)", body = ErrorBody),
        (status = 404, description = "No such conversation (`not_found`)", body = ErrorBody),
        JsonBodyErrors,
    )
)]
async fn mark_read(
    State(svc): State<Arc<ChatService>>,
    _: NoQuery,
    caller: Caller,
    Path(cid): Path<String>,
    ApiJson(req): ApiJson<MarkRead>,
) -> Result<StatusCode, ApiError> {
    caller.may_open(&cid)?;
    caller.may_act_as(&req.user, "user")?;
    svc.mark_read(caller.tenant(), &cid, &req.user, req.seq)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One conversation of a user.
#[derive(Debug, Serialize, ToSchema)]
struct SummaryBody {
    /// The conversation.
    conversation_id: String,
    /// Its newest seq.
    latest_seq: u64,
    /// Messages after the user's read pointer that are still readable.
    unread: u64,
}

/// A page of a user's conversations.
#[derive(Debug, Serialize, ToSchema)]
struct ConversationsBody {
    /// The conversations the user is a member of, in conversation id order, with their
    /// unread counts.
    conversations: Vec<SummaryBody>,
    /// More follow: pass this as `after` for the next page (`null` on the last page).
    next_after: Option<String>,
}

/// Which page of a user's conversations.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ConversationsParams {
    /// The page after this conversation id (a page's `next_after`: a UUID in lowercase hex with
    /// hyphens; anything else is refused with 400); none: the first page.
    #[param(pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    after: Option<String>,
    /// Conversations per page, 1 to 1,000 (default 200).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// Most conversations per page of `GET /v1/users/{user}/conversations`.
const MAX_CONVERSATIONS_PAGE: usize = 1000;
/// Conversations per page when the request gives no `limit`.
const DEFAULT_CONVERSATIONS_PAGE: usize = 200;

/// Lists a user's conversations with their latest seq and unread count.
#[utoipa::path(
    get,
    path = "/v1/users/{user}/conversations",
    tag = "chat",
    params(("user" = String, Path, description = "User id"), ConversationsParams),
    responses(
        (status = 200, description = "A page of the user's conversations (none: an empty list)", body = ConversationsBody),
        (status = 400, description = "`limit` out of range, `after` not a conversation id, or a blank user id or one with whitespace at either end (`bad_request`)", body = ErrorBody),
        (status = 403, description = "A user token for another user (`forbidden`)", body = ErrorBody),
        (status = 500, description = "An unread count could not be computed from corrupt data (`corrupt_history`)", body = ErrorBody),
    )
)]
async fn user_conversations(
    State(svc): State<Arc<ChatService>>,
    caller: Caller,
    Path(user): Path<String>,
    ApiQuery(q): ApiQuery<ConversationsParams>,
) -> Result<Response, ApiError> {
    caller.may_act_as(&user, "user")?;
    let limit = q.limit.unwrap_or(DEFAULT_CONVERSATIONS_PAGE);
    if !(1..=MAX_CONVERSATIONS_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be 1..={MAX_CONVERSATIONS_PAGE}, got {limit}"
        )));
    }
    let page = svc
        .user_conversations_page(
            caller.tenant(),
            &user,
            q.after.as_deref(),
            limit,
            caller.user().and_then(|u| u.conversations.as_ref()),
        )
        .await?;
    Ok(axum::Json(ConversationsBody {
        next_after: page.next_after,
        conversations: page
            .conversations
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
