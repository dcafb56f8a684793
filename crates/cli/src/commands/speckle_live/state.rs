//! What the computing thread, the web server and the recorder share: the latest map, the
//! ROI time course, the page's settings and the counters behind `/status`. The computing
//! thread only ever replaces an `Arc` under a short lock, so however slowly the browser
//! reads, computation never waits for it (frames are dropped for display only).

use ndarray::Array2;
use speckle_core::io::Frame;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Points of the ROI time course kept for the page (the oldest are dropped).
const COURSE_POINTS: usize = 20_000;
/// Latencies kept for the median and p99 of `/status` (the bench keeps all of them).
const RECENT_LATENCIES: usize = 500;

/// The quantity shown and recorded, with its unit and whether it is drawn on a log scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    pub name: &'static str,
    pub stem: &'static str,
    pub unit: &'static str,
    pub log: bool,
}

/// One frame's map: the frame index, when the frame came in (s since start) and how long
/// after that the map was ready.
#[derive(Debug)]
pub struct MapFrame {
    pub index: u64,
    pub t_s: f64,
    pub latency_ms: f64,
    pub values: Array2<f32>,
}

/// A rectangle of map pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rect {
    pub x: usize,
    pub y: usize,
    pub w: usize,
    pub h: usize,
}

impl Rect {
    /// Mean of the finite values of `map` inside the rectangle (clipped to the map); NaN
    /// when none is finite.
    pub fn mean(&self, map: &Array2<f32>) -> f64 {
        let (h, w) = map.dim();
        let (x1, y1) = ((self.x + self.w).min(w), (self.y + self.h).min(h));
        let (mut sum, mut n) = (0f64, 0usize);
        for y in self.y.min(y1)..y1 {
            for &v in map.row(y).iter().take(x1).skip(self.x.min(x1)) {
                if v.is_finite() {
                    sum += f64::from(v);
                    n += 1;
                }
            }
        }
        if n == 0 { f64::NAN } else { sum / n as f64 }
    }
}

/// The page's controls.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Settings {
    /// Spatial window side (spatial and spatio-temporal modes).
    pub window: usize,
    /// Colour limits from each map's 1st and 99th percentiles, else `lo` and `hi`.
    pub auto: bool,
    pub lo: f32,
    pub hi: f32,
    /// Maps averaged for display (1: none); recording always keeps every frame's own map.
    pub average: usize,
}

/// A recording in progress: maps of frames that came in before `until` go to `tx`.
#[derive(Debug)]
pub struct Recording {
    pub folder: PathBuf,
    pub until: Instant,
    pub tx: SyncSender<Arc<MapFrame>>,
}

/// Everything behind the lock.
#[derive(Debug)]
pub struct Inner {
    /// The map the page shows (averaged over `settings.average` maps).
    pub latest: Option<Arc<MapFrame>>,
    /// The last raw frame taken while the page asked for one.
    pub raw: Option<(u64, Arc<Frame>)>,
    pub settings: Settings,
    pub roi: Option<Rect>,
    /// (frame index, seconds since start, ROI mean) of every computed frame since the ROI
    /// was set.
    pub course: VecDeque<(u64, f64, f64)>,
    /// When the last maps were ready (for frames/s).
    pub done_times: VecDeque<Instant>,
    pub latencies: VecDeque<f64>,
    /// When every map was ready and its latency, for `--bench`.
    pub all_latencies: Option<Vec<(Instant, f64)>>,
    /// Arrival times of frames not yet mapped, in order.
    pub arrivals: VecDeque<(u64, Instant)>,
    pub recording: Option<Recording>,
    /// Folder and frames written of the recordings so far.
    pub recordings: Vec<serde_json::Value>,
    pub error: Option<String>,
    pub ended: bool,
}

/// The shared state.
#[derive(Debug)]
pub struct Shared {
    pub start: Instant,
    /// `start` on the wall clock, ms since 1970: the page times "frame in to pixels on
    /// screen" against it (browser and server share the clock on 127.0.0.1).
    pub start_unix_ms: f64,
    pub stop: Arc<AtomicBool>,
    /// Set when a setting needs the pipeline restarted (the window).
    pub restart: AtomicBool,
    /// Set by `GET /raw`: keep the next raw frame.
    pub raw_wanted: AtomicBool,
    pub frames_in: AtomicU64,
    pub frames_done: AtomicU64,
    pub quantity: Quantity,
    /// Facts for `/status` and the recordings' summaries (mode, device, source).
    pub about: serde_json::Value,
    inner: Mutex<Inner>,
}

impl Shared {
    pub fn new(
        quantity: Quantity,
        settings: Settings,
        about: serde_json::Value,
        stop: Arc<AtomicBool>,
        keep_all_latencies: bool,
    ) -> Self {
        let start = Instant::now();
        let start_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
        Self {
            start,
            start_unix_ms,
            stop,
            restart: AtomicBool::new(false),
            raw_wanted: AtomicBool::new(false),
            frames_in: AtomicU64::new(0),
            frames_done: AtomicU64::new(0),
            quantity,
            about,
            inner: Mutex::new(Inner {
                latest: None,
                raw: None,
                settings,
                roi: None,
                course: VecDeque::new(),
                done_times: VecDeque::new(),
                latencies: VecDeque::new(),
                all_latencies: keep_all_latencies.then(Vec::new),
                arrivals: VecDeque::new(),
                recording: None,
                recordings: Vec::new(),
                error: None,
                ended: false,
            }),
        }
    }

    /// The state; a thread that panicked while holding it left plain data, still usable.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Seconds since start.
    pub fn seconds(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64()
    }

    /// A frame came in: note its index and time; keep it for `/raw` if asked.
    pub fn frame_in(&self, frame: &Frame) -> u64 {
        let index = self.frames_in.fetch_add(1, Ordering::Relaxed);
        let raw = self
            .raw_wanted
            .swap(false, Ordering::Relaxed)
            .then(|| Arc::new(frame.clone()));
        let mut s = self.lock();
        s.arrivals.push_back((index, Instant::now()));
        if let Some(raw) = raw {
            s.raw = Some((index, raw));
        }
        index
    }

    /// When frame `index` came in (forgetting the frames before it, which made no map).
    pub fn arrival(&self, index: u64) -> Instant {
        let mut s = self.lock();
        while let Some(&(i, t)) = s.arrivals.front() {
            match i.cmp(&index) {
                std::cmp::Ordering::Less => {
                    s.arrivals.pop_front();
                }
                std::cmp::Ordering::Equal => {
                    s.arrivals.pop_front();
                    return t;
                }
                std::cmp::Ordering::Greater => break,
            }
        }
        Instant::now()
    }

    /// A map is ready: count it and its latency.
    pub fn done(&self, latency_ms: f64) {
        self.frames_done.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut s = self.lock();
        s.done_times.push_back(now);
        while s
            .done_times
            .front()
            .is_some_and(|t| now.duration_since(*t).as_secs_f64() > 1.0)
        {
            s.done_times.pop_front();
        }
        s.latencies.push_back(latency_ms);
        if s.latencies.len() > RECENT_LATENCIES {
            s.latencies.pop_front();
        }
        if let Some(all) = s.all_latencies.as_mut() {
            all.push((now, latency_ms));
        }
    }

    /// Add a point to the ROI time course.
    pub fn course_point(&self, point: (u64, f64, f64)) {
        let mut s = self.lock();
        s.course.push_back(point);
        if s.course.len() > COURSE_POINTS {
            s.course.pop_front();
        }
    }

    /// The `/status` document.
    pub fn status(&self) -> serde_json::Value {
        let s = self.lock();
        let mut recent: Vec<f64> = s.latencies.iter().copied().collect();
        let latest = s.latest.as_ref();
        serde_json::json!({
            "frames_in": self.frames_in.load(Ordering::Relaxed),
            "frames_computed": self.frames_done.load(Ordering::Relaxed),
            "frames_per_second": s.done_times.len(),
            "latency_ms": latest.map(|m| m.latency_ms),
            "latency_ms_median": percentile(&mut recent, 50.0),
            "latency_ms_p99": percentile(&mut recent, 99.0),
            "map_index": latest.map(|m| m.index),
            "map_size": latest.map(|m| [m.values.dim().1, m.values.dim().0]),
            "quantity": self.quantity.name,
            "unit": self.quantity.unit,
            "log_scale": self.quantity.log,
            "settings": s.settings,
            "roi": s.roi,
            "recording": s.recording.as_ref().map(|r| serde_json::json!({
                "folder": r.folder,
                "seconds_left": r.until.saturating_duration_since(Instant::now()).as_secs_f64(),
            })),
            "recordings": s.recordings,
            "ended": s.ended,
            "error": s.error,
            "about": self.about,
            "start_unix_ms": self.start_unix_ms,
        })
    }
}

/// The `p`th percentile (nearest rank) of `v`, which it sorts; `None` if empty.
pub fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roi_mean_skips_nan_and_clips_to_the_map() {
        let mut m = Array2::from_shape_fn((4, 5), |(y, x)| (y * 5 + x) as f32);
        m[[1, 1]] = f32::NAN;
        let r = Rect {
            x: 1,
            y: 0,
            w: 10,
            h: 2,
        };
        // Row 0: 1..=4, row 1: 7, 8, 9 (6 is NaN).
        assert!((r.mean(&m) - (1.0 + 2.0 + 3.0 + 4.0 + 7.0 + 8.0 + 9.0) / 7.0).abs() < 1e-12);
        let outside = Rect {
            x: 9,
            y: 9,
            w: 2,
            h: 2,
        };
        assert!(outside.mean(&m).is_nan());
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&mut v, 50.0), Some(50.0));
        assert_eq!(percentile(&mut v, 99.0), Some(99.0));
        assert_eq!(percentile(&mut [], 50.0), None);
    }
}
