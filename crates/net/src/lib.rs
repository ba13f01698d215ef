//! Jasper's real runtime: drives the unchanged sans-IO [`proto`] nodes over UDP sockets and
//! the OS clock (DESIGN.md §2, STYLE.md §2.7).
//!
//! This is the only crate of the workspace that reads a clock ([`clock::now_ns`], one marked
//! site) or opens a socket. It contains no protocol logic: everything a node decides, it
//! decides in `proto`, exactly as it does under the simulator.
//!
//! | piece | what it does |
//! |---|---|
//! | [`clock`] | the OS monotonic clock as true time; per-node injected offset and drift |
//! | [`AddrBook`] | plan ids ↔ socket addresses; unknown sources are dropped before the node |
//! | [`socket`] | non-blocking sockets, `recvmmsg` batches, one `sendmmsg` per fan-out |
//! | [`Host`] | one node + socket + clock + [`Hook`] (commands) + [`NetCounters`] |
//! | [`Runtime`] | the loop: one clock read per turn, busy-poll or epoll, many hosts per thread |
//! | [`journal`] | the durable root's file journal: group commit, recovery on restart |
//! | [`monitor`] | release reports to the operator's monitor (`jasper watch`), and its socket |
//! | [`Deployment`] | a cluster config ready to bind: plan, address book, node constructors |
//!
//! Driving a node (what `jasper node` does):
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use net::{Deployment, Idle, Mode, Runtime, SocketOptions};
//!
//! let deployment = Deployment::from_toml(&std::fs::read_to_string("cluster.toml")?)?;
//! let entry = deployment.find("p1.0").expect("in the config");
//! let proxy = deployment.proxy(proto::NodeId(entry.id))?;
//! let mut runtime = Runtime::new(Mode::Epoll)?;
//! runtime.add(deployment.bind(proxy, Idle, &SocketOptions::default())?)?;
//! let stop = AtomicBool::new(false);
//! let mut sink = |node: proto::NodeId, _now: proto::Instant, event: &proto::Event| {
//!     println!("{node:?} {event:?}")
//! };
//! runtime.run_for(Duration::from_secs(10), &stop, &mut sink)?;
//! # Ok(()) }
//! ```
//!
//! Linux only: `recvmmsg`, `sendmmsg`, `epoll_pwait2`, `sched_setaffinity`, `sched_setscheduler`.

pub mod addr;
#[cfg(feature = "bench")]
pub mod bench;
pub mod clock;
mod deployment;
mod host;
pub mod journal;
pub mod monitor;
mod runtime;
pub mod socket;
mod sys;

pub use addr::AddrBook;
pub use clock::NodeClock;
pub use deployment::Deployment;
pub use host::{
    EventSink, Hook, Host, HostView, INVARIANTS_PERIOD, Idle, NetCounters, RECV_ROUNDS_MAX, Role,
};
pub use runtime::{
    LATE_WAKE_NS, Mode, RunStats, Runtime, SPIN_DUTY_PERCENT, SPIN_WINDOW_NS, STALL_NS,
};
pub use socket::{SendOutcome, Socket, SocketOptions};
pub use sys::{
    default_sigpipe, pin_current_thread, set_realtime, stop_on_first_signal, stop_on_signals,
};
