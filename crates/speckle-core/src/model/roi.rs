//! Regions of interest and their time courses: mean K (or SFI, tau_c...) per ROI per frame,
//! written as CSV and as a PNG line plot (see [`crate::io`]), computed by [`crate::api::roi`].
//!
//! Coordinates are in pixels, `x` = column and `y` = row, both from 0 at the top-left pixel;
//! pixel centres sit at integer coordinates.

use std::fmt;
use std::str::FromStr;

use ndarray::Array2;

use crate::error::{Error, Result};

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
    /// use speckle_core::Roi;
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
    pub(crate) names: Vec<String>,
    pub(crate) frames: usize,
    /// Frame-major: entry `frame * rois + roi`.
    pub(crate) mean: Vec<f64>,
    pub(crate) valid: Vec<usize>,
    pub(crate) size: Vec<usize>,
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

/// Parameters of [`crate::api::roi`]: the regions, and optional names (default `roi1`,
/// `roi2`, ...).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoiParams {
    pub rois: Vec<Roi>,
    /// One non-empty name per ROI, or empty for the default names.
    pub names: Vec<String>,
}

impl RoiParams {
    /// `rois` with the default names.
    pub fn new(rois: Vec<Roi>) -> Self {
        Self {
            rois,
            names: Vec::new(),
        }
    }
}

/// How ROI time courses were computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoiInfo {
    /// Always the CPU: a time course reads each pixel once, so a GPU would only add copies.
    pub backend: gpu_runtime::Backend,
    /// The record to keep with the table: library, device, precision, start time.
    pub provenance: gpu_runtime::Provenance,
}
