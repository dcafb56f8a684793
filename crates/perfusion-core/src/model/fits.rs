//! What a fit returns: per-voxel statuses, the maps ([`Fits`]) and where and how they were
//! computed ([`FitInfo`]); progress and interruption ([`Control`]).

use super::kinetics::{MAX_PARAMS, Model};
use super::params::{Bounds, Method, Setup};
use super::problem::Problem;
use crate::cpu::{LANES, Scratch, SePlan, StdErrors, standard_errors};
use ndarray::{Array1, Array2};
use rayon::prelude::*;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};

/// Outcome of one voxel's fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[repr(u8)]
pub enum FitStatus {
    /// The stopping rule was met inside the bounds.
    Converged = 0,
    /// The iteration cap was reached first.
    MaxIterations = 1,
    /// Converged with a free parameter on one of its bounds (within 1e-4 of its range).
    AtBound = 2,
    /// The curve has non-finite samples or is constant (nothing to fit).
    InvalidInput = 3,
    /// The cost became non-finite or no step could reduce it away from a minimum.
    Failed = 4,
    /// Not fitted: the job was interrupted first.
    NotFitted = 5,
}

impl FitStatus {
    pub const ALL: [FitStatus; 6] = [
        FitStatus::Converged,
        FitStatus::MaxIterations,
        FitStatus::AtBound,
        FitStatus::InvalidInput,
        FitStatus::Failed,
        FitStatus::NotFitted,
    ];

    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            FitStatus::Converged => "converged",
            FitStatus::MaxIterations => "max-iterations",
            FitStatus::AtBound => "at-bound",
            FitStatus::InvalidInput => "invalid-input",
            FitStatus::Failed => "failed",
            FitStatus::NotFitted => "not-fitted",
        }
    }
}

/// Maps of a fit over many voxels (voxel `v` is column `v`).
#[derive(Debug, Clone, PartialEq)]
pub struct Fits {
    pub model: Model,
    pub method: Method,
    /// Parameters, `(n_params, voxels)`, user units; NaN where the input was invalid.
    pub params: Array2<f64>,
    /// Sum of squared residuals (concentration^2).
    pub sse: Array1<f64>,
    /// Coefficient of determination 1 - SSE / SST.
    pub r2: Array1<f64>,
    pub iterations: Array1<u32>,
    /// [`FitStatus`] codes.
    pub status: Array1<u8>,
    /// Quality flags ([`Flags`] bits), set whatever the status: a poor fit, a parameter at
    /// a bound, a parameter the fit cannot determine, a poorly determined parameter.
    pub flags: Array1<u8>,
    /// Asymptotic standard errors of the parameters, `(n_params, voxels)`, user units:
    /// `sqrt(diag(sigma^2 (J^T J)^-1))` with `sigma^2 = SSE / (n - p)`, `J` the model
    /// curve's Jacobian in the free parameters at the fitted values (`p` of them), computed in
    /// f64 after the fit on either path. Infinite where `J^T J` is singular or
    /// ill-conditioned (then [`Flags::POORLY_DETERMINED`] is set), NaN for fixed parameters
    /// and voxels not fitted or with invalid input.
    pub se: Array2<f64>,
}

/// Quality flags of a fit, as bits of [`Fits::flags`] (status.nii.gz holds the status,
/// flags.nii.gz these bits; mask with `flags & BIT == 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags;

impl Flags {
    /// R^2 < 0, or the residual RMS more than [`POOR_FIT_NOISE`] times the curve's noise
    /// estimate (from its second differences): the model does not describe the curve.
    pub const POOR_FIT: u8 = 1;
    /// A free parameter within 1e-4 of its range from a bound.
    pub const AT_BOUND: u8 = 2;
    /// A parameter the fitted values leave undetermined: a delay or rate of an input whose
    /// inflow is ~0, ve with Ktrans (PS) ~0, Fp with vp ~0, any delay of a flat curve.
    pub const NON_IDENTIFIABLE: u8 = 4;
    /// The fit's standard errors leave a parameter poorly determined: a free rate or volume
    /// (not a delay) whose SE exceeds [`POORLY_DETERMINED_SE`] times its value (at least
    /// 1e-3 of its range), or `J^T J` singular or ill-conditioned (a free parameter's SE
    /// infinite; see [`Fits::se`]).
    pub const POORLY_DETERMINED: u8 = 8;
    pub const ALL: [(u8, &'static str); 4] = [
        (Flags::POOR_FIT, "poor-fit"),
        (Flags::AT_BOUND, "at-bound"),
        (Flags::NON_IDENTIFIABLE, "non-identifiable"),
        (Flags::POORLY_DETERMINED, "poorly-determined"),
    ];
}

/// Residual RMS over noise estimate above which a fit is flagged poor.
pub const POOR_FIT_NOISE: f64 = 3.0;
/// Relative standard error (SE / |value|) of a rate or volume above which a fit is flagged
/// [`Flags::POORLY_DETERMINED`]: 0.5, the value known to no better than +-50% (one SE).
pub const POORLY_DETERMINED_SE: f64 = 0.5;
/// A rate or volume below this fraction of its range counts as ~0 for identifiability.
const NEGLIGIBLE: f64 = 1e-3;

/// Where and how a fit ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FitInfo {
    /// The device (`cpu`, `cuda:0`, ...).
    pub device: String,
    /// Arithmetic used: `f64` or `f32`.
    pub precision: &'static str,
    /// Library, device, arithmetic and time of the fit (standard-error pass included).
    pub provenance: gpu_runtime::Provenance,
}

impl Fits {
    pub fn len(&self) -> usize {
        self.sse.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sse.is_empty()
    }

    pub fn status(&self, voxel: usize) -> FitStatus {
        FitStatus::from_code(self.status[voxel]).unwrap_or(FitStatus::Failed)
    }

    /// Voxels with each flag, in [`Flags::ALL`] order.
    pub fn flag_counts(&self) -> [usize; Flags::ALL.len()] {
        let mut c = [0; Flags::ALL.len()];
        for &f in &self.flags {
            for (k, (bit, _)) in Flags::ALL.iter().enumerate() {
                if f & bit != 0 {
                    c[k] += 1;
                }
            }
        }
        c
    }

    /// Voxels per status, in [`FitStatus::ALL`] order.
    pub fn status_counts(&self) -> [usize; 6] {
        let mut c = [0; 6];
        for &s in &self.status {
            c[(s as usize).min(5)] += 1;
        }
        c
    }

    /// Parameter `name`'s map.
    pub fn param(&self, name: &str) -> Option<ndarray::ArrayView1<'_, f64>> {
        let i = self.model.params().iter().position(|p| p.name == name)?;
        Some(self.params.row(i))
    }

    /// Parameter `name`'s standard-error map ([`Fits::se`]).
    pub fn param_se(&self, name: &str) -> Option<ndarray::ArrayView1<'_, f64>> {
        let i = self.model.params().iter().position(|p| p.name == name)?;
        Some(self.se.row(i))
    }

    /// `n` voxels of `model`, none fitted yet (status [`FitStatus::NotFitted`], NaN maps).
    pub(crate) fn empty(model: Model, method: Method, n: usize) -> Self {
        Fits {
            model,
            method,
            params: Array2::from_elem((model.n_params(), n), f64::NAN),
            sse: Array1::from_elem(n, f64::NAN),
            r2: Array1::from_elem(n, f64::NAN),
            iterations: Array1::zeros(n),
            status: Array1::from_elem(n, FitStatus::NotFitted as u8),
            flags: Array1::zeros(n),
            se: Array2::from_elem((model.n_params(), n), f64::NAN),
        }
    }

    /// Set the standard errors and quality flags of every fitted voxel of `curves` (one per
    /// row) under `setup` (all cores; the CPU post-pass of both paths).
    pub(crate) fn set_flags(
        &mut self,
        curves: ndarray::ArrayView2<f32>,
        problem: &Problem,
        setup: &Setup,
    ) {
        // Voxels per task; the standard errors of a task's fitted voxels are computed
        // [`LANES`] at a time.
        const TASK: usize = 256;
        let model = self.model;
        let np = model.n_params();
        let b = &setup.bounds;
        let n_free = b.n_free;
        let plan = SePlan::new(problem);
        let n = self.len();
        let mut flags = vec![0u8; n];
        let mut se = vec![[f64::NAN; MAX_PARAMS]; n];
        flags
            .par_chunks_mut(TASK)
            .zip(se.par_chunks_mut(TASK))
            .enumerate()
            .for_each_init(
                || (Vec::new(), Scratch::default()),
                |(noise, scratch), (task, (flags, se))| {
                    let v0 = task * TASK;
                    let mut fitted = Vec::with_capacity(flags.len());
                    for (k, f) in flags.iter_mut().enumerate() {
                        let v = v0 + k;
                        let status = FitStatus::from_code(self.status[v]);
                        if matches!(
                            status,
                            Some(FitStatus::InvalidInput | FitStatus::NotFitted) | None
                        ) {
                            continue;
                        }
                        let x = self.vector(v);
                        let row = curves.row(v);
                        let dof = (row.len().saturating_sub(n_free)).max(1) as f64;
                        let rms = (self.sse[v] / dof).sqrt();
                        if !(self.r2[v] >= 0.0) || rms > POOR_FIT_NOISE * noise_estimate(row, noise)
                        {
                            *f |= Flags::POOR_FIT;
                        }
                        if b.at_bound(&x) {
                            *f |= Flags::AT_BOUND;
                        }
                        if non_identifiable(model, &x, b) {
                            *f |= Flags::NON_IDENTIFIABLE;
                        }
                        fitted.push(k);
                    }
                    if !setup.standard_errors {
                        return;
                    }
                    for group in fitted.chunks(LANES) {
                        let at = |l: usize| v0 + group[l.min(group.len() - 1)];
                        let xs: [[f64; MAX_PARAMS]; LANES] =
                            std::array::from_fn(|l| self.vector(at(l)));
                        let rows: [_; LANES] = std::array::from_fn(|l| curves.row(at(l)));
                        let k = group.len();
                        let e = standard_errors(
                            model,
                            b,
                            problem,
                            &plan,
                            &xs[..k],
                            &rows[..k],
                            scratch,
                        );
                        for (l, &k) in group.iter().enumerate() {
                            se[k] = e[l].se;
                            if poorly_determined(model, &xs[l], &e[l], b) {
                                flags[k] |= Flags::POORLY_DETERMINED;
                            }
                        }
                    }
                },
            );
        self.flags = Array1::from(flags);
        for (v, e) in se.iter().enumerate() {
            for p in 0..np {
                self.se[[p, v]] = e[p];
            }
        }
    }

    /// Voxel `v`'s parameters in a full-length vector (zeros past the model's).
    fn vector(&self, v: usize) -> [f64; MAX_PARAMS] {
        let np = self.model.n_params();
        std::array::from_fn(|p| if p < np { self.params[[p, v]] } else { 0.0 })
    }
}

/// Whether the standard errors `e` of the fit `x` leave a parameter poorly determined
/// ([`Flags::POORLY_DETERMINED`]): `J^T J` singular or ill-conditioned, or a free rate or
/// volume whose SE exceeds [`POORLY_DETERMINED_SE`] times its value, the value taken as at
/// least [`NEGLIGIBLE`] of its range (so that a value of 0 determined to within rounding
/// is not flagged, while 0 +- 0.3% of the range is).
fn poorly_determined(model: Model, x: &[f64; MAX_PARAMS], e: &StdErrors, b: &Bounds) -> bool {
    if e.singular {
        return true;
    }
    let info = model.params();
    b.free_index[..b.n_free].iter().any(|&p| {
        let scale = x[p].abs().max(NEGLIGIBLE * (b.hi[p] - b.lo[p]));
        !info[p].delay && !(e.se[p] <= POORLY_DETERMINED_SE * scale)
    })
}

/// Noise SD of a curve from its second differences (robust: the median absolute value,
/// scaled for Gaussian noise, whose second differences have variance 6 sigma^2). Smooth
/// curves without noise give ~0. `scratch` holds the differences (reused across curves).
fn noise_estimate(data: ndarray::ArrayView1<f32>, scratch: &mut Vec<u64>) -> f64 {
    let n = data.len();
    if n < 3 {
        return 0.0;
    }
    // The absolute values' bit patterns, which order as the values do (non-negative;
    // a NaN, which a fitted curve does not have, sorts last).
    scratch.clear();
    let second = |a: f32, b: f32, c: f32| {
        (f64::from(a) - 2.0 * f64::from(b) + f64::from(c))
            .abs()
            .to_bits()
    };
    match data.as_slice() {
        Some(d) => scratch.extend(d.windows(3).map(|w| second(w[0], w[1], w[2]))),
        None => scratch.extend((0..n - 2).map(|i| second(data[i], data[i + 1], data[i + 2]))),
    }
    let mid = scratch.len() / 2;
    let (_, median, _) = scratch.select_nth_unstable(mid);
    f64::from_bits(*median) / (0.674_489_75 * 6f64.sqrt())
}

/// Whether a free parameter is left undetermined by the others' fitted values.
fn non_identifiable(model: Model, x: &[f64; MAX_PARAMS], b: &Bounds) -> bool {
    let small = |p: usize| x[p] <= b.lo[p] + NEGLIGIBLE * (b.hi[p] - b.lo[p]);
    let free = |p: usize| b.free[p];
    match model {
        // ka ~ 0: tau_a free but unseen; kp ~ 0: tau_p; both: kl.
        Model::DualInput => {
            (small(0) && free(3)) || (small(1) && free(4)) || (small(0) && small(1) && free(2))
        }
        // Ktrans ~ 0: ve (and the delay).
        Model::Tofts => small(0) && (free(1) || free(2)),
        Model::ExtendedTofts => (small(0) && free(1)) || (small(0) && small(2) && free(3)),
        Model::Patlak => small(0) && small(1) && free(2),
        // PS ~ 0: ve; vp ~ 0: Fp (no plasma compartment to fill).
        Model::TwoCompartmentExchange => (small(1) && free(2)) || (small(3) && free(0)),
    }
}

/// Progress reporting and interruption for long jobs.
#[derive(Default, Clone, Copy)]
pub struct Control<'a> {
    /// Called with (voxels done, total) between blocks.
    pub progress: Option<&'a (dyn Fn(usize, usize) + Sync)>,
    /// When set, the job stops between blocks; unfitted voxels get `NotFitted`.
    pub stop: Option<&'a AtomicBool>,
}

impl std::fmt::Debug for Control<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("progress", &self.progress.is_some())
            .field("stop", &self.stop.map(|s| s.load(Ordering::Relaxed)))
            .finish()
    }
}

impl Control<'_> {
    pub(crate) fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
    pub(crate) fn report(&self, done: usize, total: usize) {
        if let Some(p) = self.progress {
            p(done, total);
        }
    }
}

/// One voxel's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct VoxelFit {
    pub params: [f64; MAX_PARAMS],
    pub sse: f64,
    pub r2: f64,
    pub iterations: u32,
    pub status: FitStatus,
}

impl Fits {
    pub(crate) fn store(&mut self, v: usize, r: &VoxelFit) {
        for p in 0..self.model.n_params() {
            self.params[[p, v]] = r.params[p];
        }
        self.sse[v] = r.sse;
        self.r2[v] = r.r2;
        self.iterations[v] = r.iterations;
        self.status[v] = r.status as u8;
    }

    /// `n` voxels of `setup`'s model, none fitted yet.
    pub(crate) fn new_for(setup: &Setup, n: usize) -> Self {
        Fits::empty(setup.model, setup.method, n)
    }
}

/// The median of the finite values (the upper one of an even count), or `None` when there
/// are none: how summaries and the demo report a parameter map without its failed voxels.
///
/// ```
/// use perfusion_core::finite_median;
/// assert_eq!(finite_median([3.0, f64::NAN, 1.0, 2.0].into_iter()), Some(2.0));
/// assert_eq!(finite_median([f64::NAN].into_iter()), None);
/// ```
pub fn finite_median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}
