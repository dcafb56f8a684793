//! A reader that closes the pipe early (`biogpu ... | head -1`, `| true`) must not make
//! biogpu panic: the process ends quietly, as other command-line tools do.

use std::io::Read;
use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_ends_quietly_without_a_panic() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_biogpu"))
        .args(["--device", "cpu", "perfusion", "models"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting biogpu");
    // Close the read end before biogpu has started writing.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut stderr)
        .expect("reading stderr");
    let status = child.wait().expect("waiting for biogpu");
    assert!(!stderr.contains("panicked"), "biogpu panicked: {stderr}");
    assert_ne!(
        status.code(),
        Some(101),
        "exit 101 is a Rust panic: {stderr}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.success() || status.signal() == Some(libc::SIGPIPE),
            "expected success or SIGPIPE, got {status}: {stderr}"
        );
    }
}
