//! A validated simulation ([`Simulation`]): mesh, optics, placed sources, photons,
//! transport parameters and the outputs to tally (planes and faces of fluence, time gates).
//! Built by [`Simulation::new`] or from a JSON file (`crate::sim::spec`).

use crate::error::{Error, Result};
use crate::model::detector::Detection;
use crate::model::mesh::{FACE_NODES, Mesh};
use crate::model::optics::Optics;
use crate::model::params::Params;
use crate::model::source::{self, Element, Placed, Source};
use crate::model::tally::{FaceSet, Gates};
use serde::{Deserialize, Serialize};

fn yes() -> bool {
    true
}

/// A plane of mesh faces where the fluence of crossing packets is tallied: every face whose
/// three nodes lie within 1e-7 x the mesh size of the plane through `point` with unit
/// normal `normal` (which also gives the sign of the current).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plane {
    pub point: [f64; 3],
    pub normal: [f64; 3],
}

/// What `biogpu mc run` tallies and writes besides `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// `result.vtu` (XML, for ParaView): mesh with region, absorbed and fluence per
    /// tetrahedron (and per gate).
    #[serde(default = "yes")]
    pub vtk: bool,
    /// `result.vtk`: the same in legacy ASCII VTK, for older tools.
    #[serde(default)]
    pub vtk_legacy: bool,
    /// `tets.csv` and `exitance.csv` (and `faces.csv`, `gates.csv` when tallied).
    #[serde(default = "yes")]
    pub csv: bool,
    /// Planes of mesh faces with a fluence tally.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planes: Vec<Plane>,
    /// Single faces with a fluence tally: `[tet, face]` (tet 1-based, face 0..=3 opposite
    /// node `face`); the current's sign follows that face's outward normal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faces: Vec<[u32; 2]>,
    /// Time-of-flight gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<Gates>,
    /// Disk detectors on the surface and the per-photon records they keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detection: Option<Detection>,
}

impl Default for Outputs {
    fn default() -> Self {
        Outputs {
            vtk: true,
            vtk_legacy: false,
            csv: true,
            planes: Vec::new(),
            faces: Vec::new(),
            gates: None,
            detection: None,
        }
    }
}

/// The faces selected by `planes` and `faces`, each once.
fn face_set(mesh: &Mesh, planes: &[Plane], faces: &[[u32; 2]]) -> Result<FaceSet> {
    let mut set = FaceSet::default();
    let mut seen = std::collections::HashSet::new();
    let mut add = |set: &mut FaceSet, t: u32, f: u8, n: [f64; 3], plane: Option<u32>| {
        let nb = mesh.neighbours[t as usize][f as usize];
        // One key per geometric face: the side with the smaller tet id.
        let key = if nb > 0 && nb < t {
            let back = mesh.neighbours[nb as usize]
                .iter()
                .position(|&x| x == t)
                .unwrap_or(0);
            (nb, back as u8)
        } else {
            (t, f)
        };
        if !seen.insert(key) {
            return Err(Error::Invalid(format!(
                "outputs: face {f} of tetrahedron {t} is selected twice"
            )));
        }
        set.faces.push((t, f));
        set.normals.push(n);
        set.areas.push(mesh.face_area(t, f as usize));
        set.plane.push(plane);
        Ok(())
    };
    let tol = 1e-7 * mesh.scale();
    for (i, pl) in planes.iter().enumerate() {
        let l = (pl.normal.iter().map(|v| v * v).sum::<f64>()).sqrt();
        if !(l > 0.0 && l.is_finite()) || pl.point.iter().any(|v| !v.is_finite()) {
            return Err(Error::Invalid(format!(
                "outputs.planes[{i}]: point {:?} and normal {:?} must be finite, the normal non-zero",
                pl.point, pl.normal
            )));
        }
        let n = pl.normal.map(|v| v / l);
        let off = n[0] * pl.point[0] + n[1] * pl.point[1] + n[2] * pl.point[2];
        let before = set.len();
        for t in 1..=mesh.len() as u32 {
            for f in 0..4u8 {
                let nb = mesh.neighbours[t as usize][f as usize];
                if nb > 0 && nb < t {
                    continue; // counted from the other side
                }
                let on = FACE_NODES[f as usize].iter().all(|&k| {
                    let x = mesh.nodes[mesh.tets[t as usize][k] as usize];
                    (n[0] * x[0] + n[1] * x[1] + n[2] * x[2] - off).abs() <= tol
                });
                if on {
                    add(&mut set, t, f, n, Some(i as u32))?;
                }
            }
        }
        if set.len() == before {
            return Err(Error::Invalid(format!(
                "outputs.planes[{i}]: no mesh face lies in the plane through {:?} with normal {:?} (the plane must coincide with mesh faces)",
                pl.point, pl.normal
            )));
        }
    }
    for (i, &[t, f]) in faces.iter().enumerate() {
        if t == 0 || t as usize > mesh.len() || f > 3 {
            return Err(Error::Invalid(format!(
                "outputs.faces[{i}] = [{t}, {f}]: needs a tetrahedron 1..={} and a face 0..=3",
                mesh.len()
            )));
        }
        let p = mesh.faces[t as usize][f as usize];
        add(&mut set, t, f as u8, [p[0], p[1], p[2]], None)?;
    }
    Ok(set)
}

/// A validated simulation ready to run.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub mesh: Mesh,
    pub optics: Optics,
    /// Placed against `mesh` and `optics` by [`Simulation::new`] (start tetrahedra, the
    /// cone's angle in the medium, the specular reflectance at launch): build a new
    /// simulation rather than change those two afterwards.
    pub sources: Vec<Placed>,
    pub photons: u64,
    pub params: Params,
    pub outputs: Outputs,
    /// What the mesh reader ignored or assumed (shown to the user).
    pub notes: Vec<String>,
    /// Elements of volume and surface sources (see [`Placed::first`]).
    pub source_elements: Vec<Element>,
    /// Faces with a fluence tally (from `outputs`).
    pub faces: FaceSet,
    /// Time gates (from `outputs`).
    pub gates: Option<Gates>,
}

impl Simulation {
    /// Validate and place the sources.
    pub fn new(
        mesh: Mesh,
        optics: Optics,
        sources: &[Source],
        photons: u64,
        params: Params,
    ) -> Result<Simulation> {
        optics.validate(&mesh)?;
        if photons == 0 {
            return Err(Error::Invalid("photons must be at least 1".into()));
        }
        if !(params.wmin > 0.0
            && params.wmin < 1.0
            && params.prwin > 1.0
            && params.wmin * params.prwin <= 1.0)
        {
            return Err(Error::Invalid(format!(
                "roulette needs 0 < wmin < 1, prwin > 1 and wmin x prwin <= 1 (got wmin {}, prwin {})",
                params.wmin, params.prwin
            )));
        }
        if let Some(t) = params.time_limit_ns
            && !(t > 0.0)
        {
            return Err(Error::Invalid(format!("time_limit_ns {t} must be > 0")));
        }
        let (placed, source_elements) =
            source::place(sources, &mesh, |r| optics.get(r).n, optics.n_outside)?;
        Ok(Simulation {
            mesh,
            optics,
            sources: placed,
            photons,
            params,
            outputs: Outputs::default(),
            notes: Vec::new(),
            source_elements,
            faces: FaceSet::default(),
            gates: None,
        })
    }

    /// Set the outputs: resolves the tallied planes and faces and checks the gates.
    ///
    /// ```
    /// use montecarlo_core::{Gates, Material, Optics, Outputs, Plane, Simulation, Source, sim::generate};
    /// let mesh = generate::box_mesh([0.0; 3], [4.0; 3], 1.0, 5)?;
    /// let optics = Optics { materials: vec![Material { mua: 0.1, mus: 1.0, g: 0.0, n: 1.0 }], n_outside: 1.0 };
    /// let src = [Source::Isotropic { pos: [2.1, 2.2, 2.3], power: 1.0 }];
    /// let mut sim = Simulation::new(mesh, optics, &src, 1000, Default::default())?;
    /// sim.set_outputs(Outputs {
    ///     planes: vec![Plane { point: [0.0, 0.0, 3.0], normal: [0.0, 0.0, 1.0] }],
    ///     gates: Some(Gates { width_ns: 0.01, count: 20 }),
    ///     ..Outputs::default()
    /// })?;
    /// assert_eq!(sim.faces.len(), 32); // 4 x 4 cells, 2 triangles each
    /// let r = sim.run_cpu(0, 1000);
    /// assert!(r.face_fluence(&sim.faces).iter().sum::<f64>() > 0.0);
    /// # Ok::<(), montecarlo_core::Error>(())
    /// ```
    pub fn set_outputs(&mut self, outputs: Outputs) -> Result<()> {
        if let Some(g) = outputs.gates {
            if !(g.width_ns > 0.0 && g.width_ns.is_finite()) || g.count == 0 {
                return Err(Error::Invalid(format!(
                    "outputs.gates: width_ns {} must be > 0 and count {} >= 1",
                    g.width_ns, g.count
                )));
            }
            let cells = u64::from(g.count) * (self.mesh.len() as u64 + 1);
            if cells > 1 << 27 {
                return Err(Error::Invalid(format!(
                    "outputs.gates: {} gates x {} tetrahedra is more than 2^27 tallies per thread (1 GiB); use fewer gates",
                    g.count,
                    self.mesh.len()
                )));
            }
        }
        if let Some(d) = &outputs.detection {
            d.validate(&self.mesh)?;
        }
        self.faces = face_set(&self.mesh, &outputs.planes, &outputs.faces)?;
        self.gates = outputs.gates;
        self.outputs = outputs;
        Ok(())
    }

    /// Add the tallied `planes` to the outputs and, when given, replace the time gates (the
    /// command line's `--plane` and `--gates` over a simulation file's `outputs`).
    pub fn add_outputs(&mut self, planes: &[Plane], gates: Option<Gates>) -> Result<()> {
        if planes.is_empty() && gates.is_none() {
            return Ok(());
        }
        let mut outputs = self.outputs.clone();
        outputs.planes.extend(planes.iter().cloned());
        if gates.is_some() {
            outputs.gates = gates;
        }
        self.set_outputs(outputs)
    }
}
