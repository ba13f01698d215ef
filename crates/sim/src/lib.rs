//! The deterministic discrete-event simulator of Jasper.
//!
//! `sim` drives the unchanged sans-IO nodes of [`proto`] (root, proxies, gateways) through a
//! model of a cloud network, so that a researcher can run the paper's experiments at N = 1000
//! or 10,000 on a laptop and an engineer can replay a bug from its seed (DESIGN.md §2, §6;
//! STYLE.md §11). It uses no operating-system network and reads no clock: time is an integer
//! count of nanoseconds that only [`Sim`] advances, and every random draw comes from one `u64`
//! seed.
//!
//! | module | what |
//! |---|---|
//! | [`runtime`] | [`Sim`]: event heap, hosts, the driver loop, faults (kill, pause, restart); one run split over threads ([`Sim::sharded`], `runtime/shard.rs`) |
//! | [`network`] | [`NetModel`] (presets, TOML) and its state: egress, links, receive buffers, clogs, partitions |
//! | [`clock`] | per-node clock models: offset, drift, periodic, step, noise |
//! | [`rng`] | seeded ChaCha8 streams per purpose, distributions as data |
//! | [`metrics`] | OML, OWD, DWS, P(F), holding time, loss, MPS (DESIGN.md §5) |
//! | [`checker`] | exactly-once in-order release, never early, bounded skew |
//! | [`report`] | summaries, JSON and CSV writers |
//! | [`svg`] | CDF plots |
//! | [`scenario`] | whole trees of the real `proto` nodes from a plan: outbound experiments |
//! | [`experiments`] | the paper's outbound experiments beside its figures: [`experiments::paper_outbound`] (cases, verdicts, report, the sweep over seeds: `experiments/`) |
//! | [`durable`] | the journaling root over a simulated disk, killed and recovered under load: [`durable::run_crashes`] |
//! | [`toy`] | toy nodes for testing and benchmarking the simulator itself |
//!
//! ```no_run
//! use sim::{ClockModel, MetricsConfig, NetModel, Sim, SimConfig, toy::ToyTree};
//!
//! let tree = ToyTree { gateways: 100, fanout: 10, hedge: 1, hold_ns: 200_000,
//!     payload_len: 466, interval_ns: 200_000, packets: 5_000, start_ns: 1_000_000 };
//! let mut sim = Sim::new(SimConfig::new(sim::seed_from_env(1)).with_model(NetModel::aws_c5()));
//! for node in tree.build() {
//!     sim.add_node(node, ClockModel::PERFECT);
//! }
//! sim.measure(MetricsConfig::new(tree.gateways));
//! sim.run_until(2_000_000_000);
//! let summary = sim::report::Summary::new(&sim, "toy");
//! println!("{}", summary.table());
//! ```

pub mod checker;
pub mod clock;
mod cores;
pub mod durable;
pub mod experiments;
pub mod inbound;
pub mod metrics;
pub mod network;
mod queue;
pub mod report;
pub mod rng;
pub mod runtime;
pub mod scenario;
pub mod svg;
mod table;
pub mod toy;

pub use checker::{Checker, OnViolation, Violation};
pub use clock::{ClockModel, ClockStep};
pub use cores::available_cores;
pub use metrics::{Metrics, MetricsConfig};
pub use network::{EpisodeModel, HostKind, JitterModel, NetDrop, NetModel, NetStats, PauseModel};
pub use rng::{Dist, SimRng};
pub use runtime::{
    PauseMode, Sim, SimConfig, SimNode, parse_seed, seed_from_env, seed_from_env_or_random,
    seeds_from_env, try_seed_from_env,
};

/// Nanoseconds of an exchange time.
pub(crate) fn xt(time: wire::ExchangeTime) -> u64 {
    time.as_nanos()
}

/// An exchange time from nanoseconds.
pub(crate) fn exchange_time(nanos: u64) -> wire::ExchangeTime {
    wire::ExchangeTime::from_nanos(nanos)
}
