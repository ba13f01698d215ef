//! The `jasper` command-line tool.

use clap::{Parser, Subcommand};

mod bench;
mod machine;
mod node;
mod plan;
mod replay;
mod sim;
mod spans;
mod up;
mod watch;

/// mimalloc, not the system's allocator: the simulator touches a thousand nodes' state once
/// per packet each, spread over ~100 MB of small allocations, and with 4 KiB pages most of
/// its cache misses were TLB misses too. mimalloc maps its segments 2 MiB-aligned and asks
/// for transparent huge pages (this kernel grants them on `madvise` only, which glibc's
/// malloc does not do by default). Same traces; the speed case (N = 1000, 10 simulated s,
/// two threads) 79.0 s -> 69.9 s, N = 10,000 117 s -> 100 s, at 1.2-1.45x the peak RSS
/// (huge pages are resident whole; `docs/results/sim-speed.md`, session 25).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The Jasper exchange: one binary for the operator, the participant's engineer and the
/// researcher.
#[derive(Debug, Parser)]
#[command(name = "jasper", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Debug, Subcommand)]
enum Commands {
    /// A whole exchange on this machine, on loopback: root, proxies, gateways trading.
    Up(up::UpArgs),
    /// Latency and throughput benchmarks (tick-to-trade, engine, ...), one report.
    Bench(bench::BenchArgs),
    /// Plan the tree for N participants, print it, and write the cluster config that
    /// `jasper node` reads.
    Plan(plan::PlanArgs),
    /// Run one node (or several, or all) of a cluster config over real UDP sockets.
    Node(node::NodeArgs),
    /// Replay a LOBSTER message file through the matching engine and check it against the
    /// orderbook file (book building and matching).
    Replay(replay::ReplayArgs),
    /// The operator's live view of latency and fairness across a deployment: the gateways of
    /// `jasper node --monitor ADDR` report every release here.
    Watch(watch::WatchArgs),
    /// Deterministic simulation of the real nodes through a cloud network model: one run,
    /// or the paper's experiments beside its figures.
    Sim(sim::SimArgs),
}

/// An error ends the run with its chain of causes on one line and exit status 1. Returning
/// it from `main` would print its `Debug` form, which under `RUST_BACKTRACE=1` adds a
/// backtrace of where the error was made: twenty lines of frames after "gateways_per_vm must
/// be between 1 and 64" say nothing to whoever typed the bad argument. A panic, a bug, still
/// prints its backtrace.
fn main() -> std::process::ExitCode {
    net::default_sigpipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Commands::Bench(args) => bench::run(&args),
        Commands::Up(args) => up::run(&args),
        Commands::Node(args) => node::run(&args),
        Commands::Plan(args) => plan::run(&args),
        Commands::Replay(args) => replay::run(&args),
        Commands::Sim(args) => sim::run(&args),
        Commands::Watch(args) => watch::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
