//! Pieces of the inbound (order) path shared by proxies and the root: measuring the hop OWD
//! of each child's orders for pacing feedback, and dropping the second copy of a
//! receiver-hedged order.

use core::time::Duration;
use std::collections::{BTreeSet, VecDeque};

use wire::control::Repr as Control;

use crate::core::{Core, Timer};
use crate::node::NodeId;
use crate::owd::OwdWindow;
use crate::plan::Role;
use crate::time::Instant;

/// Per-child hop-OWD windows of a parent (DESIGN.md §4 "Pacing").
#[derive(Clone, Debug)]
pub(crate) struct InboundMeter {
    first_child: u32,
    windows: Vec<OwdWindow>,
    /// Whether the child sent anything since the last feedback.
    active: Vec<bool>,
}

impl InboundMeter {
    /// Windows for the children with ids `children`.
    pub(crate) fn new(children: core::ops::Range<u32>, samples_max: usize) -> Self {
        let n = children.len();
        Self {
            first_child: children.start,
            windows: (0..n).map(|_| OwdWindow::new(samples_max)).collect(),
            active: vec![false; n],
        }
    }

    /// Records one order's hop OWD; false if `child` is not a child.
    pub(crate) fn record(&mut self, now: Instant, child: NodeId, owd_ns: u64) -> bool {
        let Some(i) = child.0.checked_sub(self.first_child).map(|i| i as usize) else {
            return false;
        };
        let Some(window) = self.windows.get_mut(i) else {
            return false;
        };
        window.record(now, owd_ns);
        self.active[i] = true;
        true
    }

    /// The median hop OWD of each child that sent orders since the last call, over `window`.
    pub(crate) fn feedback(
        &mut self,
        now: Instant,
        window: Duration,
        out: &mut Vec<(NodeId, u64, u32)>,
    ) {
        for (i, w) in self.windows.iter_mut().enumerate() {
            if !core::mem::take(&mut self.active[i]) {
                continue;
            }
            if let Some((median, samples)) = w.percentile(now, window, 5000) {
                out.push((NodeId(self.first_child + i as u32), median, samples));
            }
        }
    }
}

/// First-copy-wins over `(participant, client order id)`, remembering the last `max` keys,
/// and beyond those every key seen within `keep` (up to [`HEDGE_DEDUPE_HARD_FACTOR`] times
/// `max`): a gateway resends its unanswered orders after a failover
/// ([`crate::failover`]), and the copy of one that did get through must still be recognised,
/// however many orders came in between.
#[derive(Clone, Debug)]
pub(crate) struct HedgeDedupe {
    order: VecDeque<((u32, u64), Instant)>,
    seen: BTreeSet<(u32, u64)>,
    max: usize,
    keep: Duration,
}

/// Dedupe filters remember every key seen within this many `parent_timeout`s: a gateway
/// resends orders up to twice `parent_timeout` old, and a failover comes a `parent_timeout`
/// or more after the death.
pub(crate) const RESEND_KEEP_TIMEOUTS: u32 = 4;

/// A dedupe filter holds at most this many times its `max` keys, however recent (a memory
/// bound: 1M keys, ~50 MB, with the default `hedge_dedupe_max`).
pub(crate) const HEDGE_DEDUPE_HARD_FACTOR: usize = 16;

impl HedgeDedupe {
    /// The filter a node of `config` runs: at least `hedge_dedupe_max` keys, and every key
    /// of the last [`RESEND_KEEP_TIMEOUTS`] `parent_timeout`s.
    pub(crate) fn for_node(config: &crate::config::NodeConfig) -> Self {
        Self::new(
            config.hedge_dedupe_max,
            config.parent_timeout.saturating_mul(RESEND_KEEP_TIMEOUTS),
        )
    }

    pub(crate) fn new(max: usize, keep: Duration) -> Self {
        Self {
            order: VecDeque::new(),
            seen: BTreeSet::new(),
            max: max.max(1),
            keep,
        }
    }

    /// Forgets every key.
    pub(crate) fn clear(&mut self) {
        self.order.clear();
        self.seen.clear();
    }

    /// Whether this is the first copy (seen at `now`); remembers it.
    pub(crate) fn first_copy(&mut self, key: (u32, u64), now: Instant) -> bool {
        if !self.seen.insert(key) {
            return false;
        }
        let hard = self.max.saturating_mul(HEDGE_DEDUPE_HARD_FACTOR);
        while let Some(&(old, at)) = self.order.front() {
            let full = self.order.len() >= self.max;
            if !(full && now.saturating_duration_since(at) > self.keep) && self.order.len() < hard {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&old);
        }
        self.order.push_back((key, now));
        debug_assert_eq!(self.order.len(), self.seen.len());
        true
    }

    /// Forgets `key`: its copy was dropped after all, and a copy sent again must go on.
    /// (Linear in the keys held; the root calls it only when its sequencer is full.)
    pub(crate) fn forget(&mut self, key: (u32, u64)) {
        if self.seen.remove(&key) {
            self.order.retain(|(k, _)| *k != key);
        }
    }
}

/// Sends each child that sent orders recently the median OWD of those orders, and re-arms
/// the feedback timer. Shared by proxies and the root. Gateways do not pace (their orders go
/// out as the strategy makes them), so the children of the last layer get no feedback.
pub(crate) fn send_feedback(
    core: &mut Core,
    meter: &mut InboundMeter,
    scratch: &mut Vec<(NodeId, u64, u32)>,
    now: Instant,
) {
    let pacing = core.config.pacing;
    scratch.clear();
    meter.feedback(now, pacing.window, scratch);
    for &(child, owd_ns, samples) in scratch.iter() {
        if core
            .plan
            .node(child)
            .is_some_and(|spec| spec.role == Role::Gateway)
        {
            continue;
        }
        let feedback = Control::PacingFeedback {
            sender: core.id.0,
            owd_ns,
            samples,
        };
        core.send_message(child, &feedback);
    }
    core.timers
        .set(Timer::Feedback, now + pacing.feedback_interval);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupe_drops_second_copies_and_forgets_old_keys() {
        let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        let mut d = HedgeDedupe::new(2, Duration::from_millis(10));
        assert!(d.first_copy((1, 1), t(0)));
        assert!(!d.first_copy((1, 1), t(0)));
        assert!(d.first_copy((2, 1), t(20)), "another participant");
        assert!(d.first_copy((1, 2), t(40)));
        assert!(
            d.first_copy((1, 1), t(40)),
            "forgotten after 2 newer keys, once older than 10 ms"
        );
        d.forget((1, 2));
        assert!(d.first_copy((1, 2), t(41)), "forgotten on request");
        assert!(!d.first_copy((1, 2), t(41)));
        assert_eq!(d.order.len(), d.seen.len());
    }

    /// Goal: however many orders arrive, a key younger than `keep` is remembered (a resent
    /// order whose first copy got through is still dropped), up to the hard bound.
    #[test]
    fn dedupe_remembers_recent_keys_beyond_its_count() {
        let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        let mut d = HedgeDedupe::new(4, Duration::from_millis(10));
        for id in 0..40 {
            assert!(d.first_copy((1, id), t(1)));
        }
        assert!(
            !d.first_copy((1, 0), t(5)),
            "40 keys within 10 ms: all kept"
        );
        assert!(d.first_copy((2, 0), t(20)));
        assert_eq!(d.order.len(), 4, "older than 10 ms: back to the last 4");
        assert!(d.first_copy((1, 0), t(20)));
        for id in 100..200 {
            assert!(d.first_copy((1, id), t(21)));
        }
        assert_eq!(
            d.order.len(),
            4 * HEDGE_DEDUPE_HARD_FACTOR,
            "the hard bound"
        );
        assert_eq!(d.order.len(), d.seen.len());
    }

    #[test]
    fn meter_reports_median_of_active_children() {
        let mut m = InboundMeter::new(10..13, 100);
        let t = Instant::from_nanos(1_000_000_000);
        for owd in [10, 20, 30, 40, 500] {
            assert!(m.record(t, NodeId(11), owd));
        }
        assert!(!m.record(t, NodeId(13), 1));
        assert!(!m.record(t, NodeId(9), 1));
        let mut out = Vec::new();
        m.feedback(t, Duration::from_millis(40), &mut out);
        assert_eq!(out, vec![(NodeId(11), 30, 5)]);
        out.clear();
        m.feedback(t, Duration::from_millis(40), &mut out);
        assert!(out.is_empty(), "nothing new since the last feedback");
    }
}
