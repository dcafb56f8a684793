//! Gmsh `.msh` reader: format 2.2 and 4.1, ASCII and binary (either byte order).
//!
//! Hand-written: the maintained Rust crate (`mshio`) reads only 4.1, and one reader for both
//! versions gives the same line-numbered errors. Only 4-node tetrahedra (element type 4) are
//! kept; every other element (points, lines, triangles, second-order tets, ...) is counted and
//! reported in [`Imported::notes`]. The region of a tetrahedron is its physical tag (v2: the
//! first tag; v4: the first physical tag of its volume entity from `$Entities`), else its
//! elementary (entity) tag. Node tags may be sparse; unknown sections are skipped.
//!
//! Untrusted input: every count is checked against the bytes left in the file before anything
//! is reserved for it, the `$Nodes`/`$Elements` headers must agree with their blocks, size
//! arithmetic is checked, coordinates must be finite and tetrahedra must have volume; errors
//! name the file and the line (ASCII) or byte offset (binary data).

use super::build_mesh;
use crate::error::{Error, Result};
use crate::model::mesh::{Imported, Mesh};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Read a Gmsh mesh.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("gmsh-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let p = dir.join("tet.msh");
/// std::fs::write(&p, "$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n4\n1 0 0 0\n2 1 0 0\n\
///     3 0 1 0\n4 0 0 1\n$EndNodes\n$Elements\n2\n1 15 2 0 1 1\n2 4 2 7 1 1 2 3 4\n$EndElements\n")?;
/// let m = montecarlo_core::io::gmsh::read_gmsh(&p)?;
/// assert_eq!(m.mesh.len(), 1);
/// assert_eq!(m.mesh.regions[1], 7); // the physical tag
/// assert_eq!(m.ignored, 1); // the point element
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_gmsh(path: &Path) -> Result<Imported> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let mut c = Cursor {
        path,
        b: &bytes,
        pos: 0,
        line: 1,
        binary: false,
        swap: false,
    };
    c.expect("$MeshFormat")?;
    let version = c.token("the format version")?.to_string();
    let file_type: u32 = c.parse("the file type (0 ASCII, 1 binary)")?;
    let data_size: u32 = c.parse("the data size")?;
    if file_type == 1 {
        c.end_of_line();
        let one = c.bytes(4, "the binary endianness check")?;
        let one = i32::from_le_bytes([one[0], one[1], one[2], one[3]]);
        c.swap = match one {
            1 => false,
            0x0100_0000 => true,
            _ => return Err(c.err("binary file: the endianness check is not the integer 1")),
        };
        c.binary = true;
    } else if file_type != 0 {
        return Err(c.err(&format!(
            "file type {file_type} is neither 0 (ASCII) nor 1 (binary)"
        )));
    }
    let major = if version.starts_with("2.") || version == "2" {
        2
    } else if version == "4.1" {
        4
    } else if version.starts_with('4') {
        return Err(c.err(&format!(
            "MSH {version} is not supported: save as 4.1 or 2.2 (Gmsh: -format msh41 or msh22)"
        )));
    } else {
        return Err(c.err(&format!(
            "MSH version {version} is not supported (2.2 or 4.1)"
        )));
    };
    if c.binary && data_size != 8 {
        return Err(c.err(&format!(
            "binary MSH with data size {data_size}: only 8-byte size_t is supported"
        )));
    }
    c.expect("$EndMeshFormat")?;

    let mut entity_region: HashMap<i32, i32> = HashMap::new();
    let mut nodes: Option<Nodes> = None;
    let mut elements: Option<Elements> = None;
    while let Some(section) = c.next_section()? {
        match (major, section) {
            (4, "$Entities") => {
                entity_region = c.entities()?;
                c.expect("$EndEntities")?;
            }
            (_, "$Nodes") => {
                nodes = Some(if major == 2 {
                    c.nodes_v2()?
                } else {
                    c.nodes_v4()?
                });
                c.expect("$EndNodes")?;
            }
            (_, "$Elements") => {
                elements = Some(if major == 2 {
                    c.elements_v2()?
                } else {
                    c.elements_v4(&entity_region)?
                });
                c.expect("$EndElements")?;
            }
            (_, other) => c.skip_section(other)?,
        }
    }
    let (nodes, index) = nodes.ok_or_else(|| Error::Truncated {
        path: path.to_path_buf(),
        why: "no $Nodes section".into(),
    })?;
    let el = elements.ok_or_else(|| Error::Truncated {
        path: path.to_path_buf(),
        why: "no $Elements section".into(),
    })?;
    let mut tets = Vec::with_capacity(el.tets.len());
    let mut regions = Vec::with_capacity(el.tets.len());
    let mut untagged = 0usize;
    let element_err = |tag: u64, why: String| Error::Format {
        path: path.to_path_buf(),
        at: format!("element {tag}"),
        why,
    };
    for (k, (tag, t, region)) in el.tets.iter().enumerate() {
        let mut ids = [0u32; 4];
        for (i, v) in t.iter().enumerate() {
            ids[i] = *index.get(v).ok_or_else(|| {
                element_err(
                    *tag,
                    format!(
                        "tetrahedron {} (1-based) refers to node tag {v}, which is not in $Nodes",
                        k + 1
                    ),
                )
            })?;
        }
        let r = match (*region).cmp(&0) {
            std::cmp::Ordering::Greater => *region as u32,
            std::cmp::Ordering::Equal => {
                untagged += 1;
                1
            }
            std::cmp::Ordering::Less => {
                return Err(element_err(
                    *tag,
                    format!(
                        "tetrahedron {} (1-based) has negative region tag {region}",
                        k + 1
                    ),
                ));
            }
        };
        tets.push(ids);
        regions.push(r);
    }
    if tets.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no 4-node tetrahedra (element type 4); elements found: {}",
            path.display(),
            describe(&el.ignored)
        )));
    }
    let mut notes = Vec::new();
    let ignored: usize = el.ignored.values().sum();
    if ignored > 0 {
        notes.push(format!(
            "ignored {ignored} elements that are not 4-node tetrahedra ({})",
            describe(&el.ignored)
        ));
    }
    if untagged > 0 {
        notes.push(format!(
            "{untagged} tetrahedra had no physical or elementary tag: region 1"
        ));
    }
    let mesh = build_mesh(path, nodes, tets, regions, |k| {
        el.tets
            .get(k.max(1) - 1)
            .map_or_else(|| "mesh".into(), |t| format!("element {}", t.0))
    })?;
    Ok(Imported {
        mesh,
        ignored,
        notes,
    })
}

/// Nodes per Gmsh element type (the types Gmsh writes), needed to skip binary records.
fn nodes_per_element(kind: i32) -> Option<usize> {
    Some(match kind {
        15 => 1,
        1 => 2,
        2 | 8 => 3,
        3 | 4 | 26 => 4,
        7 | 27 => 5,
        6 | 9 | 28 => 6,
        5 | 16 => 8,
        10 | 20 => 9,
        11 | 21 => 10,
        22 => 12,
        19 => 13,
        14 => 14,
        18 | 23 | 24 => 15,
        13 => 18,
        17 | 29 => 20,
        25 => 21,
        12 => 27,
        30 => 35,
        31 => 56,
        92 => 64,
        93 => 125,
        _ => return None,
    })
}

fn type_name(kind: i32) -> &'static str {
    match kind {
        15 => "point",
        1 => "line",
        2 => "triangle",
        3 => "quadrangle",
        5 => "hexahedron",
        6 => "prism",
        7 => "pyramid",
        9 => "6-node triangle",
        11 => "10-node tetrahedron",
        _ => "other",
    }
}

fn describe(counts: &BTreeMap<i32, usize>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(k, n)| format!("{n} of type {k} ({})", type_name(*k)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Node coordinates and node tag -> index.
type Nodes = (Vec<[f64; 3]>, HashMap<u64, u32>);

/// Tetrahedra as (element tag, node tags, region; 0 = untagged) and counts of other types.
struct Elements {
    tets: Vec<(u64, [u64; 4], i32)>,
    ignored: BTreeMap<i32, usize>,
}

/// A cursor over the file's bytes that reads ASCII tokens (tracking the line) and binary
/// values (tracking the byte offset), as the sections of a binary `.msh` mix both.
struct Cursor<'a> {
    path: &'a Path,
    b: &'a [u8],
    pos: usize,
    line: usize,
    /// The file is binary (section data are binary; headers stay ASCII).
    binary: bool,
    /// Binary data are in the other byte order.
    swap: bool,
}

impl<'a> Cursor<'a> {
    fn err(&self, why: &str) -> Error {
        Error::Parse {
            path: self.path.to_path_buf(),
            line: self.line,
            why: why.to_string(),
        }
    }

    fn bin_err(&self, why: &str) -> Error {
        Error::Format {
            path: self.path.to_path_buf(),
            at: format!("byte {}", self.pos),
            why: why.to_string(),
        }
    }

    /// An error at the current line (ASCII) or byte (binary data).
    fn fail(&self, why: &str) -> Error {
        if self.binary {
            self.bin_err(why)
        } else {
            self.err(why)
        }
    }

    fn truncated(&self, what: &str) -> Error {
        Error::Truncated {
            path: self.path.to_path_buf(),
            why: format!("file ends where {what} was expected (line {})", self.line),
        }
    }

    fn skip_ws(&mut self) {
        while let Some(&ch) = self.b.get(self.pos) {
            if ch == b'\n' {
                self.line += 1;
            } else if !ch.is_ascii_whitespace() {
                break;
            }
            self.pos += 1;
        }
    }

    fn token(&mut self, what: &str) -> Result<&'a str> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.b.len() && !self.b[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.truncated(what));
        }
        std::str::from_utf8(&self.b[start..self.pos])
            .map_err(|_| self.err(&format!("expected {what}, found non-text bytes")))
    }

    fn parse<T: std::str::FromStr>(&mut self, what: &str) -> Result<T> {
        let tok = self.token(what)?;
        tok.parse()
            .map_err(|_| self.err(&format!("expected {what}, found `{tok}`")))
    }

    fn expect(&mut self, word: &str) -> Result<()> {
        let tok = self.token(word)?;
        if tok == word {
            Ok(())
        } else {
            Err(self.err(&format!("expected `{word}`, found `{tok}`")))
        }
    }

    /// Step past the rest of the current line (binary data start on the next byte).
    fn end_of_line(&mut self) {
        while let Some(&ch) = self.b.get(self.pos) {
            self.pos += 1;
            if ch == b'\n' {
                self.line += 1;
                break;
            }
        }
    }

    /// The rest of the current line (ASCII element records are one per line).
    fn line_tokens(&mut self, what: &str) -> Result<(usize, Vec<&'a str>)> {
        self.skip_ws();
        if self.pos >= self.b.len() {
            return Err(self.truncated(what));
        }
        let line = self.line;
        let start = self.pos;
        while self.pos < self.b.len() && self.b[self.pos] != b'\n' {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.b[start..self.pos])
            .map_err(|_| self.err(&format!("expected {what}, found non-text bytes")))?;
        Ok((line, text.split_whitespace().collect()))
    }

    fn next_section(&mut self) -> Result<Option<&'a str>> {
        self.skip_ws();
        if self.pos >= self.b.len() {
            return Ok(None);
        }
        let tok = self.token("a section")?;
        if tok.starts_with('$') && !tok.starts_with("$End") {
            if self.binary {
                // Binary section data start after the header's newline.
                self.end_of_line();
            }
            Ok(Some(tok))
        } else {
            Err(self.err(&format!(
                "expected a section such as `$Nodes`, found `{tok}`"
            )))
        }
    }

    fn skip_section(&mut self, name: &str) -> Result<()> {
        let end = format!("$End{}", &name[1..]);
        let hay = &self.b[self.pos..];
        let at = hay
            .windows(end.len())
            .position(|w| w == end.as_bytes())
            .ok_or_else(|| Error::Truncated {
                path: self.path.to_path_buf(),
                why: format!("section {name} (line {}) has no {end}", self.line),
            })?;
        self.line += hay[..at].split(|&c| c == b'\n').count() - 1;
        self.pos += at + end.len();
        Ok(())
    }

    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.b.len() - self.pos {
            return Err(Error::Truncated {
                path: self.path.to_path_buf(),
                why: format!("binary data end at byte {} inside {what}", self.b.len()),
            });
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn bin_i32(&mut self, what: &str) -> Result<i32> {
        let b: [u8; 4] = self.bytes(4, what)?.try_into().unwrap_or([0; 4]);
        let v = i32::from_le_bytes(b);
        Ok(if self.swap { v.swap_bytes() } else { v })
    }

    fn bin_u64(&mut self, what: &str) -> Result<u64> {
        let b: [u8; 8] = self.bytes(8, what)?.try_into().unwrap_or([0; 8]);
        let v = u64::from_le_bytes(b);
        Ok(if self.swap { v.swap_bytes() } else { v })
    }

    fn bin_f64(&mut self, what: &str) -> Result<f64> {
        let b: [u8; 8] = self.bytes(8, what)?.try_into().unwrap_or([0; 8]);
        let v = u64::from_le_bytes(b);
        Ok(f64::from_bits(if self.swap { v.swap_bytes() } else { v }))
    }

    /// A count that must fit the remaining bytes (guards allocations against corrupt sizes).
    fn count(&self, n: u64, bytes_each: usize, what: &str) -> Result<usize> {
        let left = (self.b.len() - self.pos) as u64;
        if n.saturating_mul(bytes_each.max(1) as u64) > left {
            return Err(self.fail(&format!(
                "{what} {n} is larger than the rest of the file ({left} bytes, at least \
                 {bytes_each} per record): truncated file or wrong count"
            )));
        }
        Ok(n as usize)
    }

    fn size(&mut self, what: &str) -> Result<u64> {
        if self.binary {
            self.bin_u64(what)
        } else {
            self.parse(what)
        }
    }

    fn int(&mut self, what: &str) -> Result<i32> {
        if self.binary {
            self.bin_i32(what)
        } else {
            self.parse(what)
        }
    }

    fn float(&mut self, what: &str) -> Result<f64> {
        if self.binary {
            self.bin_f64(what)
        } else {
            self.parse(what)
        }
    }

    /// Check a coordinate is finite (binary garbage reads as anything).
    fn finite(&self, x: [f64; 3], node: u64) -> Result<[f64; 3]> {
        if x.iter().all(|v| v.is_finite()) {
            Ok(x)
        } else {
            Err(self.fail(&format!(
                "node {node} has non-finite coordinates {x:?} (finite numbers expected)"
            )))
        }
    }

    fn nodes_v2(&mut self) -> Result<Nodes> {
        let n: u64 = self.parse("the node count")?;
        let n = self.count(n, if self.binary { 28 } else { 8 }, "node count")?;
        if self.binary {
            self.end_of_line();
        }
        let mut nodes = Vec::with_capacity(n);
        let mut index = HashMap::with_capacity(n);
        for i in 0..n {
            let what = format!("node {} of {n}", i + 1);
            let tag = if self.binary {
                self.bin_i32(&what)? as i64 as u64
            } else {
                self.parse(&what)?
            };
            let x = [self.float(&what)?, self.float(&what)?, self.float(&what)?];
            nodes.push(self.finite(x, tag)?);
            if index.insert(tag, i as u32).is_some() {
                return Err(self.fail(&format!("node tag {tag} appears twice")));
            }
        }
        Ok((nodes, index))
    }

    fn elements_v2(&mut self) -> Result<Elements> {
        let n: u64 = self.parse("the element count")?;
        let n = self.count(n, if self.binary { 8 } else { 6 }, "element count")?;
        let mut el = Elements {
            tets: Vec::with_capacity(n),
            ignored: BTreeMap::new(),
        };
        if self.binary {
            self.end_of_line();
            let mut done = 0;
            while done < n {
                let kind = self.bin_i32("an element block header")?;
                let follow = self.bin_i32("an element block header")?;
                let ntags = self.bin_i32("an element block header")?;
                let nn = nodes_per_element(kind).ok_or_else(|| {
                    self.bin_err(&format!("unknown element type {kind}: cannot read past it"))
                })?;
                if follow < 0 || ntags < 0 || done + follow as usize > n {
                    return Err(self.bin_err(&format!(
                        "element block of {follow} elements with {ntags} tags does not fit the count {n}"
                    )));
                }
                for _ in 0..follow {
                    let what = format!("element {} of {n}", done + 1);
                    let tag = self.bin_i32(&what)? as i64 as u64;
                    let mut tags = [0i32; 2];
                    for k in 0..ntags as usize {
                        let v = self.bin_i32(&what)?;
                        if k < 2 {
                            tags[k] = v;
                        }
                    }
                    let mut t = [0u64; 4];
                    for k in 0..nn {
                        let v = self.bin_i32(&what)? as i64 as u64;
                        if kind == 4 {
                            t[k] = v;
                        }
                    }
                    if kind == 4 {
                        el.tets
                            .push((tag, t, region_v2(&tags[..ntags.min(2) as usize])));
                    } else {
                        *el.ignored.entry(kind).or_default() += 1;
                    }
                    done += 1;
                }
            }
        } else {
            for i in 0..n {
                let what = format!("element {} of {n}", i + 1);
                let (line, tok) = self.line_tokens(&what)?;
                let num = |k: usize| -> Result<i64> {
                    tok.get(k)
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| Error::Parse {
                            path: self.path.to_path_buf(),
                            line,
                            why: format!(
                                "expected `id type ntags tags... nodes...` for {what}, found `{}`",
                                tok.join(" ")
                            ),
                        })
                };
                let (tag, kind, ntags) = (num(0)?, num(1)? as i32, num(2)?.max(0) as usize);
                if kind == 4 {
                    if ntags.checked_add(7) != Some(tok.len()) {
                        return Err(Error::Parse {
                            path: self.path.to_path_buf(),
                            line,
                            why: format!(
                                "tetrahedron (element {tag}) needs 3 + {ntags} tags + 4 nodes, found {} numbers",
                                tok.len()
                            ),
                        });
                    }
                    let tags: Vec<i32> = (0..ntags.min(2))
                        .map(|k| num(3 + k).map(|v| v as i32))
                        .collect::<Result<_>>()?;
                    let mut t = [0u64; 4];
                    for (k, v) in t.iter_mut().enumerate() {
                        *v = num(3 + ntags + k)? as u64;
                    }
                    el.tets.push((tag as u64, t, region_v2(&tags)));
                } else {
                    *el.ignored.entry(kind).or_default() += 1;
                }
            }
        }
        Ok(el)
    }

    /// v4.1 `$Entities`: volume tag -> region (first physical tag, else the volume tag).
    fn entities(&mut self) -> Result<HashMap<i32, i32>> {
        let counts = [
            self.size("the number of points")?,
            self.size("the number of curves")?,
            self.size("the number of surfaces")?,
            self.size("the number of volumes")?,
        ];
        let mut out = HashMap::new();
        for (dim, &count) in counts.iter().enumerate() {
            let count = self.count(count, 4, "entity count")?;
            for i in 0..count {
                let what = format!("entity {} of dimension {dim}", i + 1);
                let tag = self.int(&what)?;
                for _ in 0..(if dim == 0 { 3 } else { 6 }) {
                    self.float(&what)?;
                }
                let nphys = self.size(&what)?;
                let nphys = self.count(nphys, 4, "physical tag count")?;
                let mut first = None;
                for _ in 0..nphys {
                    let p = self.int(&what)?;
                    first.get_or_insert(p);
                }
                if dim > 0 {
                    let nb = self.size(&what)?;
                    let nb = self.count(nb, 4, "bounding entity count")?;
                    for _ in 0..nb {
                        self.int(&what)?;
                    }
                }
                if dim == 3 {
                    out.insert(tag, first.unwrap_or(tag));
                }
            }
        }
        Ok(out)
    }

    fn nodes_v4(&mut self) -> Result<Nodes> {
        let blocks = self.size("the number of node blocks")?;
        let total = self.size("the number of nodes")?;
        self.size("the smallest node tag")?;
        self.size("the largest node tag")?;
        let total = self.count(total, 8, "node count")?;
        let mut nodes = Vec::with_capacity(total);
        let mut index = HashMap::with_capacity(total);
        for b in 0..blocks {
            let what = format!("node block {}", b + 1);
            let dim = self.int(&what)?;
            self.int(&what)?;
            let parametric = self.int(&what)?;
            let n = self.size(&what)?;
            let n = self.count(n, 8, "nodes in a block")?;
            if n > total - nodes.len() {
                return Err(self.fail(&format!(
                    "{what} holds {n} nodes, more than the {total} the $Nodes header announces"
                )));
            }
            let mut tags = Vec::with_capacity(n);
            for _ in 0..n {
                tags.push(self.size(&what)?);
            }
            let extra = if parametric == 1 {
                dim.max(0) as usize
            } else {
                0
            };
            for &tag in &tags {
                let what = format!("coordinates of node {tag}");
                let x = [self.float(&what)?, self.float(&what)?, self.float(&what)?];
                for _ in 0..extra {
                    self.float(&what)?;
                }
                if index.insert(tag, nodes.len() as u32).is_some() {
                    return Err(self.fail(&format!("node tag {tag} appears twice")));
                }
                nodes.push(self.finite(x, tag)?);
            }
        }
        if nodes.len() != total {
            return Err(self.fail(&format!(
                "$Nodes header says {total} nodes, the blocks hold {}",
                nodes.len()
            )));
        }
        Ok((nodes, index))
    }

    fn elements_v4(&mut self, entity_region: &HashMap<i32, i32>) -> Result<Elements> {
        let blocks = self.size("the number of element blocks")?;
        let total = self.size("the number of elements")?;
        self.size("the smallest element tag")?;
        self.size("the largest element tag")?;
        let total = self.count(total, 8, "element count")?;
        let mut el = Elements {
            tets: Vec::with_capacity(total),
            ignored: BTreeMap::new(),
        };
        let mut seen = 0usize;
        for b in 0..blocks {
            let what = format!("element block {}", b + 1);
            let dim = self.int(&what)?;
            let entity = self.int(&what)?;
            let kind = self.int(&what)?;
            let n = self.size(&what)?;
            let n = self.count(n, 8, "elements in a block")?;
            if n > total - seen {
                return Err(self.fail(&format!(
                    "{what} holds {n} elements, more than the {total} the $Elements header announces"
                )));
            }
            seen += n;
            let region = if dim == 3 {
                entity_region.get(&entity).copied().unwrap_or(entity)
            } else {
                0
            };
            if kind != 4 {
                *el.ignored.entry(kind).or_default() += n;
                if self.binary {
                    let nn = nodes_per_element(kind).ok_or_else(|| {
                        self.bin_err(&format!("unknown element type {kind}: cannot read past it"))
                    })?;
                    let size = n.checked_mul(8 * (1 + nn)).ok_or_else(|| {
                        self.bin_err(&format!("{what}: {n} elements of type {kind} overflow"))
                    })?;
                    self.bytes(size, &what)?;
                } else {
                    for _ in 0..n {
                        self.line_tokens(&what)?;
                    }
                }
                continue;
            }
            for i in 0..n {
                let what = format!("tetrahedron {} of {what}", i + 1);
                if self.binary {
                    let tag = self.bin_u64(&what)?;
                    let mut t = [0u64; 4];
                    for v in &mut t {
                        *v = self.bin_u64(&what)?;
                    }
                    el.tets.push((tag, t, region));
                } else {
                    let (line, tok) = self.line_tokens(&what)?;
                    let v: Option<Vec<u64>> = tok.iter().map(|s| s.parse().ok()).collect();
                    match v {
                        Some(v) if v.len() == 5 => {
                            el.tets.push((v[0], [v[1], v[2], v[3], v[4]], region));
                        }
                        _ => {
                            return Err(Error::Parse {
                                path: self.path.to_path_buf(),
                                line,
                                why: format!(
                                    "expected `tag n1 n2 n3 n4` for {what}, found `{}`",
                                    tok.join(" ")
                                ),
                            });
                        }
                    }
                }
            }
        }
        if seen != total {
            return Err(self.fail(&format!(
                "$Elements header says {total} elements, the blocks hold {seen}"
            )));
        }
        Ok(el)
    }
}

/// v2 tags: physical first, then elementary; 0 when neither is set.
fn region_v2(tags: &[i32]) -> i32 {
    match tags {
        [p, ..] if *p != 0 => *p,
        [_, e, ..] => *e,
        _ => 0,
    }
}

/// Write `mesh` as Gmsh 2.2 or 4.1, ASCII or binary (tests and conversions): physical tag =
/// elementary tag = region.
pub fn write_gmsh(path: &Path, mesh: &Mesh, v4: bool, binary: bool) -> Result<()> {
    let mut out: Vec<u8> = Vec::new();
    let text = |o: &mut Vec<u8>, s: &str| o.extend_from_slice(s.as_bytes());
    let n = mesh.len();
    let nn = mesh.nodes.len();
    text(
        &mut out,
        &format!(
            "$MeshFormat\n{} {} 8\n",
            if v4 { "4.1" } else { "2.2" },
            u8::from(binary)
        ),
    );
    if binary {
        out.extend_from_slice(&1i32.to_le_bytes());
        text(&mut out, "\n");
    }
    text(&mut out, "$EndMeshFormat\n");
    let mut regions: Vec<u32> = mesh.regions[1..].to_vec();
    regions.sort_unstable();
    regions.dedup();
    let sz = |o: &mut Vec<u8>, v: u64| o.extend_from_slice(&v.to_le_bytes());
    let int = |o: &mut Vec<u8>, v: i32| o.extend_from_slice(&v.to_le_bytes());
    let flt = |o: &mut Vec<u8>, v: f64| o.extend_from_slice(&v.to_le_bytes());
    if v4 {
        text(&mut out, "$Entities\n");
        let (lo, hi) = mesh.bounds();
        if binary {
            for c in [0, 0, 0, regions.len() as u64] {
                sz(&mut out, c);
            }
            for &r in &regions {
                int(&mut out, r as i32);
                for v in lo.iter().chain(&hi) {
                    flt(&mut out, *v);
                }
                sz(&mut out, 1);
                int(&mut out, r as i32);
                sz(&mut out, 0);
            }
            text(&mut out, "\n");
        } else {
            text(&mut out, &format!("0 0 0 {}\n", regions.len()));
            for &r in &regions {
                text(
                    &mut out,
                    &format!(
                        "{r} {} {} {} {} {} {} 1 {r} 0\n",
                        lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]
                    ),
                );
            }
        }
        text(&mut out, "$EndEntities\n$Nodes\n");
        // One block holding every node (entity: the first volume).
        let e = regions[0] as i32;
        if binary {
            for v in [1, nn as u64, 1, nn as u64] {
                sz(&mut out, v);
            }
            int(&mut out, 3);
            int(&mut out, e);
            int(&mut out, 0);
            sz(&mut out, nn as u64);
            for i in 0..nn {
                sz(&mut out, i as u64 + 1);
            }
            for p in &mesh.nodes {
                for v in p {
                    flt(&mut out, *v);
                }
            }
            text(&mut out, "\n");
        } else {
            text(&mut out, &format!("1 {nn} 1 {nn}\n3 {e} 0 {nn}\n"));
            for i in 0..nn {
                text(&mut out, &format!("{}\n", i + 1));
            }
            for p in &mesh.nodes {
                text(&mut out, &format!("{:?} {:?} {:?}\n", p[0], p[1], p[2]));
            }
        }
        text(&mut out, "$EndNodes\n$Elements\n");
        if binary {
            for v in [regions.len() as u64, n as u64, 1, n as u64] {
                sz(&mut out, v);
            }
        } else {
            text(&mut out, &format!("{} {n} 1 {n}\n", regions.len()));
        }
        for &r in &regions {
            let ids: Vec<usize> = (1..=n).filter(|&t| mesh.regions[t] == r).collect();
            if binary {
                int(&mut out, 3);
                int(&mut out, r as i32);
                int(&mut out, 4);
                sz(&mut out, ids.len() as u64);
                for &t in &ids {
                    sz(&mut out, t as u64);
                    for &v in &mesh.tets[t] {
                        sz(&mut out, u64::from(v) + 1);
                    }
                }
            } else {
                text(&mut out, &format!("3 {r} 4 {}\n", ids.len()));
                for &t in &ids {
                    let v = mesh.tets[t];
                    text(
                        &mut out,
                        &format!("{t} {} {} {} {}\n", v[0] + 1, v[1] + 1, v[2] + 1, v[3] + 1),
                    );
                }
            }
        }
        if binary {
            text(&mut out, "\n");
        }
        text(&mut out, "$EndElements\n");
    } else {
        text(&mut out, &format!("$Nodes\n{nn}\n"));
        for (i, p) in mesh.nodes.iter().enumerate() {
            if binary {
                int(&mut out, i as i32 + 1);
                for v in p {
                    flt(&mut out, *v);
                }
            } else {
                text(
                    &mut out,
                    &format!("{} {:?} {:?} {:?}\n", i + 1, p[0], p[1], p[2]),
                );
            }
        }
        if binary {
            text(&mut out, "\n");
        }
        text(&mut out, &format!("$EndNodes\n$Elements\n{n}\n"));
        if binary {
            int(&mut out, 4);
            int(&mut out, n as i32);
            int(&mut out, 2);
        }
        for t in 1..=n {
            let v = mesh.tets[t];
            let r = mesh.regions[t] as i32;
            if binary {
                for x in [t as i32, r, r] {
                    int(&mut out, x);
                }
                for x in v {
                    int(&mut out, x as i32 + 1);
                }
            } else {
                text(
                    &mut out,
                    &format!(
                        "{t} 4 2 {r} {r} {} {} {} {}\n",
                        v[0] + 1,
                        v[1] + 1,
                        v[2] + 1,
                        v[3] + 1
                    ),
                );
            }
        }
        if binary {
            text(&mut out, "\n");
        }
        text(&mut out, "$EndElements\n");
    }
    std::fs::write(path, out).map_err(|e| Error::io(path, e))
}
