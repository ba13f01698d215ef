//! Checkers: they observe releases and never steer the run (STYLE.md §11, after TigerBeetle's
//! `src/testing/cluster/*_checker.zig`).
//!
//! - **Exactly once, in order**: each gateway's released `packet_seq`s go up by exactly one
//!   (no gap, no duplicate, no reordering). A gateway may start at any sequence (it joined
//!   late), so its first release sets its baseline. The one gap allowed is one the gateway
//!   announced (`proto::Event::GapSkipped`, [`Checker::on_skip`]: the root's rewinder no
//!   longer had it), which must start right after its last release; the packets skipped are
//!   counted ([`Checker::skipped`]), and tests that allow none assert that.
//! - **Never early**: a release is never before its deadline on the gateway's exchange clock.
//! - **Bounded skew**: the true-time spread of the punctual releases of one packet (those at
//!   their deadline on the gateway's own clock: the copy came in time, and the gateway was
//!   neither paused nor busy then) stays within a bound (the clock-sync error bound), when one
//!   is set. Outbound runs set 1 µs by default for trees two hops deep
//!   (`scenario::SKEW_BOUND_NS`), half of it more per hop past them
//!   (`scenario::skew_bound_for_depth`).
//!
//! This is deliberately independent of [`crate::metrics`]: the skew is checked from its own
//! per-packet ring, so a bug in one shows up as a disagreement with the other.

use core::fmt;

/// A broken property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A gateway released a packet other than the one after its previous release.
    OutOfOrder {
        /// The gateway.
        gateway: u32,
        /// What it should have released.
        expected: u64,
        /// What it released.
        released: u64,
    },
    /// A release before the deadline, in the gateway's exchange time.
    Early {
        /// The gateway.
        gateway: u32,
        /// The packet.
        packet_seq: u64,
        /// Nanoseconds early.
        early_ns: u64,
    },
    /// On-time releases of one packet spread more than the bound in true time.
    Skew {
        /// The packet.
        packet_seq: u64,
        /// The spread, nanoseconds.
        skew_ns: u64,
        /// The bound, nanoseconds.
        bound_ns: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfOrder {
                gateway,
                expected,
                released,
            } => {
                write!(
                    f,
                    "gateway {gateway} released packet {released}, expected {expected}"
                )
            }
            Self::Early {
                gateway,
                packet_seq,
                early_ns,
            } => {
                write!(
                    f,
                    "gateway {gateway} released packet {packet_seq} {early_ns} ns early"
                )
            }
            Self::Skew {
                packet_seq,
                skew_ns,
                bound_ns,
            } => {
                write!(
                    f,
                    "packet {packet_seq} released with skew {skew_ns} ns > {bound_ns} ns"
                )
            }
        }
    }
}

/// What to do on a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnViolation {
    /// Panic at once (tests: the panic prints the seed).
    Panic,
    /// Keep the first `VIOLATIONS_KEPT_MAX` and count the rest (experiments with faults).
    Collect,
}

/// Violations kept in collect mode.
pub const VIOLATIONS_KEPT_MAX: usize = 64;

/// A release this long after its deadline, on the gateway's clock, still counts as punctual
/// for the skew check (rounding between a local instant and exchange time).
const PUNCTUAL_NS: u64 = 100;

/// Packets tracked at once for the skew check (a power of two).
const SKEW_WINDOW: usize = 1 << 14;

/// The release checker.
#[derive(Debug)]
pub struct Checker {
    on_violation: OnViolation,
    skew_bound_ns: Option<u64>,
    /// Per gateway: the next expected `packet_seq`, or `None` before its first release.
    next_seq: Vec<Option<u64>>,
    /// Per packet slot: (`packet_seq + 1`, earliest, latest true release of on-time copies).
    skew: Vec<(u64, u64, u64)>,
    violations: Vec<Violation>,
    violation_count: u64,
    releases: u64,
    /// Packets gateways skipped, announced.
    skipped: u64,
    /// Deadline and skew checks apply from this packet on (warm-up: clock sync converging).
    timing_from_seq: u64,
    /// A release this much before its deadline is still accepted (rounding between clocks).
    early_tolerance_ns: u64,
    /// Gateways started again ([`Checker::restart`]): their order is checked, not their
    /// timing (a new process's clock syncs anew).
    restarted: Vec<u32>,
}

impl Checker {
    /// A checker; `skew_bound_ns = None` skips the skew check.
    pub fn new(on_violation: OnViolation, skew_bound_ns: Option<u64>) -> Self {
        Self {
            on_violation,
            skew_bound_ns,
            next_seq: Vec::new(),
            skew: vec![(0, 0, 0); SKEW_WINDOW],
            violations: Vec::new(),
            violation_count: 0,
            releases: 0,
            skipped: 0,
            timing_from_seq: 0,
            early_tolerance_ns: 0,
            restarted: Vec::new(),
        }
    }

    /// `gateway` was started again as a new process: it releases from wherever it joins the
    /// stream (its first release, or announced skip, sets its baseline again), in order from
    /// there; deadlines and skew are not checked for it any more, since its clock syncs anew.
    pub fn restart(&mut self, gateway: u32) {
        if let Some(next) = self.next_seq.get_mut(gateway as usize) {
            *next = None;
        }
        if !self.restarted.contains(&gateway) {
            self.restarted.push(gateway);
        }
    }

    /// Observes one release.
    #[allow(clippy::too_many_arguments)]
    pub fn on_release(
        &mut self,
        gateway: u32,
        packet_seq: u64,
        deadline_x: u64,
        released_x: u64,
        released_t: u64,
        late: bool,
    ) {
        self.releases += 1;
        self.advance(gateway, packet_seq, packet_seq + 1);

        if packet_seq < self.timing_from_seq || self.restarted.contains(&gateway) {
            return;
        }
        if released_x.saturating_add(self.early_tolerance_ns) < deadline_x {
            self.violate(Violation::Early {
                gateway,
                packet_seq,
                early_ns: deadline_x - released_x,
            });
        }
        // Only punctual releases bound the skew: a gateway that released after its deadline
        // on its own clock (the packet came late, or the VM was paused or busy at the
        // deadline) shows a host's or a path's delay, not clock-sync error.
        if late || released_x > deadline_x.saturating_add(PUNCTUAL_NS) {
            return;
        }
        let Some(bound_ns) = self.skew_bound_ns else {
            return;
        };
        let slot = &mut self.skew[packet_seq as usize % SKEW_WINDOW];
        if slot.0 != packet_seq + 1 {
            *slot = (packet_seq + 1, released_t, released_t);
        }
        slot.1 = slot.1.min(released_t);
        slot.2 = slot.2.max(released_t);
        let skew_ns = slot.2 - slot.1;
        if skew_ns > bound_ns {
            self.violate(Violation::Skew {
                packet_seq,
                skew_ns,
                bound_ns,
            });
        }
    }

    /// Observes `gateway` skipping packets `[from, to)` (the root no longer had them). The
    /// skip must start at the packet after the gateway's last release; its next release is
    /// then checked against `to`.
    pub fn on_skip(&mut self, gateway: u32, from: u64, to: u64) {
        let to = to.max(from);
        self.skipped += to - from;
        self.advance(gateway, from, to);
    }

    /// `gateway` released (or skipped) the packets `[from, to)`: `from` must be the next it
    /// owes (its first sets the baseline); it owes `to` next (as many packets on from the
    /// one it owed, if `from` was behind it).
    fn advance(&mut self, gateway: u32, from: u64, to: u64) {
        let index = gateway as usize;
        if self.next_seq.len() <= index {
            self.next_seq.resize(index + 1, None);
        }
        let expected = self.next_seq[index].unwrap_or(from);
        if from != expected {
            self.violate(Violation::OutOfOrder {
                gateway,
                expected,
                released: from,
            });
        }
        self.next_seq[index] = Some(from.max(expected) + (to - from));
    }

    /// Packets skipped by announced gaps ([`Checker::on_skip`]).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Checks deadlines and skew only from `packet_seq` on (ordering is always checked): before
    /// clock sync converges a gateway's exchange clock may jump under a held packet.
    pub fn check_timing_from(&mut self, packet_seq: u64) {
        self.timing_from_seq = packet_seq;
    }

    /// Accepts releases up to `ns` before their deadline (default 0: none).
    pub fn tolerate_early(&mut self, ns: u64) {
        self.early_tolerance_ns = ns;
    }

    /// Violations kept (all of them in panic mode: none).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Number of violations seen.
    pub fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// Releases observed.
    pub fn releases(&self) -> u64 {
        self.releases
    }

    /// The next packet each gateway should release (`None` if it released nothing), by id.
    pub fn next_seq(&self, gateway: u32) -> Option<u64> {
        self.next_seq.get(gateway as usize).copied().flatten()
    }

    fn violate(&mut self, violation: Violation) {
        self.violation_count += 1;
        match self.on_violation {
            OnViolation::Panic => panic!("checker: {violation}"),
            OnViolation::Collect => {
                if self.violations.len() < VIOLATIONS_KEPT_MAX {
                    self.violations.push(violation);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_releases_pass() {
        let mut checker = Checker::new(OnViolation::Panic, Some(1_000));
        for seq in 5..100 {
            for gateway in 0..3 {
                checker.on_release(
                    gateway,
                    seq,
                    100,
                    100 + u64::from(gateway),
                    1_000 * seq,
                    false,
                );
            }
        }
        assert_eq!(checker.releases(), 95 * 3);
        assert_eq!(checker.next_seq(2), Some(100));
        assert_eq!(checker.next_seq(3), None);
    }

    #[test]
    fn gaps_duplicates_early_and_skew_are_caught() {
        let mut checker = Checker::new(OnViolation::Collect, Some(1_000));
        checker.on_release(0, 1, 0, 0, 0, false);
        checker.on_release(0, 3, 0, 0, 0, false); // gap
        checker.on_release(0, 3, 0, 0, 0, false); // duplicate
        checker.on_release(1, 3, 500, 499, 0, false); // early by 1 ns
        checker.on_release(2, 3, 0, 0, 1_001, false); // skew 1001 > 1000
        checker.on_release(3, 3, 0, 0, 90_000, true); // late: exempt from skew
        // Released 5 µs after its deadline on its own clock (paused or busy at the deadline):
        // a host's delay, not clock error, so exempt from skew as well.
        checker.on_release(4, 3, 0, 5_000, 95_000, false);
        // Punctual within rounding (100 ns after the deadline) is checked.
        checker.on_release(5, 3, 0, 100, 2_000, false);
        assert_eq!(
            checker.violations(),
            &[
                Violation::OutOfOrder {
                    gateway: 0,
                    expected: 2,
                    released: 3
                },
                Violation::OutOfOrder {
                    gateway: 0,
                    expected: 4,
                    released: 3
                },
                Violation::Early {
                    gateway: 1,
                    packet_seq: 3,
                    early_ns: 1
                },
                Violation::Skew {
                    packet_seq: 3,
                    skew_ns: 1_001,
                    bound_ns: 1_000
                },
                Violation::Skew {
                    packet_seq: 3,
                    skew_ns: 2_000,
                    bound_ns: 1_000
                },
            ]
        );
    }

    #[test]
    fn an_announced_skip_passes_and_an_unannounced_one_does_not() {
        let mut checker = Checker::new(OnViolation::Collect, None);
        checker.on_release(0, 1, 0, 0, 0, false);
        checker.on_skip(0, 2, 10);
        checker.on_release(0, 10, 0, 0, 0, false);
        assert!(checker.violations().is_empty());
        assert_eq!(checker.skipped(), 8);
        // A skip that does not start after the last release, and a release past its end.
        checker.on_skip(0, 12, 20);
        checker.on_release(0, 21, 0, 0, 0, false);
        assert_eq!(
            checker.violations(),
            &[
                Violation::OutOfOrder {
                    gateway: 0,
                    expected: 11,
                    released: 12
                },
                Violation::OutOfOrder {
                    gateway: 0,
                    expected: 20,
                    released: 21
                },
            ]
        );
    }

    /// Goal: a gateway started again releases from where it joins, in order from there,
    /// and its timing is no longer checked (its clock syncs anew); the others' still is.
    #[test]
    fn a_restarted_gateway_starts_over_in_order_and_out_of_timing() {
        let mut checker = Checker::new(OnViolation::Collect, Some(1_000));
        checker.on_release(0, 1, 0, 0, 0, false);
        checker.on_release(0, 2, 0, 0, 0, false);
        checker.restart(0);
        checker.on_release(0, 40, 500, 0, 0, false); // early, but exempt
        checker.on_release(0, 41, 0, 0, 0, false);
        assert_eq!(checker.violations(), &[]);
        checker.on_release(0, 43, 0, 0, 0, false); // still held to order
        checker.on_release(1, 1, 500, 0, 0, false); // the others to timing
        assert_eq!(checker.violations().len(), 2, "{:?}", checker.violations());
    }

    #[test]
    #[should_panic(expected = "expected 2")]
    fn panic_mode_panics() {
        let mut checker = Checker::new(OnViolation::Panic, None);
        checker.on_release(0, 1, 0, 0, 0, false);
        checker.on_release(0, 1, 0, 0, 0, false);
    }
}
