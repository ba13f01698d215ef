//! The IOC round trip of seed 004, through Jasper's real stack on loopback.
//!
//! A tree of one root, one proxy and one gateway (`<D,F> = <2,1>`). The gateway's strategy is
//! an open-loop generator: it sends one immediate-or-cancel buy every `1/rate` seconds,
//! whatever the responses do, into an empty book, so each order comes back as a cancel of its
//! unfilled quantity. The round trip of an order is its response's arrival at the gateway
//! minus the time it was sent, both on the gateway's local clock. The root runs in its own busy-polling thread,
//! the proxy and gateway in another (two busy-polling threads at most on this machine).
//!
//! Baseline, measured in the same run: the round trip of a raw UDP ping-pong between two
//! threads on loopback (two hops), against Jasper's four (gateway -> proxy -> root ->
//! gateway, plus the root's processing).
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark reads the clock and spawns threads"
)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use anyhow::Context;
use hdrhistogram::Histogram;
use net::{Deployment, Idle, Mode, Runtime, SocketOptions};
use proto::cluster::ClusterConfig;
use proto::plan::{Plan, PlanConfig, Shape};
use proto::strategy::{Ctx, OrderRequest, Strategy};
use proto::{Delivery, Event, Instant, NodeConfig, NodeId};
use serde_json::json;
use wire::order::TimeInForce;
use wire::{ExchangeTime, Side, Stock};

use super::{Section, TABLE_HEAD, percentiles, row};

/// Sends one IOC order every `interval_ns`, open loop.
struct Generator {
    stock: Stock,
    interval_ns: u64,
    next: Option<ExchangeTime>,
    stop_at: ExchangeTime,
}

impl Strategy for Generator {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        self.next = Some(ctx.now.saturating_add_nanos(self.interval_ns));
        ctx.wake_at(self.next.expect("just set"));
    }

    fn on_wakeup(&mut self, ctx: &mut Ctx<'_>) {
        let Some(mut next) = self.next else { return };
        // Open loop: send every order that is due, even if the loop fell behind.
        while next <= ctx.now && next < self.stop_at {
            ctx.send(OrderRequest::limit(
                Side::Buy,
                1,
                self.stock,
                1_000_000,
                TimeInForce::ImmediateOrCancel,
            ));
            next = next.saturating_add_nanos(self.interval_ns);
        }
        self.next = Some(next);
        if next < self.stop_at {
            ctx.wake_at(next);
        }
    }
}

/// Collects generation and response times at the gateway.
struct Trips {
    gateway: NodeId,
    sent: BTreeMap<u64, u64>,
    rtts: Vec<(u64, u64)>,
    responses: u64,
}

impl net::EventSink for Trips {
    fn on_event(&mut self, node: NodeId, now: Instant, event: &Event) {
        if node != self.gateway {
            return;
        }
        match *event {
            // Both ends on the gateway's local clock: the round trip must not depend on how
            // well clock sync did (generation times are in exchange time).
            Event::OrderSent {
                client_order_id, ..
            } => {
                self.sent.insert(client_order_id, now.as_nanos());
            }
            Event::OrderResponse {
                client_order_id, ..
            } => {
                self.responses += 1;
                if let Some(sent) = self.sent.remove(&client_order_id) {
                    self.rtts.push((sent, now.as_nanos().saturating_sub(sent)));
                }
            }
            _ => {}
        }
    }
}

/// One run: returns (generation time, round trip ns) of every answered order, and the count
/// of orders sent.
fn one(
    rate: u64,
    duration: f64,
    delay_us: u64,
    base_port: u16,
    journaled: bool,
) -> anyhow::Result<(Vec<(u64, u64)>, u64)> {
    let plan = Plan::new(&PlanConfig {
        shape: Shape::Explicit {
            depth: 2,
            fanout: 1,
        },
        hedge: 0,
        ..PlanConfig::new(1)
    })?;
    let mut node = NodeConfig {
        hold_and_release: false,
        ..NodeConfig::default()
    };
    node.sequencer.delay = Duration::from_micros(delay_us);
    node.pacing.enabled = false;
    let cluster = ClusterConfig::layout(&plan, node, &[], base_port)?;
    let options = SocketOptions::default();
    let err = |e: String| anyhow::anyhow!(e);
    let warmup = 0.3;
    let stop = Arc::new(AtomicBool::new(false));
    let until = net::clock::now_ns() + ((warmup + duration + 0.2) * 1e9) as u64;

    // The root, alone on its busy-polling thread.
    let journal_path =
        std::env::temp_dir().join(format!("jasper-ioc-{}-{base_port}.jnl", std::process::id()));
    let _ = std::fs::remove_file(&journal_path);
    let root_thread = {
        let deployment = Deployment::new(cluster.clone(), plan.clone());
        if journaled {
            // Every sequenced order is journaled and fsynced (group commit) before its
            // response leaves the root.
            let node = deployment.config().node.clone();
            let (root, hook) =
                net::journal::JournalHook::open(&journal_path, Arc::new(plan.clone()), node)
                    .map_err(err)?;
            spawn_root(deployment.bind(root, hook, &options)?, until, stop.clone())
        } else {
            let root = deployment.root().map_err(err)?;
            spawn_root(deployment.bind(root, Idle, &options)?, until, stop.clone())
        }
    };

    let deployment = Deployment::new(cluster, plan.clone());
    let mut runtime = Runtime::new(Mode::BusyPoll)?;
    let proxy_id = NodeId(plan.proxies().start);
    runtime.add(deployment.bind(deployment.proxy(proxy_id).map_err(err)?, Idle, &options)?)?;
    let gateway = NodeId(plan.gateways().start);
    let start = ExchangeTime::from_nanos(net::clock::now_ns() + (warmup * 1e9) as u64);
    let generator = Generator {
        stock: Stock::new("JSPR").expect("valid"),
        interval_ns: 1_000_000_000 / rate.max(1),
        next: None,
        stop_at: start.saturating_add_nanos((duration * 1e9) as u64),
    };
    let delivery = Delivery::Strategy(Box::new(generator));
    runtime.add(deployment.bind(
        deployment.gateway(gateway, delivery).map_err(err)?,
        Idle,
        &options,
    )?)?;
    let mut trips = Trips {
        gateway,
        sent: BTreeMap::new(),
        rtts: Vec::new(),
        responses: 0,
    };
    runtime.run_until(until, &stop, &mut trips)?;
    stop.store(true, Ordering::Relaxed);
    root_thread
        .join()
        .map_err(|_| anyhow::anyhow!("root thread panicked"))??;
    let sent = trips.rtts.len() as u64 + trips.sent.len() as u64;
    // Skip the warm-up orders (the first 100 ms of sending).
    let first = trips.rtts.first().map_or(0, |r| r.0) + 100_000_000;
    let rtts = trips
        .rtts
        .into_iter()
        .filter(|&(g, _)| g >= first)
        .collect();
    Ok((rtts, sent))
}

/// Runs the root on its own busy-polling thread until `until` or `stop`.
fn spawn_root<H: net::Hook<proto::Root> + Send>(
    host: net::Host<proto::Root, H>,
    until: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<std::io::Result<()>> {
    std::thread::spawn(move || -> std::io::Result<()> {
        let mut runtime = Runtime::new(Mode::BusyPoll)?;
        runtime.add(host)?;
        let mut ignore = |_: NodeId, _: Instant, _: &Event| {};
        runtime.run_until(until, &stop, &mut ignore)?;
        Ok(())
    })
}

/// Raw loopback UDP ping-pong between two threads: the two-hop baseline.
fn raw_round_trip(samples: usize) -> anyhow::Result<Histogram<u64>> {
    // Both ends spin on non-blocking sockets, as Jasper's busy-polling threads do, so the
    // baseline has no scheduler wake-up in it either.
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let spin_recv = |socket: &UdpSocket, buf: &mut [u8]| -> std::io::Result<usize> {
        let deadline = StdInstant::now() + Duration::from_secs(2);
        loop {
            match socket.recv_from(buf) {
                Ok((n, _)) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if StdInstant::now() > deadline {
                        return Err(e);
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(e),
            }
        }
    };
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..samples {
            let Ok(n) = spin_recv(&b, &mut buf) else {
                return;
            };
            let _ = b.send_to(&buf[..n], a_addr);
        }
    });
    let mut h = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3)?;
    let payload = [7u8; 60];
    let mut buf = [0u8; 64];
    for _ in 0..samples {
        let start = StdInstant::now();
        a.send_to(&payload, b_addr)?;
        spin_recv(&a, &mut buf).context("raw echo")?;
        h.record((start.elapsed().as_nanos() as u64).max(1))?;
    }
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))?;
    Ok(h)
}

pub(crate) fn run(
    rates: &[u64],
    duration: f64,
    window: Option<f64>,
    delays_us: &[u64],
    base_port: u16,
    journal: bool,
) -> anyhow::Result<Section> {
    let raw = raw_round_trip(20_000)?;
    let mut md = format!(
        "Open loop, {duration} s per row, IOC into an empty book (each comes back canceled). Goal at \
         10K orders/s with d_s = 0: p99 <= 20 µs (seed 004: 62 µs on cloud VMs over TCP; seed 002: \
         12.48 µs over RDMA). Root on one busy-polling thread, proxy and gateway on another.\n\n"
    );
    md.push_str(TABLE_HEAD.replace("what (ns)", "what (µs)").as_str());
    let us = |h: &Histogram<u64>| {
        let v = |x: u64| x as f64 / 1e3;
        format!(
            "{:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {}",
            v(h.min()),
            v(h.value_at_quantile(0.5)),
            h.mean() / 1e3,
            v(h.value_at_quantile(0.99)),
            v(h.value_at_quantile(0.999)),
            v(h.max()),
            h.len()
        )
    };
    let _ = writeln!(
        md,
        "| baseline: raw UDP ping-pong (2 hops) | {} |",
        us(&raw)
    );
    let mut json_rows = Vec::new();
    let mut windows_md = String::new();
    let mut port = base_port;
    let journal_modes: &[bool] = if journal { &[false, true] } else { &[false] };
    for (&delay, &journaled) in delays_us
        .iter()
        .flat_map(|d| journal_modes.iter().map(move |j| (d, j)))
    {
        for &rate in rates {
            let (rtts, sent) = one(rate, duration, delay, port, journaled)?;
            port = port.wrapping_add(8);
            let mut h = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3)?;
            for &(_, rtt) in &rtts {
                h.record(rtt.max(1))?;
            }
            let name = format!(
                "{rate} orders/s, d_s = {delay} µs{}",
                if journaled {
                    ", journaled (fsync before the response)"
                } else {
                    ""
                }
            );
            let _ = writeln!(md, "| {name} | {} |", us(&h));
            println!(
                "ioc {name}: sent {sent}, answered {}, p50 {:.1} µs, p99 {:.1} µs",
                h.len(),
                h.value_at_quantile(0.5) as f64 / 1e3,
                h.value_at_quantile(0.99) as f64 / 1e3
            );
            if let Some(w) = window {
                let w_ns = (w * 1e9) as u64;
                let origin = rtts.first().map_or(0, |r| r.0);
                let mut per: BTreeMap<u64, Histogram<u64>> = BTreeMap::new();
                for &(g, rtt) in &rtts {
                    let hist = per.entry((g - origin) / w_ns.max(1)).or_insert_with(|| {
                        Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("bounds")
                    });
                    hist.record(rtt.max(1))?;
                }
                for (i, hist) in &per {
                    let _ = writeln!(windows_md, "| {name}, window {i} | {} |", us(hist));
                }
            }
            json_rows.push(json!({"rate": rate, "sequencer_delay_us": delay, "journaled": journaled, "sent": sent, "answered": h.len(), "rtt_ns": percentiles(&h)}));
        }
    }
    if !windows_md.is_empty() {
        md.push_str("\nPer window:\n\n");
        md.push_str(TABLE_HEAD.replace("what (ns)", "what (µs)").as_str());
        md.push_str(&windows_md);
    }
    let _ = row; // the ns table helper is for in-process benchmarks
    print!("## ioc round trip\n{md}");
    Ok(Section {
        title: "IOC round trip (loopback UDP)".to_string(),
        markdown: md,
        json: json!({"raw_udp_round_trip_ns": percentiles(&raw), "runs": json_rows}),
    })
}
