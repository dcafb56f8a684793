//! Reading any supported file by its extension, with the selections every format shares.

use crate::error::{Error, Result};
use crate::io::npy::read_npy;
use crate::io::picoquant::{read_phu, read_pt3_ht3, read_ptu};
use crate::io::recording::{Format, Image, ReadOptions, Recording, in_file};
use crate::io::sdt::read_sdt;
use crate::io::spc::read_spc;
use crate::io::tiff::read_tiff;
use crate::model::cube::AnyCube;
use std::path::Path;

/// Read a TCSPC file by its extension (see [`Format::of`]) with `opts`.
pub fn read(path: &Path, opts: &ReadOptions) -> Result<Recording> {
    opts.check()?;
    let format = Format::of(path)?;
    let mut rec = match format {
        Format::Sdt => read_sdt(path)?,
        Format::Ptu => read_ptu(path, opts)?,
        Format::Pt3 | Format::Ht3 => read_pt3_ht3(path, opts)?,
        Format::Phu => read_phu(path)?,
        Format::Spc => read_spc(path, opts)?,
        Format::Tiff | Format::Npy => {
            let bin = opts.bin_ns.ok_or_else(|| Error::Format {
                path: path.to_path_buf(),
                what: format!(
                    ".{} files carry no bin width: give it (--bin-ns)",
                    format.name()
                ),
            })?;
            if format == Format::Tiff {
                read_tiff(path, bin)?
            } else {
                read_npy(path, bin)?
            }
        }
    };
    // Selections the readers above leave to this common step.
    rec.images.retain(|i| {
        opts.block.is_none_or(|b| b == i.block)
            && opts.channel_wanted(i.channel)
            && (format.is_photon_stream() || opts.frame_wanted(i.frame))
    });
    if rec.images.is_empty() {
        return Err(Error::Format {
            path: path.to_path_buf(),
            what: format!("no image left after selecting {}", selections(opts)),
        });
    }
    if opts.sum_frames && !format.is_photon_stream() {
        rec.images = sum_frames(std::mem::take(&mut rec.images))
            .map_err(|e| in_file(path, "summing frames", e))?;
    }
    for image in &mut rec.images {
        if let Some(b) = opts.bin_ns {
            image.cube = image
                .cube
                .clone()
                .with_bin_ns(b)
                .map_err(|e| in_file(path, "--bin-ns", e))?;
        }
        if let Some(p) = opts.period_ns {
            image.cube = image
                .cube
                .clone()
                .with_period_ns(p)
                .map_err(|e| in_file(path, "--period-ns", e))?;
        }
    }
    Ok(rec)
}

/// The selections given, in words (`block 3, channel 1, frames 0..4`).
fn selections(opts: &ReadOptions) -> String {
    let mut parts = Vec::new();
    if let Some(b) = opts.block {
        parts.push(format!("block {b}"));
    }
    if let Some(c) = opts.channel {
        parts.push(format!("channel {c}"));
    }
    if let Some(f) = &opts.frames {
        parts.push(format!("frames {}..{} (end exclusive)", f.start, f.end));
    }
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(", ")
    }
}

/// One image per (block, channel): the sum of its frames.
fn sum_frames(images: Vec<Image>) -> Result<Vec<Image>> {
    let mut groups: Vec<(usize, usize, Vec<Image>)> = Vec::new();
    for image in images {
        match groups
            .iter_mut()
            .find(|(b, c, _)| *b == image.block && *c == image.channel)
        {
            Some(g) => g.2.push(image),
            None => groups.push((image.block, image.channel, vec![image])),
        }
    }
    groups
        .into_iter()
        .map(|(block, channel, imgs)| {
            let frame = imgs[0].frame;
            let cube = if imgs.len() == 1 {
                imgs.into_iter().next().expect("one").cube
            } else {
                AnyCube::sum(&imgs.iter().map(|i| &i.cube).collect::<Vec<_>>())?
            };
            Ok(Image {
                block,
                frame,
                channel,
                cube,
            })
        })
        .collect()
}

/// Read the first image of a file (block 0, frame 0, channel 0 unless selected otherwise);
/// `bin_ns` as in [`ReadOptions::with_bin_ns`].
pub fn read_cube(path: &Path, bin_ns: Option<f64>) -> Result<AnyCube> {
    let opts = match bin_ns {
        Some(b) => ReadOptions::default().with_bin_ns(b),
        None => ReadOptions::default(),
    };
    Ok(read(path, &opts)?
        .images
        .into_iter()
        .next()
        .expect("read returns at least one image")
        .cube)
}
