//! Parameters shared by every node role, with the defaults of DESIGN.md §4.

use core::time::Duration;

use serde::{Deserialize, Serialize};
use wire::Session;

use crate::clock::ClockConfig;
use crate::order_queue::Discipline;
use crate::owd::OwdConfig;
use crate::pacing::PacingConfig;
use crate::sequencer::SequencerConfig;

/// Everything a node needs besides the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeConfig {
    /// MoldUDP64 session name (10 ASCII characters, space-padded).
    pub session: String,
    /// Gateways hold packets until their deadline (off: release on receipt, in order).
    pub hold_and_release: bool,
    /// OWD reports and deadlines.
    pub owd: OwdConfig,
    /// Clock sync.
    pub clock: ClockConfig,
    /// Dedupe window, in packets.
    pub dedupe_window: u64,
    /// Packets a gateway holds at most ahead of the next one to release.
    pub held_max: usize,
    /// Datagrams a node queues for sending at most.
    pub outbox_max: usize,
    /// Events a node queues for its driver at most (more are counted as lost).
    pub events_max: usize,
    /// Packets the root's rewinder keeps for retransmission.
    pub rewinder_packets: usize,
    /// How long a gateway waits for a missing packet before asking the rewinder.
    #[serde(with = "humantime_serde")]
    pub gap_grace: Duration,
    /// How long a gateway waits for a retransmission before asking again.
    #[serde(with = "humantime_serde")]
    pub gap_retry: Duration,
    /// Requests for one gap before the gateway skips it.
    pub gap_attempts_max: u32,
    /// A proxy sends its watched sibling a heartbeat this often.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// A sibling silent this long is reported failed.
    #[serde(with = "humantime_serde")]
    pub heartbeat_timeout: Duration,
    /// A gateway that has heard nothing from its parent proxy for this long (and over at
    /// least three of its own clock probes) moves to the parent's next sibling: its clock
    /// probes, OWD reports and orders go there from then on, and its unanswered orders go
    /// there again. Its home parent heard steadily for this long again takes it back. Long
    /// enough that a live proxy descheduled on a loaded host is not left (at 20 ms, gateways
    /// on this 2-core machine with eleven node processes flapped between two live proxies).
    #[serde(with = "humantime_serde")]
    pub parent_timeout: Duration,
    /// The root sends a header-only packet after this much silence, so gateways notice a lost
    /// last packet.
    #[serde(with = "humantime_serde")]
    pub idle_packet_interval: Duration,
    /// A gateway sends an order again when no answer came within its retry timeout (this
    /// long before it has measured answers, then what they take, at least this margin), then
    /// after twice as long, and so on while the order is younger than three
    /// `parent_timeout`s. An order can die past
    /// the point a failover repairs: at an engine socket overflowing after a paused proxy's
    /// backlog, or lost on the wire. The root executes one copy at most. Zero: never (the
    /// paper's prototype, whose experiments count lost orders).
    #[serde(with = "humantime_serde")]
    pub order_retry: Duration,
    /// The root tells a participant's gateways the number of its next response
    /// ([`wire::control::Repr::ResponseStatus`]) once its responses have been quiet this
    /// long, and again after 8, 64, ... times as long ([`crate::responses::QUIET_STATUSES`] in
    /// all), so a gateway learns of a lost last
    /// response ([`crate::responses`]). Zero: never (a lost response is then noticed only
    /// when a later one arrives).
    #[serde(with = "humantime_serde")]
    pub response_status_after: Duration,
    /// Gateways deliver their participant's responses in number order and ask the root for
    /// missing ones, and the root sends statuses ([`crate::responses`]). Off: a gateway
    /// delivers each response as it comes and never asks, and the root sends no status (the
    /// paper's prototype, whose workload reacts to the responses it happens to get).
    pub response_recovery: bool,
    /// Inbound pacing at proxies and gateways.
    pub pacing: PacingConfig,
    /// Order queue discipline at proxies.
    pub discipline: Discipline,
    /// Orders a proxy queues at most.
    pub order_queue_max: usize,
    /// Order keys remembered for dropping duplicates (receiver-hedged twins, orders resent
    /// after a failover), at least; every key seen within four `parent_timeout`s is
    /// remembered too, up to 16 times this many.
    pub hedge_dedupe_max: usize,
    /// Hop-OWD samples a parent keeps per child.
    pub hop_samples_max: usize,
    /// The root's sequencer.
    pub sequencer: SequencerConfig,
    /// What the root's matching engine trades.
    pub market: MarketConfig,
    /// The root journals every step and acknowledges nothing before the driver reports it
    /// durable (see [`crate::journal`]). Off: the root sends at once, as without a journal.
    pub journal: bool,
    /// Journal records produced but not yet durable at most; beyond it the root's sequencer
    /// holds orders until the driver reports durability (backpressure).
    pub journal_records_pending_max: u64,
}

/// The instruments of the matching engine. Symbol `i` has ITCH stock locate `i`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MarketConfig {
    /// Symbols, at most 8 characters each.
    pub symbols: Vec<String>,
    /// Price tick in ITCH units (1/10000 dollar): 100 is one cent.
    pub tick: u32,
    /// Lowest and highest accepted limit price, ITCH units.
    pub price_min: u32,
    /// See `price_min`.
    pub price_max: u32,
    /// Resting orders the engine holds at most.
    pub orders_max: u32,
    /// Largest order, shares.
    pub order_shares_max: u32,
}

impl Default for MarketConfig {
    fn default() -> Self {
        Self {
            symbols: vec!["JSPR".to_string()],
            tick: 100,
            price_min: 100,
            price_max: 100_000_000,
            orders_max: 1 << 16,
            order_shares_max: 1_000_000,
        }
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            session: "JASPER0001".to_string(),
            hold_and_release: true,
            owd: OwdConfig::default(),
            clock: ClockConfig::default(),
            dedupe_window: 1 << 16,
            held_max: 1024,
            outbox_max: 4096,
            events_max: 1 << 16,
            rewinder_packets: 8192,
            gap_grace: Duration::from_micros(500),
            gap_retry: Duration::from_millis(2),
            gap_attempts_max: 5,
            heartbeat_interval: Duration::from_millis(1),
            heartbeat_timeout: Duration::from_millis(5),
            parent_timeout: Duration::from_millis(100),
            idle_packet_interval: Duration::from_millis(1),
            order_retry: Duration::from_millis(10),
            response_status_after: Duration::from_millis(5),
            response_recovery: true,
            pacing: PacingConfig::default(),
            discipline: Discipline::Loq,
            order_queue_max: 1 << 14,
            hedge_dedupe_max: 1 << 16,
            hop_samples_max: 4096,
            sequencer: SequencerConfig::default(),
            market: MarketConfig::default(),
            journal: false,
            journal_records_pending_max: 1024,
        }
    }
}

impl NodeConfig {
    /// The session as wire bytes: the name padded with spaces, or an error naming it.
    pub fn session(&self) -> Result<Session, String> {
        Session::new(&self.session).ok_or_else(|| {
            format!(
                "bad session name {:?}: up to 10 ASCII characters",
                self.session
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Durations read and write as an operator types them ("400us", "5ms"), and the whole
    /// config round-trips through TOML.
    #[test]
    fn durations_are_human_in_toml() {
        let config = NodeConfig::default();
        let text = toml::to_string(&config).expect("serialises");
        assert!(text.contains("heartbeat_timeout = \"5ms\""), "{text}");
        assert!(text.contains("gap_grace = \"500us\""), "{text}");
        assert!(!text.contains("secs"), "{text}");
        let back: NodeConfig = toml::from_str(&text).expect("parses");
        assert_eq!(back, config);
        let edited = text.replace(
            "heartbeat_timeout = \"5ms\"",
            "heartbeat_timeout = \"12ms 500us\"",
        );
        let edited: NodeConfig = toml::from_str(&edited).expect("parses");
        assert_eq!(edited.heartbeat_timeout, Duration::from_micros(12_500));
        let bad = text.replace(
            "heartbeat_timeout = \"5ms\"",
            "heartbeat_timeout = \"5 parsecs\"",
        );
        let error = toml::from_str::<NodeConfig>(&bad).expect_err("a bad unit is an error");
        assert!(error.to_string().contains("heartbeat_timeout"), "{error}");
    }
}
