//! PicoQuant files: `.ptu` (tagged header, T3 or T2 records), the older `.pt3` (PicoHarp
//! 300) and `.ht3` (HydraHarp) T3 files with fixed binary headers, and `.phu` histograms.
//! The photon streams are histogrammed while they stream ([`crate::io::photons`]).

mod legacy;
mod phu;
mod ptu;
mod records;
mod tags;

pub use legacy::read_pt3_ht3;
pub use phu::read_phu;
pub use ptu::read_ptu;
pub use records::SyncSource;
pub use tags::{PtuHeader, PtuTag, TagValue, read_ptu_header};
