//! The OS clock, and the per-node clocks the runtime derives from it.
//!
//! [`now_ns`] is the one place in the workspace that reads the OS clock for time:
//! `CLOCK_MONOTONIC`, the clock `std::time::Instant` reads, taken as an absolute number of
//! nanoseconds so that every process on a host reads the *same* clock. This is *true time*
//! for the runtime, read once per loop turn. ([`unix_ns`] reads the wall clock, only to name
//! a root's session.)
//!
//! A node's local clock is true time seen through its injected error (DESIGN.md §4 "Clock
//! sync": on one host every node shares one clock, so the config gives each an offset and a
//! drift to give clock sync real work, and the true answer is known):
//!
//! ```text
//! local = floor(true · (1 + drift_ppb / 10^9)) + offset_ns
//! ```
//!
//! [`NodeClock::local`] turns true time into the node's `now`, and [`NodeClock::true_at`]
//! inverts it when the runtime arms the OS timer for the node's `poll_timeout`.

use std::time::Duration;

use proto::Instant;

/// Largest injected drift accepted: 1000 ppm (the cluster config refuses more).
pub const DRIFT_PPB_MAX: i64 = 1_000_000;

const NANOS_PER_SEC: i128 = 1_000_000_000;

/// True time now: `CLOCK_MONOTONIC` in nanoseconds (time since boot, shared by every process
/// of the host). THE OS clock read of the workspace: clippy.toml bans `Instant::now` and
/// `SystemTime::now` everywhere, and nothing else in the workspace calls `clock_gettime`
/// (through `read_ns`) but [`unix_ns`], which names a root's session.
pub fn now_ns() -> u64 {
    read_ns(libc::CLOCK_MONOTONIC)
}

/// Wall-clock time: `CLOCK_REALTIME` in nanoseconds since the Unix epoch. Not a node's clock
/// (that is [`now_ns`]): only for naming what must differ from one start of a process to the
/// next, across reboots (a root's session without a journal,
/// [`proto::config::session_of_start`]).
pub fn unix_ns() -> u64 {
    read_ns(libc::CLOCK_REALTIME)
}

/// `clock` in nanoseconds (0 for a time before its epoch).
#[inline]
#[allow(clippy::disallowed_methods)]
fn read_ns(clock: libc::clockid_t) -> u64 {
    let mut spec = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `spec` is a valid timespec for the kernel to write; CLOCK_MONOTONIC and
    // CLOCK_REALTIME always exist on Linux, so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(clock, &mut spec) };
    debug_assert_eq!(rc, 0);
    (spec.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(spec.tv_nsec.max(0) as u64)
}

/// The time from true time `earlier` to `later`, zero if `later` is earlier.
pub fn elapsed(earlier: u64, later: u64) -> Duration {
    Duration::from_nanos(later.saturating_sub(earlier))
}

/// One node's local clock: true time with an injected offset and drift.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeClock {
    /// Added to true time, ns.
    pub offset_ns: i64,
    /// Rate error, parts per billion (positive: the node's clock runs fast).
    pub drift_ppb: i64,
}

impl NodeClock {
    /// A clock with this offset and drift.
    pub fn new(offset_ns: i64, drift_ppb: i64) -> Self {
        assert!(
            drift_ppb.abs() <= DRIFT_PPB_MAX,
            "drift {drift_ppb} ppb is above 1000 ppm"
        );
        Self {
            offset_ns,
            drift_ppb,
        }
    }

    /// The node's `now` at true time `true_ns`.
    pub fn local(&self, true_ns: u64) -> Instant {
        if self.offset_ns == 0 && self.drift_ppb == 0 {
            return Instant::from_nanos(true_ns);
        }
        // floor(t · (1 + d)) + o, exactly; `true_at` is its ceiling inverse.
        let t = true_ns as i128;
        let scaled = (t * (NANOS_PER_SEC + self.drift_ppb as i128)).div_euclid(NANOS_PER_SEC);
        let local = scaled + self.offset_ns as i128;
        Instant::from_nanos(local.clamp(0, u64::MAX as i128) as u64)
    }

    /// The earliest true time at which the node's clock reads at least `local`.
    pub fn true_at(&self, local: Instant) -> u64 {
        if self.offset_ns == 0 && self.drift_ppb == 0 {
            return local.as_nanos();
        }
        if local == Instant::MAX {
            return u64::MAX;
        }
        // local = t (1 + d) + o  =>  t = (local − o) / (1 + d), rounded up.
        let numerator = (local.as_nanos() as i128 - self.offset_ns as i128) * NANOS_PER_SEC;
        let denominator = NANOS_PER_SEC + self.drift_ppb as i128;
        debug_assert!(denominator > 0);
        let t = (numerator + denominator - 1).div_euclid(denominator);
        let t = t.clamp(0, u64::MAX as i128) as u64;
        debug_assert!(self.local(t) >= local || t == u64::MAX || self.local(t) == Instant::MAX);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_os_clock_is_monotonic() {
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0);
        assert!(b >= a);
    }

    #[test]
    fn an_unskewed_clock_is_true_time() {
        let clock = NodeClock::default();
        assert_eq!(clock.local(123), Instant::from_nanos(123));
        assert_eq!(clock.true_at(Instant::from_nanos(123)), 123);
    }

    #[test]
    fn true_at_inverts_local_within_a_nanosecond() {
        for (offset_ns, drift_ppb) in [(5_000_000, 0), (-700_000, 250_000), (3, -999_999)] {
            let clock = NodeClock::new(offset_ns, drift_ppb);
            for true_ns in [1_000_000_000, 1_000_000_000 + 1, 7 * 1_000_000_000 + 12_345] {
                let local = clock.local(true_ns);
                let back = clock.true_at(local);
                assert!(
                    back <= true_ns,
                    "{clock:?} {true_ns} -> {local:?} -> {back}"
                );
                assert!(clock.local(back) >= local);
                assert!(true_ns - back <= 1 + drift_ppb.unsigned_abs() / 1_000_000);
            }
        }
    }

    #[test]
    fn offsets_below_zero_clamp_and_invert_to_zero() {
        let clock = NodeClock::new(-2_000_000_000, 0);
        assert_eq!(clock.local(1_000_000_000), Instant::ZERO);
        assert_eq!(clock.true_at(Instant::ZERO), 2 * 1_000_000_000);
        assert_eq!(clock.true_at(Instant::MAX), u64::MAX);
    }
}
