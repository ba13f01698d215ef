//! A tiny reader of classic pcap files and of the UDP datagrams in their frames: enough to
//! replay captured market data (MoldUDP64/ITCH) and to test the decoders on real captures.
//!
//! Supports both byte orders, microsecond and nanosecond magic, link types Ethernet (1, with
//! any number of 802.1Q / 802.1ad VLAN tags) and raw IPv4 (101, 228); IPv4 with options; UDP.
//! Borrowing, allocation-free, and panic-free on any input.
//!
//! ```text
//!  file header (24)                     record header (16)
//!  0  4 magic  a1b2c3d4 us / a1b23c4d ns 0  4 ts_sec
//!  4  2 version_major                    4  4 ts_frac (us or ns, per magic)
//!  6  2 version_minor                    8  4 incl_len (bytes that follow)
//!  8  4 thiszone                         12 4 orig_len
//!  12 4 sigfigs
//!  16 4 snaplen
//!  20 4 linktype
//! ```

use crate::Error;
use crate::bytes::{get_u16, get_u32};

mod field {
    use crate::bytes::Field;
    pub(super) const MAGIC: Field = 0..4;
    pub(super) const LINKTYPE: Field = 20..24;
    pub(super) const FILE_HEADER_LEN: usize = 24;

    pub(super) const TS_SEC: Field = 0..4;
    pub(super) const TS_FRAC: Field = 4..8;
    pub(super) const INCL_LEN: Field = 8..12;
    pub(super) const ORIG_LEN: Field = 12..16;
    pub(super) const RECORD_HEADER_LEN: usize = 16;

    pub(super) const ETH_TYPE: Field = 12..14;
    pub(super) const ETH_HEADER_LEN: usize = 14;
    pub(super) const VLAN_TAG_LEN: usize = 4;

    pub(super) const IP_VERSION_IHL: usize = 0;
    pub(super) const IP_TOTAL_LEN: Field = 2..4;
    pub(super) const IP_FLAGS_FRAG: Field = 6..8;
    pub(super) const IP_PROTOCOL: usize = 9;
    pub(super) const IP_SRC: Field = 12..16;
    pub(super) const IP_DST: Field = 16..20;
    pub(super) const IP_MIN_LEN: usize = 20;

    pub(super) const UDP_SRC_PORT: Field = 0..2;
    pub(super) const UDP_DST_PORT: Field = 2..4;
    pub(super) const UDP_LEN: Field = 4..6;
    pub(super) const UDP_HEADER_LEN: usize = 8;
}

const _: () = assert!(field::LINKTYPE.end == field::FILE_HEADER_LEN);
const _: () = assert!(field::ORIG_LEN.end == field::RECORD_HEADER_LEN);
const _: () = assert!(field::ETH_TYPE.end == field::ETH_HEADER_LEN);
const _: () = assert!(field::IP_DST.end == field::IP_MIN_LEN);
const _: () = assert!(field::UDP_LEN.end + 2 == field::UDP_HEADER_LEN);

const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// Link type of Ethernet frames.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Link types of raw IP packets.
pub const LINKTYPE_RAW: [u32; 2] = [101, 228];
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: [u16; 3] = [0x8100, 0x88a8, 0x9100];
const IPPROTO_UDP: u8 = 17;

/// Reads records from an in-memory classic pcap file.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
    big_endian: bool,
    nanos: bool,
    linktype: u32,
}

/// One captured frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Capture time, ns since the Unix epoch (microsecond files are scaled).
    pub timestamp_ns: u64,
    /// Length of the frame on the wire (may exceed `data.len()` if the capture was cut).
    pub orig_len: u32,
    /// The captured bytes of the frame.
    pub data: &'a [u8],
}

/// A UDP datagram found in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Udp<'a> {
    /// IPv4 source address.
    pub src_ip: [u8; 4],
    /// IPv4 destination address.
    pub dst_ip: [u8; 4],
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// The UDP payload (bounded by the UDP length field).
    pub payload: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads the file header.
    pub fn new(file: &'a [u8]) -> Result<Self, Error> {
        if file.len() < field::FILE_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let magic_be = get_u32(file, field::MAGIC);
        let magic_le = magic_be.swap_bytes();
        let (big_endian, nanos) = match (magic_be, magic_le) {
            (MAGIC_MICROS, _) => (true, false),
            (MAGIC_NANOS, _) => (true, true),
            (_, MAGIC_MICROS) => (false, false),
            (_, MAGIC_NANOS) => (false, true),
            _ => return Err(Error::Malformed),
        };
        let mut reader = Self {
            rest: file,
            big_endian,
            nanos,
            linktype: 0,
        };
        reader.linktype = reader.u32_at(file, field::LINKTYPE);
        reader.rest = &file[field::FILE_HEADER_LEN..];
        Ok(reader)
    }

    /// Whether timestamps have nanosecond resolution.
    pub fn is_nanos(&self) -> bool {
        self.nanos
    }

    /// The file's link type.
    pub fn linktype(&self) -> u32 {
        self.linktype
    }

    /// The UDP datagram in `record`, for this file's link type.
    pub fn udp(&self, record: &Record<'a>) -> Result<Udp<'a>, Error> {
        match self.linktype {
            LINKTYPE_ETHERNET => ethernet_udp(record.data),
            t if LINKTYPE_RAW.contains(&t) => ipv4_udp(record.data),
            _ => Err(Error::UnknownType(0)),
        }
    }

    fn u32_at(&self, buf: &[u8], f: crate::bytes::Field) -> u32 {
        let v = get_u32(buf, f);
        if self.big_endian { v } else { v.swap_bytes() }
    }

    fn read_record(&mut self) -> Result<Record<'a>, Error> {
        let rest = self.rest;
        if rest.len() < field::RECORD_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let sec = u64::from(self.u32_at(rest, field::TS_SEC));
        let frac = u64::from(self.u32_at(rest, field::TS_FRAC));
        let incl = self.u32_at(rest, field::INCL_LEN) as usize;
        let orig_len = self.u32_at(rest, field::ORIG_LEN);
        let body = &rest[field::RECORD_HEADER_LEN..];
        let (data, tail) = body.split_at_checked(incl).ok_or(Error::Truncated)?;
        self.rest = tail;
        let frac_ns = if self.nanos {
            frac
        } else {
            frac.saturating_mul(1000)
        };
        let timestamp_ns = sec.saturating_mul(1_000_000_000).saturating_add(frac_ns);
        Ok(Record {
            timestamp_ns,
            orig_len,
            data,
        })
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, Error>;

    /// The next record; after an error (a truncated record), the iteration ends.
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let record = self.read_record();
        if record.is_err() {
            self.rest = &[];
        }
        Some(record)
    }
}

/// The UDP datagram in an Ethernet frame (VLAN tags skipped). Errors: [`Error::Truncated`],
/// [`Error::UnknownType`] for non-IPv4/non-UDP, [`Error::Malformed`] for bad lengths or
/// fragments.
pub fn ethernet_udp(frame: &[u8]) -> Result<Udp<'_>, Error> {
    if frame.len() < field::ETH_HEADER_LEN {
        return Err(Error::Truncated);
    }
    let mut ethertype = get_u16(frame, field::ETH_TYPE);
    let mut rest = &frame[field::ETH_HEADER_LEN..];
    while ETHERTYPE_VLAN.contains(&ethertype) {
        let (tag, tail) = rest
            .split_at_checked(field::VLAN_TAG_LEN)
            .ok_or(Error::Truncated)?;
        ethertype = get_u16(tag, 2..4);
        rest = tail;
    }
    if ethertype != ETHERTYPE_IPV4 {
        return Err(Error::UnknownType(0));
    }
    ipv4_udp(rest)
}

/// The UDP datagram in an IPv4 packet.
pub fn ipv4_udp(packet: &[u8]) -> Result<Udp<'_>, Error> {
    if packet.len() < field::IP_MIN_LEN {
        return Err(Error::Truncated);
    }
    let version_ihl = packet[field::IP_VERSION_IHL];
    if version_ihl >> 4 != 4 {
        return Err(Error::Malformed);
    }
    let header_len = usize::from(version_ihl & 0x0f) * 4;
    let total_len = usize::from(get_u16(packet, field::IP_TOTAL_LEN));
    if header_len < field::IP_MIN_LEN || total_len < header_len {
        return Err(Error::Malformed);
    }
    // More-fragments flag or a fragment offset: not a whole datagram.
    if get_u16(packet, field::IP_FLAGS_FRAG) & 0x3fff != 0 {
        return Err(Error::Malformed);
    }
    if packet[field::IP_PROTOCOL] != IPPROTO_UDP {
        return Err(Error::UnknownType(packet[field::IP_PROTOCOL]));
    }
    let ip = packet.get(..total_len).ok_or(Error::Truncated)?;
    let udp = &ip[header_len..];
    if udp.len() < field::UDP_HEADER_LEN {
        return Err(Error::Truncated);
    }
    let udp_len = usize::from(get_u16(udp, field::UDP_LEN));
    if udp_len < field::UDP_HEADER_LEN {
        return Err(Error::Malformed);
    }
    let payload = udp
        .get(field::UDP_HEADER_LEN..udp_len)
        .ok_or(Error::Truncated)?;
    Ok(Udp {
        src_ip: crate::bytes::get_array(ip, field::IP_SRC),
        dst_ip: crate::bytes::get_array(ip, field::IP_DST),
        src_port: get_u16(udp, field::UDP_SRC_PORT),
        dst_port: get_u16(udp, field::UDP_DST_PORT),
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a little-endian nanosecond pcap with one Ethernet+VLAN+IPv4+UDP frame.
    fn file(payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&MAGIC_NANOS.to_le_bytes());
        f.extend_from_slice(&[2, 0, 4, 0]);
        f.extend_from_slice(&[0; 12]);
        f.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x8d, 0x08, 0x00]);
        let total = 20 + 8 + payload.len();
        frame.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0]);
        frame.extend_from_slice(&[64, 17, 0, 0, 10, 0, 0, 1, 233, 54, 12, 111]);
        let ulen = 8 + payload.len();
        frame.extend_from_slice(&[0x30, 0x39, 0x67, 0x2b, (ulen >> 8) as u8, ulen as u8, 0, 0]);
        frame.extend_from_slice(payload);
        f.extend_from_slice(&7u32.to_le_bytes());
        f.extend_from_slice(&5u32.to_le_bytes());
        f.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        f.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        f.extend_from_slice(&frame);
        f
    }

    #[test]
    fn reads_synthetic_file() {
        let f = file(b"hello");
        let mut r = Reader::new(&f).unwrap();
        assert!(r.is_nanos());
        assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
        let rec = r.next().unwrap().unwrap();
        assert_eq!(rec.timestamp_ns, 7_000_000_005);
        let udp = r.udp(&rec).unwrap();
        assert_eq!(udp.payload, b"hello");
        assert_eq!(udp.src_port, 12345);
        assert_eq!(udp.dst_port, 26411);
        assert_eq!(udp.src_ip, [10, 0, 0, 1]);
        assert_eq!(udp.dst_ip, [233, 54, 12, 111]);
        assert!(r.next().is_none());
    }

    #[test]
    fn truncations_are_errors() {
        let f = file(b"hello");
        for cut in 0..f.len() {
            let Ok(mut r) = Reader::new(&f[..cut]) else {
                assert!(cut < 24);
                continue;
            };
            match r.next() {
                None => assert_eq!(cut, 24),
                Some(rec) => assert!(rec.is_err(), "cut {cut}"),
            }
        }
        assert_eq!(Reader::new(&[0u8; 24]).unwrap_err(), Error::Malformed);
        let rec_start = 24 + 16;
        for cut in 0..f.len() - rec_start {
            assert!(
                ethernet_udp(&f[rec_start..rec_start + cut]).is_err(),
                "cut {cut}"
            );
        }
    }
}
