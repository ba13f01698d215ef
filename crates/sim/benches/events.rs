//! Simulated events per second of the driver and the network model, with the toy nodes:
//! N = 100 gateways, F = 10, H = 2, hold-and-release, 5K packets/s, AWS model, 0.2 s of
//! simulated time per iteration.
//!
//! `CARGO_TARGET_DIR=/work/target-sim cargo bench -p sim --bench events`
//!
//! Issue #5's goal case (N = 1000, H = 2, 5K msgs/s, 10 simulated seconds) is too long for a
//! benchmark loop; run it once with the CLI, which prints wall time, events and handler calls
//! per second and peak RSS:
//!
//! `cargo run --release -p jasper -- sim run -n 1000 -H 2 --rate 5000 --duration 10 --model aws_c5`
//!
//! and N = 10,000 the same way with `-n 10000` (shorter `--duration`; `/usr/bin/time -v`
//! confirms the peak RSS); add `--threads 2` to split the run over two cores (group
//! `sharded` below measures that speed-up).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sim::toy::ToyTree;
use sim::{ClockModel, MetricsConfig, NetModel, OnViolation, Sim, SimConfig};

fn run(tree: &ToyTree) -> Sim {
    let config = SimConfig {
        on_violation: OnViolation::Collect,
        ..SimConfig::new(7).with_model(NetModel::aws_c5())
    };
    let mut sim = Sim::new(config);
    for node in tree.build() {
        sim.add_node(node, ClockModel::PERFECT);
    }
    sim.measure(MetricsConfig::new(tree.gateways));
    sim.run_until(tree.start_ns + tree.interval_ns * tree.packets + 5_000_000);
    sim.finish();
    sim
}

fn events(c: &mut Criterion) {
    let tree = ToyTree {
        gateways: 100,
        fanout: 10,
        hedge: 2,
        hold_ns: 300_000,
        payload_len: 466,
        interval_ns: 200_000,
        packets: 1_000,
        start_ns: 1_000_000,
    };
    let events = run(&tree).stats().events;
    let mut group = c.benchmark_group("sim");
    group.sample_size(10);
    group.measurement_time(core::time::Duration::from_secs(5));
    group.throughput(Throughput::Elements(events));
    group.bench_function("toy_n100_h2_5k_0.2s", |b| {
        b.iter(|| run(&tree).stats().events)
    });
    group.finish();
}

/// The real proto nodes (root, proxies, gateways with hold-and-release and clock sync) of the
/// paper's N = 100, H = 2 tree at 5K msgs/s under the AWS model: 50 ms of warm-up and 100 ms
/// measured per iteration, invariants sampled as the experiments do.
fn real_nodes(c: &mut Criterion) {
    use proto::plan::PlanConfig;
    use sim::scenario::{Outbound, OutboundConfig};
    let config = OutboundConfig {
        seed: 7,
        plan: PlanConfig {
            hedge: 2,
            ..PlanConfig::new(100)
        },
        warmup_ns: 50_000_000,
        duration_ns: 100_000_000,
        drain_ns: 10_000_000,
        invariants_every: 64,
        ..OutboundConfig::default()
    };
    let run = |config: &OutboundConfig| {
        let mut outbound = Outbound::new(config.clone()).expect("plan");
        outbound.run();
        outbound.sim.stats().events
    };
    let events = run(&config);
    let mut group = c.benchmark_group("sim");
    group.sample_size(10);
    group.measurement_time(core::time::Duration::from_secs(10));
    group.throughput(Throughput::Elements(events));
    group.bench_function("real_n100_h2_hold_5k_0.15s", |b| b.iter(|| run(&config)));
    group.finish();
}

/// One run over 1, 2 and 4 threads (`OutboundConfig::threads`, `Sim::sharded`): the real nodes of
/// the N = 1000, H = 2 tree at 5K msgs/s, at least 20 ms of warm-up and 30 ms measured per
/// iteration. Measuring starts once every clock has converged (~0.75 s in), so most of an
/// iteration is the warm-up's clock sync, not packets. The 2-thread row over the 1-thread row
/// is the speed-up of sharding on this machine (it needs both cores idle: with another process
/// on one, the shards wait for each other). The 4-thread row, on a 2-core machine, is what
/// taking turns costs a run made on a bigger one (`runtime::shard::Backoff`).
/// `cargo bench -p sim --bench events -- threads`.
fn sharded(c: &mut Criterion) {
    use proto::plan::PlanConfig;
    use sim::scenario::{Outbound, OutboundConfig};
    let config = |threads| OutboundConfig {
        seed: 7,
        plan: PlanConfig {
            hedge: 2,
            ..PlanConfig::new(1000)
        },
        warmup_ns: 20_000_000,
        duration_ns: 30_000_000,
        drain_ns: 5_000_000,
        threads,
        ..OutboundConfig::default()
    };
    let run = |config: &OutboundConfig| {
        let mut outbound = Outbound::new(config.clone()).expect("plan");
        outbound.run();
        outbound.sim.stats().events
    };
    let mut group = c.benchmark_group("sim");
    group.sample_size(10);
    group.measurement_time(core::time::Duration::from_secs(20));
    for threads in [1, 2, 4] {
        let config = config(threads);
        group.throughput(Throughput::Elements(run(&config)));
        group.bench_function(format!("real_n1000_h2_5k_0.05s_threads{threads}"), |b| {
            b.iter(|| run(&config));
        });
    }
    group.finish();
}

criterion_group!(benches, events, real_nodes, sharded);
criterion_main!(benches);
