//! Instrument responses from files.

use crate::error::{Error, Result};
use crate::io::read::read;
use crate::io::recording::ReadOptions;
use crate::model::cube::AnyCube;
use crate::model::preprocess::Irf;
use std::path::Path;

impl Irf {
    /// Read an IRF from a file: text/CSV with one column (counts per bin, `bin_ns` needed)
    /// or two (time in ns, counts; the bin width from the time step); a 1-D `.npy`; or any
    /// TCSPC file ([`crate::io::read`]: a reference measurement of a scatterer or a
    /// short-lifetime dye), whose decays are summed ([`Irf::from_reference`]).
    pub fn from_file(path: &Path, bin_ns: Option<f64>) -> Result<Irf> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let err = |what: String| Error::Format {
            path: path.to_path_buf(),
            what,
        };
        match ext.as_str() {
            "csv" | "txt" | "dat" | "irf" => {
                let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
                    path: path.to_path_buf(),
                    source: e,
                })?;
                let mut times = Vec::new();
                let mut counts = Vec::new();
                for (n, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    let fields: Vec<&str> = line
                        .split([',', ';', '\t', ' '])
                        .filter(|f| !f.is_empty())
                        .collect();
                    let nums: std::result::Result<Vec<f64>, _> =
                        fields.iter().map(|f| f.parse::<f64>()).collect();
                    match nums {
                        Ok(v) if v.len() == 1 => counts.push(v[0]),
                        Ok(v) if v.len() == 2 => {
                            times.push(v[0]);
                            counts.push(v[1]);
                        }
                        _ if counts.is_empty() && n == 0 => {} // a header line
                        _ => {
                            return Err(err(format!(
                                "line {}: {line:?}: expected one number (counts) or two (time ns, counts)",
                                n + 1
                            )));
                        }
                    }
                }
                let bin = if times.len() == counts.len() && times.len() >= 2 {
                    let step = (times[times.len() - 1] - times[0]) / (times.len() - 1) as f64;
                    if let Some(b) = bin_ns
                        && (b - step).abs() > 1e-3 * b
                    {
                        return Err(err(format!(
                            "time column steps by {step} ns, the data's bins are {b} ns: resample the IRF first"
                        )));
                    }
                    crate::io::recording::check_bin_ns(
                        path,
                        &format!(
                            "time column (first {} ns, last {} ns)",
                            times[0],
                            times[times.len() - 1]
                        ),
                        step,
                    )?
                } else {
                    bin_ns.ok_or_else(|| {
                        err(
                            "one column of counts: give the bin width (or add a time column in ns)"
                                .into(),
                        )
                    })?
                };
                Irf::new(counts, bin).map_err(|e| err(e.to_string()))
            }
            "npy" => {
                // The header against the bytes present, before anything is reserved.
                let header = crate::io::npy::check_header(path)?;
                if header.shape.contains(&0) {
                    return Err(err(format!(
                        "array of shape {:?}: every axis must be nonzero",
                        header.shape
                    )));
                }
                if let Ok(v) = ndarray_npy::read_npy::<_, ndarray::Array1<f64>>(path) {
                    let b =
                        bin_ns.ok_or_else(|| err("a 1-D .npy IRF needs the bin width".into()))?;
                    return Irf::new(v.to_vec(), b).map_err(|e| err(e.to_string()));
                }
                if let Ok(v) = ndarray_npy::read_npy::<_, ndarray::Array1<f32>>(path) {
                    let b =
                        bin_ns.ok_or_else(|| err("a 1-D .npy IRF needs the bin width".into()))?;
                    return Irf::new(v.iter().map(|&x| f64::from(x)).collect(), b)
                        .map_err(|e| err(e.to_string()));
                }
                Self::from_recording(path, bin_ns)
            }
            _ => Self::from_recording(path, bin_ns),
        }
    }

    fn from_recording(path: &Path, bin_ns: Option<f64>) -> Result<Irf> {
        use crate::io::recording::Format;
        // Files that store their bin width keep it (and must match the data's).
        let stores_bin_width = Format::of(path)?.stores_bin_width();
        let opts = match bin_ns {
            Some(b) if !stores_bin_width => ReadOptions::default().with_bin_ns(b),
            _ => ReadOptions::default(),
        }
        .with_sum_frames(true);
        let rec = read(path, &opts)?;
        let cube = AnyCube::sum(&rec.images.iter().map(|i| &i.cube).collect::<Vec<_>>())?;
        if let Some(b) = bin_ns
            && (cube.bin_ns() - b).abs() > 1e-3 * b
        {
            return Err(Error::Format {
                path: path.to_path_buf(),
                what: format!(
                    "the IRF reference has bins of {} ns, the data {b} ns: record both with the same TAC/binning settings",
                    cube.bin_ns()
                ),
            });
        }
        Irf::from_reference(&cube)
    }
}
