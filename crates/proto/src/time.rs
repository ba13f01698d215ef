//! Local time of a node.
//!
//! Jasper keeps two clocks apart (DESIGN.md §2). [`Instant`] is a node's own monotonic clock:
//! it only ever comes in as the `now` argument of a handler, and it never goes on the wire.
//! [`wire::ExchangeTime`] is the synchronised exchange clock that send timestamps and release
//! deadlines carry; [`crate::clock::ClockSync`] converts between the two.

use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point on a node's local monotonic clock, in nanoseconds from an arbitrary origin.
///
/// A simulator can build any instant; a real runtime builds them from the OS monotonic
/// clock. Instants of two different nodes are not comparable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    nanos: u64,
}

impl Instant {
    /// The origin of the clock.
    pub const ZERO: Self = Self { nanos: 0 };
    /// The latest representable instant; used as "never".
    pub const MAX: Self = Self { nanos: u64::MAX };

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self { nanos }
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }

    /// `self + duration`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, duration: Duration) -> Self {
        Self {
            nanos: self.nanos.saturating_add(duration_nanos(duration)),
        }
    }

    /// `self - duration`, saturating at [`Instant::ZERO`].
    pub fn saturating_sub(self, duration: Duration) -> Self {
        Self {
            nanos: self.nanos.saturating_sub(duration_nanos(duration)),
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Self;
    fn add(self, rhs: Duration) -> Self {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Self;
    fn sub(self, rhs: Duration) -> Self {
        self.saturating_sub(rhs)
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
pub fn duration_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_nanos(10);
        assert_eq!((t + Duration::from_nanos(5)).as_nanos(), 15);
        assert_eq!((t - Duration::from_nanos(50)), Instant::ZERO);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(
            t.saturating_duration_since(Instant::from_nanos(20)),
            Duration::ZERO
        );
        assert_eq!(
            Instant::from_nanos(20).saturating_duration_since(t),
            Duration::from_nanos(10)
        );
    }
}
