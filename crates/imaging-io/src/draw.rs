//! Minimal raster drawing for colour bars and plots: a pixel canvas, clipped lines and
//! rectangles, a built-in 5x7 bitmap font (digits, A-Z, a-z and a little punctuation; no
//! font files), and "nice" axis ticks with compact labels.

/// A row-major image of pixels `P` (a palette index or an RGB triple).
#[derive(Debug, Clone)]
pub struct Canvas<P> {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Row-major pixels.
    pub pixels: Vec<P>,
}

impl<P: Copy> Canvas<P> {
    /// A canvas filled with `background`.
    pub fn new(width: usize, height: usize, background: P) -> Self {
        Self {
            width,
            height,
            pixels: vec![background; width * height],
        }
    }

    /// The pixel at column `x`, row `y`.
    pub fn get(&self, x: usize, y: usize) -> P {
        self.pixels[y * self.width + x]
    }

    /// Fill the rectangle with top-left corner (x, y), clipped to the canvas.
    pub fn fill_rect(&mut self, x: i64, y: i64, w: i64, h: i64, p: P) {
        let (x0, x1) = (x.max(0), (x + w).min(self.width as i64));
        let (y0, y1) = (y.max(0), (y + h).min(self.height as i64));
        for yy in y0..y1 {
            for xx in x0..x1 {
                self.pixels[yy as usize * self.width + xx as usize] = p;
            }
        }
    }

    /// One-pixel outline of a rectangle.
    pub fn outline(&mut self, x: i64, y: i64, w: i64, h: i64, p: P) {
        self.fill_rect(x, y, w, 1, p);
        self.fill_rect(x, y + h - 1, w, 1, p);
        self.fill_rect(x, y, 1, h, p);
        self.fill_rect(x + w - 1, y, 1, h, p);
    }

    /// A line `thickness` pixels wide (Bresenham, square pen).
    pub fn line(&mut self, from: (i64, i64), to: (i64, i64), thickness: i64, p: P) {
        let (mut x, mut y) = from;
        let (dx, dy) = ((to.0 - x).abs(), -(to.1 - y).abs());
        let (sx, sy) = (if x < to.0 { 1 } else { -1 }, if y < to.1 { 1 } else { -1 });
        let mut err = dx + dy;
        let off = (thickness - 1) / 2;
        loop {
            self.fill_rect(x - off, y - off, thickness, thickness, p);
            if (x, y) == to {
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

    /// Draw `text` with its top-left corner at (x, y), each font pixel `scale` wide, in the
    /// case given (units such as ns and ms keep their lower case).
    pub fn text(&mut self, x: i64, y: i64, text: &str, scale: i64, p: P) {
        for (i, c) in text.chars().enumerate() {
            let gx = x + i as i64 * GLYPH_ADVANCE * scale;
            for (row, bits) in glyph(c).iter().enumerate() {
                for col in 0..5 {
                    if bits & (0b10000 >> col) != 0 {
                        self.fill_rect(gx + col * scale, y + row as i64 * scale, scale, scale, p);
                    }
                }
            }
        }
    }
}

/// Horizontal advance of one character, in font pixels.
pub const GLYPH_ADVANCE: i64 = 6;
/// Height of a character, in font pixels.
pub const GLYPH_HEIGHT: i64 = 7;

/// Width of `text` in canvas pixels at `scale` (no trailing gap).
pub fn text_width(text: &str, scale: i64) -> i64 {
    let n = text.chars().count() as i64;
    if n == 0 {
        0
    } else {
        (n * GLYPH_ADVANCE - 1) * scale
    }
}

/// The 5x7 bitmap of `c`: seven rows, the low five bits of each, leftmost pixel in bit 4.
/// Unknown characters are drawn as `?`.
fn glyph(c: char) -> [u8; 7] {
    match c {
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        '.' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C],
        '-' => [0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00],
        '+' => [0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00],
        'e' => [0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E],
        ' ' => [0; 7],
        ':' => [0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00],
        '/' => [0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '_' => [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F],
        ',' => [0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08],
        '=' => [0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '^' => [0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00],
        'A' => [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E],
        'D' => [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        'a' => [0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F],
        'b' => [0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E],
        'c' => [0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E],
        'd' => [0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F],
        'f' => [0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08],
        'g' => [0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E],
        'h' => [0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11],
        'i' => [0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E],
        'j' => [0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C],
        'k' => [0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12],
        'l' => [0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'm' => [0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11],
        'n' => [0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11],
        'o' => [0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E],
        'p' => [0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10],
        'q' => [0x00, 0x00, 0x0D, 0x13, 0x0F, 0x01, 0x01],
        'r' => [0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10],
        's' => [0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E],
        't' => [0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06],
        'u' => [0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D],
        'v' => [0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'w' => [0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A],
        'x' => [0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11],
        'y' => [0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E],
        'z' => [0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F],
        _ => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04],
    }
}

/// Round `x > 0` up to 1, 2 or 5 times a power of ten (values within 1e-6 above a nice
/// number, such as 0.2 computed from f32 limits, round down to it).
fn nice_number(x: f64) -> f64 {
    let exp = x.log10().floor();
    let base = 10f64.powf(exp);
    let f = x / base * (1.0 - 1e-6);
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * base
}

/// Round ticks (multiples of a 1-2-5 step) inside `[lo, hi]`, about `target` of them,
/// and the step. Falls back to the two end points when the range holds fewer than two.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return (vec![lo], 1.0);
    }
    let step = nice_number(span / target.max(2).saturating_sub(1) as f64);
    let first = (lo / step - 1e-9).ceil();
    let last = (hi / step + 1e-9).floor();
    let mut ticks: Vec<f64> = (0..=((last - first).max(-1.0) as i64))
        .map(|i| {
            let v = (first + i as f64) * step;
            if v.abs() < step * 1e-9 { 0.0 } else { v }
        })
        .collect();
    if ticks.len() < 2 {
        ticks = vec![lo, hi];
        return (ticks, span);
    }
    (ticks, step)
}

/// A compact label for a tick value on an axis with spacing `step`: fixed-point with just
/// enough decimals, or `1.5e-5` style for very small or large magnitudes.
pub fn format_tick(v: f64, step: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let mag = v.abs().max(step.abs());
    if !(1e-3..1e5).contains(&mag) {
        // Significant digits needed to tell neighbouring ticks apart.
        let digits =
            ((v.abs().log10().floor() - step.abs().log10().floor()).max(0.0) as usize).min(6);
        return format!("{v:.digits$e}");
    }
    let decimals = (-(step.abs().log10().floor())).max(0.0) as usize;
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_inside_the_range() {
        let (t, step) = nice_ticks(0.013, 0.487, 6);
        assert_eq!(step, 0.1);
        assert_eq!(t.len(), 4);
        assert!((t[0] - 0.1).abs() < 1e-12 && (t[3] - 0.4).abs() < 1e-12);
        let (t, step) = nice_ticks(-3.0, 7.0, 6);
        assert_eq!(step, 2.0);
        assert_eq!(t, vec![-2.0, 0.0, 2.0, 4.0, 6.0]);
        let (t, _) = nice_ticks(1.0, 1.0, 5);
        assert_eq!(t, vec![1.0]);
        // f32 limits such as 0.6 (0.60000002 in f64) still give the 0.2 step.
        let (t, step) = nice_ticks(0.0, f64::from(0.6f32), 4);
        assert_eq!((t.len(), step), (4, 0.2));
    }

    #[test]
    fn tick_labels_use_only_font_characters() {
        assert_eq!(format_tick(0.25, 0.05), "0.25");
        assert_eq!(format_tick(0.2, 0.1), "0.2");
        assert_eq!(format_tick(1500.0, 500.0), "1500");
        assert_eq!(format_tick(0.0, 0.1), "0");
        assert_eq!(format_tick(2e-5, 1e-5), "2e-5");
        assert_eq!(format_tick(1.5e-5, 5e-6), "1.5e-5");
        assert_eq!(format_tick(-3e6, 1e6), "-3e6");
        for s in ["0.25", "2e-5", "-3e6"] {
            assert!(s.chars().all(|c| c.is_ascii_digit() || ".-e".contains(c)));
        }
    }

    #[test]
    fn text_draws_known_glyph_pixels() {
        let mut c = Canvas::new(12, 7, 0u8);
        c.text(0, 0, "1-", 1, 1);
        // '1' has its stem in column 2 on every row but the last, which spans columns 1..=3.
        assert!((0..6).all(|y| c.get(2, y) == 1));
        assert_eq!(c.get(0, 0), 0);
        // '-' is the middle row of the second glyph, columns 6..=10.
        assert!((6..11).all(|x| c.get(x, 3) == 1));
        assert_eq!(c.get(6, 2), 0);
        assert_eq!(text_width("1-", 1), 11);
        // Text keeps its case: `ns` is not drawn as `NS`.
        let (mut a, mut b) = (Canvas::new(12, 7, 0u8), Canvas::new(12, 7, 0u8));
        a.text(0, 0, "ns", 1, 1);
        b.text(0, 0, "NS", 1, 1);
        assert_ne!(a.pixels, b.pixels);
        // Lower-case `n` has an empty top row, `N` does not.
        assert_eq!(a.get(0, 0), 0);
        assert_eq!(b.get(0, 0), 1);
    }

    #[test]
    fn lines_and_rects_clip_to_the_canvas() {
        let mut c = Canvas::new(5, 5, 0u8);
        c.line((-3, -3), (7, 7), 1, 9);
        assert!((0..5).all(|i| c.get(i, i) == 9));
        c.fill_rect(3, 3, 10, 10, 4);
        assert_eq!(c.get(4, 4), 4);
    }
}
