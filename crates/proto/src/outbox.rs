//! A node's bounded queue of datagrams waiting for `poll_transmit`.
//!
//! Each entry is one payload with its ordered destination list (a fan-out is one entry). The
//! front entry is *lent* to the driver by [`Outbox::poll`] and recycled on the next call, so
//! payload and destination buffers keep their capacity and steady state allocates nothing.

use std::collections::VecDeque;

use crate::node::{NodeId, Transmit};

/// Largest datagram a node writes.
pub const DATAGRAM_MAX: usize = 1500;

#[derive(Clone, Debug, Default)]
struct Entry {
    /// [`DATAGRAM_MAX`] bytes once used; the datagram is the first `len`.
    payload: Vec<u8>,
    len: usize,
    destinations: Vec<NodeId>,
}

/// The outbox.
#[derive(Clone, Debug)]
pub struct Outbox {
    queue: VecDeque<Entry>,
    pool: Vec<Entry>,
    lent: bool,
    /// Urgent entries at the front of the queue, not lent yet (they keep their own order).
    urgent: usize,
    entries_max: usize,
}

impl Outbox {
    /// An outbox holding at most `entries_max` datagrams.
    pub fn new(entries_max: usize) -> Self {
        assert!(entries_max > 0);
        Self {
            // Grows on demand up to the bound. Most nodes queue a handful, and a small ring
            // keeps reusing the same few cache lines: with 64 slots (3.5 KB) every push wrote
            // a cold line, the largest cost of `push_urgent` in the N = 1000 simulation.
            queue: VecDeque::new(),
            pool: Vec::new(),
            lent: false,
            urgent: 0,
            entries_max,
        }
    }

    /// Queues one datagram for `destinations`; `write` fills the buffer and returns the length
    /// written (0 cancels). Returns false when the outbox is full (the caller counts the drop).
    pub fn push(
        &mut self,
        destinations: &[NodeId],
        write: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        self.recycle_lent();
        if self.queue.len() >= self.entries_max || destinations.is_empty() {
            return destinations.is_empty();
        }
        let mut entry = self.pool.pop().unwrap_or_default();
        // A recycled buffer keeps its old bytes: `write` owns the first `len` bytes it returns
        // and must write every one of them (zero-filling 1,500 bytes per datagram showed in the
        // simulator's profile). Debug builds poison the buffer so a writer that relies on
        // zeros fails its tests.
        if entry.payload.len() != DATAGRAM_MAX {
            entry.payload.resize(DATAGRAM_MAX, 0);
        }
        if cfg!(debug_assertions) {
            entry.payload.fill(0xA5);
        }
        let len = write(&mut entry.payload);
        assert!(len <= DATAGRAM_MAX);
        if len == 0 {
            self.pool.push(entry);
            return true;
        }
        entry.len = len;
        entry.destinations.clear();
        entry.destinations.extend_from_slice(destinations);
        self.queue.push_back(entry);
        true
    }

    /// Queues one datagram ahead of everything not yet lent out but behind earlier urgent
    /// ones: for control messages whose timestamps must not wait behind a fan-out (clock
    /// probes and their replies; a probe pair must leave in the order it was pushed).
    pub fn push_urgent(
        &mut self,
        destinations: &[NodeId],
        write: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        if !self.push(destinations, write) {
            return false;
        }
        // `push` recycled any lent entry, so the urgent ones are the first `urgent`.
        if let Some(entry) = self.queue.pop_back() {
            let at = self.urgent.min(self.queue.len());
            self.queue.insert(at, entry);
            self.urgent = at + 1;
        }
        true
    }

    /// Lends the next datagram to the driver.
    pub fn poll(&mut self) -> Option<Transmit<'_>> {
        self.recycle_lent();
        let entry = self.queue.front()?;
        self.lent = true;
        self.urgent = self.urgent.saturating_sub(1);
        Some(Transmit {
            destinations: &entry.destinations,
            payload: &entry.payload[..entry.len],
        })
    }

    /// Datagrams waiting (including one lent out).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    fn recycle_lent(&mut self) {
        if self.lent {
            self.lent = false;
            if let Some(entry) = self.queue.pop_front() {
                self.pool.push(entry);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lends_in_order_and_bounds() {
        let mut o = Outbox::new(2);
        assert!(o.push(&[NodeId(1), NodeId(2)], |b| {
            b[0] = 7;
            1
        }));
        assert!(o.push(&[NodeId(3)], |b| {
            b[..2].copy_from_slice(&[8, 9]);
            2
        }));
        assert!(!o.push(&[NodeId(4)], |_| 1), "full");
        let t = o.poll().unwrap();
        assert_eq!(
            (t.destinations, t.payload),
            (&[NodeId(1), NodeId(2)][..], &[7u8][..])
        );
        let t = o.poll().unwrap();
        assert_eq!(
            (t.destinations, t.payload),
            (&[NodeId(3)][..], &[8u8, 9][..])
        );
        assert!(o.poll().is_none());
        assert!(o.is_empty());
    }

    #[test]
    fn urgent_goes_ahead_of_queued_but_not_of_lent() {
        let mut o = Outbox::new(4);
        for b in [1u8, 2] {
            assert!(o.push(&[NodeId(1)], |buf| {
                buf[0] = b;
                1
            }));
        }
        assert_eq!(o.poll().unwrap().payload, &[1]);
        assert!(o.push_urgent(&[NodeId(1)], |buf| {
            buf[0] = 9;
            1
        }));
        assert_eq!(o.poll().unwrap().payload, &[9]);
        assert_eq!(o.poll().unwrap().payload, &[2]);
    }

    #[test]
    fn urgent_ones_keep_their_order() {
        let mut o = Outbox::new(8);
        let push = |o: &mut Outbox, b: u8, urgent: bool| {
            let write = |buf: &mut [u8]| {
                buf[0] = b;
                1
            };
            assert!(if urgent {
                o.push_urgent(&[NodeId(1)], write)
            } else {
                o.push(&[NodeId(1)], write)
            });
        };
        push(&mut o, 1, false);
        push(&mut o, 2, false);
        assert_eq!(o.poll().unwrap().payload, &[1]);
        // A probe pair, then a later urgent one after one of the pair left.
        push(&mut o, 10, true);
        push(&mut o, 11, true);
        push(&mut o, 3, false);
        assert_eq!(o.poll().unwrap().payload, &[10]);
        push(&mut o, 12, true);
        let order: Vec<u8> = core::iter::from_fn(|| o.poll().map(|t| t.payload[0])).collect();
        assert_eq!(order, [11, 12, 2, 3]);
    }
}
