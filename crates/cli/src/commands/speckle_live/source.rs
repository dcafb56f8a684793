//! Where `speckle live` gets its frames: the simulated flow phantom at a frame rate, a raw
//! header-less stream (stdin, a named pipe, a file that may still be growing) or a folder
//! that receives one image file per frame. Every source is an iterator of frames that ends
//! at the end of the stream or when `stop` is set (Ctrl-C), and stops at its first error,
//! which names the source and the frame.

use anyhow::Context;
use ndarray::{Array3, Axis};
use speckle_core::io::{
    Frame, FrameSource, LoadOptions, RawDtype, RawSpec, RawStreamReader, load_stack,
};
use speckle_core::sim::{Camera, FlowPhantom};
use speckle_core::{CameraInfo, RawStack};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often a followed file or a watched folder is looked at again when nothing is new.
const POLL: Duration = Duration::from_millis(10);

/// A frame source that the pipeline can own and move to its reader thread.
pub type Source = Box<dyn FrameSource + Send>;

/// The simulated camera: exposure (s) of the phantom, its tau_c on the channel axis (s),
/// mean signal (counts) and bit depth. The exposure is what `--exposure` defaults to.
pub const SIM_EXPOSURE_S: f64 = 5e-3;
const SIM_TAU_C_S: f64 = 2e-4;
const SIM_BITS: u32 = 12;

/// What `--simulate` needs.
#[derive(Debug, Clone, Copy)]
pub struct SimSpec {
    pub width: usize,
    pub height: usize,
    /// Frames per second; 0: as fast as the pipeline takes them.
    pub fps: f64,
    pub seed: u64,
    /// Distinct frames simulated once and then repeated (the phantom's field simulation is
    /// far slower than a camera; a loop of them exercises the pipeline the same way).
    pub loop_frames: usize,
}

/// Columns of the phantom simulated; wider frames repeat them side by side (the vessel is
/// horizontal, so it stays one vessel). The field simulation takes about 10 us per pixel
/// and frame: a whole 1392x1040 loop would take minutes, a strip a second.
const SIM_STRIP: usize = 96;
/// Time steps per tau_c within an exposure: fewer than the library's 20 (K within a few
/// per cent of the model, plenty for a live demo) for a four times quicker start.
const SIM_SUBSTEPS: u32 = 5;

/// The flow phantom (a horizontal vessel in static tissue) seen by a 12-bit camera,
/// `loop_frames` frames simulated once from `seed` and then replayed at `fps`.
pub fn simulate(spec: SimSpec, stop: Arc<AtomicBool>) -> anyhow::Result<(Source, CameraInfo)> {
    let strip = spec.width.min(SIM_STRIP);
    let mut model = FlowPhantom::new(
        strip,
        spec.height,
        spec.loop_frames.max(1),
        SIM_EXPOSURE_S,
        SIM_TAU_C_S,
    )
    .with_seed(spec.seed)
    .with_speckle_size(2.0);
    model.substeps = SIM_SUBSTEPS;
    let phantom = model.simulate().context("simulating the flow phantom")?;
    let camera = Camera::new(1500.0, SIM_BITS);
    let RawStack::U16(frames) = camera.expose(phantom.intensity.view(), spec.seed ^ 0x5eed)? else {
        anyhow::bail!("the simulated {SIM_BITS}-bit camera did not give 16-bit frames");
    };
    let info = camera.info();
    let (n, h, _) = frames.dim();
    let frames = Array3::from_shape_fn((n, h, spec.width), |(t, y, x)| frames[[t, y, x % strip]]);
    Ok((Box::new(Paced::new(frames, spec.fps, stop)), info))
}

/// Replays a stack forever at a fixed rate: frame i is due at start + i / fps (a late
/// frame is sent at once, and the schedule does not try to catch up with a burst).
struct Paced {
    frames: Array3<u16>,
    interval: Option<Duration>,
    next_due: Option<Instant>,
    index: usize,
    stop: Arc<AtomicBool>,
}

impl Paced {
    fn new(frames: Array3<u16>, fps: f64, stop: Arc<AtomicBool>) -> Self {
        let interval = (fps > 0.0 && fps.is_finite()).then(|| Duration::from_secs_f64(1.0 / fps));
        Self {
            frames,
            interval,
            next_due: None,
            index: 0,
            stop,
        }
    }
}

impl Iterator for Paced {
    type Item = speckle_core::Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(interval) = self.interval {
            let now = Instant::now();
            let due = *self.next_due.get_or_insert(now);
            if due > now {
                std::thread::sleep(due - now);
            }
            // A late frame moves the schedule: the camera does not send a burst after a stall.
            self.next_due = Some(due.max(now) + interval);
        }
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let n = self.frames.dim().0;
        let frame = self.frames.index_axis(Axis(0), self.index % n).to_owned();
        self.index += 1;
        Some(Ok(Frame::U16(frame)))
    }
}

/// The layout of raw frames given on the command line.
#[derive(Debug, Clone, Copy)]
pub struct RawLayout {
    pub width: usize,
    pub height: usize,
    pub dtype: RawDtype,
    /// Follow a regular file as it grows (`tail -f`) instead of stopping at its end.
    pub follow: bool,
}

impl RawLayout {
    fn spec(self) -> RawSpec {
        RawSpec::new(self.width, self.height, self.dtype)
    }

    /// 8 or 16 bits for integer frames (unless `--bit-depth` says fewer), none for floats.
    fn camera(self, bit_depth: Option<u32>) -> CameraInfo {
        CameraInfo {
            bit_depth: match self.dtype {
                RawDtype::U8 => Some(bit_depth.unwrap_or(8)),
                RawDtype::U16 => Some(bit_depth.unwrap_or(16)),
                RawDtype::F32 => None,
            },
        }
    }
}

/// Raw frames from stdin (`-`), a named pipe or a file (followed while it grows unless
/// `layout.follow` is off).
pub fn raw(
    path: &Path,
    layout: RawLayout,
    bit_depth: Option<u32>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(Source, CameraInfo)> {
    let camera = layout.camera(bit_depth);
    let spec = layout.spec();
    if path == Path::new("-") {
        let reader = RawStreamReader::new(std::io::stdin(), &spec, "stdin")?;
        return Ok((Box::new(reader), camera));
    }
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let regular = file.metadata().is_ok_and(|m| m.is_file());
    let reader: Box<dyn Read + Send> = if regular && layout.follow {
        Box::new(Follow { file, stop })
    } else {
        Box::new(file)
    };
    let reader = RawStreamReader::new(reader, &spec, path)?;
    Ok((Box::new(reader), camera))
}

/// A file read like `tail -f`: at its end, wait for more until `stop` is set.
struct Follow {
    file: std::fs::File,
    stop: Arc<AtomicBool>,
}

impl Read for Follow {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.file.read(buf)?;
            if n > 0 || buf.is_empty() || self.stop.load(Ordering::Relaxed) {
                return Ok(n);
            }
            std::thread::sleep(POLL);
        }
    }
}

/// Image files a watched folder takes as frames.
const FRAME_EXTENSIONS: &[&str] = &["tif", "tiff", "png"];

/// A folder that receives one TIFF or PNG per frame: new files are taken in name order,
/// each once its size has stayed the same for one poll (a writer may still be writing it).
/// Files already there when watching starts are frames too. Ends only when `stop` is set.
pub fn folder(
    dir: &Path,
    bit_depth: Option<u32>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(Source, CameraInfo)> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not a folder", dir.display());
    }
    let camera = CameraInfo { bit_depth };
    let watch = Watch {
        dir: dir.to_path_buf(),
        opts: LoadOptions {
            bit_depth,
            ..LoadOptions::default()
        },
        seen: HashMap::new(),
        pending: std::collections::VecDeque::new(),
        index: 0,
        stop,
        failed: false,
    };
    Ok((Box::new(watch), camera))
}

struct Watch {
    dir: PathBuf,
    opts: LoadOptions,
    /// Every file looked at: its size at the last poll, and whether it was read.
    seen: HashMap<PathBuf, (u64, bool)>,
    /// Frames of the last file read, still to deliver.
    pending: std::collections::VecDeque<Frame>,
    index: usize,
    stop: Arc<AtomicBool>,
    failed: bool,
}

impl Watch {
    /// The first file (by name) that is complete and not read yet.
    fn next_file(&mut self) -> std::io::Result<Option<PathBuf>> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| FRAME_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
            })
            .collect();
        names.sort();
        for path in names {
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            let entry = self.seen.entry(path.clone()).or_insert((u64::MAX, false));
            if entry.1 {
                continue;
            }
            let stable = size > 0 && entry.0 == size;
            entry.0 = size;
            // Frames must come in name order: wait for this one rather than skip ahead.
            return Ok(stable.then_some(path));
        }
        Ok(None)
    }

    fn read(&mut self, path: &Path) -> anyhow::Result<()> {
        let (stack, _) = load_stack(path, &self.opts).with_context(|| {
            format!(
                "frame {} of folder {}: cannot read {}",
                self.index,
                self.dir.display(),
                path.display()
            )
        })?;
        let n = stack.dim().0;
        for i in 0..n {
            self.pending.push_back(match &stack {
                RawStack::U8(a) => Frame::U8(a.index_axis(Axis(0), i).to_owned()),
                RawStack::U16(a) => Frame::U16(a.index_axis(Axis(0), i).to_owned()),
                RawStack::F32(a) => Frame::F32(a.index_axis(Axis(0), i).to_owned()),
            });
        }
        if let Some(e) = self.seen.get_mut(path) {
            e.1 = true;
        }
        Ok(())
    }
}

impl Iterator for Watch {
    type Item = speckle_core::Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(frame) = self.pending.pop_front() {
                self.index += 1;
                return Some(Ok(frame));
            }
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            let found = self.next_file().map_err(|e| speckle_core::Error::Io {
                path: self.dir.clone(),
                source: e,
            });
            match found {
                Ok(Some(path)) => {
                    if let Err(e) = self.read(&path) {
                        self.failed = true;
                        return Some(Err(speckle_core::Error::Format {
                            path,
                            why: format!("{e:#}"),
                        }));
                    }
                }
                Ok(None) => std::thread::sleep(POLL),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}
