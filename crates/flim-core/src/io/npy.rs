//! NumPy `.npy` cubes through `ndarray-npy`: (y, x, bin) or a time series (frame, y, x, bin)
//! of u16, u32, f32 or f64 (read as f32). `.npy` stores no bin width, so the caller gives it.

use crate::error::Result;
use crate::io::recording::{Format, Image, MAX_BINS, Recording, format_error, in_file, io_error};
use crate::model::cube::{AnyCube, with_cube};
use crate::model::cube::{Count, Cube};
use ndarray::{ArrayD, Axis, Ix3};
use ndarray_npy::{ReadNpyError, ReadableElement, read_npy as read};
use std::path::Path;

/// Longest `.npy` header the reader accepts (64 KiB; NumPy itself refuses headers over
/// 10,000 bytes unless told otherwise).
pub const MAX_NPY_HEADER: usize = 1 << 16;

/// What a `.npy` header says, checked against the file: the shape's product times the item
/// size (checked arithmetic) must be exactly the bytes after the header.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NpyHeader {
    pub(crate) descr: String,
    pub(crate) shape: Vec<usize>,
}

/// Read and check the header of the `.npy` file `path` before anything is reserved for its
/// data (`ndarray-npy` reserves from the header's shape).
pub(crate) fn check_header(path: &Path) -> Result<NpyHeader> {
    use std::io::Read;
    let err = |what: String| format_error(path, what);
    let mut file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let len = file.metadata().map_err(|e| io_error(path, e))?.len();
    let mut pre = Vec::with_capacity(12);
    (&mut file)
        .take(12)
        .read_to_end(&mut pre)
        .map_err(|e| io_error(path, e))?;
    let got = pre.len();
    if got < 10 || &pre[..6] != b"\x93NUMPY" {
        return Err(err(format!(
            "not a NumPy .npy file: {got} bytes, expected the magic \\x93NUMPY at byte 0 and a header"
        )));
    }
    let (header_len, start) = match pre[6] {
        1 => (usize::from(u16::from_le_bytes([pre[8], pre[9]])), 10usize),
        2 | 3 if got == 12 => (
            u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]) as usize,
            12,
        ),
        v => {
            return Err(err(format!(
                "format version {v} at byte 6: expected 1, 2 or 3 (or the file is truncated)"
            )));
        }
    };
    let end = start as u64 + header_len as u64;
    if header_len > MAX_NPY_HEADER || end > len {
        return Err(err(format!(
            "header length {header_len} at byte 8: expected at most {MAX_NPY_HEADER} bytes within the file's {len} bytes (truncated?)"
        )));
    }
    let mut text = vec![0u8; header_len];
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(start as u64))
        .and_then(|_| file.read_exact(&mut text))
        .map_err(|e| io_error(path, e))?;
    let text = String::from_utf8_lossy(&text);
    let field = |key: &str| -> Option<&str> {
        let at = text.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr")
        .and_then(|r| r.strip_prefix('\'')?.split('\'').next())
        .ok_or_else(|| err(format!("header at byte {start}: no 'descr' entry")))?
        .to_string();
    let shape_text = field("shape")
        .and_then(|r| r.strip_prefix('(')?.split(')').next())
        .ok_or_else(|| err(format!("header at byte {start}: no 'shape' tuple")))?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::parse::<usize>)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            err(format!(
                "header at byte {start}: shape ({shape_text}): {e} (expected non-negative integers)"
            ))
        })?;
    let item: usize = descr
        .trim_start_matches(['<', '>', '|', '='])
        .get(1..)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            err(format!(
                "header at byte {start}: descr {descr:?} has no item size"
            ))
        })?;
    let data = len - end;
    let need = shape
        .iter()
        .try_fold(item, |acc, &d| acc.checked_mul(d))
        .and_then(|n| u64::try_from(n).ok());
    if need != Some(data) {
        return Err(err(format!(
            "header at byte {start}: shape {shape:?} of {descr:?} needs {} bytes of data, the file holds {data} after the header (byte {end}): the header and the data disagree",
            need.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
        )));
    }
    Ok(NpyHeader { descr, shape })
}

/// Read a 3-D (y, x, bin) or 4-D (frame, y, x, bin) `.npy` of counts in bins `bin_ns` wide.
/// The header is checked first (`MAX_NPY_HEADER`; the shape against the bytes present;
/// every axis nonzero; at most `MAX_BINS` bins).
pub fn read_npy(path: &Path, bin_ns: f64) -> Result<Recording> {
    // The header names the type; try the supported ones in turn.
    fn attempt<T: ReadableElement + Count>(
        path: &Path,
        bin_ns: f64,
    ) -> std::result::Result<Result<Vec<AnyCube>>, ReadNpyError>
    where
        AnyCube: From<Cube<T>>,
    {
        read::<_, ArrayD<T>>(path).map(|a| frames(path, a, bin_ns))
    }
    let header = check_header(path)?;
    let n = header.shape.len();
    if !(3..=4).contains(&n) {
        return Err(format_error(
            path,
            format!(
                "array of shape {:?} ({n}-D): expected (y, x, bin) or (frame, y, x, bin)",
                header.shape
            ),
        ));
    }
    if header.shape.contains(&0) || header.shape[n - 1] > MAX_BINS {
        return Err(format_error(
            path,
            format!(
                "array of shape {:?}: every axis must be nonzero and the last (bins) at most {MAX_BINS}",
                header.shape
            ),
        ));
    }
    let fail = |e: ReadNpyError| {
        format_error(
            path,
            format!(
                "not a 3-D (y, x, bin) or 4-D (frame, y, x, bin) array of u16, u32, f32 or f64: {e}"
            ),
        )
    };
    let cubes = match attempt::<u16>(path, bin_ns) {
        Err(ReadNpyError::WrongDescriptor(_)) => match attempt::<u32>(path, bin_ns) {
            Err(ReadNpyError::WrongDescriptor(_)) => match attempt::<f32>(path, bin_ns) {
                Err(ReadNpyError::WrongDescriptor(_)) => {
                    let a = read::<_, ArrayD<f64>>(path).map_err(fail)?;
                    frames(path, a.mapv(|v| v as f32), bin_ns)
                }
                other => other.map_err(fail)?,
            },
            other => other.map_err(fail)?,
        },
        other => other.map_err(fail)?,
    }?;
    let images = cubes
        .into_iter()
        .enumerate()
        .map(|(frame, cube)| Image {
            block: 0,
            frame,
            channel: 0,
            cube,
        })
        .collect();
    Ok(Recording {
        path: path.to_path_buf(),
        format: Format::Npy,
        images,
        metadata: vec![("format".into(), "NumPy .npy".into())],
    })
}

fn frames<T: Count>(path: &Path, a: ArrayD<T>, bin_ns: f64) -> Result<Vec<AnyCube>>
where
    AnyCube: From<Cube<T>>,
{
    let shape = a.shape().to_vec();
    let one = |a: ArrayD<T>| -> Result<AnyCube> {
        let a = a.into_dimensionality::<Ix3>().expect("3-D checked");
        Ok(Cube::new(a, bin_ns)
            .map_err(|e| in_file(path, &format!("array of shape {shape:?}"), e))?
            .into())
    };
    match shape.len() {
        3 => Ok(vec![one(a)?]),
        4 => a.axis_iter(Axis(0)).map(|f| one(f.to_owned())).collect(),
        n => Err(format_error(
            path,
            format!("array of shape {shape:?} ({n}-D): expected (y, x, bin) or (frame, y, x, bin)"),
        )),
    }
}

/// Write a cube's counts as `.npy` (y, x, bin) in its own type, e.g. for
/// `biogpu flim convert`.
pub fn write_npy(path: &Path, cube: &AnyCube) -> Result<()> {
    with_cube!(cube, |c| ndarray_npy::write_npy(path, &c.counts()))
        .map_err(|e| format_error(path, format!("writing .npy: {e}")))
}
