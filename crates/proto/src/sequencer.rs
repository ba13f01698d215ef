//! The root's sequencer (DESIGN.md §4 "Sequencer at the root").
//!
//! Delay-based: every order waits at the root for at least `delay` (d_s) and orders leave in
//! generation-time order, ties broken by arrival. The head of the queue (earliest generation
//! time) leaves once it has waited `delay`; an order generated later but waiting longer stays
//! behind it, so an order that arrives up to `delay` after a later-generated one still goes
//! first. With `delay = 0` the sequencer is a pass-through.
//!
//! Storage is allocated up front (`orders_max`); a full sequencer refuses an order and the
//! root counts the drop.

use core::time::Duration;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};
use wire::ExchangeTime;

use crate::node::NodeId;
use crate::time::Instant;

/// Largest order datagram the sequencer stores.
pub const SEQUENCED_BYTES_MAX: usize = 64;

/// Sequencer parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SequencerConfig {
    /// d_s: how long every order waits at the root (400 µs).
    pub delay: Duration,
    /// Orders held at most.
    pub orders_max: usize,
}

impl Default for SequencerConfig {
    fn default() -> Self {
        Self {
            delay: Duration::from_micros(400),
            orders_max: 1 << 16,
        }
    }
}

/// One order waiting.
#[derive(Clone, Copy, Debug)]
pub struct Waiting {
    /// The order message (without its hop envelope).
    pub bytes: [u8; SEQUENCED_BYTES_MAX],
    /// Its length.
    pub len: u8,
    /// Local arrival at the root.
    pub arrival: Instant,
    /// The gateway's generation time.
    pub generation: ExchangeTime,
    /// The child it came from.
    pub from: NodeId,
}

impl Waiting {
    /// The order message.
    pub fn order(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The delay-based sequencer.
#[derive(Clone, Debug)]
pub struct Sequencer {
    config: SequencerConfig,
    heap: BinaryHeap<Reverse<(ExchangeTime, u64, u32)>>,
    slots: Vec<Waiting>,
    free: Vec<u32>,
    arrivals: u64,
    /// Generation time of the last order released.
    last_released: Option<ExchangeTime>,
}

impl Sequencer {
    /// An empty sequencer.
    pub fn new(config: SequencerConfig) -> Self {
        let n = config.orders_max.max(1);
        let empty = Waiting {
            bytes: [0; SEQUENCED_BYTES_MAX],
            len: 0,
            arrival: Instant::ZERO,
            generation: ExchangeTime::ZERO,
            from: NodeId(0),
        };
        Self {
            config,
            heap: BinaryHeap::with_capacity(n),
            slots: vec![empty; n],
            free: (0..n as u32).rev().collect(),
            arrivals: 0,
            last_released: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SequencerConfig {
        &self.config
    }

    /// Orders waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Admits an order; false if full or too large.
    pub fn push(
        &mut self,
        now: Instant,
        from: NodeId,
        generation: ExchangeTime,
        order: &[u8],
    ) -> bool {
        if order.len() > SEQUENCED_BYTES_MAX {
            return false;
        }
        let Some(slot) = self.free.pop() else {
            return false;
        };
        let w = &mut self.slots[slot as usize];
        w.bytes[..order.len()].copy_from_slice(order);
        w.len = order.len() as u8;
        w.arrival = now;
        w.generation = generation;
        w.from = from;
        self.arrivals += 1;
        self.heap.push(Reverse((generation, self.arrivals, slot)));
        true
    }

    /// When the head may leave, if anything waits.
    pub fn next_release(&self) -> Option<Instant> {
        let Reverse((_, _, slot)) = self.heap.peek()?;
        Some(self.slots[*slot as usize].arrival + self.config.delay)
    }

    /// Releases the head if it has waited `delay`, handing it to `f`.
    pub fn pop_ready<R>(&mut self, now: Instant, f: impl FnOnce(&Waiting) -> R) -> Option<R> {
        if self.next_release()? > now {
            return None;
        }
        let Reverse((generation, _, slot)) = self.heap.pop()?;
        let w = &self.slots[slot as usize];
        debug_assert!(
            now.saturating_duration_since(w.arrival) >= self.config.delay,
            "never early"
        );
        let result = f(w);
        self.free.push(slot);
        self.last_released = Some(self.last_released.map_or(generation, |g| g.max(generation)));
        Some(result)
    }

    /// The latest generation time released so far.
    pub fn last_released(&self) -> Option<ExchangeTime> {
        self.last_released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn t(us: u64) -> Instant {
        Instant::from_nanos(us * 1_000)
    }

    /// Goal: never before d_s, always in generation-time order among the orders present.
    #[test]
    fn waits_delay_and_orders_by_generation() {
        let mut s = Sequencer::new(SequencerConfig {
            delay: 400 * US,
            orders_max: 8,
        });
        assert!(s.push(t(0), NodeId(1), ExchangeTime(700), &[7]));
        assert!(s.push(t(100), NodeId(2), ExchangeTime(500), &[5]));
        assert_eq!(s.pop_ready(t(399), |w| w.order()[0]), None);
        // The order generated at 700 has waited long enough but 500, generated earlier,
        // has not: it holds the line.
        assert_eq!(s.pop_ready(t(450), |w| w.order()[0]), None);
        assert_eq!(s.next_release(), Some(t(500)));
        assert_eq!(s.pop_ready(t(500), |w| w.order()[0]), Some(5));
        assert_eq!(s.pop_ready(t(500), |w| w.order()[0]), Some(7));
        assert!(s.is_empty());
    }

    #[test]
    fn zero_delay_passes_through_and_bounds() {
        let mut s = Sequencer::new(SequencerConfig {
            delay: Duration::ZERO,
            orders_max: 1,
        });
        assert!(s.push(t(5), NodeId(1), ExchangeTime(1), &[1]));
        assert!(!s.push(t(5), NodeId(1), ExchangeTime(2), &[2]), "full");
        assert!(!Sequencer::new(SequencerConfig::default()).push(
            t(0),
            NodeId(1),
            ExchangeTime(0),
            &[0; 65]
        ));
        assert_eq!(s.pop_ready(t(5), |w| w.from), Some(NodeId(1)));
    }
}
