//! `biogpu speckle`: laser speckle contrast, flow, MESI and ROI time courses.

use super::output::{OutDir, split_file};
use anyhow::{Context, bail};
use gpu_runtime::Device;
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{Array3, Axis, s};
use speckle_core::cpu::{
    calibrate_beta, correct, estimate_beta, rms_over_frames, stack_lag1_correlation,
};
use speckle_core::io::output::{
    Colormap, Figure, GifLimits, ImageJMeta, Range, Scale, render_figure, render_figure_png,
    write_gif_preview, write_imagej_tiff,
};
use speckle_core::io::{LoadOptions, RawSpec, StackPick, load_frame, load_stack};
use speckle_core::{
    BetaOrigin, BetaSource, Border, Calibration, CalibrationParams, CameraInfo, ContrastInfo,
    ContrastMaps, ContrastParams, FitStatus, FlowModel, FlowParams, MesiInput, MesiOptions, Mode,
    RawStack, Roi, RoiParams, Window, calibrate, contrast, flags, flow, mesi, roi,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[path = "speckle_stream.rs"]
mod stream;

#[path = "speckle_live/mod.rs"]
mod live;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Speckle contrast K (and SFI with --exposure) of a frame or stack.
    Contrast(ContrastArgs),
    /// Decorrelation time tau_c (and SFI, 1/K^2) from the full speckle model.
    Flow(FlowArgs),
    /// Multi-exposure speckle imaging: fit tau_c, dynamic fraction and noise per pixel.
    Mesi(MesiArgs),
    /// Mean K (or SFI) per region of interest per frame: CSV and a PNG plot.
    Roi(RoiArgs),
    /// Measure beta on a recording of a static target; writes a JSON file for `flow --calibration`.
    Calibrate(CalibrateArgs),
    /// Live view: K, SFI or 1/tau_c of frames as they arrive (camera pipe, growing file,
    /// folder, or --simulate), on a local web page; --bench measures frames/s and latency.
    Live(Box<live::LiveArgs>),
}

/// Input file and how to read it.
#[derive(Debug, Clone, clap::Args)]
struct Input {
    /// Raw frames: TIFF (8/16-bit, multi-page), PNG, or raw binary (with --raw).
    #[arg(value_name = "INPUT")]
    path: PathBuf,
    /// Raw binary layout, e.g. "width=1392,height=1040,dtype=u16,order=le,header=0".
    #[arg(long)]
    raw: Option<RawSpec>,
    /// Significant bits per pixel (e.g. 12 for a 12-bit camera); saturation is 2^bits - 1.
    #[arg(long)]
    bit_depth: Option<u32>,
    /// Split a vertically stacked PNG into frames of this many rows.
    #[arg(long)]
    frame_height: Option<usize>,
    /// TIFF hyperstacks (ImageJ, OME): the channel to read as frames, from 0.
    #[arg(long)]
    channel: Option<usize>,
    /// TIFF hyperstacks (ImageJ, OME): the slice (Z) to read as frames, from 0.
    #[arg(long)]
    slice: Option<usize>,
    /// Dark frame to subtract (file of the same size; averaged if it holds several frames).
    /// Dark-subtracted data are not integers, so they run on the CPU path.
    #[arg(long)]
    dark: Option<PathBuf>,
}

/// How to compute contrast.
#[derive(Debug, Clone, clap::Args)]
struct ContrastOpts {
    /// Spatial window side: odd, 3 to 31.
    #[arg(long, default_value_t = 7)]
    window: usize,
    /// spatial, temporal or spatiotemporal.
    #[arg(long, default_value = "spatial")]
    mode: Mode,
    /// Frames per temporal window (temporal and spatiotemporal modes).
    #[arg(long, default_value_t = 25)]
    frames: usize,
    /// Border rule: reflect, zero (as Yang et al. 2011) or valid.
    #[arg(long, default_value = "reflect")]
    border: Border,
    /// Exposure time in seconds (e.g. 0.005); enables SFI = 1/(2 T K^2).
    #[arg(long)]
    exposure: Option<f64>,
}

/// Where and how to write.
#[derive(Debug, Clone, clap::Args)]
struct OutputOpts {
    /// Output folder (created); existing files are never overwritten without --force.
    #[arg(long, default_value = "speckle-out")]
    out: PathBuf,
    /// Overwrite existing output files.
    #[arg(long)]
    force: bool,
    /// Colour map for PNGs: grey, viridis, inferno, turbo.
    #[arg(long, default_value = "viridis")]
    cmap: Colormap,
    /// PNG colour range: "lo,hi" fixed or "p1,p99" percentiles.
    #[arg(long, default_value = "p1,p99")]
    range: Range,
    /// Also write an animated GIF preview of stacks (at most 100 frames, maps averaged down
    /// to 512 pixels per side, a few MB; every n-th frame of longer stacks).
    #[arg(long)]
    gif: bool,
    /// Colour scale of the PNG/GIF figures: auto (log for tau_c, 1/tau_c, SFI and 1/K^2,
    /// linear for K and the rest), linear or log.
    #[arg(long, default_value = "auto")]
    scale: String,
    /// Pixel size in micrometres, written to the TIFFs for ImageJ/Fiji (unit=micron).
    #[arg(long)]
    pixel_um: Option<f64>,
    /// Write no PNG figures, only the TIFFs (which keep the display range the PNG would have
    /// had) and the summary; saves a quarter second of PNG compression per map.
    #[arg(long)]
    no_png: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct ContrastArgs {
    #[command(flatten)]
    input: Input,
    /// More inputs: several files (or a folder for INPUT) are computed in one run, each
    /// into a folder of its own inside --out named after it; a bad file is reported and
    /// skipped.
    #[arg(value_name = "MORE")]
    more: Vec<PathBuf>,
    #[command(flatten)]
    contrast: ContrastOpts,
    #[command(flatten)]
    output: OutputOpts,
}

#[derive(Debug, Clone, clap::Args)]
struct FlowArgs {
    #[command(flatten)]
    input: Input,
    /// More inputs: several files (or a folder for INPUT) are computed in one run, each
    /// into a folder of its own inside --out named after it; a bad file is reported and
    /// skipped.
    #[arg(value_name = "MORE")]
    more: Vec<PathBuf>,
    #[command(flatten)]
    contrast: ContrastOpts,
    #[command(flatten)]
    output: OutputOpts,
    /// lorentzian (unordered motion) or gaussian (ordered flow).
    #[arg(long, default_value = "lorentzian")]
    model: String,
    /// Coherence factor beta: a value (e.g. 0.45), or `estimate` to estimate it from this
    /// recording (an upper K^2 population, else the 99th percentile of K^2, with warnings).
    /// One beta source is required: --beta, --calibration, --static-frame or --static-region.
    #[arg(long)]
    beta: Option<String>,
    /// Beta calibration file written by `biogpu speckle calibrate` on a static target.
    #[arg(long, conflicts_with_all = ["beta", "static_frame", "static_region"])]
    calibration: Option<PathBuf>,
    /// Static-scatter calibration recording: beta = its mean K^2.
    #[arg(long, conflicts_with_all = ["beta", "static_region"])]
    static_frame: Option<PathBuf>,
    /// A static region of this recording ("x,y,w,h" or "circle:cx,cy,r"): beta = its mean K^2.
    #[arg(long, conflicts_with = "beta")]
    static_region: Option<Roi>,
    /// Keep +inf (K^2 >= beta) and 0 (K = 0) in the tau_c maps instead of NaN.
    #[arg(long)]
    keep_flagged: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct CalibrateArgs {
    #[command(flatten)]
    input: Input,
    /// More static recordings: several files (or a folder for INPUT) are calibrated in one
    /// run, each into NAME.json inside the --out folder; a bad file is reported and skipped.
    #[arg(value_name = "MORE")]
    more: Vec<PathBuf>,
    /// Spatial window side: odd, 3 to 31 (use the window of the flow maps).
    #[arg(long, default_value_t = 7)]
    window: usize,
    /// Border rule: reflect, zero or valid (as for the flow maps).
    #[arg(long, default_value = "reflect")]
    border: Border,
    /// Exposure of the static recording in seconds (recorded in the file).
    #[arg(long)]
    exposure: Option<f64>,
    /// Static pixels to average ("x,y,w,h" or "circle:cx,cy,r"); default the whole frame.
    #[arg(long)]
    roi: Option<Roi>,
    /// Free text stored in the file: camera, lens, laser, date.
    #[arg(long, default_value = "")]
    note: String,
    /// Calibration file to write (default beta.json); with several inputs, the folder of
    /// their NAME.json files (default betas).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Overwrite an existing file.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, clap::Args)]
struct MesiArgs {
    /// One recording per exposure (same size), in the order of --exposures.
    #[arg(required = true, num_args = 3..)]
    inputs: Vec<PathBuf>,
    /// Exposure times in seconds, comma separated (e.g. 0.0001,0.0005,0.001,0.005,0.01,0.05).
    #[arg(long, value_delimiter = ',', required = true)]
    exposures: Vec<f64>,
    /// Fix beta instead of fitting it.
    #[arg(long)]
    beta: Option<f64>,
    #[arg(long, default_value_t = 7)]
    window: usize,
    /// Largest RMS relative K^2 residual of a kept fit (e.g. 0.1); worse converged fits get
    /// status 4 (poor fit). Default: no limit.
    #[arg(long)]
    max_residual: Option<f64>,
    /// Keep the parameters of fits that did not converge in the maps (default: NaN there;
    /// status.tif says why).
    #[arg(long)]
    keep_failed: bool,
    #[command(flatten)]
    output: OutputOpts,
}

#[derive(Debug, Clone, clap::Args)]
struct RoiArgs {
    #[command(flatten)]
    input: Input,
    /// More inputs: several files (or a folder for INPUT) are measured in one run, each
    /// into a folder of its own inside --out named after it; a bad file is reported and
    /// skipped.
    #[arg(value_name = "MORE")]
    more: Vec<PathBuf>,
    #[command(flatten)]
    contrast: ContrastOpts,
    #[command(flatten)]
    output: OutputOpts,
    /// Regions: "x,y,w,h" or "circle:cx,cy,r"; repeat for several.
    #[arg(long = "roi", required = true)]
    rois: Vec<Roi>,
    /// Plot SFI instead of K (needs --exposure).
    #[arg(long)]
    sfi: bool,
}

/// The speckle part of `biogpu demo`: prints the library demo's report.
pub fn demo(out: &Path, device: &Device) -> anyhow::Result<bool> {
    crate::say!("{}", speckle_core::sim::demo(out, device)?);
    Ok(true)
}

pub fn run(args: Args, device: &Device) -> anyhow::Result<()> {
    match args.command {
        Command::Contrast(a) => run_contrast(&a, device),
        Command::Flow(a) => run_flow(&a, device),
        Command::Mesi(a) => run_mesi(&a, device),
        Command::Roi(a) => run_roi(&a, device),
        Command::Calibrate(a) => run_calibrate(&a, device),
        Command::Live(a) => live::run(&a, device),
    }
}

fn params(opts: &ContrastOpts, camera: CameraInfo) -> anyhow::Result<ContrastParams> {
    let window = Window::new(opts.window)?;
    let p = match opts.mode {
        Mode::Spatial => ContrastParams::spatial(window),
        Mode::Temporal => ContrastParams::temporal(opts.frames),
        Mode::SpatioTemporal => ContrastParams::spatiotemporal(window, opts.frames),
    }
    .with_border(opts.border)
    .with_saturation(camera.saturation());
    Ok(match opts.exposure {
        Some(t) => p.with_exposure(t)?,
        None => p,
    })
}

/// Read the input (and subtract the dark frame). A single frame that is a vertical strip of
/// square tiles (e.g. 64x64000: 1000 frames of 64x64) is detected: with `need_frames` (time
/// series) it is an error that names `--frame-height`, otherwise a note.
fn load_split(input: &Input, need_frames: bool) -> anyhow::Result<(RawStack, CameraInfo)> {
    let (stack, camera) = load(input)?;
    let (f, h, w) = stack.dim();
    check_strip(input, f, h, w, need_frames)?;
    Ok((stack, camera))
}

/// [`load_split`]'s check of a single tiled strip of `f` frames of `h x w`.
fn check_strip(
    input: &Input,
    f: usize,
    h: usize,
    w: usize,
    need_frames: bool,
) -> anyhow::Result<()> {
    if f != 1 || input.frame_height.is_some() || w == 0 || h < 2 * w || !h.is_multiple_of(w) {
        return Ok(());
    }
    let n = h / w;
    if need_frames {
        bail!(
            "{} is one {w}x{h} image, but a time series needs a stack of frames; if it holds \
             {n} square frames of {w}x{w} stacked vertically, pass --frame-height {w}",
            input.path.display()
        );
    }
    eprintln!(
        "note: {} is one {w}x{h} image; if it holds {n} frames of {w}x{w} stacked \
         vertically, pass --frame-height {w}",
        input.path.display()
    );
    Ok(())
}

/// How to read the input.
fn load_options(input: &Input) -> LoadOptions {
    LoadOptions {
        bit_depth: input.bit_depth,
        raw: input.raw,
        frame_height: input.frame_height,
        pick: StackPick {
            channel: input.channel,
            slice: input.slice,
        },
    }
}

/// Read the input (and subtract the dark frame).
fn load(input: &Input) -> anyhow::Result<(RawStack, CameraInfo)> {
    let opts = load_options(input);
    let (stack, camera) = load_stack(&input.path, &opts)?;
    let Some(dark) = &input.dark else {
        return Ok((stack, camera));
    };
    let dark = load_frame(dark, &opts).with_context(|| format!("dark frame {}", dark.display()))?;
    Ok((correct::subtract_dark_raw(&stack, dark.view())?, camera))
}

/// Contrast of the whole stack in batches, with a progress bar for long stacks.
fn contrast_with_progress(
    stack: &RawStack,
    p: &ContrastParams,
    device: &Device,
) -> anyhow::Result<(ContrastMaps, ContrastInfo)> {
    let frames = stack.dim().0;
    let batch = 64usize;
    if p.mode != Mode::Spatial || frames <= batch {
        return Ok(contrast(stack, p, device)?);
    }
    let bar = ProgressBar::new(frames as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} frames {per_sec} eta {eta}")
            .expect("template"),
    );
    let mut parts = Vec::new();
    for start in (0..frames).step_by(batch) {
        let end = (start + batch).min(frames);
        let part = match stack {
            RawStack::U8(a) => RawStack::U8(a.slice(s![start..end, .., ..]).to_owned()),
            RawStack::U16(a) => RawStack::U16(a.slice(s![start..end, .., ..]).to_owned()),
            RawStack::F32(a) => RawStack::F32(a.slice(s![start..end, .., ..]).to_owned()),
        };
        parts.push(contrast(&part, p, device)?);
        bar.inc((end - start) as u64);
    }
    bar.finish_and_clear();
    let info = parts[0].1.clone();
    let maps: Vec<ContrastMaps> = parts.into_iter().map(|(m, _)| m).collect();
    let maps = ContrastMaps::concat(&maps)?.expect("at least one batch");
    Ok((maps, info))
}

/// A quantity written as a map: file stem, figure title (quantity and unit), ImageJ
/// quantity and unit, and whether its figures default to a log scale.
#[derive(Debug, Clone, Copy)]
struct Quantity {
    stem: &'static str,
    title: &'static str,
    name: &'static str,
    unit: &'static str,
    log: bool,
}

const K: Quantity = Quantity {
    stem: "k",
    title: "K",
    name: "K",
    unit: "1",
    log: false,
};
const K_MEAN: Quantity = Quantity {
    stem: "k_mean",
    title: "K (rms over frames)",
    name: "K",
    unit: "1",
    log: false,
};
const SFI: Quantity = Quantity {
    stem: "sfi",
    title: "SFI (1/s)",
    name: "SFI",
    unit: "1/s",
    log: true,
};
const INV_K2: Quantity = Quantity {
    stem: "inv_k2",
    title: "1/K^2",
    name: "1/K^2",
    unit: "1",
    log: true,
};
const TAU_C: Quantity = Quantity {
    stem: "tau_c_ms",
    title: "tau_c (ms)",
    name: "tau_c",
    unit: "ms",
    log: true,
};
const INV_TAU: Quantity = Quantity {
    stem: "inv_tau_c",
    title: "1/tau_c (1/ms)",
    name: "1/tau_c",
    unit: "1/ms",
    log: true,
};
const FLAGS: Quantity = Quantity {
    stem: "flags",
    title: "flags (bits)",
    name: "flags",
    unit: "bits",
    log: false,
};
const RHO: Quantity = Quantity {
    stem: "rho",
    title: "rho",
    name: "rho",
    unit: "1",
    log: false,
};
const V_NOISE: Quantity = Quantity {
    stem: "v_noise",
    title: "v_noise",
    name: "v_noise",
    unit: "1",
    log: false,
};
const BETA: Quantity = Quantity {
    stem: "beta",
    title: "beta",
    name: "beta",
    unit: "1",
    log: false,
};
const STATUS: Quantity = Quantity {
    stem: "status",
    title: "fit status",
    name: "status",
    unit: "code",
    log: false,
};
const RESIDUAL: Quantity = Quantity {
    stem: "residual_rms",
    title: "RMS rel. residual",
    name: "residual_rms",
    unit: "1",
    log: true,
};

fn figure(o: &OutputOpts, q: Quantity) -> anyhow::Result<Figure> {
    let scale = match o.scale.as_str() {
        "auto" => {
            if q.log {
                Scale::Log
            } else {
                Scale::Linear
            }
        }
        other => other
            .parse::<Scale>()
            .map_err(|_| anyhow::anyhow!("--scale {other}: expected auto, linear or log"))?,
    };
    Ok(Figure::new(q.title, scale))
}

fn summary_mode(p: &ContrastParams) -> serde_json::Value {
    let mut v = serde_json::json!({ "mode": format!("{:?}", p.mode).to_lowercase() });
    if p.mode != Mode::Temporal {
        v["window"] = p.window.size().into();
    }
    if p.mode != Mode::Spatial {
        v["temporal_frames"] = p.frames.into();
    }
    v
}

fn merge(mut a: serde_json::Value, b: serde_json::Value) -> serde_json::Value {
    if let (Some(a), serde_json::Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Frame files a folder given to a speckle command stands for (raw binary needs --raw).
const SPECKLE_EXTENSIONS: &[&str] = &["tif", "tiff", "png", "raw", "bin"];

/// INPUT and MORE of a speckle command: `None` for one file, else every input (a folder
/// stands for its frame files), each run by `one(input, its folder inside out)`, a bad one
/// reported and skipped.
fn run_batch(
    input: &Path,
    more: &[PathBuf],
    out: &Path,
    mut one: impl FnMut(PathBuf, PathBuf) -> anyhow::Result<()>,
) -> Option<anyhow::Result<()>> {
    let given: Vec<PathBuf> = std::iter::once(input.to_path_buf())
        .chain(more.iter().cloned())
        .collect();
    if !super::batch::is_batch(&given) {
        return None;
    }
    let mut run = || {
        let inputs = super::batch::expand(&given, SPECKLE_EXTENSIONS)?;
        let outs = super::batch::out_dirs(out, &inputs);
        // Each command reads its file itself (contrast streams it): nothing to read ahead.
        super::batch::run(
            &inputs,
            1,
            |path| Ok(path.to_path_buf()),
            |i, _, path| one(path, outs[i].clone()),
        )
    };
    Some(run())
}

/// `speckle contrast`, streamed: frames are read, computed and written one at a time
/// (see `speckle_stream.rs`), so memory is bounded whatever the stack length.
fn run_contrast(a: &ContrastArgs, device: &Device) -> anyhow::Result<()> {
    let batch = run_batch(&a.input.path, &a.more, &a.output.out, |path, out| {
        let mut one = a.clone();
        (one.input.path, one.output.out) = (path, out);
        one.more.clear();
        contrast_one(&one, device)
    });
    batch.unwrap_or_else(|| contrast_one(a, device))
}

/// The arithmetic of integer frames' contrast (as `speckle_core::contrast` records it).
const INTEGER_SUMS: &str = "exact integer window sums, f32 maps";

/// `speckle contrast` of the one input `a.input.path` into `a.output.out`.
fn contrast_one(a: &ContrastArgs, device: &Device) -> anyhow::Result<()> {
    let temporal = a.contrast.mode != Mode::Spatial;
    let opts = load_options(&a.input);
    let (mut source, camera, f) = speckle_core::io::open_frames_counted(&a.input.path, &opts)?;
    let first = match source.next() {
        Some(frame) => frame?,
        None => bail!("{} holds no frame", a.input.path.display()),
    };
    let (h, w) = first.dim();
    check_strip(&a.input, f, h, w, temporal)?;
    let dark = match &a.input.dark {
        Some(d) => {
            Some(load_frame(d, &opts).with_context(|| format!("dark frame {}", d.display()))?)
        }
        None => None,
    };
    let p = params(&a.contrast, camera)?;
    if temporal && f < p.frames {
        bail!(
            "{} has {f} frame(s) but --frames {} asks for a temporal window of {} frames; use \
             a longer recording or a smaller --frames{}",
            a.input.path.display(),
            p.frames,
            p.frames,
            if f == 1 {
                " (frames tiled in one image? pass --frame-height ROWS)"
            } else {
                ""
            }
        );
    }
    let mut planned = map_files(&a.output, K.stem);
    if p.exposure_s.is_some() {
        planned.extend(map_files(&a.output, SFI.stem));
    }
    planned.push("summary.json".into());
    let out = OutDir::create(&a.output.out, a.output.force, &[&a.input.path], planned)?;
    let dtype = if dark.is_some() { "f32" } else { first.dtype() };
    let choice = crate::device_arg::choose(device, speckle_core::job_estimate(h * w, f));
    let device = &choice.device;
    let backend =
        if device.is_gpu() && dark.is_none() && !matches!(first, speckle_core::Frame::F32(_)) {
            device.backend()
        } else {
            gpu_runtime::Backend::Cpu
        };
    let out_frames = if temporal { f - p.frames + 1 } else { f };
    stream::keep_frame_buffers_in_the_heap();
    let t0 = Instant::now();
    let started = std::time::SystemTime::now();
    let writer = stream::Writer::new(&out, &a.output, out_frames, p.exposure_s.is_some());
    let (_, totals) = stream::run_with_writer(writer, |recycle, sink| {
        stream::compute(first, source, dark.as_ref(), &p, device, recycle, sink)
    })?;
    let secs = t0.elapsed().as_secs_f64();
    // Integer frames: exact window sums on either path; dark-subtracted or float frames
    // run on the CPU in f32 frames.
    let (ran_on, precision) = if backend == gpu_runtime::Backend::Cpu {
        let float = dark.is_some() || dtype == "f32";
        let precision = if float {
            "f32 frames, CPU window sums"
        } else {
            INTEGER_SUMS
        };
        (Device::cpu(), precision)
    } else {
        (device.clone(), INTEGER_SUMS)
    };
    crate::record::note_library(&gpu_runtime::Provenance::new(&ran_on, precision, started));
    let summary = serde_json::json!({
        "input": a.input.path, "frames": f, "width": w, "height": h, "dtype": dtype,
        "border": format!("{:?}", p.border).to_lowercase(), "exposure_s": p.exposure_s, "device": device.info().id,
        "device_choice": choice.reason,
        "backend": backend.to_string(), "seconds": secs, "frames_per_second": f as f64 / secs,
        "k_mean": totals.k_mean(), "undefined_pixels": totals.undefined,
        "saturated_pixels": totals.saturated,
        "output_frames": totals.output_frames,
    });
    out.write_json("summary.json", &merge(summary, summary_mode(&p)))?;
    let shown = out.path().display().to_string();
    out.commit()?;
    crate::say!(
        "{} frame(s) {w}x{h} -> K{} on {} in {:.3} s; outputs in {}",
        f,
        if p.exposure_s.is_some() { " + SFI" } else { "" },
        backend,
        secs,
        shown
    );
    Ok(())
}

const NO_BETA_SOURCE: &str = "tau_c needs the coherence factor beta, and no beta source was \
    given. Measure it on a static target (`biogpu speckle calibrate static.tif --out \
    beta.json`, then --calibration beta.json), or give --static-frame FILE, --static-region \
    x,y,w,h (a static part of this field), --beta VALUE, or --beta estimate to estimate it from \
    this recording (unreliable without static tissue in view; see docs/speckle.md)";

/// The beta of a flow run, from the one source the user gave.
fn flow_beta(
    a: &FlowArgs,
    p: &ContrastParams,
    stack: &RawStack,
    k_avg: &ndarray::Array2<f32>,
    device: &Device,
) -> anyhow::Result<BetaOrigin> {
    if let Some(path) = &a.calibration {
        let cal = Calibration::read(path)?;
        let here = (p.mode == Mode::Spatial).then(|| p.window.size());
        if cal.window != here || cal.border != format!("{:?}", p.border).to_lowercase() {
            eprintln!(
                "warning: the calibration was measured with window {:?} and border {}, these \
                 maps use window {here:?} and border {:?}: beta depends on the window",
                cal.window, cal.border, p.border
            );
        }
        return Ok(BetaOrigin::CalibrationFile {
            beta: cal.beta,
            path: path.display().to_string(),
        });
    }
    if let Some(path) = &a.static_frame {
        let (s, cam) = load(&Input {
            path: path.clone(),
            raw: a.input.raw,
            bit_depth: a.input.bit_depth,
            frame_height: a.input.frame_height,
            channel: a.input.channel,
            slice: a.input.slice,
            dark: None,
        })?;
        let cp = params(&a.contrast, cam)?;
        let cp = if cp.mode == Mode::Spatial {
            cp
        } else {
            ContrastParams::spatial(cp.window).with_border(cp.border)
        };
        let (rs, _) = contrast(&s, &cp, device)?;
        let ks = rms_over_frames(rs.k.view());
        let all = ndarray::Array2::from_elem(ks.dim(), true);
        let beta = calibrate_beta(ks.view(), BetaSource::Static(all.view()))?;
        return Ok(BetaOrigin::StaticRecording {
            beta,
            path: path.display().to_string(),
        });
    }
    if let Some(region) = &a.static_region {
        let (h, w) = k_avg.dim();
        let mut mask = ndarray::Array2::from_elem((h, w), false);
        for i in region.pixels(h, w)? {
            mask[[i / w, i % w]] = true;
        }
        let beta = calibrate_beta(k_avg.view(), BetaSource::Static(mask.view()))?;
        return Ok(BetaOrigin::StaticRegion {
            beta,
            region: region.to_string(),
        });
    }
    match a.beta.as_deref() {
        Some("estimate") => {
            let temporal = p.mode == Mode::Temporal;
            let window = (p.mode != Mode::Temporal).then(|| p.window.size());
            let e = estimate_beta(
                k_avg.view(),
                stack_lag1_correlation(stack),
                window,
                temporal,
            )?;
            Ok(BetaOrigin::Estimated(e))
        }
        Some(v) => {
            let beta: f64 = v.parse().map_err(|_| {
                anyhow::anyhow!("--beta {v}: expected a number such as 0.45, or `estimate`")
            })?;
            speckle_core::model::flow::check_beta(beta)?;
            Ok(BetaOrigin::Given { beta })
        }
        None => bail!(NO_BETA_SOURCE),
    }
}

/// `speckle flow` of INPUT, or of each of several inputs (the options checked first, once).
fn run_flow(a: &FlowArgs, device: &Device) -> anyhow::Result<()> {
    flow_options(a)?;
    let batch = run_batch(&a.input.path, &a.more, &a.output.out, |path, out| {
        let mut one = a.clone();
        (one.input.path, one.output.out) = (path, out);
        one.more.clear();
        flow_one(&one, device)
    });
    batch.unwrap_or_else(|| flow_one(a, device))
}

/// The exposure (s) and flow model of `speckle flow`, after checking that a beta source
/// is given (before anything is read).
fn flow_options(a: &FlowArgs) -> anyhow::Result<(f64, FlowModel)> {
    let Some(exposure) = a.contrast.exposure else {
        bail!("--exposure (seconds) is required to compute tau_c")
    };
    let model = match a.model.as_str() {
        "lorentzian" => FlowModel::Lorentzian,
        "gaussian" => FlowModel::Gaussian,
        other => bail!("--model {other}: expected lorentzian or gaussian"),
    };
    if a.beta.is_none()
        && a.calibration.is_none()
        && a.static_frame.is_none()
        && a.static_region.is_none()
    {
        // Say so before reading anything.
        bail!(NO_BETA_SOURCE);
    }
    Ok((exposure, model))
}

/// `speckle flow` of the one input `a.input.path` into `a.output.out`.
fn flow_one(a: &FlowArgs, device: &Device) -> anyhow::Result<()> {
    let (exposure, model) = flow_options(a)?;
    let (stack, camera) = load_split(&a.input, a.contrast.mode != Mode::Spatial)?;
    let p = params(&a.contrast, camera)?;
    let mut inputs = vec![a.input.path.as_path()];
    inputs.extend(a.static_frame.as_deref());
    inputs.extend(a.calibration.as_deref());
    let mut planned: Vec<String> = [TAU_C, INV_TAU, K_MEAN, INV_K2, SFI, FLAGS]
        .iter()
        .flat_map(|q| map_files(&a.output, q.stem))
        .collect();
    planned.push("summary.json".into());
    let out = OutDir::create(&a.output.out, a.output.force, &inputs, planned)?;
    let (r, info) = contrast_with_progress(&stack, &p, device)?;
    // Average K^2 over frames (speckle averaging), then invert the model.
    let k_avg = rms_over_frames(r.k.view());
    let origin = flow_beta(a, &p, &stack, &k_avg, device)?;
    let beta = origin.beta();
    eprintln!("{}", origin.describe());
    if let BetaOrigin::Estimated(e) = &origin {
        for w in &e.warnings {
            eprintln!("warning: {w}");
        }
        if !e.reliable {
            eprintln!(
                "warning: every tau_c below depends on this beta; calibrate on a static target \
                 (`biogpu speckle calibrate`) for quantitative maps"
            );
        }
    }
    let (tau, finfo) = flow(
        k_avg.view(),
        &FlowParams::new(exposure, beta).with_model(model),
        device,
    )?;
    crate::record::note_library(&finfo.provenance);
    let tau_s = if a.keep_flagged {
        tau.tau_c.clone()
    } else {
        tau.masked_tau_c()
    };
    let tau_ms = tau_s.mapv(|t| t * 1e3);
    let inv_tau = tau_ms.mapv(|t| 1.0 / t);
    write_maps(&out, &a.output, TAU_C, &tau_ms.clone().insert_axis(Axis(0)))?;
    write_maps(&out, &a.output, INV_TAU, &inv_tau.insert_axis(Axis(0)))?;
    write_maps(&out, &a.output, K_MEAN, &k_avg.clone().insert_axis(Axis(0)))?;
    if let Some(sfi) = &r.sfi {
        write_maps(&out, &a.output, SFI, sfi)?;
    }
    let inv = k_avg.mapv(|k| 1.0 / (k * k));
    write_maps(&out, &a.output, INV_K2, &inv.insert_axis(Axis(0)))?;
    let fl = tau.flags.mapv(f32::from);
    write_maps(&out, &a.output, FLAGS, &fl.insert_axis(Axis(0)))?;
    let pct = |n: usize| 100.0 * n as f64 / finfo.pixels.max(1) as f64;
    let summary = serde_json::json!({
        "input": a.input.path, "beta": beta, "beta_source": origin,
        "beta_reliable": !matches!(&origin, BetaOrigin::Estimated(e) if !e.reliable),
        "model": a.model, "exposure_s": exposure, "backend": info.backend.to_string(),
        "flow_backend": finfo.backend.to_string(),
        "tau_c_ms_median": median(tau_ms.iter().copied()),
        "pixels": finfo.pixels,
        "flagged": {
            "no_motion_k2_ge_beta": finfo.no_motion, "no_contrast_k_0": finfo.no_contrast,
            "undefined": finfo.undefined,
        },
        "flag_bits": { "undefined": flags::UNDEFINED, "no_motion": flags::NO_MOTION, "no_contrast": flags::NO_CONTRAST },
        "flagged_pixels_in_tau_c": if a.keep_flagged { "kept (+inf, 0, NaN)" } else { "NaN" },
    });
    out.write_json("summary.json", &merge(summary, summary_mode(&p)))?;
    let shown = out.path().display().to_string();
    out.commit()?;
    crate::say!(
        "tau_c map ({model:?} model, beta {beta:.4}) written to {shown}; flagged pixels: {} \
         K^2 >= beta ({:.2}%, no motion or beta too low), {} K = 0, {} undefined{}",
        finfo.no_motion,
        pct(finfo.no_motion),
        finfo.no_contrast,
        finfo.undefined,
        if a.keep_flagged {
            ""
        } else {
            " (NaN in tau_c_ms; see flags.tif)"
        }
    );
    if pct(finfo.no_motion) > 5.0 {
        eprintln!(
            "warning: {:.1}% of the pixels have K^2 >= beta: beta may be too low for this field",
            pct(finfo.no_motion)
        );
    }
    Ok(())
}

fn run_calibrate(a: &CalibrateArgs, device: &Device) -> anyhow::Result<()> {
    let folder = a.out.clone().unwrap_or_else(|| "betas".into());
    let batch = run_batch(&a.input.path, &a.more, &folder, |path, named| {
        let mut one = a.clone();
        one.input.path = path;
        one.more.clear();
        // One calibration file per recording, named after it: NAME.json.
        let mut file = named.into_os_string();
        file.push(".json");
        calibrate_one(&one, device, Path::new(&file))
    });
    batch.unwrap_or_else(|| {
        let file = a.out.clone().unwrap_or_else(|| "beta.json".into());
        calibrate_one(a, device, &file)
    })
}

/// `speckle calibrate` of the one static recording `a.input.path` into the file `file`.
fn calibrate_one(a: &CalibrateArgs, device: &Device, file: &Path) -> anyhow::Result<()> {
    let (stack, camera) = load(&a.input)?;
    let mut p = ContrastParams::spatial(Window::new(a.window)?)
        .with_border(a.border)
        .with_saturation(camera.saturation());
    if let Some(t) = a.exposure {
        p = p.with_exposure(t)?;
    }
    let (dir, name) = split_file(file)?;
    let out = OutDir::create(dir, a.force, &[&a.input.path], [name])?;
    let mut cp = CalibrationParams::new(p).with_source(format!(
        "{}{}{}",
        a.input.path.display(),
        if a.note.is_empty() { "" } else { "; " },
        a.note
    ));
    if let Some(r) = &a.roi {
        cp = cp.with_region(r.clone());
    }
    let (mut cal, cinfo) = calibrate(&stack, &cp, device)?;
    crate::record::note_library(&cinfo.provenance);
    cal.bit_depth = camera.bit_depth;
    for w in &cal.warnings {
        eprintln!("warning: {}: {w}", a.input.path.display());
    }
    cal.write(&out.file(name)?)?;
    out.commit()?;
    crate::say!(
        "beta {:.4} (sd {:.4} over {} pixels, {}x{} window) written to {}",
        cal.beta,
        cal.beta_sd,
        cal.pixels,
        a.window,
        a.window,
        file.display()
    );
    Ok(())
}

fn run_mesi(a: &MesiArgs, device: &Device) -> anyhow::Result<()> {
    if a.inputs.len() != a.exposures.len() {
        bail!(
            "{} recordings but {} exposure times: give one time per recording",
            a.inputs.len(),
            a.exposures.len()
        );
    }
    let mut planned: Vec<String> = [TAU_C, RHO, V_NOISE, BETA, STATUS, RESIDUAL]
        .iter()
        .flat_map(|q| map_files(&a.output, q.stem))
        .collect();
    planned.push("summary.json".into());
    let out = OutDir::create(
        &a.output.out,
        a.output.force,
        &a.inputs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        planned,
    )?;
    let mut ks = Vec::new();
    for (path, &t) in a.inputs.iter().zip(&a.exposures) {
        let (stack, cam) = load_stack(path, &LoadOptions::default())?;
        let p = ContrastParams::spatial(Window::new(a.window)?)
            .with_saturation(cam.saturation())
            .with_exposure(t)?;
        let (r, _) = contrast(&stack, &p, device)
            .with_context(|| format!("contrast of {}", path.display()))?;
        ks.push(rms_over_frames(r.k.view()));
    }
    let views: Vec<_> = ks.iter().map(|k| k.view()).collect();
    let k = ndarray::stack(Axis(0), &views).context("recordings differ in size")?;
    let mut opts = a
        .beta
        .map_or_else(MesiOptions::default, MesiOptions::fixed_beta);
    if let Some(r) = a.max_residual {
        opts = opts.with_max_residual_rms(r);
    }
    let input = MesiInput {
        k: k.view(),
        exposures_s: &a.exposures,
    };
    let (fit, info) = mesi(input, &opts, device)?;
    crate::record::note_library(&info.provenance);
    let residual = fit.residual_rms(a.exposures.len());
    let shown_fit = if a.keep_failed {
        fit.clone()
    } else {
        fit.masked()
    };
    let one = |m: &ndarray::Array2<f32>| m.clone().insert_axis(Axis(0));
    write_maps(
        &out,
        &a.output,
        TAU_C,
        &one(&shown_fit.tau_c.mapv(|t| t * 1e3)),
    )?;
    write_maps(&out, &a.output, RHO, &one(&shown_fit.rho))?;
    write_maps(&out, &a.output, V_NOISE, &one(&shown_fit.v_noise))?;
    write_maps(&out, &a.output, BETA, &one(&shown_fit.beta))?;
    write_maps(&out, &a.output, STATUS, &one(&fit.status.mapv(f32::from)))?;
    write_maps(&out, &a.output, RESIDUAL, &one(&residual))?;
    let counts = info.status_counts;
    let total = fit.status.len();
    let converged_residual: Vec<f32> = residual
        .iter()
        .zip(&fit.status)
        .filter(|(_, s)| **s == FitStatus::Converged as u8)
        .map(|(r, _)| *r)
        .collect();
    let by_status: serde_json::Map<String, serde_json::Value> = FitStatus::ALL
        .iter()
        .map(|s| {
            (
                format!("{}_{}", *s as u8, s.name()),
                counts[*s as usize].into(),
            )
        })
        .collect();
    out.write_json("summary.json", &serde_json::json!({
        "inputs": a.inputs, "exposures_s": a.exposures, "window": a.window,
        "beta": a.beta.map_or_else(|| serde_json::Value::from("fitted"), serde_json::Value::from),
        "backend": info.backend.to_string(), "pixels": total,
        "converged_fraction": fit.converged_fraction(), "status_counts": by_status,
        "max_residual_rms": a.max_residual,
        "residual_rms_median_converged": median(converged_residual.iter().copied()),
        "failed_fits_in_maps": if a.keep_failed { "kept" } else { "NaN" },
    }))?;
    let shown = out.path().display().to_string();
    out.commit()?;
    crate::say!(
        "MESI fit: {}/{total} pixels converged ({:.1}%; {} max iterations, {} failed, {} invalid \
         input, {} poor fit){}; maps in {shown}",
        counts[0],
        100.0 * fit.converged_fraction(),
        counts[1],
        counts[2],
        counts[3],
        counts[4],
        if a.keep_failed {
            ""
        } else {
            ", unconverged pixels NaN"
        },
    );
    Ok(())
}

fn run_roi(a: &RoiArgs, device: &Device) -> anyhow::Result<()> {
    if a.sfi && a.contrast.exposure.is_none() {
        bail!("--sfi needs --exposure (seconds)");
    }
    let batch = run_batch(&a.input.path, &a.more, &a.output.out, |path, out| {
        let mut one = a.clone();
        (one.input.path, one.output.out) = (path, out);
        one.more.clear();
        roi_one(&one, device)
    });
    batch.unwrap_or_else(|| roi_one(a, device))
}

/// `speckle roi` of the one input `a.input.path` into `a.output.out`.
fn roi_one(a: &RoiArgs, device: &Device) -> anyhow::Result<()> {
    let (stack, camera) = load_split(&a.input, false)?;
    let p = params(&a.contrast, camera)?;
    let out = OutDir::create(
        &a.output.out,
        a.output.force,
        &[&a.input.path],
        ["roi.csv", "roi.png"],
    )?;
    let (r, cinfo) = contrast_with_progress(&stack, &p, device)?;
    crate::record::note_library(&cinfo.provenance);
    let maps = if a.sfi {
        r.sfi.as_ref().expect("requested")
    } else {
        &r.k
    };
    let (table, _) = roi(maps.view(), &RoiParams::new(a.rois.clone()), device)?;
    let csv = out.file("roi.csv")?;
    table.write_csv(&csv)?;
    table.write_plot_png(out.file("roi.png")?, if a.sfi { "SFI (1/s)" } else { "K" })?;
    let shown = out.path().join("roi.csv").display().to_string();
    out.commit()?;
    crate::say!(
        "ROI time courses for {} region(s) over {} frame(s): {shown}",
        a.rois.len(),
        maps.dim().0,
    );
    Ok(())
}

/// The files [`write_maps`] may write for map `name`.
fn map_files(o: &OutputOpts, name: &str) -> Vec<String> {
    let mut files = vec![format!("{name}.tif")];
    if !o.no_png {
        files.push(format!("{name}.png"));
    }
    if o.gif {
        files.push(format!("{name}.gif"));
    }
    files
}

/// ImageJ float TIFF stack, a labelled PNG figure of the first frame (or the only one; not
/// with --no-png) and an optional size-capped GIF.
fn write_maps(out: &OutDir, o: &OutputOpts, q: Quantity, maps: &Array3<f32>) -> anyhow::Result<()> {
    let fig = figure(o, q)?;
    let first = maps.index_axis(Axis(0), 0);
    let limits = if o.no_png {
        render_figure(first, o.cmap, o.range, &fig)?.1
    } else {
        render_figure_png(
            first,
            o.cmap,
            o.range,
            &fig,
            out.file(&format!("{}.png", q.stem))?,
        )?
    };
    let meta = ImageJMeta {
        quantity: q.name.into(),
        unit: q.unit.into(),
        min: limits.0,
        max: limits.1,
        pixel_um: o.pixel_um,
    };
    write_imagej_tiff(out.file(&format!("{}.tif", q.stem))?, maps.view(), &meta)?;
    if o.gif && maps.dim().0 > 1 {
        gif_preview(out, &q, maps.view(), o, &fig, maps.dim().0, 1)?;
    }
    Ok(())
}

fn median(values: impl Iterator<Item = f32>) -> f64 {
    let mut v: Vec<f32> = values.filter(|v| v.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f32::total_cmp);
    f64::from(v[v.len() / 2])
}

/// Write `stack` as the GIF preview of `q` and say when it shows fewer or averaged frames:
/// `total` maps exist, `averaged` is the block size they were averaged by before (the streamed
/// path's small copies; 1 when `write_gif_preview` itself may downscale).
fn gif_preview(
    out: &OutDir,
    q: &Quantity,
    stack: ndarray::ArrayView3<'_, f32>,
    o: &OutputOpts,
    fig: &Figure,
    total: usize,
    averaged: usize,
) -> anyhow::Result<()> {
    let p = write_gif_preview(
        out.file(&format!("{}.gif", q.stem))?,
        stack,
        o.cmap,
        o.range,
        fig,
        std::time::Duration::from_millis(100),
        &GifLimits::default(),
    )?;
    let factor = averaged.max(p.downscale);
    if p.stride > 1 || factor > 1 {
        eprintln!(
            "note: {}.gif shows {} of {total} frames (every {}th){}",
            q.stem,
            p.frames,
            p.stride,
            if factor > 1 {
                format!(", maps averaged {factor}x{factor}")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(scale: &str) -> OutputOpts {
        OutputOpts {
            out: PathBuf::from("x"),
            force: false,
            cmap: Colormap::Viridis,
            range: Range::default(),
            gif: false,
            scale: scale.into(),
            pixel_um: None,
            no_png: false,
        }
    }

    #[test]
    fn summaries_name_only_the_windows_in_use() {
        let w = Window::new(7).unwrap();
        let t = summary_mode(&ContrastParams::temporal(25));
        assert!(t.get("window").is_none(), "{t}");
        assert_eq!(t["temporal_frames"], 25);
        let s = summary_mode(&ContrastParams::spatial(w));
        assert!(s.get("temporal_frames").is_none(), "{s}");
        assert_eq!(s["window"], 7);
        let st = summary_mode(&ContrastParams::spatiotemporal(w, 5));
        assert_eq!(
            (st["window"].as_u64(), st["temporal_frames"].as_u64()),
            (Some(7), Some(5))
        );
    }

    #[test]
    fn flow_figures_default_to_a_log_scale_with_units() {
        let f = figure(&opts("auto"), TAU_C).unwrap();
        assert_eq!(
            (f.scale, f.title.as_deref()),
            (Scale::Log, Some("tau_c (ms)"))
        );
        assert_eq!(figure(&opts("auto"), K).unwrap().scale, Scale::Linear);
        assert_eq!(figure(&opts("auto"), INV_TAU).unwrap().scale, Scale::Log);
        assert_eq!(figure(&opts("linear"), SFI).unwrap().scale, Scale::Linear);
        assert!(figure(&opts("cubic"), K).is_err());
    }
}
