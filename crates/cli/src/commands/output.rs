//! Output folders: every output checked before the work starts, written whole or not at all,
//! and never over an input.
//!
//! A command names every file it will write when it opens its folder ([`OutDir::create`]).
//! If any of them exists, it stops at once with one message listing them all (`--force`
//! replaces them; an input or a folder is never replaced). Files are written into a hidden
//! staging folder, `.biogpu-partial-<pid>` inside the output folder, and moved into place by
//! [`OutDir::commit`] only when the run has succeeded; a run that fails drops its staging
//! folder, so no partial or truncated file is left behind. A staging folder left by a killed
//! run is removed by the next run in that folder.
//!
//! Every folder records how it was made ([`crate::record`]): its `summary.json` gets a
//! `provenance` block when it is committed (version, commit, command line, parameters,
//! device, inputs with SHA-256); a folder without a summary gets `provenance.json`, and a
//! command that writes one named file gets `<file>.provenance.json` beside it.

use anyhow::{Context, bail};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const STAGING_PREFIX: &str = ".biogpu-partial-";

/// A folder for one command's outputs.
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    staging: PathBuf,
    planned: BTreeSet<String>,
    /// What the outputs were made from: the command's inputs and every path argument.
    inputs: Vec<PathBuf>,
    /// Where the provenance goes when there is no `summary.json` to hold it.
    provenance_file: Option<String>,
    committed: bool,
    /// Whether `create` made the folder itself (removed again, if still empty, on failure).
    created: bool,
}

impl OutDir {
    /// Create `dir` (and parents) and its staging folder, after checking every `planned`
    /// output name: none may be an input or a folder, and none may exist unless `force`.
    pub fn create<S: AsRef<str>>(
        dir: &Path,
        force: bool,
        inputs: &[&Path],
        planned: impl IntoIterator<Item = S>,
    ) -> anyhow::Result<Self> {
        let mut planned: BTreeSet<String> = planned
            .into_iter()
            .map(|s| s.as_ref().to_string())
            .collect();
        let provenance_file = provenance_file(&planned);
        planned.extend(provenance_file.clone());
        check_planned(dir, force, inputs, &planned)?;
        let inputs = crate::record::inputs_of(dir, inputs);
        crate::record::hash_inputs(&inputs);
        let created = !dir.exists();
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating output folder {}", dir.display()))?;
        remove_stale_staging(dir);
        let staging = dir.join(format!("{STAGING_PREFIX}{}", std::process::id()));
        // Start clean even if a previous run of this process id left files.
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir(&staging).with_context(|| {
            format!(
                "output folder {} is not writable (creating {})",
                dir.display(),
                staging.display()
            )
        })?;
        Ok(OutDir {
            dir: dir.to_path_buf(),
            staging,
            planned,
            inputs,
            provenance_file,
            committed: false,
            created,
        })
    }

    /// The output folder, as the user named it.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The staging folder, for library writers that fill a folder themselves.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Where to write output `name` now: inside the staging folder. `name` must have been
    /// planned, so that the check before the work covered it.
    pub fn file(&self, name: &str) -> anyhow::Result<PathBuf> {
        if !self.planned.contains(name) {
            bail!(
                "internal error: output {name} was not announced before the run; \
                 nothing was written to {}",
                self.dir.display()
            );
        }
        let path = self.staging.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        Ok(path)
    }

    pub fn write_json(&self, name: &str, value: &serde_json::Value) -> anyhow::Result<()> {
        let path = self.file(name)?;
        std::fs::write(&path, serde_json::to_string_pretty(value)? + "\n")
            .with_context(|| format!("writing {}", self.dir.join(name).display()))
    }

    /// Record the provenance (in `summary.json`, or its own file), move every staged file
    /// into the output folder and remove the staging folder.
    pub fn commit(mut self) -> anyhow::Result<()> {
        self.write_provenance()?;
        let staged = staged_files(&self.staging)?;
        for name in &staged {
            if !self.planned.contains(name) {
                bail!(
                    "internal error: {name} was written but not announced before the run; \
                     nothing was moved into {}",
                    self.dir.display()
                );
            }
        }
        for name in &staged {
            let target = self.dir.join(name);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::rename(self.staging.join(name), &target)
                .with_context(|| format!("moving {} into place", target.display()))?;
        }
        self.committed = true;
        std::fs::remove_dir_all(&self.staging)
            .with_context(|| format!("removing {}", self.staging.display()))
    }
}

impl OutDir {
    /// Stamp the staged `summary.json` with the run's provenance, or write the provenance
    /// file; either document is what `--json` prints for this folder.
    fn write_provenance(&self) -> anyhow::Result<()> {
        let summary = self.staging.join("summary.json");
        let (path, doc) = if let Some(name) = &self.provenance_file {
            let outputs: Vec<String> = staged_files(&self.staging)?;
            let doc = serde_json::json!({ "outputs": outputs });
            (
                self.staging.join(name),
                crate::record::with_provenance(doc, &self.inputs),
            )
        } else if summary.is_file() {
            let text = std::fs::read_to_string(&summary)
                .with_context(|| format!("reading back {}", summary.display()))?;
            let doc: serde_json::Value = serde_json::from_str(&text).with_context(|| {
                format!(
                    "internal error: {} is not JSON",
                    self.dir.join("summary.json").display()
                )
            })?;
            (summary, crate::record::with_provenance(doc, &self.inputs))
        } else {
            // summary.json was planned but not written (a run that writes it only on success).
            return Ok(());
        };
        let name = path
            .strip_prefix(&self.staging)
            .unwrap_or(&path)
            .display()
            .to_string();
        std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", self.dir.join(name).display()))?;
        crate::record::summary_written(&doc);
        Ok(())
    }
}

/// The provenance file of a folder whose planned outputs hold no `summary.json`:
/// `<file>.provenance.json` beside a single named file, else `provenance.json`.
fn provenance_file(planned: &BTreeSet<String>) -> Option<String> {
    if planned.contains("summary.json") {
        return None;
    }
    match planned.iter().collect::<Vec<_>>().as_slice() {
        [one] => Some(format!("{one}.provenance.json")),
        _ => Some("provenance.json".into()),
    }
}

impl Drop for OutDir {
    /// A run that did not commit leaves nothing behind.
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.staging);
            if self.created {
                // Only if empty: never anything that was there or that another run put.
                let _ = std::fs::remove_dir(&self.dir);
            }
        }
    }
}

/// A single output file's folder and name, for commands that write one named file.
pub fn split_file(path: &Path) -> anyhow::Result<(&Path, &str)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: expected a file name (UTF-8) to write", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// One error listing every planned output that is an input, a folder, or (without `force`)
/// an existing file.
fn check_planned(
    dir: &Path,
    force: bool,
    inputs: &[&Path],
    planned: &BTreeSet<String>,
) -> anyhow::Result<()> {
    let inputs: Vec<PathBuf> = inputs
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let (mut are_inputs, mut are_folders, mut exist) = (Vec::new(), Vec::new(), Vec::new());
    for name in planned {
        let path = dir.join(name);
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if path
            .canonicalize()
            .is_ok_and(|canon| inputs.contains(&canon))
        {
            are_inputs.push(name.as_str());
        } else if meta.is_dir() {
            are_folders.push(name.as_str());
        } else if !force {
            exist.push(name.as_str());
        }
    }
    let mut problems = Vec::new();
    if !are_inputs.is_empty() {
        problems.push(format!(
            "would replace input file(s) {}; choose another --out folder",
            are_inputs.join(", ")
        ));
    }
    if !are_folders.is_empty() {
        problems.push(format!(
            "{} {} folder(s) where output files go",
            are_folders.join(", "),
            if are_folders.len() == 1 {
                "is a"
            } else {
                "are"
            }
        ));
    }
    if !exist.is_empty() {
        problems.push(format!(
            "{} output(s) exist: {}; choose another --out folder or pass --force to replace them",
            exist.len(),
            exist.join(", ")
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    bail!(
        "nothing was run: in {}, {}",
        dir.display(),
        problems.join("; ")
    )
}

/// Paths of the files under `staging`, relative to it, with `/` separators.
fn staged_files(staging: &Path) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let here = staging.join(&rel);
        for entry in
            std::fs::read_dir(&here).with_context(|| format!("listing {}", here.display()))?
        {
            let entry = entry?;
            let rel = rel.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                todo.push(rel);
            } else {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Remove staging folders of runs that were killed (Linux: their process is gone).
fn remove_stale_staging(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    if !Path::new("/proc/self").exists() {
        return;
    }
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(STAGING_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("biogpu-outdir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn committed_outputs_appear_only_at_commit() {
        let dir = scratch("commit");
        let out = OutDir::create(&dir, false, &[], ["a.txt", "sub/b.txt"]).unwrap();
        std::fs::write(out.file("a.txt").unwrap(), "a").unwrap();
        std::fs::write(out.file("sub/b.txt").unwrap(), "b").unwrap();
        assert!(!dir.join("a.txt").exists(), "nothing visible before commit");
        out.commit().unwrap();
        // A folder without a summary.json records its provenance in its own file.
        assert_eq!(entries(&dir), ["a.txt", "provenance.json", "sub"]);
        assert_eq!(std::fs::read_to_string(dir.join("sub/b.txt")).unwrap(), "b");
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("provenance.json")).unwrap())
                .unwrap();
        assert_eq!(record["outputs"], serde_json::json!(["a.txt", "sub/b.txt"]));
    }

    /// One named file gets its provenance beside it; a summary.json gets it inside.
    #[test]
    fn provenance_goes_beside_one_file_or_into_the_summary() {
        let dir = scratch("beside");
        let out = OutDir::create(&dir, false, &[], ["beta.json"]).unwrap();
        std::fs::write(out.file("beta.json").unwrap(), "{}").unwrap();
        out.commit().unwrap();
        assert_eq!(entries(&dir), ["beta.json", "beta.json.provenance.json"]);
        let dir = scratch("summary");
        let out = OutDir::create(&dir, false, &[], ["k.tif", "summary.json"]).unwrap();
        std::fs::write(out.file("k.tif").unwrap(), "").unwrap();
        out.write_json("summary.json", &serde_json::json!({"k_mean": 0.1}))
            .unwrap();
        out.commit().unwrap();
        assert_eq!(entries(&dir), ["k.tif", "summary.json"]);
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["k_mean"], 0.1);
        assert!(summary.get("provenance").is_some(), "{summary}");
    }

    #[test]
    fn a_failed_run_leaves_nothing() {
        let dir = scratch("fail");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "user's").unwrap();
        let run = || -> anyhow::Result<()> {
            let out = OutDir::create(&dir, false, &[], ["a.tif", "b.tif"])?;
            std::fs::write(out.file("a.tif")?, "half a run")?;
            bail!("the second map failed");
        };
        assert!(run().is_err());
        assert_eq!(entries(&dir), ["keep.txt"]);
    }

    #[test]
    fn every_existing_output_is_listed_before_any_work() {
        let dir = scratch("exists");
        std::fs::create_dir_all(dir.join("c.png")).unwrap();
        for f in ["a.tif", "b.tif"] {
            std::fs::write(dir.join(f), "old").unwrap();
        }
        let msg = OutDir::create(&dir, false, &[], ["a.tif", "b.tif", "c.png", "d.json"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("2 output(s) exist: a.tif, b.tif"), "{msg}");
        assert!(msg.contains("c.png is a folder"), "{msg}");
        assert!(msg.contains("--force"), "{msg}");
        // --force replaces files but never a folder.
        let msg = OutDir::create(&dir, true, &[], ["a.tif", "c.png"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("c.png is a folder") && !msg.contains("a.tif"),
            "{msg}"
        );
        let out = OutDir::create(&dir, true, &[], ["a.tif", "b.tif"]).unwrap();
        std::fs::write(out.file("a.tif").unwrap(), "new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("a.tif")).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(dir.join("b.tif")).unwrap(), "old");
    }

    #[test]
    fn inputs_are_never_replaced_even_with_force() {
        let dir = scratch("input");
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("data.tif");
        std::fs::write(&input, "raw").unwrap();
        let msg = OutDir::create(&dir, true, &[&input], ["data.tif"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("input file(s) data.tif"), "{msg}");
    }

    #[test]
    fn unplanned_outputs_and_unwritable_folders_are_errors() {
        let dir = scratch("unplanned");
        let out = OutDir::create(&dir, false, &[], ["a.tif"]).unwrap();
        assert!(
            out.file("b.tif")
                .unwrap_err()
                .to_string()
                .contains("not announced")
        );
        std::fs::write(out.staging().join("c.tif"), "x").unwrap();
        assert!(out.commit().is_err());
        assert!(
            !dir.exists(),
            "staging and the folder the run created removed"
        );
        // A folder that was there before stays, empty again.
        std::fs::create_dir_all(&dir).unwrap();
        let out = OutDir::create(&dir, false, &[], ["a.tif"]).unwrap();
        std::fs::write(out.staging().join("c.tif"), "x").unwrap();
        assert!(out.commit().is_err());
        assert_eq!(entries(&dir), Vec::<String>::new(), "staging removed");
        // A file where the folder should be: refused before any work.
        let file = scratch("afile");
        std::fs::write(&file, "x").unwrap();
        let msg = OutDir::create(&file.join("sub"), false, &[], ["a.tif"])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("creating output folder"), "{msg}");
    }

    #[test]
    fn staging_of_a_killed_run_is_removed() {
        let dir = scratch("stale");
        // Process ids are below 2^22 on Linux; this one cannot be running.
        let stale = dir.join(format!("{STAGING_PREFIX}4294967"));
        std::fs::create_dir_all(&stale).unwrap();
        std::fs::write(stale.join("half.tif"), "x").unwrap();
        let out = OutDir::create(&dir, false, &[], ["a.tif"]).unwrap();
        if Path::new("/proc/self").exists() {
            assert!(!stale.exists());
        }
        drop(out);
    }
}
