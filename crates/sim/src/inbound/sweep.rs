//! The inbound campaign over several seeds: each verdict judged on how many seeds it holds
//! on, which says whether a shape holds or was one draw of the network and the workload.
//!
//! The inbound verdicts are yes-or-no claims, some on several figures at once, so where the
//! outbound sweep ([`crate::experiments::paper_outbound_seeds`]) takes the median of a ratio,
//! this one takes the majority: a claim holds across seeds when it holds on more than half of
//! them. For a claim on one figure against a bound the two agree.

use core::fmt::Write as _;
use core::sync::atomic::{AtomicBool, Ordering};
use std::path::Path;

use serde::Serialize;

use super::paper::{INBOUND_OUTPUTS, Report, Verdict, run_campaign};
use crate::experiments::Printed;
use crate::experiments::sweep::{check_seeds, over_seeds, reports_so_far, seed_by_seed};
use crate::report::{csv_field, csv_field_always_quoted};

/// The files a sweep writes into its directory (each seed's campaign goes to `seed-0x…/`).
pub const INBOUND_SWEEP_OUTPUTS: [&str; 3] = [
    "inbound-seeds.txt",
    "inbound-seeds.json",
    "inbound-seeds.csv",
];

/// One claim over the seeds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SweptClaim {
    /// The experiment that judges it.
    pub experiment: &'static str,
    /// The claim in words.
    pub claim: String,
    /// Whether it held, seed by seed, in seed order.
    pub held: Vec<bool>,
    /// On how many seeds it held.
    pub seeds_ok: usize,
    /// Whether it holds across the seeds: on more than half of them.
    pub ok: bool,
}

/// Everything [`paper_inbound_seeds`] found.
#[derive(Clone, Debug, Serialize)]
pub struct InboundSweep {
    /// Quick mode.
    pub quick: bool,
    /// The seeds that ran every experiment whole, in run order: the claims are over these.
    pub seeds: Vec<u64>,
    /// How many claims held on each of `seeds`.
    pub matched: Vec<usize>,
    /// Each claim over the seeds.
    pub claims: Vec<SweptClaim>,
    /// Seeds a stop (Ctrl-C) cut short or never started, in run order (each that ran an
    /// experiment whole has it in its `seed-0x…/`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub incomplete_seeds: Vec<u64>,
    /// The printed summary.
    pub text: String,
}

/// [`paper_inbound_seeds`] with progress on stderr; returns the printed summary.
pub fn paper_inbound_sweep(
    out_dir: &Path,
    quick: bool,
    seeds: &[u64],
    stop: &AtomicBool,
) -> Result<Printed, String> {
    let mut progress = crate::experiments::stderr_progress();
    let sweep = paper_inbound_seeds(out_dir, quick, seeds, &mut progress, stop)?;
    Ok(Printed {
        interrupted: !sweep.incomplete_seeds.is_empty(),
        text: sweep.text,
    })
}

/// Reruns the inbound campaign on each of `seeds` in turn (each campaign's runs on every
/// core), each seed's report and files in `OUT/seed-0x…/` as
/// [`paper_inbound`](super::paper::paper_inbound) writes them, and judges each claim over the
/// seeds: it holds when it holds on most of them. `OUT/inbound-seeds.txt`, `.json` and `.csv`
/// hold the sweep ([`INBOUND_SWEEP_OUTPUTS`]).
///
/// What an earlier campaign or sweep wrote into `out_dir` and its `seed-0x…/` directories
/// goes first. Once `stop` is set (Ctrl-C) no run starts and those running are abandoned: the
/// seeds that ran every experiment are judged alone, and a seed cut short keeps the report of
/// the experiments it ran.
pub fn paper_inbound_seeds(
    out_dir: &Path,
    quick: bool,
    seeds: &[u64],
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<InboundSweep, String> {
    let count = seeds.len();
    let mut started = 0;
    sweep_with(out_dir, quick, seeds, stop, &mut |dir, seed| {
        started += 1;
        progress(&format!("seed {seed:#x} ({started} of {count})\n"));
        run_campaign(dir, quick, Some(seed), progress, stop)
    })
}

/// [`paper_inbound_seeds`], `campaign` writing a seed's report into a directory.
fn sweep_with(
    out_dir: &Path,
    quick: bool,
    seeds: &[u64],
    stop: &AtomicBool,
    campaign: &mut dyn FnMut(&Path, u64) -> Result<Report, String>,
) -> Result<InboundSweep, String> {
    check_seeds(seeds)?;
    std::fs::create_dir_all(out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let names = INBOUND_OUTPUTS.into_iter().chain(INBOUND_SWEEP_OUTPUTS);
    crate::report::remove_outputs(out_dir, names.clone())
        .map_err(|e| format!("clearing {}: {e}", out_dir.display()))?;
    crate::report::clear_seed_dirs(out_dir, names)?;

    let (mut whole, mut incomplete) = (Vec::new(), Vec::new());
    for &seed in seeds {
        if stop.load(Ordering::Relaxed) {
            incomplete.push((seed, false));
            continue;
        }
        let report = campaign(&out_dir.join(format!("seed-{seed:#x}")), seed)?;
        if report.not_run.is_empty() {
            whole.push((seed, report.verdicts));
        } else {
            incomplete.push((seed, report.not_run.len() < super::paper::EXPERIMENTS.len()));
        }
    }
    let mut sweep = judge(quick, &whole)?;
    sweep.incomplete_seeds = incomplete.iter().map(|&(seed, _)| seed).collect();
    if !incomplete.is_empty() {
        let mut text = if whole.is_empty() {
            "Interrupted (Ctrl-C) before any seed ran every experiment: nothing is judged over \
             seeds.\n"
                .to_owned()
        } else {
            format!(
                "Interrupted (Ctrl-C): {} of {} seeds ran every experiment, and the claims \
                 below are over those alone.\n",
                whole.len(),
                seeds.len()
            )
        };
        text.push_str(&reports_so_far(out_dir, &incomplete, "experiment"));
        if whole.is_empty() {
            sweep.text = text;
            return Ok(sweep);
        }
        sweep.text.insert_str(0, &text);
    }
    write_sweep(out_dir, &sweep).map_err(|e| format!("writing {}: {e}", out_dir.display()))?;
    Ok(sweep)
}

/// Gathers each claim of `whole` (each seed's verdicts, every experiment run whole, so every
/// seed has the same claims in the same order; a seed that does not is refused).
fn judge(quick: bool, whole: &[(u64, Vec<Verdict>)]) -> Result<InboundSweep, String> {
    let first = whole.first().map_or(&[][..], |(_, v)| &v[..]);
    let mut claims: Vec<SweptClaim> = first
        .iter()
        .map(|v| SweptClaim {
            experiment: v.experiment,
            claim: v.claim.clone(),
            held: Vec::with_capacity(whole.len()),
            seeds_ok: 0,
            ok: false,
        })
        .collect();
    for (seed, verdicts) in whole {
        let same = verdicts.len() == claims.len()
            && verdicts
                .iter()
                .zip(&claims)
                .all(|(v, c)| v.experiment == c.experiment && v.claim == c.claim);
        if !same {
            return Err(format!(
                "seed {seed:#x} gave other claims than seed {:#x}",
                whole[0].0
            ));
        }
        for (v, c) in verdicts.iter().zip(&mut claims) {
            c.held.push(v.ok);
        }
    }
    for c in &mut claims {
        c.seeds_ok = c.held.iter().filter(|&&ok| ok).count();
        c.ok = 2 * c.seeds_ok > whole.len();
    }
    let seeds: Vec<u64> = whole.iter().map(|&(seed, _)| seed).collect();
    let matched: Vec<usize> = whole
        .iter()
        .map(|(_, v)| v.iter().filter(|v| v.ok).count())
        .collect();
    let mut text = format!(
        "Jasper inbound experiments vs the paper over {}: a claim holds when it holds on more \
         than half of the seeds\n",
        over_seeds(quick, &seeds)
    );
    for c in &claims {
        let each = c
            .held
            .iter()
            .map(|&ok| if ok { "yes" } else { "no" })
            .collect::<Vec<_>>()
            .join(" / ");
        let _ = writeln!(
            text,
            "  [{}] {}: {} — holds on {}/{} seeds ({each})",
            if c.ok { "ok" } else { "DIFFERS" },
            c.experiment,
            c.claim,
            c.seeds_ok,
            seeds.len()
        );
    }
    let _ = writeln!(
        text,
        "{}/{} shapes match the paper on most seeds; seed by seed: {}. Each seed's report and \
         figures are in its seed-0x…/.",
        claims.iter().filter(|c| c.ok).count(),
        claims.len(),
        seed_by_seed(&matched, claims.len())
    );
    Ok(InboundSweep {
        quick,
        seeds,
        matched,
        claims,
        incomplete_seeds: Vec::new(),
        text,
    })
}

fn write_sweep(dir: &Path, sweep: &InboundSweep) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(sweep).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("inbound-seeds.json"), json)?;
    std::fs::write(dir.join("inbound-seeds.txt"), &sweep.text)?;
    let mut csv = String::from("experiment,claim,seed,ok\n");
    for c in &sweep.claims {
        for (seed, ok) in sweep.seeds.iter().zip(&c.held) {
            let _ = writeln!(
                csv,
                "{},{},{seed:#x},{ok}",
                csv_field(c.experiment),
                csv_field_always_quoted(&c.claim)
            );
        }
        let _ = writeln!(
            csv,
            "{},{},most,{}",
            csv_field(c.experiment),
            csv_field_always_quoted(&c.claim),
            c.ok
        );
    }
    std::fs::write(dir.join("inbound-seeds.csv"), csv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::InboundRun;
    use crate::inbound::paper::campaign;

    fn verdicts(oks: [bool; 3]) -> Vec<Verdict> {
        ["a", "b", "c"]
            .into_iter()
            .zip(oks)
            .map(|(claim, ok)| Verdict {
                experiment: "loq",
                claim: claim.to_owned(),
                ok,
            })
            .collect()
    }

    /// A claim holds across seeds when it holds on most of them, not on any one; a seed with
    /// other claims is refused.
    #[test]
    fn a_sweep_judges_each_claim_by_most_seeds() {
        let whole = [
            (1, verdicts([true, true, false])),
            (2, verdicts([false, true, false])),
            (3, verdicts([true, false, true])),
        ];
        let sweep = judge(false, &whole).unwrap();
        let held: Vec<(usize, bool)> = sweep.claims.iter().map(|c| (c.seeds_ok, c.ok)).collect();
        assert_eq!(held, [(2, true), (2, true), (1, false)]);
        assert_eq!(sweep.claims[2].held, [false, false, true]);
        assert_eq!(sweep.matched, [2, 1, 2]);
        assert!(
            sweep.text.contains(
                "2/3 shapes match the paper on most seeds; seed by seed: 2/3, \
                                 1/3, 2/3"
            ),
            "{}",
            sweep.text
        );
        assert!(
            sweep
                .text
                .contains("[DIFFERS] loq: c — holds on 1/3 seeds (no / no / yes)"),
            "{}",
            sweep.text
        );
        // Half is not most.
        let even = judge(false, &whole[..2]).unwrap();
        assert_eq!(even.claims[0].seeds_ok, 1);
        assert!(!even.claims[0].ok);
        let mut short = verdicts([true, true, true]);
        short.pop();
        let refused = judge(false, &[(1, verdicts([true; 3])), (7, short)]);
        assert!(refused.unwrap_err().contains("seed 0x7"));
    }

    /// Goal: Ctrl-C on a sweep keeps what ran whole: the seeds that ran every experiment are
    /// judged alone, and one cut short keeps its report of what it ran and says so. Method:
    /// seeds 4, 5, 6 from placeholder runs, with seed 5's 1,000-participant runs stopped.
    #[test]
    fn a_sweep_cut_short_judges_the_seeds_that_ran_whole() {
        let dir =
            std::env::temp_dir().join(format!("jasper-inbound-sweep-cut-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let no_stop = AtomicBool::new(false);
        let sweep = sweep_with(&dir, true, &[4, 5, 6], &no_stop, &mut |seed_dir, seed| {
            campaign(Some(seed_dir), true, Some(seed), &mut |config| {
                let stopped = seed == 5 && config.plan.participants > 10;
                Ok((!stopped).then(InboundRun::default))
            })
        })
        .unwrap();
        assert_eq!(sweep.seeds, [4, 6]);
        assert_eq!(sweep.incomplete_seeds, [5]);
        assert!(!sweep.claims.is_empty());
        assert!(sweep.claims.iter().all(|c| c.held.len() == 2));
        assert!(
            sweep.text.starts_with(
                "Interrupted (Ctrl-C): 2 of 3 seeds ran every experiment, and the claims"
            ),
            "{}",
            sweep.text
        );
        assert!(
            sweep.text.contains("seed 0x5 was cut short"),
            "{}",
            sweep.text
        );
        let cut = std::fs::read_to_string(dir.join("seed-0x5/inbound.json")).unwrap();
        assert!(cut.contains("\"not_run\""), "{cut}");
        let csv = std::fs::read_to_string(dir.join("inbound-seeds.csv")).unwrap();
        assert!(
            csv.contains(",0x4,") && csv.contains(",0x6,") && !csv.contains(",0x5,"),
            "{csv}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("inbound-seeds.json")).unwrap())
                .unwrap();
        assert_eq!(json["incomplete_seeds"], serde_json::json!([5]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Goal: a sweep stopped before it starts runs nothing and judges nothing, but still
    /// clears what an earlier sweep left (its files and its seeds' reports), and leaves the
    /// rest of the directory alone.
    #[test]
    fn a_sweep_stopped_at_once_clears_old_results_and_judges_nothing() {
        let dir = std::env::temp_dir().join(format!("jasper-inbound-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let old_seed = dir.join("seed-0x9");
        std::fs::create_dir_all(&old_seed).unwrap();
        for name in INBOUND_SWEEP_OUTPUTS {
            std::fs::write(dir.join(name), "an earlier sweep's").unwrap();
        }
        std::fs::write(old_seed.join("inbound.json"), "an earlier seed's").unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let stop = AtomicBool::new(true);
        let sweep = paper_inbound_seeds(&dir, true, &[4, 5], &mut |_| {}, &stop).unwrap();
        assert!(sweep.seeds.is_empty() && sweep.claims.is_empty());
        assert_eq!(sweep.incomplete_seeds, [4, 5]);
        assert!(
            sweep
                .text
                .starts_with("Interrupted (Ctrl-C) before any seed ran every experiment"),
            "{}",
            sweep.text
        );
        assert!(sweep.text.contains("seed 0x5 ran no experiment whole"));
        for name in INBOUND_SWEEP_OUTPUTS {
            assert!(!dir.join(name).exists(), "{name}");
        }
        assert!(!old_seed.exists() && !dir.join("seed-0x4").exists());
        assert_eq!(
            std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
            "mine"
        );
        assert!(paper_inbound_seeds(&dir, true, &[4, 4], &mut |_| {}, &stop).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
