//! Figures and map files a scientist can use as they are: what each map measures
//! ([`quantity`]), map images enlarged to a readable size with a colour bar titled with the
//! quantity and its unit, and float TIFFs carrying ImageJ metadata (value unit, pixel size,
//! label and display range) so that Fiji shows units.
//!
//! Drawing uses `imaging_io::draw` (its canvas and built-in bitmap font, which draws
//! letters upper-case), as every other figure of the crate does.
//!
//! ```
//! use flim_core::io::{axis_label, quantity};
//! assert_eq!(quantity("tau_amp_mean_ns"), ("tau_m".to_string(), "ns"));
//! assert_eq!(axis_label("intensity"), "intensity (photons)");
//! assert_eq!(axis_label("chi2_red"), "chi2_r");
//! ```

use crate::error::{Error, Result};
use imaging_io::draw::{Canvas, GLYPH_HEIGHT, format_tick, nice_ticks, text_width};
use imaging_io::{Colormap, Range, RgbImage};
use ndarray::ArrayView2;
use std::fmt::Write as _;
use std::path::Path;

const WHITE: [u8; 3] = [255, 255, 255];
const BLACK: [u8; 3] = [0, 0, 0];

/// Map images are enlarged (nearest neighbour, by an integer factor) until their long side
/// reaches this many pixels.
pub const MIN_LONG_SIDE: usize = 512;

/// The quantity a map holds and its unit (empty when dimensionless), from the map's name
/// (the file stem, e.g. `tau_mle_ns`, `chi2_red`, `f_d_bcmm`, `g`). Used for colour-bar
/// titles and TIFF metadata alike.
pub fn quantity(name: &str) -> (String, &'static str) {
    let fixed = |label: &str, unit| (label.to_string(), unit);
    match name {
        "intensity" => return fixed("intensity", "photons"),
        "chi2_red" => return fixed("chi2_r", ""),
        "g" | "s" => return fixed(name, ""),
        "tau_amp_mean_ns" => return fixed("tau_m", "ns"),
        "tau_int_mean_ns" => return fixed("tau_int", "ns"),
        "tau_phase_ns" => return fixed("tau_phi", "ns"),
        "tau_mod_ns" => return fixed("tau_mod", "ns"),
        "offset" => return fixed("offset", "photons/bin"),
        "irf_shift_fit_bins" => return fixed("IRF shift", "bins"),
        "irf_shift_ns" => return fixed("IRF shift", "ns"),
        "iterations" => return fixed("iterations", ""),
        "status" => return fixed("fit status", ""),
        _ => {}
    }
    if name.eq_ignore_ascii_case("e_fret") {
        return fixed("E_FRET", "");
    }
    // Per-component maps of the fits: tau1_ns, a1, f1.
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(i) = name.strip_prefix("tau").and_then(|r| r.strip_suffix("_ns"))
        && digits(i)
    {
        return (format!("tau_{i}"), "ns");
    }
    if let Some(i) = name.strip_prefix('a')
        && digits(i)
    {
        return (format!("a_{i}"), "photons/ns");
    }
    if let Some(i) = name.strip_prefix('f')
        && digits(i)
    {
        return (format!("f_{i}"), "");
    }
    // FRET (BCMM, PM): tau_f_bcmm_ns, tau_d_pm_ns, f_d_bcmm, tau_avg_pm_ns.
    for (prefix, label) in [
        ("tau_f_", "tau_F"),
        ("tau_d_", "tau_D"),
        ("tau_avg_", "tau_avg"),
    ] {
        if let Some(m) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("_ns"))
        {
            return (format!("{label} {m}"), "ns");
        }
    }
    if let Some(m) = name.strip_prefix("f_d") {
        let m = m.trim_start_matches('_');
        return if m.is_empty() {
            fixed("f_D", "")
        } else {
            (format!("f_D {m}"), "")
        };
    }
    // Any other lifetime (tau_mle_ns, tau_iem_ns, ...) or time.
    if let Some(stem) = name.strip_suffix("_ns") {
        return (stem.to_string(), "ns");
    }
    (name.to_string(), "")
}

/// The colour-bar title of map `name`: `quantity (unit)`, or the quantity alone when it
/// has no unit ("tau_m (ns)", "chi2_r", "g").
pub fn axis_label(name: &str) -> String {
    match quantity(name) {
        (label, "") => label,
        (label, unit) => format!("{label} ({unit})"),
    }
}

/// Integer enlargement of an `h` x `w` map so that its long side reaches
/// [`MIN_LONG_SIDE`] pixels (1 for maps already that large).
pub fn figure_scale(h: usize, w: usize) -> usize {
    let long = h.max(w).max(1);
    MIN_LONG_SIDE.div_ceil(long).max(1)
}

/// Value limits of `values` (the pixels to be shown) for `range`; fixed limits are used as
/// given, percentiles are taken over the finite values only.
pub(crate) fn limits(values: &[f32], range: Range) -> Result<(f32, f32)> {
    Ok(range.resolve(&ndarray::ArrayView1::from(values))?)
}

/// Where a colour of a map pixel comes from: `t` in [0, 1] along the colour map and a
/// brightness in [0, 1]; `None` is drawn black (masked, failed or not a number).
pub(crate) type Shade = Option<(f64, f64)>;

/// Draw a map figure: the map (each pixel's [`Shade`], enlarged by [`figure_scale`]) with
/// a colour bar of `cmap` from `lo` to `hi`, round ticks, and `title` written vertically
/// beside it.
pub(crate) fn draw_map_figure(
    shades: ArrayView2<'_, Shade>,
    cmap: Colormap,
    lo: f32,
    hi: f32,
    title: &str,
) -> Result<RgbImage> {
    let (h, w) = shades.dim();
    if h == 0 || w == 0 {
        return Err(Error::Shape(format!(
            "cannot draw an empty {h}x{w} map ({title})"
        )));
    }
    let s = figure_scale(h, w);
    let (mh, mw) = ((h * s) as i64, (w * s) as i64);
    let f = (mh.max(mw) / 320).clamp(2, 4);
    let margin = 8 * f;
    let bar_x = margin + mw + 8 * f;
    let bar_w = 10 * f;
    let title_w = text_width(title, f);
    let bar_h = mh.max(title_w + 8 * f).max(60 * f);
    let (lo64, hi64) = (f64::from(lo), f64::from(hi));
    let target = usize::try_from(bar_h / (24 * f)).unwrap_or(4).clamp(4, 8);
    let (ticks, step) = nice_ticks(lo64, hi64, target);
    let labels: Vec<String> = ticks.iter().map(|&t| format_tick(t, step)).collect();
    let widest = labels.iter().map(|l| text_width(l, f)).max().unwrap_or(0);
    let label_x = bar_x + bar_w + 5 * f;
    let title_x = label_x + widest + 6 * f;
    let width = title_x + GLYPH_HEIGHT * f + margin;
    let height = margin + mh.max(bar_h) + margin;
    let mut c = Canvas::new(width as usize, height as usize, WHITE);
    // The map, vertically centred on the bar when it is the shorter.
    let map_y = margin + (bar_h - mh).max(0) / 2;
    let lut = cmap.lut();
    for ((r, col), shade) in shades.indexed_iter() {
        let colour = match *shade {
            Some((t, b)) if t.is_finite() && b.is_finite() && b > 0.0 => {
                let k = (t.clamp(0.0, 1.0) * 255.0).round() as usize;
                lut[k].map(|ch| (f64::from(ch) * b.min(1.0)).round() as u8)
            }
            _ => BLACK,
        };
        let (x, y) = (margin + (col * s) as i64, map_y + (r * s) as i64);
        c.fill_rect(x, y, s as i64, s as i64, colour);
    }
    // The bar, top = hi.
    let bar_y = margin + (mh - bar_h).max(0) / 2;
    for y in 0..bar_h {
        let t = if bar_h > 1 {
            1.0 - y as f64 / (bar_h - 1) as f64
        } else {
            1.0
        };
        c.fill_rect(bar_x, bar_y + y, bar_w, 1, cmap.colour(t));
    }
    c.outline(bar_x - 1, bar_y - 1, bar_w + 2, bar_h + 2, BLACK);
    for (t, label) in ticks.iter().zip(&labels) {
        let frac = (t - lo64) / (hi64 - lo64);
        if !(-1e-9..=1.0 + 1e-9).contains(&frac) {
            continue;
        }
        let y = bar_y + ((1.0 - frac) * (bar_h - 1) as f64).round() as i64;
        c.fill_rect(bar_x + bar_w, y - f / 2, 3 * f, f, BLACK);
        c.text(label_x, y - GLYPH_HEIGHT * f / 2, label, f, BLACK);
    }
    // The title, reading upwards, centred on the bar.
    let mut t = Canvas::new(title_w.max(1) as usize, (GLYPH_HEIGHT * f) as usize, false);
    t.text(0, 0, title, f, true);
    let top = bar_y + (bar_h - title_w) / 2;
    for y in 0..t.height {
        for x in 0..t.width {
            if t.get(x, y) {
                c.fill_rect(
                    title_x + y as i64,
                    top + (t.width - 1 - x) as i64,
                    1,
                    1,
                    BLACK,
                );
            }
        }
    }
    Ok(RgbImage::from(&c))
}

/// The ImageJ `ImageDescription` of map `name`: value unit (`vunit`), spatial unit when
/// the pixel size is known, display range (`min`, `max`), and the quantity (`label`).
pub fn imagej_description(
    name: &str,
    pixel_um: Option<f64>,
    display: Option<(f32, f32)>,
) -> String {
    let (label, unit) = quantity(name);
    let mut d = String::from("ImageJ=1.11a\nimages=1\n");
    if pixel_um.is_some() {
        d.push_str("unit=micron\n");
    }
    if !unit.is_empty() {
        let _ = writeln!(d, "vunit={unit}");
    }
    if let Some((lo, hi)) = display {
        let _ = write!(d, "min={lo}\nmax={hi}\n");
    }
    let _ = write!(d, "label={label}\nmap={name}\n");
    d
}

/// ImageJ's private metadata (tags 50838/50839): the image info text and the slice label,
/// UTF-16 in the file's (native) byte order. Returns (byte counts, data).
fn imagej_private(info: &str, slice_label: &str) -> (Vec<u32>, Vec<u8>) {
    let utf16 = |s: &str| -> Vec<u8> { s.encode_utf16().flat_map(u16::to_ne_bytes).collect() };
    let (info, label) = (utf16(info), utf16(slice_label));
    let mut data = Vec::new();
    for v in [0x494a_494a_u32, 0x696e_666f, 1, 0x6c61_626c, 1] {
        data.extend_from_slice(&v.to_ne_bytes());
    }
    let counts = vec![data.len() as u32, info.len() as u32, label.len() as u32];
    data.extend(info);
    data.extend(label);
    (counts, data)
}

/// Write map `name` as a single-page float32 TIFF with ImageJ metadata
/// ([`imagej_description`], plus the slice label and info text Fiji shows), the pixel size
/// (µm) as the TIFF resolution when known, and a display range of the 1st to 99th
/// percentile of the finite values.
pub(crate) fn write_imagej_tiff(
    path: &Path,
    name: &str,
    map: ArrayView2<'_, f32>,
    pixel_um: Option<f64>,
) -> Result<()> {
    use ::tiff::encoder::{Rational, TiffEncoder, colortype};
    use ::tiff::tags::{ResolutionUnit, Tag};
    let (h, w) = map.dim();
    let (Ok(w32), Ok(h32)) = (u32::try_from(w), u32::try_from(h)) else {
        return Err(Error::Shape(format!("map of {h}x{w} pixels is too large")));
    };
    if w == 0 || h == 0 {
        return Err(Error::Shape(format!(
            "cannot write an empty {h}x{w} map to {}",
            path.display()
        )));
    }
    let pixel_um = pixel_um.filter(|p| p.is_finite() && *p > 0.0);
    let data: Vec<f32> = map.iter().copied().collect();
    let finite: Vec<f32> = data.iter().copied().filter(|v| v.is_finite()).collect();
    let display = if finite.is_empty() {
        None
    } else {
        Some(limits(&finite, Range::Percentile(1.0, 99.0))?)
    };
    let description = imagej_description(name, pixel_um, display);
    let title = axis_label(name);
    let mut info = format!("biogpu FLIM map {name}\nquantity: {title}\n");
    if let Some(p) = pixel_um {
        let _ = writeln!(info, "pixel size: {p} um");
    }
    let (counts, private) = imagej_private(&info, &title);
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let tiff_err = |e: ::tiff::TiffError| match e {
        ::tiff::TiffError::IoError(source) => io(source),
        other => Error::Format {
            path: path.to_path_buf(),
            what: format!("cannot write TIFF: {other}"),
        },
    };
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    {
        let mut enc = TiffEncoder::new(&mut file).map_err(tiff_err)?;
        let mut image = enc
            .new_image::<colortype::Gray32Float>(w32, h32)
            .map_err(tiff_err)?;
        let dir = image.encoder();
        dir.write_tag(Tag::ImageDescription, description.as_str())
            .map_err(tiff_err)?;
        dir.write_tag(Tag::Software, imaging_io::software_note())
            .map_err(tiff_err)?;
        dir.write_tag(Tag::Unknown(50838), &counts[..])
            .map_err(tiff_err)?;
        dir.write_tag(Tag::Unknown(50839), &private[..])
            .map_err(tiff_err)?;
        if let Some(p) = pixel_um {
            // Pixels per micron; ImageJ reads the unit from the description.
            let d = 1_000_000u32;
            let n = (f64::from(d) / p).round().clamp(1.0, f64::from(u32::MAX)) as u32;
            image.resolution(ResolutionUnit::None, Rational { n, d });
        }
        image.write_data(&data).map_err(tiff_err)?;
    }
    std::io::Write::flush(&mut file).map_err(io)
}
