//! The root: market-data publisher and rewinder (DESIGN.md §3, §4).
//!
//! The root packs market-data messages into MoldUDP64 packets, each led by a
//! [`wire::JasperHeader`] stamped with the send time and the release deadline
//! `send_time + max_owd + margin`, and sends each packet to layer 1 (RRPS and sibling hedging
//! start one layer down; see [`crate::plan`]). It keeps the last packets in a rewinder ring
//! and answers gateways' retransmission requests from it. The root's local clock defines
//! exchange time, so it answers clock probes with its own time.
//!
//! Orders: hop-enveloped orders from layer 1 are measured (pacing feedback to the sending
//! proxy), deduplicated against receiver-hedged twins and held by the [`Sequencer`]; released
//! orders go through the matching engine (the private `exchange` module), whose responses go
//! straight to the owner's gateways, numbered per participant and kept for gap requests
//! ([`crate::responses`]), and whose public events are published as market data, one batch
//! per sequencer release.
//!
//! Durability ([`crate::journal`], with `NodeConfig::journal` on): every sequencer release,
//! idle packet and publish becomes one journal record, drained with [`Root::poll_journal`];
//! its responses and packets wait until the driver reports the record durable with
//! [`Root::handle_durable`]. [`Root::recover`] rebuilds a root from a snapshot and the
//! records after it; retransmissions older than the rewinder's ring are regenerated from
//! journal records the driver reads for [`Root::poll_journal_read`].

use core::cell::Cell;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

use wire::control::Repr as Control;
use wire::{Emit, ExchangeTime, JasperHeader, Kind, MarketDataBuilder, mold};

use crate::config::NodeConfig;
use crate::core::{Core, Counters, Timer};
use crate::exchange::{Exchange, Outputs};
use crate::inbound::{Admit, Answers, HedgeDedupe, InboundMeter};
use crate::journal::{Durable, JournalRead, ReadPlan, Record, RecordKind, RootState};
use crate::node::{DropReason, Event, Node, NodeId, Sequenced, Transmit};
use crate::owd::OwdAggregate;
use crate::plan::{Plan, Role};
use crate::repair::RETRANSMIT_PACKETS_MAX;
use crate::responses::ResponseLog;
use crate::sequencer::{Sequencer, SequencerStats};
use crate::snapshot::Taken;
use crate::time::{Instant, duration_nanos};

/// A recovered root re-sends this many responses per [`RESEND_INTERVAL`] at most, so the
/// burst does not overflow its own socket or the gateways' (about half a 10 Gb/s VM's packet
/// rate at 1.5 µs per datagram).
pub const RESEND_BATCH: usize = 32;
/// See [`RESEND_BATCH`].
pub const RESEND_INTERVAL: Duration = Duration::from_micros(100);
/// Responses a recovered root re-sends at most (they carry the numbers they first had, so a
/// gateway drops the copies it already has).
pub const RESEND_MAX: usize = 4096;

/// How far ahead of the root's clock an order's generation stamp may be. A synced gateway's
/// clock is within microseconds of it; one not synced yet reads its own host's clock, which
/// may be days off.
pub const ORDER_AHEAD_MAX: Duration = Duration::from_secs(1);

/// Whether an order stamped `stamp` is further than [`ORDER_AHEAD_MAX`] ahead of exchange
/// time `now_ns` (the root's clock, or a synced proxy's).
pub(crate) fn stamped_too_far_ahead(stamp: ExchangeTime, now_ns: u64) -> bool {
    stamp.as_nanos() > now_ns.saturating_add(duration_nanos(ORDER_AHEAD_MAX))
}

/// Orders one step sequences at most; the rest go in the next step, at once: a journal
/// record holds at most 65,535 orders, and the sequencer can hold 65,536 due at once (after a
/// stall of the journal's disk held them back). (4,096 would also bound the loop's time in
/// one step, but it split the steps of the inbound campaign's overloaded bursts and moved
/// their figures; this bound changes no run that did not panic.)
pub const STEP_ORDERS_MAX: u32 = u16::MAX as u32;

/// One packet kept for retransmission.
#[derive(Clone, Debug, Default)]
struct Stored {
    packet_seq: u64,
    /// MoldUDP64 sequence of the header message and of the next packet.
    sequence: u64,
    next_sequence: u64,
    bytes: Vec<u8>,
}

/// Held packets [`Rewinder::check_some`] checks per call.
const REWINDER_CHECKS_PER_CALL: u64 = 32;

/// The ring of recent packets.
#[derive(Clone, Debug)]
struct Rewinder {
    ring: Vec<Stored>,
    /// Packet sequence numbers held: `oldest..next`.
    oldest: u64,
    next: u64,
    /// Where [`Rewinder::check_some`] resumes its walk of the ring.
    check_cursor: Cell<u64>,
}

impl Rewinder {
    fn new(packets: usize) -> Self {
        Self {
            ring: vec![Stored::default(); packets.max(1)],
            oldest: 1,
            next: 1,
            check_cursor: Cell::new(1),
        }
    }

    /// Checks the next [`REWINDER_CHECKS_PER_CALL`] held packets from where the last call
    /// stopped, wrapping at the newest, and returns the first that is not what was stored:
    /// every packet is checked within a few hundred calls, and a call costs the same whatever
    /// the ring's size (walking all 8,192 packets after every handler of the root was ~1.5% of
    /// a simulated N = 1000 run).
    fn check_some(&self) -> Option<u64> {
        assert!(self.next - self.oldest <= self.ring.len() as u64);
        let mut seq = self.check_cursor.get().max(self.oldest);
        for _ in 0..REWINDER_CHECKS_PER_CALL.min(self.next - self.oldest) {
            if seq >= self.next {
                seq = self.oldest;
            }
            let stored = self.get(seq).expect("held range");
            // Every packet holds its header, under its own number.
            if stored.packet_seq != seq || stored.next_sequence <= stored.sequence {
                return Some(seq);
            }
            seq += 1;
        }
        self.check_cursor.set(seq);
        None
    }

    fn slot(&self, packet_seq: u64) -> usize {
        (packet_seq % self.ring.len() as u64) as usize
    }

    fn store(&mut self, packet_seq: u64, sequence: u64, next_sequence: u64, bytes: &[u8]) {
        assert_eq!(packet_seq, self.next, "packets are stored in order");
        let slot = self.slot(packet_seq);
        let stored = &mut self.ring[slot];
        stored.packet_seq = packet_seq;
        stored.sequence = sequence;
        stored.next_sequence = next_sequence;
        stored.bytes.clear();
        stored.bytes.extend_from_slice(bytes);
        self.next += 1;
        if self.next - self.oldest > self.ring.len() as u64 {
            self.oldest += 1;
        }
    }

    fn get(&self, packet_seq: u64) -> Option<&Stored> {
        (self.oldest..self.next)
            .contains(&packet_seq)
            .then(|| &self.ring[self.slot(packet_seq)])
    }

    /// The oldest MoldUDP64 message sequence still held.
    fn oldest_sequence(&self) -> Option<u64> {
        self.get(self.oldest).map(|s| s.sequence)
    }

    /// The first held packet whose messages end after `sequence`.
    fn find(&self, sequence: u64) -> Option<u64> {
        let (mut lo, mut hi) = (self.oldest, self.next);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.ring[self.slot(mid)].next_sequence <= sequence {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo < self.next).then_some(lo)
    }
}

/// A response replay regenerated, to re-send after recovery.
#[derive(Debug)]
struct Resend {
    record: u64,
    destinations: Vec<NodeId>,
    payload: Vec<u8>,
}

/// The root node.
#[derive(Debug)]
pub struct Root {
    core: Core,
    next_packet_seq: u64,
    next_sequence: u64,
    rewinder: Rewinder,
    reports: OwdAggregate,
    max_owd_ns: u64,
    last_packet: Instant,
    targets: Vec<NodeId>,
    packet: Vec<u8>,
    exchange: Exchange,
    sequencer: Sequencer,
    meter: InboundMeter,
    hedge_dedupe: HedgeDedupe,
    /// Responses sent, for a copy of an order sent again (its answer was lost).
    answers: Answers,
    /// Response numbers per participant, and the recent responses, for gap requests.
    responses: ResponseLog,
    feedback: Vec<(NodeId, u64, u32)>,
    outputs: Outputs,
    market_data: Vec<wire::itch::Message>,
    /// Journaling state; `None` with the journal off.
    durable: Option<Durable>,
    /// Responses [`Root::recover`] regenerated, waiting to be re-sent (paced).
    resend: VecDeque<Resend>,
    /// When the next batch of `resend` goes out.
    resend_at: Option<Instant>,
    /// A recovered root's responses get their quiet statuses again from its first turn
    /// ([`ResponseLog::restart_statuses`](crate::responses::ResponseLog)).
    restart_statuses: bool,
    /// Responses re-sent after recovery.
    responses_resent: u64,
    /// The last book snapshot taken, while it is fit to answer with ([`crate::snapshot`]).
    snapshot: Option<Taken>,
    /// Book snapshots taken.
    snapshots_taken: u64,
    /// When the last was taken.
    snapshot_taken_at: Option<Instant>,
    /// Snapshot parts sent.
    snapshot_parts_sent: u64,
}

impl Root {
    /// The root of `plan`.
    pub fn new(plan: Arc<Plan>, config: NodeConfig) -> Result<Self, String> {
        let children = plan.layer(1).len();
        let rewinder = Rewinder::new(config.rewinder_packets);
        let max_owd_ns = duration_nanos(config.owd.fixed_owd.unwrap_or(config.owd.initial_owd));
        let exchange = Exchange::new(&config.market)?;
        let sequencer = Sequencer::new(config.sequencer, plan.layer(1));
        let meter = InboundMeter::new(plan.layer(1), config.hop_samples_max);
        let hedge_dedupe = HedgeDedupe::for_node(&config);
        let answers = Answers::for_node(&config);
        let responses = ResponseLog::for_node(&config);
        let durable = config
            .journal
            .then(|| Durable::new(config.journal_records_pending_max));
        let mut core = Core::new(plan.root(), plan, Arc::new(config))?;
        core.timers.set(Timer::Feedback, Instant::ZERO);
        let mut root = Self {
            core,
            next_packet_seq: 1,
            next_sequence: 1,
            rewinder,
            reports: OwdAggregate::new(children),
            max_owd_ns,
            last_packet: Instant::ZERO,
            targets: Vec::new(),
            packet: vec![0; mold::PAYLOAD_MAX],
            exchange,
            sequencer,
            meter,
            hedge_dedupe,
            answers,
            responses,
            feedback: Vec::new(),
            outputs: Outputs::default(),
            market_data: Vec::new(),
            durable,
            resend: VecDeque::new(),
            resend_at: None,
            restart_statuses: false,
            responses_resent: 0,
            snapshot: None,
            snapshots_taken: 0,
            snapshot_taken_at: None,
            snapshot_parts_sent: 0,
        };
        root.core.timers.set(Timer::IdlePacket, Instant::ZERO);
        Ok(root)
    }

    /// Publishes market-data messages: packs them in order into as few packets as fit the
    /// MTU budget and queues each for layer 1. Returns the packet sequence numbers used.
    /// A message too large for any packet is skipped and counted as dropped.
    pub fn publish<M: Emit>(&mut self, now: Instant, messages: &[M]) -> core::ops::Range<u64> {
        let first = self.next_packet_seq;
        let opened = self.begin_step(RecordKind::Packets, ExchangeTime::ZERO);
        let mut rest = messages;
        while let Some(first_message) = rest.first() {
            if first_message.buffer_len() > wire::market::MESSAGE_LEN_MAX {
                // Does not fit even an empty packet.
                let id = self.core.id;
                self.core.drop_datagram(id, DropReason::QueueFull);
                rest = &rest[1..];
                continue;
            }
            let mut taken = 0;
            self.send_packet(now, |builder| {
                for message in rest {
                    if builder.push(message).is_err() {
                        break;
                    }
                    taken += 1;
                }
            });
            rest = &rest[taken..];
        }
        if opened {
            self.end_step();
        }
        self.check_invariants_cheap();
        first..self.next_packet_seq
    }

    /// Rebuilds a journaling root after a crash: loads `snapshot` (from [`Root::snapshot`]),
    /// if any, then replays `records`, the journal records from the snapshot's position on (or
    /// from index 0 without a snapshot), in order. The recovered root has the same book, next
    /// order id, `packet_seq`, MoldUDP64 sequence and rewinder contents as the crashed one had
    /// after its last record, and continues the stream from there (its first packet is an idle
    /// packet at the first timeout). Fails, naming the record, on a malformed or out-of-order
    /// record, or if replaying the orders does not reproduce the recorded market data.
    ///
    /// Responses: the crashed root may have journaled records whose responses never left it
    /// (not yet durable when it died but kept by the disk, or durable but still in its outbox).
    /// It cannot know which, so the recovered root re-sends, byte for byte, the responses of
    /// the last `2 * journal_records_pending_max` replayed records (the last [`RESEND_MAX`]
    /// of them; at most `pending_max` records wait for durability and one durability notice
    /// releases at most `pending_max` more), paced at [`RESEND_BATCH`] per
    /// [`RESEND_INTERVAL`] from the first timeout on, and gateways drop the copies they
    /// already have (by their numbers, [`crate::responses`]). Records covered by the snapshot
    /// are not re-sent: a driver writes a snapshot only after the responses of the records it
    /// covers have left (driver obligation 4). Any of those responses may have been lost on
    /// the way, so the recovered root also holds, for gap requests, the responses the snapshot
    /// kept and every one it replayed (the latest [`crate::responses::HELD_MIN`] in all, as a
    /// live root holds them): a gateway asks for a lost one as it would of the crashed root.
    pub fn recover<I, R>(
        plan: Arc<Plan>,
        config: NodeConfig,
        snapshot: Option<&[u8]>,
        records: I,
    ) -> Result<Self, String>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        if !config.journal {
            return Err("recovery needs a journaling root (config.journal)".to_string());
        }
        let market = config.market.clone();
        let mut root = Self::new(plan, config)?;
        if let Some(bytes) = snapshot {
            let state = RootState::decode(bytes)?;
            root.exchange = Exchange::restore(&market, &state.exchange)?;
            root.responses.restore(&state.response_numbers);
            root.hedge_dedupe
                .restore(state.dedupe_floor_ns, &state.dedupe_keys);
            for datagram in state.responses() {
                root.hold_recovered_response(datagram);
            }
            root.next_packet_seq = state.next_packet_seq;
            root.next_sequence = state.next_sequence;
            root.rewinder.oldest = state.next_packet_seq;
            root.rewinder.next = state.next_packet_seq;
            let durable = root.durable.as_mut().expect("journal on");
            durable.next_record = state.position;
            durable.checkpoints = state.checkpoints;
        }
        let window = root
            .durable
            .as_ref()
            .map_or(0, |d| d.pending_max.saturating_mul(2));
        let mut resend = VecDeque::new();
        for bytes in records {
            let index = root.durable.as_ref().map_or(0, |d| d.next_record);
            root.replay(bytes.as_ref(), &mut resend)
                .map_err(|e| format!("journal record {index}: {e}"))?;
            let end = index + 1;
            while resend
                .front()
                .is_some_and(|r: &Resend| r.record + window < end)
                || resend.len() > RESEND_MAX
            {
                resend.pop_front();
            }
        }
        root.resend_at = (!resend.is_empty()).then_some(Instant::ZERO);
        root.responses.recovered();
        root.restart_statuses = true;
        root.resend = resend;
        let next_sequence = root.next_sequence;
        let durable = root.durable.as_mut().expect("journal on");
        durable.durable_upto = durable.next_record;
        durable.polled_upto = durable.next_record;
        durable.released_sequence = next_sequence;
        root.check_invariants();
        Ok(root)
    }

    /// Drains the next journal record (journal on): append it to the journal, in order. See
    /// [`crate::journal`] for the driver's obligations.
    pub fn poll_journal(&mut self) -> Option<&[u8]> {
        self.durable.as_mut()?.poll()
    }

    /// The driver's journal holds records `0..upto` durably: releases their responses and
    /// packets to the outbox, and resumes the sequencer if it was waiting for durability.
    ///
    /// # Panics
    /// If `upto` exceeds the records [`Root::poll_journal`] handed out.
    pub fn handle_durable(&mut self, now: Instant, upto: u64) {
        let Some(durable) = self.durable.as_mut() else {
            return;
        };
        assert!(
            upto <= durable.polled_upto,
            "durable up to {upto} but only {} records were handed out",
            durable.polled_upto
        );
        if upto <= durable.durable_upto {
            return;
        }
        let backlogged = durable.backlogged();
        durable.durable_upto = upto;
        self.release_held(now);
        if backlogged {
            self.release_orders(now);
        }
        self.check_invariants_cheap();
    }

    /// The next journal read the root needs for an old retransmission: read those (durable)
    /// records and hand them to [`Root::handle_journal_records`].
    pub fn poll_journal_read(&mut self) -> Option<JournalRead> {
        self.durable.as_mut()?.poll_read()
    }

    /// The records a [`JournalRead`] asked for (all of them, in order, or a prefix if the
    /// driver could not read the rest): sends the requested packets from them, marked as
    /// retransmissions. An unknown `id` is ignored.
    pub fn handle_journal_records<I, R>(&mut self, _now: Instant, id: u64, records: I)
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        let Some(durable) = self.durable.as_mut() else {
            return;
        };
        let Some(read) = durable.take_read(id) else {
            return;
        };
        let end = read
            .sequence
            .saturating_add(read.count.max(1) as u64)
            .min(durable.released_sequence);
        let mut sent = 0;
        'records: for bytes in records {
            let Ok(record) = Record::parse(bytes.as_ref()) else {
                let own = self.core.id;
                self.core.drop_datagram(own, DropReason::Malformed);
                break;
            };
            for packet in record.packets {
                let Ok(data) = wire::parse_market_data(packet) else {
                    continue;
                };
                let sequence = data.mold.sequence();
                if sequence + data.mold.message_count() as u64 <= read.sequence {
                    continue;
                }
                if sequence >= end || sent >= RETRANSMIT_PACKETS_MAX {
                    break 'records;
                }
                let len = packet.len();
                self.packet[..len].copy_from_slice(packet);
                if wire::market::mark_retransmission(&mut self.packet[..len]).is_ok() {
                    let bytes = core::mem::take(&mut self.packet);
                    self.core.send_bytes(&[read.to], &bytes[..len]);
                    self.packet = bytes;
                    self.core.counters.retransmissions += 1;
                    sent += 1;
                }
            }
        }
        self.check_invariants_cheap();
    }

    /// `(produced, durable)`: journal records produced so far and records the driver reported
    /// durable; `None` with the journal off.
    pub fn journal_position(&self) -> Option<(u64, u64)> {
        self.durable
            .as_ref()
            .map(|d| (d.next_record, d.durable_upto))
    }

    /// The root's state after every record produced so far (`journal_position().0`): the
    /// book, the order-id and match-number counters, the stream position and the journal
    /// checkpoints. Write it only once those records are durable; [`Root::recover`] loads it.
    ///
    /// It also keeps the responses the root holds for gap requests (the latest
    /// [`crate::responses::HELD_MIN`]), so that one lost just before a crash can still be
    /// asked for of the recovered root.
    pub fn snapshot(&self) -> Vec<u8> {
        // Every held one is a response (`ResponseLog::sent` had it parsed); then those its
        // records produced that still wait for durability (they will have gone by the time
        // the driver writes it, and may be lost like any).
        let held = self.responses.held_datagrams(crate::responses::HELD_MIN);
        let waiting = self.durable.iter().flat_map(|d| &d.held);
        let waiting = waiting
            .filter(|h| h.next_sequence.is_none() && response_header(&h.payload).is_some())
            .map(|h| h.payload.as_slice());
        let size = held.len() * (wire::response::DATAGRAM_MAX + 1);
        let (dedupe_floor_ns, dedupe_keys) = self.sequenced_keys();
        let state = RootState {
            dedupe_floor_ns,
            dedupe_keys,
            ..self.root_state()
        };
        state.encode_with(size, |w| {
            for datagram in held.chain(waiting) {
                RootState::push_response(w, datagram);
            }
        })
    }

    /// The root's state as [`Root::snapshot`] writes it, less the responses it holds for gap
    /// requests (a bounded memory of what went, which a live root and one rebuilt from its
    /// journal hold differently): two roots with equal states send the same market data and
    /// responses from the same inputs. For checkers, and tests comparing a root with a replay.
    pub fn state(&self) -> Vec<u8> {
        self.root_state().encode()
    }

    fn root_state(&self) -> RootState {
        let (position, checkpoints) = self
            .durable
            .as_ref()
            .map_or((0, Vec::new()), |d| (d.next_record, d.checkpoints.clone()));
        RootState {
            position,
            next_packet_seq: self.next_packet_seq,
            next_sequence: self.next_sequence,
            checkpoints,
            exchange: self.exchange.state(),
            response_numbers: self.responses.numbers(),
            responses: Vec::new(),
            dedupe_floor_ns: 0,
            dedupe_keys: Vec::new(),
        }
    }

    /// The dedupe filter's floor and the keys of the orders it let through, minus those still
    /// waiting in the sequencer (with their snapshot, they die with a crash; a copy of one
    /// sent again must go on), for a snapshot.
    fn sequenced_keys(&self) -> (u64, Vec<crate::journal::SeenKey>) {
        let waiting: std::collections::BTreeSet<(u32, u64)> = self
            .sequencer
            .waiting()
            .filter_map(|w| wire::order::Repr::parse(w.order()).ok())
            .map(|message| message.header().dedupe_key())
            .collect();
        let keys = self
            .hedge_dedupe
            .keys()
            .filter(|(key, _)| !waiting.contains(key))
            .map(|(key, at)| (key, at.as_nanos()))
            .collect();
        (self.hedge_dedupe.floor_ns(), keys)
    }

    /// While recovering: holds `datagram`, a response numbered before the crash, for gap
    /// requests (see [`Root::recover`]).
    fn hold_recovered_response(&mut self, datagram: &[u8]) {
        if let Some((seq, header)) = response_header(datagram) {
            let time_ns = header.time.as_nanos();
            self.responses
                .hold_recovered(header.participant_id, seq, time_ns, datagram);
        }
    }

    /// The current deadline offset: the max reported OWD plus the margin.
    pub fn deadline_offset(&self) -> Duration {
        Duration::from_nanos(self.max_owd_ns) + self.core.config.owd.margin
    }

    /// Resting orders in the matching engine.
    pub fn resting_orders(&self) -> usize {
        self.exchange.live()
    }

    /// The matching engine (read-only, for checkers and books rebuilt elsewhere).
    pub fn engine(&self) -> &lob::Engine {
        self.exchange.engine()
    }

    /// The best `levels` price levels of one side of `symbol`'s book as `(price, shares)`,
    /// the form [`crate::book::BookBuilder::depth`] gives for a book rebuilt from the feed.
    pub fn depth(
        &self,
        symbol: lob::SymbolIndex,
        side: lob::Side,
        levels: usize,
    ) -> Vec<(u32, u64)> {
        let mut views = Vec::new();
        self.engine().depth(symbol, side, levels, &mut views);
        views
            .iter()
            .map(|l| (l.price.0 as u32, l.qty.0 as u64))
            .collect()
    }

    /// Orders waiting in the sequencer.
    pub fn sequencer_len(&self) -> usize {
        self.sequencer.len()
    }

    /// What the sequencer counted (late releases, heartbeat orders, silent children skipped).
    pub fn sequencer_stats(&self) -> &SequencerStats {
        self.sequencer.stats()
    }

    /// The next packet sequence number.
    pub fn next_packet_seq(&self) -> u64 {
        self.next_packet_seq
    }

    /// MoldUDP64 sequence number of the next packet's header message (each packet takes one
    /// for its header and one for each message it carries).
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// Responses re-sent after [`Root::recover`] (gateways drop the ones they already had).
    pub fn responses_resent(&self) -> u64 {
        self.responses_resent
    }

    /// What the root counted.
    pub fn counters(&self) -> &Counters {
        &self.core.counters
    }

    /// Stamps the header on `builder`'s packet and finishes it; returns the header and the
    /// datagram's length. The caller then hands the bytes to [`Root::dispatch`].
    fn stamp(&self, now: Instant, builder: MarketDataBuilder<'_>) -> (JasperHeader, u64, usize) {
        let send_time = ExchangeTime::from_nanos(now.as_nanos());
        let offset = duration_nanos(self.deadline_offset());
        let header = JasperHeader {
            packet_seq: self.next_packet_seq,
            send_time,
            deadline: send_time.saturating_add_nanos(offset),
            flags: 0,
        };
        let next_sequence = builder.next_sequence();
        let len = builder
            .finish(&header)
            .expect("the header slot was reserved by new");
        (header, next_sequence, len)
    }

    /// Sends a stamped packet to layer 1 and keeps it in the rewinder.
    fn dispatch(&mut self, now: Instant, header: JasperHeader, next_sequence: u64, bytes: &[u8]) {
        debug_assert_eq!(header.packet_seq, self.next_packet_seq);
        self.targets.clear();
        self.core
            .plan
            .forward_targets(self.core.id, header.packet_seq, &mut self.targets);
        let targets = core::mem::take(&mut self.targets);
        match self.durable.as_mut() {
            None => self.core.send_bytes(&targets, bytes),
            Some(durable) => {
                durable.hold_packet(&targets, bytes, self.next_sequence, next_sequence);
                self.core.counters.copies_out += targets.len() as u64;
            }
        }
        self.targets = targets;
        self.rewinder
            .store(header.packet_seq, self.next_sequence, next_sequence, bytes);
        self.core.counters.packets_new += 1;
        self.next_packet_seq += 1;
        self.next_sequence = next_sequence;
        self.last_packet = now;
        let idle = now + self.core.config.idle_packet_interval;
        self.core.timers.set(Timer::IdlePacket, idle);
    }

    /// Builds a packet with `fill` and sends it.
    fn send_packet(&mut self, now: Instant, fill: impl FnOnce(&mut MarketDataBuilder<'_>)) {
        let mut packet = core::mem::take(&mut self.packet);
        let mut builder =
            MarketDataBuilder::new(&mut packet, self.core.session, self.next_sequence);
        fill(&mut builder);
        let (header, next_sequence, len) = self.stamp(now, builder);
        self.dispatch(now, header, next_sequence, &packet[..len]);
        self.packet = packet;
    }

    fn begin_step(&mut self, kind: RecordKind, sequenced: ExchangeTime) -> bool {
        self.durable
            .as_mut()
            .is_some_and(|d| d.begin(kind, sequenced))
    }

    /// Whether the open step's journal record can take one more order and everything it may
    /// publish (on top of `messages` market-data messages not published yet) and stay within
    /// [`crate::journal::RECORD_BYTES_MAX`]; always, without a journal. An empty step always
    /// can ([`crate::journal::JOURNALED_ORDERS_MAX`]), so every step takes an order at least.
    fn step_has_room(&self, messages: usize) -> bool {
        use crate::journal::{MESSAGE_RECORD_BYTES_MAX, RECORD_BYTES_MAX, order_step_bytes_max};
        self.durable.as_ref().is_none_or(|durable| {
            let one_more = order_step_bytes_max(self.core.config.market.orders_max);
            durable.step_len() + messages * MESSAGE_RECORD_BYTES_MAX + one_more <= RECORD_BYTES_MAX
        })
    }

    fn end_step(&mut self) {
        self.durable.as_mut().expect("a step was opened").end();
    }

    /// Applies one journal record during recovery (see [`Root::recover`]); appends the
    /// responses it produced to `resend`.
    fn replay(&mut self, bytes: &[u8], resend: &mut VecDeque<Resend>) -> Result<(), String> {
        let record = Record::parse(bytes)?;
        let expected = self.durable.as_ref().map_or(0, |d| d.next_record);
        if record.index != expected {
            return Err(format!(
                "index {} where {expected} was expected",
                record.index
            ));
        }
        let mut produced = Vec::new();
        let mut buf = [0u8; mold::PAYLOAD_MAX];
        for order in &record.orders {
            let message = wire::order::Repr::parse(order)
                .map_err(|e| format!("unparsable order message: {e:?}"))?;
            let header = message.header();
            // Seen when it was sequenced, at the latest (the root's clock is exchange time):
            // stamped at zero, a key went at once past the filter's `keep`.
            let seen = Instant::from_nanos(record.sequenced.as_nanos());
            self.hedge_dedupe
                .first_copy(header.dedupe_key(), header.time, seen);
            self.exchange
                .process(record.sequenced, &message, &mut self.outputs);
            for (participant, response) in &self.outputs.responses {
                let mut payload = [0u8; wire::response::DATAGRAM_MAX];
                let seq = self.responses.number(*participant);
                let len = wire::response::emit(&mut payload, seq, response)
                    .map_err(|e| format!("emit: {e:?}"))?;
                let time_ns = response.header().time.as_nanos();
                self.responses
                    .hold_recovered(*participant, seq, time_ns, &payload[..len]);
                resend.push_back(Resend {
                    record: record.index,
                    destinations: self.core.plan.participant_gateways(*participant).collect(),
                    payload: payload[..len].to_vec(),
                });
            }
            for itch in &self.outputs.itch {
                let len = itch.emit(&mut buf).map_err(|e| format!("emit: {e:?}"))?;
                produced.extend_from_slice(&(len as u16).to_be_bytes());
                produced.extend_from_slice(&buf[..len]);
            }
        }
        let mut recorded = Vec::new();
        let mut first_sequence = None;
        for packet in &record.packets {
            let data =
                wire::parse_market_data(packet).map_err(|e| format!("unparsable packet: {e:?}"))?;
            let sequence = data.mold.sequence();
            if data.header.packet_seq != self.next_packet_seq || sequence != self.next_sequence {
                return Err(format!(
                    "packet {}/{sequence} where {}/{} was expected: the stream would skip or \
                     repeat",
                    data.header.packet_seq, self.next_packet_seq, self.next_sequence
                ));
            }
            for message in data.messages() {
                recorded.extend_from_slice(&(message.len() as u16).to_be_bytes());
                recorded.extend_from_slice(message);
            }
            let next_sequence = sequence + data.mold.message_count() as u64;
            self.rewinder
                .store(self.next_packet_seq, sequence, next_sequence, packet);
            first_sequence.get_or_insert(sequence);
            self.next_packet_seq += 1;
            self.next_sequence = next_sequence;
        }
        if record.kind == RecordKind::Batch && produced != recorded {
            return Err(format!(
                "replaying its {} orders produced {} bytes of market data, the record holds {} \
                 different bytes: the engine diverged (a journal replays only under the \
                 [node.market] it was written with: were its symbols, tick, price band or \
                 limits edited since?)",
                record.orders.len(),
                produced.len(),
                recorded.len()
            ));
        }
        let durable = self.durable.as_mut().expect("replay needs the journal on");
        if let Some(first) = first_sequence {
            durable.checkpoint(first, record.index);
        }
        durable.next_record += 1;
        Ok(())
    }

    fn on_control(&mut self, now: Instant, from: NodeId, control: Control) {
        let from_role = self.core.plan.node(from).map(|n| (n.role, n.layer));
        match control {
            Control::ClockProbe {
                probe_id,
                pair_index,
                t_send,
                ..
            } => {
                let here = ExchangeTime::from_nanos(now.as_nanos());
                self.core
                    .answer_probe(Some(here), true, from, probe_id, pair_index, t_send);
            }
            Control::OwdReport { owd_ns, .. } if from_role.is_some_and(|(_, layer)| layer == 1) => {
                if !self.reports.record(now, from, owd_ns) {
                    self.core.drop_datagram(from, DropReason::QueueFull);
                }
                self.update_max_owd(now);
            }
            Control::RetransmitRequest {
                requester,
                session,
                sequence,
                count,
            } => {
                // A gateway's, or a proxy's for its children ([`crate::repair`]).
                let from_below = from_role.is_some_and(|(role, _)| role != Role::Root);
                if session != self.core.session || !from_below || requester != from.0 {
                    self.core.drop_datagram(from, DropReason::Unexpected);
                    return;
                }
                self.retransmit(from, sequence, count);
            }
            // The global-FIFO merge's heartbeat order from an idle layer-1 node.
            Control::OrderHeartbeat { sender, time }
                if sender == from.0 && from_role.is_some_and(|(_, layer)| layer == 1) =>
            {
                if !self.sequencer.push_heartbeat(now, from, time) {
                    return self.core.drop_datagram(from, DropReason::Unexpected);
                }
                self.release_orders(now);
            }
            Control::ResponseGap {
                requester,
                participant,
                from: first,
                count,
            } => {
                let theirs = requester == from.0
                    && self
                        .core
                        .plan
                        .participant_gateways(participant)
                        .any(|g| g == from);
                if !theirs {
                    return self.core.drop_datagram(from, DropReason::Unexpected);
                }
                self.fill_responses(from, participant, first, count);
            }
            Control::SnapshotRequest {
                requester,
                session,
                packet_seq,
                part,
            } => {
                let gateway = from_role.is_some_and(|(role, _)| role == Role::Gateway);
                if session != self.core.session || !gateway || requester != from.0 {
                    return self.core.drop_datagram(from, DropReason::Unexpected);
                }
                self.answer_snapshot(now, from, packet_seq, part);
            }
            _ => self.core.drop_datagram(from, DropReason::Unexpected),
        }
    }

    /// Sends gateway `to` the responses of `participant` it asked for again: those still held,
    /// and the status if some are not.
    fn fill_responses(&mut self, to: NodeId, participant: u32, first: u64, count: u32) {
        if count == 0 {
            // A gateway starting its stream, from its first order's time (`first`, ns).
            let start = self.responses.start_for(participant, first);
            let reply = Control::ResponseStatus {
                participant,
                oldest: 0,
                next: start,
            };
            self.core.send_message(to, &reply);
            return;
        }
        let core = &mut self.core;
        let complete = self.responses.fill(participant, first, count, |datagram| {
            core.send_bytes(&[to], datagram);
        });
        if !complete {
            let (oldest, next) = self.responses.status(participant);
            let status = Control::ResponseStatus {
                participant,
                oldest,
                next,
            };
            self.core.send_message(to, &status);
        }
    }

    /// Sends the quiet statuses due at `now` to their participants' gateways.
    fn send_statuses(&mut self, now: Instant) {
        while let Some((participant, oldest, next)) = self.responses.poll_status(now) {
            let status = Control::ResponseStatus {
                participant,
                oldest,
                next,
            };
            let plan = Arc::clone(&self.core.plan);
            for gateway in plan.participant_gateways(participant) {
                self.core.send_message(gateway, &status);
            }
        }
        let at = self.responses.next_status();
        self.core.timers.arm(Timer::ResponseStatus, at);
    }

    /// Notes a response datagram that went at `now` (a held or re-sent one, known by its
    /// bytes): for a retry of its order ([`Answers`]) and for gap requests ([`ResponseLog`]).
    fn note_response(&mut self, now: Instant, datagram: &[u8]) {
        let Some((seq, header)) = response_header(datagram) else {
            return;
        };
        let time_ns = header.time.as_nanos();
        self.record_response(now, header.dedupe_key(), seq, time_ns, datagram);
    }

    /// Notes response `seq` of order `key` (engine time `time_ns`), sent at `now` as
    /// `datagram`.
    fn record_response(
        &mut self,
        now: Instant,
        key: (u32, u64),
        seq: u64,
        time_ns: u64,
        datagram: &[u8],
    ) {
        self.answers.note(now, key, seq);
        self.responses.sent(now, key.0, seq, time_ns, datagram);
        if let Some(at) = self.responses.next_status()
            && self
                .core
                .timers
                .get(Timer::ResponseStatus)
                .is_none_or(|t| at < t)
        {
            self.core.timers.set(Timer::ResponseStatus, at);
        }
    }

    fn on_hop(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        let Some((hop, message)) = self.core.accept_hop(from, 1, bytes) else {
            return;
        };
        let here = ExchangeTime::from_nanos(now.as_nanos());
        self.meter
            .record(now, from, here.saturating_nanos_since(hop.send_time));
        let header = *message.header();
        if stamped_too_far_ahead(header.time, now.as_nanos()) {
            return self.core.drop_datagram(from, DropReason::AheadOfClock);
        }
        match self
            .hedge_dedupe
            .first_copy(header.dedupe_key(), header.time, now)
        {
            Admit::First => {}
            Admit::Duplicate => {
                self.answer_again(header.dedupe_key(), hop.attempt);
                return self.core.drop_datagram(from, DropReason::Duplicate);
            }
            Admit::Stale => return self.core.drop_datagram(from, DropReason::TooOld),
        }
        if !self.sequencer.push(now, from, header.time, hop.order) {
            // Dropped after all: a copy resent after a failover must not count as a
            // duplicate of this one.
            self.hedge_dedupe.forget(header.dedupe_key());
            return self.core.drop_datagram(from, DropReason::QueueFull);
        }
        self.release_orders(now);
    }

    /// A copy of an order already taken came back as transmission `attempt`: a retry means
    /// its gateway heard no answer, so the responses sent to it go again ([`Answers`]).
    fn answer_again(&mut self, key: (u32, u64), attempt: u16) {
        if attempt == 0 {
            return;
        }
        let gateways: Vec<NodeId> = self.core.plan.participant_gateways(key.0).collect();
        for &seq in self.answers.replay(key, attempt) {
            if let Some(datagram) = self.responses.get(key.0, seq) {
                self.core.send_bytes(&gateways, datagram);
            }
        }
    }

    /// Responses sent again to a copy of an order whose answer was lost.
    pub fn responses_replayed(&self) -> u64 {
        self.answers.replayed
    }

    /// Responses numbered for `participant` so far: what each of its gateways receives once
    /// its stream is complete ([`crate::responses`]).
    pub fn responses_numbered(&self, participant: u32) -> u64 {
        self.responses.status(participant).1 - 1
    }

    /// Responses sent again for gateways' gap requests ([`crate::responses`]).
    pub fn responses_refilled(&self) -> u64 {
        self.responses.refilled
    }

    /// Response statuses sent to quiet participants' gateways ([`crate::responses`]).
    pub fn response_statuses(&self) -> u64 {
        self.responses.statuses
    }

    /// Feeds the orders the sequencer releases at `now` to the engine, [`STEP_ORDERS_MAX`] at
    /// most, sends the responses, publishes the market data of the whole batch, and re-arms
    /// the sequencer timer (at once if orders due are left).
    fn release_orders(&mut self, now: Instant) {
        if self.durable.as_ref().is_some_and(Durable::backlogged) {
            // Backpressure: the orders wait in the sequencer until `handle_durable`.
            self.core.timers.stop(Timer::Sequencer);
            return;
        }
        let here = ExchangeTime::from_nanos(now.as_nanos());
        let opened = self.begin_step(RecordKind::Batch, here);
        let mut market_data = core::mem::take(&mut self.market_data);
        market_data.clear();
        let mut taken = 0;
        while taken < STEP_ORDERS_MAX
            && self.step_has_room(market_data.len())
            && let Some((bytes, len, arrival)) = self
                .sequencer
                .pop_ready(now, |w| (w.bytes, w.len, w.arrival))
        {
            taken += 1;
            let Ok(message) = wire::order::Repr::parse(&bytes[..len as usize]) else {
                unreachable!("orders were parsed when they arrived");
            };
            if let Some(durable) = self.durable.as_mut() {
                durable.add_order(&bytes[..len as usize]);
            }
            let mut outputs = core::mem::take(&mut self.outputs);
            self.exchange.process(here, &message, &mut outputs);
            for (participant, response) in &outputs.responses {
                let gateways: Vec<NodeId> =
                    self.core.plan.participant_gateways(*participant).collect();
                let mut buf = [0u8; wire::response::DATAGRAM_MAX];
                let seq = self.responses.number(*participant);
                let Ok(len) = wire::response::emit(&mut buf, seq, response) else {
                    unreachable!("a response fits a datagram");
                };
                let datagram = &buf[..len];
                let queued = match self.durable.as_mut() {
                    None => {
                        // Noted even if the outbox is full: a gap request gets it.
                        let header = response.header();
                        let time_ns = header.time.as_nanos();
                        self.record_response(now, header.dedupe_key(), seq, time_ns, datagram);
                        self.core.outbox.push(&gateways, |out| {
                            out[..len].copy_from_slice(datagram);
                            len
                        })
                    }
                    Some(durable) => {
                        durable.hold(&gateways, datagram);
                        true
                    }
                };
                if queued {
                    self.core.counters.responses += 1;
                    self.core.counters.copies_out += gateways.len() as u64;
                } else {
                    let id = self.core.id;
                    self.core.drop_datagram(id, DropReason::QueueFull);
                }
            }
            market_data.extend_from_slice(&outputs.itch);
            let header = *message.header();
            let (side, price, shares) = match message {
                wire::order::Repr::Enter(e) => (Some(e.side), e.price, e.shares),
                wire::order::Repr::Replace(r) => (None, r.price, r.shares),
                _ => (None, 0, 0),
            };
            self.core.counters.sequenced += 1;
            self.core.counters.fills += outputs.fills as u64;
            self.core.event(Event::Sequenced(Sequenced {
                participant: header.participant_id,
                client_order_id: header.client_order_id,
                msg_type: message.msg_type(),
                generation: header.time,
                arrived: ExchangeTime::from_nanos(arrival.as_nanos()),
                sequenced: here,
                side,
                price,
                shares,
                filled: outputs.filled,
                accepted: outputs.accepted,
            }));
            self.outputs = outputs;
        }
        if !market_data.is_empty() {
            self.publish(now, &market_data);
        }
        if opened {
            self.end_step();
        }
        self.market_data = market_data;
        let at = self.sequencer.next_release();
        self.core.timers.arm(Timer::Sequencer, at);
    }

    fn update_max_owd(&mut self, now: Instant) {
        let owd = &self.core.config.owd;
        let max = match owd.fixed_owd {
            Some(fixed) => duration_nanos(fixed),
            None => self
                .reports
                .max(now, owd.report_expiry)
                .unwrap_or_else(|| duration_nanos(owd.initial_owd)),
        };
        if max != self.max_owd_ns {
            self.max_owd_ns = max;
            self.core.event(Event::DeadlineOffset { max_owd_ns: max });
        }
    }

    fn retransmit(&mut self, to: NodeId, sequence: u64, count: u16) {
        let end = sequence.saturating_add(count.max(1) as u64);
        // With a journal, packets not yet durable were never sent: never resend them.
        let released = self.durable.as_ref().map(|d| d.released_sequence);
        if released.is_some_and(|released| sequence >= released) {
            self.core.drop_datagram(to, DropReason::Unexpected);
            return;
        }
        let released = released.unwrap_or(u64::MAX);
        let oldest = self.rewinder.oldest_sequence();
        let mut from = sequence;
        if oldest.is_none_or(|oldest| sequence < oldest) {
            let plan = self
                .durable
                .as_mut()
                .map(|d| d.plan_read(to, sequence, count));
            match plan {
                Some(ReadPlan::Queued) => return,
                // Answering "unavailable" would make the gateway skip packets the journal
                // holds; unanswered, it asks again.
                Some(ReadPlan::Busy) => {
                    return self.core.drop_datagram(to, DropReason::QueueFull);
                }
                Some(ReadPlan::Absent) | None => {}
            }
            let unavailable = Control::RetransmitUnavailable {
                requester: to.0,
                session: self.core.session,
                sequence,
                count,
                oldest_available: oldest.unwrap_or(self.next_sequence),
            };
            self.core.send_message(to, &unavailable);
            // What it still holds of the range goes with the answer. Asked for again, its
            // oldest packet would be gone by the time the request came (the rewinder drops
            // its oldest with each packet published), and so on: the asker would chase the
            // edge to the end of its gap and skip all of it.
            match oldest {
                Some(oldest) if oldest < end => from = oldest,
                _ => return,
            }
        }
        let Some(mut packet_seq) = self.rewinder.find(from) else {
            return;
        };
        for _ in 0..RETRANSMIT_PACKETS_MAX {
            let Some(stored) = self.rewinder.get(packet_seq) else {
                break;
            };
            if stored.sequence >= end || stored.sequence >= released {
                break;
            }
            let len = stored.bytes.len();
            self.packet[..len].copy_from_slice(&stored.bytes);
            if wire::market::mark_retransmission(&mut self.packet[..len]).is_ok() {
                let bytes = core::mem::take(&mut self.packet);
                self.core.send_bytes(&[to], &bytes[..len]);
                self.packet = bytes;
                self.core.counters.retransmissions += 1;
            }
            packet_seq += 1;
        }
    }

    /// Sends gateway `to` the parts it asked for of a book snapshot covering the live packets
    /// before `packet_seq` ([`crate::snapshot`]): of the one kept if it covers them and the
    /// rewinder still holds the packet it ends at, else of a new one, if the last was taken
    /// at least [`crate::snapshot::TAKE_INTERVAL_MIN`] ago (else none: dropped, counted).
    fn answer_snapshot(&mut self, now: Instant, to: NodeId, packet_seq: u64, part: u32) {
        if packet_seq > self.next_packet_seq {
            // Past the stream's end: no snapshot can cover it.
            return self.core.drop_datagram(to, DropReason::Unexpected);
        }
        let fit = |taken: &Taken| {
            taken.packet_seq >= packet_seq
                && (taken.packet_seq == self.next_packet_seq
                    || self.rewinder.get(taken.packet_seq).is_some())
        };
        let taken = match self.snapshot.take() {
            Some(taken) if fit(&taken) => taken,
            kept if self
                .snapshot_taken_at
                .is_some_and(|at| now < at + crate::snapshot::TAKE_INTERVAL_MIN) =>
            {
                // Too soon for another pass over the book: the gateway asks again.
                self.snapshot = kept;
                return self.core.drop_datagram(to, DropReason::QueueFull);
            }
            _ => {
                self.snapshot_taken_at = Some(now);
                let send_time = ExchangeTime::from_nanos(now.as_nanos());
                let messages = self.exchange.book_messages(send_time);
                self.snapshots_taken += 1;
                Taken::new(
                    self.core.session,
                    self.next_sequence,
                    self.next_packet_seq,
                    send_time,
                    &messages,
                )
            }
        };
        for bytes in taken.answer(packet_seq, part) {
            let held = self
                .durable
                .as_mut()
                .is_some_and(|durable| durable.hold_behind(&[to], bytes));
            if !held {
                self.core.send_bytes(&[to], bytes);
            }
            self.snapshot_parts_sent += 1;
        }
        self.snapshot = Some(taken);
    }

    /// Book snapshots taken for gateways, and parts sent ([`crate::snapshot`]).
    pub fn snapshots(&self) -> (u64, u64) {
        (self.snapshots_taken, self.snapshot_parts_sent)
    }

    /// Moves the outputs of durable records to the outbox while it has room; the rest wait
    /// (`poll_transmit` moves more once the outbox is drained), never dropped. Responses are
    /// noted for answering a copy sent again.
    fn release_held(&mut self, now: Instant) {
        loop {
            let Some(durable) = self.durable.as_mut() else {
                return;
            };
            let upto = durable.durable_upto;
            let Some(held) = durable.held.front().filter(|h| h.record < upto) else {
                return;
            };
            let payload = &held.payload;
            let queued = self.core.outbox.push(&held.destinations, |buf| {
                buf[..payload.len()].copy_from_slice(payload);
                payload.len()
            });
            if !queued {
                break;
            }
            if let Some(next_sequence) = held.next_sequence {
                durable.released_sequence = next_sequence;
            }
            let held = durable.held.pop_front().expect("the front was there");
            self.note_response(now, &held.payload);
        }
    }

    /// Re-sends the next [`RESEND_BATCH`] recovered responses.
    fn resend_batch(&mut self, now: Instant) {
        for _ in 0..RESEND_BATCH {
            let Some(r) = self.resend.front() else {
                break;
            };
            let queued = self.core.outbox.push(&r.destinations, |buf| {
                buf[..r.payload.len()].copy_from_slice(&r.payload);
                r.payload.len()
            });
            if !queued {
                // The outbox is full: the rest waits for the next interval.
                break;
            }
            self.responses_resent += 1;
            self.core.counters.copies_out += r.destinations.len() as u64;
            let r = self.resend.pop_front().expect("the front was there");
            self.note_response(now, &r.payload);
        }
        self.resend_at = (!self.resend.is_empty()).then(|| now + RESEND_INTERVAL);
    }

    fn check_invariants_cheap(&self) {
        debug_assert_eq!(self.rewinder.next, self.next_packet_seq);
        debug_assert!(self.rewinder.next - self.rewinder.oldest <= self.rewinder.ring.len() as u64);
        debug_assert!(self.max_owd_ns < u64::MAX / 2);
        debug_assert_eq!(self.resend_at.is_some(), !self.resend.is_empty());
        if let Some(durable) = &self.durable {
            debug_assert!(durable.released_sequence <= self.next_sequence);
        }
    }
}

impl Node for Root {
    fn id(&self) -> NodeId {
        self.core.id
    }

    fn handle_datagram(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        self.core.counters.datagrams_in += 1;
        if self.core.plan.node(from).is_none() {
            self.core.drop_datagram(from, DropReason::UnknownSender);
            return;
        }
        match wire::classify(bytes) {
            Kind::Control => match Control::parse(bytes) {
                Ok(control) => self.on_control(now, from, control),
                Err(_) => self.core.drop_datagram(from, DropReason::Malformed),
            },
            Kind::Hop => self.on_hop(now, from, bytes),
            Kind::MarketData | Kind::Order | Kind::Response => {
                self.core.drop_datagram(from, DropReason::Unexpected)
            }
            Kind::Unknown => self.core.drop_datagram(from, DropReason::Malformed),
        }
        self.check_invariants_cheap();
    }

    fn handle_timeout(&mut self, now: Instant) {
        if core::mem::take(&mut self.restart_statuses) {
            self.responses.restart_statuses(now);
            let at = self.responses.next_status();
            self.core.timers.arm(Timer::ResponseStatus, at);
        }
        if self.resend_at.is_some_and(|at| at <= now) {
            self.resend_batch(now);
        }
        if self.core.timers.expire(Timer::IdlePacket, now) {
            // A header-only packet keeps the stream moving so a lost last packet is noticed.
            if now.saturating_duration_since(self.last_packet)
                >= self.core.config.idle_packet_interval
                || self.next_packet_seq == 1
            {
                if self.durable.as_ref().is_some_and(Durable::backlogged) {
                    let at = now + self.core.config.idle_packet_interval;
                    self.core.timers.set(Timer::IdlePacket, at);
                } else {
                    let opened = self.begin_step(RecordKind::Packets, ExchangeTime::ZERO);
                    self.send_packet(now, |_| {});
                    if opened {
                        self.end_step();
                    }
                }
            } else {
                let at = self.last_packet + self.core.config.idle_packet_interval;
                self.core.timers.set(Timer::IdlePacket, at);
            }
        }
        if self.core.timers.expire(Timer::Sequencer, now) {
            self.release_orders(now);
        }
        if self.core.timers.expire(Timer::Feedback, now) {
            crate::inbound::send_feedback(&mut self.core, &mut self.meter, &mut self.feedback, now);
        }
        if self.core.timers.expire(Timer::ResponseStatus, now) {
            self.send_statuses(now);
        }
        self.update_max_owd(now);
        self.check_invariants_cheap();
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>> {
        // Outputs of durable records the outbox had no room for go now.
        self.release_held(now);
        self.core.outbox.poll()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.core.timers.next(), self.resend_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.core.events.pop_front()
    }

    fn check_invariants(&self) {
        self.check_invariants_cheap();
        assert!(self.next_packet_seq >= 1 && self.next_sequence >= 1);
        if let Some(seq) = self.rewinder.check_some() {
            panic!("rewinder packet {seq} is not the packet stored");
        }
        self.exchange.check_invariants();
        self.sequencer.check_invariants();
        self.responses.check_invariants();
        if let Some(durable) = &self.durable {
            assert!(
                !durable.step_open(),
                "steps close within the handler that opened them"
            );
            durable.check_invariants();
        }
    }
}

/// The number and order header of a response datagram, if it is one.
fn response_header(datagram: &[u8]) -> Option<(u64, wire::order::OrderHeader)> {
    let response = wire::response::Response::parse(datagram).ok()?;
    let header = wire::order::Packet::new_checked(response.order)
        .ok()?
        .header();
    Some((response.seq, header))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(capacity: usize, packets: u64) -> Rewinder {
        let mut rewinder = Rewinder::new(capacity);
        for seq in 1..=packets {
            rewinder.store(seq, seq * 10, seq * 10 + 3, &[seq as u8; 8]);
        }
        rewinder
    }

    /// A buy of 100 at `price` (IOC) as order `client_order_id` of participant
    /// `participant`, generated at `time` ns, transmission `attempt`, in its hop envelope.
    fn hop(participant: u32, client_order_id: u64, time: u64, attempt: u16) -> Vec<u8> {
        hop_at(
            participant,
            client_order_id,
            time,
            attempt,
            wire::Side::Buy,
            1_000_000,
        )
    }

    /// [`hop`] on `side` at `price`.
    fn hop_at(
        participant: u32,
        client_order_id: u64,
        time: u64,
        attempt: u16,
        side: wire::Side,
        price: u32,
    ) -> Vec<u8> {
        let tif = wire::order::TimeInForce::ImmediateOrCancel;
        let enter = (side, price, 100, tif);
        hop_enter(participant, client_order_id, time, attempt, enter)
    }

    /// A hop envelope of an enter: `(side, price, shares, time in force)`.
    fn hop_enter(
        participant: u32,
        client_order_id: u64,
        time: u64,
        attempt: u16,
        (side, price, shares, time_in_force): (wire::Side, u32, u32, wire::order::TimeInForce),
    ) -> Vec<u8> {
        use wire::order::{Display, Enter, OrderHeader, OrderType, Repr as OrderMsg};
        let enter = OrderMsg::Enter(Enter {
            header: OrderHeader {
                client_order_id,
                participant_id: participant,
                gateway_id: 0,
                time: ExchangeTime(time),
            },
            side,
            shares,
            stock: wire::Stock::new("JSPR").expect("a valid symbol"),
            price,
            time_in_force,
            order_type: OrderType::Limit,
            display: Display::Visible,
        });
        let mut buf = vec![0u8; 128];
        let len = wire::hop::emit(&mut buf, ExchangeTime(time), attempt, &enter).expect("fits");
        buf.truncate(len);
        buf
    }

    /// A journaling root of a `<2,4>` tree over 8 gateways, and its first layer-1 proxy.
    fn journaling_root() -> (Root, NodeId) {
        use crate::plan::PlanConfig;
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let proxy = NodeId(plan.proxies().start);
        let config = NodeConfig {
            journal: true,
            ..NodeConfig::default()
        };
        (Root::new(plan, config).expect("root"), proxy)
    }

    /// Runs `root`'s timers at `at` and makes everything it journaled durable.
    fn turn_durably(root: &mut Root, at: Instant) {
        root.handle_timeout(at);
        while root.poll_journal().is_some() {}
        if let Some((produced, _)) = root.journal_position() {
            root.handle_durable(at, produced);
        }
    }

    /// `root` recovered from its `snapshot` alone (no record after it).
    fn recovered_from(root: &Root, snapshot: &[u8]) -> Root {
        let (plan, config) = (Arc::clone(&root.core.plan), (*root.core.config).clone());
        let records: [&[u8]; 0] = [];
        Root::recover(plan, config, Some(snapshot), records).expect("recover")
    }

    /// A journaling root that took order 7 of participant 1 at 1 ms and sequenced it, durably,
    /// at 2 ms; its first proxy; and those two times.
    fn answered_root() -> (Root, NodeId, Instant, Instant) {
        let (mut root, proxy) = journaling_root();
        let ms = Duration::from_millis(1);
        let t0 = Instant::ZERO + ms;
        root.handle_datagram(t0, proxy, &hop(1, 7, t0.as_nanos(), 0));
        let t1 = t0 + ms;
        turn_durably(&mut root, t1);
        (root, proxy, t0, t1)
    }

    /// Goal: a root recovered from a snapshot does not sequence again an order it sequenced
    /// before the snapshot (a gateway whose answer was lost sends it again: an IOC would
    /// execute twice), and does sequence an order it had taken but not yet sequenced (that
    /// one died with it). Method: order A sequenced and durable; order B taken, still in the
    /// sequencer; a snapshot; a root recovered from it gets a copy of each, sent again.
    #[test]
    fn a_recovered_root_sequences_no_order_twice() {
        let (mut root, proxy, t0, t1) = answered_root();
        let ms = Duration::from_millis(1);
        assert_eq!(root.core.counters.sequenced, 1);
        root.handle_datagram(t1, proxy, &hop(2, 8, t1.as_nanos(), 0));

        let mut recovered = recovered_from(&root, &root.snapshot());
        let t2 = t1 + ms;
        recovered.handle_datagram(t2, proxy, &hop(1, 7, t0.as_nanos(), 1));
        recovered.handle_datagram(t2, proxy, &hop(2, 8, t1.as_nanos(), 1));
        for turn in 1..=10 {
            turn_durably(&mut recovered, t2 + ms * turn);
        }
        assert_eq!(
            recovered.core.counters.dropped(DropReason::Duplicate),
            1,
            "A, sequenced before the snapshot, is a duplicate"
        );
        assert_eq!(recovered.core.counters.sequenced, 1, "B goes on, once");
    }

    /// Drains `root`'s outbox: each datagram with its destinations.
    fn sent(root: &mut Root, now: Instant) -> Vec<(Vec<NodeId>, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = root.poll_transmit(now) {
            out.push((t.destinations.to_vec(), t.payload.to_vec()));
        }
        out
    }

    /// Goal: a journaling root's book snapshot never shows an order a crash could still lose:
    /// its parts leave after every packet they cover, once durable. Method: a resting order
    /// is sequenced, its record not yet durable; a gateway asks for a snapshot; nothing goes
    /// to the gateway until the record is durable, and then the part (one order, resuming
    /// at the next packet) goes after the packet that added the order.
    #[test]
    fn a_snapshot_leaves_after_the_packets_it_covers_are_durable() {
        let (mut root, proxy) = journaling_root();
        let gateway = NodeId(root.core.plan.gateways().start);
        let ms = Duration::from_millis(1);
        let t0 = Instant::ZERO + ms;
        let day = (
            wire::Side::Sell,
            1_000_000,
            300,
            wire::order::TimeInForce::Day,
        );
        root.handle_datagram(t0, proxy, &hop_enter(1, 7, t0.as_nanos(), 0, day));
        let t1 = t0 + ms;
        root.handle_timeout(t1);
        while root.poll_journal().is_some() {}
        assert_eq!(root.resting_orders(), 1);
        let covers = root.next_packet_seq();
        sent(&mut root, t1);
        let ask = Control::SnapshotRequest {
            requester: gateway.0,
            session: root.core.session,
            packet_seq: covers,
            part: 0,
        };
        let mut buf = [0u8; 64];
        let len = ask.emit(&mut buf).expect("fits");
        root.handle_datagram(t1, gateway, &buf[..len]);
        assert!(
            sent(&mut root, t1).iter().all(|(to, _)| to != &[gateway]),
            "nothing for the gateway before the record is durable"
        );
        let (produced, _) = root.journal_position().expect("journaling");
        root.handle_durable(t1, produced);
        let out = sent(&mut root, t1);
        let part = out
            .iter()
            .position(|(to, _)| to == &[gateway])
            .expect("the part went");
        let add = out
            .iter()
            .position(|(to, bytes)| {
                to != &[gateway]
                    && wire::parse_market_data(bytes).is_ok_and(|d| d.message_count() > 0)
            })
            .expect("the packet adding the order went");
        assert!(add < part, "the packet it covers goes first");
        let data = wire::parse_market_data(&out[part].1).expect("a part");
        assert_eq!(data.header.snapshot_part(), Some((0, 1)));
        assert_eq!(data.header.packet_seq, covers);
        assert_eq!(data.message_count(), 1);
        assert_eq!(root.snapshots(), (1, 1));
        // Another gateway's request of a proxy's is refused.
        root.handle_datagram(t1, proxy, &buf[..len]);
        assert_eq!(root.snapshots(), (1, 1));
    }

    /// Goal: a gateway asking for ever newer snapshots cannot have the root pass over its
    /// whole book more than once per `TAKE_INTERVAL_MIN`; the kept snapshot still answers.
    /// Method: a snapshot at the stream's end; a packet; a request for one covering it
    /// within the interval is dropped and counted, one for the kept one answered, and the
    /// same request after the interval takes a new one.
    #[test]
    fn a_new_snapshot_is_taken_at_most_once_per_interval() {
        use crate::plan::PlanConfig;
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let gateway = NodeId(plan.gateways().start);
        let mut root = Root::new(plan, NodeConfig::default()).expect("root");
        let ask = |root: &mut Root, now: Instant, packet_seq: u64| {
            let request = Control::SnapshotRequest {
                requester: gateway.0,
                session: root.core.session,
                packet_seq,
                part: 0,
            };
            let mut buf = [0u8; 64];
            let len = request.emit(&mut buf).expect("fits");
            root.handle_datagram(now, gateway, &buf[..len]);
            sent(root, now)
                .iter()
                .filter(|(to, _)| to == &[gateway])
                .count()
        };
        let t0 = Instant::ZERO + Duration::from_millis(1);
        root.publish(t0, &[wire::Raw(b"tick")]);
        let first = root.next_packet_seq();
        assert_eq!(ask(&mut root, t0, first), 1);
        root.publish(t0, &[wire::Raw(b"tick")]);
        let t1 = t0 + crate::snapshot::TAKE_INTERVAL_MIN / 2;
        let refused = root.core.counters.dropped(DropReason::QueueFull);
        assert_eq!(ask(&mut root, t1, first + 1), 0, "too soon for a new one");
        assert_eq!(
            root.core.counters.dropped(DropReason::QueueFull),
            refused + 1
        );
        assert_eq!(ask(&mut root, t1, first), 1, "the kept one still answers");
        assert_eq!(root.snapshots().0, 1);
        let t2 = t0 + crate::snapshot::TAKE_INTERVAL_MIN;
        assert_eq!(ask(&mut root, t2, first + 1), 1);
        assert_eq!(root.snapshots().0, 2);
    }

    /// Goal: an order stamped far ahead of the root's clock (from a gateway whose clock is not
    /// synced, or made up) is dropped and counted, and does not make the orders after it
    /// late. Method: an order stamped an hour ahead, then one stamped now; the first is
    /// dropped, the second sequenced on time.
    #[test]
    fn an_order_stamped_far_ahead_is_dropped() {
        let (mut root, proxy) = journaling_root();
        let now = Instant::ZERO + Duration::from_secs(10);
        let hour = 3_600_000_000_000;
        root.handle_datagram(now, proxy, &hop(1, 1, now.as_nanos() + hour, 0));
        assert_eq!(root.core.counters.dropped(DropReason::AheadOfClock), 1);
        root.handle_datagram(now, proxy, &hop(2, 1, now.as_nanos(), 0));
        let at = now + Duration::from_millis(1);
        root.handle_timeout(at);
        while root.poll_journal().is_some() {}
        assert_eq!(root.core.counters.sequenced, 1);
        assert_eq!(root.sequencer.stats().late, 0);
    }

    /// Goal: a recovered root says again what it holds for each participant that had
    /// responses (a quiet status), so that a gateway whose last response before the crash
    /// was lost learns of it even if its participant sends nothing more. Method: one order
    /// answered, a snapshot, a recovered root run past `response_status_after`: a status for
    /// the participant goes to its gateways.
    #[test]
    fn a_recovered_root_says_again_what_it_holds() {
        let (mut root, _, _, t1) = answered_root();
        let ms = Duration::from_millis(1);
        while root.poll_transmit(t1).is_some() {}

        let mut recovered = recovered_from(&root, &root.snapshot());
        let t2 = t1 + Duration::from_secs(1);
        let t3 = t2 + root.core.config.response_status_after + ms;
        let mut statuses = Vec::new();
        for at in [t2, t3] {
            recovered.handle_timeout(at);
            while let Some(t) = recovered.poll_transmit(at) {
                if let Ok(Control::ResponseStatus { participant, .. }) = Control::parse(t.payload) {
                    statuses.extend(t.destinations.iter().map(|&g| (participant, g)));
                }
            }
        }
        let gateways: Vec<(u32, NodeId)> = (root.core.plan)
            .participant_gateways(1)
            .map(|g| (1, g))
            .collect();
        assert_eq!(statuses, gateways);
    }

    /// Goal: a journaling root's market is never so large that one step's record could
    /// outgrow what the journal appends (an order sweeping 600K resting orders made a 20 MB
    /// record and panicked the root's journal, after every restart too), and a step stops
    /// taking orders before its record could, whatever they publish. Method: a market of
    /// `JOURNALED_ORDERS_MAX + 1` orders is refused with the journal on; at
    /// `JOURNALED_ORDERS_MAX`, 65,535 one-share asks rest, then 65,535 two-share bids at their
    /// price are due at once (each takes an ask and rests its other share: two messages
    /// each); every record is within `RECORD_BYTES_MAX`, the bids take two steps at least,
    /// and every order is sequenced.
    #[test]
    fn a_step_record_stays_within_what_the_journal_appends() {
        use crate::journal::{JOURNALED_ORDERS_MAX, RECORD_BYTES_MAX};
        use wire::order::TimeInForce::Day;
        let (root, proxy) = journaling_root();
        let mut config = (*root.core.config).clone();
        config.market.orders_max = JOURNALED_ORDERS_MAX + 1;
        let refused = config.validate().expect_err("too large a market");
        assert!(refused.contains("orders_max"), "{refused}");
        config.market.orders_max = JOURNALED_ORDERS_MAX;
        let mut root = Root::new(Arc::clone(&root.core.plan), config).expect("root");
        let price = 1_000_000;
        let mut at = Instant::ZERO + Duration::from_millis(1);
        let steps = |root: &mut Root, orders: &[Vec<u8>], at: &mut Instant| {
            let before = root.core.counters.sequenced;
            for order in orders {
                root.handle_datagram(*at, proxy, order);
            }
            assert_eq!(root.core.counters.dropped_total(), 0);
            let mut records = 0;
            while root.core.counters.sequenced < before + orders.len() as u64 {
                *at += Duration::from_millis(1);
                root.handle_timeout(*at);
                while let Some(record) = root.poll_journal() {
                    assert!(record.len() <= RECORD_BYTES_MAX, "{} bytes", record.len());
                    let record = Record::parse(record).expect("a record");
                    records += !record.orders.is_empty() as u32;
                }
                if let Some((produced, _)) = root.journal_position() {
                    root.handle_durable(*at, produced);
                }
                assert!(records < 100, "every order is sequenced");
            }
            records
        };
        let n = STEP_ORDERS_MAX as u64;
        let time = at.as_nanos() - 500_000;
        let asks: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                hop_enter(
                    (i % 4) as u32,
                    i / 4 + 1,
                    time,
                    0,
                    (wire::Side::Sell, price, 1, Day),
                )
            })
            .collect();
        steps(&mut root, &asks, &mut at);
        let time = at.as_nanos() - 500_000;
        let bids: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                hop_enter(
                    4 + (i % 4) as u32,
                    i / 4 + 1,
                    time,
                    0,
                    (wire::Side::Buy, price, 2, Day),
                )
            })
            .collect();
        let records = steps(&mut root, &bids, &mut at);
        assert!(records >= 2, "the bids in {records} records");
        assert_eq!(root.core.counters.fills, n, "each bid took an ask");
    }

    /// Goal: a journaling root sequences any number of orders due at once without a record
    /// over the journal's 65,535 orders (the 65,536th panicked). Method: a full sequencer
    /// (65,536 orders from a layer-1 proxy, all due); timeouts until none is left; every
    /// record the root journals holds at most `STEP_ORDERS_MAX` orders, and every order is
    /// sequenced once.
    #[test]
    fn a_full_sequencer_is_sequenced_in_steps() {
        let (mut root, proxy) = journaling_root();
        let orders_max = root.core.config.sequencer.orders_max as u64;
        let now = Instant::ZERO + Duration::from_millis(1);
        for i in 0..orders_max {
            let side = [wire::Side::Buy, wire::Side::Sell][(i % 2) as usize];
            let price = 1_000_000 + (i % 50) as u32 * 100;
            let order = hop_at((i % 8) as u32, i + 1, 500_000, 0, side, price);
            root.handle_datagram(now, proxy, &order);
        }
        assert_eq!(root.core.counters.dropped_total(), 0);
        let mut at = now + Duration::from_millis(1);
        let mut records = 0;
        for _ in 0..100 {
            root.handle_timeout(at);
            while let Some(record) = root.poll_journal() {
                let record = Record::parse(record).expect("a record");
                assert!(record.orders.len() <= STEP_ORDERS_MAX as usize);
                records += 1;
            }
            if let Some((produced, _)) = root.journal_position() {
                root.handle_durable(at, produced);
            }
            if root.core.counters.sequenced == orders_max {
                break;
            }
            at += Duration::from_micros(10);
        }
        assert_eq!(root.core.counters.sequenced, orders_max);
        assert!(
            records >= orders_max / STEP_ORDERS_MAX as u64,
            "{records} records"
        );
    }

    /// Goal: a request that starts before the rewinder's oldest packet is answered
    /// "unavailable" and, at once, with what the rewinder still holds of it: asked for again,
    /// the oldest would be gone by then (each packet published drops one), and the asker
    /// would chase the edge to the end of its gap. Method: a root of `<2,4>` with a rewinder
    /// of 16 packets publishes 40 one-message packets (messages 2 numbers apart: a header and
    /// the message); a gateway asks for messages 1-80.
    #[test]
    fn a_request_across_the_rewinders_edge_gets_what_is_left() {
        use crate::plan::PlanConfig;
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let gateway = NodeId(plan.gateways().start);
        let config = NodeConfig {
            rewinder_packets: 16,
            ..NodeConfig::default()
        };
        let mut root = Root::new(plan, config).expect("root");
        let now = Instant::from_nanos(1_000_000);
        for k in 0..40 {
            root.publish(now + Duration::from_micros(k), &[wire::Raw(b"tick")]);
        }
        while root.poll_transmit(now).is_some() {}
        let request = crate::repair::test_request(gateway.0, "JASPER0001", 1, 80);
        root.handle_datagram(now, gateway, &request);
        let (mut oldest_told, mut resent) = (None, Vec::new());
        while let Some(t) = root.poll_transmit(now) {
            assert_eq!(t.destinations, [gateway]);
            if let Ok(Control::RetransmitUnavailable {
                oldest_available, ..
            }) = Control::parse(t.payload)
            {
                assert!(resent.is_empty(), "told first");
                oldest_told = Some(oldest_available);
            } else {
                let data = wire::market::parse_market_data(t.payload).expect("a packet");
                assert!(data.header.is_retransmission());
                resent.push((data.header.packet_seq, data.mold.sequence()));
            }
        }
        let oldest = root.rewinder.oldest_sequence().expect("holds packets");
        assert_eq!(oldest_told, Some(oldest));
        assert_eq!(resent.len(), 16, "every packet it holds: {resent:?}");
        assert_eq!(resent[0], (25, oldest));
        assert!(resent.windows(2).all(|w| w[1].0 == w[0].0 + 1));
    }

    /// Goal: the amortised check still reaches every held packet. Method: corrupt one packet
    /// of a full ring, at each position in turn, and count the calls until a check fails; it
    /// must fail within one walk of the ring (held / per-call calls, plus one to wrap).
    #[test]
    fn the_amortised_rewinder_check_reaches_every_packet() {
        let (capacity, packets) = (200usize, 450u64);
        let calls_max = capacity as u64 / REWINDER_CHECKS_PER_CALL + 2;
        let clean = filled(capacity, packets);
        for _ in 0..3 * calls_max {
            assert_eq!(clean.check_some(), None);
        }
        for corrupt in clean.oldest..clean.next {
            let mut rewinder = filled(capacity, packets);
            // Start the walk somewhere other than the corrupted packet.
            assert_eq!(rewinder.check_some(), None);
            let slot = rewinder.slot(corrupt);
            rewinder.ring[slot].next_sequence = rewinder.ring[slot].sequence;
            let caught = (0..calls_max).any(|_| rewinder.check_some() == Some(corrupt));
            assert!(
                caught,
                "packet {corrupt} not checked within {calls_max} calls"
            );
        }
    }
}
