//! Pacing of orders going up the tree (DESIGN.md §4 "Pacing").
//!
//! The parent measures the one-way delay of every order a child sends it (its exchange time of
//! receipt minus the hop's send stamp, [`wire::hop`]) and feeds the median over the last
//! `window` back to the child ([`wire::control::Repr::PacingFeedback`]). The child's [`Pacer`]
//! turns that median into a *pacing quantum*, the gap it leaves between two orders:
//!
//! - above `threshold + dead_band` the gap grows by `step_up`, at most once per `window`;
//! - below `threshold − dead_band` it shrinks by `step_down`, at most once per `window`, never
//!   below zero;
//! - inside the dead band it stays.
//!
//! Aggressive up, gentle down: a drop costs more than idle bandwidth.
//!
//! **Increases only while they help.** Pacing assumes the delay above T is queueing that the
//! child's own sending causes, so that a larger gap shortens it. When that is false (the
//! parent's host is slow for reasons of its own; in `jasper up` every node shares one thread
//! and the "OWD" is the loop's latency) the rule above would raise the gap by 20 µs every
//! window up to `gap_max`, throttle the proxy far below its offered load and grow its queue
//! without end. So the pacer keeps a *streak*: the median at the first increase of a run of
//! increases. An increase is due only while the median has fallen by at least `dead_band`
//! below that reference within `futile_after` increases; a fall that large restarts the streak
//! from the new, lower median. An increase counts only if the gap held an order back before
//! the next one ([`Pacer::note_held`]): a gap shorter than the spacing of the child's own
//! orders cannot have changed anything yet. Once `futile_after` counted increases bought no
//! such fall, the pacer is *futile*: it stops increasing and decays the gap by `step_down` once per window
//! (as below the band) down to zero, and stays there, until the median comes back to
//! `threshold + dead_band` or below, which ends the episode (the delay did respond, or went
//! away) and re-arms the normal rule.
//!
//! With a delay that ignores the gap the gap therefore peaks at `futile_after × step_up`
//! (60 µs by default) and returns to zero, whatever the delay; a delay that falls as
//! the gap grows (by `dead_band` per `futile_after` windows, 10 µs per 120 ms by default) is
//! paced exactly as by the plain rule. Each new streak starts from a median at least
//! `dead_band` lower than the last, so noise alone (records of a stationary series are rare)
//! cannot walk the gap up for long. `futile_after = 0` turns the check off (the plain rule).

use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::Instant;

/// Parameters of pacing; defaults from DESIGN.md §4.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PacingConfig {
    /// Pacing on or off (off: every order is sent as soon as it is queued).
    pub enabled: bool,
    /// Target hop OWD T (70 µs).
    #[serde(with = "humantime_serde")]
    pub threshold: Duration,
    /// Dead band around T (±10 µs); also the fall in OWD that counts as an increase helping.
    #[serde(with = "humantime_serde")]
    pub dead_band: Duration,
    /// Median window at the parent, and the minimum time between two increases (40 ms).
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Gap increase above the band (20 µs).
    #[serde(with = "humantime_serde")]
    pub step_up: Duration,
    /// Gap decrease below the band (10 µs).
    #[serde(with = "humantime_serde")]
    pub step_down: Duration,
    /// Largest gap (a bound, so a broken parent cannot stall a proxy forever).
    #[serde(with = "humantime_serde")]
    pub gap_max: Duration,
    /// How often a parent sends each active child its feedback.
    #[serde(with = "humantime_serde")]
    pub feedback_interval: Duration,
    /// Increases in a row that may leave the OWD where it was (not `dead_band` below the
    /// median at the first of them) before the pacer stops increasing and decays back (3;
    /// 0 = never stop: the plain rule).
    pub futile_after: u32,
}

impl Default for PacingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: Duration::from_micros(70),
            dead_band: Duration::from_micros(10),
            window: Duration::from_millis(40),
            step_up: Duration::from_micros(20),
            step_down: Duration::from_micros(10),
            gap_max: Duration::from_millis(5),
            feedback_interval: Duration::from_millis(1),
            futile_after: 3,
        }
    }
}

/// The sending side: the current pacing quantum.
#[derive(Clone, Debug)]
pub struct Pacer {
    config: PacingConfig,
    gap: Duration,
    last_increase: Option<Instant>,
    last_decrease: Option<Instant>,
    /// The median at the first increase of the current streak, and the increases since.
    streak: Option<(Duration, u32)>,
    /// Increases stopped: the delay did not respond to them.
    futile: bool,
    /// The gap held an order back since the last increase.
    held: bool,
    /// The latest median OWD fed back.
    last_owd: Option<Duration>,
    /// Increases applied.
    pub increases: u64,
    /// Decreases applied.
    pub decreases: u64,
    /// Times the pacer found its increases futile and backed off.
    pub futile_episodes: u64,
}

impl Pacer {
    /// A pacer with no gap yet.
    pub fn new(config: PacingConfig) -> Self {
        Self {
            config,
            gap: Duration::ZERO,
            last_increase: None,
            last_decrease: None,
            streak: None,
            futile: false,
            held: false,
            last_owd: None,
            increases: 0,
            decreases: 0,
            futile_episodes: 0,
        }
    }

    /// The gap to leave between two orders.
    pub fn gap(&self) -> Duration {
        if self.config.enabled {
            self.gap
        } else {
            Duration::ZERO
        }
    }

    /// Whether the pacer has stopped increasing because increases did not lower the delay.
    pub fn is_futile(&self) -> bool {
        self.futile
    }

    /// The child kept an order back because of the gap (the gap binds its sending).
    pub fn note_held(&mut self) {
        self.held = true;
    }

    /// The latest median OWD the parent fed back (also with pacing off).
    pub fn last_owd(&self) -> Option<Duration> {
        self.last_owd
    }

    /// Applies the parent's latest median OWD.
    pub fn on_feedback(&mut self, now: Instant, owd: Duration) {
        self.last_owd = Some(owd);
        let c = self.config;
        if owd > c.threshold + c.dead_band {
            if self.futile {
                self.decrease(now);
            } else if self.due(self.last_increase, now) {
                self.increase(now, owd);
            }
        } else {
            // Back in the band or below: the episode is over; the next one starts afresh.
            self.streak = None;
            self.futile = false;
            if owd + c.dead_band < c.threshold {
                self.decrease(now);
            }
        }
        debug_assert!(self.gap <= c.gap_max);
    }

    /// An increase is due (at most once per window); first, whether the last ones helped.
    fn increase(&mut self, now: Instant, owd: Duration) {
        let c = self.config;
        // The previous increase counts only if the gap it set bound the sending since.
        let held = core::mem::take(&mut self.held);
        // A fall of `dead_band`, or of half the excess over the band when that is smaller (a
        // delay just over the band cannot fall by a whole band and stay over it).
        let helped = |reference: Duration| {
            let excess = reference.saturating_sub(c.threshold + c.dead_band);
            owd + c.dead_band.min(excess / 2) <= reference && owd < reference
        };
        let streak = match self.streak {
            Some((reference, _)) if helped(reference) => (owd, 0),
            Some((reference, n)) => (reference, n + u32::from(held)),
            None => (owd, 0),
        };
        if c.futile_after > 0 && streak.1 >= c.futile_after {
            self.futile = true;
            self.futile_episodes += 1;
            self.streak = None;
            self.decrease(now);
            return;
        }
        self.streak = Some(streak);
        self.gap = (self.gap + c.step_up).min(c.gap_max);
        self.last_increase = Some(now);
        self.increases += 1;
    }

    /// Gentle down: at most once per window (the median moves once per window; feedback
    /// arrives every `feedback_interval`, 40 times as often), never below zero.
    fn decrease(&mut self, now: Instant) {
        if !self.gap.is_zero() && self.due(self.last_decrease, now) {
            self.gap = self.gap.saturating_sub(self.config.step_down);
            self.last_decrease = Some(now);
            self.decreases += 1;
        }
    }

    fn due(&self, last: Option<Instant>, now: Instant) -> bool {
        last.is_none_or(|t| now.saturating_duration_since(t) >= self.config.window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn aggressive_up_gentle_down() {
        let mut p = Pacer::new(PacingConfig::default());
        let t = Instant::from_nanos(1_000_000_000);
        p.on_feedback(t, 100 * US);
        assert_eq!(p.gap(), 20 * US);
        p.on_feedback(t + 10 * MS, 100 * US);
        assert_eq!(p.gap(), 20 * US, "at most one increase per 40 ms window");
        p.on_feedback(t + 40 * MS, 100 * US);
        assert_eq!(p.gap(), 40 * US);
        p.on_feedback(t + 41 * MS, 75 * US);
        assert_eq!(p.gap(), 40 * US, "inside the dead band");
        p.on_feedback(t + 42 * MS, 50 * US);
        assert_eq!(p.gap(), 30 * US);
        p.on_feedback(t + 43 * MS, 50 * US);
        assert_eq!(p.gap(), 30 * US, "at most one decrease per 40 ms window");
        for k in 0..10 {
            p.on_feedback(t + (82 + 40 * k) * MS, 10 * US);
        }
        assert_eq!(p.gap(), Duration::ZERO, "never below zero");
        let off = Pacer {
            gap: 40 * US,
            ..Pacer::new(PacingConfig {
                enabled: false,
                ..PacingConfig::default()
            })
        };
        assert_eq!(off.gap(), Duration::ZERO);
    }

    /// A toy parent: the OWD is `base` plus queueing that grows with the child's send rate
    /// over what the parent absorbs (100 µs per 100% over `capacity`), so the gap responds;
    /// `base` alone is what the child cannot change. The child offers `offered` orders/s, so
    /// the gap holds orders back once it exceeds their spacing.
    fn owd(gap: Duration, offered: f64, capacity: f64, base: Duration) -> Duration {
        let rate = if gap.is_zero() {
            offered
        } else {
            offered.min(1e9 / gap.as_nanos() as f64)
        };
        base + Duration::from_nanos(((rate / capacity - 1.0).max(0.0) * 100_000.0) as u64)
    }

    fn binds(gap: Duration, offered: f64) -> bool {
        gap.as_nanos() as f64 * offered >= 1e9
    }

    /// Feeds `windows` windows of feedback (one a millisecond) from `f(gap)`, the gap binding
    /// all along; returns the largest gap reached.
    fn run(p: &mut Pacer, start: u64, windows: u64, f: impl Fn(Duration) -> Duration) -> Duration {
        let mut peak = p.gap();
        for ms in start * 40..(start + windows) * 40 {
            p.note_held();
            let delay = f(p.gap());
            p.on_feedback(Instant::from_nanos(ms * 1_000_000), delay);
            peak = peak.max(p.gap());
        }
        peak
    }

    /// Goal: a delay that ignores the gap (the parent is slow for its own reasons) does not
    /// drive the gap to its maximum: it peaks at futile_after steps and decays to zero.
    #[test]
    fn a_delay_that_ignores_the_gap_does_not_drive_it_to_max() {
        for base in [100 * US, 500 * US, 5 * MS] {
            let mut p = Pacer::new(PacingConfig::default());
            let peak = run(&mut p, 1, 400, |_| base);
            assert_eq!(peak, 60 * US, "base {base:?}: 3 x 20 us at most");
            assert_eq!(p.gap(), Duration::ZERO, "base {base:?}: decayed back");
            assert!(p.is_futile());
            assert_eq!(
                p.futile_episodes, 1,
                "stays backed off while nothing changes"
            );
            // The plain rule (check off) climbs to the bound.
            let mut plain = Pacer::new(PacingConfig {
                futile_after: 0,
                ..PacingConfig::default()
            });
            run(&mut plain, 1, 400, |_| base);
            assert_eq!(plain.gap(), PacingConfig::default().gap_max);
        }
        // Noise around a high level does not walk the gap up either.
        let mut p = Pacer::new(PacingConfig::default());
        let noisy = |i: u64| 400 * US + Duration::from_nanos((i * 7_919 % 97) * 1_000);
        let mut peak = Duration::ZERO;
        for ms in 40..40 * 400u64 {
            p.note_held();
            p.on_feedback(Instant::from_nanos(ms * 1_000_000), noisy(ms / 40));
            peak = peak.max(p.gap());
        }
        assert!(peak <= 200 * US, "noise: peak {peak:?}");
    }

    /// Goal: a delay that does respond to the gap is paced as by the plain rule: same gaps,
    /// window by window, and the OWD ends inside the band, also when the first increases do
    /// not bind (a child with few orders: the gap must pass their spacing to act); and once
    /// the episode ends (the delay back in the band) a new congestion is paced again.
    #[test]
    fn a_delay_that_responds_is_paced_as_before() {
        // (offered, absorbed) orders/s: the gap must reach 80 µs, or 333 µs with 5K/s.
        for (offered, capacity) in [(20_000.0, 12_500.0), (5_000.0, 3_000.0)] {
            let f = |gap| owd(gap, offered, capacity, 50 * US);
            let mut p = Pacer::new(PacingConfig::default());
            let mut plain = Pacer::new(PacingConfig {
                futile_after: 0,
                ..PacingConfig::default()
            });
            for ms in 40..40 * 100u64 {
                let now = Instant::from_nanos(ms * 1_000_000);
                if binds(p.gap(), offered) {
                    p.note_held();
                }
                p.on_feedback(now, f(p.gap()));
                plain.on_feedback(now, f(plain.gap()));
                assert_eq!(p.gap(), plain.gap(), "{offered}/s at {ms} ms");
            }
            assert!(!p.is_futile());
            assert!(
                f(p.gap()) <= 80 * US,
                "paced into the band: {:?}",
                f(p.gap())
            );
            assert!(
                p.gap().as_nanos() as f64 * capacity >= 0.75e9,
                "gap {:?}",
                p.gap()
            );
        }
        let mut p = Pacer::new(PacingConfig::default());
        let g = |gap| owd(gap, 20_000.0, 12_500.0, 50 * US);
        run(&mut p, 1, 100, g);
        // Unresponsive spell, then the delay comes back and responds again.
        run(&mut p, 101, 200, |_| 300 * US);
        assert!(p.is_futile());
        assert_eq!(p.gap(), Duration::ZERO);
        run(&mut p, 301, 5, |_| 40 * US);
        assert!(!p.is_futile(), "re-armed once the delay came back");
        run(&mut p, 306, 100, g);
        assert!(g(p.gap()) <= 80 * US, "paced again: gap {:?}", p.gap());
    }
}
