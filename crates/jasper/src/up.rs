//! `jasper up`: a whole exchange on this machine, on loopback.
//!
//! Plans a tree for N participants, lays it out on 127.0.0.1, and runs every node in this
//! process on `net` runtimes (epoll; one event loop, or two with `--threads 2` or four
//! cores, the proxies dealt out to them in turn, each gateway with its home proxy): the root
//! with its sequencer and matching
//! engine, the proxies, and one gateway per participant (two with receiver hedging) running a
//! built-in strategy: every fourth participant makes a market, every fourth takes liquidity
//! with IOC orders, the rest send the paper's random limit-order workload with bursts. Live
//! progress every second; on Ctrl-C or after `--duration`, the same summary as `jasper sim`
//! (DESIGN.md §5 definitions) and results and plots in `--out`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
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
use sim::metrics::{Mark, Metrics, MetricsConfig, ReleaseSample};
use wire::Stock;

use crate::spans::{Figures, Spans};

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
    /// Proxies pace orders by measured OWD (DESIGN.md §4). Off by default here: the nodes
    /// of `up` share one or two threads, so the OWD a proxy measures is those loops' latency
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
    /// Orders per second per workload participant, above 0 (bursts double it).
    #[arg(long, default_value_t = 200.0, value_parser = parse_positive_rate)]
    rate: f64,
    /// Sequencer delay d_s, microseconds (delay sequencer).
    #[arg(long, default_value_t = 400, value_parser = parse_delay_us)]
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
    /// Event loops (threads) to run the nodes on: the proxies are dealt out to them in
    /// turn, each gateway runs with its home proxy, and the root runs on the first (so no
    /// more loops than the widest layer of proxies has proxies).
    /// Default: two on a machine with four cores or more, else one. On loopback the kernel
    /// delivers a datagram in its sender's system call, so one loop pays for all of its
    /// fan-outs: 20 participants keep one loop ~70% busy, and a turn that meets a burst
    /// takes milliseconds. Two loops on two cores lower release latency by about a quarter
    /// but take ~70% more CPU, and they are far slower than one when something else runs.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: Option<u32>,
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

/// A positive number of seconds, at least a millisecond (a status line's or a silence's
/// interval: shorter ones print lines instead of running the nodes).
pub(crate) fn parse_interval(text: &str) -> Result<f64, String> {
    let s = parse_seconds(text)?;
    if s < 0.001 {
        return Err(format!("{s} is under a millisecond"));
    }
    Ok(s)
}

/// The highest rate flag the operator's commands take, per second (a hundred million: a
/// pacing interval of 10 ns; beyond, and `inf`, a workload sends an order every loop turn).
pub(crate) const RATE_MAX: f64 = 100_000_000.0;

/// A rate flag per second: finite, from 0 (none) to [`RATE_MAX`] (`nan` and negative rates
/// silently sent nothing, `inf` an order every loop turn).
pub(crate) fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (0.0..=RATE_MAX).contains(&r) => Ok(r),
        Ok(r) => Err(format!("{r} is not a rate from 0 to {RATE_MAX} per second")),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

/// [`parse_rate`] above 0 (up's workload needs orders to send: `--rate 0` failed after the
/// plan was printed, naming a burst factor the user never set).
fn parse_positive_rate(text: &str) -> Result<f64, String> {
    match parse_rate(text)? {
        0.0 => Err("0: the workload needs a rate above 0 orders per second".to_string()),
        r => Ok(r),
    }
}

/// A delay flag in microseconds, at most a node's longest duration
/// ([`proto::config::DURATION_MAX`]; beyond it the error named the cluster config's key, not
/// the flag).
pub(crate) fn parse_delay_us(text: &str) -> Result<u64, String> {
    let max = proto::config::DURATION_MAX.as_micros() as u64;
    match text.parse::<u64>() {
        Ok(us) if us <= max => Ok(us),
        Ok(us) => Err(format!("{us} is not a delay from 0 to {max} µs")),
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
    let gateways = args
        .participants
        .saturating_mul(if args.receiver_hedging { 2 } else { 1 });
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
    // Every node here reads this machine's one clock: there is no drift to follow, and the
    // error a sync can make is the loops' queueing, not the fit's nanoseconds. At the
    // deployment's rate (a pair a millisecond while fits move more than 20 ns, which on a
    // busy loopback is always) the probes and their replies were 43% of every datagram
    // sent; settled at 1 µs, a node slows to a pair every 8 ms within a second or two (and
    // three unanswered pairs, 24 ms, stay under `parent_timeout` for failover).
    node.clock.settled = Duration::from_micros(1);
    node.clock.probe_interval_max = Duration::from_millis(8);
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
    // A run that measures nothing writes no CDF or plots: the last run's must not stand
    // beside its summary as if they were its own.
    sim::report::remove_outputs(&args.out, sim::report::RUN_OUTPUTS)
        .with_context(|| format!("clearing the last run's results in {}", args.out.display()))?;
    let cluster = ClusterConfig::layout(&plan, node, &[], args.base_port)?;
    let deployment = Deployment::new(cluster, plan.clone());
    print!("{plan}");

    let threads = event_loops(&plan, args.threads, crate::machine::cores());
    let options = SocketOptions::default();
    let err = |e: String| anyhow::anyhow!(e);
    let quiet = Arc::new(AtomicBool::new(false));
    let mut books = Vec::new();
    // Each loop's hosts, bound here (so that a port in use fails before anything runs) and
    // added to their runtime on its own thread; `placed[id]` is (loop, index in its runtime).
    let mut loops: Vec<Vec<AddHost>> = (0..threads).map(|_| Vec::new()).collect();
    let mut placed: Vec<(usize, usize)> = Vec::new();
    for spec in plan.nodes() {
        let add: AddHost = match spec.role {
            Role::Root => add_host(&deployment, deployment.root().map_err(err)?, &options, args)?,
            Role::Proxy => {
                let proxy = deployment.proxy(spec.id).map_err(err)?;
                add_host(&deployment, proxy, &options, args)?
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
                add_host(&deployment, gateway, &options, args)?
            }
        };
        // Proxies are dealt out to the loops in turn, so that the H + 1 proxies that carry
        // a packet to a gateway (neighbours in their layer, RRPS or not) run on different
        // loops: a stalled loop then delays one copy of a packet, not all of them. Cut into
        // runs of neighbours instead, both copies of a quarter of the packets went through
        // one loop, and a stall of it let the next packet overtake them: the gateways asked
        // for the missing ones (5.3-5.7% of the packets with two CPU hogs beside, 5-8 in
        // ~34,000 without; none dealt out). A gateway runs with its home parent, where its
        // probes, OWD reports and orders go.
        let home = match spec.role {
            Role::Root => 0,
            Role::Proxy => spec.index as usize % threads,
            Role::Gateway => plan
                .home_parent(spec.id)
                .map_or(0, |parent| placed[parent.0 as usize].0),
        };
        placed.push((home, loops[home].len()));
        loops[home].push(add);
    }
    println!(
        "exchange up: {} nodes on 127.0.0.1:{}..{}, {threads} event loop{}; Ctrl-C to stop",
        plan.nodes().len(),
        args.base_port,
        args.base_port as usize + plan.nodes().len() - 1,
        if threads == 1 { "" } else { "s" },
    );
    if threads > 1 {
        for home in 0..threads {
            let ids: Vec<u32> = (0..placed.len() as u32)
                .filter(|&id| placed[id as usize].0 == home)
                .collect();
            println!("  event loop {home} runs nodes {}", id_ranges(&ids));
        }
    }

    let stop = net::stop_on_signals()?;
    let gateways = plan.gateways().len() as u32;
    let mut live = Live::new(gateways, net::clock::now_ns() + secs(args.warmup));
    live.participant_of = plan.nodes().iter().map(|n| n.participant).collect();
    live.threads = threads;
    let shared = Arc::new(Mutex::new(live));
    let mut sink = SharedLive(shared.clone());
    let started = net::clock::now_ns();
    let end = args.duration.map(|d| started + secs(d));
    let mut per_loop = vec![0; threads];
    let kills: Vec<Kill> = kills
        .into_iter()
        .map(|(at, index, id)| {
            let (home, index) = placed[index];
            per_loop[home] += 1;
            Kill {
                at: started + at,
                home,
                index,
                id,
                ordinal: per_loop[home],
            }
        })
        .collect();
    let mut adds = loops.into_iter();
    let mut runtime = Runtime::new(Mode::Epoll)?;
    for add in adds.next().expect("one loop at least") {
        add(&mut runtime)?;
    }
    let finish = Arc::new(AtomicBool::new(false));
    let workers: Vec<Worker> = adds
        .enumerate()
        .map(|(i, hosts)| {
            let home = i + 1;
            let kills = kills
                .iter()
                .filter(|k| k.home == home)
                .map(|k| (k.at, k.index))
                .collect();
            Worker::spawn(home, hosts, kills, finish.clone(), sink.clone())
        })
        .collect::<anyhow::Result<_>>()?;
    let mut kills = kills.into_iter().peekable();
    let mut next_status = started + 1_000_000_000;
    loop {
        let mut until = end.map_or(next_status, |e| e.min(next_status));
        if let Some(kill) = kills.peek() {
            until = until.min(kill.at);
        }
        let stats = runtime.run_until(until, stop, &mut sink)?;
        lock(&shared).ran(&stats);
        let now = net::clock::now_ns();
        while let Some(Kill {
            home,
            index,
            id,
            ordinal,
            ..
        }) = kills.next_if(|k| k.at <= now)
        {
            match home {
                0 => runtime.kill(index)?,
                // That loop kills it at the same time; the root's next packet is read below
                // only once it has, so that the gateway is expected to release every packet
                // sent before its death.
                _ => workers[home - 1].await_kills(ordinal)?,
            }
            let now = net::clock::now_ns();
            println!("killed node {id} at t={:.1}s", (now - started) as f64 / 1e9);
            if plan.nodes()[id as usize].role == Role::Gateway {
                let root: &net::Host<Root, Idle> = runtime.host(0).context("the root is host 0")?;
                lock(&shared).retire(NodeId(id), next_mark(root.node()));
            }
        }
        let done = stats.stopped || end.is_some_and(|e| now >= e);
        if now >= next_status || done {
            let window = lock(&shared).take_window();
            println!(
                "{}",
                window.line(now - started, |id| plan.nodes()[id as usize].name())
            );
            std::io::stdout().flush()?;
            next_status = now + 1_000_000_000;
        }
        if done || workers.iter().any(Worker::ended) {
            break;
        }
    }
    // Measure what the root published until now: each packet then has the whole drain below
    // to reach every gateway. The idle packets it sends while draining are not measured; the
    // last of them, cut off part way through the gateways when the drain ends, was counted
    // lost (1 in 890,513 on a 7-minute run).
    let root: &net::Host<Root, Idle> = runtime.host(0).context("the root is host 0")?;
    lock(&shared).stop_measuring(next_mark(root.node()));
    // Let the market settle: strategies stop trading, the last orders and market data drain,
    // then every gateway's book (rebuilt from the feed it released) must equal the root's.
    quiet.store(true, Ordering::Relaxed);
    let idle = AtomicBool::new(false);
    // Orders still queued at paced proxies can take seconds to drain after a busy run: wait
    // until every order sent has reached the engine (or 10 s, if some were lost), then let
    // the last market data be released.
    let drain_end = net::clock::now_ns() + 10_000_000_000;
    let unsequenced = || {
        let live = lock(&shared);
        live.orders - live.sequenced.min(live.orders)
    };
    while unsequenced() > 0
        && net::clock::now_ns() < drain_end
        && !workers.iter().any(Worker::ended)
    {
        let stats = runtime.run_for(Duration::from_millis(100), &idle, &mut sink)?;
        lock(&shared).ran(&stats);
    }
    let stats = runtime.run_for(Duration::from_millis(300), &idle, &mut sink)?;
    lock(&shared).ran(&stats);
    finish.store(true, Ordering::Relaxed);
    let mut tallies = tally(&runtime);
    for worker in workers {
        tallies.extend(worker.join()?);
    }
    drop(sink);
    let mut live = Arc::into_inner(shared)
        .expect("every loop has stopped")
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    if live.sequenced < live.orders {
        println!(
            "{} orders sent never reached the engine (lost on the way up{})",
            live.orders - live.sequenced,
            if args.kill.is_empty() {
                ""
            } else {
                "; a killed gateway's own orders in flight or queued when it died are not sent \
                 again, nor those a killed proxy held that its children had no time to resend"
            }
        );
    }
    let root: &net::Host<Root, Idle> = runtime.host(0).context("the root is host 0")?;
    let dead = |id: &NodeId| live.retired.iter().any(|&(g, _)| g == id.0);
    books.retain(|(id, _)| !dead(id));
    let (equal, differ) = compare_books(root.node(), &books);
    // Every live gateway of a participant gets each of its responses; a dead one, what it
    // got before it died.
    let responses_sent = plan
        .gateways()
        .map(NodeId)
        .map(|g| match dead(&g) {
            true => live.delivered_by.get(&g.0).copied().unwrap_or(0),
            false => plan
                .node(g)
                .and_then(|spec| spec.participant)
                .map_or(0, |p| root.node().responses_numbered(p)),
        })
        .sum();
    live.responses_sent = responses_sent;
    for tally in &tallies {
        live.lost_on_purpose += tally.lost_on_purpose;
        let repair = &mut live.repair;
        match tally.kind {
            "gateway" => repair.gateway_requests += tally.retransmissions,
            "proxy" => {
                repair.proxy_packets += tally.retransmissions;
                repair.proxy_requests += tally.repair_asks;
            }
            _ => repair.root_packets += tally.retransmissions,
        }
    }
    live.books = Some((equal, differ));
    live.finish(&args.out)
}

/// Event loops for `plan`: `asked` (`--threads`) or [`default_threads`], but no more than
/// the widest layer of proxies has proxies, for a loop beyond that would run no node
/// (gateways run with their home proxy, the root on the first loop).
fn event_loops(plan: &Plan, asked: Option<u32>, cores: usize) -> usize {
    let widest = (1..plan.depth())
        .map(|layer| plan.layer(layer).len())
        .max()
        .unwrap_or(0);
    asked
        .map_or_else(|| default_threads(cores), |t| t as usize)
        .min(widest.max(1))
}

/// Event loops by default on a machine of `cores`: two with four cores or more, else one.
///
/// On this project's 2-core VM (20 participants, 15 s, medians of 3 interleaved runs), two
/// loops against one: release OML p50 ~385 against 559 µs, p99 ~10.5 against 14.7 ms, but
/// ~17 against 10.0 s of CPU time (a datagram to a loop asleep on the other core wakes
/// it). Beside two CPU hogs, two loops are far slower: release OML p50 3.0-4.0 ms against
/// 0.42-0.43 ms for one (8 participants with receiver hedging), since either loop's stalls
/// raise every gateway's deadline.
fn default_threads(cores: usize) -> usize {
    if cores >= 4 { 2 } else { 1 }
}

/// Sorted node ids as ranges: `0-1, 3, 7-9`.
fn id_ranges(ids: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == id => *last = id,
            _ => runs.push((id, id)),
        }
    }
    runs.iter()
        .map(|&(first, last)| match first == last {
            true => first.to_string(),
            false => format!("{first}-{last}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `--kill` drill as the loops see it.
struct Kill {
    /// True time.
    at: u64,
    /// The loop that runs the node, and the node's index in that loop's runtime.
    home: usize,
    index: usize,
    id: u32,
    /// Kills of that loop up to this one.
    ordinal: usize,
}

/// Adds one bound host to the runtime of the thread that runs it.
type AddHost = Box<dyn FnOnce(&mut Runtime) -> std::io::Result<usize> + Send>;

/// Binds `node`'s socket now, dropping `--loss` of what it receives, and adds it to a
/// runtime later.
fn add_host<N: net::Role + Send>(
    deployment: &Deployment,
    node: N,
    options: &SocketOptions,
    args: &UpArgs,
) -> std::io::Result<AddHost> {
    let host = lossy(deployment.bind(node, Idle, options)?, args.loss, args.seed);
    Ok(Box::new(move |runtime| runtime.add(host)))
}

/// What the summary needs of a host once its loop has stopped.
struct Tally {
    kind: &'static str,
    retransmissions: u64,
    repair_asks: u64,
    lost_on_purpose: u64,
}

fn tally(runtime: &Runtime) -> Vec<Tally> {
    runtime
        .hosts()
        .map(|host| Tally {
            kind: host.kind(),
            retransmissions: host.node_counters().retransmissions,
            repair_asks: host.node_counters().repair_asks,
            lost_on_purpose: host.net_counters().lost_on_purpose,
        })
        .collect()
}

/// An event loop on a thread of its own, running its share of the nodes until `finish` is
/// set, and killing its nodes of `--kill` on time.
struct Worker {
    thread: JoinHandle<anyhow::Result<Vec<Tally>>>,
    /// Kills done so far.
    killed: Arc<AtomicUsize>,
}

/// How long a worker's loop runs before it looks at `finish` (a sleeping loop does not see
/// the flag until it wakes).
const WORKER_SLICE_NS: u64 = 5_000_000;

impl Worker {
    /// Starts loop `home` with `hosts` and its `kills`, each (when, index in its runtime),
    /// sorted by time.
    fn spawn(
        home: usize,
        hosts: Vec<AddHost>,
        kills: Vec<(u64, usize)>,
        finish: Arc<AtomicBool>,
        mut sink: SharedLive,
    ) -> anyhow::Result<Self> {
        let killed = Arc::new(AtomicUsize::new(0));
        let done = killed.clone();
        let thread = std::thread::Builder::new()
            .name(format!("jasper-loop-{home}"))
            .spawn(move || -> anyhow::Result<Vec<Tally>> {
                let mut runtime = Runtime::new(Mode::Epoll)?;
                for add in hosts {
                    add(&mut runtime)?;
                }
                let mut kills = kills.into_iter().peekable();
                while !finish.load(Ordering::Relaxed) {
                    let mut until = net::clock::now_ns() + WORKER_SLICE_NS;
                    if let Some(&(at, _)) = kills.peek() {
                        until = until.min(at);
                    }
                    let stats = runtime.run_until(until, &finish, &mut sink)?;
                    lock(&sink.0).ran(&stats);
                    let now = net::clock::now_ns();
                    while let Some((_, index)) = kills.next_if(|&(at, _)| at <= now) {
                        runtime.kill(index)?;
                        done.fetch_add(1, Ordering::Release);
                    }
                }
                Ok(tally(&runtime))
            })
            .context("starting an event loop thread")?;
        Ok(Self { thread, killed })
    }

    /// Whether the loop has stopped already: it failed (its error comes with [`Worker::join`]).
    fn ended(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits until this loop has done its first `kills` kills.
    fn await_kills(&self, kills: usize) -> anyhow::Result<()> {
        while self.killed.load(Ordering::Acquire) < kills {
            if self.ended() {
                bail!("an event loop stopped before its --kill drill");
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        Ok(())
    }

    /// Its hosts' tallies once `finish` is set, or what stopped it.
    fn join(self) -> anyhow::Result<Vec<Tally>> {
        match self.thread.join() {
            Ok(result) => result,
            Err(_) => bail!("an event loop thread panicked"),
        }
    }
}

/// The one [`Live`] every loop reports to.
#[derive(Clone)]
struct SharedLive(Arc<Mutex<Live>>);

impl EventSink for SharedLive {
    fn on_event(&mut self, node: NodeId, now: Instant, event: &Event) {
        let now = now.as_nanos();
        // The runtime hands every node woken in one turn of its loop that turn's `now`, so
        // the gateways due at one deadline would all seem to release at the same instant;
        // they release one after another, and the clock read as the event comes says when
        // this one did. Read before the lock, which another loop may hold; other events
        // keep their turn's time.
        let stamp = match event {
            Event::Released(_) => net::clock::now_ns().max(now),
            _ => now,
        };
        lock(&self.0).record(node, stamp, event);
    }
}

/// The shared [`Live`], even if a loop panicked holding it (its counts stay usable).
/// Where the root's next packet starts (for [`Metrics::retire`] and [`Metrics::stop_at`]).
fn next_mark(root: &Root) -> Mark {
    Mark {
        packet_seq: root.next_packet_seq(),
        sequence: root.next_sequence(),
    }
}

fn lock(live: &Mutex<Live>) -> MutexGuard<'_, Live> {
    live.lock().unwrap_or_else(PoisonError::into_inner)
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

/// One second of the run, for the status line (sorted outside the lock the loops share).
/// OML and DWS are per message (DESIGN.md §5): each packet's value with its message count.
struct Window {
    figures: Figures,
    orders: u64,
    sequenced: u64,
    matched: u64,
    lag: crate::node::Lag,
}

/// The summary's line of what each participant saw with receiver hedging (the first of its
/// two gateways; DESIGN.md §5's figures over participants).
pub(crate) fn participants_text(mp: &sim::metrics::Participants) -> String {
    let p = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e3;
    let (_, fair) = mp.fairness_percent();
    format!(
        "per participant (the first of its two gateways): OML (release) p50 {:.1}  p99 {:.1} µs  \
         OML (receipt) p50 {:.1}  p99 {:.1} µs  P(F) {:.1}%  lost {}\n",
        p(&mp.oml_release, 0.5),
        p(&mp.oml_release, 0.99),
        p(&mp.oml_receipt, 0.5),
        p(&mp.oml_receipt, 0.99),
        fair,
        mp.lost_messages,
    )
}

/// A summary's figures over one clock's histograms `h` of `metrics`, as `jasper up` and
/// `jasper watch` print them (DESIGN.md §5): messages, loss, MPS and packets; OML at
/// release and receipt; DWS at release with P(F); DWS at receipt; holding time. `lost_note`
/// goes inside the loss's brackets, `dws_note` (whole lines) after DWS at release.
pub(crate) fn figures_text(
    metrics: &Metrics,
    h: &sim::metrics::ClockHistograms,
    lost_note: &str,
    dws_note: &str,
) -> String {
    let p = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e3;
    format!(
        "messages {}  lost {} ({:.3}%{lost_note})  MPS {:.0}   in packets {} ({} idle, {} late)\n\
         OML (release)  p50 {:.1}  p90 {:.1}  p99 {:.1} µs\n\
         OML (receipt)  p50 {:.1}  p90 {:.1}  p99 {:.1} µs\n\
         DWS (release)  p50 {:.1}  p99 {:.1} µs   P(F) {:.1}% of messages within 1 µs\n\
         {dws_note}\
         DWS (receipt)  p50 {:.1}  p99 {:.1} µs\n\
         holding time   p50 {:.1}  p99 {:.1} µs\n",
        metrics.messages(),
        metrics.lost_messages(),
        metrics.loss_percent(),
        metrics.mps(),
        metrics.packets,
        metrics.idle_packets,
        metrics.late_packets,
        p(&h.oml_release, 0.5),
        p(&h.oml_release, 0.9),
        p(&h.oml_release, 0.99),
        p(&h.oml_receipt, 0.5),
        p(&h.oml_receipt, 0.9),
        p(&h.oml_receipt, 0.99),
        p(&h.dws_release, 0.5),
        p(&h.dws_release, 0.99),
        metrics.fairness_percent(h),
        p(&h.dws_receipt, 0.5),
        p(&h.dws_receipt, 0.99),
        p(&h.holding, 0.5),
        p(&h.holding, 0.99),
    )
}

impl Window {
    /// The status line; `name` names a gateway by node id.
    fn line(mut self, elapsed_ns: u64, name: impl Fn(u32) -> String) -> String {
        let figures = self.figures.text(name);
        format!(
            "t={:>5.1}s  md {:>6} msg/s  orders {:>6}/s  sequenced {:>6}/s  matched {:>5}/s  {}  \
             timers late {} (max {:.1} ms)",
            elapsed_ns as f64 / 1e9,
            self.figures.messages,
            self.orders,
            self.sequenced,
            self.matched,
            figures,
            self.lag.late,
            self.lag.max_ns as f64 / 1e6,
        )
    }
}

/// Orders [`Live`] remembers to count a twin's copy once: ~65 s of the default run's orders,
/// and ~1.3 s of 1000 participants' at 200 orders/s each (twins send an order microseconds
/// apart). Without a bound the set grew by ~4,000 entries a second, ~9 GB a day.
const SENT_REMEMBERED: usize = 1 << 18;

/// Everything the run measures: the summary's metrics (after warm-up), and one-second windows
/// for the status line.
struct Live {
    /// Gateways alive.
    gateways: u32,
    /// Gateways in the plan.
    gateways_planned: u32,
    measure_from: u64,
    metrics: Option<Metrics>,
    spans: Spans,
    window_figures: Figures,
    window_orders: u64,
    /// Each node's participant, by node id (gateways only).
    participant_of: Vec<Option<u32>>,
    /// Orders sent, by (participant, client order id): with receiver hedging both gateways
    /// of a participant send each order, and it counts once. The last [`SENT_REMEMBERED`]
    /// only, oldest first in `sent_order`: twins send an order within moments of each
    /// other, and a run of hours must not keep every order it ever sent.
    sent: BTreeSet<(u32, u64)>,
    sent_order: VecDeque<(u32, u64)>,
    window_sequenced: u64,
    window_matched: u64,
    orders: u64,
    sequenced: u64,
    matched: u64,
    responses: u64,
    /// Responses gateways gave up on (the root no longer held them).
    responses_skipped: u64,
    /// Orders gateways refused before their clocks had synced (never sent).
    refused: u64,
    /// Orders gateways refused for a full outbox (never sent; `order_retry` 0).
    refused_busy: u64,
    /// Who answered the gateways' gap requests, summed over every node at the end.
    repair: sim::report::RepairSummary,
    /// Responses the root sent (set at the end): to each live gateway every one of its
    /// participant's, to each dead one what it got.
    responses_sent: u64,
    /// Responses delivered, by gateway.
    delivered_by: BTreeMap<u32, u64>,
    /// Gateways killed (`--kill`), each with the first packet sent after its death.
    retired: Vec<(u32, Mark)>,
    /// Datagrams dropped on purpose (`--loss`; set at the end).
    lost_on_purpose: u64,
    /// (watcher, watched) -> (failures detected, cleared).
    failures: BTreeMap<(u32, u32), (u64, u64)>,
    /// (gateway, silent parent, new parent) -> times it moved.
    /// Failovers by (gateway, from, to): how many, and the orders resent.
    parent_changes: BTreeMap<(u32, u32, u32), (u64, u64)>,
    /// Gateways whose rebuilt book equals the root's, and the ids of those that differ.
    books: Option<(usize, Vec<u32>)>,
    /// Event loops running the nodes.
    threads: usize,
    /// How late the loops ran their nodes' timers, this status interval and the whole run.
    window_lag: crate::node::Lag,
    lag: crate::node::Lag,
}

impl Live {
    /// Gateway `gateway` died (`--kill`); `from` is the first packet sent after.
    fn retire(&mut self, gateway: NodeId, from: Mark) {
        self.gateways = self.gateways.saturating_sub(1);
        // The packets it alone held up are complete now.
        self.spans
            .close_complete(self.gateways, &mut self.window_figures);
        self.retired.push((gateway.0, from));
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.retire(gateway.0, from);
        }
    }

    fn new(gateways: u32, measure_from: u64) -> Self {
        Self {
            gateways,
            gateways_planned: gateways,
            measure_from,
            metrics: None,
            spans: Spans::default(),
            window_figures: Figures::default(),
            window_orders: 0,
            participant_of: Vec::new(),
            sent: BTreeSet::new(),
            sent_order: VecDeque::new(),
            window_sequenced: 0,
            window_matched: 0,
            orders: 0,
            sequenced: 0,
            matched: 0,
            responses: 0,
            responses_skipped: 0,
            refused: 0,
            refused_busy: 0,
            repair: Default::default(),
            responses_sent: 0,
            delivered_by: BTreeMap::new(),
            retired: Vec::new(),
            lost_on_purpose: 0,
            failures: BTreeMap::new(),
            parent_changes: BTreeMap::new(),
            books: None,
            threads: 1,
            window_lag: Default::default(),
            lag: Default::default(),
        }
    }

    /// `participant` sent order `client_order_id` (through either of its gateways).
    fn order_sent(&mut self, participant: u32, client_order_id: u64) {
        let key = (participant, client_order_id);
        if !self.sent.insert(key) {
            return;
        }
        self.orders += 1;
        self.window_orders += 1;
        self.sent_order.push_back(key);
        if self.sent_order.len() > SENT_REMEMBERED {
            let oldest = self.sent_order.pop_front().expect("over the bound");
            self.sent.remove(&oldest);
        }
    }

    /// Packets from `end` on are not measured ([`Metrics::stop_at`]).
    fn stop_measuring(&mut self, end: Mark) {
        // The first measured packet is the one after the first release seen: the root had
        // sent that release's packet, so its next packet is never before the first measured.
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.stop_at(end);
        }
    }

    fn on_release(&mut self, node: NodeId, now: u64, r: &Release) {
        // No clock error is injected here, so every node's local clock is true time.
        let releases = self.spans.add(
            r.packet_seq,
            node.0,
            r.send_time.as_nanos(),
            now,
            r.messages,
            now,
        );
        if releases >= self.gateways {
            self.spans.close(r.packet_seq, &mut self.window_figures);
        }
        if now < self.measure_from {
            return;
        }
        let gateways = self.gateways_planned;
        let participant_of = &self.participant_of;
        let retired = &self.retired;
        let metrics = self.metrics.get_or_insert_with(|| {
            // The packet after the first release seen is the first measured one; where it
            // starts follows from where this one does and what it carries.
            let mut metrics = Metrics::new(MetricsConfig {
                first_packet_seq: r.packet_seq + 1,
                first_sequence: Some(r.sequence + u64::from(r.messages) + 1),
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
            sequence: r.sequence,
            messages: r.messages,
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

    /// A loop's run (its timers' lag).
    fn ran(&mut self, stats: &net::RunStats) {
        self.window_lag.add(stats);
        self.lag.add(stats);
    }

    /// The status line's one-second window, emptied for the next.
    fn take_window(&mut self) -> Window {
        // Packets a gateway never completed within a second are not in the window.
        self.spans.expire(net::clock::now_ns(), 1_000_000_000);
        Window {
            figures: std::mem::take(&mut self.window_figures),
            orders: std::mem::take(&mut self.window_orders),
            sequenced: std::mem::take(&mut self.window_sequenced),
            matched: std::mem::take(&mut self.window_matched),
            lag: std::mem::take(&mut self.window_lag),
        }
    }

    fn finish(mut self, out: &PathBuf) -> anyhow::Result<()> {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        println!("\nsummary (after the warm-up; DESIGN.md §5 definitions, true time):");
        let mut text = String::new();
        // Measuring began at the warm-up's end; a run that ended then measured nothing
        // (figures of 0 µs would read as measured).
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.finish();
        }
        if let Some(metrics) = self.metrics.as_mut().filter(|m| m.messages() > 0) {
            let t = &metrics.truth;
            // Messages sent before a gateway was killed that it had not released (in flight
            // to it, or held for their deadline): lost by DESIGN.md §5's definition, but to
            // the kill, not the network.
            let held = metrics.lost_to_deaths();
            let lost_to_kills = if self.retired.is_empty() {
                String::new()
            } else {
                format!("; {}", sim::report::lost_to_kills(held))
            };
            let threads = match self.threads {
                1 => "one event loop runs".to_string(),
                n => format!("{n} event loops run"),
            };
            text = figures_text(
                metrics,
                t,
                &lost_to_kills,
                &format!(
                    "  ({threads} every node here: the gateways of a loop due at a deadline\n  \
                     release one after another, a few µs each, so DWS at release and P(F)\n  \
                     measure the loops more than the tree; fewer participants, or `jasper sim`)\n"
                ),
            );
            text.push_str(&format!(
                "orders sent {}  sequenced {}  matched {}  responses sent {}  delivered {}  \
                 skipped {}  (refused before the gateway's clock synced {}{})\n",
                self.orders,
                self.sequenced,
                self.matched,
                self.responses_sent,
                self.responses,
                self.responses_skipped,
                self.refused,
                match self.refused_busy {
                    0 => String::new(),
                    n => format!(", for a full outbox {n}"),
                },
            ));
            if let Some(mp) = metrics.participants.as_ref() {
                text.push_str(&participants_text(mp));
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
        let lag = &self.lag;
        text.push_str(&format!(
            "event loops: {} timers, {} of them a millisecond or more late, the latest {:.1} ms \
             (a loop busy with other nodes' datagrams, or not running: every node of a loop \
             waits for it)\n",
            lag.wakeups,
            lag.late,
            lag.max_ns as f64 / 1e6
        ));
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

impl Live {
    /// `node` raised `event`, a release at true time `at` ([`SharedLive`] stamps it).
    fn record(&mut self, node: NodeId, at: u64, event: &Event) {
        match event {
            Event::Released(r) => self.on_release(node, at, r),
            Event::OrderSent {
                client_order_id, ..
            } => {
                let participant = self
                    .participant_of
                    .get(node.0 as usize)
                    .copied()
                    .flatten()
                    .unwrap_or(node.0);
                self.order_sent(participant, *client_order_id);
            }
            Event::OrderResponse { .. } => {
                self.responses += 1;
                *self.delivered_by.entry(node.0).or_default() += 1;
            }
            Event::ResponsesSkipped { count } => self.responses_skipped += count,
            Event::OrderRefused { reason, .. } => match reason {
                wire::order::RejectReason::Busy => self.refused_busy += 1,
                _ => self.refused += 1,
            },
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
    use std::sync::{Arc, Mutex};

    use proto::{Event, Instant, NodeId, Release};
    use wire::ExchangeTime;

    use super::{Live, SharedLive};

    /// Goal: a twin's copy of an order counts once, and the memory of orders sent stays
    /// bounded however long the run.
    #[test]
    fn orders_count_once_and_are_remembered_a_bounded_while() {
        let mut live = Live::new(2, u64::MAX);
        live.order_sent(3, 1);
        live.order_sent(3, 1);
        live.order_sent(4, 1);
        assert_eq!(live.orders, 2, "participant 3's twins sent order 1 once");
        for id in 2..(super::SENT_REMEMBERED as u64 + 100) {
            live.order_sent(3, id);
        }
        assert_eq!(live.sent.len(), super::SENT_REMEMBERED);
        assert_eq!(live.sent_order.len(), super::SENT_REMEMBERED);
        assert_eq!(live.orders, super::SENT_REMEMBERED as u64 + 100);
        let newest = super::SENT_REMEMBERED as u64 + 99;
        live.order_sent(3, newest);
        assert_eq!(
            live.orders,
            super::SENT_REMEMBERED as u64 + 100,
            "still counted once"
        );
    }

    /// Goal: no loop runs nothing. Method: 8 participants in `up`'s `<2,3>` have 3 proxies,
    /// 2 participants (the heuristic's `<1,2>`) have none.
    #[test]
    fn loops_are_no_more_than_the_widest_layer_of_proxies() {
        use proto::plan::{Plan, PlanConfig, Shape};
        let shape = Shape::Explicit {
            depth: 2,
            fanout: 3,
        };
        let eight = Plan::new(&PlanConfig {
            shape,
            ..PlanConfig::new(8)
        })
        .expect("a plan");
        let two = Plan::new(&PlanConfig::new(2)).expect("a plan");
        assert_eq!(eight.proxies().len(), 3, "{eight}");
        assert_eq!(two.proxies().len(), 0, "{two}");
        assert_eq!(super::event_loops(&eight, Some(8), 2), 3);
        assert_eq!(super::event_loops(&eight, Some(2), 2), 2);
        assert_eq!(super::event_loops(&eight, None, 2), 1);
        assert_eq!(super::event_loops(&eight, None, 16), 2);
        assert_eq!(super::event_loops(&two, Some(2), 2), 1);
    }

    #[test]
    fn node_ids_print_as_ranges() {
        assert_eq!(super::id_ranges(&[]), "");
        assert_eq!(super::id_ranges(&[4]), "4");
        assert_eq!(super::id_ranges(&[0, 1, 3, 7, 8, 9]), "0-1, 3, 7-9");
    }

    #[test]
    fn the_workload_rate_is_above_zero() {
        assert_eq!(super::parse_positive_rate("200"), Ok(200.0));
        assert!(
            super::parse_positive_rate("0")
                .unwrap_err()
                .contains("above 0")
        );
        assert!(super::parse_positive_rate("-1").is_err());
    }

    /// Two loops only where they do not compete with each other and the kernel for two
    /// cores.
    #[test]
    fn two_loops_by_default_from_four_cores() {
        let threads: Vec<usize> = (0..=8).map(super::default_threads).collect();
        assert_eq!(threads, [1, 1, 1, 1, 2, 2, 2, 2, 2]);
    }

    /// Goal: the true time of a release is when the gateway made it. The runtime hands every
    /// node woken in one turn the turn's `now`; stamped with that, two gateways releasing
    /// one after another (here 2 ms apart) would count as a DWS of zero.
    #[test]
    fn a_release_is_stamped_when_it_happens_not_at_the_loops_turn() {
        let shared = Arc::new(Mutex::new(Live::new(2, u64::MAX)));
        let mut sink = SharedLive(shared.clone());
        let turn = net::clock::now_ns();
        let release = Release {
            packet_seq: 7,
            sequence: 20,
            messages: 1,
            send_time: ExchangeTime::from_nanos(turn),
            deadline: ExchangeTime::from_nanos(turn),
            received: ExchangeTime::from_nanos(turn),
            released: ExchangeTime::from_nanos(turn),
            received_local: Instant::from_nanos(turn),
            late: false,
            recovered: false,
            snapshot: false,
        };
        let now = Instant::from_nanos(turn);
        net::EventSink::on_event(&mut sink, NodeId(1), now, &Event::Released(release));
        std::thread::sleep(std::time::Duration::from_millis(2));
        net::EventSink::on_event(&mut sink, NodeId(2), now, &Event::Released(release));
        let live = super::lock(&shared);
        let dws = live.window_figures.dws();
        assert_eq!(dws.len(), 1, "both gateways released packet 7");
        assert!(dws[0].0 >= 2_000_000, "{dws:?}");
    }
}
