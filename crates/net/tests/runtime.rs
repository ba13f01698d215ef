//! The runtime drives real nodes over loopback in one process, in both modes.
//!
//! Goal: a root (publishing through a hook), a proxy and a gateway on three loopback sockets
//! deliver every packet to the gateway once, in order; datagrams from outside the plan and
//! oversized datagrams are counted and dropped before any node. Method: ephemeral ports, one
//! runtime on the test thread, a bounded run, then the counters and the released packets.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

mod common;

use net::{AddrBook, Hook, Host, Idle, Mode, NodeClock, Runtime, Socket, SocketOptions};
use proto::plan::{Plan, PlanConfig};
use proto::{Delivery, Event, Gateway, Instant, NodeConfig, NodeId, Proxy, Root};

/// Publishes one 20-byte raw message per turn, `left` times, every 200 µs.
struct Publish {
    left: u32,
}

impl Hook<Root> for Publish {
    fn on_turn(&mut self, now: Instant, root: &mut Root) -> Option<Instant> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        root.publish(now, &[wire::Raw(&[b'S'; 20])]);
        Some(now + Duration::from_micros(200))
    }
}

fn run_tree(mode: Mode) {
    run_tree_spinning(mode, Duration::ZERO);
}

/// CPU time this thread has used, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs the tree for 400 ms; returns the run's counters and the CPU time the loop's thread
/// used meanwhile, ns.
fn run_tree_spinning(mode: Mode, spin: Duration) -> (net::RunStats, u64) {
    let sockets: Vec<UdpSocket> = (0..3)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let (book, plan) = common::chain(&sockets);
    let config = NodeConfig::default();
    let mut sockets = sockets.into_iter();
    let mut socket = || Socket::from_std(sockets.next().unwrap(), &SocketOptions::default());
    let mut runtime = Runtime::new(mode).unwrap();
    runtime.set_spin(spin);
    let root = Root::new(plan.clone(), config.clone()).unwrap();
    let root = Host::new(
        root,
        Publish { left: 300 },
        "root",
        socket().unwrap(),
        NodeClock::default(),
        book.clone(),
    );
    runtime.add(root).unwrap();
    let proxy = Proxy::new(NodeId(1), plan.clone(), config.clone()).unwrap();
    let proxy = Host::new(
        proxy,
        Idle,
        "p1.0",
        socket().unwrap(),
        NodeClock::new(3_000_000, 50_000),
        book.clone(),
    );
    runtime.add(proxy).unwrap();
    let gateway = Gateway::new(NodeId(2), plan, config, Delivery::Events).unwrap();
    let gateway = Host::new(
        gateway,
        Idle,
        "g0",
        socket().unwrap(),
        NodeClock::new(-2_000_000, -30_000),
        book.clone(),
    );
    let gateway_index = runtime.add(gateway).unwrap();

    // A stranger and an oversized datagram for the gateway.
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let gateway_addr = book.addr(NodeId(2)).unwrap();
    stranger.send_to(b"hello", gateway_addr).unwrap();
    stranger.send_to(&[7u8; 4000], gateway_addr).unwrap();

    let mut released = Vec::new();
    let mut max_owd_ns = 0;
    let mut sink = |node: NodeId, _now: Instant, event: &Event| match event {
        Event::Released(release) => {
            assert_eq!(node, NodeId(2));
            released.push(release.packet_seq);
        }
        Event::DeadlineOffset { max_owd_ns: owd } => max_owd_ns = max_owd_ns.max(*owd),
        _ => {}
    };
    let stop = AtomicBool::new(false);
    let cpu_before = thread_cpu_ns();
    let stats = runtime
        .run_for(Duration::from_millis(400), &stop, &mut sink)
        .unwrap();
    let cpu_ns = thread_cpu_ns() - cpu_before;
    assert!(!stats.stopped);
    assert!(stats.datagrams > 0);

    let root = runtime.host::<Root, Publish>(0).unwrap();
    assert_eq!(root.hook().left, 0, "the hook ran every turn it asked for");
    let packets = root.node().next_packet_seq() - 1;
    assert!(packets >= 300, "300 published packets plus idle ones");
    // The packets sent within a deadline offset of the end may still be held (after the
    // 300, the root sends an idle packet a millisecond): everything before them is released.
    // On a loaded machine a stalled turn lifts the reported OWD, and the offset, to
    // milliseconds (8 packets held of 554, with the test binaries of a CI run beside it).
    let offset = Duration::from_nanos(max_owd_ns) + NodeConfig::default().owd.margin;
    let held_max = 2 + offset.as_millis() as u64;
    assert!(
        released.len() as u64 + held_max >= packets,
        "{} of {packets}, deadline offset up to {offset:?}",
        released.len()
    );
    assert_eq!(released, (1..=released.len() as u64).collect::<Vec<_>>());

    let gateway = runtime.host::<Gateway, Idle>(gateway_index).unwrap();
    let counters = net::HostView::net_counters(gateway);
    assert_eq!(counters.unknown_source, 1);
    assert_eq!(counters.truncated, 1);
    assert_eq!(counters.send_errors(), 0);
    assert!(
        gateway.node().clock().is_synced(),
        "clock sync ran over the sockets"
    );
    assert!(
        runtime.host::<Proxy, Idle>(gateway_index).is_none(),
        "typed lookup"
    );
    (stats, cpu_ns)
}

#[test]
fn epoll_runtime_delivers_a_tree_in_order() {
    run_tree(Mode::Epoll);
}

/// An epoll runtime told to spin after work still delivers everything, spins, and keeps to
/// its duty share. The share's arithmetic is tested on made-up times beside the loop
/// (`runtime::tests::spinning_keeps_to_its_duty_in_every_window`). Here the bound is on the
/// CPU time the loop's thread used: the wall time the loop counts as spun includes time the
/// thread was descheduled on a busy machine (once 273 ms of 400 against the share's 200),
/// CPU time does not, and the duty counting wall time only makes it spin less.
#[test]
fn spinning_epoll_runtime_delivers_and_keeps_to_its_duty() {
    // A spin longer than the run: without the duty limit it would never sleep.
    let (stats, cpu_ns) = run_tree_spinning(Mode::Epoll, Duration::from_secs(1));
    assert!(stats.spun_ns > 0, "{stats:?}");
    let run_ns = 400_000_000u64;
    // The share, one window of slack for the run's edges, and 20% of the run for the work
    // itself (three nodes, ~2,000 datagrams: a few ms idle; with a build running beside it
    // on 2 cores, the same run took 260 ms of CPU against 250 at 10%). Without the duty
    // limit it takes the whole run, 400 ms.
    let limit = run_ns / 100 * (net::SPIN_DUTY_PERCENT + 20) + net::SPIN_WINDOW_NS;
    assert!(
        cpu_ns <= limit,
        "used {cpu_ns} ns of CPU > {limit}: {stats:?}"
    );
}

#[test]
fn busy_poll_runtime_delivers_a_tree_in_order() {
    run_tree(Mode::BusyPoll);
}

/// A runtime in `mode` with a lone root whose hook is `stall`, and the root's address.
fn stalling_root(mode: Mode, stall: Stall) -> (Runtime, std::net::SocketAddr) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let book = Arc::new(AddrBook::new(vec![addr]));
    let plan = Arc::new(Plan::new(&PlanConfig::new(1)).unwrap());
    let root = Root::new(plan, NodeConfig::default()).unwrap();
    let host = Host::new(
        root,
        stall,
        "root",
        Socket::from_std(socket, &SocketOptions::default()).unwrap(),
        NodeClock::default(),
        book,
    );
    let mut runtime = Runtime::new(mode).unwrap();
    runtime.add(host).unwrap();
    (runtime, addr)
}

/// Runs a lone root with the hook `stall` for 200 ms in `mode`.
fn run_stalling_root(mode: Mode, stall: Stall) -> net::RunStats {
    let (mut runtime, _) = stalling_root(mode, stall);
    let stop = AtomicBool::new(false);
    let mut ignore = |_: NodeId, _: Instant, _: &Event| {};
    runtime
        .run_for(Duration::from_millis(200), &stop, &mut ignore)
        .unwrap()
}

/// Sleeps `stall` inside its turn, `left` times, every millisecond: a stand-in for a thread
/// that stops running.
struct Stall {
    left: u32,
    stall: Duration,
}

impl Hook<Root> for Stall {
    fn on_turn(&mut self, now: Instant, _root: &mut Root) -> Option<Instant> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        std::thread::sleep(self.stall);
        Some(now + Duration::from_millis(1))
    }
}

/// A busy-poll runtime counts the gaps between its turns longer than `STALL_NS`: every
/// stall the hook makes is seen (the machine may add more), and the longest gap is at least
/// the longest stall.
#[test]
fn busy_poll_runtime_counts_its_stalls() {
    let stall = Duration::from_nanos(net::STALL_NS * 4);
    // The first turn runs before the loop (when the runtime starts): five in the loop.
    let stats = run_stalling_root(Mode::BusyPoll, Stall { left: 6, stall });
    assert!(stats.stalls >= 5, "{stats:?}");
    assert!(stats.longest_gap_ns >= stall.as_nanos() as u64, "{stats:?}");
    assert!(stats.stalled_ns >= 5 * stall.as_nanos() as u64, "{stats:?}");
}

/// A loop busy past its hosts' deadlines counts its late wake-ups, in both modes: a hook
/// that takes 3 ms a turn and asks to run again 1 ms after each turn's start finds its
/// wake-ups ~2 ms late (at least every one after the first in the loop). This is what
/// `jasper node` warns of when it runs more nodes than one loop carries.
#[test]
fn a_loop_behind_its_deadlines_counts_its_late_wake_ups() {
    for mode in [Mode::Epoll, Mode::BusyPoll] {
        let stall = Duration::from_millis(3);
        let stats = run_stalling_root(mode, Stall { left: 11, stall });
        assert!(stats.wakeups >= 10, "{mode:?}: {stats:?}");
        assert!(stats.late_wakeups >= 9, "{mode:?}: {stats:?}");
        assert!(stats.wake_lag_max_ns >= 1_500_000, "{mode:?}: {stats:?}");
    }
}

/// A loop run in slices shorter than one of its turns (as `jasper node` runs it between
/// status lines and reports, and `jasper up` its worker loops) still counts its late
/// wake-ups, and still reads its sockets: every slice is then a single turn, which measured
/// no lag and, in epoll mode, dropped what its wait had found before the next slice read it.
#[test]
fn a_loop_run_in_short_slices_still_counts_its_late_wake_ups() {
    for mode in [Mode::Epoll, Mode::BusyPoll] {
        let stall = Duration::from_millis(3);
        let (mut runtime, addr) = stalling_root(mode, Stall { left: 40, stall });
        let stop = AtomicBool::new(false);
        let mut ignore = |_: NodeId, _: Instant, _: &Event| {};
        // A stranger's datagram, read (and counted) only if the loop reads its socket.
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut total = net::RunStats::default();
        for slice in 0..30 {
            if slice == 10 {
                stranger.send_to(b"hello", addr).unwrap();
            }
            let stats = runtime
                .run_for(Duration::from_micros(500), &stop, &mut ignore)
                .unwrap();
            total.add(&stats);
        }
        assert!(total.late_wakeups >= 20, "{mode:?}: {total:?}");
        assert!(total.wake_lag_max_ns >= 1_500_000, "{mode:?}: {total:?}");
        let root = runtime.host::<Root, Stall>(0).unwrap();
        assert_eq!(
            net::HostView::net_counters(root).unknown_source,
            1,
            "{mode:?}: the stranger's datagram was read"
        );
    }
}
