//! Writing results: 32-bit float TIFF stacks, PNG colour maps with a colour bar, and
//! animated GIF previews, from the shared `imaging-io` crate; raw frame stacks in their own
//! pixel type. Writers write exactly the path given (overwriting it); choosing paths, and
//! refusing to overwrite inputs, is the caller's job.

pub(crate) use imaging_io::draw;
pub use imaging_io::{
    Colormap, Lut, NAN_COLOUR, Range, RgbImage, TiffStackWriter, render, render_png, write_gif,
    write_map_tiff, write_stack_tiff,
};

use crate::error::Result;
use crate::model::types::RawStack;
use std::path::Path;

/// Write raw frames (u8, u16 or f32) as a multi-page greyscale TIFF in their own pixel
/// type, e.g. to save simulated camera frames for the CLI or other tools.
pub fn write_raw_stack_tiff(path: impl AsRef<Path>, stack: &RawStack) -> Result<()> {
    let path = path.as_ref();
    match stack {
        RawStack::U8(a) => imaging_io::write_gray_stack(path, a.view()),
        RawStack::U16(a) => imaging_io::write_gray_stack(path, a.view()),
        RawStack::F32(a) => imaging_io::write_gray_stack(path, a.view()),
    }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_util::TempDir;
    use crate::io::tiff::read_tiff;
    use ndarray::Array3;

    #[test]
    fn float_maps_read_back_bit_exactly_with_nan() {
        let dir = TempDir::new("out_tiff_stack");
        let path = dir.path("k.tif");
        let mut stack = Array3::from_shape_fn((3, 5, 7), |(f, r, c)| {
            (f as f32 + 1.0) / (r * 7 + c + 1) as f32
        });
        stack[[1, 2, 3]] = f32::NAN;
        stack[[0, 4, 6]] = -0.0;
        write_stack_tiff(&path, stack.view()).unwrap();
        let (back, cam) = read_tiff(&path, None).unwrap();
        assert_eq!(cam.bit_depth, None);
        let RawStack::F32(b) = back else {
            panic!("f32 expected")
        };
        assert!(
            b.iter()
                .zip(&stack)
                .all(|(x, y)| x.to_bits() == y.to_bits())
        );
    }

    #[test]
    fn raw_stacks_round_trip() {
        let dir = TempDir::new("out_tiff_int");
        for stack in [
            RawStack::U8(Array3::from_shape_fn((2, 3, 4), |(f, r, c)| {
                (f * 50 + r * 4 + c) as u8
            })),
            RawStack::U16(Array3::from_shape_fn((3, 2, 2), |(f, r, c)| {
                (f * 20000 + r * 2 + c) as u16
            })),
            RawStack::F32(Array3::from_shape_fn((2, 2, 2), |(f, r, c)| {
                (f + r + c) as f32 / 3.0
            })),
        ] {
            let path = dir.path(&format!("{}.tif", stack.dtype()));
            write_raw_stack_tiff(&path, &stack).unwrap();
            assert_eq!(read_tiff(&path, None).unwrap().0, stack);
        }
    }
}
