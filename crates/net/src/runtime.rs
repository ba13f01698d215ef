//! The event loop: one thread driving one or many hosts.
//!
//! Every turn reads the OS clock once ([`crate::clock::now_ns`]) (plus once per non-empty
//! receive batch, see [`crate::Host`]), feeds the hosts whose
//! sockets have datagrams, wakes the hosts whose deadline has come, and then waits:
//!
//! - [`Mode::BusyPoll`] spins: every turn tries `recvmmsg(MSG_DONTWAIT)` on every socket and
//!   checks every deadline. Lowest latency; burns its core. For the hot nodes (a proxy, the
//!   root), one or a few per runtime. The machine has 2 cores: at most two busy runtimes.
//! - [`Mode::Epoll`] sleeps in `epoll_pwait2` (nanosecond timeout) until a socket is readable
//!   or the earliest deadline of its hosts, kept in a heap. Many nodes share a core this way
//!   (`jasper node --all` runs a whole cluster in one). [`Runtime::set_spin`] makes it poll
//!   for a while after work before sleeping (a bounded share of the time).
//!
//! A runtime and its buffers stay on the thread that built it; hosts may be built elsewhere
//! and moved in.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::now_ns;
use crate::host::{EventSink, Hook, Host, HostView, Io, Role, Turn};
use crate::sys::{self, Epoll};

/// How a runtime waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Spin on non-blocking receives.
    BusyPoll,
    /// Sleep in epoll until a socket is readable or a deadline comes.
    Epoll,
}

/// What one [`Runtime::run_until`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Loop turns (clock reads).
    pub turns: u64,
    /// Turns that found datagrams.
    pub busy_turns: u64,
    /// Datagrams taken from the sockets.
    pub datagrams: u64,
    /// Hosts woken for a deadline.
    pub wakeups: u64,
    /// Whether the run ended on the stop flag (rather than its time limit).
    pub stopped: bool,
    /// Busy-poll mode: gaps between consecutive turns longer than [`STALL_NS`]. A turn takes
    /// a few hundred nanoseconds, so such a gap is the thread not running (preempted by
    /// another task, an interrupt, the hypervisor) or one unusually long turn; either way
    /// every datagram arriving in it waited. Telling these apart from the nodes' own cost is
    /// what a latency tail on a shared machine needs.
    pub stalls: u64,
    /// Busy-poll mode: the sum of those gaps, nanoseconds.
    pub stalled_ns: u64,
    /// Busy-poll mode: the longest gap between two turns, nanoseconds.
    pub longest_gap_ns: u64,
    /// Epoll mode with [`Runtime::set_spin`]: time spent polling instead of sleeping.
    pub spun_ns: u64,
    /// Deadline wake-ups that came [`LATE_WAKE_NS`] or more late: the loop was busy with
    /// other hosts' work (or not running) when a timer came due. A loop that runs more nodes
    /// than it can carry at their load shows it here first; its nodes' timers (heartbeats,
    /// failure detection, clock probes, releases) are then that late too. A wake-up's lag
    /// counts from its time, or from when the loop could first have known it was due,
    /// whichever is later: in epoll mode the turn that armed it (a deadline armed already
    /// past, a late packet's release, is not charged the sleep before it); in busy-poll
    /// mode, which never sleeps, the start of the turn before. Across runs too: the time
    /// between two runs, the caller's, is time the loop did not look at its timers either.
    pub late_wakeups: u64,
    /// The longest a deadline wake-up came late, nanoseconds.
    pub wake_lag_max_ns: u64,
}

/// A deadline wake-up this long after its time or longer counts in
/// [`RunStats::late_wakeups`] (1 ms).
pub const LATE_WAKE_NS: u64 = 1_000_000;

impl RunStats {
    /// Adds the counts of `later`, a later run of the same loop (the longest gaps and lags
    /// are the longer of the two; stopped if either was).
    pub fn add(&mut self, later: &Self) {
        self.turns += later.turns;
        self.busy_turns += later.busy_turns;
        self.datagrams += later.datagrams;
        self.wakeups += later.wakeups;
        self.stopped |= later.stopped;
        self.stalls += later.stalls;
        self.stalled_ns += later.stalled_ns;
        self.longest_gap_ns = self.longest_gap_ns.max(later.longest_gap_ns);
        self.spun_ns += later.spun_ns;
        self.late_wakeups += later.late_wakeups;
        self.wake_lag_max_ns = self.wake_lag_max_ns.max(later.wake_lag_max_ns);
    }

    /// Counts a wake-up that came `lag_ns` after its time.
    fn woke(&mut self, lag_ns: u64) {
        self.wakeups += 1;
        self.late_wakeups += u64::from(lag_ns >= LATE_WAKE_NS);
        self.wake_lag_max_ns = self.wake_lag_max_ns.max(lag_ns);
    }
}

/// A gap between two busy-poll turns longer than this counts as a stall (50 µs).
pub const STALL_NS: u64 = 50_000;

/// Drives a set of hosts on the calling thread.
pub struct Runtime {
    mode: Mode,
    hosts: Vec<Box<dyn Turn>>,
    epoll: Option<Epoll>,
    io: Io,
    /// Epoll mode: (true time, host) wake-ups; an entry is live while it equals
    /// `scheduled[host]`, stale entries are skipped when popped.
    wakeups: BinaryHeap<Reverse<(u64, usize)>>,
    scheduled: Vec<Option<u64>>,
    /// Epoll mode: when each host's wake-up in `scheduled` was armed (the turn's time): a
    /// wake-up's lag counts from its time or from then, whichever is later, so a deadline
    /// armed already past (a late packet's release) is not charged the sleep before it.
    armed_ns: Vec<u64>,
    /// The time of the turn running (or of the last one).
    turn_ns: u64,
    /// Hosts ready after the last wait.
    ready: Vec<usize>,
    /// Hosts killed ([`Runtime::kill`]): never run again.
    dead: Vec<bool>,
    started: bool,
    /// Busy-poll mode: when the last turn that looked at the timers began, in this run or
    /// the one before; a wake-up's lag counts from there at most ([`RunStats::late_wakeups`]),
    /// so that a caller running the loop in slices shorter than a turn still sees how late
    /// it is.
    last_turn_ns: Option<u64>,
    /// Epoll mode: keep polling (zero timeout) this long after the last work before sleeping.
    spin_ns: u64,
}

/// Epoll mode spins at most this share of every [`SPIN_WINDOW_NS`] (percent). A spinning
/// real-time thread must leave the kernel's real-time throttling (95% of each second by
/// default) far away: hitting it parks the thread for tens of milliseconds.
pub const SPIN_DUTY_PERCENT: u64 = 50;

/// The window over which [`SPIN_DUTY_PERCENT`] is enforced (10 ms).
pub const SPIN_WINDOW_NS: u64 = 10_000_000;

/// Epoll mode's spin budget: the spin time used in the current [`SPIN_WINDOW_NS`] window.
/// Kept apart from the loop (which reads the clock) so its arithmetic is tested on made-up
/// times.
#[derive(Clone, Copy, Debug)]
struct SpinBudget {
    window_start: u64,
    window_spin: u64,
}

impl SpinBudget {
    fn new(now: u64) -> Self {
        Self {
            window_start: now,
            window_spin: 0,
        }
    }

    /// A turn begins at `now`; the wait before it began at `since` and was a spin if
    /// `spun`. Returns the spin time to count, and starts a new window when this one is over.
    fn turn(&mut self, now: u64, since: u64, spun: bool) -> u64 {
        let spent = if spun { now.saturating_sub(since) } else { 0 };
        self.window_spin += spent;
        if now.saturating_sub(self.window_start) >= SPIN_WINDOW_NS {
            self.window_start = now;
            self.window_spin = 0;
        }
        spent
    }

    /// Whether the window's share is not used up yet.
    fn allows_spin(&self) -> bool {
        self.window_spin < SPIN_WINDOW_NS / 100 * SPIN_DUTY_PERCENT
    }
}

impl core::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Runtime")
            .field("mode", &self.mode)
            .field("hosts", &self.hosts.len())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// An empty runtime. Sets the calling thread's timer slack to 1 ns so that epoll
    /// timeouts fire on time.
    pub fn new(mode: Mode) -> io::Result<Self> {
        let epoll = match mode {
            Mode::Epoll => Some(Epoll::new()?),
            Mode::BusyPoll => None,
        };
        sys::set_timer_slack(1)?;
        Ok(Self {
            mode,
            hosts: Vec::new(),
            epoll,
            io: Io::default(),
            wakeups: BinaryHeap::new(),
            scheduled: Vec::new(),
            armed_ns: Vec::new(),
            turn_ns: 0,
            ready: Vec::with_capacity(sys::EPOLL_EVENTS_MAX),
            dead: Vec::new(),
            started: false,
            last_turn_ns: None,
            spin_ns: 0,
        })
    }

    /// Epoll mode: after a turn that did work, keep polling without sleeping for up to
    /// `spin` before going to sleep, so that an answer expected soon (a response to the
    /// order just forwarded) does not pay a scheduler wake-up (tens of µs on a VM). Spinning
    /// takes at most [`SPIN_DUTY_PERCENT`] of the time; zero (the default) never spins. No
    /// effect in busy-poll mode, which always spins.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin_ns = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
    }

    /// Adds a host; returns its index. Hosts may be added between runs.
    pub fn add<N: Role, H: Hook<N>>(&mut self, host: Host<N, H>) -> io::Result<usize> {
        let index = self.hosts.len();
        if let Some(epoll) = &mut self.epoll {
            epoll.add(Turn::fd(&host), index as u64)?;
        }
        self.hosts.push(Box::new(host));
        self.scheduled.push(None);
        self.armed_ns.push(0);
        self.dead.push(false);
        self.started = false;
        Ok(index)
    }

    /// Kills host `index` (a crashed node, for fault drills such as `jasper up --kill`): it
    /// never runs again, and what is sent to it piles up unread in its socket until the
    /// kernel drops it. Its counters stay readable.
    pub fn kill(&mut self, index: usize) -> io::Result<()> {
        let Some(host) = self.hosts.get(index) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no host {index}"),
            ));
        };
        if self.dead[index] {
            return Ok(());
        }
        if let Some(epoll) = &mut self.epoll {
            epoll.remove(host.fd())?;
        }
        self.dead[index] = true;
        self.scheduled[index] = None;
        Ok(())
    }

    /// Whether host `index` was killed.
    pub fn is_dead(&self, index: usize) -> bool {
        self.dead.get(index).copied().unwrap_or(false)
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether the runtime has no host.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// Every host, in the order added.
    pub fn hosts(&self) -> impl Iterator<Item = &dyn HostView> + '_ {
        self.hosts.iter().map(|h| h.view())
    }

    /// Host `index` as its concrete type.
    pub fn host<N: Role, H: Hook<N>>(&self, index: usize) -> Option<&Host<N, H>> {
        self.hosts.get(index)?.view().as_any().downcast_ref()
    }

    /// Host `index` as its concrete type, mutably (between runs).
    pub fn host_mut<N: Role, H: Hook<N>>(&mut self, index: usize) -> Option<&mut Host<N, H>> {
        self.hosts.get_mut(index)?.view_mut_any().downcast_mut()
    }

    /// Runs for `duration` of true time, or until `stop` is set.
    pub fn run_for(
        &mut self,
        duration: Duration,
        stop: &AtomicBool,
        sink: &mut dyn EventSink,
    ) -> io::Result<RunStats> {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.run_until(now_ns().saturating_add(nanos), stop, sink)
    }

    /// Runs until true time `until_ns` ([`crate::clock::now_ns`]) or until `stop` is set.
    pub fn run_until(
        &mut self,
        until_ns: u64,
        stop: &AtomicBool,
        sink: &mut dyn EventSink,
    ) -> io::Result<RunStats> {
        if !self.started {
            self.start(sink);
        }
        match self.mode {
            Mode::BusyPoll => Ok(self.run_busy(until_ns, stop, sink)),
            Mode::Epoll => self.run_epoll(until_ns, stop, sink),
        }
    }

    /// Gives every host its first turn: its hook runs, its first deadline is armed.
    fn start(&mut self, sink: &mut dyn EventSink) {
        let now = now_ns();
        self.turn_ns = now;
        for i in 0..self.hosts.len() {
            if !self.dead[i] {
                self.hosts[i].wake(now, &mut self.io, sink);
                self.reschedule(i);
            }
        }
        self.started = true;
    }

    fn run_busy(&mut self, until_ns: u64, stop: &AtomicBool, sink: &mut dyn EventSink) -> RunStats {
        let mut stats = RunStats::default();
        let mut last = now_ns();
        let mut turn_began = self.last_turn_ns.unwrap_or(last);
        loop {
            let now = now_ns();
            stats.turns += 1;
            let gap = now.saturating_sub(last);
            last = now;
            if gap > STALL_NS {
                stats.stalls += 1;
                stats.stalled_ns += gap;
            }
            stats.longest_gap_ns = stats.longest_gap_ns.max(gap);
            if run_ends(now, until_ns, stop, &mut stats) {
                break;
            }
            // Only a turn that looks at the timers counts as one (the last of a run does not).
            let since = turn_began;
            turn_began = now;
            self.last_turn_ns = Some(now);
            let mut got = 0;
            for (host, _) in self
                .hosts
                .iter_mut()
                .zip(&self.dead)
                .filter(|(_, dead)| !**dead)
            {
                got += host.input(now, &mut self.io, sink);
                if let Some(at) = host.next_wakeup().filter(|&at| at <= now) {
                    host.wake(now, &mut self.io, sink);
                    stats.woke(now - at.max(since).min(now));
                }
            }
            stats.busy_turns += (got > 0) as u64;
            stats.datagrams += got as u64;
        }
        stats
    }

    fn run_epoll(
        &mut self,
        until_ns: u64,
        stop: &AtomicBool,
        sink: &mut dyn EventSink,
    ) -> io::Result<RunStats> {
        let mut stats = RunStats::default();
        // `ready` holds what the last wait of the run before found, not read yet: kept, or a
        // loop run in slices of one turn each (a slice shorter than a turn) would never read
        // its sockets.
        // Spinning: when work was last done, whether the last wait was a spin, and the spin
        // time used in the current window.
        let mut last_work = 0u64;
        let mut spun = false;
        let mut last_turn = now_ns();
        let mut budget = SpinBudget::new(last_turn);
        loop {
            let now = now_ns();
            stats.turns += 1;
            stats.spun_ns += budget.turn(now, last_turn, spun);
            last_turn = now;
            self.turn_ns = now;
            if run_ends(now, until_ns, stop, &mut stats) {
                break;
            }
            let mut got = 0;
            let wakeups_before = stats.wakeups;
            for k in 0..self.ready.len() {
                let i = self.ready[k];
                if self.dead[i] {
                    continue;
                }
                got += self.hosts[i].input(now, &mut self.io, sink);
                self.reschedule(i);
            }
            stats.busy_turns += (got > 0) as u64;
            stats.datagrams += got as u64;
            while let Some(&Reverse((at, i))) = self.wakeups.peek() {
                if at > now {
                    break;
                }
                self.wakeups.pop();
                if self.scheduled[i] != Some(at) {
                    continue;
                }
                self.scheduled[i] = None;
                self.hosts[i].wake(now, &mut self.io, sink);
                stats.woke(now - at.max(self.armed_ns[i]).min(now));
                self.reschedule(i);
            }
            let next = self
                .wakeups
                .peek()
                .map_or(until_ns, |r| r.0.0.min(until_ns));
            if got > 0 || stats.wakeups > wakeups_before {
                last_work = now;
            }
            spun = self.spin_ns > 0
                && now.saturating_sub(last_work) < self.spin_ns
                && budget.allows_spin();
            let timeout = if spun {
                Duration::ZERO
            } else {
                Duration::from_nanos(next.saturating_sub(now))
            };
            let epoll = self
                .epoll
                .as_mut()
                .expect("an epoll runtime has an epoll set");
            let events = epoll.wait(Some(timeout))?;
            self.ready.clear();
            self.ready.extend(events.iter().map(|e| e.u64 as usize));
            debug_assert!(self.ready.iter().all(|&i| i < self.hosts.len()));
        }
        Ok(stats)
    }

    /// Re-arms host `i`'s wake-up if it moved.
    fn reschedule(&mut self, i: usize) {
        if self.dead[i] {
            return;
        }
        let wakeup = self.hosts[i].next_wakeup();
        if wakeup == self.scheduled[i] {
            return;
        }
        self.scheduled[i] = wakeup;
        self.armed_ns[i] = self.turn_ns;
        if self.mode == Mode::BusyPoll {
            return;
        }
        if let Some(at) = wakeup {
            self.wakeups.push(Reverse((at, i)));
        }
        // Stale entries pile up when deadlines move earlier; rebuild from the live ones.
        if self.wakeups.len() > 4 * self.hosts.len() + 1024 {
            self.wakeups = self
                .scheduled
                .iter()
                .enumerate()
                .filter_map(|(i, at)| at.map(|at| Reverse((at, i))))
                .collect();
        }
        debug_assert!(self.wakeups.len() <= 4 * self.hosts.len() + 1024);
    }
}

/// Whether a run ends at `now`: its time is up, or `stop` was set (then `stats` says so).
fn run_ends(now: u64, until_ns: u64, stop: &AtomicBool, stats: &mut RunStats) -> bool {
    if now >= until_ns {
        return true;
    }
    stats.stopped = stop.load(Ordering::Relaxed);
    stats.stopped
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop that always wants to spin (work is always recent) spins half of every window
    /// and sleeps the rest: each spin wait lasts `spin_wait` ns, each sleep `sleep` ns.
    fn spun_share(spin_wait: u64, sleep: u64, run_ns: u64) -> (u64, u64) {
        let mut now = 0;
        let mut budget = SpinBudget::new(now);
        let (mut spun, mut spun_ns, mut last_turn) = (false, 0, now);
        while now < run_ns {
            spun_ns += budget.turn(now, last_turn, spun);
            last_turn = now;
            spun = budget.allows_spin();
            now += if spun { spin_wait } else { sleep };
        }
        (spun_ns, now)
    }

    #[test]
    fn spinning_keeps_to_its_duty_in_every_window() {
        let duty = |elapsed: u64| elapsed / 100 * SPIN_DUTY_PERCENT;
        // Spin turns of 1 µs, sleeps of 100 µs, one second.
        let (spun, elapsed) = spun_share(1_000, 100_000, 1_000_000_000);
        assert!(spun <= duty(elapsed) + 100 * 1_000, "{spun} of {elapsed}");
        assert!(
            spun >= duty(elapsed) * 9 / 10,
            "spins up to its share: {spun}"
        );
        // A spin that overruns (the thread was descheduled while spinning) counts whole,
        // and the rest of its window is not spun.
        let mut budget = SpinBudget::new(0);
        assert_eq!(budget.turn(2_000_000, 0, true), 2_000_000);
        assert!(budget.allows_spin());
        assert_eq!(budget.turn(7_000_000, 2_000_000, true), 5_000_000);
        assert!(!budget.allows_spin(), "7 ms of 10 spun");
        assert_eq!(budget.turn(9_000_000, 7_000_000, false), 0);
        assert!(!budget.allows_spin());
        // The next window starts afresh.
        assert_eq!(budget.turn(10_000_000, 9_000_000, false), 0);
        assert!(budget.allows_spin());
    }
}
