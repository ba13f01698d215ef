//! The paper's outbound experiments, rerun on the calibrated model and printed beside the
//! paper's figures (DESIGN.md §6, `data/paper_figures.csv`).
//!
//! [`paper_outbound`] runs every case of [`cases`] (tree shapes; direct unicast vs
//! tree vs tree plus hedging; H = 0/1/2; RRPS under 15x bursts on the AWS and GCP models;
//! receiver hedging; hold-and-release with H = 2 against CloudEx; scaling; P(F) with
//! hold-and-release at N = 100 and 1000; the Appendix C Monte Carlo), prints each result
//! beside the paper's number with the ratio ours/paper, checks the *shape* of each result (who
//! wins, by roughly how much: [`Verdict`]), and writes `results.json`, `comparison.csv`,
//! `verdicts.csv`, `report.txt` and one SVG CDF per figure (the paper's curve dashed) into the
//! output directory. [`paper_outbound_seeds`] reruns the campaign on several seeds and judges
//! each verdict on the median of its ratios, which is what says whether a shape holds or was
//! one draw of the network.
//!
//! Settings are the paper's (§8): 100 receivers and 5K messages per second unless a figure
//! says otherwise (the text gives no other rate for direct unicast, the tree shapes of
//! Table 8, hold-and-release or scaling, so they run at 5K); RRPS: 125 receivers at 10K
//! messages per second with 15x bursts (the paper lost the burst length and period: we burst
//! for 0.5 ms every 20 ms, which puts ~28% of the messages in bursts). The AWS model
//! (`NetModel::aws_c5`) runs everything except the GCP half of the RRPS figure.
//!
//! A run is a [`Case`]: an [`OutboundConfig`] and a name. Cases shared by several figures
//! (the H = 1 tree is the "tree+hedging" curve of the ablation, the N = 100 point of the
//! scaling figure and the "no receiver hedging" baseline) run once.
//!
//! Which metric each figure plots: without hold-and-release, OML and DWS at receipt; with it,
//! OML and DWS at release and the holding time. OML and holding time are compared in true
//! time; DWS at release and P(F) in exchange time, which is what the paper could measure (its
//! gateways' clocks were synchronised by Huygens, as ours are by [`proto::clock`]); the
//! true-time P(F) is printed beside it.

use core::fmt::Write as _;
use core::sync::atomic::{AtomicBool, Ordering};
use std::collections::BTreeMap;
use std::path::Path;

use proto::plan::{PlanConfig, Shape};
use proto::stats::median;
use serde::Serialize;

use crate::network::NetModel;
use crate::report::{Percentiles, Summary, cdf_points};
use crate::scenario::{Burst, Ended, Outbound, OutboundConfig};
use crate::svg::Plot;

/// The paper's figures as numbers (a copy of `shared/data/paper/figures.csv`).
pub const PAPER_FIGURES_CSV: &str = include_str!("../data/paper_figures.csv");

/// The percentiles `figures.csv` lists, in column order.
pub const PAPER_PERCENTILES: [f64; 8] = [1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0];

/// One curve of one of the paper's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PaperCurve {
    /// Figure name (`oml_by_hedging_n100`, ...).
    pub figure: String,
    /// Curve label (`H=0`, ...).
    pub curve: String,
    /// Values at [`PAPER_PERCENTILES`], µs; `None` where the curve is off the chart.
    pub values: [Option<f64>; 8],
}

impl PaperCurve {
    /// The value at percentile `p` (one of [`PAPER_PERCENTILES`]).
    pub fn at(&self, p: f64) -> Option<f64> {
        let i = PAPER_PERCENTILES.iter().position(|&q| q == p)?;
        self.values[i]
    }

    /// The CDF points `(µs, percentile)` the paper gives.
    pub fn points(&self) -> Vec<(f64, f64)> {
        PAPER_PERCENTILES
            .iter()
            .zip(self.values)
            .filter_map(|(&p, v)| v.map(|v| (v, p)))
            .collect()
    }
}

/// Parses `figures.csv`.
pub fn paper_curves(csv: &str) -> Result<Vec<PaperCurve>, String> {
    let mut out = Vec::new();
    for (n, line) in csv.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != 10 {
            return Err(format!("figures.csv line {}: {} cells", n + 1, cells.len()));
        }
        let mut values = [None; 8];
        for (value, cell) in values.iter_mut().zip(&cells[2..]) {
            if !cell.is_empty() {
                *value = Some(
                    cell.parse::<f64>()
                        .map_err(|e| format!("figures.csv line {}: {e}", n + 1))?,
                );
            }
        }
        out.push(PaperCurve {
            figure: cells[0].to_owned(),
            curve: cells[1].to_owned(),
            values,
        });
    }
    Ok(out)
}

/// Which distribution of a run a figure plots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// OML at receipt, true time.
    OmlReceipt,
    /// OML at release, true time.
    OmlRelease,
    /// DWS at receipt, true time.
    DwsReceipt,
    /// DWS at release, exchange time.
    DwsRelease,
    /// Holding time, true time.
    Holding,
    /// OML over participants (first receipt of either gateway), true time.
    ParticipantOml,
    /// OWD at receipt, true time (its mean is Appendix C's number).
    Owd,
}

impl Metric {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Self::OmlReceipt => "OML",
            Self::OmlRelease => "OML (release)",
            Self::DwsReceipt => "DWS",
            Self::DwsRelease => "DWS (release, exch)",
            Self::Holding => "holding",
            Self::ParticipantOml => "OML (per MP)",
            Self::Owd => "OWD",
        }
    }
}

/// One simulation of an experiment.
#[derive(Clone, Debug)]
pub struct Case {
    /// Unique name (`n100_h1`).
    pub name: String,
    /// What to run.
    pub config: OutboundConfig,
}

/// The result of one [`Case`].
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

    /// The value of `metric` at percentile `p` (one of [`PAPER_PERCENTILES`]).
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

/// A curve of one of our figures: a case's metric against the paper's curve.
#[derive(Clone, Debug)]
pub struct CurveSpec {
    /// The paper's curve label in `figures.csv`.
    pub paper_curve: &'static str,
    /// The case that reproduces it.
    pub case: String,
}

/// A figure of the paper reproduced.
#[derive(Clone, Debug)]
pub struct FigureSpec {
    /// The figure's name in `figures.csv`.
    pub figure: &'static str,
    /// What it plots.
    pub metric: Metric,
    /// Its curves.
    pub curves: Vec<CurveSpec>,
}

/// A shape check: does "`better` beats `worse` by about the paper's factor" hold?
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// Experiment.
    pub experiment: String,
    /// The claim in words.
    pub claim: String,
    /// The paper's ratio worse/better.
    pub paper_ratio: f64,
    /// Ours.
    pub our_ratio: f64,
    /// Whether the shape matches.
    pub ok: bool,
    /// How `ok` follows from the two figures (kept so that a sweep over seeds can judge the
    /// median of its ratios by the same rule: [`paper_outbound_seeds`]).
    pub rule: Rule,
}

/// How a [`Verdict`] judges our figure against the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Rule {
    /// A shape ("better beats worse by about the paper's factor"): [`Verdict::new`].
    Shape,
    /// An absolute figure within a relative tolerance of the paper's: [`Verdict::close`].
    Close {
        /// Relative tolerance.
        tolerance: f64,
    },
}

impl Rule {
    /// Whether `ours` matches `paper` under this rule.
    pub fn judge(self, paper: f64, ours: f64) -> bool {
        match self {
            Self::Shape => {
                if (paper - 1.0).abs() <= 0.05 {
                    (ours - 1.0).abs() <= 0.15
                } else {
                    let margin = (ours - 1.0) / (paper - 1.0);
                    (0.4..=2.5).contains(&margin)
                }
            }
            Self::Close { tolerance } => paper != 0.0 && (ours / paper - 1.0).abs() <= tolerance,
        }
    }
}

impl Verdict {
    /// "better beats worse": ours must agree in direction, and its margin `ratio − 1` must be
    /// within a factor 2.5 of the paper's; when the paper shows a tie (within 5%), ours must be
    /// within 15%.
    pub fn new(experiment: &str, claim: String, paper_ratio: f64, our_ratio: f64) -> Self {
        Self::judged(experiment, claim, paper_ratio, our_ratio, Rule::Shape)
    }

    /// "ours is within `tolerance` (relative) of the paper's value" (absolute checks).
    pub fn close(experiment: &str, claim: String, paper: f64, ours: f64, tolerance: f64) -> Self {
        Self::judged(experiment, claim, paper, ours, Rule::Close { tolerance })
    }

    fn judged(experiment: &str, claim: String, paper: f64, ours: f64, rule: Rule) -> Self {
        Self {
            experiment: experiment.to_owned(),
            claim,
            paper_ratio: paper,
            our_ratio: ours,
            ok: rule.judge(paper, ours),
            rule,
        }
    }
}

/// How big and long the runs are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// Short runs, smaller N: CI.
    pub quick: bool,
}

impl Scale {
    /// Warm-up before measuring: [`crate::scenario::warmup_ns_for`], but at most 0.6 s: the
    /// only larger case (N = 5832, the scaling figure) sets its own.
    fn warmup_ns(self, n: u32) -> u64 {
        crate::scenario::warmup_ns_for(n).min(600_000_000)
    }

    fn duration_ns(self, n: u32) -> u64 {
        match (self.quick, n) {
            (true, n) if n >= 1000 => 60_000_000,
            (true, _) => 250_000_000,
            (false, n) if n >= 5000 => 500_000_000,
            (false, n) if n >= 1000 => 1_000_000_000,
            (false, _) => 2_000_000_000,
        }
    }
}

/// The campaign's seed (every case's, unless [`paper_outbound`] is given another).
pub const SEED: u64 = 0x5EED_0001;

/// The base configuration of the paper's setting: N gateways, AWS model, 5K msgs/s, no hold.
pub fn base(scale: Scale, model: &str, n: u32) -> OutboundConfig {
    OutboundConfig {
        seed: SEED,
        plan: PlanConfig {
            hedge: 0,
            ..PlanConfig::new(n)
        },
        model: NetModel::preset(model).expect("a known preset"),
        node: proto::NodeConfig {
            hold_and_release: false,
            ..proto::NodeConfig::default()
        },
        warmup_ns: scale.warmup_ns(n),
        duration_ns: scale.duration_ns(n),
        drain_ns: 30_000_000,
        invariants_every: 64,
        ..OutboundConfig::default()
    }
}

fn shaped(mut config: OutboundConfig, depth: u32, fanout: u32) -> OutboundConfig {
    config.plan.shape = Shape::Explicit { depth, fanout };
    config
}

fn hedged(mut config: OutboundConfig, hedge: u32) -> OutboundConfig {
    config.plan.hedge = hedge;
    config
}

/// Hold-and-release as the authors' prototype ran it for the paper's 5K msgs/s runs on AWS:
/// the deadline adds 10 µs to the max reported p97 OWD, and p97 is the prototype's
/// percentile ([`proto::owd::Rank::Floor`]: the third-largest of a 10 ms window's 50
/// samples, where Jasper's nearest rank takes the second). Of the artifact's stored
/// `src/config.h` versions (`Cloud-Financial-Exchange/onyx`), the one set up for these runs
/// (`MSG_RATE = 5'000`, `HOLDRELEASE_MODE = END_TO_END`, AWS; commit a7f991c) has
/// `EXTRA_HOLD_ADDED_TO_DEADLINE = 10`; the versions with 25 µs (DESIGN.md's and Jasper's
/// default) run at 175K msgs/s with hold-and-release off. Its run labels vary the margin
/// too (0, 20, 50 µs in January), so which margin each of Table 6's and Fig. 11's runs had
/// is not recorded; 10 µs is the one configuration the artifact holds for them
/// (`docs/results/paper-outbound.md`, sessions 13-15). Appendix B's prose adds nothing.
fn held(mut config: OutboundConfig) -> OutboundConfig {
    config.node.hold_and_release = true;
    config.node.owd.margin = PROTOTYPE_MARGIN;
    config.node.owd.rank = proto::owd::Rank::Floor;
    config
}

/// What the authors' prototype added to the max reported OWD in its 5K msgs/s
/// hold-and-release configuration, which the campaign's hold-and-release cases run.
pub const PROTOTYPE_MARGIN: core::time::Duration = core::time::Duration::from_micros(10);

/// The margin of the paper's ablation run with hold-and-release (Fig. 9's "tree + hedging +
/// hold-and-release"): the artifact's `analysis/labels.py` marks
/// `5k_jasper_hr_h2_20us_100r_50000si_150s_jan14_330` ("Tree + Hedging + Fairness") as the
/// ablation's file: H = 2 with 20 µs, where runs whose names give no margin had the build's
/// own (10 µs, [`PROTOTYPE_MARGIN`], in the one stored configuration for these runs).
pub const ABLATION_MARGIN: core::time::Duration = core::time::Duration::from_micros(20);

/// Gateways run `per_vm` to a VM, as the paper's scaling runs did (Fig. 10: its artifact's
/// `analysis/labels.py` names the 1K-receiver run `..._100r_d10_...`, 100 VMs of 10 logical
/// receivers, and the 5.8K one `..._5832r_d18_...`, 324 VMs of 18).
fn on_shared_vms(mut config: OutboundConfig, per_vm: u32) -> OutboundConfig {
    config.gateways_per_vm = per_vm;
    config
}

/// CloudEx's hold delay: the paper's CloudEx curve (OML p10 890, median 1042 µs) sits about
/// 1 ms after the send whatever the path did, which is a fixed delay, not a measured OWD.
pub const CLOUDEX_HOLD_NS: u64 = 1_000_000;

/// CloudEx as the paper ran it (§8.5): no proxy tree (the root unicasts to every gateway)
/// and hold-and-release with a *fixed* hold delay (CloudEx's gateways hold market data for a
/// short fixed artificial delay set by the operator; the OWD feedback and its all-reduce are
/// Jasper's "modified hold-and-release", §Appendix B). The deadline is the send time plus
/// [`CLOUDEX_HOLD_NS`].
fn cloudex(mut config: OutboundConfig) -> OutboundConfig {
    let n = config.plan.participants;
    config = held(shaped(config, 1, n));
    let margin = config.node.owd.margin;
    config.node.owd.fixed_owd =
        Some(core::time::Duration::from_nanos(CLOUDEX_HOLD_NS).saturating_sub(margin));
    config
}

/// Every case of the outbound experiments, by name.
pub fn cases(scale: Scale) -> Vec<Case> {
    let aws = |n| base(scale, "aws_c5", n);
    let mut cases: Vec<(String, OutboundConfig)> = [
        ("n100_h0", aws(100)),
        ("n100_h1", hedged(aws(100), 1)),
        ("n100_h2", hedged(aws(100), 2)),
        ("n100_direct", shaped(aws(100), 1, 100)),
        ("n100_h1_hold", held(hedged(aws(100), 1))),
        // The ablation's last curve ("Tree + Hedging + Fairness"): its artifact's file is
        // `5k_jasper_hr_h2_20us_100r_..._jan14_330`, H = 2 with a 20 µs margin.
        ("n100_h2_hold_20us", {
            let mut c = held(hedged(aws(100), 2));
            c.node.owd.margin = ABLATION_MARGIN;
            c
        }),
        ("n100_h2_hold", {
            // The P(F) ratio's N = 100 side: at 250 ms its unfair share rests on ~60 packets,
            // and the quick ratio swung 2.2-4.6x over five seeds (the verdict fails above
            // 3.5x); 1 s steadies it (session 23). Full mode's 2 s is untouched.
            let mut c = held(hedged(aws(100), 2));
            c.duration_ns = c.duration_ns.max(1_000_000_000);
            c
        }),
        ("n100_h0_hold", held(aws(100))),
        ("n100_cloudex", cloudex(aws(100))),
        ("n100_h1_rh", {
            let mut c = hedged(aws(100), 1);
            c.plan.receiver_hedging = true;
            c
        }),
        // Not one of the paper's runs (its receiver hedging has no hold-and-release): ours,
        // with the twins' deadline (`proto::owd::TwinOwd`), printed beside n100_h1_hold.
        ("n100_h1_rh_hold", {
            let mut c = held(hedged(aws(100), 1));
            c.plan.receiver_hedging = true;
            c
        }),
        ("n200_h1", hedged(aws(200), 1)),
        ("n10_d1", shaped(aws(10), 1, 10)),
        ("n10_d2", shaped(aws(10), 2, 4)),
        ("n100_d3", shaped(aws(100), 3, 5)),
        ("n1000_h1", on_shared_vms(hedged(aws(1000), 1), 10)),
        ("n1000_h2_hold", {
            // P(F) at N = 1000 swings with where a quick run's 60 ms (300 packets) falls
            // (62-88% over start times and seeds); 500 ms steadies it (with N = 100 at 1 s,
            // the quick P(F) ratio over five seeds was 3.0-3.8x at 250 ms and 2.6-3.4x at
            // 500 ms; full mode's 1 s gives 2.4-3.9x over three).
            let mut c = held(hedged(aws(1000), 2));
            c.duration_ns = c.duration_ns.max(500_000_000);
            c
        }),
    ]
    .into_iter()
    .map(|(name, c)| (name.to_owned(), c))
    .collect();
    for (model, tag) in [("aws_c5", "aws"), ("gcp_c2d", "gcp")] {
        for rrps in [true, false] {
            let mut c = base(scale, model, 125);
            c.rate_mps = 10_000.0;
            c.burst = Some(Burst {
                factor: 15.0,
                every_ns: 20_000_000,
                length_ns: 500_000,
            });
            c.plan.rrps = rrps;
            let kind = if rrps { "rrps" } else { "fixed" };
            cases.push((format!("n125_{kind}_{tag}"), c));
        }
    }
    if !scale.quick {
        cases.push(("n1000_d2".to_owned(), shaped(aws(1000), 2, 32)));
        cases.push(("n1000_d3".to_owned(), shaped(aws(1000), 3, 10)));
        cases.push(("n1000_d4".to_owned(), shaped(aws(1000), 4, 6)));
        // Ours, beside n1000_h2_hold: two gateways per participant keep P(F) where VM pauses
        // take it away at large N.
        let mut c = held(hedged(aws(1000), 2));
        c.plan.receiver_hedging = true;
        cases.push(("n1000_h2_rh_hold".to_owned(), c));
        // With hold-and-release, which leaves the receipts the scaling figure reads as they
        // are, so that the campaign also gives P(F) at its largest N (no paper figure); with
        // the full warm-up of its N, as P(F) at large N goes on rising after 0.6 s
        // (`scenario::warmup_ns_for`).
        let mut c = on_shared_vms(held(hedged(aws(5832), 1)), 18);
        c.warmup_ns = crate::scenario::warmup_ns_for(5832);
        cases.push(("n5832_h1".to_owned(), c));
    }
    for (d, f, h) in appendix_c_cases(scale) {
        let mut c = base(scale, "appendix_c", f.pow(d));
        c.plan.shape = Shape::Explicit {
            depth: d,
            fanout: f,
        };
        c.plan.hedge = h;
        c.rate_mps = 1_000.0;
        c.warmup_ns = 20_000_000;
        c.duration_ns = if scale.quick {
            100_000_000
        } else {
            1_000_000_000
        };
        cases.push((format!("appc_d{d}_f{f}_h{h}"), c));
    }
    cases
        .into_iter()
        .map(|(name, config)| Case { name, config })
        .collect()
}

/// Appendix C's settings `(depth, fanout, hedge)`: H = 0 at D = 1..5, and D = 4 at H = 0..4.
/// The fan-out must leave H siblings to hedge through (F > H).
fn appendix_c_cases(scale: Scale) -> Vec<(u32, u32, u32)> {
    let f_depth = if scale.quick { 3 } else { 4 };
    let f_hedge = if scale.quick { 5 } else { 6 };
    let mut out: Vec<(u32, u32, u32)> = (1..=5).map(|d| (d, f_depth, 0)).collect();
    out.extend((0..=4).map(|h| (4, f_hedge, h)));
    out
}

/// The paper's Appendix C means: `(depth, hedge, mean in hop units)`.
pub const APPENDIX_C_MEANS: [(u32, u32, f64); 10] = [
    (1, 0, 0.5),
    (2, 0, 1.0),
    (3, 0, 1.5),
    (4, 0, 2.0),
    (5, 0, 2.5),
    (4, 0, 2.0),
    (4, 1, 1.3),
    (4, 2, 0.9),
    (4, 3, 0.8),
    (4, 4, 0.7),
];

/// The figures reproduced, with the case behind each curve.
pub fn figures(scale: Scale) -> Vec<FigureSpec> {
    let c = |paper_curve, case: &str| CurveSpec {
        paper_curve,
        case: case.to_owned(),
    };
    let mut scaling = vec![c("N=100", "n100_h1"), c("N=1000", "n1000_h1")];
    if !scale.quick {
        scaling.push(c("N=5832", "n5832_h1"));
    }
    vec![
        FigureSpec {
            figure: "oml_by_hedging_n100",
            metric: Metric::OmlReceipt,
            curves: vec![
                c("H=0", "n100_h0"),
                c("H=1", "n100_h1"),
                c("H=2", "n100_h2"),
            ],
        },
        FigureSpec {
            figure: "dws_by_hedging_n100_no_hold",
            metric: Metric::DwsReceipt,
            curves: vec![
                c("H=0", "n100_h0"),
                c("H=1", "n100_h1"),
                c("H=2", "n100_h2"),
            ],
        },
        FigureSpec {
            figure: "oml_ablation_n100",
            metric: Metric::OmlReceipt,
            curves: vec![
                c("direct unicast", "n100_direct"),
                c("tree", "n100_h0"),
                c("tree+hedging", "n100_h1"),
            ],
        },
        FigureSpec {
            figure: "oml_ablation_n100",
            metric: Metric::OmlRelease,
            curves: vec![c("tree+hedging+hold-and-release", "n100_h2_hold_20us")],
        },
        FigureSpec {
            figure: "oml_hold_release_n100",
            metric: Metric::OmlRelease,
            curves: vec![
                c("H=2", "n100_h2_hold"),
                c("CloudEx", "n100_cloudex"),
                c("H=0", "n100_h0_hold"),
            ],
        },
        FigureSpec {
            figure: "dws_hold_release_n100",
            metric: Metric::DwsRelease,
            curves: vec![
                c("H=2", "n100_h2_hold"),
                c("CloudEx", "n100_cloudex"),
                c("H=0", "n100_h0_hold"),
            ],
        },
        FigureSpec {
            figure: "holding_time_hold_release_n100",
            metric: Metric::Holding,
            curves: vec![
                c("H=2", "n100_h2_hold"),
                c("CloudEx", "n100_cloudex"),
                c("H=0", "n100_h0_hold"),
            ],
        },
        FigureSpec {
            figure: "oml_scaling_h1_no_hold",
            metric: Metric::OmlReceipt,
            curves: scaling,
        },
        FigureSpec {
            figure: "oml_hold_release_n1000_5k_h2",
            metric: Metric::OmlRelease,
            curves: vec![c("H=2", "n1000_h2_hold")],
        },
        FigureSpec {
            figure: "dws_hold_release_n1000_5k_h2",
            metric: Metric::DwsRelease,
            curves: vec![c("H=2", "n1000_h2_hold")],
        },
        FigureSpec {
            figure: "oml_receiver_hedging_n100",
            metric: Metric::ParticipantOml,
            curves: vec![c("with receiver hedging", "n100_h1_rh")],
        },
        FigureSpec {
            figure: "oml_rrps_125r_10k_15x_aws",
            metric: Metric::OmlReceipt,
            curves: vec![
                c("RRPS", "n125_rrps_aws"),
                c("fixed tree", "n125_fixed_aws"),
            ],
        },
        FigureSpec {
            figure: "oml_rrps_125r_10k_15x_gcp",
            metric: Metric::OmlReceipt,
            curves: vec![
                c("RRPS", "n125_rrps_gcp"),
                c("fixed tree", "n125_fixed_gcp"),
            ],
        },
    ]
}

/// Runs one case.
pub fn run_case(case: &Case, progress: &mut dyn FnMut(f64)) -> Result<CaseResult, String> {
    let result = run_case_stoppable(case, progress, &AtomicBool::new(false))?;
    Ok(result.expect("a run nothing stops runs whole"))
}

/// [`run_case`], abandoned (`None`) once `stop` is set: a case stopped part way measured a
/// window its figures and verdicts were not made for, so a campaign judges only whole cases.
pub fn run_case_stoppable(
    case: &Case,
    progress: &mut dyn FnMut(f64),
    stop: &AtomicBool,
) -> Result<Option<CaseResult>, String> {
    let mut run = Outbound::new(case.config.clone())?;
    let ended = run.run_stoppable(&mut |at| {
        progress(at.fraction);
        crate::scenario::unless_stopped(stop)
    });
    if ended != Ended::Complete {
        return Ok(None);
    }
    let summary = run.summary(&case.name);
    let metrics = run.sim.metrics().expect("measured");
    let mut cdfs = BTreeMap::new();
    cdfs.insert("OML", cdf_points(&metrics.truth.oml_receipt));
    cdfs.insert("OML (release)", cdf_points(&metrics.truth.oml_release));
    cdfs.insert("DWS", cdf_points(&metrics.truth.dws_receipt));
    cdfs.insert(
        "DWS (release, exch)",
        cdf_points(&metrics.exchange.dws_release),
    );
    cdfs.insert("holding", cdf_points(&metrics.truth.holding));
    cdfs.insert("OWD", cdf_points(&metrics.truth.owd));
    let participant_oml = metrics.participants.as_ref().map(|p| {
        cdfs.insert("OML (per MP)", cdf_points(&p.oml_receipt));
        Percentiles::of(&p.oml_receipt)
    });
    let e = &run.clock_error.abs_ns;
    let clock_error_ns = if e.is_empty() {
        [0; 3]
    } else {
        [e.value_at_quantile(0.5), e.value_at_quantile(0.99), e.max()]
    };
    let model = case
        .config
        .model
        .preset_name()
        .unwrap_or("custom")
        .to_owned();
    Ok(Some(CaseResult {
        name: case.name.clone(),
        receivers: summary.receivers,
        model,
        summary,
        participant_oml,
        clock_error_ns,
        cdfs,
    }))
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

/// Everything [`paper_outbound`] found.
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

/// Reruns every outbound experiment, writes the output directory, and returns the printed
/// report. Progress goes to stderr: redrawn in place on a terminal, into a log only a line as
/// each case ends.
/// `seed` replaces the campaign's own ([`SEED`]) in every case, to see which verdicts hold
/// across seeds.
/// `only`, if given, names the cases to run ([`paper_outbound_with`]). Once `stop` is set
/// (Ctrl-C), no case starts and those running are abandoned; the report covers the cases that
/// ran whole.
pub fn paper_outbound(
    out_dir: &Path,
    quick: bool,
    seed: Option<u64>,
    only: Option<&[&str]>,
    stop: &AtomicBool,
) -> Result<Printed, String> {
    let report = paper_outbound_with(out_dir, quick, seed, only, &mut stderr_progress(), stop)?;
    Ok(Printed {
        interrupted: !report.not_run.is_empty(),
        text: report.text,
    })
}

/// What a campaign printed, and whether a stop (Ctrl-C) cut it short.
#[derive(Clone, Debug)]
pub struct Printed {
    /// The printed report or summary.
    pub text: String,
    /// Some cases did not run whole.
    pub interrupted: bool,
}

/// `count` consecutive seeds from `first` (the campaign's own, [`SEED`], if `None`).
pub fn consecutive_seeds(first: Option<u64>, count: u32) -> Result<Vec<u64>, String> {
    let first = first.unwrap_or(SEED);
    (0..u64::from(count))
        .map(|i| {
            first
                .checked_add(i)
                .ok_or_else(|| "the seeds run past u64::MAX".to_owned())
        })
        .collect()
}

/// [`paper_outbound_seeds`] with progress on stderr; returns the printed summary.
pub fn paper_outbound_sweep(
    out_dir: &Path,
    quick: bool,
    seeds: &[u64],
    only: Option<&[&str]>,
    stop: &AtomicBool,
) -> Result<Printed, String> {
    let sweep = paper_outbound_seeds(out_dir, quick, seeds, only, &mut stderr_progress(), stop)?;
    Ok(Printed {
        interrupted: !sweep.incomplete_seeds.is_empty(),
        text: sweep.text,
    })
}

/// Progress lines to stderr: redrawn in place on a terminal, into a log only as each case
/// ends.
pub(crate) fn stderr_progress() -> impl FnMut(&str) {
    use std::io::IsTerminal as _;
    let terminal = std::io::stderr().is_terminal();
    move |line: &str| {
        if terminal {
            eprint!("{line}");
        } else if line.ends_with('\n') {
            eprint!("{}", line.trim_start_matches('\r'));
        }
    }
}

/// [`paper_outbound`] with a case filter (`only`: run the cases it names or its `*` patterns
/// match, [`case_matches`],
/// and the figures and verdicts they complete; a name that is no case of this mode is an
/// error, [`check_case_names`]), a progress sink and a stop flag ([`paper_outbound`]).
pub fn paper_outbound_with(
    out_dir: &Path,
    quick: bool,
    seed: Option<u64>,
    only: Option<&[&str]>,
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<OutboundReport, String> {
    check_case_names(quick, only)?;
    make_out_dir(out_dir)?;
    let seed = seed.unwrap_or(SEED);
    let cases = seeded_cases(quick, seed, only);
    let results = run_cases(&cases, progress, stop)?;
    let report = build_report(quick, seed, whole_cases(&cases, results))?;
    write_outputs(out_dir, &report).map_err(|e| format!("writing {}: {e}", out_dir.display()))?;
    Ok(report)
}

/// Makes the output directory before the campaign's minutes, so that one that cannot be made
/// fails at once, and clears what an earlier campaign wrote there: a campaign run in part
/// (`--case`, Ctrl-C) writes only some figures, and must not leave another run's beside them.
/// That goes for every earlier seed's `seed-0x…/` too, of this sweep's seeds or not (a
/// directory left empty goes with them): `seeds.csv` lists only the seeds of this run.
fn make_out_dir(out_dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let figures: Vec<String> = [true, false]
        .into_iter()
        .flat_map(|quick| figures(Scale { quick }))
        .map(|figure| format!("{}.svg", figure.figure))
        .collect();
    let names = CAMPAIGN_OUTPUTS
        .into_iter()
        .chain(SWEEP_OUTPUTS)
        .chain(figures.iter().map(String::as_str));
    let clear = |dir: &Path, names| {
        crate::report::remove_outputs(dir, names)
            .map_err(|e| format!("clearing {}: {e}", dir.display()))
    };
    clear(out_dir, names.clone())?;
    let entries =
        std::fs::read_dir(out_dir).map_err(|e| format!("reading {}: {e}", out_dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("reading {}: {e}", out_dir.display()))?;
        let is_seed = entry
            .file_name()
            .to_str()
            .and_then(|name| name.strip_prefix("seed-0x"))
            .is_some_and(|hex| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()));
        if is_seed && entry.path().is_dir() {
            let dir = entry.path();
            clear(&dir, names.clone())?;
            // Kept if anything else is in it.
            let _ = std::fs::remove_dir(&dir);
        }
    }
    Ok(())
}

/// The files [`write_outputs`] writes beside one SVG per figure.
const CAMPAIGN_OUTPUTS: [&str; 4] = [
    "results.json",
    "report.txt",
    "comparison.csv",
    "verdicts.csv",
];

/// The files [`write_sweep`] writes.
const SWEEP_OUTPUTS: [&str; 3] = ["seeds.json", "seeds.txt", "seeds.csv"];

/// Whether the case `name` is one the filter entry `pattern` selects: the name itself, or a
/// pattern whose `*`s stand for any run of characters (`n100_*`, `*_hold`, `n1000_d*`).
pub fn case_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No '*': the whole name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Refuses a case filter with an entry that selects no case of the mode ([`case_matches`]),
/// before anything runs: a misspelt name would otherwise run nothing for it and judge nothing
/// on it without a word. The error lists the mode's cases (and says so when an entry selects
/// cases of the full mode only).
pub fn check_case_names(quick: bool, only: Option<&[&str]>) -> Result<(), String> {
    let Some(only) = only else {
        return Ok(());
    };
    if only.is_empty() {
        return Err("the case filter names no case".to_owned());
    }
    let names =
        |quick| -> Vec<String> { cases(Scale { quick }).into_iter().map(|c| c.name).collect() };
    let known = names(quick);
    for name in only {
        if known.iter().any(|k| case_matches(name, k)) {
            continue;
        }
        let full_only = quick && names(false).iter().any(|k| case_matches(name, k));
        return Err(format!(
            "no case {name:?} in the {} campaign{}; its cases: {}",
            if quick { "quick" } else { "full" },
            if full_only {
                " (it runs in full mode only)"
            } else {
                ""
            },
            known.join(", ")
        ));
    }
    Ok(())
}

/// The campaign's cases, one line each, with what each runs: N, the tree `<D,F>`, H, RRPS,
/// receiver hedging, the hold (off, Jasper's deadline `pXX + margin`, or CloudEx's fixed
/// delay), gateways per VM, the model, the publishing rate and bursts, and how long it
/// measures (`jasper sim paper-outbound --list`). The names are those `--case` takes.
pub fn list_cases(quick: bool) -> String {
    let mut out = format!(
        "{} campaign: {} cases (seed {SEED:#x} unless --seed)\n",
        if quick { "quick" } else { "full" },
        cases(Scale { quick }).len()
    );
    let _ = writeln!(
        out,
        "{:<19} {:>5} {:>8} {:>2} {:>5} {:>3} {:>14} {:>5} {:>10} {:>8}  rate (msgs/s)",
        "case", "N", "tree", "H", "RRPS", "RH", "hold", "GW/VM", "model", "measured"
    );
    for case in cases(Scale { quick }) {
        let c = &case.config;
        let (tree, direct) = match proto::plan::Plan::new(&c.plan) {
            Ok(plan) => (
                format!("<{},{}>", plan.depth(), plan.fanout()),
                plan.depth() == 1,
            ),
            Err(e) => (format!("({e})"), false),
        };
        let owd = &c.node.owd;
        let hold = if !c.node.hold_and_release {
            "off".to_owned()
        } else if let Some(fixed) = owd.fixed_owd {
            format!("fixed {} µs", (fixed + owd.margin).as_micros())
        } else {
            let centi = owd.percentile_centi;
            let percentile = if centi % 100 == 0 {
                format!("p{}", centi / 100)
            } else {
                format!("p{}", f64::from(centi) / 100.0)
            };
            format!("{percentile}+{} µs", owd.margin.as_micros())
        };
        let rate = match &c.burst {
            None => format!("{}", c.rate_mps),
            Some(b) => format!(
                "{}, {}x for {} ms every {} ms",
                c.rate_mps,
                b.factor,
                b.length_ns as f64 / 1e6,
                b.every_ns as f64 / 1e6
            ),
        };
        let _ = writeln!(
            out,
            "{:<19} {:>5} {:>8} {:>2} {:>5} {:>3} {:>14} {:>5} {:>10} {:>6} s  {rate}",
            case.name,
            c.plan.participants,
            tree,
            c.plan.hedge,
            // Direct unicast has no proxies to spray over or hedge through.
            if direct {
                "-"
            } else if c.plan.rrps {
                "on"
            } else {
                "off"
            },
            if c.plan.receiver_hedging { "on" } else { "off" },
            hold,
            c.gateways_per_vm,
            c.model.preset_name().unwrap_or("custom"),
            c.duration_ns as f64 / 1e9,
        );
    }
    out
}

/// The campaign's cases (those `only` names, if given) with `seed`.
fn seeded_cases(quick: bool, seed: u64, only: Option<&[&str]>) -> Vec<Case> {
    cases(Scale { quick })
        .into_iter()
        .filter(|c| only.is_none_or(|only| only.iter().any(|o| case_matches(o, &c.name))))
        .map(|mut c| {
            c.config.seed = seed;
            c
        })
        .collect()
}

/// One verdict of a sweep over seeds ([`paper_outbound_seeds`]).
#[derive(Clone, Debug, Serialize)]
pub struct SweptVerdict {
    /// Experiment.
    pub experiment: String,
    /// The claim in words.
    pub claim: String,
    /// The paper's figure.
    pub paper_ratio: f64,
    /// Ours on each seed, in seed order.
    pub ours: Vec<f64>,
    /// The median of `ours` (of the middle two for an even count).
    pub median: f64,
    /// On how many seeds the verdict holds by itself.
    pub seeds_ok: usize,
    /// Whether the median matches, by the verdict's own rule.
    pub ok: bool,
    /// That rule.
    pub rule: Rule,
}

/// Everything [`paper_outbound_seeds`] found.
#[derive(Clone, Debug, Serialize)]
pub struct SeedSweep {
    /// Quick mode.
    pub quick: bool,
    /// The seeds, in run order.
    pub seeds: Vec<u64>,
    /// How many verdicts matched on each seed.
    pub matched: Vec<usize>,
    /// Each verdict over the seeds.
    pub verdicts: Vec<SweptVerdict>,
    /// Seeds a stop (Ctrl-C) cut short, in run order: left out of `seeds` and the verdicts
    /// (each has what it ran in its `seed-0x…/`); empty for a whole sweep.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub incomplete_seeds: Vec<u64>,
    /// The printed summary.
    pub text: String,
}

/// Reruns the campaign once per seed (every case of every seed on every core) and judges each
/// verdict on the median of its ratios over the seeds, by the verdict's own rule: which shapes
/// hold across seeds, not on one draw of the network. Each seed's full report goes to
/// `OUT/seed-0x…/` (as [`paper_outbound`] writes it); `OUT/seeds.txt`, `seeds.json` and
/// `seeds.csv` hold the sweep.
///
/// Once `stop` is set (Ctrl-C) no case starts, and those running are abandoned. The seeds
/// run in order, so those that ran whole come first: the sweep judges them alone, and each
/// seed cut short still gets the report of the cases it ran ([`paper_outbound_with`]).
pub fn paper_outbound_seeds(
    out_dir: &Path,
    quick: bool,
    seeds: &[u64],
    only: Option<&[&str]>,
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<SeedSweep, String> {
    if seeds.is_empty() {
        return Err("a sweep needs at least one seed".to_owned());
    }
    let mut distinct = seeds.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != seeds.len() {
        return Err(format!("seeds repeat: {seeds:?}"));
    }
    check_case_names(quick, only)?;
    make_out_dir(out_dir)?;
    let all: Vec<Case> = seeds
        .iter()
        .flat_map(|&seed| seeded_cases(quick, seed, only))
        .collect();
    let results = run_cases(&all, progress, stop)?;
    judge_seeds(out_dir, quick, seeds, &all, results)
}

/// The sweep over `seeds` of `results`, [`run_cases`]' results for `all` (every seed's cases,
/// seed by seed): each seed's report in `OUT/seed-0x…/`, and the verdicts over the seeds that
/// ran every case whole.
fn judge_seeds(
    out_dir: &Path,
    quick: bool,
    seeds: &[u64],
    all: &[Case],
    results: Vec<Option<CaseResult>>,
) -> Result<SeedSweep, String> {
    let per_seed = (all.len() / seeds.len()).max(1);
    let mut results = results.into_iter();
    let (mut whole, mut reports, mut incomplete) = (Vec::new(), Vec::new(), Vec::new());
    for (&seed, cases) in seeds.iter().zip(all.chunks(per_seed)) {
        let ran: Vec<Option<CaseResult>> = results.by_ref().take(per_seed).collect();
        if ran.iter().all(Option::is_none) {
            // No case ran whole: nothing to write.
            incomplete.push((seed, false));
            continue;
        }
        let report = build_report(quick, seed, whole_cases(cases, ran))?;
        let dir = out_dir.join(format!("seed-{seed:#x}"));
        write_outputs(&dir, &report).map_err(|e| format!("writing {}: {e}", dir.display()))?;
        if report.not_run.is_empty() {
            whole.push(seed);
            reports.push(report);
        } else {
            incomplete.push((seed, true));
        }
    }
    let incomplete_seeds = incomplete.iter().map(|&(seed, _)| seed).collect();
    if whole.is_empty() {
        let mut text = format!(
            "Interrupted (Ctrl-C) before any seed ran all its cases: nothing is judged over \
             seeds. Each seed that ran a case whole has its report in {}/seed-0x…/.\n",
            out_dir.display()
        );
        text.push_str(&reports_so_far(out_dir, &incomplete));
        return Ok(SeedSweep {
            quick,
            seeds: Vec::new(),
            matched: Vec::new(),
            verdicts: Vec::new(),
            incomplete_seeds,
            text,
        });
    }
    let mut sweep = sweep_verdicts(quick, &whole, &reports)?;
    if !incomplete.is_empty() {
        sweep.text = format!(
            "Interrupted (Ctrl-C): {} of {} seeds ran all their cases, and the verdicts below \
             are over those alone.\n{}{}",
            whole.len(),
            seeds.len(),
            reports_so_far(out_dir, &incomplete),
            sweep.text
        );
        sweep.incomplete_seeds = incomplete_seeds;
    }
    write_sweep(out_dir, &sweep).map_err(|e| format!("writing {}: {e}", out_dir.display()))?;
    Ok(sweep)
}

/// The results of the cases that ran whole, with the names of those that did not in the
/// report ([`OutboundReport::not_run`]), from [`run_cases`]' results for `cases`.
fn whole_cases(cases: &[Case], results: Vec<Option<CaseResult>>) -> RanCases {
    let not_run = cases
        .iter()
        .zip(&results)
        .filter(|(_, result)| result.is_none())
        .map(|(case, _)| case.name.clone())
        .collect();
    RanCases {
        ran: results.into_iter().flatten().collect(),
        not_run,
    }
}

/// The cases of a campaign that ran whole, and those a stop left out.
struct RanCases {
    ran: Vec<CaseResult>,
    not_run: Vec<String>,
}

/// Where each seed a stop cut short (`(seed, whether any case ran whole)`) has its report,
/// one line each.
fn reports_so_far(out_dir: &Path, seeds: &[(u64, bool)]) -> String {
    let mut text = String::new();
    for &(seed, some_ran) in seeds {
        let dir = out_dir.join(format!("seed-{seed:#x}"));
        if some_ran {
            let _ = writeln!(
                text,
                "  seed {seed:#x} was cut short: what it ran is in {}",
                dir.display()
            );
        } else {
            let _ = writeln!(text, "  seed {seed:#x} ran no case whole");
        }
    }
    text
}

/// Gathers each verdict of `reports` (one per seed, same cases) over the seeds. The verdicts
/// a report has depend only on which cases ran, so every report lists the same ones in the
/// same order; a report that does not is refused.
fn sweep_verdicts(
    quick: bool,
    seeds: &[u64],
    reports: &[OutboundReport],
) -> Result<SeedSweep, String> {
    let first = reports.first().map_or(&[][..], |r| &r.verdicts[..]);
    let mut verdicts: Vec<SweptVerdict> = first
        .iter()
        .map(|v| SweptVerdict {
            experiment: v.experiment.clone(),
            claim: v.claim.clone(),
            paper_ratio: v.paper_ratio,
            ours: Vec::with_capacity(reports.len()),
            median: f64::NAN,
            seeds_ok: 0,
            ok: false,
            rule: v.rule,
        })
        .collect();
    for (report, seed) in reports.iter().zip(seeds) {
        let same = report.verdicts.len() == verdicts.len()
            && report
                .verdicts
                .iter()
                .zip(&verdicts)
                .all(|(v, s)| v.experiment == s.experiment && v.claim == s.claim);
        if !same {
            return Err(format!(
                "seed {seed:#x} gave other verdicts than seed {:#x}",
                seeds[0]
            ));
        }
        for (v, s) in report.verdicts.iter().zip(&mut verdicts) {
            s.ours.push(v.our_ratio);
        }
    }
    for s in &mut verdicts {
        s.median = median(&s.ours);
        s.seeds_ok = s
            .ours
            .iter()
            .filter(|&&o| s.rule.judge(s.paper_ratio, o))
            .count();
        s.ok = s.rule.judge(s.paper_ratio, s.median);
    }
    let matched: Vec<usize> = reports
        .iter()
        .map(|r| r.verdicts.iter().filter(|v| v.ok).count())
        .collect();
    let mut text = String::new();
    let list = seeds
        .iter()
        .map(|s| format!("{s:#x}"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        text,
        "Jasper outbound experiments vs the paper over {} ({} mode; {list}): each verdict \
         judged on the median of its ratios",
        match seeds.len() {
            1 => "1 seed".to_owned(),
            n => format!("{n} seeds"),
        },
        if quick { "quick" } else { "full" }
    );
    for s in &verdicts {
        let each = s
            .ours
            .iter()
            .map(|o| format!("{o:.2}"))
            .collect::<Vec<_>>()
            .join(" / ");
        let _ = writeln!(
            text,
            "  [{}] {}: {} — paper {:.2}, ours median {:.2} ({each}); holds on {}/{} seeds",
            if s.ok { "ok" } else { "MISMATCH" },
            s.experiment,
            s.claim,
            s.paper_ratio,
            s.median,
            s.seeds_ok,
            seeds.len()
        );
    }
    let ok = verdicts.iter().filter(|s| s.ok).count();
    let each = matched
        .iter()
        .map(|m| format!("{m}/{}", verdicts.len()))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        text,
        "{ok}/{} shapes match the paper on the median over the seeds; seed by seed: {each}.",
        verdicts.len()
    );
    Ok(SeedSweep {
        quick,
        seeds: seeds.to_vec(),
        matched,
        verdicts,
        incomplete_seeds: Vec::new(),
        text,
    })
}

fn write_sweep(dir: &Path, sweep: &SeedSweep) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("seeds.json"),
        serde_json::to_string_pretty(sweep).expect("serialisable"),
    )?;
    std::fs::write(dir.join("seeds.txt"), &sweep.text)?;
    let mut csv = String::from("experiment,claim,paper,seed,ours,ok\n");
    for s in &sweep.verdicts {
        for (seed, ours) in sweep.seeds.iter().zip(&s.ours) {
            let _ = writeln!(
                csv,
                "{},\"{}\",{:.3},{seed:#x},{ours:.3},{}",
                s.experiment,
                s.claim,
                s.paper_ratio,
                s.rule.judge(s.paper_ratio, *ours)
            );
        }
        let _ = writeln!(
            csv,
            "{},\"{}\",{:.3},median,{:.3},{}",
            s.experiment, s.claim, s.paper_ratio, s.median, s.ok
        );
    }
    std::fs::write(dir.join("seeds.csv"), csv)
}

/// Runs `cases` on every core (each case is one serial simulation, so every result is the one
/// a lone run of that case gives), returning the results in case order: `None` for a case
/// that `stop` kept from starting or abandoned part way.
fn run_cases(
    cases: &[Case],
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<Vec<Option<CaseResult>>, String> {
    let total = cases.len();
    let several_seeds = cases.iter().any(|c| c.config.seed != cases[0].config.seed);
    let work = |i: usize, case: &Case, say: &dyn Fn(String)| {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let seed = if several_seeds {
            format!(" seed {:#x}", case.config.seed)
        } else {
            String::new()
        };
        let label = format!("[{}/{}] {}{seed}", i + 1, total, case.name);
        let mut last = -1i32;
        let result = run_case_stoppable(
            case,
            &mut |f| {
                let pct = (f * 100.0) as i32;
                if pct / 5 != last / 5 {
                    last = pct;
                    say(format!("\r{label}: {pct:>3}%"));
                }
            },
            stop,
        );
        match &result {
            Ok(Some(result)) => say(format!(
                "\r{label}: done ({} events)\n",
                result.summary.sim.events
            )),
            Ok(None) => say(format!("\r{label}: stopped\n")),
            Err(_) => {}
        }
        result
    };
    crate::cores::on_every_core(cases, work, progress)
        .into_iter()
        .collect()
}

fn build_report(quick: bool, seed: u64, cases: RanCases) -> Result<OutboundReport, String> {
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

/// The shape checks, and the text of the experiments that are tables rather than curves
/// (tree shapes, P(F), Appendix C).
///
/// A verdict whose cases did not run is left out; the third value names those cases (quick
/// mode runs no N = 1000 tree shapes and no N = 5832), so that the report says what it did not
/// judge and a test can tell a misspelt case from one the mode leaves out.
fn verdicts(cases: &[CaseResult]) -> (Vec<Verdict>, String, Vec<String>) {
    let missing = core::cell::RefCell::new(Vec::<String>::new());
    let find = |name: &str| {
        let found = cases.iter().find(|c| c.name == name);
        if found.is_none() {
            missing.borrow_mut().push(name.to_owned());
        }
        found
    };
    let mut out = Vec::new();
    let mut text = String::new();
    let mut ratio = |experiment: &str,
                     claim: &str,
                     paper: f64,
                     worse: (&str, Metric, f64),
                     better: (&str, Metric, f64)| {
        if let (Some(w), Some(b)) = (find(worse.0), find(better.0)) {
            let ours = w.at(worse.1, worse.2) / b.at(better.1, better.2).max(1e-9);
            out.push(Verdict::new(experiment, claim.to_owned(), paper, ours));
        }
    };
    use Metric::{DwsReceipt, Holding, OmlReceipt, OmlRelease, ParticipantOml};
    ratio(
        "hedging",
        "H=1 cuts OML p99 vs H=0",
        401.0 / 199.0,
        ("n100_h0", OmlReceipt, 99.0),
        ("n100_h1", OmlReceipt, 99.0),
    );
    ratio(
        "hedging",
        "H=2 about equals H=1 on OML p99",
        199.0 / 191.0,
        ("n100_h1", OmlReceipt, 99.0),
        ("n100_h2", OmlReceipt, 99.0),
    );
    ratio(
        "hedging",
        "H=1 cuts DWS p99 vs H=0",
        357.0 / 154.0,
        ("n100_h0", DwsReceipt, 99.0),
        ("n100_h1", DwsReceipt, 99.0),
    );
    ratio(
        "hedging",
        "H=2 cuts DWS p50 a little vs H=1",
        91.0 / 72.0,
        ("n100_h1", DwsReceipt, 50.0),
        ("n100_h2", DwsReceipt, 50.0),
    );
    ratio(
        "ablation",
        "tree beats direct unicast at N=100 (p50)",
        254.0 / 147.0,
        ("n100_direct", OmlReceipt, 50.0),
        ("n100_h0", OmlReceipt, 50.0),
    );
    ratio(
        "ablation",
        "tree+hedging beats tree (p99)",
        401.0 / 199.0,
        ("n100_h0", OmlReceipt, 99.0),
        ("n100_h1", OmlReceipt, 99.0),
    );
    ratio(
        "ablation",
        "hold-and-release costs little on top (p50, release vs receipt)",
        151.0 / 129.0,
        ("n100_h2_hold_20us", OmlRelease, 50.0),
        ("n100_h1", OmlReceipt, 50.0),
    );
    ratio(
        "hold-and-release",
        "H=2 + hold beats CloudEx on OML p50",
        1042.0 / 180.0,
        ("n100_cloudex", OmlRelease, 50.0),
        ("n100_h2_hold", OmlRelease, 50.0),
    );
    ratio(
        "hold-and-release",
        "H=2 holds far shorter than CloudEx (p50)",
        767.5 / 74.3,
        ("n100_cloudex", Holding, 50.0),
        ("n100_h2_hold", Holding, 50.0),
    );
    ratio(
        "hold-and-release",
        "H=2 + hold beats H=0 + hold on OML p50",
        429.0 / 180.0,
        ("n100_h0_hold", OmlRelease, 50.0),
        ("n100_h2_hold", OmlRelease, 50.0),
    );
    ratio(
        "scaling",
        "OML p50 grows from N=100 to N=1000",
        214.0 / 129.0,
        ("n1000_h1", OmlReceipt, 50.0),
        ("n100_h1", OmlReceipt, 50.0),
    );
    ratio(
        "scaling",
        "OML p50 grows from N=100 to N=5832",
        315.0 / 129.0,
        ("n5832_h1", OmlReceipt, 50.0),
        ("n100_h1", OmlReceipt, 50.0),
    );
    ratio(
        "rrps",
        "RRPS beats a fixed tree under bursts, AWS (p90)",
        1615.0 / 495.0,
        ("n125_fixed_aws", OmlReceipt, 90.0),
        ("n125_rrps_aws", OmlReceipt, 90.0),
    );
    ratio(
        "rrps",
        "RRPS beats a fixed tree under bursts, GCP (p90)",
        305.0 / 277.0,
        ("n125_fixed_gcp", OmlReceipt, 90.0),
        ("n125_rrps_gcp", OmlReceipt, 90.0),
    );
    ratio(
        "receiver hedging",
        "two gateways per MP cut OML p50 (vs H=1, one gateway)",
        129.0 / 99.0,
        ("n100_h1", OmlReceipt, 50.0),
        ("n100_h1_rh", ParticipantOml, 50.0),
    );
    ratio(
        "receiver hedging",
        "N=200 with one gateway each is about N=100 (p50)",
        141.0 / 139.0,
        ("n200_h1", OmlReceipt, 50.0),
        ("n100_h1", OmlReceipt, 50.0),
    );
    // The paper's receiver hedging was worked out after the run, from its N = 200 run: the
    // artifact's `analysis/alt_data.py` pairs the 200 receivers' stats files (at random) and
    // keeps each message's earlier copy of a pair (`h1_200r_25aug_1118_ALT` in
    // `analysis/labels.py`). So Table 5's 99 and 141 come from one tree, and this is the
    // claim that isolates receiver hedging itself; the two above also carry what an N = 200
    // tree costs over N = 100, on which Tables 5 and 8 disagree. n100_h1_rh runs the same
    // 200-gateway tree, network and seed as n200_h1.
    ratio(
        "receiver hedging",
        "two gateways per MP cut OML p50 vs one each, same N=200 tree",
        141.0 / 99.0,
        ("n200_h1", OmlReceipt, 50.0),
        ("n100_h1_rh", ParticipantOml, 50.0),
    );

    // Tree shapes (Table 8): medians.
    let shapes: [(&str, &str, f64); 8] = [
        ("<1,10>", "n10_d1", 66.0),
        ("<2,4>", "n10_d2", 88.0),
        ("<1,100>", "n100_direct", 351.0),
        ("<2,10>", "n100_h0", 139.0),
        ("<3,5>", "n100_d3", 141.0),
        ("<2,32>", "n1000_d2", 282.0),
        ("<3,10>", "n1000_d3", 217.0),
        ("<4,6>", "n1000_d4", 226.0),
    ];
    let mut rows = String::new();
    for (shape, case, paper) in shapes {
        if let Some(c) = find(case) {
            let ours = c.at(OmlReceipt, 50.0);
            let _ = writeln!(
                rows,
                "  {shape:<8} {case:<12} {ours:>9.1} {paper:>9.1} {:>7.2}",
                ours / paper
            );
        }
    }
    section(
        &mut text,
        &format!(
            "\ntree shapes (Table 8), H=0, median OML\n  {:<8} {:<12} {:>9} {:>9} {:>7}",
            "<D,F>", "case", "ours", "paper", "ratio"
        ),
        &rows,
    );
    for (claim, paper, worse, better) in [
        ("N=10: <1,10> beats <2,4>", 88.0 / 66.0, "n10_d2", "n10_d1"),
        (
            "N=100: <2,10> beats <1,100>",
            351.0 / 139.0,
            "n100_direct",
            "n100_h0",
        ),
        (
            "N=100: <2,10> ties <3,5>",
            141.0 / 139.0,
            "n100_d3",
            "n100_h0",
        ),
        (
            "N=1000: <3,10> beats <2,32>",
            282.0 / 217.0,
            "n1000_d2",
            "n1000_d3",
        ),
        (
            "N=1000: <3,10> beats <4,6>",
            226.0 / 217.0,
            "n1000_d4",
            "n1000_d3",
        ),
    ] {
        if let (Some(w), Some(b)) = (find(worse), find(better)) {
            out.push(Verdict::new(
                "tree shapes",
                claim.to_owned(),
                paper,
                w.at(OmlReceipt, 50.0) / b.at(OmlReceipt, 50.0).max(1e-9),
            ));
        }
    }

    // P(F) with hold-and-release (exchange time, as the paper measured it).
    let mut rows = String::new();
    for (case, paper_pf, paper_oml) in [
        ("n100_h2_hold", 92.0, 175.0),
        ("n1000_h2_hold", 84.0, 238.0),
    ] {
        if let Some(c) = find(case) {
            let pf = c.summary.exchange.fairness_percent;
            let _ = writeln!(
                rows,
                "  {case:<14} {pf:>12.1} {:>10.1} {paper_pf:>10.1} {:>12.1} {paper_oml:>10.1}",
                c.summary.truth.fairness_percent,
                c.at(OmlRelease, 50.0)
            );
            out.push(Verdict::close(
                "P(F)",
                format!("{case}: P(F) within 10% of the paper's {paper_pf}%"),
                paper_pf,
                pf,
                0.10,
            ));
        }
    }
    // The unfair share 100 - P(F), floored at one message of the run: a P(F) of 100% on
    // 1,250 messages says the share is below 0.08%, not that it is zero (dividing by ~0
    // printed ratios of 10^9).
    let unfair_share =
        |s: &Summary| (100.0 - s.exchange.fairness_percent).max(100.0 / s.packets.max(1) as f64);
    if let (Some(a), Some(b)) = (find("n100_h2_hold"), find("n1000_h2_hold")) {
        out.push(Verdict::new(
            "P(F)",
            "P(F) falls from N=100 to N=1000 (unfair share grows)".to_owned(),
            (100.0 - 84.0) / (100.0 - 92.0),
            unfair_share(&b.summary) / unfair_share(&a.summary),
        ));
    }
    if let Some(c) = find("n5832_h1") {
        let _ = writeln!(
            rows,
            "  {:<14} {:>12.1} {:>10.1} {:>10} {:>12.1} {:>10}   (the scaling case, H=1; no paper figure)",
            c.name,
            c.summary.exchange.fairness_percent,
            c.summary.truth.fairness_percent,
            "-",
            c.at(OmlRelease, 50.0),
            "-"
        );
    }
    if let (Some(h2), Some(cx)) = (find("n100_h2_hold"), find("n100_cloudex")) {
        let _ = writeln!(
            rows,
            "  CloudEx P(F) exch {:.1}% (paper ~95%), H=2 {:.1}% (paper ~87-92%)",
            cx.summary.exchange.fairness_percent, h2.summary.exchange.fairness_percent
        );
    }
    let mut twin_rows = String::new();
    for (one_gateway, twins, what) in [
        ("n100_h1_hold", "n100_h1_rh_hold", "H=1, N=100"),
        ("n1000_h2_hold", "n1000_h2_rh_hold", "H=2, N=1000"),
    ] {
        if let (Some(one), Some(Some(mp))) = (
            find(one_gateway),
            find(twins).map(|c| c.summary.participants.as_ref()),
        ) {
            let _ = writeln!(
                twin_rows,
                "    {what}: P(F) per participant exch {:.1}% (one gateway each: {:.1}%); OML at \
                 each participant's first release p50 {:.1} p99 {:.1} µs (one gateway each: \
                 {:.1} / {:.1})",
                mp.fairness_percent_exchange,
                one.summary.exchange.fairness_percent,
                mp.oml_release.p50,
                mp.oml_release.p99,
                one.summary.truth.oml_release.p50,
                one.summary.truth.oml_release.p99,
            );
        }
    }
    section(
        &mut rows,
        "  receiver hedging with hold-and-release (ours; the paper has no such run):",
        &twin_rows,
    );
    section(
        &mut text,
        &format!(
            "\nP(F) and OML p50 with hold-and-release, H=2 unless noted\n  {:<14} {:>12} {:>10} {:>10} {:>12} {:>10}",
            "case", "P(F) exch %", "true %", "paper %", "OML p50", "paper"
        ),
        &rows,
    );

    // Appendix C.
    let mut rows = String::new();
    for c in cases.iter().filter(|c| c.name.starts_with("appc_")) {
        let parse = |key: char| {
            c.name
                .split('_')
                .find_map(|p| p.strip_prefix(key).and_then(|v| v.parse::<u32>().ok()))
        };
        let (Some(d), Some(f), Some(h)) = (parse('d'), parse('f'), parse('h')) else {
            continue;
        };
        let Some(&(_, _, paper)) = APPENDIX_C_MEANS.iter().find(|m| m.0 == d && m.1 == h) else {
            continue;
        };
        let ours = c.summary.truth.owd.mean;
        let _ = writeln!(
            rows,
            "  {:<18} {ours:>8.2} {paper:>8.2} {:>7.2}",
            c.name,
            ours / paper
        );
        out.push(Verdict::close(
            "appendix C",
            format!("D={d} F={f} H={h}: mean within 20% of {paper}"),
            paper,
            ours,
            0.20,
        ));
    }
    section(
        &mut text,
        &format!(
            "\nAppendix C Monte Carlo (per-hop U(0,1), no send cost): mean OWD in hop units\n  {:<18} {:>8} {:>8} {:>7}",
            "case", "ours", "paper", "ratio"
        ),
        &rows,
    );
    // In the order the report asks for them, each once.
    let mut missing = missing.into_inner();
    let mut seen = std::collections::BTreeSet::new();
    missing.retain(|name| seen.insert(name.clone()));
    (out, text, missing)
}

/// Appends `header` (a line) and `rows` to `text` when there are rows: a case filter or quick
/// mode leaves some tables empty, and an empty table's header says nothing.
fn section(text: &mut String, header: &str, rows: &str) {
    if !rows.is_empty() {
        let _ = writeln!(text, "{header}");
        text.push_str(rows);
    }
}

fn write_outputs(dir: &Path, report: &OutboundReport) -> std::io::Result<()> {
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
            c.figure,
            c.curve,
            c.metric,
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
            "{},\"{}\",{:.3},{:.3},{}",
            v.experiment, v.claim, v.paper_ratio, v.our_ratio, v.ok
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A curve whose case is missing is left out of the report without a word, so a renamed
    /// case must not orphan one.
    #[test]
    fn every_curve_names_a_case_of_its_scale() {
        for quick in [true, false] {
            let scale = Scale { quick };
            let names: Vec<String> = cases(scale).into_iter().map(|c| c.name).collect();
            for figure in figures(scale) {
                for curve in &figure.curves {
                    assert!(
                        names.contains(&curve.case),
                        "{} ({quick}): no case {}",
                        figure.figure,
                        curve.case
                    );
                }
            }
        }
    }

    /// Goal: `--case` patterns select what a researcher means: `*` is any run of characters,
    /// anywhere, and a name without one is that name only (`n100_h1` is not `n100_h1_hold`).
    #[test]
    fn case_patterns_match_names() {
        for (pattern, name, matches) in [
            ("n100_h1", "n100_h1", true),
            ("n100_h1", "n100_h1_hold", false),
            ("n100_h1*", "n100_h1_hold", true),
            ("n1000_*", "n1000_d3", true),
            ("n1000_*", "n100_h0", false),
            ("*_hold", "n1000_h2_hold", true),
            ("*_hold", "n100_h2_hold_20us", false),
            ("*hold*", "n100_h2_hold_20us", true),
            ("n*_d*", "n1000_d4", true),
            ("n*_d*", "n100_direct", true),
            ("appc_*_h0", "appc_d4_f6_h0", true),
            ("appc_*_h0", "appc_d4_f6_h1", false),
            ("*", "anything", true),
            ("a*a", "a", false),
            ("", "n100_h0", false),
        ] {
            assert_eq!(case_matches(pattern, name), matches, "{pattern} vs {name}");
        }
        let full = |names: &[&str]| check_case_names(false, Some(names));
        assert_eq!(full(&["n1000_*", "*_rh*"]), Ok(()));
        assert!(full(&["n99_*"]).unwrap_err().contains("no case \"n99_*\""));
        let quick = check_case_names(true, Some(&["n5832_*"])).unwrap_err();
        assert!(quick.contains("full mode only"), "{quick}");
        let selected: Vec<String> = seeded_cases(false, 1, Some(&["n1000_d*"]))
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(selected, ["n1000_d2", "n1000_d3", "n1000_d4"]);
    }

    /// Goal: a configuration written as TOML reads back as itself, so the `config.toml`
    /// that `jasper sim run` writes beside its results reruns the run. Method: every case of
    /// both campaigns (every preset, CloudEx's fixed hold, bursts, shared VMs) and the
    /// default, through `toml`, compared field by field.
    #[test]
    fn every_case_configuration_reads_back_from_toml() {
        let mut configs: Vec<(String, OutboundConfig)> =
            vec![("default".to_owned(), OutboundConfig::default())];
        for quick in [true, false] {
            for case in cases(Scale { quick }) {
                configs.push((case.name, case.config));
            }
        }
        for (name, config) in configs {
            let text = toml::to_string(&config).expect("serialises");
            let back: OutboundConfig =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            assert_eq!(back, config, "{name}:\n{text}");
        }
    }

    /// A verdict whose case is missing is left out of the judgement (quick mode runs fewer
    /// cases), so a renamed case must not drop one: with every case of the full campaign
    /// present none is missing, and quick mode misses only cases that run in full mode alone.
    #[test]
    fn every_verdict_names_a_case_of_the_campaign() {
        let results = |scale: Scale| -> Vec<CaseResult> {
            cases(scale)
                .into_iter()
                .map(|c| CaseResult {
                    name: c.name,
                    receivers: c.config.plan.participants,
                    model: String::new(),
                    summary: Summary::default(),
                    participant_oml: None,
                    clock_error_ns: [0; 3],
                    cdfs: BTreeMap::new(),
                })
                .collect()
        };
        let full = results(Scale { quick: false });
        let (judged, _, missing) = verdicts(&full);
        assert_eq!(
            missing,
            Vec::<String>::new(),
            "the full campaign misses cases"
        );
        let quick = results(Scale { quick: true });
        let (quick_judged, _, quick_missing) = verdicts(&quick);
        assert!(!quick_missing.is_empty() && quick_judged.len() < judged.len());
        for name in &quick_missing {
            assert!(
                full.iter().any(|c| &c.name == name),
                "quick mode asks for {name}, which no mode runs"
            );
        }
    }

    /// `--list` names every case `--case` takes, one line each, with the settings that tell
    /// the cases apart.
    #[test]
    fn the_case_list_names_every_case_with_its_settings() {
        for quick in [false, true] {
            let list = list_cases(quick);
            let names: Vec<String> = cases(Scale { quick }).into_iter().map(|c| c.name).collect();
            let rows: Vec<&str> = list.lines().skip(2).collect();
            assert_eq!(rows.len(), names.len(), "{list}");
            for (row, name) in rows.iter().zip(&names) {
                assert_eq!(row.split_whitespace().next(), Some(name.as_str()), "{list}");
            }
        }
        let list = list_cases(false);
        let row = |name: &str| -> Vec<&str> {
            let line = list
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("no {name} in\n{list}"));
            line.split_whitespace().collect()
        };
        assert_eq!(
            row("n100_cloudex")[..8],
            [
                "n100_cloudex",
                "100",
                "<1,100>",
                "0",
                "-",
                "off",
                "fixed",
                "1000"
            ]
        );
        assert_eq!(
            row("n100_h2_hold_20us")[..7],
            [
                "n100_h2_hold_20us",
                "100",
                "<2,10>",
                "2",
                "on",
                "off",
                "p97+20"
            ]
        );
        assert_eq!(row("n1000_h1")[7], "10", "gateways per VM");
        assert!(row("n125_fixed_gcp").contains(&"gcp_c2d"));
        assert!(row("n125_fixed_gcp").contains(&"15x"));
    }

    #[test]
    fn a_rule_judges_as_its_verdict_did() {
        for (paper, ours) in [
            (2.0, 1.41),
            (2.0, 1.39),
            (2.0, 3.5),
            (2.0, 3.6),
            (1.02, 1.14),
        ] {
            let v = Verdict::new("e", "c".to_owned(), paper, ours);
            assert_eq!(v.rule, Rule::Shape);
            assert_eq!(v.ok, v.rule.judge(paper, ours), "{paper} {ours}");
        }
        assert!(Verdict::new("e", "c".to_owned(), 2.0, 1.41).ok);
        assert!(!Verdict::new("e", "c".to_owned(), 2.0, 3.6).ok);
        assert!(!Verdict::new("e", "c".to_owned(), 1.02, 1.16).ok);
        let v = Verdict::close("e", "c".to_owned(), 92.0, 83.0, 0.10);
        assert!(v.ok && v.rule == Rule::Close { tolerance: 0.10 });
        assert!(!Rule::Close { tolerance: 0.10 }.judge(92.0, 82.0));
        assert!(!Rule::Close { tolerance: 0.10 }.judge(0.0, 0.0));
    }

    /// A verdict that passes on one seed of three but not on the median is a mismatch, and
    /// one that fails on one seed but holds on the median matches.
    #[test]
    fn a_sweep_judges_the_median_not_any_one_seed() {
        let report = |a: f64, b: f64| OutboundReport {
            quick: true,
            cases: Vec::new(),
            comparisons: Vec::new(),
            verdicts: vec![
                Verdict::new("x", "a".to_owned(), 2.0, a),
                Verdict::close("y", "b".to_owned(), 100.0, b, 0.1),
                Verdict::close("y", "b".to_owned(), 100.0, b + 1.0, 0.1),
            ],
            not_run: Vec::new(),
            text: String::new(),
        };
        let reports = [report(1.5, 95.0), report(4.0, 80.0), report(3.9, 105.0)];
        let sweep = sweep_verdicts(true, &[1, 2, 3], &reports).unwrap();
        let (a, b) = (&sweep.verdicts[0], &sweep.verdicts[1]);
        assert_eq!((a.median, a.seeds_ok, a.ok), (3.9, 1, false));
        assert_eq!((b.median, b.seeds_ok, b.ok), (95.0, 2, true));
        assert_eq!(
            sweep.verdicts.len(),
            3,
            "a repeated claim stays two verdicts"
        );
        assert_eq!(sweep.verdicts[2].ours, vec![96.0, 81.0, 106.0]);
        assert_eq!(sweep.matched, vec![3, 0, 2]);
        assert!(sweep.text.contains("2/3 shapes match"), "{}", sweep.text);
        assert!(
            sweep.text.contains("seed by seed: 3/3, 0/3, 2/3"),
            "{}",
            sweep.text
        );
        let mut short = report(1.5, 95.0);
        short.verdicts.pop();
        let refused = sweep_verdicts(true, &[1, 2], &[report(1.5, 95.0), short]);
        assert!(refused.unwrap_err().contains("seed 0x2"));
    }

    /// Goal: Ctrl-C on a sweep keeps what ran whole. The seeds that ran every case are judged
    /// as a sweep of those seeds alone would judge them; a seed cut short gets the report of
    /// its whole cases and says what did not run; one with no whole case writes nothing.
    /// Method: the two N = 10 tree-shape cases on seeds 7, 8 and 9, with seed 8's second case
    /// and both of seed 9's taken away as a stop would have left them.
    #[test]
    fn a_stopped_sweep_judges_the_seeds_that_ran_whole() {
        let only: &[&str] = &["n10_d1", "n10_d2"];
        let seeds = [7, 8, 9];
        let dir = std::env::temp_dir().join(format!("jasper-stopped-sweep-{}", std::process::id()));
        let all: Vec<Case> = seeds
            .iter()
            .flat_map(|&seed| seeded_cases(true, seed, Some(only)))
            .collect();
        let no_stop = AtomicBool::new(false);
        let mut results = run_cases(&all, &mut |_| {}, &no_stop).unwrap();
        assert!(results.iter().all(Option::is_some));
        let whole = judge_seeds(
            &dir.join("whole"),
            true,
            &seeds[..1],
            &all[..2],
            results[..2].to_vec(),
        )
        .unwrap();
        for cut in &mut results[3..] {
            *cut = None;
        }
        let sweep = judge_seeds(&dir, true, &seeds, &all, results).unwrap();
        assert_eq!(sweep.seeds, [7]);
        assert_eq!(sweep.incomplete_seeds, [8, 9]);
        assert_eq!(sweep.verdicts.len(), whole.verdicts.len());
        for (cut, whole) in sweep.verdicts.iter().zip(&whole.verdicts) {
            assert_eq!((&cut.claim, &cut.ours), (&whole.claim, &whole.ours));
        }
        assert!(
            sweep.text.starts_with("Interrupted (Ctrl-C): 1 of 3 seeds"),
            "{}",
            sweep.text
        );
        assert!(
            sweep.text.contains("seed 0x8 was cut short"),
            "{}",
            sweep.text
        );
        assert!(
            sweep.text.contains("seed 0x9 ran no case whole"),
            "{}",
            sweep.text
        );
        let cut = std::fs::read_to_string(dir.join("seed-0x8/report.txt")).unwrap();
        assert!(
            cut.contains("Interrupted (Ctrl-C): 1 of 2 cases ran whole")
                && cut.contains("Not run: n10_d2."),
            "{cut}"
        );
        // The N = 10 verdict needs both cases.
        assert!(!cut.contains("<1,10> beats <2,4>"), "{cut}");
        let json = std::fs::read_to_string(dir.join("seed-0x8/results.json")).unwrap();
        assert!(json.contains("\"not_run\""), "{json}");
        assert!(!dir.join("seed-0x9").exists());
        let csv = std::fs::read_to_string(dir.join("seeds.csv")).unwrap();
        assert!(csv.contains(",0x7,") && !csv.contains(",0x8,"), "{csv}");
        // Stopped before anything ran: nothing is judged, and nothing written but the
        // directory.
        let stop = AtomicBool::new(true);
        let none = paper_outbound_seeds(
            &dir.join("none"),
            true,
            &seeds,
            Some(only),
            &mut |_| {},
            &stop,
        )
        .unwrap();
        assert!(none.seeds.is_empty() && none.verdicts.is_empty());
        assert_eq!(none.incomplete_seeds, seeds);
        assert!(
            none.text
                .starts_with("Interrupted (Ctrl-C) before any seed"),
            "{}",
            none.text
        );
        assert!(!dir.join("none/seeds.csv").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Goal: a campaign stopped before its cases ran says so, judges nothing, and still writes
    /// its report; a whole campaign's `results.json` has no `not_run`; a campaign clears what
    /// an earlier one wrote into its directory, and nothing else.
    #[test]
    fn a_campaign_stopped_at_once_reports_every_case_as_not_run() {
        let only: &[&str] = &["n10_d1", "n10_d2"];
        let dir =
            std::env::temp_dir().join(format!("jasper-stopped-campaign-{}", std::process::id()));
        let report = paper_outbound_with(
            &dir,
            true,
            None,
            Some(only),
            &mut |_| {},
            &AtomicBool::new(true),
        )
        .unwrap();
        assert!(report.cases.is_empty() && report.verdicts.is_empty());
        assert_eq!(report.not_run, only);
        assert!(
            report
                .text
                .contains("Interrupted (Ctrl-C): 0 of 2 cases ran whole"),
            "{}",
            report.text
        );
        assert!(dir.join("report.txt").is_file());
        // An earlier campaign's figure and sweep go, with an earlier sweep's seed directories
        // (left if something else is in them); a file of the user's stays, as does a
        // directory that only looks like a seed's.
        for stale in [
            "oml_by_hedging_n100.svg",
            "seeds.csv",
            "notes.txt",
            "seed-0x63/report.txt",
            "seed-0x64/results.json",
            "seed-0x64/notes.txt",
            "seed-0xzz/report.txt",
        ] {
            let path = dir.join(stale);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "stale").unwrap();
        }
        let whole = paper_outbound_with(
            &dir,
            true,
            None,
            Some(&only[..1]),
            &mut |_| {},
            &AtomicBool::new(false),
        )
        .unwrap();
        assert!(whole.not_run.is_empty() && !whole.text.contains("Interrupted"));
        let json = std::fs::read_to_string(dir.join("results.json")).unwrap();
        assert!(!json.contains("not_run"), "{json}");
        // The names in `dir/sub`, sorted.
        let listed = |sub: &str| {
            let mut names: Vec<String> = std::fs::read_dir(dir.join(sub))
                .unwrap()
                .map(|entry| entry.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            listed(""),
            [
                "comparison.csv",
                "notes.txt",
                "report.txt",
                "results.json",
                "seed-0x64",
                "seed-0xzz",
                "verdicts.csv"
            ]
        );
        assert_eq!(listed("seed-0x64"), ["notes.txt"]);
        assert_eq!(listed("seed-0xzz"), ["report.txt"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
