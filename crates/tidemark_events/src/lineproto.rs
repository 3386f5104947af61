//! InfluxDB line protocol, parsed by hand because the escaping rules are the contract
//! (<https://docs.influxdata.com/influxdb/v1/write_protocols/line_protocol_reference/>):
//!
//! `measurement[,tag=value…] field=value[,field=value…] [timestamp]`
//! - measurement: `\,` and `\ ` escape comma and space;
//! - tag keys, tag values, field keys: `\,`, `\=`, `\ ` escape comma, equals sign and space;
//! - string field values are double-quoted; inside, `\"` and `\\` escape quote and backslash;
//! - `42i` is an integer, `42u` unsigned, `t`/`true`/`F`/`FALSE`… booleans, any other number
//!   a float;
//! - the timestamp is an integer in the request's precision (`ns` by default);
//! - blank lines and lines starting with `#` are ignored.

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

/// Splits `s` at the first unescaped `stop` byte outside quotes (quotes only count when
/// `quotes`); returns (head, rest after the separator).
fn split_unescaped<'a>(s: &'a str, stops: &[u8], quotes: bool) -> (String, Option<(u8, &'a str)>) {
    let b = s.as_bytes();
    let mut i = 0;
    let mut in_quotes = false;
    while i < b.len() {
        let c = b[i];
        if c == b'\\' && i + 1 < b.len() {
            i += 2;
            continue;
        }
        if quotes && c == b'"' {
            in_quotes = !in_quotes;
        } else if !in_quotes && stops.contains(&c) {
            return (s[..i].to_owned(), Some((c, &s[i + 1..])));
        }
        i += 1;
    }
    (s.to_owned(), None)
}

/// Removes backslash escapes of the given characters (other backslashes stay).
fn unescape(s: &str, chars: &[char]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\'
            && let Some(&n) = it.peek()
            && chars.contains(&n)
        {
            out.push(n);
            it.next();
            continue;
        }
        out.push(c);
    }
    out
}

fn parse_value(raw: &str) -> Result<FieldValue, String> {
    if let Some(inner) = raw.strip_prefix('"') {
        let inner = inner
            .strip_suffix('"')
            .ok_or_else(|| format!("unterminated string value {raw}"))?;
        return Ok(FieldValue::Str(unescape(inner, &['"', '\\'])));
    }
    match raw {
        "t" | "T" | "true" | "True" | "TRUE" => return Ok(FieldValue::Bool(true)),
        "f" | "F" | "false" | "False" | "FALSE" => return Ok(FieldValue::Bool(false)),
        _ => {}
    }
    if let Some(i) = raw.strip_suffix('i') {
        return i
            .parse()
            .map(FieldValue::Int)
            .map_err(|_| format!("invalid integer {raw}"));
    }
    if let Some(u) = raw.strip_suffix('u') {
        return u
            .parse::<u64>()
            .ok()
            .and_then(|u| i64::try_from(u).ok())
            .map(FieldValue::Int)
            .ok_or_else(|| format!("invalid unsigned integer {raw}"));
    }
    raw.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(FieldValue::Float)
        .ok_or_else(|| format!("invalid field value {raw}"))
}

/// Parses one non-empty, non-comment line.
pub fn parse_line(line: &str) -> Result<Point, String> {
    // Series key (measurement + tags) ends at the first unescaped space.
    let (series, rest) = split_unescaped(line, b" ", false);
    let rest = rest.map(|(_, r)| r).ok_or("missing fields")?;
    let (measurement, mut tags_rest) = split_unescaped(&series, b",", false);
    if measurement.is_empty() {
        return Err("missing measurement".into());
    }
    let measurement = unescape(&measurement, &[',', ' ']);
    let mut tags = Vec::new();
    while let Some((_, t)) = tags_rest {
        let (pair, next) = split_unescaped(t, b",", false);
        let (k, v) = split_unescaped(&pair, b"=", false);
        let v = v
            .map(|(_, v)| v)
            .ok_or_else(|| format!("tag {k:?} has no value"))?;
        if k.is_empty() || v.is_empty() {
            return Err(format!("empty tag key or value in {pair:?}"));
        }
        tags.push((
            unescape(&k, &[',', '=', ' ']),
            unescape(v, &[',', '=', ' ']),
        ));
        tags_rest = next;
    }
    // Field set ends at the first unescaped space outside quotes; then the timestamp.
    let (field_set, ts) = split_unescaped(rest, b" ", true);
    let mut fields = Vec::new();
    let mut fs: Option<&str> = Some(&field_set);
    while let Some(f) = fs {
        let (pair, next) = split_unescaped(f, b",", true);
        let (k, v) = split_unescaped(&pair, b"=", false);
        let v = v
            .map(|(_, v)| v)
            .ok_or_else(|| format!("field {k:?} has no value"))?;
        if k.is_empty() {
            return Err(format!("empty field key in {pair:?}"));
        }
        fields.push((unescape(&k, &[',', '=', ' ']), parse_value(v)?));
        fs = next.map(|(_, n)| n);
    }
    if fields.is_empty() {
        return Err("missing fields".into());
    }
    let timestamp = match ts.map(|(_, t)| t.trim()) {
        None | Some("") => None,
        Some(t) => Some(
            t.parse::<i64>()
                .map_err(|_| format!("invalid timestamp {t:?}"))?,
        ),
    };
    Ok(Point {
        measurement,
        tags,
        fields,
        timestamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_line_parses() {
        let p = parse_line(r#"listing_event,event=view listing_id="48213",user_id="u_9f2c",device_id="d_71ab",count=1i 1717430400000"#).unwrap();
        assert_eq!(p.measurement, "listing_event");
        assert_eq!(p.tags, vec![("event".into(), "view".into())]);
        assert_eq!(
            p.fields,
            vec![
                ("listing_id".into(), FieldValue::Str("48213".into())),
                ("user_id".into(), FieldValue::Str("u_9f2c".into())),
                ("device_id".into(), FieldValue::Str("d_71ab".into())),
                ("count".into(), FieldValue::Int(1)),
            ]
        );
        assert_eq!(p.timestamp, Some(1_717_430_400_000));
    }

    #[test]
    fn escaping_rules() {
        let p = parse_line(
            r#"my\ meas\,ure,ta\ g\=k=v\,a\ l\=ue str="a \"quoted\" \\ back, with = and space",f\,k\=e\ y=1.5,b=T,u=7u"#,
        )
        .unwrap();
        assert_eq!(p.measurement, "my meas,ure");
        assert_eq!(p.tags, vec![("ta g=k".into(), "v,a l=ue".into())]);
        assert_eq!(
            p.fields,
            vec![
                (
                    "str".into(),
                    FieldValue::Str(r#"a "quoted" \ back, with = and space"#.into())
                ),
                ("f,k=e y".into(), FieldValue::Float(1.5)),
                ("b".into(), FieldValue::Bool(true)),
                ("u".into(), FieldValue::Int(7)),
            ]
        );
        assert_eq!(p.timestamp, None);
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(parse_line("m").unwrap_err().contains("missing fields"));
        assert!(
            parse_line("m f=")
                .unwrap_err()
                .contains("invalid field value")
        );
        assert!(
            parse_line("m f=\"open")
                .unwrap_err()
                .contains("unterminated")
        );
        assert!(
            parse_line("m f=1i 12x")
                .unwrap_err()
                .contains("invalid timestamp")
        );
        assert!(parse_line("m,t f=1").unwrap_err().contains("has no value"));
        assert!(
            parse_line("m f=1x")
                .unwrap_err()
                .contains("invalid field value 1x")
        );
    }

    #[test]
    fn precision() {
        assert_eq!(
            Precision::parse(None)
                .unwrap()
                .to_ms(1_717_430_400_123_456_789),
            Some(1_717_430_400_123)
        );
        assert_eq!(
            Precision::parse(Some("ms"))
                .unwrap()
                .to_ms(1_717_430_400_123),
            Some(1_717_430_400_123)
        );
        assert_eq!(
            Precision::parse(Some("s")).unwrap().to_ms(1_717_430_400),
            Some(1_717_430_400_000)
        );
        assert_eq!(
            Precision::parse(Some("us"))
                .unwrap()
                .to_ms(1_717_430_400_123_456),
            Some(1_717_430_400_123)
        );
        assert!(Precision::parse(Some("h")).is_err());
    }
}
