//! Fuzz target `uri_template`: see hostpipe_cli::fuzzing::uri_template.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostpipe_cli::fuzzing::uri_template(data));
