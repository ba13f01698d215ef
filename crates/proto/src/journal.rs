//! The durable root's sans-IO side (issue 9): journal records out, durability notices in.
//!
//! With [`NodeConfig::journal`](crate::NodeConfig) on, every step of the root that changes
//! its state or its market-data stream becomes one journal record, and nothing that step
//! produced leaves the root before the driver says the record is durable:
//!
//! - a *batch*: the orders one sequencer release fed to the engine (the order messages as
//!   received, with the exchange time the engine stamped) and the market-data packets it
//!   published, byte for byte;
//! - a *packets* step: an idle header-only packet or a driver's [`Root::publish`].
//!
//! Driver obligations (the runtime, e.g. `net`, owns a `journal::Journal`):
//!
//! 1. After every handler, drain [`Root::poll_journal`] and append each record, in order; the
//!    journal index it gets must equal [`record_index`] of the bytes (assert it).
//! 2. Sync when the group-commit policy says so, then call
//!    [`Root::handle_durable`]`(now, durable_upto)`; drain the pollers after it as after any
//!    handler. Responses and packets of records `< durable_upto` are then in the outbox: an
//!    order is acknowledged only once its record is durable.
//! 3. Drain [`Root::poll_journal_read`]: each asks for a range of durable records, to
//!    regenerate packets older than the rewinder's memory ring; answer with
//!    [`Root::handle_journal_records`] (any time later, same `id`).
//! 4. Periodically, when [`Root::journal_position`] shows every produced record durable, take
//!    [`Root::snapshot`] and write it with `journal::write_snapshot` at that position once
//!    the transmits of that turn have left (e.g. at the next turn): a recovered root re-sends
//!    the responses of the records after its snapshot only (it holds those the snapshot kept,
//!    the latest 64K, for gateways that lost one). Never write a snapshot covering records
//!    that are not yet durable. A snapshot of a root holding 64K responses is ~4.3 MB and
//!    takes ~1 ms to take (`jasper bench journal`).
//! 5. On restart: open the journal (torn tail truncated), load the snapshot, and build the
//!    root with [`Root::recover`] from the snapshot and the records from its position on.
//!
//! Replay runs the recorded orders through the engine again and checks that they produce the
//! very market data recorded in the step's packets: a divergence is an error, never a silent
//! different book. The recorded packets restore the stream (`packet_seq`, MoldUDP64
//! sequence) and the rewinder exactly.
//!
//! # Record format (little-endian)
//!
//! ```text
//! version u8 = 1 | kind u8 (1 batch, 2 packets) | index u64 | sequenced_ns u64
//! orders u16  | per order:  len u8  | order message
//! packets u16 | per packet: len u16 | datagram
//! ```
//!
//! [`Root::poll_journal`]: crate::Root::poll_journal
//! [`Root::handle_durable`]: crate::Root::handle_durable
//! [`Root::poll_journal_read`]: crate::Root::poll_journal_read
//! [`Root::handle_journal_records`]: crate::Root::handle_journal_records
//! [`Root::journal_position`]: crate::Root::journal_position
//! [`Root::snapshot`]: crate::Root::snapshot
//! [`Root::recover`]: crate::Root::recover
//! [`Root::publish`]: crate::Root::publish

use std::collections::VecDeque;

use wire::ExchangeTime;

use crate::exchange::{ExchangeState, LiveOrder};
use crate::node::NodeId;

/// Version byte of a journal record.
pub const RECORD_VERSION: u8 = 1;
/// Version of a root snapshot (versions 2, without held responses, and 3, without the
/// dedupe filter's keys, are still read).
pub const SNAPSHOT_VERSION: u32 = 4;
/// Journal reads (for old retransmissions) waiting for the driver at most; a request beyond
/// them is dropped (counted [`crate::DropReason::QueueFull`]) and the gateway asks again.
pub const JOURNAL_READS_MAX: usize = 16;
/// The root remembers where one record in this many starts in the MoldUDP64 stream, to find
/// old packets in the journal.
pub const CHECKPOINT_STRIDE: u64 = 64;
/// Records one journal read covers at most.
pub const JOURNAL_READ_RECORDS_MAX: u64 = 2 * CHECKPOINT_STRIDE;

const RECORD_HEADER_LEN: usize = 1 + 1 + 8 + 8;

/// The longest record the root produces, bytes: the journal's own bound
/// (`journal::RECORD_LEN_MAX`; `net`, which has both, checks that they agree). A record
/// past it panicked the root's journal on append, and again after every restart.
pub const RECORD_BYTES_MAX: usize = 1 << 24;

/// Bytes one market-data message takes in a record at most: its ITCH bytes (at most 50),
/// its MoldUDP64 length (2), and its share of its packet's headers and record length (a
/// 1,400-byte packet holds at least 26 such messages beside ~50 bytes of headers).
pub const MESSAGE_RECORD_BYTES_MAX: usize = 56;

/// Bytes one order takes in a record at most (its length byte and the longest order).
pub(crate) const ORDER_RECORD_BYTES_MAX: usize = 1 + wire::order::Enter::LEN;

/// Resting orders a journaling root's market may hold at most: an order that sweeps the whole
/// book publishes an execution for every resting order, and the record of its step must still
/// fit [`RECORD_BYTES_MAX`] (2^17 orders x [`MESSAGE_RECORD_BYTES_MAX`]: 7.3 MB of 16.8).
pub const JOURNALED_ORDERS_MAX: u32 = 1 << 17;

/// Bytes of a step's record that one more order can add at most, in a market of `orders_max`
/// resting orders: the order, and its market data (an added, replaced or cancelled order,
/// an execution for every resting order it takes, and one for the part left of the last).
pub(crate) fn order_step_bytes_max(orders_max: u32) -> usize {
    ORDER_RECORD_BYTES_MAX + (orders_max as usize + 2) * MESSAGE_RECORD_BYTES_MAX
}

/// What [`Durable::plan_read`] made of a request for packets older than the rewinder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadPlan {
    /// A read is queued; the packets go out when the driver hands the records back.
    Queued,
    /// [`JOURNAL_READS_MAX`] reads are waiting: the packets are in the journal, but the
    /// request must come again (the gateway asks again after its backoff).
    Busy,
    /// The journal does not hold the packets.
    Absent,
}

/// What a journal record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// One sequencer release: orders and the packets they published.
    Batch = 1,
    /// Packets only: an idle packet or a driver's publish.
    Packets = 2,
}

/// A decoded journal record, borrowing its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its journal index.
    pub index: u64,
    /// Batch or packets.
    pub kind: RecordKind,
    /// The exchange time the engine stamped the batch's orders with (0 for packets).
    pub sequenced: ExchangeTime,
    /// Order messages, in engine order.
    pub orders: Vec<&'a [u8]>,
    /// Market-data datagrams, in `packet_seq` order.
    pub packets: Vec<&'a [u8]>,
}

impl<'a> Record<'a> {
    /// Parses a record; the error says what is wrong.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.u8()?;
        if version != RECORD_VERSION {
            return Err(format!(
                "journal record version {version}, expected {RECORD_VERSION}"
            ));
        }
        let kind = match r.u8()? {
            1 => RecordKind::Batch,
            2 => RecordKind::Packets,
            k => return Err(format!("journal record kind {k} unknown")),
        };
        let index = r.u64()?;
        let sequenced = ExchangeTime::from_nanos(r.u64()?);
        let mut orders = Vec::new();
        for _ in 0..r.u16()? {
            let len = r.u8()? as usize;
            orders.push(r.take(len)?);
        }
        let mut packets = Vec::new();
        for _ in 0..r.u16()? {
            let len = r.u16()? as usize;
            packets.push(r.take(len)?);
        }
        if r.at != bytes.len() {
            return Err(format!(
                "journal record {index}: {} trailing bytes",
                bytes.len() - r.at
            ));
        }
        Ok(Self {
            index,
            kind,
            sequenced,
            orders,
            packets,
        })
    }
}

/// The journal index a record carries, without parsing the rest (for drivers' checks).
pub fn record_index(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(2..10)?.try_into().ok()?))
}

/// The journal position (records covered) a root snapshot carries.
pub fn snapshot_position(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(4..12)?.try_into().ok()?))
}

/// A request for durable journal records, to regenerate old packets for a retransmission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalRead {
    /// Echo it in [`Root::handle_journal_records`](crate::Root::handle_journal_records).
    pub id: u64,
    /// Journal indices to read (all durable).
    pub records: core::ops::Range<u64>,
}

/// A retransmission waiting for journal records.
#[derive(Clone, Debug)]
pub(crate) struct PendingRead {
    pub(crate) id: u64,
    pub(crate) to: NodeId,
    pub(crate) sequence: u64,
    pub(crate) count: u16,
    pub(crate) handed_out: bool,
    pub(crate) records: core::ops::Range<u64>,
}

/// A datagram held until its record is durable.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub(crate) record: u64,
    pub(crate) destinations: Vec<NodeId>,
    pub(crate) payload: Vec<u8>,
    /// For a market-data packet: the MoldUDP64 sequence after it.
    pub(crate) next_sequence: Option<u64>,
}

/// The record being built by the current step.
#[derive(Clone, Debug)]
struct Step {
    kind: RecordKind,
    sequenced: ExchangeTime,
    orders: Vec<u8>,
    order_count: u16,
    packets: Vec<u8>,
    packet_count: u16,
    first_sequence: Option<u64>,
}

/// The root's journaling state.
#[derive(Debug)]
pub(crate) struct Durable {
    /// Index of the next record produced.
    pub(crate) next_record: u64,
    /// Records `< durable_upto` are durable.
    pub(crate) durable_upto: u64,
    /// Records produced and not yet polled.
    records: VecDeque<Vec<u8>>,
    /// Records handed to the driver so far (`durable_upto` never passes it).
    pub(crate) polled_upto: u64,
    /// The record lent by the last `poll_journal`.
    lent: Vec<u8>,
    step: Option<Step>,
    /// Outputs waiting for durability, in production order.
    pub(crate) held: VecDeque<Held>,
    /// Produced-but-not-durable records at most before the sequencer stops releasing.
    pub(crate) pending_max: u64,
    /// The MoldUDP64 sequence after the last released packet: retransmissions never go past it.
    pub(crate) released_sequence: u64,
    /// `(first MoldUDP64 sequence, record index)` of one record with packets per stride.
    pub(crate) checkpoints: Vec<(u64, u64)>,
    pub(crate) reads: VecDeque<PendingRead>,
    next_read_id: u64,
}

impl Durable {
    pub(crate) fn new(pending_max: u64) -> Self {
        assert!(pending_max > 0);
        Self {
            next_record: 0,
            durable_upto: 0,
            records: VecDeque::new(),
            polled_upto: 0,
            lent: Vec::new(),
            step: None,
            held: VecDeque::new(),
            pending_max,
            released_sequence: 1,
            checkpoints: Vec::new(),
            reads: VecDeque::new(),
            next_read_id: 1,
        }
    }

    /// Whether the sequencer must wait for durability before releasing more.
    pub(crate) fn backlogged(&self) -> bool {
        self.next_record - self.durable_upto >= self.pending_max
    }

    pub(crate) fn step_open(&self) -> bool {
        self.step.is_some()
    }

    /// Opens a step; returns false (and does nothing) if one is open already.
    pub(crate) fn begin(&mut self, kind: RecordKind, sequenced: ExchangeTime) -> bool {
        if self.step.is_some() {
            return false;
        }
        self.step = Some(Step {
            kind,
            sequenced,
            orders: Vec::new(),
            order_count: 0,
            packets: Vec::new(),
            packet_count: 0,
            first_sequence: None,
        });
        true
    }

    pub(crate) fn add_order(&mut self, order: &[u8]) {
        let step = self
            .step
            .as_mut()
            .expect("orders are journaled inside a step");
        assert!(order.len() <= u8::MAX as usize);
        assert!(
            step.order_count < u16::MAX,
            "a batch of at most 65535 orders"
        );
        step.orders.push(order.len() as u8);
        step.orders.extend_from_slice(order);
        step.order_count += 1;
    }

    /// Holds a datagram of the current step until its record is durable.
    pub(crate) fn hold(&mut self, destinations: &[NodeId], payload: &[u8]) {
        assert!(self.step.is_some(), "outputs are held inside a step");
        self.held.push_back(Held {
            record: self.next_record,
            destinations: destinations.to_vec(),
            payload: payload.to_vec(),
            next_sequence: None,
        });
    }

    /// Holds a datagram behind everything held, to go out right after the last of it (a book
    /// snapshot's part: after every packet it covers); `false` when nothing is held (it can
    /// go now).
    pub(crate) fn hold_behind(&mut self, destinations: &[NodeId], payload: &[u8]) -> bool {
        let Some(record) = self.held.back().map(|h| h.record) else {
            return false;
        };
        self.held.push_back(Held {
            record,
            destinations: destinations.to_vec(),
            payload: payload.to_vec(),
            next_sequence: None,
        });
        true
    }

    /// Journals and holds a market-data packet: MoldUDP64 `sequence..next_sequence`.
    pub(crate) fn hold_packet(
        &mut self,
        destinations: &[NodeId],
        bytes: &[u8],
        sequence: u64,
        next_sequence: u64,
    ) {
        assert!(
            next_sequence > sequence,
            "a packet holds at least its header"
        );
        let step = self
            .step
            .as_mut()
            .expect("packets are journaled inside a step");
        assert!(bytes.len() <= u16::MAX as usize);
        step.packets
            .extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        step.packets.extend_from_slice(bytes);
        assert!(
            step.packet_count < u16::MAX,
            "a batch of at most 65535 packets"
        );
        step.packet_count += 1;
        step.first_sequence.get_or_insert(sequence);
        self.hold(destinations, bytes);
        self.held.back_mut().expect("just held").next_sequence = Some(next_sequence);
    }

    /// Closes the step: a step with orders or packets becomes the next record.
    /// Bytes the open step's record would take now (0 if no step is open).
    pub(crate) fn step_len(&self) -> usize {
        self.step.as_ref().map_or(0, |step| {
            RECORD_HEADER_LEN + 4 + step.orders.len() + step.packets.len()
        })
    }

    pub(crate) fn end(&mut self) {
        let step = self.step.take().expect("a step is open");
        if step.order_count == 0 && step.packet_count == 0 {
            return;
        }
        let index = self.next_record;
        let mut record =
            Vec::with_capacity(RECORD_HEADER_LEN + 4 + step.orders.len() + step.packets.len());
        record.push(RECORD_VERSION);
        record.push(step.kind as u8);
        record.extend_from_slice(&index.to_le_bytes());
        record.extend_from_slice(&step.sequenced.as_nanos().to_le_bytes());
        record.extend_from_slice(&step.order_count.to_le_bytes());
        record.extend_from_slice(&step.orders);
        record.extend_from_slice(&step.packet_count.to_le_bytes());
        record.extend_from_slice(&step.packets);
        debug_assert_eq!(Record::parse(&record).map(|r| r.index), Ok(index));
        if let Some(first) = step.first_sequence {
            self.checkpoint(first, index);
        }
        self.records.push_back(record);
        self.next_record += 1;
    }

    /// Remembers where record `index` starts in the stream, once per stride.
    pub(crate) fn checkpoint(&mut self, first_sequence: u64, index: u64) {
        let due = self
            .checkpoints
            .last()
            .is_none_or(|&(_, last)| index >= last + CHECKPOINT_STRIDE);
        if due {
            debug_assert!(
                self.checkpoints
                    .last()
                    .is_none_or(|&(s, _)| s < first_sequence)
            );
            self.checkpoints.push((first_sequence, index));
        }
    }

    pub(crate) fn poll(&mut self) -> Option<&[u8]> {
        self.lent = self.records.pop_front()?;
        self.polled_upto += 1;
        debug_assert_eq!(record_index(&self.lent), Some(self.polled_upto - 1));
        Some(&self.lent)
    }

    /// Queues a journal read for an old retransmission.
    pub(crate) fn plan_read(&mut self, to: NodeId, sequence: u64, count: u16) -> ReadPlan {
        let at = self.checkpoints.partition_point(|&(s, _)| s <= sequence);
        let Some(&(_, first)) = at.checked_sub(1).and_then(|i| self.checkpoints.get(i)) else {
            return ReadPlan::Absent;
        };
        let end = (first + JOURNAL_READ_RECORDS_MAX).min(self.durable_upto);
        if first >= end {
            return ReadPlan::Absent;
        }
        if self.reads.len() >= JOURNAL_READS_MAX {
            return ReadPlan::Busy;
        }
        let id = self.next_read_id;
        self.next_read_id += 1;
        self.reads.push_back(PendingRead {
            id,
            to,
            sequence,
            count,
            handed_out: false,
            records: first..end,
        });
        ReadPlan::Queued
    }

    pub(crate) fn poll_read(&mut self) -> Option<JournalRead> {
        let read = self.reads.iter_mut().find(|r| !r.handed_out)?;
        read.handed_out = true;
        Some(JournalRead {
            id: read.id,
            records: read.records.clone(),
        })
    }

    pub(crate) fn take_read(&mut self, id: u64) -> Option<PendingRead> {
        let at = self.reads.iter().position(|r| r.id == id)?;
        self.reads.remove(at)
    }

    pub(crate) fn check_invariants(&self) {
        assert!(self.durable_upto <= self.polled_upto);
        assert!(self.polled_upto + self.records.len() as u64 == self.next_record);
        assert!(self.reads.len() <= JOURNAL_READS_MAX);
        // Outputs of durable records may wait for room in the outbox.
        debug_assert!(self.held.iter().all(|h| h.record <= self.next_record));
        debug_assert!(
            self.checkpoints
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
        );
    }
}

/// An order's dedupe key (participant, client order id) and when the root first saw it (ns).
pub(crate) type SeenKey = ((u32, u64), u64);

/// Everything a root snapshot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RootState {
    pub(crate) position: u64,
    pub(crate) next_packet_seq: u64,
    pub(crate) next_sequence: u64,
    pub(crate) checkpoints: Vec<(u64, u64)>,
    pub(crate) exchange: ExchangeState,
    /// The number of each participant's next response ([`crate::responses`]); since
    /// version 2.
    pub(crate) response_numbers: Vec<(u32, u64)>,
    /// Response datagrams the root held for gap requests (the latest
    /// [`crate::responses::HELD_MIN`] at most), then those still waiting for durability,
    /// in the order they went (or will), each a length byte and the datagram (one buffer, not
    /// one allocation each: a snapshot may hold 64K); since version 3.
    pub(crate) responses: Vec<u8>,
    /// The root's order dedupe filter ([`crate::inbound`]): its floor (ns) and the keys of
    /// the orders it sequenced, oldest first, each with when it was first seen (ns), so that
    /// a copy of one sent again after a crash is not sequenced twice; since version 4. Like
    /// `responses`, only in snapshots, not in [`crate::Root::state`].
    pub(crate) dedupe_floor_ns: u64,
    pub(crate) dedupe_keys: Vec<SeenKey>,
}

impl RootState {
    pub(crate) fn encode(&self) -> Vec<u8> {
        self.encode_with(self.responses.len(), |w| {
            w.extend_from_slice(&self.responses)
        })
    }

    /// [`RootState::encode`] with the held responses `append` writes (each with
    /// [`RootState::push_response`]) in place of `self.responses`, about `size` bytes of
    /// them: a snapshot's 64K responses are copied once, into the snapshot.
    pub(crate) fn encode_with(&self, size: usize, append: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let x = &self.exchange;
        let size = 64
            + 16 * self.checkpoints.len()
            + 33 * x.engine.orders.len()
            + 28 * x.live.len()
            + 20 * x.by_client.len()
            + 12 * self.response_numbers.len()
            + size;
        let mut w = Vec::with_capacity(size);
        w.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        for v in [self.position, self.next_packet_seq, self.next_sequence] {
            w.extend_from_slice(&v.to_le_bytes());
        }
        for v in [x.next_order_id, x.engine.match_number.0] {
            w.extend_from_slice(&v.to_le_bytes());
        }
        w.extend_from_slice(&(self.checkpoints.len() as u64).to_le_bytes());
        for &(s, r) in &self.checkpoints {
            w.extend_from_slice(&s.to_le_bytes());
            w.extend_from_slice(&r.to_le_bytes());
        }
        w.extend_from_slice(&(x.engine.orders.len() as u64).to_le_bytes());
        for o in &x.engine.orders {
            w.extend_from_slice(&o.order_id.0.to_le_bytes());
            w.extend_from_slice(&o.participant.0.to_le_bytes());
            w.extend_from_slice(&o.symbol.0.to_le_bytes());
            // Bit 0 the side (1: sell), bit 1 post-only (versions 2 and 3 wrote the side
            // alone: their orders read as not post-only, as the engine then kept none).
            w.push(matches!(o.side, lob::Side::Sell) as u8 | (o.post_only as u8) << 1);
            w.extend_from_slice(&o.price.0.to_le_bytes());
            w.extend_from_slice(&o.qty.0.to_le_bytes());
        }
        w.extend_from_slice(&(x.live.len() as u64).to_le_bytes());
        for l in &x.live {
            w.extend_from_slice(&l.order_id.to_le_bytes());
            w.extend_from_slice(&l.participant.to_le_bytes());
            w.extend_from_slice(&l.gateway.to_le_bytes());
            w.extend_from_slice(&l.client_order_id.to_le_bytes());
            w.extend_from_slice(&l.open.to_le_bytes());
        }
        w.extend_from_slice(&(x.by_client.len() as u64).to_le_bytes());
        for &((p, c), id) in &x.by_client {
            w.extend_from_slice(&p.to_le_bytes());
            w.extend_from_slice(&c.to_le_bytes());
            w.extend_from_slice(&id.to_le_bytes());
        }
        w.extend_from_slice(&(self.response_numbers.len() as u64).to_le_bytes());
        for &(p, next) in &self.response_numbers {
            w.extend_from_slice(&p.to_le_bytes());
            w.extend_from_slice(&next.to_le_bytes());
        }
        let at = w.len();
        w.extend_from_slice(&0u64.to_le_bytes());
        append(&mut w);
        let len = (w.len() - at - 8) as u64;
        w[at..at + 8].copy_from_slice(&len.to_le_bytes());
        w.extend_from_slice(&self.dedupe_floor_ns.to_le_bytes());
        w.extend_from_slice(&(self.dedupe_keys.len() as u64).to_le_bytes());
        for &((participant, client_order_id), at) in &self.dedupe_keys {
            w.extend_from_slice(&participant.to_le_bytes());
            w.extend_from_slice(&client_order_id.to_le_bytes());
            w.extend_from_slice(&at.to_le_bytes());
        }
        w
    }

    /// Appends `datagram` to `responses` (see [`RootState::responses`]).
    pub(crate) fn push_response(responses: &mut Vec<u8>, datagram: &[u8]) {
        debug_assert!(datagram.len() <= wire::response::DATAGRAM_MAX);
        responses.push(datagram.len() as u8);
        responses.extend_from_slice(datagram);
    }

    /// The held response datagrams, in order.
    pub(crate) fn responses(&self) -> impl Iterator<Item = &[u8]> {
        framed_datagrams(&self.responses)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.u32()?;
        if !(2..=SNAPSHOT_VERSION).contains(&version) {
            return Err(format!(
                "root snapshot version {version}, expected {SNAPSHOT_VERSION} (or 2 or 3)"
            ));
        }
        let (position, next_packet_seq, next_sequence) = (r.u64()?, r.u64()?, r.u64()?);
        let (next_order_id, match_number) = (r.u64()?, r.u64()?);
        let mut checkpoints = Vec::new();
        for _ in 0..r.count(16)? {
            checkpoints.push((r.u64()?, r.u64()?));
        }
        let mut orders = Vec::new();
        for _ in 0..r.count(33)? {
            let (order_id, participant, symbol) = (r.u64()?, r.u32()?, r.u32()?);
            let flags = r.u8()?;
            if flags > 3 {
                return Err(format!("resting order {order_id}: bad side byte {flags}"));
            }
            orders.push(lob::OrderView {
                order_id: lob::OrderId(order_id),
                participant: lob::ParticipantId(participant),
                symbol: lob::SymbolIndex(symbol),
                side: if flags & 1 == 0 {
                    lob::Side::Buy
                } else {
                    lob::Side::Sell
                },
                price: lob::Price(r.u64()? as i64),
                qty: lob::Qty(r.u64()? as i64),
                post_only: flags & 2 != 0,
            });
        }
        let mut live = Vec::new();
        for _ in 0..r.count(28)? {
            live.push(LiveOrder {
                order_id: r.u64()?,
                participant: r.u32()?,
                gateway: r.u32()?,
                client_order_id: r.u64()?,
                open: r.u32()?,
            });
        }
        let mut by_client = Vec::new();
        for _ in 0..r.count(20)? {
            by_client.push(((r.u32()?, r.u64()?), r.u64()?));
        }
        let mut response_numbers = Vec::new();
        for _ in 0..r.count(12)? {
            let (p, next) = (r.u32()?, r.u64()?);
            if next == 0 {
                return Err("root snapshot: response number 0".to_string());
            }
            response_numbers.push((p, next));
        }
        let mut responses = Vec::new();
        if version >= 3 {
            let len = r.count(1)?;
            responses = r.take(len as usize)?.to_vec();
            // Every datagram a response, and the framing ends where the bytes do.
            let mut read = 0;
            for (i, d) in framed_datagrams(&responses).enumerate() {
                if d.len() > wire::response::DATAGRAM_MAX
                    || wire::response::Response::parse(d).is_err()
                {
                    return Err(format!("root snapshot: held response {i} is malformed"));
                }
                read += 1 + d.len();
            }
            if read != responses.len() {
                return Err("root snapshot: the last held response is truncated".to_string());
            }
        }
        let (mut dedupe_floor_ns, mut dedupe_keys) = (0, Vec::new());
        if version >= 4 {
            dedupe_floor_ns = r.u64()?;
            for _ in 0..r.count(20)? {
                dedupe_keys.push(((r.u32()?, r.u64()?), r.u64()?));
            }
        }
        if r.at != bytes.len() || next_packet_seq == 0 || next_sequence == 0 {
            return Err("root snapshot: malformed".to_string());
        }
        Ok(Self {
            position,
            next_packet_seq,
            next_sequence,
            checkpoints,
            exchange: ExchangeState {
                engine: lob::EngineSnapshot {
                    orders,
                    match_number: lob::MatchNumber(match_number),
                },
                live,
                by_client,
                next_order_id,
            },
            response_numbers,
            responses,
            dedupe_floor_ns,
            dedupe_keys,
        })
    }
}

/// The datagrams of [`RootState::responses`]' framing (a length byte, then the datagram),
/// in order; stops at the end or at a truncated one.
fn framed_datagrams(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    core::iter::from_fn(move || {
        let (&len, tail) = rest.split_first()?;
        let (datagram, tail) = tail.split_at_checked(usize::from(len))?;
        rest = tail;
        Some(datagram)
    })
}

/// A bounds-checked little-endian reader.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!("truncated at byte {} (wanted {len} more)", self.at));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A element count, checked against the bytes left (`size` bytes per element).
    fn count(&mut self, size: usize) -> Result<u64, String> {
        let n = self.u64()?;
        if n > ((self.bytes.len() - self.at) / size) as u64 {
            return Err(format!("count {n} exceeds the bytes left"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a step becomes one record that parses back to what went in; empty steps make
    /// no record; durability bounds hold.
    #[test]
    fn steps_become_records() {
        let mut d = Durable::new(2);
        assert!(d.begin(RecordKind::Batch, ExchangeTime::from_nanos(77)));
        assert!(
            !d.begin(RecordKind::Packets, ExchangeTime::ZERO),
            "one step at a time"
        );
        d.add_order(&[1, 2, 3]);
        d.hold(&[NodeId(5)], b"response");
        d.hold_packet(&[NodeId(1), NodeId(2)], b"packet", 1, 3);
        d.end();
        assert!(d.begin(RecordKind::Packets, ExchangeTime::ZERO));
        d.end();
        assert_eq!(d.next_record, 1, "an empty step makes no record");
        let bytes = d.poll().unwrap().to_vec();
        assert_eq!(record_index(&bytes), Some(0));
        let r = Record::parse(&bytes).unwrap();
        assert_eq!(r.kind, RecordKind::Batch);
        assert_eq!(r.sequenced, ExchangeTime::from_nanos(77));
        assert_eq!(r.orders, vec![&[1u8, 2, 3][..]]);
        assert_eq!(r.packets, vec![&b"packet"[..]]);
        assert_eq!(d.held.len(), 2);
        assert_eq!(d.checkpoints, vec![(1, 0)]);
        assert!(Record::parse(&bytes[..bytes.len() - 1]).is_err());
        assert!(d.poll().is_none());
        d.check_invariants();
    }

    /// Response `seq` of `participant`: an order of theirs canceled.
    fn response(participant: u32, seq: u64) -> Vec<u8> {
        let canceled = wire::order::Canceled {
            header: wire::order::OrderHeader {
                client_order_id: seq,
                participant_id: participant,
                gateway_id: 7,
                time: ExchangeTime(1_000 * seq),
            },
            orig_client_order_id: seq,
            canceled_shares: 3,
            reason: wire::order::CancelReason::UserRequested,
        };
        let mut buf = [0u8; wire::response::DATAGRAM_MAX];
        let len = wire::response::emit(&mut buf, seq, &canceled).expect("fits");
        buf[..len].to_vec()
    }

    #[test]
    fn snapshot_codec_round_trips() {
        let state = RootState {
            position: 9,
            next_packet_seq: 4,
            next_sequence: 40,
            checkpoints: vec![(1, 0), (30, 64)],
            exchange: ExchangeState {
                engine: lob::EngineSnapshot {
                    orders: vec![
                        lob::OrderView {
                            order_id: lob::OrderId(3),
                            participant: lob::ParticipantId(2),
                            symbol: lob::SymbolIndex(0),
                            side: lob::Side::Sell,
                            price: lob::Price(10_100),
                            qty: lob::Qty(7),
                            post_only: false,
                        },
                        lob::OrderView {
                            order_id: lob::OrderId(4),
                            participant: lob::ParticipantId(2),
                            symbol: lob::SymbolIndex(0),
                            side: lob::Side::Buy,
                            price: lob::Price(9_900),
                            qty: lob::Qty(1),
                            post_only: true,
                        },
                    ],
                    match_number: lob::MatchNumber(12),
                },
                live: vec![LiveOrder {
                    order_id: 3,
                    participant: 2,
                    gateway: 17,
                    client_order_id: 99,
                    open: 7,
                }],
                by_client: vec![((2, 99), 3)],
                next_order_id: 5,
            },
            response_numbers: vec![(2, 41), (8, 1)],
            responses: [response(2, 40), response(2, 39)]
                .iter()
                .fold(Vec::new(), |mut r, d| {
                    RootState::push_response(&mut r, d);
                    r
                }),
            dedupe_floor_ns: 1_000_000,
            dedupe_keys: vec![((2, 98), 5_000_000), ((2, 99), 5_000_100)],
        };
        assert_eq!(
            state.responses().collect::<Vec<_>>(),
            [&response(2, 40)[..], &response(2, 39)[..]]
        );
        let bytes = state.encode();
        assert_eq!(snapshot_position(&bytes), Some(9));
        assert_eq!(RootState::decode(&bytes), Ok(state.clone()));
        assert!(RootState::decode(&bytes[..bytes.len() - 3]).is_err());
        // Versions 2 (before held responses) and 3 (before the dedupe keys) are still read,
        // with none held and no key.
        let older = RootState {
            dedupe_floor_ns: 0,
            dedupe_keys: Vec::new(),
            ..state.clone()
        };
        let mut v3 = older.encode();
        v3.truncate(v3.len() - 16);
        v3[..4].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(RootState::decode(&v3), Ok(older.clone()));
        let oldest = RootState {
            responses: Vec::new(),
            ..older
        };
        let mut v2 = oldest.encode();
        v2.truncate(v2.len() - 24);
        v2[..4].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(RootState::decode(&v2), Ok(oldest));
        // A held response that is not one is refused by position.
        let mut bad = state.clone();
        let second = 1 + response(2, 40).len();
        bad.responses[second + 1] ^= 0xff;
        assert!(RootState::decode(&bad.encode()).is_err_and(|e| e.contains("held response 1")));
        // A length byte promising more than the responses' bytes hold.
        let mut cut = state.clone();
        cut.responses.truncate(cut.responses.len() - 1);
        assert!(RootState::decode(&cut.encode()).is_err_and(|e| e.contains("truncated")));
        let mut old = bytes.clone();
        old[..4].copy_from_slice(&1u32.to_le_bytes());
        assert!(
            RootState::decode(&old).is_err_and(|e| e.contains("version 1")),
            "a version-1 snapshot (no response numbers) is refused by name"
        );
    }
}
