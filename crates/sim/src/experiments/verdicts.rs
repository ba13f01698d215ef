//! The shape checks: each claim of the paper (which setting wins, by roughly how much), the
//! rule that judges ours against it, and the tables that are not curves (tree shapes, P(F),
//! Appendix C).

use core::fmt::Write as _;

use serde::Serialize;

use super::{APPENDIX_C_MEANS, CaseResult, Metric};
use crate::report::Summary;

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
    /// median of its ratios by the same rule:
    /// [`paper_outbound_seeds`](super::paper_outbound_seeds)).
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

/// The shape checks, and the text of the experiments that are tables rather than curves
/// (tree shapes, P(F), Appendix C).
///
/// A verdict whose cases did not run is left out; the third value names those cases (quick
/// mode runs no N = 1000 tree shapes and no N = 5832), so that the report says what it did not
/// judge and a test can tell a misspelt case from one the mode leaves out.
pub(super) fn verdicts(cases: &[CaseResult]) -> (Vec<Verdict>, String, Vec<String>) {
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
        |s: &Summary| (100.0 - s.exchange.fairness_percent).max(100.0 / s.messages.max(1) as f64);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::experiments::{Scale, cases};

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
}
