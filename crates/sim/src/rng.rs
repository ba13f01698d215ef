//! Seeded randomness: one `u64` seed, split into independent per-purpose streams.
//!
//! Every draw in the simulator comes from a [`SimRng`], a SplitMix64 stream (Steele, Lea and
//! Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014; the generator of
//! Java's `SplittableRandom`, which passes BigCrush). The algorithm is written out here, so a
//! seed replays on any machine (smoltcp's `tests/netsim.rs` pins ChaCha20 the same way).
//! Streams are derived from `(seed, purpose, index)` rather than drawn from one shared
//! stream, so adding a node or a link does not shift the draws of the others: the link from 3
//! to 7 sees the same base latency and jitter whether the tree has 10 or 10,000 leaves.
//!
//! Why not a cryptographic stream: the simulator keeps two streams per directed link, and at
//! N = 10,000 with RRPS every proxy talks to every node of the next layer (10 million links).
//! A ChaCha8 stream carries a 256-byte block buffer (~312 bytes), which made the links alone
//! ~7 GB; a SplitMix64 stream is one `u64` and each draw a few multiplies. Derived streams
//! start at independent 64-bit points of the generator's 2^64 cycle, so two streams overlap
//! only with negligible probability (10^7 streams of 10^6 draws each: ~10^-5).
//!
//! The distributions are written out here instead of taken from `rand_distr`, so that the
//! numbers a seed produces depend only on this file.

use serde::{Deserialize, Serialize};

/// What a derived stream is for; part of the stream's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// One directed link's base latency, jitter, spikes and loss; index = `source << 32 | target`.
    Link = 1,
    /// One host's straggler episodes; index = host id.
    Straggler = 2,
    /// One host's clock noise; index = host id.
    Clock = 3,
    /// Drawing a configuration (swarm testing) or a workload; index chosen by the caller.
    Config = 4,
    /// Free for callers (workloads, tests); index chosen by the caller.
    User = 5,
}

/// A deterministic random stream (SplitMix64: one word of state).
#[derive(Clone, Debug)]
pub struct SimRng {
    state: u64,
}

/// Words of the stream one [`SimRng::normal`] takes.
pub const NORMAL_DRAWS: u64 = 2;
/// Words of the stream one [`SimRng::exponential`] takes.
pub const EXPONENTIAL_DRAWS: u64 = 1;

/// SplitMix64's increment: the odd integer nearest 2^64 / golden ratio.
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SimRng {
    /// The stream for `purpose` and `index` under the run's `seed`.
    pub fn derive(seed: u64, purpose: Purpose, index: u64) -> Self {
        let words = [
            splitmix64(seed),
            splitmix64(seed ^ (purpose as u64).wrapping_mul(GOLDEN_GAMMA)),
            splitmix64(index ^ 0xD1B5_4A32_D192_ED03),
            splitmix64(index.rotate_left(17) ^ seed),
        ];
        // Chain the words through the mixer so every bit of each reaches the start point.
        let state = words
            .iter()
            .fold(0x005E_ED0F_5EED_u64, |acc, &word| splitmix64(acc ^ word));
        Self { state }
    }

    /// A stream directly from a seed (the run's top-level stream).
    pub fn from_seed(seed: u64) -> Self {
        Self::derive(seed, Purpose::User, u64::MAX)
    }

    /// A uniform `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }

    /// Moves the stream on by `draws` words, as `draws` calls of [`Self::next_u64`] would, in
    /// one addition (SplitMix64's state is a counter). For a draw whose value is not needed:
    /// the stream stays where it would be, so the draws after it do not change.
    pub fn skip(&mut self, draws: u64) {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA.wrapping_mul(draws));
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, bound)`; `bound` must be positive. Lemire's multiply-shift, with the
    /// rejection step, so it is exactly uniform.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "below(0)");
        loop {
            let product = u128::from(self.next_u64()) * u128::from(bound);
            let low = product as u64;
            if low >= bound.wrapping_neg() % bound {
                return (product >> 64) as u64;
            }
        }
    }

    /// True with probability `p` (clamped to `[0, 1]`). `p == 0` never draws true.
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.unit() < p
    }

    /// A standard normal draw ([`NORMAL_DRAWS`] words; Box-Muller; one of the pair is discarded to keep the stream
    /// stateless apart from ChaCha's position).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit(); // (0, 1]: ln is finite.
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (core::f64::consts::TAU * u2).cos()
    }

    /// An exponential draw with the given mean ([`EXPONENTIAL_DRAWS`] words).
    pub fn exponential(&mut self, mean: f64) -> f64 {
        let u = 1.0 - self.unit();
        -mean * u.ln()
    }

    /// A draw from `dist`, in the distribution's unit (nanoseconds for latencies).
    pub fn sample(&mut self, dist: &Dist) -> f64 {
        let value = match *dist {
            Dist::Constant { value } => value,
            Dist::Uniform { low, high } => low + (high - low) * self.unit(),
            Dist::Normal { mean, std_dev } => mean + std_dev * self.normal(),
            Dist::LogNormal { median, sigma } => median * (sigma * self.normal()).exp(),
            Dist::Exponential { mean } => self.exponential(mean),
            Dist::Pareto { scale, shape } => {
                let u = 1.0 - self.unit();
                scale * u.powf(-1.0 / shape)
            }
        };
        value.max(0.0)
    }
}

/// A non-negative distribution, as data (presets and TOML files name it with `kind = "..."`).
///
/// Every draw is clamped at zero: a latency never goes negative.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Dist {
    /// Always `value`.
    Constant {
        /// The value.
        value: f64,
    },
    /// Uniform in `[low, high)`.
    Uniform {
        /// Inclusive lower end.
        low: f64,
        /// Exclusive upper end.
        high: f64,
    },
    /// Normal, clamped at zero.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std_dev: f64,
    },
    /// Log-normal: `median * exp(sigma * N(0, 1))`; heavy right tail.
    LogNormal {
        /// Median.
        median: f64,
        /// Standard deviation of the logarithm.
        sigma: f64,
    },
    /// Exponential.
    Exponential {
        /// Mean.
        mean: f64,
    },
    /// Pareto (type I): `scale * U^(-1/shape)`; heavier tail the smaller `shape`.
    Pareto {
        /// Minimum value.
        scale: f64,
        /// Tail index (> 0).
        shape: f64,
    },
}

impl Dist {
    /// A distribution that always yields zero.
    pub const ZERO: Self = Self::Constant { value: 0.0 };

    /// The distribution's mean (infinite for a Pareto with `shape <= 1`).
    pub fn mean(&self) -> f64 {
        match *self {
            Self::Constant { value } => value,
            Self::Uniform { low, high } => (low + high) / 2.0,
            Self::Normal { mean, .. } => mean,
            Self::LogNormal { median, sigma } => median * (sigma * sigma / 2.0).exp(),
            Self::Exponential { mean } => mean,
            Self::Pareto { scale, shape } => {
                if shape <= 1.0 {
                    f64::INFINITY
                } else {
                    scale * shape / (shape - 1.0)
                }
            }
        }
    }

    /// Largest parameter a distribution may have: 10^12 (1000 s as nanoseconds; as a rate,
    /// 10^12 per second), so a draw stays far from `u64` overflow when it becomes a time.
    pub const PARAM_MAX: f64 = 1e12;

    /// Checks the parameters: finite, at most [`Dist::PARAM_MAX`], spreads and scales
    /// non-negative, a uniform's ends in order, a Pareto's shape positive (and a log-normal's
    /// sigma at most 10, beyond which a draw overflows). `what` names it in the error.
    pub fn validate(&self, what: &str) -> Result<(), String> {
        let in_range = |name: &str, v: f64, low: f64, high: f64| {
            if (low..=high).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{what}: {name} must be between {} and {}, got {}",
                    short(low),
                    short(high),
                    short(v)
                ))
            }
        };
        let max = Self::PARAM_MAX;
        match *self {
            Self::Constant { value } => in_range("value", value, 0.0, max),
            Self::Uniform { low, high } => {
                in_range("low", low, 0.0, max)?;
                in_range("high", high, low, max)
            }
            Self::Normal { mean, std_dev } => {
                in_range("mean", mean, -max, max)?;
                in_range("std_dev", std_dev, 0.0, max)
            }
            Self::LogNormal { median, sigma } => {
                in_range("median", median, 0.0, max)?;
                in_range("sigma", sigma, 0.0, 10.0)
            }
            Self::Exponential { mean } => in_range("mean", mean, 0.0, max),
            Self::Pareto { scale, shape } => {
                in_range("scale", scale, 0.0, max)?;
                if shape > 0.0 && shape <= max {
                    Ok(())
                } else {
                    Err(format!(
                        "{what}: shape must be positive and at most {}, got {}",
                        short(max),
                        short(shape)
                    ))
                }
            }
        }
    }

    /// Whether every draw is zero.
    pub fn is_zero(&self) -> bool {
        match *self {
            Self::Constant { value } => value <= 0.0,
            Self::Uniform { high, .. } => high <= 0.0,
            Self::LogNormal { median, .. } => median <= 0.0,
            Self::Exponential { mean } => mean <= 0.0,
            Self::Pareto { scale, .. } => scale <= 0.0,
            Self::Normal { .. } => false,
        }
    }
}

/// `v` for an error message: plain when it is short, in exponent form (`1e300`) when not.
fn short(v: f64) -> String {
    if v == 0.0 || (1e-3..1e9).contains(&v.abs()) || !v.is_finite() {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// SplitMix64's finaliser: a bijective 64-bit mixer (used to derive stream keys and to hash).
pub fn splitmix64(x: u64) -> u64 {
    mix64(x.wrapping_add(GOLDEN_GAMMA))
}

/// SplitMix64's output function (a variant of MurmurHash3's 64-bit finaliser).
fn mix64(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: `skip` leaves a stream exactly where the draws it stands for would, so a copy
    /// whose jitter term is not needed does not shift the draws after it. Method: streams that
    /// draw a normal and an exponential against streams that skip their word counts.
    #[test]
    fn skip_moves_the_stream_as_the_draws_would() {
        for seed in 0..64 {
            let mut drawn = SimRng::from_seed(seed);
            let mut skipped = drawn.clone();
            let _ = drawn.normal();
            let _ = drawn.exponential(1.0);
            skipped.skip(NORMAL_DRAWS + EXPONENTIAL_DRAWS);
            assert_eq!(drawn.next_u64(), skipped.next_u64(), "seed {seed}");
            let _ = drawn.normal();
            skipped.skip(NORMAL_DRAWS);
            assert_eq!(drawn.next_u64(), skipped.next_u64(), "seed {seed}");
        }
    }

    /// Goal: the generator is SplitMix64 exactly, so a seed replays on any machine. Method:
    /// the first outputs from state 1234567 against Vigna's reference `splitmix64.c`.
    #[test]
    fn generator_is_reference_splitmix64() {
        let mut rng = SimRng { state: 1_234_567 };
        let outputs: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            outputs,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423
            ]
        );
        assert_eq!(size_of::<SimRng>(), 8);
    }

    #[test]
    fn streams_are_reproducible_and_independent() {
        let mut a = SimRng::derive(7, Purpose::Link, 3 << 32 | 4);
        let mut b = SimRng::derive(7, Purpose::Link, 3 << 32 | 4);
        let mut c = SimRng::derive(7, Purpose::Link, 4 << 32 | 3);
        let mut d = SimRng::derive(8, Purpose::Link, 3 << 32 | 4);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        let ws: Vec<u64> = (0..8).map(|_| d.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
        assert_ne!(xs, ws);
    }

    #[test]
    fn distributions_have_their_means() {
        let mut rng = SimRng::from_seed(1);
        let n = 200_000;
        for dist in [
            Dist::Uniform {
                low: 0.0,
                high: 1.0,
            },
            Dist::Exponential { mean: 5.0 },
            Dist::LogNormal {
                median: 10.0,
                sigma: 0.5,
            },
            Dist::Normal {
                mean: 100.0,
                std_dev: 3.0,
            },
            Dist::Pareto {
                scale: 1.0,
                shape: 3.0,
            },
        ] {
            let mean = (0..n).map(|_| rng.sample(&dist)).sum::<f64>() / f64::from(n);
            let expect = dist.mean();
            assert!(
                (mean - expect).abs() < 0.02 * expect,
                "{dist:?}: {mean} vs {expect}"
            );
        }
    }

    #[test]
    fn below_is_in_range_and_covers_it() {
        let mut rng = SimRng::from_seed(2);
        let mut seen = [0u32; 7];
        for _ in 0..7_000 {
            seen[rng.below(7) as usize] += 1;
        }
        assert!(
            seen.iter().all(|&count| (800..1200).contains(&count)),
            "{seen:?}"
        );
    }

    #[test]
    fn chance_matches_probability() {
        let mut rng = SimRng::from_seed(3);
        assert!(!(0..10_000).any(|_| rng.chance(0.0)));
        let hits = (0..100_000).filter(|_| rng.chance(0.01)).count();
        assert!((800..1200).contains(&hits), "{hits}");
    }
}
