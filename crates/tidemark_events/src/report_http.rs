//! HTTP routes of the summary tier (all behind the API key; listings are per tenant).
//!
//! | route | answer |
//! |---|---|
//! | `PUT /v1/listings/{lid}` `{"account_id": n}` | 204 |
//! | `POST /v1/listings` `[{"listing_id": n, "account_id": m}, …]` | 200 `{"upserted": n}` (all or nothing) |
//! | `GET /v1/accounts/{aid}/report?from=YYYY-MM-DD&to=YYYY-MM-DD[&kind=…]` | 200 `{"account_id", "from", "to", "rows": [{"listing_id", "kind", "total", "uniques_daily_sum"}]}` |
//! | `POST /v1/rollups/{day}` | 200 the rollup's outcome; 409 `raw_gone` when the day's raw events are gone |
//!
//! Bad ids, dates, a range with `from > to` or longer than [`MAX_REPORT_DAYS`], and a kind
//! outside the configured set are 400 with a JSON error, and change nothing.

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use serde::{Deserialize, Serialize};
use tidemark_core::day::UtcDay;
use tidemark_core::http::{ApiError, ApiJson, ApiQuery, Tenant};

use crate::rollup::{RollupError, RollupOutcome, RollupService};
use crate::rollups::ReportRow;
use crate::schema::Schema;

/// Longest report period, in days (a leap year).
pub const MAX_REPORT_DAYS: i32 = 366;
/// Most listings in one bulk `POST /v1/listings`.
pub const MAX_LISTINGS_PER_REQUEST: usize = 100_000;

/// State of the summary-tier routes.
#[derive(Debug, Clone)]
pub struct AnalyticsHttp {
    /// Rollups and the summary tier.
    pub rollups: RollupService,
    /// The schema (for the closed set of kinds a report may filter on).
    pub schema: Schema,
}

/// The listing, report and rollup routes.
pub fn analytics_router(state: AnalyticsHttp) -> Router {
    Router::new()
        .route("/v1/listings/{lid}", put(put_listing))
        .route("/v1/listings", post(post_listings))
        .route("/v1/accounts/{aid}/report", get(report))
        .route("/v1/rollups/{day}", post(roll_up))
        .layer(DefaultBodyLimit::max(16 * 1024 * 1024))
        .with_state(state)
}

impl From<RollupError> for ApiError {
    fn from(e: RollupError) -> Self {
        match e {
            RollupError::RawGone { .. } => {
                ApiError::new(StatusCode::CONFLICT, "raw_gone", e.to_string())
            }
            RollupError::Raw(_) | RollupError::Store(_) => ApiError::unavailable(e.to_string()),
        }
    }
}

fn id(what: &str, s: &str) -> Result<i64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("{what} must be an integer, got {s:?}")))
}

fn day(what: &str, s: &str) -> Result<UtcDay, ApiError> {
    UtcDay::parse(s).map_err(|e| ApiError::bad_request(format!("`{what}`: {e}")))
}

fn store_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!("rollup store: {e}"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountBody {
    account_id: i64,
}

async fn put_listing(
    State(s): State<AnalyticsHttp>,
    Tenant(tenant): Tenant,
    Path(lid): Path<String>,
    ApiJson(body): ApiJson<AccountBody>,
) -> Result<StatusCode, ApiError> {
    let lid = id("listing id", &lid)?;
    s.rollups
        .rollups()
        .put_listings(&tenant, &[(lid, body.account_id)])
        .await
        .map_err(store_error)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListingBody {
    listing_id: i64,
    account_id: i64,
}

async fn post_listings(
    State(s): State<AnalyticsHttp>,
    Tenant(tenant): Tenant,
    ApiJson(items): ApiJson<Vec<ListingBody>>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    if items.len() > MAX_LISTINGS_PER_REQUEST {
        return Err(ApiError::bad_request(format!(
            "{} listings in one request; at most {MAX_LISTINGS_PER_REQUEST}",
            items.len()
        )));
    }
    let pairs: Vec<(i64, i64)> = items.iter().map(|i| (i.listing_id, i.account_id)).collect();
    let n = s
        .rollups
        .rollups()
        .put_listings(&tenant, &pairs)
        .await
        .map_err(store_error)?;
    Ok(axum::Json(serde_json::json!({ "upserted": n })))
}

#[derive(Debug, Deserialize)]
struct ReportParams {
    from: Option<String>,
    to: Option<String>,
    kind: Option<String>,
}

#[derive(Debug, Serialize)]
struct ReportBody {
    account_id: i64,
    from: String,
    to: String,
    rows: Vec<ReportRow>,
}

async fn report(
    State(s): State<AnalyticsHttp>,
    Tenant(tenant): Tenant,
    Path(aid): Path<String>,
    ApiQuery(q): ApiQuery<ReportParams>,
) -> Result<axum::Json<ReportBody>, ApiError> {
    let account_id = id("account id", &aid)?;
    let from = q
        .from
        .ok_or_else(|| ApiError::bad_request("missing `from` (YYYY-MM-DD)"))?;
    let to =
        q.to.ok_or_else(|| ApiError::bad_request("missing `to` (YYYY-MM-DD)"))?;
    let (from, to) = (day("from", &from)?, day("to", &to)?);
    if from > to {
        return Err(ApiError::bad_request(format!(
            "`from` {from} is after `to` {to}"
        )));
    }
    let days = to.0 - from.0 + 1;
    if days > MAX_REPORT_DAYS {
        return Err(ApiError::bad_request(format!(
            "the period {from}..{to} spans {days} days; at most {MAX_REPORT_DAYS}"
        )));
    }
    if let Some(kind) = &q.kind {
        s.schema.check_kind(kind).map_err(ApiError::bad_request)?;
    }
    let rows = s
        .rollups
        .rollups()
        .report(&tenant, account_id, from, to, q.kind.as_deref())
        .await
        .map_err(store_error)?;
    Ok(axum::Json(ReportBody {
        account_id,
        from: from.to_string(),
        to: to.to_string(),
        rows,
    }))
}

async fn roll_up(
    State(s): State<AnalyticsHttp>,
    _t: Tenant,
    Path(d): Path<String>,
) -> Result<axum::Json<RollupOutcome>, ApiError> {
    let d = day("day", &d)?;
    Ok(axum::Json(s.rollups.roll_up(d).await?))
}
