//! Reading and writing TCSPC data: Becker & Hickl `.sdt` histograms and `.spc` photon
//! streams, PicoQuant `.ptu` (T3 and T2), `.pt3`, `.ht3` photon streams (histogrammed while
//! streaming) and `.phu` histograms, multi-page TIFF (time bins as pages) and NumPy `.npy`.
//!
//! Every reader returns a [`Recording`]: one [`Image`] per data block, frame and channel, each
//! a cube of the stored count type ([`AnyCube`](crate::AnyCube)), kept apart (never flattened), with the
//! facts from the file's header. Bad input gives [`Error::Format`](crate::Error::Format) naming the file, the part
//! (block, record, tag, page) and the byte offset where it went wrong.
//!
//! ```
//! use flim_core::io::{ReadOptions, read, write_npy};
//! use flim_core::sim::mono_exponential;
//! let dir = std::env::temp_dir().join(format!("flim-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("cube.npy");
//! let cube = mono_exponential(&[2.0], 4, 4, 64, 0.2, 12.8, 500.0, 1)?;
//! write_npy(&path, &cube.clone().into())?;
//! // .npy holds no bin width: the caller gives it.
//! let rec = read(&path, &ReadOptions::default().with_bin_ns(0.2))?;
//! assert_eq!(rec.images.len(), 1);
//! assert_eq!(rec.images[0].cube.shape(), (4, 4));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), flim_core::Error>(())
//! ```

pub(crate) mod figure;
mod irf;
pub(crate) mod maps;
mod npy;
mod photons;
mod picoquant;
pub(crate) mod plots;
pub(crate) mod prepare;
mod read;
pub(crate) mod recording;
mod sdt;
mod spc;
pub(crate) mod stats;
mod tiff;

pub use npy::{read_npy, write_npy};
pub use picoquant::{
    PtuHeader, PtuTag, SyncSource, TagValue, read_phu, read_pt3_ht3, read_ptu, read_ptu_header,
};
pub use sdt::{read_sdt, write_sdt};
pub use spc::read_spc;
pub use tiff::{read_tiff, write_tiff};

pub use figure::{MIN_LONG_SIDE, axis_label, figure_scale, imagej_description, quantity};
pub use maps::{MapSet, brightness, write_lifetime_png, write_map_png, write_map_tiff};
pub use plots::{
    Histogram, lifetime_histogram, write_histogram_csv, write_histogram_png, write_phasor_png,
};
pub use prepare::{
    IrfShift, IrfSource, OffsetSpec, PrepOptions, Prepared, RangeSpec, phasor_calibration,
    phasor_omega, prepare, prepare_cube,
};
pub use read::{read, read_cube};
pub use recording::{Format, Image, ReadOptions, Recording};
pub use stats::{MapStats, map_stats, write_summary_csv};
