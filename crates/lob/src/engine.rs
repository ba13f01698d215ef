//! The matching engine: books for every symbol over one order slab and one level slab.
//!
//! Storage, all allocated in [`Engine::new`]:
//! - `orders`: a slab of [`OrderSlot`]s (40 bytes). A resting order is linked into its level's
//!   FIFO through `prev`/`next`; free slots form a free list through `next`. Cancel is an
//!   index lookup plus an O(1) unlink.
//! - `levels`: a slab of [`Level`]s (price tick, total quantity, FIFO head/tail, count); free
//!   levels form a free list through `head`.
//! - `index`: order id → slot ([`crate::index`]).
//! - per symbol and side a [`BookSide`] ([`crate::side`]): price levels by integer tick.
//!
//! Matching walks the opposite side from its cached best level while the level crosses the
//! taker's limit, and each level's FIFO from its head: price-time priority. A fill always
//! trades at the maker's price. Fill-or-kill first sums the reachable quantity over the same
//! walk (levels × orders when self-trade prevention applies, levels only otherwise).

use std::collections::BTreeSet;

use crate::NIL;
use crate::config::{ConfigError, EngineConfig};
use crate::index::OrderIndex;
use crate::side::BookSide;
use crate::types::{
    CancelOrder, Event, ExpireReason, Fill, Input, MatchNumber, NewOrder, OrderId, OrderKind,
    ParticipantId, Price, Qty, RejectReason, ReplaceOrder, Side, SymbolIndex,
};

/// The matching engine for every symbol of the exchange. See the crate docs.
pub struct Engine {
    books: Vec<Book>,
    store: Store,
    stp_participants: BTreeSet<ParticipantId>,
    order_qty_max: i64,
}

/// One level of a depth snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelView {
    /// Level price.
    pub price: Price,
    /// Sum of the open quantity of its orders.
    pub qty: Qty,
    /// Number of orders.
    pub order_count: u32,
}

/// An engine's resting state, from [`Engine::snapshot`], for [`Engine::restore`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EngineSnapshot {
    /// Resting orders in priority order.
    pub orders: Vec<OrderView>,
    /// The last match number assigned (0: none yet).
    pub match_number: MatchNumber,
}

/// A resting order, as [`Engine::order`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrderView {
    /// Its id.
    pub order_id: OrderId,
    /// Its owner.
    pub participant: ParticipantId,
    /// Its book.
    pub symbol: SymbolIndex,
    /// Its side.
    pub side: Side,
    /// Its price.
    pub price: Price,
    /// Its open quantity.
    pub qty: Qty,
    /// Entered post-only ([`OrderKind::PostOnly`]): a replace may not make it take.
    pub post_only: bool,
}

struct Book {
    tick_size: i64,
    price_min: i64,
    price_max: i64,
    bids: BookSide,
    asks: BookSide,
}

impl Book {
    /// (own side, opposite side) for an order on `side`.
    fn sides_mut(&mut self, side: Side) -> (&mut BookSide, &mut BookSide) {
        match side {
            Side::Buy => (&mut self.bids, &mut self.asks),
            Side::Sell => (&mut self.asks, &mut self.bids),
        }
    }

    fn side(&self, side: Side) -> &BookSide {
        match side {
            Side::Buy => &self.bids,
            Side::Sell => &self.asks,
        }
    }

    /// The tick of a valid price, or why it is not valid.
    fn tick(&self, price: Price) -> Result<i64, RejectReason> {
        if price.0 < self.price_min || price.0 > self.price_max {
            return Err(RejectReason::PriceOutOfBand);
        }
        if price.0.rem_euclid(self.tick_size) != 0 {
            return Err(RejectReason::PriceOffTick);
        }
        Ok(price.0 / self.tick_size)
    }
}

/// A resting order (or a free slot). 40 bytes.
#[derive(Clone, Copy, Debug)]
struct OrderSlot {
    id: u64,
    qty: i64,
    participant: u32,
    prev: u32,
    /// Next in the level FIFO, or next free slot.
    next: u32,
    level: u32,
    symbol: u32,
    side: Side,
    /// Entered post-only: a replace that would take is rejected as the order would have been.
    post_only: bool,
}

/// A price level (or a free level). 32 bytes.
#[derive(Clone, Copy, Debug)]
struct Level {
    tick: i64,
    qty: i64,
    /// FIFO head, or next free level.
    head: u32,
    tail: u32,
    count: u32,
}

/// The slabs and the id index: everything but the per-symbol price indexes, so that matching
/// can borrow one [`BookSide`] and the store at the same time.
struct Store {
    orders: Vec<OrderSlot>,
    order_free: u32,
    order_count: u32,
    levels: Vec<Level>,
    level_free: u32,
    level_count: u32,
    index: OrderIndex,
    match_number: u64,
}

/// The incoming order while it takes liquidity.
struct Taker {
    symbol: SymbolIndex,
    order_id: OrderId,
    participant: ParticipantId,
    side: Side,
    /// `None` for a market order.
    limit_tick: Option<i64>,
    stp: bool,
    tick_size: i64,
    /// What the order rests as: post-only or not.
    post_only: bool,
}

impl Taker {
    #[inline]
    fn crosses(&self, tick: i64) -> bool {
        match (self.limit_tick, self.side) {
            (None, _) => true,
            (Some(limit), Side::Buy) => tick <= limit,
            (Some(limit), Side::Sell) => tick >= limit,
        }
    }
}

const _: () = assert!(size_of::<OrderSlot>() == 40);
const _: () = assert!(size_of::<Level>() == 32);
const _: () = assert!(size_of::<Event>() <= 64);

impl Engine {
    /// Builds an engine with every slab allocated up front.
    pub fn new(config: EngineConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let books = config
            .symbols
            .iter()
            .map(|s| Book {
                tick_size: s.tick_size,
                price_min: s.price_min.0,
                price_max: s.price_max.0,
                bids: BookSide::new(Side::Buy, s.window_ticks),
                asks: BookSide::new(Side::Sell, s.window_ticks),
            })
            .collect();
        let free_order = |i: u32| OrderSlot {
            id: 0,
            qty: 0,
            participant: 0,
            prev: NIL,
            next: if i + 1 < config.orders_max {
                i + 1
            } else {
                NIL
            },
            level: NIL,
            symbol: 0,
            post_only: false,
            side: Side::Buy,
        };
        let free_level = |i: u32| Level {
            tick: 0,
            qty: 0,
            head: if i + 1 < config.levels_max {
                i + 1
            } else {
                NIL
            },
            tail: NIL,
            count: 0,
        };
        let store = Store {
            orders: (0..config.orders_max).map(free_order).collect(),
            order_free: 0,
            order_count: 0,
            levels: (0..config.levels_max).map(free_level).collect(),
            level_free: 0,
            level_count: 0,
            index: OrderIndex::new(config.orders_max),
            match_number: 0,
        };
        Ok(Self {
            books,
            store,
            stp_participants: config.stp_participants.iter().copied().collect(),
            order_qty_max: config.order_qty_max,
        })
    }

    /// Turns on or off self-trade prevention for `participant`.
    pub fn set_self_trade_prevention(&mut self, participant: ParticipantId, enabled: bool) {
        if enabled {
            self.stp_participants.insert(participant);
        } else {
            self.stp_participants.remove(&participant);
        }
    }

    /// Applies one input and appends its events to `events` (see [`Event`] for their order).
    /// Never panics on any input; a deterministic function of the engine state and `input`.
    pub fn handle_input(&mut self, input: &Input, events: &mut Vec<Event>) {
        match input {
            Input::New(order) => self.handle_new(order, events),
            Input::Cancel(cancel) => self.handle_cancel(cancel, events),
            Input::Replace(replace) => self.handle_replace(replace, events),
        }
    }

    /// Applies `inputs` in order (see [`Engine::handle_input`]).
    pub fn handle_batch(&mut self, inputs: &[Input], events: &mut Vec<Event>) {
        for input in inputs {
            self.handle_input(input, events);
        }
    }

    /// Best bid: price, total quantity and order count of the highest bid level. O(1).
    #[must_use]
    pub fn best_bid(&self, symbol: SymbolIndex) -> Option<LevelView> {
        self.best(symbol, Side::Buy)
    }

    /// Best ask: price, total quantity and order count of the lowest ask level. O(1).
    #[must_use]
    pub fn best_ask(&self, symbol: SymbolIndex) -> Option<LevelView> {
        self.best(symbol, Side::Sell)
    }

    /// Appends up to `levels_max` levels of `side`, best first, to `out`. Unknown symbols
    /// append nothing.
    pub fn depth(
        &self,
        symbol: SymbolIndex,
        side: Side,
        levels_max: usize,
        out: &mut Vec<LevelView>,
    ) {
        let Some(book) = self.books.get(symbol.0 as usize) else {
            return;
        };
        let levels = book.side(side).levels().take(levels_max);
        out.extend(levels.map(|(level, _)| self.store.level_view(level, book.tick_size)));
    }

    /// Orders resting at `price` on `side`, in time priority.
    #[must_use]
    pub fn level_orders(&self, symbol: SymbolIndex, side: Side, price: Price) -> Vec<OrderId> {
        let Some(book) = self.books.get(symbol.0 as usize) else {
            return Vec::new();
        };
        let Ok(tick) = book.tick(price) else {
            return Vec::new();
        };
        let mut ids = Vec::new();
        let level = book.side(side).find(tick);
        if level != NIL {
            let mut o = self.store.levels[level as usize].head;
            while o != NIL {
                ids.push(OrderId(self.store.orders[o as usize].id));
                o = self.store.orders[o as usize].next;
            }
        }
        ids
    }

    /// The resting order `order_id`, if any.
    #[must_use]
    pub fn order(&self, order_id: OrderId) -> Option<OrderView> {
        let slot = self.store.find(order_id);
        if slot == NIL {
            return None;
        }
        let order = &self.store.orders[slot as usize];
        let book = &self.books[order.symbol as usize];
        let tick = self.store.levels[order.level as usize].tick;
        Some(OrderView {
            order_id,
            participant: ParticipantId(order.participant),
            symbol: SymbolIndex(order.symbol),
            side: order.side,
            price: Price(tick * book.tick_size),
            qty: Qty(order.qty),
            post_only: order.post_only,
        })
    }

    /// The engine's state: every resting order in priority order (symbol by symbol, bids then
    /// asks, best level first, time priority within a level) and the last match number.
    /// [`Engine::restore`] rebuilds an engine that answers every later input identically.
    #[must_use]
    pub fn snapshot(&self) -> EngineSnapshot {
        let mut orders = Vec::with_capacity(self.store.order_count as usize);
        for (symbol, book) in self.books.iter().enumerate() {
            for side in [Side::Buy, Side::Sell] {
                for (level, tick) in book.side(side).levels() {
                    let mut o = self.store.levels[level as usize].head;
                    while o != NIL {
                        let slot = &self.store.orders[o as usize];
                        orders.push(OrderView {
                            order_id: OrderId(slot.id),
                            participant: ParticipantId(slot.participant),
                            symbol: SymbolIndex(symbol as u32),
                            side,
                            price: Price(tick * book.tick_size),
                            qty: Qty(slot.qty),
                            post_only: slot.post_only,
                        });
                        o = slot.next;
                    }
                }
            }
        }
        assert_eq!(
            orders.len() as u32,
            self.store.order_count,
            "every order is on a level"
        );
        EngineSnapshot {
            orders,
            match_number: MatchNumber(self.store.match_number),
        }
    }

    /// Loads `snapshot` into this engine, which must be empty and built with the same
    /// configuration as the one snapshotted: re-enters the orders in priority order (none can
    /// cross: a snapshot's book is uncrossed) and sets the match number. Errors name the first
    /// order that does not rest as it did.
    pub fn restore(&mut self, snapshot: &EngineSnapshot) -> Result<(), String> {
        if self.store.order_count != 0 || self.store.match_number != 0 {
            return Err("restore needs an empty engine".to_string());
        }
        let mut events = Vec::with_capacity(4);
        for o in &snapshot.orders {
            events.clear();
            let input = Input::New(NewOrder {
                order_id: o.order_id,
                participant: o.participant,
                symbol: o.symbol,
                side: o.side,
                kind: if o.post_only {
                    OrderKind::PostOnly
                } else {
                    OrderKind::Gtc
                },
                price: o.price,
                qty: o.qty,
            });
            self.handle_input(&input, &mut events);
            let rested = matches!(events.as_slice(), [Event::Accept { .. }, Event::Add { .. }]);
            if !rested {
                return Err(format!(
                    "order {} does not rest on restore: {events:?}",
                    o.order_id.0
                ));
            }
        }
        assert_eq!(self.store.order_count as usize, snapshot.orders.len());
        self.store.match_number = snapshot.match_number.0;
        Ok(())
    }

    /// Number of resting orders, all symbols.
    #[must_use]
    pub fn order_count(&self) -> u32 {
        self.store.order_count
    }

    /// Number of symbols.
    #[must_use]
    pub fn symbol_count(&self) -> usize {
        self.books.len()
    }

    /// Bytes of heap the engine holds (slabs, index, windows; not the far-price maps, which
    /// are empty while every level is within its window).
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        let store = &self.store;
        let books: usize = self
            .books
            .iter()
            .map(|b| b.bids.heap_bytes() + b.asks.heap_bytes())
            .sum();
        store.orders.capacity() * size_of::<OrderSlot>()
            + store.levels.capacity() * size_of::<Level>()
            + store.index.heap_bytes()
            + self.books.capacity() * size_of::<Book>()
            + books
    }

    /// Bytes per order of the order slab plus the id index: the cost of one more unit of
    /// `orders_max` (levels and windows are sized separately).
    #[must_use]
    pub fn order_bytes(&self) -> f64 {
        let store = &self.store;
        let bytes = store.orders.capacity() * size_of::<OrderSlot>() + store.index.heap_bytes();
        bytes as f64 / store.orders.len() as f64
    }

    /// Checks every structural invariant; O(orders + levels + windows). Panics on a violation.
    /// Tests call it after every input.
    pub fn check_invariants(&self) {
        let store = &self.store;
        let mut orders_seen = 0u32;
        let mut levels_seen = 0u32;
        for (symbol, book) in self.books.iter().enumerate() {
            for side in [&book.bids, &book.asks] {
                let tick_of = |l: u32| store.levels[l as usize].tick;
                levels_seen += side.check_invariants(tick_of) as u32;
                for (level, tick) in side.levels() {
                    orders_seen += store.check_level(level, tick, symbol as u32, side.side);
                }
            }
            if book.bids.best != NIL && book.asks.best != NIL {
                assert!(book.bids.best_tick < book.asks.best_tick, "book crossed");
            }
        }
        assert_eq!(orders_seen, store.order_count);
        assert_eq!(levels_seen, store.level_count);
        assert_eq!(store.index.len(), store.order_count as usize);
        let free_orders = store.free_len(store.order_free, |i| store.orders[i].next);
        assert_eq!(free_orders + store.order_count as usize, store.orders.len());
        let free_levels = store.free_len(store.level_free, |i| store.levels[i].head);
        assert_eq!(free_levels + store.level_count as usize, store.levels.len());
    }

    fn best(&self, symbol: SymbolIndex, side: Side) -> Option<LevelView> {
        let book = self.books.get(symbol.0 as usize)?;
        let best = book.side(side).best;
        (best != NIL).then(|| self.store.level_view(best, book.tick_size))
    }

    fn handle_new(&mut self, order: &NewOrder, events: &mut Vec<Event>) {
        let reject = |events: &mut Vec<Event>, reason| {
            events.push(Event::Reject {
                symbol: order.symbol,
                participant: order.participant,
                order_id: order.order_id,
                reason,
            });
        };
        let Some(book) = self.books.get_mut(order.symbol.0 as usize) else {
            return reject(events, RejectReason::UnknownSymbol);
        };
        if let Err(reason) = check_qty(order.qty, self.order_qty_max) {
            return reject(events, reason);
        }
        let limit_tick = match order.kind {
            OrderKind::Market => None,
            _ => match book.tick(order.price) {
                Ok(tick) => Some(tick),
                Err(reason) => return reject(events, reason),
            },
        };
        if self.store.find(order.order_id) != NIL {
            return reject(events, RejectReason::DuplicateOrderId);
        }
        let tick_size = book.tick_size;
        let (own, opposite) = book.sides_mut(order.side);
        let may_rest = matches!(order.kind, OrderKind::Gtc | OrderKind::PostOnly);
        let taker = Taker {
            symbol: order.symbol,
            order_id: order.order_id,
            participant: order.participant,
            side: order.side,
            limit_tick,
            stp: self.stp_participants.contains(&order.participant),
            tick_size,
            post_only: order.kind == OrderKind::PostOnly,
        };
        let crosses = opposite.best != NIL && taker.crosses(opposite.best_tick);
        if order.kind == OrderKind::PostOnly && crosses {
            return reject(events, RejectReason::WouldTake);
        }
        // Only an order that trades with nothing can find the book full: one that crosses
        // either fills, or takes (or, with STP, expires) every order it crosses, and its
        // remainder rests in the order slot and the level the first of them freed. So a full
        // book still takes the orders that would empty it.
        if let (true, Some(tick), false) = (may_rest, limit_tick, crosses)
            && !self.store.can_rest(own, tick)
        {
            return reject(events, RejectReason::BookFull);
        }
        events.push(Event::Accept {
            symbol: order.symbol,
            participant: order.participant,
            order_id: order.order_id,
        });
        let mut left = order.qty.0;
        let fillable = order.kind != OrderKind::Fok || self.store.reachable(opposite, &taker, left);
        if crosses && fillable {
            self.store.take(opposite, &taker, &mut left, events);
        }
        if left == 0 {
            return;
        }
        match (may_rest, limit_tick) {
            (true, Some(tick)) => self.store.rest_and_add(own, &taker, tick, left, events),
            _ => events.push(Event::Expire {
                symbol: order.symbol,
                participant: order.participant,
                order_id: order.order_id,
                qty: Qty(left),
                reason: ExpireReason::Unfilled,
            }),
        }
    }

    fn handle_cancel(&mut self, cancel: &CancelOrder, events: &mut Vec<Event>) {
        let slot = match self.resting(cancel.symbol, cancel.order_id, cancel.participant) {
            Ok(slot) => slot,
            Err(reason) => {
                return events.push(Event::Reject {
                    symbol: cancel.symbol,
                    participant: cancel.participant,
                    order_id: cancel.order_id,
                    reason,
                });
            }
        };
        let side = self.store.orders[slot as usize].side;
        let own = match side {
            Side::Buy => &mut self.books[cancel.symbol.0 as usize].bids,
            Side::Sell => &mut self.books[cancel.symbol.0 as usize].asks,
        };
        events.push(Event::Accept {
            symbol: cancel.symbol,
            participant: cancel.participant,
            order_id: cancel.order_id,
        });
        events.push(Event::Delete {
            symbol: cancel.symbol,
            order_id: cancel.order_id,
        });
        self.store.remove_order(own, slot);
    }

    fn handle_replace(&mut self, replace: &ReplaceOrder, events: &mut Vec<Event>) {
        let reject = |events: &mut Vec<Event>, reason| {
            events.push(Event::Reject {
                symbol: replace.symbol,
                participant: replace.participant,
                order_id: replace.order_id,
                reason,
            });
        };
        let Some(book) = self.books.get(replace.symbol.0 as usize) else {
            return reject(events, RejectReason::UnknownSymbol);
        };
        if let Err(reason) = check_qty(replace.qty, self.order_qty_max) {
            return reject(events, reason);
        }
        let tick = match book.tick(replace.price) {
            Ok(tick) => tick,
            Err(reason) => return reject(events, reason),
        };
        let slot = match self.resting(replace.symbol, replace.order_id, replace.participant) {
            Ok(slot) => slot,
            Err(reason) => return reject(events, reason),
        };
        let order = self.store.orders[slot as usize];
        let level = order.level;
        let tick_old = self.store.levels[level as usize].tick;
        let book = &mut self.books[replace.symbol.0 as usize];
        let tick_size = book.tick_size;
        let (own, opposite) = book.sides_mut(order.side);
        let keeps_priority = tick == tick_old && replace.qty.0 <= order.qty;
        // The order keeps its slot; a new level is needed only at a price with none, and
        // one is freed if the order leaves its level empty (or, as for a new order, if it
        // crosses: checked below).
        let needs_level = !keeps_priority
            && own.find(tick) == NIL
            && self.store.level_free == NIL
            && self.store.levels[level as usize].count > 1;
        let taker = Taker {
            symbol: replace.symbol,
            order_id: replace.order_id,
            participant: replace.participant,
            side: order.side,
            limit_tick: Some(tick),
            stp: self.stp_participants.contains(&replace.participant),
            tick_size,
            post_only: order.post_only,
        };
        let crosses = opposite.best != NIL && taker.crosses(opposite.best_tick);
        if order.post_only && crosses {
            // As a new post-only order at that price would be: it must not take.
            return reject(events, RejectReason::WouldTake);
        }
        if needs_level && !crosses {
            return reject(events, RejectReason::BookFull);
        }
        events.push(Event::Accept {
            symbol: replace.symbol,
            participant: replace.participant,
            order_id: replace.order_id,
        });
        if keeps_priority {
            let reduce = order.qty - replace.qty.0;
            if reduce > 0 {
                self.store.orders[slot as usize].qty -= reduce;
                self.store.levels[level as usize].qty -= reduce;
                events.push(Event::Cancel {
                    symbol: replace.symbol,
                    order_id: replace.order_id,
                    qty: Qty(reduce),
                });
            }
            return;
        }
        if !crosses {
            // Move to the back of the new level, in place.
            self.store.unlink(own, slot);
            self.store.orders[slot as usize].qty = replace.qty.0;
            self.store.link(own, slot, tick);
            return events.push(Event::Replace {
                symbol: replace.symbol,
                order_id: replace.order_id,
                side: order.side,
                price: replace.price,
                qty: replace.qty,
            });
        }
        events.push(Event::Delete {
            symbol: replace.symbol,
            order_id: replace.order_id,
        });
        self.store.remove_order(own, slot);
        let mut left = replace.qty.0;
        self.store.take(opposite, &taker, &mut left, events);
        if left > 0 {
            self.store.rest_and_add(own, &taker, tick, left, events);
        }
    }

    /// The slot of resting order `order_id` in `symbol` owned by `participant`.
    fn resting(
        &self,
        symbol: SymbolIndex,
        order_id: OrderId,
        participant: ParticipantId,
    ) -> Result<u32, RejectReason> {
        if symbol.0 as usize >= self.books.len() {
            return Err(RejectReason::UnknownSymbol);
        }
        let slot = self.store.find(order_id);
        if slot == NIL || self.store.orders[slot as usize].symbol != symbol.0 {
            return Err(RejectReason::UnknownOrderId);
        }
        if self.store.orders[slot as usize].participant != participant.0 {
            return Err(RejectReason::NotOwner);
        }
        Ok(slot)
    }
}

impl Store {
    #[inline]
    fn find(&self, order_id: OrderId) -> u32 {
        self.index
            .find(order_id.0, |slot| self.orders[slot as usize].id)
    }

    /// Could an order rest at `tick` on `own` without running out of slots?
    fn can_rest(&self, own: &BookSide, tick: i64) -> bool {
        self.order_free != NIL && (self.level_free != NIL || own.find(tick) != NIL)
    }

    /// Is there at least `need` quantity the taker could trade within its limit?
    fn reachable(&self, opposite: &BookSide, taker: &Taker, need: i64) -> bool {
        let mut sum = 0;
        let mut next = (opposite.best != NIL).then_some((opposite.best, opposite.best_tick));
        while let Some((level, tick)) = next {
            if !taker.crosses(tick) {
                return false;
            }
            if taker.stp {
                let mut o = self.levels[level as usize].head;
                while o != NIL {
                    let order = &self.orders[o as usize];
                    if order.participant != taker.participant.0 {
                        sum += order.qty;
                    }
                    o = order.next;
                }
            } else {
                sum += self.levels[level as usize].qty;
            }
            if sum >= need {
                return true;
            }
            next = opposite.next_worse(tick);
        }
        false
    }

    /// Trades the taker against `opposite` while it crosses and `left > 0`.
    fn take(
        &mut self,
        opposite: &mut BookSide,
        taker: &Taker,
        left: &mut i64,
        events: &mut Vec<Event>,
    ) {
        while *left > 0 && opposite.best != NIL && taker.crosses(opposite.best_tick) {
            let level = opposite.best;
            let price = Price(opposite.best_tick * taker.tick_size);
            let mut traded = 0;
            let mut o = self.levels[level as usize].head;
            while o != NIL && *left > 0 {
                let maker = self.orders[o as usize];
                if taker.stp && maker.participant == taker.participant.0 {
                    events.push(Event::Expire {
                        symbol: taker.symbol,
                        participant: taker.participant,
                        order_id: OrderId(maker.id),
                        qty: Qty(maker.qty),
                        reason: ExpireReason::SelfTrade,
                    });
                    events.push(Event::Delete {
                        symbol: taker.symbol,
                        order_id: OrderId(maker.id),
                    });
                    self.detach(o);
                    o = maker.next;
                    continue;
                }
                let qty = maker.qty.min(*left);
                debug_assert!(qty > 0, "no zero-quantity trades");
                self.match_number += 1;
                let match_number = MatchNumber(self.match_number);
                events.push(Event::Fill(Fill {
                    symbol: taker.symbol,
                    match_number,
                    price,
                    qty: Qty(qty),
                    maker_order_id: OrderId(maker.id),
                    maker_participant: ParticipantId(maker.participant),
                    taker_order_id: taker.order_id,
                    taker_participant: taker.participant,
                    taker_side: taker.side,
                }));
                events.push(Event::Execute {
                    symbol: taker.symbol,
                    order_id: OrderId(maker.id),
                    side: maker.side,
                    price,
                    qty: Qty(qty),
                    match_number,
                });
                *left -= qty;
                traded += qty;
                if qty == maker.qty {
                    self.detach(o);
                } else {
                    self.orders[o as usize].qty -= qty;
                    self.levels[level as usize].qty -= qty;
                }
                o = maker.next;
            }
            if traded > 0 {
                events.push(Event::Trade {
                    symbol: taker.symbol,
                    aggressor: taker.side,
                    price,
                    qty: Qty(traded),
                    match_number: MatchNumber(self.match_number),
                });
            }
            self.remove_level_if_empty(opposite, level);
        }
    }

    /// Rests the taker's remainder at `tick` and announces it.
    fn rest_and_add(
        &mut self,
        own: &mut BookSide,
        taker: &Taker,
        tick: i64,
        qty: i64,
        events: &mut Vec<Event>,
    ) {
        let slot = self.order_free;
        assert!(slot != NIL, "rest: capacity was checked before matching");
        self.order_free = self.orders[slot as usize].next;
        self.order_count += 1;
        self.orders[slot as usize] = OrderSlot {
            id: taker.order_id.0,
            qty,
            participant: taker.participant.0,
            prev: NIL,
            next: NIL,
            level: NIL,
            symbol: taker.symbol.0,
            side: taker.side,
            post_only: taker.post_only,
        };
        self.index.insert(taker.order_id.0, slot);
        self.link(own, slot, tick);
        events.push(Event::Add {
            symbol: taker.symbol,
            order_id: taker.order_id,
            side: taker.side,
            price: Price(tick * taker.tick_size),
            qty: Qty(qty),
        });
    }

    /// Links order `slot` (with its quantity set) at the tail of the level at `tick`.
    fn link(&mut self, own: &mut BookSide, slot: u32, tick: i64) {
        let mut level = own.find(tick);
        if level == NIL {
            level = self.level_free;
            assert!(level != NIL, "link: capacity was checked before matching");
            self.level_free = self.levels[level as usize].head;
            self.level_count += 1;
            self.levels[level as usize] = Level {
                tick,
                qty: 0,
                head: NIL,
                tail: NIL,
                count: 0,
            };
            own.insert(tick, level);
        }
        let tail = self.levels[level as usize].tail;
        let order = &mut self.orders[slot as usize];
        order.level = level;
        order.prev = tail;
        order.next = NIL;
        let qty = order.qty;
        debug_assert!(qty > 0);
        match tail {
            NIL => self.levels[level as usize].head = slot,
            _ => self.orders[tail as usize].next = slot,
        }
        let l = &mut self.levels[level as usize];
        l.tail = slot;
        l.qty += qty;
        l.count += 1;
    }

    /// Unlinks order `slot` from its level's FIFO and quantity (the order stays in the index);
    /// drops the level if it empties.
    fn unlink(&mut self, own: &mut BookSide, slot: u32) {
        let order = self.orders[slot as usize];
        self.unlink_fifo(order);
        self.remove_level_if_empty(own, order.level);
    }

    /// Removes a resting order entirely; drops its level if it empties.
    fn remove_order(&mut self, own: &mut BookSide, slot: u32) {
        let level = self.orders[slot as usize].level;
        self.detach(slot);
        self.remove_level_if_empty(own, level);
    }

    /// Removes a resting order from its FIFO, the index and the slab, leaving a possibly empty
    /// level in place (matching still walks it).
    fn detach(&mut self, slot: u32) {
        let order = self.orders[slot as usize];
        self.unlink_fifo(order);
        let orders = &self.orders;
        self.index.remove(order.id, slot, |s| orders[s as usize].id);
        let free = &mut self.orders[slot as usize];
        free.level = NIL;
        free.next = self.order_free;
        self.order_free = slot;
        self.order_count -= 1;
    }

    fn unlink_fifo(&mut self, order: OrderSlot) {
        let level = &mut self.levels[order.level as usize];
        level.qty -= order.qty;
        level.count -= 1;
        match order.prev {
            NIL => level.head = order.next,
            prev => self.orders[prev as usize].next = order.next,
        }
        match order.next {
            NIL => self.levels[order.level as usize].tail = order.prev,
            next => self.orders[next as usize].prev = order.prev,
        }
    }

    fn remove_level_if_empty(&mut self, own: &mut BookSide, level: u32) {
        let l = self.levels[level as usize];
        if l.count > 0 {
            return;
        }
        debug_assert!(l.qty == 0 && l.head == NIL && l.tail == NIL);
        own.remove(l.tick, level);
        self.levels[level as usize].head = self.level_free;
        self.level_free = level;
        self.level_count -= 1;
    }

    fn level_view(&self, level: u32, tick_size: i64) -> LevelView {
        let l = &self.levels[level as usize];
        LevelView {
            price: Price(l.tick * tick_size),
            qty: Qty(l.qty),
            order_count: l.count,
        }
    }

    /// Checks one level's FIFO; returns its order count.
    fn check_level(&self, level: u32, tick: i64, symbol: u32, side: Side) -> u32 {
        let l = &self.levels[level as usize];
        assert_eq!(l.tick, tick);
        assert!(l.count > 0, "empty level left in the book");
        let (mut count, mut qty, mut prev, mut o) = (0, 0, NIL, l.head);
        while o != NIL {
            let order = &self.orders[o as usize];
            assert!(order.qty > 0, "resting order with no quantity");
            assert_eq!(order.prev, prev);
            assert_eq!(order.level, level);
            assert_eq!(order.symbol, symbol);
            assert_eq!(order.side, side);
            assert_eq!(
                self.find(OrderId(order.id)),
                o,
                "order missing from the index"
            );
            count += 1;
            qty += order.qty;
            prev = o;
            o = order.next;
            assert!(
                count <= l.count,
                "level FIFO longer than its count (cycle?)"
            );
        }
        assert_eq!(l.tail, prev);
        assert_eq!(count, l.count);
        assert_eq!(qty, l.qty);
        count
    }

    fn free_len(&self, head: u32, next: impl Fn(usize) -> u32) -> usize {
        let (mut n, mut i) = (0, head);
        while i != NIL {
            n += 1;
            i = next(i as usize);
        }
        n
    }
}

fn check_qty(qty: Qty, order_qty_max: i64) -> Result<(), RejectReason> {
    if qty.0 <= 0 {
        return Err(RejectReason::QtyNotPositive);
    }
    if qty.0 > order_qty_max {
        return Err(RejectReason::QtyTooLarge);
    }
    Ok(())
}
