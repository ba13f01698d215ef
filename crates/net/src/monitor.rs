//! Release reports over UDP: gateways tell the operator's monitor (`jasper watch`) what they
//! released, so that latency and fairness across hosts can be watched live.
//!
//! [`Reporter`] batches a process's releases per gateway into [`wire::report`] datagrams and
//! sends each when it is full or its oldest record has waited `flush_after`; it never blocks
//! the event loop and never holds a node up: a report the kernel will not take now is counted
//! ([`Reporter::send_errors`]) and dropped, since the monitor only watches. [`Listener`] is the
//! monitor's socket.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use wire::Session;
use wire::report::{self, DATAGRAM_MAX, RECORDS_MAX, ReleaseRecord, Report};

use crate::addr::unspecified_like;

/// One gateway's releases not sent yet.
#[derive(Debug)]
struct Batch {
    /// Each release with its session, in release order.
    records: Vec<(Session, ReleaseRecord)>,
    /// When the oldest was added, ns of the caller's clock.
    since_ns: u64,
    /// The number of the gateway's next report.
    next_seq: u64,
}

/// The socket side of a [`Reporter`], apart from its batches so that both can be borrowed.
#[derive(Debug)]
struct Out {
    /// `sockets[0]` is bound to any address; the others each to one of the gateways' own.
    sockets: Vec<UdpSocket>,
    /// A gateway's socket, when it is not `sockets[0]`.
    socket_of: BTreeMap<u32, usize>,
    to: SocketAddr,
    buf: Vec<u8>,
    reports_sent: u64,
    records_sent: u64,
    send_errors: u64,
}

impl Out {
    /// Sends `batch` as reports of at most [`RECORDS_MAX`] releases of one session each, and
    /// empties it.
    fn send(&mut self, gateway: u32, batch: &mut Batch) {
        let mut rest = &batch.records[..];
        let mut records = Vec::with_capacity(RECORDS_MAX);
        while let Some(&(session, _)) = rest.first() {
            let run = rest
                .iter()
                .take(RECORDS_MAX)
                .take_while(|(s, _)| *s == session)
                .count();
            records.clear();
            records.extend(rest[..run].iter().map(|&(_, r)| r));
            rest = &rest[run..];
            let seq = batch.next_seq;
            batch.next_seq += 1;
            let len = report::emit(&mut self.buf, gateway, session, seq, &records)
                .expect("1 to RECORDS_MAX records, numbered from 1, fit the buffer");
            let socket = &self.sockets[self.socket_of.get(&gateway).copied().unwrap_or(0)];
            match socket.send_to(&self.buf[..len], self.to) {
                Ok(_) => {
                    self.reports_sent += 1;
                    self.records_sent += run as u64;
                }
                Err(_) => self.send_errors += 1,
            }
        }
        batch.records.clear();
    }
}

/// Sends release reports to one monitor.
///
/// [`Reporter::record`] only keeps a release; reports go when the caller asks
/// ([`Reporter::flush_due`], [`Reporter::flush`]), outside the moments the event loop hands
/// one packet's releases to its gateways one after another: a send between two of them would
/// delay the later gateways' releases, which is what DWS measures.
#[derive(Debug)]
pub struct Reporter {
    out: Out,
    flush_after_ns: u64,
    batches: BTreeMap<u32, Batch>,
}

impl Reporter {
    /// A reporter to the monitor at `to`. Each gateway of `gateways` (id, its address in
    /// the config) reports from an ephemeral port of its own address, since the monitor
    /// takes a gateway's reports from its host's address only; one whose address cannot
    /// reach `to` (another family, loopback to a remote monitor) or cannot be bound here,
    /// and any other gateway, from any address the kernel picks. [`Reporter::flush_due`]
    /// sends a gateway's releases once its oldest has waited `flush_after` (as the
    /// caller's clock reads it) or it has a report's worth.
    pub fn new(
        to: SocketAddr,
        gateways: &[(u32, SocketAddr)],
        flush_after: Duration,
    ) -> io::Result<Self> {
        let any = UdpSocket::bind(unspecified_like(&to))?;
        any.set_nonblocking(true)?;
        let mut sockets = vec![any];
        // Per address: its socket's index, or `None` where binding it failed once (the
        // gateways there send from `any`).
        let mut bound: BTreeMap<IpAddr, Option<usize>> = BTreeMap::new();
        let mut socket_of = BTreeMap::new();
        let reaches = |ip: IpAddr| {
            ip.is_ipv4() == to.is_ipv4() && (to.ip().is_loopback() || !ip.is_loopback())
        };
        for &(gateway, mut addr) in gateways.iter().filter(|(_, a)| reaches(a.ip())) {
            let index = match bound.get(&addr.ip()) {
                Some(&Some(index)) => index,
                Some(None) => continue,
                None => {
                    // The address with its scope (an IPv6 link-local one needs it), any port.
                    addr.set_port(0);
                    let Some(socket) = UdpSocket::bind(addr)
                        .and_then(|s| s.set_nonblocking(true).map(|()| s))
                        .ok()
                    else {
                        bound.insert(addr.ip(), None);
                        continue;
                    };
                    sockets.push(socket);
                    bound.insert(addr.ip(), Some(sockets.len() - 1));
                    sockets.len() - 1
                }
            };
            socket_of.insert(gateway, index);
        }
        Ok(Self {
            out: Out {
                sockets,
                socket_of,
                to,
                buf: vec![0; DATAGRAM_MAX],
                reports_sent: 0,
                records_sent: 0,
                send_errors: 0,
            },
            flush_after_ns: u64::try_from(flush_after.as_nanos()).unwrap_or(u64::MAX),
            batches: BTreeMap::new(),
        })
    }

    /// The monitor's address.
    pub fn to(&self) -> SocketAddr {
        self.out.to
    }

    /// Reports sent.
    pub fn reports_sent(&self) -> u64 {
        self.out.reports_sent
    }

    /// Records in the reports sent.
    pub fn records_sent(&self) -> u64 {
        self.out.records_sent
    }

    /// Reports the socket refused (the kernel's buffer full, or the monitor's host
    /// unreachable), dropped: the monitor only watches, and a node never waits for it. The
    /// monitor sees the gap in the reports' numbers.
    pub fn send_errors(&self) -> u64 {
        self.out.send_errors
    }

    /// `gateway` released `record` of `session`; `now_ns` is asked only when the record
    /// starts a batch (a clock read per batch, not per release). Nothing is sent here.
    pub fn record(
        &mut self,
        gateway: u32,
        session: Session,
        record: ReleaseRecord,
        now_ns: impl FnOnce() -> u64,
    ) {
        let batch = self.batches.entry(gateway).or_insert_with(|| Batch {
            records: Vec::with_capacity(RECORDS_MAX),
            since_ns: 0,
            next_seq: 1,
        });
        if batch.records.is_empty() {
            batch.since_ns = now_ns();
        }
        batch.records.push((session, record));
    }

    /// Sends the releases of every gateway that has a report's worth, or whose oldest has
    /// waited `flush_after` by `now_ns`.
    pub fn flush_due(&mut self, now_ns: u64) {
        let wait = self.flush_after_ns;
        self.flush_where(|batch| {
            batch.records.len() >= RECORDS_MAX || now_ns.saturating_sub(batch.since_ns) >= wait
        });
    }

    /// Sends every release kept (at exit).
    pub fn flush(&mut self) {
        self.flush_where(|_| true);
    }

    fn flush_where(&mut self, due: impl Fn(&Batch) -> bool) {
        for (&gateway, batch) in &mut self.batches {
            if !batch.records.is_empty() && due(batch) {
                self.out.send(gateway, batch);
            }
        }
    }
}

/// What [`Listener::recv`] got.
#[derive(Debug)]
pub enum Received<'a> {
    /// Nothing within the timeout.
    Nothing,
    /// A report, checked.
    Report(SocketAddr, Report<'a>),
    /// A datagram that is not a report (counted by the caller, dropped).
    Malformed(SocketAddr, wire::Error),
}

/// `SO_RCVBUF` the monitor asks for, bytes (the kernel caps it at `net.core.rmem_max`).
pub const LISTENER_RECV_BUFFER: usize = 16 << 20;

/// The monitor's socket.
#[derive(Debug)]
pub struct Listener {
    socket: UdpSocket,
    buf: Vec<u8>,
    /// What the kernel granted for `SO_RCVBUF`.
    recv_buffer: usize,
    /// The read timeout set last (set again only when it changes: a system call).
    timeout: Option<Duration>,
}

impl Listener {
    /// Binds `addr` (port 0: any free port, see [`Listener::local_addr`]), with a receive
    /// buffer of [`LISTENER_RECV_BUFFER`] asked for, so that the reports of a whole tree
    /// arriving together wait rather than overflow.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        let recv_buffer =
            crate::sys::set_socket_int(&socket, libc::SO_RCVBUF, LISTENER_RECV_BUFFER)?;
        Ok(Self {
            socket,
            // Larger than any report, so that a longer datagram shows as one, not cut to fit.
            buf: vec![0; 2 * DATAGRAM_MAX],
            recv_buffer,
            timeout: None,
        })
    }

    /// The receive buffer the kernel granted, bytes (it caps [`LISTENER_RECV_BUFFER`] at
    /// `net.core.rmem_max`; reports beyond it are dropped by the kernel, and the monitor sees
    /// the gaps in their numbers).
    pub fn recv_buffer(&self) -> usize {
        self.recv_buffer
    }

    /// The address bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Waits up to `timeout` (at least a microsecond) for one datagram.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Received<'_>> {
        let timeout = Some(timeout.max(Duration::from_micros(1)));
        if self.timeout != timeout {
            self.socket.set_read_timeout(timeout)?;
            self.timeout = timeout;
        }
        let (len, from) = match self.socket.recv_from(&mut self.buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(Received::Nothing);
            }
            Err(e) => return Err(e),
        };
        Ok(match Report::parse(&self.buf[..len]) {
            Ok(report) => Received::Report(from, report),
            Err(e) => Received::Malformed(from, e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ExchangeTime;

    fn record(packet_seq: u64) -> ReleaseRecord {
        ReleaseRecord {
            packet_seq,
            sequence: packet_seq * 2,
            messages: 1,
            late: false,
            recovered: false,
            send_time: ExchangeTime(packet_seq * 1_000),
            received: ExchangeTime(packet_seq * 1_000 + 50_000),
            released: ExchangeTime(packet_seq * 1_000 + 150_000),
        }
    }

    /// The next report: (gateway, session, number, packets).
    fn next(listener: &mut Listener, wait_ms: u64) -> Option<(u32, Session, u64, Vec<u64>)> {
        match listener.recv(Duration::from_millis(wait_ms)).unwrap() {
            Received::Report(_, r) => Some((
                r.gateway,
                r.session,
                r.seq,
                r.records().map(|r| r.packet_seq).collect(),
            )),
            Received::Nothing => None,
            Received::Malformed(_, e) => panic!("{e}"),
        }
    }

    /// Goal: each gateway reports from its own address (the watch takes a gateway's
    /// reports from there only), including two gateways of one process on two addresses;
    /// one whose address is not this host's, or of another family, from any address.
    #[test]
    fn each_gateway_reports_from_its_own_address() {
        let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = listener.local_addr().unwrap();
        let gateways = [
            (5, "127.0.0.2:9000".parse().unwrap()),
            (6, "127.0.0.1:9001".parse().unwrap()),
            // Not an address of this host: bound to nothing, it falls back.
            (7, "192.0.2.1:9000".parse().unwrap()),
            (8, "[::1]:9000".parse().unwrap()),
            // The same address again: not tried a second time.
            (10, "192.0.2.1:9001".parse().unwrap()),
        ];
        let mut reporter = Reporter::new(to, &gateways, Duration::from_millis(10)).unwrap();
        // The fallback, 127.0.0.2 and 127.0.0.1.
        assert_eq!(reporter.out.sockets.len(), 3);
        let a = Session::new("A").unwrap();
        for gateway in [5, 6, 7, 8, 9, 10] {
            reporter.record(gateway, a, record(1), || 0);
        }
        reporter.flush();
        let mut sources = BTreeMap::new();
        for _ in 0..6 {
            match listener.recv(Duration::from_millis(200)).unwrap() {
                Received::Report(from, r) => sources.insert(r.gateway, from.ip()),
                other => panic!("{other:?}"),
            };
        }
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert_eq!(sources[&5], ip("127.0.0.2"));
        assert_eq!(sources[&6], ip("127.0.0.1"));
        // The kernel's pick for a loopback monitor.
        for gateway in [7, 8, 9, 10] {
            assert_eq!(sources[&gateway], ip("127.0.0.1"), "gateway {gateway}");
        }
        assert_eq!(reporter.send_errors(), 0);
    }

    #[test]
    fn releases_go_when_asked_a_report_per_session_and_28_at_most() {
        let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = listener.local_addr().unwrap();
        let mut reporter = Reporter::new(to, &[], Duration::from_millis(10)).unwrap();
        let a = Session::new("A").unwrap();
        let b = Session::new("B").unwrap();
        let ms = 1_000_000;

        // Recording sends nothing, even past a report's worth.
        // The clock is read once, for the record that starts the batch.
        let mut reads = 0;
        for seq in 1..=30 {
            reporter.record(5, a, record(seq), || {
                reads += 1;
                ms
            });
        }
        assert_eq!(reads, 1);
        reporter.record(6, a, record(1), || 100 * ms);
        assert_eq!(next(&mut listener, 20), None);
        // Gateway 5 has a report's worth: 28, then 2, numbered 1 and 2; gateway 6 waits.
        reporter.flush_due(105 * ms);
        assert_eq!(
            next(&mut listener, 200),
            Some((5, a, 1, (1..=28).collect()))
        );
        assert_eq!(next(&mut listener, 200), Some((5, a, 2, vec![29, 30])));
        assert_eq!(next(&mut listener, 20), None, "gateway 6 not due yet");
        reporter.flush_due(110 * ms);
        assert_eq!(next(&mut listener, 200), Some((6, a, 1, vec![1])));

        // A new session starts a new report.
        reporter.record(6, a, record(2), || 200 * ms);
        reporter.record(6, b, record(1), || {
            unreachable!("not the first of its batch")
        });
        reporter.flush();
        assert_eq!(next(&mut listener, 200), Some((6, a, 2, vec![2])));
        assert_eq!(next(&mut listener, 200), Some((6, b, 3, vec![1])));
        assert_eq!(reporter.reports_sent(), 5);
        assert_eq!(reporter.records_sent(), 33);
        assert_eq!(reporter.send_errors(), 0);
    }

    #[test]
    fn anything_else_is_malformed_not_a_panic() {
        let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = listener.local_addr().unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        for bytes in [
            &b"hello"[..],
            &[0xFB; 3000][..],
            &[0xFB, 1, 0, 1, 0, 0, 0, 0][..],
        ] {
            socket.send_to(bytes, to).unwrap();
            assert!(
                matches!(
                    listener.recv(Duration::from_millis(200)).unwrap(),
                    Received::Malformed(..)
                ),
                "{:?}",
                &bytes[..bytes.len().min(8)]
            );
        }
    }
}
