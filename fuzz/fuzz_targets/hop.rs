//! Hop envelope: never panics; a parsed envelope re-encodes to the same bytes, restamping
//! changes only the stamp, and the inner order parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::ExchangeTime;
use wire::hop::{self, Hop};
use wire::order::Repr;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = Hop::parse(data) else { return };
    assert_eq!(wire::classify(data), wire::Kind::Hop);
    let mut out = vec![0u8; data.len()];
    let inner = wire::Raw(h.order);
    assert_eq!(hop::emit(&mut out, h.send_time, &inner), Ok(data.len()));
    assert_eq!(out, data);
    let t = ExchangeTime(h.send_time.0.wrapping_add(1));
    hop::restamp(&mut out, t).unwrap();
    let again = Hop::parse(&out).unwrap();
    assert_eq!((again.send_time, again.order), (t, h.order));
    let _ = Repr::parse(h.order);
});
