//! Clock sync and fairness of the real nodes under a model: N, H, hold-and-release.
//!
//! `cargo run --release -p sim --example clock_check -- [model] [n] [h] [seconds]`

use proto::plan::PlanConfig;
use sim::NetModel;
use sim::scenario::{Outbound, OutboundConfig};

// An example may time itself; the library never reads the OS clock.
#[allow(clippy::disallowed_methods)]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = args.first().map_or("aws_c5", String::as_str);
    let n: u32 = args.get(1).map_or(100, |a| a.parse().unwrap());
    let h: u32 = args.get(2).map_or(2, |a| a.parse().unwrap());
    let seconds: f64 = args.get(3).map_or(1.0, |a| a.parse().unwrap());
    let mut plan = PlanConfig::new(n);
    plan.hedge = h;
    let config = OutboundConfig {
        seed: sim::seed_from_env(5),
        plan,
        model: NetModel::preset(model).unwrap_or_else(|| {
            NetModel::from_toml(&std::fs::read_to_string(model).expect("a preset or a file"))
                .expect("a model")
        }),
        rate_mps: std::env::var("RATE").map_or(5_000.0, |v| v.parse().unwrap()),
        duration_ns: (seconds * 1e9) as u64,
        invariants_every: 64,
        ..OutboundConfig::default()
    };
    let mut run = Outbound::new(config).unwrap();
    let wall = std::time::Instant::now();
    let trace_ms: u64 = std::env::var("TRACE_MS").map_or(0, |v| v.parse().unwrap());
    let mut t = 0;
    while t < trace_ms {
        t += 20;
        run.sim.run_until(t * 1_000_000);
        let all = run.clock_errors_now();
        let mean_of = |role: proto::plan::Role| {
            let v: Vec<i64> = all
                .iter()
                .filter(|(id, _)| run.plan.nodes()[id.0 as usize].role == role)
                .filter_map(|(_, e)| *e)
                .collect();
            v.iter().sum::<i64>() / v.len().max(1) as i64
        };
        print!(
            "mean proxy {} gateway {}  ",
            mean_of(proto::plan::Role::Proxy),
            mean_of(proto::plan::Role::Gateway)
        );
        let mut errors: Vec<i64> = all.iter().filter_map(|(_, e)| *e).collect();
        errors.sort_by_key(|e| e.unsigned_abs());
        let q = |p: f64| {
            errors
                .get(((errors.len() as f64 - 1.0) * p) as usize)
                .copied()
        };
        println!(
            "t={t}ms synced {} |err| p50 {:?} p90 {:?} max {:?}  timeouts {}",
            errors.len(),
            q(0.5),
            q(0.9),
            q(1.0),
            run.sim.stats().timeouts
        );
    }
    run.run();
    let summary = run.summary(&format!("{model} n{n} h{h}"));
    println!("{}", summary.table());
    let e = &run.clock_error;
    println!(
        "clock |error| ns: p50 {} p90 {} p99 {} max {} worst {} unsynced samples {}",
        e.abs_ns.value_at_quantile(0.5),
        e.abs_ns.value_at_quantile(0.9),
        e.abs_ns.value_at_quantile(0.99),
        e.abs_ns.max(),
        e.worst_ns,
        e.unsynced
    );
    let early = run
        .sim
        .checker()
        .violations()
        .iter()
        .filter(|v| matches!(v, sim::Violation::Early { .. }))
        .count();
    println!(
        "violations {} (early kept {early}); first {:?}",
        run.sim.checker().violation_count(),
        run.sim.checker().violations().first()
    );
    let mut errors = run.clock_errors_now();
    errors.sort_by_key(|(_, e)| e.map(i64::unsigned_abs));
    let layer = |id: proto::NodeId| run.plan.nodes()[id.0 as usize].role;
    for (id, e) in errors.iter().rev().take(8) {
        println!("node {} {:?}: error {e:?}", id.0, layer(*id));
    }
    for id in [1u32, 2, 3, 11, 12, 50] {
        let id = proto::NodeId(id);
        let sync = run
            .sim
            .node::<proto::Gateway>(id)
            .map(proto::Gateway::clock)
            .or_else(|| run.sim.node::<proto::Proxy>(id).map(proto::Proxy::clock))
            .unwrap();
        println!(
            "node {} sent {} pure {} discarded {} model {:?}",
            id.0,
            sync.pairs_sent,
            sync.pairs_pure,
            sync.pairs_discarded,
            sync.model()
        );
    }
    println!(
        "events {} wall {:.2}s",
        run.sim.stats().events,
        wall.elapsed().as_secs_f64()
    );
}
