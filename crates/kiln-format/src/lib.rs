//! # kiln-format
//!
//! Reads model files: GGUF v2/v3 and safetensors (single files and sharded checkpoints with
//! `model.safetensors.index.json`) over `memmap2`, exposing typed metadata and zero-copy
//! tensor views; writes GGUF and safetensors files (test fixtures, conversions).
//!
//! **Owns:** file parsing and writing, bounds checking, metadata values, tensor tables, the
//! [`GgmlType`] geometry table.
//!
//! **Must never:** run inference, dequantize, allocate from an unchecked length read from a
//! file, or panic on any input. Every count, length and offset read from a file is bounded
//! (by [`Limits`] and by the bytes that remain) before it is used; a hostile file gets a
//! [`FormatError`] naming the field.
//!
//! ```no_run
//! let file = kiln_format::GgufFile::open("model.gguf")?;
//! let layers = file.metadata().u32(&format!("{}.block_count", file.architecture()?))?;
//! let embd = file.tensor("token_embd.weight")?;
//! println!("{layers} layers; {} is {} {:?}", embd.info.name, embd.info.ty, embd.info.dims);
//! # Ok::<(), kiln_format::FormatError>(())
//! ```

mod error;
mod ggml_type;
mod gguf;
mod limits;
mod map;
mod safetensors;

pub use error::FormatError;
pub use ggml_type::{ALL_GGML_TYPES, GgmlType};
pub use gguf::{
    ALIGNMENT_KEY, Array, DEFAULT_ALIGNMENT, GGML_MAX_DIMS, GGUF_MAGIC, GgufFile, GgufWriter,
    Metadata, TensorInfo, TensorView, Value, ValueType,
};
pub use limits::{HARD_MAX_ARRAY_DEPTH, Limits};
pub use safetensors::{
    Dtype, INDEX_FILE as SAFETENSORS_INDEX_FILE, MAX_HEADER_LEN as SAFETENSORS_MAX_HEADER_LEN,
    SINGLE_FILE as SAFETENSORS_FILE, SafetensorsFile, SafetensorsSet, SafetensorsTensorInfo,
    SafetensorsTensorView, SafetensorsWriter, ShardIndex,
};
