//! Outbound multicast end to end through the unchanged nodes, in the in-memory harness:
//! exactly-once in-order release, RRPS, hedging around a dead or slow proxy, gap recovery,
//! clock sync with injected offsets and drift, and deadlines from aggregated OWD reports.

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use common::{Clock, Harness};
use proto::plan::PlanConfig;
use proto::{Event, NodeConfig, NodeId};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

fn payload() -> Vec<u8> {
    // A fake 100-byte message; the outbound path never looks inside.
    let mut m = vec![b'Z'; 100];
    m[0] = b'Z';
    m
}

/// A deterministic, symmetric per-pair delay between 20 and 50 µs.
fn pair_delay(a: NodeId, b: NodeId) -> u64 {
    let (x, y) = (a.0.min(b.0) as u64, a.0.max(b.0) as u64);
    20 * US + (x * 7919 + y * 104_729) % 31 * US
}

/// Publishes `packets` packets, one every `gap_ns`, then runs `tail_ns` more.
fn publish(
    h: &mut Harness,
    packets: usize,
    gap_ns: u64,
    tail_ns: u64,
) -> std::ops::RangeInclusive<u64> {
    let first = h.root.next_packet_seq();
    let m = payload();
    for _ in 0..packets {
        h.publish(&[wire::Raw(&m)]);
        let t = h.now_ns + gap_ns;
        h.run_until(t);
    }
    let t = h.now_ns + tail_ns;
    h.run_until(t);
    first..=h.root.next_packet_seq() - 1
}

/// Each gateway's released packet sequence numbers, in release order.
fn releases_by_gateway(h: &Harness) -> BTreeMap<NodeId, Vec<u64>> {
    let mut by = BTreeMap::new();
    for seen in &h.released {
        by.entry(seen.node)
            .or_insert_with(Vec::new)
            .push(seen.release.packet_seq);
    }
    by
}

/// Every gateway released `1..=last` exactly once in order, where `last` is the newest packet
/// any gateway released (the root may have sent one more that is still in flight).
fn assert_exactly_once_in_order(h: &Harness) {
    let by = releases_by_gateway(h);
    let last = h
        .released
        .iter()
        .map(|s| s.release.packet_seq)
        .max()
        .unwrap();
    assert!(
        last + 1 >= h.root.next_packet_seq() - 1,
        "at most the newest packet is in flight"
    );
    assert_eq!(
        by.len(),
        h.gateways().len(),
        "every gateway released something"
    );
    for (gateway, seqs) in by {
        let expected: Vec<u64> = (1..=last).collect();
        assert_eq!(
            seqs, expected,
            "gateway {gateway:?} released every packet once, in order"
        );
    }
}

fn skewed_clocks(h: &mut Harness) {
    let n = h.clocks.len();
    for i in 1..n {
        let sign = if i % 2 == 0 { 1 } else { -1 };
        let offset_ns = sign * (MS as i64 - (i as i64 * 3_301) % 200_000);
        let drift = -(sign as f64) * (50e-6 - (i % 7) as f64 * 3e-6);
        h.clocks[i] = Clock { offset_ns, drift };
    }
}

/// N = 100, H = 1, every clock but the root's skewed (±1 ms, ±50 ppm), symmetric per-pair
/// delays; started and run for `warm_ns` so clock sync settles.
fn synced_skewed_tree(warm_ns: u64) -> Harness {
    let mut h = Harness::new(
        &PlanConfig {
            hedge: 1,
            ..PlanConfig::new(100)
        },
        NodeConfig::default(),
    );
    skewed_clocks(&mut h);
    h.link = Box::new(|a, b, _| Some(pair_delay(a, b)));
    h.start();
    let warm = h.now_ns + warm_ns;
    h.run_until(warm);
    h
}

/// Goal: with hand-set delays and skewed clocks, every gateway releases every packet exactly
/// once, in sequence order, and (once clocks have synced) never before its deadline.
#[test]
fn every_gateway_releases_every_packet_once_in_order_never_early() {
    let mut h = synced_skewed_tree(400 * MS);
    let synced_from = h.root.next_packet_seq();
    publish(&mut h, 300, 100 * US, 10 * MS);
    assert_exactly_once_in_order(&h);
    let mut checked = 0;
    for seen in h
        .released
        .iter()
        .filter(|s| s.release.packet_seq >= synced_from)
    {
        // The root's clock is exchange time, so a deadline is also a true time.
        let deadline = seen.release.deadline.as_nanos();
        assert!(
            !seen.release.late,
            "nothing is late on a quiet network: {seen:?}"
        );
        assert!(
            seen.true_ns + 1_000 >= deadline,
            "released {} ns early: {seen:?}",
            deadline - seen.true_ns
        );
        checked += 1;
    }
    assert!(
        checked >= 100 * 300,
        "every published packet was checked at every gateway"
    );
}

/// Goal: at node level, with H = 0 every node below the root gets exactly one copy of each
/// packet, and RRPS moves a layer-2 node's parent from one packet to the next.
#[test]
fn rrps_one_parent_per_packet_and_rotation() {
    let config = PlanConfig::unhedged(64, 3, 4);
    let mut h = Harness::new(
        &config,
        NodeConfig {
            hold_and_release: false,
            ..NodeConfig::default()
        },
    );
    h.start();
    let packets = publish(&mut h, 20, 50 * US, 5 * MS);
    let mut parents: BTreeMap<(u64, NodeId), Vec<NodeId>> = BTreeMap::new();
    for &(seq, from, to) in &h.deliveries {
        parents.entry((seq, to)).or_default().push(from);
    }
    for seq in packets.clone() {
        for id in 1..h.plan.nodes().len() as u32 {
            let p = &parents[&(seq, NodeId(id))];
            assert_eq!(p.len(), 1, "node {id} packet {seq}: {p:?}");
        }
    }
    for layer in 2..=3 {
        let width = h.plan.layer(layer - 1).len();
        for id in h.plan.layer(layer) {
            let mut distinct: Vec<NodeId> = packets
                .clone()
                .map(|s| parents[&(s, NodeId(id))][0])
                .collect();
            distinct.sort();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                width,
                "node {id} sees every possible parent over 20 packets"
            );
        }
    }
    assert_exactly_once_in_order(&h);
}

/// N = 100 with H = 1 on the pair delays, after 50 ms of clock sync.
fn warm_hedged_n100() -> Harness {
    let mut h = Harness::new(
        &PlanConfig {
            hedge: 1,
            ..PlanConfig::new(100)
        },
        NodeConfig::default(),
    );
    h.link = Box::new(|a, b, _| Some(pair_delay(a, b)));
    h.start();
    // Clock sync converges layer by layer (a proxy gives its children its time once its own
    // clock has a full window, ~130 ms of pairs), and the parent watch needs live replies.
    let warm = h.now_ns + 500 * MS;
    h.run_until(warm);
    h
}

/// Goal: with H = 1, killing a proxy mid-stream loses nothing at any gateway (no gap, no
/// retransmission), its watching sibling raises a failure event, and each of its home
/// children moves to that sibling once `parent_timeout` passes without a probe answered.
#[test]
fn dead_proxy_loses_nothing_with_hedging() {
    let mut h = warm_hedged_n100();
    publish(&mut h, 100, 100 * US, 0);
    let victim = NodeId(h.plan.layer(1).start + 3);
    h.dead[victim.0 as usize] = true;
    // Long enough for `parent_timeout` (100 ms) with market data still flowing.
    publish(&mut h, 1_500, 100 * US, 20 * MS);
    assert_exactly_once_in_order(&h);
    assert!(
        h.released.iter().all(|s| !s.release.recovered),
        "hedging, not recovery, filled in"
    );
    let detected: Vec<_> = h
        .events
        .iter()
        .filter(|(_, _, e)| matches!(e, Event::FailureDetected { node } if *node == victim))
        .collect();
    assert_eq!(
        detected.len(),
        1,
        "exactly one watcher reports the dead proxy once"
    );
    assert_eq!(
        detected[0].0,
        NodeId(victim.0 + 1),
        "the next sibling watches it"
    );
    let orphans: Vec<NodeId> = h
        .gateways()
        .into_iter()
        .filter(|&g| h.plan.home_parent(g) == Some(victim))
        .collect();
    assert_eq!(orphans.len(), 10);
    let mut moved: Vec<(NodeId, NodeId, NodeId)> = h
        .events
        .iter()
        .filter_map(|(node, _, e)| match e {
            Event::ParentChanged { from, to, .. } => Some((*node, *from, *to)),
            _ => None,
        })
        .collect();
    moved.sort();
    let expected: Vec<(NodeId, NodeId, NodeId)> = orphans
        .iter()
        .map(|&g| (g, victim, NodeId(victim.0 + 1)))
        .collect();
    assert_eq!(
        moved, expected,
        "the dead proxy's children, and only they, move once"
    );
}

/// Goal: a proxy that stops for 300 ms (a paused VM) and runs again gets its children back.
/// They fail over to its sibling once `parent_timeout` passes, return to it once it has been
/// heard steadily for another `parent_timeout`, and no gateway misses a packet throughout.
#[test]
fn a_proxy_that_comes_back_gets_its_children_back() {
    let mut h = warm_hedged_n100();
    let victim = NodeId(h.plan.layer(1).start + 3);
    h.dead[victim.0 as usize] = true;
    let stopped = h.now_ns;
    publish(&mut h, 3_000, 100 * US, 0);
    h.dead[victim.0 as usize] = false;
    let back = h.now_ns;
    publish(&mut h, 3_000, 100 * US, 20 * MS);
    assert_exactly_once_in_order(&h);
    let orphans: Vec<NodeId> = h
        .gateways()
        .into_iter()
        .filter(|&g| h.plan.home_parent(g) == Some(victim))
        .collect();
    assert_eq!(orphans.len(), 10);
    let sibling = NodeId(victim.0 + 1);
    for &g in &orphans {
        let moves: Vec<(u64, NodeId, NodeId)> = h
            .events
            .iter()
            .filter_map(|(node, at, e)| match e {
                Event::ParentChanged { from, to, .. } if *node == g => Some((*at, *from, *to)),
                _ => None,
            })
            .collect();
        assert_eq!(moves.len(), 2, "gateway {}: {moves:?}", g.0);
        let (left, there) = (moves[0], moves[1]);
        assert_eq!((left.1, left.2), (victim, sibling), "gateway {}", g.0);
        // `parent_timeout` after it last heard the proxy: its last probe reply came up to
        // `probe_interval_max` (4 ms) before the stop.
        assert!(
            (stopped + 96 * MS..back).contains(&left.0),
            "gateway {} left at {} ms",
            g.0,
            (left.0 - stopped) / MS
        );
        assert_eq!((there.1, there.2), (sibling, victim), "gateway {}", g.0);
        assert!(
            (back + 100 * MS..back + 200 * MS).contains(&there.0),
            "gateway {} came back {} ms after its parent",
            g.0,
            (there.0 - back) / MS
        );
    }
    let moved = h
        .events
        .iter()
        .filter(|(_, _, e)| matches!(e, Event::ParentChanged { .. }))
        .count();
    assert_eq!(moved, 20, "no other gateway moves");
}

/// Goal: a live proxy whose clock has not converged is not taken for dead by its children. It
/// answers their probes `unsynced` (alive, no time to fit); silent, it looked dead whenever
/// RRPS also brought a child none of its market data, which happens for `L - H - 1` packets
/// in every `L` in a layer of `L` proxies: at the warm-up's 1K packets/s, past the 100 ms
/// `parent_timeout` once `L` passes 100, so every gateway of an N = 2000 tree (`<3,13>`) moved
/// twice and back before measuring began. Method: the proxies' probes to the root are lost,
/// so none converges, while the root sends one packet every 40 ms (data or idle) through ten
/// proxies (a gateway's home parent sends it two packets in ten: silent 320 ms at a time).
/// No node may move, and every gateway releases every packet once, in order.
#[test]
fn an_unconverged_proxy_is_not_taken_for_dead() {
    let mut h = Harness::new(
        &PlanConfig {
            hedge: 1,
            ..PlanConfig::new(100)
        },
        NodeConfig {
            // Idle packets at the data's pace, not every 1 ms: the silences of N = 2000's
            // warm-up, scaled down to ten proxies.
            idle_packet_interval: std::time::Duration::from_millis(40),
            ..NodeConfig::default()
        },
    );
    let proxies = h.plan.layer(1);
    assert_eq!(proxies.len(), 10, "<2,10>");
    h.link = Box::new(move |from, to, bytes| {
        let probe = matches!(
            wire::control::Repr::parse(bytes),
            Ok(wire::control::Repr::ClockProbe { .. })
        );
        (!(probe && proxies.contains(&from.0))).then(|| pair_delay(from, to))
    });
    h.start();
    publish(&mut h, 30, 40 * MS, 10 * MS);
    assert_exactly_once_in_order(&h);
    let moves: Vec<_> = h
        .events
        .iter()
        .filter(|(_, _, e)| matches!(e, Event::ParentChanged { .. }))
        .collect();
    assert!(
        moves.is_empty(),
        "{} moves: {:?}",
        moves.len(),
        &moves[..moves.len().min(3)]
    );
}

/// Goal: a proxy that delays everything by 5 ms does not hold anyone back when H = 1: every
/// gateway still gets each packet in time from the hedged sibling.
#[test]
fn slow_proxy_is_hedged_around() {
    let config = NodeConfig {
        hold_and_release: false,
        ..NodeConfig::default()
    };
    let mut h = Harness::new(
        &PlanConfig {
            hedge: 1,
            ..PlanConfig::new(100)
        },
        config,
    );
    let slow = NodeId(h.plan.layer(1).start + 5);
    h.link = Box::new(move |a, b, _| Some(if a == slow { 5 * MS } else { pair_delay(a, b) }));
    h.start();
    let warm = h.now_ns + 50 * MS;
    h.run_until(warm);
    let first = h.root.next_packet_seq();
    publish(&mut h, 200, 100 * US, 20 * MS);
    assert_exactly_once_in_order(&h);
    for seen in h.released.iter().filter(|s| s.release.packet_seq >= first) {
        let owd = seen.true_ns - seen.release.send_time.as_nanos();
        assert!(
            owd < 200 * US,
            "OWD {owd} ns: the slow proxy's copy never wins"
        );
    }
}

/// Copies of retransmitted packets, as (sender, receiver), recorded by a link.
type Repairs = Rc<RefCell<Vec<(NodeId, NodeId)>>>;

/// A link with [`pair_delay`] that loses what `lose(from, to, bytes)` says and records the
/// retransmitted copies.
fn lossy_link(h: &mut Harness, lose: impl Fn(NodeId, NodeId, &[u8]) -> bool + 'static) -> Repairs {
    let repairs = Repairs::default();
    let seen = repairs.clone();
    h.link = Box::new(move |a, b, bytes| {
        if lose(a, b, bytes) {
            return None;
        }
        if wire::parse_market_data(bytes).is_ok_and(|d| d.header.is_retransmission()) {
            seen.borrow_mut().push((a, b));
        }
        Some(pair_delay(a, b))
    });
    repairs
}

/// Whether `bytes` is the first copy of packet `seq` (not a retransmission).
fn is_packet(bytes: &[u8], seq: u64) -> bool {
    first_copy_of(bytes) == Some(seq)
}

/// The packet `bytes` is the first copy of (not a retransmission), if it is one.
fn first_copy_of(bytes: &[u8]) -> Option<u64> {
    wire::parse_market_data(bytes)
        .ok()
        .filter(|d| !d.header.is_retransmission())
        .map(|d| d.header.packet_seq)
}

/// The gateways that released packet `seq` as recovered.
fn recovered(h: &Harness, seq: u64) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = h
        .released
        .iter()
        .filter(|s| s.release.recovered && s.release.packet_seq == seq)
        .inspect(|s| assert!(s.release.late, "a recovered packet is late"))
        .map(|s| s.node)
        .collect();
    nodes.sort();
    nodes
}

/// Warms a harness up, publishes 60 packets 100 µs apart and runs 20 ms more.
fn run_60(h: &mut Harness) {
    h.start();
    let warm = h.now_ns + 30 * MS;
    h.run_until(warm);
    publish(h, 60, 100 * US, 20 * MS);
    assert_exactly_once_in_order(h);
}

/// An N = 100 tree without hedging, and the gateway whose losses the tests arrange.
fn unhedged_n100() -> (Harness, NodeId) {
    let config = PlanConfig {
        hedge: 0,
        ..PlanConfig::new(100)
    };
    let h = Harness::new(&config, NodeConfig::default());
    let victim = NodeId(h.plan.gateways().start + 7);
    (h, victim)
}

/// The gap requests `gateway` sent.
fn gap_requests(h: &Harness, gateway: NodeId) -> usize {
    gap_request_times(h, |n| n == gateway).len()
}

/// When the gateways `of` picks sent gap requests, ns.
fn gap_request_times(h: &Harness, of: impl Fn(NodeId) -> bool) -> Vec<u64> {
    h.events
        .iter()
        .filter(|(n, _, e)| of(*n) && matches!(e, Event::GapRequested { .. }))
        .map(|&(_, t, _)| t)
        .collect()
}

/// Goal: a packet lost on its way to one gateway is recovered after the grace period from
/// the parent proxy's repair ring (not the root), released in order, and counted late and
/// recovered.
#[test]
fn lost_packet_recovered_from_the_parent_proxy() {
    let (mut h, victim) = unhedged_n100();
    let repairs = lossy_link(&mut h, move |_, b, bytes| {
        b == victim && is_packet(bytes, 40)
    });
    run_60(&mut h);
    assert_eq!(recovered(&h, 40), [victim]);
    assert_eq!(h.released.iter().filter(|s| s.release.recovered).count(), 1);
    let parent = h.plan.home_parent(victim).unwrap();
    assert_eq!(
        *repairs.borrow(),
        [(parent, victim)],
        "one copy, from the parent"
    );
    assert_eq!(gap_requests(&h, victim), 1);
    // Packets behind the gap waited for it, so they are released right after it.
    let order: Vec<u64> = h
        .released
        .iter()
        .filter(|s| s.node == victim)
        .map(|s| s.release.packet_seq)
        .collect();
    assert!(order.windows(2).all(|w| w[1] == w[0] + 1));
}

/// Goal: a copy lost between the root and a layer-1 proxy (H = 0) is missed by the ten
/// gateways it would have reached; their parent asks the root once and passes the packet on
/// to each, so the root sends one copy where it used to send ten. Method: the same loss with
/// `repair_bytes = 0` (every gateway asks the root, as DESIGN.md has it) is the baseline.
#[test]
fn a_loss_shared_by_a_subtree_costs_the_root_one_copy() {
    let config = PlanConfig::unhedged(100, 2, 10);
    let plan = proto::plan::Plan::new(&config).unwrap();
    let proxy = NodeId(plan.layer(1).start + 3);
    // Proxy 3 sends packet 40 to child block (3 + 40) mod 10 = 3, its own home block.
    let block: Vec<NodeId> = plan.block(2, 3).map(NodeId).collect();
    let root = NodeId(0);
    for (repair_bytes, root_copies) in [(NodeConfig::default().repair_bytes, 1), (0, 10)] {
        let node = NodeConfig {
            repair_bytes,
            ..NodeConfig::default()
        };
        let mut h = Harness::new(&config, node);
        let repairs = lossy_link(&mut h, move |a, b, bytes| {
            a == root && b == proxy && is_packet(bytes, 40)
        });
        run_60(&mut h);
        assert_eq!(recovered(&h, 40), block, "repair_bytes = {repair_bytes}");
        let repairs = repairs.borrow();
        let from_root = repairs.iter().filter(|(a, _)| *a == root).count();
        assert_eq!(
            from_root, root_copies,
            "repair_bytes = {repair_bytes}: {repairs:?}"
        );
        if repair_bytes > 0 {
            assert_eq!(repairs[0], (root, proxy));
            assert!(repairs[1..].iter().all(|&(a, _)| a == proxy));
        }
    }
}

/// Goal: a gateway whose parent never answers (its requests to it are lost, as to a dead
/// parent not yet left) asks the proxy its last new packet came from the second time, and
/// that one answers; one that no proxy answers recovers from the root after asking
/// [`proto::gateway::GAP_ASKS_OF_PARENT`] times.
#[test]
fn a_gateway_whose_parent_does_not_answer_asks_another_proxy_then_the_root() {
    for every_proxy_mute in [false, true] {
        let (mut h, victim) = unhedged_n100();
        let parent = h.plan.home_parent(victim).unwrap();
        let layer = h.plan.layer(1);
        let proxies = layer.clone();
        let repairs = lossy_link(&mut h, move |a, b, bytes| {
            let lost_ask = a == victim
                && (b == parent || (every_proxy_mute && proxies.contains(&b.0)))
                && matches!(
                    wire::control::Repr::parse(bytes),
                    Ok(wire::control::Repr::RetransmitRequest { .. })
                );
            (b == victim && is_packet(bytes, 40)) || lost_ask
        });
        run_60(&mut h);
        assert_eq!(recovered(&h, 40), [victim]);
        let repairs = repairs.borrow();
        assert_eq!(repairs.len(), 1, "{repairs:?}");
        if every_proxy_mute {
            assert_eq!(repairs[0], (NodeId(0), victim));
            let asks = proto::gateway::GAP_ASKS_OF_PARENT as usize + 1;
            assert_eq!(gap_requests(&h, victim), asks);
        } else {
            let (from, to) = repairs[0];
            assert!(layer.contains(&from.0) && from != parent, "{repairs:?}");
            assert_eq!(to, victim);
            assert_eq!(gap_requests(&h, victim), 2);
        }
    }
}

/// Packets 21-220: more than three answers' worth (64 packets each).
const FAR_BEHIND: std::ops::RangeInclusive<u64> = 21..=220;

/// Loses the first copies of [`FAR_BEHIND`] on the links `on(from, to)` says, publishes
/// 300 packets 20 µs apart after a warm-up, and checks every gateway released every packet
/// once, in order. Returns the retransmitted copies.
fn fall_far_behind(h: &mut Harness, on: impl Fn(NodeId, NodeId) -> bool + 'static) -> Repairs {
    let repairs = lossy_link(h, move |a, b, bytes| {
        on(a, b) && first_copy_of(bytes).is_some_and(|seq| FAR_BEHIND.contains(&seq))
    });
    h.start();
    let warm = h.now_ns + 30 * MS;
    h.run_until(warm);
    publish(h, 300, 20 * US, 30 * MS);
    assert_exactly_once_in_order(h);
    repairs
}

/// Goal: a gateway that missed more packets than one answer carries (200; an answer holds
/// at most 64) asks for the next 64 as soon as the last of an answer has come, not after
/// another `gap_grace`: four requests, each within a round trip of the one before, all
/// answered by its parent. Method: the first copies of packets 21-220 to one gateway are
/// lost; 300 packets are published 20 µs apart.
#[test]
fn a_gateway_far_behind_asks_again_as_each_answer_ends() {
    let (mut h, victim) = unhedged_n100();
    let repairs = fall_far_behind(&mut h, move |_, to| to == victim);
    let recovered = h
        .released
        .iter()
        .filter(|s| s.node == victim && s.release.recovered)
        .count();
    assert_eq!(recovered, 200);
    let parent = h.plan.home_parent(victim).unwrap();
    assert!(repairs.borrow().iter().all(|&r| r == (parent, victim)));
    let asked = gap_request_times(&h, |n| n == victim);
    println!("gap requests at {asked:?} ns");
    assert_eq!(asked.len(), 4, "one request per 64 packets: {asked:?}");
    let grace = NodeConfig::default().gap_grace.as_nanos() as u64;
    assert!(
        asked.windows(2).all(|w| w[1] - w[0] < grace),
        "requests {asked:?} ns: one waited a grace of {grace} ns"
    );
}

/// Goal: when the proxy lacks them too (its copies of packets 21-220 from the root were
/// lost; H = 0 without RRPS, so it forwards every packet to its ten gateways), they still
/// get the next 64 a round trip after the last: the proxy asks the root again as soon as an
/// answer has come, not only once `gap_retry` has passed since its last ask. Method: as
/// `a_gateway_far_behind_asks_again_as_each_answer_ends`, with the loss above the proxy.
#[test]
fn a_proxy_far_behind_asks_again_as_each_answer_ends() {
    let config = PlanConfig {
        rrps: false,
        ..PlanConfig::unhedged(100, 2, 10)
    };
    let plan = proto::plan::Plan::new(&config).unwrap();
    let proxy = NodeId(plan.layer(1).start + 3);
    let root = NodeId(0);
    let mut h = Harness::new(&config, NodeConfig::default());
    let repairs = fall_far_behind(&mut h, move |from, to| from == root && to == proxy);
    let from_root = repairs.borrow().iter().filter(|(a, _)| *a == root).count();
    let asks = gap_request_times(&h, |n| plan.home_parent(n) == Some(proxy));
    let (first, last) = (asks[0], *asks.last().unwrap());
    println!(
        "root sent {from_root} repairs; the proxy's children asked {} times over {} µs",
        asks.len(),
        (last - first) / 1_000
    );
    assert!(
        from_root <= 200,
        "each packet once from the root: {from_root}"
    );
    let retry = NodeConfig::default().gap_retry.as_nanos() as u64;
    assert!(
        last - first < retry,
        "the gap took {} µs to recover, more than one gap_retry",
        (last - first) / 1_000
    );
}

/// Goal: with injected offsets of ±1 ms and drift of ±50 ppm on a jitter-free (symmetric,
/// fixed-delay) path, clock sync gets every gateway's exchange clock within 1 µs of the
/// root's, and hold-and-release then releases each packet at every gateway within that
/// error of its deadline, so the spread across gateways is at most twice it.
#[test]
fn clock_sync_aligns_release_within_a_microsecond() {
    let mut h = synced_skewed_tree(500 * MS);
    let first = h.root.next_packet_seq();
    publish(&mut h, 200, 200 * US, 10 * MS);
    let mut spread: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut worst_error = 0i64;
    for seen in h.released.iter().filter(|s| s.release.packet_seq >= first) {
        let error = seen.release.released.as_nanos() as i64 - seen.true_ns as i64;
        worst_error = worst_error.max(error.abs());
        let e = spread
            .entry(seen.release.packet_seq)
            .or_insert((u64::MAX, 0));
        e.0 = e.0.min(seen.true_ns);
        e.1 = e.1.max(seen.true_ns);
    }
    assert!(worst_error < 1_000, "clock error {worst_error} ns");
    let worst_spread = spread.values().map(|(lo, hi)| hi - lo).max().unwrap();
    assert!(worst_spread <= 2_000, "release spread {worst_spread} ns");
    assert!(spread.len() >= 200);
}

/// Goal: a held packet leaves when the gateway's clock, as it reads at that moment, reaches
/// the deadline, even though clock sync refits the clock while the packet waits (drift of
/// up to 50 ppm moves the local instant of a deadline between fits); the release timer is
/// re-armed after every fit. Method: the skewed tree settled, 200 packets; every release
/// that did not arrive late reads its deadline on the gateway's own clock, to the ns.
#[test]
fn a_refitted_clock_moves_the_release_with_it() {
    let mut h = synced_skewed_tree(500 * MS);
    let first = h.root.next_packet_seq();
    publish(&mut h, 200, 200 * US, 10 * MS);
    let mut checked = 0;
    for seen in h.released.iter().filter(|s| s.release.packet_seq >= first) {
        let r = &seen.release;
        if r.late {
            continue;
        }
        let past = r.released.as_nanos().saturating_sub(r.deadline.as_nanos());
        assert!(
            past <= 1,
            "node {:?} released packet {} {past} ns after its deadline",
            seen.node,
            r.packet_seq
        );
        checked += 1;
    }
    assert!(checked >= 200 * 100, "{checked}");
}

/// Goal: with a fixed OWD (CloudEx's hold-and-release), the root ignores the reports: every
/// deadline is the send time plus the fixed OWD plus the margin, before and after reports
/// come in, however slow a gateway is.
#[test]
fn a_fixed_owd_ignores_the_reports() {
    let config = PlanConfig {
        hedge: 0,
        rrps: false,
        ..PlanConfig::new(100)
    };
    let mut node = NodeConfig::default();
    node.owd.fixed_owd = Some(core::time::Duration::from_micros(975));
    let mut h = Harness::new(&config, node);
    let slow = NodeId(h.plan.gateways().start + 42);
    h.link = Box::new(move |a, b, _| {
        Some(if a == slow || b == slow {
            80 * US
        } else {
            20 * US
        })
    });
    h.start();
    assert_eq!(h.root.deadline_offset().as_nanos(), 1_000_000);
    publish(&mut h, 400, 100 * US, 5 * MS);
    assert_eq!(h.root.deadline_offset().as_nanos(), 1_000_000);
    let last = h.released.iter().rfind(|s| s.node == slow).unwrap();
    assert_eq!(
        last.release.deadline.as_nanos() - last.release.send_time.as_nanos(),
        1_000_000
    );
}

/// Goal: the root's deadline is the maximum reported OWD percentile plus the 25 µs margin,
/// aggregated through the proxies; before any report it uses 50 µs.
#[test]
fn deadline_follows_max_reported_owd_plus_margin() {
    let config = PlanConfig {
        hedge: 0,
        rrps: false,
        ..PlanConfig::new(100)
    };
    let mut h = Harness::new(&config, NodeConfig::default());
    let slow = NodeId(h.plan.gateways().start + 42);
    // Root -> proxy 30 µs, proxy -> gateway 20 µs, except 80 µs into the slow gateway.
    h.link = Box::new(move |a, b, _| {
        // Symmetric links: clock sync cannot see path asymmetry, so the test must not have any.
        Some(if a == NodeId(0) || b == NodeId(0) {
            30 * US
        } else if a == slow || b == slow {
            80 * US
        } else {
            20 * US
        })
    });
    h.start();
    assert_eq!(
        h.root.deadline_offset().as_nanos(),
        75_000,
        "50 µs initial OWD + 25 µs"
    );
    // Gateways report OWDs once synced, after their proxies' clocks have converged.
    h.run_until(h.now_ns + 500 * MS);
    publish(&mut h, 400, 100 * US, 5 * MS);
    assert_eq!(
        h.root.deadline_offset().as_nanos(),
        135_000,
        "110 µs max OWD + 25 µs"
    );
    let last = h.released.iter().rfind(|s| s.node == slow).unwrap();
    assert_eq!(
        last.release.deadline.as_nanos() - last.release.send_time.as_nanos(),
        135_000
    );
    assert!(h.events.iter().any(|(_, _, e)| matches!(
        e,
        Event::DeadlineOffset {
            max_owd_ns: 110_000
        }
    )));
}

/// Goal: a gateway whose clock has not synced reports no OWD (its "exchange time" is its raw
/// local clock, here 700 ms ahead: one such sample would push every deadline out by 700 ms;
/// on a slow loopback this overflowed the gateways' hold queues in the multi-process cluster
/// test). Method: every gateway's clock probes are lost, so none ever syncs, while the root
/// publishes for 40 ms (two report intervals); the root's deadline must stay at its initial
/// 50 µs OWD + 25 µs, and every gateway still releases every packet.
#[test]
fn a_gateway_reports_no_owd_before_its_clock_syncs() {
    let config = PlanConfig {
        hedge: 0,
        rrps: false,
        ..PlanConfig::new(4)
    };
    let mut h = Harness::new(&config, NodeConfig::default());
    let gateways = h.gateways();
    for g in &gateways {
        h.clocks[g.0 as usize].offset_ns = 700 * MS as i64;
    }
    let probing = gateways.clone();
    h.link = Box::new(move |from, _, bytes| {
        let probe = matches!(
            wire::control::Repr::parse(bytes),
            Ok(wire::control::Repr::ClockProbe { .. })
        );
        (!(probe && probing.contains(&from))).then_some(20 * US)
    });
    h.start();
    let packets = publish(&mut h, 400, 100 * US, 5 * MS);
    assert_eq!(
        h.root.deadline_offset().as_nanos(),
        75_000,
        "no OWD report from an unsynced gateway"
    );
    for (gateway, seqs) in releases_by_gateway(&h) {
        assert_eq!(
            seqs.len() as u64,
            packets.clone().count() as u64,
            "{gateway:?}"
        );
    }
}

/// Loses the first copy of one packet to `victim`, then from two packets later for 100 ms
/// every datagram `cut(from, to, bytes)` says (before the gap's first request, a grace after
/// the next packet came, is answered); packets go out 100 µs apart, 1,500 in all. Checks
/// every gateway released every packet once, in order; returns the first packet and when
/// the cut ended (true ns).
fn cut_while_asking(
    h: &mut Harness,
    victim: NodeId,
    cut: impl Fn(NodeId, NodeId, &[u8]) -> bool + 'static,
) -> (u64, u64) {
    h.start();
    let warm = h.now_ns + 30 * MS;
    h.run_until(warm);
    let first = h.root.next_packet_seq();
    let cutting = Rc::new(std::cell::Cell::new(false));
    let cut_now = cutting.clone();
    h.link = Box::new(move |a, b, bytes| {
        let lost = b == victim && first_copy_of(bytes) == Some(first + 3);
        let cut_off = cut_now.get() && cut(a, b, bytes);
        (!lost && !cut_off).then(|| pair_delay(a, b))
    });
    let m = payload();
    let mut healed = 0;
    for i in 0..1_500 {
        if i == 6 {
            cutting.set(true);
        }
        if i == 1_006 {
            cutting.set(false);
            healed = h.now_ns;
        }
        h.publish(&[wire::Raw(&m)]);
        let t = h.now_ns + 100 * US;
        h.run_until(t);
    }
    let t = h.now_ns + 20 * MS;
    h.run_until(t);
    assert_exactly_once_in_order(h);
    (first, healed)
}

/// Goal: a gateway cut off while it asks for a gap asks again as soon as it hears the tree
/// again, not when a backoff grown through the silence says (the requests went unanswered:
/// 2, 4, ... 64 ms apart), since every packet after the gap waits for it. Method:
/// [`cut_while_asking`], every datagram to or from the gateway lost.
#[test]
fn a_gateway_cut_off_asks_again_once_it_hears_the_tree() {
    let (mut h, victim) = unhedged_n100();
    let (first, healed) =
        cut_while_asking(&mut h, victim, move |a, b, _| a == victim || b == victim);
    let asked = gap_request_times(&h, |n| n == victim);
    let cut_at = healed - 100 * MS;
    let during = asked.iter().filter(|&&t| t > cut_at && t < healed).count();
    assert!(
        during >= 5,
        "requests backed off through the cut: {asked:?}"
    );
    let after = asked
        .iter()
        .find(|&&t| t >= healed)
        .copied()
        .unwrap_or(u64::MAX);
    println!(
        "{during} requests during the cut; the first after it {} µs after the heal",
        (after - healed) / US
    );
    assert!(
        after - healed < 200 * US,
        "first request {} µs after the heal",
        (after - healed) / US
    );
    // Everything the cut held back is released within a few ms of it.
    let last_cut_off = first + 1_005;
    let released = h
        .released
        .iter()
        .find(|s| s.node == victim && s.release.packet_seq == last_cut_off)
        .map(|s| s.true_ns)
        .expect("released");
    assert!(
        released - healed < 10 * MS,
        "the cut's packets released {} ms after the heal",
        (released - healed) / MS
    );
}

/// Goal: the backoff still holds while the tree is heard: a gateway whose requests go
/// unanswered while copies keep coming (a root or parent too busy to answer, or a path that
/// loses requests alone) asks 2, 4, 8, ... ms apart, not again with every copy. Method:
/// [`cut_while_asking`], the gateway's requests lost.
#[test]
fn a_gateway_that_hears_the_tree_keeps_backing_off() {
    let (mut h, victim) = unhedged_n100();
    cut_while_asking(&mut h, victim, move |a, _, bytes| {
        a == victim
            && matches!(
                wire::control::Repr::parse(bytes),
                Ok(wire::control::Repr::RetransmitRequest { .. })
            )
    });
    let asked = gap_request_times(&h, |n| n == victim);
    let waits: Vec<u64> = asked.windows(2).map(|w| (w[1] - w[0]) / MS).collect();
    println!("waits between requests: {waits:?} ms");
    assert_eq!(waits[..6], [2, 4, 8, 16, 32, 64], "requests {asked:?} ns");
}
