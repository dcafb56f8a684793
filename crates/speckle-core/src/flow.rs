//! Flow models (placeholder while being written).

use crate::error::{Error, Result};

/// Validate an exposure time in seconds.
pub fn check_exposure(t: f64) -> Result<f64> {
    if t.is_finite() && t > 0.0 { Ok(t) } else { Err(Error::InvalidExposure { value: t }) }
}
