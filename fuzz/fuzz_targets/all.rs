#![no_main]
//! Every reader in one binary, chosen by `BIOGPU_FUZZ_TARGET` (one binary to copy to a
//! machine without Rust; `run.sh` uses the per-target binaries when built here).

use std::sync::OnceLock;

static TARGET: OnceLock<String> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let target = TARGET.get_or_init(|| {
        std::env::var("BIOGPU_FUZZ_TARGET").expect("BIOGPU_FUZZ_TARGET names the reader to fuzz")
    });
    biogpu_fuzz::fuzz(target, data);
});
