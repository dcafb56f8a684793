//! Colour maps and PNG rendering of a map with a labelled colour bar.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use ndarray::{ArrayBase, ArrayView2, Data, Dimension};

use crate::draw::{Canvas, GLYPH_HEIGHT, format_tick, nice_ticks, text_width};
use crate::error::{Error, Result};

/// A 256-entry colour look-up table.
pub type Lut = [[u8; 3]; 256];

/// Colour drawn for NaN pixels in every map: a neutral mid grey. The colour bar gains a
/// "NAN" swatch whenever a rendered map holds NaN, since with [`Colormap::Grey`] the same
/// grey also stands for a mid-range value.
pub const NAN_COLOUR: [u8; 3] = [128, 128, 128];

/// Colour maps for quantitative maps. Viridis and inferno are perceptually uniform; turbo is
/// a smooth, more readable alternative to jet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Colormap {
    /// Black to white.
    Grey,
    /// Matplotlib's viridis (dark blue, green, yellow).
    #[default]
    Viridis,
    /// Matplotlib's inferno (black, purple, orange, pale yellow).
    Inferno,
    /// Google's turbo (blue, cyan, green, yellow, red).
    Turbo,
}

impl Colormap {
    /// Every map, for listings and tests.
    pub const ALL: [Colormap; 4] = [
        Colormap::Grey,
        Colormap::Viridis,
        Colormap::Inferno,
        Colormap::Turbo,
    ];

    /// Lower-case name as accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Colormap::Grey => "grey",
            Colormap::Viridis => "viridis",
            Colormap::Inferno => "inferno",
            Colormap::Turbo => "turbo",
        }
    }

    /// Colour at `t` in [0, 1] (clamped), from the polynomial fits below.
    pub fn colour(self, t: f64) -> [u8; 3] {
        let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
        let rgb = match self {
            Colormap::Grey => [t, t, t],
            Colormap::Viridis => poly6(&VIRIDIS, t),
            Colormap::Inferno => poly6(&INFERNO, t),
            Colormap::Turbo => turbo(t),
        };
        rgb.map(|c| (c.clamp(0.0, 1.0) * 255.0).round() as u8)
    }

    /// The 256-entry table, entry i at t = i / 255.
    pub fn lut(self) -> Lut {
        std::array::from_fn(|i| self.colour(i as f64 / 255.0))
    }
}

impl fmt::Display for Colormap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Colormap {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "grey" | "gray" => Ok(Colormap::Grey),
            "viridis" => Ok(Colormap::Viridis),
            "inferno" => Ok(Colormap::Inferno),
            "turbo" => Ok(Colormap::Turbo),
            _ => Err(Error::InvalidParameter {
                name: "colormap",
                value: s.to_string(),
                why: "expected grey, viridis, inferno or turbo".into(),
            }),
        }
    }
}

/// Degree-6 polynomial fits (Matt Zucker, CC0) of matplotlib's viridis and inferno, within
/// about 1% of the published tables; coefficients c0..c6 per channel.
const VIRIDIS: [[f64; 3]; 7] = [
    [
        0.277_727_327_223_417_7,
        0.005_407_344_544_966_578,
        0.334_099_805_335_306_1,
    ],
    [
        0.105_093_043_108_577_4,
        1.404_613_529_898_575,
        1.384_590_162_594_685,
    ],
    [
        -0.330_861_828_725_556_3,
        0.214_847_559_468_213,
        0.095_095_163_028_236_59,
    ],
    [
        -4.634_230_498_983_486,
        -5.799_100_973_351_585,
        -19.332_440_956_279_87,
    ],
    [
        6.228_269_936_347_081,
        14.179_933_366_805_09,
        56.690_552_600_681_05,
    ],
    [
        4.776_384_997_670_288,
        -13.745_145_377_746_01,
        -65.353_032_633_372_34,
    ],
    [
        -5.435_455_855_934_631,
        4.645_852_612_178_535,
        26.312_435_249_583_2,
    ],
];
const INFERNO: [[f64; 3]; 7] = [
    [
        0.000_218_940_369_119_226_5,
        0.001_651_004_631_001_012,
        -0.019_480_898_437_091_84,
    ],
    [
        0.106_513_419_485_611_6,
        0.563_956_436_788_409_1,
        3.932_712_388_889_277,
    ],
    [
        11.602_493_082_471_87,
        -3.972_853_965_665_698,
        -15.942_394_106_291_4,
    ],
    [
        -41.703_996_131_394_59,
        17.436_398_882_053_13,
        44.354_145_198_728_13,
    ],
    [
        77.162_935_699_427,
        -33.402_358_942_100_92,
        -81.807_309_257_389_93,
    ],
    [
        -71.319_428_244_992_14,
        32.626_064_263_977_23,
        73.209_519_858_032_02,
    ],
    [
        25.131_126_224_773_41,
        -12.242_668_952_385_67,
        -23.070_325_002_871_72,
    ],
];

fn poly6(c: &[[f64; 3]; 7], t: f64) -> [f64; 3] {
    std::array::from_fn(|ch| c.iter().rev().fold(0.0, |acc, row| acc * t + row[ch]))
}

/// Polynomial approximation of turbo (Google, Apache-2.0), within a few percent of the
/// published table.
fn turbo(t: f64) -> [f64; 3] {
    const R: [f64; 6] = [
        0.135_721_38,
        4.615_392_6,
        -42.660_322_58,
        132.131_082_34,
        -152.942_393_96,
        59.286_379_43,
    ];
    const G: [f64; 6] = [
        0.091_402_61,
        2.194_188_39,
        4.842_966_58,
        -14.185_033_33,
        4.277_298_57,
        2.829_566_04,
    ];
    const B: [f64; 6] = [
        0.106_673_3,
        12.641_946_08,
        -60.582_048_36,
        110.362_767_71,
        -89.903_109_12,
        27.348_249_73,
    ];
    let p = |c: &[f64; 6]| c.iter().rev().fold(0.0, |acc, k| acc * t + k);
    [p(&R), p(&G), p(&B)]
}

/// Which values map to the two ends of the colour map.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Range {
    /// Fixed limits `lo < hi`, the same for every map (comparable across recordings).
    Fixed(f32, f32),
    /// Percentiles `0 <= p_lo < p_hi <= 100` of the finite values (NaN and infinities
    /// ignored), robust to a few outliers.
    Percentile(f32, f32),
}

impl Default for Range {
    fn default() -> Self {
        Range::Percentile(1.0, 99.0)
    }
}

impl FromStr for Range {
    type Err = Error;
    /// `"0,0.5"` for fixed limits, `"p1,p99"` for percentiles.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidParameter {
            name: "range",
            value: s.to_string(),
            why: "expected LO,HI (fixed) or pLO,pHI (percentiles), e.g. 0,0.5 or p1,p99".into(),
        };
        let (a, b) = s.split_once(',').ok_or_else(bad)?;
        let (a, b) = (a.trim(), b.trim());
        let range = match (a.strip_prefix('p'), b.strip_prefix('p')) {
            (Some(a), Some(b)) => {
                Range::Percentile(a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?)
            }
            (None, None) => {
                Range::Fixed(a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?)
            }
            _ => return Err(bad()),
        };
        range.validate()?;
        Ok(range)
    }
}

/// Values sampled for percentiles: exact below this count, evenly strided above it.
const PERCENTILE_SAMPLES: usize = 1 << 22;

impl Range {
    /// Check the limits or percentiles.
    pub fn validate(&self) -> Result<()> {
        let (name, lo, hi, ok) = match *self {
            Range::Fixed(lo, hi) => ("range", lo, hi, lo.is_finite() && hi.is_finite() && lo < hi),
            Range::Percentile(lo, hi) => (
                "percentile range",
                lo,
                hi,
                (0.0..=100.0).contains(&lo) && (0.0..=100.0).contains(&hi) && lo < hi,
            ),
        };
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidParameter {
                name,
                value: format!("{lo},{hi}"),
                why: match self {
                    Range::Fixed(..) => "limits must be finite with lo < hi".into(),
                    Range::Percentile(..) => "percentiles must satisfy 0 <= lo < hi <= 100".into(),
                },
            })
        }
    }

    /// The value limits for `data`. Percentiles interpolate linearly between order
    /// statistics of the finite values (exact up to 4 Mi values, from an even stride of
    /// 4 Mi samples beyond). With no finite value the range is 0..1; a constant map gets a
    /// range around its value, so rendering never divides by zero.
    pub fn resolve<S: Data<Elem = f32>, D: Dimension>(
        &self,
        data: &ArrayBase<S, D>,
    ) -> Result<(f32, f32)> {
        self.validate()?;
        let (p_lo, p_hi) = match *self {
            Range::Fixed(lo, hi) => return Ok((lo, hi)),
            Range::Percentile(lo, hi) => (f64::from(lo), f64::from(hi)),
        };
        let stride = data.len().div_ceil(PERCENTILE_SAMPLES).max(1);
        let mut v: Vec<f32> = data
            .iter()
            .step_by(stride)
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        if v.is_empty() {
            tracing::warn!("no finite value to take percentiles of; using the range 0..1");
            return Ok((0.0, 1.0));
        }
        let lo = percentile(&mut v, p_lo);
        let hi = percentile(&mut v, p_hi);
        if hi > lo {
            return Ok((lo as f32, hi as f32));
        }
        let pad = if lo == 0.0 { 0.5 } else { lo.abs() * 0.05 };
        Ok(((lo - pad) as f32, (hi + pad) as f32))
    }
}

impl Range {
    /// The value limits over the values of `map` that are shown where brightness `weight`
    /// applies (as [`render_weighted`] draws them): finite values whose weight is > 0
    /// ([`Range::resolve`] over those).
    ///
    /// ```
    /// use ndarray::array;
    /// use imaging_io::Range;
    /// let map = array![[1.0f32, 2.0], [f32::NAN, 100.0]];
    /// let weight = array![[1.0f32, 0.5], [1.0, 0.0]];
    /// let r = Range::Percentile(0.0, 100.0);
    /// assert_eq!(r.resolve_weighted(map.view(), weight.view())?, (1.0, 2.0));
    /// # Ok::<_, imaging_io::Error>(())
    /// ```
    #[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
    pub fn resolve_weighted(
        &self,
        map: ArrayView2<'_, f32>,
        weight: ArrayView2<'_, f32>,
    ) -> Result<(f32, f32)> {
        if weight.dim() != map.dim() {
            let ((h, w), (wh, ww)) = (map.dim(), weight.dim());
            return Err(Error::FrameSizeMismatch {
                what: "brightness weights of a map".into(),
                expected_w: w,
                expected_h: h,
                got_w: ww,
                got_h: wh,
            });
        }
        let shown: Vec<f32> = map
            .iter()
            .zip(weight.iter())
            .filter(|(v, w)| v.is_finite() && **w > 0.0)
            .map(|(v, _)| *v)
            .collect();
        self.resolve(&ndarray::ArrayView1::from(&shown[..]))
    }
}

/// Percentile `p` (0..=100) of finite values, linear interpolation between order statistics.
fn percentile(v: &mut [f32], p: f64) -> f64 {
    let pos = p / 100.0 * (v.len() - 1) as f64;
    let i = pos.floor() as usize;
    let frac = pos - i as f64;
    let (_, &mut a, rest) = v.select_nth_unstable_by(i, f32::total_cmp);
    let a = f64::from(a);
    if frac == 0.0 || rest.is_empty() {
        return a;
    }
    let b = f64::from(rest.iter().copied().fold(f32::INFINITY, f32::min));
    a + frac * (b - a)
}

/// An 8-bit RGB image, row-major, three bytes per pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

impl RgbImage {
    /// The colour at column `x`, row `y`.
    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = 3 * (y * self.width + x);
        [self.data[i], self.data[i + 1], self.data[i + 2]]
    }

    /// Write as an 8-bit RGB PNG at exactly `path` (overwritten if present).
    pub fn write_png(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io_err)?);
        let too_big = || Error::InvalidParameter {
            name: "image size",
            value: format!("{}x{}", self.width, self.height),
            why: "too large for PNG".into(),
        };
        let w = u32::try_from(self.width).map_err(|_| too_big())?;
        let h = u32::try_from(self.height).map_err(|_| too_big())?;
        let mut enc = png::Encoder::new(file, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // fdeflate: some 14 times sooner than the default level on a noisy 1100x820
        // lifetime figure (6.9 against 97 ms) for files about a quarter larger; a batch
        // writes three figures per recording.
        enc.set_compression(png::Compression::Fast);
        let enc_err = |e: png::EncodingError| match e {
            png::EncodingError::IoError(source) => Error::Io {
                path: path.to_path_buf(),
                source,
            },
            other => Error::Format {
                path: path.to_path_buf(),
                why: format!("cannot write PNG: {other}"),
            },
        };
        let mut writer = enc.write_header().map_err(enc_err)?;
        writer.write_image_data(&self.data).map_err(enc_err)?;
        writer.finish().map_err(enc_err)
    }
}

impl From<&Canvas<[u8; 3]>> for RgbImage {
    fn from(c: &Canvas<[u8; 3]>) -> Self {
        Self {
            width: c.width,
            height: c.height,
            data: c.pixels.iter().flatten().copied().collect(),
        }
    }
}

/// Colour levels in the indexed rendering; the rest of the 256-entry palette holds the
/// NaN, background and text colours.
pub(crate) const LEVELS: usize = 252;
pub(crate) const NAN_INDEX: u8 = 252;
pub(crate) const BACKGROUND_INDEX: u8 = 253;
pub(crate) const TEXT_INDEX: u8 = 254;

/// A map rendered as palette indices plus its 256-colour palette; shared by the PNG and
/// the GIF writers so both show the same layout.
pub(crate) struct Indexed {
    pub canvas: Canvas<u8>,
    pub palette: [[u8; 3]; 256],
    /// Canvas pixels per map pixel, and the canvas position of map pixel (0, 0).
    pub scale: usize,
    pub origin: usize,
}

impl Indexed {
    pub(crate) fn to_rgb(&self) -> RgbImage {
        let data = self
            .canvas
            .pixels
            .iter()
            .flat_map(|&i| self.palette[usize::from(i)])
            .collect();
        RgbImage {
            width: self.canvas.width,
            height: self.canvas.height,
            data,
        }
    }
}

pub(crate) fn palette(cmap: Colormap) -> [[u8; 3]; 256] {
    let lut = cmap.lut();
    std::array::from_fn(|i| match i {
        i if i < LEVELS => lut[(i * 255 + (LEVELS - 1) / 2) / (LEVELS - 1)],
        252 => NAN_COLOUR,
        253 => [255, 255, 255],
        _ => [0, 0, 0],
    })
}

fn level(v: f32, lo: f32, hi: f32) -> u8 {
    if v.is_nan() {
        return NAN_INDEX;
    }
    let t = ((f64::from(v) - f64::from(lo)) / (f64::from(hi) - f64::from(lo))).clamp(0.0, 1.0);
    (t * (LEVELS - 1) as f64).round() as u8
}

/// Layout of a map with its colour bar, fixed by the map size so every frame of an
/// animation has the same geometry.
struct Layout {
    scale: usize,
    font: i64,
    margin: i64,
    /// Canvas row of the map's first row (below the title, if any).
    top: i64,
    bar_x: i64,
    bar_w: i64,
    label_x: i64,
    width: usize,
    height: usize,
}

fn layout(h: usize, w: usize, labels: &[String], show_nan: bool, title: Option<&str>) -> Layout {
    // Small maps are enlarged (nearest neighbour) so the bar and its labels stay legible,
    // but never beyond 16x or 4096 pixels wide.
    let scale = if h < 192 {
        192usize
            .div_ceil(h.max(1))
            .min(16)
            .min((4096 / w.max(1)).max(1))
    } else {
        1
    };
    let (hs, ws) = ((h * scale) as i64, (w * scale) as i64);
    let font = (1 + hs / 400).min(4);
    let margin = 6 * font;
    let bar_x = margin + ws + 6 * font;
    let bar_w = 10 * font;
    let label_x = bar_x + bar_w + 5 * font;
    let widest = labels
        .iter()
        .map(|l| text_width(l, font))
        .chain([text_width("NAN", font)])
        .max()
        .unwrap_or(0);
    let extra = if show_nan { 12 * font } else { 0 };
    let (title_h, title_w) = match title {
        Some(t) => (12 * font, 2 * margin + text_width(t, font)),
        None => (0, 0),
    };
    Layout {
        scale,
        font,
        margin,
        top: margin + title_h,
        bar_x,
        bar_w,
        label_x,
        width: ((label_x + widest + margin).max(title_w)) as usize,
        height: (hs + 2 * margin + extra + title_h) as usize,
    }
}

/// Render `map` with limits `lo < hi` and a labelled colour bar as palette indices.
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub(crate) fn render_indexed(
    map: ArrayView2<'_, f32>,
    cmap: Colormap,
    lo: f32,
    hi: f32,
    show_nan: bool,
) -> Indexed {
    let h = map.dim().0;
    let target = (h.max(48) / 24).clamp(3, 8);
    let (ticks, step) = nice_ticks(f64::from(lo), f64::from(hi), target);
    let ticks: Vec<(f64, String)> = ticks.iter().map(|&t| (t, format_tick(t, step))).collect();
    render_indexed_with(map, cmap, lo, hi, show_nan, &ticks, None)
}

/// [`render_indexed`] with given ticks (positions in map values, labels) and an optional
/// title line above the map.
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub(crate) fn render_indexed_with(
    map: ArrayView2<'_, f32>,
    cmap: Colormap,
    lo: f32,
    hi: f32,
    show_nan: bool,
    ticks: &[(f64, String)],
    title: Option<&str>,
) -> Indexed {
    let (h, w) = map.dim();
    let labels: Vec<String> = ticks.iter().map(|(_, l)| l.clone()).collect();
    let l = layout(h, w, &labels, show_nan, title);
    let mut c = Canvas::new(l.width, l.height, BACKGROUND_INDEX);
    let s = l.scale;
    let (m, top) = (l.margin as usize, l.top as usize);
    ndarray::Zip::indexed(map).for_each(|(r, col), &v| {
        let idx = level(v, lo, hi);
        for dy in 0..s {
            let row = (top + r * s + dy) * l.width + m + col * s;
            c.pixels[row..row + s].fill(idx);
        }
    });
    let bar_h = (h * s) as i64;
    for y in 0..bar_h {
        let t = if bar_h > 1 {
            1.0 - y as f64 / (bar_h - 1) as f64
        } else {
            1.0
        };
        let idx = (t * (LEVELS - 1) as f64).round() as u8;
        c.fill_rect(l.bar_x, l.top + y, l.bar_w, 1, idx);
    }
    c.outline(l.bar_x - 1, l.top - 1, l.bar_w + 2, bar_h + 2, TEXT_INDEX);
    let f = l.font;
    if let Some(t) = title {
        c.text(l.margin, l.margin, t, f, TEXT_INDEX);
    }
    for (t, label) in ticks {
        let frac = (t - f64::from(lo)) / (f64::from(hi) - f64::from(lo));
        if !(-1e-9..=1.0 + 1e-9).contains(&frac) {
            continue;
        }
        let y = l.top + ((1.0 - frac) * (bar_h - 1) as f64).round() as i64;
        c.fill_rect(l.bar_x + l.bar_w, y - f / 2, 3 * f, f, TEXT_INDEX);
        c.text(l.label_x, y - GLYPH_HEIGHT * f / 2, label, f, TEXT_INDEX);
    }
    if show_nan {
        let y = l.top + bar_h + 5 * f;
        c.fill_rect(l.bar_x, y, l.bar_w, 7 * f, NAN_INDEX);
        c.outline(l.bar_x - 1, y - 1, l.bar_w + 2, 7 * f + 2, TEXT_INDEX);
        c.text(l.label_x, y, "NAN", f, TEXT_INDEX);
    }
    Indexed {
        canvas: c,
        palette: palette(cmap),
        scale: s,
        origin: m,
    }
}

fn check_map(map: &ArrayView2<'_, f32>) -> Result<()> {
    let (h, w) = map.dim();
    if h == 0 || w == 0 {
        return Err(Error::InvalidParameter {
            name: "map",
            value: format!("{w}x{h}"),
            why: "cannot render an empty map".into(),
        });
    }
    Ok(())
}

/// Render `map` in colour with a labelled colour bar on the right; returns the image and
/// the value limits used (useful for percentile ranges).
///
/// Maps smaller than 192 rows are enlarged by an integer factor so labels stay legible.
///
/// ```
/// use ndarray::Array2;
/// use imaging_io::{Colormap, Range, render};
/// let k = Array2::from_shape_fn((32, 48), |(r, c)| (r + c) as f32 / 80.0);
/// let (img, (lo, hi)) = render(k.view(), Colormap::Viridis, Range::Fixed(0.0, 1.0)).unwrap();
/// assert_eq!((lo, hi), (0.0, 1.0));
/// assert!(img.width > 48 && img.height > 32);
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn render(
    map: ArrayView2<'_, f32>,
    cmap: Colormap,
    range: Range,
) -> Result<(RgbImage, (f32, f32))> {
    check_map(&map)?;
    let (lo, hi) = range.resolve(&map)?;
    let show_nan = map.iter().any(|v| v.is_nan());
    Ok((
        render_indexed(map, cmap, lo, hi, show_nan).to_rgb(),
        (lo, hi),
    ))
}

/// Write `map` as an RGB PNG with a colour bar and numeric tick labels; NaN pixels are
/// drawn in [`NAN_COLOUR`]. Returns the value limits used.
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn render_png(
    map: ArrayView2<'_, f32>,
    cmap: Colormap,
    range: Range,
    path: impl AsRef<Path>,
) -> Result<(f32, f32)> {
    let (img, limits) = render(map, cmap, range)?;
    img.write_png(path)?;
    Ok(limits)
}

/// Render `map` coloured by value with `weight` (0 to 1, clamped) as brightness, as lifetime
/// images are shown (colour = lifetime, brightness = intensity), with a labelled colour bar
/// for the full-brightness colours. NaN values and non-positive weights are black. The range
/// is resolved over the finite values with positive weight. Returns the image and the limits.
///
/// ```
/// use ndarray::Array2;
/// use imaging_io::{Colormap, Range, render_weighted};
/// let tau = Array2::from_shape_fn((32, 32), |(_, c)| 1.0 + c as f32 / 16.0);
/// let mut weight = Array2::from_elem((32, 32), 1.0f32);
/// weight[[0, 0]] = 0.0;
/// let (img, (lo, hi)) = render_weighted(tau.view(), weight.view(), Colormap::Turbo, Range::Fixed(1.0, 3.0))?;
/// assert_eq!((lo, hi), (1.0, 3.0));
/// assert!(img.width > 32);
/// # Ok::<_, imaging_io::Error>(())
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn render_weighted(
    map: ArrayView2<'_, f32>,
    weight: ArrayView2<'_, f32>,
    cmap: Colormap,
    range: Range,
) -> Result<(RgbImage, (f32, f32))> {
    check_map(&map)?;
    if weight.dim() != map.dim() {
        let ((h, w), (wh, ww)) = (map.dim(), weight.dim());
        return Err(Error::FrameSizeMismatch {
            what: "brightness weights of a rendered map".into(),
            expected_w: w,
            expected_h: h,
            got_w: ww,
            got_h: wh,
        });
    }
    let (lo, hi) = range.resolve_weighted(map, weight)?;
    let indexed = render_indexed(map, cmap, lo, hi, false);
    let mut img = indexed.to_rgb();
    let (s, o) = (indexed.scale, indexed.origin);
    ndarray::Zip::indexed(map)
        .and(weight)
        .for_each(|(r, c), &v, &w| {
            let colour = if v.is_nan() || w.is_nan() || w <= 0.0 {
                [0, 0, 0]
            } else {
                let b = f64::from(w.min(1.0));
                indexed.palette[usize::from(level(v, lo, hi))]
                    .map(|ch| (f64::from(ch) * b).round() as u8)
            };
            for dy in 0..s {
                let row = (o + r * s + dy) * img.width + o + c * s;
                for px in img.data[3 * row..3 * (row + s)].chunks_exact_mut(3) {
                    px.copy_from_slice(&colour);
                }
            }
        });
    Ok((img, (lo, hi)))
}

/// How values map to colours along a colour bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scale {
    /// Colour proportional to the value.
    #[default]
    Linear,
    /// Colour proportional to log10 of the value (non-positive values are drawn as NaN);
    /// ticks at 1-2-5 multiples of powers of ten.
    Log,
}

impl FromStr for Scale {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "linear" | "lin" => Ok(Scale::Linear),
            "log" | "log10" => Ok(Scale::Log),
            _ => Err(Error::InvalidParameter {
                name: "scale",
                value: s.to_string(),
                why: "expected linear or log".into(),
            }),
        }
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scale::Linear => "linear",
            Scale::Log => "log",
        })
    }
}

/// How a map is drawn as a figure: its colour scale and the title naming the quantity and
/// its unit (e.g. "tau_c (ms)"), written above the map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Figure {
    pub scale: Scale,
    pub title: Option<String>,
}

impl Figure {
    /// A figure titled `title` on `scale`.
    pub fn new(title: impl Into<String>, scale: Scale) -> Self {
        Self {
            scale,
            title: Some(title.into()),
        }
    }
}

/// The value limits of `data` for `range` on `scale` (log: over the finite positive values;
/// fixed limits must then be > 0).
pub(crate) fn figure_limits<'a>(
    data: impl Iterator<Item = &'a f32>,
    range: Range,
    scale: Scale,
) -> Result<(f32, f32)> {
    match scale {
        Scale::Linear => {
            let v: Vec<f32> = data.copied().collect();
            range.resolve(&ndarray::ArrayView1::from(&v[..]))
        }
        Scale::Log => {
            if let Range::Fixed(lo, _) = range
                && lo <= 0.0
            {
                return Err(Error::InvalidParameter {
                    name: "range",
                    value: format!("{range:?}"),
                    why: "a log scale needs limits > 0 (or use percentiles, e.g. p1,p99)".into(),
                });
            }
            let v: Vec<f32> = data
                .copied()
                .filter(|&x| x > 0.0 && x.is_finite())
                .collect();
            if v.is_empty() {
                return Ok((1.0, 10.0));
            }
            range.resolve(&ndarray::ArrayView1::from(&v[..]))
        }
    }
}

/// A tick label for a log axis: up to three significant digits, no trailing zeros.
fn log_label(v: f64) -> String {
    if (1e-3..1e5).contains(&v.abs()) {
        let digits = (2 - v.abs().log10().floor() as i64).clamp(0, 6) as usize;
        let s = format!("{v:.digits$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    } else {
        format!("{v:.0e}")
    }
}

/// Ticks of a log axis over `lo..hi` (> 0): powers of ten, with 2 and 5 multiples when
/// fewer than three decades fit; positions in log10 units.
fn log_ticks(lo: f64, hi: f64) -> Vec<(f64, String)> {
    let (a, b) = (lo.log10(), hi.log10());
    let mut out = Vec::new();
    for mults in [
        &[1.0][..],
        &[1.0, 2.0, 5.0],
        &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0],
    ] {
        out.clear();
        for e in (a.floor() as i64 - 1)..=(b.ceil() as i64) {
            for m in mults {
                let v = m * 10f64.powi(e as i32);
                let p = v.log10();
                if p >= a - 1e-9 && p <= b + 1e-9 {
                    out.push((p, log_label(v)));
                }
            }
        }
        if out.len() >= 3 {
            return out;
        }
    }
    // A narrow range: linear ticks in value, placed on the log axis.
    let (ticks, step) = nice_ticks(lo, hi, 4);
    ticks
        .into_iter()
        .filter(|&t| t > 0.0)
        .map(|t| (t.log10(), format_tick(t, step)))
        .collect()
}

/// One figure frame as palette indices, with limits `lo < hi` in value units.
pub(crate) fn figure_indexed(
    map: ArrayView2<'_, f32>,
    cmap: Colormap,
    (lo, hi): (f32, f32),
    show_nan: bool,
    fig: &Figure,
) -> Indexed {
    let title = fig.title.as_deref();
    match fig.scale {
        Scale::Linear => {
            let h = map.dim().0;
            let target = (h.max(48) / 24).clamp(3, 8);
            let (ticks, step) = nice_ticks(f64::from(lo), f64::from(hi), target);
            let ticks: Vec<(f64, String)> =
                ticks.iter().map(|&t| (t, format_tick(t, step))).collect();
            render_indexed_with(map, cmap, lo, hi, show_nan, &ticks, title)
        }
        Scale::Log => {
            let logs = map.mapv(|v| if v > 0.0 { v.log10() } else { f32::NAN });
            let (a, b) = (lo.max(f32::MIN_POSITIVE), hi.max(f32::MIN_POSITIVE));
            let ticks = log_ticks(f64::from(a), f64::from(b));
            render_indexed_with(
                logs.view(),
                cmap,
                a.log10(),
                b.log10(),
                show_nan,
                &ticks,
                title,
            )
        }
    }
}

/// Render `map` as a figure: colour bar on `fig.scale` (log ticks at 1-2-5 multiples of
/// powers of ten), the title (quantity and unit) above the map, NaN (and, on a log scale,
/// non-positive values) in [`NAN_COLOUR`] with a "NAN" swatch. Returns the image and the
/// value limits used (in the map's units).
///
/// ```
/// use ndarray::Array2;
/// use imaging_io::{Colormap, Figure, Range, Scale, render_figure};
/// let tau = Array2::from_shape_fn((40, 40), |(r, c)| 0.01 * 10f32.powf((r + c) as f32 / 40.0));
/// let fig = Figure::new("tau_c (ms)", Scale::Log);
/// let (img, (lo, hi)) = render_figure(tau.view(), Colormap::Inferno, Range::Percentile(0.0, 100.0), &fig)?;
/// assert!(lo > 0.0 && hi > 50.0 * lo && img.width > 40);
/// # Ok::<_, imaging_io::Error>(())
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn render_figure(
    map: ArrayView2<'_, f32>,
    cmap: Colormap,
    range: Range,
    fig: &Figure,
) -> Result<(RgbImage, (f32, f32))> {
    check_map(&map)?;
    let limits = figure_limits(map.iter(), range, fig.scale)?;
    let show_nan = map
        .iter()
        .any(|v| v.is_nan() || (fig.scale == Scale::Log && *v <= 0.0));
    Ok((
        figure_indexed(map, cmap, limits, show_nan, fig).to_rgb(),
        limits,
    ))
}

/// [`render_figure`] written as an RGB PNG at exactly `path`; returns the limits used.
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn render_figure_png(
    map: ArrayView2<'_, f32>,
    cmap: Colormap,
    range: Range,
    fig: &Figure,
    path: impl AsRef<Path>,
) -> Result<(f32, f32)> {
    let (img, limits) = render_figure(map, cmap, range, fig)?;
    img.write_png(path)?;
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    fn close(a: [u8; 3], b: [f64; 3], tol: f64) -> bool {
        a.iter()
            .zip(b)
            .all(|(&x, y)| (f64::from(x) / 255.0 - y).abs() <= tol)
    }

    #[test]
    fn colormaps_match_published_reference_colours() {
        // Reference values from matplotlib's tables.
        let tol = 0.02;
        assert!(close(
            Colormap::Viridis.colour(0.0),
            [0.267, 0.005, 0.329],
            tol
        ));
        assert!(close(
            Colormap::Viridis.colour(0.5),
            [0.128, 0.567, 0.551],
            tol
        ));
        assert!(close(
            Colormap::Viridis.colour(1.0),
            [0.993, 0.906, 0.144],
            tol
        ));
        assert!(close(
            Colormap::Inferno.colour(0.0),
            [0.001, 0.000, 0.014],
            tol
        ));
        assert!(close(
            Colormap::Inferno.colour(0.5),
            [0.735, 0.216, 0.330],
            tol
        ));
        assert!(close(
            Colormap::Inferno.colour(1.0),
            [0.988, 0.998, 0.645],
            tol
        ));
        // Turbo (an approximation): blue at the bottom, green-yellow in the middle, red
        // near the top, dark red at the end.
        let [r, g, b] = Colormap::Turbo.colour(0.25);
        assert!(b > r && g > r, "turbo(0.25) = {:?}", [r, g, b]);
        let [r, g, b] = Colormap::Turbo.colour(0.5);
        assert!(g > 240 && g > r && r > b, "turbo(0.5) = {:?}", [r, g, b]);
        let [r, g, b] = Colormap::Turbo.colour(0.8);
        assert!(r > 240 && r > g && g > b, "turbo(0.8) = {:?}", [r, g, b]);
        assert!(Colormap::Turbo.colour(1.0)[0] < 160);
        assert_eq!(Colormap::Grey.lut()[0], [0, 0, 0]);
        assert_eq!(Colormap::Grey.lut()[255], [255, 255, 255]);
        for c in Colormap::ALL {
            assert_eq!(c.name().parse::<Colormap>().unwrap(), c);
            assert_ne!(c.lut()[0], c.lut()[255]);
        }
        assert!("jet".parse::<Colormap>().is_err());
    }

    #[test]
    fn percentile_range_ignores_nan_and_interpolates() {
        let mut v: Vec<f32> = (0..=100).map(|i| i as f32).collect();
        v.extend([f32::NAN, f32::INFINITY, f32::NAN]);
        let a = ndarray::Array1::from(v);
        let (lo, hi) = Range::Percentile(5.0, 95.0).resolve(&a).unwrap();
        assert_eq!((lo, hi), (5.0, 95.0));
        let (lo, hi) = Range::Percentile(0.0, 100.0)
            .resolve(&ndarray::arr1(&[1.0f32, 2.0]))
            .unwrap();
        assert_eq!((lo, hi), (1.0, 2.0));
        let (lo, hi) = Range::Percentile(25.0, 75.0)
            .resolve(&ndarray::arr1(&[0.0f32, 10.0]))
            .unwrap();
        assert_eq!((lo, hi), (2.5, 7.5));
        let (lo, hi) = Range::Percentile(1.0, 99.0)
            .resolve(&ndarray::arr1(&[f32::NAN]))
            .unwrap();
        assert_eq!((lo, hi), (0.0, 1.0));
        let (lo, hi) = Range::Percentile(1.0, 99.0)
            .resolve(&ndarray::arr1(&[3.0f32; 4]))
            .unwrap();
        assert!(lo < 3.0 && hi > 3.0);
    }

    #[test]
    fn range_parsing_and_validation() {
        assert_eq!("0,0.5".parse::<Range>().unwrap(), Range::Fixed(0.0, 0.5));
        assert_eq!(
            "p2, p98".parse::<Range>().unwrap(),
            Range::Percentile(2.0, 98.0)
        );
        for bad in ["0.5,0", "p1,99", "p0,p101", "nan,1", "1", "a,b"] {
            assert!(bad.parse::<Range>().is_err(), "{bad}");
        }
    }

    #[test]
    fn rendered_image_has_map_colours_bar_and_nan_colour() {
        let mut map = Array2::from_shape_fn((200, 100), |(_, c)| c as f32 / 99.0);
        map[[10, 10]] = f32::NAN;
        let (img, (lo, hi)) =
            render(map.view(), Colormap::Inferno, Range::Fixed(0.0, 1.0)).unwrap();
        assert_eq!((lo, hi), (0.0, 1.0));
        let m = 6; // margin at font scale 1
        let pal = palette(Colormap::Inferno);
        assert_eq!(img.pixel(m, m), pal[0]);
        assert_eq!(img.pixel(m + 99, m), pal[LEVELS - 1]);
        assert_eq!(img.pixel(m + 10, m + 10), NAN_COLOUR);
        // The bar runs from the top colour to the bottom colour.
        let bar_x = m + 100 + 6 + 3;
        assert_eq!(img.pixel(bar_x, m), pal[LEVELS - 1]);
        assert_eq!(img.pixel(bar_x, m + 199), pal[0]);
        // Tick labels put black text pixels to the right of the bar.
        let text = (0..img.height).flat_map(|y| (bar_x + 12..img.width).map(move |x| (x, y)));
        assert!(text.filter(|&(x, y)| img.pixel(x, y) == [0, 0, 0]).count() > 50);
        // A NaN swatch below the bar.
        assert!((0..img.width).any(|x| img.pixel(x, img.height - 10) == NAN_COLOUR));
    }

    #[test]
    fn render_png_writes_a_readable_rgb_png() {
        let dir = crate::test_util::TempDir::new("render_png");
        let path = dir.path("k.png");
        let map = Array2::from_shape_fn((40, 60), |(r, c)| (r * c) as f32);
        let (lo, hi) = render_png(
            map.view(),
            Colormap::Turbo,
            Range::Percentile(0.0, 100.0),
            &path,
        )
        .unwrap();
        assert_eq!((lo, hi), (0.0, 39.0 * 59.0));
        let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap()));
        let reader = dec.read_info().unwrap();
        assert_eq!(reader.info().color_type, png::ColorType::Rgb);
        assert!(reader.info().height >= 192, "small maps are enlarged");
        assert!(
            render(
                Array2::<f32>::zeros((0, 3)).view(),
                Colormap::Grey,
                Range::default()
            )
            .is_err()
        );
    }
    #[test]
    fn weighted_render_dims_by_weight_and_blacks_out_nan_and_zero_weight() {
        let mut map = Array2::from_elem((200, 50), 0.5f32);
        map[[5, 5]] = f32::NAN;
        let mut weight = Array2::from_elem((200, 50), 1.0f32);
        weight[[7, 7]] = 0.0;
        weight[[9, 9]] = 0.5;
        let (img, _) = render_weighted(
            map.view(),
            weight.view(),
            Colormap::Viridis,
            Range::Fixed(0.0, 1.0),
        )
        .unwrap();
        let m = 6;
        let full = img.pixel(m + 1, m + 1);
        assert_eq!(
            full,
            palette(Colormap::Viridis)[usize::from(level(0.5, 0.0, 1.0))]
        );
        assert_eq!(img.pixel(m + 5, m + 5), [0, 0, 0]);
        assert_eq!(img.pixel(m + 7, m + 7), [0, 0, 0]);
        let half = img.pixel(m + 9, m + 9);
        for ch in 0..3 {
            assert!((i32::from(half[ch]) - (i32::from(full[ch]) + 1) / 2).abs() <= 1);
        }
        assert!(render_weighted(map.view(), weight.t(), Colormap::Grey, Range::default()).is_err());
    }

    #[test]
    fn figures_without_title_on_a_linear_scale_equal_the_plain_rendering() {
        let map = Array2::from_shape_fn((30, 50), |(r, c)| (r * c) as f32 / 100.0);
        let range = Range::Percentile(1.0, 99.0);
        let (a, la) = render(map.view(), Colormap::Viridis, range).unwrap();
        let (b, lb) =
            render_figure(map.view(), Colormap::Viridis, range, &Figure::default()).unwrap();
        assert_eq!((a, la), (b, lb));
    }

    #[test]
    fn log_figures_have_a_title_and_decade_ticks() {
        let map = Array2::from_shape_fn((64, 64), |(r, _)| 10f32.powf(r as f32 / 16.0 - 2.0));
        let fig = Figure::new("1/tau_c (1/ms)", Scale::Log);
        let (img, (lo, hi)) = render_figure(
            map.view(),
            Colormap::Inferno,
            Range::Percentile(0.0, 100.0),
            &fig,
        )
        .unwrap();
        assert!((lo - 0.01).abs() < 1e-6 && hi > 50.0, "{lo} {hi}");
        let (plain, _) =
            render(map.view(), Colormap::Inferno, Range::Percentile(0.0, 100.0)).unwrap();
        assert!(img.height > plain.height, "the title adds a row");
        let ticks = log_ticks(0.01, 60.0);
        let labels: Vec<&str> = ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0.01", "0.1", "1", "10"]);
        let narrow = log_ticks(2.0, 9.0);
        assert!(narrow.len() >= 3, "{narrow:?}");
        assert!(matches!(
            render_figure(map.view(), Colormap::Grey, Range::Fixed(0.0, 1.0), &fig),
            Err(Error::InvalidParameter { .. })
        ));
        assert_eq!("log".parse::<Scale>().unwrap(), Scale::Log);
        assert!("cubic".parse::<Scale>().is_err());
    }
}
