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

#[test]
fn the_page_shows_live_maps_an_roi_course_and_records() {
    let browser_path = chromium();
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
    let options = LaunchOptions::default_builder()
        .path(Some(browser_path))
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
