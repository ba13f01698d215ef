//! NASDAQ TotalView-ITCH 5.0 messages: all 23 message types of the spec.
//!
//! Every message starts with the same 11 bytes, then its own fields (big-endian):
//!
//! ```text
//!  offset  len  field
//!  0       1    message type
//!  1       2    stock_locate      (0 for market-wide messages)
//!  3       2    tracking_number
//!  5       6    timestamp_ns      nanoseconds since midnight
//! ```
//!
//! Prices are `u32` with 4 implied decimals (`873900` = $87.39), except the MWCB levels
//! (`u64`, 8 decimals). Each message type's layout is written once, in the table that
//! generates its struct (field name, type, offset); a compile-time check proves each table
//! contiguous and of the spec's length. Parsing requires the exact length for the type.
//!
//! Codes the spec defines as single characters (event codes, trading states, flags) are kept
//! as raw `u8`s so that new codes in real feeds still parse; only the buy/sell indicator is
//! typed ([`Side`]), since matching depends on it.

use crate::bytes::{WireField, get_u16, get_u48, layout_ok, put_u16, put_u48};
use crate::{Emit, Error, Side, Stock};

mod field {
    use crate::bytes::Field;
    pub(super) const TYPE: usize = 0;
    pub(super) const STOCK_LOCATE: Field = 1..3;
    pub(super) const TRACKING_NUMBER: Field = 3..5;
    pub(super) const TIMESTAMP: Field = 5..11;
}

/// Bytes of the header common to all ITCH messages.
pub const COMMON_LEN: usize = field::TIMESTAMP.end;
/// Exclusive upper bound of `timestamp_ns` (48 bits).
pub const TIMESTAMP_LIMIT: u64 = 1 << 48;

const _: () = assert!(COMMON_LEN == 11);
const _: () = assert!(field::TYPE + 1 == field::STOCK_LOCATE.start);
const _: () = assert!(field::STOCK_LOCATE.end == field::TRACKING_NUMBER.start);
const _: () = assert!(field::TRACKING_NUMBER.end == field::TIMESTAMP.start);

/// The header common to all ITCH messages, readable without knowing the type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Message type byte.
    pub msg_type: u8,
    /// Locate code of the security.
    pub stock_locate: u16,
    /// NASDAQ internal tracking number.
    pub tracking_number: u16,
    /// Nanoseconds since midnight.
    pub timestamp_ns: u64,
}

impl Header {
    /// Reads the common header of any ITCH message (at least [`COMMON_LEN`] bytes).
    pub fn parse(buf: &[u8]) -> Result<Self, Error> {
        if buf.len() < COMMON_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self {
            msg_type: buf[field::TYPE],
            stock_locate: get_u16(buf, field::STOCK_LOCATE),
            tracking_number: get_u16(buf, field::TRACKING_NUMBER),
            timestamp_ns: get_u48(buf, field::TIMESTAMP),
        })
    }
}

/// Checks type byte and exact length before a fixed-layout parse.
fn check(buf: &[u8], msg_type: u8, len: usize) -> Result<(), Error> {
    match buf.first() {
        None => Err(Error::Truncated),
        Some(&t) if t != msg_type => Err(Error::UnknownType(t)),
        Some(_) if buf.len() < len => Err(Error::Truncated),
        Some(_) if buf.len() > len => Err(Error::BadLength),
        Some(_) => Ok(()),
    }
}

macro_rules! itch_messages {
    ($(
        $(#[$meta:meta])*
        $name:ident = $ty:literal, $len:literal {
            $( $(#[$fmeta:meta])* $field:ident : $fty:ty = $off:literal ),* $(,)?
        }
    )*) => {
        $(
            $(#[$meta])*
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub struct $name {
                /// Locate code identifying the security (0 for market-wide messages).
                pub stock_locate: u16,
                /// NASDAQ internal tracking number.
                pub tracking_number: u16,
                /// Nanoseconds since midnight (48 bits on the wire).
                pub timestamp_ns: u64,
                $( $(#[$fmeta])* pub $field: $fty, )*
            }

            impl $name {
                /// Message type byte.
                pub const TYPE: u8 = $ty;
                /// Bytes on the wire.
                pub const LEN: usize = $len;
                /// (offset, length) of every field, in wire order.
                const FIELDS: &[(usize, usize)] = &[
                    (field::TYPE, 1),
                    (field::STOCK_LOCATE.start, 2),
                    (field::TRACKING_NUMBER.start, 2),
                    (field::TIMESTAMP.start, 6),
                    $( ($off, <$fty as WireField>::LEN), )*
                ];

                /// Parses one message body of exactly [`Self::LEN`] bytes.
                pub fn parse(buf: &[u8]) -> Result<Self, Error> {
                    check(buf, Self::TYPE, Self::LEN)?;
                    Ok(Self {
                        stock_locate: get_u16(buf, field::STOCK_LOCATE),
                        tracking_number: get_u16(buf, field::TRACKING_NUMBER),
                        timestamp_ns: get_u48(buf, field::TIMESTAMP),
                        $( $field: <$fty as WireField>::read(
                            &buf[$off..$off + <$fty as WireField>::LEN],
                        )?, )*
                    })
                }

                /// Bytes [`Self::emit`] writes: [`Self::LEN`].
                pub const fn buffer_len(&self) -> usize {
                    Self::LEN
                }

                /// Writes the message to the start of `buf`; see [`Emit::emit`].
                pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
                    let out = buf.get_mut(..Self::LEN).ok_or(Error::BufferTooSmall)?;
                    if self.timestamp_ns >= TIMESTAMP_LIMIT {
                        return Err(Error::OutOfRange);
                    }
                    out[field::TYPE] = Self::TYPE;
                    put_u16(out, field::STOCK_LOCATE, self.stock_locate);
                    put_u16(out, field::TRACKING_NUMBER, self.tracking_number);
                    put_u48(out, field::TIMESTAMP, self.timestamp_ns);
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

            impl From<$name> for Message {
                fn from(m: $name) -> Self {
                    Self::$name(m)
                }
            }
        )*

        /// Any ITCH 5.0 message.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Message {
            $(
                $(#[$meta])*
                $name($name),
            )*
        }

        impl Message {
            /// Every message type byte this module knows, in spec order.
            pub const TYPES: &[u8] = &[$($ty),*];

            /// Parses one message body (one MoldUDP64 message block without its length).
            pub fn parse(buf: &[u8]) -> Result<Self, Error> {
                match buf.first() {
                    None => Err(Error::Truncated),
                    $( Some(&$ty) => $name::parse(buf).map(Self::$name), )*
                    Some(&t) => Err(Error::UnknownType(t)),
                }
            }

            /// The message type byte.
            pub const fn msg_type(&self) -> u8 {
                match self {
                    $( Self::$name(_) => $ty, )*
                }
            }

            /// Wire length of a message of type `msg_type`, if known.
            pub const fn len_of(msg_type: u8) -> Option<usize> {
                match msg_type {
                    $( $ty => Some($len), )*
                    _ => None,
                }
            }

            /// Bytes [`Self::emit`] writes.
            pub const fn buffer_len(&self) -> usize {
                match self {
                    $( Self::$name(_) => $len, )*
                }
            }

            /// Writes the message to the start of `buf`; see [`Emit::emit`].
            pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
                match self {
                    $( Self::$name(m) => m.emit(buf), )*
                }
            }

            /// The common header.
            pub const fn header(&self) -> Header {
                match self {
                    $( Self::$name(m) => Header {
                        msg_type: $ty,
                        stock_locate: m.stock_locate,
                        tracking_number: m.tracking_number,
                        timestamp_ns: m.timestamp_ns,
                    }, )*
                }
            }
        }
    };
}

impl Emit for Message {
    fn buffer_len(&self) -> usize {
        Self::buffer_len(self)
    }
    fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        Self::emit(self, buf)
    }
}

itch_messages! {
    /// `S` System Event: start/end of messages, system hours, market hours.
    SystemEvent = b'S', 12 {
        /// `O` start of messages, `S` start of system hours, `Q` start of market hours,
        /// `M` end of market hours, `E` end of system hours, `C` end of messages.
        event_code: u8 = 11,
    }

    /// `R` Stock Directory: one per security at the start of the day.
    StockDirectory = b'R', 39 {
        /// Security symbol.
        stock: Stock = 11,
        /// Listing market (`Q`, `G`, `S`, `N`, `A`, `P`, `Z`, `V`, ` `).
        market_category: u8 = 19,
        /// Financial status (`D`, `E`, `Q`, `S`, `G`, `H`, `J`, `K`, `C`, `N`, ` `).
        financial_status_indicator: u8 = 20,
        /// Shares in a round lot.
        round_lot_size: u32 = 21,
        /// `Y` only round lots accepted, `N` odd and mixed lots allowed.
        round_lots_only: u8 = 25,
        /// Security class.
        issue_classification: u8 = 26,
        /// Security sub-type (2 characters).
        issue_sub_type: [u8; 2] = 27,
        /// `P` live/production, `T` test.
        authenticity: u8 = 29,
        /// Reg SHO short-sale threshold: `Y`, `N`, ` `.
        short_sale_threshold_indicator: u8 = 30,
        /// IPO flag: `Y`, `N`, ` `.
        ipo_flag: u8 = 31,
        /// LULD reference price tier: `1`, `2`, ` `.
        luld_reference_price_tier: u8 = 32,
        /// Exchange-traded product: `Y`, `N`, ` `.
        etp_flag: u8 = 33,
        /// ETP leverage factor (integer).
        etp_leverage_factor: u32 = 34,
        /// `Y` inverse ETP, `N` not.
        inverse_indicator: u8 = 38,
    }

    /// `H` Stock Trading Action: halted, paused, quotation only, trading.
    StockTradingAction = b'H', 25 {
        /// Security symbol.
        stock: Stock = 11,
        /// `H` halted, `P` paused, `Q` quotation only, `T` trading.
        trading_state: u8 = 19,
        /// Reserved.
        reserved: u8 = 20,
        /// Reason code (4 characters).
        reason: [u8; 4] = 21,
    }

    /// `Y` Reg SHO Short Sale Price Test Restricted Indicator.
    RegShoRestriction = b'Y', 20 {
        /// Security symbol.
        stock: Stock = 11,
        /// `0` no test, `1` in effect (intra-day drop), `2` remains in effect.
        reg_sho_action: u8 = 19,
    }

    /// `L` Market Participant Position.
    MarketParticipantPosition = b'L', 26 {
        /// Market participant identifier.
        mpid: [u8; 4] = 11,
        /// Security symbol.
        stock: Stock = 15,
        /// `Y` primary market maker, `N` not.
        primary_market_maker: u8 = 23,
        /// `N` normal, `P` passive, `S` syndicate, `R` pre-syndicate, `L` penalty.
        market_maker_mode: u8 = 24,
        /// `A` active, `E` excused, `W` withdrawn, `S` suspended, `D` deleted.
        market_participant_state: u8 = 25,
    }

    /// `V` MWCB Decline Level: market-wide circuit breaker levels (8 implied decimals).
    MwcbDeclineLevel = b'V', 35 {
        /// Level 1 price.
        level1: u64 = 11,
        /// Level 2 price.
        level2: u64 = 19,
        /// Level 3 price.
        level3: u64 = 27,
    }

    /// `W` MWCB Status: a circuit-breaker level was breached.
    MwcbStatus = b'W', 12 {
        /// `1`, `2` or `3`.
        breached_level: u8 = 11,
    }

    /// `K` IPO Quoting Period Update.
    IpoQuotingPeriod = b'K', 28 {
        /// Security symbol.
        stock: Stock = 11,
        /// Projected release time, seconds since midnight.
        ipo_quotation_release_time: u32 = 19,
        /// `A` anticipated release time, `C` canceled/postponed.
        ipo_quotation_release_qualifier: u8 = 23,
        /// IPO price (4 implied decimals).
        ipo_price: u32 = 24,
    }

    /// `J` LULD Auction Collar.
    LuldAuctionCollar = b'J', 35 {
        /// Security symbol.
        stock: Stock = 11,
        /// Reference price for the collars.
        auction_collar_reference_price: u32 = 19,
        /// Upper collar price.
        upper_auction_collar_price: u32 = 23,
        /// Lower collar price.
        lower_auction_collar_price: u32 = 27,
        /// Number of extensions to the reopening auction.
        auction_collar_extension: u32 = 31,
    }

    /// `h` Operational Halt.
    OperationalHalt = b'h', 21 {
        /// Security symbol.
        stock: Stock = 11,
        /// `Q` NASDAQ, `B` BX, `X` PSX.
        market_code: u8 = 19,
        /// `H` halted, `T` resumed.
        operational_halt_action: u8 = 20,
    }

    /// `A` Add Order, no MPID attribution.
    AddOrder = b'A', 36 {
        /// Order reference number, unique for the day.
        order_ref: u64 = 11,
        /// Buy/sell indicator.
        side: Side = 19,
        /// Shares.
        shares: u32 = 20,
        /// Security symbol.
        stock: Stock = 24,
        /// Limit price (4 implied decimals).
        price: u32 = 32,
    }

    /// `F` Add Order with MPID attribution.
    AddOrderMpid = b'F', 40 {
        /// Order reference number, unique for the day.
        order_ref: u64 = 11,
        /// Buy/sell indicator.
        side: Side = 19,
        /// Shares.
        shares: u32 = 20,
        /// Security symbol.
        stock: Stock = 24,
        /// Limit price (4 implied decimals).
        price: u32 = 32,
        /// Market participant identifier of the order's owner.
        attribution: [u8; 4] = 36,
    }

    /// `E` Order Executed at the order's own price.
    OrderExecuted = b'E', 31 {
        /// Order reference number.
        order_ref: u64 = 11,
        /// Shares executed.
        executed_shares: u32 = 19,
        /// Match number of the trade.
        match_number: u64 = 23,
    }

    /// `C` Order Executed With Price (a price other than the order's).
    OrderExecutedWithPrice = b'C', 36 {
        /// Order reference number.
        order_ref: u64 = 11,
        /// Shares executed.
        executed_shares: u32 = 19,
        /// Match number of the trade.
        match_number: u64 = 23,
        /// `Y` printable (count in volume), `N` not.
        printable: u8 = 31,
        /// Execution price (4 implied decimals).
        execution_price: u32 = 32,
    }

    /// `X` Order Cancel: part of an order canceled.
    OrderCancel = b'X', 23 {
        /// Order reference number.
        order_ref: u64 = 11,
        /// Shares removed.
        cancelled_shares: u32 = 19,
    }

    /// `D` Order Delete: an order removed entirely.
    OrderDelete = b'D', 19 {
        /// Order reference number.
        order_ref: u64 = 11,
    }

    /// `U` Order Replace: an order replaced by a new one (new reference, shares, price).
    OrderReplace = b'U', 35 {
        /// Reference number of the order replaced.
        original_order_ref: u64 = 11,
        /// Reference number of the new order.
        new_order_ref: u64 = 19,
        /// New shares.
        shares: u32 = 27,
        /// New price (4 implied decimals).
        price: u32 = 31,
    }

    /// `P` Trade (non-cross) against a non-displayed order.
    Trade = b'P', 44 {
        /// Order reference number (0 since 2014 on NASDAQ).
        order_ref: u64 = 11,
        /// Side of the non-displayed order.
        side: Side = 19,
        /// Shares.
        shares: u32 = 20,
        /// Security symbol.
        stock: Stock = 24,
        /// Price (4 implied decimals).
        price: u32 = 32,
        /// Match number.
        match_number: u64 = 36,
    }

    /// `Q` Cross Trade: the result of an opening, closing, IPO or halt cross.
    CrossTrade = b'Q', 40 {
        /// Shares matched in the cross.
        shares: u64 = 11,
        /// Security symbol.
        stock: Stock = 19,
        /// Cross price (4 implied decimals).
        cross_price: u32 = 27,
        /// Match number.
        match_number: u64 = 31,
        /// `O` opening, `C` closing, `H` IPO/halted, `I` intraday/extended-hours cross.
        cross_type: u8 = 39,
    }

    /// `B` Broken Trade: an execution was broken.
    BrokenTrade = b'B', 19 {
        /// Match number of the broken trade.
        match_number: u64 = 11,
    }

    /// `I` Net Order Imbalance Indicator (NOII).
    Noii = b'I', 50 {
        /// Shares paired at the current reference price.
        paired_shares: u64 = 11,
        /// Shares not paired.
        imbalance_shares: u64 = 19,
        /// `B` buy, `S` sell, `N` none, `O` insufficient orders.
        imbalance_direction: u8 = 27,
        /// Security symbol.
        stock: Stock = 28,
        /// Hypothetical auction-clearing price (cross orders only).
        far_price: u32 = 36,
        /// Hypothetical auction-clearing price (cross and continuous orders).
        near_price: u32 = 40,
        /// Price at which imbalance is measured.
        current_reference_price: u32 = 44,
        /// `O` opening, `C` closing, `H` IPO/halt, `A` extended trading close.
        cross_type: u8 = 48,
        /// Deviation of near price from reference price (`L`, `1`..`9`, `A`..`C`, ` `).
        price_variation_indicator: u8 = 49,
    }

    /// `N` Retail Price Improvement Indicator.
    RetailPriceImprovement = b'N', 20 {
        /// Security symbol.
        stock: Stock = 11,
        /// `B` buy side, `S` sell side, `A` both, `N` none.
        interest_flag: u8 = 19,
    }

    /// `O` Direct Listing with Capital Raise Price Discovery.
    DirectListingPriceDiscovery = b'O', 48 {
        /// Security symbol.
        stock: Stock = 11,
        /// `N` not eligible, `Y` eligible.
        open_eligibility_status: u8 = 19,
        /// Minimum allowable price.
        minimum_allowable_price: u32 = 20,
        /// Maximum allowable price.
        maximum_allowable_price: u32 = 24,
        /// Near execution price.
        near_execution_price: u32 = 28,
        /// Near execution time, ns since midnight.
        near_execution_time: u64 = 32,
        /// Lower price range collar.
        lower_price_range_collar: u32 = 40,
        /// Upper price range collar.
        upper_price_range_collar: u32 = 44,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add() -> AddOrder {
        AddOrder {
            stock_locate: 5528,
            tracking_number: 0,
            timestamp_ns: 34_200_000_000_000,
            order_ref: 23_508_286,
            side: Side::Buy,
            shares: 1600,
            stock: Stock::new("IVOO").unwrap(),
            price: 873_900,
        }
    }

    #[test]
    fn add_order_layout() {
        let mut buf = [0u8; 64];
        assert_eq!(add().emit(&mut buf), Ok(36));
        assert_eq!(buf[0], b'A');
        assert_eq!(buf[1..3], 5528u16.to_be_bytes());
        assert_eq!(buf[5..11], 34_200_000_000_000u64.to_be_bytes()[2..]);
        assert_eq!(buf[11..19], 23_508_286u64.to_be_bytes());
        assert_eq!(buf[19], b'B');
        assert_eq!(buf[24..32], *b"IVOO    ");
        assert_eq!(buf[32..36], 873_900u32.to_be_bytes());
        assert_eq!(Message::parse(&buf[..36]), Ok(Message::AddOrder(add())));
        assert_eq!(Message::parse(&buf[..35]), Err(Error::Truncated));
        assert_eq!(Message::parse(&buf[..37]), Err(Error::BadLength));
        buf[19] = b'X';
        assert_eq!(Message::parse(&buf[..36]), Err(Error::Malformed));
    }

    #[test]
    fn emit_errors() {
        let mut small = [0u8; 35];
        assert_eq!(add().emit(&mut small), Err(Error::BufferTooSmall));
        let late = AddOrder {
            timestamp_ns: TIMESTAMP_LIMIT,
            ..add()
        };
        assert_eq!(late.emit(&mut [0u8; 36]), Err(Error::OutOfRange));
    }

    #[test]
    fn dispatch() {
        assert_eq!(Message::parse(&[]), Err(Error::Truncated));
        assert_eq!(Message::parse(b"j"), Err(Error::UnknownType(b'j')));
        assert_eq!(Message::TYPES.len(), 23);
        for &t in Message::TYPES {
            let len = Message::len_of(t).unwrap();
            let mut buf = vec![b'B'; len];
            buf[0] = t;
            let m = Message::parse(&buf).unwrap();
            assert_eq!(m.msg_type(), t);
            assert_eq!(m.buffer_len(), len);
            let mut out = vec![0u8; len];
            assert_eq!(m.emit(&mut out), Ok(len));
            assert_eq!(out, buf);
            assert_eq!(m.header(), Header::parse(&buf).unwrap());
        }
        assert_eq!(Message::len_of(b'z'), None);
    }
}
