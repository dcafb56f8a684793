//! The local web server of `speckle live` (HTTP on 127.0.0.1 by default): one
//! self-contained page and a few endpoints it polls. Requests are answered from the shared
//! state; none of them waits for the computation.
//!
//! | endpoint | what |
//! |---|---|
//! | `GET /` | the page |
//! | `GET /map` | the latest map, binary (see [`encode`]); `?after=N`: 204 until a later one |
//! | `GET /raw` | a recent raw frame, same format, grey |
//! | `GET /status` | JSON: frames in and computed, frames/s, latency, settings, recording |
//! | `POST /roi` | body `x,y,w,h` (map pixels): a new ROI; its time course starts over |
//! | `GET /roi` | JSON: the ROI and `[frame, seconds, mean]` points (`?since=FRAME`) |
//! | `POST /settings` | JSON `{window, auto, lo, hi, average}`, any subset |
//! | `POST /record?seconds=N` | record the next N seconds of maps into a new folder |

use super::record;
use super::state::{MapFrame, Rect, Shared};
use ndarray::parallel::prelude::*;
use ndarray::{Array2, ArrayView2, Axis, Zip};
use speckle_core::io::Frame;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tiny_http::{Header, Method, Request, Response, Server};

/// The page: plain HTML, CSS and JavaScript, no external assets (works offline).
const PAGE: &str = include_str!("page.html");
/// Maps wider or taller than this are averaged down in blocks for display.
const DISPLAY_MAX: usize = 1024;
/// Largest request body read (settings, ROI).
const BODY_MAX: u64 = 64 * 1024;
/// Largest window side the page may ask for (as `--window`).
const WINDOW_MAX: usize = 31;

/// Serve until `shared.stop` is set.
pub fn serve(server: &Server, shared: &Arc<Shared>, out: &Path) {
    while !shared.stopped() {
        match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(request)) => {
                let _ = handle(request, shared, out);
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("warning: web server: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
}

fn json(value: &serde_json::Value, code: u16) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_data(value.to_string().into_bytes())
        .with_status_code(code)
        .with_header(header("Content-Type", "application/json"))
        .with_header(header("Cache-Control", "no-store"))
}

fn error(message: &str, code: u16) -> Response<std::io::Cursor<Vec<u8>>> {
    json(&serde_json::json!({ "error": message }), code)
}

fn handle(mut request: Request, shared: &Arc<Shared>, out: &Path) -> std::io::Result<()> {
    let url = request.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let method = request.method().clone();
    let mut body = String::new();
    if method == Method::Post {
        request
            .as_reader()
            .take(BODY_MAX)
            .read_to_string(&mut body)?;
    }
    let response = match (&method, path) {
        (Method::Get, "/" | "/index.html") => Response::from_data(PAGE.as_bytes().to_vec())
            .with_header(header("Content-Type", "text/html; charset=utf-8")),
        (Method::Get, "/status") => json(&shared.status(), 200),
        (Method::Get, "/map") => {
            let (latest, settings) = {
                let s = shared.lock();
                (s.latest.clone(), s.settings)
            };
            // `after=N`: the page has map N; nothing to encode until a later one.
            let after = param(query, "after").and_then(|v| v.parse::<u64>().ok());
            match latest {
                Some(m) if after.is_some_and(|a| m.index <= a) => {
                    Response::from_data(Vec::new()).with_status_code(204)
                }
                Some(m) => binary(encode(
                    &m,
                    shared.quantity.log,
                    (!settings.auto).then_some((settings.lo, settings.hi)),
                )),
                None => error("no map yet", 503),
            }
        }
        (Method::Get, "/raw") => {
            shared.raw_wanted.store(true, Ordering::Relaxed);
            let raw = shared.lock().raw.clone();
            match raw {
                Some((index, frame)) => binary(encode_raw(index, &frame)),
                None => error("no raw frame yet", 503),
            }
        }
        (Method::Get, "/roi") => {
            let since = param(query, "since").and_then(|v| v.parse::<u64>().ok());
            let s = shared.lock();
            let points: Vec<_> = s
                .course
                .iter()
                .filter(|p| since.is_none_or(|f| p.0 > f))
                .map(|&(i, t, v)| {
                    serde_json::json!([i, t, if v.is_finite() { Some(v) } else { None }])
                })
                .collect();
            json(&serde_json::json!({ "roi": s.roi, "points": points }), 200)
        }
        (Method::Post, "/roi") => match parse_rect(&body) {
            Ok(r) => {
                let mut s = shared.lock();
                s.roi = Some(r);
                s.course.clear();
                json(&serde_json::json!({ "roi": r }), 200)
            }
            Err(e) => error(&e, 400),
        },
        (Method::Post, "/settings") => match settings(shared, &body) {
            Ok(v) => json(&v, 200),
            Err(e) => error(&e, 400),
        },
        (Method::Post, "/record") => {
            let seconds = param(query, "seconds").and_then(|v| v.parse::<f64>().ok());
            match seconds {
                None => error(
                    "POST /record?seconds=N: N (seconds) is missing or not a number",
                    400,
                ),
                Some(s) => match record::start(shared, out, s) {
                    Ok(folder) => json(&serde_json::json!({ "folder": folder, "seconds": s }), 200),
                    Err(e) => error(&format!("{e:#}"), 409),
                },
            }
        }
        _ => error(&format!("no such endpoint: {method} {path}"), 404),
    };
    request.respond(response)
}

fn binary(data: Vec<u8>) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_data(data)
        .with_header(header("Content-Type", "application/octet-stream"))
        .with_header(header("Cache-Control", "no-store"))
}

/// The value of `key` in a query string `a=1&b=2`.
fn param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// `x,y,w,h` (or the JSON object) in map pixels; the width and height at least 1.
pub fn parse_rect(body: &str) -> Result<Rect, String> {
    let body = body.trim();
    let r = if body.starts_with('{') {
        serde_json::from_str::<Rect>(body).map_err(|e| format!("ROI {body:?}: {e}"))?
    } else {
        let v: Vec<usize> = body
            .split(',')
            .map(|s| s.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("ROI {body:?}: expected x,y,w,h in whole pixels"))?;
        let [x, y, w, h] = v[..] else {
            return Err(format!("ROI {body:?}: expected four numbers x,y,w,h"));
        };
        Rect { x, y, w, h }
    };
    if r.w == 0 || r.h == 0 {
        return Err(format!(
            "ROI {body:?}: width and height must be at least 1 pixel"
        ));
    }
    Ok(r)
}

/// Apply the page's settings; the settings now in force.
fn settings(shared: &Shared, body: &str) -> Result<serde_json::Value, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Change {
        window: Option<usize>,
        auto: Option<bool>,
        lo: Option<f32>,
        hi: Option<f32>,
        average: Option<usize>,
    }
    let c: Change = serde_json::from_str(body).map_err(|e| format!("settings {body:?}: {e}"))?;
    let mut s = shared.lock();
    let mut next = s.settings;
    if let Some(w) = c.window {
        if !(3..=WINDOW_MAX).contains(&w) || w % 2 == 0 {
            return Err(format!(
                "window {w}: expected an odd side from 3 to {WINDOW_MAX}"
            ));
        }
        next.window = w;
    }
    next.auto = c.auto.unwrap_or(next.auto);
    next.lo = c.lo.unwrap_or(next.lo);
    next.hi = c.hi.unwrap_or(next.hi);
    let limits_ok = next.lo.is_finite() && next.hi.is_finite() && next.lo < next.hi;
    if !(next.auto || limits_ok) {
        return Err(format!(
            "colour limits {}..{}: expected finite lo < hi",
            next.lo, next.hi
        ));
    }
    if let Some(n) = c.average {
        if n == 0 || n > 1000 {
            return Err(format!("average {n}: expected 1 to 1000 maps"));
        }
        next.average = n;
    }
    if next.window != s.settings.window {
        shared.restart.store(true, Ordering::Relaxed);
    }
    s.settings = next;
    Ok(serde_json::to_value(next).unwrap_or_default())
}

/// Average `a` down in square blocks so that neither side exceeds [`DISPLAY_MAX`];
/// NaN-aware (a block of no finite value is NaN). Rows of blocks in parallel.
fn downsample(a: ArrayView2<'_, f32>) -> Array2<f32> {
    let (h, w) = a.dim();
    let f = h.max(w).div_ceil(DISPLAY_MAX).max(1);
    if f == 1 {
        return a.to_owned();
    }
    let (dh, dw) = (h.div_ceil(f), w.div_ceil(f));
    let mut out = Array2::zeros((dh, dw));
    out.axis_iter_mut(Axis(0))
        .into_par_iter()
        .enumerate()
        .for_each(|(y, mut row)| {
            let (mut sum, mut n) = (vec![0f32; dw], vec![0u32; dw]);
            let block = a.slice(ndarray::s![y * f..((y + 1) * f).min(h), ..]);
            for source in block.rows() {
                for (x, &v) in source.iter().enumerate() {
                    if v.is_finite() {
                        sum[x / f] += v;
                        n[x / f] += 1;
                    }
                }
            }
            for ((o, s), n) in row.iter_mut().zip(sum).zip(n) {
                *o = if n == 0 { f32::NAN } else { s / n as f32 };
            }
        });
    out
}

/// Values the colour limits are taken from at most: a regular sample of a larger map.
const LIMIT_SAMPLE: usize = 1 << 18;

/// The 1st and 99th percentiles of the finite (and, for a log scale, positive) values
/// (of every n-th value of a map of more than [`LIMIT_SAMPLE`]).
fn auto_limits(v: &Array2<f32>, log: bool) -> (f32, f32) {
    let mut x: Vec<f32> = v
        .iter()
        .step_by(v.len().div_ceil(LIMIT_SAMPLE).max(1))
        .copied()
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    if x.is_empty() {
        return (0.0, 1.0);
    }
    let n = x.len();
    let lo = *x.select_nth_unstable_by(n / 100, f32::total_cmp).1;
    let hi = *x
        .select_nth_unstable_by((n * 99 / 100).min(n - 1), f32::total_cmp)
        .1;
    if hi > lo {
        (lo, hi)
    } else {
        (lo, lo + lo.abs().max(1e-6))
    }
}

/// The binary map format, little-endian: u32 width, height (as sent), full width, full
/// height; f64 frame index, arrival time (s since start), latency (ms), colour limits lo and
/// hi; u32 1 for a log scale; then width x height bytes, row by row: 0..=254 from lo to hi
/// (on the log scale, log10), 255 for no value (NaN, or not positive on a log scale).
pub fn encode(m: &MapFrame, log: bool, fixed: Option<(f32, f32)>) -> Vec<u8> {
    let (fh, fw) = m.values.dim();
    let small = downsample(m.values.view());
    let (lo, hi) = fixed.unwrap_or_else(|| auto_limits(&small, log));
    pack(
        &small,
        (fw, fh),
        [m.index as f64, m.t_s, m.latency_ms],
        (lo, hi),
        log,
    )
}

fn encode_raw(index: u64, frame: &Frame) -> Vec<u8> {
    let f = frame.to_f32();
    let (fh, fw) = f.dim();
    let small = downsample(f.view());
    let lim = auto_limits(&small, false);
    pack(&small, (fw, fh), [index as f64, 0.0, 0.0], lim, false)
}

fn pack(
    v: &Array2<f32>,
    (fw, fh): (usize, usize),
    times: [f64; 3],
    (lo, hi): (f32, f32),
    log: bool,
) -> Vec<u8> {
    let (h, w) = v.dim();
    let mut out = Vec::with_capacity(60 + w * h);
    for d in [w, h, fw, fh] {
        out.extend_from_slice(&(d as u32).to_le_bytes());
    }
    for t in times {
        out.extend_from_slice(&t.to_le_bytes());
    }
    out.extend_from_slice(&f64::from(lo).to_le_bytes());
    out.extend_from_slice(&f64::from(hi).to_le_bytes());
    out.extend_from_slice(&u32::from(log).to_le_bytes());
    let tr = |x: f32| {
        if log {
            f64::from(x).log10()
        } else {
            f64::from(x)
        }
    };
    let (a, b) = (tr(lo), tr(hi));
    let scale = if b > a { 254.0 / (b - a) } else { 0.0 };
    let mut codes = Array2::<u8>::zeros((h, w));
    Zip::from(&mut codes).and(v).par_for_each(|c, &x| {
        *c = if !x.is_finite() || (log && x <= 0.0) {
            255
        } else {
            ((tr(x) - a) * scale).clamp(0.0, 254.0).round() as u8
        };
    });
    out.extend(codes.iter());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_is_packed_with_its_header_and_nan_as_255() {
        let mut values = Array2::from_shape_fn((2, 3), |(y, x)| (y * 3 + x) as f32);
        values[[1, 2]] = f32::NAN;
        let m = MapFrame {
            index: 7,
            t_s: 1.5,
            latency_ms: 3.0,
            values,
        };
        let b = encode(&m, false, Some((0.0, 4.0)));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let f64_at = |o: usize| f64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        assert_eq!([u32_at(0), u32_at(4), u32_at(8), u32_at(12)], [3, 2, 3, 2]);
        assert_eq!([f64_at(16), f64_at(24), f64_at(32)], [7.0, 1.5, 3.0]);
        assert_eq!([f64_at(40), f64_at(48)], [0.0, 4.0]);
        assert_eq!(u32_at(56), 0);
        assert_eq!(&b[60..], &[0, 64, 127, 191, 254, 255]);
    }

    #[test]
    fn large_maps_are_averaged_down_for_display() {
        let a = Array2::from_elem((2048, 1500), 2.0f32);
        let d = downsample(a.view());
        assert_eq!(d.dim(), (1024, 750));
        assert_eq!(d[[1023, 749]], 2.0);
    }

    #[test]
    fn rois_parse_from_text_or_json_and_empty_ones_are_refused() {
        let want = Rect {
            x: 1,
            y: 2,
            w: 3,
            h: 4,
        };
        assert_eq!(parse_rect("1, 2,3,4"), Ok(want));
        assert_eq!(parse_rect(r#"{"x":1,"y":2,"w":3,"h":4}"#), Ok(want));
        assert!(parse_rect("1,2,0,4").unwrap_err().contains("at least 1"));
        assert!(parse_rect("1,2,3").is_err());
    }
}
