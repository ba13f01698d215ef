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

/// First-copy-wins over `(participant, client order id)`, remembering the last `max` keys.
#[derive(Clone, Debug)]
pub(crate) struct HedgeDedupe {
    order: VecDeque<(u32, u64)>,
    seen: BTreeSet<(u32, u64)>,
    max: usize,
}

impl HedgeDedupe {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            order: VecDeque::new(),
            seen: BTreeSet::new(),
            max: max.max(1),
        }
    }

    /// Forgets every key.
    pub(crate) fn clear(&mut self) {
        self.order.clear();
        self.seen.clear();
    }

    /// Whether this is the first copy; remembers it.
    pub(crate) fn first_copy(&mut self, key: (u32, u64)) -> bool {
        if !self.seen.insert(key) {
            return false;
        }
        if self.order.len() == self.max {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.order.push_back(key);
        debug_assert_eq!(self.order.len(), self.seen.len());
        true
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
        let mut d = HedgeDedupe::new(2);
        assert!(d.first_copy((1, 1)));
        assert!(!d.first_copy((1, 1)));
        assert!(d.first_copy((2, 1)), "another participant");
        assert!(d.first_copy((1, 2)));
        assert!(d.first_copy((1, 1)), "forgotten after 2 newer keys");
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
