//! Figures a scientist can paste into a paper: every map image has a colour bar titled with
//! the quantity and unit, robust (overridable) limits and a readable size; float TIFF maps
//! carry ImageJ metadata (value unit, label, pixel size, display range) that a TIFF reader
//! gets back.

use crate::common::Tmp;
use flim_core::io::{
    MIN_LONG_SIDE, axis_label, figure_scale, quantity, write_lifetime_png, write_map_png,
    write_map_tiff,
};
use imaging_io::{Colormap, Range, StackAxes};
use ndarray::Array2;
use std::path::Path;
use tiff::decoder::{Decoder, DecodingResult};
use tiff::tags::Tag;

fn png_pixels(path: &Path) -> (usize, usize, Vec<u8>) {
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    (info.width as usize, info.height as usize, buf)
}

/// `key=value` lines of an ImageJ description.
fn field<'a>(description: &'a str, key: &str) -> Option<&'a str> {
    description
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn map_names_give_quantity_and_unit() {
    for (name, label, unit) in [
        ("tau_mle_ns", "tau_mle", "ns"),
        ("tau_iem_ns", "tau_iem", "ns"),
        ("tau_amp_mean_ns", "tau_m", "ns"),
        ("tau_int_mean_ns", "tau_int", "ns"),
        ("tau_phase_ns", "tau_phi", "ns"),
        ("tau2_ns", "tau_2", "ns"),
        ("a1", "a_1", "photons/ns"),
        ("f2", "f_2", ""),
        ("chi2_red", "chi2_r", ""),
        ("intensity", "intensity", "photons"),
        ("g", "g", ""),
        ("s", "s", ""),
        ("E_fret", "E_FRET", ""),
        ("f_d_bcmm", "f_D bcmm", ""),
        ("tau_f_pm_ns", "tau_F pm", "ns"),
        ("irf_shift_ns", "IRF shift", "ns"),
        ("offset", "offset", "photons/bin"),
    ] {
        assert_eq!(quantity(name), (label.to_string(), unit), "{name}");
    }
    assert_eq!(axis_label("tau_amp_mean_ns"), "tau_m (ns)");
    assert_eq!(axis_label("chi2_red"), "chi2_r");
    assert_eq!(axis_label("E_fret"), "E_FRET");
    assert_eq!(axis_label("intensity"), "intensity (photons)");
}

#[test]
fn small_maps_are_enlarged_by_an_integer_factor() {
    assert_eq!(figure_scale(32, 8), 16);
    assert_eq!(figure_scale(8, 32), 16);
    assert_eq!(figure_scale(64, 128), 4);
    assert_eq!(figure_scale(512, 512), 1);
    assert_eq!(figure_scale(1024, 300), 1);
    assert_eq!(figure_scale(1, 1), MIN_LONG_SIDE);
}

/// A map of 8 columns by 32 rows (the demo's FRET phantom shape): lifetime rising with the
/// column, one masked pixel, one failed (NaN).
fn fret_like() -> (Array2<f32>, Array2<f32>, Array2<bool>) {
    let tau = Array2::from_shape_fn((32, 8), |(r, c)| {
        if (r, c) == (5, 5) {
            f32::NAN
        } else {
            0.8 + 0.2 * c as f32
        }
    });
    let intensity = Array2::from_elem((32, 8), 1000.0f32);
    let mut mask = Array2::from_elem((32, 8), true);
    mask[[0, 0]] = false;
    (tau, intensity, mask)
}

#[test]
fn lifetime_image_is_enlarged_with_a_titled_colour_bar() {
    let tmp = Tmp::new("png");
    let (tau, intensity, mask) = fret_like();
    let path = tmp.path("tau.png");
    let (lo, hi) = write_lifetime_png(
        &path,
        "tau_amp_mean_ns",
        tau.view(),
        intensity.view(),
        mask.view(),
        Colormap::Turbo,
        Range::Fixed(0.8, 2.2),
    )
    .unwrap();
    assert_eq!((lo, hi), (0.8, 2.2));
    let (w, h, px) = png_pixels(&path);
    let at = |x: usize, y: usize| {
        [
            px[3 * (y * w + x)],
            px[3 * (y * w + x) + 1],
            px[3 * (y * w + x) + 2],
        ]
    };
    // 32 rows x 16 = 512 px tall, plus margins; the bar and its title sit to the right.
    let s = 16;
    assert!(h >= 32 * s, "height {h}");
    assert!(w > 8 * s + 60, "width {w}");
    // Margin 16 px at font scale 2: map pixel (r, c) starts at (16 + c s, 16 + r s).
    let m = 16;
    let centre = |r: usize, c: usize| at(m + c * s + s / 2, m + r * s + s / 2);
    assert_eq!(centre(0, 0), [0, 0, 0], "masked pixel is black");
    assert_eq!(centre(5, 5), [0, 0, 0], "failed pixel is black");
    assert_ne!(centre(10, 1), centre(10, 6), "lifetimes differ in colour");
    // Nearest neighbour: every pixel of one map pixel's block has the same colour.
    for dy in 0..s {
        for dx in 0..s {
            assert_eq!(at(m + s + dx, m + 10 * s + dy), centre(10, 1));
        }
    }
    // The title: dark pixels in the rightmost columns (the vertical text), beyond the tick
    // labels, over about the width of "TAU_M (NS)" (10 glyphs of 12 px at scale 2).
    let title_cols = (w - 40)..w;
    let dark_rows: Vec<usize> = (0..h)
        .filter(|&y| title_cols.clone().any(|x| at(x, y) == [0, 0, 0]))
        .collect();
    assert!(!dark_rows.is_empty(), "no title drawn");
    let extent = dark_rows.last().unwrap() - dark_rows.first().unwrap() + 1;
    assert!(
        (100..=125).contains(&extent),
        "title spans {extent} rows, want about 118"
    );
}

#[test]
fn percentile_limits_ignore_masked_failed_and_outliers() {
    let tmp = Tmp::new("limits");
    // 10,000 values 1..=4 ns, two wild outliers, masked pixels holding 100 ns.
    let mut tau = Array2::from_shape_fn((100, 100), |(r, c)| {
        1.0 + 3.0 * (r * 100 + c) as f32 / 9999.0
    });
    tau[[0, 0]] = 1e6;
    tau[[0, 1]] = -1e6;
    tau[[0, 2]] = f32::NAN;
    let mut mask = Array2::from_elem((100, 100), true);
    for c in 50..100 {
        mask[[99, c]] = false;
        tau[[99, c]] = 100.0;
    }
    let (lo, hi) = write_map_png(
        &tmp.path("m.png"),
        "tau_mle_ns",
        tau.view(),
        mask.view(),
        Colormap::Viridis,
        Range::Percentile(1.0, 99.0),
    )
    .unwrap();
    assert!(
        (1.0..1.1).contains(&lo) && (3.9..4.0).contains(&hi),
        "{lo}..{hi}"
    );
    // The caller's fixed limits win.
    let fixed = write_map_png(
        &tmp.path("f.png"),
        "tau_mle_ns",
        tau.view(),
        mask.view(),
        Colormap::Viridis,
        Range::Fixed(0.5, 5.0),
    )
    .unwrap();
    assert_eq!(fixed, (0.5, 5.0));
    let (w, h, _) = png_pixels(&tmp.path("f.png"));
    assert!(h >= 500 && w > h, "{w}x{h}");
}

fn read_tiff(path: &Path) -> (Vec<f32>, String, Decoder<std::fs::File>) {
    let mut dec = Decoder::new(std::fs::File::open(path).unwrap()).unwrap();
    let description = dec.get_tag_ascii_string(Tag::ImageDescription).unwrap();
    let DecodingResult::F32(v) = dec.read_image().unwrap() else {
        panic!("a float32 map")
    };
    (v, description, dec)
}

#[test]
fn tiff_maps_carry_imagej_unit_label_and_pixel_size() {
    let tmp = Tmp::new("tif");
    let (tau, _, _) = fret_like();
    let path = tmp.path("tau.tif");
    write_map_tiff(&path, "tau_amp_mean_ns", tau.view(), Some(0.25)).unwrap();
    let (v, d, mut dec) = read_tiff(&path);
    assert_eq!(v.len(), 32 * 8);
    assert!(v[5 * 8 + 5].is_nan() && (v[8 + 1] - 1.0).abs() < 1e-6);
    // ImageJ metadata, as the workspace's own ImageJ parser and Fiji read it.
    assert!(d.starts_with("ImageJ="), "{d}");
    assert!(StackAxes::parse(&d).is_some(), "{d}");
    assert_eq!(field(&d, "vunit"), Some("ns"));
    assert_eq!(field(&d, "label"), Some("tau_m"));
    assert_eq!(field(&d, "map"), Some("tau_amp_mean_ns"));
    assert_eq!(field(&d, "unit"), Some("micron"));
    let min: f32 = field(&d, "min").unwrap().parse().unwrap();
    let max: f32 = field(&d, "max").unwrap().parse().unwrap();
    assert!(
        (0.8..1.0).contains(&min) && (2.0..=2.2).contains(&max),
        "{min}..{max}"
    );
    // Pixel size as resolution: 4 pixels per micron.
    let tiff::decoder::ifd::Value::Rational(n, dd) = dec.get_tag(Tag::XResolution).unwrap() else {
        panic!("XResolution is a rational")
    };
    let xres = f64::from(n) / f64::from(dd);
    assert!((xres - 4.0).abs() < 1e-6, "{xres}");
    assert_eq!(
        dec.get_tag_u32(Tag::ResolutionUnit).unwrap(),
        1,
        "no absolute unit"
    );
    // ImageJ's private tags: the slice label Fiji shows, UTF-16 after the header.
    let counts = dec.get_tag_u32_vec(Tag::Unknown(50838)).unwrap();
    let data = dec.get_tag_u8_vec(Tag::Unknown(50839)).unwrap();
    assert_eq!(counts.len(), 3);
    assert_eq!(counts.iter().sum::<u32>() as usize, data.len());
    assert_eq!(&data[..4], &0x494a_494a_u32.to_ne_bytes());
    let start = (counts[0] + counts[1]) as usize;
    let label: Vec<u16> = data[start..]
        .chunks_exact(2)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(String::from_utf16(&label).unwrap(), "tau_m (ns)");
}

#[test]
fn tiff_maps_without_unit_or_pixel_size_say_so() {
    let tmp = Tmp::new("tif2");
    let map = Array2::from_shape_fn((4, 6), |(r, c)| (r * 6 + c) as f32 / 24.0);
    let path = tmp.path("chi2.tif");
    write_map_tiff(&path, "chi2_red", map.view(), None).unwrap();
    let (v, d, mut dec) = read_tiff(&path);
    assert_eq!(v.len(), 24);
    assert_eq!(field(&d, "label"), Some("chi2_r"));
    assert_eq!(field(&d, "vunit"), None, "chi2_r has no unit");
    assert_eq!(field(&d, "unit"), None, "no pixel size known");
    // The encoder's default resolution (1 pixel per unit) stands, and no unit is named.
    if let Some(tiff::decoder::ifd::Value::Rational(n, dd)) =
        dec.find_tag(Tag::XResolution).unwrap()
    {
        assert_eq!(n, dd);
    }
    // All-NaN maps still write (no display range).
    let nan = Array2::from_elem((3, 3), f32::NAN);
    write_map_tiff(&tmp.path("nan.tif"), "intensity", nan.view(), None).unwrap();
    let (_, d, _) = read_tiff(&tmp.path("nan.tif"));
    assert_eq!(field(&d, "vunit"), Some("photons"));
    assert_eq!(field(&d, "min"), None);
    // Empty maps are refused with a message.
    let empty = Array2::<f32>::zeros((0, 4));
    let e = write_map_tiff(&tmp.path("e.tif"), "g", empty.view(), None).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}
