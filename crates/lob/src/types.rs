//! The engine's vocabulary: ids, prices, quantities, inputs and events.
//!
//! Every raw integer that crosses the engine's API is wrapped in a newtype that names its unit
//! (STYLE.md §7). Prices are integer price units (for LOBSTER: dollars × 10,000), always a whole
//! multiple of the symbol's tick size; quantities are integer lots (shares).

use core::fmt;

/// An order id. The exchange (the root's sequencer) chooses it, not the engine; it is the ITCH
/// "order reference number" and must be unique among resting orders of the whole engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OrderId(pub u64);

/// A market participant (an MP behind one gateway). Used for responses and self-trade
/// prevention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParticipantId(pub u32);

/// Index of a symbol in [`crate::EngineConfig::symbols`]; the ITCH "stock locate".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SymbolIndex(pub u32);

/// A price in integer price units (not ticks): a valid price is a multiple of the symbol's
/// tick size and lies inside its band.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price(pub i64);

/// A quantity in lots (shares). Signed so that a negative quantity can be rejected rather than
/// be unrepresentable on the way in; every quantity the engine emits is positive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Qty(pub i64);

/// The ITCH match number: one per fill, counting up from 1 across the whole engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MatchNumber(pub u64);

/// The side of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Side {
    /// A bid.
    Buy,
    /// An offer.
    Sell,
}

impl Side {
    /// The other side.
    #[must_use]
    pub fn opposite(self) -> Self {
        match self {
            Self::Buy => Self::Sell,
            Self::Sell => Self::Buy,
        }
    }
}

/// How a new order trades and whether its remainder rests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrderKind {
    /// Limit, good till cancelled: trades what crosses, the remainder rests.
    Gtc,
    /// Limit, immediate or cancel: trades what crosses, the remainder expires.
    Ioc,
    /// Limit, fill or kill: trades in full if the whole quantity is reachable within the limit
    /// price (summed over every level and order that would match), otherwise expires untouched.
    Fok,
    /// Market: no price limit (the input's price is ignored), the remainder expires.
    Market,
    /// Limit that must not take: rejected with [`RejectReason::WouldTake`] if it crosses the
    /// opposite best, otherwise rests.
    PostOnly,
}

/// One input to the engine, in the sequence the root's sequencer decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Input {
    /// Enter a new order.
    New(NewOrder),
    /// Cancel a resting order.
    Cancel(CancelOrder),
    /// Change a resting order's price and/or quantity.
    Replace(ReplaceOrder),
}

/// A new order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NewOrder {
    /// Chosen by the exchange; must not be resting already.
    pub order_id: OrderId,
    /// Who sends it.
    pub participant: ParticipantId,
    /// Which book.
    pub symbol: SymbolIndex,
    /// Buy or sell.
    pub side: Side,
    /// Time in force and type.
    pub kind: OrderKind,
    /// Limit price (ignored for [`OrderKind::Market`]).
    pub price: Price,
    /// Quantity; must be positive and at most [`crate::EngineConfig::order_qty_max`].
    pub qty: Qty,
}

/// A cancel of a whole resting order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CancelOrder {
    /// The resting order.
    pub order_id: OrderId,
    /// Must own the order.
    pub participant: ParticipantId,
    /// Must be the order's symbol.
    pub symbol: SymbolIndex,
}

/// A cancel/replace of a resting order. The order keeps its id.
///
/// At the same price a smaller quantity keeps time priority (an ITCH "order cancel" of the
/// difference); a price change or a larger quantity loses it: the order moves to the back of
/// the new level (an ITCH "order replace"), or, if the new price crosses, is deleted, trades as
/// a taker and rests its remainder (delete, fills, add). A post-only order's replace that
/// would cross is rejected ([`RejectReason::WouldTake`]) and leaves the order as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplaceOrder {
    /// The resting order.
    pub order_id: OrderId,
    /// Must own the order.
    pub participant: ParticipantId,
    /// Must be the order's symbol.
    pub symbol: SymbolIndex,
    /// New limit price.
    pub price: Price,
    /// New open quantity (not including what already traded).
    pub qty: Qty,
}

/// Why an input was rejected. A rejected input changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RejectReason {
    /// The symbol index is not configured.
    #[error("unknown symbol")]
    UnknownSymbol,
    /// Quantity zero or negative.
    #[error("quantity is zero or negative")]
    QtyNotPositive,
    /// Quantity above the configured per-order maximum.
    #[error("quantity above the per-order maximum")]
    QtyTooLarge,
    /// Price outside the symbol's configured band.
    #[error("price outside the symbol's band")]
    PriceOutOfBand,
    /// Price not a multiple of the symbol's tick size.
    #[error("price not on the tick")]
    PriceOffTick,
    /// A resting order already has this id.
    #[error("duplicate order id")]
    DuplicateOrderId,
    /// No resting order with this id in this symbol.
    #[error("unknown order id")]
    UnknownOrderId,
    /// The order belongs to another participant.
    #[error("order belongs to another participant")]
    NotOwner,
    /// A post-only order would have taken liquidity.
    #[error("post-only order would take")]
    WouldTake,
    /// The order would rest without trading (a GTC or post-only order that crosses
    /// nothing, or a replace to a price with no level that leaves its own level in use) and
    /// no order slot or price level is free. An order that crosses is never refused for room:
    /// what it takes frees what its remainder needs.
    #[error("book capacity exhausted")]
    BookFull,
}

/// Why an order left the book or never rested, other than trading or a cancel request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExpireReason {
    /// The unfilled remainder of an IOC, FOK or market order.
    Unfilled,
    /// A resting order cancelled by self-trade prevention: its owner's own incoming order
    /// reached it (the resting order is cancelled, the incoming order continues).
    SelfTrade,
}

/// A fill: one maker order traded against one taker order. Sent privately to both owners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fill {
    /// Book.
    pub symbol: SymbolIndex,
    /// Unique per fill.
    pub match_number: MatchNumber,
    /// Always the maker's (resting order's) price.
    pub price: Price,
    /// Positive.
    pub qty: Qty,
    /// The resting order.
    pub maker_order_id: OrderId,
    /// Owner of the resting order.
    pub maker_participant: ParticipantId,
    /// The incoming order.
    pub taker_order_id: OrderId,
    /// Owner of the incoming order.
    pub taker_participant: ParticipantId,
    /// Side of the incoming order.
    pub taker_side: Side,
}

/// Everything the engine says. For each input, in this order: exactly one [`Event::Accept`] or
/// [`Event::Reject`]; then, for a taker, per price level: per maker a [`Event::Fill`] and an
/// [`Event::Execute`] (or, under self-trade prevention, [`Event::Expire`] and
/// [`Event::Delete`]), then one [`Event::Trade`] for the level; finally the remainder's
/// [`Event::Add`] or [`Event::Expire`].
///
/// `Accept`, `Reject`, `Fill` and `Expire` are private (order entry); the rest are the public
/// market-data feed, one variant per ITCH book message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The input was accepted (private, to `participant`).
    Accept {
        /// Book.
        symbol: SymbolIndex,
        /// Sender.
        participant: ParticipantId,
        /// The order the input named.
        order_id: OrderId,
    },
    /// The input was rejected and changed nothing (private, to `participant`).
    Reject {
        /// Book, as given (may be unknown).
        symbol: SymbolIndex,
        /// Sender.
        participant: ParticipantId,
        /// The order the input named.
        order_id: OrderId,
        /// Why.
        reason: RejectReason,
    },
    /// A fill (private, to both owners).
    Fill(Fill),
    /// An order ended without trading its quantity `qty` (private, to `participant`).
    Expire {
        /// Book.
        symbol: SymbolIndex,
        /// Owner.
        participant: ParticipantId,
        /// The order.
        order_id: OrderId,
        /// Quantity that ended untraded.
        qty: Qty,
        /// Why.
        reason: ExpireReason,
    },
    /// An order rests on the book (ITCH 'A').
    Add {
        /// Book.
        symbol: SymbolIndex,
        /// Order reference.
        order_id: OrderId,
        /// Side.
        side: Side,
        /// Price.
        price: Price,
        /// Open quantity.
        qty: Qty,
    },
    /// A resting order traded `qty` (ITCH 'E'); at zero open quantity it leaves the book with
    /// no further message.
    Execute {
        /// Book.
        symbol: SymbolIndex,
        /// The resting order's reference.
        order_id: OrderId,
        /// The resting order's side.
        side: Side,
        /// The resting order's price (not in ITCH 'E', handy for book builders).
        price: Price,
        /// Executed quantity.
        qty: Qty,
        /// Same as the matching [`Fill`].
        match_number: MatchNumber,
    },
    /// A resting order's quantity shrank by `qty`, keeping its priority (ITCH 'X').
    Cancel {
        /// Book.
        symbol: SymbolIndex,
        /// Order reference.
        order_id: OrderId,
        /// Quantity removed.
        qty: Qty,
    },
    /// A resting order left the book (ITCH 'D').
    Delete {
        /// Book.
        symbol: SymbolIndex,
        /// Order reference.
        order_id: OrderId,
    },
    /// A resting order moved to the back of the queue at `price` with open quantity `qty`
    /// (ITCH 'U' with the new reference equal to the old one).
    Replace {
        /// Book.
        symbol: SymbolIndex,
        /// Order reference (unchanged).
        order_id: OrderId,
        /// Side.
        side: Side,
        /// New price.
        price: Price,
        /// New open quantity.
        qty: Qty,
    },
    /// A trade print: one per taker per price level, summing that level's fills (like CME's
    /// trade summary). Does not change the book; book builders ignore it.
    Trade {
        /// Book.
        symbol: SymbolIndex,
        /// The taker's side.
        aggressor: Side,
        /// Level price.
        price: Price,
        /// Sum of the level's fills for this taker.
        qty: Qty,
        /// The match number of the level's last fill.
        match_number: MatchNumber,
    },
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Buy => "buy",
            Self::Sell => "sell",
        })
    }
}
