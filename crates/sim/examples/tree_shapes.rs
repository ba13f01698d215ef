//! Table 8 of the paper (median OML by tree shape <D,F>, H = 0) on a model, and the two
//! costs DESIGN.md §4 quotes from it fitted by least squares on the median OML:
//! `OML_p50 ≈ a_N + D·layer + D·F·per_fanout` (one intercept per N) (paper: a layer 30 ± 10 µs, a unit of fan-out
//! 2.7 ± 0.9 µs per layer).
//!
//! `cargo run --release -p sim --example tree_shapes -- [model-preset-or-toml] [full]`
//!
//! Quick scale by default (the campaign's quick durations: 250 ms at N ≤ 200, 60 ms at
//! N = 1000); `full` uses the full campaign's. `SIM_SEED=<seed>` changes the seed.

use proto::plan::Shape;
use sim::NetModel;
use sim::experiments::{self, Metric, Scale};

/// The paper's Table 8: `(depth, fanout, receivers, median OML µs)`.
const TABLE_8: [(u32, u32, u32, f64); 8] = [
    (1, 10, 10, 66.0),
    (2, 4, 10, 88.0),
    (1, 100, 100, 351.0),
    (2, 10, 100, 139.0),
    (3, 5, 100, 141.0),
    (2, 32, 1000, 282.0),
    (3, 10, 1000, 217.0),
    (4, 6, 1000, 226.0),
];

/// Least squares `y ≈ a_N + layer·D + per_fanout·D·F` with one intercept per receiver count
/// N (so the costs compare shapes at equal N, as Appendix A does): `(layer, per_fanout)`.
/// Points are `(N, D, F, y)`.
fn fit(points: &[(u32, f64, f64, f64)]) -> Option<[f64; 2]> {
    let mut groups: Vec<u32> = points.iter().map(|p| p.0).collect();
    groups.sort_unstable();
    groups.dedup();
    let k = groups.len() + 2;
    // Normal equations for the columns (1{N = n} for each n, D, D·F).
    let mut m = vec![vec![0.0f64; k + 1]; k];
    for &(n, d, f, y) in points {
        let mut x = vec![0.0; k];
        x[groups.iter().position(|&g| g == n)?] = 1.0;
        x[k - 2] = d;
        x[k - 1] = d * f;
        for i in 0..k {
            for j in 0..k {
                m[i][j] += x[i] * x[j];
            }
            m[i][k] += x[i] * y;
        }
    }
    // Gauss-Jordan with partial pivoting.
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        m.swap(col, pivot);
        if m[col][col].abs() < 1e-9 {
            return None;
        }
        let pivot_row = m[col].clone();
        for (row, values) in m.iter_mut().enumerate() {
            if row != col {
                let factor = values[col] / pivot_row[col];
                for (x, p) in values.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= factor * p;
                }
            }
        }
    }
    Some([m[k - 2][k] / m[k - 2][k - 2], m[k - 1][k] / m[k - 1][k - 1]])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model_arg = args.first().map_or("aws_c5", String::as_str);
    let model = NetModel::preset(model_arg).unwrap_or_else(|| {
        let text = std::fs::read_to_string(model_arg).expect("a preset name or a TOML file");
        NetModel::from_toml(&text).expect("a model")
    });
    let quick = !args.iter().any(|a| a == "full");
    let seed = sim::seed_from_env(0x5EED_0001);
    let mut ours = Vec::new();
    let mut paper = Vec::new();
    println!("<D,F>     N     ours p50  paper  ratio   (H = 0, {model_arg}, seed {seed:#x})");
    for (depth, fanout, n, paper_p50) in TABLE_8 {
        let mut config = experiments::base(Scale { quick }, "aws_c5", n);
        config.model = model.clone();
        config.seed = seed;
        config.plan.shape = Shape::Explicit { depth, fanout };
        let case = experiments::Case {
            name: format!("d{depth}_f{fanout}"),
            config,
        };
        let result = experiments::run_case(&case, &mut |_| {}).expect("case runs");
        let p50 = result.at(Metric::OmlReceipt, 50.0);
        println!(
            "<{depth},{fanout}>{:pad$} {n:>5} {p50:>9.1} {paper_p50:>6.0} {:>6.2}",
            "",
            p50 / paper_p50,
            pad = 6usize.saturating_sub(format!("{depth}{fanout}").len()),
        );
        ours.push((n, f64::from(depth), f64::from(fanout), p50));
        paper.push((n, f64::from(depth), f64::from(fanout), paper_p50));
    }
    for (who, points) in [("ours", &ours), ("paper", &paper)] {
        match fit(points) {
            Some([layer, per_fanout]) => {
                println!("fit {who:<5}: OML_p50 = a_N + {layer:.1}·D + {per_fanout:.2}·D·F µs")
            }
            None => println!("fit {who:<5}: singular"),
        }
    }
    println!(
        "DESIGN.md §4 (paper, Appendix A): a layer 30 ± 10 µs, a unit of fan-out 2.7 ± 0.9 µs per layer"
    );
}
