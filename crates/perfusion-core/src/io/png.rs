//! PNG pictures for a quick look: a parameter map over the anatomy of one slice, with a
//! colour bar, and a voxel's data with its fitted curve. Numbers are drawn with a 3x5 font.

use crate::error::{Error, Result};
use ndarray::ArrayView2;
use std::path::Path;

/// An RGB picture.
#[derive(Debug, Clone)]
struct Canvas {
    w: usize,
    h: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    fn new(w: usize, h: usize, bg: [u8; 3]) -> Self {
        Canvas {
            w,
            h,
            rgb: bg.iter().copied().cycle().take(w * h * 3).collect(),
        }
    }

    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = (y as usize * self.w + x as usize) * 3;
            self.rgb[i..i + 3].copy_from_slice(&c);
        }
    }

    fn rect(&mut self, x: i64, y: i64, w: i64, h: i64, c: [u8; 3]) {
        for yy in y..y + h {
            for xx in x..x + w {
                self.set(xx, yy, c);
            }
        }
    }

    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: [u8; 3]) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            self.set(x, y, c);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Text in the 3x5 font, `scale` pixels per font pixel.
    fn text(&mut self, x: i64, y: i64, s: &str, scale: i64, c: [u8; 3]) {
        for (k, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..3 {
                    if bits >> (2 - col) & 1 == 1 {
                        self.rect(
                            x + (k as i64 * 4 + col) * scale,
                            y + row as i64 * scale,
                            scale,
                            scale,
                            c,
                        );
                    }
                }
            }
        }
    }

    fn save(&self, path: &Path) -> Result<()> {
        let err = |e: String| Error::File {
            path: path.to_path_buf(),
            why: e,
        };
        let file = std::fs::File::create(path).map_err(|e| err(e.to_string()))?;
        let mut enc =
            png::Encoder::new(std::io::BufWriter::new(file), self.w as u32, self.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(|e| err(e.to_string()))?;
        w.write_image_data(&self.rgb)
            .map_err(|e| err(e.to_string()))
    }
}

/// 3x5 glyphs (rows top to bottom, 3 bits each) for numbers and a few letters.
fn glyph(c: char) -> [u8; 5] {
    match c {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 3, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 2, 2],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        '.' => [0, 0, 0, 0, 2],
        '-' => [0, 0, 7, 0, 0],
        '+' => [0, 2, 7, 2, 0],
        'e' => [0, 7, 7, 4, 7],
        's' => [0, 3, 6, 3, 6],
        't' => [2, 7, 2, 2, 3],
        _ => [0; 5],
    }
}

/// Viridis, from 9 control points.
fn viridis(t: f64) -> [u8; 3] {
    const P: [[f64; 3]; 9] = [
        [68.0, 1.0, 84.0],
        [71.0, 44.0, 122.0],
        [59.0, 81.0, 139.0],
        [44.0, 113.0, 142.0],
        [33.0, 144.0, 141.0],
        [39.0, 173.0, 129.0],
        [92.0, 200.0, 99.0],
        [170.0, 220.0, 50.0],
        [253.0, 231.0, 37.0],
    ];
    let x = t.clamp(0.0, 1.0) * 8.0;
    let i = (x.floor() as usize).min(7);
    let f = x - i as f64;
    std::array::from_fn(|k| (P[i][k] + f * (P[i + 1][k] - P[i][k])).round() as u8)
}

/// A short label for a number.
fn label(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-2..1e4).contains(&a) {
        format!("{v:.1e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Percentiles `lo`, `hi` (0..100) of the finite values.
pub fn percentile_range(values: impl Iterator<Item = f64>, lo: f64, hi: f64) -> Option<(f64, f64)> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((p / 100.0) * (v.len() - 1) as f64).round() as usize];
    Some((at(lo), at(hi)))
}

/// Map `map` (indexed `[x, y]`) in colour over the grey `anatomy` of the same slice, where
/// the map is finite; colour range `range` (default: 1st-99th percentile). Returns the range.
pub fn write_overlay(
    path: &Path,
    anatomy: ArrayView2<f32>,
    map: ArrayView2<f32>,
    range: Option<(f64, f64)>,
) -> Result<(f64, f64)> {
    let (nx, ny) = map.dim();
    if anatomy.dim() != (nx, ny) {
        return Err(Error::ShapeMismatch {
            what: "overlay anatomy and map".into(),
            expected: vec![nx, ny],
            got: anatomy.shape().to_vec(),
        });
    }
    let (lo, hi) = range
        .or_else(|| percentile_range(map.iter().map(|&v| f64::from(v)), 1.0, 99.0))
        .unwrap_or((0.0, 1.0));
    let span = if hi > lo { hi - lo } else { 1.0 };
    let (alo, ahi) =
        percentile_range(anatomy.iter().map(|&v| f64::from(v)), 1.0, 99.0).unwrap_or((0.0, 1.0));
    let aspan = if ahi > alo { ahi - alo } else { 1.0 };
    let scale = (384 / nx.max(ny).max(1)).max(1);
    let (w, h) = (nx * scale, ny * scale);
    let bar = 70;
    let mut c = Canvas::new(w + bar, h.max(120), [0, 0, 0]);
    for y in 0..ny {
        for x in 0..nx {
            let m = f64::from(map[[x, y]]);
            let col = if m.is_finite() {
                viridis((m - lo) / span)
            } else {
                let g = ((f64::from(anatomy[[x, y]]) - alo) / aspan).clamp(0.0, 1.0);
                let g = if g.is_finite() { (g * 255.0) as u8 } else { 0 };
                [g, g, g]
            };
            // Rows from the top: y grows upwards in the image.
            c.rect(
                (x * scale) as i64,
                ((ny - 1 - y) * scale) as i64,
                scale as i64,
                scale as i64,
                col,
            );
        }
    }
    let (bx, top, bh) = (w as i64 + 8, 12i64, (h.max(120) - 24) as i64);
    for k in 0..bh {
        let t = 1.0 - k as f64 / (bh - 1).max(1) as f64;
        c.rect(bx, top + k, 14, 1, viridis(t));
    }
    c.text(bx + 18, top, &label(hi), 2, [255, 255, 255]);
    c.text(bx + 18, top + bh - 10, &label(lo), 2, [255, 255, 255]);
    c.save(path)?;
    Ok((lo, hi))
}

/// A voxel's data (dots) and fitted curve (line) against time.
pub fn write_curve_plot(path: &Path, times: &[f64], data: &[f64], fit: &[f64]) -> Result<()> {
    if times.is_empty() || data.len() != times.len() || fit.len() != times.len() {
        return Err(Error::File {
            path: path.to_path_buf(),
            why: format!(
                "cannot plot {} data and {} fitted values against {} times; give one of each per time",
                data.len(),
                fit.len(),
                times.len()
            ),
        });
    }
    let (w, h) = (640i64, 400i64);
    let (l, r, t, b) = (70i64, 20i64, 20i64, 40i64);
    let mut c = Canvas::new(w as usize, h as usize, [255, 255, 255]);
    let finite = data.iter().chain(fit).copied().filter(|v| v.is_finite());
    let (ymin, ymax) = finite.fold((0.0f64, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let ymax = if ymax > ymin { ymax } else { ymin + 1.0 };
    let (t0, t1) = (times[0], times[times.len() - 1]);
    let px = |tt: f64| l + ((tt - t0) / (t1 - t0).max(1e-12) * (w - l - r) as f64).round() as i64;
    let py = |v: f64| h - b - ((v - ymin) / (ymax - ymin) * (h - t - b) as f64).round() as i64;
    let axis = [0, 0, 0];
    c.line((l, t), (l, h - b), axis);
    c.line((l, h - b), (w - r, h - b), axis);
    c.text(4, t, &label(ymax), 2, axis);
    c.text(4, h - b - 10, &label(ymin), 2, axis);
    c.text(l, h - b + 8, &label(t0), 2, axis);
    let end = format!("{} s", label(t1));
    c.text(w - r - 8 * end.len() as i64, h - b + 8, &end, 2, axis);
    for win in fit.windows(2).zip(times.windows(2)) {
        let (f, tt) = win;
        if f[0].is_finite() && f[1].is_finite() {
            c.line((px(tt[0]), py(f[0])), (px(tt[1]), py(f[1])), [200, 30, 30]);
        }
    }
    for (&tt, &v) in times.iter().zip(data) {
        if v.is_finite() {
            c.rect(px(tt) - 2, py(v) - 2, 5, 5, [30, 60, 200]);
        }
    }
    c.save(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    #[test]
    fn overlay_and_plot_are_written_and_readable() {
        let dir = std::env::temp_dir().join(format!("perfusion-png-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let anat = Array2::from_shape_fn((20, 16), |(x, y)| (x + y) as f32);
        let map = Array2::from_shape_fn(
            (20, 16),
            |(x, y)| if x > 5 && y > 4 { x as f32 } else { f32::NAN },
        );
        let (lo, hi) = write_overlay(&dir.join("o.png"), anat.view(), map.view(), None).unwrap();
        assert!(lo >= 6.0 && hi <= 19.0 && lo < hi);
        let t: Vec<f64> = (0..30).map(f64::from).collect();
        let d: Vec<f64> = t.iter().map(|x| (x / 5.0).sin()).collect();
        write_curve_plot(&dir.join("p.png"), &t, &d, &d).unwrap();
        for f in ["o.png", "p.png"] {
            let dec = png::Decoder::new(std::io::BufReader::new(
                std::fs::File::open(dir.join(f)).unwrap(),
            ));
            let info = dec.read_info().unwrap().info().clone();
            assert!(info.width > 100 && info.height > 100);
        }
        let bad = Array2::<f32>::zeros((3, 3));
        assert!(write_overlay(&dir.join("x.png"), bad.view(), map.view(), None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
