//! The speckle engine: complex Gaussian fields evolving as Ornstein-Uhlenbeck processes,
//! optionally smoothed in space, with intensity integrated over each exposure.

use ndarray::{Array3, ArrayView2};
use rayon::prelude::*;

use super::rng::SimRng;
use crate::error::{Error, Result};

/// Most sub-steps one exposure may need (exposure / tau_c up to 50 000 at 20 sub-steps).
const MAX_SUBSTEPS: f64 = 1.0e6;

/// Field values held per batch of sub-steps in the correlated simulation (each 8 bytes,
/// four arrays): bounds memory to about 128 MiB whatever the image size.
const BATCH_VALUES: usize = 1 << 22;

/// Ratio of the FWHM of a Gaussian to its standard deviation, 2 sqrt(2 ln 2).
const FWHM_PER_SIGMA: f64 = 2.354_820_045_030_949;

/// One AR(1) step of length `step` for decorrelation time `tau`:
/// E <- rho E + amp W, W complex normal with E|W|^2 = 1, so E|E|^2 stays 1.
#[derive(Debug, Clone, Copy)]
struct Ar {
    rho: f64,
    /// Per-component noise amplitude sqrt((1 - rho^2) / 2).
    amp: f64,
}

impl Ar {
    fn new(step: f64, tau: f64) -> Self {
        if tau.is_infinite() || step <= 0.0 {
            return Self { rho: 1.0, amp: 0.0 };
        }
        let rho = (-step / tau).exp();
        // 1 - rho^2 via expm1 keeps precision when step << tau.
        let amp = (-(-2.0 * step / tau).exp_m1() * 0.5).sqrt();
        Self { rho, amp }
    }

    #[inline]
    fn step(self, e: &mut (f64, f64), rng: &mut SimRng) {
        if self.amp == 0.0 {
            return;
        }
        let (a, b) = rng.normal_pair();
        e.0 = self.rho * e.0 + self.amp * a;
        e.1 = self.rho * e.1 + self.amp * b;
    }
}

/// A stationary complex Gaussian sample with E|E|^2 = 1.
fn initial(rng: &mut SimRng) -> (f64, f64) {
    let (a, b) = rng.normal_pair();
    (
        a * std::f64::consts::FRAC_1_SQRT_2,
        b * std::f64::consts::FRAC_1_SQRT_2,
    )
}

/// Everything the engine needs; built and validated by the public simulation types.
#[derive(Debug, Clone)]
pub(super) struct FieldSim<'a> {
    /// Decorrelation time per pixel [s]; `f64::INFINITY` for static scatterers.
    pub tau: ArrayView2<'a, f64>,
    pub frames: usize,
    /// Exposure time T [s].
    pub exposure: f64,
    /// Frame start-to-start interval [s], >= exposure.
    pub interval: f64,
    /// FWHM of the intensity autocorrelation [pixels]; `None` for independent pixels.
    pub speckle_size: Option<f64>,
    /// Sub-steps per min(tau_c, T).
    pub substeps: u32,
    pub seed: u64,
}

impl FieldSim<'_> {
    /// Number of sub-steps per exposure, dt = T / n <= min(tau_c, T) / substeps.
    pub(super) fn substeps_per_exposure(&self) -> Result<usize> {
        let tau_min = self
            .tau
            .iter()
            .copied()
            .filter(|t| t.is_finite())
            .fold(f64::INFINITY, f64::min);
        let base = tau_min.min(self.exposure);
        let n = (f64::from(self.substeps) * self.exposure / base - 1e-9)
            .ceil()
            .max(1.0);
        if n > MAX_SUBSTEPS {
            return Err(Error::InvalidParameter {
                name: "exposure / tau_c",
                value: format!("{}", self.exposure / tau_min),
                why: format!(
                    "would need {n:.0} sub-steps per exposure (limit {MAX_SUBSTEPS:.0}); use a shorter exposure, a longer tau_c or fewer sub-steps"
                ),
            });
        }
        Ok(n as usize)
    }

    /// Simulated intensity, (frame, row, column), normalised so its expectation is 1.
    pub(super) fn run(&self) -> Result<Array3<f32>> {
        let n_sub = self.substeps_per_exposure()?;
        match self.speckle_size {
            None => Ok(self.run_independent(n_sub)),
            Some(d) => Ok(self.run_correlated(n_sub, d)),
        }
    }

    fn coefficients(&self, tau: f64, n_sub: usize) -> (Ar, Ar) {
        let dt = self.exposure / n_sub as f64;
        (
            Ar::new(dt, tau),
            Ar::new(self.interval - self.exposure, tau),
        )
    }

    /// Every pixel an independent field (speckles smaller than a pixel, point-sampled).
    fn run_independent(&self, n_sub: usize) -> Array3<f32> {
        let (h, w) = self.tau.dim();
        let frames = self.frames;
        let rows: Vec<Vec<f32>> = (0..h)
            .into_par_iter()
            .map(|r| {
                let mut row = vec![0.0f32; frames * w];
                for c in 0..w {
                    let mut rng = SimRng::stream(self.seed, (r * w + c) as u64);
                    let (ar, gap) = self.coefficients(self.tau[[r, c]], n_sub);
                    let mut e = initial(&mut rng);
                    for f in 0..frames {
                        let value = if ar.amp == 0.0 {
                            e.0 * e.0 + e.1 * e.1
                        } else {
                            let mut acc = 0.0;
                            for _ in 0..n_sub {
                                acc += e.0 * e.0 + e.1 * e.1;
                                ar.step(&mut e, &mut rng);
                            }
                            acc / n_sub as f64
                        };
                        row[f * w + c] = value as f32;
                        gap.step(&mut e, &mut rng);
                    }
                }
                row
            })
            .collect();
        let mut out = Array3::zeros((frames, h, w));
        for (r, row) in rows.iter().enumerate() {
            for f in 0..frames {
                for c in 0..w {
                    out[[f, r, c]] = row[f * w + c];
                }
            }
        }
        out
    }

    /// White complex noise on a padded grid, each node its own OU process, convolved with
    /// a separable Gaussian at every sub-step. Convolution is linear, so every image pixel
    /// keeps g1(tau) = exp(-|tau| / tau_c) where tau_c is uniform.
    ///
    /// Sub-steps are processed in batches (three parallel passes per batch: record the
    /// field states, filter rows, filter columns and accumulate) to keep thread
    /// synchronisation rare; each node draws from its own generator in time order, so the
    /// result depends neither on the batch size nor on the thread count.
    fn run_correlated(&self, n_sub: usize, fwhm: f64) -> Array3<f32> {
        let (h, w) = self.tau.dim();
        let kernel = gaussian_kernel(fwhm / FWHM_PER_SIGMA);
        let taps = kernel.len();
        let rad = taps / 2;
        let (hp, wp) = (h + 2 * rad, w + 2 * rad);
        // Padding nodes take the decorrelation time of the nearest image pixel.
        let coef: Vec<(Ar, Ar)> = (0..hp * wp)
            .map(|i| {
                let (pr, pc) = (i / wp, i % wp);
                let r = pr.saturating_sub(rad).min(h - 1);
                let c = pc.saturating_sub(rad).min(w - 1);
                self.coefficients(self.tau[[r, c]], n_sub)
            })
            .collect();
        let has_gap = coef.iter().any(|(_, gap)| gap.amp != 0.0);
        let all_static = coef.iter().all(|(ar, _)| ar.amp == 0.0);
        let samples = if all_static { 1 } else { n_sub };
        let stream_seed = self.seed ^ 0x5EED_C0DE_0000_0001;
        let mut rngs: Vec<SimRng> = (0..hp * wp)
            .map(|i| SimRng::stream(stream_seed, i as u64))
            .collect();
        let mut field: Vec<(f64, f64)> = rngs.iter_mut().map(initial).collect();
        let batch = (BATCH_VALUES / (hp * wp)).clamp(1, samples);
        // Field states per padded row: [row][sub-step][column], real and imaginary apart
        // so the filter loops vectorise; then the row-filtered field, [row][sub-step][column].
        let (mut st_re, mut st_im) = (vec![0.0f64; hp * batch * wp], vec![0.0f64; hp * batch * wp]);
        let (mut tmp_re, mut tmp_im) = (vec![0.0f64; hp * batch * w], vec![0.0f64; hp * batch * w]);
        let mut acc = vec![0.0f64; h * w];
        let mut out = Array3::<f32>::zeros((self.frames, h, w));
        for f in 0..self.frames {
            acc.fill(0.0);
            let mut done = 0;
            while done < samples {
                let nb = batch.min(samples - done);
                // 1. Record nb successive states of every node, advancing it by dt each time.
                st_re
                    .par_chunks_mut(batch * wp)
                    .zip(st_im.par_chunks_mut(batch * wp))
                    .zip(field.par_chunks_mut(wp))
                    .zip(rngs.par_chunks_mut(wp))
                    .zip(coef.par_chunks(wp))
                    .for_each(|((((sre, sim), frow), rrow), crow)| {
                        for pc in 0..wp {
                            let (mut e, rng, ar) = (frow[pc], &mut rrow[pc], crow[pc].0);
                            for b in 0..nb {
                                sre[b * wp + pc] = e.0;
                                sim[b * wp + pc] = e.1;
                                ar.step(&mut e, rng);
                            }
                            frow[pc] = e;
                        }
                    });
                // 2. Filter along rows: tmp[pr][b][c] = sum_k g[k] state[pr][b][c + k].
                tmp_re
                    .par_chunks_mut(batch * w)
                    .zip(tmp_im.par_chunks_mut(batch * w))
                    .zip(st_re.par_chunks(batch * wp))
                    .zip(st_im.par_chunks(batch * wp))
                    .for_each(|(((tre, tim), sre), sim)| {
                        for b in 0..nb {
                            let (tre, tim) =
                                (&mut tre[b * w..(b + 1) * w], &mut tim[b * w..(b + 1) * w]);
                            let (sre, sim) =
                                (&sre[b * wp..(b + 1) * wp], &sim[b * wp..(b + 1) * wp]);
                            tre.fill(0.0);
                            tim.fill(0.0);
                            for (k, g) in kernel.iter().enumerate() {
                                for (t, v) in tre.iter_mut().zip(&sre[k..k + w]) {
                                    *t += g * v;
                                }
                                for (t, v) in tim.iter_mut().zip(&sim[k..k + w]) {
                                    *t += g * v;
                                }
                            }
                        }
                    });
                // 3. Filter along columns and accumulate the intensity.
                acc.par_chunks_mut(w).enumerate().for_each(|(r, arow)| {
                    let (mut ere, mut eim) = (vec![0.0f64; w], vec![0.0f64; w]);
                    for b in 0..nb {
                        ere.fill(0.0);
                        eim.fill(0.0);
                        for (k, g) in kernel.iter().enumerate() {
                            let start = ((r + k) * batch + b) * w;
                            for (e, t) in ere.iter_mut().zip(&tmp_re[start..start + w]) {
                                *e += g * t;
                            }
                            for (e, t) in eim.iter_mut().zip(&tmp_im[start..start + w]) {
                                *e += g * t;
                            }
                        }
                        for ((a, re), im) in arow.iter_mut().zip(&ere).zip(&eim) {
                            *a += re * re + im * im;
                        }
                    }
                });
                done += nb;
            }
            // The exposure has ended; the dead time before the next frame follows.
            if has_gap {
                field
                    .par_chunks_mut(wp)
                    .zip(rngs.par_chunks_mut(wp))
                    .zip(coef.par_chunks(wp))
                    .for_each(|((frow, rrow), crow)| {
                        for ((e, rng), co) in frow.iter_mut().zip(rrow).zip(crow) {
                            co.1.step(e, rng);
                        }
                    });
            }
            let scale = 1.0 / samples as f64;
            for (o, a) in out.index_axis_mut(ndarray::Axis(0), f).iter_mut().zip(&acc) {
                *o = (a * scale) as f32;
            }
        }
        out
    }
}

/// Gaussian of standard deviation `sigma` sampled at integer offsets out to ceil(3 sigma),
/// scaled so the sum of squares is 1 (then a smoothed unit-variance field keeps unit variance).
pub(super) fn gaussian_kernel(sigma: f64) -> Vec<f64> {
    let rad = (3.0 * sigma).ceil().max(1.0) as i64;
    let g: Vec<f64> = (-rad..=rad)
        .map(|k| (-((k * k) as f64) / (2.0 * sigma * sigma)).exp())
        .collect();
    let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
    g.into_iter().map(|v| v / norm).collect()
}
