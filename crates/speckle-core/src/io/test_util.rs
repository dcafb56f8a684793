//! Test helpers: unique temporary directories and hand-built tiny TIFF files.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "speckle-core-{tag}-{}-{n}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fields of a one-page, one-strip, uncompressed little-endian TIFF built byte by byte, for
/// layouts the `tiff` encoder cannot write (packed 12-bit, signed samples, predictors).
pub(crate) struct TinyTiff {
    pub width: u32,
    pub height: u32,
    pub bits: u16,
    pub photometric: u16,
    pub sample_format: u16,
    pub predictor: Option<u16>,
    pub data: Vec<u8>,
}

impl TinyTiff {
    pub(crate) fn gray(width: u32, height: u32, bits: u16, data: Vec<u8>) -> Self {
        Self {
            width,
            height,
            bits,
            photometric: 1,
            sample_format: 1,
            predictor: None,
            data,
        }
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut entries: Vec<(u16, u16, u32)> = vec![
            (256, 4, self.width),
            (257, 4, self.height),
            (258, 3, u32::from(self.bits)),
            (259, 3, 1),
            (262, 3, u32::from(self.photometric)),
            (273, 4, 0), // strip offset, patched below
            (277, 3, 1),
            (278, 4, self.height),
            (279, 4, self.data.len() as u32),
            (339, 3, u32::from(self.sample_format)),
        ];
        if let Some(p) = self.predictor {
            entries.push((317, 3, u32::from(p)));
            entries.sort_by_key(|e| e.0);
        }
        let ifd_len = 2 + 12 * entries.len() + 4;
        let data_offset = (8 + ifd_len) as u32;
        let mut out = b"II*\0".to_vec();
        out.extend(8u32.to_le_bytes());
        out.extend((entries.len() as u16).to_le_bytes());
        for (tag, ty, value) in entries {
            let value = if tag == 273 { data_offset } else { value };
            out.extend(tag.to_le_bytes());
            out.extend(ty.to_le_bytes());
            out.extend(1u32.to_le_bytes());
            if ty == 3 {
                out.extend((value as u16).to_le_bytes());
                out.extend([0, 0]);
            } else {
                out.extend(value.to_le_bytes());
            }
        }
        out.extend(0u32.to_le_bytes());
        out.extend(&self.data);
        out
    }
}
