//! Per-node clock models: how a node's local [`proto::Instant`] relates to true simulated time.
//!
//! The simulator keeps one true time (nanoseconds since the run began). Every node reads its
//! own local monotonic clock, which the model derives from true time (STYLE.md §11, after
//! TigerBeetle's `src/testing/time.zig`):
//!
//! ```text
//! local(t) = offset + t * (1 + drift_ppm / 1e6)              linear
//!          + amplitude * sin(2 pi t / period)                 periodic
//!          + sum of step jumps with at <= t                   step
//!          + uniform noise in [-noise, +noise] per reading    noisy
//! ```
//!
//! clamped so that it never goes backwards (a monotonic clock cannot) and never below zero.
//! Hold-and-release must survive all four shapes. The root's clock is usually perfect
//! ([`ClockModel::PERFECT`]): the exchange time is the root's time.

use serde::{Deserialize, Serialize};

use crate::rng::SimRng;

/// A clock model, as data (presets and TOML files).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClockModel {
    /// Local reading at true time zero, nanoseconds (negative offsets clamp at zero).
    pub offset_ns: i64,
    /// Rate error in parts per million (+10 runs 10 µs/s fast).
    pub drift_ppm: f64,
    /// Amplitude of a sinusoidal wander, nanoseconds (0 = none).
    pub periodic_amplitude_ns: f64,
    /// Period of the sinusoidal wander, nanoseconds (ignored when the amplitude is 0).
    pub periodic_period_ns: u64,
    /// Step jumps (e.g. an NTP slew gone wrong), in true-time order.
    pub steps: Vec<ClockStep>,
    /// Half-width of uniform read noise, nanoseconds (0 = none).
    pub noise_ns: u64,
}

/// A jump of a clock at a true instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockStep {
    /// True time of the jump, nanoseconds.
    pub at_ns: u64,
    /// The jump, nanoseconds (a backward jump freezes the monotonic clock until it catches up).
    pub jump_ns: i64,
}

impl ClockModel {
    /// Local time equals true time.
    pub const PERFECT: Self = Self {
        offset_ns: 0,
        drift_ppm: 0.0,
        periodic_amplitude_ns: 0.0,
        periodic_period_ns: 0,
        steps: Vec::new(),
        noise_ns: 0,
    };

    /// An offset and a constant drift.
    pub fn linear(offset_ns: i64, drift_ppm: f64) -> Self {
        Self {
            offset_ns,
            drift_ppm,
            ..Self::PERFECT
        }
    }

    /// The clock of a node of `role` in a scenario: the root keeps exchange time (it is the
    /// reference), every other node gets [`Self::random_linear`].
    pub fn for_role(
        role: proto::plan::Role,
        rng: &mut SimRng,
        offset_ns_max: u64,
        drift_ppm_max: f64,
    ) -> Self {
        if role == proto::plan::Role::Root {
            Self::PERFECT
        } else {
            Self::random_linear(rng, offset_ns_max, drift_ppm_max)
        }
    }

    /// A random linear clock: offset uniform in `[0, offset_ns_max)`, drift uniform in
    /// `[-drift_ppm_max, +drift_ppm_max)`.
    pub fn random_linear(rng: &mut SimRng, offset_ns_max: u64, drift_ppm_max: f64) -> Self {
        let offset = if offset_ns_max == 0 {
            0
        } else {
            rng.below(offset_ns_max)
        };
        let drift = (rng.unit() * 2.0 - 1.0) * drift_ppm_max;
        Self::linear(i64::try_from(offset).unwrap_or(i64::MAX), drift)
    }

    /// Whether local time always equals true time.
    pub fn is_perfect(&self) -> bool {
        *self == Self::PERFECT
    }

    /// The noise-free reading at true time `t`, before the monotonic and zero clamps.
    pub fn ideal_ns(&self, t: u64) -> f64 {
        let t_f = t as f64;
        let mut local = self.offset_ns as f64 + t_f * (1.0 + self.drift_ppm * 1e-6);
        if self.periodic_amplitude_ns != 0.0 && self.periodic_period_ns > 0 {
            let phase = core::f64::consts::TAU * t_f / self.periodic_period_ns as f64;
            local += self.periodic_amplitude_ns * phase.sin();
        }
        for step in &self.steps {
            if step.at_ns <= t {
                local += step.jump_ns as f64;
            }
        }
        local
    }

    /// The earliest true time (approximately) at which the noise-free reading reaches `local`:
    /// the inverse the driver needs to turn a node's timer into a simulator event. The driver
    /// re-checks the reading when the event fires and pushes it back if it was early.
    pub fn true_at(&self, local: u64, not_before: u64) -> u64 {
        let rate = 1.0 + self.drift_ppm * 1e-6;
        assert!(
            rate > 0.0,
            "clock drift {} ppm stops the clock",
            self.drift_ppm
        );
        let target = local as f64;
        let mut t = ((target - self.offset_ns as f64) / rate).max(not_before as f64);
        // Newton steps on the linear slope; the periodic and step terms move the root a little.
        for _ in 0..4 {
            let error = target - self.ideal_ns(t as u64);
            if error.abs() < 1.0 {
                break;
            }
            t = (t + error / rate).max(not_before as f64);
        }
        (t.ceil() as u64).max(not_before)
    }
}

/// A node's clock while a run is going: the model plus what it last read.
#[derive(Clone, Debug)]
pub struct Clock {
    model: ClockModel,
    rng: SimRng,
    last_ns: u64,
}

impl Clock {
    /// A clock following `model`; `rng` draws its read noise.
    pub fn new(model: ClockModel, rng: SimRng) -> Self {
        Self {
            model,
            rng,
            last_ns: 0,
        }
    }

    /// The model.
    pub fn model(&self) -> &ClockModel {
        &self.model
    }

    /// Reads the local clock at true time `t`. Monotonic: never below the previous reading.
    pub fn read(&mut self, t: u64) -> proto::Instant {
        let mut local = self.model.ideal_ns(t);
        if self.model.noise_ns > 0 {
            let width = self.model.noise_ns as f64;
            local += (self.rng.unit() * 2.0 - 1.0) * width;
        }
        let local = if local <= 0.0 { 0 } else { local as u64 };
        self.last_ns = self.last_ns.max(local);
        assert!(self.last_ns >= local);
        proto::Instant::from_nanos(self.last_ns)
    }

    /// The last reading (without reading again).
    pub fn last(&self) -> proto::Instant {
        proto::Instant::from_nanos(self.last_ns)
    }

    /// True time (approximately) at which this clock reads `local`; not before `not_before`.
    pub fn true_at(&self, local: proto::Instant, not_before: u64) -> u64 {
        if self.model.is_perfect() {
            return local.as_nanos().max(not_before);
        }
        self.model.true_at(local.as_nanos(), not_before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Purpose;

    fn clock(model: ClockModel) -> Clock {
        Clock::new(model, SimRng::derive(1, Purpose::Clock, 0))
    }

    #[test]
    fn perfect_clock_is_identity() {
        let mut c = clock(ClockModel::PERFECT);
        for t in [0, 1, 1_000, 5_000_000_000] {
            assert_eq!(c.read(t).as_nanos(), t);
            assert_eq!(c.true_at(proto::Instant::from_nanos(t), 0), t);
        }
    }

    #[test]
    fn linear_clock_drifts_and_inverts() {
        let model = ClockModel::linear(1_000_000, 100.0);
        let mut c = clock(model.clone());
        // 1 s of true time runs 1 s + 100 µs locally.
        assert_eq!(c.read(1_000_000_000).as_nanos(), 1_000_000 + 1_000_100_000);
        let local = 2_000_000_000;
        let t = model.true_at(local, 0);
        assert!(model.ideal_ns(t) >= local as f64);
        assert!(model.ideal_ns(t - 2) < local as f64);
    }

    #[test]
    fn every_shape_stays_monotonic_and_invertible() {
        let shapes = [
            ClockModel {
                periodic_amplitude_ns: 5_000.0,
                periodic_period_ns: 1_000_000,
                ..ClockModel::linear(10, -20.0)
            },
            ClockModel {
                steps: vec![
                    ClockStep {
                        at_ns: 500_000,
                        jump_ns: 30_000,
                    },
                    ClockStep {
                        at_ns: 900_000,
                        jump_ns: -50_000,
                    },
                ],
                ..ClockModel::linear(0, 5.0)
            },
            ClockModel {
                noise_ns: 200,
                ..ClockModel::linear(7, 1.0)
            },
        ];
        for model in shapes {
            let mut c = clock(model.clone());
            let mut previous = 0;
            for t in (0..2_000_000).step_by(997) {
                let local = c.read(t).as_nanos();
                assert!(local >= previous, "{model:?} went back at {t}");
                previous = local;
            }
            // A timer set for a local instant fires at a true time whose reading is close.
            let target = 1_500_000;
            let t = model.true_at(target, 0);
            let reached = model.ideal_ns(t);
            assert!(
                (reached - target as f64).abs() < 2_000.0,
                "{model:?}: {reached} vs {target}"
            );
        }
    }
}
