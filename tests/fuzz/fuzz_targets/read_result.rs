//! Fuzz target `read_result`: see hostpipe_cli::fuzzing::read_result.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostpipe_cli::fuzzing::read_result(data));
