//! The durable root with a real process and a real file journal (issue 9): kill the root
//! (SIGKILL, mid-write possibly) several times under load, restart it from its journal each
//! time, and check that every gateway saw one gap-free, repeat-free market-data stream, that
//! every order a gateway got a response for is in the journal (so in the recovered book or
//! its fills), that the final root equals a replay of its journal, and that every journaled
//! request got its responses exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::assert_refused;

fn jasper() -> Command {
    Command::new(env!("CARGO_BIN_EXE_jasper"))
}

fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A fresh directory `NAME-PID` in the temp dir holding `c.toml`, the plan of a 4-gateway
/// `<2,2>` cluster on ports from `base_port`.
fn planned_cluster(name: &str, base_port: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let status = jasper()
        .current_dir(&dir)
        .args(["plan", "-n", "4", "--depth", "2", "--fanout", "2"])
        .args(["--base-port", base_port, "--out", "c.toml"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "jasper plan");
    dir
}

/// A root process; `thread`: fsync on the journal's writer thread.
fn root(dir: &PathBuf, seconds: f64, dump: bool, thread: bool) -> Child {
    let mut command = jasper();
    command
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
        .args(if dump {
            &["--dump-state", "state.bin"][..]
        } else {
            &[]
        })
        .args(if thread {
            &["--journal-writer-thread"][..]
        } else {
            &[]
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the root")
}

/// Goal: a root killed at three points under a 2K messages/s feed and 4 x 200 orders/s and
/// restarted from its journal continues the MoldUDP64 stream with no gap and no repeat
/// (every gateway releases 1..=last exactly once, in order, with nothing skipped), each
/// restart recovered from the journal, every acknowledged order is in the journal, the final
/// root's state equals a replay of the journal file, and every journaled request got its
/// responses at its gateway exactly once. Method: proxies and gateways (trading the paper's
/// workload, writing every response to `acks.txt`) run in one process for the whole test;
/// the root runs in its own process, killed with SIGKILL after 1.0, 1.3 and 0.7 s, then left
/// to run 3 s and dump its state; its lives alternate between fsync on the loop's thread and
/// on the journal's writer thread. A second root started on the journal during the second
/// life is refused (the journal is locked) and leaves it untouched.
#[test]
fn killed_root_recovers_from_its_journal_without_a_gap() {
    let dir = planned_cluster("jasper-durable", "36600");
    let rest = jasper()
        .current_dir(&dir)
        .args([
            "node",
            "--config",
            "c.toml",
            "--id",
            "p1.0,p1.1,g0,g1,g2,g3",
        ])
        .args(["--duration", "9", "--status-interval", "0"])
        .args(["--orders", "200", "--seed", "7", "--acks", "acks.txt"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut recoveries = 0;
    for (i, life) in [1.0, 1.3, 0.7].into_iter().enumerate() {
        // Lives alternate between fsync on the loop and on the writer thread.
        let mut r = root(&dir, 30.0, false, i % 2 == 1);
        std::thread::sleep(Duration::from_secs_f64(life));
        if i == 1 {
            // A second root on the live journal is refused before it reads or cuts it (the
            // live root's unsynced tail would look torn to it).
            let second = root(&dir, 30.0, false, false).wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&second.stderr);
            assert!(
                !second.status.success() && stderr.contains("j.jnl is in use"),
                "a second root on the live journal:\n{stderr}"
            );
        }
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
    let last = root(&dir, 3.0, true, true).wait_with_output().unwrap();
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
    check_orders(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Acknowledged orders are durable, the final root is the replay of its journal, every
/// journaled request got its responses exactly once.
fn check_orders(dir: &std::path::Path) {
    let text = std::fs::read_to_string(dir.join("c.toml")).unwrap();
    let deployment = net::Deployment::from_toml(&text).unwrap();
    let plan = deployment.plan().clone();
    let mut config = deployment.config().node.clone();
    config.journal = true;
    let (journal, _) = journal::Journal::open(dir.join("j.jnl")).unwrap();
    let records = journal.read_vec(0..journal.next_index()).unwrap();
    let mut journaled = BTreeSet::new();
    for bytes in &records {
        for order in proto::journal::Record::parse(bytes).unwrap().orders {
            let message = wire::order::Repr::parse(order).unwrap();
            journaled.insert(message.header().dedupe_key());
        }
    }
    // Every response a gateway got, across all the root's lives.
    let acks = std::fs::read_to_string(dir.join("acks.txt")).unwrap();
    let mut acked = BTreeSet::new();
    let mut answered: BTreeMap<(u32, u64), BTreeSet<u32>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for line in acks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let gateway: u32 = f[0].parse().unwrap();
        let participant: u32 = f[1].parse().unwrap();
        let client_order_id: u64 = f[2].parse().unwrap();
        assert!(seen.insert(line.to_string()), "response twice: {line}");
        acked.insert((participant, client_order_id));
        answered
            .entry((participant, client_order_id))
            .or_default()
            .insert(gateway);
    }
    assert!(
        acked.len() > 1_000,
        "orders were acknowledged: {}",
        acked.len()
    );
    let lost: Vec<_> = acked.difference(&journaled).take(10).collect();
    assert!(
        lost.is_empty(),
        "acknowledged but not in the journal: {lost:?} ({} acked, {} journaled)",
        acked.len(),
        journaled.len()
    );
    let unanswered: Vec<_> = journaled
        .iter()
        .filter(|&&(p, c)| {
            plan.participant_gateways(p)
                .any(|g| !answered.get(&(p, c)).is_some_and(|a| a.contains(&g.0)))
        })
        .take(10)
        .collect();
    assert!(
        unanswered.is_empty(),
        "journaled requests without a response at their gateway: {unanswered:?}"
    );
    // The final root (recovered three times, snapshots included) equals a replay of its
    // journal from nothing.
    let state = std::fs::read(dir.join("state.bin")).unwrap();
    let replayed = proto::Root::recover(plan, config, None, &records).unwrap();
    assert_eq!(
        proto::journal::snapshot_position(&state),
        Some(records.len() as u64)
    );
    assert!(
        replayed.state() == state,
        "the final root differs from a replay of its journal"
    );
    eprintln!(
        "{} records, {} requests journaled, {} acknowledged, {} responses",
        records.len(),
        journaled.len(),
        acked.len(),
        seen.len()
    );
}

/// Goal: the durability flags of `jasper node` that could only fail at exit, after the run
/// (`--dump-state` without a journaling root, an output file in no directory), are refused
/// before any node starts, saying why; so are rates that are no rate (`--orders nan` traded
/// nothing without a word, `--rate inf` published every loop turn). Method: a planned cluster, one bad combination each,
/// and a duration long enough that a run would be noticed.
#[test]
fn node_refuses_outputs_it_could_only_fail_to_write_at_exit() {
    let dir = planned_cluster("jasper-durable-flags", "36700");
    for (args, says) in [
        (
            &["--id", "root", "--dump-state", "s.bin"][..],
            "--dump-state needs --journal",
        ),
        (
            &["--id", "g0", "--journal", "j.jnl", "--dump-state", "s.bin"][..],
            "needs the root in this process",
        ),
        (
            &["--id", "g0", "--journal", "j.jnl"][..],
            "--journal is the root's",
        ),
        (
            &["--id", "root", "--journal-writer-thread"][..],
            "needs --journal",
        ),
        (&["--id", "g0", "--orders", "nan"][..], "not a rate"),
        (&["--id", "g0", "--rate", "100"][..], "--rate is the root's"),
        (
            &["--id", "g0", "--publish-for", "1"][..],
            "--publish-for is the root's",
        ),
        (
            &["--id", "root", "--orders", "100"][..],
            "--orders is the gateways'",
        ),
        (
            &["--id", "root", "--acks", "acks.txt"][..],
            "--acks is the gateways'",
        ),
        (&["--id", "root", "--rate", "inf"][..], "not a rate"),
        (&["--id", "root", "--rate=-5"][..], "not a rate"),
        (
            &["--id", "g0", "--acks", "."][..],
            "a directory, not a file",
        ),
        (
            &["--id", "g0", "--acks", "no/such/dir/acks.txt"][..],
            "no directory",
        ),
        (
            &[
                "--id",
                "root",
                "--journal",
                "j.jnl",
                "--dump-state",
                "nowhere/s.bin",
            ][..],
            "no directory",
        ),
    ] {
        let output = jasper()
            .current_dir(&dir)
            .args(["node", "--config", "c.toml", "--duration", "30"])
            .args(args)
            .output()
            .unwrap();
        let stdout = assert_refused(args, &output, says);
        assert!(
            !stdout.contains("ready"),
            "{args:?} started nodes:\n{stdout}"
        );
    }
    assert!(!dir.join("j.jnl").exists(), "a refused run made a journal");
    let _ = std::fs::remove_dir_all(&dir);
}
