//! `biogpu mc`: Monte Carlo light transport in tetrahedral meshes.

use super::output::OutDir;
use anyhow::{Context, ensure};
use gpu_runtime::Device;
use indicatif::{ProgressBar, ProgressStyle};
use montecarlo_core::sim::Plane;
use montecarlo_core::tally::Gates;
use montecarlo_core::transport::Params;
use montecarlo_core::{
    Material, McResult, Optics, SimSpec, Simulation, Source, generate, gmsh, l1_norm, problems, vtk,
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
    let r = sim.run(device, Some(&STOP), |_, _| {})?;
    let s = &r.summary;
    let threads = if device.is_gpu() {
        None
    } else {
        Some(rayon_threads())
    };
    let reference = match a.problem.as_str() {
        "cube60" => "MCX (voxels): absorbed 0.177, 274,000 photons/ms on an H200",
        "cube60b" => "MCX (voxels): absorbed 0.272, 152,000 photons/ms on an H200",
        _ => "TIM-OS / FullMonte model (compare absorbed and L1 with the CPU)",
    };
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
    let ext = a
        .file
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let imported = match ext.as_str() {
        "msh" => gmsh::read_gmsh(&a.file)?,
        "vtk" | "vtu" => vtk::read_vtk(&a.file, a.region.as_deref())?,
        "mesh" => montecarlo_core::Imported {
            mesh: montecarlo_core::timos::read_mesh(&a.file)?,
            ignored: 0,
            notes: Vec::new(),
        },
        other => anyhow::bail!(
            "{}: unknown mesh extension `{other}` (.msh, .vtk, .vtu, .mesh)",
            a.file.display()
        ),
    };
    let m = &imported.mesh;
    let mut regions = std::collections::BTreeMap::new();
    for t in 1..=m.len() {
        let e = regions.entry(m.regions[t]).or_insert((0usize, 0.0f64));
        e.0 += 1;
        e.1 += m.volumes[t];
    }
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
    if let Some(out) = &a.vtu {
        ensure!(
            a.force || !out.exists(),
            "{} exists (use --force to overwrite)",
            out.display()
        );
        vtk::write_vtu(out, m, &[])?;
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
    if !a.plane.is_empty() || a.gates.is_some() {
        let mut outputs = sim.outputs.clone();
        outputs.planes.extend(a.plane.iter().cloned());
        if a.gates.is_some() {
            outputs.gates = a.gates;
        }
        sim.set_outputs(outputs)?;
    }
    for note in &sim.notes {
        println!("mesh: {note}");
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

fn csv_writer(out: &OutDir, name: &str) -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
    let path = out.file(name)?;
    Ok(std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?,
    ))
}

/// summary.json always; result.vtu / result.vtk, tets.csv, exitance.csv, faces.csv and
/// gates.csv as the file's `outputs` ask.
fn write_outputs(out: &OutDir, sim: &Simulation, r: &McResult) -> anyhow::Result<()> {
    let absorbed = r.absorbed();
    let fluence = r.fluence(&sim.mesh, &sim.optics);
    let gates = r.tally.gates();
    let gate_width = sim.gates.map_or(0.0, |g| g.width_ns);
    let mut summary = serde_json::to_value(&r.summary)?;
    summary["tetrahedra"] = sim.mesh.len().into();
    summary["boundary_triangles"] = sim.mesh.boundary.len().into();
    summary["seed"] = sim.params.seed.into();
    summary["units"] = "absorbed: weight per photon; fluence, exitance, face fluence and current: 1/length^2 per photon; gate fluence: integrated over the gate".into();
    if !sim.notes.is_empty() {
        summary["mesh_notes"] = sim.notes.clone().into();
    }
    let face_fluence = r.face_fluence(&sim.faces);
    let face_current = r.face_current(&sim.faces);
    if !sim.outputs.planes.is_empty() {
        let planes: Vec<serde_json::Value> = sim
            .outputs
            .planes
            .iter()
            .enumerate()
            .map(|(p, pl)| {
                let (mut area, mut fl, mut cur, mut faces) = (0.0, 0.0, 0.0, 0usize);
                for i in 0..sim.faces.len() {
                    if sim.faces.plane[i] == Some(p as u32) {
                        let a = sim.faces.areas[i];
                        area += a;
                        fl += face_fluence[i] * a;
                        cur += face_current[i] * a;
                        faces += 1;
                    }
                }
                serde_json::json!({
                    "point": pl.point, "normal": pl.normal, "faces": faces, "area": area,
                    "mean_fluence": fl / area, "net_current": cur,
                })
            })
            .collect();
        summary["planes"] = planes.into();
    }
    if gates > 0 {
        summary["gate_width_ns"] = gate_width.into();
    }
    out.write_json("summary.json", &summary)?;
    let gated: Vec<(String, Vec<f64>)> = (0..gates)
        .map(|g| {
            (
                format!("fluence_gate_{g:03}"),
                r.gated_fluence(g, &sim.mesh, &sim.optics),
            )
        })
        .collect();
    let mut cells: Vec<(&str, &[f64])> = vec![("absorbed", &absorbed), ("fluence", &fluence)];
    for (name, v) in &gated {
        cells.push((name, v));
    }
    if sim.outputs.vtk {
        vtk::write_vtu(&out.file("result.vtu")?, &sim.mesh, &cells)?;
    }
    if sim.outputs.vtk_legacy {
        vtk::write_vtk(&out.file("result.vtk")?, &sim.mesh, &cells)?;
    }
    if sim.outputs.csv {
        let mut w = csv_writer(out, "tets.csv")?;
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
        let mut w = csv_writer(out, "exitance.csv")?;
        writeln!(w, "triangle,tet,face,area,exitance")?;
        for (i, (e, &(t, f))) in r
            .exitance(&sim.mesh)
            .iter()
            .zip(&sim.mesh.boundary)
            .enumerate()
        {
            writeln!(w, "{i},{t},{f},{:e},{e:e}", sim.mesh.boundary_area[i])?;
        }
        if !sim.faces.is_empty() {
            let mut w = csv_writer(out, "faces.csv")?;
            writeln!(w, "index,tet,face,plane,x,y,z,area,fluence,current")?;
            for (i, &(t, f)) in sim.faces.faces.iter().enumerate() {
                let c = sim.mesh.face_centroid(t, f as usize);
                let plane = sim.faces.plane[i].map_or(-1, i64::from);
                writeln!(
                    w,
                    "{i},{t},{f},{plane},{},{},{},{:e},{:e},{:e}",
                    c[0], c[1], c[2], sim.faces.areas[i], face_fluence[i], face_current[i]
                )?;
            }
        }
        if gates > 0 {
            let mut w = csv_writer(out, "gates.csv")?;
            writeln!(w, "gate,start_ns,end_ns,absorbed")?;
            for (g, a) in r.summary.absorbed_per_gate.iter().flatten().enumerate() {
                writeln!(
                    w,
                    "{g},{},{},{a:e}",
                    g as f64 * gate_width,
                    (g + 1) as f64 * gate_width
                )?;
            }
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
