//! Clock-sync error by tree depth: is a deep node off because its own hop is hard to sync,
//! or because it inherits its parent's error?
//!
//! `cargo run --release -p sim --example clock_depth -- [model] [n] [h] [ms]`
//!
//! Runs the outbound scenario (hold-and-release on, as in the P(F) experiment; `HOLD=0` off) and every 5
//! simulated ms samples, for every synced non-root node, its error (exchange-time reading
//! minus true time) and its *hop error* (its error minus its home parent's: what its own
//! probe exchanges got wrong). Prints |error| and |hop error| percentiles per layer.
//! `CLOCK_RTT_SLACK_NS`, `CLOCK_SAMPLES`, `CLOCK_BUCKETS`, `CLOCK_PROBE_MAX_US` (1000: a fixed
//! 1 ms probe interval), `CLOCK_SETTLED_NS`, `CLOCK_SETTLE_FITS` override the clock-sync settings;
//! `DRIFT_PPM` the largest injected drift of a node's local clock; `SKIP_MS` the time left
//! out before sampling; `SHAPE=D,F` an explicit tree shape. Ends with each layer's probe
//! interval and how many of its nodes have settled.

use proto::NodeId;
use proto::plan::PlanConfig;
use sim::NetModel;
use sim::scenario::{Outbound, OutboundConfig};

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = args.first().map_or("aws_c5", String::as_str);
    let n: u32 = args.get(1).map_or(1000, |a| a.parse().expect("n"));
    let h: u32 = args.get(2).map_or(2, |a| a.parse().expect("h"));
    let ms: u64 = args.get(3).map_or(400, |a| a.parse().expect("ms"));
    let mut plan = PlanConfig::new(n);
    plan.hedge = h;
    // `SHAPE=D,F` forces an explicit tree shape (`SHAPE=1,100`: direct unicast at N = 100).
    if let Some((d, f)) = std::env::var("SHAPE").ok().and_then(|v| {
        let (d, f) = v.split_once(',')?;
        Some((d.parse().ok()?, f.parse().ok()?))
    }) {
        plan.shape = proto::plan::Shape::Explicit {
            depth: d,
            fanout: f,
        };
    }
    let mut node = proto::NodeConfig {
        hold_and_release: std::env::var("HOLD").map_or(true, |v| v != "0"),
        ..proto::NodeConfig::default()
    };
    // Clock-sync knobs to experiment with (defaults: `proto::clock::ClockConfig`).
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(ns) = env("CLOCK_RTT_SLACK_NS") {
        node.clock.rtt_slack = core::time::Duration::from_nanos(ns);
    }
    if let Some(n) = env("CLOCK_SAMPLES") {
        node.clock.samples_max = n as usize;
    }
    if let Some(us) = env("CLOCK_PROBE_MAX_US") {
        node.clock.probe_interval_max = core::time::Duration::from_micros(us);
    }
    if let Some(ns) = env("CLOCK_SETTLED_NS") {
        node.clock.settled = core::time::Duration::from_nanos(ns);
    }
    if let Some(n) = env("CLOCK_SETTLE_FITS") {
        node.clock.settle_fits = n as u32;
    }
    if let Some(n) = env("CLOCK_BUCKETS") {
        node.clock.buckets = n as usize;
    }
    let config = OutboundConfig {
        seed: sim::seed_from_env(0x5EED_0001),
        plan,
        node,
        model: NetModel::preset(model).unwrap_or_else(|| {
            let text = std::fs::read_to_string(model).expect("a preset or a TOML file");
            NetModel::from_toml(&text).expect("a model")
        }),
        clock_drift_ppm_max: std::env::var("DRIFT_PPM")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| OutboundConfig::default().clock_drift_ppm_max),
        duration_ns: ms * 1_000_000,
        // `WARMUP_MS`: quiet time (clock sync only, no market data) before publishing starts.
        warmup_ns: std::env::var("WARMUP_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1_000_000,
        ..OutboundConfig::default()
    };
    let mut run = Outbound::new(config).expect("a valid scenario");
    let depth = run.plan.nodes().iter().map(|s| s.layer).max().unwrap_or(0) as usize;
    let mut error: Vec<Vec<u64>> = vec![Vec::new(); depth + 1];
    let mut hop: Vec<Vec<u64>> = vec![Vec::new(); depth + 1];
    let mut signed_hop_sum = vec![0i64; depth + 1];
    // The worst sample of each layer: (|error|, sample time ms, node).
    let mut worst: Vec<(u64, u64, u32)> = vec![(0, 0, 0); depth + 1];
    // `TRACE_NODE=id` prints that node's error at every sample.
    let trace_node = env("TRACE_NODE").map(|id| id as u32);
    // Skip the first `SKIP_MS` (default 200 ms: clock sync converging), then sample every
    // 5 ms.
    let mut t = std::env::var("SKIP_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(200);
    // Market data at the configured rate from `WARMUP_MS` on (clock sync alone before), as
    // `Outbound::run` publishes it: the probes share the paths and the senders with it.
    let root = run.plan.root();
    let message = vec![b'Z'; run.config.message_len];
    let gap_ns = (1e9 / run.config.rate_mps) as u64;
    let mut next_publish = run.config.warmup_ns;
    while t < ms {
        let sample_at = t * 1_000_000;
        while next_publish < sample_at {
            run.sim.run_until(next_publish);
            run.sim.command(root, |node, now| {
                let root = node
                    .as_any_mut()
                    .downcast_mut::<proto::Root>()
                    .expect("node 0 is the root");
                root.publish(now, &[wire::Raw(&message)]);
            });
            next_publish += gap_ns;
        }
        run.sim.run_until(sample_at);
        t += 5;
        let errors = run.clock_errors_now();
        let of = |id: NodeId| -> Option<i64> {
            if id == run.plan.root() {
                return Some(0);
            }
            errors.iter().find(|(i, _)| *i == id).and_then(|(_, e)| *e)
        };
        for &(id, e) in &errors {
            let Some(e) = e else { continue };
            let spec = &run.plan.nodes()[id.0 as usize];
            let layer = spec.layer as usize;
            error[layer].push(e.unsigned_abs());
            worst[layer] = worst[layer].max((e.unsigned_abs(), t - 5, id.0));
            if trace_node == Some(id.0) {
                println!("{} ms: node {} error {e} ns", t - 5, id.0);
            }
            if let Some(parent_error) = run.plan.home_parent(id).and_then(of) {
                hop[layer].push((e - parent_error).unsigned_abs());
                signed_hop_sum[layer] += e - parent_error;
            }
        }
    }
    println!("{model} N={n} H={h}, {ms} ms; |error| and |hop error| (own minus parent's), ns");
    println!(
        "layer  samples   err p50   err p99   err max   hop p50   hop p99   hop max  hop mean(signed)  worst at"
    );
    for layer in 1..=depth {
        error[layer].sort_unstable();
        hop[layer].sort_unstable();
        let (e, o) = (&error[layer], &hop[layer]);
        println!(
            "{layer:>5} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10.0}  node {} at {} ms",
            e.len(),
            pct(e, 0.5),
            pct(e, 0.99),
            pct(e, 1.0),
            pct(o, 0.5),
            pct(o, 0.99),
            pct(o, 1.0),
            signed_hop_sum[layer] as f64 / o.len().max(1) as f64,
            worst[layer].2,
            worst[layer].1
        );
    }
    // What the clock sync costs at the end: each node's probe interval (a pair every
    // interval, each probe answered: four datagrams) and whether it has settled.
    println!("layer  nodes  settled  mean probe interval µs  probe datagrams/s");
    for layer in 1..=depth {
        let (mut nodes, mut settled, mut interval_ns, mut per_s) = (0, 0, 0u128, 0.0);
        for spec in run
            .plan
            .nodes()
            .iter()
            .filter(|s| s.layer as usize == layer)
        {
            let Some(clock) = run.clock_sync(spec.id) else {
                continue;
            };
            nodes += 1;
            settled += usize::from(clock.is_settled());
            let interval = clock.probe_interval().as_nanos();
            interval_ns += interval;
            per_s += 4e9 / interval.max(1) as f64;
        }
        println!(
            "{layer:>5} {nodes:>6} {settled:>8} {:>23.0} {per_s:>18.0}",
            interval_ns as f64 / nodes.max(1) as f64 / 1e3
        );
    }
}
