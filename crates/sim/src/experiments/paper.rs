//! The paper's figures as numbers: the percentile curves of `data/paper_figures.csv` (a copy
//! of `shared/data/paper/figures.csv`) and Appendix C's means.

use serde::Serialize;

/// The paper's figures as numbers (a copy of `shared/data/paper/figures.csv`).
pub const PAPER_FIGURES_CSV: &str = include_str!("../../data/paper_figures.csv");

/// The percentiles `figures.csv` lists, in column order.
pub const PAPER_PERCENTILES: [f64; 8] = [1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0];

/// One curve of one of the paper's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PaperCurve {
    /// Figure name (`oml_by_hedging_n100`, ...).
    pub figure: String,
    /// Curve label (`H=0`, ...).
    pub curve: String,
    /// Values at [`PAPER_PERCENTILES`], µs; `None` where the curve is off the chart.
    pub values: [Option<f64>; 8],
}

impl PaperCurve {
    /// The value at percentile `p` (one of [`PAPER_PERCENTILES`]).
    pub fn at(&self, p: f64) -> Option<f64> {
        let i = PAPER_PERCENTILES.iter().position(|&q| q == p)?;
        self.values[i]
    }

    /// The CDF points `(µs, percentile)` the paper gives.
    pub fn points(&self) -> Vec<(f64, f64)> {
        PAPER_PERCENTILES
            .iter()
            .zip(self.values)
            .filter_map(|(&p, v)| v.map(|v| (v, p)))
            .collect()
    }
}

/// Parses `figures.csv`.
pub fn paper_curves(csv: &str) -> Result<Vec<PaperCurve>, String> {
    let mut out = Vec::new();
    for (n, line) in csv.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != 10 {
            return Err(format!("figures.csv line {}: {} cells", n + 1, cells.len()));
        }
        let mut values = [None; 8];
        for (value, cell) in values.iter_mut().zip(&cells[2..]) {
            if !cell.is_empty() {
                *value = Some(
                    cell.parse::<f64>()
                        .map_err(|e| format!("figures.csv line {}: {e}", n + 1))?,
                );
            }
        }
        out.push(PaperCurve {
            figure: cells[0].to_owned(),
            curve: cells[1].to_owned(),
            values,
        });
    }
    Ok(out)
}

/// The paper's Appendix C means: `(depth, hedge, mean in hop units)`.
pub const APPENDIX_C_MEANS: [(u32, u32, f64); 10] = [
    (1, 0, 0.5),
    (2, 0, 1.0),
    (3, 0, 1.5),
    (4, 0, 2.0),
    (5, 0, 2.5),
    (4, 0, 2.0),
    (4, 1, 1.3),
    (4, 2, 0.9),
    (4, 3, 0.8),
    (4, 4, 0.7),
];
