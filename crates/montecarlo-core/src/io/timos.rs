//! TIM-OS text formats: `.mesh` (nodes, tetrahedra with regions), `.opt` (materials and the
//! outside index) and `.source` (isotropic points, type 1, and pencil beams, type 11).
//!
//! Every number is checked and every error names the file and the line: a count above its cap
//! ([`super::MAX_NODES`], [`super::MAX_TETS`], [`super::MAX_REGIONS`], [`super::MAX_SOURCES`]) is
//! refused, and no more is reserved than the rest of the file can hold; a short file (or a
//! count larger than the data) is a `Truncated` error naming the first missing record and what
//! the header announced; data after the last announced record (a count smaller than the data)
//! is an error too, so header and data must agree.
//! Coordinates must be finite, node indices within 1..=nodes, materials physical
//! ([`Material::validate`]), the outside index finite and >= 1.

use super::{MAX_NODES, MAX_REGIONS, MAX_SOURCES, MAX_TETS, build_mesh, check_count};
use crate::error::{Error, Result};
use crate::model::mesh::Mesh;
use crate::model::optics::{Material, Optics};
use crate::model::source::Source;
use std::path::Path;

/// Whitespace tokens with their line numbers, read lazily (no copy of the file's tokens).
struct Tokens<'a> {
    path: &'a Path,
    text: &'a str,
    pos: usize,
    /// Line at `pos`.
    line: usize,
    /// Line of the last token returned.
    last: usize,
    /// What the header announced, added to a `Truncated` error.
    claim: String,
}

impl<'a> Tokens<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        Tokens {
            path,
            text,
            pos: 0,
            line: 1,
            last: 1,
            claim: String::new(),
        }
    }

    /// The next token and its line.
    fn raw(&mut self) -> Option<(usize, &'a str)> {
        let b = self.text.as_bytes();
        while self.pos < b.len() && b[self.pos].is_ascii_whitespace() {
            if b[self.pos] == b'\n' {
                self.line += 1;
            }
            self.pos += 1;
        }
        if self.pos >= b.len() {
            return None;
        }
        let start = self.pos;
        while self.pos < b.len() && !b[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        self.last = self.line;
        // Token ends are at ASCII whitespace or the ends of the text: char boundaries.
        Some((self.line, &self.text[start..self.pos]))
    }

    fn parse_err(&self, line: usize, why: String) -> Error {
        Error::Parse {
            path: self.path.to_path_buf(),
            line,
            why,
        }
    }

    fn next<T: std::str::FromStr>(&mut self, what: &str) -> Result<T> {
        let Some((line, tok)) = self.raw() else {
            return Err(Error::Truncated {
                path: self.path.to_path_buf(),
                why: format!("file ends where {what} was expected{}", self.claim),
            });
        };
        tok.parse()
            .map_err(|_| self.parse_err(line, format!("expected {what}, found `{tok}`")))
    }

    /// A number that must be finite.
    fn finite(&mut self, what: &str) -> Result<f64> {
        let v: f64 = self.next(what)?;
        if v.is_finite() {
            Ok(v)
        } else {
            Err(self.parse_err(self.last, format!("{what}: {v} is not a finite number")))
        }
    }

    /// A count up to `cap`, and the capacity to reserve for its records (`min_bytes` each
    /// at least): no more than the rest of the file can hold.
    fn count(&mut self, what: &str, cap: usize, min_bytes: usize) -> Result<(usize, usize)> {
        let n: u64 = self.next(&format!("{what} (a whole number >= 0)"))?;
        let left = self.text.len() - self.pos;
        check_count(what, n, cap, min_bytes, left).map_err(|why| self.parse_err(self.last, why))
    }

    /// The file must end here: anything left means a count smaller than the data.
    fn end(&mut self, announced: &str) -> Result<()> {
        match self.raw() {
            None => Ok(()),
            Some((line, tok)) => Err(self.parse_err(
                line,
                format!(
                    "unexpected `{tok}` after {announced}: the file holds more data than its \
                     header announces (header and data must agree)"
                ),
            )),
        }
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// Read a TIM-OS `.mesh` file.
pub fn read_mesh(path: &Path) -> Result<Mesh> {
    let text = read(path)?;
    let mut tk = Tokens::new(path, &text);
    // A node is three numbers, a tetrahedron five: at least 6 and 10 bytes.
    let (nn, node_room) = tk.count("the node count", MAX_NODES, 6)?;
    let (nt, tet_room) = tk.count("the tetrahedron count", MAX_TETS, 10)?;
    let count_line = tk.last;
    let lines = if count_line == 1 {
        "line 1 announces".to_string()
    } else {
        format!("lines 1-{count_line} announce")
    };
    tk.claim = format!(" ({lines} {nn} nodes and {nt} tetrahedra)");
    if nt == 0 {
        return Err(tk.parse_err(
            tk.last,
            "the tetrahedron count is 0: a mesh needs at least one".into(),
        ));
    }
    let mut nodes = Vec::with_capacity(node_room);
    for i in 0..nn {
        let what = format!("coordinate of node {}", i + 1);
        nodes.push([tk.finite(&what)?, tk.finite(&what)?, tk.finite(&what)?]);
    }
    let mut tets = Vec::with_capacity(tet_room);
    let mut regions = Vec::with_capacity(tet_room);
    for i in 0..nt {
        let what = format!("nodes and region of tetrahedron {}", i + 1);
        let mut t = [0u32; 4];
        for v in &mut t {
            let k: u64 = tk.next(&what)?;
            if k == 0 || k > nn as u64 {
                return Err(tk.parse_err(
                    tk.last,
                    format!(
                        "tetrahedron {} refers to node {k}; node indices run from 1 to {nn} (TIM-OS \
                         node indices start at 1)",
                        i + 1
                    ),
                ));
            }
            *v = (k - 1) as u32;
        }
        tets.push(t);
        regions.push(tk.next(&what)?);
    }
    tk.end(&format!(
        "the {nt} tetrahedra announced on line {count_line}"
    ))?;
    build_mesh(path, nodes, tets, regions, |k| {
        // Find the tetrahedron's line again (only on error).
        let mut again = Tokens::new(path, &text);
        let skip = 2 + 3 * nn + 5 * (k.max(1) - 1);
        for _ in 0..skip {
            again.raw();
        }
        again
            .raw()
            .map_or_else(|| "end of file".into(), |(l, _)| format!("line {l}"))
    })
}

/// Read a TIM-OS `.opt` file.
pub fn read_opt(path: &Path) -> Result<Optics> {
    let text = read(path)?;
    let mut tk = Tokens::new(path, &text);
    let _: u32 = tk.next("the leading 1")?;
    // A material is four numbers: at least 8 bytes.
    let (nr, room) = tk.count("the region count", MAX_REGIONS, 8)?;
    let count_line = tk.last;
    tk.claim = format!(" (line {count_line} announces {nr} regions)");
    if nr == 0 {
        return Err(tk.parse_err(
            count_line,
            "the region count is 0: at least one region needs a material".into(),
        ));
    }
    let mut materials = Vec::with_capacity(room);
    for i in 0..nr {
        let what = format!("mua mus g n of region {}", i + 1);
        let m = Material {
            mua: tk.next(&what)?,
            mus: tk.next(&what)?,
            g: tk.next(&what)?,
            n: tk.next(&what)?,
        };
        m.validate(i + 1)
            .map_err(|e| tk.parse_err(tk.last, e.to_string()))?;
        materials.push(m);
    }
    let _: u32 = tk
        .next("the line `1` before the outside index")
        .map_err(|e| match e {
            Error::Parse { path, line, why } => Error::Parse {
                path,
                line,
                why: format!(
                    "{why} (line {count_line} announces {nr} regions: is there a material \
                     line too many?)"
                ),
            },
            other => other,
        })?;
    let n_outside: f64 = tk.next("the outside refractive index")?;
    if !(n_outside >= 1.0 && n_outside.is_finite()) {
        return Err(tk.parse_err(
            tk.last,
            format!("the outside refractive index {n_outside} must be finite and >= 1"),
        ));
    }
    tk.end("the outside refractive index")?;
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
    // A source is at least five numbers (type 1): 10 bytes.
    let (ns, room) = tk.count("the source count", MAX_SOURCES, 10)?;
    let count_line = tk.last;
    tk.claim = format!(" (line {count_line} announces {ns} sources)");
    if ns == 0 {
        return Err(tk.parse_err(
            tk.last,
            "the source count is 0: at least one source is needed".into(),
        ));
    }
    let mut out = Vec::with_capacity(room);
    let mut photons = 0u64;
    let mut add = |tk: &Tokens, n: u64| {
        photons = photons.checked_add(n).ok_or_else(|| {
            tk.parse_err(
                tk.last,
                "the photon counts add up to more than 2^64 - 1".into(),
            )
        })?;
        Ok::<f64, Error>(n.max(1) as f64)
    };
    for i in 0..ns {
        let what = format!("source {}", i + 1);
        let kind: u32 = tk.next(&format!("the type of {what}"))?;
        match kind {
            1 => {
                let at = format!("position of {what}");
                let pos = [tk.finite(&at)?, tk.finite(&at)?, tk.finite(&at)?];
                let n: u64 = tk.next(&format!("the photon count of {what}"))?;
                let power = add(&tk, n)?;
                out.push(Source::Isotropic { pos, power });
            }
            11 => {
                let _tet: u64 = tk.next(&format!("the tetrahedron of {what}"))?;
                let at = format!("position of {what}");
                let pos = [tk.finite(&at)?, tk.finite(&at)?, tk.finite(&at)?];
                let at = format!("direction of {what}");
                let dir = [tk.finite(&at)?, tk.finite(&at)?, tk.finite(&at)?];
                if dir.iter().all(|&d| d == 0.0) {
                    return Err(tk.parse_err(
                        tk.last,
                        format!("the direction of {what} is (0, 0, 0); it must be non-zero"),
                    ));
                }
                let n: u64 = tk.next(&format!("the photon count of {what}"))?;
                let power = add(&tk, n)?;
                out.push(Source::Pencil { pos, dir, power });
            }
            other => {
                return Err(tk.parse_err(
                    tk.last,
                    format!(
                        "source type {other} is not supported (1 = isotropic point, 11 = pencil beam)"
                    ),
                ));
            }
        }
    }
    tk.end(&format!("the {ns} sources announced on line {count_line}"))?;
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
