//! The parts of a `tokenizer.json` Kiln reads, parsed into plain types. The component
//! objects (normalizer, pre-tokenizer, post-processor, decoder) are read by their `type`
//! tag in the modules that implement them; this module only holds the common shape and
//! the small helpers that turn a JSON value into a typed field or a precise error.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use crate::TokenizerError;

/// The top level of a `tokenizer.json`.
#[derive(Deserialize)]
pub(crate) struct TokenizerJson {
    #[serde(default)]
    pub(crate) added_tokens: Vec<AddedTokenJson>,
    #[serde(default)]
    pub(crate) normalizer: Option<Value>,
    #[serde(default)]
    pub(crate) pre_tokenizer: Option<Value>,
    #[serde(default)]
    pub(crate) post_processor: Option<Value>,
    #[serde(default)]
    pub(crate) decoder: Option<Value>,
    pub(crate) model: ModelJson,
}

/// One entry of `added_tokens`.
#[derive(Deserialize, Clone, Debug)]
pub(crate) struct AddedTokenJson {
    pub(crate) id: u32,
    pub(crate) content: String,
    #[serde(default)]
    pub(crate) single_word: bool,
    #[serde(default)]
    pub(crate) lstrip: bool,
    #[serde(default)]
    pub(crate) rstrip: bool,
    #[serde(default)]
    pub(crate) normalized: bool,
    #[serde(default)]
    pub(crate) special: bool,
}

/// The `model` object. Only `BPE` is implemented; the other fields are read so that the
/// error for another model names it.
#[derive(Deserialize)]
pub(crate) struct ModelJson {
    #[serde(default, rename = "type")]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) vocab: Option<Value>,
    #[serde(default)]
    pub(crate) merges: Option<Vec<MergeJson>>,
    #[serde(default)]
    pub(crate) unk_token: Option<String>,
    #[serde(default)]
    pub(crate) byte_fallback: bool,
    #[serde(default)]
    pub(crate) fuse_unk: bool,
    #[serde(default)]
    pub(crate) ignore_merges: bool,
    #[serde(default)]
    pub(crate) dropout: Option<f64>,
    #[serde(default)]
    pub(crate) continuing_subword_prefix: Option<String>,
    #[serde(default)]
    pub(crate) end_of_word_suffix: Option<String>,
}

/// A merge rule: `"left right"` (older files) or `["left", "right"]`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum MergeJson {
    Pair(String, String),
    Legacy(String),
}

pub(crate) fn bad(what: impl Into<String>, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::BadTokenizerJson {
        what: what.into(),
        reason: reason.into(),
    }
}

/// The `type` tag of a component object.
pub(crate) fn type_of<'v>(v: &'v Value, what: &str) -> Result<&'v str, TokenizerError> {
    v.get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(what, "an object with a \"type\" string"))
}

/// A boolean field with a default when absent (or null).
pub(crate) fn bool_field(
    v: &Value,
    key: &str,
    default: bool,
    what: &str,
) -> Result<bool, TokenizerError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(bad(
            format!("{what}.{key}"),
            format!("a boolean, not {other}"),
        )),
    }
}

/// A string field that must be present.
pub(crate) fn str_field<'v>(
    v: &'v Value,
    key: &str,
    what: &str,
) -> Result<&'v str, TokenizerError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{what}.{key}"), "a string"))
}

/// An unsigned field with a default when absent.
pub(crate) fn usize_field(
    v: &Value,
    key: &str,
    default: usize,
    what: &str,
) -> Result<usize, TokenizerError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                bad(
                    format!("{what}.{key}"),
                    format!("an unsigned integer, not {x}"),
                )
            }),
    }
}

/// The array under `key` (a `Sequence`'s members).
pub(crate) fn array_field<'v>(
    v: &'v Value,
    key: &str,
    what: &str,
) -> Result<&'v [Value], TokenizerError> {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| bad(format!("{what}.{key}"), "an array"))
}

/// A `pattern` object: `{"String": "…"}` or `{"Regex": "…"}`.
pub(crate) enum Pattern<'v> {
    Literal(&'v str),
    Regex(&'v str),
}

pub(crate) fn pattern_field<'v>(v: &'v Value, what: &str) -> Result<Pattern<'v>, TokenizerError> {
    let p = v
        .get("pattern")
        .ok_or_else(|| bad(format!("{what}.pattern"), "a pattern object"))?;
    if let Some(s) = p.get("String").and_then(Value::as_str) {
        Ok(Pattern::Literal(s))
    } else if let Some(s) = p.get("Regex").and_then(Value::as_str) {
        Ok(Pattern::Regex(s))
    } else {
        Err(bad(
            format!("{what}.pattern"),
            "{\"String\": …} or {\"Regex\": …}",
        ))
    }
}

/// `model.vocab` of a BPE model: token text → id.
pub(crate) fn bpe_vocab(v: Option<&Value>) -> Result<HashMap<&str, u32>, TokenizerError> {
    let map = v
        .and_then(Value::as_object)
        .ok_or_else(|| bad("model.vocab", "an object mapping token text to id"))?;
    let mut out = HashMap::with_capacity(map.len());
    for (text, id) in map {
        let id = id
            .as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| bad(format!("model.vocab[{text:?}]"), "a token id"))?;
        out.insert(text.as_str(), id);
    }
    Ok(out)
}
