//! `biogpu perfusion`: voxelwise DCE pharmacokinetic fits (dual-input liver, Tofts, extended
//! Tofts, Patlak, 2CXM) from NIfTI series or CSV curves; the paper's simulation; model list.

use super::output::OutDir;
use anyhow::{Context, bail, ensure};
use gpu_runtime::Device;
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::{Array3, Axis};
use perfusion_core::convert::{Conversion, Ct, Spgr};
use perfusion_core::io::input::{InputSpec, Job, VolumeGrid, load};
use perfusion_core::io::studies::{Study, read_studies};
use perfusion_core::io::{csv as pcsv, nifti as pnii, png as ppng};
use perfusion_core::sim::{Simulation, synthetic_liver};
use perfusion_core::{
    Control, DelayGrid, FitInput, FitParams, FitStatus, Fits, Flags, GpuTuning, Method, Model,
    POOR_FIT_NOISE, POORLY_DETERMINED_SE, Precision, StartSearch, finite_median, fit_with, predict,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Fit a model to every voxel of a 4-D NIfTI series (with a mask) or to CSV curves.
    /// Ctrl-C stops between blocks and writes what was fitted (the rest: status not-fitted).
    Fit(Box<FitArgs>),
    /// Simulate curves with known parameters and noise (Wang & Cao 2012's simulation by
    /// default), or a synthetic liver volume (--liver).
    Simulate(SimArgs),
    /// List the models with their parameters, units, default bounds and starts.
    Models,
    /// T1 and M0 maps from variable-flip-angle SPGR images (DESPOT1, then nonlinear least
    /// squares), optionally B1-corrected; for `fit --t1-map`.
    T1map(Box<super::perfusion_t1::T1mapArgs>),
}

#[derive(Debug, clap::Args)]
struct FitArgs {
    /// dual-input, tofts, extended-tofts, patlak or 2cxm.
    #[arg(long, default_value = "dual-input")]
    model: Model,
    /// lm (bounded Levenberg-Marquardt from the searched start: recovers the truth of
    /// noise-free curves most often, docs/perfusion.md) or nm (Nelder-Mead, as the paper and
    /// fminsearch).
    #[arg(long, default_value = "lm")]
    method: Method,
    /// DCE series: 4-D NIfTI (.nii or .nii.gz; x, y, z, time), or DICOM: a folder holding
    /// one series (read recursively; classic single-frame, uncompressed), or one file of it.
    /// DICOM times come from the acquisition times; masks and T1 maps stay NIfTI on its grid.
    #[arg(long, conflicts_with = "curves", required_unless_present_any = ["curves", "studies"])]
    dce: Option<PathBuf>,
    /// Which DICOM series to read where the --dce folder holds several: its number in the
    /// list the error for such a folder prints (1, 2, ...) or its SeriesInstanceUID.
    #[arg(long, requires = "dce")]
    series: Option<String>,
    /// Voxels to fit (non-zero); default: every voxel.
    #[arg(long)]
    mask: Option<PathBuf>,
    /// CSV of curves: one column per curve, optional time column (`time`), header row.
    #[arg(long)]
    curves: Option<PathBuf>,
    /// Many studies in one run: a CSV list, one row per study, with its `dce` (or
    /// `curves`) and whatever differs between studies (`name`, `mask`, `aif`, `aif_mask`,
    /// `pv`, `pv_mask`, `times`, `t1_map`, `b1_map`, `series`; paths from the list's
    /// folder). Options given here apply to every study whose row leaves them empty. Each
    /// study is fitted into its own folder under --out, the next read while one is fitted;
    /// a failing study is reported and skipped, and summary.csv lists them all.
    #[arg(long, conflicts_with_all = ["dce", "curves"])]
    studies: Option<PathBuf>,
    /// Arterial input function: CSV `FILE` or `FILE:COLUMN` (the first non-time column by
    /// default), in the same units as the tissue curves after conversion; or a population
    /// input `parker`, `georgiou` (whole blood: give --hematocrit) or `weinmann` (plasma),
    /// optionally with the bolus arrival time in s (`parker:12`; default the first frame).
    #[arg(long, conflicts_with = "aif_mask")]
    aif: Option<String>,
    /// Arterial input from an ROI mask (e.g. the aorta) over the DCE series.
    #[arg(long)]
    aif_mask: Option<PathBuf>,
    /// Portal-venous input function (dual-input model): CSV `FILE` or `FILE:COLUMN`, or the
    /// population input `portal` (Parker's AIF through the gut, `portal:ARRIVAL_S`).
    #[arg(long, conflicts_with = "pv_mask")]
    pv: Option<String>,
    /// Portal-venous input from an ROI mask over the DCE series.
    #[arg(long)]
    pv_mask: Option<PathBuf>,
    /// Times (s): a CSV with a `time` column or one column of times.
    #[arg(long, conflicts_with = "dt")]
    times: Option<PathBuf>,
    /// Frame interval (s); default: the NIfTI header or the CSV time column.
    #[arg(long)]
    dt: Option<f64>,
    /// Divide the input functions by 1 - hematocrit (blood to plasma).
    #[arg(long)]
    hematocrit: Option<f64>,
    /// Signal to concentration: none, spgr (DCE-MRI) or ct (DCE-CT). Applied to tissue
    /// curves and to ROI inputs; CSV inputs are taken as concentrations.
    #[arg(long, default_value = "none")]
    convert: String,
    /// Pre-contrast T1 (s) for spgr.
    #[arg(long, conflicts_with = "t1_map")]
    t10: Option<f64>,
    /// Pre-contrast T1 map (s), same grid as the series.
    #[arg(long)]
    t1_map: Option<PathBuf>,
    /// Relative flip-angle map (actual / nominal, e.g. from a B1 scan), same grid as the
    /// series, for spgr: each voxel converted with its actual angle.
    #[arg(long)]
    b1_map: Option<PathBuf>,
    /// Flip angle (degrees) for spgr; default: FlipAngle of a DICOM --dce's headers.
    #[arg(long)]
    flip_angle: Option<f64>,
    /// Repetition time (s) for spgr; default: RepetitionTime of a DICOM --dce's headers.
    #[arg(long)]
    tr: Option<f64>,
    /// Relaxivity r1 (1/(mM s)) for spgr.
    #[arg(long, default_value_t = 4.5)]
    relaxivity: f64,
    /// Pre-contrast frames (baseline) for spgr and ct.
    #[arg(long, default_value_t = 3)]
    baseline: usize,
    /// HU per mM for ct (1 keeps HU).
    #[arg(long, default_value_t = 1.0)]
    hu_per_mm: f64,
    /// Starting values, e.g. "ka=10,kp=80"; others: the model's defaults (`models`).
    #[arg(long, value_delimiter = ',')]
    start: Vec<String>,
    /// Fixed parameters, e.g. "tau_p=2".
    #[arg(long, value_delimiter = ',')]
    fix: Vec<String>,
    /// Bounds, e.g. "ka=0:500,tau_a=0:10".
    #[arg(long, value_delimiter = ',')]
    bounds: Vec<String>,
    /// Delays the start search scans (linear least squares on the model's integral form,
    /// refined to a quarter step): auto (each free delay's bounds, one frame apart),
    /// START:STOP:STEP (s), or none (start from the --start values).
    #[arg(long, default_value = "auto")]
    delay_grid: String,
    /// Iteration cap (default 600 for nm, 100 for lm).
    #[arg(long)]
    max_iterations: Option<u32>,
    /// Nelder-Mead: vertex cost spread that stops (the paper: 1e-8).
    #[arg(long, default_value_t = 1e-8)]
    tol_fun: f64,
    /// Nelder-Mead: vertex spread that must also be reached (fminsearch: 1e-4; inf: off).
    #[arg(long, default_value_t = 1e-4)]
    tol_x: f64,
    /// GPU arithmetic: auto (f64 where the device has it), f64 or f32.
    #[arg(long, default_value = "auto")]
    precision: Precision,
    /// Output folder.
    #[arg(long, default_value = "perfusion-out")]
    out: PathBuf,
    /// Overwrite existing outputs.
    #[arg(long)]
    force: bool,
    /// Slice (z) for the PNG overlays; default: the middle one.
    #[arg(long)]
    slice: Option<usize>,
    /// Plot data and fit of a voxel "x,y,z" (NIfTI) or a curve by name (CSV); repeatable.
    #[arg(long)]
    plot: Vec<String>,
    /// Leave voxels out of the PNG overlays (anatomy shows through) unless their fit
    /// converged without a quality flag (poor fit, at a bound, non-identifiable, poorly
    /// determined). The NIfTI maps keep every voxel; status.nii.gz and flags.nii.gz mask
    /// them.
    #[arg(long)]
    hide_flagged: bool,
}

#[derive(Debug, clap::Args)]
struct SimArgs {
    /// Model to simulate.
    #[arg(long, default_value = "dual-input")]
    model: Model,
    /// True parameters, e.g. "ka=20,kp=100"; default: the paper's (dual-input) or the
    /// model's starting values.
    #[arg(long, value_delimiter = ',')]
    truth: Vec<String>,
    /// Time points over 2 min.
    #[arg(long, default_value_t = 128)]
    nt: usize,
    /// Curves (voxels).
    #[arg(long, default_value_t = 100)]
    voxels: usize,
    /// Tissue contrast-to-noise ratio (peak / noise SD); omit for noise-free curves.
    #[arg(long)]
    cnr: Option<f64>,
    /// Noise on the arterial and portal inputs (the paper: 150 and 100).
    #[arg(long)]
    cnr_arterial: Option<f64>,
    #[arg(long)]
    cnr_portal: Option<f64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A synthetic liver volume (NIfTI series, mask, inputs, true maps) instead of curves.
    #[arg(long)]
    liver: bool,
    #[arg(long, default_value = "perfusion-sim")]
    out: PathBuf,
    #[arg(long)]
    force: bool,
}

impl Args {
    /// Whether the subcommand computes on a device (`fit`); the others run on the CPU.
    pub fn needs_device(&self) -> bool {
        matches!(self.command, Command::Fit(_))
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

pub fn run(args: Args, device: &Device) -> anyhow::Result<()> {
    match args.command {
        Command::Fit(a) => run_fit(&a, device),
        Command::Simulate(a) => run_simulate(&a),
        Command::Models => {
            print_models();
            Ok(())
        }
        Command::T1map(a) => super::perfusion_t1::run(&a),
    }
}

fn print_models() {
    if crate::record::json_mode() {
        let models: Vec<serde_json::Value> = Model::ALL
            .iter()
            .map(|m| {
                serde_json::json!({
                    "model": m.to_string(),
                    "params": m.params().iter().map(|p| serde_json::json!({
                        "name": p.name, "unit": p.unit, "lower": p.lower, "upper": p.upper,
                        "start": p.start, "description": p.description,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        crate::record::set_result(serde_json::json!({ "models": models }));
        return;
    }
    for m in Model::ALL {
        crate::say!("{m}");
        for p in m.params() {
            crate::say!(
                "  {:<7} {:<12} [{}, {}] start {}  {}",
                p.name,
                if p.unit.is_empty() { "-" } else { p.unit },
                p.lower,
                p.upper,
                p.start,
                p.description
            );
        }
    }
}

/// `NAME=VALUE` settings into (index, text after `=`).
fn settings<'a>(
    model: Model,
    items: &'a [String],
    what: &str,
) -> anyhow::Result<Vec<(usize, &'a str)>> {
    items
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            let (name, value) = s
                .split_once('=')
                .with_context(|| format!("--{what} `{s}`: expected NAME=VALUE, e.g. ka=10"))?;
            let i = model
                .params()
                .iter()
                .position(|p| p.name == name.trim())
                .with_context(|| {
                    let names: Vec<_> = model.params().iter().map(|p| p.name).collect();
                    format!(
                        "--{what} `{s}`: the {model} model has no `{}`; its parameters: {}",
                        name.trim(),
                        names.join(", ")
                    )
                })?;
            Ok((i, value.trim()))
        })
        .collect()
}

fn number(text: &str, what: &str) -> anyhow::Result<f64> {
    text.parse::<f64>()
        .with_context(|| format!("{what}: `{text}` is not a number"))
}

fn options(a: &FitArgs) -> anyhow::Result<FitParams> {
    let mut o = FitParams::new(a.model)
        .with_method(a.method)
        .with_precision(a.precision)
        .with_gpu(GpuTuning::from_lookup(|k| std::env::var(k).ok())?);
    for (i, v) in settings(a.model, &a.start, "start")? {
        o.start[i] = number(v, "--start")?;
    }
    for (i, v) in settings(a.model, &a.bounds, "bounds")? {
        let (lo, hi) = v
            .split_once(':')
            .with_context(|| format!("--bounds `{v}`: expected LOWER:UPPER"))?;
        o.lower[i] = number(lo, "--bounds")?;
        o.upper[i] = number(hi, "--bounds")?;
    }
    for (i, v) in settings(a.model, &a.fix, "fix")? {
        o.start[i] = number(v, "--fix")?;
        o.fixed[i] = true;
    }
    o.max_iterations = a.max_iterations;
    o.tol_fun = a.tol_fun;
    o.tol_x = a.tol_x;
    o.start_search = parse_grid(&a.delay_grid)?;
    o.validate()?;
    Ok(o)
}

fn parse_grid(text: &str) -> anyhow::Result<StartSearch> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(StartSearch::Off);
    }
    if text.eq_ignore_ascii_case("auto") {
        return Ok(StartSearch::Auto);
    }
    let parts: Vec<&str> = text.split(':').collect();
    ensure!(
        parts.len() == 3,
        "--delay-grid `{text}`: expected auto, START:STOP:STEP seconds or none"
    );
    let v: Vec<f64> = parts
        .iter()
        .map(|p| number(p, "--delay-grid"))
        .collect::<anyhow::Result<_>>()?;
    Ok(StartSearch::Grid(DelayGrid::new(v[0], v[1], v[2])?))
}

/// The signal-to-concentration conversion of `--convert`. For spgr, the flip angle and TR
/// not given are taken from the headers of a DICOM `--dce` (read here without the pixel
/// data, since `load` converts as it reads); a given value that differs from the header's
/// by more than 1% wins, with a warning.
fn conversion(a: &FitArgs, dce: Option<&Path>, series: Option<&str>) -> anyhow::Result<Conversion> {
    Ok(match a.convert.to_ascii_lowercase().as_str() {
        "none" => Conversion::None,
        "spgr" => {
            let header = match dce {
                Some(dce) => {
                    perfusion_core::io::input::dce_acquisition(dce, series)?.unwrap_or_default()
                }
                None => perfusion_core::io::dicom::Acquisition::default(),
            };
            let (flip, tr) = header.spgr_settings(a.flip_angle, a.tr);
            Conversion::Spgr(Spgr {
                flip_angle_deg: flip.context(
                    "--convert spgr needs --flip-angle (degrees); a DICOM --dce gives it where \
                     its headers have FlipAngle (0018,1314)",
                )?,
                tr_s: tr.context(
                    "--convert spgr needs --tr (seconds); a DICOM --dce gives it where its \
                     headers have RepetitionTime (0018,0080)",
                )?,
                relaxivity: a.relaxivity,
                baseline_frames: a.baseline,
            })
        }
        "ct" => Conversion::Ct(Ct {
            hu_per_mm: a.hu_per_mm,
            baseline_frames: a.baseline,
        }),
        other => bail!("--convert {other}: expected none, spgr or ct"),
    })
}

/// The library's description of the input files and options of `a`, for one study of a
/// `--studies` list (its row in place of the shared options) or for the command line's.
fn input_spec(a: &FitArgs, study: Option<&Study>) -> anyhow::Result<InputSpec> {
    let shared = InputSpec {
        model: a.model,
        dce: a.dce.clone(),
        series: a.series.clone(),
        mask: a.mask.clone(),
        curves: a.curves.clone(),
        aif: a.aif.clone(),
        aif_mask: a.aif_mask.clone(),
        pv: a.pv.clone(),
        pv_mask: a.pv_mask.clone(),
        times: a.times.clone(),
        dt: a.dt,
        hematocrit: a.hematocrit,
        conversion: Conversion::None,
        t10: a.t10,
        t1_map: a.t1_map.clone(),
        b1_map: a.b1_map.clone(),
    };
    let mut spec = match study {
        Some(s) => s.apply(&shared),
        None => shared,
    };
    // Per study: a DICOM series' headers give the flip angle and TR.
    spec.conversion = conversion(a, spec.dce.as_deref(), spec.series.as_deref())?;
    Ok(spec)
}

fn run_fit(a: &FitArgs, device: &Device) -> anyhow::Result<()> {
    let opts = options(a)?;
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed));
    if let Some(list) = &a.studies {
        return run_studies(a, list, &opts, device);
    }
    let job = load(&input_spec(a, None)?)?;
    let fitted = fit_job(a, &opts, job, &a.out, device, None)?()?;
    fitted.say();
    Ok(())
}

/// Every study of a `--studies` list, each into `--out/NAME`, the next read while one is
/// fitted; `summary.csv` in `--out` has a row per study (its outcome, counts and medians).
fn run_studies(a: &FitArgs, list: &Path, opts: &FitParams, device: &Device) -> anyhow::Result<()> {
    let studies = read_studies(list)?;
    // Check what does not depend on the files before any is read.
    let specs = studies
        .iter()
        .map(|s| {
            let spec = input_spec(a, Some(s))
                .with_context(|| format!("{}, line {}", list.display(), s.line))?;
            Ok((s, spec))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let table = a.out.join("summary.csv");
    ensure!(
        a.force || !table.exists(),
        "{} exists; choose another --out or give --force to overwrite",
        table.display()
    );
    let sources: Vec<PathBuf> = studies
        .iter()
        .filter_map(|s| s.dce.clone().or_else(|| s.curves.clone()))
        .collect();
    crate::record::note_batch(&sources);
    // Rows in study order whatever the order the writers finish in.
    let rows: Mutex<Vec<Option<Result<Fitted, String>>>> = Mutex::new(vec![None; studies.len()]);
    let row = |i: usize, r: Result<Fitted, String>| {
        rows.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(r);
    };
    // Fit one study while the next is read and the previous one's maps are written.
    let outcome = super::batch::run_pipelined(
        &specs,
        |(s, _)| s.name.clone(),
        2,
        2,
        // A study that cannot be read reaches `process` too, for its row in the table.
        |(_, spec)| Ok(load(spec).map_err(anyhow::Error::from)),
        |i, (s, _), job| {
            let write = if STOP.load(Ordering::Relaxed) {
                Err(anyhow::anyhow!("interrupted before this study was fitted"))
            } else {
                let remaining = studies.len() - i;
                job.and_then(|job| {
                    fit_job(a, opts, job, &a.out.join(&s.name), device, Some(remaining))
                })
            };
            match write {
                Ok(write) => Ok(move || match write() {
                    Ok(fitted) => {
                        row(i, Ok(fitted));
                        Ok(())
                    }
                    Err(e) => {
                        row(i, Err(format!("{e:#}")));
                        Err(e)
                    }
                }),
                Err(e) => {
                    row(i, Err(format!("{e:#}")));
                    Err(e)
                }
            }
        },
    );
    let rows: Vec<(String, Result<Fitted, String>)> = studies
        .iter()
        .zip(rows.into_inner().unwrap_or_else(PoisonError::into_inner))
        .map(|(s, r)| {
            (
                s.name.clone(),
                r.unwrap_or_else(|| Err("not fitted".into())),
            )
        })
        .collect();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    write_study_table(&table, opts.model, &rows)?;
    let ok = rows.iter().filter(|(_, r)| r.is_ok()).count();
    crate::say!(
        "{ok} of {} studies fitted into {} (summary.csv lists them all)",
        rows.len(),
        a.out.display()
    );
    outcome
}

/// One row per study: its outcome, voxels, seconds, device, status counts, flag counts
/// and the median of each parameter.
fn write_study_table(
    path: &Path,
    model: Model,
    rows: &[(String, Result<Fitted, String>)],
) -> anyhow::Result<()> {
    let mut header: Vec<String> = ["study", "outcome", "voxels", "seconds", "device"]
        .map(String::from)
        .to_vec();
    header.extend(FitStatus::ALL.iter().map(|s| s.name().replace('-', "_")));
    header.extend(
        Flags::ALL
            .iter()
            .map(|(_, name)| format!("flag_{}", name.replace('-', "_"))),
    );
    header.extend(model.params().iter().map(|p| format!("median_{}", p.name)));
    let mut w =
        csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    w.write_record(&header)?;
    for (name, r) in rows {
        let mut record = vec![name.clone()];
        match r {
            Ok(f) => {
                record.extend([
                    "ok".into(),
                    f.voxels.to_string(),
                    format!("{:.4}", f.seconds),
                    f.device.clone(),
                ]);
                record.extend(f.counts.iter().map(ToString::to_string));
                record.extend(f.flagged.iter().map(ToString::to_string));
                record.extend(
                    f.medians
                        .iter()
                        .map(|m| m.map_or_else(String::new, |m| m.to_string())),
                );
            }
            Err(why) => {
                record.push(format!("error: {why}"));
                record.resize(header.len(), String::new());
            }
        }
        w.write_record(&record)?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// What one fit did, for the console and a study list's table.
#[derive(Debug, Clone)]
struct Fitted {
    voxels: usize,
    seconds: f64,
    device: String,
    precision: String,
    counts: Vec<usize>,
    flagged: Vec<usize>,
    medians: Vec<Option<f64>>,
    out: String,
}

impl Fitted {
    fn say(&self) {
        let (n, secs, c, f) = (self.voxels, self.seconds, &self.counts, &self.flagged);
        crate::say!(
            "{n} voxels in {secs:.3} s ({:.0} voxels/s, {} {}): {} converged, {} at a bound, {} max iterations, {} invalid input, {} failed{}",
            n as f64 / secs,
            self.device,
            self.precision,
            c[0],
            c[2],
            c[1],
            c[3],
            c[4],
            if c[5] > 0 {
                format!(", {} not fitted (interrupted)", c[5])
            } else {
                String::new()
            }
        );
        if f.iter().any(|&c| c > 0) {
            crate::say!(
                "flags: {} poor fit (R^2 < 0 or residual > {POOR_FIT_NOISE} x noise), {} at a bound, {} non-identifiable, {} poorly determined (a rate or volume's standard error > {:.0}% of it, or J^T J singular) (flags.nii.gz / results.csv; --hide-flagged hides them in the PNGs)",
                f[0],
                f[1],
                f[2],
                f[3],
                100.0 * POORLY_DETERMINED_SE
            );
        }
        crate::say!("outputs in {}", self.out);
    }
}

/// Fit `job` and write its outputs into `out_path`. One study of a list says how many
/// studies (this one included) are still to be fitted: `auto` weighs them as one job (the
/// GPU opens once for all); a study alone shows the voxel progress bar and says what is
/// fitted where.
fn fit_job<'a>(
    a: &'a FitArgs,
    opts: &'a FitParams,
    job: Job,
    out_path: &Path,
    device: &Device,
    in_list: Option<usize>,
) -> anyhow::Result<impl FnOnce() -> anyhow::Result<Fitted> + Send + use<'a>> {
    let alone = in_list.is_none();
    let inputs: Vec<&Path> = job.inputs.iter().map(PathBuf::as_path).collect();
    let out = OutDir::create(out_path, a.force, &inputs, fit_outputs(a, &job, opts)?)?;
    let n = job.curves.nrows();
    let bar = if alone {
        ProgressBar::new(n as u64).with_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} voxels {per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
    } else {
        ProgressBar::hidden()
    };
    let progress = |done: usize, _total: usize| bar.set_position(done as u64);
    let control = Control {
        progress: Some(&progress),
        stop: Some(&STOP),
    };
    let choice = crate::device_arg::choose(
        device,
        perfusion_core::job_estimate(n, job.problem.len(), opts.method).times(in_list.unwrap_or(1)),
    );
    let device = &choice.device;
    if alone {
        crate::say!(
            "{} voxels x {} time points, {} model, {} on {device}",
            n,
            job.problem.len(),
            opts.model,
            match opts.method {
                Method::NelderMead => "Nelder-Mead",
                Method::LevenbergMarquardt => "Levenberg-Marquardt",
            }
        );
    }
    let t0 = Instant::now();
    let input = FitInput::new(job.curves.view(), &job.problem);
    let (fits, info) = fit_with(input, opts, device, &control)?;
    let secs = t0.elapsed().as_secs_f64();
    crate::record::note_library(&info.provenance);
    bar.finish_and_clear();
    let reason = choice.reason;
    // What is left is writing: a list of studies does it on a writer thread.
    Ok(move || {
        write_fit_outputs(&out, a, &job, opts, &fits)?;
        let counts = fits.status_counts();
        let flagged = fits.flag_counts();
        let medians: Vec<Option<f64>> = (0..opts.model.params().len())
            .map(|i| finite_median(fits.params.row(i).iter().copied()))
            .collect();
        let summary = serde_json::json!({
            "model": opts.model, "method": opts.method, "device": info.device, "device_choice": reason, "precision": info.precision,
            "voxels": n, "time_points": job.problem.len(), "seconds": secs, "voxels_per_second": n as f64 / secs,
            "status": FitStatus::ALL.iter().map(|s| (s.name().to_string(), serde_json::json!(counts[*s as usize]))).collect::<serde_json::Map<_, _>>(),
            "flags": Flags::ALL.iter().zip(flagged).map(|((bit, name), c)| (name.to_string(), serde_json::json!({"bit": bit, "voxels": c}))).collect::<serde_json::Map<_, _>>(),
            "median": opts.model.params().iter().zip(&medians).map(|(p, m)| {
                (p.name.to_string(), serde_json::json!(m))
            }).collect::<serde_json::Map<_, _>>(),
            "median_se": opts.model.params().iter().enumerate().map(|(i, p)| {
                (p.name.to_string(), serde_json::json!(finite_median(fits.se.row(i).iter().copied())))
            }).collect::<serde_json::Map<_, _>>(),
            "poorly_determined_se": POORLY_DETERMINED_SE,
            "units": opts.model.params().iter().map(|p| (p.name.to_string(), serde_json::json!(p.unit))).collect::<serde_json::Map<_, _>>(),
            "options": {
                "start": opts.start, "lower": opts.lower, "upper": opts.upper, "fixed": opts.fixed,
                "max_iterations": opts.iterations(), "tol_fun": opts.tol_fun, "tol_x": opts.tol_x,
                "start_search": opts.start_search,
            },
        });
        out.write_json("summary.json", &summary)?;
        let shown = out.path().display().to_string();
        out.commit()?;
        Ok(Fitted {
            voxels: n,
            seconds: secs,
            device: info.device.clone(),
            precision: info.precision.to_string(),
            counts: counts.to_vec(),
            flagged: flagged.to_vec(),
            medians,
            out: shown,
        })
    })
}

/// Every file `fit` writes, after checking the options that name them (`--slice`, `--plot`),
/// so that neither can fail after the fit.
fn fit_outputs(a: &FitArgs, job: &Job, opts: &FitParams) -> anyhow::Result<Vec<String>> {
    let model = opts.model;
    let mut files = vec!["summary.json".to_string()];
    match &job.volume {
        Some(VolumeGrid { shape, .. }) => {
            let z = a.slice.unwrap_or(shape.2 / 2);
            ensure!(
                z < shape.2,
                "--slice {z}: the series has {} slices",
                shape.2
            );
            let names = model.params().iter().map(|p| p.name).chain(["sse", "r2"]);
            for name in names {
                files.push(format!("{name}.nii.gz"));
                files.push(format!("{name}_z{z}.png"));
            }
            for (p, &fixed) in model.params().iter().zip(&opts.fixed) {
                if !fixed {
                    files.push(format!("{}_se.nii.gz", p.name));
                }
            }
            files.extend([
                "iterations.nii.gz".into(),
                "status.nii.gz".into(),
                "flags.nii.gz".into(),
            ]);
        }
        None => files.push("results.csv".into()),
    }
    for spec in &a.plot {
        plot_voxel(job, spec)?;
        let safe = plot_name(spec);
        files.push(format!("plot_{safe}.png"));
        files.push(format!("plot_{safe}.csv"));
    }
    Ok(files)
}

/// Index of the voxel or curve `--plot spec` names.
fn plot_voxel(job: &Job, spec: &str) -> anyhow::Result<usize> {
    job.names
        .iter()
        .position(|n| n == spec.trim())
        .with_context(|| {
            format!("--plot {spec}: no such voxel or curve (voxels are \"x,y,z\" inside the mask)")
        })
}

fn plot_name(spec: &str) -> String {
    spec.trim().replace([',', '/', '\\', ' '], "_")
}

fn write_fit_outputs(
    out: &OutDir,
    a: &FitArgs,
    job: &Job,
    opts: &FitParams,
    fits: &Fits,
) -> anyhow::Result<()> {
    let model = fits.model;
    match &job.volume {
        Some(VolumeGrid {
            index,
            shape,
            header,
            mean,
        }) => {
            let z = a.slice.unwrap_or(shape.2 / 2);
            let mut maps: Vec<(String, ndarray::Array1<f64>)> = model
                .params()
                .iter()
                .enumerate()
                .map(|(i, p)| (p.name.to_string(), fits.params.row(i).to_owned()))
                .collect();
            maps.push(("sse".into(), fits.sse.clone()));
            maps.push(("r2".into(), fits.r2.clone()));
            maps.push(("iterations".into(), fits.iterations.mapv(f64::from)));
            let shown = trusted(fits);
            for (name, values) in &maps {
                let map = pnii::scatter(values.view(), index, *shape);
                pnii::write_map(&out.file(&format!("{name}.nii.gz"))?, map.view(), header)?;
                if name != "iterations" {
                    let drawn = if a.hide_flagged {
                        let kept = ndarray::Zip::from(values)
                            .and(&ndarray::ArrayView1::from(&shown))
                            .map_collect(|&v, &ok| if ok { v } else { f64::NAN });
                        pnii::scatter(kept.view(), index, *shape)
                    } else {
                        map
                    };
                    ppng::write_overlay(
                        &out.file(&format!("{name}_z{z}.png"))?,
                        mean.index_axis(Axis(2), z),
                        drawn.index_axis(Axis(2), z),
                        None,
                    )?;
                }
            }
            // Standard errors of the free parameters (a fixed one has none).
            for (i, (p, &fixed)) in model.params().iter().zip(&opts.fixed).enumerate() {
                if !fixed {
                    let map = pnii::scatter(fits.se.row(i), index, *shape);
                    pnii::write_map(
                        &out.file(&format!("{}_se.nii.gz", p.name))?,
                        map.view(),
                        header,
                    )?;
                }
            }
            let mut status = Array3::<u8>::from_elem(*shape, 255);
            for (&s, &[x, y, zz]) in fits.status.iter().zip(index) {
                status[[x, y, zz]] = s;
            }
            pnii::write_map(&out.file("status.nii.gz")?, status.view(), header)?;
            let mut flags = Array3::<u8>::zeros(*shape);
            for (&f, &[x, y, zz]) in fits.flags.iter().zip(index) {
                flags[[x, y, zz]] = f;
            }
            pnii::write_map(&out.file("flags.nii.gz")?, flags.view(), header)?;
        }
        None => pcsv::write_fits(&out.file("results.csv")?, &job.names, fits)?,
    }
    for spec in &a.plot {
        let v = plot_voxel(job, spec)?;
        let theta = fits.params.column(v).to_vec();
        let data: Vec<f64> = job.curves.row(v).iter().map(|&c| f64::from(c)).collect();
        let fitted = if theta.iter().all(|x| x.is_finite()) {
            predict(&job.problem, model, &theta)?
        } else {
            vec![f64::NAN; data.len()]
        };
        let safe = plot_name(spec);
        ppng::write_curve_plot(
            &out.file(&format!("plot_{safe}.png"))?,
            job.problem.times(),
            &data,
            &fitted,
        )?;
        pcsv::write_columns(
            &out.file(&format!("plot_{safe}.csv"))?,
            &["time_s", "data", "fit"],
            &[job.problem.times(), &data, &fitted],
        )?;
    }
    Ok(())
}

/// Voxels whose fit converged (also at a bound) with no quality flag.
fn trusted(fits: &Fits) -> Vec<bool> {
    (0..fits.len())
        .map(|v| {
            matches!(fits.status(v), FitStatus::Converged | FitStatus::AtBound)
                && fits.flags[v] == 0
        })
        .collect()
}

fn truth_vector(model: Model, items: &[String]) -> anyhow::Result<Vec<f64>> {
    let mut theta: Vec<f64> = if model == Model::DualInput {
        vec![20.0, 100.0, 400.0, 1.0, 2.0]
    } else {
        model.params().iter().map(|p| p.start).collect()
    };
    for (i, v) in settings(model, items, "truth")? {
        theta[i] = number(v, "--truth")?;
    }
    Ok(theta)
}

fn run_simulate(a: &SimArgs) -> anyhow::Result<()> {
    let planned: Vec<String> = if a.liver {
        ["dce.nii.gz", "mask.nii.gz", "inputs.csv"]
            .into_iter()
            .map(String::from)
            .chain(
                Model::DualInput
                    .params()
                    .iter()
                    .map(|p| format!("truth_{}.nii.gz", p.name)),
            )
            .collect()
    } else {
        ["curves.csv", "inputs.csv", "truth.json"]
            .into_iter()
            .map(String::from)
            .collect()
    };
    let out = OutDir::create(&a.out, a.force, &[], planned)?;
    let shown = out.path().display().to_string();
    if a.liver {
        let liver = synthetic_liver(48, 40, 4, a.nt, a.cnr, a.seed)?;
        let dt = (liver.times[1] - liver.times[0]) as f32;
        pnii::write_series(&out.file("dce.nii.gz")?, &liver.volume, [2.0, 2.0, 5.0], dt)?;
        let mask = liver.mask.mapv(u8::from);
        let header = pnii::read_header(&out.file("dce.nii.gz")?)?;
        pnii::write_map(&out.file("mask.nii.gz")?, mask.view(), &header)?;
        for (i, p) in Model::DualInput.params().iter().enumerate() {
            let m = liver.truth.index_axis(Axis(3), i).mapv(|v| v as f32);
            pnii::write_map(
                &out.file(&format!("truth_{}.nii.gz", p.name))?,
                m.view(),
                &header,
            )?;
        }
        write_inputs(&out, &liver.times, &liver.arterial, Some(&liver.portal))?;
        out.commit()?;
        crate::say!(
            "synthetic liver 48x40x4, {} frames over 120 s, {} voxels, CNR {}: dce.nii.gz, mask.nii.gz, inputs.csv, truth_*.nii.gz in {}",
            a.nt,
            liver.mask.iter().filter(|&&m| m).count(),
            a.cnr.map_or("inf".into(), |c| c.to_string()),
            shown
        );
        crate::say!(
            "fit it with: biogpu perfusion fit --dce {shown}/dce.nii.gz --mask {shown}/mask.nii.gz --aif {shown}/inputs.csv:aif --pv {shown}/inputs.csv:pv",
        );
        return Ok(());
    }
    let truth = truth_vector(a.model, &a.truth)?;
    let sim = Simulation::new(a.model, &truth)
        .with_nt(a.nt)
        .with_cnr(a.cnr)
        .with_input_cnr(a.cnr_arterial, a.cnr_portal)
        .with_voxels(a.voxels)
        .with_seed(a.seed)
        .run()?;
    let t = sim.problem.times();
    let names: Vec<String> = std::iter::once("time".to_string())
        .chain((0..a.voxels).map(|v| format!("v{v}")))
        .collect();
    let values: Vec<Vec<f64>> = sim
        .curves
        .rows()
        .into_iter()
        .map(|r| r.iter().map(|&c| f64::from(c)).collect())
        .collect();
    let mut columns: Vec<&[f64]> = vec![t];
    columns.extend(values.iter().map(Vec::as_slice));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    pcsv::write_columns(&out.file("curves.csv")?, &names, &columns)?;
    write_inputs(&out, t, sim.problem.arterial(), sim.problem.portal())?;
    out.write_json(
        "truth.json",
        &serde_json::json!({
            "model": a.model, "truth": a.model.params().iter().zip(&truth).map(|(p, v)| (p.name.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "nt": a.nt, "voxels": a.voxels, "cnr": a.cnr, "cnr_arterial": a.cnr_arterial, "cnr_portal": a.cnr_portal, "seed": a.seed,
        }),
    )?;
    out.commit()?;
    crate::say!(
        "{} curves of the {} model, {} points over 120 s: curves.csv, inputs.csv, truth.json in {shown}",
        a.voxels,
        a.model,
        a.nt,
    );
    crate::say!(
        "fit them with: biogpu perfusion fit --model {} --curves {1}/curves.csv --aif {1}/inputs.csv:aif{2}",
        a.model,
        shown,
        if a.model.dual_input() {
            format!(" --pv {shown}/inputs.csv:pv")
        } else {
            String::new()
        }
    );
    Ok(())
}

fn write_inputs(out: &OutDir, t: &[f64], aif: &[f64], pv: Option<&[f64]>) -> anyhow::Result<()> {
    let path = out.file("inputs.csv")?;
    match pv {
        Some(p) => pcsv::write_columns(&path, &["time", "aif", "pv"], &[t, aif, p])?,
        None => pcsv::write_columns(&path, &["time", "aif"], &[t, aif])?,
    }
    Ok(())
}

/// This modality's part of `biogpu demo` (`perfusion_core::sim::demo`): the built-in
/// synthetic liver fitted on `device`, checked against the CPU and the true parameters.
pub fn demo(out: &Path, device: &Device) -> anyhow::Result<bool> {
    crate::say!("{}", perfusion_core::sim::demo(out, device)?);
    Ok(true)
}
