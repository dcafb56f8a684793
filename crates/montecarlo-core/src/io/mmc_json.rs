//! MMC's JSON input, where its concepts match ours, so MMC users can switch: `Domain.MeshID`
//! (mesh in `node_<id>.dat` / `elem_<id>.dat` beside the JSON), `Domain.Media` (entry 0 is
//! the background: its `n` is the index outside the mesh; entry i is region i),
//! `Session.Photons`, `Session.RNGSeed`, `Forward.T1` (s; becomes the time limit) and
//! `Optode.Source` with `Pos`, `Dir` and `Type` pencil (default), isotropic or disk (`Param1`
//! = radius). Anything else MMC offers (detectors, other source types, time gates, `InitElem`:
//! the start tetrahedron is located from `Pos`) is not read; other source types are errors.

use crate::error::{Error, Result};
use crate::model::optics::{Material, Optics};
use crate::model::params::Params;
use crate::model::source::Source;
use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct MmcInput {
    domain: Domain,
    session: Session,
    #[serde(default)]
    forward: Option<Forward>,
    optode: Optode,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Domain {
    #[serde(rename = "MeshID")]
    mesh_id: String,
    media: Vec<Medium>,
}

#[derive(Debug, Deserialize)]
struct Medium {
    mua: f64,
    mus: f64,
    g: f64,
    n: f64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Session {
    photons: f64,
    #[serde(default, rename = "RNGSeed")]
    rng_seed: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Forward {
    #[serde(rename = "T1")]
    t1: f64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Optode {
    source: MmcSource,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct MmcSource {
    pos: [f64; 3],
    #[serde(default)]
    dir: Option<[f64; 3]>,
    #[serde(default, rename = "Type")]
    kind: Option<String>,
    #[serde(default)]
    param1: Option<[f64; 4]>,
}

/// True when `value` looks like an MMC input (has `Domain` and `Session`).
pub fn is_mmc(value: &serde_json::Value) -> bool {
    value.get("Domain").is_some() && value.get("Session").is_some()
}

/// A resolved MMC input: mesh files, optics, sources, photons and parameters.
pub(crate) struct Resolved {
    pub node: std::path::PathBuf,
    pub elem: std::path::PathBuf,
    pub optics: Optics,
    pub sources: Vec<Source>,
    pub photons: u64,
    pub params: Params,
}

pub(crate) fn resolve(path: &Path, value: serde_json::Value) -> Result<Resolved> {
    let m: MmcInput = serde_json::from_value(value).map_err(|source| Error::Json {
        path: path.to_path_buf(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let media = &m.domain.media;
    if media.len() < 2 {
        return Err(Error::Invalid(format!(
            "{}: Domain.Media needs the background (entry 0) and at least one region",
            path.display()
        )));
    }
    let optics = Optics {
        materials: media[1..]
            .iter()
            .map(|x| Material {
                mua: x.mua,
                mus: x.mus,
                g: x.g,
                n: x.n,
            })
            .collect(),
        n_outside: media[0].n,
    };
    let s = &m.optode.source;
    let dir = s.dir.unwrap_or([0.0, 0.0, 1.0]);
    let kind = s.kind.as_deref().unwrap_or("pencil").to_ascii_lowercase();
    let source = match kind.as_str() {
        "pencil" => Source::Pencil {
            pos: s.pos,
            dir,
            power: 1.0,
        },
        "isotropic" => Source::Isotropic {
            pos: s.pos,
            power: 1.0,
        },
        "disk" => Source::Disk {
            pos: s.pos,
            dir,
            radius: s.param1.map_or(0.0, |p| p[0]),
            power: 1.0,
        },
        other => {
            return Err(Error::Invalid(format!(
                "{}: Optode.Source.Type `{other}` is not supported here (pencil, isotropic, disk)",
                path.display()
            )));
        }
    };
    if !(m.session.photons >= 1.0 && m.session.photons.fract() == 0.0) {
        return Err(Error::Invalid(format!(
            "{}: Session.Photons must be a positive integer",
            path.display()
        )));
    }
    let params = Params {
        seed: m.session.rng_seed.map_or(1, |s| s as u64),
        // MMC's T1 is in seconds; our limit is in ns with lengths in mm (MMC's unit).
        time_limit_ns: m.forward.map(|f| f.t1 * 1e9),
        ..Params::default()
    };
    Ok(Resolved {
        node: base.join(format!("node_{}.dat", m.domain.mesh_id)),
        elem: base.join(format!("elem_{}.dat", m.domain.mesh_id)),
        optics,
        sources: vec![source],
        photons: m.session.photons as u64,
        params,
    })
}
