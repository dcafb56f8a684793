//! What every test of the command needs: the binary on the CPU, a fresh scratch folder, the
//! text it printed.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `biogpu --device cpu ARGS...` and waits for it.
pub fn biogpu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_biogpu"))
        .args(["--device", "cpu"])
        .args(args)
        .output()
        .expect("starting biogpu")
}

/// An empty folder of this test process, `tag` naming it (tags differ between tests, which
/// share the process).
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("biogpu-cli-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What the command printed on stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
