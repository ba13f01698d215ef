//! Whole runs of the simulator with toy nodes (sim::toy): determinism, exactly-once release,
//! faults, clocks and the Appendix C preset. The real proto nodes get the same treatment in
//! the scenario tests.

use sim::toy::ToyTree;
use sim::{
    ClockModel, Dist, MetricsConfig, NetModel, OnViolation, PauseModel, Sim, SimConfig,
    seed_from_env,
};

fn tree(gateways: u32, fanout: u32, hedge: u32, hold_ns: u64, packets: u64) -> ToyTree {
    ToyTree {
        gateways,
        fanout,
        hedge,
        hold_ns,
        payload_len: 466,
        interval_ns: 200_000,
        packets,
        start_ns: 1_000_000,
    }
}

/// Builds a run of `tree` under `config`, gateways on `clock(i)`, measured.
fn build(tree: &ToyTree, config: SimConfig, clock: impl Fn(u32) -> ClockModel) -> Sim {
    let mut sim = Sim::new(config);
    for (i, node) in tree.build().into_iter().enumerate() {
        let i = u32::try_from(i).unwrap();
        let first_gateway = tree.gateway_id(0).0;
        let model = if i >= first_gateway {
            clock(i - first_gateway)
        } else {
            ClockModel::PERFECT
        };
        sim.add_node(node, model);
    }
    sim.measure(MetricsConfig::new(tree.gateways));
    sim
}

/// Runs until the root has published everything and the tree has drained.
fn run(sim: &mut Sim, tree: &ToyTree) {
    let end = tree.start_ns + tree.interval_ns * tree.packets + 50_000_000;
    sim.run_until(end);
    sim.finish();
}

fn lossless(model: NetModel) -> NetModel {
    NetModel {
        loss: 0.0,
        rx_buffer_packets: 0,
        ..model
    }
}

/// Goal: one seed and configuration replay exactly. Method: run the same heavy-tailed
/// configuration twice and compare the hash of every delivery and release and the summary;
/// a different seed must give a different trace.
#[test]
fn same_seed_same_trace() {
    let seed = seed_from_env(0xD5EED);
    let toy = tree(60, 10, 2, 150_000, 1_000);
    let config = || SimConfig {
        on_violation: OnViolation::Collect,
        ..SimConfig::new(seed)
    };
    let drift = |i: u32| ClockModel {
        noise_ns: 50,
        ..ClockModel::linear(i64::from(i) * 1_000, f64::from(i) - 30.0)
    };
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut sim = build(&toy, config(), drift);
        run(&mut sim, &toy);
        let summary = sim::report::Summary::new(&sim, "determinism");
        runs.push((sim.trace_hash(), sim.stats().clone(), summary.to_json()));
    }
    assert!(
        runs[0].1.datagrams > 60_000,
        "the run did something: {:?}",
        runs[0].1
    );
    assert_eq!(runs[0], runs[1]);

    let mut other = build(
        &toy,
        SimConfig {
            seed: seed ^ 1,
            ..config()
        },
        drift,
    );
    run(&mut other, &toy);
    assert_ne!(other.trace_hash(), runs[0].0);
}

/// Goal: with no loss, every gateway releases every packet exactly once, in order, never
/// early, and with perfect clocks all on-time releases of a packet happen at the same true
/// instant. Method: the checker in panic mode with a zero skew bound; metrics must agree.
/// Host pauses are off: a gateway paused at a deadline releases late (see
/// `a_paused_gateway_releases_late`).
#[test]
fn every_gateway_releases_every_packet_once_in_order() {
    let toy = tree(100, 10, 1, 400_000, 2_000);
    let model = NetModel {
        pauses: PauseModel::OFF,
        ..lossless(NetModel::aws_c5())
    };
    let config = SimConfig {
        skew_bound_ns: Some(0),
        ..SimConfig::new(seed_from_env(11)).with_model(model)
    };
    let mut sim = build(&toy, config, |_| ClockModel::PERFECT);
    run(&mut sim, &toy);
    for i in 0..toy.gateways {
        assert_eq!(
            sim.checker().next_seq(toy.gateway_id(i).0),
            Some(toy.packets),
            "gateway {i}"
        );
    }
    assert_eq!(
        sim.checker().releases(),
        u64::from(toy.gateways) * toy.packets
    );
    let metrics = sim.metrics().unwrap();
    assert_eq!(metrics.packets, toy.packets);
    assert_eq!(metrics.messages(), toy.packets, "one message a toy packet");
    assert_eq!(metrics.lost(), 0);
    // Releases at the deadline are simultaneous in true time unless a copy came late.
    let on_time = metrics.complete - metrics.late_packets;
    assert_eq!(
        metrics.truth.fair_messages, metrics.complete_messages,
        "late packets: {}",
        metrics.late_packets
    );
    assert!(on_time > toy.packets * 9 / 10);
    assert!(
        metrics.truth.oml_receipt.value_at_quantile(0.5) > 40_000,
        "two hops of ~30 µs"
    );
    assert_eq!(sim.network().stats().drops_total(), 0);
}

/// Goal: drifting gateway clocks make release fairness on the exchange clock differ from the
/// truth. Method: gateways with offsets of up to 20 µs hold to the same exchange deadline; in
/// true time their releases spread, so the true P(F) collapses while the exchange one stays.
#[test]
fn clock_error_shows_in_true_time_fairness() {
    let toy = tree(20, 5, 1, 400_000, 500);
    let config = SimConfig::new(seed_from_env(12)).with_model(lossless(NetModel::gcp_c2d()));
    let mut sim = build(&toy, config, |i| {
        ClockModel::linear(i64::from(i) * 1_000, 0.0)
    });
    run(&mut sim, &toy);
    let metrics = sim.metrics().unwrap();
    assert_eq!(metrics.lost(), 0);
    assert!(metrics.fairness_percent(&metrics.exchange) > 90.0);
    assert_eq!(metrics.fairness_percent(&metrics.truth), 0.0);
    // Offsets 0..19 µs: the true release window is 19 µs, less any late copy's extra.
    assert!(metrics.truth.dws_release.value_at_quantile(0.5) >= 18_900);
}

/// Goal: a gateway paused when a deadline comes (`NetModel::pauses`) releases when it
/// resumes, so the packet's release window opens in exchange time too, though no copy came
/// late. Method: a constant network, a hold far above the path, perfect clocks, and pauses
/// of 20 µs at 500 per second per host (1% of the time): about 1 - 0.99^20 of the packets
/// find one of the 20 gateways paused at the deadline.
#[test]
fn a_paused_gateway_releases_late() {
    let toy = tree(20, 5, 1, 400_000, 2_000);
    let model = NetModel {
        pauses: PauseModel {
            rate_per_s: 500.0,
            duration: Dist::Constant { value: 20_000.0 },
        },
        ..NetModel::ideal(20_000)
    };
    let config = SimConfig {
        on_violation: OnViolation::Collect,
        ..SimConfig::new(seed_from_env(13)).with_model(model)
    };
    let mut sim = build(&toy, config, |_| ClockModel::PERFECT);
    run(&mut sim, &toy);
    let metrics = sim.metrics().unwrap();
    assert_eq!(metrics.lost(), 0);
    assert_eq!(metrics.late_packets, 0, "the hold covers every path");
    let unfair = 100.0 - metrics.fairness_percent(&metrics.exchange);
    assert!((10.0..30.0).contains(&unfair), "unfair share {unfair}%");
    // A release is late by what is left of a 20 µs pause.
    let window = metrics.exchange.dws_release.max();
    assert!((1_000..=20_000).contains(&window), "{window}");
}

/// Goal: hedging masks a dead relay; without hedging its gateways lose what follows.
/// Method: kill relay 1 halfway through, with H = 1 and with H = 0.
#[test]
fn hedging_masks_a_killed_relay() {
    for (hedge, expect_loss) in [(1, false), (0, true)] {
        let toy = tree(30, 10, hedge, 300_000, 1_000);
        let config = SimConfig {
            on_violation: OnViolation::Collect,
            ..SimConfig::new(seed_from_env(13)).with_model(lossless(NetModel::aws_c5()))
        };
        let mut sim = build(&toy, config, |_| ClockModel::PERFECT);
        sim.kill(proto::NodeId(1), toy.start_ns + toy.interval_ns * 500);
        run(&mut sim, &toy);
        let metrics = sim.metrics().unwrap();
        assert_eq!(
            metrics.lost() > 0,
            expect_loss,
            "H={hedge}: lost {}",
            metrics.lost()
        );
        if expect_loss {
            assert!(
                metrics.lost() >= 499,
                "H=0 loses the rest: {}",
                metrics.lost()
            );
            assert!(sim.network().stats().drops(sim::NetDrop::Dead) > 0);
        }
    }
}

/// Goal: a paused relay's copies queue and come out late on resume; a partition drops; a
/// clog delays. Method: one fault each on an unhedged tree, compared with a clean run.
#[test]
fn pause_partition_and_clog_have_their_effects() {
    let toy = tree(20, 10, 0, 300_000, 400);
    let start = toy.start_ns + toy.interval_ns * 100;
    let make = || {
        let config = SimConfig {
            on_violation: OnViolation::Collect,
            ..SimConfig::new(seed_from_env(14)).with_model(lossless(NetModel::ideal(20_000)))
        };
        build(&toy, config, |_| ClockModel::PERFECT)
    };
    let mut clean = make();
    run(&mut clean, &toy);
    assert_eq!(clean.metrics().unwrap().late_packets, 0);
    assert_eq!(clean.metrics().unwrap().lost(), 0);

    // Pause relay 1 for 5 ms: ~25 packets arrive while paused and are released late.
    let mut paused = make();
    paused.pause(proto::NodeId(1), start, start + 5_000_000);
    run(&mut paused, &toy);
    let m = paused.metrics().unwrap();
    assert_eq!(m.lost(), 0);
    assert!(
        (20..=30).contains(&m.late_packets),
        "late {}",
        m.late_packets
    );

    // Partition the root from relay 2 for 2 ms: ~10 packets lost at its gateways.
    let mut split = make();
    split.partition(
        &[proto::NodeId(0)],
        &[proto::NodeId(2)],
        start,
        start + 2_000_000,
    );
    run(&mut split, &toy);
    let lost = split.metrics().unwrap().lost();
    assert!((9..=11).contains(&lost), "lost {lost}");
    assert_eq!(split.network().stats().drops(sim::NetDrop::Partition), lost);

    // Clog root -> relay 1 for 1 ms: packets wait and arrive in a burst, late.
    let mut clogged = make();
    clogged.clog(proto::NodeId(0), proto::NodeId(1), start, start + 1_000_000);
    run(&mut clogged, &toy);
    let m = clogged.metrics().unwrap();
    assert_eq!(m.lost(), 0);
    assert!((1..=6).contains(&m.late_packets), "late {}", m.late_packets);
}

/// Goal: bounded receive buffers really drop when a host is offered more than it can
/// process. Method: the root publishes every 2 µs, each relay needs 3 µs per copy, so about a
/// third of the copies must be dropped at each relay's buffer and counted as lost.
#[test]
fn overloaded_receiver_drops() {
    let toy = ToyTree {
        interval_ns: 2_000,
        ..tree(10, 5, 0, 0, 5_000)
    };
    let model = NetModel {
        recv_cost_ns: 3_000,
        rx_buffer_packets: 64,
        ..lossless(NetModel::ideal(10_000))
    };
    let config = SimConfig {
        on_violation: OnViolation::Collect,
        ..SimConfig::new(seed_from_env(15)).with_model(model)
    };
    let mut sim = build(&toy, config, |_| ClockModel::PERFECT);
    run(&mut sim, &toy);
    // Arrivals every 2 µs, service 3 µs: a third of the copies must be dropped at each relay.
    let drops = sim.network().rx_drops(1);
    assert!((1_500..1_800).contains(&drops), "relay 1 dropped {drops}");
    let metrics = sim.metrics().unwrap();
    assert!(
        metrics.lost() > 1_500,
        "lost {} of {}",
        metrics.lost(),
        metrics.packets
    );
}

/// Goal: the Appendix C preset reproduces the paper's Monte Carlo means. Method: per-hop
/// U(0,1) µs with D = 2 (root → relay → gateway), H = 0: mean one-way delay 1.0 unit; with
/// direct unicast (D = 1): 0.5 unit.
#[test]
fn appendix_c_means() {
    for (fanout, expect_us) in [(10, 1.0), (0, 0.5)] {
        let toy = ToyTree {
            payload_len: 24,
            ..tree(100, fanout, 0, 0, 2_000)
        };
        let config = SimConfig::new(seed_from_env(16)).with_model(NetModel::appendix_c());
        let mut sim = build(&toy, config, |_| ClockModel::PERFECT);
        run(&mut sim, &toy);
        let metrics = sim.metrics().unwrap();
        let mean_us = metrics.truth.owd.mean() / 1_000.0;
        assert!(
            (mean_us - expect_us).abs() < 0.01,
            "D={}: mean {mean_us}",
            if fanout == 0 { 1 } else { 2 }
        );
    }
}

/// Goal: gateways that share a VM share its receive queue and its pauses, and nothing else
/// changes. Method: the root unicasts to 5 gateways over a constant-latency network that
/// costs 1 µs per received copy, once with a VM each and once with all five on one VM.
/// Apart, every copy arrives at once (DWS 0); together, the fifth waits for four others
/// (DWS 4 µs). Then VM pauses: apart they take one gateway at a time, so some packets
/// release unfairly; together they take all five at once, so none does.
#[test]
fn gateways_on_one_vm_share_its_receive_queue_and_pauses() {
    let toy = tree(5, 0, 0, 0, 200);
    let costly = NetModel {
        recv_cost_ns: 1_000,
        ..NetModel::ideal(20_000)
    };
    let build_on = |model: NetModel, shared: bool, hold_ns: u64| {
        let toy = ToyTree { hold_ns, ..toy };
        let config = SimConfig {
            on_violation: OnViolation::Collect,
            ..SimConfig::new(seed_from_env(17)).with_model(model)
        };
        let mut sim = Sim::new(config);
        let first = toy.gateway_id(0);
        for node in toy.build() {
            let gateway = node.id() > first;
            if shared && gateway {
                sim.add_node_send_beside(node, first);
            } else {
                sim.add_node_send(node, ClockModel::PERFECT);
            }
        }
        sim.measure(MetricsConfig::new(toy.gateways));
        run(&mut sim, &toy);
        sim
    };
    let apart = build_on(costly.clone(), false, 0);
    let together = build_on(costly, true, 0);
    assert!(!apart.has_shared_vms());
    assert!(together.has_shared_vms());
    assert_eq!(
        together.vm_of(toy.gateway_id(4)),
        together.vm_of(toy.gateway_id(0))
    );
    let root = proto::NodeId(0);
    assert_ne!(together.vm_of(toy.gateway_id(0)), together.vm_of(root));
    assert_eq!(together.network().host_count(), 2);
    for sim in [&apart, &together] {
        let metrics = sim.metrics().unwrap();
        assert_eq!(metrics.lost(), 0);
        assert_eq!(metrics.exchange.dws_receipt.len(), 200);
    }
    assert_eq!(apart.metrics().unwrap().exchange.dws_receipt.max(), 0);
    let queued = &together.metrics().unwrap().exchange.dws_receipt;
    // (A histogram's max is the top of its 4 µs bucket, 4001.)
    for ns in [queued.min(), queued.max()] {
        assert!(
            (4_000..=4_004).contains(&ns),
            "DWS at receipt {ns} ns, not 4 µs"
        );
    }

    let pausing = NetModel {
        pauses: PauseModel {
            rate_per_s: 2_000.0,
            duration: Dist::Constant { value: 20_000.0 },
        },
        ..NetModel::ideal(20_000)
    };
    let unfair = |sim: &Sim| {
        let metrics = sim.metrics().unwrap();
        assert_eq!(metrics.lost(), 0);
        100.0 - metrics.fairness_percent(&metrics.exchange)
    };
    let apart = build_on(pausing.clone(), false, 400_000);
    let together = build_on(pausing, true, 400_000);
    assert!(unfair(&apart) > 5.0, "apart: {}%", unfair(&apart));
    assert_eq!(
        unfair(&together),
        0.0,
        "one VM pauses all its gateways at once"
    );
}
