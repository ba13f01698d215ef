//! Calibration tools for the inbound model (`sim::inbound`): they print, and assert nothing.
//!
//! `cargo run --release -p sim --example inbound_calibration -- TOOL`, TOOL one of:
//! - `incast`: the incast benchmark's loss (10 MPs x 5K orders/s, direct and through 2
//!   proxies) for several receive costs, receive buffers and link orders;
//! - `breakdown [tree]`: one incast run (direct, or through 2 proxies) with its metrics, loss
//!   breakdown, network and simulator counters;
//! - `pacing`: the pacing table (no pacing, T = 80 / 75 / 70 µs) on the campaign's base, with
//!   each proxy's last median OWD, for the settings in the environment: `COST` ns per order,
//!   `WAKE` ns, `BLEN`/`BPER` ms (bursts), `DUR` ms, `DISC` fifo|pq|loq, `SEED`, `DRAIN` ms,
//!   `FUTILE` (the pacer's `futile_after`), `SOCK` engine socket orders, `OFFSET` ns of clock
//!   offset at most, `NODRIFT`, `PROXYCLOCKS=random`.

use std::time::Duration;

use proto::order_queue::Discipline;
use sim::NetModel;
use sim::inbound::{Inbound, InboundConfig, paper};

const MS: u64 = 1_000_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("incast") => incast(),
        Some("breakdown") => breakdown(args.get(1).is_some_and(|a| a == "tree")),
        Some("pacing") => pacing(),
        _ => {
            eprintln!("usage: inbound_calibration incast | breakdown [tree] | pacing");
            std::process::exit(2);
        }
    }
}

fn incast() {
    for (cost, buf, fifo) in [
        (4_000, 3, true),
        (5_000, 3, true),
        (6_000, 3, true),
        (7_000, 4, true),
        (2_000, 2, false),
        (4_000, 3, false),
    ] {
        let model = NetModel {
            recv_cost_ns: cost,
            rx_buffer_packets: buf,
            link_fifo: fifo,
            ..NetModel::aws_c5()
        };
        match paper::incast_loss(&model, 5_000.0, true, 1) {
            Ok((d, t)) => {
                println!(
                    "recv_cost {cost} rx_buffer {buf} fifo {fifo}: direct {d:.3}% tree {t:.3}%"
                );
            }
            Err(e) => eprintln!("recv_cost {cost} rx_buffer {buf} fifo {fifo}: {e}"),
        }
    }
}

fn breakdown(tree: bool) {
    let mut c = if tree {
        InboundConfig::tree(10, 2, 5)
    } else {
        InboundConfig::direct(10)
    };
    c.model.recv_cost_ns = 2_000;
    c.warmup_ns = 60 * MS;
    c.duration_ns = 200 * MS;
    c.drain_ns = 60 * MS;
    c.workload.rate_per_s = 5_000.0;
    c.workload.burst_factor = 1.0;
    c.node.pacing.enabled = false;
    let mut inbound = Inbound::new(c).unwrap_or_else(|e| fail(&e));
    let r = inbound.run();
    println!("{:?}\n{:?}\n{:?}", r.metrics, r.loss, r.net);
    println!("{:?}", inbound.sim.stats());
    let log = inbound.log.borrow();
    println!("node drops {:?}", log.node_drops);
}

/// The environment variable `name` as a number, else `default`; a value that is no number is
/// an error.
fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| fail(&format!("{name}={v}: not a number"))),
        Err(_) => default,
    }
}

fn fail(e: &str) -> ! {
    eprintln!("inbound_calibration: {e}");
    std::process::exit(1);
}

fn pacing() {
    for t in [0, 80, 75, 70] {
        let mut c = paper::base(true, 10);
        c.seed = env_u64("SEED", c.seed);
        c.clock_offset_ns_max = env_u64("OFFSET", c.clock_offset_ns_max);
        if std::env::var("PROXYCLOCKS").is_ok_and(|v| v == "random") {
            c.proxy_clocks_exact = false;
        }
        if std::env::var("NODRIFT").is_ok() {
            c.clock_drift_ppm_max = 0.0;
        }
        c.drain_ns = env_u64("DRAIN", c.drain_ns / MS) * MS;
        c.engine.order_cost_ns = env_u64("COST", c.engine.order_cost_ns);
        c.engine.wakeup_ns = env_u64("WAKE", c.engine.wakeup_ns);
        c.workload.burst_len = Duration::from_millis(env_u64("BLEN", 50));
        c.workload.burst_period = Duration::from_millis(env_u64("BPER", 500));
        c.duration_ns = env_u64("DUR", 1_000) * MS;
        c.node.discipline = match std::env::var("DISC").as_deref() {
            Ok("fifo") => Discipline::Fifo,
            Ok("pq") => Discipline::SimplePq,
            _ => Discipline::Loq,
        };
        c.node.pacing.enabled = t > 0;
        c.node.pacing.futile_after =
            u32::try_from(env_u64("FUTILE", u64::from(c.node.pacing.futile_after)))
                .unwrap_or_else(|_| fail("FUTILE: too large"));
        c.engine.buffer_orders = usize::try_from(env_u64("SOCK", c.engine.buffer_orders as u64))
            .unwrap_or_else(|_| fail("SOCK: too large"));
        if t > 0 {
            c.node.pacing.threshold = Duration::from_micros(t);
        }
        let mut inbound = Inbound::new(c).unwrap_or_else(|e| fail(&e));
        let r = inbound.run();
        let owd: Vec<String> = inbound
            .plan
            .proxies()
            .filter_map(|id| inbound.proxy(proto::NodeId(id)))
            .map(|p| format!("{:?}", p.pacer().last_owd()))
            .collect();
        println!("T={t:>2} proxies' last median OWD {owd:?}");
        let m = &r.metrics;
        println!(
            "T={t:>2} buffer loss {:.2}% ({:?}) held {:.2}% loss {:.2}% rx {:.0}/s burst rx {:.0}/s \
             match burst {:.0}/s lat p50 {:.0} us gap {:.0} us lost {:?} root {} queued {} qfull {}",
            paper::buffer_loss_pct(&r),
            (
                r.loss.buffer_lost,
                r.loss.at_root,
                &r.loss.before_layer,
                r.net.drops_total()
            ),
            paper::held_pct(&r),
            m.loss_pct,
            m.engine_receive_rate,
            m.engine_receive_rate_burst,
            m.matching_rate_burst,
            m.matched_latency_us.p50,
            r.pacing_gap_us_end,
            r.loss.before_layer,
            r.loss.at_root,
            r.loss.queued_at_end,
            r.loss.proxy_queue_full
        );
    }
}
