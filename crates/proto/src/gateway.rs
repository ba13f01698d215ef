//! A gateway: a market participant's leaf (DESIGN.md §4 "Hold-and-release", "Loss recovery").
//!
//! The first copy of each packet wins. The gateway samples its OWD (its exchange receive time
//! minus the root's send time), holds the packet until the deadline the root stamped on it
//! (converted to its local clock by clock sync), and releases packets strictly in sequence
//! order to the participant: a strategy called in process (trust model 1) or the
//! participant's own program at another address (trust model 2). A packet that arrives after
//! its deadline is released at once and counted late.
//!
//! A missing packet holds back the ones behind it. After `gap_grace` the gateway asks its
//! parent proxy for the missing messages ([`crate::repair`]: it answers from the packets it
//! keeps, or asks up the tree), again after `gap_retry` (of the proxy its last new packet
//! came from, if not the parent: a parent that did not answer may be dead), doubling the wait
//! up to [`GAP_BACKOFF_MAX`] times; after [`GAP_ASKS_OF_PARENT`] requests it asks the
//! root's rewinder itself. It skips them (with an event) only when the root says it no longer
//! has them, and only those: when the rewinder still holds the later part of a long gap, the
//! gateway takes that part and skips what lies before its first packet. A packet that comes
//! so far ahead that the hold ring cannot take it still tells the gateway how far the stream
//! has gone, so that a gateway that fell that far behind recovers too. Recovered packets are
//! released in order and counted late.
//!
//! A gateway that joins the stream after its start (its first packet is not the stream's
//! first), or skips packets, asks the root for a book snapshot and releases nothing until it
//! has it ([`crate::snapshot`]): its participant gets the whole book first, then the stream
//! from the first packet the snapshot does not cover.
//!
//! Orders: the gateway stamps each request of its participant (from the strategy or from
//! [`Gateway::submit_order`]) with the next client order id and its generation time, wraps it
//! in a hop envelope ([`wire::hop`]) and sends it to its home parent. Until the gateway's clock
//! has first synced it cannot stamp in exchange time (its own clock may be days off the
//! root's), so it sends no order and no heartbeat order: it answers each request at once with
//! a rejection, `Closed`, as an exchange does before a session opens. It numbers orders from
//! where it joined the stream ([`JOIN_ID_SHIFT`]), so that a gateway started again
//! mid-session does not reuse the client order ids of its earlier run. Responses come straight
//! from the root, numbered per participant, and go to the strategy in number order, each once;
//! missing ones are asked for again ([`crate::responses`]). Generation stamps never go
//! backwards (a clock-sync step back is absorbed), so the gateway's order stream is in
//! generation-time order; with the global-FIFO sequencer ([`crate::sequencer`]) the gateway
//! also sends its parent a heartbeat order stamped like an order after `heartbeat_interval`
//! without sending one.
//!
//! A parent that goes silent while market data still comes through others is taken for dead
//! after `parent_timeout` ([`crate::failover`]): the gateway moves to the parent's next
//! sibling and sends it again every order not answered yet, since those may have died with
//! the old parent.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use wire::control::Repr as Control;
use wire::order::{self, OrderHeader, Repr as OrderMsg};
use wire::{ExchangeTime, Kind};

use crate::clock::ClockSync;
use crate::config::NodeConfig;
use crate::core::{Core, Counters, Timer};
use crate::dedupe::DedupeWindow;
use crate::failover::ParentWatch;
use crate::hold::{HoldQueue, Refusal};
use crate::node::{DropReason, Event, Node, NodeId, Release, Transmit};
use crate::owd::{OwdWindow, TwinOwd};
use crate::plan::{Plan, Role};
use crate::repair::RETRANSMIT_PACKETS_MAX;
use crate::responses::{Arrival, Ask, ResponseStream};
use crate::sequencer::SequencerKind;
use crate::snapshot::{self, Assembly, Insert};
use crate::strategy::{Ctx, OrderRequest, Strategy};
use crate::time::{Instant, duration_nanos};
use crate::twin::EarlyAnswers;

/// Unanswered orders a gateway keeps for resending after a failover, at most (the oldest are
/// forgotten first).
pub const UNANSWERED_MAX: usize = 1 << 14;

/// A gateway asks for a market-data gap again after `gap_retry` times two to the requests
/// already sent, at most this many doublings (with the default 2 ms: every 64 ms at the
/// slowest). It never gives a gap up while the rewinder holds it: it skips one only when the
/// root says it no longer has it, so a gateway cut off, or behind a root overloaded for a
/// while, recovers once it is heard again instead of losing what it missed.
pub const GAP_BACKOFF_MAX: u32 = 5;

/// A gateway that joins the stream at packet `p` before sending any order numbers its
/// participant's orders from `((p - 1) << JOIN_ID_SHIFT) + 1`. A gateway started again
/// (after a crash, a deploy) joins where the stream has got to, and so numbers above every id
/// its earlier run could have sent (that would take 2^24 orders a packet): a new order does
/// not take the id of one still resting, which the participant could then no longer cancel,
/// and whose fills would name the new one. Twins that join at the stream's start both number
/// from 1, as their root's dedupe needs. A gateway whose clock syncs before it hears the
/// stream (the root sends a packet at least every `idle_packet_interval`, so only one cut off
/// from it) numbers from 1 as before.
pub const JOIN_ID_SHIFT: u32 = 24;

/// The timer of a gateway's snapshot requests: the root's idle-packet timer, which a gateway
/// never uses (the table keeps its two cache lines).
const SNAPSHOT_TIMER: Timer = Timer::IdlePacket;

/// A gateway asks the proxies above it for a gap this many times before it asks the root:
/// its parent first, then the proxy its last new packet came from (the parent, or another
/// of its layer). A proxy answers from its repair ring, or asks up the tree for every child
/// of its missing the same packets; proxies that answer neither (dead, or cut off) are
/// passed by.
pub const GAP_ASKS_OF_PARENT: u32 = 2;

/// A gateway keeps an unanswered order for this many [`NodeConfig::parent_timeout`]s (the
/// root remembers orders for [`crate::inbound::RESEND_KEEP_TIMEOUTS`], one more, for the
/// copies still on their way): long enough to fail over once and retry on the new path.
pub(crate) const UNANSWERED_KEEP_TIMEOUTS: u32 = 3;

/// An order sent up that no response has answered yet, kept for [`UNANSWERED_KEEP_TIMEOUTS`]
/// `parent_timeout`s. If the parent dies meanwhile, the order may have died with it (in flight,
/// or waiting in its queue), and [`Gateway::check_parent`] sends it again to the new parent. If
/// a proxy further up dies, the proxy below it fails over and sends its children
/// [`Control::ResendOrders`], and the order goes again to the same parent. And if no answer
/// comes within [`NodeConfig::order_retry`] (then twice that, ...), it goes again anyway: an
/// order can also die where no failover sees it (an engine socket overflowing after a paused
/// proxy's backlog, a lost datagram). The root drops the copy of one it already sequenced
/// (first copy wins per participant and client order id, over every order of the last four
/// `parent_timeout`s, and older ones are refused as stale).
#[derive(Clone, Copy, Debug)]
struct Unanswered {
    /// When it first went.
    sent: Instant,
    generation: ExchangeTime,
    message: OrderMsg,
    /// Transmissions before the latest one (the hop envelope's `attempt`).
    attempt: u16,
    /// Retries since it last went on a new path (its first send, or a failover): the next
    /// retry waits `order_retry` times two to this.
    backoff: u16,
    /// When it goes again if still unanswered (its key in `Gateway::retries`).
    retry_at: Option<Instant>,
}

/// Trust models of DESIGN.md §4: how the participant receives released market data.
#[derive(Default)]
pub enum Delivery {
    /// Only [`Event::Released`] (for measurement).
    #[default]
    Events,
    /// Trust model 1: a strategy inside the gateway, called per released packet.
    Strategy(Box<dyn Strategy>),
    /// Trust model 2: forward the released packet to the participant's own program.
    Forward(NodeId),
}

impl core::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Events => f.write_str("Events"),
            Self::Strategy(_) => f.write_str("Strategy(..)"),
            Self::Forward(to) => write!(f, "Forward({})", to.0),
        }
    }
}

/// The state of the oldest gap.
#[derive(Clone, Copy, Debug)]
struct Gap {
    /// The missing head packet the gap starts at.
    from_packet: u64,
    /// Requests sent for it.
    attempts: u32,
    /// The missing packets `[from, to)` the last request asked for, while their answer
    /// arrives: it ends at most [`RETRANSMIT_PACKETS_MAX`] packets after `from`, and a gap
    /// that goes on after that is asked for at once ([`Gateway::track_gap`]).
    asked: Option<(u64, u64)>,
}

/// A gateway node.
#[derive(Debug)]
pub struct Gateway {
    core: Core,
    /// The parent this gateway syncs its clock with and sends reports and orders to (its
    /// home parent, or the sibling it failed over to), and its failover state
    /// ([`crate::failover`]).
    watch: ParentWatch,
    clock: ClockSync,
    dedupe: DedupeWindow,
    hold: HoldQueue,
    owd: OwdWindow,
    /// The participant's other gateway, with receiver hedging.
    twin: Option<NodeId>,
    /// What the twin last reported ([`TwinOwd`]).
    twin_owd: TwinOwd,
    /// MoldUDP64 sequence after the last released packet.
    next_sequence: Option<u64>,
    gap: Option<Gap>,
    /// The MoldUDP64 sequence the root's rewinder said it still holds from
    /// ([`Control::RetransmitUnavailable`]), while the head gap starts below it: what lies
    /// below it is skipped as soon as the first packet at or past it is held (not the whole
    /// gap, whose later packets are still to be had: the root sends them with its answer),
    /// and the gap is asked for from there if they do not come.
    available_from: Option<u64>,
    /// The proxy the last new packet came from (not a retransmission): alive then, and
    /// holding what its layer got (every proxy of a layer gets every packet). A gap's second
    /// request goes there when that is not the parent ([`Gateway::on_gap_timer`]).
    data_from: Option<NodeId>,
    /// When market data last came in (any copy of this session's stream).
    heard: Option<Instant>,
    /// The book snapshot this gateway waits for, releasing nothing until it is whole
    /// ([`crate::snapshot`]).
    snapshot: Option<Assembly>,
    /// The first packet the last snapshot applied did not cover (0: none applied).
    resumed_at: u64,
    delivery: Delivery,
    participant: u32,
    next_client_order_id: u64,
    requests: Vec<(u64, OrderRequest)>,
    /// Requests refused (before the clock synced, or for a full outbox), their rejection
    /// still to be delivered.
    closed: Vec<(u64, order::RejectReason)>,
    /// Orders given up on without an answer ([`Gateway::stop_waiting`]), still to be told to
    /// the strategy ([`Strategy::on_unanswered`]).
    given_up: Vec<u64>,
    /// The latest orders given up on (at most [`UNANSWERED_MAX`]), to count those answered
    /// after all (`orders_answered_late`).
    given_up_ids: BTreeSet<u64>,
    /// With a twin: answers to orders this gateway has not sent yet ([`crate::twin`]).
    early: EarlyAnswers,
    /// Early answers to orders the strategy has just asked for, still to be delivered.
    answered_early: Vec<OrderMsg>,
    wakeup: Option<ExchangeTime>,
    started: bool,
    /// [`Strategy::on_open`] was called.
    opened: bool,
    /// The participant's numbered responses ([`crate::responses`]).
    responses: ResponseStream,
    /// The latest generation stamp given (stamps are monotone).
    last_generation: ExchangeTime,
    /// When an order or heartbeat order last went up.
    order_path_sent: Instant,
    /// Heartbeat orders sent.
    order_heartbeats: u64,
    /// Orders sent and not answered yet, by client order id (which is also sending order).
    unanswered: BTreeMap<u64, Unanswered>,
    /// After a failover: when each unanswered order goes again, in time order.
    resend: VecDeque<(Instant, u64)>,
    /// When each unanswered order goes again if no answer comes ([`NodeConfig::order_retry`]).
    retries: BTreeSet<(Instant, u64)>,
    /// How long answers take: smoothed, and its mean deviation (RFC 6298), from orders
    /// answered on their first transmission (Karn).
    answer_time: Option<AnswerTime>,
    /// The retry timeout doubles this many times (at most [`RETRY_BACKOFF_MAX`]): once per
    /// timeout period in which orders went unanswered on their first transmission, back to
    /// zero with the next order answered on its first (RFC 6298 §5.5, and Karn: else answers
    /// slower than the timeout would never be measured, every order being retried first).
    timeout_doublings: u32,
    /// When `timeout_doublings` last went up.
    doubled_at: Option<Instant>,
}

/// Rounds of rejections answered and requests sent in one flush of the strategy's requests
/// ([`Gateway::flush_requests`]).
const CLOSED_ROUNDS_MAX: usize = 4;

/// How long a failover's resend that the full outbox refused waits to go again, without
/// retries (`order_retry` 0): about the time the driver takes to drain the outbox.
const RESEND_REFUSED_WAIT: Duration = Duration::from_micros(200);

/// See [`Gateway`]'s `timeout_doublings`.
const RETRY_BACKOFF_MAX: u32 = 4;

/// The smoothed time from an order's first transmission to its first response, and its
/// mean deviation (RFC 6298's SRTT and RTTVAR), ns.
#[derive(Clone, Copy, Debug)]
struct AnswerTime {
    smoothed_ns: u64,
    deviation_ns: u64,
}

impl AnswerTime {
    fn new(sample_ns: u64) -> Self {
        Self {
            smoothed_ns: sample_ns,
            deviation_ns: sample_ns / 2,
        }
    }

    fn update(&mut self, sample_ns: u64) {
        let error = self.smoothed_ns.abs_diff(sample_ns);
        self.deviation_ns = (3 * self.deviation_ns + error) / 4;
        self.smoothed_ns = (7 * self.smoothed_ns + sample_ns) / 8;
    }
}

impl Gateway {
    /// Gateway `id` of `plan`. Nodes built from one configuration may share it (an
    /// `Arc<NodeConfig>`).
    pub fn new(
        id: NodeId,
        plan: Arc<Plan>,
        config: impl Into<Arc<NodeConfig>>,
        delivery: Delivery,
    ) -> Result<Self, String> {
        let spec = plan
            .node(id)
            .ok_or_else(|| format!("node {} is not in the plan", id.0))?;
        if spec.role != Role::Gateway {
            return Err(format!("node {} is a {:?}, not a gateway", id.0, spec.role));
        }
        let parent = plan.home_parent(id).expect("a gateway has a parent");
        let participant = spec.participant.expect("a gateway serves a participant");
        let twin = plan.participant_gateways(participant).find(|&g| g != id);
        let mut core = Core::new(id, plan, config.into())?;
        core.timers.set(Timer::ClockProbe, Instant::ZERO);
        core.timers.set(
            Timer::Report,
            Instant::ZERO + core.config.owd.report_interval,
        );
        if core.config.sequencer.kind == SequencerKind::GlobalFifo {
            core.timers.set(Timer::OrderHeartbeat, Instant::ZERO);
        }
        let responses = ResponseStream::for_node(&core.config);
        Ok(Self {
            clock: ClockSync::new(core.config.clock, id),
            dedupe: DedupeWindow::new(core.config.dedupe_window),
            hold: HoldQueue::new(core.config.held_max),
            owd: OwdWindow::new(core.config.owd.samples_max),
            twin,
            twin_owd: TwinOwd::default(),
            core,
            watch: ParentWatch::new(parent),
            next_sequence: None,
            gap: None,
            available_from: None,
            data_from: None,
            heard: None,
            snapshot: None,
            resumed_at: 0,
            delivery,
            participant,
            next_client_order_id: 1,
            requests: Vec::new(),
            closed: Vec::new(),
            given_up: Vec::new(),
            given_up_ids: BTreeSet::new(),
            early: EarlyAnswers::default(),
            answered_early: Vec::new(),
            wakeup: None,
            started: false,
            opened: false,
            responses,
            last_generation: ExchangeTime::ZERO,
            order_path_sent: Instant::ZERO,
            order_heartbeats: 0,
            unanswered: BTreeMap::new(),
            resend: VecDeque::new(),
            retries: BTreeSet::new(),
            answer_time: None,
            timeout_doublings: 0,
            doubled_at: None,
        })
    }

    /// Sends an order request for this gateway's participant; returns its client order id.
    ///
    /// Before the gateway's clock has synced the order is not sent: it is refused at once
    /// ([`Event::OrderRefused`], and a rejection, `Closed`, to the strategy if there is one).
    /// So is an order the full outbox cannot take when no retry would send it later
    /// (`order_retry` 0; the rejection is `Busy`).
    pub fn submit_order(&mut self, now: Instant, request: OrderRequest) -> u64 {
        let id = self.next_client_order_id;
        self.next_client_order_id += 1;
        self.send_order(now, id, request);
        self.answer_closed(now);
        self.answer_given_up(now);
        if !self.answered_early.is_empty() {
            self.tell_answered_early(now);
            self.flush_requests(now);
        }
        id
    }

    /// Heartbeat orders sent (global-FIFO sequencer).
    pub fn order_heartbeats(&self) -> u64 {
        self.order_heartbeats
    }

    /// The parent it syncs with and sends reports and orders to (its home parent, except
    /// while that one is silent; see [`crate::config::NodeConfig::parent_timeout`]).
    pub fn parent(&self) -> NodeId {
        self.watch.parent()
    }

    /// The participant this gateway serves.
    pub fn participant(&self) -> u32 {
        self.participant
    }

    /// What the gateway counted.
    pub fn counters(&self) -> &Counters {
        &self.core.counters
    }

    /// The gateway's clock sync against its home parent.
    pub fn clock(&self) -> &ClockSync {
        &self.clock
    }

    /// The next packet sequence number to release, once the stream has started.
    pub fn next_packet(&self) -> Option<u64> {
        self.hold.next()
    }

    /// Packets held.
    pub fn held(&self) -> usize {
        self.hold.len()
    }

    fn on_market_data(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        let Some(data) = crate::core::parse_market_data(bytes) else {
            return self.core.drop_datagram(from, DropReason::Malformed);
        };
        if data.header.is_snapshot() {
            return self.on_snapshot_part(now, from, &data.header, data.session(), bytes);
        }
        let recovered = data.header.is_retransmission();
        // Retransmissions come from a parent proxy (its repair ring) or from the root.
        let expected = self.is_parent_layer(from) || (recovered && from == self.core.plan.root());
        if !expected {
            return self.core.drop_datagram(from, DropReason::UnknownSender);
        }
        if data.session() != self.core.session {
            let quiet = self.core.config.parent_timeout;
            if !crate::core::takes_new_session(&self.dedupe, now, quiet, &data) {
                return self.core.drop_datagram(from, DropReason::WrongSession);
            }
            self.start_session(now, data.session());
        }
        self.hear_again(now);
        let packet_seq = data.header.packet_seq;
        if self.dedupe.contains(packet_seq) {
            return self.core.drop_datagram(from, DropReason::Duplicate);
        }
        // Noted as ahead, a number that far would be asked for and then skipped to, and every
        // real packet after it would be too old (the hold's capacity is how far a real stream
        // runs ahead of what this gateway has while it hears it).
        let quiet = self.core.config.parent_timeout;
        let reach = self.core.config.held_max as u64;
        if self.dedupe.far_ahead(packet_seq, now, quiet, reach) {
            return self.core.drop_datagram(from, DropReason::FarAhead);
        }
        // Each packet takes at least one MoldUDP64 number (its header): a packet numbered
        // `k` ahead of the next to release must start at least `k` numbers on. One that does
        // not (corrupt or forged) would end the gap before it at once, and the gateway would
        // skip the real packets in it.
        if let (Some(next), Some(next_sequence)) = (self.hold.next(), self.next_sequence)
            && packet_seq >= next
            && data.mold.sequence() < next_sequence.saturating_add(packet_seq - next)
        {
            return self.core.drop_datagram(from, DropReason::Malformed);
        }
        let received = self.clock.to_exchange(now);
        let (deadline, arrived_late) = if self.clock.is_synced() {
            let deadline = data.header.deadline;
            (deadline, received > deadline)
        } else if recovered {
            // Asked for after a gap's grace and a round trip: late, whatever the clock says.
            (data.header.deadline, true)
        } else {
            // Until its clock has synced, the gateway's "exchange time" is its raw local
            // clock, which may read every deadline as long past (the packet would leave on
            // arrival, before it does at any other gateway: every gateway did so at start-up,
            // ~200 packets each in the simulator) or far off. So it holds each packet for its
            // whole budget from its arrival, the deadline less the send time: never before
            // its deadline in true time, and after it by this gateway's one-way delay. It is
            // not counted late, as it waited its budget. (Holding until the clock syncs, ~128
            // ms a layer of the tree at a cold start, cost the simulator 2 GiB at N = 10,000
            // and overflowed the hold at 15K packets/s: `docs/results/faults.md`.)
            let budget = data
                .header
                .deadline
                .as_nanos()
                .saturating_sub(data.header.send_time.as_nanos());
            (
                ExchangeTime::from_nanos(received.as_nanos().saturating_add(budget)),
                false,
            )
        };
        let joining = self.hold.next().is_none();
        let inserted = self.hold.insert(packet_seq, |held| {
            held.bytes.clear();
            held.bytes.extend_from_slice(bytes);
            held.deadline = deadline;
            held.received = now;
            held.received_exchange = received;
            held.arrived_late = arrived_late;
            held.sequence = data.mold.sequence();
            held.count = data.mold.count();
            held.recovered = recovered;
        });
        match inserted {
            Ok(()) => {}
            // Before the point where this gateway joined the stream, or already released.
            Err(Refusal::Duplicate) => return self.core.drop_datagram(from, DropReason::TooOld),
            // Not marked in the dedupe window, so a retransmission can still fill it; noted,
            // so that the gap up to it is asked for even when nothing is held.
            Err(Refusal::Full) => {
                let end_sequence = data.mold.sequence() + u64::from(data.mold.count());
                self.hold.note_ahead(packet_seq, end_sequence);
                self.track_gap(now);
                return self.core.drop_datagram(from, DropReason::QueueFull);
            }
        }
        let verdict = self.dedupe.insert_at(packet_seq, now);
        debug_assert_eq!(verdict, crate::dedupe::Verdict::New);
        if joining {
            if self.core.counters.orders_out == 0 {
                // Capped: a first packet numbered absurdly far (forged) leaves 2^62 ids.
                let base = (packet_seq - 1)
                    .saturating_mul(1 << JOIN_ID_SHIFT)
                    .min(1 << 62)
                    + 1;
                self.next_client_order_id = self.next_client_order_id.max(base);
            }
            if packet_seq > 1 {
                // Joined after the stream's start: the book so far comes first.
                self.want_snapshot(now, packet_seq);
            }
        }
        self.core.counters.packets_new += 1;
        if !recovered {
            self.data_from = Some(from);
        }
        // An OWD is a difference of two exchange-time stamps: before this gateway's clock has
        // synced, its "exchange time" is its raw local clock (off by whatever offset it has),
        // and one such sample reported up would push every deadline out by that much.
        if self.clock.is_synced() {
            if recovered {
                self.owd.record_missed(now);
            } else {
                let owd_ns = received.saturating_nanos_since(data.header.send_time);
                self.owd.record(now, owd_ns);
            }
        }
        self.release_due(now);
    }

    /// Releases every head packet whose time has come, then re-arms the release and gap
    /// timers.
    fn release_due(&mut self, now: Instant) {
        if self.snapshot.is_some() {
            // Nothing goes before the book.
            self.core.timers.stop(Timer::Release);
            self.track_gap(now);
            return;
        }
        let hold = self.core.config.hold_and_release;
        let released = self.clock.to_exchange(now);
        while let Some(head) = self.hold.head() {
            // Without hold-and-release a packet leaves on arrival; with it, when this
            // gateway's exchange clock reaches the deadline (as the clock reads now). A packet
            // recovered by retransmission waits for its deadline too, as any copy does: it
            // leaves at once only if it came after it (a deadline far out, behind a congested
            // path, can outlast a gap's recovery, and leaving then would be early).
            let late = head.arrived_late;
            if hold && !late && released < head.deadline {
                break;
            }
            let received = head.received_exchange;
            let mut delivery = core::mem::take(&mut self.delivery);
            let mut ctx = Ctx {
                now: released,
                participant: self.participant,
                orders: &mut self.requests,
                next_client_order_id: &mut self.next_client_order_id,
                wakeup: &mut self.wakeup,
            };
            let core = &mut self.core;
            let next_sequence = self.hold.pop_head(|packet_seq, held| {
                let Ok(data) = wire::parse_market_data(&held.bytes) else {
                    unreachable!("held packets were parsed on arrival");
                };
                let release = Release {
                    packet_seq,
                    sequence: data.mold.sequence(),
                    messages: data.message_count(),
                    send_time: data.header.send_time,
                    deadline: data.header.deadline,
                    received,
                    released,
                    received_local: held.received,
                    late,
                    recovered: held.recovered,
                    snapshot: false,
                };
                deliver(&mut delivery, &mut ctx, core, &release, &data, &held.bytes);
                core.counters.released += 1;
                core.counters.late += late as u64;
                core.counters.recovered += held.recovered as u64;
                core.event(Event::Released(release));
                data.next_sequence()
            });
            self.delivery = delivery;
            self.next_sequence = next_sequence.or(self.next_sequence);
            self.flush_requests(now);
        }
        self.arm_release(now);
        self.track_gap(now);
    }

    /// The clock has just synced: the packets held since before it did, each until its
    /// budget from its arrival on the raw clock, now wait for their deadlines on the synced
    /// clock, and their arrivals are read by it too (late if after the deadline). The release
    /// timer is armed next, by the new clock.
    fn on_first_sync(&mut self) {
        let clock = &self.clock;
        self.hold.for_each_held_mut(|held| {
            let Ok(data) = wire::parse_market_data(&held.bytes) else {
                unreachable!("held packets were parsed on arrival");
            };
            held.deadline = data.header.deadline;
            held.received_exchange = clock.to_exchange(held.received);
            held.arrived_late = held.received_exchange > held.deadline;
        });
    }

    /// Arms the release timer for the head packet's deadline as the clock reads it now (a
    /// clock that has just been refitted moves the local instant of every deadline).
    fn arm_release(&mut self, now: Instant) {
        // Ceil to the local instant that reads the deadline; never re-arm in the past.
        let at = self
            .hold
            .head()
            .filter(|_| self.snapshot.is_none())
            .map(|head| {
                self.clock
                    .to_local(head.deadline)
                    .max(now + Duration::from_nanos(1))
            });
        self.core.timers.arm(Timer::Release, at);
    }

    /// Starts, keeps or clears the gap timer.
    ///
    /// A new gap is asked for after `gap_grace` (its packets may be on their way still).
    /// A gap that goes on past a whole answer is not new: one answer carries at most
    /// [`RETRANSMIT_PACKETS_MAX`] packets, so a gateway far behind asks for the next ones as
    /// soon as the last of an answer has come, one round trip per 64 packets instead of a
    /// round trip and a grace each.
    fn track_gap(&mut self, now: Instant) {
        if self
            .available_from
            .is_some_and(|a| self.next_sequence.is_none_or(|next| next >= a))
        {
            self.available_from = None;
        }
        match (self.hold.first_gap(), self.gap) {
            (None, _) => {
                self.gap = None;
                self.core.timers.stop(Timer::Gap);
            }
            (Some((from, _, end_sequence)), Some(gap)) if gap.from_packet == from => {
                // The first packet the rewinder still had has come: skip what is before it.
                if self.available_from.is_some_and(|a| a >= end_sequence) {
                    self.core.timers.set(Timer::Gap, now);
                }
            }
            (Some((from, _, _)), gap) => {
                let asked = gap.and_then(|gap| gap.asked);
                let answered = asked.is_some_and(|(asked_from, asked_to)| {
                    (asked_from + RETRANSMIT_PACKETS_MAX as u64..asked_to).contains(&from)
                });
                self.gap = Some(Gap {
                    from_packet: from,
                    attempts: 0,
                    // Still arriving: the answer's end stays the mark.
                    asked: asked.filter(|&(_, asked_to)| !answered && from < asked_to),
                });
                let wait = if answered {
                    Duration::ZERO
                } else {
                    self.core.config.gap_grace
                };
                self.core.timers.set(Timer::Gap, now + wait);
            }
        }
    }

    /// Notes market data in at `now`. After a silence longer than `gap_retry` (cut off: no
    /// copy came, and no answer either), a gap asked for before is asked for again at once,
    /// of the parent first, as a new one: the path is back, and the backoff that grew through
    /// the silence (up to 64 ms) would hold every packet behind the gap that long.
    fn hear_again(&mut self, now: Instant) {
        let retry = self.core.config.gap_retry;
        let silent = self
            .heard
            .is_some_and(|heard| now.saturating_duration_since(heard) > retry);
        self.heard = Some(now);
        if let Some(gap) = self.gap.as_mut().filter(|gap| silent && gap.attempts > 0) {
            // `asked` stays: if this copy is the first of an answer, the rest of the gap is
            // asked for as soon as the answer ends (`track_gap`).
            gap.attempts = 0;
            self.core.timers.set(Timer::Gap, now);
        }
    }

    fn on_gap_timer(&mut self, now: Instant) {
        let (Some((from, to, end_sequence)), Some(mut gap)) = (self.hold.first_gap(), self.gap)
        else {
            self.gap = None;
            return;
        };
        let start_sequence = self
            .next_sequence
            .unwrap_or(end_sequence)
            .max(self.available_from.unwrap_or(0));
        if start_sequence >= end_sequence {
            self.skip_gap(now, from, to, end_sequence);
            return;
        }
        gap.attempts = gap.attempts.saturating_add(1);
        gap.asked = Some((from, to));
        self.gap = Some(gap);
        let count = (end_sequence - start_sequence).min(u16::MAX as u64) as u16;
        let request = Control::RetransmitRequest {
            requester: self.core.id.0,
            session: self.core.session,
            sequence: start_sequence,
            count,
        };
        let parent = self.watch.parent();
        let repairs = self.core.config.repair_bytes > 0;
        let to = match self.data_from {
            // The parent did not answer the first request (lost, or the parent is dead and
            // not yet left, which takes `parent_timeout`): the proxy the last new packet came
            // from holds what the parent would have.
            Some(proxy) if repairs && gap.attempts == 2 && proxy != parent => proxy,
            _ if repairs && gap.attempts <= GAP_ASKS_OF_PARENT => parent,
            _ => self.core.plan.root(),
        };
        self.core.send_message(to, &request);
        self.core.counters.retransmissions += 1;
        self.core.event(Event::GapRequested {
            sequence: start_sequence,
            count,
        });
        let wait = self
            .core
            .config
            .gap_retry
            .saturating_mul(1 << (gap.attempts - 1).min(GAP_BACKOFF_MAX));
        self.core.timers.set(Timer::Gap, now + wait);
    }

    /// Whether `from` is a node of the layer above this gateway's (a parent proxy, home or
    /// not, or the root when the tree has no proxies).
    fn is_parent_layer(&self, from: NodeId) -> bool {
        let parents = self.core.plan.depth() - 1;
        self.core.plan.node(from).map(|n| n.layer) == Some(parents)
    }

    /// Skips the missing packets `[from, to)`, whose messages end at MoldUDP64 sequence
    /// `end_sequence` (where the stream goes on).
    fn skip_gap(&mut self, now: Instant, from: u64, to: u64, end_sequence: u64) {
        self.hold.skip_to(to);
        self.core.counters.skipped += to - from;
        self.core.event(Event::GapSkipped {
            first_packet_seq: from,
            packets: to - from,
        });
        self.gap = None;
        self.core.timers.stop(Timer::Gap);
        self.next_sequence = Some(end_sequence);
        // What the skipped packets did to the book is gone with them.
        self.want_snapshot(now, to);
        self.release_due(now);
    }

    /// The root began a new stream under `session` (started again without its journal,
    /// [`crate::config::session_of_start`]): what this gateway held, asked for or awaited of
    /// the old stream is dropped, and its participant's responses are numbered anew. Every
    /// order resting at the old root is gone, and so is its book: a gateway that had joined
    /// the old stream asks for the new root's (a snapshot part 0 empties a book built from
    /// the feed) and, if its market was open, tells the strategy ([`Strategy::on_session`]).
    /// Orders not answered yet go to the new root on their retry timeout. A gateway that had
    /// heard nothing yet (its configured session is not the root's) just takes the session.
    fn start_session(&mut self, now: Instant, session: wire::Session) {
        let joined = self.hold.next().is_some();
        let heard_before = self.dedupe.highest().is_some();
        let config = Arc::clone(&self.core.config);
        self.core.session = session;
        self.hold = HoldQueue::new(config.held_max);
        self.dedupe = DedupeWindow::new(config.dedupe_window);
        self.gap = None;
        self.available_from = None;
        self.next_sequence = None;
        self.snapshot = None;
        self.resumed_at = 0;
        self.data_from = None;
        self.responses = ResponseStream::for_node(&config);
        // Answers of the old root's: the new one never had those orders.
        self.core.counters.answers_unclaimed += self.early.clear();
        for timer in [
            Timer::Gap,
            Timer::Release,
            SNAPSHOT_TIMER,
            Timer::ResponseGap,
        ] {
            self.core.timers.stop(timer);
        }
        self.core.event(Event::SessionStarted {
            session,
            heard_before,
        });
        if joined {
            self.want_snapshot(now, 1);
            if self.opened {
                self.with_strategy(now, |strategy, ctx| strategy.on_session(ctx));
            }
        }
    }

    /// Waits for a book snapshot covering the live packets before `covers` (asking the root
    /// at once), or raises what the one awaited must cover.
    fn want_snapshot(&mut self, now: Instant, covers: u64) {
        match self.snapshot.as_mut() {
            Some(assembly) => assembly.cover(covers),
            None => {
                let parts_max = snapshot::parts_max(self.core.config.market.orders_max);
                self.snapshot = Some(Assembly::new(covers, parts_max));
            }
        }
        self.core.timers.stop(Timer::Release);
        self.ask_snapshot(now);
    }

    /// Asks the root for the snapshot's first missing part (and those after it), and arms
    /// the timer to ask again: after `gap_retry`, doubling with each request unanswered, up
    /// to [`GAP_BACKOFF_MAX`] times.
    fn ask_snapshot(&mut self, now: Instant) {
        let Some(assembly) = self.snapshot.as_mut() else {
            return;
        };
        let (packet_seq, part) = assembly.request();
        let doublings = assembly.attempts.min(GAP_BACKOFF_MAX);
        assembly.attempts += 1;
        let request = Control::SnapshotRequest {
            requester: self.core.id.0,
            session: self.core.session,
            packet_seq,
            part,
        };
        let root = self.core.plan.root();
        self.core.send_message(root, &request);
        self.core
            .event(Event::SnapshotRequested { packet_seq, part });
        let wait = self.core.config.gap_retry.saturating_mul(1 << doublings);
        self.core.timers.set(SNAPSHOT_TIMER, now + wait);
    }

    /// A part of a book snapshot, from the root.
    fn on_snapshot_part(
        &mut self,
        now: Instant,
        from: NodeId,
        header: &wire::JasperHeader,
        session: wire::Session,
        bytes: &[u8],
    ) {
        if from != self.core.plan.root() {
            return self.core.drop_datagram(from, DropReason::UnknownSender);
        }
        if session != self.core.session {
            return self.core.drop_datagram(from, DropReason::WrongSession);
        }
        let Some(assembly) = self.snapshot.as_mut() else {
            // Not waiting for one (a late copy of a part).
            return self.core.drop_datagram(from, DropReason::Duplicate);
        };
        match assembly.insert(header, bytes) {
            Insert::Stale => self.core.drop_datagram(from, DropReason::TooOld),
            Insert::Duplicate => self.core.drop_datagram(from, DropReason::Duplicate),
            Insert::Kept { ask } => {
                if ask {
                    self.ask_snapshot(now);
                }
            }
            Insert::Whole => self.apply_snapshot(now),
        }
    }

    /// The awaited snapshot is whole: its parts go to the participant in order, the held
    /// packets it covers are dropped, and the stream goes on from the first it does not.
    fn apply_snapshot(&mut self, now: Instant) {
        let assembly = self.snapshot.take().expect("a snapshot was awaited");
        self.core.timers.stop(SNAPSHOT_TIMER);
        let packet_seq = assembly.packet_seq();
        let parts = assembly.into_parts();
        let released = self.clock.to_exchange(now);
        let mut delivery = core::mem::take(&mut self.delivery);
        let mut ctx = Ctx {
            now: released,
            participant: self.participant,
            orders: &mut self.requests,
            next_client_order_id: &mut self.next_client_order_id,
            wakeup: &mut self.wakeup,
        };
        let mut orders = 0;
        let mut sequence = None;
        for bytes in &parts {
            let Ok(data) = wire::parse_market_data(bytes) else {
                unreachable!("parts were parsed on arrival");
            };
            orders += u64::from(data.message_count());
            sequence = Some(data.mold.sequence());
            let release = Release {
                packet_seq,
                sequence: data.mold.sequence(),
                messages: data.message_count(),
                send_time: data.header.send_time,
                deadline: data.header.send_time,
                received: released,
                released,
                received_local: now,
                late: false,
                recovered: false,
                snapshot: true,
            };
            deliver(
                &mut delivery,
                &mut ctx,
                &mut self.core,
                &release,
                &data,
                bytes,
            );
        }
        self.delivery = delivery;
        let from = self.hold.next().unwrap_or(packet_seq);
        let covered = self.hold.discard_to(packet_seq);
        self.resumed_at = packet_seq;
        self.next_sequence = sequence.or(self.next_sequence);
        self.core.counters.snapshots += 1;
        self.core.event(Event::SnapshotApplied {
            from,
            packet_seq,
            parts: parts.len() as u32,
            orders,
            covered,
        });
        self.flush_requests(now);
        self.release_due(now);
    }

    /// Stamps and sends one request; before the clock has synced, refuses it
    /// ([`Gateway::answer_closed`] answers it).
    fn send_order(&mut self, now: Instant, client_order_id: u64, request: OrderRequest) {
        if !self.clock.is_synced() {
            self.core.counters.orders_refused += 1;
            self.closed
                .push((client_order_id, order::RejectReason::Closed));
            return;
        }
        self.core.counters.answers_unclaimed += self.early.expire(now);
        if let Some(answers) = self.early.take(client_order_id) {
            // Its twin sent it first, and the root answered both gateways: a copy from here
            // would only be dropped there as a duplicate.
            self.core.counters.orders_answered_early += 1;
            self.answered_early.extend(answers);
            return;
        }
        let generation = self.stamp(now);
        if let Some(ask) = self.responses.wants_start(now, generation.as_nanos()) {
            // The first order: ask where this gateway's responses start.
            self.send_response_request(ask.from, ask.count);
            self.arm_response_gap();
        }
        let header = OrderHeader {
            client_order_id,
            participant_id: self.participant,
            gateway_id: self.core.id.0,
            time: generation,
        };
        let message = match request {
            OrderRequest::Enter {
                side,
                shares,
                stock,
                price,
                time_in_force,
                order_type,
                display,
            } => OrderMsg::Enter(order::Enter {
                header,
                side,
                shares,
                stock,
                price,
                time_in_force,
                order_type,
                display,
            }),
            OrderRequest::Replace {
                orig,
                shares,
                price,
            } => OrderMsg::Replace(order::Replace {
                header,
                orig_client_order_id: orig,
                shares,
                price,
            }),
            OrderRequest::Cancel { orig } => OrderMsg::Cancel(order::Cancel {
                header,
                orig_client_order_id: orig,
                shares: 0,
            }),
        };
        let to = self.order_path(now, 0);
        let queued = self.send_up(to, generation, 0, &message);
        // A first copy the full outbox refused (counted) is lost as one lost on the way is:
        // the order waits for its answer and goes again at its retry. Without retries
        // nothing would send it: its participant is told at once, with a rejection (`Busy`),
        // as a refusal before the clock syncs is (it was dropped without a word before).
        if !queued && self.core.config.order_retry.is_zero() {
            self.core.counters.orders_refused_busy += 1;
            self.closed
                .push((client_order_id, order::RejectReason::Busy));
            return;
        }
        if queued {
            self.order_path_sent = now;
            self.core.counters.orders_out += 1;
        }
        self.core.event(Event::OrderSent {
            client_order_id,
            generation,
        });
        self.forget_unanswered(now);
        if self.unanswered.len() == UNANSWERED_MAX
            && let Some((id, oldest)) = self.unanswered.pop_first()
        {
            self.stop_waiting(id, &oldest);
        }
        let mut entry = Unanswered {
            sent: now,
            generation,
            message,
            attempt: 0,
            backoff: 0,
            retry_at: None,
        };
        let first = self.retry_timeout();
        self.schedule_retry(now, client_order_id, &mut entry, first);
        self.unanswered.insert(client_order_id, entry);
        self.arm_retry_timer();
    }

    /// Queues transmission `attempt` of one order for `to` (the parent, or its sibling), in a
    /// hop envelope stamped `generation`; false (and a counted drop) when the outbox is full.
    fn send_up(
        &mut self,
        to: NodeId,
        generation: ExchangeTime,
        attempt: u16,
        message: &OrderMsg,
    ) -> bool {
        let queued = self.core.outbox.push(&[to], |buf| {
            wire::hop::emit(buf, generation, attempt, message).unwrap_or(0)
        });
        if queued {
            self.core.counters.copies_out += 1;
        } else {
            let id = self.core.id;
            self.core.drop_datagram(id, DropReason::QueueFull);
        }
        queued
    }

    /// Forgets the unanswered orders sent more than [`UNANSWERED_KEEP_TIMEOUTS`]
    /// `parent_timeout`s ago (counted as unanswered): a failover comes within about one
    /// `parent_timeout` of the parent's death, and the retries on the new path have had
    /// their time.
    fn forget_unanswered(&mut self, now: Instant) {
        let keep = self.unanswered_keep();
        while let Some(entry) = self.unanswered.first_entry() {
            if now.saturating_duration_since(entry.get().sent) <= keep {
                break;
            }
            let (id, entry) = entry.remove_entry();
            self.stop_waiting(id, &entry);
        }
    }

    /// Drops an unanswered order's retry and counts it as given up; the strategy is told
    /// ([`Gateway::tell_given_up`]).
    fn stop_waiting(&mut self, id: u64, entry: &Unanswered) {
        if let Some(at) = entry.retry_at {
            self.retries.remove(&(at, id));
        }
        self.core.counters.orders_unanswered += 1;
        self.given_up.push(id);
        if self.given_up_ids.len() == UNANSWERED_MAX {
            self.given_up_ids.pop_first();
        }
        self.given_up_ids.insert(id);
    }

    /// Outside [`Gateway::flush_requests`]: tells the strategy of the orders given up on, if
    /// any, and sends what it asks in answer.
    fn answer_given_up(&mut self, now: Instant) {
        if !self.given_up.is_empty() {
            self.tell_given_up(now);
            self.flush_requests(now);
        }
    }

    /// Gives the strategy the answers its twin's lead left for the orders it has just asked
    /// for ([`crate::twin`]); what it asks meanwhile waits in `requests`.
    fn tell_answered_early(&mut self, now: Instant) {
        let answers = core::mem::take(&mut self.answered_early);
        for message in &answers {
            self.answer(now, message, false);
        }
    }

    /// Tells the strategy, if there is one, of each order given up on
    /// ([`Strategy::on_unanswered`]); what it asks meanwhile waits in `requests`.
    fn tell_given_up(&mut self, now: Instant) {
        let given_up = core::mem::take(&mut self.given_up);
        for &id in &given_up {
            self.call_strategy(now, |strategy, ctx| strategy.on_unanswered(ctx, id));
        }
    }

    /// Where an order goes now: the parent, or, while the parent is silent for `order_retry`
    /// but market data still comes (dead, or paused), its next sibling, the one a failover
    /// would move to, which takes any of this layer's orders. So a dead parent costs its
    /// gateways' orders about `order_retry`, not the `parent_timeout` of a failover, and a
    /// paused one is not fed a pile of copies.
    ///
    /// Transmission `attempt` of an order goes to the `attempt`-th sibling (wrapping round):
    /// if the next sibling is dead too, a retry tries the one after.
    fn order_path(&self, now: Instant, attempt: u16) -> NodeId {
        let quiet = self.core.config.order_retry;
        self.watch.order_path(&self.core.plan, now, quiet, attempt)
    }

    /// How long an order waits for its answer before it goes again: the smoothed time
    /// answers take plus four deviations (RFC 6298), so that a slow path (a backlog at the
    /// engine, a global-FIFO merge waiting) is not also fed copies of orders that are merely
    /// waiting; `order_retry` before any answer came.
    /// The margin above the smoothed time is at least `order_retry` itself (as TCP's minimum
    /// RTO: steady answers leave the deviation near zero, and the slightly slow ones would
    /// all go again). Doubled `timeout_doublings` times; the whole at most `parent_timeout`
    /// (a failover's worth).
    fn retry_timeout(&self) -> Duration {
        let base = self.core.config.order_retry;
        let measured = self.answer_time.map_or(base, |time| {
            let margin = base.max(Duration::from_nanos(time.deviation_ns.saturating_mul(4)));
            Duration::from_nanos(time.smoothed_ns) + margin
        });
        let timeout = measured.saturating_mul(1 << self.timeout_doublings);
        timeout.min(self.retry_wait_max())
    }

    /// The longest an order waits between two transmissions: `parent_timeout`, a failover's
    /// worth (or `order_retry`, if longer).
    fn retry_wait_max(&self) -> Duration {
        let config = &self.core.config;
        config.parent_timeout.max(config.order_retry)
    }

    /// Arms the retry timer for the first retry due, or for when the oldest unanswered
    /// order is to be given up, whichever comes first: past its last retry nothing else
    /// would give it up (and tell the strategy) until the next order went up.
    fn arm_retry_timer(&mut self) {
        let retry = self.retries.first().map(|&(due, _)| due);
        // Client order ids grow with sending: the first entry is the oldest.
        let keep = self.unanswered_keep();
        let expiry = self
            .unanswered
            .first_key_value()
            .map(|(_, e)| e.sent + keep + Duration::from_nanos(1));
        let due = match (retry, expiry) {
            (Some(r), Some(e)) => Some(r.min(e)),
            (r, e) => r.or(e),
        };
        self.core.timers.arm(Timer::OrderRetry, due);
    }

    /// An order went unanswered on its first transmission for the whole timeout: doubles the
    /// timeout, once per timeout period.
    fn on_first_timeout(&mut self, now: Instant) {
        let period = self.retry_timeout();
        let due = self
            .doubled_at
            .is_none_or(|at| now.saturating_duration_since(at) >= period);
        if due && self.timeout_doublings < RETRY_BACKOFF_MAX {
            self.timeout_doublings += 1;
            self.doubled_at = Some(now);
        }
    }

    fn unanswered_keep(&self) -> Duration {
        self.core
            .config
            .parent_timeout
            .saturating_mul(UNANSWERED_KEEP_TIMEOUTS)
    }

    /// Sets `entry` (order `id`) to go again `after` from now if still unanswered, while the
    /// order is young enough to be kept; re-arms the retry timer. Retries off: nothing.
    fn schedule_retry(&mut self, now: Instant, id: u64, entry: &mut Unanswered, after: Duration) {
        if let Some(at) = entry.retry_at.take() {
            self.retries.remove(&(at, id));
        }
        let keep = self.unanswered_keep();
        if !self.core.config.order_retry.is_zero() {
            let at = now + after;
            if at.saturating_duration_since(entry.sent) < keep {
                entry.retry_at = Some(at);
                self.retries.insert((at, id));
            }
        }
        self.arm_retry_timer();
    }

    /// Sends order `id` again, if still unanswered, as its next attempt: a retry on the same
    /// path (the backoff doubles), or on a new path after a failover (it starts again); true
    /// if it went.
    fn send_again(&mut self, now: Instant, id: u64, to: NodeId, new_path: bool) -> bool {
        let Some(mut entry) = self.unanswered.get(&id).copied() else {
            return false;
        };
        let attempt = entry.attempt.saturating_add(1);
        let sent = self.send_up(to, entry.generation, attempt, &entry.message);
        if sent {
            entry.attempt = attempt;
            entry.backoff = if new_path {
                0
            } else {
                entry.backoff.saturating_add(1)
            };
            self.order_path_sent = now;
        }
        // The retry timeout after it went on its path, doubling with each retry, at most
        // `parent_timeout` (so an order retries a few times before it is given up).
        let after = self
            .retry_timeout()
            .saturating_mul(1 << entry.backoff.min(16))
            .min(self.retry_wait_max());
        self.schedule_retry(now, id, &mut entry, after);
        self.unanswered.insert(id, entry);
        sent
    }

    /// Sends again every order whose retry is due.
    fn on_retry_timer(&mut self, now: Instant) {
        self.forget_unanswered(now);
        while let Some(&(due, id)) = self.retries.first() {
            if due > now {
                break;
            }
            self.retries.pop_first();
            let Some(mut entry) = self.unanswered.get(&id).copied() else {
                continue;
            };
            entry.retry_at = None;
            self.unanswered.insert(id, entry);
            if entry.attempt == 0 {
                self.on_first_timeout(now);
            }
            let to = self.order_path(now, entry.attempt.saturating_add(1));
            if self.send_again(now, id, to, false) {
                self.core.counters.orders_retried += 1;
            }
        }
        self.arm_retry_timer();
    }

    /// After a failover (of this gateway, or of a proxy above it): schedules every
    /// unanswered order generated since `since` to go again to the parent, oldest first, with
    /// its original generation stamp (its place in time order). Returns how many.
    ///
    /// They go at twice the pace they first went at (each one half its original distance
    /// from the first after now), not at once: a gateway holds up to `parent_timeout` of
    /// orders by then, and all the dead proxy's gateways resending together overflowed the
    /// engine's socket in the simulator (652 of 992 resent orders lost at 2K orders/s per
    /// gateway, `sim/tests/inbound.rs::a_dead_proxy_costs_no_order`).
    fn resend_unanswered(&mut self, now: Instant, since: ExchangeTime) -> u32 {
        self.forget_unanswered(now);
        // Resends still due from an earlier failover that this one does not schedule again
        // (generated before `since`) go back to retrying: their retries were dropped for the
        // resend, and without one they would wait, unsent, until given up.
        let pending: Vec<u64> = self.resend.drain(..).map(|(_, id)| id).collect();
        let mut first = None;
        for (&id, entry) in self
            .unanswered
            .iter_mut()
            .filter(|(_, e)| e.generation >= since)
        {
            let first = *first.get_or_insert(entry.sent);
            let after = entry.sent.saturating_duration_since(first) / 2;
            self.resend.push_back((now + after, id));
            // The resend replaces its retry (and sets the next one).
            if let Some(at) = entry.retry_at.take() {
                self.retries.remove(&(at, id));
            }
        }
        for id in pending {
            let Some(mut entry) = self.unanswered.get(&id).copied() else {
                continue;
            };
            if entry.generation < since && entry.retry_at.is_none() {
                let after = self.retry_timeout();
                self.schedule_retry(now, id, &mut entry, after);
                self.unanswered.insert(id, entry);
            }
        }
        let scheduled = self.resend.len() as u32;
        self.resend_due(now);
        scheduled
    }

    /// Sends the scheduled resends that are due and still unanswered, and re-arms the timer.
    fn resend_due(&mut self, now: Instant) {
        while let Some(&(due, id)) = self.resend.front() {
            if due > now {
                break;
            }
            self.resend.pop_front();
            let parent = self.watch.parent();
            if self.send_again(now, id, parent, true) {
                self.core.counters.orders_resent += 1;
            } else if self.core.config.order_retry.is_zero() && self.unanswered.contains_key(&id) {
                // The full outbox refused it, and no retry will send it: it goes again after
                // the outbox drains. Its fate is unknown (the dead parent may have passed it
                // on), so it cannot be refused to its participant as a first send is.
                self.resend.push_back((now + RESEND_REFUSED_WAIT, id));
            }
        }
        let due = self.resend.front().map(|&(due, _)| due);
        self.core.timers.arm(Timer::Resend, due);
    }

    /// The generation stamp for `now`: the exchange clock, never below an earlier stamp.
    fn stamp(&mut self, now: Instant) -> ExchangeTime {
        let stamp = self.clock.to_exchange(now).max(self.last_generation);
        self.last_generation = stamp;
        stamp
    }

    /// Parent failover and failback ([`crate::failover`]): on a move, clock probes, OWD
    /// reports and orders go to the new parent; the clock keeps its model (both parents are
    /// synced to the root) but refits from new samples only ([`ClockSync::change_parent`]);
    /// and on a failover every order still unanswered (it may have died with the old
    /// parent) goes again to the new one. Nothing is resent on the way back home: the
    /// interim parent was alive.
    fn check_parent(&mut self, now: Instant) {
        let timeout = self.core.config.parent_timeout;
        let from = self.watch.parent();
        let Some(to) = self.watch.check(now, &self.core.plan, timeout) else {
            return;
        };
        self.clock.change_parent();
        let resent = if to == self.watch.home() {
            0
        } else {
            self.resend_unanswered(now, ExchangeTime::ZERO)
        };
        self.core.event(Event::ParentChanged { from, to, resent });
    }

    /// Global FIFO: after `heartbeat_interval` without an order going up, a heartbeat order
    /// (the watermark is the next stamp: every later order is stamped at least as late).
    fn on_order_heartbeat_timer(&mut self, now: Instant) {
        let interval = self.core.config.sequencer.heartbeat_interval;
        // Unsynced, a watermark on the gateway's own clock would be as wrong as a stamp.
        if !self.clock.is_synced() {
            return self.core.timers.set(Timer::OrderHeartbeat, now + interval);
        }
        if now.saturating_duration_since(self.order_path_sent) >= interval {
            let beat = Control::OrderHeartbeat {
                sender: self.core.id.0,
                time: self.stamp(now),
            };
            // Where orders go now: a heartbeat speaks for the orders before it, and the
            // merge waiting for it is the one they reach.
            let to = self.order_path(now, 0);
            self.core.send_message(to, &beat);
            self.order_path_sent = now;
            self.order_heartbeats += 1;
        }
        let next = self.order_path_sent + interval;
        self.core.timers.set(Timer::OrderHeartbeat, next);
    }

    /// Sends what the strategy asked for and re-arms its wake-up. Requests refused (for want
    /// of a synced clock, or of room in the outbox) are answered at once, orders given up on
    /// are told ([`Strategy::on_unanswered`]), and what the strategy asks in answer is sent
    /// too, for [`CLOSED_ROUNDS_MAX`] rounds (the rest of a strategy that asks again at each
    /// rejection waits for its next call).
    fn flush_requests(&mut self, now: Instant) {
        for _ in 0..CLOSED_ROUNDS_MAX {
            let mut requests = core::mem::take(&mut self.requests);
            for (id, request) in requests.drain(..) {
                self.send_order(now, id, request);
            }
            self.requests = requests;
            if self.closed.is_empty() && self.given_up.is_empty() && self.answered_early.is_empty()
            {
                break;
            }
            self.answer_closed(now);
            self.tell_given_up(now);
            self.tell_answered_early(now);
        }
        let at = self.wakeup.map(|at| self.clock.to_local(at).max(now));
        self.core.timers.arm(Timer::Wakeup, at);
    }

    /// Answers every request refused: an [`Event::OrderRefused`], and to the strategy a
    /// rejection (`Closed`: the gateway is not open yet; `Busy`: its outbox was full), not
    /// numbered (it is not the root's); what the strategy asks meanwhile waits in
    /// `requests`.
    fn answer_closed(&mut self, now: Instant) {
        let closed = core::mem::take(&mut self.closed);
        for &(client_order_id, reason) in &closed {
            let header = OrderHeader {
                client_order_id,
                participant_id: self.participant,
                gateway_id: self.core.id.0,
                time: self.clock.to_exchange(now),
            };
            let message = OrderMsg::Rejected(order::Rejected { header, reason });
            self.core.event(Event::OrderRefused {
                client_order_id,
                reason,
            });
            self.call_strategy(now, |strategy, ctx| strategy.on_response(ctx, &message));
        }
        self.closed = closed;
        self.closed.clear();
    }

    /// Calls the strategy, if there is one, with a fresh context, then sends what it asked.
    /// Once started and synced, tells the strategy the market is open to it
    /// ([`Strategy::on_open`]), once.
    fn open_if_synced(&mut self, now: Instant) {
        if self.started && !self.opened && self.clock.is_synced() {
            self.opened = true;
            // Flushed only if it asked for something: a flush re-arms the wake-up on the
            // clock just synced, which would move a strategy that ignores the open.
            let wakeup = self.wakeup;
            if self.call_strategy(now, |strategy, ctx| strategy.on_open(ctx))
                && (!self.requests.is_empty() || self.wakeup != wakeup)
            {
                self.flush_requests(now);
            }
        }
    }

    fn with_strategy(&mut self, now: Instant, f: impl FnOnce(&mut dyn Strategy, &mut Ctx<'_>)) {
        if self.call_strategy(now, f) {
            self.flush_requests(now);
        }
    }

    /// Calls the strategy, if there is one, with a fresh context; what it asks waits in
    /// `requests`. Whether there is one.
    fn call_strategy(
        &mut self,
        now: Instant,
        f: impl FnOnce(&mut dyn Strategy, &mut Ctx<'_>),
    ) -> bool {
        let Delivery::Strategy(strategy) = &mut self.delivery else {
            return false;
        };
        let mut ctx = Ctx {
            now: self.clock.to_exchange(now),
            participant: self.participant,
            orders: &mut self.requests,
            next_client_order_id: &mut self.next_client_order_id,
            wakeup: &mut self.wakeup,
        };
        f(strategy.as_mut(), &mut ctx);
        true
    }

    /// A numbered response from the root: delivered in number order, each once.
    fn on_response(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        let Ok(response) = wire::response::Response::parse(bytes) else {
            return self.core.drop_datagram(from, DropReason::Malformed);
        };
        let Ok(message) = OrderMsg::parse(response.order) else {
            return self.core.drop_datagram(from, DropReason::Malformed);
        };
        let ours = message.header().participant_id == self.participant
            && message.direction() == order::Direction::Down;
        if from != self.core.plan.root() || !ours {
            return self.core.drop_datagram(from, DropReason::Unexpected);
        }
        if !self.responses.is_started() {
            // A response before this gateway sent any order (or asked): ask where to start.
            let since = self.clock.to_exchange(now).as_nanos();
            if let Some(ask) = self.responses.wants_start(now, since) {
                self.send_response_request(ask.from, ask.count);
            }
        }
        match self.responses.arrive(now, response.seq, response.order) {
            Arrival::Deliver => {
                self.deliver_response(now, &message);
                self.deliver_ready_responses(now);
            }
            Arrival::Held => {}
            Arrival::Duplicate => self.core.drop_datagram(from, DropReason::Duplicate),
            Arrival::Full => self.core.drop_datagram(from, DropReason::QueueFull),
        }
        self.note_responses_lost();
        self.arm_response_gap();
    }

    /// Counts, with an event, the responses the stream gave up on since the last call (the
    /// root no longer held them, or, without recovery, a later one came first).
    fn note_responses_lost(&mut self) {
        let lost = self.responses.lost - self.core.counters.responses_lost;
        if lost > 0 {
            self.core.counters.responses_lost = self.responses.lost;
            self.core.event(Event::ResponsesSkipped { count: lost });
        }
    }

    /// Delivers the kept responses now in order.
    fn deliver_ready_responses(&mut self, now: Instant) {
        while let Some(bytes) = self.responses.pop_ready() {
            let Ok(message) = OrderMsg::parse(&bytes) else {
                unreachable!("kept responses were parsed when they came");
            };
            self.deliver_response(now, &message);
        }
    }

    fn arm_response_gap(&mut self) {
        let at = self.responses.next_timeout();
        self.core.timers.arm(Timer::ResponseGap, at);
    }

    fn on_response_gap_timer(&mut self, now: Instant) {
        if let Some(Ask { from, count }) = self.responses.on_timeout(now) {
            self.send_response_request(from, count);
        }
        self.arm_response_gap();
    }

    /// Asks the root for `count` responses from `from` (`count` zero: its status only).
    fn send_response_request(&mut self, from: u64, count: u32) {
        let gap = Control::ResponseGap {
            requester: self.core.id.0,
            participant: self.participant,
            from,
            count,
        };
        let root = self.core.plan.root();
        self.core.send_message(root, &gap);
        if count > 0 {
            self.core.counters.response_gaps += 1;
        }
    }

    /// One response, in its number's turn: to the unanswered-order bookkeeping, the events
    /// and the strategy.
    fn deliver_response(&mut self, now: Instant, message: &OrderMsg) {
        let header = *message.header();
        self.core.counters.responses += 1;
        let leaves_shares = match message {
            OrderMsg::Executed(e) => e.leaves_shares,
            _ => 0,
        };
        let order = match message {
            OrderMsg::Canceled(c) => c.orig_client_order_id,
            _ => header.client_order_id,
        };
        self.core.event(Event::OrderResponse {
            client_order_id: header.client_order_id,
            order,
            msg_type: message.msg_type(),
            leaves_shares,
        });
        if self.twin.is_some() && header.client_order_id >= self.next_client_order_id {
            // Its twin's copy went first: kept for when this gateway's strategy asks for it.
            let unclaimed = self.early.keep(now, header.client_order_id, *message);
            self.core.counters.answers_unclaimed += unclaimed;
            return;
        }
        self.answer(now, message, true);
    }

    /// Answers an order: it is no longer waited for, and the strategy hears the answer (and,
    /// if `flush`, what it asks in return is sent).
    fn answer(&mut self, now: Instant, message: &OrderMsg, flush: bool) {
        let header = *message.header();
        if let Some(entry) = self.unanswered.remove(&header.client_order_id) {
            if let Some(at) = entry.retry_at {
                self.retries.remove(&(at, header.client_order_id));
            }
            // Karn: an answer to an order sent more than once could be to any copy.
            if entry.attempt == 0 {
                let sample = duration_nanos(now.saturating_duration_since(entry.sent));
                match self.answer_time.as_mut() {
                    Some(time) => time.update(sample),
                    None => self.answer_time = Some(AnswerTime::new(sample)),
                }
                self.timeout_doublings = 0;
            }
        } else if self.given_up_ids.remove(&header.client_order_id) {
            // Given up on (its strategy told so), and executed after all: the root was
            // paused or cut off longer than the gateway waits.
            self.core.counters.orders_answered_late += 1;
        }
        if flush {
            self.with_strategy(now, |strategy, ctx| strategy.on_response(ctx, message));
        } else {
            self.call_strategy(now, |strategy, ctx| strategy.on_response(ctx, message));
        }
    }

    fn on_control(&mut self, now: Instant, from: NodeId, control: Control) {
        match control {
            Control::ClockReply {
                probe_id,
                t2_recv,
                t3_send,
                unsynced: false,
                ..
            } if from == self.watch.parent() => {
                let synced = self.clock.is_synced();
                if self.clock.on_reply(now, probe_id, t2_recv, t3_send) {
                    if !synced && self.clock.is_synced() {
                        self.on_first_sync();
                    }
                    // A held packet leaves at its deadline by the newest estimate, not by
                    // the one its timer was armed with.
                    self.arm_release(now);
                }
                self.open_if_synced(now);
            }
            // The parent is alive but not synced yet: heard (`ParentWatch`), not fitted.
            Control::ClockReply { unsynced: true, .. } if from == self.watch.parent() => {}
            Control::ClockReply { converged, .. } if from == self.watch.home() => {
                self.watch.on_home_reply(now, converged);
            }
            Control::OwdReport { sender, owd_ns, .. }
                if Some(from) == self.twin && sender == from.0 =>
            {
                self.twin_owd.hear(now, owd_ns);
            }
            Control::ResendOrders { sender, since }
                if from == self.watch.parent() && sender == from.0 =>
            {
                self.resend_unanswered(now, since);
                self.answer_given_up(now);
            }
            Control::ResponseStatus {
                participant,
                oldest,
                next,
            } if from == self.core.plan.root() && participant == self.participant => {
                if oldest > next {
                    return self.core.drop_datagram(from, DropReason::Malformed);
                }
                self.responses.status(now, oldest, next);
                self.note_responses_lost();
                self.deliver_ready_responses(now);
                self.arm_response_gap();
            }
            Control::RetransmitUnavailable {
                requester,
                sequence,
                oldest_available,
                ..
            } if requester == self.core.id.0
                && (from == self.core.plan.root() || self.is_parent_layer(from)) =>
            {
                // Skip what the rewinder no longer has (said by the root, or passed on by a
                // parent proxy), and no more. The root sends what it still holds of the
                // range with its answer; what lies before the first of it is skipped when it
                // comes (`track_gap`), and the rest of the gap is asked for from there if it
                // does not (`on_gap_timer`). Anything newer may still arrive.
                if let Some((gap_from, to, end_sequence)) = self.hold.first_gap()
                    && let Some(next) = self.next_sequence
                    && (next..end_sequence).contains(&sequence)
                    && oldest_available > next
                {
                    if oldest_available >= end_sequence {
                        self.skip_gap(now, gap_from, to, end_sequence);
                    } else {
                        let from = self
                            .available_from
                            .map_or(oldest_available, |a| a.max(oldest_available));
                        self.available_from = Some(from);
                    }
                }
            }
            _ => self.core.drop_datagram(from, DropReason::Unexpected),
        }
    }

    fn check_invariants_cheap(&self) {
        debug_assert!(self.hold.len() <= self.core.config.held_max.next_power_of_two());
        debug_assert_eq!(
            self.core.timers.get(Timer::Release).is_some(),
            self.hold.head().is_some() && self.snapshot.is_none()
        );
        debug_assert!(self.core.timers.get(Timer::Gap).is_some() || self.gap.is_none());
        debug_assert_eq!(
            self.core.timers.get(SNAPSHOT_TIMER).is_some(),
            self.snapshot.is_some()
        );
        if let (Some(next), Some(highest)) = (self.hold.next(), self.dedupe.highest()) {
            debug_assert!(
                next <= (highest + 1).max(self.resumed_at),
                "nothing is released before it arrives (or a snapshot covers it)"
            );
        }
    }
}

/// Hands a released packet (or a snapshot's part) to the participant: its strategy, or its own
/// program (trust model 2, the bytes as they came).
fn deliver(
    delivery: &mut Delivery,
    ctx: &mut Ctx<'_>,
    core: &mut Core,
    release: &Release,
    data: &wire::MarketData<'_>,
    bytes: &[u8],
) {
    match delivery {
        Delivery::Events => {}
        Delivery::Strategy(strategy) => strategy.on_market_data(ctx, release, data),
        Delivery::Forward(to) => core.send_bytes(&[*to], bytes),
    }
}

impl Node for Gateway {
    fn id(&self) -> NodeId {
        self.core.id
    }

    fn handle_datagram(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        self.core.counters.datagrams_in += 1;
        if self.core.plan.node(from).is_none() {
            self.core.drop_datagram(from, DropReason::UnknownSender);
            return;
        }
        let kind = wire::classify(bytes);
        let timeout = self.core.config.parent_timeout;
        self.watch
            .on_datagram(now, from, kind == Kind::MarketData, timeout);
        match kind {
            Kind::MarketData => self.on_market_data(now, from, bytes),
            Kind::Control => match Control::parse(bytes) {
                Ok(control) => self.on_control(now, from, control),
                Err(_) => self.core.drop_datagram(from, DropReason::Malformed),
            },
            Kind::Response => self.on_response(now, from, bytes),
            Kind::Order | Kind::Hop => self.core.drop_datagram(from, DropReason::Unexpected),
            Kind::Unknown => self.core.drop_datagram(from, DropReason::Malformed),
        }
        self.check_invariants_cheap();
    }

    fn handle_timeout(&mut self, now: Instant) {
        if !self.started {
            self.started = true;
            self.with_strategy(now, |strategy, ctx| strategy.on_start(ctx));
            self.open_if_synced(now);
        }
        if self.core.timers.expire(Timer::Wakeup, now) {
            self.wakeup = None;
            self.with_strategy(now, |strategy, ctx| strategy.on_wakeup(ctx));
        }
        if self.core.timers.expire(Timer::ClockProbe, now) {
            self.check_parent(now);
            let (parent, away) = (self.watch.parent(), self.watch.away_from());
            self.core
                .send_probe_pair(now, &mut self.clock, parent, away);
            self.watch.on_probe_sent();
        }
        if self.core.timers.expire(Timer::Report, now) {
            let owd = self.core.config.owd;
            if let Some((owd_ns, samples)) =
                self.owd
                    .percentile(now, owd.window, owd.percentile_centi, owd.rank)
            {
                let sender = self.core.id.0;
                let report = |owd_ns, samples| Control::OwdReport {
                    sender,
                    owd_ns,
                    samples,
                };
                let mut reported = owd_ns;
                if let Some(twin) = self.twin.filter(|_| owd.twin_deadline) {
                    // What the twin may lower its report to: counting what this gateway
                    // missed ([`TwinOwd`]).
                    let (with_missed, all) = self
                        .owd
                        .percentile_counting_missed(now, owd.window, owd.percentile_centi, owd.rank)
                        .unwrap_or((u64::MAX, samples));
                    self.core.send_message(twin, &report(with_missed, all));
                    // Two and a half intervals: one lost (or late) report is forgiven, and
                    // a dead twin's last word stops counting ~38 ms after it was sent. The
                    // root's deadline follows one report interval per layer after that (the
                    // survivor's next report, each proxy's), and the survivor may be late
                    // until then.
                    reported = self
                        .twin_owd
                        .lesser(now, owd_ns, owd.report_interval * 5 / 2);
                }
                let parent = self.watch.parent();
                self.core.send_message(parent, &report(reported, samples));
            }
            self.core
                .timers
                .set(Timer::Report, now + owd.report_interval);
        }
        if self.core.timers.expire(Timer::Gap, now) {
            self.on_gap_timer(now);
        }
        if self.core.timers.expire(SNAPSHOT_TIMER, now) {
            self.ask_snapshot(now);
        }
        if self.core.timers.expire(Timer::OrderHeartbeat, now) {
            self.on_order_heartbeat_timer(now);
        }
        if self.core.timers.expire(Timer::Resend, now) {
            self.resend_due(now);
        }
        if self.core.timers.expire(Timer::OrderRetry, now) {
            self.on_retry_timer(now);
        }
        self.answer_given_up(now);
        if self.core.timers.expire(Timer::ResponseGap, now) {
            self.on_response_gap_timer(now);
        }
        self.core.timers.stop(Timer::Release);
        self.release_due(now);
        self.check_invariants_cheap();
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit<'_>> {
        self.core.outbox.poll()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.core.timers.next()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.core.events.pop_front()
    }

    fn check_invariants(&self) {
        self.check_invariants_cheap();
        self.hold.check_invariants();
        assert!(self.core.outbox.len() <= self.core.config.outbox_max);
        self.responses.check_invariants();
        assert!(self.unanswered.len() <= UNANSWERED_MAX);
        assert!(self.early.len() <= crate::twin::EARLY_IDS_MAX);
        assert!(self.given_up_ids.len() <= UNANSWERED_MAX);
        assert!(self.twin.is_some() || self.early.len() == 0);
        assert!(
            self.closed.is_empty(),
            "every refusal is answered in the call that made it"
        );
        assert!(self.retries.len() <= self.unanswered.len());
        for &(at, id) in &self.retries {
            assert_eq!(self.unanswered.get(&id).and_then(|e| e.retry_at), Some(at));
        }
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;
    use std::collections::BTreeSet;

    use super::*;
    use crate::plan::PlanConfig;

    /// A limit order to buy.
    fn buy() -> OrderRequest {
        OrderRequest::Enter {
            side: wire::Side::Buy,
            shares: 100,
            stock: wire::Stock::new("JSPR").expect("a valid symbol"),
            price: 1_000_000,
            time_in_force: order::TimeInForce::Day,
            order_type: order::OrderType::Limit,
            display: order::Display::Visible,
        }
    }

    /// The client order ids of the orders the gateway sent since the last call.
    /// A gateway of a 2-proxy tree whose outbox holds two datagrams, without order retries
    /// (`order_retry` 0).
    fn outbox_of_two_without_retries() -> Gateway {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let config = NodeConfig {
            outbox_max: 2,
            order_retry: Duration::ZERO,
            ..NodeConfig::default()
        };
        Gateway::new(id, plan, config, Delivery::Events).expect("gateway")
    }

    fn sent(gateway: &mut Gateway, now: Instant) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(t) = gateway.poll_transmit(now) {
            if wire::classify(t.payload) == Kind::Hop {
                let hop = wire::hop::Hop::parse(t.payload).expect("a hop");
                let message = OrderMsg::parse(hop.order).expect("an order");
                out.push(message.header().client_order_id);
            }
        }
        out
    }

    /// Goal: a packet of another session cuts a live stream off only once it has been silent
    /// for `parent_timeout` (a root started again without its journal), never while it
    /// flows (a stale or forged packet). Method: packet 1 of the configured session; one of
    /// another session 1 ms later is dropped (`WrongSession`); one after `parent_timeout` of
    /// silence starts the new session.
    #[test]
    fn another_session_is_taken_only_after_the_stream_went_silent() {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let config = NodeConfig::default();
        let quiet = config.parent_timeout;
        let mut gateway = Gateway::new(id, plan, config, Delivery::Events).expect("gateway");
        let parent = gateway.parent();
        let other = |packet_seq| crate::repair::test_packet_of("JASP000123", packet_seq, 1, 1);
        let started = |gateway: &mut Gateway| {
            std::iter::from_fn(|| gateway.poll_event())
                .filter(|e| matches!(e, Event::SessionStarted { .. }))
                .count()
        };
        let t0 = Instant::ZERO + Duration::from_millis(1);
        gateway.handle_datagram(t0, parent, &crate::repair::test_packet(1, 1, 1));
        let t1 = t0 + Duration::from_millis(1);
        gateway.handle_datagram(t1, parent, &other(1));
        assert_eq!(gateway.counters().dropped(DropReason::WrongSession), 1);
        assert_eq!(started(&mut gateway), 0);
        let t2 = t0 + quiet;
        // After the silence too, a session name no root has (corrupt) is not taken.
        let mut corrupt = other(1);
        let at = corrupt
            .windows(10)
            .position(|w| w == b"JASP000123")
            .expect("the session's bytes");
        corrupt[at + 4] = 0xC9;
        gateway.handle_datagram(t2, parent, &corrupt);
        assert_eq!(gateway.counters().dropped(DropReason::WrongSession), 2);
        assert_eq!(started(&mut gateway), 0);
        gateway.handle_datagram(t2, parent, &other(1));
        assert_eq!(started(&mut gateway), 1);
        assert_eq!(gateway.counters().dropped(DropReason::WrongSession), 2);
        // The old session's packets are the stale ones now.
        gateway.handle_datagram(t2, parent, &crate::repair::test_packet(2, 2, 1));
        assert_eq!(gateway.counters().dropped(DropReason::WrongSession), 3);
        gateway.check_invariants();
    }

    /// Goal: a new session tells an open strategy that its orders are gone
    /// (`Strategy::on_session`) and asks for the new root's book; a gateway that had heard
    /// nothing yet just takes the root's session (no callback, no snapshot). Method: a fresh
    /// gateway takes session A from its first packet; synced, it hears A's packets, then
    /// session B after `parent_timeout` of silence.
    #[test]
    fn a_new_session_tells_an_open_strategy_and_asks_for_the_book() {
        use std::sync::atomic::{AtomicU32, Ordering};
        struct Sessions(Arc<AtomicU32>);
        impl Strategy for Sessions {
            fn on_session(&mut self, _ctx: &mut Ctx<'_>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let calls = Arc::new(AtomicU32::new(0));
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let root = plan.root();
        let config = NodeConfig::default();
        let quiet = config.parent_timeout;
        let strategy = Delivery::Strategy(Box::new(Sessions(Arc::clone(&calls))));
        let mut gateway = Gateway::new(id, plan, config, strategy).expect("gateway");
        let parent = gateway.parent();
        let asks_root = |gateway: &mut Gateway, now: Instant| {
            let mut asks = 0;
            while let Some(t) = gateway.poll_transmit(now) {
                let snapshot = matches!(
                    Control::parse(t.payload),
                    Ok(Control::SnapshotRequest { .. })
                );
                asks += usize::from(snapshot && t.destinations == [root]);
            }
            asks
        };
        let t0 = Instant::ZERO + Duration::from_millis(1);
        let a = |p| crate::repair::test_packet_of("JASPA00001", p, p, 1);
        gateway.handle_datagram(t0, parent, &a(1));
        assert_eq!(
            asks_root(&mut gateway, t0),
            0,
            "a fresh gateway needs no book"
        );
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        let t1 = t0 + Duration::from_millis(1);
        sync(&mut gateway, t1);
        gateway.handle_datagram(t1, parent, &a(2));
        let t2 = t1 + quiet;
        let b = crate::repair::test_packet_of("JASPB00001", 1, 1, 1);
        gateway.handle_datagram(t2, parent, &b);
        assert_eq!(asks_root(&mut gateway, t2), 1, "the new root's book");
        assert_eq!(calls.load(Ordering::Relaxed), 1, "the strategy heard it");
        let sessions: Vec<bool> = std::iter::from_fn(|| gateway.poll_event())
            .filter_map(|e| match e {
                Event::SessionStarted { heard_before, .. } => Some(heard_before),
                _ => None,
            })
            .collect();
        assert_eq!(
            sessions,
            [false, true],
            "A joined from the start, B replaced a stream"
        );
        gateway.check_invariants();
    }

    /// Goal: trust model 2: a gateway that joins late forwards the book snapshot's parts to
    /// the participant's program before the stream, then the stream from the first packet
    /// the snapshot does not cover, and never the packets it covers. Method: packet 5 is the
    /// first the gateway hears: a snapshot request goes to the root, nothing to the program;
    /// packet 6 comes, then the root's one-part snapshot covering packets before 6.
    #[test]
    fn a_forwarding_gateway_that_joins_late_forwards_the_snapshot_first() {
        use crate::snapshot::Taken;
        use wire::itch::{AddOrder, Message as Itch};
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let root = plan.root();
        let program = NodeId(1_000);
        let config = NodeConfig::default();
        let mut gateway =
            Gateway::new(id, plan, config, Delivery::Forward(program)).expect("gateway");
        let parent = gateway.parent();
        let now = Instant::ZERO + Duration::from_millis(1);
        // Synced, so that a packet due at once leaves at once.
        sync(&mut gateway, now);
        let drain = |gateway: &mut Gateway| {
            let mut out = Vec::new();
            while let Some(t) = gateway.poll_transmit(now) {
                out.push((t.destinations.to_vec(), t.payload.to_vec()));
            }
            out
        };
        let (five, six) = (
            crate::repair::test_packet(5, 50, 1),
            crate::repair::test_packet(6, 60, 1),
        );
        gateway.handle_datagram(now, parent, &five);
        let out = drain(&mut gateway);
        let asks: Vec<Control> = out
            .iter()
            .filter(|(to, _)| to == &[root])
            .filter_map(|(_, bytes)| Control::parse(bytes).ok())
            .collect();
        assert!(
            matches!(
                asks[..],
                [Control::SnapshotRequest {
                    packet_seq: 5,
                    part: 0,
                    ..
                }]
            ),
            "{asks:?}"
        );
        assert!(out.iter().all(|(to, _)| to != &[program]), "nothing yet");
        gateway.handle_datagram(now, parent, &six);
        assert!(drain(&mut gateway).iter().all(|(to, _)| to != &[program]));
        let add = Itch::AddOrder(AddOrder {
            stock_locate: 0,
            tracking_number: 0,
            timestamp_ns: 0,
            order_ref: 9,
            side: wire::Side::Buy,
            shares: 100,
            stock: wire::Stock::new("JSPR").expect("valid"),
            price: 990_000,
        });
        let session = wire::Session::new("JASPER0001").expect("valid");
        let taken = Taken::new(session, 60, 6, ExchangeTime::from_nanos(1), &[add]);
        let part = taken.answer(6, 0)[0].clone();
        gateway.handle_datagram(now, root, &part);
        let forwarded: Vec<Vec<u8>> = drain(&mut gateway)
            .into_iter()
            .filter(|(to, _)| to == &[program])
            .map(|(_, bytes)| bytes)
            .collect();
        assert_eq!(
            forwarded,
            vec![part, six],
            "the part, then packet 6; never 5"
        );
        let applied = std::iter::from_fn(|| gateway.poll_event()).find_map(|e| match e {
            Event::SnapshotApplied {
                from,
                packet_seq,
                parts,
                orders,
                covered,
            } => Some((from, packet_seq, parts, orders, covered)),
            _ => None,
        });
        assert_eq!(applied, Some((5, 6, 1, 1, 1)));
        assert_eq!(gateway.next_packet(), Some(7));
        gateway.check_invariants();
    }

    /// Goal: while its parent is silent and orders go to the parent's sibling
    /// (`order_retry`), heartbeat orders go there too: the sibling's global-FIFO merge waits
    /// for this gateway once it hears its orders, and a silent parent waits for nothing from
    /// it. Method: global FIFO; market data from the parent at 1 ms, then only from its
    /// sibling, every millisecond to 20 ms; the heartbeat orders sent once the parent has
    /// been silent for more than `order_retry` go to the sibling, those before to it.
    #[test]
    fn heartbeat_orders_follow_the_orders_path() {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let parent = plan.home_parent(id).expect("a parent");
        let sibling = NodeId(
            plan.proxies()
                .find(|&p| NodeId(p) != parent)
                .expect("a sibling"),
        );
        let mut config = NodeConfig::default();
        config.sequencer.kind = SequencerKind::GlobalFifo;
        let retry = config.order_retry;
        let mut gateway = Gateway::new(id, plan, config, Delivery::Events).expect("gateway");
        let ms = Duration::from_millis(1);
        let start = Instant::ZERO + ms;
        assert_eq!(sync(&mut gateway, start), Vec::<u64>::new());
        let mut beats = Vec::new();
        for k in 0..20u64 {
            let now = start + ms * k as u32;
            let from = if k == 0 { parent } else { sibling };
            let packet = crate::repair::test_packet(k + 1, k + 1, 1);
            gateway.handle_datagram(now, from, &packet);
            gateway.handle_timeout(now);
            while let Some(t) = gateway.poll_transmit(now) {
                if let Ok(Control::OrderHeartbeat { .. }) = Control::parse(t.payload) {
                    beats.push((now, t.destinations.to_vec()));
                }
            }
        }
        assert!(
            beats.len() >= 15,
            "a heartbeat order a millisecond: {beats:?}"
        );
        for (at, to) in &beats {
            let silent = at.saturating_duration_since(start) > retry;
            let expected = if silent { sibling } else { parent };
            assert_eq!(to, &[expected], "at {at:?}");
        }
        assert!(beats.iter().any(|(_, to)| to == &[sibling]));
    }

    /// Answers the gateway's clock probes (its parent's clock reads `now`, as its own does)
    /// until its clock has a fit; returns what else it sent meanwhile, as [`sent`] does.
    fn sync(gateway: &mut Gateway, now: Instant) -> Vec<u64> {
        sync_behind(gateway, now, 0)
    }

    /// [`sync`] with the parent's (the exchange's) clock `behind_ns` behind the gateway's.
    fn sync_behind(gateway: &mut Gateway, now: Instant, behind_ns: u64) -> Vec<u64> {
        let exchange_now = ExchangeTime::from_nanos(now.as_nanos() - behind_ns);
        let parent = gateway.parent();
        let mut orders = Vec::new();
        let mut buf = [0u8; 64];
        for _ in 0..8 {
            gateway.handle_timeout(now);
            let mut replies = Vec::new();
            while let Some(t) = gateway.poll_transmit(now) {
                match wire::classify(t.payload) {
                    Kind::Hop => {
                        let hop = wire::hop::Hop::parse(t.payload).expect("a hop");
                        let message = OrderMsg::parse(hop.order).expect("an order");
                        orders.push(message.header().client_order_id);
                    }
                    Kind::Control => {
                        if let Ok(Control::ClockProbe {
                            probe_id,
                            pair_index,
                            t_send,
                            ..
                        }) = Control::parse(t.payload)
                        {
                            replies.push(Control::ClockReply {
                                probe_id,
                                pair_index,
                                responder: parent.0,
                                t1_send: t_send,
                                t2_recv: exchange_now,
                                t3_send: exchange_now,
                                converged: true,
                                unsynced: false,
                            });
                        }
                    }
                    _ => {}
                }
            }
            for reply in replies {
                let len = reply.emit(&mut buf).expect("a reply");
                gateway.handle_datagram(now, parent, &buf[..len]);
            }
            orders.extend(sent(gateway, now));
            if gateway.clock.is_synced() {
                return orders;
            }
        }
        panic!("the gateway's clock never synced");
    }

    /// Goal: a gateway whose clock has not synced releases no packet before its deadline in
    /// true time. Its "exchange time" is then its raw local clock, which may read every
    /// deadline as long past: it handed its participant each packet on arrival, before
    /// every other gateway (every gateway did at start-up, ~200 packets each in the
    /// simulator). Now it holds each for its budget (deadline less send time) from its
    /// arrival, and once its clock syncs, what it still holds waits for its deadline by
    /// that clock. Method: the gateway's clock is 1 s ahead of the exchange's; at exchange
    /// 2 ms come packet 1 (sent at 1.9 ms, due at 2.1 ms) and packet 2 (sent at 1 ms, due
    /// at 40 ms). Packet 1 leaves 200 µs after its arrival, not late; the clock syncs at
    /// exchange 32 ms; packet 2 leaves when the synced clock reads 40 ms (a millisecond
    /// before its budget would have run out), not late.
    #[test]
    fn an_unsynced_gateway_holds_each_packet_for_its_budget() {
        const US: u64 = 1_000;
        const MS: u64 = 1_000_000;
        const AHEAD: u64 = 1_000 * MS;
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let mut gateway =
            Gateway::new(id, plan, NodeConfig::default(), Delivery::Events).expect("gateway");
        let parent = gateway.parent();
        // (packet, late, local instant of the release)
        let run_to = |gateway: &mut Gateway, out: &mut Vec<(u64, bool, u64)>, until: Instant| {
            while let Some(due) = gateway.poll_timeout().filter(|&t| t <= until) {
                gateway.handle_timeout(due);
                while let Some(e) = gateway.poll_event() {
                    if let Event::Released(r) = e {
                        out.push((r.packet_seq, r.late, due.as_nanos()));
                    }
                }
            }
        };
        let t0 = Instant::ZERO + Duration::from_nanos(AHEAD + 2 * MS);
        // Each with one message besides its header.
        let packet = |seq, send, deadline| {
            crate::repair::test_packet_timed("JASPER0001", seq, seq * 2, 2, send, deadline)
        };
        gateway.handle_datagram(t0, parent, &packet(1, 1_900 * US, 2_100 * US));
        gateway.handle_datagram(t0, parent, &packet(2, MS, 40 * MS));
        assert!(
            std::iter::from_fn(|| gateway.poll_event()).all(|e| !matches!(e, Event::Released(_))),
            "nothing on arrival"
        );
        let t1 = t0 + Duration::from_millis(30);
        let mut out = Vec::new();
        run_to(&mut gateway, &mut out, t1 - Duration::from_millis(1));
        assert_eq!(out, [(1, false, t0.as_nanos() + 200 * US)]);
        sync_behind(&mut gateway, t1, AHEAD);
        assert!(gateway.clock().is_synced());
        run_to(&mut gateway, &mut out, t1 + Duration::from_millis(20));
        assert_eq!(out.len(), 2, "{out:?}");
        let (packet, late, at) = out[1];
        assert_eq!((packet, late), (2, false));
        let deadline_local = AHEAD + 40 * MS;
        assert!(
            (deadline_local..deadline_local + 10 * US).contains(&at),
            "packet 2 at its deadline by the synced clock: {at}"
        );
        gateway.check_invariants();
    }

    /// Goal: before its clock has synced a gateway sends no order and no heartbeat order (it
    /// cannot stamp in exchange time: its own clock may be days off the root's) and answers
    /// each request at once with a rejection, `Closed`; once synced, it sends them. Method:
    /// global FIFO; three orders at 1 ms, unsynced: three refusals, no hop, no heartbeat
    /// order in two heartbeat intervals, no timer left due; the gateway's probes answered;
    /// the next order goes up, stamped on the synced clock.
    #[test]
    fn orders_before_the_clock_syncs_are_refused() {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let mut config = NodeConfig::default();
        config.sequencer.kind = SequencerKind::GlobalFifo;
        let interval = config.sequencer.heartbeat_interval;
        let mut gateway = Gateway::new(id, plan, config, Delivery::Events).expect("gateway");
        let now = Instant::ZERO + Duration::from_millis(1);
        let ids: Vec<u64> = (0..3).map(|_| gateway.submit_order(now, buy())).collect();
        let mut refused = Vec::new();
        while let Some(event) = gateway.poll_event() {
            if let Event::OrderRefused {
                client_order_id,
                reason,
            } = event
            {
                assert_eq!(reason, order::RejectReason::Closed);
                refused.push(client_order_id);
            }
        }
        assert_eq!(refused, ids, "each refused at once");
        assert_eq!(gateway.counters().orders_refused, 3);
        let later = now + interval * 2;
        gateway.handle_timeout(later);
        assert_eq!(
            sent(&mut gateway, later),
            Vec::<u64>::new(),
            "nothing went up"
        );
        assert_eq!(gateway.order_heartbeats(), 0, "no heartbeat order unsynced");
        assert!(
            gateway.poll_timeout().expect("its timers") > later,
            "no timer left due"
        );
        let at = later + Duration::from_millis(1);
        assert_eq!(sync(&mut gateway, at), Vec::<u64>::new());
        let next = gateway.submit_order(at, buy());
        assert_eq!(sent(&mut gateway, at), vec![next], "synced, it sends");
        let stamp = gateway.unanswered[&next].generation.as_nanos();
        assert!(
            stamp.abs_diff(at.as_nanos()) < 1_000,
            "stamped on the synced clock"
        );
        gateway.check_invariants();
    }

    /// Goal: a strategy hears when the market opens to it: `on_open` comes once, after
    /// `on_start`, when the gateway's clock first syncs, and an order sent from it goes up
    /// (one sent from `on_start` is refused, `Closed`). Method: a strategy that sends one order
    /// from each callback and counts them; the gateway's probes answered until synced, then
    /// a few more rounds.
    #[test]
    fn the_strategy_hears_the_open_once_and_trades_from_it() {
        use std::sync::atomic::{AtomicU32, Ordering};
        struct Opens(Arc<(AtomicU32, AtomicU32, AtomicU32)>);
        impl Strategy for Opens {
            fn on_start(&mut self, ctx: &mut Ctx<'_>) {
                assert_eq!(self.0.1.load(Ordering::Relaxed), 0, "open after start");
                self.0.0.fetch_add(1, Ordering::Relaxed);
                ctx.send(buy());
            }
            fn on_open(&mut self, ctx: &mut Ctx<'_>) {
                self.0.1.fetch_add(1, Ordering::Relaxed);
                ctx.send(buy());
            }
            fn on_response(&mut self, _ctx: &mut Ctx<'_>, response: &OrderMsg) {
                if let OrderMsg::Rejected(r) = response {
                    assert_eq!(r.reason, order::RejectReason::Closed);
                    self.0.2.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let counts = Arc::new((AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)));
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let strategy = Delivery::Strategy(Box::new(Opens(Arc::clone(&counts))));
        let mut gateway = Gateway::new(id, plan, NodeConfig::default(), strategy).expect("gateway");
        let at = Instant::ZERO + Duration::from_millis(1);
        let up = sync(&mut gateway, at);
        assert_eq!(up.len(), 1, "the order sent at the open went up: {up:?}");
        for k in 1..4 {
            let later = at + Duration::from_millis(k);
            assert_eq!(sync(&mut gateway, later), Vec::<u64>::new());
        }
        let (started, opened, closed) = (
            counts.0.load(Ordering::Relaxed),
            counts.1.load(Ordering::Relaxed),
            counts.2.load(Ordering::Relaxed),
        );
        assert_eq!((started, opened, closed), (1, 1, 1));
    }

    /// Goal: a strategy hears of an order the gateway gives up on (no answer within three
    /// `parent_timeout`s: the root down, say), once, rather than waiting for ever. Method: a
    /// synced gateway with a strategy that sends one order at the open; nothing answers; time
    /// runs 0.5 s; `on_unanswered` names that order once, and it is counted; its answer then
    /// comes after all, counted `orders_answered_late`.
    #[test]
    fn the_strategy_hears_of_an_order_given_up_on() {
        use std::sync::Mutex;
        struct GivenUp(Arc<Mutex<Vec<u64>>>);
        impl Strategy for GivenUp {
            fn on_open(&mut self, ctx: &mut Ctx<'_>) {
                ctx.send(buy());
            }
            fn on_unanswered(&mut self, _ctx: &mut Ctx<'_>, client_order_id: u64) {
                self.0.lock().unwrap().push(client_order_id);
            }
        }
        let heard = Arc::new(Mutex::new(Vec::new()));
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let strategy = Delivery::Strategy(Box::new(GivenUp(Arc::clone(&heard))));
        let mut gateway = Gateway::new(id, plan, NodeConfig::default(), strategy).expect("gateway");
        let mut now = Instant::ZERO + Duration::from_millis(1);
        let up = sync(&mut gateway, now);
        assert_eq!(up.len(), 1, "the order went up: {up:?}");
        assert!(heard.lock().unwrap().is_empty());
        let end = now + Duration::from_millis(500);
        while now < end {
            now += Duration::from_millis(1);
            gateway.handle_timeout(now);
            while gateway.poll_transmit(now).is_some() {}
        }
        assert_eq!(*heard.lock().unwrap(), up, "told once, of that order");
        assert_eq!(gateway.core.counters.orders_unanswered, 1);
        gateway.check_invariants();
        // Its answer comes after all (the root was paused): counted as answered late.
        let canceled = order::Canceled {
            header: OrderHeader {
                client_order_id: up[0],
                participant_id: gateway.participant,
                gateway_id: id.0,
                time: ExchangeTime::from_nanos(now.as_nanos()),
            },
            orig_client_order_id: up[0],
            canceled_shares: 1,
            reason: order::CancelReason::UserRequested,
        };
        let mut buf = [0u8; wire::response::DATAGRAM_MAX];
        let len = wire::response::emit(&mut buf, 1, &canceled).expect("fits");
        let root = gateway.core.plan.root();
        // The root's answer to the gateway's "where does my stream start" (oldest 0).
        let status = Control::ResponseStatus {
            participant: gateway.participant,
            oldest: 0,
            next: 1,
        };
        let mut status_buf = [0u8; 64];
        let status_len = status.emit(&mut status_buf).expect("a status");
        gateway.handle_datagram(now, root, &status_buf[..status_len]);
        gateway.handle_datagram(now, root, &buf[..len]);
        assert_eq!(gateway.core.counters.responses, 1);
        assert_eq!(gateway.core.counters.orders_answered_late, 1);
        gateway.check_invariants();
    }

    /// Goal: an order whose first copy the full outbox refused is not lost: it waits for its
    /// answer like any order sent, and goes at its retry. Method: a synced gateway whose
    /// outbox holds two datagrams (a probe pair); two orders, the second refused by the
    /// outbox (counted); the outbox drained; after the retry timeout the second goes up, as
    /// attempt 1.
    #[test]
    fn an_order_the_full_outbox_refused_goes_at_its_retry() {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let config = NodeConfig {
            outbox_max: 2,
            ..NodeConfig::default()
        };
        let mut gateway = Gateway::new(id, plan, config, Delivery::Events).expect("gateway");
        let mut now = Instant::ZERO + Duration::from_millis(1);
        assert_eq!(sync(&mut gateway, now), Vec::<u64>::new());
        let full = |g: &Gateway| g.core.counters.dropped(DropReason::QueueFull);
        let before = full(&gateway);
        // The first order and the request for where its responses start fill the outbox.
        let first = gateway.submit_order(now, buy());
        let refused = gateway.submit_order(now, buy());
        assert_eq!(full(&gateway) - before, 1, "the second refused");
        assert_eq!(sent(&mut gateway, now), vec![first]);
        let end = now + gateway.retry_timeout() * 2;
        let mut again = Vec::new();
        while now < end {
            now += Duration::from_micros(100);
            gateway.handle_timeout(now);
            while let Some(t) = gateway.poll_transmit(now) {
                if let Ok(hop) = wire::hop::Hop::parse(t.payload) {
                    let message = OrderMsg::parse(hop.order).expect("an order");
                    again.push((message.header().client_order_id, hop.attempt));
                }
            }
        }
        assert!(again.contains(&(refused, 1)), "{again:?}");
        gateway.check_invariants();
    }

    /// Goal: without retries (`order_retry` 0), an order the full outbox refused is not
    /// dropped without a word: nothing would ever send it, so its participant is told at once
    /// (a rejection, `Busy`), counted. Method: as above with `order_retry` 0; the second
    /// order is refused with `Busy`, and nothing sends it later.
    #[test]
    fn without_retries_an_order_the_full_outbox_refused_is_rejected_at_once() {
        let mut gateway = outbox_of_two_without_retries();
        let mut now = Instant::ZERO + Duration::from_millis(1);
        assert_eq!(sync(&mut gateway, now), Vec::<u64>::new());
        while gateway.poll_event().is_some() {}
        let first = gateway.submit_order(now, buy());
        let refused = gateway.submit_order(now, buy());
        let mut events = Vec::new();
        while let Some(event) = gateway.poll_event() {
            match event {
                Event::OrderSent {
                    client_order_id, ..
                } => events.push((client_order_id, None)),
                Event::OrderRefused {
                    client_order_id,
                    reason,
                } => events.push((client_order_id, Some(reason))),
                _ => {}
            }
        }
        assert_eq!(
            events,
            [(first, None), (refused, Some(order::RejectReason::Busy))]
        );
        assert_eq!(gateway.counters().orders_refused_busy, 1);
        assert_eq!(gateway.counters().orders_refused, 0);
        assert_eq!(sent(&mut gateway, now), vec![first]);
        for _ in 0..100 {
            now += Duration::from_millis(1);
            gateway.handle_timeout(now);
            assert_eq!(sent(&mut gateway, now), Vec::<u64>::new(), "never sent");
        }
        gateway.check_invariants();
    }

    /// Goal: a market-data packet numbered beyond any real stream (corrupt or forged, from a
    /// parent's address) is dropped as malformed, not held, noted or counted on: numbered
    /// `u64::MAX`, one past it overflowed. Method: packets 1 and 2 from the home parent, one
    /// numbered `u64::MAX` and one whose messages are, between them; both dropped as
    /// malformed, and packet 3 after them is taken as the next.
    #[test]
    fn a_packet_numbered_beyond_any_stream_is_malformed() {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let parent = plan.home_parent(id).expect("a parent");
        let mut gateway =
            Gateway::new(id, plan, NodeConfig::default(), Delivery::Events).expect("gateway");
        let now = Instant::ZERO + Duration::from_millis(1);
        let packet = crate::repair::test_packet;
        gateway.handle_datagram(now, parent, &packet(1, 1, 2));
        gateway.handle_datagram(now, parent, &packet(2, 3, 2));
        gateway.handle_datagram(now, parent, &packet(u64::MAX, 5, 2));
        gateway.handle_datagram(now, parent, &packet(3, u64::MAX - 1, 2));
        gateway.handle_timeout(now + Duration::from_millis(5));
        assert_eq!(gateway.core.counters.dropped(DropReason::Malformed), 2);
        gateway.handle_datagram(now, parent, &packet(3, 5, 2));
        assert_eq!(gateway.core.counters.packets_new, 3);
        gateway.check_invariants();
    }

    /// Goal: a packet numbered a dedupe window or more ahead of the stream (forged or
    /// corrupt, from a parent's address) is dropped, not noted as ahead: noted, its gap was
    /// asked for and skipped to, and every real packet after it was too old; so is one a
    /// hold's capacity ahead, and one whose MoldUDP64 number comes too soon for its packet
    /// number (it would end the gap before it at once). After `parent_timeout` without a new
    /// packet, a far jump is taken. Method: packets 1 and 2; packet 2^62 (dropped
    /// `FarAhead`); packet 3 taken as the next and released; packet 100 numbered from 0
    /// (`Malformed`), packet 3 + `held_max` (`FarAhead`); packet 4 released; then, after a
    /// silence, a packet two windows ahead is not dropped as far ahead.
    #[test]
    fn a_packet_far_ahead_of_the_stream_is_dropped() {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let parent = plan.home_parent(id).expect("a parent");
        let config = NodeConfig {
            hold_and_release: false,
            ..NodeConfig::default()
        };
        let (quiet, window) = (config.parent_timeout, config.dedupe_window);
        let mut gateway = Gateway::new(id, plan, config, Delivery::Events).expect("gateway");
        let now = Instant::ZERO + Duration::from_millis(1);
        let packet = crate::repair::test_packet;
        gateway.handle_datagram(now, parent, &packet(1, 1, 2));
        gateway.handle_datagram(now, parent, &packet(2, 3, 2));
        gateway.handle_datagram(now, parent, &packet(1 << 62, 5, 2));
        let far = |g: &Gateway| g.core.counters.dropped(DropReason::FarAhead);
        assert_eq!(far(&gateway), 1);
        gateway.handle_datagram(now, parent, &packet(3, 5, 2));
        let released = |g: &mut Gateway| {
            let mut out = Vec::new();
            while let Some(event) = g.poll_event() {
                if let Event::Released(r) = event {
                    out.push(r.packet_seq);
                }
            }
            out
        };
        assert_eq!(released(&mut gateway), [1, 2, 3], "the stream goes on");
        // Packet 100 within the hold's reach, but starting at MoldUDP64 number 0, before
        // packet 4's 7: ending the gap before it at once, it would skip packets 4-99.
        gateway.handle_datagram(now, parent, &packet(100, 0, 2));
        assert_eq!(gateway.core.counters.dropped(DropReason::Malformed), 1);
        let held_max = gateway.core.config.held_max as u64;
        gateway.handle_datagram(now, parent, &packet(3 + held_max, 9_999, 2));
        assert_eq!(far(&gateway), 2, "a hold's worth ahead");
        gateway.handle_datagram(now, parent, &packet(4, 7, 2));
        assert_eq!(released(&mut gateway), [4]);
        let after = now + quiet;
        gateway.handle_datagram(after, parent, &packet(4 + 2 * window, 9_999_999, 2));
        assert_eq!(far(&gateway), 2, "taken after a silence");
        gateway.check_invariants();
    }

    /// Goal: a second failover before the first one's resends are all out leaves no order
    /// with neither a resend nor a retry. Method: ten unanswered orders 1 ms apart; a resend
    /// of all of them (the gateway's own failover: paced over 4.5 ms); then, before the
    /// older ones are due, its new parent's resend of the orders from the seventh on (the
    /// parent failed over too). Running the gateway's timers on for a retry timeout and a
    /// half, every order goes again at least once.
    #[test]
    fn a_second_failover_leaves_no_order_unsent() {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"));
        let id = NodeId(plan.gateways().start);
        let mut gateway =
            Gateway::new(id, plan, NodeConfig::default(), Delivery::Events).expect("gateway");
        let ms = Duration::from_millis(1);
        let mut now = Instant::ZERO + ms;
        assert_eq!(sync(&mut gateway, now), Vec::<u64>::new());
        let mut ids = Vec::new();
        for _ in 0..10 {
            ids.push(gateway.submit_order(now, buy()));
            now += ms;
        }
        assert_eq!(sent(&mut gateway, now), ids, "each went once");
        let stamps: Vec<ExchangeTime> = gateway.unanswered.values().map(|e| e.generation).collect();

        gateway.resend_unanswered(now, ExchangeTime::ZERO);
        let mut again: BTreeSet<u64> = sent(&mut gateway, now).into_iter().collect();
        assert_eq!(again.len(), 1, "paced: the oldest goes at once");
        now += ms;
        gateway.resend_unanswered(now, stamps[6]);
        again.extend(sent(&mut gateway, now));
        let end = now + gateway.retry_timeout().saturating_mul(3) / 2;
        while now < end {
            now += Duration::from_micros(100);
            gateway.handle_timeout(now);
            again.extend(sent(&mut gateway, now));
        }
        let missing: Vec<u64> = ids
            .iter()
            .filter(|id| !again.contains(id))
            .copied()
            .collect();
        assert!(missing.is_empty(), "never sent again: {missing:?}");
    }

    /// Goal: without retries (`order_retry` 0), a failover's resend that the full outbox
    /// refused is not lost: it goes once the outbox has drained (nothing else would send it,
    /// and its fate is unknown, so it cannot be refused to its participant). Method: an
    /// outbox of two; three orders sent; a resend of all three at once, the outbox filled
    /// before it; the gateway's timers run on while the outbox drains: every order goes
    /// again.
    #[test]
    fn without_retries_a_resend_the_full_outbox_refused_goes_later() {
        let mut gateway = outbox_of_two_without_retries();
        let id = gateway.core.id;
        let ms = Duration::from_millis(1);
        let mut now = Instant::ZERO + ms;
        assert_eq!(sync(&mut gateway, now), Vec::<u64>::new());
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(gateway.submit_order(now, buy()));
            sent(&mut gateway, now);
        }
        assert_eq!(gateway.unanswered.len(), 3);
        // Two datagrams fill the outbox before the resend.
        for _ in 0..2 {
            assert!(gateway.core.outbox.push(&[id], |buf| {
                buf[0] = 0;
                1
            }));
        }
        gateway.resend_unanswered(now, ExchangeTime::ZERO);
        let mut again: BTreeSet<u64> = sent(&mut gateway, now).into_iter().collect();
        for _ in 0..100 {
            now += Duration::from_micros(100);
            gateway.handle_timeout(now);
            again.extend(sent(&mut gateway, now));
        }
        assert_eq!(again, ids.into_iter().collect(), "each went again");
    }
}
