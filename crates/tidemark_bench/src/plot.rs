//! The SVG line charts of the benchmark figures (`--plot-dir DIR`), drawn with `plotters`' SVG
//! backend: axes from zero to the largest value (y with a tenth of headroom), one line with its
//! points per series, and a legend under the plot. The command that produced a chart is written at
//! its foot, so the file says how to regenerate it.
//!
//! Text is laid out by `plotters`' built-in estimate, not with system fonts (its `ttf` feature
//! is off): an SVG viewer renders the text itself, and the benchmark needs no font library.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One named series of `(x, y)` points.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Legend text.
    pub(crate) name: String,
    /// Points, in x order; a point whose y is not finite is left out.
    pub(crate) points: Vec<(f64, f64)>,
}

/// Width of a chart, px.
const W: u32 = 860;
/// Height of a chart whose legend has at most two rows, px.
const H: u32 = 480;
/// Height of the legend's first two rows and the command line under the plot, px.
const FOOT: u32 = 64;
/// Height of one legend row, px.
const ROW: u32 = 14;
/// Room left of the y axis: a margin, then the tick labels and the axis title, px.
const MARGIN_LEFT: u32 = 12;
const Y_LABELS: u32 = 78;
/// Left edge of the legend, px: the plot's left edge.
const LEGEND_LEFT: i32 = (MARGIN_LEFT + Y_LABELS) as i32;
/// Longest legend label that fits half the plot width.
const LEGEND_CHARS: usize = 55;
const COLORS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];
const GREY: RGBColor = RGBColor(0x66, 0x66, 0x66);

/// An axis tick: `0`, `0.25`, `2.5`, `250`, `2.5k`, `25k`, `2.5M`.
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
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Sans-serif text whose SVG `font-size` is `px` (`plotters` writes a font's size divided by
/// 1.24, the line height it assumes).
fn font(px: f64) -> TextStyle<'static> {
    TextStyle::from(("sans-serif", px * 1.24).into_font())
}

/// Legend columns: two, or one when a label would run into its neighbour.
fn legend_columns(series: &[Series]) -> usize {
    if series.iter().any(|s| s.name.chars().count() > LEGEND_CHARS) {
        1
    } else {
        2
    }
}

/// The SVG text of a chart; `command` is written at its foot.
pub(crate) fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    command: &str,
) -> anyhow::Result<String> {
    let finite = |s: &Series| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect()
    };
    let (max_x, max_y) = series
        .iter()
        .flat_map(finite)
        .fold((0.0f64, 0.0f64), |(mx, my), (x, y)| (mx.max(x), my.max(y)));
    let (max_x, max_y) = (max_x.max(1e-9), (max_y * 1.1).max(1e-9));
    let cols = legend_columns(series);
    // The chart grows by a row for every legend row past the second.
    let rows = u32::try_from(series.len().div_ceil(cols)).unwrap_or(u32::MAX);
    let height = H + ROW * rows.saturating_sub(2);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot_area, foot) = root.split_vertically(height - FOOT - ROW * rows.saturating_sub(2));
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(title, font(15.0))
            .margin_top(10)
            .margin_left(MARGIN_LEFT)
            .margin_right(20)
            .x_label_area_size(44)
            .y_label_area_size(Y_LABELS)
            .build_cartesian_2d(0f64..max_x, 0f64..max_y)?;
        let ticks = |v: &f64| tick(*v);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .max_light_lines(0)
            .x_labels(8)
            .y_labels(8)
            .x_label_formatter(&ticks)
            .y_label_formatter(&ticks)
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(font(12.0))
            .axis_desc_style(font(12.0))
            .draw()?;
        let col_width = (W as i32 - LEGEND_LEFT - 20) / 2;
        for (i, s) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points = finite(s);
            chart.draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?;
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            let row = i32::try_from(i / cols).unwrap_or(i32::MAX);
            let x = LEGEND_LEFT + i32::try_from(i % cols).unwrap_or(0) * col_width;
            let y = 12 + row * ROW as i32;
            foot.draw(&Rectangle::new(
                [(x, y - 2), (x + 12, y + 2)],
                color.filled(),
            ))?;
            foot.draw(&Text::new(
                s.name.clone(),
                (x + 16, y),
                font(12.0).pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
        }
        let (foot_w, foot_h) = foot.dim_in_pixel();
        foot.draw(&Text::new(
            format!("regenerate: {command}"),
            (
                i32::try_from(foot_w).unwrap_or(0) - 4,
                i32::try_from(foot_h).unwrap_or(0) - 4,
            ),
            font(9.0)
                .color(&GREY)
                .pos(Pos::new(HPos::Right, VPos::Bottom)),
        ))?;
        root.present()?;
    }
    Ok(svg)
}

/// Writes the chart to `path` (creating its directory), with this process's command line at
/// its foot, and says so on stderr.
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
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    std::fs::write(path, line_chart(title, x_label, y_label, series, &command)?)?;
    eprintln!("plot: {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests;
