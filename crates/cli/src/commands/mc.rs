//! `biogpu mc`: Monte Carlo light transport in tetrahedral meshes.

use super::output::{OutDir, split_file};
use anyhow::ensure;
use gpu_runtime::Device;
use indicatif::{ProgressBar, ProgressStyle};
use montecarlo_core::io::{read_mesh, results, vtk};
use montecarlo_core::sim::problems;
use montecarlo_core::{
    Gates, GpuTuning, McResult, Plane, RunInfo, RunParams, SimSpec, Simulation, api,
};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Run a simulation file (JSON; `biogpu mc example` prints one). Ctrl-C stops between
    /// batches and writes the result of the photons finished so far.
    Run(RunArgs),
    /// Print an example simulation file (MCX's cube60 benchmark) to stdout.
    Example,
    /// Run a named benchmark problem (cube60, cube60b, cube_5med, fourlayer, head) and print
    /// its summary as JSON (photons/ms, energy balance, the published reference).
    Bench(BenchArgs),
    /// Read a mesh file (Gmsh .msh, VTK .vtk/.vtu, TIM-OS .mesh), or the mesh of a named
    /// problem (`head`, `cube60`, ...), and print what it holds as JSON; optionally write it
    /// as .vtu to look at in ParaView.
    Mesh(MeshArgs),
    /// The absorption Jacobian of one detector: replay the photons a CPU run detected (its
    /// detected.npy) on the CPU and sum exit weight x path length per tet. The run must
    /// come from the same simulation file with `--device cpu` (a GPU's f32 paths cannot be
    /// repeated on the CPU) and keep every record (no `detected_dropped`).
    Replay(ReplayArgs),
}

impl Args {
    /// Whether the subcommand splits photons over several devices (`--device cuda:all`).
    pub fn splits_photons(&self) -> bool {
        matches!(self.command, Command::Run(_) | Command::Bench(_))
    }

    /// Whether the subcommand computes on a device (`example` only prints a file).
    pub fn needs_device(&self) -> bool {
        !matches!(self.command, Command::Example | Command::Replay(_))
    }

    /// The subcommand as the user typed it, for messages.
    pub fn name(&self) -> &'static str {
        match self.command {
            Command::Run(_) => "mc run",
            Command::Example => "mc example",
            Command::Bench(_) => "mc bench",
            Command::Mesh(_) => "mc mesh",
            Command::Replay(_) => "mc replay",
        }
    }
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// cube60 | cube60b | cube_5med | fourlayer | head.
    problem: String,
    /// Photons (default: 1e6 on a GPU, 1e5 on the CPU).
    #[arg(long)]
    photons: Option<u64>,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Folder with the TIM-OS models (cube_5med/, fourlayer/; the repository's shared data
    /// has them in ../shared/data/montecarlo); default $BIOGPU_MC_DATA.
    #[arg(long)]
    data: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct MeshArgs {
    /// The mesh file, or a named problem (cube60, cube60b, head; cube_5med and fourlayer
    /// with --data) when no such file exists.
    file: PathBuf,
    /// Folder with the TIM-OS models, for a named problem; default $BIOGPU_MC_DATA.
    #[arg(long)]
    data: Option<PathBuf>,
    /// VTK: the cell array holding regions (default: region, gmsh:physical, Material, ...).
    #[arg(long)]
    region: Option<String>,
    /// Write the mesh (with its regions) to this .vtu file.
    #[arg(long)]
    vtu: Option<PathBuf>,
    /// Overwrite the --vtu file if it exists.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The simulation file of the run (JSON, with its detectors).
    sim: PathBuf,
    /// The run's output folder (its summary.json and detected.npy).
    run: PathBuf,
    /// Detector (1-based).
    #[arg(long, default_value_t = 1)]
    detector: u32,
    /// Output folder: jacobian.csv, jacobian.vtu, summary.json.
    #[arg(long, default_value = "biogpu-jacobian")]
    out: PathBuf,
    /// Overwrite existing outputs.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// Simulation file (JSON).
    sim: PathBuf,
    /// More simulation files: several (or a folder of .json for SIM) run in one process,
    /// each into a folder of its own inside --out named after it; a bad file is reported
    /// and skipped.
    #[arg(value_name = "MORE")]
    more: Vec<PathBuf>,
    /// Output folder: summary.json, result.vtu, tets.csv, exitance.csv (and faces.csv,
    /// gates.csv when tallied).
    #[arg(long, default_value = "biogpu-mc")]
    out: PathBuf,
    /// Override the photon count of the file.
    #[arg(long)]
    photons: Option<u64>,
    /// Override the seed of the file.
    #[arg(long)]
    seed: Option<u64>,
    /// Add a plane of mesh faces with a fluence tally: `px,py,pz,nx,ny,nz` (a point and the
    /// normal that gives the current's sign); repeatable.
    #[arg(long, value_parser = parse_plane)]
    plane: Vec<Plane>,
    /// Time-of-flight gates `WIDTH_NS,COUNT` (replaces the file's).
    #[arg(long, value_parser = parse_gates)]
    gates: Option<Gates>,
    /// Overwrite existing outputs.
    #[arg(long)]
    force: bool,
}

fn numbers(s: &str, n: usize, what: &str) -> Result<Vec<f64>, String> {
    let v: Result<Vec<f64>, _> = s.split(',').map(|x| x.trim().parse::<f64>()).collect();
    match v {
        Ok(v) if v.len() == n => Ok(v),
        _ => Err(format!(
            "expected {what} ({n} comma-separated numbers), got `{s}`"
        )),
    }
}

fn parse_plane(s: &str) -> Result<Plane, String> {
    let v = numbers(s, 6, "px,py,pz,nx,ny,nz")?;
    Ok(Plane {
        point: [v[0], v[1], v[2]],
        normal: [v[3], v[4], v[5]],
    })
}

fn parse_gates(s: &str) -> Result<Gates, String> {
    let v = numbers(s, 2, "WIDTH_NS,COUNT")?;
    if !(v[1] >= 1.0 && v[1].fract() == 0.0 && v[1] <= f64::from(u32::MAX)) {
        return Err(format!("gate count {} must be a whole number >= 1", v[1]));
    }
    Ok(Gates {
        width_ns: v[0],
        count: v[1] as u32,
    })
}

static STOP: AtomicBool = AtomicBool::new(false);

/// The GPU tuning from the environment (`BIOGPU_MC_VARIANT`).
fn tuning() -> anyhow::Result<GpuTuning> {
    Ok(GpuTuning::from_lookup(|k| std::env::var(k).ok())?)
}

/// Run `mc` on `devices`: one, or for `mc run` and `mc bench` several GPUs that split the
/// photons (`main` lets several through only for those).
pub fn run(args: Args, devices: &[Device]) -> anyhow::Result<()> {
    match args.command {
        // The example is the output; under `--json` it comes as `simulation` beside the
        // provenance.
        Command::Example if crate::record::json_mode() => {
            crate::record::set_result(
                serde_json::json!({ "simulation": serde_json::to_value(SimSpec::example())? }),
            );
            Ok(())
        }
        Command::Example => {
            let text = serde_json::to_string_pretty(&SimSpec::example())?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}")?;
            Ok(())
        }
        Command::Run(a) => run_sim(&a, devices),
        Command::Bench(a) => bench(&a, devices),
        Command::Mesh(a) => mesh_info(&a),
        Command::Replay(a) => replay(&a),
    }
}

/// One device: `api::run` (the CPU path for the CPU); several GPUs: `api::run_on`, which
/// splits the photons between them (tallies bit-identical to one device's).
fn run_on(
    sim: &Simulation,
    params: &RunParams,
    devices: &[Device],
) -> anyhow::Result<(McResult, RunInfo)> {
    Ok(match devices {
        [device] => api::run(sim, params, device)?,
        many => api::run_on(sim, params, many)?,
    })
}

/// The data folder of the TIM-OS problems: `--data`, else `env` (`BIOGPU_MC_DATA`).
fn data_folder(arg: Option<&Path>, env: Option<std::ffi::OsString>) -> Option<PathBuf> {
    arg.map(Path::to_path_buf)
        .or_else(|| env.map(PathBuf::from))
}

/// Problem `name` with `photons`, saying how to give the data folder when it needs one.
fn named_problem(name: &str, photons: u64, data: Option<&Path>) -> anyhow::Result<Simulation> {
    problems::problem(name, photons, data).map_err(|e| {
        if problems::needs_data(name) && data.is_none() {
            anyhow::anyhow!("{e}: give DIR with --data DIR or BIOGPU_MC_DATA=DIR")
        } else {
            e.into()
        }
    })
}

fn bench(a: &BenchArgs, devices: &[Device]) -> anyhow::Result<()> {
    let gpu = devices.iter().any(Device::is_gpu);
    let photons = a.photons.unwrap_or(if gpu { 1_000_000 } else { 100_000 });
    ensure!(photons > 0, "--photons must be at least 1");
    let data = data_folder(a.data.as_deref(), std::env::var_os("BIOGPU_MC_DATA"));
    let mut sim = named_problem(&a.problem, photons, data.as_deref())?;
    sim.params.seed = a.seed;
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed));
    let params = RunParams::new().with_tuning(tuning()?).with_stop(&STOP);
    let (r, info) = run_on(&sim, &params, devices)?;
    crate::record::note_library(&info.provenance);
    let s = &r.summary;
    let threads = if gpu { None } else { Some(rayon_threads()) };
    let reference = problems::reference(&a.problem);
    let mut out = serde_json::json!({
        "problem": a.problem,
        "tetrahedra": sim.mesh.len(),
        "reference": reference,
        "summary": serde_json::to_value(s)?,
    });
    if devices.len() > 1 {
        out["devices"] = info.device.clone().into();
    }
    // GPU: the rate of the launches alone (the slowest device's), without packing, upload,
    // read-back and the kernel's first compilation, which dominate short runs.
    if let Some(t) = info.transport_seconds.filter(|&t| t > 0.0) {
        out["transport_photons_per_ms"] = (s.photons as f64 / t / 1000.0).into();
    }
    if let Some(t) = threads {
        out["photons_per_ms_per_thread"] = (s.photons_per_ms / t as f64).into();
        out["threads"] = t.into();
    }
    print_or_record(out)
}

/// A command's JSON answer: printed, or under `--json` kept for `main` to print with its
/// provenance.
fn print_or_record(value: serde_json::Value) -> anyhow::Result<()> {
    if crate::record::json_mode() {
        crate::record::set_result(value);
    } else {
        println!("{}", serde_json::to_string_pretty(&value)?);
    }
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn mesh_info(a: &MeshArgs) -> anyhow::Result<()> {
    let name = a.file.to_string_lossy();
    let imported = if !a.file.exists() && problems::NAMES.contains(&name.as_ref()) {
        let data = data_folder(a.data.as_deref(), std::env::var_os("BIOGPU_MC_DATA"));
        let sim = named_problem(&name, 1, data.as_deref())?;
        montecarlo_core::Imported {
            mesh: sim.mesh,
            ignored: 0,
            notes: vec![format!("the mesh of the named problem `{name}`")],
        }
    } else {
        read_mesh(&a.file, a.region.as_deref())?
    };
    let m = &imported.mesh;
    let regions = m.region_stats();
    let (lo, hi) = m.bounds();
    let info = serde_json::json!({
        "file": a.file.display().to_string(),
        "nodes": m.nodes.len(),
        "tetrahedra": m.len(),
        "boundary_triangles": m.boundary.len(),
        "boundary_area": m.boundary_area.iter().sum::<f64>(),
        "volume": m.volumes.iter().sum::<f64>(),
        "bounds": [lo, hi],
        "regions": regions.iter().map(|(r, (n, v))| serde_json::json!({"region": r, "tetrahedra": n, "volume": v})).collect::<Vec<_>>(),
        "ignored_elements": imported.ignored,
        "notes": imported.notes,
    });
    if let Some(path) = &a.vtu {
        let (dir, name) = split_file(path)?;
        let out = OutDir::create(dir, a.force, &[&a.file], [name])?;
        vtk::write_vtu(&out.file(name)?, m, &[])?;
        out.commit()?;
    }
    print_or_record(info)
}

/// `mc replay`: the Jacobian of one detector from a CPU run's detected photons.
fn replay(a: &ReplayArgs) -> anyhow::Result<()> {
    use anyhow::{Context, bail};
    let mut sim = Simulation::from_json(&a.sim)?;
    let summary_path = a.run.join("summary.json");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&summary_path)
            .with_context(|| format!("reading {} (the run's summary)", summary_path.display()))?,
    )
    .with_context(|| format!("{}: not JSON", summary_path.display()))?;
    let field = |name: &str| -> anyhow::Result<&serde_json::Value> {
        summary
            .get(name)
            .with_context(|| format!("{}: no `{name}` field", summary_path.display()))
    };
    let count = |name: &str| -> anyhow::Result<u64> {
        field(name)?
            .as_u64()
            .with_context(|| format!("{}: `{name}` is not a whole number", summary_path.display()))
    };
    let device = field("device")?.as_str().unwrap_or("?");
    if !device.starts_with("cpu") {
        bail!(
            "{} ran on {device}: the CPU cannot repeat a GPU's f32 photon paths; run it again with --device cpu to replay its photons",
            a.run.display()
        );
    }
    let launched = count("photons")?;
    let dropped = count("detected_dropped")?;
    if dropped > 0 {
        bail!(
            "{} kept only part of its detected photons ({dropped} records dropped at outputs.detection.max_photons): the Jacobian needs them all; raise max_photons and run again",
            a.run.display()
        );
    }
    sim.params.seed = count("seed")?;
    let regions = sim.optics.materials.len();
    let detected = a.run.join("detected.npy");
    let records = results::read_detected(&detected, regions)?;
    let names = ["jacobian.csv", "jacobian.vtu", "summary.json"];
    let out = OutDir::create(&a.out, a.force, &[&a.sim, &detected], names)?;
    crate::say!(
        "replaying the photons of detector {} ({} records, {} photons launched, seed {}) on the CPU",
        a.detector,
        records.iter().filter(|r| r.detector == a.detector).count(),
        launched,
        sim.params.seed
    );
    let jac = sim.replay_cpu(&records, a.detector)?;
    let per_photon = jac.dw_dmua(launched);
    let mean_path = jac.mean_path();
    let mut csv = String::from("tet,region,volume,dW_dmua,mean_path_mm\n");
    for t in 1..=sim.mesh.len() {
        // Writing into a String cannot fail.
        let _ = writeln!(
            csv,
            "{t},{},{:e},{:e},{:e}",
            sim.mesh.regions[t],
            sim.mesh.volumes[t],
            per_photon[t - 1],
            mean_path[t - 1]
        );
    }
    std::fs::write(out.file("jacobian.csv")?, csv).context("writing jacobian.csv")?;
    vtk::write_vtu(
        &out.file("jacobian.vtu")?,
        &sim.mesh,
        &[("dW_dmua", &per_photon), ("mean_path_mm", &mean_path)],
    )?;
    let weight = jac.weight / launched.max(1) as f64;
    out.write_json(
        "summary.json",
        &serde_json::json!({
            "simulation": a.sim, "run": a.run, "detector": a.detector,
            "photons_replayed": jac.photons, "photons_launched": launched, "seed": sim.params.seed,
            "detected_weight": weight,
            "units": "dW_dmua: derivative of the detector's weight per launched photon by mua of the tet (mm, weight per photon x mm); mean_path_mm: -d ln W / d mua of the tet, the detected light's mean path length in the tet (mm)",
        }),
    )?;
    let shown = out.path().display().to_string();
    out.commit()?;
    crate::say!(
        "detector {}: {} photons, weight {weight:e} per launched photon; Jacobian in {shown}",
        a.detector,
        jac.photons
    );
    Ok(())
}

/// The simulation file with the command line's overrides.
fn load_sim(a: &RunArgs) -> anyhow::Result<Simulation> {
    let mut sim = Simulation::from_json(&a.sim)?;
    if let Some(p) = a.photons {
        ensure!(p > 0, "--photons must be at least 1");
        sim.photons = p;
    }
    if let Some(s) = a.seed {
        sim.params.seed = s;
    }
    sim.add_outputs(&a.plane, a.gates)?;
    Ok(sim)
}

fn progress_bar(photons: u64) -> ProgressBar {
    ProgressBar::new(photons).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} photons {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    )
}

fn print_header(sim: &Simulation, on: &str) {
    crate::say!(
        "{} tetrahedra, {} regions, {} sources, {} photons on {on}",
        sim.mesh.len(),
        sim.optics.materials.len(),
        sim.sources.len(),
        sim.photons
    );
}

fn run_sim(a: &RunArgs, devices: &[Device]) -> anyhow::Result<()> {
    let given: Vec<PathBuf> = std::iter::once(a.sim.clone())
        .chain(a.more.iter().cloned())
        .collect();
    if !super::batch::is_batch(&given) {
        return run_one(a, devices);
    }
    #[cfg(feature = "mpi")]
    if super::mc_mpi::World::init().is_some() {
        anyhow::bail!("under MPI, `mc run` takes one simulation file");
    }
    let inputs = super::batch::expand(&given, &["json"])?;
    let outs = super::batch::out_dirs(&a.out, &inputs);
    super::batch::run(
        &inputs,
        1,
        |path| Ok(path.to_path_buf()),
        |i, _, path| {
            let mut one = a.clone();
            one.sim = path;
            one.more.clear();
            one.out.clone_from(&outs[i]);
            run_one(&one, devices)
        },
    )
}

/// `mc run` of the one simulation file `a.sim` into `a.out`.
fn run_one(a: &RunArgs, devices: &[Device]) -> anyhow::Result<()> {
    let sim = load_sim(a)?;
    #[cfg(feature = "mpi")]
    if let Some(world) = super::mc_mpi::World::init() {
        if let Err(e) = run_sim_mpi(a, &sim, devices, &world) {
            world.fail(&e);
        }
        return Ok(());
    }
    for note in &sim.notes {
        crate::say!("mesh: {note}");
    }
    let out = OutDir::create(&a.out, a.force, &[&a.sim], results::file_names(&sim))?;
    // A second Ctrl-C while stopping falls through to the default (the handler is set once).
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed));
    let bar = progress_bar(sim.photons);
    let chosen;
    let devices = match devices {
        [one] => {
            let choice = crate::device_arg::choose(one, montecarlo_core::job_estimate(sim.photons));
            chosen = [choice.device];
            &chosen[..]
        }
        many => many,
    };
    let on = devices
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" + ");
    print_header(&sim, &on);
    let progress = |done: u64, _: u64| bar.set_position(done);
    let params = RunParams::new()
        .with_tuning(tuning()?)
        .with_stop(&STOP)
        .with_progress(&progress);
    let (result, info) = run_on(&sim, &params, devices)?;
    crate::record::note_library(&info.provenance);
    bar.finish_and_clear();
    let ran_on = (devices.len() > 1).then(|| format!("{} (photons split evenly)", info.device));
    finish(out, &sim, &result, ran_on)
}

/// Rank `world.rank` of an MPI job (`mpirun -n N biogpu mc run`, N > 1): run this rank's
/// share of the photons on its device, reduce the tallies to rank 0, which alone writes the
/// outputs and prints the summary; its progress bar shows its own share.
#[cfg(feature = "mpi")]
fn run_sim_mpi(
    a: &RunArgs,
    sim: &Simulation,
    devices: &[Device],
    world: &super::mc_mpi::World,
) -> anyhow::Result<()> {
    let root = world.is_root();
    let device = world.pick(devices);
    world.check_same(sim, device.is_gpu());
    let out = if root {
        for note in &sim.notes {
            crate::say!("mesh: {note}");
        }
        Some(OutDir::create(
            &a.out,
            a.force,
            &[&a.sim],
            results::file_names(sim),
        )?)
    } else {
        None
    };
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed));
    let (lo, hi) = world.share(sim.photons);
    let bar = if root {
        print_header(
            sim,
            &format!(
                "{} MPI ranks (rank 0: {device}, photons {lo}..{hi}; the bar shows rank 0's share)",
                world.size
            ),
        );
        progress_bar(hi - lo)
    } else {
        ProgressBar::hidden()
    };
    let progress = |done: u64, _: u64| bar.set_position(done);
    let params = RunParams::new()
        .with_tuning(tuning()?)
        .with_stop(&STOP)
        .with_progress(&progress);
    let start = std::time::Instant::now();
    let (part, info) = api::run_range(sim, &params, device, lo, hi - lo)?;
    crate::record::note_library(&info.provenance);
    bar.finish_and_clear();
    let Some(tally) = world.reduce_tally(sim, part) else {
        return Ok(());
    };
    let interrupted = tally.photons < sim.photons;
    let ranks = format!("{} MPI ranks (rank 0 on {})", world.size, info.device);
    let result = McResult::new(
        tally,
        start.elapsed().as_secs_f64(),
        ranks.clone(),
        interrupted,
    );
    let out = out.ok_or_else(|| anyhow::anyhow!("rank 0 has no output folder"))?;
    finish(
        out,
        sim,
        &result,
        Some(format!("{ranks}, photons split evenly")),
    )
}

/// Write the outputs and print the summary.
fn finish(
    out: OutDir,
    sim: &Simulation,
    result: &McResult,
    ran_on: Option<String>,
) -> anyhow::Result<()> {
    results::write(out.staging(), sim, result)?;
    let shown = out.path().display().to_string();
    out.commit()?;
    let s = &result.summary;
    crate::say!(
        "{} photons in {:.3} s ({:.0} photons/ms): absorbed {:.4}, escaped {:.4}, roulette {:.2e}, time-limited {:.4}{}",
        s.photons,
        s.seconds,
        s.photons_per_ms,
        s.absorbed,
        s.escaped,
        s.roulette,
        s.expired,
        if s.interrupted {
            " (interrupted: normalised by the photons run)"
        } else {
            ""
        }
    );
    if s.specular > 0.0 {
        crate::say!(
            "specular reflection at launch: {:.4} of the launched weight",
            s.specular
        );
    }
    let det = &result.tally.detectors;
    for (k, (count, w)) in det.count.iter().zip(&det.weight).enumerate() {
        crate::say!(
            "detector {}: {count} photons, weight {:.4e} per launched photon",
            k + 1,
            w / s.photons.max(1) as f64
        );
    }
    if det.dropped > 0 {
        crate::say!(
            "warning: {} detected photons not recorded (over outputs.detection.max_photons); detector totals include them",
            det.dropped
        );
    }
    if let Some(on) = ran_on {
        crate::say!("ran on {on}");
    }
    crate::say!("outputs in {shown}");
    Ok(())
}

/// `biogpu demo`'s Monte Carlo part (see `montecarlo_core::sim::demo`).
pub fn demo(out: &Path, device: &Device) -> anyhow::Result<bool> {
    crate::say!("{}", montecarlo_core::sim::demo(out, &tuning()?, device)?);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn run_cli(line: &[&str], device: &Device) -> anyhow::Result<()> {
        let cli = Cli::try_parse_from(std::iter::once("mc").chain(line.iter().copied()))?;
        run(cli.args, std::slice::from_ref(device))
    }

    /// `mc bench cube_5med` without a data folder says which files it needs, how to give
    /// the folder (--data or BIOGPU_MC_DATA) and where the repository keeps them; with a
    /// folder that lacks them, which files it looked for.
    #[test]
    fn bench_without_tim_os_data_says_what_it_needs() {
        let e = named_problem("cube_5med", 10, None)
            .unwrap_err()
            .to_string();
        for want in [
            "cube_5med/cube_5med.mesh",
            "cube_5med.opt",
            "cube_5med.source",
            "give DIR with --data DIR or BIOGPU_MC_DATA=DIR",
            "../shared/data/montecarlo",
        ] {
            assert!(e.contains(want), "no `{want}` in: {e}");
        }
        let missing = std::env::temp_dir().join(format!("biogpu-mc-nodata-{}", std::process::id()));
        let m = missing.to_str().unwrap();
        let e = run_cli(&["bench", "cube_5med", "--data", m], &Device::cpu())
            .unwrap_err()
            .to_string();
        let mesh = missing.join("cube_5med").join("cube_5med.mesh");
        assert!(e.contains(&format!("looked for {}", mesh.display())), "{e}");
        assert!(e.contains("../shared/data/montecarlo"), "{e}");
        // --data wins over the environment; the environment is the fallback.
        let env = Some(std::ffi::OsString::from("/from/env"));
        assert_eq!(
            data_folder(Some(Path::new("/arg")), env.clone()),
            Some(PathBuf::from("/arg"))
        );
        assert_eq!(data_folder(None, env), Some(PathBuf::from("/from/env")));
        assert_eq!(data_folder(None, None), None);
    }

    /// `mc run --plane --gates` end to end on the CPU and, when `BIOGPU_DEVICE` names a GPU,
    /// on it: faces.csv and gates.csv are written, the gates (whose end is the time limit)
    /// sum to the CW absorbed fraction, and the GPU's plane fluence and absorbed fraction are
    /// within 5 standard errors (2e4 photons: ~0.01 absolute) of the CPU's.
    #[test]
    fn mc_run_with_plane_and_gates_on_cpu_and_gpu() {
        let dir = std::env::temp_dir().join(format!("biogpu-mc-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sim = dir.join("sim.json");
        std::fs::write(
            &sim,
            r#"{"mesh": {"box": {"origin": [0, 0, 0], "size": [10, 10, 10], "cell": 2}},
                "materials": [{"mua": 0.05, "mus": 2.0, "g": 0.8, "n": 1.37}],
                "n_outside": 1.0,
                "sources": [{"type": "pencil", "pos": [5.1, 5.2, 0], "dir": [0, 0, 1]},
                            {"type": "volume", "region": 1, "power": 0.5}],
                "photons": 20000, "time_limit_ns": 0.3}"#,
        )
        .unwrap();
        let mut devices = vec![Device::cpu()];
        if std::env::var_os("BIOGPU_DEVICE").is_some() {
            let gpu = Device::from_env(true).unwrap().device;
            if gpu.is_gpu() {
                devices.push(gpu);
            }
        }
        let mut seen = Vec::new();
        for device in &devices {
            let out = dir.join(device.info().id.replace(':', "_"));
            let (s, o) = (sim.to_str().unwrap(), out.to_str().unwrap());
            run_cli(
                &[
                    "run",
                    s,
                    "--out",
                    o,
                    "--plane",
                    "0,0,4,0,0,1",
                    "--gates",
                    "0.05,6",
                ],
                device,
            )
            .unwrap();
            let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
            let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
            let absorbed = summary["absorbed"].as_f64().unwrap();
            let gates: f64 = summary["absorbed_per_gate"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .sum();
            // CPU (f64): equal to rounding. GPU: with the track-length estimator each piece of
            // a segment split at gate boundaries is rounded to 2^-24 on its own, so the gates
            // and the CW tally differ by at most a few 2^-25 per photon (seen: 3.8e-9).
            assert!(
                (gates - absorbed).abs() < 1e-6,
                "{device}: {gates} vs {absorbed}"
            );
            let plane = summary["planes"][0]["mean_fluence"].as_f64().unwrap();
            let csv = std::fs::read_to_string(out.join("gates.csv")).unwrap();
            assert_eq!(csv.lines().count(), 7, "{device}: gates.csv\n{csv}");
            let faces = std::fs::read_to_string(out.join("faces.csv")).unwrap();
            assert_eq!(faces.lines().count(), 1 + 50, "{device}: faces.csv");
            seen.push((absorbed, plane * 100.0));
        }
        if let [(a_cpu, p_cpu), (a_gpu, p_gpu)] = seen[..] {
            let se = (0.25f64 / 20_000.0).sqrt();
            assert!(
                (a_cpu - a_gpu).abs() < 5.0 * se,
                "absorbed {a_cpu} vs {a_gpu}"
            );
            assert!(
                (p_cpu - p_gpu).abs() < 0.05 * p_cpu.max(p_gpu),
                "plane {p_cpu} vs {p_gpu}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
