//! Greyscale PNG input (8 or 16 bits), optionally split into frames stacked vertically
//! in one tall image, the layout of recordings such as `temporal.png`.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use ndarray::Array3;
use png::{BitDepth, ColorType, Decoder, DecodingError, Limits};

use crate::error::{Error, Result};
use crate::model::types::{CameraInfo, RawStack};

/// Largest image read: 4 GiB of pixels, checked (with overflow-checked arithmetic) against
/// the header's width and height before the image buffer is allocated. Also the `png`
/// crate's own allocation limit (`Limits::bytes`), set explicitly.
const MAX_PNG_BYTES: usize = 1 << 32;

/// Most decoded bytes per stored byte: 1032, the limit of DEFLATE, which PNG image data use.
/// A header that declares more pixels than the file could hold is refused before decoding.
const MAX_PNG_RATIO: u64 = 1032;

/// Read a greyscale PNG as a stack.
///
/// With `frame_height = Some(h)` the image is cut into `height / h` frames of `h` rows
/// each (frame k is rows `k h .. (k + 1) h`); the image height must be a multiple of `h`.
/// Without it the image is one frame. `bit_depth` states the significant bits of integer
/// data, as for TIFF, and is checked against every pixel.
pub fn read_png(
    path: impl AsRef<Path>,
    frame_height: Option<usize>,
    bit_depth: Option<u32>,
) -> Result<(RawStack, CameraInfo)> {
    let path = path.as_ref();
    read_png_checked(path, frame_height, bit_depth)
}

/// A call into the `png` crate: its errors, and a panic inside it, as errors naming the file.
fn decoded<T>(
    path: &Path,
    f: impl FnOnce() -> std::result::Result<T, png::DecodingError>,
) -> Result<T> {
    gpu_runtime::contain_panic(f)
        .map_err(|msg| Error::Format {
            path: path.to_path_buf(),
            why: format!("the PNG decoder failed (internal panic: {msg}); the file is corrupt"),
        })?
        .map_err(|e| png_error(path, e))
}

fn read_png_checked(
    path: &Path,
    frame_height: Option<usize>,
    bit_depth: Option<u32>,
) -> Result<(RawStack, CameraInfo)> {
    let fail = |why: String| Error::Format {
        path: path.to_path_buf(),
        why,
    };
    let io_err = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    let file_len = file.metadata().map_err(io_err)?.len();
    if file_len == 0 {
        return Err(Error::EmptyFile {
            path: path.to_path_buf(),
        });
    }
    let decoder = Decoder::new_with_limits(
        BufReader::new(file),
        Limits {
            bytes: MAX_PNG_BYTES,
        },
    );
    let mut reader = decoded(path, || decoder.read_info())?;
    let info = reader.info();
    let (width, height) = (info.width as usize, info.height as usize);
    let (color, depth) = (info.color_type, info.bit_depth);
    if color != ColorType::Grayscale {
        let what = match color {
            ColorType::Rgb | ColorType::Rgba => "a colour (RGB) image",
            ColorType::Indexed => "a palette (indexed colour) image",
            _ => "greyscale with an alpha channel",
        };
        return Err(fail(format!(
            "{what}; only single-channel greyscale PNG is supported, so save one channel or convert to greyscale"
        )));
    }
    let container = match depth {
        BitDepth::Eight => 8,
        BitDepth::Sixteen => 16,
        other => {
            return Err(fail(format!(
                "{}-bit greyscale is not supported; save as 8-bit or 16-bit greyscale",
                other as u8
            )));
        }
    };
    let frame_height = frame_height.unwrap_or(height);
    if frame_height == 0 || height % frame_height != 0 {
        return Err(Error::InvalidParameter {
            name: "frame_height",
            value: frame_height.to_string(),
            why: format!(
                "{} is {width}x{height}; its height must be a whole number of frames of this height",
                path.display()
            ),
        });
    }
    // The image's size against the cap and the file before the buffer is allocated.
    let need = width
        .checked_mul(height)
        .and_then(|n| n.checked_mul(container as usize / 8))
        .filter(|&n| n <= MAX_PNG_BYTES)
        .ok_or_else(|| {
            fail(format!(
                "{width}x{height} pixels is larger than the {} GiB an image may have",
                MAX_PNG_BYTES >> 30
            ))
        })?;
    let most = file_len.saturating_mul(MAX_PNG_RATIO);
    if need as u64 > most {
        return Err(fail(format!(
            "a {width}x{height} image needs {need} bytes, more than a {file_len}-byte PNG can \
             hold (at most {most}); the header is corrupt or the file truncated"
        )));
    }
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| fail("image too large".into()))?;
    if size != need {
        return Err(fail(format!(
            "the decoder lays the {width}x{height} image out in {size} bytes, expected {need}"
        )));
    }
    let mut buf = vec![0u8; size];
    let out = decoded(path, || reader.next_frame(&mut buf))?;
    if out.buffer_size() != need {
        return Err(fail(format!(
            "the decoder returned {} bytes for a {width}x{height} image, expected {need}",
            out.buffer_size()
        )));
    }
    let shape = (height / frame_height, frame_height, width);
    let stack = if container == 8 {
        RawStack::U8(Array3::from_shape_vec(shape, buf).map_err(|e| fail(e.to_string()))?)
    } else {
        // PNG stores 16-bit samples big-endian.
        let v = buf
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        RawStack::U16(Array3::from_shape_vec(shape, v).map_err(|e| fail(e.to_string()))?)
    };
    let bits = match bit_depth {
        None => container,
        Some(b) if b == 0 || b > container => {
            return Err(Error::InvalidParameter {
                name: "bit_depth",
                value: b.to_string(),
                why: format!(
                    "{} stores {container}-bit pixels; the stated depth must be 1..={container}",
                    path.display()
                ),
            });
        }
        Some(b) => {
            let max = (1u32 << b) - 1;
            let found = match &stack {
                RawStack::U8(a) => a.iter().map(|&v| u32::from(v)).max(),
                RawStack::U16(a) => a.iter().map(|&v| u32::from(v)).max(),
                RawStack::F32(_) => None,
            };
            if let Some(found) = found.filter(|&f| f > max) {
                return Err(fail(format!(
                    "holds the value {found}, above the {max} maximum of the stated {b}-bit depth; \
                     state the camera's real bit depth or leave it unset"
                )));
            }
            b
        }
    };
    Ok((
        stack,
        CameraInfo {
            bit_depth: Some(bits),
        },
    ))
}

fn png_error(path: &Path, e: DecodingError) -> Error {
    match e {
        DecodingError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            Error::Format {
                path: path.to_path_buf(),
                why: "the file ends before the image data are complete (truncated PNG)".into(),
            }
        }
        DecodingError::IoError(source) => Error::Io {
            path: path.to_path_buf(),
            source,
        },
        DecodingError::Format(f) => Error::Format {
            path: path.to_path_buf(),
            why: format!("not a valid PNG file: {f}"),
        },
        other => Error::Format {
            path: path.to_path_buf(),
            why: format!("cannot decode PNG: {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_util::TempDir;

    /// Write a greyscale 8- or 16-bit PNG (test fixture).
    fn write_gray_png(
        path: &Path,
        width: u32,
        height: u32,
        sixteen: bool,
        data: &[u8],
    ) -> Result<()> {
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::io::BufWriter::new(File::create(path).map_err(io_err)?);
        let mut enc = png::Encoder::new(file, width, height);
        enc.set_color(ColorType::Grayscale);
        enc.set_depth(if sixteen {
            BitDepth::Sixteen
        } else {
            BitDepth::Eight
        });
        let encode_err = |e: png::EncodingError| Error::Format {
            path: path.to_path_buf(),
            why: format!("cannot write PNG: {e}"),
        };
        let mut w = enc.write_header().map_err(encode_err)?;
        w.write_image_data(data).map_err(encode_err)?;
        w.finish().map_err(encode_err)
    }

    #[test]
    fn vertically_stacked_png_splits_into_frames() {
        let dir = TempDir::new("png_split");
        let path = dir.path("stack.png");
        // 3 frames of 2x4 stacked into a 4x6 image; frame k has value 10k + row*4 + col.
        let data: Vec<u8> = (0..6u8)
            .flat_map(|r| (0..4u8).map(move |c| 10 * (r / 2) + (r % 2) * 4 + c))
            .collect();
        write_gray_png(&path, 4, 6, false, &data).unwrap();
        let (s, cam) = read_png(&path, Some(2), None).unwrap();
        assert_eq!(cam.bit_depth, Some(8));
        let RawStack::U8(a) = s else { panic!() };
        assert_eq!(a.dim(), (3, 2, 4));
        assert_eq!(a[[2, 1, 3]], 20 + 4 + 3);
        let (one, _) = read_png(&path, None, None).unwrap();
        assert_eq!(one.dim(), (1, 6, 4));
    }

    #[test]
    fn sixteen_bit_png_is_big_endian_decoded() {
        let dir = TempDir::new("png16");
        let path = dir.path("p16.png");
        let values: [u16; 4] = [0, 1, 4095, 65535];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        write_gray_png(&path, 2, 2, true, &bytes).unwrap();
        let (s, cam) = read_png(&path, None, None).unwrap();
        assert_eq!(cam.bit_depth, Some(16));
        assert_eq!(
            s,
            RawStack::U16(Array3::from_shape_vec((1, 2, 2), values.to_vec()).unwrap())
        );
        let err = read_png(&path, None, Some(12)).unwrap_err().to_string();
        assert!(err.contains("65535") && err.contains("4095"), "{err}");
    }

    #[test]
    fn height_not_divisible_by_frame_height_is_an_error() {
        let dir = TempDir::new("png_bad_split");
        let path = dir.path("odd.png");
        write_gray_png(&path, 4, 5, false, &[0; 20]).unwrap();
        let err = read_png(&path, Some(2), None).unwrap_err().to_string();
        assert!(err.contains("frame_height") && err.contains("4x5"), "{err}");
        assert!(read_png(&path, Some(0), None).is_err());
    }

    #[test]
    fn colour_empty_and_truncated_png_are_refused() {
        let dir = TempDir::new("png_bad");
        let rgb = dir.path("rgb.png");
        let file = std::io::BufWriter::new(File::create(&rgb).unwrap());
        let mut enc = png::Encoder::new(file, 1, 1);
        enc.set_color(ColorType::Rgb);
        let mut w = enc.write_header().unwrap();
        w.write_image_data(&[1, 2, 3]).unwrap();
        w.finish().unwrap();
        let err = read_png(&rgb, None, None).unwrap_err().to_string();
        assert!(err.contains("colour (RGB)"), "{err}");

        let empty = dir.path("empty.png");
        std::fs::write(&empty, []).unwrap();
        assert!(matches!(
            read_png(&empty, None, None),
            Err(Error::EmptyFile { .. })
        ));

        let trunc = dir.path("trunc.png");
        write_gray_png(
            &trunc,
            64,
            64,
            false,
            &(0..4096u32).map(|i| (i * 7) as u8).collect::<Vec<_>>(),
        )
        .unwrap();
        let bytes = std::fs::read(&trunc).unwrap();
        std::fs::write(&trunc, &bytes[..bytes.len() / 2]).unwrap();
        let err = read_png(&trunc, None, None).unwrap_err().to_string();
        assert!(err.contains("trunc.png"), "{err}");
    }

    #[test]
    #[ignore = "needs ../shared/data/speckle/temporal.png"]
    fn real_temporal_png_reads_as_1000_frames() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/speckle/temporal.png");
        assert!(path.exists(), "{} is absent", path.display());
        let (s, cam) = read_png(&path, Some(64), None).unwrap();
        assert_eq!(s.dim(), (1000, 64, 64));
        assert_eq!(cam.bit_depth, Some(8));
    }
}
