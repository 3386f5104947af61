//! InfluxDB line protocol
//! (<https://docs.influxdata.com/influxdb/v2/reference/syntax/line-protocol/>), parsed by
//! InfluxData's `influxdb-line-protocol` crate, the parser of InfluxDB 3 written to match
//! InfluxDB's Go parser. The crate decides where a point ends (a newline inside a quoted
//! string value does not end it), undoes the escapes (`\,` `\ ` in the measurement; `\,` `\=`
//! `\ ` in tag keys, tag values and field keys; `\"` `\\` in string values) and types the
//! field values (`42i`, `42u`, `t`/`true`/`F`/`FALSE`…, floats, double-quoted strings).
//!
//! Tidemark adds on top, here:
//! - line numbers: each point is reported with the body line it starts on (1-based), so a
//!   400 names it; blank lines and lines starting with `#` are skipped whole, and a quote in
//!   a comment never joins the next line to it;
//! - trailing spaces, tabs and `\r` (CRLF bodies) are ignored, as InfluxDB does;
//! - refused although the crate accepts them, as InfluxDB refuses them: a comma after the last
//!   field (`f=1,`), a float out of range (`1e400`, which would be infinite), an unsigned
//!   integer above `i64::MAX` (fields are stored as 64-bit signed integers);
//! - every refusal reads `unable to parse '<line>': <what is wrong>`, in words naming the
//!   part (timestamp, field value, tag set…) rather than the crate's parser states;
//! - [`Precision`]: the request's `precision` and the conversion to Unix milliseconds.
//!
//! The checks against the schema (one measurement, the closed tag set, declared field types)
//! and the event time range are in [`crate::ingest`] and [`crate::schema`].
//!
//! Where the crate differs from InfluxDB and Tidemark follows the crate: a float needs a digit
//! on both sides of its point (`0.5`, `1.0`; InfluxDB also takes `.5` and `1.`), and `\\` in a
//! key or tag value is one backslash (InfluxDB keeps both). No InfluxDB client writes either.

use influxdb_line_protocol::{Error as LpError, FieldValue as LpValue};

use crate::schema::FieldValue;

/// One parsed point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Measurement name.
    pub measurement: String,
    /// Tags in order.
    pub tags: Vec<(String, String)>,
    /// Fields in order.
    pub fields: Vec<(String, FieldValue)>,
    /// Timestamp in the request's precision, if given.
    pub timestamp: Option<i64>,
}

/// Timestamp precision of a write request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Nanoseconds (the default, as in InfluxDB).
    Ns,
    /// Microseconds.
    Us,
    /// Milliseconds.
    Ms,
    /// Seconds.
    S,
}

impl Precision {
    /// Parses `ns`, `us` (or `u`), `ms`, `s`; absent means `ns`.
    pub fn parse(p: Option<&str>) -> Result<Self, String> {
        match p.unwrap_or("ns") {
            "ns" | "n" => Ok(Precision::Ns),
            "us" | "u" | "µ" => Ok(Precision::Us),
            "ms" => Ok(Precision::Ms),
            "s" => Ok(Precision::S),
            other => Err(format!("unknown precision {other:?} (ns, us, ms or s)")),
        }
    }

    /// Converts a timestamp in this precision to Unix milliseconds (floor).
    pub fn to_ms(self, t: i64) -> Option<i64> {
        match self {
            Precision::Ns => Some(t.div_euclid(1_000_000)),
            Precision::Us => Some(t.div_euclid(1_000)),
            Precision::Ms => Some(t),
            Precision::S => t.checked_mul(1000),
        }
    }
}

/// The points of a body, each with the 1-based line it starts on; blank and comment lines
/// are skipped. A bad point is an `Err` naming what is wrong; the points after it are still
/// given.
pub fn points(body: &str) -> Points<'_> {
    Points {
        rest: body,
        line: 1,
    }
}

/// Iterator of [`points`].
#[derive(Debug)]
pub struct Points<'a> {
    rest: &'a str,
    line: usize,
}

impl Iterator for Points<'_> {
    type Item = (usize, Result<Point, String>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.rest.is_empty() {
                return None;
            }
            let physical = self.rest.split('\n').next().unwrap_or_default();
            let text = physical.trim_start();
            if text.trim_end().is_empty() || text.starts_with('#') {
                self.rest = self.rest.get(physical.len() + 1..).unwrap_or_default();
                self.line += 1;
                continue;
            }
            // The crate splits from the point's first character, so it sees no indentation.
            let start = &self.rest[physical.len() - text.len()..];
            let point = influxdb_line_protocol::split_lines(start)
                .next()
                .unwrap_or(start);
            let line = self.line;
            self.rest = start.get(point.len() + 1..).unwrap_or_default();
            self.line += 1 + point.matches('\n').count();
            return Some((line, parse_line(point)));
        }
    }
}

/// Parses one point (one line, or more when a string value holds a newline).
pub fn parse_line(line: &str) -> Result<Point, String> {
    let line = line.trim_end_matches([' ', '\t', '\r', '\n']);
    let mut parsed = influxdb_line_protocol::parse_lines(line);
    let p = match parsed.next() {
        Some(Ok(p)) => p,
        Some(Err(e)) => return Err(unable(line, &explain(line, &e))),
        None => return Err("no point: the line is blank or a comment".into()),
    };
    if parsed.next().is_some() {
        return Err(unable(line, "more than one point"));
    }
    let field_set_end = match p.timestamp {
        Some(_) => line
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '-')
            .trim_end_matches([' ', '\t']),
        None => line,
    };
    if field_set_end.ends_with(',') {
        return Err(unable(line, "missing field after the last comma"));
    }
    let fields = p
        .field_set
        .into_iter()
        .map(|(k, v)| {
            let key = String::from(k);
            field_value(&key, v).map(|v| (key, v))
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(|why| unable(line, &why))?;
    Ok(Point {
        measurement: p.series.measurement.into(),
        tags: p
            .series
            .tag_set
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        fields,
        timestamp: p.timestamp,
    })
}

fn field_value(key: &str, v: LpValue<'_>) -> Result<FieldValue, String> {
    match v {
        LpValue::I64(i) => Ok(FieldValue::Int(i)),
        LpValue::U64(u) => i64::try_from(u).map(FieldValue::Int).map_err(|_| {
            format!(
                "invalid unsigned integer {u}u for field `{key}`: at most {}",
                i64::MAX
            )
        }),
        LpValue::F64(f) if f.is_finite() => Ok(FieldValue::Float(f)),
        LpValue::F64(_) => Err(format!(
            "invalid field value for field `{key}`: the float is out of range"
        )),
        LpValue::String(s) => Ok(FieldValue::Str(s.into())),
        LpValue::Boolean(b) => Ok(FieldValue::Bool(b)),
    }
}

/// `unable to parse '<line>': <why>`, InfluxDB's wording; a long or multi-line point is cut.
fn unable(line: &str, why: &str) -> String {
    const SHOWN: usize = 100;
    let first = line.split('\n').next().unwrap_or_default();
    let cut: String = first.chars().take(SHOWN).collect();
    let more = if cut.len() < line.len() { "…" } else { "" };
    format!("unable to parse '{cut}{more}': {why}")
}

/// What is wrong with a line the crate refused, in the words of the line protocol reference.
fn explain(line: &str, e: &LpError) -> String {
    match e {
        LpError::FieldSetMissing | LpError::CannotParseEntireLine { .. }
            if unbalanced_quotes(line) =>
        {
            "unterminated string value (a double quote is missing)".into()
        }
        LpError::CannotParseEntireLine { trailing_content } => unparsed_rest(line, trailing_content),
        LpError::MeasurementValueInvalid => "missing measurement".into(),
        LpError::TagSetMalformed => {
            "malformed tag set: a tag has no value or no key (tags are `key=value`, comma-separated)"
                .into()
        }
        LpError::FieldSetMissing => "missing field or invalid field value: a field is `key=value`, \
             the value a float (1.5), an integer (42i), an unsigned integer (42u), a boolean \
             (true, false) or a double-quoted string"
            .into(),
        LpError::GenericParsingError { .. } => {
            "missing fields: a space and `key=value` fields must follow the measurement and tags"
                .into()
        }
        LpError::IntegerValueInvalid { value, .. } => {
            format!("invalid integer {value}i: out of the 64-bit range")
        }
        LpError::UIntegerValueInvalid { value, .. } => {
            format!("invalid unsigned integer {value}u: out of range")
        }
        LpError::FloatValueInvalid { value, .. } => format!("invalid field value {value}"),
        LpError::TimestampValueInvalid { value, .. } => {
            format!("invalid timestamp {value:?}: out of the 64-bit range")
        }
        LpError::EndsWithBackslash => {
            "the measurement, a tag or a field key ends with a backslash".into()
        }
        other => other.to_string(),
    }
}

/// Whether the line has an odd number of unescaped double quotes.
fn unbalanced_quotes(line: &str) -> bool {
    let mut quotes = 0;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '"' => quotes += 1,
            _ => {}
        }
    }
    quotes % 2 == 1
}

/// Names the part of `line` where the crate stopped, `rest` being what it could not read.
fn unparsed_rest(line: &str, rest: &str) -> String {
    let Some(read) = line.strip_suffix(rest) else {
        return format!("unexpected {rest:?}");
    };
    let word = |s: &str| s.split([' ', ',']).next().unwrap_or_default().to_owned();
    if rest.starts_with('\t') {
        return "unexpected tab: fields and the timestamp are separated by a space".into();
    }
    if let Some(after) = rest.strip_prefix(' ') {
        // The fields ended and what follows is no timestamp.
        return format!("invalid timestamp {:?}", word(after.trim_start()));
    }
    if read.ends_with([' ', '\t']) {
        return format!("unexpected {:?} after the timestamp", rest.trim());
    }
    let read_timestamp = influxdb_line_protocol::parse_lines(read)
        .next()
        .is_some_and(|p| p.is_ok_and(|p| p.timestamp.is_some()));
    if read_timestamp {
        let digits = read.rsplit([' ', '\t']).next().unwrap_or_default();
        return format!("invalid timestamp {:?}", format!("{digits}{}", word(rest)));
    }
    if read.ends_with(',') {
        // A whole field after a comma could not be read.
        let field = word(rest);
        return match field.split_once('=') {
            Some((key, "")) => format!("missing value of field `{key}`"),
            Some((key, value)) => format!("invalid field value {value} (field `{key}`)"),
            None => format!("invalid field {field:?}: a field is `key=value`"),
        };
    }
    // The value read last starts after the last `=`, or the last `="` for a string value.
    let start = match read.ends_with('"') {
        true => read.rfind("=\""),
        false => read.rfind('='),
    };
    let value = start.map_or(read, |at| &read[at + 1..]);
    format!("invalid field value {value}{}", word(rest))
}

#[cfg(test)]
mod tests;
