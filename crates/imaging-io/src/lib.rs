//! Image output shared by biogpu's modalities: 32-bit float TIFF maps and greyscale stacks,
//! colour maps (viridis, inferno, turbo, grey) rendered to PNG with a labelled colour bar,
//! animated GIF previews, and [`draw`], a small raster canvas with a built-in bitmap font for
//! colour bars and plots. Writers write exactly the path given (overwriting it); choosing
//! paths, and refusing to overwrite inputs, is the caller's job.

mod colormap;
pub mod draw;
mod error;
mod gif_writer;
mod stack_axes;
mod stamp;
#[cfg(test)]
mod test_util;
mod tiff_writer;

pub use self::colormap::{
    Colormap, Figure, Lut, NAN_COLOUR, Range, RgbImage, Scale, render, render_figure,
    render_figure_png, render_png, render_weighted,
};
pub use self::error::{Error, Result};
pub use self::gif_writer::{GifLimits, GifPreview, downscale, write_gif, write_gif_preview};
pub use self::stack_axes::StackAxes;
pub use self::stamp::{set_software_note, software_note};
pub use self::tiff_writer::{
    GraySample, TiffStackWriter, write_gray_stack, write_map_tiff, write_stack_tiff,
};
