//! MMC's mesh text files (as iso2mesh's `savemmcmesh` writes them): `node_<key>.dat` is a
//! line `1 N` then N lines `index x y z`; `elem_<key>.dat` is a line `1 M` then M lines
//! `index n1 n2 n3 n4 region` (1-based nodes). The index columns must count 1, 2, ...
//!
//! The header's count must match the rows exactly (fewer rows: `Truncated`; more: an error
//! naming the first extra line) and is capped ([`super::MAX_NODES`], [`super::MAX_TETS`]); no
//! more is reserved than the file's size can hold. Coordinates must be finite,
//! node indices within 1..=N, regions whole numbers in 1..=2^32-1; errors name the file and
//! the line.

use super::{MAX_NODES, MAX_TETS, build_mesh, check_count};
use crate::error::{Error, Result};
use crate::model::mesh::Mesh;
use std::path::Path;

/// Numbered rows of a file: (1-based line, numbers).
type Rows = Vec<(usize, Vec<f64>)>;

/// The rows of `path` after its header `1 count`; each row is at least `min_bytes` long and
/// the count at most `cap`.
fn rows(path: &Path, record: &str, cap: usize, min_bytes: usize) -> Result<Rows> {
    // A count the file cannot hold ends in a `Truncated` error below (rows are counted as
    // read); only the capacity reserved is bounded by the bytes.
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let parse_err = |line: usize, why: String| Error::Parse {
        path: path.to_path_buf(),
        line,
        why,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let parse = |(i, l): (usize, &str)| -> Result<(usize, Vec<f64>)> {
        let v = l
            .split_whitespace()
            .map(str::parse::<f64>)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| parse_err(i + 1, format!("expected numbers, found `{}`", l.trim())))?;
        Ok((i + 1, v))
    };
    let header = lines.next().ok_or_else(|| Error::Truncated {
        path: path.to_path_buf(),
        why: "empty file (expected a header `1 count`)".into(),
    })?;
    let header_end = header.1.as_ptr() as usize - text.as_ptr() as usize + header.1.len();
    let (hline, h) = parse(header)?;
    if h.len() != 2 || !(h[1] >= 0.0 && h[1].fract() == 0.0 && h[1] < 2f64.powi(64)) {
        return Err(parse_err(
            hline,
            format!("expected the header `1 count` with a whole {record} count >= 0"),
        ));
    }
    let (count, room) = check_count(
        &format!("the {record} count"),
        h[1] as u64,
        cap,
        min_bytes,
        text.len() - header_end,
    )
    .map_err(|why| parse_err(hline, why))?;
    let mut body = Vec::with_capacity(room);
    for row in lines.by_ref().take(count) {
        body.push(parse(row)?);
    }
    if body.len() < count {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            why: format!(
                "the header (line {hline}) says {count} rows, the file has {}",
                body.len()
            ),
        });
    }
    if let Some((i, _)) = lines.next() {
        return Err(parse_err(
            i + 1,
            format!(
                "the header (line {hline}) says {count} rows, but the file holds more: header \
                 and data must agree"
            ),
        ));
    }
    Ok(body)
}

/// Read an MMC mesh from its node and element files.
pub fn read_mmc_mesh(node: &Path, elem: &Path) -> Result<Mesh> {
    // `i x y z` and `i n1 n2 n3 n4 r`: at least 8 and 12 bytes a row.
    let nrows = rows(node, "node", MAX_NODES, 8)?;
    let mut nodes = Vec::with_capacity(nrows.len());
    for (k, (line, v)) in nrows.iter().enumerate() {
        if v.len() < 4 || v[0] != (k + 1) as f64 {
            return Err(Error::Parse {
                path: node.to_path_buf(),
                line: *line,
                why: format!("expected `{} x y z`", k + 1),
            });
        }
        if let Some(x) = v[1..4].iter().find(|x| !x.is_finite()) {
            return Err(Error::Parse {
                path: node.to_path_buf(),
                line: *line,
                why: format!("node {}: coordinate {x} is not a finite number", k + 1),
            });
        }
        nodes.push([v[1], v[2], v[3]]);
    }
    let erows = rows(elem, "element", MAX_TETS, 12)?;
    let mut tets = Vec::with_capacity(erows.len());
    let mut regions = Vec::with_capacity(erows.len());
    let nn = nodes.len() as f64;
    for (k, (line, v)) in erows.iter().enumerate() {
        let bad = v.len() < 6
            || v[0] != (k + 1) as f64
            || v[1..6].iter().any(|x| !(*x >= 1.0 && x.fract() == 0.0));
        if bad {
            return Err(Error::Parse {
                path: elem.to_path_buf(),
                line: *line,
                why: format!(
                    "expected `{} n1 n2 n3 n4 region` with 1-based nodes and region >= 1",
                    k + 1
                ),
            });
        }
        if let Some(x) = v[1..5].iter().find(|&&x| x > nn) {
            return Err(Error::Parse {
                path: elem.to_path_buf(),
                line: *line,
                why: format!(
                    "element {} refers to node {x}, but {} has {} nodes",
                    k + 1,
                    node.display(),
                    nodes.len()
                ),
            });
        }
        if v[5] > f64::from(u32::MAX) {
            return Err(Error::Parse {
                path: elem.to_path_buf(),
                line: *line,
                why: format!("region {} is above 2^32 - 1", v[5]),
            });
        }
        tets.push([
            v[1] as u32 - 1,
            v[2] as u32 - 1,
            v[3] as u32 - 1,
            v[4] as u32 - 1,
        ]);
        regions.push(v[5] as u32);
    }
    // Geometry errors (zero volume, non-manifold faces) depend on both files.
    build_mesh(elem, nodes, tets, regions, |k| {
        let line = erows.get(k.max(1) - 1).map_or(0, |r| r.0);
        format!("line {line} (nodes from {})", node.display())
    })
    .map_err(|e| match e {
        Error::Format { path, at, why } if at == "mesh" => Error::Format {
            path,
            at: format!("mesh (nodes from {})", node.display()),
            why,
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_tet_and_rejects_truncation() {
        let dir = std::env::temp_dir().join(format!("mc-mmc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (n, e) = (dir.join("node_t.dat"), dir.join("elem_t.dat"));
        std::fs::write(&n, "1\t4\n1 0 0 0\n2 1 0 0\n3 0 1 0\n4 0 0 1\n").unwrap();
        std::fs::write(&e, "1\t1\n1 1 2 3 4 1\n").unwrap();
        let m = read_mmc_mesh(&n, &e).unwrap();
        assert_eq!(m.len(), 1);
        std::fs::write(&e, "1\t2\n1 1 2 3 4 1\n").unwrap();
        let err = read_mmc_mesh(&n, &e).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err}");
        std::fs::write(&e, "1\t1\n1 1 2 3 0 1\n").unwrap();
        assert!(
            read_mmc_mesh(&n, &e)
                .unwrap_err()
                .to_string()
                .contains("line 2")
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
