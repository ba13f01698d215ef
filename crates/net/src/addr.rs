//! The address book: the cluster plan's map between [`NodeId`]s and socket addresses.
//!
//! Nodes name each other by id; the runtime turns a destination id into a ready-made
//! `sockaddr` (indexed by id, no lookup on the send path) and a datagram's source address into
//! the sender's id (a binary search over the sorted table). A source that is not in the plan
//! has no id, and its datagrams are counted and dropped before any node sees them (issue 7:
//! "nodes accept datagrams only from addresses in the plan").
//!
//! A gateway of trust model 2 forwards released market data to its participant's own program
//! (the cluster config's `external` address): that address gets an id past the plan's, to
//! send to only. Datagrams from it are strangers' like any other.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use proto::NodeId;
use proto::cluster::ClusterConfig;

/// A socket address in the form the kernel takes it.
#[derive(Clone, Copy)]
pub(crate) struct RawAddr {
    pub(crate) storage: libc::sockaddr_storage,
    pub(crate) len: libc::socklen_t,
}

impl core::fmt::Debug for RawAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "RawAddr({:?})", from_raw(&self.storage, self.len))
    }
}

/// Every node's address, both ways.
#[derive(Clone, Debug)]
pub struct AddrBook {
    by_id: Vec<SocketAddr>,
    raw_by_id: Vec<RawAddr>,
    /// Sorted by address, for the source lookup (the plan's nodes only).
    by_addr: Vec<(SocketAddr, NodeId)>,
    /// Nodes of the plan (ids from here on are external addresses).
    nodes: usize,
    /// By gateway id: the id of its external address, if it forwards.
    external: Vec<Option<NodeId>>,
}

impl AddrBook {
    /// Node `i` is at `addrs[i]`. Addresses must be distinct.
    pub fn new(addrs: Vec<SocketAddr>) -> Self {
        let mut by_addr: Vec<(SocketAddr, NodeId)> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (*a, NodeId(i as u32)))
            .collect();
        by_addr.sort();
        assert!(
            by_addr.windows(2).all(|w| w[0].0 != w[1].0),
            "addresses in an address book are distinct"
        );
        let raw_by_id = addrs.iter().map(to_raw).collect();
        Self {
            nodes: addrs.len(),
            external: vec![None; addrs.len()],
            by_id: addrs,
            raw_by_id,
            by_addr,
        }
    }

    /// The addresses of a cluster config, by node id.
    pub fn from_cluster(config: &ClusterConfig) -> Self {
        debug_assert!(
            config
                .nodes
                .iter()
                .enumerate()
                .all(|(i, n)| n.id as usize == i)
        );
        let mut book = Self::new(config.nodes.iter().map(|n| n.addr).collect());
        for node in &config.nodes {
            if let Some(external) = node.external {
                book.external[node.id as usize] = Some(NodeId(book.by_id.len() as u32));
                book.by_id.push(external);
                book.raw_by_id.push(to_raw(&external));
            }
        }
        book
    }

    /// The id to send to for gateway `id`'s external address (trust model 2), if it has one.
    pub fn external(&self, id: NodeId) -> Option<NodeId> {
        self.external.get(id.0 as usize).copied().flatten()
    }

    /// The node at `addr`, if it is in the plan.
    pub fn id_of(&self, addr: &SocketAddr) -> Option<NodeId> {
        self.by_addr
            .binary_search_by(|(a, _)| a.cmp(addr))
            .ok()
            .map(|i| self.by_addr[i].1)
    }

    /// The address of node `id`.
    pub fn addr(&self, id: NodeId) -> Option<SocketAddr> {
        self.by_id.get(id.0 as usize).copied()
    }

    /// Number of nodes (of the plan: external addresses are not nodes).
    pub fn len(&self) -> usize {
        self.nodes
    }

    /// Whether the book has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes == 0
    }

    pub(crate) fn raw(&self, id: NodeId) -> Option<&RawAddr> {
        self.raw_by_id.get(id.0 as usize)
    }
}

/// `addr` as a kernel socket address.
pub(crate) fn to_raw(addr: &SocketAddr) -> RawAddr {
    // All-zero is a valid sockaddr_storage; the family-specific prefix is written below.
    let mut raw = RawAddr {
        storage: zeroed_storage(),
        len: 0,
    };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            write_prefix(&mut raw.storage, &sin);
            raw.len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            write_prefix(&mut raw.storage, &sin6);
            raw.len = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        }
    }
    raw
}

/// A kernel socket address as a Rust one (`None` for families other than IPv4 and IPv6).
pub(crate) fn from_raw(
    storage: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            let sin: libc::sockaddr_in = read_prefix(storage);
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            let sin6: libc::sockaddr_in6 = read_prefix(storage);
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The unspecified address of `addr`'s family, port 0.
pub fn unspecified_like(addr: &SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}

pub(crate) fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (AF_UNSPEC) value.
    unsafe { core::mem::zeroed() }
}

fn write_prefix<T: Copy>(storage: &mut libc::sockaddr_storage, value: &T) {
    const { assert!(size_of::<T>() <= size_of::<libc::sockaddr_storage>()) };
    // SAFETY: T is a sockaddr_* (plain old data) no larger than sockaddr_storage, which is
    // aligned for every socket address type; the write stays inside `storage`.
    unsafe { core::ptr::write((storage as *mut libc::sockaddr_storage).cast::<T>(), *value) };
}

fn read_prefix<T: Copy>(storage: &libc::sockaddr_storage) -> T {
    const { assert!(size_of::<T>() <= size_of::<libc::sockaddr_storage>()) };
    // SAFETY: as in `write_prefix`: T is plain old data that fits in, and is aligned by,
    // sockaddr_storage; any bit pattern is a valid T.
    unsafe { core::ptr::read((storage as *const libc::sockaddr_storage).cast::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_both_ways_and_rejects_strangers() {
        let addrs: Vec<SocketAddr> = ["127.0.0.1:5001", "127.0.0.1:5000", "[::1]:5000"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let book = AddrBook::new(addrs.clone());
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(book.id_of(a), Some(NodeId(i as u32)));
            assert_eq!(book.addr(NodeId(i as u32)), Some(*a));
            let raw = book.raw(NodeId(i as u32)).unwrap();
            assert_eq!(from_raw(&raw.storage, raw.len), Some(*a));
        }
        assert_eq!(book.id_of(&"127.0.0.1:5002".parse().unwrap()), None);
        assert_eq!(book.id_of(&"127.0.0.2:5000".parse().unwrap()), None);
        assert_eq!(book.addr(NodeId(3)), None);
        assert_eq!(book.len(), 3);
    }

    #[test]
    #[should_panic(expected = "distinct")]
    fn refuses_duplicate_addresses() {
        let a: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        AddrBook::new(vec![a, a]);
    }
}
