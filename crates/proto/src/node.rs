//! The sans-IO contract every Jasper node follows.
//!
//! A node is driven from outside, in the shape of quinn-proto's `Connection`:
//!
//! - **A. handlers** take `now` and an input and only change state:
//!   [`Node::handle_datagram`], [`Node::handle_timeout`], plus each role's commands
//!   (`Root::publish`, `Gateway::submit_order`, ...).
//! - **B. pollers** are drained after every handler, in this order, until each returns `None`:
//!   [`Node::poll_transmit`], [`Node::poll_timeout`], [`Node::poll_event`].
//! - **C. getters** take `&self` (stats, checkers).
//! - **D. [`Node::check_invariants`]** runs at the end of every handler in debug builds.
//!
//! `now` must never go backwards between calls on one node. Nodes name each other by
//! [`NodeId`]; the runtime maps ids to socket addresses from the cluster plan and drops
//! datagrams from addresses that are not in it, the simulator routes ids directly.

use wire::ExchangeTime;

use crate::time::Instant;

/// The id of a node in the cluster plan: the root is 0, then proxies layer by layer, then
/// gateways.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// One datagram to send, borrowed from the node's outbox: the same payload goes to every
/// destination in order (a fan-out maps onto one `sendmmsg` call).
#[must_use]
#[derive(Debug)]
pub struct Transmit<'a> {
    /// Where to send the payload, in the order the node wants them sent.
    pub destinations: &'a [NodeId],
    /// The datagram.
    pub payload: &'a [u8],
}

/// Why a node dropped a datagram or a message. Every drop is counted and raises an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// The bytes did not parse.
    Malformed,
    /// The sender is not a node this one expects to hear from.
    UnknownSender,
    /// A datagram kind this node does not handle (e.g. market data sent to the root).
    Unexpected,
    /// A second copy of a packet already seen (hedging sends H + 1 copies on purpose).
    Duplicate,
    /// Older than the dedupe window: it cannot be told apart from a duplicate.
    TooOld,
    /// A bounded queue was full.
    QueueFull,
    /// A packet from another MoldUDP64 session.
    WrongSession,
    /// An order a gateway sent in another's name (another participant or gateway): it would
    /// trade, and be answered, as someone else.
    Forged,
    /// An order (or, at a proxy, a heartbeat order) stamped further ahead of the node's
    /// synced clock than a synced gateway's stamp can be ([`crate::root::ORDER_AHEAD_MAX`]):
    /// its gateway's clock is not synced yet (another host's clock) or the stamp is made up.
    /// Sequenced, it would be the latest release and make every later order late; merged at a
    /// proxy, it would wait there and raise its child's promise.
    AheadOfClock,
    /// A market-data packet numbered a whole dedupe window or more ahead of the highest seen
    /// while the stream flowed ([`crate::dedupe::DedupeWindow::far_ahead`]): corrupt or
    /// forged. Taken, it would make every real packet after it too old.
    FarAhead,
}

/// Number of [`DropReason`] variants, for counter arrays.
pub const DROP_REASON_COUNT: usize = 10;

impl DropReason {
    /// Index into a counter array.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Something a node reports to its driver: protocol outcomes and metrics, never errors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    /// A gateway released a market-data packet to its participant (the point where fairness
    /// is measured).
    Released(Release),
    /// A datagram or message was dropped.
    Dropped {
        /// From whom.
        from: NodeId,
        /// Why.
        reason: DropReason,
    },
    /// A watched sibling stopped sending heartbeats.
    FailureDetected {
        /// The sibling that went silent.
        node: NodeId,
    },
    /// A sibling reported failed is heard from again.
    FailureCleared {
        /// The sibling that came back.
        node: NodeId,
    },
    /// A gateway found missing packets and asked for them: its parent proxy
    /// ([`crate::repair`]) or, after [`crate::gateway::GAP_ASKS_OF_PARENT`] requests, the
    /// root's rewinder.
    GapRequested {
        /// First missing MoldUDP64 message sequence number.
        sequence: u64,
        /// Number of missing messages.
        count: u16,
    },
    /// A gateway's or proxy's parent went silent (`parent_timeout`) and the node moved to
    /// another, or its home parent was heard again and the node moved back
    /// ([`crate::failover`]).
    ParentChanged {
        /// The silent parent.
        from: NodeId,
        /// The parent from now on.
        to: NodeId,
        /// Unanswered orders to go again to the new parent (gateways, which send them at twice
        /// their first pace; 0 on the way home).
        resent: u32,
    },
    /// A gateway gave up on missing packets the rewinder no longer holds and skipped them.
    GapSkipped {
        /// First skipped packet sequence number.
        first_packet_seq: u64,
        /// Number of packets skipped.
        packets: u64,
    },
    /// A gateway that joined the stream late, or skipped packets, asked the root for a book
    /// snapshot ([`crate::snapshot`]).
    SnapshotRequested {
        /// The snapshot must cover the live packets before this one (or it is the one being
        /// put together).
        packet_seq: u64,
        /// The first part asked for.
        part: u32,
    },
    /// A gateway had the whole snapshot and handed it to its participant.
    SnapshotApplied {
        /// The first packet not released before it: `[from, packet_seq)` are covered by
        /// the snapshot and never released (none if `from >= packet_seq`).
        from: u64,
        /// The first live packet it does not cover: the stream goes on from there.
        packet_seq: u64,
        /// Its parts.
        parts: u32,
        /// Resting orders in it.
        orders: u64,
        /// Held packets it covered, dropped (the others of `[from, packet_seq)` had not come).
        covered: u64,
    },
    /// A proxy or gateway took market data of another session from the layer above as a new
    /// stream ([`crate::config::session_of_start`]): the root was started again without its
    /// journal, and the old stream had been silent for `parent_timeout`. What it kept of the
    /// old stream is dropped.
    SessionStarted {
        /// The new session.
        session: wire::Session,
        /// The node had heard packets of its former session. If not, it had just started
        /// under the configured session and this is the first stream it hears, not a restart.
        heard_before: bool,
    },
    /// A gateway gave up on missing order responses ([`crate::responses`]) and skipped them.
    ResponsesSkipped {
        /// Responses skipped.
        count: u64,
    },
    /// A gateway sent an order request up the tree.
    OrderSent {
        /// Its client order id.
        client_order_id: u64,
        /// Its generation time (the gateway's exchange clock).
        generation: ExchangeTime,
    },
    /// A gateway refused an order of its participant, and the strategy got a rejection with
    /// `reason` at once: `Closed` when its clock has not synced yet (it cannot stamp in
    /// exchange time; nothing went up the tree), `Busy` when its outbox was full and
    /// `order_retry` is 0 (no retry would send it later).
    OrderRefused {
        /// Its client order id.
        client_order_id: u64,
        /// Why.
        reason: wire::order::RejectReason,
    },
    /// A gateway received a response to one of its participant's orders.
    OrderResponse {
        /// The client order id the response names (for cancels and replaces, the request's).
        client_order_id: u64,
        /// The client order id of the order whose state it changes (the original order of a
        /// cancel, the new id of a replace, else `client_order_id`).
        order: u64,
        /// The OUCH message type (`A`, `R`, `C`, `E`, `J`).
        msg_type: u8,
        /// Shares still open after it (executions), else 0.
        leaves_shares: u32,
    },
    /// The root's sequencer released an order to the matching engine, which processed it.
    Sequenced(Sequenced),
    /// The root moved its release-deadline offset after a new OWD report.
    DeadlineOffset {
        /// The maximum reported OWD percentile, nanoseconds.
        max_owd_ns: u64,
    },
}

/// An order the root's engine processed, for the inbound metrics (DESIGN.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequenced {
    /// Owner.
    pub participant: u32,
    /// Its client order id.
    pub client_order_id: u64,
    /// The OUCH request type (`O` enter, `U` replace, `X` cancel).
    pub msg_type: u8,
    /// Generation time at the gateway.
    pub generation: ExchangeTime,
    /// When it reached the root.
    pub arrived: ExchangeTime,
    /// When the sequencer released it to the engine.
    pub sequenced: ExchangeTime,
    /// Side and limit price of an enter (market orders: 0 / `u32::MAX`).
    pub side: Option<wire::Side>,
    /// Limit price, ITCH units.
    pub price: u32,
    /// Shares asked.
    pub shares: u32,
    /// Shares it took from the book on arrival (as a taker).
    pub filled: u32,
    /// Accepted (not rejected) by the engine.
    pub accepted: bool,
}

/// A packet released by a gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// Dense packet sequence number of the stream.
    pub packet_seq: u64,
    /// MoldUDP64 sequence number of the packet's Jasper header message: the next packet's is
    /// this plus `messages` plus one, so two of them tell how many messages lie between.
    pub sequence: u64,
    /// ITCH messages in the packet (0 for the root's idle packets). DESIGN.md §5's metrics
    /// are per message: every message of a packet shares its times.
    pub messages: u16,
    /// The root's send time.
    pub send_time: ExchangeTime,
    /// The release deadline the root set.
    pub deadline: ExchangeTime,
    /// When the first copy arrived, in this gateway's exchange time.
    pub received: ExchangeTime,
    /// When it was released, in this gateway's exchange time.
    pub released: ExchangeTime,
    /// When the first copy arrived, on the gateway's local clock.
    pub received_local: Instant,
    /// Arrived after its deadline, and so released on arrival (a recovered packet that came
    /// before its deadline is held to it, and is not late).
    pub late: bool,
    /// Recovered: retransmitted by a parent proxy's repair ring or the root's rewinder.
    pub recovered: bool,
    /// A part of a book snapshot ([`crate::snapshot`]), handed to the participant before the
    /// stream it precedes (`packet_seq` is the first live packet it does not cover); never
    /// an [`Event::Released`].
    pub snapshot: bool,
}

/// The interface every node role implements; see the module docs for the calling rules.
pub trait Node {
    /// This node's id in the plan.
    fn id(&self) -> NodeId;

    /// A datagram arrived from `from`.
    fn handle_datagram(&mut self, now: Instant, from: NodeId, bytes: &[u8]);

    /// The time [`Node::poll_timeout`] returned has come (it may be called early or late).
    fn handle_timeout(&mut self, now: Instant);

    /// The next datagram to send, borrowed until the next call on this node.
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>>;

    /// When [`Node::handle_timeout`] should next be called, if ever.
    fn poll_timeout(&self) -> Option<Instant>;

    /// The next event for the driver.
    fn poll_event(&mut self) -> Option<Event>;

    /// Asserts the node's invariants; cheap enough to run after every handler in tests.
    fn check_invariants(&self);
}
