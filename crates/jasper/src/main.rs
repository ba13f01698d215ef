//! The `jasper` command-line tool.

use clap::{Parser, Subcommand};

mod replay;

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
    /// Replay a LOBSTER message file through the matching engine and check it against the
    /// orderbook file (book building and matching).
    Replay(replay::ReplayArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Commands::Replay(args) => replay::run(&args),
    }
}
