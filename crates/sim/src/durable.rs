//! The durable root under crashes (issue 9): the real [`proto::Root`] with its journal on,
//! driven through the simulator with a simulated disk, killed at random simulated times under
//! load and restarted from what the disk kept.
//!
//! [`DurableRoot`] is the root's journal driver as a simulated node (the sans-IO obligations
//! of `proto::journal`): after every handler it appends the root's records to a [`Disk`],
//! runs one group-commit fsync at a time (its latency drawn from [`DiskModel::fsync_ns`]),
//! reports durability to the root when the fsync completes, answers the root's journal reads
//! after [`DiskModel::read_ns`], and writes a snapshot every [`DiskModel::snapshot_every`]
//! records (taken when every record is durable, written at the next turn, once that turn's
//! transmits have left). A crash ([`Disk::crash`]) keeps the synced records plus a random
//! prefix of the unsynced ones, as a real disk may.
//!
//! [`run_crashes`] builds a tree of real nodes whose gateways trade the paper's workload,
//! kills the root [`CrashConfig::crashes`] times, restarts it with [`Root::recover`] from the
//! disk (snapshot plus the records after it) through [`Sim::restart`], and checks:
//!
//! - every order a gateway got a response for before a crash is in the journal the root
//!   recovered from (acknowledged means durable);
//! - the recovered root's state (book, order ids, match numbers, stream position) equals a
//!   replay of the kept journal from nothing and, when the live root passed through that
//!   position, the live root's state there;
//! - every gateway released `packet_seq` 1, 2, 3, ... exactly once, in order, with nothing
//!   skipped (the [`crate::Checker`] panics otherwise), and its book rebuilt from the released
//!   market data equals the root's engine book once the market settles;
//! - every request in the final journal got its responses at every gateway of its
//!   participant, each exactly once (recovered roots re-send what a crash may have swallowed;
//!   gateways drop copies);
//! - at the end the whole journal replays to the live root's state.
//!
//! A failed check is an `Err` that names the seed: rerun with `SIM_SEED=<seed>`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use proto::book::{BookBuilder, BookError};
use proto::journal::{JournalRead, Record};
use proto::plan::{Plan, PlanConfig, Role, Shape};
use proto::strategy::{PaperWorkload, Watched, WorkloadConfig};
use proto::{Delivery, Event, Gateway, Instant, Node, NodeConfig, NodeId, Proxy, Root, Transmit};

use crate::checker::OnViolation;
use crate::clock::ClockModel;
use crate::inbound::{Log, Recorded};
use crate::network::NetModel;
use crate::rng::{Dist, Purpose, SimRng, splitmix64};
use crate::runtime::{Sim, SimConfig};

/// The simulated disk's timing and the driver's snapshot policy.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskModel {
    /// Duration of one fsync (one group commit), ns.
    pub fsync_ns: Dist,
    /// Time to read records back for a journal read, ns.
    pub read_ns: u64,
    /// Records between two snapshots at least (0: never snapshot).
    pub snapshot_every: u64,
}

impl Default for DiskModel {
    /// An fsync of about 1.5 ms (this machine's disk, see `cargo bench -p journal`), 50 µs
    /// reads, a snapshot every 200 records.
    fn default() -> Self {
        Self {
            fsync_ns: Dist::LogNormal {
                median: 1_500_000.0,
                sigma: 0.3,
            },
            read_ns: 50_000,
            snapshot_every: 200,
        }
    }
}

/// What the simulated disk holds: it survives the root's crashes.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    /// Every record written, by index.
    pub records: Vec<Vec<u8>>,
    /// Records `..synced` are durable.
    pub synced: u64,
    /// The last snapshot written.
    pub snapshot: Option<Vec<u8>>,
}

impl Disk {
    /// What a crash leaves: the synced records plus a random prefix of the written but
    /// unsynced ones. Returns the records kept.
    pub fn crash(&mut self, rng: &mut SimRng) -> u64 {
        let written = self.records.len() as u64;
        let kept = self.synced + rng.below(written - self.synced + 1);
        self.records.truncate(kept as usize);
        self.synced = kept;
        kept
    }

    /// The journal position of the snapshot (0 without one).
    pub fn snapshot_position(&self) -> u64 {
        self.snapshot
            .as_deref()
            .and_then(proto::journal::snapshot_position)
            .unwrap_or(0)
    }

    /// A root rebuilt from this disk: its snapshot, then the records after it.
    pub fn recover(&self, plan: Arc<Plan>, config: NodeConfig) -> Result<Root, String> {
        let from = self.snapshot_position() as usize;
        let records = self
            .records
            .get(from..)
            .ok_or_else(|| format!("snapshot at {from} beyond the journal"))?;
        Root::recover(plan, config, self.snapshot.as_deref(), records)
    }
}

/// A journaling root and its driver over a simulated [`Disk`].
#[derive(Debug)]
pub struct DurableRoot {
    /// The root.
    pub root: Root,
    /// Its disk (take it after a crash).
    pub disk: Disk,
    model: DiskModel,
    rng: SimRng,
    /// The fsync in flight: when it completes (local time) and the records it covers.
    sync: Option<(Instant, u64)>,
    /// Journal reads in flight, by completion time.
    reads: VecDeque<(Instant, JournalRead)>,
    /// A snapshot taken at the last turn, written at the next.
    snapshot_due: Option<Vec<u8>>,
    last_snapshot: u64,
    /// Hash of the root's snapshot at each journal position it passed through.
    states: BTreeMap<u64, u64>,
    /// fsyncs completed.
    pub syncs: u64,
    /// Journal reads answered.
    pub journal_reads: u64,
}

impl DurableRoot {
    /// Drives `root` (journal on) over `disk`; `rng` draws the fsync latencies.
    pub fn new(root: Root, disk: Disk, model: DiskModel, rng: SimRng) -> Self {
        let position = root.journal_position().map_or(0, |p| p.0);
        let mut states = BTreeMap::new();
        states.insert(position, state_hash(&root));
        Self {
            root,
            last_snapshot: disk.snapshot_position(),
            disk,
            model,
            rng,
            sync: None,
            reads: VecDeque::new(),
            snapshot_due: None,
            states,
            syncs: 0,
            journal_reads: 0,
        }
    }

    /// Hash of the live root's state at journal position `position`, if it passed through it
    /// at the end of a turn.
    pub fn state_at(&self, position: u64) -> Option<u64> {
        self.states.get(&position).copied()
    }

    /// Before a handler: writes the snapshot of the last turn (its transmits have left), and
    /// completes the fsync and the journal reads that are due.
    fn begin_turn(&mut self, now: Instant) {
        if let Some(snapshot) = self.snapshot_due.take() {
            self.disk.snapshot = Some(snapshot);
        }
        if let Some((done, upto)) = self.sync
            && done <= now
        {
            self.sync = None;
            self.disk.synced = upto;
            self.syncs += 1;
            self.root.handle_durable(now, upto);
        }
        while self.reads.front().is_some_and(|(done, _)| *done <= now) {
            let (_, read) = self.reads.pop_front().expect("peeked");
            let range = read.records.start as usize..read.records.end as usize;
            let records = self.disk.records.get(range).unwrap_or(&[]);
            self.root.handle_journal_records(now, read.id, records);
            self.journal_reads += 1;
        }
    }

    /// After a handler: appends the new records, starts an fsync if none runs, queues journal
    /// reads, takes a snapshot when due.
    fn end_turn(&mut self, now: Instant) {
        while let Some(record) = self.root.poll_journal() {
            let index = proto::journal::record_index(record);
            assert_eq!(
                index,
                Some(self.disk.records.len() as u64),
                "records come in order"
            );
            self.disk.records.push(record.to_vec());
        }
        let written = self.disk.records.len() as u64;
        if self.sync.is_none() && written > self.disk.synced {
            // Group commit: one fsync for everything written so far.
            let ns = self.rng.sample(&self.model.fsync_ns).max(1.0) as u64;
            self.sync = Some((now + core::time::Duration::from_nanos(ns), written));
        }
        while let Some(read) = self.root.poll_journal_read() {
            let done = now + core::time::Duration::from_nanos(self.model.read_ns);
            self.reads.push_back((done, read));
        }
        if let Some((produced, durable)) = self.root.journal_position() {
            self.states
                .entry(produced)
                .or_insert_with(|| state_hash(&self.root));
            let every = self.model.snapshot_every;
            if every > 0 && produced == durable && produced >= self.last_snapshot + every {
                self.snapshot_due = Some(self.root.snapshot());
                self.last_snapshot = produced;
            }
        }
    }
}

fn state_hash(root: &Root) -> u64 {
    let mut hash = 0u64;
    for chunk in root.state().chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        hash = splitmix64(hash.rotate_left(7) ^ u64::from_le_bytes(word));
    }
    hash
}

impl Node for DurableRoot {
    fn id(&self) -> NodeId {
        self.root.id()
    }

    fn handle_datagram(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        self.begin_turn(now);
        self.root.handle_datagram(now, from, bytes);
        self.end_turn(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.begin_turn(now);
        if self.root.poll_timeout().is_some_and(|at| at <= now) {
            self.root.handle_timeout(now);
        }
        self.end_turn(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>> {
        self.root.poll_transmit(now)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [
            self.root.poll_timeout(),
            self.sync.map(|(done, _)| done),
            self.reads.front().map(|(done, _)| *done),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.root.poll_event()
    }

    fn check_invariants(&self) {
        self.root.check_invariants();
        assert!(self.disk.synced <= self.disk.records.len() as u64);
        let (produced, durable) = self.root.journal_position().expect("journal on");
        assert_eq!(produced, self.disk.records.len() as u64);
        assert!(durable <= self.disk.synced);
        assert!(self.disk.snapshot_position() <= self.disk.synced);
    }
}

/// What a gateway's participant sees: the book rebuilt from its releases, in order.
#[derive(Debug, Default)]
struct Observed {
    book: BookBuilder,
    error: Option<BookError>,
    first: Option<u64>,
}

/// The longest a crash run waits for its gateways' clocks to sync before its first crash.
const SYNC_WAIT_NS_MAX: u64 = 2_000_000_000;

/// One crash run.
#[derive(Clone, Debug)]
pub struct CrashConfig {
    /// The seed: network, clocks, workload, crash times, disk.
    pub seed: u64,
    /// Participants (one gateway each, or two with receiver hedging).
    pub participants: u32,
    /// Root crashes.
    pub crashes: u32,
    /// Load before each crash: drawn uniformly from this range, ns.
    pub uptime_ns: (u64, u64),
    /// Time the root stays down: drawn uniformly from this range, ns.
    pub downtime_ns: (u64, u64),
    /// Load after the last restart, then quiet time for the market to settle, ns.
    pub tail_ns: (u64, u64),
    /// The workload of every gateway.
    pub workload: WorkloadConfig,
    /// Node parameters (the root's journal is switched on).
    pub node: NodeConfig,
    /// The disk.
    pub disk: DiskModel,
    /// The network (loss 0 by default: a lost response is not the root's to re-send).
    pub model: NetModel,
}

impl CrashConfig {
    /// Seed-dependent defaults, swarm-style: the fsync latency (50 µs to 2 ms), the
    /// durability backlog (2, 64 or 1024 records), the snapshot interval and the rewinder
    /// ring (tiny on odd seeds, so retransmissions come from the journal) vary with the seed.
    pub fn new(seed: u64) -> Self {
        let mut rng = SimRng::derive(seed, Purpose::Config, 0xD15C);
        let mut node = NodeConfig {
            journal: true,
            ..NodeConfig::default()
        };
        node.journal_records_pending_max = [2, 64, 1024][rng.below(3) as usize];
        if seed % 2 == 1 {
            node.rewinder_packets = 4;
        }
        let fsync = 50_000 + rng.below(1_950_000);
        let disk = DiskModel {
            fsync_ns: Dist::LogNormal {
                median: fsync as f64,
                sigma: 0.3,
            },
            read_ns: 50_000,
            snapshot_every: [0, 50, 500][rng.below(3) as usize],
        };
        Self {
            seed,
            participants: 12,
            crashes: 3,
            uptime_ns: (5_000_000, 40_000_000),
            downtime_ns: (1_000_000, 5_000_000),
            tail_ns: (30_000_000, 150_000_000),
            workload: WorkloadConfig {
                rate_per_s: 1_500.0,
                overlap: (1, 2),
                resting_max: 24,
                burst_factor: 1.0,
                ..WorkloadConfig::default()
            },
            node,
            disk,
            model: NetModel {
                loss: 0.0,
                ..NetModel::aws_c5()
            },
        }
    }
}

/// What one crash run did (all checks passed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// The seed.
    pub seed: u64,
    /// Per crash: (true time ns, records written, synced, kept).
    pub crashes: Vec<(u64, u64, u64, u64)>,
    /// Orders acknowledged before some crash (each checked durable).
    pub acknowledged_before_crashes: u64,
    /// Journal records at the end.
    pub records: u64,
    /// Requests in the journal at the end.
    pub orders: u64,
    /// Packets every gateway released.
    pub packets: u64,
    /// Responses recovered roots re-sent.
    pub responses_resent: u64,
    /// Retransmission reads served from the journal.
    pub journal_reads: u64,
    /// Recoveries that started from a snapshot.
    pub from_snapshot: u64,
    /// Resting orders at the end.
    pub resting: u64,
}

fn uniform(rng: &mut SimRng, (lo, hi): (u64, u64)) -> u64 {
    lo + rng.below(hi.saturating_sub(lo).max(1))
}

/// `(participant, client order id)` of every request in `records`.
fn journaled(records: &[Vec<u8>]) -> Result<BTreeSet<(u32, u64)>, String> {
    let mut orders = BTreeSet::new();
    for bytes in records {
        for order in Record::parse(bytes)?.orders {
            let message =
                wire::order::Repr::parse(order).map_err(|e| format!("journaled order: {e:?}"))?;
            orders.insert(message.header().dedupe_key());
        }
    }
    Ok(orders)
}

/// Runs `config`: load, crash, recover, ..., settle; checks every property in the module
/// docs. `Err` describes the first broken one and names the seed.
pub fn run_crashes(config: &CrashConfig) -> Result<CrashReport, String> {
    let seed = config.seed;
    let fail = |what: String| format!("seed {seed}: {what} (rerun with SIM_SEED={seed})");
    let mut node = config.node.clone();
    node.journal = true;
    // Two layers of the smallest fan-out (at least 4) that holds one gateway per participant.
    let fanout = proto::plan::fanout_for(2, config.participants).max(4);
    let plan_config = PlanConfig {
        shape: Shape::Explicit { depth: 2, fanout },
        ..PlanConfig::new(config.participants)
    };
    let plan = Arc::new(Plan::new(&plan_config).map_err(|e| e.to_string())?);
    let root_id = plan.root();
    let mut sim = Sim::new(SimConfig {
        reference: root_id,
        on_violation: OnViolation::Panic,
        ..SimConfig::new(seed).with_model(config.model.clone())
    });
    // Exactly-once in-order release is the property here; deadlines are other tests' job.
    sim.checker_mut().check_timing_from(u64::MAX);
    let log = Rc::new(RefCell::new(Log::default()));
    let quiet = Arc::new(AtomicBool::new(false));
    let mut observed = Vec::new();
    let mut clock_rng = SimRng::derive(seed, Purpose::Config, 0x1B0B);
    let mut rng = SimRng::derive(seed, Purpose::User, 0xC4A5);
    let disk_rng =
        |incarnation: u64| SimRng::derive(seed, Purpose::User, 0xD15C_0000 + incarnation);
    for spec in plan.nodes() {
        let node_box: Box<dyn crate::SimNode> = match spec.role {
            Role::Root => {
                let root = Root::new(Arc::clone(&plan), node.clone())?;
                Box::new(DurableRoot::new(
                    root,
                    Disk::default(),
                    config.disk.clone(),
                    disk_rng(0),
                ))
            }
            Role::Proxy => Box::new(Proxy::new(spec.id, Arc::clone(&plan), node.clone())?),
            Role::Gateway => {
                let participant = spec.participant.expect("a gateway serves a participant");
                let o = Arc::new(Mutex::new(Observed::default()));
                observed.push((spec.id, participant, Arc::clone(&o)));
                let inner = PaperWorkload::new(config.workload.clone(), seed, participant)?;
                let strategy = Watched::new(inner, Arc::clone(&quiet), move |release, data| {
                    if let Ok(mut o) = o.lock() {
                        o.first.get_or_insert(release.packet_seq);
                        if let Err(e) = o.book.apply_packet(data) {
                            o.error.get_or_insert(e);
                        }
                    }
                });
                let gateway = Gateway::new(
                    spec.id,
                    Arc::clone(&plan),
                    node.clone(),
                    Delivery::Strategy(Box::new(strategy)),
                )?;
                Box::new(Recorded::gateway(gateway, Rc::clone(&log), participant))
            }
        };
        let clock = ClockModel::for_role(spec.role, &mut clock_rng, 20_000, 2.0);
        sim.add_node(node_box, clock);
    }

    let mut report = CrashReport {
        seed,
        ..CrashReport::default()
    };
    // A gateway trades once its clock has synced (it refuses orders until then), ~150 ms in:
    // the crashes come after.
    let gateways: Vec<NodeId> = plan.gateways().map(NodeId).collect();
    let synced = |sim: &Sim| {
        gateways.iter().all(|&id| {
            sim.node::<Recorded<Gateway>>(id)
                .is_some_and(|g| g.inner.clock().is_synced())
        })
    };
    while !synced(&sim) {
        if sim.now() > SYNC_WAIT_NS_MAX {
            return Err(fail("the gateways' clocks never synced".to_string()));
        }
        sim.run_until(sim.now() + 1_000_000);
    }
    let mut acked_before = BTreeSet::new();
    for incarnation in 1..=u64::from(config.crashes) {
        let crash_at = sim.now() + uniform(&mut rng, config.uptime_ns);
        sim.kill(root_id, crash_at);
        sim.run_until(crash_at);
        let acked: BTreeSet<(u32, u64)> = log
            .borrow()
            .responses
            .iter()
            .map(|(_, p, r)| (*p, r.client_order_id))
            .collect();
        let dead = sim
            .node_mut::<DurableRoot>(root_id)
            .ok_or("the root is a DurableRoot")?;
        let written = dead.disk.records.len() as u64;
        let synced = dead.disk.synced;
        report.journal_reads += dead.journal_reads;
        report.responses_resent += dead.root.responses_resent();
        let mut disk = core::mem::take(&mut dead.disk);
        let kept = disk.crash(&mut rng);
        let live_state = dead.state_at(kept);
        report.crashes.push((crash_at, written, synced, kept));

        let durable = journaled(&disk.records).map_err(&fail)?;
        let lost: Vec<_> = acked.difference(&durable).take(5).collect();
        if !lost.is_empty() {
            return Err(fail(format!(
                "crash {incarnation}: acknowledged but not in the recovered journal: {lost:?}"
            )));
        }
        acked_before.extend(acked);

        sim.run_until(sim.now() + uniform(&mut rng, config.downtime_ns));
        let recovered = disk
            .recover(Arc::clone(&plan), node.clone())
            .map_err(|e| fail(format!("crash {incarnation}: recovery failed: {e}")))?;
        report.from_snapshot += u64::from(disk.snapshot.is_some());
        let replayed = Root::recover(Arc::clone(&plan), node.clone(), None, &disk.records)
            .map_err(|e| fail(format!("crash {incarnation}: replay failed: {e}")))?;
        if recovered.state() != replayed.state() {
            return Err(fail(format!(
                "crash {incarnation}: the recovered root (snapshot at {} + records) differs from \
                 a replay of the {kept} kept records",
                disk.snapshot_position()
            )));
        }
        if live_state.is_some_and(|h| h != state_hash(&recovered)) {
            return Err(fail(format!(
                "crash {incarnation}: the recovered root differs from the live root at journal \
                 position {kept}"
            )));
        }
        if recovered.journal_position() != Some((kept, kept)) {
            return Err(fail(format!(
                "crash {incarnation}: recovered at {:?}, kept {kept}",
                recovered.journal_position()
            )));
        }
        let next = DurableRoot::new(recovered, disk, config.disk.clone(), disk_rng(incarnation));
        sim.restart(Box::new(next));
    }
    let tail = uniform(&mut rng, config.tail_ns);
    sim.run_until(sim.now() + tail);
    // Settle: strategies stop, the last orders reach the engine, the stream drains.
    quiet.store(true, Ordering::Relaxed);
    sim.run_until(sim.now() + 200_000_000);

    let durable_root = sim
        .node::<DurableRoot>(root_id)
        .ok_or("the root is a DurableRoot")?;
    report.journal_reads += durable_root.journal_reads;
    report.responses_resent += durable_root.root.responses_resent();
    let root = &durable_root.root;
    let records = &durable_root.disk.records;
    report.records = records.len() as u64;
    let all = journaled(records).map_err(&fail)?;
    report.orders = all.len() as u64;
    report.acknowledged_before_crashes = acked_before.len() as u64;
    if !acked_before.is_subset(&all) {
        return Err(fail(
            "an order acknowledged before a crash left the journal".into(),
        ));
    }
    let replayed = Root::recover(Arc::clone(&plan), node.clone(), None, records)
        .map_err(|e| fail(format!("final replay failed: {e}")))?;
    if replayed.state() != root.state() {
        return Err(fail(
            "the whole journal does not replay to the live root".into(),
        ));
    }

    // Responses: each journaled request answered at each of its gateways, exactly once.
    let log = log.borrow();
    let mut answered: BTreeMap<(u32, u64), BTreeSet<u32>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (gateway, participant, r) in &log.responses {
        let key = (
            *gateway,
            r.client_order_id,
            r.msg_type,
            r.order,
            r.leaves_shares,
        );
        if !seen.insert(key) {
            return Err(fail(format!(
                "gateway {gateway} got response {key:?} twice"
            )));
        }
        answered
            .entry((*participant, r.client_order_id))
            .or_default()
            .insert(*gateway);
    }
    for &(participant, client_order_id) in &all {
        for gateway in plan.participant_gateways(participant) {
            let got = answered
                .get(&(participant, client_order_id))
                .is_some_and(|g| g.contains(&gateway.0));
            if !got {
                let record = records.iter().position(|r| {
                    journaled(core::slice::from_ref(r))
                        .is_ok_and(|o| o.contains(&(participant, client_order_id)))
                });
                return Err(fail(format!(
                    "journaled request {participant}/{client_order_id} (record {record:?}) got \
                     no response at gateway {}; crashes (time, written, synced, kept): {:?}; \
                     {} responses re-sent; network {:?}; pending_max {}",
                    gateway.0,
                    report.crashes,
                    report.responses_resent,
                    sim.network().stats(),
                    node.journal_records_pending_max
                )));
            }
        }
    }

    // Streams and books.
    if sim.stats().gaps_skipped > 0 {
        return Err(fail(format!(
            "{} packets skipped",
            sim.stats().gaps_skipped
        )));
    }
    let last = root.next_packet_seq() - 1;
    report.packets = last;
    let root_side = |side| root.depth(lob::SymbolIndex(0), side, usize::MAX);
    let (bids, asks) = (root_side(lob::Side::Buy), root_side(lob::Side::Sell));
    report.resting = root.resting_orders() as u64;
    // Every packet sent more than 20 ms ago must have been released everywhere; the newest
    // (idle) packets may still wait for their fsync, the network or their release deadline.
    // The root's clock is perfect: its exchange time is true time.
    let settled_before = sim.now().saturating_sub(20_000_000);
    let mut due = 0;
    for bytes in records {
        for packet in Record::parse(bytes).map_err(&fail)?.packets {
            let data = wire::parse_market_data(packet)
                .map_err(|e| fail(format!("journaled packet: {e:?}")))?;
            if data.header.send_time.as_nanos() <= settled_before {
                due = due.max(data.header.packet_seq);
            }
        }
    }
    for (id, _, o) in &observed {
        let o = o.lock().map_err(|_| "a strategy panicked")?;
        let released = sim.checker().next_seq(id.0).map_or(0, |n| n - 1);
        if o.first != Some(1) || released < due || due + 100 < last {
            return Err(fail(format!(
                "gateway {} released {:?}..={released} of 1..={last}, {due} due",
                id.0, o.first
            )));
        }
        if let Some(e) = o.error {
            return Err(fail(format!(
                "gateway {}: the stream contradicts itself: {e:?}",
                id.0
            )));
        }
        let same = o.book.depth(0, wire::Side::Buy, usize::MAX) == bids
            && o.book.depth(0, wire::Side::Sell, usize::MAX) == asks;
        if !same {
            return Err(fail(format!(
                "gateway {}'s book rebuilt from the feed differs from the root's",
                id.0
            )));
        }
    }
    Ok(report)
}
