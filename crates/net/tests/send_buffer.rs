//! A burst larger than the root's socket send buffer is sent late, not lost.
//!
//! Goal: when the kernel refuses copies (`EAGAIN`: the send buffer is full), the host holds
//! them and sends them once the buffer drains, and the node's later datagrams wait in its
//! outbox meanwhile, so every packet of the burst reaches the gateway without a single
//! retransmission. Method: two network namespaces joined by a veth pair whose root end is
//! shaped by a token bucket (`tc qdisc … tbf`, 50 Mbit/s), so packets queue in the qdisc and
//! the root's send buffer fills; the root publishes 3,000 packets of 1.2 KB in one hook turn
//! (0.6 s of the link's time), a proxy and a gateway in the other namespace receive them. Needs root, `ip` and `tc`; skips with the reason elsewhere.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

mod common;

use net::{Hook, Host, HostView, Idle, Mode, NodeClock, Runtime, Socket, SocketOptions};
use proto::{Delivery, Event, Gateway, Instant, NodeConfig, NodeId, Proxy, Root};

const BURST: u32 = 3_000;

/// Publishes `BURST` packets of one 1,200-byte message each in its first turn.
struct Burst {
    done: bool,
}

impl Hook<Root> for Burst {
    fn on_turn(&mut self, now: Instant, root: &mut Root) -> Option<Instant> {
        if !self.done {
            self.done = true;
            for _ in 0..BURST {
                root.publish(now, &[wire::Raw(&[b'S'; 1_200])]);
            }
        }
        None
    }
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Two namespaces joined by a veth pair; the first end shaped by a token bucket. Deleted on
/// drop (nothing is added to the host's own namespace).
struct Pair {
    names: [String; 2],
}

impl Pair {
    fn create(tag: &str) -> Result<Self, String> {
        let names = [format!("jsa{tag}"), format!("jsb{tag}")];
        let pair = Self {
            names: names.clone(),
        };
        for ns in &names {
            run("ip", &["netns", "add", ns])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        let [a, b] = &names;
        run(
            "ip",
            &[
                "-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b,
            ],
        )?;
        for (ns, dev, addr) in [(a, "va", "10.214.0.1/24"), (b, "vb", "10.214.0.2/24")] {
            run("ip", &["-n", ns, "addr", "add", addr, "dev", dev])?;
            run("ip", &["-n", ns, "link", "set", dev, "up"])?;
        }
        run(
            "ip",
            &[
                "netns", "exec", a, "tc", "qdisc", "add", "dev", "va", "root", "tbf", "rate",
                "50mbit", "burst", "16kb", "latency", "1s",
            ],
        )?;
        Ok(pair)
    }

    /// A UDP socket bound to `addr` inside namespace `index` (made on a thread that joined it:
    /// a socket stays in the namespace it was made in).
    fn bind(&self, index: usize, addr: SocketAddr) -> UdpSocket {
        let path = format!("/var/run/netns/{}", self.names[index]);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let ns = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                    // SAFETY: `ns` is an open namespace file; setns only moves this thread.
                    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                    assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
                    UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"))
                })
                .join()
                .unwrap()
        })
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root".into());
    }
    for tool in ["ip", "tc"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("the `{tool}` tool is missing"));
        }
    }
    None
}

#[test]
fn a_burst_past_the_send_buffer_arrives_whole() {
    if let Some(reason) = unavailable() {
        println!("SKIPPED a_burst_past_the_send_buffer_arrives_whole: {reason}");
        return;
    }
    let pair = match Pair::create(&format!("{}", std::process::id() % 100_000)) {
        Ok(pair) => pair,
        Err(reason) => {
            println!("SKIPPED a_burst_past_the_send_buffer_arrives_whole: {reason}");
            return;
        }
    };
    let (a, b) = (Ipv4Addr::new(10, 214, 0, 1), Ipv4Addr::new(10, 214, 0, 2));
    let sockets = [
        pair.bind(0, (a, 0).into()),
        pair.bind(1, (b, 0).into()),
        pair.bind(1, (b, 0).into()),
    ];
    let (book, plan) = common::chain(&sockets);
    let config = NodeConfig {
        hold_and_release: false,
        ..NodeConfig::default()
    };
    // The sockets a node gets by default (1 MB send buffer asked for): the burst is 3.6 MB.
    let options = SocketOptions::default();
    let mut sockets = sockets.into_iter();
    let mut socket = || Socket::from_std(sockets.next().unwrap(), &options).unwrap();
    let mut runtime = Runtime::new(Mode::Epoll).unwrap();
    let root = Root::new(plan.clone(), config.clone()).unwrap();
    let clock = NodeClock::default();
    runtime
        .add(Host::new(
            root,
            Burst { done: false },
            "root",
            socket(),
            clock,
            book.clone(),
        ))
        .unwrap();
    let proxy = Proxy::new(NodeId(1), plan.clone(), config.clone()).unwrap();
    runtime
        .add(Host::new(
            proxy,
            Idle,
            "p1.0",
            socket(),
            clock,
            book.clone(),
        ))
        .unwrap();
    let gateway = Gateway::new(NodeId(2), plan, config, Delivery::Events).unwrap();
    runtime
        .add(Host::new(gateway, Idle, "g0", socket(), clock, book))
        .unwrap();

    let mut released = Vec::new();
    let mut sink = |_: NodeId, _: Instant, event: &Event| {
        if let Event::Released(release) = event {
            released.push(release.packet_seq);
        }
    };
    let stop = AtomicBool::new(false);
    runtime
        .run_for(Duration::from_millis(1_500), &stop, &mut sink)
        .unwrap();

    let root = runtime.host::<Root, Burst>(0).unwrap();
    let net = root.net_counters();
    println!("root: {net:?}");
    assert!(
        net.send_held > 0,
        "the burst overflowed the send buffer: {net:?}"
    );
    assert_eq!(net.send_errors(), 0, "no copy was dropped: {net:?}");
    let gateway = runtime.host::<Gateway, Idle>(2).unwrap();
    assert_eq!(
        gateway.node().counters().retransmissions,
        0,
        "no gap to ask for"
    );
    let packets = root.node().next_packet_seq() - 1;
    assert!(packets >= u64::from(BURST));
    // Every packet in order; the last (an idle packet after the burst) may still be held at
    // its deadline when the run ends (seen once with a build running beside the test).
    let whole = released.len() as u64;
    assert!(
        whole >= u64::from(BURST) && whole + 1 >= packets,
        "{whole} of {packets}"
    );
    assert_eq!(released, (1..=whole).collect::<Vec<_>>());
    drop(pair);
}
