//! Pieces of the inbound (order) path shared by proxies and the root: measuring the hop OWD
//! of each child's orders for pacing feedback, dropping the second copy of a receiver-hedged
//! order or of one sent again ([`HedgeDedupe`]), and, at the root, answering a copy sent
//! again with the responses already sent ([`Answers`]).

use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

use wire::control::Repr as Control;

use crate::core::{Core, Timer};
use crate::node::NodeId;
use crate::owd::OwdWindow;
use crate::plan::Role;
use crate::time::Instant;
use wire::ExchangeTime;

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
            if let Some((median, samples)) =
                w.percentile(now, window, 5000, crate::owd::Rank::Nearest)
            {
                out.push((NodeId(self.first_child + i as u32), median, samples));
            }
        }
    }
}

/// First-copy-wins over `(participant, client order id)`, remembering the last `max` keys,
/// and beyond those every key seen within `keep` (up to [`HEDGE_DEDUPE_HARD_FACTOR`] times
/// `max`): a gateway sends an unanswered order again ([`crate::gateway`]'s retries, and after
/// a failover, [`crate::failover`]), and the copy of one that did get through must still be
/// recognised, however many orders came in between.
///
/// Two uses:
/// - **The root** keeps exactly one copy of an order, whatever its attempt
///   ([`HedgeDedupe::first_copy`]). A key it forgot could come back, so it also keeps a
///   *floor*: the latest first arrival of a forgotten key, plus [`FORGOTTEN_MARGIN`] for the
///   gateways' clock error. An order generated before the floor may be one it forgot, and is
///   refused as stale. The floor rises only when the filter is full, and then stays
///   `keep` behind the present unless orders come faster than the hard bound, so an order is
///   refused only if it took longer than `keep` (four `parent_timeout`s) to arrive.
/// - **A proxy** drops hedged twins (copies of one attempt) but passes a copy sent again
///   ([`HedgeDedupe::pass_copy`]): a later attempt goes on once the proxy holds no copy of
///   the order any more (it went up, [`HedgeDedupe::let_go`]) and `min_gap` has passed
///   since. So an order waiting in a paced queue is not queued twice, and the repeats a
///   paused proxy finds when it resumes (they reach it together) do not all go up.
#[derive(Clone, Debug)]
pub(crate) struct HedgeDedupe {
    /// Keys by first arrival, oldest first.
    order: VecDeque<((u32, u64), Instant)>,
    seen: BTreeMap<(u32, u64), Passed>,
    max: usize,
    keep: Duration,
    /// Orders generated before this (ns of the node's clock) may have been forgotten.
    floor_ns: u64,
}

/// The latest copy of a key a filter passed.
#[derive(Clone, Copy, Debug)]
struct Passed {
    attempt: u16,
    /// When the node let it go (sent it up, or dropped it); `None` while it holds it.
    let_go: Option<Instant>,
}

/// What the root's filter makes of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The first copy: it goes to the sequencer.
    First,
    /// Another copy of an order already admitted.
    Duplicate,
    /// Generated before the floor: it may be a copy of an order whose key was forgotten.
    Stale,
}

/// Dedupe filters remember every key seen within this many `parent_timeout`s: a gateway
/// sends orders again up to [`crate::gateway::UNANSWERED_KEEP_TIMEOUTS`] `parent_timeout`s
/// old, and a copy may take a while more to arrive (past that the root's floor refuses it).
pub(crate) const RESEND_KEEP_TIMEOUTS: u32 = 4;

/// A dedupe filter holds at most this many times its `max` keys, however recent (a memory
/// bound: 1M keys, ~50 MB, with the default `hedge_dedupe_max`).
pub(crate) const HEDGE_DEDUPE_HARD_FACTOR: usize = 16;

/// The bound every memory of the order path keeps (dedupe keys, answered orders, held
/// responses): the oldest of `len` entries, first seen at `at`, goes at `now` if there are at
/// least `min` and it is older than `keep`, or if there are [`HEDGE_DEDUPE_HARD_FACTOR`]
/// times `min` however recent.
pub(crate) fn past_bounds(
    len: usize,
    min: usize,
    at: Instant,
    now: Instant,
    keep: Duration,
) -> bool {
    (len >= min && now.saturating_duration_since(at) > keep)
        || len >= min.saturating_mul(HEDGE_DEDUPE_HARD_FACTOR)
}

/// How far ahead of the root's clock a gateway's generation stamp may be without a forgotten
/// order getting past the root's floor.
pub(crate) const FORGOTTEN_MARGIN: Duration = Duration::from_millis(1);

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
            seen: BTreeMap::new(),
            max: max.max(1),
            keep,
            floor_ns: 0,
        }
    }

    /// The keys held, oldest first, each with when it was first seen (for a root snapshot).
    pub(crate) fn keys(&self) -> impl Iterator<Item = ((u32, u64), Instant)> + '_ {
        self.order.iter().copied()
    }

    /// Orders generated before this (ns) may have been forgotten.
    pub(crate) fn floor_ns(&self) -> u64 {
        self.floor_ns
    }

    /// A recovered root's filter: the floor and the keys of a snapshot (oldest first), as
    /// [`HedgeDedupe::first_copy`] left them (the keys of orders the crashed root had taken
    /// but not sequenced are not among them: those orders died with it, and a copy of one
    /// must go on).
    pub(crate) fn restore(&mut self, floor_ns: u64, keys: &[crate::journal::SeenKey]) {
        self.floor_ns = self.floor_ns.max(floor_ns);
        for &(key, at) in keys {
            if !self.seen.contains_key(&key) {
                self.remember(key, 0, Instant::from_nanos(at));
            }
        }
    }

    /// Forgets every key (and so raises the floor past all of them).
    pub(crate) fn clear(&mut self) {
        if let Some(&(_, at)) = self.order.back() {
            self.raise_floor(at);
        }
        self.order.clear();
        self.seen.clear();
    }

    /// At the root: whether this copy of an order generated at `generation` is the first
    /// (seen at `now`, which is exchange time there); remembers it.
    pub(crate) fn first_copy(
        &mut self,
        key: (u32, u64),
        generation: ExchangeTime,
        now: Instant,
    ) -> Admit {
        if self.seen.contains_key(&key) {
            return Admit::Duplicate;
        }
        if generation.as_nanos() < self.floor_ns {
            return Admit::Stale;
        }
        self.remember(key, 0, now);
        Admit::First
    }

    /// At a proxy: the copy of `key` it passed left it at `now` (sent up, or dropped).
    pub(crate) fn let_go(&mut self, key: (u32, u64), now: Instant) {
        if let Some(passed) = self.seen.get_mut(&key) {
            passed.let_go = Some(now);
        }
    }

    /// At a proxy: whether transmission `attempt` of an order goes on (a first copy, or one
    /// sent again at least `min_gap` after the proxy let the last copy go); remembers it as
    /// held until [`HedgeDedupe::let_go`].
    pub(crate) fn pass_copy(
        &mut self,
        key: (u32, u64),
        attempt: u16,
        now: Instant,
        min_gap: Duration,
    ) -> bool {
        match self.seen.get_mut(&key) {
            None => {
                self.remember(key, attempt, now);
                true
            }
            Some(passed)
                if attempt > passed.attempt
                    && passed
                        .let_go
                        .is_some_and(|at| now.saturating_duration_since(at) >= min_gap) =>
            {
                *passed = Passed {
                    attempt,
                    let_go: None,
                };
                true
            }
            Some(_) => false,
        }
    }

    /// Remembers `key` (first seen at `now`), held; forgets the keys past the bounds.
    fn remember(&mut self, key: (u32, u64), attempt: u16, now: Instant) {
        while let Some(&(old, at)) = self.order.front() {
            if !past_bounds(self.order.len(), self.max, at, now, self.keep) {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&old);
            self.raise_floor(at);
        }
        self.order.push_back((key, now));
        self.seen.insert(
            key,
            Passed {
                attempt,
                let_go: None,
            },
        );
        debug_assert_eq!(self.order.len(), self.seen.len());
    }

    fn raise_floor(&mut self, forgotten_at: Instant) {
        let floor = forgotten_at.as_nanos() + FORGOTTEN_MARGIN.as_nanos() as u64;
        self.floor_ns = self.floor_ns.max(floor);
    }

    /// Forgets `key`: its copy was dropped after all, and a copy sent again must go on.
    /// (Linear in the keys held; the root calls it only when its sequencer is full.)
    pub(crate) fn forget(&mut self, key: (u32, u64)) {
        if self.seen.remove(&key).is_some() {
            self.order.retain(|(k, _)| *k != key);
        }
    }
}

/// The numbers of the responses the root sent, by the order they answer (participant,
/// client order id), to send them again when a copy of that order comes back: a gateway
/// sends an order again when no answer reached it, and if the root had executed the order,
/// the answer was lost on the way down. Without this the root would drop the copy as a
/// duplicate and the participant would learn what became of its order only from its
/// response stream's gap ([`crate::responses`]), later. The datagrams themselves are in the
/// root's [`crate::responses::ResponseLog`].
///
/// One replay per attempt ([`Answers::replay`]): the hedged twins of a retry do not each
/// trigger one. Bounded like [`HedgeDedupe`]: at least the last `max` orders answered,
/// every order answered within `keep`, at most [`HEDGE_DEDUPE_HARD_FACTOR`] times `max`, and
/// [`ANSWERS_PER_ORDER_MAX`] responses per order (the first ones: an order's acceptance and
/// first fills).
#[derive(Debug)]
pub(crate) struct Answers {
    by_order: BTreeMap<(u32, u64), Answered>,
    /// Orders by their first response, oldest first.
    order: VecDeque<((u32, u64), Instant)>,
    max: usize,
    keep: Duration,
    /// Responses sent again.
    pub(crate) replayed: u64,
}

/// The responses to one order.
#[derive(Debug, Default)]
struct Answered {
    /// Their numbers in the participant's response stream.
    seqs: [u64; ANSWERS_PER_ORDER_MAX as usize],
    count: u8,
    /// The latest attempt replayed to.
    replayed_attempt: u16,
}

/// Responses [`Answers`] keeps per order, at most.
pub(crate) const ANSWERS_PER_ORDER_MAX: u8 = 8;

impl Answers {
    pub(crate) fn for_node(config: &crate::config::NodeConfig) -> Self {
        Self {
            by_order: BTreeMap::new(),
            order: VecDeque::new(),
            max: config.hedge_dedupe_max.max(1),
            keep: config.parent_timeout.saturating_mul(RESEND_KEEP_TIMEOUTS),
            replayed: 0,
        }
    }

    /// Notes that response number `seq` of its participant, answering order `key`, went at
    /// `now`.
    pub(crate) fn note(&mut self, now: Instant, key: (u32, u64), seq: u64) {
        if !self.by_order.contains_key(&key) {
            self.forget_old(now);
            self.order.push_back((key, now));
        }
        let answered = self.by_order.entry(key).or_default();
        if answered.count < ANSWERS_PER_ORDER_MAX {
            answered.seqs[usize::from(answered.count)] = seq;
            answered.count += 1;
        }
    }

    fn forget_old(&mut self, now: Instant) {
        while let Some(&(old, at)) = self.order.front() {
            if !past_bounds(self.order.len(), self.max, at, now, self.keep) {
                break;
            }
            self.order.pop_front();
            self.by_order.remove(&old);
        }
    }

    /// The numbers of the responses sent to order `key`, if copy `attempt` of it is the
    /// first of its attempt to ask (a later attempt than any replayed to); counts them as
    /// replayed.
    pub(crate) fn replay(&mut self, key: (u32, u64), attempt: u16) -> &[u64] {
        let Some(answered) = self.by_order.get_mut(&key) else {
            return &[];
        };
        if attempt <= answered.replayed_attempt {
            return &[];
        }
        answered.replayed_attempt = attempt;
        self.replayed += u64::from(answered.count);
        &answered.seqs[..usize::from(answered.count)]
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        debug_assert_eq!(self.order.len(), self.by_order.len());
        self.order.len()
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

    fn t(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn g(ms: u64) -> ExchangeTime {
        ExchangeTime::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn dedupe_drops_second_copies_and_forgets_old_keys() {
        let mut d = HedgeDedupe::new(2, Duration::from_millis(10));
        assert_eq!(d.first_copy((1, 1), g(0), t(0)), Admit::First);
        assert_eq!(d.first_copy((1, 1), g(0), t(0)), Admit::Duplicate);
        assert_eq!(d.first_copy((2, 1), g(20), t(20)), Admit::First);
        assert_eq!(d.first_copy((1, 2), g(40), t(40)), Admit::First);
        assert!(
            !d.seen.contains_key(&(1, 1)),
            "forgotten after 2 newer keys, once older than 10 ms"
        );
        assert_eq!(
            d.first_copy((1, 1), g(0), t(40)),
            Admit::Stale,
            "a forgotten order coming back is not taken for a new one"
        );
        d.forget((1, 2));
        assert_eq!(
            d.first_copy((1, 2), g(40), t(41)),
            Admit::First,
            "forgotten on request"
        );
        assert_eq!(d.first_copy((1, 2), g(40), t(41)), Admit::Duplicate);
        assert_eq!(d.order.len(), d.seen.len());
    }

    /// Goal: however many orders arrive, a key younger than `keep` is remembered (an order
    /// sent again whose first copy got through is still dropped), up to the hard bound; and
    /// a key forgotten at the hard bound cannot come back as a first copy.
    #[test]
    fn dedupe_remembers_recent_keys_beyond_its_count() {
        let mut d = HedgeDedupe::new(4, Duration::from_millis(10));
        for id in 0..40 {
            assert_eq!(d.first_copy((1, id), g(1), t(1)), Admit::First);
        }
        assert_eq!(
            d.first_copy((1, 0), g(1), t(5)),
            Admit::Duplicate,
            "40 keys within 10 ms: all kept"
        );
        assert_eq!(d.first_copy((2, 0), g(20), t(20)), Admit::First);
        assert_eq!(d.order.len(), 4, "older than 10 ms: back to the last 4");
        assert_eq!(
            d.floor_ns, 2_000_000,
            "the last one forgotten arrived at 1 ms, + 1 ms"
        );
        assert_eq!(d.first_copy((1, 0), g(1), t(20)), Admit::Stale);
        assert_eq!(d.first_copy((3, 0), g(3), t(20)), Admit::First);
        // 100 keys within 10 ms, 100 µs apart: the hard bound (64) forgets the oldest.
        let at = |id: u64| Instant::from_nanos(21_000_000 + (id - 100) * 100_000);
        for id in 100..200 {
            let generation = ExchangeTime::from_nanos(at(id).as_nanos());
            assert_eq!(d.first_copy((1, id), generation, at(id)), Admit::First);
        }
        assert_eq!(
            d.order.len(),
            4 * HEDGE_DEDUPE_HARD_FACTOR,
            "the hard bound"
        );
        assert_eq!(d.order.len(), d.seen.len());
        assert_eq!(
            d.first_copy((1, 100), g(21), at(200)),
            Admit::Stale,
            "forgotten at the hard bound, 10 ms after arriving: refused, not executed twice"
        );
    }

    /// Goal: a proxy drops hedged twins and the pile of repeats a pause leaves, and passes a
    /// copy sent again later.
    #[test]
    fn proxies_pass_an_order_sent_again_but_not_its_twins() {
        let gap = Duration::from_millis(5);
        let mut d = HedgeDedupe::new(16, Duration::from_millis(400));
        assert!(d.pass_copy((1, 1), 0, t(0), gap));
        assert!(!d.pass_copy((1, 1), 0, t(1), gap), "a twin");
        assert!(
            !d.pass_copy((1, 1), 1, t(20), gap),
            "sent again while still held here"
        );
        d.let_go((1, 1), t(20));
        assert!(
            !d.pass_copy((1, 1), 1, t(22), gap),
            "sent again, too soon after it went"
        );
        assert!(d.pass_copy((1, 1), 1, t(25), gap), "sent again");
        d.let_go((1, 1), t(25));
        assert!(
            !d.pass_copy((1, 1), 1, t(40), gap),
            "a twin of the second attempt"
        );
        assert!(
            !d.pass_copy((1, 1), 0, t(40), gap),
            "an earlier attempt, late"
        );
        // Resuming from a pause: attempts 0-3 of another order, found together.
        let mut passed = Vec::new();
        for attempt in 0..4 {
            let pass = d.pass_copy((1, 2), attempt, t(100), gap);
            if pass {
                d.let_go((1, 2), t(100));
            }
            passed.push(pass);
        }
        assert_eq!(passed, [true, false, false, false]);
        assert!(d.pass_copy((1, 2), 4, t(105), gap));
    }

    /// Goal: a copy sent again gets the numbers of the responses already sent, once per
    /// attempt, and the store forgets like the dedupe filter.
    #[test]
    fn answers_replay_once_per_attempt() {
        let config = crate::config::NodeConfig {
            hedge_dedupe_max: 2,
            parent_timeout: Duration::from_millis(1),
            ..crate::config::NodeConfig::default()
        };
        let mut a = Answers::for_node(&config);
        a.note(t(0), (1, 7), 11);
        a.note(t(0), (1, 7), 12);
        assert_eq!(a.replay((1, 7), 0), [0u64; 0], "attempt 0 is no retry");
        assert_eq!(a.replay((1, 7), 1), [11, 12]);
        assert_eq!(a.replay((1, 7), 1), [0u64; 0], "the retry's hedged twin");
        assert_eq!(a.replay((1, 7), 2), [11, 12], "the next retry");
        assert_eq!(
            a.replay((2, 7), 1),
            [0u64; 0],
            "another participant's order"
        );
        assert_eq!(a.replayed, 4);
        a.note(t(10), (1, 8), 13);
        a.note(t(10), (1, 9), 14);
        assert_eq!(a.len(), 2, "older than keep and beyond max: forgotten");
        assert_eq!(a.replay((1, 7), 3), [0u64; 0]);
        for seq in 0..20 {
            a.note(t(10), (1, 8), 20 + seq);
        }
        assert_eq!(a.by_order[&(1, 8)].count, ANSWERS_PER_ORDER_MAX);
        assert_eq!(a.replay((1, 8), 1)[..2], [13, 20], "the first ones");
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
