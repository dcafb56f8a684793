//! Simulated laser speckle with known statistics, for tests, demos and documentation.
//!
//! The field at each pixel is a circular complex Gaussian (fully developed speckle) with
//! E|E|^2 = 1. In time it follows an Ornstein-Uhlenbeck process,
//! `E(t + dt) = rho E(t) + sqrt(1 - rho^2) W` with `rho = exp(-dt / tau_c)`, so that
//! `g1(tau) = exp(-|tau| / tau_c)` (unordered motion, Lorentzian spectrum). Each frame is
//! the intensity |E|^2 averaged over the exposure T from sub-steps `dt <= min(tau_c, T) /
//! substeps`, so its temporal contrast follows [`expected_k2_lorentzian`] with x = T / tau_c
//! and beta = 1 (point-sampled pixels, one polarisation).
//!
//! Spatial correlation is optional: the white field is convolved with a Gaussian whose
//! size is given as the FWHM of the intensity autocorrelation in pixels (`speckle_size`).
//! Units: seconds for times, pixels for sizes. Intensities have mean 1; [`Camera`] turns
//! them into integer frames. Every run is reproducible from a `u64` seed and independent of
//! the number of threads.

mod camera;
pub mod demo;
mod field;
pub mod mesi;
mod rng;

use ndarray::{Array2, Array3};

pub use self::camera::Camera;
pub use self::demo::{DemoReport, demo};
use self::field::FieldSim;
pub use self::mesi::simulate_mesi;
pub use self::rng::SimRng;
use crate::error::{Error, Result};

/// Speckle contrast squared for unordered motion (Lorentzian spectrum), beta = 1:
/// `K^2 = (exp(-2x) - 1 + 2x) / (2x^2)` with x = T / tau_c >= 0.
///
/// Tends to 1 for x -> 0 and to 1/x for large x. The flow module holds the same model for
/// fitting; this copy is the reference the simulation is tested against.
///
/// ```
/// use speckle_core::sim::expected_k2_lorentzian;
/// assert!((expected_k2_lorentzian(1.0) - 0.5677).abs() < 1e-4);
/// assert_eq!(expected_k2_lorentzian(0.0), 1.0);
/// ```
pub fn expected_k2_lorentzian(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x < 1e-3 {
        // Taylor series (next term 4 x^5 / 315 < 1e-16); the closed form loses digits to
        // cancellation here.
        return 1.0 - x * (2.0 / 3.0 - x * (1.0 / 3.0 - x * (2.0 / 15.0 - x * 2.0 / 45.0)));
    }
    ((-2.0 * x).exp_m1() + 2.0 * x) / (2.0 * x * x)
}

/// Largest speckle size (FWHM, pixels) the spatial filter accepts.
const MAX_SPECKLE_SIZE: f64 = 64.0;

fn positive(name: &'static str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidParameter {
            name,
            value: v.to_string(),
            why: "must be a finite number > 0".into(),
        })
    }
}

fn check_size(width: usize, height: usize, frames: usize) -> Result<()> {
    for (name, v) in [("width", width), ("height", height), ("frames", frames)] {
        if v == 0 {
            return Err(Error::InvalidParameter {
                name,
                value: "0".into(),
                why: "must be at least 1".into(),
            });
        }
    }
    Ok(())
}

/// Options shared by the dynamic simulations.
fn check_common(
    exposure: f64,
    interval: Option<f64>,
    speckle_size: Option<f64>,
    substeps: u32,
) -> Result<f64> {
    if !(exposure.is_finite() && exposure > 0.0) {
        return Err(Error::InvalidExposure { value: exposure });
    }
    let interval = interval.unwrap_or(exposure);
    if !(interval.is_finite() && interval >= exposure) {
        return Err(Error::InvalidParameter {
            name: "frame_interval",
            value: interval.to_string(),
            why: format!("must be finite and at least the exposure time {exposure} s"),
        });
    }
    if let Some(d) = speckle_size {
        positive("speckle_size", d)?;
        if d > MAX_SPECKLE_SIZE {
            return Err(Error::InvalidParameter {
                name: "speckle_size",
                value: d.to_string(),
                why: format!(
                    "at most {MAX_SPECKLE_SIZE} pixels (the filter would need a very large padded grid)"
                ),
            });
        }
    }
    if substeps == 0 {
        return Err(Error::InvalidParameter {
            name: "substeps",
            value: "0".into(),
            why: "must be at least 1".into(),
        });
    }
    Ok(interval)
}

/// Dynamic speckle with one decorrelation time everywhere.
///
/// ```
/// use speckle_core::sim::DynamicSpeckle;
/// let sim = DynamicSpeckle::new(32, 32, 8, 5e-3, 1e-3).with_seed(7);
/// let frames = sim.simulate().unwrap();
/// assert_eq!(frames.dim(), (8, 32, 32));
/// assert!((sim.expected_k2() - speckle_core::sim::expected_k2_lorentzian(5.0)).abs() < 1e-12);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicSpeckle {
    pub width: usize,
    pub height: usize,
    pub frames: usize,
    /// Exposure time T, seconds.
    pub exposure: f64,
    /// Decorrelation time tau_c of the field, seconds.
    pub tau_c: f64,
    /// Start-to-start frame interval, seconds (>= exposure); `None`: frames back to back.
    /// Intervals much longer than tau_c give independent frames at no extra cost.
    pub frame_interval: Option<f64>,
    /// FWHM of the intensity autocorrelation, pixels; `None`: independent pixels.
    pub speckle_size: Option<f64>,
    /// Sub-steps per min(tau_c, T) (default 20, which keeps the integration error of K^2
    /// below 0.1%).
    pub substeps: u32,
    pub seed: u64,
}

impl DynamicSpeckle {
    /// `frames` frames of `width x height` pixels, exposure and tau_c in seconds.
    pub fn new(width: usize, height: usize, frames: usize, exposure: f64, tau_c: f64) -> Self {
        Self {
            width,
            height,
            frames,
            exposure,
            tau_c,
            frame_interval: None,
            speckle_size: None,
            substeps: 20,
            seed: 0,
        }
    }

    /// Set the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Correlate the field in space; see [`DynamicSpeckle::speckle_size`].
    pub fn with_speckle_size(mut self, fwhm_pixels: f64) -> Self {
        self.speckle_size = Some(fwhm_pixels);
        self
    }

    /// Set the start-to-start frame interval in seconds.
    pub fn with_frame_interval(mut self, seconds: f64) -> Self {
        self.frame_interval = Some(seconds);
        self
    }

    /// Set the number of sub-steps per min(tau_c, T).
    pub fn with_substeps(mut self, substeps: u32) -> Self {
        self.substeps = substeps;
        self
    }

    /// x = T / tau_c.
    pub fn x(&self) -> f64 {
        self.exposure / self.tau_c
    }

    /// Theoretical K^2 of these frames (beta = 1).
    pub fn expected_k2(&self) -> f64 {
        expected_k2_lorentzian(self.x())
    }

    /// Simulated intensity (frame, row, column), mean 1.
    pub fn simulate(&self) -> Result<Array3<f32>> {
        check_size(self.width, self.height, self.frames)?;
        positive("tau_c", self.tau_c)?;
        let interval = check_common(
            self.exposure,
            self.frame_interval,
            self.speckle_size,
            self.substeps,
        )?;
        let tau = Array2::from_elem((self.height, self.width), self.tau_c);
        FieldSim {
            tau: tau.view(),
            frames: self.frames,
            exposure: self.exposure,
            interval,
            speckle_size: self.speckle_size,
            substeps: self.substeps,
            seed: self.seed,
        }
        .run()
    }
}

/// Static, fully developed speckle: one intensity pattern with exponential statistics
/// (K = 1 for point-sampled pixels) and a known speckle size.
///
/// ```
/// use speckle_core::sim::StaticSpeckle;
/// let pattern = StaticSpeckle::new(64, 48).with_speckle_size(3.0).with_seed(1).simulate().unwrap();
/// assert_eq!(pattern.dim(), (48, 64));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct StaticSpeckle {
    pub width: usize,
    pub height: usize,
    /// FWHM of the intensity autocorrelation, pixels; `None`: independent pixels.
    pub speckle_size: Option<f64>,
    pub seed: u64,
}

impl StaticSpeckle {
    /// A `width x height` pattern of independent pixels, seed 0.
    pub fn new(width: usize, height: usize) -> Self {
        Self {
            width,
            height,
            speckle_size: None,
            seed: 0,
        }
    }

    /// Set the speckle size (FWHM of the intensity autocorrelation, pixels).
    pub fn with_speckle_size(mut self, fwhm_pixels: f64) -> Self {
        self.speckle_size = Some(fwhm_pixels);
        self
    }

    /// Set the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The intensity pattern (row, column), mean 1.
    pub fn simulate(&self) -> Result<Array2<f32>> {
        check_size(self.width, self.height, 1)?;
        check_common(1.0, None, self.speckle_size, 1)?;
        let tau = Array2::from_elem((self.height, self.width), f64::INFINITY);
        let frames = FieldSim {
            tau: tau.view(),
            frames: 1,
            exposure: 1.0,
            interval: 1.0,
            speckle_size: self.speckle_size,
            substeps: 1,
            seed: self.seed,
        }
        .run()?;
        Ok(frames.index_axis_move(ndarray::Axis(0), 0))
    }
}

/// A horizontal vessel in static tissue: inside the channel the speed follows a parabolic
/// (Poiseuille) profile and `tau_c = tau_c_center * v_max / v(y)`, decorrelation being
/// proportional to speed; outside, scatterers are static (tau_c infinite).
///
/// ```
/// use speckle_core::sim::FlowPhantom;
/// let p = FlowPhantom::new(64, 32, 4, 5e-3, 1e-3).with_channel(15.5, 6.0).simulate().unwrap();
/// assert_eq!(p.intensity.dim(), (4, 32, 64));
/// assert!(p.tau_c[[0, 0]].is_infinite());
/// assert!((p.speed[[15, 10]] - p.speed[[16, 10]]).abs() < 1e-6);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FlowPhantom {
    pub width: usize,
    pub height: usize,
    pub frames: usize,
    /// Exposure time T, seconds.
    pub exposure: f64,
    /// tau_c on the channel axis (highest speed), seconds.
    pub tau_c_center: f64,
    /// Row of the channel axis (pixel centres at whole rows; 15.5 centres on 32 rows).
    pub channel_center: f64,
    /// Half width of the channel, pixels; the speed is zero at `center +- half_width`.
    pub channel_half_width: f64,
    /// Start-to-start frame interval, seconds; `None`: frames back to back.
    pub frame_interval: Option<f64>,
    /// FWHM of the intensity autocorrelation, pixels; `None`: independent pixels. With
    /// spatial correlation, pixels within a speckle of the wall mix static and moving light.
    pub speckle_size: Option<f64>,
    /// Sub-steps per min(tau_c_center, T).
    pub substeps: u32,
    pub seed: u64,
}

/// Output of [`FlowPhantom::simulate`]: frames and the ground truth.
#[derive(Debug, Clone, PartialEq)]
pub struct Phantom {
    /// Simulated intensity (frame, row, column), mean 1.
    pub intensity: Array3<f32>,
    /// True tau_c per pixel, seconds; infinity where static.
    pub tau_c: Array2<f32>,
    /// Speed relative to the channel axis (0..=1); 0 where static.
    pub speed: Array2<f32>,
}

impl FlowPhantom {
    /// A channel across the middle third of the image.
    pub fn new(
        width: usize,
        height: usize,
        frames: usize,
        exposure: f64,
        tau_c_center: f64,
    ) -> Self {
        Self {
            width,
            height,
            frames,
            exposure,
            tau_c_center,
            channel_center: (height as f64 - 1.0) / 2.0,
            channel_half_width: height as f64 / 6.0,
            frame_interval: None,
            speckle_size: None,
            substeps: 20,
            seed: 0,
        }
    }

    /// Place the channel: axis row and half width, pixels.
    pub fn with_channel(mut self, center_row: f64, half_width: f64) -> Self {
        self.channel_center = center_row;
        self.channel_half_width = half_width;
        self
    }

    /// Set the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Correlate the field in space (FWHM pixels).
    pub fn with_speckle_size(mut self, fwhm_pixels: f64) -> Self {
        self.speckle_size = Some(fwhm_pixels);
        self
    }

    /// Set the start-to-start frame interval in seconds.
    pub fn with_frame_interval(mut self, seconds: f64) -> Self {
        self.frame_interval = Some(seconds);
        self
    }

    /// Relative speed at row `y`: 1 - ((y - c) / a)^2 inside the channel, else 0.
    fn speed_at(&self, y: f64) -> f64 {
        let u = (y - self.channel_center) / self.channel_half_width;
        (1.0 - u * u).max(0.0)
    }

    /// Frames, true tau_c map and speed map.
    pub fn simulate(&self) -> Result<Phantom> {
        check_size(self.width, self.height, self.frames)?;
        positive("tau_c_center", self.tau_c_center)?;
        positive("channel_half_width", self.channel_half_width)?;
        if !self.channel_center.is_finite() {
            return Err(Error::InvalidParameter {
                name: "channel_center",
                value: self.channel_center.to_string(),
                why: "must be a finite row".into(),
            });
        }
        let interval = check_common(
            self.exposure,
            self.frame_interval,
            self.speckle_size,
            self.substeps,
        )?;
        let speed =
            Array2::from_shape_fn((self.height, self.width), |(r, _)| self.speed_at(r as f64));
        let tau = speed.mapv(|v| {
            if v > 0.0 {
                self.tau_c_center / v
            } else {
                f64::INFINITY
            }
        });
        let intensity = FieldSim {
            tau: tau.view(),
            frames: self.frames,
            exposure: self.exposure,
            interval,
            speckle_size: self.speckle_size,
            substeps: self.substeps,
            seed: self.seed,
        }
        .run()?;
        Ok(Phantom {
            intensity,
            tau_c: tau.mapv(|t| t as f32),
            speed: speed.mapv(|v| v as f32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::types::RawStack;
    use ndarray::{Array3, Axis};

    /// Mean over pixels of the per-pixel temporal K^2 (f64 mean and unbiased variance).
    fn mean_temporal_k2(frames: &Array3<f32>) -> f64 {
        let (n, h, w) = frames.dim();
        let mut total = 0.0;
        for r in 0..h {
            for c in 0..w {
                let series = frames.slice(ndarray::s![.., r, c]);
                let mean = series.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
                let var = series
                    .iter()
                    .map(|&v| (f64::from(v) - mean).powi(2))
                    .sum::<f64>()
                    / (n - 1) as f64;
                total += var / (mean * mean);
            }
        }
        total / (h * w) as f64
    }

    fn spatial_k(map: &Array2<f32>) -> f64 {
        let n = map.len() as f64;
        let mean = map.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = map
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / (n - 1.0);
        var.sqrt() / mean
    }

    #[test]
    fn lorentzian_model_limits() {
        assert!((expected_k2_lorentzian(1e-6) - 1.0).abs() < 1e-5);
        assert!((expected_k2_lorentzian(1e4) * 1e4 - 1.0).abs() < 1e-3);
        // Both branches agree with a longer series at the switch point x = 1e-3.
        let x: f64 = 1e-3;
        let series = |x: f64| {
            1.0 - 2.0 * x / 3.0 + x * x / 3.0 - 2.0 * x.powi(3) / 15.0 + 2.0 * x.powi(4) / 45.0
                - 4.0 * x.powi(5) / 315.0
        };
        for x in [x * (1.0 - 1e-9), x, 0.5 * x, 2.0 * x] {
            assert!(
                (expected_k2_lorentzian(x) - series(x)).abs() < 1e-13,
                "x = {x}"
            );
        }
        assert!(expected_k2_lorentzian(-1.0).is_nan());
    }

    #[test]
    fn dynamic_speckle_temporal_k_matches_lorentzian_model() {
        // Frames are made independent by a dead time of 20 tau_c (free: one AR step), so
        // K^2 per pixel is estimated from n independent frames; pixels are independent.
        // The relative standard error of the mean K^2 is about sqrt(8 / (n p)) at small x
        // (exponential-like intensity) and sqrt(2 / (n p)) at large x (near Gaussian):
        // below 0.6% in K for every row, so the 3% bound is over 5 standard errors.
        let exposure = 5e-3;
        for (x, frames, side) in [
            (0.1, 1000, (16, 16)),
            (1.0, 1000, (16, 16)),
            (10.0, 500, (8, 8)),
            (100.0, 500, (8, 4)),
        ] {
            let tau_c = exposure / x;
            let sim = DynamicSpeckle::new(side.1, side.0, frames, exposure, tau_c)
                .with_frame_interval(exposure + 20.0 * tau_c)
                .with_seed(42);
            let k2 = mean_temporal_k2(&sim.simulate().unwrap());
            let expected = expected_k2_lorentzian(x);
            let rel = (k2.sqrt() / expected.sqrt() - 1.0).abs();
            eprintln!(
                "x = {x}: K = {:.4}, model {:.4} ({:+.2}%)",
                k2.sqrt(),
                expected.sqrt(),
                100.0 * (k2.sqrt() / expected.sqrt() - 1.0)
            );
            assert!(
                rel < 0.03,
                "x = {x}: K = {:.4}, model {:.4} ({:.2}% off)",
                k2.sqrt(),
                expected.sqrt(),
                100.0 * rel
            );
        }
    }

    #[test]
    fn correlated_dynamic_speckle_keeps_the_temporal_statistics() {
        // Smoothing in space is linear, so g1 and hence K(T) are unchanged. 16x16 pixels
        // with 2-px speckles hold about 50 independent speckles; with 400 frames the
        // standard error of K is about 1%, so 4% is a 4-sigma bound.
        let exposure = 5e-3;
        let sim = DynamicSpeckle::new(16, 16, 400, exposure, exposure)
            .with_speckle_size(2.0)
            .with_frame_interval(30.0 * exposure)
            .with_seed(5);
        let k = mean_temporal_k2(&sim.simulate().unwrap()).sqrt();
        let expected = sim.expected_k2().sqrt();
        assert!(
            (k / expected - 1.0).abs() < 0.04,
            "K = {k:.4}, model {expected:.4}"
        );
    }

    #[test]
    fn static_speckle_is_fully_developed() {
        // Point-sampled fully developed speckle has exponential intensity: K = 1 and
        // P(I > mean) = 1/e. With 512^2 independent pixels the standard error of K is
        // sqrt(8 / n) / 2 = 0.3%, so 2% is ~7 sigma. With 4-px speckles there are about
        // 2 pi sigma^2 = 18 pixels per independent speckle, ~14 000 speckles: standard
        // error 1.2%, bound 5%.
        let pattern = StaticSpeckle::new(512, 512)
            .with_seed(3)
            .simulate()
            .unwrap();
        let k = spatial_k(&pattern);
        assert!((k - 1.0).abs() < 0.02, "K = {k}");
        let mean = pattern.iter().map(|&v| f64::from(v)).sum::<f64>() / pattern.len() as f64;
        let above =
            pattern.iter().filter(|&&v| f64::from(v) > mean).count() as f64 / pattern.len() as f64;
        assert!(
            (above - (-1.0f64).exp()).abs() < 0.01,
            "P(I > mean) = {above}"
        );

        let smooth = StaticSpeckle::new(512, 512)
            .with_speckle_size(4.0)
            .with_seed(4)
            .simulate()
            .unwrap();
        let k = spatial_k(&smooth);
        assert!((k - 1.0).abs() < 0.05, "K with 4-px speckles = {k}");
    }

    #[test]
    fn static_speckle_size_is_the_autocorrelation_fwhm() {
        // The normalised intensity autocovariance is exp(-r^2 / (2 sigma^2)) = 2^(-4 r^2 / d^2)
        // for FWHM d: 1/2 at r = d / 2. For d = 4 px: 0.841 at 1 px, 0.5 at 2 px, 0.0625 at
        // 4 px. Standard error of each estimate ~0.01 (14 000 speckles); bound 0.05.
        let d = 4.0;
        let p = StaticSpeckle::new(512, 512)
            .with_speckle_size(d)
            .with_seed(9)
            .simulate()
            .unwrap();
        let p = p.mapv(f64::from);
        let mean = p.mean().unwrap();
        let var = p.mapv(|v| (v - mean).powi(2)).mean().unwrap();
        let cov = |lag: usize| {
            let a = p.slice(ndarray::s![.., ..512 - lag]);
            let b = p.slice(ndarray::s![.., lag..]);
            let n = a.len() as f64;
            a.iter()
                .zip(b.iter())
                .map(|(x, y)| (x - mean) * (y - mean))
                .sum::<f64>()
                / n
                / var
        };
        let at = |r: f64| (-4.0 * std::f64::consts::LN_2 * r * r / (d * d)).exp();
        for lag in [1usize, 2, 4] {
            let (got, want) = (cov(lag), at(lag as f64));
            assert!(
                (got - want).abs() < 0.05,
                "lag {lag}: {got:.3} vs {want:.3}"
            );
        }
    }

    #[test]
    fn simulation_is_reproducible_and_independent_of_thread_count() {
        let run = |threads: usize, size: Option<f64>| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut sim = DynamicSpeckle::new(12, 9, 3, 1e-3, 5e-4).with_seed(11);
                sim.speckle_size = size;
                sim.simulate().unwrap()
            })
        };
        for size in [None, Some(2.5)] {
            let a = run(1, size);
            assert_eq!(a, run(3, size), "speckle size {size:?}");
            assert_eq!(a, run(2, size));
        }
        let other = DynamicSpeckle::new(12, 9, 3, 1e-3, 5e-4)
            .with_seed(12)
            .simulate()
            .unwrap();
        assert_ne!(run(1, None), other);
    }

    #[test]
    fn flow_phantom_has_static_background_and_flowing_channel() {
        let exposure = 5e-3;
        let tau_center = exposure; // x = 1 on the axis
        let p = FlowPhantom::new(32, 33, 400, exposure, tau_center)
            .with_channel(16.0, 8.0)
            .with_frame_interval(30.0 * exposure)
            .with_seed(8)
            .simulate()
            .unwrap();
        // Outside the channel nothing moves: every frame is identical.
        let first = p.intensity.index_axis(Axis(0), 0);
        for f in p.intensity.axis_iter(Axis(0)) {
            assert_eq!(f.row(2), first.row(2));
            assert_eq!(f.row(30), first.row(30));
        }
        assert!(p.tau_c[[8, 0]].is_infinite() && p.speed[[8, 0]] == 0.0);
        assert_eq!(p.speed[[16, 5]], 1.0);
        assert!((p.tau_c[[16, 5]] - tau_center as f32).abs() < 1e-9);
        assert!((p.speed[[12, 5]] - 0.75).abs() < 1e-6);
        // On the axis the temporal K follows the model at x = 1 (32 px x 400 frames:
        // standard error ~0.8%; bound 4%).
        let axis = p.intensity.slice(ndarray::s![.., 16..17, ..]).to_owned();
        let k = mean_temporal_k2(&axis).sqrt();
        let want = expected_k2_lorentzian(1.0).sqrt();
        assert!(
            (k / want - 1.0).abs() < 0.04,
            "axis K = {k:.4}, model {want:.4}"
        );
    }

    #[test]
    fn camera_scales_adds_shot_noise_and_saturates() {
        let flat = Array3::from_elem((4, 64, 64), 1.0f32);
        let RawStack::U16(frames) = Camera::new(1000.0, 12).expose(flat.view(), 1).unwrap() else {
            panic!()
        };
        let v: Vec<f64> = frames.iter().map(|&x| f64::from(x)).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
        // 16 384 Poisson samples of mean 1000: standard errors 0.25 (mean) and 1.1% (var).
        assert!((mean - 1000.0).abs() < 1.5, "mean {mean}");
        assert!((var / 1000.0 - 1.0).abs() < 0.06, "var {var}");

        let bright = Array3::from_elem((1, 4, 4), 10.0f32);
        let RawStack::U8(sat) = Camera::new(100.0, 8)
            .with_offset(10.0)
            .expose(bright.view(), 1)
            .unwrap()
        else {
            panic!("8-bit camera gives u8")
        };
        assert!(sat.iter().all(|&x| x == 255));
        let exact = Camera::new(100.0, 16)
            .with_shot_noise(false)
            .with_offset(5.0)
            .expose(flat.view(), 1)
            .unwrap();
        assert!(matches!(exact, RawStack::U16(a) if a.iter().all(|&x| x == 105)));
        assert!(Camera::new(100.0, 17).expose(flat.view(), 1).is_err());
        assert!(Camera::new(-1.0, 8).expose(flat.view(), 1).is_err());
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        assert!(DynamicSpeckle::new(0, 4, 4, 1e-3, 1e-3).simulate().is_err());
        assert!(matches!(
            DynamicSpeckle::new(4, 4, 4, 0.0, 1e-3).simulate(),
            Err(Error::InvalidExposure { .. })
        ));
        assert!(DynamicSpeckle::new(4, 4, 4, 1e-3, -1.0).simulate().is_err());
        assert!(
            DynamicSpeckle::new(4, 4, 4, 1e-3, 1e-3)
                .with_frame_interval(5e-4)
                .simulate()
                .is_err()
        );
        assert!(
            StaticSpeckle::new(4, 4)
                .with_speckle_size(100.0)
                .simulate()
                .is_err()
        );
        assert!(
            DynamicSpeckle::new(4, 4, 4, 1e-3, 1e-3)
                .with_speckle_size(0.0)
                .simulate()
                .is_err()
        );
        assert!(
            DynamicSpeckle::new(4, 4, 4, 1e-3, 1e-3)
                .with_substeps(0)
                .simulate()
                .is_err()
        );
        let err = DynamicSpeckle::new(4, 4, 1, 1.0, 1e-6)
            .simulate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("sub-steps"), "{err}");
        assert!(
            FlowPhantom::new(8, 8, 2, 1e-3, 1e-3)
                .with_channel(4.0, 0.0)
                .simulate()
                .is_err()
        );
        assert!(StaticSpeckle::new(4, 0).simulate().is_err());
    }

    #[test]
    #[ignore = "timing; run with --release"]
    fn simulation_speed_64_frames_128_squared() {
        for size in [None, Some(2.0)] {
            let t = std::time::Instant::now();
            let sim = DynamicSpeckle::new(128, 128, 64, 5e-3, 5e-3).with_seed(1);
            let sim = if let Some(d) = size {
                sim.with_speckle_size(d)
            } else {
                sim
            };
            let frames = sim.simulate().unwrap();
            eprintln!(
                "speckle size {size:?}: {:?} for {:?}",
                t.elapsed(),
                frames.dim()
            );
        }
    }
}
