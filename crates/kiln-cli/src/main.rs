//! The `kiln` command. Thin: parses arguments and composes the crates.
fn main() {}
