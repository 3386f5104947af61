//! `tidemark_http_responses_total{method, route, status}`: every answer the server gives,
//! counted by its route's template (`/v1/conversations/{cid}/messages`, not the concrete path,
//! so the series stay few) and status. Before it, a SEND that failed was visible only as
//! `send_seconds_count − sends − duplicates`, and a 4xx nowhere (issue 2, operator trial).

use axum::extract::{MatchedPath, Request, State};
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

/// Middleware: counts the answer of every request. A request that matched no route counts as
/// route `unmatched`.
pub async fn count_responses(
    State(counter): State<IntCounterVec>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(req).await;
    counter
        .with_label_values(&[method.as_str(), &route, response.status().as_str()])
        .inc();
    response
}
