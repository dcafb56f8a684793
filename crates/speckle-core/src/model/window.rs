//! Parameters of contrast computation, validated once and shared by the CPU and GPU paths.

use crate::error::{Error, Result};

/// Square spatial window of odd side `2 r + 1`, from 3 to 31 pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    radius: usize,
}

impl Window {
    /// Smallest and largest allowed side.
    pub const MIN: usize = 3;
    pub const MAX: usize = 31;

    /// A window of side `size` (odd, 3..=31).
    ///
    /// ```
    /// use speckle_core::Window;
    /// assert_eq!(Window::new(5).unwrap().size(), 5);
    /// assert!(Window::new(6).is_err());
    /// ```
    pub fn new(size: usize) -> Result<Self> {
        if size.is_multiple_of(2) {
            return Err(Error::InvalidWindow { size, why: "even" });
        }
        if size < Self::MIN {
            return Err(Error::InvalidWindow {
                size,
                why: "too small",
            });
        }
        if size > Self::MAX {
            return Err(Error::InvalidWindow {
                size,
                why: "too large",
            });
        }
        Ok(Self { radius: size / 2 })
    }

    /// Half-width r (side = 2r + 1).
    pub fn radius(self) -> usize {
        self.radius
    }

    /// Side length 2r + 1.
    pub fn size(self) -> usize {
        2 * self.radius + 1
    }

    /// Number of pixels in the window, (2r + 1)^2.
    pub fn area(self) -> usize {
        self.size() * self.size()
    }
}

/// What to do where the window leaves the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Border {
    /// Mirror about the edge pixel (…2 1 0 1 2…, no edge repeat); every window has N pixels.
    #[default]
    Reflect,
    /// Pixels outside are zero but still counted in N, as in Yang et al. 2011.
    Zero,
    /// Only windows fully inside the image: the output shrinks by 2r in each direction.
    Valid,
}

impl std::str::FromStr for Border {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "reflect" => Ok(Border::Reflect),
            "zero" => Ok(Border::Zero),
            "valid" => Ok(Border::Valid),
            other => Err(Error::InvalidParameter {
                name: "border",
                value: other.to_string(),
                why: "expected reflect, zero or valid".into(),
            }),
        }
    }
}

/// Map a possibly out-of-range coordinate into `0..n` by mirror reflection about the edge
/// pixels (`-1 -> 1`, `n -> n - 2`), repeating as often as needed, so any window fits any
/// image of at least one pixel.
///
/// ```
/// use speckle_core::model::window::reflect_index;
/// assert_eq!(reflect_index(-2, 10), 2);
/// assert_eq!(reflect_index(11, 10), 7);
/// assert_eq!(reflect_index(5, 1), 0);
/// ```
#[inline]
pub fn reflect_index(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let m = i.rem_euclid(period);
    if m < n as isize {
        m as usize
    } else {
        (period - m) as usize
    }
}

/// Output (height, width) of contrast for a `height x width` frame: the frame size, or
/// `(height - 2r) x (width - 2r)` for [`Border::Valid`].
///
/// ```
/// use speckle_core::{Border, Window};
/// use speckle_core::model::window::contrast_shape;
/// let w = Window::new(5)?;
/// assert_eq!(contrast_shape(1040, 1392, w, Border::Reflect)?, (1040, 1392));
/// assert_eq!(contrast_shape(1040, 1392, w, Border::Valid)?, (1036, 1388));
/// assert!(contrast_shape(4, 100, w, Border::Valid).is_err());
/// # Ok::<(), speckle_core::Error>(())
/// ```
pub fn contrast_shape(
    height: usize,
    width: usize,
    window: Window,
    border: Border,
) -> Result<(usize, usize)> {
    let g = Geom::new(height, width, window, border)?;
    Ok((g.h_out, g.w_out))
}

/// Output geometry of a spatial window over an `h x w` frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geom {
    pub r: usize,
    pub border: Border,
    pub h: usize,
    pub w: usize,
    pub h_out: usize,
    pub w_out: usize,
}

impl Geom {
    pub fn new(h: usize, w: usize, window: Window, border: Border) -> Result<Self> {
        let r = window.radius();
        if h == 0 || w == 0 {
            return Err(Error::InvalidParameter {
                name: "frame",
                value: format!("{w}x{h}"),
                why: "the frame is empty".into(),
            });
        }
        let (h_out, w_out) = if border == Border::Valid {
            if h < 2 * r + 1 || w < 2 * r + 1 {
                return Err(Error::ImageTooSmall {
                    width: w,
                    height: h,
                    window: window.size(),
                });
            }
            (h - 2 * r, w - 2 * r)
        } else {
            (h, w)
        };
        Ok(Self {
            r,
            border,
            h,
            w,
            h_out,
            w_out,
        })
    }
}
