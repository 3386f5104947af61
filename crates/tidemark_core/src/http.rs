//! HTTP pieces shared by every subsystem's routes.
//!
//! - [`ApiError`]: every 4xx/5xx answer is `{"error": {"code": "…", "message": "…"}}`.
//! - [`ApiJson`] (an object), [`ApiJsonArray`] and [`ApiQuery`]: body and query extractors
//!   whose rejections (bad JSON, wrong shape, too large, wrong content type, bad query) become
//!   [`ApiError`]s instead of axum's plain-text answers.
//! - [`body_limit`]: a router's request size limit, also refused early on `Content-Length`.
//! - [`ApiKeys`] + [`require_tenant`]: `Authorization: Bearer <key>` (or `Token <key>`) maps to
//!   one tenant, or a user token to one user of a tenant ([`Caller`]). Handlers take the
//!   [`Tenant`] extractor (API key only: a user token gets 403) or, on chat routes, the
//!   [`Caller`]. Tenants never see each other's data because every store call is keyed by the
//!   tenant name.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::store::{ErrorKind, StoreError};
use crate::user_token::{UserIdentity, UserTokens};

/// An API error: HTTP status, a stable machine-readable `code`, and a human `message`.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status of the answer.
    pub status: StatusCode,
    /// Stable code, e.g. `bad_request`, `not_found`, `forbidden`, `unavailable`.
    pub code: &'static str,
    /// What was wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with the given status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    /// 403 `forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    /// 401 `unauthorized`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    /// 503 `unavailable`: a store could not be reached; nothing was acknowledged.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
    /// 500 `internal`: e.g. corrupt data found while reading (never a partial answer).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The answer to a store failure of `kind` ([`crate::store`]); `message` says what failed:
    /// - [`ErrorKind::Unavailable`]: 503 `unavailable`, `Retry-After: 1`;
    /// - [`ErrorKind::Full`]: 503 `storage_full`, `Retry-After: 10`. A 503 and not WebDAV's 507
    ///   Insufficient Storage: 503 with `Retry-After` is what clients, proxies and load
    ///   balancers already retry on (elsewhere, or later), and the request may indeed be
    ///   repeated as it was once space is freed; nothing of it was stored;
    /// - [`ErrorKind::Corrupt`]: 500 `corrupt`, the message naming the file or what is damaged;
    /// - [`ErrorKind::Rejected`]: 500 `store_rejected` (the engine refused what Tidemark
    ///   asked: not the client's fault, and the same request fails again);
    /// - [`ErrorKind::Conflict`]: 409 `conflict`.
    pub fn store(kind: ErrorKind, message: impl Into<String>) -> Self {
        match kind {
            ErrorKind::Unavailable => Self::unavailable(message),
            ErrorKind::Full => Self::new(StatusCode::SERVICE_UNAVAILABLE, "storage_full", message),
            ErrorKind::Corrupt => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", message),
            ErrorKind::Rejected => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "store_rejected", message)
            }
            ErrorKind::Conflict => Self::new(StatusCode::CONFLICT, "conflict", message),
        }
    }
}

/// A store failure answers as [`ApiError::store`] says for its kind, with its message.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::store(e.kind(), e.to_string())
    }
}

/// Test support: asserts that a subsystem error `E` wraps a SQLite failure as a store failure
/// that keeps SQLite's error as its source, is retryable (`is_retryable`) exactly when that
/// failure's kind is, and answers over HTTP as the store failure would (full → 503
/// `storage_full`, busy → 503 `unavailable`, corrupt → 500 `corrupt`, a unique constraint →
/// 409 `conflict`, misuse → 500 `store_rejected`). With the `testing` feature only.
///
/// # Panics
/// On the first case that does not hold.
#[cfg(feature = "testing")]
pub fn assert_store_failures_pass_through<E>(is_retryable: impl Fn(&E) -> bool)
where
    E: From<rusqlite::Error> + Into<ApiError> + std::error::Error + 'static,
{
    use rusqlite::ffi;
    let sqlite = |code: i32| E::from(rusqlite::Error::SqliteFailure(ffi::Error::new(code), None));
    let full = sqlite(ffi::SQLITE_FULL);
    assert!(is_retryable(&full));
    let source = full
        .source()
        .and_then(|s| s.downcast_ref::<rusqlite::Error>());
    assert!(
        matches!(source, Some(rusqlite::Error::SqliteFailure(e, _)) if e.code == ffi::ErrorCode::DiskFull),
        "{source:?}"
    );
    for (code, status, api_code, retryable) in [
        (ffi::SQLITE_FULL, 503, "storage_full", true),
        (ffi::SQLITE_BUSY, 503, "unavailable", true),
        (ffi::SQLITE_CORRUPT, 500, "corrupt", false),
        (ffi::SQLITE_CONSTRAINT_UNIQUE, 409, "conflict", false),
        (ffi::SQLITE_MISUSE, 500, "store_rejected", false),
    ] {
        let e = sqlite(code);
        assert_eq!(is_retryable(&e), retryable, "{e}");
        let api: ApiError = e.into();
        assert_eq!(
            (api.status.as_u16(), api.code),
            (status, api_code),
            "{code}"
        );
    }
}

/// The JSON body of every 4xx/5xx answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody<'a> {
    /// What went wrong.
    pub error: ErrorDetail<'a>,
}

/// The inside of an [`ErrorBody`].
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail<'a> {
    /// Stable machine-readable code, e.g. `bad_request`, `unauthorized`, `not_found`,
    /// `forbidden`, `payload_too_large`, `unsupported_media_type`, `unavailable`.
    pub code: &'a str,
    /// What was wrong, for a person.
    pub message: &'a str,
}

/// The longest error message answered, in bytes; a longer one is cut at a char boundary and
/// ends in `…`. Messages quote what was wrong, and what was wrong may be a 60,000-byte header or
/// a 400,000-byte field name, which an answer should not repeat whole (uncut, a bad field name
/// could get an 800 KB answer).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 1024;

/// `text` as an error message quotes it: whole up to `max_bytes`, past that cut at a char
/// boundary and ended with `…`. Every answer's message goes through it with
/// [`MAX_ERROR_MESSAGE_BYTES`]; a message may quote a part of a request with a tighter bound.
pub fn quoted(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max_bytes {
        return text.into();
    }
    format!("{}…", &text[..text.floor_char_boundary(max_bytes)]).into()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            static FAILED: crate::throttle::Throttle =
                crate::throttle::Throttle::new(crate::throttle::LOG_EVERY);
            if let Some(left_out) = FAILED.allow() {
                tracing::warn!(status = %self.status, code = self.code, message = %self.message, left_out, "request failed (left_out: failed requests not logged since the last line)");
            }
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: &quoted(&self.message, MAX_ERROR_MESSAGE_BYTES),
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            let after = match self.code {
                "storage_full" => STORAGE_FULL_RETRY_AFTER_SECS,
                _ => UNAVAILABLE_RETRY_AFTER_SECS,
            };
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(after),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750 §3: a 401 names the scheme the client must use.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static(WWW_AUTHENTICATE_BEARER),
            );
        }
        response
    }
}

/// `WWW-Authenticate` of every 401 answer: a bearer credential (an API key, or on the chat
/// routes a user token) is needed.
pub const WWW_AUTHENTICATE_BEARER: &str = "Bearer realm=\"tidemark\"";

/// `Retry-After` (seconds) of every 503 `unavailable` answer: a store or broker is down for a
/// moment, and the request may be repeated as it was (sends with the same `client_msg_id`,
/// event batches whole). The redirector sets its own.
pub const UNAVAILABLE_RETRY_AFTER_SECS: &str = "1";

/// `Retry-After` (seconds) of every 503 `storage_full` answer: freeing disk space takes an
/// operator or a cleanup job, not a moment.
pub const STORAGE_FULL_RETRY_AFTER_SECS: &str = "10";

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "unprocessable_entity",
            _ => "bad_request",
        };
        let status = if status.is_client_error() {
            status
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError::new(status, code, r.body_text())
    }
}

/// A JSON object request body; any rejection becomes an [`ApiError`] with a JSON body.
///
/// The body must be an object: serde fills a struct from an array too, by position, so
/// without the check `["u1", "hi"]` would be taken for `{"sender": "u1", "body": "hi"}`
/// against the documented schema (422 `unprocessable_entity` instead). A body that is a list
/// is an [`ApiJsonArray`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(ApiJson(json_of_kind(req, state, '{', "an object").await?))
    }
}

/// A JSON array request body of `T` items; any rejection becomes an [`ApiError`] with a JSON
/// body, and a body that is not an array is refused (422), as [`ApiJson`] refuses one that is
/// not an object.
#[derive(Debug, Clone, Default)]
pub struct ApiJsonArray<T>(pub Vec<T>);

impl<T, S> FromRequest<S> for ApiJsonArray<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(ApiJsonArray(
            json_of_kind(req, state, '[', "an array").await?,
        ))
    }
}

/// The body as `T`, if it is JSON (content type, size and syntax checked by axum's extractor,
/// with its rejections) whose top-level value opens with `open` (`kind` names it in the error).
///
/// These bodies are read as sent: a `Content-Encoding` other than `identity` is refused (415),
/// rather than a gzip body failing as bad JSON and a plain one labelled gzip passing. Routes
/// that decode compressed bodies (the events ingest) use their own extractor.
async fn json_of_kind<T: DeserializeOwned, S: Send + Sync>(
    req: Request,
    state: &S,
    open: char,
    kind: &str,
) -> Result<T, ApiError> {
    // Every line of the header, and every coding in each (RFC 9110 §8.4: one list).
    let encodings = req.headers().get_all(axum::http::header::CONTENT_ENCODING);
    if let Some(coding) = encodings
        .iter()
        .flat_map(|line| line.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .find(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case(b"identity"))
    {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "Content-Encoding {:?} is not accepted here: send the body uncompressed",
                String::from_utf8_lossy(coding)
            ),
        ));
    }
    let Json(raw) = Json::<Box<serde_json::value::RawValue>>::from_request(req, state).await?;
    json_of_kind_raw(raw.get(), open, kind)
}

/// Decodes a JSON request body as the body extractors do once its content type and size are
/// checked: syntax (400), a key repeated in any object (400, [`crate::json`]), a top-level
/// value that does not open with `open` (422, `kind` names what it must be, e.g. "an object"),
/// then the shape of `T` (422 for a wrong field or type). Public so that the fuzz targets
/// decode bodies exactly as the routes do.
pub fn json_body_from_bytes<T: DeserializeOwned>(
    bytes: &[u8],
    open: char,
    kind: &str,
) -> Result<T, ApiError> {
    let Json(raw) = Json::<Box<serde_json::value::RawValue>>::from_bytes(bytes)?;
    json_of_kind_raw(raw.get(), open, kind)
}

/// The checks after the syntax: repeated keys, the top-level kind, then the shape of `T`.
fn json_of_kind_raw<T: DeserializeOwned>(raw: &str, open: char, kind: &str) -> Result<T, ApiError> {
    crate::json::check_no_duplicate_keys(raw).map_err(|e| {
        ApiError::bad_request(format!("Failed to parse the request body as JSON: {e}"))
    })?;
    if !raw.starts_with(open) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable_entity",
            format!("the JSON body must be {kind}"),
        ));
    }
    let Json(v) = Json::<T>::from_bytes(raw.as_bytes())?;
    Ok(v)
}

/// A query string; any rejection becomes a 400 [`ApiError`] with a JSON body.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(v) = axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map_err(|r| ApiError::bad_request(r.body_text()))?;
        Ok(ApiQuery(v))
    }
}

/// The empty query string of a route that takes no parameters: a request with any is
/// refused with 400 naming them, as routes with parameters refuse unknown ones, instead of
/// silently ignoring what the client meant (a misspelt route, a filter that does nothing).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoQuery;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.uri.query() {
            None | Some("") => Ok(NoQuery),
            Some(q) => {
                let names: Vec<String> = url::form_urlencoded::parse(q.as_bytes())
                    .map(|(k, _)| k.into_owned())
                    .collect();
                Err(ApiError::bad_request(format!(
                    "this route takes no query parameters; got: {}",
                    quoted(&names.join(", "), 200)
                )))
            }
        }
    }
}

/// The tenant an authenticated request acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

/// Who an authenticated request acts for ([`require_tenant`] puts it in the request's
/// extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The tenant's API key: the marketplace backend, which may name any of its users.
    Tenant(Tenant),
    /// A verified user token: one user of a tenant, on the chat routes only.
    User(Arc<UserIdentity>),
}

impl Caller {
    /// The tenant the request acts for.
    pub fn tenant(&self) -> &str {
        match self {
            Caller::Tenant(t) => &t.0,
            Caller::User(u) => &u.tenant,
        }
    }

    /// The user of a user token; `None` for the tenant key.
    pub fn user(&self) -> Option<&UserIdentity> {
        match self {
            Caller::User(u) => Some(u),
            Caller::Tenant(_) => None,
        }
    }

    /// Checks the user a request names (a `sender`, a `user`; `field` names it in the error)
    /// against the caller: the tenant key may name any user, a user token only its own.
    /// Errors: 403 `forbidden` naming both users.
    pub fn may_act_as(&self, named: &str, field: &str) -> Result<(), ApiError> {
        match self {
            Caller::User(u) if u.user != named => Err(ApiError::forbidden(format!(
                "this user token acts for user {:?}; {field} {:?} is another user",
                u.user,
                quoted(named, 128)
            ))),
            _ => Ok(()),
        }
    }

    /// Checks that the caller may open conversation `cid`: a user token limited to some
    /// conversations (`conversations` claim) may open only those. Membership is checked apart.
    /// Errors: 403 `forbidden`.
    pub fn may_open(&self, cid: &str) -> Result<(), ApiError> {
        match self {
            Caller::User(u) if !u.may_open(cid) => Err(ApiError::forbidden(
                "this user token is limited to its `conversations`, and this conversation is not one of them",
            )),
            _ => Ok(()),
        }
    }

    /// The request's caller as put there by [`require_tenant`]. Errors: 401 when there is none.
    pub fn of(extensions: &axum::http::Extensions) -> Result<&Caller, ApiError> {
        extensions
            .get::<Caller>()
            .ok_or_else(|| ApiError::unauthorized("missing API key"))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Caller::of(&parts.extensions).cloned()
    }
}

impl Tenant {
    /// The tenant of a request made with the tenant's API key. Errors: 401 without a caller;
    /// 403 for a user token, which reaches only the chat routes.
    pub fn of(extensions: &axum::http::Extensions) -> Result<Tenant, ApiError> {
        match Caller::of(extensions)? {
            Caller::Tenant(t) => Ok(t.clone()),
            Caller::User(_) => Err(ApiError::forbidden(
                "a user token reaches only the chat routes; this route needs the tenant's API key",
            )),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Tenant::of(&parts.extensions)
    }
}

/// API key → tenant name, and the tenants' user-token keys.
#[derive(Debug, Clone, Default)]
pub struct ApiKeys {
    by_key: HashMap<String, String>,
    user_tokens: UserTokens,
}

impl ApiKeys {
    /// Builds the map from `(tenant, key)` pairs.
    pub fn new<I: IntoIterator<Item = (String, String)>>(tenants: I) -> Self {
        Self {
            by_key: tenants.into_iter().map(|(t, k)| (k, t)).collect(),
            user_tokens: UserTokens::default(),
        }
    }

    /// Also accepts user tokens verified with these keys ([`crate::user_token`]).
    pub fn with_user_tokens(mut self, user_tokens: UserTokens) -> Self {
        self.user_tokens = user_tokens;
        self
    }

    /// The credential of an `Authorization` header value (`Bearer <credential>` or
    /// `Token <credential>`; the scheme is case-insensitive, RFC 9110 §11.1).
    fn credential(authorization: &str) -> Option<&str> {
        let (scheme, credential) = authorization.trim_start().split_once(' ')?;
        (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
            .then(|| credential.trim())
    }

    /// The tenant for an `Authorization` header value holding one of the API keys.
    pub fn tenant_for(&self, authorization: &str) -> Option<Tenant> {
        let key = Self::credential(authorization)?;
        self.by_key.get(key).map(|t| Tenant(t.clone()))
    }

    /// The caller of an `Authorization` header value: a tenant by its API key, else a user by
    /// a token when some tenant accepts them. Errors: 401 `unauthorized` saying why (unknown
    /// key; an expired, forged or malformed token, or one for a tenant without a key).
    pub fn caller_for(&self, authorization: &str) -> Result<Caller, ApiError> {
        if let Some(tenant) = self.tenant_for(authorization) {
            return Ok(Caller::Tenant(tenant));
        }
        match Self::credential(authorization) {
            Some(c) if !self.user_tokens.is_empty() && UserTokens::looks_like_token(c) => self
                .user_tokens
                .verify(c)
                .map(|u| Caller::User(Arc::new(u)))
                .map_err(|e| ApiError::unauthorized(e.to_string())),
            _ => Err(ApiError::unauthorized("unknown API key")),
        }
    }
}

/// Limits the request bodies of `router`'s routes to `bytes`: a body that turns out longer is
/// refused by the extractors ([`ApiJson`]: 413 `payload_too_large`), and a request whose
/// `Content-Length` already says more is refused with the same 413 before any of its body is
/// read, instead of after the client sent up to the limit or the server's body timeout
/// passed (a declared 100 MB and a silent client would hold a request for 60 s).
/// [`json_errors`] gives the early refusal its JSON body.
pub fn body_limit<S>(router: Router<S>, bytes: usize) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router
        .layer(DefaultBodyLimit::max(bytes))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(bytes))
}

/// Middleware: rejects requests without a valid API key or user token (401 JSON) and attaches
/// the [`Caller`].
pub async fn require_tenant(
    State(keys): State<Arc<ApiKeys>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| {
            ApiError::unauthorized("missing Authorization header (Bearer <key> or Token <key>)")
        })?
        .to_str()
        .map_err(|_| ApiError::unauthorized("the Authorization header is not visible ASCII"))?;
    let caller = keys.caller_for(header)?;
    req.extensions_mut().insert(caller);
    Ok(next.run(req).await)
}

/// Middleware for the whole router: an error answer that is not JSON yet — produced by the
/// framework before a handler runs (405 wrong method, 400 undecodable path segment, 413 …) —
/// is replaced by the same status with the `{"error": {...}}` body, so every 4xx/5xx of the
/// API is JSON. A page for people (`text/html`, which only handlers of public pages answer,
/// such as the unsubscribe page) is left as it is.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let kept = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if !(status.is_client_error() || status.is_server_error()) || kept {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let code = match status {
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "unprocessable_entity",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut out = ApiError::new(status, code, message).into_response();
    if let Some(allow) = parts.headers.get(axum::http::header::ALLOW) {
        out.headers_mut()
            .insert(axum::http::header::ALLOW, allow.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_tenants() {
        let keys = ApiKeys::new([("demo".to_owned(), "dev-key".to_owned())]);
        assert_eq!(
            keys.tenant_for("Bearer dev-key"),
            Some(Tenant("demo".into()))
        );
        assert_eq!(
            keys.tenant_for("Token dev-key"),
            Some(Tenant("demo".into()))
        );
        assert_eq!(keys.tenant_for("Bearer other"), None);
        assert_eq!(
            keys.tenant_for("bearer dev-key"),
            Some(Tenant("demo".into())),
            "the scheme is case-insensitive"
        );
        assert_eq!(keys.tenant_for("Basic dev-key"), None);
        assert_eq!(keys.tenant_for("dev-key"), None);
    }

    #[test]
    fn a_503_says_when_to_retry_and_other_errors_do_not() {
        let r = ApiError::unavailable("influxdb is down").into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[axum::http::header::RETRY_AFTER], "1");
        let r = ApiError::internal("corrupt").into_response();
        assert!(r.headers().get(axum::http::header::RETRY_AFTER).is_none());
    }

    #[tokio::test]
    async fn store_failures_answer_by_kind() {
        let cases = [
            (ErrorKind::Unavailable, 503, "unavailable", Some("1")),
            (ErrorKind::Full, 503, "storage_full", Some("10")),
            (ErrorKind::Corrupt, 500, "corrupt", None),
            (ErrorKind::Rejected, 500, "store_rejected", None),
            (ErrorKind::Conflict, 409, "conflict", None),
        ];
        for (kind, status, code, retry_after) in cases {
            let e =
                StoreError::new(kind, "sqlite", "boom").in_file(std::path::Path::new("/d/x.db"));
            let r = ApiError::from(e).into_response();
            assert_eq!(r.status().as_u16(), status, "{kind}");
            assert_eq!(
                r.headers()
                    .get(axum::http::header::RETRY_AFTER)
                    .map(|v| v.to_str().unwrap()),
                retry_after,
                "{kind}"
            );
            let body = axum::body::to_bytes(r.into_body(), 4096).await.unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                body,
                serde_json::json!({"error": {"code": code, "message": "sqlite /d/x.db: boom"}})
            );
        }
    }
}
