//! What a run reports: a [`Summary`] (printed as a table, written as JSON), the CDFs behind it
//! (CSV), and plots of the OML and DWS CDFs (SVG), all in µs.

use core::fmt::Write as _;
use std::io;
use std::path::Path;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::metrics::{ClockHistograms, Metrics, percent};
use crate::network::NetStats;
use crate::runtime::{Sim, SimStats};
use crate::svg::Plot;

/// Percentiles of one distribution, in µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Minimum.
    pub min: f64,
    /// 1st percentile.
    pub p1: f64,
    /// 10th.
    pub p10: f64,
    /// 25th.
    pub p25: f64,
    /// Median.
    pub p50: f64,
    /// 75th.
    pub p75: f64,
    /// 90th.
    pub p90: f64,
    /// 95th.
    pub p95: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl Percentiles {
    /// `value`, one of these percentiles, as a table cell: "-" when there were no samples
    /// (no packet reached every receiver), where a 0.0 would read as a figure.
    pub fn cell(&self, value: f64) -> String {
        if self.count == 0 {
            "-".to_string()
        } else {
            format!("{value:.1}")
        }
    }

    /// From a histogram of nanoseconds.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        let q = |p: f64| us(histogram.value_at_quantile(p / 100.0));
        Self {
            count: histogram.len(),
            mean: histogram.mean() / 1_000.0,
            min: us(histogram.min()),
            p1: q(1.0),
            p10: q(10.0),
            p25: q(25.0),
            p50: q(50.0),
            p75: q(75.0),
            p90: q(90.0),
            p95: q(95.0),
            p99: q(99.0),
            p999: q(99.9),
            max: us(histogram.max()),
        }
    }
}

/// The metrics of one clock (exchange or true).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClockSummary {
    /// OML at receipt.
    pub oml_receipt: Percentiles,
    /// OML at release.
    pub oml_release: Percentiles,
    /// OWD at receipt.
    pub owd: Percentiles,
    /// DWS at receipt.
    pub dws_receipt: Percentiles,
    /// DWS at release.
    pub dws_release: Percentiles,
    /// Holding time.
    pub holding: Percentiles,
    /// P(F), percent.
    pub fairness_percent: f64,
    /// Negative differences recorded as zero (clock error).
    pub negative: u64,
}

/// Everything a run reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// What was run.
    pub label: String,
    /// The seed.
    pub seed: u64,
    /// Simulated time, seconds.
    pub simulated_s: f64,
    /// Receivers.
    pub receivers: u32,
    /// Packets measured (the root's idle packets too).
    pub packets: u64,
    /// Packets every receiver released without recovery.
    pub complete: u64,
    /// Of the packets measured, idle ones (no message).
    pub idle_packets: u64,
    /// Messages measured: every figure below is per message (DESIGN.md §5).
    pub messages: u64,
    /// Messages every receiver released without recovery.
    pub complete_messages: u64,
    /// Messages lost (DESIGN.md §5), percent of messages.
    pub loss_percent: f64,
    /// The worst receiver's loss, percent of the messages it was expected to release.
    pub receiver_loss_percent_max: f64,
    /// Messages lost that a killed gateway had on their way to it or held when it died
    /// ([`Metrics::lost_to_deaths`]): part of `loss_percent`, lost to the kill.
    pub lost_to_kills: u64,
    /// Packets some receiver released late.
    pub late_packets: u64,
    /// Messages multicast per second (DESIGN.md §5's MPS).
    pub mps: f64,
    /// On the gateways' exchange clocks (what a deployment measures).
    pub exchange: ClockSummary,
    /// On the simulator's true clock (what fairness really is).
    pub truth: ClockSummary,
    /// Network counters.
    pub net: NetStats,
    /// Driver counters.
    pub sim: SimStats,
    /// Checker violations.
    pub violations: u64,
    /// Who answered the gateways' requests for what they missed.
    pub repair: RepairSummary,
    /// Per market participant, with receiver hedging (two gateways each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub participants: Option<ParticipantSummary>,
}

/// Loss repair over the whole run, warm-up included: requests, and who answered them
/// ([`proto::repair`]), summed over the nodes' counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RepairSummary {
    /// Requests gateways sent for missing packets (each retry counts).
    pub gateway_requests: u64,
    /// Packets proxies sent in answer, from their repair rings or passed on from above.
    pub proxy_packets: u64,
    /// Requests proxies sent their parents for what their children asked for and they lacked.
    pub proxy_requests: u64,
    /// Packets the root sent in answer.
    pub root_packets: u64,
}

impl RepairSummary {
    /// One line for people, if any gateway asked.
    pub fn line(&self) -> Option<String> {
        (self.gateway_requests > 0).then(|| {
            format!(
                "repair: gateways asked {} times for missing packets; proxies answered with {} \
                 packets (asking their parents {} times), the root with {}",
                self.gateway_requests, self.proxy_packets, self.proxy_requests, self.root_packets
            )
        })
    }

    fn of(sim: &Sim) -> Self {
        let mut repair = Self::default();
        for id in (0..sim.node_count() as u32).map(proto::NodeId) {
            let node = sim.node_dyn(id).as_any();
            if let Some(gateway) = node.downcast_ref::<proto::Gateway>() {
                repair.gateway_requests += gateway.counters().retransmissions;
            } else if let Some(proxy) = node.downcast_ref::<proto::Proxy>() {
                repair.proxy_packets += proxy.counters().retransmissions;
                repair.proxy_requests += proxy.counters().repair_asks;
            } else if let Some(root) = node.downcast_ref::<proto::Root>() {
                repair.root_packets += root.counters().retransmissions;
            }
        }
        repair
    }
}

/// What participants see with receiver hedging: each acts on the first of its gateways to
/// receive (or release) a packet ([`crate::metrics::Participants`]). True time unless named.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ParticipantSummary {
    /// Participants.
    pub count: u32,
    /// Packets every participant released.
    pub packets: u64,
    /// Messages in them.
    pub messages: u64,
    /// OML over first receipts.
    pub oml_receipt: Percentiles,
    /// OML over first releases.
    pub oml_release: Percentiles,
    /// DWS over first receipts.
    pub dws_receipt: Percentiles,
    /// DWS over first releases.
    pub dws_release: Percentiles,
    /// DWS over first releases, exchange time.
    pub dws_release_exchange: Percentiles,
    /// P(F) over first releases, exchange time, percent.
    pub fairness_percent_exchange: f64,
    /// P(F) over first releases, true time, percent.
    pub fairness_percent_true: f64,
    /// Messages some participant got through none of its gateways, percent of the messages
    /// published while measuring (as the loss over gateways: a message no gateway released
    /// is lost to every participant).
    pub loss_percent: f64,
    /// Packets recorded before every gateway had released them (too many in flight).
    pub overflow: u64,
}

impl ParticipantSummary {
    /// `published`: the messages published while measuring ([`Metrics::messages`]), of
    /// which `participants` saw only those some gateway released.
    fn of(participants: &crate::metrics::Participants, published: u64) -> Self {
        // Every message some gateway released was recorded as got or lost; the rest of the
        // published ones reached no gateway at all.
        let published = published.max(participants.messages + participants.lost_messages);
        let (fairness_percent_exchange, fairness_percent_true) = participants.fairness_percent();
        Self {
            count: participants.count(),
            packets: participants.packets,
            messages: participants.messages,
            oml_receipt: Percentiles::of(&participants.oml_receipt),
            oml_release: Percentiles::of(&participants.oml_release),
            dws_receipt: Percentiles::of(&participants.dws_receipt),
            dws_release: Percentiles::of(&participants.dws_release),
            dws_release_exchange: Percentiles::of(&participants.dws_release_exchange),
            fairness_percent_exchange,
            fairness_percent_true,
            loss_percent: percent(published - participants.messages, published),
            overflow: participants.overflow,
        }
    }
}

impl Summary {
    /// Summarises `sim` (call [`Sim::finish`] first so in-flight packets are finalised).
    pub fn new(sim: &Sim, label: &str) -> Self {
        let empty = Metrics::new(crate::metrics::MetricsConfig::new(1));
        let metrics = sim.metrics().unwrap_or(&empty);
        let receivers = metrics.config().receivers;
        let packets = metrics.packets;
        Self {
            label: label.to_owned(),
            seed: sim.seed(),
            simulated_s: sim.now() as f64 / 1e9,
            receivers,
            packets,
            complete: metrics.complete,
            idle_packets: metrics.idle_packets,
            messages: metrics.messages(),
            complete_messages: metrics.complete_messages,
            loss_percent: metrics.loss_percent(),
            receiver_loss_percent_max: metrics.receiver_loss_percent_max(),
            lost_to_kills: metrics.lost_to_deaths(),
            late_packets: metrics.late_packets,
            mps: metrics.mps(),
            exchange: clock_summary(metrics, &metrics.exchange),
            truth: clock_summary(metrics, &metrics.truth),
            net: sim.network().stats().clone(),
            sim: sim.stats().clone(),
            violations: sim.checker().violation_count(),
            repair: RepairSummary::of(sim),
            participants: metrics
                .participants
                .as_ref()
                .map(|participants| ParticipantSummary::of(participants, metrics.messages())),
        }
    }

    /// `N messages held by or on their way to a killed gateway; ` when killed gateways took
    /// any with them, else nothing (it goes inside the loss's parenthesis).
    pub fn lost_to_kills_note(&self) -> String {
        match self.lost_to_kills {
            0 => String::new(),
            n => format!("{}; ", lost_to_kills(n)),
        }
    }

    /// A table for people: one row per metric and clock.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}  seed={}  receivers={}  messages={}  packets={}{}  simulated={:.3}s  MPS={:.0}",
            self.label,
            self.seed,
            self.receivers,
            self.messages,
            self.packets,
            match self.idle_packets {
                0 => String::new(),
                n => format!(" ({n} idle)"),
            },
            self.simulated_s,
            self.mps
        );
        let _ = writeln!(
            out,
            "loss={:.4}% ({}worst receiver {:.4}%)  late packets={}  P(F) true={} exchange={}  net drops={}  violations={}",
            self.loss_percent,
            self.lost_to_kills_note(),
            self.receiver_loss_percent_max,
            self.late_packets,
            share(self.truth.fairness_percent, self.complete_messages),
            share(self.exchange.fairness_percent, self.complete_messages),
            self.net.drops_total(),
            self.violations
        );
        let _ = writeln!(
            out,
            "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "metric (µs)", "p1", "p10", "p50", "p90", "p99", "p99.9", "max"
        );
        for (clock, summary) in [("true", &self.truth), ("exch", &self.exchange)] {
            for (name, p) in [
                ("OML receipt", &summary.oml_receipt),
                ("OML release", &summary.oml_release),
                ("OWD", &summary.owd),
                ("DWS receipt", &summary.dws_receipt),
                ("DWS release", &summary.dws_release),
                ("holding", &summary.holding),
            ] {
                row(&mut out, &format!("{name} [{clock}]"), p);
            }
        }
        if let Some(mp) = &self.participants {
            let _ = writeln!(
                out,
                "per participant ({} MPs, first of their gateways): P(F) true={} exchange={}  loss={:.4}%",
                mp.count,
                share(mp.fairness_percent_true, mp.messages),
                share(mp.fairness_percent_exchange, mp.messages),
                mp.loss_percent
            );
            for (name, p) in [
                ("OML receipt [MP]", &mp.oml_receipt),
                ("OML release [MP]", &mp.oml_release),
                ("DWS receipt [MP]", &mp.dws_receipt),
                ("DWS release [MP]", &mp.dws_release),
                ("DWS release [MP exch]", &mp.dws_release_exchange),
            ] {
                row(&mut out, name, p);
            }
        }
        out
    }

    /// The summary as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a summary serialises")
    }
}

/// A P(F) figure as a table cell, a share of `whole` packets: "-" when there were none (no
/// packet reached every receiver), where 0.0% would read as a figure. The JSON keeps the 0,
/// beside the count that says why.
pub fn share(percent: f64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{percent:.1}%")
    }
}

/// One row of [`Summary::table`].
fn row(out: &mut String, name: &str, p: &Percentiles) {
    let _ = writeln!(
        out,
        "{name:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        p.cell(p.p1),
        p.cell(p.p10),
        p.cell(p.p50),
        p.cell(p.p90),
        p.cell(p.p99),
        p.cell(p.p999),
        p.cell(p.max)
    );
}

fn clock_summary(metrics: &Metrics, histograms: &ClockHistograms) -> ClockSummary {
    ClockSummary {
        oml_receipt: Percentiles::of(&histograms.oml_receipt),
        oml_release: Percentiles::of(&histograms.oml_release),
        owd: Percentiles::of(&histograms.owd),
        dws_receipt: Percentiles::of(&histograms.dws_receipt),
        dws_release: Percentiles::of(&histograms.dws_release),
        holding: Percentiles::of(&histograms.holding),
        fairness_percent: metrics.fairness_percent(histograms),
        negative: histograms.negative,
    }
}

/// The CDF of a histogram as `(value µs, percentile)` points, at every half percentile plus
/// the 99.9th and the maximum.
pub fn cdf_points(histogram: &Histogram<u64>) -> Vec<(f64, f64)> {
    if histogram.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<(f64, f64)> = (0..=199)
        .map(|i| f64::from(i) * 0.5)
        .chain([99.9])
        .map(|p| (us(histogram.value_at_quantile(p / 100.0)), p))
        .collect();
    points.push((us(histogram.max()), 100.0));
    points
}

/// The histograms of a run by name, in the order the CSV lists them.
pub fn named_histograms(metrics: &Metrics) -> Vec<(&'static str, &'static str, &Histogram<u64>)> {
    let mut out = Vec::new();
    for (clock, h) in [("true", &metrics.truth), ("exchange", &metrics.exchange)] {
        out.push(("oml_receipt", clock, &h.oml_receipt));
        out.push(("oml_release", clock, &h.oml_release));
        out.push(("owd", clock, &h.owd));
        out.push(("dws_receipt", clock, &h.dws_receipt));
        out.push(("dws_release", clock, &h.dws_release));
        out.push(("holding", clock, &h.holding));
    }
    if let Some(mp) = metrics.participants.as_ref() {
        out.push(("participant_oml_receipt", "true", &mp.oml_receipt));
        out.push(("participant_oml_release", "true", &mp.oml_release));
        out.push(("participant_dws_receipt", "true", &mp.dws_receipt));
        out.push(("participant_dws_release", "true", &mp.dws_release));
        out.push((
            "participant_dws_release",
            "exchange",
            &mp.dws_release_exchange,
        ));
    }
    out
}

/// Which clocks a run's figures are in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clocks {
    /// True time (the simulator's clock, or one host's) and exchange time.
    TrueAndExchange,
    /// Exchange time only: a deployment over many hosts, which share no other clock (its
    /// metrics hold the same values under both, and only exchange time is written).
    Exchange,
}

/// `field` as one CSV field (RFC 4180): as it is, or in double quotes (each quote doubled)
/// when it holds a comma, a quote or a line break. Labels such as `N=100 <2,10>` and
/// metrics such as `DWS (release, exch)` hold commas.
pub fn csv_field(field: &str) -> std::borrow::Cow<'_, str> {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\"")).into()
    } else {
        field.into()
    }
}

/// `field` in double quotes (each quote doubled) whatever it holds: the claims of the
/// verdict files, quoted since they were first written.
pub fn csv_field_always_quoted(field: &str) -> String {
    format!("\"{}\"", field.replace('"', "\"\""))
}

/// CSV of every CDF: `label,metric,clock,percentile,value_us`.
pub fn cdf_csv(label: &str, metrics: &Metrics) -> String {
    cdf_csv_in(label, metrics, Clocks::TrueAndExchange)
}

/// [`cdf_csv`] of the CDFs in `clocks`.
pub fn cdf_csv_in(label: &str, metrics: &Metrics, clocks: Clocks) -> String {
    let mut out = String::from("label,metric,clock,percentile,value_us\n");
    let label = csv_field(label);
    for (metric, clock, histogram) in named_histograms(metrics) {
        if clocks == Clocks::Exchange && clock != "exchange" {
            continue;
        }
        let (metric, clock) = (csv_field(metric), csv_field(clock));
        for (value, percentile) in cdf_points(histogram) {
            let _ = writeln!(out, "{label},{metric},{clock},{percentile},{value:.3}");
        }
    }
    out
}

/// The files [`write_dir`] writes.
pub const RUN_OUTPUTS: [&str; 5] = [
    "summary.json",
    "summary.txt",
    "cdf.csv",
    "oml_cdf.svg",
    "dws_cdf.svg",
];

/// Removes from `dir` each of `names` that is there: a run or campaign about to write into a
/// directory an earlier one wrote must not leave that one's results beside its own (a run
/// stopped before it measured writes none, a campaign run in part writes some). Nothing else
/// in `dir` is touched.
pub fn remove_outputs<'a>(dir: &Path, names: impl IntoIterator<Item = &'a str>) -> io::Result<()> {
    for name in names {
        match std::fs::remove_file(dir.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Removes each of `names` from every `seed-0x…/` directory in `out_dir`, the reports an
/// earlier sweep over seeds left, and the directory itself if that leaves it empty: a sweep
/// about to write there lists only its own seeds.
pub fn clear_seed_dirs<'a>(
    out_dir: &Path,
    names: impl IntoIterator<Item = &'a str> + Clone,
) -> Result<(), String> {
    let entries =
        std::fs::read_dir(out_dir).map_err(|e| format!("reading {}: {e}", out_dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("reading {}: {e}", out_dir.display()))?;
        let is_seed = entry
            .file_name()
            .to_str()
            .and_then(|name| name.strip_prefix("seed-0x"))
            .is_some_and(|hex| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()));
        if is_seed && entry.path().is_dir() {
            let dir = entry.path();
            remove_outputs(&dir, names.clone())
                .map_err(|e| format!("clearing {}: {e}", dir.display()))?;
            // Kept if anything else is in it.
            let _ = std::fs::remove_dir(&dir);
        }
    }
    Ok(())
}

/// Writes `summary.json`, `summary.txt`, `cdf.csv`, `oml_cdf.svg` and `dws_cdf.svg`
/// ([`RUN_OUTPUTS`]) into `dir` (created if missing). Call [`Sim::finish`] first.
pub fn write_dir(sim: &Sim, label: &str, dir: &Path) -> io::Result<Summary> {
    std::fs::create_dir_all(dir)?;
    let summary = Summary::new(sim, label);
    std::fs::write(dir.join("summary.json"), summary.to_json())?;
    std::fs::write(dir.join("summary.txt"), summary.table())?;
    if let Some(metrics) = sim.metrics() {
        std::fs::write(dir.join("cdf.csv"), cdf_csv(label, metrics))?;
        write_plots(dir, label, metrics)?;
    }
    Ok(summary)
}

/// The last percentile a plotted curve reaches: the few slowest messages would stretch the
/// x axis several times over and squeeze the body of every curve into its left part
/// (`summary.json` and `cdf.csv` keep the tail to the maximum).
const PLOT_PERCENTILE_MAX: f64 = 99.9;

/// Writes `oml_cdf.svg` and `dws_cdf.svg` of `metrics` into `dir`, titled with `label`.
/// DWS has a log axis: at receipt it is ~100 µs, at release (hold-and-release) ~0.1 µs, and a
/// linear axis would draw the release curve as a line on the y axis. A dashed curve is the
/// same quantity as the solid one before it, in exchange time (the gateways' clocks).
pub fn write_plots(dir: &Path, label: &str, metrics: &Metrics) -> io::Result<()> {
    write_plots_in(dir, label, metrics, Clocks::TrueAndExchange)
}

/// [`write_plots`] of the curves in `clocks`.
pub fn write_plots_in(
    dir: &Path,
    label: &str,
    metrics: &Metrics,
    clocks: Clocks,
) -> io::Result<()> {
    let points = |histogram: &Histogram<u64>| -> Vec<(f64, f64)> {
        cdf_points(histogram)
            .into_iter()
            .filter(|&(_, p)| p <= PLOT_PERCENTILE_MAX)
            .collect()
    };
    // Each quantity in true time, then dashed in its colour in exchange time.
    let both = |plot: &mut Plot, what: &str, truth: &Histogram<u64>, exchange| match clocks {
        Clocks::TrueAndExchange => {
            plot.add(&format!("{what} (true time)"), points(truth), false);
            plot.add_paired(&format!("{what} (exchange time)"), points(exchange));
        }
        Clocks::Exchange => plot.add(&format!("{what} (exchange time)"), points(exchange), false),
    };
    let mut oml = Plot::cdf(
        &format!("OML CDF: {label}"),
        &format!("overall multicast latency (µs; curves end at p{PLOT_PERCENTILE_MAX})"),
    );
    let (truth, exchange) = (&metrics.truth, &metrics.exchange);
    both(
        &mut oml,
        "receipt",
        &truth.oml_receipt,
        &exchange.oml_receipt,
    );
    both(
        &mut oml,
        "release",
        &truth.oml_release,
        &exchange.oml_release,
    );
    if let Some(mp) = metrics.participants.as_ref() {
        oml.add(
            "per participant, first receipt",
            points(&mp.oml_receipt),
            false,
        );
        oml.add(
            "per participant, first release",
            points(&mp.oml_release),
            false,
        );
    }
    std::fs::write(dir.join("oml_cdf.svg"), oml.render())?;
    // Say where values under the floor went only when some are there to be drawn.
    let floored = [
        &truth.dws_receipt,
        &exchange.dws_receipt,
        &truth.dws_release,
        &exchange.dws_release,
    ]
    .into_iter()
    .any(|h| !h.is_empty() && us(h.min()) < DWS_PLOT_FLOOR_US);
    let mut dws = Plot::cdf(
        &format!("DWS CDF: {label}"),
        &format!(
            "delivery window size (µs, log scale{}; curves end at p{PLOT_PERCENTILE_MAX})",
            if floored {
                format!(", under {DWS_PLOT_FLOOR_US} drawn at {DWS_PLOT_FLOOR_US}")
            } else {
                String::new()
            }
        ),
    )
    .log_x(DWS_PLOT_FLOOR_US);
    both(
        &mut dws,
        "receipt",
        &truth.dws_receipt,
        &exchange.dws_receipt,
    );
    both(
        &mut dws,
        "release",
        &truth.dws_release,
        &exchange.dws_release,
    );
    std::fs::write(dir.join("dws_cdf.svg"), dws.render())?;
    Ok(())
}

/// The left edge of the DWS plot's log axis, in µs: 10 ns, under the release skew that clock
/// sync leaves (DESIGN.md §4) and above the 1 ns precision of the histograms.
const DWS_PLOT_FLOOR_US: f64 = 0.01;

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

/// `N messages held by or on their way to a killed gateway`: what a run with `--kill` lost to
/// its kills rather than to the network (part of the loss by DESIGN.md §5's definition), in
/// the words `jasper sim` and `jasper up` both print.
pub fn lost_to_kills(messages: u64) -> String {
    match messages {
        1 => "1 message held by or on its way to a killed gateway".to_owned(),
        n => format!("{n} messages held by or on their way to a killed gateway"),
    }
}

/// The records of CSV `text` (RFC 4180: quoted fields may hold commas, doubled quotes and
/// line breaks), for tests that check what the writers above wrote.
#[cfg(test)]
pub(crate) fn csv_records(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_or_quotes_are_quoted() {
        assert_eq!(csv_field("OML release"), "OML release");
        assert_eq!(csv_field("N=100 <2,10>"), "\"N=100 <2,10>\"");
        assert_eq!(csv_field("a \"b\""), "\"a \"\"b\"\"\"");
        assert_eq!(csv_field_always_quoted("H=2"), "\"H=2\"");
        let fields = [
            "plain",
            "DWS (release, exch)",
            "say \"hi\", twice",
            "",
            "two\nlines",
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f).into_owned()).collect();
        let text = format!("{}\n{}\n", line.join(","), line.join(","));
        assert_eq!(
            csv_records(&text),
            vec![fields.map(String::from).to_vec(); 2]
        );
    }
}
