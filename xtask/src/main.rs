//! `cargo xtask`: the project's single gate and home of its suites.
fn main() {}
