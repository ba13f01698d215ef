//! Goal: the engine behaves exactly like an obviously correct reference book.
//!
//! Method: proptest generates random order flows over two symbols (plus an unknown one), a few
//! participants (one with self-trade prevention), every order kind, prices on and off the tick,
//! inside and outside the band and far from the touch (so the far-price fallback and the
//! window re-centring run), quantities including zero and negative, and cancels/replaces of
//! live, dead and foreign ids. After every input the events must be equal, the engine's
//! invariants must hold, and both books must be equal level by level, order by order.

mod reference;

use lob::{
    CancelOrder, Engine, EngineConfig, Input, NewOrder, OrderId, OrderKind, ParticipantId, Price,
    Qty, ReplaceOrder, Side, SymbolConfig, SymbolIndex,
};
use proptest::prelude::*;
use reference::RefEngine;

const QTY_MAX: i64 = 1_000;

fn symbols() -> Vec<SymbolConfig> {
    vec![
        SymbolConfig {
            tick_size: 5,
            price_min: Price(0),
            price_max: Price(2_000),
            window_ticks: 64,
        },
        SymbolConfig {
            tick_size: 1,
            price_min: Price(-50),
            price_max: Price(50),
            window_ticks: 64,
        },
    ]
}

fn config() -> EngineConfig {
    EngineConfig {
        symbols: symbols(),
        orders_max: 4096,
        levels_max: 4096,
        order_qty_max: QTY_MAX,
        stp_participants: vec![ParticipantId(0)],
    }
}

fn price() -> impl Strategy<Value = Price> {
    prop_oneof![
        8 => (90i64..110).prop_map(|t| Price(t * 5)),     // near the touch, symbol 0's tick
        2 => (-10i64..10).prop_map(Price),                // symbol 1's band, some off symbol 0's tick
        1 => (0i64..400).prop_map(|t| Price(t * 5)),      // far levels, out of band for symbol 1
        1 => any::<i64>().prop_map(Price),                // anything
    ]
}

fn qty() -> impl Strategy<Value = Qty> {
    prop_oneof![10 => (1i64..12).prop_map(Qty), 1 => (-2i64..=0).prop_map(Qty), 1 => Just(Qty(QTY_MAX + 1))]
}

fn input() -> impl Strategy<Value = Input> {
    let symbol = prop_oneof![10 => (0u32..2).prop_map(SymbolIndex), 1 => Just(SymbolIndex(2))];
    let id = (0u64..40).prop_map(OrderId);
    let participant = (0u32..3).prop_map(ParticipantId);
    let side = prop_oneof![Just(Side::Buy), Just(Side::Sell)];
    let kind = prop_oneof![
        6 => Just(OrderKind::Gtc),
        2 => Just(OrderKind::Ioc),
        2 => Just(OrderKind::Fok),
        1 => Just(OrderKind::Market),
        1 => Just(OrderKind::PostOnly),
    ];
    let new = (
        id.clone(),
        participant.clone(),
        symbol.clone(),
        side,
        kind,
        price(),
        qty(),
    )
        .prop_map(|(order_id, participant, symbol, side, kind, price, qty)| {
            Input::New(NewOrder {
                order_id,
                participant,
                symbol,
                side,
                kind,
                price,
                qty,
            })
        });
    let cancel = (id.clone(), participant.clone(), symbol.clone()).prop_map(
        |(order_id, participant, symbol)| {
            Input::Cancel(CancelOrder {
                order_id,
                participant,
                symbol,
            })
        },
    );
    let replace = (id, participant, symbol, price(), qty()).prop_map(
        |(order_id, participant, symbol, price, qty)| {
            Input::Replace(ReplaceOrder {
                order_id,
                participant,
                symbol,
                price,
                qty,
            })
        },
    );
    prop_oneof![6 => new, 2 => cancel, 2 => replace]
}

fn compare_books(engine: &Engine, model: &RefEngine, step: usize) {
    for symbol in 0..2u32 {
        for side in [Side::Buy, Side::Sell] {
            let mut depth = Vec::new();
            engine.depth(SymbolIndex(symbol), side, usize::MAX, &mut depth);
            let want = model.depth(symbol, side);
            assert_eq!(depth, want, "step {step}: depth of symbol {symbol} {side}");
            let best = match side {
                Side::Buy => engine.best_bid(SymbolIndex(symbol)),
                Side::Sell => engine.best_ask(SymbolIndex(symbol)),
            };
            assert_eq!(best, want.first().copied(), "step {step}: best");
            for level in &want {
                assert_eq!(
                    engine.level_orders(SymbolIndex(symbol), side, level.price),
                    model.level_orders(symbol, side, level.price.0),
                    "step {step}: queue at {level:?}"
                );
            }
        }
    }
    let views = model.views();
    assert_eq!(
        engine.order_count() as usize,
        views.len(),
        "step {step}: order count"
    );
    for view in views {
        assert_eq!(
            engine.order(view.order_id),
            Some(view),
            "step {step}: order lookup"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_reference(inputs in prop::collection::vec(input(), 1..300)) {
        let mut engine = Engine::new(config()).unwrap();
        let mut model = RefEngine::new(symbols(), &[0], QTY_MAX);
        let mut events = Vec::new();
        for (step, input) in inputs.iter().enumerate() {
            events.clear();
            engine.handle_input(input, &mut events);
            let want = model.handle(input);
            prop_assert_eq!(&events, &want, "step {}: {:?}", step, input);
            prop_assert_eq!(
                events.iter().filter(|e| matches!(e, lob::Event::Accept { .. } | lob::Event::Reject { .. })).count(),
                1,
                "exactly one response"
            );
            engine.check_invariants();
            compare_books(&engine, &model, step);
        }
    }

    /// Goal: determinism. Method: the same inputs through two fresh engines give equal events.
    #[test]
    fn same_inputs_same_events(inputs in prop::collection::vec(input(), 1..200)) {
        let run = || {
            let mut engine = Engine::new(config()).unwrap();
            let mut events = Vec::new();
            engine.handle_batch(&inputs, &mut events);
            events
        };
        prop_assert_eq!(run(), run());
    }
}
