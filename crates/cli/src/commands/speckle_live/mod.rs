//! `biogpu speckle live`: K, SFI or 1/tau_c of frames as they arrive, shown on a local web
//! page (issue 26). A source ([`source`]) feeds the streaming computation ([`pipeline`]),
//! which publishes each map to the shared state ([`state`]); the web server ([`server`])
//! answers the page from that state and starts recordings ([`record`]). `--bench` runs the
//! same pipeline without the server and prints frames/s and latency as JSON.

mod pipeline;
mod record;
mod server;
mod source;
mod state;

use super::ContrastOpts;
use anyhow::{Context, bail};
use gpu_runtime::Device;
use pipeline::Convert;
use source::{RawLayout, SimSpec};
use speckle_core::io::RawDtype;
use speckle_core::{FlowModel, Mode};
use state::{Quantity, Settings, Shared};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct LiveArgs {
    /// Frames: `-` (stdin), a named pipe or a file of header-less raw frames (with
    /// --width, --height, --dtype; a file still being written is followed like `tail -f`),
    /// or a folder that receives one TIFF or PNG per frame.
    #[arg(value_name = "SOURCE", required_unless_present = "simulate")]
    source: Option<PathBuf>,
    /// Feed the simulated flow phantom (12-bit camera, 5 ms exposure) instead of a source.
    #[arg(long, conflicts_with = "source")]
    simulate: bool,
    /// Frames per second of --simulate; 0: as fast as they are computed.
    #[arg(long, default_value_t = 100.0)]
    fps: f64,
    /// Seed of --simulate (the same seed gives the same frames).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Distinct frames --simulate makes before repeating them.
    #[arg(long, default_value_t = 16)]
    loop_frames: usize,
    /// Frame width in pixels (raw frames; --simulate: default 512).
    #[arg(long)]
    width: Option<usize>,
    /// Frame height in pixels (raw frames; --simulate: default 384).
    #[arg(long)]
    height: Option<usize>,
    /// Pixel type of raw frames: u8, u16 or f32 (little-endian).
    #[arg(long, default_value = "u16")]
    dtype: RawDtype,
    /// Read a raw file to its end instead of following it as it grows.
    #[arg(long)]
    no_follow: bool,
    /// Significant bits per pixel (e.g. 12 for a 12-bit camera); saturation is 2^bits - 1.
    #[arg(long)]
    bit_depth: Option<u32>,
    #[command(flatten)]
    contrast: ContrastOpts,
    /// What to show and record: k (contrast, dimensionless), sfi (1/s, needs --exposure) or
    /// inv-tau-c (1/tau_c in 1/s, needs --exposure and --beta).
    #[arg(long, default_value = "k")]
    quantity: String,
    /// Coherence factor beta for inv-tau-c (from `biogpu speckle calibrate`).
    #[arg(long)]
    beta: Option<f64>,
    /// Speckle model for inv-tau-c: lorentzian (unordered motion) or gaussian (ordered flow).
    #[arg(long, default_value = "lorentzian")]
    model: String,
    /// Address the page is served on; the default is this computer only.
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// Port of the page; 0 picks a free one (the URL is printed).
    #[arg(long, default_value_t = 8750)]
    port: u16,
    /// Folder for recordings: each goes into a new rec-NNN folder inside it.
    #[arg(long, default_value = "speckle-live-out")]
    out: PathBuf,
    /// Maps averaged for display at start (the page can change it).
    #[arg(long, default_value_t = 1)]
    average: usize,
    /// Stop after this many seconds (default: at Ctrl-C).
    #[arg(long)]
    duration: Option<f64>,
    /// Run for SECONDS without the page and print sustained frames/s and frame-in to
    /// map-ready latency (median, p99) as JSON.
    #[arg(long, value_name = "SECONDS")]
    bench: Option<f64>,
}

const K: Quantity = Quantity {
    name: "K",
    stem: "k",
    unit: "1",
    log: false,
};
const SFI: Quantity = Quantity {
    name: "SFI",
    stem: "sfi",
    unit: "1/s",
    log: true,
};
const INV_TAU: Quantity = Quantity {
    name: "1/tau_c",
    stem: "inv_tau_c",
    unit: "1/s",
    log: true,
};

/// Latencies of the first maps are left out of `--bench` figures (a GPU compiles its
/// kernels on the first frame).
const WARMUP_MAPS: usize = 5;

/// The quantity and how to get it from K.
fn quantity(a: &LiveArgs, exposure: Option<f64>) -> anyhow::Result<(Quantity, Convert)> {
    Ok(match a.quantity.as_str() {
        "k" | "K" => (K, Convert::K),
        "sfi" | "SFI" => {
            if exposure.is_none() {
                bail!("--quantity sfi needs --exposure (seconds)");
            }
            (SFI, Convert::Sfi)
        }
        "inv-tau-c" | "inv_tau_c" => {
            let Some(exposure_s) = exposure else {
                bail!("--quantity inv-tau-c needs --exposure (seconds)");
            };
            let Some(beta) = a.beta else {
                bail!(
                    "--quantity inv-tau-c needs --beta (measure it with `biogpu speckle \
                     calibrate` on a static target)"
                );
            };
            speckle_core::model::flow::check_beta(beta)?;
            let model = match a.model.as_str() {
                "lorentzian" => FlowModel::Lorentzian,
                "gaussian" => FlowModel::Gaussian,
                other => bail!("--model {other}: expected lorentzian or gaussian"),
            };
            (INV_TAU, Convert::inv_tau(exposure_s, beta, model))
        }
        other => bail!("--quantity {other}: expected k, sfi or inv-tau-c"),
    })
}

/// Open the source; its name for messages.
fn open(
    a: &LiveArgs,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<(source::Source, speckle_core::CameraInfo, String)> {
    if a.simulate {
        let spec = SimSpec {
            width: a.width.unwrap_or(512),
            height: a.height.unwrap_or(384),
            fps: a.fps,
            seed: a.seed,
            loop_frames: a.loop_frames,
        };
        if !(a.fps >= 0.0 && a.fps.is_finite()) {
            bail!("--fps {}: expected frames per second, 0 or more", a.fps);
        }
        let (s, c) = source::simulate(spec, Arc::clone(stop))?;
        let name = format!(
            "simulated flow phantom {}x{} at {} frames/s (seed {})",
            spec.width, spec.height, spec.fps, spec.seed
        );
        return Ok((s, c, name));
    }
    let path = a
        .source
        .clone()
        .context("SOURCE or --simulate is required")?;
    if path.is_dir() {
        let (s, c) = source::folder(&path, a.bit_depth, Arc::clone(stop))?;
        return Ok((s, c, format!("folder {}", path.display())));
    }
    let (Some(width), Some(height)) = (a.width, a.height) else {
        bail!(
            "{}: raw frames need --width and --height (and --dtype, default u16)",
            path.display()
        );
    };
    let layout = RawLayout {
        width,
        height,
        dtype: a.dtype,
        follow: !a.no_follow,
    };
    let (s, c) = source::raw(&path, layout, a.bit_depth, Arc::clone(stop))?;
    let name = if path.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    Ok((s, c, format!("{name} ({width}x{height} {})", a.dtype)))
}

/// A message for the user that never ends the process: the live view outlives a closed
/// terminal or a reader of its first line that has gone (stdout closed).
fn note(message: &str) {
    use std::io::Write;
    let _ = if crate::record::json_mode() {
        writeln!(std::io::stderr(), "{message}")
    } else {
        writeln!(std::io::stdout(), "{message}")
    };
}

/// A browser that closes a connection while the server answers it must not end the
/// process: ignore SIGPIPE (main restores its default action so that `biogpu ... | head`
/// ends quietly; writes then fail with EPIPE instead, which the server and [`note`] ignore).
fn survive_closed_connections() {
    #[cfg(unix)]
    // SAFETY: sets the action of one signal; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

pub fn run(a: &LiveArgs, device: &Device) -> anyhow::Result<()> {
    survive_closed_connections();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed));
    }
    let mut contrast = a.contrast.clone();
    if a.simulate && contrast.exposure.is_none() {
        contrast.exposure = Some(source::SIM_EXPOSURE_S);
    }
    let (q, convert) = quantity(a, contrast.exposure)?;
    if a.average == 0 {
        bail!("--average 0: expected 1 or more maps");
    }
    let (src, camera, name) = open(a, &stop)?;
    let p = super::params(&contrast, camera)?;
    let about = serde_json::json!({
        "source": name,
        "mode": format!("{:?}", p.mode).to_lowercase(),
        "window": (p.mode != Mode::Temporal).then_some(p.window.size()),
        "temporal_frames": (p.mode != Mode::Spatial).then_some(p.frames),
        "exposure_s": p.exposure_s,
        "beta": a.beta.filter(|_| matches!(convert, Convert::InvTau { .. })),
        "device": if p.mode == Mode::Temporal && device.is_gpu() {
            format!("{device}; temporal K of integer frames on the CPU (running sums)")
        } else {
            device.to_string()
        },
    });
    let settings = Settings {
        window: p.window.size(),
        auto: true,
        lo: 0.0,
        hi: 1.0,
        average: a.average,
    };
    let shared = Arc::new(Shared::new(
        q,
        settings,
        about,
        Arc::clone(&stop),
        a.bench.is_some(),
    ));
    if let Some(seconds) = a.bench {
        return bench(src, &p, convert, device, &shared, seconds);
    }
    let server = tiny_http::Server::http((a.bind.as_str(), a.port))
        .map_err(|e| anyhow::anyhow!("cannot serve on {}:{}: {e}", a.bind, a.port))?;
    let addr = server
        .server_addr()
        .to_ip()
        .context("the server has no IP address")?;
    note(&format!(
        "speckle live: {} of {name} on {device}; open http://{addr}/ (Ctrl-C stops)",
        q.name
    ));
    let out = a.out.clone();
    let web = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || server::serve(&server, &shared, &out))
    };
    let work = {
        let shared = Arc::clone(&shared);
        let device = device.clone();
        std::thread::spawn(move || pipeline::run(src, &p, &convert, &device, &shared))
    };
    let result = wait(&shared, work, a.duration);
    stop.store(true, Ordering::Relaxed);
    finish_recording(&shared);
    let _ = web.join();
    result
}

/// Until Ctrl-C, `--duration` or a source error; a source that ends cleanly leaves the
/// page up with its last map.
fn wait(
    shared: &Shared,
    work: std::thread::JoinHandle<anyhow::Result<()>>,
    duration: Option<f64>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut work = Some(work);
    while !shared.stopped() {
        if duration.is_some_and(|d| started.elapsed().as_secs_f64() >= d) {
            break;
        }
        if work
            .as_ref()
            .is_some_and(std::thread::JoinHandle::is_finished)
        {
            let done = work.take().expect("checked").join();
            match done {
                Ok(Ok(())) => {
                    shared.lock().ended = true;
                    note(&format!(
                        "the source ended after {} frames; the page stays up (Ctrl-C stops)",
                        shared.frames_in.load(Ordering::Relaxed)
                    ));
                }
                Ok(Err(e)) => {
                    shared.lock().error = Some(format!("{e:#}"));
                    return Err(e);
                }
                Err(_) => bail!("the computing thread panicked"),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Close a recording in progress and wait (a few seconds at most) for its summary.
fn finish_recording(shared: &Shared) {
    let before = {
        let mut s = shared.lock();
        if s.recording.take().is_none() {
            return;
        }
        s.recordings.len()
    };
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until && shared.lock().recordings.len() == before {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--bench SECONDS`: the pipeline alone; JSON on stdout.
fn bench(
    src: source::Source,
    p: &speckle_core::ContrastParams,
    convert: Convert,
    device: &Device,
    shared: &Arc<Shared>,
    seconds: f64,
) -> anyhow::Result<()> {
    if !(seconds > 0.0 && seconds.is_finite()) {
        bail!("--bench {seconds}: expected a duration in seconds");
    }
    {
        let stop = Arc::clone(&shared.stop);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(seconds));
            stop.store(true, Ordering::Relaxed);
        });
    }
    let started = Instant::now();
    pipeline::run(src, p, &convert, device, shared)?;
    let wall = started.elapsed().as_secs_f64();
    let s = shared.lock();
    let log = s.all_latencies.as_deref().unwrap_or_default();
    let size = s
        .latest
        .as_ref()
        .map(|m| [m.values.dim().1, m.values.dim().0]);
    let steady = log.get(WARMUP_MAPS..).unwrap_or_default();
    let fps = match (steady.first(), steady.last()) {
        (Some(a), Some(b)) if steady.len() > 1 && b.0 > a.0 => {
            (steady.len() - 1) as f64 / b.0.duration_since(a.0).as_secs_f64()
        }
        _ => log.len() as f64 / wall,
    };
    let mut lat: Vec<f64> = steady.iter().map(|x| x.1).collect();
    let report = serde_json::json!({
        "frames_in": shared.frames_in.load(Ordering::Relaxed),
        "maps": log.len(),
        "seconds": wall,
        "frames_per_second": fps,
        "latency_ms_median": state::percentile(&mut lat, 50.0),
        "latency_ms_p99": state::percentile(&mut lat, 99.0),
        "warmup_maps_excluded": WARMUP_MAPS.min(log.len()),
        "map_size": size,
        "quantity": shared.quantity.name,
        "about": shared.about,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
