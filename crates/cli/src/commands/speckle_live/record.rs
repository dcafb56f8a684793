//! `POST /record?seconds=N`: every map of the frames that come in during the next N seconds
//! (none dropped: the computing thread waits for the writer rather than skip one), one
//! 32-bit ImageJ TIFF per frame, then a `summary.json`. Each recording gets a new numbered
//! folder inside `--out`, so nothing is ever overwritten.

use super::state::{MapFrame, Recording, Shared};
use anyhow::Context;
use speckle_core::io::output::{ImageJMeta, write_imagej_tiff};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::time::{Duration, Instant};

/// Maps waiting for the writer before the computing thread waits.
const QUEUE: usize = 64;
/// Longest recording one request may ask for.
pub const MAX_SECONDS: f64 = 3600.0;

/// Create `out/rec-NNN` with the first number not taken (`create_dir` fails on an existing
/// folder, so two recordings can never share one).
pub fn new_folder(out: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for n in 1..100_000 {
        let dir = out.join(format!("rec-{n:03}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
    anyhow::bail!("{}: no free rec-NNN folder name left", out.display())
}

/// Start recording the next `seconds` of maps into a new folder in `out`; the folder.
pub fn start(shared: &Arc<Shared>, out: &Path, seconds: f64) -> anyhow::Result<PathBuf> {
    if !(seconds > 0.0 && seconds <= MAX_SECONDS) {
        anyhow::bail!(
            "seconds={seconds}: expected a duration in seconds, above 0 and at most {MAX_SECONDS}"
        );
    }
    if shared.lock().recording.is_some() {
        anyhow::bail!("a recording is already running; wait for it to finish");
    }
    let folder = new_folder(out)?;
    let (tx, rx) = sync_channel::<Arc<MapFrame>>(QUEUE);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    shared.lock().recording = Some(Recording {
        folder: folder.clone(),
        until,
        tx,
    });
    let (shared, dir) = (Arc::clone(shared), folder.clone());
    std::thread::spawn(move || {
        let result = write(&shared, &dir, seconds, until, &rx);
        let mut s = shared.lock();
        s.recording = None;
        match result {
            Ok(summary) => s.recordings.push(summary),
            Err(e) => {
                eprintln!("error: recording into {}: {e:#}", dir.display());
                s.recordings.push(serde_json::json!({
                    "folder": dir, "error": format!("{e:#}"),
                }));
            }
        }
    });
    Ok(folder)
}

/// The writer: maps until the computing thread closes the channel (it saw a frame that
/// came in after `until`) or, when no frame comes, a little after `until`.
fn write(
    shared: &Shared,
    dir: &Path,
    seconds: f64,
    until: Instant,
    rx: &std::sync::mpsc::Receiver<Arc<MapFrame>>,
) -> anyhow::Result<serde_json::Value> {
    let q = shared.quantity;
    let mut frames: Vec<serde_json::Value> = Vec::new();
    loop {
        let map = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(map) => map,
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                // No frame for a while after the end (a stalled source): stop here. Frames
                // that came in before `until` reach the channel within the pipeline's
                // latency, far less than this.
                if Instant::now() > until + Duration::from_secs(2) {
                    shared.lock().recording = None;
                    while let Ok(map) = rx.try_recv() {
                        frames.push(page(dir, q, &map)?);
                    }
                    break;
                }
                continue;
            }
        };
        frames.push(page(dir, q, &map)?);
    }
    let summary = serde_json::json!({
        "folder": dir,
        "seconds_requested": seconds,
        "frames": frames.len(),
        "quantity": q.name,
        "unit": q.unit,
        "files": format!("{}_NNNNNN.tif (NNNNNN: frame index), one 32-bit page each", q.stem),
        "averaging": "none: every frame's own map (display averaging is not applied)",
        "about": shared.about,
        "settings_at_end": shared.lock().settings,
        "frame_list": frames,
    });
    let path = dir.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    super::note(&format!(
        "recorded {} maps ({} s) into {}",
        frames.len(),
        seconds,
        dir.display()
    ));
    let mut short = summary;
    if let Some(o) = short.as_object_mut() {
        o.remove("frame_list");
    }
    Ok(short)
}

/// Write one map; its entry in the summary.
fn page(
    dir: &Path,
    q: super::state::Quantity,
    map: &MapFrame,
) -> anyhow::Result<serde_json::Value> {
    let name = format!("{}_{:06}.tif", q.stem, map.index);
    let path = dir.join(&name);
    let (lo, hi) = finite_range(&map.values);
    let meta = ImageJMeta {
        quantity: q.name.into(),
        unit: q.unit.into(),
        min: lo,
        max: hi,
        pixel_um: None,
    };
    write_imagej_tiff(
        &path,
        map.values.view().insert_axis(ndarray::Axis(0)),
        &meta,
    )
    .with_context(|| format!("writing {}", path.display()))?;
    Ok(serde_json::json!({ "file": name, "frame": map.index, "t_s": map.t_s }))
}

fn finite_range(a: &ndarray::Array2<f32>) -> (f32, f32) {
    let (lo, hi) = a
        .iter()
        .filter(|v| v.is_finite())
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    if lo <= hi { (lo, hi) } else { (0.0, 1.0) }
}
