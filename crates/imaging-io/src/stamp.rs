//! The note every TIFF (its `Software` tag) and NIfTI (`descrip`) written by biogpu carries:
//! which biogpu made it and where the full record of the run is.

use std::sync::OnceLock;

static NOTE: OnceLock<String> = OnceLock::new();

/// The note written into image files: `biogpu <version>` unless a program set a longer
/// one with [`set_software_note`].
///
/// ```
/// assert!(imaging_io::software_note().starts_with("biogpu "));
/// ```
pub fn software_note() -> &'static str {
    NOTE.get().map_or(
        concat!("biogpu ", env!("CARGO_PKG_VERSION")),
        String::as_str,
    )
}

/// Set the note once per process (the `biogpu` command names its commit and the
/// provenance file beside each output). Later calls are ignored: files of one run agree.
pub fn set_software_note(note: String) {
    let _ = NOTE.set(note);
}
