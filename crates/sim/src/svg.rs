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
    /// Index into the palette: a curve and its reference (see [`Plot::add_paired`]) share one.
    pub color: usize,
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
    /// A logarithmic x axis whose left edge is at most this value: smaller values (zero
    /// included) are drawn at it. `None`: a linear x axis.
    pub x_log_floor: Option<f64>,
    /// The same for the y axis.
    pub y_log_floor: Option<f64>,
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 460.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
/// A curve of at most this many points has each point marked.
const MARKED_POINTS_MAX: usize = 24;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

impl Plot {
    /// A CDF plot: x in `x_label` units, y the percentile 0..100.
    pub fn cdf(title: &str, x_label: &str) -> Self {
        Self {
            y_range: Some((0.0, 100.0)),
            ..Self::lines(title, x_label, "percentile of messages")
        }
    }

    /// A line plot of `series` over x, the y range fitted to the data.
    pub fn lines(title: &str, x_label: &str, y_label: &str) -> Self {
        Self {
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            series: Vec::new(),
            y_range: None,
            x_log_floor: None,
            y_log_floor: None,
        }
    }

    /// This plot with a logarithmic x axis (decades), for curves whose scales differ by orders
    /// of magnitude (DWS at receipt, ~100 µs, beside DWS at release, ~0.1 µs); values below
    /// `floor` (zero included) are drawn at it. `floor` must be positive.
    #[must_use]
    pub fn log_x(mut self, floor: f64) -> Self {
        self.x_log_floor = Some(log_floor(floor));
        self
    }

    /// [`Plot::log_x`] for the y axis (a latency that differs by orders of magnitude between
    /// curves); a fixed `y_range` is then taken in values, not decades.
    #[must_use]
    pub fn log_y(mut self, floor: f64) -> Self {
        self.y_log_floor = Some(log_floor(floor));
        self
    }

    /// Adds a curve in the next colour of the palette.
    pub fn add(&mut self, label: &str, points: Vec<(f64, f64)>, dashed: bool) {
        let color = self.series.last().map_or(0, |last| last.color + 1);
        self.series.push(Series {
            label: label.to_owned(),
            points,
            dashed,
            color,
        });
    }

    /// Adds a dashed curve in the colour of the last one: the same quantity seen another way
    /// (the paper's figure beside ours, exchange time beside true time), so a reader matches
    /// the two by colour rather than through the legend.
    pub fn add_paired(&mut self, label: &str, points: Vec<(f64, f64)>) {
        let color = self.series.last().map_or(0, |last| last.color);
        self.series.push(Series {
            label: label.to_owned(),
            points,
            dashed: true,
            color,
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
        let x_axis = Axis::new(all.iter().map(|p| p.0), self.x_log_floor, None, 8);
        let y_axis = Axis::new(all.iter().map(|p| p.1), self.y_log_floor, self.y_range, 6);
        let (x_lo, x_hi) = x_axis.span();
        let (y_lo, y_hi) = y_axis.span();
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        // Pixels from axis coordinates (log10 of the value on a log axis), and from a point.
        let sx = |c: f64| LEFT + (c - x_lo) / (x_hi - x_lo) * plot_w;
        let sy = |c: f64| TOP + plot_h - (c - y_lo) / (y_hi - y_lo) * plot_h;
        let at = |&(x, y): &(f64, f64)| (sx(x_axis.coord(x)), sy(y_axis.coord(y)));

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
        // Grid and ticks (on a log axis, a fainter line at 2..9 times each decade).
        let line = |out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), color: &str| {
            let _ = writeln!(
                out,
                r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{color}"/>"#
            );
        };
        let (bottom, right) = (TOP + plot_h, LEFT + plot_w);
        for &c in &x_axis.minor {
            line(&mut out, (sx(c), TOP), (sx(c), bottom), MINOR_GRID);
        }
        for &c in &y_axis.minor {
            line(&mut out, (LEFT, sy(c)), (right, sy(c)), MINOR_GRID);
        }
        for &c in &x_axis.ticks {
            line(&mut out, (sx(c), TOP), (sx(c), bottom), GRID);
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                sx(c),
                bottom + 16.0,
                x_axis.label(c)
            );
        }
        for &c in &y_axis.ticks {
            line(&mut out, (LEFT, sy(c)), (right, sy(c)), GRID);
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                sy(c) + 4.0,
                y_axis.label(c)
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
        // The y label clear of the widest tick label (~7 px a character).
        let widest = y_axis
            .ticks
            .iter()
            .map(|&c| y_axis.label(c).chars().count())
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            r#"<text transform="translate({:.1} {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            (LEFT - 14.0 - 7.0 * widest as f64).clamp(12.0, 18.0),
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );
        // Curves, clipped to the plot area.
        let _ = writeln!(
            out,
            r#"<clipPath id="area"><rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/></clipPath>"#
        );
        // Each curve's finite points, in drawing coordinates (for the curve, its markers and
        // the legend's placement).
        let pixels: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|series| series.points.iter().filter(finite).map(at).collect())
            .collect();
        for (series, points) in self.series.iter().zip(&pixels) {
            let color = COLORS[series.color % COLORS.len()];
            let mut path = String::new();
            for (px, py) in points {
                let _ = write!(path, "{px:.1},{py:.1} ");
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
            // A few measured points (a sweep, not a CDF): mark each, so the straight lines
            // between them do not read as measured.
            if series.points.len() <= MARKED_POINTS_MAX {
                for (px, py) in points {
                    let _ = writeln!(
                        out,
                        r#"<circle clip-path="url(#area)" cx="{px:.1}" cy="{py:.1}" r="3" fill="{color}"/>"#
                    );
                }
            }
        }
        // Legend inside the plot, where it hides the fewest curve points (bottom right first:
        // where CDFs that rise early leave room).
        let rows = self.series.len() as f64;
        let legend_w = 12.0
            + 7.0
                * self
                    .series
                    .iter()
                    .map(|s| s.label.chars().count())
                    .max()
                    .unwrap_or(0) as f64
            + 36.0;
        let legend_h = rows * 18.0 + 8.0;
        let (left_x, right_x) = (LEFT + 10.0, LEFT + plot_w - legend_w - 10.0);
        let (top_y, bottom_y) = (TOP + 10.0, TOP + plot_h - 10.0 - legend_h);
        // Each curve's points and 7 more along each of its segments, in drawing coordinates.
        let mut drawn: Vec<(f64, f64)> = Vec::new();
        for points in &pixels {
            drawn.extend(points.first());
            for pair in points.windows(2) {
                let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
                drawn.extend((1..=8).map(|k| {
                    let t = f64::from(k) / 8.0;
                    (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t)
                }));
            }
        }
        let hidden = |&(x, y): &(f64, f64)| {
            drawn
                .iter()
                .filter(|p| (x..=x + legend_w).contains(&p.0) && (y..=y + legend_h).contains(&p.1))
                .count()
        };
        // The four corners, then along the bottom and the top edges (first wins a tie).
        let between = |k: f64| left_x + (right_x - left_x) * k / 4.0;
        let places = [
            (right_x, bottom_y),
            (left_x, top_y),
            (left_x, bottom_y),
            (right_x, top_y),
        ]
        .into_iter()
        .chain([3.0, 2.0, 1.0].into_iter().map(|k| (between(k), bottom_y)))
        .chain([1.0, 2.0, 3.0].into_iter().map(|k| (between(k), top_y)));
        let (legend_x, legend_y) = places.min_by_key(hidden).expect("ten places");
        let _ = writeln!(
            out,
            r##"<rect x="{legend_x:.1}" y="{legend_y:.1}" width="{legend_w:.1}" height="{legend_h:.1}" fill="white" fill-opacity="0.85" stroke="#999"/>"##
        );
        for (i, series) in self.series.iter().enumerate() {
            let color = COLORS[series.color % COLORS.len()];
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

/// `floor`, checked: a log axis needs a positive, finite one (a caller's constant).
fn log_floor(floor: f64) -> f64 {
    assert!(
        floor > 0.0 && floor.is_finite(),
        "a log axis needs a positive floor, got {floor}"
    );
    floor
}

const GRID: &str = "#e5e5e5";
const MINOR_GRID: &str = "#f2f2f2";

/// One axis of a plot: its ticks, in axis coordinates (the value, or its log10 on a log axis),
/// and how a value maps onto it.
struct Axis {
    log_floor: Option<f64>,
    ticks: Vec<f64>,
    /// Fainter lines between the ticks: 2..9 times each decade on a log axis, none otherwise.
    minor: Vec<f64>,
}

impl Axis {
    /// An axis over `values` (or over `range`, when fixed), with about `count` ticks when linear
    /// and one a decade when `log_floor` is set.
    fn new(
        values: impl Iterator<Item = f64>,
        log_floor: Option<f64>,
        range: Option<(f64, f64)>,
        count: usize,
    ) -> Self {
        let mut axis = Self {
            log_floor,
            ticks: Vec::new(),
            minor: Vec::new(),
        };
        let (lo, hi) = match range {
            Some((lo, hi)) => (axis.coord(lo), axis.coord(hi)),
            None => bounds(values.map(|v| axis.coord(v))),
        };
        (axis.ticks, axis.minor) = match log_floor {
            Some(_) => decade_ticks(lo, hi),
            None => (nice_ticks(lo, hi, count), Vec::new()),
        };
        axis
    }

    /// Where `value` sits on the axis.
    fn coord(&self, value: f64) -> f64 {
        match self.log_floor {
            Some(floor) => value.max(floor).log10(),
            None => value,
        }
    }

    /// The first and last tick: the ends of the axis.
    fn span(&self) -> (f64, f64) {
        (
            self.ticks[0],
            *self.ticks.last().expect("at least two ticks"),
        )
    }

    fn label(&self, tick: f64) -> String {
        match self.log_floor {
            Some(_) => format_decade(tick),
            None => format_tick(tick),
        }
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

/// Ticks at whole decades (exponents) covering `[lo, hi]` (log10 values, at least two), and
/// the minor ticks at 2..9 times each decade between them.
fn decade_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let first = lo.floor();
    let last = hi.ceil().max(first + 1.0);
    let mut ticks = Vec::new();
    let mut minor = Vec::new();
    let mut decade = first;
    while decade <= last {
        ticks.push(decade);
        if decade < last {
            minor.extend((2..10).map(|m| decade + f64::from(m).log10()));
        }
        decade += 1.0;
    }
    (ticks, minor)
}

/// The label of a decade tick (`exponent` a whole number): 0.01, 0.1, 1, 10, 100, ...
fn format_decade(exponent: f64) -> String {
    let value = 10f64.powf(exponent);
    if exponent >= 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.*}", (-exponent) as usize)
    }
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

    #[test]
    fn the_points_of_a_sweep_are_marked_and_those_of_a_cdf_are_not() {
        let mut plot = Plot::lines("matching rate", "k", "orders/s");
        plot.add("LOQ", vec![(1.0, 24.0), (3.0, 18.0), (5.0, 21.0)], false);
        plot.add("FIFO", vec![(1.0, 18.0), (3.0, f64::NAN), (5.0, 6.0)], true);
        let svg = plot.render();
        // Every finite point, in its curve's colour.
        assert_eq!(svg.matches("<circle").count(), 5);
        assert_eq!(
            svg.matches(&format!("r=\"3\" fill=\"{}\"", COLORS[0]))
                .count(),
            3
        );
        assert_eq!(
            svg.matches(&format!("r=\"3\" fill=\"{}\"", COLORS[1]))
                .count(),
            2
        );
        let mut cdf = Plot::cdf("OML", "µs");
        cdf.add(
            "H=0",
            (0..=100)
                .map(|p| (100.0 + f64::from(p), f64::from(p)))
                .collect(),
            false,
        );
        assert_eq!(cdf.render().matches("<circle").count(), 0);
    }

    #[test]
    fn a_paired_curve_takes_the_colour_of_the_one_before() {
        let mut plot = Plot::cdf("OML", "µs");
        plot.add("H=0 (ours)", vec![(100.0, 0.0), (200.0, 100.0)], false);
        plot.add_paired("H=0 (paper)", vec![(110.0, 0.0), (210.0, 100.0)]);
        plot.add("H=1 (ours)", vec![(90.0, 0.0), (190.0, 100.0)], false);
        plot.add_paired("H=1 (paper)", vec![(95.0, 0.0), (195.0, 100.0)]);
        let colors: Vec<usize> = plot.series.iter().map(|s| s.color).collect();
        assert_eq!(colors, [0, 0, 1, 1]);
        let svg = plot.render();
        let stroke = |color: &str| svg.matches(&format!("stroke=\"{color}\"")).count();
        // Two curves and two legend swatches in each of the first two colours, none in a third.
        assert_eq!(stroke(COLORS[0]), 4);
        assert_eq!(stroke(COLORS[1]), 4);
        assert_eq!(stroke(COLORS[2]), 0);
    }

    #[test]
    fn a_log_axis_spans_whole_decades_and_draws_zero_at_the_floor() {
        let mut plot = Plot::cdf("DWS", "µs").log_x(0.01);
        plot.add("receipt", vec![(120.0, 0.0), (350.0, 100.0)], false);
        plot.add(
            "release",
            vec![(0.0, 0.0), (0.13, 50.0), (46.0, 99.0)],
            false,
        );
        let svg = plot.render();
        for label in [">0.01<", ">0.1<", ">1<", ">10<", ">100<", ">1000<"] {
            assert!(svg.contains(label), "no tick {label} in {svg}");
        }
        assert!(!svg.contains(">10000<"));
        // The release curve's zero sits on the left edge of the plot, not off it.
        let release = svg
            .lines()
            .filter(|l| l.starts_with("<polyline"))
            .nth(1)
            .unwrap();
        assert!(
            release.contains(&format!("points=\"{LEFT:.1},")),
            "{release}"
        );
        assert_eq!(decade_ticks(-2.0, 2.5).0, [-2.0, -1.0, 0.0, 1.0, 2.0, 3.0]);
        assert_eq!(decade_ticks(-2.0, 2.5).1.len(), 5 * 8);
        assert_eq!(format_decade(-3.0), "0.001");
        assert_eq!(format_decade(2.0), "100");
    }

    #[test]
    fn a_log_y_axis_starts_at_the_datas_decade_and_keeps_its_label_clear() {
        let mut plot = Plot::lines("latency", "k", "ms").log_y(0.01);
        plot.add("LOQ", vec![(1.0, 0.95), (13.0, 0.93)], false);
        plot.add("FIFO", vec![(1.0, 183.0), (13.0, 196.0)], false);
        let svg = plot.render();
        // Decades from the data's (0.1) up, not from the floor (0.01).
        for label in [">0.1<", ">1<", ">10<", ">100<", ">1000<"] {
            assert!(svg.contains(label), "no tick {label} in {svg}");
        }
        assert!(!svg.contains(">0.01<"), "{svg}");
        // 0.95 ms is drawn inside the plot, between the 0.1 and 1 ms lines, not on the floor.
        let loq = svg.lines().find(|l| l.starts_with("<polyline")).unwrap();
        let y: f64 = loq
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split([',', ' '])
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let plot_h = HEIGHT - TOP - BOTTOM;
        let (at_1ms, at_0_1ms) = (TOP + plot_h * 3.0 / 4.0, TOP + plot_h);
        assert!(y > at_1ms && y < at_0_1ms, "{y} in {loq}");
        // Short tick labels leave the y label where it always was; "400000" pushes it left.
        assert!(svg.contains("translate(18.0 "), "{svg}");
        let mut wide = Plot::lines("latency", "k", "µs");
        wide.add("FIFO", vec![(1.0, 183_000.0), (13.0, 396_000.0)], false);
        assert!(
            wide.render().contains("translate(14.0 "),
            "{}",
            wide.render()
        );
    }
}
