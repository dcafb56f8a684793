//! Live spatial contrast on a GPU with upload, kernel and download overlapped.
//!
//! `GpuTuning::stream_workers` threads (3 by default) each own a set of device arrays and take batches in turn. CubeCL runs
//! every host thread's kernels on that thread's own CUDA stream, and gpu-runtime's pinned
//! copies also run on per-thread streams, so while one worker uploads batch b + 1, another
//! runs the kernel on batch b and a third downloads batch b - 1. Host buffers (page-locked
//! on CUDA) travel with each batch: the caller's thread gathers frames, a worker copies
//! them once into pinned memory and fills the slot's K (SFI, flags) buffers, and the
//! caller's thread hands the sink views into that memory, in frame order, before the slot
//! is used again. At most `stream_workers` batches are in flight: back-pressure, bounded memory.
//! When the source has no frame ready (a camera slower than the GPU), the caller's thread
//! first collects the batches in flight and then sends what it has gathered, so each map
//! reaches the sink as soon as it is computed rather than a few batches later.

use crate::error::{Error, Result};
use crate::gpu::pixel::{PackedPixel, spatial_params};
use crate::model::contrast::ContrastParams;
use crate::model::frame::Frame;
use crate::model::stream::{FrameMaps, StreamParams};
use crate::model::window::contrast_shape;
use gpu_kernels::speckle as kernels;
use gpu_runtime::{Device, Gpu, GpuArray, HostStaging, KnownRuntime, with_gpu};
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};

/// Geometry and settings of one stream, fixed by its first frame.
#[derive(Clone, Copy)]
struct Shape {
    w: usize,
    h: usize,
    /// Output plane (`valid` border: smaller than the frame).
    out: (usize, usize),
    batch: usize,
    frame_bytes: usize,
    saturation: Option<u32>,
    with_sfi: bool,
}

impl Shape {
    fn words(&self) -> usize {
        (self.batch * self.frame_bytes).div_ceil(4)
    }

    fn plane(&self) -> usize {
        self.out.0 * self.out.1
    }
}

/// A batch of frames and the host memory it travels with.
type Job = (Vec<Frame>, Slot);

/// Host memory of one batch: the packed input frames and the maps coming back.
struct Slot {
    input: HostStaging,
    k: HostStaging,
    sfi: Option<HostStaging>,
    flags: Option<HostStaging>,
    flags_u8: Vec<u8>,
    /// Frames in the batch now held.
    frames: usize,
}

/// Slots kept between streams: page-locking the hundreds of megabytes a stream uses costs
/// a good part of a second, which a restarted live stream should not pay again.
static SLOT_CACHE: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

impl Slot {
    /// `count` slots for `shape`, from the cache where they fit.
    fn take_all<R: KnownRuntime>(
        gpu: &Gpu<R>,
        shape: &Shape,
        pinned: bool,
        count: usize,
    ) -> Vec<Slot> {
        let cached = std::mem::take(
            &mut *SLOT_CACHE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut slots: Vec<Slot> = cached
            .into_iter()
            .filter(|s| s.fits(shape, pinned))
            .take(count)
            .collect();
        for slot in &mut slots {
            // Maps this stream does not compute must not reach its sink.
            slot.sfi = slot.sfi.take().filter(|_| shape.with_sfi);
            slot.flags = slot.flags.take().filter(|_| shape.saturation.is_some());
            slot.flags_u8.resize(
                shape.saturation.map_or(0, |_| shape.batch * shape.plane()),
                0,
            );
        }
        while slots.len() < count {
            slots.push(Slot::new(gpu, shape));
        }
        slots
    }

    /// Keep `slots` for the next stream.
    fn put_back(slots: Vec<Slot>) {
        *SLOT_CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = slots;
    }

    fn fits(&self, shape: &Shape, pinned: bool) -> bool {
        let maps = shape.batch * shape.plane() * 4;
        let holds = |b: &Option<HostStaging>, want: bool| {
            !want || b.as_ref().is_some_and(|b| b.len() >= maps)
        };
        self.input.is_pinned() == pinned
            && self.input.len() >= shape.words() * 4
            && self.k.len() >= maps
            && holds(&self.sfi, shape.with_sfi)
            && holds(&self.flags, shape.saturation.is_some())
    }

    fn new<R: KnownRuntime>(gpu: &Gpu<R>, shape: &Shape) -> Slot {
        let maps = shape.batch * shape.plane() * 4;
        Slot {
            input: gpu.host_staging(shape.words() * 4),
            k: gpu.host_staging(maps),
            sfi: shape.with_sfi.then(|| gpu.host_staging(maps)),
            flags: shape.saturation.map(|_| gpu.host_staging(maps)),
            flags_u8: vec![0; shape.saturation.map_or(0, |_| shape.batch * shape.plane())],
            frames: 0,
        }
    }

    /// Hand frame after frame of this batch to the sink, numbered from `first`.
    fn emit(
        &self,
        shape: &Shape,
        first: usize,
        sink: &mut dyn FnMut(FrameMaps<'_>) -> Result<()>,
    ) -> Result<()> {
        let n = self.frames * shape.plane();
        let k: &[f32] = bytemuck::cast_slice(&self.k.as_bytes()[..n * 4]);
        let sfi: Option<&[f32]> = self
            .sfi
            .as_ref()
            .map(|s| bytemuck::cast_slice(&s.as_bytes()[..n * 4]));
        for i in 0..self.frames {
            sink(FrameMaps {
                index: first + i,
                k: plane_view(k, i, shape.out),
                sfi: sfi.map(|all| plane_view(all, i, shape.out)),
                // Flags exist only with a saturation level; otherwise the sole flag,
                // "undefined", is carried by K's NaN and nothing is computed per pixel.
                flags: self
                    .flags
                    .as_ref()
                    .map(|_| plane_view(&self.flags_u8, i, shape.out)),
            })?;
        }
        Ok(())
    }
}

/// Device arrays of one worker, allocated on the worker's thread (its CubeCL stream).
struct DeviceBuffers {
    input: GpuArray<u32>,
    k: GpuArray<f32>,
    sfi: GpuArray<f32>,
    flags: GpuArray<u32>,
}

impl DeviceBuffers {
    fn new<R: KnownRuntime>(gpu: &Gpu<R>, shape: &Shape) -> gpu_runtime::Result<Self> {
        let maps = shape.batch * shape.plane();
        Ok(DeviceBuffers {
            input: gpu.empty::<u32>(shape.words())?,
            k: gpu.empty::<f32>(maps)?,
            sfi: gpu.empty::<f32>(if shape.with_sfi { maps } else { 1 })?,
            flags: gpu.empty::<u32>(if shape.saturation.is_some() { maps } else { 1 })?,
        })
    }
}

/// Spatial contrast of a stream of integer frames (`first`, then `rest`) on a GPU.
/// Frames must all be `T` pixels of `first`'s size. Returns the number of frames the sink
/// saw; an error from the source, a frame, the device or the sink ends the stream after
/// the frames before it were delivered.
pub(crate) fn stream_spatial<T: StreamPixel>(
    first: Frame,
    rest: &Receiver<Result<Frame>>,
    stream: &StreamParams,
    device: &Device,
    sink: &mut dyn FnMut(FrameMaps<'_>) -> Result<()>,
) -> Result<usize> {
    let (params, batch) = (&stream.contrast, stream.batch);
    let (h, w) = T::pixels(&first)
        .ok_or_else(|| Error::PixelTypeMismatch {
            what: "stream".into(),
            expected: T::NAME,
            got: first.dtype(),
        })?
        .dim();
    let shape = Shape {
        w,
        h,
        out: contrast_shape(h, w, params.window, params.border)?,
        batch,
        frame_bytes: h * w * std::mem::size_of::<T>(),
        saturation: params
            .saturation
            .map(|s| s.ceil().clamp(1.0, f64::from(u32::MAX)) as u32),
        with_sfi: params.exposure_s.is_some(),
    };
    let mut frames = Gather::<T> {
        pending: Some(first),
        rest,
        shape,
        next_index: 0,
        error: None,
        pixel: std::marker::PhantomData,
    };
    let workers = stream.tuning.stream_workers.max(1);
    with_gpu!(device, |gpu| Ok(run(
        gpu,
        &shape,
        params,
        workers,
        &mut frames,
        sink
    )))?
}

/// Frames from the source, checked, in batches.
struct Gather<'a, T> {
    pending: Option<Frame>,
    rest: &'a Receiver<Result<Frame>>,
    shape: Shape,
    /// Stream index of the next frame.
    next_index: usize,
    /// The error that ended the stream, reported after the frames before it.
    error: Option<Error>,
    pixel: std::marker::PhantomData<T>,
}

impl<T: StreamPixel> Gather<'_, T> {
    /// Up to `batch` frames, and whether more may follow. Fewer at the end of the stream
    /// or at the first bad frame, and fewer when the source has no frame ready once the
    /// batches in flight are collected: a camera slower than the GPU gets each map as soon
    /// as it is computed instead of waiting for a full batch and for `stream_workers`
    /// batches in flight. While no frame is ready, `idle` collects the oldest batch in
    /// flight: `Some(false)` when there is none, `None` once the stream has failed.
    fn next_batch(&mut self, idle: &mut dyn FnMut() -> Option<bool>) -> (Vec<Frame>, bool) {
        let mut frames = Vec::with_capacity(self.shape.batch);
        while frames.len() < self.shape.batch && self.error.is_none() {
            let received = match self.pending.take() {
                Some(f) => Ok(f),
                None => match self.rest.try_recv() {
                    Ok(r) => r,
                    Err(TryRecvError::Disconnected) => return (frames, false),
                    Err(TryRecvError::Empty) => {
                        match idle() {
                            None => return (frames, false),
                            Some(true) => continue,
                            Some(false) => {}
                        }
                        if !frames.is_empty() {
                            break;
                        }
                        match self.rest.recv() {
                            Ok(r) => r,
                            Err(_) => return (frames, false),
                        }
                    }
                },
            };
            let frame = match received {
                Ok(f) => f,
                Err(e) => {
                    self.error = Some(e);
                    break;
                }
            };
            if T::pixels(&frame).is_none_or(|a| a.dim() != (self.shape.h, self.shape.w)) {
                let (got_h, got_w) = frame.dim();
                self.error = Some(Error::FrameSizeMismatch {
                    what: format!("stream frame {} ({})", self.next_index, frame.dtype()),
                    expected_w: self.shape.w,
                    expected_h: self.shape.h,
                    got_w,
                    got_h,
                });
                break;
            }
            frames.push(frame);
            self.next_index += 1;
        }
        let more = self.error.is_none();
        (frames, more)
    }
}

/// The caller's side: batches out to the workers in turn, results back in order.
fn run<R: KnownRuntime, T: StreamPixel>(
    gpu: &Gpu<R>,
    shape: &Shape,
    params: &ContrastParams,
    n_workers: usize,
    frames: &mut Gather<'_, T>,
    sink: &mut dyn FnMut(FrameMaps<'_>) -> Result<()>,
) -> Result<usize> {
    let in_place = gpu.can_write_in_place();
    std::thread::scope(|scope| {
        let mut workers: Vec<(SyncSender<Job>, Receiver<Result<Slot>>)> =
            Vec::with_capacity(n_workers);
        for _ in 0..n_workers {
            let (job_tx, job_rx) = sync_channel::<Job>(1);
            let (done_tx, done_rx) = sync_channel::<Result<Slot>>(1);
            let shape = *shape;
            scope.spawn(move || worker::<R, T>(gpu, &shape, params, in_place, &job_rx, &done_tx));
            workers.push((job_tx, done_rx));
        }
        let mut free = Slot::take_all(gpu, shape, in_place, n_workers);
        let mut in_flight: VecDeque<usize> = VecDeque::with_capacity(n_workers);
        let mut delivered = 0usize;
        let mut failure: Option<Error> = None;
        // Collect the oldest batch in flight and hand its frames to the sink.
        let mut collect =
            |in_flight: &mut VecDeque<usize>, free: &mut Vec<Slot>, failure: &mut Option<Error>| {
                let Some(worker) = in_flight.pop_front() else {
                    return;
                };
                match workers[worker].1.recv() {
                    Ok(Ok(slot)) => {
                        if failure.is_none() {
                            match slot.emit(shape, delivered, sink) {
                                Ok(()) => delivered += slot.frames,
                                Err(e) => *failure = Some(e),
                            }
                        }
                        free.push(slot);
                    }
                    Ok(Err(e)) => {
                        failure.get_or_insert(e);
                    }
                    Err(_) => {
                        failure.get_or_insert(Error::StreamWorkerStopped);
                    }
                }
            };
        let mut next = 0usize;
        while failure.is_none() {
            let (batch, more) = frames.next_batch(&mut || {
                let busy = !in_flight.is_empty();
                collect(&mut in_flight, &mut free, &mut failure);
                failure.is_none().then_some(busy)
            });
            if !batch.is_empty() {
                while free.is_empty() || in_flight.len() == n_workers {
                    collect(&mut in_flight, &mut free, &mut failure);
                }
                let mut slot = free.pop().expect("a slot was freed above");
                slot.frames = batch.len();
                if workers[next].0.send((batch, slot)).is_err() {
                    failure = Some(Error::StreamWorkerStopped);
                    break;
                }
                in_flight.push_back(next);
                next = (next + 1) % n_workers;
            }
            if !more {
                break;
            }
        }
        while !in_flight.is_empty() {
            collect(&mut in_flight, &mut free, &mut failure);
        }
        // Dropping the job senders ends the workers.
        drop(workers);
        Slot::put_back(free);
        match failure.or(frames.error.take()) {
            Some(e) => Err(e),
            None => Ok(delivered),
        }
    })
}

/// A worker: for each batch, frames into pinned memory, upload, kernel, download.
fn worker<R: KnownRuntime, T: StreamPixel>(
    gpu: &Gpu<R>,
    shape: &Shape,
    params: &ContrastParams,
    in_place: bool,
    jobs: &Receiver<Job>,
    done: &SyncSender<Result<Slot>>,
) {
    let mut buffers = None;
    for (frames, mut slot) in jobs {
        let result = (|| -> gpu_runtime::Result<()> {
            let dev = match &buffers {
                Some(b) => b,
                None => buffers.insert(DeviceBuffers::new(gpu, shape)?),
            };
            process_batch::<R, T>(gpu, shape, params, in_place, dev, &frames, &mut slot)
        })();
        drop(frames);
        let reply = result.map(|()| slot).map_err(Error::from);
        if done.send(reply).is_err() {
            break;
        }
    }
}

fn process_batch<R: KnownRuntime, T: StreamPixel>(
    gpu: &Gpu<R>,
    shape: &Shape,
    params: &ContrastParams,
    in_place: bool,
    dev: &DeviceBuffers,
    frames: &[Frame],
    slot: &mut Slot,
) -> gpu_runtime::Result<()> {
    let n = frames.len();
    let bytes = n * shape.frame_bytes;
    slot.input.as_bytes_mut()[..bytes]
        .par_chunks_mut(shape.frame_bytes)
        .zip(frames.par_iter())
        .for_each(|(dst, f)| {
            let px = T::pixels(f)
                .expect("checked by Gather")
                .as_standard_layout();
            dst.copy_from_slice(bytemuck::cast_slice(
                px.as_slice().expect("standard layout"),
            ));
        });
    let used_words = bytes.div_ceil(4);
    slot.input.as_bytes_mut()[bytes..used_words * 4].fill(0);
    let input = if in_place {
        gpu.upload_staged_into(&slot.input, &dev.input)?;
        dev.input.clone()
    } else {
        gpu.upload_staged::<u32>(&slot.input, used_words)?
    };
    let p = spatial_params::<T>(params, shape.w, shape.h, n as u32, shape.saturation);
    kernels::spatial_contrast(gpu, &input, &p, &dev.k, &dev.sfi, &dev.flags)?;
    gpu.download_staged(&dev.k, &mut slot.k)?;
    if let Some(sfi) = slot.sfi.as_mut() {
        gpu.download_staged(&dev.sfi, sfi)?;
    }
    if let Some(flags) = slot.flags.as_mut() {
        gpu.download_staged(&dev.flags, flags)?;
        let m = n * shape.plane();
        let words: &[u32] = bytemuck::cast_slice(&flags.as_bytes()[..m * 4]);
        slot.flags_u8[..m]
            .par_iter_mut()
            .zip(words.par_iter())
            .for_each(|(d, &f)| *d = f as u8);
    }
    Ok(())
}

/// Frame `i` of a batch of `dims`-shaped maps stored back to back.
fn plane_view<T>(all: &[T], i: usize, dims: (usize, usize)) -> ArrayView2<'_, T> {
    let plane = dims.0 * dims.1;
    ArrayView2::from_shape(dims, &all[i * plane..(i + 1) * plane])
        .expect("batch planes are contiguous")
}

/// Integer pixels that stream: packed for the kernels, found in a [`Frame`].
pub(crate) trait StreamPixel: PackedPixel {
    /// The frame's pixels when they are of type `Self`.
    fn pixels(frame: &Frame) -> Option<&Array2<Self>>;
}

impl StreamPixel for u16 {
    fn pixels(frame: &Frame) -> Option<&Array2<u16>> {
        if let Frame::U16(a) = frame {
            Some(a)
        } else {
            None
        }
    }
}

impl StreamPixel for u8 {
    fn pixels(frame: &Frame) -> Option<&Array2<u8>> {
        if let Frame::U8(a) = frame {
            Some(a)
        } else {
            None
        }
    }
}
