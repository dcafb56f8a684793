//! Error messages as a user meets them: each cause said once, negative numbers taken as values.

use std::process::Command;

fn biogpu(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_biogpu"))
        .args(["--device", "cpu"])
        .args(args)
        .output()
        .expect("starting biogpu");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_input_file_is_named_with_its_cause_once() {
    let dir = std::env::temp_dir().join(format!("biogpu-msg-{}", std::process::id()));
    let missing = dir.join("no-such-recording.tif");
    let (ok, err) = biogpu(&[
        "speckle",
        "contrast",
        missing.to_str().unwrap(),
        "--out",
        dir.join("out").to_str().unwrap(),
    ]);
    assert!(!ok, "a missing input must fail");
    assert!(err.contains("no-such-recording.tif"), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn a_negative_number_reaches_the_check_that_explains_it() {
    let dir = std::env::temp_dir().join(format!("biogpu-neg-{}", std::process::id()));
    let (ok, err) = biogpu(&[
        "perfusion",
        "simulate",
        "--cnr",
        "-5",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!ok, "a negative contrast-to-noise ratio must fail");
    assert!(!err.contains("unexpected argument"), "{err}");
    assert!(err.contains("cnr") && err.contains("> 0"), "{err}");
}

#[test]
fn a_strip_of_tiled_frames_suggests_frame_height() {
    let dir = std::env::temp_dir().join(format!("biogpu-strip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Eight 16x16 frames of 16-bit grey, stacked vertically in one PNG.
    let strip = dir.join("strip.png");
    let file = std::io::BufWriter::new(std::fs::File::create(&strip).unwrap());
    let mut png = png::Encoder::new(file, 16, 8 * 16);
    png.set_color(png::ColorType::Grayscale);
    png.set_depth(png::BitDepth::Sixteen);
    let pixels: Vec<u8> = (0..8 * 16 * 16)
        .flat_map(|i: u16| (100 + (i * 37) % 50).to_be_bytes())
        .collect();
    let mut writer = png.write_header().unwrap();
    writer.write_image_data(&pixels).unwrap();
    writer.finish().unwrap();
    let out = dir.join("out");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "speckle".to_string(),
            "contrast".into(),
            strip.to_str().unwrap().into(),
            "--mode".into(),
            "temporal".into(),
            "--frames".into(),
            "4".into(),
            "--out".into(),
            out.to_str().unwrap().into(),
        ];
        a.extend(extra.iter().map(ToString::to_string));
        a
    };
    let plain = args(&[]);
    let (ok, err) = biogpu(&plain.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!ok, "one tall image has no temporal contrast");
    assert!(err.contains("--frame-height 16"), "{err}");
    let tiled = args(&["--frame-height", "16"]);
    let (ok, err) = biogpu(&tiled.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "the strip read as 8 frames of 16x16: {err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_hyperstack_is_refused_by_its_axes_and_read_once_one_channel_and_slice_are_picked() {
    let dir = std::env::temp_dir().join(format!("biogpu-hyper-{}", std::process::id()));
    let stack = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../speckle-core/tests/data/hyperstack_tzcyx.tif");
    let stack = stack.to_str().unwrap();
    let out = dir.join("out");
    let line = |extra: &[&str]| {
        let mut v = vec![
            "speckle", "contrast", stack, "--mode", "temporal", "--frames", "2", "--out",
        ];
        v.push(out.to_str().unwrap());
        v.extend_from_slice(extra);
        v.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    let refused = line(&[]);
    let (ok, err) = biogpu(&refused.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!ok, "a TZCYX hyperstack must not be read as 24 frames");
    assert!(
        err.contains("2 channels x 3 slices x 4 frames") && err.contains("--channel"),
        "{err}"
    );
    let picked = line(&["--channel", "1", "--slice", "2", "--force"]);
    let (ok, err) = biogpu(&picked.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{err}");
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(summary.contains("\"frames\": 4"), "{summary}");
}
