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
#[serde(default, deny_unknown_fields)]
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
    /// Bytes of recent packets each proxy keeps to answer its children's retransmission
    /// requests ([`crate::repair`]; the default holds ~700 one-message packets, ~140 ms at
    /// 5K msgs/s, or ~45 full ones); 0 keeps none, and gateways then ask the root for every gap, as DESIGN.md
    /// has it.
    pub repair_bytes: usize,
    /// How long a gateway waits for a missing packet before asking the rewinder.
    #[serde(with = "humantime_serde")]
    pub gap_grace: Duration,
    /// How long a gateway waits for a retransmission before asking again; the wait doubles
    /// with each request for one gap ([`crate::gateway::GAP_BACKOFF_MAX`] times at most),
    /// as it does for a gap in its responses ([`crate::responses::ASK_BACKOFF_MAX`]).
    #[serde(with = "humantime_serde")]
    pub gap_retry: Duration,
    /// A proxy sends its watched sibling a heartbeat this often.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// A sibling silent this long is reported failed.
    #[serde(with = "humantime_serde")]
    pub heartbeat_timeout: Duration,
    /// Siblings each proxy watches, counting back from the previous one, and whose blocks it
    /// serves while they and every sibling between are silent (takeover): 1 covers one dead
    /// proxy in a run of neighbours, the default 2 two neighbours dead at once, and so on up
    /// to [`TAKEOVER_DEPTH_MAX`] (a layer of F proxies watches at most F − 1). Each costs
    /// every proxy one more heartbeat per `heartbeat_interval`.
    pub takeover_depth: u32,
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
#[serde(default, deny_unknown_fields)]
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

/// Most resting orders a market can hold (the engine's slab limit, 2^30).
pub const MARKET_ORDERS_MAX: u32 = 1 << 30;

impl MarketConfig {
    /// The symbols as wire stocks, in order (symbol `i` is stock locate `i`), or an error
    /// naming the bad one: each 1 to 8 printable ASCII characters without spaces, no symbol
    /// twice, 1 to 65535 of them.
    pub fn stocks(&self) -> Result<Vec<wire::Stock>, String> {
        if self.symbols.is_empty() || self.symbols.len() > usize::from(u16::MAX) {
            return Err(format!(
                "node.market.symbols: the market needs 1 to 65535 symbols, got {}",
                self.symbols.len()
            ));
        }
        let mut stocks = Vec::with_capacity(self.symbols.len());
        let mut seen = std::collections::BTreeSet::new();
        for symbol in &self.symbols {
            let stock = wire::Stock::new(symbol)
                .filter(|_| !symbol.is_empty())
                .ok_or_else(|| {
                    format!(
                        "node.market.symbols: bad symbol {symbol:?}: 1 to 8 printable ASCII \
                         characters, no spaces"
                    )
                })?;
            if !seen.insert(stock) {
                return Err(format!("node.market.symbols: {symbol:?} is listed twice"));
            }
            stocks.push(stock);
        }
        Ok(stocks)
    }

    /// Checks every field in the market's own names (the engine's limits behind them are
    /// its business): the symbols ([`MarketConfig::stocks`]), a positive tick, a price band
    /// that is non-empty and on the tick, 1 to [`MARKET_ORDERS_MAX`] resting orders and a
    /// positive largest order.
    pub fn validate(&self) -> Result<(), String> {
        self.stocks()?;
        if self.tick == 0 {
            return Err("node.market.tick must be positive".to_string());
        }
        if self.price_min > self.price_max {
            return Err(format!(
                "node.market.price_min ({}) must be at most price_max ({})",
                self.price_min, self.price_max
            ));
        }
        for (name, price) in [("price_min", self.price_min), ("price_max", self.price_max)] {
            if price % self.tick != 0 {
                return Err(format!(
                    "node.market.{name} ({price}) must be a multiple of the tick ({})",
                    self.tick
                ));
            }
        }
        if !(1..=MARKET_ORDERS_MAX).contains(&self.orders_max) {
            return Err(format!(
                "node.market.orders_max must be from 1 to {MARKET_ORDERS_MAX}, got {}",
                self.orders_max
            ));
        }
        if self.order_shares_max == 0 {
            return Err("node.market.order_shares_max must be positive".to_string());
        }
        Ok(())
    }
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
            repair_bytes: 64 << 10,
            gap_grace: Duration::from_micros(500),
            gap_retry: Duration::from_millis(2),
            heartbeat_interval: Duration::from_millis(1),
            heartbeat_timeout: Duration::from_millis(5),
            takeover_depth: 2,
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

/// The largest drift bound clock sync may be given, ppm: real oscillators stay within
/// ±100 ppm, and a bound near 10⁶ would let a fit run the clock backwards.
pub const DRIFT_MAX_PPM_LIMIT: f64 = 10_000.0;

/// The longest duration a node's configuration may set (an hour): every timer and timeout
/// of a node is far shorter, and a longer one is a typo that would stall the node or overflow
/// its clock arithmetic.
pub const DURATION_MAX: Duration = Duration::from_secs(3600);

/// The most siblings a proxy watches and takes over for ([`NodeConfig::takeover_depth`]).
pub const TAKEOVER_DEPTH_MAX: u32 = 16;

/// The largest count a node's configuration may set (queue bounds, windows, sample counts):
/// 16M, far above every default, so that a typo cannot ask a node to allocate terabytes.
pub const COUNT_MAX: u64 = 1 << 24;

impl NodeConfig {
    /// Checks every field a config file could get wrong, naming it: the session name; the
    /// OWD settings ([`crate::owd::OwdConfig::validate`]); every duration at most
    /// [`DURATION_MAX`], and the periods of repeating timers and the timeouts above zero (a
    /// zero period would fire forever at one instant); every count from 1 to [`COUNT_MAX`];
    /// clock sync's window and drift bound. A node built from a config that passes cannot
    /// panic on it.
    pub fn validate(&self) -> Result<(), String> {
        self.session()?;
        self.owd.validate()?;
        self.market.validate()?;
        let clock = &self.clock;
        let pacing = &self.pacing;
        let sequencer = &self.sequencer;
        let durations = [
            ("gap_grace", self.gap_grace, false),
            ("gap_retry", self.gap_retry, true),
            ("heartbeat_interval", self.heartbeat_interval, true),
            ("heartbeat_timeout", self.heartbeat_timeout, true),
            ("parent_timeout", self.parent_timeout, true),
            ("idle_packet_interval", self.idle_packet_interval, true),
            // Zero: never (see their docs).
            ("order_retry", self.order_retry, false),
            ("response_status_after", self.response_status_after, false),
            ("owd.window", self.owd.window, true),
            ("owd.report_interval", self.owd.report_interval, true),
            ("owd.report_expiry", self.owd.report_expiry, true),
            ("clock.probe_interval", clock.probe_interval, true),
            ("clock.probe_interval_max", clock.probe_interval_max, true),
            ("clock.purity_tolerance", clock.purity_tolerance, false),
            ("clock.probe_timeout", clock.probe_timeout, true),
            ("clock.drift_span_min", clock.drift_span_min, false),
            ("clock.rtt_slack", clock.rtt_slack, false),
            ("clock.settled", clock.settled, false),
            ("pacing.threshold", pacing.threshold, false),
            ("pacing.dead_band", pacing.dead_band, false),
            ("pacing.window", pacing.window, pacing.enabled),
            ("pacing.step_up", pacing.step_up, false),
            ("pacing.step_down", pacing.step_down, false),
            ("pacing.gap_max", pacing.gap_max, false),
            (
                "pacing.feedback_interval",
                pacing.feedback_interval,
                pacing.enabled,
            ),
            ("sequencer.delay", sequencer.delay, false),
            (
                "sequencer.heartbeat_interval",
                sequencer.heartbeat_interval,
                sequencer.kind == crate::sequencer::SequencerKind::GlobalFifo,
            ),
            ("sequencer.child_timeout", sequencer.child_timeout, true),
        ];
        for (name, value, positive) in durations {
            if value > DURATION_MAX {
                return Err(format!(
                    "node.{name} must be at most {} s, got {value:?}",
                    DURATION_MAX.as_secs()
                ));
            }
            if positive && value.is_zero() {
                return Err(format!(
                    "node.{name} must be above zero (a timer's period or a timeout)"
                ));
            }
        }
        if clock.probe_interval_max < clock.probe_interval {
            return Err(format!(
                "node.clock.probe_interval_max ({:?}) must be at least probe_interval ({:?})",
                clock.probe_interval_max, clock.probe_interval
            ));
        }
        if !(1..=TAKEOVER_DEPTH_MAX).contains(&self.takeover_depth) {
            return Err(format!(
                "node.takeover_depth must be from 1 to {TAKEOVER_DEPTH_MAX}, got {}",
                self.takeover_depth
            ));
        }
        let counts = [
            ("dedupe_window", self.dedupe_window),
            ("held_max", self.held_max as u64),
            ("outbox_max", self.outbox_max as u64),
            ("events_max", self.events_max as u64),
            ("rewinder_packets", self.rewinder_packets as u64),
            ("order_queue_max", self.order_queue_max as u64),
            ("hedge_dedupe_max", self.hedge_dedupe_max as u64),
            ("hop_samples_max", self.hop_samples_max as u64),
            (
                "journal_records_pending_max",
                self.journal_records_pending_max,
            ),
            ("owd.samples_max", self.owd.samples_max as u64),
            ("clock.samples_max", clock.samples_max as u64),
            ("clock.buckets", clock.buckets as u64),
            ("sequencer.orders_max", sequencer.orders_max as u64),
        ];
        for (name, value) in counts {
            if !(1..=COUNT_MAX).contains(&value) {
                return Err(format!(
                    "node.{name} must be from 1 to {COUNT_MAX}, got {value}"
                ));
            }
        }
        if self.journal && self.market.orders_max > crate::journal::JOURNALED_ORDERS_MAX {
            return Err(format!(
                "node.market.orders_max must be at most {} with node.journal on (a step's \
                 journal record must hold an order that sweeps the whole book), got {}",
                crate::journal::JOURNALED_ORDERS_MAX,
                self.market.orders_max
            ));
        }
        // A gateway marks what it holds in its dedupe window: a window narrower than the hold
        // queue would forget packets still held.
        if self.dedupe_window < self.held_max as u64 {
            return Err(format!(
                "node.dedupe_window ({}) must be at least node.held_max ({})",
                self.dedupe_window, self.held_max
            ));
        }
        // Zero: proxies keep nothing and gateways ask the root.
        if self.repair_bytes as u64 > COUNT_MAX {
            return Err(format!(
                "node.repair_bytes must be from 0 to {COUNT_MAX}, got {}",
                self.repair_bytes
            ));
        }
        if clock.samples_max < 2 {
            return Err(format!(
                "node.clock.samples_max must be at least 2 (a fit needs two points), got {}",
                clock.samples_max
            ));
        }
        if !(0.0..=DRIFT_MAX_PPM_LIMIT).contains(&clock.drift_max_ppm) {
            return Err(format!(
                "node.clock.drift_max_ppm must be from 0 to {DRIFT_MAX_PPM_LIMIT}, got {}",
                clock.drift_max_ppm
            ));
        }
        Ok(())
    }

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

/// The session a root without a journal publishes under when started at `unix_ns` (wall-clock
/// time): the first four characters of the configured name `name` (padded with `0`) and six
/// base-36 digits of the start time in tenths of a second (unique over 6.9 years).
///
/// A root with a journal continues its stream after a restart, under the configured session.
/// One without numbers a new stream from 1: under the old session every proxy and gateway
/// would drop it as old. Under a new one they take it as a new stream once the old one has
/// been silent for `parent_timeout` (the root's restart), and start over: a book snapshot
/// first (the new root's book is empty), responses numbered anew ([`crate::Event::SessionStarted`]).
pub fn session_of_start(name: &str, unix_ns: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let prefix: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .chain(core::iter::repeat('0'))
        .take(4)
        .collect();
    let mut tenths = unix_ns / 100_000_000;
    let mut suffix = [b'0'; 6];
    for digit in suffix.iter_mut().rev() {
        *digit = DIGITS[(tenths % 36) as usize];
        tenths /= 36;
    }
    prefix + core::str::from_utf8(&suffix).expect("ASCII digits")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_started_again_gets_another_session() {
        let at = 1_795_000_000_000_000_000; // 2026-11-18
        let first = session_of_start("JASPER0001", at);
        assert_eq!(first.len(), 10);
        assert!(first.starts_with("JASP"));
        assert!(Session::new(&first).is_some());
        assert_ne!(session_of_start("JASPER0001", at + 100_000_000), first);
        assert_eq!(session_of_start("JASPER0001", at + 99_999_999), first);
        assert_eq!(&session_of_start("x", at)[..4], "x000");
    }

    /// Goal: a node config file with a value a node cannot run on is an error naming the
    /// field, not a panic, a timer firing forever at one instant, or a run that silently does
    /// nothing. Method: one bad value at a time over the defaults.
    #[test]
    fn bad_node_configs_are_errors_naming_the_field() {
        assert_eq!(NodeConfig::default().validate(), Ok(()));
        for (text, field) in [
            ("[clock]\nbuckets = 0", "clock.buckets"),
            ("[clock]\nsamples_max = 1", "clock.samples_max"),
            ("[clock]\ndrift_max_ppm = nan", "clock.drift_max_ppm"),
            ("[clock]\ndrift_max_ppm = -5.0", "clock.drift_max_ppm"),
            ("[clock]\nprobe_interval = \"0s\"", "clock.probe_interval"),
            (
                "[clock]\nprobe_interval_max = \"10us\"",
                "clock.probe_interval_max",
            ),
            ("[owd]\nsamples_max = 0", "owd.samples_max"),
            ("[owd]\nreport_interval = \"0s\"", "owd.report_interval"),
            ("[owd]\ninitial_owd = \"100years\"", "owd.initial_owd"),
            ("[owd]\nfixed_owd = \"2s\"", "owd.fixed_owd"),
            ("[owd]\npercentile_centi = 0", "owd.percentile_centi"),
            ("[owd]\npercentile_centi = 10001", "owd.percentile_centi"),
            ("hop_samples_max = 0", "hop_samples_max"),
            ("dedupe_window = 512\nheld_max = 1024", "dedupe_window"),
            ("outbox_max = 0", "outbox_max"),
            ("events_max = 0", "events_max"),
            ("rewinder_packets = 100000000000", "rewinder_packets"),
            ("repair_bytes = 100000000", "repair_bytes"),
            (
                "journal_records_pending_max = 0",
                "journal_records_pending_max",
            ),
            ("idle_packet_interval = \"0s\"", "idle_packet_interval"),
            ("heartbeat_timeout = \"2h\"", "heartbeat_timeout"),
            ("takeover_depth = 0", "takeover_depth"),
            ("takeover_depth = 17", "takeover_depth"),
            (
                "[pacing]\nenabled = true\nfeedback_interval = \"0s\"",
                "pacing.feedback_interval",
            ),
            (
                "[sequencer]\nkind = \"global_fifo\"\nheartbeat_interval = \"0s\"",
                "sequencer.heartbeat_interval",
            ),
            ("session = \"MUCH TOO LONG A NAME\"", "session"),
            ("[market]\nsymbols = []", "market.symbols"),
            ("[market]\nsymbols = [\"\"]", "bad symbol \"\""),
            ("[market]\nsymbols = [\"TOO LONG\"]", "bad symbol"),
            (
                "[market]\nsymbols = [\"AAPL\", \"MSFT\", \"AAPL\"]",
                "listed twice",
            ),
            ("[market]\ntick = 0", "market.tick"),
            (
                "[market]\nprice_min = 500\nprice_max = 400",
                "market.price_min",
            ),
            ("[market]\ntick = 100\nprice_min = 150", "market.price_min"),
            (
                "[market]\ntick = 100\nprice_max = 99999999",
                "market.price_max",
            ),
            ("[market]\norders_max = 0", "market.orders_max"),
            ("[market]\norders_max = 2000000000", "market.orders_max"),
            ("[market]\norder_shares_max = 0", "market.order_shares_max"),
        ] {
            let config: NodeConfig = toml::from_str(text).expect(text);
            let error = config.validate().expect_err(text);
            assert!(error.contains(field), "{text}: {error}");
        }
        for text in [
            "order_retry = \"0s\"",
            "response_status_after = \"0s\"",
            "[pacing]\nenabled = false\nfeedback_interval = \"0s\"",
            "[sequencer]\ndelay = \"0s\"",
            "[market]\nsymbols = [\"AAPL\", \"BRK.A\"]\ntick = 1\nprice_min = 0",
        ] {
            let config: NodeConfig = toml::from_str(text).expect(text);
            assert_eq!(config.validate(), Ok(()), "{text}");
        }
    }

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
