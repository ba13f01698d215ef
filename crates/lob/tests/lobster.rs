//! Goal: the engine reproduces real market data (LOBSTER AAPL sample, 999 messages).
//!
//! Method: read the files from `../shared/data/lobster/` beside the workspace (failing loudly
//! if they are missing), then replay them both ways described in `lob::lobster`.

use std::path::PathBuf;

use lob::lobster::{self, BookRow, Message};

fn data() -> (Vec<Message>, Vec<BookRow>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/lobster");
    let read = |suffix: &str| {
        let path = dir.join(format!("AAPL_2012-06-21_34200000_57600000_{suffix}_10.csv"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "LOBSTER sample missing at {}: {e}; tests need ../shared/data",
                path.display()
            )
        })
    };
    let messages = lobster::parse_messages(&read("message")).unwrap();
    let rows = lobster::parse_orderbook(&read("orderbook")).unwrap();
    assert_eq!(messages.len(), 999);
    assert_eq!(rows.len(), 999);
    (messages, rows)
}

#[test]
fn book_building_matches_every_row() {
    let (messages, rows) = data();
    let report = lobster::build_book(&messages, &rows).unwrap();
    eprintln!("{report:?}");
    assert_eq!(report.first_mismatch, None);
    assert_eq!(report.rows_matched, 999);
    // 20 visible levels before the file, minus message 1's add (the whole 5853300 bid level).
    assert_eq!(report.seed_orders, 19);
    // Hidden executions (type 5) leave the visible book alone.
    assert_eq!(report.invisible_messages, 61);
    assert!(
        report.unseen_changes > 0,
        "the sample has levels that change beyond the 10th"
    );
}

#[test]
fn matching_reproduces_executions() {
    let (messages, rows) = data();
    let report = lobster::match_executions(&messages, &rows).unwrap();
    eprintln!("{report:?}");
    // Every fill agrees: 98 visible executions in 63 runs; two consecutive executions of
    // pre-file orders at one price merge into one fill against the synthetic order holding
    // their sum (97 expected fills); 3 fills hit synthetic (pre-file) orders, where LOBSTER
    // names ids the file never added, and agree in price and quantity.
    assert_eq!(report.mismatches, vec![]);
    assert_eq!(report.executions, 98);
    assert_eq!(report.aggressive_orders, 63);
    assert_eq!((report.fills_expected, report.fills_engine), (97, 97));
    assert_eq!((report.fills_exact, report.fills_seed), (94, 3));
    // Hidden executions inside runs are skipped: the engine has no hidden orders, and the
    // aggressive order's size counts visible executions only, so they cannot cause mismatches.
    assert_eq!(report.hidden_in_runs + report.hidden_alone, 61);
    assert_eq!(report.first_book_mismatch, None);
    assert_eq!(report.rows_matched, report.rows_compared);
}
