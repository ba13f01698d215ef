//! The cloud network model (DESIGN.md §6): how long each datagram copy takes from the moment a
//! node hands it over until the receiving node's handler runs, and whether it arrives at all.
//!
//! One copy goes through four stages:
//!
//! 1. **Sender egress.** Each host has one egress pipe. A copy occupies it for
//!    `send_cost_ns + (bytes + header_bytes) * 8 / egress_bps`, and copies queue behind each
//!    other, so the last of a node's F copies leaves about F send costs after the first: this
//!    is what makes fan-out costly. A copy that would wait longer than `egress_backlog_ns_max`
//!    is dropped (the socket send buffer is full). The driver hands a node's next datagram
//!    over only while a copy would wait at most half that ([`Network::unwritable_for_ns`]),
//!    so a node's burst waits in its outbox rather than overflowing; only a fan-out begun
//!    just under half the bound, and longer than the other half, loses copies here.
//! 2. **The link** (one per ordered host pair, created on first use, kept in a flat
//!    `PairTable`). Its delay is the sum of
//!    a base drawn once per pair (pairs differ; both directions share it), an i.i.d. per-packet term, a jitter term
//!    `median * exp(x(t) + per_packet_sigma * N(0,1))` where `x` is a mean-reverting AR(1)
//!    process on a time grid (slow drifts of a link's tail), a spike term (episodes arriving
//!    as a Poisson process and lasting many messages), and the straggler term of both hosts
//!    (episodes during which all of a host's links are slow). With `link_fifo` a copy never
//!    overtakes one that left before it on the same link. Random loss, partitions and clogs
//!    act here.
//! 3. **Receiver buffer.** Arrivals join the receiving host's FIFO, served one at a time at
//!    `recv_cost_ns` each; an arrival that finds `rx_buffer_packets` copies waiting is dropped
//!    and counted, so inbound incast really drops.
//! 4. **Delivery**: the node's `handle_datagram` runs when its copy leaves the receive queue.
//!
//! Every parameter lives in [`NetModel`], which is plain data with named presets and reads
//! from TOML. Every random draw for a link comes from that link's own stream, and every draw
//! for a host's stragglers from that host's stream, so a link behaves the same whatever else
//! the run contains.

use serde::{Deserialize, Serialize};

use crate::rng::{Dist, EXPONENTIAL_DRAWS, NORMAL_DRAWS, Purpose, SimRng};
use crate::table::PairTable;

/// Nanoseconds per second.
const NS_PER_S: f64 = 1e9;

/// Most sending threads a host may have ([`NetModel::tx_threads`]).
pub const TX_THREADS_MAX: u32 = 1024;

/// Longest per-copy cost or delay floor a model may set, ns (1 s).
const COST_NS_MAX: u64 = 1_000_000_000;

/// Longest a copy waits for a flow's token, ns (a day and more: longer than any run), so
/// that a flow shaped to nearly nothing holds its copies past the run's end instead of
/// overflowing the clock.
const FLOW_WAIT_NS_MAX: u64 = 100_000_000_000_000;

/// Every parameter of the network model. Times are nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetModel {
    /// Per-copy send cost at the sender (syscall, copy, NIC doorbell), nanoseconds.
    pub send_cost_ns: u64,
    /// Sending threads per host (1 = one egress pipe). The copies a node sends from one
    /// handler (one fan-out) go through one thread back to back; another handler's copies may
    /// use another, idle thread (the paper's proxies replicate on 6 Tx cores). The host's
    /// egress bandwidth is shared by all threads.
    pub tx_threads: u32,
    /// Egress bandwidth of every host, bits per second (0 = unlimited).
    pub egress_bps: u64,
    /// Bytes added to every datagram on the wire (Ethernet + IPv4 + UDP headers).
    pub header_bytes: u32,
    /// Longest a copy may wait for the sender's egress before it is dropped.
    pub egress_backlog_ns_max: u64,
    /// Base one-way delay of a host pair, drawn once per pair (the same both ways).
    pub base: Dist,
    /// Floor of a pair's base delay, hosts' static delays included: no two VMs are closer
    /// than this (a draw of `base` below it is raised to it). Every copy's delay is at least
    /// this, which is part of the lookahead that lets a run be split over threads
    /// (`Sim::sharded`).
    pub base_min_ns: u64,
    /// A host's own static delay (a slow or fast VM), drawn once per host; every link's base
    /// gets half of each end's draw, so a slow host is slow both ways (paths stay symmetric,
    /// as clock sync assumes) and no tree or proxy hedging can route around it.
    pub host_base: Dist,
    /// The static delay of a relay host ([`HostKind::Relay`]: the root and the proxies, whose
    /// forwarding path bypasses the kernel, §3 and Appendix E of the paper), drawn once per
    /// host instead of `host_base`. A slow relay VM costs every path through it, so this is
    /// what an extra tree layer pays beyond the wire (Appendix A: 30 ± 10 µs a layer), while
    /// `host_base` of the receivers sets the spread across them.
    pub relay_host_base: Dist,
    /// Per-flow rate limit of a flow into an end host ([`HostKind::Leaf`]; one flow per
    /// ordered host pair): a token bucket refilled at a rate drawn once per flow (packets per
    /// second; `Dist::ZERO` turns shaping off) holding at most `flow_burst` packets. Copies
    /// beyond it wait, so a burst sent down one fixed path queues. It stands for what limits
    /// one flow on its way into a VM reading a kernel socket: the hypervisor's per-flow
    /// shaping and the receiver's one RSS queue (one core's softirq) per flow.
    pub flow_pps: Dist,
    /// The same for a flow into a relay ([`HostKind::Relay`]: the root and the proxies),
    /// which polls the NIC with kernel bypass (DPDK, Appendix E of the paper) over several
    /// queues. The paper's throughput run pushes 350K msgs/s down each root-to-proxy flow
    /// (§8.6), so a relay's flows take far more than an end host's.
    pub relay_flow_pps: Dist,
    /// Packets a flow's token bucket holds (back-to-back copies that pass unshaped).
    pub flow_burst: u32,
    /// I.i.d. per-packet delay added on every link.
    pub per_packet: Dist,
    /// Probability that a copy finds its path empty: it gets neither the `per_packet` nor the
    /// `jitter` term, only the base (and spikes, stragglers, shaping). Real paths queue
    /// intermittently, so the floor is hit often; clock sync (which keeps the fastest probes)
    /// depends on it.
    pub quiet: f64,
    /// Time-varying log-normal jitter.
    pub jitter: JitterModel,
    /// Rare per-link spikes lasting many messages.
    pub spikes: EpisodeModel,
    /// Straggler end hosts (gateways' VMs): all links in and out of the host slow down for a
    /// while.
    pub stragglers: EpisodeModel,
    /// Straggler relays (the root's and the proxies' VMs), drawn apart from the end hosts'
    /// because they differ as their static delays do ([`NetModel::relay_host_base`]).
    pub relay_stragglers: EpisodeModel,
    /// Host pauses: spells during which a VM runs none of its node's code (its vCPU is
    /// descheduled by the hypervisor, a host interrupt or a noisy neighbour's burst), drawn
    /// per host. Copies that reach it wait in its receive buffer and timers due meanwhile
    /// fire when it resumes: a gateway whose release deadline falls in a pause releases late
    /// by the rest of the pause ([`Network::paused_until`]). Copies a handler already handed
    /// to the sending threads still leave on schedule (a simplification: a pause in the middle
    /// of a fan-out would hold its remaining copies).
    pub pauses: PauseModel,
    /// Probability that a copy is lost in flight.
    pub loss: f64,
    /// Per-copy processing cost at the receiving host (kernel + parse), nanoseconds.
    pub recv_cost_ns: u64,
    /// Copies a host's receive buffer holds (waiting for processing); 0 = unbounded.
    pub rx_buffer_packets: u32,
    /// Whether copies on one link arrive in the order they left the sender.
    pub link_fifo: bool,
}

/// The jitter term: `median_ns * exp(x(t)) * E / ln 2 * exp(per_packet_sigma * N(0,1))`, where
/// `E` is a unit exponential and `x` is an AR(1) process with stationary standard deviation
/// `sigma`, advanced every `step_ns` with coefficient `correlation` (0 = independent each
/// step, close to 1 = slow drift).
///
/// The drift scales the noise; it never moves the floor: `E` has mass near zero, so the
/// minimum delay over many probes is the link's base whatever `x` is, and the floor stays put
/// while the tail drifts. (An earlier shape, `median * exp(x + s N)`, moved the minimum with
/// `x`, differently in each direction, which clock sync, relying on a stable floor as Huygens
/// does, read as a clock offset.) With `per_packet_sigma = 0` and `x = 0` the term's median
/// is `median_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JitterModel {
    /// Median of the jitter term at `x = 0` (exactly so when `per_packet_sigma` is 0); 0
    /// turns it off.
    pub median_ns: f64,
    /// Stationary standard deviation of the slow log-level `x`.
    pub sigma: f64,
    /// Grid step of the slow process, nanoseconds.
    pub step_ns: u64,
    /// AR(1) coefficient per step, in `[0, 1)`.
    pub correlation: f64,
    /// Standard deviation of the per-packet log-normal factor (heavier per-packet tail).
    pub per_packet_sigma: f64,
}

/// Episodes (spikes on a link, or a straggling host): they start as a Poisson process with
/// `rate_per_s`, last a `duration` draw, and add an `extra` draw (one per episode) to the delay
/// of every copy sent during the episode.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EpisodeModel {
    /// Episodes per second per link (spikes) or per host (stragglers); 0 turns them off.
    pub rate_per_s: f64,
    /// Length of an episode, nanoseconds.
    pub duration: Dist,
    /// Delay added during an episode, nanoseconds.
    pub extra: Dist,
}

/// Host pauses ([`NetModel::pauses`]): they start as a Poisson process with `rate_per_s` per
/// host and last a `duration` draw each.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PauseModel {
    /// Pauses per second per host; 0 turns them off.
    pub rate_per_s: f64,
    /// Length of a pause, nanoseconds.
    pub duration: Dist,
}

impl Default for PauseModel {
    fn default() -> Self {
        Self::OFF
    }
}

impl PauseModel {
    /// No pauses.
    pub const OFF: Self = Self {
        rate_per_s: 0.0,
        duration: Dist::ZERO,
    };

    /// The same process as episodes (with no extra delay: a pause holds, it does not add).
    fn episodes(&self) -> EpisodeModel {
        EpisodeModel {
            rate_per_s: self.rate_per_s,
            duration: self.duration,
            extra: Dist::ZERO,
        }
    }
}

impl Default for JitterModel {
    fn default() -> Self {
        Self::OFF
    }
}

impl JitterModel {
    /// No jitter.
    pub const OFF: Self = Self {
        median_ns: 0.0,
        sigma: 0.0,
        step_ns: 1_000_000,
        correlation: 0.0,
        per_packet_sigma: 0.0,
    };
}

impl Default for EpisodeModel {
    fn default() -> Self {
        Self::OFF
    }
}

impl EpisodeModel {
    /// No episodes.
    pub const OFF: Self = Self {
        rate_per_s: 0.0,
        duration: Dist::ZERO,
        extra: Dist::ZERO,
    };
}

impl NetModel {
    /// The least time from a handler sending a copy to the target's handler running: send
    /// cost, the floor of a pair's delay, receive cost. A run split over threads advances
    /// in windows this long (`Sim::sharded`); 0 means it cannot be split.
    pub fn lookahead_ns(&self) -> u64 {
        self.send_cost_ns
            .saturating_add(self.base_min_ns)
            .saturating_add(self.recv_cost_ns)
    }
}

impl Default for NetModel {
    fn default() -> Self {
        Self::aws_c5()
    }
}

impl NetModel {
    /// AWS c5.2xlarge in one placement-less region (the paper's main testbed), calibrated
    /// against `figures.csv` by `jasper sim paper-outbound` (see `docs/results/`). Each
    /// parameter, and the figure that pins it:
    ///
    /// - `send_cost_ns` 2.5 µs + 466 B at 10 Gbps (0.41 µs) per copy, 2.9 µs a unit of
    ///   fan-out per layer (Appendix A: 2.7 ± 0.9; the paper's own Table 8 fits 3.0): direct
    ///   unicast's median (~330 µs here; the paper's Fig. 8 says 254 and its Table 8 351 for
    ///   the same shape) is about 100 copies plus one hop. At 2.2 µs, `<3,10>` beat `<2,32>`
    ///   at N = 1000 by 1.11x on the median of three seeds (paper 1.30, needs 1.12), at 2 µs
    ///   by 1.10x; 2.5 gives 1.14x on the median and holds on all three. 2.7 (3.1 a unit)
    ///   gives the same verdicts, but the root of the RRPS runs (`<2,12>` at 150K msgs/s in
    ///   bursts) falls further behind in each burst and RRPS's gain on AWS drops to 2.98x
    ///   (paper 3.26x; 2.5: 3.28x). Session 22 of `docs/results/paper-outbound.md`.
    /// - `tx_threads` 4: the paper's proxies replicate on 6 Tx cores (Appendix E), and its
    ///   direct unicast (100 copies of every message at 5K msgs/s, ~260 µs of sending per
    ///   200 µs) does not queue (p99 466 µs). One thread per fan-out keeps the fan-out cost.
    /// - `base` N(13, 3) µs per VM pair, `host_base` Exp(24 µs) per end host and
    ///   `relay_host_base` Exp(2 µs) per relay (root, proxy), half of each end on every link.
    ///   The relays forward with kernel bypass (§3: "we minimize this by optimizing proxy
    ///   packet processing with kernel bypass and zero-copy"), so a layer costs about its
    ///   wire and a little spread: fitted over Table 8 at equal N, ~31 µs a layer (Appendix
    ///   A: 30 ± 10; the paper's Table 8 fits 28). The receivers' own delays are what no tree
    ///   can route around: they set the spread across receivers (the DWS floor) and are what
    ///   receiver hedging hides. (When every VM drew Exp(16 µs), the slowest of the 25
    ///   proxies of `<3,5>` put a layer at 60-100 µs and `<3,5>` lost to `<2,10>` by 1.4x.)
    /// - `per_packet` Exp(1.5 µs) and `jitter` (3 µs median, drifting by σ = 0.3 over
    ///   ~10 ms, exponential-times-log-normal per packet with σ = 0.2): the body of each
    ///   hop's spread. A heavier per-packet tail (σ 0.6) made the OML, a maximum over
    ///   hundreds of paths, grow ~50 µs a layer at N = 1000. The floor is stable so clock
    ///   sync reaches ~100-200 ns (Huygens: p99 159 ns).
    /// - `spikes` (0.25 per s per link, ~10 ms, ~110 µs) and `relay_stragglers` (0.02 per s
    ///   per relay VM, ~20 ms, ~60 µs): the tails that hedging hides (H = 0 OML p99 401 µs;
    ///   H = 1 p99 199). A spike lasting a good part of a gateway's 10 ms OWD window lifts its
    ///   p97 report, and with it the deadline of an unhedged tree (H = 0 + hold: 429 µs
    ///   against 180 at H = 2); spikes short and rare enough that at N = 1000 (over a
    ///   thousand links per message) most medians still miss them, as Table 8's do.
    /// - `stragglers` of the end hosts, 5 per s per VM, ~10 ms, log-normal ~20 µs (σ 0.5):
    ///   a receiver's VM is slow by some tens of µs 5% of the time (the paper ran its
    ///   receivers 10 or 18 to a VM, session 14 of `docs/results/paper-outbound.md`). No
    ///   hedging hides them, and they outrun the OWD reports: a gateway's p97 over its last
    ///   10 ms, reported every 15 ms, is the level before the episode began. They decide
    ///   P(F) through the few receivers whose reports set the deadline, whose number does
    ///   not grow with N (the gaps between the slowest of N exponential static delays do
    ///   not), so the unfair share grows ~2x from N = 100 to 1000 (paper: 8% -> 16%);
    ///   VM-wide causes such as pauses grow it ~10x. Chosen in session 21 over 5 / 10 / 20
    ///   per s (of 20 / 15 / 25 µs): P(F) 94.7 / 86.3% at N = 100 / 1000 (paper 92 / 84).
    ///   With the relays straggling alike, `<3,5>`, two layers of proxies, fell behind
    ///   `<2,10>` by 1.16x (paper: a tie).
    /// - `flow_pps` log-normal, median 120K packets/s per flow, σ 0.5, bucket of 8, for flows
    ///   into end hosts: at 10K msgs/s with 15x bursts (150K msgs/s) a fixed tree pushes every
    ///   message down the same proxy-to-leaf flows and the slow ones queue (paper: fixed p90
    ///   1615 µs), while RRPS spreads a burst over the L parents' flows (RRPS p90 495 µs).
    ///   `relay_flow_pps` log-normal, median 500K, σ 0.3, for flows into the root and the
    ///   proxies (kernel bypass; §8.6 runs 350K msgs/s down each root-to-proxy flow). With one
    ///   rate for every flow, the root-to-proxy flows, which carry every message with or
    ///   without RRPS, queued as much as the fixed tree's leaf flows, and RRPS gained 1.2x on
    ///   the p90 (paper 3.3x).
    /// - `pauses` 8 per second per VM, log-normal length (median 8 µs, σ 1: mean 13 µs, 1 in
    ///   10,000 over 330 µs): a VM is not always running (hypervisor housekeeping, host
    ///   interrupts, noisy neighbours), and a gateway paused at a release deadline releases
    ///   late; with perfect paths and clocks, releases were simultaneous and P(F) was 98-100%
    ///   at N = 1000 (paper: 84%; even kernel-bypass RDMA on a cloud, seed 002, sees a max
    ///   of 402 µs against a p99 of 12.5 µs). At 1e-4 of the time paused, 1 - (1 - 1e-4)^N of
    ///   the messages find a gateway paused at the deadline: ~1% at N = 100, ~10% at 1000.
    ///   The paths barely notice (a relay's pause is hedged; OML p50s move < 1 µs).
    /// - `loss` 1e-5, `recv_cost_ns` 1 µs, 512-packet receive buffers: rare loss, and incast
    ///   that really drops.
    pub fn aws_c5() -> Self {
        Self {
            send_cost_ns: 2_500,
            tx_threads: 4,
            egress_bps: 10_000_000_000,
            header_bytes: 42,
            egress_backlog_ns_max: 2_000_000,
            base: Dist::Normal {
                mean: 13_000.0,
                std_dev: 3_000.0,
            },
            // 2.7 standard deviations below the mean: 0.4% of pairs are raised to it.
            base_min_ns: 5_000,
            host_base: Dist::Exponential { mean: 24_000.0 },
            relay_host_base: Dist::Exponential { mean: 2_000.0 },
            flow_pps: Dist::LogNormal {
                median: 120_000.0,
                sigma: 0.5,
            },
            relay_flow_pps: Dist::LogNormal {
                median: 500_000.0,
                sigma: 0.3,
            },
            flow_burst: 8,
            per_packet: Dist::Exponential { mean: 1_500.0 },
            quiet: 0.4,
            jitter: JitterModel {
                median_ns: 3_000.0,
                sigma: 0.3,
                step_ns: 1_000_000,
                correlation: 0.9,
                per_packet_sigma: 0.2,
            },
            spikes: EpisodeModel {
                rate_per_s: 0.25,
                duration: Dist::Exponential { mean: 10_000_000.0 },
                extra: Dist::LogNormal {
                    median: 110_000.0,
                    sigma: 0.3,
                },
            },
            stragglers: EpisodeModel {
                rate_per_s: 5.0,
                duration: Dist::Exponential { mean: 10_000_000.0 },
                extra: Dist::LogNormal {
                    median: 20_000.0,
                    sigma: 0.5,
                },
            },
            relay_stragglers: EpisodeModel {
                rate_per_s: 0.02,
                duration: Dist::Exponential { mean: 20_000_000.0 },
                extra: Dist::LogNormal {
                    median: 60_000.0,
                    sigma: 0.5,
                },
            },
            pauses: PauseModel {
                rate_per_s: 8.0,
                duration: Dist::LogNormal {
                    median: 8_000.0,
                    sigma: 1.0,
                },
            },
            loss: 1e-5,
            recv_cost_ns: 1_000,
            rx_buffer_packets: 512,
            link_fifo: true,
        }
    }

    /// GCP c2d-highcpu-8: 16 Gbps egress, a little faster per copy, a thinner tail and
    /// gentler flow shaping than AWS (the paper's RRPS figure: GCP's fixed tree p90 305 µs
    /// against AWS's 1615, and RRPS gains ~10% on GCP against ~70% on AWS). Fields not set
    /// here are the AWS ones.
    pub fn gcp_c2d() -> Self {
        const GCP_STRAGGLERS: EpisodeModel = EpisodeModel {
            rate_per_s: 0.02,
            duration: Dist::Exponential { mean: 10_000_000.0 },
            extra: Dist::LogNormal {
                median: 40_000.0,
                sigma: 0.5,
            },
        };
        Self {
            send_cost_ns: 1_300,
            egress_bps: 16_000_000_000,
            base: Dist::Normal {
                mean: 11_000.0,
                std_dev: 2_500.0,
            },
            host_base: Dist::Exponential { mean: 22_000.0 },
            flow_pps: Dist::LogNormal {
                median: 250_000.0,
                sigma: 0.3,
            },
            relay_flow_pps: Dist::LogNormal {
                median: 500_000.0,
                sigma: 0.3,
            },
            jitter: JitterModel {
                median_ns: 3_500.0,
                sigma: 0.4,
                step_ns: 1_000_000,
                correlation: 0.9,
                per_packet_sigma: 0.5,
            },
            spikes: EpisodeModel {
                rate_per_s: 0.2,
                duration: Dist::Exponential { mean: 2_000_000.0 },
                extra: Dist::LogNormal {
                    median: 80_000.0,
                    sigma: 0.6,
                },
            },
            stragglers: GCP_STRAGGLERS,
            relay_stragglers: GCP_STRAGGLERS,
            ..Self::aws_c5()
        }
    }

    /// The paper's Appendix C Monte Carlo: every hop takes an independent uniform time in
    /// `[0, 1)` units (one unit = 1 µs here), with no send cost, no bandwidth limit, no
    /// receive cost or buffer limit, no loss and no ordering between copies.
    pub fn appendix_c() -> Self {
        Self {
            send_cost_ns: 0,
            tx_threads: 1,
            egress_bps: 0,
            header_bytes: 0,
            egress_backlog_ns_max: i64::MAX as u64, // TOML integers are i64.
            base: Dist::ZERO,
            host_base: Dist::ZERO,
            base_min_ns: 0,
            relay_host_base: Dist::ZERO,
            flow_pps: Dist::ZERO,
            relay_flow_pps: Dist::ZERO,
            flow_burst: 1,
            quiet: 0.0,
            per_packet: Dist::Uniform {
                low: 0.0,
                high: 1_000.0,
            },
            jitter: JitterModel::OFF,
            spikes: EpisodeModel::OFF,
            stragglers: EpisodeModel::OFF,
            relay_stragglers: EpisodeModel::OFF,
            pauses: PauseModel::OFF,
            loss: 0.0,
            recv_cost_ns: 0,
            rx_buffer_packets: 0,
            link_fifo: false,
        }
    }

    /// A constant-latency, lossless network with no costs: unit tests of node logic.
    pub fn ideal(latency_ns: u64) -> Self {
        Self {
            base: Dist::Constant {
                value: latency_ns as f64,
            },
            base_min_ns: latency_ns,
            per_packet: Dist::ZERO,
            link_fifo: true,
            ..Self::appendix_c()
        }
    }

    /// The preset called `name`: `aws_c5`, `gcp_c2d`, `appendix_c` or `ideal` (10 µs).
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "aws_c5" | "aws" => Some(Self::aws_c5()),
            "gcp_c2d" | "gcp" => Some(Self::gcp_c2d()),
            "appendix_c" => Some(Self::appendix_c()),
            "ideal" => Some(Self::ideal(10_000)),
            _ => None,
        }
    }

    /// The straggler episodes of a host of this kind: [`NetModel::stragglers`] for end hosts,
    /// [`NetModel::relay_stragglers`] for relays.
    pub fn stragglers_of(&self, kind: HostKind) -> &EpisodeModel {
        match kind {
            HostKind::Leaf => &self.stragglers,
            HostKind::Relay => &self.relay_stragglers,
        }
    }

    /// Names accepted by [`NetModel::preset`].
    pub const PRESETS: [&'static str; 4] = ["aws_c5", "gcp_c2d", "appendix_c", "ideal"];

    /// The name of the preset this model equals, if any.
    pub fn preset_name(&self) -> Option<&'static str> {
        Self::PRESETS
            .into_iter()
            .find(|name| Self::preset(name).as_ref() == Some(self))
    }

    /// Parses a model from TOML and [validates](NetModel::validate) it; missing fields take
    /// the [`NetModel::aws_c5`] values.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let model: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        model.validate()?;
        Ok(model)
    }

    /// Checks every parameter a file could get wrong: probabilities in `[0, 1]`, the jitter's
    /// AR(1) coefficient in `[0, 1)`, rates and distributions finite and in range, at least one
    /// sending thread. A model that passes builds a [`Network`] that cannot panic on it.
    pub fn validate(&self) -> Result<(), String> {
        let probability = |name: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(format!("{name} must be a probability in [0, 1], got {p}"))
            }
        };
        probability("loss", self.loss)?;
        probability("quiet", self.quiet)?;
        if !(1..=TX_THREADS_MAX).contains(&self.tx_threads) {
            return Err(format!(
                "tx_threads must be from 1 to {TX_THREADS_MAX}, got {}",
                self.tx_threads
            ));
        }
        // Per-copy costs and floors beyond a second are no network: they would also push
        // event times past what a run's arithmetic is meant to hold.
        for (name, ns) in [
            ("send_cost_ns", self.send_cost_ns),
            ("recv_cost_ns", self.recv_cost_ns),
            ("base_min_ns", self.base_min_ns),
        ] {
            if ns > COST_NS_MAX {
                return Err(format!(
                    "{name} must be at most {COST_NS_MAX} (1 s), got {ns}"
                ));
            }
        }
        if self.header_bytes > 65_535 {
            return Err(format!(
                "header_bytes must be at most 65535, got {}",
                self.header_bytes
            ));
        }
        for (name, dist) in [
            ("base", &self.base),
            ("host_base", &self.host_base),
            ("relay_host_base", &self.relay_host_base),
            ("flow_pps", &self.flow_pps),
            ("relay_flow_pps", &self.relay_flow_pps),
            ("per_packet", &self.per_packet),
            ("spikes.duration", &self.spikes.duration),
            ("spikes.extra", &self.spikes.extra),
            ("stragglers.duration", &self.stragglers.duration),
            ("stragglers.extra", &self.stragglers.extra),
            ("relay_stragglers.duration", &self.relay_stragglers.duration),
            ("relay_stragglers.extra", &self.relay_stragglers.extra),
            ("pauses.duration", &self.pauses.duration),
        ] {
            dist.validate(name)?;
        }
        // After each is checked well-formed (a bad one says what is wrong with it).
        for (name, dist) in [
            ("flow_pps", &self.flow_pps),
            ("relay_flow_pps", &self.relay_flow_pps),
        ] {
            let mean = dist.mean();
            if mean != 0.0 && mean < FLOW_PPS_MIN {
                return Err(format!(
                    "{name} must be 0 (no shaping) or average at least {FLOW_PPS_MIN} packets/s, \
                     got a mean of {mean}"
                ));
            }
        }
        // At most one episode a microsecond per link or host: more is no longer an episode.
        for (name, rate) in [
            ("spikes.rate_per_s", self.spikes.rate_per_s),
            ("stragglers.rate_per_s", self.stragglers.rate_per_s),
            (
                "relay_stragglers.rate_per_s",
                self.relay_stragglers.rate_per_s,
            ),
            ("pauses.rate_per_s", self.pauses.rate_per_s),
        ] {
            if !(0.0..=1e6).contains(&rate) {
                return Err(format!("{name} must be between 0 and 1e6, got {rate}"));
            }
        }
        let jitter = &self.jitter;
        if !(0.0..=Dist::PARAM_MAX).contains(&jitter.median_ns) {
            return Err(format!(
                "jitter.median_ns must be between 0 and {}, got {}",
                Dist::PARAM_MAX,
                jitter.median_ns
            ));
        }
        for (name, sigma) in [
            ("jitter.sigma", jitter.sigma),
            ("jitter.per_packet_sigma", jitter.per_packet_sigma),
        ] {
            if !(0.0..=10.0).contains(&sigma) {
                return Err(format!("{name} must be between 0 and 10, got {sigma}"));
            }
        }
        if jitter.median_ns > 0.0 && !(0.0..1.0).contains(&jitter.correlation) {
            return Err(format!(
                "jitter.correlation must be in [0, 1), got {}",
                jitter.correlation
            ));
        }
        Ok(())
    }

    /// Time a copy of `bytes` occupies the sender's egress.
    pub fn egress_ns(&self, bytes: usize) -> u64 {
        let mut ns = self.send_cost_ns;
        if self.egress_bps > 0 {
            let bits = (bytes as u64 + u64::from(self.header_bytes)) * 8;
            ns += (u128::from(bits) * 1_000_000_000).div_ceil(u128::from(self.egress_bps)) as u64;
        }
        ns
    }
}

/// The slowest a shaped flow goes, packets a second: a flow's draw below it is raised to it
/// (a rate of 1e-9 held each copy for years of simulated time, and a run crawled).
pub const FLOW_PPS_MIN: f64 = 1_000.0;

/// What a host runs, for the parts of the model that differ by role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostKind {
    /// An end host (a gateway, an MP): its static delay is drawn from
    /// [`NetModel::host_base`]. Every host starts as one.
    #[default]
    Leaf,
    /// A relay (the root or a proxy): its static delay is drawn from
    /// [`NetModel::relay_host_base`].
    Relay,
}

/// Why the network dropped a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetDrop {
    /// Random loss in flight.
    Loss,
    /// Source and target were on two sides of a partition.
    Partition,
    /// The sender's egress backlog was over its bound.
    EgressFull,
    /// The receiver's buffer was full.
    RxBufferFull,
    /// The target (or the source) was killed.
    Dead,
    /// The target was paused and the pause drops instead of queueing.
    Paused,
}

/// Number of [`NetDrop`] variants.
pub const NET_DROP_COUNT: usize = 6;

/// Counters of the network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NetStats {
    /// Copies handed to the network.
    pub sent: u64,
    /// Copies delivered to a node.
    pub delivered: u64,
    /// Copies dropped, by [`NetDrop`] (in declaration order).
    pub dropped: [u64; NET_DROP_COUNT],
    /// Bytes handed to the network (payload only).
    pub bytes_sent: u64,
    /// Longest a copy waited for its sender's egress, nanoseconds.
    pub egress_wait_ns_max: u64,
    /// Most copies waiting in one receive buffer.
    pub rx_queue_max: u32,
}

impl NetStats {
    /// Copies dropped for `reason`.
    pub fn drops(&self, reason: NetDrop) -> u64 {
        self.dropped[reason as usize]
    }

    /// All dropped copies.
    pub fn drops_total(&self) -> u64 {
        self.dropped.iter().sum()
    }
}

/// A clog: copies sent from `source` to `target` during `[from_ns, until_ns)` are held and
/// arrive no earlier than `until_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clog {
    /// Sending host.
    pub source: u32,
    /// Receiving host.
    pub target: u32,
    /// Start of the clog, true time.
    pub from_ns: u64,
    /// End of the clog, true time.
    pub until_ns: u64,
}

/// A partition: during `[from_ns, until_ns)`, copies between a host of `side_a` and a host of
/// `side_b` (either direction) are dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// One side.
    pub side_a: Vec<u32>,
    /// The other side.
    pub side_b: Vec<u32>,
    /// Start, true time.
    pub from_ns: u64,
    /// End, true time.
    pub until_ns: u64,
}

/// The state of the network during a run.
#[derive(Debug)]
pub struct Network {
    model: NetModel,
    seed: u64,
    hosts: Vec<HostNet>,
    links: PairTable<Link>,
    clogs: Vec<Clog>,
    partitions: Vec<Partition>,
    stats: NetStats,
    /// Receive-buffer drops per host (incast shows up here).
    rx_drops: Vec<u64>,
}

#[derive(Debug)]
struct HostNet {
    /// When the wire has carried every byte handed to it so far.
    egress_free_ns: u64,
    /// When each sending thread is next free.
    tx_free_ns: Vec<u64>,
    /// The thread of the current fan-out and the time it started (copies sent at one `now`
    /// come from one handler).
    tx_batch: Option<(u64, usize)>,
    /// When every thread and the wire are free, as far as the copies sent so far go.
    busy_until_ns: u64,
    /// When the receive queue has served every copy it took.
    rx_free_ns: u64,
    /// This host's receive buffer in datagrams when it differs from the model's
    /// `rx_buffer_packets` (0 = unbounded); see [`Network::set_rx_buffer_packets`].
    rx_buffer_packets: Option<u32>,
    /// Copies taken since the queue was last idle. They are served back to back, so their
    /// service ends are `rx_free_ns`, `rx_free_ns - recv_cost_ns`, ...; the queue's depth at
    /// any later time follows from these two numbers (see [`HostNet::rx_waiting`]), with no
    /// list of copies to keep (a per-host allocation, and a cache miss on every delivery).
    rx_busy: u64,
    straggler: Episodes,
    /// This host's pauses ([`NetModel::pauses`]).
    pauses: Episodes,
    /// The host's static delay ([`NetModel::host_base`] or [`NetModel::relay_host_base`]).
    base_ns: f64,
    /// What the host runs ([`Network::set_host_kind`]).
    kind: HostKind,
}

#[derive(Debug)]
struct Link {
    rng: SimRng,
    base_ns: f64,
    jitter_level: f64,
    jitter_step: u64,
    spikes: Episodes,
    last_arrival_ns: u64,
    /// Departure of the copy that set `last_arrival_ns`.
    last_departure_ns: u64,
    /// Per-flow shaping: refill rate (packets per ns; 0 = off), tokens, and when counted.
    flow_rate_per_ns: f64,
    flow_tokens: f64,
    flow_tokens_at: u64,
}

/// A lazily advanced Poisson process of episodes.
#[derive(Debug)]
struct Episodes {
    rng: SimRng,
    current_from_ns: u64,
    current_until_ns: u64,
    current_extra_ns: f64,
    next_from_ns: u64,
}

impl Episodes {
    fn new(mut rng: SimRng, model: &EpisodeModel) -> Self {
        let next_from_ns = next_episode(&mut rng, model, 0);
        Self {
            rng,
            current_from_ns: 0,
            current_until_ns: 0,
            current_extra_ns: 0.0,
            next_from_ns,
        }
    }

    /// The extra delay at true time `t`; times must not go backwards by more than one episode.
    fn extra_at(&mut self, model: &EpisodeModel, t: u64) -> f64 {
        while t >= self.next_from_ns {
            let duration = self.rng.sample(&model.duration) as u64;
            self.current_from_ns = self.next_from_ns;
            self.current_until_ns = self.next_from_ns.saturating_add(duration.max(1));
            self.current_extra_ns = self.rng.sample(&model.extra);
            self.next_from_ns = next_episode(&mut self.rng, model, self.current_until_ns);
            assert!(self.next_from_ns >= self.current_until_ns);
        }
        if (self.current_from_ns..self.current_until_ns).contains(&t) {
            self.current_extra_ns
        } else {
            0.0
        }
    }
}

impl Episodes {
    /// The end of the episode under way at true time `t`, if one is (same rules as
    /// [`Episodes::extra_at`]).
    fn until_at(&mut self, model: &EpisodeModel, t: u64) -> Option<u64> {
        self.extra_at(model, t);
        (self.current_from_ns..self.current_until_ns)
            .contains(&t)
            .then_some(self.current_until_ns)
    }
}

fn next_episode(rng: &mut SimRng, model: &EpisodeModel, after: u64) -> u64 {
    if model.rate_per_s <= 0.0 {
        return u64::MAX;
    }
    let gap = rng.exponential(NS_PER_S / model.rate_per_s);
    after.saturating_add(gap.min(1e18) as u64)
}

/// Host `host`'s static delay (a draw of `dist`, [`NetModel::host_base`] or
/// [`NetModel::relay_host_base`]), from the host's own stream.
fn host_base_ns(seed: u64, dist: &Dist, host: u32) -> f64 {
    SimRng::derive(seed ^ 0x4057_BA5E, Purpose::Straggler, u64::from(host)).sample(dist)
}

/// Where a copy handed to the network goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// It reaches the target host's receive buffer at this true time.
    Arrive(u64),
    /// It was dropped.
    Drop(NetDrop),
}

impl Network {
    /// A network of `model` for a run with `seed`.
    ///
    /// # Panics
    /// If the model fails [`NetModel::validate`] (input is checked before it gets here:
    /// [`NetModel::from_toml`], `OutboundConfig::validate`).
    pub fn new(model: NetModel, seed: u64) -> Self {
        if let Err(error) = model.validate() {
            panic!("invalid network model: {error}");
        }
        Self {
            model,
            seed,
            hosts: Vec::new(),
            links: PairTable::new(),
            clogs: Vec::new(),
            partitions: Vec::new(),
            stats: NetStats::default(),
            rx_drops: Vec::new(),
        }
    }

    /// Adds a host and returns its id (the next free one: ids are dense from 0).
    pub fn add_host(&mut self) -> u32 {
        let id = u32::try_from(self.hosts.len()).expect("fewer than 2^32 hosts");
        let rng = SimRng::derive(self.seed, Purpose::Straggler, u64::from(id));
        self.hosts.push(HostNet {
            egress_free_ns: 0,
            tx_free_ns: vec![0; self.model.tx_threads.max(1) as usize],
            tx_batch: None,
            busy_until_ns: 0,
            rx_free_ns: 0,
            rx_buffer_packets: None,
            rx_busy: 0,
            straggler: Episodes::new(rng, self.model.stragglers_of(HostKind::Leaf)),
            pauses: Episodes::new(
                SimRng::derive(self.seed ^ 0x9A05E, Purpose::Straggler, u64::from(id)),
                &self.model.pauses.episodes(),
            ),
            base_ns: host_base_ns(self.seed, &self.model.host_base, id),
            kind: HostKind::Leaf,
        });
        self.rx_drops.push(0);
        id
    }

    /// Hosts added so far.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// Gives host `id` a receive buffer of `packets` datagrams (0 = unbounded) instead of the
    /// model's: a host whose receive path differs from the rest (a kernel-bypass relay polling
    /// a deep NIC ring among VMs reading kernel sockets).
    pub fn set_rx_buffer_packets(&mut self, id: u32, packets: u32) {
        self.hosts[id as usize].rx_buffer_packets = Some(packets);
    }

    /// Makes host `id` a `kind` host. Call it before the host sends or receives: links take
    /// the static delays of their two hosts when they are created.
    pub fn set_host_kind(&mut self, id: u32, kind: HostKind) {
        let dist = match kind {
            HostKind::Leaf => &self.model.host_base,
            HostKind::Relay => &self.model.relay_host_base,
        };
        let host = &mut self.hosts[id as usize];
        host.base_ns = host_base_ns(self.seed, dist, id);
        // The same stream as `add_host`'s, its episodes drawn at the kind's rate.
        host.straggler = Episodes::new(
            SimRng::derive(self.seed, Purpose::Straggler, u64::from(id)),
            self.model.stragglers_of(kind),
        );
        host.kind = kind;
    }

    /// The model.
    pub fn model(&self) -> &NetModel {
        &self.model
    }

    /// Counters.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// Links created so far (one per directed host pair that carried a copy).
    /// Takes `other`'s counters (a twin shard's network, whose hosts' receive drops are its
    /// own nodes'): sums, and the larger of the maxima; `other`'s are reset.
    pub(crate) fn absorb(&mut self, other: &mut Self) {
        let theirs = core::mem::take(&mut other.stats);
        let mine = &mut self.stats;
        mine.sent += theirs.sent;
        mine.delivered += theirs.delivered;
        for (mine, theirs) in mine.dropped.iter_mut().zip(theirs.dropped) {
            *mine += theirs;
        }
        mine.bytes_sent += theirs.bytes_sent;
        mine.egress_wait_ns_max = mine.egress_wait_ns_max.max(theirs.egress_wait_ns_max);
        mine.rx_queue_max = mine.rx_queue_max.max(theirs.rx_queue_max);
        if self.rx_drops.len() < other.rx_drops.len() {
            self.rx_drops.resize(other.rx_drops.len(), 0);
        }
        for (mine, theirs) in self.rx_drops.iter_mut().zip(&mut other.rx_drops) {
            *mine += core::mem::take(theirs);
        }
    }

    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// Receive-buffer drops at host `id`.
    pub fn rx_drops(&self, id: u32) -> u64 {
        self.rx_drops[id as usize]
    }

    /// The base delay of the link `source -> target` (creates the link if it is new).
    pub fn link_base_ns(&mut self, source: u32, target: u32) -> u64 {
        self.link(source, target).base_ns as u64
    }

    /// Clogs the link `source -> target` during `[from_ns, until_ns)`.
    pub fn clog(&mut self, clog: Clog) {
        assert!(clog.from_ns <= clog.until_ns);
        self.clogs.push(clog);
    }

    /// Partitions two sets of hosts during `[from_ns, until_ns)`.
    pub fn partition(&mut self, partition: Partition) {
        assert!(partition.from_ns <= partition.until_ns);
        assert!(
            !partition
                .side_a
                .iter()
                .any(|a| partition.side_b.contains(a)),
            "a host on both sides of a partition"
        );
        self.partitions.push(partition);
    }

    /// Forgets the clogs and partitions that start at or after true time `at`
    /// ([`crate::Sim::cancel_faults_from`]).
    pub fn cancel_faults_from(&mut self, at: u64) {
        self.clogs.retain(|clog| clog.from_ns < at);
        self.partitions.retain(|partition| partition.from_ns < at);
    }

    /// If host `host` is in a pause ([`NetModel::pauses`]) at true time `t`, when it ends.
    /// Queries of one host must come in about time order (no further back than one pause).
    pub fn paused_until(&mut self, host: u32, t: u64) -> Option<u64> {
        if self.model.pauses.rate_per_s <= 0.0 {
            return None;
        }
        let pauses = self.model.pauses.episodes();
        self.hosts[host as usize].pauses.until_at(&pauses, t)
    }

    /// How long a copy of `bytes` bytes that host `source` sent at true time `now` would wait
    /// for its egress (what [`Network::send`] bounds by `egress_backlog_ns_max`).
    pub fn egress_wait_ns(&self, now: u64, source: u32, bytes: usize) -> u64 {
        let egress_ns = self.model.egress_ns(bytes);
        let host = &self.hosts[source as usize];
        let (done, wire_free) = host.departure(
            now,
            host.next_thread(now),
            egress_ns,
            self.model.send_cost_ns,
        );
        done.max(wire_free) - egress_ns - now
    }

    /// How long after `now` host `source`'s socket is writable again, or `None` if it is now:
    /// a driver hands a node's next datagram over only while a copy would wait at most half
    /// `egress_backlog_ns_max` (Linux's `sock_writeable`: under half the send buffer in use),
    /// so a burst waits in the node's outbox instead of overflowing the egress. A fan-out
    /// started while writable is sent whole; its copies past the bound are still dropped.
    pub fn unwritable_for_ns(&self, now: u64, source: u32) -> Option<u64> {
        let half = self.model.egress_backlog_ns_max / 2;
        // Every thread and the wire free by then: no copy can wait longer (the common case,
        // one comparison per datagram).
        if self.hosts[source as usize].busy_until_ns <= now.saturating_add(half) {
            return None;
        }
        let wait = self.egress_wait_ns(now, source, 0);
        (wait > half).then(|| wait - half)
    }

    /// Counts a copy the driver dropped because its target or source is dead or paused.
    pub fn count_drop(&mut self, reason: NetDrop) {
        self.stats.dropped[reason as usize] += 1;
    }

    /// Sends one copy of `bytes` bytes from `source` to `target` at true time `now`: takes
    /// the sender's egress, then the link. Copies of one fan-out must be sent in order.
    pub fn send(&mut self, now: u64, source: u32, target: u32, bytes: usize) -> Route {
        self.stats.sent += 1;
        self.stats.bytes_sent += bytes as u64;
        let egress_ns = self.model.egress_ns(bytes);
        let host = &mut self.hosts[source as usize];
        let thread = host.next_thread(now);
        host.tx_batch = Some((now, thread));
        let (done, wire_free) = host.departure(now, thread, egress_ns, self.model.send_cost_ns);
        let departure = done.max(wire_free);
        let wait = departure - egress_ns - now;
        if wait > self.model.egress_backlog_ns_max {
            return self.drop(NetDrop::EgressFull);
        }
        self.stats.egress_wait_ns_max = self.stats.egress_wait_ns_max.max(wait);
        host.tx_free_ns[thread] = done;
        host.egress_free_ns = wire_free;
        host.busy_until_ns = host.busy_until_ns.max(done).max(wire_free);
        assert!(departure >= now);

        if self.partitioned(source, target, departure) {
            return self.drop(NetDrop::Partition);
        }
        let straggle_ns = self.straggle_ns(source, departure) + self.straggle_ns(target, departure);
        let (model, hosts) = (&self.model, &self.hosts);
        let link = self.links.get_or_insert_with(source, target, || {
            let hosts_ns = hosts[source as usize].base_ns + hosts[target as usize].base_ns;
            let flow_pps = match hosts[target as usize].kind {
                HostKind::Leaf => &model.flow_pps,
                HostKind::Relay => &model.relay_flow_pps,
            };
            Link::new(self.seed, model, source, target, hosts_ns, flow_pps)
        });
        if model.loss > 0.0 && link.rng.chance(model.loss) {
            return self.drop(NetDrop::Loss);
        }
        let shaped = link.shape(model, departure);
        let delay_ns = link.delay_ns(model, shaped) + straggle_ns;
        let mut arrival = shaped.saturating_add(delay_ns.max(0.0) as u64);
        for clog in &self.clogs {
            let clogged = clog.source == source && clog.target == target;
            if clogged && (clog.from_ns..clog.until_ns).contains(&departure) {
                arrival = arrival.max(clog.until_ns);
            }
        }
        // FIFO by departure: a copy handed over later may leave earlier (from an idle sending
        // thread, while a long fan-out still queues on another); it then does not wait for
        // the copies that leave after it.
        if model.link_fifo && shaped >= link.last_departure_ns {
            arrival = arrival.max(link.last_arrival_ns);
            link.last_arrival_ns = arrival;
            link.last_departure_ns = shaped;
        }
        assert!(arrival >= departure);
        Route::Arrive(arrival)
    }

    /// A copy reaches `target`'s receive buffer at true time `now` (events must come in time
    /// order per host). Returns when the node's handler runs, or the drop.
    pub fn receive(&mut self, now: u64, target: u32) -> Route {
        let cost = self.model.recv_cost_ns;
        let host = &mut self.hosts[target as usize];
        let waiting = host.rx_waiting(now, cost);
        let limit = host
            .rx_buffer_packets
            .unwrap_or(self.model.rx_buffer_packets);
        if limit > 0 && waiting >= u64::from(limit) {
            self.rx_drops[target as usize] += 1;
            return self.drop(NetDrop::RxBufferFull);
        }
        if waiting == 0 {
            host.rx_busy = 0;
        }
        let mut start = now.max(host.rx_free_ns);
        if self.model.pauses.rate_per_s > 0.0 {
            let pauses = self.model.pauses.episodes();
            if let Some(until) = host.pauses.until_at(&pauses, start) {
                start = until;
            }
        }
        let done = start + cost;
        host.rx_free_ns = done;
        host.rx_busy += 1;
        if limit > 0 {
            let depth = u32::try_from(waiting + 1).unwrap_or(u32::MAX);
            self.stats.rx_queue_max = self.stats.rx_queue_max.max(depth);
        }
        self.stats.delivered += 1;
        Route::Arrive(done)
    }

    fn drop(&mut self, reason: NetDrop) -> Route {
        self.stats.dropped[reason as usize] += 1;
        Route::Drop(reason)
    }

    fn link(&mut self, source: u32, target: u32) -> &mut Link {
        let (model, hosts) = (&self.model, &self.hosts);
        self.links.get_or_insert_with(source, target, || {
            let hosts_ns = hosts[source as usize].base_ns + hosts[target as usize].base_ns;
            let flow_pps = match hosts[target as usize].kind {
                HostKind::Leaf => &model.flow_pps,
                HostKind::Relay => &model.relay_flow_pps,
            };
            Link::new(self.seed, model, source, target, hosts_ns, flow_pps)
        })
    }

    fn straggle_ns(&mut self, host: u32, t: u64) -> f64 {
        let host = &mut self.hosts[host as usize];
        let model = self.model.stragglers_of(host.kind);
        if model.rate_per_s <= 0.0 {
            return 0.0;
        }
        host.straggler.extra_at(model, t)
    }

    fn partitioned(&self, source: u32, target: u32, t: u64) -> bool {
        self.partitions.iter().any(|p| {
            (p.from_ns..p.until_ns).contains(&t)
                && ((p.side_a.contains(&source) && p.side_b.contains(&target))
                    || (p.side_b.contains(&source) && p.side_a.contains(&target)))
        })
    }
}

impl HostNet {
    /// The thread a copy sent at `now` takes: one fan-out stays on one thread, a new one takes
    /// the thread free first.
    fn next_thread(&self, now: u64) -> usize {
        match self.tx_batch {
            Some((at, thread)) if at == now => thread,
            _ => {
                let (thread, _) = self
                    .tx_free_ns
                    .iter()
                    .enumerate()
                    .min_by_key(|&(i, &free)| (free.max(now), i))
                    .expect("at least one thread");
                thread
            }
        }
    }

    /// When a copy taking `egress_ns` handed to `thread` at `now` is done on its thread, and
    /// when the wire has carried it.
    fn departure(&self, now: u64, thread: usize, egress_ns: u64, send_cost_ns: u64) -> (u64, u64) {
        let done = now.max(self.tx_free_ns[thread]) + egress_ns;
        // The threads share the wire, as a fluid: `egress_free_ns` is when the wire would have
        // carried every byte handed to it so far (each at its handler's time), and a copy
        // leaves no sooner. One thread alone never waits for it (its copies are spaced by
        // more than their wire time); many busy threads together do.
        let wire_free = now.max(self.egress_free_ns) + (egress_ns - send_cost_ns);
        (done, wire_free)
    }

    /// Copies in the receive queue at `now` (taken, service not ended by `now`): the last
    /// `rx_busy` copies end `cost` apart at `rx_free_ns`, and those ending after `now` wait.
    fn rx_waiting(&self, now: u64, cost: u64) -> u64 {
        if self.rx_free_ns <= now || cost == 0 {
            return 0;
        }
        (self.rx_free_ns - now).div_ceil(cost).min(self.rx_busy)
    }
}

impl Link {
    /// `hosts_ns`: the sum of the two hosts' static delays (half of it goes on the link).
    fn new(
        seed: u64,
        model: &NetModel,
        source: u32,
        target: u32,
        hosts_ns: f64,
        flow_pps: &Dist,
    ) -> Self {
        let key = u64::from(source) << 32 | u64::from(target);
        let mut rng = SimRng::derive(seed, Purpose::Link, key);
        // The base is a property of the VM pair, the same both ways (clock sync assumes
        // symmetric minimum delays, as real paths mostly are): draw it from the pair's stream.
        let pair = u64::from(source.min(target)) << 32 | u64::from(source.max(target));
        let base_ns = (SimRng::derive(seed ^ 0xBA5E, Purpose::Link, pair).sample(&model.base)
            + hosts_ns / 2.0)
            .max(model.base_min_ns as f64);
        let flow_pps = SimRng::derive(seed ^ 0xF10E, Purpose::Link, key).sample(flow_pps);
        let jitter_level = model.jitter.sigma * rng.normal();
        let spike_rng = SimRng::derive(seed ^ 0x5350_494B_4553, Purpose::Link, key);
        Self {
            rng,
            base_ns,
            jitter_level,
            jitter_step: 0,
            spikes: Episodes::new(spike_rng, &model.spikes),
            last_arrival_ns: 0,
            last_departure_ns: 0,
            // Off at 0 (or a draw below it); else at least FLOW_PPS_MIN.
            flow_rate_per_ns: match flow_pps {
                pps if pps > 0.0 => pps.max(FLOW_PPS_MIN) / NS_PER_S,
                _ => 0.0,
            },
            flow_tokens: f64::from(model.flow_burst.max(1)),
            flow_tokens_at: 0,
        }
    }

    /// When a copy leaving the sender at `t` passes the flow's token bucket.
    fn shape(&mut self, model: &NetModel, t: u64) -> u64 {
        if self.flow_rate_per_ns <= 0.0 {
            return t;
        }
        // A copy may leave before one already counted (an idle sending thread while a long
        // fan-out queues on another): it takes a token if there is one and leaves at its own
        // time, instead of being pushed behind a copy that leaves after it.
        let departure = t;
        let t = t.max(self.flow_tokens_at);
        let burst = f64::from(model.flow_burst.max(1));
        let refill = (t - self.flow_tokens_at) as f64 * self.flow_rate_per_ns;
        self.flow_tokens = (self.flow_tokens + refill).min(burst);
        self.flow_tokens_at = t;
        if self.flow_tokens >= 1.0 {
            self.flow_tokens -= 1.0;
            return departure;
        }
        let wait = (((1.0 - self.flow_tokens) / self.flow_rate_per_ns).ceil() as u64)
            .min(FLOW_WAIT_NS_MAX);
        self.flow_tokens = 0.0;
        self.flow_tokens_at = t + wait;
        t + wait
    }

    /// The link's delay for a copy departing at `t` (without stragglers and clogs).
    fn delay_ns(&mut self, model: &NetModel, t: u64) -> f64 {
        let quiet = model.quiet > 0.0 && self.rng.chance(model.quiet);
        let mut delay = self.base_ns;
        if !quiet {
            delay += self.rng.sample(&model.per_packet);
        }
        let jitter = &model.jitter;
        if jitter.median_ns > 0.0 {
            let step = t / jitter.step_ns.max(1);
            if step > self.jitter_step {
                // Exact k-step AR(1) transition: x' = phi^k x + sqrt(1 - phi^2k) sigma eps.
                let k = i32::try_from(step - self.jitter_step).unwrap_or(i32::MAX);
                let phi_k = jitter.correlation.powi(k);
                let noise = (1.0 - phi_k * phi_k).max(0.0).sqrt() * jitter.sigma;
                self.jitter_level = phi_k * self.jitter_level + noise * self.rng.normal();
                self.jitter_step = step;
            }
            if quiet {
                // The stream moves on as if the term were drawn (a normal and an exponential:
                // three words), so the copies after this one see the same draws either way.
                self.rng.skip(NORMAL_DRAWS + EXPONENTIAL_DRAWS);
            } else {
                let per_packet = jitter.per_packet_sigma * self.rng.normal();
                let e = self.rng.exponential(1.0) / core::f64::consts::LN_2;
                delay += jitter.median_ns * e * (self.jitter_level + per_packet).exp();
            }
        }
        if model.spikes.rate_per_s > 0.0 {
            delay += self.spikes.extra_at(&model.spikes, t);
        }
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the receive queue kept as two numbers behaves exactly as a list of service-end
    /// times (the implementation before). Method: random arrival gaps around the service time
    /// (bursts and idle spells), every buffer limit from 1 to 5 and none, against the list.
    #[test]
    fn receive_queue_matches_a_list_of_service_ends() {
        use std::collections::VecDeque;
        let mut rng = SimRng::from_seed(11);
        for limit in 0..6u32 {
            let model = NetModel {
                rx_buffer_packets: limit,
                recv_cost_ns: 700,
                ..NetModel::ideal(1_000)
            };
            let mut net = network(model, 1);
            let (mut queue, mut free, mut now) = (VecDeque::<u64>::new(), 0u64, 0u64);
            for _ in 0..20_000 {
                now += rng.below(1_500);
                while queue.front().is_some_and(|&end| end <= now) {
                    queue.pop_front();
                }
                let expected = if limit > 0 && queue.len() >= limit as usize {
                    None
                } else {
                    free = now.max(free) + 700;
                    queue.push_back(free);
                    Some(free)
                };
                let got = match net.receive(now, 0) {
                    Route::Arrive(t) => Some(t),
                    Route::Drop(reason) => {
                        assert_eq!(reason, NetDrop::RxBufferFull);
                        None
                    }
                };
                assert_eq!(got, expected, "limit {limit} at {now}");
            }
        }
    }

    /// Goal: a host given its own receive buffer keeps it while the others keep the model's.
    /// Method: a burst of 10 copies at one instant into host 0 (4 datagrams, the model's) and
    /// host 1 (given 1,024).
    #[test]
    fn a_host_can_have_its_own_receive_buffer() {
        let model = NetModel {
            rx_buffer_packets: 4,
            recv_cost_ns: 1_000,
            ..NetModel::ideal(1_000)
        };
        let mut net = network(model, 2);
        net.set_rx_buffer_packets(1, 1024);
        for _ in 0..10 {
            let _ = net.receive(5_000, 0);
            let _ = net.receive(5_000, 1);
        }
        assert_eq!(net.rx_drops(0), 6, "the model's 4 datagrams");
        assert_eq!(net.rx_drops(1), 0, "host 1 holds all 10");
    }

    /// Goal: a paused host serves no copy until its pause ends, and `paused_until` tells
    /// the driver when that is (for timers). Method: pauses of exactly 50 µs at 100 per
    /// second; probe every microsecond for 1 s: the paused share of time is about 0.5%, every
    /// paused instant maps to the end of its own pause, and a copy arriving then is served
    /// right after it.
    #[test]
    fn a_paused_host_serves_nothing_until_it_resumes() {
        let model = NetModel {
            recv_cost_ns: 100,
            pauses: PauseModel {
                rate_per_s: 100.0,
                duration: Dist::Constant { value: 50_000.0 },
            },
            ..NetModel::ideal(1_000)
        };
        let mut net = network(model, 2);
        let (mut paused, mut last_until, mut free) = (0u64, 0u64, 0u64);
        for t in (0..1_000_000_000u64).step_by(1_000) {
            match net.paused_until(0, t) {
                Some(until) => {
                    paused += 1;
                    assert!(until > t && until - t <= 50_000, "{t} {until}");
                    // The first copy of a pause is served right after it (later ones queue
                    // behind it).
                    if until != last_until {
                        free = until + 100;
                        assert_eq!(net.receive(t, 0), Route::Arrive(free));
                        last_until = until;
                    }
                }
                None => {
                    free = free.max(t) + 100;
                    assert_eq!(net.receive(t, 0), Route::Arrive(free));
                }
            }
        }
        // ~100 pauses of 50 µs: 0.5% of the 10^6 probes.
        assert!((3_000..7_000).contains(&paused), "{paused}");
        // Another host pauses at other times.
        let other = (0..1_000_000_000u64)
            .step_by(1_000)
            .filter(|&t| net.paused_until(1, t).is_some())
            .count();
        assert!(other > 0 && other as u64 != paused);
        // Without pauses nothing waits.
        let mut calm = network(NetModel::ideal(1_000), 1);
        assert_eq!(calm.paused_until(0, 5), None);
    }

    fn arrive(route: Route) -> u64 {
        match route {
            Route::Arrive(t) => t,
            Route::Drop(reason) => panic!("dropped: {reason:?}"),
        }
    }

    fn network(model: NetModel, hosts: u32) -> Network {
        let mut net = Network::new(model, 42);
        for id in 0..hosts {
            assert_eq!(net.add_host(), id);
        }
        net
    }

    #[test]
    fn egress_serialises_the_copies_of_a_fan_out() {
        let model = NetModel {
            send_cost_ns: 2_700,
            egress_bps: 16_000_000_000,
            ..NetModel::ideal(10_000)
        };
        let per_copy = model.egress_ns(466);
        // 2.7 µs + (466 + 0) * 8 / 16 Gbps = 2.7 µs + 233 ns.
        assert_eq!(per_copy, 2_700 + 233);
        let mut net = network(model, 11);
        let arrivals: Vec<u64> = (1..=10)
            .map(|target| arrive(net.send(1_000, 0, target, 466)))
            .collect();
        for (i, &t) in arrivals.iter().enumerate() {
            assert_eq!(t, 1_000 + per_copy * (i as u64 + 1) + 10_000);
        }
        // The egress stays busy: a copy sent now waits behind all ten.
        assert_eq!(
            arrive(net.send(1_000, 0, 1, 466)),
            1_000 + per_copy * 11 + 10_000
        );
        // Another host's egress is independent.
        assert_eq!(
            arrive(net.send(1_000, 5, 1, 466)),
            1_000 + per_copy + 10_000
        );
    }

    #[test]
    fn egress_backlog_bound_drops() {
        let model = NetModel {
            send_cost_ns: 1_000,
            egress_backlog_ns_max: 5_000,
            ..NetModel::ideal(1)
        };
        let mut net = network(model, 2);
        let routes: Vec<Route> = (0..10).map(|_| net.send(0, 0, 1, 100)).collect();
        let dropped = routes
            .iter()
            .filter(|r| matches!(r, Route::Drop(NetDrop::EgressFull)))
            .count();
        assert_eq!(
            dropped, 4,
            "copies 7..10 would wait more than 5 µs: {routes:?}"
        );
    }

    #[test]
    fn a_socket_is_writable_while_under_half_its_backlog() {
        let model = NetModel {
            send_cost_ns: 1_000,
            egress_backlog_ns_max: 5_000,
            ..NetModel::ideal(1)
        };
        let mut net = network(model, 2);
        assert_eq!(net.unwritable_for_ns(0, 0), None);
        // Two copies: the third would wait 2 µs, under half the bound.
        net.send(0, 0, 1, 100);
        net.send(0, 0, 1, 100);
        assert_eq!(net.egress_wait_ns(0, 0, 100), 2_000);
        assert_eq!(net.unwritable_for_ns(0, 0), None);
        // Four: it would wait 4 µs, 1.5 µs over half; writable again once that has passed.
        net.send(0, 0, 1, 100);
        net.send(0, 0, 1, 100);
        assert_eq!(net.unwritable_for_ns(0, 0), Some(1_500));
        assert_eq!(net.unwritable_for_ns(1_000, 0), Some(500));
        assert_eq!(net.unwritable_for_ns(1_500, 0), None);
        // The other host's egress is its own.
        assert_eq!(net.unwritable_for_ns(0, 1), None);
    }

    #[test]
    fn loss_rate_matches_the_model() {
        let model = NetModel {
            loss: 0.02,
            ..NetModel::ideal(1_000)
        };
        let mut net = network(model, 2);
        let n = 100_000;
        let lost = (0..n)
            .filter(|i| matches!(net.send(i * 10, 0, 1, 100), Route::Drop(NetDrop::Loss)))
            .count();
        assert!((1_800..2_200).contains(&lost), "lost {lost} of {n}");
        assert_eq!(net.stats().drops(NetDrop::Loss), lost as u64);
    }

    #[test]
    fn rx_buffer_overflows_under_incast() {
        let model = NetModel {
            recv_cost_ns: 1_000,
            rx_buffer_packets: 8,
            ..NetModel::ideal(1)
        };
        let mut net = network(model, 1);
        // 20 copies arrive at once: 8 fit in the buffer, 12 are dropped.
        let routes: Vec<Route> = (0..20).map(|_| net.receive(5_000, 0)).collect();
        let delivered: Vec<u64> = routes
            .iter()
            .filter_map(|r| match r {
                Route::Arrive(t) => Some(*t),
                Route::Drop(_) => None,
            })
            .collect();
        assert_eq!(
            delivered,
            (1..=8).map(|i| 5_000 + i * 1_000).collect::<Vec<_>>()
        );
        assert_eq!(net.rx_drops(0), 12);
        // Once the buffer drains, arrivals are accepted again.
        assert_eq!(net.receive(13_000, 0), Route::Arrive(14_000));
        // A rate under the service rate never drops.
        let before = net.rx_drops(0);
        for i in 0..1_000 {
            assert!(matches!(
                net.receive(20_000 + i * 1_100, 0),
                Route::Arrive(_)
            ));
        }
        assert_eq!(net.rx_drops(0), before);
    }

    #[test]
    fn base_latency_differs_per_pair_and_is_stable() {
        let mut net = network(NetModel::aws_c5(), 4);
        let a = net.link_base_ns(0, 1);
        let b = net.link_base_ns(0, 2);
        assert_ne!(a, b);
        assert_eq!(net.link_base_ns(1, 0), a, "symmetric");
        // A link's draws do not depend on which other links exist.
        let mut other = network(NetModel::aws_c5(), 4);
        assert_eq!(other.link_base_ns(0, 2), b);
        assert_eq!(other.link_base_ns(0, 1), a);
    }

    #[test]
    fn fifo_links_never_reorder_and_spikes_last() {
        let model = NetModel {
            spikes: EpisodeModel {
                rate_per_s: 50.0,
                duration: Dist::Constant { value: 5_000_000.0 },
                extra: Dist::Constant { value: 500_000.0 },
            },
            loss: 0.0,
            ..NetModel::aws_c5()
        };
        let mut net = network(model, 2);
        let mut last = 0;
        let mut spiked = 0;
        for i in 0..20_000u64 {
            let sent = i * 50_000;
            let t = arrive(net.send(sent, 0, 1, 466));
            assert!(t >= last);
            last = t;
            if t - sent > 400_000 {
                spiked += 1;
            }
        }
        // 1 s at 50 episodes/s of 5 ms each: about 20% of copies see the spike.
        assert!((2_000..6_000).contains(&spiked), "{spiked}");
    }

    #[test]
    fn jitter_drifts_but_the_floor_stays() {
        // Only the jitter term (its level drifting strongly), no quiet copies: the fastest
        // of many copies is the base in every stretch of time, whatever the level did.
        let model = NetModel {
            per_packet: Dist::ZERO,
            quiet: 0.0,
            jitter: JitterModel {
                median_ns: 5_000.0,
                sigma: 1.0,
                step_ns: 1_000_000,
                correlation: 0.5,
                per_packet_sigma: 0.6,
            },
            spikes: EpisodeModel::OFF,
            stragglers: EpisodeModel::OFF,
            flow_pps: Dist::ZERO,
            loss: 0.0,
            ..NetModel::aws_c5()
        };
        let mut net = network(model, 2);
        let base = net.link_base_ns(0, 1);
        let mut medians = Vec::new();
        for stretch in 0..10u64 {
            let mut delays: Vec<u64> = (0..2_000u64)
                .map(|i| {
                    let sent = stretch * 100_000_000 + i * 10_000;
                    arrive(net.send(sent, 0, 1, 100)) - sent - model_egress()
                })
                .collect();
            delays.sort_unstable();
            assert!(
                delays[0] - base < 100,
                "stretch {stretch}: fastest {} over base {base}",
                delays[0]
            );
            medians.push(delays[delays.len() / 2] - base);
        }
        // The level really drifts: the stretches' medians differ by a factor of 2 or more.
        let (lo, hi) = (medians.iter().min().unwrap(), medians.iter().max().unwrap());
        assert!(*hi > 2 * *lo, "medians {medians:?}");
    }

    fn model_egress() -> u64 {
        NetModel::aws_c5().egress_ns(100)
    }

    #[test]
    fn sending_threads_let_a_second_fan_out_start_at_once() {
        for (threads, waits) in [(1, true), (2, false)] {
            let model = NetModel {
                send_cost_ns: 2_000,
                tx_threads: threads,
                ..NetModel::ideal(10_000)
            };
            let mut net = network(model, 12);
            // A fan-out of 10 copies at t = 0 keeps one thread busy for 20 µs.
            for target in 1..=10 {
                arrive(net.send(0, 0, target, 100));
            }
            // Another handler's copy at t = 1 µs.
            let t = arrive(net.send(1_000, 0, 11, 100));
            let expected = if waits { 22_000 } else { 3_000 } + 10_000;
            assert_eq!(t, expected, "{threads} threads");
        }
    }

    /// Goal: a copy that leaves before one handed over earlier (another, idle sending
    /// thread) is neither shaped nor held (FIFO) behind it. It once was, on the path back
    /// only: a clock-probe reply to a late receiver of direct unicast waited for that
    /// receiver's data copy every time, and its clock was 30-50 µs off.
    #[test]
    fn a_copy_leaving_first_is_not_held_behind_a_later_one() {
        let model = NetModel {
            send_cost_ns: 2_000,
            tx_threads: 2,
            flow_pps: Dist::Constant { value: 1e6 },
            flow_burst: 8,
            ..NetModel::ideal(10_000)
        };
        let mut net = network(model, 11);
        // A fan-out of 10 copies at t = 0 on one thread: the copy to host 10 leaves at 20 µs.
        let last = (1..=10)
            .map(|target| arrive(net.send(0, 0, target, 100)))
            .last();
        assert_eq!(last, Some(30_000));
        // Another handler at 1 µs takes the idle thread: it leaves at 3 µs, arrives at 13.
        assert_eq!(arrive(net.send(1_000, 0, 10, 100)), 13_000);
        // Copies after both are still in order behind the fan-out's.
        assert_eq!(arrive(net.send(25_000, 0, 10, 100)), 37_000);
    }

    #[test]
    fn flows_are_shaped_by_a_token_bucket() {
        let model = NetModel {
            flow_pps: Dist::Constant { value: 100_000.0 },
            flow_burst: 4,
            ..NetModel::ideal(10_000)
        };
        let mut net = network(model, 3);
        // 10 copies at once: 4 pass, then one every 10 µs.
        let arrivals: Vec<u64> = (0..10).map(|_| arrive(net.send(0, 0, 1, 100))).collect();
        for (i, &t) in arrivals.iter().enumerate() {
            let wait = (i as u64).saturating_sub(3) * 10_000;
            assert_eq!(t, 10_000 + wait, "copy {i}");
        }
        // Another flow from the same host is not held back.
        assert_eq!(arrive(net.send(0, 0, 2, 100)), 10_000);
        // After a quiet spell the bucket is full again.
        let later = 1_000_000;
        for _ in 0..4 {
            assert_eq!(arrive(net.send(later, 0, 1, 100)), later + 10_000);
        }
    }

    /// Goal: end hosts straggle by `stragglers`, relays by `relay_stragglers`. Method: every
    /// end host straggles by 50 µs for the whole test, relays never; a relay sends to an end
    /// host and to a relay.
    #[test]
    fn relays_and_end_hosts_straggle_apart() {
        let model = NetModel {
            stragglers: EpisodeModel {
                rate_per_s: 1e6,
                duration: Dist::Constant { value: 1e9 },
                extra: Dist::Constant { value: 50_000.0 },
            },
            ..NetModel::ideal(10_000)
        };
        let mut net = network(model, 3);
        net.set_host_kind(0, HostKind::Relay);
        net.set_host_kind(2, HostKind::Relay);
        // Episodes start within microseconds at 1e6 per s; 1 ms in, every leaf is in one.
        let t = 1_000_000;
        assert_eq!(
            arrive(net.send(t, 0, 1, 100)),
            t + 60_000,
            "into an end host"
        );
        assert_eq!(arrive(net.send(t, 0, 2, 100)), t + 10_000, "relay to relay");
    }

    /// A flow shaped to almost nothing is refused, and a drawn rate below [`FLOW_PPS_MIN`]
    /// is raised to it: the hostile-input sweep's 1e-9 packets/s made a 50 ms run crawl for
    /// minutes (before, [`FLOW_WAIT_NS_MAX`] only kept the clock from wrapping around).
    /// Method: rates drawn uniformly from almost nothing to 2,000/s (half of them under the
    /// floor); on every flow the second of two copies sent at once waits at most 1 ms.
    #[test]
    fn a_flow_is_shaped_at_no_less_than_the_floor() {
        let crawling = NetModel {
            flow_pps: Dist::Constant { value: 1e-12 },
            ..NetModel::ideal(10_000)
        };
        assert!(crawling.validate().unwrap_err().contains("flow_pps"));
        let model = NetModel {
            flow_pps: Dist::Uniform {
                low: 1e-12,
                high: 2.0 * FLOW_PPS_MIN,
            },
            flow_burst: 1,
            ..NetModel::ideal(10_000)
        };
        let mut net = network(model, 41);
        for target in 1..41 {
            assert_eq!(arrive(net.send(0, 0, target, 100)), 10_000, "the one token");
            let held = arrive(net.send(0, 0, target, 100));
            let floor_wait = (1e9 / FLOW_PPS_MIN) as u64;
            assert!(held <= 10_000 + floor_wait, "flow 0 -> {target}: {held}");
        }
    }

    /// Goal: a flow into a relay is shaped by `relay_flow_pps`, a flow into an end host by
    /// `flow_pps`. Method: 10 copies at once from host 0 to a leaf and to a relay, each flow
    /// holding 4 packets: the leaf's flow passes one every 10 µs after the bucket, the
    /// relay's one every 1 µs.
    #[test]
    fn flows_into_relays_have_their_own_shaping() {
        let model = NetModel {
            flow_pps: Dist::Constant { value: 100_000.0 },
            relay_flow_pps: Dist::Constant { value: 1_000_000.0 },
            flow_burst: 4,
            ..NetModel::ideal(10_000)
        };
        let mut net = network(model, 3);
        net.set_host_kind(2, HostKind::Relay);
        for (target, gap) in [(1, 10_000), (2, 1_000)] {
            for i in 0..10u64 {
                let wait = i.saturating_sub(3) * gap;
                assert_eq!(
                    arrive(net.send(0, 0, target, 100)),
                    10_000 + wait,
                    "{target} {i}"
                );
            }
        }
    }

    #[test]
    fn a_hosts_static_delay_is_on_all_its_links_both_ways() {
        let model = NetModel {
            base: Dist::Constant { value: 1_000.0 },
            host_base: Dist::Exponential { mean: 20_000.0 },
            ..NetModel::ideal(0)
        };
        let mut net = network(model, 4);
        let h = |net: &mut Network, a, b| net.link_base_ns(a, b) as i64 - 1_000;
        // base(a, b) = 1 µs + (h_a + h_b) / 2, the same both ways.
        let (h01, h02, h12) = (h(&mut net, 0, 1), h(&mut net, 0, 2), h(&mut net, 1, 2));
        assert_eq!(h(&mut net, 1, 0), h01);
        let h0 = h01 + h02 - h12; // = h_0 (up to rounding)
        let h3 = 2 * h(&mut net, 0, 3) - h0;
        assert!(h0 >= -2 && h3 >= -2, "{h0} {h3}");
        assert_ne!(h01, h02, "hosts differ");
    }

    #[test]
    fn partition_and_clog() {
        let mut net = network(NetModel::ideal(1_000), 3);
        net.partition(Partition {
            side_a: vec![0],
            side_b: vec![1],
            from_ns: 100,
            until_ns: 200,
        });
        net.clog(Clog {
            source: 0,
            target: 2,
            from_ns: 0,
            until_ns: 50_000,
        });
        assert_eq!(net.send(150, 1, 0, 10), Route::Drop(NetDrop::Partition));
        assert_eq!(net.send(150, 0, 1, 10), Route::Drop(NetDrop::Partition));
        assert_eq!(net.send(250, 0, 1, 10), Route::Arrive(1_250));
        assert_eq!(net.send(300, 0, 2, 10), Route::Arrive(50_000));
        assert_eq!(net.send(60_000, 0, 2, 10), Route::Arrive(61_000));
    }

    #[test]
    fn presets_round_trip_through_toml() {
        for name in NetModel::PRESETS {
            let model = NetModel::preset(name).unwrap();
            let text = toml::to_string(&model).unwrap();
            assert_eq!(NetModel::from_toml(&text).unwrap(), model, "{name}");
        }
        let partial =
            NetModel::from_toml("loss = 0.5\n[base]\nkind = \"constant\"\nvalue = 3.0\n").unwrap();
        assert_eq!(partial.loss, 0.5);
        assert_eq!(partial.base, Dist::Constant { value: 3.0 });
        assert_eq!(partial.send_cost_ns, NetModel::aws_c5().send_cost_ns);
        assert!(NetModel::from_toml("no_such_field = 1").is_err());
    }

    /// Goal: a model file with a value the network cannot run on is an error naming the field,
    /// not a panic when the run starts or a run that never ends. Method: one bad value at a
    /// time over the aws_c5 defaults.
    #[test]
    fn bad_model_files_are_errors_naming_the_field() {
        for (text, field) in [
            ("loss = 2.0", "loss"),
            ("loss = nan", "loss"),
            ("quiet = -0.5", "quiet"),
            ("tx_threads = 0", "tx_threads"),
            ("tx_threads = 4000000000", "tx_threads"),
            ("send_cost_ns = 9223372036854775807", "send_cost_ns"),
            ("recv_cost_ns = 2000000000", "recv_cost_ns"),
            ("base_min_ns = 2000000000", "base_min_ns"),
            ("header_bytes = 70000", "header_bytes"),
            (
                "[jitter]\nmedian_ns = 1e3\ncorrelation = 1.0",
                "jitter.correlation",
            ),
            ("[jitter]\nsigma = inf", "jitter.sigma"),
            ("[jitter]\nmedian_ns = -1.0", "jitter.median_ns"),
            ("base = { kind = \"constant\", value = 1e300 }", "base"),
            (
                "base = { kind = \"uniform\", low = 5.0, high = 1.0 }",
                "base",
            ),
            (
                "per_packet = { kind = \"pareto\", scale = 1.0, shape = 0.0 }",
                "per_packet",
            ),
            (
                "host_base = { kind = \"log_normal\", median = 1.0, sigma = 50.0 }",
                "host_base",
            ),
            ("[pauses]\nrate_per_s = 1e12", "pauses.rate_per_s"),
            ("[spikes]\nrate_per_s = -1.0", "spikes.rate_per_s"),
            // Found by a hostile-input sweep: a run crawled for minutes.
            (
                "flow_pps = { kind = \"log_normal\", median = 1e-9, sigma = 0.5 }",
                "flow_pps",
            ),
            (
                "relay_flow_pps = { kind = \"constant\", value = 10.0 }",
                "relay_flow_pps",
            ),
        ] {
            let error = NetModel::from_toml(text).expect_err(text);
            assert!(error.contains(field), "{text}: {error}");
        }
    }
}
