//! The numbered-response envelope: one order response on its way down from the root to a
//! participant's gateways, numbered in the participant's stream of responses.
//!
//! The root numbers every response it sends a participant 1, 2, 3, ... (one stream per
//! participant, shared by its gateways), as SoupBinTCP numbers a session's sequenced
//! messages. A gateway delivers them in that order, exactly once; a gap in the numbers means a
//! response was lost on the way, and the gateway asks for it again
//! ([`crate::control::Repr::ResponseGap`]). The root tells a participant's gateways the number
//! of its next response when their stream goes quiet
//! ([`crate::control::Repr::ResponseStatus`]), so a lost last response is missed too.
//!
//! # Layout (big-endian)
//!
//! ```text
//!  offset  len  field
//!  0       1    magic       0xFC
//!  1       1    version     1
//!  2       2    reserved    0
//!  4       8    seq         the response's number in its participant's stream, from 1
//!  12      ..   the order-entry datagram (a `Down` message of [`crate::order`])
//! ```

use crate::bytes::{get_u16, get_u64, put_u16, put_u64};
use crate::order::{self, Direction};
use crate::{Emit, Error, VERSION};

/// First byte of a numbered response.
pub const MAGIC: u8 = 0xFC;

mod field {
    use crate::bytes::Field;
    pub(super) const MAGIC: usize = 0;
    pub(super) const VERSION: usize = 1;
    pub(super) const RESERVED: Field = 2..4;
    pub(super) const SEQ: Field = 4..12;
    pub(super) const ORDER: usize = 12;
}

/// Bytes in front of the order message.
pub const HEADER_LEN: usize = field::ORDER;
const _: () = assert!(HEADER_LEN == 12);
const _: () = assert!(field::RESERVED.end == field::SEQ.start);
const _: () = assert!(field::SEQ.end == field::ORDER);
const _: () = assert!(
    MAGIC >= 0x80
        && MAGIC != order::MAGIC
        && MAGIC != crate::control::MAGIC
        && MAGIC != crate::hop::MAGIC
);

/// Bytes of the longest numbered response (an `Accepted` inside).
pub const DATAGRAM_MAX: usize = HEADER_LEN + order::Accepted::LEN;
const _: () = assert!(
    order::Accepted::LEN >= order::Replaced::LEN
        && order::Accepted::LEN >= order::Canceled::LEN
        && order::Accepted::LEN >= order::Executed::LEN
        && order::Accepted::LEN >= order::Rejected::LEN
);

/// A parsed numbered response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    /// Its number in the participant's stream (from 1).
    pub seq: u64,
    /// The order-entry datagram inside, already checked to be a whole `Down` message.
    pub order: &'a [u8],
}

impl<'a> Response<'a> {
    /// Parses an envelope and checks that it holds exactly one downward order message.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, Error> {
        if datagram.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if datagram[field::MAGIC] != MAGIC
            || datagram[field::VERSION] != VERSION
            || get_u16(datagram, field::RESERVED) != 0
        {
            return Err(Error::Malformed);
        }
        let seq = get_u64(datagram, field::SEQ);
        if seq == 0 {
            return Err(Error::OutOfRange);
        }
        let inner = &datagram[field::ORDER..];
        let packet = order::Packet::new_checked(inner)?;
        if packet.direction() != Direction::Down {
            return Err(Error::Malformed);
        }
        Ok(Self { seq, order: inner })
    }
}

/// Writes response number `seq` (from 1) of its participant around `order`; returns the
/// length written.
pub fn emit(buf: &mut [u8], seq: u64, order: &(impl Emit + ?Sized)) -> Result<usize, Error> {
    let len = HEADER_LEN + order.buffer_len();
    if buf.len() < len {
        return Err(Error::BufferTooSmall);
    }
    if seq == 0 {
        return Err(Error::OutOfRange);
    }
    buf[field::MAGIC] = MAGIC;
    buf[field::VERSION] = VERSION;
    put_u16(buf, field::RESERVED, 0);
    put_u64(buf, field::SEQ, seq);
    order.emit(&mut buf[field::ORDER..len])?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ExchangeTime;
    use crate::order::{Cancel, OrderHeader, RejectReason, Rejected, Repr};

    fn rejected() -> Repr {
        Repr::Rejected(Rejected {
            header: OrderHeader {
                client_order_id: 9,
                participant_id: 3,
                gateway_id: 40,
                time: ExchangeTime(77),
            },
            reason: RejectReason::InvalidStock,
        })
    }

    #[test]
    fn round_trip_and_layout() {
        let mut buf = [0u8; 64];
        let len = emit(&mut buf, 0x0102_0304_0506_0708, &rejected()).unwrap();
        assert_eq!(len, HEADER_LEN + rejected().buffer_len());
        assert_eq!(crate::classify(&buf[..len]), crate::Kind::Response);
        assert_eq!(buf[..4], [0xFC, 1, 0, 0]);
        assert_eq!(buf[4..12], 0x0102_0304_0506_0708u64.to_be_bytes());
        let r = Response::parse(&buf[..len]).unwrap();
        assert_eq!(r.seq, 0x0102_0304_0506_0708);
        assert_eq!(Repr::parse(r.order).unwrap(), rejected());
    }

    #[test]
    fn rejects_bad_envelopes() {
        let mut buf = [0u8; 64];
        let len = emit(&mut buf, 5, &rejected()).unwrap();
        assert_eq!(Response::parse(&buf[..5]), Err(Error::Truncated));
        assert!(Response::parse(&buf[..len - 1]).is_err(), "inner cut short");
        for (at, value) in [(1, 2), (2, 1), (3, 1)] {
            let mut bad = buf;
            bad[at] = value;
            assert_eq!(Response::parse(&bad[..len]), Err(Error::Malformed), "{at}");
        }
        let mut zero = buf;
        zero[4..12].fill(0);
        assert_eq!(Response::parse(&zero[..len]), Err(Error::OutOfRange));
        assert_eq!(emit(&mut buf, 0, &rejected()), Err(Error::OutOfRange));
        assert_eq!(
            emit(&mut [0u8; 20], 1, &rejected()),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn refuses_an_upward_message() {
        let cancel = Repr::Cancel(Cancel {
            header: *rejected().header(),
            orig_client_order_id: 1,
            shares: 0,
        });
        let mut buf = [0u8; 64];
        let len = emit(&mut buf, 1, &cancel).unwrap();
        assert_eq!(Response::parse(&buf[..len]), Err(Error::Malformed));
    }
}
