//! One entry point for contrast on any device: [`contrast`] runs the exact CPU reference or
//! the GPU kernels, with the same parameters and the same result type.

use crate::contrast::{
    ContrastStack, spatial_contrast_stack, spatiotemporal_contrast, temporal_contrast,
};
use crate::error::{Error, Result};
use crate::flow;
use crate::types::{Pixel, RawStack};
use crate::{Border, Window};
use gpu_runtime::{Backend, Device};
use ndarray::{Array3, ArrayView3};

/// Which contrast to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// K over a square window within each frame (Yang et al. 2011).
    #[default]
    Spatial,
    /// K over N consecutive frames per pixel, sliding along the stack.
    Temporal,
    /// K over a square window and N consecutive frames.
    SpatioTemporal,
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "spatial" => Ok(Mode::Spatial),
            "temporal" => Ok(Mode::Temporal),
            "spatiotemporal" | "spatio-temporal" => Ok(Mode::SpatioTemporal),
            other => Err(Error::InvalidParameter {
                name: "mode",
                value: other.into(),
                why: "expected spatial, temporal or spatiotemporal".into(),
            }),
        }
    }
}

/// What to compute, validated once for both paths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContrastParams {
    pub mode: Mode,
    /// Spatial window (ignored for [`Mode::Temporal`]).
    pub window: Window,
    /// Frames per temporal window (ignored for [`Mode::Spatial`]).
    pub frames: usize,
    pub border: Border,
    /// Pixel level at or above which a pixel is saturated (flags its windows).
    pub saturation: Option<f64>,
    /// Exposure T in seconds: when set, SFI = 1 / (2 T K^2) is computed too.
    pub exposure_s: Option<f64>,
}

impl ContrastParams {
    /// Spatial contrast over `window`, reflect borders, no SFI.
    ///
    /// ```
    /// use speckle_core::{Window, engine::{ContrastParams, Mode}};
    /// let p = ContrastParams::spatial(Window::new(7).unwrap()).with_exposure(5e-3).unwrap();
    /// assert_eq!(p.mode, Mode::Spatial);
    /// ```
    pub fn spatial(window: Window) -> Self {
        ContrastParams {
            mode: Mode::Spatial,
            window,
            frames: 1,
            border: Border::Reflect,
            saturation: None,
            exposure_s: None,
        }
    }

    /// Temporal contrast over `frames` consecutive frames.
    pub fn temporal(frames: usize) -> Self {
        ContrastParams {
            mode: Mode::Temporal,
            frames,
            ..Self::spatial(Window::new(3).expect("3 is a valid window"))
        }
    }

    /// Spatio-temporal contrast over `window` and `frames`.
    pub fn spatiotemporal(window: Window, frames: usize) -> Self {
        ContrastParams {
            mode: Mode::SpatioTemporal,
            frames,
            ..Self::spatial(window)
        }
    }

    pub fn with_border(mut self, border: Border) -> Self {
        self.border = border;
        self
    }

    pub fn with_saturation(mut self, level: Option<f64>) -> Self {
        self.saturation = level;
        self
    }

    /// Also compute SFI for exposure `t` seconds (finite, > 0).
    pub fn with_exposure(mut self, t: f64) -> Result<Self> {
        self.exposure_s = Some(flow::check_exposure(t)?);
        Ok(self)
    }

    /// Spatial radius actually used (0 for temporal).
    pub(crate) fn radius(&self) -> usize {
        if self.mode == Mode::Temporal {
            0
        } else {
            self.window.radius()
        }
    }

    /// The window that sets the output shape: none (a 1x1 window) for temporal contrast.
    pub(crate) fn window_for_shape(&self) -> Option<Window> {
        (self.mode != Mode::Temporal).then_some(self.window)
    }
}

/// Contrast maps of a stack, (frame, row, column).
#[derive(Debug, Clone, PartialEq)]
pub struct ContrastResult {
    /// Speckle contrast K (NaN where the window mean is 0).
    pub k: Array3<f32>,
    /// SFI = 1 / (2 T K^2) in 1/s, when an exposure was given.
    pub sfi: Option<Array3<f32>>,
    /// Flag bits from [`crate::contrast::flags`].
    pub flags: Array3<u8>,
    /// Where it ran.
    pub backend: Backend,
}

/// Contrast of `stack` on `device`: the GPU kernels for integer pixels on a GPU, the CPU
/// reference otherwise (float pixels always run on the CPU, which sums them in f64).
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::{RawStack, Window, engine::{ContrastParams, contrast}};
/// let stack = RawStack::U16(Array3::from_shape_fn((2, 32, 40), |(t, y, x)| ((t + 3 * y + 7 * x) % 23 + 10) as u16));
/// let params = ContrastParams::spatial(Window::new(5)?);
/// let r = contrast(&stack, &params, &gpu_runtime::Device::cpu())?;
/// assert_eq!(r.k.dim(), (2, 32, 40));
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn contrast(
    stack: &RawStack,
    params: &ContrastParams,
    device: &Device,
) -> Result<ContrastResult> {
    if device.is_gpu() {
        match stack {
            RawStack::U8(s) => return crate::gpu::contrast(s.view(), params, device),
            RawStack::U16(s) => return crate::gpu::contrast(s.view(), params, device),
            RawStack::F32(_) => tracing::warn!(
                "float frames run on the CPU path (the GPU kernels sum integers exactly)"
            ),
        }
    }
    match stack {
        RawStack::U8(s) => cpu_contrast(s.view(), params),
        RawStack::U16(s) => cpu_contrast(s.view(), params),
        RawStack::F32(s) => cpu_contrast(s.view(), params),
    }
}

/// The CPU reference, multithreaded.
pub fn cpu_contrast<T: Pixel>(
    stack: ArrayView3<T>,
    params: &ContrastParams,
) -> Result<ContrastResult> {
    let ContrastStack { k, flags: fl, .. } = match params.mode {
        Mode::Spatial => {
            spatial_contrast_stack(stack, params.window, params.border, params.saturation)?
        }
        Mode::Temporal => temporal_contrast(stack, params.frames, params.saturation)?,
        Mode::SpatioTemporal => spatiotemporal_contrast(
            stack,
            params.window,
            params.frames,
            params.border,
            params.saturation,
        )?,
    };
    let sfi = params
        .exposure_s
        .map(|t| k.mapv(|k| flow::sfi(f64::from(k), t) as f32));
    Ok(ContrastResult {
        k,
        sfi,
        flags: fl,
        backend: Backend::Cpu,
    })
}
