//! The engine benchmark: throughput and per-order latency against a naive `BTreeMap` book.
//!
//! Run: `cargo bench -p lob --bench engine` (add `-- --quick` for a shorter run), or
//! `jasper bench engine`.
//!
//! Two flows, both generated from a fixed seed before timing, both fed to the engine and to a
//! naive book (`BTreeMap<price, VecDeque<order>>` per side plus a `BTreeMap` id index) in the
//! same run:
//! - (a) realistic: one symbol, a slowly wandering mid price; ~63% new GTC orders resting
//!   0–15 ticks from the touch, 15% IOC orders crossing the touch, ~10% replaces (half size
//!   down, half price moves), the rest cancels of live orders, so that 1k–20k orders rest.
//! - (b) sweeps: a deep book (400 levels × 4 orders a side) rebuilt level by level and swept
//!   by IOC orders that each take 40 levels.
//!
//! Throughput is the whole sequence timed once (no per-order clock reads); latency is a
//! second pass reading the clock around every input (the timer's own cost, measured and
//! printed, is included). Memory: bytes of order slab + id index per order slot, and the
//! engine's whole heap divided by the peak number of resting orders.
#![allow(clippy::disallowed_methods, reason = "a benchmark reads the clock")]

use std::collections::{BTreeMap, VecDeque};
use std::hint::black_box;
use std::time::Instant;

use crate::{
    CancelOrder, Engine, EngineConfig, Event, Fill, Input, MatchNumber, NewOrder, OrderId,
    OrderKind, ParticipantId, Price, Qty, ReplaceOrder, Side, SymbolConfig, SymbolIndex,
};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const S: SymbolIndex = SymbolIndex(0);
const ORDERS_MAX: u32 = 1 << 16;

fn config() -> EngineConfig {
    EngineConfig {
        symbols: vec![SymbolConfig {
            tick_size: 1,
            price_min: Price(1),
            price_max: Price(1 << 30),
            window_ticks: 4096,
        }],
        orders_max: ORDERS_MAX,
        levels_max: 1 << 14,
        order_qty_max: 1 << 20,
        stp_participants: vec![],
    }
}

trait Book {
    fn handle(&mut self, input: &Input, events: &mut Vec<Event>);
}

impl Book for Engine {
    #[inline]
    fn handle(&mut self, input: &Input, events: &mut Vec<Event>) {
        self.handle_input(input, events);
    }
}

/// The naive book: same semantics for GTC/IOC/cancel/replace, same events.
#[derive(Default)]
struct Naive {
    bids: BTreeMap<i64, VecDeque<(u64, i64, u32)>>,
    asks: BTreeMap<i64, VecDeque<(u64, i64, u32)>>,
    ids: BTreeMap<u64, (Side, i64)>,
    match_number: u64,
}

impl Naive {
    fn take(&mut self, o: &NewOrder, left: &mut i64, events: &mut Vec<Event>) {
        let opposite = if o.side == Side::Buy {
            &mut self.asks
        } else {
            &mut self.bids
        };
        while *left > 0 {
            let entry = match o.side {
                Side::Buy => opposite.first_entry(),
                Side::Sell => opposite.last_entry(),
            };
            let Some(mut entry) = entry else { break };
            let price = *entry.key();
            let crosses = if o.side == Side::Buy {
                price <= o.price.0
            } else {
                price >= o.price.0
            };
            if !crosses {
                break;
            }
            let queue = entry.get_mut();
            while *left > 0 {
                let Some(maker) = queue.front_mut() else {
                    break;
                };
                let qty = maker.1.min(*left);
                self.match_number += 1;
                let match_number = MatchNumber(self.match_number);
                events.push(Event::Fill(Fill {
                    symbol: S,
                    match_number,
                    price: Price(price),
                    qty: Qty(qty),
                    maker_order_id: OrderId(maker.0),
                    maker_participant: ParticipantId(maker.2),
                    taker_order_id: o.order_id,
                    taker_participant: o.participant,
                    taker_side: o.side,
                }));
                events.push(Event::Execute {
                    symbol: S,
                    order_id: OrderId(maker.0),
                    side: o.side.opposite(),
                    price: Price(price),
                    qty: Qty(qty),
                    match_number,
                });
                maker.1 -= qty;
                *left -= qty;
                if maker.1 == 0 {
                    let id = maker.0;
                    queue.pop_front();
                    self.ids.remove(&id);
                }
            }
            if queue.is_empty() {
                entry.remove();
            }
        }
    }

    fn rest(&mut self, id: u64, side: Side, price: i64, qty: i64, participant: u32) {
        let book = if side == Side::Buy {
            &mut self.bids
        } else {
            &mut self.asks
        };
        book.entry(price)
            .or_default()
            .push_back((id, qty, participant));
        self.ids.insert(id, (side, price));
    }

    fn remove(&mut self, id: u64) -> Option<(Side, i64, i64, u32)> {
        let (side, price) = self.ids.remove(&id)?;
        let book = if side == Side::Buy {
            &mut self.bids
        } else {
            &mut self.asks
        };
        let queue = book.get_mut(&price)?;
        let pos = queue.iter().position(|o| o.0 == id)?;
        let (_, qty, participant) = queue.remove(pos)?;
        if queue.is_empty() {
            book.remove(&price);
        }
        Some((side, price, qty, participant))
    }
}

impl Book for Naive {
    fn handle(&mut self, input: &Input, events: &mut Vec<Event>) {
        match *input {
            Input::New(o) => {
                if self.ids.contains_key(&o.order_id.0) || o.qty.0 <= 0 {
                    return events.push(reject(o.order_id));
                }
                events.push(accept(o.order_id));
                let mut left = o.qty.0;
                self.take(&o, &mut left, events);
                if left > 0 && o.kind == OrderKind::Gtc {
                    self.rest(o.order_id.0, o.side, o.price.0, left, o.participant.0);
                    let add = Event::Add {
                        symbol: S,
                        order_id: o.order_id,
                        side: o.side,
                        price: o.price,
                        qty: Qty(left),
                    };
                    events.push(add);
                }
            }
            Input::Cancel(c) => match self.remove(c.order_id.0) {
                None => events.push(reject(c.order_id)),
                Some(_) => {
                    events.push(accept(c.order_id));
                    events.push(Event::Delete {
                        symbol: S,
                        order_id: c.order_id,
                    });
                }
            },
            Input::Replace(r) => {
                let Some(&(side, price)) = self.ids.get(&r.order_id.0) else {
                    return events.push(reject(r.order_id));
                };
                events.push(accept(r.order_id));
                let book = if side == Side::Buy {
                    &mut self.bids
                } else {
                    &mut self.asks
                };
                let queue = book.get_mut(&price).expect("naive: indexed level");
                let order = queue
                    .iter_mut()
                    .find(|o| o.0 == r.order_id.0)
                    .expect("indexed");
                if price == r.price.0 && r.qty.0 <= order.1 {
                    let reduce = order.1 - r.qty.0;
                    order.1 = r.qty.0;
                    let id = r.order_id;
                    events.push(Event::Cancel {
                        symbol: S,
                        order_id: id,
                        qty: Qty(reduce),
                    });
                    return;
                }
                let (side, _, _, participant) = self.remove(r.order_id.0).expect("indexed");
                let o = NewOrder {
                    order_id: r.order_id,
                    participant: ParticipantId(participant),
                    symbol: S,
                    side,
                    kind: OrderKind::Gtc,
                    price: r.price,
                    qty: r.qty,
                };
                let mut left = r.qty.0;
                self.take(&o, &mut left, events);
                if left > 0 {
                    self.rest(r.order_id.0, side, r.price.0, left, participant);
                }
            }
        }
    }
}

fn accept(order_id: OrderId) -> Event {
    Event::Accept {
        symbol: S,
        participant: ParticipantId(1),
        order_id,
    }
}

fn reject(order_id: OrderId) -> Event {
    let reason = crate::RejectReason::UnknownOrderId;
    Event::Reject {
        symbol: S,
        participant: ParticipantId(1),
        order_id,
        reason,
    }
}

/// Live order ids with O(1) random pick and removal.
struct LiveSet {
    ids: Vec<u64>,
    position: Vec<u32>,
}

impl LiveSet {
    fn insert(&mut self, id: u64) {
        if self.position.len() <= id as usize {
            self.position.resize(id as usize + 1, u32::MAX);
        }
        if self.position[id as usize] == u32::MAX {
            self.position[id as usize] = self.ids.len() as u32;
            self.ids.push(id);
        }
    }

    fn remove(&mut self, id: u64) {
        let Some(&p) = self.position.get(id as usize) else {
            return;
        };
        if p == u32::MAX {
            return;
        }
        let last = *self.ids.last().expect("non-empty");
        self.ids.swap_remove(p as usize);
        if last != id {
            self.position[last as usize] = p;
        }
        self.position[id as usize] = u32::MAX;
    }
}

/// Flow (a), generated by running the engine itself so cancels and replaces name live orders.
fn realistic_flow(count: usize, seed: u64) -> (Vec<Input>, usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut engine = Engine::new(config()).expect("config");
    let mut live = LiveSet {
        ids: Vec::new(),
        position: Vec::new(),
    };
    let (mut inputs, mut events) = (Vec::with_capacity(count), Vec::new());
    let (mut mid, mut next_id, mut resting_max) = (1_000_000i64, 1u64, 0usize);
    let target = 10_000usize;
    while inputs.len() < count {
        if rng.gen_ratio(1, 50) {
            mid += if rng.gen_bool(0.5) { 1 } else { -1 };
        }
        let roll: f64 = rng.r#gen();
        let side = if rng.gen_bool(0.5) {
            Side::Buy
        } else {
            Side::Sell
        };
        let sign = if side == Side::Buy { -1 } else { 1 };
        let pressure = live.ids.len() as f64 / target as f64; // > 1: cancel more
        let input = if roll < 0.15 {
            let price = Price(mid - sign * rng.gen_range(1..4));
            let qty = Qty(rng.gen_range(1..200));
            new_order(next_id, side, OrderKind::Ioc, price, qty)
        } else if roll < 0.25 && !live.ids.is_empty() {
            let id = live.ids[rng.gen_range(0..live.ids.len())];
            let order = engine.order(OrderId(id)).expect("live");
            let (price, qty) = if rng.gen_bool(0.5) {
                (order.price, Qty((order.qty.0 / 2).max(1)))
            } else {
                let away = if order.side == Side::Buy { -1 } else { 1 };
                (Price(order.price.0 + away * rng.gen_range(1..4)), order.qty)
            };
            let participant = order.participant;
            Input::Replace(ReplaceOrder {
                order_id: OrderId(id),
                participant,
                symbol: S,
                price,
                qty,
            })
        } else if roll < 0.25 + 0.5 * pressure.min(1.5) && !live.ids.is_empty() {
            let id = live.ids[rng.gen_range(0..live.ids.len())];
            let participant = engine.order(OrderId(id)).expect("live").participant;
            Input::Cancel(CancelOrder {
                order_id: OrderId(id),
                participant,
                symbol: S,
            })
        } else {
            let offset = rng.gen_range(0..16).min(rng.gen_range(0..16));
            let price = Price(mid + sign * (1 + offset));
            new_order(
                next_id,
                side,
                OrderKind::Gtc,
                price,
                Qty(rng.gen_range(1..200)),
            )
        };
        if matches!(input, Input::New(_)) {
            next_id += 1;
        }
        events.clear();
        engine.handle_input(&input, &mut events);
        for event in &events {
            match event {
                Event::Add { order_id, .. } => live.insert(order_id.0),
                Event::Delete { order_id, .. } => live.remove(order_id.0),
                Event::Execute { order_id, .. } if engine.order(*order_id).is_none() => {
                    live.remove(order_id.0);
                }
                _ => {}
            }
        }
        resting_max = resting_max.max(engine.order_count() as usize);
        inputs.push(input);
    }
    (inputs, resting_max)
}

/// Flow (b): rebuild a deep ask and bid book, sweep 40 levels with one IOC, repeat.
fn sweep_flow(rounds: usize) -> Vec<Input> {
    let mut inputs = Vec::new();
    let mut next_id = 1u64;
    for round in 0..rounds {
        let side = if round % 2 == 0 {
            Side::Sell
        } else {
            Side::Buy
        };
        let sign = if side == Side::Sell { 1 } else { -1 };
        // Top up 40 levels × 4 orders; the book keeps 360 untouched deeper levels.
        let depth = if round < 2 { 400 } else { 40 };
        for level in 0..depth {
            for _ in 0..4 {
                let price = Price(1_000_000 + sign * (1 + level));
                inputs.push(new_order(next_id, side, OrderKind::Gtc, price, Qty(10)));
                next_id += 1;
            }
        }
        let price = Price(1_000_000 + sign * 40);
        inputs.push(new_order(
            next_id,
            side.opposite(),
            OrderKind::Ioc,
            price,
            Qty(40 * 4 * 10),
        ));
        next_id += 1;
    }
    inputs
}

fn new_order(id: u64, side: Side, kind: OrderKind, price: Price, qty: Qty) -> Input {
    let participant = ParticipantId(1 + (id % 7) as u32);
    Input::New(NewOrder {
        order_id: OrderId(id),
        participant,
        symbol: S,
        side,
        kind,
        price,
        qty,
    })
}

struct Measured {
    orders_per_s: f64,
    histogram: Histogram<u64>,
    events: usize,
}

/// Feeds `inputs` through a fresh book twice: once for throughput, once for latency.
fn measure<B: Book>(
    make: impl Fn() -> B,
    inputs: &[Input],
    pick: impl Fn(&Input) -> bool,
) -> Measured {
    let mut events = Vec::with_capacity(4096);
    let mut book = make();
    let mut event_count = 0;
    let start = Instant::now();
    for input in inputs {
        events.clear();
        book.handle(black_box(input), &mut events);
        event_count += events.len();
    }
    let elapsed = start.elapsed();
    black_box(&events);
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("bounds");
    let mut book = make();
    for input in inputs {
        events.clear();
        let start = Instant::now();
        book.handle(black_box(input), &mut events);
        let ns = start.elapsed().as_nanos() as u64;
        if pick(input) {
            histogram.record(ns.max(1)).expect("in range");
        }
    }
    Measured {
        orders_per_s: inputs.len() as f64 / elapsed.as_secs_f64(),
        histogram,
        events: event_count,
    }
}

fn report(name: &str, engine: &Measured, naive: &Measured) -> Ratio {
    let line = |who: &str, m: &Measured| {
        let h = &m.histogram;
        println!(
            "  {who:<6} {:>12.0} orders/s   p50 {:>6} ns   p99 {:>6} ns   p99.9 {:>7} ns   max {:>8} ns",
            m.orders_per_s,
            h.value_at_quantile(0.50),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
    };
    println!("{name}");
    line("engine", engine);
    line("naive", naive);
    let q = |m: &Measured, x| m.histogram.value_at_quantile(x) as f64;
    println!(
        "  ratio  throughput ×{:.2}   p50 ×{:.2}   p99 ×{:.2}   p99.9 ×{:.2}   (naive / engine)",
        engine.orders_per_s / naive.orders_per_s,
        q(naive, 0.5) / q(engine, 0.5),
        q(naive, 0.99) / q(engine, 0.99),
        q(naive, 0.999) / q(engine, 0.999),
    );
    assert_eq!(engine.events > 0, naive.events > 0);
    Ratio {
        orders_per_s: engine.orders_per_s,
        naive_orders_per_s: naive.orders_per_s,
        p50_ns: engine.histogram.value_at_quantile(0.5),
        p99_ns: engine.histogram.value_at_quantile(0.99),
        p999_ns: engine.histogram.value_at_quantile(0.999),
        naive_p50_ns: naive.histogram.value_at_quantile(0.5),
        naive_p99_ns: naive.histogram.value_at_quantile(0.99),
        naive_p999_ns: naive.histogram.value_at_quantile(0.999),
    }
}

/// One flow's numbers: the engine and the naive book, measured in the same run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ratio {
    /// Engine throughput.
    pub orders_per_s: f64,
    /// Naive book throughput.
    pub naive_orders_per_s: f64,
    /// Engine latency percentiles, ns (timer overhead included).
    pub p50_ns: u64,
    /// See `p50_ns`.
    pub p99_ns: u64,
    /// See `p50_ns`.
    pub p999_ns: u64,
    /// Naive book latency percentiles, ns.
    pub naive_p50_ns: u64,
    /// See `naive_p50_ns`.
    pub naive_p99_ns: u64,
    /// See `naive_p50_ns`.
    pub naive_p999_ns: u64,
}

/// The headline numbers of [`run`].
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineReport {
    /// Timer overhead included in every latency, ns (p50 of an empty measurement).
    pub timer_ns: u64,
    /// (a) the realistic flow.
    pub realistic: Ratio,
    /// (b) the deep-book sweeps, all inputs.
    pub sweeps: Ratio,
    /// (b) the sweeps alone (latency).
    pub sweep_only: Ratio,
    /// Bytes per order slot (order + id index).
    pub bytes_per_order: f64,
    /// Peak resting orders in flow (a).
    pub resting_peak: usize,
}

/// Runs both flows on the engine and the naive book and prints the results; returns the
/// headline numbers.
pub fn run(quick: bool) -> EngineReport {
    let flow_len = if quick { 300_000 } else { 2_000_000 };
    let timer = {
        let mut h = Histogram::<u64>::new(3).expect("hist");
        for _ in 0..100_000 {
            let start = Instant::now();
            h.record(black_box(start).elapsed().as_nanos() as u64)
                .expect("record");
        }
        h.value_at_quantile(0.5)
    };
    println!("timer overhead (empty Instant pair, p50): {timer} ns, included in latencies");

    let (flow, resting_max) = realistic_flow(flow_len, 7);
    let mut kinds = [0usize; 4];
    for input in &flow {
        let k = match input {
            Input::New(o) if o.kind == OrderKind::Ioc => 1,
            Input::New(_) => 0,
            Input::Replace(_) => 2,
            Input::Cancel(_) => 3,
        };
        kinds[k] += 1;
    }
    let pct = |k: usize| 100.0 * kinds[k] as f64 / flow.len() as f64;
    println!(
        "(a) realistic flow: {} inputs: {:.0}% GTC, {:.0}% IOC, {:.0}% replace, {:.0}% cancel; \
         peak resting {resting_max}",
        flow.len(),
        pct(0),
        pct(1),
        pct(2),
        pct(3)
    );
    let all = |_: &Input| true;
    let engine = measure(|| Engine::new(config()).expect("config"), &flow, all);
    let naive = measure(Naive::default, &flow, all);
    let realistic = report("(a) realistic flow, all inputs", &engine, &naive);

    let sweeps = sweep_flow(if quick { 400 } else { 3_000 });
    let is_sweep = |i: &Input| matches!(i, Input::New(o) if o.kind == OrderKind::Ioc);
    let engine = measure(|| Engine::new(config()).expect("config"), &sweeps, all);
    let naive = measure(Naive::default, &sweeps, all);
    println!(
        "(b) deep book: {} inputs (161 per round: 160 adds, 1 sweep of 40 levels)",
        sweeps.len()
    );
    let sweeps_all = report("(b) all inputs", &engine, &naive);
    let engine = measure(|| Engine::new(config()).expect("config"), &sweeps, is_sweep);
    let naive = measure(Naive::default, &sweeps, is_sweep);
    let sweep_only = report(
        "(b) the sweeps alone (160 fills each; latency only)",
        &engine,
        &naive,
    );

    let mut engine = Engine::new(config()).expect("config");
    let mut events = Vec::new();
    engine.handle_batch(&flow, &mut events);
    println!(
        "memory: {:.1} bytes per order slot (40-byte order + index at load <= 1/2); whole engine \
         heap {} KiB = {:.1} bytes per order at the peak of {resting_max} resting, {:.1} per \
         order at orders_max = {ORDERS_MAX}",
        engine.order_bytes(),
        engine.heap_bytes() / 1024,
        engine.heap_bytes() as f64 / resting_max as f64,
        engine.heap_bytes() as f64 / f64::from(ORDERS_MAX),
    );
    EngineReport {
        timer_ns: timer,
        realistic,
        sweeps: sweeps_all,
        sweep_only,
        bytes_per_order: engine.order_bytes(),
        resting_peak: resting_max,
    }
}
