//! ROI files: masks read from images, time-course tables written as CSV and PNG plots.

use std::path::Path;

use crate::error::{Error, Result};
use crate::io::output::RgbImage;
use crate::io::output::draw::{Canvas, GLYPH_HEIGHT, format_tick, nice_ticks, text_width};
use crate::io::{LoadOptions, load_frame};
use crate::model::roi::{Roi, Table};

impl Roi {
    /// A mask from an image file (TIFF, PNG, raw): non-zero finite pixels are inside.
    pub fn mask_from_file(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        let frame = load_frame(path, opts)?;
        Ok(Roi::Mask(frame.mapv(|v| v.is_finite() && v != 0.0)))
    }
}

impl Table {
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
    use crate::cpu::roi::time_course;
    use crate::io::test_util::TempDir;
    use ndarray::Array3;

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
}
