//! The shape of the paper's outbound results, on short runs of the calibrated AWS and GCP
//! models (`sim::experiments`): hedging cuts the tail, the tree beats direct unicast,
//! hold-and-release on a hedged tree costs far less than CloudEx's hold-and-release without
//! a tree and far less than on an unhedged tree, RRPS beats a fixed tree under bursts,
//! receiver hedging cuts the OML, and clock sync is good enough for true-time fairness.
//! Deterministic for a seed; `SIM_SEED=<seed>` reruns one.

use std::sync::atomic::AtomicBool;

use sim::experiments::{self, CaseResult, Metric, Scale};

/// A stop flag nothing sets (`jasper` sets it on Ctrl-C).
static NO_STOP: AtomicBool = AtomicBool::new(false);

/// Runs the named quick cases with the test's seed, shortened for CI.
fn run(names: &[&str], seed: u64) -> Vec<CaseResult> {
    experiments::cases(Scale { quick: true })
        .into_iter()
        .filter(|c| names.contains(&c.name.as_str()))
        .map(|mut case| {
            case.config.seed = seed;
            case.config.warmup_ns = 250_000_000;
            case.config.duration_ns = 150_000_000;
            experiments::run_case(&case, &mut |_| {}).expect("case runs")
        })
        .collect()
}

fn find<'a>(results: &'a [CaseResult], name: &str) -> &'a CaseResult {
    results.iter().find(|r| r.name == name).expect("case ran")
}

/// Asserts `worse / better >= factor`, naming the seed to rerun on failure.
fn beats(seed: u64, what: &str, worse: f64, better: f64, factor: f64) {
    println!(
        "{what}: {worse:.1} vs {better:.1} µs (ratio {:.2})",
        worse / better
    );
    assert!(
        worse >= better * factor,
        "{what}: expected at least {factor}x, got {worse:.1} vs {better:.1} µs; rerun with SIM_SEED={seed:#x}"
    );
}

/// Goal: the figures' shapes hold: H = 1 cuts OML p99 and DWS p99 against H = 0 (paper: 2x
/// and 2.3x), the tree beats direct unicast at N = 100 (paper: 1.7x at the median), and
/// hold-and-release with H = 2 has a much lower OML and holding time than CloudEx (paper:
/// 5.8x and 10x). Method: 150 ms of 5K msgs/s per case after warm-up; thresholds well
/// inside the paper's margins so seed noise does not flake, far outside "no effect".
#[test]
fn outbound_shapes_match_the_paper() {
    let seed = sim::seed_from_env(0x5EED_0001);
    let results = run(
        &[
            "n100_h0",
            "n100_h1",
            "n100_direct",
            "n100_h2_hold",
            "n100_cloudex",
        ],
        seed,
    );
    let (h0, h1) = (find(&results, "n100_h0"), find(&results, "n100_h1"));
    beats(
        seed,
        "OML p99 H=0 vs H=1",
        h0.at(Metric::OmlReceipt, 99.0),
        h1.at(Metric::OmlReceipt, 99.0),
        1.3,
    );
    beats(
        seed,
        "DWS p99 H=0 vs H=1",
        h0.at(Metric::DwsReceipt, 99.0),
        h1.at(Metric::DwsReceipt, 99.0),
        1.3,
    );
    let direct = find(&results, "n100_direct");
    beats(
        seed,
        "OML p50 direct unicast vs tree",
        direct.at(Metric::OmlReceipt, 50.0),
        h0.at(Metric::OmlReceipt, 50.0),
        1.3,
    );
    let (jasper, cloudex) = (
        find(&results, "n100_h2_hold"),
        find(&results, "n100_cloudex"),
    );
    beats(
        seed,
        "OML p50 at release, CloudEx vs H=2 + hold",
        cloudex.at(Metric::OmlRelease, 50.0),
        jasper.at(Metric::OmlRelease, 50.0),
        1.5,
    );
    // Hold-and-release on the hedged tree makes most releases simultaneous (exchange time),
    // and clock sync is good enough (~100 ns) that they are simultaneous in true time too
    // (paper: P(F) 92% at N = 100).
    let fair = jasper.summary.exchange.fairness_percent;
    assert!(
        fair > 80.0,
        "P(F) with H=2 + hold {fair:.1}%; rerun with SIM_SEED={seed:#x}"
    );
    // In true time one gateway whose clock sync is off by more than 1 µs spoils the DWS of
    // every message, so this swings with the seed (50–98% over seeds 1–4 and the default in
    // quick mode; the paper: 92%); the bar only says sync works (it was 0% before the jitter
    // floor was made stable).
    let fair_true = jasper.summary.truth.fairness_percent;
    assert!(
        fair_true > 40.0,
        "true-time P(F) with H=2 + hold {fair_true:.1}%; rerun with SIM_SEED={seed:#x}"
    );
    // And never releases early or out of order.
    assert_eq!(
        jasper.summary.violations, 0,
        "rerun with SIM_SEED={seed:#x}"
    );
}

/// Goal: the shapes that need their own settings hold: RRPS beats a fixed tree under 15x
/// bursts on the AWS model (paper: p90 1615 vs 495 µs, 3.3x), receiver hedging cuts the
/// per-participant OML (paper: p50 139 → 99, 1.3x), and hold-and-release on an unhedged tree
/// costs more than on a hedged one (paper: OML p50 429 vs 180). Method: as above; thresholds
/// well inside the paper's margins, well outside "no effect".
#[test]
fn rrps_receiver_hedging_and_hold_shapes_match_the_paper() {
    let seed = sim::seed_from_env(0x5EED_0004);
    let results = run(
        &[
            "n125_rrps_aws",
            "n125_fixed_aws",
            "n100_h1",
            "n100_h1_rh",
            "n100_h0_hold",
            "n100_h2_hold",
        ],
        seed,
    );
    beats(
        seed,
        "OML p90 under bursts, fixed tree vs RRPS (AWS)",
        find(&results, "n125_fixed_aws").at(Metric::OmlReceipt, 90.0),
        find(&results, "n125_rrps_aws").at(Metric::OmlReceipt, 90.0),
        1.5,
    );
    beats(
        seed,
        "OML p50, one gateway per MP vs two",
        find(&results, "n100_h1").at(Metric::OmlReceipt, 50.0),
        find(&results, "n100_h1_rh").at(Metric::ParticipantOml, 50.0),
        1.04,
    );
    beats(
        seed,
        "OML p50 at release, H=0 + hold vs H=2 + hold",
        find(&results, "n100_h0_hold").at(Metric::OmlRelease, 50.0),
        find(&results, "n100_h2_hold").at(Metric::OmlRelease, 50.0),
        1.2,
    );
}

/// Goal: one seed gives the same results twice (the experiment runner adds no
/// nondeterminism). Method: run the H = 1 case twice and compare the summaries.
#[test]
fn experiments_are_deterministic() {
    let seed = sim::seed_from_env(0x5EED_0002);
    let a = run(&["n10_d2"], seed);
    let b = run(&["n10_d2"], seed);
    assert_eq!(a[0].summary, b[0].summary, "rerun with SIM_SEED={seed:#x}");
    assert!(a[0].summary.packets > 500);
}

/// Goal: the Appendix C setting reproduces the paper's Monte Carlo means (per-hop U(0,1),
/// D = 2, H = 0: mean 1.0 hop units). Method: the quick case, mean OWD within 10%.
#[test]
fn appendix_c_mean_matches() {
    let seed = sim::seed_from_env(0x5EED_0003);
    let r = run(&["appc_d2_f3_h0"], seed);
    let mean = r[0].summary.truth.owd.mean;
    assert!(
        (mean - 1.0).abs() < 0.1,
        "mean OWD {mean} µs; rerun with SIM_SEED={seed:#x}"
    );
}

/// Goal: `jasper sim paper-outbound --seeds K` judges each verdict on the median of its
/// ratios over the seeds, with each seed's ratio the one a lone campaign on that seed gives
/// (the sweep runs every seed's cases together on every core and must hand each result back
/// to its own seed). Method: the two N = 10 tree-shape cases on three seeds, the middle seed
/// rerun alone.
#[test]
fn a_seed_sweep_judges_the_median_of_lone_runs() {
    let only: &[&str] = &["n10_d1", "n10_d2"];
    let seeds = [7, 8, 9];
    let dir = std::env::temp_dir().join(format!("jasper-seed-sweep-{}", std::process::id()));
    let sweep =
        experiments::paper_outbound_seeds(&dir, true, &seeds, Some(only), &mut |_| {}, &NO_STOP)
            .unwrap();
    assert_eq!(sweep.seeds, seeds);
    let v = sweep
        .verdicts
        .iter()
        .find(|v| v.claim.contains("<1,10> beats <2,4>"))
        .expect("the N = 10 tree-shape verdict");
    assert_eq!(v.ours.len(), 3);
    let mut sorted = v.ours.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(v.median, sorted[1]);
    assert_eq!(v.ok, v.rule.judge(v.paper_ratio, v.median));
    let alone = experiments::paper_outbound_with(
        &dir.join("alone"),
        true,
        Some(seeds[1]),
        Some(only),
        &mut |_| {},
        &NO_STOP,
    )
    .unwrap();
    let lone = alone
        .verdicts
        .iter()
        .find(|l| l.claim == v.claim)
        .expect("same verdict alone");
    assert_eq!(lone.our_ratio, v.ours[1], "seed {:#x}", seeds[1]);
    assert_ne!(v.ours[0], v.ours[1], "different seeds, different networks");
    for file in [
        "seeds.txt",
        "seeds.json",
        "seeds.csv",
        "seed-0x8/report.txt",
    ] {
        assert!(dir.join(file).is_file(), "{file} written");
    }
    assert!(sweep.text.contains("shapes match the paper on the median"));
    let repeated =
        experiments::paper_outbound_seeds(&dir, true, &[7, 7], Some(only), &mut |_| {}, &NO_STOP);
    assert!(repeated.unwrap_err().contains("seeds repeat"));
    let _ = std::fs::remove_dir_all(&dir);
}
