//! Frame-by-frame input: the [`Frame`] type, the [`FrameSource`] iterator that every reader
//! and a live camera feed, and a bounded channel with back-pressure.
//!
//! A frame source yields `Result<Frame>`; the first error ends it (every source here is
//! fused after an error, so a consumer can simply stop at the first `Err`). Every source
//! checks that all frames have the size and pixel type of the first one and reports the
//! index of the first frame that does not.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use ndarray::{Array2, Array3};

use crate::error::{Error, Result};
use crate::model::frame::Frame;
use crate::model::types::RawStack;

/// Anything that yields frames one at a time: a file reader, a camera channel, an iterator
/// over simulated frames. Implemented for every `Iterator<Item = Result<Frame>>`.
pub trait FrameSource: Iterator<Item = Result<Frame>> {}

impl<I: Iterator<Item = Result<Frame>>> FrameSource for I {}

/// Remembers the size and type of the first frame and rejects later frames that differ.
#[derive(Debug, Default, Clone)]
pub(crate) struct FrameGuard {
    first: Option<((usize, usize), &'static str)>,
}

impl FrameGuard {
    /// Check `frame` against the first one seen; `what` names it ("frame 7 of stream").
    pub(crate) fn check(&mut self, frame: &Frame, what: impl FnOnce() -> String) -> Result<()> {
        let (dim, dtype) = (frame.dim(), frame.dtype());
        match self.first {
            None => {
                self.first = Some((dim, dtype));
                Ok(())
            }
            Some(((h, w), _)) if dim != (h, w) => Err(Error::FrameSizeMismatch {
                what: what(),
                expected_w: w,
                expected_h: h,
                got_w: dim.1,
                got_h: dim.0,
            }),
            Some((_, t)) if dtype != t => Err(Error::PixelTypeMismatch {
                what: what(),
                expected: t,
                got: dtype,
            }),
            Some(_) => Ok(()),
        }
    }
}

/// Appends frames into one contiguous stack without an intermediate `Vec<Frame>`.
#[derive(Debug, Default)]
pub(crate) struct StackBuilder {
    guard: FrameGuard,
    data: Option<Frame1D>,
    frames: usize,
    dim: (usize, usize),
}

#[derive(Debug)]
enum Frame1D {
    U8(Vec<u8>),
    U16(Vec<u16>),
    F32(Vec<f32>),
}

fn extend<T: Copy>(v: &mut Vec<T>, a: &Array2<T>) {
    match a.as_slice() {
        Some(s) => v.extend_from_slice(s),
        None => v.extend(a.iter().copied()),
    }
}

impl StackBuilder {
    /// Append one frame; `what` names it for errors.
    pub(crate) fn push(&mut self, frame: &Frame, what: impl FnOnce() -> String) -> Result<()> {
        self.guard.check(frame, what)?;
        self.dim = frame.dim();
        let data = self.data.get_or_insert_with(|| match frame {
            Frame::U8(_) => Frame1D::U8(Vec::new()),
            Frame::U16(_) => Frame1D::U16(Vec::new()),
            Frame::F32(_) => Frame1D::F32(Vec::new()),
        });
        match (data, frame) {
            (Frame1D::U8(v), Frame::U8(a)) => extend(v, a),
            (Frame1D::U16(v), Frame::U16(a)) => extend(v, a),
            (Frame1D::F32(v), Frame::F32(a)) => extend(v, a),
            // The guard has already rejected a type change.
            _ => unreachable!("pixel type checked by FrameGuard"),
        }
        self.frames += 1;
        Ok(())
    }

    /// Number of frames pushed so far.
    pub(crate) fn len(&self) -> usize {
        self.frames
    }

    /// The stack, or `None` if no frame was pushed.
    pub(crate) fn finish(self) -> Option<RawStack> {
        let (h, w) = self.dim;
        let shape = (self.frames, h, w);
        // The shape matches the data by construction (every frame was size-checked).
        Some(match self.data? {
            Frame1D::U8(v) => RawStack::U8(Array3::from_shape_vec(shape, v).ok()?),
            Frame1D::U16(v) => RawStack::U16(Array3::from_shape_vec(shape, v).ok()?),
            Frame1D::F32(v) => RawStack::F32(Array3::from_shape_vec(shape, v).ok()?),
        })
    }
}

/// Read every frame of a source into one stack, stopping at the first error.
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::io::{Frame, collect_stack};
/// let frames = (0..3).map(|i| Ok(Frame::U8(Array2::from_elem((2, 4), i as u8))));
/// let stack = collect_stack(frames).unwrap();
/// assert_eq!(stack.dim(), (3, 2, 4));
/// ```
pub fn collect_stack(source: impl FrameSource) -> Result<RawStack> {
    let mut builder = StackBuilder::default();
    for frame in source {
        let frame = frame?;
        let index = builder.len();
        builder.push(&frame, || format!("frame {index} of the frame source"))?;
    }
    builder.finish().ok_or_else(|| Error::InvalidParameter {
        name: "frames",
        value: "0".into(),
        why: "the frame source ended before delivering any frame".into(),
    })
}

/// Iterate over the frames of a stack already in memory (e.g. simulated frames).
pub fn stack_frames(stack: &RawStack) -> impl Iterator<Item = Result<Frame>> + '_ {
    let n = stack.dim().0;
    (0..n).map(move |i| {
        Ok(match stack {
            RawStack::U8(a) => Frame::U8(a.index_axis(ndarray::Axis(0), i).to_owned()),
            RawStack::U16(a) => Frame::U16(a.index_axis(ndarray::Axis(0), i).to_owned()),
            RawStack::F32(a) => Frame::F32(a.index_axis(ndarray::Axis(0), i).to_owned()),
        })
    })
}

/// Create a bounded frame channel: a camera thread sends, a processing thread iterates.
///
/// At most `capacity` frames wait in the channel; [`FrameSender::send`] then blocks until
/// the consumer catches up (back-pressure), so memory stays bounded however slow the
/// processing is. `capacity = 0` makes every send wait for the receiver (rendezvous).
///
/// ```
/// use ndarray::Array2;
/// use speckle_core::io::{Frame, frame_channel};
/// let (tx, rx) = frame_channel(2);
/// let camera = std::thread::spawn(move || {
///     for i in 0..5u16 {
///         tx.send(Frame::U16(Array2::from_elem((4, 4), i))).unwrap();
///     }
/// }); // dropping `tx` ends the stream
/// let sums: Vec<f32> = rx.map(|f| f.unwrap().to_f32().sum()).collect();
/// camera.join().unwrap();
/// assert_eq!(sums, vec![0.0, 16.0, 32.0, 48.0, 64.0]);
/// ```
pub fn frame_channel(capacity: usize) -> (FrameSender, FrameReceiver) {
    let (tx, rx) = sync_channel(capacity);
    (
        FrameSender { tx },
        FrameReceiver {
            rx,
            guard: FrameGuard::default(),
            index: 0,
            done: false,
        },
    )
}

/// Producer half of [`frame_channel`]; clone it to feed from several threads.
#[derive(Debug, Clone)]
pub struct FrameSender {
    tx: SyncSender<Result<Frame>>,
}

impl FrameSender {
    /// Send a frame, blocking while the channel is full.
    ///
    /// Fails with [`Error::StreamClosed`] once the receiver is gone, the signal for a camera
    /// loop to stop.
    pub fn send(&self, frame: impl Into<Frame>) -> Result<()> {
        self.tx
            .send(Ok(frame.into()))
            .map_err(|_| Error::StreamClosed)
    }

    /// Send without blocking: `Ok(Some(frame))` hands the frame back when the channel is
    /// full, for producers that prefer to drop frames rather than wait.
    pub fn try_send(&self, frame: impl Into<Frame>) -> Result<Option<Frame>> {
        match self.tx.try_send(Ok(frame.into())) {
            Ok(()) => Ok(None),
            Err(TrySendError::Full(Ok(frame))) => Ok(Some(frame)),
            Err(TrySendError::Full(Err(_)) | TrySendError::Disconnected(_)) => {
                Err(Error::StreamClosed)
            }
        }
    }

    /// Pass a producer failure (camera error) to the consumer, which receives it as the
    /// stream's last item.
    pub fn send_error(&self, error: Error) -> Result<()> {
        self.tx.send(Err(error)).map_err(|_| Error::StreamClosed)
    }
}

/// Consumer half of [`frame_channel`]: a [`FrameSource`] that ends when every sender has
/// been dropped, or after the first error.
#[derive(Debug)]
pub struct FrameReceiver {
    rx: Receiver<Result<Frame>>,
    guard: FrameGuard,
    index: usize,
    done: bool,
}

impl Iterator for FrameReceiver {
    type Item = Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let Ok(item) = self.rx.recv() else {
            self.done = true;
            return None;
        };
        let index = self.index;
        self.index += 1;
        let checked = item.and_then(|frame| {
            self.guard
                .check(&frame, || format!("frame {index} of the frame channel"))?;
            Ok(frame)
        });
        if checked.is_err() {
            self.done = true;
        }
        Some(checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_frame(h: usize, w: usize, v: u16) -> Frame {
        Frame::U16(Array2::from_elem((h, w), v))
    }

    #[test]
    fn channel_delivers_frames_in_order_and_ends_when_sender_drops() {
        let (tx, rx) = frame_channel(1);
        let producer = std::thread::spawn(move || {
            for i in 0..10 {
                tx.send(u16_frame(3, 5, i)).unwrap();
            }
        });
        let stack = collect_stack(rx).unwrap();
        producer.join().unwrap();
        let RawStack::U16(a) = stack else {
            panic!("expected u16")
        };
        assert_eq!(a.dim(), (10, 3, 5));
        assert_eq!(a[[7, 2, 4]], 7);
    }

    #[test]
    fn channel_blocks_producer_when_full() {
        let (tx, rx) = frame_channel(2);
        assert!(tx.try_send(u16_frame(2, 2, 0)).unwrap().is_none());
        assert!(tx.try_send(u16_frame(2, 2, 1)).unwrap().is_none());
        // Full: the frame comes back instead of being buffered.
        let back = tx.try_send(u16_frame(2, 2, 2)).unwrap();
        assert_eq!(back, Some(u16_frame(2, 2, 2)));
        drop(tx);
        assert_eq!(rx.count(), 2);
    }

    #[test]
    fn channel_reports_size_change_with_frame_index_and_stops() {
        let (tx, mut rx) = frame_channel(8);
        tx.send(u16_frame(4, 4, 0)).unwrap();
        tx.send(u16_frame(4, 4, 1)).unwrap();
        tx.send(u16_frame(4, 5, 2)).unwrap();
        tx.send(u16_frame(4, 4, 3)).unwrap();
        drop(tx);
        assert!(rx.next().unwrap().is_ok());
        assert!(rx.next().unwrap().is_ok());
        let err = rx.next().unwrap().unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::FrameSizeMismatch { .. }), "{msg}");
        assert!(msg.contains("frame 2"), "{msg}");
        assert!(msg.contains("expected 4x4, got 5x4"), "{msg}");
        assert!(rx.next().is_none(), "source must end after an error");
    }

    #[test]
    fn channel_reports_pixel_type_change() {
        let (tx, rx) = frame_channel(4);
        tx.send(u16_frame(2, 2, 0)).unwrap();
        tx.send(Frame::U8(Array2::zeros((2, 2)))).unwrap();
        drop(tx);
        let err = collect_stack(rx).unwrap_err();
        assert!(matches!(
            err,
            Error::PixelTypeMismatch {
                expected: "u16",
                got: "u8",
                ..
            }
        ));
        assert!(err.to_string().contains("frame 1"));
    }

    #[test]
    fn send_fails_once_receiver_is_dropped() {
        let (tx, rx) = frame_channel(1);
        drop(rx);
        assert!(matches!(
            tx.send(u16_frame(1, 1, 0)),
            Err(Error::StreamClosed)
        ));
    }

    #[test]
    fn producer_error_reaches_consumer() {
        let (tx, rx) = frame_channel(1);
        let t = std::thread::spawn(move || {
            tx.send(u16_frame(1, 1, 0)).unwrap();
            tx.send_error(Error::InvalidParameter {
                name: "camera",
                value: "lost".into(),
                why: "camera lost".into(),
            })
            .unwrap();
        });
        let items: Vec<_> = rx.collect();
        t.join().unwrap();
        assert_eq!(items.len(), 2);
        assert!(
            items[1]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("camera lost")
        );
    }

    #[test]
    fn empty_source_is_an_error() {
        let err = collect_stack(std::iter::empty()).unwrap_err();
        assert!(err.to_string().contains("before delivering any frame"));
    }

    #[test]
    fn stack_frames_round_trips() {
        let stack = RawStack::F32(Array3::from_shape_fn((3, 2, 2), |(f, r, c)| {
            (f * 4 + r * 2 + c) as f32
        }));
        let back = collect_stack(stack_frames(&stack)).unwrap();
        assert_eq!(back, stack);
    }
}
