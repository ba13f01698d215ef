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
//! handed over: a copy leaves its host no earlier than its send cost, and its handler runs no
//! earlier than the receive cost after that ([`NetModel::send_cost_ns`] +
//! [`NetModel::recv_cost_ns`]). So the shards run in rounds: they swap exports, agree on the
//! earliest pending event `t` anywhere, and each runs its own events before `t + lookahead`;
//! nothing another shard does in that window can reach them inside it.
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
//! [`NetModel::send_cost_ns`]: crate::NetModel::send_cost_ns
//! [`NetModel::recv_cost_ns`]: crate::NetModel::recv_cost_ns

use std::rc::Rc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::{Action, Payload, Sim, fold};
use crate::metrics::ReleaseSample;

/// Shards at most (the owner table stores a byte per node).
pub const SHARDS_MAX: usize = 64;

/// A copy on its way to a node of another shard: its `Arrive` event, with its bytes.
pub(super) struct Export {
    pub(super) at: u64,
    pub(super) to: u32,
    pub(super) from: u32,
    pub(super) payload: Payload,
}

/// A release for the run's one checker and metrics.
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
    pub(super) exports: Vec<Vec<Export>>,
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
}

/// Spins of a barrier wait before the waiter parks (each a `spin_loop` hint: on the order of
/// 10-50 µs in all).
const SPINS_BEFORE_PARK: u32 = 4_000;

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
}

impl Workers {
    fn new(count: usize) -> Self {
        let (done_sender, done) = std::sync::mpsc::channel::<Done>();
        let mut jobs = Vec::new();
        let mut threads = Vec::new();
        for index in 0..count {
            let (sender, receiver) = std::sync::mpsc::channel::<Job>();
            let done_sender = done_sender.clone();
            let thread = std::thread::Builder::new()
                .name(format!("sim-shard-{}", index + 1))
                .spawn(move || {
                    for job in receiver {
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
    arrived: AtomicUsize,
    generation: AtomicUsize,
    poisoned: AtomicBool,
    /// Each shard's thread, and whether it is parked in [`Rendezvous::wait`].
    threads: Vec<std::sync::OnceLock<std::thread::Thread>>,
    parked: Vec<AtomicBool>,
    /// `mailboxes[to][from]`.
    mailboxes: Vec<Vec<Mutex<Vec<Export>>>>,
    next: Vec<AtomicU64>,
}

impl Rendezvous {
    fn new(parties: usize) -> Self {
        Self {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
            threads: (0..parties).map(|_| std::sync::OnceLock::new()).collect(),
            parked: (0..parties).map(|_| AtomicBool::new(false)).collect(),
            mailboxes: (0..parties)
                .map(|_| (0..parties).map(|_| Mutex::new(Vec::new())).collect())
                .collect(),
            next: (0..parties).map(|_| AtomicU64::new(u64::MAX)).collect(),
        }
    }

    /// A barrier that spins, then parks: a round is tens of microseconds of work, so on an
    /// idle core a partner arrives within a few and a futex wake-up would cost as much as the
    /// wait; on a busy machine (another process on the other core) spinning would burn the
    /// time slice the partner needs, so a waiter parks after [`SPINS_BEFORE_PARK`]. Panics if
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
        let mut spins = 0u32;
        while self.generation.load(Ordering::SeqCst) == generation {
            assert!(
                !self.poisoned.load(Ordering::Relaxed),
                "another shard of this run panicked"
            );
            if spins < SPINS_BEFORE_PARK {
                spins += 1;
                std::hint::spin_loop();
            } else {
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

    fn lock(&self, to: usize, from: usize) -> std::sync::MutexGuard<'_, Vec<Export>> {
        // A poisoned mailbox only means a shard panicked; that shard's panic is the report.
        self.mailboxes[to][from]
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
        let model = shards[0].network.model();
        let lookahead_ns = model.send_cost_ns.saturating_add(model.recv_cost_ns);
        if lookahead_ns == 0 {
            return Err(
                "the network model has no send or receive cost, so no lookahead: \
                 run it on one thread"
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
        let owner: std::sync::Arc<[u8]> = (0..nodes)
            .map(|id| u8::try_from(id % count).expect("SHARDS_MAX fits in u8"))
            .collect();
        for (index, shard) in shards.iter_mut().enumerate() {
            shard.shard = Some(Box::new(Shard {
                index,
                owner: std::sync::Arc::clone(&owner),
                lookahead_ns,
                exports: (0..count).map(|_| Vec::new()).collect(),
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
        let meet = Rendezvous::new(twins.len() + 1);
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
            .map(|_| workers.done.recv().expect("shard workers report"))
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
        loop {
            // Post this round's exports, then take the others'.
            let shard = self.shard.as_mut().expect("a shard");
            for (to, exports) in shard.exports.iter_mut().enumerate() {
                if !exports.is_empty() {
                    meet.lock(to, me).append(exports);
                }
            }
            meet.wait(me);
            for from in 0..meet.parties {
                let mut mailbox = meet.lock(me, from);
                for export in mailbox.drain(..) {
                    let Export {
                        at,
                        to,
                        from,
                        payload,
                    } = export;
                    let payload = Rc::new(payload);
                    self.push(at, Action::Arrive { to, from, payload });
                }
            }
            let next = self.queue.peek_time().unwrap_or(u64::MAX);
            meet.next[me].store(next, Ordering::Relaxed);

            meet.wait(me);
            let next = meet
                .next
                .iter()
                .map(|next| next.load(Ordering::Relaxed))
                .min()
                .expect("at least one shard");
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
    fn merge_twins(&mut self) {
        let mut samples = core::mem::take(&mut self.shard.as_mut().expect("a shard").samples);
        for twin in &mut self.twins {
            let shard = twin.shard.as_mut().expect("a shard");
            samples.append(&mut shard.samples);
            self.stats.absorb(&core::mem::take(&mut twin.stats));
            self.network.absorb(&mut twin.network);
        }
        // Stable: a receiver's own releases keep their order.
        samples.sort_by_key(|sample| (sample.release.released_t, sample.release.receiver));
        for Sample {
            deadline_x,
            release,
        } in samples.drain(..)
        {
            self.check_and_measure(deadline_x, &release);
        }
        // Keep the buffer's capacity for the next run.
        self.shard.as_mut().expect("a shard").samples = samples;
    }

    /// The run's trace: the first shard's, folded with each twin's in order.
    pub(super) fn sharded_trace(&self) -> u64 {
        self.twins
            .iter()
            .fold(self.trace, |hash, twin| fold(hash, twin.trace))
    }
}
