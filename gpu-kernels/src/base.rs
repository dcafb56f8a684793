//! Kernels the runtime itself needs, and the patterns every modality copies:
//! an element-wise kernel (`fill`, `axpy`), a block reduction in shared memory
//! (`block_sum`), and a float atomic add (`atomic_accumulate`).

use crate::CUBE_1D;
use cubecl::prelude::*;
use gpu_runtime::{Error, Gpu, GpuArray, Result};

/// Element-wise pattern: one unit per element, guarded against the ragged last cube.
#[cube(launch)]
pub fn fill_kernel(out: &mut Array<f32>, value: f32) {
    let i = ABSOLUTE_POS;
    if i < out.len() {
        out[i] = value;
    }
}

/// y <- a x + y.
#[cube(launch)]
pub fn axpy_kernel(a: f32, x: &Array<f32>, y: &mut Array<f32>) {
    let i = ABSOLUTE_POS;
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

/// Block reduction: each cube sums `CUBE_1D` elements through shared memory by a
/// tree of halvings and writes one partial sum per cube. Partial sums are added on the
/// host (or by a second pass) so the result is deterministic, unlike an atomic total.
#[cube(launch)]
pub fn block_sum_kernel(input: &Array<f32>, partial: &mut Array<f32>, #[comptime] cube: u32) {
    let mut shared = SharedMemory::<f32>::new(cube as usize);
    let tid = UNIT_POS as usize;
    let i = ABSOLUTE_POS;
    let mut v = 0.0f32;
    if i < input.len() {
        v = input[i];
    }
    shared[tid] = v;
    sync_cube();
    // `cube` is a compile-time constant; the loop counter must be a runtime variable.
    let mut stride = (CUBE_DIM_X / 2) as usize;
    while stride > 0 {
        if tid < stride {
            shared[tid] = shared[tid] + shared[tid + stride];
        }
        sync_cube();
        stride /= 2;
    }
    if tid == 0 {
        partial[CUBE_POS] = shared[0];
    }
}

/// Scatter-add: element i of `values` is added to bin `bins[i]` of `tally` atomically,
/// the pattern of Monte Carlo tallies and histograms.
#[cube(launch)]
pub fn atomic_accumulate_kernel(
    values: &Array<f32>,
    bins: &Array<u32>,
    tally: &mut Array<Atomic<f32>>,
) {
    let i = ABSOLUTE_POS;
    if i < values.len() {
        let b = bins[i] as usize;
        if b < tally.len() {
            tally[b].fetch_add(values[i]);
        }
    }
}

/// Set every element of `out` to `value`.
pub fn fill<R: Runtime>(gpu: &Gpu<R>, out: &GpuArray<f32>, value: f32) -> Result<()> {
    let count = gpu.cube_count_1d("fill", out.len(), CUBE_1D)?;
    gpu.launch("fill", count, |count| {
        fill_kernel::launch::<R>(
            gpu.client(),
            count,
            CubeDim::new_1d(CUBE_1D),
            out.arg(),
            value,
        );
    })
}

/// y <- a x + y; `x` and `y` must have the same length.
pub fn axpy<R: Runtime>(gpu: &Gpu<R>, a: f32, x: &GpuArray<f32>, y: &GpuArray<f32>) -> Result<()> {
    same_len("axpy", x.len(), y.len())?;
    let count = gpu.cube_count_1d("axpy", y.len(), CUBE_1D)?;
    gpu.launch("axpy", count, |count| {
        axpy_kernel::launch::<R>(
            gpu.client(),
            count,
            CubeDim::new_1d(CUBE_1D),
            a,
            x.arg(),
            y.arg(),
        );
    })
}

/// Sum of all elements: per-cube partial sums on the device, then an f64 sum of the
/// partials on the host (deterministic; relative error about `n * 2^-24` worst case
/// within a cube, f64 across cubes).
pub fn sum<R: Runtime>(gpu: &Gpu<R>, input: &GpuArray<f32>) -> Result<f64> {
    let cubes = input.len().div_ceil(CUBE_1D as usize).max(1);
    let count = gpu.cube_count_1d("block_sum", input.len().max(1), CUBE_1D)?;
    if !matches!(count, CubeCount::Static(_, 1, 1)) {
        return Err(Error::InvalidLaunch {
            kernel: "block_sum".into(),
            why: "input too large for one pass".into(),
        });
    }
    let partial = gpu.empty::<f32>(cubes)?;
    gpu.launch("block_sum", count, |count| {
        block_sum_kernel::launch::<R>(
            gpu.client(),
            count,
            CubeDim::new_1d(CUBE_1D),
            input.arg(),
            partial.arg(),
            CUBE_1D,
        );
    })?;
    Ok(gpu.download(&partial)?.iter().map(|&v| f64::from(v)).sum())
}

/// `tally[bins[i]] += values[i]` for every i, atomically; out-of-range bins are skipped.
pub fn atomic_accumulate<R: Runtime>(
    gpu: &Gpu<R>,
    values: &GpuArray<f32>,
    bins: &GpuArray<u32>,
    tally: &GpuArray<f32>,
) -> Result<()> {
    same_len("atomic_accumulate", values.len(), bins.len())?;
    let count = gpu.cube_count_1d("atomic_accumulate", values.len(), CUBE_1D)?;
    gpu.launch("atomic_accumulate", count, |count| {
        // SAFETY: an f32 buffer read as Atomic<f32> has the same layout.
        let tally_arg = unsafe { ArrayArg::from_raw_parts(tally.handle().clone(), tally.len()) };
        atomic_accumulate_kernel::launch::<R>(
            gpu.client(),
            count,
            CubeDim::new_1d(CUBE_1D),
            values.arg(),
            bins.arg(),
            tally_arg,
        );
    })
}

pub(crate) fn same_len(kernel: &str, a: usize, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::InvalidLaunch {
            kernel: kernel.into(),
            why: format!("array lengths differ: {a} and {b}"),
        })
    }
}
