//! Ingest (DESIGN.md part C): JSON (an array or NDJSON) and InfluxDB line protocol are decoded
//! against the [`crate::schema::Schema`] (`decode`), every line is checked, and only a batch without a single bad line
//! is appended to the raw tier, durably (all or nothing). Two events with the same timestamp
//! are two rows: nothing is merged.

use std::sync::Arc;

use serde::Serialize;
use tidemark_core::day::Day;
use tidemark_core::health::StoreHealth;
use tidemark_core::store::StoreError;
use tidemark_core::timefmt;

use crate::calendar::Calendar;
use crate::config::EventsConfig;
use crate::model::Event;
use crate::raw::{RawError, RawStore};
use crate::usage::KindUsage;

mod decode;

pub use decode::{decode_json, decode_line_protocol, event_from_parts};

/// One bad line of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadLine {
    /// 1-based line (NDJSON, line protocol) or position in a JSON array.
    pub line: usize,
    /// What is wrong.
    pub error: String,
}

/// Why a batch was refused or not stored.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The batch has bad lines; nothing of it was stored.
    #[error("{} invalid event(s), nothing stored: {}", .0.len(), summarize(.0))]
    Invalid(Vec<BadLine>),
    /// The request as a whole is unusable (empty, bad precision).
    #[error("{0}")]
    Request(String),
    /// The request holds more events than one request may (`events.max_batch`).
    #[error("{0}")]
    TooLarge(String),
    /// The raw tier could not store the batch; nothing was acknowledged.
    #[error("raw tier: {0}")]
    Store(#[from] StoreError),
    /// The batch holds events for a day already dropped from the raw tier; nothing stored.
    #[error("{0}")]
    DayDropped(String),
}

fn summarize(bad: &[BadLine]) -> String {
    let mut s: Vec<String> = bad
        .iter()
        .take(20)
        .map(|b| format!("line {}: {}", b.line, b.error))
        .collect();
    if bad.len() > 20 {
        s.push(format!("… and {} more", bad.len() - 20));
    }
    s.join("; ")
}

pub(crate) fn too_many(max: usize) -> IngestError {
    IngestError::TooLarge(format!(
        "more than {max} events in one request (events.max_batch): split the batch"
    ))
}

pub(crate) fn finish(events: Vec<Event>, bad: Vec<BadLine>) -> Result<Vec<Event>, IngestError> {
    if !bad.is_empty() {
        return Err(IngestError::Invalid(bad));
    }
    if events.is_empty() {
        return Err(IngestError::Request("the batch holds no events".into()));
    }
    Ok(events)
}

/// How far in the future an event may be stamped (clock skew of producers): one day.
pub const MAX_FUTURE_MS: i64 = 86_400_000;

/// How far back a refused event counts as needed by someone ([`crate::raw_window`]): older
/// ones are taken for timestamps in the wrong unit, which land near 1970.
const NEEDED_AT_MOST_MS: i64 = 3_660 * 86_400_000;

/// The days of the events of a batch that are older than the raw window (`window_ms` before
/// `now_ms`), those within [`NEEDED_AT_MOST_MS`].
fn too_old_days(calendar: &Calendar, events: &[Event], now_ms: i64, window_ms: i64) -> Vec<Day> {
    let floor = now_ms.saturating_sub(window_ms);
    events
        .iter()
        .filter(|e| e.time_ms < floor && e.time_ms >= now_ms.saturating_sub(NEEDED_AT_MOST_MS))
        .map(|e| calendar.day_of(e.time_ms))
        .collect()
}

/// Event times must lie in the raw window: from `now - (raw_retention + lateness)` (the
/// oldest day the raw tier still takes in: older ones are rolled up, archived and may be gone)
/// to `now + 1 day` (producers' clock skew; a day further ahead would never close).
fn check_time(time_ms: i64, now_ms: i64, window_ms: i64) -> Result<(), String> {
    let floor = now_ms.saturating_sub(window_ms).max(0);
    if time_ms > now_ms.saturating_add(MAX_FUTURE_MS) {
        return Err(format!(
            "time {time_ms} (Unix ms, {}) is more than one day after now",
            timefmt::rfc3339_ms(time_ms)
        ));
    }
    if time_ms >= floor {
        return Ok(());
    }
    let mut error = format!(
        "time {time_ms} (Unix ms, {}) is before the raw window: events older than \
         raw_retention + lateness ({}) are refused",
        timefmt::rfc3339_ms(time_ms),
        humantime::format_duration(std::time::Duration::from_millis(window_ms.max(0) as u64)),
    );
    // A timestamp read in too fine a unit lands near 1970: say which unit would place it now.
    for (factor, guess) in [
        (
            1_000_000,
            "Unix milliseconds sent without precision=ms (line protocol's default unit is ns)?",
        ),
        (
            1_000_000_000,
            "Unix seconds sent without precision=s (line protocol's default unit is ns)?",
        ),
        (
            1_000,
            "seconds where milliseconds are expected (JSON `time`, precision=ms), or \
             microseconds sent without precision=us?",
        ),
    ] {
        let scaled = time_ms.saturating_mul(factor);
        if (floor..=now_ms.saturating_add(MAX_FUTURE_MS)).contains(&scaled) {
            error.push_str(&format!(
                "; ×{factor} it would be {}: {guess}",
                timefmt::rfc3339_ms(scaled)
            ));
            break;
        }
    }
    Err(error)
}

/// Checks events and appends them to the raw tier.
#[derive(Debug, Clone)]
pub struct Ingest {
    raw: Arc<dyn RawStore>,
    cfg: EventsConfig,
    /// Where its appends are reported ([`Ingest::with_store_health`]).
    health: StoreHealth,
    /// Where each stored batch's kinds are noted ([`Ingest::with_usage`]).
    usage: Option<KindUsage>,
}

/// The raw tier's name in the node's [`StoreHealth`].
pub const RAW_STORE: &str = "events raw tier";

impl Ingest {
    /// Ingest into `raw` with the settings `cfg`.
    pub fn new(raw: Arc<dyn RawStore>, cfg: EventsConfig) -> Self {
        Self {
            raw,
            cfg,
            health: StoreHealth::default(),
            usage: None,
        }
    }

    /// Notes the kinds and days of every stored batch in `usage` (the event-kind audit).
    #[must_use]
    pub fn with_usage(mut self, usage: KindUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// The event-kind usage this ingest notes, if any.
    pub fn usage(&self) -> Option<&KindUsage> {
        self.usage.as_ref()
    }

    /// Reports each append to `health`, the node's, under [`RAW_STORE`]: a full raw tier
    /// makes the node not ready until an append succeeds.
    #[must_use]
    pub fn with_store_health(mut self, health: StoreHealth) -> Self {
        self.health = health;
        self
    }

    /// The settings in force.
    pub fn config(&self) -> &EventsConfig {
        &self.cfg
    }

    /// The raw tier.
    pub fn raw(&self) -> &Arc<dyn RawStore> {
        &self.raw
    }

    /// Validates every event (kind in the closed set), then appends them all durably, or none.
    /// `now_ms` is the arrival time.
    pub async fn record(&self, events: Vec<Event>, now_ms: i64) -> Result<usize, IngestError> {
        if events.len() > self.cfg.max_batch {
            return Err(too_many(self.cfg.max_batch));
        }
        let window = self.cfg.raw_retention.saturating_add(self.cfg.lateness);
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let bad: Vec<BadLine> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                self.cfg
                    .schema
                    .check_kind(&e.kind)
                    .and_then(|()| check_time(e.time_ms, now_ms, window_ms))
                    .err()
                    .map(|error| BadLine { line: i + 1, error })
            })
            .collect();
        if let Some(usage) = &self.usage
            && !bad.is_empty()
        {
            let days = too_old_days(self.raw.calendar(), &events, now_ms, window_ms);
            usage.refused(days, now_ms);
        }
        let events = finish(events, bad)?;
        let n = events.len();
        let per = self
            .usage
            .as_ref()
            .map(|usage| usage.per_kind_and_day(&events));
        let appended = self.raw.append(events, now_ms).await;
        self.health.record(RAW_STORE, &appended);
        appended.map_err(|e| match e {
            RawError::Store(s) => IngestError::Store(s),
            d @ RawError::DayDropped(_) => IngestError::DayDropped(d.to_string()),
        })?;
        if let (Some(usage), Some(per)) = (&self.usage, per) {
            usage.wrote(per, now_ms);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lineproto::Precision;
    use crate::raw::SqliteRaw;
    use crate::schema::Schema;
    use tidemark_core::day::Day;

    #[tokio::test]
    async fn same_millisecond_events_are_two_rows_and_bad_kinds_store_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let raw = Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap());
        same_millisecond_events_on(raw).await;
    }

    /// The same on a real InfluxDB: the two identical points are two events there too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn same_millisecond_events_are_two_points_on_influxdb() {
        let server = crate::testing::InfluxServer::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let raw = crate::raw::InfluxRaw::connect(
            &format!("{}?retention=3650d", server.url("ingest")),
            &dir.path().join("catalog.db"),
        )
        .await
        .unwrap();
        same_millisecond_events_on(Arc::new(raw)).await;
    }

    async fn same_millisecond_events_on(raw: Arc<dyn RawStore>) {
        let ingest = Ingest::new(Arc::clone(&raw), EventsConfig::default());
        let t = 1_795_999_534_123;
        let mut a = Event::new("view", t);
        a.listing_id = Some(7);
        let b = a.clone();
        assert_eq!(ingest.record(vec![a.clone(), b], t).await.unwrap(), 2);
        for (wild, refusal) in [
            (-1, "is before the raw window"),
            (t - 7 * 86_400_000 - 3_600_001, "is before the raw window"),
            (i64::MAX, "more than one day after now"),
            (t + MAX_FUTURE_MS + 1, "more than one day after now"),
        ] {
            let err = ingest
                .record(vec![Event::new("view", wild)], t)
                .await
                .unwrap_err();
            assert!(err.to_string().contains(refusal), "{wild}: {err}");
        }
        let bad = Event::new("purchase", t);
        let err = ingest.record(vec![a.clone(), bad], t).await.unwrap_err();
        assert!(
            matches!(&err, IngestError::Invalid(b) if b[0].line == 2),
            "{err}"
        );
        let stored = raw.day_events(Day::of_utc_ms(t)).await.unwrap();
        assert_eq!(stored, vec![a.clone(), a]);
        assert!(
            raw.day_events(Day::of_utc_ms(t).plus(1))
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn json_array_and_ndjson() {
        let s = Schema::default();
        let arr = r#"[{"time": "2024-06-03T16:00:00.123Z", "kind": "view", "listing_id": 48213, "user_id": "u1",
                      "session_id": "s1", "page_url": "/item/48213"},
                     {"time": 1717430400000, "kind": "click", "listing_id": "7", "device_id": "d"}]"#;
        let ev = decode_json(&s, arr, 100).unwrap();
        assert_eq!(ev.len(), 2);
        assert_eq!(
            (ev[0].time_ms, ev[0].listing_id, ev[0].page_url.as_deref()),
            (1_717_430_400_123, Some(48213), Some("/item/48213"))
        );
        assert_eq!(
            (ev[1].time_ms, ev[1].listing_id, ev[1].kind.as_str()),
            (1_717_430_400_000, Some(7), "click")
        );
        let nd = "{\"time\": 1, \"kind\": \"view\"}\n\n{\"time\": 2, \"kind\": \"nope\"}\n{\"kind\": \"view\"}\nnot json\n{\"time\": 3, \"kind\": \"view\", \"colour\": \"red\"}\n";
        match decode_json(&s, nd, 100) {
            Err(IngestError::Invalid(bad)) => {
                let lines: Vec<usize> = bad.iter().map(|b| b.line).collect();
                assert_eq!(lines, vec![3, 4, 5, 6]);
                assert!(bad[0].error.contains("\"nope\""));
                assert!(bad[1].error.contains("missing `time`"));
                assert!(bad[3].error.contains("undeclared field `colour`"));
            }
            other => panic!("{other:?}"),
        }
    }

    /// Line numbers are the body's lines, also after a string value spanning two of them;
    /// refusals of the parser and of the schema are reported alike.
    #[test]
    fn line_protocol_refusals_name_the_body_line() {
        let s = Schema::default();
        let spanning = "listing_event,event=view session_id=\"a\nb\",count=1i 5\n";
        let ev = decode_line_protocol(&s, spanning, Precision::Ms, 0, 100).unwrap();
        assert_eq!(
            (ev[0].session_id.as_deref(), ev[0].time_ms),
            (Some("a\nb"), 5)
        );
        let body = format!(
            "{spanning}listing_event,event=view count=1i 17x\n\nlisting_event,event=view a,b=1i\n"
        );
        match decode_line_protocol(&s, &body, Precision::Ms, 0, 100) {
            Err(IngestError::Invalid(b)) => assert_eq!(
                b,
                vec![
                    BadLine {
                        line: 3,
                        error: "unable to parse 'listing_event,event=view count=1i 17x': \
                                invalid timestamp \"17x\""
                            .into()
                    },
                    BadLine {
                        line: 5,
                        error: "undeclared field `a,b`".into()
                    },
                ]
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn line_protocol_against_the_schema() {
        let s = Schema::default();
        let body = "# comment\nlisting_event,event=view listing_id=\"48213\",user_id=\"u_9f2c\",count=1i 1717430400000\n";
        let ev = decode_line_protocol(&s, body, Precision::Ms, 0, 100).unwrap();
        assert_eq!(
            (ev[0].time_ms, ev[0].listing_id, ev[0].count),
            (1_717_430_400_000, Some(48213), 1)
        );
        // The same timestamp without precision=ms is nanoseconds: a different instant.
        let ev = decode_line_protocol(&s, body, Precision::Ns, 0, 100).unwrap();
        assert_eq!(ev[0].time_ms, 1_717_430);
        let bad = "listing_event,event=view,user_id=u1 count=1i\nlisting_event,event=buy count=1i\nother,event=view count=1i\nlisting_event,event=view count=\"1\"\nlisting_event,event=view,region=eu count=1i\nlisting_event,event=view,event=click count=1i\n";
        match decode_line_protocol(&s, bad, Precision::Ns, 0, 100) {
            Err(IngestError::Invalid(b)) => {
                assert_eq!(b.len(), 6);
                assert!(b[5].error.contains("given twice"), "{}", b[5].error);
                assert!(
                    b[0].error.contains("`user_id` is a field, never a tag"),
                    "{}",
                    b[0].error
                );
                assert!(b[1].error.contains("undeclared value \"buy\""));
                assert!(b[2].error.contains("undeclared measurement"));
                assert!(b[3].error.contains("declared int"));
                assert!(b[4].error.contains("undeclared tag key `region`"));
            }
            other => panic!("{other:?}"),
        }
    }

    /// Decoding stops at the first line past the limit, whatever follows.
    #[test]
    fn decoding_stops_past_the_event_limit() {
        let s = Schema::default();
        let line = "listing_event,event=view count=1i 5\n";
        assert_eq!(
            decode_line_protocol(&s, &line.repeat(3), Precision::Ms, 0, 3)
                .unwrap()
                .len(),
            3
        );
        let over = format!("{}not even a point\n", line.repeat(4));
        let json = "{\"time\": 1, \"kind\": \"view\"}";
        let array = format!("[{json},{json},{json},{json}, this is not JSON");
        let ndjson = format!("{json}\n{json}\n{json}\n{json}\n");
        for refused in [
            decode_line_protocol(&s, &over, Precision::Ms, 0, 3),
            decode_json(&s, &array, 3),
            decode_json(&s, &ndjson, 3),
        ] {
            match refused {
                Err(IngestError::TooLarge(m)) => assert_eq!(
                    m,
                    "more than 3 events in one request (events.max_batch): split the batch"
                ),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            decode_json(&s, &format!("[{json},{json},{json}]"), 3)
                .unwrap()
                .len(),
            3
        );
    }

    /// A millisecond timestamp read as nanoseconds lands in 1970: the refusal says so.
    #[test]
    fn times_before_the_raw_window_are_refused_with_a_unit_hint() {
        let now = 1_795_999_534_123; // 2026-11-30
        let window = 7 * 86_400_000 + 3_600_000;
        let e = check_time(now / 1_000_000, now, window).unwrap_err();
        assert_eq!(
            e,
            "time 1795999 (Unix ms, 1970-01-01T00:29:55.999Z) is before the raw window: events \
             older than raw_retention + lateness (7days 1h) are refused; ×1000000 it would be \
             2026-11-30T00:36:40.000Z: Unix milliseconds sent without precision=ms (line \
             protocol's default unit is ns)?"
        );
        let e = check_time(now / 1000, now, window).unwrap_err();
        assert!(
            e.contains("×1000 it would be 2026-11-30T00:45:34.000Z: seconds where"),
            "{e}"
        );
        let e = check_time(now - window - 1, now, window).unwrap_err();
        assert!(e.ends_with("are refused"), "{e}");
        assert_eq!(check_time(now - window, now, window), Ok(()));
        assert_eq!(check_time(now + MAX_FUTURE_MS, now, window), Ok(()));
    }
}
