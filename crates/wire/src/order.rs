//! Order entry: OUCH-style messages going up (enter, replace, cancel) and coming down
//! (accepted, replaced, canceled, executed, rejected).
//!
//! Follows **OUCH 4.2** where it applies: its message letters (`O` enter, `U` replace, `X`
//! cancel; `A` accepted, `C` canceled, `E` executed, `J` rejected), its field types (shares
//! `u32`; stock 8 alphanumeric bytes; price `u32` with 4 implied decimals, as in ITCH; match
//! number `u64`), its `Display` letters (`Y`, `N`, `P` post-only) and its cancel-reason
//! letters. Differences, for the tree:
//!
//! - Every message carries the [`OrderHeader`]: participant id, gateway id, client order id
//!   and a time (up: the gateway's order generation time; down: the engine's event time).
//! - The OUCH 14-character order token becomes a numeric `client_order_id: u64` (like OUCH
//!   5.0's `UserRefNum`), unique per participant for every request (enter, replace *and*
//!   cancel each take a fresh one). `(participant_id, client_order_id)` is the dedupe key: a
//!   proxy or the root drops the copy sent by a participant's second (hedge) gateway.
//! - `Replaced` is `R` (OUCH 4.2 uses `U` for both directions; one namespace here).
//! - Time in force is a letter ([`TimeInForce`]), not OUCH 4.2's seconds; order type
//!   ([`OrderType`]: limit, market) is explicit.
//!
//! Each order datagram carries exactly one message; its length must be exactly the type's.
//!
//! # Layout (big-endian)
//!
//! ```text
//!  offset  len  field
//!  0       1    magic            0xFE
//!  1       1    version          1
//!  2       1    type             'O' 'U' 'X' (up), 'A' 'R' 'C' 'E' 'J' (down)
//!  3       1    reserved         0
//!  4       8    client_order_id  u64: this request's token (dedupe key with participant_id)
//!  12      4    participant_id   u32
//!  16      4    gateway_id       u32
//!  20      8    time             ns, exchange time (up: generation; down: event)
//!  28      ..   body
//!
//!  'O' Enter (48)        'U' Replace (44)            'X' Cancel (40)
//!  28 1 side             28 8 orig_client_order_id   28 8 orig_client_order_id
//!  29 4 shares           36 4 shares                 36 4 shares (to leave; 0 = all)
//!  33 8 stock            40 4 price
//!  41 4 price
//!  45 1 time_in_force
//!  46 1 order_type
//!  47 1 display
//!
//!  'A' Accepted (56)     'R' Replaced (52)           'C' Canceled (41)
//!  28..48 as Enter       28 8 orig_client_order_id   28 8 orig_client_order_id
//!  48 8 order_ref        36 4 shares                 36 4 canceled_shares
//!                        40 4 price                  40 1 reason
//!                        44 8 order_ref
//!
//!  'E' Executed (49)     'J' Rejected (29)
//!  28 4 shares           28 1 reason
//!  32 4 price
//!  36 8 match_number
//!  44 1 liquidity
//!  45 4 leaves_shares
//! ```
//!
//! `order_ref` is the order's reference number in the public ITCH feed, so a participant can
//! find its own orders in the book.

use crate::bytes::{WireField, byte_enum, get_u32, get_u64, layout_ok, put_u32, put_u64};
use crate::{Emit, Error, ExchangeTime, Side, Stock, VERSION};

/// First byte of every order-entry datagram.
pub const MAGIC: u8 = 0xFE;

mod field {
    use crate::bytes::Field;
    pub(super) const MAGIC: usize = 0;
    pub(super) const VERSION: usize = 1;
    pub(super) const TYPE: usize = 2;
    pub(super) const RESERVED: usize = 3;
    pub(super) const CLIENT_ORDER_ID: Field = 4..12;
    pub(super) const PARTICIPANT_ID: Field = 12..16;
    pub(super) const GATEWAY_ID: Field = 16..20;
    pub(super) const TIME: Field = 20..28;
}

/// Bytes of the envelope and [`OrderHeader`] in front of every body.
pub const HEADER_LEN: usize = field::TIME.end;
const _: () = assert!(HEADER_LEN == 28);
const _: () = assert!(field::RESERVED + 1 == field::CLIENT_ORDER_ID.start);
const _: () = assert!(field::CLIENT_ORDER_ID.end == field::PARTICIPANT_ID.start);
const _: () = assert!(field::PARTICIPANT_ID.end == field::GATEWAY_ID.start);
const _: () = assert!(field::GATEWAY_ID.end == field::TIME.start);

/// Direction of an order-entry message through the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Gateway → root: enter, replace, cancel.
    Up,
    /// Root → owning gateway: accepted, replaced, canceled, executed, rejected.
    Down,
}

/// Fields every order-entry message carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OrderHeader {
    /// The request's token, unique per participant for every request (down: the token of the
    /// request answered, or for executions and unsolicited cancels, of the order's latest
    /// enter/replace).
    pub client_order_id: u64,
    /// The participant (MP) that owns the order.
    pub participant_id: u32,
    /// The gateway that sent it (down: the gateway to deliver to).
    pub gateway_id: u32,
    /// Up: the order's generation time at the gateway. Down: the engine's event time.
    pub time: ExchangeTime,
}

impl OrderHeader {
    /// The key by which proxies drop hedged duplicates.
    pub const fn dedupe_key(&self) -> (u32, u64) {
        (self.participant_id, self.client_order_id)
    }

    fn read(b: &[u8]) -> Self {
        Self {
            client_order_id: get_u64(b, field::CLIENT_ORDER_ID),
            participant_id: get_u32(b, field::PARTICIPANT_ID),
            gateway_id: get_u32(b, field::GATEWAY_ID),
            time: ExchangeTime(get_u64(b, field::TIME)),
        }
    }

    fn write(&self, b: &mut [u8], msg_type: u8) {
        b[field::MAGIC] = MAGIC;
        b[field::VERSION] = VERSION;
        b[field::TYPE] = msg_type;
        b[field::RESERVED] = 0;
        put_u64(b, field::CLIENT_ORDER_ID, self.client_order_id);
        put_u32(b, field::PARTICIPANT_ID, self.participant_id);
        put_u32(b, field::GATEWAY_ID, self.gateway_id);
        put_u64(b, field::TIME, self.time.0);
    }
}

byte_enum! {
    /// How long an order may rest.
    pub enum TimeInForce {
        /// Rests until the end of the day.
        Day = b'D',
        /// Rests until canceled.
        GoodTillCancel = b'G',
        /// Fills what it can at once; the rest is canceled.
        ImmediateOrCancel = b'I',
        /// Fills completely at once or not at all.
        FillOrKill = b'F',
    }
}

byte_enum! {
    /// Limit or market.
    pub enum OrderType {
        /// At `price` or better.
        Limit = b'L',
        /// At any price (`price` ignored; send 0).
        Market = b'M',
    }
}

byte_enum! {
    /// OUCH 4.2 `Display` (the subset Jasper implements).
    pub enum Display {
        /// Displayed in the public feed.
        Visible = b'Y',
        /// Not displayed.
        Hidden = b'N',
        /// Displayed; rejected (never executed) if it would take liquidity on entry.
        PostOnly = b'P',
    }
}

byte_enum! {
    /// Why an order was canceled (OUCH 4.2 letters).
    pub enum CancelReason {
        /// The participant asked.
        UserRequested = b'U',
        /// The unfilled rest of an IOC or FOK order.
        ImmediateOrCancel = b'I',
        /// The day ended or the order timed out.
        Timeout = b'T',
        /// The operator canceled it.
        Supervisory = b'S',
        /// A regulatory restriction (halt).
        Regulatory = b'D',
        /// It would have traded with the same participant.
        SelfMatchPrevention = b'Q',
        /// System cancel.
        System = b'Z',
    }
}

byte_enum! {
    /// Why a request was rejected (OUCH 4.2 letters where they exist).
    pub enum RejectReason {
        /// Trading in the symbol is halted.
        Halted = b'H',
        /// Shares zero or above the limit.
        InvalidShares = b'Z',
        /// Unknown symbol.
        InvalidStock = b'S',
        /// Display not allowed for this order.
        InvalidDisplay = b'D',
        /// The exchange is closed.
        Closed = b'C',
        /// Price zero (for a limit order), off the tick grid or out of band.
        InvalidPrice = b'X',
        /// A replace or cancel names an order that is not live.
        UnknownOrder = b'U',
        /// `client_order_id` was already used by this participant.
        DuplicateClientOrderId = b'K',
        /// A post-only order would have taken liquidity.
        WouldCross = b'P',
        /// The participant's gateway could not send the order (its outbox was full, and no
        /// retry was configured to send it later): it never reached the exchange.
        Busy = b'B',
        /// Anything else.
        Other = b'O',
    }
}

byte_enum! {
    /// Whether an execution added or removed liquidity.
    pub enum Liquidity {
        /// The order was resting (maker).
        Added = b'A',
        /// The order was aggressing (taker).
        Removed = b'R',
    }
}

/// Checks the envelope (magic, version, reserved); returns the type byte.
fn check_envelope(buf: &[u8]) -> Result<u8, Error> {
    let [magic, version, t, reserved, ..] = *buf else {
        return Err(Error::Truncated);
    };
    if magic != MAGIC || version != VERSION || reserved != 0 {
        return Err(Error::Malformed);
    }
    Ok(t)
}

/// Envelope, type and exact-length check before a fixed-layout parse.
fn check(buf: &[u8], msg_type: u8, len: usize) -> Result<(), Error> {
    let t = check_envelope(buf)?;
    if t != msg_type {
        return Err(Error::UnknownType(t));
    }
    if buf.len() < len {
        return Err(Error::Truncated);
    }
    if buf.len() > len {
        return Err(Error::BadLength);
    }
    Ok(())
}

macro_rules! order_messages {
    ($(
        $(#[$meta:meta])*
        $name:ident = $ty:literal, $len:literal, $dir:ident {
            $( $(#[$fmeta:meta])* $field:ident : $fty:ty = $off:literal ),* $(,)?
        }
    )*) => {
        $(
            $(#[$meta])*
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub struct $name {
                /// Participant, gateway, client order id and time.
                pub header: OrderHeader,
                $( $(#[$fmeta])* pub $field: $fty, )*
            }

            impl $name {
                /// Message type byte.
                pub const TYPE: u8 = $ty;
                /// Bytes of the whole datagram.
                pub const LEN: usize = $len;
                /// Which way it travels.
                pub const DIRECTION: Direction = Direction::$dir;
                /// (offset, length) of every body field, in wire order, after the header.
                const FIELDS: &[(usize, usize)] = &[
                    (0, HEADER_LEN),
                    $( ($off, <$fty as WireField>::LEN), )*
                ];

                /// Parses a whole datagram of exactly [`Self::LEN`] bytes.
                pub fn parse(buf: &[u8]) -> Result<Self, Error> {
                    check(buf, Self::TYPE, Self::LEN)?;
                    Ok(Self {
                        header: OrderHeader::read(buf),
                        $( $field: <$fty as WireField>::read(
                            &buf[$off..$off + <$fty as WireField>::LEN],
                        )?, )*
                    })
                }

                /// Bytes [`Self::emit`] writes: [`Self::LEN`].
                pub const fn buffer_len(&self) -> usize {
                    Self::LEN
                }

                /// Writes the whole datagram to the start of `buf`; see [`Emit::emit`].
                pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
                    let out = buf.get_mut(..Self::LEN).ok_or(Error::BufferTooSmall)?;
                    self.header.write(out, Self::TYPE);
                    $( WireField::write(
                        &self.$field,
                        &mut out[$off..$off + <$fty as WireField>::LEN],
                    ); )*
                    Ok(Self::LEN)
                }
            }

            const _: () = assert!(layout_ok($name::FIELDS, $name::LEN));

            impl Emit for $name {
                fn buffer_len(&self) -> usize {
                    Self::LEN
                }
                fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
                    $name::emit(self, buf)
                }
            }

            impl From<$name> for Repr {
                fn from(m: $name) -> Self {
                    Self::$name(m)
                }
            }
        )*

        /// Any order-entry message.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Repr {
            $(
                $(#[$meta])*
                $name($name),
            )*
        }

        impl Repr {
            /// Every message type byte, up first.
            pub const TYPES: &[u8] = &[$($ty),*];

            /// Parses a whole order-entry datagram.
            pub fn parse(buf: &[u8]) -> Result<Self, Error> {
                match check_envelope(buf)? {
                    $( $ty => $name::parse(buf).map(Self::$name), )*
                    t => Err(Error::UnknownType(t)),
                }
            }

            /// The message type byte.
            pub const fn msg_type(&self) -> u8 {
                match self {
                    $( Self::$name(_) => $ty, )*
                }
            }

            /// Datagram length of a message of type `msg_type`, if known.
            pub const fn len_of(msg_type: u8) -> Option<usize> {
                match msg_type {
                    $( $ty => Some($len), )*
                    _ => None,
                }
            }

            /// Direction of a message of type `msg_type`, if known.
            pub const fn direction_of(msg_type: u8) -> Option<Direction> {
                match msg_type {
                    $( $ty => Some(Direction::$dir), )*
                    _ => None,
                }
            }

            /// Which way it travels.
            pub const fn direction(&self) -> Direction {
                match self {
                    $( Self::$name(_) => Direction::$dir, )*
                }
            }

            /// Bytes [`Self::emit`] writes.
            pub const fn buffer_len(&self) -> usize {
                match self {
                    $( Self::$name(_) => $len, )*
                }
            }

            /// Writes the whole datagram to the start of `buf`; see [`Emit::emit`].
            pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
                match self {
                    $( Self::$name(m) => m.emit(buf), )*
                }
            }

            /// The common header.
            pub const fn header(&self) -> &OrderHeader {
                match self {
                    $( Self::$name(m) => &m.header, )*
                }
            }
        }
    };
}

impl Emit for Repr {
    fn buffer_len(&self) -> usize {
        Self::buffer_len(self)
    }
    fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        Self::emit(self, buf)
    }
}

order_messages! {
    /// `O` Enter Order (up).
    Enter = b'O', 48, Up {
        /// Buy or sell.
        side: Side = 28,
        /// Shares.
        shares: u32 = 29,
        /// Symbol.
        stock: Stock = 33,
        /// Limit price, 4 implied decimals (0 for market orders).
        price: u32 = 41,
        /// Time in force.
        time_in_force: TimeInForce = 45,
        /// Limit or market.
        order_type: OrderType = 46,
        /// Display / post-only.
        display: Display = 47,
    }

    /// `U` Replace Order (up): new shares and price for a live order, under a new token
    /// (`header.client_order_id`).
    Replace = b'U', 44, Up {
        /// Token of the order being replaced.
        orig_client_order_id: u64 = 28,
        /// New total shares.
        shares: u32 = 36,
        /// New limit price.
        price: u32 = 40,
    }

    /// `X` Cancel Order (up).
    Cancel = b'X', 40, Up {
        /// Token of the order to cancel (its latest enter/replace).
        orig_client_order_id: u64 = 28,
        /// Shares to leave on the book (0 cancels the whole order).
        shares: u32 = 36,
    }

    /// `A` Accepted (down): the order is live (or was executed at once, see executions).
    Accepted = b'A', 56, Down {
        /// Buy or sell.
        side: Side = 28,
        /// Shares accepted.
        shares: u32 = 29,
        /// Symbol.
        stock: Stock = 33,
        /// Limit price.
        price: u32 = 41,
        /// Time in force.
        time_in_force: TimeInForce = 45,
        /// Limit or market.
        order_type: OrderType = 46,
        /// Display / post-only.
        display: Display = 47,
        /// The order's reference number in the ITCH feed.
        order_ref: u64 = 48,
    }

    /// `R` Replaced (down; OUCH 4.2 `U`).
    Replaced = b'R', 52, Down {
        /// Token of the order replaced.
        orig_client_order_id: u64 = 28,
        /// New total shares.
        shares: u32 = 36,
        /// New limit price.
        price: u32 = 40,
        /// The new order's ITCH reference number.
        order_ref: u64 = 44,
    }

    /// `C` Canceled (down): shares removed from an order.
    Canceled = b'C', 41, Down {
        /// Token of the order canceled.
        orig_client_order_id: u64 = 28,
        /// Shares removed.
        canceled_shares: u32 = 36,
        /// Why.
        reason: CancelReason = 40,
    }

    /// `E` Executed (down): a fill.
    Executed = b'E', 49, Down {
        /// Shares executed.
        shares: u32 = 28,
        /// Execution price, 4 implied decimals.
        price: u32 = 32,
        /// Match number (as in the ITCH feed).
        match_number: u64 = 36,
        /// Maker or taker.
        liquidity: Liquidity = 44,
        /// Shares still open after this fill.
        leaves_shares: u32 = 45,
    }

    /// `J` Rejected (down): the request (enter, replace or cancel) had no effect.
    Rejected = b'J', 29, Down {
        /// Why.
        reason: RejectReason = 28,
    }
}

/// A checked view of an order-entry datagram, for nodes that route by the header alone
/// (proxies: dedupe key, generation time, direction) without decoding the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` after checking the envelope, the type and the exact length (body field
    /// values are not checked; [`Repr::parse`] does that).
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let data = buffer.as_ref();
        let t = check_envelope(data)?;
        let len = Repr::len_of(t).ok_or(Error::UnknownType(t))?;
        check(data, t, len)?;
        Ok(Self { buffer })
    }

    /// The message type byte.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Which way it travels.
    pub fn direction(&self) -> Direction {
        // `new_checked` admitted only known types.
        Repr::direction_of(self.msg_type()).unwrap_or(Direction::Up)
    }

    /// The common header.
    pub fn header(&self) -> OrderHeader {
        OrderHeader::read(self.buffer.as_ref())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kind, classify};

    fn header() -> OrderHeader {
        OrderHeader {
            client_order_id: 0x0102_0304_0506_0708,
            participant_id: 42,
            gateway_id: 84,
            time: ExchangeTime(1_000_000),
        }
    }

    fn enter() -> Enter {
        Enter {
            header: header(),
            side: Side::Sell,
            shares: 100,
            stock: Stock::new("AAPL").unwrap(),
            price: 1_850_000,
            time_in_force: TimeInForce::ImmediateOrCancel,
            order_type: OrderType::Limit,
            display: Display::PostOnly,
        }
    }

    fn all() -> Vec<Repr> {
        let h = header();
        vec![
            enter().into(),
            Replace {
                header: h,
                orig_client_order_id: 1,
                shares: 50,
                price: 99,
            }
            .into(),
            Cancel {
                header: h,
                orig_client_order_id: 1,
                shares: 0,
            }
            .into(),
            Accepted {
                header: h,
                side: Side::Buy,
                shares: 7,
                stock: Stock::new("X").unwrap(),
                price: 5,
                time_in_force: TimeInForce::Day,
                order_type: OrderType::Market,
                display: Display::Hidden,
                order_ref: 77,
            }
            .into(),
            Replaced {
                header: h,
                orig_client_order_id: 1,
                shares: 3,
                price: 4,
                order_ref: 78,
            }
            .into(),
            Canceled {
                header: h,
                orig_client_order_id: 1,
                canceled_shares: 3,
                reason: CancelReason::SelfMatchPrevention,
            }
            .into(),
            Executed {
                header: h,
                shares: 10,
                price: 11,
                match_number: 12,
                liquidity: Liquidity::Removed,
                leaves_shares: 13,
            }
            .into(),
            Rejected {
                header: h,
                reason: RejectReason::WouldCross,
            }
            .into(),
        ]
    }

    #[test]
    fn enter_layout() {
        let mut buf = [0u8; 64];
        assert_eq!(enter().emit(&mut buf), Ok(48));
        assert_eq!(buf[..4], [0xFE, 1, b'O', 0]);
        assert_eq!(buf[4..12], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(buf[12..16], 42u32.to_be_bytes());
        assert_eq!(buf[16..20], 84u32.to_be_bytes());
        assert_eq!(buf[20..28], 1_000_000u64.to_be_bytes());
        assert_eq!(buf[28], b'S');
        assert_eq!(buf[29..33], 100u32.to_be_bytes());
        assert_eq!(buf[33..41], *b"AAPL    ");
        assert_eq!(buf[41..45], 1_850_000u32.to_be_bytes());
        assert_eq!(buf[45..48], *b"ILP");
        let p = Packet::new_checked(&buf[..48]).unwrap();
        assert_eq!(p.header().dedupe_key(), (42, 0x0102_0304_0506_0708));
        assert_eq!(p.direction(), Direction::Up);
        buf[47] = b'?';
        assert_eq!(Repr::parse(&buf[..48]), Err(Error::Malformed));
    }

    #[test]
    fn round_trip_all() {
        let mut types = Vec::new();
        for r in all() {
            let mut buf = [0u8; 64];
            let len = r.emit(&mut buf).unwrap();
            assert_eq!(Repr::len_of(r.msg_type()), Some(len));
            assert_eq!(classify(&buf[..len]), Kind::Order);
            assert_eq!(Repr::parse(&buf[..len]), Ok(r));
            let p = Packet::new_checked(&buf[..len]).unwrap();
            assert_eq!(p.header(), *r.header());
            assert_eq!(p.direction(), r.direction());
            for cut in 0..len {
                assert_eq!(
                    Repr::parse(&buf[..cut]),
                    Err(Error::Truncated),
                    "{r:?} {cut}"
                );
                assert!(Packet::new_checked(&buf[..cut]).is_err());
            }
            assert_eq!(Repr::parse(&buf[..len + 1]), Err(Error::BadLength));
            assert_eq!(r.emit(&mut buf[..len - 1]), Err(Error::BufferTooSmall));
            types.push(r.msg_type());
        }
        assert_eq!(types, Repr::TYPES);
    }

    #[test]
    fn bad_envelope_and_type() {
        let mut buf = [0u8; 64];
        let len = enter().emit(&mut buf).unwrap();
        buf[2] = b'?';
        assert_eq!(Repr::parse(&buf[..len]), Err(Error::UnknownType(b'?')));
        assert_eq!(
            Packet::new_checked(&buf[..len]).unwrap_err(),
            Error::UnknownType(b'?')
        );
        buf[2] = b'O';
        buf[1] = 9;
        assert_eq!(Repr::parse(&buf[..len]), Err(Error::Malformed));
        assert_eq!(
            Packet::new_checked(&buf[..len]).unwrap_err(),
            Error::Malformed
        );
    }

    #[test]
    fn byte_enums_round_trip() {
        for &t in TimeInForce::ALL {
            assert_eq!(TimeInForce::from_byte(t.to_byte()), Some(t));
        }
        for &r in RejectReason::ALL {
            assert_eq!(RejectReason::from_byte(r.to_byte()), Some(r));
        }
        for &r in CancelReason::ALL {
            assert_eq!(CancelReason::from_byte(r.to_byte()), Some(r));
        }
        assert_eq!(Display::from_byte(b'A'), None);
    }
}
