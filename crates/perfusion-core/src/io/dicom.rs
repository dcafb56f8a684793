//! 4-D DCE-MRI series from a folder of classic DICOM images (one file per slice per time
//! point, as MR Image Storage exports them), read through dicom-rs into the same
//! [`Series`] the NIfTI reader gives, with a NIfTI-1 header that carries the DICOM geometry,
//! so that maps written with [`write_map`](super::nifti::write_map) land on the input's grid.
//!
//! **Files.** The folder is read recursively (at most [`MAX_FOLDER_DEPTH`] levels, symbolic
//! links to folders not followed, names starting with `.` ignored), so a study exported as
//! `patient/study/series/` can be pointed at any level; the files must then hold one series
//! ([`read_series_choice`] picks one of several by number or UID; a path to one file reads
//! the series of that file from its folder). A file without the `DICM` marker at byte 128 is
//! skipped with a warning, and so is a DICOM object that is not an image (a DICOMDIR, a
//! report); a folder with nothing else is an error. Only the native (uncompressed) transfer
//! syntaxes are read: implicit and explicit VR little endian, explicit VR big endian; a
//! compressed one is an error naming it. Enhanced multi-frame files are not read yet.
//!
//! **Order.** Slices are ordered by their position along the slice normal,
//! `ImagePositionPatient . (row x column)` of `ImageOrientationPatient`, and must be evenly
//! spaced and stacked along the normal. Time points are the `TemporalPositionIdentifier`
//! (0020,0100) groups where every file has one; otherwise the k-th image of every slice
//! position by acquisition time is time point k. The time of a file is, from the first of
//! these that every file of the series has: `AcquisitionDateTime` (0008,002A);
//! `AcquisitionDate` (0008,0022) + `AcquisitionTime` (0008,0032); `AcquisitionTime` alone;
//! `ContentDate` (0008,0023) + `ContentTime` (0008,0033); `ContentTime` alone;
//! `TriggerTime` (0018,1060, ms). Times of day whose date does not change across the series
//! (scanners write the series' start date) are unwrapped at midnight, assuming an
//! acquisition shorter than 12 hours. A frame's time is the time of its first acquired
//! slice, relative to the first frame, in seconds ([`DicomSeries::time_tag`] says which tag
//! gave it). A time point must have every slice once, frame times must increase, and the
//! slices of a time point must be acquired before the next time point begins.
//!
//! **Values** are `RescaleSlope * stored + RescaleIntercept` (0028,1053 / 0028,1052) per file,
//! as f32. **Geometry**: DICOM's patient coordinates are LPS, NIfTI's RAS: the affine's first
//! two rows are negated; voxel x runs along a row (columns), y down the columns (rows), z
//! along the normal; sform and qform (code 1, scanner) hold the same affine.

use super::nifti::{MAX_NIFTI_VOXELS, NiftiHeader, NiftiVersion, Series};
use crate::error::{Error, Result};
use dicom_core::Tag;
use dicom_core::dictionary::{DataDictionary, DataDictionaryEntry};
use dicom_core::value::{PrimitiveValue, Value};
use dicom_dictionary_std::{StandardDataDictionary, tags};
use dicom_object::file::ReadPreamble;
use dicom_object::meta::FileMetaTable;
use dicom_object::{DefaultDicomObject, OpenFileOptions};
use ndarray::Array4;
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Most files looked at in a folder (DICOM or not): 200,000.
pub const MAX_DICOM_FILES: usize = 200_000;

/// Largest DICOM file read: 1 GiB (one slice of one time point is far smaller).
pub const MAX_DICOM_FILE_BYTES: u64 = 1 << 30;

/// Deepest sub-folder read below the folder given.
pub const MAX_FOLDER_DEPTH: usize = 16;

/// Two slice positions along the normal closer than this (mm) are the same slice.
const POSITION_TOL_MM: f64 = 0.01;
/// Largest difference of direction cosines between files of a series.
const ORIENTATION_TOL: f64 = 1e-4;
/// Largest relative difference of pixel spacings between files, and of a slice gap from
/// the mean gap.
const SPACING_REL_TOL: f64 = 1e-3;
const SLICE_GAP_REL_TOL: f64 = 1e-2;
/// Largest relative difference of flip angle, TR or field strength between files.
const PARAM_REL_TOL: f64 = 1e-3;
/// Half a day: times of day further apart than this have crossed midnight.
const HALF_DAY_S: f64 = 43_200.0;

/// The acquisition parameters of a series, where its headers give them: the same in every
/// file that has them (checked), for the signal-to-concentration conversion.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Acquisition {
    /// FlipAngle (0018,1314), degrees.
    pub flip_angle_deg: Option<f64>,
    /// RepetitionTime (0018,0080), converted from ms to s.
    pub tr_s: Option<f64>,
    /// MagneticFieldStrength (0018,0087), tesla.
    pub field_t: Option<f64>,
}

impl Acquisition {
    /// The flip angle (degrees) and TR (s) for an SPGR conversion: the ones given win, the
    /// header's fill in the others; a given value more than 1% from the header's is kept,
    /// with a warning (a typo, or a header that does not describe the data).
    pub fn spgr_settings(
        &self,
        flip_deg: Option<f64>,
        tr_s: Option<f64>,
    ) -> (Option<f64>, Option<f64>) {
        let pick = |given: Option<f64>, header: Option<f64>, option: &str, tag: &str| match (
            given, header,
        ) {
            (Some(g), Some(h)) => {
                if (g - h).abs() > 0.01 * h.abs() {
                    tracing::warn!(
                        "{option} {g} differs from the DICOM header's {tag} {h} by more than 1%; using {g}"
                    );
                }
                Some(g)
            }
            (g, h) => g.or(h),
        };
        (
            pick(
                flip_deg,
                self.flip_angle_deg,
                "--flip-angle",
                "FlipAngle (degrees)",
            ),
            pick(tr_s, self.tr_s, "--tr", "RepetitionTime (in s)"),
        )
    }
}

/// Which header field gave the times of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeTag {
    /// AcquisitionDateTime (0008,002A).
    AcquisitionDateTime,
    /// AcquisitionDate (0008,0022) + AcquisitionTime (0008,0032).
    AcquisitionDateAndTime,
    /// AcquisitionTime (0008,0032) alone.
    AcquisitionTime,
    /// ContentDate (0008,0023) + ContentTime (0008,0033).
    ContentDateAndTime,
    /// ContentTime (0008,0033) alone.
    ContentTime,
    /// TriggerTime (0018,1060), ms.
    TriggerTime,
}

impl TimeTag {
    /// The order in which the tags are tried: the first one every file has is used.
    pub const ALL: [TimeTag; 6] = [
        TimeTag::AcquisitionDateTime,
        TimeTag::AcquisitionDateAndTime,
        TimeTag::AcquisitionTime,
        TimeTag::ContentDateAndTime,
        TimeTag::ContentTime,
        TimeTag::TriggerTime,
    ];

    /// The tag names and numbers, for messages.
    pub fn name(self) -> &'static str {
        match self {
            TimeTag::AcquisitionDateTime => "AcquisitionDateTime (0008,002A)",
            TimeTag::AcquisitionDateAndTime => {
                "AcquisitionDate (0008,0022) + AcquisitionTime (0008,0032)"
            }
            TimeTag::AcquisitionTime => "AcquisitionTime (0008,0032)",
            TimeTag::ContentDateAndTime => "ContentDate (0008,0023) + ContentTime (0008,0033)",
            TimeTag::ContentTime => "ContentTime (0008,0033)",
            TimeTag::TriggerTime => "TriggerTime (0018,1060)",
        }
    }
}

/// A DICOM series read as a 4-D volume.
#[derive(Debug, Clone)]
pub struct DicomSeries {
    /// Values `(x = column, y = row, z = slice along the normal, t)`, the NIfTI-1 header
    /// with the geometry (float32, mm and s, sform = qform), and the folder read.
    pub series: Series,
    /// Frame times (s) from the first frame's.
    pub times: Vec<f64>,
    pub acquisition: Acquisition,
    pub time_tag: TimeTag,
    /// SeriesInstanceUID (0020,000E) and SeriesDescription (0008,103E).
    pub series_uid: String,
    pub description: String,
    /// The file of every slice and time point, `files[t * nz + z]`.
    pub files: Vec<PathBuf>,
}

/// Whether `path` names DICOM input: a folder, or a file with the `DICM` marker at byte 128.
pub fn is_dicom(path: &Path) -> bool {
    path.is_dir() || has_dicm_marker(path).unwrap_or(false)
}

/// Read the one series under `path` (a folder, or a file whose series is read from its
/// folder).
pub fn read_series(path: &Path) -> Result<DicomSeries> {
    read_series_choice(path, None)
}

/// Read one series under `path`: `choice` is its number in the list that a folder with
/// several series gives in its error (1, 2, ...) or its SeriesInstanceUID.
pub fn read_series_choice(path: &Path, choice: Option<&str>) -> Result<DicomSeries> {
    let plan = plan(path, choice)?;
    let data = read_pixels(&plan)?;
    let header = nifti_header(&plan, data.dim());
    let files = plan
        .frames
        .iter()
        .flat_map(|f| f.iter().map(|&i| plan.images[i].path.clone()))
        .collect();
    Ok(DicomSeries {
        series: Series {
            data,
            header,
            path: plan.root.clone(),
        },
        times: plan.times,
        acquisition: plan.acquisition,
        time_tag: plan.time_tag,
        series_uid: plan.series_uid,
        description: plan.description,
        files,
    })
}

/// The acquisition parameters of the series [`read_series`] would read, from the headers
/// alone (the pixel data are not read), with the same checks of the series' layout.
pub fn read_acquisition(path: &Path) -> Result<Acquisition> {
    read_acquisition_choice(path, None)
}

/// [`read_acquisition`] of the series `choice` names, as [`read_series_choice`] takes it.
pub fn read_acquisition_choice(path: &Path, choice: Option<&str>) -> Result<Acquisition> {
    Ok(plan(path, choice)?.acquisition)
}

// ---------------------------------------------------------------------------------------
// Files

fn file_err(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::File {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// `(0018,1314) FlipAngle`, for messages.
fn tag_name(tag: Tag) -> String {
    match StandardDataDictionary.by_tag(tag) {
        Some(e) => format!("{} {tag}", e.alias()),
        None => tag.to_string(),
    }
}

fn tag_err(path: &Path, tag: Tag, why: impl std::fmt::Display) -> Error {
    file_err(path, format!("{}: {why}", tag_name(tag)))
}

/// Whether the file has `DICM` at byte 128 (the DICOM file preamble); `None` if it cannot
/// be read.
fn has_dicm_marker(path: &Path) -> Option<bool> {
    let mut head = [0u8; 132];
    let mut f = std::fs::File::open(path).ok()?;
    let mut got = 0;
    while got < head.len() {
        match f.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(_) => return None,
        }
    }
    Some(got == head.len() && &head[128..132] == b"DICM")
}

/// Every regular file under `root` (sorted, recursive), without names starting with `.`.
fn list_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| file_err(&dir, e))?;
        let mut names: Vec<PathBuf> = entries
            .filter_map(std::result::Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                !p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
            })
            .collect();
        names.sort();
        for p in names.into_iter().rev() {
            let meta = std::fs::symlink_metadata(&p).map_err(|e| file_err(&p, e))?;
            if meta.is_dir() {
                if depth < MAX_FOLDER_DEPTH {
                    stack.push((p, depth + 1));
                }
            } else if p.is_file() {
                out.push(p);
                if out.len() > MAX_DICOM_FILES {
                    return Err(file_err(
                        root,
                        format!(
                            "more than {MAX_DICOM_FILES} files below this folder; point at one \
                             series' folder"
                        ),
                    ));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The transfer syntaxes whose pixel data are read as they are stored.
fn native_syntax(uid: &str) -> bool {
    matches!(
        uid,
        "1.2.840.10008.1.2" | "1.2.840.10008.1.2.1" | "1.2.840.10008.1.2.2"
    )
}

/// A transfer syntax's name, for messages.
fn syntax_name(uid: &str) -> &'static str {
    match uid {
        "1.2.840.10008.1.2" => "Implicit VR Little Endian",
        "1.2.840.10008.1.2.1" => "Explicit VR Little Endian",
        "1.2.840.10008.1.2.2" => "Explicit VR Big Endian",
        "1.2.840.10008.1.2.1.99" => "Deflated Explicit VR Little Endian",
        "1.2.840.10008.1.2.4.50" => "JPEG Baseline (Process 1)",
        "1.2.840.10008.1.2.4.51" => "JPEG Extended (Process 2 & 4)",
        "1.2.840.10008.1.2.4.57" => "JPEG Lossless (Process 14)",
        "1.2.840.10008.1.2.4.70" => "JPEG Lossless SV1",
        "1.2.840.10008.1.2.4.80" => "JPEG-LS Lossless",
        "1.2.840.10008.1.2.4.81" => "JPEG-LS Near-Lossless",
        "1.2.840.10008.1.2.4.90" => "JPEG 2000 Lossless",
        "1.2.840.10008.1.2.4.91" => "JPEG 2000",
        "1.2.840.10008.1.2.4.201" => "HTJ2K Lossless",
        "1.2.840.10008.1.2.4.202" => "HTJ2K Lossless RPCL",
        "1.2.840.10008.1.2.4.203" => "HTJ2K",
        "1.2.840.10008.1.2.5" => "RLE Lossless",
        _ => "an unknown or video transfer syntax",
    }
}

fn unsupported_syntax(path: &Path, uid: &str) -> Error {
    file_err(
        path,
        format!(
            "transfer syntax {uid} ({}) is compressed and not decoded here; only uncompressed \
             DICOM is read (implicit/explicit VR little endian, explicit VR big endian): \
             decompress the series first (e.g. `gdcmconv --raw` or `dcmdjpeg`) or convert it \
             to NIfTI (e.g. dcm2niix)",
            syntax_name(uid)
        ),
    )
}

/// Open a DICOM file through dicom-rs (the header up to the pixel data, or all), turning a
/// parse failure into an error naming the file and, where the file meta says so, an
/// unsupported transfer syntax; a panic inside the parser is an error too.
fn open(path: &Path, headers_only: bool) -> Result<DefaultDicomObject> {
    let len = std::fs::metadata(path)
        .map_err(|e| file_err(path, e))?
        .len();
    if len > MAX_DICOM_FILE_BYTES {
        return Err(file_err(
            path,
            format!("{len} bytes, more than the {MAX_DICOM_FILE_BYTES} a DICOM file may have here"),
        ));
    }
    let mut options = OpenFileOptions::new().read_preamble(ReadPreamble::Always);
    if headers_only {
        options = options.read_until(tags::PIXEL_DATA);
    }
    let opened = gpu_runtime::contain_panic(|| options.open_file(path)).map_err(|msg| {
        file_err(
            path,
            format!("the DICOM parser failed (internal panic: {msg})"),
        )
    })?;
    opened.map_err(|e| {
        if let Some(uid) = meta_syntax(path).filter(|u| !native_syntax(u)) {
            return unsupported_syntax(path, &uid);
        }
        file_err(
            path,
            format!(
                "cannot read as DICOM (truncated or corrupt?): {}",
                error_chain(&e)
            ),
        )
    })
}

/// The transfer syntax UID of the file meta group, if it can be read.
fn meta_syntax(path: &Path) -> Option<String> {
    let mut f = std::io::BufReader::new(std::fs::File::open(path).ok()?);
    let mut preamble = [0u8; 128];
    f.read_exact(&mut preamble).ok()?;
    let meta = gpu_runtime::contain_panic(|| FileMetaTable::from_reader(f).ok())
        .ok()
        .flatten()?;
    Some(
        meta.transfer_syntax()
            .trim_end_matches(['\0', ' '])
            .to_string(),
    )
}

/// An error and its sources, one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

// ---------------------------------------------------------------------------------------
// Header fields

/// A string field, trimmed; `None` if absent or empty.
fn text(obj: &DefaultDicomObject, tag: Tag) -> Option<String> {
    let s = obj.get(tag)?.to_str().ok()?;
    let s = s.trim_matches(['\0', ' ']);
    (!s.is_empty()).then(|| s.to_string())
}

/// The numbers of a field (DS, IS, US, FD, ...); `None` if absent or empty; an error naming
/// the file and tag if they are not finite numbers.
fn numbers(obj: &DefaultDicomObject, path: &Path, tag: Tag) -> Result<Option<Vec<f64>>> {
    let Some(e) = obj.get(tag) else {
        return Ok(None);
    };
    if e.value()
        .primitive()
        .is_none_or(|p| matches!(p, PrimitiveValue::Empty))
    {
        return Ok(None);
    }
    let shown = || {
        e.to_str()
            .map_or_else(|_| "?".into(), |s| s.trim().to_string())
    };
    if shown().is_empty() {
        return Ok(None);
    }
    let v = e
        .to_multi_float64()
        .map_err(|_| tag_err(path, tag, format!("`{}` is not a number", shown())))?;
    if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
        return Err(tag_err(
            path,
            tag,
            format!("`{}` is not a finite number", shown()),
        ));
    }
    Ok(Some(v))
}

fn number(obj: &DefaultDicomObject, path: &Path, tag: Tag) -> Result<Option<f64>> {
    Ok(numbers(obj, path, tag)?.map(|v| v[0]))
}

/// Exactly `N` numbers, where the field is present.
fn fixed<const N: usize>(
    obj: &DefaultDicomObject,
    path: &Path,
    tag: Tag,
) -> Result<Option<[f64; N]>> {
    match numbers(obj, path, tag)? {
        None => Ok(None),
        Some(v) => v
            .as_slice()
            .try_into()
            .map(Some)
            .map_err(|_| tag_err(path, tag, format!("{} values, expected {N}", v.len()))),
    }
}

/// A whole number field in `lo..=hi`.
fn whole(obj: &DefaultDicomObject, path: &Path, tag: Tag, lo: f64, hi: f64) -> Result<Option<i64>> {
    match number(obj, path, tag)? {
        None => Ok(None),
        Some(v) if v.fract() == 0.0 && (lo..=hi).contains(&v) => Ok(Some(v as i64)),
        Some(v) => Err(tag_err(
            path,
            tag,
            format!("{v}, expected a whole number from {lo} to {hi}"),
        )),
    }
}

/// The time fields of one file, as written.
#[derive(Debug, Clone, Default)]
struct TimeFields {
    acquisition_datetime: Option<String>,
    acquisition_date: Option<String>,
    acquisition_time: Option<String>,
    content_date: Option<String>,
    content_time: Option<String>,
    trigger_ms: Option<f64>,
}

/// What the header of one image file says.
#[derive(Debug, Clone)]
struct Image {
    path: PathBuf,
    sop_uid: Option<String>,
    series_uid: String,
    description: String,
    transfer_syntax: String,
    frames: i64,
    samples: i64,
    rows: usize,
    cols: usize,
    orientation: Option<[f64; 6]>,
    position: Option<[f64; 3]>,
    spacing: Option<[f64; 2]>,
    between_slices: Option<f64>,
    thickness: Option<f64>,
    times: TimeFields,
    temporal_position: Option<i64>,
    flip_angle: Option<f64>,
    tr_ms: Option<f64>,
    field_t: Option<f64>,
}

/// Why a file was skipped.
enum Skip {
    NotDicom,
    NotImage(String),
}

/// Read one file's header: an image, or why it is skipped.
fn read_image(path: &Path) -> Result<std::result::Result<Image, Skip>> {
    match has_dicm_marker(path) {
        Some(true) => {}
        Some(false) => return Ok(Err(Skip::NotDicom)),
        None => return Err(file_err(path, "cannot be read")),
    }
    let obj = open(path, true)?;
    let sop_class = obj
        .meta()
        .media_storage_sop_class_uid()
        .trim_end_matches(['\0', ' '])
        .to_string();
    let (Some(rows), Some(cols)) = (
        whole(&obj, path, tags::ROWS, 1.0, 65535.0)?,
        whole(&obj, path, tags::COLUMNS, 1.0, 65535.0)?,
    ) else {
        return Ok(Err(Skip::NotImage(sop_class)));
    };
    let series_uid = text(&obj, tags::SERIES_INSTANCE_UID).ok_or_else(|| {
        tag_err(
            path,
            tags::SERIES_INSTANCE_UID,
            "missing; every DICOM image names its series",
        )
    })?;
    Ok(Ok(Image {
        path: path.to_path_buf(),
        sop_uid: text(&obj, tags::SOP_INSTANCE_UID),
        series_uid,
        description: text(&obj, tags::SERIES_DESCRIPTION).unwrap_or_default(),
        transfer_syntax: obj
            .meta()
            .transfer_syntax()
            .trim_end_matches(['\0', ' '])
            .to_string(),
        frames: whole(&obj, path, tags::NUMBER_OF_FRAMES, 1.0, 1e9)?.unwrap_or(1),
        samples: whole(&obj, path, tags::SAMPLES_PER_PIXEL, 1.0, 4.0)?.unwrap_or(1),
        rows: rows as usize,
        cols: cols as usize,
        orientation: fixed::<6>(&obj, path, tags::IMAGE_ORIENTATION_PATIENT)?,
        position: fixed::<3>(&obj, path, tags::IMAGE_POSITION_PATIENT)?,
        spacing: fixed::<2>(&obj, path, tags::PIXEL_SPACING)?,
        between_slices: number(&obj, path, tags::SPACING_BETWEEN_SLICES)?,
        thickness: number(&obj, path, tags::SLICE_THICKNESS)?,
        times: TimeFields {
            acquisition_datetime: text(&obj, tags::ACQUISITION_DATE_TIME),
            acquisition_date: text(&obj, tags::ACQUISITION_DATE),
            acquisition_time: text(&obj, tags::ACQUISITION_TIME),
            content_date: text(&obj, tags::CONTENT_DATE),
            content_time: text(&obj, tags::CONTENT_TIME),
            trigger_ms: number(&obj, path, tags::TRIGGER_TIME)?,
        },
        temporal_position: whole(&obj, path, tags::TEMPORAL_POSITION_IDENTIFIER, 0.0, 1e9)?,
        flip_angle: number(&obj, path, tags::FLIP_ANGLE)?,
        tr_ms: number(&obj, path, tags::REPETITION_TIME)?,
        field_t: number(&obj, path, tags::MAGNETIC_FIELD_STRENGTH)?,
    }))
}

// ---------------------------------------------------------------------------------------
// Series selection

/// The images of every series under `root`, in path order; skipped files are reported with
/// one warning per kind.
fn scan(root: &Path) -> Result<Vec<Image>> {
    let paths = list_files(root)?;
    let read: Vec<_> = paths.par_iter().map(|p| read_image(p)).collect();
    let mut images = Vec::new();
    let (mut not_dicom, mut not_image) = (Vec::new(), Vec::new());
    for (p, r) in paths.iter().zip(read) {
        match r? {
            Ok(img) => images.push(img),
            Err(Skip::NotDicom) => not_dicom.push(p.display().to_string()),
            Err(Skip::NotImage(class)) => {
                not_image.push(format!("{} (SOP class {class})", p.display()));
            }
        }
    }
    let some = |v: &[String]| {
        let mut s = v.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
        if v.len() > 3 {
            s.push_str(", ...");
        }
        s
    };
    if !not_dicom.is_empty() {
        tracing::warn!(
            "{}: skipped {} file(s) without the DICOM marker `DICM` at byte 128: {}",
            root.display(),
            not_dicom.len(),
            some(&not_dicom)
        );
    }
    if !not_image.is_empty() {
        tracing::warn!(
            "{}: skipped {} DICOM file(s) that are not images (no Rows/Columns): {}",
            root.display(),
            not_image.len(),
            some(&not_image)
        );
    }
    if images.is_empty() {
        return Err(file_err(
            root,
            format!(
                "no DICOM images here ({} file(s) looked at{}{})",
                paths.len(),
                if not_dicom.is_empty() {
                    String::new()
                } else {
                    format!("; not DICOM: {}", some(&not_dicom))
                },
                if not_image.is_empty() {
                    String::new()
                } else {
                    format!("; not images: {}", some(&not_image))
                },
            ),
        ));
    }
    Ok(images)
}

/// The images of one series, by SeriesInstanceUID: the only one, or the one `choice`
/// names (a number in the listing or a UID).
fn select(root: &Path, images: Vec<Image>, choice: Option<&str>) -> Result<Vec<Image>> {
    let mut groups: BTreeMap<String, Vec<Image>> = BTreeMap::new();
    for img in images {
        groups.entry(img.series_uid.clone()).or_default().push(img);
    }
    // Listed in path order of each series' first file.
    let mut list: Vec<(String, Vec<Image>)> = groups.into_iter().collect();
    list.sort_by(|a, b| a.1[0].path.cmp(&b.1[0].path));
    let chosen = match choice {
        None if list.len() == 1 => Some(0),
        None => None,
        Some(c) => match c.trim().parse::<usize>() {
            Ok(n) if (1..=list.len()).contains(&n) => Some(n - 1),
            _ => list.iter().position(|(uid, _)| uid == c.trim()),
        },
    };
    match chosen {
        Some(i) => Ok(list.swap_remove(i).1),
        None => Err(file_err(root, several_series(&list, choice))),
    }
}

fn several_series(list: &[(String, Vec<Image>)], choice: Option<&str>) -> String {
    let mut s = match choice {
        Some(c) => format!("no series `{c}` among the {} series here:", list.len()),
        None => format!(
            "{} DICOM series in this folder; point at the folder of one series (or at one of its \
             files), or choose one by its number or SeriesInstanceUID below (`biogpu perfusion \
             fit --series`; `read_series_choice`):",
            list.len()
        ),
    };
    for (n, (uid, imgs)) in list.iter().enumerate() {
        let folder = imgs[0]
            .path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let same = imgs
            .iter()
            .all(|i| i.path.parent() == imgs[0].path.parent());
        let _ = write!(
            s,
            "\n  {}. {uid} \"{}\": {} file(s) in {folder}{}",
            n + 1,
            imgs[0].description,
            imgs.len(),
            if same { "" } else { " and other folders" }
        );
    }
    s
}

// ---------------------------------------------------------------------------------------
// Checks of one series

/// Fields that every image of the series must have and share.
fn check_common(images: &[Image]) -> Result<()> {
    let first = &images[0];
    for img in images {
        if !native_syntax(&img.transfer_syntax) {
            return Err(unsupported_syntax(&img.path, &img.transfer_syntax));
        }
        if img.frames != 1 {
            return Err(tag_err(
                &img.path,
                tags::NUMBER_OF_FRAMES,
                format!(
                    "{} frames: an enhanced multi-frame file, which is not read yet; export the \
                     series as classic single-frame images, or convert it to NIfTI (e.g. dcm2niix)",
                    img.frames
                ),
            ));
        }
        if img.samples != 1 {
            return Err(tag_err(
                &img.path,
                tags::SAMPLES_PER_PIXEL,
                format!("{}, expected 1 (a grey-level image)", img.samples),
            ));
        }
        if (img.rows, img.cols) != (first.rows, first.cols) {
            return Err(file_err(
                &img.path,
                format!(
                    "Rows (0028,0010) x Columns (0028,0011): {} x {}, but {} has {} x {}; every \
                     image of a series must have the same size",
                    img.rows,
                    img.cols,
                    first.path.display(),
                    first.rows,
                    first.cols
                ),
            ));
        }
        let orientation = img.orientation.ok_or_else(|| {
            tag_err(
                &img.path,
                tags::IMAGE_ORIENTATION_PATIENT,
                "missing; the slice geometry needs it",
            )
        })?;
        img.position.ok_or_else(|| {
            tag_err(
                &img.path,
                tags::IMAGE_POSITION_PATIENT,
                "missing; the slice order needs it",
            )
        })?;
        let spacing = img.spacing.ok_or_else(|| {
            tag_err(
                &img.path,
                tags::PIXEL_SPACING,
                "missing; the voxel size needs it",
            )
        })?;
        let (o0, s0) = (
            first.orientation.unwrap_or(orientation),
            first.spacing.unwrap_or(spacing),
        );
        if orientation
            .iter()
            .zip(&o0)
            .any(|(a, b)| (a - b).abs() > ORIENTATION_TOL)
        {
            return Err(tag_err(
                &img.path,
                tags::IMAGE_ORIENTATION_PATIENT,
                format!(
                    "{orientation:?}, but {} has {o0:?}; every image of a series must have the \
                     same orientation",
                    first.path.display()
                ),
            ));
        }
        if spacing
            .iter()
            .zip(&s0)
            .any(|(a, b)| !(*a > 0.0) || (a - b).abs() > SPACING_REL_TOL * b.abs())
        {
            return Err(tag_err(
                &img.path,
                tags::PIXEL_SPACING,
                format!(
                    "{spacing:?} mm, but {} has {s0:?}; every image of a series must have the \
                     same positive pixel spacing",
                    first.path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The flip angle, TR and field strength of the series: the same in every file that has
/// them.
fn acquisition(images: &[Image]) -> Result<Acquisition> {
    let consistent = |get: fn(&Image) -> Option<f64>, tag: Tag| -> Result<Option<f64>> {
        let mut first: Option<(f64, &Path)> = None;
        for img in images {
            let Some(v) = get(img) else { continue };
            match first {
                None => first = Some((v, &img.path)),
                Some((f, p)) if (v - f).abs() > PARAM_REL_TOL * f.abs().max(1e-12) => {
                    return Err(tag_err(
                        &img.path,
                        tag,
                        format!(
                            "{v}, but {} has {f}; a series is acquired with one setting (are \
                             two acquisitions mixed?)",
                            p.display()
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(first.map(|(v, _)| v))
    };
    Ok(Acquisition {
        flip_angle_deg: consistent(|i| i.flip_angle, tags::FLIP_ANGLE)?,
        tr_s: consistent(|i| i.tr_ms, tags::REPETITION_TIME)?.map(|ms| ms / 1000.0),
        field_t: consistent(|i| i.field_t, tags::MAGNETIC_FIELD_STRENGTH)?,
    })
}

// ---------------------------------------------------------------------------------------
// Geometry

type V3 = [f64; 3];

fn dot(a: V3, b: V3) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn cross(a: V3, b: V3) -> V3 {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn sub(a: V3, b: V3) -> V3 {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn scale(a: V3, s: f64) -> V3 {
    [a[0] * s, a[1] * s, a[2] * s]
}

fn norm(a: V3) -> f64 {
    dot(a, a).sqrt()
}

/// The grid of a series in LPS: unit row (x), column (y) and normal (z) directions, the
/// first voxel's centre, and the voxel sizes (mm).
#[derive(Debug, Clone, Copy)]
struct Grid {
    row: V3,
    col: V3,
    normal: V3,
    origin: V3,
    voxel: V3,
}

/// Unit row and column directions from ImageOrientationPatient, checked orthonormal; the
/// column made exactly orthogonal to the row (the header's rounding).
fn directions(img: &Image) -> Result<(V3, V3, V3)> {
    let o = img.orientation.unwrap_or_default();
    let (r, c) = ([o[0], o[1], o[2]], [o[3], o[4], o[5]]);
    let (nr, nc) = (norm(r), norm(c));
    if (nr - 1.0).abs() > 1e-3 || (nc - 1.0).abs() > 1e-3 || dot(r, c).abs() > 1e-3 {
        return Err(tag_err(
            &img.path,
            tags::IMAGE_ORIENTATION_PATIENT,
            format!("{o:?}: the row and column directions must be orthogonal unit vectors"),
        ));
    }
    let r = scale(r, 1.0 / nr);
    let n = cross(r, c);
    let n = scale(n, 1.0 / norm(n));
    let c = cross(n, r);
    Ok((r, c, n))
}

/// The slice of every image (by position along the normal) and the grid.
fn slices(images: &[Image]) -> Result<(Vec<usize>, Grid)> {
    let (row, col, normal) = directions(&images[0])?;
    let pos = |i: usize| images[i].position.unwrap_or_default();
    let depth: Vec<f64> = (0..images.len()).map(|i| dot(pos(i), normal)).collect();
    let mut order: Vec<usize> = (0..images.len()).collect();
    order.sort_by(|&a, &b| depth[a].total_cmp(&depth[b]));
    // Clusters of positions along the normal: the slices; first member represents.
    let mut slice_of = vec![0usize; images.len()];
    let mut reps: Vec<usize> = Vec::new();
    for &i in &order {
        match reps.last() {
            Some(&r) if depth[i] - depth[r] <= POSITION_TOL_MM => {
                if norm(sub(pos(i), pos(r))) > POSITION_TOL_MM * 10.0 {
                    return Err(tag_err(
                        &images[i].path,
                        tags::IMAGE_POSITION_PATIENT,
                        format!(
                            "{:?}, at the depth of {} ({:?}) along the slice normal but elsewhere \
                             in the plane; the images of a slice position must coincide",
                            pos(i),
                            images[r].path.display(),
                            pos(r)
                        ),
                    ));
                }
            }
            _ => reps.push(i),
        }
        slice_of[i] = reps.len() - 1;
    }
    let nz = reps.len();
    let first = pos(reps[0]);
    let gap = if nz > 1 {
        (depth[reps[nz - 1]] - depth[reps[0]]) / (nz - 1) as f64
    } else {
        images[0]
            .between_slices
            .or(images[0].thickness)
            .filter(|s| *s > 0.0)
            .unwrap_or(1.0)
    };
    for k in 1..nz {
        let (a, b) = (reps[k - 1], reps[k]);
        let g = depth[b] - depth[a];
        if (g - gap).abs() > SLICE_GAP_REL_TOL * gap.max(POSITION_TOL_MM) {
            return Err(tag_err(
                &images[b].path,
                tags::IMAGE_POSITION_PATIENT,
                format!(
                    "slice {k} is {g:.4} mm from slice {} ({}), but the {nz} slices span {:.4} mm \
                     at {gap:.4} mm on average; slices must be evenly spaced (is a slice position \
                     missing from every time point?)",
                    k - 1,
                    images[a].path.display(),
                    depth[reps[nz - 1]] - depth[reps[0]]
                ),
            ));
        }
        let v = sub(pos(b), first);
        let lateral = sub(v, scale(normal, dot(v, normal)));
        if norm(lateral) > POSITION_TOL_MM * 10.0 + 1e-4 * norm(v) {
            return Err(tag_err(
                &images[b].path,
                tags::IMAGE_POSITION_PATIENT,
                format!(
                    "slice {k} is shifted {:.4} mm in-plane from slice 0 ({}); the slices must be \
                     stacked along the normal of ImageOrientationPatient (gantry tilt and sheared \
                     stacks are not read)",
                    norm(lateral),
                    images[reps[0]].path.display()
                ),
            ));
        }
    }
    let s = images[0].spacing.unwrap_or([1.0, 1.0]);
    let grid = Grid {
        row,
        col,
        normal,
        origin: first,
        // PixelSpacing is (between rows, between columns): y first.
        voxel: [s[1], s[0], gap],
    };
    Ok((slice_of, grid))
}

// ---------------------------------------------------------------------------------------
// Times

/// Seconds of day of a DICOM TM (`HHMMSS.FFFFFF`, `HHMM`, `HH`, or ACR-NEMA `HH:MM:SS.frac`).
fn parse_tm(s: &str) -> Option<f64> {
    let s: String = s.trim().chars().filter(|&c| c != ':').collect();
    let (whole, frac) = s.split_once('.').unwrap_or((&s, ""));
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |i: usize| {
        whole
            .get(i..i + 2)
            .map_or(Some(0), |f| f.parse::<u32>().ok())
    };
    if !matches!(whole.len(), 2 | 4 | 6) || (!frac.is_empty() && whole.len() != 6) {
        return None;
    }
    let (h, m, sec) = (field(0)?, field(2)?, field(4)?);
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let f = if frac.is_empty() {
        0.0
    } else {
        format!("0.{frac}").parse::<f64>().ok()?
    };
    Some(f64::from(h * 3600 + m * 60 + sec) + f)
}

/// Days since 1970-01-01 of a DICOM DA (`YYYYMMDD`, or ACR-NEMA `YYYY.MM.DD`).
fn parse_da(s: &str) -> Option<i64> {
    let s: String = s.trim().chars().filter(|&c| c != '.').collect();
    if s.len() != 8 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (y, m, d) = (
        s[0..4].parse::<i64>().ok()?,
        s[4..6].parse::<i64>().ok()?,
        s[6..8].parse::<i64>().ok()?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from civil (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// Day and seconds of day (UTC where an offset `&ZZXX` is given) of a DICOM DT
/// (`YYYYMMDDHHMMSS.FFFFFF&ZZXX`, the time optional).
fn parse_dt(s: &str) -> Option<(i64, f64)> {
    let s = s.trim();
    let (body, offset) = match s.rfind(['+', '-']) {
        Some(i) if i >= 8 => (&s[..i], Some(&s[i..])),
        _ => (s, None),
    };
    let day = parse_da(body.get(0..8)?)?;
    let rest = &body[8..];
    let tod = if rest.is_empty() {
        0.0
    } else {
        parse_tm(rest)?
    };
    let shift = match offset {
        None => 0.0,
        Some(o) if o.len() == 5 && o[1..].bytes().all(|b| b.is_ascii_digit()) => {
            let sign = if o.starts_with('-') { -1.0 } else { 1.0 };
            sign * (f64::from(o[1..3].parse::<u32>().ok()?) * 3600.0
                + f64::from(o[3..5].parse::<u32>().ok()?) * 60.0)
        }
        Some(_) => return None,
    };
    Some((day, tod - shift))
}

/// The fields a time tag reads from a file, `None` where one is missing.
fn time_fields(tag: TimeTag, t: &TimeFields) -> Option<(Option<&str>, &str)> {
    match tag {
        TimeTag::AcquisitionDateTime => t.acquisition_datetime.as_deref().map(|s| (None, s)),
        TimeTag::AcquisitionDateAndTime => Some((
            Some(t.acquisition_date.as_deref()?),
            t.acquisition_time.as_deref()?,
        )),
        TimeTag::AcquisitionTime => t.acquisition_time.as_deref().map(|s| (None, s)),
        TimeTag::ContentDateAndTime => {
            Some((Some(t.content_date.as_deref()?), t.content_time.as_deref()?))
        }
        TimeTag::ContentTime => t.content_time.as_deref().map(|s| (None, s)),
        TimeTag::TriggerTime => t.trigger_ms.map(|_| (None, "")),
    }
}

/// Add a day to the times of day after midnight, where times of day span more than 12 h
/// (an acquisition that crossed midnight with its date unchanged).
fn unwrap_midnight(tod: &mut [f64]) {
    let lo = tod.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = tod.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if hi - lo > HALF_DAY_S {
        for t in tod.iter_mut().filter(|t| **t < HALF_DAY_S) {
            *t += 86_400.0;
        }
    }
}

/// The time (s, any origin) of every image, from the first time tag that every image has.
fn image_times(images: &[Image]) -> Result<(TimeTag, Vec<f64>)> {
    let Some(tag) = TimeTag::ALL
        .into_iter()
        .find(|&tag| images.iter().all(|i| time_fields(tag, &i.times).is_some()))
    else {
        let names: Vec<&str> = TimeTag::ALL.iter().map(|t| t.name()).collect();
        let bare = images
            .iter()
            .find(|i| {
                TimeTag::ALL
                    .iter()
                    .all(|&t| time_fields(t, &i.times).is_none())
            })
            .unwrap_or(&images[0]);
        return Err(file_err(
            &bare.path,
            format!(
                "no acquisition time: none of {} is in every file of the series (this one has \
                 none), so the time points cannot be ordered",
                names.join(", ")
            ),
        ));
    };
    let bad = |img: &Image, what: &str, v: &str| {
        file_err(
            &img.path,
            format!("{}: `{v}` is not a valid {what}", tag.name()),
        )
    };
    let mut days = Vec::with_capacity(images.len());
    let mut tod = Vec::with_capacity(images.len());
    for img in images {
        let (date, time) = time_fields(tag, &img.times).unwrap_or((None, ""));
        let (d, t) = match tag {
            TimeTag::TriggerTime => (0, img.times.trigger_ms.unwrap_or(0.0) / 1000.0),
            TimeTag::AcquisitionDateTime => parse_dt(time)
                .ok_or_else(|| bad(img, "DICOM date-time (YYYYMMDDHHMMSS.FFFFFF)", time))?,
            _ => {
                let d = match date {
                    Some(d) => parse_da(d).ok_or_else(|| bad(img, "DICOM date (YYYYMMDD)", d))?,
                    None => 0,
                };
                (
                    d,
                    parse_tm(time).ok_or_else(|| bad(img, "DICOM time (HHMMSS.FFFFFF)", time))?,
                )
            }
        };
        days.push(d);
        tod.push(t);
    }
    let day0 = days.iter().copied().min().unwrap_or(0);
    if days.iter().all(|&d| d == day0) && tag != TimeTag::TriggerTime {
        unwrap_midnight(&mut tod);
    }
    let secs = days
        .iter()
        .zip(&tod)
        .map(|(&d, &t)| (d - day0) as f64 * 86_400.0 + t)
        .collect();
    Ok((tag, secs))
}

// ---------------------------------------------------------------------------------------
// Time points

/// `frames[t][z]`: the image of slice z at time point t, by TemporalPositionIdentifier
/// where every image has one, else by acquisition order at each slice position.
fn frames(
    images: &[Image],
    slice_of: &[usize],
    nz: usize,
    secs: &[f64],
    tag: TimeTag,
) -> Result<Vec<Vec<usize>>> {
    if images.iter().all(|i| i.temporal_position.is_some()) {
        by_temporal_position(images, slice_of, nz)
    } else {
        by_slice_order(images, slice_of, nz, secs, tag)
    }
}

fn by_temporal_position(
    images: &[Image],
    slice_of: &[usize],
    nz: usize,
) -> Result<Vec<Vec<usize>>> {
    let mut groups: BTreeMap<i64, Vec<Option<usize>>> = BTreeMap::new();
    for (i, img) in images.iter().enumerate() {
        let tp = img.temporal_position.unwrap_or(0);
        let slots = groups.entry(tp).or_insert_with(|| vec![None; nz]);
        if let Some(j) = slots[slice_of[i]] {
            return Err(tag_err(
                &img.path,
                tags::TEMPORAL_POSITION_IDENTIFIER,
                format!(
                    "an extra slice: time point {tp} already has slice {} (at this position) in {}",
                    slice_of[i],
                    images[j].path.display()
                ),
            ));
        }
        slots[slice_of[i]] = Some(i);
    }
    groups
        .into_iter()
        .map(|(tp, slots)| {
            let missing: Vec<usize> = (0..nz).filter(|&z| slots[z].is_none()).collect();
            if missing.is_empty() {
                return Ok(slots.into_iter().flatten().collect());
            }
            let some = slots.iter().flatten().next().map_or(0, |&i| i);
            Err(tag_err(
                &images[some].path,
                tags::TEMPORAL_POSITION_IDENTIFIER,
                format!(
                    "time point {tp} (this file among others) has {} of the {nz} slices; missing: \
                     slice(s) {missing:?}, counted along the normal from 0",
                    nz - missing.len()
                ),
            ))
        })
        .collect()
}

fn by_slice_order(
    images: &[Image],
    slice_of: &[usize],
    nz: usize,
    secs: &[f64],
    tag: TimeTag,
) -> Result<Vec<Vec<usize>>> {
    let mut per_slice: Vec<Vec<usize>> = vec![Vec::new(); nz];
    for (i, &z) in slice_of.iter().enumerate() {
        per_slice[z].push(i);
    }
    for list in &mut per_slice {
        list.sort_by(|&a, &b| secs[a].total_cmp(&secs[b]));
        if let Some(w) = list.windows(2).find(|w| secs[w[0]] == secs[w[1]]) {
            return Err(file_err(
                &images[w[1]].path,
                format!(
                    "an extra slice: slice {} at the same time ({}) as {}; each slice position \
                     has one image per time point",
                    slice_of[w[1]],
                    tag.name(),
                    images[w[0]].path.display()
                ),
            ));
        }
    }
    let counts: Vec<usize> = per_slice.iter().map(Vec::len).collect();
    let nt = mode(&counts);
    if let Some(z) = (0..nz).find(|&z| counts[z] != nt) {
        let reference = (0..nz).find(|&r| counts[r] == nt).unwrap_or(0);
        return Err(count_error(images, &per_slice, z, reference, secs, tag));
    }
    Ok((0..nt)
        .map(|t| (0..nz).map(|z| per_slice[z][t]).collect())
        .collect())
}

/// The most common value (the largest of equally common ones).
fn mode(counts: &[usize]) -> usize {
    let mut best = (0, 0);
    for &c in counts {
        let n = counts.iter().filter(|&&d| d == c).count();
        if (n, c) > best {
            best = (n, c);
        }
    }
    best.1
}

/// A slice with fewer or more images than the others: which time point lacks it, or which
/// image is extra, found by matching its times against a complete slice's.
fn count_error(
    images: &[Image],
    per_slice: &[Vec<usize>],
    z: usize,
    r: usize,
    secs: &[f64],
    tag: TimeTag,
) -> Error {
    let (have, want) = (per_slice[z].len(), per_slice[r].len());
    let (short, long) = if have < want {
        (&per_slice[z], &per_slice[r])
    } else {
        (&per_slice[r], &per_slice[z])
    };
    let gap = unmatched(short, long, secs);
    let t0 = secs[per_slice[r][0]];
    if have < want {
        let near = &images[long[gap]];
        file_err(
            &images[per_slice[z][0]].path,
            format!(
                "a missing slice: slice {z} (the position of this file) has {have} images, the other \
                 slices {want}; time point {gap} (at {:.3} s by {}, e.g. {}) has no image of it",
                secs[long[gap]] - t0,
                tag.name(),
                near.path.display()
            ),
        )
    } else {
        file_err(
            &images[long[gap]].path,
            format!(
                "an extra slice: slice {z} (the position of this file) has {have} images, the other \
                 slices {want}; this one, at {:.3} s by {}, has no time point of its own",
                secs[long[gap]] - t0,
                tag.name()
            ),
        )
    }
}

/// The index of `long` (longer than `short`) that has no counterpart in `short`: the one
/// whose removal aligns the two slices' times best (their differences, slice offset within
/// a frame, vary least), so that it is found whatever the slices' offsets.
fn unmatched(short: &[usize], long: &[usize], secs: &[f64]) -> usize {
    let spread = |g: usize| {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (k, &s) in short.iter().enumerate().take(long.len() - 1) {
            let d = secs[s] - secs[long[if k < g { k } else { k + 1 }]];
            (lo, hi) = (lo.min(d), hi.max(d));
        }
        hi - lo
    };
    (0..long.len())
        .min_by(|&a, &b| spread(a).total_cmp(&spread(b)))
        .unwrap_or(0)
}

/// Frame times from the first frame's (s): each frame's first acquired slice; checked to
/// increase, and each frame's slices to be acquired before the next frame begins.
fn frame_times(
    images: &[Image],
    frames: &[Vec<usize>],
    secs: &[f64],
    tag: TimeTag,
) -> Result<Vec<f64>> {
    let first = |f: &[usize]| {
        f.iter()
            .copied()
            .min_by(|&a, &b| secs[a].total_cmp(&secs[b]))
            .unwrap_or(f[0])
    };
    let last = |f: &[usize]| {
        f.iter()
            .copied()
            .max_by(|&a, &b| secs[a].total_cmp(&secs[b]))
            .unwrap_or(f[0])
    };
    let t0 = secs[first(&frames[0])];
    for t in 1..frames.len() {
        let (a, b) = (first(&frames[t - 1]), first(&frames[t]));
        if secs[b] <= secs[a] {
            return Err(file_err(
                &images[b].path,
                format!(
                    "time point {t} begins at {:.3} s, {} time point {} at {:.3} s ({}, by {}); \
                     frame times must increase",
                    secs[b] - t0,
                    if secs[b] == secs[a] {
                        "the same time as"
                    } else {
                        "before"
                    },
                    t - 1,
                    secs[a] - t0,
                    images[a].path.display(),
                    tag.name()
                ),
            ));
        }
        let end = last(&frames[t - 1]);
        if secs[end] >= secs[b] {
            return Err(file_err(
                &images[end].path,
                format!(
                    "inconsistent timing: this slice of time point {} was acquired at {:.3} s, not \
                     before time point {t} began at {:.3} s ({}), by {}; the slices of a time point \
                     must be acquired within its frame interval (mixed or re-ordered acquisitions?)",
                    t - 1,
                    secs[end] - t0,
                    secs[b] - t0,
                    images[b].path.display(),
                    tag.name()
                ),
            ));
        }
    }
    Ok(frames.iter().map(|f| secs[first(f)] - t0).collect())
}

// ---------------------------------------------------------------------------------------
// The plan: everything but the pixels

#[derive(Debug)]
struct Plan {
    root: PathBuf,
    images: Vec<Image>,
    frames: Vec<Vec<usize>>,
    grid: Grid,
    times: Vec<f64>,
    time_tag: TimeTag,
    acquisition: Acquisition,
    series_uid: String,
    description: String,
}

/// The folder to read and the series to pick for `path`: a folder as given; a file's folder
/// with the file's series.
fn root_and_choice(path: &Path, choice: Option<&str>) -> Result<(PathBuf, Option<String>)> {
    if path.is_dir() {
        return Ok((path.to_path_buf(), choice.map(str::to_string)));
    }
    if !path.exists() {
        return Err(file_err(path, "no such file or folder"));
    }
    let img = match read_image(path)? {
        Ok(img) => img,
        Err(Skip::NotDicom) => {
            return Err(file_err(
                path,
                "not a DICOM file (no `DICM` marker at byte 128)",
            ));
        }
        Err(Skip::NotImage(class)) => {
            return Err(file_err(
                path,
                format!("a DICOM object that is not an image (SOP class {class})"),
            ));
        }
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((
        dir.to_path_buf(),
        Some(choice.map_or(img.series_uid, str::to_string)),
    ))
}

fn plan(path: &Path, choice: Option<&str>) -> Result<Plan> {
    let (root, choice) = root_and_choice(path, choice)?;
    let images = select(&root, scan(&root)?, choice.as_deref())?;
    if let Some((a, b)) = duplicate_instance(&images) {
        return Err(tag_err(
            &images[b].path,
            tags::SOP_INSTANCE_UID,
            format!(
                "the same image as {} (a copied file?); remove one",
                images[a].path.display()
            ),
        ));
    }
    check_common(&images)?;
    let acquisition = acquisition(&images)?;
    let (slice_of, grid) = slices(&images)?;
    let nz = slice_of.iter().max().map_or(0, |m| m + 1);
    let (time_tag, secs) = image_times(&images)?;
    let frames = frames(&images, &slice_of, nz, &secs, time_tag)?;
    let times = frame_times(&images, &frames, &secs, time_tag)?;
    let voxels = (images[0].rows * images[0].cols) as u64 * images.len() as u64;
    if voxels > MAX_NIFTI_VOXELS {
        return Err(file_err(
            &root,
            format!("{voxels} voxels, more than the {MAX_NIFTI_VOXELS} a series may have"),
        ));
    }
    Ok(Plan {
        series_uid: images[0].series_uid.clone(),
        description: images[0].description.clone(),
        root,
        images,
        frames,
        grid,
        times,
        time_tag,
        acquisition,
    })
}

/// Two files with the same SOPInstanceUID.
fn duplicate_instance(images: &[Image]) -> Option<(usize, usize)> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, img) in images.iter().enumerate() {
        if let Some(uid) = img.sop_uid.as_deref()
            && let Some(&j) = seen.get(uid)
        {
            return Some((j, i));
        }
        if let Some(uid) = img.sop_uid.as_deref() {
            seen.insert(uid, i);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------
// Pixels

/// The pixel data as little-endian bytes, whatever the VR dicom-rs read them as.
fn le_bytes(p: &PrimitiveValue) -> Option<Cow<'_, [u8]>> {
    fn collect<T: Copy, const N: usize>(v: &[T], f: fn(T) -> [u8; N]) -> Cow<'static, [u8]> {
        Cow::Owned(v.iter().flat_map(|&x| f(x)).collect())
    }
    Some(match p {
        PrimitiveValue::U8(v) => Cow::Borrowed(&v[..]),
        PrimitiveValue::U16(v) => collect(v, u16::to_le_bytes),
        PrimitiveValue::I16(v) => collect(v, i16::to_le_bytes),
        PrimitiveValue::U32(v) => collect(v, u32::to_le_bytes),
        PrimitiveValue::I32(v) => collect(v, i32::to_le_bytes),
        _ => return None,
    })
}

/// The values of one image file, `rows * cols` in row-major order, rescaled.
fn image_values(img: &Image) -> Result<Vec<f32>> {
    let path = &img.path;
    let obj = open(path, false)?;
    let required = |tag: Tag, lo: f64, hi: f64| -> Result<i64> {
        whole(&obj, path, tag, lo, hi)?.ok_or_else(|| {
            tag_err(
                path,
                tag,
                "missing; the pixel data cannot be decoded without it",
            )
        })
    };
    let bits = required(tags::BITS_ALLOCATED, 1.0, 64.0)?;
    if !matches!(bits, 8 | 16 | 32) {
        return Err(tag_err(
            path,
            tags::BITS_ALLOCATED,
            format!("{bits}, expected 8, 16 or 32"),
        ));
    }
    let stored = whole(&obj, path, tags::BITS_STORED, 1.0, bits as f64)?.unwrap_or(bits);
    let signed = required(tags::PIXEL_REPRESENTATION, 0.0, 1.0)? == 1;
    let slope = number(&obj, path, tags::RESCALE_SLOPE)?.unwrap_or(1.0);
    let intercept = number(&obj, path, tags::RESCALE_INTERCEPT)?.unwrap_or(0.0);
    let element = obj
        .get(tags::PIXEL_DATA)
        .ok_or_else(|| tag_err(path, tags::PIXEL_DATA, "missing (truncated file?)"))?;
    let bytes = match element.value() {
        Value::Primitive(p) => le_bytes(p),
        _ => None,
    }
    .ok_or_else(|| {
        tag_err(
            path,
            tags::PIXEL_DATA,
            "not native pixel data (encapsulated or of an unexpected type)",
        )
    })?;
    let n = img.rows * img.cols;
    let width = bits as usize / 8;
    let need = n * width;
    if bytes.len() < need || bytes.len() > need + 1 {
        return Err(tag_err(
            path,
            tags::PIXEL_DATA,
            format!(
                "{} bytes, expected {need} ({} rows x {} columns x {width} bytes); {}",
                bytes.len(),
                img.rows,
                img.cols,
                if bytes.len() < need {
                    "the file is truncated"
                } else {
                    "more than one frame?"
                }
            ),
        ));
    }
    Ok(bytes[..need]
        .chunks_exact(width)
        .map(|c| {
            let raw = c
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            let v = stored_value(raw, stored as u32, signed);
            (slope * v + intercept) as f32
        })
        .collect())
}

/// A stored pixel value: its low `stored` bits, sign-extended where the pixels are signed.
fn stored_value(raw: u64, stored: u32, signed: bool) -> f64 {
    let v = raw & ((1u64 << stored) - 1);
    if signed && stored > 0 && v >> (stored - 1) == 1 {
        (v as i64 - (1i64 << stored)) as f64
    } else {
        v as f64
    }
}

/// The series' values `(x, y, z, t)`.
fn read_pixels(plan: &Plan) -> Result<Array4<f32>> {
    let (rows, cols) = (plan.images[0].rows, plan.images[0].cols);
    let (nz, nt) = (plan.frames[0].len(), plan.frames.len());
    let order: Vec<(usize, usize, usize)> = plan
        .frames
        .iter()
        .enumerate()
        .flat_map(|(t, f)| f.iter().enumerate().map(move |(z, &i)| (t, z, i)))
        .collect();
    let values: Vec<Result<Vec<f32>>> = order
        .par_iter()
        .map(|&(_, _, i)| image_values(&plan.images[i]))
        .collect();
    let mut data = Array4::<f32>::zeros((cols, rows, nz, nt));
    for (&(t, z, _), v) in order.iter().zip(values) {
        let v = v?;
        for y in 0..rows {
            for x in 0..cols {
                data[[x, y, z, t]] = v[y * cols + x];
            }
        }
    }
    Ok(data)
}

// ---------------------------------------------------------------------------------------
// NIfTI header

/// The RAS affine `[srow_x, srow_y, srow_z]` of a grid: LPS axes scaled by the voxel sizes,
/// x and y negated.
fn affine_ras(g: &Grid) -> [[f64; 4]; 3] {
    let axes = [
        scale(g.row, g.voxel[0]),
        scale(g.col, g.voxel[1]),
        scale(g.normal, g.voxel[2]),
    ];
    let mut m = [[0.0; 4]; 3];
    for (r, sign) in [(0, -1.0), (1, -1.0), (2, 1.0)] {
        for (c, axis) in axes.iter().enumerate() {
            m[r][c] = sign * axis[r];
        }
        m[r][3] = sign * g.origin[r];
    }
    m
}

/// NIfTI quaternion (b, c, d) and qfac of a rotation given by its columns (unit axes), as
/// nifti1_io's `mat44_to_quatern` computes it.
fn quaternion(mut r: [[f64; 3]; 3]) -> ([f64; 3], f64) {
    let det = r[0][0] * (r[1][1] * r[2][2] - r[1][2] * r[2][1])
        - r[0][1] * (r[1][0] * r[2][2] - r[1][2] * r[2][0])
        + r[0][2] * (r[1][0] * r[2][1] - r[1][1] * r[2][0]);
    let qfac = if det < 0.0 { -1.0 } else { 1.0 };
    if det < 0.0 {
        for row in &mut r {
            row[2] = -row[2];
        }
    }
    let trace = r[0][0] + r[1][1] + r[2][2] + 1.0;
    let a: f64;
    let (mut b, mut c, mut d): (f64, f64, f64);
    if trace > 0.5 {
        a = 0.5 * trace.sqrt();
        b = 0.25 * (r[2][1] - r[1][2]) / a;
        c = 0.25 * (r[0][2] - r[2][0]) / a;
        d = 0.25 * (r[1][0] - r[0][1]) / a;
    } else {
        let xd = 1.0 + r[0][0] - (r[1][1] + r[2][2]);
        let yd = 1.0 + r[1][1] - (r[0][0] + r[2][2]);
        let zd = 1.0 + r[2][2] - (r[0][0] + r[1][1]);
        if xd > 1.0 {
            b = 0.5 * xd.sqrt();
            c = 0.25 * (r[0][1] + r[1][0]) / b;
            d = 0.25 * (r[0][2] + r[2][0]) / b;
            a = 0.25 * (r[2][1] - r[1][2]) / b;
        } else if yd > 1.0 {
            c = 0.5 * yd.sqrt();
            b = 0.25 * (r[0][1] + r[1][0]) / c;
            d = 0.25 * (r[1][2] + r[2][1]) / c;
            a = 0.25 * (r[0][2] - r[2][0]) / c;
        } else {
            d = 0.5 * zd.sqrt();
            b = 0.25 * (r[0][2] + r[2][0]) / d;
            c = 0.25 * (r[1][2] + r[2][1]) / d;
            a = 0.25 * (r[1][0] - r[0][1]) / d;
        }
        if a < 0.0 {
            (b, c, d) = (-b, -c, -d);
        }
    }
    ([b, c, d], qfac)
}

fn nifti_header(plan: &Plan, dim: (usize, usize, usize, usize)) -> NiftiHeader {
    let (nx, ny, nz, nt) = dim;
    let g = &plan.grid;
    let m = affine_ras(g);
    let rotation = std::array::from_fn(|r| std::array::from_fn(|c| m[r][c] / g.voxel[c]));
    let (q, qfac) = quaternion(rotation);
    let dt = if nt > 1 {
        plan.times[nt - 1] / (nt - 1) as f64
    } else {
        0.0
    };
    let to_f32 = |row: [f64; 4]| row.map(|v| v as f32);
    let mut header = NiftiHeader {
        dim: [4, nx as u16, ny as u16, nz as u16, nt as u16, 1, 1, 1],
        pixdim: [
            qfac as f32,
            g.voxel[0] as f32,
            g.voxel[1] as f32,
            g.voxel[2] as f32,
            dt as f32,
            0.0,
            0.0,
            0.0,
        ],
        datatype: 16,
        bitpix: 32,
        scl_slope: 1.0,
        scl_inter: 0.0,
        xyzt_units: 2 | 8, // mm, s
        qform_code: 1,
        sform_code: 1,
        quatern_b: q[0] as f32,
        quatern_c: q[1] as f32,
        quatern_d: q[2] as f32,
        quatern_x: m[0][3] as f32,
        quatern_y: m[1][3] as f32,
        quatern_z: m[2][3] as f32,
        srow_x: to_f32(m[0]),
        srow_y: to_f32(m[1]),
        srow_z: to_f32(m[2]),
        ..NiftiHeader::default()
    };
    let mut descrip = format!("DICOM {}", plan.description).into_bytes();
    descrip.truncate(79);
    descrip.resize(80, 0);
    header.descrip = descrip;
    NiftiVersion::Nifti1.mark(&mut header);
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_dates_parse_as_dicom_writes_them() {
        assert_eq!(parse_tm("101503.25"), Some(36903.25));
        assert_eq!(parse_tm("10:15:03.25"), Some(36903.25));
        assert_eq!(parse_tm("1015"), Some(36900.0));
        assert_eq!(parse_tm("10"), Some(36000.0));
        assert_eq!(parse_tm("1015.5"), None);
        assert_eq!(parse_tm("256000"), None);
        assert_eq!(parse_tm("12a000"), None);
        assert_eq!(parse_da("19700101"), Some(0));
        assert_eq!(parse_da("20000301"), Some(11017));
        assert_eq!(parse_da("2000.03.01"), Some(11017));
        assert_eq!(parse_da("20001301"), None);
        assert_eq!(parse_dt("20000301101503.25"), Some((11017, 36903.25)));
        assert_eq!(
            parse_dt("20000301101503.25+0100"),
            Some((11017, 36903.25 - 3600.0))
        );
        assert_eq!(parse_dt("20000301"), Some((11017, 0.0)));
        assert_eq!(parse_dt("2000"), None);
    }

    #[test]
    fn midnight_is_unwrapped_only_past_half_a_day() {
        let mut t = vec![86_390.0, 86_399.5, 5.0, 12.0];
        unwrap_midnight(&mut t);
        assert_eq!(t, vec![86_390.0, 86_399.5, 86_405.0, 86_412.0]);
        let mut t = vec![100.0, 40_000.0];
        unwrap_midnight(&mut t);
        assert_eq!(t, vec![100.0, 40_000.0]);
    }

    #[test]
    fn stored_values_are_masked_and_sign_extended() {
        assert_eq!(stored_value(0xffff, 16, true), -1.0);
        assert_eq!(stored_value(0xffff, 16, false), 65535.0);
        assert_eq!(stored_value(0xf000, 12, true), 0.0);
        assert_eq!(stored_value(0xf800, 12, true), -2048.0);
        assert_eq!(stored_value(0x0800, 12, true), -2048.0);
        assert_eq!(stored_value(0x0fff, 12, false), 4095.0);
    }

    #[test]
    fn quaternions_reproduce_their_rotation() {
        // A rotation from an oblique orientation, and a reflection (qfac -1).
        let r = [[0.8, -0.36, -0.48], [0.6, 0.48, 0.64], [0.0, -0.8, 0.6]];
        for (m, want_qfac) in [
            (r, 1.0),
            ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]], -1.0),
        ] {
            let ([b, c, d], qfac) = quaternion(m);
            assert_eq!(qfac, want_qfac);
            let a = (1.0 - b * b - c * c - d * d).max(0.0).sqrt();
            let q = [
                [
                    a * a + b * b - c * c - d * d,
                    2.0 * (b * c - a * d),
                    2.0 * (b * d + a * c),
                ],
                [
                    2.0 * (b * c + a * d),
                    a * a + c * c - b * b - d * d,
                    2.0 * (c * d - a * b),
                ],
                [
                    2.0 * (b * d - a * c),
                    2.0 * (c * d + a * b),
                    a * a + d * d - c * c - b * b,
                ],
            ];
            for i in 0..3 {
                for j in 0..3 {
                    let want = if j == 2 { m[i][j] * qfac } else { m[i][j] };
                    assert!((q[i][j] - want).abs() < 1e-12, "{q:?} vs {m:?}");
                }
            }
        }
    }
}
