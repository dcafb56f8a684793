//! Regions of interest and their time courses: mean K (or SFI, tau_c...) per ROI per frame,
//! written as CSV and as a PNG line plot.
//!
//! Coordinates are in pixels, `x` = column and `y` = row, both from 0 at the top-left pixel;
//! pixel centres sit at integer coordinates.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use ndarray::{Array2, ArrayView3, Axis};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::io::{LoadOptions, load_frame};
use crate::output::RgbImage;
use crate::output::draw::{Canvas, GLYPH_HEIGHT, format_tick, nice_ticks, text_width};

/// A region of interest.
#[derive(Debug, Clone, PartialEq)]
pub enum Roi {
    /// Rectangle of `w x h` pixels whose top-left pixel is column `x`, row `y`.
    Rect {
        x: usize,
        y: usize,
        w: usize,
        h: usize,
    },
    /// The pixels whose centres lie within `r` pixels of (`cx`, `cy`) = (column, row).
    Circle { cx: f64, cy: f64, r: f64 },
    /// Any pixel set, `true` inside; it must have the shape of the maps.
    Mask(Array2<bool>),
}

impl Roi {
    /// A rectangle; see [`Roi::Rect`].
    pub fn rect(x: usize, y: usize, w: usize, h: usize) -> Self {
        Roi::Rect { x, y, w, h }
    }

    /// A disc; see [`Roi::Circle`].
    pub fn circle(cx: f64, cy: f64, r: f64) -> Self {
        Roi::Circle { cx, cy, r }
    }

    /// A mask from an image file (TIFF, PNG, raw): non-zero finite pixels are inside.
    pub fn mask_from_file(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        let frame = load_frame(path, opts)?;
        Ok(Roi::Mask(frame.mapv(|v| v.is_finite() && v != 0.0)))
    }

    /// Flat (row-major) indices of the ROI's pixels in a `height x width` map, or an error
    /// when the ROI leaves the map or holds no pixel.
    pub fn pixels(&self, height: usize, width: usize) -> Result<Vec<usize>> {
        let fail = |why: String| Error::InvalidParameter {
            name: "roi",
            value: self.to_string(),
            why,
        };
        let image = format!(
            "the maps are {width}x{height} (columns 0..={}, rows 0..={})",
            width.saturating_sub(1),
            height.saturating_sub(1)
        );
        let pixels: Vec<usize> = match self {
            Roi::Rect { x, y, w, h } => {
                if *w == 0 || *h == 0 {
                    return Err(fail("width and height must be at least 1 pixel".into()));
                }
                if x + w > width || y + h > height {
                    return Err(fail(format!(
                        "reaches column {} and row {}, outside the image: {image}",
                        x + w - 1,
                        y + h - 1
                    )));
                }
                (*y..y + h)
                    .flat_map(|r| (*x..x + w).map(move |c| r * width + c))
                    .collect()
            }
            Roi::Circle { cx, cy, r } => {
                if !(cx.is_finite() && cy.is_finite() && r.is_finite() && *r > 0.0) {
                    return Err(fail("centre and radius must be finite, radius > 0".into()));
                }
                let (w, h) = (width as f64, height as f64);
                if cx - r < -0.5 || cy - r < -0.5 || cx + r > w - 0.5 || cy + r > h - 0.5 {
                    return Err(fail(format!("extends outside the image: {image}")));
                }
                let rows =
                    (cy - r).ceil().max(0.0) as usize..=((cy + r).floor() as usize).min(height - 1);
                rows.flat_map(|row| {
                    let dy = row as f64 - cy;
                    let cols = (cx - r).ceil().max(0.0) as usize
                        ..=((cx + r).floor() as usize).min(width - 1);
                    cols.filter(move |&col| (col as f64 - cx).powi(2) + dy * dy <= r * r)
                        .map(move |col| row * width + col)
                })
                .collect()
            }
            Roi::Mask(m) => {
                if m.dim() != (height, width) {
                    let (mh, mw) = m.dim();
                    return Err(fail(format!("the mask is {mw}x{mh} but {image}")));
                }
                m.iter()
                    .enumerate()
                    .filter(|&(_, &inside)| inside)
                    .map(|(i, _)| i)
                    .collect()
            }
        };
        if pixels.is_empty() {
            return Err(fail("contains no pixel centre".into()));
        }
        Ok(pixels)
    }
}

impl fmt::Display for Roi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Roi::Rect { x, y, w, h } => write!(f, "{x},{y},{w},{h}"),
            Roi::Circle { cx, cy, r } => write!(f, "circle:{cx},{cy},{r}"),
            Roi::Mask(m) => write!(f, "mask of {} pixels", m.iter().filter(|&&b| b).count()),
        }
    }
}

impl FromStr for Roi {
    type Err = Error;
    /// `"x,y,w,h"` or `"rect:x,y,w,h"` for a rectangle, `"circle:cx,cy,r"` for a disc.
    ///
    /// ```
    /// use speckle_core::roi::Roi;
    /// assert_eq!("10,20,32,32".parse::<Roi>().unwrap(), Roi::rect(10, 20, 32, 32));
    /// assert_eq!("circle:40,50.5,8".parse::<Roi>().unwrap(), Roi::circle(40.0, 50.5, 8.0));
    /// assert!("10,20,32".parse::<Roi>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::InvalidParameter {
            name: "roi",
            value: s.to_string(),
            why: format!("{why}; expected x,y,w,h (e.g. 10,20,32,32) or circle:cx,cy,r"),
        };
        let (kind, rest) = match s.trim().split_once(':') {
            Some((k, r)) => (k.trim().to_ascii_lowercase(), r),
            None => ("rect".to_string(), s),
        };
        let parts: Vec<&str> = rest.split(',').map(str::trim).collect();
        match kind.as_str() {
            "rect" => {
                let v: Vec<usize> = parts
                    .iter()
                    .map(|p| p.parse::<usize>())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| bad("rectangle values must be non-negative whole numbers"))?;
                let [x, y, w, h] = v[..] else {
                    return Err(bad("a rectangle needs 4 numbers"));
                };
                Ok(Roi::rect(x, y, w, h))
            }
            "circle" => {
                let v: Vec<f64> = parts
                    .iter()
                    .map(|p| p.parse::<f64>())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| bad("circle values must be numbers"))?;
                let [cx, cy, r] = v[..] else {
                    return Err(bad("a circle needs 3 numbers"));
                };
                Ok(Roi::circle(cx, cy, r))
            }
            _ => Err(bad("unknown ROI kind")),
        }
    }
}

/// Mean value per ROI per frame, with the number of finite pixels behind each mean.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    names: Vec<String>,
    frames: usize,
    /// Frame-major: entry `frame * rois + roi`.
    mean: Vec<f64>,
    valid: Vec<usize>,
    size: Vec<usize>,
}

/// Mean of each ROI in each frame of `stack` (frame, row, column).
///
/// Non-finite pixels (NaN where K is undefined, infinities) are left out of the mean and
/// counted out of `valid_pixels`; a frame with no finite pixel in a ROI has mean NaN. ROIs
/// are named `roi1`, `roi2`, ... ([`Table::with_names`] renames them).
///
/// ```
/// use ndarray::Array3;
/// use speckle_core::roi::{Roi, time_course};
/// let k = Array3::from_shape_fn((3, 8, 8), |(f, _, _)| 0.1 * f as f32);
/// let t = time_course(k.view(), &[Roi::rect(0, 0, 4, 4)]).unwrap();
/// assert!((t.mean(2, 0) - 0.2).abs() < 1e-6);
/// assert_eq!(t.valid_pixels(2, 0), 16);
/// ```
#[allow(clippy::needless_pass_by_value)] // views are passed by value throughout the crate
pub fn time_course(stack: ArrayView3<'_, f32>, rois: &[Roi]) -> Result<Table> {
    let (n, h, w) = stack.dim();
    if rois.is_empty() {
        return Err(Error::InvalidParameter {
            name: "rois",
            value: "none".into(),
            why: "give at least one ROI".into(),
        });
    }
    if n == 0 {
        return Err(Error::InvalidParameter {
            name: "stack",
            value: "0 frames".into(),
            why: "no frame to measure".into(),
        });
    }
    let pixels: Vec<Vec<usize>> = rois.iter().map(|r| r.pixels(h, w)).collect::<Result<_>>()?;
    let stack = stack.as_standard_layout();
    let per_frame: Vec<Vec<(f64, usize)>> = stack
        .axis_iter(Axis(0))
        .into_par_iter()
        .map(|frame| {
            let data = frame.to_slice().expect("standard layout");
            pixels
                .iter()
                .map(|idx| {
                    let (sum, count) = idx
                        .iter()
                        .map(|&i| data[i])
                        .filter(|v| v.is_finite())
                        .fold((0.0f64, 0usize), |(s, c), v| (s + f64::from(v), c + 1));
                    (
                        if count == 0 {
                            f64::NAN
                        } else {
                            sum / count as f64
                        },
                        count,
                    )
                })
                .collect()
        })
        .collect();
    let (mean, valid) = per_frame.into_iter().flatten().unzip();
    Ok(Table {
        names: (1..=rois.len()).map(|i| format!("roi{i}")).collect(),
        frames: n,
        mean,
        valid,
        size: pixels.iter().map(Vec::len).collect(),
    })
}

impl Table {
    /// Rename the ROIs (one non-empty name each), e.g. after anatomy.
    pub fn with_names(mut self, names: Vec<String>) -> Result<Self> {
        if names.len() != self.names.len() || names.iter().any(|n| n.trim().is_empty()) {
            return Err(Error::InvalidParameter {
                name: "roi names",
                value: names.join(","),
                why: format!("need {} non-empty names, one per ROI", self.names.len()),
            });
        }
        self.names = names;
        Ok(self)
    }

    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// ROI names in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Mean of the finite pixels of ROI `roi` in frame `frame` (NaN if none).
    pub fn mean(&self, frame: usize, roi: usize) -> f64 {
        self.mean[frame * self.names.len() + roi]
    }

    /// Number of finite pixels behind [`Table::mean`].
    pub fn valid_pixels(&self, frame: usize, roi: usize) -> usize {
        self.valid[frame * self.names.len() + roi]
    }

    /// Number of pixels in ROI `roi`.
    pub fn roi_pixels(&self, roi: usize) -> usize {
        self.size[roi]
    }

    /// The time course of one ROI.
    pub fn series(&self, roi: usize) -> Vec<f64> {
        (0..self.frames).map(|f| self.mean(f, roi)).collect()
    }

    /// Write long-format CSV, one row per frame and ROI: `frame,roi,mean,valid_pixels`
    /// (frame from 0; mean in shortest round-trip form, `NaN` when no pixel was valid).
    pub fn write_csv(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let csv_err = |e: csv::Error| match e.into_kind() {
            csv::ErrorKind::Io(source) => Error::Io {
                path: path.to_path_buf(),
                source,
            },
            other => Error::Format {
                path: path.to_path_buf(),
                why: format!("cannot write CSV: {other:?}"),
            },
        };
        let mut w = csv::Writer::from_path(path).map_err(csv_err)?;
        w.write_record(["frame", "roi", "mean", "valid_pixels"])
            .map_err(csv_err)?;
        for f in 0..self.frames {
            for (r, name) in self.names.iter().enumerate() {
                let m = self.mean(f, r);
                let mean = if m.is_nan() {
                    "NaN".to_string()
                } else {
                    m.to_string()
                };
                w.write_record([
                    f.to_string(),
                    name.clone(),
                    mean,
                    self.valid_pixels(f, r).to_string(),
                ])
                .map_err(csv_err)?;
            }
        }
        w.flush().map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Draw the time courses: frame on x, mean on y (`y_label`, e.g. "K"), one colour per
    /// ROI with a legend; gaps where a mean is NaN.
    pub fn plot(&self, y_label: &str) -> RgbImage {
        plot(self, y_label)
    }

    /// Write [`Table::plot`] as a PNG.
    pub fn write_plot_png(&self, path: impl AsRef<Path>, y_label: &str) -> Result<()> {
        Ok(self.plot(y_label).write_png(path)?)
    }
}

/// Colours for successive ROIs (matplotlib's tab10), repeated after ten.
const SERIES_COLOURS: [[u8; 3]; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

fn plot(t: &Table, y_label: &str) -> RgbImage {
    const W: i64 = 960;
    const H: i64 = 540;
    const F: i64 = 2; // font scale
    let (black, grid, white) = ([0u8, 0, 0], [225u8, 225, 225], [255u8, 255, 255]);
    let finite: Vec<f64> = t.mean.iter().copied().filter(|v| v.is_finite()).collect();
    let (mut lo, mut hi) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    if finite.is_empty() {
        (lo, hi) = (0.0, 1.0);
    } else if hi <= lo {
        let pad = if lo == 0.0 { 0.5 } else { lo.abs() * 0.1 };
        (lo, hi) = (lo - pad, hi + pad);
    } else {
        let pad = (hi - lo) * 0.05;
        (lo, hi) = (lo - pad, hi + pad);
    }
    let (xlo, xhi) = if t.frames > 1 {
        (0.0, (t.frames - 1) as f64)
    } else {
        (-0.5, 0.5)
    };
    let (yt, ystep) = nice_ticks(lo, hi, 6);
    let ylabels: Vec<String> = yt.iter().map(|&v| format_tick(v, ystep)).collect();
    let (xt, xstep) = nice_ticks(xlo, xhi, 8);
    let xt: Vec<f64> = xt
        .into_iter()
        .filter(|v| v.fract() == 0.0 && *v >= 0.0)
        .collect();
    let left = 12 * F + ylabels.iter().map(|l| text_width(l, F)).max().unwrap_or(0);
    let legend_w = 24 * F + t.names.iter().map(|n| text_width(n, F)).max().unwrap_or(0);
    let (x0, x1, y0, y1) = (left, W - legend_w - 8 * F, 16 * F, H - 26 * F);
    let px = |x: f64| x0 + ((x - xlo) / (xhi - xlo) * (x1 - x0) as f64).round() as i64;
    let py = |y: f64| y1 - ((y - lo) / (hi - lo) * (y1 - y0) as f64).round() as i64;
    let mut c = Canvas::new(W as usize, H as usize, white);
    for (v, label) in yt.iter().zip(&ylabels) {
        let y = py(*v);
        c.fill_rect(x0, y, x1 - x0, 1, grid);
        c.fill_rect(x0 - 3 * F, y, 3 * F, 1, black);
        c.text(
            x0 - 5 * F - text_width(label, F),
            y - GLYPH_HEIGHT * F / 2,
            label,
            F,
            black,
        );
    }
    for v in &xt {
        let x = px(*v);
        c.fill_rect(x, y0, 1, y1 - y0, grid);
        c.fill_rect(x, y1, 1, 3 * F, black);
        let label = format_tick(*v, xstep.max(1.0));
        c.text(x - text_width(&label, F) / 2, y1 + 5 * F, &label, F, black);
    }
    c.outline(x0, y0, x1 - x0 + 1, y1 - y0 + 1, black);
    c.text(
        i64::midpoint(x0, x1) - text_width("FRAME", F) / 2,
        y1 + 15 * F,
        "FRAME",
        F,
        black,
    );
    c.text(x0, y0 - 11 * F, y_label, F, black);
    let markers = t.frames <= 60;
    for r in 0..t.names.len() {
        let colour = SERIES_COLOURS[r % SERIES_COLOURS.len()];
        let pts: Vec<Option<(i64, i64)>> = (0..t.frames)
            .map(|f| {
                let m = t.mean(f, r);
                m.is_finite()
                    .then(|| (px(if t.frames > 1 { f as f64 } else { 0.0 }), py(m)))
            })
            .collect();
        for pair in pts.windows(2) {
            if let [Some(a), Some(b)] = pair {
                c.line(*a, *b, F, colour);
            }
        }
        for p in pts.iter().flatten() {
            if markers || t.frames == 1 {
                c.fill_rect(p.0 - 2 * F, p.1 - 2 * F, 4 * F + 1, 4 * F + 1, colour);
            }
        }
        let ly = y0 + r as i64 * 12 * F;
        c.fill_rect(x1 + 8 * F, ly, 8 * F, 7 * F, colour);
        c.text(x1 + 20 * F, ly, &t.names[r], F, black);
    }
    RgbImage::from(&c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_util::TempDir;
    use ndarray::Array3;

    #[test]
    fn rect_circle_and_mask_select_the_right_pixels() {
        assert_eq!(Roi::rect(1, 2, 2, 1).pixels(4, 5).unwrap(), vec![11, 12]);
        let disc = Roi::circle(2.0, 2.0, 1.0).pixels(5, 5).unwrap();
        assert_eq!(disc, vec![7, 11, 12, 13, 17]);
        let mut m = Array2::from_elem((3, 3), false);
        m[[2, 1]] = true;
        assert_eq!(Roi::Mask(m).pixels(3, 3).unwrap(), vec![7]);
    }

    #[test]
    fn roi_outside_the_image_is_a_clear_error() {
        let err = Roi::rect(30, 0, 16, 8)
            .pixels(40, 40)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("30,0,16,8") && err.contains("column 45") && err.contains("40x40"),
            "{err}"
        );
        assert!(Roi::circle(3.0, 3.0, 5.0).pixels(40, 40).is_err());
        assert!(
            Roi::Mask(Array2::from_elem((3, 4), true))
                .pixels(4, 3)
                .is_err()
        );
        assert!(
            Roi::Mask(Array2::from_elem((3, 3), false))
                .pixels(3, 3)
                .is_err()
        );
        assert!(Roi::rect(0, 0, 0, 3).pixels(4, 4).is_err());
        assert!(
            Roi::circle(2.0, 2.0, 0.2).pixels(5, 5).is_ok(),
            "one pixel centre inside"
        );
        assert!(
            Roi::circle(2.5, 2.5, 0.2).pixels(5, 5).is_err(),
            "no pixel centre inside"
        );
    }

    #[test]
    fn parse_rejects_malformed_rois() {
        for bad in [
            "1,2,3",
            "a,b,c,d",
            "-1,2,3,4",
            "circle:1,2",
            "square:1,2,3",
            "",
        ] {
            assert!(bad.parse::<Roi>().is_err(), "{bad}");
        }
        assert_eq!(
            "rect: 1, 2, 3, 4".parse::<Roi>().unwrap(),
            Roi::rect(1, 2, 3, 4)
        );
    }

    #[test]
    fn time_course_ignores_nan_and_counts_valid_pixels() {
        let mut k = Array3::from_shape_fn((3, 4, 4), |(f, r, c)| (f * 100 + r * 4 + c) as f32);
        k[[1, 0, 0]] = f32::NAN;
        k[[2, 0, 0]] = f32::INFINITY;
        for r in 0..2 {
            for c in 0..2 {
                k[[0, 2 + r, 2 + c]] = f32::NAN;
            }
        }
        let rois = [Roi::rect(0, 0, 2, 2), Roi::rect(2, 2, 2, 2)];
        let t = time_course(k.view(), &rois).unwrap();
        assert_eq!(t.frames(), 3);
        assert_eq!(t.mean(0, 0), (0.0 + 1.0 + 4.0 + 5.0) / 4.0);
        assert_eq!(t.mean(1, 0), (101.0 + 104.0 + 105.0) / 3.0);
        assert_eq!(t.valid_pixels(1, 0), 3);
        assert_eq!(t.valid_pixels(2, 0), 3);
        assert!(t.mean(0, 1).is_nan());
        assert_eq!(t.valid_pixels(0, 1), 0);
        assert_eq!(t.roi_pixels(1), 4);
    }

    #[test]
    fn csv_is_long_format_with_nan() {
        let dir = TempDir::new("roi_csv");
        let k = Array3::from_shape_fn(
            (2, 3, 3),
            |(f, _, c)| if c == 0 { f32::NAN } else { f as f32 + 0.5 },
        );
        let t = time_course(k.view(), &[Roi::rect(0, 0, 1, 3), Roi::rect(1, 0, 2, 2)])
            .unwrap()
            .with_names(vec!["vessel".into(), "tissue".into()])
            .unwrap();
        let path = dir.path("tc.csv");
        t.write_csv(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "frame,roi,mean,valid_pixels\n0,vessel,NaN,0\n0,tissue,0.5,4\n1,vessel,NaN,0\n1,tissue,1.5,4\n"
        );
        assert!(t.clone().with_names(vec!["one".into()]).is_err());
    }

    #[test]
    fn plot_draws_each_roi_in_its_colour() {
        let dir = TempDir::new("roi_plot");
        let k = Array3::from_shape_fn(
            (20, 8, 8),
            |(f, _, c)| if c < 4 { 0.1 + f as f32 * 0.01 } else { 0.3 },
        );
        let t = time_course(k.view(), &[Roi::rect(0, 0, 4, 8), Roi::rect(4, 0, 4, 8)]).unwrap();
        let img = t.plot("K");
        assert_eq!((img.width, img.height), (960, 540));
        for colour in &SERIES_COLOURS[..2] {
            let n = (0..img.height)
                .flat_map(|y| (0..img.width).map(move |x| (x, y)))
                .filter(|&(x, y)| img.pixel(x, y) == *colour)
                .count();
            assert!(n > 500, "colour {colour:?} drawn on {n} pixels");
        }
        let path = dir.path("tc.png");
        t.write_plot_png(&path, "K").unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 1000);
    }

    #[test]
    fn roi_outside_fails_time_course() {
        let k = Array3::<f32>::zeros((2, 10, 10));
        let err =
            time_course(k.view(), &[Roi::rect(0, 0, 2, 2), Roi::rect(8, 8, 4, 4)]).unwrap_err();
        assert!(err.to_string().contains("8,8,4,4"), "{err}");
    }
}
