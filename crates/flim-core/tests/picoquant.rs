//! PicoQuant photon streams and histograms read bit-identically to phconvert's decoding:
//! T2 `.ptu` (HydraHarp with recorded syncs, PicoHarp with a named sync input), `.pt3`,
//! `.ht3` 1.0 and `.phu`. The files and the expected histograms are written by
//! `tests/data/make_picoquant.py` (expected = phconvert's timestamps, detectors and
//! nanotimes, histogrammed with numpy).

use flim_core::io::{Format, ReadOptions, Recording, read};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// channel -> bin -> count, from `NAME.expected.csv`.
fn expected(name: &str) -> BTreeMap<usize, BTreeMap<usize, u64>> {
    let text = std::fs::read_to_string(data(&format!("{name}.expected.csv"))).unwrap();
    let mut out: BTreeMap<usize, BTreeMap<usize, u64>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        let v: Vec<u64> = line.split(',').map(|x| x.parse().unwrap()).collect();
        out.entry(v[0] as usize)
            .or_default()
            .insert(v[1] as usize, v[2]);
    }
    out
}

/// Every image's decay equals the expected histogram of its channel, bin for bin.
fn assert_matches(rec: &Recording, name: &str) {
    let want = expected(name);
    let got_channels: Vec<usize> = rec.images.iter().map(|i| i.channel).collect();
    assert_eq!(
        got_channels,
        want.keys().copied().collect::<Vec<_>>(),
        "{name}: channels"
    );
    for image in &rec.images {
        assert_eq!(image.cube.shape(), (1, 1), "{name}: a point measurement");
        let decay = image.cube.to_f32();
        let counts = decay.counts();
        let w = &want[&image.channel];
        let last = *w.keys().last().unwrap();
        assert!(
            counts.len_of(ndarray::Axis(2)) > last,
            "{name}: too few bins"
        );
        for (b, &c) in counts.iter().enumerate() {
            let e = w.get(&b).copied().unwrap_or(0);
            assert_eq!(c as u64, e, "{name}: channel {} bin {b}", image.channel);
        }
    }
}

#[test]
fn hydraharp_t2_pairs_photons_with_the_recorded_sync() {
    let rec = read(&data("hydraharp_t2.ptu"), &ReadOptions::default()).unwrap();
    assert_matches(&rec, "hydraharp_t2.ptu");
    let c = &rec.images[0].cube;
    assert!(
        (c.bin_ns() - 0.001).abs() < 1e-12,
        "1 ps ticks: {}",
        c.bin_ns()
    );
    assert!((c.period_ns() - 12.5).abs() < 1e-9);
    assert_eq!(rec.meta("record type"), Some("HydraHarp V2 T2"));
    assert_eq!(rec.meta("T2 sync"), Some("recorded sync events"));
    assert_eq!(rec.meta("T2 sync events"), Some("4000"));
}

#[test]
fn picoharp_t2_needs_the_sync_input_named_and_then_matches() {
    let e = read(&data("picoharp_t2.ptu"), &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--sync-channel") && e.contains("picoharp_t2.ptu"),
        "{e}"
    );
    let rec = read(
        &data("picoharp_t2.ptu"),
        &ReadOptions::default().with_sync_channel(0),
    )
    .unwrap();
    assert_matches(&rec, "picoharp_t2.ptu");
    assert!((rec.images[0].cube.bin_ns() - 0.004).abs() < 1e-12);
    // An input that saw nothing cannot be the sync.
    let e = read(
        &data("picoharp_t2.ptu"),
        &ReadOptions::default().with_sync_channel(3),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("input 3") && e.contains("no event"), "{e}");
}

#[test]
fn t3_files_refuse_a_sync_channel() {
    for name in ["hazelnut_head.ptu", "picoharp.pt3", "hydraharp_v1.ht3"] {
        let e = read(&data(name), &ReadOptions::default().with_sync_channel(0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--sync-channel") && e.contains("T3"),
            "{name}: {e}"
        );
    }
}

#[test]
fn pt3_reads_like_phconvert() {
    let rec = read(&data("picoharp.pt3"), &ReadOptions::default()).unwrap();
    assert_eq!(rec.format, Format::Pt3);
    assert_matches(&rec, "picoharp.pt3");
    let c = &rec.images[0].cube;
    assert!((c.bin_ns() - f64::from(0.016f32)).abs() < 1e-12);
    assert!((c.period_ns() - 25.0).abs() < 1e-9);
}

#[test]
fn ht3_reads_like_phconvert() {
    let rec = read(&data("hydraharp_v1.ht3"), &ReadOptions::default()).unwrap();
    assert_eq!(rec.format, Format::Ht3);
    assert_matches(&rec, "hydraharp_v1.ht3");
    let c = &rec.images[0].cube;
    assert!((c.bin_ns() - 0.004).abs() < 1e-12);
    assert!((c.period_ns() - 50.0).abs() < 1e-9);
}

#[test]
fn phu_curves_read_like_phconvert() {
    let rec = read(&data("curves.phu"), &ReadOptions::default()).unwrap();
    assert_eq!(rec.format, Format::Phu);
    assert_matches(&rec, "curves.phu");
    assert!((rec.images[0].cube.bin_ns() - 0.008).abs() < 1e-12);
    assert!((rec.images[1].cube.bin_ns() - 0.016).abs() < 1e-12);
    assert!((rec.images[1].cube.period_ns() - 25.0).abs() < 1e-9);
}

#[test]
fn binning_and_channel_selection_apply_to_legacy_streams() {
    let rec = read(
        &data("hydraharp_v1.ht3"),
        &ReadOptions::default().with_channel(1).with_binning(8),
    )
    .unwrap();
    assert_eq!(rec.images.len(), 1);
    assert_eq!(rec.images[0].channel, 1);
    let want = &expected("hydraharp_v1.ht3")[&1];
    let got = rec.images[0].cube.to_f32();
    for (b, &c) in got.counts().iter().enumerate() {
        let e: u64 = (8 * b..8 * b + 8)
            .map(|k| want.get(&k).copied().unwrap_or(0))
            .sum();
        assert_eq!(c as u64, e, "bin {b}");
    }
}

#[test]
fn pt3_with_an_image_header_is_refused_with_a_way_out() {
    let mut b = std::fs::read(data("picoharp.pt3")).unwrap();
    b[724..728].copy_from_slice(&4i32.to_le_bytes());
    let dir = std::env::temp_dir().join(format!("flim-pt3-img-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("image.pt3");
    std::fs::write(&p, &b).unwrap();
    let e = read(&p, &ReadOptions::default()).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(e.contains("image header") && e.contains(".ptu"), "{e}");
}
