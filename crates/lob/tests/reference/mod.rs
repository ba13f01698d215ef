//! A small, obviously correct reference engine: every resting order in one `Vec`, the best
//! order found by a linear scan for (best price, earliest arrival). It has no capacity limits
//! (tests give the real engine enough room that `BookFull` never happens).

use std::collections::BTreeSet;

use lob::{
    Event, ExpireReason, Fill, Input, LevelView, MatchNumber, NewOrder, OrderId, OrderKind,
    OrderView, ParticipantId, Price, Qty, RejectReason, ReplaceOrder, Side, SymbolConfig,
    SymbolIndex,
};

#[derive(Clone, Copy, Debug)]
struct RefOrder {
    id: u64,
    participant: u32,
    symbol: u32,
    side: Side,
    price: i64,
    qty: i64,
    seq: u64,
    post_only: bool,
}

pub(crate) struct RefEngine {
    symbols: Vec<SymbolConfig>,
    orders: Vec<RefOrder>,
    seq: u64,
    match_number: u64,
    stp: BTreeSet<u32>,
    qty_max: i64,
}

/// Does a taker on `side` with `limit` (None = market) cross a resting price?
fn crosses(side: Side, limit: Option<i64>, price: i64) -> bool {
    match (limit, side) {
        (None, _) => true,
        (Some(l), Side::Buy) => price <= l,
        (Some(l), Side::Sell) => price >= l,
    }
}

impl RefEngine {
    pub(crate) fn new(symbols: Vec<SymbolConfig>, stp: &[u32], qty_max: i64) -> Self {
        Self {
            symbols,
            orders: Vec::new(),
            seq: 0,
            match_number: 0,
            stp: stp.iter().copied().collect(),
            qty_max,
        }
    }

    pub(crate) fn handle(&mut self, input: &Input) -> Vec<Event> {
        let mut ev = Vec::new();
        match input {
            Input::New(o) => self.new_order(o, &mut ev),
            Input::Cancel(c) => {
                let reject = |reason| Event::Reject {
                    symbol: c.symbol,
                    participant: c.participant,
                    order_id: c.order_id,
                    reason,
                };
                match self.lookup(c.symbol, c.order_id, c.participant) {
                    Err(reason) => ev.push(reject(reason)),
                    Ok(i) => {
                        ev.push(Event::Accept {
                            symbol: c.symbol,
                            participant: c.participant,
                            order_id: c.order_id,
                        });
                        ev.push(Event::Delete {
                            symbol: c.symbol,
                            order_id: c.order_id,
                        });
                        self.orders.remove(i);
                    }
                }
            }
            Input::Replace(r) => self.replace(r, &mut ev),
        }
        ev
    }

    fn validate(
        &self,
        symbol: SymbolIndex,
        qty: Qty,
        price: Option<Price>,
    ) -> Result<(), RejectReason> {
        let Some(cfg) = self.symbols.get(symbol.0 as usize) else {
            return Err(RejectReason::UnknownSymbol);
        };
        if qty.0 <= 0 {
            return Err(RejectReason::QtyNotPositive);
        }
        if qty.0 > self.qty_max {
            return Err(RejectReason::QtyTooLarge);
        }
        if let Some(p) = price {
            if p < cfg.price_min || p > cfg.price_max {
                return Err(RejectReason::PriceOutOfBand);
            }
            if p.0.rem_euclid(cfg.tick_size) != 0 {
                return Err(RejectReason::PriceOffTick);
            }
        }
        Ok(())
    }

    fn lookup(
        &self,
        symbol: SymbolIndex,
        id: OrderId,
        participant: ParticipantId,
    ) -> Result<usize, RejectReason> {
        if symbol.0 as usize >= self.symbols.len() {
            return Err(RejectReason::UnknownSymbol);
        }
        let Some(i) = self
            .orders
            .iter()
            .position(|o| o.id == id.0 && o.symbol == symbol.0)
        else {
            return Err(RejectReason::UnknownOrderId);
        };
        if self.orders[i].participant != participant.0 {
            return Err(RejectReason::NotOwner);
        }
        Ok(i)
    }

    fn new_order(&mut self, o: &NewOrder, ev: &mut Vec<Event>) {
        let market = o.kind == OrderKind::Market;
        let reject = |reason| Event::Reject {
            symbol: o.symbol,
            participant: o.participant,
            order_id: o.order_id,
            reason,
        };
        if let Err(r) = self.validate(o.symbol, o.qty, (!market).then_some(o.price)) {
            return ev.push(reject(r));
        }
        if self.orders.iter().any(|r| r.id == o.order_id.0) {
            return ev.push(reject(RejectReason::DuplicateOrderId));
        }
        let limit = (!market).then_some(o.price.0);
        let opposite_crosses = self
            .orders
            .iter()
            .any(|r| r.symbol == o.symbol.0 && r.side != o.side && crosses(o.side, limit, r.price));
        if o.kind == OrderKind::PostOnly && opposite_crosses {
            return ev.push(reject(RejectReason::WouldTake));
        }
        ev.push(Event::Accept {
            symbol: o.symbol,
            participant: o.participant,
            order_id: o.order_id,
        });
        let stp = self.stp.contains(&o.participant.0);
        let mut left = o.qty.0;
        if o.kind == OrderKind::Fok {
            let reachable: i64 = self
                .orders
                .iter()
                .filter(|r| r.symbol == o.symbol.0 && r.side != o.side)
                .filter(|r| crosses(o.side, limit, r.price))
                .filter(|r| !(stp && r.participant == o.participant.0))
                .map(|r| r.qty)
                .sum();
            if reachable < left {
                ev.push(self.expire(o.symbol, o.participant, o.order_id, left));
                return;
            }
        }
        self.take(
            o.symbol,
            o.order_id,
            o.participant,
            o.side,
            limit,
            stp,
            &mut left,
            ev,
        );
        if left == 0 {
            return;
        }
        if matches!(o.kind, OrderKind::Gtc | OrderKind::PostOnly) {
            self.rest(
                o.symbol,
                o.order_id,
                o.participant,
                o.side,
                o.price.0,
                left,
                o.kind == OrderKind::PostOnly,
                ev,
            );
        } else {
            ev.push(self.expire(o.symbol, o.participant, o.order_id, left));
        }
    }

    fn replace(&mut self, r: &ReplaceOrder, ev: &mut Vec<Event>) {
        let reject = |reason| Event::Reject {
            symbol: r.symbol,
            participant: r.participant,
            order_id: r.order_id,
            reason,
        };
        if let Err(reason) = self.validate(r.symbol, r.qty, Some(r.price)) {
            return ev.push(reject(reason));
        }
        let i = match self.lookup(r.symbol, r.order_id, r.participant) {
            Ok(i) => i,
            Err(reason) => return ev.push(reject(reason)),
        };
        let cur = self.orders[i];
        let crossing = self.orders.iter().any(|o| {
            o.symbol == cur.symbol
                && o.side != cur.side
                && crosses(cur.side, Some(r.price.0), o.price)
        });
        if cur.post_only && crossing {
            return ev.push(reject(RejectReason::WouldTake));
        }
        ev.push(Event::Accept {
            symbol: r.symbol,
            participant: r.participant,
            order_id: r.order_id,
        });
        if cur.price == r.price.0 && r.qty.0 <= cur.qty {
            if r.qty.0 < cur.qty {
                self.orders[i].qty = r.qty.0;
                ev.push(Event::Cancel {
                    symbol: r.symbol,
                    order_id: r.order_id,
                    qty: Qty(cur.qty - r.qty.0),
                });
            }
            return;
        }
        if !crossing {
            self.seq += 1;
            let o = &mut self.orders[i];
            (o.price, o.qty, o.seq) = (r.price.0, r.qty.0, self.seq);
            ev.push(Event::Replace {
                symbol: r.symbol,
                order_id: r.order_id,
                side: cur.side,
                price: r.price,
                qty: r.qty,
            });
            return;
        }
        ev.push(Event::Delete {
            symbol: r.symbol,
            order_id: r.order_id,
        });
        self.orders.remove(i);
        let stp = self.stp.contains(&r.participant.0);
        let mut left = r.qty.0;
        self.take(
            r.symbol,
            r.order_id,
            r.participant,
            cur.side,
            Some(r.price.0),
            stp,
            &mut left,
            ev,
        );
        if left > 0 {
            self.rest(
                r.symbol,
                r.order_id,
                r.participant,
                cur.side,
                r.price.0,
                left,
                cur.post_only,
                ev,
            );
        }
    }

    fn expire(
        &self,
        symbol: SymbolIndex,
        participant: ParticipantId,
        order_id: OrderId,
        qty: i64,
    ) -> Event {
        Event::Expire {
            symbol,
            participant,
            order_id,
            qty: Qty(qty),
            reason: ExpireReason::Unfilled,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rest(
        &mut self,
        symbol: SymbolIndex,
        id: OrderId,
        participant: ParticipantId,
        side: Side,
        price: i64,
        qty: i64,
        post_only: bool,
        ev: &mut Vec<Event>,
    ) {
        self.seq += 1;
        self.orders.push(RefOrder {
            id: id.0,
            participant: participant.0,
            symbol: symbol.0,
            side,
            price,
            qty,
            seq: self.seq,
            post_only,
        });
        ev.push(Event::Add {
            symbol,
            order_id: id,
            side,
            price: Price(price),
            qty: Qty(qty),
        });
    }

    /// The index of the best resting order the taker crosses.
    fn best_maker(&self, symbol: u32, side: Side, limit: Option<i64>) -> Option<usize> {
        let key = |o: &RefOrder| (if side == Side::Buy { o.price } else { -o.price }, o.seq);
        self.orders
            .iter()
            .enumerate()
            .filter(|(_, o)| o.symbol == symbol && o.side != side && crosses(side, limit, o.price))
            .min_by_key(|(_, o)| key(o))
            .map(|(i, _)| i)
    }

    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        symbol: SymbolIndex,
        id: OrderId,
        participant: ParticipantId,
        side: Side,
        limit: Option<i64>,
        stp: bool,
        left: &mut i64,
        ev: &mut Vec<Event>,
    ) {
        let mut level: Option<(i64, i64)> = None; // (price, traded)
        while *left > 0 {
            let Some(i) = self.best_maker(symbol.0, side, limit) else {
                break;
            };
            let m = self.orders[i];
            if let Some((price, traded)) = level
                && price != m.price
            {
                self.trade(symbol, side, price, traded, ev);
                level = None;
            }
            let traded_here = level.map_or(0, |l| l.1);
            level = Some((m.price, traded_here));
            if stp && m.participant == participant.0 {
                ev.push(Event::Expire {
                    symbol,
                    participant,
                    order_id: OrderId(m.id),
                    qty: Qty(m.qty),
                    reason: ExpireReason::SelfTrade,
                });
                ev.push(Event::Delete {
                    symbol,
                    order_id: OrderId(m.id),
                });
                self.orders.remove(i);
                continue;
            }
            let q = m.qty.min(*left);
            self.match_number += 1;
            let mn = MatchNumber(self.match_number);
            ev.push(Event::Fill(Fill {
                symbol,
                match_number: mn,
                price: Price(m.price),
                qty: Qty(q),
                maker_order_id: OrderId(m.id),
                maker_participant: ParticipantId(m.participant),
                taker_order_id: id,
                taker_participant: participant,
                taker_side: side,
            }));
            ev.push(Event::Execute {
                symbol,
                order_id: OrderId(m.id),
                side: m.side,
                price: Price(m.price),
                qty: Qty(q),
                match_number: mn,
            });
            *left -= q;
            level = Some((m.price, traded_here + q));
            if q == m.qty {
                self.orders.remove(i);
            } else {
                self.orders[i].qty -= q;
            }
        }
        if let Some((price, traded)) = level {
            self.trade(symbol, side, price, traded, ev);
        }
    }

    fn trade(
        &self,
        symbol: SymbolIndex,
        aggressor: Side,
        price: i64,
        traded: i64,
        ev: &mut Vec<Event>,
    ) {
        if traded > 0 {
            let match_number = MatchNumber(self.match_number);
            ev.push(Event::Trade {
                symbol,
                aggressor,
                price: Price(price),
                qty: Qty(traded),
                match_number,
            });
        }
    }

    /// All levels of one side, best first.
    pub(crate) fn depth(&self, symbol: u32, side: Side) -> Vec<LevelView> {
        let mut prices: Vec<i64> = self
            .orders
            .iter()
            .filter(|o| o.symbol == symbol && o.side == side)
            .map(|o| o.price)
            .collect();
        prices.sort_unstable();
        prices.dedup();
        if side == Side::Buy {
            prices.reverse();
        }
        prices
            .into_iter()
            .map(|p| {
                let at = self
                    .orders
                    .iter()
                    .filter(|o| o.symbol == symbol && o.side == side && o.price == p);
                LevelView {
                    price: Price(p),
                    qty: Qty(at.clone().map(|o| o.qty).sum()),
                    order_count: at.count() as u32,
                }
            })
            .collect()
    }

    /// Order ids at one level in time priority.
    pub(crate) fn level_orders(&self, symbol: u32, side: Side, price: i64) -> Vec<OrderId> {
        let mut at: Vec<_> = self
            .orders
            .iter()
            .filter(|o| o.symbol == symbol && o.side == side && o.price == price)
            .collect();
        at.sort_by_key(|o| o.seq);
        at.into_iter().map(|o| OrderId(o.id)).collect()
    }

    pub(crate) fn views(&self) -> Vec<OrderView> {
        self.orders
            .iter()
            .map(|o| OrderView {
                order_id: OrderId(o.id),
                participant: ParticipantId(o.participant),
                symbol: SymbolIndex(o.symbol),
                side: o.side,
                price: Price(o.price),
                qty: Qty(o.qty),
                post_only: o.post_only,
            })
            .collect()
    }
}
