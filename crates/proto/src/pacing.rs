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

use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::Instant;

/// Parameters of pacing; defaults from DESIGN.md §4.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PacingConfig {
    /// Pacing on or off (off: every order is sent as soon as it is queued).
    pub enabled: bool,
    /// Target hop OWD T (70 µs).
    #[serde(with = "humantime_serde")]
    pub threshold: Duration,
    /// Dead band around T (±10 µs).
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
    /// Increases and decreases applied.
    pub increases: u64,
    /// Decreases applied.
    pub decreases: u64,
}

impl Pacer {
    /// A pacer with no gap yet.
    pub fn new(config: PacingConfig) -> Self {
        Self {
            config,
            gap: Duration::ZERO,
            last_increase: None,
            last_decrease: None,
            increases: 0,
            decreases: 0,
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

    /// Applies the parent's latest median OWD.
    pub fn on_feedback(&mut self, now: Instant, owd: Duration) {
        let c = &self.config;
        if owd > c.threshold + c.dead_band {
            let due = self
                .last_increase
                .is_none_or(|t| now.saturating_duration_since(t) >= c.window);
            if due {
                self.gap = (self.gap + c.step_up).min(c.gap_max);
                self.last_increase = Some(now);
                self.increases += 1;
            }
        } else if owd + c.dead_band < c.threshold && !self.gap.is_zero() {
            // Gentle down: also at most once per window (the median moves once per window;
            // feedback arrives every `feedback_interval`, 40 times as often).
            let due = self
                .last_decrease
                .is_none_or(|t| now.saturating_duration_since(t) >= c.window);
            if due {
                self.gap = self.gap.saturating_sub(c.step_down);
                self.last_decrease = Some(now);
                self.decreases += 1;
            }
        }
        debug_assert!(self.gap <= c.gap_max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn aggressive_up_gentle_down() {
        let mut p = Pacer::new(PacingConfig::default());
        let t = Instant::from_nanos(1_000_000_000);
        p.on_feedback(t, 100 * US);
        assert_eq!(p.gap(), 20 * US);
        p.on_feedback(t + Duration::from_millis(10), 100 * US);
        assert_eq!(p.gap(), 20 * US, "at most one increase per 40 ms window");
        p.on_feedback(t + Duration::from_millis(40), 100 * US);
        assert_eq!(p.gap(), 40 * US);
        p.on_feedback(t + Duration::from_millis(41), 75 * US);
        assert_eq!(p.gap(), 40 * US, "inside the dead band");
        p.on_feedback(t + Duration::from_millis(42), 50 * US);
        assert_eq!(p.gap(), 30 * US);
        p.on_feedback(t + Duration::from_millis(43), 50 * US);
        assert_eq!(p.gap(), 30 * US, "at most one decrease per 40 ms window");
        for k in 0..10 {
            p.on_feedback(t + Duration::from_millis(82 + 40 * k), 10 * US);
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
}
