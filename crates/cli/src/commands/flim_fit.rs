//! The fitting methods of `biogpu flim fit`: BCMM (and the phasor method for FRET), least
//! squares and maximum likelihood per pixel, and global analysis (each: GPU kernel on a GPU
//! device, f64 CPU otherwise). Options come from the command line and the
//! preprocessing; results are a [`MapSet`] whose first map is the main lifetime.

use super::flim::{Method, Model};
use anyhow::{Context, bail};
use flim_core::fit::{self, Estimator, FitMaps, FitOptions, FitStatus, Offset, Segments, Shift};
use flim_core::fret::Donor;
use flim_core::gpu::{analyse_fret_on, fit_global_on, fit_on};
use flim_core::methods::STATUS_OK;
use flim_core::output::MapSet;
use flim_core::preprocess::{FitRange, Irf};
use flim_core::{Analysis, AnyCube};
use gpu_runtime::Device;
use ndarray::Array2;

/// Least-squares weights of `--method lsq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Weights {
    /// `1 / max(N, 1)` from the data (as most tools; biased low at low counts).
    Neyman,
    /// `1 / y` from the model.
    Pearson,
}

/// Options of the fitting methods.
#[derive(Debug, Clone, clap::Args)]
pub struct FitMethodArgs {
    /// Least-squares weights (lsq).
    #[arg(long, value_enum, default_value = "neyman")]
    weights: Weights,
    /// Fit the background per pixel (lsq, mle, global) instead of fixing it at --offset.
    #[arg(long)]
    fit_offset: bool,
    /// Global analysis: pixels that share lifetimes, `whole` (the image) or a number of
    /// consecutive analysed pixels (32 as in Wu et al. 2016).
    #[arg(long, default_value = "whole")]
    segments: String,
    /// BCMM: the free donor's lifetime in ns (BCMM1 and the phasor method, PM); without it
    /// the donor lifetime is estimated per pixel (BCMM2).
    #[arg(long)]
    donor_tau: Option<f64>,
    /// Levenberg-Marquardt iteration cap (lsq, mle, global).
    #[arg(long, default_value_t = 100)]
    max_iterations: u32,
}

impl Default for FitMethodArgs {
    fn default() -> Self {
        Self {
            weights: Weights::Neyman,
            fit_offset: false,
            segments: "whole".into(),
            donor_tau: None,
            max_iterations: 100,
        }
    }
}

/// What the preprocessing hands a fitting method.
pub struct FitInput<'a> {
    pub cube: &'a AnyCube,
    /// Range, threshold and offset for BCMM.
    pub analysis: &'a Analysis,
    pub range: Option<FitRange>,
    pub threshold: f64,
    /// Background per bin (fixed unless --fit-offset).
    pub offset: f64,
    /// The IRF, already shifted by the global shift.
    pub irf: Option<&'a Irf>,
    /// Whether a per-pixel IRF shift was asked for: then it is fitted per pixel.
    pub per_pixel_shift: bool,
}

/// Run a fitting method (bcmm, lsq, mle, global) on `device`.
pub fn run_fit_method(
    method: Method,
    model: Model,
    args: &FitMethodArgs,
    input: &FitInput<'_>,
    device: &Device,
) -> anyhow::Result<MapSet> {
    match method {
        Method::Bcmm => bcmm(model, args, input, device),
        Method::Lsq | Method::Mle | Method::Global => {
            let opts = fit_options(method, model, args, input);
            let maps = if method == Method::Global {
                let segments = parse_segments(&args.segments)?;
                if device.is_gpu() {
                    tracing::info!(
                        "global analysis on {device} (f32 kernel, one cube per segment)"
                    );
                } else {
                    tracing::info!("global analysis on the CPU (f64)");
                }
                with_any(input.cube, |c| c.fit_global_on(&opts, &segments, device))?
            } else {
                with_any(input.cube, |c| c.fit_on(&opts, device))?
            };
            fit_set(method, args.fit_offset, input.per_pixel_shift, &maps)
        }
        _ => bail!("--method {} is not a fitting method", method.name()),
    }
}

/// Apply `f` to the typed cube inside `cube`.
fn with_any<R>(
    cube: &AnyCube,
    f: impl Fn(&dyn AnyFit) -> flim_core::Result<R>,
) -> flim_core::Result<R> {
    match cube {
        AnyCube::U16(c) => f(c),
        AnyCube::U32(c) => f(c),
        AnyCube::F32(c) => f(c),
    }
}

/// The fits over any count type, as trait objects (so that [`with_any`] takes one closure).
trait AnyFit {
    fn fit_on(&self, opts: &FitOptions, device: &Device) -> flim_core::Result<FitMaps>;
    fn fit_global_on(
        &self,
        opts: &FitOptions,
        s: &Segments,
        device: &Device,
    ) -> flim_core::Result<FitMaps>;
    fn fret_on(
        &self,
        a: &Analysis,
        d: Donor,
        device: &Device,
    ) -> flim_core::Result<flim_core::fret::FretMaps>;
}

impl<T: flim_core::Count> AnyFit for flim_core::Cube<T> {
    fn fit_on(&self, opts: &FitOptions, device: &Device) -> flim_core::Result<FitMaps> {
        fit_on(self, opts, device)
    }
    fn fit_global_on(
        &self,
        opts: &FitOptions,
        s: &Segments,
        device: &Device,
    ) -> flim_core::Result<FitMaps> {
        fit_global_on(self, opts, s, device)
    }
    fn fret_on(
        &self,
        a: &Analysis,
        d: Donor,
        device: &Device,
    ) -> flim_core::Result<flim_core::fret::FretMaps> {
        analyse_fret_on(self, a, d, device)
    }
}

fn parse_segments(spec: &str) -> anyhow::Result<Segments> {
    if spec == "whole" {
        return Ok(Segments::Whole);
    }
    let n: usize = spec.parse().ok().filter(|&n| n >= 1).with_context(|| {
        format!("--segments {spec}: expected `whole` or a number of pixels >= 1")
    })?;
    Ok(Segments::Runs(n))
}

/// [`FitOptions`] from the command line and the preprocessing.
fn fit_options(
    method: Method,
    model: Model,
    args: &FitMethodArgs,
    input: &FitInput<'_>,
) -> FitOptions {
    let estimator = match (method, args.weights) {
        (Method::Lsq, Weights::Neyman) => Estimator::LeastSquaresNeyman,
        (Method::Lsq, Weights::Pearson) => Estimator::LeastSquaresPearson,
        _ => Estimator::MaximumLikelihood,
    };
    let model = match model {
        Model::Mono => fit::Model::Mono,
        Model::Bi => fit::Model::Bi,
        Model::Tri => fit::Model::Tri,
    };
    let mut opts = FitOptions::new(model)
        .with_estimator(estimator)
        .with_offset(if args.fit_offset {
            Offset::Fitted
        } else {
            Offset::Fixed(input.offset)
        })
        .with_threshold(input.threshold)
        .with_max_iterations(args.max_iterations);
    if let Some(r) = input.range {
        opts = opts.with_range(r.first, Some(r.bins));
    }
    if let Some(irf) = input.irf {
        opts = opts
            .with_irf(irf.values())
            .with_irf_shift(if input.per_pixel_shift {
                Shift::Fitted(0.0)
            } else {
                Shift::Fixed(0.0)
            });
    }
    opts
}

/// Maps of a per-pixel or global fit: `tau_<method>_ns` (the lifetime, or the
/// amplitude-weighted mean lifetime of bi and tri), intensity, per component `tau<i>_ns`,
/// `a<i>` (amplitude) and `f<i>` (amplitude fraction), the mean lifetimes, offset and shift
/// where fitted, `chi2_red`, `iterations` and `status` (0 converged, 1 masked, 2 failed).
/// The main lifetime is NaN where the fit failed, so that no statistic counts it.
fn fit_set(
    method: Method,
    offset_fitted: bool,
    shift_fitted: bool,
    m: &FitMaps,
) -> anyhow::Result<MapSet> {
    let mut set = MapSet {
        maps: Vec::new(),
        mask: m.status.mapv(|s| s != FitStatus::Masked),
    };
    let k = m.tau.len();
    let mut main = if k == 1 {
        m.tau[0].clone()
    } else {
        m.tau_amp_mean.clone()
    };
    ndarray::Zip::from(&mut main)
        .and(&m.status)
        .for_each(|t, &s| {
            if s != FitStatus::Converged {
                *t = f32::NAN;
            }
        });
    set.push(format!("tau_{}_ns", method.name()), main)?;
    set.push("intensity", m.intensity.clone())?;
    for i in 0..k {
        if k > 1 {
            set.push(format!("tau{}_ns", i + 1), m.tau[i].clone())?;
        }
        set.push(format!("a{}", i + 1), m.amplitude[i].clone())?;
        if k > 1 {
            set.push(format!("f{}", i + 1), m.fraction[i].clone())?;
        }
    }
    if k > 1 {
        set.push("tau_amp_mean_ns", m.tau_amp_mean.clone())?;
        set.push("tau_int_mean_ns", m.tau_int_mean.clone())?;
    }
    if offset_fitted {
        set.push("offset", m.offset.clone())?;
    }
    if shift_fitted {
        set.push("irf_shift_fit_bins", m.shift.clone())?;
    }
    set.push("chi2_red", m.chi2_red.clone())?;
    set.push("iterations", m.iterations.mapv(|v| v as f32))?;
    set.push("status", m.status.mapv(|s| f32::from(s as u8)))?;
    Ok(set)
}

/// BCMM (and PM with a known donor): main map the mean lifetime `tau_avg_bcmm_ns`.
fn bcmm(
    model: Model,
    args: &FitMethodArgs,
    input: &FitInput<'_>,
    device: &Device,
) -> anyhow::Result<MapSet> {
    if model == Model::Tri {
        bail!("--method bcmm is bi-exponential: --model tri is not supported (use mono or bi)");
    }
    let donor = match args.donor_tau {
        None => Donor::Unknown,
        Some(t) if t.is_finite() && t > 0.0 => Donor::Known(t),
        Some(t) => bail!("--donor-tau {t}: expected a lifetime > 0 ns"),
    };
    let maps = with_any(input.cube, |c| c.fret_on(input.analysis, donor, device))?;
    let mut set = MapSet {
        maps: Vec::new(),
        mask: maps.status.mapv(|s| s == STATUS_OK),
    };
    let names = flim_core::fret::FRET_PLANES;
    let planes = maps.planes();
    let get = |n: &str| -> Array2<f32> {
        planes[names.iter().position(|x| *x == n).expect("a FRET plane")].clone()
    };
    let mut wanted = vec![
        "tau_avg_bcmm_ns",
        "intensity",
        "tau_f_bcmm_ns",
        "tau_d_bcmm_ns",
        "f_d_bcmm",
    ];
    if donor != Donor::Unknown {
        wanted.extend(["tau_avg_pm_ns", "tau_f_pm_ns", "f_d_pm"]);
    }
    for n in wanted {
        set.push(n, get(n))?;
    }
    Ok(set)
}
