//! First contact with montecarlo-core: the demo's two-layer slab (12 x 12 mm; 3 mm of mua
//! 0.02, mus 10 /mm, g 0.9, n 1.4 over 9 mm of mua 0.05, mus 5 /mm, g 0.8, n 1.37; air
//! outside) under a pencil beam at the centre of its top face, run through the library's
//! `api::run`, and where the light went.
//!
//! ```text
//! cargo run --release -p montecarlo-core --example slab -- [DEVICE] [PHOTONS]
//! ```
//!
//! DEVICE as the CLI's `--device` (`cpu`, `auto`, `cuda`, `wgpu`, `wgpu:software`); default
//! `BIOGPU_DEVICE`, else `cpu`. PHOTONS default 100,000. Prints the run (device, photons/ms),
//! the energy balance (absorbed, escaped, specular reflection; balance error), the absorbed
//! fraction and mean fluence per layer, and the escaped fraction per face (diffuse
//! reflectance at the top, transmittance at the bottom, the sides). Takes about a second on
//! the CPU.

use gpu_runtime::{DEVICE_ENV, Device, DeviceRequest};
use montecarlo_core::{RunParams, api, sim::demo_simulation};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args
        .first()
        .cloned()
        .or_else(|| {
            std::env::var(DEVICE_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| "cpu".into());
    let photons: u64 = args.get(1).map_or(Ok(100_000), |s| s.parse())?;
    let device = Device::select(name.parse::<DeviceRequest>()?, true)?.device;

    let sim = demo_simulation(photons)?;
    let (r, info) = api::run(&sim, &RunParams::new(), &device)?;
    let s = &r.summary;
    println!(
        "two-layer slab, {} tets, {} photons on {}: {:.2} s, {:.0} photons/ms",
        sim.mesh.len(),
        s.photons,
        info.device,
        s.seconds,
        s.photons_per_ms
    );
    println!(
        "per photon: absorbed {:.4}, escaped {:.4}, specular {:.4}, roulette {:.1e}; balance \
         error {:.1e}",
        s.absorbed, s.escaped, s.specular, s.roulette, s.balance_error
    );

    // Absorbed weight and fluence per layer (region 1: top, 2: bottom).
    let absorbed = r.absorbed();
    let fluence = r.fluence(&sim.mesh, &sim.optics);
    println!("  layer  depth (mm)  absorbed  mean fluence (1/mm^2)");
    for (region, (_, volume)) in sim.mesh.region_stats() {
        let (mut a, mut phi_v) = (0.0, 0.0);
        for t in 1..=sim.mesh.len() {
            if sim.mesh.regions[t] == region {
                a += absorbed[t - 1];
                phi_v += fluence[t - 1] * sim.mesh.volumes[t];
            }
        }
        let depth = if region == 1 { "0-3" } else { "3-12" };
        println!(
            "  {region:>5}  {depth:>10}  {a:>8.4}  {:>21.4e}",
            phi_v / volume
        );
    }

    // Escaped weight by face of the slab, from each boundary triangle's centroid.
    let (lo, hi) = sim.mesh.bounds();
    let mut faces = [0.0f64; 3]; // top (z = 0), bottom, sides
    for (i, &(t, f)) in sim.mesh.boundary.iter().enumerate() {
        let z = sim.mesh.face_centroid(t, usize::from(f))[2];
        let face = if (z - lo[2]).abs() < 1e-9 {
            0
        } else if (z - hi[2]).abs() < 1e-9 {
            1
        } else {
            2
        };
        faces[face] += r.tally.escaped[i] / s.photons.max(1) as f64;
    }
    println!(
        "escaped: diffuse reflectance (top) {:.4}, transmittance (bottom) {:.4}, sides {:.4}",
        faces[0], faces[1], faces[2]
    );
    Ok(())
}
