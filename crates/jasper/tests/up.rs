//! `jasper up`, the README's main command, as a user runs it: a short run of a whole exchange
//! on loopback must trade, lose no market data and write its results.

mod common;

use std::process::Command;
use std::sync::{PoisonError, RwLock};

use common::assert_refused;

/// Goal: the exchange comes up, gateways' strategies send orders that the engine sequences
/// and matches, every gateway releases every measured packet, and the summary and plots are
/// written. Method: run the real binary for a few seconds on its own port range.
#[test]
fn up_runs_trades_and_reports() {
    run_up(&[], "34100");
}

/// The same with the global-FIFO merge sequencer at the root (heartbeat orders from idle
/// gateways and proxies): every order sent is sequenced, nothing is lost, books agree. On
/// one event loop (`--threads 1`), so that a run with every node on one thread is tested too.
#[test]
fn up_with_the_global_fifo_sequencer() {
    let stdout = run_up(&["--sequencer", "global-fifo", "--threads", "1"], "34200");
    assert!(
        stdout.contains(", 1 event loop; Ctrl-C to stop"),
        "{stdout}"
    );
}

/// Goal: the exchange on a lossy network loses nothing it accepted. Method: every node drops
/// 1% of the datagrams it receives (`--loss 0.01`, in user space): gaps in market data are
/// recovered from the parent proxies' repair rings (the root answers only what a proxy
/// lacked too), lost orders are sent again (retries), lost responses are asked for again
/// (numbered responses); every order sent is sequenced once, every response sent is
/// delivered, every book agrees with the root's.
#[test]
fn up_loses_nothing_on_a_lossy_network() {
    let stdout = run_up(&["--loss", "0.01"], "34500");
    assert!(
        stdout.contains("loss drill: "),
        "the drill dropped datagrams:\n{stdout}"
    );
    // "repair: gateways asked A times ...; proxies answered with P packets (asking their
    // parents Q times), the root with R"
    let repair = stdout
        .lines()
        .find_map(|l| l.strip_prefix("repair: gateways asked "))
        .unwrap_or_else(|| panic!("gaps were asked for:\n{stdout}"));
    let numbers: Vec<u64> = repair
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let [asked, proxies, _, root] = numbers[..] else {
        panic!("{repair}");
    };
    assert!(asked > 0 && proxies > 0, "{repair}");
    assert!(root < proxies, "the proxies answered most: {repair}");
}

/// The same with receiver hedging (two gateways per participant, both sending every order):
/// each order counts once and is sequenced once, each gateway gets every response.
#[test]
fn up_with_receiver_hedging_on_a_lossy_network() {
    let stdout = run_up(&["--receiver-hedging", "--loss", "0.01"], "34700");
    // What each participant sees: the first of its two gateways.
    assert!(
        stdout.contains("per participant (the first of its two gateways): OML (release) p50"),
        "{stdout}"
    );
}

/// Goal: the operator's fault drill. A proxy killed mid-run (`--kill`) costs no order and no
/// book: its children fail over to its sibling and resend what was unanswered, every order
/// sent is sequenced, every gateway's book still equals the root's. Method: 8 participants
/// (proxies 1..=3, three gateways each at most), proxy 2 killed 1.5 s into 3 s.
#[test]
fn up_survives_a_killed_proxy() {
    let stdout = run_up(&["--kill", "2@1.5"], "34300");
    assert!(stdout.contains("killed node 2 at t="), "{stdout}");
    let moved = stdout
        .lines()
        .filter(|l| {
            l.starts_with("parent failover: node ")
                && l.contains(" left node 2 for node 3 1 time(s)")
        })
        .count();
    assert_eq!(
        moved, 3,
        "node 2's children fail over to node 3, once each:\n{stdout}"
    );
    assert!(
        !stdout
            .lines()
            .any(|l| l.starts_with("parent failover: ") && !l.contains(" left node 2 ")),
        "only node 2's children move:\n{stdout}"
    );
}

/// Goal: the operator's drill of a dead gateway VM with receiver hedging. Its participant
/// trades on through its twin: every order sent is sequenced, every live gateway gets every
/// response of its participant and rebuilds the root's book, and its participant loses no
/// more packets than the kernel's loopback drops cost (the allowance of [`run_up_with`]).
/// Method: 8 participants x 2 gateways (<2,4>: gateways are nodes 5-20), gateway 9 killed
/// 1.5 s into 3 s: without its twin, its participant would lose every packet after the
/// kill, hundreds of times the allowance.
#[test]
fn up_with_receiver_hedging_survives_a_killed_gateway() {
    let stdout = run_up_with(&["--receiver-hedging", "--kill", "9@1.5"], "34800", 15);
    assert!(stdout.contains("killed node 9 at t="), "{stdout}");
    assert!(
        stdout.contains("way to a killed gateway"),
        "the summary says what the killed gateway took with it:\n{stdout}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("per participant (the first of its two gateways)"))
        .unwrap_or_else(|| panic!("no per-participant line in\n{stdout}"));
    let lost: u64 = line
        .rsplit_once("lost ")
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no participant loss in {line}"));
    let summary = &stdout[stdout.find("summary (").expect("a summary")..];
    let packets: u64 = summary
        .split_once("packets ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in\n{stdout}"));
    // After the kill, the twin is the participant's only gateway, so a datagram the kernel
    // drops on loopback under load (see `run_up_with`) is lost to the participant: 1 of
    // ~3,000 packets, seen once in ~10 runs of the whole suite on two cores.
    assert!(
        lost * 1000 <= packets,
        "the twin kept its participant whole: {line}\n{stdout}"
    );
}

/// Goal: a node killed on the second of two event loops dies on time and is accounted for:
/// that loop kills it, and the first, which runs the root, reads the first packet sent after
/// its death only once it has, so the dead gateway is expected to release every packet sent
/// before (the summary counts what it held as lost to the kill, and the loss allowance of
/// [`run_up_with`] holds besides). Method: 8 participants on `--threads 2`: proxies 1-3 are
/// dealt out to loops 0, 1, 0 and each gateway runs with its home proxy, so the second loop
/// runs proxy 2 and its children, gateways 7-9; gateway 8 killed 1.5 s into 3 s.
#[test]
fn up_kills_a_gateway_of_the_second_loop() {
    let stdout = run_up_with(&["--kill", "8@1.5", "--threads", "2"], "34900", 7);
    assert!(
        stdout.contains(", 2 event loops; Ctrl-C to stop"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  event loop 0 runs nodes 0-1, 3-6, 10-11\n")
            && stdout.contains("  event loop 1 runs nodes 2, 7-9\n"),
        "{stdout}"
    );
    assert!(stdout.contains("killed node 8 at t="), "{stdout}");
}

/// `jasper up` with `extra` arguments for 3 s on its own ports: checks the summary (orders,
/// market data, books) and the files; returns what it printed.
fn run_up(extra: &[&str], base_port: &str) -> String {
    let gateways = if extra.contains(&"--receiver-hedging") {
        16
    } else {
        8
    };
    run_up_with(extra, base_port, gateways)
}

/// Held shared by every run on one event loop, and alone by a run on two. This file's tests
/// run side by side, and two loops on a machine of two cores busy with other exchanges are
/// far slower than one (release OML p50 3-4 ms against 0.4 ms beside two CPU hogs), since
/// each loop's stalls delay the other's deadlines. With 3 proxies, as here, two of them
/// share a loop, so a third of the packets reach some gateway through one loop only, and a
/// stall of it lets the next packet overtake them: before proxies were dealt out to the
/// loops in turn, such gaps cost 11 of 3,027 packets in one of five runs of this file.
static TWO_LOOPS_ALONE: RwLock<()> = RwLock::new(());

/// [`run_up`], where `live` gateways are alive at the end (their books are checked).
fn run_up_with(extra: &[&str], base_port: &str, live: usize) -> String {
    let two_loops = extra.windows(2).any(|w| w == ["--threads", "2"]);
    let _shared;
    let _alone;
    if two_loops {
        _alone = TWO_LOOPS_ALONE
            .write()
            .unwrap_or_else(PoisonError::into_inner);
    } else {
        _shared = TWO_LOOPS_ALONE
            .read()
            .unwrap_or_else(PoisonError::into_inner);
    }
    let out =
        std::env::temp_dir().join(format!("jasper-up-test-{}-{base_port}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_jasper"))
        .args([
            "up",
            "-n",
            "8",
            "--duration",
            "3",
            "--warmup",
            "1",
            "--base-port",
            base_port,
        ])
        .args(extra)
        // One event loop unless the test asks for more: this file's tests run side by side
        // on a machine that may have two cores.
        .args(if extra.contains(&"--threads") {
            &[][..]
        } else {
            &["--threads", "1"][..]
        })
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run jasper up");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "jasper up failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = &stdout[stdout.find("summary (").expect("a summary")..];
    let field = |name: &str| -> u64 {
        let at = summary
            .find(name)
            .unwrap_or_else(|| panic!("no {name:?} in\n{stdout}"));
        summary[at + name.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        field("sequenced ") > 100,
        "orders reached the engine:\n{stdout}"
    );
    assert_eq!(
        field("sequenced "),
        field("orders sent "),
        "every order sent reached the engine:\n{stdout}"
    );
    assert!(field("matched ") > 0, "orders matched:\n{stdout}");
    assert!(field("packets ") > 100, "market data flowed:\n{stdout}");
    assert_eq!(
        field("responses sent "),
        field("delivered "),
        "every response sent reached its gateway:\n{stdout}"
    );
    assert_eq!(field("skipped "), 0, "no response given up:\n{stdout}");
    // "Lost" is DESIGN.md §5's: a packet some gateway missed before recovery. The kernel
    // may drop a datagram on loopback when both test threads' exchanges and the build share
    // two cores (1 of ~3,000 packets in 2 of 10 runs, before and after 2026-11-22; 3 of
    // 2,540 once in a fresh-clone CI run on 2026-11-28, the test passing alone and in its
    // binary right after); the gap is recovered from the rewinder (the books below must
    // still agree), so allow a trace, 2 in 1,000 (and more in a loss drill).
    // A killed gateway never releases what was on its way to it or held for its deadline
    // when it died: lost by the definition, but to the kill, and the summary says how many
    // (more when the loop runs late, as under a busy machine).
    let held_at_kill = match summary.find("%; ") {
        Some(at) => summary[at + 3..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("a count of packets held at a kill in\n{stdout}")),
        None => 0,
    };
    let allowed = if extra.contains(&"--loss") { 50 } else { 2 };
    assert!(
        field("lost ").saturating_sub(held_at_kill) * 1000 <= allowed * field("packets "),
        "at most {allowed}/1000 of market data lost before recovery, besides the {held_at_kill} \
         a killed gateway held:\n{stdout}"
    );
    let killed = if extra.contains(&"--receiver-hedging") {
        16 - live
    } else {
        8 - live
    };
    let books = format!(
        "books: {live} of {live} {}gateways rebuilt the root's book exactly",
        if killed > 0 { "live " } else { "" }
    );
    assert!(
        summary.contains(&books),
        "every gateway's book, rebuilt from the feed, equals the root's:\n{stdout}"
    );
    for file in ["summary.txt", "cdf.csv", "oml_cdf.svg", "dws_cdf.svg"] {
        assert!(out.join(file).exists(), "{file} written");
    }
    let _ = std::fs::remove_dir_all(&out);
    stdout.into_owned()
}

/// Goal: a `--kill` of the root or of no node is refused before anything starts, with a
/// message that says why. Method: the root, a node the plan lacks, and two malformed specs.
#[test]
fn up_refuses_a_kill_of_the_root_or_of_no_node() {
    for (spec, expected) in [
        ("0@1", "node 0 is the root"),
        ("99@1", "the plan has no node 99"),
        ("5@1 --kill 5@2", "node 5 is killed twice"),
        ("5@30", "the drill would never happen"),
        ("two@1", "two"),
        ("2", "NODE@SECONDS"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_jasper"))
            .args(["up", "-n", "8", "--duration", "10", "--base-port", "34400"])
            .arg("--kill")
            .args(spec.split(' '))
            .output()
            .expect("run jasper up");
        assert_refused(&["--kill", spec], &output, expected);
    }
}

/// Goal: time flags that are no time (infinite, negative, beyond a year), rates that are no
/// rate and addresses no peer can reach are refused before anything starts, saying why
/// (`--duration inf` panicked, `--base-port 0` ran a cluster that heard nothing, `--rate inf`
/// sent an order every loop turn).
#[test]
fn up_refuses_times_and_ports_that_cannot_work() {
    for (args, expected) in [
        (&["--duration", "inf"][..], "not a time"),
        (&["--duration", "1e30"][..], "not a time"),
        (&["--duration=-5"][..], "not a time"),
        (&["--warmup", "nan"][..], "not a time"),
        (&["--base-port", "0", "--duration", "1"][..], "port 0"),
        (&["--threads", "0"][..], "0 is not in 1..=64"),
        (&["--threads", "65"][..], "65 is not in 1..=64"),
        (&["--rate", "inf"][..], "not a rate"),
        (&["--rate", "nan"][..], "not a rate"),
        (&["--rate=-5"][..], "not a rate"),
        (&["--sequencer-delay-us", "4000000000"][..], "not a delay"),
        (
            &["-n", "3000000000", "--receiver-hedging"][..],
            "participants",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_jasper"))
            .args(["up", "-n", "3"])
            .args(args)
            .output()
            .expect("run jasper up");
        assert_refused(args, &output, expected);
    }
}

/// Goal: a run leaves in its results directory only what it measured: a run too short to
/// measure anything (it ends inside its warm-up) says so, and the CDF and plots of the run
/// before it are gone, not left beside its summary as if they were its own.
#[test]
fn up_clears_the_last_runs_results() {
    let out = std::env::temp_dir().join(format!("jasper-up-stale-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    for name in ["cdf.csv", "oml_cdf.svg", "dws_cdf.svg", "summary.txt"] {
        std::fs::write(out.join(name), "the last run's").unwrap();
    }
    std::fs::write(out.join("notes.txt"), "the operator's").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_jasper"))
        .args(["up", "-n", "3", "--duration", "0.3", "--warmup", "1"])
        .args(["--threads", "1", "--base-port", "35000", "--out"])
        .arg(&out)
        .output()
        .expect("run jasper up");
    let (stdout, stderr) = common::text(&output);
    assert!(
        output.status.success(),
        "{stdout}
{stderr}"
    );
    assert!(stdout.contains("no packet was released"), "{stdout}");
    for name in ["cdf.csv", "oml_cdf.svg", "dws_cdf.svg"] {
        assert!(!out.join(name).exists(), "{name} of the last run left");
    }
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(summary.contains("no packet was released"), "{summary}");
    assert!(
        out.join("notes.txt").exists(),
        "only the run's own outputs go"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Goal: a `--loss` that is no fraction is refused before anything starts, saying why.
#[test]
fn up_refuses_a_loss_that_is_no_fraction() {
    for (spec, expected) in [
        ("1", "not a fraction"),
        ("-0.1", "not a fraction"),
        ("NaN", "not a fraction"),
        ("lots", "lots"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_jasper"))
            .args(["up", "-n", "8", "--duration", "1", "--base-port", "34600"])
            .arg(format!("--loss={spec}"))
            .output()
            .expect("run jasper up");
        assert_refused(&["--loss", spec], &output, expected);
    }
}
