//! The limit order book and matching engine that sits at the root of the Jasper tree.
//!
//! A deterministic function of (book, input) to (book', events): no clock, no I/O, no
//! allocation per order in steady state.
#![warn(missing_docs)]
