//! `jasper bench ioc` end to end, briefly: a real gateway, proxy and root on loopback answer
//! every IOC order, and the report carries the row, its baseline and per-window rows.
//!
//! Epoll threads only (no busy-polling in CI); the latencies are not judged here, only that
//! the benchmark measures what it says (every order answered, samples recorded).

mod common;

use std::process::Command;

use common::assert_refused;

#[test]
fn ioc_bench_answers_every_order_and_writes_its_report() {
    let out = std::env::temp_dir().join(format!("jasper-bench-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(env!("CARGO_BIN_EXE_jasper"))
        .args(["bench", "--out"])
        .arg(&out)
        .args([
            "ioc",
            "--rates",
            "2000",
            "--duration",
            "0.6",
            "--window",
            "0.2",
            "--sequencer-delay-us",
            "0",
            "--drive",
            "epoll",
            "--base-port",
            "36500",
        ])
        .output()
        .expect("run jasper bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "jasper bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("report.json")).expect("report.json written"),
    )
    .expect("report.json parses");
    let text = json.to_string();
    let runs = json
        .pointer("/benchmarks/IOC round trip (loopback UDP)/runs")
        .and_then(|r| r.as_array())
        .unwrap_or_else(|| panic!("no runs in the report: {text}"));
    assert_eq!(runs.len(), 1, "{text}");
    let run = &runs[0];
    let sent = run["sent"].as_u64().expect("sent");
    // 0.3 s of warm-up and 0.6 s measured at 2K/s: about 1800 orders.
    assert!((1600..=2000).contains(&sent), "sent {sent}: {text}");
    assert_eq!(run["unanswered"].as_u64(), Some(0), "{text}");
    // Orders of the warm-up are not recorded; every later one has a round trip.
    let samples = run["rtt_ns"]["count"].as_u64().expect("count");
    assert!(
        (1100..=1300).contains(&samples),
        "{samples} samples of {sent}: {text}"
    );
    let windows = run["windows"].as_array().expect("windows");
    assert!(windows.len() >= 2, "{text}");
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md written");
    assert!(
        md.contains("baseline: raw UDP ping-pong (2 hops, epoll)"),
        "{md}"
    );
    assert!(md.contains("2000 orders/s, d_s = 0 µs, epoll"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}

/// Goal: a benchmark asked to measure nothing, or at a rate whose pacing interval rounds to
/// zero, is refused before it runs (`--rates 2000000000` spun forever, `--rate inf` divided
/// by zero, `--orders 999` panicked, `--messages 0` reported "Goal met" over no samples).
#[test]
fn bench_refuses_settings_that_measure_nothing() {
    for (args, expected) in [
        (&["ioc", "--rates", "2000000000"][..], "--rates"),
        (&["ioc", "--rates", "0"][..], "--rates"),
        (&["ioc", "--duration", "inf"][..], "--duration"),
        (&["journal", "--rate", "inf"][..], "not a rate"),
        (&["journal", "--rate", "0"][..], "not a rate"),
        (&["journal", "--orders", "0"][..], "--orders"),
        (&["tick-to-trade", "--messages", "0"][..], "at least 1"),
        (&["tick-to-trade", "--k", "0"][..], "--k"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_jasper"))
            .args(["bench", "--quick"])
            .args(args)
            .output()
            .expect("run jasper bench");
        assert_refused(args, &output, expected);
    }
}
