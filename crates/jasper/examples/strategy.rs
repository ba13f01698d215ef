//! A participant's own strategy on a Jasper gateway: the one trait to write
//! ([`proto::Strategy`]) and the few lines that run it over real UDP (what `jasper node` does
//! for its built-in strategies).
//!
//! The strategy, [`Lifter`], rebuilds the book from the ITCH feed its gateway releases
//! ([`BookBuilder`]; a gateway that joins late hands it a book snapshot first, which the
//! builder takes as it comes), and whenever the spread is at most `max_spread` it takes the
//! touch with an IOC order of 100 shares, buying and selling in turn, one order at a time. It
//! counts what the exchange answered: accepted, filled shares, cancelled remainders.
//!
//! Two ways to run it:
//!
//! ```text
//! # A whole exchange on loopback (a root, a taker and two market makers), this
//! # strategy trading as participant 0, for 5 seconds (--duration S):
//! cargo run --release -p jasper --example strategy
//!
//! # One gateway of a deployment, as `jasper node` would run it: here every other node
//! # runs in one process whose participants trade the paper's workload, and this one
//! # starts late (it gets the book as a snapshot first):
//! jasper plan -n 8 --out cluster.toml
//! jasper node --config cluster.toml --id root,g1,g2,g3,g4,g5,g6,g7 --orders 200 --duration 10 &
//! cargo run --release -p jasper --example strategy -- --config cluster.toml --id g0 --duration 5
//! ```
//!
//! Its last line sums up what it saw and did; the second run above printed, on a 2-core VM,
//! `lifter: 18908 packets (5 snapshot parts), 0 book errors; 1415 orders sent, 1414
//! accepted, 8298 shares filled, ...`.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use net::{Deployment, Idle, Mode, Runtime, SocketOptions};
use proto::book::BookBuilder;
use proto::cluster::ClusterConfig;
use proto::plan::{Plan, PlanConfig, Role};
use proto::strategy::{MarketMaker, Taker};
use proto::{Ctx, Delivery, NodeConfig, NodeId, OrderRequest, Release, Strategy};
use wire::order::{Repr as OrderMsg, TimeInForce};
use wire::{MarketData, Side, Stock};

/// The exchange's reference price in the loopback market (ITCH price units: $100.0000).
const MID: u32 = 1_000_000;

/// What [`Lifter`] saw and did, shared with `main` for the summary.
#[derive(Clone, Debug, Default)]
struct Tally {
    /// Live packets released to it.
    packets: u64,
    /// Book snapshot parts (it joined late or skipped).
    snapshot_parts: u64,
    /// Messages its book could not apply (none, on a consistent feed).
    book_errors: u64,
    /// Orders sent.
    sent: u64,
    /// Orders the exchange accepted.
    accepted: u64,
    /// Shares filled.
    filled: u64,
    /// Orders rejected (`Closed` before its gateway's clock synced, and the like).
    rejected: u64,
    /// IOC remainders cancelled.
    cancelled: u64,
    /// The last best bid and ask it saw.
    touch: Option<(u32, u32)>,
}

/// Takes the touch with IOC orders whenever the spread is narrow.
struct Lifter {
    stock: Stock,
    /// The stock's locate code in the feed (its index in the exchange's list, from 0).
    locate: u16,
    max_spread: u32,
    book: BookBuilder,
    /// An order is out: wait for its end before the next.
    working: Option<u64>,
    next_side: Side,
    tally: Arc<Mutex<Tally>>,
}

impl Lifter {
    fn new(stock: Stock, locate: u16, max_spread: u32, tally: Arc<Mutex<Tally>>) -> Self {
        Self {
            stock,
            locate,
            max_spread,
            book: BookBuilder::new(),
            working: None,
            next_side: Side::Buy,
            tally,
        }
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Strategy for Lifter {
    fn on_market_data(&mut self, ctx: &mut Ctx<'_>, release: &Release, data: &MarketData<'_>) {
        let applied = self.book.apply_packet(data);
        {
            let mut tally = self.tally();
            if release.snapshot {
                tally.snapshot_parts += 1;
            } else {
                tally.packets += 1;
            }
            tally.book_errors += applied.is_err() as u64;
        }
        // A snapshot's parts are the book as it stands, not news: act on the live stream.
        if release.snapshot || self.working.is_some() {
            return;
        }
        let best = |side| self.book.depth(self.locate, side, 1).first().map(|l| l.0);
        let (Some(bid), Some(ask)) = (best(Side::Buy), best(Side::Sell)) else {
            return;
        };
        self.tally().touch = Some((bid, ask));
        if ask.saturating_sub(bid) > self.max_spread {
            return;
        }
        let side = self.next_side;
        let price = if side == Side::Buy { ask } else { bid };
        let request =
            OrderRequest::limit(side, 100, self.stock, price, TimeInForce::ImmediateOrCancel);
        self.working = Some(ctx.send(request));
        self.next_side = if side == Side::Buy {
            Side::Sell
        } else {
            Side::Buy
        };
        self.tally().sent += 1;
    }

    fn on_response(&mut self, _ctx: &mut Ctx<'_>, response: &OrderMsg) {
        let mut done = false;
        {
            let mut tally = self.tally();
            match response {
                OrderMsg::Accepted(_) => tally.accepted += 1,
                OrderMsg::Executed(e) => {
                    tally.filled += u64::from(e.shares);
                    done = e.leaves_shares == 0;
                }
                OrderMsg::Canceled(_) => {
                    tally.cancelled += 1;
                    done = true;
                }
                OrderMsg::Rejected(_) => {
                    tally.rejected += 1;
                    done = true;
                }
                _ => {}
            }
        }
        let ours = self.working == Some(response.header().client_order_id);
        if done && ours {
            self.working = None;
        }
    }

    /// The gateway gave up waiting for an answer (the exchange unreachable for a while):
    /// trade on rather than wait for ever. (An IOC that did reach the engine is over by now;
    /// its responses, if any, still come to `on_response`.)
    fn on_unanswered(&mut self, _ctx: &mut Ctx<'_>, client_order_id: u64) {
        if self.working == Some(client_order_id) {
            self.working = None;
        }
    }
}

/// A whole exchange on loopback from `base_port`, `Lifter` trading as participant 0, a taker
/// as participant 1 and market makers as the others, run for `seconds`.
fn run_local(base_port: u16, seconds: f64, tally: &Arc<Mutex<Tally>>) -> Result<(), String> {
    let plan = Plan::new(&PlanConfig::new(4)).map_err(|e| e.to_string())?;
    let config = ClusterConfig::layout(&plan, NodeConfig::default(), &[], base_port)
        .map_err(|e| e.to_string())?;
    let deployment = Deployment::new(config, plan.clone());
    let stock = Stock::new("JSPR").expect("a valid symbol");
    let options = SocketOptions::default();
    let mut runtime = Runtime::new(Mode::Epoll).map_err(|e| e.to_string())?;
    for spec in plan.nodes() {
        let added = match spec.role {
            Role::Root => deployment
                .bind(deployment.root()?, Idle, &options)
                .and_then(|host| runtime.add(host)),
            Role::Proxy => deployment
                .bind(deployment.proxy(spec.id)?, Idle, &options)
                .and_then(|host| runtime.add(host)),
            Role::Gateway => {
                let participant = spec.participant.expect("a gateway serves a participant");
                let strategy: Box<dyn Strategy> = match participant {
                    0 => Box::new(Lifter::new(stock, 0, 2_000, tally.clone())),
                    1 => Box::new(Taker::new(stock, MID, 1_000, 5, 200.0, 7)),
                    _ => Box::new(MarketMaker::new(stock, MID, 500 * participant, 10)),
                };
                let gateway = deployment.gateway(spec.id, Delivery::Strategy(strategy))?;
                deployment
                    .bind(gateway, Idle, &options)
                    .and_then(|host| runtime.add(host))
            }
        };
        added.map_err(|e| format!("node {}: {e}", spec.id.0))?;
    }
    run(&mut runtime, seconds)
}

/// Gateway `name` of the deployment in `config_path`, `Lifter` trading for its participant.
fn run_gateway(
    config_path: &str,
    name: &str,
    seconds: f64,
    tally: &Arc<Mutex<Tally>>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(config_path).map_err(|e| format!("{config_path}: {e}"))?;
    let deployment = Deployment::from_toml(&text).map_err(|e| e.to_string())?;
    let entry = deployment
        .find(name)
        .ok_or_else(|| format!("no node {name} in {config_path}"))?;
    if entry.role != Role::Gateway {
        return Err(format!("{name} is a {:?}, not a gateway", entry.role));
    }
    let market = &deployment.config().node.market;
    let stock = market.stocks()?.first().copied().ok_or("no stock listed")?;
    let lifter = Lifter::new(stock, 0, 2_000, tally.clone());
    let gateway = deployment.gateway(NodeId(entry.id), Delivery::Strategy(Box::new(lifter)))?;
    let mut runtime = Runtime::new(Mode::Epoll).map_err(|e| e.to_string())?;
    deployment
        .bind(gateway, Idle, &SocketOptions::default())
        .and_then(|host| runtime.add(host))
        .map_err(|e| format!("{name}: {e}"))?;
    run(&mut runtime, seconds)
}

fn run(runtime: &mut Runtime, seconds: f64) -> Result<(), String> {
    let stop = AtomicBool::new(false);
    let mut sink = |_: NodeId, _: proto::Instant, _: &proto::Event| {};
    runtime
        .run_for(Duration::from_secs_f64(seconds), &stop, &mut sink)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let seconds = flag("--duration").map_or(Ok(5.0), |s| s.parse::<f64>());
    let tally = Arc::new(Mutex::new(Tally::default()));
    let result = match (seconds, flag("--config"), flag("--id")) {
        (Err(e), _, _) => Err(format!("--duration: {e}")),
        (Ok(s), Some(config), Some(id)) => run_gateway(&config, &id, s, &tally),
        (Ok(_), Some(_), None) | (Ok(_), None, Some(_)) => {
            Err("--config and --id go together".to_string())
        }
        (Ok(s), None, None) => run_local(36_500, s, &tally),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    let t = tally.lock().unwrap_or_else(|e| e.into_inner()).clone();
    println!(
        "lifter: {} packets ({} snapshot parts), {} book errors; {} orders sent, {} accepted, \
         {} shares filled, {} cancelled, {} rejected; last touch {:?}",
        t.packets,
        t.snapshot_parts,
        t.book_errors,
        t.sent,
        t.accepted,
        t.filled,
        t.cancelled,
        t.rejected,
        t.touch
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the example does what its docs say: on a loopback exchange the strategy sees the
    /// feed, rebuilds the book without an error, takes the touch and gets fills.
    #[test]
    fn the_lifter_trades_on_a_loopback_exchange() {
        let tally = Arc::new(Mutex::new(Tally::default()));
        run_local(46_000, 2.0, &tally).expect("the exchange runs");
        let t = tally.lock().unwrap().clone();
        assert!(t.packets > 100, "{t:?}");
        assert_eq!(t.book_errors, 0, "{t:?}");
        assert!(t.touch.is_some(), "it saw both sides: {t:?}");
        assert!(t.sent > 0 && t.accepted > 0 && t.filled > 0, "{t:?}");
    }
}
