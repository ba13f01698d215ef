//! Jasper market-data packets: MoldUDP64 packets whose first message is a [`JasperHeader`].
//!
//! The header is an ITCH-style message of Jasper's own type [`HEADER_TYPE`] (`'j'`, unused by
//! ITCH 5.0), so standard MoldUDP64/ITCH tools skip it by its length prefix and read every
//! other message as usual.
//!
//! # Sequencing rule
//!
//! The header message *counts as a message* in MoldUDP64 sequencing. A packet with MoldUDP64
//! sequence `s` and `k` ITCH messages has `count = k + 1`: the header is message `s`, the ITCH
//! messages are `s + 1 ..= s + k`, and the next packet starts at `s + k + 1`. So standard gap
//! detection and retransmission requests (message sequence + count) work unchanged, and a
//! retransmitted packet is the original packet, byte for byte, except for the
//! [`RETRANSMISSION`] flag.
//!
//! `packet_seq` is separate: a dense per-packet counter (1, 2, 3, ...) per session, which
//! proxies use to dedupe and spray (RRPS) and gateways use to detect lost packets.
//!
//! # Header message layout (28 bytes, big-endian)
//!
//! ```text
//!  offset  len  field
//!  0       1    type          'j'
//!  1       1    version       1
//!  2       1    flags         bit 0: RETRANSMISSION; bit 1: SNAPSHOT; other bits 0
//!  3       1    reserved      0
//!  4       8    packet_seq    u64
//!  12      8    send_time     exchange time, ns (root's send timestamp)
//!  20      8    deadline      exchange time, ns (release deadline)
//! ```
//!
//! # Book snapshots
//!
//! A gateway that joins the stream after its start, or had to skip packets the root's
//! rewinder no longer held, asks the root for its book (a GLIMPSE-style snapshot): the root
//! answers that gateway alone with *snapshot parts*, packets flagged [`SNAPSHOT`] whose ITCH
//! messages are one Add Order (`A`) per resting order, in price-time priority. In a part the
//! header's fields mean:
//!
//! - MoldUDP64 `sequence`: the sequence number of the first live message the snapshot does
//!   not cover (every message before it is reflected in the book; as GLIMPSE's End of Snapshot
//!   gives it), the same in every part;
//! - `packet_seq`: the first live packet the snapshot does not cover;
//! - `send_time`: when the root took it;
//! - `deadline`: the part's index (high 32 bits, from 0) and the number of parts (low 32
//!   bits), [`JasperHeader::snapshot_part`].
//!
//! A reader applies the parts in order, from an empty book, then the live stream from
//! `packet_seq` on. Proxies never carry them.

use crate::bytes::{get_u64, put_u64};
use crate::mold::{self, BLOCK_HEADER_LEN, MoldBuilder, MoldPacket, Session};
use crate::{Emit, Error, ExchangeTime, Kind, VERSION};

mod field {
    use crate::bytes::Field;
    pub(super) const TYPE: usize = 0;
    pub(super) const VERSION: usize = 1;
    pub(super) const FLAGS: usize = 2;
    pub(super) const RESERVED: usize = 3;
    pub(super) const PACKET_SEQ: Field = 4..12;
    pub(super) const SEND_TIME: Field = 12..20;
    pub(super) const DEADLINE: Field = 20..28;
}

/// Message type byte of the Jasper header (not an ITCH 5.0 type).
pub const HEADER_TYPE: u8 = b'j';
/// Bytes of the Jasper header message body.
pub const HEADER_LEN: usize = field::DEADLINE.end;
/// Flag: this packet is a retransmission (gap fill), not a first transmission.
pub const RETRANSMISSION: u8 = 0x01;
/// Flag: this packet is a part of a book snapshot sent to one gateway (see the module docs).
pub const SNAPSHOT: u8 = 0x02;
/// Flags this version defines; others must be zero.
pub const FLAGS_KNOWN: u8 = RETRANSMISSION | SNAPSHOT;
/// Offset of the header message body within a market-data datagram.
pub const HEADER_OFFSET: usize = mold::HEADER_LEN + BLOCK_HEADER_LEN;
/// Largest total of ITCH message bodies plus their length prefixes in one Jasper packet.
pub const ITCH_BYTES_MAX: usize = mold::PAYLOAD_MAX - HEADER_OFFSET - HEADER_LEN;
/// Largest single ITCH message body a Jasper packet can carry (what an empty
/// [`MarketDataBuilder`] has [`remaining`](MarketDataBuilder::remaining)).
pub const MESSAGE_LEN_MAX: usize = ITCH_BYTES_MAX - BLOCK_HEADER_LEN;

const _: () = assert!(HEADER_LEN == 28);
const _: () = assert!(field::RESERVED + 1 == field::PACKET_SEQ.start);
const _: () = assert!(field::PACKET_SEQ.end == field::SEND_TIME.start);
const _: () = assert!(field::SEND_TIME.end == field::DEADLINE.start);
const _: () = assert!(ITCH_BYTES_MAX >= 1024);

/// Jasper's per-packet data, carried as the first message of every market-data packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct JasperHeader {
    /// Dense per-packet counter within the session (proxies dedupe and spray by it).
    pub packet_seq: u64,
    /// The root's send timestamp.
    pub send_time: ExchangeTime,
    /// Release deadline: gateways hold the packet's messages until then.
    pub deadline: ExchangeTime,
    /// Flag bits: [`RETRANSMISSION`].
    pub flags: u8,
}

impl JasperHeader {
    /// Whether the [`RETRANSMISSION`] flag is set.
    pub const fn is_retransmission(&self) -> bool {
        self.flags & RETRANSMISSION != 0
    }

    /// Whether the [`SNAPSHOT`] flag is set: a part of a book snapshot.
    pub const fn is_snapshot(&self) -> bool {
        self.flags & SNAPSHOT != 0
    }

    /// A snapshot part's index (from 0) and the number of parts, as its `deadline` field
    /// carries them; `None` unless [`SNAPSHOT`] is set, or if the index is not below the count.
    pub const fn snapshot_part(&self) -> Option<(u32, u32)> {
        let part = (self.deadline.0 >> 32) as u32;
        let parts = self.deadline.0 as u32;
        if self.is_snapshot() && part < parts {
            Some((part, parts))
        } else {
            None
        }
    }

    /// The header of snapshot part `part` of `parts`, covering the live stream before packet
    /// `packet_seq`, taken at `send_time`.
    pub const fn snapshot(packet_seq: u64, send_time: ExchangeTime, part: u32, parts: u32) -> Self {
        Self {
            packet_seq,
            send_time,
            deadline: ExchangeTime(((part as u64) << 32) | parts as u64),
            flags: SNAPSHOT,
        }
    }

    /// Parses a header message body (exactly [`HEADER_LEN`] bytes).
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        let (&msg_type, _) = body.split_first().ok_or(Error::Truncated)?;
        if msg_type != HEADER_TYPE {
            return Err(Error::NoHeader);
        }
        if body.len() != HEADER_LEN {
            return Err(if body.len() < HEADER_LEN {
                Error::Truncated
            } else {
                Error::BadLength
            });
        }
        if body[field::VERSION] != VERSION
            || body[field::RESERVED] != 0
            || body[field::FLAGS] & !FLAGS_KNOWN != 0
        {
            return Err(Error::Malformed);
        }
        Ok(Self {
            packet_seq: get_u64(body, field::PACKET_SEQ),
            send_time: ExchangeTime(get_u64(body, field::SEND_TIME)),
            deadline: ExchangeTime(get_u64(body, field::DEADLINE)),
            flags: body[field::FLAGS],
        })
    }
}

impl Emit for JasperHeader {
    fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let out = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall)?;
        if self.flags & !FLAGS_KNOWN != 0 {
            return Err(Error::OutOfRange);
        }
        out[field::TYPE] = HEADER_TYPE;
        out[field::VERSION] = VERSION;
        out[field::FLAGS] = self.flags;
        out[field::RESERVED] = 0;
        put_u64(out, field::PACKET_SEQ, self.packet_seq);
        put_u64(out, field::SEND_TIME, self.send_time.0);
        put_u64(out, field::DEADLINE, self.deadline.0);
        Ok(HEADER_LEN)
    }
}

/// A parsed Jasper market-data datagram.
#[derive(Clone, Copy, Debug)]
pub struct MarketData<'a> {
    /// The MoldUDP64 view (session, sequence of the header message, count including it).
    pub mold: MoldPacket<&'a [u8]>,
    /// The Jasper header.
    pub header: JasperHeader,
}

impl<'a> MarketData<'a> {
    /// The ITCH message bodies after the header, in order (parse each with
    /// [`crate::itch::Message::parse`]).
    pub fn messages(&self) -> mold::Messages<'a> {
        let mut messages = self.mold.messages_ref();
        // The first message is the header, checked by `parse_market_data`.
        let _header = messages.next();
        debug_assert!(_header.is_some());
        messages
    }

    /// Number of ITCH messages (MoldUDP64 count minus the header).
    pub fn message_count(&self) -> u16 {
        self.mold.message_count().saturating_sub(1)
    }

    /// The session.
    pub fn session(&self) -> Session {
        self.mold.session()
    }

    /// MoldUDP64 sequence number of the first ITCH message (the header's plus one).
    pub fn first_message_seq(&self) -> u64 {
        self.mold.sequence().wrapping_add(1)
    }

    /// MoldUDP64 sequence number the next packet starts at.
    pub fn next_sequence(&self) -> u64 {
        self.mold.next_sequence()
    }
}

/// Parses a whole market-data datagram: a checked MoldUDP64 packet whose first message is a
/// valid [`JasperHeader`]. Heartbeats, end-of-session packets and packets without a header
/// yield [`Error::NoHeader`] (read them with [`MoldPacket::new_checked`]). ITCH messages are
/// not parsed here.
///
/// Agrees with [`crate::classify`]: a datagram it does not call [`Kind::MarketData`] (e.g. a
/// session starting with a non-ASCII byte, as control and order magics do) is
/// [`Error::Malformed`].
pub fn parse_market_data(datagram: &[u8]) -> Result<MarketData<'_>, Error> {
    let mold = MoldPacket::new_checked(datagram)?;
    if crate::classify(datagram) != Kind::MarketData {
        return Err(Error::Malformed);
    }
    let first = mold.messages_ref().next().ok_or(Error::NoHeader)?;
    let header = JasperHeader::parse(first)?;
    Ok(MarketData { mold, header })
}

/// Sets the [`RETRANSMISSION`] flag in place in a stored market-data datagram before the
/// rewinder sends it again.
pub fn mark_retransmission(datagram: &mut [u8]) -> Result<(), Error> {
    let mut header = parse_market_data(datagram)?.header;
    header.flags |= RETRANSMISSION;
    let body = &mut datagram[HEADER_OFFSET..HEADER_OFFSET + HEADER_LEN];
    header.emit(body)?;
    Ok(())
}

/// Builds one Jasper market-data packet: a MoldUDP64 packet with a [`JasperHeader`] first.
///
/// The header slot is reserved by [`MarketDataBuilder::new`] and written by
/// [`MarketDataBuilder::finish`], so the send timestamp can be taken just before sending.
#[derive(Debug)]
pub struct MarketDataBuilder<'a> {
    mold: MoldBuilder<'a>,
}

impl<'a> MarketDataBuilder<'a> {
    /// Starts a packet of `session` whose header message has MoldUDP64 sequence `first_seq`
    /// (so its first ITCH message is `first_seq + 1`).
    ///
    /// # Panics
    /// If `buf` cannot hold the MoldUDP64 header and the Jasper header (a caller bug).
    pub fn new(buf: &'a mut [u8], session: Session, first_seq: u64) -> Self {
        assert!(
            buf.len() >= HEADER_OFFSET + HEADER_LEN,
            "buffer cannot hold the headers"
        );
        let mut mold = MoldBuilder::new(buf, session, first_seq);
        let placeholder = JasperHeader::default();
        // The buffer holds both headers (asserted above), so the push cannot fail.
        mold.push(&placeholder)
            .expect("buffer holds the Jasper header");
        Self { mold }
    }

    /// Appends one ITCH message (or any [`Emit`]); [`Error::Full`] if it does not fit.
    pub fn push(&mut self, msg: &(impl Emit + ?Sized)) -> Result<(), Error> {
        self.mold.push(msg)
    }

    /// ITCH messages pushed so far (the header not counted).
    pub fn count(&self) -> u16 {
        self.mold.count() - 1
    }

    /// Whether no ITCH message has been pushed.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Bytes written so far, headers included.
    pub fn len(&self) -> usize {
        self.mold.len()
    }

    /// Largest message body that still fits.
    pub fn remaining(&self) -> usize {
        self.mold.remaining()
    }

    /// MoldUDP64 sequence number the next packet should start at.
    pub fn next_sequence(&self) -> u64 {
        self.mold.next_sequence()
    }

    /// Writes `header` into its slot and returns the datagram's length.
    pub fn finish(mut self, header: &JasperHeader) -> Result<usize, Error> {
        header.emit(
            self.mold
                .written_mut(HEADER_OFFSET..HEADER_OFFSET + HEADER_LEN),
        )?;
        Ok(self.mold.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Raw;

    fn header() -> JasperHeader {
        JasperHeader {
            packet_seq: 7,
            send_time: ExchangeTime(1_000),
            deadline: ExchangeTime(51_000),
            flags: 0,
        }
    }

    #[test]
    fn header_round_trip_and_layout() {
        let mut buf = [0u8; HEADER_LEN];
        assert_eq!(header().emit(&mut buf), Ok(HEADER_LEN));
        assert_eq!(buf[..4], [b'j', 1, 0, 0]);
        assert_eq!(buf[4..12], 7u64.to_be_bytes());
        assert_eq!(buf[12..20], 1000u64.to_be_bytes());
        assert_eq!(buf[20..28], 51000u64.to_be_bytes());
        assert_eq!(JasperHeader::parse(&buf), Ok(header()));
        assert_eq!(JasperHeader::parse(&buf[..27]), Err(Error::Truncated));
        buf[1] = 2;
        assert_eq!(JasperHeader::parse(&buf), Err(Error::Malformed));
        buf[1] = 1;
        buf[2] = 0x80;
        assert_eq!(JasperHeader::parse(&buf), Err(Error::Malformed));
        buf[0] = b'A';
        assert_eq!(JasperHeader::parse(&buf), Err(Error::NoHeader));
    }

    #[test]
    fn a_snapshot_part_carries_its_index_and_count_in_the_deadline() {
        let part = JasperHeader::snapshot(900, ExchangeTime(5), 2, 7);
        let mut buf = [0u8; HEADER_LEN];
        part.emit(&mut buf).unwrap();
        assert_eq!(buf[2], SNAPSHOT);
        assert_eq!(buf[20..24], 2u32.to_be_bytes());
        assert_eq!(buf[24..28], 7u32.to_be_bytes());
        let parsed = JasperHeader::parse(&buf).unwrap();
        assert_eq!(parsed.snapshot_part(), Some((2, 7)));
        assert!(parsed.is_snapshot() && !parsed.is_retransmission());
        assert_eq!(header().snapshot_part(), None, "not a snapshot");
        let beyond = JasperHeader::snapshot(900, ExchangeTime(5), 7, 7);
        assert_eq!(beyond.snapshot_part(), None, "an index past the count");
    }

    #[test]
    fn build_parse_market_data() {
        let session = Session::new("JASPER").unwrap();
        let mut buf = [0u8; 1500];
        let mut b = MarketDataBuilder::new(&mut buf, session, 100);
        assert!(b.is_empty());
        b.push(&Raw(b"D-one")).unwrap();
        b.push(&Raw(b"D-two")).unwrap();
        assert_eq!(b.count(), 2);
        assert_eq!(b.next_sequence(), 103);
        let len = b.finish(&header()).unwrap();
        let md = parse_market_data(&buf[..len]).unwrap();
        assert_eq!(md.header, header());
        assert_eq!(md.session(), session);
        assert_eq!(md.mold.sequence(), 100);
        assert_eq!(md.mold.count(), 3);
        assert_eq!(md.first_message_seq(), 101);
        assert_eq!(md.next_sequence(), 103);
        assert_eq!(md.message_count(), 2);
        let msgs: Vec<&[u8]> = md.messages().collect();
        assert_eq!(msgs, [b"D-one", b"D-two"]);

        // A non-ASCII first session byte is not market data (found by fuzzing).
        let mut foreign = buf;
        foreign[0] = 0xB7;
        assert_eq!(
            parse_market_data(&foreign[..len]).unwrap_err(),
            Error::Malformed
        );

        mark_retransmission(&mut buf[..len]).unwrap();
        let md = parse_market_data(&buf[..len]).unwrap();
        assert!(md.header.is_retransmission());
        assert_eq!(md.header.packet_seq, 7);
    }

    #[test]
    fn heartbeat_is_not_market_data() {
        let mut buf = [0u8; 20];
        mold::emit_heartbeat(&mut buf, Session::default(), 5).unwrap();
        assert_eq!(parse_market_data(&buf).unwrap_err(), Error::NoHeader);
        let mut buf = [0u8; 64];
        let mut b = MoldBuilder::new(&mut buf, Session::default(), 1);
        b.push(&Raw(b"Dxxxxxxx")).unwrap();
        let len = b.finish();
        assert_eq!(parse_market_data(&buf[..len]).unwrap_err(), Error::NoHeader);
    }

    #[test]
    fn builder_capacity() {
        let mut buf = [0u8; 2000];
        let mut b = MarketDataBuilder::new(&mut buf, Session::default(), 1);
        assert_eq!(b.remaining(), ITCH_BYTES_MAX - BLOCK_HEADER_LEN);
        assert_eq!(b.remaining(), MESSAGE_LEN_MAX);
        assert!(b.push(&Raw(&[0u8; MESSAGE_LEN_MAX + 1])).is_err());
        while b.push(&Raw(&[0u8; 36])).is_ok() {}
        assert_eq!(usize::from(b.count()), ITCH_BYTES_MAX / 38);
        let len = b.finish(&header()).unwrap();
        assert!(len <= mold::PAYLOAD_MAX);
    }
}
