//! The root's sequencer (DESIGN.md §4 "Sequencer at the root"), in two kinds.
//!
//! **Delay-based** ([`SequencerKind::Delay`]): every order waits at the root for at least
//! `delay` (d_s) and orders leave in generation-time order, ties broken by arrival. The head of
//! the queue (earliest generation time) leaves once it has waited `delay`; an order generated
//! later but waiting longer stays behind it, so an order that arrives up to `delay` after a
//! later-generated one still goes first. An order generated before one already released is
//! late whatever it waits: it still waits its d_s, but in a queue of its own, so that it holds
//! no other order back (it leaves counted late). With `delay = 0` the sequencer is a
//! pass-through.
//!
//! **Global-FIFO merge** ([`SequencerKind::GlobalFifo`], the authors' later version): one queue
//! per child of the root (per layer-1 node), each ordered by generation time. The sequencer
//! releases the smallest head across the child queues, and only while *every* live child
//! queue is non-empty: a child whose queue is empty might still send something older. Idle
//! senders keep their queue non-empty with heartbeat ("dummy") orders
//! ([`wire::control::Repr::OrderHeartbeat`]) every `heartbeat_interval`: a heartbeat of time
//! `t` from a child is a head like an order's, and when it is the smallest head it is
//! consumed (nothing goes to the engine). Only the child's latest heartbeat is kept: an older
//! one would be consumed before it and unblock nothing the newer one does not.
//!
//! The merge is exact (the engine sees orders in generation-time order) when every child's
//! stream is in generation-time order: a gateway's stamps are monotone, and a proxy's
//! heartbeat promises the minimum of its children's (see [`crate::proxy`]). A child that sends
//! orders out of generation order (a proxy running LOQ) is merged on what is present: its
//! queue is ordered, but an order overtaken inside the child is released late; every late
//! release is counted ([`SequencerStats::late`]).
//!
//! **A dead child** (nothing heard, neither order nor heartbeat, for `child_timeout`) no longer
//! blocks the merge: an empty, silent child is skipped, and the release is counted
//! ([`SequencerStats::released_past_silent`]). Its orders, if it comes back, are merged again
//! from then on; any generated before what was already released go out at once and are counted
//! late. Nothing is dropped. A child never heard from counts from the first thing the
//! sequencer hears from anyone, so every child gets `child_timeout` to start.
//!
//! Storage grows on demand up to `orders_max` orders (a proxy's merge stage rarely holds
//! more than a few); a full sequencer refuses an order and its node counts the drop.
//!
//! **Standby children** ([`Sequencer::with_standby`]): children a merge does not expect but
//! may get, a proxy's adopted gateways (those of the sibling it watches, which move to it when
//! that sibling dies). One is merged like any child while heard within `child_timeout`, and
//! otherwise neither blocks nor counts as skipped: silence is its normal state.
//!
//! **Merge stages at the proxies.** With the global-FIFO sequencer every proxy runs the same
//! merge over its home children before its order queue ([`crate::proxy`]), so the stream a
//! proxy sends up is in generation order when its queue keeps that order (FIFO, SimplePQ):
//! the root's merge is then exact over the whole tree.

use core::ops::Range;
use core::time::Duration;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};
use wire::ExchangeTime;

use crate::node::NodeId;
use crate::time::Instant;

/// Largest datagram the sequencer stores: an order message at the root, a whole hop datagram
/// (envelope and order) in a proxy's merge stage.
pub const SEQUENCED_BYTES_MAX: usize = crate::order_queue::ORDER_BYTES_MAX;

/// Which sequencer the root runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SequencerKind {
    /// Hold every order for d_s, release in generation-time order.
    #[default]
    Delay,
    /// Merge the child streams, releasing the smallest head while every live child queue is
    /// non-empty; idle senders emit heartbeat orders.
    GlobalFifo,
}

/// Sequencer parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SequencerConfig {
    /// Delay-based or global-FIFO merge.
    pub kind: SequencerKind,
    /// d_s: how long every order waits at the root (400 µs); delay-based only.
    #[serde(with = "humantime_serde")]
    pub delay: Duration,
    /// Orders held at most.
    pub orders_max: usize,
    /// Global FIFO: an idle gateway or proxy sends its parent a heartbeat order after this
    /// much silence on its order path (1 ms).
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// Global FIFO: a child silent this long no longer blocks the merge (5 ms).
    #[serde(with = "humantime_serde")]
    pub child_timeout: Duration,
}

impl Default for SequencerConfig {
    fn default() -> Self {
        Self {
            kind: SequencerKind::Delay,
            delay: Duration::from_micros(400),
            orders_max: 1 << 16,
            heartbeat_interval: Duration::from_millis(1),
            child_timeout: Duration::from_millis(5),
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

/// What the sequencer counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SequencerStats {
    /// Orders released.
    pub released: u64,
    /// Of those, generated before an order released earlier (out of generation order).
    pub late: u64,
    /// Heartbeat orders received (global FIFO).
    pub heartbeats: u64,
    /// Heartbeats consumed as the smallest head (global FIFO).
    pub heartbeats_consumed: u64,
    /// Releases made while skipping an empty child silent for `child_timeout` (global FIFO).
    pub released_past_silent: u64,
}

/// A heap entry: generation, arrival number, slot.
type Entry = Reverse<(ExchangeTime, u64, u32)>;

/// Two blocks of node ids, `first` then `then`, numbered densely in that order: the children
/// of a merge and its standby children (a proxy's home children and those it adopts).
#[derive(Clone, Debug)]
pub(crate) struct ChildIds {
    first: Range<u32>,
    then: Range<u32>,
}

impl ChildIds {
    pub(crate) fn new(first: Range<u32>, then: Range<u32>) -> Self {
        Self { first, then }
    }

    /// `id`'s number: its place in `first`, or `first`'s length plus its place in `then`.
    pub(crate) fn index(&self, id: NodeId) -> Option<usize> {
        if self.first.contains(&id.0) {
            Some((id.0 - self.first.start) as usize)
        } else if self.then.contains(&id.0) {
            Some(self.first.len() + (id.0 - self.then.start) as usize)
        } else {
            None
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.first.len() + self.then.len()
    }

    pub(crate) fn first_len(&self) -> usize {
        self.first.len()
    }

    /// The second block.
    pub(crate) fn then(&self) -> Range<u32> {
        self.then.clone()
    }
}

/// One child's queue in the global-FIFO merge.
#[derive(Clone, Debug, Default)]
struct ChildQueue {
    orders: BinaryHeap<Entry>,
    /// The latest heartbeat not yet consumed.
    beat: Option<ExchangeTime>,
    /// When anything (order or heartbeat) last came from the child.
    heard: Option<Instant>,
    /// A standby child: live only while heard (see [`Sequencer::with_standby`]).
    standby: bool,
}

impl ChildQueue {
    /// The head: the earliest order or the pending heartbeat, with whether it is a heartbeat.
    /// An order goes before a heartbeat of the same time.
    fn head(&self) -> Option<(ExchangeTime, bool)> {
        let order = self.orders.peek().map(|Reverse((g, _, _))| (*g, false));
        let beat = self.beat.map(|t| (t, true));
        match (order, beat) {
            (Some(o), Some(b)) => Some(o.min(b)),
            (o, b) => o.or(b),
        }
    }
}

/// The root's sequencer.
#[derive(Clone, Debug)]
pub struct Sequencer {
    config: SequencerConfig,
    /// Delay-based: every order on time.
    heap: BinaryHeap<Entry>,
    /// Delay-based: the orders that arrived late (generated before one already released),
    /// in arrival order; each still waits d_s, but behind none and in front of none.
    late: VecDeque<u32>,
    /// Global FIFO: one queue per child, then per standby child, in `ids` order.
    ids: ChildIds,
    children: Vec<ChildQueue>,
    /// Global FIFO: when the sequencer first heard anything.
    started: Option<Instant>,
    slots: Vec<Waiting>,
    free: Vec<u32>,
    arrivals: u64,
    /// Generation time of the latest order released.
    last_released: Option<ExchangeTime>,
    stats: SequencerStats,
}

impl Sequencer {
    /// An empty sequencer for the root's children `children` (node ids; used by the
    /// global-FIFO merge only).
    pub fn new(config: SequencerConfig, children: Range<u32>) -> Self {
        Self::with_standby(config, children, 0..0)
    }

    /// An empty sequencer for `children` and the standby children `standby` (ids not in
    /// `children`): a standby child is merged while it is heard within `child_timeout`, and
    /// otherwise ignored (it neither blocks the merge nor counts as skipped).
    pub fn with_standby(
        config: SequencerConfig,
        children: Range<u32>,
        standby: Range<u32>,
    ) -> Self {
        let ids = match config.kind {
            SequencerKind::Delay => ChildIds::new(0..0, 0..0),
            SequencerKind::GlobalFifo => ChildIds::new(children, standby),
        };
        let mut queues = vec![ChildQueue::default(); ids.len()];
        for queue in &mut queues[ids.first_len()..] {
            queue.standby = true;
        }
        Self {
            config,
            heap: BinaryHeap::new(),
            late: VecDeque::new(),
            ids,
            children: queues,
            started: None,
            slots: Vec::new(),
            free: Vec::new(),
            arrivals: 0,
            last_released: None,
            stats: SequencerStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SequencerConfig {
        &self.config
    }

    /// Every order waiting, in no particular order.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = &Waiting> + '_ {
        let mut free = vec![false; self.slots.len()];
        for &slot in &self.free {
            free[slot as usize] = true;
        }
        self.slots
            .iter()
            .zip(free)
            .filter_map(|(w, free)| (!free).then_some(w))
    }

    /// Orders waiting (heartbeats not counted).
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether no order waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the sequencer counted.
    pub fn stats(&self) -> &SequencerStats {
        &self.stats
    }

    /// Admits an order from child `from`; false if full, too large, or (global FIFO) `from`
    /// is not a child.
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
        let child = match self.config.kind {
            SequencerKind::Delay => None,
            SequencerKind::GlobalFifo => match self.child_index(from) {
                Some(i) => Some(i),
                None => return false,
            },
        };
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None if self.slots.len() < self.config.orders_max.max(1) => {
                self.slots.push(Waiting {
                    bytes: [0; SEQUENCED_BYTES_MAX],
                    len: 0,
                    arrival: Instant::ZERO,
                    generation: ExchangeTime::ZERO,
                    from: NodeId(0),
                });
                (self.slots.len() - 1) as u32
            }
            None => return false,
        };
        // An order generated before one already released is late whatever it waits (a
        // gateway's resend after a failover, generated up to `parent_timeout` ago). In the
        // heap it would be the head and hold every order behind it for its d_s; a stream of
        // them stalled the sequencer for their whole resend and then released one batch too
        // big for the root's outbox (`sim/tests/inbound.rs::a_dead_proxy_costs_no_order`).
        let late = self.config.kind == SequencerKind::Delay
            && self.last_released.is_some_and(|last| generation < last);
        let w = &mut self.slots[slot as usize];
        w.bytes[..order.len()].copy_from_slice(order);
        w.len = order.len() as u8;
        w.arrival = now;
        w.generation = generation;
        w.from = from;
        self.arrivals += 1;
        let entry = Reverse((generation, self.arrivals, slot));
        match child {
            None if late => self.late.push_back(slot),
            None => self.heap.push(entry),
            Some(i) => {
                self.hear(now, i);
                self.children[i].orders.push(entry);
            }
        }
        true
    }

    /// A heartbeat order from child `from` promising nothing generated before `time` (global
    /// FIFO); false (ignored) for a delay-based sequencer or a stranger.
    pub fn push_heartbeat(&mut self, now: Instant, from: NodeId, time: ExchangeTime) -> bool {
        let Some(i) = self.child_index(from) else {
            return false;
        };
        self.stats.heartbeats += 1;
        self.hear(now, i);
        let child = &mut self.children[i];
        child.beat = Some(child.beat.map_or(time, |b| b.max(time)));
        true
    }

    /// When to call [`Sequencer::pop_ready`] next, if an order waits: for the delay-based
    /// sequencer when the head has waited d_s; for the merge, once every silent child that
    /// blocks it has timed out (a blocking child that speaks up first unblocks it through
    /// `push`/`push_heartbeat`).
    pub fn next_release(&self) -> Option<Instant> {
        match self.config.kind {
            SequencerKind::Delay => {
                let due = |slot: u32| self.slots[slot as usize].arrival + self.config.delay;
                let head = self.heap.peek().map(|Reverse((_, _, slot))| due(*slot));
                let late = self.late.front().map(|&slot| due(slot));
                head.into_iter().chain(late).min()
            }
            SequencerKind::GlobalFifo => {
                if self.is_empty() {
                    return None;
                }
                let timeout = self.config.child_timeout;
                let blockers = self
                    .children
                    .iter()
                    .filter(|c| c.head().is_none() && (!c.standby || c.heard.is_some()))
                    .map(|c| self.heard(c) + timeout)
                    .max();
                Some(blockers.unwrap_or(Instant::ZERO))
            }
        }
    }

    /// Releases the next order if it may leave at `now`, handing it to `f`.
    pub fn pop_ready<R>(&mut self, now: Instant, f: impl FnOnce(&Waiting) -> R) -> Option<R> {
        let slot = match self.config.kind {
            SequencerKind::Delay => {
                if self.next_release()? > now {
                    return None;
                }
                // A late order that is due goes first: it was generated before anything
                // still waiting on time.
                let slot = match self.late.front() {
                    Some(&slot) if self.slots[slot as usize].arrival + self.config.delay <= now => {
                        self.late.pop_front();
                        slot
                    }
                    _ => self.heap.pop()?.0.2,
                };
                debug_assert!(
                    now.saturating_duration_since(self.slots[slot as usize].arrival)
                        >= self.config.delay,
                    "never early"
                );
                slot
            }
            SequencerKind::GlobalFifo => self.pop_merge(now)?,
        };
        let w = &self.slots[slot as usize];
        let generation = w.generation;
        let result = f(w);
        self.free.push(slot);
        self.stats.released += 1;
        if self.last_released.is_some_and(|g| generation < g) {
            self.stats.late += 1;
        }
        self.last_released = Some(self.last_released.map_or(generation, |g| g.max(generation)));
        Some(result)
    }

    /// The earliest generation time of an order waiting (heartbeats not counted).
    pub fn earliest_waiting(&self) -> Option<ExchangeTime> {
        let head = |h: &BinaryHeap<Entry>| h.peek().map(|Reverse((g, _, _))| *g);
        match self.config.kind {
            SequencerKind::Delay => {
                let late = self
                    .late
                    .iter()
                    .map(|&slot| self.slots[slot as usize].generation);
                head(&self.heap).into_iter().chain(late).min()
            }
            SequencerKind::GlobalFifo => self.children.iter().filter_map(|c| head(&c.orders)).min(),
        }
    }

    /// The latest generation time released so far.
    pub fn last_released(&self) -> Option<ExchangeTime> {
        self.last_released
    }

    /// Global FIFO: consumes heartbeats that are the smallest head until an order is, and
    /// takes it; `None` while a live child's queue is empty (or nothing waits).
    fn pop_merge(&mut self, now: Instant) -> Option<u32> {
        loop {
            let mut best: Option<((ExchangeTime, bool), usize)> = None;
            let mut skipped_silent = false;
            for (i, child) in self.children.iter().enumerate() {
                match child.head() {
                    None if self.is_live(child, now) => return None,
                    None if child.standby => {}
                    None => skipped_silent = true,
                    Some(head) => {
                        if best.is_none_or(|(b, _)| head < b) {
                            best = Some((head, i));
                        }
                    }
                }
            }
            let ((_, is_beat), i) = best?;
            let child = &mut self.children[i];
            if is_beat {
                child.beat = None;
                self.stats.heartbeats_consumed += 1;
                continue;
            }
            let Reverse((_, _, slot)) = child.orders.pop().expect("the head is an order");
            if skipped_silent {
                self.stats.released_past_silent += 1;
            }
            return Some(slot);
        }
    }

    fn child_index(&self, from: NodeId) -> Option<usize> {
        self.ids.index(from)
    }

    fn hear(&mut self, now: Instant, i: usize) {
        self.started.get_or_insert(now);
        self.children[i].heard = Some(now);
    }

    /// Global FIFO: whether an expected child never heard from is still waited for (it has
    /// `child_timeout` from the start): nothing can be promised for it yet.
    pub fn waits_for_unheard(&self, now: Instant) -> bool {
        self.children
            .iter()
            .any(|c| !c.standby && c.heard.is_none() && self.is_live(c, now))
    }

    /// When `child` was last heard, or when the sequencer started if never.
    fn heard(&self, child: &ChildQueue) -> Instant {
        child.heard.or(self.started).unwrap_or(Instant::ZERO)
    }

    /// Heard within `child_timeout` (an expected child never heard counts from the start; a
    /// standby child never heard is not live).
    fn is_live(&self, child: &ChildQueue, now: Instant) -> bool {
        if child.standby && child.heard.is_none() {
            return false;
        }
        now.saturating_duration_since(self.heard(child)) < self.config.child_timeout
    }

    /// Asserts the bookkeeping (O(n)).
    pub fn check_invariants(&self) {
        let queued: usize = self.heap.len()
            + self.late.len()
            + self.children.iter().map(|c| c.orders.len()).sum::<usize>();
        assert_eq!(queued, self.len(), "every taken slot is queued once");
        assert!(self.free.len() <= self.slots.len());
        if self.config.kind == SequencerKind::Delay {
            assert!(self.children.is_empty());
        } else {
            assert!(self.heap.is_empty() && self.late.is_empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn t(us: u64) -> Instant {
        Instant::from_nanos(us * 1_000)
    }

    fn delay(delay: Duration, orders_max: usize) -> Sequencer {
        let config = SequencerConfig {
            delay,
            orders_max,
            ..SequencerConfig::default()
        };
        Sequencer::new(config, 1..3)
    }

    fn fifo(children: Range<u32>) -> Sequencer {
        let config = SequencerConfig {
            kind: SequencerKind::GlobalFifo,
            orders_max: 1024,
            ..SequencerConfig::default()
        };
        Sequencer::new(config, children)
    }

    fn drain(s: &mut Sequencer, now: Instant) -> Vec<u8> {
        let out: Vec<u8> = std::iter::from_fn(|| s.pop_ready(now, |w| w.order()[0])).collect();
        s.check_invariants();
        out
    }

    /// Goal: a merge says it still waits for an expected child never heard from, until that
    /// child is heard or `child_timeout` after the first thing heard (a proxy then promises
    /// nothing upstream); a standby child never heard is not waited for.
    #[test]
    fn an_unheard_child_is_waited_for_until_heard_or_timed_out() {
        let config = SequencerConfig {
            kind: SequencerKind::GlobalFifo,
            ..SequencerConfig::default()
        };
        let timeout = config.child_timeout;
        let t0 = Instant::from_nanos(1_000_000);
        let mut s = Sequencer::with_standby(config, 1..3, 3..5);
        assert!(s.push_heartbeat(t0, NodeId(1), ExchangeTime(10)));
        assert!(s.waits_for_unheard(t0), "child 2 may still send anything");
        assert!(!s.waits_for_unheard(t0 + timeout), "given up on");
        assert!(s.push_heartbeat(t0, NodeId(2), ExchangeTime(10)));
        assert!(
            !s.waits_for_unheard(t0),
            "heard; the standby ones are not waited for"
        );
    }

    /// Goal: never before d_s, always in generation-time order among the orders present.
    #[test]
    fn waits_delay_and_orders_by_generation() {
        let mut s = delay(400 * US, 8);
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
        assert_eq!(s.stats().late, 0);
    }

    /// Goal: an order generated before one already released (a resend after a failover)
    /// still waits its d_s, but holds no order back, and leaves counted late; late orders
    /// arriving one after another never stall the others. Method: 100 is released; then an
    /// order on time (300) and a stream of late ones (50, 60, 70, each 100 µs apart).
    #[test]
    fn a_late_order_waits_its_delay_but_holds_no_one_back() {
        let mut s = delay(400 * US, 16);
        assert!(s.push(t(0), NodeId(1), ExchangeTime(100), &[1]));
        assert_eq!(drain(&mut s, t(400)), vec![1]);
        assert!(s.push(t(1_000), NodeId(1), ExchangeTime(300), &[3]));
        assert!(s.push(t(1_100), NodeId(2), ExchangeTime(50), &[5]));
        assert!(s.push(t(1_200), NodeId(2), ExchangeTime(60), &[6]));
        assert!(s.push(t(1_300), NodeId(2), ExchangeTime(70), &[7]));
        assert_eq!(s.earliest_waiting(), Some(ExchangeTime(50)));
        assert_eq!(
            drain(&mut s, t(1_400)),
            vec![3],
            "on time after its d_s, whatever came late behind it"
        );
        assert_eq!(
            drain(&mut s, t(1_499)),
            vec![],
            "each late one still waits d_s"
        );
        assert_eq!(drain(&mut s, t(1_500)), vec![5]);
        assert_eq!(s.next_release(), Some(t(1_600)));
        assert_eq!(drain(&mut s, t(1_700)), vec![6, 7]);
        assert_eq!(s.stats().late, 3);
        assert!(s.is_empty());
    }

    #[test]
    fn zero_delay_passes_through_and_bounds() {
        let mut s = delay(Duration::ZERO, 1);
        assert!(s.push(t(5), NodeId(1), ExchangeTime(1), &[1]));
        assert!(!s.push(t(5), NodeId(1), ExchangeTime(2), &[2]), "full");
        let too_large = [0; SEQUENCED_BYTES_MAX + 1];
        assert!(!delay(US, 4).push(t(0), NodeId(1), ExchangeTime(0), &too_large));
        assert!(delay(US, 4).push(t(0), NodeId(1), ExchangeTime(0), &too_large[1..]));
        assert_eq!(s.pop_ready(t(5), |w| w.from), Some(NodeId(1)));
        assert!(
            !s.push_heartbeat(t(6), NodeId(1), ExchangeTime(9)),
            "no heartbeats without the merge"
        );
    }

    /// Goal: the merge releases nothing while a live child's queue is empty, then the
    /// smallest head first; a heartbeat counts as a head and is consumed, never released.
    #[test]
    fn merge_waits_for_every_child_and_takes_the_smallest_head() {
        let mut s = fifo(1..4);
        assert!(s.push(t(10), NodeId(1), ExchangeTime(300), &[3]));
        assert!(s.push(t(11), NodeId(2), ExchangeTime(100), &[1]));
        assert_eq!(drain(&mut s, t(12)), Vec::<u8>::new(), "child 3 is empty");
        assert_eq!(s.next_release(), Some(t(10) + Duration::from_millis(5)));
        assert!(s.push_heartbeat(t(13), NodeId(3), ExchangeTime(200)));
        // 100 (child 2) goes; then child 2 is empty and blocks again.
        assert_eq!(drain(&mut s, t(13)), vec![1]);
        assert!(s.push(t(14), NodeId(2), ExchangeTime(250), &[2]));
        // Heads 300, 250, heartbeat 200: the heartbeat is consumed and child 3 blocks.
        assert_eq!(drain(&mut s, t(14)), Vec::<u8>::new());
        assert_eq!(s.stats().heartbeats_consumed, 1);
        assert!(s.push_heartbeat(t(15), NodeId(3), ExchangeTime(400)));
        assert!(s.push_heartbeat(t(15), NodeId(2), ExchangeTime(400)));
        assert_eq!(drain(&mut s, t(15)), vec![2, 3]);
        assert_eq!(s.stats().late, 0);
        assert_eq!(s.stats().released, 3);
        assert!(
            !s.push(t(16), NodeId(4), ExchangeTime(1), &[9]),
            "not a child"
        );
        assert!(!s.push_heartbeat(t(16), NodeId(0), ExchangeTime(1)));
    }

    /// Goal: with every child's stream in generation order, the merge never releases out of
    /// generation-time order across children, whatever the interleaving of arrivals, and it
    /// progresses on heartbeats alone when children go idle. Method: 4 children send random
    /// sorted streams of orders and heartbeats (a child idles with heartbeats for stretches),
    /// arrivals interleave at random; a final heartbeat from everyone flushes the rest.
    #[test]
    fn merge_keeps_generation_order_across_children() {
        for seed in 0..50 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut s = fifo(10..14);
            let mut clock = [0u64; 4];
            let mut out = Vec::new();
            let mut sent = 0;
            for step in 0..2_000u64 {
                let c = rng.gen_range(0..4usize);
                clock[c] += rng.gen_range(0..50);
                let from = NodeId(10 + c as u32);
                let now = t(step);
                if rng.gen_bool(0.3) {
                    assert!(s.push_heartbeat(now, from, ExchangeTime(clock[c])));
                } else {
                    let id = (sent % 250) as u8;
                    assert!(s.push(now, from, ExchangeTime(clock[c]), &[id, c as u8]));
                    sent += 1;
                }
                while let Some(g) = s.pop_ready(now, |w| w.generation) {
                    out.push(g);
                }
            }
            let end = clock.iter().max().unwrap() + 1;
            for c in 0..4 {
                assert!(s.push_heartbeat(t(2_000), NodeId(10 + c), ExchangeTime(end)));
            }
            while let Some(g) = s.pop_ready(t(2_000), |w| w.generation) {
                out.push(g);
            }
            assert_eq!(out.len(), sent as usize, "seed {seed}: everything released");
            assert!(
                out.windows(2).all(|w| w[0] <= w[1]),
                "seed {seed}: in order"
            );
            assert_eq!(s.stats().late, 0);
            assert_eq!(s.stats().released_past_silent, 0);
            s.check_invariants();
        }
    }

    /// Goal: a dead child (silent for `child_timeout`) stops blocking the merge; its orders,
    /// if it comes back, are released (never dropped) and counted late when older than what
    /// already went.
    #[test]
    fn dead_child_is_skipped_after_its_timeout() {
        let mut s = fifo(1..3);
        assert!(s.push_heartbeat(t(0), NodeId(2), ExchangeTime(0)));
        assert!(s.push(t(100), NodeId(1), ExchangeTime(1_000_000), &[1]));
        assert_eq!(drain(&mut s, t(100)), vec![], "child 2 is live and empty");
        let timeout = s.config().child_timeout;
        assert_eq!(s.next_release(), Some(t(0) + timeout));
        assert_eq!(drain(&mut s, t(0) + timeout - US), vec![]);
        assert_eq!(drain(&mut s, t(0) + timeout), vec![1], "child 2 timed out");
        assert_eq!(s.stats().released_past_silent, 1);
        // Child 2 comes back with an order generated before the one released.
        assert!(s.push(t(6_000), NodeId(2), ExchangeTime(900_000), &[2]));
        assert!(s.push_heartbeat(t(6_000), NodeId(1), ExchangeTime(2_000_000)));
        assert_eq!(drain(&mut s, t(6_000)), vec![2]);
        assert_eq!(s.stats().late, 1, "released, and counted out of order");
        assert_eq!(s.next_release(), None, "nothing waits");
    }

    /// Goal: a standby child (a gateway that may fail over to this proxy) is ignored while
    /// silent, neither blocking nor counted as skipped, merged like any child while it sends,
    /// and ignored again once silent for `child_timeout`. Method: children 1..3 expected,
    /// 7..9 standby; child 8 speaks for a while.
    #[test]
    fn standby_children_are_merged_only_while_heard() {
        let config = SequencerConfig {
            kind: SequencerKind::GlobalFifo,
            orders_max: 1024,
            ..SequencerConfig::default()
        };
        let mut s = Sequencer::with_standby(config, 1..3, 7..9);
        assert!(
            !s.push(t(0), NodeId(3), ExchangeTime(1), &[0]),
            "not a child"
        );
        assert!(s.push(t(0), NodeId(1), ExchangeTime(10), &[1]));
        assert!(s.push_heartbeat(t(0), NodeId(2), ExchangeTime(20)));
        assert_eq!(
            drain(&mut s, t(0)),
            vec![1],
            "silent standby children do not block"
        );
        assert_eq!(s.next_release(), None);
        // Child 8 fails over here: from now on the merge waits for it too.
        assert!(s.push(t(100), NodeId(8), ExchangeTime(40), &[8]));
        assert!(s.push(t(100), NodeId(1), ExchangeTime(30), &[2]));
        assert!(s.push(t(100), NodeId(2), ExchangeTime(35), &[3]));
        assert!(s.push(t(100), NodeId(1), ExchangeTime(50), &[4]));
        assert!(s.push_heartbeat(t(100), NodeId(2), ExchangeTime(60)));
        assert_eq!(
            drain(&mut s, t(100)),
            vec![2, 3, 8],
            "8 waits for nobody older"
        );
        assert_eq!(
            drain(&mut s, t(101)),
            vec![],
            "live child 8 may still send before 50"
        );
        assert!(s.push_heartbeat(t(200), NodeId(8), ExchangeTime(55)));
        assert_eq!(drain(&mut s, t(200)), vec![4]);
        // Child 8 goes back home: once silent for the timeout it is ignored again.
        let timeout = s.config().child_timeout;
        assert!(s.push(t(300), NodeId(1), ExchangeTime(70), &[5]));
        assert!(s.push_heartbeat(t(300), NodeId(2), ExchangeTime(80)));
        assert_eq!(
            drain(&mut s, t(300)),
            vec![],
            "child 8 is live until its timeout"
        );
        assert_eq!(s.next_release(), Some(t(200) + timeout));
        assert_eq!(drain(&mut s, t(200) + timeout), vec![5]);
        assert_eq!(
            s.stats().released_past_silent,
            0,
            "a standby child is never missed"
        );
        assert_eq!(s.stats().late, 0);
        s.check_invariants();
    }

    /// Goal: a sequencer no child has spoken to yet gives every child `child_timeout` from the
    /// first thing it hears.
    #[test]
    fn unheard_children_get_a_grace_period() {
        let mut s = fifo(1..3);
        assert!(s.push(t(1_000), NodeId(1), ExchangeTime(5), &[1]));
        assert_eq!(drain(&mut s, t(1_000) + Duration::from_millis(4)), vec![]);
        assert_eq!(drain(&mut s, t(1_000) + Duration::from_millis(5)), vec![1]);
    }
}
