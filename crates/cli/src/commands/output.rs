//! Output folders that never overwrite what the user gave.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// A folder for one command's outputs.
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    force: bool,
    inputs: Vec<PathBuf>,
}

impl OutDir {
    /// Create `dir` (and parents). Inputs are remembered so no output can replace them.
    pub fn create(dir: &Path, force: bool, inputs: &[&Path]) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating output folder {}", dir.display()))?;
        let inputs = inputs
            .iter()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        Ok(OutDir {
            dir: dir.to_path_buf(),
            force,
            inputs,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Path for output `name`: refused if it is an input, or exists and --force was not given.
    pub fn file(&self, name: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        if let Ok(canon) = path.canonicalize() {
            if self.inputs.contains(&canon) {
                bail!("refusing to write {}: it is an input file", path.display());
            }
            if !self.force {
                bail!(
                    "{} exists; choose another --out folder or pass --force to overwrite outputs",
                    path.display()
                );
            }
        }
        Ok(path)
    }

    pub fn write_json(&self, name: &str, value: &serde_json::Value) -> anyhow::Result<()> {
        let path = self.file(name)?;
        std::fs::write(&path, serde_json::to_string_pretty(value)? + "\n")
            .with_context(|| format!("writing {}", path.display()))
    }
}
