//! Readers and writers: round trips through every format, hand-made PicoQuant files with known
//! photon positions, slices of real B&H and PicoQuant files (tests/data), and truncated or
//! corrupt input, whose errors must name the file, the part and the byte offset.
//!
//! Optional tests over the full real recordings run when `BIOGPU_FLIM_DATA` names the folder
//! holding them (`seminal_receptacle_FLIM_single_image.sdt`, `hazelnut_FLIM_single_image.ptu`);
//! their reference numbers come from cgohlke's `sdtfile` 2026.2.8 and `ptufile` 2026.2.6.

use crate::common::Tmp;
use flim_core::AnyCube;
use flim_core::Cube;
use flim_core::io::{Format, ReadOptions, read, read_ptu_header, write_npy, write_sdt, write_tiff};
use flim_core::sim::mono_exponential;
use ndarray::{Array3, Axis};
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn u16s(c: &AnyCube) -> Array3<u16> {
    match c {
        AnyCube::U16(c) => c.counts().to_owned(),
        other => panic!("u16 expected, got {}", other.dtype()),
    }
}

fn cube(seed: u64, tau: f64) -> Cube<u16> {
    mono_exponential(&[tau], 3, 5, 64, 0.2, 12.8, 800.0, seed).unwrap()
}

fn err_text(r: flim_core::Result<impl std::fmt::Debug>) -> String {
    r.expect_err("an error was expected").to_string()
}

// ---------------------------------------------------------------- .sdt

#[test]
fn sdt_round_trips_blocks_and_channels_raw_and_zipped() {
    let tmp = Tmp::new("sdt");
    // Two blocks (e.g. two z-planes) of two routing channels each.
    let blocks = vec![
        vec![cube(1, 1.0), cube(2, 2.0)],
        vec![cube(3, 3.0), cube(4, 4.0)],
    ];
    for zipped in [false, true] {
        let path = tmp.path(&format!("x{zipped}.sdt"));
        write_sdt(&path, &blocks, zipped).unwrap();
        let rec = read(&path, &ReadOptions::default()).unwrap();
        assert_eq!(rec.format, Format::Sdt);
        let labels: Vec<_> = rec.images.iter().map(|i| (i.block, i.channel)).collect();
        assert_eq!(
            labels,
            [(0, 0), (0, 1), (1, 0), (1, 1)],
            "kept apart, in file order"
        );
        for (img, want) in rec.images.iter().zip(blocks.iter().flatten()) {
            assert_eq!(u16s(&img.cube), want.counts());
            assert!(
                (img.cube.bin_ns() - 0.2).abs() < 1e-6,
                "{}",
                img.cube.bin_ns()
            );
            assert!(
                (img.cube.period_ns() - 12.8).abs() < 1e-4,
                "{}",
                img.cube.period_ns()
            );
        }
        assert_eq!(rec.images[3].label(&rec), "b1_c1");
        // Selection of one block and channel.
        let one = read(&path, &ReadOptions::default().with_block(1).with_channel(0)).unwrap();
        assert_eq!(one.images.len(), 1);
        assert_eq!(u16s(&one.images[0].cube), blocks[1][0].counts());
        assert!(
            err_text(read(&path, &ReadOptions::default().with_block(5))).contains("no image left")
        );
    }
}

#[test]
fn sdt_with_a_real_spc160_header_reads_like_sdtfile() {
    // Header, info, setup and measurement description of the real SPC-160 file, its image
    // size patched to 4 x 4, with a new zipped data block (made with Python's zipfile).
    let rec = read(&data("bh_spc160_4x4.sdt"), &ReadOptions::default()).unwrap();
    assert_eq!(rec.images.len(), 1);
    let c = u16s(&rec.images[0].cube);
    assert_eq!(c.dim(), (4, 4, 256));
    assert_eq!(c.iter().map(|&v| u64::from(v)).sum::<u64>(), 1_117_309);
    assert_eq!(
        c.index_axis(Axis(0), 1)
            .index_axis(Axis(0), 2)
            .iter()
            .map(|&v| u64::from(v))
            .sum::<u64>(),
        57_891
    );
    assert_eq!(
        c.slice(ndarray::s![3, 3, ..5]).to_vec(),
        [3162, 3277, 3031, 3002, 2902]
    );
    // TAC range 50.03 ns / gain 4 / 256 bins; sync rate 80.07 MHz measured.
    assert!((rec.images[0].cube.bin_ns() - 0.048_860_9).abs() < 1e-6);
    assert!((rec.images[0].cube.period_ns() - 12.4885).abs() < 1e-3);
    assert_eq!(rec.meta("module"), Some("SPC-160"));
    assert_eq!(rec.meta("info id"), Some("SPC FCS Data File"));
}

#[test]
fn sdt_truncated_or_corrupt_names_the_block_and_offset() {
    let tmp = Tmp::new("sdt-bad");
    let good = std::fs::read(data("bh_spc160_4x4.sdt")).unwrap();
    // Cut inside the zipped data block.
    let cut = tmp.path("cut.sdt");
    std::fs::write(&cut, &good[..good.len() - 100]).unwrap();
    let e = err_text(read(&cut, &ReadOptions::default()));
    assert!(
        e.contains("cut.sdt") && e.contains("data block 0") && e.contains("31946"),
        "{e}"
    );
    // Cut inside the measurement description block.
    let short = tmp.path("short.sdt");
    std::fs::write(&short, &good[..30_000]).unwrap();
    let e = err_text(read(&short, &ReadOptions::default()));
    assert!(
        e.contains("measurement description block 0") && e.contains("29876"),
        "{e}"
    );
    // Garbage in the compressed data.
    let mut bad = good.clone();
    for b in &mut bad[31_946 + 40..31_946 + 200] {
        *b ^= 0x5a;
    }
    let corrupt = tmp.path("corrupt.sdt");
    std::fs::write(&corrupt, &bad).unwrap();
    let e = err_text(read(&corrupt, &ReadOptions::default()));
    assert!(
        e.contains("data block 0") && e.contains("compressed data"),
        "{e}"
    );
    // Not an .sdt at all, and a file shorter than the header.
    let other = tmp.path("other.sdt");
    std::fs::write(&other, [7u8; 64]).unwrap();
    assert!(err_text(read(&other, &ReadOptions::default())).contains("not a Becker & Hickl"));
    std::fs::write(&other, [0u8; 10]).unwrap();
    let e = err_text(read(&other, &ReadOptions::default()));
    assert!(e.contains("file header") && e.contains("truncated"), "{e}");
    // A block whose size fits no geometry.
    let mut wrong = good;
    wrong[31_924 + 18..31_924 + 22].copy_from_slice(&1000u32.to_le_bytes());
    let geo = tmp.path("geo.sdt");
    std::fs::write(&geo, &wrong).unwrap();
    let e = err_text(read(&geo, &ReadOptions::default()));
    assert!(
        e.contains("data block 0") && e.contains("fit neither"),
        "{e}"
    );
}

// ---------------------------------------------------------------- .ptu

/// Builds PicoQuant files tag by tag.
struct Ptu {
    bytes: Vec<u8>,
}

impl Ptu {
    fn new() -> Self {
        let mut bytes = b"PQTTTR\0\0".to_vec();
        bytes.extend_from_slice(b"1.0.00\0\0");
        Self { bytes }
    }
    fn tag(mut self, name: &str, kind: u32, value: [u8; 8], extra: &[u8]) -> Self {
        let mut n = [0u8; 32];
        n[..name.len()].copy_from_slice(name.as_bytes());
        self.bytes.extend_from_slice(&n);
        self.bytes.extend_from_slice(&(-1i32).to_le_bytes());
        self.bytes.extend_from_slice(&kind.to_le_bytes());
        self.bytes.extend_from_slice(&value);
        self.bytes.extend_from_slice(extra);
        self
    }
    fn int(self, name: &str, v: i64) -> Self {
        self.tag(name, 0x1000_0008, v.to_le_bytes(), &[])
    }
    fn float(self, name: &str, v: f64) -> Self {
        self.tag(name, 0x2000_0008, v.to_le_bytes(), &[])
    }
    fn text(self, name: &str, v: &str) -> Self {
        let mut s = v.as_bytes().to_vec();
        s.resize(v.len().div_ceil(8) * 8 + 8, 0);
        self.tag(
            name,
            0x4001_FFFF,
            (s.len() as i64).to_le_bytes(),
            &s.clone(),
        )
    }
    /// An image header: PicoHarp T3, 4 x 2 pixels, markers 1/2/3, 100 ps bins, 80 MHz.
    fn picoharp_image(records: usize) -> Self {
        Self::new()
            .text("HW_Type", "PicoHarp")
            .tag("File_Comment", 0xFFFF_0008, [0; 8], &[])
            .int("Measurement_SubMode", 3)
            .int("TTResultFormat_TTTRRecType", 0x0001_0303)
            .int("TTResult_NumberOfRecords", records as i64)
            .float("MeasDesc_Resolution", 100e-12)
            .float("MeasDesc_GlobalResolution", 12.5e-9)
            .int("ImgHdr_PixX", 4)
            .int("ImgHdr_PixY", 2)
            .int("ImgHdr_LineStart", 1)
            .int("ImgHdr_LineStop", 2)
            .int("ImgHdr_Frame", 3)
    }
    fn records(self, recs: &[u32]) -> Vec<u8> {
        let mut b = self.tag("Header_End", 0xFFFF_0008, [0; 8], &[]).bytes;
        for r in recs {
            b.extend_from_slice(&r.to_le_bytes());
        }
        b
    }
}

/// PicoHarp T3 records.
fn photon(chan: u32, dtime: u32, sync: u32) -> u32 {
    (chan << 28) | (dtime << 16) | sync
}
fn marker(bits: u32, sync: u32) -> u32 {
    (15 << 28) | (bits << 16) | sync
}
const OVERFLOW: u32 = 15 << 28;
const START: u32 = 1;
const STOP: u32 = 2;
const FRAME: u32 = 4;

/// Two frames of 4 x 2 pixels; lines span 400 syncs (100 per pixel). Frame 1's second line
/// crosses a sync overflow. Photons outside lines must be dropped.
fn two_frames() -> Vec<u32> {
    vec![
        photon(1, 9, 50), // before any line: dropped
        marker(START, 100),
        photon(1, 10, 150), // line 0, x 0
        photon(1, 11, 250), // x 1
        photon(2, 12, 260), // channel 1, x 1
        photon(1, 13, 499), // x 3
        marker(STOP, 500),
        photon(1, 14, 600), // between lines: dropped
        marker(START, 1000),
        photon(1, 20, 1399), // line 1, x 3
        marker(STOP, 1400),
        marker(FRAME, 1500),
        marker(START, 2000),
        photon(1, 30, 2050), // frame 1, line 0, x 0
        marker(STOP, 2400),
        marker(START, 65_400),
        OVERFLOW,
        photon(1, 40, 64), // sync 65600: line 1, x 2 (65400 + 200)
        marker(STOP, 264), // 65800
        marker(FRAME, 300),
    ]
}

#[test]
fn ptu_photons_land_on_their_pixels_frames_and_channels() {
    let tmp = Tmp::new("ptu");
    let recs = two_frames();
    let path = tmp.path("img.ptu");
    std::fs::write(&path, Ptu::picoharp_image(recs.len()).records(&recs)).unwrap();
    let rec = read(&path, &ReadOptions::default()).unwrap();
    let labels: Vec<_> = rec.images.iter().map(|i| (i.frame, i.channel)).collect();
    assert_eq!(labels, [(0, 0), (0, 1), (1, 0)]);
    let f0 = u16s(&rec.images[0].cube);
    assert_eq!(
        f0.dim(),
        (2, 4, 41),
        "bins up to the latest photon (dtime 40)"
    );
    assert_eq!(
        (
            f0[[0, 0, 10]],
            f0[[0, 1, 11]],
            f0[[0, 3, 13]],
            f0[[1, 3, 20]]
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(f0.iter().map(|&v| u32::from(v)).sum::<u32>(), 4);
    assert_eq!(u16s(&rec.images[1].cube)[[0, 1, 12]], 1);
    let f1 = u16s(&rec.images[2].cube);
    assert_eq!((f1[[0, 0, 30]], f1[[1, 2, 40]]), (1, 1));
    assert_eq!(f1.iter().map(|&v| u32::from(v)).sum::<u32>(), 2);
    let c = &rec.images[0].cube;
    assert!((c.bin_ns() - 0.1).abs() < 1e-12 && (c.period_ns() - 12.5).abs() < 1e-9);
    assert_eq!(rec.meta("photons"), Some("9"));
    assert_eq!(rec.meta("photons in images"), Some("7"));
    assert_eq!(rec.meta("photons outside lines"), Some("2"));
    assert_eq!(rec.meta("frames"), Some("2"));
    assert_eq!(rec.meta("HW_Type"), Some("PicoHarp"));

    // Channel 0, frames summed, binned by 4 into 8 bins: dtime 40 lies past bin 7.
    let opts = ReadOptions::default()
        .with_channel(0)
        .with_sum_frames(true)
        .with_binning(4)
        .with_bins(8);
    let sum = read(&path, &opts).unwrap();
    assert_eq!(sum.images.len(), 1);
    let s = u16s(&sum.images[0].cube);
    assert_eq!(s.dim(), (2, 4, 8));
    assert_eq!((s[[0, 0, 2]], s[[0, 0, 7]], s[[1, 3, 5]]), (1, 1, 1));
    assert_eq!(s.iter().map(|&v| u32::from(v)).sum::<u32>(), 5);
    assert_eq!(sum.meta("photons past the last bin"), Some("1"));
    assert!((sum.images[0].cube.bin_ns() - 0.4).abs() < 1e-12);
    // Frame selection.
    let f = read(&path, &ReadOptions::default().with_frames(1..2)).unwrap();
    assert!(f.images.iter().all(|i| i.frame == 1));
}

#[test]
fn ptu_hydraharp_v2_point_measurement_is_one_pixel() {
    let tmp = Tmp::new("ptu-hh");
    let hh_photon = |chan: u32, dtime: u32, sync: u32| (chan << 25) | (dtime << 10) | sync;
    let recs = [
        hh_photon(0, 5, 1),
        0xFE00_0002,
        hh_photon(0, 5, 3),
        hh_photon(1, 6, 4),
    ];
    let bytes = Ptu::new()
        .int("TTResultFormat_TTTRRecType", 0x0101_0304)
        .int("TTResult_NumberOfRecords", 4)
        .float("MeasDesc_Resolution", 1e-12)
        .float("TTResult_SyncRate", 40e6)
        .records(&recs);
    let path = tmp.path("irf.ptu");
    std::fs::write(&path, bytes).unwrap();
    let rec = read(&path, &ReadOptions::default()).unwrap();
    assert_eq!(rec.images.len(), 2);
    let c0 = u16s(&rec.images[0].cube);
    assert_eq!((c0.dim(), c0[[0, 0, 5]]), ((1, 1, 7), 2));
    assert!((rec.images[0].cube.period_ns() - 25.0).abs() < 1e-9);
    assert_eq!(rec.meta("record type"), Some("HydraHarp V2 T3"));
}

#[test]
fn ptu_real_header_parses_and_truncated_records_are_named() {
    // The real hazelnut file's header and first 1000 of its 6,070,158 records.
    let path = data("hazelnut_head.ptu");
    let h = read_ptu_header(&path).unwrap();
    assert_eq!(h.records_offset, 4616);
    assert_eq!(h.int("TTResult_SyncRate"), Some(78_020_000));
    assert_eq!(h.int("ImgHdr_PixX"), Some(256));
    assert_eq!(h.int("ImgHdr_LineStart"), Some(1));
    assert_eq!(h.text("HW_Type"), Some("PicoHarp"));
    assert!((h.float("MeasDesc_Resolution").unwrap() - 96.969_696_97e-12).abs() < 1e-20);
    let e = err_text(read(&path, &ReadOptions::default()));
    assert!(
        e.contains("hazelnut_head.ptu")
            && e.contains("record 1000 at byte 8616")
            && e.contains("6070158"),
        "{e}"
    );
}

#[test]
fn ptu_corrupt_input_is_named() {
    let tmp = Tmp::new("ptu-bad");
    let p = tmp.path("bad.ptu");
    // An invalid PicoHarp channel (7) in record 2.
    let recs = [marker(START, 1), photon(1, 3, 5), photon(7, 3, 6)];
    std::fs::write(&p, Ptu::picoharp_image(3).records(&recs)).unwrap();
    let e = err_text(read(&p, &ReadOptions::default()));
    assert!(
        e.contains("record 2 at byte") && e.contains("channel field 7"),
        "{e}"
    );
    // A file ending inside a record.
    let mut bytes = Ptu::picoharp_image(0).records(&recs);
    let records_at = bytes.len() - 12;
    bytes.truncate(bytes.len() - 2);
    std::fs::write(&p, &bytes).unwrap();
    let e = err_text(read(&p, &ReadOptions::default()));
    assert!(
        e.contains(&format!("record 2 at byte {}", records_at + 8))
            && e.contains("inside a record"),
        "{e}"
    );
    // A header cut inside a tag, and a string longer than the file.
    let full = Ptu::picoharp_image(3).records(&recs);
    std::fs::write(&p, &full[..16 + 48 * 3 + 20]).unwrap();
    let e = err_text(read(&p, &ReadOptions::default()));
    assert!(e.contains("before Header_End") && e.contains("byte"), "{e}");
    let liar = Ptu::new()
        .tag("Big", 0x4001_FFFF, 1_000_000i64.to_le_bytes(), &[])
        .records(&[]);
    std::fs::write(&p, liar).unwrap();
    let e = err_text(read(&p, &ReadOptions::default()));
    assert!(
        e.contains("tag \"Big\" at byte 16") && e.contains("past the end"),
        "{e}"
    );
    // T2 records, and a wrong magic.
    let t2 = Ptu::new()
        .int("TTResultFormat_TTTRRecType", 0x0001_0203)
        .records(&[]);
    std::fs::write(&p, t2).unwrap();
    assert!(err_text(read(&p, &ReadOptions::default())).contains("T2"));
    std::fs::write(&p, b"PQHISTO\0xxxxxxxxyyyyyyyy").unwrap();
    assert!(err_text(read(&p, &ReadOptions::default())).contains("not a PicoQuant .ptu"));
}

// ---------------------------------------------------------------- TIFF and .npy

#[test]
fn tiff_and_npy_round_trip_every_count_type() {
    let tmp = Tmp::new("tif");
    let base = cube(9, 2.5);
    let c16: AnyCube = base.clone().into();
    let c32: AnyCube = Cube::new(base.counts().mapv(|v| u32::from(v) * 70_000), 0.2)
        .unwrap()
        .into();
    let cf: AnyCube = base.clone().into();
    let cf = AnyCube::F32(cf.to_f32());
    for (i, c) in [c16, c32, cf].iter().enumerate() {
        for ext in ["tif", "npy"] {
            let path = tmp.path(&format!("c{i}.{ext}"));
            if ext == "tif" {
                write_tiff(&path, c).unwrap();
            } else {
                write_npy(&path, c).unwrap();
            }
            let rec = read(
                &path,
                &ReadOptions::default().with_bin_ns(0.2).with_period_ns(12.8),
            )
            .unwrap();
            let back = &rec.images[0].cube;
            assert_eq!(back.dtype(), c.dtype(), "{ext}");
            assert_eq!((back.shape(), back.bins()), ((3, 5), 64), "{ext}");
            assert_eq!(back.photons(), c.photons(), "{ext}");
            assert!((back.period_ns() - 12.8).abs() < 1e-12);
        }
    }
    // No bin width: a clear request for one.
    let e = err_text(read(&tmp.path("c0.tif"), &ReadOptions::default()));
    assert!(e.contains("no bin width") && e.contains("--bin-ns"), "{e}");
}

#[test]
fn npy_time_series_and_bad_shapes() {
    let tmp = Tmp::new("npy");
    let series = Array3::<u16>::from_shape_fn((2 * 3, 4, 8), |(a, b, c)| (a + b + c) as u16)
        .into_shape_with_order((2, 3, 4, 8))
        .unwrap();
    let path = tmp.path("series.npy");
    ndarray_npy::write_npy(&path, &series).unwrap();
    let opts = ReadOptions::default().with_bin_ns(0.1);
    let rec = read(&path, &opts).unwrap();
    assert_eq!(
        rec.images.iter().map(|i| i.frame).collect::<Vec<_>>(),
        [0, 1]
    );
    let summed = read(&path, &opts.clone().with_sum_frames(true)).unwrap();
    let AnyCube::U32(s) = &summed.images[0].cube else {
        panic!("u16 frames sum as u32")
    };
    assert_eq!(
        s.counts()[[2, 3, 7]],
        u32::from(series[[0, 2, 3, 7]]) + u32::from(series[[1, 2, 3, 7]])
    );
    let flat = tmp.path("flat.npy");
    ndarray_npy::write_npy(&flat, &ndarray::Array2::<u16>::zeros((4, 8))).unwrap();
    let e = err_text(read(&flat, &opts));
    assert!(
        e.contains("flat.npy") && e.contains("(frame, y, x, bin)"),
        "{e}"
    );
    let e = err_text(read(&tmp.path("x.dat"), &opts));
    assert!(e.contains("unknown extension"), "{e}");
}

#[test]
fn tiff_pages_of_different_sizes_are_refused() {
    use tiff::encoder::{TiffEncoder, colortype::Gray16};
    let tmp = Tmp::new("tif-bad");
    let path = tmp.path("bad.tif");
    let mut enc = TiffEncoder::new(std::fs::File::create(&path).unwrap()).unwrap();
    enc.write_image::<Gray16>(4, 4, &[0u16; 16]).unwrap();
    enc.write_image::<Gray16>(4, 3, &[0u16; 12]).unwrap();
    drop(enc);
    let e = err_text(read(&path, &ReadOptions::default().with_bin_ns(0.1)));
    assert!(e.contains("page 1") && e.contains("4x3"), "{e}");
}

// ---------------------------------------------------------------- real recordings (optional)

/// A real recording of `../shared/data/flim` (or of `BIOGPU_FLIM_DATA`). The tests that need
/// one are ignored by default, as a clone need not have that folder; `cargo test -- --ignored
/// real` runs them, and then a missing file fails.
fn real(name: &str) -> PathBuf {
    let dir = std::env::var_os("BIOGPU_FLIM_DATA").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/flim"),
        PathBuf::from,
    );
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is absent: set BIOGPU_FLIM_DATA to its folder",
        p.display()
    );
    p
}

#[test]
#[ignore = "needs ../shared/data/flim (BIOGPU_FLIM_DATA)"]
fn real_sdt_matches_sdtfile() {
    let path = real("seminal_receptacle_FLIM_single_image.sdt");
    let rec = read(&path, &ReadOptions::default()).unwrap();
    assert_eq!(rec.images.len(), 1);
    let c = u16s(&rec.images[0].cube);
    assert_eq!(c.dim(), (512, 512, 256));
    assert_eq!(c.iter().map(|&v| u64::from(v)).sum::<u64>(), 19_409_541);
    let photons = rec.images[0].cube.photons();
    assert_eq!(photons.iter().copied().fold(0.0, f64::max), 2015.0);
    assert!((rec.images[0].cube.bin_ns() - 0.048_860_9).abs() < 1e-6);
    assert!((rec.images[0].cube.period_ns() - 12.4885).abs() < 1e-3);
}

#[test]
#[ignore = "needs ../shared/data/flim (BIOGPU_FLIM_DATA)"]
fn real_ptu_matches_ptufile() {
    let path = real("hazelnut_FLIM_single_image.ptu");
    let rec = read(&path, &ReadOptions::default()).unwrap();
    let per_frame: Vec<u64> = rec
        .images
        .iter()
        .map(|i| i.cube.photons().iter().sum::<f64>() as u64)
        .collect();
    assert_eq!(rec.images[0].cube.bins(), 139);
    assert_eq!(rec.images[0].cube.shape(), (256, 256));
    assert!((rec.images[0].cube.period_ns() - 12.8172).abs() < 1e-3);
    // ptufile: 6,065,123 photons in 5 frames of 1,210,465 / 1,212,943 / 1,215,196 /
    // 1,213,256 / 1,213,263 (pixel boundaries may differ by a sync tick: 0.1% tolerance).
    let want = [1_210_465u64, 1_212_943, 1_215_196, 1_213_256, 1_213_263];
    assert_eq!(per_frame.len(), 5, "{per_frame:?}");
    for (g, w) in per_frame.iter().zip(want) {
        assert!(
            (*g as f64 - w as f64).abs() <= 0.001 * w as f64,
            "{per_frame:?} vs {want:?}"
        );
    }
    eprintln!("{:#?}", rec.metadata);
}
