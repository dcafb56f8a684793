//! Non-iterative lifetime methods, all from one pass over each decay, on the CPU (f64, rayon).
//!
//! With `N_j` the counts of bin `j = 0..M-1` of the fit range, `h` the bin width:
//! - **RLD** (rapid lifetime determination, two equal gates of `K = M / 2` bins):
//!   `tau = K h / ln(D0 / D1)`, exact for a bin-integrated single exponential.
//! - **IEM** (integral equation method, Wu et al. 2016 Table 1): `tau = h sum C_j N_j /
//!   (N_0 - N_{M-1})`, `C_j` Simpson's coefficients (trapezoid on the last interval when `M`
//!   is even). Exact up to Simpson's O(h^4) error; the window needs no correction.
//! - **CMM** (centre of mass): the paper's `tau = (sum j N_j / N + 1/2) h` assumes the decay
//!   ends inside the window. Here the mean bin index is matched to its exact value for a
//!   bin-integrated exponential cut at `M` bins, `mu(a) = 1/(e^a - 1) - M/(e^{aM} - 1)`,
//!   `a = h / tau` (bisection on ln a): unbiased for any window.
//! - **Phasor** at harmonic `n`, `omega = 2 pi n / T_laser`, bin centres `t_j = (j + 1/2) h`:
//!   `g = sum N_j cos(omega t_j) / N`, `s = sum N_j sin(omega t_j) / N`; phase lifetime
//!   `s / (omega g)`, modulation lifetime `sqrt(1 / (g^2 + s^2) - 1) / omega`. A window of one
//!   laser period gives `1 / (1 - i omega tau)` exactly, binning aside (error below
//!   `(omega h)^2 / 24`). Optional calibration rotates and scales (g, s) so that a reference
//!   of known lifetime lands on its theoretical point.
//!
//! Pixels with fewer photons than the threshold (after the background offset) are masked:
//! every lifetime NaN, status [`STATUS_MASKED`]. A method whose formula is undefined for a
//! pixel (e.g. D1 <= 0 for RLD) gives NaN for that method only.

use crate::cube::{Count, Cube};
use crate::error::{Result, invalid};
use ndarray::Array2;
use rayon::prelude::*;

/// Status of a pixel: analysed.
pub const STATUS_OK: u8 = 0;
/// Status of a pixel: below the photon threshold, not analysed.
pub const STATUS_MASKED: u8 = 1;

/// Settings of [`analyse`] (builder style).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Analysis {
    first: usize,
    bins: Option<usize>,
    threshold: f64,
    offset: f64,
    harmonic: u32,
    calibration: Calibration,
}

impl Default for Analysis {
    fn default() -> Self {
        Self {
            first: 0,
            bins: None,
            threshold: 1.0,
            offset: 0.0,
            harmonic: 1,
            calibration: Calibration::IDENTITY,
        }
    }
}

/// Rotation and scale applied to every phasor: `(g, s) -> m (g cos d - s sin d, g sin d + s cos d)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// Phase correction (rad).
    pub phase: f64,
    /// Modulation factor.
    pub modulation: f64,
}

impl Calibration {
    /// No correction.
    pub const IDENTITY: Self = Self {
        phase: 0.0,
        modulation: 1.0,
    };

    /// The correction that moves a reference measured at phasor `(g, s)` onto the point of
    /// a single exponential of `tau_ns` (0 for an IRF or scatterer) at `omega` (rad/ns).
    pub fn from_reference(g: f64, s: f64, tau_ns: f64, omega: f64) -> Result<Self> {
        let m = g.hypot(s);
        if !(m.is_finite() && m > 0.0) {
            return Err(invalid(
                "reference phasor",
                format!("({g}, {s})"),
                "needs photons",
            ));
        }
        if !(tau_ns.is_finite() && tau_ns >= 0.0) {
            return Err(invalid("reference lifetime", tau_ns, "must be >= 0 ns"));
        }
        let wt = omega * tau_ns;
        Ok(Self {
            phase: wt.atan() - s.atan2(g),
            modulation: 1.0 / (1.0 + wt * wt).sqrt() / m,
        })
    }
}

impl Analysis {
    /// Fit range: bins `first .. first + bins` (all remaining bins when `bins` is `None`).
    pub fn with_range(mut self, first: usize, bins: Option<usize>) -> Self {
        self.first = first;
        self.bins = bins;
        self
    }

    /// Pixels with fewer photons (after the offset) are masked. Default 1.
    pub fn with_threshold(mut self, photons: f64) -> Self {
        self.threshold = photons;
        self
    }

    /// Background counts per bin, subtracted before every method. Default 0.
    pub fn with_offset(mut self, counts_per_bin: f64) -> Self {
        self.offset = counts_per_bin;
        self
    }

    /// Phasor harmonic (1 = laser frequency). Default 1.
    pub fn with_harmonic(mut self, n: u32) -> Self {
        self.harmonic = n;
        self
    }

    /// Phasor calibration. Default none.
    pub fn with_calibration(mut self, c: Calibration) -> Self {
        self.calibration = c;
        self
    }

    /// The checked setup for a cube with `bins` bins of `bin_ns` and period `period_ns`.
    pub(crate) fn setup(&self, bins: usize, bin_ns: f64, period_ns: f64) -> Result<Setup> {
        let m = self.bins.unwrap_or(bins.saturating_sub(self.first));
        if self.first >= bins || m < 4 || self.first + m > bins {
            return Err(invalid(
                "fit range",
                format!("bins {}..{}", self.first, self.first + m),
                format!("must hold at least 4 of the cube's {bins} bins"),
            ));
        }
        if !(self.threshold.is_finite() && self.threshold >= 0.0) {
            return Err(invalid("threshold", self.threshold, "must be >= 0 photons"));
        }
        if !(self.offset.is_finite() && self.offset >= 0.0) {
            return Err(invalid(
                "offset",
                self.offset,
                "must be >= 0 counts per bin",
            ));
        }
        if self.harmonic == 0 {
            return Err(invalid("harmonic", 0, "must be >= 1"));
        }
        let c = self.calibration;
        if !(c.phase.is_finite() && c.modulation.is_finite() && c.modulation > 0.0) {
            return Err(invalid(
                "calibration",
                format!("{c:?}"),
                "must be finite, modulation > 0",
            ));
        }
        let omega = 2.0 * std::f64::consts::PI * f64::from(self.harmonic) / period_ns;
        let (cos_t, sin_t) = (0..m)
            .map(|j| {
                let t = (j as f64 + 0.5) * bin_ns;
                ((omega * t).cos(), (omega * t).sin())
            })
            .unzip();
        Ok(Setup {
            first: self.first,
            m,
            h: bin_ns,
            omega,
            offset: self.offset,
            threshold: self.threshold,
            simpson: simpson(m),
            cos_t,
            sin_t,
            cal_cos: c.modulation * c.phase.cos(),
            cal_sin: c.modulation * c.phase.sin(),
        })
    }
}

/// Everything the per-pixel pass needs, shared by the CPU and GPU paths.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub first: usize,
    pub m: usize,
    pub h: f64,
    pub omega: f64,
    pub offset: f64,
    pub threshold: f64,
    pub simpson: Vec<f64>,
    pub cos_t: Vec<f64>,
    pub sin_t: Vec<f64>,
    pub cal_cos: f64,
    pub cal_sin: f64,
}

/// Composite Simpson weights for `m` equally spaced samples (trapezoid on the last
/// interval when `m` is even).
fn simpson(m: usize) -> Vec<f64> {
    let odd = if m % 2 == 1 { m } else { m - 1 };
    let mut c = vec![0.0; m];
    for (j, cj) in c.iter_mut().enumerate().take(odd) {
        *cj = if j == 0 || j == odd - 1 {
            1.0 / 3.0
        } else if j % 2 == 1 {
            4.0 / 3.0
        } else {
            2.0 / 3.0
        };
    }
    if odd < m {
        c[m - 2] += 0.5;
        c[m - 1] += 0.5;
    }
    c
}

/// Lifetime maps (ns) and phasor coordinates of a cube.
#[derive(Debug, Clone, PartialEq)]
pub struct LifetimeMaps {
    /// Photons in the fit range after the offset.
    pub intensity: Array2<f32>,
    /// RLD lifetime (ns).
    pub tau_rld: Array2<f32>,
    /// IEM lifetime (ns).
    pub tau_iem: Array2<f32>,
    /// CMM lifetime, window-corrected (ns).
    pub tau_cmm: Array2<f32>,
    /// Phasor g (calibrated).
    pub g: Array2<f32>,
    /// Phasor s (calibrated).
    pub s: Array2<f32>,
    /// Phase lifetime (ns).
    pub tau_phase: Array2<f32>,
    /// Modulation lifetime (ns).
    pub tau_mod: Array2<f32>,
    /// [`STATUS_OK`] or [`STATUS_MASKED`].
    pub status: Array2<u8>,
}

impl LifetimeMaps {
    pub(crate) fn zeros(h: usize, w: usize) -> Self {
        let z = || Array2::zeros((h, w));
        Self {
            intensity: z(),
            tau_rld: z(),
            tau_iem: z(),
            tau_cmm: z(),
            g: z(),
            s: z(),
            tau_phase: z(),
            tau_mod: z(),
            status: Array2::zeros((h, w)),
        }
    }

    /// The eight float maps in the order of [`PLANES`].
    pub fn planes(&self) -> [&Array2<f32>; 8] {
        [
            &self.intensity,
            &self.tau_rld,
            &self.tau_iem,
            &self.tau_cmm,
            &self.g,
            &self.s,
            &self.tau_phase,
            &self.tau_mod,
        ]
    }

    pub(crate) fn planes_mut(&mut self) -> [&mut Array2<f32>; 8] {
        [
            &mut self.intensity,
            &mut self.tau_rld,
            &mut self.tau_iem,
            &mut self.tau_cmm,
            &mut self.g,
            &mut self.s,
            &mut self.tau_phase,
            &mut self.tau_mod,
        ]
    }
}

/// Names of [`LifetimeMaps::planes`], as written to files.
pub const PLANES: [&str; 8] = [
    "intensity",
    "tau_rld_ns",
    "tau_iem_ns",
    "tau_cmm_ns",
    "g",
    "s",
    "tau_phase_ns",
    "tau_mod_ns",
];

/// Mean bin index of a bin-integrated exponential with `a = h / tau`, cut at `m` bins.
fn mean_bin(a: f64, m: f64) -> f64 {
    1.0 / a.exp_m1() - m / (a * m).exp_m1()
}

/// `a = h / tau` whose window-cut mean bin index is `mu` (bisection on ln a over
/// [1e-6, 60]); 0 (tau = inf) when `mu` is at or above the flat-decay value (m - 1) / 2.
fn cmm_rate(mu: f64, m: f64) -> f64 {
    if mu.is_nan() || mu <= 0.0 {
        return f64::NAN;
    }
    if mu >= 0.5 * (m - 1.0) {
        return 0.0;
    }
    let (mut lo, mut hi) = ((1e-6f64).ln(), 60f64.ln());
    for _ in 0..48 {
        let mid = 0.5 * (lo + hi);
        // mean_bin decreases with a.
        if mean_bin(mid.exp(), m) > mu {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi)).exp()
}

/// The eight values of one pixel from its `m` counts, and its status.
pub(crate) fn pixel(counts: impl Iterator<Item = f64>, su: &Setup) -> ([f64; 8], u8) {
    let k = su.m / 2;
    let (mut n, mut m1, mut simp, mut d0, mut d1, mut gc, mut gs) =
        (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut first, mut last) = (0.0, 0.0);
    for (j, c) in counts.enumerate() {
        let v = c - su.offset;
        n += v;
        m1 += j as f64 * v;
        simp += su.simpson[j] * v;
        if j < k {
            d0 += v;
        } else if j < 2 * k {
            d1 += v;
        }
        gc += su.cos_t[j] * v;
        gs += su.sin_t[j] * v;
        if j == 0 {
            first = v;
        }
        last = v;
    }
    let nan = f64::NAN;
    if !(n >= su.threshold && n > 0.0) {
        return ([n, nan, nan, nan, nan, nan, nan, nan], STATUS_MASKED);
    }
    let rld = if d1 > 0.0 && d0 > d1 {
        k as f64 * su.h / (d0 / d1).ln()
    } else {
        nan
    };
    let iem = if first > last {
        su.h * simp / (first - last)
    } else {
        nan
    };
    let a = cmm_rate(m1 / n, su.m as f64);
    let cmm = su.h / a;
    let (g0, s0) = (gc / n, gs / n);
    let g = su.cal_cos * g0 - su.cal_sin * s0;
    let s = su.cal_sin * g0 + su.cal_cos * s0;
    let tau_phase = s / (su.omega * g);
    let m2 = g * g + s * s;
    let tau_mod = (1.0 / m2 - 1.0).sqrt() / su.omega;
    ([n, rld, iem, cmm, g, s, tau_phase, tau_mod], STATUS_OK)
}

/// All non-iterative lifetimes of every pixel on the CPU (f64, rows in parallel).
///
/// ```
/// use flim_core::{Analysis, Cube, analyse, sim::mono_exponential};
/// let cube = mono_exponential(&[2.5], 8, 8, 256, 0.05, 12.8, 20_000.0, 1)?;
/// let maps = analyse(&cube, &Analysis::default())?;
/// // CMM uses every photon; at 20,000 photons its spread is about 0.7%.
/// let tau = maps.tau_cmm[[4, 4]];
/// assert!((tau - 2.5).abs() < 0.1, "{tau}");
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse<T: Count>(cube: &Cube<T>, opts: &Analysis) -> Result<LifetimeMaps> {
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let (h, w) = cube.shape();
    let bins = cube.bins();
    let data = cube.as_slice();
    let mut values = vec![[0.0f64; 8]; h * w];
    let mut status = vec![0u8; h * w];
    values
        .par_iter_mut()
        .zip(status.par_iter_mut())
        .enumerate()
        .for_each(|(p, (v, st))| {
            let px = &data[p * bins + su.first..p * bins + su.first + su.m];
            let (vals, s) = pixel(px.iter().map(|&c| c.into()), &su);
            *v = vals;
            *st = s;
        });
    let mut maps = LifetimeMaps::zeros(h, w);
    for (q, plane) in maps.planes_mut().into_iter().enumerate() {
        for (dst, v) in plane.iter_mut().zip(&values) {
            *dst = v[q] as f32;
        }
    }
    maps.status = Array2::from_shape_vec((h, w), status).expect("h * w statuses");
    Ok(maps)
}
