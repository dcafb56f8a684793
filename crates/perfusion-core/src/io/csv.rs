//! CSV tables of curves: one column per curve (a time column named `time`, `t` or `time_s`
//! optional), a header row of names; and the per-curve results of a fit.

use crate::error::{Error, Result};
use crate::model::Fits;
use std::io::Read;
use std::path::Path;

/// Largest CSV file read: 256 MiB (checked against the file's size before reading).
pub const MAX_CSV_BYTES: u64 = 256 << 20;

/// Most columns in a CSV table: 65,536.
pub const MAX_CSV_COLUMNS: usize = 1 << 16;

/// Named numeric columns read from a CSV file.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub names: Vec<String>,
    pub columns: Vec<Vec<f64>>,
    /// The file's line number of each data row, for messages.
    pub lines: Vec<usize>,
}

impl Table {
    /// The column called `name` (case-insensitive).
    pub fn column(&self, name: &str) -> Option<&[f64]> {
        self.names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(name))
            .map(|i| self.columns[i].as_slice())
    }

    /// Index of the time column, if any.
    pub fn time_index(&self) -> Option<usize> {
        self.names.iter().position(|n| {
            let n = n.to_ascii_lowercase();
            n == "time" || n == "t" || n == "time_s" || n == "t_s" || n == "seconds"
        })
    }

    /// Every column but the time column, with its name.
    pub fn curves(&self) -> Vec<(&str, &[f64])> {
        let t = self.time_index();
        self.names
            .iter()
            .zip(&self.columns)
            .enumerate()
            .filter(|(i, _)| Some(*i) != t)
            .map(|(_, (n, c))| (n.as_str(), c.as_slice()))
            .collect()
    }
}

/// Read a CSV table with a header row; every other field must be a number. Empty fields
/// and `nan` are NaN (a voxel with them is reported as invalid input); infinite values and
/// numbers beyond the range of f64 are refused. A time column (`time`, `t`, `time_s`, `t_s`,
/// `seconds`) must hold finite times that increase strictly. Column names must be present
/// and distinct. Files over [`MAX_CSV_BYTES`] or with more than [`MAX_CSV_COLUMNS`] columns
/// are refused before they are read.
///
/// ```
/// let dir = std::env::temp_dir().join("perfusion-csv-doc");
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("aif.csv");
/// std::fs::write(&path, "time,aif\n0,0\n2,4.5\n4,2.0\n").unwrap();
/// let t = perfusion_core::io::csv::read_table(&path).unwrap();
/// assert_eq!(t.column("aif").unwrap(), &[0.0, 4.5, 2.0]);
/// assert_eq!(t.time_index(), Some(0));
/// ```
pub fn read_table(path: &Path) -> Result<Table> {
    let bad = |line: usize, why: String| Error::Csv {
        path: path.to_path_buf(),
        line,
        why,
    };
    let file_err = |why: String| Error::File {
        path: path.to_path_buf(),
        why,
    };
    let len = std::fs::metadata(path)
        .map_err(|e| file_err(e.to_string()))?
        .len();
    if len == 0 {
        return Err(file_err(
            "the file is empty; expected a header row such as `time,aif` and data rows".into(),
        ));
    }
    if len > MAX_CSV_BYTES {
        return Err(file_err(format!(
            "{len} bytes, more than the {MAX_CSV_BYTES} a CSV table may have; store large series as NIfTI"
        )));
    }
    let file = std::fs::File::open(path).map_err(|e| file_err(e.to_string()))?;
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(std::io::BufReader::new(file.take(MAX_CSV_BYTES)));
    let names: Vec<String> = reader
        .headers()
        .map_err(|e| bad(1, e.to_string()))?
        .iter()
        .map(str::to_string)
        .collect();
    if names.is_empty() || names.iter().all(String::is_empty) {
        return Err(bad(
            1,
            "no header row: expected names such as `time,aif`".into(),
        ));
    }
    if names.len() > MAX_CSV_COLUMNS {
        return Err(bad(
            1,
            format!(
                "{} columns, more than the {MAX_CSV_COLUMNS} a table may have",
                names.len()
            ),
        ));
    }
    if let Some(c) = names.iter().position(String::is_empty) {
        return Err(bad(
            1,
            format!("column {} has no name; every column needs one", c + 1),
        ));
    }
    for (c, n) in names.iter().enumerate() {
        if names[..c].iter().any(|m| m.eq_ignore_ascii_case(n)) {
            return Err(bad(1, format!("the column name `{n}` appears twice")));
        }
    }
    let mut table = Table {
        columns: vec![Vec::new(); names.len()],
        names,
        lines: Vec::new(),
    };
    let time = table.time_index();
    for (i, rec) in reader.records().enumerate() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(i + 2, |p| p.line() as usize);
            bad(line, e.to_string())
        })?;
        let line = rec.position().map_or(i + 2, |p| p.line() as usize);
        let names = &table.names;
        if rec.len() != names.len() {
            return Err(bad(
                line,
                format!("{} fields, the header has {}", rec.len(), names.len()),
            ));
        }
        for (c, field) in rec.iter().enumerate() {
            let v = if field.is_empty() || field.eq_ignore_ascii_case("nan") {
                f64::NAN
            } else {
                field.parse::<f64>().map_err(|_| {
                    bad(
                        line,
                        format!("column `{}`: `{field}` is not a number", names[c]),
                    )
                })?
            };
            if v.is_infinite() {
                return Err(bad(
                    line,
                    format!("column `{}`: `{field}` is not a finite number", names[c]),
                ));
            }
            if Some(c) == time {
                if !v.is_finite() {
                    return Err(bad(
                        line,
                        format!(
                            "time column `{}`: `{field}`; every time must be a finite number of seconds",
                            names[c]
                        ),
                    ));
                }
                if let Some(&prev) = table.columns[c].last()
                    && v <= prev
                {
                    return Err(bad(
                        line,
                        format!(
                            "time column `{}`: {v} s does not follow {prev} s; times must increase strictly",
                            names[c]
                        ),
                    ));
                }
            }
            table.columns[c].push(v);
        }
        table.lines.push(line);
    }
    if table.lines.is_empty() {
        return Err(bad(2, "no data rows".into()));
    }
    Ok(table)
}

/// Columns of numbers under a header row (`columns[c][row]`, equal lengths).
pub fn write_columns(path: &Path, names: &[&str], columns: &[&[f64]]) -> Result<()> {
    let err = |why: String| Error::File {
        path: path.to_path_buf(),
        why,
    };
    let mut w = csv::Writer::from_path(path).map_err(|e| err(e.to_string()))?;
    w.write_record(names).map_err(|e| err(e.to_string()))?;
    let rows = columns.first().map_or(0, |c| c.len());
    for r in 0..rows {
        w.write_record(columns.iter().map(|c| c[r].to_string()))
            .map_err(|e| err(e.to_string()))?;
    }
    w.flush().map_err(|e| err(e.to_string()))
}

/// One row per curve: name, parameters, their standard errors (`<name>_se`, same units;
/// NaN for fixed parameters, see [`Fits::se`]), SSE, R^2, iterations, status, quality flags
/// (the names of the [`Flags`](crate::Flags) set, `+`-joined, empty for none).
pub fn write_fits(path: &Path, names: &[String], fits: &Fits) -> Result<()> {
    let err = |e: csv::Error| Error::File {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    let mut w = csv::Writer::from_path(path).map_err(err)?;
    let mut header = vec!["curve".to_string()];
    for p in fits.model.params() {
        header.push(if p.unit.is_empty() {
            p.name.to_string()
        } else {
            format!("{} ({})", p.name, p.unit)
        });
    }
    for p in fits.model.params() {
        header.push(if p.unit.is_empty() {
            format!("{}_se", p.name)
        } else {
            format!("{}_se ({})", p.name, p.unit)
        });
    }
    header.extend(["sse", "r2", "iterations", "status", "flags"].map(String::from));
    w.write_record(&header).map_err(err)?;
    for (v, name) in names.iter().enumerate() {
        let mut row = vec![name.clone()];
        for p in 0..fits.model.n_params() {
            row.push(format!("{}", fits.params[[p, v]]));
        }
        for p in 0..fits.model.n_params() {
            row.push(format!("{}", fits.se[[p, v]]));
        }
        row.push(format!("{}", fits.sse[v]));
        row.push(format!("{}", fits.r2[v]));
        row.push(fits.iterations[v].to_string());
        row.push(fits.status(v).name().to_string());
        let flags: Vec<&str> = crate::Flags::ALL
            .iter()
            .filter(|(bit, _)| fits.flags[v] & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        row.push(flags.join("+"));
        w.write_record(&row).map_err(err)?;
    }
    w.flush().map_err(|e| Error::File {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_fields_are_reported_with_their_line_and_column() {
        let dir = std::env::temp_dir().join(format!("perfusion-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.csv");
        std::fs::write(&path, "time,a,b\n0,1,2\n1,x,3\n").unwrap();
        let e = read_table(&path).unwrap_err().to_string();
        assert!(
            e.contains("line 3") && e.contains("`a`") && e.contains("`x`"),
            "{e}"
        );
        std::fs::write(&path, "time,a\n0,1\n1,2,3\n").unwrap();
        let e = read_table(&path).unwrap_err().to_string();
        assert!(e.contains("line 3"), "{e}");
        std::fs::write(&path, "t,a,b\n0,1,\n1,2,5\n").unwrap();
        let t = read_table(&path).unwrap();
        assert!(t.column("b").unwrap()[0].is_nan());
        assert_eq!(t.curves().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
