//! `jasper node`: run one node (or several, or all) of a cluster config over real UDP.
//!
//! The nodes are the unchanged `proto` nodes, driven by the `net` runtime. The root publishes
//! its matching engine's market data and, for load, a synthetic feed of ITCH Add Orders at
//! `--rate` messages per second (0: none), for a stock of its own (`JASPER`, locate 65,535)
//! and with references of its own, so that a participant's book rebuilt from the feed sees
//! no reference twice. Gateways record every release.
//!
//! Output, one line each, `key=value` fields (tests parse them):
//!
//! - `ready nodes=… pid=…` once every socket is bound;
//! - `event node=… <kind> …` for failure detection, parent changes, gap skips and book
//!   snapshots, as they happen;
//! - `status t=…` every `--status-interval` seconds, ending with how late the loop ran its
//!   nodes' timers over the interval (`timers=… timers_late=… timer_lag_max_ms=…`, late: a
//!   millisecond or more), and a `warning: this process's loop ran a timer … late …` line
//!   after it when one came a `heartbeat_timeout` late or more: the process runs more nodes
//!   than one loop carries at their load (siblings then take each other for dead);
//!   `warning: node … got … datagram(s) from addresses its config does not have …` once a
//!   node, naming the first (a node running another config), and `warning: node …'s clock
//!   has not synced after 5 s: its parent … does not answer its probes …` once a proxy or
//!   gateway (its parent down, or running another config); without status lines, these at
//!   the end; and at a status line, `warning: N gateway(s) released nothing since the last
//!   status line (…)` when the stream stopped reaching gateways that had released before
//!   (the root sends an idle packet every millisecond: the root down or paused, or every
//!   path cut), then `event stream_resumed gateways=… count=…` when it came back;
//! - `summary node=… role=…` per node at the end (the root's `feed_messages` are its
//!   `--rate` feed's, not the messages its engine published for orders; a proxy's and a
//!   gateway's give their
//!   `parent` then, a gateway's its `orders_resent` after failovers, `orders_retried` for
//!   want of an answer, `orders_unanswered` given up on (`orders_answered_late`: of those,
//!   the ones answered after all, executed) and `orders_refused` before its
//!   clock synced, with receiver hedging `orders_answered_early` (its twin had sent them:
//!   not sent again, answered at once) and `answers_unclaimed` (answers to its twin's orders
//!   its own strategy never asked for), `snapshots` of the book it got after joining late or
//!   skipping, `owd_p50_us`/`owd_p99_us` (DESIGN.md §5: receive − root send, exchange
//!   time) and `release_p50_us`/`release_p99_us` (release − root send: the OWD plus the
//!   holding time), `-` of nothing released), then
//!   one `total` line (with `--monitor`, the reports sent to it and those the socket
//!   refused) and one `loop timers=…` line, the timer fields over the whole run.
//!
//! With `--monitor ADDR`, the gateways of this process report every release to the
//! operator's monitor (`jasper watch`, [`net::monitor`]).
//!
//! With `--orders R`, every gateway's participant trades the paper's workload at R orders/s
//! (responses counted in its summary; `--acks FILE` lists every response received). With
//! `--journal`, `--dump-state FILE` writes the root's state (`Root::state`) at exit, for
//! tests that compare it with a replay of the journal.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use net::{Deployment, EventSink, Hook, Idle, Mode, NodeClock, Runtime, SocketOptions};
use proto::plan::Role as PlanRole;
use proto::{Delivery, DropReason, Event, Gateway, Instant, NodeId, Proxy, Root};
use wire::itch::AddOrder;
use wire::{Side, Stock};

/// Messages the feed publishes in one turn at most (a burst after a stall is spread out).
const FEED_TURN_MESSAGES_MAX: u64 = 512;
/// Release OWD samples a gateway keeps for its percentiles.
const OWD_SAMPLES_MAX: usize = 1 << 20;

/// Arguments of `jasper node`.
#[derive(Debug, Args)]
pub(crate) struct NodeArgs {
    /// The cluster config `jasper plan` wrote.
    #[arg(long)]
    pub(crate) config: PathBuf,
    /// The node(s) to run, by name or id (comma-separated: one process, one epoll set).
    #[arg(long, value_delimiter = ',', required_unless_present = "all")]
    pub(crate) id: Vec<String>,
    /// Run every node of the config in this process.
    #[arg(long, conflicts_with = "id")]
    pub(crate) all: bool,
    /// Stop after this many seconds (default: on Ctrl-C or SIGTERM).
    #[arg(long, value_parser = crate::up::parse_seconds)]
    pub(crate) duration: Option<f64>,
    /// Spin on the sockets instead of sleeping in epoll (burns a core).
    #[arg(long)]
    pub(crate) busy_poll: bool,
    /// Pin the process's loop to this CPU core.
    #[arg(long)]
    pub(crate) pin: Option<usize>,
    /// Run the loop in the real-time SCHED_FIFO class at this priority (1..=99; needs
    /// root): the host's other tasks can no longer preempt it. Use with epoll (the default),
    /// not with --busy-poll, which would starve the core.
    #[arg(long, conflicts_with = "busy_poll")]
    pub(crate) realtime: Option<u8>,
    /// Epoll mode: keep polling this many microseconds after work before sleeping (at most
    /// half the time), so a quick answer pays no scheduler wake-up.
    #[arg(long, default_value_t = 0)]
    pub(crate) spin_us: u64,
    /// Root: synthetic market-data messages per second [default: 5000].
    #[arg(long, value_parser = crate::up::parse_rate)]
    pub(crate) rate: Option<f64>,
    /// Root: publish due messages every this many microseconds (packing them into packets),
    /// 1 to 1,000,000 [default: 200].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) tick_us: Option<u64>,
    /// Root: seconds to wait before publishing (clock sync settles meanwhile) [default: 0.5].
    #[arg(long, value_parser = crate::up::parse_seconds)]
    pub(crate) warmup: Option<f64>,
    /// Root: stop publishing after this many seconds (idle packets go on).
    #[arg(long, value_parser = crate::up::parse_seconds)]
    pub(crate) publish_for: Option<f64>,
    /// Seconds between status lines, at least a millisecond (0: none).
    #[arg(long, default_value_t = 1.0, value_parser = parse_status_interval)]
    pub(crate) status_interval: f64,
    /// Root: journal every step to this file (group commit, fsync) and, if it exists,
    /// recover from it first, continuing the market-data stream without a gap or a repeat.
    /// Snapshots of the root's state go beside it, to FILE.snap: remove both to start a new
    /// root.
    #[arg(long)]
    pub(crate) journal: Option<PathBuf>,
    /// Root with `--journal`: fsync on a dedicated writer thread instead of the loop's.
    #[arg(long)]
    pub(crate) journal_writer_thread: bool,
    /// Root with `--journal`: write the root's state (`Root::state`: its snapshot without the
    /// held responses) to this file at exit.
    #[arg(long)]
    pub(crate) dump_state: Option<PathBuf>,
    /// Gateways: each participant trades the paper's workload at this many orders/s (0: the
    /// gateways only receive market data). A gateway with an `external` address in the
    /// cluster config forwards what it releases there instead (trust model 2: the
    /// participant's own program).
    #[arg(long, value_parser = crate::up::parse_rate)]
    pub(crate) orders: Option<f64>,
    /// Seed of the gateways' workloads.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Gateways: write every order response received to this file, one line each, as they
    /// come (flushed at every status line and at the end):
    /// `gateway participant client_order_id type order leaves_shares` (`type` the OUCH type,
    /// A R C E J; `order` the order whose state it changes: a cancel's original; and
    /// `leaves_shares` the shares still open after an execution, `E`, else 0).
    #[arg(long)]
    pub(crate) acks: Option<PathBuf>,
    /// Drop this fraction of the datagrams each node receives, before the node sees it (loss
    /// in user space, seeded by `--seed` and the node's id: a drill of the recovery paths on
    /// real hosts), e.g. `--loss 0.01`.
    #[arg(long, default_value_t = 0.0, value_parser = crate::up::parse_loss)]
    pub(crate) loss: f64,
    /// Gateways: report every release to the operator's monitor at this address
    /// (`jasper watch --listen ADDR`), which shows latency and fairness across every host
    /// live. Reports go between the event loop's turns (never between two gateways' releases
    /// of a packet), each release within ~10 ms, 28 to a datagram; no node waits for them.
    #[arg(long)]
    pub(crate) monitor: Option<std::net::SocketAddr>,
}

/// A release waits at most this long in a gateway's batch before its report goes to the
/// monitor.
const REPORT_FLUSH_AFTER: Duration = Duration::from_millis(10);

/// The root's synthetic feed by default: messages per second, the publishing tick (µs),
/// and the wait before publishing (s).
const FEED_RATE: f64 = 5_000.0;
const FEED_TICK_US: u64 = 200;
const FEED_WARMUP_S: f64 = 0.5;

/// The root's hook with a journal: the feed, then the journal driver.
type JournalChain = net::journal::Chain<Feed, net::journal::JournalHook>;

/// `--status-interval`: 0 (none), or at least a millisecond (a nanosecond's printed status
/// lines, not packets).
fn parse_status_interval(text: &str) -> Result<f64, String> {
    if crate::up::parse_seconds(text)? == 0.0 {
        return Ok(0.0);
    }
    crate::up::parse_interval(text).map_err(|e| format!("{e} (0 turns the lines off)"))
}

pub(crate) fn run(args: &NodeArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let deployment =
        Deployment::from_toml(&text).with_context(|| format!("in {}", args.config.display()))?;
    let ids = selected(args, &deployment)?;
    let runs_gateway = ids
        .iter()
        .any(|&id| deployment.role(id) == Some(PlanRole::Gateway));
    check_outputs(args, ids.contains(&deployment.plan().root()), runs_gateway)?;
    if let Some(core) = args.pin {
        net::pin_current_thread(core).with_context(|| format!("pinning to core {core}"))?;
    }
    let mode = if args.busy_poll {
        Mode::BusyPoll
    } else {
        Mode::Epoll
    };
    if let Some(priority) = args.realtime {
        net::set_realtime(priority)
            .with_context(|| format!("entering SCHED_FIFO at priority {priority}"))?;
    }
    let mut runtime = Runtime::new(mode)?;
    runtime.set_spin(Duration::from_micros(args.spin_us));
    let options = SocketOptions::default();
    for &id in &ids {
        add_node(&mut runtime, &deployment, id, args, &options)?;
    }
    let names: Vec<&str> = runtime.hosts().map(|h| h.name()).collect();
    println!("ready nodes={} pid={}", names.join(","), std::process::id());
    std::io::stdout().flush()?;

    let stop = net::stop_on_signals()?;
    let mut sink = Recorder::new(&deployment);
    if let Some(path) = &args.acks {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        sink.acks = Some(std::io::BufWriter::new(file));
    }
    if let Some(to) = args.monitor {
        // Each gateway reports from its own address (the watch takes a gateway's reports
        // from its host's address only).
        let gateways: Vec<(u32, std::net::SocketAddr)> = ids
            .iter()
            .filter(|&&id| deployment.role(id) == Some(proto::plan::Role::Gateway))
            .filter_map(|&id| deployment.entry(id).map(|e| (id.0, e.addr)))
            .collect();
        let reporter = net::monitor::Reporter::new(to, &gateways, REPORT_FLUSH_AFTER)
            .with_context(|| format!("opening a socket to the monitor at {to}"))?;
        sink.reporter = Some(reporter);
    }
    let started = net::clock::now_ns();
    let end = args
        .duration
        .map(|s| started.saturating_add(secs_to_nanos(s)));
    let interval = (args.status_interval > 0.0).then(|| secs_to_nanos(args.status_interval));
    let mut next_status = interval.map(|i| started.saturating_add(i));
    // Timer lag over the status interval and the whole run (see `Lag`).
    let heartbeat_timeout = deployment.config().node.heartbeat_timeout;
    let (mut lag, mut lag_total) = (Lag::default(), Lag::default());
    let mut checks = Checks::default();
    // With a monitor, the loop comes out every half `REPORT_FLUSH_AFTER` to send the reports
    // due, between turns: never in the middle of one packet's releases.
    let flush_every = sink
        .reporter
        .is_some()
        .then(|| secs_to_nanos(REPORT_FLUSH_AFTER.as_secs_f64() / 2.0));
    loop {
        let now = net::clock::now_ns();
        let until = [end, next_status, flush_every.map(|f| now + f)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(u64::MAX);
        let stats = runtime.run_until(until, stop, &mut sink)?;
        lag.add(&stats);
        lag_total.add(&stats);
        let now = net::clock::now_ns();
        if stats.stopped || end.is_some_and(|e| now >= e) {
            break;
        }
        if let Some(reporter) = sink.reporter.as_mut() {
            reporter.flush_due(now);
        }
        if let (Some(due), Some(i)) = (next_status, interval)
            && now >= due
        {
            println!(
                "{}{}",
                status_line(net::clock::elapsed(started, now), &runtime, &sink),
                lag.fields()
            );
            if let Some(warning) = lag.warning(heartbeat_timeout, runtime.len()) {
                println!("{warning}");
            }
            for warning in checks.warnings(&runtime, &deployment, now - started) {
                println!("{warning}");
            }
            for line in checks.stream(&sink, &deployment, now - started) {
                println!("{line}");
            }
            sink.flush_acks(args.acks.as_deref())?;
            lag = Lag::default();
            std::io::stdout().flush()?;
            next_status = Some(due + i * ((now - due) / i + 1));
        }
    }
    if let Some(reporter) = sink.reporter.as_mut() {
        reporter.flush();
    }
    // Without status lines, the warnings come once, at the end.
    if interval.is_none() {
        if let Some(warning) = lag_total.warning(heartbeat_timeout, runtime.len()) {
            println!("{warning}");
        }
        let elapsed = net::clock::now_ns() - started;
        for warning in checks.warnings(&runtime, &deployment, elapsed) {
            println!("{warning}");
        }
    }
    print_summary(
        &runtime,
        &sink,
        deployment.clock_of(deployment.plan().root()),
    );
    println!("loop{}", lag_total.fields());
    std::io::stdout().flush()?;
    sink.flush_acks(args.acks.as_deref())?;
    if let Some(path) = &args.dump_state {
        dump_state(&mut runtime, &mut sink, path)?;
        // Responses that came while the root's state was made durable.
        sink.flush_acks(args.acks.as_deref())?;
    }
    Ok(())
}

/// Writes the journaling root's state once every record it produced is durable (runs the
/// nodes on for up to 2 s until then), so that it equals a replay of the journal file.
fn dump_state(
    runtime: &mut Runtime,
    sink: &mut Recorder,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let index = (0..runtime.hosts().count())
        .find(|&i| runtime.host::<Root, JournalChain>(i).is_some())
        .context("--dump-state needs the root with --journal in this process")?;
    let idle = std::sync::atomic::AtomicBool::new(false);
    for _ in 0..2_000 {
        let root = runtime
            .host::<Root, JournalChain>(index)
            .context("the root")?
            .node();
        if let Some((produced, durable)) = root.journal_position()
            && produced == durable
        {
            std::fs::write(path, root.state())
                .with_context(|| format!("writing {}", path.display()))?;
            return Ok(());
        }
        runtime.run_for(Duration::from_millis(1), &idle, sink)?;
    }
    bail!("the root's journal never caught up with it; no state written")
}

/// Refuses, before anything runs, the flags that could only fail at exit: `--dump-state`
/// and `--journal-writer-thread` without a journaling root in this process, and an output
/// file (`--acks`, `--dump-state`) that is a directory or whose directory does not exist;
/// and the flags no node of this process would read (the root's feed flags without the
/// root, the gateways' without a gateway), which would otherwise be ignored without a word.
fn check_outputs(args: &NodeArgs, runs_root: bool, runs_gateway: bool) -> anyhow::Result<()> {
    let roots = [
        ("--rate", args.rate.is_some()),
        ("--tick-us", args.tick_us.is_some()),
        ("--warmup", args.warmup.is_some()),
        ("--publish-for", args.publish_for.is_some()),
    ];
    for (flag, given) in roots {
        if given && !runs_root {
            bail!(
                "{flag} is the root's: run the root in this process (--id with its name, or --all)"
            );
        }
    }
    for (flag, given) in [
        ("--orders", args.orders.is_some()),
        ("--acks", args.acks.is_some()),
        ("--monitor", args.monitor.is_some()),
    ] {
        if given && !runs_gateway {
            bail!("{flag} is the gateways': run a gateway in this process (--id, or --all)");
        }
    }
    for (flag, given) in [
        ("--dump-state", args.dump_state.is_some()),
        ("--journal-writer-thread", args.journal_writer_thread),
    ] {
        if given && args.journal.is_none() {
            bail!("{flag} needs --journal");
        }
        if given && !runs_root {
            bail!("{flag} needs the root in this process (--id with the root's name, or --all)");
        }
    }
    if args.journal.is_some() && !runs_root {
        bail!(
            "--journal is the root's: run the root in this process (--id with its name, or --all)"
        );
    }
    for (flag, path) in [("--acks", &args.acks), ("--dump-state", &args.dump_state)] {
        let Some(path) = path else { continue };
        if path.is_dir() {
            bail!("{flag} {}: a directory, not a file", path.display());
        }
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => std::path::Path::new("."),
        };
        if !parent.is_dir() {
            bail!(
                "{flag} {}: no directory {}",
                path.display(),
                parent.display()
            );
        }
    }
    Ok(())
}

fn secs_to_nanos(seconds: f64) -> u64 {
    Duration::from_secs_f64(seconds.max(0.0)).as_nanos() as u64
}

/// The node ids to run.
fn selected(args: &NodeArgs, deployment: &Deployment) -> anyhow::Result<Vec<NodeId>> {
    if args.all {
        return Ok((0..deployment.config().nodes.len() as u32)
            .map(NodeId)
            .collect());
    }
    let mut ids = Vec::with_capacity(args.id.len());
    for name in &args.id {
        let Some(entry) = deployment.find(name) else {
            bail!("no node {name:?} in {}", args.config.display());
        };
        if ids.contains(&NodeId(entry.id)) {
            bail!("node {name:?} named twice");
        }
        ids.push(NodeId(entry.id));
    }
    Ok(ids)
}

fn add_node(
    runtime: &mut Runtime,
    deployment: &Deployment,
    id: NodeId,
    args: &NodeArgs,
    options: &SocketOptions,
) -> anyhow::Result<()> {
    let err = |e: String| anyhow::anyhow!(e);
    match deployment.role(id).context("node not in the plan")? {
        PlanRole::Root => {
            let feed = Feed::new(args);
            match &args.journal {
                Some(path) => {
                    let node = deployment.config().node.clone();
                    let (root, mut journal) =
                        net::journal::JournalHook::open(path, deployment.plan().clone(), node)
                            .map_err(err)?;
                    if args.journal_writer_thread {
                        journal = journal.with_writer_thread().map_err(err)?;
                    }
                    let hook = net::journal::Chain(feed, journal);
                    runtime.add(lossy(deployment.bind(root, hook, options)?, args))?;
                }
                None => {
                    // A new stream per start, under a session of its own: the proxies and
                    // gateways running take it as one once the old has been silent.
                    let mut node = deployment.config().node.clone();
                    node.session =
                        proto::config::session_of_start(&node.session, net::clock::unix_ns());
                    // Said once, on stderr: the operator's cue, not the node's output.
                    eprintln!(
                        "warning: the root runs without --journal: a sequenced order lives only \
                         in this process; started again, it starts a new session ({}) with an \
                         empty book, which the running proxies and gateways follow, every \
                         order resting before gone; give it --journal FILE to survive a restart",
                        node.session
                    );
                    let root = Root::new(deployment.plan().clone(), node).map_err(err)?;
                    runtime.add(lossy(deployment.bind(root, feed, options)?, args))?;
                }
            }
        }
        PlanRole::Proxy => {
            let proxy = deployment.proxy(id).map_err(err)?;
            runtime.add(lossy(deployment.bind(proxy, Idle, options)?, args))?;
        }
        PlanRole::Gateway => {
            // Trust model 2: the participant's own program gets the released market data.
            let external = deployment.book().external(id);
            let delivery = if let Some(to) = external {
                Delivery::Forward(to)
            } else if let Some(orders) = args.orders.filter(|&rate| rate > 0.0) {
                let participant = deployment
                    .plan()
                    .node(id)
                    .and_then(|n| n.participant)
                    .context("a gateway serves a participant")?;
                let config = proto::strategy::WorkloadConfig {
                    rate_per_s: orders,
                    overlap: (1, 2),
                    resting_max: 24,
                    burst_factor: 1.0,
                    ..proto::strategy::WorkloadConfig::default()
                };
                let strategy = proto::strategy::PaperWorkload::new(config, args.seed, participant)
                    .map_err(err)?;
                Delivery::Strategy(Box::new(strategy))
            } else {
                Delivery::Events
            };
            let gateway = deployment.gateway(id, delivery).map_err(err)?;
            runtime.add(lossy(deployment.bind(gateway, Idle, options)?, args))?;
        }
    }
    Ok(())
}

/// `host` with `--loss` applied.
fn lossy<N: net::Role, H: Hook<N>>(host: net::Host<N, H>, args: &NodeArgs) -> net::Host<N, H> {
    crate::up::lossy(host, args.loss, args.seed)
}

/// The synthetic feed's order references start here, far above the engine's (which count
/// from 1): they once started at 1 too, and a participant's book saw the same reference
/// added twice.
const FEED_REF_BASE: u64 = 1 << 62;

/// References the feed reserves per packet of the stream before its first publish: a root
/// recovered from its journal continues the stream, and its feed starts its references past
/// every one the crashed root's feed could have used (a packet holds at most 35 Add Orders).
const FEED_REFS_PER_PACKET: u64 = 256;

/// The synthetic feed's stock locate: beyond the engine's (one per listed symbol, from 0).
const FEED_LOCATE: u16 = u16::MAX;

/// The root's synthetic market-data feed: ITCH Add Orders at a fixed rate, published every
/// tick (each call packs the due messages into as few packets as fit).
#[derive(Debug)]
struct Feed {
    rate: f64,
    tick: Duration,
    warmup: Duration,
    publish_for: Option<Duration>,
    start: Option<Instant>,
    published: u64,
    /// The reference before this feed's first ([`FEED_REFS_PER_PACKET`]).
    first_ref: Option<u64>,
    batch: Vec<AddOrder>,
    stock: Stock,
}

impl Feed {
    fn new(args: &NodeArgs) -> Self {
        Self {
            rate: args.rate.unwrap_or(FEED_RATE).max(0.0),
            tick: Duration::from_micros(args.tick_us.unwrap_or(FEED_TICK_US).max(1)),
            warmup: Duration::from_secs_f64(args.warmup.unwrap_or(FEED_WARMUP_S).max(0.0)),
            publish_for: args
                .publish_for
                .map(|s| Duration::from_secs_f64(s.max(0.0))),
            start: None,
            published: 0,
            first_ref: None,
            batch: Vec::with_capacity(FEED_TURN_MESSAGES_MAX as usize),
            stock: Stock::new("JASPER").expect("a valid symbol"),
        }
    }

    /// Add Order number `n` (from 1) of a feed whose references start after `first_ref`: a
    /// deterministic spread of prices around $100 on both sides.
    fn message(&self, first_ref: u64, n: u64, now: Instant) -> AddOrder {
        AddOrder {
            stock_locate: FEED_LOCATE,
            tracking_number: 0,
            timestamp_ns: now.as_nanos() % wire::itch::TIMESTAMP_LIMIT,
            order_ref: first_ref + n,
            side: if n.is_multiple_of(2) {
                Side::Buy
            } else {
                Side::Sell
            },
            shares: 100 * (1 + (n % 7) as u32),
            stock: self.stock,
            price: 1_000_000 + ((n * 7919) % 200) as u32 * 100,
        }
    }
}

impl Hook<Root> for Feed {
    fn on_turn(&mut self, now: Instant, root: &mut Root) -> Option<Instant> {
        let start = *self.start.get_or_insert(now + self.warmup);
        if now < start {
            return Some(start);
        }
        let elapsed = now.saturating_duration_since(start);
        if self.publish_for.is_some_and(|limit| elapsed >= limit) {
            return None;
        }
        let due = (elapsed.as_secs_f64() * self.rate) as u64;
        let count = due
            .saturating_sub(self.published)
            .min(FEED_TURN_MESSAGES_MAX);
        if count > 0 {
            let first_ref = *self.first_ref.get_or_insert_with(|| {
                FEED_REF_BASE + root.next_packet_seq().saturating_mul(FEED_REFS_PER_PACKET)
            });
            let mut batch = core::mem::take(&mut self.batch);
            batch.clear();
            batch.extend((1..=count).map(|i| self.message(first_ref, self.published + i, now)));
            root.publish(now, &batch);
            self.published += count;
            self.batch = batch;
        }
        Some(now + self.tick)
    }
}

/// What one gateway released (`first` of its first stream, `last` of its current one: a root
/// started again without its journal numbers a new stream from 1).
#[derive(Clone, Debug, Default)]
struct Releases {
    count: u64,
    first: Option<u64>,
    last: Option<u64>,
    /// Releases whose packet_seq was not the previous one (of its stream) plus one.
    out_of_order: u64,
    /// Releases of a packet_seq at or below one already released.
    repeats: u64,
    late: u64,
    recovered: u64,
    /// One-way delay (DESIGN.md §5): receive time − root send time, exchange clock, ns.
    owd_ns: Vec<u64>,
    /// Release latency: release time − root send time, exchange clock, ns (the OWD plus the
    /// holding time).
    latency_ns: Vec<u64>,
}

impl Releases {
    fn record(&mut self, release: &proto::Release) {
        let seq = release.packet_seq;
        if let Some(last) = self.last {
            self.out_of_order += (seq != last + 1) as u64;
            self.repeats += (seq <= last) as u64;
        }
        self.first.get_or_insert(seq);
        self.last = Some(self.last.map_or(seq, |l| l.max(seq)));
        self.count += 1;
        self.late += release.late as u64;
        self.recovered += release.recovered as u64;
        if self.owd_ns.len() < OWD_SAMPLES_MAX {
            let owd = release.received.saturating_nanos_since(release.send_time);
            self.owd_ns.push(owd);
            let latency = release.released.saturating_nanos_since(release.send_time);
            self.latency_ns.push(latency);
        }
    }
}

/// The event sink: release records per gateway, drop and event counts, printed failures.
#[derive(Debug)]
struct Recorder {
    names: Vec<String>,
    releases: BTreeMap<u32, Releases>,
    drops: [u64; proto::node::DROP_REASON_COUNT],
    failures_detected: u64,
    failures_cleared: u64,
    gaps_requested: u64,
    gaps_skipped: u64,
    /// The largest deadline offset (max reported OWD percentile) the root announced.
    max_owd_ns: Option<u64>,
    other_events: u64,
    /// Order responses per gateway.
    responses: BTreeMap<u32, u64>,
    /// Every order response, one line each, to the `--acks` file as it comes (buffered,
    /// flushed at each status line and at the end: a process killed loses at most the
    /// lines since).
    acks: Option<std::io::BufWriter<std::fs::File>>,
    participants: Vec<Option<u32>>,
    /// Where releases are reported (`--monitor`).
    reporter: Option<net::monitor::Reporter>,
    /// Each gateway's session, for its reports (from its `SessionStarted`).
    sessions: BTreeMap<u32, wire::Session>,
}

impl Recorder {
    /// Writes out the `--acks` lines buffered so far (`path` names the file in an error).
    fn flush_acks(&mut self, path: Option<&std::path::Path>) -> anyhow::Result<()> {
        if let (Some(path), Some(acks)) = (path, self.acks.as_mut()) {
            acks.flush()
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    fn new(deployment: &Deployment) -> Self {
        Self {
            names: deployment
                .config()
                .nodes
                .iter()
                .map(|n| n.name.clone())
                .collect(),
            releases: BTreeMap::new(),
            drops: [0; proto::node::DROP_REASON_COUNT],
            failures_detected: 0,
            failures_cleared: 0,
            gaps_requested: 0,
            gaps_skipped: 0,
            max_owd_ns: None,
            other_events: 0,
            responses: BTreeMap::new(),
            acks: None,
            participants: (0..deployment.config().nodes.len() as u32)
                .map(|i| {
                    deployment
                        .plan()
                        .node(NodeId(i))
                        .and_then(|n| n.participant)
                })
                .collect(),
            reporter: None,
            sessions: BTreeMap::new(),
        }
    }

    fn name(&self, id: NodeId) -> &str {
        self.names.get(id.0 as usize).map_or("?", String::as_str)
    }
}

impl EventSink for Recorder {
    fn on_event(&mut self, node: NodeId, _now: Instant, event: &Event) {
        match event {
            Event::Released(release) => {
                self.releases.entry(node.0).or_default().record(release);
                if let Some(reporter) = self.reporter.as_mut() {
                    let session = self.sessions.get(&node.0).copied().unwrap_or_default();
                    let record = wire::report::ReleaseRecord {
                        packet_seq: release.packet_seq,
                        sequence: release.sequence,
                        messages: release.messages,
                        late: release.late,
                        recovered: release.recovered,
                        send_time: release.send_time,
                        received: release.received,
                        released: release.released,
                    };
                    reporter.record(node.0, session, record, net::clock::now_ns);
                }
            }
            Event::Dropped { reason, .. } => self.drops[reason.index()] += 1,
            Event::FailureDetected { node: failed } => {
                self.failures_detected += 1;
                println!(
                    "event node={} failure_detected watched={}",
                    self.name(node),
                    self.name(*failed)
                );
            }
            Event::FailureCleared { node: back } => {
                self.failures_cleared += 1;
                println!(
                    "event node={} failure_cleared watched={}",
                    self.name(node),
                    self.name(*back)
                );
            }
            Event::ParentChanged { from, to, resent } => {
                println!(
                    "event node={} parent_changed from={} to={} resent={resent}",
                    self.name(node),
                    self.name(*from),
                    self.name(*to)
                );
            }
            Event::GapRequested { .. } => self.gaps_requested += 1,
            Event::GapSkipped {
                first_packet_seq,
                packets,
            } => {
                self.gaps_skipped += packets;
                println!(
                    "event node={} gap_skipped first={first_packet_seq} packets={packets}",
                    self.name(node)
                );
            }
            Event::SnapshotApplied {
                from,
                packet_seq,
                parts,
                orders,
                covered,
            } => {
                println!(
                    "event node={} book_snapshot orders={orders} parts={parts} \
                     stream_from={packet_seq} covered={}..{packet_seq} held_dropped={covered}",
                    self.name(node),
                    from.min(packet_seq)
                );
            }
            Event::SessionStarted {
                session,
                heard_before,
            } => {
                // A new stream: its numbers start over.
                if let Some(r) = self.releases.get_mut(&node.0) {
                    r.last = None;
                }
                self.sessions.insert(node.0, *session);
                // A node that had heard nothing yet just joins the root's session (that of a
                // root without a journal is its start time's, not the configured one).
                let what = if *heard_before {
                    "session_started"
                } else {
                    "session_joined"
                };
                println!(
                    "event node={} {what} session={}",
                    self.name(node),
                    session.as_bytes().escape_ascii()
                );
            }
            // The largest the root announced over the run (each announcement is the max of
            // the OWDs reported to it lately).
            Event::DeadlineOffset { max_owd_ns } => {
                self.max_owd_ns = Some(self.max_owd_ns.map_or(*max_owd_ns, |m| m.max(*max_owd_ns)));
            }
            Event::OrderResponse {
                client_order_id,
                order,
                msg_type,
                leaves_shares,
            } => {
                *self.responses.entry(node.0).or_default() += 1;
                let participant = self.participants.get(node.0 as usize).copied().flatten();
                if let Some(acks) = self.acks.as_mut() {
                    // A write error comes back at the next flush.
                    let _ = writeln!(
                        acks,
                        "{} {} {client_order_id} {} {order} {leaves_shares}",
                        node.0,
                        participant.map_or(-1, i64::from),
                        *msg_type as char,
                    );
                }
            }
            #[allow(unreachable_patterns)]
            _ => self.other_events += 1,
        }
    }
}

const DROP_REASONS: [(DropReason, &str); proto::node::DROP_REASON_COUNT] = [
    (DropReason::Malformed, "malformed"),
    (DropReason::UnknownSender, "unknown_sender"),
    (DropReason::Unexpected, "unexpected"),
    (DropReason::Duplicate, "duplicate"),
    (DropReason::TooOld, "too_old"),
    (DropReason::QueueFull, "queue_full"),
    (DropReason::WrongSession, "wrong_session"),
    (DropReason::Forged, "forged"),
    (DropReason::AheadOfClock, "ahead_of_clock"),
    (DropReason::FarAhead, "far_ahead"),
];

fn drops_field(drops: &[u64; proto::node::DROP_REASON_COUNT]) -> String {
    let mut out = String::new();
    for (reason, name) in DROP_REASONS {
        if !out.is_empty() {
            out.push(',');
        }
        let _ = write!(out, "{name}:{}", drops[reason.index()]);
    }
    out
}

/// How late the loop ran its nodes' timers: a loop given more nodes than it carries at their
/// load falls behind, and every timer with it (heartbeats, failure detection, clock probes,
/// releases), which from outside looks like a broken network. `jasper node --all` with a
/// 1,000-gateway plan on a 2-core machine ran its timers ~400 ms late: no clock ever synced,
/// and siblings took each other for dead ~400 times a second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Lag {
    pub(crate) wakeups: u64,
    pub(crate) late: u64,
    pub(crate) max_ns: u64,
}

impl Lag {
    pub(crate) fn add(&mut self, stats: &net::RunStats) {
        self.wakeups += stats.wakeups;
        self.late += stats.late_wakeups;
        self.max_ns = self.max_ns.max(stats.wake_lag_max_ns);
    }

    /// ` timers=… timers_late=… timer_lag_max_ms=…` (late: a millisecond or more,
    /// `net::LATE_WAKE_NS`).
    fn fields(&self) -> String {
        format!(
            " timers={} timers_late={} timer_lag_max_ms={:.1}",
            self.wakeups,
            self.late,
            self.max_ns as f64 / 1e6
        )
    }

    /// A warning when a timer came a heartbeat timeout late or more: siblings then take
    /// each other for dead while all of them run.
    fn warning(&self, heartbeat_timeout: Duration, nodes: usize) -> Option<String> {
        let bound = u64::try_from(heartbeat_timeout.as_nanos()).unwrap_or(u64::MAX);
        (self.max_ns >= bound).then(|| {
            format!(
                "warning: this process's loop ran a timer {:.1} ms late ({} of {} timers a \
                 millisecond or more): it runs {nodes} node(s), more than one loop carries at \
                 this load, or the host's cores are busy with other work, and with timers a heartbeat_timeout ({:.1} ms) late siblings take \
                 each other for dead, and clocks sync badly or not at all. Run \
                 fewer nodes a process (--id) on more cores or hosts, or give them less to do \
                 (root: a larger --tick-us, a lower --rate)",
                self.max_ns as f64 / 1e6,
                self.late,
                self.wakeups,
                heartbeat_timeout.as_secs_f64() * 1e3,
            )
        })
    }
}

/// How long a proxy's or a gateway's clock may go unsynced before `jasper node` says so
/// (sync takes ~130 ms a layer of proxies).
const UNSYNCED_WARN_AFTER_NS: u64 = 5_000_000_000;

/// Warnings, once each per node, of a deployment that does not hang together: datagrams from
/// addresses the config does not have (a node running another config), and a clock that
/// never synced (its parent not running, or running another config).
#[derive(Debug, Default)]
struct Checks {
    warned_unknown: std::collections::BTreeSet<usize>,
    warned_unsynced: std::collections::BTreeSet<usize>,
    /// Releases per gateway at the last status line.
    released: BTreeMap<u32, u64>,
    /// Gateways said to have gone quiet, with when (elapsed ns).
    quiet: BTreeMap<u32, u64>,
}

impl Checks {
    /// At a status line: the gateways that released nothing since the last one, though they
    /// had before (the root sends an idle packet every millisecond: the stream stopped), and
    /// those released again after that; a line each for all of them.
    fn stream(&mut self, sink: &Recorder, deployment: &Deployment, elapsed_ns: u64) -> Vec<String> {
        let name = |id: u32| {
            deployment
                .plan()
                .node(NodeId(id))
                .map_or_else(|| format!("id {id}"), |n| n.name())
        };
        let list = |ids: &[u32]| {
            let mut names: Vec<String> = ids.iter().take(8).map(|&id| name(id)).collect();
            if ids.len() > 8 {
                names.push(format!("… {} more", ids.len() - 8));
            }
            names.join(",")
        };
        let (mut stopped, mut resumed) = (Vec::new(), Vec::new());
        for (&id, r) in &sink.releases {
            let before = self.released.insert(id, r.count);
            if before == Some(r.count) && r.count > 0 {
                if let std::collections::btree_map::Entry::Vacant(e) = self.quiet.entry(id) {
                    e.insert(elapsed_ns);
                    stopped.push(id);
                }
            } else if before.is_some_and(|b| r.count > b)
                && let Some(since) = self.quiet.remove(&id)
            {
                resumed.push((id, since));
            }
        }
        let mut lines = Vec::new();
        if !stopped.is_empty() {
            lines.push(format!(
                "warning: {} gateway(s) released nothing since the last status line ({}): the \
                 market-data stream stopped reaching them (the root down or paused, or every \
                 path to it cut); their orders go unanswered meanwhile",
                stopped.len(),
                list(&stopped)
            ));
        }
        if !resumed.is_empty() {
            let ids: Vec<u32> = resumed.iter().map(|&(id, _)| id).collect();
            let first_quiet = resumed.iter().map(|&(_, since)| since).min().unwrap_or(0);
            lines.push(format!(
                "event stream_resumed gateways={} count={} quiet_at_t={:.1}s resumed_by_t={:.1}s",
                list(&ids),
                ids.len(),
                first_quiet as f64 / 1e9,
                elapsed_ns as f64 / 1e9,
            ));
        }
        lines
    }

    fn warnings(
        &mut self,
        runtime: &Runtime,
        deployment: &Deployment,
        elapsed_ns: u64,
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        for (index, host) in runtime.hosts().enumerate() {
            let net = host.net_counters();
            if net.unknown_source > 0 && self.warned_unknown.insert(index) {
                let from = net
                    .first_unknown_source
                    .map_or_else(|| "an unknown address".to_string(), |a| a.to_string());
                warnings.push(format!(
                    "warning: node {} got {} datagram(s) from addresses its config does not \
                     have, the first from {from}: a node running another config (another \
                     `jasper plan`'s, or this one's before a re-plan)? Every node of a \
                     deployment must run the same config file; these are dropped \
                     (unknown_source)",
                    host.name(),
                    net.unknown_source,
                ));
            }
            if elapsed_ns < UNSYNCED_WARN_AFTER_NS || self.warned_unsynced.contains(&index) {
                continue;
            }
            let unsynced_parent = if let Some(g) = runtime.host::<Gateway, Idle>(index) {
                (!g.node().clock().is_synced()).then(|| g.node().parent())
            } else if let Some(p) = runtime.host::<Proxy, Idle>(index) {
                (!p.node().clock().is_synced()).then(|| p.node().parent())
            } else {
                None
            };
            if let Some(parent) = unsynced_parent {
                self.warned_unsynced.insert(index);
                let name = deployment
                    .plan()
                    .node(parent)
                    .map_or_else(|| format!("id {}", parent.0), |n| n.name());
                let addr = deployment
                    .book()
                    .addr(parent)
                    .map_or_else(|| "no address".to_string(), |a| a.to_string());
                warnings.push(format!(
                    "warning: node {}'s clock has not synced after {:.0} s: its parent {name} \
                     ({addr}) does not answer its probes. Is {name} running, with this same \
                     config? Until its clock syncs a gateway refuses every order (Closed) and \
                     releases nothing",
                    host.name(),
                    elapsed_ns as f64 / 1e9,
                ));
            }
        }
        warnings
    }
}

fn status_line(t: Duration, runtime: &Runtime, sink: &Recorder) -> String {
    let (mut datagrams_in, mut datagrams_out, mut unknown, mut send_errors) = (0, 0, 0, 0);
    for host in runtime.hosts() {
        let c = host.net_counters();
        datagrams_in += c.datagrams_in;
        datagrams_out += c.datagrams_out;
        unknown += c.unknown_source;
        send_errors += c.send_errors();
    }
    let released: u64 = sink.releases.values().map(|r| r.count).sum();
    let late: u64 = sink.releases.values().map(|r| r.late).sum();
    let dropped: u64 = sink.drops.iter().sum();
    format!(
        "status t={:.1}s in={datagrams_in} out={datagrams_out} released={released} late={late} \
         drops={dropped} duplicates={} unknown_source={unknown} send_errors={send_errors} \
         failures={}",
        t.as_secs_f64(),
        sink.drops[DropReason::Duplicate.index()],
        sink.failures_detected,
    )
}

/// ` clock_synced=… clock_error_us=…`: how far the node's exchange clock is from the root's
/// clock right now. Meaningful when every node shares one host's clock (loopback, network
/// namespaces), where the injected offsets and drifts are the only differences.
fn clock_fields(sync: &proto::clock::ClockSync, clock: NodeClock, root: NodeClock) -> String {
    let now = net::clock::now_ns();
    let estimate = sync.to_exchange(clock.local(now)).as_nanos() as i128;
    let truth = root.local(now).as_nanos() as i128;
    format!(
        " clock_synced={} clock_settled={} clock_error_us={:.1}",
        sync.is_synced() as u8,
        sync.is_settled() as u8,
        (estimate - truth) as f64 / 1_000.0
    )
}

/// Percentile `centi` (hundredths of a percent) of `sorted` ns in µs, `-` of none.
fn micros_at(sorted: &[u64], centi: usize) -> String {
    if sorted.is_empty() {
        "-".to_string()
    } else {
        format!("{:.1}", proto::stats::percentile(sorted, centi))
    }
}

fn print_summary(runtime: &Runtime, sink: &Recorder, root_clock: NodeClock) {
    let mut totals = (0u64, 0u64, 0u64);
    for (index, host) in runtime.hosts().enumerate() {
        let net = host.net_counters();
        let node = host.node_counters();
        let mut line = format!(
            "summary node={} role={} in={} out={} unknown_source={} truncated={} \
             send_errors={} send_held={} recv_errors={} lost_on_purpose={} drops={}",
            host.name(),
            host.kind(),
            net.datagrams_in,
            net.datagrams_out,
            net.unknown_source,
            net.truncated,
            net.send_errors(),
            net.send_held,
            net.recv_errors,
            net.lost_on_purpose,
            drops_field(&node.drops),
        );
        if let Some(root) = runtime.host::<Root, Feed>(index) {
            let _ = write!(
                line,
                " packets={} feed_messages={} sequenced={} retransmitted={} responses_replayed={} \
                 responses_refilled={} response_statuses={}",
                root.node().next_packet_seq() - 1,
                root.hook().published,
                node.sequenced,
                node.retransmissions,
                root.node().responses_replayed(),
                root.node().responses_refilled(),
                root.node().response_statuses(),
            );
        } else if let Some(root) = runtime.host::<Root, JournalChain>(index) {
            let journal = &root.hook().1;
            let _ = write!(
                line,
                " packets={} feed_messages={} retransmitted={} sequenced={} responses_resent={} \
                 responses_replayed={} responses_refilled={} response_statuses={} \
                 journal_records={} journal_durable={} syncs={} journal_read_errors={}",
                root.node().next_packet_seq() - 1,
                root.hook().0.published,
                node.retransmissions,
                node.sequenced,
                root.node().responses_resent(),
                root.node().responses_replayed(),
                root.node().responses_refilled(),
                root.node().response_statuses(),
                journal.appended,
                journal.durable(),
                journal.syncs,
                journal.read_errors(),
            );
        } else if let Some(proxy) = runtime.host::<Proxy, Idle>(index) {
            let _ = write!(
                line,
                " forwarded={} repaired={} repair_asks={} parent={}",
                node.packets_new,
                node.retransmissions,
                node.repair_asks,
                proxy.node().parent().0
            );
            line += &clock_fields(proxy.node().clock(), proxy.clock(), root_clock);
        } else if let Some(gateway) = runtime.host::<Gateway, Idle>(index) {
            line += &clock_fields(gateway.node().clock(), gateway.clock(), root_clock);
            let r = sink.releases.get(&host.id().0).cloned().unwrap_or_default();
            let mut owd = r.owd_ns.clone();
            owd.sort_unstable();
            let mut latency = r.latency_ns.clone();
            latency.sort_unstable();
            let _ = write!(
                line,
                " responses={} response_gaps={} responses_lost={} orders_resent={} \
                 orders_retried={} orders_unanswered={} orders_answered_late={} orders_refused={} \
                 orders_refused_busy={} orders_answered_early={} answers_unclaimed={} \
                 parent={}",
                sink.responses.get(&host.id().0).copied().unwrap_or(0),
                node.response_gaps,
                node.responses_lost,
                node.orders_resent,
                node.orders_retried,
                node.orders_unanswered,
                node.orders_answered_late,
                node.orders_refused,
                node.orders_refused_busy,
                node.orders_answered_early,
                node.answers_unclaimed,
                gateway.node().parent().0,
            );
            let _ = write!(
                line,
                " released={} first={} last={} out_of_order={} repeats={} late={} recovered={} \
                 skipped={} snapshots={} owd_p50_us={} owd_p99_us={} release_p50_us={} \
                 release_p99_us={}",
                r.count,
                r.first.unwrap_or(0),
                r.last.unwrap_or(0),
                r.out_of_order,
                r.repeats,
                r.late,
                r.recovered,
                node.skipped,
                node.snapshots,
                micros_at(&owd, 5_000),
                micros_at(&owd, 9_900),
                micros_at(&latency, 5_000),
                micros_at(&latency, 9_900),
            );
            totals.0 += r.count;
            totals.1 += r.late;
            totals.2 += r.recovered;
        }
        println!("{line}");
    }
    let reports = sink.reporter.as_ref().map_or(String::new(), |r| {
        format!(
            " reports_sent={} report_records={} report_errors={} monitor={}",
            r.reports_sent(),
            r.records_sent(),
            r.send_errors(),
            r.to()
        )
    });
    println!(
        "total released={} late={} recovered={} gaps_requested={} gaps_skipped={} \
         failures_detected={} failures_cleared={} max_owd_us={} drops={} other_events={}{reports}",
        totals.0,
        totals.1,
        totals.2,
        sink.gaps_requested,
        sink.gaps_skipped,
        sink.failures_detected,
        sink.failures_cleared,
        // Only the root's process hears its announcements.
        sink.max_owd_ns.map_or_else(
            || "-".to_string(),
            |ns| format!("{:.1}", ns as f64 / 1_000.0)
        ),
        drops_field(&sink.drops),
        sink.other_events,
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use clap::Parser;
    use proto::Node;
    use proto::book::BookBuilder;
    use proto::plan::{Plan, PlanConfig};

    use super::*;

    /// The status line's timer fields add up a status interval's runs, and the warning
    /// comes from a heartbeat timeout's lag on, naming what to change.
    #[test]
    fn a_loop_behind_its_timers_is_said() {
        let mut lag = Lag::default();
        let run = |wakeups, late_wakeups, wake_lag_max_ns| net::RunStats {
            wakeups,
            late_wakeups,
            wake_lag_max_ns,
            ..net::RunStats::default()
        };
        lag.add(&run(100, 2, 1_200_000));
        lag.add(&run(50, 0, 300_000));
        assert_eq!(
            lag.fields(),
            " timers=150 timers_late=2 timer_lag_max_ms=1.2"
        );
        let timeout = Duration::from_millis(5);
        assert_eq!(lag.warning(timeout, 9), None);
        lag.add(&run(10, 10, 5_000_000));
        let warning = lag.warning(timeout, 1111).expect("5 ms late");
        assert!(
            warning.starts_with(
                "warning: this process's loop ran a timer 5.0 ms late (12 of 160 timers a \
                 millisecond or more): it runs 1111 node(s)"
            ),
            "{warning}"
        );
        assert!(warning.contains("(--id)"), "{warning}");
    }

    #[test]
    fn a_status_interval_is_off_or_at_least_a_millisecond() {
        assert_eq!(parse_status_interval("0"), Ok(0.0));
        assert_eq!(parse_status_interval("0.001"), Ok(0.001));
        // Found by a hostile-input sweep: 1e-9 printed 165,642 lines and ran no packet.
        assert!(
            parse_status_interval("1e-9")
                .unwrap_err()
                .contains("millisecond")
        );
        assert!(parse_status_interval("-1").is_err());
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        node: NodeArgs,
    }

    /// Runs `feed` on `root` for `turns` ticks from `now`; applies every packet the root sends
    /// (to one destination each) to `book`.
    fn publish(
        feed: &mut Feed,
        root: &mut Root,
        now: &mut Instant,
        turns: u32,
        book: &mut BookBuilder,
    ) {
        for _ in 0..turns {
            feed.on_turn(*now, root);
            while let Some(t) = root.poll_transmit(*now) {
                if let Ok(data) = wire::parse_market_data(t.payload) {
                    book.apply_packet(&data).expect("no reference twice");
                }
            }
            *now += feed.tick;
        }
    }

    /// Goal: the synthetic feed's Add Orders never reuse a reference: not the engine's (from
    /// 1: the feed's started at 1 too, and a participant's book saw references added twice),
    /// nor its own after the root restarts and continues the stream. Method: a feed publishes
    /// for 20 ticks; a new feed on the same root (a restart) for 20 more; every packet goes
    /// into one book, which refuses a reference added twice; every reference is above
    /// `FEED_REF_BASE` and the stock is the feed's own locate.
    #[test]
    fn the_feed_never_reuses_a_reference() {
        let args = Cli::parse_from(["jasper", "--config", "c.toml", "--all", "--warmup", "0"]);
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let mut root = Root::new(plan, proto::NodeConfig::default()).expect("root");
        let mut book = BookBuilder::new();
        let mut now = Instant::from_nanos(1_000_000);
        let mut feed = Feed::new(&args.node);
        publish(&mut feed, &mut root, &mut now, 20, &mut book);
        let first = feed.first_ref.expect("it published");
        assert!(first >= FEED_REF_BASE);
        let mut again = Feed::new(&args.node);
        publish(&mut again, &mut root, &mut now, 20, &mut book);
        assert!(again.first_ref.expect("it published") >= first + feed.published);
        assert!(book.applied >= 30, "{} messages", book.applied);
        let add = feed.message(first, 1, now);
        assert_eq!((add.order_ref, add.stock_locate), (first + 1, FEED_LOCATE));
    }
}
