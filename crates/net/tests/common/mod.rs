//! What the runtime tests share.

use std::net::UdpSocket;
use std::sync::Arc;

use net::AddrBook;
use proto::plan::{Plan, PlanConfig};

/// A root, one proxy and one gateway (ids 0, 1, 2, no hedging) on `sockets`, in id order:
/// their address book and plan.
pub(crate) fn chain(sockets: &[UdpSocket]) -> (Arc<AddrBook>, Arc<Plan>) {
    assert_eq!(sockets.len(), 3, "root, proxy, gateway");
    let book = Arc::new(AddrBook::new(
        sockets.iter().map(|s| s.local_addr().unwrap()).collect(),
    ));
    let plan = Plan::new(&PlanConfig::unhedged(1, 2, 1)).unwrap();
    (book, Arc::new(plan))
}
