//! `jasper plan`: plan the tree for N participants, print it, and write the cluster config.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use proto::NodeConfig;
use proto::cluster::ClusterConfig;
use proto::plan::{Plan, PlanConfig, Shape, SpotPolicy};

/// Arguments of `jasper plan`.
#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Number of market participants.
    #[arg(short = 'n', long, default_value_t = 100)]
    pub(crate) participants: u32,
    /// Two gateways per participant (receiver hedging).
    #[arg(long)]
    pub(crate) receiver_hedging: bool,
    /// Hops from the root to a gateway (with --fanout; default: the F/D heuristic).
    #[arg(long, requires = "fanout")]
    pub(crate) depth: Option<u32>,
    /// Children per node (with --depth).
    #[arg(long, requires = "depth")]
    pub(crate) fanout: Option<u32>,
    /// Sibling hedging factor H.
    #[arg(long = "hedge", short = 'H', default_value_t = 1)]
    pub(crate) hedge: u32,
    /// Turn round-robin packet spraying off.
    #[arg(long)]
    pub(crate) no_rrps: bool,
    /// Which proxies are spot VMs.
    #[arg(long, value_enum, default_value_t = Spot::None)]
    pub(crate) spot: Spot,
    /// IP addresses of the hosts to lay nodes out on, round-robin, e.g. `10.0.0.1,10.0.0.2`
    /// (default: 127.0.0.1; addresses, not host names).
    #[arg(long, value_delimiter = ',')]
    pub(crate) hosts: Vec<IpAddr>,
    /// Node i listens on base-port + i.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) base_port: u16,
    /// Write the cluster config here.
    #[arg(short, long)]
    pub(crate) out: Option<PathBuf>,
}

/// Spot-VM marking.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Spot {
    /// All proxies on-demand.
    None,
    /// Every even-numbered proxy of each layer is a spot VM.
    Even,
}

impl PlanArgs {
    pub(crate) fn plan_config(&self) -> PlanConfig {
        let shape = match (self.depth, self.fanout) {
            (Some(depth), Some(fanout)) => Shape::Explicit { depth, fanout },
            _ => Shape::Heuristic,
        };
        PlanConfig {
            participants: self.participants,
            receiver_hedging: self.receiver_hedging,
            shape,
            hedge: self.hedge,
            rrps: !self.no_rrps,
            spot: match self.spot {
                Spot::None => SpotPolicy::None,
                Spot::Even => SpotPolicy::EvenProxies,
            },
        }
    }
}

pub(crate) fn run(args: &PlanArgs) -> anyhow::Result<()> {
    let plan = Plan::new(&args.plan_config())?;
    print!("{plan}");
    // An H given (not the default 1) that the tree cannot hold is said, as `sim run` says it.
    if args.hedge != 1
        && let Some(note) = crate::sim::capped_hedge(&plan, true)
    {
        println!("  note: {note}");
    }
    let spot = plan.spot_proxies();
    if !spot.is_empty() {
        if plan.reaches_all_without(&spot) {
            println!(
                "  losing all {} spot proxies still reaches every gateway",
                spot.len()
            );
        } else {
            println!(
                "  WARNING: losing all {} spot proxies cuts gateways off (use H >= 1 and even layer widths)",
                spot.len()
            );
        }
    }
    let cluster = ClusterConfig::layout(&plan, NodeConfig::default(), &args.hosts, args.base_port)?;
    match &args.out {
        Some(path) => {
            std::fs::write(path, cluster.to_toml())
                .with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {} ({} nodes)", path.display(), cluster.nodes.len());
        }
        None if plan.nodes().len() <= 40 => {
            for n in &cluster.nodes {
                println!("  {:>4} {:<8} {:?} {}", n.id, n.name, n.role, n.addr);
            }
        }
        None => println!("  (use --out FILE to write the cluster config)"),
    }
    Ok(())
}
