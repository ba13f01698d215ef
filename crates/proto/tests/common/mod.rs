//! An in-memory harness for a handful of nodes (quinn-proto's `Pair`, scaled to a tree):
//! hand-set per-link delays, per-node clock offset and drift, dead nodes and dropped
//! packets, all deterministic. It drives the unchanged nodes exactly as the simulator and
//! the runtime do: deliver one input, then drain `poll_transmit`, `poll_timeout` and
//! `poll_event`.

#![allow(dead_code, unreachable_pub)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use proto::plan::{Plan, PlanConfig, Role};
use proto::{Delivery, Event, Gateway, Instant, Node, NodeConfig, NodeId, Proxy, Release, Root};

/// A node's local clock: `local = true · (1 + drift) + offset`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clock {
    pub offset_ns: i64,
    pub drift: f64,
}

impl Clock {
    pub fn local(&self, true_ns: u64) -> Instant {
        let local = true_ns as f64 * (1.0 + self.drift) + self.offset_ns as f64;
        Instant::from_nanos(local.max(0.0) as u64)
    }

    pub fn true_time(&self, local: Instant) -> u64 {
        ((local.as_nanos() as f64 - self.offset_ns as f64) / (1.0 + self.drift))
            .ceil()
            .max(0.0) as u64
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Input {
    Deliver { to: u32, from: u32, bytes: Vec<u8> },
    Timer { node: u32, generation: u64 },
}

/// A released packet as the harness saw it.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub node: NodeId,
    pub true_ns: u64,
    pub release: Release,
}

pub struct Harness {
    pub plan: Arc<Plan>,
    pub root: Root,
    /// Every node but the root (index 0 holds nothing and is never used).
    pub nodes: Vec<Option<Box<dyn Node>>>,
    pub clocks: Vec<Clock>,
    pub now_ns: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Input)>>,
    inserted: u64,
    timer_generation: Vec<u64>,
    /// One-way delay of a datagram from `from` to `to`, or `None` to drop it.
    #[allow(clippy::type_complexity)]
    pub link: Box<dyn FnMut(NodeId, NodeId, &[u8]) -> Option<u64>>,
    pub dead: Vec<bool>,
    pub released: Vec<Seen>,
    pub events: Vec<(NodeId, u64, Event)>,
    /// Market-data deliveries: (packet_seq, from, to).
    pub deliveries: Vec<(u64, NodeId, NodeId)>,
}

impl Harness {
    pub fn new(plan_config: &PlanConfig, config: NodeConfig) -> Self {
        Self::with_delivery(plan_config, config, |_| Delivery::Events)
    }

    /// A harness whose gateways deliver released data as `delivery` says (e.g. to a
    /// strategy).
    pub fn with_delivery(
        plan_config: &PlanConfig,
        config: NodeConfig,
        mut delivery: impl FnMut(&proto::plan::NodeSpec) -> Delivery,
    ) -> Self {
        let plan = Arc::new(Plan::new(plan_config).unwrap());
        let root = Root::new(plan.clone(), config.clone()).unwrap();
        let mut nodes: Vec<Option<Box<dyn Node>>> = Vec::new();
        for spec in plan.nodes() {
            let node: Option<Box<dyn Node>> = match spec.role {
                Role::Root => None,
                Role::Proxy => Some(Box::new(
                    Proxy::new(spec.id, plan.clone(), config.clone()).unwrap(),
                )),
                Role::Gateway => Some(Box::new(
                    Gateway::new(spec.id, plan.clone(), config.clone(), delivery(spec)).unwrap(),
                )),
            };
            nodes.push(node);
        }
        let n = nodes.len();
        Self {
            plan,
            root,
            nodes,
            clocks: vec![Clock::default(); n],
            now_ns: 1_000_000_000,
            queue: BinaryHeap::new(),
            inserted: 0,
            timer_generation: vec![0; n],
            link: Box::new(|_, _, _| Some(20_000)),
            dead: vec![false; n],
            released: Vec::new(),
            events: Vec::new(),
            deliveries: Vec::new(),
        }
    }

    pub fn node(&mut self, id: u32) -> &mut dyn Node {
        match self.nodes[id as usize].as_mut() {
            Some(node) => node.as_mut(),
            None => &mut self.root,
        }
    }

    fn push(&mut self, at: u64, input: Input) {
        self.inserted += 1;
        self.queue.push(Reverse((at, self.inserted, input)));
    }

    /// Starts every node (its first timeout) at the current time.
    pub fn start(&mut self) {
        for id in 0..self.nodes.len() as u32 {
            self.drain(id);
        }
    }

    /// Runs the root's `publish` of `messages` now.
    pub fn publish(&mut self, messages: &[wire::Raw<'_>]) {
        let local = self.clocks[0].local(self.now_ns);
        self.root.publish(local, messages);
        self.drain(0);
    }

    /// Runs until `until_ns` (true time).
    pub fn run_until(&mut self, until_ns: u64) {
        while let Some(Reverse((at, _, _))) = self.queue.peek() {
            if *at > until_ns {
                break;
            }
            let Reverse((at, _, input)) = self.queue.pop().unwrap();
            self.now_ns = self.now_ns.max(at);
            match input {
                Input::Deliver { to, from, bytes } => {
                    if self.dead[to as usize] {
                        continue;
                    }
                    let local = self.clocks[to as usize].local(self.now_ns);
                    self.node(to).handle_datagram(local, NodeId(from), &bytes);
                    self.drain(to);
                }
                Input::Timer { node, generation } => {
                    if self.dead[node as usize]
                        || generation != self.timer_generation[node as usize]
                    {
                        continue;
                    }
                    let local = self.clocks[node as usize].local(self.now_ns);
                    self.node(node).handle_timeout(local);
                    self.drain(node);
                }
            }
        }
        self.now_ns = self.now_ns.max(until_ns);
    }

    fn drain(&mut self, id: u32) {
        let local = self.clocks[id as usize].local(self.now_ns);
        let mut sends = Vec::new();
        while let Some(t) = self.node(id).poll_transmit(local) {
            sends.push((t.destinations.to_vec(), t.payload.to_vec()));
        }
        for (destinations, payload) in sends {
            let packet_seq = wire::parse_market_data(&payload)
                .ok()
                .map(|d| d.header.packet_seq);
            for to in destinations {
                if let Some(seq) = packet_seq {
                    self.deliveries.push((seq, NodeId(id), to));
                }
                if let Some(delay) = (self.link)(NodeId(id), to, &payload) {
                    let at = self.now_ns + delay;
                    self.push(
                        at,
                        Input::Deliver {
                            to: to.0,
                            from: id,
                            bytes: payload.clone(),
                        },
                    );
                }
            }
        }
        self.timer_generation[id as usize] += 1;
        if let Some(at) = self.node(id).poll_timeout() {
            let true_at = self.clocks[id as usize].true_time(at).max(self.now_ns);
            let generation = self.timer_generation[id as usize];
            self.push(
                true_at,
                Input::Timer {
                    node: id,
                    generation,
                },
            );
        }
        while let Some(event) = self.node(id).poll_event() {
            if let Event::Released(release) = event {
                self.released.push(Seen {
                    node: NodeId(id),
                    true_ns: self.now_ns,
                    release,
                });
            }
            self.events.push((NodeId(id), self.now_ns, event));
        }
        self.node(id).check_invariants();
    }

    /// Replaces node `id` (not the root) by `node`, started now: a process started again.
    pub fn replace(&mut self, id: NodeId, node: Box<dyn Node>) {
        self.nodes[id.0 as usize] = Some(node);
        self.drain(id.0);
    }

    /// Replaces the root by `root`, started now (a root process started again), alive.
    pub fn replace_root(&mut self, root: Root) {
        self.root = root;
        self.dead[0] = false;
        self.drain(0);
    }

    pub fn gateways(&self) -> Vec<NodeId> {
        self.plan.gateways().map(NodeId).collect()
    }
}
