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
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use wire::Session;
use wire::report::{self, DATAGRAM_MAX, RECORDS_MAX, ReleaseRecord, Report};

use crate::addr::unspecified_like;

/// One gateway's releases not sent yet.
#[derive(Debug)]
struct Batch {
    session: Session,
    records: Vec<ReleaseRecord>,
    /// When the oldest record was added, ns of the caller's clock.
    since_ns: u64,
}

/// The socket side of a [`Reporter`], apart from its batches so that both can be borrowed.
#[derive(Debug)]
struct Out {
    socket: UdpSocket,
    to: SocketAddr,
    buf: Vec<u8>,
    reports_sent: u64,
    records_sent: u64,
    send_errors: u64,
}

impl Out {
    /// Sends `batch` as one report and empties it.
    fn send(&mut self, gateway: u32, batch: &mut Batch) {
        let len = report::emit(&mut self.buf, gateway, batch.session, &batch.records)
            .expect("a batch holds 1 to RECORDS_MAX records and the buffer fits them");
        match self.socket.send_to(&self.buf[..len], self.to) {
            Ok(_) => {
                self.reports_sent += 1;
                self.records_sent += batch.records.len() as u64;
            }
            Err(_) => self.send_errors += 1,
        }
        batch.records.clear();
    }
}

/// Sends release reports to one monitor.
#[derive(Debug)]
pub struct Reporter {
    out: Out,
    flush_after_ns: u64,
    batches: BTreeMap<u32, Batch>,
}

impl Reporter {
    /// A reporter to the monitor at `to`, from an ephemeral port of the same address family;
    /// a record waits at most `flush_after` (as the caller's clock reads it) before its report
    /// goes.
    pub fn new(to: SocketAddr, flush_after: Duration) -> io::Result<Self> {
        let socket = UdpSocket::bind(unspecified_like(&to))?;
        socket.set_nonblocking(true)?;
        Ok(Self {
            out: Out {
                socket,
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
    /// unreachable), dropped: the monitor only watches, and a node never waits for it.
    pub fn send_errors(&self) -> u64 {
        self.out.send_errors
    }

    /// `gateway` released `record` of `session` at `now_ns`; sends its report if that fills
    /// it, or if its oldest record has waited long enough. A record of another session than
    /// the batch's sends the batch first.
    pub fn record(&mut self, gateway: u32, session: Session, record: ReleaseRecord, now_ns: u64) {
        let batch = self.batches.entry(gateway).or_insert_with(|| Batch {
            session,
            records: Vec::with_capacity(RECORDS_MAX),
            since_ns: now_ns,
        });
        if batch.session != session && !batch.records.is_empty() {
            self.out.send(gateway, batch);
        }
        if batch.records.is_empty() {
            batch.session = session;
            batch.since_ns = now_ns;
        }
        batch.records.push(record);
        if batch.records.len() >= RECORDS_MAX
            || now_ns.saturating_sub(batch.since_ns) >= self.flush_after_ns
        {
            self.out.send(gateway, batch);
        }
    }

    /// Sends every batch whose oldest record has waited `flush_after` by `now_ns`.
    pub fn flush_due(&mut self, now_ns: u64) {
        let wait = self.flush_after_ns;
        self.flush_where(|batch| now_ns.saturating_sub(batch.since_ns) >= wait);
    }

    /// Sends every batch (at exit).
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
}

impl Listener {
    /// Binds `addr` (port 0: any free port, see [`Listener::local_addr`]), with a receive
    /// buffer of [`LISTENER_RECV_BUFFER`] asked for, so that the reports of a whole tree
    /// arriving together wait rather than overflow.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        crate::sys::set_socket_int(&socket, libc::SO_RCVBUF, LISTENER_RECV_BUFFER)?;
        Ok(Self {
            socket,
            // Larger than any report, so that a longer datagram shows as one, not cut to fit.
            buf: vec![0; 2 * DATAGRAM_MAX],
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Waits up to `timeout` (at least a microsecond) for one datagram.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Received<'_>> {
        self.socket
            .set_read_timeout(Some(timeout.max(Duration::from_micros(1))))?;
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

    fn next(listener: &mut Listener) -> Option<(u32, Session, Vec<u64>)> {
        match listener.recv(Duration::from_millis(200)).unwrap() {
            Received::Report(_, r) => Some((
                r.gateway,
                r.session,
                r.records().map(|r| r.packet_seq).collect(),
            )),
            Received::Nothing => None,
            Received::Malformed(_, e) => panic!("{e}"),
        }
    }

    #[test]
    fn batches_go_when_full_when_old_or_on_a_new_session() {
        let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = listener.local_addr().unwrap();
        let mut reporter = Reporter::new(to, Duration::from_millis(10)).unwrap();
        let a = Session::new("A").unwrap();
        let b = Session::new("B").unwrap();
        let ms = 1_000_000;

        // Full: 28 records of gateway 5 go at once.
        for seq in 1..=RECORDS_MAX as u64 {
            reporter.record(5, a, record(seq), seq);
        }
        let full: Vec<u64> = (1..=RECORDS_MAX as u64).collect();
        assert_eq!(next(&mut listener), Some((5, a, full)));

        // Old: gateway 6's first record waits; the one 10 ms later sends both.
        reporter.record(6, a, record(1), 100 * ms);
        reporter.record(6, a, record(2), 105 * ms);
        assert_eq!(next_now(&mut listener), None);
        reporter.record(6, a, record(3), 110 * ms);
        assert_eq!(next(&mut listener), Some((6, a, vec![1, 2, 3])));

        // A new session sends the old one's batch first.
        reporter.record(6, a, record(4), 200 * ms);
        reporter.record(6, b, record(1), 201 * ms);
        assert_eq!(next(&mut listener), Some((6, a, vec![4])));
        reporter.flush_due(205 * ms);
        assert_eq!(next_now(&mut listener), None, "not due yet");
        reporter.flush_due(211 * ms);
        assert_eq!(next(&mut listener), Some((6, b, vec![1])));

        // At exit, whatever is left.
        reporter.record(7, b, record(9), 300 * ms);
        reporter.flush();
        assert_eq!(next(&mut listener), Some((7, b, vec![9])));
        assert_eq!(reporter.reports_sent(), 5);
        assert_eq!(reporter.records_sent(), RECORDS_MAX as u64 + 6);
        assert_eq!(reporter.send_errors(), 0);
    }

    fn next_now(listener: &mut Listener) -> Option<(u32, Session, Vec<u64>)> {
        match listener.recv(Duration::from_millis(20)).unwrap() {
            Received::Report(_, r) => Some((
                r.gateway,
                r.session,
                r.records().map(|r| r.packet_seq).collect(),
            )),
            _ => None,
        }
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
