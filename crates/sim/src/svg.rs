//! A small SVG line-plot writer for CDFs: axes with "nice" ticks, labels, a legend, several
//! curves. Hand-written (no plotting dependency); the output opens in any browser.

use core::fmt::Write as _;

/// One curve.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points `(x, y)`, in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Dashed (e.g. a reference curve from the paper).
    pub dashed: bool,
}

/// A plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    /// Title above the plot.
    pub title: String,
    /// Label under the x axis.
    pub x_label: String,
    /// Label beside the y axis.
    pub y_label: String,
    /// Curves.
    pub series: Vec<Series>,
    /// Fixed y range; `None` fits the data.
    pub y_range: Option<(f64, f64)>,
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 460.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

impl Plot {
    /// A CDF plot: x in `x_label` units, y the percentile 0..100.
    pub fn cdf(title: &str, x_label: &str) -> Self {
        Self {
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: "percentile of messages".to_owned(),
            series: Vec::new(),
            y_range: Some((0.0, 100.0)),
        }
    }

    /// Adds a curve.
    pub fn add(&mut self, label: &str, points: Vec<(f64, f64)>, dashed: bool) {
        self.series.push(Series {
            label: label.to_owned(),
            points,
            dashed,
        });
    }

    /// The SVG document.
    pub fn render(&self) -> String {
        let finite = |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
        let all: Vec<&(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(finite)
            .collect();
        let (x_min, x_max) = bounds(all.iter().map(|p| p.0));
        let (y_min, y_max) = self
            .y_range
            .unwrap_or_else(|| bounds(all.iter().map(|p| p.1)));
        let x_ticks = nice_ticks(x_min, x_max, 8);
        let y_ticks = nice_ticks(y_min, y_max, 6);
        let (x_lo, x_hi) = (x_ticks[0], *x_ticks.last().expect("at least two ticks"));
        let (y_lo, y_hi) = (y_ticks[0], *y_ticks.last().expect("at least two ticks"));
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let sx = |x: f64| LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w;
        let sy = |y: f64| TOP + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h;

        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        // Grid and ticks.
        for &x in &x_ticks {
            let px = sx(x);
            let _ = writeln!(
                out,
                r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#e5e5e5"/>"##,
                TOP + plot_h
            );
            let _ = writeln!(
                out,
                r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                TOP + plot_h + 16.0,
                format_tick(x)
            );
        }
        for &y in &y_ticks {
            let py = sy(y);
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e5e5e5"/>"##,
                LEFT + plot_w
            );
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                py + 4.0,
                format_tick(y)
            );
        }
        let _ = writeln!(
            out,
            r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 18.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            out,
            r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        // Curves, clipped to the plot area.
        let _ = writeln!(
            out,
            r#"<clipPath id="area"><rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/></clipPath>"#
        );
        for (i, series) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut path = String::new();
            for &(x, y) in series
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
            {
                let _ = write!(path, "{:.1},{:.1} ", sx(x), sy(y));
            }
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = writeln!(
                out,
                r#"<polyline clip-path="url(#area)" fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
                path.trim_end()
            );
        }
        // Legend, bottom right inside the plot.
        let rows = self.series.len() as f64;
        let legend_w =
            12.0 + 7.0 * self.series.iter().map(|s| s.label.len()).max().unwrap_or(0) as f64 + 36.0;
        let legend_x = LEFT + plot_w - legend_w - 10.0;
        let legend_y = TOP + plot_h - 10.0 - rows * 18.0 - 6.0;
        let _ = writeln!(
            out,
            r##"<rect x="{legend_x:.1}" y="{legend_y:.1}" width="{legend_w:.1}" height="{:.1}" fill="white" fill-opacity="0.85" stroke="#999"/>"##,
            rows * 18.0 + 8.0
        );
        for (i, series) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let y = legend_y + 16.0 + i as f64 * 18.0;
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = writeln!(
                out,
                r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2"{dash}/>"#,
                legend_x + 8.0,
                y - 4.0,
                legend_x + 32.0,
                y - 4.0
            );
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{y:.1}">{}</text>"#,
                legend_x + 38.0,
                escape(&series.label)
            );
        }
        out.push_str("</svg>\n");
        out
    }
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi <= lo { (lo, lo + 1.0) } else { (lo, hi) }
}

/// Ticks at a 1-2-5 step covering `[lo, hi]`, about `count` of them (at least two).
pub fn nice_ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    assert!(hi > lo && count >= 2);
    let raw = (hi - lo) / count as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut t = first;
    // Up to and including the first tick at or past `hi` (with a little slack for rounding).
    loop {
        ticks.push(t);
        if t >= hi - step * 1e-9 || ticks.len() > 4 * count {
            break;
        }
        t += step;
    }
    if ticks.len() < 2 {
        ticks.push(first + step);
    }
    ticks
}

fn format_tick(v: f64) -> String {
    if v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}").trim_end_matches('0').to_owned()
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 100.0, 5),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        let ticks = nice_ticks(113.0, 402.0, 8);
        assert!(
            ticks[0] <= 113.0 && *ticks.last().unwrap() >= 402.0,
            "{ticks:?}"
        );
        assert_eq!(ticks[1] - ticks[0], 50.0);
    }

    #[test]
    fn renders_every_curve_and_the_legend() {
        let mut plot = Plot::cdf("OML <a&b>", "µs");
        plot.add(
            "H=0",
            vec![(100.0, 0.0), (200.0, 50.0), (400.0, 100.0)],
            false,
        );
        plot.add("paper H=0", vec![(124.0, 1.0), (401.0, 99.0)], true);
        let svg = plot.render();
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("OML &lt;a&amp;b&gt;"));
        assert!(svg.contains(">paper H=0</text>"));
        assert!(svg.contains("stroke-dasharray"));
    }
}
