//! The live page in a real headless browser: the system's Chromium (`apt-get install -y
//! chromium`; the path in `CHROME` if set), driven over the DevTools protocol. The page
//! loads, the map updates, an ROI set through the page's inputs gets a time course, and the
//! record button writes files.

use crate::common::scratch;
use crate::speckle_live::{Live, wait};
use headless_chrome::{Browser, LaunchOptions, Tab};
use std::path::PathBuf;

/// The browser to drive; a missing one fails the test (it must not pass unseen).
fn chromium() -> PathBuf {
    let path = std::env::var_os("CHROME")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        path.exists(),
        "the live page's browser test needs Chromium at {}: install it with `apt-get install -y \
         chromium` (Debian), or set CHROME to its path",
        path.display()
    );
    path
}

/// The text of the element with this id.
fn text(tab: &Tab, id: &str) -> String {
    let v = tab
        .evaluate(
            &format!("document.getElementById('{id}').textContent"),
            false,
        )
        .unwrap()
        .value;
    v.and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// Every map drawn so far: (frame in to pixels on screen, frame in to map ready), ms.
fn screen_latencies(tab: &Tab) -> Vec<(f64, f64)> {
    let v = tab
        .evaluate("JSON.stringify(window.screenLatencies)", false)
        .unwrap()
        .value
        .unwrap();
    let pairs: Vec<[f64; 2]> = serde_json::from_str(v.as_str().unwrap()).unwrap();
    pairs.into_iter().map(|[a, b]| (a, b)).collect()
}

/// Chromium showing the page of `live` (the browser must outlive the tab).
fn open_page(live: &Live) -> (Browser, std::sync::Arc<Tab>) {
    let options = LaunchOptions::default_builder()
        .path(Some(chromium()))
        .headless(true)
        .sandbox(false)
        .window_size(Some((1280, 900)))
        .build()
        .unwrap();
    let browser = Browser::new(options).expect("launching Chromium");
    let tab = browser.new_tab().unwrap();
    // Not `wait_until_navigated`: the page never stops loading (it polls the map for ever).
    tab.navigate_to(&format!("http://{}/", live.addr)).unwrap();
    tab.wait_for_element("#frame").unwrap();
    (browser, tab)
}

#[test]
fn the_page_shows_live_maps_an_roi_course_and_records() {
    let out = scratch("live-browser");
    let live = Live::simulate(&[
        "--width",
        "128",
        "--height",
        "96",
        "--fps",
        "40",
        "--loop-frames",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--duration",
        "120",
    ]);
    let (_browser, tab) = open_page(&live);
    wait("the quantity on the page", || {
        (text(&tab, "qty") == "K").then_some(())
    });
    // The map updates: the frame counter on the page moves on.
    let first: u64 = wait("a first map on the page", || {
        text(&tab, "frame").parse().ok()
    });
    wait("a later map on the page", || {
        text(&tab, "frame")
            .parse::<u64>()
            .ok()
            .filter(|&f| f >= first + 10)
    });
    assert_eq!(text(&tab, "cb-unit"), "(dimensionless)");
    // Frame in to pixels on screen: after the map was ready, and not absurdly long.
    // (A loaded machine may draw fewer maps than the server makes: wait for ten.)
    let timings = wait("ten maps drawn with their latency", || {
        Some(screen_latencies(&tab)).filter(|t| t.len() >= 10)
    });
    for (screen, ready) in timings {
        // Date.now() counts whole milliseconds.
        assert!(
            screen >= ready - 1.0 && screen < 10_000.0,
            "{screen} ms, ready at {ready}"
        );
    }
    assert!(text(&tab, "screen").parse::<f64>().is_ok());
    // An ROI through the page's inputs: the plot gets points.
    tab.evaluate(
        "(() => { const s = (id, v) => document.getElementById(id).value = v; \
         s('roi-x', 10); s('roi-y', 40); s('roi-w', 60); s('roi-h', 16); })()",
        false,
    )
    .unwrap();
    tab.find_element("#roi-set").unwrap().click().unwrap();
    wait("ROI points on the page", || {
        text(&tab, "roi-count")
            .parse::<u64>()
            .ok()
            .filter(|&n| n >= 5)
    });
    let (_, roi) = live.json("GET", "/roi", "");
    assert_eq!(
        roi["roi"],
        serde_json::json!({"x": 10, "y": 40, "w": 60, "h": 16})
    );
    // The record button: one second of maps on disk.
    tab.evaluate("document.getElementById('rec-seconds').value = 1", false)
        .unwrap();
    tab.find_element("#record").unwrap().click().unwrap();
    let summary = out.join("rec-001").join("summary.json");
    wait("the recording from the page", || {
        summary.exists().then_some(())
    });
    let tifs = std::fs::read_dir(out.join("rec-001")).unwrap().count() - 1;
    assert!(tifs >= 20, "{tifs} maps recorded in 1 s at 40 frames/s");
    wait("the page to report the recording", || {
        text(&tab, "rec-status").starts_with("saved").then_some(())
    });
}

/// The benchmark of issue 26's "frame in to pixels on screen": the simulated phantom at
/// camera rate on this machine's CPU, the page in headless Chromium beside it, 20 s a
/// size; JSON lines on stdout for docs/benchmarks.md. Not a test (it asserts no speed):
/// `cargo test --release -p biogpu-cli --test integration -- --ignored --nocapture
/// screen_latency_benchmark`.
#[test]
#[ignore = "benchmark, run by hand"]
fn screen_latency_benchmark() {
    for (w, h, fps) in [(1392, 1040, 30), (2048, 2048, 30)] {
        let live = Live::simulate(&[
            "--width",
            &w.to_string(),
            "--height",
            &h.to_string(),
            "--fps",
            &fps.to_string(),
            "--duration",
            "60",
        ]);
        let (_browser, tab) = open_page(&live);
        std::thread::sleep(std::time::Duration::from_secs(5));
        let skip = screen_latencies(&tab).len();
        let seconds = 20.0;
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
        let all = screen_latencies(&tab);
        let (_, status) = live.json("GET", "/status", "");
        let mut screen: Vec<f64> = all[skip..].iter().map(|p| p.0).collect();
        let mut ready: Vec<f64> = all[skip..].iter().map(|p| p.1).collect();
        let pct = |v: &mut Vec<f64>, p: f64| {
            v.sort_by(f64::total_cmp);
            v.get(((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1)) - 1)
                .copied()
        };
        println!(
            "{}",
            serde_json::json!({
                "frames": [w, h],
                "camera_fps": fps,
                "maps_drawn_per_s": screen.len() as f64 / seconds,
                "screen_ms_median": pct(&mut screen, 50.0),
                "screen_ms_p99": pct(&mut screen, 99.0),
                "ready_ms_median_of_drawn": pct(&mut ready, 50.0),
                "server_maps_per_s": status["frames_per_second"],
                "device": status["about"]["device"],
            })
        );
    }
}
