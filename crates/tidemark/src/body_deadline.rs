//! A deadline on reading a request body, whole: a client must finish its body within
//! `body_read_timeout` of the request's arrival, however it trickles it. (`tower_http`'s
//! `RequestBodyTimeout` bounds the wait for each frame, so one byte a second keeps such a
//! request, and its connection, open for good.) A request that misses it is answered 408
//! `request_timeout` and its connection closed (its body was not read to the end).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use hyper::StatusCode;
use tidemark_core::http::ApiError;

/// The request body, cut off at its deadline.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// Set when the deadline cut the body (the middleware then answers 408).
    expired: Arc<AtomicBool>,
    limit: Duration,
}

/// The error a body cut at its deadline ends with.
#[derive(Debug)]
struct BodyDeadlineExpired(Duration);

impl std::fmt::Display for BodyDeadlineExpired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {}",
            humantime::format_duration(self.0)
        )
    }
}

impl std::error::Error for BodyDeadlineExpired {}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::SeqCst);
            return Poll::Ready(Some(Err(Box::new(BodyDeadlineExpired(self.limit)))));
        }
        Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(axum::BoxError::from)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware (`axum::middleware::from_fn_with_state` with the deadline): wraps the request's
/// body in its deadline, and answers 408 `request_timeout` when the handler's read of the body
/// was cut by it, whatever the handler made of the error.
pub async fn body_deadline(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let expired = Arc::new(AtomicBool::new(false));
    let (parts, inner) = req.into_parts();
    let body = Body::new(DeadlineBody {
        inner,
        deadline: Box::pin(tokio::time::sleep(limit)),
        expired: Arc::clone(&expired),
        limit,
    });
    let response = next.run(Request::from_parts(parts, body)).await;
    if expired.load(Ordering::SeqCst) {
        let message = BodyDeadlineExpired(limit).to_string();
        let mut response =
            ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", message).into_response();
        // The rest of the body is not read: the connection cannot carry another request.
        response.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        return response;
    }
    response
}
