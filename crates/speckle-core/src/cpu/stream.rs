//! The CPU path of streaming: frames gathered into batches, each batch's contrast by the
//! CPU reference, the maps handed to the sink in frame order.

use crate::cpu::contrast::contrast;
use crate::error::{Error, Result};
use crate::model::contrast::ContrastParams;
use crate::model::frame::Frame;
use crate::model::stream::FrameMaps;
use crate::model::types::RawStack;
use ndarray::{Array2, Array3, Axis};
use std::sync::mpsc::Receiver;

/// Contrast of `first` and every frame from `rx`, `batch` frames at a time; returns the
/// number of frames processed.
pub fn run(
    first: Frame,
    rx: &Receiver<Result<Frame>>,
    params: &ContrastParams,
    batch: usize,
    sink: &mut dyn FnMut(FrameMaps<'_>) -> Result<()>,
) -> Result<usize> {
    let mut done = 0usize;
    let mut pending: Vec<Frame> = Vec::with_capacity(batch);
    pending.push(first);
    let mut flush = |pending: &mut Vec<Frame>, done: &mut usize| -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let r = match stack_frames(pending, *done)? {
            RawStack::U8(s) => contrast(s.view(), params)?,
            RawStack::U16(s) => contrast(s.view(), params)?,
            RawStack::F32(s) => contrast(s.view(), params)?,
        };
        for (i, k) in r.k.axis_iter(Axis(0)).enumerate() {
            let sfi = r.sfi.as_ref().map(|s| s.index_axis(Axis(0), i));
            sink(FrameMaps {
                index: *done + i,
                k,
                sfi,
                flags: Some(r.flags.index_axis(Axis(0), i)),
            })?;
        }
        *done += pending.len();
        pending.clear();
        Ok(())
    };
    for item in rx {
        pending.push(item?);
        if pending.len() == batch {
            flush(&mut pending, &mut done)?;
        }
    }
    flush(&mut pending, &mut done)?;
    Ok(done)
}

/// Copy same-sized frames into one stack.
fn gather<T: Copy + num_zero::Zero>(
    frames: &[Frame],
    h: usize,
    w: usize,
    get: impl Fn(&Frame) -> &Array2<T>,
) -> Array3<T> {
    let mut out = Array3::<T>::from_elem((frames.len(), h, w), T::ZERO);
    for (mut dst, f) in out.outer_iter_mut().zip(frames) {
        dst.assign(get(f));
    }
    out
}

/// Frames of one type and size into a stack; `first` is the stream index of frame 0.
fn stack_frames(frames: &[Frame], first: usize) -> Result<RawStack> {
    let (h, w) = frames[0].dim();
    for (i, f) in frames.iter().enumerate() {
        if f.dim() != (h, w) || f.dtype() != frames[0].dtype() {
            let (gh, gw) = f.dim();
            return Err(Error::FrameSizeMismatch {
                what: format!("stream frame {}", first + i),
                expected_w: w,
                expected_h: h,
                got_w: gw,
                got_h: gh,
            });
        }
    }
    Ok(match &frames[0] {
        Frame::U8(_) => RawStack::U8(gather(frames, h, w, |f| {
            if let Frame::U8(a) = f {
                a
            } else {
                unreachable!("checked")
            }
        })),
        Frame::U16(_) => RawStack::U16(gather(frames, h, w, |f| {
            if let Frame::U16(a) = f {
                a
            } else {
                unreachable!("checked")
            }
        })),
        Frame::F32(_) => RawStack::F32(gather(frames, h, w, |f| {
            if let Frame::F32(a) = f {
                a
            } else {
                unreachable!("checked")
            }
        })),
    })
}

mod num_zero {
    /// The zero of a pixel type, to allocate stacks.
    pub trait Zero {
        const ZERO: Self;
    }
    impl Zero for u8 {
        const ZERO: Self = 0;
    }
    impl Zero for u16 {
        const ZERO: Self = 0;
    }
    impl Zero for f32 {
        const ZERO: Self = 0.0;
    }
}
