//! A list of studies to fit in one run (`biogpu perfusion fit --studies FILE.csv`): one row
//! per study, naming its series and whatever differs from study to study (mask, input
//! functions, T1 map, ...). What a row leaves empty comes from the options shared by all.
//!
//! The file is CSV with a header row; the columns are the fields of [`InputSpec`] that name
//! files, spelt as the `perfusion fit` options without `--` (`-` or `_`): `name`, `dce`,
//! `series`, `curves`, `mask`, `aif`, `aif_mask`, `pv`, `pv_mask`, `times`, `t1_map`,
//! `b1_map`. Each row needs `dce` or `curves`. Relative paths are taken from the list's
//! folder, so a list travels with its data; an input function may also be a population
//! input (`parker`, `parker:12`, `portal`, ...).
//!
//! ```
//! use perfusion_core::io::studies::read_studies;
//! let dir = std::env::temp_dir().join(format!("studies-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! std::fs::write(dir.join("studies.csv"), "name,dce,mask\np01,p01/dce.nii.gz,p01/liver.nii.gz\np02,p02/dce.nii.gz,\n")?;
//! let studies = read_studies(dir.join("studies.csv"))?;
//! assert_eq!(studies.len(), 2);
//! assert_eq!(studies[0].name, "p01");
//! assert_eq!(studies[0].dce.as_deref(), Some(dir.join("p01/dce.nii.gz").as_path()));
//! assert_eq!(studies[1].mask, None); // the shared --mask, if any
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::input::InputSpec;
use crate::error::{Error, Result};
use crate::model::population::PopulationInput;
use std::path::{Path, PathBuf};

/// One row of a study list: its name and the inputs it sets (paths made absolute or
/// relative to the current folder, from the list's folder).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Study {
    /// The study's name (its output folder): the `name` column, else the series' or curve
    /// file's name without its extension.
    pub name: String,
    /// The line of the list the study is on (1 is the header), for messages.
    pub line: usize,
    pub dce: Option<PathBuf>,
    pub series: Option<String>,
    pub curves: Option<PathBuf>,
    pub mask: Option<PathBuf>,
    pub aif: Option<String>,
    pub aif_mask: Option<PathBuf>,
    pub pv: Option<String>,
    pub pv_mask: Option<PathBuf>,
    pub times: Option<PathBuf>,
    pub t1_map: Option<PathBuf>,
    pub b1_map: Option<PathBuf>,
}

const COLUMNS: [&str; 12] = [
    "name", "dce", "series", "curves", "mask", "aif", "aif_mask", "pv", "pv_mask", "times",
    "t1_map", "b1_map",
];

impl Study {
    /// The input of this study: `shared` with this row's fields in place of its own. A row
    /// that names a series or curves replaces both (a study has one source of curves).
    #[must_use]
    pub fn apply(&self, shared: &InputSpec) -> InputSpec {
        let mut spec = shared.clone();
        if self.dce.is_some() || self.curves.is_some() {
            spec.dce.clone_from(&self.dce);
            spec.curves.clone_from(&self.curves);
            spec.series.clone_from(&self.series);
        }
        let set = |own: &Option<PathBuf>, into: &mut Option<PathBuf>| {
            if own.is_some() {
                into.clone_from(own);
            }
        };
        set(&self.mask, &mut spec.mask);
        set(&self.times, &mut spec.times);
        set(&self.b1_map, &mut spec.b1_map);
        // A row's input function replaces the shared one, whichever way each is given.
        if self.aif.is_some() || self.aif_mask.is_some() {
            spec.aif.clone_from(&self.aif);
            spec.aif_mask.clone_from(&self.aif_mask);
        }
        if self.pv.is_some() || self.pv_mask.is_some() {
            spec.pv.clone_from(&self.pv);
            spec.pv_mask.clone_from(&self.pv_mask);
        }
        if self.t1_map.is_some() {
            spec.t1_map.clone_from(&self.t1_map);
            spec.t10 = None;
        }
        spec
    }
}

/// Read a study list. Errors name the file and line: an unknown column, a row without
/// `dce` or `curves` or with both, a repeated name, an empty list.
pub fn read_studies(path: impl AsRef<Path>) -> Result<Vec<Study>> {
    let path = path.as_ref();
    let bad = |why: String| Error::File {
        path: path.to_path_buf(),
        why,
    };
    let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .flexible(false)
        .from_path(path)
        .map_err(|e| bad(format!("cannot read the study list: {e}")))?;
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| bad(format!("cannot read the header row: {e}")))?
        .iter()
        .map(|h| h.to_ascii_lowercase().replace('-', "_"))
        .collect();
    let mut column = [None; COLUMNS.len()];
    for (i, h) in header.iter().enumerate() {
        let k = COLUMNS.iter().position(|c| c == h).ok_or_else(|| {
            bad(format!(
                "line 1: unknown column `{h}`; the columns are {}",
                COLUMNS.join(", ")
            ))
        })?;
        if column[k].replace(i).is_some() {
            return Err(bad(format!("line 1: the column `{h}` appears twice")));
        }
    }
    if column[1].is_none() && column[3].is_none() {
        return Err(bad(
            "line 1: no `dce` or `curves` column; each study needs its series or curves".into(),
        ));
    }
    let mut studies: Vec<Study> = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| bad(format!("{e}")))?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let cell = |k: usize| -> Option<String> {
            column[k]
                .and_then(|i| record.get(i))
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let file = |k: usize| cell(k).map(|v| base.join(v));
        let input_fn = |k: usize| cell(k).map(|v| resolve_input_fn(&base, &v));
        let mut study = Study {
            name: String::new(),
            line,
            dce: file(1),
            series: cell(2),
            curves: file(3),
            mask: file(4),
            aif: input_fn(5),
            aif_mask: file(6),
            pv: input_fn(7),
            pv_mask: file(8),
            times: file(9),
            t1_map: file(10),
            b1_map: file(11),
        };
        match (&study.dce, &study.curves) {
            (None, None) => {
                return Err(bad(format!(
                    "line {line}: the study names no `dce` series and no `curves` file"
                )));
            }
            (Some(_), Some(_)) => {
                return Err(bad(format!(
                    "line {line}: the study names both a `dce` series and a `curves` file; give one"
                )));
            }
            _ => {}
        }
        for (a, b, what) in [
            (
                study.aif.is_some(),
                study.aif_mask.is_some(),
                "`aif` and `aif_mask`",
            ),
            (
                study.pv.is_some(),
                study.pv_mask.is_some(),
                "`pv` and `pv_mask`",
            ),
        ] {
            if a && b {
                return Err(bad(format!(
                    "line {line}: the study gives both {what}; give one"
                )));
            }
        }
        study.name = match cell(0) {
            Some(n) => {
                if n.contains(['/', '\\']) || n == "." || n == ".." {
                    return Err(bad(format!(
                        "line {line}: the name `{n}` is not a folder name (it may not hold / or \\)"
                    )));
                }
                n
            }
            None => default_name(study.dce.as_ref().or(study.curves.as_ref())),
        };
        if let Some(first) = studies.iter().find(|s| s.name == study.name) {
            return Err(bad(format!(
                "line {line}: the name `{}` is already used on line {}; each study needs its own (the `name` column)",
                study.name, first.line
            )));
        }
        studies.push(study);
    }
    if studies.is_empty() {
        return Err(bad(
            "the list holds no study (one row per study after the header)".into(),
        ));
    }
    Ok(studies)
}

/// A series' or curve file's name without `.nii.gz`, `.nii`, `.csv` and the like.
fn default_name(path: Option<&PathBuf>) -> String {
    let name = path
        .and_then(|p| p.file_name())
        .map_or_else(|| "study".into(), |n| n.to_string_lossy().into_owned());
    let lower = name.to_ascii_lowercase();
    for ext in [".nii.gz", ".nii", ".csv", ".dcm"] {
        if lower.ends_with(ext) && name.len() > ext.len() {
            return name[..name.len() - ext.len()].to_string();
        }
    }
    name
}

/// An input function cell: a population input stays as it is (where no file of that name
/// is beside the list); a file (`FILE` or `FILE:COLUMN`) is taken from the list's folder.
fn resolve_input_fn(base: &Path, value: &str) -> String {
    let name = value.split_once(':').map_or(value, |(n, _)| n);
    if name.parse::<PopulationInput>().is_ok() && !base.join(name).exists() {
        return value.to_string();
    }
    base.join(value).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;
    use crate::model::convert::Conversion;

    fn list(text: &str) -> (PathBuf, Result<Vec<Study>>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "biogpu-studies-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("studies.csv");
        std::fs::write(&file, text).unwrap();
        let got = read_studies(&file);
        (dir, got)
    }

    fn shared() -> InputSpec {
        InputSpec {
            model: Model::Tofts,
            dce: None,
            series: None,
            mask: Some("all/mask.nii.gz".into()),
            curves: None,
            aif: Some("parker".into()),
            aif_mask: None,
            pv: None,
            pv_mask: None,
            times: None,
            dt: Some(2.0),
            hematocrit: Some(0.42),
            conversion: Conversion::None,
            t10: Some(1.2),
            t1_map: None,
            b1_map: None,
        }
    }

    #[test]
    fn rows_take_paths_from_the_lists_folder_and_keep_the_shared_rest() {
        let (dir, got) = list(
            "Name, DCE, aif-mask, t1_map\n\
             # a comment line\n\
             p01, p01/dce.nii.gz, p01/aorta.nii.gz, p01/t1.nii.gz\n\
             , p02/dce.nii.gz, ,\n",
        );
        let s = got.unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].name, "dce", "named after the series file");
        let p01 = s[0].apply(&shared());
        assert_eq!(p01.dce, Some(dir.join("p01/dce.nii.gz")));
        assert_eq!(p01.aif_mask, Some(dir.join("p01/aorta.nii.gz")));
        assert_eq!(
            p01.aif, None,
            "the row's ROI replaces the shared population AIF"
        );
        assert_eq!(p01.t10, None, "the row's T1 map replaces the shared T10");
        assert_eq!(p01.mask, Some(PathBuf::from("all/mask.nii.gz")));
        assert_eq!(p01.dt, Some(2.0));
        let p02 = s[1].apply(&shared());
        assert_eq!(p02.aif.as_deref(), Some("parker"));
        assert_eq!(p02.t10, Some(1.2));
    }

    #[test]
    fn population_inputs_stay_and_csv_inputs_move_with_the_list() {
        let (dir, got) = list("curves,aif,pv\nc.csv,parker:12,inputs.csv:portal\n");
        let s = &got.unwrap()[0];
        assert_eq!(s.aif.as_deref(), Some("parker:12"));
        let pv = dir.join("inputs.csv:portal");
        assert_eq!(s.pv.as_deref(), Some(pv.to_str().unwrap()));
        assert_eq!(s.name, "c");
    }

    #[test]
    fn bad_lists_are_refused_with_file_and_line() {
        let cases = [
            ("dce,colour\na.nii,red\n", "line 1: unknown column `colour`"),
            ("mask\nm.nii\n", "no `dce` or `curves` column"),
            ("dce,dce\na,b\n", "`dce` appears twice"),
            ("name,dce,curves\na,,\n", "line 2: the study names no `dce`"),
            ("dce,curves\na.nii,b.csv\n", "line 2: the study names both"),
            (
                "name,dce\nx,a.nii\nx,b.nii\n",
                "line 3: the name `x` is already used on line 2",
            ),
            ("name,dce\n../up,a.nii\n", "is not a folder name"),
            ("name,dce\n", "holds no study"),
            (
                "dce,aif,aif_mask\na.nii,parker,m.nii\n",
                "line 2: the study gives both `aif` and `aif_mask`",
            ),
            ("name,dce\na,b,c\n", "studies.csv"),
        ];
        for (text, want) in cases {
            let (_, got) = list(text);
            let e = got.unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains("studies.csv"), "names the file: {e}");
        }
    }
}
