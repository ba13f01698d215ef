//! The inbound metrics of DESIGN.md §5, as pure functions of what gateways sent and what the
//! engine processed (in engine order).
//!
//! Operational definitions (all over the measured window `[start, end)`, exchange time, which
//! is the root's clock):
//!
//! - **Engine receive rate**: orders (any request) the engine processed whose arrival at the
//!   root falls in the window, per second; "during bursts": those arriving inside a burst
//!   window, per second of burst.
//! - **Matched order**: an order (enter, or a replace that re-entered) that got at least one
//!   fill, as taker or as maker. Its **match time** is the engine time of its first fill (for a
//!   maker: when the taker that hit it was processed). **Matching rate**: orders whose match
//!   time is in the window, per second; during bursts: match time inside a burst.
//!   **Matched-order latency**: match time − generation time.
//! - **Loss**: orders (distinct `(participant, client order id)`, so hedged twins count once)
//!   generated in the window that the engine never processed.
//! - **CloudEx inbound unfairness**: of the requests processed in the window, the share whose
//!   generation time is earlier than that of some request the engine processed before it.
//! - **Order-matching unfairness**: an order `o` (an accepted enter processed in the window)
//!   is unfairly treated if, when the engine processes it, some order `o'` on the same side,
//!   generated later than `o`, at an equal or worse price (bids: `p' <= p`; asks: `p' >= p`),
//!   has already received a fill. Any contra liquidity `o'` took (or that hit `o'`) crossed
//!   `p'`, so it also crossed `p`: `o` could have taken it. Reported as unfairly treated
//!   orders / matched orders.
//!
//! Fills are not in the engine's records; a replica price-time book replays the processed
//! requests (using the sent orders for time in force and the order a cancel names) and
//! attributes every fill. Its taker fill quantity is checked against the engine's
//! (`replica_mismatches`, 0 when the replica agrees with the engine on every request).

use std::collections::{BTreeMap, VecDeque};

use proto::Sequenced;
use serde::Serialize;
use wire::Side;
use wire::order::TimeInForce;

/// One order datagram a gateway sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentOrder {
    /// The gateway.
    pub gateway: u32,
    /// Its participant.
    pub participant: u32,
    /// The client order id.
    pub client_order_id: u64,
    /// Generation time (the gateway's exchange clock), ns.
    pub generation_ns: u64,
    /// What it asks.
    pub request: Request,
}

/// The request of a sent order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// A new order.
    Enter {
        /// Side.
        side: Side,
        /// Limit price.
        price: u32,
        /// Shares.
        shares: u32,
        /// Time in force.
        time_in_force: TimeInForce,
        /// A market order.
        market: bool,
    },
    /// A replace of `orig`.
    Replace {
        /// The replaced order.
        orig: u64,
        /// New price.
        price: u32,
        /// New open shares.
        shares: u32,
    },
    /// A cancel of `orig`.
    Cancel {
        /// The cancelled order.
        orig: u64,
    },
    /// Anything else.
    Other,
}

/// The measured window and the bursts in it (exchange time, ns).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Window {
    /// Start (inclusive).
    pub start_ns: u64,
    /// End (exclusive).
    pub end_ns: u64,
    /// Burst windows `[start, end)` inside it.
    pub bursts: Vec<(u64, u64)>,
}

impl Window {
    fn contains(&self, t: u64) -> bool {
        (self.start_ns..self.end_ns).contains(&t)
    }

    fn in_burst(&self, t: u64) -> bool {
        self.bursts.iter().any(|&(a, b)| (a..b).contains(&t))
    }
}

/// Percentiles of a sample, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub n: u64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `samples` (ns), in µs.
    pub fn of_ns(mut samples: Vec<u64>) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let n = samples.len();
        let rank = |q: f64| samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1e3;
        Self {
            n: n as u64,
            p50: rank(0.50),
            p99: rank(0.99),
            mean: samples.iter().map(|&s| s as f64).sum::<f64>() / n as f64 / 1e3,
        }
    }
}

/// The inbound metrics of one run (see the module docs for the definitions).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct InboundMetrics {
    /// Window length, s.
    pub window_s: f64,
    /// Burst time inside the window, s.
    pub burst_s: f64,
    /// Distinct orders generated in the window.
    pub sent: u64,
    /// Of those, processed by the engine.
    pub reached: u64,
    /// Of those, never processed.
    pub lost: u64,
    /// `lost / sent`, percent.
    pub loss_pct: f64,
    /// Orders the engine processed more than once (any time).
    pub duplicates: u64,
    /// Orders reaching the engine per second.
    pub engine_receive_rate: f64,
    /// Same, during bursts.
    pub engine_receive_rate_burst: f64,
    /// Orders first matched in the window.
    pub matched: u64,
    /// Matched orders per second.
    pub matching_rate: f64,
    /// Matched orders per second of burst.
    pub matching_rate_burst: f64,
    /// Generation → first match, all matched orders of the window.
    pub matched_latency_us: Percentiles,
    /// Same, orders matched during bursts.
    pub matched_latency_burst_us: Percentiles,
    /// Requests processed in the window.
    pub processed: u64,
    /// Of those, processed after a later-generated one.
    pub cloudex_out_of_order: u64,
    /// `cloudex_out_of_order / processed`, percent.
    pub cloudex_unfairness_pct: f64,
    /// Orders unfairly treated (order-matching definition).
    pub unfair_orders: u64,
    /// `unfair_orders / matched`, percent.
    pub order_matching_unfairness_pct: f64,
    /// Requests where the replica book's taker fill differs from the engine's.
    pub replica_mismatches: u64,
}

type Key = (u32, u64);

#[derive(Clone, Copy, Debug)]
struct Resting {
    key: Key,
    open: u32,
    generation: u64,
}

/// A price-time book that reports who filled whom.
#[derive(Debug, Default)]
struct ReplicaBook {
    bids: BTreeMap<u32, VecDeque<Resting>>,
    asks: BTreeMap<u32, VecDeque<Resting>>,
    index: BTreeMap<Key, (Side, u32)>,
}

/// One fill: `(maker, maker price, maker generation, qty)`.
type Fill = (Key, u32, u64, u32);

impl ReplicaBook {
    fn side(&mut self, side: Side) -> &mut BTreeMap<u32, VecDeque<Resting>> {
        match side {
            Side::Buy => &mut self.bids,
            Side::Sell => &mut self.asks,
        }
    }

    fn available(&self, side: Side, limit: u32) -> u64 {
        let levels: Box<dyn Iterator<Item = (&u32, &VecDeque<Resting>)>> = match side {
            Side::Buy => Box::new(self.asks.range(..=limit)),
            Side::Sell => Box::new(self.bids.range(limit..)),
        };
        levels
            .flat_map(|(_, q)| q.iter())
            .map(|r| r.open as u64)
            .sum()
    }

    /// Matches an incoming order, rests the rest if `rest`; returns the fills.
    #[allow(clippy::too_many_arguments)]
    fn enter(
        &mut self,
        key: Key,
        side: Side,
        limit: u32,
        mut shares: u32,
        generation: u64,
        rest: bool,
        all_or_none: bool,
        fills: &mut Vec<Fill>,
    ) {
        if all_or_none && self.available(side, limit) < shares as u64 {
            return;
        }
        let contra = side.opposite();
        while shares > 0 {
            let best = match side {
                Side::Buy => self.asks.keys().next().copied().filter(|&p| p <= limit),
                Side::Sell => self
                    .bids
                    .keys()
                    .next_back()
                    .copied()
                    .filter(|&p| p >= limit),
            };
            let Some(price) = best else { break };
            let book = self.side(contra);
            let level = book.get_mut(&price).expect("best level exists");
            let maker = level.front_mut().expect("levels are never empty");
            let qty = maker.open.min(shares);
            maker.open -= qty;
            shares -= qty;
            fills.push((maker.key, price, maker.generation, qty));
            if maker.open == 0 {
                let key = maker.key;
                level.pop_front();
                if level.is_empty() {
                    book.remove(&price);
                }
                self.index.remove(&key);
            }
        }
        if shares > 0 && rest {
            self.side(side)
                .entry(limit)
                .or_default()
                .push_back(Resting {
                    key,
                    open: shares,
                    generation,
                });
            self.index.insert(key, (side, limit));
        }
    }

    /// Replaces `key` by `new_key` in place with `shares` open if it rests at `price` with at
    /// least that many; returns its generation time.
    fn resize(&mut self, key: Key, new_key: Key, price: u32, shares: u32) -> Option<u64> {
        let &(side, at) = self.index.get(&key)?;
        if at != price {
            return None;
        }
        let level = self.side(side).get_mut(&price)?;
        let resting = level.iter_mut().find(|r| r.key == key)?;
        if shares > resting.open || shares == 0 {
            return None;
        }
        resting.open = shares;
        resting.key = new_key;
        let generation = resting.generation;
        self.index.remove(&key);
        self.index.insert(new_key, (side, price));
        Some(generation)
    }

    fn remove(&mut self, key: Key) -> Option<(Side, u32, Resting)> {
        let (side, price) = self.index.remove(&key)?;
        let book = self.side(side);
        let level = book.get_mut(&price)?;
        let at = level.iter().position(|r| r.key == key)?;
        let resting = level.remove(at)?;
        if level.is_empty() {
            book.remove(&price);
        }
        Some((side, price, resting))
    }
}

/// Per side, price level → the latest generation time of an order there that has a fill.
#[derive(Debug, Default)]
struct FilledIndex {
    bids: BTreeMap<u32, u64>,
    asks: BTreeMap<u32, u64>,
}

impl FilledIndex {
    fn record(&mut self, side: Side, price: u32, generation: u64) {
        let map = match side {
            Side::Buy => &mut self.bids,
            Side::Sell => &mut self.asks,
        };
        let g = map.entry(price).or_insert(generation);
        *g = (*g).max(generation);
    }

    /// Whether an order generated after `generation` at an equal-or-worse price than `price`
    /// on `side` has a fill.
    fn overtaken(&self, side: Side, price: u32, generation: u64) -> bool {
        match side {
            Side::Buy => self.bids.range(..=price).any(|(_, &g)| g > generation),
            Side::Sell => self.asks.range(price..).any(|(_, &g)| g > generation),
        }
    }
}

impl InboundMetrics {
    /// Computes every metric from the sent orders and the engine's records (engine order).
    pub fn compute(sent: &[SentOrder], sequenced: &[Sequenced], window: &Window) -> Self {
        let window_s = window.end_ns.saturating_sub(window.start_ns) as f64 / 1e9;
        let burst_s = window
            .bursts
            .iter()
            .map(|&(a, b)| b.saturating_sub(a))
            .sum::<u64>() as f64
            / 1e9;
        let per_s = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        let pct = |a: u64, b: u64| {
            if b > 0 {
                100.0 * a as f64 / b as f64
            } else {
                0.0
            }
        };

        let mut requests: BTreeMap<Key, (u64, Request)> = BTreeMap::new();
        for s in sent {
            requests
                .entry((s.participant, s.client_order_id))
                .or_insert((s.generation_ns, s.request));
        }
        let mut times_processed: BTreeMap<Key, u32> = BTreeMap::new();
        for s in sequenced {
            *times_processed
                .entry((s.participant, s.client_order_id))
                .or_default() += 1;
        }
        let mut m = Self {
            window_s,
            burst_s,
            ..Self::default()
        };
        for (key, (generation, _)) in &requests {
            if window.contains(*generation) {
                m.sent += 1;
                if times_processed.contains_key(key) {
                    m.reached += 1;
                }
            }
        }
        m.lost = m.sent - m.reached;
        m.loss_pct = pct(m.lost, m.sent);
        m.duplicates = times_processed.values().filter(|&&n| n > 1).count() as u64;

        let (mut received, mut received_burst) = (0, 0);
        let mut max_generation = 0;
        let mut book = ReplicaBook::default();
        let mut filled = FilledIndex::default();
        let mut first_fill: BTreeMap<Key, u64> = BTreeMap::new();
        let mut generation_of: BTreeMap<Key, u64> = BTreeMap::new();
        let mut fills = Vec::new();
        for s in sequenced {
            let key = (s.participant, s.client_order_id);
            let arrived = s.arrived.as_nanos();
            let at = s.sequenced.as_nanos();
            let generation = s.generation.as_nanos();
            if window.contains(arrived) {
                received += 1;
                received_burst += window.in_burst(arrived) as u64;
            }
            if window.contains(at) {
                m.processed += 1;
                m.cloudex_out_of_order += (generation < max_generation) as u64;
            }
            max_generation = max_generation.max(generation);
            if !s.accepted {
                continue;
            }
            let Some(&(_, request)) = requests.get(&key) else {
                m.replica_mismatches += 1;
                continue;
            };
            fills.clear();
            let (side, limit) = match request {
                Request::Enter {
                    side,
                    price,
                    shares,
                    time_in_force,
                    market,
                } => {
                    let limit = match (market, side) {
                        (false, _) => price,
                        (true, Side::Buy) => u32::MAX,
                        (true, Side::Sell) => 0,
                    };
                    if window.contains(at) && filled.overtaken(side, limit, generation) {
                        m.unfair_orders += 1;
                    }
                    let rest = !market
                        && !matches!(
                            time_in_force,
                            TimeInForce::ImmediateOrCancel | TimeInForce::FillOrKill
                        );
                    let aon = time_in_force == TimeInForce::FillOrKill;
                    book.enter(key, side, limit, shares, generation, rest, aon, &mut fills);
                    (side, limit)
                }
                Request::Cancel { orig } => {
                    book.remove((s.participant, orig));
                    continue;
                }
                Request::Replace {
                    orig,
                    price,
                    shares,
                } => {
                    let orig = (s.participant, orig);
                    if let Some(kept) = book.resize(orig, key, price, shares) {
                        // Size down at the same price keeps its place and its time.
                        generation_of.insert(key, kept);
                        continue;
                    }
                    let Some((side, _, _)) = book.remove(orig) else {
                        continue;
                    };
                    book.enter(
                        key, side, price, shares, generation, true, false, &mut fills,
                    );
                    (side, price)
                }
                Request::Other => continue,
            };
            generation_of.entry(key).or_insert(generation);
            let taken: u32 = fills.iter().map(|f| f.3).sum();
            if taken != s.filled {
                m.replica_mismatches += 1;
            }
            if !fills.is_empty() {
                filled.record(side, limit, generation);
                first_fill.entry(key).or_insert(at);
            }
            for &(maker, price, maker_generation, _) in &fills {
                filled.record(side.opposite(), price, maker_generation);
                first_fill.entry(maker).or_insert(at);
            }
        }
        m.engine_receive_rate = per_s(received, window_s);
        m.engine_receive_rate_burst = per_s(received_burst, burst_s);

        let (mut latency, mut latency_burst) = (Vec::new(), Vec::new());
        for (key, &at) in &first_fill {
            if !window.contains(at) {
                continue;
            }
            m.matched += 1;
            let generation = generation_of.get(key).copied().unwrap_or(at);
            let l = at.saturating_sub(generation);
            latency.push(l);
            if window.in_burst(at) {
                latency_burst.push(l);
            }
        }
        m.matching_rate = per_s(m.matched, window_s);
        m.matching_rate_burst = per_s(latency_burst.len() as u64, burst_s);
        m.matched_latency_us = Percentiles::of_ns(latency);
        m.matched_latency_burst_us = Percentiles::of_ns(latency_burst);
        m.cloudex_unfairness_pct = pct(m.cloudex_out_of_order, m.processed);
        m.order_matching_unfairness_pct = pct(m.unfair_orders, m.matched);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ExchangeTime;

    const US: u64 = 1_000;

    fn enter(p: u32, id: u64, gen_us: u64, side: Side, price: u32, shares: u32) -> SentOrder {
        SentOrder {
            gateway: p,
            participant: p,
            client_order_id: id,
            generation_ns: gen_us * US,
            request: Request::Enter {
                side,
                price,
                shares,
                time_in_force: TimeInForce::GoodTillCancel,
                market: false,
            },
        }
    }

    /// The engine record of `o` arriving at `arr_us`, processed at `seq_us`, taking `filled`.
    fn seq(o: &SentOrder, arr_us: u64, seq_us: u64, filled: u32) -> Sequenced {
        let (side, price, shares, msg_type) = match o.request {
            Request::Enter {
                side,
                price,
                shares,
                ..
            } => (Some(side), price, shares, b'O'),
            Request::Cancel { .. } => (None, 0, 0, b'X'),
            Request::Replace { price, shares, .. } => (None, price, shares, b'U'),
            Request::Other => (None, 0, 0, b'?'),
        };
        Sequenced {
            participant: o.participant,
            client_order_id: o.client_order_id,
            msg_type,
            generation: ExchangeTime::from_nanos(o.generation_ns),
            arrived: ExchangeTime::from_nanos(arr_us * US),
            sequenced: ExchangeTime::from_nanos(seq_us * US),
            side,
            price,
            shares,
            filled,
            accepted: true,
        }
    }

    fn window(bursts: Vec<(u64, u64)>) -> Window {
        Window {
            start_ns: 0,
            end_ns: 1_000 * US,
            bursts: bursts.into_iter().map(|(a, b)| (a * US, b * US)).collect(),
        }
    }

    /// Goal: receive rate, matching rate (maker and taker both count, at the taker's engine
    /// time), matched-order latency, overall and in bursts.
    #[test]
    fn rates_and_matched_latency() {
        let ask = enter(1, 1, 10, Side::Sell, 100, 5);
        let bid = enter(2, 1, 20, Side::Buy, 101, 5);
        let far = enter(3, 1, 30, Side::Buy, 90, 5);
        let sent = [ask, bid, far];
        let s = [
            seq(&ask, 50, 450, 0),
            seq(&bid, 60, 460, 5),
            seq(&far, 700, 900, 0),
        ];
        let m = InboundMetrics::compute(&sent, &s, &window(vec![(0, 100)]));
        assert_eq!((m.sent, m.reached, m.lost, m.duplicates), (3, 3, 0, 0));
        assert!((m.window_s - 0.001).abs() < 1e-12 && (m.burst_s - 0.0001).abs() < 1e-12);
        assert!((m.engine_receive_rate - 3_000.0).abs() < 1e-6);
        assert!(
            (m.engine_receive_rate_burst - 20_000.0).abs() < 1e-6,
            "2 in 100 µs"
        );
        assert_eq!(m.matched, 2, "the maker and the taker");
        assert!((m.matching_rate - 2_000.0).abs() < 1e-6);
        assert_eq!(
            m.matching_rate_burst, 0.0,
            "matched at 460 µs, after the burst"
        );
        // Maker: 460 - 10; taker: 460 - 20.
        assert_eq!(m.matched_latency_us.n, 2);
        assert_eq!(m.matched_latency_us.p50, 440.0);
        assert_eq!(m.matched_latency_us.p99, 450.0);
        assert_eq!(m.replica_mismatches, 0);
        let m = InboundMetrics::compute(&sent, &s, &window(vec![(400, 500)]));
        assert!((m.matching_rate_burst - 20_000.0).abs() < 1e-6);
        assert_eq!(m.matched_latency_burst_us.n, 2);
    }

    /// Goal: loss counts distinct orders generated in the window that never reached the
    /// engine; hedged twins count once; a twice-processed order is a duplicate.
    #[test]
    fn loss_and_duplicates() {
        let a = enter(1, 1, 10, Side::Sell, 100, 5);
        let twin = SentOrder { gateway: 9, ..a };
        let b = enter(1, 2, 20, Side::Sell, 100, 5);
        let late = enter(1, 3, 2_000, Side::Sell, 100, 5);
        let sent = [a, twin, b, late];
        let s = [seq(&a, 50, 450, 0), seq(&a, 51, 451, 0)];
        let m = InboundMetrics::compute(&sent, &s, &window(vec![]));
        assert_eq!((m.sent, m.reached, m.lost, m.duplicates), (2, 1, 1, 1));
        assert!((m.loss_pct - 50.0).abs() < 1e-9);
    }

    /// Goal: CloudEx unfairness counts each request processed after a later-generated one.
    #[test]
    fn cloudex_out_of_order_share() {
        let o: Vec<SentOrder> = [30, 10, 20, 40]
            .iter()
            .enumerate()
            .map(|(i, &g)| enter(1, i as u64, g, Side::Buy, 90, 1))
            .collect();
        let s: Vec<Sequenced> = o.iter().map(|x| seq(x, 100, 500, 0)).collect();
        let m = InboundMetrics::compute(&o, &s, &window(vec![]));
        assert_eq!((m.processed, m.cloudex_out_of_order), (4, 2));
        assert!((m.cloudex_unfairness_pct - 50.0).abs() < 1e-9);
    }

    /// Goal: an order is unfairly treated exactly when a later-generated same-side order at an
    /// equal-or-worse price matched before it reached the engine.
    #[test]
    fn order_matching_unfairness() {
        let case = |late_side: Side, late_price: u32, late_gen: u64| {
            let ask = enter(1, 1, 1, Side::Sell, 100, 1);
            let late = enter(2, 1, late_gen, late_side, late_price, 1);
            let victim = enter(3, 1, 10, Side::Buy, 102, 1);
            let sent = [ask, late, victim];
            let s = [
                seq(&ask, 10, 400, 0),
                seq(&late, 30, 430, (late_side == Side::Buy) as u32),
                seq(&victim, 40, 440, 0),
            ];
            InboundMetrics::compute(&sent, &s, &window(vec![]))
        };
        // A later bid at a worse price (101 < 102) took the ask: unfair.
        let m = case(Side::Buy, 101, 20);
        assert_eq!(
            (m.unfair_orders, m.matched, m.replica_mismatches),
            (1, 2, 0)
        );
        assert!((m.order_matching_unfairness_pct - 50.0).abs() < 1e-9);
        // Same price, generated later: still unfair (time priority lost).
        assert_eq!(case(Side::Buy, 102, 20).unfair_orders, 1);
        // A better price (103) may go first: fair.
        assert_eq!(case(Side::Buy, 103, 20).unfair_orders, 0);
        // Generated earlier (5 < 10): fair.
        assert_eq!(case(Side::Buy, 101, 5).unfair_orders, 0);
        // The other side: not a competitor (it rests, nothing matched).
        assert_eq!(case(Side::Sell, 105, 20).unfair_orders, 0);
        // The maker side counts too: a later ask at a worse price (99 > 98) was hit by a bid
        // that would have taken the earlier, better ask.
        let a_early = enter(1, 1, 10, Side::Sell, 98, 1);
        let a_late = enter(2, 1, 20, Side::Sell, 99, 1);
        let bid = enter(3, 1, 30, Side::Buy, 100, 1);
        let sent = [a_early, a_late, bid];
        let s = [
            seq(&a_late, 25, 425, 0),
            seq(&bid, 35, 435, 1),
            seq(&a_early, 50, 450, 0),
        ];
        let m = InboundMetrics::compute(&sent, &s, &window(vec![]));
        assert_eq!((m.unfair_orders, m.matched), (1, 2));
    }

    /// Goal: the replica book follows cancels, IOC and price-time priority, and flags a
    /// disagreement with the engine's fill.
    #[test]
    fn replica_book_cancel_ioc_and_mismatch() {
        let a1 = enter(1, 1, 1, Side::Sell, 100, 3);
        let a2 = enter(2, 1, 2, Side::Sell, 100, 3);
        let cancel = SentOrder {
            request: Request::Cancel { orig: 1 },
            client_order_id: 2,
            generation_ns: 3 * US,
            ..a1
        };
        let mut ioc = enter(3, 1, 4, Side::Buy, 100, 5);
        if let Request::Enter { time_in_force, .. } = &mut ioc.request {
            *time_in_force = TimeInForce::ImmediateOrCancel;
        }
        let b = enter(4, 1, 5, Side::Buy, 100, 1);
        let sent = [a1, a2, cancel, ioc, b];
        let s = [
            seq(&a1, 10, 410, 0),
            seq(&a2, 11, 411, 0),
            seq(&cancel, 12, 412, 0),
            seq(&ioc, 13, 413, 3),
            seq(&b, 14, 414, 0),
        ];
        let m = InboundMetrics::compute(&sent, &s, &window(vec![]));
        assert_eq!(
            m.replica_mismatches, 0,
            "a1 cancelled, IOC took a2's 3, nothing left"
        );
        assert_eq!(m.matched, 2);
        let mut wrong = s;
        wrong[4].filled = 1;
        let m = InboundMetrics::compute(&sent, &wrong, &window(vec![]));
        assert_eq!(m.replica_mismatches, 1);
    }
}
