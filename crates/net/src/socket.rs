//! Non-blocking UDP sockets and batched I/O: one `recvmmsg` takes up to [`RECV_BATCH`]
//! datagrams, one `sendmmsg` sends a node's [`proto::Transmit`] to all of its destinations
//! (one `msghdr` per destination, all pointing at the same `iovec`).
//!
//! Sending never blocks and never panics. A full socket buffer (`EAGAIN`) stops a fan-out
//! where it is and says where ([`SendOutcome::blocked_at`]), so the caller can send the rest
//! once the buffer drains ([`Held`]); a full device queue (`ENOBUFS`) or any other error drops
//! the copies not yet sent. Every outcome is reported in a [`SendOutcome`], which the caller
//! counts. UDP may lose datagrams anyway; the protocol recovers (hedging, retransmission).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use proto::NodeId;

use crate::addr::{AddrBook, from_raw, zeroed_storage};
use crate::sys;

/// Datagrams one `recvmmsg` call returns at most.
pub const RECV_BATCH: usize = 32;
/// Receive buffer per datagram. Longer datagrams are truncated by the kernel, flagged, and
/// dropped by the runtime (Jasper's datagrams are at most [`proto::outbox::DATAGRAM_MAX`]).
pub const RECV_SLOT_LEN: usize = 2048;
/// Destinations one `sendmmsg` call takes at most; a larger fan-out takes several calls.
pub const SEND_BATCH: usize = 64;

const _: () = assert!(RECV_SLOT_LEN > proto::outbox::DATAGRAM_MAX);

/// Socket sizing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketOptions {
    /// `SO_RCVBUF` asked for, bytes (the kernel caps it at `net.core.rmem_max`).
    pub recv_buffer: usize,
    /// `SO_SNDBUF` asked for, bytes (capped at `net.core.wmem_max`).
    pub send_buffer: usize,
}

impl Default for SocketOptions {
    fn default() -> Self {
        Self {
            recv_buffer: 4 << 20,
            send_buffer: 1 << 20,
        }
    }
}

/// A bound, non-blocking UDP socket.
#[derive(Debug)]
pub struct Socket {
    inner: UdpSocket,
    local: SocketAddr,
    /// What the kernel granted for `SO_RCVBUF` and `SO_SNDBUF`.
    buffers: (usize, usize),
}

impl Socket {
    /// Binds `addr`, makes the socket non-blocking and sizes its buffers.
    pub fn bind(addr: SocketAddr, options: &SocketOptions) -> io::Result<Self> {
        let inner = UdpSocket::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("bind {addr}: {e}")))?;
        Self::from_std(inner, options)
    }

    /// Takes over an already bound socket.
    pub fn from_std(inner: UdpSocket, options: &SocketOptions) -> io::Result<Self> {
        inner.set_nonblocking(true)?;
        let recv = sys::set_socket_int(&inner, libc::SO_RCVBUF, options.recv_buffer)?;
        let send = sys::set_socket_int(&inner, libc::SO_SNDBUF, options.send_buffer)?;
        let local = inner.local_addr()?;
        Ok(Self {
            inner,
            local,
            buffers: (recv, send),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `SO_RCVBUF` and `SO_SNDBUF` as the kernel granted them (it doubles the request for
    /// its own bookkeeping).
    pub fn buffers(&self) -> (usize, usize) {
        self.buffers
    }

    /// The standard-library socket, e.g. for a plain `send_to` in tests.
    pub fn std(&self) -> &UdpSocket {
        &self.inner
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

/// One received datagram, borrowed from a [`RecvBatch`].
#[derive(Clone, Copy, Debug)]
pub struct Received<'a> {
    /// The source address (`None` for an address family other than IP).
    pub from: Option<SocketAddr>,
    /// The bytes, at most [`RECV_SLOT_LEN`].
    pub bytes: &'a [u8],
    /// The datagram was longer than [`RECV_SLOT_LEN`] and was cut.
    pub truncated: bool,
}

/// Buffers for one `recvmmsg` call, allocated once.
///
/// The `mmsghdr`s point into this struct's own heap buffers, which never move or grow, so a
/// batch may be moved freely; it is not `Send` (raw pointers), so build it on the thread
/// that uses it.
pub struct RecvBatch {
    buffers: Vec<u8>,
    names: Vec<libc::sockaddr_storage>,
    iovecs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    len: usize,
}

impl core::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvBatch").field("len", &self.len).finish()
    }
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Buffers for [`RECV_BATCH`] datagrams of up to [`RECV_SLOT_LEN`] bytes.
    pub fn new() -> Self {
        let mut batch = Self {
            buffers: vec![0; RECV_BATCH * RECV_SLOT_LEN],
            names: vec![zeroed_storage(); RECV_BATCH],
            iovecs: Vec::with_capacity(RECV_BATCH),
            msgs: Vec::with_capacity(RECV_BATCH),
            len: 0,
        };
        for i in 0..RECV_BATCH {
            let slot = &mut batch.buffers[i * RECV_SLOT_LEN..(i + 1) * RECV_SLOT_LEN];
            batch.iovecs.push(libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: RECV_SLOT_LEN,
            });
        }
        for i in 0..RECV_BATCH {
            batch.msgs.push(libc::mmsghdr {
                msg_hdr: libc::msghdr {
                    msg_name: (&mut batch.names[i] as *mut libc::sockaddr_storage).cast(),
                    msg_namelen: size_of::<libc::sockaddr_storage>() as libc::socklen_t,
                    msg_iov: &mut batch.iovecs[i],
                    msg_iovlen: 1,
                    msg_control: core::ptr::null_mut(),
                    msg_controllen: 0,
                    msg_flags: 0,
                },
                msg_len: 0,
            });
        }
        batch
    }

    /// Takes whatever datagrams are waiting on `socket`, up to [`RECV_BATCH`], without
    /// blocking; returns how many (0 when none is waiting).
    pub fn recv(&mut self, socket: &impl AsRawFd) -> io::Result<usize> {
        self.len = 0;
        for msg in &mut self.msgs {
            msg.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msg.msg_hdr.msg_flags = 0;
            msg.msg_len = 0;
        }
        // SAFETY: every mmsghdr points at its own sockaddr_storage and one iovec over a
        // RECV_SLOT_LEN slice of `buffers`, all owned by `self` and alive for the call; the
        // kernel writes at most msg_namelen and iov_len bytes there. A null timeout is
        // allowed.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                core::ptr::null_mut(),
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(error),
            };
        }
        self.len = n as usize;
        debug_assert!(self.len <= RECV_BATCH);
        Ok(self.len)
    }

    /// Datagrams of the last [`RecvBatch::recv`].
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the last [`RecvBatch::recv`] got nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Datagram `i` of the last [`RecvBatch::recv`].
    pub fn get(&self, i: usize) -> Received<'_> {
        assert!(i < self.len, "datagram {i} of a batch of {}", self.len);
        let msg = &self.msgs[i];
        let len = (msg.msg_len as usize).min(RECV_SLOT_LEN);
        Received {
            from: from_raw(&self.names[i], msg.msg_hdr.msg_namelen),
            bytes: &self.buffers[i * RECV_SLOT_LEN..i * RECV_SLOT_LEN + len],
            truncated: msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        }
    }
}

/// What became of one fan-out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendOutcome {
    /// Copies the kernel took.
    pub sent: usize,
    /// Copies not sent because the socket buffer was full (`EAGAIN`): the one refused and
    /// every later one with a route.
    pub would_block: usize,
    /// Copies dropped because the kernel was out of buffers (`ENOBUFS`).
    pub no_buffers: usize,
    /// Copies dropped for any other error.
    pub other_errors: usize,
    /// Destinations with no address in the book.
    pub no_route: usize,
    /// Where `EAGAIN` stopped the fan-out: the position in its destinations of the first copy
    /// not sent (the `would_block` copies are the routed ones from there on).
    pub blocked_at: Option<usize>,
}

impl SendOutcome {
    /// Copies that were not sent.
    pub fn failed(&self) -> usize {
        self.would_block + self.no_buffers + self.other_errors + self.no_route
    }
}

/// The rest of a fan-out the socket would not take (`EAGAIN`), to be sent before anything
/// else once its buffer drains. A node's burst larger than the send buffer (a durable root
/// releasing a long fsync's records, a leaf proxy's hedged fan-out) then waits instead of
/// being lost: a loss near the root is a loss at every gateway, each of which asks the root
/// for it again. The simulator's driver holds a node's datagrams the same way
/// (`sim::network::Network::unwritable_for_ns`).
#[derive(Debug, Default)]
pub struct Held {
    payload: Vec<u8>,
    destinations: Vec<NodeId>,
    /// Whether anything is held (the buffers keep their capacity when not).
    holding: bool,
}

impl Held {
    /// Whether copies are waiting.
    pub fn is_empty(&self) -> bool {
        !self.holding
    }

    /// Bytes of the held datagram (0 when none).
    pub fn payload_len(&self) -> usize {
        if self.holding { self.payload.len() } else { 0 }
    }

    /// If `outcome` (of sending `payload` to `destinations`) stopped at `EAGAIN`, keeps the
    /// copies it did not send (those with a route in `book`: the others were counted).
    pub fn keep(
        &mut self,
        payload: &[u8],
        destinations: &[NodeId],
        outcome: &SendOutcome,
        book: &AddrBook,
    ) {
        let Some(at) = outcome.blocked_at else {
            return;
        };
        self.payload.clear();
        self.payload.extend_from_slice(payload);
        self.destinations.clear();
        let routed = destinations[at..]
            .iter()
            .filter(|id| book.raw(**id).is_some());
        self.destinations.extend(routed);
        self.holding = true;
    }

    /// Sends the held copies again: returns the outcome (`None` when nothing was held), and
    /// holds on to those the socket still refuses.
    pub fn retry(
        &mut self,
        batch: &mut SendBatch,
        socket: &impl AsRawFd,
        book: &AddrBook,
    ) -> Option<SendOutcome> {
        if !self.holding {
            return None;
        }
        let outcome = batch.send(socket, &self.payload, book, &self.destinations);
        match outcome.blocked_at {
            Some(at) => {
                self.destinations.drain(..at);
            }
            None => self.holding = false,
        }
        Some(outcome)
    }
}

/// Headers for `sendmmsg`, allocated once. Not `Send` (raw pointers): build it on the thread
/// that uses it.
pub struct SendBatch {
    msgs: Vec<libc::mmsghdr>,
    /// The position in the fan-out's destinations of each header of a call.
    positions: Vec<usize>,
    /// The one iovec every header of a call points at; boxed so that it never moves.
    iov: Box<libc::iovec>,
}

impl core::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SendBatch").finish_non_exhaustive()
    }
}

impl Default for SendBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl SendBatch {
    /// Headers for [`SEND_BATCH`] destinations per call.
    pub fn new() -> Self {
        let mut iov = Box::new(libc::iovec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        });
        let iov_ptr: *mut libc::iovec = &mut *iov;
        let msgs = (0..SEND_BATCH)
            .map(|_| libc::mmsghdr {
                msg_hdr: libc::msghdr {
                    msg_name: core::ptr::null_mut(),
                    msg_namelen: 0,
                    msg_iov: iov_ptr,
                    msg_iovlen: 1,
                    msg_control: core::ptr::null_mut(),
                    msg_controllen: 0,
                    msg_flags: 0,
                },
                msg_len: 0,
            })
            .collect();
        Self {
            msgs,
            positions: vec![0; SEND_BATCH],
            iov,
        }
    }

    /// Sends `payload` to every destination in order: one `sendmmsg` per [`SEND_BATCH`]
    /// destinations (more only if the kernel takes part of a batch or refuses a copy).
    /// `EAGAIN` stops it: the copy it refused and every later one with a route count as
    /// `would_block`, and `blocked_at` says where they start. Any other error loses the one
    /// copy it was for (`no_buffers`, `other_errors`), and the fan-out goes on.
    pub fn send(
        &mut self,
        socket: &impl AsRawFd,
        payload: &[u8],
        book: &AddrBook,
        destinations: &[NodeId],
    ) -> SendOutcome {
        let mut outcome = SendOutcome::default();
        self.iov.iov_base = payload.as_ptr() as *mut libc::c_void;
        self.iov.iov_len = payload.len();
        let fd = socket.as_raw_fd();
        for (chunk_index, chunk) in destinations.chunks(SEND_BATCH).enumerate() {
            let base = chunk_index * SEND_BATCH;
            if outcome.blocked_at.is_some() {
                // Not tried: the socket is full.
                let routed = chunk.iter().filter(|id| book.raw(**id).is_some()).count();
                outcome.would_block += routed;
                outcome.no_route += chunk.len() - routed;
                continue;
            }
            let mut n = 0;
            for (offset, id) in chunk.iter().enumerate() {
                let Some(raw) = book.raw(*id) else {
                    outcome.no_route += 1;
                    continue;
                };
                let hdr = &mut self.msgs[n].msg_hdr;
                hdr.msg_name = (&raw.storage as *const libc::sockaddr_storage)
                    .cast_mut()
                    .cast();
                hdr.msg_namelen = raw.len;
                self.positions[n] = base + offset;
                n += 1;
            }
            self.send_headers(fd, n, &mut outcome);
        }
        debug_assert_eq!(outcome.sent + outcome.failed(), destinations.len());
        outcome
    }

    /// Sends the first `n` prepared headers, resuming after a partial send.
    fn send_headers(&mut self, fd: RawFd, n: usize, outcome: &mut SendOutcome) {
        let mut start = 0;
        while start < n {
            // SAFETY: headers `start..n` each point at a live sockaddr in the address book
            // (borrowed by the caller for this call) and at `self.iov`, which points at the
            // caller's payload slice, alive for this call; the kernel only reads them and
            // writes msg_len, inside `self.msgs`.
            let rc = unsafe {
                libc::sendmmsg(
                    fd,
                    self.msgs[start..n].as_mut_ptr(),
                    (n - start) as libc::c_uint,
                    0,
                )
            };
            if rc < 0 {
                // The call failed on its first message (an error on a later one ends the
                // call with the count sent before it, and the next call starts there).
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // The socket is full: this copy and the rest wait (`Held`).
                    Some(libc::EAGAIN) => {
                        outcome.would_block += n - start;
                        outcome.blocked_at = Some(self.positions[start]);
                        return;
                    }
                    // This copy is lost; the others go on (one destination the kernel
                    // refuses, unreachable or filtered, must not take its siblings' copies
                    // with it).
                    Some(libc::ENOBUFS) => outcome.no_buffers += 1,
                    _ => outcome.other_errors += 1,
                }
                start += 1;
                continue;
            }
            if rc == 0 {
                // sendmmsg sends at least one message or fails; never loop on a zero.
                outcome.other_errors += 1;
                start += 1;
                continue;
            }
            start += rc as usize;
            outcome.sent += rc as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, UdpSocket};
    use std::time::Duration;

    use proto::NodeId;

    use super::{SendBatch, Socket, SocketOptions};
    use crate::AddrBook;

    /// Goal: a destination the kernel refuses loses its own copy only; the destinations after
    /// it in the fan-out still get theirs. Method: a fan-out to three loopback receivers with
    /// the IPv4 broadcast address second (refused, `EACCES` without `SO_BROADCAST`, or
    /// unreachable where no route leads there); every receiver gets the datagram and the
    /// outcome counts one error.
    #[test]
    fn a_refused_destination_loses_only_its_own_copy() {
        let sender = Socket::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default())
            .expect("bind the sender");
        let receivers: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind a receiver"))
            .collect();
        let broadcast: SocketAddr = "255.255.255.255:9".parse().unwrap();
        let mut addrs = vec![sender.local_addr(), receivers[0].local_addr().unwrap()];
        addrs.push(broadcast);
        addrs.extend(receivers[1..].iter().map(|r| r.local_addr().unwrap()));
        let book = AddrBook::new(addrs);
        let destinations = [NodeId(1), NodeId(2), NodeId(3), NodeId(4)];
        let outcome = SendBatch::new().send(&sender, b"fan-out", &book, &destinations);
        assert_eq!(outcome.sent, 3, "{outcome:?}");
        assert_eq!(outcome.other_errors + outcome.no_buffers, 1, "{outcome:?}");
        assert_eq!(outcome.blocked_at, None);
        for receiver in &receivers {
            receiver
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = [0u8; 64];
            let (len, from) = receiver.recv_from(&mut buf).expect("its copy arrived");
            assert_eq!(&buf[..len], b"fan-out");
            assert_eq!(from, sender.local_addr());
        }
    }
}
