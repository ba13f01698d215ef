//! The cluster config: the plan plus where every node runs.
//!
//! `jasper plan` writes it; `jasper node --config cluster.toml --id NAME` reads it. It holds
//! the plan's parameters (so every node rebuilds exactly the same forwarding tables), the
//! node parameters, and one entry per node with its address and optional injected clock
//! error (so clock sync has real work even when every node shares one host's clock).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::config::NodeConfig;
use crate::node::NodeId;
use crate::plan::{Plan, PlanConfig, PlanError, Role};

/// One node of the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// Id in the plan.
    pub id: u32,
    /// Readable name (`root`, `p1.3`, `g42`, `g42b`).
    pub name: String,
    /// Role, as the plan has it.
    pub role: Role,
    /// UDP address the node listens on.
    pub addr: SocketAddr,
    /// Runs on a spot VM.
    #[serde(default)]
    pub spot: bool,
    /// Injected clock offset, ns (testing clock sync on one host).
    #[serde(default)]
    pub clock_offset_ns: i64,
    /// Injected clock drift, parts per billion.
    #[serde(default)]
    pub clock_drift_ppb: i64,
    /// Trust model 2: a gateway forwards released market data to this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<SocketAddr>,
}

/// The whole cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The tree.
    pub plan: PlanConfig,
    /// Node parameters shared by every node.
    #[serde(default)]
    pub node: NodeConfig,
    /// Every node, in id order.
    pub nodes: Vec<NodeEntry>,
}

/// The largest clock offset a node entry may inject, ns (an hour).
pub const CLOCK_OFFSET_NS_MAX: u64 = 3_600_000_000_000;

/// Why a cluster config is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Not valid TOML for this schema (the TOML error, which shows the line, is the source).
    #[error("not a cluster config")]
    Parse(#[from] toml::de::Error),
    /// The plan parameters are invalid.
    #[error("cluster config plan: {0}")]
    Plan(PlanError),
    /// The node table does not match the plan.
    #[error("cluster config nodes: {0}")]
    Nodes(String),
}

/// An address one peer can send to: a port, and an IP that is neither unspecified
/// (0.0.0.0), multicast nor the IPv4 broadcast address.
fn is_unicast(addr: SocketAddr) -> bool {
    let ip = addr.ip();
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    addr.port() != 0 && !ip.is_unspecified() && !ip.is_multicast() && !broadcast
}

impl ClusterConfig {
    /// Lays `plan` out on `hosts` (round-robin; loopback if empty), node `i` listening on
    /// `base_port + i`. With receiver hedging a participant's two gateways go to different
    /// hosts where there are two or more: twins on one VM share its network path and its
    /// pauses, which is what the second gateway is there to avoid. (Plain round-robin put
    /// every pair together whenever the hosts' count divides the participants', since
    /// twins are that many ids apart.)
    pub fn layout(
        plan: &Plan,
        node: NodeConfig,
        hosts: &[IpAddr],
        base_port: u16,
    ) -> Result<Self, ClusterError> {
        let loopback = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
        let hosts = if hosts.is_empty() {
            &loopback[..]
        } else {
            hosts
        };
        let count = plan.nodes().len();
        if base_port as usize + count > u16::MAX as usize + 1 {
            return Err(ClusterError::Nodes(format!(
                "{count} nodes do not fit in the ports from {base_port}"
            )));
        }
        // The hosts each participant's gateways were given so far.
        let mut taken: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
        let nodes = plan
            .nodes()
            .iter()
            .map(|spec| {
                let i = spec.id.0 as usize;
                let mut host = i % hosts.len();
                if let Some(participant) = spec.participant {
                    let taken = taken.entry(participant).or_default();
                    if let Some(free) = (0..hosts.len())
                        .map(|k| (host + k) % hosts.len())
                        .find(|h| !taken.contains(h))
                    {
                        host = free;
                    }
                    taken.push(host);
                }
                NodeEntry {
                    id: spec.id.0,
                    name: spec.name(),
                    role: spec.role,
                    addr: SocketAddr::new(hosts[host], base_port + i as u16),
                    spot: spec.spot,
                    clock_offset_ns: 0,
                    clock_drift_ppb: 0,
                    external: None,
                }
            })
            .collect();
        let config = Self {
            plan: plan.config().clone(),
            node,
            nodes,
        };
        // What a hand-written file is held to: no port 0 or 0.0.0.0, a valid node config.
        config.validate()?;
        Ok(config)
    }

    /// Parses and validates a config.
    pub fn from_toml(text: &str) -> Result<(Self, Plan), ClusterError> {
        let config: Self = toml::from_str(text)?;
        let plan = config.validate()?;
        Ok((config, plan))
    }

    /// Writes the config as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a cluster config always serialises")
    }

    /// Rebuilds the plan and checks that the node table matches it: ids dense and in order,
    /// roles as planned, addresses distinct, a valid session name and OWD margin.
    pub fn validate(&self) -> Result<Plan, ClusterError> {
        let plan = Plan::new(&self.plan).map_err(ClusterError::Plan)?;
        self.node.validate().map_err(ClusterError::Nodes)?;
        if self.nodes.len() != plan.nodes().len() {
            return Err(ClusterError::Nodes(format!(
                "the plan has {} nodes, the table {}",
                plan.nodes().len(),
                self.nodes.len()
            )));
        }
        let mut addrs: Vec<SocketAddr> = Vec::with_capacity(self.nodes.len());
        let mut names = std::collections::BTreeSet::new();
        for (i, (entry, spec)) in self.nodes.iter().zip(plan.nodes()).enumerate() {
            if entry.id as usize != i {
                return Err(ClusterError::Nodes(format!(
                    "entry {i} has id {}",
                    entry.id
                )));
            }
            if entry.role != spec.role {
                return Err(ClusterError::Nodes(format!(
                    "node {} ({}) is a {:?} in the plan, not a {:?}",
                    i, entry.name, spec.role, entry.role
                )));
            }
            if entry.clock_drift_ppb.unsigned_abs() > 1_000_000 {
                return Err(ClusterError::Nodes(format!(
                    "node {}: clock_drift_ppb {} is beyond ±1000 ppm",
                    entry.name, entry.clock_drift_ppb
                )));
            }
            if entry.clock_offset_ns.unsigned_abs() > CLOCK_OFFSET_NS_MAX {
                return Err(ClusterError::Nodes(format!(
                    "node {}: clock_offset_ns {} is beyond ±1 hour",
                    entry.name, entry.clock_offset_ns
                )));
            }
            if !is_unicast(entry.addr) {
                return Err(ClusterError::Nodes(format!(
                    "node {}: {} is no address a peer can send to (port 0, an unspecified \
                     IP such as 0.0.0.0, multicast or broadcast)",
                    entry.name, entry.addr
                )));
            }
            if entry.addr.is_ipv4() != self.nodes[0].addr.is_ipv4() {
                return Err(ClusterError::Nodes(format!(
                    "node {}: {} is not of the root's address family ({}): a node's socket \
                     sends to one family",
                    entry.name, entry.addr, self.nodes[0].addr
                )));
            }
            if let Some(external) = entry
                .external
                .filter(|a| !is_unicast(*a) || a.is_ipv4() != entry.addr.is_ipv4())
            {
                return Err(ClusterError::Nodes(format!(
                    "node {}: external {external} is no address to forward to from {} (port 0, \
                     unspecified, multicast, broadcast, or another address family)",
                    entry.name, entry.addr
                )));
            }
            if entry.external.is_some() && entry.role != Role::Gateway {
                return Err(ClusterError::Nodes(format!(
                    "node {}: only a gateway forwards to an external address",
                    entry.name
                )));
            }
            // `jasper node --id` takes names separated by commas, printed in `key=value` lines.
            if entry.name.is_empty()
                || entry
                    .name
                    .chars()
                    .any(|c| c == ',' || c == '=' || c.is_whitespace() || c.is_control())
            {
                return Err(ClusterError::Nodes(format!(
                    "node {i}: name {:?} must be non-empty, without commas, '=', spaces or \
                     control characters (--id takes names separated by commas)",
                    entry.name
                )));
            }
            if !names.insert(entry.name.as_str()) {
                return Err(ClusterError::Nodes(format!(
                    "node name {:?} is used twice (--id picks a node by name)",
                    entry.name
                )));
            }
            addrs.push(entry.addr);
        }
        addrs.sort();
        if let Some(w) = addrs.windows(2).find(|w| w[0] == w[1]) {
            return Err(ClusterError::Nodes(format!(
                "address {} is used twice",
                w[0]
            )));
        }
        // (Twins of one participant may share its program's address.)
        for entry in &self.nodes {
            if let Some(external) = entry.external.filter(|a| addrs.binary_search(a).is_ok()) {
                return Err(ClusterError::Nodes(format!(
                    "node {}: external {external} is a node's address (it would take the \
                     market data for datagrams from that node)",
                    entry.name
                )));
            }
        }
        Ok(plan)
    }

    /// The node called `name` (or with that numeric id).
    pub fn find(&self, name: &str) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.name == name).or_else(|| {
            name.parse::<u32>()
                .ok()
                .and_then(|id| self.nodes.get(id as usize))
        })
    }

    /// The node whose address is `addr`: how a runtime maps a datagram's source to a node
    /// (and drops datagrams from anywhere else).
    pub fn id_of(&self, addr: SocketAddr) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|n| n.addr == addr)
            .map(|n| NodeId(n.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_toml_and_validates() {
        let plan = Plan::new(&PlanConfig::new(20)).unwrap();
        let config = ClusterConfig::layout(&plan, NodeConfig::default(), &[], 21_000).unwrap();
        let text = config.to_toml();
        let (back, plan_back) = ClusterConfig::from_toml(&text).unwrap();
        assert_eq!(back, config);
        assert_eq!(plan_back, plan);
        assert_eq!(
            back.find("g3").unwrap().addr.port(),
            21_000 + plan.gateways().start as u16 + 3
        );
        assert_eq!(back.find("0").unwrap().role, Role::Root);
        assert_eq!(
            back.id_of("127.0.0.1:21000".parse().unwrap()),
            Some(NodeId(0))
        );
        assert_eq!(back.id_of("127.0.0.1:9".parse().unwrap()), None);
    }

    /// Goal: a participant's two gateways never share a host when there are two. Method:
    /// every participant count of 1-40 on 1-5 hosts (2 and 4 divide 20 and 40: round-robin
    /// by id put every pair together there).
    #[test]
    fn twins_are_laid_out_on_different_hosts() {
        let all: Vec<IpAddr> = (1..=5)
            .map(|k| IpAddr::V4(Ipv4Addr::new(10, 0, 0, k)))
            .collect();
        for participants in 1..=40 {
            let mut config = PlanConfig::new(participants);
            config.receiver_hedging = true;
            let plan = Plan::new(&config).unwrap();
            for count in 1..=all.len() {
                let hosts = &all[..count];
                let layout =
                    ClusterConfig::layout(&plan, NodeConfig::default(), hosts, 21_000).unwrap();
                for p in 0..participants {
                    let ips: Vec<IpAddr> = plan
                        .participant_gateways(p)
                        .map(|g| layout.nodes[g.0 as usize].addr.ip())
                        .collect();
                    assert_eq!(ips.len(), 2);
                    assert!(
                        count == 1 || ips[0] != ips[1],
                        "participant {p} of {participants} on {count} hosts: {ips:?}"
                    );
                }
                // The proxies and the root keep the round-robin.
                for spec in plan.nodes().iter().filter(|s| s.participant.is_none()) {
                    let i = spec.id.0 as usize;
                    assert_eq!(layout.nodes[i].addr.ip(), hosts[i % count]);
                }
            }
        }
    }

    #[test]
    fn rejects_tables_that_do_not_match_the_plan() {
        let plan = Plan::new(&PlanConfig::new(20)).unwrap();
        let good = ClusterConfig::layout(&plan, NodeConfig::default(), &[], 21_000).unwrap();
        let mut bad = good.clone();
        bad.nodes.pop();
        assert!(matches!(bad.validate(), Err(ClusterError::Nodes(_))));
        let mut bad = good.clone();
        bad.nodes[1].addr = bad.nodes[2].addr;
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("used twice")
        );
        let mut bad = good.clone();
        bad.nodes[0].role = Role::Gateway;
        assert!(bad.validate().is_err());
        let mut bad = good.clone();
        bad.node.owd.margin = core::time::Duration::from_secs(5);
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("node.owd.margin")
        );
        assert!(ClusterConfig::from_toml("plan = 3").is_err());
        assert!(ClusterConfig::layout(&plan, NodeConfig::default(), &[], 65_530).is_err());
        let says = |bad: &ClusterConfig, what: &str| {
            let error = bad.validate().expect_err(what).to_string();
            assert!(error.contains(what), "{error}");
        };
        let mut bad = good.clone();
        bad.nodes[3].clock_drift_ppb = i64::MIN;
        says(&bad, "clock_drift_ppb");
        let mut bad = good.clone();
        bad.nodes[3].clock_offset_ns = i64::MIN;
        says(&bad, "clock_offset_ns");
        let mut bad = good.clone();
        bad.nodes[3].addr.set_port(0);
        says(&bad, "no address a peer can send to");
        let mut bad = good.clone();
        bad.nodes[3].addr.set_ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        says(&bad, "no address a peer can send to");
        // Found by a hostile-input sweep: these ran, and delivered nothing.
        for ip in ["224.0.0.1", "255.255.255.255", "ff02::1"] {
            let mut bad = good.clone();
            bad.nodes[3].addr.set_ip(ip.parse().unwrap());
            says(&bad, "no address a peer can send to");
        }
        let mut bad = good.clone();
        bad.nodes[3].addr.set_ip("::1".parse().unwrap());
        says(&bad, "address family");
        let mut bad = good.clone();
        bad.nodes[plan.gateways().start as usize].external = Some("[::1]:9".parse().unwrap());
        says(&bad, "another address family");
        for name in ["", "a,b", "a b", "a=b"] {
            let mut bad = good.clone();
            bad.nodes[3].name = name.to_string();
            says(&bad, "must be non-empty");
        }
        let mut bad = good.clone();
        bad.nodes[3].name = bad.nodes[2].name.clone();
        says(&bad, "used twice");
        let gateway = plan.gateways().start as usize;
        let mut bad = good.clone();
        bad.nodes[0].external = Some("127.0.0.1:9".parse().unwrap());
        says(&bad, "only a gateway forwards");
        let mut bad = good.clone();
        bad.nodes[gateway].external = Some(bad.nodes[0].addr);
        says(&bad, "is a node's address");
        let mut twins = good.clone();
        twins.nodes[gateway].external = Some("127.0.0.1:9".parse().unwrap());
        twins.nodes[gateway + 1].external = twins.nodes[gateway].external;
        twins
            .validate()
            .expect("a participant's program may take two gateways' data");
        for (hosts, port) in [
            (&[][..], 0),
            (&[IpAddr::V4(Ipv4Addr::UNSPECIFIED)][..], 21_000),
        ] {
            assert!(ClusterConfig::layout(&plan, NodeConfig::default(), hosts, port).is_err());
        }
    }
}
