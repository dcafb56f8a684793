//! One camera frame in the pixel type the camera or file delivered.

use ndarray::Array2;

use crate::model::types::Pixel;

/// One camera frame, (row, column), in the pixel type the camera or file delivered.
///
/// An enum rather than a generic `Array2<T>` so that one stream can be opened before its
/// pixel type is known (as with [`crate::model::types::RawStack`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    U8(Array2<u8>),
    U16(Array2<u16>),
    F32(Array2<f32>),
}

impl Frame {
    /// (height, width).
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Frame::U8(a) => a.dim(),
            Frame::U16(a) => a.dim(),
            Frame::F32(a) => a.dim(),
        }
    }

    /// Pixel type name ("u8", "u16", "f32").
    pub fn dtype(&self) -> &'static str {
        match self {
            Frame::U8(_) => u8::NAME,
            Frame::U16(_) => u16::NAME,
            Frame::F32(_) => f32::NAME,
        }
    }

    /// The frame converted to f32 (exact for u8 and u16).
    pub fn to_f32(&self) -> Array2<f32> {
        match self {
            Frame::U8(a) => a.mapv(f32::from),
            Frame::U16(a) => a.mapv(f32::from),
            Frame::F32(a) => a.clone(),
        }
    }

    /// Largest value, for bit-depth checks (NaN ignored; `None` for an empty frame).
    pub(crate) fn max_value(&self) -> Option<f64> {
        fn fold<T: Pixel>(a: &Array2<T>) -> Option<f64> {
            a.iter()
                .map(|v| v.to_f64())
                .filter(|v| !v.is_nan())
                .fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
        }
        match self {
            Frame::U8(a) => fold(a),
            Frame::U16(a) => fold(a),
            Frame::F32(a) => fold(a),
        }
    }
}

impl From<Array2<u8>> for Frame {
    fn from(a: Array2<u8>) -> Self {
        Frame::U8(a)
    }
}

impl From<Array2<u16>> for Frame {
    fn from(a: Array2<u16>) -> Self {
        Frame::U16(a)
    }
}

impl From<Array2<f32>> for Frame {
    fn from(a: Array2<f32>) -> Self {
        Frame::F32(a)
    }
}
