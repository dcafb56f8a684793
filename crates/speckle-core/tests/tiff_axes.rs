//! TIFF stacks as tifffile 2026.3.3 writes them (`tests/data`, numpy's default_rng(1)): a
//! single axis of frames and a ZSTD-compressed stack read bit-identically to tifffile; a
//! hyperstack is refused with its axes named, never read as one long axis that mixes
//! channels and slices; 3 frames saved as RGB planes are refused with the fix spelled out.

use speckle_core::RawStack;
use speckle_core::io::{LoadOptions, load_stack};
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn an_imagej_stack_of_frames_reads_as_tifffile_reads_it() {
    // tifffile.imread: shape (6, 16, 16), sum 3162528, a[0,0,0] 3204, a[-1,-1,-1] 3615.
    let (stack, _) = load_stack(data("imagej_frames.tif"), &LoadOptions::default()).unwrap();
    let RawStack::U16(a) = stack else {
        panic!("expected 16-bit frames")
    };
    assert_eq!(a.dim(), (6, 16, 16));
    assert_eq!(a.iter().map(|&v| u64::from(v)).sum::<u64>(), 3_162_528);
    assert_eq!((a[[0, 0, 0]], a[[5, 15, 15]]), (3204, 3615));
}

#[test]
fn hyperstacks_are_refused_with_their_axes_named() {
    for (name, axes) in [
        (
            "hyperstack_tzcyx.tif",
            "ImageJ hyperstack of 2 channels x 3 slices x 4 frames (axes TZCYX)",
        ),
        ("ome_tcyx.ome.tif", "OME-TIFF of 2 channels x 5 frames"),
    ] {
        let err = load_stack(data(name), &LoadOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains(axes), "{err}");
        assert!(err.contains("one channel and one slice"), "{err}");
    }
}

#[test]
fn zstd_compressed_frames_read_as_tifffile_reads_them() {
    // tifffile.imwrite(..., compression='zstd', photometric='minisblack');
    // imread: shape (3, 16, 16), sum 1551238, a[0,0,0] 3588, a[2,15,15] 2283.
    let (stack, _) = load_stack(data("zstd_frames.tif"), &LoadOptions::default()).unwrap();
    let RawStack::U16(a) = stack else {
        panic!("expected 16-bit frames")
    };
    assert_eq!(a.dim(), (3, 16, 16));
    assert_eq!(a.iter().map(|&v| u64::from(v)).sum::<u64>(), 1_551_238);
    assert_eq!((a[[0, 0, 0]], a[[2, 15, 15]]), (3588, 2283));
}

#[test]
fn three_frames_saved_as_rgb_planes_are_refused_with_the_fix() {
    // tifffile.imwrite(path, stack) of shape (3, 16, 16), without photometric: RGB planes.
    let err = load_stack(data("rgb_looking_3_frames.tif"), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("photometric='minisblack'"), "{err}");
}

#[test]
fn one_channel_and_slice_of_a_hyperstack_reads_as_tifffile_slices_it() {
    use speckle_core::io::StackPick;
    // tifffile.imread(...)[:, z, c] of the (4, 3, 2, 16, 16) TZCYX stack, and [:, c] of the
    // (5, 2, 16, 16) OME TCYX stack: (frames, sum, a[0,0,0], a[-1,-1,-1]).
    for (name, channel, slice, want) in [
        (
            "hyperstack_tzcyx.tif",
            1,
            Some(2),
            (4, 2_139_310u64, 3396u16, 1288u16),
        ),
        ("ome_tcyx.ome.tif", 0, None, (5, 2_598_778, 2579, 353)),
    ] {
        let opts = LoadOptions {
            pick: StackPick {
                channel: Some(channel),
                slice,
            },
            ..LoadOptions::default()
        };
        let (stack, _) = load_stack(data(name), &opts).unwrap();
        let RawStack::U16(a) = stack else {
            panic!("expected 16-bit frames")
        };
        let n = a.dim().0;
        let got = (
            n,
            a.iter().map(|&v| u64::from(v)).sum::<u64>(),
            a[[0, 0, 0]],
            a[[n - 1, 15, 15]],
        );
        assert_eq!(got, want, "{name}");
    }
    // A pick past the axis, or on a file without axes, is refused.
    let opts = LoadOptions {
        pick: StackPick {
            channel: Some(2),
            slice: Some(0),
        },
        ..LoadOptions::default()
    };
    let err = load_stack(data("hyperstack_tzcyx.tif"), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--channel 2") && err.contains("2 channel(s)"),
        "{err}"
    );
    let opts = LoadOptions {
        pick: StackPick {
            channel: Some(0),
            slice: None,
        },
        ..LoadOptions::default()
    };
    assert!(load_stack(data("zstd_frames.tif"), &opts).is_err());
}

#[test]
fn lzma_is_refused_by_name_with_the_alternatives() {
    let err = load_stack(data("lzma_frames.tif"), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("LZMA") && err.contains("ZSTD"), "{err}");
}
