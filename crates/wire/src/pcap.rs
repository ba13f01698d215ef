//! Classic pcap reader (follows).
