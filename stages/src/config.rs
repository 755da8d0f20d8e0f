//! Shared config helpers.

pub use hostpipe_core::parse_section;
