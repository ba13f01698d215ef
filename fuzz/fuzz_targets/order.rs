//! Order-entry decoder: never panics; whatever parses re-encodes to the same bytes, and the
//! header-only view agrees with the full parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::order::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let packet = Packet::new_checked(data);
    let Ok(r) = Repr::parse(data) else { return };
    assert_eq!(wire::classify(data), wire::Kind::Order);
    let packet = packet.expect("the view admits what the full parse admits");
    assert_eq!(packet.header(), *r.header());
    assert_eq!(packet.direction(), r.direction());
    let mut out = [0u8; 64];
    let n = r.emit(&mut out).expect("a parsed message re-emits");
    assert_eq!(&out[..n], data);
});
