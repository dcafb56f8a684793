//! Preprocessing against known truth from `flim_core::sim`: binning sums, masks, fit ranges,
//! background, IRF estimates and shifts.

use flim_core::AnyCube;
use flim_core::Cube;
use flim_core::preprocess::{
    Binning, FitRange, Irf, bin_spatial, estimate_offset, half_rise_ns, photon_mask,
    rise_shift_map, summed_decay,
};
use flim_core::sim::DecaySim;
use ndarray::{Array3, Axis, concatenate, s};

fn counts_u32(c: &AnyCube) -> Array3<u32> {
    match c {
        AnyCube::U32(c) => c.counts().to_owned(),
        other => panic!("u32 expected, got {}", other.dtype()),
    }
}

#[test]
fn square_and_circular_binning_sum_the_right_neighbours() {
    let raw = Array3::<u16>::from_shape_fn((5, 6, 4), |(y, x, b)| (y * 100 + x * 10 + b) as u16);
    let cube: AnyCube = Cube::new(raw.clone(), 0.1)
        .unwrap()
        .with_period_ns(2.0)
        .unwrap()
        .into();
    let sq = counts_u32(&bin_spatial(&cube, Binning::Square(1)).unwrap());
    let by_hand = |y: usize, x: usize, b: usize, keep: &dyn Fn(isize, isize) -> bool| -> u32 {
        let mut s = 0;
        for dy in -2isize..=2 {
            for dx in -2isize..=2 {
                let (yy, xx) = (y as isize + dy, x as isize + dx);
                if keep(dy, dx) && (0..5).contains(&yy) && (0..6).contains(&xx) {
                    s += u32::from(raw[[yy as usize, xx as usize, b]]);
                }
            }
        }
        s
    };
    for (y, x) in [(0, 0), (2, 3), (4, 5), (1, 0)] {
        for b in 0..4 {
            assert_eq!(
                sq[[y, x, b]],
                by_hand(y, x, b, &|dy, dx| dy.abs() <= 1 && dx.abs() <= 1)
            );
        }
    }
    // Radius 1: the pixel and its 4 edge neighbours; radius 1.5 adds the corners.
    let c1 = counts_u32(&bin_spatial(&cube, Binning::Circular(1.0)).unwrap());
    assert_eq!(
        c1[[2, 3, 1]],
        by_hand(2, 3, 1, &|dy, dx| dy * dy + dx * dx <= 1)
    );
    let c15 = counts_u32(&bin_spatial(&cube, Binning::Circular(1.5)).unwrap());
    assert_eq!(c15, sq);
    let c2 = counts_u32(&bin_spatial(&cube, Binning::Circular(2.0)).unwrap());
    assert_eq!(
        c2[[2, 2, 3]],
        by_hand(2, 2, 3, &|dy, dx| dy * dy + dx * dx <= 4)
    );
    // Period and bin width survive; bin 0 is the identity; bad radii are refused.
    let b = bin_spatial(&cube, Binning::Square(2)).unwrap();
    assert_eq!((b.bin_ns(), b.period_ns()), (0.1, 2.0));
    assert_eq!(
        bin_spatial(&cube, Binning::Square(0)).unwrap().photons(),
        cube.photons()
    );
    assert!(bin_spatial(&cube, Binning::Circular(-1.0)).is_err());
    assert!(bin_spatial(&cube, Binning::Square(65)).is_err());
    // Floats stay floats.
    let f = AnyCube::F32(cube.to_f32());
    assert_eq!(bin_spatial(&f, Binning::Square(1)).unwrap().dtype(), "f32");
}

#[test]
fn mask_threshold_and_zero_photon_pixels() {
    let mut raw = Array3::<u16>::zeros((2, 3, 8));
    raw[[0, 1, 2]] = 5;
    raw[[1, 2, 0]] = 50;
    let cube: AnyCube = Cube::new(raw, 0.1).unwrap().into();
    let m = photon_mask(&cube, 10.0);
    assert_eq!(m.iter().filter(|&&v| v).count(), 1);
    assert!(m[[1, 2]]);
    // A threshold of 0 still masks pixels without photons.
    assert_eq!(photon_mask(&cube, 0.0).iter().filter(|&&v| v).count(), 2);
}

#[test]
fn fit_range_by_bins_and_by_ns() {
    let r = FitRange::from_ns(1.0, 5.0, 0.1, 128).unwrap();
    // Bin centres (j + 0.5) 0.1 inside [1, 5]: j = 10 (1.05 ns) to 49 (4.95 ns).
    assert_eq!((r.first, r.bins), (10, 40));
    assert_eq!(FitRange::from_bins(3, 100, 128).unwrap().bins, 97);
    assert!(
        FitRange::from_bins(10, 12, 128).is_err(),
        "fewer than 4 bins"
    );
    assert!(FitRange::from_bins(0, 200, 128).is_err());
    assert!(FitRange::from_ns(5.0, 1.0, 0.1, 128).is_err());
    let cube: AnyCube = DecaySim::new(64, 0.1, 100.0)
        .unwrap()
        .cube(2, 2, |_, _| vec![(1.0, 1.0)])
        .unwrap()
        .into();
    let cut = FitRange::from_bins(8, 40, 64).unwrap().crop(&cube).unwrap();
    assert_eq!(cut.bins(), 32);
    let AnyCube::U16(c) = &cube else { panic!() };
    let AnyCube::U16(k) = &cut else { panic!() };
    assert_eq!(k.counts(), c.counts().slice(s![.., .., 8..40]));
}

#[test]
fn background_from_the_pre_rise_bins() {
    // 0.5 counts per bin background, decay rising at 2 ns of a 12.8 ns window.
    let sim = DecaySim::new(128, 0.1, 2000.0)
        .unwrap()
        .with_irf(0.1, 2.0)
        .with_background(0.5)
        .with_seed(3);
    // Lifetime 1 ns: the previous pulse's tail adds e^-10.8 of the peak, 0.004 counts per bin.
    let cube: AnyCube = sim.cube(16, 16, |_, _| vec![(1.0, 1.0)]).unwrap().into();
    let off = estimate_offset(&cube).unwrap();
    assert!((off.counts_per_bin - 0.5).abs() < 0.03, "{off:?}");
    // With 2 ns, that tail (0.2 to 0.45 counts per bin before the rise) is part of what the
    // pre-rise bins hold, as in SPCImage: the estimate includes it.
    let long: AnyCube = sim.cube(16, 16, |_, _| vec![(1.0, 2.0)]).unwrap().into();
    let tail: f64 = (0..16)
        .map(|j| {
            2000.0 * (1.0 - (-0.05f64).exp()) * (-(10.8 + (j as f64 + 0.5) * 0.1) / 2.0).exp()
                / (1.0 - (-6.4f64).exp())
        })
        .sum::<f64>()
        / 16.0;
    let est = estimate_offset(&long).unwrap().counts_per_bin;
    assert!((est - 0.5 - tail).abs() < 0.05, "{est} vs 0.5 + {tail}");
    assert!(off.bins.end >= 10 && off.bins.end <= 19, "{off:?}");
    // A decay rising at the first bin leaves nothing to estimate from.
    let early: AnyCube = DecaySim::new(64, 0.1, 500.0)
        .unwrap()
        .cube(4, 4, |_, _| vec![(1.0, 2.0)])
        .unwrap()
        .into();
    assert!(
        estimate_offset(&early)
            .unwrap_err()
            .to_string()
            .contains("--offset")
    );
}

#[test]
fn irf_estimated_from_the_data_matches_the_simulated_gaussian() {
    // Gaussian IRF, sigma 0.15 ns at 2.0 ns; lifetime 2.5 ns; 256 bins of 50 ps.
    let sigma = 0.15;
    let sim = DecaySim::new(256, 0.05, 5000.0)
        .unwrap()
        .with_irf(sigma, 2.0)
        .with_seed(11);
    let cube: AnyCube = sim.cube(16, 16, |_, _| vec![(1.0, 2.5)]).unwrap().into();
    let irf = Irf::estimate(&cube).unwrap();
    let fwhm = 2.0 * (2.0 * 2f64.ln()).sqrt() * sigma;
    assert!(
        (irf.centroid_ns() - 2.0).abs() < 0.03,
        "centroid {}",
        irf.centroid_ns()
    );
    assert!(
        (irf.fwhm_ns() / fwhm - 1.0).abs() < 0.15,
        "FWHM {} vs {fwhm}",
        irf.fwhm_ns()
    );
}

#[test]
fn irf_from_a_reference_measurement_and_from_text_files() {
    // A scatterer: lifetime far below a bin.
    let sim = DecaySim::new(128, 0.1, 20_000.0)
        .unwrap()
        .with_irf(0.12, 3.0)
        .with_background(0.2)
        .with_seed(5);
    let reference: AnyCube = sim.cube(4, 4, |_, _| vec![(1.0, 0.001)]).unwrap().into();
    let irf = Irf::from_reference(&reference).unwrap();
    assert!(
        (irf.centroid_ns() - 3.0).abs() < 0.02,
        "{}",
        irf.centroid_ns()
    );
    assert!((irf.values().iter().sum::<f64>() - 1.0).abs() < 1e-12);

    let dir = std::env::temp_dir().join(format!("flim-irf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one = dir.join("irf.txt");
    std::fs::write(&one, "# counts\n0\n1\n4\n1\n0\n").unwrap();
    let a = Irf::from_file(&one, Some(0.1)).unwrap();
    assert!((a.centroid_ns() - 0.25).abs() < 1e-12);
    assert!(
        Irf::from_file(&one, None)
            .unwrap_err()
            .to_string()
            .contains("bin width")
    );
    let two = dir.join("irf.csv");
    std::fs::write(&two, "time_ns,counts\n0.0,0\n0.2,2\n0.4,8\n0.6,2\n").unwrap();
    let b = Irf::from_file(&two, None).unwrap();
    assert!((b.bin_ns() - 0.2).abs() < 1e-12 && (b.centroid_ns() - 0.5).abs() < 1e-12);
    assert!(
        Irf::from_file(&two, Some(0.1))
            .unwrap_err()
            .to_string()
            .contains("resample")
    );
    std::fs::write(&two, "0.0,0\n0.2,x\n").unwrap();
    assert!(
        Irf::from_file(&two, None)
            .unwrap_err()
            .to_string()
            .contains("line 2")
    );
    // A reference recording in a TCSPC format keeps its own bin width, which must match.
    let refpath = dir.join("scatter.sdt");
    let AnyCube::U16(rc) = &reference else {
        panic!("u16 counts")
    };
    flim_core::io::write_sdt(&refpath, &[vec![rc.clone()]], true).unwrap();
    let c = Irf::from_file(&refpath, Some(0.1)).unwrap();
    assert!((c.centroid_ns() - irf.centroid_ns()).abs() < 1e-6);
    let e = Irf::from_file(&refpath, Some(0.05))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("scatter.sdt") && e.contains("the data 0.05 ns"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
    assert!(Irf::new(vec![0.0, 0.0], 0.1).is_err());
    assert!(Irf::new(vec![1.0, -1.0], 0.1).is_err());
}

#[test]
fn global_and_per_pixel_irf_shifts() {
    let base = DecaySim::new(200, 0.05, 30_000.0).unwrap();
    let reference: AnyCube = base
        .with_irf(0.1, 2.0)
        .cube(2, 2, |_, _| vec![(1.0, 0.001)])
        .unwrap()
        .into();
    let irf = Irf::from_reference(&reference).unwrap();
    // The sample's IRF arrives 0.3 ns later than the reference's.
    let data: AnyCube = base
        .with_irf(0.1, 2.3)
        .with_seed(7)
        .cube(8, 8, |_, _| vec![(1.0, 3.0)])
        .unwrap()
        .into();
    let shift = irf.global_shift(&data, 1.0).unwrap();
    assert!((shift - 0.3).abs() < 0.03, "shift {shift}");
    assert!((irf.shifted(shift).centroid_ns() - 2.3).abs() < 0.04);

    // Per pixel: the right half of the field 0.2 ns later than the left.
    let left = base
        .with_irf(0.1, 2.0)
        .with_seed(1)
        .cube(6, 4, |_, _| vec![(1.0, 2.0)])
        .unwrap();
    let right = base
        .with_irf(0.1, 2.2)
        .with_seed(2)
        .cube(6, 4, |_, _| vec![(1.0, 2.0)])
        .unwrap();
    let both = concatenate(Axis(1), &[left.counts(), right.counts()]).unwrap();
    let cube: AnyCube = Cube::new(both, 0.05).unwrap().into();
    let mask = photon_mask(&cube, 1.0);
    let map = rise_shift_map(&cube, &mask).unwrap();
    let mean = |cols: std::ops::Range<usize>| {
        let v: Vec<f32> = map.slice(s![.., cols]).iter().copied().collect();
        f64::from(v.iter().sum::<f32>()) / v.len() as f64
    };
    let d = mean(4..8) - mean(0..4);
    assert!((d - 0.2).abs() < 0.02, "per-pixel shift difference {d}");
    let h = half_rise_ns(&summed_decay(&cube), 0.05);
    assert!(h > 1.8 && h < 2.3, "{h}");
}

/// A TCSPC window longer than the laser period (160 bins of 0.1 ns, period 12.8 ns = 128
/// bins; like the recorder, the simulator's decay carries on past the period into the next
/// one): the phasor's default range (`RangeSpec::Period`) is the 128 bins whose start lies
/// within the period and gives the lifetime, where every bin would count the first 32 bins
/// twice. A period that ends inside a bin keeps that bin (the hazelnut `.ptu`: 139 bins of
/// 96.97 ps, period 12.817 ns, bins 0..133); a window of at most one period is used whole.
#[test]
fn phasor_default_range_is_one_laser_period() {
    use flim_core::io::{Format, Image, PrepOptions, RangeSpec, Recording, prepare};
    use flim_core::{Methods, analyse_any};
    assert_eq!(
        FitRange::one_period(160, 0.1, 12.8).unwrap(),
        Some(FitRange {
            first: 0,
            bins: 128
        })
    );
    let hazelnut = FitRange::one_period(139, 0.096_969_7, 12.8172).unwrap();
    assert_eq!(hazelnut.map(|r| (r.first, r.bins)), Some((0, 133)));
    assert_eq!(FitRange::one_period(128, 0.1, 12.8).unwrap(), None);
    assert_eq!(FitRange::one_period(100, 0.1, 12.8).unwrap(), None);
    assert!(FitRange::one_period(100, 0.0, 12.8).is_err());

    let tau = 2.0;
    let decay = DecaySim::new(160, 0.1, 1e6)
        .unwrap()
        .with_period_ns(12.8)
        .unwrap()
        .expected(&[(1.0, tau)]);
    let counts = Array3::from_shape_fn((2, 3, 160), |(_, _, j)| decay[j] as f32);
    let cube: AnyCube = Cube::new(counts, 0.1)
        .unwrap()
        .with_period_ns(12.8)
        .unwrap()
        .into();
    let rec = Recording {
        path: "synthetic.npy".into(),
        format: Format::Npy,
        images: vec![Image {
            block: 0,
            frame: 0,
            channel: 0,
            cube,
        }],
        metadata: Vec::new(),
    };
    let phase_tau = |range: Option<RangeSpec>| {
        let opts = PrepOptions {
            threshold: 1.0,
            range,
            ..PrepOptions::default()
        };
        let p = prepare(&rec.images[0], &rec, &opts, RangeSpec::Period).unwrap();
        let a = p.analysis.with_methods(Methods::PHASOR);
        let (maps, _) = analyse_any(&p.cube, &a, &gpu_runtime::Device::cpu()).unwrap();
        (p.fit_range(), f64::from(maps.tau_phase[[1, 2]]))
    };
    let (range, one) = phase_tau(None);
    assert_eq!(range, (0, 128));
    // Bin-centre sampling of the bin integrals is the only error left.
    assert!((one / tau - 1.0).abs() < 2e-3, "one period: {one} ns");
    let (range, all) = phase_tau(Some(RangeSpec::All));
    assert_eq!(range, (0, 160));
    assert!((all / tau - 1.0).abs() > 0.05, "every bin: {all} ns");
    println!("phase lifetime of a {tau} ns decay: one period {one:.4} ns, every bin {all:.4} ns");
}
