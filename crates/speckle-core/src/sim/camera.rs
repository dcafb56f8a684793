//! A simple camera model turning simulated intensity into integer frames: scaling to a
//! mean count, Poisson shot noise, Gaussian read noise, a dark offset, rounding and
//! saturation at the bit depth.

use ndarray::{Array3, ArrayView3, Axis};
use rayon::prelude::*;

use super::rng::SimRng;
use crate::error::{Error, Result};
use crate::model::types::{CameraInfo, RawStack};

/// Camera parameters; counts are digital numbers with a gain of one count per electron.
#[derive(Debug, Clone, PartialEq)]
pub struct Camera {
    /// Mean signal in counts for intensity 1 (the mean of simulated speckle), before offset.
    pub mean_counts: f64,
    /// Bits per pixel, 1..=16; frames are u8 up to 8 bits, else u16; values saturate at
    /// 2^bits - 1.
    pub bit_depth: u32,
    /// Draw each signal from a Poisson distribution (photon shot noise).
    pub shot_noise: bool,
    /// Standard deviation of Gaussian read noise, counts.
    pub read_noise: f64,
    /// Dark offset added to every pixel, counts.
    pub offset: f64,
}

impl Camera {
    /// A shot-noise-limited camera without read noise or offset.
    pub fn new(mean_counts: f64, bit_depth: u32) -> Self {
        Self {
            mean_counts,
            bit_depth,
            shot_noise: true,
            read_noise: 0.0,
            offset: 0.0,
        }
    }

    /// Turn shot noise on or off (off: counts are the scaled intensity, rounded).
    pub fn with_shot_noise(mut self, on: bool) -> Self {
        self.shot_noise = on;
        self
    }

    /// Gaussian read noise of `sigma` counts.
    pub fn with_read_noise(mut self, sigma: f64) -> Self {
        self.read_noise = sigma;
        self
    }

    /// A constant dark offset of `counts`.
    pub fn with_offset(mut self, counts: f64) -> Self {
        self.offset = counts;
        self
    }

    /// What downstream code needs to know: the bit depth (saturation level).
    pub fn info(&self) -> CameraInfo {
        CameraInfo {
            bit_depth: Some(self.bit_depth),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |name, value: String, why: &str| {
            Err(Error::InvalidParameter {
                name,
                value,
                why: why.into(),
            })
        };
        if !(self.mean_counts.is_finite() && self.mean_counts > 0.0) {
            return bad(
                "mean_counts",
                self.mean_counts.to_string(),
                "must be a finite number > 0",
            );
        }
        if !(1..=16).contains(&self.bit_depth) {
            return bad("bit_depth", self.bit_depth.to_string(), "must be 1..=16");
        }
        if !(self.read_noise.is_finite() && self.read_noise >= 0.0) {
            return bad(
                "read_noise",
                self.read_noise.to_string(),
                "must be a finite number >= 0",
            );
        }
        if !(self.offset.is_finite() && self.offset >= 0.0) {
            return bad(
                "offset",
                self.offset.to_string(),
                "must be a finite number >= 0",
            );
        }
        Ok(())
    }

    /// Record `intensity` (frame, row, column; mean about 1) as integer frames. Frame `f`
    /// draws its noise from stream `f` of `seed`, so results do not depend on threads.
    #[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
    pub fn expose(&self, intensity: ArrayView3<'_, f32>, seed: u64) -> Result<RawStack> {
        self.validate()?;
        let max = f64::from((1u32 << self.bit_depth) - 1);
        let frames: Vec<Vec<u16>> = intensity
            .axis_iter(Axis(0))
            .into_par_iter()
            .enumerate()
            .map(|(f, frame)| {
                let mut rng = SimRng::stream(seed ^ 0xCA3E_4A00, f as u64);
                frame
                    .iter()
                    .map(|&i| {
                        let signal = (f64::from(i) * self.mean_counts).max(0.0);
                        let mut v = if self.shot_noise {
                            rng.poisson(signal) as f64
                        } else {
                            signal
                        };
                        v += self.offset;
                        if self.read_noise > 0.0 {
                            v += self.read_noise * rng.normal();
                        }
                        v.round().clamp(0.0, max) as u16
                    })
                    .collect()
            })
            .collect();
        let shape = intensity.dim();
        let flat: Vec<u16> = frames.into_iter().flatten().collect();
        let stack = Array3::from_shape_vec(shape, flat).expect("one value per pixel");
        Ok(if self.bit_depth <= 8 {
            RawStack::U8(stack.mapv(|v| v as u8))
        } else {
            RawStack::U16(stack)
        })
    }
}
