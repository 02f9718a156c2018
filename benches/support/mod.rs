//! Figures shared by the benchmarks.
#![allow(dead_code)]

use std::time::Duration;

pub mod k8s;

/// The benchmark's numeric arguments, in order (others skipped).
pub fn numbers() -> Vec<usize> {
    std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect()
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Nearest-rank percentile.
pub fn percentile(v: &[Duration], p: f64) -> Duration {
    nearest_rank(v, p).expect("a percentile of no samples")
}

/// Nearest-rank percentile of figures in `f64` (milliseconds, say); NaN of no samples, which
/// prints as such.
pub fn percentile_f64(v: &[f64], p: f64) -> f64 {
    nearest_rank(v, p).unwrap_or(f64::NAN)
}

/// Nearest-rank percentile of anything ordered (milliseconds as `f64`, say); `None` of no
/// samples.
pub fn nearest_rank<T: Copy + PartialOrd>(v: &[T], p: f64) -> Option<T> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v.get(rank.clamp(1, v.len().max(1)) - 1).copied()
}

pub fn median(v: &[Duration]) -> Duration {
    percentile(v, 50.0)
}
