//! MoldUDP64 view: never panics; a checked packet iterates exactly `count` messages, and the
//! builder reproduces it byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::Raw;
use wire::mold::{self, MoldBuilder, MoldPacket, Request};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Request::parse(data) {
        let mut out = [0u8; mold::HEADER_LEN];
        wire::Emit::emit(&r, &mut out).unwrap();
        assert_eq!(&out[..], data);
    }
    let Ok(p) = MoldPacket::new_checked(data) else {
        return;
    };
    let bodies: Vec<&[u8]> = p.messages().collect();
    assert_eq!(bodies.len(), usize::from(p.message_count()));
    let mut out = vec![0u8; data.len()];
    if p.is_heartbeat() {
        assert_eq!(
            mold::emit_heartbeat(&mut out, p.session(), p.sequence()),
            Ok(data.len())
        );
    } else if p.is_end_of_session() {
        assert_eq!(
            mold::emit_end_of_session(&mut out, p.session(), p.sequence()),
            Ok(data.len())
        );
    } else if data.len() <= mold::PAYLOAD_MAX {
        let mut b = MoldBuilder::new(&mut out, p.session(), p.sequence());
        for body in &bodies {
            b.push(&Raw(body)).expect("fits: the original did");
        }
        assert_eq!(b.next_sequence(), p.next_sequence());
        assert_eq!(b.finish(), data.len());
    } else {
        return;
    }
    assert_eq!(out, data);
});
