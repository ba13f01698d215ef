//! The root's matching glue: sequenced order-entry messages in, engine inputs through
//! [`lob::Engine`], order responses and ITCH market data out.
//!
//! The exchange assigns every new order an [`lob::OrderId`] (which is also its public ITCH
//! order reference) and remembers, per live order, its owner, the client order id of its
//! latest enter or replace and its open quantity, so replaces and cancels can name orders by
//! client order id and every fill reaches its owner with the shares still open. An enter, or
//! a replace to a new token, that names the token of another live order of the same
//! participant is refused (`DuplicateClientOrderId`, as OUCH refuses a token in use): taking
//! it would leave that order beyond its owner's cancels, and its fills would name the new
//! one. A token whose order is done may be used again.
//!
//! Mapping of engine events: `Accept`/`Reject` answer the request (`A`, `R`, `C` for an
//! accepted cancel, `J`); `Fill` becomes an `E` execution to both owners; `Expire` a `C`
//! cancel (IOC remainder or self-match prevention). The public events become ITCH `A`, `E`,
//! `X`, `D`, `U` and `P`; a `P` with order reference 0 is the engine's per-level trade summary
//! of visible executions already reported by `E` (count volume from `E` only).

use std::collections::BTreeMap;

use lob::{
    Engine, EngineConfig, Input, OrderId, OrderKind, ParticipantId, Price, Qty, SymbolConfig,
    SymbolIndex,
};
use wire::itch::{self, Message as Itch};
use wire::order::{
    self, CancelReason, Display, Liquidity, OrderHeader, OrderType, RejectReason, Repr as OrderMsg,
    TimeInForce,
};
use wire::{ExchangeTime, Side, Stock};

use crate::config::MarketConfig;

/// What one request produced.
#[derive(Debug, Default)]
pub(crate) struct Outputs {
    /// Responses, each with the participant to deliver it to.
    pub(crate) responses: Vec<(u32, OrderMsg)>,
    /// Public market data.
    pub(crate) itch: Vec<Itch>,
    /// Shares the request took as a taker.
    pub(crate) filled: u32,
    /// Whether the engine accepted it.
    pub(crate) accepted: bool,
    /// Fills made.
    pub(crate) fills: u32,
}

impl Outputs {
    pub(crate) fn clear(&mut self) {
        self.responses.clear();
        self.itch.clear();
        self.filled = 0;
        self.accepted = false;
        self.fills = 0;
    }
}

/// The exchange's state in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExchangeState {
    pub(crate) engine: lob::EngineSnapshot,
    pub(crate) live: Vec<LiveOrder>,
    pub(crate) by_client: Vec<((u32, u64), u64)>,
    pub(crate) next_order_id: u64,
}

/// A live order's owner data in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LiveOrder {
    pub(crate) order_id: u64,
    pub(crate) participant: u32,
    pub(crate) gateway: u32,
    pub(crate) client_order_id: u64,
    pub(crate) open: u32,
}

#[derive(Clone, Copy, Debug)]
struct Live {
    participant: u32,
    gateway: u32,
    client_order_id: u64,
    open: u32,
}

/// The matching glue.
pub(crate) struct Exchange {
    engine: Engine,
    symbols: Vec<Stock>,
    live: BTreeMap<u64, Live>,
    by_client: BTreeMap<(u32, u64), u64>,
    next_order_id: u64,
    events: Vec<lob::Event>,
}

impl core::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Exchange")
            .field("symbols", &self.symbols)
            .field("live", &self.live.len())
            .field("next_order_id", &self.next_order_id)
            .finish_non_exhaustive()
    }
}

impl Exchange {
    pub(crate) fn new(market: &MarketConfig) -> Result<Self, String> {
        market.validate()?;
        let symbols = market.stocks()?;
        let symbol = SymbolConfig::new(
            market.tick as i64,
            Price(market.price_min as i64),
            Price(market.price_max as i64),
        );
        let config = EngineConfig {
            symbols: vec![symbol; symbols.len()],
            orders_max: market.orders_max,
            levels_max: market.orders_max,
            order_qty_max: market.order_shares_max as i64,
            stp_participants: Vec::new(),
        };
        let engine = Engine::new(config).map_err(|e| format!("matching engine: {e}"))?;
        Ok(Self {
            engine,
            symbols,
            live: BTreeMap::new(),
            by_client: BTreeMap::new(),
            next_order_id: 1,
            events: Vec::new(),
        })
    }

    /// The engine, for checkers.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Processes one sequenced request at `now`.
    pub(crate) fn process(&mut self, now: ExchangeTime, message: &OrderMsg, out: &mut Outputs) {
        out.clear();
        let header = *message.header();
        let p = header.participant_id;
        let reject = |out: &mut Outputs, reason| {
            let header = OrderHeader {
                time: now,
                ..header
            };
            out.responses
                .push((p, OrderMsg::Rejected(order::Rejected { header, reason })));
        };
        let input = match *message {
            OrderMsg::Enter(e) => {
                if self.by_client.contains_key(&(p, header.client_order_id)) {
                    // The token of an order still live: taking it would leave that order
                    // out of reach of its owner's cancels and replaces.
                    return reject(out, RejectReason::DuplicateClientOrderId);
                }
                let Some(symbol) = self.symbols.iter().position(|s| *s == e.stock) else {
                    return reject(out, RejectReason::InvalidStock);
                };
                if e.display == Display::Hidden {
                    return reject(out, RejectReason::InvalidDisplay);
                }
                let kind = match (e.order_type, e.time_in_force, e.display) {
                    (OrderType::Market, _, Display::PostOnly) => {
                        return reject(out, RejectReason::InvalidDisplay);
                    }
                    (OrderType::Market, _, _) => OrderKind::Market,
                    (_, TimeInForce::ImmediateOrCancel, Display::PostOnly)
                    | (_, TimeInForce::FillOrKill, Display::PostOnly) => {
                        return reject(out, RejectReason::InvalidDisplay);
                    }
                    (_, _, Display::PostOnly) => OrderKind::PostOnly,
                    (_, TimeInForce::ImmediateOrCancel, _) => OrderKind::Ioc,
                    (_, TimeInForce::FillOrKill, _) => OrderKind::Fok,
                    _ => OrderKind::Gtc,
                };
                let order_id = self.next_order_id;
                self.next_order_id += 1;
                Input::New(lob::NewOrder {
                    order_id: OrderId(order_id),
                    participant: ParticipantId(p),
                    symbol: SymbolIndex(symbol as u32),
                    side: to_lob(e.side),
                    kind,
                    price: Price(e.price as i64),
                    qty: Qty(e.shares as i64),
                })
            }
            OrderMsg::Replace(r) => {
                let Some((order_id, symbol)) = self.find(p, r.orig_client_order_id) else {
                    return reject(out, RejectReason::UnknownOrder);
                };
                if header.client_order_id != r.orig_client_order_id
                    && self.by_client.contains_key(&(p, header.client_order_id))
                {
                    return reject(out, RejectReason::DuplicateClientOrderId);
                }
                Input::Replace(lob::ReplaceOrder {
                    order_id,
                    participant: ParticipantId(p),
                    symbol,
                    price: Price(r.price as i64),
                    qty: Qty(r.shares as i64),
                })
            }
            OrderMsg::Cancel(c) => {
                let Some((order_id, symbol)) = self.find(p, c.orig_client_order_id) else {
                    return reject(out, RejectReason::UnknownOrder);
                };
                Input::Cancel(lob::CancelOrder {
                    order_id,
                    participant: ParticipantId(p),
                    symbol,
                })
            }
            _ => return reject(out, RejectReason::Other),
        };
        self.events.clear();
        self.engine.handle_input(&input, &mut self.events);
        let events = core::mem::take(&mut self.events);
        for event in &events {
            self.on_event(now, message, &input, event, out);
        }
        self.events = events;
    }

    fn find(&self, participant: u32, client_order_id: u64) -> Option<(OrderId, SymbolIndex)> {
        let order_id = OrderId(*self.by_client.get(&(participant, client_order_id))?);
        Some((order_id, self.engine.order(order_id)?.symbol))
    }

    fn on_event(
        &mut self,
        now: ExchangeTime,
        message: &OrderMsg,
        input: &Input,
        event: &lob::Event,
        out: &mut Outputs,
    ) {
        let header = OrderHeader {
            time: now,
            ..*message.header()
        };
        let p = header.participant_id;
        match *event {
            lob::Event::Accept { order_id, .. } => {
                out.accepted = true;
                match (*message, *input) {
                    (OrderMsg::Enter(e), _) => {
                        let live = Live {
                            participant: p,
                            gateway: header.gateway_id,
                            client_order_id: header.client_order_id,
                            open: e.shares,
                        };
                        self.live.insert(order_id.0, live);
                        self.by_client
                            .insert((p, header.client_order_id), order_id.0);
                        let accepted = order::Accepted {
                            header,
                            side: e.side,
                            shares: e.shares,
                            stock: e.stock,
                            price: e.price,
                            time_in_force: e.time_in_force,
                            order_type: e.order_type,
                            display: e.display,
                            order_ref: order_id.0,
                        };
                        out.responses.push((p, OrderMsg::Accepted(accepted)));
                    }
                    (OrderMsg::Replace(r), _) => {
                        self.by_client.remove(&(p, r.orig_client_order_id));
                        self.by_client
                            .insert((p, header.client_order_id), order_id.0);
                        if let Some(live) = self.live.get_mut(&order_id.0) {
                            live.client_order_id = header.client_order_id;
                            live.open = r.shares;
                        }
                        let replaced = order::Replaced {
                            header,
                            orig_client_order_id: r.orig_client_order_id,
                            shares: r.shares,
                            price: r.price,
                            order_ref: order_id.0,
                        };
                        out.responses.push((p, OrderMsg::Replaced(replaced)));
                    }
                    (OrderMsg::Cancel(c), _) => {
                        let open = self.forget(order_id.0).map_or(0, |l| l.open);
                        let canceled = order::Canceled {
                            header,
                            orig_client_order_id: c.orig_client_order_id,
                            canceled_shares: open,
                            reason: CancelReason::UserRequested,
                        };
                        out.responses.push((p, OrderMsg::Canceled(canceled)));
                    }
                    _ => {}
                }
            }
            lob::Event::Reject { reason, .. } => {
                let reason = match reason {
                    lob::RejectReason::UnknownSymbol => RejectReason::InvalidStock,
                    lob::RejectReason::QtyNotPositive | lob::RejectReason::QtyTooLarge => {
                        RejectReason::InvalidShares
                    }
                    lob::RejectReason::PriceOutOfBand | lob::RejectReason::PriceOffTick => {
                        RejectReason::InvalidPrice
                    }
                    lob::RejectReason::DuplicateOrderId => RejectReason::DuplicateClientOrderId,
                    lob::RejectReason::UnknownOrderId | lob::RejectReason::NotOwner => {
                        RejectReason::UnknownOrder
                    }
                    lob::RejectReason::WouldTake => RejectReason::WouldCross,
                    lob::RejectReason::BookFull => RejectReason::Other,
                };
                out.responses
                    .push((p, OrderMsg::Rejected(order::Rejected { header, reason })));
            }
            lob::Event::Fill(fill) => {
                out.fills += 1;
                let qty = fill.qty.0 as u32;
                out.filled += qty;
                for (order_id, liquidity) in [
                    (fill.maker_order_id, Liquidity::Added),
                    (fill.taker_order_id, Liquidity::Removed),
                ] {
                    let Some(live) = self.live.get_mut(&order_id.0) else {
                        continue;
                    };
                    live.open = live.open.saturating_sub(qty);
                    let live = *live;
                    let executed = order::Executed {
                        header: OrderHeader {
                            client_order_id: live.client_order_id,
                            participant_id: live.participant,
                            gateway_id: live.gateway,
                            time: now,
                        },
                        shares: qty,
                        price: fill.price.0 as u32,
                        match_number: fill.match_number.0,
                        liquidity,
                        leaves_shares: live.open,
                    };
                    out.responses
                        .push((live.participant, OrderMsg::Executed(executed)));
                    if live.open == 0 {
                        self.forget(order_id.0);
                    }
                }
            }
            lob::Event::Expire {
                order_id,
                qty,
                reason,
                ..
            } => {
                if let Some(live) = self.forget(order_id.0) {
                    let canceled = order::Canceled {
                        header: OrderHeader {
                            client_order_id: live.client_order_id,
                            participant_id: live.participant,
                            gateway_id: live.gateway,
                            time: now,
                        },
                        orig_client_order_id: live.client_order_id,
                        canceled_shares: qty.0 as u32,
                        reason: match reason {
                            lob::ExpireReason::Unfilled => CancelReason::ImmediateOrCancel,
                            lob::ExpireReason::SelfTrade => CancelReason::SelfMatchPrevention,
                        },
                    };
                    out.responses
                        .push((live.participant, OrderMsg::Canceled(canceled)));
                }
            }
            _ => {
                if let Some(message) = self.itch_of(now, event) {
                    out.itch.push(message);
                }
            }
        }
    }

    fn forget(&mut self, order_id: u64) -> Option<Live> {
        let live = self.live.remove(&order_id)?;
        if self
            .by_client
            .get(&(live.participant, live.client_order_id))
            == Some(&order_id)
        {
            self.by_client
                .remove(&(live.participant, live.client_order_id));
        }
        Some(live)
    }

    /// The ITCH message of a public engine event.
    fn itch_of(&self, now: ExchangeTime, event: &lob::Event) -> Option<Itch> {
        const DAY_NS: u64 = 86_400_000_000_000;
        let timestamp_ns = now.as_nanos() % DAY_NS;
        let stock = |s: SymbolIndex| self.symbols.get(s.0 as usize).copied().unwrap_or_default();
        let locate = |s: SymbolIndex| s.0 as u16;
        Some(match *event {
            lob::Event::Add {
                symbol,
                order_id,
                side,
                price,
                qty,
            } => Itch::AddOrder(itch::AddOrder {
                stock_locate: locate(symbol),
                tracking_number: 0,
                timestamp_ns,
                order_ref: order_id.0,
                side: to_wire(side),
                shares: qty.0 as u32,
                stock: stock(symbol),
                price: price.0 as u32,
            }),
            lob::Event::Execute {
                symbol,
                order_id,
                qty,
                match_number,
                ..
            } => Itch::OrderExecuted(itch::OrderExecuted {
                stock_locate: locate(symbol),
                tracking_number: 0,
                timestamp_ns,
                order_ref: order_id.0,
                executed_shares: qty.0 as u32,
                match_number: match_number.0,
            }),
            lob::Event::Cancel {
                symbol,
                order_id,
                qty,
            } => Itch::OrderCancel(itch::OrderCancel {
                stock_locate: locate(symbol),
                tracking_number: 0,
                timestamp_ns,
                order_ref: order_id.0,
                cancelled_shares: qty.0 as u32,
            }),
            lob::Event::Delete { symbol, order_id } => Itch::OrderDelete(itch::OrderDelete {
                stock_locate: locate(symbol),
                tracking_number: 0,
                timestamp_ns,
                order_ref: order_id.0,
            }),
            lob::Event::Replace {
                symbol,
                order_id,
                price,
                qty,
                ..
            } => Itch::OrderReplace(itch::OrderReplace {
                stock_locate: locate(symbol),
                tracking_number: 0,
                timestamp_ns,
                original_order_ref: order_id.0,
                new_order_ref: order_id.0,
                shares: qty.0 as u32,
                price: price.0 as u32,
            }),
            lob::Event::Trade {
                symbol,
                aggressor,
                price,
                qty,
                match_number,
            } => Itch::Trade(itch::Trade {
                stock_locate: locate(symbol),
                tracking_number: 0,
                timestamp_ns,
                order_ref: 0,
                side: to_wire(aggressor),
                shares: qty.0 as u32,
                stock: stock(symbol),
                price: price.0 as u32,
                match_number: match_number.0,
            }),
            _ => return None,
        })
    }

    /// The book as the feed would describe it to a reader starting from nothing: an Add Order
    /// per resting order, in price-time priority, stamped `now` (a gateway's book snapshot,
    /// [`wire::market`]'s "Book snapshots").
    pub(crate) fn book_messages(&self, now: ExchangeTime) -> Vec<Itch> {
        self.engine
            .snapshot()
            .orders
            .iter()
            .filter_map(|o| {
                let add = lob::Event::Add {
                    symbol: o.symbol,
                    order_id: o.order_id,
                    side: o.side,
                    price: o.price,
                    qty: o.qty,
                };
                self.itch_of(now, &add)
            })
            .collect()
    }

    /// The whole state, for the durable root's snapshots ([`crate::journal`]).
    pub(crate) fn state(&self) -> ExchangeState {
        ExchangeState {
            engine: self.engine.snapshot(),
            live: self
                .live
                .iter()
                .map(|(&order_id, l)| LiveOrder {
                    order_id,
                    participant: l.participant,
                    gateway: l.gateway,
                    client_order_id: l.client_order_id,
                    open: l.open,
                })
                .collect(),
            by_client: self.by_client.iter().map(|(&k, &v)| (k, v)).collect(),
            next_order_id: self.next_order_id,
        }
    }

    /// An exchange for `market` in `state` (from [`Exchange::state`] of one with the same
    /// market).
    pub(crate) fn restore(market: &MarketConfig, state: &ExchangeState) -> Result<Self, String> {
        let mut exchange = Self::new(market)?;
        exchange.engine.restore(&state.engine)?;
        for l in &state.live {
            let live = Live {
                participant: l.participant,
                gateway: l.gateway,
                client_order_id: l.client_order_id,
                open: l.open,
            };
            exchange.live.insert(l.order_id, live);
        }
        exchange.by_client.extend(state.by_client.iter().copied());
        exchange.next_order_id = state.next_order_id;
        if exchange.live.len() != state.live.len()
            || exchange.live.len() as u32 != exchange.engine.order_count()
        {
            return Err("snapshot: live orders and the book disagree".to_string());
        }
        // One token per live order, each naming it (a snapshot written before tokens in use
        // were refused may have one order's token taken by another).
        let named = exchange
            .by_client
            .iter()
            .all(|(&(participant, token), id)| {
                exchange
                    .live
                    .get(id)
                    .is_some_and(|l| l.participant == participant && l.client_order_id == token)
            });
        if exchange.by_client.len() != exchange.live.len() || !named {
            return Err(
                "snapshot: live orders and their client order ids disagree (a snapshot of an \
                 earlier version, in which a new order could take a live order's id?)"
                    .to_string(),
            );
        }
        Ok(exchange)
    }

    /// Live orders the glue tracks (equals the engine's resting orders).
    pub(crate) fn live(&self) -> usize {
        self.live.len()
    }

    pub(crate) fn check_invariants(&self) {
        assert_eq!(
            self.live.len() as u32,
            self.engine.order_count(),
            "one live entry per resting order"
        );
        assert_eq!(
            self.by_client.len(),
            self.live.len(),
            "one client order id per live order"
        );
    }
}

fn to_lob(side: Side) -> lob::Side {
    match side {
        Side::Buy => lob::Side::Buy,
        Side::Sell => lob::Side::Sell,
    }
}

fn to_wire(side: lob::Side) -> Side {
    match side {
        lob::Side::Buy => Side::Buy,
        lob::Side::Sell => Side::Sell,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u32 = 7;

    fn header(client_order_id: u64) -> OrderHeader {
        OrderHeader {
            client_order_id,
            participant_id: P,
            gateway_id: 3,
            time: ExchangeTime(1),
        }
    }

    fn enter(client_order_id: u64, side: Side, price: u32) -> OrderMsg {
        OrderMsg::Enter(order::Enter {
            header: header(client_order_id),
            side,
            shares: 100,
            stock: Stock::new("JSPR").unwrap(),
            price,
            time_in_force: TimeInForce::Day,
            order_type: OrderType::Limit,
            display: Display::Visible,
        })
    }

    fn replace(client_order_id: u64, orig_client_order_id: u64, price: u32) -> OrderMsg {
        OrderMsg::Replace(order::Replace {
            header: header(client_order_id),
            orig_client_order_id,
            shares: 50,
            price,
        })
    }

    fn cancel(client_order_id: u64, orig_client_order_id: u64) -> OrderMsg {
        OrderMsg::Cancel(order::Cancel {
            header: header(client_order_id),
            orig_client_order_id,
            shares: 0,
        })
    }

    /// The one response `message` got, after the invariants are checked.
    fn answer(exchange: &mut Exchange, message: OrderMsg) -> OrderMsg {
        let mut out = Outputs::default();
        exchange.process(ExchangeTime(2), &message, &mut out);
        exchange.check_invariants();
        assert_eq!(out.responses.len(), 1, "{:?}", out.responses);
        assert_eq!(out.responses[0].0, P);
        out.responses[0].1
    }

    fn refused_as(response: OrderMsg) -> Option<RejectReason> {
        match response {
            OrderMsg::Rejected(r) => Some(r.reason),
            _ => None,
        }
    }

    #[test]
    fn a_token_in_use_is_refused_and_the_live_order_stays_in_reach() {
        let mut exchange = Exchange::new(&MarketConfig::default()).unwrap();
        let first = answer(&mut exchange, enter(1, Side::Buy, 10_000));
        assert!(matches!(first, OrderMsg::Accepted(_)), "{first:?}");
        let second = answer(&mut exchange, enter(2, Side::Buy, 9_900));
        assert!(matches!(second, OrderMsg::Accepted(_)), "{second:?}");

        // A new order under order 1's token (a gateway started again, numbering from 1).
        let again = answer(&mut exchange, enter(1, Side::Sell, 20_000));
        assert_eq!(
            refused_as(again),
            Some(RejectReason::DuplicateClientOrderId)
        );
        // Order 1 to a new token that is order 2's.
        let onto = answer(&mut exchange, replace(2, 1, 10_100));
        assert_eq!(refused_as(onto), Some(RejectReason::DuplicateClientOrderId));
        assert_eq!(exchange.live(), 2);

        // Both are still in reach of their own tokens: a replace keeping its token, then
        // cancels by each.
        let kept = answer(&mut exchange, replace(1, 1, 10_100));
        assert!(matches!(kept, OrderMsg::Replaced(_)), "{kept:?}");
        for token in [1, 2] {
            let done = answer(&mut exchange, cancel(100 + token, token));
            assert!(
                matches!(done, OrderMsg::Canceled(c) if c.orig_client_order_id == token && c.canceled_shares > 0),
                "{done:?}"
            );
        }
        assert_eq!(exchange.live(), 0);

        // A token whose order is done may be used again.
        let reused = answer(&mut exchange, enter(1, Side::Buy, 10_000));
        assert!(matches!(reused, OrderMsg::Accepted(_)), "{reused:?}");
    }

    /// A snapshot in which one live order's token names another (written before tokens in
    /// use were refused) is refused with a reason, not a panic at the first invariant check.
    #[test]
    fn a_snapshot_whose_tokens_disagree_with_its_orders_is_refused() {
        let market = MarketConfig::default();
        let mut exchange = Exchange::new(&market).unwrap();
        answer(&mut exchange, enter(1, Side::Buy, 10_000));
        answer(&mut exchange, enter(2, Side::Buy, 9_900));
        let state = exchange.state();
        assert!(Exchange::restore(&market, &state).is_ok());
        let mut taken = state.clone();
        // Order 2 took order 1's token: one entry for two live orders.
        taken.by_client = vec![((P, 1), taken.live[1].order_id)];
        taken.live[1].client_order_id = 1;
        let error = Exchange::restore(&market, &taken).unwrap_err();
        assert!(error.contains("client order ids disagree"), "{error}");
        let mut crossed = state;
        crossed.by_client = vec![
            ((P, 1), crossed.live[1].order_id),
            ((P, 2), crossed.live[0].order_id),
        ];
        assert!(Exchange::restore(&market, &crossed).is_err());
    }

    #[test]
    fn another_participant_may_use_the_same_token() {
        let mut exchange = Exchange::new(&MarketConfig::default()).unwrap();
        assert!(matches!(
            answer(&mut exchange, enter(1, Side::Buy, 10_000)),
            OrderMsg::Accepted(_)
        ));
        let mut other = enter(1, Side::Buy, 9_900);
        if let OrderMsg::Enter(e) = &mut other {
            e.header.participant_id = P + 1;
        }
        let mut out = Outputs::default();
        exchange.process(ExchangeTime(2), &other, &mut out);
        assert!(
            matches!(out.responses[..], [(p, OrderMsg::Accepted(_))] if p == P + 1),
            "{:?}",
            out.responses
        );
        exchange.check_invariants();
    }
}
