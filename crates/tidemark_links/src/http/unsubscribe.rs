//! `GET|POST /u/{id}`: one-click unsubscribe (RFC 8058). A `GET` (a person following the
//! link, or a scanner prefetching it) only shows a confirmation page whose button POSTs; a
//! `POST` (the mail client's one-click, with the body `List-Unsubscribe=One-Click`, or that
//! button) unsubscribes. Every answer is a small HTML page, never an error dump: 404 for an
//! unknown id, 410 for an expired one, 503 with `Retry-After` while the store is down.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use html_escape::encode_text;

use super::REDIRECT_RETRY_AFTER_SECS;
use crate::error::Result;
use crate::service::{LinksService, UnsubscribeLink};

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{title}</title>\
         <body style=\"font-family:sans-serif;max-width:32rem;margin:3rem auto\">\
         <h1>{title}</h1>{body}</body></html>\n"
    );
    let mut r = (status, Html(html)).into_response();
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-store, private"),
    );
    r
}

fn answer(link: Result<UnsubscribeLink>, done: bool) -> Response {
    match link {
        Ok(UnsubscribeLink::Recipient { email, from }) if done => page(
            StatusCode::OK,
            "Unsubscribed",
            &format!(
                "<p>{} will get no more mail from {}.</p>",
                encode_text(&email),
                encode_text(&from)
            ),
        ),
        Ok(UnsubscribeLink::Recipient { email, from }) => page(
            StatusCode::OK,
            "Unsubscribe",
            &format!(
                "<p>Stop mail from {} to {}?</p><form method=\"post\">\
                 <input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
                 <button type=\"submit\">Unsubscribe</button></form>",
                encode_text(&from),
                encode_text(&email)
            ),
        ),
        Ok(UnsubscribeLink::Unknown) => page(
            StatusCode::NOT_FOUND,
            "Link not valid",
            "<p>This unsubscribe link is not valid. Use the link in the message you received.</p>",
        ),
        Ok(UnsubscribeLink::Expired) => page(
            StatusCode::GONE,
            "Link expired",
            "<p>This unsubscribe link has expired. Use the link in a newer message, or reply \
             to its sender.</p>",
        ),
        Err(error) => {
            tracing::warn!(%error, "unsubscribe link could not be followed");
            let mut r = page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again shortly",
                "<p>Your request could not be handled just now. Please try again in a moment.</p>",
            );
            r.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(REDIRECT_RETRY_AFTER_SECS),
            );
            r
        }
    }
}

/// `GET /u/{id}`: the confirmation page.
pub(super) async fn confirm(
    State(svc): State<Arc<LinksService>>,
    Path(id): Path<String>,
) -> Response {
    answer(svc.unsubscribe_link(&id).await, false)
}

/// `POST /u/{id}`: unsubscribes (the body is not needed and not read).
pub(super) async fn unsubscribe(
    State(svc): State<Arc<LinksService>>,
    Path(id): Path<String>,
) -> Response {
    answer(svc.unsubscribe(&id).await, true)
}
