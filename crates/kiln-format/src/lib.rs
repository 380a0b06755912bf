//! # kiln-format
//!
//! Reads model files: GGUF v2/v3 (and, later, safetensors) over `memmap2`, exposing typed
//! metadata and zero-copy tensor views.
//!
//! **Owns:** file parsing, bounds checking, metadata values, tensor tables, the
//! [`GgmlType`] geometry table.
//!
//! **Must never:** run inference, dequantize, allocate from an unchecked length read from a
//! file, or panic on any input. Every count, length and offset read from a file is bounded
//! before it is used; a hostile file gets a [`FormatError`] naming the field.

mod ggml_type;

pub use ggml_type::{ALL_GGML_TYPES, GgmlType};
