//! `jasper up`, the README's main command, as a user runs it: a short run of a whole exchange
//! on loopback must trade, lose no market data and write its results.

use std::process::Command;

/// Goal: the exchange comes up, gateways' strategies send orders that the engine sequences
/// and matches, every gateway releases every measured packet, and the summary and plots are
/// written. Method: run the real binary for a few seconds on its own port range.
#[test]
fn up_runs_trades_and_reports() {
    run_up(&[], "34100");
}

/// The same with the global-FIFO merge sequencer at the root (heartbeat orders from idle
/// gateways and proxies): every order sent is sequenced, nothing is lost, books agree.
#[test]
fn up_with_the_global_fifo_sequencer() {
    run_up(&["--sequencer", "global-fifo"], "34200");
}

fn run_up(extra: &[&str], base_port: &str) {
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
    // "Lost" is DESIGN.md §5's: a packet some gateway missed before recovery. The kernel
    // may drop a datagram on loopback when both test threads' exchanges and the build share
    // two cores (1 of ~3,000 packets in 2 of 10 runs, before and after 2026-11-22); the gap
    // is recovered from the rewinder (the books below must still agree), so allow a trace.
    assert!(
        field("lost ") * 1000 <= field("packets "),
        "at most 0.1% of market data lost on loopback before recovery:\n{stdout}"
    );
    assert!(
        summary.contains("books: 8 of 8 gateways rebuilt the root's book exactly"),
        "every gateway's book, rebuilt from the feed, equals the root's:\n{stdout}"
    );
    for file in ["summary.txt", "cdf.csv", "oml_cdf.svg", "dws_cdf.svg"] {
        assert!(out.join(file).exists(), "{file} written");
    }
    let _ = std::fs::remove_dir_all(&out);
}
