//! Scenarios with the real nodes: build a whole tree from a [`Plan`] and drive market data
//! through it (the paper's outbound experiments, DESIGN.md §6).
//!
//! [`Outbound::new`] builds the root, the proxies and the gateways of the plan exactly as the
//! runtime does (same constructors, same [`NodeConfig`]), puts each on its own simulated host
//! with a clock model (the root's clock is perfect: it defines exchange time; every other
//! node gets a random offset and drift that clock sync has to learn), and [`Outbound::run`]
//! then warms up (clock sync, first OWD reports), publishes one market-data message per
//! packet at the configured rate (with optional bursts), drains, and finalises the metrics.
//! Faults can be scheduled on [`Outbound::sim`] between the two calls.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hdrhistogram::Histogram;
use proto::clock::ClockSync;
use proto::plan::{Plan, PlanConfig, Role};
use proto::{Delivery, Gateway, NodeConfig, NodeId, Proxy, Root};
use serde::{Deserialize, Serialize};

use crate::checker::OnViolation;
use crate::clock::ClockModel;
use crate::metrics::{Mark, MetricsConfig};
use crate::network::{HostKind, NetModel};
use crate::report::Summary;
use crate::rng::{Purpose, SimRng};
use crate::runtime::{Sim, SimConfig, SimNode};

/// Everything an outbound experiment depends on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutboundConfig {
    /// The seed (in a file: an integer, or `"0x…"` hex, which is how a seed beyond TOML's
    /// integers, 2^63 and up, is written).
    #[serde(with = "seed_text")]
    pub seed: u64,
    /// The tree.
    pub plan: PlanConfig,
    /// Node parameters (hold-and-release, OWD percentile, clock sync, ...).
    pub node: NodeConfig,
    /// The network model.
    pub model: NetModel,
    /// Packets (one market-data message each) per second outside bursts.
    pub rate_mps: f64,
    /// Optional periodic bursts.
    pub burst: Option<Burst>,
    /// Bytes of one market-data message (DESIGN.md §6: 424-byte payloads).
    pub message_len: usize,
    /// The least time before measuring starts (OWD reports arrive, clock sync converges),
    /// ns. Measuring also waits until every node's clock has converged
    /// ([`ClockSync::has_converged`]), at most [`CONVERGE_WAIT_NS_MAX`] longer.
    pub warmup_ns: u64,
    /// Measured publishing time, ns.
    pub duration_ns: u64,
    /// Time after the last packet before the metrics are finalised, ns.
    pub drain_ns: u64,
    /// Non-root clocks start up to this far ahead of true time, ns.
    pub clock_offset_ns_max: u64,
    /// Non-root clocks drift up to this many ppm either way.
    pub clock_drift_ppm_max: f64,
    /// Bound on the true-time spread of a packet's punctual releases (at their deadline on
    /// the gateway's clock): the clock-sync error bound ([`SKEW_BOUND_NS`] by default), for a
    /// tree two hops deep; a deeper tree's is half of it more per hop
    /// ([`skew_bound_for_depth`]). `None` = unchecked, written `skew_bound_ns = "off"` in a
    /// config file (TOML has no null, and a missing field means the default).
    #[serde(with = "bound_or_off")]
    pub skew_bound_ns: Option<u64>,
    /// Panic on the first checker violation (tests) instead of counting (experiments).
    pub panic_on_violation: bool,
    /// Check each node's invariants after every this many of its handlers (1 = always).
    pub invariants_every: u32,
    /// Threads (shards) the run is split over ([`Sim::sharded`]), 1 to
    /// [`crate::runtime::SHARDS_MAX`]; 1 runs serially. A run is a function of the seed, the
    /// configuration and this number (more than the machine's cores is the same run, slower).
    /// Models without lookahead ([`NetModel::lookahead_ns`] 0, e.g. Appendix C's) run on one
    /// thread whatever this says.
    pub threads: u32,
    /// Faults injected while measuring (a dead or paused proxy, a clogged link, a partition).
    pub faults: Vec<Fault>,
    /// Gateways run on one VM, as the paper's large runs did (logical receivers: its 1,000
    /// receivers were 100 VMs of 10, its 5,832 were 324 VMs of 18, each receiver on its own
    /// port). The gateways of one VM are siblings (children of one home parent, taken in
    /// order) and share its egress, receive queue, static delay, stragglers, pauses, links
    /// and clock (one oscillator; each gateway syncs it to its parent on its own, as the
    /// paper's receivers shared one Huygens-synced clock). 1 (the default) gives every
    /// gateway its own VM.
    pub gateways_per_vm: u32,
}

/// A fault injected into an outbound run; times are nanoseconds after measuring starts (the
/// end of the warm-up), node ids those of the plan (`jasper sim run` prints its layout). In a
/// config file: `[[faults]]` with `kind = "kill"` and `node`, `at_ns`; `kind = "restart"` and
/// `node`, `at_ns`; `kind = "pause"` and
/// `node`, `from_ns`, `until_ns`; `kind = "clog"` and `source`, `target`, `from_ns`,
/// `until_ns`; `kind = "partition"` and `side_a`, `side_b`, `from_ns`, `until_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// A proxy or gateway dies for good (the root publishes, so it is not a target here).
    Kill {
        /// The node.
        node: u32,
        /// When.
        at_ns: u64,
    },
    /// A proxy or gateway killed earlier (by a [`Fault::Kill`]) starts again as a new
    /// process: fresh state, and a clock that has not synced (its host's clock ran on). A
    /// gateway joins the stream where it has got to (a book snapshot first); the checker
    /// checks its order from there but not its timing, and the metrics count it no more
    /// (it was retired at its death).
    Restart {
        /// The proxy.
        node: u32,
        /// When.
        at_ns: u64,
    },
    /// A node runs none of its code during `[from_ns, until_ns)` (a descheduled VM).
    Pause {
        /// The node.
        node: u32,
        /// Start.
        from_ns: u64,
        /// End.
        until_ns: u64,
    },
    /// Copies on the link `source -> target` wait until `until_ns`.
    Clog {
        /// Sending node.
        source: u32,
        /// Receiving node.
        target: u32,
        /// Start.
        from_ns: u64,
        /// End.
        until_ns: u64,
    },
    /// Copies between the two sides are dropped during `[from_ns, until_ns)`.
    Partition {
        /// One side.
        side_a: Vec<u32>,
        /// The other side.
        side_b: Vec<u32>,
        /// Start.
        from_ns: u64,
        /// End.
        until_ns: u64,
    },
}

impl Fault {
    /// When the fault starts, after measuring starts.
    pub fn starts_at_ns(&self) -> u64 {
        match *self {
            Self::Kill { at_ns, .. } | Self::Restart { at_ns, .. } => at_ns,
            Self::Pause { from_ns, .. }
            | Self::Clog { from_ns, .. }
            | Self::Partition { from_ns, .. } => from_ns,
        }
    }

    /// Checks the fault against a plan of `nodes` nodes whose root is node 0.
    pub fn validate(&self, nodes: u32) -> Result<(), String> {
        let node_ok = |id: u32| {
            if id < nodes {
                Ok(())
            } else {
                Err(format!("{self}: node {id} is not in the plan (0..{nodes})"))
            }
        };
        let span_ok = |from: u64, until: u64| {
            if from >= until {
                Err(format!("{self}: the span must be non-empty and in order"))
            } else if until > RUN_NS_MAX {
                Err(format!("{self}: ends after the longest run"))
            } else {
                Ok(())
            }
        };
        match self {
            Self::Kill { node, at_ns } => {
                node_ok(*node)?;
                if *node == 0 {
                    return Err(format!(
                        "{self}: the root publishes the run's market data; kill a proxy or a gateway"
                    ));
                }
                if *at_ns > RUN_NS_MAX {
                    return Err(format!("{self}: after the longest run"));
                }
                Ok(())
            }
            Self::Restart { node, at_ns } => {
                node_ok(*node)?;
                if *at_ns > RUN_NS_MAX {
                    return Err(format!("{self}: after the longest run"));
                }
                Ok(())
            }
            Self::Pause {
                node,
                from_ns,
                until_ns,
            } => {
                node_ok(*node)?;
                if *node == 0 {
                    return Err(format!(
                        "{self}: the root publishes the run's market data; pause a proxy or a \
                         gateway"
                    ));
                }
                span_ok(*from_ns, *until_ns)
            }
            Self::Clog {
                source,
                target,
                from_ns,
                until_ns,
            } => {
                node_ok(*source)?;
                node_ok(*target)?;
                if source == target {
                    return Err(format!("{self}: a link joins two nodes"));
                }
                span_ok(*from_ns, *until_ns)
            }
            Self::Partition {
                side_a,
                side_b,
                from_ns,
                until_ns,
            } => {
                for &id in side_a.iter().chain(side_b) {
                    node_ok(id)?;
                }
                if side_a.is_empty() || side_b.is_empty() {
                    return Err(format!("{self}: both sides need a node"));
                }
                if side_a.iter().any(|id| side_b.contains(id)) {
                    return Err(format!("{self}: a node on both sides"));
                }
                span_ok(*from_ns, *until_ns)
            }
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        match self {
            Self::Kill { node, at_ns } => write!(f, "kill node {node} at +{} ms", ms(*at_ns)),
            Self::Restart { node, at_ns } => {
                write!(f, "restart node {node} at +{} ms", ms(*at_ns))
            }
            Self::Pause {
                node,
                from_ns,
                until_ns,
            } => write!(
                f,
                "pause node {node} from +{} to +{} ms",
                ms(*from_ns),
                ms(*until_ns)
            ),
            Self::Clog {
                source,
                target,
                from_ns,
                until_ns,
            } => write!(
                f,
                "clog link {source} -> {target} from +{} to +{} ms",
                ms(*from_ns),
                ms(*until_ns)
            ),
            Self::Partition {
                side_a,
                side_b,
                from_ns,
                until_ns,
            } => write!(
                f,
                "partition [{}] from [{}] from +{} to +{} ms",
                IdRuns(side_a),
                IdRuns(side_b),
                ms(*from_ns),
                ms(*until_ns)
            ),
        }
    }
}

/// Node ids as runs, `1-3, 7`: a side of a partition may hold thousands.
struct IdRuns<'a>(&'a [u32]);

impl std::fmt::Display for IdRuns<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids = self.0.iter().copied().peekable();
        let mut separator = "";
        while let Some(first) = ids.next() {
            let mut last = first;
            while let Some(next) = ids.next_if(|&next| Some(next) == last.checked_add(1)) {
                last = next;
            }
            match last - first {
                0 => write!(f, "{separator}{first}")?,
                1 => write!(f, "{separator}{first}, {last}")?,
                _ => write!(f, "{separator}{first}-{last}")?,
            }
            separator = ", ";
        }
        Ok(())
    }
}

/// Highest publishing rate a run accepts, messages per second (bursts included): far above any
/// feed the paper measures (its bursts reach 75K/s), low enough that a typo cannot ask for a
/// run that never ends.
pub const RATE_MPS_MAX: f64 = 10_000_000.0;

/// Longest run a configuration may ask for (warm-up, measurement and drain together): one
/// simulated day, which also keeps every instant far from `u64` overflow.
pub const RUN_NS_MAX: u64 = 86_400_000_000_000;

/// Largest clock drift a configuration may give, ppm: ten times a poor crystal's.
pub const CLOCK_DRIFT_PPM_MAX: f64 = 1000.0;

/// The default bound on the true-time spread of a packet's punctual releases: DESIGN.md §5's
/// fairness bound (1 µs). Clock sync keeps every node within ~200 ns of the root on the
/// cloud presets (`docs/results/sim-speed.md`), so two gateways releasing at a deadline on
/// their own clocks are at most ~400 ns apart; more is a clock-sync failure.
pub const SKEW_BOUND_NS: u64 = 1_000;

/// The skew bound for a tree `depth` hops deep, from `two_hops`, the bound for two. Each node
/// syncs its clock with its parent, so its error is its parent's plus its own hop's: a bound
/// holds for two hops (a gateway under one layer of proxies, the paper's trees to N = 100)
/// and grows by half of it per hop past them. At four hops, in the configuration swarm's
/// short runs under load (10-15K msgs/s with H = 2 or 3), the gateways' clocks are within
/// 300-470 ns of the root's at the 99th percentile and 600 ns at worst, and their punctual
/// releases spread up to 1.4 µs (`random_settings_run_clean_or_are_refused`, seeds 80, 120,
/// 183, 187, 189 and 257 of 1-300).
pub fn skew_bound_for_depth(two_hops: u64, depth: u32) -> u64 {
    let grown = u128::from(two_hops) * u128::from(depth.max(2)) / 2;
    u64::try_from(grown).unwrap_or(u64::MAX)
}

/// A seed in a config file: TOML's integers are i64, so seeds from 2^63 on are written as
/// `"0x…"` text; either form reads back.
mod seed_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
        match i64::try_from(*seed) {
            Ok(_) => s.serialize_u64(*seed),
            Err(_) => s.serialize_str(&format!("{seed:#x}")),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Seed {
            Number(u64),
            Text(String),
        }
        let parsed = match Seed::deserialize(d) {
            Ok(Seed::Number(seed)) => Some(seed),
            Ok(Seed::Text(text)) => crate::runtime::parse_seed(&text),
            Err(_) => None,
        };
        parsed.ok_or_else(|| {
            serde::de::Error::custom("expected a seed: a non-negative integer, or \"0x…\" hex")
        })
    }
}

/// An optional bound in a config file: a number, or `"off"` for none.
mod bound_or_off {
    use serde::{Deserialize, Deserializer, Serializer};

    const OFF: &str = "off";

    pub(super) fn serialize<S: Serializer>(bound: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match bound {
            Some(bound) => s.serialize_u64(*bound),
            None => s.serialize_str(OFF),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Bound {
            Number(u64),
            Word(String),
        }
        match Bound::deserialize(d) {
            Ok(Bound::Number(bound)) => Ok(Some(bound)),
            Ok(Bound::Word(word)) if word == OFF => Ok(None),
            _ => Err(serde::de::Error::custom(format!(
                "expected a bound in ns (a non-negative integer) or \"{OFF}\""
            ))),
        }
    }
}

/// The most gateways one VM runs ([`OutboundConfig::gateways_per_vm`]); the paper ran 18.
pub const GATEWAYS_PER_VM_MAX: u32 = 64;

/// What a run's memory is made of, as measured (`aws_c5`, H = 2, `peak RSS` of `jasper sim
/// run`, whose allocator is mimalloc): 101 MiB at N = 1000 with 0.1 M links, 166 MiB at 2000
/// with 0.3 M, 527 MiB at 4000 with 2.0 M, 3.0 GiB at 10,000 with 10.1 M (2.9 before the
/// proxies' 64 KiB repair rings), 7.6 GiB at 20,000
/// with 33.7 M (the system allocator peaked at 0.7-0.83x these: 75 MiB, 135 MiB, 418 MiB,
/// 2.4 GiB and 5.3 GiB). A second thread adds ~50 MiB (its own heap), which matters only
/// at small N. A link (a pair of hosts that has carried a copy: its delay process, spikes and
/// shaping, in a hash table per source) costs 150-250 bytes as the tables fill, and links are
/// the part that grows with N squared under RRPS, which rotates every node of a layer over
/// every node of the next.
const MEMORY_BASE_BYTES: u64 = 32 << 20;
const MEMORY_NODE_BYTES: u64 = 36 << 10;
const MEMORY_LINK_BYTES: u64 = 240;

impl OutboundConfig {
    /// An estimate, from the plan alone and before anything is built, of the memory a run
    /// of this configuration peaks at: the links it can open (each sending layer's pairs of
    /// hosts under RRPS, or each node's `H + 1` parents without it, and no more than the
    /// copies the run sends), plus a fixed cost per node: 0.93-1.25 times the peaks measured
    /// (`aws_c5`, H = 2: 101 MiB at N = 1000, 3.0 GiB at 10,000; the rest are beside the
    /// estimate's constants in the source). It lets a driver refuse a run
    /// that cannot fit (N = 100,000 under RRPS holds ~10^9 links) before it is built,
    /// instead of the run being killed for memory.
    pub fn memory_estimate_bytes(&self, plan: &Plan) -> u64 {
        // Measuring may also wait for clocks to converge; at the N where links matter, the
        // pairs fill within the first packets anyway.
        let total_ns = self
            .warmup_ns
            .saturating_add(self.duration_ns)
            .saturating_add(self.drain_ns);
        let peak_rate = self.rate_mps * self.burst.map_or(1.0, |burst| burst.factor.max(1.0));
        let packets = (peak_rate * total_ns as f64 / 1e9).ceil().max(1.0) as u64;
        // Gateways that share a VM share its links.
        let per_vm = u64::from(self.gateways_per_vm.max(1));
        let hosts = |layer: u32| {
            let width = plan.layer(layer).len() as u64;
            if layer == plan.depth() {
                width.div_ceil(per_vm)
            } else {
                width
            }
        };
        let mut links = 0u64;
        for layer in 0..plan.depth() {
            let (senders, receivers) = (hosts(layer), hosts(layer + 1));
            let parents = u64::from(plan.hedge_at(layer)) + 1;
            let pairs = if plan.config().rrps {
                senders.saturating_mul(receivers)
            } else {
                receivers
                    .saturating_mul(parents)
                    .min(senders.saturating_mul(receivers))
            };
            let copies = receivers.saturating_mul(parents).saturating_mul(packets);
            links = links.saturating_add(pairs.min(copies));
        }
        let nodes = plan.nodes().len() as u64;
        // Each proxy's repair ring, once traffic fills it: its arena and slots (a slot per
        // 128 bytes, 40 bytes each).
        let proxies = plan
            .nodes()
            .iter()
            .filter(|n| n.role == Role::Proxy)
            .count() as u64;
        let repair = self.node.repair_bytes as u64 * 5 / 4;
        // Control traffic (OWD reports, clock probes) runs both ways along the home tree.
        links = links.saturating_add(nodes.saturating_mul(2));
        MEMORY_BASE_BYTES
            .saturating_add(nodes.saturating_mul(MEMORY_NODE_BYTES))
            .saturating_add(proxies.saturating_mul(repair))
            .saturating_add(links.saturating_mul(MEMORY_LINK_BYTES))
    }

    /// Checks what the plan and the model do not: the publishing schedule and the run's
    /// length. [`Outbound::new`] calls it, so a bad config file or flag is an error, not a
    /// panic or a run that never ends.
    pub fn validate(&self) -> Result<(), String> {
        self.model.validate()?;
        let rate_ok = |rate: f64| rate.is_finite() && rate > 0.0 && rate <= RATE_MPS_MAX;
        if !rate_ok(self.rate_mps) {
            return Err(format!(
                "rate_mps must be positive and at most {RATE_MPS_MAX}, got {:?}",
                self.rate_mps
            ));
        }
        if let Some(burst) = self.burst {
            if !(burst.factor.is_finite() && burst.factor > 0.0) {
                return Err(format!(
                    "burst factor must be a positive multiplier, got {:?}",
                    burst.factor
                ));
            }
            if !rate_ok(self.rate_mps * burst.factor) {
                return Err(format!(
                    "burst rate {:?} messages/s is above the limit of {RATE_MPS_MAX}",
                    self.rate_mps * burst.factor
                ));
            }
            if burst.every_ns == 0 || burst.length_ns == 0 || burst.length_ns > burst.every_ns {
                return Err(format!(
                    "a burst must last between 1 ns and its period, got {} ns every {} ns",
                    burst.length_ns, burst.every_ns
                ));
            }
        }
        if self.duration_ns == 0 {
            return Err("duration must be positive: nothing would be measured".to_string());
        }
        let total = self
            .warmup_ns
            .checked_add(self.duration_ns)
            .and_then(|t| t.checked_add(self.drain_ns));
        if total.is_none_or(|t| t > RUN_NS_MAX) {
            return Err(format!(
                "warm-up, duration and drain together must be at most {} s",
                RUN_NS_MAX / 1_000_000_000
            ));
        }
        self.node.validate()?;
        let fits = wire::market::MESSAGE_LEN_MAX;
        if self.message_len == 0 || self.message_len > fits {
            return Err(format!(
                "message_len must be between 1 and {fits} bytes (one message per packet), got {}",
                self.message_len
            ));
        }
        // As a cluster config holds a node's offset (and a clock an hour off is no clock sync
        // problem but a setup one).
        if self.clock_offset_ns_max > proto::cluster::CLOCK_OFFSET_NS_MAX {
            return Err(format!(
                "clock_offset_ns_max must be at most {} (1 hour), got {}",
                proto::cluster::CLOCK_OFFSET_NS_MAX,
                self.clock_offset_ns_max
            ));
        }
        if !(0.0..=CLOCK_DRIFT_PPM_MAX).contains(&self.clock_drift_ppm_max) {
            return Err(format!(
                "clock_drift_ppm_max must be between 0 and {CLOCK_DRIFT_PPM_MAX}, got {}",
                self.clock_drift_ppm_max
            ));
        }
        if !(1..=GATEWAYS_PER_VM_MAX).contains(&self.gateways_per_vm) {
            return Err(format!(
                "gateways_per_vm must be between 1 and {GATEWAYS_PER_VM_MAX}, got {}",
                self.gateways_per_vm
            ));
        }
        if self.invariants_every == 0 {
            return Err(
                "invariants_every must be at least 1 (1 = check after every handler)".to_string(),
            );
        }
        if !(1..=crate::runtime::SHARDS_MAX).contains(&(self.threads as usize)) {
            return Err(format!(
                "threads must be between 1 and {}, got {}",
                crate::runtime::SHARDS_MAX,
                self.threads
            ));
        }
        if self.gateways_per_vm > 1 && self.plan.receiver_hedging {
            return Err(
                "receiver hedging puts a participant's two gateways on two VMs: it cannot \
                 share VMs among gateways (gateways_per_vm must be 1)"
                    .to_string(),
            );
        }
        Ok(())
    }
}

/// Bursts: every `every_ns`, for `length_ns`, the rate is multiplied by `factor`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    /// Rate multiplier during a burst.
    pub factor: f64,
    /// Period of bursts, ns.
    pub every_ns: u64,
    /// Length of a burst, ns.
    pub length_ns: u64,
}

/// The longest a run waits, after its warm-up, for every clock to converge before it measures
/// anyway ([`Outbound::converged_at`] then stays `None`).
pub const CONVERGE_WAIT_NS_MAX: u64 = 5_000_000_000;

/// The least warm-up at `participants` receivers; a run then also waits for every clock to
/// converge ([`OutboundConfig::warmup_ns`]). Clock sync converges one layer after another,
/// each in about one estimation window (256 samples, ~130 ms at a probe pair a
/// millisecond): every clock of `<2,10>` (N = 100) had converged 0.47 s in, of `<3,5>` 0.70 s,
/// of N = 1000 (`<3,10>`) 0.72 s (seed 1). The least warm-up is what the OWD reports need
/// and what the figures were calibrated with: at N = 10,000 (four hops) true-time P(F) was
/// 23.6% after 0.6 s against 27.5% in exchange time, 34.2 / 36.6% after 1.5 s, 34.7 / 35.1%
/// after 2 s and 36.0 / 36.3% after 2.5 s (`aws_c5`, H = 2, seed 1); what is left of the gap
/// to N = 1000 is the host-pause model, not the clocks.
pub fn warmup_ns_for(participants: u32) -> u64 {
    match participants {
        5000.. => 2_000_000_000,
        1000.. => 600_000_000,
        _ => 300_000_000,
    }
}

impl Default for OutboundConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            plan: PlanConfig::new(100),
            node: NodeConfig::default(),
            model: NetModel::aws_c5(),
            rate_mps: 5_000.0,
            burst: None,
            message_len: 424,
            warmup_ns: 200_000_000,
            duration_ns: 1_000_000_000,
            drain_ns: 50_000_000,
            clock_offset_ns_max: 1_000_000,
            clock_drift_ppm_max: 20.0,
            skew_bound_ns: Some(SKEW_BOUND_NS),
            panic_on_violation: false,
            invariants_every: 1,
            threads: 1,
            faults: Vec::new(),
            gateways_per_vm: 1,
        }
    }
}

/// A tree of real nodes in a simulation.
#[derive(Debug)]
pub struct Outbound {
    /// The simulation (schedule faults here before [`Outbound::run`]).
    pub sim: Sim,
    /// The plan the nodes were built from.
    pub plan: Arc<Plan>,
    /// The configuration.
    pub config: OutboundConfig,
    /// Packet sequence numbers published while measuring.
    pub measured: core::ops::Range<u64>,
    /// Clock-sync error of every synced non-root node (exchange estimate − true time, ns),
    /// sampled every [`CLOCK_SAMPLE_NS`] while measuring.
    pub clock_error: ClockError,
    /// When every clock had converged (simulated ns), if it did before measuring started.
    pub converged_at: Option<u64>,
}

/// Where a run is, as [`Outbound::run_stoppable`] tells its `progress`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// The fraction of the run's simulated time done, 0 to 1 (warm-up and drain included).
    /// It never falls: while the run waits for the clocks to converge, its end moves later
    /// with the wait, and the fraction grows more slowly.
    pub fraction: f64,
    /// Simulated (true) time now.
    pub now_ns: u64,
    /// Whether the measured window has begun: warm-up and clock convergence are over.
    pub measuring: bool,
}

/// How [`Outbound::run_stoppable`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It published for the whole configured duration.
    Complete,
    /// Stopped while measuring, after publishing for `measured_ns` of the duration; it then
    /// drained, and the metrics cover the packets it published.
    Stopped { measured_ns: u64 },
    /// Stopped during the warm-up or the wait for the clocks: nothing was measured.
    StoppedWarmingUp,
}

impl Ended {
    /// Whether the run reached `fault`: faults due after a stop never happen.
    pub fn reached(self, fault: &Fault) -> bool {
        match self {
            Self::Complete => true,
            Self::Stopped { measured_ns } => fault.starts_at_ns() <= measured_ns,
            Self::StoppedWarmingUp => false,
        }
    }
}

/// What a [`Outbound::run_stoppable`] progress callback answers for a stop flag (set on
/// Ctrl-C): `Break` once it is set.
pub fn unless_stopped(stop: &AtomicBool) -> ControlFlow<()> {
    if stop.load(Ordering::Relaxed) {
        ControlFlow::Break(())
    } else {
        ControlFlow::Continue(())
    }
}

/// How often the warm-up checks whether every clock has converged, once its least time is up.
const CONVERGE_STEP_NS: u64 = 10_000_000;

/// How often [`Outbound::run`] samples every node's clock-sync error while measuring.
pub const CLOCK_SAMPLE_NS: u64 = 10_000_000;

/// Clock-sync error over a run: how far each node's exchange clock is from true time.
#[derive(Clone, Debug)]
pub struct ClockError {
    /// |error| of every (node, sample), ns.
    pub abs_ns: Histogram<u64>,
    /// Samples of nodes that had not synced yet.
    pub unsynced: u64,
    /// The signed error with the largest magnitude seen, ns.
    pub worst_ns: i64,
    /// The node and simulated time (ns) of that sample, if any.
    pub worst_at: Option<(NodeId, u64)>,
    /// Each node's largest |error|, ns, by node id (0 for the root and for nodes never
    /// sampled synced).
    pub worst_abs_by_node: Vec<u64>,
}

impl Default for ClockError {
    fn default() -> Self {
        Self {
            abs_ns: Histogram::new_with_bounds(1, 1 << 40, 3).expect("valid bounds"),
            unsynced: 0,
            worst_ns: 0,
            worst_at: None,
            worst_abs_by_node: Vec::new(),
        }
    }
}

/// The gateway whose VM gateway `id` runs on, if not its own: the first of its group of
/// `per_vm` among its home parent's children ([`OutboundConfig::gateways_per_vm`]).
fn vm_leader(plan: &Plan, per_vm: u32, id: NodeId) -> Option<NodeId> {
    let first_sibling = plan.home_children(plan.home_parent(id)?).start;
    let leader = id.0 - (id.0 - first_sibling) % per_vm;
    (leader != id.0).then_some(NodeId(leader))
}

impl Outbound {
    /// Builds every node of the plan, each on its own VM except for gateways that share one
    /// ([`OutboundConfig::gateways_per_vm`]).
    pub fn new(config: OutboundConfig) -> Result<Self, String> {
        config.validate()?;
        let plan = Arc::new(Plan::new(&config.plan).map_err(|e| e.to_string())?);
        let nodes = u32::try_from(plan.nodes().len()).expect("node count fits u32");
        for fault in &config.faults {
            fault.validate(nodes)?;
            if fault.starts_at_ns() >= config.duration_ns {
                return Err(format!(
                    "{fault}: the run measures for only {} ms, so it would never happen",
                    config.duration_ns as f64 / 1e6
                ));
            }
            if let Fault::Kill { node, .. } = *fault {
                let kills = config
                    .faults
                    .iter()
                    .filter(|other| matches!(**other, Fault::Kill { node: n, .. } if n == node))
                    .count();
                if kills > 1 {
                    return Err(format!("{fault}: node {node} is killed {kills} times"));
                }
            }
            if let Fault::Clog { source, target, .. } = *fault {
                // Gateways send each other nothing, but twins (receiver hedging) their OWD
                // reports.
                let gateway = |id: u32| {
                    plan.node(NodeId(id))
                        .filter(|spec| spec.role == Role::Gateway)
                        .map(|spec| spec.participant)
                };
                if let (Some(a), Some(b)) = (gateway(source), gateway(target))
                    && (a != b || a.is_none())
                {
                    return Err(format!(
                        "{fault}: these gateways send each other nothing (only a participant's \
                         two gateways do, with receiver hedging), so the clog would change \
                         nothing; clog a link from a proxy or the root to a gateway (or back)"
                    ));
                }
            }
            if let Fault::Restart { node, at_ns } = *fault {
                let role = plan.node(NodeId(node)).map(|spec| spec.role);
                if !matches!(role, Some(Role::Proxy | Role::Gateway)) {
                    return Err(format!("{fault}: only a proxy or a gateway restarts here"));
                }
                let killed_before = config.faults.iter().any(|other| {
                    matches!(*other, Fault::Kill { node: n, at_ns: at } if n == node && at < at_ns)
                });
                let restarted_twice = config
                    .faults
                    .iter()
                    .filter(|other| matches!(**other, Fault::Restart { node: n, .. } if n == node))
                    .count()
                    > 1;
                if !killed_before || restarted_twice {
                    return Err(format!(
                        "{fault}: a restart needs the node killed before it (one kill, one restart)"
                    ));
                }
            }
        }
        let gateways = plan.gateways();
        let killed = |id: u32| {
            config
                .faults
                .iter()
                .any(|fault| matches!(*fault, Fault::Kill { node, .. } if node == id))
        };
        if !gateways.is_empty() && gateways.clone().all(killed) {
            return Err("every gateway is killed: nothing would be left to measure".to_owned());
        }
        let sim_config = SimConfig {
            on_violation: if config.panic_on_violation {
                OnViolation::Panic
            } else {
                OnViolation::Collect
            },
            skew_bound_ns: config
                .skew_bound_ns
                .map(|bound| skew_bound_for_depth(bound, plan.depth())),
            invariants_every: config.invariants_every,
            reference: plan.root(),
            ..SimConfig::new(config.seed).with_model(config.model.clone())
        };
        let restarts = config
            .faults
            .iter()
            .any(|fault| matches!(fault, Fault::Restart { .. }));
        // A restart swaps a node's state mid-run, which a sharded run cannot do
        // ([`Sim::restart`]); runs with one take a single thread.
        let threads = if config.model.lookahead_ns() == 0 || restarts {
            1
        } else {
            config.threads
        };
        let shards = (0..threads)
            .map(|_| Self::build(&config, &plan, sim_config.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sim = Sim::sharded(shards)?;
        // Deadlines and skew are checked once measuring starts (clock sync has converged).
        sim.checker_mut().check_timing_from(u64::MAX);
        Ok(Self {
            sim,
            plan,
            config,
            measured: 0..0,
            clock_error: ClockError::default(),
            converged_at: None,
        })
    }

    /// One simulation holding every node of `plan`.
    fn build(
        config: &OutboundConfig,
        plan: &Arc<Plan>,
        sim_config: SimConfig,
    ) -> Result<Sim, String> {
        let mut sim = Sim::new(sim_config);
        let mut clock_rng = SimRng::derive(config.seed, Purpose::Config, 0xC10C);
        // One configuration shared by every proxy and gateway.
        let node_config = Arc::new(config.node.clone());
        for spec in plan.nodes() {
            let node: Box<dyn SimNode + Send> = match spec.role {
                Role::Root => Box::new(Root::new(Arc::clone(plan), config.node.clone())?),
                Role::Proxy => Box::new(Proxy::new(
                    spec.id,
                    Arc::clone(plan),
                    Arc::clone(&node_config),
                )?),
                Role::Gateway => Box::new(Gateway::new(
                    spec.id,
                    Arc::clone(plan),
                    Arc::clone(&node_config),
                    Delivery::Events,
                )?),
            };
            let clock = ClockModel::for_role(
                spec.role,
                &mut clock_rng,
                config.clock_offset_ns_max,
                config.clock_drift_ppm_max,
            );
            let leader = (spec.role == Role::Gateway)
                .then(|| vm_leader(plan, config.gateways_per_vm, spec.id))
                .flatten();
            let id = match leader {
                // One VM, one oscillator: the leader's clock (this gateway's draw above is
                // still taken, so the other nodes' clocks do not depend on the sharing).
                Some(leader) => sim.add_node_send_beside(node, leader),
                None => sim.add_node_send(node, clock),
            };
            assert_eq!(id, spec.id, "plan ids are dense and in order");
            if spec.role != Role::Gateway {
                // The root and the proxies forward with kernel bypass (the paper's §3).
                let vm = sim.vm_of(spec.id);
                sim.network_mut().set_host_kind(vm, HostKind::Relay);
            }
        }
        Ok(sim)
    }

    /// Schedules `fault` with its times counted from `start`.
    fn inject(&mut self, fault: &Fault, start: u64) {
        let ids = |ids: &[u32]| ids.iter().copied().map(NodeId).collect::<Vec<_>>();
        match fault {
            Fault::Kill { node, at_ns } => self.sim.kill(NodeId(*node), start + at_ns),
            // Restarts are made by the driver loop (`Outbound::run_stoppable`).
            Fault::Restart { .. } => {}
            Fault::Pause {
                node,
                from_ns,
                until_ns,
            } => self
                .sim
                .pause(NodeId(*node), start + from_ns, start + until_ns),
            Fault::Clog {
                source,
                target,
                from_ns,
                until_ns,
            } => self.sim.clog(
                NodeId(*source),
                NodeId(*target),
                start + from_ns,
                start + until_ns,
            ),
            Fault::Partition {
                side_a,
                side_b,
                from_ns,
                until_ns,
            } => self.sim.partition(
                &ids(side_a),
                &ids(side_b),
                start + from_ns,
                start + until_ns,
            ),
        }
    }

    /// The gateways' ids.
    pub fn gateways(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.plan.gateways().map(NodeId)
    }

    /// Warms up, publishes for the configured duration, drains, and finalises the metrics.
    pub fn run(&mut self) {
        let ended = self.run_stoppable(&mut |_| ControlFlow::Continue(()));
        debug_assert_eq!(ended, Ended::Complete);
    }

    /// [`Outbound::run`], calling `progress` every few simulated milliseconds; a `Break`
    /// from it stops the run there (a person's Ctrl-C). Stopped while measuring, the run
    /// publishes nothing more, drains, and finalises the metrics over what it published, so
    /// every figure is as DESIGN.md §5 defines it over a shorter window; stopped before,
    /// nothing is measured ([`Outbound::sim`]'s metrics stay `None`).
    pub fn run_stoppable(
        &mut self,
        progress: &mut dyn FnMut(Progress) -> ControlFlow<()>,
    ) -> Ended {
        let config = &self.config;
        assert!(config.rate_mps > 0.0, "rate_mps must be positive");
        let message = vec![b'Z'; config.message_len];
        let root = self.plan.root();
        let least = self.sim.now() + config.warmup_ns;
        // What is left after the warm-up: measuring, and the drain. Measuring starts once the
        // clocks have converged, which may be after `least`: the run's end moves with it, so
        // that the fraction only grows.
        let after = config.duration_ns + config.drain_ns;
        let warming = |at: u64| Progress {
            fraction: at as f64 / (at.max(least) + after) as f64,
            now_ns: at,
            measuring: false,
        };
        let step = (config.warmup_ns / 20).max(1);
        let mut warm = self.sim.now();
        while warm < least {
            warm = (warm + step).min(least);
            self.sim.run_until(warm);
            if progress(warming(warm)).is_break() {
                return Ended::StoppedWarmingUp;
            }
        }
        // Then until every clock has converged: measuring earlier reads true-time fairness
        // off clocks still converging, and how long that takes depends on the tree's depth
        // and on each path's noise, not on N alone.
        while !self.clocks_converged() && warm < least + CONVERGE_WAIT_NS_MAX {
            warm += CONVERGE_STEP_NS;
            self.sim.run_until(warm);
            if progress(warming(warm)).is_break() {
                return Ended::StoppedWarmingUp;
            }
        }
        self.converged_at = self.clocks_converged().then_some(warm);
        let start = warm;
        let end = start + self.config.duration_ns;
        let total = (end + self.config.drain_ns) as f64;
        for fault in self.config.faults.clone() {
            self.inject(&fault, start);
        }
        let config = &self.config;

        let first = self.root_mark();
        let receivers = u32::try_from(self.plan.gateways().len()).expect("gateway count fits u32");
        self.sim.measure(MetricsConfig {
            first_packet_seq: first.packet_seq,
            first_sequence: Some(first.sequence),
            receiver_ids: Some(self.plan.gateways()),
            ..MetricsConfig::new(receivers)
        });
        if self.plan.config().receiver_hedging {
            let mut of = vec![u32::MAX; self.plan.nodes().len()];
            for spec in self.plan.nodes() {
                if let Some(participant) = spec.participant {
                    of[spec.id.0 as usize] = participant;
                }
            }
            let metrics = self.sim.metrics_mut().expect("measuring");
            metrics.group_by_participant(of, self.plan.config().participants);
        }
        // Without hold-and-release a gateway releases on receipt, before the deadline by
        // design: there is no timing to check, only exactly-once order.
        if config.node.hold_and_release {
            self.sim.checker_mut().check_timing_from(first.packet_seq);
        }
        // (true time, node) of each fault `pick` names, in time order.
        let timeline = |pick: &dyn Fn(&Fault) -> Option<(u64, u32)>| {
            let mut times: Vec<(u64, u32)> = config
                .faults
                .iter()
                .filter_map(pick)
                .map(|(at_ns, node)| (start + at_ns, node))
                .collect();
            times.sort_unstable();
            times.into_iter().peekable()
        };
        // Gateways killed while measuring: from then on the metrics expect one receiver fewer
        // (see `Metrics::retire`).
        let gateways = self.plan.gateways();
        let mut deaths = timeline(&|fault| match *fault {
            Fault::Kill { node, at_ns } if gateways.contains(&node) => Some((at_ns, node)),
            _ => None,
        });
        let mut restarts = timeline(&|fault| match *fault {
            Fault::Restart { node, at_ns } => Some((at_ns, node)),
            _ => None,
        });
        // Gateways started again that have not released yet.
        let mut returning: Vec<u32> = Vec::new();
        let base_gap_ns = 1e9 / config.rate_mps;
        let burst = config.burst;
        let mut t = start as f64;
        let mut next_clock_sample = start;
        let mut stopped = None;
        while (t as u64) < end {
            while let Some((at, node)) = restarts.next_if(|&(at, _)| at <= t as u64) {
                self.sim.run_until(at);
                let (id, config) = (NodeId(node), self.config.node.clone());
                let plan = Arc::clone(&self.plan);
                let again: Box<dyn SimNode + Send> = if gateways.contains(&node) {
                    self.sim.checker_mut().restart(node);
                    returning.push(node);
                    let gateway = Gateway::new(id, plan, config, Delivery::Events);
                    Box::new(gateway.expect("the configuration built this gateway before"))
                } else {
                    let proxy = Proxy::new(id, plan, config);
                    Box::new(proxy.expect("the configuration built this proxy before"))
                };
                self.sim.restart(again);
            }
            self.sim.run_until(t as u64);
            while let Some((_, node)) = deaths.next_if(|&(at, _)| at <= t as u64) {
                let from = self.root_mark();
                let metrics = self.sim.metrics_mut().expect("measuring");
                metrics.retire(node, from);
            }
            // A gateway started again is measured again once it releases (its book snapshot
            // came): from the root's next packet, which nobody has released yet.
            if !returning.is_empty() {
                let back: Vec<u32> = returning
                    .iter()
                    .copied()
                    .filter(|&node| self.sim.checker().next_seq(node).is_some())
                    .collect();
                if !back.is_empty() {
                    let at = self.root_mark();
                    let metrics = self.sim.metrics_mut().expect("measuring");
                    for &node in &back {
                        metrics.rejoin(node, at);
                    }
                    returning.retain(|node| !back.contains(node));
                }
            }
            if t as u64 >= next_clock_sample {
                self.sample_clock_error();
                next_clock_sample += CLOCK_SAMPLE_NS;
                let at = Progress {
                    fraction: t / total,
                    now_ns: t as u64,
                    measuring: true,
                };
                if progress(at).is_break() {
                    stopped = Some(t as u64);
                    break;
                }
            }
            self.sim.command(root, |node, now| {
                let root = node
                    .as_any_mut()
                    .downcast_mut::<Root>()
                    .expect("node 0 is the root");
                root.publish(now, &[wire::Raw(&message)]);
            });
            let in_burst =
                burst.is_some_and(|b| (t as u64 - start) % b.every_ns.max(1) < b.length_ns);
            let factor = burst
                .filter(|_| in_burst)
                .map_or(1.0, |b| b.factor.max(1e-9));
            t += base_gap_ns / factor;
        }
        let last = self.root_mark();
        self.measured = first.packet_seq..last.packet_seq;
        let metrics = self.sim.metrics_mut().expect("measuring");
        metrics.stop_at(last);
        match stopped {
            // A run stopped early is the run asked for that long: faults due after the stop
            // never happen (that run would have refused them, `Outbound::new`).
            Some(at) => self.sim.cancel_faults_from(at + 1),
            // Gateways that die after the last packet but before the end: what they never
            // released of the measured packets is lost to their kill, as for those that died
            // while publishing.
            None => {
                for (_, node) in deaths {
                    metrics.retire(node, last);
                }
            }
        }
        self.sim
            .run_until(stopped.unwrap_or(end) + self.config.drain_ns);
        self.sim.finish();
        match stopped {
            None => {
                let done = Progress {
                    fraction: 1.0,
                    now_ns: self.sim.now(),
                    measuring: true,
                };
                // Over: a stop asked for now changes nothing.
                let _ = progress(done);
                Ended::Complete
            }
            Some(at) => Ended::Stopped {
                measured_ns: at - start,
            },
        }
    }

    /// Whether every live non-root node's clock has converged
    /// ([`ClockSync::has_converged`]).
    pub fn clocks_converged(&self) -> bool {
        self.plan
            .nodes()
            .iter()
            .filter(|spec| spec.role != Role::Root)
            .all(|spec| {
                self.clock_sync(spec.id)
                    .is_none_or(ClockSync::has_converged)
            })
    }

    /// The clock sync of gateway or proxy `id` (`None` for the root or a node of another
    /// kind).
    pub fn clock_sync(&self, id: NodeId) -> Option<&ClockSync> {
        self.sim
            .node::<Gateway>(id)
            .map(Gateway::clock)
            .or_else(|| self.sim.node::<Proxy>(id).map(Proxy::clock))
    }

    /// The clock-sync error of every non-root node now: its exchange-time reading of its
    /// local clock minus true time (the root's clock is perfect and defines exchange time);
    /// `None` for a node that has not synced.
    pub fn clock_errors_now(&mut self) -> Vec<(NodeId, Option<i64>)> {
        let now = self.sim.now();
        let ids: Vec<NodeId> = self
            .plan
            .nodes()
            .iter()
            .filter(|spec| spec.role != Role::Root)
            .map(|spec| spec.id)
            .collect();
        ids.into_iter()
            .map(|id| {
                let local = self.sim.local_now(id);
                let error = self
                    .clock_sync(id)
                    .filter(|sync| sync.is_synced())
                    .map(|sync| sync.to_exchange(local).as_nanos() as i64 - now as i64);
                (id, error)
            })
            .collect()
    }

    fn sample_clock_error(&mut self) {
        let now = self.sim.now();
        for (id, error) in self.clock_errors_now() {
            match error {
                Some(error) => {
                    let abs = error.unsigned_abs();
                    self.clock_error.abs_ns.saturating_record(abs);
                    let by_node = &mut self.clock_error.worst_abs_by_node;
                    let index = id.0 as usize;
                    if by_node.len() <= index {
                        by_node.resize(index + 1, 0);
                    }
                    by_node[index] = by_node[index].max(abs);
                    if abs > self.clock_error.worst_ns.unsigned_abs() {
                        self.clock_error.worst_ns = error;
                        self.clock_error.worst_at = Some((id, now));
                    }
                }
                None => self.clock_error.unsynced += 1,
            }
        }
    }

    /// The root.
    pub fn root(&self) -> &Root {
        self.sim
            .node::<Root>(self.plan.root())
            .expect("node 0 is the root")
    }

    /// Where the root's next packet starts.
    fn root_mark(&self) -> Mark {
        let root = self.root();
        Mark {
            packet_seq: root.next_packet_seq(),
            sequence: root.next_sequence(),
        }
    }

    /// Gateway `id`.
    pub fn gateway(&self, id: NodeId) -> Option<&Gateway> {
        self.sim.node::<Gateway>(id)
    }

    /// The run's summary.
    pub fn summary(&self, label: &str) -> Summary {
        Summary::new(&self.sim, label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `run`, shows `check` every progress, and stops it at the `call`-th progress while
    /// measuring (as a person's Ctrl-C would): how long it measured.
    fn stop_at_measuring_call(
        run: &mut Outbound,
        call: u32,
        mut check: impl FnMut(&Progress),
    ) -> u64 {
        let mut measuring_calls = 0;
        let ended = run.run_stoppable(&mut |at| {
            check(&at);
            measuring_calls += u32::from(at.measuring);
            if measuring_calls == call {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        let Ended::Stopped { measured_ns } = ended else {
            panic!("stopped while measuring, got {ended:?}");
        };
        measured_ns
    }

    /// Goal: a run stopped while measuring (a person's Ctrl-C) reports whole figures over
    /// what it published: it publishes nothing after the stop, every packet before it reaches
    /// every gateway in the drain, and the checker finds nothing; stopped in the warm-up, it
    /// measures nothing. The progress it reports never goes back. Method: stop at the fifth
    /// progress call while measuring (the calls
    /// come every [`CLOCK_SAMPLE_NS`] of simulated time), compare with a run asked for as
    /// long as that one measured (the same summary and trace), and stop another run at its
    /// first call.
    #[test]
    fn a_stopped_run_reports_what_it_published() {
        let config = OutboundConfig {
            plan: PlanConfig {
                hedge: 1,
                ..PlanConfig::new(20)
            },
            duration_ns: 60_000_000_000,
            ..OutboundConfig::default()
        };
        let mut run = Outbound::new(config.clone()).unwrap();
        let mut fraction = 0.0;
        let measured_ns = stop_at_measuring_call(&mut run, 5, |at| {
            assert!(at.fraction >= fraction, "{at:?} after {fraction}");
            fraction = at.fraction;
        });
        let gap_ns = (1e9 / config.rate_mps) as u64;
        let expected_ns = 4 * CLOCK_SAMPLE_NS;
        assert!(
            (expected_ns..expected_ns + gap_ns).contains(&measured_ns),
            "{measured_ns}"
        );
        let published = run.measured.end - run.measured.start;
        // One packet every 200 µs until the stop, give or take the packet at the stop.
        let expected = measured_ns / gap_ns;
        assert!(
            (expected..=expected + 1).contains(&published),
            "{published}"
        );
        let summary = run.summary("stopped");
        assert_eq!(summary.packets, published);
        assert_eq!(summary.complete, published, "{summary:?}");
        assert_eq!(summary.loss_percent, 0.0);
        assert_eq!(summary.violations, 0);
        assert!(
            run.sim.now() >= run.converged_at.unwrap() + measured_ns + config.drain_ns,
            "drained"
        );
        // The very run that was asked for that long.
        let mut short = Outbound::new(OutboundConfig {
            duration_ns: measured_ns,
            ..config.clone()
        })
        .unwrap();
        short.run();
        assert_eq!(short.summary("stopped"), summary);
        assert_eq!(short.sim.trace_hash(), run.sim.trace_hash());

        let mut warming = Outbound::new(config).unwrap();
        let ended = warming.run_stoppable(&mut |_| ControlFlow::Break(()));
        assert_eq!(ended, Ended::StoppedWarmingUp);
        assert!(warming.sim.metrics().is_none());
        assert!(warming.sim.now() < warming.config.warmup_ns);
    }

    /// Goal: faults due after a stop never happen, even those that would fall in its drain (on
    /// one thread and on two):
    /// the stopped run is the run asked for that long, which would have refused them.
    #[test]
    fn faults_due_after_a_stop_never_happen() {
        for threads in [1, 2] {
            faults_due_after_a_stop_never_happen_on(threads);
        }
    }

    fn faults_due_after_a_stop_never_happen_on(threads: u32) {
        let config = OutboundConfig {
            threads,
            plan: PlanConfig {
                hedge: 1,
                ..PlanConfig::new(20)
            },
            duration_ns: 60_000_000_000,
            // A packet every 100 µs, so that some are on their way at any time.
            rate_mps: 10_000.0,
            ..OutboundConfig::default()
        };
        // Measuring stops at the second call, 10 ms in; every fault comes 10-20 µs later,
        // while the last packets are on their way, or long after.
        let soon = CLOCK_SAMPLE_NS + 10_000;
        let faulted = OutboundConfig {
            faults: vec![
                Fault::Kill {
                    node: 15,
                    at_ns: soon,
                },
                Fault::Kill {
                    node: 16,
                    at_ns: 30_000_000_000,
                },
                Fault::Pause {
                    node: 17,
                    from_ns: soon,
                    until_ns: soon + 5_000_000,
                },
                Fault::Clog {
                    source: 0,
                    target: 1,
                    from_ns: soon,
                    until_ns: soon + 5_000_000,
                },
                Fault::Partition {
                    side_a: vec![0],
                    side_b: vec![2, 3],
                    from_ns: soon + 10_000,
                    until_ns: soon + 5_000_000,
                },
            ],
            ..config.clone()
        };
        let gateways = Plan::new(&config.plan).unwrap().gateways();
        assert!([15, 16, 17].iter().all(|g| gateways.contains(g)));
        let mut run = Outbound::new(faulted.clone()).unwrap();
        let measured_ns = stop_at_measuring_call(&mut run, 2, |_| {});
        let ended = Ended::Stopped { measured_ns };
        assert!(faulted.faults.iter().all(|fault| !ended.reached(fault)));
        assert!(run.sim.metrics().unwrap().retired().is_empty());
        let summary = run.summary("stopped");
        assert_eq!(summary.loss_percent, 0.0, "{summary:?}");
        assert_eq!(summary.violations, 0);
        let stats = run.sim.network().stats();
        assert_eq!(
            stats.drops(crate::NetDrop::Dead) + stats.drops(crate::NetDrop::Partition),
            0
        );
        let mut short = Outbound::new(OutboundConfig {
            duration_ns: measured_ns,
            ..config
        })
        .unwrap();
        short.run();
        let mut short_summary = short.summary("stopped");
        // The cancelled kill, pause and resume still come off the event queue, and do
        // nothing (the kill due in 30 s never does).
        short_summary.sim.events += 3;
        assert_eq!(short_summary, summary);
        assert_eq!(short.sim.trace_hash(), run.sim.trace_hash());
    }

    /// Goal: a gateway killed after the last packet but before the end counts what it never
    /// released as lost to the kill, as a kill while publishing does.
    #[test]
    fn a_gateway_killed_after_the_last_packet_is_retired() {
        let gateway = 15;
        let config = OutboundConfig {
            plan: PlanConfig {
                hedge: 1,
                ..PlanConfig::new(20)
            },
            // A packet every 100 µs, the last 10 ms in; the kill 20 µs after it, while the
            // gateway still holds it.
            rate_mps: 10_000.0,
            duration_ns: 10_050_000,
            faults: vec![Fault::Kill {
                node: gateway,
                at_ns: 10_020_000,
            }],
            ..OutboundConfig::default()
        };
        assert!(
            Plan::new(&config.plan)
                .unwrap()
                .gateways()
                .contains(&gateway)
        );
        let mut run = Outbound::new(config).unwrap();
        run.run();
        let metrics = run.sim.metrics().unwrap();
        assert_eq!(metrics.retired()[0].receiver, gateway);
        assert_eq!(metrics.retired()[0].from.packet_seq, run.measured.end);
        assert_eq!(metrics.retired().len(), 1);
        let summary = run.summary("killed");
        // What the gateway still held is the kill's, and nothing else was lost.
        assert!(metrics.lost_messages() >= 1, "{summary:?}");
        assert_eq!(
            summary.lost_to_kills,
            metrics.lost_messages(),
            "{summary:?}"
        );
        assert_eq!(summary.violations, 0);
    }

    #[test]
    fn a_partition_names_its_sides_as_runs_of_ids() {
        let partition = Fault::Partition {
            side_a: vec![0],
            side_b: [1, 2, 3, 7, 9, 10, 4]
                .into_iter()
                .chain(11..=1110)
                .chain([u32::MAX])
                .collect(),
            from_ns: 1_000_000,
            until_ns: 2_500_000,
        };
        assert_eq!(
            partition.to_string(),
            "partition [0] from [1-3, 7, 9, 10, 4, 11-1110, 4294967295] from +1 to +2.5 ms"
        );
    }

    /// The skew bound is a config's for two hops or fewer, and half of it more per hop past;
    /// a bound too large to grow stays as large as it can, never smaller than the config's.
    #[test]
    fn the_skew_bound_grows_with_the_depth() {
        let at = |depth| skew_bound_for_depth(SKEW_BOUND_NS, depth);
        assert_eq!([at(1), at(2), at(3), at(4)], [1_000, 1_000, 1_500, 2_000]);
        assert_eq!(skew_bound_for_depth(0, 4), 0);
        assert_eq!(skew_bound_for_depth(u64::MAX, 2), u64::MAX);
        assert_eq!(skew_bound_for_depth(u64::MAX, 4), u64::MAX);
        assert_eq!(skew_bound_for_depth(1 << 62, 3), 3 << 61);
    }

    /// Goal: a config file can say the skew check is off, and a written config reads back
    /// as the run it came from. Method: both settings through `toml`, then bad values.
    #[test]
    fn the_skew_bound_can_be_off_in_a_config_file() {
        for bound in [Some(SKEW_BOUND_NS), Some(0), None] {
            let config = OutboundConfig {
                skew_bound_ns: bound,
                ..OutboundConfig::default()
            };
            let text = toml::to_string(&config).expect("serialises");
            let back: OutboundConfig = toml::from_str(&text).expect(&text);
            assert_eq!(back, config, "{text}");
        }
        let off: OutboundConfig = toml::from_str("skew_bound_ns = \"off\"").unwrap();
        assert_eq!(off.skew_bound_ns, None);
        let missing: OutboundConfig = toml::from_str("").unwrap();
        assert_eq!(missing.skew_bound_ns, Some(SKEW_BOUND_NS));
        for bad in ["\"none\"", "-1", "1.5", "true"] {
            let error = toml::from_str::<OutboundConfig>(&format!("skew_bound_ns = {bad}"))
                .expect_err(bad)
                .to_string();
            assert!(error.contains("\"off\""), "{bad}: {error}");
        }
    }

    /// Goal: every u64 seed writes into a config file and reads back (TOML's integers stop
    /// at 2^63 - 1; the hostile-input sweep found `--seed 0xffffffffffffffff` refused with
    /// "out-of-range value for u64 type"), and a bad seed is refused clearly.
    #[test]
    fn every_seed_survives_a_config_file() {
        for seed in [0, 1, i64::MAX as u64, 1 << 63, u64::MAX] {
            let config = OutboundConfig {
                seed,
                ..OutboundConfig::default()
            };
            let text = toml::to_string(&config).expect("serialises");
            let back: OutboundConfig = toml::from_str(&text).expect(&text);
            assert_eq!(back.seed, seed, "{text}");
        }
        let hex: OutboundConfig = toml::from_str("seed = \"0x2a\"").unwrap();
        assert_eq!(hex.seed, 42);
        for bad in ["-1", "\"x\"", "1.5", "\"0x1ffffffffffffffff\""] {
            let error = toml::from_str::<OutboundConfig>(&format!("seed = {bad}"))
                .expect_err(bad)
                .to_string();
            assert!(error.contains("expected a seed"), "{bad}: {error}");
        }
    }

    /// Goal: the memory estimate is within 10% under and 50% over what runs measured (see
    /// [`MEMORY_BASE_BYTES`]), and says that N = 100,000
    /// under RRPS cannot fit a 24 GiB machine. Method: `jasper sim run -n N -H 2` as
    /// measured (the warm-up of [`warmup_ns_for`], 50 ms measured but 0.3 s at 10,000).
    #[test]
    fn the_memory_estimate_covers_what_runs_measured() {
        let mib = |n: u32, duration_ns: u64| {
            let config = OutboundConfig {
                plan: PlanConfig {
                    hedge: 2,
                    ..PlanConfig::new(n)
                },
                warmup_ns: warmup_ns_for(n),
                duration_ns,
                ..OutboundConfig::default()
            };
            let plan = Plan::new(&config.plan).unwrap();
            config.memory_estimate_bytes(&plan) >> 20
        };
        for (n, duration_ns, measured_mib) in [
            (1000, 50_000_000, 101),
            (2000, 50_000_000, 166),
            (4000, 50_000_000, 527),
            (10_000, 300_000_000, 3_107),
            (20_000, 50_000_000, 7_733),
        ] {
            let estimate = mib(n, duration_ns);
            assert!(
                estimate >= measured_mib * 9 / 10 && estimate <= measured_mib * 3 / 2,
                "N = {n}: estimated {estimate} MiB, measured {measured_mib} MiB"
            );
        }
        assert!(mib(100_000, 50_000_000) > 24 << 10, "N = 100,000");
        // Without RRPS a node has only its H + 1 parents: the links grow with N, not N^2.
        let fixed = OutboundConfig {
            plan: PlanConfig {
                rrps: false,
                ..PlanConfig::new(100_000)
            },
            ..OutboundConfig::default()
        };
        let plan = Plan::new(&fixed.plan).unwrap();
        assert!(fixed.memory_estimate_bytes(&plan) < 8 << 30);
    }

    /// Goal: a configuration that would panic mid-run, never end, or measure nothing is
    /// refused before anything is built. Method: one bad field at a time over the default,
    /// which itself passes.
    #[test]
    fn bad_configurations_are_refused_before_the_run() {
        let good = OutboundConfig::default();
        assert_eq!(good.validate(), Ok(()));
        let burst = Burst {
            factor: 15.0,
            every_ns: 50_000_000,
            length_ns: 2_000_000,
        };
        let cases: Vec<(&str, OutboundConfig)> = vec![
            (
                "rate_mps",
                OutboundConfig {
                    rate_mps: f64::NAN,
                    ..good.clone()
                },
            ),
            (
                "rate_mps",
                OutboundConfig {
                    rate_mps: 0.0,
                    ..good.clone()
                },
            ),
            (
                "rate_mps",
                OutboundConfig {
                    rate_mps: f64::INFINITY,
                    ..good.clone()
                },
            ),
            (
                "burst factor",
                OutboundConfig {
                    burst: Some(Burst {
                        factor: 0.0,
                        ..burst
                    }),
                    ..good.clone()
                },
            ),
            (
                "burst rate",
                OutboundConfig {
                    burst: Some(Burst {
                        factor: 1e9,
                        ..burst
                    }),
                    ..good.clone()
                },
            ),
            (
                "a burst must last",
                OutboundConfig {
                    burst: Some(Burst {
                        every_ns: 0,
                        ..burst
                    }),
                    ..good.clone()
                },
            ),
            (
                "a burst must last",
                OutboundConfig {
                    burst: Some(Burst {
                        length_ns: 60_000_000,
                        ..burst
                    }),
                    ..good.clone()
                },
            ),
            (
                "duration",
                OutboundConfig {
                    duration_ns: 0,
                    ..good.clone()
                },
            ),
            (
                "warm-up, duration and drain",
                OutboundConfig {
                    duration_ns: u64::MAX,
                    ..good.clone()
                },
            ),
            (
                "message_len",
                OutboundConfig {
                    message_len: 0,
                    ..good.clone()
                },
            ),
            (
                "message_len",
                OutboundConfig {
                    message_len: 2000,
                    ..good.clone()
                },
            ),
            (
                "clock_drift_ppm_max",
                OutboundConfig {
                    clock_drift_ppm_max: f64::NAN,
                    ..good.clone()
                },
            ),
            (
                "loss",
                OutboundConfig {
                    model: NetModel {
                        loss: 1.5,
                        ..good.model.clone()
                    },
                    ..good.clone()
                },
            ),
            (
                "gateways_per_vm",
                OutboundConfig {
                    gateways_per_vm: 0,
                    ..good.clone()
                },
            ),
            (
                "gateways_per_vm",
                OutboundConfig {
                    gateways_per_vm: GATEWAYS_PER_VM_MAX + 1,
                    ..good.clone()
                },
            ),
            (
                "gateways_per_vm",
                OutboundConfig {
                    gateways_per_vm: 2,
                    plan: PlanConfig {
                        receiver_hedging: true,
                        ..good.plan.clone()
                    },
                    ..good.clone()
                },
            ),
            (
                "invariants_every",
                OutboundConfig {
                    invariants_every: 0,
                    ..good.clone()
                },
            ),
            (
                "threads",
                OutboundConfig {
                    threads: 0,
                    ..good.clone()
                },
            ),
            (
                "threads",
                OutboundConfig {
                    threads: crate::runtime::SHARDS_MAX as u32 + 1,
                    ..good.clone()
                },
            ),
            (
                // Found by a hostile-input sweep: i64::MAX ran, with 598 checker violations.
                "clock_offset_ns_max",
                OutboundConfig {
                    clock_offset_ns_max: i64::MAX as u64,
                    ..good.clone()
                },
            ),
        ];
        for (field, config) in cases {
            let error = config.validate().expect_err(field);
            assert!(error.contains(field), "{field}: {error}");
            assert!(Outbound::new(config).is_err(), "{field}");
        }
        let with_burst = OutboundConfig {
            burst: Some(burst),
            ..good
        };
        assert_eq!(with_burst.validate(), Ok(()));
    }

    /// Goal: `gateways_per_vm` puts siblings on one VM in groups, and never two gateways of
    /// different home parents, nor a relay. Method: N = 100 under 10 proxies of 10 gateways,
    /// 4 to a VM: each proxy's children make VMs of 4, 4 and 2 (41 VMs in all); with 1, each
    /// node has its own.
    #[test]
    fn gateways_share_vms_in_groups_of_siblings() {
        let config = |per_vm| OutboundConfig {
            plan: PlanConfig {
                shape: proto::plan::Shape::Explicit {
                    depth: 2,
                    fanout: 10,
                },
                ..PlanConfig::new(100)
            },
            gateways_per_vm: per_vm,
            ..OutboundConfig::default()
        };
        let alone = Outbound::new(config(1)).unwrap();
        assert_eq!(alone.sim.network().host_count(), 111);
        assert!(!alone.sim.has_shared_vms());
        let grouped = Outbound::new(config(4)).unwrap();
        assert_eq!(grouped.sim.network().host_count(), 1 + 10 + 10 * 3);
        let plan = &grouped.plan;
        for proxy in plan.proxies() {
            let children: Vec<u32> = plan.home_children(NodeId(proxy)).collect();
            assert_eq!(children.len(), 10);
            let vm = |i: usize| grouped.sim.vm_of(NodeId(children[i]));
            for (i, expected_first) in [0, 0, 0, 0, 4, 4, 4, 4, 8, 8].into_iter().enumerate() {
                assert_eq!(vm(i), vm(expected_first), "child {i} of proxy {proxy}");
            }
            assert!(vm(0) != vm(4) && vm(4) != vm(8));
            assert!(
                plan.proxies()
                    .all(|p| grouped.sim.vm_of(NodeId(p)) != vm(0))
            );
        }
        for (p, next) in plan.proxies().zip(plan.proxies().skip(1)) {
            let last = plan.home_children(NodeId(p)).end - 1;
            let first_next = plan.home_children(NodeId(next)).start;
            assert_ne!(
                grouped.sim.vm_of(NodeId(last)),
                grouped.sim.vm_of(NodeId(first_next)),
                "a VM spans proxies {p} and {next}"
            );
        }
    }

    /// Goal: faults come from a config file in the documented form, and one naming a node the
    /// plan does not have, the root as a kill target, an empty or reversed span, or a node on
    /// both sides of a partition is refused when the run is built.
    #[test]
    fn faults_parse_from_a_file_and_bad_ones_are_refused() {
        let config: OutboundConfig = toml::from_str(
            "[plan]\nparticipants = 20\n\
             [[faults]]\nkind = \"kill\"\nnode = 2\nat_ns = 5000000\n\
             [[faults]]\nkind = \"partition\"\nside_a = [0]\nside_b = [3, 4]\n\
             from_ns = 1000\nuntil_ns = 2000\n",
        )
        .unwrap();
        assert_eq!(
            config.faults,
            vec![
                Fault::Kill {
                    node: 2,
                    at_ns: 5_000_000
                },
                Fault::Partition {
                    side_a: vec![0],
                    side_b: vec![3, 4],
                    from_ns: 1000,
                    until_ns: 2000
                }
            ]
        );
        assert!(Outbound::new(config.clone()).is_ok());
        let span = |from_ns, until_ns| Fault::Pause {
            node: 3,
            from_ns,
            until_ns,
        };
        let partition = |side_a: Vec<u32>, side_b: Vec<u32>| Fault::Partition {
            side_a,
            side_b,
            from_ns: 0,
            until_ns: 10,
        };
        let clog = Fault::Clog {
            source: 1,
            target: 1,
            from_ns: 0,
            until_ns: 10,
        };
        for (fault, says) in [
            (Fault::Kill { node: 0, at_ns: 0 }, "the root"),
            (Fault::Kill { node: 21, at_ns: 0 }, "not in the plan"),
            (span(20, 10), "span"),
            (span(10, 10), "span"),
            (span(0, i64::MAX as u64), "ends after the longest run"),
            (clog, "two nodes"),
            (partition(vec![1, 2], vec![2]), "both sides"),
            (partition(vec![], vec![2]), "both sides need"),
        ] {
            let bad = OutboundConfig {
                faults: vec![fault.clone()],
                ..config.clone()
            };
            let error = Outbound::new(bad).expect_err(&fault.to_string());
            assert!(error.contains(says), "{fault}: {error}");
        }
        // Gateways send each other nothing but twins their OWD reports: with receiver
        // hedging a clog between participant 0's two gateways is taken, one between two
        // participants' gateways refused.
        let clog = |source, target| Fault::Clog {
            source,
            target,
            from_ns: 0,
            until_ns: 10,
        };
        let mut hedged = config.clone();
        hedged.plan.receiver_hedging = true;
        let plan = Plan::new(&hedged.plan).unwrap();
        let twins: Vec<u32> = plan.participant_gateways(0).map(|g| g.0).collect();
        assert_eq!(twins.len(), 2);
        hedged.faults = vec![clog(twins[0], twins[1])];
        assert!(Outbound::new(hedged.clone()).is_ok());
        hedged.faults = vec![clog(twins[0], twins[0] + 1)];
        let error = Outbound::new(hedged).expect_err("not twins");
        assert!(error.contains("send each other nothing"), "{error}");
    }
}
