//! The axes of a TIFF stack, from the metadata ImageJ and OME write into its first
//! ImageDescription.
//!
//! Readers that take a TIFF's pages as one axis (speckle frames, FLIM time bins) check this
//! first. Without it, a hyperstack, for example channels x slices x frames stored page after
//! page, would be read as one long axis that mixes them, silently.

use std::fmt;

/// Sizes of the non-image axes a TIFF declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackAxes {
    /// Who wrote the metadata: `ImageJ` or `OME`.
    pub source: &'static str,
    /// The axis order as the metadata gives it (ImageJ: `TZCYX`; OME: `DimensionOrder`).
    pub order: String,
    pub channels: usize,
    pub slices: usize,
    pub frames: usize,
}

impl StackAxes {
    /// Parse an ImageDescription. `None` when it holds neither ImageJ nor OME metadata.
    ///
    /// ```
    /// let d = "ImageJ=1.11a\nimages=24\nchannels=2\nslices=3\nframes=4\nhyperstack=true\n";
    /// let axes = imaging_io::StackAxes::parse(d).unwrap();
    /// assert_eq!((axes.channels, axes.slices, axes.frames), (2, 3, 4));
    /// assert_eq!(axes.extra().len(), 3);
    /// ```
    pub fn parse(description: &str) -> Option<Self> {
        if description.starts_with("ImageJ=") {
            let value = |key: &str| {
                description
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(1)
            };
            return Some(StackAxes {
                source: "ImageJ",
                order: "TZCYX".into(),
                channels: value("channels"),
                slices: value("slices"),
                frames: value("frames"),
            });
        }
        let start = description.find("<Pixels ")?;
        let pixels = &description[start..];
        let pixels = &pixels[..pixels.find('>').unwrap_or(pixels.len())];
        let attr = |name: &str| {
            let key = format!(" {name}=\"");
            let at = pixels.find(&key)? + key.len();
            let end = pixels[at..].find('"')?;
            Some(&pixels[at..at + end])
        };
        let size = |name: &str| attr(name).and_then(|v| v.parse().ok()).unwrap_or(1);
        Some(StackAxes {
            source: "OME",
            order: attr("DimensionOrder").unwrap_or("XYZCT").to_string(),
            channels: size("SizeC"),
            slices: size("SizeZ"),
            frames: size("SizeT"),
        })
    }

    /// How the pages are stored: `(axis, length)` for `C`, `Z` and `T`, fastest-varying
    /// first (ImageJ: channels, then slices, then frames; OME: as `DimensionOrder` says after
    /// X and Y). An error when the order does not name each axis once.
    ///
    /// ```
    /// let d = "ImageJ=1.11a\nimages=24\nchannels=2\nslices=3\nframes=4\n";
    /// let axes = imaging_io::StackAxes::parse(d).unwrap();
    /// assert_eq!(axes.page_order().unwrap(), [('C', 2), ('Z', 3), ('T', 4)]);
    /// ```
    pub fn page_order(&self) -> Result<Vec<(char, usize)>, String> {
        let letters: Vec<char> = if self.source == "ImageJ" {
            vec!['C', 'Z', 'T']
        } else {
            self.order.chars().filter(|c| "CZT".contains(*c)).collect()
        };
        let mut sorted = letters.clone();
        sorted.sort_unstable();
        if sorted != ['C', 'T', 'Z'] {
            return Err(format!(
                "{self}: axis order {} does not name C, Z and T once each",
                self.order
            ));
        }
        let len = |c: char| match c {
            'C' => self.channels,
            'Z' => self.slices,
            _ => self.frames,
        };
        Ok(letters.into_iter().map(|c| (c, len(c).max(1))).collect())
    }

    /// The axes longer than 1, as (name, length), in the order channels, slices, frames.
    pub fn extra(&self) -> Vec<(&'static str, usize)> {
        [
            ("channels", self.channels),
            ("slices", self.slices),
            ("frames", self.frames),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .collect()
    }
}

impl fmt::Display for StackAxes {
    /// E.g. `an ImageJ hyperstack of 2 channels x 3 slices x 4 frames (axes TZCYX)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sizes: Vec<String> = self
            .extra()
            .iter()
            .map(|(name, n)| format!("{n} {name}"))
            .collect();
        let kind = if self.source == "ImageJ" {
            "an ImageJ hyperstack"
        } else {
            "an OME-TIFF"
        };
        write!(f, "{kind} of {} (axes {})", sizes.join(" x "), self.order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imagej_single_axis_stacks_have_one_extra_axis() {
        let a = StackAxes::parse("ImageJ=1.11a\nimages=10\nslices=10\n").unwrap();
        assert_eq!(a.extra(), [("slices", 10)]);
        let a = StackAxes::parse("ImageJ=1.11a\nimages=1\n").unwrap();
        assert!(a.extra().is_empty());
    }

    #[test]
    fn ome_sizes_and_order_are_read() {
        let xml = r#"<?xml version="1.0"?><OME><Image ID="Image:0"><Pixels DimensionOrder="XYCZT" ID="Pixels:0" SizeC="2" SizeT="5" SizeX="8" SizeY="8" SizeZ="1" Type="uint16"><Channel/></Pixels></Image></OME>"#;
        let a = StackAxes::parse(xml).unwrap();
        assert_eq!(a.order, "XYCZT");
        assert_eq!(a.extra(), [("channels", 2), ("frames", 5)]);
        assert_eq!(
            a.to_string(),
            "an OME-TIFF of 2 channels x 5 frames (axes XYCZT)"
        );
    }

    #[test]
    fn other_descriptions_are_not_metadata() {
        assert!(StackAxes::parse("a speckle recording, 1 ms exposure").is_none());
        assert!(StackAxes::parse("").is_none());
    }
}
