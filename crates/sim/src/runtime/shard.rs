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
//! shards: each shard records them and, after each run, the first shard feeds every record to
//! the one [`Checker`](crate::Checker) and [`Metrics`](crate::Metrics) in true-time order.
//!
//! [`NetModel::lookahead_ns`]: crate::NetModel::lookahead_ns

use std::rc::Rc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::{Action, Payload, Sim};
use crate::metrics::ReleaseSample;

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
    /// Releases since the last merge.
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
/// the first shard merges the releases (~80 µs); a worker blocked in the channel took ~30 µs
/// to wake for the next, with the first shard waiting. `None` once the sender is gone.
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
}

impl Rendezvous {
    fn new(parties: usize, backoff: Backoff) -> Self {
        Self {
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
    /// another shard panicked, so a failing run ends instead of hanging.
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

    fn lock(&self, round: usize, to: usize, from: usize) -> std::sync::MutexGuard<'_, Outgoing> {
        // A poisoned mailbox only means a shard panicked; that shard's panic is the report.
        self.mailboxes[round % 2][to][from]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let meet = Rendezvous::new(twins.len() + 1, workers.backoff);
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
            meet.next[round % 2][me].store(next, Ordering::Relaxed);
            meet.wait(me);
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
        }
        self.now = until;
    }

    /// After a sharded run: the twins' releases go to the first shard's checker and metrics
    /// in true-time order, and their counters into the first shard's.
    ///
    /// Each shard recorded its releases as it ran its events, in true-time order already
    /// (only releases at the same nanosecond may be out of receiver order: those few are
    /// sorted), so the order is a merge of the shards' runs, not a sort of their
    /// concatenation, taking the first shard's sample on an equal key as a stable sort of the
    /// concatenation would. (Sorting the ~5,000 80-byte samples of each published packet took
    /// 4% of a two-thread run's wall time, with the other shard idle.)
    fn merge_twins(&mut self) {
        let mut runs: Vec<Vec<Sample>> = Vec::with_capacity(1 + self.twins.len());
        runs.push(core::mem::take(
            &mut self.shard.as_mut().expect("a shard").samples,
        ));
        for twin in &mut self.twins {
            let shard = twin.shard.as_mut().expect("a shard");
            runs.push(core::mem::take(&mut shard.samples));
            // Every export was posted; a datagram staged before the counters restart below
            // must not be taken for a later one with the same transmit number.
            for out in &mut shard.outgoing {
                debug_assert!(out.exports.is_empty());
                out.staged = None;
            }
            self.stats.absorb(&core::mem::take(&mut twin.stats));
            self.network.absorb(&mut twin.network);
        }
        let merged = Merged::new(&mut runs, |sample| {
            (sample.release.released_t, sample.release.receiver)
        });
        for &Sample {
            deadline_x,
            release,
        } in merged
        {
            self.check_and_measure(deadline_x, &release);
        }
        // Back to their shards, emptied, keeping their capacity for the next run.
        for (index, mut run) in runs.into_iter().enumerate() {
            run.clear();
            let owner = if index == 0 {
                &mut *self
            } else {
                &mut self.twins[index - 1]
            };
            owner.shard.as_mut().expect("a shard").samples = run;
        }
    }
}

/// Runs of items visited in the order of a stable sort of their concatenation by `key`,
/// without moving them: each run is sorted on its own (a run already in order of the key's
/// first field, as a shard's releases are in true time, only within its ties), then the runs
/// are merged, the earliest run first on an equal key.
struct Merged<'a, T, K> {
    runs: &'a [Vec<T>],
    heads: Vec<usize>,
    key: fn(&T) -> (u64, K),
}

impl<'a, T, K: Ord + Copy> Merged<'a, T, K> {
    fn new(runs: &'a mut [Vec<T>], key: fn(&T) -> (u64, K)) -> Self {
        for run in runs.iter_mut() {
            // Stable sorts: a receiver's own releases keep their order.
            if run.is_sorted_by_key(|item| key(item).0) {
                for tie in run.chunk_by_mut(|a, b| key(a).0 == key(b).0) {
                    tie.sort_by_key(|item| key(item).1);
                }
            } else {
                run.sort_by_key(key);
            }
        }
        Self {
            heads: vec![0; runs.len()],
            runs,
            key,
        }
    }
}

impl<'a, T, K: Ord + Copy> Iterator for Merged<'a, T, K> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        // The run whose next item has the least key; the first such run on a tie.
        let mut least: Option<(usize, (u64, K))> = None;
        for (index, run) in self.runs.iter().enumerate() {
            if let Some(item) = run.get(self.heads[index]) {
                let candidate = (self.key)(item);
                if least.is_none_or(|(_, key)| candidate < key) {
                    least = Some((index, candidate));
                }
            }
        }
        let (index, _) = least?;
        self.heads[index] += 1;
        Some(&self.runs[index][self.heads[index] - 1])
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Backoff, Merged, SPINS_BEFORE_YIELD, YIELDS_BEFORE_PARK};

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
        /// Goal: the merge visits the shards' releases in the order the stable sort of their
        /// concatenation gave (the metrics' figures depend on it). Method: up to four runs of
        /// (time, receiver, tag) items, each in time order with ties (as a shard records them)
        /// or in no order at all; the visited tags against a stable sort's.
        #[test]
        fn the_merge_is_a_stable_sort_of_the_concatenation(
            runs in prop::collection::vec(
                (prop::collection::vec((0u64..20, 0u32..4), 0..40), any::<bool>()),
                1..5,
            )
        ) {
            let mut tag = 0u32;
            let mut runs: Vec<Vec<(u64, u32, u32)>> = runs
                .into_iter()
                .map(|(items, in_time_order)| {
                    let mut run: Vec<_> = items
                        .into_iter()
                        .map(|(time, receiver)| {
                            tag += 1;
                            (time, receiver, tag)
                        })
                        .collect();
                    if in_time_order {
                        run.sort_by_key(|item| item.0);
                    }
                    run
                })
                .collect();
            let mut expected: Vec<_> = runs.concat();
            expected.sort_by_key(|item| (item.0, item.1));
            let merged: Vec<_> = Merged::new(&mut runs, |item| (item.0, item.1))
                .copied()
                .collect();
            prop_assert_eq!(merged, expected);
        }
    }
}
