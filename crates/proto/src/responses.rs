//! Numbered responses: the order path's way down, made reliable.
//!
//! The root numbers every response it sends a participant 1, 2, 3, ... (one stream per
//! participant, [`wire::response`]) and keeps the recent ones ([`ResponseLog`]). A gateway
//! delivers its participant's responses in that order, each once ([`ResponseStream`]): a
//! copy it already has is dropped, one that comes early waits for the ones before it, and a
//! gap in the numbers is asked for again ([`wire::control::Repr::ResponseGap`]) after
//! `gap_grace`, again after `gap_retry`, then twice that, and so on up to [`ASK_BACKOFF_MAX`]
//! doublings, for as long as it takes: a response is skipped (counted lost) only when the
//! root says it no longer holds it. (Giving up after a few tries, as for market data, would
//! throw away responses that are slow rather than lost, and there is no later chance for a
//! response: a fill missed is a position wrong.) Once a participant's responses have
//! been quiet for `response_status_after` (and again after eight times that), the root sends
//! its gateways the number of the next one ([`wire::control::Repr::ResponseStatus`]), so a
//! lost *last* response (the fill of a resting order, with nothing after it) is noticed too.
//!
//! An order's first answer was already recovered by the gateway's retry
//! ([`crate::inbound::Answers`]); this covers every response, including the later ones no
//! retry asks for (a fill, an unsolicited cancel).
//!
//! The numbers are part of the root's state: they are in its snapshots, and a root recovering
//! from its journal numbers the replayed responses as before, so the responses it sends again
//! after a crash carry their old numbers and a gateway drops the ones it already has.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::time::Instant;

/// Responses a root holds for sending again, at least (it holds every response of the
/// last `keep` too, up to [`HELD_HARD_FACTOR`] times this).
pub const HELD_MIN: usize = 1 << 16;
/// See [`HELD_MIN`].
pub const HELD_HARD_FACTOR: usize = 16;
/// Responses the root sends for one gap request at most (the gateway asks again for the
/// rest).
pub const GAP_FILL_MAX: u32 = 64;
/// Responses a gateway keeps that came after a gap, at most; later ones are dropped (and
/// asked for again once the gap is filled).
pub const PENDING_MAX: usize = 4096;
/// A gateway asks for a gap again after `gap_retry` times two to the requests already sent,
/// at most this many doublings (with the default 2 ms: every 128 ms at the slowest).
pub const ASK_BACKOFF_MAX: u32 = 6;

/// One participant's stream at the root.
#[derive(Clone, Debug)]
struct Sent {
    /// The number of its next response.
    next: u64,
    /// When its latest response went.
    last: Instant,
    /// Quiet statuses still to send for the latest response (2, 1, 0).
    statuses_left: u8,
    /// Its entry in `ResponseLog::quiet`, if any (it may be early: checked when due).
    due: Option<Instant>,
    /// Its held responses: (number, absolute index in `ResponseLog::held`), oldest first.
    /// Numbers rise but may skip (after a recovery, the responses of records before the
    /// re-sent window are numbered and never held).
    held: VecDeque<(u64, u64)>,
}

impl Sent {
    fn new(next: u64) -> Self {
        Self {
            next,
            last: Instant::ZERO,
            statuses_left: 0,
            due: None,
            held: VecDeque::new(),
        }
    }
}

/// A response datagram the root holds for sending again.
#[derive(Clone, Copy, Debug)]
struct Held {
    at: Instant,
    participant: u32,
    len: u8,
    bytes: [u8; wire::response::DATAGRAM_MAX],
}

/// The root's side: numbers per participant, the recent responses, and the quiet statuses.
///
/// The held responses are one ring, oldest first, each participant indexing its own in it:
/// holding and forgetting one costs O(1) and no allocation (a response goes out on every
/// order, so this is on the engine's hot path); a gap request looks its numbers up by
/// binary search.
#[derive(Debug)]
pub(crate) struct ResponseLog {
    streams: BTreeMap<u32, Sent>,
    /// Response datagrams held for sending again, in the order they went.
    held: VecDeque<Held>,
    /// Absolute index of `held[0]`.
    held_base: u64,
    keep: Duration,
    /// Quiet statuses due: (when, participant).
    quiet: BTreeSet<(Instant, u32)>,
    status_after: Duration,
    /// Responses sent again for gap requests.
    pub(crate) refilled: u64,
    /// Statuses sent.
    pub(crate) statuses: u64,
}

impl ResponseLog {
    pub(crate) fn for_node(config: &crate::config::NodeConfig) -> Self {
        Self {
            streams: BTreeMap::new(),
            held: VecDeque::new(),
            held_base: 0,
            keep: config
                .parent_timeout
                .saturating_mul(crate::inbound::RESEND_KEEP_TIMEOUTS),
            quiet: BTreeSet::new(),
            status_after: if config.response_recovery {
                config.response_status_after
            } else {
                Duration::ZERO
            },
            refilled: 0,
            statuses: 0,
        }
    }

    /// Takes the number of `participant`'s next response.
    pub(crate) fn number(&mut self, participant: u32) -> u64 {
        let stream = self
            .streams
            .entry(participant)
            .or_insert_with(|| Sent::new(1));
        let seq = stream.next;
        stream.next += 1;
        seq
    }

    /// Notes that response `seq` of `participant` (from [`ResponseLog::number`]) went at
    /// `now` as `datagram`: held for gap requests, and the participant's quiet status is
    /// due `response_status_after` from now. A datagram too long for a response, or a number
    /// not above the participant's last held one, is not held.
    pub(crate) fn sent(&mut self, now: Instant, participant: u32, seq: u64, datagram: &[u8]) {
        self.forget_old(now);
        let Some(stream) = self.streams.get_mut(&participant) else {
            return;
        };
        let fits = datagram.len() <= wire::response::DATAGRAM_MAX;
        let rises = stream.held.back().is_none_or(|&(last, _)| last < seq);
        if fits && rises && seq < stream.next {
            let mut held = Held {
                at: now,
                participant,
                len: datagram.len() as u8,
                bytes: [0; wire::response::DATAGRAM_MAX],
            };
            held.bytes[..datagram.len()].copy_from_slice(datagram);
            stream
                .held
                .push_back((seq, self.held_base + self.held.len() as u64));
            self.held.push_back(held);
        }
        if self.status_after.is_zero() {
            return;
        }
        stream.last = stream.last.max(now);
        stream.statuses_left = 2;
        let want = stream.last + self.status_after;
        match stream.due {
            // An earlier entry is checked when due and moved to `want` then.
            Some(due) if due <= want => {}
            Some(due) => {
                self.quiet.remove(&(due, participant));
                self.quiet.insert((want, participant));
                stream.due = Some(want);
            }
            None => {
                self.quiet.insert((want, participant));
                stream.due = Some(want);
            }
        }
    }

    fn forget_old(&mut self, now: Instant) {
        let hard = HELD_MIN.saturating_mul(HELD_HARD_FACTOR);
        while let Some(oldest) = self.held.front() {
            let full = self.held.len() >= HELD_MIN;
            if !(full && now.saturating_duration_since(oldest.at) > self.keep)
                && self.held.len() < hard
            {
                break;
            }
            if let Some(stream) = self.streams.get_mut(&oldest.participant) {
                let front = stream.held.pop_front();
                debug_assert_eq!(front.map(|(_, at)| at), Some(self.held_base));
            }
            self.held.pop_front();
            self.held_base += 1;
        }
    }

    /// The numbers `oldest..next` of `participant`'s responses held (`oldest == next` when
    /// none is).
    pub(crate) fn status(&self, participant: u32) -> (u64, u64) {
        let Some(stream) = self.streams.get(&participant) else {
            return (1, 1);
        };
        let oldest = stream.held.front().map_or(stream.next, |&(seq, _)| seq);
        (oldest, stream.next)
    }

    /// Response `seq` of `participant`, if held.
    pub(crate) fn get(&self, participant: u32, seq: u64) -> Option<&[u8]> {
        let stream = self.streams.get(&participant)?;
        let i = stream
            .held
            .binary_search_by_key(&seq, |&(seq, _)| seq)
            .ok()?;
        let held = &self.held[(stream.held[i].1 - self.held_base) as usize];
        Some(&held.bytes[..usize::from(held.len)])
    }

    /// Calls `send` with each held response of `participant` numbered `from..from + count`
    /// (at most [`GAP_FILL_MAX`]); returns whether all of those it has ever sent are held.
    pub(crate) fn fill(
        &mut self,
        participant: u32,
        from: u64,
        count: u32,
        mut send: impl FnMut(&[u8]),
    ) -> bool {
        let Some(stream) = self.streams.get(&participant) else {
            return true;
        };
        let end = from
            .saturating_add(u64::from(count.min(GAP_FILL_MAX)))
            .min(stream.next);
        let first = stream.held.partition_point(|&(seq, _)| seq < from);
        let mut expected = from;
        let mut complete = true;
        for &(seq, at) in stream.held.range(first..) {
            if seq >= end {
                break;
            }
            complete &= seq == expected;
            expected = seq + 1;
            let held = &self.held[(at - self.held_base) as usize];
            self.refilled += 1;
            send(&held.bytes[..usize::from(held.len)]);
        }
        complete && expected >= end
    }

    /// When the next quiet status is due.
    pub(crate) fn next_status(&self) -> Option<Instant> {
        self.quiet.first().map(|&(at, _)| at)
    }

    /// The next quiet status due at `now`: `(participant, oldest, next)`.
    pub(crate) fn poll_status(&mut self, now: Instant) -> Option<(u32, u64, u64)> {
        while let Some(&(at, participant)) = self.quiet.first() {
            if at > now {
                return None;
            }
            self.quiet.pop_first();
            let Some(stream) = self.streams.get_mut(&participant) else {
                continue;
            };
            stream.due = None;
            if stream.statuses_left == 0 {
                continue;
            }
            // The first status `status_after` after the last response, the second eight
            // times that.
            let quiet_for = if stream.statuses_left == 2 {
                self.status_after
            } else {
                self.status_after.saturating_mul(8)
            };
            let want = stream.last + quiet_for;
            if want > at {
                self.quiet.insert((want, participant));
                stream.due = Some(want);
                continue;
            }
            stream.statuses_left -= 1;
            if stream.statuses_left > 0 {
                let later = stream.last + self.status_after.saturating_mul(8);
                self.quiet.insert((later, participant));
                stream.due = Some(later);
            }
            self.statuses += 1;
            let (oldest, next) = self.status(participant);
            return Some((participant, oldest, next));
        }
        None
    }

    /// The next number of every participant that has had a response, for a snapshot.
    pub(crate) fn numbers(&self) -> Vec<(u32, u64)> {
        self.streams.iter().map(|(&p, s)| (p, s.next)).collect()
    }

    /// Restores the numbers of a snapshot ([`ResponseLog::numbers`]).
    pub(crate) fn restore(&mut self, numbers: &[(u32, u64)]) {
        for &(participant, next) in numbers {
            self.streams.insert(participant, Sent::new(next));
        }
    }

    /// Cheap enough to run after every handler: the ends of each collection only.
    pub(crate) fn check_invariants(&self) {
        assert!(self.quiet.len() <= self.streams.len());
        for &(at, p) in self.quiet.first().into_iter().chain(self.quiet.last()) {
            assert_eq!(self.streams.get(&p).and_then(|s| s.due), Some(at));
        }
        for held in self.held.front().into_iter().chain(self.held.back()) {
            let stream = self.streams.get(&held.participant).expect("its stream");
            let &(seq, at) = stream.held.front().expect("indexed");
            assert!(seq < stream.next && at >= self.held_base);
            assert!(at < self.held_base + self.held.len() as u64);
        }
    }
}

/// What a gateway does with a response it received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Deliver it now (then [`ResponseStream::pop_ready`] for any waiting behind it).
    Deliver,
    /// It came after a gap: kept until the gap is filled.
    Held,
    /// Already delivered or kept: drop it.
    Duplicate,
    /// Past a gap with no room left to keep it: drop it (it is asked for again later).
    Full,
}

/// A gap the gateway is asking for.
#[derive(Clone, Copy, Debug)]
struct Asking {
    /// When to ask (again).
    at: Instant,
    /// Requests sent so far.
    attempts: u32,
}

/// A request for missing responses: `count` of them from number `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) from: u64,
    pub(crate) count: u32,
}

/// The gateway's side: the participant's responses in number order, each once.
#[derive(Debug)]
pub(crate) struct ResponseStream {
    /// The number of the next response to deliver.
    next: u64,
    /// Whether any response or status has been seen yet.
    started: bool,
    /// Responses after a gap, by number (the order message's bytes).
    pending: BTreeMap<u64, Vec<u8>>,
    /// Responses numbered below this exist (seen, or announced by a status).
    known_end: u64,
    asking: Option<Asking>,
    grace: Duration,
    retry: Duration,
    /// Off ([`crate::config::NodeConfig::response_recovery`]): deliver on arrival, never ask.
    recover: bool,
    /// Responses given up on.
    pub(crate) lost: u64,
}

impl ResponseStream {
    pub(crate) fn for_node(config: &crate::config::NodeConfig) -> Self {
        Self {
            next: 1,
            started: false,
            pending: BTreeMap::new(),
            known_end: 1,
            asking: None,
            grace: config.gap_grace,
            retry: config.gap_retry,
            recover: config.response_recovery,
            lost: 0,
        }
    }

    /// The first response or status a fresh gateway sees starts its stream there when
    /// `fresh` (it has sent no order yet, so no earlier response can be its own: a gateway
    /// started, or restarted, in the middle of its participant's trading).
    fn start(&mut self, seq: u64, fresh: bool) {
        if !self.started {
            self.started = true;
            if fresh {
                self.next = seq.max(1);
                self.known_end = self.next;
            }
        }
    }

    /// Response `seq` arrived at `now` with the order message `order`.
    pub(crate) fn arrive(&mut self, now: Instant, seq: u64, order: &[u8], fresh: bool) -> Arrival {
        self.start(seq, fresh);
        if seq < self.next || self.pending.contains_key(&seq) {
            return Arrival::Duplicate;
        }
        self.known_end = self.known_end.max(seq + 1);
        if seq == self.next {
            self.advance();
            return Arrival::Deliver;
        }
        if !self.recover {
            // Deliver it now; what it skipped is lost (a late one is taken for a copy).
            self.lost += seq - self.next;
            self.next = seq + 1;
            return Arrival::Deliver;
        }
        if self.pending.len() >= PENDING_MAX {
            self.open_gap(now);
            return Arrival::Full;
        }
        self.pending.insert(seq, order.to_vec());
        self.open_gap(now);
        Arrival::Held
    }

    /// The next kept response now in order, if any.
    pub(crate) fn pop_ready(&mut self) -> Option<Vec<u8>> {
        let entry = self.pending.first_entry()?;
        if *entry.key() != self.next {
            return None;
        }
        let bytes = entry.remove();
        self.advance();
        Some(bytes)
    }

    /// The next response was delivered: the gap is closed, or what is still missing gets
    /// its asks from the shortest wait again.
    fn advance(&mut self) {
        self.next += 1;
        if self.next >= self.known_end {
            self.asking = None;
        } else if let Some(asking) = self.asking.as_mut() {
            asking.attempts = 0;
        }
    }

    fn open_gap(&mut self, now: Instant) {
        if self.recover && self.asking.is_none() && self.next < self.known_end {
            self.asking = Some(Asking {
                at: now + self.grace,
                attempts: 0,
            });
        }
    }

    /// The root's status: it holds `oldest..next`. Responses below `oldest` that never came
    /// are skipped (returns how many); any up to `next` still missing are asked for.
    pub(crate) fn status(&mut self, now: Instant, oldest: u64, next: u64, fresh: bool) -> u64 {
        self.start(next, fresh);
        self.known_end = self.known_end.max(next);
        let mut lost = 0;
        if oldest > self.next {
            lost = self.skip_to(oldest);
        }
        self.open_gap(now);
        lost
    }

    /// Skips the missing responses below `to` (kept ones stay, to be delivered in order);
    /// returns how many were missing.
    fn skip_to(&mut self, to: u64) -> u64 {
        let mut lost = 0;
        while self.next < to {
            match self.pending.first_key_value() {
                Some((&seq, _)) if seq < to => {
                    lost += seq - self.next;
                    self.next = seq;
                    // Delivered by `pop_ready`.
                    break;
                }
                _ => {
                    lost += to - self.next;
                    self.next = to;
                }
            }
        }
        self.lost += lost;
        self.asking = None;
        lost
    }

    /// When the gap timer is due.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        self.asking.map(|a| a.at)
    }

    /// The gap timer at `now`: what to ask the root for, if anything.
    pub(crate) fn on_timeout(&mut self, now: Instant) -> Option<Ask> {
        let asking = self.asking?;
        if asking.at > now {
            return None;
        }
        if self.next >= self.known_end {
            self.asking = None;
            return None;
        }
        let hole_end = self
            .pending
            .first_key_value()
            .map_or(self.known_end, |(&seq, _)| seq);
        let wait = self
            .retry
            .saturating_mul(1 << asking.attempts.min(ASK_BACKOFF_MAX));
        self.asking = Some(Asking {
            at: now + wait,
            attempts: asking.attempts.saturating_add(1),
        });
        let count = (hole_end - self.next).min(u64::from(u32::MAX)) as u32;
        Some(Ask {
            from: self.next,
            count,
        })
    }

    pub(crate) fn check_invariants(&self) {
        assert!(self.pending.len() <= PENDING_MAX);
        assert!(
            self.pending
                .keys()
                .next()
                .is_none_or(|&seq| seq > self.next)
        );
        assert!(self.next <= self.known_end || self.pending.is_empty());
        if let Some((&last, _)) = self.pending.last_key_value() {
            assert!(last < self.known_end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NodeConfig;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn config() -> NodeConfig {
        NodeConfig {
            gap_grace: Duration::from_millis(1),
            gap_retry: Duration::from_millis(2),
            gap_attempts_max: 3,
            response_status_after: Duration::from_millis(5),
            ..NodeConfig::default()
        }
    }

    fn deliver_all(stream: &mut ResponseStream, first: u64, out: &mut Vec<u64>) {
        out.push(first);
        while let Some(bytes) = stream.pop_ready() {
            out.push(u64::from(bytes[0]));
        }
    }

    /// Goal: responses are delivered in number order, once each, whatever order they come in.
    #[test]
    fn delivers_in_order_once() {
        let mut s = ResponseStream::for_node(&config());
        let mut out = Vec::new();
        for seq in [1u64, 3, 2, 2, 5, 4, 1, 6] {
            match s.arrive(at(0), seq, &[seq as u8], false) {
                Arrival::Deliver => deliver_all(&mut s, seq, &mut out),
                Arrival::Held | Arrival::Duplicate => {}
                Arrival::Full => panic!("room"),
            }
            s.check_invariants();
        }
        assert_eq!(out, [1, 2, 3, 4, 5, 6]);
        assert_eq!(s.next_timeout(), None, "no gap left");
        assert_eq!(s.lost, 0);
    }

    /// Goal: a gap is asked for after the grace, then after doubling waits, for as long as
    /// it takes; a slow response still fills it, and the next hole gets its own asks.
    #[test]
    fn asks_for_a_gap_until_it_is_filled() {
        let mut s = ResponseStream::for_node(&config());
        assert_eq!(s.arrive(at(0), 1, &[1], false), Arrival::Deliver);
        assert_eq!(s.arrive(at(0), 4, &[4], false), Arrival::Held);
        assert_eq!(s.next_timeout(), Some(at(1)));
        assert_eq!(s.on_timeout(at(0)), None, "not yet");
        let mut t = 1;
        for wait in [2, 4, 8, 16, 32, 64, 128, 128] {
            assert_eq!(s.on_timeout(at(t)), Some(Ask { from: 2, count: 2 }));
            assert_eq!(s.next_timeout(), Some(at(t + wait)));
            t += wait;
        }
        assert_eq!(
            s.arrive(at(t), 2, &[2], false),
            Arrival::Deliver,
            "slow, not lost"
        );
        assert_eq!(s.pop_ready(), None, "3 still missing");
        assert_eq!(s.on_timeout(at(t)), Some(Ask { from: 3, count: 1 }));
        assert_eq!(
            s.next_timeout(),
            Some(at(t + 2)),
            "its own asks, from the start"
        );
        assert_eq!(s.arrive(at(t), 3, &[3], false), Arrival::Deliver);
        assert_eq!(s.pop_ready(), Some(vec![4]));
        assert_eq!(s.next_timeout(), None);
        assert_eq!(s.lost, 0);
    }

    /// Goal: a status announcing responses the gateway never saw opens a gap; one saying the
    /// root no longer holds them skips them.
    #[test]
    fn status_finds_a_lost_last_response_and_skips_what_is_gone() {
        let mut s = ResponseStream::for_node(&config());
        assert_eq!(s.arrive(at(0), 1, &[1], false), Arrival::Deliver);
        assert_eq!(s.status(at(10), 1, 2, false), 0, "nothing missing");
        assert_eq!(s.next_timeout(), None);
        assert_eq!(s.status(at(10), 1, 3, false), 0);
        assert_eq!(s.next_timeout(), Some(at(11)));
        assert_eq!(s.on_timeout(at(11)), Some(Ask { from: 2, count: 1 }));
        assert_eq!(s.arrive(at(12), 2, &[2], false), Arrival::Deliver);
        assert_eq!(s.next_timeout(), None, "filled");
        assert_eq!(s.arrive(at(13), 6, &[6], false), Arrival::Held);
        assert_eq!(s.status(at(14), 5, 7, false), 2, "3 and 4 are gone");
        assert_eq!(s.pop_ready(), None, "5 is still held by the root");
        assert_eq!(s.on_timeout(at(15)), Some(Ask { from: 5, count: 1 }));
        assert_eq!(s.arrive(at(16), 5, &[5], false), Arrival::Deliver);
        assert_eq!(s.pop_ready(), Some(vec![6]));
        assert_eq!(s.lost, 2);
    }

    /// Goal: with recovery off (the paper's prototype), each response is delivered as it
    /// comes, nothing is asked for, and what was skipped counts as lost.
    #[test]
    fn without_recovery_responses_go_as_they_come() {
        let config = NodeConfig {
            response_recovery: false,
            ..config()
        };
        let mut s = ResponseStream::for_node(&config);
        assert_eq!(s.arrive(at(0), 1, &[1], false), Arrival::Deliver);
        assert_eq!(s.arrive(at(0), 4, &[4], false), Arrival::Deliver);
        assert_eq!(s.next_timeout(), None, "no asking");
        assert_eq!(s.arrive(at(0), 2, &[2], false), Arrival::Duplicate);
        assert_eq!(s.lost, 2);
        assert_eq!(s.status(at(1), 1, 9, false), 0);
        assert_eq!(s.next_timeout(), None);
        let mut log = ResponseLog::for_node(&config);
        let seq = log.number(3);
        log.sent(at(0), 3, seq, &[3]);
        assert_eq!(log.next_status(), None, "no statuses");
    }

    /// Goal: a gateway that starts mid-stream without having sent an order starts at the
    /// first number it sees; one that has sent orders asks for the ones before.
    #[test]
    fn a_fresh_gateway_starts_where_it_joins() {
        let mut fresh = ResponseStream::for_node(&config());
        assert_eq!(fresh.arrive(at(0), 500, &[0], true), Arrival::Deliver);
        assert_eq!(fresh.next_timeout(), None);
        let mut old = ResponseStream::for_node(&config());
        assert_eq!(old.arrive(at(0), 500, &[0], false), Arrival::Held);
        assert!(old.next_timeout().is_some());
    }

    /// Goal: the root numbers each participant's responses from 1, fills gaps from what it
    /// holds, says what it no longer holds, and sends two quiet statuses after the last
    /// response, pushed back by later ones.
    #[test]
    fn the_log_numbers_fills_and_reports() {
        let mut log = ResponseLog::for_node(&config());
        let send = |log: &mut ResponseLog, now, p| {
            let seq = log.number(p);
            log.sent(now, p, seq, &[p as u8, seq as u8]);
            seq
        };
        assert_eq!(send(&mut log, at(0), 7), 1);
        assert_eq!(send(&mut log, at(0), 7), 2);
        assert_eq!(send(&mut log, at(1), 9), 1);
        assert_eq!(send(&mut log, at(2), 7), 3);
        log.check_invariants();
        let mut got = Vec::new();
        assert!(log.fill(7, 2, 10, |d| got.push(d.to_vec())));
        assert_eq!(got, [vec![7, 2], vec![7, 3]]);
        assert_eq!(log.status(7), (1, 4));
        assert_eq!(log.status(8), (1, 1), "never sent anything");
        assert_eq!(
            log.next_status(),
            Some(at(5)),
            "participant 7's first, early (checked when due: its last response went at 2)"
        );
        assert_eq!(log.poll_status(at(5)), None);
        assert_eq!(
            log.next_status(),
            Some(at(6)),
            "participant 9, quiet since 1 ms"
        );
        log.check_invariants();
        assert_eq!(log.poll_status(at(6)), Some((9, 1, 2)));
        assert_eq!(log.poll_status(at(6)), None);
        assert_eq!(log.poll_status(at(7)), Some((7, 1, 4)), "quiet since 2 ms");
        send(&mut log, at(8), 7);
        assert_eq!(
            log.poll_status(at(12)),
            None,
            "pushed back by the response at 8"
        );
        assert_eq!(log.poll_status(at(13)), Some((7, 1, 5)));
        assert_eq!(
            log.poll_status(at(46)),
            Some((9, 1, 2)),
            "the second, 8x later"
        );
        assert_eq!(log.poll_status(at(53)), Some((7, 1, 5)));
        assert_eq!(log.poll_status(at(1_000)), None, "two per quiet spell");
        assert_eq!(log.statuses, 5);
        let numbers = log.numbers();
        let mut restored = ResponseLog::for_node(&config());
        restored.restore(&numbers);
        assert_eq!(restored.number(7), 5);
        assert_eq!(restored.number(9), 2);
        assert!(!restored.fill(7, 1, 4, |_| panic!("nothing held")));
        // A number taken and never sent (replayed before the re-sent window): a hole.
        let seq = restored.number(7);
        restored.sent(at(0), 7, seq, &[7, 6]);
        let mut got = Vec::new();
        assert!(
            !restored.fill(7, 5, 2, |d| got.push(d.to_vec())),
            "5 is not held"
        );
        assert_eq!(got, [vec![7, 6]]);
        assert!(restored.fill(7, 6, 9, |_| {}), "6 on is");
        assert_eq!(restored.get(7, 6), Some(&[7u8, 6][..]));
        assert_eq!(restored.get(7, 5), None);
        assert_eq!(restored.status(7), (6, 7));
        restored.check_invariants();
    }
}
