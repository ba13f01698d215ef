//! Numbered responses: the order path's way down, made reliable.
//!
//! The root numbers every response it sends a participant 1, 2, 3, ... (one stream per
//! participant, [`wire::response`]) and keeps the recent ones (`ResponseLog`). A gateway
//! delivers its participant's responses in that order, each once (`ResponseStream`): a
//! copy it already has is dropped, one that comes early waits for the ones before it, and a
//! gap in the numbers is asked for again ([`wire::control::Repr::ResponseGap`]) after
//! `gap_grace`, again after `gap_retry`, then twice that, and so on up to [`ASK_BACKOFF_MAX`]
//! doublings, for as long as it takes: a response is skipped (counted lost) only when the
//! root says it no longer holds it. (Giving up after a few tries, as for market data, would
//! throw away responses that are slow rather than lost, and there is no later chance for a
//! response: a fill missed is a position wrong.) Once a participant's responses have been
//! quiet for `response_status_after` (and again after 8, 64, ... times that,
//! [`QUIET_STATUSES`] in all), the root sends its gateways the number of the next one
//! ([`wire::control::Repr::ResponseStatus`]), so a lost *last* response (the fill of a
//! resting order, with nothing after it) is noticed too.
//!
//! A gateway's stream starts where the root says: with its first order it asks (a gap
//! request for no response, from that order's time), and the root answers with the number
//! of the participant's first response from then on ([`START_LOOKBACK`] earlier, for clock
//! error). A gateway started or restarted mid-session thus gets its own responses and none
//! of the history before it.
//!
//! An order's first answer was already recovered by the gateway's retry
//! (`inbound::Answers`); this covers every response, including the later ones no
//! retry asks for (a fill, an unsolicited cancel).
//!
//! The numbers are part of the root's state: they are in its snapshots, and a root recovering
//! from its journal numbers the replayed responses as before, so the responses it sends again
//! after a crash carry their old numbers and a gateway drops the ones it already has.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::time::{Instant, duration_nanos as duration_ns};

/// Responses a root holds for sending again, at least (it holds every response of the
/// last `keep` too, up to 16 times this: the bound of the root's other memories of orders).
pub const HELD_MIN: usize = 1 << 16;
/// Responses the root sends for one gap request at most (the gateway asks again for the
/// rest).
pub const GAP_FILL_MAX: u32 = 64;
/// Responses a gateway keeps that came after a gap, at most; later ones are dropped (and
/// asked for again once the gap is filled).
pub const PENDING_MAX: usize = 4096;
/// Quiet statuses the root sends after a participant's last response: at
/// `response_status_after` times 1, 8, 64, ... (5 ms, 40 ms, 320 ms, 2.6 s, 20 s with the
/// default), so a lost last response is found even if some statuses are lost too, at a cost
/// that falls off fast while the participant stays quiet.
pub const QUIET_STATUSES: u8 = 5;
/// A gateway's stream starts at its participant's first response from this long before its
/// first order on (for clock error: a clock not yet synced can be this far off).
pub const START_LOOKBACK: Duration = Duration::from_millis(100);
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
    /// Quiet statuses still to send for the latest response ([`QUIET_STATUSES`] down to 0).
    statuses_left: u8,
    /// Its entry in `ResponseLog::quiet`, if any (it may be early: checked when due).
    due: Option<Instant>,
    /// Its held responses: (number, absolute index in `ResponseLog::held`), by number.
    /// Numbers may skip (a response still waiting to go: for its journal record, or in a
    /// recovered root's re-send queue, behind newer ones).
    held: VecDeque<(u64, u64)>,
    /// Responses numbered below this are gone for good (forgotten, or, after a recovery,
    /// never to be sent again); every one from here to `next` is held or still to go.
    forgotten_below: u64,
}

impl Sent {
    fn new(next: u64) -> Self {
        Self {
            next,
            last: Instant::ZERO,
            statuses_left: 0,
            due: None,
            held: VecDeque::new(),
            forgotten_below: next,
        }
    }
}

/// A response datagram the root holds for sending again.
#[derive(Clone, Copy, Debug)]
struct Held {
    at: Instant,
    /// The response's engine time (exchange time, ns).
    time_ns: u64,
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

    /// While a root recovers: holds response `seq` of `participant` (numbered before the
    /// crash, `datagram` as it went then), rebuilt from the snapshot or by replaying the
    /// journal, for gap requests. No status is due for it (the ones the root re-sends get
    /// theirs when they go); the last [`HELD_MIN`] are kept. Call [`ResponseLog::recovered`]
    /// once all are held.
    pub(crate) fn hold_recovered(
        &mut self,
        participant: u32,
        seq: u64,
        time_ns: u64,
        datagram: &[u8],
    ) {
        let Some(stream) = self.streams.get_mut(&participant) else {
            return;
        };
        stream.forgotten_below = stream.forgotten_below.min(seq);
        self.hold(Instant::ZERO, participant, seq, time_ns, datagram);
        while self.held.len() > HELD_MIN {
            self.forget_front();
        }
    }

    /// After a recovery: a participant's responses are gone for good below the run of held
    /// ones ([`ResponseLog::hold_recovered`]) that ends at its last number; any held below a
    /// hole in that run are let go.
    pub(crate) fn recovered(&mut self) {
        for stream in self.streams.values_mut() {
            let mut oldest = stream.next;
            for &(seq, _) in stream.held.iter().rev() {
                if seq.saturating_add(1) != oldest {
                    break;
                }
                oldest = seq;
            }
            stream.forgotten_below = oldest;
            while stream.held.front().is_some_and(|&(seq, _)| seq < oldest) {
                stream.held.pop_front();
            }
        }
    }

    /// At a recovered root's first turn, `now`: every participant that has had responses gets
    /// its quiet statuses again, as if its last response had just gone. The crashed root's
    /// schedule died with it, and a lost last response shows only in a status: without one,
    /// a participant that sends nothing more would never get it.
    pub(crate) fn restart_statuses(&mut self, now: Instant) {
        let answered: Vec<u32> = (self.streams.iter())
            .filter(|(_, stream)| stream.next > 1)
            .map(|(&participant, _)| participant)
            .collect();
        for participant in answered {
            self.quiet_from(participant, now);
        }
    }

    /// Notes that response `seq` of `participant` (from [`ResponseLog::number`]) went at
    /// `now` as `datagram`: held for gap requests, and the participant's quiet status is
    /// due `response_status_after` from now. A datagram too long for a response, a number
    /// already held or one gone for good is not held.
    pub(crate) fn sent(
        &mut self,
        now: Instant,
        participant: u32,
        seq: u64,
        time_ns: u64,
        datagram: &[u8],
    ) {
        self.forget_old(now);
        self.hold(now, participant, seq, time_ns, datagram);
        self.quiet_from(participant, now);
    }

    /// `participant`'s last response went at `now`: its quiet statuses start again, the
    /// first `response_status_after` from now.
    fn quiet_from(&mut self, participant: u32, now: Instant) {
        let Some(stream) = self.streams.get_mut(&participant) else {
            return;
        };
        if self.status_after.is_zero() {
            return;
        }
        stream.last = stream.last.max(now);
        stream.statuses_left = QUIET_STATUSES;
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

    /// Holds `datagram`, response `seq` of `participant`, sent at `at`, unless it is too long
    /// for a response, already held, or gone for good.
    fn hold(&mut self, at: Instant, participant: u32, seq: u64, time_ns: u64, datagram: &[u8]) {
        let Some(stream) = self.streams.get_mut(&participant) else {
            return;
        };
        let fits = datagram.len() <= wire::response::DATAGRAM_MAX;
        let i = stream.held.partition_point(|&(s, _)| s < seq);
        let new = stream.held.get(i).is_none_or(|&(s, _)| s != seq);
        if !(fits && new && (stream.forgotten_below..stream.next).contains(&seq)) {
            return;
        }
        let mut held = Held {
            at,
            time_ns,
            participant,
            len: datagram.len() as u8,
            bytes: [0; wire::response::DATAGRAM_MAX],
        };
        held.bytes[..datagram.len()].copy_from_slice(datagram);
        // In number order; only a recovered root's re-sent ones come out of it.
        let index = (seq, self.held_base + self.held.len() as u64);
        if i == stream.held.len() {
            stream.held.push_back(index);
        } else {
            stream.held.insert(i, index);
        }
        self.held.push_back(held);
    }

    fn forget_old(&mut self, now: Instant) {
        while let Some(oldest) = self.held.front() {
            if !crate::inbound::past_bounds(self.held.len(), HELD_MIN, oldest.at, now, self.keep) {
                break;
            }
            self.forget_front();
        }
    }

    /// Lets the oldest held response go.
    fn forget_front(&mut self) {
        let Some(oldest) = self.held.pop_front() else {
            return;
        };
        if let Some(stream) = self.streams.get_mut(&oldest.participant) {
            // The front, unless re-sent ones went out of number order (recovery).
            let base = self.held_base;
            let i = stream.held.iter().position(|&(_, at)| at == base);
            if let Some((seq, _)) = i.and_then(|i| stream.held.remove(i)) {
                // Not past a lower one still held (re-sent ones are younger).
                let floor = stream
                    .held
                    .front()
                    .map_or(seq + 1, |&(s, _)| s.min(seq + 1));
                stream.forgotten_below = stream.forgotten_below.max(floor);
            }
        }
        self.held_base += 1;
    }

    /// The held response datagrams, the last `max` of them, oldest first (for a snapshot).
    pub(crate) fn held_datagrams(&self, max: usize) -> impl ExactSizeIterator<Item = &[u8]> {
        let skip = self.held.len().saturating_sub(max);
        self.held
            .iter()
            .skip(skip)
            .map(|h| &h.bytes[..usize::from(h.len)])
    }

    /// `(oldest, next)`: `participant`'s responses from `oldest` on can still be had (held,
    /// or still to go), and its next one will be numbered `next`.
    pub(crate) fn status(&self, participant: u32) -> (u64, u64) {
        let Some(stream) = self.streams.get(&participant) else {
            return (1, 1);
        };
        (stream.forgotten_below.min(stream.next), stream.next)
    }

    /// Where the stream of a gateway of `participant` starting now should start: at its
    /// first held response with an engine time from `since_ns` on (the gateway's first order,
    /// less a lookback for clock error), or at the next number if none.
    pub(crate) fn start_for(&self, participant: u32, since_ns: u64) -> u64 {
        let Some(stream) = self.streams.get(&participant) else {
            return 1;
        };
        let mut start = stream.next;
        for &(seq, at) in stream.held.iter().rev() {
            if self.held[(at - self.held_base) as usize].time_ns < since_ns {
                break;
            }
            start = seq;
        }
        start
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
    /// (at most [`GAP_FILL_MAX`]); returns false if the asker should get the status: some
    /// asked for are gone for good, or were never numbered, or it asked for none (`count`
    /// zero: a gateway starting its stream). One still to go is not gone: it comes anyway.
    pub(crate) fn fill(
        &mut self,
        participant: u32,
        from: u64,
        count: u32,
        mut send: impl FnMut(&[u8]),
    ) -> bool {
        let Some(stream) = self.streams.get(&participant) else {
            return count > 0 && from.saturating_add(u64::from(count)) <= 1;
        };
        let end = from
            .saturating_add(u64::from(count.min(GAP_FILL_MAX)))
            .min(stream.next);
        let first = stream.held.partition_point(|&(seq, _)| seq < from);
        for &(seq, at) in stream.held.range(first..) {
            if seq >= end {
                break;
            }
            let held = &self.held[(at - self.held_base) as usize];
            self.refilled += 1;
            send(&held.bytes[..usize::from(held.len)]);
        }
        // A request for nothing (the status only), for numbers never given, or for some
        // gone for good gets the status.
        let beyond = from.saturating_add(u64::from(count)) > stream.next;
        count > 0 && !beyond && (from >= stream.forgotten_below || from >= end)
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
            // Status k (from 0) `status_after` times 8^k after the last response.
            let quiet_for = |left: u8| {
                let k = u32::from(QUIET_STATUSES - left);
                self.status_after.saturating_mul(8u32.saturating_pow(k))
            };
            let want = stream.last + quiet_for(stream.statuses_left);
            if want > at {
                self.quiet.insert((want, participant));
                stream.due = Some(want);
                continue;
            }
            stream.statuses_left -= 1;
            if stream.statuses_left > 0 {
                let later = stream.last + quiet_for(stream.statuses_left);
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
            assert!(seq < stream.next && seq >= stream.forgotten_below);
            assert!(at >= self.held_base && at < self.held_base + self.held.len() as u64);
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
    /// The end of the numbers the last request asked for: once delivered up to there with
    /// the gap still open, the next request goes at once (a long gap comes back a batch of
    /// [`GAP_FILL_MAX`] per round trip, not per `gap_retry`).
    until: u64,
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
    /// Whether the stream has started: at the number the root's start reply gives (its
    /// first response from the gateway's first order's time on, less [`START_LOOKBACK`]). A
    /// gateway (re)started in the middle of its participant's trading thus neither asks for
    /// nor replays the history before it, and loses none of its own. (Without recovery: at
    /// the first response.)
    started: bool,
    /// The time the start request asked from, once asked.
    start_since: Option<u64>,
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
            start_since: None,
            pending: BTreeMap::new(),
            known_end: 1,
            asking: None,
            grace: config.gap_grace,
            retry: config.gap_retry,
            recover: config.response_recovery,
            lost: 0,
        }
    }

    /// Whether the stream has started (see `started`).
    pub(crate) fn is_started(&self) -> bool {
        self.started
    }

    /// The gateway is about to send its first order, or got a response before it started:
    /// returns the request to send the root now, if any (`count` zero: "where does my stream
    /// start", with `from` the exchange time, ns, from which responses may be this
    /// gateway's: its first order's, less [`START_LOOKBACK`]). Asked again, if need be, by
    /// the gap timer.
    pub(crate) fn wants_start(&mut self, now: Instant, since_ns: u64) -> Option<Ask> {
        if self.started || !self.recover || self.start_since.is_some() {
            return None;
        }
        let since = since_ns.saturating_sub(duration_ns(START_LOOKBACK));
        self.start_since = Some(since);
        self.asking = Some(Asking {
            at: now + self.retry,
            attempts: 1,
            until: 0,
        });
        Some(Ask {
            from: since,
            count: 0,
        })
    }

    fn start_at(&mut self, next: u64) {
        self.started = true;
        self.next = next.max(1);
        self.pending.retain(|&seq, _| seq >= next);
        self.known_end = self.known_end.max(self.next);
        self.asking = None;
    }

    /// Response `seq` arrived at `now` with the order message `order`.
    pub(crate) fn arrive(&mut self, now: Instant, seq: u64, order: &[u8]) -> Arrival {
        if !self.started && !self.recover {
            self.start_at(seq);
        }
        if seq < self.next || self.pending.contains_key(&seq) {
            return Arrival::Duplicate;
        }
        if seq == self.next && self.started {
            self.known_end = self.known_end.max(seq.saturating_add(1));
            self.advance();
            return Arrival::Deliver;
        }
        if !self.recover {
            // Deliver it now; what it skipped is lost (a late one is taken for a copy).
            self.lost += seq - self.next;
            self.next = seq.saturating_add(1);
            self.known_end = self.known_end.max(self.next);
            return Arrival::Deliver;
        }
        // Kept until the gap (or the start) is sorted out, unless there is no room, or it
        // is implausibly far ahead (a real one is asked for again once the root's status
        // says it exists).
        let far = seq - self.next > PENDING_MAX as u64;
        if self.pending.len() >= PENDING_MAX || far {
            self.open_gap(now);
            return Arrival::Full;
        }
        self.known_end = self.known_end.max(seq.saturating_add(1));
        self.pending.insert(seq, order.to_vec());
        if self.started {
            self.open_gap(now);
        }
        Arrival::Held
    }

    /// The next kept response now in order, if any.
    pub(crate) fn pop_ready(&mut self) -> Option<Vec<u8>> {
        if !self.started {
            return None;
        }
        let entry = self.pending.first_entry()?;
        if *entry.key() != self.next {
            return None;
        }
        let bytes = entry.remove();
        self.advance();
        Some(bytes)
    }

    /// The next response was delivered: the gap is closed, or what is still missing gets
    /// its asks from the shortest wait again, at once if the last request is all in.
    fn advance(&mut self) {
        self.next += 1;
        if self.next >= self.known_end {
            self.asking = None;
        } else if let Some(asking) = self.asking.as_mut() {
            asking.attempts = 0;
            if asking.until > 0 && self.next >= asking.until {
                asking.at = Instant::ZERO;
                asking.until = 0;
            }
        }
    }

    fn open_gap(&mut self, now: Instant) {
        if self.recover && self.started && self.asking.is_none() && self.next < self.known_end {
            self.asking = Some(Asking {
                at: now + self.grace,
                attempts: 0,
                until: 0,
            });
        }
    }

    /// The root's status (`oldest <= next`, checked by the caller): responses from `oldest`
    /// on can still be had, and the next will be numbered `next`. Starts the stream if need
    /// be; responses below `oldest` that never came are skipped (returns how many); any up
    /// to `next` still missing are asked for. Kept ones the root says it never numbered (a
    /// forged datagram) are dropped.
    pub(crate) fn status(&mut self, now: Instant, oldest: u64, next: u64) -> u64 {
        // `oldest` zero: the answer to a start request, `next` where to start.
        if oldest == 0 || !self.started {
            if oldest == 0 && !self.started && self.recover {
                self.start_at(next);
                // What came before the reply may have left holes.
                self.open_gap(now);
            } else if oldest != 0 && self.recover {
                // Not started: where the numbers end is still news (a hole at the end).
                self.known_end = self.known_end.max(next);
            }
            return 0;
        }
        if next < self.known_end {
            self.pending.retain(|&seq, _| seq < next);
            self.known_end = next.max(self.next);
        }
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

    /// The gap timer at `now`: what to ask the root for, if anything (`count` zero: its
    /// status only, to start the stream).
    pub(crate) fn on_timeout(&mut self, now: Instant) -> Option<Ask> {
        let asking = self.asking?;
        if asking.at > now {
            return None;
        }
        if !self.started {
            self.ask_again(now, asking);
            let from = self.start_since.unwrap_or(0);
            return Some(Ask { from, count: 0 });
        }
        if self.next >= self.known_end {
            self.asking = None;
            return None;
        }
        let hole_end = self
            .pending
            .first_key_value()
            .map_or(self.known_end, |(&seq, _)| seq);
        self.ask_again(now, asking);
        let count = (hole_end - self.next).min(u64::from(u32::MAX)) as u32;
        if let Some(asking) = self.asking.as_mut() {
            let batch = u64::from(count.min(GAP_FILL_MAX));
            asking.until = self.next + batch;
        }
        Some(Ask {
            from: self.next,
            count,
        })
    }

    /// Another request goes at `now`: the next after `gap_retry` times two to the requests
    /// sent so far (at most [`ASK_BACKOFF_MAX`] doublings).
    fn ask_again(&mut self, now: Instant, asking: Asking) {
        let wait = self
            .retry
            .saturating_mul(1 << asking.attempts.min(ASK_BACKOFF_MAX));
        self.asking = Some(Asking {
            at: now + wait,
            attempts: asking.attempts.saturating_add(1),
            until: 0,
        });
    }

    pub(crate) fn check_invariants(&self) {
        assert!(self.pending.len() <= PENDING_MAX);
        assert!(
            self.pending
                .keys()
                .next()
                .is_none_or(|&seq| seq > self.next || (!self.started && seq >= self.next))
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
            response_status_after: Duration::from_millis(5),
            ..NodeConfig::default()
        }
    }

    /// A gateway's stream, started at 1 by the root's status.
    fn stream(config: &NodeConfig) -> ResponseStream {
        let mut s = ResponseStream::for_node(config);
        assert_eq!(s.wants_start(at(0), 0), Some(Ask { from: 0, count: 0 }));
        s.status(at(0), 0, 1);
        s
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
        let mut s = stream(&config());
        let mut out = Vec::new();
        for seq in [1u64, 3, 2, 2, 5, 4, 1, 6] {
            match s.arrive(at(0), seq, &[seq as u8]) {
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
        let mut s = stream(&config());
        assert_eq!(s.arrive(at(0), 1, &[1]), Arrival::Deliver);
        assert_eq!(s.arrive(at(0), 4, &[4]), Arrival::Held);
        assert_eq!(s.next_timeout(), Some(at(1)));
        assert_eq!(s.on_timeout(at(0)), None, "not yet");
        let mut t = 1;
        for wait in [2, 4, 8, 16, 32, 64, 128, 128] {
            assert_eq!(s.on_timeout(at(t)), Some(Ask { from: 2, count: 2 }));
            assert_eq!(s.next_timeout(), Some(at(t + wait)));
            t += wait;
        }
        assert_eq!(s.arrive(at(t), 2, &[2]), Arrival::Deliver, "slow, not lost");
        assert_eq!(s.pop_ready(), None, "3 still missing");
        assert_eq!(s.on_timeout(at(t)), Some(Ask { from: 3, count: 1 }));
        assert_eq!(
            s.next_timeout(),
            Some(at(t + 2)),
            "its own asks, from the start"
        );
        assert_eq!(s.arrive(at(t), 3, &[3]), Arrival::Deliver);
        assert_eq!(s.pop_ready(), Some(vec![4]));
        assert_eq!(s.next_timeout(), None);
        assert_eq!(s.lost, 0);
    }

    /// Goal: a long gap comes back a batch per round trip: once the last request's batch is
    /// all in, the next request is due at once.
    #[test]
    fn a_long_gap_is_asked_for_batch_after_batch() {
        let mut s = stream(&config());
        assert_eq!(s.status(at(0), 1, 201), 0);
        let first = s.on_timeout(at(1)).expect("asks after the grace");
        assert_eq!(
            first,
            Ask {
                from: 1,
                count: 200
            }
        );
        for seq in 1..=GAP_FILL_MAX as u64 {
            assert_eq!(s.arrive(at(1), seq, &[0]), Arrival::Deliver);
        }
        assert_eq!(
            s.next_timeout(),
            Some(Instant::ZERO),
            "the batch is in: ask now"
        );
        assert_eq!(
            s.on_timeout(at(1)),
            Some(Ask {
                from: 65,
                count: 136
            })
        );
        assert_eq!(s.next_timeout(), Some(at(3)), "else after gap_retry");
    }

    /// Goal: a status announcing responses the gateway never saw opens a gap; one saying the
    /// root no longer holds them skips them.
    #[test]
    fn status_finds_a_lost_last_response_and_skips_what_is_gone() {
        let mut s = stream(&config());
        assert_eq!(s.arrive(at(0), 1, &[1]), Arrival::Deliver);
        assert_eq!(s.status(at(10), 1, 2), 0, "nothing missing");
        assert_eq!(s.next_timeout(), None);
        assert_eq!(s.status(at(10), 1, 3), 0);
        assert_eq!(s.next_timeout(), Some(at(11)));
        assert_eq!(s.on_timeout(at(11)), Some(Ask { from: 2, count: 1 }));
        assert_eq!(s.arrive(at(12), 2, &[2]), Arrival::Deliver);
        assert_eq!(s.next_timeout(), None, "filled");
        assert_eq!(s.arrive(at(13), 6, &[6]), Arrival::Held);
        assert_eq!(s.status(at(14), 5, 7), 2, "3 and 4 are gone");
        assert_eq!(s.pop_ready(), None, "5 is still held by the root");
        assert_eq!(s.on_timeout(at(15)), Some(Ask { from: 5, count: 1 }));
        assert_eq!(s.arrive(at(16), 5, &[5]), Arrival::Deliver);
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
        assert_eq!(s.arrive(at(0), 1, &[1]), Arrival::Deliver);
        assert_eq!(s.arrive(at(0), 4, &[4]), Arrival::Deliver);
        assert_eq!(s.next_timeout(), None, "no asking");
        assert_eq!(s.arrive(at(0), 2, &[2]), Arrival::Duplicate);
        assert_eq!(s.lost, 2);
        assert_eq!(s.status(at(1), 1, 9), 0);
        assert_eq!(s.next_timeout(), None);
        let mut log = ResponseLog::for_node(&config);
        let seq = log.number(3);
        log.sent(at(0), 3, seq, 0, &[3]);
        assert_eq!(log.next_status(), None, "no statuses");
    }

    /// Goal: a gateway starts its stream where the root's start reply says: at the first
    /// response from its first order's time (less the lookback) on, so a gateway (re)started
    /// mid-stream neither asks for nor replays what came before, and a response of its own
    /// that beat the reply is kept; the request goes again if unanswered; ordinary statuses
    /// do not start a stream; an implausibly far or never-numbered response is not
    /// delivered.
    #[test]
    fn a_gateway_starts_where_the_roots_start_reply_says() {
        let mut log = ResponseLog::for_node(&config());
        for t in [0u64, 1, 2] {
            let seq = log.number(7);
            log.sent(at(t), 7, seq, at(t).as_nanos(), &[seq as u8]);
        }
        let lookback = duration_ns(START_LOOKBACK);
        let since = |ms: u64| at(ms).as_nanos() - lookback;
        assert_eq!(log.start_for(7, since(101)), 2, "from 1 ms on");
        assert_eq!(log.start_for(7, since(500)), 4, "nothing since: the next");
        assert_eq!(log.start_for(8, 0), 1, "a participant never answered");

        let mut s = ResponseStream::for_node(&config());
        let ask = s.wants_start(at(0), at(101).as_nanos());
        assert_eq!(
            ask,
            Some(Ask {
                from: since(101),
                count: 0
            }),
            "the first order asks"
        );
        assert_eq!(s.wants_start(at(0), 0), None, "once");
        assert_eq!(
            s.status(at(0), 1, 4),
            0,
            "an ordinary status starts nothing"
        );
        assert_eq!(s.arrive(at(0), 3, &[3]), Arrival::Held, "before the reply");
        assert_eq!(s.pop_ready(), None, "not started");
        assert_eq!(s.on_timeout(at(1)), None);
        assert_eq!(
            s.on_timeout(at(2)),
            Some(Ask {
                from: since(101),
                count: 0
            }),
            "asked again"
        );
        assert_eq!(s.status(at(3), 0, 2), 0, "the start reply");
        assert_eq!(s.arrive(at(3), 1, &[1]), Arrival::Duplicate, "history");
        assert_eq!(s.arrive(at(3), 2, &[2]), Arrival::Deliver);
        assert_eq!(s.pop_ready(), Some(vec![3]), "the kept one, in turn");
        assert_eq!(s.next_timeout(), None);

        let mut s = stream(&config());
        let far = 2 + PENDING_MAX as u64 + 1;
        assert_eq!(s.arrive(at(0), far, &[9]), Arrival::Full, "implausibly far");
        assert_eq!(s.next_timeout(), None, "nothing known missing");
        assert_eq!(s.arrive(at(0), 3, &[3]), Arrival::Held);
        assert_eq!(s.status(at(0), 1, 2), 0, "the root never numbered 3");
        assert_eq!(s.pop_ready(), None);
        assert_eq!(s.arrive(at(0), 1, &[1]), Arrival::Deliver);
        assert_eq!(s.next_timeout(), None, "nothing missing after all");
        s.check_invariants();
    }

    /// Goal: the root numbers each participant's responses from 1, fills gaps from what it
    /// holds, says what it no longer holds, and sends two quiet statuses after the last
    /// response, pushed back by later ones; recovered, it holds what its snapshot and replay
    /// rebuilt, from the last hole in each participant's numbers on.
    #[test]
    fn the_log_numbers_fills_and_reports() {
        let mut log = ResponseLog::for_node(&config());
        let send = |log: &mut ResponseLog, now, p| {
            let seq = log.number(p);
            log.sent(now, p, seq, now.as_nanos(), &[p as u8, seq as u8]);
            seq
        };
        assert_eq!(send(&mut log, at(0), 7), 1);
        assert_eq!(send(&mut log, at(0), 7), 2);
        assert_eq!(send(&mut log, at(1), 9), 1);
        assert_eq!(send(&mut log, at(2), 7), 3);
        log.check_invariants();
        let mut got = Vec::new();
        assert!(log.fill(7, 2, 2, |d| got.push(d.to_vec())));
        assert_eq!(got, [vec![7, 2], vec![7, 3]]);
        got.clear();
        assert!(
            !log.fill(7, 2, 10, |d| got.push(d.to_vec())),
            "4 on were never numbered: the asker gets the status"
        );
        assert_eq!(got.len(), 2, "and what there is");
        assert!(!log.fill(7, 0, 0, |_| {}), "the status only");
        assert!(!log.fill(8, 0, 0, |_| {}), "of anyone");
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
        assert_eq!(log.poll_status(at(300)), None);
        assert_eq!(log.poll_status(at(321)), Some((9, 1, 2)), "then 64x");
        let mut later = Vec::new();
        while let Some((p, ..)) = log.poll_status(at(1_000_000)) {
            later.push(p);
        }
        assert_eq!(
            later,
            [7, 9, 7, 9, 7],
            "7 at 64x, then both at 512x and 4,096x: five per quiet spell"
        );
        assert_eq!(
            log.statuses, 11,
            "participant 7: one, then a new spell of five"
        );
        let numbers = log.numbers();
        let mut restored = ResponseLog::for_node(&config());
        restored.restore(&numbers);
        assert_eq!(restored.number(7), 5);
        assert_eq!(restored.number(9), 2);
        assert!(
            !restored.fill(7, 1, 4, |_| panic!("nothing held")),
            "1-4 are gone for good"
        );
        // The snapshot kept responses 3 and 4 of participant 7 and 2 of participant 9; the
        // replay numbers 6 of participant 7 and holds it. 5 (numbered above, held nowhere)
        // is a hole: 7's run of held responses starts at 6, and 3 and 4 are let go.
        for (p, seq) in [(7, 3), (7, 4), (9, 2)] {
            restored.hold_recovered(p, seq, 0, &[p as u8, seq as u8]);
        }
        let six = restored.number(7);
        restored.hold_recovered(7, six, 0, &[7, 6]);
        restored.hold_recovered(8, 1, 0, &[8, 1]);
        restored.recovered();
        restored.check_invariants();
        assert_eq!(restored.status(7), (6, 7));
        assert_eq!(restored.status(9), (2, 3), "kept by the snapshot");
        assert_eq!(restored.status(8), (1, 1), "never numbered: not held");
        assert!(
            !restored.fill(7, 3, 2, |_| panic!("let go")),
            "3 and 4 are gone with 5"
        );
        let mut got = Vec::new();
        assert!(restored.fill(9, 2, 1, |d| got.push(d.to_vec())));
        assert_eq!(got, [vec![9, 2]]);
        assert_eq!(restored.next_status(), None, "no status for a held one");
        // A new response goes out before the re-sent one.
        let seven = restored.number(7);
        restored.sent(at(0), 7, seven, 0, &[7, 7]);
        got.clear();
        assert!(
            !restored.fill(7, 5, 3, |d| got.push(d.to_vec())),
            "5 is gone"
        );
        assert_eq!(got, [vec![7, 6], vec![7, 7]], "in number order");
        assert_eq!(restored.get(7, 6), Some(&[7u8, 6][..]));
        assert_eq!(restored.get(7, 5), None);
        assert_eq!(restored.status(7), (6, 8));
        let ring = restored.held.len();
        restored.sent(at(0), 7, six, 0, &[7, 6]);
        assert_eq!(
            restored.held.len(),
            ring,
            "a number already held is not held twice"
        );
        assert!(
            restored.next_status().is_some(),
            "a re-sent one gets its status"
        );
        restored.check_invariants();
    }

    /// A message between the root's log and a gateway's stream in [`lossy_exchange`].
    #[derive(Clone, Debug)]
    enum Msg {
        /// Root to gateway: response `seq`.
        Response(u64),
        /// Root to gateway: status.
        Status(u64, u64),
        /// Gateway to root: request.
        Ask(Ask),
    }

    /// The channel of [`lossy_exchange`], both ways: it loses each message with `loss` and
    /// delays it 0-3 ms (so reorders) until `calm_us`, then delivers everything after 1 ms.
    struct Channel {
        rng: rand_chacha::ChaCha8Rng,
        loss: f64,
        calm_us: u64,
        /// Messages in flight by (due, µs; order sent).
        queue: BTreeMap<(u64, u64), Msg>,
        sent: u64,
    }

    impl Channel {
        fn send(&mut self, now: u64, msg: Msg) {
            use rand::Rng;
            let calm = now >= self.calm_us;
            if !calm && self.rng.gen_bool(self.loss) {
                return;
            }
            let delay = if calm {
                1_000
            } else {
                self.rng.gen_range(0..3_000)
            };
            self.sent += 1;
            self.queue.insert((now + delay, self.sent), msg);
        }

        fn next_due(&self) -> Option<u64> {
            self.queue.first_key_value().map(|(&(due, _), _)| due)
        }

        /// The next message due by `now`.
        fn receive(&mut self, now: u64) -> Option<Msg> {
            if self.next_due()? > now {
                return None;
            }
            self.queue.pop_first().map(|(_, msg)| msg)
        }
    }

    /// Runs a root log and a gateway stream over a [`Channel`] that is lossy until
    /// `calm_ms`. The root sends `n` responses, one every 0-2 ms from 1 ms. Returns the
    /// numbers delivered, in order, and the stream's count of responses given up on.
    fn lossy_exchange(seed: u64, n: u64, loss: f64, calm_ms: u64) -> (Vec<u64>, u64) {
        use rand::{Rng, SeedableRng};
        let config = config();
        let mut log = ResponseLog::for_node(&config);
        let mut stream = ResponseStream::for_node(&config);
        let mut channel = Channel {
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
            loss,
            calm_us: calm_ms * 1_000,
            queue: BTreeMap::new(),
            sent: 0,
        };
        let us = |t: u64| Instant::from_nanos(t * 1_000);
        // The gateway's first order, at 0, asks where its stream starts.
        let ask = stream.wants_start(us(0), 0).expect("the first order asks");
        channel.send(0, Msg::Ask(ask));
        let mut sends: Vec<u64> = (0..n).map(|_| channel.rng.gen_range(0..2_000)).collect();
        let mut t = 1_000;
        for gap in &mut sends {
            t += *gap;
            *gap = t;
        }
        let mut next_send = 0;
        let mut delivered = Vec::new();
        let end = (calm_ms + 2_000) * 1_000;
        let mut now = 0;
        while now < end {
            // The next thing due: a send, a message, the gateway's timer or the root's.
            let timers = [stream.next_timeout(), log.next_status()];
            let due = sends
                .get(next_send)
                .copied()
                .into_iter()
                .chain(channel.next_due())
                .chain(timers.into_iter().flatten().map(|t| t.as_nanos() / 1_000))
                .fold(end, u64::min);
            now = due.max(now);
            if now >= end {
                break;
            }
            if sends.get(next_send) == Some(&now) {
                next_send += 1;
                let seq = log.number(7);
                log.sent(us(now), 7, seq, now * 1_000, &seq.to_be_bytes());
                channel.send(now, Msg::Response(seq));
            }
            while let Some(msg) = channel.receive(now) {
                match msg {
                    Msg::Response(seq) => {
                        if stream.arrive(us(now), seq, &seq.to_be_bytes()) == Arrival::Deliver {
                            delivered.push(seq);
                        }
                    }
                    Msg::Status(oldest, next) => {
                        stream.status(us(now), oldest, next);
                    }
                    Msg::Ask(Ask { from, count: 0 }) => {
                        channel.send(now, Msg::Status(0, log.start_for(7, from)));
                    }
                    Msg::Ask(Ask { from, count }) => {
                        let complete = log.fill(7, from, count, |d| {
                            let seq = u64::from_be_bytes(d.try_into().expect("8 bytes"));
                            channel.send(now, Msg::Response(seq));
                        });
                        if !complete {
                            let (oldest, next) = log.status(7);
                            channel.send(now, Msg::Status(oldest, next));
                        }
                    }
                }
                while let Some(bytes) = stream.pop_ready() {
                    delivered.push(u64::from_be_bytes(bytes.try_into().expect("8 bytes")));
                }
                stream.check_invariants();
            }
            if let Some(ask) = stream.on_timeout(us(now)) {
                channel.send(now, Msg::Ask(ask));
            }
            while let Some((_, oldest, next)) = log.poll_status(us(now)) {
                channel.send(now, Msg::Status(oldest, next));
            }
            log.check_invariants();
        }
        (delivered, stream.lost)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// Goal: whatever the channel loses and reorders, the gateway delivers the root's
        /// responses in number order, each once, and, once the channel is calm again, every
        /// one of them (the last ones too, through the root's statuses), giving up on none.
        #[test]
        fn every_response_once_in_order_over_a_lossy_channel(
            seed in proptest::prelude::any::<u64>(),
            n in 1u64..120,
            loss in 0.0f64..0.5,
        ) {
            let (delivered, lost) = lossy_exchange(seed, n, loss, 300);
            let expected: Vec<u64> = (1..=n).collect();
            proptest::prop_assert_eq!(delivered, expected, "seed {}", seed);
            proptest::prop_assert_eq!(lost, 0);
        }
    }
}
