//! What every benchmark group shares: its options and how it records a measurement. Kept
//! apart from the suite, which calls the groups, so imports run one way.

use crate::report::Measurement;
use gpu_runtime::Timing;

/// Options shared by every group.
#[derive(Debug, Clone)]
pub struct Options {
    /// Run only groups whose name contains one of these comma-separated words.
    pub filter: Option<String>,
    /// Fewer repetitions and smaller sizes (CI smoke run).
    pub quick: bool,
}

pub(crate) fn measurement(
    suite: &str,
    name: &str,
    value: f64,
    unit: &str,
    t: Timing,
    note: String,
) -> Measurement {
    // Printed as soon as measured, so a run cut short still reports what it finished.
    eprintln!("  {suite} | {name} | {value:.6} {unit} | {note}");
    Measurement {
        suite: suite.into(),
        name: name.into(),
        value,
        unit: unit.into(),
        median_ms: t.median_ms,
        min_ms: t.min_ms,
        max_ms: t.max_ms,
        samples: t.samples,
        note,
    }
}
