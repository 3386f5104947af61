//! "What happened recently": the live dashboard's reads, from the raw tier only (DESIGN.md
//! part C "Raw tier … counts per minute per kind"). Bot events are never counted.
//!
//! Under `/v1` (API key):
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/events/recent?minutes=60` (1..=1440) | 200 `{"since", "until", "kinds", "total", "minutes": [{"minute", "counts": {"view": n, …}}]}` |
//! | `GET /v1/events/top?day=YYYY-MM-DD\|today&limit=10` (1..=1000) | 200 `{"day", "listings": [{"listing_id", "events"}]}` |
//!
//! The window of `recent` is the last `minutes` whole UTC minutes, the current (unfinished)
//! minute last: `since` is the start of the first, `until` the (exclusive) end of the current
//! one. Every minute of the window is present and every kind has a count, zero included:
//! the schema's declared kinds in their declared order, then any other kind found in the raw
//! tier (a kind removed from the config still shows). `top` answers 410 for a day whose raw
//! partition was dropped (after rollup and archive): the raw tier no longer knows it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use tidemark_core::day::Day;
use tidemark_core::http::{ApiError, ApiQuery, ErrorBody, Tenant};
use tidemark_core::store::StoreError;
use tidemark_core::timefmt::rfc3339_ms;

use crate::calendar::Calendar;
use crate::http::EventsHttp;
use crate::raw::MinuteCount;

/// Milliseconds in a minute.
const MINUTE_MS: i64 = 60_000;
/// Default window of `recent`, in minutes.
pub const DEFAULT_MINUTES: u32 = 60;
/// Largest window of `recent`: one day.
pub const MAX_MINUTES: u32 = 1440;
/// Default `limit` of `top`.
pub const DEFAULT_TOP: usize = 10;
/// Largest `limit` of `top`.
pub const MAX_TOP: usize = 1000;

/// The OpenAPI description of `recent` and `top`.
#[derive(Debug, utoipa::OpenApi)]
#[openapi(paths(recent, top))]
pub(crate) struct RecentApi;

/// The authenticated routes (merge under the API-key layer).
pub fn router(state: EventsHttp) -> Router {
    Router::new()
        .route("/v1/events/recent", get(recent))
        .route("/v1/events/top", get(top))
        .with_state(Arc::new(state))
}

/// One minute of the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct MinuteRow {
    /// Start of the minute, RFC 3339 UTC.
    #[schema(format = DateTime)]
    pub minute: String,
    /// Non-bot events per kind (every kind of the answer, zeros included).
    pub counts: BTreeMap<String, u64>,
}

/// The answer of `GET /v1/events/recent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Recent {
    /// Start of the window (inclusive), RFC 3339.
    #[schema(format = DateTime)]
    pub since: String,
    /// End of the window (exclusive): the end of the current minute, RFC 3339.
    #[schema(format = DateTime)]
    pub until: String,
    /// The kinds of every row, in display order (declared first).
    pub kinds: Vec<String>,
    /// Non-bot events in the window.
    pub total: u64,
    /// Every minute of the window, oldest first.
    pub minutes: Vec<MinuteRow>,
    /// The time zone of the events' days (`events.time_zone`: `UTC` or an IANA name), for
    /// showing the minutes as local clock times.
    #[schema(example = "Europe/Sarajevo")]
    pub time_zone: String,
}

/// The window `[since, until)` of the last `minutes` whole minutes ending with the one that
/// contains `now_ms`.
pub fn window(now_ms: i64, minutes: u32) -> (i64, i64) {
    let until = now_ms.div_euclid(MINUTE_MS) * MINUTE_MS + MINUTE_MS;
    (until - i64::from(minutes) * MINUTE_MS, until)
}

/// Builds the dense answer: one row per minute of `[since, until)`, every kind in every row.
/// Counts outside the window are ignored. `time_zone` names the zone of the events' days.
pub fn fill(
    since: i64,
    until: i64,
    declared: &[String],
    counts: &[MinuteCount],
    time_zone: &str,
) -> Recent {
    let mut kinds: Vec<String> = declared.to_vec();
    let mut extra: Vec<&str> = counts
        .iter()
        .map(|c| c.kind.as_str())
        .filter(|k| !declared.iter().any(|d| d == k))
        .collect();
    extra.sort_unstable();
    extra.dedup();
    kinds.extend(extra.into_iter().map(str::to_owned));

    let slots = usize::try_from((until - since) / MINUTE_MS).unwrap_or(0);
    let zero: BTreeMap<String, u64> = kinds.iter().map(|k| (k.clone(), 0)).collect();
    let mut minutes: Vec<MinuteRow> = (0..slots)
        .map(|i| MinuteRow {
            minute: rfc3339_ms(since + i as i64 * MINUTE_MS),
            counts: zero.clone(),
        })
        .collect();
    let mut total = 0;
    for c in counts {
        if c.minute_ms < since || c.minute_ms >= until {
            continue;
        }
        let slot = ((c.minute_ms - since) / MINUTE_MS) as usize;
        if let Some(n) = minutes[slot].counts.get_mut(&c.kind) {
            *n += c.count;
            total += c.count;
        }
    }
    Recent {
        since: rfc3339_ms(since),
        until: rfc3339_ms(until),
        kinds,
        total,
        minutes,
        time_zone: time_zone.to_owned(),
    }
}

/// Query of `recent`; strings so that a bad value gets a message naming it.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct RecentParams {
    /// The window: the last this many whole UTC minutes, the current one last (default 60).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1440)]
    minutes: Option<String>,
}

fn parse_minutes(raw: Option<&str>) -> Result<u32, ApiError> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_MINUTES);
    };
    match raw.trim().parse::<u32>() {
        Ok(m) if (1..=MAX_MINUTES).contains(&m) => Ok(m),
        _ => Err(ApiError::bad_request(format!(
            "minutes must be a whole number from 1 to {MAX_MINUTES}, got {raw:?}"
        ))),
    }
}

/// Non-bot events per minute and kind over the last minutes, from the raw tier.
#[utoipa::path(
    get,
    path = "/v1/events/recent",
    tag = "events",
    params(RecentParams),
    responses((status = 200, description = "Every minute of the window, every kind in every minute", body = Recent))
)]
async fn recent(
    State(s): State<Arc<EventsHttp>>,
    _t: Tenant,
    ApiQuery(q): ApiQuery<RecentParams>,
) -> Result<axum::Json<Recent>, ApiError> {
    let minutes = parse_minutes(q.minutes.as_deref())?;
    let (since, until) = window(s.clock.now_ms(), minutes);
    let counts = s
        .ingest
        .raw()
        .counts_per_minute(since, until)
        .await
        .map_err(|e| ApiError::store(e.kind(), format!("raw tier: {e}")))?;
    let zone = s.ingest.raw().calendar().name();
    let answer = fill(since, until, &s.ingest.config().schema.kinds, &counts, zone);
    if let Some(usage) = s.ingest.usage() {
        // The kinds the dashboard showed events of were read (the event-kind audit).
        let shown = answer.minutes.iter().flat_map(|m| {
            m.counts
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, _)| k.as_str())
        });
        usage.read(shown, "dashboard", s.clock.now_ms());
    }
    Ok(axum::Json(answer))
}

/// Query of `top`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct TopParams {
    /// The day, `YYYY-MM-DD`, or `today` (the default), in the events time zone.
    #[param(value_type = Option<String>, example = "today")]
    day: Option<String>,
    /// How many listings, 1 to 1000 (default 10).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    limit: Option<String>,
}

/// One listing of `top`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TopListing {
    /// The listing.
    #[schema(minimum = 0)]
    pub listing_id: i64,
    /// Its non-bot events of the day.
    pub events: u64,
}

/// The answer of `GET /v1/events/top`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Top {
    /// The day, `YYYY-MM-DD`, of the events time zone.
    #[schema(format = Date)]
    pub day: String,
    /// The time zone of the events' days (`events.time_zone`: `UTC` or an IANA name).
    #[schema(example = "Europe/Sarajevo")]
    pub time_zone: String,
    /// Most events first (ties: lower listing id first).
    pub listings: Vec<TopListing>,
}

fn parse_day(raw: Option<&str>, calendar: &Calendar, now_ms: i64) -> Result<Day, ApiError> {
    match raw.map(str::trim) {
        None | Some("today") => Ok(calendar.day_of(now_ms)),
        Some(d) => Day::parse(d).map_err(|e| {
            ApiError::bad_request(format!(
                "day: {e} (or the word \"today\", in {})",
                calendar.name()
            ))
        }),
    }
}

fn parse_limit(raw: Option<&str>) -> Result<usize, ApiError> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_TOP);
    };
    match raw.trim().parse::<usize>() {
        Ok(l) if (1..=MAX_TOP).contains(&l) => Ok(l),
        _ => Err(ApiError::bad_request(format!(
            "limit must be a whole number from 1 to {MAX_TOP}, got {raw:?}"
        ))),
    }
}

/// The listings with the most non-bot events of a day, from the raw tier.
#[utoipa::path(
    get,
    path = "/v1/events/top",
    tag = "events",
    params(TopParams),
    responses(
        (status = 200, description = "Most events first", body = Top),
        (status = 410, description = "The day's raw partition was dropped (`gone`): use the account report", body = ErrorBody),
    )
)]
async fn top(
    State(s): State<Arc<EventsHttp>>,
    _t: Tenant,
    ApiQuery(q): ApiQuery<TopParams>,
) -> Result<axum::Json<Top>, ApiError> {
    let raw = s.ingest.raw();
    let day = parse_day(q.day.as_deref(), raw.calendar(), s.clock.now_ms())?;
    let limit = parse_limit(q.limit.as_deref())?;
    let unavailable = |e: StoreError| ApiError::store(e.kind(), format!("raw tier: {e}"));
    let dropped = raw
        .days()
        .await
        .map_err(unavailable)?
        .iter()
        .any(|d| d.day == day && d.dropped_ms.is_some());
    if dropped {
        return Err(ApiError::new(
            StatusCode::GONE,
            "gone",
            format!(
                "the raw tier no longer holds {day} (rolled up, archived and dropped); \
                 use the account report for it"
            ),
        ));
    }
    let listings = raw
        .top_listings(day, limit)
        .await
        .map_err(unavailable)?
        .into_iter()
        .map(|(listing_id, events)| TopListing { listing_id, events })
        .collect();
    Ok(axum::Json(Top {
        day: day.to_string(),
        time_zone: raw.calendar().name().to_owned(),
        listings,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mc(minute_ms: i64, kind: &str, count: u64) -> MinuteCount {
        MinuteCount {
            minute_ms,
            kind: kind.to_owned(),
            count,
        }
    }

    #[test]
    fn window_ends_with_the_current_minute() {
        // 2026-11-30T00:45:34.123Z
        let now = 1_795_999_534_123;
        let (since, until) = window(now, 60);
        assert_eq!(rfc3339_ms(until), "2026-11-30T00:46:00.000Z");
        assert_eq!(rfc3339_ms(since), "2026-11-29T23:46:00.000Z");
        let (since, until) = window(now, 1);
        assert_eq!(until - since, MINUTE_MS);
        assert!(since <= now && now < until);
    }

    #[test]
    fn every_minute_and_every_kind_is_present() {
        let declared: Vec<String> = ["view", "click", "contact"].map(Into::into).to_vec();
        let (since, until) = window(1_795_999_534_123, 5);
        let counts = [
            mc(since, "view", 3),
            mc(since + 2 * MINUTE_MS, "click", 2),
            mc(since + 2 * MINUTE_MS, "view", 1),
            mc(since + 4 * MINUTE_MS, "retired_kind", 4),
            mc(since - MINUTE_MS, "view", 100), // outside: ignored
            mc(until, "view", 100),             // outside: ignored
        ];
        let r = fill(since, until, &declared, &counts, "UTC");
        assert_eq!(r.kinds, ["view", "click", "contact", "retired_kind"]);
        assert_eq!(r.minutes.len(), 5);
        assert_eq!(r.total, 10);
        assert_eq!(r.since, r.minutes[0].minute);
        assert_eq!(r.minutes[1].minute, rfc3339_ms(since + MINUTE_MS));
        for row in &r.minutes {
            assert_eq!(row.counts.len(), 4, "{row:?}");
        }
        let at = |i: usize, k: &str| r.minutes[i].counts[k];
        assert_eq!((at(0, "view"), at(0, "click"), at(0, "contact")), (3, 0, 0));
        assert_eq!((at(1, "view"), at(1, "click")), (0, 0));
        assert_eq!((at(2, "view"), at(2, "click")), (1, 2));
        assert_eq!(at(4, "retired_kind"), 4);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["minutes"][2]["counts"]["click"], 2);
        assert_eq!(json["minutes"][3]["counts"]["contact"], 0);
    }

    #[test]
    fn params_are_checked() {
        assert_eq!(parse_minutes(None).unwrap(), 60);
        assert_eq!(parse_minutes(Some("1440")).unwrap(), 1440);
        for bad in ["0", "1441", "-5", "ten", ""] {
            let e = parse_minutes(Some(bad)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
            assert!(e.message.contains("minutes"), "{}", e.message);
        }
        let now = 1_795_999_534_123;
        assert_eq!(
            parse_day(None, &Calendar::utc(), now).unwrap().to_string(),
            "2026-11-30"
        );
        assert_eq!(
            parse_day(Some("today"), &Calendar::utc(), now)
                .unwrap()
                .to_string(),
            "2026-11-30"
        );
        assert_eq!(
            parse_day(Some("2024-02-29"), &Calendar::utc(), now)
                .unwrap()
                .to_string(),
            "2024-02-29"
        );
        assert!(parse_day(Some("yesterday"), &Calendar::utc(), now).is_err());
        assert_eq!(parse_limit(None).unwrap(), 10);
        assert!(parse_limit(Some("0")).is_err());
        assert!(parse_limit(Some("1001")).is_err());
    }
}
