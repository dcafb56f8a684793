//! MMC's JSON input, where its concepts match ours, so MMC users can switch: `Domain.MeshID`
//! (mesh in `node_<id>.dat` / `elem_<id>.dat` beside the JSON), `Domain.Media` (entry 0 is
//! the background: its `n` is the index outside the mesh; entry i is region i),
//! `Session.Photons`, `Session.RNGSeed`, `Session.DoSpecular` (MMC's `-V`: 0/1 or
//! false/true, default 0 as in MMC; becomes `Params::specular`, the specular loss of a beam
//! entering at the surface; the source must still lie in or on the mesh), `Forward.T1` (s;
//! becomes the time limit), `Optode.Source` with `Pos`, `Dir` and `Type` pencil
//! (default), isotropic or disk (`Param1` = radius), and `Optode.Detector` (`Pos`, `R`: our
//! disk detectors, records kept up to MMC's default 1e6). Anything else MMC offers (other
//! source types, time gates, `InitElem`: the start tetrahedron is located from `Pos`) is not
//! read; other source types are errors.
//!
//! Checked here, naming the file and the field: every medium's optical properties (entry 0
//! only its `n`), `Session.Photons` a whole number in 1..=2^64-1, `Forward.T1` finite and
//! > 0, `Pos`, `Dir` and `Param1` finite.

use crate::error::{Error, Result};
use crate::model::detector::{Detection, Detector};
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
    /// MMC reads it as an integer and writes it as a boolean; both are accepted.
    #[serde(default)]
    do_specular: Option<serde_json::Value>,
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
    #[serde(default)]
    detector: Vec<MmcDetector>,
}

/// MMC's `Optode.Detector` entry: a disk of radius `R` (mm) at `Pos`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct MmcDetector {
    pos: [f64; 3],
    #[serde(rename = "R")]
    r: f64,
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
    /// `Optode.Detector` as our detectors (checked against the mesh when the simulation
    /// is built).
    pub detection: Option<Detection>,
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
    let bad = |field: String, why: String| {
        Err(Error::Format {
            path: path.to_path_buf(),
            at: field,
            why,
        })
    };
    if !(media[0].n >= 1.0 && media[0].n.is_finite()) {
        return bad(
            "Domain.Media[0].n".into(),
            format!(
                "the background's index {} must be finite and >= 1",
                media[0].n
            ),
        );
    }
    for (i, x) in media.iter().enumerate().skip(1) {
        let m = Material {
            mua: x.mua,
            mus: x.mus,
            g: x.g,
            n: x.n,
        };
        if let Err(e) = m.validate(i) {
            return bad(format!("Domain.Media[{i}]"), e.to_string());
        }
    }
    let s = &m.optode.source;
    let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
    if !finite(&s.pos) || !s.dir.as_ref().is_none_or(|d| finite(d)) {
        return bad(
            "Optode.Source".into(),
            format!("Pos {:?} and Dir {:?} must be finite numbers", s.pos, s.dir),
        );
    }
    if !s.param1.as_ref().is_none_or(|p| finite(p)) {
        return bad(
            "Optode.Source.Param1".into(),
            format!("{:?} must be finite numbers", s.param1),
        );
    }
    if let Some(f) = &m.forward
        && !(f.t1 > 0.0 && f.t1.is_finite())
    {
        return bad(
            "Forward.T1".into(),
            format!("{} s must be finite and > 0", f.t1),
        );
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
    // 2^64 is the first whole f64 above u64::MAX.
    if !(m.session.photons >= 1.0
        && m.session.photons.fract() == 0.0
        && m.session.photons < 2f64.powi(64))
    {
        return bad(
            "Session.Photons".into(),
            format!(
                "{} must be a whole number from 1 to 2^64 - 1",
                m.session.photons
            ),
        );
    }
    // MMC's default is 0 (`cfg->isspecular = 0` in its mmc_utils.c): without the key, no
    // specular loss, so an MMC input gives MMC's result.
    let specular = match &m.session.do_specular {
        None => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::Number(n)) if n.as_f64().is_some_and(|v| v == 0.0 || v == 1.0) => {
            n.as_f64() == Some(1.0)
        }
        Some(other) => {
            return bad(
                "Session.DoSpecular".into(),
                format!("{other} must be 0, 1, false or true"),
            );
        }
    };
    let params = Params {
        seed: m.session.rng_seed.map_or(1, |s| s as u64),
        specular,
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
        detection: (!m.optode.detector.is_empty()).then(|| Detection {
            detectors: m
                .optode
                .detector
                .iter()
                .map(|d| Detector {
                    pos: d.pos,
                    radius: d.r,
                })
                .collect(),
            max_photons: 1_000_000,
            momentum: false,
        }),
    })
}
