//! `jasper watch`: the operator's live view of latency and fairness across a deployment.
//!
//! The gateways of every `jasper node --monitor ADDR` report each release to this process
//! ([`wire::report`], [`net::monitor`]). A packet's OML and DWS need every gateway's release
//! of it (DESIGN.md §5), which no single node knows; here they meet. Every status interval it
//! prints a line over the packets every live gateway released in that interval; at the end
//! (Ctrl-C, SIGTERM or `--duration`), a summary after the warm-up through the same
//! [`Metrics`] as `jasper up` and `jasper sim`, and `summary.txt`, `cdf.csv` and CDF plots in
//! `--out`.
//!
//! Times are the gateways' exchange time (their clocks synced to the root's): a deployment
//! over many hosts shares no other clock, so DWS here includes the clocks' sync error
//! (`jasper sim` reports both clocks and shows how far apart they are).
//!
//! Untrusted input: a datagram that is not a report is counted (`malformed`), a report from a
//! node that is not a gateway of the config is counted (`unknown_gateway`), and a record at or
//! below a gateway's last reported packet (a repeat, or reordered on the way) is counted
//! (`stale`); none of them reaches the figures. A gateway silent for `--silent-after` while
//! others report is taken for dead: packets no longer wait for it (its later packets count for the gateways alive,
//! as `jasper up --kill` counts a killed one), and it is measured again when it reports again.
//! A report of another session (a root started again without its journal) is counted until the
//! session watched has been silent for `--silent-after`; then its summary is printed and the
//! new one is watched from scratch.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use net::Deployment;
use net::monitor::{Listener, Received};
use proto::NodeId;
use proto::plan::Role as PlanRole;
use sim::metrics::{Mark, Metrics, MetricsConfig, ReleaseSample};
use sim::report::Clocks;
use wire::Session;
use wire::report::ReleaseRecord;

use crate::spans::{BlameByGateway, Figures, Spans, add_blame, ranked};
use crate::up::{figures_text, participants_text};

/// Arguments of `jasper watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// The cluster config `jasper plan` wrote: which gateways to expect, and their names.
    #[arg(long)]
    pub(crate) config: PathBuf,
    /// Where to listen for the gateways' reports (`jasper node --monitor` with this
    /// address), e.g. `0.0.0.0:9900`.
    #[arg(long)]
    pub(crate) listen: SocketAddr,
    /// Stop after this many seconds (default: on Ctrl-C or SIGTERM).
    #[arg(long, value_parser = crate::up::parse_seconds)]
    pub(crate) duration: Option<f64>,
    /// Seconds from the first report before the summary starts measuring (clock sync and
    /// the OWD reports settle meanwhile).
    #[arg(long, default_value_t = 1.0, value_parser = crate::up::parse_seconds)]
    pub(crate) warmup: f64,
    /// Seconds between status lines.
    #[arg(long, default_value_t = 1.0, value_parser = crate::up::parse_interval)]
    pub(crate) status_interval: f64,
    /// Seconds without a report after which a gateway is taken for dead.
    #[arg(long, default_value_t = 2.0, value_parser = crate::up::parse_interval)]
    pub(crate) silent_after: f64,
    /// Take reports from any address. By default a gateway's reports are taken only from
    /// its host's address in the config (as the nodes take datagrams only from the config's
    /// addresses); a monitor that the gateways reach through NAT, or through another
    /// interface than the one of their config address, sees other sources.
    #[arg(long)]
    pub(crate) any_source: bool,
    /// Directory for `summary.txt`, `cdf.csv`, `oml_cdf.svg` and `dws_cdf.svg`.
    #[arg(long, default_value = "out/watch")]
    pub(crate) out: PathBuf,
}

/// A session's name for people and file names: its letters and digits (a report's session
/// is 10 bytes off the network; anything else shows as `_`), spaces at the end cut.
fn session_name(session: Session) -> String {
    let padded = session.0.iter().rev().take_while(|&&b| b == b' ').count();
    session.0[..session.0.len() - padded]
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() {
                b as char
            } else {
                '_'
            }
        })
        .collect()
}

/// How long one wait for a report lasts at most.
const RECV_WAIT: Duration = Duration::from_millis(10);

pub(crate) fn run(args: &WatchArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let deployment =
        Deployment::from_toml(&text).with_context(|| format!("in {}", args.config.display()))?;
    let gateways: BTreeMap<u32, String> = deployment
        .config()
        .nodes
        .iter()
        .enumerate()
        .filter(|&(id, _)| deployment.role(NodeId(id as u32)) == Some(PlanRole::Gateway))
        .map(|(id, node)| (id as u32, node.name.clone()))
        .collect();
    anyhow::ensure!(
        !gateways.is_empty(),
        "{} plans no gateway",
        args.config.display()
    );
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut listener =
        Listener::bind(args.listen).with_context(|| format!("listening on {}", args.listen))?;
    println!(
        "watching {} gateways on {}; Ctrl-C to stop",
        gateways.len(),
        listener.local_addr()?
    );
    // Linux reports twice what it grants; below the ask, bursts of reports may overflow.
    if listener.recv_buffer() / 2 < net::monitor::LISTENER_RECV_BUFFER {
        eprintln!(
            "warning: the kernel granted a receive buffer of {} KiB of the {} KiB asked \
             (net.core.rmem_max): reports that overflow it are lost, and show as such; \
             `sysctl -w net.core.rmem_max={}` raises it",
            listener.recv_buffer() / 2 / 1024,
            net::monitor::LISTENER_RECV_BUFFER / 1024,
            net::monitor::LISTENER_RECV_BUFFER
        );
    }
    std::io::stdout().flush()?;

    let stop = net::stop_on_signals()?;
    let started = net::clock::now_ns();
    let nanos = |s: f64| Duration::from_secs_f64(s).as_nanos() as u64;
    let end = args.duration.map(|s| started.saturating_add(nanos(s)));
    let interval = nanos(args.status_interval);
    let mut watch = Watch::new(gateways, nanos(args.warmup), nanos(args.silent_after));
    // A gateway's reports come from its host, as the nodes take datagrams only from the
    // addresses of the config.
    if !args.any_source {
        watch.expect_sources(
            deployment
                .config()
                .nodes
                .iter()
                .map(|node| (node.id, node.addr.ip())),
        );
    }
    // With receiver hedging, also what each participant sees (the first of its gateways).
    let participant_of: Vec<u32> = deployment
        .plan()
        .nodes()
        .iter()
        .map(|node| node.participant.unwrap_or(u32::MAX))
        .collect();
    watch.group_by_participant(participant_of);
    let mut next_status = started + interval;
    loop {
        let now = net::clock::now_ns();
        if stop.load(Ordering::Relaxed) || end.is_some_and(|e| now >= e) {
            break;
        }
        if now >= next_status {
            watch.tick(now);
            println!("{}", watch.status_line(now - started, interval));
            std::io::stdout().flush()?;
            next_status += interval * ((now - next_status) / interval + 1);
        }
        // One timeout throughout (setting it is a system call): status lines, the end and
        // Ctrl-C are seen within it.
        let received = match listener.recv(RECV_WAIT) {
            Ok(received) => received,
            Err(e) => {
                eprintln!("error: receiving reports: {e}; stopping");
                break;
            }
        };
        match received {
            Received::Nothing => {}
            Received::Malformed(..) => watch.counts.malformed += 1,
            Received::Report(from, report) => {
                let now = net::clock::now_ns();
                if !watch.sent_by_its_host(report.gateway, from.ip())
                    || !watch.on_report(report.gateway, report.seq)
                {
                    continue;
                }
                for record in report.records() {
                    watch.on_record(now, report.gateway, report.session, &record);
                }
            }
        }
    }
    let text = watch.summary(&args.out)?;
    print!("{text}");
    std::fs::write(args.out.join("summary.txt"), &text)?;
    println!("results in {}", args.out.display());
    Ok(())
}

/// What the watch counted of its input.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    reports: u64,
    records: u64,
    malformed: u64,
    unknown_gateway: u64,
    stale: u64,
    other_session: u64,
    /// Reports missing from a gateway's numbers: lost on the way (the gateway's socket, the
    /// network, or this monitor's receive buffer). Their releases count as lost.
    reports_lost: u64,
    /// Reports that came after a later one of their gateway (their records count `stale`).
    reports_reordered: u64,
    /// Reports numbered more than [`REPORTS_AHEAD_MAX`] past their gateway's last: forged or
    /// corrupt, left out with their records.
    reports_out_of_range: u64,
    /// Reports for a gateway from another address than its host's: left out with their
    /// records.
    wrong_source: u64,
    /// Records numbered beyond any stream (from 2^62), or more than [`AHEAD_MAX`] packets
    /// past the highest reported: forged or corrupt, they would count as a billion lost.
    out_of_range: u64,
}

/// A report may be numbered at most this many past its gateway's last: ~29M releases lost
/// on the way, an hour of one gateway at 8,000 packets a second.
const REPORTS_AHEAD_MAX: u64 = 1 << 20;

/// A record may be at most this many packets past the highest one reported (20 s at 50K
/// packets a second).
const AHEAD_MAX: u64 = 1 << 20;

/// One gateway as the watch knows it.
#[derive(Clone, Debug)]
struct Gateway {
    name: String,
    /// Its last packet reported, and where the packet after it starts.
    last: Option<(u64, Mark)>,
    /// When its last report came (the watch's clock).
    heard_ns: Option<u64>,
    /// Taken for dead (silent for `silent_after`), not back yet.
    silent: bool,
    /// Back after a silence: the metrics expect it from this mark on.
    expected_from: Option<Mark>,
    /// The number of its last report (numbered by the process reporting, across sessions).
    last_report: Option<u64>,
    /// Its host's address in the config: its reports must come from there (when known).
    ip: Option<IpAddr>,
    /// Reports for it from another address (said once).
    wrong_source: u64,
    /// The number of its last report, when that was numbered out of range.
    jumped_to: Option<u64>,
}

/// The status line's interval.
#[derive(Debug, Default)]
struct Window {
    figures: Figures,
    late: u64,
    /// Packets some live gateway never reported within `silent_after`.
    incomplete: u64,
}

/// The gateways of the config by node id: a record's gateway is one index away (a map of
/// 1,000 gateways cost two searches a record, ~15% of the watch's time at N = 1000).
#[derive(Debug, Default)]
struct Gateways {
    by_id: Vec<Option<Gateway>>,
    len: usize,
}

impl Gateways {
    fn get_mut(&mut self, id: u32) -> Option<&mut Gateway> {
        self.by_id.get_mut(id as usize)?.as_mut()
    }

    fn contains(&self, id: u32) -> bool {
        self.by_id.get(id as usize).is_some_and(Option::is_some)
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Gateway `id`'s name (its id if it is none of the config's).
    fn name(&self, id: u32) -> String {
        self.by_id
            .get(id as usize)
            .and_then(Option::as_ref)
            .map_or_else(|| id.to_string(), |g| g.name.clone())
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = (u32, &Gateway)> {
        self.by_id
            .iter()
            .enumerate()
            .filter_map(|(id, g)| Some((id as u32, g.as_ref()?)))
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut Gateway)> {
        self.by_id
            .iter_mut()
            .enumerate()
            .filter_map(|(id, g)| Some((id as u32, g.as_mut()?)))
    }

    fn values(&self) -> impl Iterator<Item = &Gateway> {
        self.by_id.iter().flatten()
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Gateway> {
        self.by_id.iter_mut().flatten()
    }
}

impl std::ops::Index<u32> for Gateways {
    type Output = Gateway;

    fn index(&self, id: u32) -> &Gateway {
        self.by_id[id as usize]
            .as_ref()
            .expect("a gateway of the config")
    }
}

struct Watch {
    gateways: Gateways,
    session: Option<Session>,
    /// When the session watched was last reported.
    session_heard_ns: u64,
    warmup_ns: u64,
    silent_after_ns: u64,
    /// When the first report of the session came.
    first_heard_ns: Option<u64>,
    spans: Spans,
    window: Window,
    metrics: Option<Metrics>,
    /// Where measuring starts (the first packet the metrics count).
    measure_from: Option<Mark>,
    /// Where the packet after the highest one any gateway reported starts.
    highest: Option<Mark>,
    /// No gateway has reported for `silent_after` (said once).
    stream_silent: bool,
    /// Where the summary stopped measuring ([`Watch::end`]).
    measured_end: Option<Mark>,
    /// Gateways taken for dead now (kept: every record asks how many are alive).
    silent_count: u32,
    counts: Counts,
    /// Silences and returns, for the summary: (gateway, packet it went silent after or came
    /// back at, silent).
    changes: Vec<(u32, u64, bool)>,
    /// The summaries of the sessions watched before this one: (file name, text).
    earlier: Vec<(String, String)>,
    /// With receiver hedging: each node's participant (`u32::MAX` for none), and how many.
    participants: Option<(Vec<u32>, u32)>,
    /// Which gateways were at either end of the unfair packets measured (from
    /// `measure_from` on), of the status intervals closed so far.
    blame: BlameByGateway,
}

impl Watch {
    fn new(names: BTreeMap<u32, String>, warmup_ns: u64, silent_after_ns: u64) -> Self {
        let mut gateways = Gateways::default();
        for (id, name) in names {
            let id = id as usize;
            if gateways.by_id.len() <= id {
                gateways.by_id.resize_with(id + 1, || None);
            }
            gateways.len += usize::from(gateways.by_id[id].is_none());
            gateways.by_id[id] = Some(Gateway {
                name,
                last: None,
                heard_ns: None,
                silent: false,
                expected_from: None,
                last_report: None,
                ip: None,
                wrong_source: 0,
                jumped_to: None,
            });
        }
        Self {
            gateways,
            session: None,
            session_heard_ns: 0,
            warmup_ns,
            silent_after_ns,
            first_heard_ns: None,
            spans: Spans::with_slots(crate::spans::WATCH_SLOTS),
            window: Window::default(),
            metrics: None,
            measure_from: None,
            highest: None,
            stream_silent: false,
            measured_end: None,
            silent_count: 0,
            counts: Counts::default(),
            changes: Vec::new(),
            earlier: Vec::new(),
            participants: None,
            blame: BlameByGateway::new(),
        }
    }

    /// Measures what each participant sees too when some have two gateways (receiver
    /// hedging): `of` is each node id's participant, `u32::MAX` for nodes serving none.
    fn group_by_participant(&mut self, of: Vec<u32>) {
        let served = |&&p: &&u32| p != u32::MAX;
        let count = of.iter().filter(served).max().map_or(0, |&p| p + 1);
        let gateways = of.iter().filter(served).count();
        if (count as usize) < gateways {
            self.participants = Some((of, count));
        }
    }

    /// Gateways a packet waits for: those not taken for dead, including those not heard yet
    /// (one is taken for dead once others have been heard for `silent_after` without it).
    fn live(&self) -> u32 {
        debug_assert_eq!(
            self.silent_count,
            self.gateways.values().filter(|g| g.silent).count() as u32
        );
        self.gateways.len() as u32 - self.silent_count
    }

    /// Each node's address in the config, `(id, ip)`: a gateway's reports must come from its
    /// own (see [`Watch::sent_by_its_host`]).
    fn expect_sources(&mut self, ips: impl Iterator<Item = (u32, IpAddr)>) {
        for (id, ip) in ips {
            if let Some(g) = self.gateways.get_mut(id) {
                g.ip = Some(ip);
            }
        }
    }

    /// Whether a report for `gateway` from `ip` may be taken: from the gateway's host, as
    /// the config has it (a node takes datagrams only from the addresses of the config, and
    /// a report from elsewhere is forged, or a host that sends from another address: said
    /// once, counted, left out). A gateway not of the config is counted by the records.
    fn sent_by_its_host(&mut self, gateway: u32, ip: IpAddr) -> bool {
        let Some(g) = self.gateways.get_mut(gateway) else {
            return true;
        };
        // (An IPv4 report on a dual-stack listener comes from `::ffff:a.b.c.d`.)
        if g.ip
            .is_none_or(|expected| expected.to_canonical() == ip.to_canonical())
        {
            return true;
        }
        if g.wrong_source == 0 {
            println!(
                "event gateway={} reports from {ip}, not its address {}: left out (forged, or \
                 its host reaches this monitor through NAT or another interface: then run \
                 the watch with --any-source)",
                g.name,
                g.ip.expect("checked above"),
            );
        }
        g.wrong_source += 1;
        self.counts.wrong_source += 1;
        false
    }

    /// Report number `seq` of `gateway` came: a gap in the numbers is reports lost on the
    /// way, a number back to 1 a new reporting process. Returns false for a number more than
    /// [`REPORTS_AHEAD_MAX`] past the gateway's last (forged or corrupt: it would count as
    /// billions lost), whose records are then left out, unless the next report follows it
    /// (the gap was real: this monitor stopped, or was cut off, for that long).
    fn on_report(&mut self, gateway: u32, seq: u64) -> bool {
        self.counts.reports += 1;
        let Some(g) = self.gateways.get_mut(gateway) else {
            return true;
        };
        let jumped = g.jumped_to.take();
        match g.last_report {
            Some(last)
                if seq > last.saturating_add(REPORTS_AHEAD_MAX)
                    && jumped.is_none_or(|j| seq != j.saturating_add(1)) =>
            {
                g.jumped_to = Some(seq);
                self.counts.reports_out_of_range += 1;
                return false;
            }
            Some(last) if seq > last => {
                self.counts.reports_lost = self.counts.reports_lost.saturating_add(seq - last - 1);
            }
            Some(_) if seq == 1 => {}
            Some(_) => {
                // Counted lost when the later one came.
                self.counts.reports_lost = self.counts.reports_lost.saturating_sub(1);
                self.counts.reports_reordered += 1;
                return true;
            }
            None => {}
        }
        g.last_report = Some(seq);
        true
    }

    fn on_record(&mut self, now: u64, gateway: u32, session: Session, r: &ReleaseRecord) {
        self.counts.records += 1;
        if !self.gateways.contains(gateway) {
            if self.counts.unknown_gateway == 0 {
                // Said once: the figures of a watch given another deployment's config would
                // put its gateways' releases under this config's names.
                println!(
                    "warning: a report from gateway id {gateway}, which the config does not \
                     have (its {} gateways): is --config the config of the deployment \
                     reporting here? Reports from ids it does not have are left out (counted \
                     unknown_gateway), and a deployment of another plan would put its \
                     gateways' releases under this config's names",
                    self.gateways.len()
                );
            }
            self.counts.unknown_gateway += 1;
            return;
        }
        match self.session {
            Some(watched) if watched != session => {
                if now.saturating_sub(self.session_heard_ns) < self.silent_after_ns {
                    self.counts.other_session += 1;
                    return;
                }
                println!(
                    "event session={} (was {}): the session watched went silent; watching \
                     the new one from scratch",
                    session.0.escape_ascii(),
                    watched.0.escape_ascii()
                );
                let name = session_name(watched);
                let text = self.summary_text(&format!("session {name}"));
                print!("{text}");
                self.earlier.push((format!("summary-{name}.txt"), text));
                self.start_session(session);
            }
            Some(_) => {}
            None => self.start_session(session),
        }
        const SEQ_MAX: u64 = 1 << 62;
        let beyond = self
            .highest
            .is_some_and(|h| r.packet_seq > h.packet_seq.saturating_add(AHEAD_MAX));
        if r.packet_seq == 0 || r.packet_seq >= SEQ_MAX || r.sequence >= SEQ_MAX || beyond {
            self.counts.out_of_range += 1;
            return;
        }
        self.session_heard_ns = now;
        let first_heard = *self.first_heard_ns.get_or_insert(now);
        let g = self.gateways.get_mut(gateway).expect("checked above");
        if g.last.is_some_and(|(last, _)| r.packet_seq <= last) {
            self.counts.stale += 1;
            return;
        }
        g.heard_ns = Some(now);
        let after = Mark {
            packet_seq: r.packet_seq + 1,
            sequence: r.sequence + u64::from(r.messages) + 1,
        };
        g.last = Some((r.packet_seq, after));
        let before = self.highest;
        let highest = *self.highest.insert(
            self.highest
                .filter(|h| h.packet_seq >= after.packet_seq)
                .unwrap_or(after),
        );
        if g.silent {
            g.silent = false;
            self.silent_count -= 1;
            println!(
                "event gateway={} reporting from packet {} (taken for dead before)",
                g.name, r.packet_seq
            );
            self.changes.push((gateway, r.packet_seq, false));
            // Expected again from this packet, or if others are ahead, from the packet after
            // the highest any of them reported: those before may be complete without it
            // already, and must not count twice (nor reopen in the status line's spans).
            let at = match before {
                Some(h) if h.packet_seq > r.packet_seq => h,
                _ => Mark {
                    packet_seq: r.packet_seq,
                    sequence: r.sequence,
                },
            };
            g.expected_from = Some(at);
            if let Some(metrics) = self.metrics.as_mut() {
                metrics.rejoin(gateway, at);
            }
        }
        if g.expected_from
            .is_none_or(|from| r.packet_seq >= from.packet_seq)
        {
            self.on_span(now, gateway, r);
        }
        if now.saturating_sub(first_heard) < self.warmup_ns {
            return;
        }
        if self.metrics.is_none() {
            // The first packet measured is the one after the highest any gateway has
            // reported: nobody has reported it yet, so none of its releases is missed (a
            // gateway behind the others, reporting first after the warm-up, would otherwise
            // start the count at packets the others reported before it). Gateways already
            // taken for dead are not expected from there.
            let mut metrics = Metrics::new(MetricsConfig {
                first_packet_seq: highest.packet_seq,
                first_sequence: Some(highest.sequence),
                receiver_ids: self.receiver_ids(),
                // The gateways' exchange time is the only clock here.
                true_clock: false,
                ..MetricsConfig::new(self.gateways.len() as u32)
            });
            if let Some((of, count)) = &self.participants {
                metrics.group_by_participant(of.clone(), *count);
            }
            for (id, g) in self.gateways.iter().filter(|(_, g)| g.silent) {
                metrics.retire(id, g.last.map_or(highest, |(_, a)| a));
            }
            self.metrics = Some(metrics);
            self.measure_from = Some(highest);
            self.spans.measure_from(Some(highest.packet_seq));
        }
        let metrics = self.metrics.as_mut().expect("made above");
        metrics.on_release(&ReleaseSample {
            receiver: gateway,
            packet_seq: r.packet_seq,
            sequence: r.sequence,
            messages: r.messages,
            send_x: r.send_time.as_nanos(),
            send_t: r.send_time.as_nanos(),
            received_x: r.received.as_nanos(),
            released_x: r.released.as_nanos(),
            received_t: r.received.as_nanos(),
            released_t: r.released.as_nanos(),
            late: r.late,
            recovered: r.recovered,
        });
    }

    /// The gateways' ids as one range, when they are dense (as `jasper plan` numbers them).
    fn receiver_ids(&self) -> Option<core::ops::Range<u32>> {
        let first = self.gateways.iter().next()?.0;
        let last = self.gateways.iter().next_back()?.0;
        (u64::from(last - first) + 1 == self.gateways.len() as u64).then_some(first..last + 1)
    }

    fn start_session(&mut self, session: Session) {
        self.session = Some(session);
        self.first_heard_ns = None;
        self.spans.clear();
        self.window = Window::default();
        self.blame.clear();
        self.metrics = None;
        self.measure_from = None;
        self.highest = None;
        self.stream_silent = false;
        self.changes.clear();
        for g in self.gateways.values_mut() {
            g.last = None;
            g.heard_ns = None;
            g.silent = false;
            g.expected_from = None;
        }
        self.silent_count = 0;
    }

    fn on_span(&mut self, now: u64, gateway: u32, r: &ReleaseRecord) {
        let releases = self.spans.add(
            r.packet_seq,
            gateway,
            r.send_time.as_nanos(),
            r.released.as_nanos(),
            r.messages,
            now,
        );
        self.window.late += u64::from(r.late);
        if releases >= self.live() {
            self.spans.close(r.packet_seq, &mut self.window.figures);
        }
    }

    /// Takes silent gateways for dead, then closes the packets every live gateway has
    /// released, then gives up on those older than `silent_after`.
    fn tick(&mut self, now: u64) {
        // A gateway is silent when others are heard: when none is, the stream stopped (the
        // root did, or the tree above every gateway), or the monitor is cut off, and no
        // gateway is to blame.
        let recent = |t: u64| now.saturating_sub(t) < self.silent_after_ns;
        let stream = self
            .gateways
            .values()
            .any(|g| g.heard_ns.is_some_and(recent));
        if stream == self.stream_silent && self.first_heard_ns.is_some() {
            self.stream_silent = !stream;
            if self.stream_silent {
                println!(
                    "event stream_silent: no gateway reported for {:.1} s (the root stopped, the \
                     tree above every gateway did, or this monitor is cut off)",
                    self.silent_after_ns as f64 / 1e9
                );
            } else {
                println!("event stream_resumed");
                // Every gateway's silence counts from the stream's return.
                for g in self.gateways.values_mut().filter(|g| !g.silent) {
                    g.heard_ns = Some(g.heard_ns.map_or(now, |t| t.max(now)));
                }
            }
        }
        for (id, g) in self.gateways.iter_mut() {
            let quiet_since = g.heard_ns.or(self.first_heard_ns);
            let quiet = stream && quiet_since.is_some_and(|t| !recent(t));
            if quiet && !g.silent {
                g.silent = true;
                self.silent_count += 1;
                let last = g.last.map(|(seq, _)| seq);
                println!(
                    "event gateway={} silent for {:.1} s{}: packets no longer wait for it",
                    g.name,
                    self.silent_after_ns as f64 / 1e9,
                    last.map_or_else(
                        || " (never reported)".to_string(),
                        |s| format!(" after packet {s}")
                    ),
                );
                self.changes.push((id, last.unwrap_or(0), true));
                if let (Some(metrics), Some(from)) = (self.metrics.as_mut(), self.measure_from) {
                    // From the packet after its last (a gateway never heard: from the start).
                    metrics.retire(id, g.last.map_or(from, |(_, after)| after));
                }
            }
        }
        let live = self.live();
        self.spans.close_complete(live, &mut self.window.figures);
        self.window.incomplete += self.spans.expire(now, self.silent_after_ns);
    }

    /// The line over the packets completed since the last one, `interval_ns` ago.
    fn status_line(&mut self, elapsed_ns: u64, interval_ns: u64) -> String {
        let mut w = std::mem::take(&mut self.window);
        add_blame(&mut self.blame, &w.figures.measured_blame);
        // Gateways not heard from since the watch started (or the session did): none at all
        // is a deployment that does not report here, not a healthy one.
        let unheard = self.gateways.values().filter(|g| g.last.is_none()).count();
        if unheard == self.gateways.len() {
            return format!(
                "t={:>5.1}s  no gateway has reported yet ({} in the config): are they run \
                 with --monitor set to this watch's address, and can they reach it?",
                elapsed_ns as f64 / 1e9,
                self.gateways.len(),
            );
        }
        let unheard = match unheard {
            0 => String::new(),
            n => format!(" ({n} never reported)"),
        };
        format!(
            "t={:>5.1}s  session {}  gateways {}/{}{unheard}  md {:>6.0} msg/s  {}  late releases \
             {}  incomplete {}",
            elapsed_ns as f64 / 1e9,
            self.session.map_or_else(|| "-".to_string(), session_name),
            self.live(),
            self.gateways.len(),
            w.figures.messages as f64 * 1e9 / interval_ns.max(1) as f64,
            w.figures.text(|id| self.gateways.name(id)),
            w.late,
            w.incomplete,
        )
    }

    /// Where the summary stops: the earliest packet some gateway alive has not reported yet
    /// (from where it is expected). At any moment each gateway has up to `REPORT_FLUSH_AFTER`
    /// of releases in a batch on its way, and holds the packets not due yet; the packets after
    /// this mark are not lost, only not all reported when the watch stopped. Every packet
    /// from it on waits for that gateway, so the metrics have finalised none of them (the
    /// check the metrics make at `stop_at`), unless the highest reported is half their window
    /// past it, which leaves the tail counted as lost.
    fn end(&self) -> Option<Mark> {
        let first = self.measure_from?;
        let end = self
            .gateways
            .values()
            .filter(|g| !g.silent)
            .filter_map(|g| {
                let (_, after) = g.last?;
                Some(match g.expected_from {
                    Some(from) if from.packet_seq > after.packet_seq => from,
                    _ => after,
                })
            })
            .min_by_key(|m| m.packet_seq)?;
        let highest = self.highest?;
        let window = u64::from(self.metrics.as_ref()?.config().window_packets);
        (end.packet_seq >= first.packet_seq
            && highest.packet_seq.saturating_sub(end.packet_seq) < window / 2)
            .then_some(end)
    }

    /// The summary's text, finishing the metrics.
    fn summary_text(&mut self, what: &str) -> String {
        self.measured_end = self.end();
        let mut text = format!(
            "\nsummary of {what} (after the warm-up; DESIGN.md §5 definitions, exchange time: the \
             gateways' synced clocks)\n"
        );
        match self.metrics.as_mut() {
            None => text.push_str(
                "no release reported after the warm-up: watch longer (--duration), or check \
                 that the gateways run with --monitor this address\n",
            ),
            Some(metrics) => {
                if let Some(end) = self.measured_end {
                    metrics.stop_at(end);
                }
                metrics.finish();
                let lost_note = match metrics.lost_to_deaths() {
                    0 => String::new(),
                    n => format!("; {n} to gateways that went silent"),
                };
                text.push_str(&figures_text(metrics, &metrics.exchange, &lost_note, ""));
                if let Some(mp) = metrics.participants.as_ref() {
                    text.push_str(&participants_text(mp));
                }
            }
        }
        if self.metrics.is_some() {
            let mut blame = self.blame.clone();
            add_blame(&mut blame, &self.window.figures.measured_blame);
            text.push_str(&self.blame_text(&blame));
        }
        let reported = self.gateways.values().filter(|g| g.last.is_some()).count();
        let _ = writeln!(
            text,
            "gateways: {reported} of {} reported; {} silent at the end",
            self.gateways.len(),
            self.gateways.values().filter(|g| g.silent).count()
        );
        if let (Some(from), Some(end)) = (self.measure_from, self.measured_end) {
            let _ = writeln!(
                text,
                "measured packets {}..{} (those after, not reported by every gateway alive \
                 when the watch stopped, are left out)",
                from.packet_seq, end.packet_seq
            );
        }
        const CHANGES_LISTED: usize = 32;
        if self.changes.len() > CHANGES_LISTED {
            let _ = writeln!(
                text,
                "  (the first {CHANGES_LISTED} of {} silences and returns)",
                self.changes.len()
            );
        }
        for &(id, packet, silent) in self.changes.iter().take(CHANGES_LISTED) {
            let name = &self.gateways[id].name;
            let _ = writeln!(
                text,
                "  {name}: {}",
                if silent {
                    format!("went silent after packet {packet}")
                } else {
                    format!("reported from packet {packet} after being taken for dead")
                }
            );
        }
        let c = self.counts;
        let _ = writeln!(
            text,
            "input: {} reports, {} records; lost on the way {} reports (their releases count as \
             lost above), reordered {}; dropped: malformed {}, unknown_gateway {}, stale {}, \
             other_session {}, out_of_range {} (and {} reports numbered out of range, {} from \
             another address than their gateway's)",
            c.reports,
            c.records,
            c.reports_lost,
            c.reports_reordered,
            c.malformed,
            c.unknown_gateway,
            c.stale,
            c.other_session,
            c.out_of_range,
            c.reports_out_of_range,
            c.wrong_source,
        );
        text
    }

    /// The summary's line of the gateways most often at one end of an unfair packet (of the
    /// status intervals since measuring began; a packet is unfair when its DWS is over
    /// 1 µs): each with the unfair messages it released first and last.
    fn blame_text(&self, blame: &BlameByGateway) -> String {
        const LISTED: usize = 5;
        let unfair: u64 = blame.values().map(|b| b.last).sum();
        if unfair == 0 {
            return "unfair messages: none in the status intervals\n".to_string();
        }
        let listed: Vec<String> = ranked(blame)
            .iter()
            .take(LISTED)
            .map(|&(id, b)| format!("{} {}/{}", self.gateways.name(id), b.first, b.last))
            .collect();
        format!(
            "unfair messages ({unfair} in the status intervals), the gateways most often at one \
             end (released first/last): {}\n",
            listed.join(", ")
        )
    }

    /// The final summary; writes `cdf.csv` and the plots into `out`, and the summary of each
    /// session watched before as `summary-<session>.txt`.
    fn summary(&mut self, out: &std::path::Path) -> anyhow::Result<String> {
        let session = self.session.map_or_else(
            || "no session".to_string(),
            |s| format!("session {}", session_name(s)),
        );
        let text = self.summary_text(&session);
        for (file, earlier) in &self.earlier {
            std::fs::write(out.join(file), earlier)
                .with_context(|| format!("writing {}", out.join(file).display()))?;
        }
        sim::report::remove_outputs(out, ["cdf.csv", "oml_cdf.svg", "dws_cdf.svg"])?;
        if let Some(metrics) = self.metrics.as_ref() {
            std::fs::write(
                out.join("cdf.csv"),
                sim::report::cdf_csv_in("jasper watch", metrics, Clocks::Exchange),
            )?;
            sim::report::write_plots_in(out, "jasper watch", metrics, Clocks::Exchange)?;
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ExchangeTime;

    const MS: u64 = 1_000_000;

    fn watch(gateways: u32) -> Watch {
        let names = (10..10 + gateways)
            .map(|id| (id, format!("g{id}")))
            .collect();
        Watch::new(names, 0, 2_000 * MS)
    }

    fn record(packet_seq: u64, released_ns: u64) -> ReleaseRecord {
        ReleaseRecord {
            packet_seq,
            sequence: packet_seq.wrapping_mul(2),
            messages: 1,
            late: false,
            recovered: false,
            send_time: ExchangeTime(packet_seq.wrapping_mul(MS)),
            received: ExchangeTime(packet_seq.wrapping_mul(MS).wrapping_add(80_000)),
            released: ExchangeTime(packet_seq.wrapping_mul(MS).wrapping_add(released_ns)),
        }
    }

    fn session() -> Session {
        Session::new("S1").unwrap()
    }

    #[test]
    fn a_packet_counts_once_every_live_gateway_released_it() {
        let mut w = watch(3);
        // Packet 1: 200.0, 200.5 and 203 µs after its send: DWS 3 µs, unfair.
        // Packet 2: all within 0.4 µs: fair.
        for (gateway, p1, p2) in [
            (10, 200_000, 200_100),
            (11, 200_500, 200_500),
            (12, 203_000, 200_400),
        ] {
            w.on_record(MS, gateway, session(), &record(1, p1));
            w.on_record(MS, gateway, session(), &record(2, p2));
        }
        assert!(w.spans.is_empty());
        assert_eq!(w.window.figures.messages, 2);
        let mut dws = w.window.figures.dws().to_vec();
        dws.sort_unstable();
        assert_eq!(dws, vec![(400, 1), (3_000, 1)]);
        let line = w.status_line(MS, 1_000 * MS);
        assert!(line.contains("gateways 3/3"), "{line}");
        assert!(line.contains("P(F) 50.0%"), "{line}");
        assert!(line.contains("DWS p50   3.0 p99    3.0 µs"), "{line}");
        // g10 first and g12 last in the one unfair packet: a tie, to the lower id.
        assert!(line.contains("unfair: g10 first in 100%"), "{line}");
        // Measuring began after packet 1, the first reported (`measure_from`), so the
        // summary, with P(F) 100% over packet 2, blames nobody for packet 1 either.
        let text = w.summary_text("test");
        assert!(text.contains("P(F) 100.0%"), "{text}");
        assert!(
            text.contains("unfair messages: none in the status intervals\n"),
            "{text}"
        );
    }

    /// A watch no gateway reports to says so, rather than `gateways 3/3` and zeros; one
    /// gateway of three heard says how many never were.
    #[test]
    fn gateways_that_never_reported_are_said() {
        let mut w = watch(3);
        w.tick(3_000 * MS);
        let line = w.status_line(3_000 * MS, 1_000 * MS);
        assert!(
            line.contains(
                "no gateway has reported yet (3 in the config): are they run with \
                 --monitor"
            ),
            "{line}"
        );
        w.on_record(3_100 * MS, 11, session(), &record(1, 200_000));
        let line = w.status_line(4_000 * MS, 1_000 * MS);
        assert!(line.contains("gateways 3/3 (2 never reported)"), "{line}");
    }

    #[test]
    fn the_summary_blames_only_the_packets_measured() {
        // A 10 ms warm-up; packet 1 is released by g10 and g11 in it, by g12 (3 µs after
        // them) only after it, in the status interval in which measuring begins.
        let mut w = Watch::new(
            (10..13).map(|id| (id, format!("g{id}"))).collect(),
            10 * MS,
            2_000 * MS,
        );
        w.on_record(MS, 10, session(), &record(1, 200_000));
        w.on_record(MS, 11, session(), &record(1, 200_000));
        w.on_record(20 * MS, 12, session(), &record(1, 203_000));
        // Packet 2, measured, is unfair the other way round: g11 late by 2 µs.
        for (gateway, released) in [(10, 200_000), (11, 202_000), (12, 200_000)] {
            w.on_record(20 * MS, gateway, session(), &record(2, released));
        }
        assert_eq!(w.measure_from.map(|m| m.packet_seq), Some(2));
        // The status line shows both packets the interval closed; the summary only packet 2.
        let line = w.status_line(20 * MS, 1_000 * MS);
        assert!(line.contains("P(F) 0.0%"), "{line}");
        let text = w.summary_text("test");
        assert!(
            text.contains(
                "unfair messages (1 in the status intervals), the gateways most often at one end \
                 (released first/last): g10 1/0, g11 0/1\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn bad_input_is_counted_and_left_out() {
        let mut w = watch(2);
        w.on_record(MS, 99, session(), &record(1, 200_000));
        assert_eq!(w.counts.unknown_gateway, 1);
        w.on_record(MS, 10, session(), &record(5, 200_000));
        w.on_record(MS, 10, session(), &record(5, 200_000));
        w.on_record(MS, 10, session(), &record(4, 200_000));
        assert_eq!(w.counts.stale, 2);
        w.on_record(MS, 11, Session::new("S2").unwrap(), &record(5, 200_000));
        assert_eq!(w.counts.other_session, 1);
        assert_eq!(
            w.spans.get(5).map(|s| s.count),
            Some(1),
            "only the first report of packet 5 counts"
        );
        // The metrics never saw more releases of a packet than gateways (they assert it).
        for _ in 0..3 {
            w.on_record(MS, 11, session(), &record(5, 200_000));
        }
        let text = w.summary_text("test");
        assert!(text.contains("stale 4"), "{text}");
    }

    /// A gateway taken for dead that was only stalled comes back releasing packets the
    /// others completed without it meanwhile: they count once (the metrics would panic on a
    /// packet finalised twice), and it is expected again from the highest packet on.
    #[test]
    fn a_stalled_gateway_back_late_counts_no_packet_twice() {
        let mut w = watch(3);
        let mut now = MS;
        for seq in 1..=5 {
            now += MS;
            for gateway in 10..13 {
                w.on_record(now, gateway, session(), &record(seq, 200_000));
            }
        }
        now += 2_000 * MS;
        w.on_record(now, 10, session(), &record(6, 200_000));
        w.on_record(now, 11, session(), &record(6, 200_000));
        w.tick(now);
        assert_eq!(w.live(), 2, "gateway 12 taken for dead");
        for seq in 7..=9 {
            w.on_record(now, 10, session(), &record(seq, 200_000));
            w.on_record(now, 11, session(), &record(seq, 200_000));
        }
        // Back, with packets 6-9 the others completed, then 10 with everyone.
        for seq in 6..=10 {
            w.on_record(now, 12, session(), &record(seq, 200_000));
        }
        w.on_record(now, 10, session(), &record(10, 200_000));
        w.on_record(now, 11, session(), &record(10, 200_000));
        assert!(w.spans.is_empty(), "its backlog reopens no packet");
        let text = w.summary_text("test");
        assert!(text.contains("messages 9  lost 0 (0.000%)"), "{text}");
        assert!(text.contains("in packets 9 "), "{text}");
    }

    #[test]
    fn when_every_gateway_goes_quiet_the_stream_stopped_and_none_is_taken_for_dead() {
        let mut w = watch(3);
        for gateway in 10..13 {
            w.on_record(MS, gateway, session(), &record(1, 200_000));
        }
        w.tick(3_000 * MS);
        assert!(w.stream_silent);
        assert_eq!(w.live(), 3);
        assert!(w.changes.is_empty());
        w.on_record(3_001 * MS, 10, session(), &record(2, 200_000));
        w.tick(3_002 * MS);
        assert!(!w.stream_silent);
        assert_eq!(
            w.live(),
            3,
            "the others get their silence counted from now on"
        );
        w.tick(3_600 * MS);
        assert_eq!(w.live(), 3);
    }

    /// Stopped while one gateway's last batch is still on its way: the packets it has not
    /// reported are left out, not counted lost.
    #[test]
    fn the_unreported_tail_is_left_out_not_lost() {
        let mut w = watch(2);
        for seq in 1..=8 {
            w.on_record(MS, 10, session(), &record(seq, 200_000));
            if seq <= 5 {
                w.on_record(MS, 11, session(), &record(seq, 200_000));
            }
        }
        let text = w.summary_text("test");
        assert!(text.contains("messages 4  lost 0 (0.000%)"), "{text}");
        assert!(text.contains("measured packets 2..6"), "{text}");
    }

    /// With receiver hedging the summary says what each participant saw too: the first of
    /// its two gateways.
    #[test]
    fn with_two_gateways_a_participant_the_summary_measures_participants_too() {
        let mut w = watch(4);
        // Gateways 10 and 11 serve participant 0, 12 and 13 participant 1.
        let mut of = vec![u32::MAX; 14];
        of[10..14].copy_from_slice(&[0, 0, 1, 1]);
        w.group_by_participant(of);
        for seq in 1..=6 {
            // Per gateway DWS 5 µs; over participants' first releases 0.3 µs.
            w.on_record(MS, 10, session(), &record(seq, 200_000));
            w.on_record(MS, 11, session(), &record(seq, 205_000));
            w.on_record(MS, 12, session(), &record(seq, 200_500));
            if seq != 4 {
                // Gateway 13 loses packet 4; participant 1 has it from gateway 12.
                w.on_record(MS, 13, session(), &record(seq, 200_300));
            }
        }
        let text = w.summary_text("test");
        assert!(text.contains("messages 5  lost 1 (20.000%)"), "{text}");
        assert!(text.contains("P(F) 0.0% of messages within 1 µs"), "{text}");
        assert!(
            text.contains("per participant (the first of its two gateways)")
                && text.contains("P(F) 100.0%  lost 0"),
            "{text}"
        );
        // Without hedging there is no such line.
        let mut plain = watch(2);
        let mut of = vec![u32::MAX; 12];
        of[10..12].copy_from_slice(&[0, 1]);
        plain.group_by_participant(of);
        for seq in 1..=3 {
            plain.on_record(MS, 10, session(), &record(seq, 200_000));
            plain.on_record(MS, 11, session(), &record(seq, 200_000));
        }
        assert!(!plain.summary_text("test").contains("per participant"));
    }

    /// A gateway that goes silent, comes back and goes silent again is away twice, and the
    /// packets of its second absence are complete without it.
    #[test]
    fn a_flapping_gateway_is_away_each_time() {
        let mut w = watch(2);
        let mut now = MS;
        let mut seq = 0;
        for quiet in [false, true, false, true, false] {
            for _ in 0..5 {
                seq += 1;
                now += MS;
                w.on_record(now, 10, session(), &record(seq, 200_000));
                if !quiet {
                    w.on_record(now, 11, session(), &record(seq, 200_000));
                }
            }
            if quiet {
                now += 2_000 * MS;
                seq += 1;
                w.on_record(now, 10, session(), &record(seq, 200_000));
                w.tick(now);
                assert_eq!(w.live(), 1);
            }
        }
        let text = w.summary_text("test");
        assert!(text.contains("lost 0 (0.000%)"), "{text}");
        assert_eq!(w.changes.len(), 4, "{text}");
    }

    /// A gateway behind the others that reports first after the warm-up does not start the
    /// count at packets the others reported before it (they would never complete: 17 lost).
    #[test]
    fn measuring_starts_past_everything_reported() {
        let names = [(10, "g10".to_string()), (11, "g11".to_string())];
        let mut w = Watch::new(names.into_iter().collect(), 1_000 * MS, 2_000 * MS);
        for seq in 1..=28 {
            w.on_record(MS, 10, session(), &record(seq, 200_000));
        }
        for seq in 1..=10 {
            w.on_record(MS, 11, session(), &record(seq, 200_000));
        }
        let later = 1_500 * MS;
        for seq in 11..=38 {
            w.on_record(later, 11, session(), &record(seq, 200_000));
        }
        for seq in 29..=38 {
            w.on_record(later, 10, session(), &record(seq, 200_000));
        }
        let text = w.summary_text("test");
        assert!(text.contains("lost 0 (0.000%)"), "{text}");
        assert!(text.contains("measured packets 29..39"), "{text}");
    }

    #[test]
    fn gaps_in_a_gateways_report_numbers_are_reports_lost() {
        let mut w = watch(1);
        for seq in [1, 2, 5] {
            w.on_report(10, seq);
        }
        assert_eq!((w.counts.reports_lost, w.counts.reports_reordered), (2, 0));
        w.on_report(10, 3);
        assert_eq!((w.counts.reports_lost, w.counts.reports_reordered), (1, 1));
        w.on_report(10, 6);
        w.on_report(10, 1);
        w.on_report(10, 2);
        assert_eq!(
            (w.counts.reports_lost, w.counts.reports_reordered),
            (1, 1),
            "1 again: a new process"
        );
        w.on_report(99, 7);
        assert_eq!(w.counts.reports, 8);
        // A number absurdly far ahead (forged or corrupt) is left out, not billions lost, and
        // the gateway's numbers go on from its last.
        assert!(!w.on_report(10, u64::MAX));
        assert!(!w.on_report(10, 3 + REPORTS_AHEAD_MAX));
        assert_eq!(w.counts.reports_out_of_range, 2);
        assert!(w.on_report(10, 2 + REPORTS_AHEAD_MAX));
        assert_eq!(w.counts.reports_lost, 1 + REPORTS_AHEAD_MAX - 1);
        // A real gap that long (the watch stopped, or cut off): the next report follows the
        // one left out, and the gateway is heard again.
        let far = 2 + 2 * REPORTS_AHEAD_MAX + 5;
        assert!(!w.on_report(10, far));
        assert!(w.on_report(10, far + 1), "the gap was real");
        assert!(w.on_report(10, far + 2));
        assert_eq!(w.counts.reports_out_of_range, 3);
        assert_eq!(
            w.counts.reports_lost,
            2 * REPORTS_AHEAD_MAX + 5,
            "with the one left out"
        );
    }

    /// Goal: a report for a gateway from another host's address is left out, said and
    /// counted (the hostile-input sweep silenced a gateway with one forged report; from
    /// another host that is no longer possible), and one from its own is taken.
    #[test]
    fn a_gateways_reports_come_from_its_own_host() {
        let mut w = watch(2);
        let ip = |last: u8| IpAddr::from([10, 0, 0, last]);
        w.expect_sources([(0, ip(1)), (10, ip(10)), (11, ip(11))].into_iter());
        assert!(w.sent_by_its_host(10, ip(10)));
        assert!(!w.sent_by_its_host(10, ip(11)));
        assert!(!w.sent_by_its_host(10, ip(99)));
        assert!(w.sent_by_its_host(11, ip(11)));
        let mapped: IpAddr = "::ffff:10.0.0.11".parse().unwrap();
        assert!(
            w.sent_by_its_host(11, mapped),
            "IPv4 on a dual-stack listener"
        );
        assert!(
            w.sent_by_its_host(99, ip(99)),
            "an unknown gateway is counted by its records"
        );
        assert_eq!(w.counts.wrong_source, 2);
        assert_eq!(w.gateways.get_mut(10).map(|g| g.wrong_source), Some(2));
        let text = w.summary_text("test");
        assert!(text.contains("2 from another address"), "{text}");
    }

    /// A root started again without its journal streams under a new session: once the one
    /// watched has been silent, its summary is kept (and written at the end) and the new one
    /// is watched from scratch.
    #[test]
    fn a_new_session_is_watched_from_scratch_and_the_last_one_kept() {
        let mut w = watch(1);
        for seq in 1..=5 {
            w.on_record(MS, 10, session(), &record(seq, 200_000));
        }
        let next = Session::new("S2").unwrap();
        w.on_record(2 * MS, 10, next, &record(1, 200_000));
        assert_eq!(
            w.counts.other_session, 1,
            "the watched one is not silent yet"
        );
        for seq in 1..=3 {
            w.on_record(3_000 * MS, 10, next, &record(seq, 200_000));
        }
        assert_eq!(w.session, Some(next));
        assert_eq!(w.earlier.len(), 1);
        assert_eq!(w.earlier[0].0, "summary-S1.txt");
        assert!(
            w.earlier[0].1.contains("summary of session S1"),
            "{}",
            w.earlier[0].1
        );
        assert!(
            w.earlier[0].1.contains("messages 4  lost 0"),
            "{}",
            w.earlier[0].1
        );
        let text = w.summary_text("session S2");
        assert!(text.contains("messages 2  lost 0"), "{text}");
        assert_eq!(session_name(Session(*b"A b\xff\0     ")), "A_b__");
    }

    #[test]
    fn records_beyond_any_stream_are_counted_not_measured() {
        let mut w = watch(1);
        w.on_record(MS, 10, session(), &record(1, 200_000));
        for seq in [0, u64::MAX, 1 << 62, 3 + AHEAD_MAX] {
            w.on_record(MS, 10, session(), &record(seq, 200_000));
        }
        w.on_record(MS, 10, session(), &record(2, 200_000));
        assert_eq!(w.counts.out_of_range, 4);
        let text = w.summary_text("test");
        assert!(text.contains("messages 1  lost 0"), "{text}");
    }

    #[test]
    fn a_silent_gateway_stops_holding_packets_up_and_is_measured_again_when_back() {
        let mut w = watch(2);
        let mut now = MS;
        for seq in 1..=10 {
            now += MS;
            w.on_record(now, 10, session(), &record(seq, 200_000));
            w.on_record(now, 11, session(), &record(seq, 200_000));
        }
        // Gateway 11 goes quiet; packets 11.. wait for it until it is taken for dead.
        for seq in 11..=20 {
            now += MS;
            w.on_record(now, 10, session(), &record(seq, 200_000));
        }
        assert_eq!(w.spans.len(), 10);
        now += 2_000 * MS;
        w.on_record(now, 10, session(), &record(21, 200_000));
        w.tick(now);
        assert_eq!(w.live(), 1);
        assert!(w.spans.is_empty(), "closed over the live gateway");
        assert_eq!(w.window.figures.messages, 21);
        // Back: from its first new report on, packets wait for it again.
        w.on_record(now, 11, session(), &record(22, 200_000));
        assert_eq!(w.live(), 2);
        w.on_record(now, 10, session(), &record(22, 200_000));
        assert!(w.spans.is_empty());
        let text = w.summary_text("test");
        assert!(text.contains("g11: went silent after packet 10"), "{text}");
        assert!(
            text.contains("g11: reported from packet 22 after being taken for dead"),
            "{text}"
        );
        // Packets 11-22 are complete without it; nothing was lost.
        assert!(text.contains("lost 0 (0.000%)"), "{text}");
    }
}
