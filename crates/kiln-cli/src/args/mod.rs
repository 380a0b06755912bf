//! Argument groups shared by subcommands (`#[command(flatten)]`).

pub mod chat;
pub mod kv;
pub mod model;
pub mod sampling;
pub mod spec;
