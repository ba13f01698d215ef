//! Release reports: what gateways tell the operator's monitor (`jasper watch`) about every
//! packet they release, so that latency and fairness across the whole deployment can be
//! watched live (DESIGN.md §5: OML and DWS need every gateway's release of a packet, which no
//! one gateway knows).
//!
//! A report carries up to [`RECORDS_MAX`] releases of one gateway in one session, in release
//! order. Times are the gateway's exchange time (its clock synced to the root's), the only
//! clock a deployment shares. Reports go to the monitor's own address, never to a node: a node
//! that got one would drop it ([`crate::classify`] says [`crate::Kind::Unknown`]).
//!
//! # Layout (big-endian)
//!
//! ```text
//!  offset  len  field
//!  0       1    magic       0xFB
//!  1       1    version     1
//!  2       2    count       records that follow, 1..=RECORDS_MAX
//!  4       4    gateway     the reporting gateway's node id
//!  8       10   session     the MoldUDP64 session of the stream released
//!  18      2    reserved    0
//!  20      8    seq         the gateway's reports, numbered from 1 by the reporting
//!                           process (a gap: reports lost on the way; 1 again: a new process)
//!  28      48   record      count times:
//!
//!  record  0    8   packet_seq   the stream's dense packet number
//!          8    8   sequence     MoldUDP64 sequence of the packet's Jasper header message
//!          16   2   messages     ITCH messages in the packet (0: an idle packet)
//!          18   1   flags        bit 0 late, bit 1 recovered; no other bit
//!          19   5   reserved     0
//!          24   8   send_time    the root's send time, exchange ns
//!          32   8   received     first copy's arrival, the gateway's exchange ns
//!          40   8   released     release, the gateway's exchange ns
//! ```

use crate::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::{Error, ExchangeTime, Session, VERSION};

/// First byte of a release report.
pub const MAGIC: u8 = 0xFB;

mod field {
    use crate::bytes::Field;
    pub(super) const MAGIC: usize = 0;
    pub(super) const VERSION: usize = 1;
    pub(super) const COUNT: Field = 2..4;
    pub(super) const GATEWAY: Field = 4..8;
    pub(super) const SESSION: Field = 8..18;
    pub(super) const RESERVED: Field = 18..20;
    pub(super) const SEQ: Field = 20..28;
    pub(super) const RECORDS: usize = 28;

    pub(super) const PACKET_SEQ: Field = 0..8;
    pub(super) const SEQUENCE: Field = 8..16;
    pub(super) const MESSAGES: Field = 16..18;
    pub(super) const FLAGS: usize = 18;
    pub(super) const PADDING: Field = 19..24;
    pub(super) const SEND_TIME: Field = 24..32;
    pub(super) const RECEIVED: Field = 32..40;
    pub(super) const RELEASED: Field = 40..48;
}

/// Bytes before the first record.
pub const HEADER_LEN: usize = field::RECORDS;
/// Bytes of one record.
pub const RECORD_LEN: usize = field::RELEASED.end;
/// Records in one report at most: the report fits a 1,400-byte datagram (1,372 bytes).
pub const RECORDS_MAX: usize = 28;
/// Bytes of the longest report.
pub const DATAGRAM_MAX: usize = HEADER_LEN + RECORDS_MAX * RECORD_LEN;

const _: () = assert!(RECORD_LEN == 48 && HEADER_LEN == 28);
const _: () = assert!(DATAGRAM_MAX <= 1400);
const _: () = assert!(field::RESERVED.end == field::SEQ.start && field::SEQ.end == field::RECORDS);
const _: () = assert!(
    MAGIC >= 0x80
        && MAGIC != crate::order::MAGIC
        && MAGIC != crate::control::MAGIC
        && MAGIC != crate::hop::MAGIC
        && MAGIC != crate::response::MAGIC
);

const LATE: u8 = 1;
const RECOVERED: u8 = 2;

/// One release of one packet at one gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReleaseRecord {
    /// The stream's dense packet number.
    pub packet_seq: u64,
    /// MoldUDP64 sequence of the packet's header message.
    pub sequence: u64,
    /// ITCH messages in the packet (0: an idle packet).
    pub messages: u16,
    /// Arrived after its deadline, and so released on arrival.
    pub late: bool,
    /// Retransmitted (by a proxy's repair ring or the root's rewinder).
    pub recovered: bool,
    /// The root's send time.
    pub send_time: ExchangeTime,
    /// The first copy's arrival, the gateway's exchange time.
    pub received: ExchangeTime,
    /// The release, the gateway's exchange time.
    pub released: ExchangeTime,
}

impl ReleaseRecord {
    fn read(b: &[u8]) -> Result<Self, Error> {
        let flags = b[field::FLAGS];
        if flags & !(LATE | RECOVERED) != 0 || b[field::PADDING].iter().any(|&x| x != 0) {
            return Err(Error::Malformed);
        }
        Ok(Self {
            packet_seq: get_u64(b, field::PACKET_SEQ),
            sequence: get_u64(b, field::SEQUENCE),
            messages: get_u16(b, field::MESSAGES),
            late: flags & LATE != 0,
            recovered: flags & RECOVERED != 0,
            send_time: ExchangeTime(get_u64(b, field::SEND_TIME)),
            received: ExchangeTime(get_u64(b, field::RECEIVED)),
            released: ExchangeTime(get_u64(b, field::RELEASED)),
        })
    }

    fn write(&self, b: &mut [u8]) {
        put_u64(b, field::PACKET_SEQ, self.packet_seq);
        put_u64(b, field::SEQUENCE, self.sequence);
        put_u16(b, field::MESSAGES, self.messages);
        b[field::FLAGS] =
            if self.late { LATE } else { 0 } | if self.recovered { RECOVERED } else { 0 };
        b[field::PADDING].fill(0);
        put_u64(b, field::SEND_TIME, self.send_time.0);
        put_u64(b, field::RECEIVED, self.received.0);
        put_u64(b, field::RELEASED, self.released.0);
    }
}

/// A checked release report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report<'a> {
    /// The reporting gateway's node id.
    pub gateway: u32,
    /// The session of the stream released.
    pub session: Session,
    /// The gateway's reports, numbered from 1 by the process reporting.
    pub seq: u64,
    records: &'a [u8],
}

impl<'a> Report<'a> {
    /// Checks a whole report: magic, version, a count from 1 to [`RECORDS_MAX`], exactly that
    /// many records, and every record's flags and padding.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, Error> {
        if datagram.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if datagram[field::MAGIC] != MAGIC
            || datagram[field::VERSION] != VERSION
            || get_u16(datagram, field::RESERVED) != 0
        {
            return Err(Error::Malformed);
        }
        let count = usize::from(get_u16(datagram, field::COUNT));
        if count == 0 || count > RECORDS_MAX {
            return Err(Error::Malformed);
        }
        let seq = get_u64(datagram, field::SEQ);
        if seq == 0 {
            return Err(Error::OutOfRange);
        }
        if datagram.len() != HEADER_LEN + count * RECORD_LEN {
            return Err(Error::BadLength);
        }
        let records = &datagram[HEADER_LEN..];
        for record in records.chunks_exact(RECORD_LEN) {
            ReleaseRecord::read(record)?;
        }
        let mut session = [0u8; 10];
        session.copy_from_slice(&datagram[field::SESSION]);
        Ok(Self {
            gateway: get_u32(datagram, field::GATEWAY),
            session: Session(session),
            seq,
            records,
        })
    }

    /// Records in the report.
    pub fn len(&self) -> usize {
        self.records.len() / RECORD_LEN
    }

    /// Never true: a report holds at least one record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records, in release order.
    pub fn records(&self) -> impl Iterator<Item = ReleaseRecord> + 'a {
        self.records
            .chunks_exact(RECORD_LEN)
            .filter_map(|r| ReleaseRecord::read(r).ok())
    }
}

/// Writes report number `seq` (from 1) of `records` (1 to [`RECORDS_MAX`]) released by
/// `gateway` in `session`; returns the length written.
pub fn emit(
    buf: &mut [u8],
    gateway: u32,
    session: Session,
    seq: u64,
    records: &[ReleaseRecord],
) -> Result<usize, Error> {
    if records.is_empty() || records.len() > RECORDS_MAX || seq == 0 {
        return Err(Error::OutOfRange);
    }
    let len = HEADER_LEN + records.len() * RECORD_LEN;
    if buf.len() < len {
        return Err(Error::BufferTooSmall);
    }
    buf[field::MAGIC] = MAGIC;
    buf[field::VERSION] = VERSION;
    put_u16(buf, field::COUNT, records.len() as u16);
    put_u32(buf, field::GATEWAY, gateway);
    buf[field::SESSION].copy_from_slice(&session.0);
    put_u16(buf, field::RESERVED, 0);
    put_u64(buf, field::SEQ, seq);
    for (record, out) in records
        .iter()
        .zip(buf[HEADER_LEN..len].chunks_exact_mut(RECORD_LEN))
    {
        record.write(out);
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(packet_seq: u64) -> ReleaseRecord {
        ReleaseRecord {
            packet_seq,
            sequence: 10 * packet_seq + 1,
            messages: 3,
            late: packet_seq.is_multiple_of(2),
            recovered: packet_seq.is_multiple_of(3),
            send_time: ExchangeTime(1_000 * packet_seq),
            received: ExchangeTime(1_000 * packet_seq + 80_000),
            released: ExchangeTime(1_000 * packet_seq + 200_000),
        }
    }

    fn session() -> Session {
        Session::new("JASPER0001").unwrap()
    }

    #[test]
    fn round_trip_and_layout() {
        let records: Vec<_> = (1..=RECORDS_MAX as u64).map(record).collect();
        let mut buf = [0u8; DATAGRAM_MAX];
        let len = emit(&mut buf, 0x0102_0304, session(), 9, &records).unwrap();
        assert_eq!(len, DATAGRAM_MAX);
        assert_eq!(buf[..8], [0xFB, 1, 0, 28, 1, 2, 3, 4]);
        assert_eq!(&buf[8..18], b"JASPER0001");
        assert_eq!(buf[18..28], [0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
        assert_eq!(crate::classify(&buf[..len]), crate::Kind::Unknown);
        let report = Report::parse(&buf[..len]).unwrap();
        assert_eq!(report.gateway, 0x0102_0304);
        assert_eq!(report.session, session());
        assert_eq!(report.seq, 9);
        assert_eq!(report.len(), RECORDS_MAX);
        assert!(!report.is_empty());
        assert_eq!(report.records().collect::<Vec<_>>(), records);
        // The first record's fields where the layout says.
        let r = &buf[HEADER_LEN..HEADER_LEN + RECORD_LEN];
        assert_eq!(r[0..8], 1u64.to_be_bytes());
        assert_eq!(r[8..16], 11u64.to_be_bytes());
        assert_eq!(r[16..18], 3u16.to_be_bytes());
        assert_eq!(r[18], 0, "packet 1 neither late nor recovered");
        assert_eq!(r[40..48], 201_000u64.to_be_bytes());
    }

    #[test]
    fn refuses_bad_reports() {
        let mut buf = [0u8; DATAGRAM_MAX];
        let len = emit(&mut buf, 7, session(), 1, &[record(2), record(3)]).unwrap();
        assert_eq!(Report::parse(&buf[..5]), Err(Error::Truncated));
        assert_eq!(Report::parse(&buf[..len - 1]), Err(Error::BadLength));
        assert_eq!(Report::parse(&buf[..len + 1]), Err(Error::BadLength));
        for (at, value) in [
            (0, 0xFC),
            (1, 2),
            (2, 1),
            (3, 0),
            (19, 1),
            (27, 0),
            (28 + 18, 4),
        ] {
            let mut bad = buf;
            bad[at] = value;
            assert!(Report::parse(&bad[..len]).is_err(), "byte {at} = {value}");
        }
        let mut padded = buf;
        padded[HEADER_LEN + RECORD_LEN + 20] = 1;
        assert_eq!(Report::parse(&padded[..len]), Err(Error::Malformed));
        assert_eq!(emit(&mut buf, 7, session(), 1, &[]), Err(Error::OutOfRange));
        assert_eq!(
            emit(&mut buf, 7, session(), 0, &[record(1)]),
            Err(Error::OutOfRange)
        );
        let many: Vec<_> = (1..=RECORDS_MAX as u64 + 1).map(record).collect();
        assert_eq!(
            emit(&mut buf, 7, session(), 1, &many),
            Err(Error::OutOfRange)
        );
        assert_eq!(
            emit(&mut [0u8; 60], 7, session(), 1, &[record(1)]),
            Err(Error::BufferTooSmall)
        );
    }
}
