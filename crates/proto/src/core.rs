//! State and plumbing every node role shares: identity, plan, outbox, event queue, counters
//! and the timer table.

use std::collections::VecDeque;
use std::sync::Arc;

use wire::Emit;

use crate::config::NodeConfig;
use crate::node::{DROP_REASON_COUNT, DropReason, Event, NodeId};
use crate::outbox::Outbox;
use crate::plan::{Plan, Role};
use crate::time::Instant;

/// The largest packet or message number a node takes from market data. A stream counting
/// from 1 at ten million a second takes ~14,600 years to get there, so a packet numbered
/// beyond it is corrupt or forged: dropped as malformed, it cannot overflow what a node works
/// out from its numbers (the packet after it, the end of its message range).
pub(crate) const SEQUENCE_MAX: u64 = 1 << 62;

/// Parses a market-data datagram of at most [`wire::mold::PAYLOAD_MAX`] bytes (what the root
/// builds: a longer one is corrupt or forged, and would not fit the outbox's buffers it is
/// forwarded or kept through) whose numbers are at most [`SEQUENCE_MAX`].
pub(crate) fn parse_market_data(bytes: &[u8]) -> Option<wire::MarketData<'_>> {
    if bytes.len() > wire::mold::PAYLOAD_MAX {
        return None;
    }
    wire::parse_market_data(bytes).ok().filter(|data| {
        data.header.packet_seq <= SEQUENCE_MAX && data.mold.sequence() <= SEQUENCE_MAX
    })
}

/// Whether a proxy or gateway takes market data of another session than its own, from the
/// layer above, as a new stream ([`crate::config::session_of_start`]: a root started again
/// without its journal): only once its own stream has been silent for `quiet`
/// (`parent_timeout`; the old root is gone), so that a stale or forged packet of another
/// session cannot cut a live stream off, and only a first transmission (a retransmission or
/// a snapshot's part answers a request of the old session), and only a session name a root
/// can have ([`wire::Session::is_well_formed`]: a hostile-input sweep's corrupting relay made
/// a gateway take `JASP904\xc9D8`).
pub(crate) fn takes_new_session(
    dedupe: &crate::dedupe::DedupeWindow,
    now: Instant,
    quiet: core::time::Duration,
    data: &wire::MarketData<'_>,
) -> bool {
    let header = &data.header;
    !header.is_retransmission()
        && !header.is_snapshot()
        && data.session().is_well_formed()
        && dedupe.silent_for(now, quiet)
}

/// What a node counts. Every drop has a counter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Datagrams handed to the node.
    pub datagrams_in: u64,
    /// Drops by [`DropReason::index`].
    pub drops: [u64; DROP_REASON_COUNT],
    /// Market-data packets seen for the first time.
    pub packets_new: u64,
    /// Datagram copies queued for sending (a fan-out of F counts F).
    pub copies_out: u64,
    /// Packets a gateway released.
    pub released: u64,
    /// Of those, released after their deadline.
    pub late: u64,
    /// Of those, recovered (retransmitted by a parent proxy or the root).
    pub recovered: u64,
    /// Retransmission requests sent (gateway) or packets sent in answer (root, proxy).
    pub retransmissions: u64,
    /// Retransmission requests a proxy sent its parent for packets its children asked for
    /// and it lacked ([`crate::repair`]).
    pub repair_asks: u64,
    /// Packets a gateway skipped because nobody could retransmit them.
    pub skipped: u64,
    /// Book snapshots a gateway applied ([`crate::snapshot`]).
    pub snapshots: u64,
    /// Events dropped because the event queue was full.
    pub events_lost: u64,
    /// Orders received from children (proxy, root).
    pub orders_in: u64,
    /// Orders sent up (gateway, proxy).
    pub orders_out: u64,
    /// Order responses delivered (gateway) or sent (root).
    pub responses: u64,
    /// Requests for missing responses a gateway sent ([`crate::responses`]).
    pub response_gaps: u64,
    /// Responses a gateway gave up on: the root no longer held them, or (without response
    /// recovery) a later one came first.
    pub responses_lost: u64,
    /// Unanswered orders a gateway sent again to a new parent after a failover.
    pub orders_resent: u64,
    /// Orders a gateway sent again because no answer came within their retry timeout
    /// ([`crate::config::NodeConfig::order_retry`]).
    pub orders_retried: u64,
    /// Orders a gateway stopped waiting for, unanswered (their fate is unknown to it).
    pub orders_unanswered: u64,
    /// Of those, the ones answered after all (executed: the root was paused or cut off
    /// longer than the gateway waits); the rest never reached the engine, or their answers
    /// are still to come.
    pub orders_answered_late: u64,
    /// Orders a gateway refused before its clock had synced, answered at once with a
    /// rejection (`Closed`): it could not stamp them in exchange time.
    pub orders_refused: u64,
    /// Orders a gateway could not send, its outbox full, with no retry to send them later
    /// (`order_retry` 0), answered at once with a rejection (`Busy`). The copy's drop is
    /// counted too (`QueueFull`).
    pub orders_refused_busy: u64,
    /// Orders a receiver-hedged gateway did not send because its twin had sent them first:
    /// their answers had come already, and its strategy got them at once ([`crate::twin`]).
    pub orders_answered_early: u64,
    /// Answers to its twin's orders a gateway kept for orders its strategy never asked for
    /// (or not within [`crate::twin::EARLY_KEEP`]): the twins' strategies took different
    /// courses.
    pub answers_unclaimed: u64,
    /// Orders the root's engine processed.
    pub sequenced: u64,
    /// Fills the root's engine made.
    pub fills: u64,
}

impl Counters {
    /// Drops for one reason.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// Drops for every reason.
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// The timers a node may arm; each role uses some of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Send the next clock-probe pair to the home parent.
    ClockProbe,
    /// Send an OWD report to the home parent.
    Report,
    /// Send a heartbeat to the watched sibling.
    Heartbeat,
    /// Check the watched sibling's heartbeats.
    HeartbeatCheck,
    /// Release the head of the hold queue.
    Release,
    /// Ask the rewinder for a gap.
    Gap,
    /// The root sends a header-only packet on an idle stream.
    IdlePacket,
    /// Send the next queued order up (pacing).
    Pacing,
    /// Send pacing feedback to children.
    Feedback,
    /// Release orders from the sequencer.
    Sequencer,
    /// Wake the strategy.
    Wakeup,
    /// Send a heartbeat order up an idle order path (global-FIFO sequencer).
    OrderHeartbeat,
    /// Send the next orders due again after a failover (gateway).
    Resend,
    /// Send again the orders unanswered for their retry timeout (gateway).
    OrderRetry,
    /// Ask the root for missing responses, or give up on them (gateway).
    ResponseGap,
    /// Tell quiet participants' gateways the number of their next response (root).
    ResponseStatus,
}

/// The probe id of a probe to a home parent the node is away from
/// ([`Core::send_probe_pair`]); [`crate::clock::ClockSync`] numbers its own from 1.
pub(crate) const HOME_PROBE_ID: u64 = 0;

const TIMER_COUNT: usize = 16;
const _: () = assert!(Timer::ResponseStatus as usize + 1 == TIMER_COUNT);

/// A fixed table of timers (quinn-proto `TimerTable`): each timer's deadline in ns, or
/// [`STOPPED`]. Two cache lines: a node reads the whole table after every handler (for its
/// next timeout), and as `[Option<Instant>; 16]` it was five lines, a tenth of the simulator's
/// cache misses at N = 1000 (`docs/results/sim-speed.md`, session 27).
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
pub(crate) struct TimerTable([u64; TIMER_COUNT]);

/// A stopped timer. A timer armed for [`Instant::MAX`] (a deadline that saturated) is kept
/// 1 ns before it, so that it still reads as armed; neither is ever reached.
const STOPPED: u64 = u64::MAX;

impl Default for TimerTable {
    fn default() -> Self {
        Self([STOPPED; TIMER_COUNT])
    }
}

impl TimerTable {
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.0[timer as usize] = at.as_nanos().min(STOPPED - 1);
    }

    pub(crate) fn stop(&mut self, timer: Timer) {
        self.0[timer as usize] = STOPPED;
    }

    /// Arms `timer` for `at`, or stops it when there is nothing to wait for.
    pub(crate) fn arm(&mut self, timer: Timer, at: Option<Instant>) {
        match at {
            Some(at) => self.set(timer, at),
            None => self.stop(timer),
        }
    }

    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        let at = self.0[timer as usize];
        (at != STOPPED).then(|| Instant::from_nanos(at))
    }

    /// Whether `timer` is armed and due at `now`; disarms it if so.
    pub(crate) fn expire(&mut self, timer: Timer, now: Instant) -> bool {
        let at = &mut self.0[timer as usize];
        if *at != STOPPED && *at <= now.as_nanos() {
            *at = STOPPED;
            true
        } else {
            false
        }
    }

    pub(crate) fn next(&self) -> Option<Instant> {
        let at = self.0.iter().copied().min().unwrap_or(STOPPED);
        (at != STOPPED).then(|| Instant::from_nanos(at))
    }
}

/// The shared part of every node.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) id: NodeId,
    pub(crate) plan: Arc<Plan>,
    /// Shared by the nodes a driver builds from one configuration (a simulated gateway
    /// reads a dozen of its fields per datagram: shared, they stay in cache).
    pub(crate) config: Arc<NodeConfig>,
    pub(crate) session: wire::Session,
    pub(crate) outbox: Outbox,
    pub(crate) events: VecDeque<Event>,
    pub(crate) counters: Counters,
    pub(crate) timers: TimerTable,
}

impl Core {
    pub(crate) fn new(
        id: NodeId,
        plan: Arc<Plan>,
        config: Arc<NodeConfig>,
    ) -> Result<Self, String> {
        if plan.node(id).is_none() {
            return Err(format!("node {} is not in the plan", id.0));
        }
        let session = config.session()?;
        Ok(Self {
            id,
            plan,
            outbox: Outbox::new(config.outbox_max),
            // Drivers drain events after every handler, so the queue rarely holds more than a
            // few; it grows to `events_max` only on demand (1024 preallocated events cost
            // ~80 KB per node, 0.9 GB of a simulated N = 10,000 tree).
            events: VecDeque::new(),
            session,
            config,
            counters: Counters::default(),
            timers: TimerTable::default(),
        })
    }

    pub(crate) fn event(&mut self, event: Event) {
        if self.events.len() >= self.config.events_max {
            self.counters.events_lost += 1;
            return;
        }
        self.events.push_back(event);
    }

    pub(crate) fn drop_datagram(&mut self, from: NodeId, reason: DropReason) {
        self.counters.drops[reason.index()] += 1;
        self.event(Event::Dropped { from, reason });
    }

    /// Accepts an inbound hop datagram from a node of `layer` (a proxy's children, the root's
    /// layer-1 proxies): the envelope and the order inside must parse. Otherwise counts the
    /// drop and returns `None`; an accepted one counts as an order in.
    pub(crate) fn accept_hop<'a>(
        &mut self,
        from: NodeId,
        layer: u32,
        bytes: &'a [u8],
    ) -> Option<(wire::hop::Hop<'a>, wire::order::Repr)> {
        if self.plan.node(from).map(|n| n.layer) != Some(layer) {
            self.drop_datagram(from, DropReason::UnknownSender);
            return None;
        }
        let Ok(hop) = wire::hop::Hop::parse(bytes) else {
            self.drop_datagram(from, DropReason::Malformed);
            return None;
        };
        let Ok(message) = wire::order::Repr::parse(hop.order) else {
            self.drop_datagram(from, DropReason::Malformed);
            return None;
        };
        // A gateway speaks for its own participant only (the proxies above it pass on what
        // its parent checked here).
        if let Some(spec) = self.plan.node(from).filter(|n| n.role == Role::Gateway) {
            let header = message.header();
            if spec.participant != Some(header.participant_id) || header.gateway_id != from.0 {
                self.drop_datagram(from, DropReason::Forged);
                return None;
            }
        }
        self.counters.orders_in += 1;
        Some((hop, message))
    }

    /// Queues `bytes` to every destination; counts a drop if the outbox is full or `bytes`
    /// is longer than a datagram (callers send what they parsed or built, so never).
    pub(crate) fn send_bytes(&mut self, destinations: &[NodeId], bytes: &[u8]) {
        let queued = bytes.len() <= crate::outbox::DATAGRAM_MAX
            && self.outbox.push(destinations, |buf| {
                buf[..bytes.len()].copy_from_slice(bytes);
                bytes.len()
            });
        self.count_send(queued, destinations.len());
    }

    /// Queues one emitted message to `destination`.
    pub(crate) fn send_message(&mut self, destination: NodeId, message: &impl Emit) {
        let queued = self
            .outbox
            .push(&[destination], |buf| message.emit(buf).unwrap_or(0));
        self.count_send(queued, 1);
    }

    /// Queues one emitted message ahead of queued data (clock probes and replies).
    pub(crate) fn send_urgent(&mut self, destination: NodeId, message: &impl Emit) {
        let queued = self
            .outbox
            .push_urgent(&[destination], |buf| message.emit(buf).unwrap_or(0));
        self.count_send(queued, 1);
    }

    fn count_send(&mut self, queued: bool, copies: usize) {
        if queued {
            self.counters.copies_out += copies as u64;
        } else {
            let id = self.id;
            self.drop_datagram(id, DropReason::QueueFull);
        }
    }
}

impl Core {
    /// Sends the next clock-probe pair to `parent` and re-arms the probe timer. With `home`
    /// (a node away from its plan's parent), one more probe goes there, id
    /// [`HOME_PROBE_ID`]: its reply says whether home is back and its clock converged
    /// ([`crate::failover`]); the clock never uses it.
    pub(crate) fn send_probe_pair(
        &mut self,
        now: Instant,
        clock: &mut crate::clock::ClockSync,
        parent: NodeId,
        home: Option<NodeId>,
    ) {
        let exchange = clock.to_exchange(now);
        for (pair_index, (probe_id, _)) in clock.start_pair(now).into_iter().enumerate() {
            let probe = wire::control::Repr::ClockProbe {
                probe_id,
                pair_index: pair_index as u8,
                sender: self.id.0,
                t_send: exchange,
            };
            self.send_urgent(parent, &probe);
        }
        // After the pair, not before: the pair's send time is `now`, and a copy sent ahead
        // of it would delay it by a send cost and bias the offset by half of that (1.1 µs
        // in the simulator).
        if let Some(home) = home {
            let probe = wire::control::Repr::ClockProbe {
                probe_id: HOME_PROBE_ID,
                pair_index: 0,
                sender: self.id.0,
                t_send: exchange,
            };
            self.send_urgent(home, &probe);
        }
        self.timers.set(Timer::ClockProbe, clock.next_probe());
    }

    /// Answers a child's clock probe with this node's exchange time (`None`: its clock has
    /// not converged even once, and the reply, flagged `unsynced`, only tells the child it is
    /// alive) and whether its clock has converged
    /// ([`crate::clock::ClockSync::is_converged`]).
    pub(crate) fn answer_probe(
        &mut self,
        here: Option<wire::ExchangeTime>,
        converged: bool,
        to: NodeId,
        probe_id: u64,
        pair_index: u8,
        t_send: wire::ExchangeTime,
    ) {
        let stamp = here.unwrap_or(wire::ExchangeTime::ZERO);
        let reply = wire::control::Repr::ClockReply {
            probe_id,
            pair_index,
            responder: self.id.0,
            t1_send: t_send,
            t2_recv: stamp,
            t3_send: stamp,
            converged,
            unsynced: here.is_none(),
        };
        self.send_urgent(to, &reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the table reads as the `[Option<Instant>; 16]` it replaced: an armed timer is
    /// `Some` (even one armed for the end of time), a stopped one `None`, `expire` fires
    /// only when due, and `next` is the earliest armed deadline.
    #[test]
    fn the_timer_table_reads_as_a_table_of_options() {
        let at = Instant::from_nanos;
        let mut table = TimerTable::default();
        assert_eq!(table.next(), None);
        assert!(!table.expire(Timer::Release, Instant::MAX));
        table.set(Timer::Release, at(500));
        table.arm(Timer::Report, Some(at(300)));
        table.set(Timer::ResponseStatus, Instant::MAX);
        assert_eq!(table.get(Timer::Release), Some(at(500)));
        assert!(table.get(Timer::ResponseStatus).is_some());
        assert_eq!(table.get(Timer::Gap), None);
        assert_eq!(table.next(), Some(at(300)));
        assert!(!table.expire(Timer::Report, at(299)));
        assert!(table.expire(Timer::Report, at(300)));
        assert!(!table.expire(Timer::Report, at(300)), "fires once");
        assert_eq!(table.next(), Some(at(500)));
        table.arm(Timer::Release, None);
        assert_eq!(table.get(Timer::Release), None);
        assert!(table.next().is_some_and(|next| next > at(1 << 62)));
        table.stop(Timer::ResponseStatus);
        assert_eq!(table.next(), None);
        assert_eq!(size_of::<TimerTable>(), 128, "two cache lines");
    }
}
