//! Becker & Hickl `.spc` FIFO streams with their `.set` files. The files and the expected
//! histograms are written by `tests/data/make_spc.py`: for the point measurements the
//! expected decays are phconvert's (`bhreader.load_spc`) nanotimes per detector,
//! histogrammed with numpy, never biogpu's; the image's expected counts are the known
//! placement the script wrote. Bad inputs are mutated copies in a temporary folder.

use crate::common::Tmp;
use flim_core::io::{Format, ReadOptions, Recording, read};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Rows of `NAME.expected.csv` (header skipped), as integers.
fn rows(name: &str) -> Vec<Vec<u64>> {
    std::fs::read_to_string(data(&format!("{name}.expected.csv")))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
        .collect()
}

/// Every image's decay equals phconvert's histogram of its channel, bin for bin.
fn assert_point_matches(rec: &Recording, name: &str) {
    let mut want: BTreeMap<usize, BTreeMap<usize, u64>> = BTreeMap::new();
    for r in rows(name) {
        want.entry(r[0] as usize)
            .or_default()
            .insert(r[1] as usize, r[2]);
    }
    let got: Vec<usize> = rec.images.iter().map(|i| i.channel).collect();
    assert_eq!(got, want.keys().copied().collect::<Vec<_>>(), "{name}");
    for image in &rec.images {
        assert_eq!(image.cube.shape(), (1, 1), "{name}: a point measurement");
        let decay = image.cube.to_f32();
        let counts = decay.counts();
        let w = &want[&image.channel];
        assert!(counts.len_of(ndarray::Axis(2)) > *w.keys().last().unwrap());
        for (b, &c) in counts.iter().enumerate() {
            let e = w.get(&b).copied().unwrap_or(0);
            assert_eq!(c as u64, e, "{name}: channel {} bin {b}", image.channel);
        }
    }
}

#[test]
fn spc150_point_measurement_equals_phconvert() {
    let rec = read(&data("spc150_point.spc"), &ReadOptions::default()).unwrap();
    assert_eq!(rec.format, Format::Spc);
    assert_point_matches(&rec, "spc150_point.spc");
    // TAC 50.0032 ns / gain 4 / 4096 channels.
    let c = &rec.images[0].cube;
    assert!(
        (c.bin_ns() - 50.0032 / 4.0 / 4096.0).abs() < 1e-12,
        "{}",
        c.bin_ns()
    );
    assert!((c.period_ns() - 12.5008).abs() < 1e-9, "{}", c.period_ns());
    assert_eq!(rec.meta("module"), Some("SPC-150"));
    assert_eq!(rec.meta("ADC resolution"), Some("4096"));
    assert_eq!(rec.meta("macro-time clock ns"), Some("25.0"));
    // Counts the script printed: 2400 events, 16 invalid, 12 after a GAP.
    assert_eq!(rec.meta("photons"), Some("2384"));
    assert_eq!(rec.meta("invalid photons"), Some("16"));
    assert_eq!(
        rec.meta("GAP records (photons lost before them)"),
        Some("12")
    );
    assert!(
        rec.meta("laser period")
            .unwrap()
            .contains("not in the .set file")
    );
    assert_eq!(rec.meta("Title"), Some("spc150_point.spc"));
}

#[test]
fn spc830_adc256_drops_the_low_adc_bits_like_phconvert_nanotimes_shifted() {
    let rec = read(&data("spc830_adc256.spc"), &ReadOptions::default()).unwrap();
    assert_point_matches(&rec, "spc830_adc256.spc");
    let c = &rec.images[0].cube;
    assert!((c.bin_ns() - 20.0 / 2.0 / 256.0).abs() < 1e-12);
    assert!(c.bins() <= 256);
    assert_eq!(rec.meta("module"), Some("SPC-830"));
    assert_eq!(rec.meta("invalid photons"), Some("10"));
}

#[test]
fn binning_and_channel_selection_apply_to_spc() {
    let full = read(&data("spc150_point.spc"), &ReadOptions::default()).unwrap();
    let opts = ReadOptions::default().with_binning(8).with_channel(3);
    let rec = read(&data("spc150_point.spc"), &opts).unwrap();
    assert_eq!(rec.images.len(), 1);
    assert_eq!(rec.images[0].channel, 3);
    let fine = full.images[1].cube.to_f32();
    let coarse = rec.images[0].cube.to_f32();
    let fine = fine.counts();
    let coarse = coarse.counts();
    for (b, &c) in coarse.iter().enumerate() {
        let sum: f32 = fine.iter().skip(8 * b).take(8).sum();
        assert_eq!(c, sum, "bin {b}");
    }
    assert!((rec.images[0].cube.bin_ns() - 8.0 * full.images[1].cube.bin_ns()).abs() < 1e-12);
}

/// (frame, channel) -> (y, x, bin) -> count.
type ImageCounts = BTreeMap<(usize, usize), BTreeMap<(usize, usize, usize), u64>>;

#[test]
fn spc150_image_places_photons_between_line_markers() {
    let rec = read(&data("spc150_image.spc"), &ReadOptions::default()).unwrap();
    let mut want: ImageCounts = BTreeMap::new();
    for r in rows("spc150_image.spc") {
        want.entry((r[0] as usize, r[1] as usize))
            .or_default()
            .insert((r[2] as usize, r[3] as usize, r[4] as usize), r[5]);
    }
    let keys: Vec<(usize, usize)> = rec.images.iter().map(|i| (i.frame, i.channel)).collect();
    assert_eq!(keys, want.keys().copied().collect::<Vec<_>>());
    for image in &rec.images {
        assert_eq!(image.cube.shape(), (3, 4), "SP_IMG_Y x SP_IMG_X");
        let cube = image.cube.to_f32();
        let w = &want[&(image.frame, image.channel)];
        for ((y, x, b), &c) in cube.counts().indexed_iter() {
            let e = w.get(&(y, x, b)).copied().unwrap_or(0);
            assert_eq!(
                c as u64, e,
                "frame {} channel {} pixel ({y}, {x}) bin {b}",
                image.frame, image.channel
            );
        }
        assert!((image.cube.bin_ns() - 25.0 / 256.0).abs() < 1e-12);
    }
    assert_eq!(rec.meta("frames"), Some("2"));
    assert_eq!(rec.meta("photons in images"), Some("109"));
    assert_eq!(rec.meta("photons outside lines"), Some("5"));
    assert_eq!(rec.meta("markers pixel/line/frame/3"), Some("2/7/4/0"));
    let extra: u64 = rec
        .meta("photons in lines past the last image row")
        .unwrap()
        .parse()
        .unwrap();
    let photons: u64 = rec.meta("photons").unwrap().parse().unwrap();
    assert_eq!(photons, 109 + 5 + extra);
    assert!(extra > 0, "frame 0 has one line past SP_IMG_Y");

    // Frames summed: one image per channel, the sum of both frames.
    let summed = read(
        &data("spc150_image.spc"),
        &ReadOptions::default().with_sum_frames(true),
    )
    .unwrap();
    assert_eq!(summed.images.len(), 2);
    for image in &summed.images {
        let total: f32 = image.cube.to_f32().counts().iter().sum();
        let want_total: u64 = want
            .iter()
            .filter(|((_, c), _)| *c == image.channel)
            .flat_map(|(_, m)| m.values())
            .sum();
        assert_eq!(total as u64, want_total, "channel {}", image.channel);
    }
}

/// Copies of a fixture pair, changed by `spc` and `set`; the read's error text.
fn read_changed(
    tag: &str,
    fixture: &str,
    spc: impl FnOnce(&mut Vec<u8>),
    set: impl FnOnce(&mut Vec<u8>),
) -> String {
    let tmp = Tmp::new(tag);
    let mut a = std::fs::read(data(&format!("{fixture}.spc"))).unwrap();
    let mut b = std::fs::read(data(&format!("{fixture}.set"))).unwrap();
    spc(&mut a);
    set(&mut b);
    let path = tmp.0.join(format!("{fixture}.spc"));
    std::fs::write(&path, a).unwrap();
    std::fs::write(path.with_extension("set"), b).unwrap();
    read(&path, &ReadOptions::default()).map_or_else(|e| e.to_string(), |_| String::new())
}

/// Replace the text `from` by `to` in a `.set` file's bytes.
fn replace(bytes: &mut Vec<u8>, from: &str, to: &str) {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap_or_else(|| panic!("{from} not in the fixture"));
    bytes.splice(at..at + from.len(), to.bytes());
}

fn set_module(bytes: &mut [u8], code: u16) {
    bytes[..2].copy_from_slice(&((code << 4) | 15).to_le_bytes());
}

#[test]
fn a_missing_set_file_is_named_with_the_reason() {
    let tmp = Tmp::new("noset");
    let path = tmp.0.join("alone.spc");
    std::fs::copy(data("spc150_point.spc"), &path).unwrap();
    let e = read(&path, &ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("alone.set") && e.contains("alone.SET"), "{e}");
    assert!(
        e.contains("TAC range") && e.contains("width of a time bin"),
        "{e}"
    );
}

#[test]
fn the_uppercase_set_extension_is_found() {
    let tmp = Tmp::new("upper");
    let path = tmp.0.join("upper.spc");
    std::fs::copy(data("spc830_adc256.spc"), &path).unwrap();
    std::fs::copy(data("spc830_adc256.set"), tmp.0.join("upper.SET")).unwrap();
    let rec = read(&path, &ReadOptions::default()).unwrap();
    assert_point_matches(&rec, "spc830_adc256.spc");
}

#[test]
fn a_truncated_record_is_named() {
    let e = read_changed(
        "trunc",
        "spc150_point",
        |b| {
            let n = b.len() - 2;
            b.truncate(n);
        },
        |_| {},
    );
    assert!(
        e.contains("ends inside a record") && e.contains("record 2425 at byte 9704"),
        "{e}"
    );
    let e = read_changed("short", "spc150_point", |b| b.truncate(3), |_| {});
    assert!(e.contains("inside its 4-byte header record"), "{e}");
    let e = read_changed("empty", "spc150_point", |b| b.truncate(4), |_| {});
    assert!(e.contains("no photon of the 0 records"), "{e}");
}

#[test]
fn other_record_formats_are_refused_by_name() {
    for (code, name, why) in [
        (0x22, "SPC-630", "48-bit or 32-bit records"),
        (0x21, "SPC-600", "48-bit or 32-bit records"),
        (0x8c, "SPC-QC-004", "QC record layout"),
        (0x8e, "SPC-QC-006", "QC record layout"),
        (0x29, "DPC-230", "TDC records"),
        (0x27, "SPC-930", "no FIFO photon stream"),
    ] {
        let e = read_changed(name, "spc150_point", |_| {}, |s| set_module(s, code));
        assert!(e.contains(name) && e.contains(why), "{name}: {e}");
        assert!(e.contains("spc150_point.set"), "{e}");
    }
    let e = read_changed("unknown", "spc150_point", |_| {}, |s| set_module(s, 0x7f));
    assert!(
        e.contains("0x7f") && e.contains("not a known B&H module"),
        "{e}"
    );
    // A first record without bit 31 is no SPC-1xx header (e.g. a 48-bit SPC-600 stream).
    let e = read_changed("hdr", "spc150_point", |b| b[3] &= 0x7f, |_| {});
    assert!(e.contains("bit 31 is 0") && e.contains("byte 0"), "{e}");
    let e = read_changed("raw", "spc150_point", |b| b[3] |= 0x04, |_| {});
    assert!(e.contains("raw diagnostic"), "{e}");
    // Old software revision: the module is found by name in the text.
    let rec = read_changed(
        "oldrev",
        "spc150_point",
        |_| {},
        |s| {
            s[..2].copy_from_slice(&11u16.to_le_bytes());
            replace(
                s,
                "Title     : spc150_point.spc",
                "Title     : with module SPC-830",
            );
        },
    );
    assert_eq!(rec, "", "an SPC-830 named in the text reads");
    let e = read_changed(
        "oldrev2",
        "spc150_point",
        |_| {},
        |s| s[..2].copy_from_slice(&11u16.to_le_bytes()),
    );
    assert!(e.contains("predates the module type field"), "{e}");
}

#[test]
fn corrupt_set_values_are_clear_errors() {
    let cases: [(&str, &str, &str, &str); 10] = [
        (
            "tac0",
            "[SP_TAC_R,F,5.00032e-08]",
            "[SP_TAC_R,F,0]",
            "expected a TAC range > 0 s",
        ),
        (
            "tacnan",
            "[SP_TAC_R,F,5.00032e-08]",
            "[SP_TAC_R,F,abc]",
            "expected a number",
        ),
        (
            "tacg0",
            "[SP_TAC_G,I,4]",
            "[SP_TAC_G,I,0]",
            "expected a TAC gain of 1..=15",
        ),
        (
            "adc1000",
            "[SP_ADC_RE,I,4096]",
            "[SP_ADC_RE,I,1000]",
            "power of two",
        ),
        (
            "adc8192",
            "[SP_ADC_RE,I,4096]",
            "[SP_ADC_RE,I,8192]",
            "power of two",
        ),
        (
            "notac",
            "[SP_TAC_R,F,5.00032e-08]",
            "[SP_XTAC_R,F,5e-08]",
            "lacks SP_TAC_R",
        ),
        (
            "noadc",
            "[SP_ADC_RE,I,4096]",
            "[SP_XADC_RE,I,4096]",
            "lacks SP_ADC_RE",
        ),
        (
            "zoom",
            "[SP_ADC_ZOOM,I,0]",
            "[SP_ADC_ZOOM,I,18]",
            "zoomed ADC range",
        ),
        (
            "huge",
            "[SP_TAC_R,F,5.00032e-08]",
            "[SP_TAC_R,F,5e+03]",
            "bin width",
        ),
        (
            "slow",
            "[SP_TAC_R,F,5.00032e-08]",
            "[SP_TAC_R,F,1e-02]",
            "laser period",
        ),
    ];
    for (tag, from, to, want) in cases {
        let e = read_changed(tag, "spc150_point", |_| {}, |s| replace(s, from, to));
        assert!(e.contains(want), "{tag}: {e}");
        assert!(e.contains("spc150_point.set"), "{tag}: {e}");
    }
    let e = read_changed(
        "nosetup",
        "spc150_point",
        |_| {},
        |s| replace(s, "*SETUP", "*SETUQ"),
    );
    assert!(e.contains("no *SETUP section"), "{e}");
    let e = read_changed("shortset", "spc150_point", |_| {}, |s| s.truncate(20));
    assert!(e.contains("inside its 42-byte header"), "{e}");
    // Imaging without an image size, or without markers in the stream.
    let e = read_changed(
        "noimg",
        "spc150_image",
        |_| {},
        |s| replace(s, "[SP_IMG_X,I,4]", "[SP_IMG_X,I,0]"),
    );
    assert!(e.contains("SP_IMG_X") && e.contains("image size"), "{e}");
    let e = read_changed("nomark", "spc150_image", |b| b[3] &= !0x02, |_| {});
    assert!(e.contains("bit 25") && e.contains("markers"), "{e}");
    let e = read(
        &data("spc150_point.spc"),
        &ReadOptions::default().with_sync_channel(0),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--sync-channel"), "{e}");
}

#[test]
fn bit_flips_never_panic() {
    let spc = std::fs::read(data("spc150_image.spc")).unwrap();
    let set = std::fs::read(data("spc150_image.set")).unwrap();
    let tmp = Tmp::new("flips");
    let path = tmp.0.join("f.spc");
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for k in 0..300 {
        let (mut a, mut b) = (spc.clone(), set.clone());
        let target = if k % 2 == 0 { &mut a } else { &mut b };
        for _ in 0..=next() % 4 {
            let i = (next() % target.len() as u64) as usize;
            target[i] ^= 1 << (next() % 8);
        }
        std::fs::write(&path, &a).unwrap();
        std::fs::write(path.with_extension("set"), &b).unwrap();
        let _ = read(&path, &ReadOptions::default());
    }
}
