//! What a fit returns: per-voxel statuses, the maps ([`Fits`]) and where and how they were
//! computed ([`FitInfo`]); progress and interruption ([`Control`]).

use super::kinetics::{MAX_PARAMS, Model};
use super::params::{Method, Setup};
use ndarray::{Array1, Array2};
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
}

/// Where and how a fit ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FitInfo {
    /// The device (`cpu`, `cuda:0`, ...).
    pub device: String,
    /// Arithmetic used: `f64` or `f32`.
    pub precision: &'static str,
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
        }
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
