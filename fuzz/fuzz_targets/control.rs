//! Control decoder: never panics; whatever parses re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::control::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let packet = Packet::new_checked(data);
    let Ok(r) = Repr::parse(data) else {
        assert!(packet.is_err());
        return;
    };
    assert_eq!(wire::classify(data), wire::Kind::Control);
    assert_eq!(packet.map(|p| Repr::parse_packet(&p)), Ok(r));
    let mut out = [0u8; 64];
    let n = r.emit(&mut out).expect("a parsed message re-emits");
    assert_eq!(&out[..n], data);
});
