//! HTTP routes of the summary tier (all behind the API key; listings are per tenant).
//!
//! | route | answer |
//! |---|---|
//! | `PUT /v1/listings/{lid}` `{"account_id": n}` | 204 |
//! | `POST /v1/listings` `[{"listing_id": n, "account_id": m}, …]` | 200 `{"upserted": n}` (all or nothing) |
//! | `GET /v1/accounts/{aid}/report?from=YYYY-MM-DD&to=YYYY-MM-DD[&kind=…][&format=csv][&uniques_period=true]` | 200 `{"account_id", "from", "to", "rows": [{"listing_id", "kind", "total", "uniques_daily_sum"[, "uniques_period"]}]}`, or those rows as a streamed CSV download |
//! | `GET /v1/accounts/{aid}/months?from=YYYY-MM&to=YYYY-MM[&kind=…][&format=csv]` | 200 streamed `{"account_id", "from", "to", "rows": [{"listing_id", "month", "kind", "total", "uniques_daily_sum"}]}`, or CSV: the month sums, for invoices (`report_http/export.rs`) |
//! | `GET /v1/events/kinds?stale_days=N` | 200 the event-kind audit ([`crate::usage`]) |
//! | `GET /v1/events/raw-window` | 200 the raw-window report ([`crate::raw_window`], `report_http/raw_window.rs`) |
//! | `POST /v1/rollups/{day}` | 200 the rollup's outcome; 404 `no_events` for a day without any event (e.g. in the future); 409 `raw_gone` when the day's raw events are gone |
//!
//! Bad ids, dates, a range with `from > to` or longer than [`MAX_REPORT_DAYS`] (months:
//! [`MAX_EXPORT_MONTHS`]), a kind outside the configured set and a format other than `json`
//! or `csv` are 400 with a JSON error, and change nothing.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::{Deserialize, Serialize};
use tidemark_core::day::Day;
use tidemark_core::http::{
    ApiError, ApiJson, ApiJsonArray, ApiQuery, ErrorBody, NoQuery, Tenant, body_limit,
};
use tidemark_core::openapi::JsonBodyErrors;
use tidemark_core::store::StoreError;
use utoipa::{IntoParams, ToSchema};

use crate::rollup::{RollupError, RollupOutcome, RollupService};
use crate::rollups::{ALL_LISTINGS, MonthRow, ReportRow, RollupStore, with_period_uniques};
use crate::schema::Schema;
use crate::usage::{KindUsage, KindsAudit};

/// Longest report period, in days (a leap year).
pub const MAX_REPORT_DAYS: i32 = 366;
/// Longest period of the month export, in months (ten years).
pub const MAX_EXPORT_MONTHS: i32 = 120;

mod export;
mod raw_window;

use export::{Export, Format};
/// Most listings in one bulk `POST /v1/listings`.
pub const MAX_LISTINGS_PER_REQUEST: usize = 100_000;

/// State of the summary-tier routes.
#[derive(Debug, Clone)]
pub struct AnalyticsHttp {
    /// Rollups and the summary tier.
    pub rollups: RollupService,
    /// The schema (for the closed set of kinds a report may filter on).
    pub schema: Schema,
    /// The event-kind audit's usage: reports and exports note the kinds they read.
    pub usage: Option<KindUsage>,
    /// `events.raw_retention`: the raw window the audit shows days of.
    pub raw_retention: std::time::Duration,
    /// `events.kind_audit_days`: the audit's default `stale_days`.
    pub kind_audit_days: u32,
}

impl AnalyticsHttp {
    /// Notes that `by` read `kinds` now.
    fn note_read<'a>(&self, kinds: impl IntoIterator<Item = &'a str>, by: &str) {
        if let Some(u) = &self.usage {
            u.read(kinds, by, self.rollups.clock().now_ms());
        }
    }
}

/// The OpenAPI description of the listing, report and rollup routes.
#[derive(Debug, utoipa::OpenApi)]
#[openapi(paths(
    put_listing,
    post_listings,
    report,
    months,
    roll_up,
    kinds,
    raw_window::raw_window
))]
pub(crate) struct AnalyticsApi;

/// The listing, report and rollup routes.
pub fn analytics_router(state: AnalyticsHttp) -> Router {
    let routes = Router::new()
        .route("/v1/listings/{lid}", put(put_listing))
        .route("/v1/listings", post(post_listings))
        .route("/v1/accounts/{aid}/report", get(report))
        .route("/v1/accounts/{aid}/months", get(months))
        .route("/v1/events/kinds", get(kinds))
        .route("/v1/events/raw-window", get(raw_window::raw_window))
        .route("/v1/rollups/{day}", post(roll_up));
    body_limit(routes, 16 * 1024 * 1024).with_state(Arc::new(state))
}

impl From<RollupError> for ApiError {
    fn from(e: RollupError) -> Self {
        match e {
            RollupError::RawGone { .. } => {
                ApiError::new(StatusCode::CONFLICT, "raw_gone", e.to_string())
            }
            RollupError::NoEvents { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "no_events", e.to_string())
            }
            RollupError::Raw(ref s) | RollupError::Store(ref s) => {
                ApiError::store(s.kind(), e.to_string())
            }
        }
    }
}

fn id(what: &str, s: &str) -> Result<i64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("{what} must be an integer, got {s:?}")))
}

/// Listing and account ids are non-negative, as ingest requires of an event's `listing_id`.
fn non_negative(what: &str, v: i64) -> Result<i64, ApiError> {
    if v < 0 {
        return Err(ApiError::bad_request(format!(
            "{what} must be non-negative, got {v}"
        )));
    }
    Ok(v)
}

fn day(what: &str, s: &str) -> Result<Day, ApiError> {
    Day::parse(s).map_err(|e| ApiError::bad_request(format!("`{what}`: {e}")))
}

fn store_error(e: StoreError) -> ApiError {
    ApiError::store(e.kind(), format!("rollup store: {e}"))
}

/// The account a listing belongs to.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct AccountBody {
    /// The owning account.
    #[schema(minimum = 0)]
    account_id: i64,
}

/// Maps a listing to its account (replacing an earlier mapping).
#[utoipa::path(
    put,
    path = "/v1/listings/{lid}",
    tag = "events",
    params(("lid" = u64, Path, description = "Listing id", minimum = 0, maximum = 9223372036854775807_i64)),
    request_body = AccountBody,
    responses(
        (status = 204, description = "Stored"),
        JsonBodyErrors,
    )
)]
async fn put_listing(
    State(s): State<Arc<AnalyticsHttp>>,
    _: NoQuery,
    Tenant(tenant): Tenant,
    Path(lid): Path<String>,
    ApiJson(body): ApiJson<AccountBody>,
) -> Result<StatusCode, ApiError> {
    let lid = non_negative("listing id", id("listing id", &lid)?)?;
    let account = non_negative("account_id", body.account_id)?;
    s.rollups
        .rollups()
        .put_listings(&tenant, &[(lid, account)])
        .await
        .map_err(store_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// One listing → account mapping.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ListingBody {
    /// The listing.
    #[schema(minimum = 0)]
    listing_id: i64,
    /// The owning account.
    #[schema(minimum = 0)]
    account_id: i64,
}

/// How many mappings were stored.
#[derive(Debug, Serialize, ToSchema)]
struct Upserted {
    /// Mappings of the request, all stored.
    upserted: usize,
}

/// Maps many listings to their accounts, all or nothing (at most 100,000 per request).
#[utoipa::path(
    post,
    path = "/v1/listings",
    tag = "events",
    request_body = Vec<ListingBody>,
    responses(
        (status = 200, description = "Stored", body = Upserted),
        JsonBodyErrors,
    )
)]
async fn post_listings(
    State(s): State<Arc<AnalyticsHttp>>,
    _: NoQuery,
    Tenant(tenant): Tenant,
    ApiJsonArray(items): ApiJsonArray<ListingBody>,
) -> Result<axum::Json<Upserted>, ApiError> {
    if items.len() > MAX_LISTINGS_PER_REQUEST {
        return Err(ApiError::bad_request(format!(
            "{} listings in one request; at most {MAX_LISTINGS_PER_REQUEST}",
            items.len()
        )));
    }
    let pairs = items
        .iter()
        .map(|i| {
            Ok((
                non_negative("listing_id", i.listing_id)?,
                non_negative("account_id", i.account_id)?,
            ))
        })
        .collect::<Result<Vec<(i64, i64)>, ApiError>>()?;
    let n = s
        .rollups
        .rollups()
        .put_listings(&tenant, &pairs)
        .await
        .map_err(store_error)?;
    Ok(axum::Json(Upserted { upserted: n }))
}

/// The period (at most 366 days) and an optional kind of a report.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ReportParams {
    /// First day, `YYYY-MM-DD` (a day of `events.time_zone`).
    #[param(required = true, value_type = String, format = Date)]
    from: Option<String>,
    /// Last day (inclusive), `YYYY-MM-DD`, not before `from`.
    #[param(required = true, value_type = String, format = Date)]
    to: Option<String>,
    /// Only this kind (one of the configured set).
    kind: Option<String>,
    /// `json` (default) or `csv` (a streamed download with a header row:
    /// `listing_id,kind,total,uniques_daily_sum[,uniques_period]`).
    #[param(pattern = "^(json|csv)$")]
    format: Option<String>,
    /// `true`: each row also gives `uniques_period`, the distinct visitors of the whole
    /// period, estimated from the days' visitor sketches (exact up to about 1,500, within
    /// about 2 % above), or `null` when a day of the period was rolled up before sketches
    /// were kept.
    uniques_period: Option<bool>,
}

/// An account's report over a period.
#[derive(Debug, Serialize, ToSchema)]
struct ReportBody {
    /// The account.
    account_id: i64,
    /// First day, `YYYY-MM-DD`.
    #[schema(format = Date)]
    from: String,
    /// Last day (inclusive), `YYYY-MM-DD`.
    #[schema(format = Date)]
    to: String,
    /// Per listing of the account and kind, the sums over the period.
    rows: Vec<ReportRow>,
    /// The zone of the days (`events.time_zone`: `UTC` or an IANA name).
    #[schema(example = "Europe/Sarajevo")]
    time_zone: String,
}

/// Per listing and kind, an account's totals over a period, from the summary tier.
#[utoipa::path(
    get,
    path = "/v1/accounts/{aid}/report",
    tag = "events",
    params(("aid" = u64, Path, description = "Account id", minimum = 0, maximum = 9223372036854775807_i64), ReportParams),
    responses((status = 200, description = "The report (no rows: an empty list)", content(
        (ReportBody = "application/json"),
        (String = "text/csv", example = "listing_id,kind,total,uniques_daily_sum\n48213,view,1520,1211\n"),
    )))
)]
async fn report(
    State(s): State<Arc<AnalyticsHttp>>,
    Tenant(tenant): Tenant,
    Path(aid): Path<String>,
    ApiQuery(q): ApiQuery<ReportParams>,
) -> Result<Response, ApiError> {
    let format = Format::parse(q.format.as_deref())?;
    let account_id = non_negative("account id", id("account id", &aid)?)?;
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
    let uniques_period = q.uniques_period.unwrap_or(false);
    if format == Format::Csv {
        return export::stream(
            Arc::clone(&s),
            export::Request {
                file_name: format!("account-{account_id}-{from}-{to}.csv"),
                json_head: String::new(),
                tenant,
                account_id,
                kind: q.kind,
                export: Export::Report {
                    from,
                    to,
                    uniques_period,
                },
                format,
            },
        )
        .await;
    }
    let rows = report_rows(
        s.rollups.rollups().as_ref(),
        &tenant,
        account_id,
        (from, to),
        q.kind.as_deref(),
        ALL_LISTINGS,
        uniques_period,
    )
    .await
    .map_err(store_error)?;
    s.note_read(rows.iter().map(|r| r.kind.as_str()), "report");
    Ok(axum::Json(ReportBody {
        account_id,
        from: from.to_string(),
        to: to.to_string(),
        rows,
        time_zone: s.rollups.raw().calendar().name().to_owned(),
    })
    .into_response())
}

/// The report rows of `account_id`'s listings in `listings` over `from..=to` (optionally one
/// kind), with the distinct visitors of the period when `uniques_period`: what the JSON report
/// answers and each page of its CSV export holds.
async fn report_rows(
    store: &dyn RollupStore,
    tenant: &str,
    account_id: i64,
    (from, to): (Day, Day),
    kind: Option<&str>,
    listings: std::ops::RangeInclusive<i64>,
    uniques_period: bool,
) -> Result<Vec<ReportRow>, StoreError> {
    let mut rows = store
        .report_range(tenant, account_id, from, to, kind, listings.clone())
        .await?;
    if uniques_period {
        let estimates = store
            .period_uniques(tenant, account_id, from, to, kind, listings)
            .await?;
        with_period_uniques(&mut rows, estimates);
    }
    Ok(rows)
}

/// The months (at most 120) and an optional kind of a month export.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct MonthsParams {
    /// First month, `YYYY-MM`.
    #[param(required = true, value_type = String, pattern = r"^\d{4}-\d{2}$")]
    from: Option<String>,
    /// Last month (inclusive), `YYYY-MM`, not before `from`.
    #[param(required = true, value_type = String, pattern = r"^\d{4}-\d{2}$")]
    to: Option<String>,
    /// Only this kind (one of the configured set).
    kind: Option<String>,
    /// `json` (default) or `csv` (with a header row:
    /// `listing_id,month,kind,total,uniques_daily_sum`).
    #[param(pattern = "^(json|csv)$")]
    format: Option<String>,
}

/// An account's month sums.
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)] // the schema of the streamed answer, written a row at a time
struct MonthsBody {
    /// The account.
    account_id: i64,
    /// First month, `YYYY-MM`.
    from: String,
    /// Last month (inclusive), `YYYY-MM`.
    to: String,
    /// Per listing of the account, month and kind: the month's sums.
    rows: Vec<MonthRow>,
}

/// The first day of month `s` (`YYYY-MM`).
fn month(what: &str, s: &str) -> Result<Day, ApiError> {
    let well_formed = s.len() == 7 && s.as_bytes()[4] == b'-';
    well_formed
        .then(|| Day::parse(&format!("{s}-01")).ok())
        .flatten()
        .ok_or_else(|| {
            ApiError::bad_request(format!("`{what}` must be a month YYYY-MM, got {s:?}"))
        })
}

/// Per listing of an account, month and kind: the month sums (for invoices), from the month
/// summary only, streamed a page of listings at a time, as JSON or CSV.
#[utoipa::path(
    get,
    path = "/v1/accounts/{aid}/months",
    tag = "events",
    params(("aid" = u64, Path, description = "Account id", minimum = 0, maximum = 9223372036854775807_i64), MonthsParams),
    responses((status = 200, description = "The month sums (no rows: an empty list)", content(
        (MonthsBody = "application/json"),
        (String = "text/csv", example = "listing_id,month,kind,total,uniques_daily_sum\n48213,2026-11,view,1520,1211\n"),
    )))
)]
async fn months(
    State(s): State<Arc<AnalyticsHttp>>,
    Tenant(tenant): Tenant,
    Path(aid): Path<String>,
    ApiQuery(q): ApiQuery<MonthsParams>,
) -> Result<Response, ApiError> {
    let account_id = non_negative("account id", id("account id", &aid)?)?;
    let format = Format::parse(q.format.as_deref())?;
    let from = q
        .from
        .ok_or_else(|| ApiError::bad_request("missing `from` (YYYY-MM)"))?;
    let to =
        q.to.ok_or_else(|| ApiError::bad_request("missing `to` (YYYY-MM)"))?;
    let (first, last) = (month("from", &from)?, month("to", &to)?);
    if first > last {
        return Err(ApiError::bad_request(format!(
            "`from` {from} is after `to` {to}"
        )));
    }
    let count = months_between(&from, &to) + 1;
    if count > MAX_EXPORT_MONTHS {
        return Err(ApiError::bad_request(format!(
            "the period {from}..{to} spans {count} months; at most {MAX_EXPORT_MONTHS}"
        )));
    }
    if let Some(kind) = &q.kind {
        s.schema.check_kind(kind).map_err(ApiError::bad_request)?;
    }
    let json_head =
        serde_json::json!({"account_id": account_id, "from": from, "to": to}).to_string();
    export::stream(
        Arc::clone(&s),
        export::Request {
            file_name: format!("account-{account_id}-months-{from}-{to}.csv"),
            json_head: json_head.trim_end_matches('}').to_owned(),
            tenant,
            account_id,
            kind: q.kind,
            export: Export::Months {
                from: first,
                to: last,
            },
            format,
        },
    )
    .await
}

/// Whole months from `from` to `to` (both `YYYY-MM`, already checked).
fn months_between(from: &str, to: &str) -> i32 {
    let ym = |s: &str| -> i32 {
        s[..4].parse::<i32>().unwrap_or(0) * 12 + s[5..].parse::<i32>().unwrap_or(0)
    };
    ym(to) - ym(from)
}

/// Rolls a day's raw events up into the summary tier (a re-run overwrites, never doubles).
#[utoipa::path(
    post,
    path = "/v1/rollups/{day}",
    tag = "events",
    params(("day" = String, Path, description = "The day, `YYYY-MM-DD`, of `events.time_zone`", format = Date)),
    responses(
        (status = 200, description = "Rolled up", body = RollupOutcome),
        (status = 404, description = "No event of the day was ever stored, e.g. a day in the future (`no_events`); nothing written", body = ErrorBody),
        (status = 409, description = "The day's raw events are gone (`raw_gone`); existing totals are kept", body = ErrorBody),
    )
)]
async fn roll_up(
    State(s): State<Arc<AnalyticsHttp>>,
    _: NoQuery,
    _t: Tenant,
    Path(d): Path<String>,
) -> Result<axum::Json<RollupOutcome>, ApiError> {
    let d = day("day", &d)?;
    Ok(axum::Json(s.rollups.roll_up(d).await?))
}

/// How many days without a write or read flag a kind.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct KindsParams {
    /// Days (1 to 3660; default `events.kind_audit_days`, 30).
    #[param(minimum = 1, maximum = 3660)]
    stale_days: Option<u32>,
}

/// The event-kind audit (seed 002: about 180 kinds accumulated, unchecked): per declared kind,
/// and per retired one (written or read once, no longer declared), when it was last written
/// and read (by a report, an export or the dashboard), its events per day over the raw window,
/// and whether it went unwritten or unread for `stale_days`.
#[utoipa::path(
    get,
    path = "/v1/events/kinds",
    tag = "events",
    params(KindsParams),
    responses((status = 200, description = "The audit", body = KindsAudit))
)]
async fn kinds(
    State(s): State<Arc<AnalyticsHttp>>,
    _t: Tenant,
    ApiQuery(q): ApiQuery<KindsParams>,
) -> Result<axum::Json<KindsAudit>, ApiError> {
    let stale_days = q.stale_days.unwrap_or(s.kind_audit_days);
    if !(1..=3660).contains(&stale_days) {
        return Err(ApiError::bad_request(format!(
            "`stale_days` must be 1 to 3660, got {stale_days}"
        )));
    }
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
    let now = s.rollups.clock().now_ms();
    let raw_days = s.raw_retention.as_secs().div_ceil(86_400);
    let today = s.rollups.raw().calendar().day_of(now);
    let raw_from = today.plus(-i32::try_from(raw_days).unwrap_or(i32::MAX));
    Ok(axum::Json(crate::usage::audit(
        s.rollups.raw().calendar(),
        &s.schema,
        &figures,
        raw_from,
        stale_days,
        now,
    )))
}
