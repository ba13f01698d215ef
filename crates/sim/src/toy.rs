//! Toy nodes for testing and benchmarking the simulator itself: a root that publishes
//! numbered packets on a timer, relays that forward first copies to their children and to
//! their siblings' children (hedging), and gateways that hold each packet until its deadline
//! and release in sequence order. They implement [`proto::Node`] like the real roles but know
//! nothing of market data, clock sync or recovery; exchange time is each node's local time.

use std::collections::BTreeMap;

use proto::{Event, Instant, Node, NodeId, Release, Transmit};

use crate::runtime::SimNode;

/// Bytes of the toy header: sequence, send time, deadline (u64 little-endian each).
const HEADER_LEN: usize = 24;
/// Sequence numbers a relay or gateway remembers for dedupe.
const DEDUPE_WINDOW: usize = 4_096;
/// How long a gateway waits for a missing packet before skipping it.
const GAP_GRACE_NS: u64 = 2_000_000;
/// Packets a gateway holds at once.
const HELD_MAX: usize = 65_536;

/// A toy tree: root → `relays` → gateways, or root → gateways directly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToyTree {
    /// Gateways (leaves).
    pub gateways: u32,
    /// Children per relay; `0` or `>= gateways` means direct unicast from the root.
    pub fanout: u32,
    /// Sibling hedging factor H: each relay also sends to the children of its next H siblings.
    pub hedge: u32,
    /// Release deadline = send time + this; 0 = release on receipt.
    pub hold_ns: u64,
    /// Datagram size, bytes (at least 24).
    pub payload_len: usize,
    /// Time between packets at the root, on its clock.
    pub interval_ns: u64,
    /// Packets the root publishes.
    pub packets: u64,
    /// Local time of the root's first packet.
    pub start_ns: u64,
}

impl ToyTree {
    /// Number of relays.
    pub fn relays(&self) -> u32 {
        if self.fanout == 0 || self.fanout >= self.gateways {
            0
        } else {
            self.gateways.div_ceil(self.fanout)
        }
    }

    /// The id of gateway `i` (0-based).
    pub fn gateway_id(&self, i: u32) -> NodeId {
        NodeId(1 + self.relays() + i)
    }

    /// Builds every node, root first, in id order.
    pub fn build(&self) -> Vec<Box<dyn SimNode + Send>> {
        assert!(self.payload_len >= HEADER_LEN);
        let relays = self.relays();
        let gateways: Vec<NodeId> = (0..self.gateways).map(|i| self.gateway_id(i)).collect();
        let mut nodes: Vec<Box<dyn SimNode + Send>> = Vec::new();
        let root_children = if relays == 0 {
            gateways.clone()
        } else {
            (1..=relays).map(NodeId).collect()
        };
        nodes.push(Box::new(ToyRoot::new(NodeId(0), root_children, self)));
        let fanout = self.fanout as usize;
        for relay in 0..relays {
            let mut targets = Vec::new();
            for hop in 0..=self.hedge.min(relays - 1) {
                let block = ((relay + hop) % relays) as usize;
                let end = ((block + 1) * fanout).min(gateways.len());
                targets.extend_from_slice(&gateways[block * fanout..end]);
            }
            nodes.push(Box::new(ToyRelay::new(NodeId(1 + relay), targets)));
        }
        for &id in &gateways {
            nodes.push(Box::new(ToyGateway::new(id)));
        }
        nodes
    }
}

/// Publishes `packets` packets every `interval_ns` to its children.
#[derive(Debug)]
pub struct ToyRoot {
    id: NodeId,
    children: Vec<NodeId>,
    hold_ns: u64,
    interval_ns: u64,
    remaining: u64,
    next_seq: u64,
    next_at: Instant,
    payload: Vec<u8>,
    pending: bool,
}

impl ToyRoot {
    fn new(id: NodeId, children: Vec<NodeId>, tree: &ToyTree) -> Self {
        Self {
            id,
            children,
            hold_ns: tree.hold_ns,
            interval_ns: tree.interval_ns.max(1),
            remaining: tree.packets,
            next_seq: 0,
            next_at: Instant::from_nanos(tree.start_ns),
            payload: vec![0; tree.payload_len],
            pending: false,
        }
    }

    /// Publishes one packet now (also used by the timer).
    pub fn publish(&mut self, now: Instant) {
        assert!(!self.pending, "one packet at a time: poll_transmit first");
        let send = now.as_nanos();
        let deadline = if self.hold_ns == 0 {
            send
        } else {
            send + self.hold_ns
        };
        self.payload[0..8].copy_from_slice(&self.next_seq.to_le_bytes());
        self.payload[8..16].copy_from_slice(&send.to_le_bytes());
        self.payload[16..24].copy_from_slice(&deadline.to_le_bytes());
        self.next_seq += 1;
        self.pending = true;
    }

    /// Packets published so far.
    pub fn published(&self) -> u64 {
        self.next_seq
    }
}

impl Node for ToyRoot {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_datagram(&mut self, _now: Instant, _from: NodeId, _bytes: &[u8]) {}
    fn handle_timeout(&mut self, now: Instant) {
        if self.remaining == 0 || now < self.next_at {
            return;
        }
        self.publish(now);
        self.remaining -= 1;
        self.next_at += core::time::Duration::from_nanos(self.interval_ns);
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit<'_>> {
        if !self.pending {
            return None;
        }
        self.pending = false;
        Some(Transmit {
            destinations: &self.children,
            payload: &self.payload,
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (self.remaining > 0).then_some(self.next_at)
    }
    fn poll_event(&mut self) -> Option<Event> {
        None
    }
    fn check_invariants(&self) {
        assert!(!self.pending || self.next_seq > 0);
    }
}

/// First-copy-wins dedupe over recent sequence numbers.
#[derive(Debug)]
struct Dedupe {
    seen: Vec<u64>,
}

impl Dedupe {
    fn new() -> Self {
        Self {
            seen: vec![u64::MAX; DEDUPE_WINDOW],
        }
    }

    /// True the first time `seq` is offered (within the window).
    fn first(&mut self, seq: u64) -> bool {
        let slot = &mut self.seen[seq as usize % DEDUPE_WINDOW];
        if *slot == seq {
            return false;
        }
        *slot = seq;
        true
    }
}

/// Forwards the first copy of each packet to its targets.
#[derive(Debug)]
pub struct ToyRelay {
    id: NodeId,
    targets: Vec<NodeId>,
    dedupe: Dedupe,
    outbox: Vec<u8>,
    pending: bool,
    /// Duplicates dropped.
    pub duplicates: u64,
}

impl ToyRelay {
    fn new(id: NodeId, targets: Vec<NodeId>) -> Self {
        Self {
            id,
            targets,
            dedupe: Dedupe::new(),
            outbox: Vec::new(),
            pending: false,
            duplicates: 0,
        }
    }
}

impl Node for ToyRelay {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_datagram(&mut self, _now: Instant, _from: NodeId, bytes: &[u8]) {
        let Some(seq) = bytes.get(0..8) else { return };
        let seq = u64::from_le_bytes(seq.try_into().expect("8 bytes"));
        if !self.dedupe.first(seq) {
            self.duplicates += 1;
            return;
        }
        assert!(
            !self.pending,
            "the driver drains every transmit after each handler"
        );
        self.outbox.clear();
        self.outbox.extend_from_slice(bytes);
        self.pending = true;
    }
    fn handle_timeout(&mut self, _now: Instant) {}
    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit<'_>> {
        if !self.pending {
            return None;
        }
        self.pending = false;
        Some(Transmit {
            destinations: &self.targets,
            payload: &self.outbox,
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn poll_event(&mut self) -> Option<Event> {
        None
    }
    fn check_invariants(&self) {
        assert!(!self.pending || !self.outbox.is_empty());
    }
}

/// Holds packets until their deadline and releases them in sequence order; a missing packet
/// is skipped once a later one has been due for `GAP_GRACE_NS` (toy: no recovery).
#[derive(Debug)]
pub struct ToyGateway {
    id: NodeId,
    dedupe: Dedupe,
    /// seq → (send, deadline, received local).
    held: BTreeMap<u64, (u64, u64, u64)>,
    next_seq: u64,
    events: Vec<Event>,
    /// Packets released.
    pub released: u64,
    /// Sequence numbers skipped.
    pub skipped: u64,
}

impl ToyGateway {
    fn new(id: NodeId) -> Self {
        Self {
            id,
            dedupe: Dedupe::new(),
            held: BTreeMap::new(),
            next_seq: 0,
            events: Vec::new(),
            released: 0,
            skipped: 0,
        }
    }

    fn release_due(&mut self, now: Instant) {
        while let Some((&seq, &(send, deadline, received))) = self.held.first_key_value() {
            // A packet after a gap waits a grace period for the missing one.
            let due = if seq == self.next_seq {
                deadline
            } else {
                deadline + GAP_GRACE_NS
            };
            if due > now.as_nanos() {
                break;
            }
            self.held.pop_first();
            if seq < self.next_seq {
                continue; // Arrived after we skipped past it.
            }
            self.skipped += seq - self.next_seq;
            self.next_seq = seq + 1;
            self.released += 1;
            self.events.push(Event::Released(Release {
                packet_seq: seq,
                // One message a packet, as if after a MoldUDP64 header message each.
                sequence: seq * 2,
                messages: 1,
                send_time: crate::exchange_time(send),
                deadline: crate::exchange_time(deadline),
                received: crate::exchange_time(received),
                released: crate::exchange_time(now.as_nanos()),
                received_local: Instant::from_nanos(received),
                late: received > deadline,
                recovered: false,
                snapshot: false,
            }));
        }
    }
}

impl Node for ToyGateway {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_datagram(&mut self, now: Instant, _from: NodeId, bytes: &[u8]) {
        if bytes.len() < HEADER_LEN {
            return;
        }
        let word =
            |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let (seq, send, deadline) = (word(0), word(1), word(2));
        if !self.dedupe.first(seq) || seq < self.next_seq || self.held.len() >= HELD_MAX {
            return;
        }
        self.held.insert(seq, (send, deadline, now.as_nanos()));
        self.release_due(now);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.release_due(now);
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit<'_>> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        let (&seq, &(_, deadline, _)) = self.held.first_key_value()?;
        let due = if seq == self.next_seq {
            deadline
        } else {
            deadline + GAP_GRACE_NS
        };
        Some(Instant::from_nanos(due))
    }
    fn poll_event(&mut self) -> Option<Event> {
        if self.events.is_empty() {
            return None;
        }
        Some(self.events.remove(0))
    }
    fn check_invariants(&self) {
        assert!(self.held.len() <= HELD_MAX);
        assert_eq!(self.released + self.skipped, self.next_seq);
    }
}
