//! Sharded runs (`Sim::sharded`, `OutboundConfig::threads`): one simulation over two threads.

use proto::NodeId;
use proto::plan::PlanConfig;
use sim::scenario::{Outbound, OutboundConfig};
use sim::{ClockModel, NetModel, Sim, SimConfig, seed_from_env};

fn config(threads: u32) -> OutboundConfig {
    OutboundConfig {
        seed: seed_from_env(5),
        plan: PlanConfig {
            hedge: 2,
            ..PlanConfig::new(100)
        },
        model: NetModel {
            loss: 1e-4,
            ..NetModel::aws_c5()
        },
        warmup_ns: 150_000_000,
        duration_ns: 100_000_000,
        drain_ns: 100_000_000,
        threads,
        ..OutboundConfig::default()
    }
}

fn run(config: OutboundConfig) -> Outbound {
    let mut run = Outbound::new(config).unwrap();
    run.run();
    run
}

/// Goal: a sharded run is a function of the seed, the configuration and the thread count, and
/// measures what the serial run measures. Method: N = 100, H = 2, with loss (so gateways ask
/// the root's rewinder across shards), on 2 threads twice: identical traces, counters and
/// summaries. Against 1 thread: the same packets measured and complete, every gateway
/// released up to the end, no violation, and the same figures to within the noise of
/// one-nanosecond ties breaking another way (OML p50 within 5%, P(F) within 5 points).
#[test]
fn a_sharded_run_repeats_itself_and_measures_what_the_serial_run_does() {
    let a = run(config(2));
    let b = run(config(2));
    assert_eq!(a.sim.shard_count(), 2);
    assert_eq!(
        a.sim.trace_hash(),
        b.sim.trace_hash(),
        "same seed, same trace"
    );
    assert_eq!(a.sim.stats(), b.sim.stats());
    let (sa, sb) = (a.summary("2 threads"), b.summary("2 threads"));
    assert_eq!(sa.to_json(), sb.to_json());

    let serial = run(config(1));
    let ss = serial.summary("1 thread");
    println!("{}\n{}", sa.table(), ss.table());
    assert_eq!(a.measured, serial.measured);
    assert_eq!(sa.packets, ss.packets);
    assert_eq!(sa.complete, ss.complete);
    assert_eq!(sa.violations, 0);
    assert_eq!(ss.violations, 0);
    for gateway in a.gateways() {
        assert!(
            a.sim.checker().next_seq(gateway.0) >= Some(a.measured.end),
            "gateway {gateway:?} stopped early"
        );
    }
    assert!(a.sim.network().stats().drops(sim::NetDrop::Loss) > 0);
    assert!(a.sim.link_count() > 0);
    let (p50a, p50s) = (sa.truth.oml_release.p50, ss.truth.oml_release.p50);
    assert!((p50a / p50s - 1.0).abs() < 0.05, "OML p50 {p50a} vs {p50s}");
    assert!(
        (sa.truth.fairness_percent - ss.truth.fairness_percent).abs() < 5.0,
        "P(F) {} vs {}",
        sa.truth.fairness_percent,
        ss.truth.fairness_percent
    );
    // Counters cover both shards: every copy sent was delivered, dropped, or is still queued.
    let net = a.sim.network().stats();
    let settled = net.delivered + net.drops_total();
    assert!(net.sent >= settled);
    assert!(net.sent - settled <= a.sim.pending_events() as u64);
    assert!(
        net.delivered > 300_000,
        "both shards' deliveries: {}",
        net.delivered
    );
}

/// Goal: more shards than the machine has cores still make one run, the same every time
/// (waiters yield their core to the partner they wait for; the 2-core CI machine has 2).
/// Method: 4 threads twice, identical traces and summaries, every packet measured reaching
/// every gateway as on one thread.
#[test]
fn more_shards_than_cores_repeat_themselves() {
    let a = run(config(4));
    let b = run(config(4));
    assert_eq!(a.sim.shard_count(), 4);
    assert_eq!(a.sim.trace_hash(), b.sim.trace_hash());
    let (sa, sb) = (a.summary("4 threads"), b.summary("4 threads"));
    assert_eq!(sa.to_json(), sb.to_json());
    assert_eq!(sa.violations, 0);
    let serial = run(config(1));
    assert_eq!(a.measured, serial.measured);
    assert_eq!(sa.complete, serial.summary("1 thread").complete);
}

/// Goal: faults reach the shard that runs the node. Method: kill a second-layer proxy on a
/// sharded run with H = 2; hedging carries the tree on, so every gateway still releases every
/// packet, and the kill shows in the counters.
#[test]
fn a_killed_proxy_on_a_sharded_run() {
    let config = config(2);
    let mut outbound = Outbound::new(config).unwrap();
    let proxy = outbound
        .plan
        .nodes()
        .iter()
        .rev()
        .find(|spec| spec.role == proto::plan::Role::Proxy)
        .map(|spec| spec.id)
        .unwrap();
    outbound.sim.kill(proxy, 200_000_000);
    outbound.run();
    let summary = outbound.summary("kill");
    assert_eq!(summary.violations, 0);
    assert!(outbound.sim.network().stats().drops(sim::NetDrop::Dead) > 0);
    for gateway in outbound.gateways() {
        assert!(outbound.sim.checker().next_seq(gateway.0) >= Some(outbound.measured.end));
    }
}

/// Goal: a run that cannot be sharded says why. Method: no lookahead (the Appendix C model
/// has no send or receive cost), a node that need not be `Send`, and shards of different
/// sizes are errors; one shard is the simulation itself.
#[test]
fn what_cannot_be_sharded_is_an_error() {
    let toy = |sim: &mut Sim, send: bool| {
        for node in (sim::toy::ToyTree {
            gateways: 4,
            fanout: 2,
            hedge: 0,
            hold_ns: 0,
            payload_len: 64,
            interval_ns: 1_000_000,
            packets: 10,
            start_ns: 0,
        })
        .build()
        {
            if send {
                // The toy nodes are plain data.
                sim.add_node_send(node, ClockModel::PERFECT);
            } else {
                sim.add_node(node, ClockModel::PERFECT);
            }
        }
    };
    let make = |model: NetModel, send: bool| {
        let mut sim = Sim::new(SimConfig::new(1).with_model(model));
        toy(&mut sim, send);
        sim
    };
    let error = Sim::sharded(vec![
        make(NetModel::appendix_c(), true),
        make(NetModel::appendix_c(), true),
    ])
    .unwrap_err();
    assert!(error.contains("lookahead"), "{error}");
    let error = Sim::sharded(vec![
        make(NetModel::aws_c5(), false),
        make(NetModel::aws_c5(), false),
    ])
    .unwrap_err();
    assert!(error.contains("add_node_send"), "{error}");
    let error = Sim::sharded(vec![
        make(NetModel::aws_c5(), true),
        Sim::new(SimConfig::new(1)),
    ])
    .unwrap_err();
    assert!(error.contains("same nodes"), "{error}");
    let one = Sim::sharded(vec![make(NetModel::aws_c5(), true)]).unwrap();
    assert_eq!(one.shard_count(), 1);
    let two = Sim::sharded(vec![
        make(NetModel::aws_c5(), true),
        make(NetModel::aws_c5(), true),
    ])
    .unwrap();
    assert_eq!(two.shard_count(), 2);
    assert!(two.node_dyn(NodeId(3)).id() == NodeId(3));
}
