//! Engine benchmark: see `lob::bench`. Run `cargo bench -p lob --bench engine [-- --quick]`.
#![allow(missing_docs)]

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let _ = lob::bench::run(quick);
}
