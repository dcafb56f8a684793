//! `biogpu speckle contrast` as a pipeline: a reader thread decodes frames, the calling
//! thread computes each frame's maps, and a writer thread encodes the TIFF pages, the PNG
//! figures and the GIF preview, with bounded channels between them (back-pressure), so
//! memory stays bounded whatever the stack length and writing overlaps computing.
//!
//! Only the requested maps are computed: K and the flags always (the summary counts them),
//! SFI only with an exposure, never the window mean. The values are those of the library's
//! whole-stack [`contrast`] (tested in `streamed_maps_equal_the_whole_stack_maps`):
//!
//! - CPU, spatial: [`spatial_contrast_into`] per frame (bands in parallel), SFI as the
//!   library computes it from K;
//! - CPU, temporal, integer pixels: [`TemporalStream`] (running exact integer sums over the
//!   last `--frames` frames, which it keeps);
//! - otherwise (a GPU, float frames in temporal mode, spatio-temporal mode): [`contrast`] on
//!   chunks of frames that overlap by `frames - 1`.

use super::{K, OutputOpts, Quantity, SFI, figure};
use crate::commands::output::OutDir;
use anyhow::Context;
use gpu_runtime::Device;
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{Array2, Array3, ArrayView2, Axis, Zip};
use speckle_core::cpu::correct::subtract_dark;
use speckle_core::cpu::{ContrastOut, TemporalStream, spatial_contrast_into};
use speckle_core::io::output::{GifLimits, ImageJMeta, ImageJTiffWriter, render_figure};
use speckle_core::io::{Frame, FrameSource};
use speckle_core::model::flow;
use speckle_core::{ContrastParams, Mode, Pixel, contrast};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Frames decoded ahead of the computation, and maps waiting to be written.
const DEPTH: usize = 2;
/// Frames per chunk on the chunked path (plus the temporal overlap).
const CHUNK: usize = 16;

/// One output frame's maps, in frame order.
#[derive(Debug)]
pub(super) struct Maps {
    pub k: Array2<f32>,
    pub sfi: Option<Array2<f32>>,
    pub flags: Array2<u8>,
    /// Filled in by [`compute`] before the maps go to the sink.
    pub stats: Stats,
}

/// What the summary needs from the whole run, gathered frame by frame.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Totals {
    pub output_frames: usize,
    /// Sum and count of the finite K.
    pub k_sum: f64,
    pub k_finite: usize,
    pub undefined: usize,
    pub saturated: usize,
}

impl Totals {
    pub fn k_mean(&self) -> f64 {
        if self.k_finite == 0 {
            f64::NAN
        } else {
            self.k_sum / self.k_finite as f64
        }
    }

    fn add(&mut self, m: &Maps) {
        self.output_frames += 1;
        self.k_sum += m.stats.k_sum;
        self.k_finite += m.stats.k_finite;
        self.undefined += m.stats.undefined;
        self.saturated += m.stats.saturated;
    }
}

/// One frame's share of the [`Totals`].
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Stats {
    k_sum: f64,
    k_finite: usize,
    undefined: usize,
    saturated: usize,
}

impl Stats {
    /// Of one frame's maps, row by row in parallel while they are hot in the cache; the rows
    /// are then added in order, so the result does not depend on the threads.
    fn of(k: &Array2<f32>, flags: &Array2<u8>) -> Stats {
        let rows = Zip::from(k.rows())
            .and(flags.rows())
            .par_map_collect(|k, f| {
                let (k_sum, k_finite) = finite_sum(k.as_slice().expect("standard layout"));
                let (undefined, saturated) = flag_counts(f.as_slice().expect("standard layout"));
                Stats {
                    k_sum,
                    k_finite,
                    undefined,
                    saturated,
                }
            });
        rows.iter().fold(Stats::default(), |a, r| Stats {
            k_sum: a.k_sum + r.k_sum,
            k_finite: a.k_finite + r.k_finite,
            undefined: a.undefined + r.undefined,
            saturated: a.saturated + r.saturated,
        })
    }
}

/// How many flag bytes have the UNDEFINED and the SATURATED bit: eight bytes at a time, each
/// bit counted by a population count of its lane mask.
fn flag_counts(f: &[u8]) -> (usize, usize) {
    let lanes = |bit: u8| u64::from_le_bytes([bit; 8]);
    let (undefined, saturated) = (
        lanes(speckle_core::flags::UNDEFINED),
        lanes(speckle_core::flags::SATURATED),
    );
    let words = f.chunks_exact(8);
    let tail = words.remainder();
    let (mut u, mut s) = (0usize, 0usize);
    for w in words {
        let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        u += (w & undefined).count_ones() as usize;
        s += (w & saturated).count_ones() as usize;
    }
    for &b in tail {
        u += usize::from(b & speckle_core::flags::UNDEFINED != 0);
        s += usize::from(b & speckle_core::flags::SATURATED != 0);
    }
    (u, s)
}

/// Sum (in f64) and count of the finite values, in eight interleaved lanes (a sequential sum
/// is bound by the latency of one addition per value; the lanes vectorise).
fn finite_sum(v: &[f32]) -> (f64, usize) {
    const L: usize = 8;
    let (mut s, mut n) = ([0f64; L], [0usize; L]);
    let chunks = v.chunks_exact(L);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..L {
            let ok = c[i].is_finite();
            s[i] += if ok { f64::from(c[i]) } else { 0.0 };
            n[i] += usize::from(ok);
        }
    }
    let (mut sum, mut count) = (s.iter().sum::<f64>(), n.iter().sum::<usize>());
    for &x in tail.iter().filter(|x| x.is_finite()) {
        sum += f64::from(x);
        count += 1;
    }
    (sum, count)
}

/// Frame-sized buffers come and go once per frame (the reader's frames). glibc maps and
/// unmaps each block of this size by default, and the page faults and TLB shootdowns cost
/// more system time than the contrast itself; keep such blocks in the heap instead.
pub(super) fn keep_frame_buffers_in_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets two allocator parameters; glibc serialises it with
    // allocations in other threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// Frames in (the first one already read, to check it), maps out to `sink` in order.
/// `dark` is subtracted from every frame. Returns the number of input frames.
pub(super) fn compute<S: FnMut(Maps) -> anyhow::Result<()>>(
    first: Frame,
    rest: Box<dyn FrameSource + Send>,
    dark: Option<&Array2<f32>>,
    p: &ContrastParams,
    device: &Device,
    recycle: &Receiver<Maps>,
    mut sink: S,
) -> anyhow::Result<usize> {
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<speckle_core::Result<Frame>>(DEPTH);
        scope.spawn(move || {
            for item in rest {
                let stop = item.is_err();
                if tx.send(item).is_err() || stop {
                    break;
                }
            }
        });
        let undark = |f: Frame| -> anyhow::Result<Frame> {
            let Some(d) = dark else { return Ok(f) };
            Ok(Frame::F32(match &f {
                Frame::U8(a) => subtract_dark(a.view(), d.view())?,
                Frame::U16(a) => subtract_dark(a.view(), d.view())?,
                Frame::F32(a) => subtract_dark(a.view(), d.view())?,
            }))
        };
        let first = undark(first)?;
        let frames = std::iter::once(Ok(first)).chain(rx.into_iter().map(|r| {
            r.map_err(anyhow::Error::from)
                .and_then(|f| undark(f).context("dark frame"))
        }));
        let mut engine = Engine::new(p, device);
        let mut sink = |mut m: Maps| {
            m.stats = Stats::of(&m.k, &m.flags);
            sink(m)
        };
        let mut n = 0usize;
        let mut first_kind: Option<((usize, usize), &'static str)> = None;
        for (i, frame) in frames.enumerate() {
            let frame = frame?;
            let kind = (frame.dim(), frame.dtype());
            let (dim, dtype) = *first_kind.get_or_insert(kind);
            if kind != (dim, dtype) {
                anyhow::bail!(
                    "frame {i} is {}x{} {}, but frame 0 is {}x{} {}: every frame must have the \
                     size and pixel type of the first",
                    kind.0.1,
                    kind.0.0,
                    kind.1,
                    dim.1,
                    dim.0,
                    dtype
                );
            }
            engine.push(frame, i, recycle, &mut sink)?;
            n += 1;
        }
        engine.finish(&mut sink)?;
        Ok(n)
    })
}

/// How the maps of each frame are computed.
enum Engine<'a> {
    Spatial(&'a ContrastParams),
    /// Temporal on the CPU until frame 0 says which pixel type.
    Temporal(&'a ContrastParams, &'a Device),
    TemporalU8(TemporalStream<u8>, &'a ContrastParams, Option<Maps>),
    TemporalU16(TemporalStream<u16>, &'a ContrastParams, Option<Maps>),
    Chunked {
        p: &'a ContrastParams,
        device: &'a Device,
        frames: Vec<Frame>,
    },
}

impl<'a> Engine<'a> {
    fn new(p: &'a ContrastParams, device: &'a Device) -> Self {
        match p.mode {
            Mode::Spatial if !device.is_gpu() => Engine::Spatial(p),
            Mode::Temporal if !device.is_gpu() => Engine::Temporal(p, device),
            _ => Engine::Chunked {
                p,
                device,
                frames: Vec::new(),
            },
        }
    }

    fn push(
        &mut self,
        frame: Frame,
        index: usize,
        recycle: &Receiver<Maps>,
        sink: &mut dyn FnMut(Maps) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let (h, w) = frame.dim();
        // The first temporal frame picks the integer stream, or the chunked path for floats.
        if let Engine::Temporal(p, device) = *self {
            *self = match &frame {
                Frame::U16(_) => {
                    Engine::TemporalU16(TemporalStream::new(h, w, p.frames, p.saturation)?, p, None)
                }
                Frame::U8(_) => {
                    Engine::TemporalU8(TemporalStream::new(h, w, p.frames, p.saturation)?, p, None)
                }
                Frame::F32(_) => Engine::Chunked {
                    p,
                    device,
                    frames: Vec::new(),
                },
            };
        }
        match self {
            Engine::Spatial(p) => {
                let shape = speckle_core::model::window::contrast_shape(h, w, p.window, p.border)?;
                let mut m = take(recycle, shape, p.exposure_s.is_some());
                let out = ContrastOut::new(m.k.view_mut()).flags(m.flags.view_mut());
                match &frame {
                    Frame::U8(a) => {
                        spatial_contrast_into(a.view(), p.window, p.border, p.saturation, out)
                    }
                    Frame::U16(a) => {
                        spatial_contrast_into(a.view(), p.window, p.border, p.saturation, out)
                    }
                    Frame::F32(a) => {
                        spatial_contrast_into(a.view(), p.window, p.border, p.saturation, out)
                    }
                }
                .with_context(|| format!("frame {index}"))?;
                fill_sfi(&mut m, p.exposure_s);
                sink(m)
            }
            Engine::TemporalU8(s, p, spare) => {
                temporal_push(s, spare, &frame, index, p, recycle, sink)
            }
            Engine::TemporalU16(s, p, spare) => {
                temporal_push(s, spare, &frame, index, p, recycle, sink)
            }
            Engine::Temporal(..) => unreachable!("set at frame 0"),
            Engine::Chunked { p, device, frames } => {
                frames.push(frame);
                let overlap = if p.mode == Mode::Spatial {
                    0
                } else {
                    p.frames - 1
                };
                if frames.len() == CHUNK + overlap {
                    chunk(frames, overlap, p, device, sink)?;
                }
                Ok(())
            }
        }
    }

    fn finish(&mut self, sink: &mut dyn FnMut(Maps) -> anyhow::Result<()>) -> anyhow::Result<()> {
        if let Engine::Chunked { p, device, frames } = self {
            let overlap = if p.mode == Mode::Spatial {
                0
            } else {
                p.frames - 1
            };
            if frames.len() > overlap {
                chunk(frames, overlap, p, device, sink)?;
            }
        }
        Ok(())
    }
}

/// A set of map buffers of `shape`: a recycled one from the writer, else a new one.
fn take(recycle: &Receiver<Maps>, shape: (usize, usize), sfi: bool) -> Maps {
    match recycle.try_recv() {
        Ok(mut m) if m.k.dim() == shape => {
            if sfi && m.sfi.is_none() {
                m.sfi = Some(Array2::zeros(shape));
            }
            m
        }
        _ => Maps {
            k: Array2::zeros(shape),
            sfi: sfi.then(|| Array2::zeros(shape)),
            flags: Array2::zeros(shape),
            stats: Stats::default(),
        },
    }
}

/// SFI from K exactly as the library's contrast does (`flow::sfi` in f64, then f32).
fn fill_sfi(m: &mut Maps, exposure: Option<f64>) {
    if let (Some(t), Some(sfi)) = (exposure, m.sfi.as_mut()) {
        Zip::from(sfi)
            .and(&m.k)
            .par_for_each(|s, &k| *s = flow::sfi(f64::from(k), t) as f32);
    }
}

fn temporal_push<T: Pixel>(
    s: &mut TemporalStream<T>,
    spare: &mut Option<Maps>,
    frame: &Frame,
    index: usize,
    p: &ContrastParams,
    recycle: &Receiver<Maps>,
    sink: &mut dyn FnMut(Maps) -> anyhow::Result<()>,
) -> anyhow::Result<()>
where
    Frame: AsPixels<T>,
{
    let (h, w) = frame.dim();
    let Some(view) = frame.pixels() else {
        anyhow::bail!(
            "frame {index} is {}, frame 0 was {}: every frame must have one pixel type",
            frame.dtype(),
            T::NAME
        );
    };
    let mut m = match spare.take() {
        Some(m) => m,
        None => take(recycle, (h, w), p.exposure_s.is_some()),
    };
    let ready = s
        .push(
            view,
            ContrastOut::new(m.k.view_mut()).flags(m.flags.view_mut()),
        )
        .with_context(|| format!("frame {index}"))?;
    if ready {
        fill_sfi(&mut m, p.exposure_s);
        sink(m)?;
    } else {
        // Not a map yet (the first frames fill the window): keep the buffers.
        *spare = Some(m);
    }
    Ok(())
}

/// The pixels of a frame as `T`, if it holds `T`.
trait AsPixels<T> {
    fn pixels(&self) -> Option<ArrayView2<'_, T>>;
}

impl AsPixels<u8> for Frame {
    fn pixels(&self) -> Option<ArrayView2<'_, u8>> {
        match self {
            Frame::U8(a) => Some(a.view()),
            _ => None,
        }
    }
}

impl AsPixels<u16> for Frame {
    fn pixels(&self) -> Option<ArrayView2<'_, u16>> {
        match self {
            Frame::U16(a) => Some(a.view()),
            _ => None,
        }
    }
}

/// The maps of the frames gathered so far, keeping the last `overlap` frames for the next
/// chunk (a temporal window spans chunks).
fn chunk(
    frames: &mut Vec<Frame>,
    overlap: usize,
    p: &ContrastParams,
    device: &Device,
    sink: &mut dyn FnMut(Maps) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let stack = speckle_core::io::collect_stack(frames.iter().cloned().map(Ok))?;
    let (r, _) = contrast(&stack, p, device)?;
    for i in 0..r.k.dim().0 {
        sink(Maps {
            k: r.k.index_axis(Axis(0), i).to_owned(),
            sfi: r.sfi.as_ref().map(|s| s.index_axis(Axis(0), i).to_owned()),
            flags: r.flags.index_axis(Axis(0), i).to_owned(),
            stats: Stats::default(),
        })?;
    }
    let keep = frames.len() - overlap;
    frames.drain(..keep);
    Ok(())
}

/// The files of one map, written as its frames arrive: the PNG figure of the first frame
/// (whose colour limits are the TIFF's display range), the ImageJ TIFF page by page, and a
/// copy of each frame averaged down to the GIF's size for the preview.
struct MapWriter {
    q: Quantity,
    frames: usize,
    tiff: Option<ImageJTiffWriter>,
    gif: Option<Vec<Array2<f32>>>,
    factor: usize,
    png: Option<std::thread::JoinHandle<speckle_core::Result<()>>>,
}

impl MapWriter {
    fn new(q: Quantity, frames: usize, gif: bool) -> Self {
        Self {
            q,
            frames,
            tiff: None,
            gif: (gif && frames > 1).then(Vec::new),
            factor: 1,
            png: None,
        }
    }

    fn page(
        &mut self,
        out: &OutDir,
        o: &OutputOpts,
        map: ArrayView2<'_, f32>,
    ) -> anyhow::Result<()> {
        if self.tiff.is_none() {
            let fig = figure(o, self.q)?;
            let (img, limits) = render_figure(map, o.cmap, o.range, &fig)?;
            if !o.no_png {
                // PNG compression is slow: on its own thread, joined in `finish`.
                let png = out.file(&format!("{}.png", self.q.stem))?;
                self.png = Some(std::thread::spawn(move || {
                    img.write_png(png).map_err(speckle_core::Error::from)
                }));
            }
            let meta = ImageJMeta {
                quantity: self.q.name.into(),
                unit: self.q.unit.into(),
                min: limits.0,
                max: limits.1,
                pixel_um: o.pixel_um,
            };
            let path = out.file(&format!("{}.tif", self.q.stem))?;
            self.tiff = Some(ImageJTiffWriter::create(
                path,
                self.frames,
                map.dim(),
                &meta,
            )?);
            let (h, w) = map.dim();
            self.factor = h.max(w).div_ceil(GifLimits::default().max_side).max(1);
        }
        self.tiff.as_mut().expect("created").write_page(map)?;
        if let Some(g) = &mut self.gif {
            // The preview's own block means: previewing these copies gives the same GIF.
            g.push(imaging_io::downscale(map, self.factor));
        }
        Ok(())
    }

    fn finish(mut self, out: &OutDir, o: &OutputOpts) -> anyhow::Result<()> {
        let Some(tiff) = self.tiff.take() else {
            anyhow::bail!("no {} map was computed", self.q.stem);
        };
        tiff.finish()?;
        if let Some(png) = self.png.take() {
            png.join()
                .map_err(|_| anyhow::anyhow!("the PNG writer panicked"))??;
        }
        let Some(small) = self.gif.take() else {
            return Ok(());
        };
        let views: Vec<_> = small.iter().map(|m| m.view()).collect();
        let stack: Array3<f32> = ndarray::stack(Axis(0), &views)?;
        drop(small);
        let fig = figure(o, self.q)?;
        super::gif_preview(
            out,
            &self.q,
            stack.view(),
            o,
            &fig,
            self.frames,
            self.factor,
        )?;
        Ok(())
    }
}

impl Drop for MapWriter {
    /// A run that fails before `finish` still waits for its PNG: the thread writes into the
    /// output's staging folder, which must not be removed (on the error) while it does.
    fn drop(&mut self) {
        if let Some(png) = self.png.take() {
            let _ = png.join();
        }
    }
}

/// The writer thread's side: K and (with an exposure) SFI files, and the totals.
pub(super) struct Writer<'a> {
    out: &'a OutDir,
    o: &'a OutputOpts,
    k: MapWriter,
    sfi: Option<MapWriter>,
    totals: Totals,
    bar: Option<ProgressBar>,
}

impl<'a> Writer<'a> {
    pub fn new(out: &'a OutDir, o: &'a OutputOpts, frames: usize, sfi: bool) -> Self {
        let bar = (frames > 64).then(|| {
            ProgressBar::new(frames as u64).with_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} frames {per_sec} eta {eta}")
                    .expect("template"),
            )
        });
        Self {
            out,
            o,
            k: MapWriter::new(K, frames, o.gif),
            sfi: sfi.then(|| MapWriter::new(SFI, frames, o.gif)),
            totals: Totals::default(),
            bar,
        }
    }

    pub fn write(&mut self, m: &Maps) -> anyhow::Result<()> {
        self.k.page(self.out, self.o, m.k.view())?;
        if let (Some(w), Some(s)) = (&mut self.sfi, &m.sfi) {
            w.page(self.out, self.o, s.view())?;
        }
        self.totals.add(m);
        if let Some(b) = &self.bar {
            b.inc(1);
        }
        Ok(())
    }

    pub fn finish(self) -> anyhow::Result<Totals> {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        self.k.finish(self.out, self.o)?;
        if let Some(s) = self.sfi {
            s.finish(self.out, self.o)?;
        }
        Ok(self.totals)
    }
}

/// Run `compute` with a writer thread: maps go to `writer` through a bounded channel and
/// their buffers come back for reuse. Returns the writer's totals.
pub(super) fn run_with_writer(
    writer: Writer<'_>,
    compute_all: impl FnOnce(
        &Receiver<Maps>,
        &mut dyn FnMut(Maps) -> anyhow::Result<()>,
    ) -> anyhow::Result<usize>,
) -> anyhow::Result<(usize, Totals)> {
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<Maps>(DEPTH);
        let (back_tx, back_rx) = sync_channel::<Maps>(DEPTH + 2);
        let handle = scope.spawn(move || -> anyhow::Result<Totals> {
            let mut writer = writer;
            for m in rx {
                writer.write(&m)?;
                let _ = back_tx.try_send(m);
            }
            writer.finish()
        });
        let sent = send_all(&tx, &back_rx, compute_all);
        drop(tx);
        let written = handle
            .join()
            .map_err(|_| anyhow::anyhow!("the writer thread panicked"))?;
        // A writer error explains a failed send; report it first.
        let totals = written?;
        Ok((sent?, totals))
    })
}

fn send_all(
    tx: &SyncSender<Maps>,
    back: &Receiver<Maps>,
    compute_all: impl FnOnce(
        &Receiver<Maps>,
        &mut dyn FnMut(Maps) -> anyhow::Result<()>,
    ) -> anyhow::Result<usize>,
) -> anyhow::Result<usize> {
    compute_all(back, &mut |m| {
        tx.send(m)
            .map_err(|_| anyhow::anyhow!("the output writer stopped"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array3;
    use speckle_core::RawStack;

    /// The population counts equal a byte-by-byte count, for every tail length.
    #[test]
    fn flag_counts_count_each_bit() {
        let flags: Vec<u8> = (0..203u32).map(|i| (i * 7 % 11) as u8 & 3).collect();
        for n in [0, 1, 7, 8, 9, 64, 203] {
            let f = &flags[..n];
            let want = (
                f.iter().filter(|&&b| b & 1 != 0).count(),
                f.iter().filter(|&&b| b & 2 != 0).count(),
            );
            assert_eq!(flag_counts(f), want, "{n} bytes");
        }
    }

    fn stack(n: usize, h: usize, w: usize) -> Array3<u16> {
        Array3::from_shape_fn((n, h, w), |(t, y, x)| {
            let v = (t * 7919 + y * 104_729 + x * 1_299_709) % 1000;
            (v as u16) * 3 + 20 + if (x + y) % 11 == 0 { 4000 } else { 0 }
        })
    }

    fn streamed(frames: &Array3<u16>, p: &ContrastParams, device: &Device) -> (Vec<Maps>, usize) {
        let mut all: Vec<Frame> = frames
            .outer_iter()
            .map(|f| Frame::U16(f.to_owned()))
            .collect();
        let first = all.remove(0);
        let rest: Box<dyn FrameSource + Send> = Box::new(all.into_iter().map(Ok));
        let (_keep, recycle) = sync_channel(1);
        let mut got = Vec::new();
        let n = compute(first, rest, None, p, device, &recycle, |m| {
            got.push(m);
            Ok(())
        })
        .unwrap();
        (got, n)
    }

    #[test]
    fn streamed_maps_equal_the_whole_stack_maps() {
        let frames = stack(30, 23, 31);
        let w = speckle_core::Window::new(5).unwrap();
        let cases = [
            ContrastParams::spatial(w),
            ContrastParams::spatial(w).with_border(speckle_core::Border::Valid),
            ContrastParams::temporal(25),
            ContrastParams::temporal(4),
            ContrastParams::spatiotemporal(speckle_core::Window::new(3).unwrap(), 5),
        ];
        for p in cases {
            let p = p.with_saturation(Some(4095.0)).with_exposure(5e-3).unwrap();
            let (want, _) = contrast(&RawStack::U16(frames.clone()), &p, &Device::cpu()).unwrap();
            let (got, n) = streamed(&frames, &p, &Device::cpu());
            assert_eq!(n, 30);
            assert_eq!(got.len(), want.k.dim().0, "{p:?}");
            for (i, m) in got.iter().enumerate() {
                let bits = |a: ArrayView2<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(m.k.view()),
                    bits(want.k.index_axis(Axis(0), i)),
                    "K {i} {p:?}"
                );
                let ws = want.sfi.as_ref().unwrap().index_axis(Axis(0), i);
                assert_eq!(
                    bits(m.sfi.as_ref().unwrap().view()),
                    bits(ws),
                    "SFI {i} {p:?}"
                );
                assert_eq!(
                    m.flags,
                    want.flags.index_axis(Axis(0), i),
                    "flags {i} {p:?}"
                );
            }
        }
    }

    #[test]
    fn a_long_stack_streams_with_few_buffers_alive() {
        // 400 frames pass through; the sink sees each frame's maps and drops them at once,
        // so at no time are more than the pipeline's few buffers alive.
        let n = 400;
        let (h, w) = (16, 20);
        let p = ContrastParams::temporal(8);
        let source: Box<dyn FrameSource + Send> = Box::new((1..n).map(move |t| {
            Ok(Frame::U16(Array2::from_shape_fn((h, w), |(y, x)| {
                ((t * 31 + y * 7 + x * 3) % 97 + 5) as u16
            })))
        }));
        let first = Frame::U16(Array2::from_shape_fn((h, w), |(y, x)| {
            ((y * 7 + x * 3) % 97 + 5) as u16
        }));
        let (back_tx, back_rx) = sync_channel(DEPTH + 2);
        let mut allocated = std::collections::HashSet::new();
        let mut seen = 0usize;
        compute(first, source, None, &p, &Device::cpu(), &back_rx, |m| {
            allocated.insert(m.k.as_ptr() as usize);
            seen += 1;
            let _ = back_tx.try_send(m);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, n - 8 + 1);
        assert!(
            allocated.len() <= 2,
            "{} K buffers for {seen} frames",
            allocated.len()
        );
    }

    /// A fresh folder under the system temp dir, removed on drop.
    struct Tmp(std::path::PathBuf);
    impl Tmp {
        fn new(name: &str) -> Self {
            let d = std::env::temp_dir().join(format!("biogpu-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Tmp(d)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::super::Args,
    }

    fn cli(args: &[&str]) -> anyhow::Result<()> {
        use clap::Parser;
        let c = Cli::try_parse_from(std::iter::once("speckle").chain(args.iter().copied()))?;
        super::super::run(c.args, &Device::cpu())
    }

    /// The ImageJ TIFF the whole-stack writer makes of `maps` (display range from the
    /// first frame's figure, as the CLI's).
    fn whole_stack_tiff(maps: &Array3<f32>, q: Quantity, path: &std::path::Path) -> Vec<u8> {
        use speckle_core::io::output::{Colormap, Range, Scale, write_imagej_tiff};
        let scale = if q.log { Scale::Log } else { Scale::Linear };
        let fig = speckle_core::io::output::Figure::new(q.title, scale);
        let (_, lim) = render_figure(
            maps.index_axis(Axis(0), 0),
            Colormap::Viridis,
            Range::default(),
            &fig,
        )
        .unwrap();
        let meta = ImageJMeta {
            quantity: q.name.into(),
            unit: q.unit.into(),
            min: lim.0,
            max: lim.1,
            pixel_um: None,
        };
        write_imagej_tiff(path, maps.view(), &meta).unwrap();
        std::fs::read(path).unwrap()
    }

    #[test]
    fn the_cli_writes_the_library_whole_stack_maps() {
        let dir = Tmp::new("speckle-stream-cli");
        let frames = stack(30, 37, 45);
        let input = dir.0.join("in.tif");
        speckle_core::io::output::write_raw_stack_tiff(&input, &RawStack::U16(frames.clone()))
            .unwrap();
        let input_s = input.to_str().unwrap();
        for (mode, extra, p) in [
            (
                "spatial",
                vec!["--window", "5"],
                ContrastParams::spatial(speckle_core::Window::new(5).unwrap()),
            ),
            (
                "temporal",
                vec!["--frames", "25"],
                ContrastParams::temporal(25),
            ),
        ] {
            let out = dir.0.join(mode);
            let out_s = out.to_str().unwrap();
            let mut args = vec!["contrast", input_s, "--mode", mode, "--exposure", "0.005"];
            args.extend(extra);
            args.extend(["--out", out_s, "--gif"]);
            cli(&args).unwrap();
            let p = p
                .with_saturation(Some(65535.0))
                .with_exposure(0.005)
                .unwrap();
            let (want, _) = contrast(&RawStack::U16(frames.clone()), &p, &Device::cpu()).unwrap();
            let k_ref = whole_stack_tiff(&want.k, K, &dir.0.join("k_ref.tif"));
            assert!(
                std::fs::read(out.join("k.tif")).unwrap() == k_ref,
                "{mode}: k.tif differs"
            );
            let sfi_ref = whole_stack_tiff(want.sfi.as_ref().unwrap(), SFI, &dir.0.join("s.tif"));
            assert!(
                std::fs::read(out.join("sfi.tif")).unwrap() == sfi_ref,
                "{mode}: sfi.tif"
            );
            for f in ["k.png", "sfi.png", "k.gif", "sfi.gif", "summary.json"] {
                assert!(out.join(f).exists(), "{mode}: {f} missing");
            }
            let summary: serde_json::Value =
                serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
            assert_eq!(summary["output_frames"], want.k.dim().0);
            let finite: Vec<f64> = want
                .k
                .iter()
                .filter(|v| v.is_finite())
                .map(|&v| f64::from(v))
                .collect();
            let mean = finite.iter().sum::<f64>() / finite.len() as f64;
            assert!((summary["k_mean"].as_f64().unwrap() - mean).abs() <= 1e-12 * mean);
            let sat = want.flags.iter().filter(|&&f| f & 2 != 0).count();
            assert_eq!(summary["saturated_pixels"], sat);
        }
        // --no-png: no figure, the same TIFF.
        let out = dir.0.join("nopng");
        cli(&[
            "contrast",
            input_s,
            "--window",
            "5",
            "--no-png",
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap();
        assert!(!out.join("k.png").exists());
        let spatial = std::fs::read(dir.0.join("spatial").join("k.tif")).unwrap();
        assert!(std::fs::read(out.join("k.tif")).unwrap() == spatial);
    }

    #[test]
    fn a_truncated_stack_is_a_clear_error_and_leaves_no_file() {
        let dir = Tmp::new("speckle-stream-bad");
        let input = dir.0.join("cut.tif");
        speckle_core::io::output::write_raw_stack_tiff(&input, &RawStack::U16(stack(6, 20, 24)))
            .unwrap();
        let bytes = std::fs::read(&input).unwrap();
        std::fs::write(&input, &bytes[..bytes.len() * 2 / 3]).unwrap();
        let out = dir.0.join("out");
        let err = cli(&[
            "contrast",
            input.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("cut.tif") && msg.contains("page"), "{msg}");
        assert!(!out.join("k.tif").exists());
        let err = cli(&[
            "contrast",
            input.to_str().unwrap(),
            "--mode",
            "temporal",
            "--frames",
            "25",
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap_err();
        assert!(format!("{err:#}").contains("cut.tif"), "{err:#}");
    }

    #[test]
    fn a_bad_frame_mid_stream_is_named() {
        let (_t, recycle) = sync_channel(1);
        for p in [
            ContrastParams::temporal(3),
            ContrastParams::spatial(speckle_core::Window::new(3).unwrap()),
            ContrastParams::spatiotemporal(speckle_core::Window::new(3).unwrap(), 2),
        ] {
            let first = Frame::U16(Array2::from_elem((8, 8), 9));
            let rest: Box<dyn FrameSource + Send> = Box::new((1..6).map(|i| {
                Ok(Frame::U16(Array2::from_elem(
                    (8, if i == 5 { 9 } else { 8 }),
                    9,
                )))
            }));
            let err =
                compute(first, rest, None, &p, &Device::cpu(), &recycle, |_| Ok(())).unwrap_err();
            let msg = format!("{err:#}");
            assert!(msg.contains("frame 5"), "{msg}");
        }
    }
}
