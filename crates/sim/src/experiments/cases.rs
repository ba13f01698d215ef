//! What the campaign runs: every case (an [`OutboundConfig`] and a name) in the paper's
//! settings, the figures they reproduce, and the case filter and list of
//! `jasper sim paper-outbound --case` and `--list`.

use core::fmt::Write as _;

use proto::plan::{PlanConfig, Shape};
use serde::Serialize;

use crate::network::NetModel;
use crate::scenario::{Burst, OutboundConfig};

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

/// The campaign's seed (every case's, unless [`paper_outbound`](super::paper_outbound) is given
/// another).
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
pub(super) fn seeded_cases(quick: bool, seed: u64, only: Option<&[&str]>) -> Vec<Case> {
    cases(Scale { quick })
        .into_iter()
        .filter(|c| only.is_none_or(|only| only.iter().any(|o| case_matches(o, &c.name))))
        .map(|mut c| {
            c.config.seed = seed;
            c
        })
        .collect()
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
}
