//! Hold-and-release at a gateway (DESIGN.md §4 "Hold-and-release").
//!
//! Packets are held in a ring indexed by their dense packet sequence number. The head of the
//! ring (the next packet to release) leaves when the gateway's exchange clock reaches its
//! deadline; a packet whose
//! deadline has already passed when it arrives leaves at once and is counted late. Release is
//! strictly in sequence order: a missing packet holds back everything behind it until it is
//! recovered (and held to its deadline like any copy, late only if it came after it) or
//! skipped because the rewinder no longer has it.
//!
//! Memory follows what is held, not the bound: the ring starts small and doubles (up to
//! `held_max`) only when a packet lands further ahead than it covers, and a payload buffer
//! belongs to a slot only while the slot is occupied. Released slots hand their buffers to a
//! spare pool that the next insert takes from, so a gateway in steady state allocates nothing
//! and holds about as many buffers as it ever held packets at once. (A buffer per slot, kept
//! for the ring's lifetime, cost 1024 x ~0.5 KB per gateway: 5 GB at N = 10,000.)

use wire::ExchangeTime;

use crate::time::Instant;

/// One held packet.
#[derive(Clone, Debug, Default)]
pub struct Held {
    /// The packet's bytes.
    pub bytes: Vec<u8>,
    /// The release deadline the root set, in exchange time. The local release instant is
    /// derived from it at each check, so a clock correction during the hold is honoured.
    /// (Held before the gateway's clock synced: its arrival plus its budget, on the raw
    /// clock, until the clock syncs.)
    pub deadline: ExchangeTime,
    /// Local instant the first copy arrived.
    pub received: Instant,
    /// Exchange time the first copy arrived (as the clock read then).
    pub received_exchange: ExchangeTime,
    /// It arrived after its deadline.
    pub arrived_late: bool,
    /// MoldUDP64 sequence number of its first message and its message count.
    pub sequence: u64,
    /// Messages in the packet (including the Jasper header message).
    pub count: u16,
    /// Arrived through a retransmission.
    pub recovered: bool,
    /// The packet sequence number of the packet in this slot (valid while occupied).
    packet_seq: u64,
    occupied: bool,
}

/// Why [`HoldQueue::insert`] refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Already released or already held.
    Duplicate,
    /// Too far ahead of the next packet to release: the ring is full. The caller says so
    /// with [`HoldQueue::note_ahead`], so that the gap before it is recovered.
    Full,
}

/// The ring of held packets.
#[derive(Clone, Debug)]
pub struct HoldQueue {
    /// The ring; its length is a power of two between [`SLOTS_MIN`] and `slots_max`.
    slots: Vec<Held>,
    /// The ring's bound: packets further than this ahead of `next` are refused.
    slots_max: usize,
    /// Payload buffers of released packets, reused by the next inserts.
    spare: Vec<Vec<u8>>,
    /// The packet sequence number to release next; `None` until the first packet arrives.
    next: Option<u64>,
    /// Highest packet sequence number held, if any is held.
    highest: Option<u64>,
    /// The highest packet refused as too far ahead ([`Refusal::Full`]) and the MoldUDP64
    /// sequence just after its messages, while `next` has not passed it: proof that the
    /// stream went on past the ring, so that a gateway that fell that far behind, and holds
    /// nothing, still sees a gap to recover (else it would wait for ever, refusing every
    /// packet that comes).
    ahead: Option<(u64, u64)>,
    held: usize,
}

impl HoldQueue {
    /// A queue holding packets up to `held_max` (rounded up to a power of two) ahead of the
    /// next one to release.
    pub fn new(held_max: usize) -> Self {
        let slots_max = held_max.max(2).next_power_of_two();
        Self {
            slots: vec![Held::default(); slots_max.min(SLOTS_MIN)],
            slots_max,
            spare: Vec::new(),
            next: None,
            highest: None,
            ahead: None,
            held: 0,
        }
    }

    /// The packet sequence number released next, once known.
    pub fn next(&self) -> Option<u64> {
        self.next
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Starts the stream at `packet_seq` if it has not started (the first packet a gateway
    /// sees defines where it joins).
    pub fn start_at(&mut self, packet_seq: u64) {
        if self.next.is_none() {
            self.next = Some(packet_seq);
        }
    }

    /// The most packets the ring can hold (`held_max` rounded up to a power of two).
    pub fn capacity(&self) -> usize {
        self.slots_max
    }

    /// Holds a packet. `fill` copies its fields into the slot; the slot's `bytes` come empty
    /// (with the capacity of a reused buffer).
    pub fn insert(&mut self, packet_seq: u64, fill: impl FnOnce(&mut Held)) -> Result<(), Refusal> {
        self.start_at(packet_seq);
        let next = self.next.unwrap_or(packet_seq);
        if packet_seq < next {
            return Err(Refusal::Duplicate);
        }
        let ahead = packet_seq - next;
        if ahead >= self.slots_max as u64 {
            return Err(Refusal::Full);
        }
        if ahead >= self.slots.len() as u64 {
            self.grow(ahead as usize + 1);
        }
        let mask = self.slots.len() as u64 - 1;
        let slot = &mut self.slots[(packet_seq & mask) as usize];
        if slot.occupied {
            debug_assert_eq!(slot.packet_seq, packet_seq);
            return Err(Refusal::Duplicate);
        }
        debug_assert!(slot.bytes.capacity() == 0, "a free slot owns no buffer");
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        slot.bytes = bytes;
        fill(slot);
        slot.packet_seq = packet_seq;
        slot.occupied = true;
        self.held += 1;
        self.highest = Some(self.highest.map_or(packet_seq, |h| h.max(packet_seq)));
        Ok(())
    }

    /// Notes a packet [`Self::insert`] refused as too far ahead ([`Refusal::Full`]):
    /// `packet_seq`, and `end_sequence`, the MoldUDP64 sequence just after its messages.
    pub fn note_ahead(&mut self, packet_seq: u64, end_sequence: u64) {
        if self.next.is_some_and(|next| packet_seq >= next)
            && self.ahead.is_none_or(|(seq, _)| packet_seq > seq)
        {
            self.ahead = Some((packet_seq, end_sequence));
        }
    }

    /// Forgets the refused packet of [`Self::note_ahead`] once `next` has passed it.
    fn passed_ahead(&mut self) {
        let next = self.next;
        self.ahead = self
            .ahead
            .filter(|&(seq, _)| next.is_none_or(|next| seq >= next));
    }

    /// The head packet if it is present.
    pub fn head(&self) -> Option<&Held> {
        let next = self.next?;
        let slot = &self.slots[(next & (self.slots.len() as u64 - 1)) as usize];
        slot.occupied.then_some(slot)
    }

    /// Hands every held packet to `f`, in no particular order.
    pub fn for_each_held_mut(&mut self, mut f: impl FnMut(&mut Held)) {
        for slot in self.slots.iter_mut().filter(|slot| slot.occupied) {
            f(slot);
        }
    }

    /// Removes the head packet (which must be present), hands it to `f`, and advances.
    pub fn pop_head<R>(&mut self, f: impl FnOnce(u64, &Held) -> R) -> Option<R> {
        let next = self.next?;
        let mask = self.slots.len() as u64 - 1;
        let slot = &mut self.slots[(next & mask) as usize];
        if !slot.occupied {
            return None;
        }
        let result = f(next, slot);
        slot.occupied = false;
        self.spare.push(core::mem::take(&mut slot.bytes));
        self.held -= 1;
        self.next = Some(next + 1);
        if self.held == 0 {
            self.highest = None;
        }
        self.passed_ahead();
        Some(result)
    }

    /// The first gap: the missing packet range `[from, to)` between the head and the first
    /// held packet behind it, with that packet's MoldUDP64 sequence (the end of the missing
    /// message range). With nothing held but a packet refused as too far ahead
    /// ([`Self::note_ahead`]), the gap runs to that packet, which is missing too: `[from,
    /// to)` ends just after it, and so does the message range.
    pub fn first_gap(&self) -> Option<(u64, u64, u64)> {
        let next = self.next?;
        if self.head().is_some() {
            return None;
        }
        let mask = self.slots.len() as u64 - 1;
        let held = self.highest.and_then(|highest| {
            (next + 1..=highest).find_map(|s| {
                let slot = &self.slots[(s & mask) as usize];
                slot.occupied.then_some((next, s, slot.sequence))
            })
        });
        held.or_else(|| {
            self.ahead
                .map(|(seq, end_sequence)| (next, seq + 1, end_sequence))
        })
    }

    /// Skips the missing head range `[next, to)` (the rewinder no longer has it).
    pub fn skip_to(&mut self, to: u64) {
        if self.next.is_some() {
            assert!(self.head().is_none(), "only missing packets are skipped");
            // Held packets are within a ring's length of `next`: the pass stops there, so a
            // skip far ahead costs no more than the ring.
            assert_eq!(self.discard_to(to), 0, "skipping a held packet");
        }
    }

    /// Drops every packet before `to`, held or missing, and releases from `to` on (a book
    /// snapshot covers them, [`crate::snapshot`]). Returns the held packets dropped.
    pub fn discard_to(&mut self, to: u64) -> u64 {
        let Some(next) = self.next else {
            self.next = Some(to);
            return 0;
        };
        let mut dropped = 0;
        let mask = self.slots.len() as u64 - 1;
        // Held packets are within a ring's length of `next`.
        for s in next..to.min(next.saturating_add(self.slots.len() as u64)) {
            let slot = &mut self.slots[(s & mask) as usize];
            if slot.occupied && slot.packet_seq == s {
                slot.occupied = false;
                self.spare.push(core::mem::take(&mut slot.bytes));
                self.held -= 1;
                dropped += 1;
            }
        }
        if self.held == 0 {
            self.highest = None;
        }
        self.next = Some(to.max(next));
        self.passed_ahead();
        dropped
    }

    /// Asserts the ring's bookkeeping. Cost: the held range `[next, highest]` (a few slots in
    /// steady state); debug builds also scan the whole ring.
    pub fn check_invariants(&self) {
        assert!(self.slots.len().is_power_of_two());
        assert!(self.slots.len() <= self.slots_max);
        assert!(self.held <= self.slots.len());
        assert!(self.spare.len() + self.held <= self.slots.len());
        match (self.next, self.highest) {
            (Some(next), Some(highest)) => {
                assert!(highest >= next);
                assert!(highest - next < self.slots.len() as u64);
                // Every held packet lies in [next, highest]: count them there.
                let mask = self.slots.len() as u64 - 1;
                let occupied = (next..=highest)
                    .filter(|&s| {
                        let slot = &self.slots[(s & mask) as usize];
                        slot.occupied && slot.packet_seq == s
                    })
                    .count();
                assert_eq!(occupied, self.held);
                assert!(self.slots[(highest & mask) as usize].occupied);
            }
            (_, None) => assert_eq!(self.held, 0),
            (None, Some(_)) => panic!("a packet is held before the stream started"),
        }
        if let Some((seq, _)) = self.ahead {
            assert!(self.next.is_some_and(|next| seq >= next));
        }
        // The negative space: nothing is occupied outside the held range.
        debug_assert_eq!(self.slots.iter().filter(|s| s.occupied).count(), self.held);
        debug_assert!(
            self.slots
                .iter()
                .all(|s| s.occupied || s.bytes.capacity() == 0)
        );
    }

    /// Re-indexes the ring into a larger power of two that covers `needed` slots.
    fn grow(&mut self, needed: usize) {
        let size = needed
            .next_power_of_two()
            .clamp(self.slots.len() * 2, self.slots_max);
        assert!(size >= needed && size > self.slots.len());
        let mut slots = vec![Held::default(); size];
        let mask = size as u64 - 1;
        for slot in self.slots.drain(..).filter(|s| s.occupied) {
            let index = (slot.packet_seq & mask) as usize;
            debug_assert!(!slots[index].occupied);
            slots[index] = slot;
        }
        self.slots = slots;
    }
}

/// Slots a ring starts with (it grows on demand up to its bound).
const SLOTS_MIN: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(q: &mut HoldQueue, seq: u64) -> Result<(), Refusal> {
        q.insert(seq, |h| {
            h.sequence = seq * 10;
            h.count = 10;
            h.deadline = ExchangeTime::from_nanos(seq);
        })
    }

    /// Goal: skipping far ahead costs no more than the ring (a noted packet numbered 2^58
    /// ahead once took a loop over every number in between). Method: skip 2^58 packets past
    /// the head; the head is there at once, and a packet beyond it is held.
    #[test]
    fn a_skip_far_ahead_is_as_cheap_as_the_ring() {
        let mut q = HoldQueue::new(8);
        hold(&mut q, 100).unwrap();
        assert_eq!(q.pop_head(|s, _| s), Some(100));
        let far = 101 + (1u64 << 58);
        q.skip_to(far);
        assert_eq!(q.first_gap(), None);
        hold(&mut q, far).unwrap();
        assert_eq!(q.pop_head(|s, _| s), Some(far));
        assert_eq!(hold(&mut q, 102), Err(Refusal::Duplicate), "skipped");
    }

    /// Goal: a book snapshot's cover drops the held packets before it, missing or held, and
    /// the stream goes on from there with its buffers reused.
    #[test]
    fn a_discard_drops_what_a_snapshot_covers() {
        let mut q = HoldQueue::new(8);
        for seq in [100, 102, 103, 106] {
            hold(&mut q, seq).unwrap();
        }
        assert_eq!(q.discard_to(104), 3);
        assert_eq!(q.next(), Some(104));
        assert_eq!(q.len(), 1);
        assert_eq!(q.first_gap(), Some((104, 106, 1060)));
        assert_eq!(hold(&mut q, 103), Err(Refusal::Duplicate), "covered");
        hold(&mut q, 104).unwrap();
        hold(&mut q, 105).unwrap();
        let order: Vec<u64> = std::iter::from_fn(|| q.pop_head(|s, _| s)).collect();
        assert_eq!(order, vec![104, 105, 106]);
        q.check_invariants();
        // Past everything held, and before anything was.
        assert_eq!(q.discard_to(200), 0);
        assert_eq!(q.next(), Some(200));
        let mut fresh = HoldQueue::new(8);
        assert_eq!(fresh.discard_to(7), 0);
        assert_eq!(fresh.next(), Some(7));
        fresh.check_invariants();
    }

    #[test]
    fn releases_in_order_and_reports_gaps() {
        let mut q = HoldQueue::new(8);
        hold(&mut q, 100).unwrap();
        hold(&mut q, 102).unwrap();
        hold(&mut q, 103).unwrap();
        assert_eq!(hold(&mut q, 102), Err(Refusal::Duplicate));
        assert_eq!(
            hold(&mut q, 99),
            Err(Refusal::Duplicate),
            "before the join point"
        );
        assert_eq!(hold(&mut q, 108), Err(Refusal::Full));
        assert_eq!(q.pop_head(|s, _| s), Some(100));
        assert!(q.head().is_none());
        assert_eq!(q.first_gap(), Some((101, 102, 1020)));
        assert_eq!(q.pop_head(|s, _| s), None, "a gap holds the rest back");
        hold(&mut q, 101).unwrap();
        assert_eq!(q.first_gap(), None);
        let order: Vec<u64> = std::iter::from_fn(|| q.pop_head(|s, _| s)).collect();
        assert_eq!(order, vec![101, 102, 103]);
        assert!(q.is_empty());
        q.check_invariants();
    }

    /// Goal: the ring grows only as far as packets land ahead, keeps the order and the gaps
    /// across a growth, still refuses at its bound, and reuses released payload buffers
    /// instead of allocating one per slot.
    #[test]
    fn grows_on_demand_and_reuses_buffers() {
        let mut q = HoldQueue::new(1000);
        assert_eq!(q.capacity(), 1024);
        assert_eq!(q.slots.len(), SLOTS_MIN);
        let fill = |seq: u64| {
            move |h: &mut Held| {
                h.bytes.extend_from_slice(&[seq as u8; 400]);
                h.sequence = seq;
            }
        };
        q.insert(5, fill(5)).unwrap();
        q.insert(7, fill(7)).unwrap();
        // 100 ahead of the head: the ring doubles until it covers it, packets keep their place.
        q.insert(105, fill(105)).unwrap();
        assert_eq!(q.slots.len(), 128);
        q.check_invariants();
        assert_eq!(q.insert(7, fill(7)), Err(Refusal::Duplicate));
        assert_eq!(q.insert(5 + 1024, fill(0)), Err(Refusal::Full));
        assert_eq!(q.pop_head(|s, h| (s, h.bytes[0])), Some((5, 5)));
        assert_eq!(q.first_gap(), Some((6, 7, 7)));
        q.insert(6, fill(6)).unwrap();
        assert_eq!(q.pop_head(|s, _| s), Some(6));
        assert_eq!(q.pop_head(|s, h| (s, h.bytes.len())), Some((7, 400)));
        assert_eq!(q.first_gap(), Some((8, 105, 105)));
        q.skip_to(105);
        assert_eq!(q.pop_head(|s, h| (s, h.bytes[0])), Some((105, 105)));
        assert!(q.is_empty());
        q.check_invariants();
        // Steady state: one packet at a time reuses the spare buffers, never more of them.
        let spare = q.spare.len();
        assert_eq!(spare, 3, "as many buffers as packets ever held at once");
        for seq in 106..2_000 {
            q.insert(seq, fill(seq)).unwrap();
            assert_eq!(q.pop_head(|s, h| (s, h.bytes[0])), Some((seq, seq as u8)));
        }
        assert_eq!(q.spare.len(), spare);
        assert_eq!(
            q.slots.len(),
            128,
            "no growth without packets further ahead"
        );
        q.check_invariants();
    }

    /// Goal: a gateway that fell further behind than the ring reaches, and holds nothing,
    /// still sees the gap it must recover (it used to see none, and refused every packet
    /// that came from then on). Method: a ring of 8 that released packet 0 and is offered
    /// packets 20 and 30 only: the gap runs to the highest refused packet and its messages'
    /// end; held packets nearer the head come first; the note goes once the head passes it.
    #[test]
    fn a_packet_too_far_ahead_still_shows_the_gap() {
        let mut q = HoldQueue::new(8);
        hold(&mut q, 0).unwrap();
        q.pop_head(|_, _| ()).unwrap();
        assert_eq!(q.first_gap(), None);
        for seq in [20, 30] {
            assert_eq!(hold(&mut q, seq), Err(Refusal::Full));
            q.note_ahead(seq, seq * 10 + 10);
        }
        q.note_ahead(25, 260);
        q.check_invariants();
        assert_eq!(q.first_gap(), Some((1, 31, 310)), "to the highest refused");
        hold(&mut q, 5).unwrap();
        assert_eq!(q.first_gap(), Some((1, 5, 50)), "a held packet is nearer");
        q.skip_to(5);
        assert_eq!(q.pop_head(|s, _| s), Some(5));
        assert_eq!(q.first_gap(), Some((6, 31, 310)));
        q.skip_to(31);
        assert_eq!(q.first_gap(), None, "passed");
        q.check_invariants();
        q.note_ahead(12, 130);
        assert_eq!(q.first_gap(), None, "behind the head: nothing to recover");
    }

    #[test]
    fn skip_moves_past_a_lost_range() {
        let mut q = HoldQueue::new(8);
        hold(&mut q, 0).unwrap();
        q.pop_head(|_, _| ()).unwrap();
        hold(&mut q, 4).unwrap();
        assert_eq!(q.first_gap(), Some((1, 4, 40)));
        q.skip_to(4);
        assert_eq!(q.pop_head(|s, _| s), Some(4));
        q.check_invariants();
    }
}
