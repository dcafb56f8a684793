//! Optical properties per region and the refractive index outside the mesh.

use crate::error::{Error, Result};
use crate::model::mesh::Mesh;
use serde::{Deserialize, Serialize};

/// One region's optical properties, in inverse length units of the mesh (1/mm for mm).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Material {
    /// Absorption coefficient (>= 0).
    pub mua: f64,
    /// Scattering coefficient (>= 0).
    pub mus: f64,
    /// Henyey-Greenstein anisotropy, in (-1, 1).
    pub g: f64,
    /// Refractive index (>= 1).
    pub n: f64,
}

impl Material {
    /// Check the ranges; `region` names the region in errors.
    pub fn validate(&self, region: usize) -> Result<()> {
        let bad = |why: String| Err(Error::BadMaterial { region, why });
        if !(self.mua >= 0.0 && self.mua.is_finite()) {
            return bad(format!("mua = {} must be finite and >= 0", self.mua));
        }
        if !(self.mus >= 0.0 && self.mus.is_finite()) {
            return bad(format!("mus = {} must be finite and >= 0", self.mus));
        }
        if !(self.g > -1.0 && self.g < 1.0) {
            return bad(format!("g = {} must lie in (-1, 1)", self.g));
        }
        if !(self.n >= 1.0 && self.n.is_finite()) {
            return bad(format!("n = {} must be finite and >= 1", self.n));
        }
        Ok(())
    }
}

/// Materials of regions 1..=len and the index of the medium outside the mesh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Optics {
    /// `materials[i]` is region `i + 1`.
    pub materials: Vec<Material>,
    /// Refractive index outside the mesh (>= 1).
    pub n_outside: f64,
}

impl Optics {
    /// Check every material, the outside index, and that every tetrahedron's region has one.
    pub fn validate(&self, mesh: &Mesh) -> Result<()> {
        for (i, m) in self.materials.iter().enumerate() {
            m.validate(i + 1)?;
        }
        if !(self.n_outside >= 1.0 && self.n_outside.is_finite()) {
            return Err(Error::BadMaterial {
                region: 0,
                why: format!("n outside = {} must be finite and >= 1", self.n_outside),
            });
        }
        for t in 1..=mesh.len() {
            let r = mesh.regions[t];
            if r == 0 || r as usize > self.materials.len() {
                return Err(Error::UnknownRegion {
                    tet: t,
                    region: r,
                    regions: self.materials.len(),
                });
            }
        }
        Ok(())
    }

    /// Material of `region` (0 = outside: only `n` is meaningful).
    pub fn get(&self, region: u32) -> Material {
        if region == 0 {
            Material {
                mua: 0.0,
                mus: 0.0,
                g: 0.0,
                n: self.n_outside,
            }
        } else {
            self.materials[region as usize - 1]
        }
    }
}
