//! Jasper control datagrams: clock-sync probes and replies (Huygens-style probe pairs), OWD
//! percentile reports, heartbeats, retransmission requests, the order path's heartbeat
//! orders and resend notices, and the numbered responses' gap requests and status
//! ([`crate::response`]).
//!
//! One message per datagram. Retransmitted data itself travels as ordinary market-data
//! packets with [`crate::market::RETRANSMISSION`] set; a rewinder that no longer holds the
//! range answers [`Repr::RetransmitUnavailable`].
//!
//! # Layout (big-endian)
//!
//! Every control datagram starts with a 4-byte envelope:
//!
//! ```text
//!  offset  len  field
//!  0       1    magic      0xFF (never the first byte of a MoldUDP64 session)
//!  1       1    version    1
//!  2       1    type       see below
//!  3       1    reserved   0
//! ```
//!
//! then the body of its type; the datagram's length must be exactly the type's length.
//!
//! ```text
//!  'P' ClockProbe (25)          'R' ClockReply (42)           'O' OwdReport (20)
//!  4  8 probe_id                4  8 probe_id                 4  4 sender
//!  12 8 t_send (ns)             12 8 t1_send (ns, echoed)     8  4 samples
//!  20 4 sender                  20 8 t2_recv (ns)             12 8 owd_ns
//!  24 1 pair_index              28 8 t3_send (ns)
//!                               36 4 responder
//!                               40 1 pair_index
//!                               41 1 flags: bit 0 converged,
//!                                        bit 1 unsynced
//!
//!  'H' Heartbeat (16)           'Q' RetransmitRequest (28)    'N' RetransmitUnavailable (36)
//!  4  4 sender                  4  4 requester                4  4 requester
//!  8  8 seq                     8  10 session                 8  10 session
//!                               18 8 sequence                 18 8 sequence
//!                               26 2 count                    26 2 count
//!                                                             28 8 oldest_available
//!
//!  'F' PacingFeedback (20): the layout of 'O' OwdReport, sent parent -> child
//!
//!  'B' OrderHeartbeat (16)
//!  4  4 sender
//!  8  8 time (ns)
//!
//!  'S' ResendOrders (16): the layout of 'B' OrderHeartbeat (time: `since`), sent parent -> child
//!
//!  'G' ResponseGap (28)         'T' ResponseStatus (28)       'K' SnapshotRequest (30)
//!  4  4 requester               4  4 participant              4  4 requester
//!  8  4 participant             8  4 reserved 0               8  10 session
//!  12 8 from                    12 8 oldest                   18 8 packet_seq
//!  20 4 count                   20 8 next                     26 4 part
//!  24 4 reserved 0
//! ```
//!
//! A snapshot request asks the root for its book as snapshot parts
//! ([`crate::market::SNAPSHOT`]) from part `part` on, of a snapshot that covers at least the
//! live stream before packet `packet_seq` (a gateway's join point, or the end of a skipped
//! gap, or the snapshot it is putting together).
//!
//! A response gap asks the root for `count` of `participant`'s numbered responses from
//! `from`, sent to `requester` (one of the participant's gateways); with `count` zero it asks
//! where a starting gateway's stream starts, `from` then being an exchange time (ns): the
//! answer is a status with `oldest` zero and `next` the number of the participant's first
//! response from that time on. A response status says the
//! root holds that participant's responses `oldest..next` and numbers the next one `next`: it
//! goes after a participant's responses have been quiet for a while (so a gateway learns of a
//! lost last one) and in answer to a gap it can no longer fill.
//!
//! An order heartbeat is the global-FIFO sequencer's "dummy order" (DESIGN.md §4 "Sequencer at
//! the root"): an idle sender promises its parent that nothing it sends later was generated
//! before `time`.
//!
//! A reply's `converged` flag says the responder's own clock has converged (its model is a
//! fit over a full window of samples against its own parent; the root's clock is exchange
//! time): a child away from home takes it as the sign that a restarted home parent is fit to
//! sync to again. The `unsynced` flag says its clock has not converged even once (a proxy
//! starting up): the timestamps are not to be fitted, and the reply only tells the child its
//! parent is alive, where silence would look like a dead parent (`proto::failover`). Other
//! flag bits are refused.
//!
//! Probe timestamps are in the clock being disciplined: the sender's exchange-clock estimate
//! (`t_send`, echoed as `t1_send`) and the responder's (`t2_recv`, `t3_send`).

use crate::bytes::{get_array, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::mold::Session;
use crate::{Emit, Error, ExchangeTime, VERSION};

/// First byte of every control datagram.
pub const MAGIC: u8 = 0xFF;
/// Bytes of the envelope in front of every control body.
pub const ENVELOPE_LEN: usize = 4;

mod field {
    use crate::bytes::Field;
    pub(super) const MAGIC: usize = 0;
    pub(super) const VERSION: usize = 1;
    pub(super) const TYPE: usize = 2;
    pub(super) const RESERVED: usize = 3;

    pub(super) mod probe {
        use super::Field;
        pub(crate) const PROBE_ID: Field = 4..12;
        pub(crate) const T_SEND: Field = 12..20;
        pub(crate) const SENDER: Field = 20..24;
        pub(crate) const PAIR_INDEX: usize = 24;
        pub(crate) const LEN: usize = 25;
    }
    pub(super) mod reply {
        use super::Field;
        pub(crate) const PROBE_ID: Field = 4..12;
        pub(crate) const T1_SEND: Field = 12..20;
        pub(crate) const T2_RECV: Field = 20..28;
        pub(crate) const T3_SEND: Field = 28..36;
        pub(crate) const RESPONDER: Field = 36..40;
        pub(crate) const PAIR_INDEX: usize = 40;
        pub(crate) const FLAGS: usize = 41;
        pub(crate) const LEN: usize = 42;
        /// Flag bits.
        pub(crate) const CONVERGED: u8 = 0x01;
        pub(crate) const UNSYNCED: u8 = 0x02;
    }
    pub(super) mod owd {
        use super::Field;
        pub(crate) const SENDER: Field = 4..8;
        pub(crate) const SAMPLES: Field = 8..12;
        pub(crate) const OWD_NS: Field = 12..20;
        pub(crate) const LEN: usize = 20;
    }
    pub(super) mod heartbeat {
        use super::Field;
        pub(crate) const SENDER: Field = 4..8;
        pub(crate) const SEQ: Field = 8..16;
        pub(crate) const LEN: usize = 16;
    }
    pub(super) mod response_gap {
        use super::Field;
        pub(crate) const REQUESTER: Field = 4..8;
        pub(crate) const PARTICIPANT: Field = 8..12;
        pub(crate) const FROM: Field = 12..20;
        pub(crate) const COUNT: Field = 20..24;
        pub(crate) const RESERVED: Field = 24..28;
        pub(crate) const LEN: usize = 28;
    }
    pub(super) mod response_status {
        use super::Field;
        pub(crate) const PARTICIPANT: Field = 4..8;
        pub(crate) const RESERVED: Field = 8..12;
        pub(crate) const OLDEST: Field = 12..20;
        pub(crate) const NEXT: Field = 20..28;
        pub(crate) const LEN: usize = 28;
    }
    pub(super) mod snapshot {
        use super::Field;
        pub(crate) const REQUESTER: Field = 4..8;
        pub(crate) const SESSION: Field = 8..18;
        pub(crate) const PACKET_SEQ: Field = 18..26;
        pub(crate) const PART: Field = 26..30;
        pub(crate) const LEN: usize = 30;
    }
    pub(super) mod order_heartbeat {
        use super::Field;
        pub(crate) const SENDER: Field = 4..8;
        pub(crate) const TIME: Field = 8..16;
        pub(crate) const LEN: usize = 16;
    }
    /// Shared by RetransmitRequest and RetransmitUnavailable.
    pub(super) mod retransmit {
        use super::Field;
        pub(crate) const REQUESTER: Field = 4..8;
        pub(crate) const SESSION: Field = 8..18;
        pub(crate) const SEQUENCE: Field = 18..26;
        pub(crate) const COUNT: Field = 26..28;
        pub(crate) const LEN: usize = 28;
        pub(crate) const OLDEST_AVAILABLE: Field = 28..36;
        pub(crate) const UNAVAILABLE_LEN: usize = 36;
    }
}

const _: () = assert!(field::RESERVED + 1 == ENVELOPE_LEN);
const _: () = assert!(field::probe::PROBE_ID.start == ENVELOPE_LEN);
const _: () = assert!(field::probe::SENDER.end == field::probe::PAIR_INDEX);
const _: () = assert!(field::probe::PAIR_INDEX + 1 == field::probe::LEN);
const _: () = assert!(field::reply::RESPONDER.end == field::reply::PAIR_INDEX);
const _: () = assert!(field::reply::PAIR_INDEX + 1 == field::reply::FLAGS);
const _: () = assert!(field::reply::FLAGS + 1 == field::reply::LEN);
const _: () = assert!(field::owd::OWD_NS.end == field::owd::LEN);
const _: () = assert!(field::heartbeat::SEQ.end == field::heartbeat::LEN);
const _: () = assert!(field::order_heartbeat::SENDER.end == field::order_heartbeat::TIME.start);
const _: () = assert!(field::order_heartbeat::TIME.end == field::order_heartbeat::LEN);
const _: () = assert!(field::retransmit::COUNT.end == field::retransmit::LEN);
const _: () = assert!(field::response_gap::COUNT.end == field::response_gap::RESERVED.start);
const _: () = assert!(field::response_gap::RESERVED.end == field::response_gap::LEN);
const _: () = assert!(field::response_status::NEXT.end == field::response_status::LEN);
const _: () = assert!(field::snapshot::SESSION.end == field::snapshot::PACKET_SEQ.start);
const _: () = assert!(field::snapshot::PACKET_SEQ.end == field::snapshot::PART.start);
const _: () = assert!(field::snapshot::PART.end == field::snapshot::LEN);
const _: () = assert!(field::retransmit::LEN == field::retransmit::OLDEST_AVAILABLE.start);
const _: () =
    assert!(field::retransmit::OLDEST_AVAILABLE.end == field::retransmit::UNAVAILABLE_LEN);

/// Control message type bytes (byte 2 of the envelope).
pub mod msg_type {
    /// [`super::Repr::ClockProbe`]
    pub const CLOCK_PROBE: u8 = b'P';
    /// [`super::Repr::ClockReply`]
    pub const CLOCK_REPLY: u8 = b'R';
    /// [`super::Repr::OwdReport`]
    pub const OWD_REPORT: u8 = b'O';
    /// [`super::Repr::Heartbeat`]
    pub const HEARTBEAT: u8 = b'H';
    /// [`super::Repr::RetransmitRequest`]
    pub const RETRANSMIT_REQUEST: u8 = b'Q';
    /// [`super::Repr::RetransmitUnavailable`]
    pub const RETRANSMIT_UNAVAILABLE: u8 = b'N';
    /// [`super::Repr::PacingFeedback`]
    pub const PACING_FEEDBACK: u8 = b'F';
    /// [`super::Repr::OrderHeartbeat`]
    pub const ORDER_HEARTBEAT: u8 = b'B';
    /// [`super::Repr::ResendOrders`]
    pub const RESEND_ORDERS: u8 = b'S';
    /// [`super::Repr::ResponseGap`]
    pub const RESPONSE_GAP: u8 = b'G';
    /// [`super::Repr::ResponseStatus`]
    pub const RESPONSE_STATUS: u8 = b'T';
    /// [`super::Repr::SnapshotRequest`]
    pub const SNAPSHOT_REQUEST: u8 = b'K';
}

/// Total datagram length of a control message of type `t`, if `t` is known.
pub const fn len_of(t: u8) -> Option<usize> {
    match t {
        msg_type::CLOCK_PROBE => Some(field::probe::LEN),
        msg_type::CLOCK_REPLY => Some(field::reply::LEN),
        msg_type::OWD_REPORT | msg_type::PACING_FEEDBACK => Some(field::owd::LEN),
        msg_type::HEARTBEAT => Some(field::heartbeat::LEN),
        msg_type::ORDER_HEARTBEAT | msg_type::RESEND_ORDERS => Some(field::order_heartbeat::LEN),
        msg_type::RETRANSMIT_REQUEST => Some(field::retransmit::LEN),
        msg_type::RETRANSMIT_UNAVAILABLE => Some(field::retransmit::UNAVAILABLE_LEN),
        msg_type::RESPONSE_GAP => Some(field::response_gap::LEN),
        msg_type::RESPONSE_STATUS => Some(field::response_status::LEN),
        msg_type::SNAPSHOT_REQUEST => Some(field::snapshot::LEN),
        _ => None,
    }
}

/// A checked view of a control datagram: envelope valid, type known, length exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checks (for emission into a buffer you sized).
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` after checking the envelope, the type and the exact length.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let data = buffer.as_ref();
        let [magic, version, t, reserved, ..] = *data else {
            return Err(Error::Truncated);
        };
        if magic != MAGIC || version != VERSION || reserved != 0 {
            return Err(Error::Malformed);
        }
        let len = len_of(t).ok_or(Error::UnknownType(t))?;
        if data.len() < len {
            return Err(Error::Truncated);
        }
        if data.len() > len {
            return Err(Error::BadLength);
        }
        if t == msg_type::CLOCK_REPLY
            && data[field::reply::FLAGS] & !(field::reply::CONVERGED | field::reply::UNSYNCED) != 0
        {
            return Err(Error::Malformed);
        }
        let reserved = match t {
            msg_type::RESPONSE_GAP => Some(field::response_gap::RESERVED),
            msg_type::RESPONSE_STATUS => Some(field::response_status::RESERVED),
            _ => None,
        };
        if reserved.is_some_and(|r| data[r].iter().any(|&b| b != 0)) {
            return Err(Error::Malformed);
        }
        Ok(Self { buffer })
    }

    /// The message type byte ([`msg_type`]).
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// The bytes after the envelope.
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[ENVELOPE_LEN..]
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// A control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Repr {
    /// A clock-sync probe, sent child → parent in back-to-back pairs (Huygens).
    ClockProbe {
        /// Identifies the probe pair (both probes of a pair share it).
        probe_id: u64,
        /// 0 or 1: which probe of the pair.
        pair_index: u8,
        /// Node id of the sender.
        sender: u32,
        /// Sender's clock at send.
        t_send: ExchangeTime,
    },
    /// The answer to a [`Repr::ClockProbe`].
    ClockReply {
        /// The probe's `probe_id`.
        probe_id: u64,
        /// The probe's `pair_index`.
        pair_index: u8,
        /// Node id of the responder.
        responder: u32,
        /// The probe's `t_send`, echoed.
        t1_send: ExchangeTime,
        /// Responder's clock when the probe arrived.
        t2_recv: ExchangeTime,
        /// Responder's clock when this reply was sent.
        t3_send: ExchangeTime,
        /// The responder's clock has converged (see the module docs).
        converged: bool,
        /// The responder's clock has not converged even once yet, so its timestamps are not
        /// to be fitted: the reply says only that it is alive (a child that heard nothing
        /// would take it for dead).
        unsynced: bool,
    },
    /// A node's OWD percentile (gateways: own measurement; proxies: max of children).
    OwdReport {
        /// Node id of the reporter.
        sender: u32,
        /// The reported OWD percentile, ns.
        owd_ns: u64,
        /// Samples behind the percentile.
        samples: u32,
    },
    /// A parent tells a child the median one-way delay of the orders the child sent it
    /// recently (pacing, DESIGN.md §4); same layout as [`Repr::OwdReport`].
    PacingFeedback {
        /// Node id of the parent that measured.
        sender: u32,
        /// Median hop OWD over the measurement window, ns.
        owd_ns: u64,
        /// Samples behind the median.
        samples: u32,
    },
    /// Liveness beacon for failure detection.
    Heartbeat {
        /// Node id of the sender.
        sender: u32,
        /// Sender's heartbeat counter.
        seq: u64,
    },
    /// The global-FIFO sequencer's heartbeat ("dummy") order, sent up the order path by an idle
    /// gateway or proxy: nothing the sender sends later was generated before `time`.
    OrderHeartbeat {
        /// Node id of the sender.
        sender: u32,
        /// The sender's watermark: a generation time (exchange clock).
        time: ExchangeTime,
    },
    /// Sent down the tree by a proxy that failed over to another parent (and passed on by the
    /// proxies below): orders on their way up through the dead parent were lost with it, so
    /// each gateway should send again every order generated since `since` and not answered
    /// yet (the root drops the copies of any it already had).
    ResendOrders {
        /// Node id of the sender (the receiver's parent).
        sender: u32,
        /// Orders generated at or after this time may have been lost (exchange clock).
        since: ExchangeTime,
    },
    /// Asks the rewinder for `count` messages of `session` from message `sequence` (MoldUDP64
    /// request semantics; the answer is the packets holding them, flagged
    /// [`crate::market::RETRANSMISSION`]).
    RetransmitRequest {
        /// Node id of the requester (where to send the packets).
        requester: u32,
        /// Session of the missing messages.
        session: Session,
        /// MoldUDP64 sequence number of the first missing message.
        sequence: u64,
        /// Number of messages missing.
        count: u16,
    },
    /// The rewinder no longer holds (part of) a requested range.
    RetransmitUnavailable {
        /// The request's requester.
        requester: u32,
        /// The request's session.
        session: Session,
        /// The request's sequence.
        sequence: u64,
        /// The request's count.
        count: u16,
        /// Oldest message sequence the rewinder still holds.
        oldest_available: u64,
    },
    /// Asks the root for `count` of `participant`'s numbered responses from number `from`
    /// (a gateway saw a gap in their numbers, [`crate::response`]).
    ResponseGap {
        /// Node id of the requester, one of the participant's gateways.
        requester: u32,
        /// Whose responses.
        participant: u32,
        /// Number of the first missing response.
        from: u64,
        /// Responses missing.
        count: u32,
    },
    /// The root holds `participant`'s responses numbered `oldest..next` and numbers its next
    /// one `next`.
    ResponseStatus {
        /// Whose responses.
        participant: u32,
        /// The oldest response the root can still send again (`next` if none).
        oldest: u64,
        /// The number of the participant's next response.
        next: u64,
    },
    /// Asks the root for its book as snapshot parts from `part` on, of a snapshot covering at
    /// least the live stream before packet `packet_seq` (see the module docs).
    SnapshotRequest {
        /// Node id of the requester, a gateway (where to send the parts).
        requester: u32,
        /// Session of the stream.
        session: Session,
        /// The snapshot must cover the packets before this one.
        packet_seq: u64,
        /// The first part wanted (from 0).
        part: u32,
    },
}

impl Repr {
    /// Parses a whole control datagram.
    pub fn parse(datagram: &[u8]) -> Result<Self, Error> {
        let packet = Packet::new_checked(datagram)?;
        Ok(Self::parse_packet(&packet))
    }

    /// Reads a checked [`Packet`].
    pub fn parse_packet<T: AsRef<[u8]>>(packet: &Packet<T>) -> Self {
        use field::{
            heartbeat, order_heartbeat, owd, probe, reply, response_gap, response_status,
            retransmit, snapshot,
        };
        let b = packet.buffer.as_ref();
        let time = |f| ExchangeTime(get_u64(b, f));
        match packet.msg_type() {
            msg_type::CLOCK_PROBE => Self::ClockProbe {
                probe_id: get_u64(b, probe::PROBE_ID),
                pair_index: b[probe::PAIR_INDEX],
                sender: get_u32(b, probe::SENDER),
                t_send: time(probe::T_SEND),
            },
            msg_type::CLOCK_REPLY => Self::ClockReply {
                probe_id: get_u64(b, reply::PROBE_ID),
                pair_index: b[reply::PAIR_INDEX],
                responder: get_u32(b, reply::RESPONDER),
                t1_send: time(reply::T1_SEND),
                t2_recv: time(reply::T2_RECV),
                t3_send: time(reply::T3_SEND),
                converged: b[reply::FLAGS] & reply::CONVERGED != 0,
                unsynced: b[reply::FLAGS] & reply::UNSYNCED != 0,
            },
            msg_type::OWD_REPORT => Self::OwdReport {
                sender: get_u32(b, owd::SENDER),
                owd_ns: get_u64(b, owd::OWD_NS),
                samples: get_u32(b, owd::SAMPLES),
            },
            msg_type::PACING_FEEDBACK => Self::PacingFeedback {
                sender: get_u32(b, owd::SENDER),
                owd_ns: get_u64(b, owd::OWD_NS),
                samples: get_u32(b, owd::SAMPLES),
            },
            msg_type::HEARTBEAT => Self::Heartbeat {
                sender: get_u32(b, heartbeat::SENDER),
                seq: get_u64(b, heartbeat::SEQ),
            },
            msg_type::ORDER_HEARTBEAT => Self::OrderHeartbeat {
                sender: get_u32(b, order_heartbeat::SENDER),
                time: time(order_heartbeat::TIME),
            },
            msg_type::RESEND_ORDERS => Self::ResendOrders {
                sender: get_u32(b, order_heartbeat::SENDER),
                since: time(order_heartbeat::TIME),
            },
            msg_type::RETRANSMIT_REQUEST => Self::RetransmitRequest {
                requester: get_u32(b, retransmit::REQUESTER),
                session: Session(get_array(b, retransmit::SESSION)),
                sequence: get_u64(b, retransmit::SEQUENCE),
                count: crate::bytes::get_u16(b, retransmit::COUNT),
            },
            msg_type::RESPONSE_GAP => Self::ResponseGap {
                requester: get_u32(b, response_gap::REQUESTER),
                participant: get_u32(b, response_gap::PARTICIPANT),
                from: get_u64(b, response_gap::FROM),
                count: get_u32(b, response_gap::COUNT),
            },
            msg_type::RESPONSE_STATUS => Self::ResponseStatus {
                participant: get_u32(b, response_status::PARTICIPANT),
                oldest: get_u64(b, response_status::OLDEST),
                next: get_u64(b, response_status::NEXT),
            },
            msg_type::SNAPSHOT_REQUEST => Self::SnapshotRequest {
                requester: get_u32(b, snapshot::REQUESTER),
                session: Session(get_array(b, snapshot::SESSION)),
                packet_seq: get_u64(b, snapshot::PACKET_SEQ),
                part: get_u32(b, snapshot::PART),
            },
            t => {
                // `new_checked` admits only known types; the last one is this.
                debug_assert_eq!(t, msg_type::RETRANSMIT_UNAVAILABLE);
                Self::RetransmitUnavailable {
                    requester: get_u32(b, retransmit::REQUESTER),
                    session: Session(get_array(b, retransmit::SESSION)),
                    sequence: get_u64(b, retransmit::SEQUENCE),
                    count: crate::bytes::get_u16(b, retransmit::COUNT),
                    oldest_available: get_u64(b, retransmit::OLDEST_AVAILABLE),
                }
            }
        }
    }

    /// The message type byte.
    pub const fn msg_type(&self) -> u8 {
        match self {
            Self::ClockProbe { .. } => msg_type::CLOCK_PROBE,
            Self::ClockReply { .. } => msg_type::CLOCK_REPLY,
            Self::OwdReport { .. } => msg_type::OWD_REPORT,
            Self::PacingFeedback { .. } => msg_type::PACING_FEEDBACK,
            Self::Heartbeat { .. } => msg_type::HEARTBEAT,
            Self::OrderHeartbeat { .. } => msg_type::ORDER_HEARTBEAT,
            Self::ResendOrders { .. } => msg_type::RESEND_ORDERS,
            Self::RetransmitRequest { .. } => msg_type::RETRANSMIT_REQUEST,
            Self::RetransmitUnavailable { .. } => msg_type::RETRANSMIT_UNAVAILABLE,
            Self::ResponseGap { .. } => msg_type::RESPONSE_GAP,
            Self::ResponseStatus { .. } => msg_type::RESPONSE_STATUS,
            Self::SnapshotRequest { .. } => msg_type::SNAPSHOT_REQUEST,
        }
    }

    /// Bytes of the whole datagram.
    pub const fn buffer_len(&self) -> usize {
        match len_of(self.msg_type()) {
            Some(n) => n,
            None => unreachable!(),
        }
    }

    /// Writes the whole datagram to the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        use field::{
            heartbeat, order_heartbeat, owd, probe, reply, response_gap, response_status,
            retransmit, snapshot,
        };
        let len = self.buffer_len();
        let b = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
        b[field::MAGIC] = MAGIC;
        b[field::VERSION] = VERSION;
        b[field::TYPE] = self.msg_type();
        b[field::RESERVED] = 0;
        match *self {
            Self::ClockProbe {
                probe_id,
                pair_index,
                sender,
                t_send,
            } => {
                put_u64(b, probe::PROBE_ID, probe_id);
                b[probe::PAIR_INDEX] = pair_index;
                put_u32(b, probe::SENDER, sender);
                put_u64(b, probe::T_SEND, t_send.0);
            }
            Self::ClockReply {
                probe_id,
                pair_index,
                responder,
                t1_send,
                t2_recv,
                t3_send,
                converged,
                unsynced,
            } => {
                put_u64(b, reply::PROBE_ID, probe_id);
                b[reply::PAIR_INDEX] = pair_index;
                put_u32(b, reply::RESPONDER, responder);
                put_u64(b, reply::T1_SEND, t1_send.0);
                put_u64(b, reply::T2_RECV, t2_recv.0);
                put_u64(b, reply::T3_SEND, t3_send.0);
                b[reply::FLAGS] = if converged { reply::CONVERGED } else { 0 }
                    | if unsynced { reply::UNSYNCED } else { 0 };
            }
            Self::OwdReport {
                sender,
                owd_ns,
                samples,
            }
            | Self::PacingFeedback {
                sender,
                owd_ns,
                samples,
            } => {
                put_u32(b, owd::SENDER, sender);
                put_u64(b, owd::OWD_NS, owd_ns);
                put_u32(b, owd::SAMPLES, samples);
            }
            Self::Heartbeat { sender, seq } => {
                put_u32(b, heartbeat::SENDER, sender);
                put_u64(b, heartbeat::SEQ, seq);
            }
            Self::OrderHeartbeat { sender, time }
            | Self::ResendOrders {
                sender,
                since: time,
            } => {
                put_u32(b, order_heartbeat::SENDER, sender);
                put_u64(b, order_heartbeat::TIME, time.0);
            }
            Self::RetransmitRequest {
                requester,
                session,
                sequence,
                count,
            } => {
                put_u32(b, retransmit::REQUESTER, requester);
                b[retransmit::SESSION].copy_from_slice(&session.0);
                put_u64(b, retransmit::SEQUENCE, sequence);
                put_u16(b, retransmit::COUNT, count);
            }
            Self::RetransmitUnavailable {
                requester,
                session,
                sequence,
                count,
                oldest_available,
            } => {
                put_u32(b, retransmit::REQUESTER, requester);
                b[retransmit::SESSION].copy_from_slice(&session.0);
                put_u64(b, retransmit::SEQUENCE, sequence);
                put_u16(b, retransmit::COUNT, count);
                put_u64(b, retransmit::OLDEST_AVAILABLE, oldest_available);
            }
            Self::ResponseGap {
                requester,
                participant,
                from,
                count,
            } => {
                put_u32(b, response_gap::REQUESTER, requester);
                put_u32(b, response_gap::PARTICIPANT, participant);
                put_u64(b, response_gap::FROM, from);
                put_u32(b, response_gap::COUNT, count);
                b[response_gap::RESERVED].fill(0);
            }
            Self::ResponseStatus {
                participant,
                oldest,
                next,
            } => {
                put_u32(b, response_status::PARTICIPANT, participant);
                b[response_status::RESERVED].fill(0);
                put_u64(b, response_status::OLDEST, oldest);
                put_u64(b, response_status::NEXT, next);
            }
            Self::SnapshotRequest {
                requester,
                session,
                packet_seq,
                part,
            } => {
                put_u32(b, snapshot::REQUESTER, requester);
                b[snapshot::SESSION].copy_from_slice(&session.0);
                put_u64(b, snapshot::PACKET_SEQ, packet_seq);
                put_u32(b, snapshot::PART, part);
            }
        }
        Ok(len)
    }
}

impl Emit for Repr {
    fn buffer_len(&self) -> usize {
        Self::buffer_len(self)
    }
    fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        Self::emit(self, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kind, classify};

    fn all() -> [Repr; 11] {
        let session = Session::new("JASPER").unwrap();
        [
            Repr::ClockProbe {
                probe_id: 9,
                pair_index: 1,
                sender: 3,
                t_send: ExchangeTime(5),
            },
            Repr::ClockReply {
                probe_id: 9,
                pair_index: 1,
                responder: 0,
                t1_send: ExchangeTime(5),
                t2_recv: ExchangeTime(50),
                t3_send: ExchangeTime(60),
                converged: true,
                unsynced: false,
            },
            Repr::OwdReport {
                sender: 17,
                owd_ns: 80_000,
                samples: 640,
            },
            Repr::Heartbeat { sender: 4, seq: 77 },
            Repr::RetransmitRequest {
                requester: 12,
                session,
                sequence: 1000,
                count: 20,
            },
            Repr::RetransmitUnavailable {
                requester: 12,
                session,
                sequence: 1000,
                count: 20,
                oldest_available: 5000,
            },
            Repr::OrderHeartbeat {
                sender: 21,
                time: ExchangeTime(123_456_789),
            },
            Repr::ResendOrders {
                sender: 5,
                since: ExchangeTime(987_654_321),
            },
            Repr::ResponseGap {
                requester: 31,
                participant: 7,
                from: 1_000_001,
                count: 3,
            },
            Repr::ResponseStatus {
                participant: 7,
                oldest: 900,
                next: 1_000_005,
            },
            Repr::SnapshotRequest {
                requester: 44,
                session,
                packet_seq: 70_000,
                part: 3,
            },
        ]
    }

    #[test]
    fn round_trip_and_reject_every_prefix() {
        for r in all() {
            let mut buf = [0u8; 64];
            let len = r.emit(&mut buf).unwrap();
            assert_eq!(len, r.buffer_len());
            assert_eq!(classify(&buf[..len]), Kind::Control);
            assert_eq!(Repr::parse(&buf[..len]), Ok(r));
            for cut in 0..len {
                assert_eq!(
                    Repr::parse(&buf[..cut]),
                    Err(Error::Truncated),
                    "{r:?} cut {cut}"
                );
            }
            assert_eq!(Repr::parse(&buf[..len + 1]), Err(Error::BadLength));
            assert_eq!(r.emit(&mut buf[..len - 1]), Err(Error::BufferTooSmall));
        }
    }

    #[test]
    fn probe_layout() {
        let mut buf = [0u8; 25];
        all()[0].emit(&mut buf).unwrap();
        assert_eq!(buf[..4], [0xFF, 1, b'P', 0]);
        assert_eq!(buf[4..12], 9u64.to_be_bytes());
        assert_eq!(buf[12..20], 5u64.to_be_bytes());
        assert_eq!(buf[20..24], 3u32.to_be_bytes());
        assert_eq!(buf[24], 1);
    }

    /// Goal: the clock reply's bytes are where the layout table says, and a flag bit it does
    /// not know is refused.
    #[test]
    fn reply_layout() {
        let mut buf = [0u8; 42];
        assert_eq!(all()[1].emit(&mut buf), Ok(42));
        assert_eq!(buf[..4], [0xFF, 1, b'R', 0]);
        assert_eq!(buf[4..12], 9u64.to_be_bytes());
        assert_eq!(buf[12..20], 5u64.to_be_bytes());
        assert_eq!(buf[20..28], 50u64.to_be_bytes());
        assert_eq!(buf[28..36], 60u64.to_be_bytes());
        assert_eq!(buf[36..40], 0u32.to_be_bytes());
        assert_eq!(buf[40], 1);
        assert_eq!(buf[41], 1, "converged");
        assert_eq!(Repr::parse(&buf), Ok(all()[1]));
        buf[41] = 0;
        assert!(matches!(
            Repr::parse(&buf),
            Ok(Repr::ClockReply {
                converged: false,
                ..
            })
        ));
        buf[41] = 0x02;
        assert!(matches!(
            Repr::parse(&buf),
            Ok(Repr::ClockReply {
                converged: false,
                unsynced: true,
                ..
            })
        ));
        buf[41] = 0x04;
        assert_eq!(Repr::parse(&buf), Err(Error::Malformed));
    }

    /// Goal: the order heartbeat's bytes are where the layout table says.
    #[test]
    fn order_heartbeat_layout() {
        let mut buf = [0u8; 16];
        assert_eq!(all()[6].emit(&mut buf), Ok(16));
        assert_eq!(buf[..4], [0xFF, 1, b'B', 0]);
        assert_eq!(buf[4..8], 21u32.to_be_bytes());
        assert_eq!(buf[8..16], 123_456_789u64.to_be_bytes());
        assert_eq!(Repr::parse(&buf), Ok(all()[6]));
        buf[2] = b'H';
        assert_eq!(
            Repr::parse(&buf),
            Ok(Repr::Heartbeat {
                sender: 21,
                seq: 123_456_789
            }),
            "same length as the failure-detection heartbeat, told apart by type only"
        );
    }

    /// Goal: the resend notice's bytes are where the layout table says.
    #[test]
    fn resend_orders_layout() {
        let mut buf = [0u8; 16];
        assert_eq!(all()[7].emit(&mut buf), Ok(16));
        assert_eq!(buf[..4], [0xFF, 1, b'S', 0]);
        assert_eq!(buf[4..8], 5u32.to_be_bytes());
        assert_eq!(buf[8..16], 987_654_321u64.to_be_bytes());
        assert_eq!(Repr::parse(&buf), Ok(all()[7]));
    }

    /// Goal: the response gap and status bytes are where the layout table says, and their
    /// reserved bytes must be zero.
    #[test]
    fn response_gap_and_status_layout() {
        let mut buf = [0u8; 28];
        assert_eq!(all()[8].emit(&mut buf), Ok(28));
        assert_eq!(buf[..4], [0xFF, 1, b'G', 0]);
        assert_eq!(buf[4..8], 31u32.to_be_bytes());
        assert_eq!(buf[8..12], 7u32.to_be_bytes());
        assert_eq!(buf[12..20], 1_000_001u64.to_be_bytes());
        assert_eq!(buf[20..24], 3u32.to_be_bytes());
        assert_eq!(buf[24..28], [0; 4]);
        buf[26] = 1;
        assert_eq!(Repr::parse(&buf), Err(Error::Malformed));
        assert_eq!(all()[9].emit(&mut buf), Ok(28));
        assert_eq!(buf[..4], [0xFF, 1, b'T', 0]);
        assert_eq!(buf[4..8], 7u32.to_be_bytes());
        assert_eq!(buf[8..12], [0; 4]);
        assert_eq!(buf[12..20], 900u64.to_be_bytes());
        assert_eq!(buf[20..28], 1_000_005u64.to_be_bytes());
        assert_eq!(Repr::parse(&buf), Ok(all()[9]));
        buf[9] = 1;
        assert_eq!(Repr::parse(&buf), Err(Error::Malformed));
    }

    #[test]
    fn snapshot_request_layout() {
        let mut buf = [0u8; 30];
        assert_eq!(all()[10].emit(&mut buf), Ok(30));
        assert_eq!(buf[..4], [0xFF, 1, b'K', 0]);
        assert_eq!(buf[4..8], 44u32.to_be_bytes());
        assert_eq!(&buf[8..14], b"JASPER");
        assert_eq!(buf[18..26], 70_000u64.to_be_bytes());
        assert_eq!(buf[26..30], 3u32.to_be_bytes());
        assert_eq!(Repr::parse(&buf), Ok(all()[10]));
        assert_eq!(Repr::parse(&buf[..29]), Err(Error::Truncated));
    }

    #[test]
    fn bad_envelope() {
        let mut buf = [0u8; 16];
        all()[3].emit(&mut buf).unwrap();
        buf[3] = 1;
        assert_eq!(Repr::parse(&buf), Err(Error::Malformed));
        buf[3] = 0;
        buf[2] = b'z';
        assert_eq!(Repr::parse(&buf), Err(Error::UnknownType(b'z')));
        buf[0] = 0xFE;
        assert_eq!(Repr::parse(&buf), Err(Error::Malformed));
    }
}
