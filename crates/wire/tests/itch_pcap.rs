//! Decodes every ITCH message in the real NASDAQ captures in `../shared/data/itch` and checks
//! their fields. Expected values were read from the captures' bytes with an independent
//! decoder (a few lines of Python `struct`), not from this crate.

use std::path::{Path, PathBuf};
use wire::itch::{self, Message};
use wire::mold::{MoldPacket, Session};
use wire::{ExchangeTime, JasperHeader, MarketDataBuilder, Raw, Side, Stock, parse_market_data};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/itch")
}

fn read(name: &str) -> Vec<u8> {
    let path = data_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "real ITCH capture {} is missing ({e}); these tests need shared/data beside the \
             repository (see shared/data/README.md)",
            path.display()
        )
    })
}

/// The MoldUDP64 payloads of every frame of a capture.
fn payloads(file: &[u8]) -> Vec<Vec<u8>> {
    let reader = wire::pcap::Reader::new(file).expect("pcap header");
    assert!(reader.is_nanos(), "the captures use the nanosecond magic");
    reader
        .clone()
        .map(|rec| {
            let rec = rec.expect("whole record");
            reader
                .udp(&rec)
                .expect("Ethernet/VLAN/IPv4/UDP frame")
                .payload
                .to_vec()
        })
        .collect()
}

/// Every ITCH message of a capture, with its raw bytes.
fn messages(name: &str) -> Vec<(Message, Vec<u8>)> {
    let mut out = Vec::new();
    for payload in payloads(&read(name)) {
        let packet = MoldPacket::new_checked(&payload[..]).expect("valid MoldUDP64 packet");
        for body in packet.messages() {
            let msg = Message::parse(body).unwrap_or_else(|e| panic!("{name}: {e}: {body:02x?}"));
            out.push((msg, body.to_vec()));
        }
    }
    out
}

const FILES: [(&str, u8, usize); 12] = [
    ("AddOrderNoMPID.pcap", b'A', 5),
    ("AddOrderWithMPID.pcap", b'F', 5),
    ("CrossTrade.pcap", b'Q', 5),
    ("NonCrossTrade.pcap", b'P', 5),
    ("OrderCancel.pcap", b'X', 5),
    ("OrderDelete.pcap", b'D', 5),
    ("OrderExecuted.pcap", b'E', 5),
    ("OrderExecutedWithPrice.pcap", b'C', 5),
    ("OrderReplace.pcap", b'U', 5),
    ("StockTradingAction.pcap", b'H', 5),
    ("SystemEvent.pcap", b'S', 1),
    ("MultiplePackets.pcap", 0, 39),
];

#[test]
fn every_message_in_every_capture_decodes_and_reencodes() {
    let mut on_disk: Vec<String> = std::fs::read_dir(data_dir())
        .unwrap_or_else(|e| panic!("{} is missing: {e}", data_dir().display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = FILES.iter().map(|f| f.0.to_string()).collect();
    expected.sort();
    assert_eq!(on_disk, expected, "every capture is covered");

    let mut total = 0;
    for (name, msg_type, count) in FILES {
        let msgs = messages(name);
        assert_eq!(msgs.len(), count, "{name}");
        for (msg, bytes) in &msgs {
            if msg_type != 0 {
                assert_eq!(msg.msg_type(), msg_type, "{name}");
            }
            assert_eq!(Some(bytes.len()), Message::len_of(msg.msg_type()));
            let header = msg.header();
            // 09:29:59 .. 09:31 Eastern: the captures are around the open.
            assert!((34_199_000_000_000..34_300_000_000_000).contains(&header.timestamp_ns));
            assert_eq!(header, itch::Header::parse(bytes).unwrap());
            let mut out = vec![0u8; msg.buffer_len()];
            assert_eq!(msg.emit(&mut out), Ok(bytes.len()));
            assert_eq!(&out, bytes, "{name}: re-encoding gives the captured bytes");
        }
        total += msgs.len();
    }
    assert_eq!(total, 10 * 5 + 1 + 39);
}

#[test]
fn add_order_no_mpid() {
    let msgs = messages("AddOrderNoMPID.pcap");
    let Message::AddOrder(a) = msgs[0].0 else {
        panic!("not an A: {:?}", msgs[0].0)
    };
    assert_eq!(a.stock_locate, 5528);
    assert_eq!(a.tracking_number, 0);
    assert_eq!(a.timestamp_ns, 34_199_999_894_278);
    assert_eq!(a.order_ref, 23_508_286);
    assert_eq!(a.side, Side::Buy);
    assert_eq!(a.shares, 1600);
    assert_eq!(a.stock, Stock::new("IVOO").unwrap());
    assert_eq!(a.price, 873_900);
}

#[test]
fn add_order_with_mpid() {
    let Message::AddOrderMpid(f) = messages("AddOrderWithMPID.pcap")[0].0 else {
        panic!()
    };
    assert_eq!(f.stock_locate, 1738);
    assert_eq!(f.timestamp_ns, 34_199_999_977_782);
    assert_eq!(f.order_ref, 18_923_125);
    assert_eq!(f.side, Side::Sell);
    assert_eq!(f.shares, 100);
    assert_eq!(f.stock.as_str(), Some("CASY"));
    assert_eq!(f.price, 2_555_200);
    assert_eq!(&f.attribution, b"FLTU");
}

#[test]
fn cross_trade() {
    let msgs = messages("CrossTrade.pcap");
    let Message::CrossTrade(q) = msgs[0].0 else {
        panic!()
    };
    assert_eq!(q.stock_locate, 983);
    assert_eq!(q.shares, 0);
    assert_eq!(q.stock.as_str(), Some("BAC-Q"));
    let Message::CrossTrade(q) = msgs[2].0 else {
        panic!()
    };
    assert_eq!(q.stock_locate, 8231);
    assert_eq!(q.tracking_number, 2);
    assert_eq!(q.shares, 5577);
    assert_eq!(q.stock.as_str(), Some("PTGX"));
    assert_eq!(q.cross_price, 195_600);
    assert_eq!(q.match_number, 255_561);
    assert_eq!(q.cross_type, b'O');
}

#[test]
fn non_cross_trade() {
    let Message::Trade(p) = messages("NonCrossTrade.pcap")[0].0 else {
        panic!()
    };
    assert_eq!(p.stock_locate, 4499);
    assert_eq!(p.tracking_number, 2);
    assert_eq!(p.order_ref, 0);
    assert_eq!(p.side, Side::Buy);
    assert_eq!(p.shares, 100);
    assert_eq!(p.stock.as_str(), Some("GOOGL"));
    assert_eq!(p.price, 1_284_600);
    assert_eq!(p.match_number, 255_554);
}

#[test]
fn cancel_delete_executed() {
    let Message::OrderCancel(x) = messages("OrderCancel.pcap")[0].0 else {
        panic!()
    };
    assert_eq!(
        (x.stock_locate, x.order_ref, x.cancelled_shares),
        (9413, 33_823_232, 100)
    );
    let Message::OrderDelete(d) = messages("OrderDelete.pcap")[0].0 else {
        panic!()
    };
    assert_eq!((d.stock_locate, d.order_ref), (3353, 23_442_714));
    assert_eq!(d.timestamp_ns, 34_199_999_889_645);
    let Message::OrderExecuted(e) = messages("OrderExecuted.pcap")[0].0 else {
        panic!()
    };
    assert_eq!((e.stock_locate, e.tracking_number), (2345, 2));
    assert_eq!(
        (e.order_ref, e.executed_shares, e.match_number),
        (23_499_418, 25, 255_547)
    );
}

#[test]
fn executed_with_price_matches_the_cross() {
    let Message::OrderExecutedWithPrice(c) = messages("OrderExecutedWithPrice.pcap")[0].0 else {
        panic!()
    };
    assert_eq!(c.stock_locate, 5092);
    assert_eq!(c.order_ref, 19_993_566);
    assert_eq!(c.executed_shares, 4926);
    assert_eq!(c.match_number, 255_581);
    assert_eq!(c.printable, b'N');
    assert_eq!(c.execution_price, 224_800);
    // The same instant's cross (CrossTrade.pcap, 5th) has the same locate and price.
    let Message::CrossTrade(q) = messages("CrossTrade.pcap")[4].0 else {
        panic!()
    };
    assert_eq!(
        (q.stock_locate, q.timestamp_ns),
        (c.stock_locate, c.timestamp_ns)
    );
    assert_eq!(q.cross_price, c.execution_price);
}

#[test]
fn replace_trading_action_system_event() {
    let Message::OrderReplace(u) = messages("OrderReplace.pcap")[0].0 else {
        panic!()
    };
    assert_eq!(u.stock_locate, 7603);
    assert_eq!(
        (u.original_order_ref, u.new_order_ref),
        (15_108_479, 21_361_351)
    );
    assert_eq!((u.shares, u.price), (100, 1_062_600));
    let Message::StockTradingAction(h) = messages("StockTradingAction.pcap")[0].0 else {
        panic!()
    };
    assert_eq!(h.stock_locate, 11325);
    assert_eq!(h.stock.as_str(), Some("ZXZZT"));
    assert_eq!(
        (h.trading_state, h.reserved, &h.reason),
        (b'P', b' ', b"LUDP")
    );
    let Message::SystemEvent(s) = messages("SystemEvent.pcap")[0].0 else {
        panic!()
    };
    assert_eq!(
        (s.stock_locate, s.timestamp_ns, s.event_code),
        (0, 34_200_000_070_384, b'Q')
    );
}

#[test]
fn multiple_packets_sequencing() {
    let payloads = payloads(&read("MultiplePackets.pcap"));
    assert_eq!(payloads.len(), 2);
    let session = Session(*b"000010059B");

    let p = MoldPacket::new_checked(&payloads[0][..]).unwrap();
    assert_eq!(
        (p.session(), p.sequence(), p.count()),
        (session, 14_764_496, 1)
    );
    let Message::OrderDelete(d) = Message::parse(p.messages().next().unwrap()).unwrap() else {
        panic!()
    };
    assert_eq!((d.stock_locate, d.order_ref), (2737, 23_485_802));

    let p = MoldPacket::new_checked(&payloads[1][..]).unwrap();
    assert_eq!(
        (p.session(), p.sequence(), p.count()),
        (session, 19_009_117, 38)
    );
    assert_eq!(p.next_sequence(), 19_009_117 + 38);
    let msgs: Vec<Message> = p.messages().map(|m| Message::parse(m).unwrap()).collect();
    assert_eq!(msgs.len(), 38);
    assert!(msgs.iter().all(|m| matches!(m.msg_type(), b'A' | b'F')));
    assert!(msgs.iter().any(|m| m.msg_type() == b'A'));
    assert!(msgs.iter().any(|m| m.msg_type() == b'F'));
    let Message::AddOrder(a) = msgs[0] else {
        panic!()
    };
    assert_eq!(
        (a.stock_locate, a.order_ref, a.side),
        (6514, 7_942_047, Side::Buy)
    );
    assert_eq!(
        (a.shares, a.stock.as_str(), a.price),
        (1, Some("META"), 805_200)
    );
}

/// Real messages reframed as a Jasper market-data packet read back identically.
#[test]
fn real_messages_through_a_jasper_packet() {
    let msgs = messages("MultiplePackets.pcap");
    let mut buf = [0u8; wire::mold::PAYLOAD_MAX];
    let session = Session::new("JASPER1").unwrap();
    let mut b = MarketDataBuilder::new(&mut buf, session, 500);
    let mut pushed = 0;
    for (msg, _) in &msgs {
        if b.push(msg).is_err() {
            break;
        }
        pushed += 1;
    }
    assert!(pushed > 20, "a 1400-byte packet holds more than 20 adds");
    let header = JasperHeader {
        packet_seq: 3,
        send_time: ExchangeTime(10),
        deadline: ExchangeTime(20),
        flags: 0,
    };
    let len = b.finish(&header).unwrap();
    assert!(len <= wire::mold::PAYLOAD_MAX);
    let md = parse_market_data(&buf[..len]).unwrap();
    assert_eq!(md.header, header);
    assert_eq!(usize::from(md.message_count()), pushed);
    assert_eq!(md.next_sequence(), 500 + 1 + pushed as u64);
    for (body, (msg, bytes)) in md.messages().zip(&msgs) {
        assert_eq!(body, &bytes[..]);
        assert_eq!(Message::parse(body).unwrap(), *msg);
    }
    // A standard MoldUDP64 reader sees the header as one opaque message of type 'j'.
    let mold = MoldPacket::new_checked(&buf[..len]).unwrap();
    let first = mold.messages().next().unwrap();
    assert_eq!(first[0], b'j');
    assert_eq!(Message::parse(first), Err(wire::Error::UnknownType(b'j')));
    // Raw forwarding of the same bodies gives the same bytes.
    let mut buf2 = [0u8; wire::mold::PAYLOAD_MAX];
    let mut b2 = MarketDataBuilder::new(&mut buf2, session, 500);
    for body in md.messages() {
        b2.push(&Raw(body)).unwrap();
    }
    assert_eq!(b2.finish(&header).unwrap(), len);
    assert_eq!(buf2[..len], buf[..len]);
}
