//! The limit order book and matching engine that sits at the root of the Jasper tree
//! (DESIGN.md §2, §4 "Matching engine").
//!
//! A deterministic function of (book, input) to (book', events): the root's sequencer feeds it
//! [`Input`]s one at a time in sequence order through [`Engine::handle_input`], and the engine
//! appends [`Event`]s to a caller-provided `Vec`: exactly one response (accept or reject with a
//! [`RejectReason`]) per input, then fills and market-data events, in one documented order
//! (see [`Event`]). The same inputs give the same events, byte for byte.
//!
//! What it does *not* do: read a clock (the root stamps time), do I/O, allocate per order in
//! steady state, assign order ids (the exchange does), or keep any history of finished orders.
//! It never panics on any input; capacity limits are set in [`EngineConfig`] and allocated in
//! [`Engine::new`].
//!
//! # Rules
//! - Price-time priority per symbol; a fill trades at the resting (maker) order's price.
//! - Limit GTC, IOC, FOK (against all reachable quantity), market, post-only; cancel; replace
//!   (a smaller size at the same price keeps priority, anything else loses it and re-matches if
//!   it now crosses). Optional self-trade prevention per participant cancels the resting
//!   order.
//! - Prices are `i64` price units on a per-symbol tick inside a per-symbol band; quantities are
//!   positive integers up to [`EngineConfig::order_qty_max`].
//!
//! # Layout
//! Orders live in one slab with an intrusive FIFO per price level (O(1) cancel); levels live in
//! one slab; each side of each book indexes its levels by integer tick in an array around the
//! touch with a bitmap for the next-best search and an ordered map for far prices (see the
//! `side` module); the best level is cached. An order id index (open addressing) finds orders
//! for cancel and replace.
//!
//! The far-price map allocates when a level is created outside the window; the window follows
//! the touch only when it empties, so a market that drifts far from where a book started while
//! old orders stay behind pays that cost. [`lobster`] replays LOBSTER files through the engine.
#![warn(missing_docs)]

#[cfg(feature = "bench")]
pub mod bench;
mod config;
mod engine;
mod index;
pub mod lobster;
mod side;
mod types;

pub use config::{ConfigError, EngineConfig, PRICE_ABS_MAX, SLOTS_MAX, SymbolConfig};
pub use engine::{Engine, EngineSnapshot, LevelView, OrderView};
pub use types::{
    CancelOrder, Event, ExpireReason, Fill, Input, MatchNumber, NewOrder, OrderId, OrderKind,
    ParticipantId, Price, Qty, RejectReason, ReplaceOrder, Side, SymbolIndex,
};

/// "No slot": the null handle of every slab-linked structure.
const NIL: u32 = u32::MAX;
