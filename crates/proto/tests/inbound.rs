//! The inbound path end to end in the in-memory harness: gateways running the paper's
//! workload send orders up through proxies (queues, pacing) to the root's sequencer and
//! engine; responses come back to the owning gateways.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::Harness;
use proto::plan::{PlanConfig, Shape};
use proto::strategy::{PaperWorkload, WorkloadConfig};
use proto::{Delivery, Event, NodeConfig, NodeId, Sequenced};

const MS: u64 = 1_000_000;

fn workload(rate: f64, overlap: (u32, u32), resting_max: usize) -> WorkloadConfig {
    WorkloadConfig {
        rate_per_s: rate,
        overlap,
        resting_max,
        burst_factor: 1.0,
        ..WorkloadConfig::default()
    }
}

/// `<2,5>` with H = 1 and 20 participants: the tree most order-path tests trade on.
fn hedged_2x5() -> PlanConfig {
    PlanConfig {
        shape: Shape::Explicit {
            depth: 2,
            fanout: 5,
        },
        hedge: 1,
        ..PlanConfig::new(20)
    }
}

fn harness(plan: &PlanConfig, config: NodeConfig, w: WorkloadConfig) -> Harness {
    let mut h = Harness::with_delivery(plan, config, |spec| {
        let strategy = PaperWorkload::new(w.clone(), 42, spec.participant.unwrap()).unwrap();
        Delivery::Strategy(Box::new(strategy))
    });
    h.link = Box::new(|a, b, _| Some(link_ns(a, b)));
    h.start();
    open(&mut h);
    h
}

/// Runs `h` until every gateway has sent an order since the last it refused: a gateway
/// refuses orders until its clock has synced (after its parent proxy's has converged, a
/// window of probes: ~130 ms a proxy layer here), so the tests' timelines start from there.
fn open(h: &mut Harness) {
    let gateways = h.gateways().len();
    let mut sent_since_refused: BTreeMap<NodeId, bool> = BTreeMap::new();
    let mut seen = 0;
    for _ in 0..2_000 {
        for (node, _, event) in &h.events[seen..] {
            match event {
                Event::OrderRefused { .. } => {
                    sent_since_refused.insert(*node, false);
                }
                Event::OrderSent { .. } => {
                    sent_since_refused.insert(*node, true);
                }
                _ => {}
            }
        }
        seen = h.events.len();
        if sent_since_refused.len() == gateways && sent_since_refused.values().all(|&s| s) {
            return;
        }
        h.run_until(h.now_ns + MS);
    }
    panic!("the gateways never opened: {sent_since_refused:?}");
}

/// The harness's one-way delay between two nodes: 20-42 µs, fixed per pair.
fn link_ns(a: NodeId, b: NodeId) -> u64 {
    20_000 + ((a.0 * 31 + b.0 * 17) % 23) as u64 * 1_000
}

/// [`link_ns`], with order responses (root to gateway) `response_delay_ns` slower.
fn link_with_slow_responses_ns(a: NodeId, b: NodeId, bytes: &[u8], response_delay_ns: u64) -> u64 {
    match wire::classify(bytes) {
        wire::Kind::Response => link_ns(a, b) + response_delay_ns,
        _ => link_ns(a, b),
    }
}

/// From now on orders are cut off on their first hop (everything else still flows): what
/// was sent before reaches the engine and is answered shortly after.
fn cut_orders(h: &mut Harness, response_delay_ns: u64) {
    h.link = Box::new(move |a, b, bytes| {
        (wire::classify(bytes) != wire::Kind::Hop)
            .then(|| link_with_slow_responses_ns(a, b, bytes, response_delay_ns))
    });
}

/// Every order in `sent` reached the engine, and none reached it twice.
fn assert_sequenced_once(h: &Harness, sent: &BTreeSet<(u32, u64)>) {
    let mut seen: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    for s in sequenced(h) {
        *seen.entry((s.participant, s.client_order_id)).or_default() += 1;
    }
    let lost: Vec<_> = sent.iter().filter(|k| !seen.contains_key(k)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} orders never reached the engine, first {:?}",
        lost.len(),
        sent.len(),
        lost.first()
    );
    let twice = seen.values().filter(|&&n| n > 1).count();
    assert_eq!(twice, 0, "orders that reached the engine twice");
}

fn sequenced(h: &Harness) -> Vec<Sequenced> {
    h.events
        .iter()
        .filter_map(|(_, _, e)| {
            if let Event::Sequenced(s) = e {
                Some(*s)
            } else {
                None
            }
        })
        .collect()
}

/// Goal: with pacing and no loss, every order a gateway sends reaches the engine exactly
/// once, and every request gets exactly one final state back at its gateway (or, for an
/// enter, is still resting in the engine at the end).
#[test]
fn every_order_reaches_the_engine_once_and_gets_one_final_state() {
    let plan = PlanConfig {
        shape: Shape::Explicit {
            depth: 2,
            fanout: 5,
        },
        ..PlanConfig::new(20)
    };
    let mut h = harness(&plan, NodeConfig::default(), workload(2_000.0, (1, 1), 16));
    let settle = h.now_ns + 200 * MS;
    h.run_until(settle);
    // Stop the flow at `settle`: from then on orders are cut off on their first hop, so
    // everything sent before has reached the engine and been answered 20 ms later.
    cut_orders(&mut h, 0);
    h.run_until(settle + 20 * MS);
    // Orders sent in the last 5 ms may still have been climbing when the cut came.
    let sent = sent_until(&h, settle - 5 * MS);
    assert!(
        sent.len() > 5_000,
        "the workload ran: {} orders",
        sent.len()
    );
    let mut seen: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    for s in sequenced(&h) {
        *seen.entry((s.participant, s.client_order_id)).or_default() += 1;
    }
    for key in &sent {
        assert_eq!(
            seen.get(key),
            Some(&1),
            "order {key:?} reached the engine exactly once"
        );
    }
    assert!(
        seen.values().all(|&n| n == 1),
        "nothing reached the engine twice"
    );

    // Final states, per gateway, for requests sent before `settle`.
    let mut finals: BTreeMap<(NodeId, u64), u32> = BTreeMap::new();
    let mut accepted: BTreeSet<(NodeId, u64)> = BTreeSet::new();
    for (node, _, e) in &h.events {
        if let Event::OrderResponse {
            client_order_id,
            order,
            msg_type,
            leaves_shares,
        } = *e
        {
            match msg_type {
                b'A' => {
                    accepted.insert((*node, order));
                }
                b'J' => *finals.entry((*node, client_order_id)).or_default() += 1,
                b'E' if leaves_shares == 0 => *finals.entry((*node, order)).or_default() += 1,
                b'C' => {
                    *finals.entry((*node, order)).or_default() += 1;
                    if client_order_id != order {
                        // The cancel request itself is answered by the same message.
                        *finals.entry((*node, client_order_id)).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
    }
    assert!(
        finals.values().all(|&n| n == 1),
        "no request has two final states"
    );
    let resting = accepted.iter().filter(|k| !finals.contains_key(k)).count();
    assert_eq!(
        resting,
        h.root.resting_orders(),
        "accepted without a final state = resting in the book"
    );
    let fills = sequenced(&h).iter().filter(|s| s.filled > 0).count();
    assert!(fills > 100, "full overlap makes orders trade: {fills}");
}

/// The orders gateways sent up to `until_ns` (true time), by (participant, client order id).
fn sent_until(h: &Harness, until_ns: u64) -> BTreeSet<(u32, u64)> {
    sent_between(h, 0, until_ns)
}

/// The orders gateways sent from `from_ns` to `until_ns` (true time).
fn sent_between(h: &Harness, from_ns: u64, until_ns: u64) -> BTreeSet<(u32, u64)> {
    let mut sent = BTreeSet::new();
    for (node, at, e) in &h.events {
        if let Event::OrderSent {
            client_order_id, ..
        } = e
            && (from_ns..=until_ns).contains(at)
        {
            let participant = h.plan.node(*node).unwrap().participant.unwrap();
            sent.insert((participant, *client_order_id));
        }
    }
    sent
}

/// Goal: a dead proxy loses no order. The orders its gateways sent it before they noticed
/// (`parent_timeout`), in flight or waiting in its queue, go again to the sibling they fail
/// over to, and the engine sees every order exactly once (the root drops the copies of any
/// it already had). Method: `<2,5>` with H = 1 and 20 gateways trading 2K orders/s each;
/// the second proxy dies at 200 ms; from 500 ms orders are cut off on their first hop, and
/// 30 ms later every order sent by 495 ms must have been sequenced once. Twice: as is, and
/// with responses 150 ms slow and a root that remembers only the last 2,048 order keys by
/// count (50 ms of this workload), so that orders which did reach the engine before the
/// death are still unanswered, and resent, at the failover: the root must drop those copies
/// by remembering every key of the last four `parent_timeout`s. Both without the gateways'
/// retries (`order_retry` zero), so the failover's resend alone must do it; then once more
/// as deployed: 10 ms after the parent fell silent, new orders and retries go through its
/// sibling (`order_retry`), and orders generated 30-90 ms after the death wait under 1 ms
/// (85 ms without retries, for the failover).
#[test]
fn a_dead_proxy_loses_no_order() {
    let no_retries = NodeConfig {
        order_retry: std::time::Duration::ZERO,
        ..NodeConfig::default()
    };
    let waited = a_dead_proxy_loses_no_order_with(no_retries.clone(), 0, 50);
    println!("without retries, the longest wait: {} ms", waited / MS);
    assert!(
        waited > 50 * MS,
        "orders wait for the failover: {waited} ns"
    );
    let forgetful = NodeConfig {
        hedge_dedupe_max: 2_048,
        ..no_retries
    };
    a_dead_proxy_loses_no_order_with(forgetful, 150 * MS, 50);
    let waited = a_dead_proxy_loses_no_order_with(NodeConfig::default(), 0, 0);
    println!("with retries, the longest wait: {} ms", waited / MS);
    assert!(
        waited < 5 * MS,
        "orders go round the dead parent: {waited} ns"
    );
}

/// Returns the longest an order the dead proxy's gateways generated 30-90 ms after its
/// death took to reach the engine, ns.
fn a_dead_proxy_loses_no_order_with(
    config: NodeConfig,
    response_delay_ns: u64,
    resent_min: u32,
) -> u64 {
    let plan = hedged_2x5();
    let mut h = harness(&plan, config, workload(2_000.0, (1, 1), 16));
    h.link = Box::new(move |a, b, bytes| {
        Some(link_with_slow_responses_ns(a, b, bytes, response_delay_ns))
    });
    let start = h.now_ns;
    h.run_until(start + 200 * MS);
    let victim = NodeId(h.plan.layer(1).start + 1);
    h.dead[victim.0 as usize] = true;
    let cut = start + 500 * MS;
    h.run_until(cut);
    cut_orders(&mut h, response_delay_ns);
    h.run_until(cut + 30 * MS);

    let orphans: BTreeSet<NodeId> = h
        .gateways()
        .into_iter()
        .filter(|&g| h.plan.home_parent(g) == Some(victim))
        .collect();
    assert_eq!(orphans.len(), 5);
    let resent: BTreeMap<NodeId, u32> = h
        .events
        .iter()
        .filter_map(|(node, _, e)| match e {
            Event::ParentChanged { resent, .. } => Some((*node, *resent)),
            _ => None,
        })
        .collect();
    assert_eq!(
        resent.keys().copied().collect::<BTreeSet<_>>(),
        orphans,
        "the dead proxy's children fail over"
    );
    for (gateway, &n) in &resent {
        // Without retries: about 2K orders/s over the 100 ms before the failover, some
        // already answered.
        assert!(
            n >= resent_min,
            "gateway {} resent only {n} orders",
            gateway.0
        );
    }

    let sent = sent_until(&h, cut - 5 * MS);
    assert!(sent.len() > 5_000, "the workload ran: {}", sent.len());
    assert_sequenced_once(&h, &sent);
    let orphaned: BTreeSet<u32> = orphans
        .iter()
        .map(|&g| h.plan.node(g).unwrap().participant.unwrap())
        .collect();
    let death = start + 200 * MS;
    sequenced(&h)
        .iter()
        .filter(|s| orphaned.contains(&s.participant))
        .filter(|s| (death + 30 * MS..death + 90 * MS).contains(&s.generation.as_nanos()))
        .map(|s| s.arrived.as_nanos().saturating_sub(s.generation.as_nanos()))
        .max()
        .expect("the orphans traded")
}

/// Goal: an order that dies where no failover sees it (here: every order reaching the root
/// for 30 ms is dropped, as an overflowing engine socket drops them) is sent again by its
/// gateway until it gets through, and the engine sees it exactly once. Method: `<2,5>`,
/// H = 1, 20 gateways trading 2K orders/s each; the root hears no order from 200 to 230 ms;
/// from 400 ms orders are cut off, and 30 ms later every order sent by 395 ms must have been
/// sequenced once. Without retries (`order_retry` zero, the paper's prototype) the same run
/// loses the ~1,200 orders of the window: the check can fail.
#[test]
fn an_order_lost_beyond_any_failover_is_sent_again() {
    let lost_with = |order_retry_ms: u64| {
        let plan = hedged_2x5();
        let config = NodeConfig {
            order_retry: std::time::Duration::from_millis(order_retry_ms),
            ..NodeConfig::default()
        };
        let mut h = harness(&plan, config, workload(2_000.0, (1, 1), 16));
        let start = h.now_ns;
        h.run_until(start + 200 * MS);
        h.link = Box::new(|a, b, bytes| {
            (b.0 != 0 || wire::classify(bytes) != wire::Kind::Hop).then(|| link_ns(a, b))
        });
        h.run_until(start + 230 * MS);
        h.link = Box::new(|a, b, _| Some(link_ns(a, b)));
        let cut = start + 400 * MS;
        h.run_until(cut);
        cut_orders(&mut h, 0);
        h.run_until(cut + 30 * MS);
        let sent = sent_until(&h, cut - 5 * MS);
        assert!(sent.len() > 10_000, "the workload ran: {}", sent.len());
        let mut seen: BTreeMap<(u32, u64), u32> = BTreeMap::new();
        for s in sequenced(&h) {
            *seen.entry((s.participant, s.client_order_id)).or_default() += 1;
        }
        assert!(
            seen.values().all(|&n| n == 1),
            "nothing reached the engine twice"
        );
        sent.iter().filter(|k| !seen.contains_key(k)).count()
    };
    assert_eq!(lost_with(10), 0, "with retries every order gets through");
    let lost = lost_with(0);
    assert!(
        lost > 1_000,
        "without retries the window's orders are lost: {lost}"
    );
}

/// Goal: answers that are slow but come (a backlog, a waiting merge) set the gateways' retry
/// timeout (RFC 6298 over answer times), so they do not feed the slow path copies of orders
/// that are merely waiting. Method: `<2,5>`, H = 1, 20 gateways trading 2K orders/s; every
/// response takes 40 ms more. Orders sent before the first answers came are retried at
/// 10 ms; from 200 to 400 ms no copy reaches the root (a fixed 10 ms timeout would send
/// every order twice or more: ~8,000 copies).
#[test]
fn slow_answers_stretch_the_retry_timeout() {
    let plan = hedged_2x5();
    let mut h = harness(&plan, NodeConfig::default(), workload(2_000.0, (1, 1), 16));
    h.link = Box::new(|a, b, bytes| Some(link_with_slow_responses_ns(a, b, bytes, 40 * MS)));
    let start = h.now_ns;
    h.run_until(start + 200 * MS);
    let copies = |h: &Harness| h.root.counters().dropped(proto::DropReason::Duplicate);
    let early = copies(&h);
    assert!(
        early > 100,
        "before the first answers, orders are retried: {early}"
    );
    h.run_until(start + 400 * MS);
    assert_eq!(
        copies(&h) - early,
        0,
        "once answers are known to take 40 ms"
    );
    let sent = sent_between(&h, start + 200 * MS, start + 350 * MS);
    assert!(sent.len() > 5_000, "the workload ran: {}", sent.len());
}

/// Goal: an order executed whose answer was lost on the way down gets its answer, by either
/// way back: its gateway sees the gap in its participant's response numbers when the next
/// response comes and asks the root for the missing ones ([`proto::responses`]), and its
/// retry makes the root send its answers again. Method: `<2,5>`, H = 1, 20 gateways trading
/// 2K orders/s; every response is lost from 200 to 230 ms; from 400 ms orders are cut off,
/// and 30 ms later every order sent by 395 ms must have an answer at its gateway, with
/// retries and without.
#[test]
fn a_lost_answer_is_sent_again() {
    let run = |order_retry_ms: u64| {
        let config = NodeConfig {
            order_retry: std::time::Duration::from_millis(order_retry_ms),
            ..NodeConfig::default()
        };
        let (mut h, cut) = responses_lost_for_30_ms(config);
        cut_orders(&mut h, 0);
        h.run_until(cut + 30 * MS);
        let sent = sent_until(&h, cut - 5 * MS);
        let answered = answered(&h);
        assert_sequenced_once(&h, &sent);
        (
            sent.iter().filter(|k| !answered.contains(k)).count(),
            h.root.responses_replayed(),
            h.root.responses_refilled(),
        )
    };
    let (unanswered, replayed, refilled) = run(10);
    assert_eq!(unanswered, 0, "with retries every order gets its answer");
    assert!(
        replayed + refilled > 1_000,
        "the window's answers went again: {replayed} replayed, {refilled} refilled"
    );
    let (unanswered, replayed, refilled) = run(0);
    assert_eq!(unanswered, 0, "without retries too, through gap requests");
    assert_eq!(replayed, 0);
    assert!(refilled > 1_000, "asked for again: {refilled}");
}

/// `<2,5>`, H = 1, 20 gateways trading 2K orders/s under `config`; every response is lost
/// from 200 to 230 ms. Runs to 400 ms and returns the harness and that time.
fn responses_lost_for_30_ms(config: NodeConfig) -> (Harness, u64) {
    let plan = hedged_2x5();
    let mut h = harness(&plan, config, workload(2_000.0, (1, 1), 16));
    let start = h.now_ns;
    h.run_until(start + 200 * MS);
    h.link = Box::new(|a, b, bytes| {
        (wire::classify(bytes) != wire::Kind::Response).then(|| link_ns(a, b))
    });
    h.run_until(start + 230 * MS);
    h.link = Box::new(|a, b, _| Some(link_ns(a, b)));
    let at = start + 400 * MS;
    h.run_until(at);
    (h, at)
}

/// The orders with at least one response at their gateway, by (participant, client order id).
fn answered(h: &Harness) -> BTreeSet<(u32, u64)> {
    let mut answered = BTreeSet::new();
    for (node, _, e) in &h.events {
        if let Event::OrderResponse {
            client_order_id, ..
        } = *e
        {
            let participant = h.plan.node(*node).unwrap().participant.unwrap();
            answered.insert((participant, client_order_id));
        }
    }
    answered
}

/// Goal: every response the root sends reaches its gateway, the later ones no retry asks for
/// (fills of resting orders, cancels) and the last ones before a quiet spell too: a gap in a
/// participant's response numbers is asked for again, and the root's status after the quiet
/// spell reveals a lost last response. Method: `<2,5>`, H = 1, 20 gateways trading 2K
/// orders/s, no order retries; every response is lost from 200 to 230 ms; orders are cut
/// off at 400 ms and the responses of the next 5 ms (to the orders still on their way) are
/// lost too, with nothing after them.
/// 60 ms later every gateway must have had every response the root sent its participant,
/// none skipped. Without the root's statuses the last ones stay lost.
#[test]
fn every_response_reaches_its_gateway() {
    let run = |status_after_ms: u64| {
        let config = NodeConfig {
            order_retry: std::time::Duration::ZERO,
            response_status_after: std::time::Duration::from_millis(status_after_ms),
            ..NodeConfig::default()
        };
        let (mut h, cut) = responses_lost_for_30_ms(config);
        // Orders cut off, and the responses to those still on their way lost.
        h.link = Box::new(|a, b, bytes| {
            (!matches!(
                wire::classify(bytes),
                wire::Kind::Response | wire::Kind::Hop
            ))
            .then(|| link_ns(a, b))
        });
        h.run_until(cut + 5 * MS);
        cut_orders(&mut h, 0);
        h.run_until(cut + 60 * MS);
        let delivered = h
            .events
            .iter()
            .filter(|(_, _, e)| matches!(e, Event::OrderResponse { .. }))
            .count() as u64;
        let skipped = h
            .events
            .iter()
            .filter(|(_, _, e)| matches!(e, Event::ResponsesSkipped { .. }))
            .count();
        assert!(delivered > 10_000, "the workload ran: {delivered}");
        println!(
            "statuses after {status_after_ms} ms: {} responses sent, {delivered} delivered, \
             {} refilled, {} statuses",
            h.root.counters().responses,
            h.root.responses_refilled(),
            h.root.response_statuses(),
        );
        (
            h.root.counters().responses - delivered,
            skipped,
            h.root.responses_refilled(),
            h.root.response_statuses(),
        )
    };
    let (missing, skipped, refilled, statuses) = run(5);
    assert_eq!(missing, 0, "every response delivered");
    assert_eq!(skipped, 0);
    assert!(refilled > 1_000, "the lost ones went again: {refilled}");
    assert!(statuses > 0);
    let (missing, _, _, statuses) = run(0);
    assert_eq!(statuses, 0);
    assert!(
        missing > 0,
        "without statuses the last responses before the quiet spell stay lost"
    );
}

/// Goal: with the global-FIFO sequencer, the orders of gateways that failed over to a
/// sibling proxy are merged there like its own (they are its standby children), so once the
/// failover is over the engine again sees every order in generation order. Method: `<2,5>`,
/// H = 1, FIFO queues, 20 gateways trading 2K orders/s each; the second proxy dies at 200 ms.
/// Every order the engine sequences from 100 ms after the last failover on (the resent ones,
/// generated in the past, come before) must be in generation order, the moved gateways'
/// among them.
#[test]
fn a_moved_gateways_orders_are_merged_in_generation_order() {
    let plan = hedged_2x5();
    let mut config = NodeConfig::default();
    config.sequencer.kind = proto::sequencer::SequencerKind::GlobalFifo;
    config.discipline = proto::order_queue::Discipline::Fifo;
    let mut h = harness(&plan, config, workload(2_000.0, (1, 1), 16));
    let start = h.now_ns;
    h.run_until(start + 200 * MS);
    let victim = NodeId(h.plan.layer(1).start + 1);
    h.dead[victim.0 as usize] = true;
    h.run_until(start + 700 * MS);

    let moved: BTreeSet<u32> = h
        .events
        .iter()
        .filter(|(_, _, e)| matches!(e, Event::ParentChanged { .. }))
        .map(|(node, _, _)| h.plan.node(*node).unwrap().participant.unwrap())
        .collect();
    assert_eq!(moved.len(), 5, "the dead proxy's children fail over");
    let failover = h
        .events
        .iter()
        .filter(|(_, _, e)| matches!(e, Event::ParentChanged { .. }))
        .map(|(_, at, _)| *at)
        .max()
        .unwrap();
    let after: Vec<Sequenced> = h
        .events
        .iter()
        .filter(|(_, at, _)| *at >= failover + 100 * MS)
        .filter_map(|(_, _, e)| match e {
            Event::Sequenced(s) => Some(*s),
            _ => None,
        })
        .collect();
    let from_moved = after
        .iter()
        .filter(|s| moved.contains(&s.participant))
        .count();
    assert!(
        from_moved > 200,
        "the moved gateways trade on: {from_moved} orders"
    );
    let inversions = after
        .windows(2)
        .filter(|w| w[0].generation > w[1].generation)
        .count();
    assert_eq!(
        inversions,
        0,
        "{inversions} of {} orders out of generation order",
        after.len()
    );
}

/// Goal: a dead layer-1 proxy of a three-layer tree loses none of its subtree's orders: its
/// layer-2 children fail over to its next sibling (they still get market data through
/// hedging) and tell their gateways to send again what is unanswered (the orders that died in
/// the dead proxy), and every order reaches the engine exactly once. Method: `<3,3>` with
/// H = 1, 27 gateways trading 1K orders/s each; the second layer-1 proxy dies at 200 ms;
/// orders are cut off at 600 ms. Twice: with the default dedupe memory, and with room for
/// 2,048 order keys by count (the root must still remember every key of the last four
/// `parent_timeout`s). The subtree's orders generated 30-90 ms after the death reach the
/// engine within 5 ms: the orphaned layer-2 proxies send them round their silent parent,
/// through its next sibling (at most 95 µs; without that detour, `order_retry` zero, up to
/// 85 ms, waiting for the failover).
#[test]
fn a_dead_upper_proxys_subtree_keeps_trading() {
    for dedupe in [NodeConfig::default().hedge_dedupe_max, 2_048] {
        let waited = a_dead_upper_proxys_subtree_keeps_trading_with(NodeConfig {
            hedge_dedupe_max: dedupe,
            ..NodeConfig::default()
        });
        assert!(
            waited < 5 * MS,
            "the orphaned proxies send round their dead parent: {waited} ns"
        );
    }
    let waited = a_dead_upper_proxys_subtree_keeps_trading_with(NodeConfig {
        order_retry: std::time::Duration::ZERO,
        ..NodeConfig::default()
    });
    assert!(
        waited > 50 * MS,
        "without the detour they wait for the failover: {waited} ns"
    );
}

fn a_dead_upper_proxys_subtree_keeps_trading_with(config: NodeConfig) -> u64 {
    let plan = PlanConfig {
        shape: Shape::Explicit {
            depth: 3,
            fanout: 3,
        },
        hedge: 1,
        ..PlanConfig::new(27)
    };
    let mut h = harness(&plan, config, workload(1_000.0, (1, 1), 16));
    let start = h.now_ns;
    h.run_until(start + 200 * MS);
    let victim = NodeId(h.plan.layer(1).start + 1);
    h.dead[victim.0 as usize] = true;
    let cut = start + 600 * MS;
    h.run_until(cut);
    cut_orders(&mut h, 0);
    h.run_until(cut + 30 * MS);

    let orphans: BTreeSet<NodeId> = h
        .plan
        .layer(2)
        .map(NodeId)
        .filter(|&p| h.plan.home_parent(p) == Some(victim))
        .collect();
    assert_eq!(orphans.len(), 3);
    let moves: Vec<(NodeId, u64, NodeId)> = h
        .events
        .iter()
        .filter_map(|(node, at, e)| match e {
            Event::ParentChanged { to, .. } => Some((*node, *at, *to)),
            _ => None,
        })
        .collect();
    assert_eq!(
        moves.iter().map(|m| m.0).collect::<BTreeSet<_>>(),
        orphans,
        "the dead proxy's children, and only they, fail over: {moves:?}"
    );
    assert!(moves.iter().all(|m| m.2 == NodeId(victim.0 + 1)));
    let failover = moves.iter().map(|m| m.1).max().unwrap();
    assert!(failover < start + 400 * MS, "failover at {failover}");

    let subtree: BTreeSet<u32> = h
        .gateways()
        .into_iter()
        .filter(|&g| h.plan.home_parent(g).is_some_and(|p| orphans.contains(&p)))
        .map(|g| h.plan.node(g).unwrap().participant.unwrap())
        .collect();
    assert_eq!(subtree.len(), 9);
    let after = sent_between(&h, failover + 10 * MS, cut - 5 * MS);
    let from_subtree = after
        .iter()
        .filter(|(participant, _)| subtree.contains(participant))
        .count();
    assert!(
        from_subtree > 1_000,
        "the subtree trades on after the failover: {from_subtree} orders"
    );
    assert_sequenced_once(&h, &sent_until(&h, cut - 5 * MS));
    let death = start + 200 * MS;
    let waited = sequenced(&h)
        .iter()
        .filter(|s| subtree.contains(&s.participant))
        .filter(|s| (death + 30 * MS..death + 90 * MS).contains(&s.generation.as_nanos()))
        .map(|s| s.arrived.as_nanos().saturating_sub(s.generation.as_nanos()))
        .max()
        .expect("the subtree traded");
    println!("the subtree's orders of 30-90 ms after the death waited at most {waited} ns");
    waited
}

/// Goal: the inbound control traffic of a tree is all wanted: no gateway drops a datagram as
/// unexpected (pacing feedback went to gateways, which do not pace, and was dropped by every
/// one of them). Method: trees of depth 1 (gateways under the root) and 2 trading for 100 ms.
#[test]
fn gateways_get_no_datagram_they_drop_as_unexpected() {
    for depth in [1, 2] {
        let plan = PlanConfig {
            shape: Shape::Explicit { depth, fanout: 5 },
            ..PlanConfig::new(if depth == 1 { 5 } else { 20 })
        };
        let mut h = harness(&plan, NodeConfig::default(), workload(2_000.0, (1, 1), 16));
        h.run_until(h.now_ns + 100 * MS);
        assert!(sequenced(&h).len() > 100, "depth {depth}: the workload ran");
        let unexpected: Vec<_> = h
            .events
            .iter()
            .filter(|(node, _, e)| {
                h.plan.node(*node).unwrap().participant.is_some()
                    && matches!(
                        e,
                        Event::Dropped {
                            reason: proto::DropReason::Unexpected,
                            ..
                        }
                    )
            })
            .collect();
        assert!(
            unexpected.is_empty(),
            "depth {depth}: {} unexpected drops at gateways, first {:?}",
            unexpected.len(),
            unexpected.first()
        );
    }
}

/// Goal: with receiver hedging both gateways of a participant send every order; the engine
/// sees each exactly once, and the second copies are dropped and counted on the way.
#[test]
fn hedge_duplicates_never_reach_the_engine() {
    let plan = PlanConfig {
        receiver_hedging: true,
        ..PlanConfig::new(10)
    };
    let mut h = harness(
        &plan,
        NodeConfig::default(),
        workload(1_000.0, (1, 3), usize::MAX),
    );
    let end = h.now_ns + 100 * MS;
    h.run_until(end);
    let mut sent_per_gateway: BTreeMap<NodeId, u64> = BTreeMap::new();
    for (node, _, e) in &h.events {
        if matches!(e, Event::OrderSent { .. }) {
            *sent_per_gateway.entry(*node).or_default() += 1;
        }
    }
    assert_eq!(
        sent_per_gateway.len(),
        20,
        "both twins of all 10 participants send"
    );
    let seq = sequenced(&h);
    let keys: BTreeSet<(u32, u64)> = seq
        .iter()
        .map(|s| (s.participant, s.client_order_id))
        .collect();
    assert_eq!(keys.len(), seq.len(), "no order reached the engine twice");
    assert!(seq.len() > 500);
    let duplicates = h
        .events
        .iter()
        .filter(|(_, _, e)| {
            matches!(
                e,
                Event::Dropped {
                    reason: proto::DropReason::Duplicate,
                    ..
                }
            )
        })
        .count();
    assert!(
        duplicates >= seq.len() - 20,
        "about one dropped twin copy per order: {duplicates}"
    );
}

/// Goal: the sequencer holds every order at least d_s and, on a quiet network with synced
/// clocks, releases them in generation-time order.
#[test]
fn sequencer_waits_d_s_and_keeps_generation_order() {
    let plan = PlanConfig::new(30);
    let mut h = harness(&plan, NodeConfig::default(), workload(1_000.0, (1, 5), 32));
    let end = h.now_ns + 100 * MS;
    h.run_until(end);
    let seq = sequenced(&h);
    assert!(seq.len() > 2_000);
    let d_s = NodeConfig::default().sequencer.delay.as_nanos() as u64;
    for s in &seq {
        assert!(
            s.sequenced.as_nanos() - s.arrived.as_nanos() >= d_s,
            "{s:?} left before d_s"
        );
    }
    for w in seq.windows(2) {
        assert!(
            w[0].generation <= w[1].generation,
            "generation order: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
}

/// A strategy wrapper that rebuilds the book from the released market data.
struct Rebuild<S> {
    inner: S,
    book: std::sync::Arc<std::sync::Mutex<proto::book::BookBuilder>>,
}

impl<S: proto::Strategy> proto::Strategy for Rebuild<S> {
    fn on_start(&mut self, ctx: &mut proto::Ctx<'_>) {
        self.inner.on_start(ctx);
    }
    fn on_market_data(
        &mut self,
        ctx: &mut proto::Ctx<'_>,
        release: &proto::Release,
        data: &wire::MarketData<'_>,
    ) {
        self.book
            .lock()
            .unwrap()
            .apply_packet(data)
            .expect("the stream never contradicts itself");
        self.inner.on_market_data(ctx, release, data);
    }
    fn on_response(&mut self, ctx: &mut proto::Ctx<'_>, response: &wire::order::Repr) {
        self.inner.on_response(ctx, response);
    }
    fn on_wakeup(&mut self, ctx: &mut proto::Ctx<'_>) {
        self.inner.on_wakeup(ctx);
    }
}

/// A book a gateway's strategy rebuilds from its releases, shared with the test.
type SharedBook = std::sync::Arc<std::sync::Mutex<proto::book::BookBuilder>>;

/// A harness over `<2,4>` whose `participants` trade the paper's workload (1,500 orders/s,
/// seed 9), each gateway's strategy rebuilding its book from what it releases ([`Rebuild`]);
/// with the harness's links, not started. Returns the books by gateway.
fn rebuilding(participants: u32, config: NodeConfig) -> (Harness, Vec<(NodeId, SharedBook)>) {
    use std::sync::{Arc, Mutex};
    let plan = PlanConfig {
        shape: Shape::Explicit {
            depth: 2,
            fanout: 4,
        },
        ..PlanConfig::new(participants)
    };
    let w = workload(1_500.0, (1, 3), 24);
    let books: Arc<Mutex<Vec<(NodeId, SharedBook)>>> = Arc::default();
    let registry = books.clone();
    let mut h = Harness::with_delivery(&plan, config, |spec| {
        let book = Arc::new(Mutex::new(proto::book::BookBuilder::new()));
        registry.lock().unwrap().push((spec.id, book.clone()));
        let inner = PaperWorkload::new(w.clone(), 9, spec.participant.unwrap()).unwrap();
        Delivery::Strategy(Box::new(Rebuild { inner, book }))
    });
    h.link = Box::new(|a, b, _| Some(link_ns(a, b)));
    let books = books.lock().unwrap().clone();
    (h, books)
}

/// Asserts that the root's book (symbol 0) has more than `levels_min` levels and that every
/// one of `books` equals it, level by level.
fn assert_books_are_the_roots(h: &Harness, books: &[(NodeId, SharedBook)], levels_min: usize) {
    let root_book = |side| h.root.depth(lob::SymbolIndex(0), side, 1_000);
    let (bids, asks) = (root_book(lob::Side::Buy), root_book(lob::Side::Sell));
    assert!(
        bids.len() + asks.len() > levels_min,
        "a real book: {} bids, {} asks",
        bids.len(),
        asks.len()
    );
    for (g, book) in books {
        let book = book.lock().unwrap();
        assert_eq!(book.depth(0, wire::Side::Buy, 1_000), bids, "{g:?} bids");
        assert_eq!(book.depth(0, wire::Side::Sell, 1_000), asks, "{g:?} asks");
    }
}

/// Goal: every gateway's book, rebuilt from the market data it released, equals the root's
/// engine book level by level once the flow stops. Method: the paper's workload trades for
/// 150 ms through a tree with hedging; then orders are cut off and the stream drains.
#[test]
fn every_gateways_rebuilt_book_equals_the_roots() {
    let (mut h, books) = rebuilding(12, NodeConfig::default());
    h.start();
    open(&mut h);
    let t = h.now_ns + 150 * MS;
    h.run_until(t);
    cut_orders(&mut h, 0);
    let t = h.now_ns + 30 * MS;
    h.run_until(t);
    assert_eq!(books.len(), 12);
    for (g, book) in &books {
        assert!(book.lock().unwrap().applied > 1_000, "{g:?} saw the flow");
    }
    assert_books_are_the_roots(&h, &books, 10);
}

/// Goal: a participant whose gateway joins the stream late, or is cut off for longer than
/// the root's rewinder reaches, still rebuilds the root's book: it gets a book snapshot
/// first (`proto::snapshot`), and never releases a message its book cannot apply (the
/// rebuild panics on one). Method: as above (without repair rings, a 64-packet rewinder),
/// gateway A hears nothing for the first 150 ms; then gateway B is cut off for 60 ms, far
/// more packets than the rewinder holds; both trade on, and every book must equal the
/// root's once the flow stops.
#[test]
fn a_gateway_that_joins_late_or_skips_gets_the_book_first() {
    use std::sync::{Arc, Mutex};
    let config = NodeConfig {
        repair_bytes: 0,
        rewinder_packets: 64,
        ..NodeConfig::default()
    };
    let (mut h, books) = rebuilding(12, config);
    let (a, b) = (h.gateways()[0], h.gateways()[7]);
    // Nodes that hear nothing and are heard by nobody, and whether orders are cut off.
    let cut: Arc<Mutex<(BTreeSet<NodeId>, bool)>> = Arc::default();
    let state = cut.clone();
    h.link = Box::new(move |x, y, bytes| {
        let (nodes, orders) = &*state.lock().unwrap();
        let lost = nodes.contains(&x)
            || nodes.contains(&y)
            || (*orders && wire::classify(bytes) == wire::Kind::Hop);
        (!lost).then(|| link_ns(x, y))
    });
    cut.lock().unwrap().0.insert(a);
    h.start();
    h.run_until(h.now_ns + 150 * MS);
    {
        let mut cut = cut.lock().unwrap();
        cut.0.remove(&a);
        cut.0.insert(b);
    }
    h.run_until(h.now_ns + 60 * MS);
    cut.lock().unwrap().0.remove(&b);
    h.run_until(h.now_ns + 150 * MS);
    cut.lock().unwrap().1 = true;
    h.run_until(h.now_ns + 30 * MS);

    let applied = |g: NodeId| {
        h.events
            .iter()
            .filter_map(|(node, _, e)| match e {
                Event::SnapshotApplied { orders, .. } if *node == g => Some(*orders),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let skipped = |g: NodeId| {
        h.events
            .iter()
            .any(|(node, _, e)| *node == g && matches!(e, Event::GapSkipped { .. }))
    };
    // How long each waited: from its first request to the snapshot's release.
    for g in [a, b] {
        let at = |wanted: fn(&Event) -> bool| {
            h.events
                .iter()
                .find(|(node, _, e)| *node == g && wanted(e))
                .map(|&(_, t, _)| t)
        };
        let asked = at(|e| matches!(e, Event::SnapshotRequested { .. })).unwrap();
        let done = at(|e| matches!(e, Event::SnapshotApplied { .. })).unwrap();
        println!(
            "{g:?}: snapshot {} µs after its request",
            (done - asked) / 1_000
        );
        assert!(done - asked < 2 * MS, "{g:?} waited {} ns", done - asked);
    }
    let (late, cut_off) = (applied(a), applied(b));
    assert!(
        late.len() == 1 && late[0] > 10,
        "A joined late: one snapshot of a real book, got {late:?}"
    );
    assert!(skipped(b), "B skipped what the rewinder no longer held");
    assert!(!cut_off.is_empty(), "B got a snapshot after its skip");
    let others = h
        .gateways()
        .into_iter()
        .filter(|&g| g != a && g != b)
        .map(applied)
        .filter(|s| !s.is_empty())
        .count();
    assert_eq!(
        others, 0,
        "a gateway that heard the stream from its start needs none"
    );

    assert_books_are_the_roots(&h, &books, 10);
    let (taken, parts) = h.root.snapshots();
    assert!(
        taken >= 2 && parts >= 2,
        "{taken} taken, {parts} parts sent"
    );
}

/// Goal: a gateway started again mid-session (a crash, a deploy) never gives an order the
/// client order id of one its earlier run sent: its participant's orders still resting at the
/// root stay theirs (cancellable by their ids, their fills naming them), and the new ones are
/// told apart. It used to number from 1 again. Method: the paper's workload for 100 ms;
/// gateway A is replaced by a new one (new strategy, same participant) that trades 100 ms
/// more; the ids each run sent are disjoint, the new run's start above the old run's, and
/// the new one's book equals the root's (it joined late: a snapshot first).
#[test]
fn a_restarted_gateway_never_reuses_a_client_order_id() {
    use std::sync::{Arc, Mutex};
    let (mut h, mut books) = rebuilding(8, NodeConfig::default());
    h.start();
    open(&mut h);
    h.run_until(h.now_ns + 100 * MS);
    let a = h.gateways()[2];
    let sent = |h: &Harness, from: usize| -> BTreeSet<u64> {
        h.events[from..]
            .iter()
            .filter_map(|(node, _, e)| match e {
                Event::OrderSent {
                    client_order_id, ..
                } if *node == a => Some(*client_order_id),
                _ => None,
            })
            .collect()
    };
    let before = sent(&h, 0);
    assert!(before.len() > 50, "the first run traded: {}", before.len());
    let restart = h.events.len();
    let participant = h.plan.node(a).unwrap().participant.unwrap();
    let book = Arc::new(Mutex::new(proto::book::BookBuilder::new()));
    let w = workload(1_500.0, (1, 3), 24);
    let inner = PaperWorkload::new(w, 10, participant).unwrap();
    let strategy = Rebuild {
        inner,
        book: book.clone(),
    };
    let delivery = Delivery::Strategy(Box::new(strategy));
    let gateway = proto::Gateway::new(a, h.plan.clone(), NodeConfig::default(), delivery).unwrap();
    books.retain(|(g, _)| *g != a);
    books.push((a, book));
    h.replace(a, Box::new(gateway));
    h.run_until(h.now_ns + 100 * MS);
    let after = sent(&h, restart);
    assert!(after.len() > 50, "the second run traded: {}", after.len());
    let (old_max, new_min) = (before.last().unwrap(), after.first().unwrap());
    assert!(
        new_min > old_max,
        "the second run numbers from {new_min}, above the first run's last, {old_max}"
    );
    cut_orders(&mut h, 0);
    h.run_until(h.now_ns + 30 * MS);
    assert_books_are_the_roots(&h, &books, 5);
}

/// Goal: a root started again without its journal (a new session, `session_of_start`) is
/// followed by the running tree: every proxy and gateway takes the new stream once the old one
/// has been silent for `parent_timeout`, every gateway's book starts over from the new root's
/// (a snapshot first), its participant's responses are numbered anew, and trading goes on.
/// Under the old session the whole tree dropped the new stream as old. Method: the paper's
/// workload for 100 ms; the root dies for 150 ms and a fresh one starts under another
/// session; 200 ms of trading; orders cut off; every book equals the new root's.
#[test]
fn a_root_started_again_without_its_journal_is_followed() {
    let config = NodeConfig::default();
    let (mut h, books) = rebuilding(8, config.clone());
    h.start();
    open(&mut h);
    h.run_until(h.now_ns + 100 * MS);
    let old_sequenced = h.root.counters().sequenced;
    assert!(old_sequenced > 50, "the first root traded: {old_sequenced}");
    h.dead[0] = true;
    h.run_until(h.now_ns + 150 * MS);
    let restart = h.events.len();
    let session = proto::config::session_of_start("JASPER0001", 1_795_000_000_000_000_000);
    let fresh = NodeConfig { session, ..config };
    h.replace_root(proto::Root::new(h.plan.clone(), fresh).unwrap());
    h.run_until(h.now_ns + 200 * MS);
    cut_orders(&mut h, 0);
    h.run_until(h.now_ns + 30 * MS);

    let after = &h.events[restart..];
    let count = |node: NodeId, what: fn(&Event) -> bool| {
        after
            .iter()
            .filter(|(n, _, e)| *n == node && what(e))
            .count()
    };
    for node in (1..h.nodes.len() as u32).map(NodeId) {
        assert_eq!(
            count(node, |e| matches!(e, Event::SessionStarted { .. })),
            1,
            "{node:?} took the new session once"
        );
    }
    for g in h.gateways() {
        assert!(
            count(g, |e| matches!(e, Event::Released(_))) > 50,
            "{g:?} released"
        );
        assert!(
            count(g, |e| matches!(e, Event::OrderResponse { .. })) > 10,
            "{g:?}'s participant traded on"
        );
        assert!(
            count(g, |e| matches!(e, Event::SnapshotApplied { .. })) >= 1,
            "{g:?} started its book over"
        );
    }
    assert!(h.root.counters().sequenced > 50, "the new root trades");
    assert_books_are_the_roots(&h, &books, 5);
}

/// What a [`Grid`] strategy saw, shared with the test.
#[derive(Debug, Default)]
struct GridLog {
    /// Client order ids it sent.
    sent: BTreeSet<u64>,
    /// Ids of its orders answered, each once.
    answered: BTreeSet<u64>,
    /// Answers naming an order it had not asked for (yet).
    unknown: u64,
    /// Orders the gateway gave up on.
    unanswered: u64,
}

/// A strategy that sends one limit order every 2 ms of exchange time from `start_ns` on, the
/// same order at the same grid point at both twins, `lag_ns` late at the twin behind.
struct Grid {
    start_ns: u64,
    lag_ns: u64,
    k: u64,
    orders: u64,
    log: std::sync::Arc<std::sync::Mutex<GridLog>>,
}

impl Grid {
    fn wake(&self, ctx: &mut proto::Ctx<'_>) {
        let at = self.start_ns + self.k * 2 * MS + self.lag_ns;
        ctx.wake_at(wire::ExchangeTime::from_nanos(at));
    }
}

impl proto::Strategy for Grid {
    fn on_open(&mut self, ctx: &mut proto::Ctx<'_>) {
        assert!(
            ctx.now.as_nanos() < self.start_ns,
            "opened after the grid's start"
        );
        self.wake(ctx);
    }
    fn on_wakeup(&mut self, ctx: &mut proto::Ctx<'_>) {
        let price = 990_000 + (self.k % 7) as u32 * 100;
        let stock = wire::Stock::new("JSPR").unwrap();
        let order = proto::OrderRequest::limit(
            wire::Side::Buy,
            1 + (self.k % 3) as u32,
            stock,
            price,
            wire::order::TimeInForce::GoodTillCancel,
        );
        let id = ctx.send(order);
        self.log.lock().unwrap().sent.insert(id);
        self.k += 1;
        if self.k < self.orders {
            self.wake(ctx);
        }
    }
    fn on_response(&mut self, _ctx: &mut proto::Ctx<'_>, response: &wire::order::Repr) {
        let id = response.header().client_order_id;
        let mut log = self.log.lock().unwrap();
        if log.sent.contains(&id) {
            log.answered.insert(id);
        } else {
            log.unknown += 1;
        }
    }
    fn on_unanswered(&mut self, _ctx: &mut proto::Ctx<'_>, _client_order_id: u64) {
        self.log.lock().unwrap().unanswered += 1;
    }
}

/// Goal: with receiver hedging, a twin that runs behind its sibling (by more than an
/// order's round trip) hears each answer as an answer to an order it asked for, right after
/// it asks, and gives none up; it sends none of them up, the root having answered its
/// sibling's copies. Before `proto::twin`, its strategy heard answers to orders it had not
/// asked for, and every order it then sent was dropped at the root as a duplicate and given
/// up on, unanswered. Method: 8 participants whose twins send the same 200 orders on a
/// 2 ms grid of exchange time, the `b` twins 5 ms late.
#[test]
fn a_twin_behind_its_sibling_hears_every_answer_for_its_own_orders() {
    let plan = PlanConfig {
        receiver_hedging: true,
        ..PlanConfig::new(8)
    };
    let orders = 200;
    let start_ns = 1_000_000_000 + 600 * MS;
    let mut logs = Vec::new();
    let mut h = Harness::with_delivery(&plan, NodeConfig::default(), |spec| {
        let log = std::sync::Arc::new(std::sync::Mutex::new(GridLog::default()));
        logs.push((spec.id, spec.twin, log.clone()));
        Delivery::Strategy(Box::new(Grid {
            start_ns,
            lag_ns: if spec.twin { 5 * MS } else { 0 },
            k: 0,
            orders,
            log,
        }))
    });
    h.link = Box::new(|a, b, _| Some(link_ns(a, b)));
    h.start();
    h.run_until(start_ns + orders * 2 * MS + 200 * MS);
    for (id, behind, log) in &logs {
        let log = log.lock().unwrap();
        assert_eq!(log.sent.len() as u64, orders, "{id:?} sent them all");
        assert_eq!(log.answered, log.sent, "{id:?}: every order answered");
        assert_eq!(
            log.unknown, 0,
            "{id:?}: no answer to an order not asked for"
        );
        assert_eq!(log.unanswered, 0, "{id:?}: none given up on");
        let sent_up = h
            .events
            .iter()
            .filter(|(n, _, e)| n == id && matches!(e, Event::OrderSent { .. }))
            .count() as u64;
        if *behind {
            assert_eq!(sent_up, 0, "{id:?}, behind, sent none up");
        } else {
            assert_eq!(sent_up, orders, "{id:?}, ahead, sent every order up");
        }
    }
    let seq = sequenced(&h);
    assert_eq!(seq.len() as u64, 8 * orders, "each order sequenced once");
}
