//! Multi-process clusters of `jasper node` on loopback (and in network namespaces).
//!
//! Goal: the real runtime delivers the market-data stream exactly once, in order, to every
//! gateway, survives a dead proxy and hostile datagrams. Method: write a cluster config,
//! start the nodes as separate `jasper node` processes (gateways first, root last, each after
//! the previous printed `ready`), let the root publish a synthetic feed for a fixed time, and
//! parse the `summary` lines every process prints at the end. The root stops first, so every
//! packet it sent has reached every gateway before the gateways stop.
//!
//! Every test is bounded in time (process durations and a watchdog per wait) and uses its own
//! port range, so the tests can run in parallel.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use proto::NodeConfig;
use proto::cluster::ClusterConfig;
use proto::plan::{Plan, PlanConfig, Role, Shape};
use wire::control::Repr as Control;

const JASPER: &str = env!("CARGO_BIN_EXE_jasper");
/// Polling step of every wait.
const POLL: Duration = Duration::from_millis(20);
/// Longest wait for a process to print `ready` or to exit.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// A `jasper node` process whose stdout lines are collected by a reader thread.
struct Proc {
    label: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<thread::JoinHandle<()>>,
}

impl Proc {
    fn spawn(label: &str, mut command: Command) -> Self {
        command.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {label}: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            label: label.to_string(),
            child,
            lines,
            reader: Some(reader),
        }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn wait_for_line(&mut self, prefix: &str) {
        for _ in 0..(WAIT_MAX.as_millis() / POLL.as_millis()) {
            if self.lines().iter().any(|l| l.starts_with(prefix)) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before printing {prefix:?}",
                    self.label
                );
            }
            thread::sleep(POLL);
        }
        panic!("{} printed no {prefix:?} within {WAIT_MAX:?}", self.label);
    }

    /// Waits for a clean exit and returns every line printed.
    fn finish(mut self) -> Vec<String> {
        for _ in 0..(WAIT_MAX.as_millis() / POLL.as_millis()) {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{} exited with {status}", self.label);
                if let Some(reader) = self.reader.take() {
                    reader.join().unwrap();
                }
                return self.lines();
            }
            thread::sleep(POLL);
        }
        panic!("{} did not exit within {WAIT_MAX:?}", self.label);
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// `key=value` fields of a line.
fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(fields: &BTreeMap<String, String>, key: &str) -> u64 {
    fields
        .get(key)
        .unwrap_or_else(|| panic!("no {key} in {fields:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("{key} in {fields:?}: {e}"))
}

/// Drop counts of a summary's `drops=malformed:0,…` field.
fn drops(fields: &BTreeMap<String, String>) -> BTreeMap<String, u64> {
    fields["drops"]
        .split(',')
        .filter_map(|kv| kv.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// Every `summary` line of every process, by node name.
fn summaries(outputs: &[Vec<String>]) -> BTreeMap<String, BTreeMap<String, String>> {
    outputs
        .iter()
        .flatten()
        .filter(|l| l.starts_with("summary "))
        .map(|l| {
            let f = fields(l);
            (f["node"].clone(), f)
        })
        .collect()
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jasper-net-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tree of `participants` gateways under proxies of fan-out `fanout`, sibling hedging H = 1,
/// laid out on `hosts` (loopback if empty) from `base_port`, with clock errors injected on
/// every node but the root so that clock sync has work to do.
fn write_config(
    dir: &Path,
    participants: u32,
    fanout: u32,
    hosts: &[IpAddr],
    base_port: u16,
) -> (PathBuf, ClusterConfig) {
    let plan = Plan::new(&PlanConfig {
        shape: Shape::Explicit { depth: 2, fanout },
        hedge: 1,
        ..PlanConfig::new(participants)
    })
    .unwrap();
    let mut config = ClusterConfig::layout(&plan, NodeConfig::default(), hosts, base_port).unwrap();
    for (i, node) in config.nodes.iter_mut().enumerate().skip(1) {
        let i = i as i64;
        node.clock_offset_ns = (i % 5 - 2) * 700_000 + i * 13_000;
        node.clock_drift_ppb = (i % 3 - 1) * 20_000;
    }
    config.validate().unwrap();
    let path = dir.join("cluster.toml");
    std::fs::write(&path, config.to_toml()).unwrap();
    (path, config)
}

fn names(config: &ClusterConfig, role: Role) -> Vec<String> {
    config
        .nodes
        .iter()
        .filter(|n| n.role == role)
        .map(|n| n.name.clone())
        .collect()
}

/// The id of the node called `name`.
fn node_id(config: &ClusterConfig, name: &str) -> u32 {
    config.nodes.iter().find(|n| n.name == name).unwrap().id
}

/// The names of the gateways whose home parent is the proxy called `proxy`.
fn home_gateways<'a>(config: &'a ClusterConfig, proxy: &str) -> Vec<&'a str> {
    let plan = Plan::new(&config.plan).unwrap();
    let parent = proto::NodeId(node_id(config, proxy));
    config
        .nodes
        .iter()
        .filter(|n| n.role == Role::Gateway)
        .filter(|n| plan.home_parent(proto::NodeId(n.id)) == Some(parent))
        .map(|n| n.name.as_str())
        .collect()
}

/// `jasper node` for `ids`, running `duration` seconds (the root publishes for `publish`).
fn node_command(prefix: &[&str], config: &Path, ids: &[String], duration: f64) -> Command {
    let mut command = match prefix.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(JASPER);
            c
        }
        None => Command::new(JASPER),
    };
    command
        .arg("node")
        .arg("--config")
        .arg(config)
        .arg("--id")
        .arg(ids.join(","))
        .arg("--duration")
        .arg(duration.to_string())
        .args(["--status-interval", "1"]);
    // The root's feed flags only where the root runs (a process without it refuses them).
    if ids.iter().any(|id| id == "root") {
        command.args(["--rate", "4000", "--warmup", "0.5", "--publish-for", "2"]);
    }
    command
}

/// Every gateway in `gateways` released packets 1..=P exactly once, in order, with nothing
/// skipped, where P is what the root sent; returns P.
fn check_exactly_once(
    summaries: &BTreeMap<String, BTreeMap<String, String>>,
    gateways: &[String],
) -> u64 {
    let root = &summaries["root"];
    let packets = num(root, "packets");
    assert!(
        num(root, "feed_messages") >= 7_000,
        "the root published its feed: {root:?}"
    );
    assert!(packets > 100, "{root:?}");
    for name in gateways {
        let g = summaries
            .get(name)
            .unwrap_or_else(|| panic!("no summary for {name}"));
        assert_eq!(num(g, "first"), 1, "{name}: {g:?}");
        assert_eq!(num(g, "last"), packets, "{name}: {g:?}");
        assert_eq!(num(g, "released"), packets, "{name}: {g:?}");
        assert_eq!(num(g, "out_of_order"), 0, "{name}: {g:?}");
        assert_eq!(num(g, "repeats"), 0, "{name}: {g:?}");
        assert_eq!(num(g, "skipped"), 0, "{name}: {g:?}");
        assert_eq!(num(g, "snapshots"), 0, "{name}: {g:?}");
        assert_eq!(num(g, "send_errors"), 0, "{name}: {g:?}");
    }
    packets
}

/// Starts gateways (two processes), then each proxy, then the root; returns them in that
/// order, root last.
fn start_cluster(prefix: &[&str], config_path: &Path, config: &ClusterConfig) -> Vec<Proc> {
    let gateways = names(config, Role::Gateway);
    let proxies = names(config, Role::Proxy);
    let (left, right) = gateways.split_at(gateways.len() / 2);
    let mut procs = Vec::new();
    for (label, ids, duration) in [
        ("gateways-a", left.to_vec(), 5.0),
        ("gateways-b", right.to_vec(), 5.0),
    ] {
        procs.push(Proc::spawn(
            label,
            node_command(prefix, config_path, &ids, duration),
        ));
    }
    for proxy in &proxies {
        procs.push(Proc::spawn(
            proxy,
            node_command(prefix, config_path, std::slice::from_ref(proxy), 4.5),
        ));
    }
    for p in &mut procs {
        p.wait_for_line("ready ");
    }
    let mut root = Proc::spawn(
        "root",
        node_command(prefix, config_path, &["root".to_string()], 3.0),
    );
    root.wait_for_line("ready ");
    procs.push(root);
    procs
}

#[test]
fn multi_process_cluster_releases_every_packet_once_in_order() {
    let dir = scratch("exactly-once");
    let (path, config) = write_config(&dir, 8, 4, &[], 31_000);
    let procs = start_cluster(&[], &path, &config);
    let outputs: Vec<Vec<String>> = procs.into_iter().map(Proc::finish).collect();
    let summaries = summaries(&outputs);
    let packets = check_exactly_once(&summaries, &names(&config, Role::Gateway));
    for proxy in names(&config, Role::Proxy) {
        assert_eq!(num(&summaries[&proxy], "forwarded"), packets, "{proxy}");
    }
    println!("{} gateways released {packets} packets each", 8);
}

/// Goal: the operator watches latency and fairness across every host live (`jasper watch`),
/// and a gateway that dies stops counting without the watch losing the others. Method: the
/// cluster of the test above, every gateway with `--monitor`; one gateway process (four
/// gateways) is killed 1.5 s after the root starts. The watch prints status lines over all
/// eight gateways, then over the four left, one `silent` event for each killed gateway (and
/// none for the others), and a summary with every record of the live gateways taken, no
/// input dropped, and nothing lost: packets after a silence are complete without it.
#[test]
fn the_monitor_watches_every_gateway_and_one_that_dies() {
    let dir = scratch("watch");
    let (path, config) = write_config(&dir, 8, 4, &[], 41_000);
    let monitor = "127.0.0.1:41100";
    let mut watch = Command::new(JASPER);
    watch
        .args(["watch", "--listen", monitor, "--duration", "7.5"])
        .args([
            "--warmup",
            "0.3",
            "--silent-after",
            "0.5",
            "--status-interval",
            "0.5",
        ])
        .arg("--config")
        .arg(&path)
        .arg("--out")
        .arg(dir.join("watch"));
    let mut watch = Proc::spawn("watch", watch);
    watch.wait_for_line("watching 8 gateways");
    let gateways = names(&config, Role::Gateway);
    let proxies = names(&config, Role::Proxy);
    let (kept, killed) = gateways.split_at(gateways.len() / 2);
    let with_monitor = |mut command: Command| {
        command.args(["--monitor", monitor]);
        command
    };
    let mut kept_proc = Proc::spawn(
        "gateways-kept",
        with_monitor(node_command(&[], &path, kept, 5.0)),
    );
    let mut killed_proc = Proc::spawn(
        "gateways-killed",
        with_monitor(node_command(&[], &path, killed, 5.0)),
    );
    let mut others = Vec::new();
    for proxy in &proxies {
        others.push(Proc::spawn(
            proxy,
            node_command(&[], &path, std::slice::from_ref(proxy), 4.5),
        ));
    }
    for p in others.iter_mut().chain([&mut kept_proc, &mut killed_proc]) {
        p.wait_for_line("ready ");
    }
    let mut root = Proc::spawn("root", node_command(&[], &path, &["root".to_string()], 3.0));
    root.wait_for_line("ready ");
    thread::sleep(Duration::from_millis(1_500));
    killed_proc.kill();
    let kept_lines = kept_proc.finish();
    root.finish();
    for p in others {
        p.finish();
    }
    let lines = watch.finish();
    let text = lines.join("\n");

    let status = |live: &str| lines.iter().filter(|l| l.contains(live)).count();
    assert!(status("gateways 8/8") >= 2, "{text}");
    assert!(status("gateways 4/8") >= 2, "{text}");
    let silent: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(" silent for "))
        .collect();
    assert_eq!(silent.len(), killed.len(), "{text}");
    for name in killed {
        let event = format!("event gateway={name} silent");
        assert!(
            silent.iter().any(|l| l.starts_with(&event)),
            "{name}: {text}"
        );
    }
    assert!(
        text.contains("gateways: 8 of 8 reported; 4 silent at the end"),
        "{text}"
    );
    assert!(text.contains("lost on the way 0 reports"), "{text}");
    assert!(
        text.contains(
            "dropped: malformed 0, unknown_gateway 0, stale 0, other_session 0, out_of_range 0 \
             (and 0 reports numbered out of range, 0 from another address than their gateway's)"
        ),
        "{text}"
    );
    assert!(text.contains(" lost 0 (0.000%)"), "{text}");
    // Every record the kept gateways sent was taken (the killed ones' are uncounted).
    let total = kept_lines
        .iter()
        .find(|l| l.starts_with("total "))
        .map(|l| fields(l))
        .expect("a total line");
    assert_eq!(num(&total, "report_errors"), 0, "{total:?}");
    let input = lines
        .iter()
        .find(|l| l.starts_with("input: "))
        .expect("an input line");
    let records: u64 = input
        .split_whitespace()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{input}"));
    assert!(
        records >= num(&total, "report_records"),
        "{input} {total:?}"
    );
    for file in ["summary.txt", "cdf.csv", "oml_cdf.svg", "dws_cdf.svg"] {
        assert!(dir.join("watch").join(file).is_file(), "{file}");
    }
    println!("{text}");
}

/// Goal: a participant whose gateway starts after the market opened gets the book first, over
/// real UDP (`proto::snapshot`): the root sends it a snapshot of its engine's book, and the
/// gateway releases the stream exactly once, in order, from the first packet the snapshot
/// does not cover. Method: six gateways trade the paper's workload from the start; the root
/// publishes its feed; two more gateways start 1.2 s after the root. Each late one prints one
/// `book_snapshot` event with resting orders in it, and releases every packet from its
/// first to the root's last once, in order; the early ones still release every packet from 1.
#[test]
fn a_gateway_that_starts_late_gets_the_book_first() {
    let dir = scratch("late-gateway");
    let (path, config) = write_config(&dir, 8, 4, &[], 39_000);
    let gateways = names(&config, Role::Gateway);
    let (early, late) = gateways.split_at(gateways.len() - 2);
    let trading = |mut command: Command| {
        command.args(["--orders", "200"]);
        command
    };
    let mut procs = vec![Proc::spawn(
        "gateways-early",
        trading(node_command(&[], &path, early, 5.0)),
    )];
    for proxy in names(&config, Role::Proxy) {
        procs.push(Proc::spawn(
            &proxy,
            node_command(&[], &path, std::slice::from_ref(&proxy), 4.5),
        ));
    }
    for p in &mut procs {
        p.wait_for_line("ready ");
    }
    let mut root = Proc::spawn("root", node_command(&[], &path, &["root".to_string()], 3.0));
    root.wait_for_line("ready ");
    thread::sleep(Duration::from_millis(1_200));
    let mut late_proc = Proc::spawn(
        "gateways-late",
        trading(node_command(&[], &path, late, 3.0)),
    );
    late_proc.wait_for_line("ready ");
    procs.push(root);
    procs.push(late_proc);
    let outputs: Vec<Vec<String>> = procs.into_iter().map(Proc::finish).collect();
    let summaries = summaries(&outputs);
    check_exactly_once(&summaries, early);
    let packets = num(&summaries["root"], "packets");
    for name in late {
        let g = &summaries[name];
        let snapshots: Vec<BTreeMap<String, String>> = outputs
            .iter()
            .flatten()
            .filter(|l| l.starts_with(&format!("event node={name} book_snapshot ")))
            .map(|l| fields(l))
            .collect();
        assert_eq!(snapshots.len(), 1, "{name}: one snapshot");
        assert!(
            num(&snapshots[0], "orders") > 0,
            "{name}: {:?}",
            snapshots[0]
        );
        let first = num(g, "first");
        assert!(first > 1, "{name} joined late: {g:?}");
        assert_eq!(first, num(&snapshots[0], "stream_from"), "{name}");
        assert_eq!(num(g, "last"), packets, "{name}: {g:?}");
        assert_eq!(num(g, "released"), packets - first + 1, "{name}: {g:?}");
        assert_eq!(num(g, "out_of_order"), 0, "{name}: {g:?}");
        assert_eq!(num(g, "repeats"), 0, "{name}: {g:?}");
        assert_eq!(num(g, "skipped"), 0, "{name}: {g:?}");
        assert_eq!(num(g, "snapshots"), 1, "{name}: {g:?}");
        println!(
            "{name}: snapshot of {} orders, released {first}..={packets}",
            num(&snapshots[0], "orders")
        );
    }
}

/// Goal: a root started again without its journal is followed by the running proxies and
/// gateways, over real UDP: it starts a new session (`session_of_start`), which each takes
/// once the old stream has been silent for `parent_timeout`; each gateway starts its book
/// over from the new root's (a snapshot), and its participant trades on with the new root.
/// Under one session they all dropped the new stream as old until restarted themselves.
/// Method: gateways trading the paper's workload and the proxies run for 6 s; the root is
/// killed 1.5 s after it started and another root process starts 0.5 s later.
#[test]
fn a_root_started_again_without_its_journal_is_followed() {
    let dir = scratch("root-again");
    let (path, config) = write_config(&dir, 8, 4, &[], 40_000);
    let gateways = names(&config, Role::Gateway);
    let (left, right) = gateways.split_at(gateways.len() / 2);
    let mut procs = Vec::new();
    for (label, ids) in [("gateways-a", left), ("gateways-b", right)] {
        let mut command = node_command(&[], &path, ids, 6.0);
        command.args(["--orders", "200"]);
        procs.push(Proc::spawn(label, command));
    }
    let proxies = names(&config, Role::Proxy);
    procs.push(Proc::spawn(
        "proxies",
        node_command(&[], &path, &proxies, 5.5),
    ));
    for p in &mut procs {
        p.wait_for_line("ready ");
    }
    let root = ["root".to_string()];
    let mut first = Proc::spawn("root-1", node_command(&[], &path, &root, 4.0));
    first.wait_for_line("ready ");
    thread::sleep(Duration::from_millis(1_500));
    first.kill();
    thread::sleep(Duration::from_millis(500));
    let mut second = Proc::spawn("root-2", node_command(&[], &path, &root, 2.5));
    second.wait_for_line("ready ");
    procs.push(second);
    let outputs: Vec<Vec<String>> = procs.into_iter().map(Proc::finish).collect();
    let summaries = summaries(&outputs);
    let lines: Vec<&String> = outputs.iter().flatten().collect();
    let sessions_of = |name: &str, what: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.starts_with(&format!("event node={name} {what} ")))
            .map(|l| fields(l)["session"].clone())
            .collect()
    };
    let last_session = sessions_of(&gateways[0], "session_started")
        .last()
        .cloned()
        .expect("a session");
    for name in gateways.iter().chain(&proxies) {
        // Every node starts under the configured session and joins the first root's, which
        // is its start time's: not a new stream, as nothing of the configured one was heard.
        let joined = sessions_of(name, "session_joined");
        let started = sessions_of(name, "session_started");
        assert_eq!(joined.len(), 1, "{name}: {joined:?}");
        // Then the second root's, which is one.
        assert_eq!(started.len(), 1, "{name}: {started:?}");
        assert_ne!(joined[0], started[0], "{name}");
        assert_eq!(started[0], last_session, "{name}");
    }
    for name in &gateways {
        let at = |what: &str| {
            lines
                .iter()
                .rposition(|l| l.starts_with(&format!("event node={name} {what}")))
        };
        assert!(
            at("book_snapshot") > at("session_started"),
            "{name} started its book over after the new session"
        );
        assert_eq!(num(&summaries[name], "out_of_order"), 0, "{name}");
    }
    let root = &summaries["root"];
    assert!(
        num(root, "packets") > 100,
        "the second root published: {root:?}"
    );
    assert!(num(root, "sequenced") > 100, "and traded: {root:?}");
}

/// Goal: trust model 2: a gateway with an `external` address forwards every packet it
/// releases, in order and once, to the participant's own program there (the address was
/// checked and then ignored). Method: a cluster on loopback whose first gateway forwards to
/// a socket of this test; the whole cluster in one process; every datagram the socket gets
/// is a market-data packet from that gateway's address, numbered 1, 2, 3, ..., as many as
/// the gateway's summary says it released.
#[test]
fn a_gateway_forwards_its_releases_to_the_participants_program() {
    let dir = scratch("external");
    let program = UdpSocket::bind("127.0.0.1:0").unwrap();
    program
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (path, mut config) = write_config(&dir, 4, 2, &[], 38_000);
    let gateway = config
        .nodes
        .iter_mut()
        .find(|n| n.role == Role::Gateway)
        .unwrap();
    gateway.external = Some(program.local_addr().unwrap());
    let (name, from) = (gateway.name.clone(), gateway.addr);
    config.validate().unwrap();
    std::fs::write(&path, config.to_toml()).unwrap();
    let mut command = Command::new(JASPER);
    command
        .arg("node")
        .arg("--config")
        .arg(&path)
        .args(["--all", "--duration", "3", "--status-interval", "0"])
        .args(["--rate", "4000", "--warmup", "0.5", "--publish-for", "2"]);
    let proc = Proc::spawn("cluster", command);
    let receiver = thread::spawn(move || {
        let mut seqs = Vec::new();
        let mut buf = [0u8; 2048];
        let mut idle = 0;
        while idle < 5 {
            match program.recv_from(&mut buf) {
                Ok((len, source)) => {
                    idle = 0;
                    assert_eq!(source, from, "from the gateway");
                    let data = wire::parse_market_data(&buf[..len]).expect("market data");
                    seqs.push(data.header.packet_seq);
                }
                Err(_) => idle += 1,
            }
        }
        seqs
    });
    let outputs = vec![proc.finish()];
    let seqs = receiver.join().unwrap();
    let summaries = summaries(&outputs);
    let released = num(&summaries[&name], "released");
    assert!(released > 100, "{:?}", summaries[&name]);
    assert_eq!(seqs.len() as u64, released, "every release, once");
    assert!(
        seqs.iter().enumerate().all(|(i, &s)| s == i as u64 + 1),
        "in order from 1"
    );
}

#[test]
fn killing_a_proxy_loses_nothing_and_its_sibling_reports_it() {
    let dir = scratch("kill-proxy");
    let (path, config) = write_config(&dir, 8, 4, &[], 32_000);
    let mut procs = start_cluster(&[], &path, &config);
    // Mid-publication: the root started publishing 0.5 s after it was ready.
    thread::sleep(Duration::from_millis(1_200));
    let victim = procs
        .iter_mut()
        .find(|p| p.label == "p1.0")
        .expect("p1.0 runs");
    victim.kill();
    let victim_lines = victim.lines();
    let outputs: Vec<Vec<String>> = procs
        .into_iter()
        .filter(|p| p.label != "p1.0")
        .map(Proc::finish)
        .collect();
    assert!(
        !victim_lines.iter().any(|l| l.starts_with("summary ")),
        "the victim died before its summary"
    );
    let summaries = summaries(&outputs);
    let packets = check_exactly_once(&summaries, &names(&config, Role::Gateway));
    let survivor = &summaries["p1.1"];
    assert_eq!(num(survivor, "forwarded"), packets);
    // The sibling watching p1.0 reports it failed, and it stays failed.
    let sibling_events: Vec<&String> = outputs
        .iter()
        .flatten()
        .filter(|l| l.starts_with("event node=p1.1 ") && l.contains("watched=p1.0"))
        .collect();
    let last = sibling_events.last().expect("p1.1 reported on p1.0");
    assert!(last.contains("failure_detected"), "{sibling_events:?}");
    // Its home children move to p1.1, each once.
    let orphans = home_gateways(&config, "p1.0").len();
    let moved: Vec<&String> = outputs
        .iter()
        .flatten()
        .filter(|l| l.contains(" parent_changed from=p1.0 to=p1.1"))
        .collect();
    assert!(orphans > 0);
    assert_eq!(moved.len(), orphans, "{moved:?}");
    let sibling = node_id(&config, "p1.1");
    let adopted = summaries
        .values()
        .filter(|s| s.get("role").is_some_and(|r| r == "gateway"))
        .filter(|s| num(s, "parent") == sibling as u64)
        .count();
    assert_eq!(
        adopted,
        2 * orphans,
        "p1.1's own children and the orphans end under it"
    );
    let total_recovered: u64 = names(&config, Role::Gateway)
        .iter()
        .map(|g| num(&summaries[g], "recovered"))
        .sum();
    println!("{packets} packets, none lost; {total_recovered} recovered by retransmission");
}

/// Goal: a proxy process that dies and is started again gets its children back, and nobody
/// misses a packet. Its home children fail over to its sibling, then return to it once it has
/// been heard for `parent_timeout`. Method: the cluster above; p1.0 killed 0.9 s after the
/// root is ready (mid-publication) and a new p1.0 process started 0.4 s later.
#[test]
fn a_restarted_proxy_gets_its_children_back() {
    let dir = scratch("restart-proxy");
    let (path, config) = write_config(&dir, 8, 4, &[], 37_000);
    let mut procs = start_cluster(&[], &path, &config);
    thread::sleep(Duration::from_millis(900));
    let index = procs
        .iter()
        .position(|p| p.label == "p1.0")
        .expect("p1.0 runs");
    procs[index].kill();
    thread::sleep(Duration::from_millis(400));
    let mut again = Proc::spawn(
        "p1.0 again",
        node_command(&[], &path, &["p1.0".to_string()], 2.5),
    );
    again.wait_for_line("ready ");
    procs.remove(index);
    procs.push(again);
    let outputs: Vec<Vec<String>> = procs.into_iter().map(Proc::finish).collect();
    let summaries = summaries(&outputs);
    check_exactly_once(&summaries, &names(&config, Role::Gateway));
    let dead = node_id(&config, "p1.0");
    let orphans = home_gateways(&config, "p1.0");
    assert!(!orphans.is_empty());
    let events: Vec<&String> = outputs
        .iter()
        .flatten()
        .filter(|l| l.contains(" parent_changed "))
        .collect();
    for name in &orphans {
        let moves: Vec<&&String> = events
            .iter()
            .filter(|l| l.starts_with(&format!("event node={name} ")))
            .collect();
        assert_eq!(moves.len(), 2, "{name}: {events:?}");
        assert!(moves[0].contains("from=p1.0 to=p1.1"), "{name}: {events:?}");
        assert!(moves[1].contains("from=p1.1 to=p1.0"), "{name}: {events:?}");
    }
    assert_eq!(
        events.len(),
        2 * orphans.len(),
        "nobody else moves: {events:?}"
    );
    for name in &orphans {
        assert_eq!(
            num(&summaries[*name], "parent"),
            dead as u64,
            "{name} is home"
        );
    }
}

/// One datagram of each hostile kind.
fn hostile_datagrams(packet_bytes: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let session = NodeConfig::default().session().unwrap();
    let mut heartbeat = [0u8; 64];
    let len = Control::Heartbeat { sender: 1, seq: 7 }
        .emit(&mut heartbeat)
        .unwrap();
    let mut request = [0u8; 64];
    let request_len = Control::RetransmitRequest {
        requester: 3,
        session,
        sequence: 1,
        count: 10,
    }
    .emit(&mut request)
    .unwrap();
    let garbage: Vec<u8> = (0..200u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    vec![
        ("empty", Vec::new()),
        ("garbage", garbage),
        ("truncated", packet_bytes[..20].to_vec()),
        ("forged-market-data", packet_bytes.to_vec()),
        ("spoofed-heartbeat", heartbeat[..len].to_vec()),
        ("spoofed-retransmit", request[..request_len].to_vec()),
    ]
}

/// A valid market-data packet (packet_seq 3, one Add Order) as the root would send it.
fn forged_packet() -> Vec<u8> {
    let session = NodeConfig::default().session().unwrap();
    let mut buf = vec![0u8; wire::mold::PAYLOAD_MAX];
    let mut builder = wire::MarketDataBuilder::new(&mut buf, session, 5);
    let add = wire::itch::AddOrder {
        stock_locate: 1,
        tracking_number: 0,
        timestamp_ns: 1,
        order_ref: 999_999,
        side: wire::Side::Buy,
        shares: 1,
        stock: wire::Stock::new("EVIL").unwrap(),
        price: 1,
    };
    builder.push(&add).unwrap();
    let header = wire::JasperHeader {
        packet_seq: 3,
        send_time: wire::ExchangeTime::from_nanos(1),
        deadline: wire::ExchangeTime::from_nanos(2),
        flags: 0,
    };
    let len = builder.finish(&header).unwrap();
    buf.truncate(len);
    buf
}

#[test]
fn hostile_datagrams_are_counted_and_dropped_and_the_stream_goes_on() {
    let dir = scratch("hostile");
    let (path, config) = write_config(&dir, 8, 4, &[], 33_000);
    // Every node but g7 runs, in two processes (the root stops first); the test owns g7's address (an insider the
    // plan knows) and an address the plan does not know (a stranger).
    let insider_entry = config.find("g7").unwrap().clone();
    let running: Vec<String> = config
        .nodes
        .iter()
        .filter(|n| n.name != "g7")
        .map(|n| n.name.clone())
        .collect();
    let insider = UdpSocket::bind(insider_entry.addr).unwrap();
    let stranger = UdpSocket::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)).unwrap();
    let others: Vec<String> = running.iter().filter(|n| *n != "root").cloned().collect();
    let mut cluster = Proc::spawn("cluster", node_command(&[], &path, &others, 4.5));
    cluster.wait_for_line("ready ");
    let mut root = Proc::spawn("root", node_command(&[], &path, &["root".into()], 3.0));
    root.wait_for_line("ready ");
    thread::sleep(Duration::from_millis(900));

    let kinds = hostile_datagrams(&forged_packet());
    let oversized = vec![0x41u8; 9_000];
    let targets: Vec<SocketAddr> = config
        .nodes
        .iter()
        .filter(|n| n.name != "g7")
        .map(|n| n.addr)
        .collect();
    for round in 0..3 {
        for target in &targets {
            for (_, bytes) in &kinds {
                stranger.send_to(bytes, target).unwrap();
                insider.send_to(bytes, target).unwrap();
            }
            stranger.send_to(&oversized, target).unwrap();
            insider.send_to(&oversized, target).unwrap();
        }
        thread::sleep(Duration::from_millis(100 + 50 * round));
    }
    let outputs = vec![root.finish(), cluster.finish()];
    let summaries = summaries(&outputs);
    let gateways: Vec<String> = names(&config, Role::Gateway)
        .into_iter()
        .filter(|g| g != "g7")
        .collect();
    check_exactly_once(&summaries, &gateways);
    // Each node says once that datagrams came from an address its config does not have,
    // naming the stranger's (the insider's are from a node of the config).
    let stranger_addr = stranger.local_addr().unwrap().to_string();
    for name in &running {
        let prefix = format!("warning: node {name} got ");
        let warned: Vec<&String> = outputs
            .iter()
            .flatten()
            .filter(|l| l.starts_with(&prefix))
            .collect();
        assert_eq!(warned.len(), 1, "{name}: {warned:?}");
        assert!(
            warned[0].contains(&format!("the first from {stranger_addr}:")),
            "{}",
            warned[0]
        );
    }

    // Per target: 3 rounds of every kind. A stranger's datagrams never reach a node; an
    // insider's each cost exactly one drop at the node. The two control kinds (spoofed
    // heartbeat, retransmission request) end as `unexpected`, which a proxy also counts for
    // its children's legitimate clock probes until it has synced itself; every other reason
    // only hostile datagrams produce.
    let per_target = 3 * kinds.len() as u64;
    let control_per_target = 3 * 2;
    let (mut unknown, mut truncated) = (0, 0);
    for name in &running {
        let s = &summaries[name];
        unknown += num(s, "unknown_source");
        truncated += num(s, "truncated");
        let d = drops(s);
        let hostile = d["malformed"] + d["unknown_sender"] + d["unexpected"] + d["wrong_session"];
        if s["role"] == "proxy" {
            assert!(hostile >= per_target, "{name}: {d:?}");
            assert_eq!(
                hostile - d["unexpected"],
                per_target - control_per_target,
                "{name}: {d:?}"
            );
        } else {
            assert_eq!(hostile, per_target, "{name}: {d:?}");
        }
    }
    let nodes = targets.len() as u64;
    assert_eq!(
        unknown,
        per_target * nodes,
        "every stranger datagram dropped before the node"
    );
    assert_eq!(
        truncated,
        2 * 3 * nodes,
        "every oversized datagram dropped, from either source"
    );
}

/// Goal: a node whose parent never answers (not running, or running another config) says so
/// once its clock has gone 5 s unsynced, naming the parent and its address. Method: g0 alone,
/// 5.6 s.
#[test]
fn a_node_whose_parent_never_answers_says_so() {
    let dir = scratch("orphan");
    let (path, config) = write_config(&dir, 4, 2, &[], 33_200);
    let plan = Plan::new(&config.plan).unwrap();
    let parent = plan
        .home_parent(proto::NodeId(node_id(&config, "g0")))
        .unwrap();
    let parent = &config.nodes[parent.0 as usize];
    let out = Proc::spawn("g0", node_command(&[], &path, &["g0".into()], 5.6)).finish();
    let warned: Vec<&String> = out
        .iter()
        .filter(|l| l.starts_with("warning: node g0's clock has not synced after 5 s"))
        .collect();
    assert_eq!(warned.len(), 1, "{out:?}");
    assert!(
        warned[0].contains(&format!("its parent {} ({})", parent.name, parent.addr)),
        "{}",
        warned[0]
    );
}

/// Goal: a root paused (SIGSTOP) for 2.5 s is said of at the gateways: a warning that the
/// stream stopped reaching them, then an event when it came back. Method: 4 participants;
/// the root stopped 1.5 s after the gateways' process is ready, continued 2.5 s later.
#[test]
fn gateways_say_when_the_stream_stops_and_comes_back() {
    let dir = scratch("paused-root");
    let (path, config) = write_config(&dir, 4, 2, &[], 33_400);
    let mut root = Proc::spawn("root", node_command(&[], &path, &["root".into()], 7.0));
    root.wait_for_line("ready ");
    let others: Vec<String> = config
        .nodes
        .iter()
        .filter(|n| n.name != "root")
        .map(|n| n.name.clone())
        .collect();
    let mut rest = Proc::spawn("rest", node_command(&[], &path, &others, 6.5));
    rest.wait_for_line("ready ");
    thread::sleep(Duration::from_millis(1_500));
    let pid = root.child.id().to_string();
    let signal = |which: &str| {
        let status = Command::new("kill").args([which, &pid]).status().unwrap();
        assert!(status.success(), "kill {which}");
    };
    signal("-STOP");
    thread::sleep(Duration::from_millis(2_500));
    signal("-CONT");
    let out = rest.finish();
    root.finish();
    let gateways = names(&config, Role::Gateway);
    let stopped: Vec<&String> = out
        .iter()
        .filter(|l| l.contains("released nothing since the last status line"))
        .collect();
    assert_eq!(stopped.len(), 1, "said once: {out:?}");
    assert!(stopped[0].contains(&gateways.join(",")), "{}", stopped[0]);
    let resumed: Vec<&String> = out
        .iter()
        .filter(|l| l.starts_with("event stream_resumed "))
        .collect();
    assert_eq!(resumed.len(), 1, "{out:?}");
    assert_eq!(fields(resumed[0])["count"], gateways.len().to_string());
}

/// Network namespaces: one per node, each with its own address on a bridge that lives in
/// a hub namespace (nothing is added to the host's own namespace). Deleted on drop.
struct Namespaces {
    hub: String,
    nodes: Vec<String>,
}

impl Namespaces {
    fn ip(args: &[&str]) -> Result<(), String> {
        let out = Command::new("ip")
            .args(args)
            .output()
            .map_err(|e| format!("ip {args:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }

    fn create(tag: &str, addrs: &[Ipv4Addr]) -> Result<Self, String> {
        let hub = format!("jh{tag}");
        let mut spaces = Self {
            hub: hub.clone(),
            nodes: Vec::new(),
        };
        Self::ip(&["netns", "add", &hub])?;
        Self::ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        Self::ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for (i, addr) in addrs.iter().enumerate() {
            let ns = format!("jn{tag}x{i}");
            Self::ip(&["netns", "add", &ns])?;
            spaces.nodes.push(ns.clone());
            let (inner, outer) = (format!("v{i}"), format!("h{i}"));
            Self::ip(&[
                "-n", &hub, "link", "add", &outer, "type", "veth", "peer", "name", &inner, "netns",
                &ns,
            ])?;
            Self::ip(&["-n", &hub, "link", "set", &outer, "master", "br0"])?;
            Self::ip(&["-n", &hub, "link", "set", &outer, "up"])?;
            let cidr = format!("{addr}/24");
            Self::ip(&["-n", &ns, "addr", "add", &cidr, "dev", &inner])?;
            Self::ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            Self::ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(spaces)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.hub]) {
            let _ = Self::ip(&["netns", "del", ns]);
        }
    }
}

fn namespaces_unavailable() -> Option<String> {
    let uid = Command::new("id").arg("-u").output();
    match uid {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == "0" => {}
        Ok(_) => return Some("not running as root".into()),
        Err(e) => return Some(format!("cannot run `id -u`: {e}")),
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("the `ip` tool is missing".into()),
    }
}

#[test]
fn cluster_across_network_namespaces_releases_every_packet_once() {
    if let Some(reason) = namespaces_unavailable() {
        println!("SKIPPED cluster_across_network_namespaces: {reason}");
        return;
    }
    let tag = format!("{}", std::process::id() % 100_000);
    let dir = scratch("netns");
    let plan_nodes = 1 + 2 + 4;
    let addrs: Vec<Ipv4Addr> = (0..plan_nodes)
        .map(|i| Ipv4Addr::new(10, 213, 7, 10 + i as u8))
        .collect();
    let hosts: Vec<IpAddr> = addrs.iter().map(|a| IpAddr::V4(*a)).collect();
    let (path, config) = write_config(&dir, 4, 2, &hosts, 34_000);
    let spaces = match Namespaces::create(&tag, &addrs) {
        Ok(spaces) => spaces,
        Err(reason) => {
            println!("SKIPPED cluster_across_network_namespaces: {reason}");
            return;
        }
    };
    // The operator's watch on the root's host: each gateway's reports cross the bridge from
    // its own namespace, and must come from its own address (the watch leaves out any other).
    let monitor = format!("{}:34900", addrs[0]);
    let mut watch = Command::new("ip");
    watch
        .args(["netns", "exec", spaces.nodes[0].as_str(), JASPER, "watch"])
        .args([
            "--listen",
            monitor.as_str(),
            "--duration",
            "6",
            "--warmup",
            "0.3",
        ])
        .arg("--config")
        .arg(&path)
        .arg("--out")
        .arg(dir.join("watch"));
    let mut watch = Proc::spawn("watch", watch);
    watch.wait_for_line("watching 4 gateways");
    let mut procs = Vec::new();
    // One process per node, each in the namespace that holds its address; root last.
    let order: Vec<usize> = (1..config.nodes.len()).rev().chain([0]).collect();
    for i in order {
        let entry = &config.nodes[i];
        let ns = spaces.nodes[hosts.iter().position(|h| *h == entry.addr.ip()).unwrap()].clone();
        let duration = match entry.role {
            Role::Root => 3.0,
            Role::Proxy => 4.5,
            Role::Gateway => 5.0,
        };
        let prefix = ["ip", "netns", "exec", ns.as_str()];
        let mut command = node_command(&prefix, &path, std::slice::from_ref(&entry.name), duration);
        if entry.role == Role::Gateway {
            command.args(["--monitor", monitor.as_str()]);
        }
        let mut p = Proc::spawn(&entry.name, command);
        p.wait_for_line("ready ");
        procs.push(p);
    }
    let outputs: Vec<Vec<String>> = procs.into_iter().map(Proc::finish).collect();
    let summaries = summaries(&outputs);
    let packets = check_exactly_once(&summaries, &names(&config, Role::Gateway));
    let text = watch.finish().join("\n");
    drop(spaces);
    assert!(text.contains("gateways: 4 of 4 reported"), "{text}");
    assert!(
        text.contains("0 from another address than their gateway's"),
        "{text}"
    );
    assert!(text.contains("lost on the way 0 reports"), "{text}");
    assert!(text.contains(" lost 0 (0.000%)"), "{text}");
    println!("{packets} packets across {plan_nodes} namespaces, every gateway watched");
}
