//! Outputs: masked and zero-photon pixels never reach a statistic, a histogram or a colour
//! (NaN in TIFF maps, black in images); files are readable and say what they should.

use crate::common::Tmp;
use flim_core::io::{
    MapSet, brightness, lifetime_histogram, map_stats, write_histogram_csv, write_histogram_png,
    write_lifetime_png, write_map_tiff, write_phasor_png, write_summary_csv,
};
use flim_core::sim::mono_exponential;
use flim_core::{Analysis, Cube, analyse};
use gpu_runtime::Device;
use imaging_io::{Colormap, Range};
use ndarray::{Array2, s};

/// Bars of 2 and 4 ns with a block of zero-photon pixels.
fn maps_with_empty_pixels() -> MapSet {
    let cube = mono_exponential(&[2.0, 4.0], 16, 16, 128, 0.1, 12.8, 3000.0, 5).unwrap();
    let mut counts = cube.counts().to_owned();
    counts.slice_mut(s![0..4, 0..4, ..]).fill(0);
    let cube = Cube::new(counts, 0.1)
        .unwrap()
        .with_period_ns(12.8)
        .unwrap();
    MapSet::from_lifetimes(
        &analyse(
            &cube,
            &Analysis::default().with_threshold(50.0),
            &Device::cpu(),
        )
        .unwrap()
        .0,
    )
}

fn png_pixels(path: &std::path::Path) -> (usize, usize, Vec<u8>) {
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    (info.width as usize, info.height as usize, buf)
}

#[test]
fn zero_photon_pixels_are_masked_and_never_poison_stats() {
    let set = maps_with_empty_pixels();
    assert_eq!(set.mask.iter().filter(|&&m| !m).count(), 16);
    for (name, map) in &set.maps {
        let st = map_stats(map.view(), set.mask.view());
        assert_eq!(st.masked, 16, "{name}");
        let fields = [
            st.mean, st.sd, st.min, st.p05, st.p25, st.median, st.p75, st.p95, st.max,
        ];
        assert!(fields.iter().all(|v| v.is_finite()), "{name}: {st:?}");
    }
    let tau = set.get("tau_iem_ns").unwrap();
    let st = map_stats(tau.view(), set.mask.view());
    assert_eq!(st.valid + st.failed, 240);
    assert!(
        st.p25 > 1.8 && st.p75 < 4.2 && st.median > 2.0 && st.median < 4.0,
        "{st:?}"
    );
    let masked = set.masked("tau_iem_ns").unwrap();
    assert!(masked[[0, 0]].is_nan() && masked[[8, 8]].is_finite());
    // No pixel at all: zeros, not NaN.
    let none = map_stats(tau.view(), Array2::from_elem((16, 16), false).view());
    assert_eq!(
        (none.valid, none.masked, none.mean, none.median),
        (0, 256, 0.0, 0.0)
    );
    // A map of another size is refused.
    let mut s2 = MapSet::new((2, 2));
    assert!(s2.push("x", Array2::zeros((3, 2))).is_err());
}

#[test]
fn lifetime_image_is_coloured_by_tau_and_black_where_masked() {
    let tmp = Tmp::new("png");
    let set = maps_with_empty_pixels();
    let tau = set.get("tau_iem_ns").unwrap();
    let intensity = set.get("intensity").unwrap();
    let path = tmp.path("tau.png");
    let (lo, hi) = write_lifetime_png(
        &path,
        "tau_iem_ns",
        tau.view(),
        intensity.view(),
        set.mask.view(),
        Colormap::Turbo,
        Range::Fixed(1.0, 5.0),
    )
    .unwrap();
    assert_eq!((lo, hi), (1.0, 5.0));
    let (w, h, px) = png_pixels(&path);
    // 16 rows are enlarged 32x (to 512) with a 16-pixel margin at font scale 2.
    assert!(h >= 512 && w > 512);
    let at = |x: usize, y: usize| &px[3 * (y * w + x)..3 * (y * w + x) + 3];
    let (m, sc) = (16, 32);
    assert_eq!(at(m + sc, m + sc), [0, 0, 0], "zero-photon pixel is black");
    let left = at(m + 6 * sc, m + 10 * sc).to_vec();
    let right = at(m + 12 * sc, m + 10 * sc).to_vec();
    assert_ne!(left, [0, 0, 0]);
    assert_ne!(left, right, "2 ns and 4 ns bars differ in colour");
    // Brightness: 1 at the top intensities, 0 where masked.
    let b = brightness(intensity.view(), set.mask.view());
    assert_eq!(b[[0, 0]], 0.0);
    assert!(b.iter().copied().fold(0.0, f32::max) == 1.0);
}

#[test]
fn histogram_counts_only_valid_pixels() {
    let tmp = Tmp::new("hist");
    let set = maps_with_empty_pixels();
    let tau = set.get("tau_cmm_ns").unwrap();
    let intensity = set.get("intensity").unwrap();
    let h =
        lifetime_histogram(tau.view(), set.mask.view(), intensity.view(), 0.0, 8.0, 80).unwrap();
    let st = map_stats(tau.view(), set.mask.view());
    assert_eq!(
        h.pixels.iter().sum::<u64>() + h.outside.0 + h.outside.1,
        st.valid as u64
    );
    // Two bars: most pixels within 0.5 ns of 2 and of 4.
    let near = |t: f64| -> u64 {
        h.pixels
            .iter()
            .enumerate()
            .filter(|(k, _)| ((*k as f64 + 0.5) * 0.1 - t).abs() < 0.5)
            .map(|(_, &n)| n)
            .sum()
    };
    assert!(near(2.0) + near(4.0) > 220, "{} {}", near(2.0), near(4.0));
    let csv = tmp.path("h.csv");
    write_histogram_csv(&csv, &h).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 81);
    assert!(text.starts_with("lo,hi,pixels,intensity\n0,0.1,"));
    write_histogram_png(&tmp.path("h.png"), &h, "TAU (NS)").unwrap();
    assert!(png_pixels(&tmp.path("h.png")).0 > 100);
    assert!(
        lifetime_histogram(tau.view(), set.mask.view(), intensity.view(), 2.0, 1.0, 10).is_err()
    );
}

#[test]
fn phasor_plot_and_summary_files() {
    let tmp = Tmp::new("phasor");
    let set = maps_with_empty_pixels();
    let omega = 2.0 * std::f64::consts::PI / 12.8;
    let n = write_phasor_png(
        &tmp.path("p.png"),
        set.get("g").unwrap().view(),
        set.get("s").unwrap().view(),
        set.mask.view(),
        omega,
    )
    .unwrap();
    assert_eq!(n, 240, "every analysed pixel, none of the empty ones");
    let (w, h, px) = png_pixels(&tmp.path("p.png"));
    assert!(w > 800 && h > 500);
    // Something coloured (counts) besides black and white.
    assert!(
        px.chunks_exact(3)
            .any(|p| p != [0, 0, 0] && p != [255, 255, 255] && p != [200, 200, 200])
    );

    let rows: Vec<_> = set
        .maps
        .iter()
        .map(|(n, m)| {
            (
                "all".to_string(),
                n.clone(),
                map_stats(m.view(), set.mask.view()),
            )
        })
        .collect();
    write_summary_csv(&tmp.path("s.csv"), &rows).unwrap();
    let text = std::fs::read_to_string(tmp.path("s.csv")).unwrap();
    assert_eq!(text.lines().count(), 1 + set.maps.len());
    assert!(!text.contains("NaN") && !text.contains("nan"));
    let json = serde_json::to_string(&rows[1].2).unwrap();
    assert!(json.contains("\"median\"") && !json.contains("null"));
    // A TIFF map keeps NaN where masked.
    write_map_tiff(
        &tmp.path("t.tif"),
        "tau_iem_ns",
        set.masked("tau_iem_ns").unwrap().view(),
        None,
    )
    .unwrap();
    let mut dec =
        tiff::decoder::Decoder::new(std::fs::File::open(tmp.path("t.tif")).unwrap()).unwrap();
    let tiff::decoder::DecodingResult::F32(v) = dec.read_image().unwrap() else {
        panic!("f32 map")
    };
    assert!(v[0].is_nan() && v[8 * 16 + 8].is_finite());
}
