//! A Hugging Face tokenizer directory as the `tokenizer.ggml.*` keys llama.cpp's
//! `convert_hf_to_gguf.py` writes, so that a GGUF made from a checkpoint carries its
//! vocabulary (read back by [`crate::Tokenizer::from_gguf`] and by llama.cpp).
//!
//! - `tokenizer.ggml.model`: `gpt2` for byte-level BPE (with `tokenizer.ggml.merges`),
//!   `llama` for SentencePiece-style BPE with byte fallback (with `tokenizer.ggml.scores`).
//! - `tokenizer.ggml.pre` (byte-level only): llama.cpp names it by hashing the tokens of a
//!   probe text; Kiln names it by the pre-tokenizer stages of tokenizer.json instead — the
//!   Qwen 2 split regex → `qwen2`, the Llama 3 one → `llama-bpe`, per-digit splitting before
//!   the GPT-2 regex → `smollm`, the GPT-2 regex alone → `gpt-2` — and then proves the name
//!   by encoding a probe set both ways (see below).
//! - Scores (SentencePiece): a token made by merge rule `r` scores `-r`, so that llama.cpp's
//!   highest-score-first bigram merging follows the merge ranks; tokens no rule makes score
//!   `-1e9` (the `tokenizer.model` scores of such BPE models follow the same order).
//! - Token types: normal 1, unknown 2 (the `unk` token of a SentencePiece vocabulary),
//!   control 3 (special added tokens), user-defined 4 (other added tokens), unused 5 (ids
//!   without a token, and `[PAD{i}]` rows padded up to the embedding), byte 6 (`<0xXX>`).
//! - Special ids, `add_bos_token` / `add_eos_token` (the post-processor's tokens),
//!   `add_space_prefix` (a `Prepend("▁")` normalizer), `tokenizer.chat_template`
//!   (tokenizer_config.json's `chat_template`, or `chat_template.jinja`).
//!
//! Not carried: normalizers other than SentencePiece's prepend/replace of `▁` (Qwen 2's
//! NFC, for one): llama.cpp applies none, so the GGUF encodes text already in that normal
//! form as the tokenizer.json does, and other text as llama.cpp does. With special parsing,
//! the GGUF loaders also treat tokens they recognise by text (`</s>`, `<|endoftext|>`, …) as
//! control tokens, as llama.cpp does.
//!
//! The result is checked before it is returned: the GGUF-metadata tokenizer must give the
//! same ids as the tokenizer.json one on [`PROBES`], else [`TokenizerError::ExportMismatch`].

use std::collections::HashMap;
use std::path::Path;

use kiln_format::{Metadata, Value as GgufValue};
use serde_json::Value;

use super::config::read_json;
use super::json::{MergeJson, TokenizerJson, bad};
use crate::{PreTokenizer, Tokenizer, TokenizerError, VocabKind, attr};

/// Texts both tokenizers must encode alike for an export to be accepted: words, digits,
/// punctuation runs, whitespace runs, newlines, accents, CJK, emoji, contractions.
pub const PROBES: &[&str] = &[
    "The capital of France is",
    "Hello world! How are you doing today?",
    " leading space and  two spaces   three",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 1,000,000",
    "line one\nline two\n\n\ttabbed\r\nwindows",
    "I'm sure they'll say it's fine; we've DON'T",
    "naïve café façade Führer ½ Ωμέγα",
    "日本語のテキストと中文文本",
    "emoji 🎉🚀 and symbols <>{}[]()#$%^&*~`|\\",
    "def f(x):\n    return x ** 2  # square",
    "",
    " ",
    "a",
];

/// The `tokenizer.ggml.*` metadata of the tokenizer in `dir` (`tokenizer.json` plus
/// `tokenizer_config.json` / `special_tokens_map.json` / `chat_template.jinja`), with the
/// vocabulary padded by unused `[PAD{i}]` tokens up to `n_vocab` rows when that is more.
pub fn gguf_metadata_from_hf_dir(
    dir: &Path,
    n_vocab: Option<usize>,
) -> Result<Metadata, TokenizerError> {
    let hf = Tokenizer::from_hf_dir(dir)?;
    let json_path = dir.join("tokenizer.json");
    let bytes = super::config::read_bounded(&json_path, super::MAX_JSON_BYTES as u64).map_err(
        |source| TokenizerError::Io {
            path: json_path.clone(),
            source,
        },
    )?;
    let file: TokenizerJson =
        serde_json::from_slice(&bytes).map_err(|e| bad("tokenizer.json", e.to_string()))?;
    let config = read_json(dir, "tokenizer_config.json")?;

    let mut md = Metadata::new();
    let n = hf.vocab_size().max(n_vocab.unwrap_or(0));
    let mut tokens: Vec<String> = hf.texts.iter().map(str::to_owned).collect();
    let mut types: Vec<i32> = (0..hf.vocab_size())
        .map(|id| token_type(hf.attr(id as u32)))
        .collect();
    for i in tokens.len()..n {
        tokens.push(format!("[PAD{i}]"));
        types.push(5);
    }
    let merges = merge_pairs(&file)?;
    match hf.kind() {
        VocabKind::Bpe(pre) => {
            md.set("tokenizer.ggml.model", "gpt2");
            md.set("tokenizer.ggml.pre", pre_name(pre));
            let list: Vec<String> = merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
            md.set("tokenizer.ggml.merges", GgufValue::from(list));
        }
        VocabKind::Spm => {
            md.set("tokenizer.ggml.model", "llama");
            md.set("tokenizer.ggml.pre", "default");
            let mut rank: HashMap<String, usize> = HashMap::new();
            for (r, (a, b)) in merges.iter().enumerate() {
                rank.entry(format!("{a}{b}")).or_insert(r);
            }
            let scores: Vec<f32> = tokens
                .iter()
                .map(|t| rank.get(t).map_or(-1e9, |&r| -(r as f32)))
                .collect();
            if let Some(unk) = hf.unk()
                && let Some(t) = types.get_mut(unk as usize)
            {
                *t = 2;
            }
            md.set("tokenizer.ggml.scores", GgufValue::from(scores));
            md.set(
                "tokenizer.ggml.add_space_prefix",
                prepends_space(file.normalizer.as_ref()),
            );
        }
    }
    md.set("tokenizer.ggml.tokens", GgufValue::from(tokens));
    md.set("tokenizer.ggml.token_type", GgufValue::from(types));
    let ids = [
        ("tokenizer.ggml.bos_token_id", hf.bos()),
        ("tokenizer.ggml.eos_token_id", hf.eos()),
        ("tokenizer.ggml.unknown_token_id", hf.unk()),
        ("tokenizer.ggml.padding_token_id", hf.pad()),
    ];
    for (key, id) in ids {
        if let Some(id) = id {
            md.set(key, id);
        }
    }
    md.set("tokenizer.ggml.add_bos_token", hf.add_bos());
    md.set("tokenizer.ggml.add_eos_token", hf.add_eos());
    if let Some(t) = chat_template(dir, config.as_ref())? {
        md.set("tokenizer.chat_template", t);
    }

    let back = Tokenizer::from_gguf(&md)?;
    for text in PROBES {
        for parse_special in [false, true] {
            let a = hf.encode(text, true, parse_special)?;
            let b = back.encode(text, true, parse_special)?;
            if a != b {
                return Err(TokenizerError::ExportMismatch {
                    text: (*text).to_owned(),
                    tokenizer_json: a,
                    gguf: b,
                });
            }
        }
    }
    Ok(md)
}

/// GGUF token type of a token's attributes.
fn token_type(a: u16) -> i32 {
    if a & attr::BYTE != 0 {
        6
    } else if a & attr::CONTROL != 0 {
        3
    } else if a & attr::USER_DEFINED != 0 {
        4
    } else if a & attr::UNKNOWN != 0 {
        2
    } else if a & attr::UNUSED != 0 {
        5
    } else {
        1
    }
}

/// The `tokenizer.ggml.pre` name of a byte-level pre-tokenizer family.
fn pre_name(p: PreTokenizer) -> &'static str {
    match p {
        PreTokenizer::Qwen2 => "qwen2",
        PreTokenizer::Llama3 => "llama-bpe",
        PreTokenizer::Smollm => "smollm",
        PreTokenizer::Gpt2 => "gpt-2",
        PreTokenizer::Default => "default",
    }
}

/// The merge rules in rank order.
fn merge_pairs(file: &TokenizerJson) -> Result<Vec<(String, String)>, TokenizerError> {
    let Some(list) = &file.model.merges else {
        return Ok(Vec::new());
    };
    list.iter()
        .enumerate()
        .map(|(rank, m)| match m {
            MergeJson::Pair(a, b) => Ok((a.clone(), b.clone())),
            MergeJson::Legacy(s) => match s.split_once(' ') {
                Some((a, b)) if !b.contains(' ') => Ok((a.to_owned(), b.to_owned())),
                _ => Err(TokenizerError::BadMerge {
                    index: rank,
                    merge: s.clone(),
                }),
            },
        })
        .collect()
}

/// Whether the normalizer prepends `▁` (SentencePiece's dummy prefix).
fn prepends_space(normalizer: Option<&Value>) -> bool {
    let Some(n) = normalizer else {
        return false;
    };
    match n.get("type").and_then(Value::as_str) {
        Some("Prepend") => n.get("prepend").and_then(Value::as_str) == Some("\u{2581}"),
        Some("Sequence") => n
            .get("normalizers")
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(|x| prepends_space(Some(x)))),
        _ => false,
    }
}

/// `chat_template` of tokenizer_config.json (a string, or the `default` of a named list),
/// else the text of `chat_template.jinja`.
fn chat_template(dir: &Path, config: Option<&Value>) -> Result<Option<String>, TokenizerError> {
    match config.and_then(|c| c.get("chat_template")) {
        Some(Value::String(s)) => return Ok(Some(s.clone())),
        Some(Value::Array(list)) => {
            let default = list.iter().find_map(|t| {
                (t.get("name").and_then(Value::as_str) == Some("default"))
                    .then(|| t.get("template").and_then(Value::as_str))
                    .flatten()
            });
            if let Some(t) = default {
                return Ok(Some(t.to_owned()));
            }
        }
        _ => {}
    }
    let path = dir.join("chat_template.jinja");
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TokenizerError::Io { path, source }),
    }
}
