//! The paper's outbound experiments, rerun on the calibrated model and printed beside the
//! paper's figures (DESIGN.md §6, `data/paper_figures.csv`).
//!
//! [`paper_outbound`] runs every case of [`cases()`] (tree shapes; direct unicast vs
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
//! A run is a [`Case`]: an [`OutboundConfig`](crate::scenario::OutboundConfig) and a name.
//! Cases shared by several figures (the H = 1 tree is the "tree+hedging" curve of the ablation,
//! the N = 100 point of the scaling figure and the "no receiver hedging" baseline) run once.
//!
//! Which metric each figure plots: without hold-and-release, OML and DWS at receipt; with it,
//! OML and DWS at release and the holding time. OML and holding time are compared in true
//! time; DWS at release and P(F) in exchange time, which is what the paper could measure (its
//! gateways' clocks were synchronised by Huygens, as ours are by [`proto::clock`]); the
//! true-time P(F) is printed beside it.

//!
//! Where each part is, in `experiments/`: the cases and figures in `cases.rs`, the paper's
//! numbers in `paper.rs`, the shape checks in `verdicts.rs`, one seed's report and output
//! files in `report.rs`, the sweep over seeds in `sweep.rs`; here, running the cases on every
//! core and the output directory.

use core::sync::atomic::{AtomicBool, Ordering};
use std::collections::BTreeMap;
use std::path::Path;

use crate::report::{Percentiles, cdf_points};
use crate::scenario::{Ended, Outbound};

mod cases;
mod paper;
mod report;
pub(crate) mod sweep;
mod verdicts;

pub use cases::{
    ABLATION_MARGIN, CLOUDEX_HOLD_NS, Case, CurveSpec, FigureSpec, Metric, PROTOTYPE_MARGIN, SEED,
    Scale, base, case_matches, cases, check_case_names, figures, list_cases,
};
pub use paper::{APPENDIX_C_MEANS, PAPER_FIGURES_CSV, PAPER_PERCENTILES, PaperCurve, paper_curves};
pub use report::{CaseResult, Comparison, OutboundReport};
pub use sweep::{
    SeedSweep, SweptVerdict, consecutive_seeds, paper_outbound_seeds, paper_outbound_sweep,
};
pub use verdicts::{Rule, Verdict};

use cases::seeded_cases;
use report::{build_report, write_outputs};

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
    crate::report::remove_outputs(out_dir, names.clone())
        .map_err(|e| format!("clearing {}: {e}", out_dir.display()))?;
    crate::report::clear_seed_dirs(out_dir, names)
}

/// The files [`write_outputs`] writes beside one SVG per figure.
const CAMPAIGN_OUTPUTS: [&str; 4] = [
    "results.json",
    "report.txt",
    "comparison.csv",
    "verdicts.csv",
];

/// The files a sweep over seeds writes ([`paper_outbound_seeds`]).
const SWEEP_OUTPUTS: [&str; 3] = ["seeds.json", "seeds.txt", "seeds.csv"];

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

#[cfg(test)]
mod tests {
    use super::*;

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
        // Every row has its header's fields (labels and metrics hold commas).
        for file in ["comparison.csv", "verdicts.csv"] {
            let records =
                crate::report::csv_records(&std::fs::read_to_string(dir.join(file)).unwrap());
            assert!(!records.is_empty(), "{file}");
            assert!(
                records.iter().all(|r| r.len() == records[0].len()),
                "{file}: {records:?}"
            );
        }
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
