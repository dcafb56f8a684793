//! Speckle contrast on the GPU against the exact CPU reference, for every mode, window,
//! border and pixel type, with random images (proptest).

use biogpu_tests::{Tolerance, assert_close, gpu_test};
use ndarray::{Array2, Array3};
use proptest::prelude::*;
use speckle_core::{
    Border, ContrastInfo, ContrastMaps, ContrastParams, Frame, RawStack, StreamParams, Window,
    contrast, stream,
};

/// Integer sums are exact on both paths; the GPU rounds D and S1 to f32 and takes sqrt and
/// a division in f32: at most about 5 f32 roundings, 3e-7 relative. Stated bound: 1e-6.
const K_INTEGER: Tolerance = Tolerance::new("K from exact integer sums", 1e-6, 0.0);
/// SFI = 1 / (2 T K^2): twice K's relative error plus f32 rounding of the GPU's division.
const SFI: Tolerance = Tolerance::new("SFI from K", 2.5e-6, 0.0);

fn stack_strategy() -> impl Strategy<Value = RawStack> {
    (
        1usize..4,
        1usize..48,
        1usize..70,
        any::<bool>(),
        0u32..4,
        any::<u64>(),
    )
        .prop_map(|(f, h, w, wide, zeros, seed)| {
            let mut s = seed | 1;
            let mut next = move || {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s
            };
            // Some stacks carry a zero block, so windows with mean 0 (NaN, flagged) occur.
            let zero =
                |t: usize, y: usize, x: usize| zeros == 0 && t == 0 && y < h / 2 && x < w / 3;
            if wide {
                let hi = [65535u64, 4095, 60000, 300][(seed % 4) as usize];
                let lo = hi / [2, 3, 1000, 10][(seed / 4 % 4) as usize];
                RawStack::U16(Array3::from_shape_fn((f, h, w), |(t, y, x)| {
                    if zero(t, y, x) {
                        0
                    } else {
                        (lo + next() % (hi - lo + 1)) as u16
                    }
                }))
            } else {
                RawStack::U8(Array3::from_shape_fn((f, h, w), |(t, y, x)| {
                    if zero(t, y, x) {
                        0
                    } else {
                        (next() % 256) as u8
                    }
                }))
            }
        })
}

fn border_strategy() -> impl Strategy<Value = Border> {
    prop_oneof![
        Just(Border::Reflect),
        Just(Border::Zero),
        Just(Border::Valid)
    ]
}

fn compare(what: &str, gpu: &ContrastMaps, cpu: &ContrastMaps) {
    assert_eq!(gpu.k.dim(), cpu.k.dim(), "{what}: shape");
    let g: Vec<f64> = gpu.k.iter().map(|&v| f64::from(v)).collect();
    let c: Vec<f64> = cpu.k.iter().map(|&v| f64::from(v)).collect();
    assert_close(&format!("{what}: K"), &g, &c, K_INTEGER);
    assert_eq!(gpu.flags, cpu.flags, "{what}: flags");
    if let (Some(gs), Some(cs)) = (&gpu.sfi, &cpu.sfi) {
        let g: Vec<f64> = gs.iter().map(|&v| f64::from(v)).collect();
        let c: Vec<f64> = cs.iter().map(|&v| f64::from(v)).collect();
        assert_close(&format!("{what}: SFI"), &g, &c, SFI);
    }
}

fn cpu() -> gpu_runtime::Device {
    gpu_runtime::Device::cpu()
}

/// The maps of [`contrast`], without where they ran.
fn maps(
    r: speckle_core::Result<(ContrastMaps, ContrastInfo)>,
) -> speckle_core::Result<ContrastMaps> {
    r.map(|(m, _)| m)
}

gpu_test! {
    fn spatial_k_matches_reference_for_any_window_border_and_pixel_type(device) {
    proptest!(ProptestConfig { cases: 40, ..ProptestConfig::default() }, |(
        stack in stack_strategy(),
        size in prop_oneof![3usize..=9, 3usize..=31],
        border in border_strategy(),
        saturate in any::<bool>(),
    )| {
        let size = size | 1;
        let sat = saturate.then_some(if stack.dtype() == "u8" { 250.0 } else { 60000.0 });
        let params = ContrastParams::spatial(Window::new(size).unwrap()).with_border(border).with_saturation(sat).with_exposure(5e-3).unwrap();
        let want = maps(contrast(&stack, &params, &cpu()));
        let got = maps(contrast(&stack, &params, device));
        match (got, want) {
            (Ok(g), Ok(c)) => compare(&format!("{size}x{size} {border:?} {}", stack.dtype()), &g, &c),
            (Err(_), Err(_)) => {} // e.g. `valid` on an image smaller than the window
            (g, c) => panic!("GPU and CPU disagree on success: gpu {:?} cpu {:?}", g.map(|_| ()), c.map(|_| ())),
        }
    });
    }
}

gpu_test! {
    fn temporal_and_spatiotemporal_k_match_reference(device) {
    proptest!(ProptestConfig { cases: 40, ..ProptestConfig::default() }, |(
        frames in 2usize..10,
        n in 2usize..10,
        h in 1usize..24,
        w in 1usize..30,
        size in prop_oneof![Just(3usize), Just(5), Just(7)],
        spatio in any::<bool>(),
        border in border_strategy(),
        seed in any::<u32>(),
    )| {
        let n = n.min(frames);
        let mut s = seed | 1;
        let stack = RawStack::U16(Array3::from_shape_fn((frames, h, w), |_| { s ^= s << 13; s ^= s >> 17; s ^= s << 5; (s % 4096) as u16 }));
        let params = if spatio {
            ContrastParams::spatiotemporal(Window::new(size).unwrap(), n).with_border(border)
        } else {
            ContrastParams::temporal(n)
        }
        .with_saturation(Some(4000.0));
        match (maps(contrast(&stack, &params, device)), maps(contrast(&stack, &params, &cpu()))) {
            (Ok(g), Ok(c)) => compare(&format!("temporal n={n} spatio={spatio}"), &g, &c),
            (Err(_), Err(_)) => {}
            (g, c) => panic!("GPU and CPU disagree on success: gpu {:?} cpu {:?}", g.map(|_| ()), c.map(|_| ())),
        }
    });
    }
}

gpu_test! {
fn large_frame_is_exact_where_float_running_sums_fail(device) {
    // High mean, small variance: K ~ 1e-3, the regime where float sums lose digits.
    let (h, w) = (1040, 1392);
    let stack = RawStack::U16(Array3::from_shape_fn((1, h, w), |(_, y, x)| {
        (60000 + (x * 7 + y * 13) % 97) as u16
    }));
    let params = ContrastParams::spatial(Window::new(7).unwrap());
    compare(
        "1392x1040 u16 7x7",
        &contrast(&stack, &params, device).unwrap().0,
        &contrast(&stack, &params, &cpu()).unwrap().0,
    );
}
}

gpu_test! {
fn chunked_runs_equal_one_pass(device) {
    let stack = RawStack::U16(Array3::from_shape_fn((9, 40, 50), |(t, y, x)| {
        ((t * 131 + y * 17 + x * 29) % 1000 + 5) as u16
    }));
    // Room for about two frames at a time: forces several chunks (with temporal overlap).
    let small = device.clone().with_memory_limit(2 * 40 * 50 * 14);
    for params in [
        ContrastParams::spatial(Window::new(5).unwrap()),
        ContrastParams::temporal(4),
        ContrastParams::spatiotemporal(Window::new(3).unwrap(), 3),
    ] {
        let (whole, _) = contrast(&stack, &params, device).unwrap();
        let (chunked, _) = contrast(&stack, &params, &small).unwrap();
        assert_eq!(
            whole.k.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            chunked.k.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{:?}",
            params.mode
        );
    }
}
}

gpu_test! {
fn bad_windows_are_clear_errors_on_the_gpu_path_too(device) {
    let stack = RawStack::U16(Array3::from_elem((3, 4, 4), 7));
    let e = contrast(
        &stack,
        &ContrastParams::spatial(Window::new(5).unwrap()).with_border(Border::Valid),
        device,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("too small") || e.to_string().contains("4x4"),
        "{e}"
    );
    let e = contrast(&stack, &ContrastParams::temporal(5), device).unwrap_err();
    assert!(e.to_string().contains("frames"), "{e}");
}
}

gpu_test! {
    fn streamed_frames_match_the_cpu_in_order(device) {
    proptest!(ProptestConfig { cases: 12, ..ProptestConfig::default() }, |(
        frames in 1usize..12,
        batch in 1usize..6,
        h in 3usize..30,
        w in 3usize..40,
        wide in any::<bool>(),
        saturate in any::<bool>(),
        seed in any::<u32>(),
    )| {
        let mut s = seed | 1;
        let mut next = move || { s ^= s << 13; s ^= s >> 17; s ^= s << 5; s };
        let stack = if wide {
            RawStack::U16(Array3::from_shape_fn((frames, h, w), |_| (next() % 4096) as u16))
        } else {
            RawStack::U8(Array3::from_shape_fn((frames, h, w), |_| (next() % 256) as u8))
        };
        let sat = saturate.then_some(250.0);
        let params = ContrastParams::spatial(Window::new(3).unwrap()).with_saturation(sat).with_exposure(2e-3).unwrap();
        let (want, _) = contrast(&stack, &params, &cpu()).unwrap();
        let source: Vec<_> = match &stack {
            RawStack::U16(a) => a.outer_iter().map(|f| Ok(Frame::U16(f.to_owned()))).collect(),
            RawStack::U8(a) => a.outer_iter().map(|f| Ok(Frame::U8(f.to_owned()))).collect(),
            RawStack::F32(_) => unreachable!(),
        };
        let mut seen = 0usize;
        let report = stream(source.into_iter(), &StreamParams::new(params, batch), device, |m| {
            assert_eq!(m.index, seen, "frames arrive in order");
            let k: Vec<f64> = m.k.iter().map(|&v| f64::from(v)).collect();
            let kc: Vec<f64> = want.k.index_axis(ndarray::Axis(0), m.index).iter().map(|&v| f64::from(v)).collect();
            assert_close("streamed K", &k, &kc, K_INTEGER);
            match m.flags {
                Some(f) => assert_eq!(f, want.flags.index_axis(ndarray::Axis(0), m.index), "streamed flags"),
                None => assert!(sat.is_none(), "flags are given whenever a saturation level is"),
            }
            let sfi: Vec<f64> = m.sfi.expect("sfi requested").iter().map(|&v| f64::from(v)).collect();
            let sc: Vec<f64> = want.sfi.as_ref().unwrap().index_axis(ndarray::Axis(0), m.index).iter().map(|&v| f64::from(v)).collect();
            assert_close("streamed SFI", &sfi, &sc, SFI);
            seen += 1;
            Ok(())
        }).unwrap();
        prop_assert_eq!(report.frames, frames);
        prop_assert_eq!(seen, frames);
    });
    }
}

gpu_test! {
/// A bad frame mid-stream ends the stream with an error naming it, after every frame
/// before it reached the sink in order (several batches in flight on the GPU path).
fn a_bad_frame_mid_stream_is_named_after_the_good_ones_are_delivered(device) {
    let good = |t: u16| {
        Frame::U16(Array2::from_shape_fn((9, 11), |(y, x)| {
            (x as u16 * 7 + y as u16 * 3 + t) % 97 + 1
        }))
    };
    let mut source: Vec<_> = (0..7).map(|t| Ok(good(t))).collect();
    source.push(Ok(Frame::U16(Array2::from_elem((9, 10), 5))));
    source.push(Ok(good(8)));
    let params = ContrastParams::spatial(Window::new(3).unwrap());
    let mut seen = Vec::new();
    let err = stream(source.into_iter(), &StreamParams::new(params, 2), device, |m| {
        seen.push(m.index);
        Ok(())
    })
    .unwrap_err();
    assert_eq!(
        seen,
        (0..7).collect::<Vec<_>>(),
        "good frames first, in order"
    );
    let msg = err.to_string();
    assert!(msg.contains("frame 7") && msg.contains("10"), "{msg}");

    // A sink that fails stops the stream at once with its own error.
    let source = (0..9).map(|t| Ok(good(t)));
    let mut calls = 0;
    let err = stream(source, &StreamParams::new(params, 2), device, |m| {
        calls += 1;
        if m.index == 3 {
            return Err(speckle_core::Error::InvalidParameter {
                name: "sink",
                value: "frame 3".into(),
                why: "sink full".into(),
            });
        }
        Ok(())
    })
    .unwrap_err();
    assert_eq!(calls, 4);
    assert!(err.to_string().contains("sink full"), "{err}");

    // Host buffers are reused between streams: maps one stream asked for (SFI, flags)
    // never reach the sink of a later stream that did not.
    let rich = params
        .with_exposure(5e-3)
        .unwrap()
        .with_saturation(Some(90.0));
    let extras = |p: &ContrastParams| {
        let mut seen = Vec::new();
        stream((0..5).map(|t| Ok(good(t))), &StreamParams::new(*p, 2), device, |m| {
            seen.push((m.sfi.is_some(), m.flags.is_some()));
            Ok(())
        })
        .unwrap();
        seen
    };
    assert_eq!(extras(&rich), vec![(true, true); 5]);
    assert_eq!(extras(&params), vec![(false, false); 5]);
}
}

gpu_test! {
/// A camera slower than the GPU gets each map before its next frame: a source that sends
/// frame i + 1 only once map i has reached the sink runs to the end (the stream does not
/// wait for a full batch or for batches in flight while no frame is ready).
fn a_slow_source_gets_each_map_before_its_next_frame(device) {
    use std::sync::mpsc::{RecvTimeoutError, channel};
    use std::time::Duration;
    let frames = 7usize;
    let (delivered, maps) = channel::<usize>();
    let source = (0..frames).map(move |i| {
        if i > 0 {
            match maps.recv_timeout(Duration::from_secs(20)) {
                Ok(j) => assert_eq!(j, i - 1, "maps in order"),
                // The test fails rather than hang: the stream held map i - 1 back.
                Err(RecvTimeoutError::Timeout) => {
                    return Err(speckle_core::Error::InvalidParameter {
                        name: "source",
                        value: format!("frame {i}"),
                        why: format!("map {} never came while frame {i} waited for it", i - 1),
                    });
                }
                Err(RecvTimeoutError::Disconnected) => panic!("sink gone"),
            }
        }
        Ok(Frame::U16(Array2::from_shape_fn((12, 10), |(y, x)| {
            (x * 5 + y * 3 + i) as u16 % 61 + 1
        })))
    });
    let params = ContrastParams::spatial(Window::new(3).unwrap());
    let mut seen = 0;
    // Batches of 4 and 3 workers: without the early hand-over not even map 0 would come.
    stream(source, &StreamParams::new(params, 4), device, |m| {
        assert_eq!(m.index, seen);
        seen += 1;
        // The source is gone once it gave its last frame.
        let _ = delivered.send(m.index);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, frames);
}
}
