//! What a run records about itself: provenance in every `summary.json`, and the run's
//! summary on stdout under `--json`.
//!
//! The record is process-wide because a command line is one run: `main` opens it with the
//! parsed arguments ([`begin`]), the device choice adds the device ([`note_device`]), each
//! output folder starts hashing its inputs when it opens ([`hash_inputs`]) and stamps its
//! `summary.json` with [`provenance`] when it writes it ([`summary_written`]); `main` then
//! prints every summary (or a command's result, [`set_result`]) under `--json`.
//! Library users get the device and precision part from each verb's `Info`.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::SystemTime;

/// The git commit this binary was built from (`unknown` outside a git checkout), with
/// `-dirty` when the working tree had uncommitted changes to tracked files at build time.
pub const GIT_COMMIT: &str = env!("BIOGPU_GIT_COMMIT");

/// A folder holding more files than this is recorded by count and size, without checksums.
const MAX_HASHED_FILES: usize = 10_000;

/// How `summary.json` and `--json` present provenance; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug)]
struct Run {
    started: SystemTime,
    command_line: Vec<String>,
    command: String,
    parameters: serde_json::Value,
    json: bool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Devices the command line resolved to, until a job's choice says which ran.
    devices: Vec<gpu_runtime::Device>,
    /// The device a job ran on and why (`auto`'s per-job choice).
    chosen: Option<(gpu_runtime::Device, String)>,
    /// Per-verb details from the library (precision and the device as the verb saw it).
    library: Option<serde_json::Value>,
    hashes: HashMap<PathBuf, Arc<OnceLock<serde_json::Value>>>,
    /// A batch's inputs (canonical): each output records only its own.
    batch: Vec<PathBuf>,
    summaries: Vec<serde_json::Value>,
    result: Option<serde_json::Value>,
}

static RUN: OnceLock<Run> = OnceLock::new();

fn run() -> Option<&'static Run> {
    RUN.get()
}

fn state(run: &Run) -> std::sync::MutexGuard<'_, State> {
    run.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Open the record of this run: the command line as given, the command's name, and every
/// argument's value with where it came from (defaults included).
pub fn begin(command: &clap::Command, matches: &clap::ArgMatches, json: bool) {
    let (name, parameters) = parameters(command, matches);
    imaging_io::set_software_note(software_note());
    let _ = RUN.set(Run {
        started: SystemTime::now(),
        command_line: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        command: name,
        parameters,
        json,
        state: Mutex::default(),
    });
}

/// The note in every TIFF and NIfTI this run writes: version, commit, where the record is
/// (short enough for NIfTI's 80-byte `descrip`).
pub fn software_note() -> String {
    let short = GIT_COMMIT.get(..12).unwrap_or(GIT_COMMIT);
    let dirty = if GIT_COMMIT.ends_with("-dirty") {
        "-dirty"
    } else {
        ""
    };
    format!(
        "biogpu {} {short}{dirty}; provenance in summary.json/provenance.json",
        env!("CARGO_PKG_VERSION")
    )
}

/// Whether `--json` was given: the run's summary goes to stdout, human lines to stderr.
pub fn json_mode() -> bool {
    run().is_some_and(|r| r.json)
}

/// The devices `--device` resolved to (the first one is recorded unless a job's choice
/// names another).
pub fn note_devices(devices: &[gpu_runtime::Device]) {
    if let Some(run) = run() {
        state(run).devices = devices.to_vec();
    }
}

/// The device a job ran on and the reason (`auto` chooses per job).
pub fn note_device(device: &gpu_runtime::Device, reason: &str) {
    if let Some(run) = run() {
        state(run).chosen = Some((device.clone(), reason.to_string()));
    }
}

/// How the library computed the result (the `provenance` of a verb's `Info`): device as
/// used and precision. The last verb of a command is recorded.
pub fn note_library(provenance: &gpu_runtime::Provenance) {
    if let Some(run) = run() {
        state(run).library = serde_json::to_value(provenance).ok();
    }
}

/// The inputs of a batch run: one output folder's record lists only the input it was made
/// from, not the others named on the same command line.
pub fn note_batch(inputs: &[PathBuf]) {
    if let Some(run) = run() {
        state(run).batch = inputs
            .iter()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
    }
}

/// The result of a command that writes no output folder, printed under `--json`.
pub fn set_result(value: serde_json::Value) {
    if let Some(run) = run() {
        state(run).result = Some(value);
    }
}

/// Start computing the SHA-256 of each input (file, or folder of files) on a background
/// thread, so that it is ready when the summary is written.
pub fn hash_inputs(paths: &[PathBuf]) {
    let Some(run) = run() else { return };
    let mut todo = Vec::new();
    {
        let mut st = state(run);
        for p in paths {
            st.hashes.entry(p.clone()).or_insert_with(|| {
                let cell = Arc::new(OnceLock::new());
                todo.push((p.clone(), cell.clone()));
                cell
            });
        }
    }
    if todo.is_empty() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("biogpu-hash".into())
        .spawn(move || {
            for (path, cell) in todo {
                cell.get_or_init(|| describe_input(&path));
            }
        });
}

/// The provenance block of `summary.json` for outputs made from `inputs`.
pub fn provenance(inputs: &[PathBuf]) -> serde_json::Value {
    let Some(run) = run() else {
        return serde_json::Value::Null;
    };
    hash_inputs(inputs);
    let cells: Vec<(PathBuf, Arc<OnceLock<serde_json::Value>>)> = {
        let st = state(run);
        inputs
            .iter()
            .filter_map(|p| st.hashes.get(p).map(|c| (p.clone(), c.clone())))
            .collect()
    };
    // Wait for the background hashes (or compute here if that thread is not done yet).
    let inputs: Vec<serde_json::Value> = cells
        .iter()
        .map(|(p, cell)| cell.get_or_init(|| describe_input(p)).clone())
        .collect();
    let st = state(run);
    let (device, choice) = match &st.chosen {
        Some((d, why)) => (vec![device_json(d)], Some(why.clone())),
        None => (st.devices.iter().map(device_json).collect(), None),
    };
    serde_json::json!({
        "schema_version": SCHEMA_VERSION,
        "biogpu": {
            "version": env!("CARGO_PKG_VERSION"),
            "git_commit": GIT_COMMIT,
            "target": format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
        },
        "command": run.command,
        "command_line": run.command_line,
        "working_dir": std::env::current_dir().ok().map(|d| d.display().to_string()),
        "started": humantime::format_rfc3339_millis(run.started).to_string(),
        "finished": humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        "devices": device,
        "device_choice": choice,
        "library": st.library,
        "parameters": run.parameters,
        "seeds": seeds(&run.parameters),
        "inputs": inputs,
    })
}

/// What the outputs in folder `out` were made from: `given` (the command's inputs), then
/// every other argument given on the command line (or in the environment) that names an
/// existing file or folder, except outputs (`--out`, anything inside the output folder), a
/// folder holding the given inputs and a batch's other inputs (each output of a batch
/// records its own input).
pub fn inputs_of(out: &Path, given: &[&Path]) -> Vec<PathBuf> {
    let canon = |p: &Path| p.canonicalize().ok();
    let out_canon = canon(out);
    let given_canon: Vec<PathBuf> = given.iter().filter_map(|p| canon(p)).collect();
    let batch = run().map(|r| state(r).batch.clone()).unwrap_or_default();
    let mut inputs: Vec<PathBuf> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut push = |p: &Path, inputs: &mut Vec<PathBuf>| {
        let c = canon(p).unwrap_or_else(|| p.to_path_buf());
        if !seen.contains(&c) {
            seen.push(c);
            inputs.push(p.to_path_buf());
        }
    };
    for p in given {
        push(p, &mut inputs);
    }
    for p in path_arguments() {
        let Some(c) = canon(&p) else { continue };
        let is_out = out_canon
            .as_ref()
            .is_some_and(|o| c == *o || c.starts_with(o));
        let holds_given = c.is_dir() && given_canon.iter().any(|g| g.starts_with(&c));
        let other_in_batch = batch.contains(&c) && !given_canon.contains(&c);
        if !is_out && !holds_given && !other_in_batch {
            push(&p, &mut inputs);
        }
    }
    inputs
}

/// Arguments that name where outputs go, not what they are made from.
const OUTPUT_ARGUMENTS: [&str; 2] = ["out", "vtu"];

/// The values of arguments given (not defaulted) that name existing paths, outputs aside.
fn path_arguments() -> Vec<PathBuf> {
    let Some(run) = run() else { return Vec::new() };
    let Some(map) = run.parameters.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (id, arg) in map {
        if arg["source"] == "default" || OUTPUT_ARGUMENTS.contains(&id.as_str()) {
            continue;
        }
        let values = match &arg["value"] {
            serde_json::Value::String(s) => vec![s.as_str()],
            serde_json::Value::Array(a) => a.iter().filter_map(|v| v.as_str()).collect(),
            _ => Vec::new(),
        };
        for v in values {
            let p = PathBuf::from(v);
            if !v.is_empty() && p.exists() {
                out.push(p);
            }
        }
    }
    out
}

/// Note a `summary.json` just written (it is printed on stdout under `--json`).
pub fn summary_written(value: &serde_json::Value) {
    if let Some(run) = run() {
        state(run).summaries.push(value.clone());
    }
}

/// Under `--json`, print every summary written (one JSON document per output folder), or
/// the command's result, or (for a command that made neither) its provenance alone.
pub fn print_json() -> anyhow::Result<()> {
    let Some(run) = run().filter(|r| r.json) else {
        return Ok(());
    };
    let (mut docs, result) = {
        let mut st = state(run);
        (std::mem::take(&mut st.summaries), st.result.take())
    };
    if let Some(result) = result {
        docs.push(with_provenance(result, &[]));
    }
    let docs = if docs.is_empty() {
        vec![serde_json::json!({ "provenance": provenance(&[]) })]
    } else {
        docs
    };
    let mut out = std::io::stdout().lock();
    for doc in docs {
        use std::io::Write;
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    }
    Ok(())
}

/// `doc` with a `provenance` block for `inputs` added (objects only).
pub fn with_provenance(mut doc: serde_json::Value, inputs: &[PathBuf]) -> serde_json::Value {
    if let Some(map) = doc.as_object_mut() {
        map.insert("provenance".into(), provenance(inputs));
    }
    doc
}

fn device_json(device: &gpu_runtime::Device) -> serde_json::Value {
    let info = device.info();
    serde_json::json!({
        "id": info.id,
        "name": info.name,
        "backend": info.backend.to_string(),
        "driver": info.driver,
        "compute_capability": info.compute_capability.map(|(a, b)| format!("{a}.{b}")),
        "memory_bytes": info.total_memory,
        "software": info.software,
    })
}

/// Every argument that names a seed, with its value: what reproduces a random run.
fn seeds(parameters: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    if let Some(map) = parameters.as_object() {
        for (name, arg) in map {
            if name.contains("seed") {
                out.insert(name.clone(), arg["value"].clone());
            }
        }
    }
    serde_json::Value::Object(out)
}

/// The subcommand path (`flim fit`) and each argument of it with its value and source:
/// `{"window": {"value": "7", "source": "default"}}`. Arguments neither given nor
/// defaulted are left out.
fn parameters(command: &clap::Command, matches: &clap::ArgMatches) -> (String, serde_json::Value) {
    let mut names = Vec::new();
    let mut out = serde_json::Map::new();
    let (mut cmd, mut m) = (command, matches);
    loop {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let Some(entry) = argument(m, id) else {
                continue;
            };
            out.insert(id.to_string(), entry);
        }
        let Some((name, sub)) = m.subcommand() else {
            break;
        };
        names.push(name.to_string());
        match cmd.find_subcommand(name) {
            Some(c) => (cmd, m) = (c, sub),
            None => break,
        }
    }
    (names.join(" "), serde_json::Value::Object(out))
}

fn argument(m: &clap::ArgMatches, id: &str) -> Option<serde_json::Value> {
    let source = match m.value_source(id)? {
        clap::parser::ValueSource::DefaultValue => "default",
        clap::parser::ValueSource::EnvVariable => "environment",
        _ => "command line",
    };
    let value = if let Ok(Some(&count)) = m.try_get_one::<u8>(id) {
        serde_json::json!(count)
    } else {
        let raw: Vec<String> = m
            .try_get_raw(id)
            .ok()
            .flatten()?
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        match raw.as_slice() {
            [one] => serde_json::json!(one),
            _ => serde_json::json!(raw),
        }
    };
    Some(serde_json::json!({ "value": value, "source": source }))
}

/// Path, size and SHA-256 of an input file; for a folder, its file count, total size and
/// the SHA-256 of its listing (`relative/path  <file sha256>` lines in sorted order).
fn describe_input(path: &Path) -> serde_json::Value {
    let shown = path.display().to_string();
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => describe_folder(path, shown),
        Ok(meta) => match sha256_file(path) {
            Ok(sha) => serde_json::json!({ "path": shown, "bytes": meta.len(), "sha256": sha }),
            Err(e) => serde_json::json!({ "path": shown, "bytes": meta.len(),
                "sha256": null, "note": format!("not read: {e}") }),
        },
        Err(e) => serde_json::json!({ "path": shown, "note": format!("not found: {e}") }),
    }
}

fn describe_folder(path: &Path, shown: String) -> serde_json::Value {
    let mut files = Vec::new();
    let mut todo = vec![path.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => todo.push(p),
                Ok(t) if t.is_file() => files.push(p),
                _ => {}
            }
        }
    }
    files.sort();
    let bytes: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    if files.len() > MAX_HASHED_FILES {
        return serde_json::json!({ "path": shown, "kind": "folder", "files": files.len(),
            "bytes": bytes, "sha256": null,
            "note": format!("more than {MAX_HASHED_FILES} files: not hashed") });
    }
    let mut listing = Sha256::new();
    for f in &files {
        let rel = f.strip_prefix(path).unwrap_or(f).to_string_lossy();
        let sha = sha256_file(f).unwrap_or_else(|e| format!("unreadable ({e})"));
        listing.update(format!("{rel}  {sha}\n").as_bytes());
    }
    serde_json::json!({ "path": shown, "kind": "folder", "files": files.len(), "bytes": bytes,
        "sha256": hex(&listing.finalize()) })
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Print a line for the user: to stdout, or to stderr under `--json` (stdout then holds
/// only the JSON).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        if $crate::record::json_mode() {
            eprintln!($($arg)*);
        } else {
            println!($($arg)*);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-256 of a known file and of a folder listing; a missing input is reported, not
    /// fatal.
    #[test]
    fn inputs_are_described_with_checksums() {
        let dir = std::env::temp_dir().join(format!("biogpu-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.txt"), b"abc").unwrap();
        std::fs::write(dir.join("sub/b.txt"), b"").unwrap();
        let a = describe_input(&dir.join("a.txt"));
        assert_eq!(a["bytes"], 3);
        // FIPS 180-2 test vector "abc".
        assert_eq!(
            a["sha256"],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let folder = describe_input(&dir);
        assert_eq!(folder["files"], 2);
        assert_eq!(folder["bytes"], 3);
        assert_eq!(folder["sha256"].as_str().unwrap().len(), 64);
        let missing = describe_input(&dir.join("none"));
        assert!(missing["note"].as_str().unwrap().starts_with("not found"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Arguments are recorded with their source, defaults included, for the whole
    /// subcommand path.
    #[test]
    fn parameters_record_values_and_sources() {
        use clap::{Arg, ArgAction, Command};
        let cmd = Command::new("biogpu")
            .arg(Arg::new("device").long("device").default_value("auto"))
            .arg(Arg::new("verbose").short('v').action(ArgAction::Count))
            .subcommand(
                Command::new("mc").subcommand(
                    Command::new("run")
                        .arg(Arg::new("sim"))
                        .arg(Arg::new("seed").long("seed").default_value("1"))
                        .arg(Arg::new("out").long("out")),
                ),
            );
        let m = cmd
            .clone()
            .try_get_matches_from(["biogpu", "-vv", "mc", "run", "s.json", "--seed", "7"])
            .unwrap();
        let (name, p) = parameters(&cmd, &m);
        assert_eq!(name, "mc run");
        assert_eq!(p["device"]["value"], "auto");
        assert_eq!(p["device"]["source"], "default");
        assert_eq!(p["verbose"]["value"], 2);
        assert_eq!(p["sim"]["value"], "s.json");
        assert_eq!(p["seed"]["value"], "7");
        assert_eq!(p["seed"]["source"], "command line");
        assert!(p.get("out").is_none(), "{p}");
        assert_eq!(seeds(&p)["seed"], "7");
    }
}
