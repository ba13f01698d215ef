//! Sharded runs: one simulation split over threads, as a conservative parallel discrete-event
//! simulation (Chandy–Misra–Bryant with a global window, the "YAWNS" scheme).
//!
//! Every shard is a whole [`Sim`] built from the same seed and plan; each *owns* the nodes
//! whose id modulo the shard count is its index and only ever runs those (the other nodes sit
//! in its host table untouched). A copy is sent by its source's shard (egress, link jitter and
//! spikes are the source's state) and received by its target's shard (receive buffer, handler).
//! A copy to a node of another shard is *exported*: its `Arrive` event, with its bytes, moves
//! to the owner at the next rendezvous.
//!
//! That is safe because no copy arrives sooner than the model's **lookahead** after it was
//! handed over ([`NetModel::lookahead_ns`]): a copy leaves its host no earlier than its send
//! cost, spends at least the floor of its pair's delay on the way, and its handler runs no
//! earlier than the receive cost after that. So the shards run in rounds, one barrier each:
//! they post their exports with the earliest time they account for (queue or exports), meet,
//! agree on the earliest pending event `t` anywhere, import, and each runs its own events
//! before `t + lookahead`; nothing another shard does in that window can reach them inside it.
//!
//! Determinism: a shard's events are ordered by `(time, its own insertion sequence)`, imports
//! are pushed in shard order at fixed rendezvous, and the rounds' windows depend only on the
//! queues. A run is therefore a function of the seed, the configuration and the shard count:
//! the same seed with 2 shards gives the same trace every time, though not the trace of 1
//! shard (ties at one nanosecond break in another order, and the network's lazily drawn
//! straggler episodes are drawn per shard). Releases are not checked or measured inside the
//! shards: each shard posts the releases of its window at every barrier, and whichever thread
//! waits at a barrier feeds those that every shard has run past to the run's one
//! [`Checker`](crate::Checker) and [`Metrics`](crate::Metrics), in true-time order (a [`Feed`]);
//! the first shard feeds what is left after each run. The order is that of a stable sort of
//! every release by (true time, receiver), so the figures do not depend on which thread fed
//! what, nor when.
//!
//! [`NetModel::lookahead_ns`]: crate::NetModel::lookahead_ns

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{Action, Payload, Sim, check_and_measure};
use crate::checker::{Checker, OnViolation};
use crate::metrics::{Metrics, ReleaseSample};

/// Shards at most (the owner table stores a byte per node).
pub const SHARDS_MAX: usize = 64;

/// A copy on its way to a node of another shard: its `Arrive` event; its bytes are
/// `bytes[start..start + len]` of the [`Outgoing`] that carries it.
struct Export {
    at: u64,
    to: u32,
    from: u32,
    hash: u64,
    start: u32,
    len: u32,
}

/// Copies for one other shard. A datagram's bytes are written once however many of that
/// shard's nodes it goes to (a fan-out), and the receiving shard makes one payload of them;
/// the bytes travel in a buffer that is reused round after round, so no allocation crosses
/// threads (a payload allocated by one shard and freed by another contends for the
/// allocator's locks).
#[derive(Default)]
pub(super) struct Outgoing {
    exports: Vec<Export>,
    bytes: Vec<u8>,
    /// `(transmit, start)` of the datagram last written here.
    staged: Option<(u64, u32)>,
}

/// A release for the run's one checker and metrics.
#[derive(Clone, Copy)]
pub(super) struct Sample {
    pub(super) deadline_x: u64,
    /// The packets `[from, to)` the gateway skipped just before this release, or `(0, 0)`.
    pub(super) skipped: (u64, u64),
    pub(super) release: ReleaseSample,
}

/// A shard's part of a sharded run.
pub(super) struct Shard {
    /// This shard's index; the first shard (index 0) is the `Sim` a caller holds.
    pub(super) index: usize,
    /// The shard of every node.
    owner: std::sync::Arc<[u8]>,
    /// No copy's `Arrive` event is sooner than this after the event that sent it.
    pub(super) lookahead_ns: u64,
    /// Copies for other shards, by their shard, since the last rendezvous.
    outgoing: Vec<Outgoing>,
    /// Releases since this shard last posted them to the [`Feed`].
    pub(super) samples: Vec<Sample>,
}

impl Shard {
    /// The shard that runs `node`.
    pub(super) fn owner(&self, node: u32) -> usize {
        usize::from(self.owner[node as usize])
    }

    /// Whether this shard runs `node`.
    pub(super) fn owns(&self, node: u32) -> bool {
        self.owner(node) == self.index
    }

    /// Sends a copy of `payload`, the `transmit`-th datagram this shard sent, to `to` on
    /// another shard, arriving at `at`.
    pub(super) fn export(&mut self, at: u64, to: u32, from: u32, payload: &Payload, transmit: u64) {
        let owner = self.owner(to);
        let out = &mut self.outgoing[owner];
        let start = match out.staged {
            Some((staged, start)) if staged == transmit => start,
            _ => {
                let start = u32::try_from(out.bytes.len()).expect("a round's bytes fit in u32");
                out.bytes.extend_from_slice(&payload.bytes);
                out.staged = Some((transmit, start));
                start
            }
        };
        out.exports.push(Export {
            at,
            to,
            from,
            hash: payload.hash,
            start,
            len: u32::try_from(payload.bytes.len()).expect("a datagram fits in u32"),
        });
    }
}

/// Spins of a wait before it yields its core: at a barrier ([`Rendezvous::wait`]) and for a
/// worker's next job or report ([`spin_recv`]); each a `spin_loop` hint, on the order of
/// 10-50 µs in all.
const SPINS_BEFORE_YIELD: u32 = 4_000;

/// Yields of a wait before it blocks: a thread that yields lets a partner that shares its
/// core arrive, at a fraction of the cost of a futex sleep and wake-up.
const YIELDS_BEFORE_PARK: u32 = 200;

/// How a wait waits ([`Backoff::snooze`]): spin, then yield the core, then block.
#[derive(Clone, Copy, Debug)]
struct Backoff {
    spins: u32,
}

impl Backoff {
    /// For a run on `threads` threads: [`SPINS_BEFORE_YIELD`] while each has a core of its
    /// own, none when they outnumber the cores, for then a spinning waiter holds the core a
    /// partner needs in order to arrive (4 shards on 2 cores ran 20x slower than 2).
    fn for_threads(threads: usize) -> Self {
        Self {
            spins: if threads <= crate::cores::available_cores() {
                SPINS_BEFORE_YIELD
            } else {
                0
            },
        }
    }

    /// One more turn of a wait that found nothing yet (`turn` counts them): spins or yields
    /// and returns `true`, or returns `false` once the waiter should block.
    fn snooze(self, turn: &mut u32) -> bool {
        *turn = turn.saturating_add(1);
        if *turn <= self.spins {
            std::hint::spin_loop();
            true
        } else if *turn <= self.spins + YIELDS_BEFORE_PARK {
            std::thread::yield_now();
            true
        } else {
            false
        }
    }
}

/// One shard's part of one run, sent to the worker thread that runs it.
struct Job {
    shard: *mut Sim,
    meet: *const Rendezvous,
    until: u64,
}

// SAFETY: a `Sim` is not `Send` only because of what it holds privately: `Rc` payloads, every
// clone of which lives inside that one `Sim` (exports move owned bytes, never an `Rc`), and its
// nodes, which `Sim::sharded` accepts only when every one was added with `add_node_send` (a
// `Send` box), with no unsendable command queued (`schedule_command` is refused on shards).
// The pointers stay valid while the worker uses them: `run_sharded` lends each twin to exactly
// one worker and does not return (not even by unwinding) before every worker has reported
// back; meanwhile nothing else touches that twin.
unsafe impl Send for Job {}

/// What a worker reports: the panic of its shard, if any.
type Done = Result<(), Box<dyn core::any::Any + Send>>;

/// The threads that run the twins of a sharded run, one each, for as long as the run lives
/// (a thread spawned per `run_until` would start on its parent's core whenever the other is
/// busy, and the two shards would share one core for its whole short life).
pub(super) struct Workers {
    jobs: Vec<std::sync::mpsc::Sender<Job>>,
    done: std::sync::mpsc::Receiver<Done>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// How the workers and the first shard's thread wait.
    backoff: Backoff,
}

impl Workers {
    fn new(count: usize) -> Self {
        let backoff = Backoff::for_threads(count + 1);
        let (done_sender, done) = std::sync::mpsc::channel::<Done>();
        let mut jobs = Vec::new();
        let mut threads = Vec::new();
        for index in 0..count {
            let (sender, receiver) = std::sync::mpsc::channel::<Job>();
            let done_sender = done_sender.clone();
            let thread = std::thread::Builder::new()
                .name(format!("sim-shard-{}", index + 1))
                .spawn(move || {
                    while let Some(job) = spin_recv(&receiver, backoff) {
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            // SAFETY: see `Job`: the shard and the rendezvous outlive the job,
                            // and this thread is the only one using the shard.
                            let (shard, meet) = unsafe { (&mut *job.shard, &*job.meet) };
                            shard.run_rounds(job.until, meet);
                        }));
                        if done_sender.send(result).is_err() {
                            return;
                        }
                    }
                })
                .expect("spawning a shard thread");
            jobs.push(sender);
            threads.push(thread);
        }
        Self {
            jobs,
            done,
            threads,
            backoff,
        }
    }
}

/// Receives from `receiver`, spinning a while before blocking: a run is one `run_until` per
/// published packet (every 200 µs of simulated time at 5K messages/s), between two of which
/// the first shard feeds what is left of the releases and publishes (when it fed all of a
/// packet's ~5,000 releases there, ~80 µs); a worker blocked in the channel took ~30 µs to
/// wake for the next, with the first shard waiting. `None` once the sender is gone.
fn spin_recv<T>(receiver: &std::sync::mpsc::Receiver<T>, backoff: Backoff) -> Option<T> {
    let mut turn = 0;
    loop {
        match receiver.try_recv() {
            Ok(value) => return Some(value),
            Err(std::sync::mpsc::TryRecvError::Empty) if backoff.snooze(&mut turn) => {}
            Err(std::sync::mpsc::TryRecvError::Empty) => return receiver.recv().ok(),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Closing the job channels ends the workers' loops.
        self.jobs.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What the shards share while they run: a barrier, mailboxes and each shard's next time.
struct Rendezvous {
    parties: usize,
    /// How a waiter waits before it parks.
    backoff: Backoff,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    poisoned: AtomicBool,
    /// Each shard's thread, and whether it is parked in [`Rendezvous::wait`].
    threads: Vec<std::sync::OnceLock<std::thread::Thread>>,
    parked: Vec<AtomicBool>,
    /// `mailboxes[round % 2][to][from]`: a round's exports. Two sets, so that a shard that
    /// finishes its window first and posts the next round's exports cannot mix them into the
    /// round its partner is still importing (the order of imports is part of the run).
    mailboxes: [Vec<Vec<Mutex<Outgoing>>>; 2],
    /// `next[round % 2][shard]`: the earliest event the shard holds or has just exported.
    next: [Vec<AtomicU64>; 2],
    /// The run's releases on their way to its checker and metrics.
    feed: Feed,
}

impl Rendezvous {
    fn new(parties: usize, backoff: Backoff, sink: Sink) -> Self {
        Self {
            feed: Feed::new(parties, sink),
            parties,
            backoff,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
            threads: (0..parties).map(|_| std::sync::OnceLock::new()).collect(),
            parked: (0..parties).map(|_| AtomicBool::new(false)).collect(),
            mailboxes: [(); 2].map(|()| {
                (0..parties)
                    .map(|_| {
                        (0..parties)
                            .map(|_| Mutex::new(Outgoing::default()))
                            .collect()
                    })
                    .collect()
            }),
            next: [(); 2].map(|()| (0..parties).map(|_| AtomicU64::new(u64::MAX)).collect()),
        }
    }

    /// A barrier that spins, then parks: a round is tens of microseconds of work, so on an
    /// idle core a partner arrives within a few and a futex wake-up would cost as much as the
    /// wait; on a busy machine (another process on the other core) spinning would burn the
    /// time slice the partner needs, so a waiter yields, then parks ([`Backoff`]). Panics if
    /// another shard panicked, so a failing run ends instead of hanging. While it waits, the
    /// waiter feeds releases to the checker and metrics ([`Feed::feed_some`]): work that would
    /// otherwise wait for the end of the run, with every other shard idle.
    fn wait(&self, me: usize) {
        let generation = self.generation.load(Ordering::SeqCst);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::SeqCst);
            for (shard, parked) in self.parked.iter().enumerate() {
                if shard != me && parked.load(Ordering::SeqCst) {
                    self.threads[shard].get().expect("registered").unpark();
                }
            }
            return;
        }
        let mut turn = 0;
        while self.generation.load(Ordering::SeqCst) == generation {
            assert!(
                !self.poisoned.load(Ordering::Relaxed),
                "another shard of this run panicked"
            );
            if self.feed.feed_some(FEED_CHUNK) {
                turn = 0;
                continue;
            }
            if !self.backoff.snooze(&mut turn) {
                // Announce, then look again: the releaser bumps the generation before it
                // reads the flags, so one of the two sees the other (no lost wake-up).
                self.parked[me].store(true, Ordering::SeqCst);
                if self.generation.load(Ordering::SeqCst) == generation {
                    std::thread::park_timeout(std::time::Duration::from_millis(1));
                }
                self.parked[me].store(false, Ordering::SeqCst);
            }
        }
    }

    fn lock(&self, round: usize, to: usize, from: usize) -> MutexGuard<'_, Outgoing> {
        lock(&self.mailboxes[round % 2][to][from])
    }
}

/// Releases a waiter feeds at a time before it looks at the barrier again: ~16 × 0.2 µs, so a
/// partner's arrival holds it back by a few µs at most.
const FEED_CHUNK: usize = 16;

/// The releases of a sharded run on their way to the run's one checker and metrics, which the
/// first shard lends it for the run ([`Sink`]).
struct Feed {
    /// Per shard, the releases it posted at a barrier and no feeder has taken yet.
    posted: Vec<Mutex<Vec<Sample>>>,
    /// Every release at or before this true time has been posted: the end of the window that
    /// every shard finished before the last barrier.
    through: AtomicU64,
    sink: Mutex<Sink>,
}

/// What a [`Feed`] feeds, and the releases it took from the shards and has not yet fed.
struct Sink {
    checker: Checker,
    metrics: Option<Metrics>,
    merger: Merger<Sample>,
    /// A buffer swapped with a shard's posted releases, so that posting allocates nothing.
    spare: Vec<Sample>,
    /// [`Feed::through`] when the posted releases were last taken: every release up to it
    /// is in `merger` since, so until it moves a waiter need not look at the shards' posts
    /// again (it would lock each shard's at every turn of its wait).
    taken_through: u64,
}

impl Feed {
    fn new(parties: usize, sink: Sink) -> Self {
        Self {
            posted: (0..parties).map(|_| Mutex::new(Vec::new())).collect(),
            through: AtomicU64::new(0),
            sink: Mutex::new(sink),
        }
    }

    /// Shard `me` posts its releases since it last posted (all of them in true-time order,
    /// later than any it posted before).
    fn post(&self, me: usize, samples: &mut Vec<Sample>) {
        if !samples.is_empty() {
            lock(&self.posted[me]).append(samples);
        }
    }

    /// Feeds up to `budget` releases that every shard has posted, unless another thread is
    /// feeding; returns whether it fed any.
    fn feed_some(&self, budget: usize) -> bool {
        let Ok(mut sink) = self.sink.try_lock() else {
            return false;
        };
        let through = self.through.load(Ordering::Acquire);
        if through > sink.taken_through {
            sink.take_posted(&self.posted);
            sink.taken_through = through;
        }
        sink.feed(through, budget) > 0
    }

    /// After the run, when every shard has posted everything: feeds the rest (unless a shard
    /// panicked, perhaps in the checker: its panic is the report) and returns the checker and
    /// metrics.
    fn finish(self, feed_rest: bool) -> (Checker, Option<Metrics>) {
        let mut sink = self
            .sink
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        if feed_rest {
            sink.take_posted(&self.posted);
            sink.feed(u64::MAX, usize::MAX);
        }
        (sink.checker, sink.metrics)
    }
}

impl Sink {
    /// Lends a sharded run the first shard's checker and metrics.
    fn lend(checker: &mut Checker, metrics: &mut Option<Metrics>, shards: usize) -> Self {
        Self {
            checker: core::mem::replace(checker, Checker::new(OnViolation::Collect, None)),
            metrics: metrics.take(),
            merger: Merger::new(shards),
            spare: Vec::new(),
            taken_through: 0,
        }
    }

    fn take_posted(&mut self, posted: &[Mutex<Vec<Sample>>]) {
        for (shard, posted) in posted.iter().enumerate() {
            core::mem::swap(&mut *lock(posted), &mut self.spare);
            self.merger.add(shard, &mut self.spare, sample_key);
        }
    }

    /// Feeds up to `budget` releases up to true time `through`; returns how many.
    fn feed(&mut self, through: u64, budget: usize) -> usize {
        let Self {
            checker,
            metrics,
            merger,
            ..
        } = self;
        merger.drain(through, budget, sample_key, |sample| {
            check_and_measure(
                checker,
                metrics.as_mut(),
                sample.deadline_x,
                sample.skipped,
                &sample.release,
            );
        })
    }
}

/// The order in which a run's releases reach its checker and metrics.
fn sample_key(sample: &Sample) -> (u64, u32) {
    (sample.release.released_t, sample.release.receiver)
}

/// Locks a mutex that a panicking shard may have poisoned (that shard's panic is the report).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Items from several sources handed on in the order of a stable sort of all of them by a
/// `(time, tie)` key, the first source first on an equal key, as far as every source has
/// reached. Each source adds its items in batches, each batch later in time than the last
/// (a shard's window after its previous one); within a batch, items may be out of order
/// (a shard records its releases in time order, but those of one nanosecond in event order).
struct Merger<T> {
    sources: Vec<VecDeque<T>>,
}

impl<T> Merger<T> {
    fn new(sources: usize) -> Self {
        Self {
            sources: (0..sources).map(|_| VecDeque::new()).collect(),
        }
    }

    /// Adds a batch from `source`, emptying `batch`.
    fn add<K: Ord>(&mut self, source: usize, batch: &mut Vec<T>, key: fn(&T) -> K) {
        // Stable, and linear on a batch already in order.
        batch.sort_by_key(key);
        self.sources[source].extend(batch.drain(..));
    }

    /// Hands on up to `budget` items whose time is at most `through`, in order; returns how
    /// many.
    fn drain<K: Ord + Copy>(
        &mut self,
        through: u64,
        budget: usize,
        key: fn(&T) -> (u64, K),
        mut on: impl FnMut(T),
    ) -> usize {
        let mut handed = 0;
        while handed < budget {
            // The source whose next item has the least key; the first such source on a tie.
            let mut least: Option<(usize, (u64, K))> = None;
            for (index, source) in self.sources.iter().enumerate() {
                if let Some(item) = source.front() {
                    let candidate = key(item);
                    if candidate.0 <= through && least.is_none_or(|(_, key)| candidate < key) {
                        least = Some((index, candidate));
                    }
                }
            }
            let Some((index, _)) = least else { break };
            on(self.sources[index].pop_front().expect("a front item"));
            handed += 1;
        }
        handed
    }
}

/// Marks the rendezvous poisoned if its shard's thread panics.
struct PoisonOnPanic<'a>(&'a AtomicBool);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

impl Sim {
    /// Joins whole simulations built alike (same seed, configuration and nodes, in the same
    /// order) into one run split over `shards.len()` threads; returns the first, which holds
    /// the rest. Node `i` runs on shard `i % shards.len()`. One shard is returned as it is.
    ///
    /// # Errors
    /// If the shards differ in size, a node was added with [`Sim::add_node`] (it may not be
    /// `Send`), a shard has started or has events queued, there are more than
    /// [`SHARDS_MAX`] shards, or the model has no lookahead (no send or receive cost, e.g. the
    /// Appendix C preset: every copy could arrive at once, so shards could not run apart).
    pub fn sharded(mut shards: Vec<Self>) -> Result<Self, String> {
        let count = shards.len();
        if count == 0 || count > SHARDS_MAX {
            return Err(format!("shards must be between 1 and {SHARDS_MAX}"));
        }
        if count == 1 {
            return Ok(shards.pop().expect("one shard"));
        }
        let nodes = shards[0].hosts.len();
        let lookahead_ns = shards[0].network.model().lookahead_ns();
        if lookahead_ns == 0 {
            return Err(
                "the network model has no send or receive cost and no delay floor, so no \
                 lookahead: run it on one thread"
                    .into(),
            );
        }
        for shard in &shards {
            if shard.hosts.len() != nodes {
                return Err("shards must hold the same nodes".into());
            }
            if !shard.all_send {
                return Err("every node of a sharded run must be added with add_node_send".into());
            }
            if shard.started || !shard.queue.is_empty() || shard.shard.is_some() {
                return Err("shards must be fresh (not started, nothing scheduled)".into());
            }
        }
        for shard in &shards[1..] {
            let same_vms = shard.hosts.iter().map(|host| host.vm);
            if !same_vms.eq(shards[0].hosts.iter().map(|host| host.vm)) {
                return Err("shards must put the nodes on the same VMs".into());
            }
        }
        // By VM, so that the nodes sharing one (`Sim::add_node_send_beside`) run in one shard,
        // which holds that VM's egress, receive queue and outgoing links.
        let owner: std::sync::Arc<[u8]> = shards[0]
            .hosts
            .iter()
            .map(|host| u8::try_from(host.vm as usize % count).expect("SHARDS_MAX fits in u8"))
            .collect();
        for (index, shard) in shards.iter_mut().enumerate() {
            shard.shard = Some(Box::new(Shard {
                index,
                owner: std::sync::Arc::clone(&owner),
                lookahead_ns,
                outgoing: (0..count).map(|_| Outgoing::default()).collect(),
                samples: Vec::new(),
            }));
        }
        let mut first = shards.remove(0);
        first.twins = shards;
        Ok(first)
    }

    /// Shards in this run (1 unless [`Sim::sharded`]).
    pub fn shard_count(&self) -> usize {
        1 + self.twins.len()
    }

    /// The shard holding `node`'s live state: `self` or one of its twins.
    pub(super) fn home(&self, node: u32) -> &Self {
        match &self.shard {
            Some(shard) if !shard.owns(node) => &self.twins[shard.owner(node) - 1],
            _ => self,
        }
    }

    /// [`Sim::home`], mutably.
    pub(super) fn home_mut(&mut self, node: u32) -> &mut Self {
        match &self.shard {
            Some(shard) if !shard.owns(node) => {
                let index = shard.owner(node) - 1;
                &mut self.twins[index]
            }
            _ => self,
        }
    }

    /// `run_until` of a sharded run: every shard on its own thread (the first on this one,
    /// the twins on [`Workers`] that live as long as this `Sim`).
    pub(super) fn run_sharded(&mut self, until: u64) {
        let mut twins = core::mem::take(&mut self.twins);
        let workers = self
            .workers
            .take()
            .unwrap_or_else(|| Box::new(Workers::new(twins.len())));
        let sink = Sink::lend(&mut self.checker, &mut self.metrics, twins.len() + 1);
        let meet = Rendezvous::new(twins.len() + 1, workers.backoff, sink);
        for (twin, jobs) in twins.iter_mut().zip(&workers.jobs) {
            let job = Job {
                shard: twin,
                meet: &meet,
                until,
            };
            jobs.send(job)
                .expect("shard workers live as long as the run");
        }
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.run_rounds(until, &meet);
        }));
        // Every worker must be done with its twin and with `meet` before they go out of
        // scope, whatever happened here.
        let theirs: Vec<Done> = (0..twins.len())
            .map(|_| spin_recv(&workers.done, workers.backoff).expect("shard workers report"))
            .collect();
        self.twins = twins;
        self.workers = Some(workers);
        let all_ran = mine.is_ok() && theirs.iter().all(Result::is_ok);
        (self.checker, self.metrics) = meet.feed.finish(all_ran);
        for result in core::iter::once(mine).chain(theirs) {
            if let Err(panic) = result {
                std::panic::resume_unwind(panic);
            }
        }
        self.merge_twins();
    }

    /// One shard's rounds up to `until` (see the module documentation).
    fn run_rounds(&mut self, until: u64, meet: &Rendezvous) {
        let _poison = PoisonOnPanic(&meet.poisoned);
        self.start();
        let shard = self.shard.as_ref().expect("a shard");
        let (me, lookahead_ns) = (shard.index, shard.lookahead_ns);
        meet.threads[me]
            .set(std::thread::current())
            .expect("one thread per shard");
        meet.wait(me);
        // Every shard has run every event up to here (its releases posted, or fed by an
        // earlier run).
        let mut done_through = self.now;
        for round in 0usize.. {
            // Post this round's exports and the earliest time this shard accounts for: its
            // queue's and its exports' (the exports are in no queue until imported).
            let shard = self.shard.as_mut().expect("a shard");
            let mut next = self.queue.peek_time().unwrap_or(u64::MAX);
            for (to, out) in shard.outgoing.iter_mut().enumerate() {
                if let Some(earliest) = out.exports.iter().map(|export| export.at).min() {
                    next = next.min(earliest);
                    let mut mailbox = meet.lock(round, to, me);
                    let base = u32::try_from(mailbox.bytes.len()).expect("fits");
                    mailbox.bytes.extend_from_slice(&out.bytes);
                    mailbox
                        .exports
                        .extend(out.exports.drain(..).map(|export| Export {
                            start: export.start + base,
                            ..export
                        }));
                    out.bytes.clear();
                    out.staged = None;
                }
            }
            meet.feed.post(me, &mut shard.samples);
            meet.next[round % 2][me].store(next, Ordering::Relaxed);
            meet.wait(me);
            meet.feed.through.fetch_max(done_through, Ordering::Release);
            let next = meet.next[round % 2]
                .iter()
                .map(|next| next.load(Ordering::Relaxed))
                .min()
                .expect("at least one shard");
            for from in 0..meet.parties {
                let mut mailbox = meet.lock(round, me, from);
                let Outgoing { exports, bytes, .. } = &mut *mailbox;
                let mut last: Option<(u32, Rc<Payload>)> = None;
                for export in exports.drain(..) {
                    let payload = match &last {
                        Some((start, payload)) if *start == export.start => Rc::clone(payload),
                        _ => {
                            let range = export.start as usize..(export.start + export.len) as usize;
                            let payload = Rc::new(Payload {
                                hash: export.hash,
                                bytes: bytes[range].into(),
                            });
                            last = Some((export.start, Rc::clone(&payload)));
                            payload
                        }
                    };
                    let (to, from) = (export.to, export.from);
                    self.push(export.at, Action::Arrive { to, from, payload });
                }
                bytes.clear();
            }
            if next > until {
                break;
            }
            // Nothing another shard does from `next` on reaches this one before
            // `next + lookahead`.
            let end = next.saturating_add(lookahead_ns - 1).min(until);
            while self.step_inner(end) {}
            done_through = end;
        }
        self.now = until;
    }

    /// After a sharded run: the twins' counters go into the first shard's. (Their releases
    /// went to the checker and metrics through the run's [`Feed`].)
    fn merge_twins(&mut self) {
        for twin in &mut self.twins {
            let shard = twin.shard.as_mut().expect("a shard");
            // Every export was posted; a datagram staged before the counters restart below
            // must not be taken for a later one with the same transmit number.
            for out in &mut shard.outgoing {
                debug_assert!(out.exports.is_empty());
                out.staged = None;
            }
            debug_assert!(shard.samples.is_empty(), "every release was posted");
            self.stats.absorb(&core::mem::take(&mut twin.stats));
            self.network.absorb(&mut twin.network);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Backoff, Merger, SPINS_BEFORE_YIELD, YIELDS_BEFORE_PARK};

    /// Goal: a wait spins only while every thread has a core, then yields, then blocks.
    #[test]
    fn a_wait_spins_yields_then_blocks() {
        let turns = |backoff: Backoff| {
            let mut turn = 0;
            let mut snoozed = 0;
            while backoff.snooze(&mut turn) {
                snoozed += 1;
            }
            assert!(!backoff.snooze(&mut turn), "blocks from then on");
            snoozed
        };
        assert_eq!(
            turns(Backoff::for_threads(1)),
            SPINS_BEFORE_YIELD + YIELDS_BEFORE_PARK
        );
        assert_eq!(Backoff::for_threads(usize::MAX).spins, 0);
        assert_eq!(turns(Backoff::for_threads(usize::MAX)), YIELDS_BEFORE_PARK);
    }

    proptest! {
        /// Goal: the feed hands on the shards' releases in the order of a stable sort of all
        /// of them by (time, receiver), whenever it is asked and with whatever budget (the
        /// metrics' figures depend on the order). Method: up to four sources of (time,
        /// receiver, tag) items; windows of `width` ns; at each window's barrier every source
        /// adds its batch for that window (in random order within the batch) and the merger
        /// drains up to a random budget through the end of the window before; at the end it
        /// drains the rest. The tags against a stable sort of the batches' concatenation.
        #[test]
        fn the_feed_is_a_stable_sort_of_every_release(
            sources in prop::collection::vec(
                prop::collection::vec((0u64..60, 0u32..4, any::<u64>()), 0..40),
                1..5,
            ),
            width in 1u64..12,
            budgets in prop::collection::vec(0usize..20, 70),
        ) {
            let windows = 60u64.div_ceil(width);
            let mut tag = 0u32;
            // batches[source][window]
            let batches: Vec<Vec<Vec<(u64, u32, u32)>>> = sources
                .into_iter()
                .map(|items| {
                    let mut by_window = vec![Vec::new(); windows as usize];
                    let mut items = items;
                    items.sort_by_key(|item| item.2);
                    for (time, receiver, _) in items {
                        tag += 1;
                        by_window[(time / width) as usize].push((time, receiver, tag));
                    }
                    by_window
                })
                .collect();
            let mut expected: Vec<(u64, u32, u32)> = (0..batches.len())
                .flat_map(|source| batches[source].concat())
                .collect();
            expected.sort_by_key(|item| (item.0, item.1));
            let key = |item: &(u64, u32, u32)| (item.0, item.1);
            let mut merger = Merger::new(batches.len());
            let mut handed = Vec::new();
            for window in 0..windows {
                for (source, by_window) in batches.iter().enumerate() {
                    let mut batch = by_window[window as usize].clone();
                    merger.add(source, &mut batch, key);
                    prop_assert!(batch.is_empty());
                }
                if window > 0 {
                    let through = window * width - 1;
                    merger.drain(through, budgets[window as usize], key, |item| handed.push(item));
                }
            }
            merger.drain(u64::MAX, usize::MAX, key, |item| handed.push(item));
            prop_assert_eq!(handed, expected);
        }
    }
}
