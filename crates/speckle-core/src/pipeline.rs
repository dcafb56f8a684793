//! Live processing: frames from any [`FrameSource`] (a camera feeding a
//! [`frame_channel`](crate::io::frame_channel), a file read frame by frame) to contrast maps,
//! in order, with bounded memory.
//!
//! A reader thread pulls frames into a bounded channel (a slow consumer blocks the
//! producer: back-pressure, never unbounded buffering); the calling thread gathers batches
//! of `batch` frames and hands each frame's maps to the sink in order. Integer frames on a
//! GPU go through `gpu_stream`: pinned host buffers, one upload, one launch and one
//! download per batch, with consecutive batches overlapped on separate streams. Float
//! frames, and any frame on the CPU, run [`engine::contrast`](crate::engine::contrast) per
//! batch.

use crate::engine::{ContrastParams, Mode, contrast};
use crate::error::{Error, Result};
use crate::io::{Frame, FrameSource};
use crate::types::RawStack;
use gpu_runtime::Device;
use ndarray::{Array2, Array3, ArrayView2, Axis};
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

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

/// The GPU streaming path for one pixel type.
type StreamFn = fn(
    Frame,
    &std::sync::mpsc::Receiver<Result<Frame>>,
    &ContrastParams,
    &Device,
    usize,
    &mut dyn FnMut(FrameMaps<'_>) -> Result<()>,
) -> Result<usize>;

/// Throughput of a finished stream.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StreamReport {
    pub frames: usize,
    pub seconds: f64,
    pub frames_per_second: f64,
}

/// Spatial contrast of a stream of frames; `sink` sees every frame's maps in order.
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::io::Frame;
/// use speckle_core::{Window, engine::ContrastParams, pipeline::process_stream};
/// let frames = (0..10u16).map(|t| Ok(Frame::U16(Array2::from_shape_fn((16, 20), |(y, x)| (x as u16 * 3 + y as u16 + t) % 40 + 1))));
/// let mut seen = Vec::new();
/// let report = process_stream(frames, &ContrastParams::spatial(Window::new(5)?), &gpu_runtime::Device::cpu(), 4, |m| {
///     seen.push(m.index);
///     Ok(())
/// })?;
/// assert_eq!(seen, (0..10).collect::<Vec<_>>());
/// assert_eq!(report.frames, 10);
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn process_stream<S, F>(
    source: S,
    params: &ContrastParams,
    device: &Device,
    batch: usize,
    mut sink: F,
) -> Result<StreamReport>
where
    S: FrameSource + Send,
    F: FnMut(FrameMaps<'_>) -> Result<()>,
{
    if params.mode != Mode::Spatial {
        return Err(Error::InvalidParameter {
            name: "mode",
            value: format!("{:?}", params.mode),
            why: "streaming computes spatial contrast; use the stack API for temporal contrast"
                .into(),
        });
    }
    let batch = batch.max(1);
    let start = Instant::now();
    let mut done = 0usize;
    std::thread::scope(|scope| -> Result<()> {
        // Two batches in flight at most: one being read, one being computed.
        let (tx, rx) = sync_channel::<Result<Frame>>(2 * batch);
        scope.spawn(move || {
            for item in source {
                let stop = item.is_err();
                if tx.send(item).is_err() || stop {
                    break;
                }
            }
        });
        let first = match rx.recv() {
            Ok(item) => item?,
            Err(_) => return Ok(()), // empty stream
        };
        // Integer frames on a GPU take the overlapped zero-copy path; the rest the general one.
        if device.is_gpu() {
            let overlapped = match first {
                Frame::U16(_) => Some(crate::gpu_stream::stream_spatial::<u16> as StreamFn),
                Frame::U8(_) => Some(crate::gpu_stream::stream_spatial::<u8> as StreamFn),
                Frame::F32(_) => None,
            };
            if let Some(stream) = overlapped {
                done = stream(first, &rx, params, device, batch, &mut sink)?;
                return Ok(());
            }
        }
        let mut pending: Vec<Frame> = Vec::with_capacity(batch);
        pending.push(first);
        let mut flush = |pending: &mut Vec<Frame>, done: &mut usize| -> Result<()> {
            if pending.is_empty() {
                return Ok(());
            }
            let stack = stack_frames(pending, *done)?;
            let r = contrast(&stack, params, device)?;
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
        flush(&mut pending, &mut done)
    })?;
    let seconds = start
        .elapsed()
        .as_secs_f64()
        .max(Duration::from_nanos(1).as_secs_f64());
    Ok(StreamReport {
        frames: done,
        seconds,
        frames_per_second: done as f64 / seconds,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Window;

    #[test]
    fn stream_results_equal_the_stack_results_in_order() {
        let frames: Vec<Array2<u16>> = (0..7u16)
            .map(|t| {
                Array2::from_shape_fn((12, 15), |(y, x)| {
                    (x as u16 * 7 + y as u16 * 3 + t * 11) % 90 + 1
                })
            })
            .collect();
        let params = ContrastParams::spatial(Window::new(3).unwrap())
            .with_exposure(1e-3)
            .unwrap();
        let views: Vec<_> = frames.iter().map(|f| f.view()).collect();
        let stack = RawStack::U16(ndarray::stack(Axis(0), &views).unwrap());
        let want = contrast(&stack, &params, &Device::cpu()).unwrap();
        let mut got = Vec::new();
        let src = frames.into_iter().map(|f| Ok(Frame::U16(f)));
        let report = process_stream(src, &params, &Device::cpu(), 3, |m| {
            got.push((m.index, m.k.to_owned(), m.sfi.map(|s| s.to_owned())));
            Ok(())
        })
        .unwrap();
        assert_eq!(report.frames, 7);
        for (i, (index, k, sfi)) in got.into_iter().enumerate() {
            assert_eq!(index, i);
            assert_eq!(k, want.k.index_axis(Axis(0), i));
            assert_eq!(
                sfi.unwrap(),
                want.sfi.as_ref().unwrap().index_axis(Axis(0), i)
            );
        }
    }

    #[test]
    fn a_frame_of_another_size_stops_the_stream_with_its_index() {
        let mut frames: Vec<Result<Frame>> = (0..4)
            .map(|_| Ok(Frame::U8(Array2::from_elem((8, 8), 5))))
            .collect();
        frames.push(Ok(Frame::U8(Array2::from_elem((8, 9), 5))));
        let err = process_stream(
            frames.into_iter(),
            &ContrastParams::spatial(Window::new(3).unwrap()),
            &Device::cpu(),
            8,
            |_| Ok(()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("stream frame 4"), "{err}");
    }

    #[test]
    fn a_source_error_is_returned_not_swallowed() {
        let frames = vec![
            Ok(Frame::U8(Array2::from_elem((8, 8), 5))),
            Err(Error::StreamClosed),
        ];
        assert!(
            process_stream(
                frames.into_iter(),
                &ContrastParams::spatial(Window::new(3).unwrap()),
                &Device::cpu(),
                1,
                |_| Ok(())
            )
            .is_err()
        );
    }
}
