//! The IOC round trip of seed 004, through Jasper's real stack on loopback.
//!
//! A tree of one root, one proxy and one gateway (`<D,F> = <2,1>`). The gateway's strategy is
//! an open-loop generator: it sends one immediate-or-cancel buy every `1/rate` seconds,
//! whatever the responses do, into an empty book, so each order comes back as a cancel of its
//! unfilled quantity. The round trip of an order is its response's arrival at the gateway
//! minus the time it was sent, both on the gateway's local clock. The root runs on its own
//! thread, the proxy and gateway on another (two busy-polling threads at most on this
//! machine), each pinned to a core; [`Drive`] picks busy-polling, epoll, or epoll in the
//! real-time class. Round trips go straight into histograms (one per run, one per window),
//! so a 24-hour soak runs in bounded memory.
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
use net::{Deployment, Idle, Mode, RunStats, Runtime, SocketOptions};
use proto::cluster::ClusterConfig;
use proto::plan::{Plan, PlanConfig};
use proto::strategy::{Ctx, OrderRequest, Strategy};
use proto::{Delivery, Event, Instant, NodeConfig, NodeId};
use serde_json::json;
use wire::order::TimeInForce;
use wire::{ExchangeTime, Side, Stock};

use super::{Section, TABLE_HEAD, percentiles};

/// Sends one IOC order every `interval_ns`, open loop.
struct Generator {
    stock: Stock,
    interval_ns: u64,
    next: Option<ExchangeTime>,
    stop_at: ExchangeTime,
    /// Set once it has sent its last order: the run ends when that one is answered.
    done: Arc<AtomicBool>,
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
        } else {
            self.done.store(true, Ordering::Relaxed);
        }
    }

    /// An order refused because the gateway's clock has not synced yet (`Closed`) does not
    /// count: the run's orders are the ones sent, so it ends one interval later.
    fn on_response(&mut self, _ctx: &mut Ctx<'_>, response: &wire::order::Repr) {
        if let wire::order::Repr::Rejected(r) = response
            && r.reason == wire::order::RejectReason::Closed
        {
            self.stop_at = self.stop_at.saturating_add_nanos(self.interval_ns);
        }
    }
}

/// How the benchmark's threads run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Drive {
    /// Two busy-polling threads (root; proxy + gateway), each pinned to a core.
    Busy,
    /// The same two threads sleeping in epoll, pinned.
    Epoll,
    /// Epoll threads in the real-time `SCHED_FIFO` class (needs root): other tasks on the
    /// machine cannot preempt them, so the tail is Jasper's, not the neighbours'.
    EpollRt,
    /// As `epoll-rt`, and each thread keeps polling for [`SPIN`] after work before it sleeps
    /// ([`Runtime::set_spin`]): a response that comes back soon pays no wake-up.
    EpollRtSpin,
}

/// How long `epoll-rt-spin` threads poll after work.
const SPIN: Duration = Duration::from_micros(50);

impl Drive {
    fn describe(self) -> &'static str {
        match self {
            Self::Busy => "busy-poll",
            Self::Epoll => "epoll",
            Self::EpollRt => "epoll, SCHED_FIFO",
            Self::EpollRtSpin => "epoll + 50 µs spin, SCHED_FIFO",
        }
    }

    fn mode(self) -> Mode {
        match self {
            Self::Busy => Mode::BusyPoll,
            Self::Epoll | Self::EpollRt | Self::EpollRtSpin => Mode::Epoll,
        }
    }

    fn realtime(self) -> bool {
        matches!(self, Self::EpollRt | Self::EpollRtSpin)
    }

    fn runtime(self) -> std::io::Result<Runtime> {
        let mut runtime = Runtime::new(self.mode())?;
        if self == Self::EpollRtSpin {
            runtime.set_spin(SPIN);
        }
        Ok(runtime)
    }

    /// Sets up the calling benchmark thread: pinned to `core`, real-time if asked.
    fn enter(self, core: usize) -> std::io::Result<()> {
        // Pinning is best effort (a container may hide the core); real time is what the row
        // claims, so its failure is an error.
        let _ = net::pin_current_thread(core);
        if self.realtime() {
            net::set_realtime(REALTIME_PRIORITY)?;
        }
        Ok(())
    }
}

/// `SCHED_FIFO` priority of the benchmark threads: above every ordinary task, below the
/// kernel's own real-time threads (which run at 50 and 99).
const REALTIME_PRIORITY: u8 = 40;

/// Round trips recorded as they complete: one histogram for the run and one per window of
/// generation time, so a 24-hour soak keeps kilobytes per window, not every sample.
struct Trips {
    gateway: NodeId,
    /// Orders sent and not answered yet: client order id -> local send time.
    sent: BTreeMap<u64, u64>,
    /// Orders sent before this local time are warm-up and not recorded.
    record_from: Option<u64>,
    window_ns: Option<u64>,
    all: Histogram<u64>,
    windows: BTreeMap<u64, Histogram<u64>>,
    sent_total: u64,
    responses: u64,
}

/// Warm-up: the generator sends from its first turn, but orders sent in the first 300 ms
/// (clock sync settling, caches and sockets warming) are not recorded; the run's `duration`
/// is measured after it.
const WARMUP_NS: u64 = 300_000_000;

/// Seconds a run allows for the gateway's clock to sync before it sends its first order. A
/// run ends once its last order is answered, so this only bounds one whose sync is slow:
/// with 0.5 s, a busy machine's late sync cut runs short (203 of 400 round trips measured)
/// under the label of the full rate.
const SYNC_ALLOWANCE: f64 = 5.0;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds")
}

impl Trips {
    fn new(gateway: NodeId, window: Option<f64>) -> Self {
        Self {
            gateway,
            sent: BTreeMap::new(),
            record_from: None,
            window_ns: window.map(|w| ((w * 1e9) as u64).max(1)),
            all: histogram(),
            windows: BTreeMap::new(),
            sent_total: 0,
            responses: 0,
        }
    }
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
                self.sent_total += 1;
                self.record_from
                    .get_or_insert_with(|| now.as_nanos().saturating_add(WARMUP_NS));
                self.sent.insert(client_order_id, now.as_nanos());
            }
            Event::OrderResponse {
                client_order_id, ..
            } => {
                self.responses += 1;
                let Some(sent) = self.sent.remove(&client_order_id) else {
                    return;
                };
                let Some(from) = self.record_from.filter(|&from| sent >= from) else {
                    return;
                };
                let rtt = now.as_nanos().saturating_sub(sent).max(1);
                // Values beyond the histogram's range saturate rather than vanish.
                self.all.saturating_record(rtt);
                if let Some(w) = self.window_ns {
                    self.windows
                        .entry((sent - from) / w)
                        .or_insert_with(histogram)
                        .saturating_record(rtt);
                }
            }
            _ => {}
        }
    }
}

/// What one run measured.
struct Run {
    trips: Trips,
    /// Orders still unanswered when the run ended.
    unanswered: u64,
    /// The root's loop and the proxy/gateway loop (stalls are counted in busy-poll mode).
    root: RunStats,
    edge: RunStats,
}

/// One run of the open-loop generator at `rate` orders/s for `duration` seconds.
fn one(
    rate: u64,
    duration: f64,
    window: Option<f64>,
    delay_us: u64,
    base_port: u16,
    journaled: bool,
    drive: Drive,
) -> anyhow::Result<Run> {
    let plan = Plan::new(&PlanConfig::unhedged(1, 2, 1))?;
    let mut node = NodeConfig {
        hold_and_release: false,
        ..NodeConfig::default()
    };
    node.sequencer.delay = Duration::from_micros(delay_us);
    node.pacing.enabled = false;
    let cluster = ClusterConfig::layout(&plan, node, &[], base_port)?;
    let options = SocketOptions::default();
    let err = |e: String| anyhow::anyhow!(e);
    let warmup = WARMUP_NS as f64 / 1e9;
    let stop = Arc::new(AtomicBool::new(false));
    // The gateway refuses orders until its clock has synced (after its parent's has
    // converged, ~0.15 s on loopback), and the generator sends that much longer; the run
    // ends once its last order is answered, or at `until` at the latest.
    let until = net::clock::now_ns() + ((warmup + duration + SYNC_ALLOWANCE + 0.2) * 1e9) as u64;

    // The root, alone on its thread and core.
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
            spawn_root(
                deployment.bind(root, hook, &options)?,
                until,
                stop.clone(),
                drive,
            )
        } else {
            let root = deployment.root().map_err(err)?;
            spawn_root(
                deployment.bind(root, Idle, &options)?,
                until,
                stop.clone(),
                drive,
            )
        }
    };

    // Proxy and gateway share a thread on the other core (its own thread, so the caller's
    // scheduling is never touched).
    let edge_thread = {
        let deployment = Deployment::new(cluster, plan.clone());
        let stop = stop.clone();
        std::thread::spawn(move || -> anyhow::Result<(Trips, RunStats)> {
            drive
                .enter(0)
                .map_err(|e| anyhow::anyhow!("cannot set up a {} thread: {e}", drive.describe()))?;
            let mut runtime = drive.runtime()?;
            let proxy_id = NodeId(plan.proxies().start);
            runtime.add(deployment.bind(
                deployment.proxy(proxy_id).map_err(err)?,
                Idle,
                &options,
            )?)?;
            let gateway = NodeId(plan.gateways().start);
            let start = ExchangeTime::from_nanos(net::clock::now_ns() + (warmup * 1e9) as u64);
            let done = Arc::new(AtomicBool::new(false));
            let generator = Generator {
                stock: Stock::new("JSPR").expect("valid"),
                interval_ns: 1_000_000_000 / rate.max(1),
                next: None,
                stop_at: start.saturating_add_nanos((duration * 1e9) as u64),
                done: done.clone(),
            };
            let delivery = Delivery::Strategy(Box::new(generator));
            runtime.add(deployment.bind(
                deployment.gateway(gateway, delivery).map_err(err)?,
                Idle,
                &options,
            )?)?;
            let mut trips = Trips::new(gateway, window);
            // In slices, to end as soon as every order is sent and answered.
            let mut stats = RunStats::default();
            loop {
                let slice_end = (net::clock::now_ns() + SLICE_NS).min(until);
                let slice = runtime.run_until(slice_end, &stop, &mut trips)?;
                stats.add(&slice);
                let finished = done.load(Ordering::Relaxed) && trips.sent.is_empty();
                if finished || slice.stopped || net::clock::now_ns() >= until {
                    break;
                }
            }
            Ok((trips, stats))
        })
    };
    let edge_result = edge_thread
        .join()
        .map_err(|_| anyhow::anyhow!("proxy/gateway thread panicked"));
    // Whatever the edge thread did, the root must stop too.
    stop.store(true, Ordering::Relaxed);
    let root_result = root_thread
        .join()
        .map_err(|_| anyhow::anyhow!("root thread panicked"))?;
    let _ = std::fs::remove_file(&journal_path);
    let (trips, edge) = edge_result??;
    let root =
        root_result.map_err(|e| anyhow::anyhow!("root thread ({}): {e}", drive.describe()))?;
    Ok(Run {
        unanswered: trips.sent.len() as u64,
        trips,
        root,
        edge,
    })
}

/// How long the proxy and gateway's loop runs before it looks whether the run is over.
const SLICE_NS: u64 = 20_000_000;

/// Runs the root on its own thread (core 1) until `until` or `stop`.
fn spawn_root<H: net::Hook<proto::Root> + Send>(
    host: net::Host<proto::Root, H>,
    until: u64,
    stop: Arc<AtomicBool>,
    drive: Drive,
) -> std::thread::JoinHandle<std::io::Result<RunStats>> {
    std::thread::spawn(move || -> std::io::Result<RunStats> {
        drive.enter(1)?;
        let mut runtime = drive.runtime()?;
        runtime.add(host)?;
        let mut ignore = |_: NodeId, _: Instant, _: &Event| {};
        runtime.run_until(until, &stop, &mut ignore)
    })
}

/// Raw loopback UDP ping-pong between two threads, set up as `drive` sets up Jasper's (the
/// same cores, spinning or sleeping, real-time or not): the two-hop baseline of its rows.
fn raw_round_trip(samples: usize, drive: Drive) -> anyhow::Result<Histogram<u64>> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    let spin = drive == Drive::Busy;
    for socket in [&a, &b] {
        // Spinning ends poll non-blocking sockets, as busy-polling runtimes do; sleeping ends
        // block in the kernel, paying the same wake-up an epoll runtime pays.
        socket.set_nonblocking(spin)?;
        socket.set_read_timeout((!spin).then_some(Duration::from_secs(2)))?;
    }
    let recv = move |socket: &UdpSocket, buf: &mut [u8]| -> std::io::Result<usize> {
        let deadline = StdInstant::now() + Duration::from_secs(2);
        loop {
            match socket.recv_from(buf) {
                Ok((n, _)) => return Ok(n),
                Err(e) if spin && e.kind() == std::io::ErrorKind::WouldBlock => {
                    if StdInstant::now() > deadline {
                        return Err(e);
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(e),
            }
        }
    };
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        drive.enter(1)?;
        let mut buf = [0u8; 64];
        for _ in 0..samples {
            let Ok(n) = recv(&b, &mut buf) else {
                return Ok(());
            };
            let _ = b.send_to(&buf[..n], a_addr);
        }
        Ok(())
    });
    let pinger = std::thread::spawn(move || -> anyhow::Result<Histogram<u64>> {
        drive.enter(0)?;
        let mut h = histogram();
        let payload = [7u8; 60];
        let mut buf = [0u8; 64];
        for _ in 0..samples {
            let start = StdInstant::now();
            a.send_to(&payload, b_addr)?;
            recv(&a, &mut buf).context("raw echo")?;
            h.saturating_record((start.elapsed().as_nanos() as u64).max(1));
            // Open loop at ~10K/s, as the rows run: a sleeping end really goes to sleep.
            let next = start + Duration::from_micros(100);
            while StdInstant::now() < next {
                if spin {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(next.saturating_duration_since(StdInstant::now()));
                }
            }
        }
        Ok(h)
    });
    let h = pinger
        .join()
        .map_err(|_| anyhow::anyhow!("ping thread panicked"))?;
    let echoed = echo
        .join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))?;
    let h = h?;
    echoed?;
    Ok(h)
}

/// The IOC table: every sequencer delay x journal setting x drive x rate, beside the raw
/// baseline.
#[allow(clippy::too_many_arguments, reason = "one CLI command's settings")]
pub(crate) fn run(
    rates: &[u64],
    duration: f64,
    window: Option<f64>,
    delays_us: &[u64],
    base_port: u16,
    journal: bool,
    drives: &[Drive],
) -> anyhow::Result<Section> {
    let mut md = format!(
        "Open loop, {duration} s per row, IOC into an empty book (each comes back canceled); the \
         round trip runs from the order's send to its response, both at the gateway. Goal at \
         10K orders/s with d_s = 0: p99 <= 20 µs (seed 004: 62 µs on cloud VMs over TCP; seed \
         002: 12.48 µs over RDMA). Root on one thread (core 1), proxy and gateway on another \
         (core 0); `busy-poll` spins, `epoll` sleeps, `SCHED_FIFO` adds real-time priority so \
         that the machine's other tasks cannot preempt the benchmark.\n\n"
    );
    md.push_str(TABLE_HEAD.replace("what (ns)", "what (µs)").as_str());
    let us = |h: &Histogram<u64>| {
        if h.is_empty() {
            return "- | - | - | - | - | - | 0".to_string();
        }
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
    let mut json_rows = Vec::new();
    let mut windows_md = String::new();
    let mut skipped = Vec::new();
    let mut baselines = Vec::new();
    let mut stall_lines = Vec::new();
    // Rows that measured fewer round trips than their rate and duration ask for.
    let mut short_lines = Vec::new();
    let mut port = base_port;
    let journal_modes: &[bool] = if journal { &[false, true] } else { &[false] };
    for &drive in drives {
        if drive.realtime() {
            // Real time needs CAP_SYS_NICE: try it on a throwaway thread first, and say why
            // the rows are missing rather than fail the whole report.
            let probe = std::thread::spawn(|| net::set_realtime(REALTIME_PRIORITY)).join();
            let refused = match probe {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("the probe thread panicked".to_string()),
            };
            if let Some(reason) = refused {
                let line = format!(
                    "Rows with {} skipped: cannot enter SCHED_FIFO ({reason}); run as root or \
                     with CAP_SYS_NICE.",
                    drive.describe()
                );
                println!("ioc: {line}");
                skipped.push(line);
                continue;
            }
        }
        let raw = raw_round_trip(20_000, drive)?;
        let _ = writeln!(
            md,
            "| baseline: raw UDP ping-pong (2 hops, {}) | {} |",
            drive.describe(),
            us(&raw)
        );
        baselines.push(json!({"drive": drive.describe(), "rtt_ns": percentiles(&raw)}));
        for &delay in delays_us {
            for &journaled in journal_modes {
                for &rate in rates {
                    let name = format!(
                        "{rate} orders/s, d_s = {delay} µs, {}{}",
                        drive.describe(),
                        if journaled {
                            ", journaled (fsync before the response)"
                        } else {
                            ""
                        }
                    );
                    let run = one(rate, duration, window, delay, port, journaled, drive)?;
                    port = port.wrapping_add(8);
                    let h = &run.trips.all;
                    let _ = writeln!(md, "| {name} | {} |", us(h));
                    println!(
                        "ioc {name}: sent {}, responses {}, unanswered {}, p50 {:.1} µs, p99 {:.1} µs",
                        run.trips.sent_total,
                        run.trips.responses,
                        run.unanswered,
                        h.value_at_quantile(0.5) as f64 / 1e3,
                        h.value_at_quantile(0.99) as f64 / 1e3
                    );
                    let asked = (rate as f64 * duration) as u64;
                    if (h.len() as f64) < 0.9 * asked as f64 {
                        let short = format!(
                            "{name}: measured {} round trips of the {asked} its rate and duration \
                             ask for (sent {}, answered {}): the generator fell behind or the \
                             run was cut short, so the row is not at its rate",
                            h.len(),
                            run.trips.sent_total,
                            run.trips.responses,
                        );
                        println!("ioc {short}");
                        short_lines.push(short);
                    }
                    println!(
                        "ioc {name}: root loop {} turns, {} datagrams, {} wake-ups, spun {:.1} ms; \
                         proxy+gateway loop {} turns, {} datagrams, {} wake-ups, spun {:.1} ms",
                        run.root.turns,
                        run.root.datagrams,
                        run.root.wakeups,
                        run.root.spun_ns as f64 / 1e6,
                        run.edge.turns,
                        run.edge.datagrams,
                        run.edge.wakeups,
                        run.edge.spun_ns as f64 / 1e6,
                    );
                    if drive == Drive::Busy {
                        let stalls = format!(
                            "{name}: the threads stopped turning (preempted or stalled > {} µs) \
                             {} times for {:.1} ms in all (root) and {} times for {:.1} ms \
                             (proxy + gateway); longest gaps {:.0} and {:.0} µs",
                            net::STALL_NS / 1_000,
                            run.root.stalls,
                            run.root.stalled_ns as f64 / 1e6,
                            run.edge.stalls,
                            run.edge.stalled_ns as f64 / 1e6,
                            run.root.longest_gap_ns as f64 / 1e3,
                            run.edge.longest_gap_ns as f64 / 1e3,
                        );
                        println!("ioc {stalls}");
                        stall_lines.push(stalls);
                    }
                    for (i, hist) in &run.trips.windows {
                        let _ = writeln!(windows_md, "| {name}, window {i} | {} |", us(hist));
                    }
                    let windows: Vec<_> = run
                        .trips
                        .windows
                        .iter()
                        .map(|(i, h)| json!({"window": i, "rtt_ns": percentiles(h)}))
                        .collect();
                    json_rows.push(json!({
                        "rate": rate, "sequencer_delay_us": delay, "journaled": journaled,
                        "drive": drive.describe(), "sent": run.trips.sent_total,
                        "responses": run.trips.responses, "unanswered": run.unanswered,
                        "rtt_ns": percentiles(h), "windows": windows,
                        "stalls": {
                            "root": {"count": run.root.stalls, "total_ns": run.root.stalled_ns, "longest_gap_ns": run.root.longest_gap_ns},
                            "edge": {"count": run.edge.stalls, "total_ns": run.edge.stalled_ns, "longest_gap_ns": run.edge.longest_gap_ns},
                        },
                    }));
                }
            }
        }
    }
    for line in &short_lines {
        let _ = writeln!(md, "\nShort: {line}");
    }
    if !stall_lines.is_empty() {
        md.push_str("\nStalls of the busy-polling threads (a stall delays every order in it):\n\n");
        for line in &stall_lines {
            let _ = writeln!(md, "- {line}");
        }
    }
    for line in &skipped {
        let _ = writeln!(md, "\n{line}");
    }
    if !windows_md.is_empty() {
        let _ = writeln!(
            md,
            "\nPer window of {} s of send time:\n",
            window.unwrap_or_default()
        );
        md.push_str(TABLE_HEAD.replace("what (ns)", "what (µs)").as_str());
        md.push_str(&windows_md);
    }
    print!("## ioc round trip\n{md}");
    Ok(Section {
        title: "IOC round trip (loopback UDP)".to_string(),
        markdown: md,
        json: json!({"raw_udp_round_trip": baselines, "runs": json_rows}),
    })
}
