//! The paper's outbound experiments without the CLI.
//!
//! `[SIM_SEED=S] cargo run --release -p sim --example paper_outbound -- [--quick] [OUT_DIR] [CASE...]`

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    args.retain(|a| a != "--quick");
    let out = args
        .first()
        .cloned()
        .unwrap_or_else(|| "target/paper-outbound".to_owned());
    let only: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let report = sim::experiments::paper_outbound_with(
        std::path::Path::new(&out),
        quick,
        std::env::var("SIM_SEED")
            .ok()
            .map(|text| sim::parse_seed(&text).unwrap_or_else(|| panic!("SIM_SEED={text:?}"))),
        (!only.is_empty()).then_some(&only[..]),
        &mut |line| eprint!("{line}"),
        &std::sync::atomic::AtomicBool::new(false),
    )
    .unwrap();
    println!("{}", report.text);
}
