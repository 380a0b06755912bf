//! The one error type of this crate: every variant carries the facts a user needs to see
//! what is wrong with which file, field, key or tensor.

use std::path::PathBuf;

use crate::GgmlType;

/// Everything that can go wrong while reading (or writing) a model file, or while asking its
/// metadata for a typed value.
///
/// `field` strings name the place in the file (`"tensor_info[3].name"`,
/// `"metadata 'tokenizer.ggml.tokens' value[17]"`), so a report can be checked by hand.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The file could not be opened, mapped or created.
    #[error("cannot access {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Writing to an output stream failed (the GGUF writer, `kiln inspect`).
    #[error("write failed: {source}")]
    Write {
        #[source]
        source: std::io::Error,
    },

    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: it starts with \"{}\" instead of \"GGUF\"", .magic.escape_ascii())]
    NotGguf { magic: [u8; 4] },

    /// A version other than 2 or 3 (v1 used 32-bit counts and is not supported).
    #[error("unsupported GGUF version {version}: Kiln reads GGUF versions 2 and 3")]
    UnsupportedVersion { version: u32 },

    /// The version field reads byte-swapped: the file was written for a big-endian machine.
    #[error("this GGUF file is big-endian; Kiln reads only little-endian GGUF files")]
    BigEndian,

    /// The file ends (or a declared size runs) past the bytes that are there.
    #[error(
        "file truncated at {field}: needs {needed} bytes at offset {offset}, but only {available} remain"
    )]
    Truncated {
        field: String,
        offset: u64,
        needed: u64,
        available: u64,
    },

    /// A count or length is over the configured [`Limits`](crate::Limits).
    #[error("{what} {value} exceeds the limit of {limit} (at {key})")]
    LimitExceeded {
        what: &'static str,
        key: String,
        value: u64,
        limit: u64,
    },

    /// A string is not valid UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 { field: String },

    /// A boolean byte that is neither 0 nor 1.
    #[error("{field} is a bool stored as byte {byte}; only 0 and 1 are valid")]
    InvalidBool { field: String, byte: u8 },

    /// A metadata value type id outside 0..=12.
    #[error("metadata key '{key}' has unknown value type id {type_id}")]
    UnknownValueType { key: String, type_id: u32 },

    /// A tensor type id that ggml never assigned (or retired).
    #[error("tensor '{tensor}' has unknown ggml type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },

    /// `general.alignment` is zero or not a power of two.
    #[error("general.alignment is {alignment}; it must be a nonzero power of two")]
    BadAlignment { alignment: u64 },

    /// A tensor's offset is not a multiple of the file's alignment.
    #[error(
        "tensor '{tensor}' starts at data offset {offset}, which is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },

    /// A tensor's bytes run past the end of the data section.
    #[error(
        "tensor '{tensor}' needs {size} bytes at data offset {offset}, past the end of the data section ({data_len} bytes)"
    )]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        size: u64,
        data_len: u64,
    },

    /// A tensor with more dimensions than ggml supports.
    #[error("tensor '{tensor}' has {n_dims} dimensions; at most {max} are allowed")]
    TooManyDims {
        tensor: String,
        n_dims: u32,
        max: u32,
    },

    /// A tensor shape that cannot describe real data.
    #[error("tensor '{tensor}' has shape {dims:?}: {reason}")]
    BadShape {
        tensor: String,
        dims: Vec<u64>,
        reason: &'static str,
    },

    /// A row length that is not a whole number of the type's blocks.
    #[error(
        "tensor '{tensor}' of type {ty} has rows of {row_len} elements, not a multiple of its block size {block_elems}"
    )]
    PartialBlock {
        tensor: String,
        ty: GgmlType,
        row_len: u64,
        block_elems: u64,
    },

    /// The bytes handed to the writer do not match the tensor's shape and type.
    #[error(
        "tensor '{tensor}' needs {expected} bytes for its shape and type, but {actual} were given"
    )]
    TensorSizeMismatch {
        tensor: String,
        expected: u64,
        actual: u64,
    },

    /// A metadata key that is required but absent.
    #[error("metadata key '{key}' is missing")]
    MissingKey { key: String },

    /// A metadata value of a type the caller cannot use.
    #[error("metadata key '{key}' has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    /// An integer metadata value that does not fit the requested type.
    #[error("metadata key '{key}' holds {value}, which does not fit in {expected}")]
    IntOutOfRange {
        key: String,
        value: i128,
        expected: &'static str,
    },

    /// A tensor that is required but absent.
    #[error("tensor '{name}' is missing")]
    MissingTensor { name: String },

    /// The same metadata key appears twice.
    #[error("metadata key '{key}' appears more than once")]
    DuplicateKey { key: String },

    /// The same tensor name appears twice.
    #[error("tensor '{name}' appears more than once")]
    DuplicateTensor { name: String },

    /// A safetensors header that is not the JSON the format prescribes.
    #[error("safetensors header: {field}: {reason}")]
    SafetensorsHeader { field: String, reason: String },

    /// A safetensors dtype string outside the specification's list.
    #[error("tensor '{tensor}' has unknown safetensors dtype '{dtype}'")]
    UnknownDtype { tensor: String, dtype: String },

    /// A safetensors tensor whose byte range does not match its shape and dtype.
    #[error(
        "tensor '{tensor}' ({dtype}, shape {shape:?}) needs {expected} bytes, but its data_offsets [{begin}, {end}] span {}",
        end - begin
    )]
    DataOffsetsMismatch {
        tensor: String,
        dtype: &'static str,
        shape: Vec<u64>,
        expected: u64,
        begin: u64,
        end: u64,
    },

    /// safetensors data that is not tiled exactly by its tensors (a hole or an overlap).
    #[error("tensor '{tensor}' at data offset {offset} {reason} (expected offset {expected})")]
    DataLayout {
        tensor: String,
        offset: u64,
        expected: u64,
        reason: &'static str,
    },

    /// A `model.safetensors.index.json` that is malformed or disagrees with its shards.
    #[error("shard index {}: {reason}", .path.display())]
    BadShardIndex { path: PathBuf, reason: String },

    /// A directory with neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error(
        "{} holds neither model.safetensors nor model.safetensors.index.json",
        .dir.display()
    )]
    NoSafetensors { dir: PathBuf },
}
