//! Property tests: every message type round-trips, and no decoder panics on any bytes.

use proptest::prelude::*;
use wire::control;
use wire::itch::{self, Message};
use wire::market::{self, JasperHeader};
use wire::mold::{self, MoldBuilder, MoldPacket, Session};
use wire::order::{self, OrderHeader};
use wire::{Error, ExchangeTime, Kind, MarketDataBuilder, Raw, Side, Stock, classify};

/// Byte offsets of the one typed (non-raw) field of ITCH messages: the buy/sell indicator.
fn itch_side_offset(msg_type: u8) -> Option<usize> {
    matches!(msg_type, b'A' | b'F' | b'P').then_some(19)
}

/// A valid ITCH message as bytes: any type, any field values (48-bit timestamps, any bytes in
/// raw code fields, a valid side).
fn itch_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(Message::TYPES),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 50),
    )
        .prop_map(|(t, buy, fill)| {
            let len = Message::len_of(t).unwrap();
            let mut b = fill[..len].to_vec();
            b[0] = t;
            if let Some(at) = itch_side_offset(t) {
                b[at] = if buy { b'B' } else { b'S' };
            }
            b
        })
}

fn session() -> impl Strategy<Value = Session> {
    any::<[u8; 10]>().prop_map(Session)
}

fn time() -> impl Strategy<Value = ExchangeTime> {
    any::<u64>().prop_map(ExchangeTime)
}

fn control_repr() -> impl Strategy<Value = control::Repr> {
    use control::Repr;
    prop_oneof![
        (any::<u64>(), any::<u8>(), any::<u32>(), time()).prop_map(|(a, b, c, d)| {
            Repr::ClockProbe {
                probe_id: a,
                pair_index: b,
                sender: c,
                t_send: d,
            }
        }),
        (
            any::<u64>(),
            any::<u8>(),
            any::<u32>(),
            time(),
            time(),
            time(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(a, b, c, d, e, f, g, h)| Repr::ClockReply {
                probe_id: a,
                pair_index: b,
                responder: c,
                t1_send: d,
                t2_recv: e,
                t3_send: f,
                converged: g,
                unsynced: h,
            }),
        (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(a, b, c)| Repr::OwdReport {
            sender: a,
            owd_ns: b,
            samples: c
        }),
        (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(a, b, c)| Repr::PacingFeedback {
            sender: a,
            owd_ns: b,
            samples: c
        }),
        (any::<u32>(), any::<u64>()).prop_map(|(a, b)| Repr::Heartbeat { sender: a, seq: b }),
        (any::<u32>(), time()).prop_map(|(a, b)| Repr::OrderHeartbeat { sender: a, time: b }),
        (any::<u32>(), session(), any::<u64>(), any::<u16>()).prop_map(|(a, b, c, d)| {
            Repr::RetransmitRequest {
                requester: a,
                session: b,
                sequence: c,
                count: d,
            }
        }),
        (
            any::<u32>(),
            session(),
            any::<u64>(),
            any::<u16>(),
            any::<u64>()
        )
            .prop_map(|(a, b, c, d, e)| Repr::RetransmitUnavailable {
                requester: a,
                session: b,
                sequence: c,
                count: d,
                oldest_available: e,
            }),
        (any::<u32>(), any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(a, b, c, d)| {
            Repr::ResponseGap {
                requester: a,
                participant: b,
                from: c,
                count: d,
            }
        }),
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(a, b, c)| Repr::ResponseStatus {
            participant: a,
            oldest: b,
            next: c,
        }),
        (any::<u32>(), session(), any::<u64>(), any::<u32>()).prop_map(|(a, b, c, d)| {
            Repr::SnapshotRequest {
                requester: a,
                session: b,
                packet_seq: c,
                part: d,
            }
        }),
    ]
}

fn order_header() -> impl Strategy<Value = OrderHeader> {
    (any::<u64>(), any::<u32>(), any::<u32>(), time()).prop_map(|(c, p, g, t)| OrderHeader {
        client_order_id: c,
        participant_id: p,
        gateway_id: g,
        time: t,
    })
}

fn side() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::Buy), Just(Side::Sell)]
}

fn stock() -> impl Strategy<Value = Stock> {
    any::<[u8; 8]>().prop_map(Stock)
}

type EnterFields = (
    OrderHeader,
    Side,
    u32,
    Stock,
    u32,
    order::TimeInForce,
    order::OrderType,
    order::Display,
);

fn enter_fields() -> impl Strategy<Value = EnterFields> {
    use order::*;
    let tif = prop::sample::select(TimeInForce::ALL);
    let kind = prop::sample::select(OrderType::ALL);
    let display = prop::sample::select(Display::ALL);
    (
        order_header(),
        side(),
        any::<u32>(),
        stock(),
        any::<u32>(),
        tif,
        kind,
        display,
    )
}

fn order_repr() -> impl Strategy<Value = order::Repr> {
    use order::*;
    prop_oneof![
        enter_fields().prop_map(|(h, side, shares, stock, price, tif, kind, display)| {
            Repr::from(Enter {
                header: h,
                side,
                shares,
                stock,
                price,
                time_in_force: tif,
                order_type: kind,
                display,
            })
        }),
        (order_header(), any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(h, o, s, p)| {
            Replace {
                header: h,
                orig_client_order_id: o,
                shares: s,
                price: p,
            }
            .into()
        }),
        (order_header(), any::<u64>(), any::<u32>()).prop_map(|(h, o, s)| {
            Cancel {
                header: h,
                orig_client_order_id: o,
                shares: s,
            }
            .into()
        }),
        (enter_fields(), any::<u64>()).prop_map(
            |((h, side, shares, stock, price, tif, kind, display), order_ref)| {
                Accepted {
                    header: h,
                    side,
                    shares,
                    stock,
                    price,
                    time_in_force: tif,
                    order_type: kind,
                    display,
                    order_ref,
                }
                .into()
            }
        ),
        (
            order_header(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>()
        )
            .prop_map(|(h, o, s, p, r)| {
                Replaced {
                    header: h,
                    orig_client_order_id: o,
                    shares: s,
                    price: p,
                    order_ref: r,
                }
                .into()
            }),
        (
            order_header(),
            any::<u64>(),
            any::<u32>(),
            prop::sample::select(CancelReason::ALL)
        )
            .prop_map(|(h, o, s, r)| {
                Canceled {
                    header: h,
                    orig_client_order_id: o,
                    canceled_shares: s,
                    reason: r,
                }
                .into()
            }),
        (
            order_header(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            prop::sample::select(Liquidity::ALL),
            any::<u32>()
        )
            .prop_map(|(h, s, p, m, l, left)| {
                Executed {
                    header: h,
                    shares: s,
                    price: p,
                    match_number: m,
                    liquidity: l,
                    leaves_shares: left,
                }
                .into()
            }),
        (order_header(), prop::sample::select(RejectReason::ALL)).prop_map(|(h, r)| Rejected {
            header: h,
            reason: r
        }
        .into()),
    ]
}

fn jasper_header() -> impl Strategy<Value = JasperHeader> {
    (any::<u64>(), time(), time(), 0..=market::FLAGS_KNOWN).prop_map(|(s, t, d, flags)| {
        JasperHeader {
            packet_seq: s,
            send_time: t,
            deadline: d,
            flags,
        }
    })
}

/// Every decoder in the crate, run over `bytes`; returns nothing, must not panic.
fn decode_everything(bytes: &[u8]) {
    let _ = classify(bytes);
    let _ = Message::parse(bytes);
    let _ = itch::Header::parse(bytes);
    let _ = JasperHeader::parse(bytes);
    let _ = mold::Request::parse(bytes);
    if let Ok(p) = MoldPacket::new_checked(bytes) {
        let mut n = 0;
        for m in p.messages() {
            let _ = Message::parse(m);
            n += 1;
        }
        assert_eq!(n, usize::from(p.message_count()));
        let _ = (
            p.session(),
            p.sequence(),
            p.next_sequence(),
            p.is_heartbeat(),
        );
    }
    if let Ok(md) = wire::parse_market_data(bytes) {
        assert_eq!(classify(bytes), Kind::MarketData);
        assert_eq!(md.messages().count(), usize::from(md.message_count()));
        for m in md.messages() {
            let _ = Message::parse(m);
        }
    }
    if let Ok(r) = control::Repr::parse(bytes) {
        assert_eq!(classify(bytes), Kind::Control);
        assert_eq!(r.buffer_len(), bytes.len());
    }
    if let Ok(r) = order::Repr::parse(bytes) {
        assert_eq!(classify(bytes), Kind::Order);
        assert_eq!(r.buffer_len(), bytes.len());
    }
    if let Ok(p) = order::Packet::new_checked(bytes) {
        let _ = (p.header(), p.direction(), p.msg_type());
    }
    if let Ok(h) = wire::hop::Hop::parse(bytes) {
        assert_eq!(classify(bytes), Kind::Hop);
        assert!(order::Packet::new_checked(h.order).is_ok());
    }
    if let Ok(r) = wire::response::Response::parse(bytes) {
        assert_eq!(classify(bytes), Kind::Response);
        assert!(r.seq > 0);
        assert!(order::Packet::new_checked(r.order).is_ok());
    }
    if let Ok(r) = wire::report::Report::parse(bytes) {
        assert_eq!(
            classify(bytes),
            Kind::Unknown,
            "a report is for the monitor only"
        );
        assert_eq!(r.records().count(), r.len());
        assert_eq!(
            bytes.len(),
            wire::report::HEADER_LEN + r.len() * wire::report::RECORD_LEN
        );
    }
    let _ = wire::pcap::ethernet_udp(bytes);
    let _ = wire::pcap::ipv4_udp(bytes);
    if let Ok(r) = wire::pcap::Reader::new(bytes) {
        for rec in r.clone().take(64).flatten() {
            let _ = r.udp(&rec);
        }
    }
}

/// Valid encodings of every format, for mutation.
fn valid_datagram() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        itch_bytes(),
        control_repr().prop_map(|r| {
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b).unwrap();
            b
        }),
        order_repr().prop_map(|r| {
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b).unwrap();
            b
        }),
        (jasper_header(), prop::collection::vec(itch_bytes(), 0..8)).prop_map(|(h, msgs)| {
            let mut buf = vec![0u8; mold::PAYLOAD_MAX];
            let mut b = MarketDataBuilder::new(&mut buf, Session::default(), 1);
            for m in &msgs {
                let _ = b.push(&Raw(m));
            }
            let len = b.finish(&h).unwrap();
            buf.truncate(len);
            buf
        }),
        (order_repr(), 1..u64::MAX).prop_map(|(r, seq)| {
            let mut b = vec![0u8; wire::response::HEADER_LEN + r.buffer_len()];
            wire::response::emit(&mut b, seq, &r).unwrap();
            b
        }),
        (
            any::<u32>(),
            session(),
            1..u64::MAX,
            prop::collection::vec(release_record(), 1..=wire::report::RECORDS_MAX)
        )
            .prop_map(|(gateway, session, seq, records)| {
                let mut b = vec![0u8; wire::report::DATAGRAM_MAX];
                let len = wire::report::emit(&mut b, gateway, session, seq, &records).unwrap();
                b.truncate(len);
                b
            }),
    ]
}

fn release_record() -> impl Strategy<Value = wire::report::ReleaseRecord> {
    (any::<(u64, u64, u16, bool, bool)>(), time(), time(), time()).prop_map(
        |((packet_seq, sequence, messages, late, recovered), send_time, received, released)| {
            wire::report::ReleaseRecord {
                packet_seq,
                sequence,
                messages,
                late,
                recovered,
                send_time,
                received,
                released,
            }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// bytes → Message → bytes is the identity, for every type and any field values; and
    /// Message → bytes → Message too.
    #[test]
    fn itch_round_trip(bytes in itch_bytes()) {
        let msg = Message::parse(&bytes).unwrap();
        prop_assert_eq!(msg.msg_type(), bytes[0]);
        prop_assert_eq!(msg.buffer_len(), bytes.len());
        let mut out = vec![0u8; msg.buffer_len() + 3];
        prop_assert_eq!(msg.emit(&mut out), Ok(bytes.len()));
        prop_assert_eq!(&out[..bytes.len()], &bytes[..]);
        prop_assert_eq!(&out[bytes.len()..], &[0, 0, 0]);
        prop_assert_eq!(Message::parse(&out[..bytes.len()]), Ok(msg));
        prop_assert_eq!(msg.emit(&mut out[..bytes.len() - 1]), Err(Error::BufferTooSmall));
        prop_assert_eq!(Message::parse(&bytes[..bytes.len() - 1]), Err(Error::Truncated));
    }

    /// A timestamp that does not fit 48 bits is refused, not truncated.
    #[test]
    fn itch_timestamp_range(bytes in itch_bytes(), high in (1u64 << 48)..) {
        let msg = match Message::parse(&bytes).unwrap() {
            Message::AddOrder(mut a) => Message::AddOrder({ a.timestamp_ns = high; a }),
            Message::OrderDelete(mut d) => Message::OrderDelete({ d.timestamp_ns = high; d }),
            Message::SystemEvent(mut s) => Message::SystemEvent({ s.timestamp_ns = high; s }),
            other => {
                prop_assert!(other.header().timestamp_ns < itch::TIMESTAMP_LIMIT);
                return Ok(());
            }
        };
        let mut out = vec![0u8; 64];
        prop_assert_eq!(msg.emit(&mut out), Err(Error::OutOfRange));
    }

    #[test]
    fn control_round_trip(r in control_repr()) {
        let mut buf = vec![0u8; r.buffer_len()];
        prop_assert_eq!(r.emit(&mut buf), Ok(r.buffer_len()));
        prop_assert_eq!(classify(&buf), Kind::Control);
        prop_assert_eq!(control::Repr::parse(&buf), Ok(r));
        let p = control::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.msg_type(), r.msg_type());
        prop_assert_eq!(control::Repr::parse_packet(&p), r);
    }

    #[test]
    fn order_round_trip(r in order_repr()) {
        let mut buf = vec![0u8; r.buffer_len()];
        prop_assert_eq!(r.emit(&mut buf), Ok(r.buffer_len()));
        prop_assert_eq!(classify(&buf), Kind::Order);
        prop_assert_eq!(order::Repr::parse(&buf), Ok(r));
        let p = order::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.header(), *r.header());
        prop_assert_eq!(p.direction(), r.direction());
    }

    #[test]
    fn hop_round_trip(r in order_repr(), t in time(), attempt in any::<u16>()) {
        let mut buf = vec![0u8; wire::hop::HEADER_LEN + r.buffer_len()];
        let len = wire::hop::emit(&mut buf, t, attempt, &r).unwrap();
        prop_assert_eq!(len, buf.len());
        match wire::hop::Hop::parse(&buf) {
            Ok(h) => {
                prop_assert_eq!(r.direction(), order::Direction::Up);
                prop_assert_eq!(h.send_time, t);
                prop_assert_eq!(h.attempt, attempt);
                prop_assert_eq!(order::Repr::parse(h.order), Ok(r));
            }
            Err(e) => {
                prop_assert_eq!(r.direction(), order::Direction::Down);
                prop_assert_eq!(e, Error::Malformed);
            }
        }
    }

    /// A numbered response holds exactly one downward message, and its number survives.
    #[test]
    fn response_round_trip(r in order_repr(), seq in 1..u64::MAX) {
        let mut buf = vec![0u8; wire::response::HEADER_LEN + r.buffer_len()];
        let len = wire::response::emit(&mut buf, seq, &r).unwrap();
        prop_assert_eq!(len, buf.len());
        prop_assert_eq!(classify(&buf), Kind::Response);
        match wire::response::Response::parse(&buf) {
            Ok(p) => {
                prop_assert_eq!(r.direction(), order::Direction::Down);
                prop_assert_eq!(p.seq, seq);
                prop_assert_eq!(order::Repr::parse(p.order), Ok(r));
            }
            Err(e) => {
                prop_assert_eq!(r.direction(), order::Direction::Up);
                prop_assert_eq!(e, Error::Malformed);
            }
        }
    }

    #[test]
    fn jasper_header_round_trip(h in jasper_header()) {
        let mut buf = [0u8; market::HEADER_LEN];
        prop_assert_eq!(wire::Emit::emit(&h, &mut buf), Ok(market::HEADER_LEN));
        prop_assert_eq!(JasperHeader::parse(&buf), Ok(h));
    }

    #[test]
    fn mold_request_round_trip(s in session(), seq in any::<u64>(), count in any::<u16>()) {
        let r = mold::Request { session: s, sequence: seq, count };
        let mut buf = [0u8; mold::HEADER_LEN];
        prop_assert_eq!(wire::Emit::emit(&r, &mut buf), Ok(mold::HEADER_LEN));
        prop_assert_eq!(mold::Request::parse(&buf), Ok(r));
    }

    /// Any list of bodies: the builder takes a prefix that fits in PAYLOAD_MAX, refuses the
    /// first one that does not, and the packet reads back that prefix.
    #[test]
    fn mold_builder_round_trip(
        s in session(),
        seq in any::<u64>(),
        bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..12),
        buf_len in mold::HEADER_LEN..2000,
    ) {
        let mut buf = vec![0u8; buf_len];
        let mut b = MoldBuilder::new(&mut buf, s, seq);
        let mut taken = 0;
        for body in &bodies {
            match b.push(&Raw(body)) {
                Ok(()) => taken += 1,
                Err(e) => {
                    prop_assert_eq!(e, Error::Full);
                    prop_assert!(b.len() + 2 + body.len() > buf_len.min(mold::PAYLOAD_MAX));
                    break;
                }
            }
        }
        prop_assert!(b.len() <= mold::PAYLOAD_MAX);
        let len = b.finish();
        let p = MoldPacket::new_checked(&buf[..len]).unwrap();
        prop_assert_eq!((p.session(), p.sequence(), usize::from(p.count())), (s, seq, taken));
        let read: Vec<&[u8]> = p.messages().collect();
        let want: Vec<&[u8]> = bodies[..taken].iter().map(Vec::as_slice).collect();
        prop_assert_eq!(read, want);
    }

    #[test]
    fn market_data_round_trip(
        h in jasper_header(),
        seq in any::<u64>(),
        msgs in prop::collection::vec(itch_bytes(), 0..40),
    ) {
        let mut buf = [0u8; mold::PAYLOAD_MAX];
        let mut b = MarketDataBuilder::new(&mut buf, Session::default(), seq);
        let parsed: Vec<Message> = msgs.iter().map(|m| Message::parse(m).unwrap()).collect();
        let mut taken = 0;
        for m in &parsed {
            if b.push(m).is_err() {
                break;
            }
            taken += 1;
        }
        let len = b.finish(&h).unwrap();
        prop_assert!(len <= mold::PAYLOAD_MAX);
        let md = wire::parse_market_data(&buf[..len]).unwrap();
        prop_assert_eq!(md.header, h);
        prop_assert_eq!(md.mold.sequence(), seq);
        prop_assert_eq!(usize::from(md.message_count()), taken);
        let read: Vec<Message> = md.messages().map(|m| Message::parse(m).unwrap()).collect();
        prop_assert_eq!(&read[..], &parsed[..taken]);
    }

    /// A release report round-trips: gateway, session, number and every record, in order.
    #[test]
    fn report_round_trip(
        gateway in any::<u32>(),
        session in session(),
        seq in 1..u64::MAX,
        records in prop::collection::vec(release_record(), 1..=wire::report::RECORDS_MAX),
    ) {
        let mut b = vec![0u8; wire::report::DATAGRAM_MAX];
        let len = wire::report::emit(&mut b, gateway, session, seq, &records).unwrap();
        let report = wire::report::Report::parse(&b[..len]).unwrap();
        prop_assert_eq!(report.gateway, gateway);
        prop_assert_eq!(report.session, session);
        prop_assert_eq!(report.seq, seq);
        prop_assert_eq!(report.records().collect::<Vec<_>>(), records);
    }

    /// Arbitrary bytes never make any decoder panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1600)) {
        decode_everything(&bytes);
    }

    /// Nor do valid encodings with bytes changed, cut or appended (to get past the first
    /// checks).
    #[test]
    fn mutated_valid_input_never_panics(
        mut bytes in valid_datagram(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        tail in prop::collection::vec(any::<u8>(), 0..4),
    ) {
        decode_everything(&bytes);
        for (at, v) in &edits {
            let i = at.index(bytes.len().max(1));
            if let Some(b) = bytes.get_mut(i) {
                *b = *v;
            }
        }
        decode_everything(&bytes);
        decode_everything(&bytes[..cut.index(bytes.len() + 1)]);
        bytes.extend_from_slice(&tail);
        decode_everything(&bytes);
    }
}
