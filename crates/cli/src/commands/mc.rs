//! `biogpu mc`: Monte Carlo light transport in tetrahedral meshes.

use super::output::OutDir;
use anyhow::{Context, ensure};
use gpu_runtime::Device;
use indicatif::{ProgressBar, ProgressStyle};
use montecarlo_core::transport::Params;
use montecarlo_core::{
    Material, McResult, Optics, SimSpec, Simulation, Source, generate, l1_norm, vtk,
};
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
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Simulation file (JSON).
    sim: PathBuf,
    /// Output folder: summary.json, result.vtk, tets.csv, exitance.csv.
    #[arg(long, default_value = "biogpu-mc")]
    out: PathBuf,
    /// Override the photon count of the file.
    #[arg(long)]
    photons: Option<u64>,
    /// Override the seed of the file.
    #[arg(long)]
    seed: Option<u64>,
    /// Overwrite existing outputs.
    #[arg(long)]
    force: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);

pub fn run(args: Args, device: &Device) -> anyhow::Result<()> {
    match args.command {
        Command::Example => {
            let text = serde_json::to_string_pretty(&SimSpec::example())?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}")?;
            Ok(())
        }
        Command::Run(a) => run_sim(&a, device),
    }
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
    let out = OutDir::create(&a.out, a.force, &[&a.sim])?;
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
    let result = sim.run(device, Some(&STOP), |done, _| bar.set_position(done))?;
    bar.finish_and_clear();
    write_outputs(&out, &sim, &result)?;
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
    println!("outputs in {}", out.path().display());
    Ok(())
}

/// summary.json always; result.vtk, tets.csv and exitance.csv as the file's `outputs` ask.
fn write_outputs(out: &OutDir, sim: &Simulation, r: &McResult) -> anyhow::Result<()> {
    let absorbed = r.absorbed();
    let fluence = r.fluence(&sim.mesh, &sim.optics);
    let mut summary = serde_json::to_value(&r.summary)?;
    summary["tetrahedra"] = sim.mesh.len().into();
    summary["boundary_triangles"] = sim.mesh.boundary.len().into();
    summary["seed"] = sim.params.seed.into();
    summary["units"] = "absorbed: weight per photon; fluence: 1/length^2 per photon; exitance: 1/length^2 per photon".into();
    out.write_json("summary.json", &summary)?;
    if sim.outputs.vtk {
        let path = out.file("result.vtk")?;
        vtk::write_vtk(
            &path,
            &sim.mesh,
            &[("absorbed", &absorbed), ("fluence", &fluence)],
        )?;
    }
    if sim.outputs.csv {
        let path = out.file("tets.csv")?;
        let mut w = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?,
        );
        writeln!(w, "tet,region,volume,absorbed,fluence")?;
        for t in 1..=sim.mesh.len() {
            writeln!(
                w,
                "{t},{},{:e},{:e},{:e}",
                sim.mesh.regions[t],
                sim.mesh.volumes[t],
                absorbed[t - 1],
                fluence[t - 1]
            )?;
        }
        let path = out.file("exitance.csv")?;
        let mut w = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?,
        );
        writeln!(w, "triangle,tet,face,area,exitance")?;
        for (i, (e, &(t, f))) in r
            .exitance(&sim.mesh)
            .iter()
            .zip(&sim.mesh.boundary)
            .enumerate()
        {
            writeln!(w, "{i},{t},{f},{:e},{e:e}", sim.mesh.boundary_area[i])?;
        }
    }
    Ok(())
}

/// A 12 mm cube of two layers (index step inside, Fresnel at the surface) with a pencil beam:
/// run on `device`; on a GPU also twice on the CPU, and the GPU-CPU L1 norm of fluence must
/// be within 30% of the CPU-CPU one (the paper's criterion, with slack for 50k photons).
pub fn demo(out: &Path, device: &Device) -> anyhow::Result<bool> {
    let mesh = generate::slab_mesh(12.0, &[3.0, 9.0], 6, 2, 5)?;
    let optics = Optics {
        materials: vec![
            Material {
                mua: 0.02,
                mus: 10.0,
                g: 0.9,
                n: 1.4,
            },
            Material {
                mua: 0.05,
                mus: 5.0,
                g: 0.8,
                n: 1.37,
            },
        ],
        n_outside: 1.0,
    };
    let src = [Source::Pencil {
        pos: [0.1, 0.2, 0.0],
        dir: [0.0, 0.0, 1.0],
        power: 1.0,
    }];
    let photons = 50_000;
    let mut sim = Simulation::new(mesh, optics, &src, photons, Params::default())?;
    let got = sim.run(device, None, |_, _| {})?;
    ensure!(
        got.summary.balance_error.abs() < 1e-4,
        "energy balance off: {:?}",
        got.summary
    );
    let dir = out.join("mc");
    let od = OutDir::create(&dir, true, &[])?;
    write_outputs(&od, &sim, &got)?;
    if device.is_gpu() {
        sim.params.seed = 2;
        let a = sim.run_cpu(0, photons);
        sim.params.seed = 3;
        let b = sim.run_cpu(0, photons);
        let fl = |r: &McResult| r.fluence(&sim.mesh, &sim.optics);
        let (cpu, gpu) = (l1_norm(&fl(&a), &fl(&b)), l1_norm(&fl(&a), &fl(&got)));
        println!(
            "mc: {photons} photons on {device}: absorbed {:.4} (CPU {:.4}), L1 GPU-CPU {gpu:.4} vs CPU-CPU {cpu:.4}",
            got.summary.absorbed, a.summary.absorbed
        );
        ensure!(
            gpu <= 1.3 * cpu,
            "GPU fluence differs from the CPU's: L1 {gpu} vs {cpu}"
        );
    } else {
        println!(
            "mc: {photons} photons on the CPU: absorbed {:.4}, escaped {:.4}, {:.0} photons/ms",
            got.summary.absorbed, got.summary.escaped, got.summary.photons_per_ms
        );
    }
    Ok(true)
}
