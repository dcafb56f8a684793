//! Lifetime histograms and the phasor plot, drawn with `imaging_io::draw`.

use crate::error::{Error, Result, invalid};
use imaging_io::draw::{Canvas, GLYPH_HEIGHT, format_tick, nice_ticks, text_width};
use imaging_io::{Colormap, RgbImage};
use ndarray::ArrayView2;
use std::fmt::Write as _;
use std::path::Path;

const WHITE: [u8; 3] = [255, 255, 255];
const BLACK: [u8; 3] = [0, 0, 0];
const GREY: [u8; 3] = [200, 200, 200];

/// A histogram of a map's valid values.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Lower edge of the first bin.
    pub lo: f64,
    /// Upper edge of the last bin.
    pub hi: f64,
    /// Pixels per bin.
    pub pixels: Vec<u64>,
    /// Sum of the pixels' intensities (photons) per bin.
    pub intensity: Vec<f64>,
    /// Valid pixels below `lo` and above `hi`.
    pub outside: (u64, u64),
}

impl Histogram {
    /// Width of one bin.
    pub fn width(&self) -> f64 {
        (self.hi - self.lo) / self.pixels.len() as f64
    }
}

/// Histogram of `map` over `[lo, hi)` in `bins` bins, counting pixels where `mask` is true
/// and the value finite; `intensity` (same shape) adds the intensity-weighted histogram.
pub fn lifetime_histogram(
    map: ArrayView2<'_, f32>,
    mask: ArrayView2<'_, bool>,
    intensity: ArrayView2<'_, f32>,
    lo: f64,
    hi: f64,
    bins: usize,
) -> Result<Histogram> {
    if !(lo.is_finite() && hi.is_finite() && lo < hi) || bins == 0 {
        return Err(invalid(
            "histogram range",
            format!("{lo}..{hi} in {bins} bins"),
            "needs finite lo < hi and at least one bin",
        ));
    }
    if map.dim() != mask.dim() || map.dim() != intensity.dim() {
        return Err(Error::Shape(
            "histogram: map, mask and intensity differ in size".into(),
        ));
    }
    let mut h = Histogram {
        lo,
        hi,
        pixels: vec![0; bins],
        intensity: vec![0.0; bins],
        outside: (0, 0),
    };
    let w = (hi - lo) / bins as f64;
    for ((&v, &m), &i) in map.iter().zip(mask.iter()).zip(intensity.iter()) {
        if !m || !v.is_finite() {
            continue;
        }
        let v = f64::from(v);
        if v < lo {
            h.outside.0 += 1;
        } else if v >= hi {
            h.outside.1 += 1;
        } else {
            let k = (((v - lo) / w) as usize).min(bins - 1);
            h.pixels[k] += 1;
            if i.is_finite() {
                h.intensity[k] += f64::from(i);
            }
        }
    }
    Ok(h)
}

/// Write a histogram as CSV: `lo,hi,pixels,intensity` per bin.
pub fn write_histogram_csv(path: &Path, h: &Histogram) -> Result<()> {
    let mut out = String::from("lo,hi,pixels,intensity\n");
    let w = h.width();
    for (k, (&n, &i)) in h.pixels.iter().zip(&h.intensity).enumerate() {
        let a = h.lo + k as f64 * w;
        let _ = writeln!(out, "{a},{},{n},{i}", a + w);
    }
    std::fs::write(path, out).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })
}

/// Plot area of a figure, in canvas pixels, and the data ranges it shows.
struct Axes {
    left: i64,
    top: i64,
    width: i64,
    height: i64,
    x: (f64, f64),
    y: (f64, f64),
}

impl Axes {
    fn px(&self, x: f64, y: f64) -> (i64, i64) {
        let fx = (x - self.x.0) / (self.x.1 - self.x.0);
        let fy = (y - self.y.0) / (self.y.1 - self.y.0);
        (
            self.left + (fx * (self.width - 1) as f64).round() as i64,
            self.top + self.height - 1 - (fy * (self.height - 1) as f64).round() as i64,
        )
    }

    /// Frame, ticks with labels, and axis titles.
    fn draw(&self, c: &mut Canvas<[u8; 3]>, x_title: &str, y_title: &str) {
        let f = 2;
        c.outline(
            self.left - 1,
            self.top - 1,
            self.width + 2,
            self.height + 2,
            BLACK,
        );
        let (xt, xs) = nice_ticks(self.x.0, self.x.1, 6);
        for t in xt {
            let (px, _) = self.px(t, self.y.0);
            let y = self.top + self.height;
            c.fill_rect(px, y, 1, 2 * f, BLACK);
            let label = format_tick(t, xs);
            c.text(px - text_width(&label, f) / 2, y + 3 * f, &label, f, BLACK);
        }
        let (yt, ys) = nice_ticks(self.y.0, self.y.1, 5);
        for t in yt {
            let (_, py) = self.px(self.x.0, t);
            c.fill_rect(self.left - 2 * f, py, 2 * f, 1, BLACK);
            let label = format_tick(t, ys);
            c.text(
                self.left - 3 * f - text_width(&label, f),
                py - GLYPH_HEIGHT * f / 2,
                &label,
                f,
                BLACK,
            );
        }
        c.text(
            self.left + self.width / 2 - text_width(x_title, f) / 2,
            self.top + self.height + 6 * f + GLYPH_HEIGHT * f,
            x_title,
            f,
            BLACK,
        );
        c.text(
            self.left,
            self.top - GLYPH_HEIGHT * f - 3 * f,
            y_title,
            f,
            BLACK,
        );
    }
}

fn save(c: &Canvas<[u8; 3]>, path: &Path) -> Result<()> {
    Ok(RgbImage::from(c).write_png(path)?)
}

/// Draw a histogram as bars (pixels per bin), the x axis titled `x_title`.
pub fn write_histogram_png(path: &Path, h: &Histogram, x_title: &str) -> Result<()> {
    let (w, ht) = (720usize, 420usize);
    let mut c = Canvas::new(w, ht, WHITE);
    let top = h.pixels.iter().copied().max().unwrap_or(0).max(1) as f64;
    let a = Axes {
        left: 90,
        top: 40,
        width: w as i64 - 120,
        height: ht as i64 - 110,
        x: (h.lo, h.hi),
        y: (0.0, top * 1.05),
    };
    let bw = h.width();
    let fill = Colormap::Viridis.colour(0.35);
    for (k, &n) in h.pixels.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let (x0, y0) = a.px(h.lo + k as f64 * bw, n as f64);
        let (x1, yb) = a.px(h.lo + (k + 1) as f64 * bw, 0.0);
        c.fill_rect(x0, y0, (x1 - x0).max(1), yb - y0 + 1, fill);
    }
    a.draw(&mut c, x_title, "PIXELS");
    save(&c, path)
}

/// Axis ranges of the phasor plot: at least the universal semicircle's (g -0.05..1.05, s
/// 0..0.7), widened to the 0.1st-99.9th percentiles of the points plus a margin, so that an
/// uncalibrated cloud (which may sit above the semicircle) is not cut off; capped at
/// g -1..2, s -0.5..1.5.
fn phasor_axes(
    g: ArrayView2<'_, f32>,
    s: ArrayView2<'_, f32>,
    mask: ArrayView2<'_, bool>,
) -> ((f64, f64), (f64, f64)) {
    let mut gs: Vec<f64> = Vec::new();
    let mut ss: Vec<f64> = Vec::new();
    for ((&gv, &sv), &m) in g.iter().zip(s.iter()).zip(mask.iter()) {
        if m && gv.is_finite() && sv.is_finite() {
            gs.push(f64::from(gv));
            ss.push(f64::from(sv));
        }
    }
    let range = |v: &mut Vec<f64>| -> Option<(f64, f64)> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some((at(0.001), at(0.999)))
    };
    let (mut gx, mut sy) = ((-0.05f64, 1.05f64), (0.0f64, 0.7f64));
    if let (Some((g0, g1)), Some((s0, s1))) = (range(&mut gs), range(&mut ss)) {
        gx = (gx.0.min(g0 - 0.05).max(-1.0), gx.1.max(g1 + 0.05).min(2.0));
        sy = (sy.0.min(s0 - 0.05).max(-0.5), sy.1.max(s1 + 0.05).min(1.5));
    }
    (gx, sy)
}

/// Lifetimes (ns) to mark on the universal semicircle at `omega` (rad/ns): 0.125 ns to 32 ns
/// by doubling, those not crowded at the semicircle's ends or against the previous mark
/// (angles from its centre, `2 atan(omega tau)`): 0.25 to 16 ns at 80 MHz, of which the plot
/// draws those whose labels fit inside it (0.5 to 8 ns with the default axes).
fn lifetime_marks(omega: f64) -> Vec<f64> {
    let mut marks: Vec<f64> = Vec::new();
    let mut last = f64::NEG_INFINITY;
    for k in -3..=5 {
        let tau = 2f64.powi(k);
        let angle = 2.0 * (omega * tau).atan();
        if (0.2..=std::f64::consts::PI - 0.2).contains(&angle) && angle - last >= 0.2 {
            marks.push(tau);
            last = angle;
        }
    }
    marks
}

/// Draw the phasor plot: a 2-D histogram of (g, s) over the valid pixels (colour by
/// log count), the universal semicircle, and marks of single-exponential lifetimes (ns) at
/// the angular frequency `omega` (rad/ns; `lifetime_marks`), captioned with its frequency. Returns the number of pixels plotted. The axes
/// fit the data (`phasor_axes`).
pub fn write_phasor_png(
    path: &Path,
    g: ArrayView2<'_, f32>,
    s: ArrayView2<'_, f32>,
    mask: ArrayView2<'_, bool>,
    omega: f64,
) -> Result<usize> {
    if g.dim() != s.dim() || g.dim() != mask.dim() {
        return Err(Error::Shape(
            "phasor plot: g, s and mask differ in size".into(),
        ));
    }
    let (gx, sy) = phasor_axes(g, s, mask);
    // Equal scales on both axes, so the semicircle stays round.
    let cols = 440usize;
    let rows = ((cols as f64 * (sy.1 - sy.0) / (gx.1 - gx.0)).round() as usize).clamp(200, 660);
    let mut bins = vec![0u32; cols * rows];
    let mut plotted = 0;
    for ((&gv, &sv), &m) in g.iter().zip(s.iter()).zip(mask.iter()) {
        if !m || !gv.is_finite() || !sv.is_finite() {
            continue;
        }
        let fx = (f64::from(gv) - gx.0) / (gx.1 - gx.0);
        let fy = (f64::from(sv) - sy.0) / (sy.1 - sy.0);
        if !(0.0..1.0).contains(&fx) || !(0.0..1.0).contains(&fy) {
            continue;
        }
        let (cx, cy) = ((fx * cols as f64) as usize, (fy * rows as f64) as usize);
        bins[(rows - 1 - cy) * cols + cx] += 1;
        plotted += 1;
    }
    let a = Axes {
        left: 80,
        top: 40,
        width: 2 * cols as i64,
        height: 2 * rows as i64,
        x: gx,
        y: sy,
    };
    let mut c = Canvas::new(a.width as usize + 120, a.height as usize + 110, WHITE);
    // The semicircle's inside, lightly shaded, then the counts on top.
    let top = f64::from(bins.iter().copied().max().unwrap_or(0).max(1));
    for r in 0..rows {
        for col in 0..cols {
            let n = bins[r * cols + col];
            if n == 0 {
                continue;
            }
            let t = (1.0 + f64::from(n)).ln() / (1.0 + top).ln();
            let colour = Colormap::Turbo.colour(0.1 + 0.9 * t);
            c.fill_rect(a.left + 2 * col as i64, a.top + 2 * r as i64, 2, 2, colour);
        }
    }
    // Universal semicircle: (g - 1/2)^2 + s^2 = 1/4.
    let steps = 400;
    let mut last = a.px(0.0, 0.0);
    for k in 1..=steps {
        let th = std::f64::consts::PI * k as f64 / steps as f64;
        let p = a.px(0.5 - 0.5 * th.cos(), 0.5 * th.sin());
        c.line(last, p, 2, BLACK);
        last = p;
    }
    c.line(a.px(gx.0, 0.0), a.px(gx.1, 0.0), 1, GREY);
    if omega.is_finite() && omega > 0.0 {
        let f = 2;
        let h = GLYPH_HEIGHT * f;
        for tau in lifetime_marks(omega) {
            let wt = omega * tau;
            let d = 1.0 + wt * wt;
            let (g0, s0) = (1.0 / d, wt / d);
            let (px, py) = a.px(g0, s0);
            // The label just outside the semicircle, along the radius from its centre; a
            // mark whose label would leave the plot area is not drawn.
            let (ux, uy) = ((g0 - 0.5) / 0.5, s0 / 0.5);
            let (ax, ay) = (
                px + (12.0 * ux).round() as i64,
                py - (12.0 * uy).round() as i64,
            );
            let label = format!("{tau} ns");
            let w = text_width(&label, f);
            let tx = if ux >= 0.0 { ax } else { ax - w };
            let ty = ay - h / 2 - ((h as f64 / 2.0) * uy).round() as i64;
            if tx < a.left + 2 || tx + w > a.left + a.width - 2 || ty < a.top + 2 {
                continue;
            }
            c.fill_rect(px - 3, py - 3, 7, 7, BLACK);
            c.text(tx, ty, &label, f, BLACK);
        }
        let caption = format!(
            "lifetimes at {:.2} MHz",
            omega / (2.0 * std::f64::consts::PI) * 1e3
        );
        c.text(
            a.left + a.width - text_width(&caption, f),
            a.top - h - 3 * f,
            &caption,
            f,
            BLACK,
        );
    }
    a.draw(&mut c, "G", "S");
    save(&c, path)?;
    Ok(plotted)
}

#[cfg(test)]
mod phasor_axes_tests {
    use super::{lifetime_marks, phasor_axes};

    #[test]
    fn lifetime_marks_suit_the_frequency() {
        let omega = |mhz: f64| 2.0 * std::f64::consts::PI * mhz * 1e-3;
        assert_eq!(
            lifetime_marks(omega(80.0)),
            [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
        );
        // At 20 MHz short lifetimes crowd at g = 1 and drop out; longer ones appear.
        assert_eq!(
            lifetime_marks(omega(20.0)),
            [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
        );
    }
    use ndarray::Array2;

    #[test]
    fn axes_cover_the_semicircle_and_widen_to_the_cloud() {
        let mask = Array2::from_elem((4, 4), true);
        let inside = Array2::from_elem((4, 4), 0.3f32);
        let (gx, sy) = phasor_axes(inside.view(), inside.view(), mask.view());
        assert_eq!((gx, sy), ((-0.05, 1.05), (0.0, 0.7)));
        // An uncalibrated cloud above the semicircle (s 0.9) widens s, not beyond the cap.
        let high = Array2::from_elem((4, 4), 0.9f32);
        let (_, sy) = phasor_axes(inside.view(), high.view(), mask.view());
        assert!(sy.1 >= 0.95 - 1e-6 && sy.1 <= 1.5, "{sy:?}");
        let wild = Array2::from_elem((4, 4), 50.0f32);
        let (gx, sy) = phasor_axes(wild.view(), wild.view(), mask.view());
        assert_eq!((gx.1, sy.1), (2.0, 1.5));
        // Masked points do not count.
        let none = Array2::from_elem((4, 4), false);
        assert_eq!(
            phasor_axes(wild.view(), wild.view(), none.view()).1,
            (0.0, 0.7)
        );
    }
}
