//! Limits on a request's head, answered in the JSON error shape: a URI longer than
//! [`MAX_URI_BYTES`] is 414 `uri_too_long`, more than [`MAX_HEADERS`] headers 431
//! `request_header_fields_too_large`. The HTTP layer parses heads up to larger bounds
//! ([`PARSER_MAX_HEADERS`] headers, a 64 KiB URI, about 400 KiB of head) so that the common
//! oversize requests reach this middleware; a head beyond those is cut by the HTTP layer
//! itself, whose 414 / 431 has no body (README, "Tour").

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tidemark_core::http::ApiError;

/// Longest URI (path and query, bytes) a request may have.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Most headers a request may have.
pub const MAX_HEADERS: usize = 100;

/// Headers the HTTP parser takes before it cuts a request with its own bodiless 431.
pub const PARSER_MAX_HEADERS: usize = 1000;

/// Middleware: refuses a request whose URI or header count is over the limits.
pub async fn request_limits(req: Request, next: Next) -> Response {
    let uri = req.uri();
    let uri_bytes = uri.path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_bytes > MAX_URI_BYTES {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the URI is {uri_bytes} bytes long; at most {MAX_URI_BYTES}"),
        )
        .into_response();
    }
    let headers = req.headers().len();
    if headers > MAX_HEADERS {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request_header_fields_too_large",
            format!("the request has {headers} headers; at most {MAX_HEADERS}"),
        )
        .into_response();
    }
    next.run(req).await
}
