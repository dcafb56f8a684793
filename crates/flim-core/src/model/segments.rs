//! Segments of global analysis: which pixels share lifetimes.

use crate::error::{Result, invalid};
use ndarray::Array2;

/// How pixels are grouped to share lifetimes.
#[derive(Debug, Clone, PartialEq)]
pub enum Segments {
    /// Runs of this many consecutive fitted pixels in raster order (the paper's GA-32: 32).
    Runs(usize),
    /// One segment per label > 0 (same shape as the image; 0 is not fitted).
    Labels(Array2<u32>),
    /// Every fitted pixel together.
    Whole,
}

/// Pixels of each segment (indices into the image, raster order), fitted pixels only.
pub(crate) fn segment_pixels(
    segments: &Segments,
    fitted: &[bool],
    shape: (usize, usize),
) -> Result<Vec<Vec<usize>>> {
    let all = || (0..fitted.len()).filter(|&p| fitted[p]);
    Ok(match segments {
        Segments::Runs(n) => {
            if *n == 0 {
                return Err(invalid("segment size", 0, "must be >= 1 pixel"));
            }
            let px: Vec<usize> = all().collect();
            px.chunks(*n).map(<[usize]>::to_vec).collect()
        }
        Segments::Whole => {
            let px: Vec<usize> = all().collect();
            if px.is_empty() { Vec::new() } else { vec![px] }
        }
        Segments::Labels(labels) => {
            if labels.dim() != shape {
                return Err(invalid(
                    "segment labels",
                    format!("{:?}", labels.dim()),
                    format!("must match the image, {shape:?}"),
                ));
            }
            let labels = labels.as_standard_layout();
            let labels = labels.as_slice().expect("standard layout");
            let mut ids: Vec<u32> = labels.iter().copied().filter(|&l| l > 0).collect();
            ids.sort_unstable();
            ids.dedup();
            let mut out = vec![Vec::new(); ids.len()];
            for p in all() {
                if labels[p] > 0 {
                    let s = ids.binary_search(&labels[p]).expect("label listed");
                    out[s].push(p);
                }
            }
            out.retain(|s| !s.is_empty());
            out
        }
    })
}
