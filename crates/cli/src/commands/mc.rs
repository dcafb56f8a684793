//! `biogpu mc`: Monte Carlo light transport in tetrahedral meshes.

use super::output::{OutDir, split_file};
use anyhow::ensure;
use gpu_runtime::Device;
use indicatif::{ProgressBar, ProgressStyle};
use montecarlo_core::io::{read_mesh, results, vtk};
use montecarlo_core::sim::problems;
use montecarlo_core::{Gates, GpuTuning, Plane, RunParams, SimSpec, Simulation, api};
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
    /// Run a named benchmark problem (cube60, cube60b, cube_5med, fourlayer) and print its
    /// summary as JSON (photons/ms, energy balance, the published reference).
    Bench(BenchArgs),
    /// Read a mesh file (Gmsh .msh, VTK .vtk/.vtu, TIM-OS .mesh) and print what it holds
    /// as JSON; optionally write it as .vtu to look at in ParaView.
    Mesh(MeshArgs),
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// cube60 | cube60b | cube_5med | fourlayer.
    problem: String,
    /// Photons (default: 1e6 on a GPU, 1e5 on the CPU).
    #[arg(long)]
    photons: Option<u64>,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Folder with the TIM-OS models (cube_5med/, fourlayer/); default $BIOGPU_MC_DATA.
    #[arg(long)]
    data: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct MeshArgs {
    /// The mesh file.
    file: PathBuf,
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
struct RunArgs {
    /// Simulation file (JSON).
    sim: PathBuf,
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

pub fn run(args: Args, device: &Device) -> anyhow::Result<()> {
    match args.command {
        Command::Example => {
            let text = serde_json::to_string_pretty(&SimSpec::example())?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}")?;
            Ok(())
        }
        Command::Run(a) => run_sim(&a, device),
        Command::Bench(a) => bench(&a, device),
        Command::Mesh(a) => mesh_info(&a),
    }
}

fn bench(a: &BenchArgs, device: &Device) -> anyhow::Result<()> {
    let photons = a
        .photons
        .unwrap_or(if device.is_gpu() { 1_000_000 } else { 100_000 });
    ensure!(photons > 0, "--photons must be at least 1");
    let data = a
        .data
        .clone()
        .or_else(|| std::env::var_os("BIOGPU_MC_DATA").map(PathBuf::from));
    let mut sim = problems::problem(&a.problem, photons, data.as_deref())?;
    sim.params.seed = a.seed;
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed));
    let params = RunParams::new().with_tuning(tuning()?).with_stop(&STOP);
    let (r, _) = api::run(&sim, &params, device)?;
    let s = &r.summary;
    let threads = if device.is_gpu() {
        None
    } else {
        Some(rayon_threads())
    };
    let reference = problems::reference(&a.problem);
    let mut out = serde_json::json!({
        "problem": a.problem,
        "tetrahedra": sim.mesh.len(),
        "reference": reference,
        "summary": serde_json::to_value(s)?,
    });
    if let Some(t) = threads {
        out["photons_per_ms_per_thread"] = (s.photons_per_ms / t as f64).into();
        out["threads"] = t.into();
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn mesh_info(a: &MeshArgs) -> anyhow::Result<()> {
    let imported = read_mesh(&a.file, a.region.as_deref())?;
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
    println!("{}", serde_json::to_string_pretty(&info)?);
    Ok(())
}

fn run_sim(a: &RunArgs, device: &Device) -> anyhow::Result<()> {
    let mut sim = Simulation::from_json(&a.sim)?;
    if let Some(p) = a.photons {
        ensure!(p > 0, "--photons must be at least 1");
        sim.photons = p;
    }
    if let Some(s) = a.seed {
        sim.params.seed = s;
    }
    sim.add_outputs(&a.plane, a.gates)?;
    for note in &sim.notes {
        println!("mesh: {note}");
    }
    let out = OutDir::create(&a.out, a.force, &[&a.sim], results::file_names(&sim))?;
    // A second Ctrl-C while stopping falls through to the default (the handler is set once).
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::Relaxed));
    let bar = ProgressBar::new(sim.photons).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} photons {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    println!(
        "{} tetrahedra, {} regions, {} sources, {} photons on {device}",
        sim.mesh.len(),
        sim.optics.materials.len(),
        sim.sources.len(),
        sim.photons
    );
    let progress = |done: u64, _: u64| bar.set_position(done);
    let params = RunParams::new()
        .with_tuning(tuning()?)
        .with_stop(&STOP)
        .with_progress(&progress);
    let (result, _) = api::run(&sim, &params, device)?;
    bar.finish_and_clear();
    results::write(out.staging(), &sim, &result)?;
    let shown = out.path().display().to_string();
    out.commit()?;
    let s = &result.summary;
    println!(
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
    println!("outputs in {shown}");
    Ok(())
}

/// `biogpu demo`'s Monte Carlo part (see `montecarlo_core::sim::demo`).
pub fn demo(out: &Path, device: &Device) -> anyhow::Result<bool> {
    println!("{}", montecarlo_core::sim::demo(out, &tuning()?, device)?);
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
        run(cli.args, device)
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
            assert!(
                (gates - absorbed).abs() < 1e-9,
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
