//! Specular reflection at launch: a beam (pencil, cone, disk, Gaussian) entering the mesh
//! through its surface from a different index loses the normal-incidence Fresnel reflectance
//! Rsp = ((n_out - n) / (n_out + n))^2 before it enters (MCML's and MCX's rule), booked as
//! `specular` in the energy ledger. Every expected value here is written out independently of
//! the library (closed forms, not its own functions).

use montecarlo_core::sim::generate;
use montecarlo_core::{Material, Optics, Params, SimSpec, Simulation, Source};
use std::path::Path;

/// Normal-incidence reflectance, written out here rather than taken from the library.
fn rsp(n_out: f64, n: f64) -> f64 {
    let r = (n_out - n) / (n_out + n);
    r * r
}

fn one(mua: f64, mus: f64, g: f64, n: f64, n_out: f64) -> Optics {
    Optics {
        materials: vec![Material { mua, mus, g, n }],
        n_outside: n_out,
    }
}

fn pencil(pos: [f64; 3], dir: [f64; 3]) -> Source {
    Source::Pencil {
        pos,
        dir,
        power: 1.0,
    }
}

/// A thick scattering block (n 1.4 in air, 20 mm deep, mus' = 0.2/mm: semi-infinite for
/// this beam) with a normal pencil on its top face: every photon books exactly Rsp = 1/36,
/// the other ledger entries hold 1 - Rsp, and the ledger (summary.json too) closes.
#[test]
fn surface_pencil_books_rsp_per_photon_and_the_ledger_closes() {
    let mesh = generate::box_mesh([0.0; 3], [20.0; 3], 2.0, 5).unwrap();
    let src = [pencil([10.1, 10.2, 0.0], [0.0, 0.0, 1.0])];
    let photons = 20_000;
    let optics = one(0.05, 2.0, 0.9, 1.4, 1.0);
    let sim = Simulation::new(mesh, optics, &src, photons, Params::default()).unwrap();
    let r = sim.run_cpu(0, photons);
    let s = &r.summary;
    let want = rsp(1.0, 1.4);
    assert!((want - 1.0 / 36.0).abs() < 1e-15);
    // 20,000 equal adds: only summation rounding (~1e-16 relative each) separates them.
    assert!((s.specular - want).abs() < 1e-14, "{s:?}");
    assert!(s.balance_error.abs() < 1e-12, "{s:?}");
    let entered = s.absorbed + s.escaped + s.roulette + s.expired + s.lost;
    assert!((entered - (1.0 - want)).abs() < 1e-12, "{s:?}");
    let json = montecarlo_core::io::results::summary_json(&sim, &r);
    assert_eq!(json["specular"].as_f64(), Some(s.specular), "{json}");
}

/// In a clear slab (no absorption, no scattering) every packet ends by escaping with its
/// whole launch weight, so `escaped` is the mean start weight, exactly: 1 - Rsp with
/// specular reflection on (the default), 1 with it off (and nothing booked as specular).
#[test]
fn clear_slab_start_weight_is_one_minus_rsp_or_one_when_off() {
    let mesh = generate::box_mesh([0.0; 3], [4.0, 4.0, 2.0], 1.0, 5).unwrap();
    let src = [pencil([2.1, 2.2, 0.0], [0.0, 0.0, 1.0])];
    let photons = 10_000;
    let optics = one(0.0, 0.0, 0.0, 1.4, 1.0);
    let want = rsp(1.0, 1.4);
    for on in [true, false] {
        let params = Params::default().with_specular(on);
        let sim = Simulation::new(mesh.clone(), optics.clone(), &src, photons, params).unwrap();
        let s = sim.run_cpu(0, photons).summary;
        let (spec, start) = if on { (want, 1.0 - want) } else { (0.0, 1.0) };
        assert!((s.specular - spec).abs() < 1e-14, "specular {on}: {s:?}");
        assert!((s.escaped - start).abs() < 1e-12, "specular {on}: {s:?}");
        assert!(s.balance_error.abs() < 1e-12, "{s:?}");
    }
}

/// MCML's total reflectance Rsp + Rd for a case with a closed form: a non-scattering slab
/// (n 1.4 in air, mua L = 0.25, normal pencil). With R = Rsp (every crossing is at normal
/// incidence), T = 1 - R and a = exp(-mua L), the weight 1 - R that enters reaches the
/// bottom with a, leaves there with T or returns with R, and so on:
/// Rd = (1 - R) a^2 R T / (1 - R^2 a^2), Tt = (1 - R) a T / (1 - R^2 a^2); total
/// reflectance Rsp + Rd (for mua = 0 Stokes' 2R / (1 + R)). Rd and Tt are fractions of
/// packets of weight at most 1 - R: within 5 binomial standard errors at 2e5 photons. Without
/// the specular loss Tt would be 2.8% (about 20 standard errors) high.
#[test]
fn absorbing_slab_total_reflectance_matches_the_closed_form() {
    let (n, mua, depth) = (1.4, 0.25, 1.0);
    let mesh = generate::box_mesh([0.0; 3], [4.0, 4.0, depth], 1.0, 5).unwrap();
    let src = [pencil([2.1, 2.2, 0.0], [0.0, 0.0, 1.0])];
    let photons = 200_000;
    let sim = Simulation::new(
        mesh,
        one(mua, 0.0, 0.0, n, 1.0),
        &src,
        photons,
        Params::default(),
    )
    .unwrap();
    let r = sim.run_cpu(0, photons);
    let (mut rd, mut tt, mut side) = (0.0, 0.0, 0.0);
    for (i, &(t, f)) in sim.mesh.boundary.iter().enumerate() {
        let nz = sim.mesh.faces[t as usize][f as usize][2];
        let e = r.tally.escaped[i] / photons as f64;
        if nz < -0.5 {
            rd += e;
        } else if nz > 0.5 {
            tt += e;
        } else {
            side += e;
        }
    }
    let big_r = rsp(1.0, n);
    let (t, a) = (1.0 - big_r, (-mua * depth).exp());
    let denom = 1.0 - big_r * big_r * a * a;
    let rd_want = (1.0 - big_r) * a * a * big_r * t / denom;
    let tt_want = (1.0 - big_r) * a * t / denom;
    let se = |p: f64| {
        let q = p / (1.0 - big_r);
        (1.0 - big_r) * (q * (1.0 - q) / photons as f64).sqrt()
    };
    let s = &r.summary;
    eprintln!(
        "Rsp {:.5} (want {big_r:.5}), Rd {rd:.5} (want {rd_want:.5} +- {:.5}), \
         Tt {tt:.5} (want {tt_want:.5} +- {:.5}), total reflectance {:.5}",
        s.specular,
        se(rd_want),
        se(tt_want),
        s.specular + rd
    );
    assert!((s.specular - big_r).abs() < 1e-14, "{s:?}");
    assert!(
        (rd - rd_want).abs() < 5.0 * se(rd_want),
        "Rd {rd} vs {rd_want}"
    );
    assert!(
        (tt - tt_want).abs() < 5.0 * se(tt_want),
        "Tt {tt} vs {tt_want}"
    );
    assert!(
        (s.specular + rd - (big_r + rd_want)).abs() < 5.0 * se(rd_want) + 1e-14,
        "total reflectance"
    );
    assert_eq!(side, 0.0, "a normal beam never reaches the sides");
    assert!(s.balance_error.abs() < 1e-12, "{s:?}");
}

/// Sources that do not cross the surface at launch lose nothing, whatever the index step:
/// isotropic, line and volume sources emit inside the medium, surface sources model light
/// already inside it, a pencil inside the mesh or on the surface pointing out never enters
/// from outside. And a beam entering from a matched outside (n_out = n) loses nothing.
#[test]
fn interior_surface_and_matched_sources_lose_nothing() {
    let mesh = generate::box_mesh([0.0; 3], [8.0; 3], 2.0, 5).unwrap();
    let bottom: Vec<u32> = (0..mesh.boundary.len() as u32)
        .filter(|&i| {
            let (t, f) = mesh.boundary[i as usize];
            mesh.faces[t as usize][f as usize][2] < -0.5
        })
        .collect();
    let cases: Vec<(&str, Source)> = vec![
        (
            "isotropic",
            Source::Isotropic {
                pos: [4.1, 4.2, 4.3],
                power: 1.0,
            },
        ),
        (
            "line",
            Source::Line {
                pos: [2.0, 2.0, 2.0],
                end: [6.0, 6.0, 6.0],
                power: 1.0,
            },
        ),
        (
            "volume",
            Source::Volume {
                region: Some(1),
                tet: None,
                power: 1.0,
            },
        ),
        (
            "Lambertian surface",
            Source::Surface {
                triangles: Some(bottom.clone()),
                region: None,
                dir: None,
                power: 1.0,
            },
        ),
        (
            "directed surface",
            Source::Surface {
                triangles: Some(bottom),
                region: None,
                dir: Some([0.0, 0.0, 1.0]),
                power: 1.0,
            },
        ),
        ("interior pencil", pencil([4.1, 4.2, 3.0], [0.0, 0.0, 1.0])),
        (
            "pencil pointing out",
            pencil([4.1, 4.2, 0.0], [0.0, 0.0, -1.0]),
        ),
    ];
    let optics = one(0.1, 1.0, 0.8, 1.4, 1.0);
    for (what, src) in cases {
        let sim = Simulation::new(
            mesh.clone(),
            optics.clone(),
            &[src],
            2000,
            Params::default(),
        )
        .unwrap();
        assert_eq!(sim.sources[0].rsp, 0.0, "{what}");
        let s = sim.run_cpu(0, 2000).summary;
        assert_eq!(s.specular, 0.0, "{what}: {s:?}");
        assert!(s.balance_error.abs() < 1e-12, "{what}: {s:?}");
    }
    let matched = one(0.1, 1.0, 0.8, 1.4, 1.4);
    let src = [pencil([4.1, 4.2, 0.0], [0.0, 0.0, 1.0])];
    let sim = Simulation::new(mesh, matched, &src, 2000, Params::default()).unwrap();
    let s = sim.run_cpu(0, 2000).summary;
    assert_eq!(s.specular, 0.0, "matched: {s:?}");
    assert!(s.balance_error.abs() < 1e-12, "{s:?}");
}

/// Each beam kind on the surface takes Rsp from the region it enters (for disk and Gaussian:
/// the region of the centre's start tetrahedron): a 12 mm cube with n 1.4 below z = 6 and
/// 1.5 above, in air. Run together, the booked specular weight is each source's Rsp times
/// its share of the photons (within the binomial error of the picks). A disk wider than the
/// mesh loses part of its samples: those are lost whole (weight 1, nothing specular), so
/// specular = Rsp x (1 - lost) exactly.
#[test]
fn every_beam_kind_uses_the_index_of_the_region_it_enters() {
    let mesh = generate::grid_mesh(
        &generate::planes(0.0, 12.0, 6),
        &generate::planes(0.0, 12.0, 6),
        &generate::planes(0.0, 12.0, 6),
        5,
        |c| if c[2] > 6.0 { 2 } else { 1 },
    )
    .unwrap();
    let (n1, n2) = (1.4, 1.5);
    let optics = Optics {
        materials: vec![
            Material {
                mua: 0.1,
                mus: 1.0,
                g: 0.8,
                n: n1,
            },
            Material {
                mua: 0.1,
                mus: 1.0,
                g: 0.8,
                n: n2,
            },
        ],
        n_outside: 1.0,
    };
    let sources = [
        pencil([6.1, 6.2, 0.0], [0.0, 0.0, 1.0]),
        Source::Cone {
            pos: [5.0, 5.0, 0.0],
            dir: [0.0, 0.0, 1.0],
            na: 0.5,
            power: 1.0,
        },
        Source::Disk {
            pos: [6.0, 6.0, 12.0],
            dir: [0.0, 0.0, -1.0],
            radius: 2.0,
            power: 1.0,
        },
        Source::Gaussian {
            pos: [6.5, 5.5, 12.0],
            dir: [0.0, 0.0, -1.0],
            waist: 1.0,
            power: 1.0,
        },
    ];
    let photons = 40_000;
    let sim = Simulation::new(
        mesh.clone(),
        optics.clone(),
        &sources,
        photons,
        Params::default(),
    )
    .unwrap();
    let want = [rsp(1.0, n1), rsp(1.0, n1), rsp(1.0, n2), rsp(1.0, n2)];
    for (s, w) in sim.sources.iter().zip(want) {
        assert!((s.rsp - w).abs() < 1e-16, "{s:?} vs {w}");
    }
    let s = sim.run_cpu(0, photons).summary;
    // Half the photons from each pair; the split between the pairs is binomial.
    let mean = 0.5 * (want[0] + want[2]);
    let se = 0.5 * (want[2] - want[0]) / (photons as f64).sqrt();
    assert!((s.specular - mean).abs() < 5.0 * se, "{s:?} vs {mean}");
    assert!(s.balance_error.abs() < 1e-12 && s.lost == 0.0, "{s:?}");

    let wide = [Source::Disk {
        pos: [6.0, 6.0, 0.0],
        dir: [0.0, 0.0, 1.0],
        radius: 9.0,
        power: 1.0,
    }];
    let sim = Simulation::new(mesh, optics, &wide, photons, Params::default()).unwrap();
    let s = sim.run_cpu(0, photons).summary;
    assert!(s.lost > 0.1, "{s:?}");
    assert!(
        (s.specular - rsp(1.0, n1) * (1.0 - s.lost)).abs() < 1e-14,
        "{s:?}"
    );
    assert!(s.balance_error.abs() < 1e-12, "{s:?}");
}

/// The simulation file's `specular` (default true) reaches the run.
#[test]
fn simulation_file_switches_specular_reflection() {
    let text = |extra: &str| {
        format!(
            r#"{{"mesh": {{"box": {{"origin": [0, 0, 0], "size": [4, 4, 2], "cell": 1,
                                   "tets_per_cell": 5}}}},
                "materials": [{{"mua": 0, "mus": 0, "g": 0, "n": 1.4}}], "n_outside": 1,
                "sources": [{{"type": "pencil", "pos": [2.1, 2.2, 0], "dir": [0, 0, 1]}}],
                "photons": 1000{extra}}}"#
        )
    };
    for (extra, on) in [
        ("", true),
        (r#", "specular": true"#, true),
        (r#", "specular": false"#, false),
    ] {
        let spec: SimSpec = serde_json::from_str(&text(extra)).unwrap();
        let sim = Simulation::from_spec(&spec, Path::new(".")).unwrap();
        assert_eq!(sim.params.specular, on, "{extra}");
        let s = sim.run_cpu(0, 1000).summary;
        let want = if on { rsp(1.0, 1.4) } else { 0.0 };
        assert!((s.specular - want).abs() < 1e-14, "{extra}: {s:?}");
        assert!((s.escaped - (1.0 - want)).abs() < 1e-12, "{extra}: {s:?}");
    }
}
