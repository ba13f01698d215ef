//! `jasper up`: a whole exchange on this machine, on loopback.
//!
//! Plans a tree for N participants, lays it out on 127.0.0.1, and runs every node in this
//! process on the `net` runtime (epoll, one thread): the root with its sequencer and matching
//! engine, the proxies, and one gateway per participant (two with receiver hedging) running a
//! built-in strategy: every fourth participant makes a market, every fourth takes liquidity
//! with IOC orders, the rest send the paper's random limit-order workload with bursts. Live
//! progress every second; on Ctrl-C or after `--duration`, the same summary as `jasper sim`
//! (DESIGN.md §5 definitions) and results and plots in `--out`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use net::{Deployment, EventSink, Idle, Mode, Runtime, SocketOptions};
use proto::NodeConfig;
use proto::book::BookBuilder;
use proto::cluster::ClusterConfig;
use proto::order_queue::Discipline;
use proto::plan::{Plan, PlanConfig, Role, Shape};
use proto::sequencer::SequencerKind;
use proto::strategy::{MarketMaker, PaperWorkload, Taker, Watched, WorkloadConfig};
use proto::{Delivery, Event, Instant, NodeId, Release, Root, Strategy};
use sim::metrics::{Metrics, MetricsConfig, ReleaseSample};
use wire::Stock;

/// Arguments of `jasper up`.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// Market participants.
    #[arg(short = 'n', long, default_value_t = 20)]
    participants: u32,
    /// Sibling hedging factor H.
    #[arg(short = 'H', long = "hedge", default_value_t = 1)]
    hedge: u32,
    /// Tree depth (with --fanout; default: two hops, root -> proxies -> gateways, with a
    /// fan-out of ceil(sqrt(gateways)), so that even a small exchange shows the tree).
    #[arg(long, requires = "fanout")]
    depth: Option<u32>,
    /// Fan-out (with --depth).
    #[arg(long, requires = "depth")]
    fanout: Option<u32>,
    /// Two gateways per participant.
    #[arg(long)]
    receiver_hedging: bool,
    /// Release on receipt instead of at the deadline.
    #[arg(long)]
    no_hold: bool,
    /// Proxies pace orders by measured OWD (DESIGN.md §4). Off by default here: every node
    /// of `up` shares one thread, so the OWD a proxy measures is that loop's own latency
    /// (milliseconds on a busy machine), which pacing cannot lower. The pacer notices that
    /// its increases do not lower the OWD and backs off (`proto::pacing`, `futile_after`):
    /// a 12 s run with 20 participants sequenced every order sent (37,030), where the plain
    /// heuristic throttled the proxies and left 16% of the orders (4,849) short of the
    /// engine; but the OWD it reacts to is still the loop's, not the network's.
    #[arg(long)]
    pacing: bool,
    /// Proxy queue discipline.
    #[arg(long, value_enum, default_value_t = QueueArg::Loq)]
    discipline: QueueArg,
    /// Orders per second per workload participant (bursts double it).
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Sequencer delay d_s, microseconds (delay sequencer).
    #[arg(long, default_value_t = 400)]
    sequencer_delay_us: u64,
    /// The root's sequencer: delay (hold each order d_s) or global-fifo (merge the child
    /// streams by generation time, idle senders send heartbeat orders).
    #[arg(long, value_enum, default_value_t = SequencerArg::Delay)]
    sequencer: SequencerArg,
    /// Stop after this many seconds (default: on Ctrl-C).
    #[arg(long, value_parser = parse_seconds)]
    duration: Option<f64>,
    /// Seconds before measuring (clock sync and OWD reports settle).
    #[arg(long, default_value_t = 1.0, value_parser = parse_seconds)]
    warmup: f64,
    /// Node i listens on 127.0.0.1:(base-port + i).
    #[arg(long, default_value_t = 31_000)]
    base_port: u16,
    /// Seed of the strategies.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Results and plots go here.
    #[arg(long, default_value = "out/up")]
    out: PathBuf,
    /// Kill a proxy or a gateway (a fault drill): NODE@SECONDS after the start, e.g.
    /// `--kill 2@5` (repeatable; the plan printed first gives the node ids). A dead proxy's
    /// siblings take its market data over, its children fail over and resend their
    /// unanswered orders; the summary lists the failovers. A dead gateway's participant
    /// trades on through its twin with `--receiver-hedging` (and leaves the market without
    /// it); books and responses are then checked over the live gateways.
    #[arg(long, value_name = "NODE@S", value_parser = crate::sim::parse_kill)]
    kill: Vec<sim::scenario::Fault>,
    /// Drop this fraction of the datagrams every node receives, before the node sees them
    /// (loss in user space, seeded: a drill of retransmission, order retries and response
    /// gap requests), e.g. `--loss 0.01`.
    #[arg(long, default_value_t = 0.0, value_parser = parse_loss)]
    loss: f64,
}

/// The longest time flag the operator's commands take, seconds (a year): a run, a warm-up or
/// an interval longer than that is a typo, and beyond ~584 years the nanoseconds overflow.
pub(crate) const SECONDS_MAX: f64 = 365.0 * 86_400.0;

/// A time flag in seconds: finite, not negative, at most [`SECONDS_MAX`].
pub(crate) fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.0..=SECONDS_MAX).contains(&s) => Ok(s),
        Ok(s) => Err(format!("{s} is not a time from 0 to {SECONDS_MAX} seconds")),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

pub(crate) fn parse_loss(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..1.0).contains(&p) => Ok(p),
        Ok(p) => Err(format!("{p} is not a fraction in [0, 1)")),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum SequencerArg {
    Delay,
    GlobalFifo,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum QueueArg {
    Fifo,
    SimplePq,
    Loq,
}

const MID: u32 = 1_000_000;

pub(crate) fn run(args: &UpArgs) -> anyhow::Result<()> {
    let gateways = args.participants * if args.receiver_hedging { 2 } else { 1 };
    let shape = match (args.depth, args.fanout) {
        (Some(depth), Some(fanout)) => Shape::Explicit { depth, fanout },
        _ if gateways >= 4 => {
            let fanout = (gateways as f64).sqrt().ceil() as u32;
            Shape::Explicit { depth: 2, fanout }
        }
        _ => Shape::Heuristic,
    };
    let plan_config = PlanConfig {
        shape,
        hedge: args.hedge,
        receiver_hedging: args.receiver_hedging,
        ..PlanConfig::new(args.participants)
    };
    let plan = Plan::new(&plan_config)?;
    let mut node = NodeConfig {
        hold_and_release: !args.no_hold,
        ..NodeConfig::default()
    };
    node.discipline = match args.discipline {
        QueueArg::Fifo => Discipline::Fifo,
        QueueArg::SimplePq => Discipline::SimplePq,
        QueueArg::Loq => Discipline::Loq,
    };
    node.sequencer.delay = Duration::from_micros(args.sequencer_delay_us);
    node.pacing.enabled = args.pacing;
    node.sequencer.kind = match args.sequencer {
        SequencerArg::Delay => SequencerKind::Delay,
        SequencerArg::GlobalFifo => SequencerKind::GlobalFifo,
    };
    // (when, host index, node id): hosts are added in plan order.
    let mut kills = Vec::new();
    for fault in &args.kill {
        let sim::scenario::Fault::Kill { node: id, at_ns } = *fault else {
            bail!("--kill takes NODE@SECONDS");
        };
        let Some(index) = plan.nodes().iter().position(|s| s.id == NodeId(id)) else {
            bail!("--kill {id}: the plan has no node {id}");
        };
        let role = plan.nodes()[index].role;
        if role == Role::Root {
            bail!(
                "--kill {id}: node {id} is the root; jasper up kills proxies and gateways \
                 (the root's crash drill is `jasper node --journal`)"
            );
        }
        if kills.iter().any(|&(_, _, other)| other == id) {
            bail!("--kill {id}: node {id} is killed twice");
        }
        if let Some(duration) = args.duration.filter(|&d| at_ns >= secs(d)) {
            bail!(
                "--kill {id}@{}: the run lasts only {duration} s, so the drill would never happen",
                at_ns as f64 / 1e9
            );
        }
        kills.push((at_ns, index, id));
    }
    kills.sort_unstable();
    // Before the run, so that a results directory that cannot be made fails at once.
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let cluster = ClusterConfig::layout(&plan, node, &[], args.base_port)?;
    let deployment = Deployment::new(cluster, plan.clone());
    print!("{plan}");

    let mut runtime = Runtime::new(Mode::Epoll)?;
    let options = SocketOptions::default();
    let err = |e: String| anyhow::anyhow!(e);
    let quiet = Arc::new(AtomicBool::new(false));
    let mut books = Vec::new();
    for spec in plan.nodes() {
        match spec.role {
            Role::Root => {
                let root = deployment.root().map_err(err)?;
                let host = deployment.bind(root, Idle, &options)?;
                runtime.add(lossy(host, args.loss, args.seed))?;
            }
            Role::Proxy => {
                let proxy = deployment.proxy(spec.id).map_err(err)?;
                let host = deployment.bind(proxy, Idle, &options)?;
                runtime.add(lossy(host, args.loss, args.seed))?;
            }
            Role::Gateway => {
                let participant = spec.participant.expect("gateways serve participants");
                let book = Arc::new(Mutex::new(BookBuilder::new()));
                books.push((spec.id, book.clone()));
                let inner = strategy(participant, args)?;
                // A contradiction shows up as a book that differs from the root's at the end.
                let strategy = Box::new(Watched::new(inner, quiet.clone(), move |_, data| {
                    if let Ok(mut book) = book.lock() {
                        let _ = book.apply_packet(data);
                    }
                }));
                let gateway = deployment
                    .gateway(spec.id, Delivery::Strategy(strategy))
                    .map_err(err)?;
                let host = deployment.bind(gateway, Idle, &options)?;
                runtime.add(lossy(host, args.loss, args.seed))?;
            }
        }
    }
    println!(
        "exchange up: {} nodes on 127.0.0.1:{}..{}; Ctrl-C to stop",
        plan.nodes().len(),
        args.base_port,
        args.base_port as usize + plan.nodes().len() - 1
    );

    let stop = net::stop_on_signals()?;
    let gateways = plan.gateways().len() as u32;
    let mut sink = Live::new(gateways, net::clock::now_ns() + secs(args.warmup));
    sink.participant_of = plan.nodes().iter().map(|n| n.participant).collect();
    let started = net::clock::now_ns();
    let end = args.duration.map(|d| started + secs(d));
    let mut kills = kills
        .into_iter()
        .map(|(at, index, id)| (started + at, index, id))
        .peekable();
    let mut next_status = started + 1_000_000_000;
    loop {
        let mut until = end.map_or(next_status, |e| e.min(next_status));
        if let Some(&(at, _, _)) = kills.peek() {
            until = until.min(at);
        }
        let stats = runtime.run_until(until, stop, &mut sink)?;
        let now = net::clock::now_ns();
        while let Some((_, index, id)) = kills.next_if(|&(at, _, _)| at <= now) {
            runtime.kill(index)?;
            println!("killed node {id} at t={:.1}s", (now - started) as f64 / 1e9);
            if plan.nodes()[index].role == Role::Gateway {
                let root: &net::Host<Root, Idle> = runtime.host(0).context("the root is host 0")?;
                sink.retire(NodeId(id), root.node().next_packet_seq());
            }
        }
        let done = stats.stopped || end.is_some_and(|e| now >= e);
        if now >= next_status || done {
            println!("{}", sink.status(now - started));
            std::io::stdout().flush()?;
            next_status = now + 1_000_000_000;
        }
        if done {
            break;
        }
    }
    // Measure what the root published until now: each packet then has the whole drain below
    // to reach every gateway. The idle packets it sends while draining are not measured; the
    // last of them, cut off part way through the gateways when the drain ends, was counted
    // lost (1 in 890,513 on a 7-minute run).
    let root: &net::Host<Root, Idle> = runtime.host(0).context("the root is host 0")?;
    sink.stop_measuring(root.node().next_packet_seq());
    // Let the market settle: strategies stop trading, the last orders and market data drain,
    // then every gateway's book (rebuilt from the feed it released) must equal the root's.
    quiet.store(true, Ordering::Relaxed);
    let idle = AtomicBool::new(false);
    // Orders still queued at paced proxies can take seconds to drain after a busy run: wait
    // until every order sent has reached the engine (or 10 s, if some were lost), then let
    // the last market data be released.
    let drain_end = net::clock::now_ns() + 10_000_000_000;
    while sink.sequenced < sink.orders && net::clock::now_ns() < drain_end {
        runtime.run_for(Duration::from_millis(100), &idle, &mut sink)?;
    }
    runtime.run_for(Duration::from_millis(300), &idle, &mut sink)?;
    if sink.sequenced < sink.orders {
        println!(
            "{} orders sent never reached the engine (lost on the way up)",
            sink.orders - sink.sequenced
        );
    }
    let root: &net::Host<Root, Idle> = runtime.host(0).context("the root is host 0")?;
    let dead = |id: &NodeId| sink.retired.iter().any(|&(g, _)| g == id.0);
    books.retain(|(id, _)| !dead(id));
    let (equal, differ) = compare_books(root.node(), &books);
    // Every live gateway of a participant gets each of its responses; a dead one, what it
    // got before it died.
    let responses_sent = plan
        .gateways()
        .map(NodeId)
        .map(|g| match dead(&g) {
            true => sink.delivered_by.get(&g.0).copied().unwrap_or(0),
            false => plan
                .node(g)
                .and_then(|spec| spec.participant)
                .map_or(0, |p| root.node().responses_numbered(p)),
        })
        .sum();
    sink.responses_sent = responses_sent;
    sink.lost_on_purpose = runtime
        .hosts()
        .map(|h| h.net_counters().lost_on_purpose)
        .sum();
    for host in runtime.hosts() {
        let counters = host.node_counters();
        let repair = &mut sink.repair;
        match host.kind() {
            "gateway" => repair.gateway_requests += counters.retransmissions,
            "proxy" => {
                repair.proxy_packets += counters.retransmissions;
                repair.proxy_requests += counters.repair_asks;
            }
            _ => repair.root_packets += counters.retransmissions,
        }
    }
    sink.books = Some((equal, differ));
    sink.finish(&args.out)
}

/// How many gateways' rebuilt books equal the root's engine book, and the ids of the others.
fn compare_books(root: &Root, books: &[(NodeId, Arc<Mutex<BookBuilder>>)]) -> (usize, Vec<u32>) {
    let root_side = |side| root.depth(lob::SymbolIndex(0), side, usize::MAX);
    let (bids, asks) = (root_side(lob::Side::Buy), root_side(lob::Side::Sell));
    let mut equal = 0;
    let mut differ = Vec::new();
    for (id, book) in books {
        let book = book.lock().expect("no strategy panicked");
        let same = book.depth(0, wire::Side::Buy, usize::MAX) == bids
            && book.depth(0, wire::Side::Sell, usize::MAX) == asks;
        if same {
            equal += 1;
        } else {
            differ.push(id.0);
        }
    }
    (equal, differ)
}

/// `host` dropping `loss` of what it receives (`--loss`), drawn from its own generator
/// (seeded by `seed` and the node's id). Shared with `jasper node`.
pub(crate) fn lossy<N: net::Role, H: net::Hook<N>>(
    mut host: net::Host<N, H>,
    loss: f64,
    seed: u64,
) -> net::Host<N, H> {
    let id = net::HostView::id(&host);
    host.set_loss(loss, seed ^ 0x1055_0000_0000 ^ u64::from(id.0));
    host
}

fn secs(s: f64) -> u64 {
    Duration::from_secs_f64(s.max(0.0)).as_nanos() as u64
}

/// The built-in strategy of `participant`.
fn strategy(participant: u32, args: &UpArgs) -> anyhow::Result<Box<dyn Strategy>> {
    let stock = Stock::new("JSPR").expect("valid symbol");
    Ok(match participant % 4 {
        0 => Box::new(MarketMaker::new(stock, MID, 500, 10)),
        1 => Box::new(Taker::new(
            stock,
            MID,
            1_000,
            5,
            args.rate / 4.0,
            args.seed ^ participant as u64,
        )),
        _ => {
            let config = WorkloadConfig {
                mid: MID,
                rate_per_s: args.rate,
                burst_factor: 2.0,
                overlap: (1, 5),
                ..WorkloadConfig::default()
            };
            Box::new(
                PaperWorkload::new(config, args.seed, participant)
                    .map_err(|e| anyhow::anyhow!(e))?,
            )
        }
    })
}

/// Per-packet spans for the live status line.
#[derive(Clone, Copy, Debug)]
struct Span {
    send: u64,
    first: u64,
    last: u64,
    count: u32,
}

/// Everything the run measures: the summary's metrics (after warm-up), and one-second windows
/// for the status line.
struct Live {
    /// Gateways alive.
    gateways: u32,
    /// Gateways in the plan.
    gateways_planned: u32,
    measure_from: u64,
    metrics: Option<Metrics>,
    spans: BTreeMap<u64, Span>,
    window_oml: Vec<u64>,
    window_dws: Vec<u64>,
    window_packets: u64,
    window_orders: u64,
    /// Each node's participant, by node id (gateways only).
    participant_of: Vec<Option<u32>>,
    /// Orders sent, by (participant, client order id): with receiver hedging both gateways
    /// of a participant send each order, and it counts once.
    sent: BTreeSet<(u32, u64)>,
    window_sequenced: u64,
    window_matched: u64,
    orders: u64,
    sequenced: u64,
    matched: u64,
    responses: u64,
    /// Responses gateways gave up on (the root no longer held them).
    responses_skipped: u64,
    /// Who answered the gateways' gap requests, summed over every node at the end.
    repair: sim::report::RepairSummary,
    /// Responses the root sent (set at the end): to each live gateway every one of its
    /// participant's, to each dead one what it got.
    responses_sent: u64,
    /// Responses delivered, by gateway.
    delivered_by: BTreeMap<u32, u64>,
    /// Gateways killed (`--kill`), each with the first packet sent after its death.
    retired: Vec<(u32, u64)>,
    /// Datagrams dropped on purpose (`--loss`; set at the end).
    lost_on_purpose: u64,
    /// (watcher, watched) -> (failures detected, cleared).
    failures: BTreeMap<(u32, u32), (u64, u64)>,
    /// (gateway, silent parent, new parent) -> times it moved.
    /// Failovers by (gateway, from, to): how many, and the orders resent.
    parent_changes: BTreeMap<(u32, u32, u32), (u64, u64)>,
    /// Gateways whose rebuilt book equals the root's, and the ids of those that differ.
    books: Option<(usize, Vec<u32>)>,
}

impl Live {
    /// Gateway `gateway` died (`--kill`); `from_packet_seq` is the first packet sent after.
    fn retire(&mut self, gateway: NodeId, from_packet_seq: u64) {
        self.gateways = self.gateways.saturating_sub(1);
        self.retired.push((gateway.0, from_packet_seq));
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.retire(gateway.0, from_packet_seq);
        }
    }

    fn new(gateways: u32, measure_from: u64) -> Self {
        Self {
            gateways,
            gateways_planned: gateways,
            measure_from,
            metrics: None,
            spans: BTreeMap::new(),
            window_oml: Vec::new(),
            window_dws: Vec::new(),
            window_packets: 0,
            window_orders: 0,
            participant_of: Vec::new(),
            sent: BTreeSet::new(),
            window_sequenced: 0,
            window_matched: 0,
            orders: 0,
            sequenced: 0,
            matched: 0,
            responses: 0,
            responses_skipped: 0,
            repair: Default::default(),
            responses_sent: 0,
            delivered_by: BTreeMap::new(),
            retired: Vec::new(),
            lost_on_purpose: 0,
            failures: BTreeMap::new(),
            parent_changes: BTreeMap::new(),
            books: None,
        }
    }

    /// Packets from `end_packet_seq` on are not measured ([`Metrics::stop_at`]).
    fn stop_measuring(&mut self, end_packet_seq: u64) {
        if let Some(metrics) = self.metrics.as_mut() {
            let first = metrics.config().first_packet_seq;
            metrics.stop_at(end_packet_seq.max(first));
        }
    }

    fn on_release(&mut self, node: NodeId, now: u64, r: &Release) {
        // No clock error is injected here, so every node's local clock is true time.
        let span = self.spans.entry(r.packet_seq).or_insert(Span {
            send: r.send_time.as_nanos(),
            first: now,
            last: now,
            count: 0,
        });
        span.first = span.first.min(now);
        span.last = span.last.max(now);
        span.count += 1;
        if span.count >= self.gateways {
            let span = self.spans.remove(&r.packet_seq).expect("just seen");
            self.window_oml.push(span.last.saturating_sub(span.send));
            self.window_dws.push(span.last - span.first);
            self.window_packets += 1;
        }
        if now < self.measure_from {
            return;
        }
        let gateways = self.gateways_planned;
        let participant_of = &self.participant_of;
        let retired = &self.retired;
        let metrics = self.metrics.get_or_insert_with(|| {
            let mut metrics = Metrics::new(MetricsConfig {
                first_packet_seq: r.packet_seq + 1,
                ..MetricsConfig::new(gateways)
            });
            let participants = participant_of.iter().flatten().max().map_or(0, |p| p + 1);
            if participants < gateways {
                // Receiver hedging: also measure what each participant sees (the first of
                // its gateways).
                let of = participant_of
                    .iter()
                    .map(|p| p.unwrap_or(u32::MAX))
                    .collect();
                metrics.group_by_participant(of, participants);
            }
            for &(gateway, from) in retired {
                metrics.retire(gateway, from);
            }
            metrics
        });
        metrics.on_release(&ReleaseSample {
            receiver: node.0,
            packet_seq: r.packet_seq,
            send_x: r.send_time.as_nanos(),
            send_t: r.send_time.as_nanos(),
            received_x: r.received.as_nanos(),
            released_x: r.released.as_nanos(),
            received_t: r.received_local.as_nanos(),
            released_t: now,
            late: r.late,
            recovered: r.recovered,
        });
    }

    fn status(&mut self, elapsed_ns: u64) -> String {
        // Packets a gateway never completed within a second are not in the window.
        if let Some(&newest) = self.spans.keys().next_back() {
            self.spans.retain(|&seq, _| seq + 5_000 > newest);
        }
        let pct = |v: &mut Vec<u64>, p: usize| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            v.sort_unstable();
            v[(v.len() * p / 100).min(v.len() - 1)] as f64 / 1e3
        };
        let line = format!(
            "t={:>5.1}s  md {:>6} pkt/s  orders {:>6}/s  sequenced {:>6}/s  matched {:>5}/s  \
             OML p50 {:>6.1} p99 {:>6.1} µs  DWS p50 {:>5.1} p99 {:>6.1} µs",
            elapsed_ns as f64 / 1e9,
            self.window_packets,
            self.window_orders,
            self.window_sequenced,
            self.window_matched,
            pct(&mut self.window_oml, 50),
            pct(&mut self.window_oml, 99),
            pct(&mut self.window_dws, 50),
            pct(&mut self.window_dws, 99),
        );
        self.window_oml.clear();
        self.window_dws.clear();
        self.window_packets = 0;
        self.window_orders = 0;
        self.window_sequenced = 0;
        self.window_matched = 0;
        line
    }

    fn finish(mut self, out: &PathBuf) -> anyhow::Result<()> {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        println!("\nsummary (after the warm-up; DESIGN.md §5 definitions, true time):");
        let mut text = String::new();
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.finish();
            let p = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e3;
            let t = &metrics.truth;
            // Packets sent before a gateway was killed that it had not released (in flight to
            // it, or held for their deadline): lost by DESIGN.md §5's definition, but to the
            // kill, not the network.
            let held = metrics.lost_to_deaths();
            let lost_to_kills = if self.retired.is_empty() {
                String::new()
            } else {
                format!("; {}", sim::report::lost_to_kills(held))
            };
            text = format!(
                "packets {}  lost {} ({:.3}%{lost_to_kills})  late {}  MPS {:.0}\n\
                 OML (release)  p50 {:.1}  p90 {:.1}  p99 {:.1} µs\n\
                 OML (receipt)  p50 {:.1}  p90 {:.1}  p99 {:.1} µs\n\
                 DWS (release)  p50 {:.1}  p99 {:.1} µs   P(F) {:.1}% of packets within 1 µs\n\
                 \x20 (one thread runs every node here: the gateways due at a deadline release\n\
                 \x20 one after another, a few µs each, so DWS at release and P(F) measure\n\
                 \x20 this loop more than the tree; fewer participants, or `jasper sim`)\n\
                 DWS (receipt)  p50 {:.1}  p99 {:.1} µs\n\
                 holding time   p50 {:.1}  p99 {:.1} µs\n\
                 orders sent {}  sequenced {}  matched {}  responses sent {}  delivered {}  \
                 skipped {}\n",
                metrics.packets,
                metrics.lost(),
                metrics.loss_percent(),
                metrics.late_packets,
                metrics.mps(),
                p(&t.oml_release, 0.5),
                p(&t.oml_release, 0.9),
                p(&t.oml_release, 0.99),
                p(&t.oml_receipt, 0.5),
                p(&t.oml_receipt, 0.9),
                p(&t.oml_receipt, 0.99),
                p(&t.dws_release, 0.5),
                p(&t.dws_release, 0.99),
                metrics.fairness_percent(t),
                p(&t.dws_receipt, 0.5),
                p(&t.dws_receipt, 0.99),
                p(&t.holding, 0.5),
                p(&t.holding, 0.99),
                self.orders,
                self.sequenced,
                self.matched,
                self.responses_sent,
                self.responses,
                self.responses_skipped,
            );
            if let Some(mp) = metrics.participants.as_ref() {
                let (_, fair) = mp.fairness_percent();
                text.push_str(&format!(
                    "per participant (the first of its two gateways): OML (release) p50 {:.1}  \
                     p99 {:.1} µs  OML (receipt) p50 {:.1}  p99 {:.1} µs  P(F) {:.1}%  lost {}\n",
                    p(&mp.oml_release, 0.5),
                    p(&mp.oml_release, 0.99),
                    p(&mp.oml_receipt, 0.5),
                    p(&mp.oml_receipt, 0.99),
                    fair,
                    mp.lost,
                ));
            }
            if self.lost_on_purpose > 0 {
                text.push_str(&format!(
                    "loss drill: {} datagrams dropped on receipt (--loss)\n",
                    self.lost_on_purpose
                ));
            }
            if let Some(line) = self.repair.line() {
                text.push_str(&line);
                text.push('\n');
            }
            std::fs::write(
                out.join("cdf.csv"),
                sim::report::cdf_csv("jasper up", metrics),
            )?;
            sim::report::write_plots(out, "jasper up", metrics)?;
        } else {
            text.push_str("no packet was released after the warm-up: run longer (--duration)\n");
        }
        if let Some((equal, differ)) = &self.books {
            text.push_str(&format!(
                "books: {equal} of {} {}gateways rebuilt the root's book exactly from the feed{}\n",
                equal + differ.len(),
                if self.retired.is_empty() { "" } else { "live " },
                if differ.is_empty() {
                    String::new()
                } else {
                    format!("; differ: {differ:?}")
                }
            ));
        }
        for ((watcher, watched), (detected, cleared)) in &self.failures {
            text.push_str(&format!(
                "failure detection: node {watcher} found node {watched} silent {detected} time(s), \
                 heard again {cleared} time(s) (a stalled event loop on a busy machine looks the same)\n"
            ));
        }
        for ((node, from, to), (times, resent)) in &self.parent_changes {
            text.push_str(&format!(
                "parent failover: node {node} left node {from} for node {to} \
                 {times} time(s), resending {resent} unanswered order(s)\n"
            ));
        }
        print!("{text}");
        std::fs::write(out.join("summary.txt"), &text)?;
        println!("results in {}", out.display());
        Ok(())
    }
}

impl EventSink for Live {
    fn on_event(&mut self, node: NodeId, now: Instant, event: &Event) {
        let now = now.as_nanos();
        match event {
            // The runtime hands every node woken in one turn of its loop that turn's `now`, so
            // the gateways due at one deadline would all seem to release at the same instant;
            // they release one after another, and the clock read here says when this one did.
            Event::Released(r) => self.on_release(node, net::clock::now_ns().max(now), r),
            Event::OrderSent {
                client_order_id, ..
            } => {
                let participant = self
                    .participant_of
                    .get(node.0 as usize)
                    .copied()
                    .flatten()
                    .unwrap_or(node.0);
                if self.sent.insert((participant, *client_order_id)) {
                    self.orders += 1;
                    self.window_orders += 1;
                }
            }
            Event::OrderResponse { .. } => {
                self.responses += 1;
                *self.delivered_by.entry(node.0).or_default() += 1;
            }
            Event::ResponsesSkipped { count } => self.responses_skipped += count,
            Event::Sequenced(s) => {
                self.sequenced += 1;
                self.window_sequenced += 1;
                if s.filled > 0 {
                    self.matched += 1;
                    self.window_matched += 1;
                }
            }
            Event::FailureDetected { node: failed } => {
                self.failures.entry((node.0, failed.0)).or_default().0 += 1;
            }
            Event::FailureCleared { node: back } => {
                self.failures.entry((node.0, back.0)).or_default().1 += 1;
            }
            Event::ParentChanged { from, to, resent } => {
                let entry = self
                    .parent_changes
                    .entry((node.0, from.0, to.0))
                    .or_default();
                entry.0 += 1;
                entry.1 += u64::from(*resent);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use proto::{Event, Instant, NodeId, Release};
    use wire::ExchangeTime;

    use super::Live;

    /// Goal: the true time of a release is when the gateway made it. The runtime hands every
    /// node woken in one turn the turn's `now`; stamped with that, two gateways releasing
    /// one after another (here 2 ms apart) would count as a DWS of zero.
    #[test]
    fn a_release_is_stamped_when_it_happens_not_at_the_loops_turn() {
        let mut live = Live::new(2, u64::MAX);
        let turn = net::clock::now_ns();
        let release = Release {
            packet_seq: 7,
            send_time: ExchangeTime::from_nanos(turn),
            deadline: ExchangeTime::from_nanos(turn),
            received: ExchangeTime::from_nanos(turn),
            released: ExchangeTime::from_nanos(turn),
            received_local: Instant::from_nanos(turn),
            late: false,
            recovered: false,
        };
        let now = Instant::from_nanos(turn);
        net::EventSink::on_event(&mut live, NodeId(1), now, &Event::Released(release));
        std::thread::sleep(std::time::Duration::from_millis(2));
        net::EventSink::on_event(&mut live, NodeId(2), now, &Event::Released(release));
        assert_eq!(live.window_dws.len(), 1, "both gateways released packet 7");
        assert!(live.window_dws[0] >= 2_000_000, "{:?}", live.window_dws);
    }
}
