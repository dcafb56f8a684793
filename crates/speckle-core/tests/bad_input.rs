//! Corrupted speckle inputs (TIFF, PNG, raw frames, ROI masks): every reader must return an
//! error that names the file (or read the file), never panic, hang or allocate without bound.

#[global_allocator]
static ALLOC: bad_input::CappedAlloc = bad_input::CappedAlloc::new(2 << 30);

use std::path::{Path, PathBuf};

use bad_input::{Case, bit_flips, check_reader, extreme_values, truncations};
use ndarray::Array3;
use speckle_core::io::{
    ByteOrder, LoadOptions, RawDtype, RawSpec, collect_stack, load_stack, open_frames, read_png,
    read_raw, read_tiff, write_raw,
};
use speckle_core::{RawStack, Roi};
use tiff::encoder::{Compression, TiffEncoder, colortype};

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("speckle-bad-input-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A 3-page 16x12 u16 stack written by the `tiff` crate, optionally compressed.
fn good_tiff(compression: Compression) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut enc = TiffEncoder::new(&mut out)
            .unwrap()
            .with_compression(compression);
        for p in 0..3u16 {
            let data: Vec<u16> = (0..16 * 12).map(|k| k * 7 + p * 1000).collect();
            enc.write_image::<colortype::Gray16>(16, 12, &data).unwrap();
        }
    }
    out.into_inner()
}

/// Offsets of the TIFF header's IFD pointer, and of every field (tag, type, count, value) of
/// every entry of every IFD, and each IFD's next pointer: the fields a reader sizes data by.
fn tiff_fields(bytes: &[u8]) -> Vec<usize> {
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..2], b"II");
    let mut fields = vec![4];
    let mut ifd = u32_at(4);
    while ifd != 0 {
        fields.push(ifd);
        let n = u16_at(ifd);
        for e in 0..n {
            let at = ifd + 2 + 12 * e;
            fields.extend([at, at + 2, at + 4, at + 8]);
        }
        let next = ifd + 2 + 12 * n;
        fields.push(next);
        ifd = u32_at(next);
    }
    fields
}

/// Set the value of TIFF tag `tag` (a LONG or SHORT entry, count 1) in every IFD.
fn set_tag(bytes: &mut [u8], tag: u16, value: u32) {
    let fields = tiff_fields(bytes);
    for &at in &fields {
        if at + 12 <= bytes.len()
            && u16::from_le_bytes([bytes[at], bytes[at + 1]]) == tag
            && fields.contains(&(at + 8))
        {
            let ty = u16::from_le_bytes([bytes[at + 2], bytes[at + 3]]);
            if ty == 3 {
                bytes[at + 8..at + 10].copy_from_slice(&(value as u16).to_le_bytes());
            } else {
                bytes[at + 2..at + 4].copy_from_slice(&4u16.to_le_bytes());
                bytes[at + 8..at + 12].copy_from_slice(&value.to_le_bytes());
            }
        }
    }
}

fn binary_cases(good: &[u8], seed: u64, flips: usize, fields: &[usize]) -> Vec<Case> {
    let mut cases = truncations(good);
    cases.extend(bit_flips(good, seed, flips));
    cases.extend(extreme_values(good, fields));
    cases
}

#[test]
fn corrupted_tiff_files_give_errors_naming_the_file() {
    for (name, compression, seed) in [
        ("uncompressed", Compression::Uncompressed, 30),
        ("lzw", Compression::Lzw, 31),
        ("packbits", Compression::Packbits, 32),
    ] {
        let good = good_tiff(compression);
        let cases = binary_cases(&good, seed, 300, &tiff_fields(&good));
        let report = check_reader("tif", &cases, |p| read_tiff(p, None));
        eprintln!("{name}: {report}");
        report.assert_clean();
    }
}

#[test]
fn corrupted_tiff_files_streamed_and_as_roi_masks() {
    let good = good_tiff(Compression::Uncompressed);
    let cases = binary_cases(&good, 33, 200, &tiff_fields(&good));
    let report = check_reader("tif", &cases, |p| {
        let (src, _) = open_frames(p, &LoadOptions::default())?;
        collect_stack(src)
    });
    eprintln!("streamed: {report}");
    report.assert_clean();
    let report = check_reader("tif", &cases, |p| {
        Roi::mask_from_file(p, &LoadOptions::default().with_bit_depth(12))
    });
    eprintln!("roi mask, 12 bits stated: {report}");
    report.assert_clean();
}

#[test]
fn tiff_width_of_2_to_the_31_is_refused_before_any_allocation() {
    let dir = scratch("tiff_wide");
    for (height, want) in [(12, "GiB"), (1, "can hold")] {
        let mut bytes = good_tiff(Compression::Uncompressed);
        set_tag(&mut bytes, 256, 1 << 31);
        set_tag(&mut bytes, 257, height);
        set_tag(&mut bytes, 278, height);
        let path = dir.join(format!("wide{height}.tif"));
        std::fs::write(&path, &bytes).unwrap();
        let before = ALLOC.live();
        let err = read_tiff(&path, None).unwrap_err().to_string();
        assert!(
            ALLOC.live() < before + (1 << 20),
            "{} bytes still held",
            ALLOC.live() - before
        );
        assert!(
            err.contains(&format!("wide{height}.tif"))
                && err.contains("page 0 is 2147483648x")
                && err.contains(want),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tiff_tag_counts_beyond_the_file_are_refused() {
    let dir = scratch("tiff_counts");
    let good = good_tiff(Compression::Uncompressed);
    let ifd = u32::from_le_bytes(good[4..8].try_into().unwrap()) as usize;
    // The first entry's count set to 2^30: its values would run far past the file.
    let mut bytes = good.clone();
    bytes[ifd + 2 + 4..ifd + 2 + 8].copy_from_slice(&(1u32 << 30).to_le_bytes());
    let path = dir.join("count.tif");
    std::fs::write(&path, &bytes).unwrap();
    let err = read_tiff(&path, None).unwrap_err().to_string();
    assert!(
        err.contains("count.tif") && err.contains("page 0") && err.contains("tag 256"),
        "{err}"
    );
    // The IFD pointer past the end of the file.
    let mut bytes = good.clone();
    bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = read_tiff(&path, None).unwrap_err().to_string();
    assert!(err.contains("outside the file"), "{err}");
    // Page 1's next pointer back to page 0: a loop, not a hang.
    let u32_at = |o: usize| u32::from_le_bytes(good[o..o + 4].try_into().unwrap()) as usize;
    let next_at =
        |ifd: usize| ifd + 2 + 12 * u16::from_le_bytes([good[ifd], good[ifd + 1]]) as usize;
    let page1 = u32_at(next_at(ifd));
    let mut bytes = good.clone();
    let at = next_at(page1);
    bytes[at..at + 4].copy_from_slice(&(ifd as u32).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = read_tiff(&path, None).unwrap_err().to_string();
    assert!(
        err.contains("count.tif") && (err.contains("loops") || err.contains("cycle")),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn good_png(sixteen: bool, width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Grayscale);
    let data: Vec<u8> = if sixteen {
        enc.set_depth(png::BitDepth::Sixteen);
        (0..width * height)
            .flat_map(|k| ((k * 37) as u16).to_be_bytes())
            .collect()
    } else {
        enc.set_depth(png::BitDepth::Eight);
        (0..width * height).map(|k| (k * 13) as u8).collect()
    };
    let mut w = enc.write_header().unwrap();
    w.write_image_data(&data).unwrap();
    w.finish().unwrap();
    out
}

/// IHDR width, height, bit depth, colour type, interlace; the first chunk after IHDR (length
/// and type).
const PNG_FIELDS: [usize; 7] = [16, 20, 24, 25, 28, 33, 37];

#[test]
fn corrupted_png_files_give_errors_naming_the_file() {
    for (sixteen, seed) in [(false, 40), (true, 41)] {
        let good = good_png(sixteen, 12, 16);
        let cases = binary_cases(&good, seed, 300, &PNG_FIELDS);
        let report = check_reader("png", &cases, |p| read_png(p, Some(4), Some(8)));
        eprintln!("{}-bit, 4 frames: {report}", if sixteen { 16 } else { 8 });
        report.assert_clean();
        let report = check_reader("png", &cases, |p| load_stack(p, &LoadOptions::default()));
        eprintln!("{}-bit, whole: {report}", if sixteen { 16 } else { 8 });
        report.assert_clean();
    }
}

#[test]
fn png_header_larger_than_the_file_is_refused_before_allocation() {
    let dir = scratch("png_wide");
    let mut bytes = good_png(true, 12, 16);
    // IHDR width 2^31 - 1, height 16 (the CRC is wrong too: the size check comes first or
    // the CRC error does; both are errors naming the file).
    bytes[16..20].copy_from_slice(&0x7FFF_FFFFu32.to_be_bytes());
    let path = dir.join("wide.png");
    std::fs::write(&path, &bytes).unwrap();
    let before = ALLOC.live();
    let err = read_png(&path, None, None).unwrap_err().to_string();
    assert!(ALLOC.live() < before + (1 << 20));
    assert!(err.contains("wide.png"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupted_raw_files_give_errors_naming_the_file() {
    let dir = scratch("raw");
    let stack = RawStack::U16(Array3::from_shape_fn((4, 6, 8), |(f, r, c)| {
        (f * 100 + r * 8 + c) as u16
    }));
    let path = dir.join("good.raw");
    write_raw(&path, &stack, ByteOrder::Little).unwrap();
    let good = std::fs::read(&path).unwrap();
    let mut cases = truncations(&good);
    cases.extend(bit_flips(&good, 50, 200));
    let mut longer = good.clone();
    longer.extend([0u8; 10]);
    cases.push(Case::new("10 bytes appended", longer));
    let spec = RawSpec::new(8, 6, RawDtype::U16);
    let report = check_reader("raw", &cases, move |p| read_raw(p, &spec));
    eprintln!("{report}");
    report.assert_clean();
    // Partial frames are errors, never silently dropped (a cut at a frame boundary leaves
    // whole frames, which a headerless file cannot tell from a shorter recording).
    let frame = 8 * 6 * 2;
    for (case, (label, outcome)) in cases.iter().zip(&report.outcomes) {
        if case.bytes.len() % frame != 0 {
            assert!(
                matches!(outcome, bad_input::Outcome::Error(e) if e.contains("truncated")),
                "{label}: {outcome:?}"
            );
        }
    }
    let report = check_reader("raw", &cases, move |p| {
        load_stack(p, &LoadOptions::default().with_raw(spec).with_bit_depth(9))
    });
    eprintln!("load_stack, 9 bits stated: {report}");
    report.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reading_a_missing_file_names_it() {
    let p = Path::new("/nonexistent/speckle/x.tif");
    assert!(
        read_tiff(p, None)
            .unwrap_err()
            .to_string()
            .contains("x.tif")
    );
}
