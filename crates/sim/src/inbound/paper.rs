//! The paper's inbound experiments (§5, §8.7, §8.8; figures in DESIGN.md §6), each printed
//! beside the paper's figure with the ratio and a verdict on the shape.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use proto::order_queue::Discipline;
use proto::sequencer::SequencerKind;
use serde::Serialize;

use super::{Inbound, InboundConfig, InboundRun};
use crate::experiments::Printed;
use crate::network::NetModel;
use crate::report::csv_field;
use crate::svg::Plot;

/// One number beside the paper's.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Experiment.
    pub experiment: String,
    /// Variant (shape, discipline, T, overlap, ...).
    pub variant: String,
    /// Metric name and unit.
    pub metric: String,
    /// Our value.
    pub ours: f64,
    /// The paper's value, where it gives one.
    pub paper: Option<f64>,
}

impl Row {
    /// ours / paper.
    pub fn ratio(&self) -> Option<f64> {
        self.paper.filter(|p| *p != 0.0).map(|p| self.ours / p)
    }
}

/// A shape the paper claims, and whether this campaign's runs show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The experiment that judges it ([`EXPERIMENTS`]).
    pub experiment: &'static str,
    /// The claim in words.
    pub claim: String,
    /// Whether it holds.
    pub ok: bool,
}

/// A run's label and result.
#[derive(Clone, Debug, Serialize)]
struct Labelled {
    experiment: String,
    variant: String,
    config: InboundConfig,
    run: InboundRun,
}

/// Sizes of one campaign.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    warmup_ns: u64,
    duration_ns: u64,
    drain_ns: u64,
    many: u32,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                warmup_ns: 100_000_000,
                duration_ns: 1_000_000_000,
                drain_ns: 60_000_000,
                many: 1_000,
            }
        } else {
            Self {
                warmup_ns: 200_000_000,
                duration_ns: 5_000_000_000,
                drain_ns: 200_000_000,
                many: 1_000,
            }
        }
    }
}

/// The base of every experiment: 10 participants under 2 proxies, the paper's workload with
/// bursts doubling the rate for `BURST_LEN` every `BURST_PERIOD`, pacing at T = 70 µs, LOQ,
/// d_s = 400 µs. Pacing is the paper's heuristic, without our check that stops increases the
/// OWD does not respond to (`futile_after = 0`; [`proto::pacing`]): the paper's table measures
/// that heuristic, T = 70 µs throttling "unnecessarily" included. The pacing experiment adds
/// one row with the check on. Gateways never send an order again for want of an answer
/// (`order_retry` zero) and take their responses as they come, never asking for a lost one
/// (`response_recovery` off), as in the paper's prototype: its experiments count the orders
/// lost, and its workload reacts to the responses it happens to get (with recovery, a
/// gateway overloaded in the bursts holds every later response back behind each lost one
/// until it comes again: 16K of 50K responses refilled at overlap 1/5 with SimplePQ, and the
/// workload's cancels followed).
pub fn base(quick: bool, participants: u32) -> InboundConfig {
    let s = Sizes::new(quick);
    let mut c = if participants == 10 {
        InboundConfig::tree(10, 2, 5)
    } else {
        InboundConfig::heuristic(participants)
    };
    c.warmup_ns = c.warmup_ns.max(s.warmup_ns);
    c.duration_ns = s.duration_ns;
    c.drain_ns = s.drain_ns;
    c.workload.rate_per_s = 7_000.0 * 10.0 / participants as f64;
    c.workload.burst_factor = 2.0;
    c.workload.burst_period = BURST_PERIOD;
    c.workload.burst_len = BURST_LEN;
    c.workload.overlap = (1, 5);
    c.node.pacing.futile_after = 0;
    c.node.order_retry = Duration::ZERO;
    c.node.response_recovery = false;
    c
}

/// Bursts last longer than the pacer's 40 ms median window, so that the parent's median OWD
/// can rise during one and pacing engage (the paper's burst period is lost from its text).
/// 10% of the time at twice the rate puts the average offered load near the paper's 78K/s
/// unpaced engine throughput.
pub const BURST_LEN: Duration = Duration::from_millis(50);
/// See [`BURST_LEN`].
pub const BURST_PERIOD: Duration = Duration::from_millis(500);

/// One experiment's simulation, with the paper's prototype's gateways: no order retries and
/// no response recovery (see [`base`]).
fn prototype(config: &InboundConfig) -> Result<Inbound, String> {
    let mut config = config.clone();
    config.node.order_retry = Duration::ZERO;
    config.node.response_recovery = false;
    Inbound::new(config)
}

/// Runs one experiment (see [`prototype`]).
fn run(config: &InboundConfig) -> Result<InboundRun, String> {
    Ok(prototype(config)?.run())
}

/// [`run`], abandoned (`None`) once `stop` is set.
fn run_stoppable(config: &InboundConfig, stop: &AtomicBool) -> Result<Option<InboundRun>, String> {
    Ok(prototype(config)?.run_stoppable(stop))
}

/// Loss of the incast benchmark (10 participants x `rate` orders/s, no bursts, no pacing)
/// under `model`: `(straight to the root, through 2 proxies)`, percent.
pub fn incast_loss(
    model: &NetModel,
    rate: f64,
    quick: bool,
    seed: u64,
) -> Result<(f64, f64), String> {
    let mut out = [0.0; 2];
    for (i, mut c) in [InboundConfig::direct(10), InboundConfig::tree(10, 2, 5)]
        .into_iter()
        .enumerate()
    {
        let s = Sizes::new(quick);
        c.seed = seed;
        c.model = model.clone();
        c.warmup_ns = c.warmup_ns.max(s.warmup_ns);
        c.duration_ns = s.duration_ns;
        c.drain_ns = s.drain_ns;
        c.workload.rate_per_s = rate;
        c.workload.burst_factor = 1.0;
        c.node.pacing.enabled = false;
        out[i] = run(&c)?.metrics.loss_pct;
    }
    Ok((out[0], out[1]))
}

fn verdict(report: &mut String, ok: bool, what: &str, why_not: &str) {
    if ok {
        let _ = writeln!(report, "  shape: MATCHES ({what})");
    } else {
        let _ = writeln!(report, "  shape: DIFFERS ({what} does not hold): {why_not}");
    }
}

fn line(report: &mut String, rows: &mut Vec<Row>, row: Row) {
    let ratio = row
        .ratio()
        .map_or_else(|| "-".to_string(), |r| format!("{r:.2}"));
    let paper = row
        .paper
        .map_or_else(|| "-".to_string(), |p| format!("{p:.4}"));
    let _ = writeln!(
        report,
        "  {:<26} {:<34} ours {:>12.4}  paper {:>10}  ratio {:>6}",
        row.variant, row.metric, row.ours, paper, ratio
    );
    rows.push(row);
}

fn row(experiment: &str, variant: &str, metric: &str, ours: f64, paper: Option<f64>) -> Row {
    Row {
        experiment: experiment.to_string(),
        variant: variant.to_string(),
        metric: metric.to_string(),
        ours,
        paper,
    }
}

fn discipline_name(d: Discipline) -> &'static str {
    match d {
        Discipline::Fifo => "FIFO",
        Discipline::SimplePq => "SimplePQ",
        Discipline::Loq => "LOQ",
    }
}

/// The paper's pacing loss: orders of the window dropped by a buffer on the way (receive
/// buffers, the engine's socket), not those held back at a proxy, percent of orders sent.
pub fn buffer_loss_pct(r: &InboundRun) -> f64 {
    pct(r.loss.buffer_lost, r.metrics.sent)
}

/// Orders of the window held back at proxies by pacing (still queued at the end, or refused
/// by a full proxy queue), percent of orders sent.
pub fn held_pct(r: &InboundRun) -> f64 {
    pct(r.loss.held_at_proxies, r.metrics.sent)
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

/// Spearman's rank correlation of `values` with their order (1 for a strictly rising
/// sequence, -1 for a falling one); ties take their mean rank. 0 for fewer than two values.
fn rank_trend(values: &[f64]) -> f64 {
    let n = values.len();
    if n < 2 {
        return 0.0;
    }
    let rank = |v: f64| {
        let below = values.iter().filter(|&&w| w < v).count() as f64;
        let equal = values.iter().filter(|&&w| w == v).count() as f64;
        below + (equal + 1.0) / 2.0
    };
    let ranks: Vec<f64> = values.iter().map(|&v| rank(v)).collect();
    let mean = (n as f64 + 1.0) / 2.0;
    let (mut cov, mut var_x, mut var_y) = (0.0, 0.0, 0.0);
    for (i, r) in ranks.iter().enumerate() {
        let (x, y) = (i as f64 + 1.0 - mean, r - mean);
        cov += x * y;
        var_x += x * x;
        var_y += y * y;
    }
    if var_y == 0.0 {
        0.0
    } else {
        cov / (var_x * var_y).sqrt()
    }
}

fn change_pct(new: f64, old: f64) -> f64 {
    if old == 0.0 {
        0.0
    } else {
        100.0 * (new - old) / old
    }
}

/// Everything the campaign writes into its directory: removed before it runs, so that a
/// campaign cut short never leaves an earlier one's results beside its own.
pub const INBOUND_OUTPUTS: [&str; 4] = [
    "inbound.json",
    "inbound.csv",
    "inbound_loq_matching.svg",
    "inbound_loq_latency.svg",
];

/// The queue disciplines the LOQ and sequencer experiments compare, LOQ first.
const DISCIPLINES: [Discipline; 3] = [Discipline::Loq, Discipline::SimplePq, Discipline::Fifo];

/// The campaign's experiments, in the order the report gives them.
pub const EXPERIMENTS: [&str; 6] = ["incast", "pacing", "loq", "scale", "fairness", "sequencer"];

/// Reruns the paper's inbound experiments; writes `inbound.json`, `inbound.csv` and SVG plots
/// ([`INBOUND_OUTPUTS`]) into `out_dir`; returns the printed report. `quick`: CI-sized runs.
///
/// The runs go on every core: a first pass through the report, with placeholder results,
/// lists the runs it asks for; they run in parallel, each one serial simulation (so each
/// result is what a lone run of its configuration gives); the second pass writes the report
/// from them (and runs, in turn, any configuration the first pass did not foresee).
///
/// Every run takes `seed` when one is given (each experiment's own otherwise), to see which
/// results hold across seeds.
///
/// Once `stop` is set (Ctrl-C) no further run starts and those running are abandoned; the
/// report then has only the experiments whose runs all ended, and says which it has not.
pub fn paper_inbound(
    out_dir: &Path,
    quick: bool,
    seed: Option<u64>,
    stop: &AtomicBool,
) -> Result<Printed, String> {
    let mut progress = crate::experiments::stderr_progress();
    let report = run_campaign(out_dir, quick, seed, &mut progress, stop)?;
    Ok(Printed {
        interrupted: !report.not_run.is_empty(),
        text: report.text,
    })
}

/// [`paper_inbound`], its report whole, with progress to `progress`.
pub(super) fn run_campaign(
    out_dir: &Path,
    quick: bool,
    seed: Option<u64>,
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<Report, String> {
    // Before the runs, so that a directory that cannot be made fails at once.
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    crate::report::remove_outputs(out_dir, INBOUND_OUTPUTS)
        .map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let mut wanted: Vec<InboundConfig> = Vec::new();
    campaign(None, quick, seed, &mut |config| {
        if !wanted.contains(config) {
            wanted.push(config.clone());
        }
        Ok(Some(InboundRun::default()))
    })?;
    // One line as each run ends (the campaign takes minutes).
    let total = wanted.len();
    let mut ended = 0;
    progress(&format!(
        "{total} inbound runs on {} cores\n",
        crate::cores::count(total)
    ));
    let done = crate::cores::on_every_core(
        &wanted,
        |_, config, say| {
            let result = run_stoppable(config, stop);
            if matches!(result, Ok(Some(_))) {
                say(String::new());
            }
            result
        },
        &mut |_| {
            ended += 1;
            progress(&format!(
                "\r[{ended}/{total}] inbound runs done{}",
                if ended == total { "\n" } else { "" }
            ));
        },
    );
    if ended < total {
        progress(&format!(
            "\r[{ended}/{total}] inbound runs done; stopped, {} did not end\n",
            total - ended
        ));
    }
    campaign(
        Some(out_dir),
        quick,
        seed,
        &mut |config| match wanted.iter().position(|c| c == config) {
            Some(i) => done[i].clone(),
            None => run_stoppable(config, stop),
        },
    )
}

/// A report, its verdicts, and the experiments it does not have because their runs were
/// stopped.
pub(super) struct Report {
    pub(super) text: String,
    /// The verdicts of the experiments that ran whole, in the report's order.
    pub(super) verdicts: Vec<Verdict>,
    pub(super) not_run: Vec<&'static str>,
}

/// Why an experiment has no result: a run failed (the campaign fails), or a run was stopped
/// (the experiment is left out).
enum Halt {
    Failed(String),
    Stopped,
}

impl From<String> for Halt {
    fn from(e: String) -> Self {
        Self::Failed(e)
    }
}

/// What runs a configuration: `Ok(None)` if it was stopped.
pub(super) type Runner<'a> = dyn FnMut(&InboundConfig) -> Result<Option<InboundRun>, String> + 'a;

/// The report as it is written: the text, its rows and runs, and what runs each configuration.
struct Campaign<'a, 'r> {
    out_dir: Option<&'a Path>,
    quick: bool,
    /// The seed of every run, if not each experiment's own.
    seed: Option<u64>,
    sizes: Sizes,
    report: String,
    rows: Vec<Row>,
    runs: Vec<Labelled>,
    verdicts: Vec<Verdict>,
    /// The experiment being written.
    current: &'static str,
    not_run: Vec<&'static str>,
    runner: &'a mut Runner<'r>,
}

impl Campaign<'_, '_> {
    /// Runs `config`, labelled `experiment`/`variant` in `inbound.json`.
    fn record(
        &mut self,
        experiment: &str,
        variant: &str,
        config: &InboundConfig,
    ) -> Result<InboundRun, Halt> {
        let mut config = config.clone();
        config.seed = self.seed.unwrap_or(config.seed);
        let result = (self.runner)(&config)?.ok_or(Halt::Stopped)?;
        self.runs.push(Labelled {
            experiment: experiment.to_string(),
            variant: variant.to_string(),
            config,
            run: result.clone(),
        });
        Ok(result)
    }

    /// One row beside the paper's, printed and kept for the CSV.
    fn line(&mut self, row: Row) {
        line(&mut self.report, &mut self.rows, row);
    }

    fn verdict(&mut self, ok: bool, what: &str, why_not: &str) {
        verdict(&mut self.report, ok, what, why_not);
        self.verdicts.push(Verdict {
            experiment: self.current,
            claim: what.to_owned(),
            ok,
        });
    }

    /// Experiment `name`, written by `body`; with `None` for `body` (an experiment it builds
    /// on was left out) or a run stopped, it is left out, and what it had written goes.
    fn experiment<T>(
        &mut self,
        name: &'static str,
        body: Option<impl FnOnce(&mut Self) -> Result<T, Halt>>,
    ) -> Result<Option<T>, String> {
        let (report, rows, runs) = (self.report.len(), self.rows.len(), self.runs.len());
        let verdicts = self.verdicts.len();
        self.current = name;
        match body.map(|body| body(self)) {
            Some(Ok(value)) => Ok(Some(value)),
            Some(Err(Halt::Failed(e))) => Err(e),
            Some(Err(Halt::Stopped)) | None => {
                self.report.truncate(report);
                self.rows.truncate(rows);
                self.runs.truncate(runs);
                self.verdicts.truncate(verdicts);
                self.not_run.push(name);
                Ok(None)
            }
        }
    }
}

/// The report: `runner` runs a configuration; `out_dir` `None` writes nothing.
pub(super) fn campaign(
    out_dir: Option<&Path>,
    quick: bool,
    seed: Option<u64>,
    runner: &mut Runner<'_>,
) -> Result<Report, String> {
    if let Some(out_dir) = out_dir {
        std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    }
    let mut cx = Campaign {
        out_dir,
        quick,
        seed,
        sizes: Sizes::new(quick),
        report: String::new(),
        rows: Vec::new(),
        runs: Vec::new(),
        verdicts: Vec::new(),
        current: EXPERIMENTS[0],
        not_run: Vec::new(),
        runner,
    };
    cx.experiment("incast", Some(incast))?;
    cx.experiment("pacing", Some(pacing))?;
    let by_overlap = cx.experiment("loq", Some(loq))?;
    let many = cx.experiment("scale", Some(scale))?;
    cx.experiment(
        "fairness",
        by_overlap
            .as_ref()
            .zip(many.as_ref())
            .map(|(by_overlap, many)| |cx: &mut Campaign<'_, '_>| fairness(cx, by_overlap, many)),
    )?;
    cx.experiment(
        "sequencer",
        by_overlap
            .as_ref()
            .map(|by_overlap| |cx: &mut Campaign<'_, '_>| sequencer(cx, by_overlap)),
    )?;

    let s = cx.sizes;
    let mut report = format!(
        "Jasper inbound experiments ({}{}; window {} ms after {} ms warm-up; network preset \
         inbound_model, engine {} ns/order, socket {} orders)\n",
        if quick { "quick" } else { "full" },
        seed.map_or(String::new(), |seed| format!(
            ", every run on seed {seed:#x}"
        )),
        s.duration_ns / 1_000_000,
        s.warmup_ns / 1_000_000,
        super::EngineModel::default().order_cost_ns,
        super::EngineModel::default().buffer_orders
    );
    if !cx.not_run.is_empty() {
        let _ = writeln!(
            report,
            "Interrupted (Ctrl-C): {} of {} experiments ran whole. Not run: {}.",
            EXPERIMENTS.len() - cx.not_run.len(),
            EXPERIMENTS.len(),
            cx.not_run.join(", ")
        );
    }
    report.push_str(&cx.report);

    // Outputs.
    let mut json = serde_json::json!({
        "quick": quick,
        "seed": seed,
        "rows": cx.rows,
        "verdicts": cx.verdicts,
        "runs": cx.runs,
    });
    if !cx.not_run.is_empty() {
        json["not_run"] = serde_json::json!(cx.not_run);
    }
    let json = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    write(out_dir, "inbound.json", &json)?;
    let mut csv = String::from("experiment,variant,metric,ours,paper,ratio\n");
    for r in &cx.rows {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{}",
            csv_field(&r.experiment),
            csv_field(&r.variant),
            csv_field(&r.metric),
            r.ours,
            r.paper.map_or(String::new(), |p| p.to_string()),
            r.ratio().map_or(String::new(), |p| p.to_string())
        );
    }
    write(out_dir, "inbound.csv", &csv)?;
    Ok(Report {
        text: report,
        verdicts: cx.verdicts,
        not_run: cx.not_run,
    })
}

/// The incast benchmark: 10 participants straight to the engine, then through 2 proxies.
fn incast(cx: &mut Campaign<'_, '_>) -> Result<(), Halt> {
    // 1. Incast: 10 MPs x 5K orders/s straight to the engine, then through 2 proxies.
    let _ = writeln!(
        cx.report,
        "\n[incast] 10 MPs x 5K orders/s, no bursts, no pacing: loss"
    );
    let mut incast = Vec::new();
    for (variant, mut c, paper) in [
        ("direct (no proxies)", InboundConfig::direct(10), 1.58),
        ("tree (2 proxies)", InboundConfig::tree(10, 2, 5), 0.68),
    ] {
        c.warmup_ns = c.warmup_ns.max(cx.sizes.warmup_ns);
        c.duration_ns = cx.sizes.duration_ns;
        c.drain_ns = cx.sizes.drain_ns;
        c.workload.rate_per_s = 5_000.0;
        c.workload.burst_factor = 1.0;
        c.node.pacing.enabled = false;
        let r = cx.record("incast", variant, &c)?;
        cx.line(row(
            "incast",
            variant,
            "loss %",
            r.metrics.loss_pct,
            Some(paper),
        ));
        incast.push(r);
    }
    cx.verdict(
        incast[1].metrics.loss_pct < incast[0].metrics.loss_pct,
        "the tree loses fewer orders than direct incast",
        "the relays' own receive buffers drop more than the root's did",
    );
    Ok(())
}

/// Pacing: loss and engine throughput by threshold T.
fn pacing(cx: &mut Campaign<'_, '_>) -> Result<(), Halt> {
    // 2. Pacing table.
    let _ = writeln!(
        cx.report,
        "\n[pacing] 10 MPs x 7K orders/s, 2 proxies, bursts double the rate: loss and engine \
         throughput"
    );
    let paper_pacing = [
        ("no pacing", None, 3.1, 78_000.0),
        ("T = 80 us", Some(80), 1.6, 76_000.0),
        ("T = 75 us", Some(75), 0.7, 62_000.0),
        ("T = 70 us", Some(70), 0.3, 34_000.0),
    ];
    let mut pacing = Vec::new();
    for (variant, threshold, loss, thpt) in paper_pacing {
        let mut c = base(cx.quick, 10);
        c.node.pacing.enabled = threshold.is_some();
        if let Some(t) = threshold {
            c.node.pacing.threshold = Duration::from_micros(t);
        }
        let r = cx.record("pacing", variant, &c)?;
        cx.line(row(
            "pacing",
            variant,
            "buffer loss %",
            buffer_loss_pct(&r),
            Some(loss),
        ));
        cx.line(row(
            "pacing",
            variant,
            "held back at proxies %",
            held_pct(&r),
            None,
        ));
        cx.line(row(
            "pacing",
            variant,
            "engine receive rate /s",
            r.metrics.engine_receive_rate,
            Some(thpt),
        ));
        let _ = writeln!(
            cx.report,
            "  {:<26} never processed {:.2}%: held at proxies {} (queued at the end, or refused \
             by a full queue), lost in a buffer on the way {} (at the root socket {}); over the \
             whole run, queued anywhere at the end {}, refused by full proxy queues {}; engine \
             rx during bursts {:.0}/s; pacing gap at end {:.0} us",
            "",
            r.metrics.loss_pct,
            r.loss.held_at_proxies,
            r.loss.buffer_lost,
            r.loss.at_root,
            r.queued_at_end,
            r.loss.proxy_queue_full,
            r.metrics.engine_receive_rate_burst,
            r.pacing_gap_us_end
        );
        pacing.push(r);
    }
    {
        let variant = "T = 70 us, futility check";
        let mut c = base(cx.quick, 10);
        c.node.pacing.futile_after = proto::pacing::PacingConfig::default().futile_after;
        let r = cx.record("pacing", variant, &c)?;
        for (metric, ours) in [
            ("buffer loss %", buffer_loss_pct(&r)),
            ("held back at proxies %", held_pct(&r)),
            ("engine receive rate /s", r.metrics.engine_receive_rate),
        ] {
            cx.line(row("pacing", variant, metric, ours, None));
        }
        let _ = writeln!(
            cx.report,
            "  {:<26} (our default pacer: increases stop when the OWD does not fall; not in \
             the verdict) pacing gap at end {:.0} us",
            "", r.pacing_gap_us_end
        );
    }
    let loss_falls = buffer_loss_pct(&pacing[0]) > buffer_loss_pct(&pacing[1])
        && buffer_loss_pct(&pacing[1]) >= buffer_loss_pct(&pacing[2])
        && buffer_loss_pct(&pacing[2]) >= buffer_loss_pct(&pacing[3]);
    let thpt_falls = pacing
        .windows(2)
        .all(|w| w[0].metrics.engine_receive_rate >= w[1].metrics.engine_receive_rate);
    cx.verdict(
        loss_falls && thpt_falls,
        "lower T: less loss, less engine throughput",
        &format!(
            "buffer loss none/80/75/70 {:.2}/{:.2}/{:.2}/{:.2}%, engine throughput \
             {:.0}/{:.0}/{:.0}/{:.0}/s; loss that pacing cannot touch happens on the hop into the proxies ({} orders at \
             T = 70), which the proxies do not pace",
            buffer_loss_pct(&pacing[0]),
            buffer_loss_pct(&pacing[1]),
            buffer_loss_pct(&pacing[2]),
            buffer_loss_pct(&pacing[3]),
            pacing[0].metrics.engine_receive_rate,
            pacing[1].metrics.engine_receive_rate,
            pacing[2].metrics.engine_receive_rate,
            pacing[3].metrics.engine_receive_rate,
            pacing[3].loss.before_layer.get(1).copied().unwrap_or(0)
        ),
    );
    Ok(())
}

/// LOQ vs SimplePQ vs FIFO by overlap ratio; returns the runs by overlap, then discipline.
fn loq(cx: &mut Campaign<'_, '_>) -> Result<Vec<Vec<InboundRun>>, Halt> {
    // 3. LOQ vs SimplePQ vs FIFO across overlap ratios.
    let _ = writeln!(
        cx.report,
        "\n[loq] 10 MPs x 7K orders/s, 2 proxies, pacing T = 70 us, bursts x2: matching rate \
         during bursts and matched-order latency, by overlap ratio"
    );
    let overlaps = [(1, 1), (1, 3), (1, 5), (1, 9), (1, 13)];
    let mut by_overlap: Vec<Vec<InboundRun>> = Vec::new();
    for overlap in overlaps {
        let mut per = Vec::new();
        for d in DISCIPLINES {
            let mut c = base(cx.quick, 10);
            c.workload.overlap = overlap;
            c.node.discipline = d;
            let variant = format!("{} 1/{}", discipline_name(d), overlap.1);
            let r = cx.record("loq", &variant, &c)?;
            let m = &r.metrics;
            let _ = writeln!(
                cx.report,
                "  {:<14} burst matching {:>9.0}/s  matched latency p50 {:>9.1} us p99 {:>9.1} us  \
                 engine rx {:>7.0}/s  never processed {:.2}%",
                variant,
                m.matching_rate_burst,
                m.matched_latency_us.p50,
                m.matched_latency_us.p99,
                m.engine_receive_rate,
                m.loss_pct
            );
            per.push(r);
        }
        let (loq, pq) = (&per[0].metrics, &per[1].metrics);
        let gain = change_pct(loq.matching_rate_burst, pq.matching_rate_burst);
        let lat50 = change_pct(loq.matched_latency_us.p50, pq.matched_latency_us.p50);
        let lat99 = change_pct(loq.matched_latency_us.p99, pq.matched_latency_us.p99);
        let v = format!("LOQ vs SimplePQ 1/{}", overlap.1);
        let at5 = overlap == (1, 5);
        cx.line(row(
            "loq",
            &v,
            "burst matching change %",
            gain,
            at5.then_some(150.0),
        ));
        cx.line(row(
            "loq",
            &v,
            "matched latency p50 change %",
            lat50,
            at5.then_some(-76.0),
        ));
        cx.line(row(
            "loq",
            &v,
            "matched latency p99 change %",
            lat99,
            at5.then_some(-99.9),
        ));
        by_overlap.push(per);
    }
    let gains: Vec<f64> = by_overlap
        .iter()
        .map(|per| {
            change_pct(
                per[0].metrics.matching_rate_burst,
                per[1].metrics.matching_rate_burst,
            )
        })
        .collect();
    let loq_wins_at_5 = gains[2] > 0.0
        && by_overlap[2][0].metrics.matched_latency_us.p50
            < by_overlap[2][1].metrics.matched_latency_us.p50;
    cx.verdict(
        loq_wins_at_5,
        "at 1/5 LOQ matches more during bursts and with lower latency than SimplePQ",
        "queues at the proxies were too short for the order of dequeueing to matter",
    );
    // "Grows": higher at the smallest overlap than at the largest, and rising over the five
    // by rank (the ends alone passed gains of 108, 141, 787, 12 and 232%).
    let trend = rank_trend(&gains);
    cx.verdict(
        gains[4] >= gains[0] && trend > 0.0,
        "LOQ's gain grows as the overlap shrinks (1/1 -> 1/13)",
        &format!(
            "gains by overlap {:?}, rank correlation with the overlap's k {trend:.2}: with few \
             critical orders the bursts' matching is bounded by how many crossing orders \
             exist, not by their order in the queue",
            gains.iter().map(|g| format!("{g:.0}%")).collect::<Vec<_>>()
        ),
    );
    let mut plot = Plot::lines(
        "Matching rate during bursts by overlap ratio",
        "overlap 1/k (k)",
        "orders matched per second of burst",
    );
    for (i, d) in DISCIPLINES.iter().enumerate() {
        let points = overlaps
            .iter()
            .zip(&by_overlap)
            .map(|(o, per)| (o.1 as f64, per[i].metrics.matching_rate_burst))
            .collect();
        plot.add(discipline_name(*d), points, false);
    }
    write(cx.out_dir, "inbound_loq_matching.svg", &plot.render())?;
    // LOQ's ~1 ms beside the others' ~200 ms: a log axis shows both.
    let mut plot = Plot::lines(
        "Matched-order latency p50 by overlap ratio",
        "overlap 1/k (k)",
        "matched-order latency p50 (ms, log scale)",
    )
    .log_y(0.01);
    for (i, d) in DISCIPLINES.iter().enumerate() {
        let points = overlaps
            .iter()
            .zip(&by_overlap)
            .map(|(o, per)| (o.1 as f64, per[i].metrics.matched_latency_us.p50 / 1e3))
            .collect();
        plot.add(discipline_name(*d), points, false);
    }
    write(cx.out_dir, "inbound_loq_latency.svg", &plot.render())?;
    Ok(by_overlap)
}

/// LOQ vs SimplePQ with many participants; returns the two runs.
fn scale(cx: &mut Campaign<'_, '_>) -> Result<Vec<InboundRun>, Halt> {
    // 4. 10 and 1000 participants, LOQ vs SimplePQ at 1/5 (same total rate).
    let _ = writeln!(
        cx.report,
        "\n[scale] {} MPs (heuristic tree), same 70K orders/s total, overlap 1/5: LOQ vs SimplePQ",
        cx.sizes.many
    );
    let mut many = Vec::new();
    for d in [Discipline::Loq, Discipline::SimplePq] {
        let mut c = base(cx.quick, cx.sizes.many);
        c.node.discipline = d;
        let variant = format!("{} MPs {}", cx.sizes.many, discipline_name(d));
        let r = cx.record("scale", &variant, &c)?;
        let m = &r.metrics;
        let _ = writeln!(
            cx.report,
            "  {:<20} burst matching {:>9.0}/s overall {:>9.0}/s  matched latency p50 {:>9.1} us  \
             never processed {:.2}%",
            variant, m.matching_rate_burst, m.matching_rate, m.matched_latency_us.p50, m.loss_pct
        );
        many.push(r);
    }
    let (loq, pq) = (&many[0].metrics, &many[1].metrics);
    let v = format!("{} MPs LOQ vs SimplePQ", cx.sizes.many);
    let lat = change_pct(loq.matched_latency_us.p50, pq.matched_latency_us.p50);
    let burst = change_pct(loq.matching_rate_burst, pq.matching_rate_burst);
    let overall = change_pct(loq.matching_rate, pq.matching_rate);
    cx.line(row(
        "scale",
        &v,
        "matched latency p50 change %",
        lat,
        Some(-98.0),
    ));
    cx.line(row(
        "scale",
        &v,
        "burst matching change %",
        burst,
        Some(86.0),
    ));
    cx.line(row(
        "scale",
        &v,
        "overall matching change %",
        overall,
        Some(10.0),
    ));
    cx.verdict(
        lat < 0.0 && burst > 0.0,
        "with 1K MPs LOQ still lowers matched latency and raises burst matching",
        "the deeper tree splits the load over many proxies, so queues (where LOQ acts) stay short",
    );
    Ok(many)
}

/// Order-matching unfairness, from the runs of [`loq`] and [`scale`].
fn fairness(
    cx: &mut Campaign<'_, '_>,
    by_overlap: &[Vec<InboundRun>],
    many: &[InboundRun],
) -> Result<(), Halt> {
    // 5. Order-matching unfairness with and without LOQ.
    let _ = writeln!(
        cx.report,
        "\n[fairness] order-matching unfairness (and CloudEx's definition)"
    );
    let ten = &by_overlap[2];
    let cases = [
        ("10 MPs LOQ", &ten[0], 5.0),
        ("10 MPs SimplePQ", &ten[1], 5.0),
        ("1K MPs LOQ", &many[0], 13.0),
        ("1K MPs SimplePQ", &many[1], 13.0),
    ];
    for (variant, r, paper) in cases {
        let variant = variant.replace("1K", &format!("{}", cx.sizes.many));
        cx.line(row(
            "fairness",
            &variant,
            "order-matching unfairness %",
            r.metrics.order_matching_unfairness_pct,
            Some(paper),
        ));
        cx.line(row(
            "fairness",
            &variant,
            "CloudEx unfairness %",
            r.metrics.cloudex_unfairness_pct,
            None,
        ));
    }
    let u = |r: &InboundRun| r.metrics.order_matching_unfairness_pct;
    // "About the same": within 2 points, or half the SimplePQ value when that is larger.
    let similar = |a: f64, b: f64| (a - b).abs() <= 2.0_f64.max(0.5 * b);
    cx.verdict(
        u(&ten[0]) < 5.0 && u(&ten[1]) < 5.0,
        "< 5% with 10 MPs, with LOQ and with SimplePQ",
        &format!(
            "LOQ {:.2}%, SimplePQ {:.2}%: at T = 70 us the proxies hold back {:.0}% / {:.0}% \
             of the orders (matched latency p50 {:.0} / {:.0} us); the two proxies' backlogs \
             differ by far more than d_s = 400 us, so one proxy's same-price orders wait while \
             the other's later ones match",
            u(&ten[0]),
            u(&ten[1]),
            held_pct(&ten[0]),
            held_pct(&ten[1]),
            ten[0].metrics.matched_latency_us.p50,
            ten[1].metrics.matched_latency_us.p50
        ),
    );
    cx.verdict(
        similar(u(&ten[0]), u(&ten[1])),
        "unchanged by LOQ with 10 MPs",
        "LOQ reorders orders of different prices, which this definition allows, but also \
         same-price orders across proxies by more than d_s absorbs, which it does not",
    );
    cx.verdict(
        similar(u(&many[0]), u(&many[1])),
        &format!("unchanged by LOQ with {} MPs", cx.sizes.many),
        &format!(
            "LOQ {:.2}% vs SimplePQ {:.2}%; matched latency p50 {:.0} vs {:.0} us: SimplePQ's \
             backlogs hold orders far longer than d_s, by different amounts at different \
             proxies, so same-price orders of different subtrees reach the engine out of \
             generation order; LOQ sends the crossing orders first and they match early",
            u(&many[0]),
            u(&many[1]),
            many[0].metrics.matched_latency_us.p50,
            many[1].metrics.matched_latency_us.p50
        ),
    );
    cx.verdict(
        u(&many[1]) >= u(&ten[1]),
        "more MPs, more unfairness",
        "with the same total rate spread over 1K MPs the tree's extra layer adds less reordering \
         than d_s absorbs",
    );
    Ok(())
}

/// The global-FIFO merge sequencer, beside the delay-based runs of [`loq`].
fn sequencer(cx: &mut Campaign<'_, '_>, by_overlap: &[Vec<InboundRun>]) -> Result<(), Halt> {
    // 6. The global-FIFO merge sequencer instead of the delay-based one.
    let _ = writeln!(
        cx.report,
        "\n[sequencer] 10 MPs, overlap 1/5: global-FIFO merge with heartbeat orders (1 ms) vs \
         delay-based d_s = 400 us"
    );
    for d in DISCIPLINES {
        let mut c = base(cx.quick, 10);
        c.node.discipline = d;
        c.node.sequencer.kind = SequencerKind::GlobalFifo;
        let variant = format!("global FIFO, {}", discipline_name(d));
        let r = cx.record("sequencer", &variant, &c)?;
        let m = &r.metrics;
        let delay_based = &by_overlap[2][DISCIPLINES.iter().position(|x| *x == d).unwrap_or(0)];
        let _ = writeln!(
            cx.report,
            "  {:<22} order-matching unfairness {:>5.2}% (delay-based {:>5.2}%)  CloudEx {:>5.2}% \
             ({:>5.2}%)  matched latency p50 {:>8.1} us ({:>8.1})  late releases {}  heartbeat \
             orders {}  skipped silent {}  never processed {:.2}% ({} of {} orders matched)",
            variant,
            m.order_matching_unfairness_pct,
            delay_based.metrics.order_matching_unfairness_pct,
            m.cloudex_unfairness_pct,
            delay_based.metrics.cloudex_unfairness_pct,
            m.matched_latency_us.p50,
            delay_based.metrics.matched_latency_us.p50,
            r.sequencer_late,
            r.sequencer_heartbeats,
            r.sequencer_released_past_silent,
            m.loss_pct,
            m.matched,
            m.sent,
        );
        let delay_based_lost = delay_based.metrics.loss_pct;
        if m.loss_pct > delay_based_lost + 10.0 {
            let _ = writeln!(
                cx.report,
                "  {:<22} (!) {:.1}% of its orders never reached the engine, against {:.1}% \
                 with the delay-based sequencer: its unfairness is over the {} that did, \
                 not a like-for-like comparison",
                "", m.loss_pct, delay_based_lost, m.reached
            );
        }
        cx.line(row(
            "sequencer",
            &variant,
            "order-matching unfairness %",
            m.order_matching_unfairness_pct,
            Some(5.0),
        ));
    }
    Ok(())
}

fn write(dir: Option<&Path>, name: &str, text: &str) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn rank_trend_is_spearmans_rank_correlation() {
        assert_eq!(rank_trend(&[1.0, 2.0, 5.0, 9.0]), 1.0);
        assert_eq!(rank_trend(&[9.0, 5.0, 2.0, 1.0]), -1.0);
        assert_eq!(rank_trend(&[3.0, 3.0, 3.0]), 0.0);
        assert_eq!(rank_trend(&[7.0]), 0.0);
        // The gains whose ends alone passed the old verdict: ranks 2, 3, 5, 1, 4.
        let trend = rank_trend(&[108.0, 141.0, 787.0, 12.0, 232.0]);
        assert!((trend - 0.2).abs() < 1e-12, "{trend}");
        // Ties take their mean rank: 1, 2.5, 2.5, 4.
        let tied = rank_trend(&[1.0, 4.0, 4.0, 8.0]);
        assert!((tied - 0.9486832980505138).abs() < 1e-12, "{tied}");
    }

    /// An empty directory of this test's own.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("jasper-inbound-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The quick campaign written into `dir` from placeholder runs, the runs `stopped` picks
    /// abandoned.
    fn with_stopped(dir: &Path, stopped: impl Fn(&InboundConfig) -> bool) -> Report {
        campaign(Some(dir), true, None, &mut |config| {
            Ok((!stopped(config)).then(InboundRun::default))
        })
        .unwrap()
    }

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    /// The experiments of the CSV's rows, in order, each once.
    fn csv_experiments(dir: &Path) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        let records = crate::report::csv_records(&read(dir, "inbound.csv"));
        for record in records.iter().skip(1) {
            // Every row has the header's fields (variants hold commas).
            assert_eq!(record.len(), 6, "{record:?}");
            let experiment = record[0].clone();
            if !seen.contains(&experiment) {
                seen.push(experiment);
            }
        }
        seen
    }

    fn json(dir: &Path) -> serde_json::Value {
        serde_json::from_str(&read(dir, "inbound.json")).unwrap()
    }

    /// Goal: `--seed` reaches every run, and the report and `inbound.json` say which seed;
    /// without it each run keeps its experiment's own.
    #[test]
    fn a_seed_given_reaches_every_run() {
        let dir = scratch("seed");
        for (seed, header) in [(Some(0x5eed), true), (None, false)] {
            let mut seeds = Vec::new();
            let report = campaign(Some(&dir), true, seed, &mut |config| {
                seeds.push(config.seed);
                Ok(Some(InboundRun::default()))
            })
            .unwrap();
            assert!(seeds.len() > 20, "{seeds:?}");
            match seed {
                Some(seed) => assert!(seeds.iter().all(|&s| s == seed), "{seeds:?}"),
                None => assert!(seeds.iter().all(|&s| s == InboundConfig::default().seed)),
            }
            assert_eq!(
                report.text.contains("every run on seed 0x5eed"),
                header,
                "{}",
                report.text
            );
            let json = json(&dir);
            assert_eq!(json["seed"].as_u64(), seed);
            for run in json["runs"].as_array().unwrap() {
                assert_eq!(run["config"]["seed"].as_u64(), Some(seeds[0]));
            }
        }
    }

    #[test]
    fn a_campaign_whose_runs_all_end_has_every_experiment() {
        let dir = scratch("whole");
        let report = with_stopped(&dir, |_| false);
        assert!(report.not_run.is_empty());
        assert!(!report.text.contains("Interrupted"), "{}", report.text);
        for name in EXPERIMENTS {
            assert!(report.text.contains(&format!("\n[{name}]")), "{name}");
        }
        // Every experiment has rows of its own.
        assert_eq!(csv_experiments(&dir), EXPERIMENTS);
        assert!(json(&dir).get("not_run").is_none());
        for name in INBOUND_OUTPUTS {
            assert!(dir.join(name).exists(), "{name}");
        }
    }

    #[test]
    fn a_stopped_run_leaves_out_its_experiment_and_those_built_on_it() {
        // Stop the 1,000-participant runs: scale goes, and fairness, which compares them with
        // the 10-participant runs; the sequencer experiment after them still comes.
        let dir = scratch("scale");
        let report = with_stopped(&dir, |c| c.plan.participants > 10);
        assert_eq!(report.not_run, ["scale", "fairness"]);
        assert!(
            report.text.contains(
                "\nInterrupted (Ctrl-C): 4 of 6 experiments ran whole. Not run: scale, \
                 fairness.\n"
            ),
            "{}",
            report.text
        );
        assert!(!report.text.contains("[scale]") && !report.text.contains("[fairness]"));
        assert!(report.text.contains("\n[sequencer]"), "{}", report.text);
        assert_eq!(
            csv_experiments(&dir),
            ["incast", "pacing", "loq", "sequencer"]
        );
        // The verdicts of the experiments that ran, and none of those left out.
        let judged: Vec<&str> = report.verdicts.iter().map(|v| v.experiment).collect();
        assert_eq!(judged, ["incast", "pacing", "loq", "loq"]);
        let json = json(&dir);
        assert_eq!(json["verdicts"].as_array().unwrap().len(), judged.len());
        assert_eq!(json["not_run"], serde_json::json!(["scale", "fairness"]));
        let runs = json["runs"].as_array().unwrap();
        assert!(runs.iter().all(|r| r["experiment"] != "scale"));
        assert!(runs.iter().any(|r| r["experiment"] == "sequencer"));
        // The LOQ experiment ran whole, so its plots are there.
        assert!(dir.join("inbound_loq_latency.svg").exists());
    }

    #[test]
    fn an_experiment_stopped_part_way_writes_nothing_of_its_own() {
        // One LOQ run of five overlaps stopped: loq goes, with its plots, and both
        // experiments read from its runs.
        let dir = scratch("loq");
        let report = with_stopped(&dir, |c| c.workload.overlap == (1, 9));
        assert_eq!(report.not_run, ["loq", "fairness", "sequencer"]);
        assert!(!report.text.contains("[loq]"), "{}", report.text);
        assert!(
            !report.text.contains("LOQ vs SimplePQ 1/1 "),
            "{}",
            report.text
        );
        assert!(report.text.contains("\n[scale]"), "{}", report.text);
        assert_eq!(csv_experiments(&dir), ["incast", "pacing", "scale"]);
        assert!(!dir.join("inbound_loq_latency.svg").exists());
        assert!(!dir.join("inbound_loq_matching.svg").exists());
        let json = json(&dir);
        let runs = json["runs"].as_array().unwrap();
        assert!(runs.iter().all(|r| r["experiment"] != "loq"));
    }

    #[test]
    fn a_campaign_stopped_before_it_starts_clears_old_results_and_runs_nothing() {
        let dir = scratch("at-once");
        for name in INBOUND_OUTPUTS {
            std::fs::write(dir.join(name), "an earlier campaign's").unwrap();
        }
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let printed = paper_inbound(&dir, true, None, &AtomicBool::new(true)).unwrap();
        assert!(printed.interrupted);
        assert!(
            printed.text.contains(
                "Interrupted (Ctrl-C): 0 of 6 experiments ran whole. Not run: incast, pacing, \
                 loq, scale, fairness, sequencer."
            ),
            "{}",
            printed.text
        );
        assert_eq!(
            read(&dir, "inbound.csv"),
            "experiment,variant,metric,ours,paper,ratio\n"
        );
        assert_eq!(json(&dir)["runs"], serde_json::json!([]));
        assert!(!dir.join("inbound_loq_latency.svg").exists());
        assert!(!dir.join("inbound_loq_matching.svg").exists());
        assert_eq!(read(&dir, "notes.txt"), "mine");
    }
}
