//! Encode/decode throughput of the wire formats: ns per message and messages per second.
//!
//! `CARGO_TARGET_DIR=/work/target-wire cargo bench -p wire --bench codec`
//!
//! Criterion reports time per iteration and, via `Throughput::Elements`, messages per second;
//! ns per message = time per iteration / messages per iteration (printed below each group's
//! name). The ITCH mix is every message of the real NASDAQ captures in
//! `../shared/data/itch` (90 messages: A, F, E, C, X, D, U, P, Q, H, S).

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use std::path::Path;
use wire::itch::{AddOrder, Message};
use wire::mold::{MoldPacket, PAYLOAD_MAX, Session};
use wire::order::{self, Display, Enter, OrderHeader, OrderType, TimeInForce};
use wire::{
    Emit, ExchangeTime, JasperHeader, MarketDataBuilder, Side, Stock, control, parse_market_data,
};

/// Every ITCH message body in the real captures.
fn real_messages() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/itch");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{} missing ({e}): benches need shared/data", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for path in names {
        let file = std::fs::read(&path).unwrap();
        let reader = wire::pcap::Reader::new(&file).unwrap();
        for rec in reader.clone() {
            let udp = reader.udp(&rec.unwrap()).unwrap();
            let packet = MoldPacket::new_checked(udp.payload).unwrap();
            out.extend(packet.messages().map(<[u8]>::to_vec));
        }
    }
    assert_eq!(out.len(), 90);
    out
}

fn add(i: u64) -> AddOrder {
    AddOrder {
        stock_locate: 5528,
        tracking_number: 0,
        timestamp_ns: 34_200_000_000_000 + i,
        order_ref: 23_508_286 + i,
        side: if i.is_multiple_of(2) {
            Side::Buy
        } else {
            Side::Sell
        },
        shares: 100,
        stock: Stock::new("IVOO").unwrap(),
        price: 873_900 + i as u32,
    }
}

fn itch(c: &mut Criterion) {
    let bodies = real_messages();
    let msgs: Vec<Message> = bodies.iter().map(|b| Message::parse(b).unwrap()).collect();
    let n = msgs.len() as u64;
    let mut g = c.benchmark_group(format!("itch ({n} real messages per iteration)"));
    g.throughput(Throughput::Elements(n));
    g.bench_function("decode", |b| {
        b.iter(|| {
            for body in &bodies {
                black_box(Message::parse(black_box(body)).unwrap());
            }
        })
    });
    let mut out = [0u8; 64];
    g.bench_function("encode", |b| {
        b.iter(|| {
            for m in &msgs {
                black_box(black_box(m).emit(&mut out).unwrap());
            }
        })
    });
    g.finish();
}

fn market_data(c: &mut Criterion) {
    let header = JasperHeader {
        packet_seq: 1,
        send_time: ExchangeTime(1_000),
        deadline: ExchangeTime(51_000),
        flags: 0,
    };
    let session = Session::new("JASPER").unwrap();
    let adds: Vec<Message> = (0..64).map(|i| add(i).into()).collect();
    // A full packet of Add Orders.
    let mut buf = [0u8; PAYLOAD_MAX];
    let mut b = MarketDataBuilder::new(&mut buf, session, 1);
    let per_packet = adds.iter().take_while(|m| b.push(*m).is_ok()).count() as u64;
    let len = b.finish(&header).unwrap();
    let packet = buf[..len].to_vec();

    let mut g = c.benchmark_group(format!(
        "market data ({per_packet} adds per 1400-byte packet)"
    ));
    g.throughput(Throughput::Elements(per_packet));
    g.bench_function("build packet", |bench| {
        let mut out = [0u8; PAYLOAD_MAX];
        bench.iter(|| {
            let mut b = MarketDataBuilder::new(&mut out, session, 1);
            for m in &adds[..per_packet as usize] {
                b.push(black_box(m)).unwrap();
            }
            black_box(b.finish(&header).unwrap())
        })
    });
    g.bench_function("parse packet + messages", |bench| {
        bench.iter(|| {
            let md = parse_market_data(black_box(&packet)).unwrap();
            for body in md.messages() {
                black_box(Message::parse(body).unwrap());
            }
        })
    });
    g.finish();
}

fn control_and_order(c: &mut Criterion) {
    let probe = control::Repr::ClockReply {
        probe_id: 7,
        pair_index: 1,
        responder: 0,
        t1_send: ExchangeTime(1),
        t2_recv: ExchangeTime(2),
        t3_send: ExchangeTime(3),
        converged: true,
        unsynced: false,
    };
    let enter = order::Repr::Enter(Enter {
        header: OrderHeader {
            client_order_id: 99,
            participant_id: 12,
            gateway_id: 24,
            time: ExchangeTime(5),
        },
        side: Side::Buy,
        shares: 100,
        stock: Stock::new("IVOO").unwrap(),
        price: 873_900,
        time_in_force: TimeInForce::ImmediateOrCancel,
        order_type: OrderType::Limit,
        display: Display::Visible,
    });
    let mut g = c.benchmark_group("control and order (1 message per iteration)");
    g.throughput(Throughput::Elements(1));
    let mut buf = [0u8; 64];
    for (name, repr) in [
        ("control ClockReply", &probe as &dyn Emit),
        ("order Enter", &enter),
    ] {
        g.bench_with_input(BenchmarkId::new("encode", name), repr, |b, r| {
            b.iter(|| black_box(black_box(r).emit(&mut buf).unwrap()))
        });
    }
    let len = probe.emit(&mut buf).unwrap();
    let bytes = buf[..len].to_vec();
    g.bench_function("decode/control ClockReply", |b| {
        b.iter(|| black_box(control::Repr::parse(black_box(&bytes)).unwrap()))
    });
    let len = enter.emit(&mut buf).unwrap();
    let bytes = buf[..len].to_vec();
    g.bench_function("decode/order Enter", |b| {
        b.iter(|| black_box(order::Repr::parse(black_box(&bytes)).unwrap()))
    });
    g.bench_function("decode/order Packet header only", |b| {
        b.iter(|| {
            black_box(
                order::Packet::new_checked(black_box(&bytes[..]))
                    .unwrap()
                    .header(),
            )
        })
    });
    g.finish();
}

/// Tick-to-trade in process (DESIGN.md §7): decode an Add Order, decide (sequence modulo k),
/// encode an Enter Order.
fn tick_to_trade(c: &mut Criterion) {
    let mut body = [0u8; AddOrder::LEN];
    add(3).emit(&mut body).unwrap();
    let mut out = [0u8; 64];
    let mut g = c.benchmark_group("tick to trade");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode A, decide, encode O", |b| {
        let mut seq = 0u64;
        b.iter(|| {
            seq += 1;
            let Ok(Message::AddOrder(a)) = Message::parse(black_box(&body)) else {
                panic!()
            };
            let side = if seq.is_multiple_of(3) {
                a.side
            } else {
                a.side.opposite()
            };
            let order = Enter {
                header: OrderHeader {
                    client_order_id: seq,
                    participant_id: 1,
                    gateway_id: 1,
                    time: ExchangeTime(a.timestamp_ns),
                },
                side,
                shares: a.shares,
                stock: a.stock,
                price: a.price,
                time_in_force: TimeInForce::ImmediateOrCancel,
                order_type: OrderType::Limit,
                display: Display::Visible,
            };
            black_box(order.emit(&mut out).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, itch, market_data, control_and_order, tick_to_trade);
criterion_main!(benches);
