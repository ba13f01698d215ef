//! Engine configuration: symbols and the capacity limits allocated up front.

use crate::types::{ParticipantId, Price};

/// Largest absolute price accepted in a band, so that tick arithmetic (`tick ± window`) cannot
/// overflow an `i64`.
pub const PRICE_ABS_MAX: i64 = 1 << 60;

/// Largest `orders_max` and `levels_max`: slab indices are `u32` and `u32::MAX` means "none".
pub const SLOTS_MAX: u32 = 1 << 30;

/// Configuration of an [`crate::Engine`]. All memory is allocated in [`crate::Engine::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// One entry per symbol; [`crate::SymbolIndex`] indexes this list.
    pub symbols: Vec<SymbolConfig>,
    /// Resting orders, all symbols together.
    pub orders_max: u32,
    /// Non-empty price levels, all symbols and sides together.
    pub levels_max: u32,
    /// Largest quantity of one order. `orders_max × order_qty_max` must fit an `i64`, so that
    /// no level or reachable-quantity sum can overflow.
    pub order_qty_max: i64,
    /// Participants whose incoming orders never trade against their own resting orders: the
    /// resting order is cancelled instead ("cancel resting").
    pub stp_participants: Vec<ParticipantId>,
}

/// One symbol's book.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolConfig {
    /// Price units per tick; positive.
    pub tick_size: i64,
    /// Lowest valid price (inclusive).
    pub price_min: Price,
    /// Highest valid price (inclusive).
    pub price_max: Price,
    /// Width, in ticks, of the array of price levels each side keeps around its touch; a power
    /// of two, at least 64. Levels outside it go to an ordered map (slower, allocates).
    pub window_ticks: u32,
}

impl SymbolConfig {
    /// A symbol with a 256-tick window per side (about 2 KiB per symbol).
    #[must_use]
    pub fn new(tick_size: i64, price_min: Price, price_max: Price) -> Self {
        Self {
            tick_size,
            price_min,
            price_max,
            window_ticks: 256,
        }
    }
}

/// A configuration the engine cannot run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A symbol's tick size is zero or negative.
    #[error("symbol {symbol}: tick size must be positive")]
    TickSizeNotPositive {
        /// Offending symbol index.
        symbol: usize,
    },
    /// A symbol's band is empty, off the tick or wider than ±2^60.
    #[error("symbol {symbol}: price band must be non-empty, on the tick and within ±2^60")]
    BandInvalid {
        /// Offending symbol index.
        symbol: usize,
    },
    /// A symbol's window is not a power of two of at least 64 ticks (or above 2^20).
    #[error("symbol {symbol}: window_ticks must be a power of two in 64..=2^20")]
    WindowInvalid {
        /// Offending symbol index.
        symbol: usize,
    },
    /// More symbols than a `u32` index can name.
    #[error("too many symbols")]
    SymbolsTooMany,
    /// `orders_max` or `levels_max` is zero or above 2^30.
    #[error("orders_max and levels_max must be in 1..=2^30")]
    CapacityInvalid,
    /// `order_qty_max` is not positive or `orders_max × order_qty_max` overflows an `i64`.
    #[error("order_qty_max must be positive and orders_max × order_qty_max must fit an i64")]
    QtyMaxInvalid,
}

impl EngineConfig {
    /// Checks every limit; [`crate::Engine::new`] calls it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if u32::try_from(self.symbols.len()).is_err() {
            return Err(ConfigError::SymbolsTooMany);
        }
        for (symbol, s) in self.symbols.iter().enumerate() {
            if s.tick_size <= 0 {
                return Err(ConfigError::TickSizeNotPositive { symbol });
            }
            let band_ok = s.price_min.0 <= s.price_max.0
                && s.price_min.0 >= -PRICE_ABS_MAX
                && s.price_max.0 <= PRICE_ABS_MAX
                && s.price_min.0.rem_euclid(s.tick_size) == 0
                && s.price_max.0.rem_euclid(s.tick_size) == 0;
            if !band_ok {
                return Err(ConfigError::BandInvalid { symbol });
            }
            if !s.window_ticks.is_power_of_two() || !(64..=1 << 20).contains(&s.window_ticks) {
                return Err(ConfigError::WindowInvalid { symbol });
            }
        }
        if !(1..=SLOTS_MAX).contains(&self.orders_max)
            || !(1..=SLOTS_MAX).contains(&self.levels_max)
        {
            return Err(ConfigError::CapacityInvalid);
        }
        let qty_total_max = i64::from(self.orders_max).checked_mul(self.order_qty_max);
        if self.order_qty_max <= 0 || qty_total_max.is_none() {
            return Err(ConfigError::QtyMaxInvalid);
        }
        Ok(())
    }
}
