//! The special-token names a Hugging Face model directory gives beside its tokenizer.json:
//! `tokenizer_config.json` (then `special_tokens_map.json` for what it leaves out), and
//! the end-of-sequence ids of `generation_config.json` and `config.json`, which a chat
//! model's generation stops at.

use std::path::Path;

use serde_json::Value;

use crate::TokenizerError;

/// Special tokens of a Hugging Face tokenizer, by text, plus extra end-of-generation ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HfTokenizerConfig {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    pub pad_token: Option<String>,
    /// `eos_token_id` of `generation_config.json` / `config.json` (one id or a list).
    pub eos_token_ids: Vec<u32>,
}

/// Files larger than this are not config files.
const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// Reads a JSON file of a model directory; `Ok(None)` when it does not exist.
pub(crate) fn read_json(dir: &Path, name: &str) -> Result<Option<Value>, TokenizerError> {
    let path = dir.join(name);
    let bytes = match read_bounded(&path, MAX_CONFIG_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(TokenizerError::Io { path, source }),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| TokenizerError::BadTokenizerJson {
            what: path.display().to_string(),
            reason: e.to_string(),
        })
}

/// Reads a whole file, refusing one larger than `max` bytes.
pub(crate) fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let len = std::fs::metadata(path)?.len();
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{len} bytes is more than the {max} Kiln reads"),
        ));
    }
    std::fs::read(path)
}

/// A special token as the config files write it: a string, or an object with `content`.
fn token_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .into_iter()
            .collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().and_then(|i| u32::try_from(i).ok()))
            .collect(),
        _ => Vec::new(),
    }
}

impl HfTokenizerConfig {
    /// Reads the config files of a model directory; absent files are skipped.
    pub fn from_dir(dir: &Path) -> Result<HfTokenizerConfig, TokenizerError> {
        let config = read_json(dir, "tokenizer_config.json")?;
        let map = read_json(dir, "special_tokens_map.json")?;
        let pick = |key: &str| {
            config
                .as_ref()
                .and_then(|c| c.get(key))
                .filter(|v| !v.is_null())
                .or_else(|| map.as_ref().and_then(|m| m.get(key)))
        };
        let mut out = HfTokenizerConfig {
            bos_token: token_text(pick("bos_token")),
            eos_token: token_text(pick("eos_token")),
            unk_token: token_text(pick("unk_token")),
            pad_token: token_text(pick("pad_token")),
            eos_token_ids: Vec::new(),
        };
        for name in ["generation_config.json", "config.json"] {
            if let Some(v) = read_json(dir, name)? {
                for id in ids(v.get("eos_token_id")) {
                    if !out.eos_token_ids.contains(&id) {
                        out.eos_token_ids.push(id);
                    }
                }
            }
        }
        Ok(out)
    }
}
