//! Byte formats of Jasper: market data (NASDAQ TotalView-ITCH 5.0 inside MoldUDP64), order
//! entry, and control messages. Checked zero-copy views for untrusted input and typed
//! `Repr`s with `parse`/`emit`.
//!
//! This crate does no I/O, reads no clock, allocates nothing per message and never panics on
//! any input.
//!
//! | module | what |
//! |---|---|
//! | [`mold`] | MoldUDP64 packets: checked view, builder, heartbeat/end-of-session, request |
//! | [`market`] | Jasper market data: the per-packet [`JasperHeader`] message, builder, parser |
//! | [`itch`] | NASDAQ TotalView-ITCH 5.0 messages ([`itch::Message`]) |
//! | [`control`] | clock probes/replies, OWD reports, heartbeats, retransmission requests |
//! | [`order`] | OUCH-4.2-style order entry (up) and responses (down) |
//! | [`hop`] | the inbound hop envelope: an order going up, stamped by each hop for pacing |
//! | [`response`] | the numbered-response envelope: an order response going down, numbered per participant |
//! | [`report`] | release reports: what gateways tell the operator's monitor of every release |
//! | [`pcap`] | a tiny classic-pcap + Ethernet/VLAN/IPv4/UDP reader for captures and tests |
//!
//! # Telling datagrams apart
//!
//! Every Jasper datagram is one of five kinds, told apart by its first byte ([`classify`]):
//! a MoldUDP64 packet starts with its session (ASCII, so `< 0x80`); a control datagram starts
//! with [`control::MAGIC`] (`0xFF`); an order-entry datagram with [`order::MAGIC`] (`0xFE`),
//! an order going up in its hop envelope with [`hop::MAGIC`] (`0xFD`), a numbered response
//! going down with [`response::MAGIC`] (`0xFC`). Release reports ([`report::MAGIC`], `0xFB`)
//! go to the operator's monitor, never to a node, and are not one of the five.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod bytes;
pub mod control;
pub mod hop;
pub mod itch;
pub mod market;
pub mod mold;
pub mod order;
pub mod pcap;
pub mod report;
pub mod response;

pub use itch::Message;
pub use market::{JasperHeader, MarketData, MarketDataBuilder, parse_market_data};
pub use mold::{MoldBuilder, MoldPacket, Session};

use core::fmt;

/// Why bytes could not be parsed or emitted.
///
/// Parse failures never panic: every decoder in this crate returns one of these instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The input is shorter than its format requires.
    Truncated,
    /// The input's length is not the one its type requires (e.g. trailing bytes).
    BadLength,
    /// The message type byte is not one this format defines.
    UnknownType(u8),
    /// A field holds a value the format does not allow (bad magic, side, count, ...).
    Malformed,
    /// The output buffer is too small for the message being emitted.
    BufferTooSmall,
    /// The packet being built has no room left for this message.
    Full,
    /// A MoldUDP64 packet whose first message is not a Jasper header (a heartbeat, an end of
    /// session, or a packet from a foreign source).
    NoHeader,
    /// A value cannot be represented in its wire field (e.g. a timestamp of 2^48 ns or more).
    OutOfRange,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated input"),
            Self::BadLength => f.write_str("length does not match the message type"),
            Self::UnknownType(t) => write!(f, "unknown message type 0x{t:02x}"),
            Self::Malformed => f.write_str("malformed field"),
            Self::BufferTooSmall => f.write_str("output buffer too small"),
            Self::Full => f.write_str("packet full"),
            Self::NoHeader => f.write_str("no Jasper header"),
            Self::OutOfRange => f.write_str("value out of range for its wire field"),
        }
    }
}

impl std::error::Error for Error {}

/// Synchronised exchange time in nanoseconds (the root's clock, as every node estimates it).
///
/// Carried by send timestamps, release deadlines and order generation times. A node's local
/// monotonic clock never goes on the wire; clock sync converts between the two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExchangeTime(pub u64);

impl ExchangeTime {
    /// Time zero.
    pub const ZERO: Self = Self(0);
    /// The latest representable time.
    pub const MAX: Self = Self(u64::MAX);

    /// From a nanosecond count.
    pub const fn from_nanos(ns: u64) -> Self {
        Self(ns)
    }

    /// As a nanosecond count.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + ns`, saturating at [`ExchangeTime::MAX`].
    #[must_use]
    pub const fn saturating_add_nanos(self, ns: u64) -> Self {
        Self(self.0.saturating_add(ns))
    }

    /// `self - ns`, saturating at [`ExchangeTime::ZERO`].
    #[must_use]
    pub const fn saturating_sub_nanos(self, ns: u64) -> Self {
        Self(self.0.saturating_sub(ns))
    }

    /// Nanoseconds from `earlier` to `self`, or 0 if `earlier` is later.
    pub const fn saturating_nanos_since(self, earlier: Self) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// Side of an order: ITCH "Buy/Sell Indicator" and OUCH "Buy/Sell Indicator".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// `'B'`
    Buy,
    /// `'S'`
    Sell,
}

impl Side {
    /// The wire byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Self::Buy => b'B',
            Self::Sell => b'S',
        }
    }

    /// From the wire byte; `None` unless `'B'` or `'S'`.
    pub const fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'B' => Some(Self::Buy),
            b'S' => Some(Self::Sell),
            _ => None,
        }
    }

    /// The other side.
    #[must_use]
    pub const fn opposite(self) -> Self {
        match self {
            Self::Buy => Self::Sell,
            Self::Sell => Self::Buy,
        }
    }
}

/// A stock symbol: 8 bytes, alphanumeric, padded with spaces on the right (ITCH "Stock",
/// OUCH "Stock").
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Stock(pub [u8; 8]);

impl Stock {
    /// From a symbol of at most 8 printable ASCII characters (no spaces), padded with
    /// spaces; `None` otherwise.
    pub fn new(symbol: &str) -> Option<Self> {
        let bytes = symbol.as_bytes();
        if bytes.len() > 8 || !bytes.iter().all(u8::is_ascii_graphic) {
            return None;
        }
        let mut s = [b' '; 8];
        s[..bytes.len()].copy_from_slice(bytes);
        Some(Self(s))
    }

    /// The symbol without its padding (raw bytes; real feeds are ASCII).
    pub fn trimmed(&self) -> &[u8] {
        let end = self.0.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        &self.0[..end]
    }

    /// The symbol without its padding, if it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        core::str::from_utf8(self.trimmed()).ok()
    }
}

impl fmt::Debug for Stock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stock(\"{}\")", self.0.escape_ascii())
    }
}

impl fmt::Display for Stock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.trimmed().escape_ascii())
    }
}

/// Something that can write itself onto the wire: an ITCH message, the Jasper header, a
/// control or order message.
pub trait Emit {
    /// Bytes [`Emit::emit`] writes.
    fn buffer_len(&self) -> usize;

    /// Writes the message to the start of `buf` and returns [`Emit::buffer_len`].
    ///
    /// Fails with [`Error::BufferTooSmall`] if `buf` is shorter than [`Emit::buffer_len`], or
    /// [`Error::OutOfRange`] if a value does not fit its field. Never writes past
    /// `buffer_len()`.
    fn emit(&self, buf: &mut [u8]) -> Result<usize, Error>;
}

/// A message body that is already encoded (e.g. forwarded from another packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raw<'a>(pub &'a [u8]);

impl Emit for Raw<'_> {
    fn buffer_len(&self) -> usize {
        self.0.len()
    }

    fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let out = buf.get_mut(..self.0.len()).ok_or(Error::BufferTooSmall)?;
        out.copy_from_slice(self.0);
        Ok(self.0.len())
    }
}

/// What a datagram is, judged by its first byte(s) only (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A MoldUDP64 packet (market data, heartbeat, end of session).
    MarketData,
    /// A Jasper control message ([`control`]).
    Control,
    /// An order-entry message, up or down ([`order`]).
    Order,
    /// An order-entry message going up, in a hop envelope ([`hop`]).
    Hop,
    /// An order response going down, numbered in its participant's stream ([`response`]).
    Response,
    /// None of the above; drop it.
    Unknown,
}

/// Tells a datagram's [`Kind`] from its first bytes, without validating the rest.
///
/// MoldUDP64 packets are recognised by length (at least [`mold::HEADER_LEN`]) and a first
/// byte below `0x80` (sessions are ASCII; the sample captures use all-zero sessions, which
/// also pass). Control and order datagrams need their magic byte and [`VERSION`].
pub fn classify(datagram: &[u8]) -> Kind {
    match datagram {
        [control::MAGIC, VERSION, ..] => Kind::Control,
        [order::MAGIC, VERSION, ..] => Kind::Order,
        [hop::MAGIC, VERSION, ..] => Kind::Hop,
        [response::MAGIC, VERSION, ..] => Kind::Response,
        [first, ..] if *first < 0x80 && datagram.len() >= mold::HEADER_LEN => Kind::MarketData,
        _ => Kind::Unknown,
    }
}

/// Version byte of Jasper's own control and order envelopes (byte 1 of each datagram).
pub const VERSION: u8 = 1;

// Magic bytes must never look like the start of a MoldUDP64 session (ASCII), nor each other.
const _: () = assert!(!control::MAGIC.is_ascii());
const _: () = assert!(!order::MAGIC.is_ascii());
const _: () = assert!(control::MAGIC != order::MAGIC);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_time_saturates() {
        let t = ExchangeTime::from_nanos(10);
        assert_eq!(t.saturating_sub_nanos(11), ExchangeTime::ZERO);
        assert_eq!(t.saturating_sub_nanos(3).as_nanos(), 7);
        assert_eq!(ExchangeTime::MAX.saturating_add_nanos(1), ExchangeTime::MAX);
        assert_eq!(t.saturating_add_nanos(5), ExchangeTime(15));
        assert_eq!(t.saturating_nanos_since(ExchangeTime(4)), 6);
        assert_eq!(t.saturating_nanos_since(ExchangeTime(40)), 0);
        assert!(ExchangeTime(1) < ExchangeTime(2));
    }

    #[test]
    fn classify_kinds() {
        assert_eq!(classify(&[]), Kind::Unknown);
        assert_eq!(classify(&[0xFF]), Kind::Unknown);
        assert_eq!(classify(&[0xFF, VERSION, 1]), Kind::Control);
        assert_eq!(classify(&[0xFE, VERSION]), Kind::Order);
        assert_eq!(classify(&[0xFE, VERSION + 1]), Kind::Unknown);
        assert_eq!(classify(&[0xFD, VERSION]), Kind::Hop);
        assert_eq!(classify(&[0xFC, VERSION]), Kind::Response);
        assert_eq!(classify(&[b'A'; 20]), Kind::MarketData);
        assert_eq!(classify(&[b'A'; 19]), Kind::Unknown);
        assert_eq!(classify(&[0x80; 30]), Kind::Unknown);
    }

    #[test]
    fn side_and_stock() {
        assert_eq!(Side::from_byte(b'B'), Some(Side::Buy));
        assert_eq!(Side::from_byte(b'b'), None);
        assert_eq!(Side::Sell.to_byte(), b'S');
        assert_eq!(Side::Sell.opposite(), Side::Buy);
        let s = Stock::new("IVOO").unwrap();
        assert_eq!(s.0, *b"IVOO    ");
        assert_eq!(s.as_str(), Some("IVOO"));
        assert_eq!(s.to_string(), "IVOO");
        assert_eq!(format!("{s:?}"), "Stock(\"IVOO    \")");
        assert!(Stock::new("TOOLONGXX").is_none());
        assert!(Stock::new("A B").is_none());
        assert_eq!(Stock([b' '; 8]).trimmed(), b"");
    }

    #[test]
    fn raw_emit() {
        let mut buf = [0u8; 4];
        assert_eq!(Raw(b"abc").emit(&mut buf), Ok(3));
        assert_eq!(&buf, b"abc\0");
        assert_eq!(Raw(b"abcde").emit(&mut buf), Err(Error::BufferTooSmall));
    }

    #[test]
    fn error_display() {
        assert_eq!(
            Error::UnknownType(b'z').to_string(),
            "unknown message type 0x7a"
        );
        assert_eq!(Error::Truncated.to_string(), "truncated input");
    }
}
