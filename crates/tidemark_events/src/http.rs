//! Events' HTTP routes (all behind the API key; `Authorization: Token <key>` works too, as
//! InfluxDB clients send it).
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/events` (JSON array or NDJSON) | 202 `{"accepted": n}`; 400 naming each bad line, nothing stored |
//! | `POST /api/v2/write?org=&bucket=&precision=ns\|us\|ms\|s` (line protocol) | 204 |
//! | `POST /write?db=&precision=` (line protocol, InfluxDB v1) | 204 |

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use tidemark_core::clock::SharedClock;
use tidemark_core::http::{ApiError, ApiQuery, Tenant};

use crate::ingest::{Ingest, IngestError, decode_json, decode_line_protocol};
use crate::lineproto::Precision;

/// Largest ingest request body (bytes).
pub const MAX_BODY_BYTES: usize = 128 * 1024 * 1024;

/// State of the events routes.
#[derive(Debug, Clone)]
pub struct EventsHttp {
    /// Ingest.
    pub ingest: Ingest,
    /// Clock for arrival times and points without a timestamp.
    pub clock: SharedClock,
}

/// The ingest routes.
pub fn ingest_router(state: EventsHttp) -> Router {
    Router::new()
        .route("/v1/events", post(post_events))
        .route("/api/v2/write", post(write))
        .route("/write", post(write))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // `Content-Encoding: gzip`, as Telegraf and the InfluxDB clients can send.
        .layer(tower_http::decompression::RequestDecompressionLayer::new())
        .with_state(state)
}

impl From<IngestError> for ApiError {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::Invalid(_) | IngestError::Request(_) | IngestError::DayDropped(_) => {
                ApiError::bad_request(e.to_string())
            }
            IngestError::Unavailable(_) => ApiError::unavailable(e.to_string()),
        }
    }
}

fn utf8(body: &[u8]) -> Result<&str, ApiError> {
    std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("body is not valid UTF-8: {e}")))
}

async fn post_events(
    State(s): State<EventsHttp>,
    _t: Tenant,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let events = decode_json(&s.ingest.config().schema, utf8(&body)?)?;
    let n = s.ingest.record(events, s.clock.now_ms()).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(serde_json::json!({ "accepted": n })),
    )
        .into_response())
}

/// Query of the write endpoints; `org`, `bucket`, `db`, `rp` are accepted and ignored (the
/// measurement and schema decide where events go).
#[derive(Debug, Deserialize)]
struct WriteParams {
    precision: Option<String>,
}

async fn write(
    State(s): State<EventsHttp>,
    _t: Tenant,
    ApiQuery(q): ApiQuery<WriteParams>,
    body: axum::body::Bytes,
) -> Result<StatusCode, ApiError> {
    let precision = Precision::parse(q.precision.as_deref()).map_err(ApiError::bad_request)?;
    let now = s.clock.now_ms();
    let events = decode_line_protocol(&s.ingest.config().schema, utf8(&body)?, precision, now)?;
    s.ingest.record(events, now).await?;
    Ok(StatusCode::NO_CONTENT)
}
