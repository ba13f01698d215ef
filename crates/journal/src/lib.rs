//! An append-only journal of checksummed records, with group commit, crash recovery and
//! atomic snapshots: the durable store under the Jasper root (issue 9).
//!
//! This crate does file I/O and nothing else: it knows nothing about orders or packets. The
//! root's state machine (`proto::root`) produces opaque records and consumes durability
//! notices; a runtime (`net`) owns a [`Journal`], appends the records, decides when to
//! [`Journal::sync`] (group commit, see [`GroupCommit`]) and reports back how far the journal
//! is durable. It reads no clock: the caller passes ages in.
//!
//! # File format (little-endian)
//!
//! ```text
//! file header, 16 bytes:  magic "JSPRJRNL" (8) | version u32 = 2 | tag u32
//! record, 24 + len bytes: len u32 | crc u32 | index u64 | synced u64 | payload (len bytes)
//! ```
//!
//! `tag` is its owner's ([`Journal::set_tag`]; 0: none): the root's digest of the plan it
//! journals for, so that a root of another plan does not recover from it.
//!
//! `crc` is CRC-32 (IEEE, `crc32fast`) over `len | index | synced | payload`, so a flipped
//! bit in a header field is caught like one in the payload. `index` is the record's position
//! in the journal (0, 1, 2, ...): it lets recovery tell a stale or misplaced record from the
//! expected one and lets a resynchronising scan recognise a later valid record. `synced` is
//! how many records were durable (fsynced) when this one was appended: records
//! `0..synced` were on the disk before this one was written.
//!
//! Version 1 files (no `synced`: 16-byte record headers) are still read, and appended to in
//! their own format.
//!
//! # Recovery
//!
//! [`Journal::open`] scans every record. The first record that is short, too long, fails its
//! checksum or carries the wrong index is *bad*. Then the rest of the file is searched, byte by
//! byte, for valid records with later indices, and what they say decides:
//!
//! - none, or (version 2) none written after the bad record was durable (each says
//!   `synced` ≤ its index): the bad record was never acknowledged as durable, so it is a
//!   crash's work. A crash mid-write tears the tail, and a power loss mid-group can tear a
//!   record and keep a later one of the same group (the disk writes a group's pages in any
//!   order until its fsync returns). The file is truncated at the bad record's offset (the
//!   later records of its group go too: none of them was acknowledged either), the
//!   truncation is logged to stderr and returned in [`Recovery::truncated`].
//! - one written after the bad record was durable (version 1: any valid later record): the
//!   corruption is in data the disk had acknowledged, which a crash cannot cause. Recovery
//!   stops with [`Error::Corrupt`] naming the byte offset; it never returns a silent partial
//!   journal.
//!
//! A record damaged after its own group's fsync, with no record written since, looks like
//! a crash's work and is cut, as a damaged last record always was: telling the two apart
//! would take a write after every fsync.
//!
//! # One writer
//!
//! [`Journal::open`] takes an exclusive lock on the file (`flock`, through
//! [`File::try_lock`]) before it reads or cuts anything, and holds it while the journal (or a
//! [`Journal::try_clone`] of it) is open; the lock dies with the process, so a killed root's
//! successor opens the file at once. A second open meanwhile (a second root started on a live
//! journal, by mistake) fails with [`Error::Locked`]: it would otherwise take the live root's
//! unsynced tail for a crash's torn one and cut it. A file system without locks leaves the
//! journal unlocked, as before.
//!
//! # Snapshots
//!
//! [`write_snapshot`] stores an opaque payload plus the journal position it covers in a
//! separate file, atomically (write a temporary file, fsync it, rename it over the old one,
//! fsync the directory). Recovery loads the snapshot and replays only records from its
//! position on ([`Journal::read`]). The journal itself is kept whole: the root's rewinder
//! reads old records back by index to regenerate packets. Segmenting and deleting old
//! records is not done yet.

#![warn(missing_docs)]

use core::ops::Range;
use core::time::Duration;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod snapshot;

pub use snapshot::{SNAPSHOT_FILE_VERSION, Snapshot, read_snapshot, write_snapshot};

/// First bytes of a journal file.
pub const MAGIC: [u8; 8] = *b"JSPRJRNL";
/// The format version this crate writes (it reads version 1 too).
pub const VERSION: u32 = 2;
/// The first version, still read (and appended to in its format).
pub const VERSION_1: u32 = 1;
/// Bytes of the file header.
pub const FILE_HEADER_LEN: u64 = 16;
/// Bytes of a record header (length, checksum, index, synced).
pub const RECORD_HEADER_LEN: usize = 24;
/// Bytes of a record header in a version 1 file (no `synced`).
pub const RECORD_HEADER_LEN_V1: usize = 16;
/// Largest payload of one record; a longer length field is corruption.
pub const RECORD_LEN_MAX: usize = 1 << 24;

const _: () = assert!(RECORD_LEN_MAX <= u32::MAX as usize);
const _: () = assert!(FILE_HEADER_LEN as usize == MAGIC.len() + 8);

/// What can go wrong opening or reading a journal.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system failed.
    #[error("journal I/O: {0}")]
    Io(#[from] io::Error),
    /// Another open journal holds the file: a root still running on it (a second writer
    /// would cut the tail the first is still writing, taking it for a crash's).
    #[error(
        "{path} is in use: another process (a root still running?) has it open; a journal \
         has one writer: stop that one first"
    )]
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The file does not start with a journal header of a version this crate reads.
    #[error("{path}: not a journal file of version {VERSION_1} or {VERSION} (bad header)")]
    BadHeader {
        /// The file.
        path: PathBuf,
    },
    /// A snapshot file that is not one this crate can load (a snapshot is replaced
    /// atomically, so this is corruption or another program's file, not a crash).
    #[error("{path}: {problem}")]
    BadSnapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: SnapshotProblem,
    },
    /// A bad record is followed by a valid one written after it was durable: corruption a
    /// crash cannot cause.
    #[error(
        "{path}: corrupt record {index} at byte offset {offset} ({reason}), followed by a \
         valid record written after it was durable at byte offset {next_valid_offset}; \
         refusing a partial recovery"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the bad record.
        offset: u64,
        /// The index the bad record should have had.
        index: u64,
        /// What was wrong with it.
        reason: BadRecord,
        /// Byte offset of the first valid record found after it that was written after it
        /// was durable (version 1: the first valid record after it).
        next_valid_offset: u64,
    },
    /// A record read back by index did not check out (the file changed under the journal).
    #[error("{path}: record {index} at byte offset {offset} fails its check on read")]
    ReadCorrupt {
        /// The file.
        path: PathBuf,
        /// Its index.
        index: u64,
        /// Its byte offset.
        offset: u64,
    },
    /// A read asked for records not yet written.
    #[error("records {start}..{end} asked, only {written} written")]
    OutOfRange {
        /// First index asked.
        start: u64,
        /// End of the range asked.
        end: u64,
        /// Records written so far.
        written: u64,
    },
}

/// Why a snapshot file cannot be loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotProblem {
    /// It does not start with the snapshot magic, or is shorter than a header.
    #[error("not a snapshot file (bad magic or header)")]
    NotASnapshot,
    /// Written by a version of the format this crate does not read.
    #[error("a snapshot of format version {found}; this build reads version {expected}")]
    Version {
        /// The file's version.
        found: u64,
        /// The one this build reads.
        expected: u32,
    },
    /// Its length field disagrees with the file's size (truncated or extended).
    #[error("its header says {expected} payload bytes, the file has {found}")]
    Length {
        /// Payload bytes the header gives.
        expected: u64,
        /// Payload bytes the file holds.
        found: u64,
    },
    /// Its checksum does not match its contents.
    #[error("its checksum does not match its contents")]
    Checksum,
}

/// Why a record is bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadRecord {
    /// The file ends inside the record header or its payload.
    Torn,
    /// The length field exceeds [`RECORD_LEN_MAX`].
    Length,
    /// The checksum does not match.
    Checksum,
    /// The checksum matches but the index is not the expected one.
    Index,
}

impl core::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Torn => "torn: the file ends inside it",
            Self::Length => "length field too large",
            Self::Checksum => "checksum mismatch",
            Self::Index => "unexpected record index",
        })
    }
}

/// What recovery cut off: a torn tail, or the rest of a group a power loss tore (a bad
/// record and the later ones, none of them ever acknowledged as durable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Byte offset the file was truncated at (the bad record's start).
    pub offset: u64,
    /// Bytes removed (later records of the bad one's group included).
    pub bytes: u64,
    /// The index the bad record would have had (= records kept).
    pub index: u64,
    /// What was wrong with it.
    pub reason: BadRecord,
}

/// What [`Journal::open`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Valid records kept.
    pub records: u64,
    /// What was cut off, if anything.
    pub truncated: Option<Truncation>,
    /// Whether the file was new (missing or shorter than its header).
    pub created: bool,
}

/// When to sync: after `records_max` pending records or once the oldest pending record is
/// `delay_max` old, whichever comes first. The caller measures the age (this crate reads no
/// clock) and calls [`Journal::sync`] when [`GroupCommit::due`] says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommit {
    /// Records per fsync at most.
    pub records_max: u64,
    /// Longest a record waits for its fsync.
    pub delay_max: Duration,
}

impl Default for GroupCommit {
    fn default() -> Self {
        Self {
            records_max: 64,
            delay_max: Duration::from_micros(200),
        }
    }
}

impl GroupCommit {
    /// Whether `pending` records, the oldest `oldest_age` old, should be synced now.
    pub fn due(&self, pending: u64, oldest_age: Duration) -> bool {
        pending > 0 && (pending >= self.records_max || oldest_age >= self.delay_max)
    }
}

/// An open journal file. See the crate docs for the format and the recovery rules.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    /// The file's format version ([`VERSION`] for a new file).
    version: u32,
    /// The header's tag ([`Journal::tag`]).
    tag: u32,
    /// Byte offset of every record appended, by index. 8 bytes per record: the index the
    /// rewinder reads by.
    offsets: Vec<u64>,
    /// Encoded records appended but not yet written to the file.
    pending: Vec<u8>,
    /// File length written so far (header plus written records).
    written_len: u64,
    /// Records written to the file (not necessarily durable).
    written: u64,
    /// Records known durable.
    durable: u64,
}

impl Journal {
    /// Opens the journal at `path`, creating it if missing, and recovers it: keeps every valid
    /// record, truncates what a crash tore (a tail, or a group a power loss tore), refuses
    /// damage to records acknowledged as durable (see the crate docs).
    pub fn open(path: impl AsRef<Path>) -> Result<(Self, Recovery), Error> {
        let path = path.as_ref().to_path_buf();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        // Before anything is read or cut: the lock lasts as long as the file is open here
        // (and in the handles [`Journal::try_clone`] makes), and dies with the process.
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(Error::Locked { path }),
            // A file system without locks (some network ones): the journal works as before.
            Err(TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {}
            Err(TryLockError::Error(e)) => return Err(e.into()),
        }
        let file_len = file.metadata()?.len();
        if file_len < FILE_HEADER_LEN {
            // Missing, or a crash while creating it: nothing can have been acknowledged.
            let header = |version: u32| {
                let mut header = [0u8; FILE_HEADER_LEN as usize];
                header[..8].copy_from_slice(&MAGIC);
                header[8..12].copy_from_slice(&version.to_le_bytes());
                header
            };
            let prefix = file_read_prefix(&mut file, file_len)?;
            let cut = |version| header(version)[..file_len as usize] == prefix[..];
            if !cut(VERSION) && !cut(VERSION_1) {
                return Err(Error::BadHeader { path });
            }
            file.set_len(0)?;
            file.write_all_at(&header(VERSION), 0)?;
            file.sync_all()?;
            sync_parent(&path)?;
            let journal = Self::with_offsets(file, path, (VERSION, 0), Vec::new(), FILE_HEADER_LEN);
            let recovery = Recovery {
                records: 0,
                truncated: None,
                created: true,
            };
            return Ok((journal, recovery));
        }
        let (version, offsets, end, bad) = scan(&mut file, &path, file_len)?;
        let mut truncated = None;
        if let Some((offset, reason)) = bad {
            let index = offsets.len() as u64;
            let evidence = written_after_durable(&mut file, offset, file_len, index, version)?;
            if let Some(next_valid_offset) = evidence {
                return Err(Error::Corrupt {
                    path,
                    offset,
                    index,
                    reason,
                    next_valid_offset,
                });
            }
            let truncation = Truncation {
                offset,
                bytes: file_len - offset,
                index,
                reason,
            };
            eprintln!(
                "journal {}: truncated {} bytes never acknowledged as durable (a crash's torn \
                 tail or group), from byte offset {} (record {}, {}); {} valid records kept",
                path.display(),
                truncation.bytes,
                offset,
                index,
                reason,
                index
            );
            file.set_len(offset)?;
            file.sync_all()?;
            truncated = Some(truncation);
        }
        debug_assert!(truncated.is_some() || end == file_len);
        if truncated.is_none() {
            // The records read may be in the page cache only: written by a process that died
            // before its fsync returned. They are durable from here on (their responses go
            // out again at once), so they must be on the disk first.
            file.sync_all()?;
        }
        let records = offsets.len() as u64;
        let mut tag = [0u8; 4];
        file.read_exact_at(&mut tag, 12)?;
        let tag = u32::from_le_bytes(tag);
        let journal = Self::with_offsets(file, path, (version, tag), offsets, end);
        let recovery = Recovery {
            records,
            truncated,
            created: false,
        };
        Ok((journal, recovery))
    }

    /// The header's tag: its owner's mark (0: none set), e.g. a digest of what the records
    /// are about, checked before they are trusted.
    pub fn tag(&self) -> u32 {
        self.tag
    }

    /// Sets the header's tag, durably (written and synced before this returns).
    pub fn set_tag(&mut self, tag: u32) -> io::Result<()> {
        self.file.write_all_at(&tag.to_le_bytes(), 12)?;
        self.file.sync_all()?;
        self.tag = tag;
        Ok(())
    }

    /// A second handle on this journal, in the state this one is in (no record pending): for
    /// a writer thread. It shares the file's lock, which a second [`Journal::open`] would
    /// find taken.
    pub fn try_clone(&self) -> io::Result<Self> {
        assert!(
            self.pending.is_empty(),
            "a journal cloned with records pending"
        );
        Ok(Self {
            file: self.file.try_clone()?,
            path: self.path.clone(),
            version: self.version,
            tag: self.tag,
            offsets: self.offsets.clone(),
            pending: Vec::new(),
            written_len: self.written_len,
            written: self.written,
            durable: self.durable,
        })
    }

    fn with_offsets(
        file: File,
        path: PathBuf,
        (version, tag): (u32, u32),
        offsets: Vec<u64>,
        end: u64,
    ) -> Self {
        let records = offsets.len() as u64;
        Self {
            file,
            path,
            version,
            tag,
            offsets,
            pending: Vec::new(),
            written_len: end,
            written: records,
            durable: records,
        }
    }

    /// Appends a record (buffered: nothing reaches the file before [`Journal::write`] or
    /// [`Journal::sync`]). Returns its index.
    ///
    /// # Panics
    /// If `payload` is longer than [`RECORD_LEN_MAX`] (a caller bug: records are small).
    pub fn append(&mut self, payload: &[u8]) -> u64 {
        assert!(payload.len() <= RECORD_LEN_MAX, "journal record too long");
        let index = self.offsets.len() as u64;
        let offset = self.written_len + self.pending.len() as u64;
        self.offsets.push(offset);
        // Records `0..durable` are on the disk before this one is written: `write` and `sync`
        // write the pending records before they sync.
        encode(
            self.version,
            index,
            self.durable,
            payload,
            &mut self.pending,
        );
        index
    }

    /// The file's format version ([`VERSION`] unless it was written by a version 1 build).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Writes every appended record to the file without waiting for the disk. Returns the
    /// records written.
    pub fn write(&mut self) -> io::Result<u64> {
        if !self.pending.is_empty() {
            self.file.write_all_at(&self.pending, self.written_len)?;
            self.written_len += self.pending.len() as u64;
            self.pending.clear();
            self.written = self.offsets.len() as u64;
        }
        debug_assert_eq!(self.written, self.offsets.len() as u64);
        Ok(self.written)
    }

    /// Writes every appended record and waits until they are on disk (one `fdatasync` for the
    /// whole group). Returns how many records are durable: indices `0..durable_upto`.
    pub fn sync(&mut self) -> io::Result<u64> {
        self.write()?;
        if self.durable < self.written {
            self.file.sync_data()?;
            self.durable = self.written;
        }
        Ok(self.durable)
    }

    /// Records appended (the next index).
    pub fn next_index(&self) -> u64 {
        self.offsets.len() as u64
    }

    /// Records known durable: `0..durable_upto`.
    pub fn durable_upto(&self) -> u64 {
        self.durable
    }

    /// Records appended but not yet durable.
    pub fn pending_records(&self) -> u64 {
        self.next_index() - self.durable
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `f(index, payload)` for every record in `range`, in order, from the file (each
    /// record's checksum is checked again). Records must have been written.
    pub fn read(&self, range: Range<u64>, mut f: impl FnMut(u64, &[u8])) -> Result<(), Error> {
        if range.start > range.end || range.end > self.written {
            return Err(Error::OutOfRange {
                start: range.start,
                end: range.end,
                written: self.written,
            });
        }
        let mut buf = Vec::new();
        for index in range {
            let offset = self.offsets[index as usize];
            let end = self
                .offsets
                .get(index as usize + 1)
                .copied()
                .unwrap_or(self.written_len);
            buf.resize((end - offset) as usize, 0);
            self.file.read_exact_at(&mut buf, offset)?;
            let header_len = header_len(self.version);
            let payload = match decode_record(&buf, index, self.version) {
                Ok(len) if header_len + len == buf.len() => &buf[header_len..],
                _ => {
                    return Err(Error::ReadCorrupt {
                        path: self.path.clone(),
                        index,
                        offset,
                    });
                }
            };
            f(index, payload);
        }
        Ok(())
    }

    /// The payloads of the records in `range` (see [`Journal::read`]).
    pub fn read_vec(&self, range: Range<u64>) -> Result<Vec<Vec<u8>>, Error> {
        let mut out = Vec::with_capacity((range.end.saturating_sub(range.start)) as usize);
        self.read(range, |_, payload| out.push(payload.to_vec()))?;
        Ok(out)
    }
}

/// Appends the encoded record to `out`, in the current format: `synced` records were
/// durable when it was appended.
pub fn encode_record(index: u64, synced: u64, payload: &[u8], out: &mut Vec<u8>) {
    encode(VERSION, index, synced, payload, out);
}

/// The bytes of a record header in a file of `version`.
fn header_len(version: u32) -> usize {
    if version == VERSION_1 {
        RECORD_HEADER_LEN_V1
    } else {
        RECORD_HEADER_LEN
    }
}

/// Appends the record encoded in `version`'s format (version 1 has no `synced`).
fn encode(version: u32, index: u64, synced: u64, payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u32).to_le_bytes();
    let index = index.to_le_bytes();
    let synced = synced.to_le_bytes();
    let synced: &[u8] = if version == VERSION_1 { &[] } else { &synced };
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len);
    crc.update(&index);
    crc.update(synced);
    crc.update(payload);
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&index);
    out.extend_from_slice(synced);
    out.extend_from_slice(payload);
}

/// A record that checked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decoded {
    /// Payload bytes.
    len: usize,
    index: u64,
    /// Records durable when it was appended (0 in version 1).
    synced: u64,
}

/// Checks the record at the start of `bytes`, expected to have `index`. Returns its payload
/// length.
fn decode_record(bytes: &[u8], index: u64, version: u32) -> Result<usize, BadRecord> {
    decode_any(bytes, version).and_then(|record| {
        if record.index == index {
            Ok(record.len)
        } else {
            Err(BadRecord::Index)
        }
    })
}

/// Checks the record at the start of `bytes`, whatever its index.
fn decode_any(bytes: &[u8], version: u32) -> Result<Decoded, BadRecord> {
    let header_len = header_len(version);
    let Some(header) = bytes.get(..header_len) else {
        return Err(BadRecord::Torn);
    };
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let index = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    let synced = match header.get(16..24) {
        Some(synced) => u64::from_le_bytes(synced.try_into().expect("8 bytes")),
        None => 0,
    };
    if len > RECORD_LEN_MAX {
        return Err(BadRecord::Length);
    }
    let Some(payload) = bytes.get(header_len..header_len + len) else {
        return Err(BadRecord::Torn);
    };
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[0..4]);
    hasher.update(&header[8..header_len]);
    hasher.update(payload);
    if hasher.finalize() != crc {
        return Err(BadRecord::Checksum);
    }
    Ok(Decoded { len, index, synced })
}

fn file_read_prefix(file: &mut File, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

/// What [`scan`] found: the file's version, the offsets of the valid prefix, where it ends,
/// and the first bad record (offset, reason), if any.
type Scanned = (u32, Vec<u64>, u64, Option<(u64, BadRecord)>);

/// Scans the records from the header on.
fn scan(file: &mut File, path: &Path, file_len: u64) -> Result<Scanned, Error> {
    file.seek(SeekFrom::Start(0))?;
    let mut reader = BufReader::with_capacity(1 << 16, &mut *file);
    let mut header = [0u8; FILE_HEADER_LEN as usize];
    reader.read_exact(&mut header)?;
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    if header[..8] != MAGIC || ![VERSION_1, VERSION].contains(&version) {
        return Err(Error::BadHeader {
            path: path.to_path_buf(),
        });
    }
    let header_len = header_len(version);
    let mut offsets = Vec::new();
    let mut offset = FILE_HEADER_LEN;
    let mut record = Vec::new();
    while offset < file_len {
        let left = file_len - offset;
        if left < header_len as u64 {
            return Ok((version, offsets, offset, Some((offset, BadRecord::Torn))));
        }
        record.resize(header_len, 0);
        reader.read_exact(&mut record)?;
        let len = u32::from_le_bytes(record[0..4].try_into().expect("4 bytes")) as u64;
        if len > RECORD_LEN_MAX as u64 {
            return Ok((version, offsets, offset, Some((offset, BadRecord::Length))));
        }
        if header_len as u64 + len > left {
            return Ok((version, offsets, offset, Some((offset, BadRecord::Torn))));
        }
        record.resize(header_len + len as usize, 0);
        reader.read_exact(&mut record[header_len..])?;
        if let Err(reason) = decode_record(&record, offsets.len() as u64, version) {
            return Ok((version, offsets, offset, Some((offset, reason))));
        }
        offsets.push(offset);
        offset += record.len() as u64;
    }
    Ok((version, offsets, offset, None))
}

/// After a bad record at `offset` that should have had `index`: the offset of the first
/// valid later record that was written after the bad one was durable (its `synced` is past
/// `index`; in version 1, which does not say, any valid later record), or `None`.
fn written_after_durable(
    file: &mut File,
    offset: u64,
    file_len: u64,
    index: u64,
    version: u32,
) -> io::Result<Option<u64>> {
    let header_len = header_len(version) as u64;
    let mut found = resync(file, offset, file_len, index, version, true)?;
    while let Some((at, record)) = found {
        if version == VERSION_1 || record.synced > index {
            return Ok(Some(at));
        }
        // The records of a group follow one another: read the next in place, and search
        // only if it does not check out.
        let next = at + header_len + record.len as u64;
        found = match read_record_at(file, next, file_len, version)? {
            Some(following) if following.index > record.index => Some((next, following)),
            _ if next >= file_len => None,
            _ => resync(file, next, file_len, record.index + 1, version, false)?,
        };
    }
    Ok(None)
}

/// The valid record at `at`, if one is.
fn read_record_at(
    file: &mut File,
    at: u64,
    file_len: u64,
    version: u32,
) -> io::Result<Option<Decoded>> {
    let header_len = header_len(version) as u64;
    if file_len.saturating_sub(at) < header_len {
        return Ok(None);
    }
    let mut buf = vec![0u8; header_len as usize];
    file.read_exact_at(&mut buf, at)?;
    let len = u64::from(u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")));
    if len > RECORD_LEN_MAX as u64 || header_len + len > file_len - at {
        return Ok(None);
    }
    buf.resize((header_len + len) as usize, 0);
    file.read_exact_at(&mut buf[header_len as usize..], at + header_len)?;
    Ok(decode_any(&buf, version).ok())
}

/// Bytes [`resync`] reads at once: two of the longest records, so that a record starting in
/// the window's first half is whole in it (the whole rest of the file was read before: a bad
/// record early in a journal of gigabytes was an allocation of gigabytes).
const RESYNC_WINDOW: u64 = 2 * (RECORD_HEADER_LEN + RECORD_LEN_MAX) as u64;

/// A valid record found by a search: its offset, and what it holds.
type Found = Option<(u64, Decoded)>;

/// Searches the bytes from `offset` for a valid record with an index at or after `index`
/// (which is at least that of any record at `offset`: the index a record there should have);
/// `after`: not at `offset` itself (a bad record starts there).
fn resync(
    file: &mut File,
    offset: u64,
    file_len: u64,
    index: u64,
    version: u32,
    after: bool,
) -> io::Result<Found> {
    resync_in_windows(file, offset, file_len, index, RESYNC_WINDOW, version, after)
}

/// [`resync`], reading `window` bytes at a time (at least twice the longest record in the
/// file) and moving on by half of it; `skip_first`: not at `offset` itself.
fn resync_in_windows(
    file: &mut File,
    offset: u64,
    file_len: u64,
    index: u64,
    window: u64,
    version: u32,
    skip_first: bool,
) -> io::Result<Found> {
    let header_len = header_len(version);
    let mut base = offset;
    let mut buf = Vec::new();
    loop {
        let len = window.min(file_len - base);
        buf.resize(len as usize, 0);
        file.read_exact_at(&mut buf, base)?;
        let last = base + len == file_len;
        let starts = if last { len } else { window / 2 };
        let first = usize::from(skip_first && base == offset);
        for start in first..starts as usize {
            if buf.len() - start < header_len {
                return Ok(None);
            }
            let at = base + start as u64;
            if !index_plausible(&buf[start..], index, at - offset, version) {
                continue;
            }
            if let Ok(record) = decode_any(&buf[start..], version)
                && record.index >= index
            {
                return Ok(Some((base + start as u64, record)));
            }
        }
        if last {
            return Ok(None);
        }
        base += starts;
    }
}

/// Whether the header at the start of `bytes`, `distance` bytes past where a record with
/// `index` would start, names an index a record there could have: at least `index`, and at
/// most one more per header length of distance (records follow one another in index order,
/// each at least a header long). Checked before the checksum, it keeps a search through
/// garbage linear: a random length passes [`RECORD_LEN_MAX`] once in 256, and its checksum
/// would read up to 16 MiB; a random index passes this about never.
fn index_plausible(bytes: &[u8], index: u64, distance: u64, version: u32) -> bool {
    let Some(field) = bytes.get(8..16) else {
        return false;
    };
    let found = u64::from_le_bytes(field.try_into().expect("8 bytes"));
    let most = index.saturating_add(distance / header_len(version) as u64);
    (index..=most).contains(&found)
}

/// Fsyncs the directory holding `path`, so a created or renamed entry is durable.
fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the search for a valid record after a bad one reads the file a window at a time
    /// and finds what reading it whole finds. Method: 40 records of 20-59 bytes, record 3's
    /// payload flipped; windows of 200 bytes (over twice the longest record) and of the whole file
    /// find the same next record (record 4), and none after the last record.
    #[test]
    fn resync_reads_a_window_at_a_time() {
        let path = std::env::temp_dir().join(format!("jasper-resync-{}", std::process::id()));
        let mut bytes = Vec::new();
        let mut offsets = Vec::new();
        for i in 0..40u64 {
            offsets.push(bytes.len() as u64);
            encode_record(i, i, &vec![i as u8; 20 + i as usize], &mut bytes);
        }
        bytes[offsets[3] as usize + RECORD_HEADER_LEN] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let mut file = File::open(&path).unwrap();
        let len = bytes.len() as u64;
        let mut search = |from: u64, index: u64, window: u64| {
            resync_in_windows(&mut file, from, len, index, window, VERSION, true)
                .unwrap()
                .map(|(at, _)| at)
        };
        let whole = search(offsets[3], 3, 1 << 20);
        assert_eq!(whole, Some(offsets[4]));
        let windowed = search(offsets[3], 3, 200);
        assert_eq!(windowed, whole);
        let from_last = search(offsets[39], 39, 200);
        assert_eq!(from_last, None);
        let far = search(offsets[3], 30, 200);
        assert_eq!(
            far,
            Some(offsets[30]),
            "the first at or after the index asked"
        );
        let _ = std::fs::remove_file(&path);
    }

    /// Goal: a search through garbage checks a checksum only where a header names an index
    /// that could be there, and still finds the record after the garbage. Method: 4 MiB of
    /// seeded random bytes between records 0 and 1; `index_plausible` passes no offset of
    /// the garbage, and the search from record 0's place (as if it were bad) finds record 1.
    #[test]
    fn a_search_through_garbage_skips_implausible_headers() {
        use rand::{RngCore, SeedableRng};
        let path = std::env::temp_dir().join(format!("jasper-garbage-{}", std::process::id()));
        let mut bytes = Vec::new();
        encode_record(0, 0, b"first", &mut bytes);
        let mut garbage = vec![0u8; 4 << 20];
        rand_chacha::ChaCha8Rng::seed_from_u64(7).fill_bytes(&mut garbage);
        let passing = (0..garbage.len())
            .filter(|&i| index_plausible(&garbage[i..], 1, i as u64 + 29, VERSION))
            .count();
        assert_eq!(passing, 0);
        bytes.extend_from_slice(&garbage);
        let second = bytes.len() as u64;
        encode_record(1, 0, b"second", &mut bytes);
        std::fs::write(&path, &bytes).unwrap();
        let mut file = File::open(&path).unwrap();
        let found = resync(&mut file, 0, bytes.len() as u64, 0, VERSION, true).unwrap();
        assert_eq!(found.map(|(at, r)| (at, r.index)), Some((second, 1)));
        // A record whose index is past what fits before it is not taken.
        assert!(!index_plausible(&bytes[second as usize..], 0, 23, VERSION));
        assert!(index_plausible(&bytes[second as usize..], 0, 24, VERSION));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn record_round_trip_and_checks() {
        let mut buf = Vec::new();
        encode_record(7, 3, b"hello", &mut buf);
        assert_eq!(buf.len(), RECORD_HEADER_LEN + 5);
        assert_eq!(decode_record(&buf, 7, VERSION), Ok(5));
        let decoded = decode_any(&buf, VERSION).unwrap();
        assert_eq!((decoded.index, decoded.synced), (7, 3));
        assert_eq!(decode_record(&buf, 8, VERSION), Err(BadRecord::Index));
        assert_eq!(
            decode_record(&buf[..buf.len() - 1], 7, VERSION),
            Err(BadRecord::Torn)
        );
        let mut synced = buf.clone();
        synced[16] ^= 1;
        assert_eq!(
            decode_record(&synced, 7, VERSION),
            Err(BadRecord::Checksum),
            "synced is checked"
        );
        buf[RECORD_HEADER_LEN] ^= 1;
        assert_eq!(decode_record(&buf, 7, VERSION), Err(BadRecord::Checksum));
        // Version 1: no synced field.
        let mut v1 = Vec::new();
        encode(VERSION_1, 7, 3, b"hello", &mut v1);
        assert_eq!(v1.len(), RECORD_HEADER_LEN_V1 + 5);
        let decoded = decode_any(&v1, VERSION_1).unwrap();
        assert_eq!((decoded.len, decoded.index, decoded.synced), (5, 7, 0));
    }

    /// Goal: a journal written by a version 1 build still opens, reads and grows (in its own
    /// format), and damage followed by a valid record is refused as before (version 1 does
    /// not say when a record was synced). Method: a version 1 file of five records, opened,
    /// appended to, reopened; then record 2's payload flipped.
    #[test]
    fn a_version_1_journal_is_read_and_appended_to() {
        let path = std::env::temp_dir().join(format!("jasper-v1-{}", std::process::id()));
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION_1.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        let mut offsets = Vec::new();
        for i in 0..5u64 {
            offsets.push(bytes.len());
            encode(VERSION_1, i, 0, &[i as u8; 10], &mut bytes);
        }
        std::fs::write(&path, &bytes).unwrap();
        let (mut journal, recovery) = Journal::open(&path).unwrap();
        assert_eq!((recovery.records, journal.version()), (5, VERSION_1));
        assert_eq!(journal.append(b"more"), 5);
        journal.sync().unwrap();
        drop(journal);
        let (journal, recovery) = Journal::open(&path).unwrap();
        assert_eq!(recovery.records, 6);
        let back = journal.read_vec(0..6).unwrap();
        assert_eq!(back[2], [2; 10]);
        assert_eq!(back[5], b"more");
        drop(journal);
        bytes[offsets[2] + RECORD_HEADER_LEN_V1] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            Journal::open(&path),
            Err(Error::Corrupt { index: 2, .. })
        ));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn group_commit_due() {
        let g = GroupCommit {
            records_max: 4,
            delay_max: Duration::from_micros(100),
        };
        assert!(!g.due(0, Duration::from_secs(1)), "nothing to sync");
        assert!(!g.due(3, Duration::from_micros(99)));
        assert!(g.due(4, Duration::ZERO));
        assert!(g.due(1, Duration::from_micros(100)));
    }
}
