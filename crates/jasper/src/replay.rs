//! `jasper replay`: the LOBSTER sample (or any LOBSTER level-N file pair) through the engine.
//!
//! Runs both checks of `lob::lobster` (book building, then matching), prints a summary and,
//! on a mismatch, the first differing step with the file's book and the engine's side by side.
//! Exits with an error on a mismatch or a malformed line (naming the file and line).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use lob::lobster::{self, BookMismatch};

const SAMPLE: &str = "lobster/AAPL_2012-06-21_34200000_57600000_message_10.csv";

/// Arguments of `jasper replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// LOBSTER message file [default: the AAPL sample under ../shared/data]
    file: Option<PathBuf>,
    /// Orderbook file [default: the message file's name with "message" → "orderbook"]
    #[arg(long)]
    orderbook: Option<PathBuf>,
}

/// Runs the replay; `Err` on a malformed file, an unexplainable message or a mismatch.
pub(crate) fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    let messages_path = match &args.file {
        Some(path) => path.clone(),
        None => default_sample()?,
    };
    let orderbook_path = match &args.orderbook {
        Some(path) => path.clone(),
        None => orderbook_for(&messages_path)?,
    };
    let messages = lobster::parse_messages(&read(&messages_path)?)
        .with_context(|| format!("malformed message file {}", messages_path.display()))?;
    let rows = lobster::parse_orderbook(&read(&orderbook_path)?)
        .with_context(|| format!("malformed orderbook file {}", orderbook_path.display()))?;
    println!(
        "replaying {} ({} messages)",
        messages_path.display(),
        messages.len()
    );

    // A step is a 1-based message number, the line of both files.
    let files = format!(
        "{} and {}",
        messages_path.display(),
        orderbook_path.display()
    );
    let book = lobster::build_book(&messages, &rows)
        .with_context(|| format!("book building on {files} (message N is line N of each)"))?;
    println!(
        "book building: {}/{} rows equal (top {} levels); {} seed orders for the book before \
         the file, {} references to pre-file orders, {} hidden levels re-synchronised when they \
         came into view, {} messages without visible effect",
        book.rows_matched,
        book.messages,
        lobster::DEPTH,
        book.seed_orders,
        book.prefile_references,
        book.unseen_changes,
        book.invisible_messages,
    );
    let matching = lobster::match_executions(&messages, &rows)
        .with_context(|| format!("matching on {files} (message N is line N of each)"))?;
    println!(
        "matching: {} execution rows in {} aggressive orders ({} with a resting remainder); \
         fills expected {}, engine {}: {} exact, {} against pre-file (seed) orders, {} differ; \
         {} hidden executions skipped; {}/{} book rows equal",
        matching.executions,
        matching.aggressive_orders,
        matching.with_remainder,
        matching.fills_expected,
        matching.fills_engine,
        matching.fills_exact,
        matching.fills_seed,
        matching.mismatches.len(),
        matching.hidden_in_runs + matching.hidden_alone,
        matching.rows_matched,
        matching.rows_compared,
    );
    for mismatch in &matching.mismatches {
        println!(
            "  fill differs at message {} (line {} of {}): LOBSTER {}, engine {}",
            mismatch.step,
            mismatch.step,
            messages_path.display(),
            fill(mismatch.expected),
            fill(mismatch.actual)
        );
    }
    let first = book
        .first_mismatch
        .as_ref()
        .or(matching.first_book_mismatch.as_ref());
    if let Some(mismatch) = first {
        print_mismatch(mismatch, &files);
    }
    if first.is_some() || !matching.mismatches.is_empty() {
        bail!("the engine disagrees with the LOBSTER files");
    }
    println!("ok: the engine reproduces every row and every execution");
    Ok(())
}

/// A LOBSTER price (dollars × 10,000) as dollars.
fn dollars(price: i64) -> String {
    let sign = if price < 0 { "-" } else { "" };
    let abs = price.unsigned_abs();
    format!("{sign}${}.{:04}", abs / 10_000, abs % 10_000)
}

/// A fill `(maker, qty, price)`, or that there was none.
fn fill(fill: Option<(u64, i64, i64)>) -> String {
    match fill {
        Some((maker, qty, price)) => format!("{qty} @ {} against order {maker}", dollars(price)),
        None => "no fill".to_string(),
    }
}

/// A message as a person reads it: `submit buy 100 @ $585.3300, order 1, at 34200.100000000 s`.
fn describe(m: &lobster::Message) -> String {
    use lobster::MessageKind as K;
    let kind = match m.kind {
        K::Submit => "submit",
        K::Cancel => "cancel (partial)",
        K::Delete => "delete",
        K::Execute => "execute",
        K::ExecuteHidden => "execute (hidden)",
        K::Cross => "cross trade",
        K::Halt => "trading halt",
    };
    let side = match m.side {
        lob::Side::Buy => "buy",
        lob::Side::Sell => "sell",
    };
    format!(
        "{kind} {side} {} @ {}, order {}, at {}.{:09} s after midnight",
        m.size,
        dollars(m.price),
        m.order_id,
        m.time_ns / 1_000_000_000,
        m.time_ns % 1_000_000_000
    )
}

fn print_mismatch(mismatch: &BookMismatch, files: &str) {
    println!(
        "first differing step: message {} (line {} of {files}): {}",
        mismatch.step,
        mismatch.step,
        describe(&mismatch.message)
    );
    let expected = mismatch.expected.to_string();
    let actual = mismatch.actual.to_string();
    println!("{:^37}   {:^37}", "LOBSTER orderbook file", "engine");
    println!("{:^37}   {:^37}", "bids | asks", "bids | asks");
    let (left, right): (Vec<&str>, Vec<&str>) =
        (expected.lines().collect(), actual.lines().collect());
    for k in 0..left.len().max(right.len()) {
        let l = left.get(k).copied().unwrap_or("");
        let r = right.get(k).copied().unwrap_or("");
        let mark = if l == r { ' ' } else { '*' };
        println!("{l:<37} {mark} {r:<37}");
    }
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The sample relative to the current directory (`../shared/data`, as from the repository
/// root), else relative to this crate's source tree.
fn default_sample() -> anyhow::Result<PathBuf> {
    let candidates = [
        PathBuf::from("../shared/data").join(SAMPLE),
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data")
            .join(SAMPLE),
    ];
    match candidates.iter().find(|p| p.is_file()) {
        Some(path) => Ok(path.clone()),
        None => bail!(
            "LOBSTER sample not found at {} (pass a file)",
            candidates[0].display()
        ),
    }
}

fn orderbook_for(messages: &Path) -> anyhow::Result<PathBuf> {
    if !messages.exists() {
        bail!("message file {}: no such file", messages.display());
    }
    let name = messages
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if !name.contains("message") {
        bail!(
            "cannot derive the orderbook file from {}; pass --orderbook",
            messages.display()
        );
    }
    Ok(messages.with_file_name(name.replacen("message", "orderbook", 1)))
}
