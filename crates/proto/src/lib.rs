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
//! | [`repair`] | loss recovery in the tree: a proxy's ring of recent packets answers its children |
//! | [`clock`] | Huygens-style clock sync: local [`Instant`] to exchange time |
//! | [`owd`] | OWD percentile window and reports (hold-and-release deadlines) |
//! | [`twin`] | receiver hedging: answers a twin's lead leaves for the other |
//! | [`hold`] | hold-and-release queue at a gateway |
//! | [`root`], [`proxy`], [`gateway`] | the three node roles |
//! | [`failover`] | parent failover and failback of gateways and proxies |
//! | [`responses`] | numbered order responses: in order, once, gaps asked for again |
//! | [`snapshot`] | book snapshots for a gateway that joined late or skipped packets |
//! | [`journal`] | the durable root: journal records, durability, recovery (issue 9) |
#![warn(missing_docs)]

pub mod book;
pub mod clock;
pub mod cluster;
pub mod config;
mod core;
pub mod dedupe;
mod exchange;
pub mod failover;
pub mod gateway;
pub mod hold;
mod inbound;
pub mod journal;
pub mod node;
pub mod order_queue;
pub mod outbox;
pub mod owd;
pub mod pacing;
pub mod plan;
pub mod proxy;
pub mod repair;
pub mod responses;
pub mod root;
pub mod sequencer;
pub mod snapshot;
pub mod stats;
pub mod strategy;
pub mod time;
pub mod twin;

pub use config::NodeConfig;
pub use core::Counters;
pub use gateway::{Delivery, Gateway};
pub use node::{DropReason, Event, Node, NodeId, Release, Sequenced, Transmit};
pub use proxy::Proxy;
pub use root::Root;
pub use strategy::{Ctx, OrderRequest, Strategy};
pub use time::Instant;
