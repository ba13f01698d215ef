//! The inbound hop envelope: one order-entry message on its way up the tree, stamped with the
//! time the sending hop sent it.
//!
//! Pacing (DESIGN.md §4) needs each node to know the one-way delay of the orders it sends to
//! its parent. The parent measures it, as its exchange time of receipt minus the hop's send
//! stamp, and feeds the median back (a [`crate::control::Repr::PacingFeedback`]). The order's
//! own `time` field stays the gateway's generation time, which the sequencer needs; each
//! forwarding hop rewrites only the stamp ([`restamp`]).
//!
//! `attempt` numbers the gateway's transmissions of one order: 0 for the first, one more for
//! each time it sends the order again (no answer yet, or its parent failed over). Hedged
//! copies of one transmission share it, so a proxy tells a twin (drop it) from a copy sent
//! again (pass it on); the root keeps the first copy of any attempt.
//!
//! # Layout (big-endian)
//!
//! ```text
//!  offset  len  field
//!  0       1    magic       0xFD
//!  1       1    version     1
//!  2       2    attempt     transmissions of this order before this one
//!  4       8    send_time   ns, exchange time at which this hop sent it
//!  12      ..   the order-entry datagram (an `Up` message of [`crate::order`])
//! ```

use crate::bytes::{get_u16, get_u64, put_u16, put_u64};
use crate::order::{self, Direction};
use crate::{Emit, Error, ExchangeTime, VERSION};

/// First byte of a hop envelope.
pub const MAGIC: u8 = 0xFD;

mod field {
    use crate::bytes::Field;
    pub(super) const MAGIC: usize = 0;
    pub(super) const VERSION: usize = 1;
    pub(super) const ATTEMPT: Field = 2..4;
    pub(super) const SEND_TIME: Field = 4..12;
    pub(super) const ORDER: usize = 12;
}

/// Bytes in front of the order message.
pub const HEADER_LEN: usize = field::ORDER;
const _: () = assert!(HEADER_LEN == 12);
const _: () = assert!(field::ATTEMPT.end == field::SEND_TIME.start);
const _: () = assert!(MAGIC >= 0x80 && MAGIC != order::MAGIC && MAGIC != crate::control::MAGIC);

/// A parsed hop envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop<'a> {
    /// When the sending hop sent it, in that hop's exchange time.
    pub send_time: ExchangeTime,
    /// The gateway's transmissions of this order before this one (0: the first).
    pub attempt: u16,
    /// The order-entry datagram inside, already checked to be a whole `Up` message.
    pub order: &'a [u8],
}

impl<'a> Hop<'a> {
    /// Parses an envelope and checks that it holds exactly one upward order message.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, Error> {
        if datagram.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if datagram[field::MAGIC] != MAGIC || datagram[field::VERSION] != VERSION {
            return Err(Error::Malformed);
        }
        let inner = &datagram[field::ORDER..];
        let packet = order::Packet::new_checked(inner)?;
        if packet.direction() != Direction::Up {
            return Err(Error::Malformed);
        }
        Ok(Self {
            send_time: ExchangeTime(get_u64(datagram, field::SEND_TIME)),
            attempt: get_u16(datagram, field::ATTEMPT),
            order: inner,
        })
    }
}

/// Writes an envelope around transmission `attempt` of `order`, stamped `send_time`; returns
/// the length written.
pub fn emit(
    buf: &mut [u8],
    send_time: ExchangeTime,
    attempt: u16,
    order: &(impl Emit + ?Sized),
) -> Result<usize, Error> {
    let len = HEADER_LEN + order.buffer_len();
    if buf.len() < len {
        return Err(Error::BufferTooSmall);
    }
    buf[field::MAGIC] = MAGIC;
    buf[field::VERSION] = VERSION;
    put_u16(buf, field::ATTEMPT, attempt);
    put_u64(buf, field::SEND_TIME, send_time.0);
    order.emit(&mut buf[field::ORDER..len])?;
    Ok(len)
}

/// Rewrites the send stamp of an envelope in place (a forwarding hop).
pub fn restamp(datagram: &mut [u8], send_time: ExchangeTime) -> Result<(), Error> {
    if datagram.len() < HEADER_LEN || datagram[field::MAGIC] != MAGIC {
        return Err(Error::Malformed);
    }
    put_u64(datagram, field::SEND_TIME, send_time.0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::{Cancel, OrderHeader, Repr};

    fn cancel() -> Repr {
        Repr::Cancel(Cancel {
            header: OrderHeader {
                client_order_id: 9,
                participant_id: 3,
                gateway_id: 40,
                time: ExchangeTime(77),
            },
            orig_client_order_id: 5,
            shares: 0,
        })
    }

    #[test]
    fn round_trip_and_restamp() {
        let mut buf = [0u8; 128];
        let len = emit(&mut buf, ExchangeTime(1_000), 3, &cancel()).unwrap();
        assert_eq!(crate::classify(&buf[..len]), crate::Kind::Hop);
        assert_eq!(buf[2..4], [0, 3], "the attempt, big-endian at offset 2");
        let hop = Hop::parse(&buf[..len]).unwrap();
        assert_eq!(hop.send_time, ExchangeTime(1_000));
        assert_eq!(hop.attempt, 3);
        assert_eq!(Repr::parse(hop.order).unwrap(), cancel());
        restamp(&mut buf[..len], ExchangeTime(2_000)).unwrap();
        let hop = Hop::parse(&buf[..len]).unwrap();
        assert_eq!(hop.send_time, ExchangeTime(2_000));
        assert_eq!(hop.attempt, 3, "a forwarding hop keeps the attempt");
        assert_eq!(
            Repr::parse(hop.order).unwrap(),
            cancel(),
            "the order is untouched"
        );
    }

    #[test]
    fn rejects_bad_envelopes() {
        let mut buf = [0u8; 128];
        let len = emit(&mut buf, ExchangeTime(1), 0, &cancel()).unwrap();
        assert_eq!(Hop::parse(&buf[..5]), Err(Error::Truncated));
        assert!(
            Hop::parse(&buf[..len - 1]).is_err(),
            "inner message cut short"
        );
        let mut bad = buf;
        bad[1] = 2;
        assert_eq!(Hop::parse(&bad[..len]), Err(Error::Malformed), "version");
        assert!(emit(&mut [0u8; 20], ExchangeTime(1), 0, &cancel()).is_err());
        assert!(restamp(&mut [0u8; 4], ExchangeTime(1)).is_err());
    }
}
