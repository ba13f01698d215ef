//! `jasper sim run` end to end, small: the summary table and the output directory a researcher
//! gets, the same trace from the same seed, a config file with flags over it, and bad input
//! as a clear error (exit status 1, never a panic).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{assert_refused, text};

/// `jasper sim ARGS --out OUT`, with no seed from the environment, and with backtraces asked
/// for, as a Rust developer's shell often does: a refusal must still be its message alone
/// (`common::assert_refused`).
fn jasper_sim(args: &[&str], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jasper"))
        .arg("sim")
        .args(args)
        .arg("--out")
        .arg(out)
        .env_remove("SIM_SEED")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run jasper sim")
}

/// `jasper sim run ARGS --out OUT`.
fn jasper_sim_run(args: &[&str], out: &Path) -> Output {
    jasper_sim(&[&["run"], args].concat(), out)
}

/// The hash the summary prints after "trace ".
fn trace(stdout: &str) -> &str {
    let at = stdout.find("trace ").expect("a trace hash") + "trace ".len();
    &stdout[at..at + 16]
}

/// The `summary.json` a run wrote to `out`.
fn summary_json(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json parses")
}

/// `jasper sim run -n 100 -H 1 --duration 0.05 FAULT` (a fault's flag and its value), which
/// must succeed: its stdout, stderr and `summary.json`.
fn faulted_n100(name: &str, fault: [&str; 2]) -> (String, String, serde_json::Value) {
    let out = scratch(name);
    let args = [&["-n", "100", "-H", "1", "--duration", "0.05"][..], &fault].concat();
    let output = jasper_sim_run(&args, &out);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr, summary_json(&out))
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("jasper-sim-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `jasper sim ARGS --out OUT`, sent SIGINT (`kill -INT`, as Ctrl-C) 300 ms after a line of its
/// stderr contains `after`: its exit status, stdout and stderr.
fn interrupted(
    args: &[&str],
    out: &Path,
    after: &str,
) -> (std::process::ExitStatus, String, String) {
    use std::io::{BufRead as _, BufReader, Read as _};
    use std::process::Stdio;

    let mut child = Command::new(env!("CARGO_BIN_EXE_jasper"))
        .arg("sim")
        .args(args)
        .arg("--out")
        .arg(out)
        .env_remove("SIM_SEED")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run jasper sim");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).expect("read stderr");
        seen.push_str(&line);
        assert!(read > 0, "stderr ended before a line {after:?}:\n{seen}");
        if line.contains(after) {
            break;
        }
    }
    // Some way in, not all.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    stderr.read_to_string(&mut seen).expect("read stderr");
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    (child.wait().expect("wait for jasper"), stdout, seen)
}

/// Writes `text` to `dir/name` (making `dir`), and returns the file's path as a flag takes it.
fn file_in(dir: &Path, name: &str, text: &str) -> String {
    std::fs::create_dir_all(dir).expect("make the scratch directory");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path.to_str().expect("a UTF-8 temp path").to_owned()
}

/// Goal: a run prints every DESIGN.md §5 figure the issue names and writes the JSON, CSV and
/// both plots; the same seed replays to the same trace, and another seed does not; the
/// `config.toml` it writes replays it alone.
#[test]
fn a_run_prints_its_summary_writes_its_directory_and_replays() {
    let out = scratch("run");
    let args = |seed| ["-n", "30", "-H", "2", "--duration", "0.05", "--seed", seed];
    let first = jasper_sim_run(&args("7"), &out);
    let (stdout, stderr) = text(&first);
    assert!(first.status.success(), "{stdout}\n{stderr}");
    for figure in [
        "OML (at release)",
        "DWS (at release, exch)",
        "holding time",
        "P(F)",
        "loss",
        "MPS",
        "clock sync error",
        "0 checker violations",
    ] {
        assert!(stdout.contains(figure), "no {figure:?} in\n{stdout}");
    }
    // Not a terminal: the progress comes as lines, the last at 100%.
    assert!(stderr.contains("100%"), "{stderr}");
    assert!(!stderr.contains('\r'), "a redrawn bar in a log: {stderr:?}");

    let summary = summary_json(&out);
    assert_eq!(summary["seed"], 7);
    assert_eq!(summary["receivers"], 30);
    // The tree as the paper writes it, <D,F>, with where it came from (D = round(log10 30));
    // a tree of depth 1 has no proxies to hedge or spray, whatever -H says.
    let label = summary["label"].as_str().expect("a label");
    assert!(
        label.starts_with("N=30 <1,30> (heuristic) H=- rrps=- "),
        "{label}"
    );
    // 0.05 s at the default 5K messages/s.
    assert_eq!(summary["packets"], 250, "{summary}");
    assert_eq!(summary["loss_percent"], 0.0, "{summary}");
    let csv = std::fs::read_to_string(out.join("cdf.csv")).expect("cdf.csv");
    assert!(csv.starts_with("label,metric,clock,percentile,value_us"));
    assert!(csv.lines().count() > 100, "{csv}");
    // The label holds a comma (`<1,30>`): quoted, so that every row has five fields.
    let row = csv.lines().nth(1).expect("a row");
    assert!(
        row.starts_with("\"N=30 <1,30> (heuristic) H=- rrps=- "),
        "{row}"
    );
    for line in csv.lines().skip(1) {
        // The four fields after the label hold no comma.
        let label = line.rsplitn(5, ',').nth(4).expect("five fields");
        assert!(label.starts_with('"') && label.ends_with('"'), "{line}");
    }
    for plot in ["oml_cdf.svg", "dws_cdf.svg"] {
        let svg = std::fs::read_to_string(out.join(plot)).expect(plot);
        assert!(svg.contains("<svg") && svg.contains("</svg>"), "{plot}");
        // Receipt and release, each in true time and (dashed) in exchange time.
        assert_eq!(svg.matches("<polyline").count(), 4, "{plot}: {svg}");
        // Two dashed curves and their two legend swatches.
        assert_eq!(svg.matches("stroke-dasharray").count(), 4, "{plot}: {svg}");
    }
    // DWS at receipt (~100 µs) and at release (~0.1 µs) on one log axis.
    let dws = std::fs::read_to_string(out.join("dws_cdf.svg")).expect("dws_cdf.svg");
    assert!(dws.contains("log scale") && dws.contains(">0.01<"), "{dws}");

    let trace_of = |seed| {
        let output = jasper_sim_run(&args(seed), &scratch(seed));
        assert!(output.status.success(), "seed {seed}");
        trace(&text(&output).0).to_owned()
    };
    assert_eq!(trace(&stdout), trace_of("7"), "same seed, same trace");
    assert_ne!(trace(&stdout), trace_of("8"), "another seed, another run");

    // The directory's config.toml is the whole run: `--config` on it alone replays it, a
    // fault and the flags' other settings included.
    let faulted = scratch("faulted");
    let first = jasper_sim_run(
        &[&args("9")[..], &["--kill", "3@0.01", "--rate", "4000"]].concat(),
        &faulted,
    );
    assert!(first.status.success(), "{}", text(&first).1);
    let config = faulted.join("config.toml");
    assert!(
        !faulted.join("config.toml.partial").exists(),
        "written beside and renamed over"
    );
    let again = jasper_sim_run(&["--config", config.to_str().unwrap()], &scratch("again"));
    let (again_out, again_err) = text(&again);
    assert!(again.status.success(), "{again_out}\n{again_err}");
    assert!(again_err.contains("fault: kill node 3"), "{again_err}");
    assert_eq!(
        trace(&text(&first).0),
        trace(&again_out),
        "config.toml replays"
    );
}

/// Goal: a config file sets the run and flags override it.
#[test]
fn a_config_file_sets_the_run_and_flags_override_it() {
    let out = scratch("config");
    let config = file_in(
        &out,
        "run.toml",
        "seed = 11\nrate_mps = 2000.0\nduration_ns = 50000000\nwarmup_ns = 300000000\n\
         [plan]\nparticipants = 16\n",
    );
    let output = jasper_sim_run(&["--config", &config, "-n", "12"], &out);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let summary = summary_json(&out);
    assert_eq!(summary["seed"], 11);
    assert_eq!(summary["receivers"], 12, "the flag wins over the file");
    assert_eq!(summary["packets"], 100, "2K/s for 0.05 s: {summary}");
}

/// Goal: an H the tree cannot give is run as the widest the tree gives, and said so: ten
/// proxies give a gateway at most ten parents (H = 9), and a tree of depth 1 has no proxies
/// to hedge. The default H on a direct run is not remarked on; `--direct` refuses `-H`
/// and `--no-rrps`.
#[test]
fn an_h_wider_than_the_tree_is_said() {
    let out = scratch("wide-h");
    let note = |args: &[&str]| {
        let output = jasper_sim_run(&[args, &["--duration", "0.01"]].concat(), &out);
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{args:?}\n{stdout}\n{stderr}");
        stderr
            .lines()
            .find(|line| line.contains("note: H"))
            .map(str::to_owned)
    };
    assert_eq!(
        note(&["-n", "100", "-H", "12"]).as_deref(),
        Some(
            "  note: H = 12 asks for more parents than the tree has: H = 9 below layer 1 (10 proxies)"
        )
    );
    assert_eq!(
        note(&["-n", "100", "-H", "9"]),
        None,
        "ten proxies give H = 9"
    );
    let flat = ["-n", "20", "--depth", "1", "--fanout", "20", "-H", "2"];
    let direct = note(&flat).expect("a note on H = 2 at depth 1");
    assert!(direct.contains("has no effect"), "{direct}");
    assert_eq!(note(&["-n", "20", "--direct"]), None, "the default H");
    // `--direct` with -H or --no-rrps, which it cannot have, is refused.
    for flag in [&["-H", "2"][..], &["--no-rrps"]] {
        let output = jasper_sim_run(
            &[&["-n", "20", "--direct", "--duration", "0.01"], flag].concat(),
            &out,
        );
        let (_, stderr) = text(&output);
        assert!(!output.status.success(), "{flag:?}");
        assert!(stderr.contains("cannot be used with"), "{flag:?}: {stderr}");
    }
}

/// Goal: Ctrl-C stops a long run and reports what it measured: the summary table over the
/// packets published before the stop, the output directory written, the label saying so, and
/// exit status 130 so that a script does not take it for a whole run. Method: a run of 1,000
/// simulated seconds, SIGINT (by `kill -INT`) once it says it is measuring.
#[test]
fn ctrl_c_stops_a_run_and_reports_what_it_measured() {
    let out = scratch("interrupted");
    // A kill due long after the stop, which never happens.
    let args = [
        "run",
        "-n",
        "20",
        "-H",
        "1",
        "--duration",
        "1000",
        "--kill",
        "15@900",
    ];
    let (status, stdout, seen) = interrupted(&args, &out, "measuring from ");
    assert_eq!(status.code(), Some(130), "{stdout}\n{seen}");
    assert!(stdout.contains(" (interrupted: "), "{stdout}");
    assert!(stdout.contains(" of 1000 s measured)"), "{stdout}");
    assert!(
        seen.contains("interrupted: the figures above are over the "),
        "{seen}"
    );
    assert!(
        seen.contains("; the fault due after the stop did not happen"),
        "{seen}"
    );
    assert!(!stdout.contains("killed ["), "{stdout}");
    let summary = summary_json(&out);
    let packets = summary["packets"].as_u64().expect("packets");
    assert!(packets > 0, "{summary}");
    // 5,000 packets a simulated second: well short of 1,000 s.
    assert!(packets < 1_000_000, "{summary}");
    assert_eq!(summary["violations"], 0);
    assert!(
        summary["label"]
            .as_str()
            .unwrap()
            .contains("(interrupted: ")
    );
    for file in [
        "summary.txt",
        "cdf.csv",
        "oml_cdf.svg",
        "dws_cdf.svg",
        "config.toml",
    ] {
        assert!(out.join(file).exists(), "{file}");
    }
}

/// Goal: Ctrl-C during the warm-up says nothing was measured, writes only `config.toml`, and
/// leaves no earlier run's results beside it (they would read as this run's); files that are
/// not a run's outputs stay.
#[test]
fn ctrl_c_while_warming_up_leaves_no_results() {
    let out = scratch("interrupted-warming");
    std::fs::create_dir_all(&out).expect("make the scratch directory");
    for stale in ["summary.json", "oml_cdf.svg", "notes.txt"] {
        std::fs::write(out.join(stale), "stale").expect("write a stale file");
    }
    let args = ["run", "-n", "20", "--warmup", "1000", "--duration", "1"];
    let (status, stdout, seen) = interrupted(&args, &out, "seed 0x");
    assert_eq!(status.code(), Some(130), "{stdout}\n{seen}");
    assert!(seen.contains("interrupted while warming up"), "{seen}");
    let mut left: Vec<String> = std::fs::read_dir(&out)
        .expect("list the output directory")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8")
        })
        .collect();
    left.sort();
    assert_eq!(left, ["config.toml", "notes.txt"]);
}

/// Goal: Ctrl-C on `jasper sim paper-outbound` keeps the cases that ran whole: it abandons the
/// one running, prints and writes the report of the others (which says what did not run) and
/// exits 130. Method: a short case (N = 10) and a long one (N = 1000, 0.5 s measured), SIGINT
/// once the short one is done.
#[test]
fn ctrl_c_stops_a_campaign_and_reports_the_cases_that_ran() {
    let out = scratch("interrupted-campaign");
    let args = [
        "paper-outbound",
        "--quick",
        "--case",
        "n10_d1,n1000_h2_hold",
    ];
    let (status, stdout, seen) = interrupted(&args, &out, "n10_d1: done");
    assert_eq!(status.code(), Some(130), "{stdout}\n{seen}");
    assert!(seen.contains("n1000_h2_hold: stopped"), "{seen}");
    assert!(
        stdout.contains("Interrupted (Ctrl-C): 1 of 2 cases ran whole")
            && stdout.contains("Not run: n1000_h2_hold."),
        "{stdout}"
    );
    let report = std::fs::read_to_string(out.join("report.txt")).expect("report.txt");
    assert!(report.contains("Not run: n1000_h2_hold."), "{report}");
    assert!(
        seen.contains("interrupted: the report covers only"),
        "{seen}"
    );
}

/// Goal: Ctrl-C on `jasper sim paper-inbound` stops its runs at once, writes a report of the
/// experiments whose runs all ended (saying which did not), clears an earlier campaign's
/// results and exits 130. Method: SIGINT as the runs start.
#[test]
fn ctrl_c_stops_the_inbound_campaign_and_reports_what_ran() {
    let out = scratch("interrupted-inbound");
    std::fs::create_dir_all(&out).expect("scratch dir");
    std::fs::write(out.join("inbound_loq_latency.svg"), "stale").expect("stale file");
    let (status, stdout, seen) =
        interrupted(&["paper-inbound", "--quick"], &out, "inbound runs on ");
    assert_eq!(status.code(), Some(130), "{stdout}\n{seen}");
    assert!(seen.contains("inbound runs done; stopped, "), "{seen}");
    assert!(
        stdout.contains("Interrupted (Ctrl-C): ") && stdout.contains(" of 6 experiments ran whole"),
        "{stdout}"
    );
    assert!(
        seen.contains("interrupted: the report covers only the experiments that ran whole"),
        "{seen}"
    );
    let json = std::fs::read_to_string(out.join("inbound.json")).expect("inbound.json");
    assert!(json.contains("\"not_run\""), "{json}");
    // Gone, or this campaign's own plot if the LOQ runs all ended in time.
    let svg = std::fs::read_to_string(out.join("inbound_loq_latency.svg")).unwrap_or_default();
    assert_ne!(svg, "stale");
}

/// Goal: Ctrl-C on an inbound sweep over seeds judges nothing when no seed ran every
/// experiment, says what became of each seed, writes no sweep and exits 130. Method: SIGINT
/// as the first seed's runs start.
#[test]
fn ctrl_c_stops_an_inbound_sweep_and_judges_no_seed_cut_short() {
    let out = scratch("interrupted-inbound-sweep");
    let args = ["paper-inbound", "--quick", "--seeds", "2"];
    let (status, stdout, seen) = interrupted(&args, &out, "inbound runs on ");
    assert_eq!(status.code(), Some(130), "{stdout}\n{seen}");
    assert!(seen.contains("seed 0x1 (1 of 2)"), "{seen}");
    assert!(
        stdout.contains("Interrupted (Ctrl-C) before any seed ran every experiment")
            && stdout.contains("seed 0x2 ran no experiment whole"),
        "{stdout}"
    );
    assert!(!out.join("inbound-seeds.txt").exists());
    assert!(!out.join("seed-0x2").exists());
    let cut = std::fs::read_to_string(out.join("seed-0x1/inbound.json")).expect("seed 1's");
    assert!(cut.contains("\"not_run\""), "{cut}");
}

/// Goal: a run in which no message reaches every gateway (here a 1 bit/s egress, so every copy
/// outwaits the sender's backlog) says so, and prints "-" where OML, DWS and P(F) would be,
/// not 0.0 that reads as a figure; the loss is 100%.
#[test]
fn a_run_where_nothing_arrives_prints_no_figures() {
    let out = scratch("nothing");
    let model = file_in(&out, "model.toml", "egress_bps = 1\n");
    let model = model.as_str();
    // `jasper sim run -n 10` with `more` on that model, which must succeed: its stdout.
    let run = |more: &[&str]| {
        let args = [&["-n", "10", "--duration", "0.01", "--model", model], more].concat();
        let output = jasper_sim_run(&args, &out);
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{args:?}\n{stdout}\n{stderr}");
        stdout
    };
    let stdout = run(&[]);
    assert!(
        stdout.contains("no message reached every receiver"),
        "{stdout}"
    );
    let oml = stdout
        .lines()
        .find(|line| line.trim_start().starts_with("OML (at release)"))
        .expect("an OML row");
    assert_eq!(oml.split_whitespace().skip(3).collect::<Vec<_>>(), ["-"; 3]);
    assert!(
        stdout.contains("P(F) - (exchange time), - (true time); loss 100.0000%"),
        "{stdout}"
    );
    let summary = summary_json(&out);
    assert_eq!(summary["complete"], 0);
    assert!(
        !std::fs::read_to_string(out.join("summary.txt"))
            .unwrap()
            .contains("P(F) true=0.0%")
    );
    // Per participant too: a packet no gateway released is lost to every participant (the
    // per-participant loss said 0% here, counting only packets some gateway released).
    let stdout = run(&["--receiver-hedging"]);
    assert!(
        stdout.contains("    P(F) - (exchange time), - (true time); loss 100.0000%"),
        "{stdout}"
    );
    assert_eq!(summary_json(&out)["participants"]["loss_percent"], 100.0);
}

/// Goal: bad flags, a bad model file, a bad config file and faults the plan cannot take are
/// errors that say what is wrong, with exit status 1 or 2 (a panic exits with 101), before any
/// simulation runs.
#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let out = scratch("bad");
    let model = file_in(&out, "model.toml", "loss = 2.0\n");
    let config = file_in(&out, "config.toml", "rate_mps = -5.0\n");
    let margin = file_in(&out, "margin.toml", "[node.owd]\nmargin = \"5s\"\n");
    let rank = file_in(&out, "rank.toml", "[node.owd]\nrank = \"ceil\"\n");
    let unknown = file_in(
        &out,
        "unknown.toml",
        "[plan]\nparticipants = 10\nhedgee = 3\n",
    );
    let zero = file_in(&out, "zero.toml", "[node.clock]\nbuckets = 0\n");
    let (model, config, margin, rank, unknown, zero) = (
        model.as_str(),
        config.as_str(),
        margin.as_str(),
        rank.as_str(),
        unknown.as_str(),
        zero.as_str(),
    );
    for (args, says) in [
        (vec!["--rate", "nan"], "--rate NaN is not a rate"),
        (vec!["--rate", "inf"], "--rate inf is not a rate"),
        (vec!["--rate", "0"], "--rate 0 is not a rate"),
        (vec!["--duration", "0"], "--duration"),
        (vec!["--duration", "1e30"], "over a year"),
        (vec!["--duration", "1e-10"], "at least a nanosecond"),
        (vec!["--warmup", "nan"], "--warmup"),
        // Said in the units given, not as three hundred digits.
        (vec!["--warmup", "1e300"], "--warmup 1e300 is over a year"),
        (vec!["--margin=-1"], "--margin"),
        (vec!["--margin", "1e30"], "over a year"),
        (
            vec!["--margin", "2000000"],
            "--margin 2000000 µs is over the 1000000 µs",
        ),
        (vec!["--burst-factor", "0"], "burst factor"),
        (vec!["--burst-factor", "15", "--burst-len", "80"], "burst"),
        (vec!["-n", "0"], "participants"),
        (
            vec!["--depth", "3", "--fanout", "1"],
            "holds 1 gateway, not 100",
        ),
        (vec!["--threads", "0"], "--threads"),
        (vec!["--invariants-every", "0"], "--invariants-every"),
        (vec!["--gateways-per-vm", "0"], "gateways_per_vm"),
        (vec!["--gateways-per-vm=-3"], "--gateways-per-vm"),
        (
            vec!["--gateways-per-vm", "10", "--receiver-hedging"],
            "gateways_per_vm must be 1",
        ),
        (vec!["--seed", "zz"], "seed"),
        (vec!["--model", "no_such_preset"], "not a preset"),
        (vec!["--model", model], "loss"),
        (vec!["--config", config], "rate_mps"),
        (vec!["--config", margin], "node.owd.margin"),
        (vec!["--config", rank], "expected `nearest` or `floor`"),
        (vec!["--kill", "0@0.01"], "the root"),
        (vec!["--kill", "999@0.01"], "not in the plan"),
        (vec!["--kill", "3"], "NODE@SECONDS"),
        (vec!["--pause", "3@0.02-0.01"], "span"),
        // Exponents parse: the span is refused for its order, not its numbers.
        (vec!["--pause", "3@2e-2-1E-2"], "span"),
        (vec!["--clog", "1@0-0.01"], "SOURCE:TARGET"),
        // Gateways 11 and 12 of <2,10>: nothing goes between them.
        (
            vec!["-n", "100", "--clog", "11:12@0-0.01"],
            "these gateways send each other nothing",
        ),
        (vec!["--partition", "0:1"], "IDS:IDS@FROM-UNTIL"),
        (vec!["--partition", "0:3-1@0-0.01"], "from low to high"),
        (vec!["--partition", "0:1-@0-0.01"], "not a node id"),
        (vec!["--partition", "0:0-4294967295@0-0.01"], "more than"),
        (vec!["--partition", "1:1-3@0-0.01"], "a node on both sides"),
        (vec!["--partition", "0:999@0-0.01"], "not in the plan"),
        (vec!["--loss=1.5"], "not a fraction"),
        (vec!["--loss", "lots"], "lots"),
        (vec!["--pause", "0@0.01-0.02"], "the root"),
        (vec!["--kill", "3@5"], "would never happen"),
        (
            vec!["--kill", "3@0.01", "--kill", "3@0.02"],
            "killed 2 times",
        ),
        (
            vec![
                "--kill",
                "3@0.01",
                "--restart",
                "3@0.02",
                "--restart",
                "3@0.02",
            ],
            "one kill, one restart",
        ),
        (vec!["--depth", "2", "--fanout", "4000000000"], "fan-out"),
        (vec!["--burst-len", "5"], "--burst-factor"),
        (vec!["--config", unknown], "hedgee"),
        (vec!["--config", zero], "node.clock.buckets"),
    ] {
        let output = jasper_sim_run(&args, &out);
        let stdout = assert_refused(&args, &output, says);
        assert!(!stdout.contains("P(F)"), "{args:?} ran anyway: {stdout}");
    }
    // A run far beyond the machine's memory (N = 2^20 under RRPS: ~4,600 GiB estimated) is
    // refused at once, where it would be killed for memory after building for minutes. The
    // available memory is read from /proc/meminfo.
    if Path::new("/proc/meminfo").exists() {
        let args = ["-n", "1048576", "--duration", "0.01"];
        let output = jasper_sim_run(&args, &out);
        let stdout = assert_refused(
            &args,
            &output,
            "GiB available: lower -n, or run a fixed tree",
        );
        assert!(!stdout.contains("P(F)"), "ran anyway: {stdout}");
        // --no-memory-check goes past the check: the same run then stops at the next one it
        // fails, a kill of a node the plan does not have, before anything large is built.
        let args = [&args[..], &["--kill", "2000000@0.001"]].concat();
        let output = jasper_sim_run(&args, &out);
        assert_refused(&args, &output, "GiB available");
        let args = [&args[..], &["--no-memory-check"]].concat();
        let output = jasper_sim_run(&args, &out);
        let (_, stderr) = text(&output);
        assert_refused(&args, &output, "node 2000000 is not in the plan");
        assert!(!stderr.contains("GiB available"), "{stderr}");
    }
}

/// Goal: a container's memory limit counts, not only the machine's free memory: in a cgroup
/// allowed 256 MiB, a run the machine could hold (N = 4000 under RRPS, ~0.6 GiB) is refused
/// and says the cgroup is what is short. Needs root and a cgroup v1 memory hierarchy at
/// /sys/fs/cgroup/memory or a v2 one with the memory controller; skips with a reason elsewhere.
#[test]
fn a_run_over_its_cgroups_memory_limit_is_refused() {
    let name = format!("jasper-sim-test-{}", std::process::id());
    let (dir, limit_file) = if Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists() {
        (
            format!("/sys/fs/cgroup/memory/{name}"),
            "memory.limit_in_bytes",
        )
    } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control")
        .is_ok_and(|controllers| controllers.split_whitespace().any(|c| c == "memory"))
    {
        (format!("/sys/fs/cgroup/{name}"), "memory.max")
    } else {
        eprintln!("skipped: no cgroup memory hierarchy this test can write");
        return;
    };
    if let Err(error) = std::fs::create_dir(&dir) {
        eprintln!("skipped: cannot make a cgroup at {dir} ({error}; needs root)");
        return;
    }
    let limit = std::fs::write(format!("{dir}/{limit_file}"), (256u64 << 20).to_string());
    let out = scratch("cgroup");
    let output = limit.is_ok().then(|| {
        // The shell joins the group and becomes jasper, which inherits it.
        Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" && exec "$2" sim run -n 4000 --duration 0.01 --out "$3""#)
            .args(["sh", &dir, env!("CARGO_BIN_EXE_jasper")])
            .arg(&out)
            .env_remove("SIM_SEED")
            .output()
            .expect("run jasper in the cgroup")
    });
    let _ = std::fs::remove_dir(&dir);
    let Some(output) = output else {
        eprintln!("skipped: cannot set a memory limit on {dir}");
        return;
    };
    let stdout = assert_refused(
        &["-n", "4000"],
        &output,
        "this process's memory cgroup leaves 0.2 GiB available",
    );
    assert!(!stdout.contains("P(F)"), "ran anyway: {stdout}");
}

/// Goal: `--loss` makes the network lose copies, and the tree recovers: packets some gateway
/// missed are counted lost (before recovery, DESIGN.md §5), and no checker fires (every
/// gateway releases exactly once, in order).
#[test]
fn a_lossy_run_recovers_every_packet() {
    let out = scratch("lossy");
    let output = jasper_sim_run(
        &[
            "-n",
            "100",
            "-H",
            "1",
            "--duration",
            "0.2",
            "--loss",
            "0.01",
        ],
        &out,
    );
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let summary = summary_json(&out);
    let loss = summary["loss_percent"].as_f64().expect("loss_percent");
    assert!(loss > 0.0, "1% of copies lost shows: {summary}");
    assert_eq!(summary["violations"], 0, "{summary}");
    // The gateways' parents answered, the root only what they lacked too.
    let repair = &summary["repair"];
    let proxies = repair["proxy_packets"].as_u64().expect("proxy_packets");
    let root = repair["root_packets"].as_u64().expect("root_packets");
    assert!(proxies > 0 && root < proxies / 10, "{repair}");
    assert!(stdout.contains("  repair: gateways asked "), "{stdout}");
}

/// Goal: a fault given as a flag happens: with H = 1 a proxy killed mid-run costs nothing and
/// the run says the tree still reaches every gateway; the first lines name the node ids.
#[test]
fn a_killed_proxy_from_the_command_line() {
    let (stdout, stderr, summary) = faulted_n100("kill", ["--kill", "3@0.01"]);
    assert!(
        stderr.contains("nodes: root 0; layer 1 proxies 1-10; gateways 11-110"),
        "{stderr}"
    );
    assert!(stderr.contains("fault: kill node 3 at +10 ms"), "{stderr}");
    assert!(
        stdout.contains("killed [3]: the tree still reaches every live gateway"),
        "{stdout}"
    );
    assert_eq!(summary["loss_percent"], 0.0, "{summary}");
    assert_eq!(summary["violations"], 0, "{summary}");
}

/// Goal: a partition given as a flag happens, and with H = 1 cutting the root off one proxy
/// costs no packet: the proxy's children have another parent. Method: `--partition 0:3` for
/// 20 ms of 50; the network's partition drops count the copies it cut.
#[test]
fn a_partition_from_the_command_line() {
    let (_, stderr, summary) = faulted_n100("partition", ["--partition", "0:3@0.01-0.03"]);
    assert!(
        stderr.contains("fault: partition [0] from [3] from +10 to +30 ms"),
        "{stderr}"
    );
    // `NetDrop::Partition`, the second counter.
    let cut = summary["net"]["dropped"][1]
        .as_u64()
        .expect("partition drops");
    // The root sends proxy 3 every packet: ~100 in 20 ms at 5,000 a second.
    assert!(cut >= 90, "{summary}");
    assert_eq!(summary["loss_percent"], 0.0, "{summary}");
    assert_eq!(summary["violations"], 0, "{summary}");
}

/// A killed gateway: the run measures the gateways alive after its death, and says so, and
/// tells the packets it took with it apart from the network's loss.
#[test]
fn a_killed_gateway_from_the_command_line() {
    // 100 µs after the root sent its 51st measured packet (one every 200 µs), which no
    // gateway releases before ~160 µs after its send: it dies with that packet on its way or
    // held.
    let (stdout, _, summary) = faulted_n100("kill-gateway", ["--kill", "50@0.0101"]);
    assert!(
        stdout.contains("killed [50]: the tree still reaches every live gateway"),
        "{stdout}"
    );
    assert!(
        stdout.contains("packets sent after a gateway died are measured over the live ones"),
        "{stdout}"
    );
    // At most the few packets in flight to it or held at it when it died.
    assert!(
        summary["loss_percent"].as_f64().unwrap() <= 1.0,
        "{summary}"
    );
    let messages = summary["messages"].as_f64().unwrap();
    let lost = (summary["loss_percent"].as_f64().unwrap() * messages / 100.0).round() as u64;
    let held = summary["lost_to_kills"].as_u64().unwrap();
    assert!((1..=2).contains(&held) && held <= lost, "{summary}");
    assert!(
        stdout.contains(if held == 1 {
            "(1 message held by or on its way to a killed gateway; worst receiver"
        } else {
            "messages held by or on their way to a killed gateway; worst receiver"
        }),
        "{stdout}"
    );
    assert_eq!(summary["violations"], 0, "{summary}");
}

/// Goal: a gateway killed and started again from the command line is measured again once
/// it is back (book snapshot, first release), and the run says from which packet. Method:
/// N = 100, gateway 50 killed 10 ms into 0.1 s of measuring and started again at 40 ms; it
/// was away for the ~150 packets of those 30 ms plus its snapshot's round trip.
#[test]
fn a_gateway_started_again_from_the_command_line_is_measured_again() {
    let out = scratch("restart-gateway");
    let args = [
        "-n",
        "100",
        "-H",
        "1",
        "--duration",
        "0.1",
        "--kill",
        "50@0.01",
        "--restart",
        "50@0.04",
    ];
    let output = jasper_sim_run(&args, &out);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("gateway 50 started again: not measured for packets "))
        .unwrap_or_else(|| panic!("no restart line in\n{stdout}"));
    let span = line
        .split("packets ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a span");
    let (from, until) = span.split_once("..").expect("from..until");
    let away = until.parse::<u64>().unwrap() - from.parse::<u64>().unwrap();
    assert!((150..=170).contains(&away), "{line}");
    let summary = summary_json(&out);
    assert_eq!(summary["violations"], 0, "{summary}");
    assert!(
        summary["receiver_loss_percent_max"].as_f64().unwrap() <= 2.0,
        "measured again, it released what it was expected to: {summary}"
    );
}

/// Goal: with receiver hedging a researcher sees what each participant gets (the first of
/// its two gateways), in the printed summary and in `summary.json`, beside the figures over
/// every gateway. Method: 20 participants x 2 gateways, 0.05 s.
#[test]
fn receiver_hedging_reports_what_each_participant_sees() {
    let out = scratch("rh");
    let output = jasper_sim_run(
        &["-n", "20", "--receiver-hedging", "--duration", "0.05"],
        &out,
    );
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for line in [
        "P(F) over every gateway",
        "per participant (each acts on the first of its two gateways):",
        "OML (at release)",
        "OML (at receipt)",
        "0 checker violations",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
    let summary = summary_json(&out);
    assert_eq!(summary["receivers"], 40);
    let mp = &summary["participants"];
    assert_eq!(mp["count"], 20, "{summary}");
    assert_eq!(mp["packets"], 250, "{summary}");
    assert!(mp["fairness_percent_true"].as_f64().unwrap() > 90.0, "{mp}");
    let csv = std::fs::read_to_string(out.join("cdf.csv")).expect("cdf.csv");
    assert!(csv.contains(",participant_oml_release,true,"));
}

/// Goal: the campaigns' seed and case flags refuse what they cannot do before running
/// anything: `--seeds 0` or more than 64, a list of seeds with `--seeds` or with a seed twice,
/// several seeds or cases for the inbound campaign (which takes one seed and runs whole),
/// and a case the mode does not have.
#[test]
fn campaign_seed_flags_refuse_bad_input() {
    let out = scratch("campaign-flags");
    for (args, says) in [
        (vec!["paper-outbound", "--seeds", "0"], "--seeds"),
        (vec!["paper-outbound", "--seeds", "65"], "--seeds"),
        (vec!["paper-outbound", "--seeds", "three"], "--seeds"),
        (vec!["paper-inbound", "--seeds", "0"], "--seeds"),
        (vec!["paper-inbound", "--seed", "3,3"], "seeds repeat"),
        (
            vec!["paper-inbound", "--seed", "3,4", "--seeds", "2"],
            "give either one seed and --seeds, or the list of seeds",
        ),
        (
            vec![
                "paper-inbound",
                "--seed",
                "0xffffffffffffffff",
                "--seeds",
                "2",
            ],
            "the seeds run past u64::MAX",
        ),
        (
            vec!["paper-outbound", "--seed", "1,2", "--seeds", "3"],
            "give either one seed and --seeds, or the list of seeds",
        ),
        (
            vec!["paper-outbound", "--seed", "7,7", "--case", "n10_d1"],
            "seeds repeat",
        ),
        (vec!["paper-outbound", "--seed", "1,x"], "--seed"),
        (
            vec!["paper-inbound", "--case", "n10_d1"],
            "inbound campaign",
        ),
        (
            vec!["paper-outbound", "--case", "n10_d1,n10_d3"],
            "no case \"n10_d3\" in the full campaign; its cases: n100_h0,",
        ),
        (
            vec!["paper-outbound", "--quick", "--case", "n1000_d3"],
            "(it runs in full mode only)",
        ),
        (
            vec!["paper-outbound", "--seeds", "2", "--case", "nope"],
            "no case \"nope\"",
        ),
        (
            vec!["paper-outbound", "--case", "n100_*,n99_*"],
            "no case \"n99_*\"",
        ),
        (
            vec!["paper-outbound", "--list", "--case", "n10_d1"],
            "--case",
        ),
        (vec!["paper-inbound", "--list"], "inbound campaign"),
    ] {
        let output = jasper_sim(&args, &out);
        assert_refused(&args, &output, says);
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

/// Goal: a researcher reruns a sweep on the seeds named, not only consecutive ones:
/// `--seed 7,9` judges the verdicts over seeds 7 and 9.
#[test]
fn the_outbound_campaign_sweeps_the_seeds_named() {
    let out = scratch("campaign-seed-list");
    let args = [
        "paper-outbound",
        "--quick",
        "--seed",
        "7,0x9",
        "--case",
        "n10_d1,n10_d2",
    ];
    let output = jasper_sim(&args, &out);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("over 2 seeds (quick mode; 0x7, 0x9)"),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(out.join("seeds.csv")).expect("seeds.csv");
    assert!(
        csv.contains(",0x7,") && csv.contains(",0x9,") && !csv.contains(",0x8,"),
        "{csv}"
    );
}

/// Goal: a researcher finds the names `--case` takes without reading the source: `--list`
/// prints each case with its settings and runs nothing.
#[test]
fn the_outbound_campaign_lists_its_cases() {
    let out = scratch("campaign-list");
    let output = jasper_sim(&["paper-outbound", "--quick", "--list"], &out);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("quick campaign: "), "{stdout}");
    for case in ["n100_h0", "n10_d2", "n125_fixed_gcp", "appc_d4_f5_h4"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("{case} "))),
            "no {case} in\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("n1000_d3"),
        "a full-mode case in\n{stdout}"
    );
    assert!(!out.exists(), "--list wrote {}", out.display());
}

/// Goal: a researcher reruns one figure's cases alone: `--case` (names or `*` patterns) runs
/// those cases, reports the verdicts they complete, names the cases it left out, and writes
/// the output directory.
#[test]
fn the_outbound_campaign_reruns_the_cases_named() {
    let out = scratch("campaign-cases");
    // The second `--case` is a pattern: `n10_d2` alone in the quick campaign.
    let output = jasper_sim(
        &[
            "paper-outbound",
            "--quick",
            "--case",
            "n10_d1",
            "--case",
            "n10_d2*",
        ],
        &out,
    );
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("N=10: <1,10> beats <2,4>"), "{stdout}");
    assert!(
        stdout.contains("1/1 shapes match") || stdout.contains("0/1 shapes match"),
        "{stdout}"
    );
    let not_run = stdout
        .lines()
        .find(|l| l.contains("(not run here: "))
        .unwrap_or_else(|| panic!("no list of the cases not run in\n{stdout}"));
    for case in ["n100_h0", "n100_direct", "n100_d3"] {
        assert!(not_run.contains(&format!(" {case},")), "{not_run}");
    }
    for table in ["P(F) and OML p50", "Appendix C"] {
        assert!(
            !stdout.contains(table),
            "an empty table {table:?} in\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("[1/3]") && stderr.contains("[2/2] "),
        "{stderr}"
    );
    let verdicts = std::fs::read_to_string(out.join("verdicts.csv")).expect("verdicts.csv");
    assert_eq!(
        verdicts.lines().count(),
        2,
        "a header and one verdict:\n{verdicts}"
    );
}
