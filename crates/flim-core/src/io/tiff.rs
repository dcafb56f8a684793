//! Multi-page TIFF with time as pages: page `j` holds bin `j` of every pixel (as FLIMfit,
//! ImageJ time-gated stacks and `biogpu flim convert` write them). Greyscale u8/u16 (read as
//! u16), u32, f32 or f64 (read as f32) pages, through the `tiff` crate. TIFF stores no bin
//! width, so the caller gives it.

use crate::error::Result;
use crate::io::recording::{Format, Image, MAX_BINS, Recording, format_error, in_file, io_error};
use crate::model::cube::Cube;
use crate::model::cube::{AnyCube, with_cube};
use ::tiff::decoder::{Decoder, DecodingResult, Limits};
use ::tiff::encoder::{TiffEncoder, colortype};
use ndarray::{Array3, Axis};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// Most bytes the TIFF reader holds for the decoded pages of one file (2 GiB: e.g. 1024 x
/// 1024 pixels x 1024 bins of u16). Checked from each page's header before it is decoded.
pub const MAX_TIFF_DECODED_BYTES: u64 = 2 << 30;
/// Most decoded bytes the TIFF reader believes per byte of the file (4096: above the largest
/// expansion of TIFF's lossless codecs, LZW about 2730x and deflate 1032x). Page headers
/// announcing more than this times the file's length are corrupt; uncompressed pages must be
/// present in full anyway (the decoder fails at the end of the file).
pub const MAX_TIFF_EXPANSION: u64 = 4096;

/// Pages of one sample type.
enum Pages {
    U16(Vec<Vec<u16>>),
    U32(Vec<Vec<u32>>),
    F32(Vec<Vec<f32>>),
}

/// How a hyperstack's pages map to images: `(axis, length)` fastest-varying first, for
/// the axes `C` (channels: one image each), `Z` (slices: the time bins) and `T` (frames: one
/// image each).
type PageOrder = Vec<(char, usize)>;

/// The page order of a TIFF whose ImageJ or OME metadata declares slices and frames or
/// channels: the slices are the time bins (a time-lapse of decays). `None`: every page is
/// a time bin of one image. A stack of channels x frames with one slice is ambiguous.
fn page_order(path: &Path, description: Option<&str>) -> Result<Option<PageOrder>> {
    let Some(axes) = description.and_then(imaging_io::StackAxes::parse) else {
        return Ok(None);
    };
    if axes.extra().len() <= 1 {
        return Ok(None);
    }
    if axes.slices <= 1 {
        return Err(format_error(
            path,
            format!(
                "{axes}: a FLIM TIFF keeps its time bins along the slices (Z), and this one has \
                 none; save the bins as slices, with one frame (and channel) per decay"
            ),
        ));
    }
    axes.page_order()
        .map(Some)
        .map_err(|why| format_error(path, why))
}

/// Read a multi-page TIFF, one page per time bin of `bin_ns`: one image, or for an ImageJ or
/// OME hyperstack one image per frame and channel, with the slices as the time bins.
pub fn read_tiff(path: &Path, bin_ns: f64) -> Result<Recording> {
    fn stack<T: Copy + Default>(pages: &[&Vec<T>], h: usize, w: usize) -> Array3<T> {
        let bins = pages.len();
        let mut a = Array3::<T>::default((h, w, bins));
        for (j, p) in pages.iter().enumerate() {
            a.index_axis_mut(Axis(2), j)
                .iter_mut()
                .zip(p.iter())
                .for_each(|(d, &s)| *d = s);
        }
        a
    }
    let err = |what: String| format_error(path, what);
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    let len = file.metadata().map_err(|e| io_error(path, e))?.len();
    // What the pages may decode to: the documented cap, and never more than the file's
    // bytes can expand to.
    let budget = MAX_TIFF_DECODED_BYTES.min(len.saturating_mul(MAX_TIFF_EXPANSION));
    let mut limits = Limits::default();
    limits.decoding_buffer_size = usize::try_from(budget).unwrap_or(usize::MAX);
    let mut dec = Decoder::new(BufReader::new(file))
        .map_err(|e| err(format!("not a readable TIFF: {e}")))?
        .with_limits(limits);
    let (w, h) = dec.dimensions().map_err(|e| err(format!("page 0: {e}")))?;
    // A hyperstack's pages hold several axes; joined, they would read as one long decay.
    let description = dec
        .get_tag_ascii_string(::tiff::tags::Tag::ImageDescription)
        .ok();
    let order = page_order(path, description.as_deref())?;
    if w == 0 || h == 0 {
        return Err(err(format!(
            "page 0: {w}x{h} pixels: expected a nonzero width and height"
        )));
    }
    let mut used: u64 = 0;
    let mut pages: Option<Pages> = None;
    let mut page = 0usize;
    loop {
        let what = |e: &dyn std::fmt::Display| err(format!("page {page}: {e}"));
        let bits = match dec.colortype().map_err(|e| what(&e))? {
            ::tiff::ColorType::Gray(bits @ (8 | 16 | 32 | 64)) => u64::from(bits),
            ::tiff::ColorType::Gray(bits) => {
                return Err(what(&format!(
                    "{bits}-bit samples: time-bin pages must have 8, 16, 32 or 64 bits"
                )));
            }
            other => {
                return Err(what(&format!(
                    "colour type {other:?}: time-bin pages must be greyscale"
                )));
            }
        };
        if page >= MAX_BINS {
            return Err(what(&format!(
                "more than {MAX_BINS} pages: a page is a time bin, and a decay has at most {MAX_BINS}"
            )));
        }
        let dims = dec.dimensions().map_err(|e| what(&e))?;
        if dims != (w, h) {
            return Err(what(&format!(
                "{}x{} pixels, page 0 has {w}x{h}: every time bin must have the same size",
                dims.0, dims.1
            )));
        }
        // Decoded (bits / 8) and kept (u16 for 8 and 16 bits, 4 bytes otherwise) per pixel.
        let kept = if bits <= 16 { 2 } else { 4 };
        let pixels = u64::from(w) * u64::from(h);
        let need = pixels * (bits / 8).max(kept);
        if used.saturating_add(need) > budget {
            return Err(what(&format!(
                "{w}x{h} pixels of {bits}-bit samples ({need} bytes decoded) take the pages past {budget} bytes: the reader's cap is {MAX_TIFF_DECODED_BYTES} bytes, and at most {MAX_TIFF_EXPANSION} times the file's {len} bytes (corrupt page header?)"
            )));
        }
        used += pixels * kept;
        let data = dec.read_image().map_err(|e| what(&e))?;
        let kind_error = |got: &str| {
            what(&format!(
                "{got} samples, page 0 has another type: every page must have one type"
            ))
        };
        match (&mut pages, data) {
            (None, DecodingResult::U8(v)) => {
                pages = Some(Pages::U16(vec![v.into_iter().map(u16::from).collect()]));
            }
            (None, DecodingResult::U16(v)) => pages = Some(Pages::U16(vec![v])),
            (None, DecodingResult::U32(v)) => pages = Some(Pages::U32(vec![v])),
            (None, DecodingResult::F32(v)) => pages = Some(Pages::F32(vec![v])),
            (None, DecodingResult::F64(v)) => {
                pages = Some(Pages::F32(vec![v.into_iter().map(|x| x as f32).collect()]));
            }
            (Some(Pages::U16(p)), DecodingResult::U8(v)) => {
                p.push(v.into_iter().map(u16::from).collect());
            }
            (Some(Pages::U16(p)), DecodingResult::U16(v)) => p.push(v),
            (Some(Pages::U32(p)), DecodingResult::U32(v)) => p.push(v),
            (Some(Pages::F32(p)), DecodingResult::F32(v)) => p.push(v),
            (Some(Pages::F32(p)), DecodingResult::F64(v)) => {
                p.push(v.into_iter().map(|x| x as f32).collect());
            }
            (None, _) => {
                return Err(what(
                    &"samples must be unsigned 8/16/32-bit integers or 32/64-bit floats",
                ));
            }
            (Some(_), other) => {
                let name = match other {
                    DecodingResult::U8(_) => "u8",
                    DecodingResult::U16(_) => "u16",
                    DecodingResult::U32(_) => "u32",
                    DecodingResult::F32(_) => "f32",
                    DecodingResult::F64(_) => "f64",
                    _ => "other",
                };
                return Err(kind_error(name));
            }
        }
        page += 1;
        if !dec.more_images() {
            break;
        }
        dec.next_image()
            .map_err(|e| err(format!("page {page}: {e}")))?;
    }
    let (h, w) = (h as usize, w as usize);
    let groups = match &order {
        None => vec![((0, 0), (0..page).collect::<Vec<_>>())],
        Some(order) => {
            let expected: usize = order.iter().map(|&(_, n)| n).product();
            if expected != page {
                return Err(err(format!(
                    "the axis metadata gives {expected} pages ({order:?}), the file has {page}: \
                     the metadata and the data disagree"
                )));
            }
            group_pages(order)
        }
    };
    let mut images = Vec::with_capacity(groups.len());
    for ((frame, channel), idx) in groups {
        let named = |e| in_file(path, &format!("{} pages (time bins)", idx.len()), e);
        let cube: AnyCube = match &pages {
            Some(Pages::U16(p)) => {
                let sel: Vec<&Vec<u16>> = idx.iter().map(|&i| &p[i]).collect();
                Cube::new(stack(&sel, h, w), bin_ns).map_err(named)?.into()
            }
            Some(Pages::U32(p)) => {
                let sel: Vec<&Vec<u32>> = idx.iter().map(|&i| &p[i]).collect();
                Cube::new(stack(&sel, h, w), bin_ns).map_err(named)?.into()
            }
            Some(Pages::F32(p)) => {
                let sel: Vec<&Vec<f32>> = idx.iter().map(|&i| &p[i]).collect();
                Cube::new(stack(&sel, h, w), bin_ns).map_err(named)?.into()
            }
            None => return Err(err("no page".into())),
        };
        images.push(Image {
            block: 0,
            frame,
            channel,
            cube,
        });
    }
    Ok(Recording {
        path: path.to_path_buf(),
        format: Format::Tiff,
        images,
        metadata: vec![
            ("format".into(), "TIFF, one page per time bin".into()),
            ("pages".into(), page.to_string()),
        ],
    })
}

/// Page indices per (frame, channel), slices (time bins) in order, for a hyperstack stored
/// in `order` (fastest-varying axis first).
fn group_pages(order: &[(char, usize)]) -> Vec<((usize, usize), Vec<usize>)> {
    let len = |axis: char| {
        order
            .iter()
            .find(|&&(a, _)| a == axis)
            .map_or(1, |&(_, n)| n)
    };
    let index = |c: usize, z: usize, t: usize| {
        let mut page = 0;
        for &(axis, n) in order.iter().rev() {
            page = page * n
                + match axis {
                    'C' => c,
                    'Z' => z,
                    _ => t,
                };
        }
        page
    };
    let mut groups = Vec::new();
    for t in 0..len('T') {
        for c in 0..len('C') {
            groups.push(((t, c), (0..len('Z')).map(|z| index(c, z, t)).collect()));
        }
    }
    groups
}

/// Write a cube as a multi-page TIFF in its own sample type, one page per time bin.
pub fn write_tiff(path: &Path, cube: &AnyCube) -> Result<()> {
    let err = |e: ::tiff::TiffError| match e {
        ::tiff::TiffError::IoError(source) => io_error(path, source),
        other => format_error(path, format!("writing TIFF: {other}")),
    };
    let mut buf = std::io::Cursor::new(Vec::new());
    let mut enc = TiffEncoder::new(&mut buf).map_err(err)?;
    let (h, w) = cube.shape();
    with_cube!(cube, |c| {
        for j in 0..c.bins() {
            let page: Vec<_> = c.counts().index_axis(Axis(2), j).iter().copied().collect();
            write_page(&mut enc, w as u32, h as u32, &page).map_err(err)?;
        }
    });
    std::fs::write(path, buf.into_inner()).map_err(|e| io_error(path, e))
}

/// One page in the TIFF type of `T`.
trait PageSample: Sized {
    fn write<W: std::io::Write + std::io::Seek>(
        enc: &mut TiffEncoder<W>,
        w: u32,
        h: u32,
        data: &[Self],
    ) -> ::tiff::TiffResult<()>;
}

impl PageSample for u16 {
    fn write<W: std::io::Write + std::io::Seek>(
        e: &mut TiffEncoder<W>,
        w: u32,
        h: u32,
        d: &[Self],
    ) -> ::tiff::TiffResult<()> {
        stamped::<colortype::Gray16, _>(e, w, h, d)
    }
}

impl PageSample for u32 {
    fn write<W: std::io::Write + std::io::Seek>(
        e: &mut TiffEncoder<W>,
        w: u32,
        h: u32,
        d: &[Self],
    ) -> ::tiff::TiffResult<()> {
        stamped::<colortype::Gray32, _>(e, w, h, d)
    }
}

impl PageSample for f32 {
    fn write<W: std::io::Write + std::io::Seek>(
        e: &mut TiffEncoder<W>,
        w: u32,
        h: u32,
        d: &[Self],
    ) -> ::tiff::TiffResult<()> {
        stamped::<colortype::Gray32Float, _>(e, w, h, d)
    }
}

/// One page with biogpu's note in its `Software` tag ([`imaging_io::software_note`]).
fn stamped<C: colortype::ColorType, W: std::io::Write + std::io::Seek>(
    e: &mut TiffEncoder<W>,
    w: u32,
    h: u32,
    d: &[C::Inner],
) -> ::tiff::TiffResult<()>
where
    [C::Inner]: ::tiff::encoder::TiffValue,
{
    let mut image = e.new_image::<C>(w, h)?;
    image
        .encoder()
        .write_tag(::tiff::tags::Tag::Software, imaging_io::software_note())?;
    image.write_data(d)
}

fn write_page<T: PageSample, W: std::io::Write + std::io::Seek>(
    enc: &mut TiffEncoder<W>,
    w: u32,
    h: u32,
    data: &[T],
) -> ::tiff::TiffResult<()> {
    T::write(enc, w, h, data)
}
