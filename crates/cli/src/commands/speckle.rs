//! `biogpu speckle`: laser speckle contrast, flow, MESI and ROI time courses.

use super::output::OutDir;
use anyhow::{Context, bail};
use gpu_runtime::Device;
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{Array3, Axis, s};
use speckle_core::cpu::{calibrate_beta, correct, rms_over_frames};
use speckle_core::io::output::{Colormap, Range, render_png, write_gif, write_stack_tiff};
use speckle_core::io::{LoadOptions, RawSpec, StackPick, load_frame, load_stack};
use speckle_core::{
    BetaSource, Border, CameraInfo, ContrastInfo, ContrastMaps, ContrastParams, FlowModel,
    FlowParams, MesiInput, MesiOptions, Mode, RawStack, Roi, RoiParams, Window, contrast, flow,
    mesi, roi,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

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
}

/// Input file and how to read it.
#[derive(Debug, clap::Args)]
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
#[derive(Debug, clap::Args)]
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
#[derive(Debug, clap::Args)]
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
    /// Also write an animated GIF preview of stacks.
    #[arg(long)]
    gif: bool,
}

#[derive(Debug, clap::Args)]
struct ContrastArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    contrast: ContrastOpts,
    #[command(flatten)]
    output: OutputOpts,
}

#[derive(Debug, clap::Args)]
struct FlowArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    contrast: ContrastOpts,
    #[command(flatten)]
    output: OutputOpts,
    /// lorentzian (unordered motion) or gaussian (ordered flow).
    #[arg(long, default_value = "lorentzian")]
    model: String,
    /// Coherence factor beta; default: calibrated as the 99th percentile of K^2.
    #[arg(long)]
    beta: Option<f64>,
    /// Static-scatter calibration recording: beta = its mean K^2.
    #[arg(long, conflicts_with = "beta")]
    static_frame: Option<PathBuf>,
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
    #[command(flatten)]
    output: OutputOpts,
}

#[derive(Debug, clap::Args)]
struct RoiArgs {
    #[command(flatten)]
    input: Input,
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
    println!("{}", speckle_core::sim::demo(out, device)?);
    Ok(true)
}

pub fn run(args: Args, device: &Device) -> anyhow::Result<()> {
    match args.command {
        Command::Contrast(a) => run_contrast(&a, device),
        Command::Flow(a) => run_flow(&a, device),
        Command::Mesi(a) => run_mesi(&a, device),
        Command::Roi(a) => run_roi(&a, device),
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

/// Read the input (and subtract the dark frame).
fn load(input: &Input) -> anyhow::Result<(RawStack, CameraInfo)> {
    let opts = LoadOptions {
        bit_depth: input.bit_depth,
        raw: input.raw,
        frame_height: input.frame_height,
        pick: StackPick {
            channel: input.channel,
            slice: input.slice,
        },
    };
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
    let info = parts[0].1;
    let maps: Vec<ContrastMaps> = parts.into_iter().map(|(m, _)| m).collect();
    let maps = ContrastMaps::concat(&maps)?.expect("at least one batch");
    Ok((maps, info))
}

/// A single tall PNG asked for a temporal window is most likely frames tiled in a strip
/// (as `temporal.png` in the shared data): say how to read it as a stack.
fn check_tiled_strip(stack: &RawStack, p: &ContrastParams, input: &Input) -> anyhow::Result<()> {
    let (frames, h, w) = stack.dim();
    let png = input
        .path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if !png || p.mode == Mode::Spatial || frames != 1 || input.frame_height.is_some() {
        return Ok(());
    }
    if w > 0 && h >= 2 * w && h % w == 0 {
        anyhow::bail!(
            "{} is one {w}x{h} image, but {} contrast needs a stack of frames; if it holds {} \
             square frames stacked vertically, pass --frame-height {w}",
            input.path.display(),
            format!("{:?}", p.mode).to_lowercase(),
            h / w
        );
    }
    Ok(())
}

fn run_contrast(a: &ContrastArgs, device: &Device) -> anyhow::Result<()> {
    let (stack, camera) = load(&a.input)?;
    let p = params(&a.contrast, camera)?;
    check_tiled_strip(&stack, &p, &a.input)?;
    let mut planned = map_files(&a.output, "k");
    if p.exposure_s.is_some() {
        planned.extend(map_files(&a.output, "sfi"));
    }
    planned.push("summary.json".into());
    let out = OutDir::create(&a.output.out, a.output.force, &[&a.input.path], planned)?;
    let t0 = Instant::now();
    let (r, info) = contrast_with_progress(&stack, &p, device)?;
    let secs = t0.elapsed().as_secs_f64();
    write_maps(&out, &a.output, "k", &r.k)?;
    if let Some(sfi) = &r.sfi {
        write_maps(&out, &a.output, "sfi", sfi)?;
    }
    let (f, h, w) = stack.dim();
    let summary = serde_json::json!({
        "input": a.input.path, "frames": f, "width": w, "height": h, "dtype": stack.dtype(),
        "mode": format!("{:?}", p.mode), "window": p.window.size(), "temporal_frames": p.frames,
        "border": format!("{:?}", p.border), "exposure_s": p.exposure_s, "device": device.info().id,
        "backend": info.backend.to_string(), "seconds": secs, "frames_per_second": f as f64 / secs,
        "k_mean": nan_mean(r.k.iter().copied()), "undefined_pixels": r.flags.iter().filter(|&&x| x & 1 != 0).count(),
        "saturated_pixels": r.flags.iter().filter(|&&x| x & 2 != 0).count(),
    });
    out.write_json("summary.json", &summary)?;
    let shown = out.path().display().to_string();
    out.commit()?;
    println!(
        "{} frame(s) {w}x{h} -> K{} on {} in {:.3} s; outputs in {}",
        f,
        if r.sfi.is_some() { " + SFI" } else { "" },
        info.backend,
        secs,
        shown
    );
    Ok(())
}

fn run_flow(a: &FlowArgs, device: &Device) -> anyhow::Result<()> {
    let Some(exposure) = a.contrast.exposure else {
        bail!("--exposure (seconds) is required to compute tau_c")
    };
    let model = match a.model.as_str() {
        "lorentzian" => FlowModel::Lorentzian,
        "gaussian" => FlowModel::Gaussian,
        other => bail!("--model {other}: expected lorentzian or gaussian"),
    };
    let (stack, camera) = load(&a.input)?;
    let p = params(&a.contrast, camera)?;
    let mut inputs = vec![a.input.path.as_path()];
    inputs.extend(a.static_frame.as_deref());
    let mut planned: Vec<String> = ["tau_c_ms", "k_mean", "inv_k2", "sfi"]
        .iter()
        .flat_map(|n| map_files(&a.output, n))
        .collect();
    planned.push("summary.json".into());
    let out = OutDir::create(&a.output.out, a.output.force, &inputs, planned)?;
    let (r, info) = contrast_with_progress(&stack, &p, device)?;
    // Average K^2 over frames (speckle averaging), then invert the model.
    let k_avg = rms_over_frames(r.k.view());
    let beta = match (a.beta, &a.static_frame) {
        (Some(b), _) => b,
        (None, Some(path)) => {
            let (s, cam) = load(&Input {
                path: path.clone(),
                raw: a.input.raw,
                bit_depth: a.input.bit_depth,
                frame_height: a.input.frame_height,
                channel: a.input.channel,
                slice: a.input.slice,
                dark: None,
            })?;
            let (rs, _) = contrast(&s, &params(&a.contrast, cam)?, device)?;
            let ks = rms_over_frames(rs.k.view());
            let all = ndarray::Array2::from_elem(ks.dim(), true);
            calibrate_beta(ks.view(), BetaSource::Static(all.view()))?
        }
        (None, None) => calibrate_beta(k_avg.view(), BetaSource::Percentile(99.0))?,
    };
    let (tau, _) = flow(
        k_avg.view(),
        &FlowParams::new(exposure, beta).with_model(model),
        device,
    )?;
    let tau_ms = tau.tau_c.mapv(|t| t * 1e3);
    write_maps(
        &out,
        &a.output,
        "tau_c_ms",
        &tau_ms.clone().insert_axis(Axis(0)),
    )?;
    write_maps(
        &out,
        &a.output,
        "k_mean",
        &k_avg.clone().insert_axis(Axis(0)),
    )?;
    if let Some(sfi) = &r.sfi {
        write_maps(&out, &a.output, "sfi", sfi)?;
    }
    let inv = k_avg.mapv(|k| 1.0 / (k * k));
    write_maps(&out, &a.output, "inv_k2", &inv.insert_axis(Axis(0)))?;
    out.write_json("summary.json", &serde_json::json!({
        "beta": beta, "model": a.model, "exposure_s": exposure, "backend": info.backend.to_string(),
        "tau_c_ms_median": median(tau_ms.iter().copied()),
    }))?;
    let shown = out.path().display().to_string();
    out.commit()?;
    println!("tau_c map ({model:?} model, beta {beta:.4}) written to {shown}");
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
    let out = OutDir::create(
        &a.output.out,
        a.output.force,
        &a.inputs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        ["tau_c_ms", "rho", "v_noise", "beta"]
            .iter()
            .flat_map(|n| map_files(&a.output, n)),
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
    let opts = a
        .beta
        .map_or_else(MesiOptions::default, MesiOptions::fixed_beta);
    let input = MesiInput {
        k: k.view(),
        exposures_s: &a.exposures,
    };
    let (fit, _) = mesi(input, &opts, device)?;
    write_maps(
        &out,
        &a.output,
        "tau_c_ms",
        &fit.tau_c.mapv(|t| t * 1e3).insert_axis(Axis(0)),
    )?;
    write_maps(
        &out,
        &a.output,
        "rho",
        &fit.rho.clone().insert_axis(Axis(0)),
    )?;
    write_maps(
        &out,
        &a.output,
        "v_noise",
        &fit.v_noise.clone().insert_axis(Axis(0)),
    )?;
    write_maps(
        &out,
        &a.output,
        "beta",
        &fit.beta.clone().insert_axis(Axis(0)),
    )?;
    let converged = fit.status.iter().filter(|&&s| s == 0).count();
    let shown = out.path().display().to_string();
    out.commit()?;
    println!(
        "MESI fit: {converged}/{} pixels converged; maps in {shown}",
        fit.status.len(),
    );
    Ok(())
}

fn run_roi(a: &RoiArgs, device: &Device) -> anyhow::Result<()> {
    let (stack, camera) = load(&a.input)?;
    let p = params(&a.contrast, camera)?;
    if a.sfi && p.exposure_s.is_none() {
        bail!("--sfi needs --exposure (seconds)");
    }
    let out = OutDir::create(
        &a.output.out,
        a.output.force,
        &[&a.input.path],
        ["roi.csv", "roi.png"],
    )?;
    let (r, _) = contrast_with_progress(&stack, &p, device)?;
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
    println!(
        "ROI time courses for {} region(s) over {} frame(s): {shown}",
        a.rois.len(),
        maps.dim().0,
    );
    Ok(())
}

/// The files [`write_maps`] may write for map `name`.
fn map_files(o: &OutputOpts, name: &str) -> Vec<String> {
    let mut files = vec![format!("{name}.tif"), format!("{name}.png")];
    if o.gif {
        files.push(format!("{name}.gif"));
    }
    files
}

/// Float TIFF stack, a PNG of the first frame (or the only one) and an optional GIF.
fn write_maps(out: &OutDir, o: &OutputOpts, name: &str, maps: &Array3<f32>) -> anyhow::Result<()> {
    write_stack_tiff(out.file(&format!("{name}.tif"))?, maps.view())?;
    let first = maps.index_axis(Axis(0), 0);
    render_png(first, o.cmap, o.range, out.file(&format!("{name}.png"))?)?;
    if o.gif && maps.dim().0 > 1 {
        write_gif(
            out.file(&format!("{name}.gif"))?,
            maps.view(),
            o.cmap,
            o.range,
            std::time::Duration::from_millis(100),
        )?;
    }
    Ok(())
}

pub(crate) fn nan_mean(values: impl Iterator<Item = f32>) -> f64 {
    let (s, n) = values
        .filter(|v| v.is_finite())
        .fold((0f64, 0usize), |(s, n), v| (s + f64::from(v), n + 1));
    if n == 0 { f64::NAN } else { s / n as f64 }
}

fn median(values: impl Iterator<Item = f32>) -> f64 {
    let mut v: Vec<f32> = values.filter(|v| v.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f32::total_cmp);
    f64::from(v[v.len() / 2])
}
