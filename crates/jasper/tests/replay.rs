//! `jasper replay` as a user runs it: the LOBSTER sample replays clean, and a file pair the
//! engine disagrees with or cannot read is an error that names the file, the line and the
//! message in words.

mod common;

use std::process::Command;

use common::{assert_refused, text};

fn replay(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_jasper"))
        .arg("replay")
        .args(args)
        .output()
        .expect("run jasper replay")
}

/// Goal: the shipped sample (../shared/data) replays with every book row and execution equal.
#[test]
fn the_sample_replays_clean() {
    let output = replay(&[]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("ok: the engine reproduces every row and every execution"),
        "{stdout}"
    );
}

/// Goal: a disagreement and a malformed line are errors a person can act on. Method: a
/// one-message pair whose orderbook row is not the book the message makes, and a message
/// file with a short line.
#[test]
fn a_bad_pair_names_the_file_the_line_and_the_message() {
    let dir = std::env::temp_dir().join(format!("jasper-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let messages = dir.join("X_message_10.csv");
    let orderbook = dir.join("X_orderbook_10.csv");
    // A buy of 100 at $585.33; the orderbook row has it on the ask side (and a bid above).
    std::fs::write(&messages, "34200.1,1,1,100,5853300,1\n").unwrap();
    std::fs::write(&orderbook, "5853300,100,5853400,100\n").unwrap();
    let path = messages.to_str().unwrap();
    let output = replay(&[path]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("message 1 (line 1 of ")
            && stdout.contains("submit buy 100 @ $585.3300, order 1"),
        "{stdout}"
    );
    assert!(stderr.contains("the engine disagrees"), "{stderr}");

    // The row's book before the file has an ask at $585.33 that the buy would cross.
    std::fs::write(&orderbook, "5853300,100,5853200,100\n").unwrap();
    let output = replay(&[path]);
    assert_refused(&[path], &output, "message 1: an add crossed");
    let (_, stderr) = text(&output);
    assert!(
        stderr.contains("book building on ") && stderr.contains("X_orderbook_10.csv"),
        "{stderr}"
    );

    std::fs::write(&messages, "34200.1,1,1,100,5853300,1\nbad,line\n").unwrap();
    assert_refused(&[path], &replay(&[path]), "line 2: expected 6 fields");
    let _ = std::fs::remove_dir_all(&dir);
}
