//! Hold-and-release at a gateway (DESIGN.md §4 "Hold-and-release").
//!
//! Packets are held in a ring indexed by their dense packet sequence number. The head of the
//! ring (the next packet to release) leaves when the gateway's exchange clock reaches its
//! deadline; a packet whose
//! deadline has already passed when it arrives leaves at once and is counted late. Release is
//! strictly in sequence order: a missing packet holds back everything behind it until it is
//! recovered (counted late) or skipped because the rewinder no longer has it.
//!
//! Held payloads are copied into per-slot buffers that keep their capacity, so a gateway in
//! steady state allocates nothing.

use wire::ExchangeTime;

use crate::time::Instant;

/// One held packet.
#[derive(Clone, Debug, Default)]
pub struct Held {
    /// The packet's bytes.
    pub bytes: Vec<u8>,
    /// The release deadline the root set, in exchange time. The local release instant is
    /// derived from it at each check, so a clock correction during the hold is honoured.
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
    occupied: bool,
}

/// Why [`HoldQueue::insert`] refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Already released or already held.
    Duplicate,
    /// Too far ahead of the next packet to release: the ring is full.
    Full,
}

/// The ring of held packets.
#[derive(Clone, Debug)]
pub struct HoldQueue {
    slots: Vec<Held>,
    /// The packet sequence number to release next; `None` until the first packet arrives.
    next: Option<u64>,
    /// Highest packet sequence number held, if any is held.
    highest: Option<u64>,
    held: usize,
}

impl HoldQueue {
    /// A queue holding packets up to `held_max` (rounded up to a power of two) ahead of the
    /// next one to release.
    pub fn new(held_max: usize) -> Self {
        let size = held_max.max(2).next_power_of_two();
        Self {
            slots: vec![Held::default(); size],
            next: None,
            highest: None,
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

    /// Holds a packet. `fill` copies its fields into the slot.
    pub fn insert(&mut self, packet_seq: u64, fill: impl FnOnce(&mut Held)) -> Result<(), Refusal> {
        self.start_at(packet_seq);
        let next = self.next.unwrap_or(packet_seq);
        if packet_seq < next {
            return Err(Refusal::Duplicate);
        }
        if packet_seq - next >= self.slots.len() as u64 {
            return Err(Refusal::Full);
        }
        let mask = self.slots.len() as u64 - 1;
        let slot = &mut self.slots[(packet_seq & mask) as usize];
        if slot.occupied {
            return Err(Refusal::Duplicate);
        }
        fill(slot);
        slot.occupied = true;
        self.held += 1;
        self.highest = Some(self.highest.map_or(packet_seq, |h| h.max(packet_seq)));
        Ok(())
    }

    /// The head packet if it is present.
    pub fn head(&self) -> Option<&Held> {
        let next = self.next?;
        let slot = &self.slots[(next & (self.slots.len() as u64 - 1)) as usize];
        slot.occupied.then_some(slot)
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
        self.held -= 1;
        self.next = Some(next + 1);
        if self.held == 0 {
            self.highest = None;
        }
        Some(result)
    }

    /// The first gap: the missing packet range `[from, to)` between the head and the first
    /// held packet behind it, with that packet's MoldUDP64 sequence (the end of the missing
    /// message range).
    pub fn first_gap(&self) -> Option<(u64, u64, u64)> {
        let next = self.next?;
        let highest = self.highest?;
        if self.head().is_some() {
            return None;
        }
        let mask = self.slots.len() as u64 - 1;
        (next + 1..=highest).find_map(|s| {
            let slot = &self.slots[(s & mask) as usize];
            slot.occupied.then_some((next, s, slot.sequence))
        })
    }

    /// Skips the missing head range `[next, to)` (the rewinder no longer has it).
    pub fn skip_to(&mut self, to: u64) {
        if let Some(next) = self.next {
            assert!(self.head().is_none(), "only missing packets are skipped");
            let to = to.max(next);
            let mask = self.slots.len() as u64 - 1;
            for s in next..to {
                assert!(
                    !self.slots[(s & mask) as usize].occupied,
                    "skipping a held packet"
                );
            }
            self.next = Some(to);
        }
    }

    /// Asserts the ring's bookkeeping (O(size); for tests and debug builds).
    pub fn check_invariants(&self) {
        let occupied = self.slots.iter().filter(|s| s.occupied).count();
        assert_eq!(occupied, self.held);
        if let (Some(next), Some(highest)) = (self.next, self.highest) {
            assert!(highest >= next);
            assert!(highest - next < self.slots.len() as u64);
        }
        if self.held == 0 {
            assert!(self.highest.is_none());
        }
    }
}

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
