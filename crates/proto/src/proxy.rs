//! A proxy: forwards market data down the tree (DESIGN.md §4 "RRPS", "Proxy hedging").
//!
//! The first copy of each packet wins (dedupe by packet sequence number) and goes, unchanged,
//! to this packet's child block (RRPS) and the blocks of the next `H` siblings (sibling
//! hedging), as [`Plan::forward_targets`] lists them. Every later copy is dropped and counted.
//!
//! Loss repair ([`crate::repair`]): the proxy keeps the last packets it received and answers
//! its children's retransmission requests from them; what it lacks it asks its parent for
//! once, and passes on to every child waiting for it.
//!
//! Control: the proxy syncs its clock to its parent and answers its children's probes with
//! its exchange time; it max-aggregates its children's OWD reports and reports up every
//! report interval; it sends heartbeats to its next sibling and watches its previous one,
//! raising [`Event::FailureDetected`] when that one goes silent and, until it is heard again,
//! also sending each packet to the block the silent one would have served first (takeover).
//! It watches `takeover_depth` siblings back in all (2 by default), and takes over each one
//! whose nearer siblings are all silent too, so a run of that many dead neighbours is served
//! by the next live proxy ([`crate::config::NodeConfig::takeover_depth`]).
//! Below layer 1, a parent that goes silent is left for its next sibling, and the home parent
//! taken back once heard again ([`crate::failover`]); on a failover the proxy tells its
//! children to resend their unanswered orders ([`Control::ResendOrders`]).
//!
//! Orders (inbound): an order from a child is measured (its hop OWD feeds the child's pacing),
//! deduplicated against a receiver-hedged twin, queued by the configured discipline (FIFO,
//! SimplePQ or LOQ) and sent to the parent no faster than this proxy's [`Pacer`] allows.
//!
//! With the global-FIFO sequencer ([`crate::sequencer`]) the root's merge is exact only if
//! every stream reaching it is in generation order, so each proxy runs the same merge over its
//! home children *before* its order queue: an order goes into the queue only once every live
//! home child has sent something (an order or a heartbeat order) at least as late, or has
//! been silent for `child_timeout`. Through a FIFO or SimplePQ queue the proxy's own stream is
//! then in generation order, and the root's merge is exact over the whole tree. LOQ reorders
//! by design (best prices first); it runs after the merge stage, so its stream leaves in
//! generation order only where price ranks agree, and the root releases the rest as they come
//! and counts them late ([`crate::sequencer::SequencerStats::late`]). That combination is
//! allowed, not refused: LOQ's reordering across prices is what the paper's order-matching
//! fairness permits, and refusing it would make the default discipline unusable with the
//! merge. The merge also takes the home children of the sibling this proxy watches, as
//! standby children ([`Sequencer::with_standby`]): they fail over to this proxy when that
//! sibling dies, and are merged (and spoken for) while they send. An order from any other
//! child bypasses the merge stage.
//!
//! The proxy also speaks for its idle children: it keeps each home child's watermark (the
//! latest generation time of its orders and heartbeat orders; a child's stream is in
//! generation order) and, once its own order path has been quiet for `heartbeat_interval`
//! with its queue empty, sends its parent a heartbeat order promising the smallest of the
//! watermarks of the children heard from within `child_timeout` and of the orders waiting in
//! its merge stage. Children's heartbeat orders stop here (after feeding the merge).

use std::sync::Arc;

use wire::Kind;
use wire::control::Repr as Control;

use crate::clock::ClockSync;
use crate::config::NodeConfig;
use crate::core::{Core, Counters, Timer};
use crate::dedupe::{DedupeWindow, Verdict};
use crate::failover::ParentWatch;
use crate::inbound::{HedgeDedupe, InboundMeter};
use crate::node::{DropReason, Event, Node, NodeId, Transmit};
use crate::order_queue::{OrderQueue, Rank};
use crate::owd::OwdAggregate;
use crate::pacing::Pacer;
use crate::plan::{Plan, Role};
use crate::repair::Repair;
use crate::sequencer::{ChildIds, Sequencer, SequencerKind, SequencerStats};
use crate::time::Instant;
use wire::ExchangeTime;

/// A watched sibling's heartbeats (see `Proxy::watches`).
#[derive(Clone, Copy, Debug)]
struct SiblingWatch {
    node: NodeId,
    heard: Instant,
    /// Heartbeat checks this proxy ran since it last heard the sibling. Silence counts only
    /// while the watcher itself was running: one late check after the watcher's own thread
    /// stalled (a loaded host, several nodes on one thread) must not condemn a sibling that
    /// could not be heard meanwhile.
    checks_since_heard: u32,
    /// Silent for the timeout, by the clock and over enough checks, until heard again.
    silent: bool,
    /// Whether its failure was reported.
    reported: bool,
}

impl SiblingWatch {
    fn new(node: u32) -> Self {
        Self {
            node: NodeId(node),
            heard: Instant::ZERO,
            checks_since_heard: 0,
            silent: false,
            reported: false,
        }
    }

    /// Heard at `now`; returns whether its failure had been reported (now cleared).
    fn hear(&mut self, now: Instant) -> bool {
        self.heard = now;
        self.checks_since_heard = 0;
        self.silent = false;
        core::mem::take(&mut self.reported)
    }

    /// One check at `now`: silent for `timeout` by the clock AND over `checks` checks.
    fn check(&mut self, now: Instant, timeout: core::time::Duration, checks: u32) {
        self.checks_since_heard = self.checks_since_heard.saturating_add(1);
        self.silent = now.saturating_duration_since(self.heard) >= timeout
            && self.checks_since_heard >= checks;
    }

    /// Whether to report its failure now (silent, and `also` holds): once per silence.
    fn report(&mut self, also: bool) -> bool {
        let report = self.silent && also && !self.reported;
        self.reported |= report;
        report
    }
}

/// A proxy node.
#[derive(Debug)]
pub struct Proxy {
    core: Core,
    layer: u32,
    /// The parent this proxy syncs with and sends reports and orders to (its home parent,
    /// or the sibling it failed over to), and its failover state ([`crate::failover`]).
    watch: ParentWatch,
    clock: ClockSync,
    dedupe: DedupeWindow,
    reports: OwdAggregate,
    /// The siblings this proxy heartbeats: the next one, the one after, and so on, as many
    /// as it watches (each watches it back).
    heartbeat_to: Vec<NodeId>,
    /// The siblings it watches ([`NodeConfig::takeover_depth`] of them, at most all the
    /// others): the previous one first, then the one before, and so on. The previous one
    /// silent, it is reported and its block taken over. Each further one is taken over (and
    /// reported) only while every one between is silent too: its own watchers are then all
    /// dead, and nobody else serves its block.
    ///
    /// [`NodeConfig::takeover_depth`]: crate::config::NodeConfig::takeover_depth
    watches: Vec<SiblingWatch>,
    heartbeat_seq: u64,
    targets: Vec<NodeId>,
    started: bool,
    queue: OrderQueue,
    pacer: Pacer,
    meter: InboundMeter,
    hedge_dedupe: HedgeDedupe,
    /// Earliest time the pacer lets the next order go.
    next_send: Instant,
    feedback: Vec<(NodeId, u64, u32)>,
    /// The home children, then the adoptable ones (the watched sibling's home children,
    /// which fail over to this proxy when it dies), numbered as `watermarks` is.
    merged: ChildIds,
    /// When each adoptable child was last heard (it failed over to this proxy).
    adoptable_heard: Vec<Option<Instant>>,
    /// Global FIFO: per merged child, its watermark and when it was last heard.
    watermarks: Vec<Option<(ExchangeTime, Instant)>>,
    /// When an order or heartbeat order last went up.
    order_path_sent: Instant,
    /// Heartbeat orders sent.
    order_heartbeats: u64,
    /// Global FIFO: the merge over the home children, before the queue.
    merge: Option<Sequencer>,
    /// Recent packets, and the children waiting for those it lacks.
    repair: Repair,
}

impl Proxy {
    /// Proxy `id` of `plan`. Nodes built from one configuration may share it (an
    /// `Arc<NodeConfig>`).
    pub fn new(
        id: NodeId,
        plan: Arc<Plan>,
        config: impl Into<Arc<NodeConfig>>,
    ) -> Result<Self, String> {
        let spec = plan
            .node(id)
            .ok_or_else(|| format!("node {} is not in the plan", id.0))?;
        if spec.role != Role::Proxy {
            return Err(format!("node {} is a {:?}, not a proxy", id.0, spec.role));
        }
        let (layer, index) = (spec.layer, spec.index);
        let parent = plan.home_parent(id).expect("a proxy has a parent");
        let siblings = plan.layer(layer);
        let width = siblings.len() as u32;
        let config: Arc<NodeConfig> = config.into();
        let depth = config.takeover_depth.min(width.saturating_sub(1));
        let heartbeat_to: Vec<NodeId> = (1..=depth)
            .map(|k| NodeId(siblings.start + (index + k) % width))
            .collect();
        let watches: Vec<SiblingWatch> = (1..=depth)
            .map(|k| SiblingWatch::new(siblings.start + (index + width - k) % width))
            .collect();
        let children = plan.home_children(id).len() + plan.fanout() as usize;
        let home_children = plan.home_children(id);
        // The children that fail over to this proxy when the sibling before it dies.
        let adoptable = watches.first().map_or(0..0, |w| plan.home_children(w.node));
        let merged = ChildIds::new(home_children.clone(), adoptable.clone());
        let watermarks = vec![None; merged.len()];
        let mut core = Core::new(id, plan, config)?;
        let mut merge = None;
        if core.config.sequencer.kind == SequencerKind::GlobalFifo {
            core.timers.set(Timer::OrderHeartbeat, Instant::ZERO);
            let stage = crate::sequencer::SequencerConfig {
                orders_max: core.config.order_queue_max,
                ..core.config.sequencer
            };
            merge = Some(Sequencer::with_standby(
                stage,
                home_children.clone(),
                adoptable.clone(),
            ));
        }
        core.timers.set(Timer::Feedback, Instant::ZERO);
        let queue = OrderQueue::new(core.config.discipline, core.config.order_queue_max);
        let pacer = Pacer::new(core.config.pacing);
        let meter = InboundMeter::new(home_children, core.config.hop_samples_max);
        let hedge_dedupe = HedgeDedupe::for_node(&core.config);
        core.timers.set(Timer::ClockProbe, Instant::ZERO);
        core.timers.set(
            Timer::Report,
            Instant::ZERO + core.config.owd.report_interval,
        );
        if !heartbeat_to.is_empty() {
            core.timers.set(Timer::Heartbeat, Instant::ZERO);
            core.timers.set(
                Timer::HeartbeatCheck,
                Instant::ZERO + core.config.heartbeat_timeout,
            );
        }
        Ok(Self {
            clock: ClockSync::new(core.config.clock, id),
            dedupe: DedupeWindow::new(core.config.dedupe_window),
            reports: OwdAggregate::new(children),
            repair: Repair::new(core.config.repair_bytes),
            core,
            layer,
            watch: ParentWatch::new(parent),
            heartbeat_to,
            watches,
            heartbeat_seq: 0,
            targets: Vec::new(),
            started: false,
            queue,
            pacer,
            meter,
            hedge_dedupe,
            next_send: Instant::ZERO,
            feedback: Vec::new(),
            merged,
            adoptable_heard: vec![None; adoptable.len()],
            watermarks,
            order_path_sent: Instant::ZERO,
            order_heartbeats: 0,
            merge,
        })
    }

    /// What the proxy counted.
    pub fn counters(&self) -> &Counters {
        &self.core.counters
    }

    /// The proxy's clock sync against its parent.
    pub fn clock(&self) -> &ClockSync {
        &self.clock
    }

    /// The parent it syncs with and sends reports and orders to (its home parent, except
    /// while that one is silent; see [`crate::failover`]).
    pub fn parent(&self) -> NodeId {
        self.watch.parent()
    }

    /// The proxy's pacer.
    pub fn pacer(&self) -> &Pacer {
        &self.pacer
    }

    /// Orders waiting to go up (in the queue, and in the merge stage).
    pub fn queued(&self) -> usize {
        self.queue.len() + self.merge.as_ref().map_or(0, Sequencer::len)
    }

    /// What the merge stage counted (global-FIFO sequencer).
    pub fn merge_stats(&self) -> Option<&SequencerStats> {
        self.merge.as_ref().map(Sequencer::stats)
    }

    /// Heartbeat orders sent (global-FIFO sequencer).
    pub fn order_heartbeats(&self) -> u64 {
        self.order_heartbeats
    }

    /// The previous sibling, which this proxy watches first, and whether it is currently
    /// considered failed.
    pub fn watched_failed(&self) -> Option<(NodeId, bool)> {
        self.watches.first().map(|w| (w.node, w.silent))
    }

    fn on_market_data(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        let from_layer = self.core.plan.node(from).map(|n| n.layer);
        if from_layer != Some(self.layer - 1) {
            self.core.drop_datagram(from, DropReason::UnknownSender);
            return;
        }
        let Some(data) = crate::core::parse_market_data(bytes) else {
            return self.core.drop_datagram(from, DropReason::Malformed);
        };
        if data.session() != self.core.session {
            let quiet = self.core.config.parent_timeout;
            if !crate::core::takes_new_session(&self.dedupe, now, quiet, &data) {
                return self.core.drop_datagram(from, DropReason::WrongSession);
            }
            // The root started again without its journal: a new stream. What was kept of the
            // old one (its numbers, its packets, the children's requests) is dropped.
            let heard_before = self.dedupe.highest().is_some();
            self.core.session = data.session();
            self.dedupe = DedupeWindow::new(self.core.config.dedupe_window);
            self.repair = Repair::new(self.core.config.repair_bytes);
            self.core.event(Event::SessionStarted {
                session: data.session(),
                heard_before,
            });
        }
        if data.header.is_snapshot() {
            // A snapshot's part goes from the root to one gateway only; its `packet_seq` is
            // a live packet's, which it must not stand for.
            return self.core.drop_datagram(from, DropReason::Unexpected);
        }
        let packet_seq = data.header.packet_seq;
        // Checked for answers too: kept, a number that far ahead would make the repair ring
        // refuse every real packet after it.
        let quiet = self.core.config.parent_timeout;
        if self
            .dedupe
            .far_ahead(packet_seq, now, quiet, self.repair.ring.reach())
        {
            return self.core.drop_datagram(from, DropReason::FarAhead);
        }
        if data.header.is_retransmission() {
            // An answer to a request of this proxy's: for the children waiting, not the tree.
            return self.keep(now, &data, bytes);
        }
        match self.dedupe.insert_at(packet_seq, now) {
            Verdict::New => {}
            Verdict::Duplicate => return self.core.drop_datagram(from, DropReason::Duplicate),
            Verdict::TooOld => return self.core.drop_datagram(from, DropReason::TooOld),
        }
        self.core.counters.packets_new += 1;
        self.targets.clear();
        let plan = &self.core.plan;
        plan.forward_targets(self.core.id, packet_seq, &mut self.targets);
        // Takeover: while the previous sibling is silent, this proxy also serves the block
        // it would have served first, so a dead proxy costs its children only the detection
        // time (`heartbeat_timeout`), even without hedging. With the one before it silent
        // too, its block as well (its own watcher is the first dead one), and so on.
        for dead in self.watches.iter().take_while(|w| w.silent).map(|w| w.node) {
            if let Some(block) = plan.forward_blocks(dead, packet_seq).next() {
                for child in plan.block(self.layer + 1, block).map(NodeId) {
                    if !self.targets.contains(&child) {
                        self.targets.push(child);
                    }
                }
            }
        }
        let targets = core::mem::take(&mut self.targets);
        self.core.send_bytes(&targets, bytes);
        self.targets = targets;
        self.keep(now, &data, bytes);
    }

    /// Keeps a packet for repair and sends it, marked as a retransmission, to the children
    /// waiting for it.
    fn keep(&mut self, now: Instant, data: &wire::market::MarketData<'_>, bytes: &[u8]) {
        let packet_seq = data.header.packet_seq;
        let sequence = data.mold.sequence();
        let next_sequence = data.next_sequence();
        self.repair
            .ring
            .store(packet_seq, sequence, next_sequence, bytes);
        if !self.repair.has_waiting() {
            return;
        }
        self.targets.clear();
        self.repair
            .take_waiting(now, sequence, next_sequence, &mut self.targets);
        if self.targets.is_empty() {
            return;
        }
        // Kept, or not: an answer for a child far behind is older than the ring holds, and
        // goes on to the children waiting for it all the same.
        let mut copy = Vec::new();
        let marked: &[u8] = match self.repair.ring.marked(packet_seq) {
            Some(marked) => marked,
            None if data.header.is_retransmission() => bytes,
            None => {
                copy.extend_from_slice(bytes);
                if wire::market::mark_retransmission(&mut copy).is_err() {
                    return;
                }
                &copy
            }
        };
        self.core.send_bytes(&self.targets, marked);
        self.core.counters.retransmissions += self.targets.len() as u64;
    }

    /// A child asks for messages `sequence..sequence + count`: sent what this proxy holds,
    /// the rest asked of its parent (once for every child asking) and sent on when it comes.
    fn on_retransmit_request(&mut self, now: Instant, child: NodeId, sequence: u64, count: u16) {
        let end = sequence.saturating_add(u64::from(count.max(1)));
        let core = &mut self.core;
        let missing = self.repair.ring.serve(sequence, end, |packet| {
            core.send_bytes(&[child], packet);
            core.counters.retransmissions += 1;
        });
        let Some(missing) = missing else {
            return;
        };
        let retry = self.core.config.gap_retry;
        // A child asks again after `gap_retry`, then twice as long: wait for two of its asks.
        let keep = retry.saturating_mul(4);
        if self.repair.wait(now, child, missing, end, keep, retry) {
            let request = Control::RetransmitRequest {
                requester: self.core.id.0,
                session: self.core.session,
                sequence: missing,
                count: (end - missing).min(u64::from(u16::MAX)) as u16,
            };
            self.core.send_message(self.watch.parent(), &request);
            self.core.counters.repair_asks += 1;
        }
    }

    fn on_hop(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        let Some((hop, message)) = self.core.accept_hop(from, self.layer + 1, bytes) else {
            return;
        };
        let owd_ns = self
            .clock
            .to_exchange(now)
            .saturating_nanos_since(hop.send_time);
        self.meter.record(now, from, owd_ns);
        if self.ahead_of_clock(now, message.header().time) {
            return self.core.drop_datagram(from, DropReason::AheadOfClock);
        }
        self.hear(now, from, message.header().time);
        // A copy sent again goes on if it came a good while after the one passed (half the
        // gateways' first retry timeout: their retries are at least that far apart).
        let min_gap = self.core.config.order_retry / 2;
        if !self
            .hedge_dedupe
            .pass_copy(message.header().dedupe_key(), hop.attempt, now, min_gap)
        {
            return self.core.drop_datagram(from, DropReason::Duplicate);
        }
        let key = message.header().dedupe_key();
        let time = message.header().time;
        let merged_child = self.merged.index(from).is_some();
        let merged = match self.merge.as_mut() {
            Some(merge) if merged_child => Some(merge.push(now, from, time, bytes)),
            _ => None,
        };
        match merged {
            Some(true) => self.release_merged(now),
            None if self.queue.push(bytes, Rank::of(&message)) => self.pump(now),
            Some(false) | None => {
                self.hedge_dedupe.let_go(key, now);
                self.core.drop_datagram(from, DropReason::QueueFull)
            }
        }
    }

    /// Global FIFO: moves every order the merge stage releases into the queue, re-arms the
    /// merge's timer (a silent child's timeout), and sends what the pacer allows.
    fn release_merged(&mut self, now: Instant) {
        let Some(merge) = self.merge.as_mut() else {
            return;
        };
        let queue = &mut self.queue;
        let dedupe = &mut self.hedge_dedupe;
        let mut refused = 0;
        while let Some(queued) = merge.pop_ready(now, |w| {
            let message = wire::hop::Hop::parse(w.order())
                .ok()
                .and_then(|hop| wire::order::Repr::parse(hop.order).ok());
            let queued = message.is_some_and(|m| queue.push(w.order(), Rank::of(&m)));
            if let (false, Some(m)) = (queued, message) {
                dedupe.let_go(m.header().dedupe_key(), now);
            }
            queued
        }) {
            refused += u32::from(!queued);
        }
        self.core.timers.arm(Timer::Sequencer, merge.next_release());
        let id = self.core.id;
        for _ in 0..refused {
            self.core.drop_datagram(id, DropReason::QueueFull);
        }
        self.pump(now);
    }

    /// Where orders go up now: the parent, or, while the parent has been silent for
    /// `order_retry` but market data still comes through others (a dead or paused parent,
    /// not this proxy cut off), the parent's next sibling, where a failover would take this
    /// proxy (proxies take any of their child layer's orders). As a gateway does
    /// (`Gateway::order_path`): a dead upper proxy's subtree's orders then wait about
    /// `order_retry`, not the `parent_timeout` of the failover.
    fn order_path(&self, now: Instant) -> NodeId {
        let quiet = self.core.config.order_retry;
        self.watch.order_path(&self.core.plan, now, quiet, 1)
    }

    /// Sends queued orders up as fast as the pacer allows, then arms the pacing timer.
    fn pump(&mut self, now: Instant) {
        while !self.queue.is_empty() && self.next_send <= now {
            let stamp = self.clock.to_exchange(now);
            let parent = self.order_path(now);
            let core = &mut self.core;
            let dedupe = &mut self.hedge_dedupe;
            let sent = self.queue.pop(|bytes| {
                // Sent up or dropped, this proxy holds the order no more.
                if let Some(key) = hop_key(bytes) {
                    dedupe.let_go(key, now);
                }
                core.outbox.push(&[parent], |buf| {
                    buf[..bytes.len()].copy_from_slice(bytes);
                    match wire::hop::restamp(&mut buf[..bytes.len()], stamp) {
                        Ok(()) => bytes.len(),
                        Err(_) => 0,
                    }
                })
            });
            if sent == Some(true) {
                self.order_path_sent = now;
                self.core.counters.orders_out += 1;
                self.core.counters.copies_out += 1;
            } else {
                let id = self.core.id;
                self.core.drop_datagram(id, DropReason::QueueFull);
            }
            let gap = self.pacer.gap();
            if !gap.is_zero() {
                self.next_send = now + gap;
            }
        }
        if self.queue.is_empty() {
            self.core.timers.stop(Timer::Pacing);
        } else {
            // The gap holds an order back: the pacer's increases bind (see `pacing`).
            self.pacer.note_held();
            self.core.timers.set(Timer::Pacing, self.next_send);
        }
    }

    /// Whether a child's order or heartbeat order stamped `time` is further ahead of this
    /// proxy's synced clock than a synced gateway's stamp can be
    /// ([`crate::root::ORDER_AHEAD_MAX`], the root's own check). Taken, it would sit in the
    /// merge stage until the other children caught up with it, and raise its child's
    /// watermark, which this proxy's heartbeat order may promise up the tree, past every order
    /// the child sends after it. Before this proxy's clock has synced nothing is judged.
    fn ahead_of_clock(&self, now: Instant, time: ExchangeTime) -> bool {
        self.clock.is_synced()
            && crate::root::stamped_too_far_ahead(time, self.clock.to_exchange(now).as_nanos())
    }

    /// Global FIFO: a merged child's order or heartbeat order generated at `time`.
    fn hear(&mut self, now: Instant, from: NodeId, time: ExchangeTime) {
        let Some(i) = self.merged.index(from) else {
            return;
        };
        let w = &mut self.watermarks[i];
        let mark = w.map_or(time, |(mark, _)| mark.max(time));
        *w = Some((mark, now));
    }

    /// Global FIFO: after `heartbeat_interval` with no order going up and none queued, a
    /// heartbeat order with the smallest watermark of the children heard within
    /// `child_timeout` (none heard: nothing to promise, and the parent times this proxy out).
    fn on_order_heartbeat_timer(&mut self, now: Instant) {
        let config = self.core.config.sequencer;
        let idle = now.saturating_duration_since(self.order_path_sent) >= config.heartbeat_interval;
        if idle && self.queue.is_empty() {
            let waiting = self.merge.as_ref().and_then(Sequencer::earliest_waiting);
            // A home child not heard from yet may still send anything: promise nothing
            // (time zero) until it is heard or its merge gives up on it. (Promising the
            // minimum of the children heard let the root release a first order before an
            // earlier one from a child still starting up.)
            let unheard = self
                .merge
                .as_ref()
                .is_some_and(|m| m.waits_for_unheard(now))
                .then_some(ExchangeTime::ZERO);
            let mark = self
                .watermarks
                .iter()
                .flatten()
                .filter(|(_, heard)| now.saturating_duration_since(*heard) < config.child_timeout)
                .map(|(mark, _)| *mark)
                .chain(waiting)
                .chain(unheard)
                .min();
            if let Some(time) = mark {
                let beat = Control::OrderHeartbeat {
                    sender: self.core.id.0,
                    time,
                };
                // Where orders go now (the merge that waits for this watermark).
                let to = self.order_path(now);
                self.core.send_message(to, &beat);
                self.order_path_sent = now;
                self.order_heartbeats += 1;
            }
        }
        let next = if idle {
            now + config.heartbeat_interval
        } else {
            self.order_path_sent + config.heartbeat_interval
        };
        self.core.timers.set(Timer::OrderHeartbeat, next);
    }

    /// Parent failover and failback ([`crate::failover`]; a layer-1 proxy's parent is the
    /// root, which it never leaves): clock probes, OWD reports, orders and heartbeat orders
    /// go to the new parent, and the clock refits from its samples only
    /// ([`ClockSync::change_parent`]). On a failover the orders that went up through the
    /// dead parent since shortly before it was last heard may have died with it, so the
    /// proxy tells its children to send theirs again ([`Proxy::pass_resend`]).
    fn check_parent(&mut self, now: Instant) {
        let timeout = self.core.config.parent_timeout;
        let from = self.watch.parent();
        let heard = self.watch.parent_heard();
        let Some(to) = self.watch.check(now, &self.core.plan, timeout) else {
            return;
        };
        self.clock.change_parent();
        // The gap was the old parent's answer to its load; the new one meters its own (and
        // feeds back only to its home children: kept, a gap raised under the old parent held
        // for the whole stay).
        self.pacer = Pacer::new(self.core.config.pacing);
        self.core.event(Event::ParentChanged {
            from,
            to,
            resent: 0,
        });
        if to != self.watch.home() {
            // An order generated a timeout before the parent was last heard could still
            // have been queued in it.
            let since = heard.map_or(ExchangeTime::ZERO, |heard| {
                let local =
                    Instant::from_nanos(heard.as_nanos().saturating_sub(timeout.as_nanos() as u64));
                self.clock.to_exchange(local)
            });
            self.pass_resend(now, since);
        }
    }

    /// Tells every child that sends orders through this proxy (its home children, and the
    /// adoptable ones heard within `parent_timeout`: those that failed over to it) to send
    /// again its unanswered orders generated since `since` ([`Control::ResendOrders`]). The
    /// copies will come through here again, so this proxy forgets the orders it has
    /// forwarded (its first-copy-wins filter is for receiver-hedged twins; the root's own
    /// drops the copies of orders that did get through).
    fn pass_resend(&mut self, now: Instant, since: ExchangeTime) {
        self.hedge_dedupe.clear();
        let notice = Control::ResendOrders {
            sender: self.core.id.0,
            since,
        };
        let timeout = self.core.config.parent_timeout;
        let adopted: Vec<u32> = self
            .merged
            .then()
            .zip(&self.adoptable_heard)
            .filter(|(_, heard)| {
                heard.is_some_and(|at| now.saturating_duration_since(at) < timeout)
            })
            .map(|(child, _)| child)
            .collect();
        let home = self.core.plan.home_children(self.core.id);
        for child in home.chain(adopted) {
            self.core.send_message(NodeId(child), &notice);
        }
    }

    fn on_control(&mut self, now: Instant, from: NodeId, control: Control) {
        let from_layer = self.core.plan.node(from).map_or(u32::MAX, |n| n.layer);
        let child = from_layer == self.layer + 1;
        match control {
            // A proxy gives its time only once its own clock has converged (a full window
            // against its parent): samples against a parent still converging poison its
            // children's fits, whose windows then hold the parent's steps. (Answering once
            // merely synced, a gateway three layers down was still 4 µs off 350 ms in,
            // `<3,5>`, seed 1, and sound only from 420 ms.) Before that it answers
            // `unsynced`, without a time: a child that heard nothing from it would take it
            // for dead whenever RRPS brings it none of the market data either (every `L`
            // packets in a layer of `L` proxies: at the warm-up's 1K packets/s, over the
            // 100 ms `parent_timeout` once `L` passes 100, and every gateway of an
            // N = 2000 tree, `<3,13>`, failed over twice and back in its warm-up).
            Control::ClockProbe {
                probe_id,
                pair_index,
                t_send,
                ..
            } if child => {
                let here = self
                    .clock
                    .has_converged()
                    .then(|| self.clock.to_exchange(now));
                let converged = self.clock.is_converged();
                self.core
                    .answer_probe(here, converged, from, probe_id, pair_index, t_send);
            }
            Control::ClockReply {
                probe_id,
                t2_recv,
                t3_send,
                unsynced: false,
                ..
            } if from == self.watch.parent() => {
                self.clock.on_reply(now, probe_id, t2_recv, t3_send);
            }
            // The parent is alive but not synced yet: heard (`ParentWatch`), not fitted.
            Control::ClockReply { unsynced: true, .. } if from == self.watch.parent() => {}
            Control::ClockReply { converged, .. } if from == self.watch.home() => {
                self.watch.on_home_reply(now, converged);
            }
            Control::OwdReport { owd_ns, .. } if child => {
                if !self.reports.record(now, from, owd_ns) {
                    self.core.drop_datagram(from, DropReason::QueueFull);
                }
            }
            Control::OrderHeartbeat { sender, time } if child && sender == from.0 => {
                if self.ahead_of_clock(now, time) {
                    return self.core.drop_datagram(from, DropReason::AheadOfClock);
                }
                self.hear(now, from, time);
                if let Some(merge) = self.merge.as_mut() {
                    merge.push_heartbeat(now, from, time);
                    self.release_merged(now);
                }
            }
            Control::ResendOrders { sender, since }
                if from == self.watch.parent() && sender == from.0 =>
            {
                self.pass_resend(now, since);
            }
            Control::RetransmitRequest {
                requester,
                session,
                sequence,
                count,
            } if child && requester == from.0 => {
                if session != self.core.session {
                    return self.core.drop_datagram(from, DropReason::WrongSession);
                }
                self.on_retransmit_request(now, from, sequence, count);
            }
            // The root no longer holds what this proxy asked for: the children waiting for it
            // are told, as the root would have told them.
            Control::RetransmitUnavailable {
                requester,
                session,
                sequence,
                oldest_available,
                ..
            } if from == self.watch.parent() && requester == self.core.id.0 => {
                let core = &mut self.core;
                self.repair
                    .unavailable(sequence, oldest_available, |child, first, end| {
                        let told = Control::RetransmitUnavailable {
                            requester: child.0,
                            session,
                            sequence: first,
                            count: (end - first).min(u64::from(u16::MAX)) as u16,
                            oldest_available,
                        };
                        core.send_message(child, &told);
                    });
            }
            Control::PacingFeedback { owd_ns, .. } if from == self.watch.parent() => {
                self.pacer
                    .on_feedback(now, core::time::Duration::from_nanos(owd_ns));
            }
            Control::Heartbeat { .. } if self.watches.iter().any(|w| w.node == from) => {
                let mut cleared = false;
                for watch in self.watches.iter_mut().filter(|w| w.node == from) {
                    cleared |= watch.hear(now);
                }
                if cleared {
                    self.core.event(Event::FailureCleared { node: from });
                }
            }
            _ => self.core.drop_datagram(from, DropReason::Unexpected),
        }
    }

    /// Failure detection counts silence from the first time the node runs, not from the
    /// origin of its clock.
    fn start(&mut self, now: Instant) {
        if !self.started {
            self.started = true;
            for watch in &mut self.watches {
                watch.heard = now;
            }
        }
    }

    fn check_invariants_cheap(&self) {
        debug_assert!(self.layer >= 1 && self.layer < self.core.plan.depth());
        debug_assert!(
            self.core.timers.get(Timer::ClockProbe).is_some(),
            "probing never stops"
        );
        debug_assert!(
            self.core.timers.get(Timer::Report).is_some(),
            "reporting never stops"
        );
        debug_assert_eq!(self.watches.len(), self.heartbeat_to.len());
        // A sibling is reported only while it and every one before it are silent.
        debug_assert!(self.watches.iter().skip(1).all(|w| !w.reported || w.silent));
    }
}

impl Node for Proxy {
    fn id(&self) -> NodeId {
        self.core.id
    }

    fn handle_datagram(&mut self, now: Instant, from: NodeId, bytes: &[u8]) {
        self.start(now);
        self.core.counters.datagrams_in += 1;
        if self.core.plan.node(from).is_none() {
            self.core.drop_datagram(from, DropReason::UnknownSender);
            return;
        }
        let kind = wire::classify(bytes);
        let timeout = self.core.config.parent_timeout;
        self.watch
            .on_datagram(now, from, kind == Kind::MarketData, timeout);
        let adoptable = self.merged.then();
        if adoptable.contains(&from.0) {
            self.adoptable_heard[(from.0 - adoptable.start) as usize] = Some(now);
        }
        match kind {
            Kind::MarketData => self.on_market_data(now, from, bytes),
            Kind::Control => match Control::parse(bytes) {
                Ok(control) => self.on_control(now, from, control),
                Err(_) => self.core.drop_datagram(from, DropReason::Malformed),
            },
            Kind::Hop => self.on_hop(now, from, bytes),
            Kind::Order | Kind::Response => self.core.drop_datagram(from, DropReason::Unexpected),
            Kind::Unknown => self.core.drop_datagram(from, DropReason::Malformed),
        }
        self.check_invariants_cheap();
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.start(now);
        if self.core.timers.expire(Timer::ClockProbe, now) {
            self.check_parent(now);
            let (parent, away) = (self.watch.parent(), self.watch.away_from());
            self.core
                .send_probe_pair(now, &mut self.clock, parent, away);
            self.watch.on_probe_sent();
        }
        if self.core.timers.expire(Timer::Report, now) {
            let owd = &self.core.config.owd;
            if let Some(owd_ns) = self.reports.max(now, owd.report_expiry) {
                let report = Control::OwdReport {
                    sender: self.core.id.0,
                    owd_ns,
                    samples: 0,
                };
                let parent = self.watch.parent();
                self.core.send_message(parent, &report);
            }
            let next = now + self.core.config.owd.report_interval;
            self.core.timers.set(Timer::Report, next);
        }
        if self.core.timers.expire(Timer::Heartbeat, now) {
            if !self.heartbeat_to.is_empty() {
                self.heartbeat_seq += 1;
                let beat = Control::Heartbeat {
                    sender: self.core.id.0,
                    seq: self.heartbeat_seq,
                };
                for &to in &self.heartbeat_to {
                    self.core.send_message(to, &beat);
                }
            }
            let next = now + self.core.config.heartbeat_interval;
            self.core.timers.set(Timer::Heartbeat, next);
        }
        if self.core.timers.expire(Timer::Sequencer, now) {
            self.release_merged(now);
        }
        if self.core.timers.expire(Timer::Pacing, now) {
            self.pump(now);
        }
        if self.core.timers.expire(Timer::OrderHeartbeat, now) {
            self.on_order_heartbeat_timer(now);
        }
        if self.core.timers.expire(Timer::Feedback, now) {
            crate::inbound::send_feedback(&mut self.core, &mut self.meter, &mut self.feedback, now);
        }
        if self.core.timers.expire(Timer::HeartbeatCheck, now) {
            let timeout = self.core.config.heartbeat_timeout;
            // Silent for the timeout by the clock AND over as many checks as the timeout
            // spans at the check interval (at least 2).
            let interval = self.core.config.heartbeat_interval.as_nanos().max(1);
            let checks = (timeout.as_nanos().div_ceil(interval)).clamp(2, 1_000) as u32;
            // Each is reported once every one before it is silent too.
            let mut all_before_silent = true;
            for watch in &mut self.watches {
                watch.check(now, timeout, checks);
                if watch.report(all_before_silent) {
                    self.core.event(Event::FailureDetected { node: watch.node });
                }
                all_before_silent &= watch.silent;
            }
            let next = now + self.core.config.heartbeat_interval;
            self.core.timers.set(Timer::HeartbeatCheck, next);
        }
        self.check_invariants_cheap();
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit<'_>> {
        self.core.outbox.poll()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.core.timers.next()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.core.events.pop_front()
    }

    fn check_invariants(&self) {
        self.check_invariants_cheap();
        assert!(self.core.outbox.len() <= self.core.config.outbox_max);
        assert!(self.core.events.len() <= self.core.config.events_max);
        if let Some(merge) = &self.merge {
            merge.check_invariants();
        }
    }
}

/// The dedupe key of the order in a hop envelope.
fn hop_key(bytes: &[u8]) -> Option<(u32, u64)> {
    let hop = wire::hop::Hop::parse(bytes).ok()?;
    let packet = wire::order::Packet::new_checked(hop.order).ok()?;
    Some(packet.header().dedupe_key())
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::plan::PlanConfig;

    fn heartbeat(from: NodeId) -> Vec<u8> {
        let mut buf = vec![0u8; 64];
        let len = Control::Heartbeat {
            sender: from.0,
            seq: 1,
        }
        .emit(&mut buf)
        .expect("fits");
        buf.truncate(len);
        buf
    }

    /// Order `id` of gateway `gateway`'s participant generated at `time`, in its hop
    /// envelope.
    fn order(plan: &Plan, gateway: NodeId, id: u64, time: u64) -> Vec<u8> {
        use wire::order::{Display, Enter, OrderHeader, OrderType, TimeInForce};
        let p = plan
            .node(gateway)
            .and_then(|spec| spec.participant)
            .expect("a gateway");
        let enter = Enter {
            header: OrderHeader {
                client_order_id: id,
                participant_id: p,
                gateway_id: gateway.0,
                time: ExchangeTime(time),
            },
            side: wire::Side::Buy,
            shares: 100,
            stock: wire::Stock::new("JSPR").expect("a valid symbol"),
            price: 1_000_000 + (id % 7) as u32,
            time_in_force: TimeInForce::Day,
            order_type: OrderType::Limit,
            display: Display::Visible,
        };
        let mut buf = vec![0u8; 128];
        let len = wire::hop::emit(&mut buf, ExchangeTime(time), 0, &enter).expect("fits");
        buf.truncate(len);
        buf
    }

    fn order_heartbeat(from: NodeId, time: u64) -> Vec<u8> {
        let mut buf = vec![0u8; 64];
        let len = Control::OrderHeartbeat {
            sender: from.0,
            time: ExchangeTime(time),
        }
        .emit(&mut buf)
        .expect("fits");
        buf.truncate(len);
        buf
    }

    /// The generation times of the orders the proxy sent up since the last call.
    fn sent_up(proxy: &mut Proxy, now: Instant) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(t) = proxy.poll_transmit(now) {
            if wire::classify(t.payload) == Kind::Hop {
                let hop = wire::hop::Hop::parse(t.payload).expect("a hop");
                let message = wire::order::Repr::parse(hop.order).expect("an order");
                out.push(message.header().time.0);
            }
        }
        out
    }

    /// Goal: a packet numbered beyond any real stream does not move a proxy's dedupe window
    /// (numbered `u64::MAX`, it cleared the window and silenced the proxy). Method: packets
    /// 1-100 from the root, then one numbered `u64::MAX` (dropped as malformed, not
    /// forwarded), then 101, forwarded.
    #[test]
    fn a_packet_numbered_beyond_any_stream_is_malformed() {
        let now = Instant::ZERO + Duration::from_millis(1);
        let (mut proxy, _, root) = proxy_holding_100(NodeConfig::default(), now);
        let packet = crate::repair::test_packet;
        proxy.handle_datagram(now, root, &packet(u64::MAX, 101, 1));
        assert_eq!(proxy.core.counters.dropped(DropReason::Malformed), 1);
        assert!(proxy.poll_transmit(now).is_none(), "not forwarded");
        proxy.handle_datagram(now, root, &packet(101, 101, 1));
        assert!(proxy.poll_transmit(now).is_some(), "the stream goes on");
        proxy.check_invariants();
    }

    /// Goal: a packet numbered a dedupe window or more ahead of the stream (forged or
    /// corrupt, from the parent's address: 2^62 passes the parser) moves neither the
    /// proxy's dedupe window nor its repair ring, so the stream goes on (it made every real
    /// packet after it too old, and silenced the proxy for good); after the stream was
    /// quiet for `parent_timeout`, a far jump is taken (a stream that moved on meanwhile).
    /// Method: packets 1-100 at 1 ms; at 2 ms packet 2^62, and an answer numbered 2^62 - 1:
    /// both dropped `FarAhead`, not forwarded; packet 101, forwarded and kept; a packet a
    /// repair ring's worth ahead, dropped, and the one after it, forwarded; then, with
    /// nothing for `parent_timeout`, packet 101 + 2^17 (two windows ahead), forwarded.
    #[test]
    fn a_packet_far_ahead_of_the_stream_does_not_silence_the_proxy() {
        let config = NodeConfig::default();
        let quiet = config.parent_timeout;
        let window = config.dedupe_window;
        let now = Instant::ZERO + Duration::from_millis(1);
        let (mut proxy, _, root) = proxy_holding_100(config, now);
        let packet = crate::repair::test_packet;
        let later = now + Duration::from_millis(1);
        proxy.handle_datagram(later, root, &packet(1 << 62, 1 << 62, 1));
        let mut answer = packet((1 << 62) - 1, (1 << 62) - 1, 1);
        wire::market::mark_retransmission(&mut answer).expect("a packet");
        proxy.handle_datagram(later, root, &answer);
        assert_eq!(proxy.core.counters.dropped(DropReason::FarAhead), 2);
        assert!(proxy.poll_transmit(later).is_none(), "not forwarded");
        proxy.handle_datagram(later, root, &packet(101, 101, 1));
        assert!(proxy.poll_transmit(later).is_some(), "the stream goes on");
        assert!(proxy.repair.ring.marked(101).is_some(), "and is kept");
        // Within the dedupe window but past what the repair ring holds: kept, it would
        // make the ring refuse the real packets up to it.
        let past_ring = 101 + proxy.repair.ring.reach();
        proxy.handle_datagram(later, root, &packet(past_ring, past_ring, 1));
        assert_eq!(proxy.core.counters.dropped(DropReason::FarAhead), 3);
        // The next number beyond confirms it: the stream is there (a paused proxy that
        // resumes meets it so), and it is taken.
        let next = past_ring + 1;
        proxy.handle_datagram(later, root, &packet(next, next, 1));
        assert!(proxy.poll_transmit(later).is_some(), "confirmed");
        let after = later + quiet;
        let jump = 101 + 2 * window;
        proxy.handle_datagram(after, root, &packet(jump, jump, 1));
        assert!(
            proxy.poll_transmit(after).is_some(),
            "taken after a silence"
        );
        assert_eq!(proxy.core.counters.dropped(DropReason::FarAhead), 3);
        proxy.check_invariants();
    }

    /// Goal: a market-data datagram longer than the root ever builds (a well-formed packet
    /// whose last message makes it 1,600 bytes, from the parent's address) is dropped as
    /// malformed: forwarded, it overran the outbox's 1,500-byte buffer and panicked the proxy.
    /// Method: packets 1-100, then packet 101 with one 1,550-byte message more, then the
    /// real packet 101, forwarded.
    #[test]
    fn a_packet_longer_than_any_the_root_builds_is_malformed() {
        let now = Instant::ZERO + Duration::from_millis(1);
        let (mut proxy, _, root) = proxy_holding_100(NodeConfig::default(), now);
        let mut long = crate::repair::test_packet(101, 101, 1);
        // One message more in the MoldUDP64 count (bytes 18-19), and its block after.
        let count = u16::from_be_bytes([long[18], long[19]]) + 1;
        long[18..20].copy_from_slice(&count.to_be_bytes());
        long.extend_from_slice(&1_550u16.to_be_bytes());
        long.extend(std::iter::repeat_n(b'x', 1_550));
        assert!(
            wire::parse_market_data(&long).is_ok(),
            "well-formed, only long"
        );
        proxy.handle_datagram(now, root, &long);
        assert_eq!(proxy.core.counters.dropped(DropReason::Malformed), 1);
        assert!(proxy.poll_transmit(now).is_none(), "not forwarded");
        let packet = crate::repair::test_packet(101, 101, 1);
        proxy.handle_datagram(now, root, &packet);
        assert!(proxy.poll_transmit(now).is_some(), "the stream goes on");
        proxy.check_invariants();
    }

    /// Goal: a proxy that fails over starts pacing afresh: the gap its old parent's
    /// feedback raised is not kept under a new parent that feeds back only to its home
    /// children (it stayed at its last value, up to `gap_max`, for the whole stay). Method: a
    /// layer-2 proxy of `<3,3>`; its parent feeds back an OWD far above the threshold (the
    /// gap rises); then market data comes only from the parent's sibling for longer than
    /// `parent_timeout`: the proxy fails over and its gap is zero.
    #[test]
    fn a_proxy_that_fails_over_paces_afresh() {
        let plan = Arc::new(Plan::new(&PlanConfig::unhedged(27, 3, 3)).expect("plan"));
        let id = NodeId(plan.layer(2).start);
        let parent = plan.home_parent(id).expect("a parent");
        let sibling = NodeId(
            plan.layer(1)
                .find(|&p| NodeId(p) != parent)
                .expect("a sibling"),
        );
        let config = NodeConfig::default();
        let timeout = config.parent_timeout;
        let mut proxy = Proxy::new(id, Arc::clone(&plan), config).expect("proxy");
        let ms = Duration::from_millis(1);
        let mut now = Instant::ZERO + ms;
        let mut buf = [0u8; 64];
        for k in 1..=20u64 {
            proxy.handle_datagram(now, parent, &crate::repair::test_packet(k, k, 1));
            let feedback = Control::PacingFeedback {
                sender: parent.0,
                owd_ns: 1_000_000,
                samples: 100,
            };
            let len = feedback.emit(&mut buf).expect("fits");
            proxy.handle_datagram(now, parent, &buf[..len]);
            proxy.handle_timeout(now);
            while proxy.poll_transmit(now).is_some() {}
            now += ms * 10;
        }
        assert!(
            proxy.pacer().gap() > Duration::ZERO,
            "the feedback raised the gap"
        );
        let end = now + timeout * 2;
        let mut k = 21;
        while now < end && proxy.watch.parent() == parent {
            proxy.handle_datagram(now, sibling, &crate::repair::test_packet(k, k, 1));
            proxy.handle_timeout(now);
            while proxy.poll_transmit(now).is_some() {}
            now += ms;
            k += 1;
        }
        assert_eq!(proxy.watch.parent(), sibling, "failed over");
        assert_eq!(proxy.pacer().gap(), Duration::ZERO);
        proxy.check_invariants();
    }

    /// A 2-proxy tree over 8 gateways, `<2,4>` without hedging.
    fn plan_2x4() -> Arc<Plan> {
        Arc::new(Plan::new(&PlanConfig::unhedged(8, 2, 4)).expect("plan"))
    }

    /// The first proxy of [`plan_2x4`] with `config`, after its parent sent it packets
    /// 1..=100 (one message each: messages 1..=100), with what it forwarded polled; and its
    /// first home child, and the root.
    fn proxy_holding_100(config: NodeConfig, now: Instant) -> (Proxy, NodeId, NodeId) {
        let plan = plan_2x4();
        let id = NodeId(plan.proxies().start);
        let child = NodeId(plan.home_children(id).start);
        let root = plan.root();
        let mut proxy = Proxy::new(id, plan, config).expect("proxy");
        for p in 1..=100 {
            proxy.handle_datagram(now, root, &crate::repair::test_packet(p, p, 1));
        }
        while proxy.poll_transmit(now).is_some() {}
        (proxy, child, root)
    }

    /// Goal: a proxy takes another session from its parent only once its stream has been
    /// silent for `parent_timeout` (a root started again without its journal), then forwards
    /// the new stream and drops the old one's packets and repair ring. Method: a proxy
    /// holding packets 1..=100; packet 1 of another session at once is dropped; after
    /// `parent_timeout` of silence it is forwarded, and the child's request for old packets
    /// is no longer answered from the ring (it is asked up).
    #[test]
    fn a_proxy_takes_another_session_only_after_silence() {
        let now = Instant::from_nanos(1_000_000);
        let config = NodeConfig::default();
        let quiet = config.parent_timeout;
        let (mut proxy, child, root) = proxy_holding_100(config, now);
        let other = crate::repair::test_packet_of("JASP000123", 1, 1, 1);
        let forwarded = |proxy: &mut Proxy, now: Instant| {
            let mut copies = 0;
            while let Some(t) = proxy.poll_transmit(now) {
                copies += t.destinations.len();
            }
            copies
        };
        proxy.handle_datagram(now, root, &other);
        assert_eq!(forwarded(&mut proxy, now), 0);
        assert_eq!(proxy.counters().dropped(DropReason::WrongSession), 1);
        let later = now + quiet;
        proxy.handle_datagram(later, root, &other);
        assert!(
            forwarded(&mut proxy, later) > 0,
            "the new stream goes on down"
        );
        let started = std::iter::from_fn(|| proxy.poll_event())
            .filter(|e| matches!(e, Event::SessionStarted { .. }))
            .count();
        assert_eq!(started, 1);
        // The old stream's packet 50 is gone with it: a child asking for it (in the new
        // session) gets no copy from the ring.
        let ask = crate::repair::test_request(child.0, "JASP000123", 50, 1);
        proxy.handle_datagram(later, child, &ask);
        let mut to_child = 0;
        while let Some(t) = proxy.poll_transmit(later) {
            to_child += t.destinations.iter().filter(|&&d| d == child).count();
        }
        assert_eq!(to_child, 0);
        proxy.check_invariants();
    }

    /// A proxy of a 2-proxy tree over 8 gateways, running the global-FIFO merge stage.
    fn merging_proxy(discipline: crate::order_queue::Discipline) -> (Proxy, Vec<NodeId>) {
        let plan = plan_2x4();
        let mut config = NodeConfig::default();
        config.sequencer.kind = SequencerKind::GlobalFifo;
        config.discipline = discipline;
        config.pacing.enabled = false;
        let id = NodeId(plan.proxies().start);
        let children = plan.home_children(id).map(NodeId).collect();
        (Proxy::new(id, plan, config).expect("proxy"), children)
    }

    /// Goal: a child's retransmission request, however hostile, costs the proxy a bounded
    /// answer and at most one request up per range and `gap_retry`; a request from a node
    /// that is not its child, or for another session, or naming another requester, is
    /// dropped and counted. Method: a layer-1 proxy of `<2,4>` holds packets 1..=100 (one
    /// message each, messages 1..=100); its children ask.
    #[test]
    fn hostile_retransmission_requests_cost_a_bounded_answer() {
        let mut now = Instant::from_nanos(1_000_000);
        let (mut proxy, child, root) = proxy_holding_100(NodeConfig::default(), now);
        // What the proxy sends, by destination, after handling `bytes` from `from`.
        let ask = |proxy: &mut Proxy, now: Instant, from: NodeId, bytes: &[u8]| {
            while proxy.poll_transmit(now).is_some() {}
            proxy.handle_datagram(now, from, bytes);
            let (mut to_child, mut to_root) = (0, 0);
            while let Some(t) = proxy.poll_transmit(now) {
                to_child += t.destinations.iter().filter(|&&d| d == from).count();
                to_root += t.destinations.iter().filter(|&&d| d == root).count();
            }
            (to_child, to_root)
        };
        let request = crate::repair::test_request;
        // Everything from message 1: 64 packets, nothing asked up.
        let everything = request(child.0, "JASPER0001", 1, u16::MAX);
        assert_eq!(ask(&mut proxy, now, child, &everything), (64, 0));
        // Past what it holds: one ask up, however often the child asks within `gap_retry`.
        let future = request(child.0, "JASPER0001", 1_000, 10);
        assert_eq!(ask(&mut proxy, now, child, &future), (0, 1));
        assert_eq!(ask(&mut proxy, now, child, &future), (0, 0));
        now += NodeConfig::default().gap_retry;
        assert_eq!(ask(&mut proxy, now, child, &future), (0, 1));
        assert_eq!(proxy.counters().repair_asks, 2);
        // Not its child (its own parent), another session, another requester: dropped.
        let drops = proxy.counters().dropped_total();
        let from_root = request(root.0, "JASPER0001", 1, 10);
        assert_eq!(ask(&mut proxy, now, root, &from_root), (0, 0));
        let other_session = request(child.0, "OTHER00001", 1, 10);
        assert_eq!(ask(&mut proxy, now, child, &other_session), (0, 0));
        let forged = request(child.0 + 1, "JASPER0001", 1, 10);
        assert_eq!(ask(&mut proxy, now, child, &forged), (0, 0));
        assert_eq!(proxy.counters().dropped_total(), drops + 3);
        proxy.check_invariants();
    }

    /// Goal: a child far behind, asking for packets older than the proxy's ring holds, gets
    /// the parent's answers passed on, though the ring does not keep them (it dropped them
    /// once: two of 60 seeds of the 60-gateway durable-root run left a gateway ~2,000
    /// packets behind). Method: a ring of 1 KiB (8 slots) holds packets 93..=100; a child
    /// asks for message 1; the root's answer, packet 1 marked, comes back.
    #[test]
    fn an_answer_older_than_the_ring_reaches_the_child_waiting() {
        let now = Instant::from_nanos(1_000_000);
        let config = NodeConfig {
            repair_bytes: 1024,
            ..NodeConfig::default()
        };
        let (mut proxy, child, root) = proxy_holding_100(config, now);
        let request = crate::repair::test_request(child.0, "JASPER0001", 1, 10);
        proxy.handle_datagram(now, child, &request);
        let asked_up =
            core::iter::from_fn(|| proxy.poll_transmit(now).map(|t| t.destinations == [root]))
                .filter(|&up| up)
                .count();
        assert_eq!(asked_up, 1, "too old for the ring: asked up");
        let mut answer = crate::repair::test_packet(1, 1, 1);
        wire::market::mark_retransmission(&mut answer).expect("a packet");
        proxy.handle_datagram(now, root, &answer);
        let t = proxy.poll_transmit(now).expect("passed on");
        assert_eq!(t.destinations, [child]);
        assert_eq!(t.payload, &answer[..]);
        assert_eq!(proxy.counters().retransmissions, 1);
    }

    /// Goal: with the global-FIFO sequencer a proxy forwards its children's orders in
    /// generation order, whatever the interleaving of their arrivals, through a FIFO and a
    /// SimplePQ queue; heartbeat orders let it progress; nothing is lost. Method: 4 children
    /// send sorted random streams (with heartbeat orders in between) in random interleavings,
    /// 30 seeds; a last heartbeat from every child flushes the stage.
    #[test]
    fn merge_stage_forwards_in_generation_order() {
        use rand::{Rng, SeedableRng};
        for discipline in [
            crate::order_queue::Discipline::Fifo,
            crate::order_queue::Discipline::SimplePq,
        ] {
            for seed in 0..30 {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
                let (mut proxy, children) = merging_proxy(discipline);
                let mut clock = vec![1_000u64; children.len()];
                let (mut sent, mut out) = (0, Vec::new());
                let mut now = Instant::from_nanos(1_000_000);
                for _ in 0..600 {
                    let c = rng.gen_range(0..children.len());
                    clock[c] += rng.gen_range(0..400);
                    now += Duration::from_nanos(rng.gen_range(0..300));
                    let bytes = if rng.gen_bool(0.2) {
                        order_heartbeat(children[c], clock[c])
                    } else {
                        sent += 1;
                        order(&proxy.core.plan, children[c], sent, clock[c])
                    };
                    proxy.handle_datagram(now, children[c], &bytes);
                    out.extend(sent_up(&mut proxy, now));
                }
                let end = clock.iter().max().expect("children") + 1;
                for &c in &children {
                    proxy.handle_datagram(now, c, &order_heartbeat(c, end));
                }
                out.extend(sent_up(&mut proxy, now));
                assert_eq!(
                    out.len() as u64,
                    sent,
                    "{discipline:?} seed {seed}: all forwarded"
                );
                assert!(
                    out.windows(2).all(|w| w[0] <= w[1]),
                    "{discipline:?} seed {seed}: in generation order"
                );
                let stats = proxy.merge_stats().expect("a merge stage");
                assert_eq!((stats.late, stats.released_past_silent), (0, 0));
                proxy.check_invariants();
            }
        }
    }

    /// Goal: a gateway's orders speak for its own participant only: one naming another
    /// participant, or another gateway, is dropped as forged and goes no further (it would
    /// trade and be answered in another's name, and every name it made up took a response
    /// stream at the root). Method: the first child of a `<2,4>` proxy sends an order as the
    /// second child's participant, one as the second child, and one as itself.
    #[test]
    fn an_order_in_anothers_name_is_dropped_as_forged() {
        let (mut proxy, children) = merging_proxy(crate::order_queue::Discipline::Fifo);
        let plan = Arc::clone(&proxy.core.plan);
        let now = Instant::from_nanos(1_000_000);
        let (mine, other) = (children[0], children[1]);
        let as_other = order(&plan, other, 1, 5_000);
        proxy.handle_datagram(now, mine, &as_other);
        let mut as_other_gateway = order(&plan, mine, 2, 5_001);
        // The gateway id of the order header: the hop envelope, then the order's header.
        let hop = wire::hop::Hop::parse(&as_other_gateway).expect("a hop");
        let offset = as_other_gateway.len() - hop.order.len();
        let message = wire::order::Repr::parse(hop.order).expect("an order");
        let wire::order::Repr::Enter(mut enter) = message else {
            panic!("an enter order");
        };
        enter.header.gateway_id = other.0;
        let len = wire::order::Repr::Enter(enter)
            .emit(&mut as_other_gateway[offset..])
            .expect("fits");
        assert_eq!(offset + len, as_other_gateway.len());
        proxy.handle_datagram(now, mine, &as_other_gateway);
        assert_eq!(proxy.core.counters.dropped(DropReason::Forged), 2);
        assert_eq!(proxy.queued(), 0);
        proxy.handle_datagram(now, mine, &order(&plan, mine, 3, 5_002));
        assert_eq!(proxy.core.counters.dropped(DropReason::Forged), 2);
        assert_eq!(proxy.queued(), 1, "its own goes on");
    }

    /// Goal: once a proxy's clock has synced, a child's order or heartbeat order stamped
    /// further ahead of it than `ORDER_AHEAD_MAX` is dropped and counted where it enters the
    /// tree, as the root drops it, instead of waiting in the merge stage and raising the
    /// child's watermark past the orders it sends next; one within the bound is merged.
    /// Method: a `<2,4>` merging proxy synced to exchange time over a 20 µs path; its first
    /// child sends an order and a heartbeat order 2 s ahead, then an order 0.5 s ahead.
    #[test]
    fn an_order_stamped_far_ahead_of_a_synced_proxy_is_dropped() {
        let (mut proxy, children) = merging_proxy(crate::order_queue::Discipline::Fifo);
        let plan = Arc::clone(&proxy.core.plan);
        let mut now = Instant::from_nanos(1_000_000_000);
        // Before the clock has synced, nothing is judged (its clock may read anything).
        let far = |now: Instant, s: f64| now.as_nanos() + (s * 1e9) as u64;
        proxy.handle_datagram(
            now,
            children[1],
            &order(&plan, children[1], 1, far(now, 2.0)),
        );
        assert_eq!(proxy.core.counters.dropped(DropReason::AheadOfClock), 0);
        assert_eq!(proxy.queued(), 1);
        for _ in 0..50 {
            now += Duration::from_millis(1);
            for (i, (id, _)) in proxy.clock.start_pair(now).into_iter().enumerate() {
                let there = ExchangeTime::from_nanos(now.as_nanos() + 20_000 + i as u64 * 100);
                let back = Instant::from_nanos(there.as_nanos() + 20_000);
                proxy.clock.on_reply(back, id, there, there);
            }
        }
        assert!(proxy.clock.is_synced());
        let mine = children[0];
        proxy.handle_datagram(now, mine, &order(&plan, mine, 2, far(now, 2.0)));
        proxy.handle_datagram(now, mine, &order_heartbeat(mine, far(now, 2.0)));
        assert_eq!(proxy.core.counters.dropped(DropReason::AheadOfClock), 2);
        assert_eq!(proxy.queued(), 1, "neither reached the merge stage");
        assert_eq!(
            proxy.watermarks[0], None,
            "nor raised the child's watermark"
        );
        sent_up(&mut proxy, now);
        let (drops, queued) = (proxy.core.counters.dropped_total(), proxy.queued());
        proxy.handle_datagram(now, mine, &order(&plan, mine, 3, far(now, 0.5)));
        assert_eq!(proxy.core.counters.dropped_total(), drops);
        let went_up = sent_up(&mut proxy, now).len();
        assert_eq!(
            proxy.queued() + went_up,
            queued + 1,
            "within the bound it is merged"
        );
        proxy.check_invariants();
    }

    /// Goal: a silent home child blocks the merge stage only for `child_timeout`; then the
    /// others' orders go up, and an idle proxy's heartbeat order promises no more than the
    /// earliest order waiting in its stage.
    #[test]
    fn silent_child_stops_blocking_after_its_timeout() {
        let (mut proxy, children) = merging_proxy(crate::order_queue::Discipline::Fifo);
        let t0 = Instant::from_nanos(1_000_000);
        let timeout = NodeConfig::default().sequencer.child_timeout;
        for (i, &c) in children.iter().enumerate().skip(1) {
            let bytes = order(&proxy.core.plan, c, 1, 5_000 + i as u64);
            proxy.handle_datagram(t0, c, &bytes);
        }
        assert_eq!(
            sent_up(&mut proxy, t0),
            Vec::<u64>::new(),
            "child 0 may send older"
        );
        assert_eq!(proxy.queued(), 3);
        // Idle for a heartbeat interval: the promise is the earliest order held, not later.
        let mut now = t0;
        let mut beats = Vec::new();
        loop {
            now = proxy.poll_timeout().expect("timers run").max(now);
            if now >= t0 + timeout {
                break;
            }
            proxy.handle_timeout(now);
            while let Some(t) = proxy.poll_transmit(now) {
                if let Ok(Control::OrderHeartbeat { time, .. }) = Control::parse(t.payload) {
                    beats.push(time.0);
                }
                assert_ne!(
                    wire::classify(t.payload),
                    Kind::Hop,
                    "nothing goes up early"
                );
            }
        }
        assert!(!beats.is_empty(), "the idle proxy heartbeats");
        assert!(beats.iter().all(|&b| b <= 5_001), "{beats:?}");
        let now = t0 + timeout;
        proxy.handle_timeout(now);
        assert_eq!(sent_up(&mut proxy, now), vec![5_001, 5_002, 5_003]);
        assert_eq!(proxy.merge_stats().expect("stage").released_past_silent, 3);
    }

    /// Every destination of the market-data packets `proxy` sends after receiving `bytes`.
    fn forwarded(proxy: &mut Proxy, now: Instant, from: NodeId, bytes: &[u8]) -> Vec<u32> {
        proxy.handle_datagram(now, from, bytes);
        let mut out = Vec::new();
        while let Some(transmit) = proxy.poll_transmit(now) {
            if transmit.payload == bytes {
                out.extend(transmit.destinations.iter().map(|d| d.0));
            }
        }
        out.sort_unstable();
        out
    }

    /// Takeover: once its watched sibling is reported silent, a proxy also sends each packet
    /// to the block that sibling would have served first, and stops when it is heard again.
    #[test]
    fn a_silent_siblings_block_is_served_by_its_watcher() {
        takeover(2, 1);
    }

    /// Two dead neighbours: with the sibling two back silent as well (its own watcher is the
    /// dead one), the proxy serves both their blocks and reports both, and drops the second
    /// block once that sibling is heard again.
    #[test]
    fn two_silent_siblings_blocks_are_served_by_the_next_one() {
        takeover(2, 2);
    }

    /// Three dead neighbours: with `takeover_depth = 3` the next live proxy serves all three
    /// blocks; with the default 2 it serves the two nearest, as configured (the third's block
    /// then reaches its gateways only through hedging).
    #[test]
    fn three_silent_siblings_blocks_are_served_as_deep_as_configured() {
        takeover(3, 3);
        takeover(2, 3);
        takeover(4, 3);
    }

    /// A proxy with `takeover_depth = depth` whose `silent` nearest siblings before it go
    /// silent, the others heard.
    fn takeover(depth: u32, silent: usize) {
        let plan = Arc::new(
            Plan::new(&PlanConfig {
                hedge: 0,
                ..PlanConfig::new(100)
            })
            .expect("plan"),
        );
        let config = NodeConfig {
            takeover_depth: depth,
            ..NodeConfig::default()
        };
        let (interval, timeout) = (config.heartbeat_interval, config.heartbeat_timeout);
        let me = NodeId(plan.proxies().start + 4);
        let mut proxy = Proxy::new(me, plan.clone(), config.clone()).expect("proxy");
        let back: Vec<NodeId> = (1..=depth).map(|k| NodeId(me.0 - k)).collect();
        let watched: Vec<NodeId> = proxy.watches.iter().map(|w| w.node).collect();
        assert_eq!(watched, back, "the siblings before it, nearest first");
        assert_eq!(proxy.heartbeat_to.len(), back.len());
        let taken = silent.min(back.len());
        let mut root = crate::Root::new(plan.clone(), config).expect("root");
        let mut packets = Vec::new();
        for k in 0..4u64 {
            root.publish(
                Instant::ZERO + Duration::from_micros(k),
                &[wire::Raw(b"tick")],
            );
            while let Some(transmit) = root.poll_transmit(Instant::ZERO) {
                if transmit.destinations.contains(&me) {
                    packets.push(transmit.payload.to_vec());
                }
            }
        }
        assert_eq!(packets.len(), 4, "the root sends every packet to layer 1");
        let block_of = |sender: NodeId, seq: u64| -> Vec<u32> {
            let mut out = Vec::new();
            plan.forward_targets(sender, seq, &mut out);
            let mut ids: Vec<u32> = out.iter().map(|n| n.0).collect();
            ids.sort_unstable();
            ids
        };
        let blocks = |senders: &[NodeId], seq: u64| -> Vec<u32> {
            let mut ids: Vec<u32> = senders.iter().flat_map(|&s| block_of(s, seq)).collect();
            ids.sort_unstable();
            ids
        };
        let seq = |bytes: &[u8]| {
            wire::market::parse_market_data(bytes)
                .expect("a packet")
                .header
                .packet_seq
        };
        let mut now = Instant::ZERO + Duration::from_millis(1);
        for &b in &back {
            proxy.handle_datagram(now, b, &heartbeat(b));
        }
        let first = &packets[0];
        assert_eq!(
            forwarded(&mut proxy, now, plan.root(), first),
            block_of(me, seq(first)),
            "its own block only while the siblings are heard"
        );
        // The nearest `silent` go silent until reported; the others keep beating.
        for _ in 0..20 {
            now += interval;
            for &b in back.iter().skip(silent) {
                proxy.handle_datagram(now, b, &heartbeat(b));
            }
            proxy.handle_timeout(now);
        }
        assert!(now.saturating_duration_since(Instant::ZERO) > timeout);
        let dead: Vec<NodeId> = core::iter::once(me)
            .chain(back[..taken].iter().copied())
            .collect();
        let label = format!("depth {depth}, {silent} silent");
        assert_eq!(failures(&mut proxy), taken, "{label}");
        let second = &packets[1];
        assert_eq!(
            forwarded(&mut proxy, now, plan.root(), second),
            blocks(&dead, seq(second)),
            "{label}"
        );
        if taken > 1 {
            // The farthest taken over heard again: its watcher serves it no more.
            let farthest = back[taken - 1];
            proxy.handle_datagram(now, farthest, &heartbeat(farthest));
            assert!(
                core::iter::from_fn(|| proxy.poll_event())
                    .any(|e| e == Event::FailureCleared { node: farthest })
            );
            let third = &packets[2];
            assert_eq!(
                forwarded(&mut proxy, now, plan.root(), third),
                blocks(&dead[..taken], seq(third)),
                "{label}"
            );
        }
        // The nearest heard again: back to its own block, whoever is silent behind it.
        proxy.handle_datagram(now, back[0], &heartbeat(back[0]));
        let last = &packets[3];
        assert_eq!(
            forwarded(&mut proxy, now, plan.root(), last),
            block_of(me, seq(last)),
            "{label}"
        );
        proxy.check_invariants();
    }

    fn failures(proxy: &mut Proxy) -> usize {
        core::iter::from_fn(|| proxy.poll_event())
            .filter(|e| matches!(e, Event::FailureDetected { .. }))
            .count()
    }

    /// A watcher whose own thread stalls past the timeout does not condemn its sibling on
    /// the one late check that follows; a sibling silent while the watcher runs is
    /// reported after the timeout.
    #[test]
    fn own_stall_is_not_the_siblings_failure() {
        let plan = Arc::new(Plan::new(&PlanConfig::new(100)).expect("plan"));
        let config = NodeConfig::default();
        let (interval, timeout) = (config.heartbeat_interval, config.heartbeat_timeout);
        let mut proxy = Proxy::new(NodeId(plan.proxies().start), plan, config).expect("proxy");
        let (watched, _) = proxy.watched_failed().expect("has a sibling to watch");
        let mut now = Instant::ZERO + Duration::from_millis(1);
        // Heard regularly for a while.
        for _ in 0..10 {
            proxy.handle_datagram(now, watched, &heartbeat(watched));
            proxy.handle_timeout(now);
            now += interval;
        }
        assert_eq!(failures(&mut proxy), 0);
        // The watcher's thread stalls for 4 timeouts: its first check after comes late.
        now += timeout * 4;
        proxy.handle_timeout(now);
        assert_eq!(failures(&mut proxy), 0, "one late check is not silence");
        proxy.handle_datagram(now, watched, &heartbeat(watched));
        // Now the sibling really goes silent while the watcher keeps checking.
        let mut reported_at = None;
        for _ in 0..20 {
            now += interval;
            proxy.handle_timeout(now);
            if failures(&mut proxy) > 0 {
                reported_at.get_or_insert(now);
            }
        }
        let reported_at = reported_at.expect("a silent sibling is reported");
        assert!(reported_at >= now - interval * 20 + timeout);
        assert!(reported_at <= now - interval * 20 + timeout + interval * 2);
        assert_eq!(proxy.watched_failed(), Some((watched, true)));
    }
}
