//! Sans-IO node state machines of the Jasper exchange.
//!
//! This crate contains no networking code and reads no clock: every handler takes `now`, and
//! every output is polled (see [`node`] for the contract). The same nodes run in the
//! deterministic simulator (`sim`) and over real UDP sockets (`net`).
//!
//! | module | mechanism (DESIGN.md §4) |
//! |---|---|
//! | [`plan`] | tree plan: layers, fan-out, RRPS blocks, sibling hedging targets |
//! | [`dedupe`] | first-copy-wins dedupe window |
//! | [`clock`] | Huygens-style clock sync: local [`Instant`] to exchange time |
//! | [`owd`] | OWD percentile window and reports (hold-and-release deadlines) |
//! | [`hold`] | hold-and-release queue at a gateway |
//! | [`root`], [`proxy`], [`gateway`] | the three node roles |
#![warn(missing_docs)]

pub mod clock;
pub mod cluster;
pub mod config;
mod core;
pub mod dedupe;
pub mod gateway;
pub mod hold;
pub mod node;
pub mod outbox;
pub mod owd;
pub mod plan;
pub mod proxy;
pub mod root;
pub mod time;

pub use config::NodeConfig;
pub use core::Counters;
pub use gateway::{Delivery, Gateway, Strategy};
pub use node::{DropReason, Event, Node, NodeId, Release, Transmit};
pub use proxy::Proxy;
pub use root::Root;
pub use time::Instant;
