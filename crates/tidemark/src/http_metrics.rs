//! `tidemark_http_responses_total{method, route, status}`: every answer the server gives,
//! counted by its route's template (`/v1/conversations/{cid}/messages`, not the concrete path,
//! so the series stay few) and status. Without it a failed SEND would show only as
//! `send_seconds_count − sends − duplicates`, and a 4xx nowhere.

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{IntCounterVec, Opts, Registry};

/// The counter, registered in `registry`.
///
/// # Errors
/// Prometheus', if a metric of the same name is registered already.
pub fn register(registry: &Registry) -> prometheus::Result<IntCounterVec> {
    let counter = IntCounterVec::new(
        Opts::new(
            "tidemark_http_responses_total",
            "HTTP answers by method, route template and status",
        ),
        &["method", "route", "status"],
    )?;
    registry.register(Box::new(counter.clone()))?;
    Ok(counter)
}

/// The `method` label: one of HTTP's standard methods, else `other`, so that a client cannot
/// make a series per made-up method (`-X M12345…`, `-X M12346…`, …).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// Middleware: counts the answer of every request. A request that matched no route counts as
/// route `unmatched`. (hyper's own answers to requests it cannot parse never reach it.)
pub async fn count_responses(
    State(counter): State<IntCounterVec>,
    req: Request,
    next: Next,
) -> Response {
    let method = method_label(req.method());
    // A clone of the matched path shares its text (no copy per request).
    let route = req.extensions().get::<MatchedPath>().cloned();
    let response = next.run(req).await;
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    counter
        .with_label_values(&[method, route, response.status().as_str()])
        .inc();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_methods_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        let made_up = Method::from_bytes(b"M1234567").unwrap();
        assert_eq!(method_label(&made_up), "other");
    }
}
