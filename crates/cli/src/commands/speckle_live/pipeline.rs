//! Frames in, maps out: the source feeds `speckle contrast`'s streaming computation
//! ([`compute`]: spatial, temporal or spatio-temporal, on the CPU or a GPU; spatial integer
//! frames on a GPU take the library's overlapped [`speckle_core::stream`]), and each map
//! becomes the chosen quantity, a point of the ROI time course, a page of a recording and
//! the page's latest (optionally averaged) map. Changing the window restarts the
//! computation on the same source.

use super::source::Source;
use super::state::{MapFrame, Shared};
use crate::commands::speckle::stream::{Maps, compute};
use gpu_runtime::Device;
use ndarray::{Array2, Zip};
use speckle_core::io::Frame;
use speckle_core::model::flow_table::FlowTable;
use speckle_core::{ContrastParams, FlowModel, Mode, StreamParams, Window};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Frames per batch of the GPU stream: enough to overlap copies and kernels, few enough
/// to keep the latency at a few frames.
const GPU_BATCH: usize = 2;

/// What each frame's K becomes.
#[derive(Debug, Clone)]
pub enum Convert {
    K,
    /// SFI = 1/(2 T K^2), 1/s (the contrast computation fills it from the exposure).
    Sfi,
    /// 1/tau_c, 1/s, by inverting the speckle model with this exposure (s) and beta, on
    /// every device by the model's table on the CPU threads: within 1e-8 of the exact f64
    /// inversion of `speckle flow`, some 20 times sooner, and sooner than a second round
    /// trip of each map to a GPU (111 maps/s and 112 ms on an H200 that way).
    InvTau {
        exposure_s: f64,
        beta: f64,
        table: Arc<FlowTable>,
    },
}

impl Convert {
    /// 1/tau_c with the model's table built once for the run.
    pub fn inv_tau(exposure_s: f64, beta: f64, model: FlowModel) -> Self {
        Self::InvTau {
            exposure_s,
            beta,
            table: Arc::new(FlowTable::new(model)),
        }
    }
}

/// The source shared across restarts, counting frames in as they leave it.
#[derive(Clone)]
struct Tap {
    source: Arc<Mutex<Source>>,
    shared: Arc<Shared>,
}

impl Iterator for Tap {
    type Item = speckle_core::Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.shared.restart.load(Ordering::Relaxed) || self.shared.stopped() {
            return None;
        }
        let item = self
            .source
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .next()?;
        if let Ok(frame) = &item {
            self.shared.frame_in(frame);
        }
        Some(item)
    }
}

/// A computed map on its way to [`publish`]. `run` counts the computation's (re)starts:
/// the display average starts over with each.
struct Computed {
    k: Array2<f32>,
    sfi: Option<Array2<f32>>,
    index: u64,
    run: u64,
}

/// Run until the source ends, fails or `stop` is set.
///
/// Maps are converted (1/tau_c) and published on a thread of their own, so the
/// computation (the GPU stream's caller above all) goes on with the next frames meanwhile;
/// two maps may wait between them, then the computation waits: no map is dropped.
pub fn run(
    source: Source,
    base: &ContrastParams,
    convert: &Convert,
    device: &Device,
    shared: &Arc<Shared>,
) -> anyhow::Result<()> {
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<Computed>(2);
        let publisher = scope.spawn(move || -> anyhow::Result<()> {
            let mut averager = Averager::default();
            let mut run = 0;
            for c in rx {
                if c.run != run {
                    averager.clear();
                    run = c.run;
                }
                publish(c.k, c.sfi, c.index, convert, shared, &mut averager)?;
            }
            Ok(())
        });
        let computed = compute_maps(source, base, convert, device, shared, &tx);
        drop(tx);
        let published = publisher
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the map publisher panicked")));
        // A publisher's error explains the computation it stopped.
        published.and(computed)
    })
}

/// The computation: frames from the source, maps to `out`, started again on a new window.
fn compute_maps(
    source: Source,
    base: &ContrastParams,
    convert: &Convert,
    device: &Device,
    shared: &Arc<Shared>,
    out: &SyncSender<Computed>,
) -> anyhow::Result<()> {
    let mut tap = Tap {
        source: Arc::new(Mutex::new(source)),
        shared: Arc::clone(shared),
    };
    let cpu = Device::cpu();
    let send = |c: Computed| {
        out.send(c)
            .map_err(|_| anyhow::anyhow!("the map publisher stopped"))
    };
    for run in 1.. {
        shared.restart.store(false, Ordering::Relaxed);
        let window = shared.lock().settings.window;
        let p = ContrastParams {
            window: Window::new(window)?,
            // SFI only where it is shown: K and 1/tau_c need none computed and copied.
            exposure_s: base.exposure_s.filter(|_| matches!(convert, Convert::Sfi)),
            ..*base
        };
        let base_index = shared.frames_in.load(Ordering::Relaxed);
        let Some(first) = tap.next() else { break };
        let first = first?;
        // A temporal map is ready once its window of frames is in: map j is of frame j + lag.
        let lag = if p.mode == Mode::Spatial {
            0
        } else {
            p.frames as u64 - 1
        };
        let mut j = 0u64;
        if device.is_gpu() && p.mode == Mode::Spatial && !matches!(first, Frame::F32(_)) {
            // The library's overlapped GPU stream, a few frames per batch: `compute` would
            // gather 16 frames per chunk, 16 frames of latency.
            let frames = std::iter::once(Ok(first)).chain(tap.clone());
            speckle_core::stream(frames, &StreamParams::new(p, GPU_BATCH), device, |m| {
                let index = base_index + m.index as u64;
                let (k, sfi) = (m.k.to_owned(), m.sfi.map(|s| s.to_owned()));
                send(Computed { k, sfi, index, run }).map_err(|e| speckle_core::Error::Format {
                    path: "speckle live".into(),
                    why: format!("{e:#}"),
                })
            })?;
        } else {
            // Temporal K of integer frames is a running sum, a few operations a pixel a
            // frame: the CPU's stream keeps up with a camera on any device, where the GPU's
            // chunks of 16 frames recompute each map's whole window (82 maps/s on an H200).
            let device = if p.mode == Mode::Temporal && !matches!(first, Frame::F32(_)) {
                &cpu
            } else {
                device
            };
            // Buffers are not recycled: each map is handed on (to the page and a recording).
            let (_, recycle) = std::sync::mpsc::channel::<Maps>();
            compute(
                first,
                Box::new(tap.clone()),
                None,
                &p,
                device,
                &recycle,
                |m| {
                    let index = base_index + j + lag;
                    j += 1;
                    send(Computed {
                        k: m.k,
                        sfi: m.sfi,
                        index,
                        run,
                    })
                },
            )?;
        }
        if !shared.restart.load(Ordering::Relaxed) || shared.stopped() {
            break;
        }
    }
    Ok(())
}

/// One map (K and, with an exposure, SFI): convert, ROI point, recording, latest.
fn publish(
    k: Array2<f32>,
    sfi: Option<Array2<f32>>,
    index: u64,
    convert: &Convert,
    shared: &Shared,
    averager: &mut Averager,
) -> anyhow::Result<()> {
    let arrived = shared.arrival(index);
    let values = match convert {
        Convert::K => k,
        Convert::Sfi => sfi.ok_or_else(|| anyhow::anyhow!("SFI needs --exposure"))?,
        Convert::InvTau {
            exposure_s,
            beta,
            table,
        } => speckle_core::cpu::decorrelation_rate_map(k.view(), *exposure_s, *beta, table)?,
    };
    let ready = Instant::now();
    let latency_ms = ready.saturating_duration_since(arrived).as_secs_f64() * 1e3;
    let map = Arc::new(MapFrame {
        index,
        t_s: shared.seconds(arrived),
        latency_ms,
        values,
    });
    let (roi, average, recording) = {
        let mut s = shared.lock();
        // A frame that came in after the end closes the recording (the writer finishes).
        if s.recording.as_ref().is_some_and(|r| arrived >= r.until) {
            s.recording = None;
        }
        let tx = s.recording.as_ref().map(|r| r.tx.clone());
        (s.roi, s.settings.average.max(1), tx)
    };
    if let Some(tx) = recording {
        // Blocks while the writer is behind: a recording never drops a map.
        let _ = tx.send(Arc::clone(&map));
    }
    if let Some(r) = roi {
        shared.course_point((index, map.t_s, r.mean(&map.values)));
    }
    let shown = averager.push(&map, average);
    shared.lock().latest = Some(shown);
    shared.done(latency_ms);
    Ok(())
}

/// Running mean of the last `n` maps for display, NaN-aware (a pixel's mean is over the
/// maps where it is finite).
#[derive(Debug, Default)]
struct Averager {
    maps: VecDeque<Arc<MapFrame>>,
    sum: Option<Array2<f64>>,
    count: Option<Array2<u32>>,
}

impl Averager {
    fn clear(&mut self) {
        *self = Self::default();
    }

    fn add(&mut self, m: &Array2<f32>, sign: i8) {
        let (Some(sum), Some(count)) = (self.sum.as_mut(), self.count.as_mut()) else {
            return;
        };
        Zip::from(sum).and(count).and(m).for_each(|s, c, &v| {
            if v.is_finite() {
                if sign > 0 {
                    *s += f64::from(v);
                    *c += 1;
                } else {
                    *s -= f64::from(v);
                    *c -= 1;
                }
            }
        });
    }

    /// Add `map`; the mean of the last `n` maps (`map` itself when `n` is 1).
    fn push(&mut self, map: &Arc<MapFrame>, n: usize) -> Arc<MapFrame> {
        let dim = map.values.dim();
        if n <= 1 || self.sum.as_ref().is_some_and(|s| s.dim() != dim) {
            self.clear();
            if n <= 1 {
                return Arc::clone(map);
            }
        }
        if self.sum.is_none() {
            self.sum = Some(Array2::zeros(dim));
            self.count = Some(Array2::zeros(dim));
        }
        self.add(&map.values, 1);
        self.maps.push_back(Arc::clone(map));
        while self.maps.len() > n {
            let old = self.maps.pop_front().expect("longer than n");
            self.add(&old.values, -1);
        }
        let (sum, count) = (
            self.sum.as_ref().expect("set above"),
            self.count.as_ref().expect("set above"),
        );
        let values = Zip::from(sum).and(count).map_collect(|&s, &c| {
            if c == 0 {
                f32::NAN
            } else {
                (s / f64::from(c)) as f32
            }
        });
        Arc::new(MapFrame {
            index: map.index,
            t_s: map.t_s,
            latency_ms: map.latency_ms,
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(index: u64, v: f32) -> Arc<MapFrame> {
        Arc::new(MapFrame {
            index,
            t_s: 0.0,
            latency_ms: 0.0,
            values: Array2::from_elem((2, 2), v),
        })
    }

    #[test]
    fn the_display_average_is_over_the_last_n_finite_maps() {
        let mut a = Averager::default();
        assert_eq!(a.push(&frame(0, 1.0), 3).values[[0, 0]], 1.0);
        assert_eq!(a.push(&frame(1, f32::NAN), 3).values[[0, 0]], 1.0);
        assert_eq!(a.push(&frame(2, 4.0), 3).values[[0, 0]], 2.5);
        // Frame 0 leaves the window: mean of NaN, 4, 7 over the finite ones.
        assert_eq!(a.push(&frame(3, 7.0), 3).values[[1, 1]], 5.5);
        // n = 1: the map itself.
        assert_eq!(a.push(&frame(4, 9.0), 1).values[[0, 1]], 9.0);
    }
}
