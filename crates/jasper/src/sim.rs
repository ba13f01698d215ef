//! `jasper sim`: the deterministic simulator of the real nodes (`sim` crate).
//!
//! - `jasper sim run`: one outbound run from a config file and/or flags, with a progress bar
//!   on stderr, a summary table (DESIGN.md §5 metrics), the simulator's speed (wall time,
//!   events and handler calls per second, peak RSS) and an output directory (summary JSON,
//!   CDF CSV, SVG plots of the OML and DWS CDFs). Issue #5's goal case is
//!   `jasper sim run -n 1000 -H 2 --rate 5000 --duration 10 --model aws_c5`
//!   (add `--invariants-every 64` to sample the nodes' invariant checks as the experiments do).
//!   Faults: `--kill NODE@S`, `--restart NODE@S` (a killed proxy or gateway back as a new
//!   process), `--pause NODE@FROM-UNTIL`, `--clog SRC:DST@FROM-UNTIL`,
//!   `--partition IDS:IDS@FROM-UNTIL`
//!   (seconds after measuring starts), or `[[faults]]` in the config file
//!   (`sim::scenario::Fault`). Ctrl-C while measuring stops the run there and reports it whole
//!   over the packets published so far (exactly the run asked for that long: faults due after
//!   the stop do not happen), labelled "interrupted", with exit status 130; a second Ctrl-C
//!   kills.
//! - `jasper sim paper-outbound`: the paper's outbound experiments beside its figures. Ctrl-C
//!   abandons the cases running and reports those that ran whole (exit status 130).
//! - `jasper sim paper-inbound`: the paper's inbound experiments (pacing, LOQ, fairness).
//!   Ctrl-C abandons the runs and reports the experiments whose runs all ended (exit status
//!   130).

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use proto::plan::Shape;
use sim::NetModel;
use sim::experiments::Printed;
use sim::scenario::{Burst, Ended, Fault, Outbound, OutboundConfig};

/// Arguments of `jasper sim`.
#[derive(Debug, Args)]
pub(crate) struct SimArgs {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// One outbound run: market data from the root through the tree to every gateway.
    Run(Box<RunArgs>),
    /// Rerun the paper's outbound experiments and print each beside the paper's figure
    /// (Ctrl-C reports the cases that ran whole).
    PaperOutbound(PaperArgs),
    /// Rerun the paper's inbound experiments (pacing, LOQ, order fairness); Ctrl-C reports
    /// the experiments whose runs all ended.
    PaperInbound(PaperArgs),
}

#[derive(Debug, Args)]
struct PaperArgs {
    /// Short runs and smaller N: seconds instead of minutes (on 2 cores, outbound ~30-40 s
    /// against ~3 min, inbound ~30 s against ~2 min).
    #[arg(long)]
    quick: bool,
    /// Output directory (JSON, CSV, SVG).
    #[arg(long, default_value = "sim-out")]
    out: PathBuf,
    /// Seed for every case instead of the campaign's own (decimal or 0x-hex), to see which
    /// results hold across seeds. Several (`--seed 3,7,0x5eed0002`) run the campaign on each,
    /// as --seeds does on consecutive ones.
    #[arg(long, value_parser = parse_seed_arg, value_delimiter = ',')]
    seed: Vec<u64>,
    /// Rerun the campaign on this many consecutive seeds (from --seed, or the campaign's own)
    /// and judge each verdict over them: outbound on the median of its ratios (the sweep in
    /// OUT/seeds.txt), inbound on most seeds (OUT/inbound-seeds.txt); each seed's report
    /// goes to OUT/seed-0x…/.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    seeds: Option<u32>,
    /// Run only this case (repeatable, or comma-separated; `*` matches any run of characters),
    /// e.g. `--case n100_h0,n100_h1` for the hedging figure or `--case 'n1000_*'`: the figures
    /// and verdicts those cases complete are reported, and the report names what it left out
    /// (outbound only; an entry that selects no case of the mode is refused with the list of
    /// its cases).
    #[arg(long = "case", value_name = "NAME", value_delimiter = ',')]
    cases: Vec<String>,
    /// Print the campaign's cases (the names --case takes, each with its N, tree, H, hold,
    /// model and rate) and run nothing (outbound only; with --quick, the quick campaign's).
    #[arg(long, conflicts_with_all = ["seed", "seeds", "cases"])]
    list: bool,
}

/// Arguments of `jasper sim run`; flags override the config file.
#[derive(Debug, Args)]
struct RunArgs {
    /// A TOML file with any fields of the run's configuration (`sim::scenario::OutboundConfig`:
    /// seed, plan, node, model, rate_mps, burst, duration_ns, ...).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Number of market participants.
    #[arg(short = 'n', long)]
    participants: Option<u32>,
    /// Hops from the root to a gateway (with --fanout; default: the F/D heuristic).
    #[arg(long, requires = "fanout")]
    depth: Option<u32>,
    /// Children per node (with --depth).
    #[arg(long, requires = "depth")]
    fanout: Option<u32>,
    /// Sibling hedging factor H (default 1).
    #[arg(long = "hedge", short = 'H')]
    hedge: Option<u32>,
    /// Turn round-robin packet spraying off (a fixed tree).
    #[arg(long)]
    no_rrps: bool,
    /// Two gateways per participant.
    #[arg(long)]
    receiver_hedging: bool,
    /// Release on receipt instead of holding until the deadline.
    #[arg(long)]
    no_hold: bool,
    /// What each deadline adds to the max reported OWD, µs (default: the config's, 25 as in
    /// DESIGN.md; the paper's 5K msgs/s runs used 10): more holds longer and leaves fewer
    /// copies late.
    #[arg(long, value_name = "US")]
    margin: Option<f64>,
    /// Gateways that share one VM (the paper's logical receivers: it ran N = 1000 as 100 VMs
    /// of 10); siblings in the tree share a VM's network path, pauses and clock.
    #[arg(long, value_name = "K")]
    gateways_per_vm: Option<u32>,
    /// Direct unicast from the root to every gateway (depth 1), no proxies (so no hedging
    /// and no spraying: `-H` and `--no-rrps` are refused with it).
    #[arg(long, conflicts_with_all = ["depth", "fanout", "hedge", "no_rrps"])]
    direct: bool,
    /// Market-data messages per second outside bursts.
    #[arg(long)]
    rate: Option<f64>,
    /// Rate multiplier during bursts (with --burst-period and --burst-len).
    #[arg(long)]
    burst_factor: Option<f64>,
    /// Time between burst starts, ms (default 50, or the config file's bursts'); needs
    /// --burst-factor or bursts in the config file.
    #[arg(long)]
    burst_period: Option<f64>,
    /// Length of a burst, ms (default 2, or the config file's bursts'); needs --burst-factor
    /// or bursts in the config file.
    #[arg(long)]
    burst_len: Option<f64>,
    /// Measured simulated time, seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Simulated time before measuring, seconds (default: the config's; without a config, long
    /// enough for clock sync to settle at this N: 0.3 s, 0.6 s from N = 1000, 2 s from
    /// N = 5000).
    #[arg(long)]
    warmup: Option<f64>,
    /// Network model: a preset (aws_c5, gcp_c2d, appendix_c, ideal, ...) or a TOML file.
    #[arg(long)]
    model: Option<String>,
    /// Probability that a copy is lost in flight (overrides the model's `loss`), e.g. 0.01.
    #[arg(long, value_parser = crate::up::parse_loss)]
    loss: Option<f64>,
    /// Seed (decimal or 0x-hex; default: $SIM_SEED, else the config's).
    #[arg(long)]
    seed: Option<String>,
    /// Check each node's invariants after every this many of its handlers (default: the
    /// config's, 1 = after every handler).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    invariants_every: Option<u32>,
    /// Threads to split the run over (default: the config's, 1). A run is a function of the
    /// seed, the configuration and the thread count: rerun with the same --threads.
    #[arg(long)]
    threads: Option<u32>,
    /// Kill a proxy or gateway while measuring: NODE@SECONDS after measuring starts, e.g.
    /// `--kill 3@0.1` (repeatable; the run's first line gives the plan's node ids).
    #[arg(long, value_name = "NODE@S", value_parser = parse_kill)]
    kill: Vec<Fault>,
    /// Start a proxy or gateway killed with --kill again, as a new process (fresh state, a
    /// clock that has not synced; a gateway gets a book snapshot first and counts in the
    /// figures again from the root's next packet after its first release): NODE@SECONDS after
    /// measuring starts (runs on one thread).
    #[arg(long, value_name = "NODE@S", value_parser = parse_restart)]
    restart: Vec<Fault>,
    /// Pause a node (a descheduled VM): NODE@FROM-UNTIL, seconds after measuring starts
    /// (repeatable).
    #[arg(long, value_name = "NODE@FROM-UNTIL", value_parser = parse_pause)]
    pause: Vec<Fault>,
    /// Clog the link SOURCE -> TARGET (copies wait for the end): SOURCE:TARGET@FROM-UNTIL,
    /// seconds after measuring starts (repeatable).
    #[arg(long, value_name = "SRC:DST@FROM-UNTIL", value_parser = parse_clog)]
    clog: Vec<Fault>,
    /// Partition two sets of nodes (copies between them are dropped, both ways):
    /// SIDE:SIDE@FROM-UNTIL, seconds after measuring starts, each side node ids and ranges
    /// separated by commas, e.g. `--partition 0:1-3@0.1-0.2` cuts the root off proxies 1 to
    /// 3 (repeatable).
    #[arg(long, value_name = "IDS:IDS@FROM-UNTIL", value_parser = parse_partition)]
    partition: Vec<Fault>,
    /// Run even if the memory estimate says the run will not fit (the estimate is 0.93-1.25x
    /// the peaks measured; a run that does not fit is killed for memory or swaps).
    #[arg(long)]
    no_memory_check: bool,
    /// Output directory: summary (JSON, text), CDFs (CSV, SVG), and `config.toml`, the whole
    /// configuration, which `--config` reruns.
    #[arg(long, default_value = "sim-out")]
    out: PathBuf,
}

/// The plan's node ids by layer, for naming fault targets: "root 0; layer 1 proxies 1-10;
/// gateways 11-110".
fn layout(plan: &proto::plan::Plan) -> String {
    let range = |r: std::ops::Range<u32>| match r.len() {
        0 => "none".to_string(),
        1 => r.start.to_string(),
        _ => format!("{}-{}", r.start, r.end - 1),
    };
    let mut parts = vec![format!("root {}", plan.root().0)];
    for layer in 1..plan.depth() {
        parts.push(format!(
            "layer {layer} proxies {}",
            range(plan.layer(layer))
        ));
    }
    parts.push(format!("gateways {}", range(plan.gateways())));
    parts.join("; ")
}

/// Where the tree is too narrow for the asked-for H: a node has at most as many parents as
/// the layer above it has proxies, so H is at most that width less one
/// ([`proto::plan::Plan::hedge_at`]); a tree of depth 1 has no proxies to hedge, which is
/// said only of an H the user gave (`-H`), not of the default's on a direct run. `None` when
/// H holds at every layer of proxies (the root's single copy to each child is no cap).
pub(crate) fn capped_hedge(plan: &proto::plan::Plan, given: bool) -> Option<String> {
    let asked = plan.config().hedge;
    if asked > 0 && plan.depth() == 1 && given {
        return Some(format!(
            "H = {asked} has no effect: a tree of depth 1 has no proxies, the root sends to \
             every gateway itself"
        ));
    }
    let capped: Vec<String> = (1..plan.depth())
        .filter(|&layer| plan.hedge_at(layer) < asked)
        .map(|layer| {
            format!(
                "H = {} below layer {layer} ({} proxies)",
                plan.hedge_at(layer),
                plan.layer(layer).len()
            )
        })
        .collect();
    (!capped.is_empty()).then(|| {
        format!(
            "H = {asked} asks for more parents than the tree has: {}",
            capped.join(", ")
        )
    })
}

/// `NODE@REST`: the node id and the rest.
fn split_at_sign<'a>(text: &'a str, form: &str) -> Result<(&'a str, &'a str), String> {
    text.split_once('@')
        .ok_or_else(|| format!("{text:?}: expected {form}"))
}

fn parse_id(text: &str) -> Result<u32, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a node id"))
}

/// Seconds after measuring starts, as nanoseconds (finite, non-negative, under a day).
fn parse_offset(text: &str) -> Result<u64, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a time in seconds"))?;
    if !(0.0..=86_400.0).contains(&seconds) {
        return Err(format!("{text:?}: a time from 0 to 86400 s"));
    }
    Ok((seconds * 1e9).round() as u64)
}

/// `FROM-UNTIL` in seconds.
fn parse_span(text: &str) -> Result<(u64, u64), String> {
    // The first '-' that is no exponent's sign (`1e-3-2e-3`).
    let bytes = text.as_bytes();
    let dash = (1..bytes.len())
        .find(|&i| bytes[i] == b'-' && !matches!(bytes[i - 1], b'e' | b'E'))
        .ok_or_else(|| format!("{text:?}: expected FROM-UNTIL in seconds"))?;
    Ok((
        parse_offset(&text[..dash])?,
        parse_offset(&text[dash + 1..])?,
    ))
}

pub(crate) fn parse_kill(text: &str) -> Result<Fault, String> {
    let (node, at) = split_at_sign(text, "NODE@SECONDS")?;
    Ok(Fault::Kill {
        node: parse_id(node)?,
        at_ns: parse_offset(at)?,
    })
}

fn parse_restart(text: &str) -> Result<Fault, String> {
    let (node, at) = split_at_sign(text, "NODE@SECONDS")?;
    Ok(Fault::Restart {
        node: parse_id(node)?,
        at_ns: parse_offset(at)?,
    })
}

fn parse_pause(text: &str) -> Result<Fault, String> {
    let (node, span) = split_at_sign(text, "NODE@FROM-UNTIL")?;
    let (from_ns, until_ns) = parse_span(span)?;
    Ok(Fault::Pause {
        node: parse_id(node)?,
        from_ns,
        until_ns,
    })
}

/// `A:B@FROM-UNTIL`: A, B and the span in nanoseconds.
fn split_pair_span<'a>(text: &'a str, form: &str) -> Result<(&'a str, &'a str, u64, u64), String> {
    let (pair, span) = split_at_sign(text, form)?;
    let (a, b) = pair
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: expected {form}"))?;
    let (from_ns, until_ns) = parse_span(span)?;
    Ok((a, b, from_ns, until_ns))
}

fn parse_clog(text: &str) -> Result<Fault, String> {
    let (source, target, from_ns, until_ns) = split_pair_span(text, "SOURCE:TARGET@FROM-UNTIL")?;
    Ok(Fault::Clog {
        source: parse_id(source)?,
        target: parse_id(target)?,
        from_ns,
        until_ns,
    })
}

fn parse_partition(text: &str) -> Result<Fault, String> {
    let (side_a, side_b, from_ns, until_ns) = split_pair_span(text, "IDS:IDS@FROM-UNTIL")?;
    Ok(Fault::Partition {
        side_a: parse_ids(side_a)?,
        side_b: parse_ids(side_b)?,
        from_ns,
        until_ns,
    })
}

/// The most node ids one side of `--partition` names: more than the largest plan has.
const PARTITION_SIDE_MAX: usize = 1 << 22;

/// Node ids and inclusive ranges separated by commas: `0`, `1-3,7`.
fn parse_ids(text: &str) -> Result<Vec<u32>, String> {
    let mut ids = Vec::new();
    for part in text.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (parse_id(first)?, parse_id(last)?),
            None => {
                let id = parse_id(part)?;
                (id, id)
            }
        };
        if first > last {
            return Err(format!("{part:?}: a range runs from low to high"));
        }
        if ids.len() + (last - first) as usize >= PARTITION_SIDE_MAX {
            return Err(format!("{text:?}: more than {PARTITION_SIDE_MAX} nodes"));
        }
        ids.extend(first..=last);
    }
    Ok(ids)
}

pub(crate) fn run(args: &SimArgs) -> anyhow::Result<()> {
    match &args.command {
        SimCommand::Run(run) => run_one(run),
        SimCommand::PaperOutbound(paper) if paper.list => {
            print!("{}", sim::experiments::list_cases(paper.quick));
            Ok(())
        }
        SimCommand::PaperOutbound(paper) => {
            let names: Vec<&str> = paper.cases.iter().map(String::as_str).collect();
            let only = (!names.is_empty()).then_some(&names[..]);
            // Ctrl-C (or SIGTERM) abandons the cases running and reports those that ran
            // whole; a second one kills at once.
            let stop = net::stop_on_first_signal().context("catching Ctrl-C")?;
            let first = paper.seed.first().copied();
            let printed = match paper.sweep(sim::experiments::SEED)? {
                Some(seeds) => sim::experiments::paper_outbound_sweep(
                    &paper.out,
                    paper.quick,
                    &seeds,
                    only,
                    stop,
                ),
                None => {
                    sim::experiments::paper_outbound(&paper.out, paper.quick, first, only, stop)
                }
            }
            .map_err(anyhow::Error::msg)?;
            report_campaign(&printed, &paper.out, "cases")
        }
        SimCommand::PaperInbound(paper) => {
            if !paper.cases.is_empty() || paper.list {
                bail!(
                    "--case and --list are for paper-outbound: the inbound campaign runs as a \
                     whole"
                );
            }
            // Ctrl-C (or SIGTERM) abandons the runs and reports the experiments that ran
            // whole; a second one kills at once.
            let stop = net::stop_on_first_signal().context("catching Ctrl-C")?;
            let printed = match paper.sweep(sim::inbound::InboundConfig::default().seed)? {
                Some(seeds) => {
                    sim::inbound::sweep::paper_inbound_sweep(&paper.out, paper.quick, &seeds, stop)
                }
                None => sim::inbound::paper::paper_inbound(
                    &paper.out,
                    paper.quick,
                    paper.seed.first().copied(),
                    stop,
                ),
            }
            .map_err(anyhow::Error::msg)?;
            report_campaign(&printed, &paper.out, "experiments")
        }
    }
}

impl PaperArgs {
    /// The seeds of a sweep (`--seeds`, or several after `--seed`), or `None` for one
    /// campaign. `own`: the campaign's own seed, where `--seeds` starts without `--seed`.
    fn sweep(&self, own: u64) -> anyhow::Result<Option<Vec<u64>>> {
        Ok(match (self.seeds, &self.seed[..]) {
            (Some(count), [_, _, ..]) => bail!(
                "--seeds {count} runs consecutive seeds from one --seed; give either one seed \
                 and --seeds, or the list of seeds"
            ),
            (Some(count), first) => Some(
                sim::experiments::consecutive_seeds(first.first().copied().unwrap_or(own), count)
                    .map_err(anyhow::Error::msg)?,
            ),
            (None, [_, _, ..]) => Some(self.seed.clone()),
            (None, _) => None,
        })
    }
}

/// Prints a campaign's report and where it went; if a stop cut it short, says so and exits
/// [`INTERRUPTED`]. `units`: what the report is made of ("cases", "experiments").
fn report_campaign(printed: &Printed, out: &Path, units: &str) -> anyhow::Result<()> {
    println!("{}", printed.text);
    println!("written to {}", out.display());
    if printed.interrupted {
        std::io::stdout().flush().context("writing the report")?;
        eprintln!(
            "interrupted: the report covers only the {units} that ran whole (it says which did \
             not)"
        );
        std::process::exit(INTERRUPTED);
    }
    Ok(())
}

fn model(spec: &str) -> anyhow::Result<NetModel> {
    if let Some(model) = NetModel::preset(spec) {
        return Ok(model);
    }
    let path = Path::new(spec);
    if !path.exists() {
        bail!(
            "--model {spec}: not a preset ({}) and not a file",
            NetModel::PRESETS.join(", ")
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {spec}"))?;
    NetModel::from_toml(&text).map_err(|e| anyhow::anyhow!("{spec}: {e}"))
}

fn config(args: &RunArgs) -> anyhow::Result<OutboundConfig> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<OutboundConfig>(&text)
                .with_context(|| format!("parsing {}", path.display()))?
        }
        None => OutboundConfig::default(),
    };
    if let Some(n) = args.participants {
        config.plan.participants = n;
    }
    if let (Some(depth), Some(fanout)) = (args.depth, args.fanout) {
        config.plan.shape = Shape::Explicit { depth, fanout };
    }
    if let Some(h) = args.hedge {
        config.plan.hedge = h;
    }
    config.plan.rrps &= !args.no_rrps;
    config.plan.receiver_hedging |= args.receiver_hedging;
    if args.direct {
        // The root sends to every gateway: two per participant with receiver hedging.
        let per_participant = if config.plan.receiver_hedging { 2 } else { 1 };
        config.plan.shape = Shape::Explicit {
            depth: 1,
            fanout: config.plan.participants.saturating_mul(per_participant),
        };
    }
    config.node.hold_and_release &= !args.no_hold;
    if let Some(us) = args.margin {
        let margin = std::time::Duration::from_nanos(nanos("--margin", us, 1e3)?);
        // Checked here to name the flag (the config's check names `node.owd.margin`).
        if margin > proto::owd::MARGIN_MAX {
            bail!(
                "--margin {us} µs is over the {} µs a deadline may add",
                proto::owd::MARGIN_MAX.as_micros()
            );
        }
        config.node.owd.margin = margin;
    }
    if let Some(k) = args.gateways_per_vm {
        config.gateways_per_vm = k;
    }
    if let Some(rate) = args.rate {
        // Checked here to name the flag (the run's check names `rate_mps`).
        let max = sim::scenario::RATE_MPS_MAX;
        if !(rate.is_finite() && rate > 0.0 && rate <= max) {
            bail!("--rate {rate} is not a rate above 0 and at most {max} messages per second");
        }
        config.rate_mps = rate;
    }
    if let Some(factor) = args.burst_factor {
        config.burst = Some(Burst {
            factor,
            ..config.burst.unwrap_or(Burst {
                factor,
                every_ns: 50_000_000,
                length_ns: 2_000_000,
            })
        });
    }
    match config.burst.as_mut() {
        Some(burst) => {
            if let Some(ms) = args.burst_period {
                burst.every_ns = nanos("--burst-period", ms, 1e6)?;
            }
            if let Some(ms) = args.burst_len {
                burst.length_ns = nanos("--burst-len", ms, 1e6)?;
            }
        }
        None if args.burst_period.is_some() || args.burst_len.is_some() => {
            bail!("--burst-period and --burst-len shape bursts: give --burst-factor too");
        }
        None => {}
    }
    if let Some(seconds) = args.duration {
        config.duration_ns = nanos("--duration", seconds, 1e9)?;
        if config.duration_ns == 0 {
            bail!("--duration must be at least a nanosecond, got {seconds} s");
        }
    }
    if args.config.is_none() {
        config.warmup_ns = sim::scenario::warmup_ns_for(config.plan.participants);
    }
    if let Some(seconds) = args.warmup {
        config.warmup_ns = nanos("--warmup", seconds, 1e9)?;
    }
    if let Some(every) = args.invariants_every {
        config.invariants_every = every;
    }
    if let Some(spec) = &args.model {
        config.model = model(spec)?;
    }
    if let Some(loss) = args.loss {
        config.model.loss = loss;
    }
    if let Some(threads) = args.threads {
        if !(1..=sim::runtime::SHARDS_MAX as u32).contains(&threads) {
            bail!(
                "--threads must be between 1 and {}, got {threads}",
                sim::runtime::SHARDS_MAX
            );
        }
        config.threads = threads;
    }
    config.seed = match &args.seed {
        Some(text) => sim::parse_seed(text).with_context(|| format!("bad seed {text:?}"))?,
        None => sim::try_seed_from_env(config.seed).map_err(anyhow::Error::msg)?,
    };
    config.faults.extend(
        args.kill
            .iter()
            .chain(&args.restart)
            .chain(&args.pause)
            .chain(&args.clog)
            .chain(&args.partition)
            .cloned(),
    );
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid run: {e}"))?;
    Ok(config)
}

/// A flag's duration, `value` in units of `unit` nanoseconds, as whole nanoseconds (rounded).
/// Refused: negative or not finite, or beyond a year, which no run needs and which would
/// otherwise saturate (shorter limits of a field are [`OutboundConfig::validate`]'s).
fn nanos(flag: &str, value: f64, unit: f64) -> anyhow::Result<u64> {
    if !(value.is_finite() && value >= 0.0) {
        bail!("{flag} must be a non-negative duration, got {value}");
    }
    let ns = (value * unit).round();
    if ns > crate::up::SECONDS_MAX * 1e9 {
        // `{value:e}`: 1e300 printed in full is three hundred digits.
        bail!("{flag} {value:e} is over a year");
    }
    Ok(ns as u64)
}

fn run_one(args: &RunArgs) -> anyhow::Result<()> {
    let config = config(args)?;
    let plan = proto::plan::Plan::new(&config.plan).map_err(anyhow::Error::msg)?;
    if !args.no_memory_check {
        fits_in_memory(&config, &plan)?;
    }
    // A tree of depth 1 has no proxies: no hedging, no spraying, whatever the config says.
    let (hedge, rrps) = match plan.depth() {
        1 => ("-".to_string(), "-".to_string()),
        _ => (config.plan.hedge.to_string(), config.plan.rrps.to_string()),
    };
    let label = format!(
        "N={} <{},{}>{} H={hedge} rrps={rrps} rh={} hold={} rate={}",
        config.plan.participants,
        plan.depth(),
        plan.fanout(),
        match config.plan.shape {
            Shape::Heuristic => " (heuristic)",
            Shape::Explicit { .. } if plan.depth() == 1 => " (direct)",
            Shape::Explicit { .. } => "",
        },
        config.plan.receiver_hedging,
        config.node.hold_and_release,
        config.rate_mps
    );
    let seed = config.seed;
    let threads = config.threads;
    // The whole configuration, flags and file and defaults resolved: `--config` on it
    // alone reruns this run (the same trace).
    let resolved = toml::to_string(&config).context("writing the run's configuration")?;
    let mut outbound = Outbound::new(config).map_err(anyhow::Error::msg)?;
    // Before the run, so that an output directory that cannot be made fails at once.
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    // An earlier run's results would sit beside this run's configuration.
    sim::report::remove_outputs(&args.out, sim::report::RUN_OUTPUTS)
        .with_context(|| format!("clearing {}", args.out.display()))?;
    let config_path = args.out.join("config.toml");
    // Written beside and renamed over it: a run killed while writing left a cut file, and
    // `--config` on it reran a run with the cut fields at their defaults, without a word.
    let partial = args.out.join("config.toml.partial");
    std::fs::write(
        &partial,
        format!(
            "# jasper sim run's whole configuration; `jasper sim run --config {}` reruns it\n{resolved}",
            config_path.display()
        ),
    )
    .and_then(|()| std::fs::rename(&partial, &config_path))
    .with_context(|| format!("writing {}", config_path.display()))?;
    if outbound.sim.shard_count() < threads as usize {
        if outbound
            .config
            .faults
            .iter()
            .any(|fault| matches!(fault, Fault::Restart { .. }))
        {
            eprintln!(
                "note: a restart swaps a node's state mid-run, which a run split over threads \
                 cannot do: one thread"
            );
        } else {
            eprintln!(
                "note: this network model has no lookahead (no send or receive cost, no delay \
                 floor), so the run cannot be split: one thread"
            );
        }
    }
    let cores = sim::available_cores();
    if outbound.sim.shard_count() > cores {
        eprintln!(
            "note: {} threads on {cores} core(s): the same run as on a bigger machine, only \
             slower (the threads take turns)",
            outbound.sim.shard_count()
        );
    }
    eprintln!(
        "{label}: {} nodes, seed {seed:#x}, {} thread(s) (rerun with SIM_SEED={seed:#x} --threads {})",
        outbound.sim.node_count(),
        outbound.sim.shard_count(),
        outbound.sim.shard_count(),
    );
    eprintln!("  nodes: {}", layout(&outbound.plan));
    if let Some(note) = capped_hedge(&outbound.plan, args.hedge.is_some()) {
        eprintln!("  note: {note}");
    }
    if args.no_rrps && outbound.plan.depth() == 1 {
        eprintln!(
            "  note: --no-rrps has no effect: a tree of depth 1 has no proxies to spray across"
        );
    }
    for fault in &outbound.config.faults {
        eprintln!("  fault: {fault}");
    }
    // The progress line reports wall time; the simulation itself never reads a clock.
    #[allow(
        clippy::disallowed_methods,
        reason = "wall time for the progress line only"
    )]
    let wall = std::time::Instant::now();
    // A bar redrawn in place on a terminal; into a log, one line every 10%.
    let terminal = std::io::stderr().is_terminal();
    let step = if terminal { 1 } else { 10 };
    let mut last = -1i64;
    let mut measuring = false;
    // Ctrl-C (or SIGTERM) stops the run where it is and reports what it measured; a second
    // one kills at once.
    let stop = net::stop_on_first_signal().context("catching Ctrl-C")?;
    let ended = outbound.run_stoppable(&mut |at| {
        let fraction = at.fraction;
        if at.measuring && !measuring {
            measuring = true;
            // On its own line, where a terminal's bar would overwrite it.
            eprintln!(
                "{}measuring from {:.2} s simulated (Ctrl-C stops the run and reports what it measured)",
                if terminal { "\r\x1b[K" } else { "" },
                at.now_ns as f64 / 1e9
            );
            if terminal {
                // Redraw the bar below the line.
                last = -1;
            }
        }
        let percent = (fraction * 100.0) as i64 / step * step;
        if percent != last {
            last = percent;
            let wall_s = wall.elapsed().as_secs_f64();
            if terminal {
                let filled = ((fraction * 40.0) as usize).min(40);
                eprint!(
                    "\r[{}{}] {percent:>3}%  {wall_s:.1}s wall",
                    "#".repeat(filled),
                    " ".repeat(40 - filled),
                );
                let _ = std::io::stderr().flush();
            } else {
                eprintln!("{percent:>3}%  {wall_s:.1}s wall");
            }
        }
        sim::scenario::unless_stopped(stop)
    });
    if terminal {
        eprintln!();
    }
    let duration_s = outbound.config.duration_ns as f64 / 1e9;
    let label = match ended {
        Ended::Complete => label,
        Ended::Stopped { measured_ns } => {
            format!(
                "{label} (interrupted: {:.3} of {duration_s} s measured)",
                measured_ns as f64 / 1e9
            )
        }
        Ended::StoppedWarmingUp => {
            eprintln!(
                "interrupted while warming up, {:.2} s simulated: nothing was measured, so nothing \
                 is written but {}",
                outbound.sim.now() as f64 / 1e9,
                config_path.display()
            );
            std::process::exit(INTERRUPTED);
        }
    };
    let summary = sim::report::write_dir(&outbound.sim, &label, &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    let t = &summary.truth;
    let x = &summary.exchange;
    let hold = outbound.config.node.hold_and_release;
    let (oml, dws) = if hold {
        (&t.oml_release, &x.dws_release)
    } else {
        (&t.oml_receipt, &t.dws_receipt)
    };
    println!("{label}");
    println!(
        "  {:<28} {:>9} {:>9} {:>9}",
        "metric (µs)", "p50", "p90", "p99"
    );
    // One row of p50, p90 and p99, its label indented by `indent` (DWS leaves p90 out); the
    // label column is 30 wide at either indent.
    let row = |indent: &str, name: &str, p: &sim::report::Percentiles, p90: bool| {
        println!(
            "{:<30} {:>9} {:>9} {:>9}",
            format!("{indent}{name}"),
            p.cell(p.p50),
            if p90 { p.cell(p.p90) } else { String::new() },
            p.cell(p.p99)
        );
    };
    row(
        "  ",
        if hold { "OML (at release)" } else { "OML" },
        oml,
        true,
    );
    row(
        "  ",
        if hold {
            "DWS (at release, exch)"
        } else {
            "DWS"
        },
        dws,
        false,
    );
    row("  ", "holding time", &t.holding, true);
    if summary.complete_messages == 0 {
        println!("  no message reached every receiver: OML, DWS and P(F) are undefined (see loss)");
    }
    println!(
        "  P(F){} {} (exchange time), {} (true time); loss {:.4}% ({}worst receiver {:.4}%); MPS {:.0}",
        if summary.participants.is_some() {
            " over every gateway"
        } else {
            ""
        },
        sim::report::share(x.fairness_percent, summary.complete_messages),
        sim::report::share(t.fairness_percent, summary.complete_messages),
        summary.loss_percent,
        summary.lost_to_kills_note(),
        summary.receiver_loss_percent_max,
        summary.mps
    );
    if let Some(mp) = &summary.participants {
        // With receiver hedging the rows above are over every gateway, the slower twin
        // included; what a participant sees is the first of its two.
        println!("  per participant (each acts on the first of its two gateways):");
        if hold {
            row("    ", "OML (at release)", &mp.oml_release, true);
        }
        row("    ", "OML (at receipt)", &mp.oml_receipt, true);
        let (name, p) = if hold {
            ("DWS (at release, exch)", &mp.dws_release_exchange)
        } else {
            ("DWS (at receipt)", &mp.dws_receipt)
        };
        row("    ", name, p, false);
        println!(
            "    P(F) {} (exchange time), {} (true time); loss {:.4}%",
            sim::report::share(mp.fairness_percent_exchange, mp.messages),
            sim::report::share(mp.fairness_percent_true, mp.messages),
            mp.loss_percent
        );
    }
    // Whether the clocks had settled: true-time fairness rests on them.
    let clocks = &outbound.clock_error;
    if !clocks.abs_ns.is_empty() {
        println!(
            "  clock sync error p50 {} ns, p99 {} ns, worst {} ns{} (every non-root node, every {} ms while measuring){}",
            clocks.abs_ns.value_at_quantile(0.5),
            clocks.abs_ns.value_at_quantile(0.99),
            clocks.worst_ns,
            clocks.worst_at.map_or(String::new(), |(id, at)| format!(
                " at node {} {:.3} s in",
                id.0,
                at as f64 / 1e9
            )),
            sim::scenario::CLOCK_SAMPLE_NS / 1_000_000,
            if clocks.unsynced > 0 {
                format!("; {} samples of nodes not yet synced", clocks.unsynced)
            } else {
                String::new()
            }
        );
    }
    match outbound.converged_at {
        Some(at) => println!(
            "  every clock had converged {:.2} s in; measuring started then (warm-up at least {:.2} s)",
            at as f64 / 1e9,
            outbound.config.warmup_ns as f64 / 1e9
        ),
        None => println!(
            "  not every clock had converged {:.1} s after the warm-up; measured anyway",
            sim::scenario::CONVERGE_WAIT_NS_MAX as f64 / 1e9
        ),
    }
    let wall_s = wall.elapsed().as_secs_f64();
    let stats = outbound.sim.stats();
    let handlers = stats.datagrams + stats.timeouts + stats.commands;
    println!(
        "  {} messages in {} packets{}, {} late, {} checker violations{}",
        summary.messages,
        summary.packets,
        match summary.idle_packets {
            0 => String::new(),
            n => format!(" ({n} idle)"),
        },
        summary.late_packets,
        summary.violations,
        match stats.parents_changed {
            0 => String::new(),
            n => format!("; {n} parent changes (failovers and failbacks)"),
        }
    );
    if let Some(line) = summary.repair.line() {
        println!("  {line}");
    }
    // Kills due after a stop never happened.
    let killed: Vec<proto::NodeId> = outbound
        .config
        .faults
        .iter()
        .filter(|fault| ended.reached(fault))
        .filter_map(|fault| match fault {
            Fault::Kill { node, .. } => Some(proto::NodeId(*node)),
            _ => None,
        })
        .collect();
    if !killed.is_empty() {
        // A dead gateway forwards nothing, so it does not change what the tree reaches.
        let gateways = outbound.plan.gateways();
        println!(
            "  killed {:?}: the tree {} every live gateway without them (H = {}){}",
            killed.iter().map(|id| id.0).collect::<Vec<_>>(),
            if outbound.plan.reaches_all_without(&killed) {
                "still reaches"
            } else {
                "no longer reaches"
            },
            outbound.plan.config().hedge,
            if killed.iter().any(|id| gateways.contains(&id.0)) {
                "; packets sent after a gateway died are measured over the live ones, and those \
                 sent before that it never released count as lost"
            } else {
                ""
            }
        );
    }
    // Gateways started again: measured again from where they came back.
    if let Some(metrics) = outbound.sim.metrics() {
        for absence in metrics.retired() {
            if let Some(back) = absence.until {
                println!(
                    "  gateway {} started again: not measured for packets {}..{} (dead, then \
                     joining through a book snapshot), measured again from packet {}",
                    absence.receiver, absence.from.packet_seq, back.packet_seq, back.packet_seq
                );
            }
        }
    }
    // Speed (issue #5): wall time, events and node handler calls per wall second, peak RSS.
    // Handler calls (datagrams + timeouts + commands) are the stable unit of work: the number
    // of events per copy depends on the driver (one when the receive queue is idle, else two).
    println!(
        "  speed: {:.1}s simulated in {wall_s:.1}s wall on {} ({} cores); {} events ({:.2}M/s), {} handler calls ({:.2}M/s); {} links; peak RSS {}; trace {:016x} ({})",
        outbound.sim.now() as f64 / 1e9,
        crate::machine::cpu(),
        crate::machine::cores(),
        stats.events,
        stats.events as f64 / wall_s / 1e6,
        handlers,
        handlers as f64 / wall_s / 1e6,
        outbound.sim.link_count(),
        peak_rss().map_or_else(
            || "unknown".to_string(),
            |kib| format!("{:.0} MiB", kib as f64 / 1024.0)
        ),
        outbound.sim.trace_hash(),
        if ended == Ended::Complete {
            "same seed and config, same trace"
        } else {
            "interrupted: this run's alone; config.toml reruns the whole run, another trace"
        },
    );
    println!("\n{}", summary.table());
    println!(
        "written to {} (summary.json, summary.txt, cdf.csv, oml_cdf.svg, dws_cdf.svg; config.toml reruns the run)",
        args.out.display()
    );
    if ended != Ended::Complete {
        // Written and printed, but not what was asked for: a script must not take it for a
        // whole run.
        std::io::stdout().flush().context("writing the summary")?;
        let unreached = outbound
            .config
            .faults
            .iter()
            .filter(|fault| !ended.reached(fault))
            .count();
        eprintln!(
            "interrupted: the figures above are over the {} messages published before the stop{}; \
             config.toml reruns the whole {duration_s} s",
            summary.messages,
            match unreached {
                0 => String::new(),
                1 => "; the fault due after the stop did not happen".to_owned(),
                n => format!("; the {n} faults due after the stop did not happen"),
            }
        );
        std::process::exit(INTERRUPTED);
    }
    Ok(())
}

/// The exit status of a run stopped by Ctrl-C (or SIGTERM): 128 + SIGINT, as a shell reports
/// a process SIGINT killed.
const INTERRUPTED: i32 = 130;

/// Refuses, before anything is built, a run whose estimated memory
/// ([`OutboundConfig::memory_estimate_bytes`], 0.93-1.25x the peaks measured) is over 1.25
/// times what the machine has available: it would be killed for memory, or swap, after
/// building for minutes. Notes one over three quarters of it. Says nothing where
/// the available memory cannot be read (not Linux). A container's memory limit counts.
fn fits_in_memory(config: &OutboundConfig, plan: &proto::plan::Plan) -> anyhow::Result<()> {
    let Some((available, source)) = available_memory() else {
        return Ok(());
    };
    let estimate = config.memory_estimate_bytes(plan);
    let gib = |bytes: u64| bytes as f64 / f64::from(1u32 << 30);
    let what = format!(
        "this run needs about {:.1} GiB (N = {}{}), and {source} {:.1} GiB available",
        gib(estimate),
        config.plan.participants,
        if config.plan.rrps {
            " under RRPS, which opens a link for every pair of nodes of adjacent layers"
        } else {
            ""
        },
        gib(available)
    );
    if estimate as f64 > 1.25 * available as f64 {
        bail!(
            "{what}: lower -n{}; --no-memory-check runs it anyway",
            if config.plan.rrps {
                ", or run a fixed tree (--no-rrps), whose links grow with N, not N squared"
            } else {
                ""
            }
        );
    }
    if estimate as f64 > 0.75 * available as f64 {
        eprintln!("note: {what}; it may not fit");
    }
    Ok(())
}

/// Memory available for a new run, bytes: `MemAvailable` of `/proc/meminfo`, or less when this
/// process's cgroup (a container's memory limit) leaves less (Linux only).
/// With it, the words that say where the figure comes from.
fn available_memory() -> Option<(u64, &'static str)> {
    let machine = proc_kib("/proc/meminfo", "MemAvailable:")?.checked_mul(1024)?;
    let read = |path: &str| std::fs::read_to_string(path).ok();
    Some(match cgroup_headroom(read) {
        Some(headroom) if headroom < machine => (headroom, "this process's memory cgroup leaves"),
        _ => (machine, "the machine has"),
    })
}

/// What this process's memory cgroup still allows, bytes (its limit less its usage), or `None`
/// without a limit. `read` reads a file. cgroup v2 (`0::/path` in `/proc/self/cgroup`,
/// `memory.max` and `memory.current`) and v1 (the `memory` controller's line,
/// `memory.limit_in_bytes` and `memory.usage_in_bytes`); each at the process's own path under
/// the mount and at the mount's root, which is the process's group inside a container.
fn cgroup_headroom(read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    // A v1 "no limit" is the largest page multiple of an i64; anything this large is none.
    const UNLIMITED: u64 = 1 << 60;
    let groups = read("/proc/self/cgroup")?;
    let number = |path: String| -> Option<u64> { read(&path)?.trim().parse().ok() };
    let mut candidates = Vec::new();
    for line in groups.lines() {
        let mut fields = line.splitn(3, ':').skip(1);
        let (Some(controllers), Some(path)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = path.trim_end_matches('/');
        if controllers.is_empty() {
            for dir in [format!("/sys/fs/cgroup{path}"), "/sys/fs/cgroup".to_owned()] {
                candidates.push((format!("{dir}/memory.max"), format!("{dir}/memory.current")));
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            for dir in [
                format!("/sys/fs/cgroup/memory{path}"),
                "/sys/fs/cgroup/memory".to_owned(),
            ] {
                candidates.push((
                    format!("{dir}/memory.limit_in_bytes"),
                    format!("{dir}/memory.usage_in_bytes"),
                ));
            }
        }
    }
    candidates.into_iter().find_map(|(limit, usage)| {
        // v2 writes "max" for no limit, which does not parse: no limit here, try the next.
        let limit = number(limit).filter(|&limit| limit < UNLIMITED)?;
        Some(limit.saturating_sub(number(usage).unwrap_or(0)))
    })
}

/// This process's peak resident set size in KiB (`VmHWM` of `/proc/self/status`; Linux only).
fn peak_rss() -> Option<u64> {
    proc_kib("/proc/self/status", "VmHWM:")
}

/// The figure of the line `key N kB` in a `/proc` file, in KiB.
fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|line| line.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Parses `--seed` (decimal or 0x-hex).
fn parse_seed_arg(text: &str) -> Result<u64, String> {
    sim::parse_seed(text).ok_or_else(|| format!("{text:?} is not a u64 (decimal or 0x-hex)"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::cgroup_headroom;

    fn files(entries: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = entries
            .iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
            .collect();
        move |path: &str| map.get(path).cloned()
    }

    #[test]
    fn a_cgroup_limit_is_what_it_leaves() {
        // v2 at the process's own path.
        let v2 = files(&[
            ("/proc/self/cgroup", "0::/user.slice/run-1.scope\n"),
            (
                "/sys/fs/cgroup/user.slice/run-1.scope/memory.max",
                "4294967296\n",
            ),
            (
                "/sys/fs/cgroup/user.slice/run-1.scope/memory.current",
                "1073741824\n",
            ),
        ]);
        assert_eq!(cgroup_headroom(v2), Some(3 << 30));
        // v2 inside a container: the group is the mount's root.
        let container = files(&[
            ("/proc/self/cgroup", "0::/\n"),
            ("/sys/fs/cgroup/memory.max", "2147483648\n"),
            ("/sys/fs/cgroup/memory.current", "0\n"),
        ]);
        assert_eq!(cgroup_headroom(container), Some(2 << 30));
        // v1 with the memory controller among others.
        let v1 = files(&[
            ("/proc/self/cgroup", "5:devices:/\n4:memory:/jobs/a\n0::/\n"),
            (
                "/sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes",
                "1073741824",
            ),
            (
                "/sys/fs/cgroup/memory/jobs/a/memory.usage_in_bytes",
                "2147483648",
            ),
        ]);
        assert_eq!(cgroup_headroom(v1), Some(0), "over its limit: nothing left");
    }

    #[test]
    fn no_limit_or_no_cgroup_is_none() {
        let unlimited = files(&[
            ("/proc/self/cgroup", "4:memory:/process_api/c69\n0::/\n"),
            (
                "/sys/fs/cgroup/memory/process_api/c69/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            ("/sys/fs/cgroup/memory.max", "max\n"),
        ]);
        assert_eq!(cgroup_headroom(unlimited), None);
        assert_eq!(cgroup_headroom(files(&[])), None);
        let garbled = files(&[("/proc/self/cgroup", "no colons here\n")]);
        assert_eq!(cgroup_headroom(garbled), None);
        // A line it cannot read does not hide the one after it.
        let mixed = files(&[
            ("/proc/self/cgroup", "garbage\n0::/\n"),
            ("/sys/fs/cgroup/memory.max", "1024\n"),
        ]);
        assert_eq!(cgroup_headroom(mixed), Some(1024));
    }
}
