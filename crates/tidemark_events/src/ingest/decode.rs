//! Decoding an ingest body into events: JSON (an array, item by item, or NDJSON) and InfluxDB
//! line protocol, each line checked against the [`Schema`]; every bad line is reported, and
//! decoding stops at the batch's event limit.

use serde_json::Value;
use tidemark_core::json::UniqueKeys;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{BadLine, IngestError, finish, too_many};
use crate::lineproto::{Point, Precision, points};
use crate::model::Event;
use crate::schema::{FieldValue, Schema};

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

/// Parses a JSON `time`: RFC 3339 string or Unix milliseconds. An RFC 3339 time is floored to
/// its millisecond (as line protocol's finer precisions are), so a time before 1970 with a
/// fraction of a millisecond belongs to the earlier millisecond, not the later one; years
/// 0000–9999 always fit in an `i64` of milliseconds.
fn json_time(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| format!("time {n} is not whole Unix milliseconds")),
        Value::String(s) => OffsetDateTime::parse(s, &Rfc3339)
            .map(|t| t.unix_timestamp_nanos().div_euclid(1_000_000) as i64)
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

/// A batch as it is decoded: its events and bad lines, up to `max` of them together.
struct Batch {
    events: Vec<Event>,
    bad: Vec<BadLine>,
    max: usize,
    /// A line past `max` was met: decoding stopped there.
    overflow: bool,
}

impl Batch {
    fn new(max: usize) -> Self {
        Self {
            events: Vec::new(),
            bad: Vec::new(),
            max,
            overflow: false,
        }
    }

    /// Adds line `line`'s outcome; false (and nothing added) once the batch holds `max` lines,
    /// so a body of millions of lines is refused at line `max + 1`, not after all of them.
    fn push(&mut self, line: usize, decoded: Result<Event, String>) -> bool {
        if self.events.len() + self.bad.len() >= self.max {
            self.overflow = true;
            return false;
        }
        match decoded {
            Ok(e) => self.events.push(e),
            Err(error) => self.bad.push(BadLine { line, error }),
        }
        true
    }

    fn finish(self) -> Result<Vec<Event>, IngestError> {
        if self.overflow {
            return Err(too_many(self.max));
        }
        finish(self.events, self.bad)
    }
}

/// Decodes a JSON array or NDJSON body. Every bad line is reported; decoding stops at line
/// `max_events + 1` with [`IngestError::TooLarge`].
pub fn decode_json(
    schema: &Schema,
    body: &str,
    max_events: usize,
) -> Result<Vec<Event>, IngestError> {
    let trimmed = body.trim_start();
    let mut batch = Batch::new(max_events);
    if trimmed.starts_with('[') {
        let mut de = serde_json::Deserializer::from_str(trimmed);
        let parsed = serde::de::DeserializeSeed::deserialize(
            JsonArray {
                schema,
                batch: &mut batch,
            },
            &mut de,
        )
        .and_then(|()| de.end());
        if batch.overflow {
            return Err(too_many(max_events));
        }
        parsed.map_err(|e| IngestError::Request(format!("body is not a JSON array: {e}")))?;
    } else {
        for (i, line) in body.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let parsed = serde_json::from_str::<UniqueKeys>(line)
                .map(|UniqueKeys(v)| v)
                .map_err(|e| format!("not JSON: {e}"));
            if !batch.push(i + 1, parsed.and_then(|v| json_event(schema, v))) {
                break;
            }
        }
    }
    batch.finish()
}

/// A JSON array of events, decoded item by item into a [`Batch`] (never a `Vec` of the whole
/// array first), each item's keys checked for repeats.
struct JsonArray<'a> {
    schema: &'a Schema,
    batch: &'a mut Batch,
}

impl<'de> serde::de::DeserializeSeed<'de> for JsonArray<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for JsonArray<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array of events")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut line = 0;
        while let Some(UniqueKeys(v)) = seq.next_element()? {
            line += 1;
            if !self.batch.push(line, json_event(self.schema, v)) {
                return Err(serde::de::Error::custom("too many events"));
            }
        }
        Ok(())
    }
}

/// Decodes a line-protocol body with the request's precision; points without a timestamp get
/// `now_ms`. Decoding stops at line `max_events + 1` with [`IngestError::TooLarge`].
pub fn decode_line_protocol(
    schema: &Schema,
    body: &str,
    precision: Precision,
    now_ms: i64,
    max_events: usize,
) -> Result<Vec<Event>, IngestError> {
    let mut batch = Batch::new(max_events);
    for (line, point) in points(body) {
        if !batch.push(
            line,
            point.and_then(|p| point_event(schema, p, precision, now_ms)),
        ) {
            break;
        }
    }
    batch.finish()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn time_of(body: &str) -> i64 {
        let events = decode_json(&Schema::default(), body, 10).expect("decodes");
        events[0].time_ms
    }

    #[test]
    fn rfc3339_times_are_floored_to_the_millisecond() {
        // Before 1970 a fraction below the millisecond still belongs to the earlier one.
        assert_eq!(
            time_of(r#"{"time":"1969-12-31T23:59:59.9995Z","kind":"view"}"#),
            -1
        );
        assert_eq!(
            time_of(r#"{"time":"1969-12-31T23:59:59.999999999Z","kind":"view"}"#),
            -1
        );
        assert_eq!(
            time_of(r#"{"time":"1970-01-01T00:00:00.0019Z","kind":"view"}"#),
            1
        );
        assert_eq!(
            time_of(r#"[{"time":"2024-05-01T12:00:00.123999+02:00","kind":"view"}]"#),
            1_714_557_600_123
        );
    }
}
