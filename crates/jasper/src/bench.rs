//! `jasper bench`: the industry's latency yardsticks (DESIGN.md §7), run on Jasper's own code,
//! each beside a baseline measured in the same run, written as one Markdown and JSON report.
//!
//! - `tick-to-trade` (seed 003): decode an ITCH message, decide (sequence number mod k), encode
//!   an order in its hop envelope, all in process; a latency histogram over `--messages`
//!   messages (2,000,000 by default). Baseline: the timer's own cost, measured the same way.
//! - `engine`: the matching engine against a naive `BTreeMap` book (`lob::bench`).
//! - `ioc` (seed 004): an open-loop order generator in a gateway sends immediate-or-cancel
//!   orders through a proxy to the root's sequencer and engine over real UDP on loopback; the
//!   round trip runs from the order's generation to its response at the gateway. At 1K, 10K
//!   and 100K orders/s, with the sequencer delay at 0 and at its default; min, median, mean,
//!   p99, p99.9 and max as in seed 004's tables, per window for long soaks. Baseline: the
//!   loopback UDP round trip of one raw socket pair in the same run.
//! - `fanout` (issue 7): one proxy hop's latency over raw UDP, and one proxy core's fan-out-10
//!   forwarding rate against a raw `sendmmsg` sender (`net::bench`).
//! - `journal` (issue 9): orders through the root (sequencer, engine, responses, market data)
//!   with the durable journal at several group-commit settings: throughput and the latency
//!   fsync batching adds, each as a ratio to the same path without a journal in the same run.
//! - `all`: every benchmark above, then one report.
#![allow(clippy::disallowed_methods, reason = "a benchmark reads the clock")]

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use proto::strategy::TickToTrade;
use serde_json::json;
use wire::itch::{self, Message as Itch};
use wire::order::{self, Display, OrderHeader, OrderType, Repr as OrderMsg, TimeInForce};
use wire::{ExchangeTime, MarketDataBuilder, Session, Side, Stock};

mod ioc;
mod journal;

/// Arguments of `jasper bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    which: Which,
    /// Shorter runs (for a smoke test).
    #[arg(long, global = true)]
    quick: bool,
    /// Write report.md and report.json here.
    #[arg(long, global = true, default_value = "out/bench")]
    out: PathBuf,
}

// The highest order rate a benchmark takes is the operator's commands' (beyond it the
// pacing interval rounds to zero nanoseconds).
use crate::up::RATE_MAX;

/// A rate from 1 to [`RATE_MAX`] per second.
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (1.0..=RATE_MAX).contains(&r) => Ok(r),
        Ok(r) => Err(format!("{r} is not a rate from 1 to {RATE_MAX} per second")),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

/// A count of at least 1 (a benchmark of nothing measures nothing).
fn parse_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("0: at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

/// A positive time in seconds, at most a year.
fn parse_positive_seconds(text: &str) -> Result<f64, String> {
    match crate::up::parse_seconds(text)? {
        0.0 => Err("0: a benchmark needs time to measure".to_owned()),
        s => Ok(s),
    }
}

#[derive(Debug, Subcommand)]
enum Which {
    /// Decode an ITCH message, decide, encode an order (in process).
    TickToTrade {
        /// Order on every k-th message.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        k: u64,
        /// Messages to measure.
        #[arg(long, default_value_t = 2_000_000, value_parser = parse_count)]
        messages: usize,
    },
    /// Matching-engine throughput and latency against a naive book.
    Engine,
    /// IOC round trip through gateway, proxy, sequencer and engine over loopback UDP.
    Ioc {
        /// Orders per second (open loop); several allowed.
        #[arg(
            long,
            value_delimiter = ',',
            default_values_t = [1_000u64, 10_000, 100_000],
            value_parser = clap::value_parser!(u64).range(1..=RATE_MAX as u64)
        )]
        rates: Vec<u64>,
        /// Seconds per rate and sequencer setting.
        #[arg(long, default_value_t = 5.0, value_parser = parse_positive_seconds)]
        duration: f64,
        /// Report percentiles per window of this many seconds too (for soaks).
        #[arg(long, value_parser = parse_positive_seconds)]
        window: Option<f64>,
        /// Sequencer delays to run, microseconds.
        #[arg(long, value_delimiter = ',', default_values_t = [0u64, 400])]
        sequencer_delay_us: Vec<u64>,
        /// First UDP port used.
        #[arg(long, default_value_t = 35_000)]
        base_port: u16,
        /// Also run each setting with the root journaling every order to disk (issue 9):
        /// the latency fsync group commit adds, beside the same run without it.
        #[arg(long)]
        journal: bool,
        /// How the threads run: busy, epoll, epoll-rt (epoll in SCHED_FIFO, needs root;
        /// skipped with the reason otherwise), epoll-rt-spin (and polls 50 µs after work);
        /// several allowed.
        #[arg(long, value_delimiter = ',', default_values = ["busy", "epoll-rt", "epoll-rt-spin"])]
        drive: Vec<ioc::Drive>,
    },
    /// Proxy hop latency and fan-out throughput against raw UDP baselines.
    Fanout {
        /// Runs (medians are reported).
        #[arg(long, default_value_t = 5, value_parser = parse_count)]
        runs: usize,
    },
    /// Journaled root throughput and latency against the root without a journal.
    Journal {
        /// Orders per throughput run.
        #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
        orders: u64,
        /// Orders per second of the latency runs (open loop).
        #[arg(long, default_value_t = 20_000.0, value_parser = parse_rate)]
        rate: f64,
        /// Runs per setting (medians are reported).
        #[arg(long, default_value_t = 5, value_parser = parse_count)]
        runs: usize,
        /// Directory of the journal files (default: the system temp dir); put it on the disk
        /// the journal will live on.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Every benchmark, one report.
    All,
}

/// One benchmark's part of the report.
#[derive(Debug)]
struct Section {
    title: String,
    markdown: String,
    json: serde_json::Value,
}

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let mut sections = Vec::new();
    match args.which {
        Which::TickToTrade { k, messages } => {
            sections.push(tick_to_trade(k, messages, args.quick)?)
        }
        Which::Engine => sections.push(engine(args.quick)),
        Which::Fanout { runs } => sections.push(fanout(if args.quick { 1 } else { runs })),
        Which::Journal {
            orders,
            rate,
            runs,
            ref dir,
        } => {
            let (orders, runs) = if args.quick {
                (orders.min(20_000), 1)
            } else {
                (orders, runs)
            };
            sections.push(journal::run(orders, rate, runs, dir.clone())?);
        }
        Which::Ioc {
            ref rates,
            duration,
            window,
            ref sequencer_delay_us,
            base_port,
            journal,
            ref drive,
        } => {
            let duration = if args.quick {
                duration.min(1.0)
            } else {
                duration
            };
            sections.push(ioc::run(
                rates,
                duration,
                window,
                sequencer_delay_us,
                base_port,
                journal,
                drive,
            )?);
        }
        Which::All => {
            sections.push(tick_to_trade(1, 2_000_000, args.quick)?);
            sections.push(engine(args.quick));
            sections.push(fanout(if args.quick { 1 } else { 5 }));
            sections.push(if args.quick {
                journal::run(20_000, 20_000.0, 1, None)?
            } else {
                journal::run(200_000, 20_000.0, 5, None)?
            });
            let duration = if args.quick { 1.0 } else { 5.0 };
            sections.push(ioc::run(
                &[1_000, 10_000, 100_000],
                duration,
                None,
                &[0, 400],
                35_000,
                true,
                &[
                    ioc::Drive::Busy,
                    ioc::Drive::EpollRt,
                    ioc::Drive::EpollRtSpin,
                ],
            )?);
        }
    }
    write_report(&args.out, &sections)
}

/// Latency percentiles of a histogram, in the layout of seed 004's tables.
fn percentiles(h: &Histogram<u64>) -> serde_json::Value {
    json!({
        "min": h.min(), "p50": h.value_at_quantile(0.5), "mean": h.mean(),
        "p99": h.value_at_quantile(0.99), "p99.9": h.value_at_quantile(0.999), "max": h.max(),
        "count": h.len(),
    })
}

fn row(name: &str, h: &Histogram<u64>) -> String {
    format!(
        "| {name} | {} | {} | {:.0} | {} | {} | {} | {} |\n",
        h.min(),
        h.value_at_quantile(0.5),
        h.mean(),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        h.len()
    )
}

const TABLE_HEAD: &str = "| what (ns) | min | median | mean | p99 | p99.9 | max | samples |\n|---|---|---|---|---|---|---|---|\n";

/// A realistic market-data stream: packets of Add Order, Executed, Cancel and Delete messages
/// for a few symbols, as the root would publish them.
fn market_data(messages: usize) -> Vec<Vec<u8>> {
    let session = Session::new("BENCH").expect("valid session");
    let stocks = ["AAPL", "MSFT", "IVOO", "SPY"].map(|s| Stock::new(s).expect("valid"));
    let mut packets = Vec::new();
    let mut seq = 1u64;
    let mut made = 0usize;
    let mut buf = vec![0u8; wire::mold::PAYLOAD_MAX];
    while made < messages {
        let mut builder = MarketDataBuilder::new(&mut buf, session, seq);
        loop {
            let i = made as u64;
            let stock_locate = (i % 4) as u16;
            let timestamp_ns = 34_200_000_000_000 + i * 1_000;
            let message = match i % 10 {
                0..=5 => Itch::AddOrder(itch::AddOrder {
                    stock_locate,
                    tracking_number: 0,
                    timestamp_ns,
                    order_ref: i,
                    side: if i.is_multiple_of(2) {
                        Side::Buy
                    } else {
                        Side::Sell
                    },
                    shares: 100,
                    stock: stocks[stock_locate as usize],
                    price: 1_000_000 + (i % 50) as u32 * 100,
                }),
                6 | 7 => Itch::OrderExecuted(itch::OrderExecuted {
                    stock_locate,
                    tracking_number: 0,
                    timestamp_ns,
                    order_ref: i - 6,
                    executed_shares: 100,
                    match_number: i,
                }),
                8 => Itch::OrderCancel(itch::OrderCancel {
                    stock_locate,
                    tracking_number: 0,
                    timestamp_ns,
                    order_ref: i - 8,
                    cancelled_shares: 50,
                }),
                _ => Itch::OrderDelete(itch::OrderDelete {
                    stock_locate,
                    tracking_number: 0,
                    timestamp_ns,
                    order_ref: i - 9,
                }),
            };
            if made >= messages || builder.push(&message).is_err() {
                break;
            }
            made += 1;
        }
        let next = builder.next_sequence();
        let header = wire::JasperHeader {
            packet_seq: packets.len() as u64 + 1,
            ..Default::default()
        };
        let len = builder.finish(&header).expect("header slot reserved");
        packets.push(buf[..len].to_vec());
        seq = next;
    }
    packets
}

fn tick_to_trade(k: u64, messages: usize, quick: bool) -> anyhow::Result<Section> {
    let messages = if quick {
        messages.min(200_000)
    } else {
        messages
    };
    let packets = market_data(messages);
    let strategy = TickToTrade::new(Stock::new("AAPL").expect("valid"), k, 1_000_000);
    let stock = Stock::new("AAPL").expect("valid");
    let mut out = [0u8; 128];
    let new_hist = || Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).expect("bounds");
    let (mut full, mut decode_only, mut timer) = (new_hist(), new_hist(), new_hist());
    let mut orders = 0u64;
    for round in 0..2 {
        // Round 0 warms caches and branch predictors; round 1 is measured.
        for packet in &packets {
            let data = wire::parse_market_data(packet).context("benchmark packet")?;
            let first = data.first_message_seq();
            for (i, body) in data.messages().enumerate() {
                let start = Instant::now();
                let message = Itch::parse(black_box(body));
                let sequence = first + i as u64;
                let decided = message.is_ok() && strategy.decide(sequence);
                if decided {
                    let enter = OrderMsg::Enter(order::Enter {
                        header: OrderHeader {
                            client_order_id: sequence,
                            participant_id: 7,
                            gateway_id: 42,
                            time: ExchangeTime::from_nanos(sequence),
                        },
                        side: Side::Buy,
                        shares: 1,
                        stock,
                        price: 1_000_000,
                        time_in_force: TimeInForce::ImmediateOrCancel,
                        order_type: OrderType::Limit,
                        display: Display::Visible,
                    });
                    let len =
                        wire::hop::emit(&mut out, ExchangeTime::from_nanos(sequence), 0, &enter)?;
                    black_box(&out[..len]);
                }
                let ns = start.elapsed().as_nanos() as u64;
                if round == 1 && decided {
                    full.record(ns.max(1))?;
                    orders += 1;
                }
                if round == 1 {
                    let start = Instant::now();
                    black_box(Itch::parse(black_box(body)).map(|m| m.buffer_len()).ok());
                    decode_only.record((start.elapsed().as_nanos() as u64).max(1))?;
                    let start = Instant::now();
                    timer.record((black_box(start).elapsed().as_nanos() as u64).max(1))?;
                }
            }
        }
    }
    // Nothing measured is no result (a k beyond the messages made every row zero, "met").
    anyhow::ensure!(
        orders > 0,
        "k = {k} sends no order in {messages} messages: lower --k or raise --messages"
    );
    let mut md = format!(
        "{} messages in {} packets, k = {k}: {orders} orders. Goal: p50 <= 100 ns, p99 <= 500 ns \
         (seed 003 reports 0.3 to 2.5 µs). Latencies include the timer's own cost (its row).\n\n",
        messages,
        packets.len()
    );
    md.push_str(TABLE_HEAD);
    md.push_str(&row("tick to trade (decode, decide, encode)", &full));
    md.push_str(&row("decode only", &decode_only));
    md.push_str(&row("baseline: empty timer", &timer));
    let _ = writeln!(
        md,
        "\nGoal met: p50 {} ({} ns), p99 {} ({} ns).",
        full.value_at_quantile(0.5) <= 100,
        full.value_at_quantile(0.5),
        full.value_at_quantile(0.99) <= 500,
        full.value_at_quantile(0.99)
    );
    print!("## tick-to-trade\n{md}");
    Ok(Section {
        title: "tick-to-trade (in process)".to_string(),
        markdown: md,
        json: json!({
            "messages": messages, "orders": orders, "k": k,
            "tick_to_trade_ns": percentiles(&full),
            "decode_only_ns": percentiles(&decode_only),
            "timer_ns": percentiles(&timer),
        }),
    })
}

fn engine(quick: bool) -> Section {
    println!("## engine");
    let r = lob::bench::run(quick);
    let line = |name: &str, x: &lob::bench::Ratio| {
        format!(
            "| {name} | {:.2} M | {:.2} M | {:.2} | {} / {} / {} | {} / {} / {} |\n",
            x.orders_per_s / 1e6,
            x.naive_orders_per_s / 1e6,
            x.orders_per_s / x.naive_orders_per_s,
            x.p50_ns,
            x.p99_ns,
            x.p999_ns,
            x.naive_p50_ns,
            x.naive_p99_ns,
            x.naive_p999_ns
        )
    };
    let mut md = String::from(
        "Single thread. Goal: >= 10 M orders/s on flow (a) and p99 <= 1 µs.\n\n\
         | flow | engine orders/s | naive orders/s | ratio | engine p50/p99/p99.9 ns | naive p50/p99/p99.9 ns |\n\
         |---|---|---|---|---|---|\n",
    );
    md.push_str(&line("(a) realistic", &r.realistic));
    md.push_str(&line("(b) deep-book sweeps, all inputs", &r.sweeps));
    md.push_str(&line("(b) sweeps alone", &r.sweep_only));
    let _ = writeln!(
        md,
        "\nTimer overhead {} ns (included). {:.1} bytes per order slot; peak resting {}.",
        r.timer_ns, r.bytes_per_order, r.resting_peak
    );
    let ratio = |x: &lob::bench::Ratio| {
        json!({"orders_per_s": x.orders_per_s, "naive_orders_per_s": x.naive_orders_per_s,
               "ratio": x.orders_per_s / x.naive_orders_per_s,
               "p50_ns": x.p50_ns, "p99_ns": x.p99_ns, "p999_ns": x.p999_ns,
               "naive_p50_ns": x.naive_p50_ns, "naive_p99_ns": x.naive_p99_ns, "naive_p999_ns": x.naive_p999_ns})
    };
    Section {
        title: "matching engine".to_string(),
        markdown: md,
        json: json!({
            "timer_ns": r.timer_ns, "bytes_per_order": r.bytes_per_order, "resting_peak": r.resting_peak,
            "realistic": ratio(&r.realistic), "sweeps": ratio(&r.sweeps), "sweep_only": ratio(&r.sweep_only),
        }),
    }
}

fn fanout(runs: usize) -> Section {
    println!("## fan-out");
    let text = net::bench::run(runs);
    let added = text
        .lines()
        .find(|l| l.contains("goal: proxy hop adds"))
        .unwrap_or_default()
        .to_string();
    let ratio = text
        .lines()
        .find(|l| l.contains("ratio proxy / raw"))
        .unwrap_or_default()
        .to_string();
    Section {
        title: "proxy hop and fan-out (loopback UDP)".to_string(),
        markdown: format!("```text\n{text}```\n"),
        json: json!({"runs": runs, "latency_goal": added.trim(), "throughput_ratio": ratio.trim(), "text": text}),
    }
}

fn write_report(out: &PathBuf, sections: &[Section]) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let machine = crate::machine::describe();
    let mut md = format!(
        "# Jasper benchmarks\n\nMachine: {} ({} cores), kernel {}, load average {} at the end.\n\n",
        machine["cpu"].as_str().unwrap_or(""),
        machine["cores"],
        machine["kernel"].as_str().unwrap_or(""),
        machine["loadavg"].as_str().unwrap_or("")
    );
    let mut json_sections = serde_json::Map::new();
    for s in sections {
        let _ = write!(md, "## {}\n\n{}\n", s.title, s.markdown);
        json_sections.insert(s.title.clone(), s.json.clone());
    }
    let report = json!({"machine": machine, "benchmarks": json_sections});
    std::fs::write(out.join("report.md"), md)?;
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    println!("wrote {}/report.md and report.json", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: tick-to-trade measures what it is asked to, and refuses to report a result it
    /// did not measure. Method: the hostile-input sweep's `--k 2000000 --messages 10` (it
    /// printed "Goal met" over zero samples, and measured 1,000,000 messages for 10).
    #[test]
    fn tick_to_trade_measures_the_messages_asked_and_refuses_an_empty_result() {
        let section = tick_to_trade(1, 500, false).expect("measures");
        assert_eq!(section.json["messages"], 500);
        assert_eq!(section.json["orders"], 500, "k = 1: an order per message");
        let error = tick_to_trade(2_000_000, 10, false).expect_err("no order");
        assert!(error.to_string().contains("sends no order"), "{error}");
    }
}
