//! Order entry (OUCH-style); the message set follows in the next commit.

/// First byte of every order-entry datagram.
pub const MAGIC: u8 = 0xFE;
