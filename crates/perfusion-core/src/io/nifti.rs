//! NIfTI volumes (.nii, .nii.gz) through the `nifti` crate: 4-D DCE series in, 3-D maps
//! out with the input's geometry (dimensions, voxel sizes, qform/sform).
//!
//! NIfTI-1 and NIfTI-2 files are read; NIfTI-2 headers are translated to NIfTI-1 on the way
//! in (`nifti2`), and the header returned keeps NIfTI-2's `sizeof_hdr` (540) and
//! magic (`n+2`) to remember where it came from ([`NiftiVersion::of`]). Outputs follow their
//! reference header: [`write_map`] writes NIfTI-2 (little-endian, `vox_offset` 544, 64-bit
//! fields widened from the 32-bit values read) when the reference was read from NIfTI-2, and
//! NIfTI-1 through the `nifti` crate otherwise. [`write_series`] writes NIfTI-1.

use super::nifti2;
use crate::error::{Error, Result};
use ndarray::{
    Array2, Array3, Array4, ArrayBase, ArrayView1, ArrayView3, Axis, Data, Dimension, Ix3, Ix4,
    RemoveAxis, ShapeBuilder,
};
pub use nifti::NiftiHeader;
use nifti::writer::WriterOptions;
use nifti::{InMemNiftiObject, IntoNdArray, NiftiObject};
use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

/// The NIfTI version a header was read from, and so the version of the maps written with it
/// as reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NiftiVersion {
    /// NIfTI-1 (348-byte header).
    Nifti1,
    /// NIfTI-2 (540-byte header, 64-bit fields).
    Nifti2,
}

impl NiftiVersion {
    /// The version `header` came from: NIfTI-2 for a header that [`read_series`],
    /// [`read_volume`] or [`read_header`] translated from a NIfTI-2 file (it keeps the file's
    /// `sizeof_hdr` 540 and magic `n+2`) or that [`NiftiVersion::mark`] marked; NIfTI-1
    /// otherwise.
    pub fn of(header: &NiftiHeader) -> Self {
        if header.magic == *b"n+2\0" {
            Self::Nifti2
        } else {
            Self::Nifti1
        }
    }

    /// Mark `header` as from this version (`sizeof_hdr` and magic), which outputs written
    /// with it as reference then follow.
    pub fn mark(self, header: &mut NiftiHeader) {
        (header.sizeof_hdr, header.magic) = match self {
            Self::Nifti1 => (HEADER_BYTES as i32, *b"n+1\0"),
            Self::Nifti2 => (nifti2::NIFTI2_BYTES as i32, *b"n+2\0"),
        };
    }
}

/// A 4-D series `(x, y, z, t)` with its header.
#[derive(Debug, Clone)]
pub struct Series {
    pub data: Array4<f32>,
    pub header: NiftiHeader,
    pub path: PathBuf,
}

fn file_err(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::File {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Largest voxel data, in bytes as stored, that a NIfTI file may declare: 16 GiB. Checked
/// (with overflow-checked arithmetic) before anything is allocated.
pub const MAX_NIFTI_DATA_BYTES: u64 = 1 << 34;

/// Most voxels (the product of the dimensions) a NIfTI file may declare: 2^31, 8 GiB once
/// converted to f32.
pub const MAX_NIFTI_VOXELS: u64 = 1 << 31;

/// Largest `vox_offset` (header plus extensions, in bytes): 64 MiB.
pub const MAX_VOX_OFFSET: u64 = 1 << 26;

/// Most decompressed bytes per byte of a `.nii.gz` file: 1032, the limit of DEFLATE. A header
/// that declares more data than its compressed file could hold is refused before reading.
pub const MAX_GZIP_RATIO: u64 = 1032;

/// Size of the NIfTI-1 header (`sizeof_hdr`), and of the header plus the 4-byte extender.
const HEADER_BYTES: usize = 348;
const HEADER_AND_EXTENDER: usize = 352;

/// Byte offsets of the header fields that are checked, for messages.
const OFF_DIM: usize = 40;
const OFF_DATATYPE: usize = 70;
const OFF_BITPIX: usize = 72;
const OFF_PIXDIM: usize = 76;
const OFF_VOX_OFFSET: usize = 108;
const OFF_SCL_SLOPE: usize = 112;
const OFF_MAGIC: usize = 344;

/// The data types read, with their bits per voxel; any other code is refused by name.
fn datatype_bits(code: i16) -> std::result::Result<i16, &'static str> {
    match code {
        2 | 256 => Ok(8),           // uint8, int8
        4 | 512 => Ok(16),          // int16, uint16
        8 | 16 | 768 => Ok(32),     // int32, float32, uint32
        64 | 1024 | 1280 => Ok(64), // float64, int64, uint64
        0 => Err("unknown (0)"),
        1 => Err("binary (1 bit per voxel)"),
        32 => Err("complex64"),
        128 => Err("RGB24"),
        1536 => Err("float128"),
        1792 => Err("complex128"),
        2048 => Err("complex256"),
        2304 => Err("RGBA32"),
        _ => Err("not a NIfTI-1 data type code"),
    }
}

/// What the checked header says about the file's layout.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Bytes from the start of the (decompressed) stream to the first voxel.
    vox_offset: u64,
    /// Bytes of voxel data.
    data_bytes: u64,
    little_endian: bool,
}

impl Layout {
    fn total(&self) -> u64 {
        self.vox_offset + self.data_bytes
    }
}

/// Whether `path` names a gzip-compressed file (`.gz`, as the `nifti` crate decides).
fn is_gz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// The file's (decompressed) byte stream, and the length of the file on disk.
fn open_stream(path: &Path) -> Result<(Box<dyn Read>, u64)> {
    let io = |e: std::io::Error| file_err(path, e);
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len == 0 {
        return Err(file_err(path, "the file is empty"));
    }
    let reader = BufReader::new(file);
    Ok(if is_gz(path) {
        (Box::new(nifti::object::GzDecodedFile::new(reader)), len)
    } else {
        (Box::new(reader), len)
    })
}

/// Read up to `n` more bytes of `stream` into `buf`, growing it only as bytes arrive.
fn read_up_to(path: &Path, stream: &mut dyn Read, buf: &mut Vec<u8>, n: u64) -> Result<()> {
    stream.take(n).read_to_end(buf).map_err(|e| {
        if is_gz(path) {
            file_err(
                path,
                format!("cannot decompress (corrupt or truncated gzip data): {e}"),
            )
        } else {
            file_err(path, e)
        }
    })?;
    Ok(())
}

/// Check the fields of a NIfTI-1 header (`bytes`, at least 348 long) before anything is
/// read or allocated from them: `sizeof_hdr`, magic, `dim`, `datatype` against `bitpix`,
/// `pixdim`, `vox_offset`, scaling; and the data size against the caps.
fn check_header(path: &Path, bytes: &[u8]) -> Result<Layout> {
    let bad = |offset: usize, field: &str, why: String| {
        file_err(
            path,
            format!("header field `{field}` (byte {offset}): {why}"),
        )
    };
    let le = i32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let be = i32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let little_endian = match (le, be) {
        (348, _) => true,
        (_, 348) => false,
        _ => {
            return Err(bad(
                0,
                "sizeof_hdr",
                format!("{le}, expected 348 (not a NIfTI-1 file, or a corrupt header)"),
            ));
        }
    };
    let i16_at = |o: usize| {
        let b = [bytes[o], bytes[o + 1]];
        if little_endian {
            i16::from_le_bytes(b)
        } else {
            i16::from_be_bytes(b)
        }
    };
    let f32_at = |o: usize| {
        let b: [u8; 4] = bytes[o..o + 4].try_into().expect("4 bytes");
        if little_endian {
            f32::from_le_bytes(b)
        } else {
            f32::from_be_bytes(b)
        }
    };
    let magic = &bytes[OFF_MAGIC..OFF_MAGIC + 4];
    if magic == b"ni1\0" {
        return Err(bad(
            OFF_MAGIC,
            "magic",
            "`ni1`, a header of a .hdr/.img pair; only single-file .nii and .nii.gz are read"
                .into(),
        ));
    }
    if magic != b"n+1\0" {
        return Err(bad(
            OFF_MAGIC,
            "magic",
            format!("{magic:?}, expected \"n+1\\0\" (not a NIfTI-1 file, or a corrupt header)"),
        ));
    }
    let rank = i16_at(OFF_DIM);
    if !(1..=7).contains(&rank) {
        return Err(bad(
            OFF_DIM,
            "dim[0]",
            format!("{rank} dimensions, expected 1 to 7"),
        ));
    }
    let mut voxels: u64 = 1;
    for i in 1..=rank as usize {
        let d = i16_at(OFF_DIM + 2 * i);
        if d < 1 {
            return Err(bad(
                OFF_DIM + 2 * i,
                &format!("dim[{i}]"),
                format!("{d}; every dimension must be at least 1"),
            ));
        }
        voxels = voxels.saturating_mul(d as u64);
    }
    if voxels > MAX_NIFTI_VOXELS {
        return Err(bad(
            OFF_DIM,
            "dim",
            format!("{voxels} voxels, more than the {MAX_NIFTI_VOXELS} this reader accepts"),
        ));
    }
    let datatype = i16_at(OFF_DATATYPE);
    let bits = datatype_bits(datatype).map_err(|name| {
        bad(
            OFF_DATATYPE,
            "datatype",
            format!(
                "unsupported data type {datatype} ({name}); expected an integer or real type \
                 (uint8, int8, int16, uint16, int32, uint32, int64, uint64, float32, float64)"
            ),
        )
    })?;
    let bitpix = i16_at(OFF_BITPIX);
    if bitpix != bits {
        return Err(bad(
            OFF_BITPIX,
            "bitpix",
            format!(
                "{bitpix} bits per voxel, but data type {datatype} has {bits}; the header \
                 disagrees with itself"
            ),
        ));
    }
    for i in 1..=rank as usize {
        let p = f32_at(OFF_PIXDIM + 4 * i);
        if !p.is_finite() {
            return Err(bad(
                OFF_PIXDIM + 4 * i,
                &format!("pixdim[{i}]"),
                format!("{p}; voxel sizes and the frame interval must be finite"),
            ));
        }
    }
    let off = f32_at(OFF_VOX_OFFSET);
    if !(off.is_finite() && off.fract() == 0.0 && off >= HEADER_AND_EXTENDER as f32)
        || f64::from(off) > MAX_VOX_OFFSET as f64
    {
        return Err(bad(
            OFF_VOX_OFFSET,
            "vox_offset",
            format!(
                "{off}; expected a whole number of bytes from {HEADER_AND_EXTENDER} to \
                 {MAX_VOX_OFFSET}"
            ),
        ));
    }
    let (slope, inter) = (f32_at(OFF_SCL_SLOPE), f32_at(OFF_SCL_SLOPE + 4));
    if !slope.is_finite() || (slope != 0.0 && !inter.is_finite()) {
        return Err(bad(
            OFF_SCL_SLOPE,
            "scl_slope/scl_inter",
            format!("{slope}/{inter}; the scaling must be finite"),
        ));
    }
    let data_bytes = voxels * (bits as u64 / 8);
    if data_bytes > MAX_NIFTI_DATA_BYTES {
        return Err(bad(
            OFF_DIM,
            "dim",
            format!(
                "{data_bytes} bytes of voxel data, more than the {MAX_NIFTI_DATA_BYTES} this \
                 reader accepts"
            ),
        ));
    }
    Ok(Layout {
        vox_offset: off as u64,
        data_bytes,
        little_endian,
    })
}

/// Check the extension blocks between the header and `vox_offset`: each `esize` at least 8
/// and inside the region, so the `nifti` crate never reserves from a corrupt size.
fn check_extensions(path: &Path, bytes: &[u8], layout: Layout) -> Result<()> {
    let end = layout.vox_offset as usize;
    if bytes[HEADER_BYTES] == 0 {
        return Ok(());
    }
    let mut at = HEADER_AND_EXTENDER;
    while at < end {
        if at + 8 > end {
            return Err(file_err(
                path,
                format!(
                    "extension at byte {at}: {} bytes left before vox_offset {end}, an \
                     extension needs at least 8",
                    end - at
                ),
            ));
        }
        let b: [u8; 4] = bytes[at..at + 4].try_into().expect("4 bytes");
        let esize = if layout.little_endian {
            i32::from_le_bytes(b)
        } else {
            i32::from_be_bytes(b)
        };
        if esize < 8 || esize as usize > end - at {
            return Err(file_err(
                path,
                format!(
                    "extension at byte {at}: esize {esize}, expected 8 to {} (the bytes left \
                     before vox_offset {end})",
                    end - at
                ),
            ));
        }
        at += esize as usize;
    }
    Ok(())
}

/// The NIfTI-1 header bytes (348 plus the extender; translated from a NIfTI-2 header), the
/// open stream positioned after them (at the voxel data for NIfTI-2), the file's length as if
/// it had the NIfTI-1 header, and the version the file had.
type HeaderBytes = (Vec<u8>, Box<dyn Read>, u64, NiftiVersion);

fn read_header_bytes(path: &Path) -> Result<HeaderBytes> {
    let (mut stream, file_len) = open_stream(path)?;
    let mut bytes = Vec::with_capacity(HEADER_AND_EXTENDER);
    read_up_to(path, &mut stream, &mut bytes, HEADER_AND_EXTENDER as u64)?;
    if bytes.len() < HEADER_AND_EXTENDER {
        let gz = if is_gz(path) { " (decompressed)" } else { "" };
        let magic = if bytes.starts_with(&[0x1f, 0x8b]) && !is_gz(path) {
            "; it is gzip-compressed, so name it .nii.gz"
        } else {
            ""
        };
        return Err(file_err(
            path,
            format!(
                "truncated: {} bytes{gz}, a NIfTI-1 file needs at least {HEADER_AND_EXTENDER} \
                 (header and extender){magic}",
                bytes.len()
            ),
        ));
    }
    if !nifti2::is_nifti2(&bytes) {
        return Ok((bytes, stream, file_len, NiftiVersion::Nifti1));
    }
    // NIfTI-2: translate the header, skip to the voxel data, and account the file's length
    // as if it had the NIfTI-1 header.
    let more = (nifti2::NIFTI2_BYTES - bytes.len()) as u64;
    read_up_to(path, &mut stream, &mut bytes, more)?;
    if bytes.len() < nifti2::NIFTI2_BYTES {
        return Err(file_err(
            path,
            format!(
                "truncated: {} bytes, a NIfTI-2 header needs {}",
                bytes.len(),
                nifti2::NIFTI2_BYTES
            ),
        ));
    }
    let (header, vox_offset) = nifti2::to_nifti1(path, &bytes)?;
    let skip = vox_offset - nifti2::NIFTI2_BYTES as u64;
    let skipped = std::io::copy(&mut (&mut stream).take(skip), &mut std::io::sink())
        .map_err(|e| file_err(path, format!("reading the NIfTI-2 extensions: {e}")))?;
    if skipped != skip {
        return Err(file_err(
            path,
            format!("truncated: the file ends before the voxel data at byte {vox_offset}"),
        ));
    }
    let file_len = if is_gz(path) {
        file_len
    } else {
        file_len.saturating_sub(vox_offset - HEADER_AND_EXTENDER as u64)
    };
    Ok((header, stream, file_len, NiftiVersion::Nifti2))
}

/// Read the whole (decompressed) file after checking its header, its size against the
/// header and the caps, and its extensions; with the version the file had.
fn read_checked_bytes(path: &Path) -> Result<(Vec<u8>, NiftiVersion)> {
    let (mut bytes, mut stream, file_len, version) = read_header_bytes(path)?;
    if !is_gz(path) && bytes.starts_with(&[0x1f, 0x8b]) {
        return Err(file_err(
            path,
            "the file is gzip-compressed; name it .nii.gz",
        ));
    }
    let layout = check_header(path, &bytes)?;
    let total = layout.total();
    let gz = is_gz(path);
    if gz {
        let most = file_len.saturating_mul(MAX_GZIP_RATIO);
        if total > most {
            return Err(file_err(
                path,
                format!(
                    "the header declares {total} bytes (vox_offset {} + {} bytes of voxel data), \
                     more than a {file_len}-byte gzip file can hold (at most {most}); the \
                     header is corrupt or the file truncated",
                    layout.vox_offset, layout.data_bytes
                ),
            ));
        }
    } else if file_len != total {
        let what = if file_len < total {
            "truncated"
        } else {
            "longer than its header says"
        };
        return Err(file_err(
            path,
            format!(
                "{what}: {file_len} bytes, the header declares {total} (vox_offset {} + {} \
                 bytes of voxel data); check dim, datatype and vox_offset",
                layout.vox_offset, layout.data_bytes
            ),
        ));
    }
    // Bounded by the caps and the file's size, checked above.
    let total = usize::try_from(total).map_err(|_| {
        file_err(
            path,
            format!("{total} bytes is too large for this platform"),
        )
    })?;
    bytes.try_reserve_exact(total - bytes.len()).map_err(|_| {
        file_err(
            path,
            format!("cannot allocate {total} bytes to read the file"),
        )
    })?;
    let rest = (total - bytes.len()) as u64 + 1;
    read_up_to(path, &mut stream, &mut bytes, rest)?;
    if bytes.len() != total {
        let what = if bytes.len() < total {
            "truncated"
        } else {
            "longer than its header says"
        };
        return Err(file_err(
            path,
            format!(
                "{what}: the decompressed data {} {} bytes, the header declares {total} \
                 (vox_offset {} + {} bytes of voxel data)",
                if bytes.len() < total {
                    "end after"
                } else {
                    "run past"
                },
                bytes.len().min(total),
                layout.vox_offset,
                layout.data_bytes
            ),
        ));
    }
    check_extensions(path, &bytes, layout)?;
    Ok((bytes, version))
}

/// Run a call into the `nifti` crate, turning a panic inside it into an error naming the file.
fn guarded<T>(path: &Path, what: &str, f: impl FnOnce() -> T) -> Result<T> {
    gpu_runtime::contain_panic(f).map_err(|msg| {
        file_err(
            path,
            format!("the NIfTI decoder failed while {what} (internal panic: {msg})"),
        )
    })
}

fn read(path: &Path) -> Result<(ndarray::ArrayD<f32>, NiftiHeader)> {
    let (bytes, version) = read_checked_bytes(path)?;
    let obj = guarded(path, "parsing the file", || {
        InMemNiftiObject::from_reader(Cursor::new(&bytes[..]))
    })?
    .map_err(|e| file_err(path, format!("cannot read as NIfTI-1: {e}")))?;
    drop(bytes);
    let mut header = obj.header().clone();
    version.mark(&mut header);
    let data = guarded(path, "converting the voxel data", || {
        obj.into_volume().into_ndarray::<f32>()
    })?
    .map_err(|e| file_err(path, format!("cannot convert the voxel data: {e}")))?;
    let want: Vec<usize> = header.dim[1..=header.dim[0] as usize]
        .iter()
        .map(|&d| d as usize)
        .collect();
    if data.shape() != want.as_slice() {
        return Err(file_err(
            path,
            format!(
                "the decoder returned shape {:?}, the header declares {want:?}",
                data.shape()
            ),
        ));
    }
    Ok((data, header))
}

/// The header of a NIfTI file, checked as [`read_series`] checks it (without reading the
/// voxel data of a `.nii.gz`).
pub fn read_header(path: &Path) -> Result<NiftiHeader> {
    let (bytes, _, file_len, version) = read_header_bytes(path)?;
    let layout = check_header(path, &bytes)?;
    if is_gz(path) && layout.total() > file_len.saturating_mul(MAX_GZIP_RATIO) {
        return Err(file_err(
            path,
            format!(
                "the header declares {} bytes, more than a {file_len}-byte gzip file can hold",
                layout.total()
            ),
        ));
    }
    if !is_gz(path) && file_len != layout.total() {
        return Err(file_err(
            path,
            format!(
                "{file_len} bytes, the header declares {} (vox_offset {} + {} bytes of voxel \
                 data); check dim, datatype and vox_offset",
                layout.total(),
                layout.vox_offset,
                layout.data_bytes
            ),
        ));
    }
    let mut header = guarded(path, "parsing the header", || {
        NiftiHeader::from_reader(Cursor::new(&bytes[..]))
    })?
    .map_err(|e| file_err(path, format!("cannot read a NIfTI-1 header: {e}")))?;
    version.mark(&mut header);
    Ok(header)
}

/// Read a 4-D series (a 3-D file is one frame).
pub fn read_series(path: &Path) -> Result<Series> {
    let (data, header) = read(path)?;
    let data = match data.ndim() {
        4 => data.into_dimensionality::<Ix4>(),
        3 => data.insert_axis(Axis(3)).into_dimensionality::<Ix4>(),
        n => {
            return Err(file_err(
                path,
                format!("{n}-D volume; a DCE series is 4-D (x, y, z, time)"),
            ));
        }
    }
    .map_err(|e| file_err(path, e))?;
    Ok(Series {
        data,
        header,
        path: path.to_path_buf(),
    })
}

/// Read a 3-D volume (a mask, a T1 map); a 4-D file with one frame is accepted.
pub fn read_volume(path: &Path) -> Result<(Array3<f32>, NiftiHeader)> {
    let (data, header) = read(path)?;
    let shape = data.shape().to_vec();
    let data = match data.ndim() {
        3 => data
            .into_dimensionality::<Ix3>()
            .map_err(|e| file_err(path, e))?,
        4 if shape[3] == 1 => data
            .index_axis_move(Axis(3), 0)
            .into_dimensionality::<Ix3>()
            .map_err(|e| file_err(path, e))?,
        _ => {
            return Err(file_err(
                path,
                format!("shape {shape:?}; expected a 3-D volume"),
            ));
        }
    };
    Ok((data, header))
}

/// Frame interval (s) from the header's 4th voxel size and time unit, if it gives one.
pub fn frame_interval_s(header: &NiftiHeader) -> Option<f64> {
    let dt = f64::from(header.pixdim[4]);
    if !(dt.is_finite() && dt > 0.0) {
        return None;
    }
    // xyzt_units bits 3-5: 8 s, 16 ms, 24 us; 0 (unknown) is taken as seconds.
    // Other codes (Hz, ppm, rad/s) are not a time unit: no interval rather than a wrong one.
    let scale = match header.xyzt_units & 0x38 {
        0 | 8 => 1.0,
        16 => 1e-3,
        24 => 1e-6,
        _ => return None,
    };
    Some(dt * scale)
}

/// The voxels where `mask` is set: their curves `(voxels, t)` and their indices, in x-fastest
/// order (the file's). The curves are stored time-major (column-major), the layout the GPU
/// path uploads without a transpose.
pub fn masked_curves(
    series: &Array4<f32>,
    mask: &Array3<bool>,
) -> Result<(Array2<f32>, Vec<[usize; 3]>)> {
    let (nx, ny, nz, nt) = series.dim();
    if mask.dim() != (nx, ny, nz) {
        return Err(Error::ShapeMismatch {
            what: "mask and DCE series".into(),
            expected: vec![nx, ny, nz],
            got: mask.shape().to_vec(),
        });
    }
    let mut index = Vec::new();
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                if mask[[x, y, z]] {
                    index.push([x, y, z]);
                }
            }
        }
    }
    let mut curves = Array2::zeros((index.len(), nt).f());
    for (t, mut col) in curves.columns_mut().into_iter().enumerate() {
        let frame = series.index_axis(Axis(3), t);
        for (c, &[x, y, z]) in col.iter_mut().zip(&index) {
            *c = frame[[x, y, z]];
        }
    }
    Ok((curves, index))
}

/// Mean curve over the voxels of `mask` (an input function from an ROI).
pub fn roi_mean(series: &Array4<f32>, mask: &Array3<bool>, what: &'static str) -> Result<Vec<f64>> {
    let (curves, index) = masked_curves(series, mask)?;
    if index.is_empty() {
        return Err(Error::InvalidInputFunction {
            which: what,
            why: "its ROI mask selects no voxel".into(),
        });
    }
    let n = index.len() as f64;
    Ok(curves
        .columns()
        .into_iter()
        .map(|c| c.iter().map(|&v| f64::from(v)).sum::<f64>() / n)
        .collect())
}

/// A map of `values` (one per masked voxel) on the volume's grid; NaN outside the mask.
pub fn scatter(
    values: ArrayView1<f64>,
    index: &[[usize; 3]],
    shape: (usize, usize, usize),
) -> Array3<f32> {
    let mut out = Array3::from_elem(shape, f32::NAN);
    for (&v, &[x, y, z]) in values.iter().zip(index) {
        out[[x, y, z]] = v as f32;
    }
    out
}

/// Write a 3-D map with the geometry of `reference` (.nii or .nii.gz by the extension), in
/// the NIfTI version `reference` came from ([`NiftiVersion::of`]).
pub fn write_map<T>(path: &Path, map: ArrayView3<T>, reference: &NiftiHeader) -> Result<()>
where
    T: nifti::DataElement + bytemuck::Pod,
{
    let mut header = reference.clone();
    header.pixdim[4] = 0.0;
    header.xyzt_units &= 0x07; // keep the space unit, drop the time unit
    write(path, &map, &header)
}

/// Write `data` with the fields of `header` (its `dim`, `datatype`, `bitpix` and scaling set
/// from the data, as the `nifti` crate sets them), in the version of `header`.
fn write<T, S, D>(path: &Path, data: &ArrayBase<S, D>, header: &NiftiHeader) -> Result<()>
where
    T: nifti::DataElement + bytemuck::Pod,
    S: Data<Elem = T>,
    D: Dimension + RemoveAxis,
{
    let header = &stamped(header);
    match NiftiVersion::of(header) {
        NiftiVersion::Nifti1 => WriterOptions::new(path)
            .reference_header(header)
            .write_nifti(data)
            .map_err(|e| file_err(path, format!("cannot write NIfTI: {e}"))),
        NiftiVersion::Nifti2 => write_nifti2(path, data, header),
    }
}

/// `header` with `descrip` (80 bytes, NUL-padded) saying what wrote the file, as the TIFF
/// Software tag of the other modalities does ([`imaging_io::software_note`]).
fn stamped(header: &NiftiHeader) -> NiftiHeader {
    let note = imaging_io::software_note().as_bytes();
    let mut descrip = note[..note.len().min(79)].to_vec();
    descrip.resize(80, 0);
    NiftiHeader {
        descrip,
        ..header.clone()
    }
}

/// Write a single-file NIfTI-2 (`.nii`, or `.nii.gz` as stored gzip): the header from
/// [`nifti2::to_nifti2`], then the voxels little-endian in x-fastest order.
fn write_nifti2<T, S, D>(path: &Path, data: &ArrayBase<S, D>, header: &NiftiHeader) -> Result<()>
where
    T: nifti::DataElement + bytemuck::Pod,
    S: Data<Elem = T>,
    D: Dimension,
{
    let ext = path.extension().map(std::ffi::OsStr::to_ascii_lowercase);
    if ext.as_deref().is_some_and(|e| e == "hdr" || e == "img") {
        return Err(file_err(
            path,
            "NIfTI-2 is written as a single .nii or .nii.gz file, not a .hdr/.img pair",
        ));
    }
    // As the `nifti` crate does: a name without an extension gets `.nii`.
    let path = match ext {
        None => path.with_extension("nii"),
        Some(_) => path.to_path_buf(),
    };
    let path = path.as_path();
    let size = std::mem::size_of::<T>();
    let header = NiftiHeader {
        datatype: T::DATA_TYPE as i16,
        bitpix: (8 * size) as i16,
        scl_slope: 1.0,
        scl_inter: 0.0,
        ..header.clone()
    };
    let mut bytes = nifti2::to_nifti2(&header, data.shape());
    let data_bytes = data.len().saturating_mul(size);
    bytes.try_reserve_exact(data_bytes).map_err(|_| {
        file_err(
            path,
            format!("cannot allocate {data_bytes} bytes to write the file"),
        )
    })?;
    // The reversed axes iterate x fastest, the file's order.
    for v in &data.t() {
        let b = bytemuck::bytes_of(v);
        if cfg!(target_endian = "little") {
            bytes.extend_from_slice(b);
        } else {
            bytes.extend(b.iter().rev());
        }
    }
    let bytes = if is_gz(path) {
        nifti2::gzip(&bytes).map_err(|e| file_err(path, format!("cannot compress NIfTI-2: {e}")))?
    } else {
        bytes
    };
    std::fs::write(path, bytes).map_err(|e| file_err(path, format!("cannot write NIfTI-2: {e}")))
}

/// Write a 4-D series as NIfTI-1 (used by `biogpu perfusion simulate` and the demo).
pub fn write_series(path: &Path, data: &Array4<f32>, voxel_mm: [f32; 3], dt_s: f32) -> Result<()> {
    let header = NiftiHeader {
        pixdim: [
            1.0,
            voxel_mm[0],
            voxel_mm[1],
            voxel_mm[2],
            dt_s,
            0.0,
            0.0,
            0.0,
        ],
        xyzt_units: 2 | 8, // mm, s
        sform_code: 1,
        srow_x: [voxel_mm[0], 0.0, 0.0, 0.0],
        srow_y: [0.0, voxel_mm[1], 0.0, 0.0],
        srow_z: [0.0, 0.0, voxel_mm[2], 0.0],
        ..NiftiHeader::default()
    };
    write(path, data, &header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_round_trip_with_time_step_and_masked_curves() {
        let dir = std::env::temp_dir().join(format!("perfusion-nifti-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = Array4::from_shape_fn((3, 4, 2, 5), |(x, y, z, t)| {
            (x + 10 * y + 100 * z) as f32 + 0.5 * t as f32
        });
        for name in ["s.nii", "s.nii.gz"] {
            let path = dir.join(name);
            write_series(&path, &data, [1.5, 1.5, 3.0], 2.37).unwrap();
            let back = read_series(&path).unwrap();
            assert_eq!(back.data, data);
            assert!((frame_interval_s(&back.header).unwrap() - 2.37).abs() < 1e-6);
            let mut mask = Array3::from_elem((3, 4, 2), false);
            mask[[2, 1, 0]] = true;
            mask[[0, 3, 1]] = true;
            let (curves, index) = masked_curves(&back.data, &mask).unwrap();
            assert_eq!(index, vec![[2, 1, 0], [0, 3, 1]]);
            assert_eq!(curves[[1, 2]], 130.0 + 1.0);
            let map = scatter(curves.column(0).mapv(f64::from).view(), &index, (3, 4, 2));
            let mpath = dir.join(format!("m-{name}"));
            write_map(&mpath, map.view(), &back.header).unwrap();
            let (m, h) = read_volume(&mpath).unwrap();
            assert_eq!(m[[2, 1, 0]], 12.0);
            assert!(h.descrip.starts_with(b"biogpu "), "{:?}", h.descrip);
            assert!(m[[0, 0, 0]].is_nan());
            assert_eq!(h.pixdim[1..4], [1.5, 1.5, 3.0]);
            let bad = Array3::from_elem((3, 4, 3), true);
            let e = masked_curves(&back.data, &bad).unwrap_err().to_string();
            assert!(e.contains("mask") && e.contains("[3, 4, 2]"), "{e}");
        }
        let e = read_series(&dir.join("missing.nii"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.nii"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
