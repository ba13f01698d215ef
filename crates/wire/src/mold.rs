//! MoldUDP64: NASDAQ's sequenced, session-scoped framing for ITCH over UDP.
//!
//! ```text
//!  offset  len  field
//!  0       10   session       ASCII, e.g. "JASPER0001"
//!  10      8    sequence      sequence number of the first message (u64 BE)
//!  18      2    count         messages in this packet (u16 BE); 0 = heartbeat,
//!                             0xFFFF = end of session
//!  20      ..   message blocks, each: length (u16 BE) + that many bytes of message
//! ```
//!
//! A heartbeat carries the sequence number of the *next* message the sender will send; so
//! does an end-of-session packet. A retransmission request ([`Request`]) is the 20-byte header
//! alone, sent to the rewinder, naming the first missing message and how many.
//!
//! Jasper packets are at most [`PAYLOAD_MAX`] bytes (the whole UDP payload, header included) so
//! that one fits an MTU. [`MoldPacket::new_checked`] does not enforce that limit, so it also
//! reads NASDAQ's own, larger packets.

use crate::bytes::{get_array, get_u16, get_u64, put_u16, put_u64};
use crate::{Emit, Error};
use core::fmt;

mod field {
    use crate::bytes::Field;
    pub(super) const SESSION: Field = 0..10;
    pub(super) const SEQUENCE: Field = 10..18;
    pub(super) const COUNT: Field = 18..20;
    pub(super) const PAYLOAD: usize = 20;
    /// Length prefix of each message block.
    pub(super) const BLOCK_LEN: usize = 2;
}

/// Bytes of the MoldUDP64 downstream header (and of a retransmission request).
pub const HEADER_LEN: usize = field::PAYLOAD;
/// Largest Jasper MoldUDP64 datagram, header included (fits one Ethernet MTU with room for
/// IPv4/UDP and tunnel headers).
pub const PAYLOAD_MAX: usize = 1400;
/// `count` value of a heartbeat.
pub const COUNT_HEARTBEAT: u16 = 0;
/// `count` value of an end-of-session packet.
pub const COUNT_END_OF_SESSION: u16 = 0xFFFF;
/// Bytes of the length prefix in front of each message.
pub const BLOCK_HEADER_LEN: usize = field::BLOCK_LEN;

const _: () = assert!(HEADER_LEN == 10 + 8 + 2);
const _: () = assert!(field::COUNT.end == HEADER_LEN);
const _: () = assert!(PAYLOAD_MAX > HEADER_LEN + BLOCK_HEADER_LEN);
const _: () = assert!(PAYLOAD_MAX <= u16::MAX as usize);

/// A MoldUDP64 session name: 10 bytes, ASCII alphanumeric, padded with spaces on the right.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Session(pub [u8; 10]);

impl Session {
    /// From a name of at most 10 ASCII alphanumeric characters, padded with spaces; `None` if
    /// the name is too long or has other characters.
    pub fn new(name: &str) -> Option<Self> {
        let bytes = name.as_bytes();
        if bytes.len() > 10 || !bytes.iter().all(u8::is_ascii_alphanumeric) {
            return None;
        }
        let mut s = [b' '; 10];
        s[..bytes.len()].copy_from_slice(bytes);
        Some(Self(s))
    }

    /// Whether the bytes are what [`Session::new`] makes: ASCII letters and digits, then
    /// spaces to the end (off the network, anything else is corrupt or forged).
    pub fn is_well_formed(&self) -> bool {
        let name = self
            .0
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        self.0[name..].iter().all(|&b| b == b' ')
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 10] {
        &self.0
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Session(\"{}\")", self.0.escape_ascii())
    }
}

/// A read-only (or, with [`MoldPacket::new_unchecked`] over `&mut [u8]`, writable) view of a
/// MoldUDP64 downstream packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoldPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MoldPacket<T> {
    /// Wraps `buffer` without any check. Accessors may panic if the buffer is not a valid
    /// packet; use [`MoldPacket::new_checked`] for untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` after checking that it is a whole, well-formed packet: a full header;
    /// for a data packet, exactly `count` length-prefixed messages each within bounds and no
    /// trailing bytes; for a heartbeat or end-of-session packet, nothing after the header.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// The validation behind [`MoldPacket::new_checked`].
    pub fn check_len(&self) -> Result<(), Error> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let count = get_u16(data, field::COUNT);
        let mut rest = &data[HEADER_LEN..];
        if count == COUNT_HEARTBEAT || count == COUNT_END_OF_SESSION {
            return if rest.is_empty() {
                Ok(())
            } else {
                Err(Error::BadLength)
            };
        }
        for _ in 0..count {
            let [hi, lo, tail @ ..] = rest else {
                return Err(Error::Truncated);
            };
            let len = usize::from(u16::from_be_bytes([*hi, *lo]));
            if tail.len() < len {
                return Err(Error::Truncated);
            }
            rest = &tail[len..];
        }
        if rest.is_empty() {
            Ok(())
        } else {
            Err(Error::BadLength)
        }
    }

    /// The session.
    pub fn session(&self) -> Session {
        Session(get_array(self.buffer.as_ref(), field::SESSION))
    }

    /// Sequence number of the first message (for heartbeats and end of session: of the next
    /// message to be sent).
    pub fn sequence(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::SEQUENCE)
    }

    /// The raw `count` field (0 for a heartbeat, 0xFFFF for end of session).
    pub fn count(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::COUNT)
    }

    /// Messages carried: `count`, or 0 for heartbeats and end of session.
    pub fn message_count(&self) -> u16 {
        match self.count() {
            COUNT_END_OF_SESSION => 0,
            n => n,
        }
    }

    /// Sequence number one past the last message in this packet.
    pub fn next_sequence(&self) -> u64 {
        self.sequence()
            .wrapping_add(u64::from(self.message_count()))
    }

    /// Whether this is a heartbeat (count 0).
    pub fn is_heartbeat(&self) -> bool {
        self.count() == COUNT_HEARTBEAT
    }

    /// Whether this is an end-of-session packet (count 0xFFFF).
    pub fn is_end_of_session(&self) -> bool {
        self.count() == COUNT_END_OF_SESSION
    }

    /// The message blocks after the header, length prefixes included.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// The message bodies, in order, without their length prefixes.
    pub fn messages(&self) -> Messages<'_> {
        Messages {
            rest: self.payload(),
            left: self.message_count(),
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<'a> MoldPacket<&'a [u8]> {
    /// Like [`MoldPacket::messages`], but borrowing the underlying slice rather than the view.
    pub fn messages_ref(&self) -> Messages<'a> {
        let rest = self.buffer.get(HEADER_LEN..).unwrap_or_default();
        Messages {
            rest,
            left: self.message_count(),
        }
    }
}

/// Iterator over the message bodies of a checked [`MoldPacket`].
///
/// Stops early (rather than panicking) if the bytes run out, which a checked packet never
/// does.
#[derive(Clone, Debug)]
pub struct Messages<'a> {
    rest: &'a [u8],
    left: u16,
}

impl<'a> Iterator for Messages<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let [hi, lo, tail @ ..] = self.rest else {
            self.left = 0;
            return None;
        };
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        let Some((body, rest)) = tail.split_at_checked(len) else {
            self.left = 0;
            return None;
        };
        self.rest = rest;
        self.left -= 1;
        Some(body)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(usize::from(self.left)))
    }
}

/// Builds one MoldUDP64 data packet in a caller's buffer, at most [`PAYLOAD_MAX`] bytes.
///
/// The header is written by [`MoldBuilder::new`] and the count after every push, so the bytes
/// `buf[..len()]` are a valid packet at all times.
#[derive(Debug)]
pub struct MoldBuilder<'a> {
    buf: &'a mut [u8],
    len: usize,
    count: u16,
    limit: usize,
}

impl<'a> MoldBuilder<'a> {
    /// Starts a packet of `session` whose first message has sequence number `first_seq`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`HEADER_LEN`] (a caller bug, not an input).
    pub fn new(buf: &'a mut [u8], session: Session, first_seq: u64) -> Self {
        assert!(
            buf.len() >= HEADER_LEN,
            "MoldBuilder buffer shorter than the header"
        );
        let limit = buf.len().min(PAYLOAD_MAX);
        buf[field::SESSION].copy_from_slice(&session.0);
        put_u64(buf, field::SEQUENCE, first_seq);
        put_u16(buf, field::COUNT, 0);
        Self {
            buf,
            len: HEADER_LEN,
            count: 0,
            limit,
        }
    }

    /// Appends one length-prefixed message; [`Error::Full`] (and nothing written) if it does not
    /// fit within [`PAYLOAD_MAX`] or the buffer, or the count would reach 0xFFFF. Errors from
    /// `msg.emit` (e.g. [`Error::OutOfRange`]) are passed on, also writing nothing.
    pub fn push(&mut self, msg: &(impl Emit + ?Sized)) -> Result<(), Error> {
        let body_len = msg.buffer_len();
        if self.len + BLOCK_HEADER_LEN + body_len > self.limit
            || self.count >= COUNT_END_OF_SESSION - 1
        {
            return Err(Error::Full);
        }
        let start = self.len + BLOCK_HEADER_LEN;
        let written = msg.emit(&mut self.buf[start..start + body_len])?;
        assert_eq!(
            written, body_len,
            "Emit::emit wrote other than buffer_len() bytes"
        );
        // `body_len <= remaining() <= PAYLOAD_MAX <= u16::MAX`, so the cast is lossless.
        put_u16(self.buf, self.len..start, body_len as u16);
        self.len = start + body_len;
        self.count += 1;
        put_u16(self.buf, field::COUNT, self.count);
        debug_assert!(self.len <= self.limit);
        Ok(())
    }

    /// Largest message body that still fits.
    pub fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.len + BLOCK_HEADER_LEN)
    }

    /// Messages pushed so far.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Whether no message has been pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes written so far, header included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Sequence number of the first message.
    pub fn sequence(&self) -> u64 {
        get_u64(self.buf, field::SEQUENCE)
    }

    /// Sequence number the next packet should start at.
    pub fn next_sequence(&self) -> u64 {
        self.sequence().wrapping_add(u64::from(self.count))
    }

    /// The packet so far (valid at all times).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Ends the packet and returns its length in bytes (the datagram is `buf[..len]`).
    ///
    /// A packet with no message pushed reads as a heartbeat.
    pub fn finish(self) -> usize {
        debug_assert_eq!(get_u16(self.buf, field::COUNT), self.count);
        self.len
    }

    /// Already-written bytes, for filling a reserved message in place.
    pub(crate) fn written_mut(&mut self, range: core::ops::Range<usize>) -> &mut [u8] {
        &mut self.buf[..self.len][range]
    }
}

fn emit_header(buf: &mut [u8], session: Session, seq: u64, count: u16) -> Result<usize, Error> {
    let out = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall)?;
    out[field::SESSION].copy_from_slice(&session.0);
    put_u64(out, field::SEQUENCE, seq);
    put_u16(out, field::COUNT, count);
    Ok(HEADER_LEN)
}

/// Writes a heartbeat (count 0) announcing `next_seq` as the next message's sequence number;
/// returns [`HEADER_LEN`].
pub fn emit_heartbeat(buf: &mut [u8], session: Session, next_seq: u64) -> Result<usize, Error> {
    emit_header(buf, session, next_seq, COUNT_HEARTBEAT)
}

/// Writes an end-of-session packet (count 0xFFFF); returns [`HEADER_LEN`].
pub fn emit_end_of_session(
    buf: &mut [u8],
    session: Session,
    next_seq: u64,
) -> Result<usize, Error> {
    emit_header(buf, session, next_seq, COUNT_END_OF_SESSION)
}

/// A standard MoldUDP64 retransmission request: the 20-byte header alone, sent to the
/// rewinder, asking for `count` messages starting at `sequence`.
///
/// Jasper nodes send [`crate::control::Repr::RetransmitRequest`] instead (it names the
/// requester); this form serves standard tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    /// Session of the missing messages.
    pub session: Session,
    /// Sequence number of the first missing message.
    pub sequence: u64,
    /// How many messages are requested.
    pub count: u16,
}

impl Request {
    /// Parses a request datagram (exactly [`HEADER_LEN`] bytes).
    pub fn parse(buf: &[u8]) -> Result<Self, Error> {
        match buf.len() {
            n if n < HEADER_LEN => Err(Error::Truncated),
            HEADER_LEN => Ok(Self {
                session: Session(get_array(buf, field::SESSION)),
                sequence: get_u64(buf, field::SEQUENCE),
                count: get_u16(buf, field::COUNT),
            }),
            _ => Err(Error::BadLength),
        }
    }
}

impl Emit for Request {
    fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        emit_header(buf, self.session, self.sequence, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Raw;

    fn session() -> Session {
        Session::new("JASPER01").unwrap()
    }

    #[test]
    fn session_new() {
        assert_eq!(session().0, *b"JASPER01  ");
        assert!(Session::new("JASPER01234").is_none());
        assert!(Session::new("a b").is_none());
        assert_eq!(format!("{:?}", session()), "Session(\"JASPER01  \")");
        assert!(session().is_well_formed());
        assert!(Session::new("").unwrap().is_well_formed());
        assert!(Session::new("JASPER0123").unwrap().is_well_formed());
        for bad in [*b"JASP904\xc9D8", *b"JAS PER   ", *b" JASPER   ", [0; 10]] {
            assert!(!Session(bad).is_well_formed(), "{:?}", Session(bad));
        }
    }

    #[test]
    fn build_and_parse() {
        let mut buf = [0u8; 2000];
        let mut b = MoldBuilder::new(&mut buf, session(), 41);
        assert!(b.is_empty());
        b.push(&Raw(b"hello")).unwrap();
        b.push(&Raw(b"")).unwrap();
        b.push(&Raw(b"xyz")).unwrap();
        assert_eq!(b.count(), 3);
        assert_eq!(b.next_sequence(), 44);
        let len = b.finish();
        assert_eq!(len, HEADER_LEN + 2 + 5 + 2 + 2 + 3);
        let p = MoldPacket::new_checked(&buf[..len]).unwrap();
        assert_eq!(p.session(), session());
        assert_eq!(p.sequence(), 41);
        assert_eq!(p.count(), 3);
        assert_eq!(p.next_sequence(), 44);
        assert!(!p.is_heartbeat() && !p.is_end_of_session());
        let msgs: Vec<&[u8]> = p.messages().collect();
        assert_eq!(msgs, [&b"hello"[..], b"", b"xyz"]);
        assert_eq!(p.messages_ref().count(), 3);
        // Every strict prefix is rejected; so is a trailing byte.
        for cut in 0..len {
            assert!(MoldPacket::new_checked(&buf[..cut]).is_err(), "cut {cut}");
        }
        assert_eq!(
            MoldPacket::new_checked(&buf[..len + 1]).unwrap_err(),
            Error::BadLength
        );
    }

    #[test]
    fn builder_respects_payload_max() {
        let mut buf = [0u8; 4000];
        let mut b = MoldBuilder::new(&mut buf, session(), 1);
        let body = [7u8; 100];
        let mut n = 0;
        while b.push(&Raw(&body)).is_ok() {
            n += 1;
        }
        assert_eq!(n, (PAYLOAD_MAX - HEADER_LEN) / 102);
        assert!(b.len() <= PAYLOAD_MAX);
        assert_eq!(b.push(&Raw(&body)), Err(Error::Full));
        let rem = b.remaining();
        b.push(&Raw(&body[..rem])).unwrap();
        assert_eq!(b.len(), PAYLOAD_MAX);
        assert_eq!(b.push(&Raw(b"")), Err(Error::Full));
        let len = b.finish();
        let p = MoldPacket::new_checked(&buf[..len]).unwrap();
        assert_eq!(usize::from(p.count()), n + 1);
    }

    #[test]
    fn small_buffer_limits_builder() {
        let mut buf = [0u8; 30];
        let mut b = MoldBuilder::new(&mut buf, session(), 1);
        assert_eq!(b.remaining(), 8);
        assert_eq!(b.push(&Raw(&[1; 9])), Err(Error::Full));
        b.push(&Raw(&[1; 8])).unwrap();
        assert_eq!(b.finish(), 30);
    }

    #[test]
    fn heartbeat_and_end_of_session() {
        let mut buf = [0u8; 64];
        assert_eq!(emit_heartbeat(&mut buf, session(), 99), Ok(HEADER_LEN));
        let p = MoldPacket::new_checked(&buf[..HEADER_LEN]).unwrap();
        assert!(p.is_heartbeat());
        assert_eq!(p.sequence(), 99);
        assert_eq!(p.messages().count(), 0);
        assert_eq!(emit_end_of_session(&mut buf, session(), 99), Ok(HEADER_LEN));
        let p = MoldPacket::new_checked(&buf[..HEADER_LEN]).unwrap();
        assert!(p.is_end_of_session());
        assert_eq!(p.message_count(), 0);
        assert_eq!(p.next_sequence(), 99);
        assert_eq!(
            MoldPacket::new_checked(&buf[..HEADER_LEN + 1]).unwrap_err(),
            Error::BadLength
        );
        assert_eq!(
            emit_heartbeat(&mut buf[..19], session(), 1),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn request_round_trip() {
        let r = Request {
            session: session(),
            sequence: 1234,
            count: 7,
        };
        let mut buf = [0u8; HEADER_LEN];
        assert_eq!(r.emit(&mut buf), Ok(HEADER_LEN));
        assert_eq!(Request::parse(&buf), Ok(r));
        assert_eq!(Request::parse(&buf[..19]), Err(Error::Truncated));
    }
}
