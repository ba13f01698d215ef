//! Goal: an engine restored from a snapshot is indistinguishable from the original.
//!
//! Method: proptest runs a random order flow (every kind, crossing prices, cancels and
//! replaces, two symbols, a participant with self-trade prevention) through one engine,
//! snapshots it at a random point, restores the snapshot into a fresh engine, then feeds the
//! rest of the flow to both: every event (including match numbers and priority-dependent
//! fills) must be equal, and so must the final snapshots.

use lob::{
    CancelOrder, Engine, EngineConfig, Input, NewOrder, OrderId, OrderKind, ParticipantId, Price,
    Qty, ReplaceOrder, Side, SymbolConfig, SymbolIndex,
};
use proptest::prelude::*;

fn config() -> EngineConfig {
    let symbol = SymbolConfig {
        tick_size: 1,
        price_min: Price(1),
        price_max: Price(200),
        window_ticks: 64,
    };
    EngineConfig {
        symbols: vec![symbol; 2],
        orders_max: 1024,
        levels_max: 1024,
        order_qty_max: 1_000,
        stp_participants: vec![ParticipantId(0)],
    }
}

fn input() -> impl Strategy<Value = Input> {
    let kind = prop_oneof![
        6 => Just(OrderKind::Gtc),
        1 => Just(OrderKind::Ioc),
        1 => Just(OrderKind::Fok),
        1 => Just(OrderKind::Market),
        1 => Just(OrderKind::PostOnly),
    ];
    let new = (
        1u64..300,
        0u32..3,
        0u32..2,
        any::<bool>(),
        kind,
        95i64..106,
        1i64..20,
    )
        .prop_map(|(id, p, s, buy, kind, price, qty)| {
            Input::New(NewOrder {
                order_id: OrderId(id),
                participant: ParticipantId(p),
                symbol: SymbolIndex(s),
                side: if buy { Side::Buy } else { Side::Sell },
                kind,
                price: Price(price),
                qty: Qty(qty),
            })
        });
    let cancel = (1u64..300, 0u32..3, 0u32..2).prop_map(|(id, p, s)| {
        Input::Cancel(CancelOrder {
            order_id: OrderId(id),
            participant: ParticipantId(p),
            symbol: SymbolIndex(s),
        })
    });
    let replace =
        (1u64..300, 0u32..3, 0u32..2, 95i64..106, 1i64..20).prop_map(|(id, p, s, price, qty)| {
            Input::Replace(ReplaceOrder {
                order_id: OrderId(id),
                participant: ParticipantId(p),
                symbol: SymbolIndex(s),
                price: Price(price),
                qty: Qty(qty),
            })
        });
    prop_oneof![6 => new, 2 => cancel, 2 => replace]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn restored_engine_behaves_identically(
        inputs in prop::collection::vec(input(), 1..300),
        cut in any::<prop::sample::Index>(),
    ) {
        let cut = cut.index(inputs.len() + 1);
        let mut original = Engine::new(config()).unwrap();
        let mut events = Vec::new();
        original.handle_batch(&inputs[..cut], &mut events);
        let snapshot = original.snapshot();
        prop_assert_eq!(snapshot.orders.len() as u32, original.order_count());
        let mut restored = Engine::new(config()).unwrap();
        restored.restore(&snapshot).unwrap();
        restored.check_invariants();
        prop_assert_eq!(restored.snapshot(), snapshot.clone());
        if !snapshot.orders.is_empty() || snapshot.match_number.0 > 0 {
            prop_assert!(restored.restore(&snapshot).is_err(), "restore needs an empty engine");
        }
        for input in &inputs[cut..] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            original.handle_input(input, &mut a);
            restored.handle_input(input, &mut b);
            prop_assert_eq!(a, b, "after {:?}", input);
        }
        prop_assert_eq!(original.snapshot(), restored.snapshot());
    }
}
