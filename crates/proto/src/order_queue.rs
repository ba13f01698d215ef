//! The order queue at a proxy (DESIGN.md §4 "Queues at proxies").
//!
//! Pacing holds orders back during a burst; the queue decides which go first:
//!
//! - **FIFO**: arrival order.
//! - **SimplePQ**: generation time, earliest first.
//! - **LOQ** (Limit Order Queue): one priority queue for bids (price descending, then
//!   generation time ascending) and one for asks (price ascending, then generation time),
//!   dequeued round-robin; the orders most likely to trade go first, and no mid-price is
//!   needed. Market orders rank above every limit price. Cancels and replaces carry no side,
//!   so under LOQ they travel in an express lane ahead of both books (they only ever reduce
//!   or move liquidity, and a stale cancel helps no one).
//!
//! Ties break by arrival number, so the same inputs pop in the same order every run. The
//! queue holds at most `orders_max` orders, in storage allocated up front.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};
use wire::order::{OrderType, Repr};
use wire::{ExchangeTime, Side};

/// Largest datagram the queue stores (a hop envelope around the largest upward message).
pub const ORDER_BYTES_MAX: usize = 72;

/// Which order goes first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Discipline {
    /// Arrival order.
    Fifo,
    /// Earliest generation time first.
    SimplePq,
    /// The Limit Order Queue.
    #[default]
    Loq,
}

/// What the queue needs to know about an order to rank it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    /// The gateway's generation time.
    pub generation: ExchangeTime,
    /// Side and price for an enter; `None` for cancels and replaces.
    pub book: Option<(Side, u64)>,
}

impl Rank {
    /// The rank of an upward order message. A market order ranks above any limit price.
    pub fn of(order: &Repr) -> Self {
        let generation = order.header().time;
        let book = match order {
            Repr::Enter(e) => {
                let price = match (e.order_type, e.side) {
                    (OrderType::Market, Side::Buy) => u64::MAX,
                    (OrderType::Market, Side::Sell) => 0,
                    (OrderType::Limit, _) => e.price as u64,
                };
                Some((e.side, price))
            }
            _ => None,
        };
        Self { generation, book }
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    bytes: [u8; ORDER_BYTES_MAX],
    len: u8,
}

/// LOQ bid ranking, highest first: price, then earlier generation, then earlier arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct BidKey(u64, Reverse<ExchangeTime>, Reverse<u64>, u32);

/// LOQ ask ranking, highest first: lower price, then earlier generation, then earlier arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct AskKey(Reverse<u64>, Reverse<ExchangeTime>, Reverse<u64>, u32);

/// The bounded order queue.
#[derive(Clone, Debug)]
pub struct OrderQueue {
    discipline: Discipline,
    orders_max: usize,
    slots: Vec<Slot>,
    free: Vec<u32>,
    arrivals: u64,
    fifo: VecDeque<u32>,
    by_time: BinaryHeap<(Reverse<ExchangeTime>, Reverse<u64>, u32)>,
    bids: BinaryHeap<BidKey>,
    asks: BinaryHeap<AskKey>,
    bid_next: bool,
}

impl OrderQueue {
    /// A queue of at most `orders_max` orders.
    pub fn new(discipline: Discipline, orders_max: usize) -> Self {
        assert!(orders_max > 0 && orders_max < u32::MAX as usize);
        Self {
            discipline,
            // Slots and heaps grow on demand up to the bound: a proxy that queues few orders
            // should not hold `orders_max` of them (1,111 proxies at N = 10,000 in one
            // simulator process held 2 GB of empty slots).
            orders_max,
            slots: Vec::new(),
            free: Vec::new(),
            arrivals: 0,
            fifo: VecDeque::new(),
            by_time: BinaryHeap::new(),
            bids: BinaryHeap::new(),
            asks: BinaryHeap::new(),
            bid_next: true,
        }
    }

    /// The discipline.
    pub fn discipline(&self) -> Discipline {
        self.discipline
    }

    /// Orders queued.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.free.len() == self.slots.len()
    }

    /// Queues `bytes` with its rank; false (nothing queued) if full or too large.
    pub fn push(&mut self, bytes: &[u8], rank: Rank) -> bool {
        if bytes.len() > ORDER_BYTES_MAX {
            return false;
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None if self.slots.len() < self.orders_max => {
                self.slots.push(Slot {
                    bytes: [0; ORDER_BYTES_MAX],
                    len: 0,
                });
                (self.slots.len() - 1) as u32
            }
            None => return false,
        };
        let s = &mut self.slots[slot as usize];
        s.bytes[..bytes.len()].copy_from_slice(bytes);
        s.len = bytes.len() as u8;
        self.arrivals += 1;
        let arrival = Reverse(self.arrivals);
        let time = Reverse(rank.generation);
        match (self.discipline, rank.book) {
            (Discipline::Fifo, _) | (Discipline::Loq, None) => self.fifo.push_back(slot),
            (Discipline::SimplePq, _) => self.by_time.push((time, arrival, slot)),
            (Discipline::Loq, Some((Side::Buy, price))) => {
                self.bids.push(BidKey(price, time, arrival, slot))
            }
            (Discipline::Loq, Some((Side::Sell, price))) => {
                self.asks.push(AskKey(Reverse(price), time, arrival, slot))
            }
        }
        true
    }

    /// Removes the next order and hands its bytes to `f`.
    pub fn pop<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let slot = match self.discipline {
            Discipline::Fifo => self.fifo.pop_front(),
            Discipline::SimplePq => self.by_time.pop().map(|(_, _, s)| s),
            Discipline::Loq => self.fifo.pop_front().or_else(|| self.pop_book()),
        }?;
        let s = &self.slots[slot as usize];
        let result = f(&s.bytes[..s.len as usize]);
        self.free.push(slot);
        Some(result)
    }

    /// LOQ: alternate between the bid and ask queues, taking from the other when one is empty.
    fn pop_book(&mut self) -> Option<u32> {
        let bid = |q: &mut Self| q.bids.pop().map(|BidKey(_, _, _, s)| s);
        let ask = |q: &mut Self| q.asks.pop().map(|AskKey(_, _, _, s)| s);
        let slot = if self.bid_next {
            bid(self).or_else(|| ask(self))
        } else {
            ask(self).or_else(|| bid(self))
        };
        self.bid_next = !self.bid_next;
        slot
    }

    /// Asserts the bookkeeping (O(n)).
    pub fn check_invariants(&self) {
        let queued = self.fifo.len() + self.by_time.len() + self.bids.len() + self.asks.len();
        assert_eq!(queued, self.len());
        assert!(self.free.len() <= self.slots.len());
        assert!(self.slots.len() <= self.orders_max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(t: u64, book: Option<(Side, u64)>) -> Rank {
        Rank {
            generation: ExchangeTime(t),
            book,
        }
    }

    fn drain(q: &mut OrderQueue) -> Vec<u8> {
        std::iter::from_fn(|| q.pop(|b| b[0])).collect()
    }

    fn fill(q: &mut OrderQueue) {
        // id, generation, book
        let orders = [
            (1, 50, Some((Side::Buy, 100))),
            (2, 10, Some((Side::Buy, 99))),
            (3, 40, Some((Side::Sell, 103))),
            (4, 20, Some((Side::Sell, 101))),
            (5, 30, Some((Side::Buy, 100))),
            (6, 5, None),
            (7, 60, Some((Side::Sell, 101))),
            (8, 1, Some((Side::Buy, u64::MAX))),
        ];
        for (id, t, book) in orders {
            assert!(q.push(&[id], rank(t, book)));
        }
    }

    #[test]
    fn fifo_keeps_arrival_order() {
        let mut q = OrderQueue::new(Discipline::Fifo, 16);
        fill(&mut q);
        assert_eq!(drain(&mut q), vec![1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn simple_pq_orders_by_generation_time() {
        let mut q = OrderQueue::new(Discipline::SimplePq, 16);
        fill(&mut q);
        assert_eq!(drain(&mut q), vec![8, 6, 2, 4, 5, 3, 1, 7]);
    }

    /// Goal: LOQ dequeues exactly as its definition says: express lane first, then bids by
    /// price descending / time ascending and asks by price ascending / time ascending,
    /// alternating, a market buy above every bid.
    #[test]
    fn loq_dequeues_by_its_definition() {
        let mut q = OrderQueue::new(Discipline::Loq, 16);
        fill(&mut q);
        // Express: 6. Bids: 8 (market), 5 (100 @30), 1 (100 @50), 2 (99).
        // Asks: 4 (101 @20), 7 (101 @60), 3 (103).
        assert_eq!(drain(&mut q), vec![6, 8, 4, 5, 7, 1, 3, 2]);
        q.check_invariants();
    }

    #[test]
    fn bounded_and_reuses_storage() {
        let mut q = OrderQueue::new(Discipline::Loq, 2);
        assert!(q.push(&[1], rank(1, Some((Side::Buy, 1)))));
        assert!(q.push(&[2], rank(2, Some((Side::Buy, 1)))));
        assert!(!q.push(&[3], rank(3, None)), "full");
        assert!(
            !q.push(&[0; ORDER_BYTES_MAX + 1], rank(3, None)),
            "too large"
        );
        assert_eq!(q.pop(|b| b[0]), Some(1));
        assert!(q.push(&[4], rank(4, None)));
        assert_eq!(drain(&mut q), vec![4, 2]);
        assert!(q.is_empty());
    }
}
