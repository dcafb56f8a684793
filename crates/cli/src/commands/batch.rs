//! Many inputs in one process: a folder or several files through one command, each into an
//! output folder of its own. The fixed costs (process start, opening the GPU, loading its
//! kernels) are paid once, and the next inputs are read on other cores while the current
//! one is computed. A bad input is reported and skipped; the others complete.

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::sync::{Mutex, PoisonError};

/// The inputs named on the command line, a folder standing for its files whose extension is
/// one of `extensions` (sorted by name; subfolders are not entered). A missing path or a
/// folder without such files is an error before any work.
pub fn expand(given: &[PathBuf], extensions: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let mut inputs = Vec::new();
    for path in given {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading the folder {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && has_extension(p, extensions))
                .collect();
            if found.is_empty() {
                bail!(
                    "{} holds no input file (expected {})",
                    path.display(),
                    extensions
                        .iter()
                        .map(|e| format!(".{e}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            found.sort();
            inputs.extend(found);
        } else if path.exists() {
            inputs.push(path.clone());
        } else {
            bail!("{}: no such file or folder", path.display());
        }
    }
    let mut seen = HashSet::new();
    inputs.retain(|p| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    Ok(inputs)
}

fn has_extension(path: &Path, extensions: &[&str]) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| extensions.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

/// Whether `given` means several inputs (more than one path, or a folder): each then gets
/// its own output folder inside `--out`.
pub fn is_batch(given: &[PathBuf]) -> bool {
    given.len() > 1 || given.iter().any(|p| p.is_dir())
}

/// The output folder of each input inside `out`: the file's name without its extension,
/// numbered where two inputs share a name (`a`, `a-2`).
pub fn out_dirs(out: &Path, inputs: &[PathBuf]) -> Vec<PathBuf> {
    let mut used = HashSet::new();
    inputs
        .iter()
        .map(|p| {
            let stem = p
                .file_stem()
                .map_or_else(|| "input".into(), |s| s.to_string_lossy().into_owned());
            let mut name = stem.clone();
            let mut n = 1;
            while !used.insert(name.clone()) {
                n += 1;
                name = format!("{stem}-{n}");
            }
            out.join(name)
        })
        .collect()
}

/// Run `process` on every input in order, with up to `ahead` inputs read in advance on
/// other threads by `read`. A failed read or process is printed (`error: INPUT: why`) and
/// the next input goes on; the result is an error naming how many failed.
pub fn run<T: Send>(
    inputs: &[PathBuf],
    ahead: usize,
    read: impl Fn(&Path) -> anyhow::Result<T> + Sync,
    mut process: impl FnMut(usize, &Path, T) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    // Each output folder records its own input, not the batch's others.
    crate::record::note_batch(inputs);
    run_items(
        inputs,
        |p| p.display().to_string(),
        ahead,
        |p| read(p),
        |i, p, d| process(i, p, d),
    )
}

/// [`run`] over any items (a study list's rows, say), `shown` naming each in messages.
pub fn run_items<I: Sync, T: Send>(
    items: &[I],
    shown: impl Fn(&I) -> String + Sync,
    ahead: usize,
    read: impl Fn(&I) -> anyhow::Result<T> + Sync,
    mut process: impl FnMut(usize, &I, T) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    run_pipelined(items, shown, ahead, 1, read, |i, item, data| {
        process(i, item, data).map(|()| || Ok(()))
    })
}

/// Three stages over `items`: up to `ahead` read in advance on other threads (`read`),
/// one computed at a time on this thread (`process`, which holds the device), and the
/// outputs of up to `writers` written behind it on writer threads (the closure `process`
/// returns). So the next input is read and the previous one written while the current one
/// is computed. A failed stage is printed (`error: INPUT: why`) and the next input goes on;
/// the result is an error naming how many failed.
pub fn run_pipelined<'s, I: Sync, T: Send, W: FnOnce() -> anyhow::Result<()> + Send>(
    items: &'s [I],
    shown: impl Fn(&I) -> String + Sync,
    ahead: usize,
    writers: usize,
    read: impl Fn(&I) -> anyhow::Result<T> + Sync,
    mut process: impl FnMut(usize, &'s I, T) -> anyhow::Result<W>,
) -> anyhow::Result<()> {
    let bar = ProgressBar::new(items.len() as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} inputs, {per_sec}, eta {eta} {msg}")
            .expect("valid template"),
    );
    let ahead = ahead.max(1);
    let failed = Mutex::new(Vec::new());
    let report = |i: usize, e: &anyhow::Error| {
        let name = shown(&items[i]);
        let text = format!("{e:#}");
        // Readers name their file already; say it once.
        let line = if text.contains(&name) {
            text
        } else {
            format!("{name}: {text}")
        };
        bar.suspend(|| eprintln!("error: {line}"));
        failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(i);
    };
    // Writers share one queue; a full queue holds the computing thread back, so at most
    // `writers` results wait in memory.
    let writers = writers.max(1);
    let (to_write, queue) = sync_channel::<(usize, W)>(writers);
    let queue = Mutex::new(queue);
    std::thread::scope(|scope| {
        let (send, receive) = sync_channel(ahead);
        let read = &read;
        scope.spawn(move || {
            use rayon::prelude::*;
            for chunk in items.chunks(ahead) {
                let read: Vec<_> = chunk.par_iter().map(read).collect();
                for r in read {
                    if send.send(r).is_err() {
                        return; // the consumer stopped
                    }
                }
            }
        });
        for _ in 0..writers {
            let (queue, report, bar) = (&queue, &report, &bar);
            scope.spawn(move || {
                loop {
                    let next = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok((i, write)) = next else { return };
                    if let Err(e) = write() {
                        report(i, &e);
                    }
                    bar.inc(1);
                }
            });
        }
        for (i, (item, data)) in items.iter().zip(receive).enumerate() {
            bar.set_message(shown(item));
            match data.and_then(|d| process(i, item, d)) {
                Ok(write) => {
                    if to_write.send((i, write)).is_err() {
                        break; // no writer left (cannot happen: they end with the queue)
                    }
                }
                Err(e) => {
                    report(i, &e);
                    bar.inc(1);
                }
            }
        }
        drop(to_write);
    });
    bar.finish_and_clear();
    let mut failed = failed.into_inner().unwrap_or_else(PoisonError::into_inner);
    failed.sort_unstable();
    match failed.len() {
        0 => Ok(()),
        n => bail!(
            "{n} of {} inputs failed (each reported above): {}",
            items.len(),
            failed
                .iter()
                .map(|&i| shown(&items[i]))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("biogpu-batch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn folders_expand_to_their_inputs_in_name_order() {
        let dir = scratch("expand");
        for f in ["b.sdt", "a.SDT", "notes.txt", "c.ptu"] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        std::fs::create_dir(dir.join("sub.sdt")).unwrap();
        let got = expand(std::slice::from_ref(&dir), &["sdt", "ptu"]).unwrap();
        let names: Vec<_> = got
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["a.SDT", "b.sdt", "c.ptu"]);
        // Named twice: once.
        let twice = expand(&[dir.join("b.sdt"), dir.join("b.sdt")], &["sdt"]).unwrap();
        assert_eq!(twice.len(), 1);
        let e = expand(&[dir.join("missing.sdt")], &["sdt"]).unwrap_err();
        assert!(e.to_string().contains("no such file or folder"), "{e}");
        let empty = scratch("expand-empty");
        let e = expand(&[empty], &["sdt"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("holds no input file (expected .sdt)"),
            "{e}"
        );
    }

    #[test]
    fn output_folders_are_named_after_inputs_and_never_shared() {
        let dirs = out_dirs(
            Path::new("out"),
            &["x/a.sdt".into(), "y/a.sdt".into(), "b.ptu".into()],
        );
        assert_eq!(
            dirs,
            [
                PathBuf::from("out/a"),
                PathBuf::from("out/a-2"),
                PathBuf::from("out/b")
            ]
        );
    }

    #[test]
    fn a_bad_input_is_reported_and_the_others_complete() {
        let inputs: Vec<PathBuf> = (0..7).map(|i| PathBuf::from(format!("{i}.in"))).collect();
        let mut done = Vec::new();
        let e = run(
            &inputs,
            3,
            |p| {
                if p == Path::new("2.in") {
                    bail!("unreadable")
                }
                Ok(p.to_path_buf())
            },
            |i, p, d| {
                assert_eq!(p, d.as_path());
                if i == 5 {
                    bail!("fit failed")
                }
                done.push(i);
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!(done, [0, 1, 3, 4, 6], "in order, the bad ones skipped");
        let text = e.to_string();
        assert!(text.starts_with("2 of 7 inputs failed"), "{text}");
        assert!(text.contains("2.in") && text.contains("5.in"), "{text}");
    }

    #[test]
    fn writes_behind_run_on_writer_threads_and_their_failures_count() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let items: Vec<usize> = (0..9).collect();
        let written = AtomicUsize::new(0);
        let e = run_pipelined(
            &items,
            |i| format!("item{i}"),
            2,
            3,
            |&i| Ok(i * 10),
            |i, &item, data| {
                assert_eq!((item, data), (i, i * 10));
                let written = &written;
                Ok(move || {
                    if item == 4 {
                        bail!("disk full")
                    }
                    written.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
            },
        )
        .unwrap_err();
        assert_eq!(written.load(Ordering::Relaxed), 8);
        let text = e.to_string();
        assert!(text.starts_with("1 of 9 inputs failed"), "{text}");
        assert!(text.ends_with("item4"), "{text}");
    }
}
