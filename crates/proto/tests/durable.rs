//! The durable root (issue 9) under crashes: a tree of real nodes runs the paper's workload
//! against a journaling root whose driver keeps an in-memory journal with group commit and a
//! modelled fsync latency. The root is killed at a random point, rebuilt with
//! `Root::recover` from the journal (a durable prefix plus a random number of written but
//! unsynced records, as a crash may leave) and an optional snapshot, and the run goes on.
//!
//! Checks, per crash:
//! - every order a gateway got a response for before the crash is in the recovered journal;
//! - the recovered root's state (book, order ids, match numbers, stream position) equals the
//!   live root's state at the same journal position, and at the end a replay of the whole
//!   journal from nothing equals the live root;
//! - every gateway releases `packet_seq` 1, 2, 3, ... without a gap or a repeat across the
//!   crash, and every copy of a packet anyone received (first sends, retransmissions from the
//!   ring and from the journal) equals the packet in the journal: no contradiction.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use proto::journal::{JournalRead, Record};
use proto::plan::{Plan, PlanConfig, Role};
use proto::strategy::{PaperWorkload, WorkloadConfig};
use proto::{Delivery, Event, Gateway, Instant, Node, NodeConfig, NodeId, Proxy, Root};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Input {
    Deliver {
        to: u32,
        from: u32,
        bytes: Vec<u8>,
    },
    Timer {
        node: u32,
        generation: u64,
    },
    /// A sync the driver started finished: records `0..upto` are durable.
    Synced {
        epoch: u64,
        upto: u64,
    },
    /// A journal read the root asked for is ready.
    Read {
        epoch: u64,
        id: u64,
        start: u64,
        end: u64,
    },
}

struct World {
    plan: Arc<Plan>,
    config: NodeConfig,
    root: Option<Root>,
    /// Root incarnation: inputs of a dead root's driver are ignored.
    epoch: u64,
    nodes: Vec<Option<Box<dyn Node>>>,
    now_ns: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Input)>>,
    inserted: u64,
    timer_generation: Vec<u64>,
    rng: ChaCha8Rng,
    /// Probability (per mille) a market-data datagram from a proxy to a gateway is lost.
    loss_per_mille: u32,
    cut_orders: bool,
    // The driver's journal.
    journal: Vec<Vec<u8>>,
    durable: u64,
    sync_in_flight: bool,
    fsync_ns: u64,
    snapshot: Option<Vec<u8>>,
    /// The live root's state after each drain, by journal position.
    states: BTreeMap<u64, Vec<u8>>,
    journal_reads: u64,
    /// Responses recovered roots re-sent.
    resent: u64,
    // Observations.
    events: Vec<(NodeId, u64, Event)>,
    /// Every market-data datagram delivered to anyone, by packet_seq (retransmission flag
    /// cleared).
    seen: BTreeMap<u64, Vec<u8>>,
}

impl World {
    fn new(seed: u64, config: NodeConfig, workload: WorkloadConfig) -> Self {
        let plan_config = PlanConfig::new(12);
        let plan = Arc::new(Plan::new(&plan_config).unwrap());
        let mut nodes: Vec<Option<Box<dyn Node>>> = Vec::new();
        for spec in plan.nodes() {
            let node: Option<Box<dyn Node>> = match spec.role {
                Role::Root => None,
                Role::Proxy => Some(Box::new(
                    Proxy::new(spec.id, plan.clone(), config.clone()).unwrap(),
                )),
                Role::Gateway => {
                    let participant = spec.participant.unwrap();
                    let strategy = PaperWorkload::new(workload.clone(), seed, participant).unwrap();
                    let delivery = Delivery::Strategy(Box::new(strategy));
                    Some(Box::new(
                        Gateway::new(spec.id, plan.clone(), config.clone(), delivery).unwrap(),
                    ))
                }
            };
            nodes.push(node);
        }
        let n = nodes.len();
        let root = Root::new(plan.clone(), config.clone()).unwrap();
        let mut world = Self {
            plan,
            config,
            root: Some(root),
            epoch: 0,
            nodes,
            now_ns: 1_000 * MS,
            queue: BinaryHeap::new(),
            inserted: 0,
            timer_generation: vec![0; n],
            rng: ChaCha8Rng::seed_from_u64(seed),
            loss_per_mille: 0,
            cut_orders: false,
            journal: Vec::new(),
            durable: 0,
            sync_in_flight: false,
            fsync_ns: 300 * US,
            snapshot: None,
            states: BTreeMap::new(),
            journal_reads: 0,
            resent: 0,
            events: Vec::new(),
            seen: BTreeMap::new(),
        };
        world.states.insert(0, world.root.as_ref().unwrap().state());
        for id in 0..n as u32 {
            world.drain(id);
        }
        world
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.now_ns)
    }

    fn push(&mut self, at: u64, input: Input) {
        self.inserted += 1;
        self.queue.push(Reverse((at, self.inserted, input)));
    }

    fn run_until(&mut self, until_ns: u64) {
        while let Some(Reverse((at, _, _))) = self.queue.peek() {
            if *at > until_ns {
                break;
            }
            let Reverse((at, _, input)) = self.queue.pop().unwrap();
            self.now_ns = self.now_ns.max(at);
            let now = self.now();
            match input {
                Input::Deliver { to, from, bytes } => {
                    if to == 0 {
                        let Some(root) = self.root.as_mut() else {
                            continue;
                        };
                        root.handle_datagram(now, NodeId(from), &bytes);
                    } else {
                        self.node(to).handle_datagram(now, NodeId(from), &bytes);
                    }
                    self.drain(to);
                }
                Input::Timer { node, generation } => {
                    if generation != self.timer_generation[node as usize] {
                        continue;
                    }
                    if node == 0 {
                        let Some(root) = self.root.as_mut() else {
                            continue;
                        };
                        root.handle_timeout(now);
                    } else {
                        self.node(node).handle_timeout(now);
                    }
                    self.drain(node);
                }
                Input::Synced { epoch, upto } => {
                    if epoch != self.epoch {
                        continue;
                    }
                    self.durable = upto;
                    self.sync_in_flight = false;
                    self.root.as_mut().unwrap().handle_durable(now, upto);
                    self.drain(0);
                }
                Input::Read {
                    epoch,
                    id,
                    start,
                    end,
                } => {
                    if epoch != self.epoch {
                        continue;
                    }
                    let records = &self.journal[start as usize..end as usize];
                    let root = self.root.as_mut().unwrap();
                    root.handle_journal_records(now, id, records);
                    self.journal_reads += 1;
                    self.drain(0);
                }
            }
        }
        self.now_ns = self.now_ns.max(until_ns);
    }

    fn node(&mut self, id: u32) -> &mut dyn Node {
        self.nodes[id as usize].as_mut().unwrap().as_mut()
    }

    /// Drains one node's pollers, as a runtime does after every handler; for the root also
    /// the journal: append records, start a group commit, answer journal reads.
    fn drain(&mut self, id: u32) {
        let now = self.now();
        let mut sends = Vec::new();
        let timeout;
        let mut events = Vec::new();
        if id == 0 {
            let root = self.root.as_mut().unwrap();
            while let Some(t) = root.poll_transmit(now) {
                sends.push((t.destinations.to_vec(), t.payload.to_vec()));
            }
            while let Some(record) = root.poll_journal() {
                let index = proto::journal::record_index(record).unwrap();
                assert_eq!(index, self.journal.len() as u64, "records come in order");
                self.journal.push(record.to_vec());
            }
            let reads: Vec<JournalRead> =
                core::iter::from_fn(|| root.poll_journal_read()).collect();
            timeout = root.poll_timeout();
            while let Some(e) = root.poll_event() {
                events.push(e);
            }
            root.check_invariants();
            let position = root.journal_position().unwrap();
            assert_eq!(position.0, self.journal.len() as u64);
            self.states
                .entry(position.0)
                .or_insert_with(|| root.state());
            for read in reads {
                assert!(
                    read.records.end <= self.durable,
                    "reads ask for durable records"
                );
                let at = self.now_ns + 50 * US;
                let input = Input::Read {
                    epoch: self.epoch,
                    id: read.id,
                    start: read.records.start,
                    end: read.records.end,
                };
                self.push(at, input);
            }
            if !self.sync_in_flight && self.journal.len() as u64 > self.durable {
                // Group commit: one sync for everything appended so far.
                self.sync_in_flight = true;
                let input = Input::Synced {
                    epoch: self.epoch,
                    upto: self.journal.len() as u64,
                };
                self.push(self.now_ns + self.fsync_ns, input);
            }
        } else {
            let node = self.node(id);
            while let Some(t) = node.poll_transmit(now) {
                sends.push((t.destinations.to_vec(), t.payload.to_vec()));
            }
            timeout = node.poll_timeout();
            while let Some(e) = node.poll_event() {
                events.push(e);
            }
            node.check_invariants();
        }
        for (destinations, payload) in sends {
            for to in destinations {
                self.route(id, to, &payload);
            }
        }
        self.timer_generation[id as usize] += 1;
        if let Some(at) = timeout {
            let generation = self.timer_generation[id as usize];
            let at = at.as_nanos().max(self.now_ns);
            self.push(
                at,
                Input::Timer {
                    node: id,
                    generation,
                },
            );
        }
        for e in events {
            self.events.push((NodeId(id), self.now_ns, e));
        }
    }

    fn route(&mut self, from: u32, to: NodeId, payload: &[u8]) {
        let kind = wire::classify(payload);
        if kind == wire::Kind::Hop && self.cut_orders {
            return;
        }
        let to_gateway = self.plan.node(to).unwrap().role == Role::Gateway;
        if kind == wire::Kind::MarketData {
            let data = wire::parse_market_data(payload).unwrap();
            let mut bytes = payload.to_vec();
            bytes[wire::market::HEADER_OFFSET + 2] &= !wire::market::RETRANSMISSION;
            let first = self
                .seen
                .entry(data.header.packet_seq)
                .or_insert_with(|| bytes.clone());
            assert_eq!(
                *first, bytes,
                "packet {} differs between copies",
                data.header.packet_seq
            );
            if to_gateway
                && from != 0
                && !data.header.is_retransmission()
                && self.rng.gen_range(0..1000) < self.loss_per_mille
            {
                return;
            }
        }
        let delay = 20 * US + ((from * 31 + to.0 * 17) % 23) as u64 * US;
        let input = Input::Deliver {
            to: to.0,
            from,
            bytes: payload.to_vec(),
        };
        self.push(self.now_ns + delay, input);
    }

    /// Takes a snapshot when every produced record is durable (driver obligation 4).
    fn maybe_snapshot(&mut self) {
        let root = self.root.as_ref().unwrap();
        let (produced, durable) = root.journal_position().unwrap();
        if produced == durable {
            self.snapshot = Some(root.snapshot());
        }
    }

    /// Kills the root: the journal keeps its durable prefix plus some written-but-unsynced
    /// records; after `downtime_ns` a recovered root takes over. Returns the records kept.
    fn crash_and_recover(&mut self, downtime_ns: u64, use_snapshot: bool) -> u64 {
        self.root = None;
        self.epoch += 1;
        self.sync_in_flight = false;
        // A crash may keep any prefix of the written records at or beyond the durable point;
        // pick one whose live state the driver saw, to compare against.
        let candidates: Vec<u64> = self
            .states
            .range(self.durable..=self.journal.len() as u64)
            .map(|(&k, _)| k)
            .collect();
        let kept = candidates[self.rng.gen_range(0..candidates.len())];
        assert!(kept >= self.durable);
        self.journal.truncate(kept as usize);
        self.states.retain(|&k, _| k <= kept);
        self.durable = kept;
        self.run_until(self.now_ns + downtime_ns);

        let snapshot = self
            .snapshot
            .as_deref()
            .filter(|s| use_snapshot && proto::journal::snapshot_position(s).unwrap() <= kept);
        let from = snapshot.map_or(0, |s| proto::journal::snapshot_position(s).unwrap());
        let records = &self.journal[from as usize..];
        let root = Root::recover(self.plan.clone(), self.config.clone(), snapshot, records)
            .unwrap_or_else(|e| panic!("recovery failed: {e}"));
        assert_eq!(
            root.state(),
            self.states[&kept],
            "recovered state equals the live state at journal position {kept}"
        );
        assert_eq!(root.journal_position(), Some((kept, kept)));
        self.resent += root.responses_resent();
        self.root = Some(root);
        self.timer_generation[0] += 1;
        self.drain(0);
        kept
    }

    /// (participant, client order id) of every order in journal records `..upto`.
    fn journaled_orders(&self, upto: u64) -> BTreeSet<(u32, u64)> {
        let mut orders = BTreeSet::new();
        for bytes in &self.journal[..upto as usize] {
            for order in Record::parse(bytes).unwrap().orders {
                let message = wire::order::Repr::parse(order).unwrap();
                orders.insert(message.header().dedupe_key());
            }
        }
        orders
    }

    /// (participant, client order id) of every order response gateways got before `until`.
    fn acknowledged(&self, until_ns: u64) -> BTreeSet<(u32, u64)> {
        let mut acked = BTreeSet::new();
        for (node, at, e) in &self.events {
            if let Event::OrderResponse {
                client_order_id, ..
            } = e
                && *at <= until_ns
            {
                let participant = self.plan.node(*node).unwrap().participant.unwrap();
                acked.insert((participant, *client_order_id));
            }
        }
        acked
    }
}

/// What `root` sends at `now` on receiving `request` from `from`: every datagram it queues.
fn ask(root: &mut Root, now: Instant, from: NodeId, request: &wire::control::Repr) -> Vec<Vec<u8>> {
    let mut bytes = vec![0; request.buffer_len()];
    request.emit(&mut bytes).unwrap();
    root.handle_datagram(now, from, &bytes);
    core::iter::from_fn(|| root.poll_transmit(now).map(|t| t.payload.to_vec())).collect()
}

fn workload() -> WorkloadConfig {
    WorkloadConfig {
        rate_per_s: 1_500.0,
        overlap: (1, 2),
        resting_max: 24,
        burst_factor: 1.0,
        ..WorkloadConfig::default()
    }
}

/// One run: load, crash at a random time, recover, load again, settle, check.
/// Returns how many journal reads served old retransmissions.
fn crash_once(seed: u64) -> u64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd0_7ab1e);
    let mut config = NodeConfig {
        journal: true,
        ..NodeConfig::default()
    };
    // Small rings on odd seeds: old gaps are then served from the journal.
    if seed % 2 == 1 {
        config.rewinder_packets = 4;
    }
    config.journal_records_pending_max = [2, 64, 1024][seed as usize % 3];
    // A small outbox on some seeds: outputs of durable records wait for room, never dropped.
    if seed % 4 == 3 {
        config.outbox_max = 16;
    }
    let mut w = World::new(seed, config, workload());
    w.loss_per_mille = 20;
    w.fsync_ns = rng.gen_range(50..800) * US;
    let start = w.now_ns;
    let crash_at = start + rng.gen_range(5..40) * MS;
    let snapshot_at = start + rng.gen_range(1..40) * MS;
    w.run_until(snapshot_at.min(crash_at));
    if snapshot_at < crash_at {
        // Let the journal catch up, then snapshot (driver obligation 4).
        for _ in 0..100 {
            w.maybe_snapshot();
            if w.snapshot.is_some() {
                break;
            }
            w.run_until(w.now_ns + 10 * US);
        }
    }
    w.run_until(crash_at.max(w.now_ns));
    let crashed_at = w.now_ns;
    let acked_before = w.acknowledged(crashed_at);
    let kept = w.crash_and_recover(rng.gen_range(1..6) * MS, !seed.is_multiple_of(3));
    let journaled = w.journaled_orders(kept);
    let lost: Vec<_> = acked_before.difference(&journaled).collect();
    assert!(
        lost.is_empty(),
        "seed {seed}: acknowledged before the crash but not in the recovered journal: {lost:?}"
    );
    assert!(
        acked_before.len() > 50,
        "seed {seed}: the workload ran: {}",
        acked_before.len()
    );

    w.run_until(w.now_ns + 30 * MS);
    w.cut_orders = true;
    w.loss_per_mille = 0;
    w.run_until(w.now_ns + 60 * MS);

    // Every acknowledgement ever is in the journal; the journal replays to the live root.
    let all = w.journaled_orders(w.journal.len() as u64);
    assert!(w.acknowledged(u64::MAX).is_subset(&all), "seed {seed}");
    let root = w.root.as_ref().unwrap();
    let replayed = Root::recover(w.plan.clone(), w.config.clone(), None, &w.journal).unwrap();
    assert_eq!(
        replayed.state(),
        root.state(),
        "seed {seed}: replay equals live"
    );
    assert_eq!(replayed.engine().order_count(), root.engine().order_count());

    // Responses: every journaled request got its responses at every gateway of its
    // participant, each exactly once (the recovered root re-sent the responses the crash
    // may have swallowed; gateways dropped the copies they had).
    let mut responses: BTreeMap<NodeId, BTreeSet<(u64, u8, u64, u32)>> = BTreeMap::new();
    for (node, _, e) in &w.events {
        if let Event::OrderResponse {
            client_order_id,
            order,
            msg_type,
            leaves_shares,
        } = e
        {
            let key = (*client_order_id, *msg_type, *order, *leaves_shares);
            assert!(
                responses.entry(*node).or_default().insert(key),
                "seed {seed}: gateway {node:?} got response {key:?} twice"
            );
        }
    }
    for &(participant, client_order_id) in &all {
        for gateway in w.plan.participant_gateways(participant) {
            let got = responses.get(&gateway).is_some_and(|r| {
                r.range((client_order_id, 0, 0, 0)..=(client_order_id, u8::MAX, u64::MAX, u32::MAX))
                    .next()
                    .is_some()
            });
            assert!(
                got,
                "seed {seed}: journaled order {participant}/{client_order_id} got no response \
                 at gateway {gateway:?}"
            );
        }
    }

    // Streams: gap-free, no repeat, consistent with the journal.
    let last = root.next_packet_seq() - 1;
    let mut journal_packets = BTreeMap::new();
    for bytes in &w.journal {
        for packet in Record::parse(bytes).unwrap().packets {
            let seq = wire::parse_market_data(packet).unwrap().header.packet_seq;
            assert!(
                journal_packets.insert(seq, packet.to_vec()).is_none(),
                "seed {seed}"
            );
        }
    }
    assert_eq!(
        journal_packets.len() as u64,
        last,
        "seed {seed}: one record per packet"
    );
    for (seq, bytes) in &w.seen {
        assert_eq!(
            journal_packets.get(seq),
            Some(bytes),
            "seed {seed}: packet {seq}"
        );
    }
    let mut released: BTreeMap<NodeId, Vec<u64>> = BTreeMap::new();
    for (node, _, e) in &w.events {
        match e {
            Event::Released(r) => released.entry(*node).or_default().push(r.packet_seq),
            Event::GapSkipped { .. } => panic!("seed {seed}: gateway {node:?} skipped a gap"),
            _ => {}
        }
    }
    assert_eq!(released.len(), w.plan.gateways().len(), "seed {seed}");
    for (node, seqs) in &released {
        // The newest idle packets may still be waiting for their sync or their deadline.
        let n = seqs.len() as u64;
        assert!(
            n + 3 >= last,
            "seed {seed}: gateway {node:?} released {n} of {last}"
        );
        let expected: Vec<u64> = (1..=n).collect();
        assert_eq!(
            seqs, &expected,
            "seed {seed}: gateway {node:?} releases 1..={n}"
        );
    }
    eprintln!(
        "seed {seed}: crash at +{} ms kept {kept} records, {} acked before, {} packets, {} \
         journal reads, {} responses re-sent",
        (crashed_at - start) / MS,
        acked_before.len(),
        last,
        w.journal_reads,
        w.resent
    );
    w.journal_reads
}

/// Goal: kill the root at many random points under load; nothing acknowledged is lost, the
/// recovered book is the book the acknowledged orders make, and every gateway's stream is
/// gap-free and consistent across the crash.
#[test]
fn crash_at_random_points_and_recover() {
    let seeds: u64 = std::env::var("DURABLE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut journal_reads = 0;
    for seed in 0..seeds {
        journal_reads += crash_once(seed);
    }
    assert!(
        seeds < 4 || journal_reads > 0,
        "small rewinder rings made some retransmissions come from the journal"
    );
}

/// Goal: with the journal on, nothing leaves the root before the driver reports durability,
/// and a record the driver never syncs holds its orders' responses back forever.
#[test]
fn nothing_is_acknowledged_before_durable() {
    let config = NodeConfig {
        journal: true,
        ..NodeConfig::default()
    };
    let mut w = World::new(7, config, workload());
    w.fsync_ns = 1_000 * MS; // the disk never answers within this test
    w.run_until(w.now_ns + 20 * MS);
    let responses = w
        .events
        .iter()
        .filter(|(_, _, e)| matches!(e, Event::OrderResponse { .. }))
        .count();
    let sequenced = w
        .events
        .iter()
        .filter(|(_, _, e)| matches!(e, Event::Sequenced(_)))
        .count();
    assert!(sequenced > 20, "orders reached the engine: {sequenced}");
    assert_eq!(responses, 0, "no response before the journal is durable");
    assert!(
        w.seen.is_empty(),
        "no market data before the journal is durable"
    );
    let (produced, durable) = w.root.as_ref().unwrap().journal_position().unwrap();
    assert_eq!(durable, 0);
    assert!(produced > 0 && produced <= w.config.journal_records_pending_max);
}

/// Goal: a corrupted record or a record out of order fails recovery with a message naming
/// it; replay refuses a record whose market data the engine does not reproduce.
#[test]
fn recovery_refuses_bad_journals() {
    let config = NodeConfig {
        journal: true,
        ..NodeConfig::default()
    };
    let mut w = World::new(3, config.clone(), workload());
    w.run_until(w.now_ns + 10 * MS);
    let journal = w.journal.clone();
    assert!(journal.len() > 10);
    let plan = w.plan.clone();
    let skip: Vec<&Vec<u8>> = journal
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|r| r.1)
        .collect();
    let err = Root::recover(plan.clone(), config.clone(), None, skip).unwrap_err();
    assert!(
        err.contains("journal record 3") && err.contains("expected"),
        "{err}"
    );
    // Change one order's price in a batch: the engine then publishes other market data.
    let (i, mut record) = journal
        .iter()
        .enumerate()
        .find_map(|(i, r)| {
            let parsed = Record::parse(r).unwrap();
            (!parsed.orders.is_empty() && !parsed.packets.is_empty()).then(|| (i, r.clone()))
        })
        .unwrap();
    // The first order's bytes start after the header (18 bytes), the counts and its length.
    let price_at = 18 + 2 + 1 + 40;
    record[price_at] ^= 0x01;
    let mut tampered = journal.clone();
    tampered[i] = record;
    match Root::recover(plan.clone(), config.clone(), None, &tampered) {
        Err(e) => {
            eprintln!("tampered: {e}");
            assert!(e.contains(&format!("journal record {i}")), "{e}");
            assert!(e.contains("diverged"), "{e}");
        }
        Ok(root) => panic!(
            "a tampered journal recovered: {:?}",
            root.journal_position()
        ),
    }
    let off = NodeConfig::default();
    assert!(
        Root::recover(plan, off, None, &journal).is_err(),
        "journal off"
    );
}

/// Goal: while every journal read is taken, a request for packets the journal holds is left
/// unanswered (the gateway asks again) and never answered "unavailable", which would make the
/// gateway skip packets that were sequenced and published.
#[test]
fn a_busy_journal_never_says_packets_are_gone() {
    use proto::journal::JOURNAL_READS_MAX;
    use wire::control::Repr as Control;

    let config = NodeConfig {
        journal: true,
        rewinder_packets: 4,
        ..NodeConfig::default()
    };
    let mut w = World::new(11, config, workload());
    w.run_until(w.now_ns + 20 * MS);
    let asked = 2 * JOURNAL_READS_MAX as u64;
    // The MoldUDP64 sequence and session of the first `asked` packets, all older than the
    // rewinder's four.
    let old: Vec<(u64, wire::mold::Session)> = w
        .seen
        .range(1..=asked)
        .map(|(_, bytes)| {
            let data = wire::parse_market_data(bytes).unwrap();
            (data.mold.sequence(), data.session())
        })
        .collect();
    assert_eq!(old.len() as u64, asked, "the run published enough packets");
    let gateway = NodeId(w.plan.gateways().start);
    let now = w.now();
    let root = w.root.as_mut().unwrap();
    let busy_before = root.counters().drops[proto::DropReason::QueueFull.index()];
    let mut unavailable = 0;
    let mut reads = 0;
    for &(sequence, session) in &old {
        let request = Control::RetransmitRequest {
            requester: gateway.0,
            session,
            sequence,
            count: 1,
        };
        for payload in ask(root, now, gateway, &request) {
            // Control::parse refuses anything but a control datagram (its magic).
            if let Ok(Control::RetransmitUnavailable { .. }) = Control::parse(&payload) {
                unavailable += 1;
            }
        }
        reads += core::iter::from_fn(|| root.poll_journal_read()).count();
    }
    let busy = root.counters().drops[proto::DropReason::QueueFull.index()] - busy_before;
    assert_eq!(unavailable, 0, "the journal holds every packet asked for");
    assert_eq!(
        reads, JOURNAL_READS_MAX,
        "a read per request while reads are free"
    );
    assert_eq!(
        busy,
        asked - JOURNAL_READS_MAX as u64,
        "the rest wait, counted"
    );
}

/// Goal: a response lost on its way before the root crashed can be asked for of the
/// recovered root however old its record (within the `HELD_MIN` a live root holds), not only
/// the last `2 * journal_records_pending_max` records' responses it re-sends: the replay and
/// the snapshot keep them. Before, a recovered root answered such a request "gone" and the
/// participant never had that response (seed 4 of the sim's sixty-gateway crash test).
#[test]
fn a_recovered_root_still_holds_old_responses() {
    use wire::control::Repr as Control;

    let config = NodeConfig {
        journal: true,
        // Re-sends the responses of the last 4 records only.
        journal_records_pending_max: 2,
        ..NodeConfig::default()
    };
    let mut w = World::new(5, config, workload());
    w.run_until(w.now_ns + 20 * MS);
    // (Records after the snapshot's position may not be durable yet: this test keeps them.)
    let snapshot = w.root.as_ref().unwrap().snapshot();
    let position = proto::journal::snapshot_position(&snapshot).unwrap() as usize;
    w.run_until(w.now_ns + 20 * MS);
    assert!(position > 20, "response 1 is older than the re-send window");
    let now = w.now();
    // What a root sends a participant's first gateway asking for its response 1.
    let answer = |root: &mut Root, participant: u32| {
        let gateway = w.plan.participant_gateways(participant).next().unwrap();
        let request = Control::ResponseGap {
            requester: gateway.0,
            participant,
            from: 1,
            count: 1,
        };
        ask(root, now, gateway, &request)
    };
    let (plan, config) = (w.plan.clone(), w.config.clone());
    let mut replayed = Root::recover(plan.clone(), config.clone(), None, &w.journal).unwrap();
    let mut from_snapshot =
        Root::recover(plan, config, Some(&snapshot), &w.journal[position..]).unwrap();
    let live = w.root.as_mut().unwrap();
    let mut checked = 0;
    for gateway in w.plan.gateways() {
        let participant = w.plan.node(NodeId(gateway)).unwrap().participant.unwrap();
        let expected = answer(live, participant);
        let Some(first) = expected.first() else {
            continue;
        };
        let response = wire::response::Response::parse(first).expect("response 1 itself");
        assert_eq!(response.seq, 1);
        assert_eq!(answer(&mut replayed, participant), expected, "replayed");
        assert_eq!(
            answer(&mut from_snapshot, participant),
            expected,
            "from the snapshot"
        );
        checked += 1;
    }
    assert!(checked >= 6, "{checked} participants had responses");
}
