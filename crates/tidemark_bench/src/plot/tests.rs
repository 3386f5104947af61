use super::*;

fn series(names: &[&str]) -> Vec<Series> {
    names
        .iter()
        .map(|n| Series {
            name: (*n).into(),
            points: vec![(1.0, 1.0), (2.0, 3.0)],
        })
        .collect()
}

/// The opening tag of the `<text>` element whose text is `text`.
fn text_tag<'a>(svg: &'a str, text: &str) -> &'a str {
    let end = svg
        .find(&format!(">\n{text}\n</text>"))
        .unwrap_or_else(|| panic!("no text {text:?} in {svg}"));
    &svg[svg[..end].rfind("<text").unwrap()..end]
}

/// Attribute `name` of `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let at = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
    &tag[at..at + tag[at..].find('"').unwrap()]
}

#[test]
fn a_chart_has_a_line_and_points_per_series_and_escapes_text() {
    let svg = line_chart(
        "a <b>",
        "rows",
        "rows/s",
        &[
            Series {
                name: "x & y".into(),
                points: vec![(1.0, 2.0), (2.0, 3.0), (3.0, 2.5)],
            },
            Series {
                name: "z".into(),
                points: vec![(1.0, f64::NAN), (2.0, 1.0), (3.0, 4.0)],
            },
        ],
        "tidemark-bench links --plot-dir <dir>",
    )
    .unwrap();
    assert!(svg.starts_with(r#"<svg width="860" height="480""#), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    // One 2 px line per series, in the first two colours; a circle per finite point.
    assert_eq!(
        svg.matches(r##"stroke="#D62728" stroke-width="2""##)
            .count(),
        1
    );
    assert_eq!(
        svg.matches(r##"stroke="#1F77B4" stroke-width="2""##)
            .count(),
        1
    );
    assert_eq!(svg.matches(r##"<circle"##).count(), 5, "{svg}");
    // Text is escaped; the command line is at the foot.
    text_tag(&svg, "a &lt;b&gt;");
    text_tag(&svg, "x &amp; y");
    let foot = text_tag(
        &svg,
        "regenerate: tidemark-bench links --plot-dir &lt;dir&gt;",
    );
    assert_eq!(attr(foot, "font-size"), "9");
    // Axes from zero; the largest y is 4, with a tenth of headroom the axis ends at 4.4.
    text_tag(&svg, "0");
    text_tag(&svg, "4");
    text_tag(&svg, "rows/s");
}

#[test]
fn long_legend_labels_get_a_row_each_and_the_chart_grows() {
    let short = line_chart("t", "x", "y", &series(&["a", "b", "c"]), "cmd").unwrap();
    assert!(short.contains(r#"height="480""#));
    // Two columns: b beside a, c under a.
    let (a, b, c) = (
        text_tag(&short, "a"),
        text_tag(&short, "b"),
        text_tag(&short, "c"),
    );
    assert_eq!(attr(a, "x"), attr(c, "x"));
    assert_eq!(attr(a, "y"), attr(b, "y"));
    assert_eq!(
        attr(b, "x"),
        "481",
        "half the plot's width (750 px) further right"
    );

    let long = "l".repeat(LEGEND_CHARS + 1);
    let tall = line_chart("t", "x", "y", &series(&[&long, "b", "c"]), "cmd").unwrap();
    assert!(tall.contains(r#"height="494""#), "one row more");
    // One column: each label at the legend's left edge, a row below the one before.
    let (l, b, c) = (
        text_tag(&tall, &long),
        text_tag(&tall, "b"),
        text_tag(&tall, "c"),
    );
    assert!([l, b, c].iter().all(|t| attr(t, "x") == attr(a, "x")));
    let y = |t: &str| attr(t, "y").parse::<i32>().unwrap();
    assert_eq!((y(b) - y(l), y(c) - y(b)), (14, 14));
}

#[test]
fn ticks_are_short() {
    assert_eq!(tick(0.0), "0");
    assert_eq!(tick(0.25), "0.25");
    assert_eq!(tick(2.5), "2.5");
    assert_eq!(tick(5.0), "5");
    assert_eq!(tick(250.0), "250");
    assert_eq!(tick(2_500.0), "2.5k");
    assert_eq!(tick(25_000.0), "25k");
    assert_eq!(tick(2_500_000.0), "2.5M");
}
