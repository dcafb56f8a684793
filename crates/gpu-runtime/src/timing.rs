//! Honest timing: warm up, synchronise inside the timed region, report the median.

use crate::error::Result;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Summary of repeated timings, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub samples: usize,
}

impl Timing {
    /// Summarise durations (at least one).
    pub fn from_durations(durations: &[Duration]) -> Self {
        let mut ms: Vec<f64> = durations.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let n = ms.len().max(1);
        let median = if ms.is_empty() {
            f64::NAN
        } else if n % 2 == 1 {
            ms[n / 2]
        } else {
            0.5 * (ms[n / 2 - 1] + ms[n / 2])
        };
        Timing {
            median_ms: median,
            min_ms: ms.first().copied().unwrap_or(f64::NAN),
            max_ms: ms.last().copied().unwrap_or(f64::NAN),
            samples: ms.len(),
        }
    }

    /// The same timings per item, when each timed run processed `items` items.
    pub fn per_item(self, items: usize) -> Self {
        let n = items.max(1) as f64;
        Timing {
            median_ms: self.median_ms / n,
            min_ms: self.min_ms / n,
            max_ms: self.max_ms / n,
            samples: self.samples,
        }
    }
}

/// Run `f` `warmup` times untimed, then `reps` times timed. `f` must itself wait for any
/// device work it starts (for GPU work, end it with `Gpu::sync` or a download).
pub fn bench(warmup: usize, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Timing> {
    for _ in 0..warmup {
        f()?;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed());
    }
    Ok(Timing::from_durations(&times))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_samples() {
        let d = |ms: u64| Duration::from_millis(ms);
        let t = Timing::from_durations(&[d(5), d(1), d(3)]);
        assert_eq!(
            (t.median_ms, t.min_ms, t.max_ms, t.samples),
            (3.0, 1.0, 5.0, 3)
        );
        assert_eq!(
            Timing::from_durations(&[d(1), d(2), d(4), d(10)]).median_ms,
            3.0
        );
    }

    #[test]
    fn bench_runs_warmup_plus_reps_and_propagates_errors() {
        let mut calls = 0;
        bench(2, 3, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 5);
        let err = bench(0, 3, || Err(crate::Error::NotAGpu { what: "x".into() }));
        assert!(err.is_err());
    }
}
