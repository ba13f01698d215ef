//! The durable root (issue 9) in the simulator: the real journaling root over a simulated
//! disk, killed three times per seed at random simulated times under the paper's workload and
//! restarted from what the disk kept; see `sim::durable` for the checks.
//!
//! `DURABLE_SEEDS=n` runs seeds `0..n` (default 16); `SIM_SEED=s` runs seed `s` alone.

use sim::durable::{CrashConfig, run_crashes};

/// Goal: at many random crash points (seeded; swarm over fsync latency, durability backlog,
/// snapshot interval and rewinder ring), nothing acknowledged is lost, the recovered root is
/// the replay of the kept journal, every gateway's stream is gap-free and its rebuilt book
/// equals the root's, and every request gets each of its responses exactly once.
#[test]
fn root_killed_at_random_times_recovers() {
    let seeds: Vec<u64> = match std::env::var("SIM_SEED") {
        Ok(s) => vec![sim::parse_seed(&s).expect("SIM_SEED is a u64")],
        Err(_) => {
            let n = std::env::var("DURABLE_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(16);
            (0..n).collect()
        }
    };
    let (mut resent, mut reads, mut snapshots, mut unsynced_kept) = (0, 0, 0, 0);
    for &seed in &seeds {
        let config = CrashConfig::new(seed);
        let report = run_crashes(&config).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{report:?}");
        assert_eq!(report.crashes.len(), 3);
        assert!(report.acknowledged_before_crashes > 50, "{report:?}");
        resent += report.responses_resent;
        reads += report.journal_reads;
        snapshots += report.from_snapshot;
        unsynced_kept += report
            .crashes
            .iter()
            .filter(|&&(_, _, synced, kept)| kept > synced)
            .count();
    }
    if seeds.len() >= 8 {
        // The swarm reached the interesting cases.
        assert!(resent > 0, "some recovered root re-sent responses");
        assert!(reads > 0, "some retransmission came from the journal");
        assert!(snapshots > 0, "some recovery started from a snapshot");
        assert!(unsynced_kept > 0, "some crash kept unsynced records");
    }
}

/// Goal: sixty gateways whose gaps all come from the journal (a four-packet rewinder) share
/// its [`proto::journal::JOURNAL_READS_MAX`] reads, and none is told its packets are gone:
/// before the root dropped a request beyond them as busy, it answered "unavailable" and 7
/// of 8 seeds tried at this size skipped packets. The durability backlog is kept at 64
/// records or fewer, so that a long one's burst (the next test) does not add to the reads.
/// Seed 4 lost a response before a crash until a recovered root held the responses of its
/// snapshot and replay (session 34). Seeds 1-3 in CI; 1-32 pass.
#[test]
fn sixty_gateways_share_the_journal_reads() {
    let mut reads = 0;
    for seed in sim::seeds_from_env(1..=3) {
        let mut config = CrashConfig::new(seed);
        config.participants = 60;
        config.node.rewinder_packets = 4;
        config.node.journal_records_pending_max = config.node.journal_records_pending_max.min(64);
        let report = run_crashes(&config).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{report:?}");
        reads += report.journal_reads;
    }
    assert!(reads > 0, "retransmissions came from the journal");
}

/// Goal: a long fsync's release does not cost the gateways packets they cannot get back. With
/// sixty gateways, the default backlog of 1,024 records and fsyncs near 1 ms, one sync
/// releases more copies than the root's egress carries in its 2 ms backlog. The simulator's
/// driver used to hand them all over at once and the egress dropped the excess: every
/// gateway missed the same packets, all asked the root for them by unicast, and some gateway
/// never caught up (seeds 3, 4 and 5 among 9 of seeds 0-59). Now a driver hands a node's
/// datagrams over only while its socket is writable (`sim::network::Network::
/// unwritable_for_ns`, as `net` holds what the kernel refuses), and the burst waits in the
/// root's outbox (`docs/results/faults.md`, "The durable root at 60 gateways"). Seeds 0-59 pass.
/// Seeds 22 and 45 failed with the first version of the proxies' repair rings (session 36),
/// which passed on to a waiting child only the answers its ring kept: a gateway far behind
/// asks for packets older than the ring.
#[test]
fn sixty_gateways_survive_a_long_fsync_release() {
    for seed in sim::seeds_from_env([3, 4, 5, 22, 45]) {
        let mut config = CrashConfig::new(seed);
        config.participants = 60;
        let report = run_crashes(&config).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{report:?}");
    }
}

/// Goal: a run is a function of its seed (the crash points, the disk and the checks too).
#[test]
fn crash_runs_are_deterministic() {
    let a = run_crashes(&CrashConfig::new(5)).unwrap();
    let b = run_crashes(&CrashConfig::new(5)).unwrap();
    assert_eq!(a, b);
}
