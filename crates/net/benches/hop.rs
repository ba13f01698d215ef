//! The hop benchmarks: see `net::bench`. Run `cargo bench -p net --features bench --bench hop`
//! (`NET_BENCH_RUNS`, default 5).
#![allow(missing_docs)]

fn main() {
    let runs = std::env::var("NET_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let _ = net::bench::run(runs);
}
