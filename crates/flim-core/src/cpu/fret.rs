//! BCMM and PM on the CPU (f64, pixels in parallel).

use crate::error::Result;
use crate::model::cube::{Count, Cube};
use crate::model::fret::{Donor, FretMaps, FretSetup, fret_finish, fret_sums};
use crate::model::lifetimes::Analysis;
use ndarray::Array2;
use rayon::prelude::*;

/// BCMM and PM maps of every pixel on the CPU (f64, pixels in parallel). `opts` sets the
/// range, offset, threshold, harmonic and phasor calibration (its method set is ignored).
pub(crate) fn analyse_fret<T: Count>(
    cube: &Cube<T>,
    opts: &Analysis,
    donor: Donor,
) -> Result<FretMaps> {
    let su = FretSetup::new(opts, donor, cube.bins(), cube.bin_ns(), cube.period_ns())?;
    let (h, w) = cube.shape();
    let bins = cube.bins();
    let data = cube.as_slice();
    let (first, m) = (su.base.first, su.base.m);
    let mut values = vec![[0.0f32; 8]; h * w];
    let mut status = vec![0u8; h * w];
    values
        .par_chunks_mut(256)
        .zip(status.par_chunks_mut(256))
        .enumerate()
        .for_each(|(t, (vals, st))| {
            let mut v = vec![0.0f64; m];
            for (i, (out, status)) in vals.iter_mut().zip(st.iter_mut()).enumerate() {
                let p = t * 256 + i;
                for (d, &c) in v
                    .iter_mut()
                    .zip(&data[p * bins + first..p * bins + first + m])
                {
                    *d = c.into();
                }
                let (x, s) = fret_finish(&fret_sums(&v, &su), &su);
                for (o, x) in out.iter_mut().zip(x) {
                    *o = x as f32;
                }
                *status = s;
            }
        });
    let mut maps = FretMaps::nan(h, w);
    for (q, plane) in maps.planes_mut().into_iter().enumerate() {
        for (dst, v) in plane.iter_mut().zip(&values) {
            *dst = v[q];
        }
    }
    maps.status = Array2::from_shape_vec((h, w), status).expect("h * w statuses");
    Ok(maps)
}
