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

/// Each point with the line it starts on.
fn numbered(body: &str) -> Vec<(usize, Result<Point, String>)> {
    points(body).collect()
}

#[test]
fn points_carry_their_line_and_skip_blank_and_comment_lines() {
    let body = "# a comment\n\n  m f=1i 5\r\n\t# indented comment\nm f=2i\n";
    let got: Vec<(usize, Option<i64>)> = numbered(body)
        .into_iter()
        .map(|(line, p)| (line, p.unwrap().timestamp))
        .collect();
    assert_eq!(got, vec![(3, Some(5)), (5, None)]);
}

/// InfluxDB accepts a newline inside a quoted string value; the point after it keeps its own
/// line number.
#[test]
fn a_string_value_may_span_lines() {
    let got = numbered("m s=\"two\nlines\" 5\nm f=1i\nm f=\n");
    assert_eq!(got.len(), 3);
    let (line, first) = &got[0];
    assert_eq!(*line, 1);
    let first = first.as_ref().unwrap();
    assert_eq!(
        first.fields,
        vec![("s".into(), FieldValue::Str("two\nlines".into()))]
    );
    assert_eq!(first.timestamp, Some(5));
    assert_eq!(got[1].0, 3);
    assert_eq!(got[2].0, 4);
    assert!(
        got[2]
            .1
            .as_ref()
            .unwrap_err()
            .contains("invalid field value")
    );
}

/// A quote in a comment is text: the next line is a point of its own.
#[test]
fn a_quote_in_a_comment_does_not_join_lines() {
    let got = numbered("# a=1 \"x\nm f=1i\n");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 2);
    assert_eq!(
        got[0].1.as_ref().unwrap().fields,
        vec![("f".into(), FieldValue::Int(1))]
    );
}

/// InfluxDB ignores trailing whitespace (the crate alone refuses it).
#[test]
fn trailing_whitespace_is_ignored() {
    for line in ["m f=1i ", "m f=1i 5 ", "m f=1i 5\t\r", "m f=\"a \"  "] {
        assert!(parse_line(line).is_ok(), "{line:?}: {:?}", parse_line(line));
    }
    assert_eq!(parse_line("m f=1i 5  ").unwrap().timestamp, Some(5));
}

/// InfluxDB refuses a comma after the last field ("invalid field format"); the crate alone
/// takes `f=1,` as one field.
#[test]
fn a_comma_after_the_last_field_is_refused() {
    for line in ["m f=1,", "m f=1i, 5", "m f=\"a\","] {
        assert_eq!(
            parse_line(line).unwrap_err(),
            format!("unable to parse '{line}': missing field after the last comma"),
        );
    }
    assert!(
        parse_line("m f=1i,g=2i,")
            .unwrap_err()
            .contains("invalid field")
    );
    // A comma inside a string value is text.
    assert!(parse_line("m f=\"a,\" 5").is_ok());
}

/// Values the crate reads but a 64-bit signed field cannot hold are refused.
#[test]
fn out_of_range_numbers_are_refused() {
    assert_eq!(
        parse_line("m f=1e400").unwrap_err(),
        "unable to parse 'm f=1e400': invalid field value for field `f`: the float is out of range"
    );
    assert!(
        parse_line("m f=18446744073709551615u")
            .unwrap_err()
            .contains("invalid unsigned integer 18446744073709551615u for field `f`")
    );
    assert_eq!(
        parse_line("m f=9223372036854775807u").unwrap().fields,
        vec![("f".into(), FieldValue::Int(i64::MAX))]
    );
    assert!(
        parse_line("m f=9223372036854775808i")
            .unwrap_err()
            .contains("invalid integer 9223372036854775808i")
    );
    assert!(
        parse_line("m f=1i 9223372036854775808")
            .unwrap_err()
            .contains("invalid timestamp \"9223372036854775808\"")
    );
}

/// The crate needs a digit on both sides of a float's point; InfluxDB takes `.5` and `1.`.
/// No client writes them; the message shows what is expected.
#[test]
fn a_float_needs_digits_around_its_point() {
    assert!(
        parse_line("m f=.5")
            .unwrap_err()
            .contains("invalid field value: a field is `key=value`, the value a float (1.5)")
    );
    assert!(
        parse_line("m a=1i,f=.5")
            .unwrap_err()
            .ends_with("invalid field value .5 (field `f`)")
    );
    assert!(
        parse_line("m f=1.")
            .unwrap_err()
            .ends_with("invalid field value 1.")
    );
    assert_eq!(
        parse_line("m f=-0.5,g=1e3,h=1.5E-3").unwrap().fields,
        vec![
            ("f".into(), FieldValue::Float(-0.5)),
            ("g".into(), FieldValue::Float(1000.0)),
            ("h".into(), FieldValue::Float(0.0015)),
        ]
    );
}

/// `\\` in a key or tag value is one backslash (InfluxDB keeps two); an unknown escape
/// keeps its backslash; a key ending in a backslash is refused, as in InfluxDB.
#[test]
fn backslashes_outside_strings() {
    let p = parse_line(r"m,t=a\\b,u=a\b f=1i").unwrap();
    assert_eq!(
        p.tags,
        vec![("t".into(), r"a\b".into()), ("u".into(), r"a\b".into())]
    );
    assert!(
        parse_line(r"m,t=a\ f=1i")
            .unwrap_err()
            .contains("missing fields")
    );
    assert!(
        parse_line(r"m f\=1i")
            .unwrap_err()
            .contains("missing field or invalid field value")
    );
}

/// Every refusal names the line and the part that is wrong.
#[test]
fn refusals_quote_the_line_and_name_the_part() {
    for (line, why) in [
        (",t=v f=1", "missing measurement"),
        ("m,t= f=1", "malformed tag set"),
        ("m f=1 x", "invalid timestamp \"x\""),
        ("m f=1 5 6", "unexpected \"6\" after the timestamp"),
        ("m f=1\t5", "unexpected tab"),
        ("m f=tru", "invalid field value tru"),
        ("m f=-1u", "invalid field value -1u"),
        ("m f=\"x\"y", "invalid field value \"x\"y"),
        ("m f=\"a=b\"y", "invalid field value \"a=b\"y"),
        ("m a=1,b=", "missing value of field `b`"),
        ("m f=1,g", "invalid field \"g\": a field is `key=value`"),
        ("m a=1i,f=\"open", "unterminated string value"),
    ] {
        let err = parse_line(line).unwrap_err();
        let head = format!("unable to parse '{line}': ");
        assert!(
            err.starts_with(&head) && err[head.len()..].starts_with(why),
            "{err}"
        );
    }
    let long = format!("m f={}", "9".repeat(200));
    let err = parse_line(&format!("{long}x")).unwrap_err();
    assert!(
        err.starts_with(&format!("unable to parse '{}…'", &long[..100])),
        "{err}"
    );
    assert!(
        parse_line("m f=1i\nm f=2i")
            .unwrap_err()
            .contains("more than one point")
    );
}

/// The line the official Python client (`influxdb-client`) writes for the seed's point with
/// quotes, commas, equals signs and spaces in a string value.
#[test]
fn the_python_clients_escaping() {
    let p = parse_line(
        r#"listing_event,event=view count=1i,device_id="d_71ab",listing_id="48213",page_url="/item/48213",session_id="s \"one\", with, commas = and spaces",user_id="u_9f2c" 1717430400123"#,
    )
    .unwrap();
    assert_eq!(
        p.fields[4],
        (
            "session_id".into(),
            FieldValue::Str(r#"s "one", with, commas = and spaces"#.into())
        )
    );
    assert_eq!((p.fields.len(), p.timestamp), (6, Some(1_717_430_400_123)));
}
