//! How a result was computed, carried in the `Info` of every verb so that a library user
//! can keep the same record beside a map as `biogpu`'s `summary.json` does.

use crate::Device;
use serde::Serialize;
use std::time::{Duration, SystemTime};

/// The library, device, arithmetic and time of one computation.
///
/// ```
/// use gpu_runtime::{Device, Provenance};
/// let started = std::time::SystemTime::now();
/// // ... compute on `device` ...
/// let record = Provenance::new(&Device::cpu(), "f64", started);
/// assert_eq!(record.device_id, "cpu");
/// assert!(record.library.starts_with("biogpu "));
/// let json = serde_json::to_value(&record).unwrap();
/// assert_eq!(json["precision"], "f64");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// `biogpu <version>` of the libraries that computed it.
    pub library: &'static str,
    /// The device's id (`cpu`, `cuda:0`, `wgpu:1`).
    pub device_id: String,
    /// The product name as the driver (or the CPU) reports it.
    pub device_name: String,
    /// Driver or API version, where known.
    pub driver: Option<String>,
    /// CUDA compute capability (major, minor).
    pub compute_capability: Option<(u32, u32)>,
    /// The arithmetic of the result: `f32`, `f64`, or a short phrase for mixed paths.
    pub precision: &'static str,
    /// When the computation started (wall clock).
    pub started: SystemTime,
    /// How long it took, transfers included.
    pub elapsed: Duration,
}

impl Provenance {
    /// The record of a computation on `device` in `precision` that began at `started` and
    /// ends now.
    pub fn new(device: &Device, precision: &'static str, started: SystemTime) -> Self {
        let info = device.info();
        Provenance {
            library: concat!("biogpu ", env!("CARGO_PKG_VERSION")),
            device_id: info.id.clone(),
            device_name: info.name.clone(),
            driver: info.driver.clone(),
            compute_capability: info.compute_capability,
            precision,
            started,
            elapsed: started.elapsed().unwrap_or_default(),
        }
    }
}

/// As JSON: times in RFC 3339 (UTC) and seconds.
impl Serialize for Provenance {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Provenance", 7)?;
        st.serialize_field("library", self.library)?;
        st.serialize_field("device_id", &self.device_id)?;
        st.serialize_field("device_name", &self.device_name)?;
        st.serialize_field("driver", &self.driver)?;
        st.serialize_field(
            "compute_capability",
            &self.compute_capability.map(|(a, b)| format!("{a}.{b}")),
        )?;
        st.serialize_field("precision", self.precision)?;
        st.serialize_field(
            "started",
            &humantime::format_rfc3339_millis(self.started).to_string(),
        )?;
        st.serialize_field("seconds", &self.elapsed.as_secs_f64())?;
        st.end()
    }
}
