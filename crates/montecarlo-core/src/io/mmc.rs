//! MMC's mesh text files (as iso2mesh's `savemmcmesh` writes them): `node_<key>.dat` is a
//! line `1 N` then N lines `index x y z`; `elem_<key>.dat` is a line `1 M` then M lines
//! `index n1 n2 n3 n4 region` (1-based nodes). The index columns must count 1, 2, ...

use crate::error::{Error, Result};
use crate::model::mesh::Mesh;
use std::path::Path;

/// Numbered rows of a file: (1-based line, numbers).
type Rows = Vec<(usize, Vec<f64>)>;

fn rows(path: &Path) -> Result<(usize, Rows)> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let parse = |(i, l): (usize, &str)| -> Result<(usize, Vec<f64>)> {
        let v = l
            .split_whitespace()
            .map(str::parse::<f64>)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                why: format!("expected numbers, found `{}`", l.trim()),
            })?;
        Ok((i + 1, v))
    };
    let header = lines.next().ok_or_else(|| Error::Truncated {
        path: path.to_path_buf(),
        why: "empty file (expected a header `1 count`)".into(),
    })?;
    let (_, h) = parse(header)?;
    if h.len() != 2 || h[1] < 0.0 || h[1].fract() != 0.0 {
        return Err(Error::Parse {
            path: path.to_path_buf(),
            line: 1,
            why: "expected the header `1 count`".into(),
        });
    }
    let count = h[1] as usize;
    let body = lines.take(count).map(parse).collect::<Result<Vec<_>>>()?;
    if body.len() < count {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            why: format!("header says {count} rows, file has {}", body.len()),
        });
    }
    Ok((count, body))
}

/// Read an MMC mesh from its node and element files.
pub fn read_mmc_mesh(node: &Path, elem: &Path) -> Result<Mesh> {
    let (_, nrows) = rows(node)?;
    let mut nodes = Vec::with_capacity(nrows.len());
    for (k, (line, v)) in nrows.iter().enumerate() {
        if v.len() < 4 || v[0] as usize != k + 1 {
            return Err(Error::Parse {
                path: node.to_path_buf(),
                line: *line,
                why: format!("expected `{} x y z`", k + 1),
            });
        }
        nodes.push([v[1], v[2], v[3]]);
    }
    let (_, erows) = rows(elem)?;
    let mut tets = Vec::with_capacity(erows.len());
    let mut regions = Vec::with_capacity(erows.len());
    for (k, (line, v)) in erows.iter().enumerate() {
        let bad = v.len() < 6
            || v[0] as usize != k + 1
            || v[1..6].iter().any(|x| *x < 1.0 || x.fract() != 0.0);
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
        tets.push([
            v[1] as u32 - 1,
            v[2] as u32 - 1,
            v[3] as u32 - 1,
            v[4] as u32 - 1,
        ]);
        regions.push(v[5] as u32);
    }
    Mesh::new(nodes, tets, regions)
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
