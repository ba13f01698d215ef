//! Parent failover and failback (DESIGN.md §4 "Fault tolerance"), shared by gateways and the
//! proxies below layer 1: which parent a node syncs its clock with and sends its OWD reports
//! and orders to.
//!
//! **Failover.** A parent heard before (any datagram counts: market data, a probe reply, the
//! `unsynced` reply of a proxy whose own clock has not converged yet) that has sent nothing
//! over the node's last three or more probe pairs and `parent_timeout`, while market data
//! still reaches the node through others, is taken for dead, and the node moves to the
//! parent's next sibling in its layer. That sibling is the one watching the dead
//! parent, which serves the dead one's block of market data once it notices
//! ([`crate::proxy`], takeover) and merges its children's orders ([`crate::sequencer`],
//! standby children). The root, a parent without siblings, and one never heard are not left.
//! When nothing comes at all (the exchange stopping, or this node cut off) no other parent
//! would help and moving would only flap, so the node stays.
//!
//! **Failback.** Away from home, a home parent heard again without a gap of
//! `parent_timeout / 2` for a whole `parent_timeout` (a restarted proxy, a paused VM running
//! again) takes its child back, once it says its own clock has converged
//! ([`crate::clock::ClockSync::is_converged`]). A node away from home sends it one probe with
//! each probe pair (probe id 0, `HOME_PROBE_ID` in `core`); the reply's `converged` flag, heard
//! within the last `parent_timeout / 2`, is what it waits for. A restarted proxy syncs from
//! scratch: its first fits are microseconds off and move as its drift estimate forms, and
//! children that came back after the bare `parent_timeout` followed it (up to 1.6 µs off,
//! true-time P(F) 89% against 97% in exchange time, in
//! `sim/tests/outbound.rs::a_restarted_proxy_gets_its_children_back_once_its_clock_has_converged`,
//! seed 1; 613 ns once a moved clock waited for a full window,
//! [`crate::clock::ClockSync::change_parent`]).
//! A home whose clock never converges leaves its children with the sibling, which serves
//! them as before.
//!
//! The node does the rest of a move itself: its clock starts over against the new parent
//! ([`crate::clock::ClockSync::change_parent`]), and a gateway sends its unanswered orders
//! again.

use core::time::Duration;

use crate::node::NodeId;
use crate::plan::Plan;
use crate::time::Instant;

/// Probe pairs that must go unanswered (besides `parent_timeout`) before a parent is left.
const UNANSWERED_PROBES_MIN: u32 = 3;

/// What a node knows about its parent's liveness.
#[derive(Clone, Debug)]
pub(crate) struct ParentWatch {
    /// The plan's parent.
    home: NodeId,
    /// The parent now: `home`, or the sibling it failed over to.
    parent: NodeId,
    /// When the parent was last heard (`None`: never yet).
    parent_heard: Option<Instant>,
    /// Probe pairs sent since the parent was last heard.
    probes_since_heard: u32,
    /// When market data last came, from any node.
    data_heard: Instant,
    /// While away from home: since when, and when last, the home parent has been heard
    /// without a silence of `parent_timeout / 2`.
    home_heard: Option<(Instant, Instant)>,
    /// While away from home: when the home parent last answered a probe saying its clock
    /// has converged.
    home_converged: Option<Instant>,
}

impl ParentWatch {
    /// Watching the plan's parent `home`.
    pub(crate) fn new(home: NodeId) -> Self {
        Self {
            home,
            parent: home,
            parent_heard: None,
            probes_since_heard: 0,
            data_heard: Instant::ZERO,
            home_heard: None,
            home_converged: None,
        }
    }

    /// The parent now.
    pub(crate) fn parent(&self) -> NodeId {
        self.parent
    }

    /// The plan's parent.
    pub(crate) fn home(&self) -> NodeId {
        self.home
    }

    /// The home parent, while the node is away from it.
    pub(crate) fn away_from(&self) -> Option<NodeId> {
        (self.parent != self.home).then_some(self.home)
    }

    /// The home parent answered a probe; `converged`: its clock has converged.
    pub(crate) fn on_home_reply(&mut self, now: Instant, converged: bool) {
        if self.parent != self.home {
            // A reply saying "not converged" (it restarted again) takes back an earlier one.
            self.home_converged = converged.then_some(now);
        }
    }

    /// When the parent was last heard (`None`: never yet).
    pub(crate) fn parent_heard(&self) -> Option<Instant> {
        self.parent_heard
    }

    /// A datagram came from `from` (`market_data`: a market-data packet).
    pub(crate) fn on_datagram(
        &mut self,
        now: Instant,
        from: NodeId,
        market_data: bool,
        timeout: Duration,
    ) {
        if from == self.parent {
            // Anything from the parent shows it alive: with RRPS its market data comes
            // every few packets, its probe replies every few ms.
            self.parent_heard = Some(now);
            self.probes_since_heard = 0;
        } else if from == self.home {
            let since = match self.home_heard {
                Some((since, last)) if now.saturating_duration_since(last) < timeout / 2 => since,
                _ => now,
            };
            self.home_heard = Some((since, now));
        }
        if market_data {
            self.data_heard = now;
        }
    }

    /// A probe pair went to the parent.
    pub(crate) fn on_probe_sent(&mut self) {
        self.probes_since_heard = self.probes_since_heard.saturating_add(1);
    }

    /// Whether the node should move now, and where to (the move is made here; the node
    /// restarts its clock sync and whatever else it does on a move).
    pub(crate) fn check(&mut self, now: Instant, plan: &Plan, timeout: Duration) -> Option<NodeId> {
        if let (Some((since, last)), Some(converged)) = (self.home_heard, self.home_converged)
            && now.saturating_duration_since(last) < timeout / 2
            && now.saturating_duration_since(since) >= timeout
            && now.saturating_duration_since(converged) < timeout / 2
        {
            return Some(self.move_to(now, self.home));
        }
        let heard = self.parent_heard?;
        if self.parent == plan.root()
            || self.probes_since_heard < UNANSWERED_PROBES_MIN
            || now.saturating_duration_since(heard) < timeout
            || now.saturating_duration_since(self.data_heard) >= timeout / 2
        {
            return None;
        }
        let next = self.next_sibling(plan)?;
        Some(self.move_to(now, next))
    }

    /// The parent's next sibling in its layer: where a failover goes, and, while the parent
    /// is silent but market data still comes, where a gateway sends an order again
    /// ([`crate::gateway`]'s retries). `None` at the root or in a layer of one.
    pub(crate) fn next_sibling(&self, plan: &Plan) -> Option<NodeId> {
        self.sibling(plan, 1)
    }

    /// The parent's `k`-th next sibling in its layer, wrapping round and skipping the parent
    /// itself (`k` = 1: [`ParentWatch::next_sibling`]). `None` at the root or in a layer of
    /// one.
    fn sibling(&self, plan: &Plan, k: u32) -> Option<NodeId> {
        if self.parent == plan.root() {
            return None;
        }
        let layer = plan.layer(plan.node(self.parent)?.layer);
        let width = layer.len() as u32;
        if width < 2 {
            return None;
        }
        let step = 1 + k.saturating_sub(1) % (width - 1);
        Some(NodeId(
            layer.start + (self.parent.0 - layer.start + step) % width,
        ))
    }

    /// Where an order goes now, as transmission `attempt`: the parent, or, while the parent
    /// has been silent for `quiet` (non-zero) but market data still comes through others, its
    /// `attempt`-th sibling (at least the first; wrapping round), where a failover would go.
    pub(crate) fn order_path(
        &self,
        plan: &Plan,
        now: Instant,
        quiet: Duration,
        attempt: u16,
    ) -> NodeId {
        let k = u32::from(attempt).max(1);
        match self.sibling(plan, k) {
            Some(sibling) if !quiet.is_zero() && self.parent_silent(now, quiet) => sibling,
            _ => self.parent,
        }
    }

    /// Whether the parent has been silent for `quiet` while market data still came from
    /// others (a dead or paused parent, not a node cut off).
    fn parent_silent(&self, now: Instant, quiet: Duration) -> bool {
        let silent = self
            .parent_heard
            .is_none_or(|at| now.saturating_duration_since(at) > quiet);
        silent && now.saturating_duration_since(self.data_heard) <= quiet
    }

    fn move_to(&mut self, now: Instant, to: NodeId) -> NodeId {
        self.parent = to;
        self.home_heard = None;
        self.home_converged = None;
        self.parent_heard = Some(now);
        self.probes_since_heard = 0;
        to
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlanConfig;

    const MS: u64 = 1_000_000;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    /// Goal: a gateway leaves a silent parent for its next sibling, and goes back only once
    /// its home has been heard steadily for `parent_timeout` *and* a reply from home says
    /// its clock has converged; a later reply saying otherwise takes that back.
    #[test]
    fn failback_waits_for_a_converged_home() {
        let plan = Plan::new(&PlanConfig::new(100)).unwrap();
        let timeout = Duration::from_millis(100);
        let gateway = plan.gateways().start;
        let home = plan.home_parent(NodeId(gateway)).unwrap();
        let mut watch = ParentWatch::new(home);
        let sibling = watch.check(at(0), &plan, timeout);
        assert_eq!(sibling, None, "never heard: stays");
        // Heard, then silent for 100 ms and three probe pairs while data comes from others.
        watch.on_datagram(at(1), home, true, timeout);
        let other = NodeId(home.0 + 1);
        for t in 2..=110 {
            watch.on_datagram(at(t), other, true, timeout);
            watch.on_probe_sent();
        }
        let moved = watch.check(at(110), &plan, timeout).expect("fails over");
        assert_eq!(moved, other);
        assert_eq!(watch.away_from(), Some(home));
        // Home back (market data every ms) for 150 ms, answering "not converged".
        for t in 111..=260 {
            watch.on_datagram(at(t), home, true, timeout);
            watch.on_home_reply(at(t), false);
            assert_eq!(
                watch.check(at(t), &plan, timeout),
                None,
                "{t} ms: not converged"
            );
        }
        watch.on_home_reply(at(261), true);
        watch.on_home_reply(at(262), false);
        assert_eq!(watch.check(at(262), &plan, timeout), None, "taken back");
        watch.on_datagram(at(263), home, true, timeout);
        watch.on_home_reply(at(263), true);
        assert_eq!(
            watch.check(at(263), &plan, timeout),
            Some(home),
            "converged: home"
        );
        assert_eq!(watch.away_from(), None);
    }

    /// Goal: the siblings an order goes round a silent parent through, in failover order,
    /// never the parent itself, and none above layer 1.
    #[test]
    fn siblings_wrap_round_and_skip_the_parent() {
        let plan = Plan::new(&PlanConfig::new(100)).unwrap();
        let layer = plan.layer(1);
        let last = NodeId(layer.end - 1);
        let watch = ParentWatch::new(last);
        let width = layer.len() as u32;
        let siblings: Vec<u32> = (1..=width)
            .map(|k| watch.sibling(&plan, k).unwrap().0)
            .collect();
        let mut expected: Vec<u32> = (layer.start..last.0).collect();
        expected.push(layer.start);
        assert_eq!(
            siblings, expected,
            "k = 1.. wraps from the last; k = width is k = 1 again"
        );
        assert_eq!(watch.next_sibling(&plan), Some(NodeId(layer.start)));
        assert_eq!(ParentWatch::new(plan.root()).sibling(&plan, 1), None);
    }
}
