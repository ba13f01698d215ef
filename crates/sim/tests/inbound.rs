//! The inbound path in the simulator (issue 6): real nodes, the paper's workload, the network
//! model's receive buffers. Every run is deterministic; a failing one prints how to rerun it
//! (`SIM_SEED=<seed>`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proto::order_queue::Discipline;
use proto::sequencer::SequencerKind;
use proto::strategy::{Ctx, PaperWorkload, Strategy, WorkloadConfig};
use sim::inbound::{Inbound, InboundConfig, InboundRun, Log, paper};
use sim::{NetModel, seed_from_env};

const MS: u64 = 1_000_000;

/// A quiet, lossless network: constant 20 µs links, nothing overflows.
fn quiet() -> NetModel {
    NetModel::ideal(20_000)
}

fn small(mut c: InboundConfig, seed: u64) -> InboundConfig {
    c.seed = seed;
    // The warm-up stays the least of the tree's depth (`sim::inbound::warmup_ns_for`): the
    // gateways' clocks sync first.
    c.duration_ns = 100 * MS;
    c.drain_ns = 30 * MS;
    c.workload.burst_factor = 1.0;
    c
}

fn rerun(seed: u64) -> String {
    format!("rerun with SIM_SEED={seed}")
}

/// The paper's workload that stops sending at `stop_ns` (exchange time), so that every
/// request has been answered by the end of the run.
struct StopAt {
    inner: PaperWorkload,
    stop_ns: u64,
}

impl Strategy for StopAt {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) {
        self.inner.on_start(ctx);
    }
    fn on_response(&mut self, ctx: &mut Ctx<'_>, response: &wire::order::Repr) {
        self.inner.on_response(ctx, response);
    }
    fn on_wakeup(&mut self, ctx: &mut Ctx<'_>) {
        if ctx.now.as_nanos() < self.stop_ns {
            self.inner.on_wakeup(ctx);
        }
    }
}

/// Goal: with pacing on and nothing overflowing, every order a gateway sends in the window
/// reaches the engine exactly once.
#[test]
fn no_order_lost_or_duplicated_when_pacing_holds() {
    let seed = seed_from_env(61);
    let mut c = small(InboundConfig::tree(20, 2, 5), seed);
    c.model = quiet();
    c.workload.rate_per_s = 2_000.0;
    c.workload.overlap = (1, 1);
    let r = Inbound::new(c).unwrap().run();
    let m = &r.metrics;
    assert!(
        m.sent > 3_000,
        "the workload ran: {} ({})",
        m.sent,
        rerun(seed)
    );
    assert_eq!(m.lost, 0, "{:?} ({})", r.loss, rerun(seed));
    assert_eq!(m.duplicates, 0, "{}", rerun(seed));
    assert_eq!(r.net.drops_total(), 0, "{}", rerun(seed));
    assert_eq!(
        m.replica_mismatches, 0,
        "the replica book agrees with the engine"
    );
    assert!(m.matched > 500, "full overlap trades: {}", m.matched);
}

/// Goal: under incast (the inbound preset, participants straight to the root) orders are
/// lost only where a receive buffer overflows, and every lost order is accounted for; and
/// with the gateways' retries on (the default), the same overflows cost no order.
#[test]
fn incast_loss_is_counted_where_buffers_overflow() {
    let seed = seed_from_env(62);
    let mut c = small(InboundConfig::direct(10), seed);
    c.model.loss = 0.0;
    c.workload.rate_per_s = 5_000.0;
    c.node.pacing.enabled = false;
    // Room for the retries of the window's last orders: an order lost at its end goes again
    // one retry timeout later, and the timeout has stretched to what incast answers take.
    let mut with_retries = c.clone();
    with_retries.drain_ns = 300 * MS;
    let retrying = Inbound::new(with_retries).unwrap().run();
    assert!(
        retrying.loss.rx_overflow_by_layer[0] > 0,
        "the buffers overflow: {:?} ({})",
        retrying.loss,
        rerun(seed)
    );
    assert_eq!(
        retrying.metrics.lost,
        0,
        "{:?} ({})",
        retrying.loss,
        rerun(seed)
    );
    assert_eq!(retrying.metrics.duplicates, 0);
    // The paper's prototype: no retries, and the loss it measures.
    c.node.order_retry = Duration::ZERO;
    let r = Inbound::new(c).unwrap().run();
    let m = &r.metrics;
    assert!(m.lost > 0, "incast drops: {:?} ({})", r.loss, rerun(seed));
    let accounted: u64 = r.loss.before_layer.iter().sum::<u64>() + r.loss.at_root;
    assert_eq!(accounted, m.lost, "{:?} ({})", r.loss, rerun(seed));
    assert!(
        r.loss.rx_overflow_by_layer[0] >= r.loss.before_layer[0],
        "orders lost on the way into the root were receive-buffer overflows: {:?}",
        r.loss
    );
    assert_eq!(r.loss.network_other, 0);
    assert_eq!(m.duplicates, 0);
}

/// Goal: with receiver hedging both gateways of a participant send (nearly) every order, and
/// the engine still processes each exactly once; the second copies are dropped and counted.
#[test]
fn hedge_duplicates_never_reach_the_engine() {
    let seed = seed_from_env(63);
    let mut c = small(InboundConfig::tree(10, 2, 5), seed);
    c.plan.receiver_hedging = true;
    c.model = quiet();
    c.workload.rate_per_s = 2_000.0;
    // Copies sent again would blur the count of twins.
    c.node.order_retry = Duration::ZERO;
    let r = Inbound::new(c).unwrap().run();
    let m = &r.metrics;
    assert!(m.sent > 1_000);
    assert_eq!(m.duplicates, 0, "{}", rerun(seed));
    assert_eq!(m.lost, 0, "{:?}", r.loss);
    // The twins run one strategy on one feed, but it reacts to responses too, which reach
    // them at different times: now and then one sends an order the other does not (3 of
    // 1,935 on seed 4). At least 99% go twice, and every second copy is dropped.
    let twice = r.copies_sent.saturating_sub(m.sent);
    // (At the window's edges a twin's copy can fall inside while the order's first copy
    // fell outside: one or two more.)
    assert!(
        r.copies_sent <= 2 * m.sent + 2,
        "at most two copies each: {} for {} ({})",
        r.copies_sent,
        m.sent,
        rerun(seed)
    );
    assert!(
        twice * 100 >= m.sent * 99,
        "both twins send nearly every order: {twice} of {} ({})",
        m.sent,
        rerun(seed)
    );
    assert!(
        r.hedge_duplicates_dropped >= twice,
        "one dropped twin per order sent twice: {} < {twice}",
        r.hedge_duplicates_dropped
    );
}

/// Goal: the sequencer never releases an order before d_s, and on a quiet network (synced
/// clocks, constant links) the engine processes orders in generation-time order.
#[test]
fn sequencer_waits_d_s_and_keeps_generation_order() {
    let seed = seed_from_env(64);
    for discipline in [Discipline::Fifo, Discipline::Loq] {
        let mut c = small(InboundConfig::tree(30, 2, 6), seed);
        c.model = quiet();
        c.node.discipline = discipline;
        c.workload.rate_per_s = 1_000.0;
        let d_s = c.node.sequencer.delay.as_nanos() as u64;
        let mut inbound = Inbound::new(c).unwrap();
        let r = inbound.run();
        let (start, _) = inbound.window();
        let log = inbound.log.borrow();
        assert!(log.sequenced.len() > 3_000);
        for s in &log.sequenced {
            let waited = s.sequenced.as_nanos() - s.arrived.as_nanos();
            assert!(
                waited >= d_s,
                "{s:?} left after {waited} ns ({})",
                rerun(seed)
            );
        }
        let measured: Vec<_> = log
            .sequenced
            .iter()
            .filter(|s| s.sequenced.as_nanos() >= start)
            .collect();
        for w in measured.windows(2) {
            assert!(
                w[0].generation <= w[1].generation,
                "{discipline:?}: {:?} then {:?} ({})",
                w[0],
                w[1],
                rerun(seed)
            );
        }
        assert_eq!(r.metrics.cloudex_out_of_order, 0);
    }
}

/// `c` with every participant trading the paper's workload at 2K orders/s, full overlap, at
/// most 16 resting orders, and stopping at the end of the window, so that every request has
/// been answered by the end of the run.
fn trading_until_the_end(mut c: InboundConfig, seed: u64) -> Inbound {
    c.workload = WorkloadConfig {
        rate_per_s: 2_000.0,
        overlap: (1, 1),
        resting_max: 16,
        burst_factor: 1.0,
        ..WorkloadConfig::default()
    };
    let stop_ns = c.warmup_ns + c.duration_ns;
    let w = c.workload.clone();
    Inbound::with_strategies(c, |p| {
        Ok(Box::new(StopAt {
            inner: PaperWorkload::new(w.clone(), seed, p)?,
            stop_ns,
        }))
    })
    .unwrap()
}

/// Every request the gateways sent, by (gateway, client order id).
fn sent_requests(log: &Log) -> BTreeSet<(u32, u64)> {
    log.sent
        .iter()
        .map(|s| (s.gateway, s.client_order_id))
        .collect()
}

/// Goal: every request gets exactly one final state back at its gateway (or, for an enter,
/// still rests in the engine at the end).
#[test]
fn every_order_gets_exactly_one_final_state() {
    let seed = seed_from_env(65);
    let mut c = small(InboundConfig::tree(10, 2, 5), seed);
    c.model = quiet();
    let mut inbound = trading_until_the_end(c, seed);
    inbound.run();
    let log = inbound.log.borrow();
    let sent = sent_requests(&log);
    assert!(sent.len() > 2_000, "{}", sent.len());
    let mut finals: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let mut accepted = BTreeSet::new();
    for &(gateway, _, r) in &log.responses {
        match r.msg_type {
            b'A' => {
                accepted.insert((gateway, r.order));
            }
            b'J' => *finals.entry((gateway, r.client_order_id)).or_default() += 1,
            b'E' if r.leaves_shares == 0 => *finals.entry((gateway, r.order)).or_default() += 1,
            b'C' => {
                *finals.entry((gateway, r.order)).or_default() += 1;
                if r.client_order_id != r.order {
                    *finals.entry((gateway, r.client_order_id)).or_default() += 1;
                }
            }
            _ => {}
        }
    }
    assert!(
        finals.values().all(|&n| n == 1),
        "no request has two final states ({})",
        rerun(seed)
    );
    let resting = accepted.iter().filter(|k| !finals.contains_key(k)).count();
    assert_eq!(resting, inbound.root().resting_orders(), "{}", rerun(seed));
    for key in &sent {
        assert!(
            finals.contains_key(key) || accepted.contains(key),
            "request {key:?} got no answer ({})",
            rerun(seed)
        );
    }
}

/// A participant that never sends an order.
struct Idle;

impl Strategy for Idle {}

/// Goal: with the global-FIFO sequencer on a quiet network, every order reaches the engine
/// exactly once, in generation-time order, although some participants never send: idle
/// gateways and proxies keep the merge moving with heartbeat orders, and no child is ever
/// skipped as dead. Method: 30 participants under 6 FIFO proxies; every participant under the
/// first proxy is idle, so the root hears from that proxy only through heartbeat orders.
#[test]
fn global_fifo_merges_in_generation_order_and_progresses_on_heartbeats() {
    let seed = seed_from_env(67);
    let mut c = small(InboundConfig::tree(30, 2, 6), seed);
    c.model = quiet();
    c.node.discipline = Discipline::Fifo;
    c.node.sequencer.kind = SequencerKind::GlobalFifo;
    c.workload.rate_per_s = 1_000.0;
    let w = c.workload.clone();
    let plan = proto::plan::Plan::new(&c.plan).unwrap();
    let first_proxy = proto::NodeId(plan.layer(1).start);
    let mut inbound = Inbound::with_strategies(c, |p| {
        let mut gateways = plan.participant_gateways(p);
        if gateways.all(|g| plan.home_parent(g) == Some(first_proxy)) {
            return Ok(Box::new(Idle));
        }
        Ok(Box::new(PaperWorkload::new(w.clone(), seed, p)?))
    })
    .unwrap();
    // The gateways' clocks sync one after another, and until a gateway's has it sends
    // nothing (`Gateway`): its parent skips it once it has been silent for `child_timeout`.
    // That is the warm-up's; the window's merges wait for every child.
    let (start, _) = inbound.window();
    inbound.sim.run_until(start);
    let past_silent_before = inbound.root().sequencer_stats().released_past_silent;
    let r = inbound.run();
    let m = &r.metrics;
    assert!(m.sent > 1_500, "the workload ran: {}", m.sent);
    assert_eq!(m.lost, 0, "{:?} ({})", r.loss, rerun(seed));
    assert_eq!(m.duplicates, 0, "{}", rerun(seed));
    // 170 ms of run, one heartbeat order a millisecond from the idle proxy at least.
    assert!(
        r.sequencer_heartbeats > 150,
        "heartbeats flow: {}",
        r.sequencer_heartbeats
    );
    assert_eq!(
        r.sequencer_released_past_silent - past_silent_before,
        0,
        "no child timed out in the window ({})",
        rerun(seed)
    );
    let log = inbound.log.borrow();
    for w in log.sequenced.windows(2) {
        assert!(
            w[0].generation <= w[1].generation,
            "{:?} then {:?} ({})",
            w[0],
            w[1],
            rerun(seed)
        );
    }
    assert_eq!(r.sequencer_late, 0);
    assert_eq!(m.cloudex_out_of_order, 0);
}

/// Goal: with the global-FIFO sequencer and proxies in between (two layers of them, merging
/// their children before their queues), the engine processes every order in generation order
/// across the whole tree, on the jittery inbound network, through FIFO and SimplePQ queues,
/// with pacing on; the root counts no late release (in the window: while the gateways'
/// clocks sync one after another in the warm-up, merges skip the silent ones). Method: 27
/// participants under 3 x 3 proxies (depth 3), bursts, 3 seeds per discipline. The gateways do not retry: the bursts
/// overflow buffers, and an order recovered by a retry arrives after later ones were
/// sequenced, so a global FIFO must count it late (333 of them on seed 90 with retries).
#[test]
fn global_fifo_is_exact_through_two_proxy_layers() {
    for discipline in [Discipline::Fifo, Discipline::SimplePq] {
        for k in 0..3 {
            let seed = seed_from_env(90) + k;
            let mut c = small(InboundConfig::tree(27, 3, 3), seed);
            // The gateways start trading as their clocks sync (~270 ms in, two proxy layers
            // on this network); the window opens soon after, before the bursts' backlog at
            // the overloaded engine is all it measures.
            c.warmup_ns = 350 * MS;
            c.node.order_retry = Duration::ZERO;
            c.node.discipline = discipline;
            c.node.sequencer.kind = SequencerKind::GlobalFifo;
            c.workload.rate_per_s = 2_000.0;
            c.workload.burst_factor = 2.0;
            let mut inbound = Inbound::new(c).unwrap();
            // While the gateways' clocks sync one after another, each merge skips the ones
            // still silent (`child_timeout`), and their first orders can come late: the
            // warm-up's. The window's are checked.
            let (start, _) = inbound.window();
            inbound.sim.run_until(start);
            let late_before = inbound.root().sequencer_stats().late;
            let r = inbound.run();
            assert!(
                r.metrics.reached > 3_000,
                "the workload ran: {:?}",
                r.metrics
            );
            let log = inbound.log.borrow();
            let window: Vec<_> = log
                .sequenced
                .iter()
                .filter(|s| s.sequenced.as_nanos() >= start)
                .collect();
            let late = window
                .windows(2)
                .filter(|w| w[0].generation > w[1].generation)
                .inspect(|w| println!("out of order: {:?} then {:?}", w[0], w[1]))
                .count();
            assert_eq!(
                late,
                0,
                "{discipline:?}: out of order ({}); past silent {}, proxy drops {:?}",
                rerun(seed),
                r.sequencer_released_past_silent,
                inbound.sim.stats().node_drops
            );
            assert_eq!(
                r.sequencer_late - late_before,
                0,
                "{discipline:?} ({})",
                rerun(seed)
            );
            assert_eq!(r.metrics.cloudex_out_of_order, 0);
        }
    }
}

fn shaped(seed: u64, discipline: Discipline, pacing: bool) -> InboundRun {
    // The campaign's quick settings (1 s window, two bursts), where pacing keeps a backlog.
    let mut c = paper::base(true, 10);
    c.seed = seed;
    c.drain_ns = 40 * MS;
    c.node.discipline = discipline;
    c.node.pacing.enabled = pacing;
    Inbound::new(c).unwrap().run()
}

/// Goal (shape): at overlap 1/5 with queues at the proxies, LOQ matches more orders during
/// bursts than SimplePQ; pacing loses fewer orders in buffers than no pacing (it holds them
/// back at the proxies instead).
#[test]
fn shape_loq_beats_simple_pq_and_pacing_cuts_loss() {
    let seed = seed_from_env(66);
    let loq = shaped(seed, Discipline::Loq, true);
    let pq = shaped(seed, Discipline::SimplePq, true);
    assert!(
        loq.metrics.matching_rate_burst > pq.metrics.matching_rate_burst,
        "LOQ {:.0}/s vs SimplePQ {:.0}/s during bursts ({})",
        loq.metrics.matching_rate_burst,
        pq.metrics.matching_rate_burst,
        rerun(seed)
    );
    let unpaced = shaped(seed, Discipline::Loq, false);
    assert!(
        paper::buffer_loss_pct(&loq) < paper::buffer_loss_pct(&unpaced),
        "paced {:.2}% vs unpaced {:.2}% ({})",
        paper::buffer_loss_pct(&loq),
        paper::buffer_loss_pct(&unpaced),
        rerun(seed)
    );
    assert!(loq.loss.held_at_proxies > 0, "pacing held orders back");
    assert_eq!(
        unpaced.loss.held_at_proxies, 0,
        "nothing waits without pacing"
    );
}

/// Goal: the quick inbound campaign (`jasper sim paper-inbound --quick`, ~13 s here on two
/// cores) runs whole, writes its outputs, and keeps the paper's shapes it matches today:
/// incast, pacing, LOQ at 1/5 and by overlap, LOQ with 1K MPs, more MPs more unfairness (the
/// three fairness shapes it misses are in `docs/results/paper-inbound.md`). The campaign is
/// deterministic, so this fails only when a change moves a shape. On seed 2: these six are
/// the claims that hold on most of seeds 1-3, and seed 2 has exactly them (since session 50
/// "LOQ at 1/5" fails on seed 1 in quick mode, as on seed 1 in full mode).
#[test]
fn paper_inbound_quick() {
    let dir = std::env::temp_dir().join(format!("jasper-paper-inbound-{}", std::process::id()));
    let never = std::sync::atomic::AtomicBool::new(false);
    let printed = paper::paper_inbound(&dir, true, Some(2), &never).unwrap();
    println!("{}", printed.text);
    assert!(!printed.interrupted);
    for experiment in paper::EXPERIMENTS {
        assert!(
            printed.text.contains(&format!("\n[{experiment}]")),
            "{experiment}"
        );
    }
    for shape in [
        "the tree loses fewer orders than direct incast",
        "lower T: less loss, less engine throughput",
        "at 1/5 LOQ matches more during bursts and with lower latency than SimplePQ",
        "LOQ's gain grows as the overlap shrinks (1/1 -> 1/13)",
        "with 1K MPs LOQ still lowers matched latency and raises burst matching",
        "more MPs, more unfairness",
    ] {
        assert!(
            printed.text.contains(&format!("shape: MATCHES ({shape})")),
            "{shape}"
        );
    }
    for name in paper::INBOUND_OUTPUTS {
        assert!(dir.join(name).is_file(), "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A request: (gateway, client order id).
type RequestKey = (u32, u64);

/// The requests of `sent` no response names, and how many final states (rejected,
/// cancelled, filled) each order got.
fn unanswered_and_finals(
    log: &Log,
    sent: &BTreeSet<RequestKey>,
) -> (Vec<RequestKey>, BTreeMap<RequestKey, u32>) {
    let mut answered: BTreeSet<(u32, u64)> = BTreeSet::new();
    let mut finals: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    for &(gateway, _, r) in &log.responses {
        answered.insert((gateway, r.client_order_id));
        answered.insert((gateway, r.order));
        let done =
            matches!(r.msg_type, b'J' | b'C') || (r.msg_type == b'E' && r.leaves_shares == 0);
        if done {
            *finals.entry((gateway, r.order)).or_default() += 1;
        }
    }
    let unanswered = sent
        .iter()
        .filter(|k| !answered.contains(k))
        .copied()
        .collect();
    (unanswered, finals)
}

/// Goal: in the simulator, with clock sync, market data and hedging running, a proxy that
/// dies in the middle of trading costs no order, whether it is a gateway's parent (the
/// gateways fail over and resend what is unanswered) or a grandparent (its children fail
/// over and tell the gateways below to resend). Method: `<2,5>` with 20 participants and
/// `<3,3>` with 27, H = 1, a quiet network, 2K orders/s each; the second layer-1 proxy dies
/// 40 ms into a 300 ms window; participants stop trading at its end. Every request sent must
/// have an answer, and none two final states.
#[test]
fn a_dead_proxy_costs_no_order() {
    for (participants, depth, fanout) in [(20, 2, 5), (27, 3, 3)] {
        let seed = seed_from_env(68);
        let mut c = small(InboundConfig::tree(participants, depth, fanout), seed);
        c.model = quiet();
        c.plan.hedge = 1;
        c.market_data = true;
        c.duration_ns = 300 * MS;
        let mut inbound = trading_until_the_end(c, seed);
        let victim = inbound.plan.layer(1).start + 1;
        let (start, _) = inbound.window();
        inbound.sim.kill(proto::NodeId(victim), start + 40 * MS);
        inbound.run();
        let shape = format!("<{depth},{fanout}>");
        assert!(
            inbound.sim.stats().parents_changed >= fanout as u64,
            "{shape}: the dead proxy's children fail over ({})",
            rerun(seed)
        );
        let log = inbound.log.borrow();
        let sent = sent_requests(&log);
        assert!(sent.len() > 5_000, "{shape}: {}", sent.len());
        let (unanswered, finals) = unanswered_and_finals(&log, &sent);
        assert!(
            unanswered.is_empty(),
            "{shape}: {} of {} requests got no answer, first {:?} ({})",
            unanswered.len(),
            sent.len(),
            unanswered.first(),
            rerun(seed)
        );
        assert!(
            finals.values().all(|&n| n == 1),
            "{shape}: no order has two final states ({})",
            rerun(seed)
        );
    }
}

/// Goal: the operator's promise on the order path under faults in any order: no order is
/// lost or executed twice. Swarm testing over fault schedules: per seed, a drawn tree
/// (`<2,5>` with 20 participants or `<3,3>` with 27), H (1 or 2), sequencer (delay or global
/// FIFO), one proxy of any layer killed and another paused, at drawn times and lengths, in a
/// 300 ms window of 2K orders/s per participant with market data on; every other seed also
/// loses 0.1% of all datagrams. Every request must get an answer, and no order two final
/// states. CI runs seeds 1-8; one seed with `SIM_SEED=S
/// cargo test --release -p sim --test inbound random_fault_schedules -- --nocapture`.
///
/// Until session 10 this failed on 38 of seeds 1-100: orders dropped at the engine's socket
/// (`EngineModel`), where a paused proxy's backlog lands on top of the failover resends, were
/// never sent again. Now gateways retry an unanswered order (`NodeConfig::order_retry`,
/// 10 ms, doubling), proxies pass a later attempt only once the earlier copy has left them,
/// the root executes one copy at most, and answers a retry of an order it executed with the
/// responses it sent (lost on the way down): seeds 1-100 pass. (On the way, with every hedged
/// twin costing the engine a whole order, H = 2 at `<3,3>` ran the engine near saturation
/// and the retries tipped it over on seed 4; a twin now costs what reading and dropping it
/// does, `EngineModel::duplicate_cost_ns`.)
#[test]
fn random_fault_schedules_cost_no_order() {
    for seed in sim::seeds_from_env(1..=8) {
        let mut rng = sim::rng::SimRng::derive(seed, sim::rng::Purpose::User, 0x0DE5);
        let mut draw = |lo: u64, hi: u64| lo + rng.below(hi - lo);
        let (participants, depth, fanout) = if draw(0, 2) == 0 {
            (20, 2, 5)
        } else {
            (27, 3, 3)
        };
        let mut c = small(InboundConfig::tree(participants, depth, fanout), seed);
        c.model = quiet();
        // Every other run loses 0.1% of all datagrams, orders and responses among them (its
        // own draw, so the schedules stay those of the seeds without loss).
        let loss = [0.0, 1e-3]
            [sim::rng::SimRng::derive(seed, sim::rng::Purpose::User, 0x1055).below(2) as usize];
        c.model.loss = loss;
        c.plan.hedge = draw(1, 3) as u32;
        c.market_data = true;
        c.duration_ns = 300 * MS;
        // A kill late in the window fails over `parent_timeout` (100 ms) later and resends
        // what is unanswered then: the drain leaves room for it.
        c.drain_ns = 300 * MS;
        if draw(0, 2) == 1 {
            c.node.sequencer.kind = SequencerKind::GlobalFifo;
        }
        let mut inbound = trading_until_the_end(c, seed);
        let proxies: Vec<u32> = (1..depth)
            .flat_map(|layer| inbound.plan.layer(layer))
            .collect();
        let victim = proxies[draw(0, proxies.len() as u64) as usize];
        let paused = proxies[draw(0, proxies.len() as u64) as usize];
        let (start, _) = inbound.window();
        let kill_at = start + draw(20, 200) * MS;
        let pause_from = start + draw(20, 250) * MS;
        let pause_until = pause_from + draw(5, 150) * MS;
        inbound.sim.kill(proto::NodeId(victim), kill_at);
        if paused != victim {
            inbound
                .sim
                .pause(proto::NodeId(paused), pause_from, pause_until);
        }
        inbound.run();
        let schedule = format!(
            "SIM_SEED={seed}: <{depth},{fanout}>, kill {victim} at +{} ms, pause {paused} +{}..{} ms, loss {loss}",
            (kill_at - start) / MS,
            (pause_from - start) / MS,
            (pause_until - start) / MS
        );
        let log = inbound.log.borrow();
        let sent = sent_requests(&log);
        let (unanswered, finals) = unanswered_and_finals(&log, &sent);
        // Where the first unanswered ones went: every node that saw them, and the drops.
        for &(g, id) in unanswered.iter().take(3) {
            let copies = log
                .sent
                .iter()
                .filter(|o| o.gateway == g && o.client_order_id == id)
                .count();
            let p = log
                .sent
                .iter()
                .find(|o| o.gateway == g)
                .map_or(u32::MAX, |o| o.participant);
            let hops: Vec<u32> = log
                .hops
                .iter()
                .filter(|h| h.1 == p && h.2 == id)
                .map(|h| h.0)
                .collect();
            let sequenced = log
                .sequenced
                .iter()
                .any(|s| s.participant == p && s.client_order_id == id);
            println!(
                "unanswered: gateway {g} order {id}: sent {copies}x, reached {hops:?}, sequenced {sequenced}"
            );
        }
        let (mut retried, mut resent, mut delivered, mut lost) = (0, 0, 0, 0);
        for g in inbound.plan.gateways() {
            let gateway = inbound
                .sim
                .node::<sim::inbound::Recorded<proto::Gateway>>(proto::NodeId(g))
                .expect("a gateway");
            retried += gateway.inner.counters().orders_retried;
            resent += gateway.inner.counters().orders_resent;
            delivered += gateway.inner.counters().responses;
            lost += gateway.inner.counters().responses_lost;
        }
        // Every response the root sent reached its gateway (one gateway per participant
        // here), the later ones no retry asks for among them.
        assert_eq!(inbound.plan.gateways().len(), participants as usize);
        assert_eq!(lost, 0, "responses skipped ({schedule})");
        assert_eq!(
            delivered,
            inbound.root().counters().responses,
            "responses delivered, against sent ({schedule})"
        );
        assert!(
            unanswered.is_empty(),
            "{} of {} requests got no answer, first {:?}; orders dropped at the engine's socket {} ({schedule})",
            unanswered.len(),
            sent.len(),
            unanswered.first(),
            log.engine_drops,
        );
        assert!(
            finals.values().all(|&n| n == 1),
            "an order has two final states ({schedule})"
        );
        println!(
            "{schedule}: {} requests, {} parent changes, {retried} retries, {resent} resent, {} responses replayed, {} refilled",
            sent.len(),
            inbound.sim.stats().parents_changed,
            inbound.root().responses_replayed(),
            inbound.root().responses_refilled()
        );
    }
}

/// Goal: a run that could have been stopped and was not is the whole run, byte for byte; one
/// whose stop flag is already set runs nothing.
#[test]
fn a_stoppable_run_not_stopped_is_the_whole_run() {
    use std::sync::atomic::AtomicBool;

    let seed = seed_from_env(71);
    let config = small(InboundConfig::tree(10, 2, 5), seed);
    let whole = Inbound::new(config.clone()).unwrap().run();
    let stoppable = Inbound::new(config.clone())
        .unwrap()
        .run_stoppable(&AtomicBool::new(false))
        .expect("never stopped");
    assert!(whole.metrics.sent > 0, "{}", rerun(seed));
    assert_eq!(
        serde_json::to_string(&whole).unwrap(),
        serde_json::to_string(&stoppable).unwrap(),
        "{}",
        rerun(seed)
    );
    let mut stopped = Inbound::new(config).unwrap();
    assert!(stopped.run_stoppable(&AtomicBool::new(true)).is_none());
    assert_eq!(stopped.sim.now(), 0, "nothing ran");
}

/// Goal: with 2% of every datagram lost at random (market data, orders, responses, probes),
/// every order a gateway sends in the window still reaches the engine, once: retries and
/// the root's dedupe cover the loss. Method: 12 participants at 300 orders/s under `<2,4>`,
/// 0.5 s, quiet links otherwise.
#[test]
fn random_loss_loses_no_order() {
    let seed = seed_from_env(71);
    let mut c = small(InboundConfig::tree(12, 2, 4), seed);
    c.duration_ns = 500 * MS;
    c.drain_ns = 500 * MS;
    c.workload.rate_per_s = 300.0;
    c.model = quiet();
    c.model.loss = 0.02;
    let r = Inbound::new(c).unwrap().run();
    let m = &r.metrics;
    assert!(
        m.sent > 1_500,
        "the workload ran: {} ({})",
        m.sent,
        rerun(seed)
    );
    assert!(
        r.loss.network_other > 0,
        "the network lost datagrams ({})",
        rerun(seed)
    );
    assert_eq!(m.lost, 0, "{:?} ({})", r.loss, rerun(seed));
    assert_eq!(m.duplicates, 0, "{}", rerun(seed));
}
