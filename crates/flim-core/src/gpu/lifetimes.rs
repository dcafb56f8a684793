//! The non-iterative methods on the GPU (`gpu_kernels::flim::lifetimes`), f32.

use crate::error::Result;
use crate::gpu::fret::fret_params;
use crate::gpu::pipeline::{PixelJob, run_pixels};
use crate::gpu::planes::{store_planes, store_status, tables};
use crate::model::cube::{Count, Cube};
use crate::model::fret::{Donor, FretSetup};
use crate::model::lifetimes::{Analysis, LifetimeMaps, Setup};
use gpu_kernels::flim::fret::{self as fret_kernels, FRET_PLANES};
use gpu_kernels::flim::lifetimes::{self as kernels, LifetimeParams, plane_of, planes};
use gpu_runtime::{Device, Gpu, GpuArray, with_gpu};

/// The non-iterative kernel's settings for `pixels` pixels of `bins` counts of type `T`.
fn lifetime_params<T: Count>(su: &Setup, bins: usize, pixels: usize) -> LifetimeParams {
    LifetimeParams {
        pixels: pixels as u32,
        stride: bins as u32,
        first: su.first as u32,
        m: su.m as u32,
        h: su.h as f32,
        omega: su.omega as f32,
        offset: su.offset as f32,
        threshold: su.threshold as f32,
        cal: (su.cal_cos as f32, su.cal_sin as f32),
        table_sums: (su.sum_simpson as f32, su.sum_cos as f32, su.sum_sin as f32),
        kind: T::KIND,
        methods: su.methods.bits(),
    }
}

/// [`crate::analyse`] on a GPU `device`: the f32 kernel, one unit per pixel. GPU and CPU
/// agree within the f32 error bounds stated in tests/tests/gpu_vs_cpu/flim.rs.
pub(crate) fn analyse<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    device: &Device,
) -> Result<LifetimeMaps> {
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let (h, w) = cube.shape();
    let methods = su.methods.bits();
    let nplanes = planes(methods);
    let params = lifetime_params::<T>(&su, cube.bins(), 0);
    let table = tables(&su);
    let _span = tracing::debug_span!("flim_analyse_on", pixels = h * w).entered();
    // Chunks land straight in the maps: no whole-image staging vector, one copy per value,
    // the planes in parallel (a plane's copy alone runs at a single core's speed). The maps
    // are made when the first chunk is back, while the others cross the link.
    let mut maps: Option<LifetimeMaps> = None;
    let mut sink = |range: std::ops::Range<usize>, vals: &[f32], st: &[u32]| {
        let maps = maps.get_or_insert_with(|| LifetimeMaps::zeros(h, w));
        store_planes(maps.planes_mut(), range.clone(), vals, |q| {
            plane_of(methods, q as u32).map(|i| i as usize)
        });
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
            let p = LifetimeParams {
                pixels: n as u32,
                ..params
            };
            kernels::lifetimes(gpu, words, &tables_dev, &p, out, st)
        };
        run_pixels(
            gpu,
            cube,
            &PixelJob {
                planes: nplanes,
                min_chunk_pixels: 0,
                launch: &launch,
                tuning: opts.tuning(),
            },
            &mut sink,
        )
    })?;
    Ok(maps.unwrap_or_else(|| LifetimeMaps::zeros(h, w)))
}

/// Device time of the non-iterative kernel (the methods `opts` selects), or of the BCMM/PM
/// kernel when `fret` names the donor, over the whole of `cube` already on the device: the
/// median of `reps` rounds of four launches and one synchronisation, per launch. For
/// benchmarks: what the kernel costs apart from transfers.
pub(crate) fn kernel_time<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    fret: Option<Donor>,
    device: &Device,
    reps: usize,
) -> Result<std::time::Duration> {
    const LAUNCHES: u32 = 4;
    let (h, w) = cube.shape();
    let pixels = h * w;
    let su = opts.setup(cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let lifetimes = lifetime_params::<T>(&su, cube.bins(), pixels);
    let (fret, nplanes, table) = match fret {
        Some(donor) => {
            let fs = FretSetup::new(opts, donor, cube.bins(), cube.bin_ns(), cube.period_ns())?;
            let p = fret_params::<T>(&fs, donor, cube.bins(), pixels);
            (Some(p), FRET_PLANES, tables(&fs.base))
        }
        None => (None, planes(su.methods.bits()), tables(&su)),
    };
    let bytes: &[u8] = bytemuck::cast_slice(cube.as_slice());
    with_gpu!(device, |gpu| {
        let mut staging = gpu.host_staging(bytes.len().next_multiple_of(4));
        let words = staging.write_words(bytes);
        let words = gpu.upload_staged::<u32>(&staging, words)?;
        let tables_dev = gpu.upload(&table)?;
        let out = gpu.empty::<f32>(nplanes * pixels)?;
        let st = gpu.empty::<u32>(pixels)?;
        let round = || -> gpu_runtime::Result<std::time::Duration> {
            let t = std::time::Instant::now();
            for _ in 0..LAUNCHES {
                match &fret {
                    Some(p) => fret_kernels::fret(gpu, &words, &tables_dev, p, &out, &st)?,
                    None => kernels::lifetimes(gpu, &words, &tables_dev, &lifetimes, &out, &st)?,
                }
            }
            gpu.sync()?;
            Ok(t.elapsed() / LAUNCHES)
        };
        round()?;
        let mut times = (0..reps.max(1))
            .map(|_| round())
            .collect::<gpu_runtime::Result<Vec<_>>>()?;
        times.sort();
        Ok(times[times.len() / 2])
    })
    .map_err(Into::into)
}
