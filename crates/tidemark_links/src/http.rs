//! Links' HTTP routes.
//!
//! Under `/v1` (API key):
//! | route | answer |
//! |---|---|
//! | `POST /v1/mailings` `{"subject","html","from"}` | 201 `{"mailing_id"}` |
//! | `POST /v1/mailings/{mid}/render` `{"recipients": [{"email","fields"}]}` | 200 `{"messages": [{"email","subject","html"}], "skipped": [{"email","reason"}]}`; NDJSON with `Accept: application/x-ndjson` ([`crate::ndjson`]) |
//! | `POST /v1/mailings/{mid}/send` (same body) | 202 `{"queued", "skipped"}` |
//! | `GET /v1/mailings/{mid}/stats` | 200 campaign statistics ([`crate::stats::MailingStats`]) |
//! | `POST /v1/suppressions` `{"emails": [..]}` | 200 `{"suppressed": n}` |
//! | `DELETE /v1/suppressions/{email}` | 204 (404 if it was not listed) |
//!
//! Public: `GET|HEAD /c/{id}`, `GET|HEAD /o/{id}`, `GET /expired`, and the one-click
//! unsubscribe `GET|POST /u/{id}` (pages in `http/unsubscribe.rs`).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::{Deserialize, Serialize};
use tidemark_core::http::{ApiError, ApiJson, ErrorBody, NoQuery, Tenant, body_limit};
use tidemark_core::openapi::JsonBodyErrors;
use utoipa::ToSchema;

use crate::builder::{Recipient, Skipped};
use crate::ndjson;
use crate::redirect::PIXEL_GIF;
use crate::service::{Hit, LinksService, Route};
use crate::stats::MailingStats;

mod unsubscribe;

/// Largest request body of the mailing routes (10,000 recipients with fields).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// The OpenAPI description of the `/v1` links routes (the server merges it into
/// `/v1/openapi.json`).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(create_mailing, render, send, stats, suppress, unsuppress),
    tags((name = "links", description = "Mailings, tracked links and the suppression list"))
)]
pub struct LinksApi;

/// The authenticated `/v1` routes.
pub fn api_router(svc: LinksService) -> Router {
    let routes = Router::new()
        .route("/v1/mailings", post(create_mailing))
        .route("/v1/mailings/{mid}/render", post(render))
        .route("/v1/mailings/{mid}/send", post(send))
        .route("/v1/mailings/{mid}/stats", get(stats))
        .route("/v1/suppressions", post(suppress))
        .route("/v1/suppressions/{email}", delete(unsuppress));
    // Shared: one reference count per request, not a copy of the service's config, codec and
    // metrics handles (axum clones the state for every request).
    body_limit(routes, MAX_REQUEST_BYTES).with_state(Arc::new(svc))
}

/// The public tracking routes.
pub fn public_router(svc: LinksService) -> Router {
    Router::new()
        .route("/c/{id}", get(click))
        .route("/o/{id}", get(open))
        .route("/expired", get(expired))
        .route(
            "/u/{id}",
            get(unsubscribe::confirm).post(unsubscribe::unsubscribe),
        )
        // Shared, as in `api_router`: the redirector's hot path clones it per request.
        .with_state(Arc::new(svc))
}

/// A new mailing: a template rendered per recipient.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct NewMailing {
    /// Subject template (non-blank).
    #[schema(min_length = 1)]
    subject: String,
    /// HTML template (non-blank, at most `links.max_template_bytes`); its links are rewritten
    /// to tracked `/c/` links and an open pixel is added when rendered.
    #[schema(min_length = 1)]
    html: String,
    /// Sender address.
    #[schema(format = Email)]
    from: String,
}

/// A created mailing.
#[derive(Debug, Serialize, ToSchema)]
struct MailingCreated {
    /// The new mailing's id.
    mailing_id: String,
}

/// Creates a mailing from a subject and an HTML template.
#[utoipa::path(
    post,
    path = "/v1/mailings",
    tag = "links",
    request_body = NewMailing,
    responses(
        (status = 201, description = "Created", body = MailingCreated),
        JsonBodyErrors,
    )
)]
async fn create_mailing(
    State(svc): State<Arc<LinksService>>,
    _: NoQuery,
    tenant: Tenant,
    ApiJson(m): ApiJson<NewMailing>,
) -> Result<Response, ApiError> {
    let mailing_id = svc
        .create_mailing(&tenant.0, &m.subject, &m.html, &m.from)
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(MailingCreated { mailing_id }),
    )
        .into_response())
}

/// Who a mailing is rendered for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct Recipients {
    /// 1 to `links.max_recipients` recipients.
    #[schema(min_items = 1)]
    recipients: Vec<Recipient>,
}

/// A mailing rendered for its recipients.
#[derive(Debug, Serialize, ToSchema)]
struct Rendered {
    /// One message per recipient that gets one, in recipient order.
    messages: Vec<crate::builder::BuiltMessage>,
    /// Recipients that get none (suppressed, a missing merge field …), in recipient order.
    skipped: Vec<Skipped>,
}

/// Renders a mailing for recipients and stores their tracked links, without sending.
#[utoipa::path(
    post,
    path = "/v1/mailings/{mid}/render",
    tag = "links",
    params(("mid" = String, Path, description = "Mailing id")),
    request_body = Recipients,
    responses(
        (status = 200, description = "Rendered; every link record is stored. With `Accept: application/x-ndjson` the answer streams, a part of the recipients at a time: one object per line, `{\"message\": …}`, `{\"skipped\": …}`, and last `{\"done\": {\"messages\", \"skipped\"}}` or `{\"error\": {\"code\", \"message\"}}`", content(
            (Rendered = "application/json"),
            (String = "application/x-ndjson"),
        )),
        (status = 404, description = "No such mailing (`not_found`)", body = ErrorBody),
        JsonBodyErrors,
    )
)]
async fn render(
    State(svc): State<Arc<LinksService>>,
    _: NoQuery,
    tenant: Tenant,
    Path(mid): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Recipients>,
) -> Result<Response, ApiError> {
    if ndjson::wants_ndjson(&headers) {
        return Ok(
            ndjson::render(LinksService::clone(&svc), tenant.0, &mid, body.recipients).await?,
        );
    }
    let (_, build) = svc.render(&tenant.0, &mid, body.recipients).await?;
    Ok(axum::Json(Rendered {
        messages: build.messages,
        skipped: build.skipped,
    })
    .into_response())
}

/// Messages handed to the sending pool.
#[derive(Debug, Serialize, ToSchema)]
struct Queued {
    /// Messages queued for sending.
    queued: usize,
    /// Recipients that get none, and why.
    skipped: Vec<Skipped>,
}

/// Renders a mailing, stores its tracked links and queues the messages for sending.
#[utoipa::path(
    post,
    path = "/v1/mailings/{mid}/send",
    tag = "links",
    params(("mid" = String, Path, description = "Mailing id")),
    request_body = Recipients,
    responses(
        (status = 202, description = "Queued", body = Queued),
        (status = 404, description = "No such mailing (`not_found`)", body = ErrorBody),
        JsonBodyErrors,
    )
)]
async fn send(
    State(svc): State<Arc<LinksService>>,
    _: NoQuery,
    tenant: Tenant,
    Path(mid): Path<String>,
    ApiJson(body): ApiJson<Recipients>,
) -> Result<Response, ApiError> {
    let out = svc.send(&tenant.0, &mid, body.recipients).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(Queued {
            queued: out.queued,
            skipped: out.skipped,
        }),
    )
        .into_response())
}

/// A mailing's campaign statistics: recipients rendered and skipped, messages handed,
/// delivered and failed, opens and clicks (total and unique recipients, machine opens and
/// bots apart), per-link figures and an hourly timeline, from the mailing's summary (kept as
/// hits arrive; it outlives the link records and the raw events).
#[utoipa::path(
    get,
    path = "/v1/mailings/{mid}/stats",
    tag = "links",
    params(("mid" = String, Path, description = "The mailing id")),
    responses(
        (status = 200, description = "The statistics", body = MailingStats),
        (status = 404, description = "No such mailing (`not_found`)", body = ErrorBody),
    )
)]
async fn stats(
    State(svc): State<Arc<LinksService>>,
    _: NoQuery,
    tenant: Tenant,
    Path(mid): Path<String>,
) -> Result<Response, ApiError> {
    Ok(axum::Json(svc.stats(&tenant.0, &mid).await?).into_response())
}

/// An email address.
#[derive(Debug, ToSchema)]
#[schema(format = Email)]
#[allow(dead_code)] // the schema of the addresses in `Emails::emails`, never built
struct EmailAddress(String);

/// Addresses for the suppression list.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct Emails {
    /// One or more email addresses (case and surrounding blanks do not matter).
    #[schema(min_items = 1, value_type = Vec<EmailAddress>)]
    emails: Vec<String>,
}

/// How many addresses were put on the suppression list.
#[derive(Debug, Serialize, ToSchema)]
struct Suppressed {
    /// Addresses of the request, now suppressed.
    suppressed: usize,
}

/// Adds addresses to the suppression list: no mailing renders for them any more.
#[utoipa::path(
    post,
    path = "/v1/suppressions",
    tag = "links",
    request_body = Emails,
    responses(
        (status = 200, description = "Suppressed", body = Suppressed),
        JsonBodyErrors,
    )
)]
async fn suppress(
    State(svc): State<Arc<LinksService>>,
    _: NoQuery,
    tenant: Tenant,
    ApiJson(body): ApiJson<Emails>,
) -> Result<Response, ApiError> {
    let suppressed = svc.suppress(&tenant.0, &body.emails).await?;
    Ok(axum::Json(Suppressed { suppressed }).into_response())
}

/// Removes an address from the suppression list.
#[utoipa::path(
    delete,
    path = "/v1/suppressions/{email}",
    tag = "links",
    params(("email" = String, Path, description = "The address")),
    responses(
        (status = 204, description = "Removed"),
        (status = 404, description = "The address was not on the list (`not_found`)", body = ErrorBody),
    )
)]
async fn unsuppress(
    State(svc): State<Arc<LinksService>>,
    _: NoQuery,
    tenant: Tenant,
    Path(email): Path<String>,
) -> Result<StatusCode, ApiError> {
    if svc.unsuppress(&tenant.0, &email).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "{email} is not on the suppression list"
        )))
    }
}

fn user_agent(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
}

fn answer(hit: Hit) -> Response {
    let no_store = [
        (
            header::CACHE_CONTROL,
            "no-cache, no-store, must-revalidate, private, max-age=0",
        ),
        (header::PRAGMA, "no-cache"),
        (header::EXPIRES, "0"),
    ];
    match hit {
        Hit::Redirect(url) | Hit::Expired(url) => match HeaderValue::from_bytes(url.as_bytes()) {
            Ok(location) => {
                let mut r = (StatusCode::FOUND, no_store).into_response();
                r.headers_mut().insert(header::LOCATION, location);
                r
            }
            Err(_) => {
                ApiError::internal("stored URL cannot be sent as a Location header").into_response()
            }
        },
        Hit::Pixel => (
            StatusCode::OK,
            no_store,
            [(header::CONTENT_TYPE, "image/gif")],
            Body::from(PIXEL_GIF.as_slice()),
        )
            .into_response(),
        Hit::NotFound => ApiError::not_found("unknown tracking id").into_response(),
    }
}

async fn track(
    svc: &LinksService,
    route: Route,
    method: &Method,
    id: &str,
    headers: &HeaderMap,
) -> Response {
    let head = *method == Method::HEAD;
    match svc.hit(route, id, head, user_agent(headers)).await {
        Ok(hit) => answer(hit),
        Err(e) => {
            let retry = e.is_retryable();
            let mut r = ApiError::from(e).into_response();
            if retry {
                // The link store is down: never a wrong redirect; tell the client when to retry.
                r.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from_static(REDIRECT_RETRY_AFTER_SECS),
                );
            }
            r
        }
    }
}

/// `Retry-After` (seconds) of a redirector 503 when the link store cannot be read.
pub const REDIRECT_RETRY_AFTER_SECS: &str = "5";

async fn click(
    State(svc): State<Arc<LinksService>>,
    method: Method,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    track(&svc, Route::Click, &method, &id, &headers).await
}

async fn open(
    State(svc): State<Arc<LinksService>>,
    method: Method,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    track(&svc, Route::Open, &method, &id, &headers).await
}

async fn expired() -> Html<&'static str> {
    Html("<!doctype html><title>Link expired</title><p>This link has expired.</p>\n")
}
