//! The event queue: a timing wheel over `(true time, insertion sequence)` keys.
//!
//! The simulator's keys are monotone: every event is scheduled at or after the last one
//! popped, and sequence numbers only grow. Almost every event lands within a millisecond of
//! the present (a copy's flight, a receive-queue wait, a hold deadline, a probe), so the queue
//! is a calendar of fixed slots of [`SLOT_NS`] nanoseconds covering the next [`HORIZON_NS`]:
//! pushing links the entry into its slot's list (O(1), no comparison); popping takes the
//! entries of the earliest non-empty slot (found through a bitmap), sorts those few by key and
//! hands them out in order. Entries beyond the horizon (report timers, far commands) wait in a
//! binary heap and move into the wheel as it turns. The order is exactly `(at, seq)`, so a
//! run's trace does not depend on the queue (a radix heap before it gave the same traces; a
//! proptest holds it to a binary heap).
//!
//! The entries of the slot being served are kept sorted in [`EventQueue::current`]; an entry
//! pushed before that slot's end joins them in place, wherever its time falls, so no caller
//! rule beyond monotone keys is needed: [`EventQueue::pop_until`] may turn the wheel up to
//! its bound and return nothing, and the driver may still push earlier events afterwards.
//!
//! The slot lists live in one slab of nodes recycled through a free list, so a push writes a
//! node that was freed moments ago (hot in cache) instead of growing one of thousands of
//! per-slot vectors.

use core::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// Width of a slot, log2 ns: 256 ns holds a handful of events at N = 1000 and 5K msgs/s.
const SLOT_SHIFT: u32 = 8;
/// Width of a slot, ns.
const SLOT_NS: u64 = 1 << SLOT_SHIFT;
/// Slots in the wheel (a power of two).
const SLOTS: usize = 1 << 14;
/// Time the wheel covers from the end of the slot being served: ~4.2 ms.
const HORIZON_NS: u64 = SLOT_NS * SLOTS as u64;
/// No node: the end of a slot's list.
const NIL: u32 = u32::MAX;

/// A monotone min-queue of `T` keyed by `(at, seq)`; `seq` breaks ties in insertion order.
#[derive(Debug)]
pub(crate) struct EventQueue<T> {
    /// Every entry whose time is before `current_end`, sorted by key descending (the next
    /// entry is the last).
    current: Vec<Entry<T>>,
    /// End of the slot being served (a multiple of [`SLOT_NS`]). The wheel holds the entries
    /// in `[current_end, current_end + HORIZON_NS)`, `far` the later ones.
    current_end: u64,
    /// Per slot, the first node of its list in `nodes`, or [`NIL`].
    heads: Box<[u32]>,
    /// Bit `i` set when slot `i`'s list is non-empty.
    occupied: Box<[u64]>,
    /// The slab of list nodes (`None` when free).
    nodes: Vec<Node<T>>,
    /// Free nodes of the slab.
    free: Vec<u32>,
    /// Entries in the wheel.
    wheel_len: usize,
    /// Entries at or beyond the wheel's horizon.
    far: BinaryHeap<Reverse<Entry<T>>>,
    len: usize,
    /// The last key popped: every entry's key is at least this.
    floor: (u64, u64),
}

#[derive(Debug)]
struct Entry<T> {
    at: u64,
    seq: u64,
    value: T,
}

#[derive(Debug)]
struct Node<T> {
    entry: Option<Entry<T>>,
    next: u32,
}

impl<T> Entry<T> {
    fn key(&self) -> (u64, u64) {
        (self.at, self.seq)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// The wheel slot of true time `at`.
fn slot_of(at: u64) -> usize {
    (at >> SLOT_SHIFT) as usize & (SLOTS - 1)
}

impl<T> EventQueue<T> {
    pub(crate) fn new() -> Self {
        Self {
            current: Vec::new(),
            current_end: 0,
            heads: vec![NIL; SLOTS].into_boxed_slice(),
            occupied: vec![0; SLOTS / 64].into_boxed_slice(),
            nodes: Vec::new(),
            free: Vec::new(),
            wheel_len: 0,
            far: BinaryHeap::new(),
            len: 0,
            floor: (0, 0),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `value` at `(at, seq)`.
    ///
    /// # Panics
    /// If the key is below the last key popped: the simulator never schedules into the past.
    pub(crate) fn push(&mut self, at: u64, seq: u64, value: T) {
        assert!(
            (at, seq) >= self.floor,
            "event at {at} (seq {seq}) scheduled before the last popped ({} seq {})",
            self.floor.0,
            self.floor.1
        );
        self.len += 1;
        let entry = Entry { at, seq, value };
        if at < self.current_end {
            // Sorted descending: the new entry goes after every larger key.
            let key = entry.key();
            let position = self.current.partition_point(|other| other.key() > key);
            self.current.insert(position, entry);
        } else if at - self.current_end < HORIZON_NS {
            self.link(entry);
        } else {
            self.far.push(Reverse(entry));
        }
    }

    /// Links `entry` (within the horizon) into its slot's list.
    fn link(&mut self, entry: Entry<T>) {
        let slot = slot_of(entry.at);
        let next = self.heads[slot];
        let node = Node {
            entry: Some(entry),
            next,
        };
        let index = match self.free.pop() {
            Some(index) => {
                self.nodes[index as usize] = node;
                index
            }
            None => {
                let index = u32::try_from(self.nodes.len()).expect("fewer than 2^32 events");
                self.nodes.push(node);
                index
            }
        };
        self.heads[slot] = index;
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.wheel_len += 1;
    }

    /// The first non-empty slot at or after `from`, in ring order, with how many slots on.
    fn next_occupied(&self, from: usize) -> Option<(usize, usize)> {
        let words = self.occupied.len();
        let (first_word, first_bit) = (from / 64, from % 64);
        // The first word from `from`'s bit, every other word once, then the first word's
        // bits before `from` (which are a whole turn away).
        let masked = self.occupied[first_word] & (u64::MAX << first_bit);
        if masked != 0 {
            let slot = first_word * 64 + masked.trailing_zeros() as usize;
            return Some((slot, slot - from));
        }
        for step in 1..=words {
            let word = (first_word + step) % words;
            let bits = self.occupied[word];
            if bits != 0 {
                let slot = word * 64 + bits.trailing_zeros() as usize;
                return Some((slot, (slot + SLOTS - from) % SLOTS));
            }
        }
        None
    }

    /// The start time of the earliest non-empty slot of the wheel.
    fn next_slot_start(&self) -> Option<(usize, u64)> {
        let (slot, ahead) = self.next_occupied(slot_of(self.current_end))?;
        Some((slot, self.current_end + ((ahead as u64) << SLOT_SHIFT)))
    }

    /// Moves far entries that the wheel now covers into it.
    fn pull_far(&mut self) {
        while let Some(Reverse(entry)) = self.far.peek() {
            if entry.at - self.current_end >= HORIZON_NS {
                break;
            }
            let Reverse(entry) = self.far.pop().expect("peeked");
            self.link(entry);
        }
    }

    /// Makes the earliest slot the current one if it starts no later than `until`; false if
    /// there is none such (the queue is left able to take any entry at or after the floor).
    fn advance(&mut self, until: u64) -> bool {
        debug_assert!(self.current.is_empty());
        if self.wheel_len == 0 {
            let Some(Reverse(entry)) = self.far.peek() else {
                return false;
            };
            if entry.at > until {
                return false;
            }
            // Nothing before the far entries: turn the wheel to the first of them.
            self.current_end = entry.at & !(SLOT_NS - 1);
            self.pull_far();
        }
        let (slot, start) = self.next_slot_start().expect("the wheel holds an entry");
        if start > until {
            return false;
        }
        self.current_end = start + SLOT_NS;
        let mut index = core::mem::replace(&mut self.heads[slot], NIL);
        self.occupied[slot / 64] &= !(1 << (slot % 64));
        while index != NIL {
            let node = &mut self.nodes[index as usize];
            let entry = node.entry.take().expect("a linked node holds an entry");
            self.free.push(index);
            index = node.next;
            self.current.push(entry);
            self.wheel_len -= 1;
        }
        // Keys are unique: an unstable sort is deterministic.
        self.current
            .sort_unstable_by_key(|entry| Reverse(entry.key()));
        self.pull_far();
        true
    }

    /// The time of the earliest entry, without committing to it (entries earlier than it may
    /// still be pushed). The sharded driver asks every round.
    pub(crate) fn peek_time(&self) -> Option<u64> {
        if let Some(entry) = self.current.last() {
            return Some(entry.at);
        }
        if let Some((slot, _)) = self.next_slot_start() {
            let mut index = self.heads[slot];
            let mut min = u64::MAX;
            while index != NIL {
                let node = &self.nodes[index as usize];
                min = min.min(node.entry.as_ref().expect("linked").at);
                index = node.next;
            }
            return Some(min);
        }
        self.far.peek().map(|Reverse(entry)| entry.at)
    }

    /// Pops the entry with the smallest key if its time is at most `until`; otherwise returns
    /// `None` (events before the next pending one can still be pushed).
    pub(crate) fn pop_until(&mut self, until: u64) -> Option<(u64, T)> {
        loop {
            if let Some(entry) = self.current.last() {
                if entry.at > until {
                    return None;
                }
                let entry = self.current.pop().expect("checked");
                self.len -= 1;
                self.floor = entry.key();
                return Some((entry.at, entry.value));
            }
            if !self.advance(until) {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cmp::Reverse;
    use proptest::prelude::*;
    use std::collections::BinaryHeap;

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut queue = EventQueue::new();
        queue.push(5, 0, 'a');
        queue.push(3, 1, 'b');
        queue.push(5, 2, 'c');
        queue.push(3, 3, 'd');
        assert_eq!(queue.pop_until(u64::MAX), Some((3, 'b')));
        assert_eq!(queue.pop_until(u64::MAX), Some((3, 'd')));
        queue.push(4, 4, 'e');
        assert_eq!(queue.pop_until(u64::MAX), Some((4, 'e')));
        assert_eq!(queue.pop_until(u64::MAX), Some((5, 'a')));
        assert_eq!(queue.pop_until(u64::MAX), Some((5, 'c')));
        assert_eq!(queue.pop_until(u64::MAX), None);
        assert!(queue.is_empty());
    }

    #[test]
    fn peek_names_the_next_time_and_commits_to_nothing() {
        let mut queue = EventQueue::new();
        assert_eq!(queue.peek_time(), None);
        queue.push(9, 0, 'a');
        queue.push(700, 1, 'b');
        assert_eq!(queue.peek_time(), Some(9));
        queue.push(4, 2, 'c');
        assert_eq!(queue.peek_time(), Some(4));
        assert_eq!(queue.pop_until(u64::MAX), Some((4, 'c')));
        assert_eq!(queue.peek_time(), Some(9));
        assert_eq!(queue.pop_until(u64::MAX), Some((9, 'a')));
        queue.push(10, 3, 'd');
        assert_eq!(queue.peek_time(), Some(10));
    }

    #[test]
    fn a_bound_leaves_the_queue_open_to_earlier_events() {
        let mut queue = EventQueue::new();
        queue.push(100, 0, 1);
        assert_eq!(queue.pop_until(50), None);
        // The driver stopped at 50 and schedules at 60, before the pending event.
        queue.push(60, 1, 2);
        assert_eq!(queue.pop_until(100), Some((60, 2)));
        assert_eq!(queue.pop_until(99), None);
        assert_eq!(queue.pop_until(100), Some((100, 1)));
        assert_eq!(queue.len(), 0);
    }

    #[test]
    #[should_panic(expected = "scheduled before the last popped")]
    fn scheduling_into_the_past_is_refused() {
        let mut queue = EventQueue::new();
        queue.push(10, 0, ());
        queue.pop_until(10);
        queue.push(9, 1, ());
    }

    proptest! {
        /// Against a binary heap: any interleaving of pushes (at or after the time of the
        /// last pop, as the simulator schedules) and bounded pops gives the same sequence.
        /// Delays and bounds are scaled from within one slot to beyond the wheel's horizon,
        /// so entries go to the slot being served, the wheel and the far heap, and the wheel
        /// turns, wraps and jumps.
        #[test]
        fn matches_a_binary_heap(ops in proptest::collection::vec((0u8..4, 0u64..1_000, 0u64..2_000, 0usize..4), 1..400)) {
            const SCALES: [u64; 4] = [1, 300, 9_000, 40_000];
            let mut queue = EventQueue::new();
            let mut heap = BinaryHeap::new();
            let mut now = 0u64;
            let mut seq = 0u64;
            for (op, delay, bound, scale) in ops {
                let (delay, bound) = (delay * SCALES[scale], bound * SCALES[scale]);
                if op < 2 {
                    let at = now + delay;
                    queue.push(at, seq, seq);
                    heap.push(Reverse((at, seq)));
                    seq += 1;
                } else {
                    let until = now + bound;
                    let expected = match heap.peek() {
                        Some(&Reverse((at, _))) if at <= until => heap.pop().map(|Reverse((at, s))| (at, s)),
                        _ => None,
                    };
                    let got = queue.pop_until(until);
                    prop_assert_eq!(got, expected);
                    // The driver's clock: the popped event's time, else the bound it ran to
                    // (`run_until`) or where it was (`run_until_idle`).
                    let idle = if op == 2 { until } else { now };
                    now = got.map_or(idle, |(at, _)| at);
                }
                prop_assert_eq!(queue.len(), heap.len());
                prop_assert_eq!(queue.peek_time(), heap.peek().map(|&Reverse((at, _))| at));
            }
            while let Some(Reverse((at, s))) = heap.pop() {
                prop_assert_eq!(queue.pop_until(u64::MAX), Some((at, s)));
            }
            prop_assert!(queue.is_empty());
        }
    }
}
