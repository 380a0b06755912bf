//! The crate's error type: each variant names the key, token or index at fault.

/// What can go wrong while building a tokenizer or encoding text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// A GGUF metadata key is missing or has the wrong type (the error names the key).
    #[error(transparent)]
    Metadata(#[from] kiln_format::FormatError),

    /// `tokenizer.ggml.model` names a tokenizer Kiln does not implement.
    #[error("unsupported tokenizer model '{model}'; supported: {supported}")]
    UnsupportedModel { model: String, supported: String },

    /// `tokenizer.ggml.pre` names a pre-tokenizer Kiln does not implement.
    #[error("unsupported BPE pre-tokenizer '{pre}'; supported: {supported}")]
    UnsupportedPreTokenizer { pre: String, supported: String },

    /// A BPE vocabulary without `tokenizer.ggml.merges`.
    #[error("the BPE vocabulary has no merges (metadata key '{key}' is missing)")]
    MissingMerges { key: &'static str },

    /// A merge rule that is not two pieces separated by a space.
    #[error("merge {index} ('{merge}') is not two pieces separated by a space")]
    BadMerge { index: usize, merge: String },

    /// The vocabulary has no tokens.
    #[error("the vocabulary is empty")]
    EmptyVocabulary,

    /// More tokens than a `u32` id can number.
    #[error("the vocabulary has {count} tokens; at most {max} are supported")]
    TooManyTokens { count: usize, max: u32 },

    /// A per-token array shorter than the token list.
    #[error("'{key}' has {found} entries but the vocabulary has {expected} tokens")]
    LengthMismatch {
        key: &'static str,
        expected: usize,
        found: usize,
    },

    /// Two ids with the same text.
    #[error("token '{text}' appears twice in the vocabulary, as ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },

    /// `tokenizer.ggml.scores` holds neither f32 nor i32 values.
    #[error("'{key}' must be an array of f32 or i32, found {found}")]
    BadScores {
        key: &'static str,
        found: &'static str,
    },

    /// The file asks for a BOS/EOS token to be added but names none.
    #[error("{add_key} is true, but {id_key} is not set")]
    AddedTokenMissing {
        add_key: &'static str,
        id_key: &'static str,
    },

    /// SentencePiece byte fallback needs a `<0xXX>` token the vocabulary lacks.
    #[error(
        "no byte-fallback token for byte 0x{byte:02X} (neither '<0x{byte:02X}>' nor the raw byte)"
    )]
    MissingByteToken { byte: u8 },

    /// A tokenizer.json (or a config file beside it) that does not have the expected shape.
    #[error("bad tokenizer file: {what} must be {reason}")]
    BadTokenizerJson { what: String, reason: String },

    /// A tokenizer.json component Kiln does not implement.
    #[error("unsupported tokenizer.json {component}: {found}; supported: {supported}")]
    UnsupportedTokenizerJson {
        component: &'static str,
        found: String,
        supported: &'static str,
    },

    /// A merge rule naming a piece that is not in the vocabulary.
    #[error("tokenizer.json merge {index} uses {token:?}, which is not in the vocabulary")]
    MergeOutOfVocabulary { index: usize, token: String },

    /// A tokenizer file could not be read.
    /// A vocabulary exported to GGUF metadata encodes a text differently from the
    /// tokenizer.json it came from (a pre-tokenizer or normalizer GGUF cannot express).
    #[error(
        "the GGUF form of this tokenizer.json encodes {text:?} as {gguf:?}, not {tokenizer_json:?}; \
         the tokenizer cannot be written to GGUF faithfully"
    )]
    ExportMismatch {
        text: String,
        tokenizer_json: Vec<u32>,
        gguf: Vec<u32>,
    },

    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}
