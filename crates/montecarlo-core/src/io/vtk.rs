//! VTK unstructured grids, through `vtkio`: reading legacy `.vtk` (ASCII or binary) and XML
//! `.vtu` meshes, and writing results with per-tetrahedron cell data for ParaView (`.vtu`, or
//! the legacy ASCII `.vtk` that older tools read).
//!
//! Only tetrahedra (VTK cell type 10) are kept; other cells are counted in
//! [`Imported::ignored`]. The region of each tetrahedron comes from a cell data array: the
//! one named by the caller, else the first of [`REGION_ARRAYS`] present, else region 1 for all
//! (noted). Region values must be whole numbers >= 1.
//!
//! Untrusted input: `vtkio` can panic on corrupt files and, for compressed `.vtu` data,
//! allocates what a block header claims. So the block headers of compressed arrays are checked
//! first ([`MAX_DECOMPRESSED_BYTES`], and no more than zlib's 1032:1 ratio over the file's
//! size), every `vtkio` call runs under `catch_unwind` (a panic becomes an error naming the
//! file), and the cells are checked here: point indices within the piece, finite coordinates,
//! regions, and tetrahedra with volume.

use crate::error::{Error, Result};
use crate::model::mesh::{Imported, Mesh};
use std::io::Write;
use std::path::Path;
use vtkio::model::{
    Attribute, Attributes, ByteOrder, CellType, Cells, DataArray, DataSet, IOBuffer, Piece,
    UnstructuredGridPiece, Version, VertexNumbers, Vtk,
};

/// Cell arrays tried, in order, for the region when no name is given: ours, meshio's Gmsh
/// tag, and common names from other mesh tools.
pub const REGION_ARRAYS: [&str; 6] = [
    "region",
    "gmsh:physical",
    "Material",
    "material",
    "MaterialIds",
    "CellEntityIds",
];

/// The most bytes one compressed `.vtu` data array may claim to decompress to (1 GiB).
pub const MAX_DECOMPRESSED_BYTES: usize = 1 << 30;

fn fmt_err(path: &Path, at: impl Into<String>, why: impl Into<String>) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        at: at.into(),
        why: why.into(),
    }
}

/// Read a `.vtk` (legacy) or `.vtu` (XML) unstructured grid; `region_array` names the cell
/// array holding regions (None: see [`REGION_ARRAYS`]).
///
/// ```
/// use montecarlo_core::{io::vtk, sim::generate};
/// let m = generate::box_mesh([0.0; 3], [2.0; 3], 1.0, 5)?;
/// let p = std::env::temp_dir().join(format!("vtk-doc-{}.vtu", std::process::id()));
/// vtk::write_vtu(&p, &m, &[("fluence", &vec![1.0; m.len()])])?;
/// let back = vtk::read_vtk(&p, None)?;
/// assert_eq!(back.mesh.len(), m.len());
/// assert_eq!(back.mesh.regions, m.regions);
/// # std::fs::remove_file(&p)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_vtk(path: &Path, region_array: Option<&str>) -> Result<Imported> {
    if !path.exists() {
        return Err(Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let xml = !path
        .extension()
        .is_some_and(|x| x.eq_ignore_ascii_case("vtk"));
    if xml {
        vtu_guard(path, &bytes)?;
    }
    // vtkio may panic on corrupt input: contain it and name the file.
    gpu_runtime::contain_panic(|| convert(path, load(path, &bytes)?, region_array)).unwrap_or_else(
        |msg| {
            Err(fmt_err(
                path,
                "whole file",
                format!("not a readable VTK file (corrupt? the VTK library failed: {msg})"),
            ))
        },
    )
}

/// vtkio's part: parse the file and load its pieces (run under `catch_unwind`).
fn load(path: &Path, bytes: &[u8]) -> Result<Vtk> {
    let imported = Vtk::import(path).or_else(|e| {
        // VTK 9 and meshio write legacy data types as `vtktypeint64` etc., which vtkio's
        // legacy parser only knows after OFFSETS/CONNECTIVITY: retry with the classic names.
        let is_legacy = path
            .extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("vtk"));
        match classic_type_names(bytes) {
            Some(fixed) if is_legacy => Vtk::parse_legacy_be(fixed.as_slice()).map_err(|_| e),
            _ => Err(e),
        }
        .map_err(|e| {
            fmt_err(
                path,
                "whole file",
                format!("not a readable VTK file (truncated or corrupt?): {e}"),
            )
        })
    });
    let mut vtk = imported?;
    vtk.load_all_pieces()
        .map_err(|e| fmt_err(path, "pieces", e.to_string()))?;
    Ok(vtk)
}

/// The tetrahedra and regions of a loaded file, checked.
fn convert(path: &Path, vtk: Vtk, region_array: Option<&str>) -> Result<Imported> {
    let DataSet::UnstructuredGrid { pieces, .. } = vtk.data else {
        return Err(fmt_err(
            path,
            "dataset",
            "is not an unstructured grid (UnstructuredGrid / .vtu expected)",
        ));
    };
    let mut nodes: Vec<[f64; 3]> = Vec::new();
    let mut tets = Vec::new();
    let mut regions = Vec::new();
    let mut ignored = 0usize;
    let mut notes = Vec::new();
    let mut cell_base = 0usize;
    for (pi, piece) in pieces.into_iter().enumerate() {
        let Piece::Inline(p) = piece else {
            return Err(fmt_err(
                path,
                format!("piece {}", pi + 1),
                "is not stored in the file",
            ));
        };
        let base = nodes.len() as u64;
        let pts: Vec<f64> = p
            .points
            .cast_into()
            .ok_or_else(|| fmt_err(path, "points", "are not numbers"))?;
        if !pts.len().is_multiple_of(3) {
            return Err(fmt_err(
                path,
                "points",
                format!("{} values is not a multiple of 3", pts.len()),
            ));
        }
        for (i, c) in pts.chunks_exact(3).enumerate() {
            if c.iter().any(|v| !v.is_finite()) {
                return Err(fmt_err(
                    path,
                    format!("point {i}"),
                    format!("non-finite coordinates {c:?}"),
                ));
            }
            nodes.push([c[0], c[1], c[2]]);
        }
        let cells = cell_lists(path, p.cells.cell_verts, p.cells.types.len())?;
        let region_values = region_values(path, &p.data, region_array, p.cells.types.len())?;
        if region_values.is_none() && pi == 0 {
            notes.push("no region cell array: every tetrahedron is region 1".into());
        }
        for (i, (kind, verts)) in p.cells.types.iter().zip(&cells).enumerate() {
            let cell = cell_base + i;
            if *kind != CellType::Tetra {
                ignored += 1;
                continue;
            }
            if verts.len() != 4 {
                return Err(fmt_err(
                    path,
                    format!("cell {cell}"),
                    format!("tetrahedron with {} points", verts.len()),
                ));
            }
            let mut t = [0u32; 4];
            for (k, &v) in verts.iter().enumerate() {
                let g = base.saturating_add(v);
                if g >= nodes.len() as u64 {
                    return Err(fmt_err(
                        path,
                        format!("cell {cell}"),
                        format!(
                            "refers to point {v}, but the piece has {} points",
                            nodes.len() as u64 - base
                        ),
                    ));
                }
                t[k] = g as u32;
            }
            let r = match &region_values {
                Some(v) => {
                    let x = v[i];
                    if !(x >= 1.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX)) {
                        return Err(fmt_err(
                            path,
                            format!("cell {cell}"),
                            format!("region {x} is not a whole number >= 1"),
                        ));
                    }
                    x as u32
                }
                None => 1,
            };
            tets.push(t);
            regions.push(r);
        }
        cell_base += cells.len();
    }
    if tets.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no tetrahedra (VTK cell type 10) among {ignored} cells",
            path.display()
        )));
    }
    if ignored > 0 {
        notes.push(format!(
            "ignored {ignored} cells that are not tetrahedra (VTK type 10)"
        ));
    }
    // Tet numbers are 1-based among kept tetrahedra; say so next to the file.
    let mesh = match Mesh::new(nodes, tets, regions) {
        Ok(m) => m,
        Err(Error::BadTet { tet, why }) => {
            return Err(fmt_err(path, format!("tetrahedron {tet} (1-based)"), why));
        }
        Err(other) => return Err(fmt_err(path, "mesh", other.to_string())),
    };
    Ok(Imported {
        mesh,
        ignored,
        notes,
    })
}

/// Check the block headers of every compressed binary array of a `.vtu` file (inline or
/// appended, base64) before vtkio allocates what they claim: at least one block, no overflow
/// in the sizes, and a decompressed size within [`MAX_DECOMPRESSED_BYTES`] and zlib's largest
/// ratio (1032:1) over the file's size. Headers vtkio cannot decode either are left to it (it
/// fails on them without allocating).
fn vtu_guard(path: &Path, bytes: &[u8]) -> Result<()> {
    let Some(file_tag) = find_tag(bytes, b"VTKFile", 0) else {
        return Ok(());
    };
    let compressor = attr(file_tag.1, b"compressor").unwrap_or(b"");
    let compressed = [
        &b"vtkZLibDataCompressor"[..],
        b"vtkLZ4DataCompressor",
        b"vtkLZMADataCompressor",
    ]
    .contains(&compressor);
    if !compressed {
        return Ok(());
    }
    // vtkio: header numbers are u64 for UInt64, else u32, read from `size(header_type)`-byte
    // slots (an unknown type reads as Float64, 8 bytes).
    let header_type = attr(file_tag.1, b"header_type");
    let slot = match header_type {
        Some(b"Int8" | b"UInt8") => 1,
        Some(b"Int16" | b"UInt16") => 2,
        None | Some(b"Int32" | b"UInt32" | b"Float32") => 4,
        Some(_) => 8,
    };
    let hdr = Header {
        slot,
        wide: header_type == Some(b"UInt64"),
        big: attr(file_tag.1, b"byte_order") == Some(b"BigEndian"),
        limit: MAX_DECOMPRESSED_BYTES.min(bytes.len().saturating_mul(1032).saturating_add(1 << 16)),
    };
    let appended = find_tag(bytes, b"AppendedData", 0).map(|(end, _)| {
        let rest = &bytes[end..];
        let stop = find(rest, b"</AppendedData").unwrap_or(rest.len());
        let data = rest[..stop].trim_ascii();
        data.strip_prefix(b"_").unwrap_or(data)
    });
    let mut at = 0;
    let mut array = 0usize;
    while let Some((end, attrs)) = find_tag(bytes, b"DataArray", at) {
        at = end;
        array += 1;
        let data = match attr(attrs, b"format") {
            Some(b"binary") => {
                let rest = &bytes[end..];
                let stop = rest.iter().position(|&c| c == b'<').unwrap_or(rest.len());
                rest[..stop].trim_ascii()
            }
            Some(b"appended") => {
                let offset = attr(attrs, b"offset")
                    .and_then(|o| std::str::from_utf8(o).ok())
                    .and_then(|o| o.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                match appended {
                    Some(a) if offset <= a.len() => &a[offset..],
                    _ => continue,
                }
            }
            _ => continue,
        };
        if data.contains(&b'&') {
            return Err(fmt_err(
                path,
                format!("data array {array}"),
                "binary data holds an XML entity (`&`): not base64",
            ));
        }
        hdr.check(data)
            .map_err(|why| fmt_err(path, format!("data array {array}"), why))?;
    }
    Ok(())
}

/// How vtkio reads a compressed array's header `[nb][nu][np][nc_1..nc_nb]`.
struct Header {
    /// Bytes per header number slot.
    slot: usize,
    /// Numbers are u64 (else u32).
    wide: bool,
    big: bool,
    /// Most decompressed bytes accepted.
    limit: usize,
}

impl Header {
    /// Numbers read as vtkio reads them (sequentially, u32 or u64) from decoded bytes.
    fn numbers(&self, decoded: &[u8], count: usize) -> Vec<Option<u64>> {
        let w = if self.wide { 8 } else { 4 };
        (0..count)
            .map(|i| {
                let b = decoded.get(i * w..(i + 1) * w)?;
                let mut v = 0u64;
                for k in 0..w {
                    let byte = if self.big { b[k] } else { b[w - 1 - k] };
                    v = v << 8 | u64::from(byte);
                }
                Some(v)
            })
            .collect()
    }

    fn check(&self, data: &[u8]) -> std::result::Result<(), String> {
        let b64 = |n: usize| n.div_ceil(3).checked_mul(4);
        // Headers vtkio cannot slice or decode fail there without allocating: leave them.
        let Some(first) = b64(self.slot).and_then(|n| data.get(..n)) else {
            return Ok(());
        };
        let Some(decoded) = base64_decode(first) else {
            return Ok(());
        };
        let Some(Some(nb)) = self.numbers(&decoded, 1).first().copied() else {
            return Ok(());
        };
        let too_big = || format!("compressed block header claims {nb} blocks: corrupt header");
        let full = nb
            .checked_add(3)
            .and_then(|n| n.checked_mul(self.slot as u64))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(too_big)?;
        let n_chars = b64(full).ok_or_else(too_big)?;
        let Some(all) = data.get(..n_chars) else {
            return Ok(());
        };
        let Some(decoded) = base64_decode(all) else {
            return Ok(());
        };
        // vtkio reads nb + 3 numbers; missing block sizes count as 0.
        let Some(count) = usize::try_from(nb).ok().and_then(|n| n.checked_add(3)) else {
            return Err(too_big());
        };
        let v = self.numbers(&decoded, count);
        let (Some(nu), Some(np)) = (v[1], v[2]) else {
            return Ok(());
        };
        let mut compressed = 0u64;
        for nc in v[3..].iter().map(|x| x.unwrap_or(0)) {
            compressed = compressed
                .checked_add(nc)
                .ok_or("compressed block sizes overflow: corrupt header")?;
        }
        // vtkio reserves nu x (nb - 1) + np bytes, wrapping (0 blocks: np - nu).
        let out = if nb == 0 {
            Some(np.wrapping_sub(nu))
        } else {
            nu.checked_mul(nb - 1).and_then(|x| x.checked_add(np))
        };
        let out = out.filter(|&x| x <= self.limit as u64).ok_or_else(|| {
            format!(
                "compressed block header claims {nb} blocks of {nu} bytes (last {np}): more \
                     than the {} bytes this file can decompress to (at most 1032 x its size and \
                     {MAX_DECOMPRESSED_BYTES})",
                self.limit
            )
        })?;
        if out > 0 && compressed == 0 {
            return Err(format!(
                "compressed block header claims {out} bytes from 0 compressed bytes"
            ));
        }
        Ok(())
    }
}

/// Standard base64 (padding optional), as vtkio's decoder accepts it; None on any other byte.
fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    let s = s
        .strip_suffix(b"==")
        .or_else(|| s.strip_suffix(b"="))
        .unwrap_or(s);
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = acc << 6 | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The first `<name ...>` tag at or after `from`: the offset just past its `>` and its
/// attribute text.
fn find_tag<'a>(b: &'a [u8], name: &[u8], from: usize) -> Option<(usize, &'a [u8])> {
    let mut at = from;
    loop {
        let start = at + find(b.get(at..)?, b"<")?;
        let after = &b[start + 1..];
        at = start + 1;
        if after.starts_with(name)
            && after
                .get(name.len())
                .is_some_and(|c| c.is_ascii_whitespace() || *c == b'>' || *c == b'/')
        {
            let close = find(after, b">")?;
            return Some((start + 1 + close + 1, &after[name.len()..close]));
        }
    }
}

/// The value of attribute `name` in a tag's attribute text.
fn attr<'a>(attrs: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let mut at = 0;
    while let Some(i) = find(&attrs[at..], name) {
        let k = at + i;
        at = k + 1;
        let before_ok = k == 0 || attrs[k - 1].is_ascii_whitespace();
        let rest = attrs[k + name.len()..].trim_ascii_start();
        if before_ok && let Some(rest) = rest.strip_prefix(b"=") {
            let rest = rest.trim_ascii_start();
            let quote = *rest.first()?;
            if quote == b'"' || quote == b'\'' {
                let end = rest[1..].iter().position(|&c| c == quote)?;
                return Some(&rest[1..=end]);
            }
        }
    }
    None
}

/// `bytes` with VTK 9's `vtktype*` data type names replaced by the classic legacy names
/// (same sizes), except on OFFSETS/CONNECTIVITY lines; None when there is none to replace.
fn classic_type_names(bytes: &[u8]) -> Option<Vec<u8>> {
    const NAMES: [(&[u8], &[u8]); 9] = [
        (b"vtktypeint64", b"long"),
        (b"vtktypeuint64", b"unsigned_long"),
        (b"vtktypeint32", b"int"),
        (b"vtktypeuint32", b"unsigned_int"),
        (b"vtktypeint16", b"short"),
        (b"vtktypeint8", b"char"),
        (b"vtktypeuint8", b"unsigned_char"),
        (b"vtktypefloat32", b"float"),
        (b"vtktypefloat64", b"double"),
    ];
    let mut out = Vec::with_capacity(bytes.len());
    let mut changed = false;
    let mut line_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' {
            line_start = i + 1;
        }
        let topology = bytes[line_start..].starts_with(b"OFFSETS")
            || bytes[line_start..].starts_with(b"CONNECTIVITY");
        let name = if !topology && i > 0 && bytes[i - 1] == b' ' {
            NAMES.iter().find(|(f, _)| {
                bytes[i..].starts_with(f)
                    && bytes.get(i + f.len()).is_none_or(u8::is_ascii_whitespace)
            })
        } else {
            None
        };
        if let Some((from, to)) = name {
            out.extend_from_slice(to);
            i += from.len();
            changed = true;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    changed.then_some(out)
}

/// Point lists per cell, checked (vtkio's own conversion panics on inconsistent input).
fn cell_lists(path: &Path, verts: VertexNumbers, count: usize) -> Result<Vec<Vec<u64>>> {
    let mut out = Vec::with_capacity(count);
    match verts {
        VertexNumbers::Legacy { vertices, .. } => {
            let mut i = 0usize;
            while i < vertices.len() {
                let n = vertices[i] as usize;
                let Some(list) = vertices.get(i + 1..i + 1 + n) else {
                    return Err(fmt_err(
                        path,
                        format!("cell {}", out.len()),
                        "its point list runs past the end of CELLS",
                    ));
                };
                out.push(list.iter().map(|&v| u64::from(v)).collect());
                i += 1 + n;
            }
        }
        VertexNumbers::XML {
            connectivity,
            offsets,
        } => {
            let offsets: &[u64] = if offsets.len() == count + 1 && offsets.first() == Some(&0) {
                &offsets[1..]
            } else {
                &offsets
            };
            let mut start = 0u64;
            for (c, &end) in offsets.iter().enumerate() {
                if end < start || end > connectivity.len() as u64 {
                    return Err(fmt_err(
                        path,
                        format!("cell {c}"),
                        format!("offset {end} is out of order or past the connectivity"),
                    ));
                }
                out.push(connectivity[start as usize..end as usize].to_vec());
                start = end;
            }
        }
    }
    if out.len() != count {
        return Err(fmt_err(
            path,
            "cells",
            format!("{} point lists for {count} cell types", out.len()),
        ));
    }
    Ok(out)
}

/// The region array's values (one per cell), or None when no array is named and none of
/// the usual names is present.
fn region_values(
    path: &Path,
    data: &Attributes,
    name: Option<&str>,
    cells: usize,
) -> Result<Option<Vec<f64>>> {
    let find = |want: &str| -> Option<(&IOBuffer, u32)> {
        data.cell.iter().find_map(|a| match a {
            Attribute::DataArray(d) if d.name == want => Some((&d.data, d.elem.num_comp())),
            Attribute::Field { data_array, .. } => data_array
                .iter()
                .find(|f| f.name == want)
                .map(|f| (&f.data, f.elem)),
            Attribute::DataArray(_) => None,
        })
    };
    let hit = match name {
        Some(n) => Some((
            n,
            find(n).ok_or_else(|| {
                let have: Vec<&str> = data.cell.iter().map(Attribute::name).collect();
                fmt_err(
                    path,
                    "cell data",
                    format!("no cell array `{n}` (arrays: {have:?})"),
                )
            })?,
        )),
        None => REGION_ARRAYS.iter().find_map(|n| find(n).map(|h| (*n, h))),
    };
    let Some((n, (buf, comps))) = hit else {
        return Ok(None);
    };
    if comps != 1 {
        return Err(fmt_err(
            path,
            format!("cell array `{n}`"),
            format!("has {comps} components; a region needs 1"),
        ));
    }
    let v: Vec<f64> = buf
        .cast_into()
        .ok_or_else(|| fmt_err(path, format!("cell array `{n}`"), "is not numeric"))?;
    if v.len() != cells {
        return Err(fmt_err(
            path,
            format!("cell array `{n}`"),
            format!("has {} values for {cells} cells", v.len()),
        ));
    }
    Ok(Some(v))
}

fn check_lengths(mesh: &Mesh, cell_data: &[(&str, &[f64])]) -> Result<()> {
    for (name, v) in cell_data {
        if v.len() != mesh.len() {
            return Err(Error::Invalid(format!(
                "cell array `{name}` has {} values for {} tetrahedra",
                v.len(),
                mesh.len()
            )));
        }
    }
    Ok(())
}

/// Write `mesh` as an XML `.vtu` (base64 binary, f64) with `region` and the named
/// per-tetrahedron arrays (each `mesh.len()` long, tet 1 first) as cell data.
pub fn write_vtu(path: &Path, mesh: &Mesh, cell_data: &[(&str, &[f64])]) -> Result<()> {
    check_lengths(mesh, cell_data)?;
    let n = mesh.len();
    let points: Vec<f64> = mesh.nodes.iter().flatten().copied().collect();
    let connectivity: Vec<u64> = mesh.tets[1..]
        .iter()
        .flat_map(|t| t.map(u64::from))
        .collect();
    let offsets: Vec<u64> = (1..=n as u64).map(|i| 4 * i).collect();
    let mut cell = vec![Attribute::DataArray(
        DataArray::scalars("region", 1).with_data(
            mesh.regions[1..]
                .iter()
                .map(|&r| r as i32)
                .collect::<Vec<i32>>(),
        ),
    )];
    for (name, v) in cell_data {
        cell.push(Attribute::DataArray(
            DataArray::scalars(*name, 1).with_data(v.to_vec()),
        ));
    }
    let vtk = Vtk {
        version: Version::new_xml(1, 0),
        title: String::new(),
        byte_order: ByteOrder::LittleEndian,
        file_path: None,
        data: DataSet::inline(UnstructuredGridPiece {
            points: IOBuffer::F64(points),
            cells: Cells {
                cell_verts: VertexNumbers::XML {
                    connectivity,
                    offsets,
                },
                types: vec![CellType::Tetra; n],
            },
            data: Attributes {
                point: Vec::new(),
                cell,
            },
        }),
    };
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    vtk.write_xml(&mut w)
        .map_err(|e| fmt_err(path, "writing", e.to_string()))?;
    w.flush().map_err(|e| Error::io(path, e))
}

/// Legacy VTK writer (ASCII unstructured grid): `mesh` with the region and the named
/// per-tetrahedron arrays (each `mesh.len()` long, tet 1 first) as cell data.
pub fn write_vtk(path: &Path, mesh: &Mesh, cell_data: &[(&str, &[f64])]) -> Result<()> {
    check_lengths(mesh, cell_data)?;
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    let io = |e| Error::io(path, e);
    let n = mesh.len();
    writeln!(
        w,
        "# vtk DataFile Version 3.0\nbiogpu mc\nASCII\nDATASET UNSTRUCTURED_GRID"
    )
    .map_err(io)?;
    writeln!(w, "POINTS {} double", mesh.nodes.len()).map_err(io)?;
    for p in &mesh.nodes {
        writeln!(w, "{} {} {}", p[0], p[1], p[2]).map_err(io)?;
    }
    writeln!(w, "CELLS {n} {}", 5 * n).map_err(io)?;
    for t in &mesh.tets[1..] {
        writeln!(w, "4 {} {} {} {}", t[0], t[1], t[2], t[3]).map_err(io)?;
    }
    writeln!(w, "CELL_TYPES {n}").map_err(io)?;
    for _ in 0..n {
        writeln!(w, "10").map_err(io)?;
    }
    writeln!(
        w,
        "CELL_DATA {n}\nSCALARS region int 1\nLOOKUP_TABLE default"
    )
    .map_err(io)?;
    for r in &mesh.regions[1..] {
        writeln!(w, "{r}").map_err(io)?;
    }
    for (name, v) in cell_data {
        writeln!(w, "SCALARS {name} double 1\nLOOKUP_TABLE default").map_err(io)?;
        for x in *v {
            writeln!(w, "{x:e}").map_err(io)?;
        }
    }
    w.flush().map_err(io)
}
