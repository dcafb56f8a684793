//! Writing results: 32-bit float TIFF stacks, PNG colour maps with a colour bar, and
//! animated GIF previews. Writers write exactly the path given (overwriting it); choosing
//! paths, and refusing to overwrite inputs, is the caller's job.

mod colormap;
pub(crate) mod draw;
mod preview;
mod tiff;

pub use self::colormap::{Colormap, Lut, NAN_COLOUR, Range, RgbImage, render, render_png};
pub use self::preview::write_gif;
pub use self::tiff::{TiffStackWriter, write_map_tiff, write_raw_stack_tiff, write_stack_tiff};
