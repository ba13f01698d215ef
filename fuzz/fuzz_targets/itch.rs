//! ITCH 5.0 decoder: never panics; whatever parses re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::itch::{Header, Message};

fuzz_target!(|data: &[u8]| {
    let header = Header::parse(data);
    if let Ok(msg) = Message::parse(data) {
        assert_eq!(msg.buffer_len(), data.len());
        assert_eq!(Message::len_of(msg.msg_type()), Some(data.len()));
        let mut out = [0u8; 64];
        let n = msg.emit(&mut out).expect("a parsed message re-emits");
        assert_eq!(&out[..n], data);
        assert_eq!(Ok(msg.header()), header);
    }
});
