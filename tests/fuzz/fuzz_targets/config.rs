//! Fuzz target `config`: see hostpipe_cli::fuzzing::config.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostpipe_cli::fuzzing::config(data));
