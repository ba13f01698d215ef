//! A participant's order book, rebuilt from the ITCH market-data stream.
//!
//! What a participant's engineer needs first, and what the checkers use to prove the stream
//! right: applying every released message in order must give, level by level, the book the
//! root's engine holds. Handles Add Order (`A`, `F`), Order Executed (`E`, `C`), Order Cancel
//! (`X`), Order Delete (`D`) and Order Replace (`U`); trade prints (`P`, `Q`) do not change
//! the book. A book snapshot's first part ([`wire::market::SNAPSHOT`], [`crate::snapshot`])
//! starts the book over: its parts hold the whole book, and the stream goes on after them.

use std::collections::BTreeMap;

use wire::Side;
use wire::itch::Message as Itch;

/// One resting order as the feed describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resting {
    locate: u16,
    side: Side,
    price: u32,
    shares: u32,
}

/// Why a message could not be applied (the stream contradicts itself or this builder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BookError {
    /// A message names an order the book does not hold.
    UnknownOrder(u64),
    /// An add reuses a live order reference.
    DuplicateOrder(u64),
    /// An execution or cancel of more shares than the order has.
    Overfill(u64),
}

/// The rebuilt book: orders by reference, and per (symbol, side) the total at each price.
#[derive(Clone, Debug, Default)]
pub struct BookBuilder {
    orders: BTreeMap<u64, Resting>,
    levels: BTreeMap<(u16, u8, u32), u64>,
    /// Messages applied.
    pub applied: u64,
}

impl BookBuilder {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one ITCH message.
    pub fn apply(&mut self, message: &Itch) -> Result<(), BookError> {
        self.applied += 1;
        match *message {
            Itch::AddOrder(a) => self.add(a.order_ref, a.stock_locate, a.side, a.price, a.shares),
            Itch::AddOrderMpid(a) => {
                self.add(a.order_ref, a.stock_locate, a.side, a.price, a.shares)
            }
            Itch::OrderExecuted(e) => self.reduce(e.order_ref, e.executed_shares),
            Itch::OrderExecutedWithPrice(e) => self.reduce(e.order_ref, e.executed_shares),
            Itch::OrderCancel(c) => self.reduce(c.order_ref, c.cancelled_shares),
            Itch::OrderDelete(d) => {
                let shares = self
                    .orders
                    .get(&d.order_ref)
                    .ok_or(BookError::UnknownOrder(d.order_ref))?
                    .shares;
                self.reduce(d.order_ref, shares)
            }
            Itch::OrderReplace(u) => {
                let old = *self
                    .orders
                    .get(&u.original_order_ref)
                    .ok_or(BookError::UnknownOrder(u.original_order_ref))?;
                self.reduce(u.original_order_ref, old.shares)?;
                self.add(u.new_order_ref, old.locate, old.side, u.price, u.shares)
            }
            _ => Ok(()),
        }
    }

    /// Applies every ITCH message of a released packet, in order; the first part of a book
    /// snapshot empties the book first.
    pub fn apply_packet(&mut self, data: &wire::MarketData<'_>) -> Result<(), BookError> {
        if data
            .header
            .snapshot_part()
            .is_some_and(|(part, _)| part == 0)
        {
            self.orders.clear();
            self.levels.clear();
        }
        for body in data.messages() {
            if let Ok(message) = Itch::parse(body) {
                self.apply(&message)?;
            }
        }
        Ok(())
    }

    fn add(
        &mut self,
        order_ref: u64,
        locate: u16,
        side: Side,
        price: u32,
        shares: u32,
    ) -> Result<(), BookError> {
        if self.orders.contains_key(&order_ref) {
            return Err(BookError::DuplicateOrder(order_ref));
        }
        self.orders.insert(
            order_ref,
            Resting {
                locate,
                side,
                price,
                shares,
            },
        );
        *self
            .levels
            .entry((locate, side.to_byte(), price))
            .or_default() += shares as u64;
        Ok(())
    }

    fn reduce(&mut self, order_ref: u64, shares: u32) -> Result<(), BookError> {
        let order = self
            .orders
            .get_mut(&order_ref)
            .ok_or(BookError::UnknownOrder(order_ref))?;
        if shares > order.shares {
            return Err(BookError::Overfill(order_ref));
        }
        order.shares -= shares;
        let key = (order.locate, order.side.to_byte(), order.price);
        if order.shares == 0 {
            self.orders.remove(&order_ref);
        }
        let level = self.levels.get_mut(&key).expect("an order's level exists");
        *level -= shares as u64;
        if *level == 0 {
            self.levels.remove(&key);
        }
        Ok(())
    }

    /// The best `levels` price levels of one side: (price, total shares), best first.
    pub fn depth(&self, locate: u16, side: Side, levels: usize) -> Vec<(u32, u64)> {
        let range = self
            .levels
            .range((locate, side.to_byte(), 0)..=(locate, side.to_byte(), u32::MAX));
        let all = range.map(|(&(_, _, price), &qty)| (price, qty));
        match side {
            Side::Buy => all.rev().take(levels).collect(),
            Side::Sell => all.take(levels).collect(),
        }
    }

    /// Resting orders.
    pub fn orders(&self) -> usize {
        self.orders.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::Stock;
    use wire::itch::{AddOrder, OrderCancel, OrderDelete, OrderExecuted, OrderReplace};

    fn add(order_ref: u64, side: Side, price: u32, shares: u32) -> Itch {
        Itch::AddOrder(AddOrder {
            stock_locate: 0,
            tracking_number: 0,
            timestamp_ns: 0,
            order_ref,
            side,
            shares,
            stock: Stock::new("X").unwrap(),
            price,
        })
    }

    #[test]
    fn applies_the_book_messages() {
        let mut b = BookBuilder::new();
        b.apply(&add(1, Side::Buy, 100, 10)).unwrap();
        b.apply(&add(2, Side::Buy, 101, 5)).unwrap();
        b.apply(&add(3, Side::Sell, 103, 7)).unwrap();
        b.apply(&add(4, Side::Buy, 100, 1)).unwrap();
        assert_eq!(b.depth(0, Side::Buy, 5), vec![(101, 5), (100, 11)]);
        let e = |order_ref, executed_shares| {
            Itch::OrderExecuted(OrderExecuted {
                stock_locate: 0,
                tracking_number: 0,
                timestamp_ns: 0,
                order_ref,
                executed_shares,
                match_number: 1,
            })
        };
        b.apply(&e(2, 5)).unwrap();
        assert_eq!(
            b.depth(0, Side::Buy, 1),
            vec![(100, 11)],
            "the top level emptied"
        );
        b.apply(&Itch::OrderCancel(OrderCancel {
            stock_locate: 0,
            tracking_number: 0,
            timestamp_ns: 0,
            order_ref: 1,
            cancelled_shares: 4,
        }))
        .unwrap();
        b.apply(&Itch::OrderReplace(OrderReplace {
            stock_locate: 0,
            tracking_number: 0,
            timestamp_ns: 0,
            original_order_ref: 3,
            new_order_ref: 3,
            shares: 9,
            price: 102,
        }))
        .unwrap();
        assert_eq!(b.depth(0, Side::Sell, 5), vec![(102, 9)]);
        b.apply(&Itch::OrderDelete(OrderDelete {
            stock_locate: 0,
            tracking_number: 0,
            timestamp_ns: 0,
            order_ref: 4,
        }))
        .unwrap();
        assert_eq!(b.depth(0, Side::Buy, 5), vec![(100, 6)]);
        assert_eq!(b.apply(&e(9, 1)), Err(BookError::UnknownOrder(9)));
        assert_eq!(b.apply(&e(1, 7)), Err(BookError::Overfill(1)));
        assert_eq!(
            b.apply(&add(1, Side::Buy, 1, 1)),
            Err(BookError::DuplicateOrder(1))
        );
        assert_eq!(b.orders(), 2);
    }
}
