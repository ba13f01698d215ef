//! Jasper market-data packets: never panic; a parsed packet is rebuilt byte for byte, and
//! every ITCH message in it that parses re-encodes to its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::itch::Message;
use wire::{MarketDataBuilder, Raw, mold, parse_market_data};

fuzz_target!(|data: &[u8]| {
    let Ok(md) = parse_market_data(data) else {
        return;
    };
    assert_eq!(wire::classify(data), wire::Kind::MarketData);
    let mut n = 0;
    for body in md.messages() {
        n += 1;
        if let Ok(msg) = Message::parse(body) {
            let mut out = [0u8; 64];
            let len = msg.emit(&mut out).expect("a parsed message re-emits");
            assert_eq!(&out[..len], body);
        }
    }
    assert_eq!(n, usize::from(md.message_count()));
    if data.len() <= mold::PAYLOAD_MAX {
        let mut out = vec![0u8; data.len()];
        let mut b = MarketDataBuilder::new(&mut out, md.session(), md.mold.sequence());
        for body in md.messages() {
            b.push(&Raw(body)).expect("fits: the original did");
        }
        assert_eq!(b.finish(&md.header), Ok(data.len()));
        assert_eq!(out, data);
    }
});
