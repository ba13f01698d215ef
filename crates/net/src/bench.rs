//! The hop benchmarks (`cargo bench -p net --bench hop`, `jasper bench fanout`): what one
//! proxy hop costs over raw UDP on loopback, measured against raw baselines in the
//! same run (issue 7, "How fast").
//!
//! (a) **Latency.** A client thread (core 0) stamps a market-data packet with the true time,
//!     sends it, and spins on its receive socket until the packet is back; one-way latency is
//!     receive time − stamp. Three paths, interleaved run by run:
//!     - *raw*: client → receive socket (the raw one-way loopback figure);
//!     - *forwarder*: client → a bare `recv`/`send_to` thread (core 1, spinning) → receive
//!       socket: what any user-space hop costs;
//!     - *proxy*: client → an unchanged `proto::Proxy` driven by `net` in busy-poll mode
//!       (core 1) → receive socket.
//!     Two busy threads at most at any time (the machine has 2 cores).
//! (b) **Throughput.** A sender thread (core 0) feeds a proxy (core 1, busy-poll) distinct
//!     packets at 1.5 times the raw rate below; the proxy forwards each to 10 children with one `sendmmsg`.
//!     Baseline: a raw thread on core 1 doing nothing but the same 10-way `sendmmsg` of the
//!     same payload. Ratio = proxy packets/s ÷ raw fan-outs/s.
//!
//! Each figure is the median over `NET_BENCH_RUNS` runs (default 5). Every run is short
//! (well under a second per path). Rerun:
//!
//! ```text
//! cargo bench -p net --features bench --bench hop
//! ```

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use crate::clock::now_ns;
use crate::socket::SendBatch;
use crate::{AddrBook, Host, Idle, Mode, NodeClock, Runtime, Socket, SocketOptions};
use proto::plan::{Plan, PlanConfig};
use proto::stats::{median, percentile};
use proto::{NodeConfig, NodeId, Proxy};
use wire::itch::AddOrder;
use wire::{Emit, ExchangeTime, JasperHeader, MarketDataBuilder, Side, Stock};

const RERUN: &str = "cargo bench -p net --features bench --bench hop";
/// Latency samples per path per run.
const SAMPLES: usize = 20_000;
/// Throughput: warm-up and measured time per path per run.
const WARMUP: Duration = Duration::from_millis(150);
const MEASURE: Duration = Duration::from_millis(500);
/// Give up on a latency sample after this long (a lost datagram); counted.
const SAMPLE_TIMEOUT_NS: u64 = 50_000_000;
/// Throughput: the proxy's offered load, as a multiple of the raw sender's fan-out rate.
const OFFERED_OVER_RAW: f64 = 1.5;
const CLIENT_CORE: usize = 0;
const HOP_CORE: usize = 1;

/// Prints a line and keeps it for the caller's report.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        let line = format!($($arg)*);
        println!("{line}");
        $out.push_str(&line);
        $out.push('\n');
    }};
}

/// Runs both benchmarks `runs` times each (medians) and returns what it printed.
pub fn run(runs: usize) -> String {
    let runs = runs.max(1);
    let mut out = String::new();
    say!(
        out,
        "net hop benchmarks: {runs} runs, medians; rerun with: {RERUN}"
    );
    latency(runs, &mut out);
    throughput(runs, &mut out);
    say!(out, "rerun with: {RERUN}");
    out
}

/// A ~450-byte market-data packet (10 Add Orders), as the root sends them.
fn packet() -> Vec<u8> {
    let session = NodeConfig::default().session().unwrap();
    let mut buf = vec![0u8; wire::mold::PAYLOAD_MAX];
    let mut builder = MarketDataBuilder::new(&mut buf, session, 1);
    for i in 0..10u64 {
        let add = AddOrder {
            stock_locate: 1,
            tracking_number: 0,
            timestamp_ns: i,
            order_ref: i + 1,
            side: Side::Buy,
            shares: 100,
            stock: Stock::new("JASPER").unwrap(),
            price: 1_000_000,
        };
        builder.push(&add).unwrap();
    }
    let len = builder.finish(&header(1, 0)).unwrap();
    buf.truncate(len);
    buf
}

fn header(packet_seq: u64, send_ns: u64) -> JasperHeader {
    JasperHeader {
        packet_seq,
        send_time: ExchangeTime::from_nanos(send_ns),
        deadline: ExchangeTime::from_nanos(send_ns + 1),
        flags: 0,
    }
}

/// Rewrites the packet's header in place: a new sequence number and send stamp.
fn stamp(packet: &mut [u8], packet_seq: u64, send_ns: u64) {
    header(packet_seq, send_ns)
        .emit(&mut packet[wire::market::HEADER_OFFSET..])
        .unwrap();
}

fn loopback() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

fn pin(core: usize) {
    if let Err(e) = crate::pin_current_thread(core) {
        eprintln!("warning: cannot pin to core {core}: {e}");
    }
}

/// A plan of `fanout` gateways under one proxy under the root.
fn plan(fanout: u32) -> Arc<Plan> {
    Arc::new(Plan::new(&PlanConfig::unhedged(fanout, 2, fanout)).unwrap())
}

/// Runs proxy 1 of `plan` on `socket` in a busy-poll runtime on this thread until `stop`;
/// returns (packets forwarded, copies sent, datagrams received, seconds) over the measured
/// window (after `warmup`, if any, else the whole run).
fn run_proxy(
    plan: Arc<Plan>,
    book: Arc<AddrBook>,
    socket: UdpSocket,
    warmup: Option<Duration>,
    stop: &AtomicBool,
) -> (u64, u64, u64, f64) {
    pin(HOP_CORE);
    let proxy = Proxy::new(NodeId(1), plan, NodeConfig::default()).unwrap();
    let socket = Socket::from_std(socket, &SocketOptions::default()).unwrap();
    let host = Host::new(proxy, Idle, "p1.0", socket, NodeClock::default(), book);
    let mut runtime = Runtime::new(Mode::BusyPoll).unwrap();
    runtime.add(host).unwrap();
    let mut sink = |_: NodeId, _: proto::Instant, _: &proto::Event| {};
    let counts = |runtime: &Runtime| {
        let host = runtime.hosts().next().unwrap();
        let net = host.net_counters();
        (
            host.node_counters().packets_new,
            net.datagrams_out,
            net.datagrams_in,
        )
    };
    if let Some(warmup) = warmup {
        runtime.run_for(warmup, stop, &mut sink).unwrap();
    }
    let ((packets0, copies0, in0), t0) = (counts(&runtime), now_ns());
    while !stop.load(Ordering::Relaxed) {
        runtime
            .run_for(Duration::from_millis(50), stop, &mut sink)
            .unwrap();
    }
    let t1 = now_ns();
    let (packets1, copies1, in1) = counts(&runtime);
    (
        packets1 - packets0,
        copies1 - copies0,
        in1 - in0,
        (t1 - t0) as f64 / 1e9,
    )
}

/// One-way latencies (ns) of `SAMPLES` packets sent from `client` to `first_hop`, received
/// on `receiver`; the sequence numbers continue from `*seq`. Returns the sorted samples and
/// the number lost.
fn measure(
    client: &UdpSocket,
    first_hop: SocketAddr,
    receiver: &UdpSocket,
    packet: &mut [u8],
    seq: &mut u64,
) -> (Vec<u64>, usize) {
    let mut samples = Vec::with_capacity(SAMPLES);
    let mut lost = 0;
    let mut buf = [0u8; 2048];
    for _ in 0..SAMPLES {
        *seq += 1;
        let sent = now_ns();
        stamp(packet, *seq, sent);
        client.send_to(packet, first_hop).unwrap();
        loop {
            match receiver.recv_from(&mut buf) {
                Ok((len, _)) => {
                    let got = now_ns();
                    let Ok(data) = wire::parse_market_data(&buf[..len]) else {
                        continue;
                    };
                    if data.header.packet_seq != *seq {
                        continue;
                    }
                    samples.push(got - data.header.send_time.as_nanos());
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if now_ns() - sent > SAMPLE_TIMEOUT_NS {
                        lost += 1;
                        break;
                    }
                }
                Err(e) => panic!("receive: {e}"),
            }
        }
    }
    samples.sort_unstable();
    (samples, lost)
}

/// Per path: (p50s, p99s) over runs, µs.
#[derive(Default)]
struct Path {
    p50: Vec<f64>,
    p99: Vec<f64>,
    lost: usize,
}

impl Path {
    fn record(&mut self, (samples, lost): (Vec<u64>, usize)) {
        self.p50.push(percentile(&samples, 5_000));
        self.p99.push(percentile(&samples, 9_900));
        self.lost += lost;
    }
}

fn latency(runs: usize, out: &mut String) {
    pin(CLIENT_CORE);
    let client = loopback();
    let receiver = loopback();
    receiver.set_nonblocking(true).unwrap();
    let mut packet = packet();
    let mut seq = 0;
    let (mut raw, mut forwarder, mut proxy) = (Path::default(), Path::default(), Path::default());
    for _ in 0..runs {
        raw.record(measure(
            &client,
            receiver.local_addr().unwrap(),
            &receiver,
            &mut packet,
            &mut seq,
        ));

        // A bare user-space forwarder, spinning on core 1.
        let stop = AtomicBool::new(false);
        let hop = loopback();
        hop.set_nonblocking(true).unwrap();
        let hop_addr = hop.local_addr().unwrap();
        let target = receiver.local_addr().unwrap();
        thread::scope(|s| {
            s.spawn(|| {
                pin(HOP_CORE);
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((len, _)) = hop.recv_from(&mut buf) {
                        let _ = hop.send_to(&buf[..len], target);
                    }
                }
            });
            forwarder.record(measure(&client, hop_addr, &receiver, &mut packet, &mut seq));
            stop.store(true, Ordering::Relaxed);
        });

        // The unchanged proxy node, driven by net in busy-poll mode on core 1.
        let stop = AtomicBool::new(false);
        let proxy_socket = loopback();
        let proxy_addr = proxy_socket.local_addr().unwrap();
        let book = Arc::new(AddrBook::new(vec![
            client.local_addr().unwrap(),
            proxy_addr,
            receiver.local_addr().unwrap(),
        ]));
        thread::scope(|s| {
            let worker = s.spawn(|| run_proxy(plan(1), book, proxy_socket, None, &stop).0);
            // Let the runtime start (first clock probes) before the first sample.
            thread::sleep(Duration::from_millis(20));
            proxy.record(measure(
                &client,
                proxy_addr,
                &receiver,
                &mut packet,
                &mut seq,
            ));
            stop.store(true, Ordering::Relaxed);
            worker.join().unwrap();
        });
    }
    let raw50 = median(&raw.p50);
    let raw99 = median(&raw.p99);
    say!(
        out,
        "\n(a) one-way latency on loopback, µs ({SAMPLES} packets of {} B per path per run)",
        packet.len()
    );
    say!(
        out,
        "    path                                   p50      p99   added p50  added p99"
    );
    say!(
        out,
        "    raw UDP, client -> socket          {raw50:8.2} {raw99:8.2}"
    );
    for (name, path) in [
        ("raw forwarder thread (recv/send_to)", &mut forwarder),
        ("net proxy node (busy-poll)        ", &mut proxy),
    ] {
        let (p50, p99) = (median(&path.p50), median(&path.p99));
        say!(
            out,
            "    {name} {p50:8.2} {p99:8.2} {:+10.2} {:+10.2}   lost {}",
            p50 - raw50,
            p99 - raw99,
            path.lost
        );
    }
    let added = median(&proxy.p50) - raw50;
    say!(
        out,
        "    goal: proxy hop adds <= 1 µs at p50 over raw: {} (added {added:.2} µs)",
        if added <= 1.0 { "MET" } else { "NOT MET" }
    );
}

fn throughput(runs: usize, out: &mut String) {
    const FANOUT: u32 = 10;
    let mut packet = packet();
    let mut ratios = Vec::new();
    let (mut proxy_rates, mut raw_rates) = (Vec::new(), Vec::new());
    let (mut offered_rates, mut received_rates) = (Vec::new(), Vec::new());
    // Children: bound but never read (both paths pay the same delivery-and-drop cost).
    let children: Vec<UdpSocket> = (0..FANOUT).map(|_| loopback()).collect();
    let child_addrs: Vec<SocketAddr> = children.iter().map(|c| c.local_addr().unwrap()).collect();
    let sender = loopback();
    let mut seq = 0u64;
    for _ in 0..runs {
        // Raw baseline: one thread on the proxy's core, 10-way sendmmsg of the same payload.
        let raw_socket = loopback();
        let mut addrs = vec![
            sender.local_addr().unwrap(),
            raw_socket.local_addr().unwrap(),
        ];
        addrs.extend(&child_addrs);
        let book = AddrBook::new(addrs);
        let destinations: Vec<NodeId> = (2..2 + FANOUT).map(NodeId).collect();
        let raw_rate = thread::scope(|s| {
            s.spawn(|| {
                pin(HOP_CORE);
                let mut batch = SendBatch::new();
                let mut packet = packet.clone();
                let (mut fanouts, mut n) = (0u64, 0u64);
                let start = now_ns();
                let end = start + (WARMUP + MEASURE).as_nanos() as u64;
                let mut measured_from = (start, 0);
                loop {
                    n += 1;
                    stamp(&mut packet, n, 0);
                    batch.send(&raw_socket, &packet, &book, &destinations);
                    fanouts += 1;
                    if n % 64 == 0 {
                        let now = now_ns();
                        if measured_from.1 == 0 && now - start >= WARMUP.as_nanos() as u64 {
                            measured_from = (now, fanouts);
                        }
                        if now >= end {
                            let secs = (now - measured_from.0) as f64 / 1e9;
                            return (fanouts - measured_from.1) as f64 / secs;
                        }
                    }
                }
            })
            .join()
            .unwrap()
        });

        // The proxy: fed distinct packets from core 0 at 1.5 times the raw rate (more than it
        // can forward).
        let proxy_socket = loopback();
        let proxy_addr = proxy_socket.local_addr().unwrap();
        let mut addrs = vec![sender.local_addr().unwrap(), proxy_addr];
        addrs.extend(&child_addrs);
        let book = Arc::new(AddrBook::new(addrs));
        let stop = AtomicBool::new(false);
        let (packets, copies, received, secs) = thread::scope(|s| {
            let worker =
                s.spawn(|| run_proxy(plan(FANOUT), book, proxy_socket, Some(WARMUP), &stop));
            let end = now_ns() + (WARMUP + MEASURE).as_nanos() as u64;
            pin(CLIENT_CORE);
            // Bursts every millisecond, sleeping in between: the sender leaves core 0 to
            // whatever else runs there instead of spinning.
            let rate = OFFERED_OVER_RAW * raw_rate;
            let start = now_ns();
            let mut offered = 0u64;
            // Offered over the proxy's measuring window (after the warm-up), as received is.
            let measure_from = start + WARMUP.as_nanos() as u64;
            let mut offered_before: Option<(u64, u64)> = None;
            while now_ns() < end {
                if offered_before.is_none() && now_ns() >= measure_from {
                    offered_before = Some((now_ns(), offered));
                }
                let due = ((now_ns() - start) as f64 / 1e9 * rate) as u64;
                for _ in 0..due.saturating_sub(offered) {
                    seq += 1;
                    stamp(&mut packet, seq, 0);
                    let _ = sender.send_to(&packet, proxy_addr);
                    offered += 1;
                }
                thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Relaxed);
            let (from, before) = offered_before.unwrap_or((start, 0));
            let secs = (now_ns() - from) as f64 / 1e9;
            offered_rates.push((offered - before) as f64 / secs);
            worker.join().unwrap()
        });
        received_rates.push(received as f64 / secs);
        let proxy_rate = packets as f64 / secs;
        assert!(
            copies >= packets * FANOUT as u64 * 9 / 10,
            "the proxy fans out"
        );
        proxy_rates.push(proxy_rate);
        raw_rates.push(raw_rate);
        ratios.push(proxy_rate / raw_rate);
    }
    let ratio = median(&ratios);
    say!(
        out,
        "\n(b) forwarding throughput, fan-out {FANOUT}, {} B packets, one core",
        packet.len()
    );
    say!(
        out,
        "    raw sendmmsg sender (10 copies/call)     {:>10.0} fan-outs/s",
        median(&raw_rates)
    );
    say!(
        out,
        "    net proxy node (busy-poll)               {:>10.0} packets/s  ({:.0} copies/s)",
        median(&proxy_rates),
        median(&proxy_rates) * FANOUT as f64
    );
    let (offered, received) = (median(&offered_rates), median(&received_rates));
    say!(
        out,
        "    proxy input after the warm-up: offered {offered:.0}/s, received {received:.0}/s ({})",
        if received < offered * 0.99 {
            "the proxy could not keep up: the rest overflowed its socket"
        } else {
            "it kept up"
        }
    );
    say!(
        out,
        "    ratio proxy / raw: {ratio:.2}  (goal >= 0.8: {})",
        if ratio >= 0.8 { "MET" } else { "NOT MET" }
    );
}
