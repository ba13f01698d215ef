//! The participant's side: one small trait a strategy implements, and the built-in ones.
//!
//! A [`Strategy`] runs inside a gateway (trust model 1). The gateway calls it with every
//! market-data packet it releases (in sequence order, at the release time), with every
//! response to the participant's own orders, and at wake-ups the strategy asked for. It
//! answers through [`Ctx`]: orders to send (the gateway stamps the client order id, the
//! participant and the generation time) and the next wake-up.
//!
//! With receiver hedging both gateways of a participant run the same strategy, seeded by the
//! participant, so they send the same requests with the same client order ids; the first
//! node that sees both copies drops the second.
//!
//! Built in: [`MarketMaker`], [`PaperWorkload`] (the paper's random order flow with price
//! overlap and bursts), [`Taker`] and [`TickToTrade`] (order when sequence number mod k = 0).

use core::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use wire::itch::Message as Itch;
use wire::order::{Display, OrderType, Repr as OrderMsg, TimeInForce};
use wire::{ExchangeTime, MarketData, Side, Stock};

use crate::node::Release;
use crate::time::duration_nanos;

/// An order request, before the gateway stamps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderRequest {
    /// A new order.
    Enter {
        /// Buy or sell.
        side: Side,
        /// Quantity.
        shares: u32,
        /// Symbol.
        stock: Stock,
        /// Limit price (ITCH units: 1/10000 dollar); ignored for market orders.
        price: u32,
        /// Time in force.
        time_in_force: TimeInForce,
        /// Limit or market.
        order_type: OrderType,
        /// Visible or post-only.
        display: Display,
    },
    /// Change the price and/or size of a resting order (named by the client order id of its
    /// enter or latest replace).
    Replace {
        /// The order.
        orig: u64,
        /// New open quantity.
        shares: u32,
        /// New price.
        price: u32,
    },
    /// Cancel a resting order.
    Cancel {
        /// The order.
        orig: u64,
    },
}

impl OrderRequest {
    /// A limit order.
    pub fn limit(
        side: Side,
        shares: u32,
        stock: Stock,
        price: u32,
        time_in_force: TimeInForce,
    ) -> Self {
        Self::Enter {
            side,
            shares,
            stock,
            price,
            time_in_force,
            order_type: OrderType::Limit,
            display: Display::Visible,
        }
    }
}

/// What a strategy can do when called.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// Exchange time now (the gateway's clock).
    pub now: ExchangeTime,
    /// The participant this strategy trades for.
    pub participant: u32,
    pub(crate) orders: &'a mut Vec<(u64, OrderRequest)>,
    pub(crate) next_client_order_id: &'a mut u64,
    pub(crate) wakeup: &'a mut Option<ExchangeTime>,
}

impl Ctx<'_> {
    /// Sends an order; returns its client order id.
    pub fn send(&mut self, request: OrderRequest) -> u64 {
        let id = *self.next_client_order_id;
        *self.next_client_order_id += 1;
        self.orders.push((id, request));
        id
    }

    /// Asks to be woken at `at` (the earliest request since the last wake-up wins).
    pub fn wake_at(&mut self, at: ExchangeTime) {
        *self.wakeup = Some(self.wakeup.map_or(at, |w| w.min(at)));
    }
}

/// A participant's trading logic.
pub trait Strategy: Send {
    /// Called once when the gateway starts. Until its clock has synced to the exchange's
    /// (clock sync, a few probe rounds after its parent's has), the gateway refuses every
    /// order at once with a rejection, `Closed`, delivered to [`Strategy::on_response`]:
    /// a strategy that trades from the start does so from [`Strategy::on_open`].
    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        let _ = ctx;
    }

    /// Called once, after [`Strategy::on_start`], when the gateway's clock has first synced
    /// to the exchange's: from then on its orders go up (the market is open to it).
    fn on_open(&mut self, ctx: &mut Ctx<'_>) {
        let _ = ctx;
    }

    /// Called when the exchange began a new session: its root was started again without its
    /// journal, and every order the participant had resting is gone (no response will say
    /// so). The book starts over too: a snapshot of the new root's comes first.
    fn on_session(&mut self, ctx: &mut Ctx<'_>) {
        let _ = ctx;
    }

    /// Called with every released market-data packet, in sequence order. A gateway that
    /// joined the stream after its start, or skipped packets the root no longer had, first
    /// hands over the parts of a book snapshot ([`Release::snapshot`], [`crate::snapshot`]):
    /// their Add Orders are the whole book (a book built from the feed starts over at part 0,
    /// as [`crate::book::BookBuilder`] does), and the stream goes on after them.
    fn on_market_data(&mut self, ctx: &mut Ctx<'_>, release: &Release, data: &MarketData<'_>) {
        let _ = (ctx, release, data);
    }

    /// Called with every response to the participant's own orders, in the order the engine
    /// made them and each once: a response lost on the way is asked for again and the ones
    /// after it wait for it ([`crate::responses`]).
    fn on_response(&mut self, ctx: &mut Ctx<'_>, response: &OrderMsg) {
        let _ = (ctx, response);
    }

    /// Called at the time asked for with [`Ctx::wake_at`].
    fn on_wakeup(&mut self, ctx: &mut Ctx<'_>) {
        let _ = ctx;
    }

    /// Called when the gateway stops waiting for any answer to order `client_order_id`:
    /// none came within three `parent_timeout`s (0.3 s by default) of its sending, through
    /// its retries and any failover (the exchange's root down that long, or every path up
    /// cut off), or 16,384 newer orders were waiting too. The order may never have reached
    /// the engine; if it did, its responses still come to [`Strategy::on_response`] as the
    /// root's numbered stream is asked for again, unless the root no longer holds them.
    /// Before this callback a strategy waiting for an order to finish could wait for ever.
    fn on_unanswered(&mut self, ctx: &mut Ctx<'_>, client_order_id: u64) {
        let _ = (ctx, client_order_id);
    }
}

/// A boxed strategy is a strategy (so wrappers such as [`Watched`] take one).
impl<S: Strategy + ?Sized> Strategy for Box<S> {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        (**self).on_start(ctx);
    }

    fn on_open(&mut self, ctx: &mut Ctx<'_>) {
        (**self).on_open(ctx);
    }

    fn on_session(&mut self, ctx: &mut Ctx<'_>) {
        (**self).on_session(ctx);
    }

    fn on_market_data(&mut self, ctx: &mut Ctx<'_>, release: &Release, data: &MarketData<'_>) {
        (**self).on_market_data(ctx, release, data);
    }

    fn on_response(&mut self, ctx: &mut Ctx<'_>, response: &OrderMsg) {
        (**self).on_response(ctx, response);
    }

    fn on_wakeup(&mut self, ctx: &mut Ctx<'_>) {
        (**self).on_wakeup(ctx);
    }

    fn on_unanswered(&mut self, ctx: &mut Ctx<'_>, client_order_id: u64) {
        (**self).on_unanswered(ctx, client_order_id);
    }
}

/// A strategy with an observer of the market data it is given, that can be silenced: `observe`
/// sees every released packet first (to rebuild a book, say), and once `quiet` is set the inner
/// strategy is no longer called, so a test or a demo can let the market settle and compare the
/// books at the end.
pub struct Watched<S, F> {
    inner: S,
    observe: F,
    quiet: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl<S, F> Watched<S, F>
where
    S: Strategy,
    F: FnMut(&Release, &MarketData<'_>) + Send,
{
    /// `inner`, watched by `observe`, silent while `quiet` is set.
    pub fn new(inner: S, quiet: std::sync::Arc<std::sync::atomic::AtomicBool>, observe: F) -> Self {
        Self {
            inner,
            observe,
            quiet,
        }
    }

    fn live(&self) -> bool {
        !self.quiet.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<S, F> Strategy for Watched<S, F>
where
    S: Strategy,
    F: FnMut(&Release, &MarketData<'_>) + Send,
{
    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        self.inner.on_start(ctx);
    }

    fn on_open(&mut self, ctx: &mut Ctx<'_>) {
        if self.live() {
            self.inner.on_open(ctx);
        }
    }

    fn on_session(&mut self, ctx: &mut Ctx<'_>) {
        if self.live() {
            self.inner.on_session(ctx);
        }
    }

    fn on_market_data(&mut self, ctx: &mut Ctx<'_>, release: &Release, data: &MarketData<'_>) {
        (self.observe)(release, data);
        if self.live() {
            self.inner.on_market_data(ctx, release, data);
        }
    }

    fn on_response(&mut self, ctx: &mut Ctx<'_>, response: &OrderMsg) {
        if self.live() {
            self.inner.on_response(ctx, response);
        }
    }

    fn on_wakeup(&mut self, ctx: &mut Ctx<'_>) {
        if self.live() {
            self.inner.on_wakeup(ctx);
        }
    }

    fn on_unanswered(&mut self, ctx: &mut Ctx<'_>, client_order_id: u64) {
        if self.live() {
            self.inner.on_unanswered(ctx, client_order_id);
        }
    }
}

/// Tracks a participant's own resting orders from its responses (bounded).
#[derive(Clone, Debug, Default)]
struct Resting {
    /// Client order ids of accepted, not yet finished orders, oldest first.
    ids: std::collections::VecDeque<u64>,
}

impl Resting {
    fn on_response(&mut self, response: &OrderMsg) {
        match response {
            OrderMsg::Accepted(a) if a.time_in_force != TimeInForce::ImmediateOrCancel => {
                self.ids.push_back(a.header.client_order_id)
            }
            OrderMsg::Executed(e) if e.leaves_shares == 0 => self.remove(e.header.client_order_id),
            OrderMsg::Canceled(c) => self.remove(c.orig_client_order_id),
            OrderMsg::Replaced(r) => {
                self.remove(r.orig_client_order_id);
                self.ids.push_back(r.header.client_order_id);
            }
            _ => {}
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(i) = self.ids.iter().position(|&x| x == id) {
            self.ids.remove(i);
        }
    }
}

/// The paper's inbound workload: limit orders at random prices over `levels` price levels
/// around `mid`, bids and asks overlapping on `overlap` of them, Poisson arrivals at
/// `rate_per_s`, multiplied by `burst_factor` for `burst_len` every `burst_period`. Keeps at
/// most `resting_max` orders resting by cancelling its oldest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadConfig {
    /// Symbol.
    pub stock: String,
    /// Centre of the price range (ITCH units).
    pub mid: u32,
    /// Price step between levels (ITCH units).
    pub tick: u32,
    /// Price levels in the whole range (P).
    pub levels: u32,
    /// Fraction of levels where bids and asks overlap: numerator / denominator (1/1 .. 1/13).
    pub overlap: (u32, u32),
    /// Orders per second per participant outside bursts.
    pub rate_per_s: f64,
    /// Rate multiplier during bursts (1 = no bursts).
    pub burst_factor: f64,
    /// Time between burst starts.
    #[serde(with = "humantime_serde")]
    pub burst_period: Duration,
    /// Length of a burst.
    #[serde(with = "humantime_serde")]
    pub burst_len: Duration,
    /// Shares per order are uniform in 1..=shares_max.
    pub shares_max: u32,
    /// Own resting orders kept at most.
    pub resting_max: usize,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            stock: "JSPR".to_string(),
            mid: 1_000_000,
            tick: 100,
            levels: 130,
            overlap: (1, 5),
            rate_per_s: 1000.0,
            burst_factor: 2.0,
            burst_period: Duration::from_millis(500),
            burst_len: Duration::from_millis(100),
            shares_max: 10,
            resting_max: 64,
        }
    }
}

/// The paper's random order flow (see [`WorkloadConfig`]).
#[derive(Debug)]
pub struct PaperWorkload {
    config: WorkloadConfig,
    stock: Stock,
    rng: ChaCha8Rng,
    resting: Resting,
    started: Option<ExchangeTime>,
    /// Orders sent.
    pub sent: u64,
}

impl PaperWorkload {
    /// A workload for `participant`, seeded by `(seed, participant)`.
    pub fn new(config: WorkloadConfig, seed: u64, participant: u32) -> Result<Self, String> {
        let stock =
            Stock::new(&config.stock).ok_or_else(|| format!("bad stock {:?}", config.stock))?;
        if config.levels == 0 || config.overlap.1 == 0 || config.overlap.0 > config.overlap.1 {
            return Err("levels must be positive and overlap a fraction in (0, 1]".to_string());
        }
        let finite = config.rate_per_s.is_finite() && config.burst_factor.is_finite();
        if !(finite && config.rate_per_s > 0.0 && config.burst_factor >= 1.0) {
            return Err(
                "rate must be positive and finite, and the burst factor at least 1 and finite"
                    .to_string(),
            );
        }
        let rng = ChaCha8Rng::seed_from_u64(
            seed ^ (participant as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        Ok(Self {
            config,
            stock,
            rng,
            resting: Resting::default(),
            started: None,
            sent: 0,
        })
    }

    /// Bid and ask price ranges `(lo, hi)` in levels, inclusive, over `0..levels`.
    pub fn ranges(levels: u32, overlap: (u32, u32)) -> ((u32, u32), (u32, u32)) {
        let o = (levels as u64 * overlap.0 as u64)
            .div_ceil(overlap.1 as u64)
            .max(1) as u32;
        let width = (levels + o) / 2;
        // Bids take the low levels, asks the high ones; they share `o` in the middle.
        let bids = (0, width.saturating_sub(1));
        let asks = (
            width - o.min(width),
            (2 * width - o.min(width))
                .saturating_sub(1)
                .min(levels.max(1) - 1),
        );
        (bids, asks)
    }

    fn rate(&self, now: ExchangeTime) -> f64 {
        let c = &self.config;
        let since = now.saturating_nanos_since(self.started.unwrap_or(now));
        let period = duration_nanos(c.burst_period).max(1);
        let in_burst = since % period < duration_nanos(c.burst_len);
        if in_burst {
            c.rate_per_s * c.burst_factor
        } else {
            c.rate_per_s
        }
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) {
        let rate = self.rate(ctx.now);
        let u: f64 = self.rng.gen_range(f64::EPSILON..1.0);
        let gap_ns = (-u.ln() / rate * 1e9).clamp(1.0, 1e12) as u64;
        ctx.wake_at(ctx.now.saturating_add_nanos(gap_ns));
    }
}

impl Strategy for PaperWorkload {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        self.started = Some(ctx.now);
        self.schedule(ctx);
    }

    fn on_session(&mut self, _ctx: &mut Ctx<'_>) {
        // Its resting orders are gone with the old root: none is left to cancel.
        self.resting.ids.clear();
    }

    fn on_response(&mut self, _ctx: &mut Ctx<'_>, response: &OrderMsg) {
        self.resting.on_response(response);
    }

    fn on_wakeup(&mut self, ctx: &mut Ctx<'_>) {
        let c = &self.config;
        if self.resting.ids.len() >= c.resting_max
            && let Some(oldest) = self.resting.ids.pop_front()
        {
            ctx.send(OrderRequest::Cancel { orig: oldest });
        }
        let (bids, asks) = Self::ranges(c.levels, c.overlap);
        let side = if self.rng.gen_bool(0.5) {
            Side::Buy
        } else {
            Side::Sell
        };
        let (lo, hi) = if side == Side::Buy { bids } else { asks };
        let level = self.rng.gen_range(lo..=hi);
        let base = c.mid.saturating_sub(c.levels / 2 * c.tick);
        let price = base + level * c.tick;
        let shares = self.rng.gen_range(1..=c.shares_max.max(1));
        ctx.send(OrderRequest::limit(
            side,
            shares,
            self.stock,
            price,
            TimeInForce::GoodTillCancel,
        ));
        self.sent += 1;
        self.schedule(ctx);
    }
}

/// Quotes one bid and one ask `half_spread` around a reference price that follows the last
/// trade it sees, re-quoting a side when it is filled.
#[derive(Debug)]
pub struct MarketMaker {
    stock: Stock,
    reference: u32,
    half_spread: u32,
    shares: u32,
    bid: Option<u64>,
    ask: Option<u64>,
}

impl MarketMaker {
    /// A market maker quoting `shares` at `reference ± half_spread`.
    pub fn new(stock: Stock, reference: u32, half_spread: u32, shares: u32) -> Self {
        Self {
            stock,
            reference,
            half_spread,
            shares,
            bid: None,
            ask: None,
        }
    }

    fn quote(&mut self, ctx: &mut Ctx<'_>, side: Side) {
        let price = match side {
            Side::Buy => self.reference.saturating_sub(self.half_spread),
            Side::Sell => self.reference.saturating_add(self.half_spread),
        };
        let id = ctx.send(OrderRequest::limit(
            side,
            self.shares,
            self.stock,
            price,
            TimeInForce::GoodTillCancel,
        ));
        match side {
            Side::Buy => self.bid = Some(id),
            Side::Sell => self.ask = Some(id),
        }
    }
}

impl Strategy for MarketMaker {
    fn on_open(&mut self, ctx: &mut Ctx<'_>) {
        self.quote(ctx, Side::Buy);
        self.quote(ctx, Side::Sell);
    }

    fn on_session(&mut self, ctx: &mut Ctx<'_>) {
        // Its quotes are gone with the old root: quote again.
        self.quote(ctx, Side::Buy);
        self.quote(ctx, Side::Sell);
    }

    fn on_market_data(&mut self, _ctx: &mut Ctx<'_>, _release: &Release, data: &MarketData<'_>) {
        for body in data.messages() {
            if let Ok(Itch::Trade(t)) = Itch::parse(body)
                && t.stock == self.stock
            {
                self.reference = t.price;
            }
        }
    }

    fn on_response(&mut self, ctx: &mut Ctx<'_>, response: &OrderMsg) {
        let done = match response {
            OrderMsg::Executed(e) if e.leaves_shares == 0 => Some(e.header.client_order_id),
            OrderMsg::Canceled(c) => Some(c.orig_client_order_id),
            OrderMsg::Rejected(r) => Some(r.header.client_order_id),
            _ => None,
        };
        if let Some(id) = done {
            if self.bid == Some(id) {
                self.quote(ctx, Side::Buy);
            } else if self.ask == Some(id) {
                self.quote(ctx, Side::Sell);
            }
        }
    }

    fn on_unanswered(&mut self, ctx: &mut Ctx<'_>, client_order_id: u64) {
        // A quote whose fate is unknown: cancelled in case it rests (a cancel of an order
        // the engine never had is only rejected), and the side quoted again; without this
        // the side stayed unquoted for good.
        let side = if self.bid == Some(client_order_id) {
            Side::Buy
        } else if self.ask == Some(client_order_id) {
            Side::Sell
        } else {
            return;
        };
        ctx.send(OrderRequest::Cancel {
            orig: client_order_id,
        });
        self.quote(ctx, side);
    }
}

/// Sends immediate-or-cancel orders through the book at Poisson times: buys at
/// `reference + reach`, sells at `reference − reach`.
#[derive(Debug)]
pub struct Taker {
    stock: Stock,
    reference: u32,
    reach: u32,
    shares: u32,
    rate_per_s: f64,
    rng: ChaCha8Rng,
}

impl Taker {
    /// A taker sending `rate_per_s` IOC orders per second.
    pub fn new(
        stock: Stock,
        reference: u32,
        reach: u32,
        shares: u32,
        rate_per_s: f64,
        seed: u64,
    ) -> Self {
        Self {
            stock,
            reference,
            reach,
            shares,
            rate_per_s: rate_per_s.max(1e-3),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) {
        let u: f64 = self.rng.gen_range(f64::EPSILON..1.0);
        let gap_ns = (-u.ln() / self.rate_per_s * 1e9).clamp(1.0, 1e12) as u64;
        ctx.wake_at(ctx.now.saturating_add_nanos(gap_ns));
    }
}

impl Strategy for Taker {
    fn on_open(&mut self, ctx: &mut Ctx<'_>) {
        self.schedule(ctx);
    }

    fn on_market_data(&mut self, _ctx: &mut Ctx<'_>, _release: &Release, data: &MarketData<'_>) {
        for body in data.messages() {
            if let Ok(Itch::Trade(t)) = Itch::parse(body)
                && t.stock == self.stock
            {
                self.reference = t.price;
            }
        }
    }

    fn on_wakeup(&mut self, ctx: &mut Ctx<'_>) {
        let side = if self.rng.gen_bool(0.5) {
            Side::Buy
        } else {
            Side::Sell
        };
        let price = match side {
            Side::Buy => self.reference.saturating_add(self.reach),
            Side::Sell => self.reference.saturating_sub(self.reach).max(1),
        };
        ctx.send(OrderRequest::limit(
            side,
            self.shares,
            self.stock,
            price,
            TimeInForce::ImmediateOrCancel,
        ));
        self.schedule(ctx);
    }
}

/// The tick-to-trade strategy of seed 003: on every ITCH message whose MoldUDP64 sequence
/// number is a multiple of `k`, send an IOC order.
#[derive(Debug)]
pub struct TickToTrade {
    stock: Stock,
    k: u64,
    price: u32,
    /// Orders sent.
    pub sent: u64,
}

impl TickToTrade {
    /// Orders on every `k`-th message (k >= 1).
    pub fn new(stock: Stock, k: u64, price: u32) -> Self {
        Self {
            stock,
            k: k.max(1),
            price,
            sent: 0,
        }
    }

    /// The decision: whether message `sequence` triggers an order.
    pub fn decide(&self, sequence: u64) -> bool {
        sequence.is_multiple_of(self.k)
    }
}

impl Strategy for TickToTrade {
    fn on_market_data(&mut self, ctx: &mut Ctx<'_>, release: &Release, data: &MarketData<'_>) {
        if release.snapshot {
            // The book as it stands, not a tick.
            return;
        }
        let first = data.first_message_seq();
        for (i, body) in data.messages().enumerate() {
            if self.decide(first + i as u64) && Itch::parse(body).is_ok() {
                let side = if self.sent.is_multiple_of(2) {
                    Side::Buy
                } else {
                    Side::Sell
                };
                ctx.send(OrderRequest::limit(
                    side,
                    1,
                    self.stock,
                    self.price,
                    TimeInForce::ImmediateOrCancel,
                ));
                self.sent += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_ranges() {
        // Full overlap: both sides over every level.
        assert_eq!(PaperWorkload::ranges(130, (1, 1)), ((0, 129), (0, 129)));
        // 1/5 of 130 = 26 shared levels: each side 78 wide.
        let ((blo, bhi), (alo, ahi)) = PaperWorkload::ranges(130, (1, 5));
        assert_eq!((blo, bhi, alo, ahi), (0, 77, 52, 129));
        assert_eq!(bhi + 1 - alo, 26);
        let ((_, bhi), (alo, ahi)) = PaperWorkload::ranges(130, (1, 13));
        assert_eq!((bhi + 1 - alo, ahi), (10, 129));
    }

    #[test]
    fn workload_is_seeded_and_bursty() {
        let config = WorkloadConfig {
            rate_per_s: 10_000.0,
            burst_factor: 4.0,
            ..WorkloadConfig::default()
        };
        let run = |participant| {
            let mut w = PaperWorkload::new(config.clone(), 7, participant).unwrap();
            let (mut orders, mut next, mut wake) = (Vec::new(), 1, None);
            let mut ctx = Ctx {
                now: ExchangeTime(0),
                participant,
                orders: &mut orders,
                next_client_order_id: &mut next,
                wakeup: &mut wake,
            };
            w.on_start(&mut ctx);
            let mut times = Vec::new();
            while let Some(at) = wake.take() {
                if at.as_nanos() > 1_000_000_000 {
                    break;
                }
                times.push(at.as_nanos());
                let mut ctx = Ctx {
                    now: at,
                    participant,
                    orders: &mut orders,
                    next_client_order_id: &mut next,
                    wakeup: &mut wake,
                };
                w.on_wakeup(&mut ctx);
            }
            (orders, times)
        };
        let (a, times) = run(3);
        assert_eq!(a, run(3).0, "same seed and participant, same orders");
        assert_ne!(a, run(4).0);
        // 100 ms bursts at 4x every 500 ms: 0.2 s x 40k + 0.8 s x 10k = 16k expected.
        let n = times.len() as f64;
        assert!((14_000.0..18_000.0).contains(&n), "{n} orders in a second");
        let in_burst = times
            .iter()
            .filter(|&&t| t % 500_000_000 < 100_000_000)
            .count() as f64;
        assert!(
            in_burst / n > 0.4,
            "half the orders fall in the fifth of time that bursts"
        );
    }

    /// Goal: a market maker whose quote went unanswered cancels it (it may rest) and quotes
    /// that side again; an unanswered order that is no quote of its changes nothing.
    #[test]
    fn market_maker_requotes_a_side_whose_quote_went_unanswered() {
        let stock = Stock::new("JSPR").unwrap();
        let mut mm = MarketMaker::new(stock, 1_000_000, 500, 10);
        let (mut orders, mut next, mut wake) = (Vec::new(), 1, None);
        let mut ctx = Ctx {
            now: ExchangeTime(0),
            participant: 1,
            orders: &mut orders,
            next_client_order_id: &mut next,
            wakeup: &mut wake,
        };
        mm.on_open(&mut ctx);
        mm.on_unanswered(&mut ctx, 99);
        mm.on_unanswered(&mut ctx, 2);
        let ids: Vec<u64> = orders.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [1, 2, 3, 4], "bid, ask, then a cancel and a new ask");
        assert!(matches!(orders[2].1, OrderRequest::Cancel { orig: 2 }));
        assert!(matches!(
            orders[3].1,
            OrderRequest::Enter {
                side: Side::Sell,
                price: 1_000_500,
                ..
            }
        ));
        assert_eq!((mm.bid, mm.ask), (Some(1), Some(4)));
    }

    /// Goal: once `quiet` is set a watched strategy is no longer called (its orders before
    /// that stand). Method: a paper workload behind `Watched`, woken before and after.
    #[test]
    fn watched_strategy_goes_quiet() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let config = WorkloadConfig {
            rate_per_s: 10_000.0,
            ..WorkloadConfig::default()
        };
        let quiet = Arc::new(AtomicBool::new(false));
        let inner: Box<dyn Strategy> = Box::new(PaperWorkload::new(config, 7, 1).unwrap());
        let mut watched = Watched::new(inner, Arc::clone(&quiet), |_, _| {});
        let (mut orders, mut next, mut wake) = (Vec::new(), 1, None);
        macro_rules! ctx {
            ($now:expr) => {
                &mut Ctx {
                    now: ExchangeTime($now),
                    participant: 1,
                    orders: &mut orders,
                    next_client_order_id: &mut next,
                    wakeup: &mut wake,
                }
            };
        }
        watched.on_start(ctx!(0));
        for _ in 0..50 {
            let at = wake
                .take()
                .expect("a live workload asks to be woken")
                .as_nanos();
            watched.on_wakeup(ctx!(at));
        }
        let before = orders.len();
        assert!(before > 0, "the workload traded while live");
        quiet.store(true, Ordering::Relaxed);
        for at in 1..50 {
            watched.on_wakeup(ctx!(at * 1_000_000_000));
        }
        assert_eq!(orders.len(), before, "a quiet strategy sends nothing");
    }

    #[test]
    fn tick_to_trade_decides_on_sequence() {
        let t = TickToTrade::new(Stock::new("X").unwrap(), 4, 100);
        assert!(t.decide(8) && !t.decide(9));
    }
}
