//! The durable root with a real process and a real file journal (issue 9): kill the root
//! (SIGKILL, mid-write possibly) several times under load, restart it from its journal each
//! time, and check that every gateway saw one gap-free, repeat-free market-data stream.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn jasper() -> Command {
    Command::new(env!("CARGO_BIN_EXE_jasper"))
}

fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn root(dir: &PathBuf, seconds: f64) -> Child {
    jasper()
        .current_dir(dir)
        .args([
            "node",
            "--config",
            "c.toml",
            "--id",
            "root",
            "--journal",
            "j.jnl",
            "--rate",
            "2000",
        ])
        .args([
            "--warmup",
            "0.2",
            "--status-interval",
            "0",
            "--duration",
            &seconds.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the root")
}

/// Goal: a root killed at three points under a 2K messages/s feed and restarted from its
/// journal continues the MoldUDP64 stream with no gap and no repeat: every gateway releases
/// 1..=last exactly once, in order, with nothing skipped, and each restart recovered from the
/// journal. Method: proxies and gateways run in one process for the whole test; the root
/// runs in its own process, killed with SIGKILL after 1.0, 1.3 and 0.7 s, then left to run.
#[test]
fn killed_root_recovers_from_its_journal_without_a_gap() {
    let dir = std::env::temp_dir().join(format!("jasper-durable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let status = jasper()
        .current_dir(&dir)
        .args([
            "plan",
            "-n",
            "4",
            "--depth",
            "2",
            "--fanout",
            "2",
            "--base-port",
            "36600",
            "--out",
            "c.toml",
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let rest = jasper()
        .current_dir(&dir)
        .args([
            "node",
            "--config",
            "c.toml",
            "--id",
            "p1.0,p1.1,g0,g1,g2,g3",
        ])
        .args(["--duration", "7", "--status-interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut recoveries = 0;
    for (i, life) in [1.0, 1.3, 0.7].into_iter().enumerate() {
        let mut r = root(&dir, 30.0);
        std::thread::sleep(Duration::from_secs_f64(life));
        r.kill().unwrap();
        let out = r.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if i > 0 {
            assert!(
                stderr.contains("recovering from"),
                "restart {i} recovered:\n{stderr}"
            );
            recoveries += 1;
        }
    }
    let last = root(&dir, 3.0).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&last.stderr);
    assert!(
        last.status.success() && stderr.contains("recovering from"),
        "final root:\n{stderr}"
    );
    let rest = rest.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&rest.stdout);
    let mut gateways = 0;
    for line in stdout.lines().filter(|l| l.starts_with("summary node=g")) {
        let f = fields(line);
        let n = |k: &str| f[k].parse::<u64>().unwrap();
        assert_eq!(n("first"), 1, "{line}");
        assert_eq!(
            n("released"),
            n("last"),
            "gap-free: released every packet up to the last: {line}"
        );
        assert_eq!(
            (n("out_of_order"), n("repeats"), n("skipped")),
            (0, 0, 0),
            "{line}"
        );
        assert!(
            n("released") > 3_000,
            "the stream ran across the crashes: {line}"
        );
        gateways += 1;
    }
    assert_eq!(gateways, 4, "{stdout}");
    assert_eq!(recoveries + 1, 3);
    let _ = std::fs::remove_dir_all(&dir);
}
