//! Sans-IO node state machines of the Jasper exchange.
//!
//! This crate contains no networking code and reads no clock: every handler takes `now`.
#![warn(missing_docs)]
