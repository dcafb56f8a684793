//! TIM-OS text formats: `.mesh` (nodes, tetrahedra with regions), `.opt` (materials and the
//! outside index) and `.source` (isotropic points, type 1, and pencil beams, type 11).
//! Every number is checked: a short file is a `Truncated` error naming what was missing.

use crate::error::{Error, Result};
use crate::model::mesh::Mesh;
use crate::model::optics::{Material, Optics};
use crate::model::source::Source;
use std::path::Path;

/// Whitespace tokens with their line numbers.
struct Tokens<'a> {
    path: &'a Path,
    items: Vec<(usize, &'a str)>,
    at: usize,
}

impl<'a> Tokens<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        let items = text
            .lines()
            .enumerate()
            .flat_map(|(i, l)| l.split_whitespace().map(move |t| (i + 1, t)))
            .collect();
        Tokens { path, items, at: 0 }
    }

    fn next<T: std::str::FromStr>(&mut self, what: &str) -> Result<T> {
        let Some(&(line, tok)) = self.items.get(self.at) else {
            return Err(Error::Truncated {
                path: self.path.to_path_buf(),
                why: format!("file ends where {what} was expected"),
            });
        };
        self.at += 1;
        tok.parse().map_err(|_| Error::Parse {
            path: self.path.to_path_buf(),
            line,
            why: format!("expected {what}, found `{tok}`"),
        })
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// Read a TIM-OS `.mesh` file.
pub fn read_mesh(path: &Path) -> Result<Mesh> {
    let text = read(path)?;
    let mut tk = Tokens::new(path, &text);
    let nn: usize = tk.next("the node count")?;
    let nt: usize = tk.next("the tetrahedron count")?;
    let mut nodes = Vec::with_capacity(nn);
    for i in 0..nn {
        let what = format!("coordinates of node {}", i + 1);
        nodes.push([tk.next(&what)?, tk.next(&what)?, tk.next(&what)?]);
    }
    let mut tets = Vec::with_capacity(nt);
    let mut regions = Vec::with_capacity(nt);
    for i in 0..nt {
        let what = format!("nodes and region of tetrahedron {}", i + 1);
        let mut t = [0u32; 4];
        for v in &mut t {
            let k: u32 = tk.next(&what)?;
            if k == 0 {
                return Err(Error::BadTet {
                    tet: i + 1,
                    why: "has node index 0; TIM-OS node indices start at 1".into(),
                });
            }
            *v = k - 1;
        }
        tets.push(t);
        regions.push(tk.next(&what)?);
    }
    Mesh::new(nodes, tets, regions)
}

/// Read a TIM-OS `.opt` file.
pub fn read_opt(path: &Path) -> Result<Optics> {
    let text = read(path)?;
    let mut tk = Tokens::new(path, &text);
    let _: u32 = tk.next("the leading 1")?;
    let nr: usize = tk.next("the region count")?;
    let mut materials = Vec::with_capacity(nr);
    for i in 0..nr {
        let what = format!("mua mus g n of region {}", i + 1);
        let m = Material {
            mua: tk.next(&what)?,
            mus: tk.next(&what)?,
            g: tk.next(&what)?,
            n: tk.next(&what)?,
        };
        m.validate(i + 1)?;
        materials.push(m);
    }
    let _: u32 = tk.next("the line `1` before the outside index")?;
    let n_outside = tk.next("the outside refractive index")?;
    Ok(Optics {
        materials,
        n_outside,
    })
}

/// Read a TIM-OS `.source` file; returns the sources and the total photon count it asks for.
/// Pencil beams keep their point and direction (the tetrahedron number in the file is not
/// needed: the start tetrahedron is located from the point).
pub fn read_source(path: &Path) -> Result<(Vec<Source>, u64)> {
    let text = read(path)?;
    let mut tk = Tokens::new(path, &text);
    let ns: usize = tk.next("the source count")?;
    let mut out = Vec::with_capacity(ns);
    let mut photons = 0u64;
    for i in 0..ns {
        let what = format!("source {}", i + 1);
        let kind: u32 = tk.next(&what)?;
        match kind {
            1 => {
                let pos = [tk.next(&what)?, tk.next(&what)?, tk.next(&what)?];
                let n: u64 = tk.next(&what)?;
                photons += n;
                out.push(Source::Isotropic {
                    pos,
                    power: n.max(1) as f64,
                });
            }
            11 => {
                let _tet: u64 = tk.next(&what)?;
                let pos = [tk.next(&what)?, tk.next(&what)?, tk.next(&what)?];
                let dir = [tk.next(&what)?, tk.next(&what)?, tk.next(&what)?];
                let n: u64 = tk.next(&what)?;
                photons += n;
                out.push(Source::Pencil {
                    pos,
                    dir,
                    power: n.max(1) as f64,
                });
            }
            other => {
                return Err(Error::Parse {
                    path: path.to_path_buf(),
                    line: tk.items.get(tk.at - 1).map_or(0, |x| x.0),
                    why: format!(
                        "source type {other} is not supported (1 = isotropic point, 11 = pencil beam)"
                    ),
                });
            }
        }
    }
    Ok((out, photons))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_mesh_names_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("mc-timos-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.mesh");
        std::fs::write(&p, "4\n1\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n1 2 3\n").unwrap();
        let e = read_mesh(&p).unwrap_err();
        assert!(matches!(e, Error::Truncated { .. }), "{e}");
        assert!(e.to_string().contains("tetrahedron 1"), "{e}");
        std::fs::write(&p, "4\n1\n0 0 0\n1 0 x\n").unwrap();
        let e = read_mesh(&p).unwrap_err();
        assert!(e.to_string().contains("line 4"), "{e}");
        let o = dir.join("t.opt");
        std::fs::write(&o, "1\n1\n0.1 10 1.5 1.3\n1\n1.0\n").unwrap();
        let e = read_opt(&o).unwrap_err();
        assert!(e.to_string().contains("g = 1.5"), "{e}");
        std::fs::write(&o, "1\n1\n-0.1 10 0.5 1.3\n1\n1.0\n").unwrap();
        assert!(read_opt(&o).unwrap_err().to_string().contains("mua"));
        std::fs::write(&o, "1\n1\n0.1 10 0.5 0.9\n1\n1.0\n").unwrap();
        assert!(read_opt(&o).unwrap_err().to_string().contains("n = 0.9"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
