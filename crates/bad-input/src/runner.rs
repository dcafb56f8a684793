//! Feeding cases to a reader: one thread per case, a time limit, and a verdict per case.

use crate::Case;
use std::cell::Cell;
use std::fmt::{self, Display};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

thread_local! {
    /// The case this thread is reading, for the allocator's refusal message. A `&'static str`
    /// (the label is leaked) so that reading it never allocates.
    static CURRENT: Cell<&'static str> = const { Cell::new("") };
}

pub(crate) fn with_current_case(f: impl FnOnce(&str)) {
    f(CURRENT.with(Cell::get));
}

/// What a reader did with one case.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Read without error (a tolerated corruption, e.g. a flipped bit in the counts).
    Read,
    /// A clear error that names the file.
    Error(String),
    /// An error whose message does not name the file.
    Unnamed(String),
    /// The reader panicked.
    Panic(String),
    /// The reader ran past the time limit.
    Hang,
}

/// Every case with its outcome.
#[derive(Debug, Default)]
pub struct Report {
    pub format: String,
    pub outcomes: Vec<(String, Outcome)>,
}

impl Report {
    /// Cases read without error.
    pub fn read(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Read))
    }

    /// Cases refused with a clear error.
    pub fn errors(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Error(_)))
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.iter().filter(|(_, o)| f(o)).count()
    }

    /// The cases that panicked, hung or gave an error without the file's name.
    pub fn failures(&self) -> Vec<&(String, Outcome)> {
        self.outcomes
            .iter()
            .filter(|(_, o)| !matches!(o, Outcome::Read | Outcome::Error(_)))
            .collect()
    }

    /// Panics listing every failure, if there is one.
    #[track_caller]
    pub fn assert_clean(&self) {
        let failures = self.failures();
        assert!(failures.is_empty(), "{self}");
    }
}

impl Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} cases, {} read, {} refused with an error, {} failures",
            self.format,
            self.outcomes.len(),
            self.read(),
            self.errors(),
            self.failures().len()
        )?;
        for (label, outcome) in self.failures() {
            writeln!(f, "  {label}: {outcome:?}")?;
        }
        Ok(())
    }
}

/// [`check_reader_with`] with a 10 s limit per case.
pub fn check_reader<T, E, R>(ext: &str, cases: &[Case], read: R) -> Report
where
    E: Display,
    R: Fn(&Path) -> Result<T, E> + Send + Sync + Clone + 'static,
{
    check_reader_with(ext, cases, Duration::from_secs(10), read)
}

/// Write each case to `case-<i>.<ext>` in a fresh temporary folder and call `read` on it in
/// its own thread. A reader that outlives `limit` is recorded as a hang and left running
/// (the test is failing anyway). Errors must contain the file's name (`case-<i>.<ext>`).
pub fn check_reader_with<T, E, R>(ext: &str, cases: &[Case], limit: Duration, read: R) -> Report
where
    E: Display,
    R: Fn(&Path) -> Result<T, E> + Send + Sync + Clone + 'static,
{
    let dir = scratch_dir(ext);
    let mut report = Report {
        format: ext.to_string(),
        outcomes: Vec::with_capacity(cases.len()),
    };
    for (i, case) in cases.iter().enumerate() {
        let name = format!("case-{i}.{ext}");
        let path = dir.join(&name);
        std::fs::write(&path, &case.bytes).expect("writing a case to the scratch folder");
        let label: &'static str =
            Box::leak(format!("{ext} {name}: {}", case.label).into_boxed_str());
        let outcome = run_one(&path, &name, label, limit, read.clone());
        let _ = std::fs::remove_file(&path);
        report.outcomes.push((case.label.clone(), outcome));
    }
    let _ = std::fs::remove_dir_all(&dir);
    report
}

fn run_one<T, E, R>(
    path: &Path,
    name: &str,
    label: &'static str,
    limit: Duration,
    read: R,
) -> Outcome
where
    E: Display,
    R: Fn(&Path) -> Result<T, E> + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let owned = path.to_path_buf();
    let handle = std::thread::spawn(move || {
        CURRENT.with(|c| c.set(label));
        let result = read(&owned).map(drop).map_err(|e| e.to_string());
        let _ = tx.send(());
        result
    });
    match rx.recv_timeout(limit) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(Ok(())) => Outcome::Read,
            Ok(Err(msg)) if msg.contains(name) => Outcome::Error(msg),
            Ok(Err(msg)) => Outcome::Unnamed(msg),
            Err(panic) => Outcome::Panic(panic_message(&*panic)),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => Outcome::Hang,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

fn scratch_dir(ext: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("bad-input-{}-{ext}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating a scratch folder");
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_cover_read_error_unnamed_panic_and_hang() {
        let cases = vec![
            Case::new("ok", b"ok".to_vec()),
            Case::new("named", b"named".to_vec()),
            Case::new("unnamed", b"unnamed".to_vec()),
            Case::new("panic", b"panic".to_vec()),
            Case::new("hang", b"hang".to_vec()),
        ];
        // The limit must outlast the panic case's hook: with RUST_BACKTRACE set, symbolising
        // the backtrace took over 300 ms on a loaded 2-core CI machine and the panic was
        // called a hang. The hanging reader sleeps far past the limit (its thread is left).
        let report =
            check_reader_with(
                "t",
                &cases,
                Duration::from_secs(5),
                |p: &Path| match std::fs::read(p).unwrap().as_slice() {
                    b"ok" => Ok(()),
                    b"named" => Err(format!("{}: bad", p.display())),
                    b"unnamed" => Err("bad".to_string()),
                    b"panic" => panic!("boom"),
                    _ => {
                        std::thread::sleep(Duration::from_secs(90));
                        Ok(())
                    }
                },
            );
        let o: Vec<&Outcome> = report.outcomes.iter().map(|(_, o)| o).collect();
        assert_eq!(o[0], &Outcome::Read);
        assert!(matches!(o[1], Outcome::Error(_)));
        assert!(matches!(o[2], Outcome::Unnamed(_)));
        assert_eq!(o[3], &Outcome::Panic("boom".into()));
        assert_eq!(o[4], &Outcome::Hang);
        assert_eq!(report.failures().len(), 3);
    }
}
