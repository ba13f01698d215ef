//! The durable root's driver (issue 9): the file journal behind [`proto::Root`]'s journal
//! records, with group commit, plus recovery of a root from its journal on restart.
//!
//! [`JournalHook`] follows the driver obligations of `proto::journal`: after every turn it
//! appends the root's new records in order, syncs when [`GroupCommit::due`] says so and tells
//! the root what is durable (only then do the orders' responses and the market data leave),
//! answers the root's journal reads (old retransmissions), and writes a snapshot when every
//! produced record is durable and enough have accumulated.
//!
//! Two modes. By default the fsync runs on the loop's thread: a sync costs the loop its
//! duration (milliseconds on this machine's disk). With [`JournalHook::with_writer_thread`]
//! a dedicated writer thread owns the file: the loop hands it each record over a channel and
//! goes on; the writer appends everything queued, fsyncs once for the whole group (group
//! commit sized by whatever arrived during the previous fsync) and publishes how far the
//! journal is durable; the loop reads that at its next turn and only then releases the
//! responses (`Root::handle_durable`). Journal reads and snapshots go through the writer too.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use journal::{GroupCommit, Journal};
use proto::plan::Plan;
use proto::{Instant, NodeConfig, Root};

use crate::host::Hook;

// The root keeps its records within what the journal appends.
const _: () = assert!(proto::journal::RECORD_BYTES_MAX <= journal::RECORD_LEN_MAX);

/// Records between two snapshots at least.
pub const SNAPSHOT_EVERY: u64 = 10_000;

/// What the loop asks of the writer thread.
#[derive(Debug)]
enum Request {
    Append(Vec<u8>),
    Read(u64, core::ops::Range<u64>),
    Snapshot(u64, Vec<u8>),
}

/// The loop's side of the writer thread.
#[derive(Debug)]
struct Writer {
    requests: Option<mpsc::Sender<Request>>,
    replies: mpsc::Receiver<(u64, Vec<Vec<u8>>)>,
    durable: Arc<AtomicU64>,
    syncs: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
    /// Records handed to the thread.
    sent: u64,
    /// Durability last reported to the root.
    reported: u64,
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel makes the thread sync what it has and stop.
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads `range` of `journal` for a retransmission: the records, or none if the read failed
/// (the root answers without them and a gateway asks again later, so the run goes on). A
/// failed read of durable records is corruption or a failing disk, which the operator must
/// hear of: the first is printed, every one counted in `failures`.
fn read_for_retransmission(
    journal: &Journal,
    range: core::ops::Range<u64>,
    failures: &AtomicU64,
) -> Vec<Vec<u8>> {
    journal.read_vec(range.clone()).unwrap_or_else(|e| {
        if failures.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!(
                "journal {}: reading records {range:?} for a retransmission failed: {e} \
                 (answered without them; later failures are only counted)",
                journal.path().display()
            );
        }
        Vec::new()
    })
}

/// What the writer thread reports to the loop.
struct WriterShared {
    /// How far the journal is durable.
    durable: Arc<AtomicU64>,
    /// Syncs done.
    syncs: Arc<AtomicU64>,
    /// Reads for retransmissions that failed.
    read_errors: Arc<AtomicU64>,
    /// What stopped the thread.
    error: Arc<Mutex<Option<String>>>,
}

/// The writer thread: appends, one fsync per group, reads, snapshots.
fn write_loop(
    mut journal: Journal,
    snapshot_path: PathBuf,
    requests: mpsc::Receiver<Request>,
    replies: mpsc::Sender<(u64, Vec<Vec<u8>>)>,
    shared: WriterShared,
) {
    let WriterShared {
        durable,
        syncs,
        read_errors,
        error,
    } = shared;
    let path = journal.path().display().to_string();
    let mut reads = Vec::new();
    let mut snapshot = None;
    let fail = |e: String| {
        if let Ok(mut slot) = error.lock() {
            slot.get_or_insert(e);
        }
    };
    while let Ok(first) = requests.recv() {
        // Everything queued while the last fsync ran is one group.
        for request in core::iter::once(first).chain(requests.try_iter()) {
            match request {
                Request::Append(record) => {
                    journal.append(&record);
                }
                Request::Read(id, range) => reads.push((id, range)),
                Request::Snapshot(position, bytes) => snapshot = Some((position, bytes)),
            }
        }
        if journal.pending_records() > 0 {
            match journal.sync() {
                Ok(upto) => {
                    syncs.fetch_add(1, Ordering::Relaxed);
                    durable.store(upto, Ordering::Release);
                }
                Err(e) => return fail(format!("journal {path}: {e}")),
            }
        }
        for (id, range) in reads.drain(..) {
            let records = read_for_retransmission(&journal, range, &read_errors);
            if replies.send((id, records)).is_err() {
                return;
            }
        }
        if let Some((position, bytes)) = snapshot.take()
            && let Err(e) = journal::write_snapshot(&snapshot_path, position, &bytes)
        {
            return fail(format!("snapshot {}: {e}", snapshot_path.display()));
        }
    }
}

/// The journal of one root.
#[derive(Debug)]
pub struct JournalHook {
    journal: Journal,
    /// The writer thread, if the file moved to one.
    writer: Option<Writer>,
    snapshot_path: PathBuf,
    commit: GroupCommit,
    /// Local time the oldest unsynced record was appended.
    oldest_pending: Option<Instant>,
    last_snapshot: u64,
    /// A snapshot taken at the last turn: written at the next one, once the responses of the
    /// records it covers have left (a recovered root re-sends only those after it).
    snapshot_due: Option<(u64, Vec<u8>)>,
    /// How often the hook looks at the root when idle.
    poll_interval: Duration,
    /// Syncs done.
    pub syncs: u64,
    /// Journal reads for retransmissions that failed ([`JournalHook::read_errors`]).
    read_errors: Arc<AtomicU64>,
    /// Records appended.
    pub appended: u64,
}

impl JournalHook {
    /// Opens (or creates) the journal at `path` and rebuilds the root from it: the snapshot
    /// at `path` + `.snap` if there is one, then every record after it. What a crash tore
    /// (a tail, or a group a power loss tore) is truncated (and reported on stderr); damage to
    /// records acknowledged as durable is an error naming the offset. A new journal gives a
    /// new root.
    pub fn open(
        path: &Path,
        plan: Arc<Plan>,
        mut config: NodeConfig,
    ) -> Result<(Root, Self), String> {
        config.journal = true;
        let mut snapshot_path = path.as_os_str().to_owned();
        snapshot_path.push(".snap");
        let snapshot_path = PathBuf::from(snapshot_path);
        let snapshot = journal::read_snapshot(&snapshot_path)
            .map_err(|e| format!("snapshot {}: {e}", snapshot_path.display()))?;
        // A snapshot without its journal (the journal removed to start afresh, the snapshot
        // beside it forgotten) is refused before an empty journal is made.
        if let Some(s) = snapshot.as_ref().filter(|s| s.position > 0)
            && !path.exists()
        {
            return Err(format!(
                "snapshot {} covers the first {} records of journal {}, which does not exist: \
                 restore the journal, or remove the snapshot too to start a new root",
                snapshot_path.display(),
                s.position,
                path.display()
            ));
        }
        let (mut journal, recovery) =
            Journal::open(path).map_err(|e| format!("journal {}: {e}", path.display()))?;
        // A journal of another plan's root: its participants' responses went to other
        // gateway ids. One made before journals were tagged (0) takes this plan's tag.
        let digest = plan.participants_digest();
        match journal.tag() {
            tag if tag == digest => {}
            0 => journal
                .set_tag(digest)
                .map_err(|e| format!("journal {}: {e}", path.display()))?,
            tag => {
                return Err(format!(
                    "journal {} was written by the root of another plan (its participants \
                     and their gateways differ: digest {tag:#010x}, this config's \
                     {digest:#010x}): run this root with the config the journal was written \
                     under, or start a new root (remove {} and its snapshot {})",
                    path.display(),
                    path.display(),
                    snapshot_path.display()
                ));
            }
        }
        let from = snapshot.as_ref().map_or(0, |s| s.position);
        if from > journal.next_index() {
            return Err(format!(
                "snapshot {} covers the first {from} records, but journal {} holds {}: the \
                 snapshot is another journal's (remove it to start a new root) or the journal \
                 lost records",
                snapshot_path.display(),
                path.display(),
                journal.next_index()
            ));
        }
        let records = journal
            .read_vec(from..journal.next_index())
            .map_err(|e| format!("journal {}: {e}", path.display()))?;
        let root = if journal.next_index() == 0 && snapshot.is_none() {
            Root::new(plan, config)?
        } else {
            eprintln!(
                "journal {}: recovering from {} ({} records after it; {} kept, torn tail {})",
                path.display(),
                snapshot.as_ref().map_or_else(
                    || "the start".to_string(),
                    |s| format!("a snapshot at record {}", s.position)
                ),
                records.len(),
                recovery.records,
                recovery.truncated.map_or_else(
                    || "none".to_string(),
                    |t| format!("{} bytes cut at offset {}", t.bytes, t.offset)
                ),
            );
            Root::recover(
                plan,
                config,
                snapshot.as_ref().map(|s| s.payload.as_slice()),
                &records,
            )?
        };
        let hook = Self {
            last_snapshot: journal.next_index(),
            journal,
            writer: None,
            snapshot_path,
            commit: GroupCommit::default(),
            oldest_pending: None,
            snapshot_due: None,
            poll_interval: Duration::from_micros(50),
            syncs: 0,
            read_errors: Arc::default(),
            appended: 0,
        };
        Ok((root, hook))
    }

    /// The group-commit policy (default: 64 records or 200 µs).
    pub fn with_commit(mut self, commit: GroupCommit) -> Self {
        self.commit = commit;
        self
    }

    /// Moves the file to a dedicated writer thread (see the module docs): the loop no longer
    /// waits for fsyncs; the group-commit policy no longer applies (a group is whatever
    /// arrived during the previous fsync).
    pub fn with_writer_thread(mut self) -> Result<Self, String> {
        let path = self.journal.path().to_path_buf();
        // The same open file (a second open would find the lock this one holds).
        let journal = self
            .journal
            .try_clone()
            .map_err(|e| format!("journal {}: {e}", path.display()))?;
        let durable = Arc::new(AtomicU64::new(journal.durable_upto()));
        let syncs = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let (requests, requests_rx) = mpsc::channel();
        let (replies_tx, replies) = mpsc::channel();
        let sent = journal.next_index();
        let thread = {
            let shared = WriterShared {
                durable: durable.clone(),
                syncs: syncs.clone(),
                read_errors: self.read_errors.clone(),
                error: error.clone(),
            };
            let snapshot_path = self.snapshot_path.clone();
            std::thread::Builder::new()
                .name("journal-writer".to_string())
                .spawn(move || {
                    write_loop(journal, snapshot_path, requests_rx, replies_tx, shared);
                })
                .map_err(|e| format!("journal writer thread: {e}"))?
        };
        self.writer = Some(Writer {
            requests: Some(requests),
            replies,
            durable,
            syncs,
            error,
            thread: Some(thread),
            sent,
            reported: sent,
        });
        Ok(self)
    }

    /// Journal reads for retransmissions that failed (corrupt records or a failing disk;
    /// the first is printed): each left a gateway to ask again.
    pub fn read_errors(&self) -> u64 {
        self.read_errors.load(Ordering::Relaxed)
    }

    /// Records durable so far.
    pub fn durable(&self) -> u64 {
        match &self.writer {
            Some(w) => w.durable.load(Ordering::Acquire),
            None => self.journal.durable_upto(),
        }
    }

    /// The writer thread's side of [`JournalHook::drive`].
    fn drive_writer(&mut self, now: Instant, root: &mut Root) -> Result<(), String> {
        let w = self.writer.as_mut().expect("writer mode");
        if let Some(e) = w.error.lock().ok().and_then(|e| e.clone()) {
            return Err(e);
        }
        let gone = || "the journal writer thread stopped".to_string();
        let requests = w.requests.as_ref().ok_or_else(gone)?;
        if let Some((position, snapshot)) = self.snapshot_due.take() {
            requests
                .send(Request::Snapshot(position, snapshot))
                .map_err(|_| gone())?;
        }
        while let Some(record) = root.poll_journal() {
            let expected = proto::journal::record_index(record);
            if expected != Some(w.sent) {
                return Err(format!(
                    "journal index {} but the root numbered the record {expected:?}",
                    w.sent
                ));
            }
            requests
                .send(Request::Append(record.to_vec()))
                .map_err(|_| gone())?;
            w.sent += 1;
            self.appended += 1;
        }
        let durable = w.durable.load(Ordering::Acquire);
        if durable > w.reported {
            w.reported = durable;
            root.handle_durable(now, durable);
        }
        self.syncs = w.syncs.load(Ordering::Relaxed);
        while let Some(read) = root.poll_journal_read() {
            requests
                .send(Request::Read(read.id, read.records))
                .map_err(|_| gone())?;
        }
        while let Ok((id, records)) = w.replies.try_recv() {
            root.handle_journal_records(now, id, &records);
        }
        if let Some((produced, durable)) = root.journal_position()
            && produced == durable
            && produced >= self.last_snapshot + SNAPSHOT_EVERY
        {
            self.snapshot_due = Some((produced, root.snapshot()));
            self.last_snapshot = produced;
        }
        Ok(())
    }

    fn drive(&mut self, now: Instant, root: &mut Root) -> Result<(), String> {
        if self.writer.is_some() {
            return self.drive_writer(now, root);
        }
        let path = self.journal.path().display().to_string();
        let err = |e: std::io::Error| format!("journal {path}: {e}");
        if let Some((position, snapshot)) = self.snapshot_due.take() {
            journal::write_snapshot(&self.snapshot_path, position, &snapshot).map_err(err)?;
        }
        while let Some(record) = root.poll_journal() {
            let expected = proto::journal::record_index(record);
            let index = self.journal.append(record);
            if expected != Some(index) {
                return Err(format!(
                    "journal index {index} but the root numbered the record {expected:?}"
                ));
            }
            self.appended += 1;
            self.oldest_pending.get_or_insert(now);
        }
        let pending = self.journal.pending_records();
        let age = self
            .oldest_pending
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        if self.commit.due(pending, age) {
            let upto = self.journal.sync().map_err(err)?;
            self.syncs += 1;
            self.oldest_pending = None;
            root.handle_durable(now, upto);
        }
        while let Some(read) = root.poll_journal_read() {
            let records =
                read_for_retransmission(&self.journal, read.records.clone(), &self.read_errors);
            root.handle_journal_records(now, read.id, &records);
        }
        if let Some((produced, durable)) = root.journal_position()
            && produced == durable
            && produced >= self.last_snapshot + SNAPSHOT_EVERY
        {
            self.snapshot_due = Some((produced, root.snapshot()));
            self.last_snapshot = produced;
        }
        Ok(())
    }
}

impl Hook<Root> for JournalHook {
    fn on_turn(&mut self, now: Instant, root: &mut Root) -> Option<Instant> {
        if let Err(e) = self.drive(now, root) {
            // Losing durability must stop the exchange, not go on acknowledging orders.
            eprintln!("fatal: {e}");
            std::process::exit(3);
        }
        Some(now + self.poll_interval)
    }
}

/// Two hooks on one node, run in order at every turn either asks for.
#[derive(Debug)]
pub struct Chain<A, B>(pub A, pub B);

impl<N, A: Hook<N>, B: Hook<N>> Hook<N> for Chain<A, B> {
    fn on_turn(&mut self, now: Instant, node: &mut N) -> Option<Instant> {
        let a = self.0.on_turn(now, node);
        let b = self.1.on_turn(now, node);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicU64, Ordering};

    use journal::Journal;

    use super::read_for_retransmission;

    /// Goal: a snapshot left beside a removed (or another) journal is refused with a reason
    /// naming it, before an empty journal is made. It was refused with "records 76258..0
    /// asked, only 0 written", leaving a new empty journal behind.
    #[test]
    fn a_snapshot_without_its_journal_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("jasper-net-snap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("root.journal");
        let snap = dir.join("root.journal.snap");
        let _ = std::fs::remove_file(&path);
        journal::write_snapshot(&snap, 5, b"a root's state").unwrap();
        let plan =
            std::sync::Arc::new(proto::plan::Plan::new(&proto::plan::PlanConfig::new(2)).unwrap());
        let open = || super::JournalHook::open(&path, plan.clone(), proto::NodeConfig::default());
        let refused = |what: &str| match open() {
            Err(error) => error,
            Ok(_) => panic!("{what}: opened"),
        };
        let error = refused("no journal");
        assert!(error.contains("which does not exist"), "{error}");
        assert!(error.contains("root.journal.snap"), "{error}");
        assert!(!path.exists(), "no empty journal made");
        Journal::open(&path).unwrap();
        let error = refused("an empty journal");
        assert!(error.contains("covers the first 5 records"), "{error}");
        std::fs::remove_file(&snap).unwrap();
        assert!(open().is_ok(), "a new root once the snapshot is gone too");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Goal: a root does not recover from the journal of another plan's root (its
    /// participants' responses went to other gateway ids); the journal is left as it was.
    /// Method: a journal made by a root of 2 participants, opened again by one of 3, then by
    /// one of 2.
    #[test]
    fn a_journal_of_another_plan_is_refused() {
        let dir = std::env::temp_dir().join(format!("jasper-net-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("root.journal");
        let _ = std::fs::remove_file(&path);
        let plan = |n| {
            std::sync::Arc::new(proto::plan::Plan::new(&proto::plan::PlanConfig::new(n)).unwrap())
        };
        let open = |n| super::JournalHook::open(&path, plan(n), proto::NodeConfig::default());
        drop(open(2).expect("a new root"));
        let before = std::fs::read(&path).unwrap();
        let Err(error) = open(3) else {
            panic!("a root of 3 participants recovered a root of 2's journal");
        };
        assert!(
            error.contains("written by the root of another plan"),
            "{error}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before, "left as it was");
        assert!(open(2).is_ok(), "its own plan's root recovers");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Goal: a journal read that fails (a record corrupted on disk after it was made durable,
    /// or a range the journal does not hold) answers without records and is counted, not
    /// ignored. Method: three durable records read whole; the last one's final byte flipped on
    /// disk; read again; then a range past the end.
    #[test]
    fn a_failed_journal_read_is_counted_and_answered_without_records() {
        let dir = std::env::temp_dir().join(format!("jasper-net-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("root.journal");
        let _ = std::fs::remove_file(&path);
        let (mut journal, _) = Journal::open(&path).unwrap();
        for i in 0..3u8 {
            journal.append(&[i; 32]);
        }
        journal.sync().unwrap();
        let failures = AtomicU64::new(0);
        let records = read_for_retransmission(&journal, 0..3, &failures);
        assert_eq!(records, vec![vec![0; 32], vec![1; 32], vec![2; 32]]);
        assert_eq!(failures.load(Ordering::Relaxed), 0);

        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        file.write_at(&[0xFF], len - 1).unwrap();
        assert!(read_for_retransmission(&journal, 0..3, &failures).is_empty());
        assert_eq!(failures.load(Ordering::Relaxed), 1);
        assert_eq!(read_for_retransmission(&journal, 0..2, &failures).len(), 2);
        assert!(read_for_retransmission(&journal, 2..9, &failures).is_empty());
        assert_eq!(failures.load(Ordering::Relaxed), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
