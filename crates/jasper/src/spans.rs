//! The status lines' per-packet figures, one piece for `jasper up` and `jasper watch`: a
//! packet's releases are gathered until every gateway it waits for has released it, then
//! its OML and DWS (DESIGN.md §5) count once for each message it carries.
//!
//! The summaries go through [`sim::metrics::Metrics`]; this is only the live view of one
//! status interval, which forgets a packet a gateway never completes
//! ([`Spans::expire`]).
//!
//! It also says which gateway makes the unfairness ([`Blame`]): of the messages in unfair
//! packets (DWS over 1 µs), those each gateway released first, and last. One gateway
//! behind in most of them is a straggler VM, or a clock off; DWS alone does not say which
//! of a thousand gateways to look at.

use std::collections::BTreeMap;

use sim::metrics::FAIR_DWS_NS;

/// One packet's releases so far, all on one clock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    /// The packet's sequence number plus one; 0 for a free slot.
    tag: u64,
    send: u64,
    first: u64,
    last: u64,
    /// The gateways that released it first and last so far.
    first_by: u32,
    last_by: u32,
    /// Releases seen.
    pub(crate) count: u32,
    messages: u16,
    /// When its first release was seen (the caller's clock).
    opened_ns: u64,
}

/// Packets open at once by default: a ring indexed by packet number (one index a release; a
/// map cost a search). 65,536 packets is 13 s at 5,000 packets a second and 1.3 s at 50,000,
/// longer than `jasper up` keeps one open (1 s, [`Spans::expire`]). A packet that needs the
/// slot of one still open replaces it, and [`Spans::expire`] counts the one replaced (a
/// status line's `incomplete`). The ring is 3.5 MiB; a record touches the few slots of the
/// packets in flight, but [`Spans::expire`] sweeps all of it once a status interval (under
/// `up`'s shared lock).
const SLOTS: usize = 1 << 16;

/// Packets open at once in `jasper watch`: 262,144 packets, 5.2 s at 50,000 packets a
/// second, over its default `--silent-after` of 2 s (with 65,536, packets waiting for a
/// gateway silent over 1.3 s were counted incomplete before it was taken for dead). 14 MiB.
pub(crate) const WATCH_SLOTS: usize = 1 << 18;

/// The packets some gateway waited for has not released yet.
#[derive(Debug)]
pub(crate) struct Spans {
    ring: Vec<Span>,
    /// Slots in use.
    open: usize,
    /// Open packets replaced by a packet a ring later since the last [`Spans::expire`].
    replaced: u64,
    /// The first packet measured ([`Spans::measure_from`]): the unfair packets from it on
    /// count in [`Figures::measured_blame`] too.
    measured_from: Option<u64>,
}

impl Default for Spans {
    fn default() -> Self {
        Self::with_slots(SLOTS)
    }
}

impl Spans {
    /// A ring of `slots` packets (a power of two).
    pub(crate) fn with_slots(slots: usize) -> Self {
        assert!(slots.is_power_of_two());
        Self {
            ring: vec![Span::default(); slots],
            open: 0,
            replaced: 0,
            measured_from: None,
        }
    }

    /// From packet `packet_seq` on, the packets closed count in the summary's blame too
    /// ([`Figures::measured_blame`]); `None`: in none.
    pub(crate) fn measure_from(&mut self, packet_seq: Option<u64>) {
        self.measured_from = packet_seq;
    }

    fn slot(&self, packet_seq: u64) -> usize {
        (packet_seq % self.ring.len() as u64) as usize
    }

    /// `gateway`'s release of packet `packet_seq`, sent at `send` and released at `released`
    /// with `messages` messages; `now` is when it was seen. Returns the packet's releases so
    /// far (0 for packet `u64::MAX`, which no stream reaches: its tag would mark a free
    /// slot).
    pub(crate) fn add(
        &mut self,
        packet_seq: u64,
        gateway: u32,
        send: u64,
        released: u64,
        messages: u16,
        now: u64,
    ) -> u32 {
        let Some(tag) = packet_seq.checked_add(1) else {
            return 0;
        };
        let slot = self.slot(packet_seq);
        let span = &mut self.ring[slot];
        if span.tag != tag {
            if span.tag == 0 {
                self.open += 1;
            } else {
                self.replaced += 1;
            }
            *span = Span {
                tag,
                send,
                first: released,
                last: released,
                first_by: gateway,
                last_by: gateway,
                count: 0,
                messages,
                opened_ns: now,
            };
        }
        if released < span.first {
            (span.first, span.first_by) = (released, gateway);
        }
        if released > span.last {
            (span.last, span.last_by) = (released, gateway);
        }
        span.count += 1;
        span.count
    }

    /// Packet `packet_seq` has been released by every gateway it waits for: its figures go
    /// into `figures` (none for an idle packet), and it is forgotten.
    pub(crate) fn close(&mut self, packet_seq: u64, figures: &mut Figures) {
        let slot = self.slot(packet_seq);
        let span = &mut self.ring[slot];
        if packet_seq.checked_add(1) == Some(span.tag) {
            figures.add(span, self.measured_from);
            *span = Span::default();
            self.open -= 1;
        }
    }

    /// Closes every packet released at least `releases` times (the gateways waited for
    /// became fewer).
    pub(crate) fn close_complete(&mut self, releases: u32, figures: &mut Figures) {
        let measured_from = self.measured_from;
        self.retain(|span| {
            let complete = span.count >= releases;
            if complete {
                figures.add(span, measured_from);
            }
            !complete
        });
    }

    /// Keeps the open packets `keep` says to keep; frees the others.
    fn retain(&mut self, mut keep: impl FnMut(&Span) -> bool) {
        if self.open == 0 {
            return;
        }
        for span in self.ring.iter_mut().filter(|s| s.tag != 0) {
            if !keep(span) {
                *span = Span::default();
                self.open -= 1;
            }
        }
    }

    /// Forgets the packets opened `max_age_ns` or longer before `now` (some gateway never
    /// released them in time); returns how many, with those replaced since the last call.
    pub(crate) fn expire(&mut self, now: u64, max_age_ns: u64) -> u64 {
        let before = self.open;
        self.retain(|span| now.saturating_sub(span.opened_ns) < max_age_ns);
        (before - self.open) as u64 + std::mem::take(&mut self.replaced)
    }

    #[cfg(test)]
    pub(crate) fn get(&self, packet_seq: u64) -> Option<&Span> {
        let span = &self.ring[self.slot(packet_seq)];
        (packet_seq.checked_add(1) == Some(span.tag)).then_some(span)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.open == 0
    }

    pub(crate) fn clear(&mut self) {
        self.retain(|_| false);
        self.replaced = 0;
        self.measured_from = None;
    }
}

/// Of the messages in unfair packets, those one gateway released first and last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Blame {
    pub(crate) first: u64,
    pub(crate) last: u64,
}

/// [`Blame`] by gateway id.
pub(crate) type BlameByGateway = BTreeMap<u32, Blame>;

/// Adds `from` into `into`.
pub(crate) fn add_blame(into: &mut BlameByGateway, from: &BlameByGateway) {
    for (&gateway, b) in from {
        let total = into.entry(gateway).or_default();
        total.first += b.first;
        total.last += b.last;
    }
}

/// The gateways of `blame`, most often at one end of an unfair packet first (the larger
/// of its two counts; on a tie, the lower id).
pub(crate) fn ranked(blame: &BlameByGateway) -> Vec<(u32, Blame)> {
    let mut ranked: Vec<(u32, Blame)> = blame.iter().map(|(&id, &b)| (id, b)).collect();
    ranked.sort_by_key(|&(id, b)| (std::cmp::Reverse(b.first.max(b.last)), id));
    ranked
}

/// The first of [`ranked`] over the unfair messages of `blame` (`unfair` of them):
/// `(gateway, released last, share of unfair messages in percent)`, where "last" says
/// whether it was mostly the latest (else the earliest; on a tie, the latest). `None`
/// with none unfair.
pub(crate) fn worst(blame: &BlameByGateway, unfair: u64) -> Option<(u32, bool, f64)> {
    let &(gateway, b) = ranked(blame).first()?;
    let share = 100.0 * b.first.max(b.last) as f64 / unfair.max(1) as f64;
    Some((gateway, b.last >= b.first, share))
}

/// OML and DWS of the packets closed in one status interval, each counted once for every
/// message its packet carries (DESIGN.md §5 defines both per message).
#[derive(Clone, Debug, Default)]
pub(crate) struct Figures {
    oml: Vec<(u64, u16)>,
    dws: Vec<(u64, u16)>,
    /// Messages in the packets closed.
    pub(crate) messages: u64,
    /// Of those, in packets whose DWS is fair.
    fair_messages: u64,
    /// Which gateways released the unfair packets first and last.
    pub(crate) blame: BlameByGateway,
    /// The same over the packets measured ([`Spans::measure_from`] on), for a summary: the
    /// status interval in which measuring begins also closes packets of the warm-up.
    pub(crate) measured_blame: BlameByGateway,
}

impl Figures {
    /// Counts `span`, a packet every gateway has released; in the measured blame too when
    /// it is `measured_from` or later.
    fn add(&mut self, span: &Span, measured_from: Option<u64>) {
        if span.messages == 0 {
            return;
        }
        let dws = span.last - span.first;
        let messages = u64::from(span.messages);
        self.oml
            .push((span.last.saturating_sub(span.send), span.messages));
        self.dws.push((dws, span.messages));
        self.messages += messages;
        if dws <= FAIR_DWS_NS {
            self.fair_messages += messages;
        } else {
            self.blame.entry(span.first_by).or_default().first += messages;
            self.blame.entry(span.last_by).or_default().last += messages;
            // The tag is the packet's number plus one.
            if measured_from.is_some_and(|from| span.tag > from) {
                self.measured_blame.entry(span.first_by).or_default().first += messages;
                self.measured_blame.entry(span.last_by).or_default().last += messages;
            }
        }
    }

    /// Messages in unfair packets.
    pub(crate) fn unfair_messages(&self) -> u64 {
        self.messages - self.fair_messages
    }

    /// DWS values with their message counts, unsorted.
    #[cfg(test)]
    pub(crate) fn dws(&self) -> &[(u64, u16)] {
        &self.dws
    }

    /// `OML p50 … p99 … µs  DWS p50 … p99 … µs  P(F) …%` (`-` for P(F) with no message),
    /// then, with unfair messages, the gateway most often at one end of them, named by
    /// `name`: `unfair: g17 last in 62%`.
    pub(crate) fn text(&mut self, name: impl Fn(u32) -> String) -> String {
        let pct = weighted_percentile_us;
        let fair = match self.messages {
            0 => "-".to_string(),
            n => format!("{:.1}%", 100.0 * self.fair_messages as f64 / n as f64),
        };
        let mut text = format!(
            "OML p50 {:>6.1} p99 {:>6.1} µs  DWS p50 {:>5.1} p99 {:>6.1} µs  P(F) {fair}",
            pct(&mut self.oml, 50),
            pct(&mut self.oml, 99),
            pct(&mut self.dws, 50),
            pct(&mut self.dws, 99),
        );
        if let Some((gateway, last, share)) = worst(&self.blame, self.unfair_messages()) {
            let end = if last { "last" } else { "first" };
            text.push_str(&format!("  unfair: {} {end} in {share:.0}%", name(gateway)));
        }
        text
    }
}

/// The `p`th percentile, in µs, of values each counted `weight` times; 0 when there are none.
pub(crate) fn weighted_percentile_us(values: &mut [(u64, u16)], p: u64) -> f64 {
    let total: u64 = values.iter().map(|&(_, w)| u64::from(w)).sum();
    if total == 0 {
        return 0.0;
    }
    values.sort_unstable();
    // The value of the message at rank ⌊total × p / 100⌋ (0-based), as a sorted list of every
    // message would give.
    let rank = (total * p / 100).min(total - 1);
    let mut below = 0;
    for &(value, weight) in values.iter() {
        below += u64::from(weight);
        if below > rank {
            return value as f64 / 1e3;
        }
    }
    unreachable!("the ranks end at the total")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_counts_once_every_gateway_released_it() {
        let mut spans = Spans::default();
        let mut figures = Figures::default();
        // Packet 1 (3 messages) sent at 100, released at 600 by gateway 10 and 2,100 by
        // gateway 11 (DWS 1.5 µs).
        assert_eq!(spans.add(1, 10, 100, 600, 3, 0), 1);
        // Packet 2 (1 message), released at 900 and 1,000 (DWS 0.1 µs).
        spans.add(2, 10, 200, 900, 1, 0);
        assert_eq!(spans.add(1, 11, 100, 2_100, 3, 5), 2);
        spans.close(1, &mut figures);
        assert_eq!(spans.len(), 1);
        spans.add(2, 10, 200, 1_000, 1, 6);
        // An idle packet counts nothing.
        spans.add(3, 10, 300, 400, 0, 6);
        spans.add(3, 10, 300, 400, 0, 6);
        spans.close_complete(2, &mut figures);
        assert!(spans.is_empty());
        assert_eq!(figures.messages, 4);
        let name = |id: u32| format!("g{id}");
        // The unfair packet: gateway 10 released it first, 11 last, its 3 messages each.
        assert_eq!(figures.blame[&10], Blame { first: 3, last: 0 });
        assert_eq!(figures.blame[&11], Blame { first: 0, last: 3 });
        let text = figures.text(name);
        // Per message: DWS 1.5 µs three times, 0.1 µs once; OML 2.0 µs three times, 0.8 once.
        assert!(
            // (g10 first and g11 last in every unfair message: a tie, to the lower id.)
            text.contains(
                "OML p50    2.0 p99    2.0 µs  DWS p50   1.5 p99    1.5 µs  P(F) 25.0%  \
                 unfair: g10 first in 100%"
            ),
            "{text}"
        );
        assert!(Figures::default().text(name).ends_with("P(F) -"));
    }

    /// Goal: the gateway at one end of most unfair packets is named, whichever end.
    #[test]
    fn the_gateway_most_often_at_one_end_of_unfair_packets_is_named() {
        let mut spans = Spans::default();
        let mut figures = Figures::default();
        // Gateway 12 releases 5 µs early in packets 1-3, while 10 and 11 take turns being
        // last; packet 4 is fair.
        for packet in 1..=4 {
            let (early, odd) = if packet < 4 {
                (5_000, packet % 2)
            } else {
                (0, 0)
            };
            spans.add(packet, 10, 0, 100_000 + odd * 300, 1, 0);
            spans.add(
                packet,
                11,
                0,
                100_000 + (1 - odd) * 300 * u64::from(packet < 4),
                1,
                0,
            );
            spans.add(packet, 12, 0, 100_000 - early, 1, 0);
            spans.close(packet, &mut figures);
        }
        assert_eq!(figures.unfair_messages(), 3);
        assert_eq!(worst(&figures.blame, 3), Some((12, false, 100.0)));
        assert!(
            figures
                .text(|id| format!("g{id}"))
                .ends_with("unfair: g12 first in 100%")
        );
        let mut total = BlameByGateway::new();
        add_blame(&mut total, &figures.blame);
        add_blame(&mut total, &figures.blame);
        assert_eq!(total[&12], Blame { first: 6, last: 0 });
        assert_eq!(total[&10], Blame { first: 0, last: 4 });
        assert_eq!(total[&11], Blame { first: 0, last: 2 });
        assert_eq!(worst(&BlameByGateway::new(), 0), None);
        let order: Vec<u32> = ranked(&total).iter().map(|&(id, _)| id).collect();
        assert_eq!(order, [12, 10, 11]);
        // Packet u64::MAX is no packet (its tag would be a free slot's).
        assert_eq!(spans.add(u64::MAX, 10, 0, 1, 1, 0), 0);
        assert!(spans.is_empty());
        // Nor does closing it free a slot that is free already (the count would wrap).
        spans.close(u64::MAX, &mut figures);
        assert!(spans.is_empty() && spans.get(u64::MAX).is_none());
    }

    #[test]
    fn packets_not_completed_in_time_are_forgotten() {
        let mut spans = Spans::default();
        spans.add(1, 10, 0, 10, 1, 1_000);
        spans.add(2, 10, 0, 10, 1, 2_000);
        assert_eq!(spans.expire(2_500, 1_000), 1);
        assert!(spans.get(1).is_none());
        assert_eq!(spans.get(2).map(|s| s.count), Some(1));
    }

    #[test]
    fn a_packet_a_ring_apart_takes_the_slot_of_one_still_open() {
        let mut spans = Spans::default();
        let mut figures = Figures::default();
        spans.add(7, 10, 0, 10, 1, 0);
        let later = 7 + SLOTS as u64;
        assert_eq!(
            spans.add(later, 10, 0, 20, 1, 0),
            1,
            "a new packet, not packet 7"
        );
        assert!(spans.get(7).is_none());
        assert_eq!(spans.len(), 1);
        spans.close(7, &mut figures);
        assert_eq!((spans.len(), figures.messages), (1, 0), "packet 7 is gone");
        assert_eq!(spans.expire(0, 1_000), 1, "counted as forgotten");
        spans.close(later, &mut figures);
        assert_eq!((spans.len(), figures.messages), (0, 1));
        spans.add(1, 10, 0, 10, 1, 0);
        spans.add(2, 10, 0, 10, 1, 0);
        spans.clear();
        assert!(spans.is_empty() && spans.get(1).is_none());
    }

    #[test]
    fn percentiles_weigh_each_value_by_its_messages() {
        let mut values = vec![(5_000, 1), (1_000, 98), (9_000, 1)];
        assert_eq!(weighted_percentile_us(&mut values, 50), 1.0);
        assert_eq!(weighted_percentile_us(&mut values, 99), 9.0);
        assert_eq!(weighted_percentile_us(&mut [], 50), 0.0);
    }
}
