//! What both contrast paths agree on: the contrast mode, the validated parameters and the
//! result maps of [`crate::api::contrast`].

use crate::error::{Error, Result};
use crate::model::flow;
use crate::model::window::{Border, Window};
use gpu_runtime::Backend;
use ndarray::Array3;

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
    /// use speckle_core::{ContrastParams, Mode, Window};
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
pub struct ContrastMaps {
    /// Speckle contrast K (NaN where the window mean is 0).
    pub k: Array3<f32>,
    /// SFI = 1 / (2 T K^2) in 1/s, when an exposure was given.
    pub sfi: Option<Array3<f32>>,
    /// Flag bits from [`crate::model::flags`].
    pub flags: Array3<u8>,
}

impl ContrastMaps {
    /// Consecutive parts of one stack's maps (as computed batch by batch) joined along the
    /// frame axis; `None` for no part. Every part must have the same frame size and all or
    /// none an SFI.
    pub fn concat(parts: &[ContrastMaps]) -> Result<Option<ContrastMaps>> {
        let Some(first) = parts.first() else {
            return Ok(None);
        };
        let shape_err = |e: ndarray::ShapeError| Error::InvalidParameter {
            name: "parts",
            value: format!("{} contrast parts", parts.len()),
            why: format!("the parts' frames differ in size: {e}"),
        };
        let join = |f: &dyn Fn(&ContrastMaps) -> ndarray::ArrayView3<f32>| {
            ndarray::concatenate(ndarray::Axis(0), &parts.iter().map(f).collect::<Vec<_>>())
                .map_err(shape_err)
        };
        let k = join(&|r| r.k.view())?;
        let sfi = if first.sfi.is_some() {
            if parts.iter().any(|r| r.sfi.is_none()) {
                return Err(Error::InvalidParameter {
                    name: "parts",
                    value: format!("{} contrast parts", parts.len()),
                    why: "some parts have an SFI and some do not".into(),
                });
            }
            Some(join(&|r| r.sfi.as_ref().expect("checked").view())?)
        } else {
            None
        };
        let flags = ndarray::concatenate(
            ndarray::Axis(0),
            &parts.iter().map(|r| r.flags.view()).collect::<Vec<_>>(),
        )
        .map_err(shape_err)?;
        Ok(Some(ContrastMaps { k, sfi, flags }))
    }
}

/// How a contrast was computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContrastInfo {
    /// Where it ran (float frames always run on the CPU).
    pub backend: Backend,
    /// The record to keep with the maps: library, device, precision, start time.
    pub provenance: gpu_runtime::Provenance,
}
