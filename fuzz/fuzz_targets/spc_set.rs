#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| biogpu_fuzz::fuzz("spc_set", data));
