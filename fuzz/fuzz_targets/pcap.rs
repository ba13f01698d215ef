//! pcap + Ethernet/VLAN/IPv4/UDP reader: never panics; payloads lie within the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::pcap::{Reader, ethernet_udp, ipv4_udp};

fuzz_target!(|data: &[u8]| {
    for udp in [ethernet_udp(data), ipv4_udp(data)].into_iter().flatten() {
        assert!(udp.payload.len() <= data.len());
    }
    let Ok(reader) = Reader::new(data) else {
        return;
    };
    let mut seen = 0;
    for record in reader.clone() {
        let Ok(record) = record else { break };
        seen += record.data.len() + 16;
        assert!(seen + 24 <= data.len());
        if let Ok(udp) = reader.udp(&record) {
            let _ = wire::classify(udp.payload);
            let _ = wire::parse_market_data(udp.payload);
        }
    }
});
