//! `biogpu flim`: fluorescence lifetime imaging (issue 4): `fit` (lifetime maps), `phasor`
//! (phasor coordinates and plot) and `convert` (any reader to .npy or TIFF). The command
//! line becomes the library's options ([`flim_core::io::PrepOptions`],
//! [`flim_core::MethodOptions`]); preparation and the methods run in `flim_core`; this file
//! writes the outputs.

use super::batch;
use super::flim_fit::{FitMethodArgs, Method, Model};
use super::output::OutDir;
use anyhow::{Context, bail};
use flim_core::io::{
    IrfShift, IrfSource, MapSet, MapStats, OffsetSpec, PrepOptions, Prepared, RangeSpec,
    ReadOptions, Recording, lifetime_histogram, map_stats, phasor_calibration, phasor_omega,
    prepare_cube, read, write_histogram_csv, write_histogram_png, write_lifetime_png,
    write_map_png, write_map_tiff, write_npy, write_phasor_png, write_summary_csv, write_tiff,
};
use flim_core::{Binning, GpuTuning, bin_spatial};
use gpu_runtime::Device;
use imaging_io::{Colormap, Range};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Lifetime maps (TIFF), a lifetime image and histogram (PNG), and a summary.
    Fit(FitArgs),
    /// Phasor coordinates (g, s) and lifetimes, the phasor plot, and a summary.
    Phasor(PhasorArgs),
    /// Write the decays of any supported file as .npy or multi-page TIFF (after the chosen
    /// selection, binning and range).
    Convert(ConvertArgs),
}

/// Input file and which part of it to read.
#[derive(Debug, clap::Args)]
struct Input {
    /// TCSPC data: Becker & Hickl .sdt or .spc (with its .set), PicoQuant .ptu (T3 or T2),
    /// .pt3, .ht3 or .phu, multi-page TIFF (pages = time bins) or .npy ((y, x, bin) or
    /// (frame, y, x, bin)).
    ///
    /// `flim fit`, `flim phasor` and `flim convert` take several files or a folder (its TCSPC
    /// files): each gets a folder of its own inside --out, named after the file; a bad file is
    /// reported and skipped.
    #[arg(value_name = "INPUT", num_args = 1.., required = true)]
    paths: Vec<PathBuf>,
    /// Bin width in ns (required for TIFF and .npy; overrides the header of other formats).
    #[arg(long)]
    bin_ns: Option<f64>,
    /// Laser period in ns (default: from the header's sync rate, else the recorded window).
    #[arg(long)]
    period_ns: Option<f64>,
    /// Only this detector/routing channel (0-based; default: every channel, kept apart).
    #[arg(long)]
    channel: Option<usize>,
    /// Only this .sdt data block (0-based; default: every block, kept apart).
    #[arg(long)]
    block: Option<usize>,
    /// Time series: `sum` (default) adds the frames, `each` keeps them apart, `A:B` sums
    /// frames A..B (end exclusive, 0-based).
    #[arg(long, default_value = "sum")]
    frames: String,
    /// Photon streams (.ptu, .pt3, .ht3, .spc): merge this many TCSPC channels into one
    /// time bin.
    #[arg(long, default_value_t = 1)]
    binning: usize,
    /// Photon streams: number of time bins (after --binning); default: up to the latest
    /// photon.
    #[arg(long)]
    bins: Option<usize>,
    /// PicoQuant T2: time decays from the events of this input (0-based) instead of the
    /// recorded sync events; required for PicoHarp 300 T2, which records none.
    #[arg(long, value_name = "INPUT")]
    sync_channel: Option<u32>,
}

impl Input {
    fn read_options(&self) -> anyhow::Result<ReadOptions> {
        let mut o = ReadOptions::default().with_binning(self.binning);
        if let Some(b) = self.bin_ns {
            o = o.with_bin_ns(b);
        }
        if let Some(p) = self.period_ns {
            o = o.with_period_ns(p);
        }
        if let Some(c) = self.channel {
            o = o.with_channel(c);
        }
        if let Some(b) = self.block {
            o = o.with_block(b);
        }
        if let Some(b) = self.bins {
            o = o.with_bins(b);
        }
        if let Some(c) = self.sync_channel {
            o = o.with_sync_channel(c);
        }
        Ok(match self.frames.as_str() {
            "sum" => o.with_sum_frames(true),
            "each" => o,
            spec => {
                let (a, b) = spec
                    .split_once(':')
                    .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
                    .with_context(|| format!("--frames {spec}: expected sum, each or A:B"))?;
                o.with_frames(a..b).with_sum_frames(true)
            }
        })
    }

    /// The one input of a command that takes one (`what`).
    fn single(&self, what: &str) -> anyhow::Result<&Path> {
        match self.paths.as_slice() {
            [path] if !path.is_dir() => Ok(path),
            _ => bail!(
                "`flim {what}` takes one input file ({} given); `flim fit` and `flim phasor` take several files \
                 or a folder",
                self.paths.len()
            ),
        }
    }

    /// Read with a spinner (PicoQuant files are histogrammed while they are read).
    fn read(&self, path: &Path) -> anyhow::Result<Recording> {
        let spinner =
            ProgressBar::new_spinner().with_message(format!("reading {}", path.display()));
        spinner.enable_steady_tick(std::time::Duration::from_millis(120));
        let rec = read(path, &self.read_options()?);
        spinner.finish_and_clear();
        let rec = rec?;
        for (k, v) in &rec.metadata {
            tracing::info!("{k}: {v}");
        }
        Ok(rec)
    }
}

/// Preprocessing before the methods.
#[derive(Debug, clap::Args)]
struct Prep {
    /// Square spatial binning: sum the (2N+1) x (2N+1) neighbourhood of every pixel.
    #[arg(long, default_value_t = 0)]
    bin: usize,
    /// Circular spatial binning of this radius in pixels (instead of --bin).
    #[arg(long, conflicts_with = "bin")]
    circular: Option<f64>,
    /// Pixels with fewer photons (in the fit range, after the offset) are masked.
    #[arg(long, default_value_t = 100.0)]
    threshold: f64,
    /// Fit range: `A:B` in bins (end exclusive), `1.2ns:10ns` by time, `peak` (from the peak
    /// of the summed decay to the end), `period` (the bins whose start lies within one laser
    /// period) or `all`. Default: `peak` for fit (RLD, IEM and CMM assume the decay starts at
    /// the range's first bin; `all` when reconvolving with --irf), `period` for phasor (its
    /// frequency is 1 / period: a window longer than the period would bias it).
    #[arg(long)]
    range: Option<String>,
    /// Background per bin in each (binned) pixel: a number, or `auto` (from the pre-rise bins).
    #[arg(long, default_value = "0")]
    offset: String,
    /// Instrument response: a file (text/CSV, 1-D .npy, or a reference measurement in any
    /// TCSPC format), or `auto` to estimate it from the data.
    #[arg(long)]
    irf: Option<String>,
    /// IRF shift: `auto` (global, fitted to the rising edge), a number of ns, or `pixel`
    /// (global plus a per-pixel rise-time map, written as irf_shift_ns.tif).
    #[arg(long)]
    irf_shift: Option<String>,
}

impl Prep {
    /// The library's preparation options (`tuning` for the GPU path).
    fn options(&self, tuning: GpuTuning) -> anyhow::Result<PrepOptions> {
        if self.irf_shift.is_some() && self.irf.is_none() {
            bail!("--irf-shift needs --irf");
        }
        Ok(PrepOptions {
            binning: match self.circular {
                Some(r) => Binning::Circular(r),
                None => Binning::Square(self.bin),
            },
            threshold: self.threshold,
            range: self.range.as_deref().map(parse_range).transpose()?,
            offset: match self.offset.as_str() {
                "auto" => OffsetSpec::Auto,
                v => OffsetSpec::Fixed(
                    v.parse::<f64>()
                        .with_context(|| format!("--offset {v}: expected a number or auto"))?,
                ),
            },
            irf: self.irf.as_deref().map(|v| match v {
                "auto" => IrfSource::Estimate,
                file => IrfSource::File(PathBuf::from(file)),
            }),
            irf_shift: match self.irf_shift.as_deref() {
                None => None,
                Some("auto") => Some(IrfShift::Auto),
                Some("pixel") => Some(IrfShift::Pixel),
                Some(v) => Some(IrfShift::Ns(v.parse::<f64>().with_context(|| {
                    format!("--irf-shift {v}: expected auto, pixel or a number of ns")
                })?)),
            },
            tuning,
        })
    }
}

/// Where and how to write.
#[derive(Debug, clap::Args)]
struct OutputOpts {
    /// Output folder (created); existing files are never overwritten without --force.
    #[arg(long, default_value = "flim-out")]
    out: PathBuf,
    /// Overwrite existing output files.
    #[arg(long)]
    force: bool,
    /// Colour map of lifetime images: turbo, viridis, inferno, grey.
    #[arg(long, default_value = "turbo")]
    cmap: Colormap,
    /// Lifetime colour range in ns: "lo,hi" fixed or "p2,p98" percentiles.
    #[arg(long, default_value = "p2,p98")]
    tau_range: Range,
}

#[derive(Debug, clap::Args)]
struct FitArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    prep: Prep,
    #[command(flatten)]
    output: OutputOpts,
    /// Lifetime method.
    #[arg(long, value_enum, default_value = "iem")]
    method: Method,
    /// Decay model of the fitting methods (lsq, mle, global).
    #[arg(long, value_enum, default_value = "mono")]
    model: Model,
    #[command(flatten)]
    fit: FitMethodArgs,
}

#[derive(Debug, clap::Args)]
struct PhasorArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    prep: Prep,
    #[command(flatten)]
    output: OutputOpts,
    /// Harmonic of the laser frequency.
    #[arg(long, default_value_t = 1)]
    harmonic: u32,
    /// Calibrate the phasor: `auto` from the IRF (--irf FILE, or estimated from the data
    /// when --irf is not given; lifetime 0), or a reference recording of known lifetime
    /// (--ref-tau). Without it, a given --irf calibrates; else the phasor is uncalibrated
    /// (a warning says so).
    #[arg(long, value_name = "auto|FILE")]
    calibrate: Option<PathBuf>,
    /// Lifetime of the calibration reference recording in ns (required with --calibrate FILE).
    #[arg(long)]
    ref_tau: Option<f64>,
}

#[derive(Debug, clap::Args)]
struct ConvertArgs {
    #[command(flatten)]
    input: Input,
    /// npy or tiff.
    #[arg(long, default_value = "npy")]
    to: String,
    /// Square spatial binning before writing.
    #[arg(long, default_value_t = 0)]
    bin: usize,
    /// Keep only this range: `A:B` in bins or `1.2ns:10ns`.
    #[arg(long)]
    range: Option<String>,
    /// Output folder.
    #[arg(long, default_value = "flim-out")]
    out: PathBuf,
    /// Overwrite existing output files.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args, device: &Device) -> anyhow::Result<()> {
    let tuning = GpuTuning::from_lookup(|k| std::env::var(k).ok())?;
    match args.command {
        Command::Fit(a) => run_fit(&a, tuning, device),
        Command::Phasor(a) => run_phasor(&a, tuning, device),
        Command::Convert(a) => run_convert(&a),
    }
}

/// A range: `all`, `peak`, `period`, `A:B` in bins (end exclusive) or `1.2ns:10ns`.
fn parse_range(spec: &str) -> anyhow::Result<RangeSpec> {
    match spec {
        "all" => return Ok(RangeSpec::All),
        "peak" => return Ok(RangeSpec::Peak),
        "period" => return Ok(RangeSpec::Period),
        _ => {}
    }
    let (a, b) = spec.split_once(':').with_context(|| {
        format!("--range {spec}: expected A:B (bins), 1.2ns:10ns, peak, period or all")
    })?;
    let ns = |s: &str| s.trim().strip_suffix("ns").map(|v| v.trim().parse::<f64>());
    Ok(match (ns(a), ns(b)) {
        (Some(Ok(x)), Some(Ok(y))) => RangeSpec::Ns(x, y),
        (None, None) => RangeSpec::Bins(
            a.trim()
                .parse()
                .with_context(|| format!("--range {spec}"))?,
            b.trim()
                .parse()
                .with_context(|| format!("--range {spec}"))?,
        ),
        _ => bail!("--range {spec}: give both ends in bins (10:200) or both in ns (1.2ns:10ns)"),
    })
}

/// The start of a message about one image of a recording: `<label>: ` or nothing.
fn prefix(label: &str) -> String {
    if label.is_empty() {
        String::new()
    } else {
        format!("{label}: ")
    }
}

/// A file name in the output folder: `<label>_<name>` or just `<name>`.
fn named(label: &str, name: &str) -> String {
    if label.is_empty() {
        name.to_string()
    } else {
        format!("{label}_{name}")
    }
}

fn progress(n: usize, what: &str) -> ProgressBar {
    if n < 2 {
        return ProgressBar::hidden();
    }
    ProgressBar::new(n as u64).with_style(
        ProgressStyle::with_template(&format!("{{bar:40}} {{pos}}/{{len}} {what} eta {{eta}}"))
            .expect("template"),
    )
}

/// Every map as a float TIFF with ImageJ metadata (masked pixels NaN), the stats of each
/// for the summary.
/// Write every map of `set` as a TIFF (in parallel) and give its summary rows, in order.
fn write_set(
    out: &OutDir,
    label: &str,
    set: &MapSet,
    pixel_um: Option<f64>,
) -> anyhow::Result<Vec<(String, String, MapStats)>> {
    use rayon::prelude::*;
    set.maps
        .par_iter()
        .map(|(name, _)| {
            let map = if name == "intensity" {
                set.get(name).expect("present").clone()
            } else {
                set.masked(name).expect("present")
            };
            write_map_tiff(
                &out.file(&format!("{}.tif", named(label, name)))?,
                name,
                map.view(),
                pixel_um,
            )?;
            let image = if label.is_empty() { "all" } else { label };
            Ok((
                image.to_string(),
                name.clone(),
                map_stats(map.view(), set.mask.view()),
            ))
        })
        .collect()
}

/// Every file a run writes, known before the work: per image (names prefixed by its label)
/// the method's `maps` as TIFFs, the `extra` files, and the IRF files when there is an IRF;
/// then summary.csv and summary.json.
fn planned_files(rec: &Recording, prep: &Prep, maps: &[String], extra: &[String]) -> Vec<String> {
    let mut files = vec!["summary.csv".to_string(), "summary.json".to_string()];
    for image in &rec.images {
        let label = image.label(rec);
        files.extend(maps.iter().map(|m| format!("{}.tif", named(&label, m))));
        files.extend(extra.iter().map(|e| named(&label, e)));
        if prep.irf.is_some() {
            files.push(format!("{}.csv", named(&label, "irf")));
            if prep.irf_shift.as_deref() == Some("pixel") {
                files.push(format!("{}.tif", named(&label, "irf_shift_ns")));
            }
        }
    }
    files
}

/// Inputs an output must never replace: the recording and any files the options name.
fn input_files<'a>(path: &'a Path, prep: &'a Prep) -> Vec<&'a Path> {
    let mut inputs = vec![path];
    if let Some(irf) = prep.irf.as_deref().filter(|v| *v != "auto") {
        inputs.push(Path::new(irf));
    }
    inputs
}

/// The pixel size in µm where the recording's header gives it (PicoQuant `.ptu` images:
/// `ImgHdr_PixResol`), for the TIFF maps' ImageJ metadata.
fn pixel_um(rec: &Recording) -> Option<f64> {
    if rec.format != flim_core::io::Format::Ptu {
        return None;
    }
    flim_core::io::read_ptu_header(&rec.path)
        .ok()?
        .float("ImgHdr_PixResol")
        .filter(|p| p.is_finite() && *p > 0.0)
}

fn write_irf(
    out: &OutDir,
    p: &Prepared,
    pixel_um: Option<f64>,
) -> anyhow::Result<Option<serde_json::Value>> {
    let Some(irf) = &p.irf else { return Ok(None) };
    let mut csv = String::from("time_ns,irf\n");
    for (j, v) in irf.values().iter().enumerate() {
        let _ = writeln!(csv, "{},{v}", (j as f64 + 0.5) * irf.bin_ns());
    }
    let path = out.file(&format!("{}.csv", named(&p.label, "irf")))?;
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    if let Some(map) = &p.shift_map {
        write_map_tiff(
            &out.file(&format!("{}.tif", named(&p.label, "irf_shift_ns")))?,
            "irf_shift_ns",
            map.view(),
            pixel_um,
        )?;
    }
    Ok(Some(serde_json::json!({
        "centroid_ns": irf.centroid_ns(), "fwhm_ns": irf.fwhm_ns(), "shift_ns": p.irf_shift_ns,
    })))
}

/// TCSPC files a folder given to `flim fit` stands for.
const FLIM_EXTENSIONS: &[&str] = &[
    "sdt", "spc", "ptu", "pt3", "ht3", "phu", "tif", "tiff", "npy",
];

fn run_fit(a: &FitArgs, tuning: GpuTuning, device: &Device) -> anyhow::Result<()> {
    if !batch::is_batch(&a.input.paths) {
        let path = a.input.single("fit")?;
        let rec = tracing::debug_span!("read").in_scope(|| a.input.read(path))?;
        return fit_one(a, tuning, device, path, rec, &a.output.out, 1);
    }
    let inputs = batch::expand(&a.input.paths, FLIM_EXTENSIONS)?;
    let outs = batch::out_dirs(&a.output.out, &inputs);
    let read_opts = a.input.read_options()?;
    // Two files read ahead per four cores (each a decompression on one core).
    let ahead = (rayon::current_num_threads() / 2).clamp(1, 8);
    // Outputs are written behind the fits, a recording per four cores at a time (two at
    // least): on an H200 host (16 threads) two writers, 97 ms a recording each, held a
    // batch of real `.sdt` files to 20 a second while the fits took 30 ms each.
    let writers = (rayon::current_num_threads() / 4).clamp(2, 4);
    crate::record::note_batch(&inputs);
    batch::run_pipelined(
        &inputs,
        |p| p.display().to_string(),
        ahead,
        writers,
        |path| Ok(read(path, &read_opts)?),
        |i, path, rec| fit_compute(a, tuning, device, path, rec, &outs[i], inputs.len() - i),
    )
}

/// `flim fit` of one recording `rec` (read from `path`) into the folder `out_dir`;
/// `remaining` recordings (this one included) are still to be fitted in this process, which
/// `auto` weighs as one job (the GPU opens once for all of them).
fn fit_one(
    a: &FitArgs,
    tuning: GpuTuning,
    device: &Device,
    path: &Path,
    rec: Recording,
    out_dir: &Path,
    remaining: usize,
) -> anyhow::Result<()> {
    fit_compute(a, tuning, device, path, rec, out_dir, remaining)?()
}

/// One image fitted, waiting for its outputs to be written.
struct FittedImage {
    p: Prepared,
    set: MapSet,
    secs: f64,
    device: String,
    reason: String,
    meta: serde_json::Value,
}

/// The fits of [`fit_one`], returning the writing of their outputs (which a batch runs on
/// a writer thread while the next recording is fitted).
fn fit_compute<'a>(
    a: &'a FitArgs,
    tuning: GpuTuning,
    device: &Device,
    path: &'a Path,
    mut rec: Recording,
    out_dir: &Path,
    remaining: usize,
) -> anyhow::Result<impl FnOnce() -> anyhow::Result<()> + Send + 'a> {
    let prep = a.prep.options(tuning)?;
    let method = flim_core::Method::from(a.method);
    let opts = a.fit.options(a.method, a.model, tuning)?;
    // What the fitting methods minimise, and so what their chi2_red map holds.
    let estimator = method.reconvolves().then(|| {
        opts.fit_options(method, None, 0.0, 0.0, None, false)
            .estimator()
    });
    let px = pixel_um(&rec);
    let maps = method.map_names(&opts, a.prep.irf_shift.as_deref() == Some("pixel"));
    let extra = [
        format!("{}.png", maps[0]),
        "intensity.png".into(),
        "tau_histogram.csv".into(),
        "tau_histogram.png".into(),
    ];
    let out = OutDir::create(
        out_dir,
        a.output.force,
        &input_files(path, &a.prep),
        planned_files(&rec, &a.prep, &maps, &extra),
    )?;
    let t0 = Instant::now();
    let bar = progress(rec.images.len(), "images");
    // The device of the last image (`auto` may send a small image to the CPU).
    let mut ran_on = device.info().id.clone();
    let mut fitted = Vec::new();
    // Each image's cube goes to `prepare_cube` as it is (no copy of a 134 MB cube).
    let labels: Vec<String> = rec.images.iter().map(|i| i.label(&rec)).collect();
    let taken = std::mem::take(&mut rec.images);
    for (image, label) in taken.into_iter().zip(labels) {
        // Reconvolution models the rise: fit the whole window unless told otherwise.
        let reconvolved = a.prep.irf.is_some() && method.reconvolves();
        let default_range = if reconvolved {
            RangeSpec::All
        } else {
            RangeSpec::Peak
        };
        let p = tracing::debug_span!("prepare")
            .in_scope(|| prepare_cube(image.cube, label, &prep, default_range))
            .context("preparing the image (binning, range, offset, IRF)")?;
        let choice = crate::device_arg::choose(
            device,
            flim_core::job_estimate(&p, method, &opts).times(remaining),
        );
        let device = &choice.device;
        ran_on.clone_from(&device.info().id);
        let (set, info) = flim_core::run_method(&p, method, &opts, device)?;
        crate::record::note_library(&info.provenance);
        let secs = info.elapsed.as_secs_f64();
        fitted.push(FittedImage {
            p,
            set,
            secs,
            device: device.info().id.clone(),
            reason: choice.reason.clone(),
            meta: serde_json::json!({"block": image.block, "frame": image.frame, "channel": image.channel}),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(move || {
        let mut rows = Vec::new();
        let mut images = Vec::new();
        for FittedImage {
            p,
            set,
            secs,
            device: device_id,
            reason,
            meta,
        } in fitted
        {
            let write = tracing::debug_span!("write_outputs").entered();
            let (tau_name, tau) = &set.maps[0];
            let intensity = set.get("intensity").expect("intensity map");
            // The maps' TIFFs and the figures are encoded in parallel.
            let (written, limits) = rayon::join(
                || write_set(&out, &p.label, &set, px),
                || -> anyhow::Result<(f32, f32)> {
                    let (limits, grey) = rayon::join(
                        || -> anyhow::Result<(f32, f32)> {
                            Ok(write_lifetime_png(
                                &out.file(&format!("{}.png", named(&p.label, tau_name)))?,
                                // Multi-exponential fits show the amplitude-weighted mean,
                                // titled tau_m.
                                if set.get("tau_amp_mean_ns").is_some() {
                                    "tau_amp_mean_ns"
                                } else {
                                    tau_name
                                },
                                tau.view(),
                                intensity.view(),
                                set.mask.view(),
                                a.output.cmap,
                                a.output.tau_range,
                            )?)
                        },
                        || -> anyhow::Result<_> {
                            Ok(write_map_png(
                                &out.file(&format!("{}.png", named(&p.label, "intensity")))?,
                                "intensity",
                                intensity.view(),
                                ndarray::Array2::from_elem(intensity.dim(), true).view(),
                                Colormap::Grey,
                                Range::Percentile(0.0, 99.5),
                            )?)
                        },
                    );
                    grey?;
                    let limits = limits?;
                    let hist = lifetime_histogram(
                        tau.view(),
                        set.mask.view(),
                        intensity.view(),
                        f64::from(limits.0),
                        f64::from(limits.1),
                        100,
                    )?;
                    write_histogram_csv(
                        &out.file(&format!("{}.csv", named(&p.label, "tau_histogram")))?,
                        &hist,
                    )?;
                    write_histogram_png(
                        &out.file(&format!("{}.png", named(&p.label, "tau_histogram")))?,
                        &hist,
                        "LIFETIME (NS)",
                    )?;
                    Ok(limits)
                },
            );
            rows.extend(written?);
            let limits = limits?;
            let irf = write_irf(&out, &p, px)?;
            drop(write);
            let stats = map_stats(tau.view(), set.mask.view());
            crate::say!(
                "{}{}x{} px, {} bins of {:.4} ns (range {}..{}): {} {} median {:.3} ns (IQR {:.3}-{:.3}) over {} pixels, {} masked, {} failed; {:.3} s on {}",
                prefix(&p.label),
                p.cube.shape().1,
                p.cube.shape().0,
                p.cube.bins(),
                p.cube.bin_ns(),
                p.fit_range().0,
                p.fit_range().0 + p.fit_range().1,
                method.name(),
                tau_name,
                stats.median,
                stats.p25,
                stats.p75,
                stats.valid,
                stats.masked,
                stats.failed,
                secs,
                device_id,
            );
            images.push(serde_json::json!({
            "image": p.label, "block": meta["block"], "frame": meta["frame"], "channel": meta["channel"],
            "width": p.cube.shape().1, "height": p.cube.shape().0, "bins": p.cube.bins(),
            "bin_ns": p.cube.bin_ns(), "period_ns": p.cube.period_ns(), "offset_per_bin": p.offset,
            "tau_colour_range_ns": [limits.0, limits.1], "seconds": secs, "irf": irf,
            "device": device_id, "device_choice": reason,
            "fit_range_bins": p.fit_range(),
            "tau": stats,
        }));
        }
        let summary = serde_json::json!({
            "input": path, "format": rec.format.name(), "metadata": metadata_json(&rec),
            "method": method.name(), "model": format!("{:?}", a.model).to_lowercase(),
            "estimator": estimator.map(flim_core::Estimator::name),
            "chi2_red": estimator.map(flim_core::Estimator::goodness_of_fit),
            "device": ran_on, "binning": a.prep.circular.map_or(format!("square {}", a.prep.bin), |r| format!("circular {r}")),
            "threshold": a.prep.threshold, "range": a.prep.range, "seconds": t0.elapsed().as_secs_f64(),
            "images": images,
        });
        finish_outputs(out, &rows, summary)
    })
}

/// The recording's header fields, for summary.json.
fn metadata_json(rec: &Recording) -> serde_json::Value {
    rec.metadata
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone())))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The end of a recording's outputs: summary.csv and summary.json (`summary` plus each
/// map's statistics), then the folder committed and named.
fn finish_outputs(
    out: OutDir,
    rows: &[(String, String, MapStats)],
    mut summary: serde_json::Value,
) -> anyhow::Result<()> {
    write_summary_csv(&out.file("summary.csv")?, rows)?;
    summary["maps"] = rows
        .iter()
        .map(|(i, m, s)| serde_json::json!({"image": i, "map": m, "stats": s}))
        .collect();
    out.write_json("summary.json", &summary)?;
    let shown = out.path().display().to_string();
    out.commit()?;
    crate::say!("outputs in {shown}");
    Ok(())
}

fn run_phasor(a: &PhasorArgs, tuning: GpuTuning, device: &Device) -> anyhow::Result<()> {
    let mut prep = a.prep.options(tuning)?;
    // `--calibrate auto`: the IRF is the reference, estimated unless one is given.
    let from_irf = a.calibrate.as_deref() == Some(Path::new("auto"));
    let reference = a.calibrate.as_deref().filter(|_| !from_irf);
    if from_irf && prep.irf.is_none() {
        prep.irf = Some(IrfSource::Estimate);
    }
    let ref_tau = match (reference, a.ref_tau) {
        (Some(_), Some(t)) if t.is_finite() && t > 0.0 => t,
        (Some(_), Some(t)) => {
            bail!(
                "--ref-tau {t}: expected the reference's lifetime in ns, finite and > 0 (for an IRF or scatterer recording, lifetime 0, use --irf FILE --calibrate auto)"
            )
        }
        (Some(r), None) => bail!(
            "--calibrate {}: give the reference's lifetime with --ref-tau (ns); to calibrate from the IRF use --calibrate auto",
            r.display()
        ),
        (None, Some(_)) => bail!("--ref-tau needs a reference recording: --calibrate FILE"),
        (None, None) => 0.0,
    };
    // The reference is read like the data (binning, bins, bin width, period), all summed.
    let read_opts = a.input.read_options()?;
    let plan = PhasorPlan {
        prep,
        from_irf,
        reference,
        ref_tau,
        read_opts,
    };
    if !batch::is_batch(&a.input.paths) {
        let path = a.input.single("phasor")?;
        let rec = a.input.read(path)?;
        return phasor_compute(a, &plan, device, path, rec, &a.output.out, 1)?();
    }
    let inputs = batch::expand(&a.input.paths, FLIM_EXTENSIONS)?;
    let outs = batch::out_dirs(&a.output.out, &inputs);
    let ahead = (rayon::current_num_threads() / 2).clamp(1, 8);
    // Outputs written behind the phasors, as for `flim fit`.
    let writers = (rayon::current_num_threads() / 4).clamp(2, 4);
    crate::record::note_batch(&inputs);
    batch::run_pipelined(
        &inputs,
        |p| p.display().to_string(),
        ahead,
        writers,
        |path| Ok(read(path, &plan.read_opts)?),
        |i, path, rec| phasor_compute(a, &plan, device, path, rec, &outs[i], inputs.len() - i),
    )
}

/// What `flim phasor` does to each recording, checked once for all of a batch.
struct PhasorPlan<'a> {
    prep: PrepOptions,
    /// `--calibrate auto`: calibrate from the IRF (given or estimated).
    from_irf: bool,
    /// `--calibrate FILE`: a reference recording of lifetime `ref_tau` ns.
    reference: Option<&'a Path>,
    ref_tau: f64,
    read_opts: ReadOptions,
}

/// One image's phasor, waiting for its outputs to be written.
struct PhasorImage {
    p: Prepared,
    set: MapSet,
    omega: f64,
    range: PhasorRange,
    calibration: Option<flim_core::Calibration>,
    secs: f64,
    device: String,
}

/// `flim phasor` of one recording `rec` (read from `path`) into the folder `out_dir`:
/// the phasors now, and the writing of their outputs returned (a batch runs it on a writer
/// thread while the next recording is computed). `remaining` recordings (this one
/// included) are still to come in this process, which `auto` weighs as one job.
fn phasor_compute<'a>(
    a: &'a PhasorArgs,
    plan: &'a PhasorPlan<'a>,
    device: &Device,
    path: &'a Path,
    mut rec: Recording,
    out_dir: &Path,
    remaining: usize,
) -> anyhow::Result<impl FnOnce() -> anyhow::Result<()> + Send + 'a> {
    let PhasorPlan {
        prep,
        from_irf,
        reference,
        ref_tau,
        read_opts,
    } = plan;
    let (from_irf, reference, ref_tau) = (*from_irf, *reference, *ref_tau);
    let px = pixel_um(&rec);
    let mut inputs = input_files(path, &a.prep);
    inputs.extend(reference);
    let maps = flim_core::Method::Phasor.map_names(&flim_core::MethodOptions::default(), false);
    let mut extra = vec!["phasor.png".to_string(), "tau_phase_ns.png".to_string()];
    if from_irf && a.prep.irf.is_none() {
        // The estimated IRF is written like a given one.
        extra.push("irf.csv".into());
    }
    let out = OutDir::create(
        out_dir,
        a.output.force,
        &inputs,
        planned_files(&rec, &a.prep, &maps, &extra),
    )?;
    let mut ran_on = device.info().id.clone();
    let mut computed = Vec::new();
    let bar = progress(rec.images.len(), "images");
    // Each image's cube goes to `prepare_cube` as it is (no copy).
    let labels: Vec<String> = rec.images.iter().map(|i| i.label(&rec)).collect();
    let taken = std::mem::take(&mut rec.images);
    for (image, label) in taken.into_iter().zip(labels) {
        let mut p = prepare_cube(image.cube, label, prep, RangeSpec::Period)
            .with_context(|| match prep.irf {
                Some(IrfSource::Estimate) => "preparing the image (binning, range, offset, IRF estimated from the data; where that fails, give a measured IRF with --irf FILE or a reference with --calibrate FILE --ref-tau NS)",
                _ => "preparing the image (binning, range, offset, IRF)",
            })?;
        let omega = phasor_omega(&p, a.harmonic);
        let range = PhasorRange::of(&p);
        if let Some(w) = range.warning() {
            eprintln!("warning: {}{w}", prefix(&p.label));
        }
        // Calibration reference: a recording of known lifetime, else the IRF (lifetime 0).
        let calibration = phasor_calibration(&p, reference, read_opts, ref_tau, a.harmonic)
            .with_context(|| match reference {
                Some(path) => format!("calibration reference {}", path.display()),
                None => "calibration from the IRF".into(),
            })?;
        if calibration.is_none() {
            eprintln!(
                "warning: {}the phasor is not calibrated (the instrument's phase delay and modulation are in g and s): give --calibrate auto (from the IRF) or --calibrate REF --ref-tau NS",
                prefix(&p.label)
            );
        }
        p.analysis = p.analysis.with_harmonic(a.harmonic);
        if let Some(c) = calibration {
            p.analysis = p.analysis.with_calibration(c);
        }
        let phasor = flim_core::MethodOptions::default();
        let choice = crate::device_arg::choose(
            device,
            flim_core::job_estimate(&p, flim_core::Method::Phasor, &phasor).times(remaining),
        );
        let device = &choice.device;
        ran_on.clone_from(&device.info().id);
        let (set, info) = flim_core::run_method(&p, flim_core::Method::Phasor, &phasor, device)?;
        crate::record::note_library(&info.provenance);
        computed.push(PhasorImage {
            p,
            set,
            omega,
            range,
            calibration,
            secs: info.elapsed.as_secs_f64(),
            device: device.info().id.clone(),
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    // Where a calibration came from (a phasor without one says so).
    let source = if reference.is_some() {
        "reference"
    } else {
        "irf"
    };
    Ok(move || {
        let mut rows = Vec::new();
        let mut images = Vec::new();
        for PhasorImage {
            p,
            set,
            omega,
            range,
            calibration,
            secs,
            device: device_id,
        } in computed
        {
            let _write = tracing::debug_span!("write_outputs").entered();
            let g = set.get("g").expect("g");
            let s = set.get("s").expect("s");
            let tau = set.get("tau_phase_ns").expect("phase lifetime");
            let intensity = set.get("intensity").expect("intensity");
            // The maps' TIFFs and the figures are encoded in parallel.
            let (written, figures) = rayon::join(
                || write_set(&out, &p.label, &set, px),
                || -> anyhow::Result<(usize, (f32, f32))> {
                    let plotted = write_phasor_png(
                        &out.file(&format!("{}.png", named(&p.label, "phasor")))?,
                        g.view(),
                        s.view(),
                        set.mask.view(),
                        omega,
                    )?;
                    let limits = write_lifetime_png(
                        &out.file(&format!("{}.png", named(&p.label, "tau_phase_ns")))?,
                        "tau_phase_ns",
                        tau.view(),
                        intensity.view(),
                        set.mask.view(),
                        a.output.cmap,
                        a.output.tau_range,
                    )?;
                    Ok((plotted, limits))
                },
            );
            rows.extend(written?);
            let (plotted, limits) = figures?;
            let irf = write_irf(&out, &p, px)?;
            let gs = map_stats(g.view(), set.mask.view());
            let ss = map_stats(s.view(), set.mask.view());
            crate::say!(
                "{}phasor at {:.2} MHz (harmonic {}) over {}: median g {:.3}, s {:.3}, phase lifetime {:.3} ns; {} pixels plotted{}; {:.3} s on {}",
                prefix(&p.label),
                omega / (2.0 * std::f64::consts::PI) * 1e3,
                a.harmonic,
                range,
                gs.median,
                ss.median,
                map_stats(tau.view(), set.mask.view()).median,
                plotted,
                calibration.map_or(", uncalibrated".into(), |c| format!(
                    ", calibrated from the {} (phase {:.4} rad, modulation x{:.4})",
                    if source == "irf" { "IRF" } else { "reference" },
                    c.phase,
                    c.modulation
                )),
                secs,
                device_id,
            );
            images.push(serde_json::json!({
                "image": p.label, "omega_rad_per_ns": omega, "harmonic": a.harmonic,
                "range_bins": p.fit_range(), "range_ns": [range.start_ns, range.end_ns],
                "period_ns": range.period_ns, "bins_in_period": range.bins_in_period,
                "range": range.to_string(),
                "calibration": match calibration {
                    None => serde_json::json!({"source": "none", "why": "no --calibrate and no --irf: g and s include the instrument's phase delay and modulation"}),
                    Some(c) => serde_json::json!({
                        "source": source,
                        "reference": match (reference, &prep.irf) {
                            (Some(r), _) => r.display().to_string(),
                            (None, Some(IrfSource::File(f))) => f.display().to_string(),
                            _ => "IRF estimated from the data".into(),
                        },
                        "ref_tau_ns": if source == "reference" { ref_tau } else { 0.0 },
                        "frequency_mhz": omega / (2.0 * std::f64::consts::PI) * 1e3,
                        "phase_rad": c.phase, "modulation": c.modulation,
                    }),
                },
                "seconds": secs, "device": device_id,
                "g": gs, "s": ss, "tau_colour_range_ns": [limits.0, limits.1], "irf": irf,
            }));
        }
        let summary = serde_json::json!({
            "input": path, "format": rec.format.name(), "device": ran_on,
            "metadata": metadata_json(&rec), "images": images,
        });
        finish_outputs(out, &rows, summary)
    })
}

/// The bins a phasor used, against the laser period it assumes (console and summary).
struct PhasorRange {
    first: usize,
    end: usize,
    start_ns: f64,
    end_ns: f64,
    period_ns: f64,
    /// The bins whose start lies within one period (the default range's length).
    bins_in_period: usize,
}

impl PhasorRange {
    fn of(p: &Prepared) -> Self {
        let (first, m) = p.fit_range();
        let (h, period_ns) = (p.cube.bin_ns(), p.cube.period_ns());
        let total = p.cube.bins();
        let bins_in_period = flim_core::FitRange::one_period(total, h, period_ns)
            .ok()
            .flatten()
            .map_or(total, |r| r.bins);
        Self {
            first,
            end: first + m,
            start_ns: first as f64 * h,
            end_ns: (first + m) as f64 * h,
            period_ns,
            bins_in_period,
        }
    }

    /// A range that runs past one period (e.g. `--range all` on a window longer than the
    /// period): the phasor's frequency no longer matches the window.
    fn warning(&self) -> Option<String> {
        (self.end - self.first > self.bins_in_period).then(|| {
            format!(
                "the phasor's range, bins {}..{} ({:.3} ns), is longer than one laser period ({:.3} ns): at the frequency 1 / period its later bins count as the start of the next period; the default, --range period, stops at the period (bins 0..{})",
                self.first,
                self.end,
                self.end_ns - self.start_ns,
                self.period_ns,
                self.bins_in_period
            )
        })
    }
}

impl std::fmt::Display for PhasorRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bins {}..{} ({:.3}-{:.3} ns; laser period {:.3} ns)",
            self.first, self.end, self.start_ns, self.end_ns, self.period_ns
        )
    }
}

fn run_convert(a: &ConvertArgs) -> anyhow::Result<()> {
    let ext = match a.to.as_str() {
        "npy" => "npy",
        "tif" | "tiff" => "tif",
        other => bail!("--to {other}: expected npy or tiff"),
    };
    // Checked once, before any file is read.
    if let Some(spec) = &a.range {
        parse_range(spec)?;
    }
    if !batch::is_batch(&a.input.paths) {
        let path = a.input.single("convert")?;
        let rec = a.input.read(path)?;
        return convert_one(a, ext, path, &rec, &a.out);
    }
    let inputs = batch::expand(&a.input.paths, FLIM_EXTENSIONS)?;
    let outs = batch::out_dirs(&a.out, &inputs);
    let read_opts = a.input.read_options()?;
    let ahead = (rayon::current_num_threads() / 2).clamp(1, 8);
    batch::run(
        &inputs,
        ahead,
        |path| Ok(read(path, &read_opts)?),
        |i, path, rec| convert_one(a, ext, path, &rec, &outs[i]),
    )
}

/// `flim convert` of one recording `rec` (read from `path`) into the folder `out_dir`: a
/// `.npy` or `.tif` cube per image, named after the recording.
fn convert_one(
    a: &ConvertArgs,
    ext: &str,
    path: &Path,
    rec: &Recording,
    out_dir: &Path,
) -> anyhow::Result<()> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("cube")
        .to_string();
    let file_name = |label: &str| {
        if label.is_empty() {
            format!("{stem}.{ext}")
        } else {
            format!("{stem}_{label}.{ext}")
        }
    };
    let out = OutDir::create(
        out_dir,
        a.force,
        &[path],
        rec.images.iter().map(|i| file_name(&i.label(rec))),
    )?;
    for image in &rec.images {
        let mut cube = bin_spatial(&image.cube, Binning::Square(a.bin))?;
        if let Some(spec) = &a.range
            && let Some(range) = parse_range(spec)?.resolve(&cube)?
        {
            cube = range.crop(&cube)?;
        }
        let name = file_name(&image.label(rec));
        let path = out.file(&name)?;
        if ext == "npy" {
            write_npy(&path, &cube)?;
        } else {
            write_tiff(&path, &cube)?;
        }
        let (h, w) = cube.shape();
        crate::say!(
            "{}: {w}x{h} px x {} bins of {:.5} ns ({}), period {:.4} ns, {:.0} photons",
            out.path().join(&name).display(),
            cube.bins(),
            cube.bin_ns(),
            cube.dtype(),
            cube.period_ns(),
            cube.photons().sum()
        );
    }
    out.commit()
}

/// This modality's part of `biogpu demo` ([`flim_core::sim::demo`]): the paper's phantoms
/// analysed on `device`, checked against the CPU reference and the simulated truth; maps and
/// lifetime images under `out/flim`.
pub fn demo(out: &Path, device: &Device) -> anyhow::Result<bool> {
    crate::say!("{}", flim_core::sim::demo(out, device)?);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use flim_core::sim::mono_exponential;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn run_cli(line: &[&str]) -> anyhow::Result<()> {
        let cli = Cli::try_parse_from(std::iter::once("flim").chain(line.iter().copied()))?;
        run(cli.args, &Device::cpu())
    }

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("biogpu-flim-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// A folder of recordings in one run: each into its own folder, the bad one reported
    /// and skipped, the command failing at the end (fit and phasor); convert takes one.
    #[test]
    fn fit_takes_a_folder_and_skips_bad_files() {
        let dir = tmp("batch");
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        for (name, tau) in [("a.sdt", 2.0), ("b.sdt", 4.0)] {
            let cube = mono_exponential(&[tau], 8, 8, 128, 0.1, 12.8, 4000.0, 5).unwrap();
            flim_core::io::write_sdt(&data.join(name), &[vec![cube]], true).unwrap();
        }
        std::fs::write(data.join("broken.sdt"), b"not an sdt").unwrap();
        std::fs::write(data.join("notes.txt"), b"ignored").unwrap();
        let out = dir.join("out");
        let (d, o) = (data.to_str().unwrap(), out.to_str().unwrap());
        let e = run_cli(&["fit", d, "--method", "cmm", "--range", "all", "--out", o]).unwrap_err();
        assert!(e.to_string().starts_with("1 of 3 inputs failed"), "{e}");
        assert!(e.to_string().contains("broken.sdt"), "{e}");
        for (name, tau) in [("a", 2.0), ("b", 4.0)] {
            let summary: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(out.join(name).join("summary.json")).unwrap(),
            )
            .unwrap();
            let median = summary["images"][0]["tau"]["median"].as_f64().unwrap();
            assert!((median - tau).abs() < 0.3, "{name}: {median} vs {tau}");
        }
        assert!(!out.join("broken").exists(), "no output for the bad file");
        // phasor too: each recording's phase lifetime in its own folder.
        let phasors = dir.join("phasors");
        let p = phasors.to_str().unwrap();
        let e = run_cli(&["phasor", d, "--range", "all", "--out", p]).unwrap_err();
        assert!(e.to_string().starts_with("1 of 3 inputs failed"), "{e}");
        for (name, tau) in [("a", 2.0), ("b", 4.0)] {
            let summary: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(phasors.join(name).join("summary.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(
                summary["input"],
                data.join(format!("{name}.sdt")).display().to_string()
            );
            let median = summary["maps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["map"] == "tau_phase_ns")
                .unwrap()["stats"]["median"]
                .as_f64()
                .unwrap();
            assert!(
                (median - tau).abs() < 0.3,
                "{name}: phase lifetime {median} vs {tau}"
            );
        }
        assert!(
            !phasors.join("broken").exists(),
            "no output for the bad file"
        );
    }

    #[test]
    fn fit_phasor_and_convert_end_to_end_on_an_sdt_phantom() {
        let dir = tmp("e2e");
        let input = dir.join("bars.sdt");
        let cube = mono_exponential(&[2.0, 4.0], 16, 32, 128, 0.1, 12.8, 4000.0, 3).unwrap();
        flim_core::io::write_sdt(&input, &[vec![cube]], true).unwrap();
        let out = dir.join("fit");
        let (i, o) = (input.to_str().unwrap(), out.to_str().unwrap());
        run_cli(&["fit", i, "--method", "cmm", "--range", "all", "--out", o]).unwrap();
        for f in [
            "tau_cmm_ns.tif",
            "tau_cmm_ns.png",
            "intensity.tif",
            "tau_histogram.csv",
            "summary.json",
            "summary.csv",
        ] {
            assert!(out.join(f).exists(), "{f}");
        }
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let median = summary["images"][0]["tau"]["median"].as_f64().unwrap();
        assert!(
            (median - 3.0).abs() < 1.05,
            "median of 2 and 4 ns bars: {median}"
        );
        assert_eq!(summary["images"][0]["tau"]["valid"], 512);
        // Outputs are never overwritten without --force, inputs never.
        let again = run_cli(&["fit", i, "--method", "cmm", "--out", o]).unwrap_err();
        assert!(again.to_string().contains("--force"), "{again}");
        run_cli(&["fit", i, "--method", "cmm", "--out", o, "--force"]).unwrap();
        let conv = dir.join("conv");
        run_cli(&[
            "convert",
            i,
            "--to",
            "npy",
            "--bin",
            "1",
            "--out",
            conv.to_str().unwrap(),
        ])
        .unwrap();
        let rec = read(
            &conv.join("bars.npy"),
            &ReadOptions::default().with_bin_ns(0.1),
        )
        .unwrap();
        assert_eq!(
            (rec.images[0].cube.shape(), rec.images[0].cube.dtype()),
            ((16, 32), "u32")
        );
        let ph = dir.join("ph");
        run_cli(&["phasor", i, "--out", ph.to_str().unwrap()]).unwrap();
        assert!(ph.join("phasor.png").exists() && ph.join("g.tif").exists());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Median of the main lifetime map and the number of failed pixels from summary.json.
    fn summary_tau(out: &Path) -> (f64, u64) {
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let tau = &summary["images"][0]["tau"];
        (
            tau["median"].as_f64().unwrap(),
            tau["failed"].as_u64().unwrap(),
        )
    }

    #[test]
    fn fitting_methods_recover_lifetimes_end_to_end() {
        let dir = tmp("fits");
        let mono = dir.join("mono.sdt");
        let cube = mono_exponential(&[2.0], 6, 6, 128, 0.1, 12.8, 5000.0, 4).unwrap();
        flim_core::io::write_sdt(&mono, &[vec![cube]], false).unwrap();
        let m = mono.to_str().unwrap();
        for (method, extra, estimator) in [
            ("lsq", &[][..], "lsq-model"),
            (
                "lsq",
                &["--weights", "pearson", "--fit-offset"][..],
                "lsq-pearson",
            ),
            ("mle", &[][..], "mle"),
            ("global", &["--segments", "12"][..], "mle"),
        ] {
            let out = dir.join(format!("{method}{}", extra.len()));
            let mut line = vec!["fit", m, "--method", method, "--out", out.to_str().unwrap()];
            line.extend_from_slice(extra);
            run_cli(&line).unwrap();
            let (median, failed) = summary_tau(&out);
            assert!(
                (median - 2.0).abs() < 0.1 && failed == 0,
                "{method} {extra:?}: median {median}, {failed} failed"
            );
            for f in ["a1", "chi2_red", "iterations", "status", "intensity"] {
                assert!(out.join(format!("{f}.tif")).exists(), "{method}: {f}");
            }
            assert!(out.join(format!("tau_{method}_ns.png")).exists());
            assert_eq!(
                out.join("offset.tif").exists(),
                extra.contains(&"--fit-offset")
            );
            // The summary names the estimator and what chi2_red holds.
            let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["estimator"], estimator, "{method} {extra:?}");
            let gof = v["chi2_red"].as_str().unwrap();
            let want = if estimator == "mle" {
                "deviance"
            } else {
                "Pearson"
            };
            assert!(gof.contains(want), "{method} {extra:?}: {gof}");
        }
        // Bi-exponential: MLE per pixel and BCMM (donor known: BCMM1 and PM).
        let bi = dir.join("bi.sdt");
        let sim = flim_core::sim::DecaySim::new(128, 0.1, 20_000.0)
            .unwrap()
            .with_seed(5);
        let cube = flim_core::sim::bi_exponential(0.8, 2.5, 4, 6, &sim).unwrap();
        flim_core::io::write_sdt(&bi, &[vec![cube]], false).unwrap();
        let b = bi.to_str().unwrap();
        let out = dir.join("mle_bi");
        let o = out.to_str().unwrap();
        run_cli(&["fit", b, "--method", "mle", "--model", "bi", "--out", o]).unwrap();
        for f in [
            "tau1_ns",
            "tau2_ns",
            "f1",
            "f2",
            "tau_int_mean_ns",
            "chi2_red",
        ] {
            assert!(out.join(format!("{f}.tif")).exists(), "{f}");
        }
        let out = dir.join("bcmm");
        let o = out.to_str().unwrap();
        run_cli(&[
            "fit",
            b,
            "--method",
            "bcmm",
            "--donor-tau",
            "2.5",
            "--out",
            o,
        ])
        .unwrap();
        for f in [
            "tau_avg_bcmm_ns",
            "tau_f_bcmm_ns",
            "f_d_bcmm",
            "tau_f_pm_ns",
        ] {
            assert!(out.join(format!("{f}.tif")).exists(), "{f}");
        }
        let (median, _) = summary_tau(&out);
        assert!(median > 0.8 && median < 2.5, "BCMM mean lifetime {median}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn fitting_options_are_checked() {
        let dir = tmp("methods");
        let input = dir.join("x.sdt");
        let cube = mono_exponential(&[2.0], 4, 4, 64, 0.2, 12.8, 1000.0, 1).unwrap();
        flim_core::io::write_sdt(&input, &[vec![cube]], false).unwrap();
        let i = input.to_str().unwrap();
        let o = dir.join("o");
        let o = o.to_str().unwrap();
        let bad = |args: &[&str]| format!("{:#}", run_cli(args).unwrap_err());
        let e = bad(&["fit", i, "--method", "mle", "--model", "quad", "--out", o]);
        assert!(e.contains("quad") && e.contains("--model"), "{e}");
        let e = bad(&[
            "fit",
            i,
            "--method",
            "mle",
            "--model",
            "tri",
            "--fit-offset",
            "--range",
            "0:6",
            "--out",
            o,
            "--force",
        ]);
        assert!(e.contains("fit range") && e.contains("bins"), "{e}");
        let e = bad(&[
            "fit",
            i,
            "--method",
            "global",
            "--segments",
            "0",
            "--out",
            o,
            "--force",
        ]);
        assert!(e.contains("--segments"), "{e}");
        let e = bad(&[
            "fit", i, "--method", "bcmm", "--model", "tri", "--out", o, "--force",
        ]);
        assert!(e.contains("bcmm"), "{e}");
        let e = bad(&[
            "fit",
            i,
            "--method",
            "bcmm",
            "--donor-tau=-1",
            "--out",
            o,
            "--force",
        ]);
        assert!(e.contains("--donor-tau"), "{e}");
        let e = bad(&[
            "fit",
            i,
            "--method",
            "lsq",
            "--max-iterations",
            "0",
            "--out",
            o,
            "--force",
        ]);
        assert!(e.contains("iterations"), "{e}");
        assert!(bad(&["fit", i, "--range", "5", "--out", o]).contains("A:B"));
        assert!(bad(&["fit", i, "--range", "1ns:20", "--out", o]).contains("both"));
        assert!(bad(&["fit", i, "--frames", "x", "--out", o]).contains("--frames"));
        assert!(bad(&["fit", i, "--irf-shift", "auto", "--out", o]).contains("--irf"));
        assert!(bad(&["convert", i, "--to", "png", "--out", o]).contains("npy or tiff"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
