//! Byte formats of Jasper: market data (NASDAQ TotalView-ITCH 5.0 inside MoldUDP64), order
//! entry, and control messages. Checked zero-copy views for untrusted input and typed
//! `Repr`s with `parse`/`emit`.
//!
//! This crate does no I/O, reads no clock, allocates nothing per message and never panics on
//! any input.
#![warn(missing_docs)]
