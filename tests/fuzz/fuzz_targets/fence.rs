//! Fuzz target `fence`: see hostpipe_cli::fuzzing::fence.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostpipe_cli::fuzzing::fence(data));
