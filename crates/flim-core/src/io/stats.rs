//! Summary statistics of maps over the analysed, finite pixels.

use crate::error::{Error, Result};
use ndarray::ArrayView2;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// Statistics of one map over its valid pixels (analysed and finite). Every field is finite
/// (0 when no pixel is valid), so summaries never carry NaN.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MapStats {
    /// Pixels analysed with a finite value.
    pub valid: usize,
    /// Pixels not analysed (below the photon threshold, or no photons).
    pub masked: usize,
    /// Pixels analysed whose value is not finite (the method failed there).
    pub failed: usize,
    /// Mean of the valid values.
    pub mean: f64,
    /// Sample standard deviation.
    pub sd: f64,
    /// Smallest value.
    pub min: f64,
    /// 5th percentile.
    pub p05: f64,
    /// 25th percentile.
    pub p25: f64,
    /// Median.
    pub median: f64,
    /// 75th percentile.
    pub p75: f64,
    /// 95th percentile.
    pub p95: f64,
    /// Largest value.
    pub max: f64,
}

/// [`MapStats`] of `map` where `mask` is true.
pub fn map_stats(map: ArrayView2<'_, f32>, mask: ArrayView2<'_, bool>) -> MapStats {
    let mut masked = 0;
    let mut failed = 0;
    let mut v: Vec<f64> = Vec::new();
    for (&x, &m) in map.iter().zip(mask.iter()) {
        if !m {
            masked += 1;
        } else if x.is_finite() {
            v.push(f64::from(x));
        } else {
            failed += 1;
        }
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let pct = |p: f64| -> f64 {
        if n == 0 {
            return 0.0;
        }
        let pos = p / 100.0 * (n - 1) as f64;
        let i = pos.floor() as usize;
        let f = pos - i as f64;
        if i + 1 < n {
            v[i] + f * (v[i + 1] - v[i])
        } else {
            v[i]
        }
    };
    let mean = if n == 0 {
        0.0
    } else {
        v.iter().sum::<f64>() / n as f64
    };
    let sd = if n < 2 {
        0.0
    } else {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    };
    MapStats {
        valid: n,
        masked,
        failed,
        mean,
        sd,
        min: pct(0.0),
        p05: pct(5.0),
        p25: pct(25.0),
        median: pct(50.0),
        p75: pct(75.0),
        p95: pct(95.0),
        max: pct(100.0),
    }
}

/// Write one CSV row per (image, map) statistic: `image,map,valid,masked,failed,mean,sd,min,
/// p05,p25,median,p75,p95,max`.
pub fn write_summary_csv(path: &Path, rows: &[(String, String, MapStats)]) -> Result<()> {
    let mut out =
        String::from("image,map,valid,masked,failed,mean,sd,min,p05,p25,median,p75,p95,max\n");
    for (image, map, s) in rows {
        let _ = writeln!(
            out,
            "{image},{map},{},{},{},{},{},{},{},{},{},{},{},{}",
            s.valid,
            s.masked,
            s.failed,
            s.mean,
            s.sd,
            s.min,
            s.p05,
            s.p25,
            s.median,
            s.p75,
            s.p95,
            s.max
        );
    }
    std::fs::write(path, out).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })
}
