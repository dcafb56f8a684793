//! `biogpu flim`: fluorescence lifetime imaging (issue 4): `fit` (lifetime maps), `phasor`
//! (phasor coordinates and plot) and `convert` (any reader to .npy or TIFF), with the
//! preprocessing of `flim_core::preprocess` and the outputs of `flim_core::output`.

use super::flim_fit::{FitInput, FitMethodArgs, run_fit_method};
use super::output::OutDir;
use anyhow::{Context, bail, ensure};
use flim_core::io::{AnyCube, Image, ReadOptions, Recording, read, write_npy, write_tiff};
use flim_core::output::{
    MapSet, MapStats, lifetime_histogram, map_stats, write_histogram_csv, write_histogram_png,
    write_lifetime_png, write_map_png, write_map_tiff, write_phasor_png, write_summary_csv,
};
use flim_core::preprocess::{
    Binning, FitRange, Irf, bin_spatial, estimate_offset, photon_mask, rise_shift_map,
};
use flim_core::{Analysis, Calibration};
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

/// Lifetime methods. Non-iterative ones run here, the fits in [`super::flim_fit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// Integral equation method (Simpson-weighted; Wu et al. 2016).
    Iem,
    /// Centre of mass, window-corrected.
    Cmm,
    /// Rapid lifetime determination, two gates.
    Rld,
    /// Phase lifetime from the phasor.
    Phasor,
    /// Bi-exponential centre of mass for FRET (Wu et al. 2016; --donor-tau for BCMM1 and
    /// the phasor method, else BCMM2).
    Bcmm,
    /// Levenberg-Marquardt least squares (--weights), IRF reconvolution with --irf.
    Lsq,
    /// Poisson maximum likelihood by Levenberg-Marquardt, IRF reconvolution with --irf.
    Mle,
    /// Global analysis: lifetimes shared by each segment (--segments), amplitudes per pixel.
    Global,
}

impl Method {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::Iem => "iem",
            Method::Cmm => "cmm",
            Method::Rld => "rld",
            Method::Phasor => "phasor",
            Method::Bcmm => "bcmm",
            Method::Lsq => "lsq",
            Method::Mle => "mle",
            Method::Global => "global",
        }
    }
}

/// Decay models of the fitting methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Model {
    /// One exponential.
    Mono,
    /// Two exponentials.
    Bi,
    /// Three exponentials.
    Tri,
}

/// Input file and which part of it to read.
#[derive(Debug, clap::Args)]
struct Input {
    /// TCSPC data: Becker & Hickl .sdt, PicoQuant .ptu (T3), multi-page TIFF (pages = time
    /// bins) or .npy ((y, x, bin) or (frame, y, x, bin)).
    #[arg(value_name = "INPUT")]
    path: PathBuf,
    /// Bin width in ns (required for TIFF and .npy; overrides .sdt/.ptu headers).
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
    /// PicoQuant: merge this many TCSPC channels into one time bin.
    #[arg(long, default_value_t = 1)]
    binning: usize,
    /// PicoQuant: number of time bins (after --binning); default: up to the latest photon.
    #[arg(long)]
    bins: Option<usize>,
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

    /// Read with a spinner (PicoQuant files are histogrammed while they are read).
    fn read(&self) -> anyhow::Result<Recording> {
        let spinner =
            ProgressBar::new_spinner().with_message(format!("reading {}", self.path.display()));
        spinner.enable_steady_tick(std::time::Duration::from_millis(120));
        let rec = read(&self.path, &self.read_options()?);
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
    /// of the summed decay to the end) or `all`. Default: `peak` for fit (RLD, IEM and CMM
    /// assume the decay starts at the range's first bin), `all` for phasor (one laser period).
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
    /// Calibrate with a reference recording of known lifetime (--ref-tau); with --irf
    /// instead, the IRF is the reference (lifetime 0).
    #[arg(long)]
    calibrate: Option<PathBuf>,
    /// Lifetime of the calibration reference in ns.
    #[arg(long, default_value_t = 0.0)]
    ref_tau: f64,
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
    match args.command {
        Command::Fit(a) => run_fit(&a, device),
        Command::Phasor(a) => run_phasor(&a, device),
        Command::Convert(a) => run_convert(&a),
    }
}

/// One image after preprocessing, ready for a method.
struct Prepared {
    label: String,
    cube: AnyCube,
    analysis: Analysis,
    range: Option<FitRange>,
    offset: f64,
    threshold: f64,
    irf: Option<Irf>,
    irf_shift_ns: Option<f64>,
    shift_map: Option<ndarray::Array2<f32>>,
}

fn parse_range(spec: &str, cube: &AnyCube) -> anyhow::Result<FitRange> {
    let (a, b) = spec
        .split_once(':')
        .with_context(|| format!("--range {spec}: expected A:B (bins) or 1.2ns:10ns"))?;
    let ns = |s: &str| s.trim().strip_suffix("ns").map(|v| v.trim().parse::<f64>());
    Ok(match (ns(a), ns(b)) {
        (Some(Ok(x)), Some(Ok(y))) => FitRange::from_ns(x, y, cube.bin_ns(), cube.bins())?,
        (None, None) => FitRange::from_bins(
            a.trim()
                .parse()
                .with_context(|| format!("--range {spec}"))?,
            b.trim()
                .parse()
                .with_context(|| format!("--range {spec}"))?,
            cube.bins(),
        )?,
        _ => bail!("--range {spec}: give both ends in bins (10:200) or both in ns (1.2ns:10ns)"),
    })
}

fn prepare(
    image: &Image,
    rec: &Recording,
    prep: &Prep,
    default_range: &str,
) -> anyhow::Result<Prepared> {
    let kernel = match prep.circular {
        Some(r) => Binning::Circular(r),
        None => Binning::Square(prep.bin),
    };
    let cube = bin_spatial(&image.cube, kernel)?;
    let mut analysis = Analysis::default().with_threshold(prep.threshold);
    let range = match prep.range.as_deref().unwrap_or(default_range) {
        "all" => None,
        "peak" => Some(FitRange::from_peak(&cube)?),
        spec => Some(parse_range(spec, &cube)?),
    };
    if let Some(r) = range {
        analysis = r.apply(analysis);
    }
    let offset = match prep.offset.as_str() {
        "auto" => estimate_offset(&cube)?.counts_per_bin,
        v => v
            .parse::<f64>()
            .with_context(|| format!("--offset {v}: expected a number or auto"))?,
    };
    analysis = analysis.with_offset(offset);
    let irf = match prep.irf.as_deref() {
        None => None,
        Some("auto") => Some(Irf::estimate(&cube).context("estimating the IRF from the data")?),
        Some(file) => Some(
            Irf::from_file(Path::new(file), Some(cube.bin_ns()))
                .with_context(|| format!("reading the IRF {file}"))?
                .fitted_to(cube.bins())?,
        ),
    };
    let (irf_shift_ns, shift_map) = match (prep.irf_shift.as_deref(), &irf) {
        (None, _) => (None, None),
        (Some(_), None) => bail!("--irf-shift needs --irf"),
        (Some("auto"), Some(i)) => (Some(i.global_shift(&cube, 2.0)?), None),
        (Some("pixel"), Some(i)) => {
            let mask = photon_mask(&cube, prep.threshold);
            (
                Some(i.global_shift(&cube, 2.0)?),
                Some(rise_shift_map(&cube, &mask)?),
            )
        }
        (Some(v), Some(_)) => (
            Some(v.parse::<f64>().with_context(|| {
                format!("--irf-shift {v}: expected auto, pixel or a number of ns")
            })?),
            None,
        ),
    };
    let irf = match (irf, irf_shift_ns) {
        (Some(i), Some(s)) => Some(i.shifted(s)),
        (i, _) => i,
    };
    Ok(Prepared {
        label: image.label(rec),
        cube,
        analysis,
        range,
        offset,
        threshold: prep.threshold,
        irf,
        irf_shift_ns,
        shift_map,
    })
}

/// THE DISPATCH of `biogpu flim fit`: every `--method` goes through here. The non-iterative
/// methods run on `device` (GPU kernel or CPU reference); the fitting methods (BCMM, least
/// squares, maximum likelihood, global analysis) in [`super::flim_fit`], with the
/// preprocessed cube, range, threshold, offset and shifted IRF (a per-pixel shift map makes
/// the shift a fitted parameter). The result's first map is the main lifetime
/// (`tau_<method>_ns`); intensity, amplitudes, fractions, mean lifetimes, chi^2, iterations
/// and status follow under their own names and are written as TIFF maps too.
fn run_method(
    method: Method,
    model: Model,
    fit: &FitMethodArgs,
    p: &Prepared,
    device: &Device,
) -> anyhow::Result<MapSet> {
    let plane = match method {
        Method::Iem => "tau_iem_ns",
        Method::Cmm => "tau_cmm_ns",
        Method::Rld => "tau_rld_ns",
        Method::Phasor => "tau_phase_ns",
        Method::Bcmm | Method::Lsq | Method::Mle | Method::Global => {
            let input = FitInput {
                cube: &p.cube,
                analysis: &p.analysis,
                range: p.range,
                threshold: p.threshold,
                offset: p.offset,
                irf: p.irf.as_ref(),
                per_pixel_shift: p.shift_map.is_some(),
            };
            return run_fit_method(method, model, fit, &input, device);
        }
    };
    let maps = p.cube.analyse_on(&p.analysis, device)?;
    let all = MapSet::from_lifetimes(&maps);
    let mut out = MapSet {
        maps: Vec::new(),
        mask: all.mask.clone(),
    };
    for name in [plane, "intensity"] {
        out.push(
            name,
            all.get(name)
                .expect("a plane of the non-iterative maps")
                .clone(),
        )?;
    }
    if method == Method::Phasor {
        for name in ["g", "s", "tau_mod_ns"] {
            out.push(name, all.get(name).expect("phasor planes").clone())?;
        }
    }
    Ok(out)
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

/// Every map as a float TIFF (masked pixels NaN), the stats of each for the summary.
fn write_set(
    out: &OutDir,
    label: &str,
    set: &MapSet,
    rows: &mut Vec<(String, String, MapStats)>,
) -> anyhow::Result<()> {
    for (name, _) in &set.maps {
        let map = if name == "intensity" {
            set.get(name).expect("present").clone()
        } else {
            set.masked(name).expect("present")
        };
        write_map_tiff(
            &out.file(&format!("{}.tif", named(label, name)))?,
            map.view(),
        )?;
        rows.push((
            if label.is_empty() {
                "all".into()
            } else {
                label.to_string()
            },
            name.clone(),
            map_stats(map.view(), set.mask.view()),
        ));
    }
    Ok(())
}

fn write_irf(out: &OutDir, p: &Prepared) -> anyhow::Result<Option<serde_json::Value>> {
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
            map.view(),
        )?;
    }
    Ok(Some(serde_json::json!({
        "centroid_ns": irf.centroid_ns(), "fwhm_ns": irf.fwhm_ns(), "shift_ns": p.irf_shift_ns,
    })))
}

fn run_fit(a: &FitArgs, device: &Device) -> anyhow::Result<()> {
    let rec = a.input.read()?;
    let out = OutDir::create(&a.output.out, a.output.force, &[&a.input.path])?;
    let t0 = Instant::now();
    let bar = progress(rec.images.len(), "images");
    let mut rows = Vec::new();
    let mut images = Vec::new();
    for image in &rec.images {
        // Reconvolution models the rise: fit the whole window unless told otherwise.
        let reconvolved =
            a.prep.irf.is_some() && matches!(a.method, Method::Lsq | Method::Mle | Method::Global);
        let p = prepare(
            image,
            &rec,
            &a.prep,
            if reconvolved { "all" } else { "peak" },
        )?;
        let t = Instant::now();
        let set = run_method(a.method, a.model, &a.fit, &p, device)?;
        let secs = t.elapsed().as_secs_f64();
        write_set(&out, &p.label, &set, &mut rows)?;
        let (tau_name, tau) = &set.maps[0];
        let intensity = set.get("intensity").expect("intensity map");
        let limits = write_lifetime_png(
            &out.file(&format!("{}.png", named(&p.label, tau_name)))?,
            tau.view(),
            intensity.view(),
            set.mask.view(),
            a.output.cmap,
            a.output.tau_range,
        )?;
        write_map_png(
            &out.file(&format!("{}.png", named(&p.label, "intensity")))?,
            intensity.view(),
            set.mask.view(),
            Colormap::Grey,
            Range::Percentile(0.0, 99.5),
        )?;
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
        let irf = write_irf(&out, &p)?;
        let stats = map_stats(tau.view(), set.mask.view());
        println!(
            "{}{}x{} px, {} bins of {:.4} ns (range {}..{}): {} {} median {:.3} ns (IQR {:.3}-{:.3}) over {} pixels, {} masked, {} failed; {:.3} s on {}",
            if p.label.is_empty() {
                String::new()
            } else {
                format!("{}: ", p.label)
            },
            p.cube.shape().1,
            p.cube.shape().0,
            p.cube.bins(),
            p.cube.bin_ns(),
            range_of(&p).0,
            range_of(&p).0 + range_of(&p).1,
            a.method.name(),
            tau_name,
            stats.median,
            stats.p25,
            stats.p75,
            stats.valid,
            stats.masked,
            stats.failed,
            secs,
            device.info().id,
        );
        images.push(serde_json::json!({
            "image": p.label, "block": image.block, "frame": image.frame, "channel": image.channel,
            "width": p.cube.shape().1, "height": p.cube.shape().0, "bins": p.cube.bins(),
            "bin_ns": p.cube.bin_ns(), "period_ns": p.cube.period_ns(), "offset_per_bin": p.offset,
            "tau_colour_range_ns": [limits.0, limits.1], "seconds": secs, "irf": irf,
            "fit_range_bins": range_of(&p),
            "tau": stats,
        }));
        bar.inc(1);
    }
    bar.finish_and_clear();
    write_summary_csv(&out.file("summary.csv")?, &rows)?;
    out.write_json(
        "summary.json",
        &serde_json::json!({
            "input": a.input.path, "format": rec.format.name(),
            "metadata": rec.metadata.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone()))).collect::<serde_json::Map<_, _>>(),
            "method": a.method.name(), "model": format!("{:?}", a.model).to_lowercase(),
            "device": device.info().id, "binning": a.prep.circular.map_or(format!("square {}", a.prep.bin), |r| format!("circular {r}")),
            "threshold": a.prep.threshold, "range": a.prep.range, "seconds": t0.elapsed().as_secs_f64(),
            "images": images,
            "maps": rows.iter().map(|(i, m, s)| serde_json::json!({"image": i, "map": m, "stats": s})).collect::<Vec<_>>(),
        }),
    )?;
    println!("outputs in {}", out.path().display());
    Ok(())
}

/// The phasor (g, s) of a decay with the conventions of `flim_core::analyse`: bins
/// `first..first + m`, bin centres at `(j + 1/2) h` from the range start.
fn decay_phasor(decay: &[f64], first: usize, m: usize, h: f64, omega: f64) -> (f64, f64) {
    let (mut n, mut gc, mut gs) = (0.0, 0.0, 0.0);
    for (j, &v) in decay.iter().skip(first).take(m).enumerate() {
        let t = (j as f64 + 0.5) * h;
        n += v;
        gc += v * (omega * t).cos();
        gs += v * (omega * t).sin();
    }
    (gc / n, gs / n)
}

fn run_phasor(a: &PhasorArgs, device: &Device) -> anyhow::Result<()> {
    let rec = a.input.read()?;
    let mut inputs = vec![a.input.path.as_path()];
    inputs.extend(a.calibrate.as_deref());
    let out = OutDir::create(&a.output.out, a.output.force, &inputs)?;
    let mut rows = Vec::new();
    let mut images = Vec::new();
    let bar = progress(rec.images.len(), "images");
    for image in &rec.images {
        let mut p = prepare(image, &rec, &a.prep, "all")?;
        let omega = 2.0 * std::f64::consts::PI * f64::from(a.harmonic) / p.cube.period_ns();
        let (first, m) = range_of(&p);
        // Calibration reference: a recording of known lifetime, else the IRF (lifetime 0).
        let reference = match (&a.calibrate, &p.irf) {
            (Some(path), _) => {
                let r = read(path, &ReadOptions::default().with_sum_frames(true))
                    .with_context(|| format!("calibration reference {}", path.display()))?;
                let cube = AnyCube::sum(&r.images.iter().map(|i| &i.cube).collect::<Vec<_>>())?;
                ensure!(
                    cube.bins() == p.cube.bins()
                        && (cube.bin_ns() - p.cube.bin_ns()).abs() < 1e-6 * p.cube.bin_ns(),
                    "the calibration reference has {} bins of {} ns, the data {} of {} ns",
                    cube.bins(),
                    cube.bin_ns(),
                    p.cube.bins(),
                    p.cube.bin_ns()
                );
                Some((flim_core::preprocess::summed_decay(&cube), a.ref_tau))
            }
            (None, Some(irf)) => Some((irf.values().to_vec(), 0.0)),
            (None, None) => None,
        };
        let calibration = match reference {
            Some((decay, tau)) => {
                let (g, s) = decay_phasor(&decay, first, m, p.cube.bin_ns(), omega);
                Some(Calibration::from_reference(g, s, tau, omega)?)
            }
            None => None,
        };
        p.analysis = p.analysis.with_harmonic(a.harmonic);
        if let Some(c) = calibration {
            p.analysis = p.analysis.with_calibration(c);
        }
        let set = run_method(
            Method::Phasor,
            Model::Mono,
            &FitMethodArgs::default(),
            &p,
            device,
        )?;
        write_set(&out, &p.label, &set, &mut rows)?;
        let g = set.get("g").expect("g");
        let s = set.get("s").expect("s");
        let plotted = write_phasor_png(
            &out.file(&format!("{}.png", named(&p.label, "phasor")))?,
            g.view(),
            s.view(),
            set.mask.view(),
            omega,
        )?;
        let tau = set.get("tau_phase_ns").expect("phase lifetime");
        let intensity = set.get("intensity").expect("intensity");
        let limits = write_lifetime_png(
            &out.file(&format!("{}.png", named(&p.label, "tau_phase_ns")))?,
            tau.view(),
            intensity.view(),
            set.mask.view(),
            a.output.cmap,
            a.output.tau_range,
        )?;
        let irf = write_irf(&out, &p)?;
        let gs = map_stats(g.view(), set.mask.view());
        let ss = map_stats(s.view(), set.mask.view());
        println!(
            "{}phasor at {:.2} MHz (harmonic {}): median g {:.3}, s {:.3}, phase lifetime {:.3} ns; {} pixels plotted{}",
            if p.label.is_empty() {
                String::new()
            } else {
                format!("{}: ", p.label)
            },
            omega / (2.0 * std::f64::consts::PI) * 1e3,
            a.harmonic,
            gs.median,
            ss.median,
            map_stats(tau.view(), set.mask.view()).median,
            plotted,
            calibration.map_or(String::new(), |c| format!(
                ", calibrated (phase {:.4} rad, modulation x{:.4})",
                c.phase, c.modulation
            )),
        );
        images.push(serde_json::json!({
            "image": p.label, "omega_rad_per_ns": omega, "harmonic": a.harmonic,
            "calibration": calibration.map(|c| serde_json::json!({"phase_rad": c.phase, "modulation": c.modulation})),
            "g": gs, "s": ss, "tau_colour_range_ns": [limits.0, limits.1], "irf": irf,
        }));
        bar.inc(1);
    }
    bar.finish_and_clear();
    write_summary_csv(&out.file("summary.csv")?, &rows)?;
    out.write_json(
        "summary.json",
        &serde_json::json!({
            "input": a.input.path, "format": rec.format.name(), "device": device.info().id,
            "metadata": rec.metadata.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone()))).collect::<serde_json::Map<_, _>>(),
            "images": images,
            "maps": rows.iter().map(|(i, m, s)| serde_json::json!({"image": i, "map": m, "stats": s})).collect::<Vec<_>>(),
        }),
    )?;
    println!("outputs in {}", out.path().display());
    Ok(())
}

/// The fit range of a prepared image as (first bin, bins).
fn range_of(p: &Prepared) -> (usize, usize) {
    p.range.map_or((0, p.cube.bins()), |r| (r.first, r.bins))
}

fn run_convert(a: &ConvertArgs) -> anyhow::Result<()> {
    let rec = a.input.read()?;
    let out = OutDir::create(&a.out, a.force, &[&a.input.path])?;
    let ext = match a.to.as_str() {
        "npy" => "npy",
        "tif" | "tiff" => "tif",
        other => bail!("--to {other}: expected npy or tiff"),
    };
    let stem = a
        .input
        .path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("cube")
        .to_string();
    for image in &rec.images {
        let mut cube = bin_spatial(&image.cube, Binning::Square(a.bin))?;
        if let Some(spec) = &a.range {
            cube = parse_range(spec, &cube)?.crop(&cube)?;
        }
        let label = image.label(&rec);
        let name = if label.is_empty() {
            format!("{stem}.{ext}")
        } else {
            format!("{stem}_{label}.{ext}")
        };
        let path = out.file(&name)?;
        if ext == "npy" {
            write_npy(&path, &cube)?;
        } else {
            write_tiff(&path, &cube)?;
        }
        let (h, w) = cube.shape();
        println!(
            "{}: {w}x{h} px x {} bins of {:.5} ns ({}), period {:.4} ns, {:.0} photons",
            path.display(),
            cube.bins(),
            cube.bin_ns(),
            cube.dtype(),
            cube.period_ns(),
            cube.photons().sum()
        );
    }
    Ok(())
}

/// This modality's part of `biogpu demo`: the paper's phantom (vertical bars of 2, 2.5, 3
/// and 4 ns, Poisson noise), analysed on `device` and checked against the CPU reference and
/// the simulated truth; maps and a lifetime image under `out/flim`.
pub fn demo(out: &Path, device: &Device) -> anyhow::Result<bool> {
    let taus = [2.0, 2.5, 3.0, 4.0];
    let (h, w, bins, bin_ns, photons) = (64, 128, 256, 0.05, 5_000.0);
    let cube: AnyCube = flim_core::sim::mono_exponential(
        &taus,
        h,
        w,
        bins,
        bin_ns,
        bins as f64 * bin_ns,
        photons,
        42,
    )?
    .into();
    let opts = Analysis::default().with_threshold(100.0);
    let t = Instant::now();
    let got = cube.analyse_on(&opts, device)?;
    let secs = t.elapsed().as_secs_f64();
    let want = cube.analyse(&opts)?;
    let mut worst = 0.0f64;
    for (g, c) in [
        (&got.tau_iem, &want.tau_iem),
        (&got.tau_cmm, &want.tau_cmm),
        (&got.tau_rld, &want.tau_rld),
    ] {
        for (a, b) in g.iter().zip(c.iter()) {
            if a.is_finite() && b.is_finite() {
                worst = worst.max(f64::from((a - b).abs() / b.abs()));
            } else {
                ensure!(
                    a.is_finite() == b.is_finite(),
                    "flim: the device and the CPU disagree on which pixels have a lifetime"
                );
            }
        }
    }
    ensure!(
        worst <= 1e-3,
        "flim: lifetimes on {device} differ from the CPU reference by {worst:.1e} (> 1e-3)"
    );
    let set = MapSet::from_lifetimes(&got);
    let dir = out.join("flim");
    std::fs::create_dir_all(&dir)?;
    let mut bars = Vec::new();
    for (k, tau) in taus.iter().enumerate() {
        let cols = k * w / taus.len()..(k + 1) * w / taus.len();
        let view = got.tau_iem.slice(ndarray::s![.., cols]);
        let mask = set.mask.slice(ndarray::s![
            ..,
            k * w / taus.len()..(k + 1) * w / taus.len()
        ]);
        let s = map_stats(view, mask);
        ensure!(
            (s.median / tau - 1.0).abs() < 0.05,
            "flim: the {tau} ns bar came out at {:.3} ns (IEM median)",
            s.median
        );
        bars.push(format!("{:.2}", s.median));
    }
    for name in ["tau_iem_ns", "tau_cmm_ns", "intensity"] {
        write_map_tiff(
            &dir.join(format!("{name}.tif")),
            set.masked(name).expect("plane").view(),
        )?;
    }
    write_lifetime_png(
        &dir.join("tau_iem_ns.png"),
        got.tau_iem.view(),
        got.intensity.view(),
        set.mask.view(),
        Colormap::Turbo,
        Range::Fixed(1.5, 4.5),
    )?;
    let omega = 2.0 * std::f64::consts::PI / (bins as f64 * bin_ns);
    write_phasor_png(
        &dir.join("phasor.png"),
        got.g.view(),
        got.s.view(),
        set.mask.view(),
        omega,
    )?;
    println!(
        "flim: bar phantom {w}x{h}x{bins} ({photons} photons/px) of {:?} ns; IEM/CMM/RLD/phasor on {} in {secs:.3} s match the CPU to {worst:.1e}; IEM bar medians {} ns; maps in {}",
        taus,
        device.info().id,
        bars.join(", "),
        dir.display()
    );
    demo_fit(&dir, device)?;
    Ok(true)
}

/// The demo's fit: the paper's bi-exponential FRET phantom (tau_F 0.8 ns quenched, tau_D
/// 2.5 ns, the FRET fraction f_D (amplitude fraction of tau_F) falling from 0.8 to 0.2
/// across the image) behind a Gaussian IRF, fitted per pixel by
/// Poisson maximum likelihood with IRF reconvolution on `device` and on the CPU. Checks: at
/// least 98% of the fits converge on both (a few noisy pixels of the f_D 0.2 columns can run
/// off to a long second lifetime and are reported failed), the mean lifetimes of pixels
/// converged on both agree to 1% (f32 against f64 stops within 0.1 standard errors, about
/// 0.1% here), and each column's median f_D is within 0.03 of the truth (its standard error
/// over 32 pixels is about 0.005).
fn demo_fit(dir: &Path, device: &Device) -> anyhow::Result<()> {
    use flim_core::fit::{FitOptions, FitStatus, Model};
    use flim_core::sim::{DecaySim, bi_exponential};
    let (h, w, bins, bin_ns, photons) = (32, 8, 256, 0.05, 20_000.0);
    let sim = DecaySim::new(bins, bin_ns, photons)?
        .with_irf(0.1, 0.5)
        .with_seed(7);
    let irf = sim.irf_histogram().expect("the simulation has an IRF");
    let cube = bi_exponential(0.8, 2.5, h, w, &sim)?;
    let opts = FitOptions::new(Model::Bi).with_irf(&irf);
    let t = Instant::now();
    let got = flim_core::gpu::fit_on(&cube, &opts, device)?;
    let secs = t.elapsed().as_secs_f64();
    let want = flim_core::fit::fit(&cube, &opts)?;
    let ok = |s: &FitStatus| *s == FitStatus::Converged;
    let both: Vec<bool> = got
        .status
        .iter()
        .zip(&want.status)
        .map(|(a, b)| ok(a) && ok(b))
        .collect();
    let n_ok = both.iter().filter(|&&b| b).count();
    ensure!(
        n_ok * 100 >= 98 * h * w,
        "flim: only {n_ok} of {} bi-exponential fits of the FRET phantom converged",
        h * w
    );
    let mut worst = 0.0f64;
    for ((a, b), _) in got
        .tau_amp_mean
        .iter()
        .zip(&want.tau_amp_mean)
        .zip(&both)
        .filter(|(_, both)| **both)
    {
        worst = worst.max(f64::from((a - b).abs() / b));
    }
    ensure!(
        worst <= 1e-2,
        "flim: mean lifetimes of the fit on {device} differ from the CPU by {worst:.1e} (> 1e-2)"
    );
    let all = ndarray::Array2::from_elem((h, w), true);
    let mut fd = Vec::new();
    for x in 0..w {
        let truth = 0.8 - 0.6 * x as f64 / (w - 1) as f64;
        let col = got.fraction[0].slice(ndarray::s![.., x..=x]);
        let s = map_stats(col, all.slice(ndarray::s![.., x..=x]));
        ensure!(
            (s.median - truth).abs() < 0.03,
            "flim: column {x} of the FRET phantom gave f_D {:.3} (truth {truth:.2})",
            s.median
        );
        fd.push(format!("{:.2}", s.median));
    }
    write_map_tiff(&dir.join("fret_f_d.tif"), got.fraction[0].view())?;
    write_map_tiff(&dir.join("fret_tau_mean_ns.tif"), got.tau_amp_mean.view())?;
    write_lifetime_png(
        &dir.join("fret_tau_mean_ns.png"),
        got.tau_amp_mean.view(),
        got.intensity.view(),
        all.view(),
        Colormap::Turbo,
        Range::Fixed(0.8, 2.5),
    )?;
    println!(
        "flim: FRET phantom {w}x{h}x{bins} ({photons} photons/px, IRF 0.1 ns): bi-exponential MLE with IRF reconvolution on {} in {secs:.3} s, {n_ok} of {} converged on both, mean lifetimes match the CPU to {worst:.1e}; f_D by column {}",
        device.info().id,
        h * w,
        fd.join(", ")
    );
    Ok(())
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
        for (method, extra) in [
            ("lsq", &[][..]),
            ("lsq", &["--weights", "pearson", "--fit-offset"][..]),
            ("mle", &[][..]),
            ("global", &["--segments", "12"][..]),
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
