//! Recovery properties of the journal file: round trips, every truncation point of the last
//! record, bit flips in the tail against bit flips in the middle, snapshot plus replay.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use journal::{BadRecord, Error, FILE_HEADER_LEN, Journal, RECORD_HEADER_LEN};
use proptest::prelude::*;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("jasper-journal-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_all(path: &PathBuf, records: &[Vec<u8>], sync_every: usize) -> Vec<u64> {
    let (mut j, recovery) = Journal::open(path).unwrap();
    assert!(recovery.created);
    let mut ends = Vec::new();
    for (i, r) in records.iter().enumerate() {
        assert_eq!(j.append(r), i as u64);
        if (i + 1) % sync_every.max(1) == 0 {
            assert_eq!(j.sync().unwrap(), i as u64 + 1);
        }
        ends.push(0);
    }
    assert_eq!(j.sync().unwrap(), records.len() as u64);
    assert_eq!(j.pending_records(), 0);
    // Byte offset where each record ends.
    let mut end = FILE_HEADER_LEN;
    for (i, r) in records.iter().enumerate() {
        end += (RECORD_HEADER_LEN + r.len()) as u64;
        ends[i] = end;
    }
    ends
}

fn read_all(path: &PathBuf) -> (Vec<Vec<u8>>, journal::Recovery) {
    let (j, recovery) = Journal::open(path).unwrap();
    let records = j.read_vec(0..j.next_index()).unwrap();
    (records, recovery)
}

fn records() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Goal: whatever is appended and synced comes back, in order, after a reopen.
    #[test]
    fn append_recover_round_trip(records in records(), sync_every in 1usize..8) {
        let dir = TempDir::new();
        let path = dir.file("j");
        write_all(&path, &records, sync_every);
        let (back, recovery) = read_all(&path);
        prop_assert_eq!(recovery.truncated, None);
        prop_assert_eq!(recovery.records, records.len() as u64);
        prop_assert_eq!(back, records.clone());
        // Appending after recovery continues the index sequence.
        let (mut j, _) = Journal::open(&path).unwrap();
        prop_assert_eq!(j.append(b"more"), records.len() as u64);
        j.sync().unwrap();
        drop(j);
        let (back, _) = read_all(&path);
        prop_assert_eq!(back.last().unwrap().as_slice(), b"more");
    }

    /// Goal: a single flipped bit in a record of the last group (synced every 3 records; no
    /// record was written after the group's fsync) is a crash's work: the file is truncated
    /// at that record, the rest of its group with it. In any earlier record, some later
    /// record was written after it was durable, and recovery stops with an error naming
    /// that record's offset.
    #[test]
    fn bit_flips_tail_vs_middle(records in records(), pick in any::<prop::sample::Index>(),
                                bit in 0u8..8, byte_pick in any::<prop::sample::Index>()) {
        let dir = TempDir::new();
        let path = dir.file("j");
        let ends = write_all(&path, &records, 3);
        let victim = pick.index(records.len());
        let start = if victim == 0 { FILE_HEADER_LEN } else { ends[victim - 1] };
        let byte = start + byte_pick.index((ends[victim] - start) as usize) as u64;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[byte as usize] ^= 1 << bit;
        std::fs::write(&path, &bytes).unwrap();
        let result = Journal::open(&path);
        // Record j was appended when 3 * (j / 3) records were durable.
        let last_group = (records.len() - 1) / 3 * 3;
        if victim >= last_group {
            let (j, recovery) = result.unwrap();
            let t = recovery.truncated.expect("the tail is cut");
            prop_assert_eq!(t.offset, start);
            prop_assert_eq!(t.index, victim as u64);
            prop_assert_eq!(j.next_index(), victim as u64);
            prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), start);
            prop_assert_eq!(j.read_vec(0..victim as u64).unwrap(), records[..victim].to_vec());
        } else {
            match result {
                Err(Error::Corrupt { offset, index, next_valid_offset, .. }) => {
                    prop_assert_eq!(offset, start);
                    prop_assert_eq!(index, victim as u64);
                    prop_assert!(next_valid_offset > offset);
                    let message = Journal::open(&path).unwrap_err().to_string();
                    prop_assert!(message.contains(&format!("byte offset {start}")), "{}", message);
                }
                other => prop_assert!(false, "middle corruption must fail: {:?}", other.map(|r| r.1)),
            }
            // The file is left untouched for an operator to inspect.
            prop_assert_eq!(std::fs::read(&path).unwrap(), bytes);
        }
    }

    /// Goal: a snapshot of the state after record k plus a replay of records k.. equals a
    /// replay of every record (the state here is a running hash of the payloads).
    #[test]
    fn snapshot_plus_replay_equals_full_replay(records in records(), k in any::<prop::sample::Index>()) {
        let dir = TempDir::new();
        let path = dir.file("j");
        let snap = dir.file("snap");
        write_all(&path, &records, 5);
        let k = k.index(records.len() + 1) as u64;
        let fold = |state: u64, payload: &[u8]| {
            payload.iter().fold(state.rotate_left(7) ^ 0x9e37, |s, &b| s.wrapping_mul(31) ^ u64::from(b))
        };
        let (j, _) = Journal::open(&path).unwrap();
        let mut state = 0u64;
        j.read(0..k, |_, p| state = fold(state, p)).unwrap();
        journal::write_snapshot(&snap, k, &state.to_le_bytes()).unwrap();
        let mut full = 0u64;
        j.read(0..j.next_index(), |_, p| full = fold(full, p)).unwrap();

        let s = journal::read_snapshot(&snap).unwrap().unwrap();
        prop_assert_eq!(s.position, k);
        let mut resumed = u64::from_le_bytes(s.payload.as_slice().try_into().unwrap());
        let mut replayed = 0;
        j.read(s.position..j.next_index(), |_, p| { resumed = fold(resumed, p); replayed += 1; }).unwrap();
        prop_assert_eq!(resumed, full);
        prop_assert_eq!(replayed, records.len() as u64 - k);
    }
}

/// Goal: a power loss mid-group can tear a record and keep a later one of the same group
/// (the disk writes a group's pages in any order until its fsync returns): recovery cuts
/// the group from the torn record on, as a torn tail, rather than refusing the journal. The
/// same damage in a group some later record was written after is refused. Method: 12
/// records synced every 4; record 9's payload zeroed (records 10 and 11 intact): cut at 9;
/// record 5's zeroed instead (records 8-11 were written after it was durable): `Corrupt`.
#[test]
fn a_record_torn_mid_group_is_cut_with_its_group() {
    let dir = TempDir::new();
    let path = dir.file("j");
    let records: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i + 1; 40]).collect();
    let ends = write_all(&path, &records, 4);
    let full = std::fs::read(&path).unwrap();
    let zero_payload = |victim: usize| {
        let mut bytes = full.clone();
        let end = ends[victim] as usize;
        bytes[end - 40..end].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        bytes
    };
    zero_payload(9);
    let (back, recovery) = read_all(&path);
    let t = recovery.truncated.expect("cut");
    assert_eq!(
        (t.index, t.offset, t.reason),
        (9, ends[8], BadRecord::Checksum)
    );
    assert_eq!(t.bytes, ends[11] - ends[8], "records 9-11 go");
    assert_eq!(back, records[..9].to_vec());
    std::fs::write(&path, &full).unwrap();
    let bytes = zero_payload(5);
    match Journal::open(&path) {
        Err(Error::Corrupt {
            index,
            next_valid_offset,
            ..
        }) => {
            assert_eq!(index, 5);
            assert_eq!(
                next_valid_offset, ends[7],
                "record 8, the first written after"
            );
        }
        other => panic!("{:?}", other.map(|r| r.1)),
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "left as it was");
}

/// Goal: cutting the file at every byte inside the last record (a torn write) keeps exactly
/// the earlier records and reports the cut; cutting at a record boundary loses nothing.
#[test]
fn every_truncation_point_of_the_last_record() {
    let dir = TempDir::new();
    let path = dir.file("j");
    let records: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10 + 7 * i as usize]).collect();
    let ends = write_all(&path, &records, 2);
    let full = std::fs::read(&path).unwrap();
    let last_start = ends[ends.len() - 2];
    for cut in last_start..=*ends.last().unwrap() {
        std::fs::write(&path, &full[..cut as usize]).unwrap();
        let (back, recovery) = read_all(&path);
        if cut == last_start || cut == *ends.last().unwrap() {
            assert_eq!(recovery.truncated, None, "cut {cut} is a record boundary");
            let kept = if cut == last_start { 4 } else { 5 };
            assert_eq!(back, records[..kept].to_vec());
            continue;
        }
        let t = recovery.truncated.expect("a torn tail is reported");
        assert_eq!(t.offset, last_start, "cut {cut}");
        assert_eq!(t.bytes, cut - last_start);
        assert_eq!(t.index, 4);
        assert_eq!(t.reason, BadRecord::Torn);
        assert_eq!(back, records[..4].to_vec(), "cut {cut}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), last_start);
    }
}

/// Goal: a file that is not a journal is refused, a half-written header is re-created, a
/// corrupt snapshot is an error and a missing one is `None`.
#[test]
fn headers_and_snapshots() {
    let dir = TempDir::new();
    let path = dir.file("j");
    std::fs::write(&path, b"not a journal file at all").unwrap();
    assert!(matches!(Journal::open(&path), Err(Error::BadHeader { .. })));
    std::fs::write(&path, &journal::MAGIC[..5]).unwrap();
    let (j, recovery) = Journal::open(&path).unwrap();
    assert!(recovery.created);
    assert_eq!(j.next_index(), 0);
    assert!(matches!(
        j.read_vec(0..1),
        Err(Error::OutOfRange { written: 0, .. })
    ));

    let snap = dir.file("snap");
    assert_eq!(journal::read_snapshot(&snap).unwrap(), None);
    journal::write_snapshot(&snap, 9, b"state").unwrap();
    journal::write_snapshot(&snap, 12, b"newer state").unwrap();
    let s = journal::read_snapshot(&snap).unwrap().unwrap();
    assert_eq!(
        (s.position, s.payload.as_slice()),
        (12, &b"newer state"[..])
    );
    // Each way a snapshot can be bad is said as what it is (all read "not a journal file of
    // version 1 (bad header)" before).
    let good = std::fs::read(&snap).unwrap();
    let problem = |bytes: &[u8]| {
        std::fs::write(&snap, bytes).unwrap();
        match journal::read_snapshot(&snap) {
            Err(Error::BadSnapshot { problem, .. }) => problem,
            other => panic!("{other:?}"),
        }
    };
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0x10;
    assert_eq!(problem(&flipped), journal::SnapshotProblem::Checksum);
    let mut newer = good.clone();
    newer[8] = 2;
    assert!(matches!(
        problem(&newer),
        journal::SnapshotProblem::Version { found: 2, .. }
    ));
    assert!(matches!(
        problem(&good[..good.len() - 1]),
        journal::SnapshotProblem::Length { .. }
    ));
    assert_eq!(problem(b"JSPRSNA"), journal::SnapshotProblem::NotASnapshot);
}

/// Goal: a journal has one writer. A second open while the first is open (a second root
/// started on a live journal) is refused before it reads or cuts anything, even with the
/// first's tail unsynced, which it would otherwise cut as torn; a clone of the first (a
/// writer thread's) shares its lock and appends on; once every handle is dropped, the
/// file opens again with every record.
#[test]
fn a_journal_has_one_writer() {
    let dir = TempDir::new();
    let path = dir.file("j");
    let (mut first, _) = Journal::open(&path).unwrap();
    first.append(b"durable");
    first.sync().unwrap();
    first.append(b"written, not synced");
    first.write().unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    match Journal::open(&path) {
        Err(e @ Error::Locked { .. }) => {
            let message = e.to_string();
            assert!(message.contains("in use"), "{message}");
        }
        other => panic!("a second writer must be refused: {:?}", other.map(|r| r.1)),
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "nothing cut");
    let mut clone = first.try_clone().unwrap();
    assert_eq!(clone.next_index(), 2);
    drop(first);
    assert!(matches!(Journal::open(&path), Err(Error::Locked { .. })));
    clone.append(b"from the clone");
    clone.sync().unwrap();
    drop(clone);
    let (j, recovery) = Journal::open(&path).unwrap();
    assert_eq!(recovery.truncated, None);
    assert_eq!(
        j.read_vec(0..3).unwrap(),
        [&b"durable"[..], b"written, not synced", b"from the clone"]
    );
}

/// Goal: a journal's tag is 0 when new, and once set it stays, across a reopen and a torn
/// tail's truncation.
#[test]
fn a_tag_set_stays() {
    let dir = TempDir::new();
    let path = dir.file("j");
    let (mut j, _) = Journal::open(&path).unwrap();
    assert_eq!(j.tag(), 0);
    j.set_tag(0xC0FF_EE01).unwrap();
    j.append(b"one");
    j.sync().unwrap();
    drop(j);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let (j, recovery) = Journal::open(&path).unwrap();
    assert!(recovery.truncated.is_some(), "the torn record cut");
    assert_eq!(j.tag(), 0xC0FF_EE01);
}
