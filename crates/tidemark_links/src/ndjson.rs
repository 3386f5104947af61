//! The streamed render (`POST /v1/mailings/{mid}/render` with `Accept: application/x-ndjson`):
//! recipients are rendered a part at a time, each part's link records stored before its lines
//! are written, so memory holds one part whatever the size of the mailing.
//!
//! One JSON object per line, each with one key:
//! - `{"message": {"email", "subject", "html"}}` for each rendered message;
//! - `{"skipped": {"email", "reason"}}` for each recipient that gets none;
//! - last, `{"done": {"messages": n, "skipped": k}}` when every part is rendered and stored,
//!   or `{"error": {"code", "message"}}` when a part failed: the parts before it are stored,
//!   the rest are not rendered. An answer without a `done` line is incomplete.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tidemark_core::http::ApiError;

use crate::builder::{Build, Recipient};
use crate::error::Result;
use crate::model::Mailing;
use crate::service::LinksService;

/// Media type of the streamed render.
pub const NDJSON: &str = "application/x-ndjson";

/// Recipients rendered per part of a streamed render.
pub const PART_RECIPIENTS: usize = 500;

/// Whether the request asks for the streamed render (`Accept` names [`NDJSON`]).
pub fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(NDJSON)
        })
}

/// Streams the render of `mailing` (already checked by
/// [`LinksService::prepare_render`]) for `recipients`, a part at a time.
pub fn stream_render(
    svc: LinksService,
    tenant: String,
    mailing: Mailing,
    recipients: Vec<Recipient>,
) -> Response {
    // Two parts in flight at most: a slow reader holds the render back instead of the server
    // buffering it.
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(2);
    tokio::spawn(async move {
        let (mut messages, mut skipped) = (0usize, 0usize);
        let mut rest = recipients;
        while !rest.is_empty() {
            let tail = rest.split_off(PART_RECIPIENTS.min(rest.len()));
            let part = std::mem::replace(&mut rest, tail);
            let (bytes, failed) = match svc.render_part(&tenant, &mailing, part).await {
                Ok(build) => {
                    messages += build.messages.len();
                    skipped += build.skipped.len();
                    (part_lines(&build), false)
                }
                Err(e) => (error_line(e), true),
            };
            // A reader that went away ends the render.
            if tx.send(bytes).await.is_err() || failed {
                return;
            }
        }
        let done = json!({"done": {"messages": messages, "skipped": skipped}});
        let _ = tx.send(line(&done)).await;
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), rx))
    });
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON))],
        Body::from_stream(body),
    )
        .into_response()
}

fn line(v: &serde_json::Value) -> Bytes {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out.into()
}

/// The lines of one part: its messages, then its skipped recipients, each in recipient order.
fn part_lines(build: &Build) -> Bytes {
    let mut out = Vec::new();
    for m in &build.messages {
        out.extend_from_slice(&line(&json!({ "message": m })));
    }
    for s in &build.skipped {
        out.extend_from_slice(&line(&json!({ "skipped": s })));
    }
    out.into()
}

/// The last line of a failed render: the error as every route answers it.
fn error_line(e: crate::error::LinksError) -> Bytes {
    let e = ApiError::from(e);
    line(&json!({"error": {"code": e.code, "message": e.message}}))
}

/// Checks and starts a streamed render: errors found before the first part (bad recipients,
/// no such mailing, too many links) are answered as usual, with their status.
pub async fn render(
    svc: LinksService,
    tenant: String,
    mailing_id: &str,
    recipients: Vec<Recipient>,
) -> Result<Response> {
    let mailing = svc.prepare_render(&tenant, mailing_id, &recipients).await?;
    Ok(stream_render(svc, tenant, mailing, recipients))
}
