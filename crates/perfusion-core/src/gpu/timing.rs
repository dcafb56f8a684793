//! Kernel time alone, for benchmarks: the curves stay on the device, each repetition is one
//! launch (the start search and the fit) and a sync.

use super::launch::{counter_words, grid_values, launch, params, setup_values, start_values};
use super::starts_len;
use super::upload::pack;
use crate::error::Result;
use crate::model::{Problem, Setup};
use gpu_kernels::perfusion::{FitBuffers, KernelFloat};
use gpu_runtime::{Device, HostStaging, with_gpu};
use ndarray::ArrayView2;
use std::time::Duration;

/// Times of `reps` launches (after one untimed) of `setup`'s kernel in arithmetic `F` over
/// `curves`, and the units per cube used (the tuning's, else the default).
pub(crate) fn kernel_times<F: KernelFloat>(
    curves: ArrayView2<f32>,
    problem: &Problem,
    setup: &Setup,
    device: &Device,
    reps: usize,
) -> Result<(Vec<Duration>, u32)> {
    let n = curves.nrows();
    let nt = problem.len();
    let np = setup.model.n_params();
    Ok(with_gpu!(device, |gpu| {
        let mut staging: HostStaging = gpu.host_staging(n * nt * 4);
        pack(curves, 0..n, 0..nt, staging.as_bytes_mut());
        let data = gpu.upload_staged::<f32>(&staging, n * nt)?;
        let grid = gpu.upload(&grid_values::<F>(problem))?;
        let setup_dev = gpu.upload(&setup_values::<F>(setup))?;
        let search = setup.plan.as_ref().map(start_values::<F>);
        let tables = search.as_ref().map(|(t, _)| gpu.upload(t)).transpose()?;
        let start = tables.as_ref().zip(search.as_ref().map(|(_, s)| s));
        let out = gpu.empty::<F>((np + 2) * n)?;
        let starts = gpu.empty::<F>(starts_len(setup, np, n))?;
        let status = gpu.empty::<u32>(n)?;
        let p = params::<F>(setup, problem, n, gpu.info());
        // One counter per launch (no voxel taken, all curves up), made before the timed
        // launches.
        let counters = (0..=reps.max(1))
            .map(|_| gpu.upload(&counter_words(n as u32)))
            .collect::<gpu_runtime::Result<Vec<_>>>()?;
        let run = |k: usize| {
            let buffers = FitBuffers {
                data: &data,
                grid: &grid,
                setup: &setup_dev,
                out: &out,
                starts: &starts,
                status: &status,
                counter: &counters[k],
            };
            launch(gpu, setup.method, &buffers, &p, start)
        };
        run(0)?;
        gpu.sync()?;
        let mut times = Vec::with_capacity(reps);
        for k in 1..=reps.max(1) {
            let ((), t) = gpu.timed(|| run(k))?;
            times.push(t);
        }
        Ok((times, p.cube))
    })?)
}
