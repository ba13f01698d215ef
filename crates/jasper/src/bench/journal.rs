//! `jasper bench journal` (issue 9): orders through the root's whole inbound path in one
//! process (hop parsing, dedupe, sequencer, matching engine, responses and market data), with
//! the durable journal (`net::journal::JournalHook`: append, group-commit fdatasync, then the
//! responses leave) and without it, in the same run.
//!
//! - *throughput*: orders offered as fast as the loop takes them (64 per turn); orders/s from
//!   the first order in to the last response out;
//! - *latency*: orders offered open loop at a fixed rate; the time from an order's arrival
//!   at the root to its first response leaving it (the fsync batching shows up here);
//! - *snapshot*: the time `Root::snapshot` takes at the end of a throughput run, and its
//!   size (a driver takes one every `net::journal::SNAPSHOT_EVERY` records, on the root's
//!   loop: its orders wait that long). It holds the book and the latest held responses;
//!   `Root::state`, the same without the responses, is timed beside it as the baseline.
//!
//! Each journaled setting is reported as a ratio to the run without a journal. Runs are
//! repeated and the medians reported (wall-clock numbers on a shared machine are noisy).
//! The sequencer delay is 0: the journal's cost is what is measured, not d_s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use journal::GroupCommit;
use net::journal::JournalHook;
use proto::plan::{Plan, PlanConfig};
use proto::stats::median;
use proto::{Node, NodeConfig, NodeId, Root};
use serde_json::json;
use wire::order::{self, Display, OrderHeader, OrderType, TimeInForce};
use wire::{ExchangeTime, Side, Stock};

use super::Section;

/// Orders offered per loop turn in the throughput runs.
const TURN_ORDERS: usize = 64;
/// Orders offered and not yet answered at most in the throughput runs (a closed loop: the
/// sequencer holds orders while the journal is behind, and drops beyond its bound).
const IN_FLIGHT_MAX: u64 = 8_192;

/// One setting: no journal, or a journal with this group-commit policy.
#[derive(Clone, Copy, Debug)]
struct Setting {
    name: &'static str,
    commit: Option<GroupCommit>,
    /// fsync on a dedicated writer thread (`JournalHook::with_writer_thread`).
    thread: bool,
}

const SETTINGS: [Setting; 5] = [
    Setting {
        name: "no journal",
        commit: None,
        thread: false,
    },
    Setting {
        name: "journal, writer thread (group = what arrives during an fsync)",
        commit: Some(GroupCommit {
            records_max: 1,
            delay_max: Duration::ZERO,
        }),
        thread: true,
    },
    Setting {
        name: "journal, fsync every turn (records_max 1)",
        commit: Some(GroupCommit {
            records_max: 1,
            delay_max: Duration::ZERO,
        }),
        thread: false,
    },
    Setting {
        name: "journal, group commit 64 records / 200 us (default)",
        commit: Some(GroupCommit {
            records_max: 64,
            delay_max: Duration::from_micros(200),
        }),
        thread: false,
    },
    Setting {
        name: "journal, group commit 512 records / 1 ms",
        commit: Some(GroupCommit {
            records_max: 512,
            delay_max: Duration::from_millis(1),
        }),
        thread: false,
    },
];

/// What one run measured.
struct Run {
    orders_per_s: f64,
    latency: Histogram<u64>,
    syncs: u64,
    snapshot_ns: u64,
    snapshot_bytes: usize,
    state_ns: u64,
}

/// The root of a two-participant tree with the sequencer delay at 0, and the layer-1 node
/// orders come from.
fn setup() -> anyhow::Result<(Arc<Plan>, NodeConfig, NodeId)> {
    let plan = Plan::new(&PlanConfig::unhedged(2, 2, 2))?;
    let mut node = NodeConfig::default();
    node.sequencer.delay = Duration::ZERO;
    node.pacing.enabled = false;
    let from = NodeId(plan.proxies().start);
    Ok((Arc::new(plan), node, from))
}

/// Order `i` in its hop envelope: participants 0 and 1 alternate buying and selling 100 at
/// $100.00, so every other order trades against the one before and the book stays small.
fn order(i: u64, now: ExchangeTime, buf: &mut [u8]) -> usize {
    let enter = order::Enter {
        header: OrderHeader {
            client_order_id: i + 1,
            participant_id: (i % 2) as u32,
            gateway_id: 0,
            time: now,
        },
        side: if (i / 2).is_multiple_of(2) {
            Side::Buy
        } else {
            Side::Sell
        },
        shares: 100,
        stock: Stock::new("JSPR").expect("a valid symbol"),
        price: 1_000_000,
        time_in_force: TimeInForce::Day,
        order_type: OrderType::Limit,
        display: Display::Visible,
    };
    wire::hop::emit(buf, now, 0, &enter).expect("an order fits a datagram")
}

/// One run of `orders` orders, offered `TURN_ORDERS` per turn (`rate = None`) or at `rate`
/// per second; the journal file lives in `dir`.
fn one(setting: Setting, orders: u64, rate: Option<f64>, dir: &Path) -> anyhow::Result<Run> {
    let (plan, node, from) = setup()?;
    let path = dir.join(format!("bench-{}.jnl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(path.with_extension("jnl.snap"));
    let (mut root, mut hook) = match setting.commit {
        Some(commit) => {
            let (root, hook) = JournalHook::open(&path, plan, node).map_err(anyhow::Error::msg)?;
            let hook = hook.with_commit(commit);
            let hook = if setting.thread {
                hook.with_writer_thread().map_err(anyhow::Error::msg)?
            } else {
                hook
            };
            (root, Some(hook))
        }
        None => (Root::new(plan, node).map_err(anyhow::Error::msg)?, None),
    };
    let mut latency = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3)?;
    // Arrival time of each order (ns since start), until its first response.
    let mut arrived = vec![u64::MAX; orders as usize + 1];
    let mut answered = 0u64;
    let mut sent = 0u64;
    let mut buf = [0u8; 128];
    let interval_ns = rate.map(|r| (1e9 / r.max(1.0)) as u64);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(120);
    let mut first_in = None;
    while answered < orders {
        let now_ns = start.elapsed().as_nanos() as u64;
        let now = proto::Instant::from_nanos(now_ns + 1);
        let due = match interval_ns {
            Some(interval) => (now_ns / interval + 1).min(orders),
            None => (sent + TURN_ORDERS as u64)
                .min(answered + IN_FLIGHT_MAX)
                .min(orders),
        };
        while sent < due {
            let len = order(sent, ExchangeTime::from_nanos(now.as_nanos()), &mut buf);
            first_in.get_or_insert(now_ns);
            arrived[sent as usize + 1] = now_ns;
            root.handle_datagram(now, from, &buf[..len]);
            sent += 1;
        }
        if root.poll_timeout().is_some_and(|at| at <= now) {
            root.handle_timeout(now);
        }
        if let Some(hook) = hook.as_mut() {
            net::Hook::on_turn(hook, now, &mut root);
        }
        let out_ns = start.elapsed().as_nanos() as u64;
        while let Some(transmit) = root.poll_transmit(now) {
            let Ok(response) = wire::response::Response::parse(transmit.payload) else {
                continue;
            };
            let Ok(message) = order::Repr::parse(response.order) else {
                continue;
            };
            let id = message.header().client_order_id as usize;
            if let Some(at) = arrived.get_mut(id)
                && *at != u64::MAX
            {
                latency.record(out_ns.saturating_sub(*at).max(1))?;
                *at = u64::MAX;
                answered += 1;
            }
        }
        while root.poll_event().is_some() {}
        anyhow::ensure!(
            Instant::now() < deadline,
            "{}: {answered} of {orders} orders answered after 120 s",
            setting.name
        );
    }
    let elapsed_ns = start.elapsed().as_nanos() as u64 - first_in.unwrap_or(0);
    let snapshot_start = Instant::now();
    let snapshot_bytes = root.snapshot().len();
    let snapshot_ns = snapshot_start.elapsed().as_nanos() as u64;
    let state_start = Instant::now();
    std::hint::black_box(root.state());
    let state_ns = state_start.elapsed().as_nanos() as u64;
    let syncs = hook.as_ref().map_or(0, |h| h.syncs);
    drop(hook);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(path.with_extension("jnl.snap"));
    Ok(Run {
        orders_per_s: orders as f64 / (elapsed_ns as f64 / 1e9),
        latency,
        syncs,
        snapshot_ns,
        snapshot_bytes,
        state_ns,
    })
}

/// Medians over `runs`.
struct Medians {
    orders_per_s: f64,
    p50_ns: f64,
    p99_ns: f64,
    syncs: f64,
    snapshot_ns: f64,
    snapshot_bytes: f64,
    state_ns: f64,
}

fn medians(
    setting: Setting,
    orders: u64,
    rate: Option<f64>,
    runs: usize,
    dir: &Path,
) -> anyhow::Result<Medians> {
    let mut all = Vec::new();
    for _ in 0..runs.max(1) {
        all.push(one(setting, orders, rate, dir)?);
    }
    let of = |f: fn(&Run) -> f64| median(&all.iter().map(f).collect::<Vec<_>>());
    Ok(Medians {
        orders_per_s: of(|r| r.orders_per_s),
        p50_ns: of(|r| r.latency.value_at_quantile(0.5) as f64),
        p99_ns: of(|r| r.latency.value_at_quantile(0.99) as f64),
        syncs: of(|r| r.syncs as f64),
        snapshot_ns: of(|r| r.snapshot_ns as f64),
        snapshot_bytes: of(|r| r.snapshot_bytes as f64),
        state_ns: of(|r| r.state_ns as f64),
    })
}

/// Runs every setting, saturated and at `rate` orders/s; `dir` holds the journal files.
pub(super) fn run(
    orders: u64,
    rate: f64,
    runs: usize,
    dir: Option<PathBuf>,
) -> anyhow::Result<Section> {
    let dir = dir.unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let paced_orders = ((rate * 2.0) as u64).max(1_000).min(orders);
    let mut md = format!(
        "Orders through the root in one process (hop parsing, dedupe, sequencer with d_s = 0, \
         matching engine, responses, market data), with the durable journal \
         (`net::journal::JournalHook`: append, group-commit fdatasync in {}, on the loop's \
         thread or on a writer thread; responses only after) and without. Medians of {runs} runs. *Throughput*: {orders} orders offered \
         {TURN_ORDERS} per loop turn, at most {IN_FLIGHT_MAX} unanswered. *Latency*: {paced_orders} orders offered open loop at \
         {rate:.0}/s, from arrival at the root to the first response leaving it. \
         *Snapshot*: `Root::snapshot` at the end of a throughput run (book and held responses; \
         the root's loop waits for it every {} records), and `Root::state` (the same without \
         the responses) beside it.\n\n\
         | setting | orders/s | ratio | latency p50 (us) | p99 (us) | p50 ratio | fsyncs | \
         snapshot (ms) | snapshot (MB) | state (ms) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        dir.display(),
        net::journal::SNAPSHOT_EVERY
    );
    let mut rows = Vec::new();
    let mut base = None;
    for setting in SETTINGS {
        let saturated = medians(setting, orders, None, runs, &dir)?;
        let paced = medians(setting, paced_orders, Some(rate), runs, &dir)?;
        let (throughput, syncs) = (saturated.orders_per_s, saturated.syncs);
        let (p50, p99) = (paced.p50_ns, paced.p99_ns);
        let snapshot_ms = saturated.snapshot_ns / 1e6;
        let snapshot_mb = saturated.snapshot_bytes / 1e6;
        let state_ms = saturated.state_ns / 1e6;
        let (base_throughput, base_p50) = *base.get_or_insert((throughput, p50));
        let ratio = throughput / base_throughput;
        let p50_ratio = p50 / base_p50.max(1.0);
        md.push_str(&format!(
            "| {} | {throughput:.0} | {ratio:.3} | {:.1} | {:.1} | {p50_ratio:.1} | {syncs:.0} \
             | {snapshot_ms:.2} | {snapshot_mb:.2} | {state_ms:.3} |\n",
            setting.name,
            p50 / 1e3,
            p99 / 1e3,
        ));
        println!(
            "{:<52} {throughput:>10.0} orders/s (x{ratio:.3})  p50 {:>8.1} us  p99 {:>8.1} us \
             (p50 x{p50_ratio:.1})  {syncs:.0} fsyncs  snapshot {snapshot_ms:.2} ms \
             {snapshot_mb:.2} MB (state {state_ms:.3} ms)",
            setting.name,
            p50 / 1e3,
            p99 / 1e3
        );
        rows.push(json!({
            "setting": setting.name,
            "records_max": setting.commit.map(|c| c.records_max),
            "delay_max_us": setting.commit.map(|c| c.delay_max.as_micros() as u64),
            "orders_per_s": throughput, "throughput_ratio": ratio,
            "latency_p50_ns": p50, "latency_p99_ns": p99, "latency_p50_ratio": p50_ratio,
            "fsyncs": syncs,
            "snapshot_ns": saturated.snapshot_ns, "snapshot_bytes": saturated.snapshot_bytes,
            "state_ns": saturated.state_ns,
        }));
    }
    Ok(Section {
        title: "journal: durable root throughput and latency (issue 9)".to_string(),
        markdown: md,
        json: json!({"orders": orders, "paced_rate": rate, "paced_orders": paced_orders,
            "runs": runs, "dir": dir.display().to_string(), "settings": rows}),
    })
}
