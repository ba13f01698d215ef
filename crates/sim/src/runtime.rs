//! The driver: an event heap in true time, one host per node, and the loop that feeds them.
//!
//! The loop is quinn-proto's `Pair::step` (STYLE.md §2.7): pop the earliest event, convert
//! true time to the target node's local clock, call the node's handler, then drain its
//! pollers in the contract's order: `poll_transmit` (each copy goes through the
//! [`Network`]; only while the node's VM can send, [`Network::unwritable_for_ns`], else the
//! rest waits in the node's outbox for a `Writable` event, as `net` holds what the kernel
//! refuses), `poll_timeout` (only the latest timer of a node is live: each new timeout
//! bumps the node's timer generation and older timer events are ignored when they pop), and
//! `poll_event` (releases go to the [`Metrics`] and the [`Checker`]).
//!
//! Events are keyed by `(true time, insertion sequence)`, so equal times pop in the order they
//! were scheduled and a run is a function of the seed and the configuration alone. A running
//! hash of every delivery and release ([`Sim::trace_hash`]) lets a test run a seed twice and
//! compare (madsim's `check_determinism`). Any panic inside the loop prints
//! `rerun with SIM_SEED=<seed>`.
//!
//! One run can be split over threads ([`Sim::sharded`], `runtime/shard.rs`): each shard is a
//! whole `Sim` that runs its share of the nodes, and the shards advance together in windows
//! of the network's lookahead.

use core::any::Any;
use std::rc::Rc;

use proto::node::DROP_REASON_COUNT;
use proto::{Event, Instant, Node, NodeId, Release};
use serde::Serialize;

use crate::checker::{Checker, OnViolation};
use crate::clock::{Clock, ClockModel};
use crate::metrics::{Metrics, MetricsConfig, ReleaseSample};
use crate::network::{Clog, NetDrop, NetModel, Network, Partition, Route};
use crate::queue::EventQueue;
use crate::rng::{Purpose, SimRng, splitmix64};

mod shard;
pub use shard::SHARDS_MAX;
use shard::{Sample, Shard, Workers};

/// A node the simulator can host: any [`proto::Node`] that is also `Any`, so a scenario can
/// reach the concrete type (`Root`, `Gateway`) for commands and getters.
pub trait SimNode: Node + Any {
    /// `self` as `Any`.
    fn as_any(&self) -> &dyn Any;
    /// `self` as `Any`, mutably.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Node + Any> SimNode for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A command run on one node at a scheduled true time.
pub type Command = Box<dyn FnOnce(&mut dyn SimNode, Instant)>;

/// What a paused node does with copies that reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseMode {
    /// Keep them (up to the receive-buffer bound) and deliver them on resume.
    Queue,
    /// Drop them.
    Drop,
}

/// Everything a run depends on besides its nodes.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The run's seed.
    pub seed: u64,
    /// The network model.
    pub model: NetModel,
    /// Run nodes' `check_invariants` after handlers.
    pub check_invariants: bool,
    /// ... after every `invariants_every`-th handler of each node (1 = every handler). Full
    /// checks scan whole queues (a gateway's 1024 hold slots), which at N = 1000 cost more
    /// than the simulation itself; experiments sample them.
    pub invariants_every: u32,
    /// The node whose local clock defines exchange time (the root; its clock is usually
    /// perfect). Used to turn a release's `send_time` into true time.
    pub reference: NodeId,
    /// What a paused node does with arriving copies.
    pub pause_mode: PauseMode,
    /// What the release checker does on a violation.
    pub on_violation: OnViolation,
    /// Bound on the true-time spread of on-time releases of one packet; `None` = unchecked.
    pub skew_bound_ns: Option<u64>,
}

impl SimConfig {
    /// Defaults: the [`NetModel::aws_c5`] model, invariants checked, node 0 is the reference,
    /// paused nodes queue, checker violations panic, skew unchecked.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            model: NetModel::aws_c5(),
            check_invariants: true,
            invariants_every: 1,
            reference: NodeId(0),
            pause_mode: PauseMode::Queue,
            on_violation: OnViolation::Panic,
            skew_bound_ns: None,
        }
    }

    /// With `model`.
    pub fn with_model(mut self, model: NetModel) -> Self {
        self.model = model;
        self
    }
}

/// The seed from the `SIM_SEED` environment variable (decimal or `0x` hex), else `default`;
/// panics when it is set to something else (for tests; see [`try_seed_from_env`]).
pub fn seed_from_env(default: u64) -> u64 {
    try_seed_from_env(default).unwrap_or_else(|e| panic!("{e}"))
}

/// The seed from the `SIM_SEED` environment variable (decimal or `0x` hex), else `default`;
/// an error when it is set to something else.
pub fn try_seed_from_env(default: u64) -> Result<u64, String> {
    match std::env::var("SIM_SEED") {
        Ok(text) => parse_seed(&text)
            .ok_or_else(|| format!("SIM_SEED={text:?} is not a seed (a u64, decimal or 0x-hex)")),
        Err(_) => Ok(default),
    }
}

/// The seeds a swarm test runs: the one in `SIM_SEED` alone, or each of a range there
/// (`SIM_SEED=17-600`, both ends in, to search far more seeds than CI runs), else every seed
/// of `default`.
pub fn seeds_from_env(default: impl IntoIterator<Item = u64>) -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(text) => parse_seed_range(&text).unwrap_or_else(|| {
            panic!(
                "SIM_SEED={text:?} is neither a seed nor a range of seeds (a u64, decimal or \
                 0x-hex; a range FIRST-LAST)"
            )
        }),
        Err(_) => default.into_iter().collect(),
    }
}

/// A seed, or a range `FIRST-LAST` of seeds (both in, FIRST ≤ LAST), each decimal or `0x` hex.
fn parse_seed_range(text: &str) -> Option<Vec<u64>> {
    match text.split_once('-') {
        Some((first, last)) => {
            let (first, last) = (parse_seed(first)?, parse_seed(last)?);
            (first <= last).then(|| (first..=last).collect())
        }
        None => parse_seed(text).map(|seed| vec![seed]),
    }
}

/// The seed from `SIM_SEED`, else a random one (from the standard library's per-process hash
/// keys: no clock is read).
pub fn seed_from_env_or_random() -> u64 {
    use core::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(0x5EED_u64);
    seed_from_env(random)
}

/// Parses a seed written in decimal or `0x` hex.
pub fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Counters of the driver and of the nodes' events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SimStats {
    /// Events popped from the heap.
    pub events: u64,
    /// Datagrams handed to a node's `handle_datagram`.
    pub datagrams: u64,
    /// Calls to `handle_timeout`.
    pub timeouts: u64,
    /// Timer events ignored because a newer timeout replaced them.
    pub stale_timers: u64,
    /// Timer events that fired before the node's clock reached the deadline (re-armed).
    pub early_timers: u64,
    /// Commands run.
    pub commands: u64,
    /// Transmits polled (one per `poll_transmit`, any number of copies).
    pub transmits: u64,
    /// Releases reported by gateways.
    pub releases: u64,
    /// `Event::Dropped` by `DropReason` index.
    pub node_drops: [u64; DROP_REASON_COUNT],
    /// `Event::FailureDetected`.
    pub failures_detected: u64,
    /// `Event::FailureCleared`.
    pub failures_cleared: u64,
    /// `Event::ParentChanged`.
    pub parents_changed: u64,
    /// `Event::GapRequested`.
    pub gaps_requested: u64,
    /// `Event::GapSkipped`.
    pub gaps_skipped: u64,
    /// `Event::DeadlineOffset`.
    pub deadline_offsets: u64,
    /// The last `max_owd_ns` a `DeadlineOffset` reported.
    pub last_max_owd_ns: u64,
}

impl SimStats {
    /// Adds `other`'s counts (a twin shard's); the last OWD report is `other`'s if it had one.
    fn absorb(&mut self, other: &Self) {
        self.events += other.events;
        self.datagrams += other.datagrams;
        self.timeouts += other.timeouts;
        self.stale_timers += other.stale_timers;
        self.early_timers += other.early_timers;
        self.commands += other.commands;
        self.transmits += other.transmits;
        self.releases += other.releases;
        for (mine, theirs) in self.node_drops.iter_mut().zip(other.node_drops) {
            *mine += theirs;
        }
        self.failures_detected += other.failures_detected;
        self.failures_cleared += other.failures_cleared;
        self.parents_changed += other.parents_changed;
        self.gaps_requested += other.gaps_requested;
        self.gaps_skipped += other.gaps_skipped;
        if other.deadline_offsets > 0 {
            self.last_max_owd_ns = other.last_max_owd_ns;
        }
        self.deadline_offsets += other.deadline_offsets;
    }
}

/// Receipts remembered per node to map a release's `received_local` back to true time.
const RECENT_RECEIPTS: usize = 128;
/// Copies kept for a paused node when the model's receive buffer is unbounded.
const PAUSED_INBOX_MAX: usize = 65_536;
/// Timeouts one node may fire at one true instant before the driver calls it a livelock.
const TIMER_SPINS_MAX: u32 = 10_000;

/// The deterministic simulator.
pub struct Sim {
    config: SimConfig,
    now: u64,
    next_seq: u64,
    queue: EventQueue<Action>,
    hosts: Vec<Host>,
    network: Network,
    metrics: Option<Metrics>,
    checker: Checker,
    /// Kills and pauses due at or after this true time do not happen
    /// ([`Sim::cancel_faults_from`]).
    faults_cancelled_from: u64,
    stats: SimStats,
    trace: u64,
    started: bool,
    scratch: Vec<NodeId>,
    /// Every node was added with [`Sim::add_node_send`] (a sharded run needs that).
    all_send: bool,
    /// This simulation's part of a sharded run ([`Sim::sharded`]); `None` runs alone.
    shard: Option<Box<Shard>>,
    /// The other shards of a sharded run, held by the first.
    twins: Vec<Self>,
    /// The threads that run the twins (started by the first sharded run).
    workers: Option<Box<Workers>>,
}

struct Host {
    node: Box<dyn SimNode>,
    clock: Clock,
    /// The network host (VM) the node runs on: its own, or one it shares with the nodes
    /// added [`Sim::add_node_send_beside`] it.
    vm: u32,
    /// The live timeout, on the node's clock.
    timer: Option<Instant>,
    /// The generation of the timer event that serves `timer`; every other is stale.
    timer_generation: u64,
    /// Generations handed out so far (each timer event gets its own).
    timer_generations: u64,
    /// `(deadline, generation)` of this host's timer events still in the queue, stale or not.
    /// A node's timeout often comes back to a deadline it had before (a probe timer displaced
    /// by a release, then due again): the event already queued for it serves again instead of
    /// a new one, which cut the stale timer events (about a tenth of all events at N = 1000).
    timers_queued: QueuedTimers,
    state: HostState,
    inbox: Vec<(u32, Rc<Payload>)>,
    /// (local, true) of recent receipts, as a ring. Boxed: inline, its 2 KB spread the hot
    /// fields of a host over lines that every event touched.
    recent: Box<[(u64, u64); RECENT_RECEIPTS]>,
    recent_next: usize,
    /// The packets `[from, to)` the node skipped (`Event::GapSkipped`, or covered by a book
    /// snapshot: `Event::SnapshotApplied`) since its last release, or `(0, 0)` (packet numbers start at 1): its next release tells the checker.
    skipped: (u64, u64),
    timer_spin_at: u64,
    timer_spins: u32,
    /// Handlers since the node's invariants were last checked.
    handlers_since_check: u32,
    /// A `Writable` event is queued: the node's outbox holds datagrams its VM's socket could
    /// not take yet ([`Network::unwritable_for_ns`]).
    writable_queued: bool,
}

impl Host {
    /// Makes every queued timer event stale.
    fn invalidate_timer(&mut self) {
        self.timer_generations += 1;
        self.timer_generation = self.timer_generations;
    }

    /// The node announced that it will never release `[from, from + packets)` (a gap
    /// skipped, or packets a book snapshot covered): two ranges in a row make one if they
    /// meet (the checker tells if not).
    fn note_skipped(&mut self, from: u64, packets: u64) {
        if packets == 0 {
            return;
        }
        let end = from.saturating_add(packets);
        self.skipped = if self.skipped.0 == 0 || self.skipped.1 != from {
            (from, end)
        } else {
            (self.skipped.0, end)
        };
    }

    /// A fresh generation for a new timer event at `deadline`, now the live one.
    fn new_timer(&mut self, deadline: Instant) -> u64 {
        self.invalidate_timer();
        self.timers_queued.record(deadline, self.timer_generation);
        self.timer_generation
    }
}

/// A few of a host's queued timer events, `(deadline, generation)`, generation 0 where free.
/// Inline (a separate allocation cost a cache miss per timer event); when every slot is taken
/// an event simply goes unrecorded and cannot be reused, which costs an event, never a result.
#[derive(Clone, Copy, Debug, Default)]
struct QueuedTimers([(Instant, u64); 4]);

impl QueuedTimers {
    fn record(&mut self, deadline: Instant, generation: u64) {
        if let Some(slot) = self.0.iter_mut().find(|(_, g)| *g == 0) {
            *slot = (deadline, generation);
        }
    }

    /// Forgets the event of `generation` (it left the queue).
    fn take(&mut self, generation: u64) {
        if let Some(slot) = self.0.iter_mut().find(|(_, g)| *g == generation) {
            slot.1 = 0;
        }
    }

    /// The generation of a queued event for `deadline`.
    fn find(&self, deadline: Instant) -> Option<u64> {
        self.0
            .iter()
            .find(|&&(d, g)| g != 0 && d == deadline)
            .map(|&(_, g)| g)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostState {
    Up,
    Paused,
    Dead,
}

struct Payload {
    hash: u64,
    bytes: Box<[u8]>,
}

enum Action {
    /// A copy reached the target's receive buffer `recv_cost_ns` ago: the event is keyed at
    /// the earliest time its handler can run, so a copy that finds the receive queue idle
    /// costs one event, not two (see [`Sim::on_arrive`]).
    Arrive {
        to: u32,
        from: u32,
        payload: Rc<Payload>,
    },
    /// A copy leaves the receive buffer: the handler runs.
    Deliver {
        to: u32,
        from: u32,
        payload: Rc<Payload>,
    },
    Timer {
        node: u32,
        generation: u64,
    },
    /// The node's VM can send again: its outbox is drained.
    Writable {
        node: u32,
    },
    Command {
        node: u32,
        command: Command,
    },
    Kill {
        node: u32,
    },
    Pause {
        node: u32,
    },
    Resume {
        node: u32,
    },
}

/// Prints the seed if the thread panics while this guard lives.
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("simulation panicked: rerun with SIM_SEED={}", self.0);
        }
    }
}

impl Sim {
    /// An empty simulation at true time zero.
    pub fn new(config: SimConfig) -> Self {
        let network = Network::new(config.model.clone(), config.seed);
        let checker = Checker::new(config.on_violation, config.skew_bound_ns);
        Self {
            config,
            now: 0,
            next_seq: 0,
            queue: EventQueue::new(),
            hosts: Vec::new(),
            network,
            metrics: None,
            checker,
            faults_cancelled_from: u64::MAX,
            stats: SimStats::default(),
            trace: 0,
            started: false,
            scratch: Vec::new(),
            all_send: true,
            shard: None,
            twins: Vec::new(),
            workers: None,
        }
    }

    /// Adds a node; its id must be the next free one (ids are dense from 0, in plan order).
    pub fn add_node(&mut self, node: Box<dyn SimNode>, clock: ClockModel) -> NodeId {
        self.all_send = false;
        self.add(node, clock, None)
    }

    /// [`Sim::add_node`] for a node that may move to another thread: a simulation whose nodes
    /// were all added this way can be [`Sim::sharded`].
    pub fn add_node_send(&mut self, node: Box<dyn SimNode + Send>, clock: ClockModel) -> NodeId {
        self.add(node, clock, None)
    }

    /// [`Sim::add_node_send`] for a node on the same VM as `beside` (an earlier node): the
    /// two share one network host, so its egress, receive queue, static delay, stragglers,
    /// pauses and links (the paper ran up to 18 logical receivers on one VM, each on its own
    /// port), and one oscillator: the node's local clock follows `beside`'s model (its read
    /// noise is its own). A [`Sim::sharded`] run keeps the nodes of one VM in one shard.
    ///
    /// # Panics
    /// If `beside` has not been added.
    pub fn add_node_send_beside(
        &mut self,
        node: Box<dyn SimNode + Send>,
        beside: NodeId,
    ) -> NodeId {
        let host = &self.hosts[beside.0 as usize];
        let (vm, clock) = (host.vm, host.clock.model().clone());
        self.add(node, clock, Some(vm))
    }

    /// The network host (VM) `node` runs on.
    pub fn vm_of(&self, node: NodeId) -> u32 {
        self.hosts[node.0 as usize].vm
    }

    /// Whether some nodes share a VM ([`Sim::add_node_send_beside`]).
    pub fn has_shared_vms(&self) -> bool {
        self.network.host_count() < self.hosts.len()
    }

    fn add(&mut self, node: Box<dyn SimNode>, clock: ClockModel, vm: Option<u32>) -> NodeId {
        assert!(
            self.shard.is_none(),
            "nodes are added before a run is sharded"
        );
        let id = u32::try_from(self.hosts.len()).expect("fewer than 2^32 nodes");
        assert_eq!(node.id(), NodeId(id), "nodes must be added in id order");
        let rng = SimRng::derive(self.config.seed, Purpose::Clock, u64::from(id));
        let mut clock = Clock::new(clock, rng);
        clock.read(self.now);
        let vm = vm.unwrap_or_else(|| self.network.add_host());
        self.hosts.push(Host {
            node,
            clock,
            vm,
            timer: None,
            timer_generation: 0,
            timer_generations: 0,
            timers_queued: QueuedTimers::default(),
            state: HostState::Up,
            inbox: Vec::new(),
            recent: Box::new([(u64::MAX, 0); RECENT_RECEIPTS]),
            recent_next: 0,
            skipped: (0, 0),
            timer_spin_at: u64::MAX,
            timer_spins: 0,
            handlers_since_check: 0,
            writable_queued: false,
        });
        if self.started {
            self.drain(id as usize);
        }
        NodeId(id)
    }

    /// Starts collecting metrics (call once the receivers are known).
    pub fn measure(&mut self, config: MetricsConfig) {
        self.metrics = Some(Metrics::new(config));
    }

    /// Runs a command on `node` now (its clock is read first), then drains its pollers.
    pub fn command<R>(
        &mut self,
        node: NodeId,
        f: impl FnOnce(&mut dyn SimNode, Instant) -> R,
    ) -> R {
        let _guard = SeedGuard(self.config.seed);
        let this = self.home_mut(node.0);
        this.start();
        let index = node.0 as usize;
        let host = &mut this.hosts[index];
        assert_eq!(
            host.state,
            HostState::Up,
            "command on {node:?}, which is {:?}",
            host.state
        );
        let local = host.clock.read(this.now);
        let result = f(host.node.as_mut(), local);
        this.stats.commands += 1;
        this.after_handler(index);
        result
    }

    /// Schedules a command on `node` at true time `at` (skipped if the node is not up then).
    ///
    /// # Panics
    /// On a sharded run: a command need not be `Send`.
    pub fn schedule_command(&mut self, at: u64, node: NodeId, command: Command) {
        assert!(at >= self.now, "scheduling in the past");
        assert!(
            self.shard.is_none(),
            "scheduled commands are not supported on a sharded run"
        );
        self.push(
            at,
            Action::Command {
                node: node.0,
                command,
            },
        );
    }

    /// Kills `node` at true time `at`: it never runs again (unless [`Sim::restart`]ed);
    /// copies to it are dropped.
    pub fn kill(&mut self, node: NodeId, at: u64) {
        let this = self.home_mut(node.0);
        this.push(at.max(this.now), Action::Kill { node: node.0 });
    }

    /// Restarts a node killed with [`Sim::kill`] (the kill must have happened) as
    /// `replacement`, a new incarnation with the same id (e.g. a root recovered from its
    /// journal), now. Its clock runs on; it starts with no timer and an empty inbox, and its
    /// pollers are drained at once.
    pub fn restart(&mut self, replacement: Box<dyn SimNode>) {
        let _guard = SeedGuard(self.config.seed);
        assert!(
            self.shard.is_none(),
            "restart is not supported on a sharded run"
        );
        self.start();
        let id = replacement.id();
        let index = id.0 as usize;
        let host = &mut self.hosts[index];
        assert_eq!(
            host.state,
            HostState::Dead,
            "restart of {id:?}, which is not dead"
        );
        host.node = replacement;
        host.state = HostState::Up;
        host.skipped = (0, 0);
        host.timer = None;
        host.invalidate_timer();
        host.timer_spin_at = u64::MAX;
        host.clock.read(self.now);
        self.drain(index);
    }

    /// Pauses `node` during `[from, until)`: no handler runs; arriving copies queue or drop
    /// per [`SimConfig::pause_mode`]; its timers fire on resume.
    pub fn pause(&mut self, node: NodeId, from: u64, until: u64) {
        assert!(from <= until);
        let this = self.home_mut(node.0);
        this.push(from.max(this.now), Action::Pause { node: node.0 });
        this.push(until.max(this.now), Action::Resume { node: node.0 });
    }

    /// Clogs the link `source -> target` during `[from, until)` (copies wait for the end).
    pub fn clog(&mut self, source: NodeId, target: NodeId, from: u64, until: u64) {
        for twin in &mut self.twins {
            twin.clog(source, target, from, until);
        }
        self.network.clog(Clog {
            source: self.vm_of(source),
            target: self.vm_of(target),
            from_ns: from,
            until_ns: until,
        });
    }

    /// Partitions two sets of nodes during `[from, until)`.
    pub fn partition(&mut self, side_a: &[NodeId], side_b: &[NodeId], from: u64, until: u64) {
        for twin in &mut self.twins {
            twin.partition(side_a, side_b, from, until);
        }
        self.network.partition(Partition {
            side_a: side_a.iter().map(|&n| self.vm_of(n)).collect(),
            side_b: side_b.iter().map(|&n| self.vm_of(n)).collect(),
            from_ns: from,
            until_ns: until,
        });
    }

    /// Cancels every fault ([`Sim::kill`], [`Sim::pause`], [`Sim::clog`],
    /// [`Sim::partition`]) that starts at or after true time `at`, on every shard: a run
    /// stopped at `at` is the run that was asked for that long, which would have had none of
    /// them. A fault that started before `at` runs its course.
    pub fn cancel_faults_from(&mut self, at: u64) {
        for twin in &mut self.twins {
            twin.cancel_faults_from(at);
        }
        self.faults_cancelled_from = self.faults_cancelled_from.min(at);
        self.network.cancel_faults_from(at);
    }

    /// Processes the earliest event; returns false if there is none.
    ///
    /// # Panics
    /// On a sharded run (its shards step together, in windows: use [`Sim::run_until`]).
    pub fn step(&mut self) -> bool {
        let _guard = SeedGuard(self.config.seed);
        assert!(self.shard.is_none(), "step on a sharded run");
        self.start();
        self.step_inner(u64::MAX)
    }

    /// Processes every event up to and including true time `until`, then sets the time to
    /// `until`.
    pub fn run_until(&mut self, until: u64) {
        let _guard = SeedGuard(self.config.seed);
        self.start();
        assert!(until >= self.now, "time goes forward");
        if self.shard.is_some() {
            return self.run_sharded(until);
        }
        while self.step_inner(until) {}
        self.now = until;
    }

    /// Runs for `duration_ns` of true time.
    pub fn run_for(&mut self, duration_ns: u64) {
        self.run_until(self.now.saturating_add(duration_ns));
    }

    /// Runs until no event is left or `until` is reached; returns whether it went idle.
    ///
    /// # Panics
    /// On a sharded run.
    pub fn run_until_idle(&mut self, until: u64) -> bool {
        let _guard = SeedGuard(self.config.seed);
        assert!(self.shard.is_none(), "run_until_idle on a sharded run");
        self.start();
        while self.step_inner(until) {}
        self.queue.is_empty()
    }

    /// Finalises metrics (packets in flight count as lost) and returns them.
    pub fn finish(&mut self) -> Option<&Metrics> {
        if let Some(metrics) = self.metrics.as_mut() {
            metrics.finish();
        }
        self.metrics.as_ref()
    }

    /// True time, nanoseconds since the start of the run.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.config.seed
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.hosts.len()
    }

    /// Node `id` as `dyn SimNode`.
    pub fn node_dyn(&self, id: NodeId) -> &dyn SimNode {
        self.home(id.0).hosts[id.0 as usize].node.as_ref()
    }

    /// Node `id` as its concrete type, if it is a `T`.
    pub fn node<T: SimNode>(&self, id: NodeId) -> Option<&T> {
        self.home(id.0).hosts[id.0 as usize]
            .node
            .as_any()
            .downcast_ref()
    }

    /// Node `id` as its concrete type, mutably (use [`Sim::command`] to call handlers: it
    /// drains the pollers afterwards).
    pub fn node_mut<T: SimNode>(&mut self, id: NodeId) -> Option<&mut T> {
        self.home_mut(id.0).hosts[id.0 as usize]
            .node
            .as_any_mut()
            .downcast_mut()
    }

    /// The local clock reading of `id` at the current true time (reads the clock).
    pub fn local_now(&mut self, id: NodeId) -> Instant {
        let this = self.home_mut(id.0);
        this.hosts[id.0 as usize].clock.read(this.now)
    }

    /// The metrics, if [`Sim::measure`] was called.
    pub fn metrics(&self) -> Option<&Metrics> {
        self.metrics.as_ref()
    }

    /// The metrics, mutably.
    pub fn metrics_mut(&mut self) -> Option<&mut Metrics> {
        self.metrics.as_mut()
    }

    /// The release checker.
    pub fn checker(&self) -> &Checker {
        &self.checker
    }

    /// The release checker, mutably (to set when timing checks start).
    pub fn checker_mut(&mut self) -> &mut Checker {
        &mut self.checker
    }

    /// The network (model, counters, per-host receive drops; a sharded run's counters are
    /// merged into the first shard's after each run, its links are [`Sim::link_count`]).
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The network, mutably (e.g. to look up a link's base latency).
    pub fn network_mut(&mut self) -> &mut Network {
        &mut self.network
    }

    /// Driver counters.
    pub fn stats(&self) -> &SimStats {
        &self.stats
    }

    /// A hash of every delivery (time, source, target, bytes) and release so far (of a
    /// sharded run: each shard's, folded in shard order).
    pub fn trace_hash(&self) -> u64 {
        self.twins
            .iter()
            .fold(self.trace, |hash, twin| fold(hash, twin.trace))
    }

    /// Events waiting in the heap (of every shard).
    pub fn pending_events(&self) -> usize {
        self.shards().map(|shard| shard.queue.len()).sum()
    }

    /// Links the network has created (of every shard: each holds its sources' links).
    pub fn link_count(&self) -> usize {
        self.shards().map(|shard| shard.network.link_count()).sum()
    }

    /// This simulation, then the other shards of its run (none unless sharded).
    fn shards(&self) -> impl Iterator<Item = &Self> {
        core::iter::once(self).chain(&self.twins)
    }

    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        for index in 0..self.hosts.len() {
            let node = u32::try_from(index).expect("node ids fit in u32");
            if self.shard.as_ref().is_none_or(|shard| shard.owns(node)) {
                self.drain(index);
            }
        }
    }

    fn push(&mut self, at: u64, action: Action) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(at, seq, action);
    }

    fn step_inner(&mut self, until: u64) -> bool {
        let Some((at, action)) = self.queue.pop_until(until) else {
            return false;
        };
        assert!(at >= self.now, "time went backwards: {at} < {}", self.now);
        self.now = at;
        self.stats.events += 1;
        match action {
            Action::Arrive { to, from, payload } => self.on_arrive(to, from, payload),
            Action::Deliver { to, from, payload } => self.on_deliver(to, from, payload),
            Action::Timer { node, generation } => self.on_timer(node, generation),
            Action::Writable { node } => self.on_writable(node),
            Action::Command { node, command } => self.on_command(node, command),
            Action::Kill { node } => self.on_kill(node),
            Action::Pause { node } => self.on_pause(node),
            Action::Resume { node } => self.on_resume(node),
        }
        true
    }

    /// A copy that reached `to`'s receive buffer at `now - recv_cost_ns`. Copies reach each
    /// host in arrival order (the events are keyed at arrival plus a constant), so the receive
    /// queue sees exactly the sequence it would see at arrival time; when the queue was idle
    /// the handler runs now, else a `Deliver` waits for the queue.
    fn on_arrive(&mut self, to: u32, from: u32, payload: Rc<Payload>) {
        match self.hosts[to as usize].state {
            HostState::Dead => return self.network.count_drop(NetDrop::Dead),
            HostState::Paused => return self.hold_while_paused(to, from, payload),
            HostState::Up => {}
        }
        let arrived = self.now - self.network.model().recv_cost_ns;
        match self.network.receive(arrived, self.hosts[to as usize].vm) {
            Route::Arrive(at) if at == self.now => self.on_deliver(to, from, payload),
            Route::Arrive(at) => {
                debug_assert!(at > self.now);
                self.push(at, Action::Deliver { to, from, payload });
            }
            Route::Drop(_) => {}
        }
    }

    fn on_deliver(&mut self, to: u32, from: u32, payload: Rc<Payload>) {
        match self.hosts[to as usize].state {
            HostState::Dead => return self.network.count_drop(NetDrop::Dead),
            HostState::Paused => return self.hold_while_paused(to, from, payload),
            HostState::Up => {}
        }
        self.trace = fold(
            fold(
                fold(self.trace, self.now),
                u64::from(from) << 32 | u64::from(to),
            ),
            payload.hash,
        );
        let index = to as usize;
        let host = &mut self.hosts[index];
        let local = host.clock.read(self.now);
        host.recent[host.recent_next] = (local.as_nanos(), self.now);
        host.recent_next = (host.recent_next + 1) % RECENT_RECEIPTS;
        host.node
            .handle_datagram(local, NodeId(from), &payload.bytes);
        self.stats.datagrams += 1;
        self.after_handler(index);
    }

    fn on_timer(&mut self, node: u32, generation: u64) {
        let index = node as usize;
        let now = self.now;
        let host = &mut self.hosts[index];
        host.timers_queued.take(generation);
        if generation != host.timer_generation || host.state != HostState::Up {
            // Replaced by a newer timeout, or the node is down (a paused node's timer is
            // re-armed on resume).
            self.stats.stale_timers += 1;
            return;
        }
        let deadline = host.timer.expect("a live timer generation has a deadline");
        let local = host.clock.read(now);
        if local < deadline {
            // The inverse clock model undershot; try again when the clock should be there.
            self.stats.early_timers += 1;
            let wait = (deadline.as_nanos() - local.as_nanos()).max(1);
            host.timers_queued.record(deadline, generation);
            self.push(now + wait, Action::Timer { node, generation });
            return;
        }
        if let Some(until) = self.network.paused_until(host.vm, now) {
            // The host is paused (`NetModel::pauses`): the timer fires when it resumes.
            host.timers_queued.record(deadline, generation);
            self.push(until, Action::Timer { node, generation });
            return;
        }
        if host.timer_spin_at == now {
            host.timer_spins += 1;
            assert!(
                host.timer_spins < TIMER_SPINS_MAX,
                "node {node} keeps asking for a timeout at {deadline:?}"
            );
        } else {
            host.timer_spin_at = now;
            host.timer_spins = 0;
        }
        host.timer = None;
        host.invalidate_timer();
        host.node.handle_timeout(local);
        self.stats.timeouts += 1;
        self.after_handler(index);
    }

    fn on_writable(&mut self, node: u32) {
        let index = node as usize;
        let host = &mut self.hosts[index];
        host.writable_queued = false;
        if host.state != HostState::Up {
            // A dead node sends nothing; a paused one drains when it resumes.
            return;
        }
        if let Some(until) = self.network.paused_until(host.vm, self.now) {
            host.writable_queued = true;
            self.push(until, Action::Writable { node });
            return;
        }
        self.drain(index);
    }

    fn on_command(&mut self, node: u32, command: Command) {
        let index = node as usize;
        if self.hosts[index].state != HostState::Up {
            return;
        }
        let host = &mut self.hosts[index];
        let local = host.clock.read(self.now);
        command(host.node.as_mut(), local);
        self.stats.commands += 1;
        self.after_handler(index);
    }

    fn on_kill(&mut self, node: u32) {
        if self.now >= self.faults_cancelled_from {
            return;
        }
        let host = &mut self.hosts[node as usize];
        host.state = HostState::Dead;
        host.timer = None;
        host.invalidate_timer();
        let dropped = host.inbox.len();
        host.inbox.clear();
        for _ in 0..dropped {
            self.network.count_drop(NetDrop::Dead);
        }
    }

    fn on_pause(&mut self, node: u32) {
        let host = &mut self.hosts[node as usize];
        // (Its resume then finds the node up, and does nothing.)
        if host.state == HostState::Up && self.now < self.faults_cancelled_from {
            host.state = HostState::Paused;
        }
    }

    fn on_resume(&mut self, node: u32) {
        let index = node as usize;
        if self.hosts[index].state != HostState::Paused {
            return;
        }
        self.hosts[index].state = HostState::Up;
        let inbox = core::mem::take(&mut self.hosts[index].inbox);
        for (from, payload) in inbox {
            if let Route::Arrive(at) = self.network.receive(self.now, self.hosts[index].vm) {
                self.push(
                    at,
                    Action::Deliver {
                        to: node,
                        from,
                        payload,
                    },
                );
            }
        }
        // Re-arm the timer that could not fire while paused.
        let host = &mut self.hosts[index];
        if let Some(deadline) = host.timer {
            // Events queued while paused were dropped as stale: always a new one.
            let generation = host.new_timer(deadline);
            let at = host.clock.true_at(deadline, self.now);
            self.push(at, Action::Timer { node, generation });
        }
        // Send what the outbox kept while the socket was full (a no-op when it holds none).
        self.drain(index);
    }

    fn hold_while_paused(&mut self, to: u32, from: u32, payload: Rc<Payload>) {
        let limit = match self.config.model.rx_buffer_packets {
            0 => PAUSED_INBOX_MAX,
            limit => limit as usize,
        };
        let host = &mut self.hosts[to as usize];
        if self.config.pause_mode == PauseMode::Drop {
            return self.network.count_drop(NetDrop::Paused);
        }
        if host.inbox.len() >= limit {
            return self.network.count_drop(NetDrop::RxBufferFull);
        }
        host.inbox.push((from, payload));
    }

    fn after_handler(&mut self, index: usize) {
        if self.config.check_invariants {
            let host = &mut self.hosts[index];
            host.handlers_since_check += 1;
            if host.handlers_since_check >= self.config.invariants_every {
                host.handlers_since_check = 0;
                host.node.check_invariants();
            }
        }
        self.drain(index);
    }

    /// Drains the pollers of node `index` in the contract's order.
    fn drain(&mut self, index: usize) {
        let now_true = self.now;
        let node = u32::try_from(index).expect("node ids fit in u32");
        let local = self.hosts[index].clock.last();
        let recv_cost_ns = self.network.model().recv_cost_ns;
        // Transmits: copy the borrowed destinations out, share one payload among the copies.
        // Only while the VM's socket is writable: the rest waits in the node's outbox.
        loop {
            let host = &mut self.hosts[index];
            if let Some(wait) = self.network.unwritable_for_ns(now_true, host.vm) {
                if !host.writable_queued {
                    host.writable_queued = true;
                    self.push(now_true + wait, Action::Writable { node });
                }
                break;
            }
            let Some(transmit) = host.node.poll_transmit(local) else {
                break;
            };
            self.scratch.clear();
            self.scratch.extend_from_slice(transmit.destinations);
            let payload = Rc::new(Payload::new(transmit.payload));
            self.stats.transmits += 1;
            let bytes = payload.bytes.len();
            for position in 0..self.scratch.len() {
                let target = self.scratch[position].0;
                assert!(
                    (target as usize) < self.hosts.len(),
                    "node {node} sent to unknown node {target}"
                );
                assert_ne!(target, node, "node {node} sent to itself");
                let (from_vm, to_vm) = (self.hosts[index].vm, self.hosts[target as usize].vm);
                if let Route::Arrive(at) = self.network.send(now_true, from_vm, to_vm, bytes) {
                    let at = at.saturating_add(recv_cost_ns);
                    // What a sharded run's windows rely on (`Sim::sharded`).
                    debug_assert!(
                        at >= now_true.saturating_add(self.network.model().lookahead_ns()),
                        "a copy from {node} to {target} beat the model's lookahead"
                    );
                    if let Some(shard) = self.shard.as_mut().filter(|shard| !shard.owns(target)) {
                        shard.export(at, target, node, &payload, self.stats.transmits);
                        continue;
                    }
                    let payload = Rc::clone(&payload);
                    self.push(
                        at,
                        Action::Arrive {
                            to: target,
                            from: node,
                            payload,
                        },
                    );
                }
            }
        }
        // Timeout: keep only the latest.
        let host = &mut self.hosts[index];
        let timeout = host.node.poll_timeout();
        if timeout != host.timer {
            host.timer = timeout;
            match timeout {
                None => host.invalidate_timer(),
                Some(deadline) => {
                    if let Some(generation) = host.timers_queued.find(deadline) {
                        host.timer_generation = generation;
                    } else {
                        let generation = host.new_timer(deadline);
                        let at = host.clock.true_at(deadline, now_true);
                        self.push(at, Action::Timer { node, generation });
                    }
                }
            }
        }
        // Events.
        while let Some(event) = self.hosts[index].node.poll_event() {
            self.on_node_event(index, event);
        }
    }

    fn on_node_event(&mut self, index: usize, event: Event) {
        let stats = &mut self.stats;
        match event {
            Event::Released(release) => self.on_release(index, &release),
            Event::Dropped { reason, .. } => stats.node_drops[reason.index()] += 1,
            Event::FailureDetected { .. } => stats.failures_detected += 1,
            Event::FailureCleared { .. } => stats.failures_cleared += 1,
            Event::ParentChanged { .. } => stats.parents_changed += 1,
            Event::GapRequested { .. } => stats.gaps_requested += 1,
            Event::GapSkipped {
                first_packet_seq,
                packets,
            } => {
                stats.gaps_skipped += 1;
                self.hosts[index].note_skipped(first_packet_seq, packets);
            }
            // The packets a book snapshot covered are never released: announced as skipped.
            Event::SnapshotApplied {
                from, packet_seq, ..
            } => self.hosts[index].note_skipped(from, packet_seq.saturating_sub(from)),
            Event::SnapshotRequested { .. } => {}
            // A simulated root restarts from its journal, under its session: never.
            Event::SessionStarted { .. } => {}
            Event::DeadlineOffset { max_owd_ns } => {
                stats.deadline_offsets += 1;
                stats.last_max_owd_ns = max_owd_ns;
            }
            // The inbound path's events; outbound runs have none to count.
            Event::OrderSent { .. }
            | Event::OrderResponse { .. }
            | Event::OrderRefused { .. }
            | Event::ResponsesSkipped { .. }
            | Event::Sequenced(_) => {}
        }
    }

    fn on_release(&mut self, index: usize, release: &Release) {
        self.stats.releases += 1;
        let receiver = u32::try_from(index).expect("node ids fit in u32");
        let released_t = self.now;
        let host = &self.hosts[index];
        let received_local = release.received_local.as_nanos();
        // Newest first: the receipt is a hold time back, a few entries behind the newest.
        // (The ring's newest entries are those before `recent_next`, each half newest last.)
        let (newest, oldest) = host.recent.split_at(host.recent_next);
        let received_t = newest
            .iter()
            .rev()
            .chain(oldest.iter().rev())
            .find(|&&(local, _)| local == received_local)
            .map_or_else(
                || host.clock.true_at(release.received_local, 0),
                |&(_, t)| t,
            );
        let send_x = crate::xt(release.send_time);
        let reference = &self.hosts[self.config.reference.0 as usize].clock;
        let send_t = reference.true_at(Instant::from_nanos(send_x), 0);
        let released_x = crate::xt(release.released);
        self.trace = fold(
            fold(fold(self.trace, u64::from(receiver)), release.packet_seq),
            released_x,
        );
        let sample = ReleaseSample {
            receiver,
            packet_seq: release.packet_seq,
            sequence: release.sequence,
            messages: release.messages,
            send_x,
            send_t,
            received_x: crate::xt(release.received),
            released_x,
            received_t: received_t.min(released_t),
            released_t,
            late: release.late,
            recovered: release.recovered,
        };
        let deadline_x = crate::xt(release.deadline);
        let skipped = core::mem::take(&mut self.hosts[index].skipped);
        match self.shard.as_mut() {
            Some(shard) => shard.samples.push(Sample {
                deadline_x,
                skipped,
                release: sample,
            }),
            None => check_and_measure(
                &mut self.checker,
                self.metrics.as_mut(),
                deadline_x,
                skipped,
                &sample,
            ),
        }
    }
}

/// Hands a release to `checker` and, when measuring, to `metrics` (a sharded run's twins'
/// releases reach them from whichever thread is idle, `runtime/shard.rs`). `skipped` is the
/// packets `[from, to)` the gateway skipped just before this release, or `(0, 0)`.
fn check_and_measure(
    checker: &mut Checker,
    metrics: Option<&mut Metrics>,
    deadline_x: u64,
    skipped: (u64, u64),
    sample: &ReleaseSample,
) {
    if skipped.0 != 0 {
        checker.on_skip(sample.receiver, skipped.0, skipped.1);
    }
    checker.on_release(
        sample.receiver,
        sample.packet_seq,
        deadline_x,
        sample.released_x,
        sample.released_t,
        sample.late,
    );
    if let Some(metrics) = metrics {
        metrics.on_release(sample);
    }
}

impl Payload {
    fn new(bytes: &[u8]) -> Self {
        let mut hash = bytes.len() as u64;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            hash = fold(
                hash,
                u64::from_le_bytes(chunk.try_into().expect("8-byte chunk")),
            );
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        hash = fold(hash, u64::from_le_bytes(tail));
        Self {
            hash,
            bytes: bytes.into(),
        }
    }
}

/// Folds `value` into a running hash.
fn fold(hash: u64, value: u64) -> u64 {
    splitmix64(hash.rotate_left(5) ^ value)
}

impl core::fmt::Debug for Sim {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.config.seed)
            .field("now", &self.now)
            .field("nodes", &self.hosts.len())
            .field("pending", &self.queue.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::parse_seed_range;

    #[test]
    fn sim_seed_takes_a_seed_or_a_range() {
        assert_eq!(parse_seed_range("7"), Some(vec![7]));
        assert_eq!(parse_seed_range("0x10"), Some(vec![16]));
        assert_eq!(parse_seed_range("3-6"), Some(vec![3, 4, 5, 6]));
        assert_eq!(parse_seed_range("0x1-0x3"), Some(vec![1, 2, 3]));
        assert_eq!(parse_seed_range("5-5"), Some(vec![5]));
        for bad in ["6-3", "x", "1-", "-1", "1-2-3", ""] {
            assert_eq!(parse_seed_range(bad), None, "{bad:?}");
        }
    }
}
