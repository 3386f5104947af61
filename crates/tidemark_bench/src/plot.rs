//! A small SVG line chart for the benchmark figures (`--plot FILE.svg`), written without any
//! plotting library: axes from zero to the largest value, five ticks each, one polyline and a
//! legend entry per series. The command that produced it is written into the chart, so the file
//! says how to regenerate it.

use std::fmt::Write as _;
use std::path::Path;

/// One named series of `(x, y)` points.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Legend text.
    pub(crate) name: String,
    /// Points, in x order.
    pub(crate) points: Vec<(f64, f64)>,
}

const W: f64 = 860.0;
const H: f64 = 480.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 90.0;
/// Longest legend label that fits half the plot width.
const LEGEND_CHARS: usize = 55;
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The SVG text of a chart.
pub(crate) fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (max_x, max_y) = all.fold((0.0f64, 0.0f64), |(mx, my), &(x, y)| {
        (mx.max(x), my.max(if y.is_finite() { y } else { 0.0 }))
    });
    let (max_x, max_y) = (max_x.max(1e-9), (max_y * 1.1).max(1e-9));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    // Legend: two columns, or one when a label would run into its neighbour; the chart grows
    // by a line for every legend row past the second.
    let cols = if series.iter().any(|s| s.name.chars().count() > LEGEND_CHARS) {
        1
    } else {
        2
    };
    let height = H + 14.0 * series.len().div_ceil(cols).saturating_sub(2) as f64;
    let px = |x: f64| LEFT + x / max_x * pw;
    let py = |y: f64| TOP + ph - y / max_y * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="24" font-size="15" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    for i in 0..=5 {
        let f = f64::from(i) / 5.0;
        let (x, y) = (px(f * max_x), py(f * max_y));
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            tick(f * max_y),
            TOP + ph + 18.0,
            tick(f * max_x)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#333"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"##,
        TOP + ph,
        TOP + ph,
        W - RIGHT,
        TOP + ph,
        LEFT + pw / 2.0,
        TOP + ph + 40.0,
        esc(x_label),
        TOP + ph / 2.0,
        esc(y_label)
    );
    for (i, ser) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = ser
            .points
            .iter()
            .filter(|(_, y)| y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(s, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
        }
        let ly = TOP + ph + 58.0 + 14.0 * (i / cols) as f64;
        let lx = LEFT + (i % cols) as f64 * pw / 2.0;
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="4" fill="{color}"/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
            ly - 5.0,
            lx + 16.0,
            esc(&ser.name)
        );
    }
    let command: Vec<String> = std::env::args().collect();
    let _ = write!(
        s,
        r##"<text x="{W}" y="{:.1}" font-size="9" fill="#666" text-anchor="end">{}</text></svg>"##,
        height - 4.0,
        esc(&format!("regenerate: {}", command.join(" ")))
    );
    s.push('\n');
    s
}

/// Writes the chart to `path` (creating its directory) and says so on stderr.
pub(crate) fn write_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, line_chart(title, x_label, y_label, series))?;
    eprintln!("plot: {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_a_line_per_series_and_escapes_text() {
        let svg = line_chart(
            "a <b>",
            "rows",
            "rows/s",
            &[
                Series {
                    name: "x & y".into(),
                    points: vec![(1.0, 2.0), (2.0, 3.0)],
                },
                Series {
                    name: "z".into(),
                    points: vec![(1.0, f64::NAN), (2.0, 1.0)],
                },
            ],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt;b&gt;") && svg.contains("x &amp; y"));
        assert!(svg.contains("regenerate: "));
    }

    #[test]
    fn long_legend_labels_get_a_row_each_and_the_chart_grows() {
        let series = |names: &[&str]| -> Vec<Series> {
            names
                .iter()
                .map(|n| Series {
                    name: (*n).into(),
                    points: vec![(1.0, 1.0)],
                })
                .collect()
        };
        let short = line_chart("t", "x", "y", &series(&["a", "b", "c"]));
        assert!(short.contains(r#"height="480""#));
        assert!(
            short.contains(r#"<text x="481.0" y="448.0">b</text>"#),
            "b beside a"
        );
        let long = "l".repeat(LEGEND_CHARS + 1);
        let long = line_chart("t", "x", "y", &series(&[&long, "b", "c"]));
        assert!(long.contains(r#"height="494""#));
        assert!(
            long.contains(r#"<text x="106.0" y="462.0">b</text>"#),
            "b below"
        );
        assert!(long.contains(r#"<text x="106.0" y="476.0">c</text>"#));
    }
}
