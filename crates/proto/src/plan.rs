//! Tree planning: who forwards market data to whom, for every packet.
//!
//! The tree has `depth` hops from the root (layer 0) to the gateways (layer `depth`); proxies
//! fill layers `1..depth`. Layer sizes are built bottom-up: layer `depth` holds every gateway
//! and each layer above holds `ceil(below / fanout)` nodes, so the layer of proxies directly
//! above `N` gateways needs `ceil(N / F)` proxies (N = 200, F = 15 gives the paper's 14).
//!
//! The nodes of a layer are cut into contiguous *blocks* of `fanout` nodes, one block per node
//! of the layer above. Forwarding (DESIGN.md §4):
//!
//! - **RRPS**: on packet `m`, parent `i` of a layer with `L` nodes sends to child block
//!   `(i + m) mod L`; without RRPS it always sends to block `i`. Either way every child block
//!   has exactly one primary parent per packet.
//! - **SiblingHedging(H)**: parent `i` also sends to the blocks of its next `H` siblings,
//!   `(i + j + m) mod L` for `j = 1..=H`, so every node below layer 1 gets `H + 1` copies.
//!   `H` is capped at `L - 1` per layer (a layer of one node has no sibling to cover).
//!
//! The plan is pure data: the runtime reads it from the cluster config that `jasper plan`
//! writes, and rebuilds exactly the same forwarding tables.

use core::fmt;
use core::ops::Range;

use serde::{Deserialize, Serialize};

use crate::node::NodeId;

/// Largest number of participants a plan accepts.
pub const PARTICIPANTS_MAX: u32 = 1 << 20;
/// Deepest tree a plan accepts.
pub const DEPTH_MAX: u32 = 8;

/// How to choose the tree's depth and fan-out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Shape {
    /// The paper's F/D heuristic: D = round(log10 N) (at least 1), then F = ceil(N^(1/D)).
    #[default]
    Heuristic,
    /// An explicit `<D, F>`; `depth = 1` is direct unicast from the root.
    Explicit {
        /// Hops from the root to a gateway.
        depth: u32,
        /// Children per node.
        fanout: u32,
    },
}

/// Which proxies run on cheap, preemptible spot VMs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpotPolicy {
    /// Every proxy is on-demand.
    #[default]
    None,
    /// Every even-numbered proxy of each layer is a spot VM (paper §7): with `H >= 1` the odd
    /// neighbours still reach every gateway when all spot VMs are gone.
    EvenProxies,
}

/// What the operator asks for. In a file, every field but `participants` may be left out and
/// takes [`PlanConfig::new`]'s value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// Number of market participants (MPs).
    pub participants: u32,
    /// Two gateways per MP running the same strategy.
    #[serde(default)]
    pub receiver_hedging: bool,
    /// Depth and fan-out.
    #[serde(default)]
    pub shape: Shape,
    /// Sibling hedging factor H.
    #[serde(default = "default_hedge")]
    pub hedge: u32,
    /// Round-robin packet spraying.
    #[serde(default = "default_true")]
    pub rrps: bool,
    /// Spot marking of proxies.
    #[serde(default)]
    pub spot: SpotPolicy,
}

fn default_true() -> bool {
    true
}

fn default_hedge() -> u32 {
    1
}

impl PlanConfig {
    /// The paper's default: F/D heuristic, H = 1, RRPS on, no receiver hedging.
    pub fn new(participants: u32) -> Self {
        Self {
            participants,
            receiver_hedging: false,
            shape: Shape::Heuristic,
            hedge: 1,
            rrps: true,
            spot: SpotPolicy::None,
        }
    }

    /// A tree of `depth` layers below the root and fan-out `fanout`, without sibling hedging
    /// (every node gets one copy of each packet), RRPS on: the shape tests and benchmarks
    /// pin down.
    pub fn unhedged(participants: u32, depth: u32, fanout: u32) -> Self {
        Self {
            shape: Shape::Explicit { depth, fanout },
            hedge: 0,
            ..Self::new(participants)
        }
    }
}

/// Why a plan cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Zero participants, or more than [`PARTICIPANTS_MAX`].
    #[error("participants must be between 1 and {PARTICIPANTS_MAX}, got {0}")]
    Participants(u32),
    /// Depth zero or above [`DEPTH_MAX`].
    #[error("depth must be between 1 and {DEPTH_MAX}, got {0}")]
    Depth(u32),
    /// Fan-out zero.
    #[error("fan-out must be at least 1")]
    Fanout,
    /// A fan-out above the number of gateways: no node could have that many children.
    #[error("fan-out {fanout} is more than the {gateways} gateways the tree has to reach")]
    FanoutAboveGateways {
        /// Requested fan-out.
        fanout: u32,
        /// Gateways to place.
        gateways: u32,
    },
    /// `F^D` cannot hold every gateway.
    #[error(
        "a tree of depth {depth} and fan-out {fanout} holds {capacity} gateway{}, not {gateways}",
        if *capacity == 1 { "" } else { "s" }
    )]
    TooSmall {
        /// Requested depth.
        depth: u32,
        /// Requested fan-out.
        fanout: u32,
        /// `fanout^depth`.
        capacity: u64,
        /// Gateways to place.
        gateways: u32,
    },
}

/// The role of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Sequencer, matching engine, market-data publisher, rewinder.
    Root,
    /// A forwarding proxy.
    Proxy,
    /// A market participant's leaf.
    Gateway,
}

/// One node of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Its id (the index into [`Plan::nodes`]).
    pub id: NodeId,
    /// Its role.
    pub role: Role,
    /// Its layer: 0 for the root, `depth` for gateways.
    pub layer: u32,
    /// Its index within the layer.
    pub index: u32,
    /// For a gateway, the participant it serves.
    pub participant: Option<u32>,
    /// For a proxy, whether it runs on a spot VM.
    pub spot: bool,
    /// For a gateway, whether it is the participant's second (hedge) gateway.
    pub twin: bool,
}

impl NodeSpec {
    /// A readable name: `root`, `p1.3` (layer 1, proxy 3), `g42` / `g42b` (participant 42's
    /// first / hedge gateway).
    pub fn name(&self) -> String {
        match self.role {
            Role::Root => "root".to_string(),
            Role::Proxy => format!("p{}.{}", self.layer, self.index),
            Role::Gateway => {
                let participant = self.participant.unwrap_or(u32::MAX);
                if self.twin {
                    format!("g{participant}b")
                } else {
                    format!("g{participant}")
                }
            }
        }
    }
}

/// A planned tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    config: PlanConfig,
    depth: u32,
    fanout: u32,
    /// Node ids of each layer, root first.
    layers: Vec<Range<u32>>,
    nodes: Vec<NodeSpec>,
}

impl Plan {
    /// Plans the tree for `config`.
    pub fn new(config: &PlanConfig) -> Result<Self, PlanError> {
        let participants = config.participants;
        if participants == 0 || participants > PARTICIPANTS_MAX {
            return Err(PlanError::Participants(participants));
        }
        let gateways = participants * if config.receiver_hedging { 2 } else { 1 };
        let (depth, fanout) = match config.shape {
            Shape::Heuristic => heuristic_shape(gateways),
            Shape::Explicit { depth, fanout } => (depth, fanout),
        };
        if depth == 0 || depth > DEPTH_MAX {
            return Err(PlanError::Depth(depth));
        }
        if fanout == 0 {
            return Err(PlanError::Fanout);
        }
        if fanout > gateways {
            return Err(PlanError::FanoutAboveGateways { fanout, gateways });
        }
        let capacity = (fanout as u64).saturating_pow(depth);
        if capacity < gateways as u64 {
            return Err(PlanError::TooSmall {
                depth,
                fanout,
                capacity,
                gateways,
            });
        }

        // Layer sizes bottom-up; the root layer always ends up with one node because
        // fanout^depth >= gateways.
        let mut sizes = vec![0u32; depth as usize + 1];
        sizes[depth as usize] = gateways;
        for layer in (0..depth as usize).rev() {
            sizes[layer] = sizes[layer + 1].div_ceil(fanout);
        }
        assert_eq!(
            sizes[0], 1,
            "fanout^depth >= gateways implies a single root"
        );

        let mut layers = Vec::with_capacity(sizes.len());
        let mut nodes = Vec::with_capacity(sizes.iter().map(|&s| s as usize).sum());
        let mut next = 0u32;
        for (layer, &size) in sizes.iter().enumerate() {
            let layer = layer as u32;
            layers.push(next..next + size);
            for index in 0..size {
                let role = if layer == 0 {
                    Role::Root
                } else if layer == depth {
                    Role::Gateway
                } else {
                    Role::Proxy
                };
                let participant = (role == Role::Gateway).then(|| index % participants);
                let spot =
                    role == Role::Proxy && config.spot == SpotPolicy::EvenProxies && index % 2 == 0;
                let twin = role == Role::Gateway && index >= participants;
                let id = NodeId(next + index);
                nodes.push(NodeSpec {
                    id,
                    role,
                    layer,
                    index,
                    participant,
                    spot,
                    twin,
                });
            }
            next += size;
        }
        let plan = Self {
            config: config.clone(),
            depth,
            fanout,
            layers,
            nodes,
        };
        plan.check_invariants();
        Ok(plan)
    }

    /// What was asked for.
    pub fn config(&self) -> &PlanConfig {
        &self.config
    }

    /// Hops from the root to a gateway.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Children per node.
    pub fn fanout(&self) -> u32 {
        self.fanout
    }

    /// Every node, indexed by id.
    pub fn nodes(&self) -> &[NodeSpec] {
        &self.nodes
    }

    /// The node with this id, if it is in the plan.
    pub fn node(&self, id: NodeId) -> Option<&NodeSpec> {
        self.nodes.get(id.0 as usize)
    }

    /// The root's id (always 0).
    pub fn root(&self) -> NodeId {
        NodeId(0)
    }

    /// Ids of the nodes of `layer`.
    pub fn layer(&self, layer: u32) -> Range<u32> {
        self.layers.get(layer as usize).cloned().unwrap_or(0..0)
    }

    /// Ids of every gateway.
    pub fn gateways(&self) -> Range<u32> {
        self.layer(self.depth)
    }

    /// A digest (FNV-1a, never 0) of what a root's state depends on in the plan: its
    /// participants and the ids of their gateways (responses are numbered per participant
    /// and go to those ids). A durable root tags its journal with it
    /// ([`crate::journal`]), so that a root of another plan does not recover from it.
    pub fn participants_digest(&self) -> u32 {
        let mut hash: u32 = 0x811c_9dc5;
        let mut eat = |value: u32| {
            for byte in value.to_le_bytes() {
                hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
            }
        };
        eat(self.config.participants);
        for participant in 0..self.config.participants {
            for gateway in self.participant_gateways(participant) {
                eat(gateway.0);
            }
        }
        hash.max(1)
    }

    /// Ids of every proxy.
    pub fn proxies(&self) -> Range<u32> {
        self.layer(1).start..self.gateways().start
    }

    /// The gateways of `participant`: one, or two with receiver hedging.
    pub fn participant_gateways(&self, participant: u32) -> impl Iterator<Item = NodeId> + '_ {
        let gateways = self.gateways();
        let copies = if self.config.receiver_hedging { 2 } else { 1 };
        (0..copies)
            .map(move |c| gateways.start + participant + c * self.config.participants)
            .filter(move |&id| participant < self.config.participants && gateways.contains(&id))
            .map(NodeId)
    }

    /// The sibling hedging factor in force between `layer` and the layer below.
    pub fn hedge_at(&self, layer: u32) -> u32 {
        let width = self.layer(layer).len() as u32;
        self.config.hedge.min(width.saturating_sub(1))
    }

    /// The fixed ("home") parent of a node: the parent of its block without RRPS. Control
    /// traffic (OWD reports, clock probes, orders) goes up the home tree.
    pub fn home_parent(&self, id: NodeId) -> Option<NodeId> {
        let spec = self.node(id)?;
        if spec.layer == 0 {
            return None;
        }
        let parents = self.layer(spec.layer - 1);
        Some(NodeId(parents.start + spec.index / self.fanout))
    }

    /// The home children of a node (its block without RRPS).
    pub fn home_children(&self, id: NodeId) -> Range<u32> {
        match self.node(id) {
            Some(spec) if spec.layer < self.depth => self.block(spec.layer + 1, spec.index),
            _ => 0..0,
        }
    }

    /// Node ids of block `block` of `layer` (blocks are `fanout` nodes wide).
    pub fn block(&self, layer: u32, block: u32) -> Range<u32> {
        let nodes = self.layer(layer);
        let start = nodes
            .start
            .saturating_add(block.saturating_mul(self.fanout))
            .min(nodes.end);
        let end = start.saturating_add(self.fanout).min(nodes.end);
        start..end
    }

    /// Blocks `sender` sends packet `packet_seq` to, primary first, then its `H` hedges.
    pub fn forward_blocks(
        &self,
        sender: NodeId,
        packet_seq: u64,
    ) -> impl Iterator<Item = u32> + '_ {
        let spec = self.node(sender);
        let (layer, index) = spec.map(|s| (s.layer, s.index)).unwrap_or((self.depth, 0));
        let width = self.layer(layer).len() as u64;
        let copies = if layer < self.depth {
            self.hedge_at(layer) + 1
        } else {
            0
        };
        let shift = if self.config.rrps {
            packet_seq % width.max(1)
        } else {
            0
        };
        (0..copies).map(move |j| ((index as u64 + j as u64 + shift) % width.max(1)) as u32)
    }

    /// Appends every destination of packet `packet_seq` sent by `sender` to `out`, in send
    /// order: its primary block first, then the hedged blocks.
    pub fn forward_targets(&self, sender: NodeId, packet_seq: u64, out: &mut Vec<NodeId>) {
        let Some(spec) = self.node(sender) else {
            return;
        };
        if spec.layer >= self.depth {
            return;
        }
        for block in self.forward_blocks(sender, packet_seq) {
            out.extend(self.block(spec.layer + 1, block).map(NodeId));
        }
    }

    /// Whether every gateway still receives every packet when every node in `dead` is down
    /// (checked for every rotation of RRPS, assuming live nodes forward).
    pub fn reaches_all_without(&self, dead: &[NodeId]) -> bool {
        let is_dead = |id: u32| dead.iter().any(|d| d.0 == id);
        if is_dead(0) {
            return false;
        }
        for layer in 0..self.depth {
            let parents = self.layer(layer);
            let width = parents.len() as u32;
            let hedge = self.hedge_at(layer);
            let rotations = if self.config.rrps { width } else { 1 };
            let blocks = self.layer(layer + 1).len() as u32;
            let blocks = blocks.div_ceil(self.fanout);
            for rotation in 0..rotations {
                for block in 0..blocks {
                    // Parent i covers block b when (i + j + rotation) mod width == b.
                    let covered = (0..=hedge).any(|j| {
                        let i = (block + 2 * width - j - rotation) % width;
                        !is_dead(parents.start + i)
                    });
                    if !covered {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// The proxies marked as spot VMs.
    pub fn spot_proxies(&self) -> Vec<NodeId> {
        self.nodes.iter().filter(|n| n.spot).map(|n| n.id).collect()
    }

    /// Asserts the plan's structure.
    pub fn check_invariants(&self) {
        assert_eq!(self.layers.len(), self.depth as usize + 1);
        assert_eq!(self.layer(0), 0..1, "one root, id 0");
        for (layer, range) in self.layers.iter().enumerate().skip(1) {
            assert_eq!(
                range.start,
                self.layers[layer - 1].end,
                "layers are contiguous"
            );
            let above = self.layers[layer - 1].len() as u32;
            assert_eq!(
                (range.len() as u32).div_ceil(self.fanout),
                above,
                "one block per parent"
            );
        }
        assert_eq!(
            self.nodes.len() as u32,
            self.layers.last().map_or(0, |r| r.end)
        );
        for (i, node) in self.nodes.iter().enumerate() {
            assert_eq!(node.id.0 as usize, i);
        }
    }
}

/// The paper's heuristic: `D = round(log10 N)`, at least 1, then `F = ceil(N^(1/D))`.
pub fn heuristic_shape(gateways: u32) -> (u32, u32) {
    let n = gateways.max(1) as f64;
    let depth = (n.log10().round() as u32).clamp(1, DEPTH_MAX);
    (depth, fanout_for(depth, gateways))
}

/// The smallest fan-out (at least 1) whose `depth` layers hold `gateways`: `F^D >= gateways`.
pub fn fanout_for(depth: u32, gateways: u32) -> u32 {
    let n = gateways.max(1) as f64;
    let mut fanout = n.powf(1.0 / depth as f64).ceil() as u32;
    // Guard against floating-point error on exact powers (1000^(1/3) = 9.999...).
    while (fanout as u64).saturating_pow(depth) < gateways as u64 {
        fanout += 1;
    }
    while fanout > 1 && ((fanout - 1) as u64).saturating_pow(depth) >= gateways as u64 {
        fanout -= 1;
    }
    fanout.max(1)
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        // Without proxies (direct unicast) nothing hedges or sprays.
        let (hedge, rrps) = match self.proxies().len() {
            0 => ("-".to_string(), "-"),
            _ => (c.hedge.to_string(), if c.rrps { "on" } else { "off" }),
        };
        writeln!(
            f,
            "{} participants{}, <D,F> = <{},{}>, H = {hedge}, RRPS {rrps}, {} proxies",
            c.participants,
            if c.receiver_hedging {
                " x2 gateways (receiver hedging)"
            } else {
                ""
            },
            self.depth,
            self.fanout,
            self.proxies().len(),
        )?;
        for (layer, range) in self.layers.iter().enumerate() {
            let kind = match layer {
                0 => "root",
                l if l == self.depth as usize => "gateways",
                _ => "proxies",
            };
            let hedge = if layer < self.depth as usize {
                self.hedge_at(layer as u32)
            } else {
                0
            };
            let spot = self.nodes[range.start as usize..range.end as usize]
                .iter()
                .filter(|n| n.spot)
                .count();
            write!(
                f,
                "  layer {layer}: {:>6} {kind:<8} ids {:>6}..{:<6}",
                range.len(),
                range.start,
                range.end
            )?;
            if layer < self.depth as usize {
                // Counted, not (hedge + 1) x fanout: a layer's last block may be short, and
                // the nodes whose blocks include it send fewer (RRPS rotates which node sends
                // to which blocks, not the sizes of the blocks a node sends to together).
                let mut targets = Vec::new();
                let (mut least, mut most) = (usize::MAX, 0);
                for id in range.clone() {
                    targets.clear();
                    self.forward_targets(NodeId(id), 0, &mut targets);
                    least = least.min(targets.len());
                    most = most.max(targets.len());
                }
                debug_assert!(most <= ((hedge + 1) * self.fanout) as usize);
                if least == most {
                    write!(f, " each sends {most} copies per packet")?;
                } else {
                    write!(f, " each sends {least}-{most} copies per packet")?;
                }
            }
            if spot > 0 {
                write!(f, " ({spot} spot)")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the plan's summary says how many copies each layer's nodes send, counted: the
    /// root of N = 200 (`<2,15>`, 14 proxies) sends 14, not 15, and the proxies whose blocks
    /// include the last, short one (5 gateways) send 20 of the others' 30.
    #[test]
    fn the_summary_counts_each_layers_copies() {
        let text = Plan::new(&PlanConfig::new(200)).expect("plan").to_string();
        assert!(
            text.contains("root     ids      0..1      each sends 14 copies"),
            "{text}"
        );
        assert!(
            text.contains("each sends 20-30 copies per packet"),
            "{text}"
        );
    }

    fn plan(participants: u32, shape: Shape, hedge: u32) -> Plan {
        let config = PlanConfig {
            shape,
            hedge,
            ..PlanConfig::new(participants)
        };
        Plan::new(&config).unwrap()
    }

    /// Goal: a file that names only the participants gets the same plan as
    /// `PlanConfig::new` (the paper's default, H = 1), not a silent H = 0.
    #[test]
    fn a_file_with_only_participants_is_the_default_plan() {
        let parsed: PlanConfig = toml::from_str("participants = 40").unwrap();
        assert_eq!(parsed, PlanConfig::new(40));
        let explicit: PlanConfig = toml::from_str(
            "participants = 40\nhedge = 0\nshape = { kind = \"explicit\", depth = 2, fanout = 7 }",
        )
        .unwrap();
        assert_eq!(explicit.hedge, 0);
        assert_eq!(
            explicit.shape,
            Shape::Explicit {
                depth: 2,
                fanout: 7
            }
        );
    }

    #[test]
    fn heuristic_matches_design_examples() {
        assert_eq!(heuristic_shape(100), (2, 10));
        assert_eq!(heuristic_shape(200), (2, 15));
        assert_eq!(heuristic_shape(1000), (3, 10));
        assert_eq!(heuristic_shape(10), (1, 10));
        assert_eq!(heuristic_shape(1), (1, 1));
        // The least fan-out for a given depth: exact powers, one past them, none at all.
        assert_eq!(fanout_for(2, 64), 8);
        assert_eq!(fanout_for(2, 65), 9);
        assert_eq!(fanout_for(3, 1000), 10);
        assert_eq!(fanout_for(1, 37), 37);
        assert_eq!(fanout_for(4, 0), 1);
        let p = plan(100, Shape::Heuristic, 1);
        assert_eq!(p.proxies().len(), 10);
        let p = plan(200, Shape::Heuristic, 1);
        assert_eq!(p.proxies().len(), 14, "the paper's 14 proxies for N = 200");
        let p = plan(1000, Shape::Heuristic, 1);
        assert_eq!(p.proxies().len(), 110);
    }

    #[test]
    fn rejects_bad_shapes() {
        let bad = |shape| {
            Plan::new(&PlanConfig {
                shape,
                ..PlanConfig::new(100)
            })
            .unwrap_err()
        };
        assert_eq!(
            bad(Shape::Explicit {
                depth: 0,
                fanout: 10
            }),
            PlanError::Depth(0)
        );
        assert_eq!(
            bad(Shape::Explicit {
                depth: 2,
                fanout: 0
            }),
            PlanError::Fanout
        );
        assert!(matches!(
            bad(Shape::Explicit {
                depth: 2,
                fanout: 9
            }),
            PlanError::TooSmall { .. }
        ));
        // A fan-out no node could use (4e9 children would also size per-child tables).
        assert_eq!(
            bad(Shape::Explicit {
                depth: 2,
                fanout: 4_000_000_000
            }),
            PlanError::FanoutAboveGateways {
                fanout: 4_000_000_000,
                gateways: 100
            }
        );
        assert!(
            Plan::new(&PlanConfig {
                shape: Shape::Explicit {
                    depth: 1,
                    fanout: 100
                },
                ..PlanConfig::new(100)
            })
            .is_ok(),
            "direct unicast: the fan-out is every gateway"
        );
        assert_eq!(
            Plan::new(&PlanConfig::new(0)).unwrap_err(),
            PlanError::Participants(0)
        );
    }

    /// Goal: every child has exactly one primary parent per packet, and the primary parent of
    /// a child rotates with the packet number under RRPS (and stays put without it).
    #[test]
    fn rrps_rotates_one_primary_parent_per_child() {
        for rrps in [true, false] {
            let config = PlanConfig {
                rrps,
                hedge: 0,
                ..PlanConfig::new(1000)
            };
            let p = Plan::new(&config).unwrap();
            for layer in 0..p.depth() {
                let mut last_parent = vec![None; p.nodes().len()];
                for m in 0..25u64 {
                    let mut parents = vec![0u32; p.nodes().len()];
                    for sender in p.layer(layer) {
                        let mut out = Vec::new();
                        p.forward_targets(NodeId(sender), m, &mut out);
                        assert!(out.len() <= p.fanout() as usize);
                        for child in out {
                            parents[child.0 as usize] += 1;
                            let prev = last_parent[child.0 as usize].replace(sender);
                            let width = p.layer(layer).len();
                            if let Some(prev) = prev {
                                if rrps && width > 1 {
                                    assert_ne!(prev, sender, "RRPS moves the parent each packet");
                                } else {
                                    assert_eq!(prev, sender, "fixed tree keeps the parent");
                                }
                            }
                        }
                    }
                    for child in p.layer(layer + 1) {
                        assert_eq!(parents[child as usize], 1, "child {child} on packet {m}");
                    }
                }
            }
        }
    }

    /// Goal: with sibling hedging every node below layer 1 receives H + 1 copies from H + 1
    /// distinct parents.
    #[test]
    fn sibling_hedging_gives_h_plus_one_copies() {
        for hedge in 0..=3 {
            let p = plan(1000, Shape::Heuristic, hedge);
            for m in [0u64, 1, 7, 123] {
                let mut copies = vec![Vec::new(); p.nodes().len()];
                for sender in 0..p.gateways().start {
                    let mut out = Vec::new();
                    p.forward_targets(NodeId(sender), m, &mut out);
                    assert_eq!(
                        out.len() as u32,
                        (p.hedge_at(p.nodes()[sender as usize].layer) + 1) * p.fanout()
                    );
                    for child in out {
                        copies[child.0 as usize].push(sender);
                    }
                }
                for id in p.layer(2).start..p.gateways().end {
                    let c = &copies[id as usize];
                    assert_eq!(c.len() as u32, hedge + 1, "node {id} packet {m}");
                    let mut distinct = c.clone();
                    distinct.dedup();
                    assert_eq!(distinct.len(), c.len(), "copies come from distinct parents");
                }
            }
        }
    }

    #[test]
    fn home_tree_is_consistent() {
        let p = plan(1000, Shape::Heuristic, 2);
        for id in 1..p.nodes().len() as u32 {
            let parent = p.home_parent(NodeId(id)).unwrap();
            assert!(p.home_children(parent).contains(&id));
        }
        assert_eq!(p.home_parent(NodeId(0)), None);
    }

    #[test]
    fn participants_digest_tells_plans_apart() {
        let digest = |c: PlanConfig| Plan::new(&c).unwrap().participants_digest();
        let base = digest(PlanConfig::new(12));
        assert_eq!(
            base,
            digest(PlanConfig::new(12)),
            "the same plan, the same digest"
        );
        assert_eq!(
            base,
            digest(PlanConfig {
                hedge: 2,
                ..PlanConfig::new(12)
            }),
            "the hedging factor moves no gateway"
        );
        assert_ne!(base, digest(PlanConfig::new(13)));
        assert_ne!(
            base,
            digest(PlanConfig::unhedged(12, 2, 4)),
            "gateway ids moved"
        );
        assert_ne!(
            base,
            digest(PlanConfig {
                receiver_hedging: true,
                ..PlanConfig::new(12)
            })
        );
    }

    #[test]
    fn receiver_hedging_places_twins_under_different_parents() {
        let config = PlanConfig {
            receiver_hedging: true,
            ..PlanConfig::new(100)
        };
        let p = Plan::new(&config).unwrap();
        assert_eq!(p.gateways().len(), 200);
        for mp in 0..100 {
            let twins: Vec<_> = p.participant_gateways(mp).collect();
            assert_eq!(twins.len(), 2);
            assert_ne!(p.home_parent(twins[0]), p.home_parent(twins[1]));
            assert_eq!(p.node(twins[1]).unwrap().participant, Some(mp));
            assert_eq!(p.node(twins[0]).unwrap().name(), format!("g{mp}"));
            assert_eq!(p.node(twins[1]).unwrap().name(), format!("g{mp}b"));
        }
    }

    /// Goal: losing every spot VM still reaches every gateway when H >= 1 and the layers have
    /// an even width; losing them with H = 0 does not.
    #[test]
    fn spot_loss_survivable_with_hedging() {
        let config = PlanConfig {
            spot: SpotPolicy::EvenProxies,
            hedge: 1,
            ..PlanConfig::new(100)
        };
        let p = Plan::new(&config).unwrap();
        let spot = p.spot_proxies();
        assert_eq!(spot.len(), 5);
        assert!(p.reaches_all_without(&spot));
        let config = PlanConfig { hedge: 0, ..config };
        let p = Plan::new(&config).unwrap();
        assert!(!p.reaches_all_without(&p.spot_proxies()));
        assert!(p.reaches_all_without(&[]));
    }
}
