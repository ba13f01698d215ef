//! Goal: pin the bug classes other matching engines ship with, one small scenario each.
//! Method: drive the engine through hand-written inputs and check events and book state;
//! `check_invariants` runs after every input.

use lob::{
    CancelOrder, ConfigError, Engine, EngineConfig, Event, ExpireReason, Fill, Input, LevelView,
    NewOrder, OrderId, OrderKind, ParticipantId, Price, Qty, RejectReason, ReplaceOrder, Side,
    SymbolConfig, SymbolIndex,
};

const S: SymbolIndex = SymbolIndex(0);

struct Harness {
    engine: Engine,
    events: Vec<Event>,
}

impl Harness {
    fn new() -> Self {
        Self::with(64, 64, vec![ParticipantId(9)])
    }

    fn with(orders_max: u32, levels_max: u32, stp: Vec<ParticipantId>) -> Self {
        let symbol = SymbolConfig::new(1, Price(1), Price(1_000_000));
        let config = EngineConfig {
            symbols: vec![symbol],
            orders_max,
            levels_max,
            order_qty_max: 1_000_000,
            stp_participants: stp,
        };
        Self {
            engine: Engine::new(config).unwrap(),
            events: Vec::new(),
        }
    }

    fn input(&mut self, input: Input) -> &[Event] {
        self.events.clear();
        self.engine.handle_input(&input, &mut self.events);
        self.engine.check_invariants();
        let responses = self
            .events
            .iter()
            .filter(|e| matches!(e, Event::Accept { .. } | Event::Reject { .. }))
            .count();
        assert_eq!(responses, 1, "exactly one response per input");
        assert!(matches!(
            self.events[0],
            Event::Accept { .. } | Event::Reject { .. }
        ));
        &self.events
    }

    fn order(
        &mut self,
        id: u64,
        p: u32,
        side: Side,
        kind: OrderKind,
        price: i64,
        qty: i64,
    ) -> &[Event] {
        self.input(Input::New(NewOrder {
            order_id: OrderId(id),
            participant: ParticipantId(p),
            symbol: S,
            side,
            kind,
            price: Price(price),
            qty: Qty(qty),
        }))
    }

    fn gtc(&mut self, id: u64, side: Side, price: i64, qty: i64) -> &[Event] {
        self.order(id, 1, side, OrderKind::Gtc, price, qty)
    }

    fn replace(&mut self, id: u64, price: i64, qty: i64) -> &[Event] {
        self.input(Input::Replace(ReplaceOrder {
            order_id: OrderId(id),
            participant: ParticipantId(1),
            symbol: S,
            price: Price(price),
            qty: Qty(qty),
        }))
    }

    fn cancel(&mut self, id: u64, p: u32) -> &[Event] {
        self.input(Input::Cancel(CancelOrder {
            order_id: OrderId(id),
            participant: ParticipantId(p),
            symbol: S,
        }))
    }

    fn fills(&self) -> Vec<(u64, u64, i64, i64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Fill(f) => {
                    Some((f.maker_order_id.0, f.taker_order_id.0, f.price.0, f.qty.0))
                }
                _ => None,
            })
            .collect()
    }

    fn queue(&self, side: Side, price: i64) -> Vec<u64> {
        self.engine
            .level_orders(S, side, Price(price))
            .into_iter()
            .map(|o| o.0)
            .collect()
    }

    fn depth(&self, side: Side) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        self.engine.depth(S, side, usize::MAX, &mut out);
        out.into_iter()
            .map(|l: LevelView| (l.price.0, l.qty.0))
            .collect()
    }
}

fn rejected(events: &[Event]) -> Option<RejectReason> {
    match events {
        [Event::Reject { reason, .. }] => Some(*reason),
        _ => None,
    }
}

#[test]
fn ioc_remainder_never_rests() {
    let mut h = Harness::new();
    h.gtc(1, Side::Sell, 100, 5);
    let events = h.order(2, 1, Side::Buy, OrderKind::Ioc, 101, 8).to_vec();
    assert_eq!(h.fills(), vec![(1, 2, 100, 5)]);
    assert!(events.contains(&Event::Expire {
        symbol: S,
        participant: ParticipantId(1),
        order_id: OrderId(2),
        qty: Qty(3),
        reason: ExpireReason::Unfilled,
    }));
    assert!(!events.iter().any(|e| matches!(e, Event::Add { .. })));
    assert_eq!(h.engine.order(OrderId(2)), None);
    assert_eq!(h.engine.best_bid(S), None);
    // An IOC that does not cross at all also never rests; nor does a market order.
    h.order(3, 1, Side::Buy, OrderKind::Ioc, 99, 4);
    h.order(4, 1, Side::Sell, OrderKind::Market, 0, 4);
    assert_eq!(h.engine.order_count(), 0);
}

#[test]
fn partially_filled_maker_keeps_its_place() {
    let mut h = Harness::new();
    h.gtc(1, Side::Sell, 100, 10);
    h.gtc(2, Side::Sell, 100, 10);
    h.order(3, 1, Side::Buy, OrderKind::Ioc, 100, 4);
    assert_eq!(h.fills(), vec![(1, 3, 100, 4)]);
    assert_eq!(h.queue(Side::Sell, 100), vec![1, 2]);
    assert_eq!(h.engine.order(OrderId(1)).unwrap().qty, Qty(6));
    h.order(4, 1, Side::Buy, OrderKind::Ioc, 100, 7);
    assert_eq!(h.fills(), vec![(1, 4, 100, 6), (2, 4, 100, 1)]);
}

#[test]
fn crossing_replace_rematches() {
    let mut h = Harness::new();
    h.gtc(1, Side::Sell, 105, 3);
    h.gtc(2, Side::Buy, 100, 5);
    let events = h.replace(2, 106, 5).to_vec();
    assert!(matches!(
        events[1],
        Event::Delete {
            order_id: OrderId(2),
            ..
        }
    ));
    assert_eq!(h.fills(), vec![(1, 2, 105, 3)]);
    let add = Event::Add {
        symbol: S,
        order_id: OrderId(2),
        side: Side::Buy,
        price: Price(106),
        qty: Qty(2),
    };
    assert_eq!(events.last(), Some(&add));
    assert_eq!(h.depth(Side::Buy), vec![(106, 2)]);
    assert_eq!(h.depth(Side::Sell), vec![]);
}

/// A post-only order stays one through its replaces: a replace to a price that would take
/// is rejected (as the order entered at that price would be) and leaves it as it was; one
/// that does not cross moves it; after a crash the snapshot keeps it post-only.
#[test]
fn a_post_only_order_never_takes_through_a_replace() {
    let mut h = Harness::new();
    h.gtc(1, Side::Sell, 105, 3);
    h.order(2, 1, Side::Buy, OrderKind::PostOnly, 100, 5);
    let events = h.replace(2, 105, 5).to_vec();
    assert_eq!(rejected(&events), Some(RejectReason::WouldTake));
    assert_eq!(h.fills(), vec![]);
    assert_eq!(h.depth(Side::Buy), vec![(100, 5)]);
    assert_eq!(h.depth(Side::Sell), vec![(105, 3)]);
    h.replace(2, 104, 6);
    assert_eq!(h.depth(Side::Buy), vec![(104, 6)]);
    assert!(h.engine.order(OrderId(2)).unwrap().post_only);
    // A plain order crossing by replace still trades.
    h.gtc(3, Side::Buy, 90, 1);
    h.replace(3, 105, 1);
    assert_eq!(h.fills(), vec![(1, 3, 105, 1)]);
    // Restored from a snapshot, it is still post-only.
    let snapshot = h.engine.snapshot();
    let mut restored = Harness::new();
    restored.engine.restore(&snapshot).unwrap();
    assert!(restored.engine.order(OrderId(2)).unwrap().post_only);
    let events = restored.replace(2, 105, 6).to_vec();
    assert_eq!(rejected(&events), Some(RejectReason::WouldTake));
}

#[test]
fn replace_priority_rules() {
    let mut h = Harness::new();
    h.gtc(1, Side::Buy, 100, 10);
    h.gtc(2, Side::Buy, 100, 10);
    // Size down keeps priority and is an ITCH order cancel of the difference.
    let events = h.replace(1, 100, 4).to_vec();
    assert_eq!(
        events[1],
        Event::Cancel {
            symbol: S,
            order_id: OrderId(1),
            qty: Qty(6)
        }
    );
    assert_eq!(h.queue(Side::Buy, 100), vec![1, 2]);
    // Size up loses it.
    h.replace(1, 100, 5);
    assert_eq!(h.queue(Side::Buy, 100), vec![2, 1]);
    // A price change loses it too, even coming back.
    h.replace(2, 99, 10);
    h.replace(2, 100, 10);
    assert_eq!(h.queue(Side::Buy, 100), vec![1, 2]);
    assert_eq!(h.depth(Side::Buy), vec![(100, 15)]);
}

#[test]
fn trades_happen_at_the_makers_price() {
    let mut h = Harness::new();
    h.gtc(1, Side::Sell, 100, 1);
    h.gtc(2, Side::Sell, 102, 1);
    h.order(3, 1, Side::Buy, OrderKind::Gtc, 110, 2);
    assert_eq!(h.fills(), vec![(1, 3, 100, 1), (2, 3, 102, 1)]);
    h.gtc(4, Side::Buy, 90, 1);
    h.order(5, 1, Side::Sell, OrderKind::Market, 0, 1);
    assert_eq!(h.fills(), vec![(4, 5, 90, 1)]);
}

#[test]
fn fok_counts_all_reachable_quantity() {
    let mut h = Harness::new();
    h.gtc(1, Side::Sell, 100, 2);
    h.gtc(2, Side::Sell, 100, 3);
    h.gtc(3, Side::Sell, 101, 4);
    h.gtc(4, Side::Sell, 103, 50); // beyond the limit
    // 10 reachable within 102, 11 asked: killed untouched.
    let events = h.order(5, 1, Side::Buy, OrderKind::Fok, 102, 10).to_vec();
    assert_eq!(h.fills().len(), 0);
    assert!(matches!(
        events[1],
        Event::Expire {
            qty: Qty(10),
            reason: ExpireReason::Unfilled,
            ..
        }
    ));
    h.order(5, 1, Side::Buy, OrderKind::Fok, 102, 9); // exactly reachable: fills across orders and levels
    assert_eq!(
        h.fills(),
        vec![(1, 5, 100, 2), (2, 5, 100, 3), (3, 5, 101, 4)]
    );
    assert_eq!(h.depth(Side::Sell), vec![(103, 50)]);
}

#[test]
fn best_price_updates_when_the_top_level_empties() {
    let mut h = Harness::new();
    h.gtc(1, Side::Buy, 100, 1);
    h.gtc(2, Side::Buy, 98, 1);
    h.gtc(3, Side::Buy, 95, 1);
    h.cancel(1, 1);
    assert_eq!(h.engine.best_bid(S).map(|l| l.price), Some(Price(98)));
    h.order(4, 1, Side::Sell, OrderKind::Ioc, 98, 1);
    assert_eq!(h.engine.best_bid(S).map(|l| l.price), Some(Price(95)));
    h.replace(3, 97, 1);
    assert_eq!(h.engine.best_bid(S).map(|l| l.price), Some(Price(97)));
    h.cancel(3, 1);
    assert_eq!(h.engine.best_bid(S), None);
}

#[test]
fn no_zero_quantity_trades_or_orders() {
    let mut h = Harness::new();
    assert_eq!(
        rejected(h.gtc(1, Side::Sell, 100, 0)),
        Some(RejectReason::QtyNotPositive)
    );
    assert_eq!(
        rejected(h.gtc(1, Side::Sell, 100, -5)),
        Some(RejectReason::QtyNotPositive)
    );
    assert_eq!(
        rejected(h.replace(1, 100, 0)),
        Some(RejectReason::QtyNotPositive)
    );
    h.gtc(1, Side::Sell, 100, 3);
    h.order(2, 1, Side::Buy, OrderKind::Ioc, 100, 3);
    h.order(3, 1, Side::Buy, OrderKind::Ioc, 100, 3); // the level is gone: no zero fill against it
    assert_eq!(h.fills(), vec![]);
    assert_eq!(h.engine.best_ask(S), None);
}

#[test]
fn duplicate_ids_are_rejected() {
    let mut h = Harness::new();
    h.gtc(1, Side::Buy, 100, 3);
    assert_eq!(
        rejected(h.gtc(1, Side::Sell, 200, 3)),
        Some(RejectReason::DuplicateOrderId)
    );
    assert_eq!(
        rejected(h.order(1, 2, Side::Sell, OrderKind::Ioc, 100, 1)),
        Some(RejectReason::DuplicateOrderId)
    );
    assert_eq!(h.engine.order(OrderId(1)).unwrap().qty, Qty(3));
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let mut h = Harness::with(64, 64, vec![]);
    h.gtc(1, Side::Buy, 100, 3);
    let unknown_symbol = Input::New(NewOrder {
        order_id: OrderId(7),
        participant: ParticipantId(1),
        symbol: SymbolIndex(1),
        side: Side::Buy,
        kind: OrderKind::Gtc,
        price: Price(100),
        qty: Qty(1),
    });
    assert_eq!(
        rejected(h.input(unknown_symbol)),
        Some(RejectReason::UnknownSymbol)
    );
    assert_eq!(
        rejected(h.gtc(2, Side::Buy, 0, 3)),
        Some(RejectReason::PriceOutOfBand)
    );
    assert_eq!(
        rejected(h.gtc(2, Side::Buy, 1_000_001, 3)),
        Some(RejectReason::PriceOutOfBand)
    );
    assert_eq!(
        rejected(h.gtc(2, Side::Buy, 100, 1_000_001)),
        Some(RejectReason::QtyTooLarge)
    );
    assert_eq!(
        rejected(h.cancel(99, 1)),
        Some(RejectReason::UnknownOrderId)
    );
    assert_eq!(
        rejected(h.replace(99, 100, 1)),
        Some(RejectReason::UnknownOrderId)
    );
    assert_eq!(rejected(h.cancel(1, 2)), Some(RejectReason::NotOwner));
    assert_eq!(
        rejected(h.gtc(2, Side::Sell, 100, 1).to_vec().get(..1).unwrap()),
        None
    );
    assert_eq!(h.fills(), vec![(1, 2, 100, 1)]);
    assert_eq!(
        rejected(h.order(3, 1, Side::Sell, OrderKind::PostOnly, 100, 1)),
        Some(RejectReason::WouldTake)
    );
    assert_eq!(h.depth(Side::Buy), vec![(100, 2)]);
}

#[test]
fn off_tick_prices_are_rejected() {
    let symbol = SymbolConfig::new(100, Price(-10_000), Price(10_000));
    let config = EngineConfig {
        symbols: vec![symbol],
        orders_max: 8,
        levels_max: 8,
        order_qty_max: 10,
        stp_participants: vec![],
    };
    let mut engine = Engine::new(config).unwrap();
    let mut events = Vec::new();
    for (price, reason) in [
        (150, Some(RejectReason::PriceOffTick)),
        (-250, Some(RejectReason::PriceOffTick)),
        (-200, None),
    ] {
        events.clear();
        let order = NewOrder {
            order_id: OrderId(1),
            participant: ParticipantId(0),
            symbol: S,
            side: Side::Sell,
            kind: OrderKind::Gtc,
            price: Price(price),
            qty: Qty(1),
        };
        engine.handle_input(&Input::New(order), &mut events);
        assert_eq!(rejected(&events), reason, "price {price}");
    }
    assert_eq!(engine.best_ask(S).map(|l| l.price), Some(Price(-200)));
}

#[test]
fn self_trade_prevention_cancels_the_resting_order() {
    let mut h = Harness::new(); // participant 9 has STP
    h.order(1, 9, Side::Sell, OrderKind::Gtc, 100, 5);
    h.order(2, 2, Side::Sell, OrderKind::Gtc, 100, 5);
    let events = h.order(3, 9, Side::Buy, OrderKind::Ioc, 100, 5).to_vec();
    assert!(events.contains(&Event::Expire {
        symbol: S,
        participant: ParticipantId(9),
        order_id: OrderId(1),
        qty: Qty(5),
        reason: ExpireReason::SelfTrade,
    }));
    assert_eq!(h.fills(), vec![(2, 3, 100, 5)]);
    // Without STP, a participant may trade with itself.
    h.order(4, 1, Side::Sell, OrderKind::Gtc, 100, 1);
    h.order(5, 1, Side::Buy, OrderKind::Ioc, 100, 1);
    assert_eq!(h.fills(), vec![(4, 5, 100, 1)]);
}

#[test]
fn capacity_exhaustion_is_a_reject_not_a_panic() {
    let mut h = Harness::with(2, 2, vec![]);
    h.gtc(1, Side::Buy, 100, 1);
    h.gtc(2, Side::Buy, 99, 1);
    assert_eq!(
        rejected(h.gtc(3, Side::Buy, 98, 1)),
        Some(RejectReason::BookFull)
    );
    // Alone at its level, order 2 frees the level it leaves: it may move.
    assert_eq!(rejected(h.replace(2, 97, 1)), None);
    assert_eq!(h.depth(Side::Buy), vec![(100, 1), (97, 1)]);
    // An order that cannot rest is still fine, and cancels free room.
    h.order(4, 1, Side::Sell, OrderKind::Ioc, 100, 1);
    assert_eq!(h.fills(), vec![(1, 4, 100, 1)]);
    h.gtc(3, Side::Buy, 98, 1);
    assert_eq!(h.depth(Side::Buy), vec![(98, 1), (97, 1)]);
}

/// Goal: a full book refuses only what would rest without trading. An order that crosses
/// either fills or takes every order it crosses, so its remainder has the slot and the level
/// they freed; a replace that leaves its level empty has that level. Refusing them (as the
/// engine did, checking room before matching) turned the orders that empty a full book away.
#[test]
fn a_full_book_still_takes_what_would_trade() {
    let mut h = Harness::with(3, 2, vec![]);
    h.gtc(1, Side::Buy, 100, 1);
    h.gtc(2, Side::Buy, 99, 1);
    h.gtc(3, Side::Buy, 99, 1);
    // Orders and levels are all taken: resting without trading is refused...
    assert_eq!(
        rejected(h.gtc(4, Side::Sell, 101, 1)),
        Some(RejectReason::BookFull)
    );
    // ...and so is moving an order off a level it shares, to a price with no level.
    assert_eq!(rejected(h.replace(3, 98, 1)), Some(RejectReason::BookFull));
    // A sell that crosses 100 and has 2 left rests there, where order 1 was.
    assert_eq!(rejected(h.gtc(5, Side::Sell, 100, 3)), None);
    assert_eq!(h.fills(), vec![(1, 5, 100, 1)]);
    assert_eq!(h.depth(Side::Sell), vec![(100, 2)]);
    assert_eq!(h.depth(Side::Buy), vec![(99, 2)]);
    // A buy that crosses it fully fills in a full book.
    h.gtc(6, Side::Sell, 101, 1);
    assert_eq!(
        rejected(h.gtc(7, Side::Sell, 102, 1)),
        Some(RejectReason::BookFull)
    );
    assert_eq!(rejected(h.gtc(8, Side::Buy, 100, 2)), None);
    assert_eq!(h.fills(), vec![(5, 8, 100, 2)]);
}

/// Goal: whatever comes in, a book a few orders and levels deep never panics for want of
/// room, keeps its invariants (the harness checks them after every input), and answers
/// BookFull only to an order that would rest without trading. Method: random new orders of
/// every kind, replaces and cancels from three participants (one with STP) on a book of 4
/// orders and 3 levels, 300 inputs per case.
#[test]
fn a_tiny_book_never_runs_out_of_room_mid_match() {
    use proptest::prelude::*;
    let input = (
        0u8..5,
        1u64..12,
        0u32..3,
        any::<bool>(),
        95i64..106,
        1i64..4,
    );
    let config = ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    };
    proptest!(config, |(inputs in proptest::collection::vec(input, 300))| {
        let mut h = Harness::with(4, 3, vec![ParticipantId(2)]);
        for (op, id, p, buy, price, qty) in inputs {
            let side = if buy { Side::Buy } else { Side::Sell };
            let crosses = match side {
                Side::Buy => h.engine.best_ask(S).is_some_and(|l| l.price.0 <= price),
                Side::Sell => h.engine.best_bid(S).is_some_and(|l| l.price.0 >= price),
            };
            let kind = [OrderKind::Gtc, OrderKind::Ioc, OrderKind::Fok, OrderKind::PostOnly][op as usize % 4];
            let events = match op {
                0..=3 => h.order(id, p, side, kind, price, qty).to_vec(),
                _ if buy => h.replace(id, price, qty).to_vec(),
                _ => h.cancel(id, p).to_vec(),
            };
            if rejected(&events) == Some(RejectReason::BookFull) && op <= 3 {
                prop_assert!(!crosses, "a crossing {kind:?} was refused as BookFull");
            }
        }
    });
}

#[test]
fn fill_events_carry_both_sides() {
    let mut h = Harness::new();
    h.order(1, 4, Side::Buy, OrderKind::Gtc, 100, 5);
    let events = h.order(2, 5, Side::Sell, OrderKind::Gtc, 99, 2).to_vec();
    let fill = Fill {
        symbol: S,
        match_number: lob::MatchNumber(1),
        price: Price(100),
        qty: Qty(2),
        maker_order_id: OrderId(1),
        maker_participant: ParticipantId(4),
        taker_order_id: OrderId(2),
        taker_participant: ParticipantId(5),
        taker_side: Side::Sell,
    };
    assert_eq!(events[1], Event::Fill(fill));
    assert!(matches!(
        events[2],
        Event::Execute {
            order_id: OrderId(1),
            side: Side::Buy,
            qty: Qty(2),
            ..
        }
    ));
    assert!(matches!(
        events[3],
        Event::Trade {
            aggressor: Side::Sell,
            qty: Qty(2),
            ..
        }
    ));
    assert_eq!(events.len(), 4);
}

#[test]
fn ten_thousand_symbols() {
    let symbols = vec![SymbolConfig::new(1, Price(1), Price(1 << 20)); 10_000];
    let config = EngineConfig {
        symbols,
        orders_max: 1 << 16,
        levels_max: 1 << 16,
        order_qty_max: 100,
        stp_participants: vec![],
    };
    let mut engine = Engine::new(config).unwrap();
    let mut events = Vec::new();
    for i in 0..20_000u64 {
        let symbol = SymbolIndex((i % 10_000) as u32);
        let side = if i < 10_000 { Side::Buy } else { Side::Sell };
        let order = NewOrder {
            order_id: OrderId(i),
            participant: ParticipantId(0),
            symbol,
            side,
            kind: OrderKind::Gtc,
            price: Price(1000 + (i % 7) as i64),
            qty: Qty(1),
        };
        engine.handle_input(&Input::New(order), &mut events);
    }
    let fills = events
        .iter()
        .filter(|e| matches!(e, Event::Fill(_)))
        .count();
    assert_eq!(
        fills,
        10_000 - (0..10_000u64).filter(|i| (i + 10_000) % 7 > i % 7).count()
    );
    engine.check_invariants();
}

#[test]
fn bad_configs_are_errors() {
    let good = EngineConfig {
        symbols: vec![SymbolConfig::new(1, Price(1), Price(100))],
        orders_max: 8,
        levels_max: 8,
        order_qty_max: 10,
        stp_participants: vec![],
    };
    assert!(Engine::new(good.clone()).is_ok());
    let mut bad = good.clone();
    bad.symbols[0].tick_size = 0;
    assert_eq!(
        Engine::new(bad).err(),
        Some(ConfigError::TickSizeNotPositive { symbol: 0 })
    );
    let mut bad = good.clone();
    bad.symbols[0].window_ticks = 100;
    assert_eq!(
        Engine::new(bad).err(),
        Some(ConfigError::WindowInvalid { symbol: 0 })
    );
    let mut bad = good.clone();
    bad.order_qty_max = i64::MAX;
    assert_eq!(Engine::new(bad).err(), Some(ConfigError::QtyMaxInvalid));
    let mut bad = good;
    bad.orders_max = 0;
    assert_eq!(Engine::new(bad).err(), Some(ConfigError::CapacityInvalid));
}
