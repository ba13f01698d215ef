//! Journaled appends per second: group commit (one fsync per batch) at several batch sizes
//! against appends written without any fsync, in the same run, with ratios.
//!
//! Run: `cargo bench -p journal --bench append [-- --quick] [-- --dir PATH]`. The default
//! directory is the system temp dir; pass `--dir` to measure the disk the journal will live on.
#![allow(missing_docs)]

use std::path::PathBuf;

use journal::Journal;

/// A record the size of a journaled sequencer batch of one order (order bytes, framing and
/// its market-data packet).
const RECORD_LEN: usize = 160;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map_or_else(std::env::temp_dir, PathBuf::from)
        .join(format!("jasper-journal-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench directory");
    let records = if quick { 2_000 } else { 20_000 };
    println!(
        "journal append benchmark: {records} records of {RECORD_LEN} B in {}",
        dir.display()
    );

    let baseline = run(&dir, records, None);
    println!(
        "{:>22} {:>12.0} appends/s {:>8.2} us/append",
        "no fsync (write only)",
        baseline,
        1e6 / baseline
    );
    println!(
        "{:>22} {:>12} {:>18} {:>16}",
        "fsync every", "appends/s", "ratio to no-fsync", "fsyncs/s"
    );
    for batch in [1u64, 8, 64, 512] {
        // Fewer records for batch 1: each costs a full fsync.
        let n = if batch == 1 { records / 10 } else { records };
        let rate = run(&dir, n, Some(batch));
        println!(
            "{:>22} {:>12.0} {:>17.4}x {:>16.0}",
            format!("{batch} records"),
            rate,
            rate / baseline,
            rate / batch as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Appends `records` records, syncing every `batch` (or only writing, without fsync, every 64
/// when `None`); returns appends per second.
fn run(dir: &std::path::Path, records: u64, batch: Option<u64>) -> f64 {
    let path = dir.join(format!("bench-{batch:?}"));
    let _ = std::fs::remove_file(&path);
    let (mut j, _) = Journal::open(&path).expect("open");
    let payload = [0x5au8; RECORD_LEN];
    // The one clock read of this benchmark: wall time of the whole run.
    #[allow(clippy::disallowed_methods)]
    let start = std::time::Instant::now();
    for i in 1..=records {
        j.append(&payload);
        match batch {
            Some(b) if i % b == 0 => {
                j.sync().expect("sync");
            }
            None if i % 64 == 0 => {
                j.write().expect("write");
            }
            _ => {}
        }
    }
    match batch {
        Some(_) => assert_eq!(j.sync().expect("sync"), records),
        None => assert_eq!(j.write().expect("write"), records),
    }
    let elapsed = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    records as f64 / elapsed
}
