//! The campaign over several seeds: each verdict judged on the median of its ratios, which
//! says whether a shape holds or was one draw of the network.

use core::fmt::Write as _;
use core::sync::atomic::AtomicBool;
use std::path::Path;

use proto::stats::median;
use serde::Serialize;

use crate::report::{csv_field, csv_field_always_quoted};

use super::{
    Case, CaseResult, OutboundReport, Printed, Rule, build_report, check_case_names, make_out_dir,
    run_cases, seeded_cases, stderr_progress, whole_cases, write_outputs,
};

/// `count` consecutive seeds from `first`.
pub fn consecutive_seeds(first: u64, count: u32) -> Result<Vec<u64>, String> {
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
/// `OUT/seed-0x…/` (as [`paper_outbound`](super::paper_outbound) writes it); `OUT/seeds.txt`,
/// `seeds.json` and `seeds.csv` hold the sweep.
///
/// Once `stop` is set (Ctrl-C) no case starts, and those running are abandoned. The seeds run
/// in order, so those that ran whole come first: the sweep judges them alone, and each seed cut
/// short still gets the report of the cases it ran
/// ([`paper_outbound_with`](super::paper_outbound_with)).
pub fn paper_outbound_seeds(
    out_dir: &Path,
    quick: bool,
    seeds: &[u64],
    only: Option<&[&str]>,
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<SeedSweep, String> {
    check_seeds(seeds)?;
    check_case_names(quick, only)?;
    make_out_dir(out_dir)?;
    let all: Vec<Case> = seeds
        .iter()
        .flat_map(|&seed| seeded_cases(quick, seed, only))
        .collect();
    let results = run_cases(&all, progress, stop)?;
    judge_seeds(out_dir, quick, seeds, &all, results)
}

/// Refuses a sweep over no seed, or over a seed twice.
pub(crate) fn check_seeds(seeds: &[u64]) -> Result<(), String> {
    if seeds.is_empty() {
        return Err("a sweep needs at least one seed".to_owned());
    }
    let mut distinct = seeds.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != seeds.len() {
        return Err(format!("seeds repeat: {seeds:?}"));
    }
    Ok(())
}

/// "3 seeds (quick mode; 0x1, 0x2, 0x3)", for a sweep's first line.
pub(crate) fn over_seeds(quick: bool, seeds: &[u64]) -> String {
    let list = seeds
        .iter()
        .map(|s| format!("{s:#x}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{} ({} mode; {list})",
        match seeds.len() {
            1 => "1 seed".to_owned(),
            n => format!("{n} seeds"),
        },
        if quick { "quick" } else { "full" }
    )
}

/// "7/9, 6/9, 7/9": how many of `of` verdicts held, seed by seed.
pub(crate) fn seed_by_seed(matched: &[usize], of: usize) -> String {
    matched
        .iter()
        .map(|m| format!("{m}/{of}"))
        .collect::<Vec<_>>()
        .join(", ")
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
        text.push_str(&reports_so_far(out_dir, &incomplete, "case"));
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
            reports_so_far(out_dir, &incomplete, "case"),
            sweep.text
        );
        sweep.incomplete_seeds = incomplete_seeds;
    }
    write_sweep(out_dir, &sweep).map_err(|e| format!("writing {}: {e}", out_dir.display()))?;
    Ok(sweep)
}

/// Where each seed a stop cut short (`(seed, whether any `unit`, "case" or "experiment", ran
/// whole)`) has its report, one line each.
pub(crate) fn reports_so_far(out_dir: &Path, seeds: &[(u64, bool)], unit: &str) -> String {
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
            let _ = writeln!(text, "  seed {seed:#x} ran no {unit} whole");
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
    let mut text = format!(
        "Jasper outbound experiments vs the paper over {}: each verdict judged on the median \
         of its ratios\n",
        over_seeds(quick, seeds)
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
    let _ = writeln!(
        text,
        "{ok}/{} shapes match the paper on the median over the seeds; seed by seed: {}.",
        verdicts.len(),
        seed_by_seed(&matched, verdicts.len())
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
                "{},{},{:.3},{seed:#x},{ours:.3},{}",
                csv_field(&s.experiment),
                csv_field_always_quoted(&s.claim),
                s.paper_ratio,
                s.rule.judge(s.paper_ratio, *ours)
            );
        }
        let _ = writeln!(
            csv,
            "{},{},{:.3},median,{:.3},{}",
            csv_field(&s.experiment),
            csv_field_always_quoted(&s.claim),
            s.paper_ratio,
            s.median,
            s.ok
        );
    }
    std::fs::write(dir.join("seeds.csv"), csv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::Verdict;

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
}
