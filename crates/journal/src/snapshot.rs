//! Snapshots: an opaque payload plus the journal position it covers, replaced atomically.
//!
//! ```text
//! magic "JSPRSNAP" (8) | version u32 = SNAPSHOT_FILE_VERSION (1) | crc u32 | position u64 | len u64 | payload
//! ```
//!
//! `crc` is CRC-32 over `position | len | payload`. Writing goes to `<path>.tmp`, which is
//! fsynced, renamed over `path`, and then the directory is fsynced: a crash leaves either the
//! old snapshot or the new one, never a mix. A snapshot that fails its check is an error (the
//! rename is atomic, so that is real corruption, not a crash).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::{Error, SnapshotProblem, sync_parent};

const MAGIC: [u8; 8] = *b"JSPRSNAP";
/// Version of the snapshot file format: its own, not the journal's (it was the journal's
/// `VERSION`, so a new journal format would have made every snapshot unreadable).
pub const SNAPSHOT_FILE_VERSION: u32 = 1;
const HEADER_LEN: usize = 32;

/// A loaded snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Journal records it covers: replay resumes at this index.
    pub position: u64,
    /// The caller's state.
    pub payload: Vec<u8>,
}

/// Atomically replaces the snapshot at `path` with `payload`, covering journal records
/// `0..position`.
pub fn write_snapshot(path: &Path, position: u64, payload: &[u8]) -> io::Result<()> {
    let mut tmp = PathBuf::from(path);
    tmp.as_mut_os_string().push(".tmp");
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&SNAPSHOT_FILE_VERSION.to_le_bytes());
    bytes.extend_from_slice(&crc(position, payload).to_le_bytes());
    bytes.extend_from_slice(&position.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(payload);
    debug_assert_eq!(bytes.len(), HEADER_LEN + payload.len());
    let mut file = File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    sync_parent(path)
}

/// Loads the snapshot at `path`: `None` if there is none.
pub fn read_snapshot(path: &Path) -> Result<Option<Snapshot>, Error> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let bad = |problem| Error::BadSnapshot {
        path: path.to_path_buf(),
        problem,
    };
    if bytes.len() < HEADER_LEN || bytes[..8] != MAGIC {
        return Err(bad(SnapshotProblem::NotASnapshot));
    }
    let word = |range: core::ops::Range<usize>| -> u64 {
        let mut b = [0u8; 8];
        b[..range.len()].copy_from_slice(&bytes[range]);
        u64::from_le_bytes(b)
    };
    let (version, stored, position, len) = (word(8..12), word(12..16), word(16..24), word(24..32));
    if version != u64::from(SNAPSHOT_FILE_VERSION) {
        return Err(bad(SnapshotProblem::Version {
            found: version,
            expected: SNAPSHOT_FILE_VERSION,
        }));
    }
    let found = (bytes.len() - HEADER_LEN) as u64;
    if len != found {
        return Err(bad(SnapshotProblem::Length {
            expected: len,
            found,
        }));
    }
    let payload = bytes[HEADER_LEN..].to_vec();
    if u64::from(crc(position, &payload)) != stored {
        return Err(bad(SnapshotProblem::Checksum));
    }
    Ok(Some(Snapshot { position, payload }))
}

fn crc(position: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&position.to_le_bytes());
    hasher.update(&(payload.len() as u64).to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}
