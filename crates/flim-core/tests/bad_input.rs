//! Bad input for every FLIM reader (issue 20): truncations, seeded bit flips and extreme
//! header values of a valid file of each format, read under a 2 GiB heap cap, must give a
//! clear error naming the file (or a tolerated read), never a panic, hang or huge
//! allocation; and one regression test per failure the issue lists.
//!
//! Truncations are all errors: `.sdt` blocks and `.npy` data have sizes in their headers, the
//! PTU file used announces its record count, and a TIFF cut anywhere loses a page's data or
//! its directory. (A PTU file *without* `TTResult_NumberOfRecords` cut at a record boundary
//! cannot be told from a shorter recording; no fixture here lacks the count.)

mod common;
use common::Tmp;
use flim_core::Cube;
use flim_core::io::{
    ReadOptions, read, read_npy, read_ptu_header, read_sdt, read_tiff, write_npy, write_sdt,
    write_tiff,
};
use flim_core::sim::mono_exponential;
use std::path::{Path, PathBuf};

#[global_allocator]
static ALLOC: bad_input::CappedAlloc = bad_input::CappedAlloc::new(2 << 30);

/// Bit-flip cases per format.
const FLIPS: usize = 300;
const SEED: u64 = 20;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn cube(h: usize, w: usize, bins: usize) -> Cube<u16> {
    mono_exponential(&[2.0], h, w, bins, 0.2, 12.8, 500.0, 7).unwrap()
}

fn u16_at(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

/// The error text of reading `bytes` as `name` in `tmp` with `read`.
fn error_of<T>(
    tmp: &Tmp,
    name: &str,
    bytes: &[u8],
    read: impl Fn(&Path) -> flim_core::Result<T>,
) -> String {
    let p = tmp.path(name);
    std::fs::write(&p, bytes).unwrap();
    match read(&p) {
        Ok(_) => panic!("{name}: read without error"),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains(name), "the error must name the file: {e}");
            e
        }
    }
}

/// Runs the three families against `read`: truncations must all be errors, nothing may
/// panic, hang, abort or give an error without the file's name.
fn suite<T: 'static>(
    ext: &str,
    good: &[u8],
    offsets: &[usize],
    read: impl Fn(&Path) -> flim_core::Result<T> + Send + Sync + Clone + 'static,
) {
    let truncated = bad_input::truncations(good);
    let report = bad_input::check_reader(ext, &truncated, read.clone());
    eprintln!("{ext} truncations: {report}");
    report.assert_clean();
    assert_eq!(
        report.read(),
        0,
        "every truncation must be an error: {report}"
    );

    let mut cases = bad_input::bit_flips(good, SEED, FLIPS);
    cases.extend(bad_input::extreme_values(good, offsets));
    let report = bad_input::check_reader(ext, &cases, read);
    eprintln!("{ext} bit flips and extreme values: {report}");
    report.assert_clean();
}

// ---------------------------------------------------------------- .sdt

/// Offsets of the header fields of an `.sdt` file: the file header, the first measurement
/// description block's TAC, ADC, scan, sync and image fields, and the first data block header.
fn sdt_offsets(good: &[u8]) -> Vec<usize> {
    let mut at: Vec<usize> = vec![0, 2, 6, 8, 12, 14, 18, 20, 24, 28, 30, 32, 34, 40];
    let meas = u32_at(good, 24);
    at.extend(
        [64, 68, 82, 173, 177, 181, 185, 247, 309, 313, 317, 321]
            .iter()
            .map(|o| meas + o),
    );
    let block = u32_at(good, 14);
    at.extend([0, 1, 2, 6, 10, 12, 14, 18].iter().map(|o| block + o));
    at
}

#[test]
fn sdt_bad_input_is_refused_cleanly() {
    let good = std::fs::read(data("bh_spc160_4x4.sdt")).unwrap();
    read_sdt(&data("bh_spc160_4x4.sdt")).expect("the fixture reads");
    suite("sdt", &good, &sdt_offsets(&good), |p| {
        read(p, &ReadOptions::default())
    });
}

#[test]
fn sdt_zipped_and_raw_bad_input_is_refused_cleanly() {
    let tmp = Tmp::new("sdt-w");
    for zipped in [true, false] {
        let p = tmp.path("w.sdt");
        write_sdt(&p, &[vec![cube(4, 4, 64)], vec![cube(4, 4, 64)]], zipped).unwrap();
        let good = std::fs::read(&p).unwrap();
        read_sdt(&p).expect("the written file reads");
        let ext = if zipped { "zipped.sdt" } else { "raw.sdt" };
        suite(ext, &good, &sdt_offsets(&good), read_sdt);
    }
}

/// A raw two-block file: (bytes, offset of block 0's header, offset of block 1's header).
fn two_blocks(tmp: &Tmp) -> (Vec<u8>, usize, usize) {
    let p = tmp.path("two.sdt");
    write_sdt(&p, &[vec![cube(4, 4, 64)], vec![cube(4, 4, 64)]], false).unwrap();
    let b = std::fs::read(&p).unwrap();
    let first = u32_at(&b, 14);
    let second = u32_at(&b, first + 6);
    (b, first, second)
}

#[test]
fn sdt_block_chain_that_loops_back_is_an_error_not_a_hang() {
    let tmp = Tmp::new("sdt-cycle");
    let (mut b, first, second) = two_blocks(&tmp);
    // Block 1 points back to block 0, and the header announces 200 blocks.
    b[second + 6..second + 10].copy_from_slice(&(first as u32).to_le_bytes());
    b[18..20].copy_from_slice(&200u16.to_le_bytes());
    let e = error_of(&tmp, "cycle.sdt", &b, read_sdt);
    assert!(e.contains("loops back") && e.contains("cycle"), "{e}");
    assert!(e.contains(&format!("header at byte {first}")), "{e}");
    // A block whose data is another block's data: counted twice, never.
    let (mut b, first, second) = two_blocks(&tmp);
    let data0 = u32_at(&b, first + 2) as u32;
    b[second + 2..second + 6].copy_from_slice(&data0.to_le_bytes());
    let e = error_of(&tmp, "shared.sdt", &b, read_sdt);
    assert!(e.contains("data block 1") && e.contains("overlaps"), "{e}");
    // More blocks than the file has room for (the large-file count in reserved1).
    let (mut b, _, _) = two_blocks(&tmp);
    b[18..20].copy_from_slice(&0x7fffu16.to_le_bytes());
    b[34..38].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = error_of(&tmp, "many.sdt", &b, read_sdt);
    assert!(e.contains("4294967295 data blocks"), "{e}");
}

#[test]
fn sdt_header_image_size_that_disagrees_with_the_data_is_an_error() {
    let tmp = Tmp::new("sdt-geo");
    let p = tmp.path("w.sdt");
    write_sdt(&p, &[vec![cube(16, 16, 64)]], false).unwrap();
    let mut b = std::fs::read(&p).unwrap();
    read_sdt(&p).expect("the written file reads");
    // Image size 16 x 16 -> 8 x 16: the block holds 256 decays, the header says 128.
    let meas = u32_at(&b, 24);
    b[meas + 309..meas + 313].copy_from_slice(&8i32.to_le_bytes());
    let e = error_of(&tmp, "geo.sdt", &b, read_sdt);
    assert!(
        e.contains("data block 0") && e.contains("image") && e.contains("disagree"),
        "{e}"
    );
}

#[test]
fn sdt_adc_resolution_zero_is_an_error() {
    let tmp = Tmp::new("sdt-adc");
    let mut b = std::fs::read(data("bh_spc160_4x4.sdt")).unwrap();
    let meas = u32_at(&b, 24);
    b[meas + 82..meas + 84].copy_from_slice(&0u16.to_le_bytes());
    let e = error_of(&tmp, "adc.sdt", &b, read_sdt);
    assert!(
        e.contains("ADC resolution") && e.contains("1..=65536"),
        "{e}"
    );
    // A sync rate of 1e30 Hz in the measurement description.
    let mut b = std::fs::read(data("bh_spc160_4x4.sdt")).unwrap();
    b[meas + 247..meas + 251].copy_from_slice(&1e30f32.to_le_bytes());
    let e = error_of(&tmp, "sync.sdt", &b, read_sdt);
    assert!(e.contains("sync rate") && e.contains("laser period"), "{e}");
}

#[test]
fn sdt_zipped_block_claiming_more_than_deflate_allows_is_an_error() {
    let tmp = Tmp::new("sdt-zip");
    let p = tmp.path("z.sdt");
    write_sdt(&p, &[vec![cube(4, 4, 64)]], true).unwrap();
    let mut b = std::fs::read(&p).unwrap();
    // 2 GiB unzipped from a few hundred bytes, with a header to match: 512 x 512 x 4096 u16.
    let block = u32_at(&b, 14);
    b[block + 18..block + 22].copy_from_slice(&(1u32 << 31).to_le_bytes());
    let meas = u32_at(&b, 24);
    for (i, v) in [512i32, 512, 1, 1].into_iter().enumerate() {
        let at = meas + 309 + 4 * i;
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    b[meas + 82..meas + 84].copy_from_slice(&4096u16.to_le_bytes());
    let e = error_of(&tmp, "bomb.sdt", &b, read_sdt);
    assert!(
        e.contains("data block 0") && e.contains("block length") && e.contains("1032"),
        "{e}"
    );
}

#[test]
fn sdt_zipped_block_with_corrupt_data_or_checksum_is_an_error() {
    let tmp = Tmp::new("sdt-crc");
    let p = tmp.path("z.sdt");
    write_sdt(&p, &[vec![cube(4, 4, 64)]], true).unwrap();
    let good = std::fs::read(&p).unwrap();
    let find = |magic: &[u8]| good.windows(4).position(|w| w == magic).unwrap();
    // The deflate stream follows the local header (30 bytes, the name, the extra field).
    let local = find(b"PK\x03\x04");
    let start = local + 30 + u16_at(&good, local + 26) + u16_at(&good, local + 28);
    let len = u32_at(&good, local + 18);
    let mut b = good.clone();
    b[start + len / 2] ^= 0x55;
    let e = error_of(&tmp, "data.sdt", &b, read_sdt);
    assert!(
        e.contains("data block 0") && e.contains("compressed data") && e.contains("unzipped"),
        "{e}"
    );
    // The data are intact, but the checksum the central directory gives is wrong.
    let mut b = good.clone();
    b[find(b"PK\x01\x02") + 16] ^= 0x01;
    let e = error_of(&tmp, "crc.sdt", &b, read_sdt);
    assert!(e.contains("data block 0") && e.contains("CRC-32"), "{e}");
}

// ---------------------------------------------------------------- .ptu

/// The hazelnut header with its first 1000 records, the record count patched to 1000 so
/// that it reads; and the value offset of each tag by name.
fn hazelnut() -> (Vec<u8>, Vec<(String, usize)>) {
    let path = data("hazelnut_head.ptu");
    let h = read_ptu_header(&path).unwrap();
    let mut b = std::fs::read(&path).unwrap();
    let tags: Vec<(String, usize)> = h
        .tags
        .iter()
        .map(|t| (t.name.clone(), t.offset as usize + 40))
        .collect();
    let n = tags
        .iter()
        .find(|(n, _)| n == "TTResult_NumberOfRecords")
        .unwrap()
        .1;
    b[n..n + 8].copy_from_slice(&1000i64.to_le_bytes());
    (b, tags)
}

fn tag(tags: &[(String, usize)], name: &str) -> usize {
    tags.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn ptu_bad_input_is_refused_cleanly() {
    let tmp = Tmp::new("ptu-good");
    let (good, tags) = hazelnut();
    let p = tmp.path("good.ptu");
    std::fs::write(&p, &good).unwrap();
    read(&p, &ReadOptions::default()).expect("the patched fixture reads");
    let mut offsets = vec![0, 8];
    for name in [
        "TTResultFormat_TTTRRecType",
        "TTResult_NumberOfRecords",
        "TTResult_SyncRate",
        "MeasDesc_Resolution",
        "MeasDesc_GlobalResolution",
        "Measurement_SubMode",
        "ImgHdr_PixX",
        "ImgHdr_PixY",
        "ImgHdr_LineStart",
        "ImgHdr_LineStop",
        "ImgHdr_Frame",
        "ImgHdr_BiDirect",
        "HW_Type",
        "File_Comment",
    ] {
        if let Some((_, at)) = tags.iter().find(|(n, _)| n == name) {
            // The value, and the tag's type field.
            offsets.extend([*at, *at - 4]);
        }
    }
    suite("ptu", &good, &offsets, |p| read(p, &ReadOptions::default()));
}

/// A PicoQuant tag.
fn ptu_tag(out: &mut Vec<u8>, name: &str, kind: u32, value: [u8; 8]) {
    let mut n = [0u8; 32];
    n[..name.len()].copy_from_slice(name.as_bytes());
    out.extend_from_slice(&n);
    out.extend_from_slice(&(-1i32).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&value);
}

#[test]
fn ptu_sync_rate_of_1e30_hz_is_an_error() {
    let tmp = Tmp::new("ptu-sync");
    let mut b = b"PQTTTR\0\x001.0.00\0\0".to_vec();
    ptu_tag(
        &mut b,
        "TTResultFormat_TTTRRecType",
        0x1000_0008,
        0x0001_0303i64.to_le_bytes(),
    );
    ptu_tag(
        &mut b,
        "TTResult_NumberOfRecords",
        0x1000_0008,
        2i64.to_le_bytes(),
    );
    ptu_tag(
        &mut b,
        "MeasDesc_Resolution",
        0x2000_0008,
        100e-12f64.to_le_bytes(),
    );
    ptu_tag(
        &mut b,
        "TTResult_SyncRate",
        0x2000_0008,
        1e30f64.to_le_bytes(),
    );
    ptu_tag(&mut b, "Header_End", 0xFFFF_0008, [0; 8]);
    for rec in [(1u32 << 28) | (5 << 16) | 3, (1 << 28) | (6 << 16) | 9] {
        b.extend_from_slice(&rec.to_le_bytes());
    }
    let e = error_of(&tmp, "sync.ptu", &b, |p| read(p, &ReadOptions::default()));
    assert!(
        e.contains("TTResult_SyncRate") && e.contains("laser period"),
        "{e}"
    );
    // The same file with a sane rate reads.
    let at = b.len() - 8 - 48 - 8;
    b[at..at + 8].copy_from_slice(&80e6f64.to_le_bytes());
    let p = tmp.path("ok.ptu");
    std::fs::write(&p, &b).unwrap();
    read(&p, &ReadOptions::default()).expect("80 MHz reads");
    // A TCSPC resolution of 1e-30 s.
    let at = b.len() - 8 - 48 * 2 - 8;
    b[at..at + 8].copy_from_slice(&1e-30f64.to_le_bytes());
    let e = error_of(&tmp, "res.ptu", &b, |p| read(p, &ReadOptions::default()));
    assert!(
        e.contains("MeasDesc_Resolution") && e.contains("bin width"),
        "{e}"
    );
}

#[test]
fn ptu_image_of_65536_x_65536_pixels_in_a_small_file_is_an_error() {
    let tmp = Tmp::new("ptu-pix");
    let (mut b, tags) = hazelnut();
    for name in ["ImgHdr_PixX", "ImgHdr_PixY"] {
        let at = tag(&tags, name);
        b[at..at + 8].copy_from_slice(&65_536i64.to_le_bytes());
    }
    let e = error_of(&tmp, "huge.ptu", &b, |p| read(p, &ReadOptions::default()));
    assert!(
        e.contains("ImgHdr_PixX") && e.contains("65536 x 65536") && e.contains("cap"),
        "{e}"
    );
    // Header and data disagree: more records in the file than the header announces.
    let (mut b, tags) = hazelnut();
    let at = tag(&tags, "TTResult_NumberOfRecords");
    b[at..at + 8].copy_from_slice(&10i64.to_le_bytes());
    let e = error_of(&tmp, "count.ptu", &b, |p| read(p, &ReadOptions::default()));
    assert!(
        e.contains("TTResult_NumberOfRecords") && e.contains("disagree"),
        "{e}"
    );
}

// ---------------------------------------------------------------- TIFF

/// Offsets of the 8-byte TIFF header's fields and of every entry's count and value, and the
/// next-directory offset, of the first two directories.
fn tiff_offsets(good: &[u8]) -> Vec<usize> {
    let mut at = vec![0, 2, 4];
    let mut ifd = u32_at(good, 4);
    for _ in 0..2 {
        if ifd == 0 || ifd + 2 > good.len() {
            break;
        }
        let n = u16_at(good, ifd);
        at.push(ifd);
        for e in 0..n {
            let entry = ifd + 2 + 12 * e;
            at.extend([entry + 2, entry + 4, entry + 8]);
        }
        let next = ifd + 2 + 12 * n;
        at.push(next);
        ifd = u32_at(good, next);
    }
    at
}

#[test]
fn tiff_bad_input_is_refused_cleanly() {
    let tmp = Tmp::new("tif");
    let p = tmp.path("good.tif");
    write_tiff(&p, &cube(4, 4, 16).into()).unwrap();
    read_tiff(&p, 0.2).expect("the written file reads");
    let good = std::fs::read(&p).unwrap();
    suite("tif", &good, &tiff_offsets(&good), |p| read_tiff(p, 0.2));
}

#[test]
fn tiff_page_header_asking_for_gigabytes_is_an_error() {
    let tmp = Tmp::new("tif-big");
    let p = tmp.path("good.tif");
    write_tiff(&p, &cube(4, 4, 16).into()).unwrap();
    let good = std::fs::read(&p).unwrap();
    let ifd = u32_at(&good, 4);
    let entry = |b: &[u8], tag: u16| {
        (0..u16_at(b, ifd))
            .map(|e| ifd + 2 + 12 * e)
            .find(|&at| u16_at(b, at) == usize::from(tag))
            .unwrap()
    };
    // A bit flip in the strip offsets' count: 2^30 offsets of 4 bytes (4 GiB) to reserve.
    let mut b = good.clone();
    let at = entry(&b, 273) + 4;
    b[at..at + 4].copy_from_slice(&0x4000_0000u32.to_le_bytes());
    let e = error_of(&tmp, "count.tif", &b, |p| read_tiff(p, 0.2));
    assert!(e.contains("limit"), "{e}");
    // Width and height 2^31 - 1 (ImageWidth and ImageLength, tags 256 and 257).
    let mut b = good;
    for tag in [256, 257] {
        let at = entry(&b, tag);
        b[at + 2..at + 4].copy_from_slice(&4u16.to_le_bytes()); // LONG
        b[at + 8..at + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    }
    let e = error_of(&tmp, "big.tif", &b, |p| read_tiff(p, 0.2));
    assert!(e.contains("TIFF"), "{e}");
}

// ---------------------------------------------------------------- .npy

/// A version-1 `.npy` of u16 with `shape` in its header and `data` after it.
fn npy(shape: &str, data: &[u8]) -> Vec<u8> {
    let mut dict = format!("{{'descr': '<u2', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    b.extend_from_slice(dict.as_bytes());
    b.extend_from_slice(data);
    b
}

#[test]
fn npy_bad_input_is_refused_cleanly() {
    let tmp = Tmp::new("npy");
    let p = tmp.path("good.npy");
    write_npy(&p, &cube(4, 4, 16).into()).unwrap();
    read_npy(&p, 0.2).expect("the written file reads");
    let good = std::fs::read(&p).unwrap();
    let text = String::from_utf8_lossy(&good);
    let shape = text.find("'shape'").unwrap();
    let offsets = [0, 6, 7, 8, shape + 10, shape + 13, shape + 16];
    suite("npy", &good, &offsets, |p| read_npy(p, 0.2));
    // The IRF reader's .npy path, on the same cases.
    let cases = bad_input::bit_flips(&good, SEED + 1, FLIPS / 3);
    let report =
        bad_input::check_reader("npy", &cases, |p| flim_core::Irf::from_file(p, Some(0.2)));
    eprintln!("npy IRF bit flips: {report}");
    report.assert_clean();
}

#[test]
fn npy_shape_of_2_pow_40_is_an_error() {
    let tmp = Tmp::new("npy-shape");
    let data = vec![0u8; 4 * 4 * 16 * 2];
    let p = tmp.path("ok.npy");
    std::fs::write(&p, npy("(4, 4, 16)", &data)).unwrap();
    read_npy(&p, 0.2).expect("the hand-made file reads");
    let e = error_of(
        &tmp,
        "huge.npy",
        &npy("(1099511627776, 16, 64)", &data),
        |p| read_npy(p, 0.2),
    );
    assert!(
        e.contains("shape") && e.contains("1099511627776") && e.contains("disagree"),
        "{e}"
    );
    // A product past 2^64, and a header length past the file.
    let e = error_of(
        &tmp,
        "overflow.npy",
        &npy("(4294967296, 4294967296, 16)", &data),
        |p| read_npy(p, 0.2),
    );
    assert!(e.contains("more than 2^64"), "{e}");
    let mut b = npy("(4, 4, 16)", &data);
    b[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
    let e = error_of(&tmp, "len.npy", &b, |p| read_npy(p, 0.2));
    assert!(e.contains("header length"), "{e}");
    // The IRF reader too.
    let e = error_of(&tmp, "irf.npy", &npy("(1099511627776,)", &data), |p| {
        flim_core::Irf::from_file(p, Some(0.2))
    });
    assert!(e.contains("shape"), "{e}");
}

/// Findings of `fuzz/` (libFuzzer), kept as regression inputs. `ptu-timeout-4795094a.ptu`
/// (736 bytes) announces a 63,748 x 2 pixel image of 244 bins in two channels: a legitimate
/// 31-million-cell histogram under the cap, which took 12 s in an instrumented build on a
/// loaded machine (libFuzzer's 10 s timeout) and about 1 s natively. It must read within
/// the harness's time limit, without a panic.
#[test]
fn fuzz_findings_read_or_fail_cleanly_in_time() {
    let dir = data("fuzz");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for path in files {
        let ext = path.extension().unwrap().to_str().unwrap().to_string();
        let cases = [bad_input::Case::new(
            path.display().to_string(),
            std::fs::read(&path).unwrap(),
        )];
        let r = bad_input::check_reader(&ext, &cases, |p| read(p, &ReadOptions::default()));
        eprintln!("{r}");
        r.assert_clean();
    }
}

// ------------------------------------------- .ptu T2, .pt3, .ht3, .phu (issue 29)

/// Value offsets of the tags of a tagged PicoQuant file (`.ptu` or `.phu`).
fn tag_offsets(path: &Path) -> Vec<usize> {
    let h = read_ptu_header(path).unwrap();
    let mut at = vec![0, 8];
    for t in &h.tags {
        // The value, and the tag's type field.
        at.extend([t.offset as usize + 40, t.offset as usize + 36]);
    }
    at
}

#[test]
fn t2_ptu_bad_input_is_refused_cleanly() {
    let path = data("hydraharp_t2.ptu");
    let good = std::fs::read(&path).unwrap();
    suite("ptu", &good, &tag_offsets(&path), |p| {
        read(p, &ReadOptions::default())
    });
    let path = data("picoharp_t2.ptu");
    let good = std::fs::read(&path).unwrap();
    suite("ptu", &good, &tag_offsets(&path), |p| {
        read(p, &ReadOptions::default().with_sync_channel(0))
    });
}

#[test]
fn pt3_bad_input_is_refused_cleanly() {
    let good = std::fs::read(data("picoharp.pt3")).unwrap();
    // Ident, version, bits per record, mode, resolution, sync rate, record count, image header.
    let offsets = [0, 16, 332, 348, 584, 704, 720, 724];
    suite("pt3", &good, &offsets, |p| read(p, &ReadOptions::default()));
}

#[test]
fn ht3_bad_input_is_refused_cleanly() {
    let good = std::fs::read(data("hydraharp_v1.ht3")).unwrap();
    // Ident, version, bits, mode, resolution, inputs, then (2 inputs) sync rate, image
    // header size and record count.
    let offsets = [0, 16, 332, 340, 352, 664, 736, 748, 752];
    suite("ht3", &good, &offsets, |p| read(p, &ReadOptions::default()));
}

#[test]
fn phu_bad_input_is_refused_cleanly() {
    let path = data("curves.phu");
    let good = std::fs::read(&path).unwrap();
    suite("phu", &good, &tag_offsets(&path), |p| {
        read(p, &ReadOptions::default())
    });
}
