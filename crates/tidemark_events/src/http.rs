//! Events' HTTP routes (all behind the API key; `Authorization: Token <key>` works too, as
//! InfluxDB clients send it).
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/events` (JSON array or NDJSON) | 202 `{"accepted": n}`; 400 naming each bad line, nothing stored |
//! | `POST /api/v2/write?org=&bucket=&precision=ns\|us\|ms\|s` (line protocol) | 204 |
//! | `POST /write?db=&precision=` (line protocol, InfluxDB v1) | 204 |

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use tidemark_core::body::ContentEncoding;
use tidemark_core::clock::SharedClock;
use tidemark_core::cpu::{CpuPool, INLINE_INPUT_BYTES};
use tidemark_core::http::{ApiError, ApiQuery, ErrorBody, NoQuery, Tenant, body_limit};
use utoipa::ToSchema;

use crate::ingest::{Ingest, IngestError, decode_json, decode_line_protocol};
use crate::lineproto::Precision;
use crate::model::Event;
use crate::schema::Schema;

/// Largest ingest request body (bytes), as sent and once decompressed: 100,000 events of
/// about 300 bytes each, with room to spare (InfluxDB's own default is 25 MB).
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// State of the events routes.
#[derive(Debug, Clone)]
pub struct EventsHttp {
    /// Ingest.
    pub ingest: Ingest,
    /// Clock for arrival times and points without a timestamp.
    pub clock: SharedClock,
    /// Where a large or compressed body is inflated and parsed, off the runtime's workers.
    pub pool: CpuPool,
}

/// The OpenAPI description of `POST /v1/events` (the InfluxDB write endpoints are outside
/// `/v1` and described by InfluxDB's own documents).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(paths(post_events))]
pub(crate) struct IngestApi;

/// The ingest routes.
pub fn ingest_router(state: EventsHttp) -> Router {
    let routes = Router::new()
        .route("/v1/events", post(post_events))
        .route("/api/v2/write", post(write))
        .route("/write", post(write));
    // The limit counts the body as sent; `decode` applies it again to the body as
    // decompressed.
    body_limit(routes, MAX_BODY_BYTES).with_state(Arc::new(state))
}

impl From<IngestError> for ApiError {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::Invalid(_) | IngestError::Request(_) | IngestError::DayDropped(_) => {
                ApiError::bad_request(e.to_string())
            }
            IngestError::TooLarge(m) => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", m)
            }
            IngestError::Store(ref s) => ApiError::store(s.kind(), e.to_string()),
        }
    }
}

fn utf8(body: &[u8]) -> Result<&str, ApiError> {
    std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("body is not valid UTF-8: {e}")))
}

/// Inflates `body` and decodes it with `parse`: on the [`CpuPool`] when it is compressed or
/// large, since both steps take CPU time in proportion to its decompressed size; right here
/// otherwise. Each step stops at its limit (bytes, then events) with 413.
async fn decode_body<F>(
    s: &EventsHttp,
    headers: &HeaderMap,
    body: Bytes,
    parse: F,
) -> Result<Vec<Event>, ApiError>
where
    F: FnOnce(&Schema, &str, usize) -> Result<Vec<Event>, IngestError> + Send + 'static,
{
    let encoding = ContentEncoding::of(headers)?;
    let heavy = encoding != ContentEncoding::Identity || body.len() > INLINE_INPUT_BYTES;
    let cfg = s.ingest.config();
    let (schema, max_events) = (cfg.schema.clone(), cfg.max_batch);
    s.pool
        .run_if(heavy, move || {
            let text = tidemark_core::body::decode(encoding, &body, MAX_BODY_BYTES)?;
            Ok(parse(&schema, utf8(&text)?, max_events)?)
        })
        .await
}

/// One event of `POST /v1/events` (a JSON object; as an array item or one NDJSON line).
/// Besides the properties below, any field declared in `[events.fields]` of the config may be
/// given (`email`, `mailing_id`, `position`, `bot`, …) as a string, number or boolean; an
/// undeclared one makes the event invalid.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // describes the decoder in `ingest::decode_json`, never built
struct EventJson {
    /// When it happened: RFC 3339, or whole Unix milliseconds; within the raw window, from
    /// `raw_retention + lateness` ago to one day after now.
    #[schema(schema_with = time_schema)]
    time: serde_json::Value,
    /// The kind: one of the configured closed set (by default `view`, `click`, `contact`,
    /// `email_open`, `email_click`).
    kind: String,
    /// The listing it concerns: a non-negative integer or a string of decimal digits.
    #[schema(schema_with = listing_id_schema)]
    listing_id: Option<serde_json::Value>,
    /// The user.
    user_id: Option<String>,
    /// The session.
    session_id: Option<String>,
    /// The page.
    page_url: Option<String>,
}

fn time_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type};
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .minimum(Some(0)),
        )
        .build()
        .into()
}

fn listing_id_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type};
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .minimum(Some(0)),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[0-9]+$")),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .build()
        .into()
}

/// How many events were stored.
#[derive(Debug, Serialize, ToSchema)]
struct Accepted {
    /// Events of the batch, all stored durably.
    accepted: usize,
}

/// Stores a batch of events, all or nothing. The body is a JSON array of events or NDJSON
/// (one event per line), optionally `Content-Encoding: gzip`.
#[utoipa::path(
    post,
    path = "/v1/events",
    tag = "events",
    request_body(
        description = "A JSON array of events, or NDJSON: one event object per line",
        content(
            (Vec<EventJson> = "application/json"),
            (String = "application/x-ndjson"),
        ),
    ),
    responses(
        (status = 202, description = "Every event of the batch is stored", body = Accepted),
        (status = 400, description = "Not JSON / NDJSON, no events, or bad events (each bad line is named); nothing stored (`bad_request`)", body = ErrorBody),
        (status = 413, description = "The body is over 32 MiB as sent or once decompressed, or holds more than `events.max_batch` events (`payload_too_large`)", body = ErrorBody),
        (status = 415, description = "An unsupported `Content-Encoding` (`unsupported_media_type`)", body = ErrorBody),
    )
)]
async fn post_events(
    State(s): State<Arc<EventsHttp>>,
    _: NoQuery,
    _t: Tenant,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let events = decode_body(&s, &headers, body, decode_json).await?;
    let accepted = s.ingest.record(events, s.clock.now_ms()).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(Accepted { accepted })).into_response())
}

/// Query of the write endpoints: `precision`, and what InfluxDB clients send besides
/// (`org`, `orgID`, `bucket`, `db`, `rp`, `consistency`, `u`, `p`), accepted and ignored (the
/// measurement and schema decide where events go); any other parameter is refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteParams {
    precision: Option<String>,
    #[serde(rename = "org")]
    _org: Option<IgnoredAny>,
    #[serde(rename = "orgID")]
    _org_id: Option<IgnoredAny>,
    #[serde(rename = "bucket")]
    _bucket: Option<IgnoredAny>,
    #[serde(rename = "db")]
    _db: Option<IgnoredAny>,
    #[serde(rename = "rp")]
    _rp: Option<IgnoredAny>,
    #[serde(rename = "consistency")]
    _consistency: Option<IgnoredAny>,
    #[serde(rename = "u")]
    _u: Option<IgnoredAny>,
    #[serde(rename = "p")]
    _p: Option<IgnoredAny>,
}

async fn write(
    State(s): State<Arc<EventsHttp>>,
    _t: Tenant,
    ApiQuery(q): ApiQuery<WriteParams>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let precision = Precision::parse(q.precision.as_deref()).map_err(ApiError::bad_request)?;
    let now = s.clock.now_ms();
    let events = decode_body(&s, &headers, body, move |schema, text, max| {
        decode_line_protocol(schema, text, precision, now, max)
    })
    .await?;
    s.ingest.record(events, now).await?;
    Ok(StatusCode::NO_CONTENT)
}
