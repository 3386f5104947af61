//! `GET /v1/events/raw-window`: the raw-window report ([`crate::raw_window`]).

use std::sync::Arc;

use axum::extract::State;
use tidemark_core::http::{ApiError, NoQuery, Tenant};

use super::{AnalyticsHttp, store_error};
use crate::raw_window::{self, RawWindowReport};

/// The raw-window report (seed 002: check whether anyone needs more than 7 raw days, and what
/// 30 would cost): the raw days held with their events and bytes, how often a day at least
/// `k` days old was needed (`k` = 1 to 30: late events stored, events refused as too old,
/// days rolled up again), and the bytes a window of `k` days would take at the mean of the
/// closed days held. Ages are in whole days of `events.time_zone` (today's date minus the day's). The route takes
/// no query parameters.
#[utoipa::path(
    get,
    path = "/v1/events/raw-window",
    tag = "events",
    responses((status = 200, description = "The report", body = RawWindowReport))
)]
pub(super) async fn raw_window(
    State(s): State<Arc<AnalyticsHttp>>,
    _t: Tenant,
    _q: NoQuery,
) -> Result<axum::Json<RawWindowReport>, ApiError> {
    // This node's latest figures first, so the answer includes them.
    if let Some(u) = &s.usage {
        u.flush().await.map_err(store_error)?;
    }
    let figures = s
        .rollups
        .rollups()
        .kind_usage()
        .await
        .map_err(store_error)?;
    let raw = s.rollups.raw();
    let days = raw.days().await.map_err(store_error)?;
    let bytes = raw.day_bytes().await.map_err(store_error)?;
    Ok(axum::Json(raw_window::report(
        raw.calendar(),
        &days,
        &bytes,
        &figures.needs,
        s.raw_retention.as_secs().div_ceil(86_400),
        s.rollups.clock().now_ms(),
    )))
}
