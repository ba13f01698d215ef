//! A cluster config made ready to run: the plan, the address book, and constructors that
//! bind each node's socket to its plan address with its injected clock.

use std::io;
use std::sync::Arc;

use proto::cluster::{ClusterConfig, ClusterError, NodeEntry};
use proto::plan::{Plan, Role as PlanRole};
use proto::{Delivery, Gateway, NodeId, Proxy, Root};

use crate::addr::AddrBook;
use crate::clock::NodeClock;
use crate::host::{Hook, Host, Role};
use crate::socket::{Socket, SocketOptions};

/// A validated cluster config, its plan and its address book.
#[derive(Clone, Debug)]
pub struct Deployment {
    config: ClusterConfig,
    plan: Arc<Plan>,
    book: Arc<AddrBook>,
}

impl Deployment {
    /// Parses and validates a cluster config (the TOML `jasper plan` writes).
    pub fn from_toml(text: &str) -> Result<Self, ClusterError> {
        let (config, plan) = ClusterConfig::from_toml(text)?;
        Ok(Self::new(config, plan))
    }

    /// A deployment of `config`, whose plan is `plan` (from [`ClusterConfig::validate`]).
    pub fn new(config: ClusterConfig, plan: Plan) -> Self {
        assert_eq!(config.nodes.len(), plan.nodes().len());
        let book = Arc::new(AddrBook::from_cluster(&config));
        Self {
            config,
            plan: Arc::new(plan),
            book,
        }
    }

    /// The config.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The plan.
    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// The address book.
    pub fn book(&self) -> &Arc<AddrBook> {
        &self.book
    }

    /// The node called `name` (or with that numeric id).
    pub fn find(&self, name: &str) -> Option<&NodeEntry> {
        self.config.find(name)
    }

    /// Node `id`'s entry.
    pub fn entry(&self, id: NodeId) -> Option<&NodeEntry> {
        self.config.nodes.get(id.0 as usize)
    }

    /// Node `id`'s injected clock error.
    pub fn clock_of(&self, id: NodeId) -> NodeClock {
        self.entry(id).map_or_else(NodeClock::default, |e| {
            NodeClock::new(e.clock_offset_ns, e.clock_drift_ppb)
        })
    }

    /// The root node.
    pub fn root(&self) -> Result<Root, String> {
        Root::new(self.plan.clone(), self.config.node.clone())
    }

    /// Proxy `id`.
    pub fn proxy(&self, id: NodeId) -> Result<Proxy, String> {
        Proxy::new(id, self.plan.clone(), self.config.node.clone())
    }

    /// Gateway `id`, delivering released market data to `delivery`.
    pub fn gateway(&self, id: NodeId, delivery: Delivery) -> Result<Gateway, String> {
        Gateway::new(id, self.plan.clone(), self.config.node.clone(), delivery)
    }

    /// The plan's role of node `id`.
    pub fn role(&self, id: NodeId) -> Option<PlanRole> {
        self.plan.node(id).map(|n| n.role)
    }

    /// Binds `node`'s plan address and wraps it in a host with its injected clock.
    pub fn bind<N: Role, H: Hook<N>>(
        &self,
        node: N,
        hook: H,
        options: &SocketOptions,
    ) -> io::Result<Host<N, H>> {
        let id = node.id();
        let entry = self.entry(id).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("node {} is not in the cluster config", id.0),
            )
        })?;
        let socket = Socket::bind(entry.addr, options)?;
        Ok(Host::new(
            node,
            hook,
            entry.name.clone(),
            socket,
            self.clock_of(id),
            self.book.clone(),
        ))
    }
}
