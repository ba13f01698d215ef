//! Loss repair inside the tree (DESIGN.md §4 "Loss recovery"): the packets a proxy keeps, and
//! the children waiting for what it lacks.
//!
//! DESIGN.md has every gateway ask the root's rewinder for what it missed. A copy lost above
//! a gateway is missed by the whole subtree below the loss (between the root and a layer-1
//! proxy of `<3,10>` without hedging, ~100 gateways), and each of them asked the root, which
//! answered each by unicast: at 1% loss per copy (N = 1000, H = 0) the root sent twice as
//! many copies answering as publishing. Here a proxy keeps the last
//! [`NodeConfig::repair_bytes`] of packets it received ([`RepairRing`]) and answers its
//! children from them. For what it lacks it asks its own parent, once per `gap_retry`
//! however many children ask, and passes what comes back to every child waiting for it
//! ([`Repair`]). A loss is repaired by the nearest node above it
//! that has the packet, one copy per hop below it, as PGM's designated local repairers do
//! (RFC 3208). A gateway whose parent does not answer asks the root itself
//! ([`crate::gateway`]), and only the root answers "no longer held"
//! ([`wire::control::Repr::RetransmitUnavailable`]); a proxy passes that on to the children
//! it concerns.
//!
//! Requests and answers are the root's: a range of MoldUDP64 message sequence numbers, and
//! the packets holding them, marked as retransmissions, at most
//! [`RETRANSMIT_PACKETS_MAX`] per request.
//!
//! [`NodeConfig::repair_bytes`]: crate::config::NodeConfig::repair_bytes

use core::time::Duration;

use crate::node::NodeId;
use crate::time::Instant;

/// Packets a node sends at most in answer to one retransmission request (the rest is asked
/// for again).
pub const RETRANSMIT_PACKETS_MAX: usize = 64;

/// Children a proxy keeps waiting at most (the one due to expire first makes room): each
/// waits for one range, and a child asks again if its answer does not come.
const WAITING_MAX: usize = 256;

/// Ranges a proxy remembers having asked its parent for, at most.
const ASKED_MAX: usize = 64;

/// Slots a ring has per byte of its arena: one per [`SLOT_BYTES`] (a one-message packet is
/// ~90 bytes, a full one ~1,400).
const SLOT_BYTES: usize = 128;

/// One held packet. `packet_seq` 0 is an empty slot (packet numbers start at 1).
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    packet_seq: u64,
    /// MoldUDP64 sequence of its first message, and of the next packet's.
    sequence: u64,
    next_sequence: u64,
    /// Where its bytes start in the arena, counted in bytes ever written.
    start: u64,
    len: u32,
}

/// The last packets a proxy received, by packet number, with holes where it missed some.
/// Their bytes, marked as retransmissions, go one after another into a fixed arena, so the
/// ring costs at most its bytes however large the packets are; a packet whose bytes were
/// written over is no longer held.
#[derive(Clone, Debug)]
pub struct RepairRing {
    /// Bytes the arena is to hold; it and the slots are allocated by the first packet kept.
    bytes: usize,
    slots: Vec<Slot>,
    arena: Vec<u8>,
    /// Bytes ever written to the arena (the next write goes at this modulo its length).
    written: u64,
    /// The highest packet number held (0: none yet).
    newest: u64,
}

impl RepairRing {
    /// A ring of `bytes` bytes of packets (0: keeps none), allocated when it keeps its first
    /// packet (a simulation's dormant copies of a node, on the other shards, never do).
    pub fn new(bytes: usize) -> Self {
        Self {
            bytes,
            slots: Vec::new(),
            arena: Vec::new(),
            written: 0,
            newest: 0,
        }
    }

    /// How far ahead of the packets it holds a packet may be numbered before keeping it
    /// makes the ring refuse every packet it holds and those up to it: its slots (no limit
    /// for a ring that keeps nothing).
    pub fn reach(&self) -> u64 {
        match self.bytes {
            0 => u64::MAX,
            bytes => bytes.div_ceil(SLOT_BYTES) as u64,
        }
    }

    /// Keeps packet `packet_seq` (messages `sequence..next_sequence`), a market-data packet
    /// the caller parsed. Returns whether it was new here: not held yet, and not older than
    /// what the ring holds. It is marked as a retransmission only when served: every proxy
    /// keeps every packet, and few are ever asked for.
    pub fn store(
        &mut self,
        packet_seq: u64,
        sequence: u64,
        next_sequence: u64,
        bytes: &[u8],
    ) -> bool {
        if self.arena.is_empty() {
            self.slots = vec![Slot::default(); self.bytes.div_ceil(SLOT_BYTES)];
            self.arena = vec![0; self.bytes];
        }
        let slots = self.slots.len() as u64;
        let arena = self.arena.len() as u64;
        // Every packet holds at least its header message.
        if slots == 0 || packet_seq == 0 || next_sequence <= sequence || bytes.len() as u64 > arena
        {
            return false;
        }
        if packet_seq.saturating_add(slots) <= self.newest {
            return false;
        }
        let index = (packet_seq % slots) as usize;
        let held = self.slots[index];
        if held.packet_seq > packet_seq || (held.packet_seq == packet_seq && self.intact(&held)) {
            return false;
        }
        // A packet does not wrap: one that would is written at the arena's start.
        let mut start = self.written;
        let offset = start % arena;
        if offset + bytes.len() as u64 > arena {
            start += arena - offset;
        }
        let at = (start % arena) as usize;
        self.arena[at..at + bytes.len()].copy_from_slice(bytes);
        self.written = start + bytes.len() as u64;
        self.slots[index] = Slot {
            packet_seq,
            sequence,
            next_sequence,
            start,
            len: bytes.len() as u32,
        };
        self.newest = self.newest.max(packet_seq);
        true
    }

    /// Whether a slot's bytes are still in the arena (not written over since).
    fn intact(&self, slot: &Slot) -> bool {
        self.written <= slot.start + self.arena.len() as u64
    }

    /// The held packet `packet_seq`, marked as a retransmission (in place, once served).
    pub fn marked(&mut self, packet_seq: u64) -> Option<&[u8]> {
        let slot = *self.slot(packet_seq)?;
        let at = (slot.start % self.arena.len() as u64) as usize;
        let bytes = &mut self.arena[at..at + slot.len as usize];
        wire::market::mark_retransmission(bytes).ok()?;
        Some(bytes)
    }

    fn slot(&self, packet_seq: u64) -> Option<&Slot> {
        let slots = self.slots.len() as u64;
        if slots == 0 || packet_seq == 0 {
            return None;
        }
        let slot = &self.slots[(packet_seq % slots) as usize];
        (slot.packet_seq == packet_seq && self.intact(slot)).then_some(slot)
    }

    /// The held packet holding message `sequence`, if any. Searched from the newest back: a
    /// request for what was just missed costs a few steps.
    fn find(&self, sequence: u64) -> Option<u64> {
        let slots = self.slots.len() as u64;
        let oldest = self.newest.saturating_sub(slots.saturating_sub(1)).max(1);
        for packet_seq in (oldest..=self.newest).rev() {
            let Some(slot) = self.slot(packet_seq) else {
                continue;
            };
            if slot.sequence <= sequence {
                return (sequence < slot.next_sequence).then_some(packet_seq);
            }
        }
        None
    }

    /// Gives `send` the held packets holding messages `from..end`, in order, from the one
    /// holding `from` up to the first hole or [`RETRANSMIT_PACKETS_MAX`] packets. Returns
    /// the first message of the hole that stopped it, if one did (the packet holding it is
    /// not here, or not yet).
    pub fn serve(&mut self, from: u64, end: u64, mut send: impl FnMut(&[u8])) -> Option<u64> {
        let Some(mut packet_seq) = self.find(from) else {
            return (from < end).then_some(from);
        };
        let mut cursor = from;
        for _ in 0..RETRANSMIT_PACKETS_MAX {
            if cursor >= end {
                return None;
            }
            let Some(&Slot { next_sequence, .. }) = self.slot(packet_seq) else {
                return Some(cursor);
            };
            let Some(bytes) = self.marked(packet_seq) else {
                return Some(cursor);
            };
            send(bytes);
            cursor = next_sequence;
            packet_seq += 1;
        }
        // The rest is asked for again.
        None
    }
}

/// A child waiting for messages `from..end`, until `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiting {
    child: NodeId,
    from: u64,
    end: u64,
    until: Instant,
}

/// A range asked of the parent, at `at`.
#[derive(Clone, Copy, Debug)]
struct Asked {
    from: u64,
    end: u64,
    at: Instant,
    /// The answer has come up to here (`from`: nothing yet). An answer carries at most
    /// [`RETRANSMIT_PACKETS_MAX`] packets, so once it has come, what follows is asked for
    /// again, not left until `retry`.
    answered_to: u64,
}

/// A proxy's repair state: its ring, the children waiting for what it lacks, and what it
/// asked its parent for.
#[derive(Clone, Debug)]
pub struct Repair {
    /// The packets kept.
    pub ring: RepairRing,
    waiting: Vec<Waiting>,
    asked: Vec<Asked>,
}

impl Repair {
    /// Repair state keeping `bytes` bytes of packets (0: none; the proxy then passes every
    /// request up).
    pub fn new(bytes: usize) -> Self {
        Self {
            ring: RepairRing::new(bytes),
            waiting: Vec::new(),
            asked: Vec::new(),
        }
    }

    /// Whether any child waits (the common case, none, costs one check per packet).
    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// `child` waits for messages `from..end` for `keep` (a later request of its own
    /// replaces this one). Returns whether to ask the parent for them: not if a range
    /// covering them was asked for within `retry` and its answer may still bring `from`
    /// (nothing of it has come yet, or it has come past `from`).
    pub fn wait(
        &mut self,
        now: Instant,
        child: NodeId,
        from: u64,
        end: u64,
        keep: Duration,
        retry: Duration,
    ) -> bool {
        self.waiting.retain(|w| w.until > now && w.child != child);
        if self.waiting.len() >= WAITING_MAX {
            let first_due = (0..self.waiting.len())
                .min_by_key(|&i| self.waiting[i].until)
                .expect("full");
            self.waiting.swap_remove(first_due);
        }
        self.waiting.push(Waiting {
            child,
            from,
            end,
            until: now + keep,
        });
        self.asked.retain(|a| now < a.at + retry);
        let covered = |a: &Asked| {
            a.from <= from && end <= a.end && (a.answered_to == a.from || from < a.answered_to)
        };
        if self.asked.iter().any(covered) {
            return false;
        }
        if self.asked.len() >= ASKED_MAX {
            self.asked.remove(0);
        }
        self.asked.push(Asked {
            from,
            end,
            at: now,
            answered_to: from,
        });
        true
    }

    /// The children waiting for any of messages `sequence..next_sequence` (a packet that
    /// just came), into `out`; each then waits for what follows it only. The asks it
    /// answers have come up to `next_sequence`.
    pub fn take_waiting(
        &mut self,
        now: Instant,
        sequence: u64,
        next_sequence: u64,
        out: &mut Vec<NodeId>,
    ) {
        for a in &mut self.asked {
            if a.from < next_sequence && sequence < a.end {
                a.answered_to = a.answered_to.max(next_sequence);
            }
        }
        self.waiting.retain_mut(|w| {
            if w.until <= now {
                return false;
            }
            if w.from < next_sequence && sequence < w.end {
                if !out.contains(&w.child) {
                    out.push(w.child);
                }
                // Answers come in order: what is left of its range starts after this packet.
                if w.from >= sequence {
                    w.from = next_sequence;
                }
            }
            w.from < w.end
        });
    }

    /// The parent no longer holds messages before `oldest_available` from `sequence` on:
    /// gives `tell` each child waiting for some of them (and its range). A child whose range
    /// goes on past `oldest_available` waits on for the rest, which the root sends with its
    /// answer (`Root::retransmit`); the others wait no longer.
    pub fn unavailable(
        &mut self,
        sequence: u64,
        oldest_available: u64,
        mut tell: impl FnMut(NodeId, u64, u64),
    ) {
        self.waiting.retain_mut(|w| {
            let lost = w.from < oldest_available && sequence <= w.from;
            if lost {
                tell(w.child, w.from, w.end);
                w.from = oldest_available;
            }
            w.from < w.end
        });
        self.asked
            .retain(|a| a.from < sequence || a.from >= oldest_available);
    }
}

/// A retransmission request from `requester` in `session` for `count` messages from
/// `sequence`, as a datagram.
#[cfg(test)]
pub(crate) fn test_request(requester: u32, session: &str, sequence: u64, count: u16) -> Vec<u8> {
    let mut buf = vec![0u8; 64];
    let len = wire::control::Repr::RetransmitRequest {
        requester,
        session: wire::Session::new(session).expect("valid"),
        sequence,
        count,
    }
    .emit(&mut buf)
    .expect("fits");
    buf.truncate(len);
    buf
}

/// Packet `packet_seq` of session `JASPER0001` holding messages
/// `sequence..sequence + messages` (its header and `messages - 1` one-byte others).
#[cfg(test)]
pub(crate) fn test_packet(packet_seq: u64, sequence: u64, messages: u16) -> Vec<u8> {
    test_packet_of("JASPER0001", packet_seq, sequence, messages)
}

/// [`test_packet`] of session `session`.
#[cfg(test)]
pub(crate) fn test_packet_of(
    session: &str,
    packet_seq: u64,
    sequence: u64,
    messages: u16,
) -> Vec<u8> {
    test_packet_timed(session, packet_seq, sequence, messages, 1, 2)
}

/// [`test_packet_of`] sent at exchange time `send_ns`, due at `deadline_ns`.
#[cfg(test)]
pub(crate) fn test_packet_timed(
    session: &str,
    packet_seq: u64,
    sequence: u64,
    messages: u16,
    send_ns: u64,
    deadline_ns: u64,
) -> Vec<u8> {
    use wire::ExchangeTime;
    use wire::market::{JasperHeader, MarketDataBuilder};
    let mut buf = vec![0u8; 1500];
    let session = wire::Session::new(session).expect("valid");
    let mut builder = MarketDataBuilder::new(&mut buf, session, sequence);
    for _ in 1..messages {
        builder.push(&wire::Raw(b"x")).expect("fits");
    }
    let header = JasperHeader {
        packet_seq,
        send_time: ExchangeTime(send_ns),
        deadline: ExchangeTime(deadline_ns),
        flags: 0,
    };
    let len = builder.finish(&header).expect("fits");
    buf.truncate(len);
    buf
}

#[cfg(test)]
mod tests {
    use super::test_packet as packet;
    use super::*;

    /// A ring holding packets `seqs`, each of `messages` messages, packet 1 from message 1.
    fn ring(slots: usize, seqs: impl IntoIterator<Item = u64>, messages: u16) -> RepairRing {
        let mut ring = RepairRing::new(slots * SLOT_BYTES);
        for p in seqs {
            let sequence = 1 + (p - 1) * u64::from(messages);
            let bytes = packet(p, sequence, messages);
            assert!(ring.store(p, sequence, sequence + u64::from(messages), &bytes));
        }
        ring
    }

    fn served(ring: &mut RepairRing, from: u64, end: u64) -> (Vec<u64>, Option<u64>) {
        let mut got = Vec::new();
        let missing = ring.serve(from, end, |bytes| {
            let data = wire::parse_market_data(bytes).expect("a packet");
            assert!(data.header.is_retransmission(), "served marked");
            got.push(data.header.packet_seq);
        });
        (got, missing)
    }

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    #[test]
    fn serves_a_range_up_to_its_first_hole() {
        // Packets of 3 messages: packet p holds 3p-2..3p+1.
        let mut ring = ring(16, [1, 2, 3, 5, 6], 3);
        assert_eq!(served(&mut ring, 1, 10), (vec![1, 2, 3], None));
        // From the middle of packet 2 into the hole at 4 (messages 10..13).
        assert_eq!(served(&mut ring, 5, 16), (vec![2, 3], Some(10)));
        // The hole itself, and past the newest.
        assert_eq!(served(&mut ring, 11, 16), (vec![], Some(11)));
        assert_eq!(served(&mut ring, 13, 20), (vec![5, 6], Some(19)));
        assert_eq!(served(&mut ring, 19, 22), (vec![], Some(19)));
        // An empty range asks nothing.
        assert_eq!(served(&mut ring, 40, 40), (vec![], None));
    }

    #[test]
    fn keeps_only_the_newest_packets_each_once() {
        let mut ring = ring(4, 1..=6, 1);
        assert_eq!(
            served(&mut ring, 1, 7),
            (vec![], Some(1)),
            "1 and 2 were overwritten"
        );
        assert_eq!(served(&mut ring, 3, 7), (vec![3, 4, 5, 6], None));
        // Held already, and older than the ring: not new.
        assert!(!ring.store(5, 5, 6, &packet(5, 5, 1)));
        assert!(!ring.store(2, 2, 3, &packet(2, 2, 1)));
        // A packet missed, then recovered, fills its hole.
        let mut ring2 = self::ring(8, [1, 3], 1);
        assert_eq!(served(&mut ring2, 1, 4), (vec![1], Some(2)));
        assert!(ring2.store(2, 2, 3, &packet(2, 2, 1)));
        assert_eq!(served(&mut ring2, 1, 4), (vec![1, 2, 3], None));
        // Nothing kept: every request is a hole; bad input is not kept.
        let mut none = RepairRing::new(0);
        assert!(!none.store(1, 1, 2, &packet(1, 1, 1)));
        assert_eq!(served(&mut none, 1, 2), (vec![], Some(1)));
        assert!(!ring.store(7, 7, 7, &packet(7, 7, 1)), "no messages");
        // Bytes that do not mark are never served (the caller parses what it keeps).
        assert!(ring.store(7, 7, 8, b"not a packet"));
        assert_eq!(ring.marked(7), None);
        assert_eq!(served(&mut ring, 7, 8), (vec![], Some(7)));
    }

    #[test]
    fn big_packets_are_bounded_by_the_arena_not_the_slots() {
        // 32 slots, 4 KiB: packets of 400 messages (~1.2 KB) fit three at a time.
        let mut ring = RepairRing::new(32 * SLOT_BYTES);
        for p in 1..=6u64 {
            let sequence = 1 + (p - 1) * 400;
            assert!(ring.store(p, sequence, sequence + 400, &packet(p, sequence, 400)));
            assert!(ring.marked(p).is_some(), "the newest is held");
        }
        assert_eq!(ring.slots.len(), 32);
        let held: Vec<u64> = (1..=6).filter(|&p| ring.marked(p).is_some()).collect();
        assert_eq!(held, [4, 5, 6]);
        assert_eq!(served(&mut ring, 1, 2401), (vec![], Some(1)));
        assert_eq!(served(&mut ring, 1201, 2401), (vec![4, 5, 6], None));
        // A packet evicted can be kept again; one bigger than the arena never is.
        assert!(!ring.store(4, 1201, 1601, &packet(4, 1201, 400)), "held");
        assert!(ring.store(3, 801, 1201, &packet(3, 801, 400)));
        let held: Vec<u64> = (1..=6).filter(|&p| ring.marked(p).is_some()).collect();
        assert_eq!(held, [3, 5, 6], "written over the oldest");
        let mut tiny = RepairRing::new(64);
        assert!(!tiny.store(1, 1, 401, &packet(1, 1, 400)));
    }

    #[test]
    fn answers_at_most_the_packet_limit() {
        let mut ring = ring(128, 1..=100, 1);
        let (got, missing) = served(&mut ring, 1, 101);
        assert_eq!(got.len(), RETRANSMIT_PACKETS_MAX);
        assert_eq!(missing, None, "the rest is asked for again, not upward");
    }

    #[test]
    fn one_ask_up_serves_every_child_waiting() {
        let keep = Duration::from_millis(8);
        let retry = Duration::from_millis(2);
        let mut repair = Repair::new(16);
        assert!(!repair.has_waiting());
        assert!(repair.wait(at(0), NodeId(7), 10, 20, keep, retry));
        // A second child for a range inside it waits without asking; a wider one asks.
        assert!(!repair.wait(at(100), NodeId(8), 12, 20, keep, retry));
        assert!(repair.wait(at(200), NodeId(9), 10, 30, keep, retry));
        // Within `retry` of the wider ask, covered; after it, asked again.
        assert!(!repair.wait(at(2_100), NodeId(7), 10, 20, keep, retry));
        assert!(repair.wait(at(2_300), NodeId(7), 10, 20, keep, retry));
        // Packet 10..15 comes: all three want some of it; 8 and 7 then wait for 15..20.
        let mut out = Vec::new();
        repair.take_waiting(at(2_400), 10, 15, &mut out);
        out.sort();
        assert_eq!(out, [NodeId(7), NodeId(8), NodeId(9)]);
        out.clear();
        repair.take_waiting(at(2_500), 15, 20, &mut out);
        out.sort();
        assert_eq!(out, [NodeId(7), NodeId(8), NodeId(9)]);
        // Served whole: 7 and 8 wait no longer; 9 still wants 20..30.
        out.clear();
        repair.take_waiting(at(2_600), 15, 20, &mut out);
        assert_eq!(out, [] as [NodeId; 0]);
        repair.take_waiting(at(2_700), 25, 26, &mut out);
        assert_eq!(out, [NodeId(9)]);
        // Expired: nobody.
        out.clear();
        repair.take_waiting(at(20_000), 25, 26, &mut out);
        assert!(out.is_empty() && !repair.has_waiting());
    }

    /// Goal: an answer carries at most 64 packets, so once it has come, the rest of the
    /// range asked for is asked again at once (a child far behind asks as each answer
    /// ends), while a request still inside what the answer may bring is not.
    #[test]
    fn the_rest_of_a_range_answered_in_part_is_asked_again() {
        let keep = Duration::from_millis(8);
        let retry = Duration::from_millis(2);
        let mut repair = Repair::new(16);
        assert!(repair.wait(at(0), NodeId(7), 100, 1_000, keep, retry));
        // No answer yet: the same range again, or its tail, is covered.
        assert!(!repair.wait(at(10), NodeId(8), 100, 1_000, keep, retry));
        assert!(!repair.wait(at(20), NodeId(9), 500, 1_000, keep, retry));
        // The answer comes, 100..164, one message a packet.
        let mut out = Vec::new();
        for sequence in 100..164 {
            repair.take_waiting(at(100), sequence, sequence + 1, &mut out);
        }
        // A child that lost part of the answer is still covered; one asking for what
        // follows the answer asks again, and once.
        assert!(!repair.wait(at(110), NodeId(8), 150, 1_000, keep, retry));
        assert!(repair.wait(at(120), NodeId(7), 164, 1_000, keep, retry));
        assert!(!repair.wait(at(130), NodeId(9), 164, 1_000, keep, retry));
    }

    #[test]
    fn unavailable_reaches_the_children_it_concerns() {
        let keep = Duration::from_millis(8);
        let retry = Duration::from_millis(2);
        let mut repair = Repair::new(16);
        repair.wait(at(0), NodeId(7), 10, 20, keep, retry);
        repair.wait(at(0), NodeId(8), 50, 60, keep, retry);
        repair.wait(at(0), NodeId(9), 30, 60, keep, retry);
        let mut told = Vec::new();
        repair.unavailable(10, 40, |child, from, end| told.push((child, from, end)));
        assert_eq!(told, [(NodeId(7), 10, 20), (NodeId(9), 30, 60)]);
        // 8's range is still held above: it still waits, and its answer reaches it; so does
        // 9, for the part of its range from 40 on (the root sends it with its answer).
        let mut out = Vec::new();
        repair.take_waiting(at(10), 40, 45, &mut out);
        assert_eq!(out, [NodeId(9)]);
        out.clear();
        repair.take_waiting(at(10), 50, 55, &mut out);
        assert_eq!(out, [NodeId(8), NodeId(9)]);
    }

    #[test]
    fn waiting_is_bounded() {
        let keep = Duration::from_millis(8);
        let retry = Duration::from_millis(2);
        let mut repair = Repair::new(16);
        for child in 0..(WAITING_MAX as u32 + 10) {
            repair.wait(at(u64::from(child)), NodeId(child), 1, 2, keep, retry);
        }
        assert_eq!(repair.waiting.len(), WAITING_MAX);
        assert!(repair.asked.len() <= ASKED_MAX);
        let mut out = Vec::new();
        repair.take_waiting(at(300), 1, 2, &mut out);
        assert_eq!(out.len(), WAITING_MAX);
        assert!(!out.contains(&NodeId(0)), "the first due made room");
    }
}
