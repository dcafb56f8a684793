//! Core data types shared by every part of the speckle pipeline.
//!
//! Stacks are `ndarray::Array3` in (frame, row, column) order, row-major, so that one
//! frame is a contiguous `height x width` slice: the layout cameras deliver and the GPU
//! kernels read.

use ndarray::{Array2, Array3, ArrayView2, ArrayView3};

/// A pixel type a camera delivers. Integer types get exact integer window sums.
pub trait Pixel: Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
    /// `true` for integer pixels, whose window sums are computed exactly.
    const INTEGER: bool;
    /// Name used in messages and file headers ("u8", "u16", "f32").
    const NAME: &'static str;
    /// The value as f64 (exact for every supported type).
    fn to_f64(self) -> f64;
    /// The value as u32 for integer types (f32: truncated, never used for sums).
    fn to_u32(self) -> u32;
}

impl Pixel for u8 {
    const INTEGER: bool = true;
    const NAME: &'static str = "u8";
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn to_u32(self) -> u32 {
        u32::from(self)
    }
}

impl Pixel for u16 {
    const INTEGER: bool = true;
    const NAME: &'static str = "u16";
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn to_u32(self) -> u32 {
        u32::from(self)
    }
}

impl Pixel for f32 {
    const INTEGER: bool = false;
    const NAME: &'static str = "f32";
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn to_u32(self) -> u32 {
        self as u32
    }
}

/// A stack of raw frames in one of the supported pixel types, as read from a file.
#[derive(Debug, Clone, PartialEq)]
pub enum RawStack {
    U8(Array3<u8>),
    U16(Array3<u16>),
    F32(Array3<f32>),
}

impl RawStack {
    /// (frames, height, width).
    pub fn dim(&self) -> (usize, usize, usize) {
        match self {
            RawStack::U8(a) => a.dim(),
            RawStack::U16(a) => a.dim(),
            RawStack::F32(a) => a.dim(),
        }
    }

    /// Pixel type name ("u8", "u16", "f32").
    pub fn dtype(&self) -> &'static str {
        match self {
            RawStack::U8(_) => u8::NAME,
            RawStack::U16(_) => u16::NAME,
            RawStack::F32(_) => f32::NAME,
        }
    }

    /// The whole stack converted to f32 (exact for u8 and u16).
    pub fn to_f32(&self) -> Array3<f32> {
        match self {
            RawStack::U8(a) => a.mapv(f32::from),
            RawStack::U16(a) => a.mapv(f32::from),
            RawStack::F32(a) => a.clone(),
        }
    }
}

/// Camera facts that travel with the frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CameraInfo {
    /// Significant bits per pixel (8, 12, 14, 16); values at `2^bits - 1` are saturated.
    /// `None` for float data (no saturation level).
    pub bit_depth: Option<u32>,
}

impl CameraInfo {
    /// The saturation level, if the data are integers.
    pub fn saturation(&self) -> Option<f64> {
        self.bit_depth.map(|b| ((1u64 << b) - 1) as f64)
    }
}

/// Borrowed view of one frame.
pub type FrameView<'a, T> = ArrayView2<'a, T>;
/// Borrowed view of a stack (frame, row, column).
pub type StackView<'a, T> = ArrayView3<'a, T>;
/// An owned f32 map (row, column), e.g. K or SFI.
pub type Map = Array2<f32>;
