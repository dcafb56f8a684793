//! What the streaming paths agree on: the stream's parameters, each frame's maps as the
//! sink sees them, and the throughput report.

use crate::model::contrast::ContrastParams;
use crate::model::tuning::GpuTuning;
use ndarray::ArrayView2;

/// Parameters of [`crate::api::stream`]: spatial contrast, frames per batch, GPU tuning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamParams {
    /// The contrast of every frame (spatial mode only).
    pub contrast: ContrastParams,
    /// Frames gathered per batch (at least 1).
    pub batch: usize,
    /// How the GPU path overlaps batches.
    pub tuning: GpuTuning,
}

impl StreamParams {
    /// `contrast` in batches of `batch` frames, default tuning.
    pub fn new(contrast: ContrastParams, batch: usize) -> Self {
        Self {
            contrast,
            batch,
            tuning: GpuTuning::default(),
        }
    }

    pub fn with_tuning(mut self, tuning: GpuTuning) -> Self {
        self.tuning = tuning;
        self
    }
}

/// Maps of one frame, handed to the sink.
#[derive(Debug)]
pub struct FrameMaps<'a> {
    /// Index of the frame in the stream.
    pub index: usize,
    pub k: ArrayView2<'a, f32>,
    pub sfi: Option<ArrayView2<'a, f32>>,
    /// Flag bits; `None` on the GPU stream path when no saturation level was given (the
    /// only flag would then be "undefined", which K's NaN already marks).
    pub flags: Option<ArrayView2<'a, u8>>,
}

/// Throughput of a finished stream, and how it was computed.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StreamReport {
    pub frames: usize,
    pub seconds: f64,
    pub frames_per_second: f64,
    /// Library, device and arithmetic that computed the maps.
    pub provenance: gpu_runtime::Provenance,
}
