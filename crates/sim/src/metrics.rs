//! Outbound metrics, exactly as DESIGN.md §5 defines them.
//!
//! The simulator reports every [`proto::Release`] of every gateway here, together with the
//! true simulated times of the release and of the first copy's receipt. Per packet we keep
//! only aggregates (send time, earliest and latest receipt and release, counts) in a ring
//! indexed by `packet_seq`, so memory does not grow with receivers × messages: N = 10,000
//! gateways cost no more per packet than N = 10. A packet is finalised, and its metrics
//! recorded into histograms, when every receiver has released it or when the ring needs its
//! slot.
//!
//! DESIGN.md §5 defines the metrics per *message*. Every message of a packet shares the
//! packet's times, so a packet's figures are recorded once for each ITCH message it carries
//! (a histogram count, not a loop), and the root's idle packets, which carry none, count in
//! none of them. The simulator publishes one message a packet; `jasper up`'s engine packs
//! several, and sends idle packets between bursts.
//!
//! - **OML** of a message: latest receipt − send time (latency to the last receiver); also at
//!   release.
//! - **OWD**: receipt − send time, one sample per (receiver, message).
//! - **DWS**: latest − earliest receipt across receivers; also at release (the one that
//!   matters with hold-and-release).
//! - **P(F)**: the highest percentile of messages whose release DWS ≤ `fair_dws_ns` (1 µs).
//! - **Holding time**: release − receipt at a gateway, per (receiver, message).
//! - **Loss**: a message is lost if any receiver did not release it before recovery (never, or
//!   only through the rewinder); per receiver too. Messages in packets nobody released are
//!   counted from the MoldUDP64 sequence numbers around them ([`Mark`]).
//! - **MPS**: messages per second multicast over the measured span of send times.
//!
//! Every metric exists on two clocks. *Exchange* time is what the gateways report (their
//! synchronised clocks, the only thing a real deployment can measure). *True* time is the
//! simulator's own clock, which is what fairness really is; the two differ by clock-sync
//! error, and reporting both shows it.

use hdrhistogram::Histogram;
use serde::Serialize;

/// DWS at or under this is fair (DESIGN.md §5: 1 µs), nanoseconds: the default of
/// [`MetricsConfig::fair_dws_ns`].
pub const FAIR_DWS_NS: u64 = 1_000;

/// What counts, and how much memory to use.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricsConfig {
    /// Number of receivers (gateways) expected to release every packet.
    pub receivers: u32,
    /// Packets with `packet_seq` below this are ignored (warm-up, before clock sync and OWD
    /// reports settle).
    pub first_packet_seq: u64,
    /// The MoldUDP64 sequence number of packet `first_packet_seq`'s header, when known: the
    /// messages of measured packets nobody released before the first one somebody did are
    /// then counted (lost). Unknown, the count starts at the first packet released.
    pub first_sequence: Option<u64>,
    /// DWS at or under this is fair, nanoseconds (DESIGN.md §5: 1 µs).
    pub fair_dws_ns: u64,
    /// Packets tracked at once; a power of two. A packet is finalised when its slot is needed
    /// again, so this must cover the longest time a packet can take to reach every receiver.
    pub window_packets: u32,
    /// The receivers' node ids, when known: the worst receiver's loss then counts a receiver
    /// that released nothing (else only receivers seen releasing are known as receivers).
    pub receiver_ids: Option<core::ops::Range<u32>>,
    /// Whether the samples carry a true clock beside the exchange one (the simulator's, or
    /// one machine's). Without one (`jasper watch`: the gateways' synced clocks are all a
    /// deployment has), the true-time histograms ([`Metrics::truth`]) stay empty, and a
    /// release costs half the histogram updates.
    #[serde(skip)]
    pub true_clock: bool,
}

impl MetricsConfig {
    /// Defaults for `receivers` gateways: no warm-up, 1 µs fairness, a 65,536-packet window.
    pub fn new(receivers: u32) -> Self {
        Self {
            receivers,
            first_packet_seq: 0,
            first_sequence: None,
            fair_dws_ns: FAIR_DWS_NS,
            window_packets: 1 << 16,
            receiver_ids: None,
            true_clock: true,
        }
    }
}

/// One release, as the simulator reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReleaseSample {
    /// The gateway.
    pub receiver: u32,
    /// The packet.
    pub packet_seq: u64,
    /// MoldUDP64 sequence number of the packet's header message ([`proto::Release`]).
    pub sequence: u64,
    /// ITCH messages in the packet (0: an idle packet).
    pub messages: u16,
    /// Root send time, exchange ns.
    pub send_x: u64,
    /// Root send time, true ns.
    pub send_t: u64,
    /// First receipt, the gateway's exchange ns.
    pub received_x: u64,
    /// Release, the gateway's exchange ns.
    pub released_x: u64,
    /// First receipt, true ns.
    pub received_t: u64,
    /// Release, true ns.
    pub released_t: u64,
    /// Released after its deadline.
    pub late: bool,
    /// Recovered through the rewinder.
    pub recovered: bool,
}

/// A set of histograms for one clock (exchange or true).
#[derive(Clone, Debug)]
pub struct ClockHistograms {
    /// OML at receipt.
    pub oml_receipt: Histogram<u64>,
    /// OML at release.
    pub oml_release: Histogram<u64>,
    /// OWD at receipt, per (receiver, message).
    pub owd: Histogram<u64>,
    /// DWS at receipt.
    pub dws_receipt: Histogram<u64>,
    /// DWS at release.
    pub dws_release: Histogram<u64>,
    /// Holding time, per (receiver, message).
    pub holding: Histogram<u64>,
    /// Messages whose release DWS was at most the fairness bound.
    pub fair_messages: u64,
    /// Differences that came out negative (a receipt before the send, by a wrong clock) and
    /// were recorded as zero.
    pub negative: u64,
}

impl ClockHistograms {
    fn new() -> Self {
        // 1 ns to 1 hour at three significant digits.
        let histogram =
            || Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
        Self {
            oml_receipt: histogram(),
            oml_release: histogram(),
            owd: histogram(),
            dws_receipt: histogram(),
            dws_release: histogram(),
            holding: histogram(),
            fair_messages: 0,
            negative: 0,
        }
    }

    /// Records `later − earlier` once for each of `messages` messages (none for an idle
    /// packet).
    fn record(
        histogram: &mut Histogram<u64>,
        negative: &mut u64,
        later: u64,
        earlier: u64,
        messages: u16,
    ) {
        if messages == 0 {
            return;
        }
        let value = if later >= earlier {
            later - earlier
        } else {
            *negative += 1;
            0
        };
        histogram.saturating_record_n(value, u64::from(messages));
    }

    fn record_release(
        &mut self,
        later: u64,
        earlier: u64,
        owd_received: u64,
        send: u64,
        messages: u16,
    ) {
        let negative = &mut self.negative;
        Self::record(&mut self.holding, negative, later, earlier, messages);
        Self::record(&mut self.owd, negative, owd_received, send, messages);
    }

    fn record_packet(&mut self, span: &Span, fair_dws_ns: u64, messages: u16) {
        let negative = &mut self.negative;
        let (oml_receipt, oml_release) = (&mut self.oml_receipt, &mut self.oml_release);
        Self::record(
            oml_receipt,
            negative,
            span.received_max,
            span.send,
            messages,
        );
        Self::record(
            oml_release,
            negative,
            span.released_max,
            span.send,
            messages,
        );
        let (dws_receipt, dws_release) = (&mut self.dws_receipt, &mut self.dws_release);
        let (received, released) = (span.received_min, span.released_min);
        Self::record(dws_receipt, negative, span.received_max, received, messages);
        Self::record(dws_release, negative, span.released_max, released, messages);
        if span.released_max - span.released_min <= fair_dws_ns {
            self.fair_messages += u64::from(messages);
        }
    }
}

/// Earliest and latest times of one packet on one clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    send: u64,
    received_min: u64,
    received_max: u64,
    released_min: u64,
    released_max: u64,
}

impl Span {
    fn first(send: u64, received: u64, released: u64) -> Self {
        Self {
            send,
            received_min: received,
            received_max: received,
            released_min: released,
            released_max: released,
        }
    }

    fn add(&mut self, received: u64, released: u64) {
        self.received_min = self.received_min.min(received);
        self.received_max = self.received_max.max(received);
        self.released_min = self.released_min.min(released);
        self.released_max = self.released_max.max(released);
    }
}

/// Aggregates of one packet in flight.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// `packet_seq + 1`; 0 = empty.
    tag: u64,
    /// ITCH messages in the packet.
    messages: u16,
    exchange: Span,
    truth: Span,
    /// Receivers that released it without recovery.
    released: u32,
    /// Receivers that got it only through recovery.
    recovered: u32,
    late: u32,
}

/// Per-receiver counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReceiverStats {
    /// Packets released (measured ones only).
    pub released: u64,
    /// Of those, released after the deadline.
    pub late: u64,
    /// Of those, recovered through the rewinder (counted as lost for loss).
    pub recovered: u64,
    /// Messages in the packets released without recovery.
    pub messages: u64,
    /// One past the highest packet sequence number released (0 before any).
    pub next_packet_seq: u64,
    /// The MoldUDP64 sequence number at `next_packet_seq` (0 before any).
    pub next_sequence: u64,
}

/// A place in the stream: a packet sequence number and the MoldUDP64 sequence number of
/// that packet's header message. Each packet takes one MoldUDP64 number for its header and
/// one for each message, so two marks tell how many messages the packets between them
/// carried, whether anybody received those packets or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Mark {
    /// The packet.
    pub packet_seq: u64,
    /// MoldUDP64 sequence number of its header ([`proto::Root::next_sequence`] for the next
    /// packet the root sends).
    pub sequence: u64,
}

impl Mark {
    /// Where the packet after `sample`'s starts.
    fn after(sample: &ReleaseSample) -> Self {
        Self {
            packet_seq: sample.packet_seq + 1,
            sequence: sample.sequence + u64::from(sample.messages) + 1,
        }
    }

    fn of(sample: &ReleaseSample) -> Self {
        Self {
            packet_seq: sample.packet_seq,
            sequence: sample.sequence,
        }
    }

    /// Messages in the packets from `self` up to (not including) `end`; 0 if `end` is not
    /// after `self`.
    pub fn messages_to(self, end: Self) -> u64 {
        if end.packet_seq <= self.packet_seq {
            return 0;
        }
        (end.sequence.saturating_sub(self.sequence))
            .saturating_sub(end.packet_seq - self.packet_seq)
    }
}

/// The metrics of a run.
#[derive(Debug)]
pub struct Metrics {
    config: MetricsConfig,
    ring: Vec<Slot>,
    receivers: Vec<ReceiverStats>,
    /// Exchange-time histograms.
    pub exchange: ClockHistograms,
    /// True-time histograms.
    pub truth: ClockHistograms,
    /// Packets finalised.
    pub packets: u64,
    /// Packets finalised with every receiver releasing them without recovery.
    pub complete: u64,
    /// Messages in the packets finalised (only those somebody released; see
    /// [`Metrics::messages`] for all the measured ones).
    pub seen_messages: u64,
    /// Messages in the complete packets.
    pub complete_messages: u64,
    /// Packets finalised that carried no message (the root's idle packets): in `packets`,
    /// and in no per-message figure.
    pub idle_packets: u64,
    /// Packets some receiver released late.
    pub late_packets: u64,
    /// Releases of packets whose slot was already reused (too old for the window).
    pub beyond_window: u64,
    /// Releases of packets below `first_packet_seq` or from `end_packet_seq` on.
    pub warmup_releases: u64,
    /// Packets from this sequence on are not measured (set by [`Metrics::stop_at`]).
    end_packet_seq: u64,
    /// The MoldUDP64 sequence number at `end_packet_seq`, when [`Metrics::stop_at`] was
    /// called.
    end_sequence: Option<u64>,
    /// Earliest and latest true send time measured.
    send_t_min: u64,
    send_t_max: u64,
    /// Lowest packet sequence measured.
    pub packet_seq_min: u64,
    /// Highest packet sequence measured.
    pub packet_seq_max: u64,
    /// Where the lowest and highest packets measured start and end: the lowest's start, the
    /// lowest's end, the highest's end.
    lowest: Mark,
    after_lowest: Mark,
    after_highest: Mark,
    /// Packets between the lowest and highest measured that no receiver released at all
    /// (counted by [`Metrics::finish`]; included in `packets` and in the loss).
    pub unseen: u64,
    /// Per-participant metrics with receiver hedging (see [`Metrics::group_by_participant`]).
    pub participants: Option<Participants>,
    /// Receivers that died while measuring, each with the packets it was not expected to
    /// release (see [`Metrics::retire`] and [`Metrics::rejoin`]).
    retired: Vec<Absence>,
}

/// A receiver that died while measuring ([`Metrics::retire`]): it is not expected to release
/// the packets `[from, until)`, and those it releases are not counted. `until` is where it
/// came back, started again ([`Metrics::rejoin`]), or `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Absence {
    /// The receiver.
    pub receiver: u32,
    /// The first packet it was no longer expected to release (the root's next at its death).
    pub from: Mark,
    /// The first packet it was expected to release again (the root's next when it came back).
    pub until: Option<Mark>,
    /// Past its last release before its death, kept when it came back (its releases from
    /// then on move the receiver's own mark): what [`Metrics::lost_to_deaths`] counts from.
    next_before: Option<Mark>,
}

impl Absence {
    /// Whether packet `packet_seq` falls in the absence.
    fn covers(&self, packet_seq: u64) -> bool {
        packet_seq >= self.from.packet_seq
            && self.until.is_none_or(|until| packet_seq < until.packet_seq)
    }

    /// The absence within `[start, end)`, if any of it is.
    fn within(&self, start: Mark, end: Mark) -> Option<(Mark, Mark)> {
        let from = if self.from.packet_seq > start.packet_seq {
            self.from
        } else {
            start
        };
        let until = match self.until {
            Some(until) if until.packet_seq < end.packet_seq => until,
            _ => end,
        };
        (from.packet_seq < until.packet_seq).then_some((from, until))
    }
}

/// Metrics per market participant when several gateways serve one (receiver hedging): a
/// participant receives a packet when the first of its gateways does, and acts on it when
/// the first of them releases it, so its OML is the latest participant's first receipt (or
/// first release) − send time, and DWS and P(F) are taken over participants' first releases.
#[derive(Debug)]
pub struct Participants {
    /// Receiver id → participant index (`u32::MAX` for nodes that are not receivers).
    of: Vec<u32>,
    count: u32,
    fair_dws_ns: u64,
    inflight: std::collections::BTreeMap<u64, ParticipantPacket>,
    /// OML over participants (first receipt of each), true time.
    pub oml_receipt: Histogram<u64>,
    /// DWS over participants' first receipts, true time.
    pub dws_receipt: Histogram<u64>,
    /// OML over participants' first releases, true time.
    pub oml_release: Histogram<u64>,
    /// DWS over participants' first releases, true time.
    pub dws_release: Histogram<u64>,
    /// DWS over participants' first releases, exchange time (each gateway's own clock).
    pub dws_release_exchange: Histogram<u64>,
    /// Packets every participant released.
    pub packets: u64,
    /// Messages in those packets.
    pub messages: u64,
    /// Of those, messages whose DWS over first releases was within the fairness bound, in
    /// exchange and in true time.
    pub fair_exchange: u64,
    /// See `fair_exchange`.
    pub fair_true: u64,
    /// Packets some participant got through none of its gateways (or only by recovery).
    pub lost: u64,
    /// Messages in those packets.
    pub lost_messages: u64,
    /// Packets recorded before every gateway had released them (too many in flight).
    pub overflow: u64,
}

#[derive(Debug)]
struct ParticipantPacket {
    send_t: u64,
    messages: u16,
    /// Per participant: first receipt (true), first release (true), first release
    /// (exchange) over its gateways.
    first: Vec<[u64; 3]>,
    releases: u32,
}

/// Packets tracked per participant at once: 200 ms at 5K packets/s, far longer than a
/// packet takes to reach every gateway. Each holds 24 bytes per participant (120 MB at most
/// for 5,000 participants, when the oldest packets wait for a gateway that never releases
/// them; a few packets' worth otherwise).
const PARTICIPANT_INFLIGHT_MAX: usize = 1024;

/// How many integers the ranges cover together (each counted once, however many ranges hold
/// it); empty and reversed ranges cover none.
fn union_len(ranges: impl Iterator<Item = core::ops::Range<u64>>) -> u64 {
    let mut ranges: Vec<_> = ranges.filter(|r| r.start < r.end).collect();
    ranges.sort_unstable_by_key(|r| r.start);
    let mut covered = 0;
    let mut reached = 0;
    for r in ranges {
        covered += r.end.saturating_sub(r.start.max(reached));
        reached = reached.max(r.end);
    }
    covered
}

/// `part` as a percentage of `whole`; 0 when `whole` is 0 (nothing measured).
pub(crate) fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

impl Metrics {
    /// Empty metrics.
    pub fn new(config: MetricsConfig) -> Self {
        assert!(
            config.window_packets.is_power_of_two(),
            "window_packets must be a power of two"
        );
        assert!(config.receivers > 0);
        Self {
            ring: vec![Slot::default(); config.window_packets as usize],
            receivers: Vec::new(),
            config,
            exchange: ClockHistograms::new(),
            truth: ClockHistograms::new(),
            packets: 0,
            complete: 0,
            late_packets: 0,
            beyond_window: 0,
            warmup_releases: 0,
            end_packet_seq: u64::MAX,
            send_t_min: u64::MAX,
            send_t_max: 0,
            packet_seq_min: u64::MAX,
            packet_seq_max: 0,
            lowest: Mark::default(),
            after_lowest: Mark::default(),
            after_highest: Mark::default(),
            end_sequence: None,
            seen_messages: 0,
            complete_messages: 0,
            idle_packets: 0,
            unseen: 0,
            participants: None,
            retired: Vec::new(),
        }
    }

    /// Also measures per participant: `of[receiver id]` is the participant a receiver
    /// serves (`u32::MAX` for other node ids), `count` the number of participants.
    pub fn group_by_participant(&mut self, of: Vec<u32>, count: u32) {
        assert!(count > 0);
        let histogram = || Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("bounds");
        self.participants = Some(Participants {
            of,
            count,
            fair_dws_ns: self.config.fair_dws_ns,
            inflight: std::collections::BTreeMap::new(),
            oml_receipt: histogram(),
            dws_receipt: histogram(),
            oml_release: histogram(),
            dws_release: histogram(),
            dws_release_exchange: histogram(),
            packets: 0,
            messages: 0,
            fair_exchange: 0,
            fair_true: 0,
            lost: 0,
            lost_messages: 0,
            overflow: 0,
        });
    }

    /// The configuration.
    pub fn config(&self) -> &MetricsConfig {
        &self.config
    }

    /// `receiver` died (a killed gateway): packets from `from` on (the root's next packet
    /// then), sent after its death, are complete without it, so OML, DWS, P(F) and loss go
    /// on over the receivers alive. Packets sent before that which it never released count
    /// as lost, and its own loss ([`Metrics::expected_by`]) counts only those. A receiver
    /// already away stays away from its first death; one that came back ([`Metrics::rejoin`])
    /// may die again, from no earlier than where it came back (absences never overlap: a
    /// packet would otherwise wait for one receiver fewer than there are, and count twice).
    pub fn retire(&mut self, receiver: u32, from: Mark) {
        let mine = || self.retired.iter().filter(|a| a.receiver == receiver);
        if mine().any(|a| a.until.is_none()) {
            return;
        }
        let from = mine()
            .filter_map(|a| a.until)
            .filter(|until| until.packet_seq > from.packet_seq)
            .max_by_key(|until| until.packet_seq)
            .unwrap_or(from);
        self.retired.push(Absence {
            receiver,
            from,
            until: None,
            next_before: None,
        });
    }

    /// `receiver`, retired, was started again and releases again: packets from `at` on (the
    /// root's next packet, so none of them is complete yet) expect it again, and count what
    /// it releases of them. What it releases before `at` (the packets its book snapshot let
    /// it join at) is still not counted. Nothing happens if it was not retired, or came back
    /// already.
    pub fn rejoin(&mut self, receiver: u32, at: Mark) {
        let next_before = self
            .receivers
            .get(receiver as usize)
            .filter(|stats| stats.next_packet_seq > 0)
            .map(|stats| Mark {
                packet_seq: stats.next_packet_seq,
                sequence: stats.next_sequence,
            });
        let Some(absence) = self
            .retired
            .iter_mut()
            .find(|absence| absence.receiver == receiver && absence.until.is_none())
        else {
            return;
        };
        absence.until = Some(if at.packet_seq > absence.from.packet_seq {
            at
        } else {
            absence.from
        });
        absence.next_before = next_before;
    }

    /// Receivers that died while measuring, with the packets each was not expected to
    /// release.
    pub fn retired(&self) -> &[Absence] {
        &self.retired
    }

    /// Whether `receiver` was away (dead, not yet back) when packet `packet_seq` was sent.
    fn absent(&self, receiver: u32, packet_seq: u64) -> bool {
        self.retired
            .iter()
            .any(|absence| absence.receiver == receiver && absence.covers(packet_seq))
    }

    /// Receivers expected to release packet `packet_seq`.
    fn expected(&self, packet_seq: u64) -> u32 {
        let gone = self
            .retired
            .iter()
            .filter(|absence| absence.covers(packet_seq))
            .count();
        self.config.receivers.saturating_sub(gone as u32)
    }

    /// Of the measured packets, how many `receiver` was expected to release: all of them
    /// but, for a receiver that died, those sent while it was away.
    pub fn expected_by(&self, receiver: u32) -> u64 {
        let first = self.config.first_packet_seq;
        let (start, end) = (first, first.saturating_add(self.packets));
        let away: u64 = self
            .retired
            .iter()
            .filter(|absence| absence.receiver == receiver)
            .map(|absence| {
                let from = absence.from.packet_seq.max(start);
                let until = absence.until.map_or(end, |until| until.packet_seq.min(end));
                until.saturating_sub(from)
            })
            .sum();
        self.packets.saturating_sub(away)
    }

    /// Of the measured messages, how many `receiver` was expected to release: all of them
    /// but, for a receiver that died, those sent while it was away.
    pub fn expected_messages_by(&self, receiver: u32) -> u64 {
        let Some((start, end)) = self.measured_marks() else {
            return 0;
        };
        let away: u64 = self
            .retired
            .iter()
            .filter(|absence| absence.receiver == receiver)
            .filter_map(|absence| absence.within(start, end))
            .map(|(from, until)| from.messages_to(until))
            .sum();
        start.messages_to(end).saturating_sub(away)
    }

    /// Records one release.
    pub fn on_release(&mut self, sample: &ReleaseSample) {
        if sample.packet_seq < self.config.first_packet_seq
            || sample.packet_seq >= self.end_packet_seq
        {
            self.warmup_releases += 1;
            return;
        }
        // A gateway started again after its death releases again; it counts only from where
        // it came back (the packets sent while it was away are complete without it).
        if self.absent(sample.receiver, sample.packet_seq) {
            return;
        }
        let expected = self.expected(sample.packet_seq);
        if let Some(participants) = self.participants.as_mut() {
            participants.on_release(sample, expected);
        }
        let receiver = sample.receiver as usize;
        if self.receivers.len() <= receiver {
            self.receivers
                .resize(receiver + 1, ReceiverStats::default());
        }
        let stats = &mut self.receivers[receiver];
        stats.released += 1;
        stats.late += u64::from(sample.late);
        stats.recovered += u64::from(sample.recovered);
        if !sample.recovered {
            stats.messages += u64::from(sample.messages);
        }
        if sample.packet_seq >= stats.next_packet_seq {
            let next = Mark::after(sample);
            stats.next_packet_seq = next.packet_seq;
            stats.next_sequence = next.sequence;
        }

        let index = (sample.packet_seq & u64::from(self.config.window_packets - 1)) as usize;
        let tag = sample.packet_seq + 1;
        if self.ring[index].tag > tag {
            self.beyond_window += 1;
            return;
        }
        if self.ring[index].tag != tag {
            self.finalise(index);
            self.ring[index] = Slot {
                tag,
                messages: sample.messages,
                exchange: Span::first(sample.send_x, sample.received_x, sample.released_x),
                truth: Span::first(sample.send_t, sample.received_t, sample.released_t),
                ..Slot::default()
            };
        } else if !sample.recovered {
            self.ring[index]
                .exchange
                .add(sample.received_x, sample.released_x);
            self.ring[index]
                .truth
                .add(sample.received_t, sample.released_t);
        }
        self.exchange.record_release(
            sample.released_x,
            sample.received_x,
            sample.received_x,
            sample.send_x,
            sample.messages,
        );
        if self.config.true_clock {
            self.truth.record_release(
                sample.released_t,
                sample.received_t,
                sample.received_t,
                sample.send_t,
                sample.messages,
            );
        }
        self.send_t_min = self.send_t_min.min(sample.send_t);
        self.send_t_max = self.send_t_max.max(sample.send_t);
        if sample.packet_seq < self.packet_seq_min {
            self.packet_seq_min = sample.packet_seq;
            self.lowest = Mark::of(sample);
            self.after_lowest = Mark::after(sample);
        }
        if sample.packet_seq >= self.packet_seq_max {
            self.packet_seq_max = sample.packet_seq;
            self.after_highest = Mark::after(sample);
        }

        let slot = &mut self.ring[index];
        if sample.recovered {
            slot.recovered += 1;
        } else {
            slot.released += 1;
        }
        slot.late += u32::from(sample.late);
        assert!(
            slot.released + slot.recovered <= self.config.receivers,
            "more releases than receivers"
        );
        if slot.released + slot.recovered >= expected {
            self.finalise(index);
        }
    }

    /// Stops measuring at `end` (exclusive; the root's next packet): later packets, such as
    /// the root's idle packets while a run drains, are not counted, nor those some receiver
    /// released already (dropped by [`Metrics::finish`]; their releases stay in the
    /// per-release figures, OWD and holding time, and the receivers' counts). A packet at or
    /// past `end` that was complete already has been counted: if that makes more packets
    /// than the measured range holds, [`Metrics::finish`] panics.
    pub fn stop_at(&mut self, end: Mark) {
        assert!(end.packet_seq >= self.config.first_packet_seq);
        self.end_packet_seq = end.packet_seq;
        self.end_sequence = Some(end.sequence);
    }

    /// Finalises every packet still in flight (call at the end of a run, after draining):
    /// those that some receiver never released count as lost. Packet sequence numbers are
    /// dense, so a number inside the measured range that nobody released was lost everywhere.
    pub fn finish(&mut self) {
        for index in 0..self.ring.len() {
            // A packet from [`Metrics::stop_at`]'s end on that some receiver released before
            // the stop was set (a monitor stopping while the newest packets are half
            // reported) is not measured: it is dropped, not counted lost.
            // (A slot's tag is its packet plus one; zero when empty.)
            if self.ring[index].tag > self.end_packet_seq {
                self.ring[index] = Slot::default();
                continue;
            }
            self.finalise(index);
        }
        if let Some(participants) = self.participants.as_mut() {
            participants.finish();
        }
        if let Some(measured) = self.measured_range() {
            let span = measured.end - measured.start;
            let seen = self.packets - self.unseen;
            assert!(span >= seen, "more packets than sequence numbers");
            let unseen = span - seen;
            self.packets += unseen - self.unseen;
            self.unseen = unseen;
        }
    }

    /// The packet sequence numbers measured: from the first to [`Metrics::stop_at`]'s end
    /// when it was called (the root knows what it published, and a packet no receiver got is
    /// lost too), else from the lowest to the highest any receiver released; `None` when
    /// that is nothing.
    fn measured_range(&self) -> Option<core::ops::Range<u64>> {
        let range = if self.end_packet_seq == u64::MAX {
            self.packet_seq_min..self.packet_seq_max.saturating_add(1)
        } else {
            self.config.first_packet_seq..self.end_packet_seq
        };
        (range.start < range.end).then_some(range)
    }

    /// [`Metrics::measured_range`] as marks, so its messages can be counted: from
    /// `first_sequence` (else the lowest packet released) to [`Metrics::stop_at`]'s end
    /// (else past the highest released); `None` when nothing was measured.
    fn measured_marks(&self) -> Option<(Mark, Mark)> {
        if self.packet_seq_min > self.packet_seq_max {
            // Nobody released anything: the stream's messages are known only if both ends
            // were given.
            let first = Mark {
                packet_seq: self.config.first_packet_seq,
                sequence: self.config.first_sequence?,
            };
            let end = Mark {
                packet_seq: self.end_packet_seq,
                sequence: self.end_sequence?,
            };
            return (first.packet_seq < end.packet_seq).then_some((first, end));
        }
        let start = match self.config.first_sequence {
            Some(sequence) => Mark {
                packet_seq: self.config.first_packet_seq,
                sequence,
            },
            _ => self.lowest,
        };
        let end = match self.end_sequence {
            Some(sequence) => Mark {
                packet_seq: self.end_packet_seq,
                sequence,
            },
            None => self.after_highest,
        };
        Some((start, end))
    }

    /// Messages measured ([`Metrics::packets`]' messages): those in the packets somebody
    /// released, and those in the packets between them, or at either end of the measured
    /// range, that nobody did.
    pub fn messages(&self) -> u64 {
        let spanned = self
            .measured_marks()
            .map_or(0, |(start, end)| start.messages_to(end));
        spanned.max(self.seen_messages)
    }

    /// Messages lost (DESIGN.md §5): some receiver never released them, or only after
    /// recovery.
    pub fn lost_messages(&self) -> u64 {
        self.messages() - self.complete_messages
    }

    /// The worst receiver's loss, in percent of the messages it was expected to release (a
    /// receiver that died: those sent before its death), counting recovered ones as lost.
    pub fn receiver_loss_percent_max(&self) -> f64 {
        let loss = |id: u32| {
            let expected = self.expected_messages_by(id);
            let stats = self.receivers.get(id as usize).copied().unwrap_or_default();
            percent(expected.saturating_sub(stats.messages), expected)
        };
        match &self.config.receiver_ids {
            Some(ids) => ids.clone().map(loss).fold(0.0, f64::max),
            None => (0..self.receivers.len() as u32)
                .filter(|&id| self.receivers[id as usize].released > 0)
                .map(loss)
                .fold(0.0, f64::max),
        }
    }

    /// Per-receiver counters, indexed by node id (non-receivers stay zero).
    pub fn receivers(&self) -> &[ReceiverStats] {
        &self.receivers
    }

    /// Packets lost: some receiver never released them, or only after recovery (idle
    /// packets too; [`Metrics::lost_messages`] is DESIGN.md §5's loss).
    pub fn lost(&self) -> u64 {
        self.packets - self.complete
    }

    /// Of the messages lost, those in packets a receiver that died ([`Metrics::retire`]) had
    /// not released by then although it had released a later one or none since: on their way
    /// to it or held for their deadline when it died, `[its last release + 1, its death)` of
    /// the measured ones. They are lost by DESIGN.md §5's definition (its participant never
    /// got them through it), but to the death, not the network. A message several dead
    /// receivers held counts once. Call after [`Metrics::finish`].
    pub fn lost_to_deaths(&self) -> u64 {
        let Some((start, end)) = self.measured_marks() else {
            return 0;
        };
        let ranges: Vec<(Mark, Mark)> = self
            .retired
            .iter()
            .map(|absence| {
                let from = absence.from;
                let before = match absence.until {
                    Some(_) => absence.next_before,
                    None => self
                        .receivers
                        .get(absence.receiver as usize)
                        .map(|stats| Mark {
                            packet_seq: stats.next_packet_seq,
                            sequence: stats.next_sequence,
                        }),
                };
                let next = before
                    .filter(|next| next.packet_seq > start.packet_seq)
                    .unwrap_or(start);
                let until = if from.packet_seq < end.packet_seq {
                    from
                } else {
                    end
                };
                (next, until)
            })
            .collect();
        // Each packet takes one MoldUDP64 number besides its messages, and the marks keep
        // the packets' order, so the ranges overlap alike in both numberings.
        let sequences = union_len(ranges.iter().map(|(a, b)| a.sequence..b.sequence));
        let packets = union_len(ranges.iter().map(|(a, b)| a.packet_seq..b.packet_seq));
        sequences.saturating_sub(packets)
    }

    /// Messages lost (DESIGN.md §5), in percent of the messages measured; 0 when none were.
    /// When no message can be counted (nobody released anything, and the measured range's
    /// MoldUDP64 numbers were not given), the packets' loss stands in: lost, not 0%.
    pub fn loss_percent(&self) -> f64 {
        match self.messages() {
            0 => percent(self.lost(), self.packets),
            messages => percent(self.lost_messages(), messages),
        }
    }

    /// Messages multicast per second (DESIGN.md §5's MPS): the messages the root sent after
    /// the first packet some receiver released up to the last, over their span of true send
    /// times (idle packets carry none).
    pub fn mps(&self) -> f64 {
        if self.packet_seq_min >= self.packet_seq_max || self.send_t_max <= self.send_t_min {
            return 0.0;
        }
        self.after_lowest.messages_to(self.after_highest) as f64 * 1e9
            / (self.send_t_max - self.send_t_min) as f64
    }

    /// Packets multicast per second, idle ones included, as [`Metrics::mps`] counts
    /// messages.
    pub fn packets_per_second(&self) -> f64 {
        if self.packet_seq_min >= self.packet_seq_max || self.send_t_max <= self.send_t_min {
            return 0.0;
        }
        (self.packet_seq_max - self.packet_seq_min) as f64 * 1e9
            / (self.send_t_max - self.send_t_min) as f64
    }

    /// P(F) on the given clock, in percent: the share of the complete packets' messages
    /// whose release DWS is within the fairness bound.
    pub fn fairness_percent(&self, histograms: &ClockHistograms) -> f64 {
        percent(histograms.fair_messages, self.complete_messages)
    }

    fn finalise(&mut self, index: usize) {
        let slot = core::mem::take(&mut self.ring[index]);
        if slot.tag == 0 {
            return;
        }
        self.packets += 1;
        self.seen_messages += u64::from(slot.messages);
        self.idle_packets += u64::from(slot.messages == 0);
        if slot.late > 0 {
            self.late_packets += 1;
        }
        // OML and DWS are defined over messages every receiver got without recovery; the
        // rest are counted as lost.
        if slot.released < self.expected(slot.tag - 1) {
            return;
        }
        self.complete += 1;
        self.complete_messages += u64::from(slot.messages);
        let fair = self.config.fair_dws_ns;
        self.exchange
            .record_packet(&slot.exchange, fair, slot.messages);
        if self.config.true_clock {
            self.truth.record_packet(&slot.truth, fair, slot.messages);
        }
    }
}

impl Participants {
    fn on_release(&mut self, sample: &ReleaseSample, receivers: u32) {
        let Some(&group) = self.of.get(sample.receiver as usize) else {
            return;
        };
        if group == u32::MAX {
            return;
        }
        if !self.inflight.contains_key(&sample.packet_seq)
            && self.inflight.len() >= PARTICIPANT_INFLIGHT_MAX
        {
            // The oldest packet waits for a gateway that will not release it (dead, or
            // the run's end): record what its participants got.
            let (_, oldest) = self.inflight.pop_first().expect("full");
            self.record(&oldest);
            self.overflow += 1;
        }
        let count = self.count as usize;
        let packet = self
            .inflight
            .entry(sample.packet_seq)
            .or_insert_with(|| ParticipantPacket {
                send_t: sample.send_t,
                messages: sample.messages,
                first: vec![[u64::MAX; 3]; count],
                releases: 0,
            });
        // A copy recovered through the rewinder counts towards the packet's completion, not
        // as a receipt: a participant that got it only that way lost it (DESIGN.md §5), and
        // the packet is left out of OML, DWS and P(F), as over gateways.
        if !sample.recovered {
            let first = &mut packet.first[group as usize];
            for (first, at) in
                first
                    .iter_mut()
                    .zip([sample.received_t, sample.released_t, sample.released_x])
            {
                *first = (*first).min(at);
            }
        }
        packet.releases += 1;
        if packet.releases >= receivers {
            let packet = self
                .inflight
                .remove(&sample.packet_seq)
                .expect("just updated");
            self.record(&packet);
        }
    }

    /// Records a packet: into the histograms if every participant received it (through any
    /// of its gateways, without recovery), else as lost.
    fn record(&mut self, packet: &ParticipantPacket) {
        let span = |column: usize| {
            let times = packet.first.iter().map(|first| first[column]);
            let latest = times.clone().max().unwrap_or(u64::MAX);
            (latest != u64::MAX).then(|| (times.min().unwrap_or(latest), latest))
        };
        let messages = u64::from(packet.messages);
        let (Some(received), Some(released_t), Some(released_x)) = (span(0), span(1), span(2))
        else {
            self.lost += 1;
            self.lost_messages += messages;
            return;
        };
        self.packets += 1;
        if messages == 0 {
            return;
        }
        // Once for each message (DESIGN.md §5's metrics are per message).
        let record = |histogram: &mut Histogram<u64>, value: u64| {
            histogram.saturating_record_n(value, messages);
        };
        record(
            &mut self.oml_receipt,
            received.1.saturating_sub(packet.send_t),
        );
        record(&mut self.dws_receipt, received.1 - received.0);
        record(
            &mut self.oml_release,
            released_t.1.saturating_sub(packet.send_t),
        );
        record(&mut self.dws_release, released_t.1 - released_t.0);
        record(&mut self.dws_release_exchange, released_x.1 - released_x.0);
        self.messages += messages;
        let bound = self.fair_dws_ns;
        let fair = |span: (u64, u64)| u64::from(span.1 - span.0 <= bound) * messages;
        self.fair_true += fair(released_t);
        self.fair_exchange += fair(released_x);
    }

    /// Participants measured.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// P(F) over participants' first releases, percent of the messages every participant
    /// released, on the exchange and the true clock.
    pub fn fairness_percent(&self) -> (f64, f64) {
        (
            percent(self.fair_exchange, self.messages),
            percent(self.fair_true, self.messages),
        )
    }

    /// Records the packets still waiting for some gateway's release at the end of a run
    /// (one gateway of a participant lost it, or died holding it): the participant was
    /// served if its other gateway released it.
    fn finish(&mut self) {
        for (_, packet) in core::mem::take(&mut self.inflight) {
            self.record(&packet);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Histograms keep three significant digits: compare within 0.1%.
    fn max_is(histogram: &Histogram<u64>, value: u64) -> bool {
        histogram.equivalent(histogram.max(), value)
    }

    /// Where packet `packet_seq` starts when each carries one message ([`sample`]'s).
    fn mark(packet_seq: u64) -> Mark {
        Mark {
            packet_seq,
            sequence: packet_seq * 2,
        }
    }

    fn sample(receiver: u32, packet_seq: u64, received: u64, released: u64) -> ReleaseSample {
        ReleaseSample {
            receiver,
            packet_seq,
            // One message a packet after its header.
            sequence: packet_seq * 2,
            messages: 1,
            send_x: 1_000,
            send_t: 1_000,
            received_x: received,
            released_x: released,
            received_t: received,
            released_t: released,
            late: false,
            recovered: false,
        }
    }

    /// Goal: without a true clock (`jasper watch`) the exchange-time figures are the same
    /// and the true-time histograms stay empty.
    #[test]
    fn without_a_true_clock_only_exchange_time_is_kept() {
        let run = |true_clock: bool| {
            let mut metrics = Metrics::new(MetricsConfig {
                true_clock,
                ..MetricsConfig::new(2)
            });
            for packet in 0..3 {
                metrics.on_release(&sample(0, packet, 1_100, 2_000 + packet * 10));
                metrics.on_release(&sample(1, packet, 1_300, 2_000));
            }
            metrics.finish();
            metrics
        };
        let (both, one) = (run(true), run(false));
        assert_eq!(one.exchange.dws_release, both.exchange.dws_release);
        assert_eq!(one.exchange.holding, both.exchange.holding);
        assert_eq!(one.exchange.oml_release, both.exchange.oml_release);
        assert_eq!((one.packets, one.lost()), (both.packets, both.lost()));
        assert_eq!(both.truth.holding.len(), 6);
        assert_eq!(one.truth.holding.len() + one.truth.dws_release.len(), 0);
    }

    #[test]
    fn oml_dws_holding_and_fairness_follow_the_definitions() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 4,
            ..MetricsConfig::new(3)
        });
        // Packet 0: receipts at 1100, 1150, 1300; all released at 2000 (fair).
        for (r, received) in [(0, 1_100), (1, 1_150), (2, 1_300)] {
            metrics.on_release(&sample(r, 0, received, 2_000));
        }
        assert_eq!(metrics.packets, 1);
        let h = &metrics.truth;
        assert!(max_is(&h.oml_receipt, 300));
        assert!(max_is(&h.dws_receipt, 200));
        assert!(max_is(&h.dws_release, 0));
        assert!(max_is(&h.oml_release, 1_000));
        assert_eq!(h.holding.min(), 700);
        assert_eq!(h.holding.len(), 3);
        assert_eq!(h.owd.min(), 100);
        assert_eq!(metrics.fairness_percent(&metrics.truth), 100.0);
        // Packet 1: releases spread by 5 µs: unfair.
        for (r, released) in [(0, 2_000), (1, 7_000), (2, 3_000)] {
            metrics.on_release(&sample(r, 1, 1_500, released));
        }
        assert_eq!(metrics.complete, 2);
        assert_eq!(metrics.fairness_percent(&metrics.truth), 50.0);
        assert!(max_is(&metrics.truth.dws_release, 5_000));
        assert_eq!(metrics.lost(), 0);
    }

    #[test]
    fn participants_take_the_first_of_their_gateways() {
        // Two participants, gateways 0 and 2 serve participant 0, 1 and 3 participant 1.
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 4,
            ..MetricsConfig::new(4)
        });
        metrics.group_by_participant(vec![0, 1, 0, 1], 2);
        // Packet 0: participant 0 first hears at 1100 and releases at 2000 (gateway 0; its
        // twin releases late at 9000); participant 1 at 1200 and 2000.
        for (r, received, released) in [
            (0, 1_100, 2_000),
            (2, 8_000, 9_000),
            (1, 1_200, 2_000),
            (3, 1_300, 2_000),
        ] {
            metrics.on_release(&sample(r, 0, received, released));
        }
        // Packet 1: participant 1's first release is 3 µs after participant 0's.
        for (r, released) in [(0, 2_000), (2, 2_000), (1, 5_000), (3, 6_000)] {
            metrics.on_release(&sample(r, 1, 1_500, released));
        }
        let mp = metrics.participants.as_ref().unwrap();
        assert_eq!(mp.packets, 2);
        assert!(max_is(&mp.oml_receipt, 500));
        assert_eq!(mp.oml_receipt.min(), 200);
        assert_eq!(mp.oml_release.min(), 1_000, "the late twin does not count");
        assert!(max_is(&mp.oml_release, 4_000));
        assert_eq!(mp.dws_release.min(), 0);
        assert!(max_is(&mp.dws_release_exchange, 3_000));
        assert_eq!(mp.fairness_percent(), (50.0, 50.0));
        // Over every gateway, the late twin made packet 0 unfair as well.
        assert_eq!(metrics.fairness_percent(&metrics.truth), 0.0);
        // Packet 2: participant 0 gets it through the rewinder on both gateways: lost to
        // it, so left out of OML, DWS and P(F); the recovered copies still complete the
        // packet (it is recorded at once, not when the run ends).
        let recovered = |r| ReleaseSample {
            recovered: true,
            ..sample(r, 2, 9_000, 9_000)
        };
        metrics.on_release(&recovered(0));
        metrics.on_release(&recovered(2));
        metrics.on_release(&sample(1, 2, 1_200, 2_000));
        metrics.on_release(&sample(3, 2, 1_300, 2_000));
        let mp = metrics.participants.as_ref().unwrap();
        assert_eq!((mp.packets, mp.lost), (2, 1));
        assert!(mp.inflight.is_empty());
    }

    #[test]
    fn missing_and_recovered_releases_count_as_loss() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 4,
            ..MetricsConfig::new(2)
        });
        metrics.on_release(&sample(0, 0, 1_100, 1_100));
        metrics.on_release(&sample(0, 1, 1_100, 1_100));
        metrics.on_release(&ReleaseSample {
            recovered: true,
            late: true,
            ..sample(1, 1, 9_000, 9_000)
        });
        // Packet 4 reuses packet 0's slot: packet 0 is finalised with one receiver missing.
        metrics.on_release(&sample(0, 4, 1_100, 1_100));
        metrics.on_release(&sample(1, 4, 1_100, 1_100));
        metrics.finish();
        // Packets 2 and 3 were released by nobody: lost everywhere.
        assert_eq!(metrics.unseen, 2);
        assert_eq!(metrics.packets, 5);
        assert_eq!(metrics.complete, 1);
        assert_eq!(metrics.lost(), 4);
        assert_eq!(metrics.loss_percent(), 80.0);
        assert_eq!(
            Metrics::new(MetricsConfig::new(2)).loss_percent(),
            0.0,
            "nothing measured, nothing lost"
        );
        metrics.finish();
        assert_eq!(metrics.packets, 5, "finish is idempotent");
        assert_eq!(metrics.late_packets, 1);
        assert_eq!(metrics.receivers()[1].recovered, 1);
        assert_eq!(metrics.receivers()[0].released, 3);
    }

    #[test]
    fn a_retired_receiver_is_expected_only_before_its_death() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 8,
            ..MetricsConfig::new(3)
        });
        // Receiver 2 dies after releasing packet 0, holding packet 1; packets 2 and 3 are
        // sent after its death.
        metrics.on_release(&sample(2, 0, 1_100, 1_100));
        metrics.retire(2, mark(2));
        metrics.retire(2, mark(3));
        for packet in 0..4 {
            metrics.on_release(&sample(0, packet, 1_100, 1_100));
            metrics.on_release(&sample(1, packet, 1_100, 1_100));
        }
        // Packets 0, 2 and 3 are complete as soon as their last expected receiver releases.
        assert_eq!(metrics.complete, 3);
        metrics.finish();
        assert_eq!(metrics.packets, 4);
        assert_eq!(metrics.lost(), 1, "packet 1, sent before the death");
        assert_eq!(
            metrics.lost_to_deaths(),
            1,
            "packet 1 was held by the dead receiver"
        );
        assert_eq!(
            metrics
                .retired()
                .iter()
                .map(|a| (a.receiver, a.from, a.until))
                .collect::<Vec<_>>(),
            [(2, mark(2), None)],
            "the first retirement stands"
        );
        assert_eq!(metrics.expected_by(2), 2);
        assert_eq!(metrics.expected_by(0), 4);
    }

    /// Goal: a receiver started again after its death is measured again from where it came
    /// back, and only from there: the packets sent while it was away are complete without
    /// it, what it releases of them is not counted, and its own loss counts only the packets
    /// it was expected to release. Method: three receivers, eight packets; receiver 2 dies
    /// holding packet 1 (away from packet 2), joins at packet 4 (its snapshot's) and comes
    /// back for packet 5 on.
    /// Goal: a receiver that came back may die again; packets sent after its second death
    /// are complete without it, and a second death dated before its return counts from its
    /// return (absences never overlap). Method: two receivers, twelve packets; receiver 1
    /// dies after packet 2, comes back for packet 5 on, dies again "after packet 3" (a date
    /// before its return), releasing through packet 7.
    #[test]
    fn a_receiver_back_may_die_again() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 16,
            first_sequence: Some(mark(0).sequence),
            ..MetricsConfig::new(2)
        });
        for packet in 0..3 {
            metrics.on_release(&sample(0, packet, 1_100, 1_100));
            metrics.on_release(&sample(1, packet, 1_100, 1_100));
        }
        metrics.retire(1, mark(3));
        metrics.on_release(&sample(0, 3, 1_100, 1_100));
        metrics.on_release(&sample(0, 4, 1_100, 1_100));
        metrics.rejoin(1, mark(5));
        for packet in 5..8 {
            metrics.on_release(&sample(0, packet, 1_100, 1_100));
            metrics.on_release(&sample(1, packet, 1_100, 1_100));
        }
        metrics.retire(1, mark(4));
        assert_eq!(metrics.retired().len(), 2);
        assert_eq!(metrics.retired()[1].from, mark(5), "from its return");
        metrics.retire(1, mark(9));
        assert_eq!(metrics.retired().len(), 2, "away already");
        for packet in 8..12 {
            metrics.on_release(&sample(0, packet, 1_100, 1_100));
        }
        metrics.stop_at(mark(12));
        metrics.finish();
        assert_eq!(metrics.packets, 12);
        assert_eq!(metrics.lost(), 0);
    }

    #[test]
    fn a_receiver_started_again_is_measured_from_where_it_came_back() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 16,
            first_sequence: Some(mark(0).sequence),
            ..MetricsConfig::new(3)
        });
        metrics.on_release(&sample(2, 0, 1_100, 1_100));
        metrics.retire(2, mark(2));
        for packet in 0..5 {
            metrics.on_release(&sample(0, packet, 1_100, 1_100));
            metrics.on_release(&sample(1, packet, 1_100, 1_100));
        }
        // Its first release after the restart: packet 4, which is complete already.
        metrics.on_release(&sample(2, 4, 5_000, 5_000));
        metrics.rejoin(2, mark(5));
        metrics.rejoin(2, mark(7));
        for packet in 5..8 {
            metrics.on_release(&sample(0, packet, 1_100, 1_100));
            metrics.on_release(&sample(1, packet, 1_100, 1_100));
            // Packet 5 is not complete before receiver 2 releases it.
            assert_eq!(metrics.complete, packet - 1, "packet {packet}");
            metrics.on_release(&sample(2, packet, 1_300, 1_300));
        }
        metrics.stop_at(mark(8));
        metrics.finish();
        assert_eq!(metrics.packets, 8);
        assert_eq!(
            metrics.lost(),
            1,
            "packet 1, held by receiver 2 at its death"
        );
        assert_eq!(metrics.lost_to_deaths(), 1);
        assert_eq!(
            metrics.retired()[0].until,
            Some(mark(5)),
            "the first return stands"
        );
        assert_eq!(metrics.expected_by(2), 2 + 3, "packets 0-1 and 5-7");
        assert_eq!(metrics.expected_messages_by(2), 5);
        assert_eq!(metrics.receivers()[2].released, 1 + 3);
        assert_eq!(
            metrics.receiver_loss_percent_max(),
            20.0,
            "packet 1 of five"
        );
        // Packets 5-7 waited for receiver 2: their DWS is its 200 ns.
        assert_eq!(metrics.truth.dws_release.max(), 200);
    }

    /// With the measured range known ([`Metrics::stop_at`]), packets nobody got at its ends
    /// are lost too: a run whose tree reaches no gateway for most of it must not report the
    /// few packets that got through as all there was.
    #[test]
    fn packets_nobody_got_at_the_ends_of_the_measured_range_count_as_loss() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 8,
            first_packet_seq: 10,
            first_sequence: Some(mark(10).sequence),
            ..MetricsConfig::new(2)
        });
        metrics.stop_at(mark(20));
        for packet in 12..14 {
            metrics.on_release(&sample(0, packet, 1_100, 1_100));
            metrics.on_release(&sample(1, packet, 1_100, 1_100));
        }
        metrics.finish();
        assert_eq!((metrics.packets, metrics.complete), (10, 2));
        assert_eq!(metrics.loss_percent(), 80.0);
        let mut nothing = Metrics::new(MetricsConfig {
            first_packet_seq: 10,
            first_sequence: Some(mark(10).sequence),
            ..MetricsConfig::new(2)
        });
        nothing.stop_at(mark(15));
        nothing.finish();
        assert_eq!(
            (nothing.packets, nothing.lost()),
            (5, 5),
            "published, none got through"
        );
        assert_eq!((nothing.messages(), nothing.loss_percent()), (5, 100.0));
        // Without the range's first MoldUDP64 number no message can be counted: the loss
        // is the packets', not 0%.
        let mut unknown = Metrics::new(MetricsConfig {
            first_packet_seq: 10,
            ..MetricsConfig::new(2)
        });
        unknown.stop_at(mark(15));
        unknown.finish();
        assert_eq!((unknown.messages(), unknown.loss_percent()), (0, 100.0));
    }

    /// A release of packet `packet_seq` whose header is MoldUDP64 number `sequence` and which
    /// carries `messages` ITCH messages, sent at `packet_seq` ms.
    fn carrying(
        receiver: u32,
        (packet_seq, sequence, messages): (u64, u64, u16),
        received: u64,
        released: u64,
    ) -> ReleaseSample {
        let send = packet_seq * 1_000_000;
        ReleaseSample {
            sequence,
            messages,
            send_x: send,
            send_t: send,
            ..sample(receiver, packet_seq, send + received, send + released)
        }
    }

    /// Goal: DESIGN.md §5's figures are per message. A packet of three messages weighs three
    /// times a packet of one in OML, DWS and P(F); the root's idle packets weigh nothing;
    /// the messages of a packet nobody released are counted from the MoldUDP64 numbers
    /// around it; MPS counts messages, not packets.
    #[test]
    fn figures_are_per_message_and_idle_packets_count_in_none() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 8,
            first_packet_seq: 1,
            first_sequence: Some(1),
            ..MetricsConfig::new(2)
        });
        // (packet, header's MoldUDP64 number, messages): the next header follows the
        // messages.
        let p1 = (1, 1, 3);
        let p2 = (2, 5, 0); // idle
        let p3 = (3, 6, 1);
        // p4 = (4, 8, 2): nobody releases it.
        let p5 = (5, 11, 4);
        let p6 = (6, 16, 1);
        // p1: fair (both release at 1 µs); p2, idle, and p3: releases 5 µs apart (unfair).
        for (r, received) in [(0, 100), (1, 300)] {
            metrics.on_release(&carrying(r, p1, received, 1_000));
        }
        for packet in [p2, p3] {
            metrics.on_release(&carrying(0, packet, 100, 1_000));
            metrics.on_release(&carrying(1, packet, 100, 6_000));
        }
        // p5 reaches only receiver 0; p6 both, fairly.
        metrics.on_release(&carrying(0, p5, 100, 1_000));
        for r in 0..2 {
            metrics.on_release(&carrying(r, p6, 100, 1_000));
        }
        metrics.stop_at(Mark {
            packet_seq: 7,
            sequence: 18,
        });
        metrics.finish();
        assert_eq!((metrics.packets, metrics.idle_packets), (6, 1));
        assert_eq!(
            metrics.messages(),
            3 + 1 + 2 + 4 + 1,
            "p4's two counted too"
        );
        assert_eq!(metrics.complete_messages, 5, "p1, p3 and p6");
        assert_eq!(
            (metrics.lost(), metrics.lost_messages()),
            (2, 6),
            "p4 and p5"
        );
        assert_eq!(metrics.loss_percent(), 100.0 * 6.0 / 11.0);
        // Per packet P(F) would be 2 of 4 complete packets (p2, idle, unfair); per message it
        // is p1's three and p6's one of five.
        assert_eq!(metrics.fairness_percent(&metrics.truth), 80.0);
        let h = &metrics.truth;
        assert_eq!(h.oml_receipt.len(), 5, "one OML a complete message");
        assert_eq!(h.dws_release.len(), 5);
        assert!(max_is(&h.oml_receipt, 300), "p1's three");
        assert_eq!(h.oml_receipt.count_at(300), 3);
        assert_eq!(h.dws_release.count_at(5_000), 1, "p3's, not idle p2's");
        assert_eq!(
            h.holding.len(),
            3 * 2 + 2 + 4 + 2,
            "per receiver and message"
        );
        // Receiver 1 released 3 + 1 + 1 of the 11 messages, receiver 0 all but p4's.
        assert_eq!(metrics.receiver_loss_percent_max(), 100.0 * 6.0 / 11.0);
        // Messages sent after p1 up to p6 (0 + 1 + 2 + 4 + 1) over the 5 ms between them.
        assert!((metrics.mps() - 1_600.0).abs() < 1e-6, "{}", metrics.mps());
        assert!((metrics.packets_per_second() - 1_000.0).abs() < 1e-6);
    }

    /// What a dead receiver held is counted in messages, not packets.
    #[test]
    fn messages_held_by_a_dead_receiver_are_counted_by_their_numbers() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 8,
            first_packet_seq: 1,
            first_sequence: Some(1),
            ..MetricsConfig::new(3)
        });
        let packets = [(1, 1, 2), (2, 4, 3), (3, 8, 1), (4, 10, 5)];
        // Receiver 2 releases the first packet and dies from the fourth on, holding 2 and 3.
        metrics.on_release(&carrying(2, packets[0], 100, 1_000));
        metrics.retire(
            2,
            Mark {
                packet_seq: 4,
                sequence: 10,
            },
        );
        for packet in packets {
            for r in 0..2 {
                metrics.on_release(&carrying(r, packet, 100, 1_000));
            }
        }
        metrics.stop_at(Mark {
            packet_seq: 5,
            sequence: 16,
        });
        metrics.finish();
        assert_eq!(metrics.messages(), 11);
        assert_eq!(metrics.complete_messages, 2 + 5);
        assert_eq!(metrics.lost_messages(), 4);
        assert_eq!(metrics.lost_to_deaths(), 3 + 1, "packets 2 and 3");
        assert_eq!(metrics.expected_messages_by(2), 2 + 3 + 1);
        assert_eq!(metrics.receiver_loss_percent_max(), 100.0 * 4.0 / 6.0);
    }

    /// A receiver that released nothing is the worst receiver when the receivers are known.
    #[test]
    fn a_receiver_that_got_nothing_is_the_worst() {
        let mut metrics = Metrics::new(MetricsConfig {
            receiver_ids: Some(5..8),
            ..MetricsConfig::new(3)
        });
        for packet in 0..4 {
            metrics.on_release(&sample(5, packet, 1_100, 1_100));
            if packet != 1 {
                metrics.on_release(&sample(6, packet, 1_100, 1_100));
            }
        }
        metrics.finish();
        assert_eq!(metrics.receiver_loss_percent_max(), 100.0, "receiver 7");
        metrics.config.receiver_ids = None;
        assert_eq!(
            metrics.receiver_loss_percent_max(),
            25.0,
            "only those seen: 6"
        );
    }

    /// What dead receivers held is told apart from network loss, once per packet.
    #[test]
    fn packets_held_by_dead_receivers_count_once() {
        let mut metrics = Metrics::new(MetricsConfig {
            window_packets: 16,
            ..MetricsConfig::new(4)
        });
        // Receiver 0 never got packet 1 (the network's), released 2 and died holding 3 and 4;
        // receiver 1 released 0-2 and died holding 3; both dead from packet 5 on. Receiver 2
        // misses packet 6 (the network's again).
        for packet in [0, 2] {
            metrics.on_release(&sample(0, packet, 1_100, 1_100));
        }
        for packet in 0..3 {
            metrics.on_release(&sample(1, packet, 1_100, 1_100));
        }
        metrics.retire(0, mark(5));
        metrics.retire(1, mark(5));
        for packet in 0..8 {
            metrics.on_release(&sample(3, packet, 1_100, 1_100));
            if packet != 6 {
                metrics.on_release(&sample(2, packet, 1_100, 1_100));
            }
        }
        metrics.finish();
        assert_eq!(metrics.packets, 8);
        assert_eq!(metrics.lost(), 4, "packets 1, 3, 4 and 6");
        assert_eq!(metrics.lost_to_deaths(), 2, "packets 3 and 4, once each");
        assert_eq!(Metrics::new(MetricsConfig::new(1)).lost_to_deaths(), 0);
    }

    #[test]
    fn union_len_counts_each_integer_once() {
        assert_eq!(union_len([].into_iter()), 0);
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..3;
        assert_eq!(
            union_len([reversed, 4..4].into_iter()),
            0,
            "empty and reversed"
        );
        assert_eq!(union_len([10..20, 15..25].into_iter()), 15, "overlapping");
        assert_eq!(
            union_len([15..25, 10..20, 30..31].into_iter()),
            16,
            "any order"
        );
        assert_eq!(union_len([10..30, 12..14].into_iter()), 20, "nested");
        assert_eq!(union_len([0..2, 2..4].into_iter()), 4, "adjacent");
    }

    #[test]
    fn clock_error_shows_as_a_difference_between_the_clocks() {
        let mut metrics = Metrics::new(MetricsConfig::new(2));
        // Receiver 1's exchange clock runs 3 µs behind: exchange DWS looks fair, truth is not.
        let mut a = sample(0, 0, 1_100, 10_000);
        let mut b = sample(1, 0, 1_100, 10_000);
        a.released_t = 10_000;
        b.released_t = 13_000;
        metrics.on_release(&a);
        metrics.on_release(&b);
        assert_eq!(metrics.fairness_percent(&metrics.exchange), 100.0);
        assert_eq!(metrics.fairness_percent(&metrics.truth), 0.0);
    }
}
