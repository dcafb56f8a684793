//! Where the coherence factor beta comes from, and what is known about its quality.
//!
//! beta is the K^2 of a *static* scatterer imaged with the same optics, camera, window and
//! border rule (K^2 -> beta as T / tau_c -> 0). Every tau_c depends on it: a beta 40% too
//! low shifts every tau_c and sends the pixels above it to "no motion". So it is measured,
//! never guessed silently:
//!
//! - [`BetaOrigin::Given`]: a value the user knows (e.g. from a previous calibration);
//! - [`BetaOrigin::StaticRecording`] / [`BetaOrigin::StaticRegion`]: the mean K^2 of a
//!   static target or of a static region of the recording (paper, bone, a fixed phantom);
//! - [`BetaOrigin::CalibrationFile`]: a [`Calibration`] written by `speckle calibrate`
//!   (`api::calibrate`) on a static target;
//! - [`BetaOrigin::Estimated`]: estimated from the flow recording itself
//!   ([`crate::cpu::estimate_beta`]), an explicit opt-in whose [`BetaEstimate`] says how,
//!   and whether the estimate can be trusted.
//!
//! Theory used for the plausibility check: a pixel of width 1 integrating polarised,
//! fully developed speckle whose intensity correlation is `exp(-d^2 / s^2)` per axis has
//! `beta_pixel = B(s)^2`, `B(s) = int_{-1}^{1} (1 - |u|) exp(-u^2 / s^2) du`, and the sample
//! variance over an N x N window of such correlated pixels is biased low by
//! `1 - (S^2 - M) / (M (M - 1))`, `M = N^2`, `S = sum_d (N - |d|) c(d)`, with `c(d)` the
//! pixel correlation at lag d. `s` is found from the measured lag-1 correlation of the raw
//! frames ([`crate::cpu::speckle_lag1_correlation`]). The product is the largest beta the
//! optics allow ([`BetaEstimate::beta_max`]); unpolarised detection halves it.

use serde::{Deserialize, Serialize};

/// How the beta used for a tau_c map was obtained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum BetaOrigin {
    /// Given by the user.
    Given { beta: f64 },
    /// Mean K^2 of a separate recording of a static target.
    StaticRecording { beta: f64, path: String },
    /// Mean K^2 over a static region of the recording itself.
    StaticRegion { beta: f64, region: String },
    /// Read from a calibration file (see [`Calibration`]).
    CalibrationFile { beta: f64, path: String },
    /// Estimated from the flow recording (opt-in; see [`BetaEstimate`]).
    Estimated(BetaEstimate),
}

impl BetaOrigin {
    /// The beta value.
    pub fn beta(&self) -> f64 {
        match self {
            BetaOrigin::Given { beta }
            | BetaOrigin::StaticRecording { beta, .. }
            | BetaOrigin::StaticRegion { beta, .. }
            | BetaOrigin::CalibrationFile { beta, .. } => *beta,
            BetaOrigin::Estimated(e) => e.beta,
        }
    }

    /// A one-line description for consoles and logs.
    pub fn describe(&self) -> String {
        match self {
            BetaOrigin::Given { beta } => format!("beta {beta:.4} (given)"),
            BetaOrigin::StaticRecording { beta, path } => {
                format!("beta {beta:.4} (mean K^2 of the static recording {path})")
            }
            BetaOrigin::StaticRegion { beta, region } => {
                format!("beta {beta:.4} (mean K^2 of the static region {region})")
            }
            BetaOrigin::CalibrationFile { beta, path } => {
                format!("beta {beta:.4} (calibration file {path})")
            }
            BetaOrigin::Estimated(e) => format!(
                "beta {:.4} ESTIMATED from the data ({}){}",
                e.beta,
                e.method,
                if e.reliable { "" } else { ": UNRELIABLE" }
            ),
        }
    }
}

/// A beta estimated from a flow recording's own K map, with the evidence for and against it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BetaEstimate {
    /// The estimate.
    pub beta: f64,
    /// How it was obtained, in words.
    pub method: String,
    /// Fraction of the finite pixels in the upper K^2 population taken as static (0 when
    /// none was found).
    pub static_fraction: f64,
    /// Whether the K^2 histogram has a separate upper population (a plateau of static
    /// pixels) that the estimate comes from.
    pub plateau: bool,
    /// Percentiles 90, 99 and 99.9 of K^2, for the record.
    pub k2_p90: f64,
    pub k2_p99: f64,
    pub k2_p999: f64,
    /// Lag-1 correlation of neighbouring raw pixels (speckle size), when raw frames were given.
    pub lag1_correlation: Option<f64>,
    /// Largest beta the optics allow for that speckle size and the window (polarised
    /// light; see the module docs); `None` without raw frames or in temporal mode.
    pub beta_max: Option<f64>,
    /// Whether nothing argues against the estimate (plateau found, not far below beta_max).
    pub reliable: bool,
    /// Why it may be wrong, one sentence each (empty when reliable).
    pub warnings: Vec<String>,
}

/// The result of calibrating beta on a static target (`api::calibrate`, `speckle calibrate`),
/// as written to and read from a small JSON file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Mean K^2 over the static pixels.
    pub beta: f64,
    /// Standard deviation of K^2 over those pixels (spread, not the error of the mean).
    pub beta_sd: f64,
    /// How it was measured, in words.
    pub method: String,
    /// Pixels averaged.
    pub pixels: usize,
    /// Frames of the static recording.
    pub frames: usize,
    /// Contrast settings beta belongs to (beta depends on the window through its bias).
    pub mode: String,
    /// Spatial window side (`None` in temporal mode).
    pub window: Option<usize>,
    /// Frames per temporal window (`None` in spatial mode).
    pub temporal_frames: Option<usize>,
    pub border: String,
    /// Exposure of the static recording in seconds, when known.
    pub exposure_s: Option<f64>,
    /// Camera bit depth, when known.
    pub bit_depth: Option<u32>,
    /// Fraction of the static pixels flagged saturated (their K is biased low).
    pub saturated_fraction: f64,
    /// Lag-1 correlation of neighbouring raw pixels and the beta the optics allow.
    pub lag1_correlation: Option<f64>,
    pub beta_max: Option<f64>,
    /// Free text: the recording, the camera, the date, as the user gave them.
    pub source: String,
    /// Warnings found while calibrating.
    pub warnings: Vec<String>,
}

impl Calibration {
    /// Read a calibration file written by [`Calibration::write`].
    pub fn read(path: &std::path::Path) -> crate::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::InvalidData {
                crate::Error::Format {
                    path: path.to_path_buf(),
                    why: "not a beta calibration file (not text); write one with \
                          `biogpu speckle calibrate`"
                        .into(),
                }
            } else {
                crate::Error::Io {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        let cal: Calibration = serde_json::from_str(&text).map_err(|e| crate::Error::Format {
            path: path.to_path_buf(),
            why: format!(
                "not a beta calibration file ({e}); write one with `biogpu speckle calibrate`"
            ),
        })?;
        crate::model::flow::check_beta(cal.beta).map_err(|_| crate::Error::Format {
            path: path.to_path_buf(),
            why: format!("beta {} in the file is not finite and > 0", cal.beta),
        })?;
        Ok(cal)
    }

    /// Write as pretty JSON at exactly `path`.
    pub fn write(&self, path: &std::path::Path) -> crate::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("plain data serialises");
        std::fs::write(path, text + "\n").map_err(|source| crate::Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Parameters of [`crate::api::calibrate`]: beta from a recording of a static target.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationParams {
    /// Contrast settings: use those of the flow recordings (spatial mode).
    pub contrast: crate::model::contrast::ContrastParams,
    /// Static pixels to average (`None`: the whole frame).
    pub region: Option<crate::model::roi::Roi>,
    /// Free text stored in the file: recording, camera, date.
    pub source: String,
}

impl CalibrationParams {
    /// Calibrate with `contrast` over the whole frame.
    pub fn new(contrast: crate::model::contrast::ContrastParams) -> Self {
        Self {
            contrast,
            region: None,
            source: String::new(),
        }
    }

    pub fn with_region(mut self, region: crate::model::roi::Roi) -> Self {
        self.region = Some(region);
        self
    }

    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }
}

/// How a calibration was computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalibrationInfo {
    /// Where the contrast ran.
    pub backend: gpu_runtime::Backend,
    /// The record of the contrast behind it: library, device, precision, start time.
    pub provenance: gpu_runtime::Provenance,
}
