//! Ingest (DESIGN.md part C): JSON (an array or NDJSON) and InfluxDB line protocol are decoded
//! against the [`Schema`], every line is checked, and only a batch without a single bad line
//! is appended to the raw tier, durably (all or nothing). Two events with the same timestamp
//! are two rows: nothing is merged.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tidemark_core::health::StoreHealth;
use tidemark_core::json::UniqueKeys;
use tidemark_core::store::StoreError;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::config::EventsConfig;
use crate::lineproto::{Point, Precision, points};
use crate::model::Event;
use crate::raw::{RawError, RawStore};
use crate::schema::{FieldValue, Schema};

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
    /// The request as a whole is unusable (empty, too large, bad precision).
    #[error("{0}")]
    Request(String),
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

/// Builds an event from a kind, a time and declared fields (checked against `schema`).
pub fn event_from_parts(
    schema: &Schema,
    kind: &str,
    time_ms: i64,
    fields: impl IntoIterator<Item = (String, FieldValue)>,
) -> Result<Event, String> {
    schema.check_kind(kind)?;
    let mut e = Event::new(kind, time_ms);
    for (name, value) in fields {
        let v = schema.check_field(&name, value)?;
        match (name.as_str(), v) {
            ("listing_id", FieldValue::Int(i)) => e.listing_id = Some(i),
            ("user_id", FieldValue::Str(s)) => e.user_id = Some(s),
            ("device_id", FieldValue::Str(s)) => e.device_id = Some(s),
            ("session_id", FieldValue::Str(s)) => e.session_id = Some(s),
            ("page_url", FieldValue::Str(s)) => e.page_url = Some(s),
            ("count", FieldValue::Int(i)) => e.count = i,
            (_, v) => {
                let json = match v {
                    FieldValue::Str(s) => Value::String(s),
                    FieldValue::Int(i) => Value::from(i),
                    FieldValue::Float(f) => Value::from(f),
                    FieldValue::Bool(b) => Value::Bool(b),
                };
                e.fields.insert(name, json);
            }
        }
    }
    Ok(e)
}

/// Parses a JSON `time`: RFC 3339 string or Unix milliseconds.
fn json_time(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| format!("time {n} is not whole Unix milliseconds")),
        Value::String(s) => OffsetDateTime::parse(s, &Rfc3339)
            .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
            .map_err(|e| format!("time {s:?} is not RFC 3339: {e}")),
        other => Err(format!("time must be RFC 3339 or Unix ms, got {other}")),
    }
}

fn json_event(schema: &Schema, v: Value) -> Result<Event, String> {
    let Value::Object(mut map) = v else {
        return Err("an event must be a JSON object".into());
    };
    let time = map.remove("time").ok_or("missing `time`")?;
    let time = json_time(&time)?;
    let kind = match map.remove("kind") {
        Some(Value::String(k)) => k,
        Some(other) => return Err(format!("`kind` must be a string, got {other}")),
        None => return Err("missing `kind`".into()),
    };
    let mut fields = Vec::with_capacity(map.len());
    for (k, v) in map {
        let fv = match v {
            Value::Null => continue,
            Value::String(s) => FieldValue::Str(s),
            Value::Bool(b) => FieldValue::Bool(b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => FieldValue::Int(i),
                None => FieldValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            other => {
                return Err(format!(
                    "field `{k}` must be a string, number or boolean, got {other}"
                ));
            }
        };
        fields.push((k, fv));
    }
    event_from_parts(schema, &kind, time, fields)
}

/// Decodes a JSON array or NDJSON body. Every bad line is reported.
pub fn decode_json(schema: &Schema, body: &str) -> Result<Vec<Event>, IngestError> {
    let trimmed = body.trim_start();
    let mut events = Vec::new();
    let mut bad = Vec::new();
    if trimmed.starts_with('[') {
        let items: Vec<UniqueKeys> = serde_json::from_str(trimmed)
            .map_err(|e| IngestError::Request(format!("body is not a JSON array: {e}")))?;
        for (i, UniqueKeys(v)) in items.into_iter().enumerate() {
            match json_event(schema, v) {
                Ok(e) => events.push(e),
                Err(error) => bad.push(BadLine { line: i + 1, error }),
            }
        }
    } else {
        for (i, line) in body.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let parsed = serde_json::from_str::<UniqueKeys>(line)
                .map(|UniqueKeys(v)| v)
                .map_err(|e| format!("not JSON: {e}"));
            match parsed.and_then(|v| json_event(schema, v)) {
                Ok(e) => events.push(e),
                Err(error) => bad.push(BadLine { line: i + 1, error }),
            }
        }
    }
    finish(events, bad)
}

/// Decodes a line-protocol body with the request's precision; points without a timestamp get
/// `now_ms`.
pub fn decode_line_protocol(
    schema: &Schema,
    body: &str,
    precision: Precision,
    now_ms: i64,
) -> Result<Vec<Event>, IngestError> {
    let mut events = Vec::new();
    let mut bad = Vec::new();
    for (line, point) in points(body) {
        match point.and_then(|p| point_event(schema, p, precision, now_ms)) {
            Ok(e) => events.push(e),
            Err(error) => bad.push(BadLine { line, error }),
        }
    }
    finish(events, bad)
}

fn point_event(
    schema: &Schema,
    p: Point,
    precision: Precision,
    now_ms: i64,
) -> Result<Event, String> {
    if p.measurement != schema.measurement {
        return Err(format!(
            "undeclared measurement {:?} (declared: {})",
            p.measurement, schema.measurement
        ));
    }
    let mut kind = None;
    for (k, v) in p.tags {
        if k == schema.tag {
            if kind.is_some() {
                return Err(format!("tag `{k}` given twice"));
            }
            kind = Some(v);
        } else if schema.fields.contains_key(&k) {
            return Err(format!(
                "`{k}` is a field, never a tag: identifiers must not become series keys"
            ));
        } else {
            return Err(format!(
                "undeclared tag key `{k}` (the only tag is `{}`)",
                schema.tag
            ));
        }
    }
    let kind = kind.ok_or_else(|| format!("missing tag `{}`", schema.tag))?;
    let time = match p.timestamp {
        Some(t) => precision
            .to_ms(t)
            .ok_or_else(|| format!("timestamp {t} out of range"))?,
        None => now_ms,
    };
    event_from_parts(schema, &kind, time, p.fields)
}

fn finish(events: Vec<Event>, bad: Vec<BadLine>) -> Result<Vec<Event>, IngestError> {
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

/// Event times must lie in `[1970-01-01, now + 1 day]`: any age of history is accepted, but
/// not times before the Unix epoch or far in the future (whose day would never close).
fn check_time(time_ms: i64, now_ms: i64) -> Result<(), String> {
    if (0..=now_ms.saturating_add(MAX_FUTURE_MS)).contains(&time_ms) {
        Ok(())
    } else {
        Err(format!(
            "time {time_ms} (Unix ms) is outside the accepted range: from 1970-01-01 to one day after now"
        ))
    }
}

/// Checks events and appends them to the raw tier.
#[derive(Debug, Clone)]
pub struct Ingest {
    raw: Arc<dyn RawStore>,
    cfg: EventsConfig,
    /// Where its appends are reported ([`Ingest::with_store_health`]).
    health: StoreHealth,
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
        }
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
            return Err(IngestError::Request(format!(
                "{} events in one request; at most {}",
                events.len(),
                self.cfg.max_batch
            )));
        }
        let bad: Vec<BadLine> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                self.cfg
                    .schema
                    .check_kind(&e.kind)
                    .and_then(|()| check_time(e.time_ms, now_ms))
                    .err()
                    .map(|error| BadLine { line: i + 1, error })
            })
            .collect();
        let events = finish(events, bad)?;
        let n = events.len();
        let appended = self.raw.append(events, now_ms).await;
        self.health.record(RAW_STORE, &appended);
        appended.map_err(|e| match e {
            RawError::Store(s) => IngestError::Store(s),
            d @ RawError::DayDropped(_) => IngestError::DayDropped(d.to_string()),
        })?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::SqliteRaw;
    use tidemark_core::day::UtcDay;

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
        for wild in [-1, i64::MAX, t + MAX_FUTURE_MS + 1] {
            let err = ingest
                .record(vec![Event::new("view", wild)], t)
                .await
                .unwrap_err();
            assert!(
                err.to_string().contains("outside the accepted range"),
                "{err}"
            );
        }
        let bad = Event::new("purchase", t);
        let err = ingest.record(vec![a.clone(), bad], t).await.unwrap_err();
        assert!(
            matches!(&err, IngestError::Invalid(b) if b[0].line == 2),
            "{err}"
        );
        let stored = raw.day_events(UtcDay::of_ms(t)).await.unwrap();
        assert_eq!(stored, vec![a.clone(), a]);
        assert!(
            raw.day_events(UtcDay::of_ms(t).plus(1))
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
        let ev = decode_json(&s, arr).unwrap();
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
        match decode_json(&s, nd) {
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
        let ev = decode_line_protocol(&s, spanning, Precision::Ms, 0).unwrap();
        assert_eq!(
            (ev[0].session_id.as_deref(), ev[0].time_ms),
            (Some("a\nb"), 5)
        );
        let body = format!(
            "{spanning}listing_event,event=view count=1i 17x\n\nlisting_event,event=view a,b=1i\n"
        );
        match decode_line_protocol(&s, &body, Precision::Ms, 0) {
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
        let ev = decode_line_protocol(&s, body, Precision::Ms, 0).unwrap();
        assert_eq!(
            (ev[0].time_ms, ev[0].listing_id, ev[0].count),
            (1_717_430_400_000, Some(48213), 1)
        );
        // The same timestamp without precision=ms is nanoseconds: a different instant.
        let ev = decode_line_protocol(&s, body, Precision::Ns, 0).unwrap();
        assert_eq!(ev[0].time_ms, 1_717_430);
        let bad = "listing_event,event=view,user_id=u1 count=1i\nlisting_event,event=buy count=1i\nother,event=view count=1i\nlisting_event,event=view count=\"1\"\nlisting_event,event=view,region=eu count=1i\nlisting_event,event=view,event=click count=1i\n";
        match decode_line_protocol(&s, bad, Precision::Ns, 0) {
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
}
