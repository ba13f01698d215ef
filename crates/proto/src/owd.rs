//! One-way-delay tracking for hold-and-release deadlines (DESIGN.md §4 "Hold-and-release").
//!
//! A gateway records the OWD (exchange receive time − root send time) of every packet and,
//! every report interval, reports a high percentile of the samples of the last window to its
//! home parent. Each proxy keeps its children's latest reports and reports their maximum up;
//! the root turns the maximum into the release deadline offset. Reports expire, so a dead
//! child stops holding the deadline up forever.

use core::time::Duration;

use crate::node::NodeId;
use crate::time::Instant;

/// Parameters of OWD tracking and deadlines; defaults from DESIGN.md §4.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OwdConfig {
    /// Samples older than this are forgotten (10 ms).
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Reported percentile, in hundredths (9700 = p97; the paper's text says p95).
    pub percentile_centi: u32,
    /// Which sample a percentile picks ([`Rank`]): the nearest rank (the default), or the
    /// authors' prototype's rule.
    pub rank: Rank,
    /// How often gateways and proxies report (15 ms).
    #[serde(with = "humantime_serde")]
    pub report_interval: Duration,
    /// A child's report older than this no longer counts (4 report intervals).
    #[serde(with = "humantime_serde")]
    pub report_expiry: Duration,
    /// Added to the max OWD to make the deadline (25 µs).
    #[serde(with = "humantime_serde")]
    pub margin: Duration,
    /// OWD assumed before any report arrives (50 µs).
    #[serde(with = "humantime_serde")]
    pub initial_owd: Duration,
    /// Samples kept at most; the oldest go first.
    pub samples_max: usize,
    /// A fixed OWD instead of the reported one: the root ignores reports and every deadline
    /// is `send_time + fixed_owd + margin`. CloudEx's hold-and-release works this way (a
    /// fixed delay at the gateways, no OWD feedback); `None` (the default) is Jasper's.
    #[serde(with = "humantime_serde")]
    pub fixed_owd: Option<Duration>,
    /// With receiver hedging, whether the deadline need cover only each participant's faster
    /// gateway ([`TwinOwd`]; true, the default) or every gateway (false, as without twins).
    pub twin_deadline: bool,
}

impl Default for OwdConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_millis(10),
            percentile_centi: 9700,
            rank: Rank::Nearest,
            report_interval: Duration::from_millis(15),
            report_expiry: Duration::from_millis(60),
            margin: Duration::from_micros(25),
            initial_owd: Duration::from_micros(50),
            samples_max: 8192,
            fixed_owd: None,
            twin_deadline: true,
        }
    }
}

/// Which of `n` sorted samples a percentile is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rank {
    /// The nearest rank: the least sample with at least that share of the samples at or
    /// below it. p97 of 50 samples is the 49th, the second-largest.
    #[default]
    Nearest,
    /// Zero-based index `floor(p × (n − 1))`, with no interpolation: what the authors'
    /// prototype computes (`calculatePercentile` in its `src/utils/common.hpp`, whose
    /// interpolating branch never runs because the index is an `int`). p97 of 50 samples is
    /// the 48th, the third-largest, so a window needs one more late copy to raise the
    /// deadline.
    Floor,
}

impl Rank {
    /// Zero-based index of the `percentile_centi` percentile among `n > 0` sorted samples.
    pub fn index(self, n: usize, percentile_centi: u32) -> usize {
        assert!(n > 0);
        let (n, p) = (n as u64, u64::from(percentile_centi.min(10_000)));
        match self {
            Self::Nearest => (n * p).div_ceil(10_000).clamp(1, n) as usize - 1,
            Self::Floor => ((n - 1) * p / 10_000) as usize,
        }
    }
}

/// The longest a deadline may add to the max reported OWD ([`OwdConfig::margin`]): far
/// beyond any network's tail, and short enough that deadlines stay near their packets.
pub const MARGIN_MAX: Duration = Duration::from_secs(1);

impl OwdConfig {
    /// Checks what a config file could get wrong: the margin, the initial and the fixed OWD
    /// within [`MARGIN_MAX`] (a deadline seconds after its packet holds market data for
    /// nobody), and the percentile in (0, 100].
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("margin", Some(self.margin)),
            ("initial_owd", Some(self.initial_owd)),
            ("fixed_owd", self.fixed_owd),
        ] {
            if let Some(value) = value.filter(|&v| v > MARGIN_MAX) {
                return Err(format!(
                    "node.owd.{name} must be at most {} s, got {} µs",
                    MARGIN_MAX.as_secs(),
                    value.as_micros()
                ));
            }
        }
        if !(1..=10_000).contains(&self.percentile_centi) {
            return Err(format!(
                "node.owd.percentile_centi must be from 1 to 10000 (hundredths of a \
                 percentile: 9700 = p97), got {}",
                self.percentile_centi
            ));
        }
        Ok(())
    }
}

/// A missed packet's place in an [`OwdWindow`].
const MISSED: u64 = u64::MAX;

/// A gateway's sliding window of OWD samples.
#[derive(Clone, Debug)]
pub struct OwdWindow {
    /// (local receive time, owd ns), oldest first.
    samples: std::collections::VecDeque<(Instant, u64)>,
    scratch: Vec<u64>,
    samples_max: usize,
}

impl OwdWindow {
    /// An empty window keeping at most `samples_max` samples.
    pub fn new(samples_max: usize) -> Self {
        assert!(samples_max > 0);
        // Storage grows to the bound on demand: most windows stay far smaller.
        Self {
            samples: std::collections::VecDeque::new(),
            scratch: Vec::new(),
            samples_max,
        }
    }

    /// Records one sample.
    pub fn record(&mut self, now: Instant, owd_ns: u64) {
        debug_assert!(owd_ns != MISSED);
        self.push(now, owd_ns);
    }

    /// Records a packet this gateway missed (it came only through recovery): it counts in
    /// [`OwdWindow::percentile_counting_missed`] as later than any OWD, and not at all in
    /// [`OwdWindow::percentile`].
    pub fn record_missed(&mut self, now: Instant) {
        self.push(now, MISSED);
    }

    fn push(&mut self, now: Instant, owd_ns: u64) {
        if self.samples.len() == self.samples_max {
            self.samples.pop_front();
        }
        self.samples.push_back((now, owd_ns));
    }

    /// Forgets samples older than `window` and returns the `percentile_centi` percentile
    /// (picked by `rank`) of the packets received in time, with their count, or `None` if
    /// there are none.
    pub fn percentile(
        &mut self,
        now: Instant,
        window: Duration,
        percentile_centi: u32,
        rank: Rank,
    ) -> Option<(u64, u32)> {
        self.select(now, window, percentile_centi, rank, false)
    }

    /// As [`OwdWindow::percentile`], over missed packets too (as `u64::MAX`): the time by
    /// which this gateway had that share of the window's packets.
    pub fn percentile_counting_missed(
        &mut self,
        now: Instant,
        window: Duration,
        percentile_centi: u32,
        rank: Rank,
    ) -> Option<(u64, u32)> {
        self.select(now, window, percentile_centi, rank, true)
    }

    fn select(
        &mut self,
        now: Instant,
        window: Duration,
        percentile_centi: u32,
        rank: Rank,
        missed: bool,
    ) -> Option<(u64, u32)> {
        let horizon = now - window;
        while self.samples.front().is_some_and(|&(t, _)| t < horizon) {
            self.samples.pop_front();
        }
        self.scratch.clear();
        self.scratch.extend(
            self.samples
                .iter()
                .map(|&(_, owd)| owd)
                .filter(|&owd| missed || owd != MISSED),
        );
        if self.scratch.is_empty() {
            return None;
        }
        let index = rank.index(self.scratch.len(), percentile_centi);
        let count = self.scratch.len() as u32;
        let (_, value, _) = self.scratch.select_nth_unstable(index);
        Some((*value, count))
    }

    /// Samples currently held.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no samples are held.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// A gateway's view of its twin's OWD percentile, with receiver hedging.
///
/// A participant with two gateways acts on whichever releases a packet first, so a release
/// deadline is fair to it when its *faster* gateway has the packet in time; covering the
/// slower one too (every gateway, as without twins) only makes everybody wait for it. So each
/// twin also sends the other its percentile, and reports to its parent the lesser of its
/// own and the twin's latest. Proxies and the root take the maximum as before, which then
/// covers, for every participant, its better gateway: P(both late) is at most the
/// percentile's tail, as P(late) was for a lone gateway. The slower twin releases late more
/// often; the participant does not.
///
/// The bound needs the twin's percentile over the same packets, and a gateway's own window
/// holds only what it received in time. So what a twin sends counts the packets it missed
/// (came only through recovery) as later than any OWD
/// ([`OwdWindow::percentile_counting_missed`]): a twin that missed more than the tail
/// (loss, a dead parent before its failover) sends `u64::MAX` and lowers nothing, while
/// what each reports to its parent is its own percentile, or lower: if both missed many,
/// the pair reports what it did without twins.
#[derive(Clone, Copy, Debug, Default)]
pub struct TwinOwd {
    /// (local receive time, owd ns) of the twin's latest report.
    latest: Option<(Instant, u64)>,
}

impl TwinOwd {
    /// The twin reported `owd_ns`.
    pub fn hear(&mut self, now: Instant, owd_ns: u64) {
        self.latest = Some((now, owd_ns));
    }

    /// What to report to the parent: `own_ns`, or the twin's report if that is lower and no
    /// older than `expiry` (a dead twin's last word does not count forever).
    pub fn lesser(&self, now: Instant, own_ns: u64, expiry: Duration) -> u64 {
        match self.latest {
            Some((at, twin_ns)) if at >= now - expiry => own_ns.min(twin_ns),
            _ => own_ns,
        }
    }
}

/// The latest report of each child, for max-aggregation at proxies and the root.
#[derive(Clone, Debug)]
pub struct OwdAggregate {
    /// (child, owd ns, local receive time), one entry per child that has reported.
    latest: Vec<(NodeId, u64, Instant)>,
    children_max: usize,
}

impl OwdAggregate {
    /// An aggregate over at most `children_max` reporting children.
    pub fn new(children_max: usize) -> Self {
        Self {
            latest: Vec::with_capacity(children_max),
            children_max,
        }
    }

    /// Records `child`'s report; returns false (and records nothing) if the table is full.
    pub fn record(&mut self, now: Instant, child: NodeId, owd_ns: u64) -> bool {
        if let Some(entry) = self.latest.iter_mut().find(|(c, _, _)| *c == child) {
            *entry = (child, owd_ns, now);
            return true;
        }
        if self.latest.len() == self.children_max {
            return false;
        }
        self.latest.push((child, owd_ns, now));
        true
    }

    /// The maximum of the reports younger than `expiry`.
    pub fn max(&self, now: Instant, expiry: Duration) -> Option<u64> {
        let horizon = now - expiry;
        self.latest
            .iter()
            .filter(|&&(_, _, t)| t >= horizon)
            .map(|&(_, owd, _)| owd)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_twin_lowers_the_report_while_its_word_is_fresh() {
        let expiry = Duration::from_millis(60);
        let at = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        let mut twin = TwinOwd::default();
        assert_eq!(twin.lesser(at(10), 90_000, expiry), 90_000, "no word yet");
        twin.hear(at(10), 60_000);
        assert_eq!(twin.lesser(at(20), 90_000, expiry), 60_000);
        assert_eq!(twin.lesser(at(20), 50_000, expiry), 50_000, "own is lower");
        assert_eq!(twin.lesser(at(70), 90_000, expiry), 60_000, "at the expiry");
        assert_eq!(twin.lesser(at(71), 90_000, expiry), 90_000, "expired");
        twin.hear(at(80), u64::MAX);
        assert_eq!(
            twin.lesser(at(80), 90_000, expiry),
            90_000,
            "a twin that missed"
        );
    }

    /// A window holding OWDs 1,000, 1,001, ... (`count` of them), all received at `now`.
    fn window_of(count: u64, now: Instant) -> OwdWindow {
        let mut w = OwdWindow::new(1000);
        for i in 0..count {
            w.record(now, 1_000 + i);
        }
        w
    }

    #[test]
    fn missed_packets_count_only_where_asked() {
        let window = Duration::from_millis(10);
        let now = Instant::from_nanos(5_000_000);
        let mut w = window_of(97, now);
        for _ in 0..3 {
            w.record_missed(now);
        }
        // p97 of what arrived: the 95th of 97 (nearest rank), 1094.
        assert_eq!(
            w.percentile(now, window, 9700, Rank::Nearest),
            Some((1_094, 97))
        );
        // Counting the 3 missed: the 97th of 100 is the last received, 1096.
        assert_eq!(
            w.percentile_counting_missed(now, window, 9700, Rank::Nearest),
            Some((1_096, 100))
        );
        // One more missed and the 97th falls among them.
        w.record_missed(now);
        assert_eq!(
            w.percentile_counting_missed(now, window, 9700, Rank::Nearest),
            Some((u64::MAX, 101))
        );
        // Only missed packets: nothing received to report.
        let mut lost = OwdWindow::new(10);
        lost.record_missed(now);
        assert_eq!(lost.percentile(now, window, 9700, Rank::Nearest), None);
        assert_eq!(
            lost.percentile_counting_missed(now, window, 9700, Rank::Nearest),
            Some((u64::MAX, 1))
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let nearest = |n, p| Rank::Nearest.index(n, p);
        assert_eq!(nearest(100, 9700), 96);
        assert_eq!(nearest(1, 9700), 0);
        assert_eq!(nearest(10, 5000), 4);
        assert_eq!(nearest(10, 10_000), 9);
        assert_eq!(nearest(10, 0), 0);
    }

    /// The prototype's rule picks one sample lower than the nearest rank where p·n is not
    /// whole: p97 of 50 is the third-largest, not the second.
    #[test]
    fn floor_rank_is_the_prototypes_percentile() {
        assert_eq!(Rank::Floor.index(50, 9700), 47);
        assert_eq!(Rank::Nearest.index(50, 9700), 48);
        assert_eq!(Rank::Floor.index(100, 9700), 96);
        assert_eq!(Rank::Floor.index(1, 9700), 0);
        assert_eq!(Rank::Floor.index(10, 10_000), 9);
        assert_eq!(Rank::Floor.index(10, 0), 0);
        assert_eq!(Rank::Floor.index(10, 20_000), 9, "clamped to p100");
        let now = Instant::from_nanos(5_000_000);
        let mut w = window_of(50, now);
        let window = Duration::from_millis(10);
        assert_eq!(
            w.percentile(now, window, 9700, Rank::Floor),
            Some((1_047, 50))
        );
        assert_eq!(
            w.percentile(now, window, 9700, Rank::Nearest),
            Some((1_048, 50))
        );
    }

    #[test]
    fn window_forgets_old_samples() {
        let mut w = OwdWindow::new(1000);
        for i in 0..100u64 {
            w.record(Instant::from_nanos(i * 1_000_000), 1000 + i);
        }
        let now = Instant::from_nanos(99 * 1_000_000);
        // Only samples at 89..=99 ms are within 10 ms.
        let (p, n) = w
            .percentile(now, Duration::from_millis(10), 10_000, Rank::Nearest)
            .unwrap();
        assert_eq!((p, n), (1099, 11));
        let (p, _) = w
            .percentile(now, Duration::from_millis(10), 0, Rank::Nearest)
            .unwrap();
        assert_eq!(p, 1089);
        assert!(
            w.percentile(
                now + Duration::from_secs(1),
                Duration::from_millis(10),
                9700,
                Rank::Nearest
            )
            .is_none()
        );
    }

    #[test]
    fn aggregate_takes_max_of_fresh_reports() {
        let mut a = OwdAggregate::new(2);
        let t = Instant::from_nanos(1_000_000_000);
        assert!(a.record(t, NodeId(1), 100));
        assert!(a.record(t, NodeId(2), 300));
        assert!(!a.record(t, NodeId(3), 900), "bounded");
        assert_eq!(a.max(t, Duration::from_millis(60)), Some(300));
        assert!(a.record(t + Duration::from_millis(50), NodeId(1), 120));
        assert_eq!(
            a.max(t + Duration::from_millis(100), Duration::from_millis(60)),
            Some(120)
        );
        assert_eq!(
            a.max(t + Duration::from_secs(1), Duration::from_millis(60)),
            None
        );
    }
}
