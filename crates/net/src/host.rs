//! A host: one unchanged `proto` node, its socket, its clock and its counters, driven one
//! turn at a time (STYLE.md §2.7, quinn's `drive_timer`/`drive_transmit`).
//!
//! A turn gets the true time read once by the [`crate::Runtime`], converts it to the node's
//! local `now` through its [`NodeClock`] (a batch of received datagrams is stamped again
//! when its `recvmmsg` returns, so a preempted thread never dates its input in the past),
//! then:
//!
//! 1. *inputs*: takes a batch of datagrams (`recvmmsg`), maps each source address to a
//!    [`NodeId`] through the [`AddrBook`] (unknown sources and truncated datagrams are counted
//!    and dropped here, before the node sees them) and calls `handle_datagram`; or, when the
//!    node's deadline has come, `handle_timeout`; and, when its [`Hook`] asked for it, the
//!    hook's commands (the root's `publish`);
//! 2. *pollers*, in the contract's order: every `poll_transmit` (one `sendmmsg` per
//!    transmit) while the socket takes them (the copies it refuses with `EAGAIN` are held,
//!    [`crate::socket::Held`], and sent before the next transmit), then `poll_timeout`
//!    (converted back to true time for the runtime's timer), then every `poll_event` to the
//!    caller's [`EventSink`].

use std::any::Any;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use proto::{Counters, Event, Gateway, Instant, Node, NodeId, Proxy, Root};

use crate::addr::AddrBook;
use crate::clock::NodeClock;
use crate::socket::{Held, RECV_BATCH, RecvBatch, SendBatch, SendOutcome, Socket};

/// `recvmmsg` batches one input turn takes from one socket at most, so that one busy socket
/// cannot starve the others of a runtime (epoll is level-triggered: the rest waits a turn).
pub const RECV_ROUNDS_MAX: usize = 8;

/// In debug builds a host runs the node's `check_invariants` every this many turns (some
/// checks are O(n), too slow for every turn of a live node).
pub const INVARIANTS_PERIOD: u32 = 4096;

/// A node role the runtime can drive: a [`Node`] with counters.
pub trait Role: Node + 'static {
    /// The role's name, for logs.
    const KIND: &'static str;
    /// What the node counted.
    fn counters(&self) -> &Counters;
}

impl Role for Root {
    const KIND: &'static str = "root";
    fn counters(&self) -> &Counters {
        Self::counters(self)
    }
}

impl Role for Proxy {
    const KIND: &'static str = "proxy";
    fn counters(&self) -> &Counters {
        Self::counters(self)
    }
}

impl Role for Gateway {
    const KIND: &'static str = "gateway";
    fn counters(&self) -> &Counters {
        Self::counters(self)
    }
}

/// Commands issued to a node from inside the loop: the root's market-data feed (later its
/// matching engine), a gateway's order flow.
pub trait Hook<N>: 'static {
    /// Runs once when the host starts and then whenever the time it last returned has come,
    /// after the turn's inputs and before the pollers are drained; returns when it next
    /// wants to run (`None`: never again).
    fn on_turn(&mut self, now: Instant, node: &mut N) -> Option<Instant>;
}

/// The hook of a node that takes no commands.
#[derive(Clone, Copy, Debug, Default)]
pub struct Idle;

impl<N> Hook<N> for Idle {
    fn on_turn(&mut self, _now: Instant, _node: &mut N) -> Option<Instant> {
        None
    }
}

/// Where a runtime sends every node's events: the caller's progress display, recorder or
/// checker.
pub trait EventSink {
    /// `node` raised `event` at its local time `now`.
    fn on_event(&mut self, node: NodeId, now: Instant, event: &Event);
}

impl<F: FnMut(NodeId, Instant, &Event)> EventSink for F {
    fn on_event(&mut self, node: NodeId, now: Instant, event: &Event) {
        self(node, now, event);
    }
}

/// What the runtime counted for one host (the node counts its own protocol drops).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetCounters {
    /// Datagrams received from the socket (every one, including those dropped here).
    pub datagrams_in: u64,
    /// Bytes of those.
    pub bytes_in: u64,
    /// Datagram copies the kernel took for sending.
    pub datagrams_out: u64,
    /// Bytes of those.
    pub bytes_out: u64,
    /// Datagrams from addresses not in the plan, dropped before the node.
    pub unknown_source: u64,
    /// The address of the first of those (a node running another config, most often).
    pub first_unknown_source: Option<std::net::SocketAddr>,
    /// Datagrams longer than the receive slot, dropped before the node.
    pub truncated: u64,
    /// Datagrams dropped on purpose before the node ([`Host::set_loss`], a drill).
    pub lost_on_purpose: u64,
    /// Copies the socket refused (`EAGAIN`, send buffer full): held and sent again once it
    /// drained, not dropped (one refused twice counts twice).
    pub send_held: u64,
    /// Copies dropped on `ENOBUFS`.
    pub send_no_buffers: u64,
    /// Copies dropped on any other send error.
    pub send_other_errors: u64,
    /// Copies to ids with no address.
    pub send_no_route: u64,
    /// `recvmmsg` calls that failed with something other than "nothing waiting".
    pub recv_errors: u64,
    /// `sendmmsg` fan-outs (one per transmit).
    pub transmits: u64,
    /// `handle_timeout` calls.
    pub timeouts: u64,
    /// Hook turns.
    pub hook_turns: u64,
}

impl NetCounters {
    /// Copies that were dropped unsent, for any reason (held ones are not).
    pub fn send_errors(&self) -> u64 {
        self.send_no_buffers + self.send_other_errors + self.send_no_route
    }

    fn count_send(&mut self, outcome: &SendOutcome, len: usize) {
        self.datagrams_out += outcome.sent as u64;
        self.bytes_out += (outcome.sent * len) as u64;
        self.send_held += outcome.would_block as u64;
        self.send_no_buffers += outcome.no_buffers as u64;
        self.send_other_errors += outcome.other_errors as u64;
        self.send_no_route += outcome.no_route as u64;
    }
}

/// A read-only view of a host of any role, for status lines and summaries.
pub trait HostView {
    /// The node's id.
    fn id(&self) -> NodeId;
    /// The node's name in the cluster config.
    fn name(&self) -> &str;
    /// The node's role ([`Role::KIND`]).
    fn kind(&self) -> &'static str;
    /// The runtime's counters for this host.
    fn net_counters(&self) -> &NetCounters;
    /// The node's own counters.
    fn node_counters(&self) -> &Counters;
    /// The host, for downcasting to `Host<N, H>`.
    fn as_any(&self) -> &dyn Any;
}

/// One node with its socket, clock, address book and hook.
pub struct Host<N, H = Idle> {
    node: N,
    hook: H,
    name: String,
    socket: Socket,
    clock: NodeClock,
    book: Arc<AddrBook>,
    counters: NetCounters,
    /// The node's `poll_timeout`, in true time.
    node_deadline: Option<u64>,
    /// When the hook wants its next turn, in true time.
    hook_deadline: Option<u64>,
    turns: u32,
    /// Received datagrams dropped on purpose ([`Host::set_loss`]).
    loss: Option<Loss>,
    /// Copies the socket refused, sent before the node's next datagram.
    held: Held,
    /// When to try the held copies again, in true time.
    held_retry_at: Option<u64>,
}

/// How long a host waits before it offers copies the socket refused (`EAGAIN`) again: about
/// what a 10 Gb/s NIC takes to drain 64 KB of its send buffer.
const HELD_RETRY_NS: u64 = 50_000;

/// User-space loss on receipt: `tc netem` without root, for drills of the recovery paths.
struct Loss {
    probability: f64,
    rng: rand_chacha::ChaCha8Rng,
}

impl<N: Role + core::fmt::Debug, H> core::fmt::Debug for Host<N, H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.name)
            .field("addr", &self.socket.local_addr())
            .field("clock", &self.clock)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl<N: Role, H: Hook<N>> Host<N, H> {
    /// A host for `node` on `socket`, whose source addresses are resolved with `book`.
    pub fn new(
        node: N,
        hook: H,
        name: impl Into<String>,
        socket: Socket,
        clock: NodeClock,
        book: Arc<AddrBook>,
    ) -> Self {
        assert!(
            book.addr(node.id()).is_some(),
            "node {} is not in the address book",
            node.id().0
        );
        Self {
            node,
            hook,
            name: name.into(),
            socket,
            clock,
            book,
            counters: NetCounters::default(),
            node_deadline: None,
            // The hook's first turn comes with the host's first.
            hook_deadline: Some(0),
            turns: 0,
            loss: None,
            held: Held::default(),
            held_retry_at: None,
        }
    }

    /// Drops each datagram this host receives with `probability` (0 to 1), drawn from a
    /// generator seeded with `seed`, before the node sees it (counted in
    /// [`NetCounters::lost_on_purpose`]): loss in user space, to drill the recovery paths on
    /// real sockets. Zero turns it off.
    pub fn set_loss(&mut self, probability: f64, seed: u64) {
        use rand::SeedableRng;
        self.loss = (probability > 0.0).then(|| Loss {
            probability: probability.min(1.0),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
        });
    }

    /// The node. Commands belong in the [`Hook`], which runs inside the loop with the
    /// loop's `now`; outside a run, use this for getters.
    pub fn node(&self) -> &N {
        &self.node
    }

    /// The node, mutably (between runs only; the pollers are drained at the next turn).
    pub fn node_mut(&mut self) -> &mut N {
        &mut self.node
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The hook, mutably.
    pub fn hook_mut(&mut self) -> &mut H {
        &mut self.hook
    }

    /// The node's clock.
    pub fn clock(&self) -> NodeClock {
        self.clock
    }

    /// The socket.
    pub fn socket(&self) -> &Socket {
        &self.socket
    }

    /// Feeds every waiting datagram (up to [`RECV_ROUNDS_MAX`] batches) to the node, then
    /// drains its pollers; returns the number of datagrams taken from the socket.
    fn input(&mut self, now_ns: u64, io: &mut Io, sink: &mut dyn EventSink) -> usize {
        let mut local = self.clock.local(now_ns);
        let mut total = 0;
        for _ in 0..RECV_ROUNDS_MAX {
            let Ok(n) = io.recv.recv(&self.socket) else {
                self.counters.recv_errors += 1;
                break;
            };
            if n > 0 {
                // Stamp a batch when its syscall returns, not at the turn's clock read: a
                // thread preempted in between would otherwise see its datagrams arrive in the
                // past (the root's sequencer would then release orders before d_s, and OWD
                // samples would come out short). One more clock read per non-empty batch.
                local = self.clock.local(now_ns.max(crate::clock::now_ns()));
            }
            for i in 0..n {
                let datagram = io.recv.get(i);
                self.counters.datagrams_in += 1;
                self.counters.bytes_in += datagram.bytes.len() as u64;
                if datagram.truncated {
                    self.counters.truncated += 1;
                    continue;
                }
                let Some(from) = datagram.from.and_then(|a| self.book.id_of(&a)) else {
                    self.counters.unknown_source += 1;
                    if self.counters.first_unknown_source.is_none() {
                        self.counters.first_unknown_source = datagram.from;
                    }
                    continue;
                };
                if let Some(loss) = self.loss.as_mut()
                    && rand::Rng::gen_bool(&mut loss.rng, loss.probability)
                {
                    self.counters.lost_on_purpose += 1;
                    continue;
                }
                self.node.handle_datagram(local, from, datagram.bytes);
            }
            total += n;
            if n < RECV_BATCH {
                break;
            }
        }
        if total > 0 {
            self.drain(now_ns, local, io, sink);
        }
        total
    }

    /// Runs whatever is due at `now_ns` (the node's timeout, the hook), then drains.
    fn wake(&mut self, now_ns: u64, io: &mut Io, sink: &mut dyn EventSink) {
        let local = self.clock.local(now_ns);
        if self.node_deadline.is_some_and(|at| at <= now_ns) {
            self.counters.timeouts += 1;
            self.node.handle_timeout(local);
        }
        if self.hook_deadline.is_some_and(|at| at <= now_ns) {
            self.counters.hook_turns += 1;
            let next = self.hook.on_turn(local, &mut self.node);
            // A hook asking for `now` again would spin: its next turn is at least 1 ns on.
            self.hook_deadline = next.map(|at| self.clock.true_at(at).max(now_ns + 1));
        }
        self.drain(now_ns, local, io, sink);
    }

    /// Drains the pollers in the contract's order. Transmits only while the socket takes them:
    /// the first one it refuses is held ([`Held`]) and offered again after [`HELD_RETRY_NS`],
    /// before any other, and the node's later datagrams wait in its outbox meanwhile.
    fn drain(&mut self, now_ns: u64, local: Instant, io: &mut Io, sink: &mut dyn EventSink) {
        let held_len = self.held.payload_len();
        if let Some(outcome) = self.held.retry(&mut io.send, &self.socket, &self.book) {
            self.counters.count_send(&outcome, held_len);
        }
        while self.held.is_empty()
            && let Some(transmit) = self.node.poll_transmit(local)
        {
            let outcome = io.send.send(
                &self.socket,
                transmit.payload,
                &self.book,
                transmit.destinations,
            );
            self.counters.transmits += 1;
            self.counters.count_send(&outcome, transmit.payload.len());
            self.held.keep(
                transmit.payload,
                transmit.destinations,
                &outcome,
                &self.book,
            );
        }
        self.held_retry_at = (!self.held.is_empty()).then_some(now_ns + HELD_RETRY_NS);
        self.node_deadline = self.node.poll_timeout().map(|at| self.clock.true_at(at));
        let id = self.node.id();
        while let Some(event) = self.node.poll_event() {
            sink.on_event(id, local, &event);
        }
        self.turns = self.turns.wrapping_add(1);
        if cfg!(debug_assertions) && self.turns.is_multiple_of(INVARIANTS_PERIOD) {
            self.node.check_invariants();
        }
    }
}

impl<N: Role, H: Hook<N>> HostView for Host<N, H> {
    fn id(&self) -> NodeId {
        self.node.id()
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> &'static str {
        N::KIND
    }
    fn net_counters(&self) -> &NetCounters {
        &self.counters
    }
    fn node_counters(&self) -> &Counters {
        self.node.counters()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Buffers a runtime shares between its hosts (one thread, one turn at a time).
#[derive(Debug, Default)]
pub(crate) struct Io {
    pub(crate) recv: RecvBatch,
    pub(crate) send: SendBatch,
}

/// The runtime's side of a host: type-erased turns.
pub(crate) trait Turn {
    fn view(&self) -> &dyn HostView;
    fn view_mut_any(&mut self) -> &mut dyn Any;
    fn fd(&self) -> RawFd;
    /// True time of the next wake-up: the node's deadline, the hook's or the retry of held
    /// copies, whichever is first.
    fn next_wakeup(&self) -> Option<u64>;
    fn input(&mut self, now_ns: u64, io: &mut Io, sink: &mut dyn EventSink) -> usize;
    fn wake(&mut self, now_ns: u64, io: &mut Io, sink: &mut dyn EventSink);
}

impl<N: Role, H: Hook<N>> Turn for Host<N, H> {
    fn view(&self) -> &dyn HostView {
        self
    }
    fn view_mut_any(&mut self) -> &mut dyn Any {
        self
    }
    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
    fn next_wakeup(&self) -> Option<u64> {
        [self.node_deadline, self.hook_deadline, self.held_retry_at]
            .into_iter()
            .flatten()
            .min()
    }
    fn input(&mut self, now_ns: u64, io: &mut Io, sink: &mut dyn EventSink) -> usize {
        Self::input(self, now_ns, io, sink)
    }
    fn wake(&mut self, now_ns: u64, io: &mut Io, sink: &mut dyn EventSink) {
        Self::wake(self, now_ns, io, sink);
    }
}
