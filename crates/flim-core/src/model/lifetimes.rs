//! Non-iterative lifetime methods, all from one pass over each decay, on the CPU (f64, rayon).
//!
//! With `N_j` the counts of bin `j = 0..M-1` of the fit range (background offset removed),
//! `h` the bin width:
//! - **RLD** (rapid lifetime determination, two equal gates of `K = M / 2` bins):
//!   `tau = K h / ln(D0 / D1)`, exact for a bin-integrated single exponential.
//! - **IEM** (integral equation method, Wu et al. 2016 Table 1): `tau = h sum C_j N_j /
//!   (N_0 - N_{M-1})`, `C_j` Simpson's coefficients (trapezoid on the last interval when `M`
//!   is even). Exact up to Simpson's O(h^4) error; the window needs no correction.
//! - **CMM** (centre of mass): the paper's `tau = (sum j N_j / N + 1/2) h` assumes the decay
//!   ends inside the window. Here the mean bin index is matched to its exact value for a
//!   bin-integrated exponential cut at `M` bins, `mu(a) = 1/(e^a - 1) - M/(e^{aM} - 1)`,
//!   `a = h / tau` (safeguarded Newton on ln a): unbiased for any window. The mean bin index
//!   is the sufficient statistic of that model, so this CMM is its maximum-likelihood
//!   estimate and reaches the Cramer-Rao bound (see tests/accuracy.rs).
//! - **Phasor** at harmonic `n`, `omega = 2 pi n / T_laser`, bin centres `t_j = (j + 1/2) h`:
//!   `g = sum N_j cos(omega t_j) / N`, `s = sum N_j sin(omega t_j) / N`; phase lifetime
//!   `s / (omega g)`, modulation lifetime `sqrt(1 / (g^2 + s^2) - 1) / omega`. A window of one
//!   laser period gives `1 / (1 - i omega tau)` exactly, binning aside (error below
//!   `(omega h)^2 / 24`). Optional calibration rotates and scales (g, s) so that a reference
//!   of known lifetime lands on its theoretical point.
//!
//! Pixels with fewer photons than the threshold (after the background offset) are masked:
//! every lifetime NaN, status [`STATUS_MASKED`]. A method whose formula is undefined for a
//! pixel (e.g. D1 <= 0 for RLD) gives NaN for that method only; methods not selected
//! ([`Analysis::with_methods`]) give NaN everywhere.

use crate::error::{Result, invalid};
use crate::model::tuning::GpuTuning;
use ndarray::Array2;
use rayon::prelude::*;

/// Status of a pixel: analysed.
pub const STATUS_OK: u8 = 0;
/// Status of a pixel: below the photon threshold, not analysed.
pub const STATUS_MASKED: u8 = 1;

/// A set of non-iterative methods (combine with `|`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Methods(u8);

impl Methods {
    /// Rapid lifetime determination (two gates).
    pub const RLD: Self = Self(1);
    /// Integral equation method.
    pub const IEM: Self = Self(2);
    /// Centre of mass (window-corrected).
    pub const CMM: Self = Self(4);
    /// Phasor (g, s) with phase and modulation lifetimes.
    pub const PHASOR: Self = Self(8);
    /// Every method.
    pub const ALL: Self = Self(15);

    /// Whether every method of `other` is in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bit set (for the GPU kernels).
    pub fn bits(self) -> u32 {
        u32::from(self.0)
    }
}

impl std::ops::BitOr for Methods {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// Settings of [`analyse`](crate::analyse) (builder style).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Analysis {
    first: usize,
    bins: Option<usize>,
    threshold: f64,
    offset: f64,
    harmonic: u32,
    calibration: Calibration,
    methods: Methods,
    tuning: GpuTuning,
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
            methods: Methods::ALL,
            tuning: GpuTuning::default(),
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

    /// The correction from a reference decay (e.g. a measured IRF, `tau_ns = 0`, or a dye
    /// of known lifetime) recorded with the same bins, over the range and harmonic of `opts`.
    /// Its calibration, photon threshold and offset are ignored: the reference is one decay
    /// of any scale (an IRF normalised to 1 included), with its own background, as the CLI's
    /// `--calibrate` uses it.
    ///
    /// ```
    /// use flim_core::{Analysis, Calibration};
    /// // An instantaneous response: every photon in bin 0.
    /// let mut irf = vec![0.0; 64];
    /// irf[0] = 1000.0;
    /// let cal = Calibration::from_reference_decay(&irf, 0.2, 12.8, 0.0, &Analysis::default())?;
    /// // Bin 0's centre is 0.1 ns: the calibration undoes that delay.
    /// assert!((cal.phase + 2.0 * std::f64::consts::PI * 0.1 / 12.8).abs() < 1e-12);
    /// // The data's threshold and offset do not apply to the reference (here scaled to 1).
    /// irf[0] = 1.0;
    /// let data = Analysis::default().with_threshold(50.0).with_offset(2.0);
    /// assert_eq!(Calibration::from_reference_decay(&irf, 0.2, 12.8, 0.0, &data)?, cal);
    /// # Ok::<(), flim_core::Error>(())
    /// ```
    pub fn from_reference_decay(
        decay: &[f64],
        bin_ns: f64,
        period_ns: f64,
        tau_ns: f64,
        opts: &Analysis,
    ) -> Result<Self> {
        let raw = opts
            .with_calibration(Self::IDENTITY)
            .with_threshold(0.0)
            .with_offset(0.0)
            .with_methods(Methods::PHASOR);
        let d = analyse_decay(decay, bin_ns, period_ns, &raw)?;
        let omega = 2.0 * std::f64::consts::PI * f64::from(opts.harmonic) / period_ns;
        Self::from_reference(d.g, d.s, tau_ns, omega)
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

    /// The methods to compute (the others' maps are NaN). Default [`Methods::ALL`].
    pub fn with_methods(mut self, methods: Methods) -> Self {
        self.methods = methods;
        self
    }

    /// How the GPU path runs (workers, chunk size); results do not depend on it.
    pub fn with_tuning(mut self, tuning: GpuTuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// The GPU path's tuning.
    pub fn tuning(&self) -> GpuTuning {
        self.tuning
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
        if !(bin_ns.is_finite() && bin_ns > 0.0 && period_ns.is_finite() && period_ns > 0.0) {
            return Err(invalid(
                "bin width / period",
                format!("{bin_ns} / {period_ns} ns"),
                "must be finite and > 0",
            ));
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
        let (cos_t, sin_t): (Vec<f64>, Vec<f64>) = (0..m)
            .map(|j| {
                let t = (j as f64 + 0.5) * bin_ns;
                ((omega * t).cos(), (omega * t).sin())
            })
            .unzip();
        let simpson = simpson(m);
        let sum = |v: &[f64]| v.iter().sum::<f64>();
        Ok(Setup {
            first: self.first,
            m,
            h: bin_ns,
            omega,
            offset: self.offset,
            threshold: self.threshold,
            methods: self.methods,
            index: (0..m).map(|j| j as f64).collect(),
            sum_simpson: sum(&simpson),
            simpson6: simpson.iter().map(|w| (w * 6.0).round() as u32).collect(),
            index_u32: (0..m as u32).collect(),
            sum_cos: sum(&cos_t),
            sum_sin: sum(&sin_t),
            simpson,
            cos_t,
            sin_t,
            cal_cos: c.modulation * c.phase.cos(),
            cal_sin: c.modulation * c.phase.sin(),
            cmm_start: None,
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
    pub methods: Methods,
    /// `j` as f64, for the first moment.
    pub index: Vec<f64>,
    pub simpson: Vec<f64>,
    /// `6 x` the Simpson weights: integers (2, 8, 4, ..., and 3 for the trapezoid), so that
    /// integer counts sum exactly ([`sums_int`]).
    pub simpson6: Vec<u32>,
    /// `j` as u32, for the integer first moment.
    pub index_u32: Vec<u32>,
    pub cos_t: Vec<f64>,
    pub sin_t: Vec<f64>,
    pub sum_simpson: f64,
    pub sum_cos: f64,
    pub sum_sin: f64,
    pub cal_cos: f64,
    pub cal_sin: f64,
    /// CMM's solver starts: set by the CPU image path ([`analyse`](crate::analyse)) where CMM is wanted; a
    /// single decay and the GPU paths do without (the table costs about 300 solves).
    pub cmm_start: Option<CmmStart>,
}

/// The phasor (g, s) of a decay, uncalibrated, with the conventions of
/// [`analyse`](crate::analyse): bins `first..first + m`, bin centres at `(j + 1/2) h` from
/// the range start, `omega` in rad/ns (e.g. a reference's phasor for [`Calibration::from_reference`]).
pub fn decay_phasor(decay: &[f64], first: usize, m: usize, h: f64, omega: f64) -> (f64, f64) {
    let (mut n, mut gc, mut gs) = (0.0, 0.0, 0.0);
    for (j, &v) in decay.iter().skip(first).take(m).enumerate() {
        let t = (j as f64 + 0.5) * h;
        n += v;
        gc += v * (omega * t).cos();
        gs += v * (omega * t).sin();
    }
    (gc / n, gs / n)
}

/// Composite Simpson weights for `m` equally spaced samples (trapezoid on the last
/// interval when `m` is even).
pub(crate) fn simpson(m: usize) -> Vec<f64> {
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
        Self::with_planes(h, w, [true; 8])
    }

    /// Maps of `h` x `w` pixels: the planes (in the order of [`PLANES`]) marked in `written`
    /// zero, to be written by the caller, the others NaN (methods not asked for); made on
    /// all cores.
    pub(crate) fn with_planes(h: usize, w: usize, written: [bool; 8]) -> Self {
        let mut planes = written
            .into_par_iter()
            .map(|z| Array2::from_elem((h, w), if z { 0.0 } else { f32::NAN }))
            .collect::<Vec<_>>()
            .into_iter();
        let mut z = || planes.next().expect("eight planes");
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

/// The values of [`LifetimeMaps`] for one decay, in f64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecayLifetimes {
    /// Photons in the fit range after the offset.
    pub intensity: f64,
    /// RLD lifetime (ns).
    pub tau_rld: f64,
    /// IEM lifetime (ns).
    pub tau_iem: f64,
    /// CMM lifetime (ns).
    pub tau_cmm: f64,
    /// Phasor g (calibrated).
    pub g: f64,
    /// Phasor s (calibrated).
    pub s: f64,
    /// Phase lifetime (ns).
    pub tau_phase: f64,
    /// Modulation lifetime (ns).
    pub tau_mod: f64,
    /// Below the photon threshold: every lifetime NaN.
    pub masked: bool,
}

/// Every non-iterative lifetime of one decay (e.g. a region's summed decay or a reference
/// measurement), `decay[j]` the counts of bin `j`, with the same formulas as
/// [`analyse`](crate::analyse).
///
/// ```
/// use flim_core::{Analysis, analyse_decay};
/// // A noiseless bin-integrated 2 ns decay over 256 bins of 50 ps.
/// let decay: Vec<f64> = (0..256).map(|j| 1000.0 * (-(j as f64) * 0.05 / 2.0).exp()).collect();
/// let d = analyse_decay(&decay, 0.05, 12.8, &Analysis::default())?;
/// assert!((d.tau_cmm - 2.0).abs() < 1e-9);
/// assert!((d.tau_rld - 2.0).abs() < 1e-9);
/// # Ok::<(), flim_core::Error>(())
/// ```
pub fn analyse_decay(
    decay: &[f64],
    bin_ns: f64,
    period_ns: f64,
    opts: &Analysis,
) -> Result<DecayLifetimes> {
    let su = opts.setup(decay.len(), bin_ns, period_ns)?;
    let v = &decay[su.first..su.first + su.m];
    let (x, status) = finish(&sums(v, &su), &su);
    Ok(DecayLifetimes {
        intensity: x[0],
        tau_rld: x[1],
        tau_iem: x[2],
        tau_cmm: x[3],
        g: x[4],
        s: x[5],
        tau_phase: x[6],
        tau_mod: x[7],
        masked: status == STATUS_MASKED,
    })
}

/// Sums of one decay that every method reads, the offset already removed.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sums {
    /// Photons.
    pub n: f64,
    /// First moment, sum j N_j.
    pub m1: f64,
    /// Simpson integral, sum C_j N_j.
    pub simp: f64,
    /// RLD gates.
    pub d0: f64,
    pub d1: f64,
    /// Uncalibrated phasor numerators.
    pub gc: f64,
    pub gs: f64,
    /// First and last bin.
    pub first: f64,
    pub last: f64,
}

/// `sum a_j b_j` with eight independent accumulators: the compiler keeps them in vector
/// registers (IEEE order is fixed by the code, so results do not depend on the CPU).
#[inline(always)]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let (ca, ra) = a.as_chunks::<8>();
    let (cb, rb) = b[..a.len()].as_chunks::<8>();
    let mut acc = [0.0f64; 8];
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0.0;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    fold8(acc) + tail
}

/// The sum of eight accumulators in the one order every sum here uses (pairs four apart,
/// then pairs of pairs): the vectorised and the portable code fold alike, so they agree bit
/// for bit.
#[inline(always)]
fn fold8(a: [f64; 8]) -> f64 {
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
}

/// `(dot(a, b), dot(a, c))` in one pass over `a`, each bit for bit as [`dot`] gives it.
#[inline(always)]
fn dot2(a: &[f64], b: &[f64], c: &[f64]) -> (f64, f64) {
    let n8 = a.len() / 8 * 8;
    let (b, c) = (&b[..a.len()], &c[..a.len()]);
    // Two separate accumulator arrays (not one [[f64; 8]; 2]): the compiler keeps each in
    // whole vector registers.
    let mut acc0 = [0.0f64; 8];
    let mut acc1 = [0.0f64; 8];
    for ((x, y), z) in a[..n8]
        .chunks_exact(8)
        .zip(b[..n8].chunks_exact(8))
        .zip(c[..n8].chunks_exact(8))
    {
        for i in 0..8 {
            acc0[i] += x[i] * y[i];
            acc1[i] += x[i] * z[i];
        }
    }
    let mut tail = [0.0f64; 2];
    for ((x, y), z) in a[n8..].iter().zip(&b[n8..]).zip(&c[n8..]) {
        tail[0] += x * y;
        tail[1] += x * z;
    }
    (fold8(acc0) + tail[0], fold8(acc1) + tail[1])
}

/// `(total(a), dot(a, b))` in one pass over `a`, each bit for bit as those give it.
#[inline(always)]
fn total_dot(a: &[f64], b: &[f64]) -> (f64, f64) {
    let (ca, ra) = a.as_chunks::<8>();
    let (cb, rb) = b[..a.len()].as_chunks::<8>();
    let mut acc = [[0.0f64; 8]; 2];
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..8 {
            acc[0][i] += x[i];
            acc[1][i] += x[i] * y[i];
        }
    }
    let tail_sum: f64 = ra.iter().sum();
    let mut tail_dot = 0.0;
    for (x, y) in ra.iter().zip(rb) {
        tail_dot += x * y;
    }
    (fold8(acc[0]) + tail_sum, fold8(acc[1]) + tail_dot)
}

/// `sum a_j`, eight accumulators.
#[inline(always)]
fn total(a: &[f64]) -> f64 {
    let (ca, ra) = a.as_chunks::<8>();
    let mut acc = [0.0f64; 8];
    for x in ca {
        for i in 0..8 {
            acc[i] += x[i];
        }
    }
    let tail: f64 = ra.iter().sum();
    fold8(acc) + tail
}

/// The sums of the `m` counts `v` (raw, offset not yet removed) that the selected methods need.
#[inline(always)]
pub(crate) fn sums(v: &[f64], su: &Setup) -> Sums {
    let (m, o) = (su.m, su.offset);
    let k = m / 2;
    let mf = m as f64;
    let want = su.methods;
    // CMM's first moment rides along with the photon count.
    let (n, m1) = if want.contains(Methods::CMM) {
        total_dot(v, &su.index)
    } else {
        (total(v), 0.0)
    };
    let mut s = Sums {
        n: n - mf * o,
        first: v[0] - o,
        last: v[m - 1] - o,
        ..Sums::default()
    };
    if want.contains(Methods::RLD) {
        s.d0 = total(&v[..k]) - k as f64 * o;
        s.d1 = total(&v[k..2 * k]) - k as f64 * o;
    }
    if want.contains(Methods::IEM) {
        s.simp = dot(v, &su.simpson) - o * su.sum_simpson;
    }
    if want.contains(Methods::CMM) {
        s.m1 = m1 - o * 0.5 * mf * (mf - 1.0);
    }
    if want.contains(Methods::PHASOR) {
        let (gc, gs) = dot2(v, &su.cos_t, &su.sin_t);
        s.gc = gc - o * su.sum_cos;
        s.gs = gs - o * su.sum_sin;
    }
    s
}

/// Integer counts summed exactly: u16 in u32 lanes (twice the vector width of u64), u32 in
/// u64.
pub(crate) trait IntCount: Copy + Into<u64> + Into<f64> {
    /// `sum a_j`, exact.
    fn total(a: &[Self]) -> u64;
    /// `sum w_j a_j` with small integer weights (`w_j < 2^16`), exact.
    fn weighted(a: &[Self], w: &[u32]) -> u64;
    /// The phasor sums `(dot(a, cos), dot(a, sin))` in f64, bit for bit as [`dot2`] gives
    /// them on the counts widened to f64 (`buf` is scratch).
    #[inline(always)]
    fn phasor(a: &[Self], cos: &[f64], sin: &[f64], buf: &mut Vec<f64>) -> (f64, f64) {
        buf.clear();
        buf.extend(a.iter().map(|&x| -> f64 { x.into() }));
        dot2(buf, cos, sin)
    }
}

impl IntCount for u16 {
    #[inline(always)]
    fn phasor(a: &[Self], cos: &[f64], sin: &[f64], buf: &mut Vec<f64>) -> (f64, f64) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { dot2_u16_avx2(a, cos, sin) };
        }
        buf.clear();
        buf.extend(a.iter().map(|&x| f64::from(x)));
        dot2(buf, cos, sin)
    }

    #[inline(always)]
    fn total(a: &[Self]) -> u64 {
        // 65,536 counts of at most 65,535 stay below 2^32.
        a.chunks(1 << 16)
            .map(|c| u64::from(c.iter().map(|&x| u32::from(x)).sum::<u32>()))
            .sum()
    }
    #[inline(always)]
    fn weighted(a: &[Self], w: &[u32]) -> u64 {
        a.iter()
            .zip(w)
            .map(|(&x, &w)| u64::from(u32::from(x) * w))
            .sum()
    }
}

impl IntCount for u32 {
    #[inline(always)]
    fn total(a: &[Self]) -> u64 {
        a.iter().map(|&x| u64::from(x)).sum()
    }
    #[inline(always)]
    fn weighted(a: &[Self], w: &[u32]) -> u64 {
        a.iter()
            .zip(w)
            .map(|(&x, &w)| u64::from(x) * u64::from(w))
            .sum()
    }
}

/// [`dot2`] of u16 counts with AVX2, bit for bit: lanes 0-3 and 4-7 of its eight
/// accumulators are two vectors, each product rounded and then added (no fused multiply-add),
/// the tail and the fold as [`dot2`] does them. The compiler's own vectorisation of
/// [`dot2`] stays two lanes wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot2_u16_avx2(a: &[u16], b: &[f64], c: &[f64]) -> (f64, f64) {
    use std::arch::x86_64::{
        __m256d, _mm_cvtepu16_epi32, _mm_loadl_epi64, _mm256_add_pd, _mm256_cvtepi32_pd,
        _mm256_loadu_pd, _mm256_mul_pd, _mm256_setzero_pd, _mm256_storeu_pd,
    };
    let n8 = a.len() / 8 * 8;
    let (b, c) = (&b[..a.len()], &c[..a.len()]);
    let (mut g_lo, mut g_hi, mut s_lo, mut s_hi) = (
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
        _mm256_setzero_pd(),
    );
    let mut j = 0;
    while j < n8 {
        // SAFETY: j + 8 <= n8 <= a.len() = b.len() = c.len(): every load is in bounds;
        // unaligned loads are allowed.
        unsafe {
            let lo4 = _mm_loadl_epi64(a.as_ptr().add(j).cast());
            let hi4 = _mm_loadl_epi64(a.as_ptr().add(j + 4).cast());
            let (x_lo, x_hi): (__m256d, __m256d) = (
                _mm256_cvtepi32_pd(_mm_cvtepu16_epi32(lo4)),
                _mm256_cvtepi32_pd(_mm_cvtepu16_epi32(hi4)),
            );
            let (b_lo, b_hi) = (
                _mm256_loadu_pd(b.as_ptr().add(j)),
                _mm256_loadu_pd(b.as_ptr().add(j + 4)),
            );
            let (c_lo, c_hi) = (
                _mm256_loadu_pd(c.as_ptr().add(j)),
                _mm256_loadu_pd(c.as_ptr().add(j + 4)),
            );
            g_lo = _mm256_add_pd(g_lo, _mm256_mul_pd(x_lo, b_lo));
            g_hi = _mm256_add_pd(g_hi, _mm256_mul_pd(x_hi, b_hi));
            s_lo = _mm256_add_pd(s_lo, _mm256_mul_pd(x_lo, c_lo));
            s_hi = _mm256_add_pd(s_hi, _mm256_mul_pd(x_hi, c_hi));
        }
        j += 8;
    }
    let lanes = |lo: __m256d, hi: __m256d| -> [f64; 8] {
        let mut out = [0.0f64; 8];
        // SAFETY: `out` holds eight f64, two stores of four.
        unsafe {
            _mm256_storeu_pd(out.as_mut_ptr(), lo);
            _mm256_storeu_pd(out.as_mut_ptr().add(4), hi);
        }
        out
    };
    let (acc0, acc1) = (lanes(g_lo, g_hi), lanes(s_lo, s_hi));
    let mut tail = [0.0f64; 2];
    for ((&x, y), z) in a[n8..].iter().zip(&b[n8..]).zip(&c[n8..]) {
        let x = f64::from(x);
        tail[0] += x * y;
        tail[1] += x * z;
    }
    (fold8(acc0) + tail[0], fold8(acc1) + tail[1])
}

/// [`sums`] for integer counts: every sum but the phasor's is an integer sum, exact in u64
/// (and so in f64, below 2^53), which the compiler vectorises freely (integer addition is
/// associative); only the phasor, if asked for, converts the counts to f64 (into `buf`).
/// The IEM's Simpson sum is exact too (integer weights `6 x` Simpson's, divided once).
#[inline(always)]
pub(crate) fn sums_int<U: IntCount>(v: &[U], su: &Setup, buf: &mut Vec<f64>) -> Sums {
    let (m, o) = (su.m, su.offset);
    let k = m / 2;
    let mf = m as f64;
    let want = su.methods;
    let first: f64 = v[0].into();
    let last: f64 = v[m - 1].into();
    let mut s = Sums {
        first: first - o,
        last: last - o,
        ..Sums::default()
    };
    if want.contains(Methods::RLD) {
        let (d0, d1) = (U::total(&v[..k]), U::total(&v[k..2 * k]));
        s.n = (d0 + d1 + U::total(&v[2 * k..])) as f64 - mf * o;
        s.d0 = d0 as f64 - k as f64 * o;
        s.d1 = d1 as f64 - k as f64 * o;
    } else {
        s.n = U::total(v) as f64 - mf * o;
    }
    if want.contains(Methods::IEM) {
        s.simp = U::weighted(v, &su.simpson6) as f64 / 6.0 - o * su.sum_simpson;
    }
    if want.contains(Methods::CMM) {
        s.m1 = U::weighted(v, &su.index_u32) as f64 - o * 0.5 * mf * (mf - 1.0);
    }
    if want.contains(Methods::PHASOR) {
        let (gc, gs) = U::phasor(v, &su.cos_t, &su.sin_t, buf);
        s.gc = gc - o * su.sum_cos;
        s.gs = gs - o * su.sum_sin;
    }
    s
}

/// `B(x) = 1/(e^x - 1) - 1/x`, smooth through 0 (Bernoulli series below 0.1).
fn b_fn(x: f64) -> f64 {
    if x < 0.1 {
        let x2 = x * x;
        -0.5 + x * (1.0 / 12.0 - x2 * (1.0 / 720.0 - x2 * (1.0 / 30240.0 - x2 / 1_209_600.0)))
    } else {
        1.0 / x.exp_m1() - 1.0 / x
    }
}

/// `B'(x)`.
pub(crate) fn b_deriv(x: f64) -> f64 {
    if x < 0.1 {
        let x2 = x * x;
        1.0 / 12.0 - x2 * (1.0 / 240.0 - x2 * (1.0 / 6048.0 - x2 / 172_800.0))
    } else {
        let sh = (0.5 * x).sinh();
        1.0 / (x * x) - 0.25 / (sh * sh)
    }
}

/// Mean bin index of a bin-integrated exponential with `a = h / tau`, cut at `m` bins:
/// `1/(e^a - 1) - m/(e^{am} - 1) = B(a) - m B(am)` (no cancellation as a -> 0).
pub(crate) fn mean_bin(a: f64, m: f64) -> f64 {
    b_fn(a) - m * b_fn(a * m)
}

/// `a = h / tau` whose window-cut mean bin index is `mu`, from the untruncated inverse
/// `ln(1 + 1/mu)`, kept inside a shrinking bracket over [1e-6, 60] (bisection in ln a
/// where a step leaves it); 0 (tau = inf) when `mu` is at or above the flat-decay value
/// (m - 1) / 2, NaN when `mu <= 0`. Where `a m >= 1` the mean and its first two
/// derivatives come from `r = e^-a` and `e^{-am}` (two exponentials per step, no
/// cancellation there) and Halley's method converges cubically: two steps from the start
/// for typical decays. Below, Newton on the series-backed `B` form.
pub(crate) fn cmm_rate(mu: f64, m: f64) -> f64 {
    cmm_rate_from(mu, m, None)
}

/// [`cmm_rate`] from the start `table` gives for `mu` (one Halley step for typical
/// decays) where it covers `mu`, else from `ln(1 + 1/mu)`.
pub(crate) fn cmm_rate_from(mu: f64, m: f64, table: Option<&CmmStart>) -> f64 {
    if mu.is_nan() || mu <= 0.0 {
        return f64::NAN;
    }
    if mu >= 0.5 * (m - 1.0) {
        return 0.0;
    }
    let (mut lo, mut hi) = (1e-6f64, 60.0f64);
    let start = table
        .and_then(|t| t.start(mu))
        .unwrap_or_else(|| (1.0 / mu).ln_1p());
    let mut a = start.clamp(lo, hi);
    for _ in 0..100 {
        let (f, step) = if a * m >= 1.0 {
            let r = (-a).exp();
            let rm = (-a * m).exp();
            let (q, qm) = (1.0 - r, 1.0 - rm);
            let f = r / q - m * rm / qm - mu;
            let d1 = -r / (q * q) + m * m * rm / (qm * qm);
            let d2 = r * (1.0 + r) / (q * q * q) - m * m * m * rm * (1.0 + rm) / (qm * qm * qm);
            (f, -2.0 * f * d1 / (2.0 * d1 * d1 - f * d2))
        } else {
            let f = mean_bin(a, m) - mu;
            (f, -f / (b_deriv(a) - m * m * b_deriv(a * m)))
        };
        if f == 0.0 {
            return a;
        }
        // The mean falls with a.
        if f > 0.0 {
            lo = a;
        } else {
            hi = a;
        }
        let next = if a + step > lo && a + step < hi {
            a + step
        } else {
            (lo * hi).sqrt()
        };
        // Halley's error after a step of relative size e is O(e^3); Newton's O(e^2).
        let e = (next - a).abs() / a;
        let done = if a * m >= 1.0 { e <= 1e-5 } else { e <= 1e-7 } || hi - lo <= 1e-14 * hi;
        a = next;
        if done {
            break;
        }
    }
    a
}

/// Starts for [`cmm_rate`] in a window of `m` bins: `g(u) = a / (mu_max - mu)` at
/// `u = ln mu` (`mu_max = (m - 1) / 2`, where `a -> 0`; `g` stays smooth and away from 0
/// there, so its interpolation error is relative to `a` everywhere) on a uniform grid
/// (steps of 1/32 over mean bin indices 0.01 to `mu_max`), with its slope, interpolated by
/// cubic Hermite. Built once per image analysis (about 300 solves). A start within 1e-7 lets the
/// solve stop after one step (its step is below the stopping test) instead of three or
/// four, and that step still lands on the solution (at least as closely as from the
/// plain start): the result is the solve's, not the table's.
#[derive(Debug, Clone)]
pub(crate) struct CmmStart {
    mu_max: f64,
    u0: f64,
    /// Last `u` the grid covers.
    u1: f64,
    /// `g` and `dg/du` at each node.
    nodes: Vec<[f64; 2]>,
}

impl CmmStart {
    const PER_UNIT: f64 = 32.0;
    const LOWEST_MEAN: f64 = 0.01;

    pub(crate) fn new(m: f64) -> Self {
        let mu_max = 0.5 * (m - 1.0);
        let u0 = Self::LOWEST_MEAN.ln();
        let count = ((mu_max.ln() - u0) * Self::PER_UNIT).floor().max(1.0) as usize;
        let nodes = (0..count)
            .map(|k| {
                let mu = (u0 + k as f64 / Self::PER_UNIT).exp();
                // The solve stops once its step is below 1e-5 (or bisects): two more Newton
                // steps make the node exact to rounding.
                let slope = |a: f64| b_deriv(a) - m * m * b_deriv(a * m);
                let mut a = cmm_rate(mu, m);
                for _ in 0..2 {
                    a -= (mean_bin(a, m) - mu) / slope(a);
                }
                // da/du = mu da/dmu.
                let da = mu / slope(a);
                let gap = mu_max - mu;
                [a / gap, (da * gap + a * mu) / (gap * gap)]
            })
            .collect::<Vec<_>>();
        let u1 = u0 + (nodes.len() - 1) as f64 / Self::PER_UNIT;
        Self {
            mu_max,
            u0,
            u1,
            nodes,
        }
    }

    /// The interpolated rate for mean bin index `mu`, or `None` outside the grid.
    #[inline]
    pub(crate) fn start(&self, mu: f64) -> Option<f64> {
        let u = mu.ln();
        if !(u >= self.u0 && u < self.u1) {
            return None;
        }
        let x = (u - self.u0) * Self::PER_UNIT;
        let k = x as usize;
        let t = x - k as f64;
        let ([g0, d0], [g1, d1]) = (self.nodes[k], self.nodes[k + 1]);
        let h = 1.0 / Self::PER_UNIT;
        let (t2, t3) = (t * t, t * t * t);
        let g = (2.0 * t3 - 3.0 * t2 + 1.0) * g0
            + (t3 - 2.0 * t2 + t) * h * d0
            + (3.0 * t2 - 2.0 * t3) * g1
            + (t3 - t2) * h * d1;
        Some(g * (self.mu_max - mu))
    }
}

/// The eight values of one pixel from its sums, and its status.
#[inline(always)]
pub(crate) fn finish(s: &Sums, su: &Setup) -> ([f64; 8], u8) {
    let nan = f64::NAN;
    let n = s.n;
    let mut out = [n, nan, nan, nan, nan, nan, nan, nan];
    if !(n >= su.threshold && n > 0.0) {
        return (out, STATUS_MASKED);
    }
    let want = su.methods;
    if want.contains(Methods::RLD) && s.d1 > 0.0 && s.d0 > s.d1 {
        out[1] = (su.m / 2) as f64 * su.h / (s.d0 / s.d1).ln();
    }
    if want.contains(Methods::IEM) && s.first > s.last {
        out[2] = su.h * s.simp / (s.first - s.last);
    }
    if want.contains(Methods::CMM) {
        out[3] = su.h / cmm_rate_from(s.m1 / n, su.m as f64, su.cmm_start.as_ref());
    }
    if want.contains(Methods::PHASOR) {
        let (g0, s0) = (s.gc / n, s.gs / n);
        let g = su.cal_cos * g0 - su.cal_sin * s0;
        let sv = su.cal_sin * g0 + su.cal_cos * s0;
        out[4] = g;
        out[5] = sv;
        out[6] = sv / (su.omega * g);
        out[7] = (1.0 / (g * g + sv * sv) - 1.0).sqrt() / su.omega;
    }
    (out, STATUS_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integer counts: the exact integer sums equal the f64 sums (which are exact too for
    /// these counts) for the count, the gates, the first moment and the phasor; the Simpson
    /// sum, summed with integer weights and divided once, within 1e-15 relative.
    #[test]
    fn integer_sums_match_the_f64_sums() {
        for m in [4usize, 5, 17, 256, 1000] {
            let su = Analysis::default()
                .with_offset(0.25)
                .setup(m, 0.05, 12.8)
                .unwrap();
            let v16: Vec<u16> = (0..m).map(|j| ((j * 7919 + 13) % 65_536) as u16).collect();
            let v32: Vec<u32> = v16.iter().map(|&x| u32::from(x) * 3_001).collect();
            let f16: Vec<f64> = v16.iter().map(|&x| f64::from(x)).collect();
            let f32s: Vec<f64> = v32.iter().map(|&x| f64::from(x)).collect();
            let mut buf = Vec::new();
            for (a, b) in [
                (sums_int(&v16, &su, &mut buf), sums(&f16, &su)),
                (sums_int(&v32, &su, &mut buf), sums(&f32s, &su)),
            ] {
                assert_eq!(a.n, b.n, "m {m}");
                assert_eq!((a.d0, a.d1, a.m1), (b.d0, b.d1, b.m1), "m {m}");
                assert_eq!((a.gc, a.gs), (b.gc, b.gs), "m {m}");
                assert_eq!((a.first, a.last), (b.first, b.last), "m {m}");
                assert!((a.simp - b.simp).abs() <= 1e-15 * b.simp.abs(), "m {m}");
            }
        }
    }

    /// The count and first moment in one pass are the separate sums, bit for bit.
    #[test]
    fn total_dot_is_total_and_dot() {
        for len in [4usize, 8, 13, 256, 1023] {
            let a: Vec<f64> = (0..len).map(|j| ((j * 7919) % 113) as f64 * 0.37).collect();
            let b: Vec<f64> = (0..len).map(|j| j as f64).collect();
            let (t, d) = total_dot(&a, &b);
            assert_eq!(t.to_bits(), total(&a).to_bits());
            assert_eq!(d.to_bits(), dot(&a, &b).to_bits());
        }
    }

    /// The fused phasor sums are the separate ones, bit for bit (tail included).
    #[test]
    fn dot2_is_two_dots() {
        let a: Vec<f64> = (0..37).map(|i| (i as f64 * 0.37).sin() * 100.0).collect();
        let b: Vec<f64> = (0..37).map(|i| (i as f64 * 0.11).cos()).collect();
        let c: Vec<f64> = (0..37).map(|i| (i as f64 * 0.23).sin()).collect();
        let (x, y) = dot2(&a, &b, &c);
        assert_eq!(x.to_bits(), dot(&a, &b).to_bits());
        assert_eq!(y.to_bits(), dot(&a, &c).to_bits());
    }

    /// The stable form matches the direct formula where the direct one is accurate.
    #[test]
    fn mean_bin_matches_the_direct_formula() {
        for &a in &[0.05, 0.099, 0.1, 0.3, 1.0, 4.0, 20.0] {
            for &m in &[4.0, 17.0, 256.0] {
                let direct = 1.0 / f64::exp_m1(a) - m / f64::exp_m1(a * m);
                let stable = mean_bin(a, m);
                assert!(
                    (direct - stable).abs() < 1e-12 * (1.0 + direct.abs()),
                    "{a} {m}"
                );
            }
        }
        // Flat limit: (m - 1) / 2 - a (m^2 - 1) / 12.
        let a = 1e-9;
        assert!((mean_bin(a, 256.0) - (127.5 - a * (256.0f64 * 256.0 - 1.0) / 12.0)).abs() < 1e-9);
    }

    #[test]
    fn cmm_rate_inverts_mean_bin() {
        for &m in &[4.0, 8.0, 256.0, 4096.0] {
            for &a in &[1e-5, 1e-3, 0.0109, 0.1, 1.0, 5.0, 40.0] {
                let mu = mean_bin(a, m);
                if mu <= 0.0 || mu >= 0.5 * (m - 1.0) {
                    continue;
                }
                let got = cmm_rate(mu, m);
                // Backward error: the recovered rate reproduces the mean bin index.
                assert!(
                    (mean_bin(got, m) - mu).abs() < 1e-12 * m,
                    "m {m} a {a}: got {got}"
                );
            }
        }
        assert!(cmm_rate(0.0, 8.0).is_nan());
        assert_eq!(cmm_rate(3.5, 8.0), 0.0);
    }

    /// The tabulated start lands within 1e-7 of the rate (both branches stop after one step)
    /// wherever it covers the mean, and the solve from it is as close to the true rate as
    /// the solve from `ln(1 + 1/mu)` (or within 1e-9) and reproduces the mean to 1e-12 m.
    #[test]
    fn cmm_start_is_close_and_changes_no_result() {
        let mut covered = 0;
        for &m in &[4.0, 8.0, 256.0, 4096.0] {
            let table = CmmStart::new(m);
            for i in 0..2000 {
                let a = 1e-5 * (60.0f64 / 1e-5).powf(f64::from(i) / 1999.0);
                let mu = mean_bin(a, m);
                if mu <= 0.0 || mu >= 0.5 * (m - 1.0) {
                    continue;
                }
                let plain = cmm_rate(mu, m);
                let Some(start) = table.start(mu) else {
                    continue;
                };
                assert!((start - a).abs() <= 1e-7 * a, "m {m} a {a}: start {start}");
                let tabled = cmm_rate_from(mu, m, Some(&table));
                assert!(
                    (tabled - a).abs() <= (plain - a).abs().max(1e-9 * a),
                    "m {m} a {a}: {tabled}, from ln(1 + 1/mu) {plain}"
                );
                assert!(
                    (mean_bin(tabled, m) - mu).abs() < 1e-12 * m,
                    "m {m} a {a}: {tabled}"
                );
                covered += 1;
            }
            assert!(table.start(0.001).is_none() && table.start(0.5 * (m - 1.0)).is_none());
            assert!(cmm_rate_from(f64::NAN, m, Some(&table)).is_nan());
        }
        assert!(covered > 3000, "{covered}");
    }
}
