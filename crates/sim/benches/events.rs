//! Simulated events per second of the driver and the network model, with the toy nodes:
//! N = 100 gateways, F = 10, H = 2, hold-and-release, 5K packets/s, AWS model, 0.2 s of
//! simulated time per iteration.
//!
//! `CARGO_TARGET_DIR=/work/target-sim cargo bench -p sim --bench events`

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

criterion_group!(benches, events);
criterion_main!(benches);
