//! `biogpu speckle live` without a browser: the web server's endpoints against
//! `--simulate`, and every source (stdin, a raw file, a growing raw file, a folder) through
//! `--bench`, which runs the same pipeline without the page.

use crate::common::{biogpu, scratch, stderr};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `speckle live` server, killed when dropped.
pub struct Live {
    child: Child,
    /// `127.0.0.1:PORT`
    pub addr: String,
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Live {
    /// Start `biogpu --device cpu speckle live --simulate --port 0 ARGS` and read the URL it
    /// prints.
    pub fn simulate(args: &[&str]) -> Live {
        let mut child = Command::new(env!("CARGO_BIN_EXE_biogpu"))
            .args([
                "--device",
                "cpu",
                "speckle",
                "live",
                "--simulate",
                "--port",
                "0",
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting biogpu");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let start = line
            .find("http://")
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            + 7;
        let addr = line[start..].split('/').next().unwrap().to_string();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            child.try_wait().unwrap().is_none(),
            "biogpu stopped: {:?}",
            child.try_wait()
        );
        Live { child, addr }
    }

    /// Status code and body of `METHOD path` with `body`.
    pub fn request(&self, method: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("headers end");
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let code = head.split(' ').nth(1).unwrap().parse().unwrap();
        (code, raw[split + 4..].to_vec())
    }

    pub fn json(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        let (code, b) = self.request(method, path, body);
        (code, serde_json::from_slice(&b).unwrap())
    }

    /// Wait (30 s at most) until `ok` holds for `/status`.
    pub fn wait_status(
        &self,
        what: &str,
        ok: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        wait(what, || {
            let (_, s) = self.json("GET", "/status", "");
            ok(&s).then_some(s)
        })
    }
}

/// Poll `f` every 50 ms for up to 30 s.
pub fn wait<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_server_serves_maps_an_roi_course_and_recordings_that_never_overwrite() {
    let out = scratch("live-server");
    let live = Live::simulate(&[
        "--width",
        "96",
        "--height",
        "64",
        "--fps",
        "50",
        "--loop-frames",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--duration",
        "60",
    ]);
    let (code, page) = live.request("GET", "/", "");
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&page).contains("<canvas id=\"map\""));
    let s = live.wait_status("20 maps", |s| s["frames_computed"].as_u64() >= Some(20));
    assert_eq!(s["quantity"], "K");
    assert_eq!(s["map_size"], serde_json::json!([96, 64]));
    // The map: a 60-byte header, then one byte per pixel.
    let (code, map) = live.request("GET", "/map", "");
    assert_eq!(code, 200);
    assert_eq!(map.len(), 60 + 96 * 64);
    assert_eq!(u32::from_le_bytes(map[0..4].try_into().unwrap()), 96);
    // The page asks only for a map later than the one it has.
    let index = f64::from_le_bytes(map[16..24].try_into().unwrap());
    let (code, none) = live.request("GET", &format!("/map?after={}", u64::MAX - 1), "");
    assert_eq!((code, none.len()), (204, 0));
    let (code, _) = live.request("GET", &format!("/map?after={}", index as u64 - 1), "");
    assert_eq!(code, 200);
    // Bad requests are refused with a reason, and the server carries on.
    let (code, e) = live.json("POST", "/roi", "1,2,0,4");
    assert_eq!(code, 400, "{e}");
    let (code, e) = live.json("POST", "/settings", r#"{"window":8}"#);
    assert_eq!(code, 400);
    assert!(e["error"].as_str().unwrap().contains("odd"), "{e}");
    assert_eq!(live.json("POST", "/record?seconds=abc", "").0, 400);
    // An ROI over the vessel: its time course gets one point per frame from now on.
    let (code, _) = live.json("POST", "/roi", "10,24,40,16");
    assert_eq!(code, 200);
    let course = wait("10 ROI points", || {
        let (_, r) = live.json("GET", "/roi", "");
        (r["points"].as_array().unwrap().len() >= 10).then_some(r)
    });
    let points = course["points"].as_array().unwrap();
    let frames: Vec<u64> = points.iter().map(|p| p[0].as_u64().unwrap()).collect();
    assert!(
        frames.windows(2).all(|w| w[1] == w[0] + 1),
        "every frame: {frames:?}"
    );
    let k = points[0][2].as_f64().unwrap();
    assert!(k > 0.0 && k < 1.0, "K in the vessel {k}");
    // Settings: a new window restarts the computation, averaging is accepted.
    let (code, set) = live.json("POST", "/settings", r#"{"window":9,"average":4}"#);
    assert_eq!((code, set["window"].as_u64()), (200, Some(9)));
    // Two recordings of 0.5 s: two folders, every frame of each written.
    for n in 1..=2 {
        let (code, r) = live.json("POST", "/record?seconds=0.5", "");
        assert_eq!(code, 200, "{r}");
        let dir = out.join(format!("rec-00{n}"));
        assert_eq!(Path::new(r["folder"].as_str().unwrap()), dir);
        let summary = dir.join("summary.json");
        wait("the recording's summary", || summary.exists().then_some(()));
        let sum: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        let tifs = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "tif")
            })
            .count();
        let frames = sum["frames"].as_u64().unwrap() as usize;
        assert_eq!(tifs, frames);
        // 50 frames/s for 0.5 s, give or take the edges.
        assert!(
            (20..=30).contains(&frames),
            "{frames} maps in 0.5 s at 50 frames/s"
        );
        let list = sum["frame_list"].as_array().unwrap();
        let idx: Vec<u64> = list.iter().map(|f| f["frame"].as_u64().unwrap()).collect();
        assert!(
            idx.windows(2).all(|w| w[1] == w[0] + 1),
            "no frame dropped: {idx:?}"
        );
        assert_eq!(sum["settings_at_end"]["window"], 9);
    }
}

/// `n` frames of `w x h` u16, little-endian, each pixel different.
fn raw_frames(n: usize, w: usize, h: usize) -> Vec<u8> {
    (0..n * w * h)
        .flat_map(|i| (((i * 7919) % 3001) as u16 + 100).to_le_bytes())
        .collect()
}

fn bench_json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

/// `biogpu speckle live - ARGS` with `input` on stdin.
fn live_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_biogpu"))
        .args(["--device", "cpu", "speckle", "live", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

#[test]
fn every_frame_on_stdin_is_computed_and_timed() {
    let o = live_stdin(
        &[
            "--width", "40", "--height", "30", "--dtype", "u16", "--bench", "60",
        ],
        &raw_frames(12, 40, 30),
    );
    let j = bench_json(&o);
    assert_eq!(j["frames_in"], 12);
    assert_eq!(j["maps"], 12);
    assert_eq!(j["map_size"], serde_json::json!([40, 30]));
    assert!(j["latency_ms_median"].as_f64().unwrap() >= 0.0);
    assert!(
        j["about"]["source"]
            .as_str()
            .unwrap()
            .starts_with("stdin (40x30 u16)")
    );
}

#[test]
fn a_truncated_frame_on_stdin_is_an_error_naming_stdin_and_the_frame() {
    let mut input = raw_frames(3, 40, 30);
    input.truncate(input.len() - 100);
    let o = live_stdin(
        &["--width", "40", "--height", "30", "--bench", "60"],
        &input,
    );
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("stdin") && e.contains("frame 2") && e.contains("--width"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn temporal_maps_start_once_the_window_is_full() {
    let o = live_stdin(
        &[
            "--width", "24", "--height", "16", "--mode", "temporal", "--frames", "5", "--bench",
            "60",
        ],
        &raw_frames(9, 24, 16),
    );
    let j = bench_json(&o);
    assert_eq!(
        (j["frames_in"].as_u64(), j["maps"].as_u64()),
        (Some(9), Some(5))
    );
}

#[test]
fn a_raw_file_is_read_to_its_end_or_followed_as_it_grows() {
    let dir = scratch("live-raw-file");
    let file = dir.join("frames.raw");
    std::fs::write(&file, raw_frames(4, 32, 20)).unwrap();
    let f = file.to_str().unwrap();
    let size = ["--width", "32", "--height", "20"];
    let o = biogpu(
        &[
            &["speckle", "live", f, "--no-follow", "--bench", "60"],
            &size[..],
        ]
        .concat(),
    );
    assert_eq!(bench_json(&o)["maps"], 4);
    // Followed: frames appended while it runs are computed too.
    let child = Command::new(env!("CARGO_BIN_EXE_biogpu"))
        .args(["--device", "cpu", "speckle", "live", f, "--bench", "3"])
        .args(size)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let more = raw_frames(3, 32, 20);
    let mut w = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    // Half a frame first: the reader waits for the rest instead of failing.
    w.write_all(&more[..640]).unwrap();
    w.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    w.write_all(&more[640..]).unwrap();
    drop(w);
    let j = bench_json(&child.wait_with_output().unwrap());
    assert_eq!(j["frames_in"], 7);
}

/// A 16-bit grey PNG of `w x h`.
fn png16(path: &Path, w: u32, h: u32, seed: u32) {
    let mut enc = png::Encoder::new(std::fs::File::create(path).unwrap(), w, h);
    enc.set_color(png::ColorType::Grayscale);
    enc.set_depth(png::BitDepth::Sixteen);
    let data: Vec<u8> = (0..w * h)
        .flat_map(|i| (((i * 7919 + seed * 31) % 2001) as u16 + 50).to_be_bytes())
        .collect();
    enc.write_header().unwrap().write_image_data(&data).unwrap();
}

#[test]
fn a_folder_gives_one_frame_per_file_and_names_an_unreadable_one() {
    let dir = scratch("live-folder");
    for i in 0..3 {
        png16(&dir.join(format!("f{i:03}.png")), 30, 20, i);
    }
    let d = dir.to_str().unwrap();
    let j = bench_json(&biogpu(&["speckle", "live", d, "--bench", "1.5"]));
    assert_eq!(
        (j["frames_in"].as_u64(), j["maps"].as_u64()),
        (Some(3), Some(3))
    );
    std::fs::write(dir.join("f003.png"), b"not a png at all").unwrap();
    let o = biogpu(&["speckle", "live", d, "--bench", "5"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("f003.png") && e.contains("frame 3"), "{e}");
}

#[test]
fn options_that_cannot_work_are_refused_before_any_frame() {
    let o = biogpu(&[
        "speckle",
        "live",
        "--simulate",
        "--quantity",
        "inv-tau-c",
        "--bench",
        "1",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--beta"), "{}", stderr(&o));
    let o = biogpu(&["speckle", "live", "-", "--bench", "1"]);
    assert!(
        stderr(&o).contains("--width and --height"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn simulated_inv_tau_c_runs_through_the_flow_inversion() {
    let o = biogpu(&[
        "speckle",
        "live",
        "--simulate",
        "--width",
        "64",
        "--height",
        "48",
        "--loop-frames",
        "2",
        "--fps",
        "0",
        "--quantity",
        "inv-tau-c",
        "--beta",
        "1",
        "--bench",
        "1",
    ]);
    let j = bench_json(&o);
    assert_eq!(j["quantity"], "1/tau_c");
    assert!(j["maps"].as_u64().unwrap() > 5, "{j}");
}
