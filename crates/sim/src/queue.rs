//! The event queue: a radix heap over `(true time, insertion sequence)` keys.
//!
//! The simulator's keys are monotone: every event is scheduled at or after the event being
//! handled, and sequence numbers only grow. A radix heap uses that: it keeps the last key
//! popped and puts every entry in the bucket named by the highest bit in which its key differs
//! from that key. Pushing is one `Vec::push`; popping takes bucket 0 when it holds the next key,
//! else rebuckets the lowest non-empty bucket around its minimum, and an entry moves to a lower
//! bucket at most once per bit. The buckets are flat vectors, so the queue walks memory in
//! order where a binary heap of the same entries jumps through a tree (the binary heap's
//! `pop` was the largest item of the N = 1000 profile).
//!
//! The `radix-heap` crate has the structure but no way to look at the next key without
//! committing to it (its `pop` moves the heap's floor to the popped key); the driver must stop
//! at `run_until`'s bound and still accept events scheduled before the next pending one, so the
//! queue is written here ([`EventQueue::pop_until`]).

/// Buckets: one for keys equal to the floor, one per bit of a 128-bit key.
const BUCKETS: usize = 129;

/// A monotone min-queue of `T` keyed by `(at, seq)`; `seq` breaks ties in insertion order.
#[derive(Debug)]
pub(crate) struct EventQueue<T> {
    /// The last key popped: every entry's key is at least this.
    floor: u128,
    buckets: Vec<Vec<Entry<T>>>,
    /// Bit `i` set when bucket `i` is non-empty: the lowest non-empty bucket is a
    /// trailing-zeros count, not a walk over 129 vector headers on every pop.
    occupied: [u64; 3],
    len: usize,
}

#[derive(Debug)]
struct Entry<T> {
    key: u128,
    value: T,
}

fn key(at: u64, seq: u64) -> u128 {
    u128::from(at) << 64 | u128::from(seq)
}

/// The bucket of `key` relative to `floor`: 0 when equal, else 1 + the highest differing bit.
fn bucket(key: u128, floor: u128) -> usize {
    (128 - (key ^ floor).leading_zeros()) as usize
}

impl<T> EventQueue<T> {
    pub(crate) fn new() -> Self {
        Self {
            floor: 0,
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            occupied: [0; 3],
            len: 0,
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
        let key = key(at, seq);
        assert!(
            key >= self.floor,
            "event at {at} (seq {seq}) scheduled before the last popped ({} seq {})",
            self.floor >> 64,
            self.floor as u64
        );
        self.insert(Entry { key, value });
        self.len += 1;
    }

    fn insert(&mut self, entry: Entry<T>) {
        let index = bucket(entry.key, self.floor);
        self.buckets[index].push(entry);
        self.occupied[index / 64] |= 1 << (index % 64);
    }

    /// The lowest non-empty bucket.
    fn lowest(&self) -> Option<usize> {
        self.occupied
            .iter()
            .enumerate()
            .find(|&(_, &bits)| bits != 0)
            .map(|(word, bits)| word * 64 + bits.trailing_zeros() as usize)
    }

    fn mark_empty(&mut self, index: usize) {
        debug_assert!(self.buckets[index].is_empty());
        self.occupied[index / 64] &= !(1 << (index % 64));
    }

    /// The time of the earliest entry, without committing to it (entries earlier than it may
    /// still be pushed). The sharded driver asks every round; the lowest non-empty bucket is
    /// scanned, which is short: it holds the entries nearest the floor.
    pub(crate) fn peek_time(&self) -> Option<u64> {
        let bucket = &self.buckets[self.lowest()?];
        bucket.iter().map(|entry| (entry.key >> 64) as u64).min()
    }

    /// Pops the entry with the smallest key if its time is at most `until`; otherwise leaves
    /// the queue as it was (so events before the next pending one can still be pushed).
    pub(crate) fn pop_until(&mut self, until: u64) -> Option<(u64, T)> {
        if self.buckets[0].is_empty() {
            let index = self.lowest()?;
            let min = self.buckets[index]
                .iter()
                .map(|entry| entry.key)
                .min()
                .expect("non-empty bucket");
            if (min >> 64) as u64 > until {
                return None;
            }
            // Rebucket around the new floor: every entry of bucket `index` shares the bits
            // above `index - 1` with the floor and so with `min`, so each lands below `index`.
            self.floor = min;
            let mut moved = core::mem::take(&mut self.buckets[index]);
            self.mark_empty(index);
            for entry in moved.drain(..) {
                debug_assert!(bucket(entry.key, min) < index);
                self.insert(entry);
            }
            // Keep the emptied vector's capacity for the bucket's next fill.
            self.buckets[index] = moved;
        }
        let head = self.buckets[0].last().expect("bucket 0 holds the floor");
        if (head.key >> 64) as u64 > until {
            return None;
        }
        // Keys are unique, so bucket 0 holds exactly one entry: the floor.
        let entry = self.buckets[0].pop().expect("checked");
        self.mark_empty(0);
        self.len -= 1;
        Some(((entry.key >> 64) as u64, entry.value))
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
        #[test]
        fn matches_a_binary_heap(ops in proptest::collection::vec((0u8..3, 0u64..1_000, 0u64..2_000), 1..400)) {
            let mut queue = EventQueue::new();
            let mut heap = BinaryHeap::new();
            let mut now = 0u64;
            let mut seq = 0u64;
            for (op, delay, bound) in ops {
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
                    // The driver's clock: the popped event's time, else the bound it ran to.
                    now = got.map_or(until, |(at, _)| at);
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
