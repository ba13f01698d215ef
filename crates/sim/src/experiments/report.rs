//! One seed's report: each case's result, every percentile beside the paper's, the verdicts,
//! and the files of the output directory (JSON, CSV, text, one SVG CDF per figure).

use core::fmt::Write as _;
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::verdicts::verdicts;
use super::{
    CurveSpec, Metric, PAPER_FIGURES_CSV, RanCases, Scale, Verdict, figures, paper_curves,
};
use crate::report::{Percentiles, Summary, csv_field, csv_field_always_quoted};
use crate::svg::Plot;

/// The result of one [`Case`](super::Case).
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// Gateways.
    pub receivers: u32,
    /// Model preset name.
    pub model: String,
    /// The summary.
    pub summary: Summary,
    /// Per-participant OML with receiver hedging.
    pub participant_oml: Option<Percentiles>,
    /// |clock error| of non-root nodes while measuring, ns: p50, p99, max.
    pub clock_error_ns: [u64; 3],
    /// CDF points per metric (for plots).
    #[serde(skip)]
    pub cdfs: BTreeMap<&'static str, Vec<(f64, f64)>>,
}

impl CaseResult {
    /// The percentiles of `metric`.
    pub fn percentiles(&self, metric: Metric) -> Percentiles {
        let s = &self.summary;
        match metric {
            Metric::OmlReceipt => s.truth.oml_receipt.clone(),
            Metric::OmlRelease => s.truth.oml_release.clone(),
            Metric::DwsReceipt => s.truth.dws_receipt.clone(),
            Metric::DwsRelease => s.exchange.dws_release.clone(),
            Metric::Holding => s.truth.holding.clone(),
            Metric::ParticipantOml => self.participant_oml.clone().unwrap_or_default(),
            Metric::Owd => s.truth.owd.clone(),
        }
    }

    /// The value of `metric` at percentile `p` (one of
    /// [`PAPER_PERCENTILES`](super::PAPER_PERCENTILES)).
    pub fn at(&self, metric: Metric, p: f64) -> f64 {
        let q = self.percentiles(metric);
        match p as u32 {
            1 => q.p1,
            10 => q.p10,
            25 => q.p25,
            50 => q.p50,
            75 => q.p75,
            90 => q.p90,
            95 => q.p95,
            _ => q.p99,
        }
    }
}

/// One number of ours beside the paper's.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// Figure.
    pub figure: String,
    /// Curve.
    pub curve: String,
    /// Metric.
    pub metric: String,
    /// Percentile.
    pub percentile: f64,
    /// Ours, µs.
    pub ours: f64,
    /// The paper's, µs (`None`: off the paper's chart).
    pub paper: Option<f64>,
}

/// Everything [`paper_outbound`](super::paper_outbound) found.
#[derive(Clone, Debug, Serialize)]
pub struct OutboundReport {
    /// Quick mode.
    pub quick: bool,
    /// Each case's result.
    pub cases: Vec<CaseResult>,
    /// Each percentile beside the paper's.
    pub comparisons: Vec<Comparison>,
    /// Shape checks.
    pub verdicts: Vec<Verdict>,
    /// The cases a stop (Ctrl-C) left unrun or abandoned part way; empty for a whole
    /// campaign.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<String>,
    /// The printed report.
    pub text: String,
}

impl OutboundReport {
    /// The result of case `name`.
    pub fn case(&self, name: &str) -> Option<&CaseResult> {
        self.cases.iter().find(|c| c.name == name)
    }
}

pub(super) fn build_report(
    quick: bool,
    seed: u64,
    cases: RanCases,
) -> Result<OutboundReport, String> {
    let RanCases {
        ran: cases,
        not_run,
    } = cases;
    let paper = paper_curves(PAPER_FIGURES_CSV)?;
    let find = |name: &str| cases.iter().find(|c| c.name == name);
    let mut text = String::new();
    let mut comparisons = Vec::new();
    let _ = writeln!(
        text,
        "Jasper outbound experiments vs the paper ({} mode, seed {seed:#x}; µs; ratio = ours/paper)",
        if quick { "quick" } else { "full" }
    );
    if !not_run.is_empty() {
        let _ = writeln!(
            text,
            "Interrupted (Ctrl-C): {} of {} cases ran whole, and below are the figures and \
             verdicts they complete. Not run: {}.",
            cases.len(),
            cases.len() + not_run.len(),
            not_run.join(", ")
        );
    }
    for figure in figures(Scale { quick }) {
        let curves: Vec<(&CurveSpec, &CaseResult)> = figure
            .curves
            .iter()
            .filter_map(|c| find(&c.case).map(|r| (c, r)))
            .collect();
        if curves.is_empty() {
            continue;
        }
        let _ = writeln!(text, "\n{} — {}", figure.figure, figure.metric.name());
        let _ = writeln!(
            text,
            "  {:<32} {:>5} {:>9} {:>9} {:>7}",
            "curve (case)", "pct", "ours", "paper", "ratio"
        );
        for (spec, result) in curves {
            let paper_curve = paper
                .iter()
                .find(|p| p.figure == figure.figure && p.curve == spec.paper_curve);
            for p in [10.0, 50.0, 90.0, 99.0] {
                let ours = result.at(figure.metric, p);
                let theirs = paper_curve.and_then(|c| c.at(p));
                let ratio = theirs
                    .filter(|&t| t > 0.0)
                    .map_or_else(|| "-".to_owned(), |t| format!("{:.2}", ours / t));
                let _ = writeln!(
                    text,
                    "  {:<32} {:>5} {:>9.1} {:>9} {:>7}",
                    format!("{} ({})", spec.paper_curve, spec.case),
                    format!("p{p}"),
                    ours,
                    theirs.map_or_else(|| "off".to_owned(), |t| format!("{t:.1}")),
                    ratio
                );
                comparisons.push(Comparison {
                    figure: figure.figure.to_owned(),
                    curve: spec.paper_curve.to_owned(),
                    metric: figure.metric.name().to_owned(),
                    percentile: p,
                    ours,
                    paper: theirs,
                });
            }
        }
    }
    let (verdicts, extra, missing) = verdicts(&cases);
    text.push_str(&extra);
    let _ = writeln!(text, "\nShape verdicts (ratio = worse/better):");
    if !missing.is_empty() {
        let _ = writeln!(
            text,
            "  (not run here: {}; the verdicts and table rows on them are left out)",
            missing.join(", ")
        );
    }
    for v in &verdicts {
        let _ = writeln!(
            text,
            "  [{}] {}: {} — paper {:.2}, ours {:.2}",
            if v.ok { "ok" } else { "MISMATCH" },
            v.experiment,
            v.claim,
            v.paper_ratio,
            v.our_ratio
        );
    }
    let ok = verdicts.iter().filter(|v| v.ok).count();
    let _ = writeln!(text, "{ok}/{} shapes match the paper.", verdicts.len());
    if ok < verdicts.len() {
        let _ = writeln!(
            text,
            "What each mismatch is, and what was tried: docs/results/paper-outbound.md, \
             \"Shapes that still do not match\" (two of the paper's own tables, 5 and 8, \
             cannot both hold)."
        );
    }
    let _ = writeln!(
        text,
        "\nClock sync (|error| of non-root nodes, ns: p50 / p99 / max) and cost per case:"
    );
    for c in &cases {
        let _ = writeln!(
            text,
            "  {:<18} N={:<5} {:<10} clock {:>6} / {:>6} / {:>7}  P(F) true {:>5.1}% exch {:>5.1}%  loss {:.4}%  MPS {:>6.0}  {:>10} events",
            c.name,
            c.receivers,
            c.model,
            c.clock_error_ns[0],
            c.clock_error_ns[1],
            c.clock_error_ns[2],
            c.summary.truth.fairness_percent,
            c.summary.exchange.fairness_percent,
            c.summary.loss_percent,
            c.summary.mps,
            c.summary.sim.events
        );
    }
    Ok(OutboundReport {
        quick,
        cases,
        comparisons,
        verdicts,
        not_run,
        text,
    })
}

pub(super) fn write_outputs(dir: &Path, report: &OutboundReport) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(report).expect("serialisable"),
    )?;
    std::fs::write(dir.join("report.txt"), &report.text)?;
    let mut csv = String::from("figure,curve,metric,percentile,ours_us,paper_us,ratio\n");
    for c in &report.comparisons {
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.3},{},{}",
            csv_field(&c.figure),
            csv_field(&c.curve),
            csv_field(&c.metric),
            c.percentile,
            c.ours,
            c.paper.map_or_else(String::new, |p| format!("{p}")),
            c.paper
                .filter(|&p| p > 0.0)
                .map_or_else(String::new, |p| format!("{:.3}", c.ours / p))
        );
    }
    std::fs::write(dir.join("comparison.csv"), csv)?;
    let mut csv = String::from("experiment,claim,paper,ours,ok\n");
    for v in &report.verdicts {
        let _ = writeln!(
            csv,
            "{},{},{:.3},{:.3},{}",
            csv_field(&v.experiment),
            csv_field_always_quoted(&v.claim),
            v.paper_ratio,
            v.our_ratio,
            v.ok
        );
    }
    std::fs::write(dir.join("verdicts.csv"), csv)?;
    let paper = paper_curves(PAPER_FIGURES_CSV).map_err(std::io::Error::other)?;
    let mut plots: BTreeMap<&str, Plot> = BTreeMap::new();
    for figure in figures(Scale {
        quick: report.quick,
    }) {
        for spec in &figure.curves {
            let Some(result) = report.case(&spec.case) else {
                continue;
            };
            let plot = plots.entry(figure.figure).or_insert_with(|| {
                Plot::cdf(
                    &format!("{} (ours solid, paper dashed)", figure.figure),
                    &format!("{} (µs)", figure.metric.name()),
                )
            });
            let points = result
                .cdfs
                .get(figure.metric.name())
                .cloned()
                .unwrap_or_default();
            // Cut the long tail so the body of the curves stays readable.
            let points: Vec<(f64, f64)> = points.into_iter().filter(|p| p.1 <= 99.5).collect();
            plot.add(&format!("{} (ours)", spec.paper_curve), points, false);
            if let Some(p) = paper
                .iter()
                .find(|p| p.figure == figure.figure && p.curve == spec.paper_curve)
            {
                plot.add_paired(&format!("{} (paper)", spec.paper_curve), p.points());
            }
        }
    }
    for (name, plot) in plots {
        std::fs::write(dir.join(format!("{name}.svg")), plot.render())?;
    }
    Ok(())
}
