//! BCMM and PM on the GPU (`gpu_kernels::flim::fret`), f32.

use crate::error::Result;
use crate::gpu::pipeline::{PixelJob, run_pixels};
use crate::gpu::planes::{store_planes, store_status, tables};
use crate::model::cube::{Count, Cube};
use crate::model::fret::{Donor, FretMaps, FretSetup};
use crate::model::lifetimes::Analysis;
use gpu_kernels::flim::fret::{self as fret_kernels, FRET_PLANES, FretParams};
use gpu_runtime::{Device, Gpu, GpuArray, with_gpu};

/// The BCMM/PM kernel's settings for `pixels` pixels of `bins` counts of type `T`.
pub(crate) fn fret_params<T: Count>(
    fs: &FretSetup,
    donor: Donor,
    bins: usize,
    pixels: usize,
) -> FretParams {
    let su = &fs.base;
    FretParams {
        pixels: pixels as u32,
        stride: bins as u32,
        first: su.first as u32,
        m: su.m as u32,
        h: su.h as f32,
        omega: su.omega as f32,
        offset: su.offset as f32,
        threshold: su.threshold as f32,
        cal: (su.cal_cos as f32, su.cal_sin as f32),
        table_sums: (su.sum_cos as f32, su.sum_sin as f32),
        tau_d: match donor {
            Donor::Known(t) => Some(t as f32),
            Donor::Unknown => None,
        },
        period: fs.period as f32,
        kind: T::KIND,
    }
}

/// [`crate::analyse_fret`] on a GPU `device` (f32 kernel); tolerances in
/// tests/tests/gpu_vs_cpu/flim.rs.
pub(crate) fn analyse_fret<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    donor: Donor,
    device: &Device,
) -> Result<FretMaps> {
    let fs = FretSetup::new(opts, donor, cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let su = &fs.base;
    let (h, w) = cube.shape();
    let params = fret_params::<T>(&fs, donor, cube.bins(), 0);
    let table = tables(su);
    let _span = tracing::debug_span!("flim_analyse_fret_on", pixels = h * w).entered();
    // As in `analyse_on`: chunks straight into maps made when the first chunk is back.
    let mut maps: Option<FretMaps> = None;
    let mut sink = |range: std::ops::Range<usize>, vals: &[f32], st: &[u32]| {
        let maps = maps.get_or_insert_with(|| FretMaps::nan(h, w));
        store_planes(maps.planes_mut(), range.clone(), vals, Some);
        store_status(&mut maps.status, range, st);
    };
    with_gpu!(device, |gpu| {
        let tables_dev = gpu.upload(&table)?;
        gpu.sync()?;
        let launch = |gpu: &Gpu<_>,
                      words: &GpuArray<u32>,
                      _first: usize,
                      n: usize,
                      out: &GpuArray<f32>,
                      st: &GpuArray<u32>| {
            let p = FretParams {
                pixels: n as u32,
                ..params
            };
            fret_kernels::fret(gpu, words, &tables_dev, &p, out, st)
        };
        run_pixels(
            gpu,
            cube,
            &PixelJob {
                planes: FRET_PLANES,
                min_chunk_pixels: 0,
                launch: &launch,
                tuning: opts.tuning(),
            },
            &mut sink,
        )
    })?;
    Ok(maps.unwrap_or_else(|| FretMaps::nan(h, w)))
}
