//! A TCSPC cube: photon counts per pixel and time bin, with the bin width and laser period.

use crate::error::{Error, Result, invalid};
use gpu_runtime::{Device, HostPin};
use ndarray::{Array3, ArrayView3, Zip};

/// Photon counts as stored by instruments: u16 or u32 counts, or f32 after processing.
pub trait Count:
    bytemuck::Pod + Copy + Send + Sync + Into<f64> + std::fmt::Debug + 'static
{
    /// How the GPU kernels read this type from 32-bit words (see `gpu_kernels::flim`).
    const KIND: u32;
}

impl Count for u16 {
    const KIND: u32 = gpu_kernels::flim::KIND_U16;
}

impl Count for u32 {
    const KIND: u32 = gpu_kernels::flim::KIND_U32;
}

impl Count for f32 {
    const KIND: u32 = gpu_kernels::flim::KIND_F32;
}

/// Decay histograms of an image: `counts[[y, x, bin]]`, bin `j` covering
/// `[j h, (j + 1) h)` after the first bin's start, `h = bin_ns`.
///
/// ```
/// use flim_core::Cube;
/// use ndarray::Array3;
/// let cube = Cube::new(Array3::<u16>::zeros((4, 4, 64)), 0.1)?.with_period_ns(12.5)?;
/// assert_eq!(cube.bins(), 64);
/// assert_eq!(cube.period_ns(), 12.5);
/// # Ok::<(), flim_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Cube<T: Count> {
    /// Page-lock of `counts` (see [`Cube::pin_on`]); declared first so that it is released
    /// before the counts are freed.
    pin: Option<HostPin>,
    counts: Array3<T>,
    bin_ns: f64,
    period_ns: Option<f64>,
}

impl<T: Count> Clone for Cube<T> {
    /// A copy of the counts in new, pageable memory.
    fn clone(&self) -> Self {
        Self {
            pin: None,
            counts: self.counts.clone(),
            bin_ns: self.bin_ns,
            period_ns: self.period_ns,
        }
    }
}

impl<T: Count> Cube<T> {
    /// A cube of `counts` (y, x, bin) with bins `bin_ns` nanoseconds wide.
    pub fn new(counts: Array3<T>, bin_ns: f64) -> Result<Self> {
        if !(bin_ns.is_finite() && bin_ns > 0.0) {
            return Err(invalid("bin width", bin_ns, "must be finite and > 0 ns"));
        }
        if counts.dim().2 < 4 {
            return Err(Error::Shape(format!(
                "a decay needs at least 4 time bins, the cube has {}",
                counts.dim().2
            )));
        }
        Ok(Self {
            pin: None,
            // A standard-layout array is kept as it is: `as_standard_layout().into_owned()`
            // would copy it (134 MB for a 512x512x256 recording).
            counts: if counts.is_standard_layout() {
                counts
            } else {
                counts.as_standard_layout().into_owned()
            },
            bin_ns,
            period_ns: None,
        })
    }

    /// Set the laser repetition period (ns); it sets the phasor's base frequency.
    pub fn with_period_ns(mut self, period_ns: f64) -> Result<Self> {
        if !(period_ns.is_finite() && period_ns > 0.0) {
            return Err(invalid(
                "laser period",
                period_ns,
                "must be finite and > 0 ns",
            ));
        }
        self.period_ns = Some(period_ns);
        Ok(self)
    }

    /// The same counts with bins `bin_ns` wide (e.g. to override a file's header).
    pub fn with_bin_ns(mut self, bin_ns: f64) -> Result<Self> {
        if !(bin_ns.is_finite() && bin_ns > 0.0) {
            return Err(invalid("bin width", bin_ns, "must be finite and > 0 ns"));
        }
        self.bin_ns = bin_ns;
        Ok(self)
    }

    /// The counts, (y, x, bin), standard layout.
    pub fn counts(&self) -> ArrayView3<'_, T> {
        self.counts.view()
    }

    /// Bin width in ns.
    pub fn bin_ns(&self) -> f64 {
        self.bin_ns
    }

    /// The laser period in ns; the recorded window (bins x bin width) when none was given.
    pub fn period_ns(&self) -> f64 {
        self.period_ns.unwrap_or(self.bin_ns * self.bins() as f64)
    }

    /// Time bins per pixel.
    pub fn bins(&self) -> usize {
        self.counts.dim().2
    }

    /// (rows, columns).
    pub fn shape(&self) -> (usize, usize) {
        let (h, w, _) = self.counts.dim();
        (h, w)
    }

    /// The counts as a flat slice, pixel after pixel, bins contiguous.
    pub(crate) fn as_slice(&self) -> &[T] {
        self.counts.as_slice().expect("standard layout")
    }

    /// Page-lock the counts in place for `device` (a CUDA GPU; nothing happens on other
    /// devices), so that GPU analyses upload them at the host link's full rate with no
    /// copy into staging memory: the end-to-end time of a non-iterative method then
    /// approaches the link's bound. Locking costs more than one staging copy (and unlocking
    /// on drop costs too), so pin a cube that is analysed more than once. Returns whether the counts are now locked.
    ///
    /// ```
    /// use flim_core::sim::mono_exponential;
    /// let mut cube = mono_exponential(&[2.0], 4, 4, 64, 0.1, 6.4, 1_000.0, 1)?;
    /// assert!(!cube.pin_on(&gpu_runtime::Device::cpu())?); // nothing to lock on the CPU
    /// # Ok::<(), flim_core::Error>(())
    /// ```
    pub fn pin_on(&mut self, device: &Device) -> Result<bool> {
        if self.is_pinned() {
            return Ok(true);
        }
        let bytes: &[u8] = bytemuck::cast_slice(self.as_slice());
        // SAFETY: the counts are never reallocated while the cube lives (no method replaces
        // or grows them), and `pin` is declared before `counts`, so it is released first.
        let pin = unsafe { HostPin::new(device, bytes) }?;
        let locked = pin.is_locked();
        self.pin = locked.then_some(pin);
        Ok(locked)
    }

    /// Whether the counts are page-locked ([`Cube::pin_on`]).
    pub fn is_pinned(&self) -> bool {
        self.pin.is_some()
    }
}

/// A cube of whichever count type the file held.
#[derive(Debug, Clone)]
pub enum AnyCube {
    /// 16-bit counts (B&H, most TCSPC cards).
    U16(Cube<u16>),
    /// 32-bit counts.
    U32(Cube<u32>),
    /// Floating point (processed data).
    F32(Cube<f32>),
}

/// Apply `$body` to the cube inside an [`AnyCube`], whatever its type.
macro_rules! with_cube {
    ($any:expr, |$c:ident| $body:expr) => {
        match $any {
            AnyCube::U16($c) => $body,
            AnyCube::U32($c) => $body,
            AnyCube::F32($c) => $body,
        }
    };
}
pub(crate) use with_cube;

impl From<Cube<u16>> for AnyCube {
    fn from(c: Cube<u16>) -> Self {
        AnyCube::U16(c)
    }
}

impl From<Cube<u32>> for AnyCube {
    fn from(c: Cube<u32>) -> Self {
        AnyCube::U32(c)
    }
}

impl From<Cube<f32>> for AnyCube {
    fn from(c: Cube<f32>) -> Self {
        AnyCube::F32(c)
    }
}

impl AnyCube {
    /// (rows, columns).
    pub fn shape(&self) -> (usize, usize) {
        with_cube!(self, |c| c.shape())
    }

    /// Time bins per pixel.
    pub fn bins(&self) -> usize {
        with_cube!(self, |c| c.bins())
    }

    /// Bin width (ns).
    pub fn bin_ns(&self) -> f64 {
        with_cube!(self, |c| c.bin_ns())
    }

    /// Laser period (ns).
    pub fn period_ns(&self) -> f64 {
        with_cube!(self, |c| c.period_ns())
    }

    /// Set the laser period (ns).
    pub fn with_period_ns(self, period_ns: f64) -> Result<Self> {
        Ok(match self {
            AnyCube::U16(c) => AnyCube::U16(c.with_period_ns(period_ns)?),
            AnyCube::U32(c) => AnyCube::U32(c.with_period_ns(period_ns)?),
            AnyCube::F32(c) => AnyCube::F32(c.with_period_ns(period_ns)?),
        })
    }

    /// The same counts with another bin width (ns), e.g. to override a file's header.
    pub fn with_bin_ns(self, bin_ns: f64) -> Result<Self> {
        Ok(match self {
            AnyCube::U16(c) => AnyCube::U16(c.with_bin_ns(bin_ns)?),
            AnyCube::U32(c) => AnyCube::U32(c.with_bin_ns(bin_ns)?),
            AnyCube::F32(c) => AnyCube::F32(c.with_bin_ns(bin_ns)?),
        })
    }

    /// Name of the stored count type.
    pub fn dtype(&self) -> &'static str {
        match self {
            AnyCube::U16(_) => "u16",
            AnyCube::U32(_) => "u32",
            AnyCube::F32(_) => "f32",
        }
    }

    /// Photons per pixel (sum over all bins), as f64.
    pub fn photons(&self) -> ndarray::Array2<f64> {
        with_cube!(self, |c| c.counts().map_axis(ndarray::Axis(2), |d| d
            .iter()
            .map(|&v| Into::<f64>::into(v))
            .sum()))
    }

    /// The counts as f32 (exact for counts below 2^24).
    pub fn to_f32(&self) -> Cube<f32> {
        let (counts, bin, period) = with_cube!(self, |c| (
            c.counts().mapv(|v| Into::<f64>::into(v) as f32),
            c.bin_ns(),
            c.period_ns()
        ));
        Cube::new(counts, bin)
            .and_then(|c| c.with_period_ns(period))
            .expect("a valid cube stays valid")
    }

    /// Page-lock the counts for `device` ([`Cube::pin_on`]).
    pub fn pin_on(&mut self, device: &gpu_runtime::Device) -> Result<bool> {
        with_cube!(self, |c| c.pin_on(device))
    }

    /// The sum of cubes of one shape and bin width (e.g. frames of a time series): u16 and u32
    /// counts add up as u32, anything with floats as f32.
    pub fn sum(cubes: &[&AnyCube]) -> Result<AnyCube> {
        let first = cubes
            .first()
            .ok_or_else(|| Error::Shape("nothing to sum".into()))?;
        let dim = (first.shape().0, first.shape().1, first.bins());
        if let Some(bad) = cubes
            .iter()
            .find(|c| (c.shape().0, c.shape().1, c.bins()) != dim || c.bin_ns() != first.bin_ns())
        {
            return Err(Error::Shape(format!(
                "cannot sum cubes of different shapes or bin widths: {:?} x {} ns and {:?} x {} ns",
                dim,
                first.bin_ns(),
                (bad.shape().0, bad.shape().1, bad.bins()),
                bad.bin_ns()
            )));
        }
        let period = first.period_ns();
        if cubes.iter().any(|c| matches!(c, AnyCube::F32(_))) {
            let mut acc = Array3::<f32>::zeros(dim);
            for c in cubes {
                with_cube!(c, |c| Zip::from(&mut acc)
                    .and(c.counts())
                    .for_each(|a, &v| *a += Into::<f64>::into(v) as f32));
            }
            return Ok(Cube::new(acc, first.bin_ns())?
                .with_period_ns(period)?
                .into());
        }
        let mut acc = Array3::<u32>::zeros(dim);
        for c in cubes {
            with_cube!(c, |c| Zip::from(&mut acc).and(c.counts()).for_each(
                |a, &v| *a = a.saturating_add(Into::<f64>::into(v) as u32)
            ));
        }
        Ok(Cube::new(acc, first.bin_ns())?
            .with_period_ns(period)?
            .into())
    }
}
