//! Estimating beta from a flow recording, and how far to trust it (see
//! [`crate::model::beta`] for the theory and the policy).

// ndarray views are cheap handles, taken by value as ndarray's own APIs do.
#![allow(clippy::needless_pass_by_value)]

use ndarray::ArrayView2;

use crate::error::{Error, Result};
use crate::model::beta::BetaEstimate;

/// An estimate below this fraction of the optics' `beta_max` is called far below it
/// (unpolarised detection alone gives 0.5, so the bar sits below that).
pub const FAR_BELOW_BETA_MAX: f64 = 0.4;
/// Smallest share of the pixels a static population must hold to be taken as one.
pub const MIN_STATIC_FRACTION: f64 = 0.01;
/// Histogram bins over log K^2 for the population search.
const BINS: usize = 48;

/// Pixel-integrated correlation `C(d) = int_{d-1}^{d+1} (1 - |u - d|) exp(-u^2 / s^2) du`
/// (Simpson, 64 intervals).
fn box_corr(s: f64, d: f64) -> f64 {
    let n = 64;
    let (a, b) = (d - 1.0, d + 1.0);
    let h = (b - a) / f64::from(n);
    let f = |u: f64| (1.0 - (u - d).abs()) * (-(u * u) / (s * s)).exp();
    let mut sum = f(a) + f(b);
    for i in 1..n {
        sum += f(a + f64::from(i) * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    sum * h / 3.0
}

/// Lag-1 correlation of neighbouring pixels for speckle scale `s` (pixels).
fn lag1_of(s: f64) -> f64 {
    box_corr(s, 1.0) / box_corr(s, 0.0)
}

/// Largest beta the optics allow (polarised light) for neighbouring pixels correlated by
/// `lag1` (0..1) and a spatial window of side `window` (`None`: single pixels, no window
/// bias): the pixel-integration factor times the window's sample-variance bias.
///
/// ```
/// use speckle_core::cpu::beta_max_for;
/// let small = beta_max_for(0.05, Some(7));
/// let large = beta_max_for(0.9, Some(7));
/// assert!(small < 0.3 && large > 0.6 && large < 1.0, "{small} {large}");
/// ```
pub fn beta_max_for(lag1: f64, window: Option<usize>) -> f64 {
    let lag1 = lag1.clamp(0.0, 0.999);
    // Invert lag1_of (increasing in s) by bisection on ln s.
    let (mut lo, mut hi) = (0.01f64.ln(), 100f64.ln());
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if lag1_of(mid.exp()) < lag1 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let s = (0.5 * (lo + hi)).exp();
    let c0 = box_corr(s, 0.0);
    let pixel = c0 * c0;
    let Some(n) = window else {
        return pixel;
    };
    let m = (n * n) as f64;
    let sum: f64 = (-(n as i64 - 1)..n as i64)
        .map(|d| (n as f64 - d.abs() as f64) * box_corr(s, d as f64) / c0)
        .sum();
    let bias = 1.0 - (sum * sum - m) / (m * (m - 1.0));
    pixel * bias.max(0.0)
}

/// Lag-1 correlation of neighbouring pixels of a raw frame (mean over x and y), measured in
/// 16 x 16 blocks about each block's own mean so illumination gradients do not count as
/// speckle. `None` for frames smaller than one block or without variance.
pub fn speckle_lag1_correlation(frame: ArrayView2<f32>) -> Option<f64> {
    const B: usize = 16;
    let (h, w) = frame.dim();
    let (mut var, mut cov) = (0.0f64, 0.0f64);
    for by in (0..h / B).map(|i| i * B) {
        for bx in (0..w / B).map(|i| i * B) {
            let block = frame.slice(ndarray::s![by..by + B, bx..bx + B]);
            let mean = block.iter().map(|&v| f64::from(v)).sum::<f64>() / (B * B) as f64;
            if !mean.is_finite() {
                continue;
            }
            let d = |y: usize, x: usize| f64::from(block[[y, x]]) - mean;
            for y in 0..B {
                for x in 0..B {
                    let v = d(y, x);
                    var += v * v;
                    if x + 1 < B {
                        cov += 0.5 * v * d(y, x + 1) * (B as f64 / (B - 1) as f64);
                    }
                    if y + 1 < B {
                        cov += 0.5 * v * d(y + 1, x) * (B as f64 / (B - 1) as f64);
                    }
                }
            }
        }
    }
    (var > 0.0 && var.is_finite()).then(|| (cov / var).clamp(-1.0, 1.0))
}

/// [`speckle_lag1_correlation`] of the first frame of a raw stack.
pub fn stack_lag1_correlation(stack: &crate::model::types::RawStack) -> Option<f64> {
    use crate::model::types::RawStack;
    use ndarray::Axis;
    if stack.dim().0 == 0 {
        return None;
    }
    let frame = match stack {
        RawStack::U8(a) => a.index_axis(Axis(0), 0).mapv(f32::from),
        RawStack::U16(a) => a.index_axis(Axis(0), 0).mapv(f32::from),
        RawStack::F32(a) => a.index_axis(Axis(0), 0).to_owned(),
    };
    speckle_lag1_correlation(frame.view())
}

/// Percentile (0..=100) of sorted values, nearest rank.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Estimate beta from the K map of a flow recording (an explicit opt-in: a calibration on a
/// static target is better).
///
/// Method: the histogram of log K^2 is searched for a separate upper population (a peak
/// above the main body, with a valley between them at most 60% of its height) holding at
/// least [`MIN_STATIC_FRACTION`] of the pixels: static tissue or bone. Found: beta is that
/// population's mean K^2 (as a static region's calibration). Not found: beta is the 99th percentile of K^2 and the estimate
/// is marked unreliable (it is then biased low wherever nothing in view is static, and
/// every tau_c with it). With `lag1` (the raw frames' neighbour correlation, from
/// [`speckle_lag1_correlation`]) and a spatial `window`, an estimate below
/// [`FAR_BELOW_BETA_MAX`] times the optics' maximum ([`beta_max_for`]) is marked unreliable
/// too. `temporal` says K is temporal: a static scatterer then has K near 0, so no static
/// population can be recognised and the estimate is always unreliable.
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::cpu::estimate_beta;
/// // 30% static pixels at K^2 0.5, the rest flowing around K^2 0.1.
/// let k = Array2::from_shape_fn((100, 100), |(y, x)| {
///     let jitter = ((x * 7 + y * 13) % 11) as f32 / 100.0;
///     if x < 30 { (0.5f32 + jitter * 0.2).sqrt() } else { (0.08f32 + jitter * 0.2).sqrt() }
/// });
/// let e = estimate_beta(k.view(), None, None, false)?;
/// assert!(e.plateau && e.reliable && (e.beta - 0.51).abs() < 0.02, "{e:?}");
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn estimate_beta(
    k: ArrayView2<f32>,
    lag1: Option<f64>,
    window: Option<usize>,
    temporal: bool,
) -> Result<BetaEstimate> {
    let mut k2: Vec<f64> = k
        .iter()
        .filter(|k| k.is_finite() && **k > 0.0)
        .map(|&k| f64::from(k) * f64::from(k))
        .collect();
    if k2.len() < 16 {
        return Err(Error::InvalidParameter {
            name: "beta estimate",
            value: format!("{} usable pixels", k2.len()),
            why: "too few finite, positive K values to estimate beta; give --beta, a static \
                  recording or a calibration file"
                .into(),
        });
    }
    k2.sort_by(f64::total_cmp);
    let (p90, p99, p999) = (pct(&k2, 90.0), pct(&k2, 99.0), pct(&k2, 99.9));
    let population = upper_population(&k2);
    let mut warnings = Vec::new();
    let (beta, method, static_fraction, plateau) = match population {
        Some((from, fraction)) if !temporal => {
            let upper = &k2[from..];
            (
                upper.iter().sum::<f64>() / upper.len() as f64,
                format!(
                    "mean K^2 of the upper K^2 population ({:.1}% of the pixels, taken as static)",
                    100.0 * fraction
                ),
                fraction,
                true,
            )
        }
        _ => {
            warnings.push(if temporal {
                "temporal K of a static scatterer is near 0, so no static region can be \
                 recognised in temporal mode: the 99th percentile of K^2 is a guess"
                    .to_string()
            } else {
                "no static region detectable: the upper tail of the K^2 histogram is not a \
                 separate population (a plateau), so the 99th percentile of K^2 is biased low \
                 and every tau_c with it"
                    .to_string()
            });
            (p99, "99th percentile of K^2".to_string(), 0.0, false)
        }
    };
    let beta_max = match (lag1, window, temporal) {
        (Some(c), Some(n), false) => Some(beta_max_for(c, Some(n))),
        _ => None,
    };
    if let Some(max) = beta_max
        && beta < FAR_BELOW_BETA_MAX * max
    {
        warnings.push(format!(
            "the estimate {beta:.4} is far below the {max:.3} the optics allow for the \
             measured speckle size (neighbour correlation {:.2}) and window: likely nothing in \
             view is static",
            lag1.unwrap_or(f64::NAN)
        ));
    }
    Ok(BetaEstimate {
        beta,
        method,
        static_fraction,
        plateau,
        k2_p90: p90,
        k2_p99: p99,
        k2_p999: p999,
        lag1_correlation: lag1,
        beta_max,
        reliable: warnings.is_empty(),
        warnings,
    })
}

/// The start index (in `sorted`) and share of a separate upper population of log K^2, if
/// the smoothed histogram has one.
fn upper_population(sorted: &[f64]) -> Option<(usize, f64)> {
    let n = sorted.len();
    let (lo, hi) = (pct(sorted, 0.5).ln(), sorted[n - 1].ln());
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    // Two empty bins beyond each end, so a population at the top edge is a peak too.
    let width = (hi - lo) / (BINS - 4) as f64;
    let lo = lo - 2.0 * width;
    let mut hist = [0f64; BINS];
    for &v in sorted {
        let b = ((v.ln() - lo) / width).floor();
        if (0.0..BINS as f64).contains(&b) {
            hist[b as usize] += 1.0;
        }
    }
    let smooth: Vec<f64> = (0..BINS)
        .map(|i| {
            let (a, b) = (i.saturating_sub(1), (i + 1).min(BINS - 1));
            hist[a..=b].iter().sum::<f64>() / (b - a + 1) as f64
        })
        .collect();
    // Highest-K^2 local maximum that is a real peak, then the valley below it.
    let peaks: Vec<usize> = (1..BINS - 1)
        .filter(|&i| smooth[i] > 0.0 && smooth[i] >= smooth[i - 1] && smooth[i] > smooth[i + 1])
        .collect();
    // From the highest peak down: the first one separated from the flowing body below it
    // (the largest bin below the peak) by a real dip (at most 60% of both heights and
    // beyond Poisson noise), with real mass below the dip and at least
    // MIN_STATIC_FRACTION above it, is the static population.
    for &top in peaks.iter().rev() {
        let Some(body) = (0..top).max_by(|&a, &b| smooth[a].total_cmp(&smooth[b])) else {
            continue;
        };
        let Some(valley_at) = (body..top).min_by(|&a, &b| smooth[a].total_cmp(&smooth[b])) else {
            continue;
        };
        let valley = smooth[valley_at];
        let below: f64 = hist[..valley_at].iter().sum();
        let dip = valley <= 0.6 * smooth[top].min(smooth[body])
            && smooth[top] - valley > 3.0 * valley.max(1.0).sqrt();
        if valley_at == body || !dip || below < 0.05 * n as f64 {
            continue;
        }
        let cut = (lo + (valley_at as f64 + 0.5) * width).exp();
        let from = sorted.partition_point(|&v| v < cut);
        let fraction = (n - from) as f64 / n as f64;
        if fraction >= MIN_STATIC_FRACTION {
            return Some((from, fraction));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    /// Deterministic pseudo-noise in [-1, 1].
    fn noise(i: usize) -> f64 {
        // splitmix64
        let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        2.0 * ((z >> 11) as f64 / (1u64 << 53) as f64) - 1.0
    }

    fn k_map(f: impl Fn(usize, usize) -> f64) -> Array2<f32> {
        Array2::from_shape_fn((120, 120), |(y, x)| f(y, x).sqrt() as f32)
    }

    #[test]
    fn a_static_region_is_found_and_gives_its_mean_k2() {
        let k = k_map(|y, x| {
            let n = noise(y * 120 + x);
            if x < 24 {
                0.5 * (1.0 + 0.1 * n)
            } else {
                0.06 * (1.0 + 0.3 * n)
            }
        });
        let e = estimate_beta(k.view(), None, None, false).unwrap();
        assert!(e.plateau && e.reliable, "{e:?}");
        assert!((e.beta / 0.5 - 1.0).abs() < 0.03, "{e:?}");
        assert!((e.static_fraction - 0.2).abs() < 0.03, "{e:?}");
    }

    #[test]
    fn a_field_without_static_region_is_marked_unreliable() {
        // One flowing population, K^2 spread by noise: the p99 is no beta.
        let k = k_map(|y, x| 0.3 * (1.0 + 0.25 * noise(y * 120 + x)));
        let e = estimate_beta(k.view(), None, None, false).unwrap();
        assert!(!e.plateau && !e.reliable, "{e:?}");
        assert_eq!(e.beta, e.k2_p99);
        assert!(e.warnings[0].contains("no static region"), "{e:?}");
        // Temporal mode never trusts it.
        let e = estimate_beta(k.view(), None, None, true).unwrap();
        assert!(!e.reliable && e.warnings[0].contains("temporal"), "{e:?}");
    }

    #[test]
    fn an_estimate_far_below_the_optics_maximum_is_marked_unreliable() {
        let k = k_map(|y, x| {
            let n = noise(y * 120 + x);
            if x < 24 {
                0.05 * (1.0 + 0.1 * n)
            } else {
                0.01 * (1.0 + 0.3 * n)
            }
        });
        let e = estimate_beta(k.view(), Some(0.8), Some(7), false).unwrap();
        assert!(e.plateau, "{e:?}");
        assert!(!e.reliable && e.warnings[0].contains("far below"), "{e:?}");
        let e = estimate_beta(k.view(), Some(0.0), Some(7), false).unwrap();
        assert!(e.reliable, "tiny speckles allow a small beta: {e:?}");
    }

    #[test]
    fn beta_max_grows_with_speckle_size_and_shrinks_with_window_bias() {
        let mut last = 0.0;
        for c in [0.0, 0.2, 0.5, 0.8, 0.95] {
            let b = beta_max_for(c, None);
            assert!(b > last && b <= 1.0, "lag1 {c}: {b}");
            last = b;
            assert!(beta_max_for(c, Some(5)) < b);
        }
        // Large speckles on a 1-pixel grid: pixel averaging is negligible.
        assert!(beta_max_for(0.995, None) > 0.95);
    }

    #[test]
    fn lag1_correlation_measures_speckle_size() {
        let fine = Array2::from_shape_fn((64, 64), |(y, x)| (1.0 + noise(y * 64 + x)) as f32);
        let c = speckle_lag1_correlation(fine.view()).unwrap();
        assert!(c.abs() < 0.1, "{c}");
        let coarse = Array2::from_shape_fn((64, 64), |(y, x)| {
            (1.0 + noise((y / 4) * 64 + x / 4)) as f32
        });
        let c = speckle_lag1_correlation(coarse.view()).unwrap();
        assert!(c > 0.6, "{c}");
        assert!(speckle_lag1_correlation(Array2::<f32>::ones((8, 8)).view()).is_none());
    }

    #[test]
    fn too_few_pixels_is_an_error() {
        let k = Array2::from_elem((3, 3), f32::NAN);
        assert!(estimate_beta(k.view(), None, None, false).is_err());
    }
}
