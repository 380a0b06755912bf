//! Hugging Face `tokenizer.json` files, encoded exactly as the `tokenizers` library
//! encodes them: added tokens cut out first, each remaining stretch normalized and
//! pre-tokenized, every piece run through the BPE model, and the post-processor's special
//! tokens put around the result. Byte-level BPE (GPT-2, Llama 3, Qwen 2, SmolLM) and
//! SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma, TinyStories) are
//! supported; other models and components are refused by name.
//!
//! The vocabulary itself becomes an ordinary [`Tokenizer`] (ids, token texts, attributes,
//! the end-of-generation set found the same way as for GGUF files), so decoding, streaming
//! and `is_eog` work alike for both formats.

mod added;
mod bpe;
pub(crate) mod config;
mod decoder;
mod export;
mod json;
mod normalizer;
mod pretok;

use std::borrow::Cow;

use crate::load::{SpecRef, build};
use crate::unicode::char_to_byte;
use crate::{SpecialIds, Tokenizer, TokenizerError, VocabKind, attr};

pub use config::HfTokenizerConfig;
pub use export::{PROBES as EXPORT_PROBES, gguf_metadata_from_hf_dir};

use added::{AddedVocab, Split};
use bpe::HfBpe;
use decoder::{decoder_from_json, post_from_json};
use json::{TokenizerJson, bad, bpe_vocab};
use normalizer::Normalizer;
use pretok::{Piece, Stage};

/// Refuse files larger than this before parsing (the largest real ones are ~35 MB).
const MAX_JSON_BYTES: usize = 512 << 20;

/// The encoding pipeline of a tokenizer.json; the vocabulary lives in the [`Tokenizer`].
pub(crate) struct Encoder {
    normalizer: Option<Normalizer>,
    added: AddedVocab,
    stages: Vec<Stage>,
    bpe: HfBpe,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
}

impl Encoder {
    pub(crate) fn encode(
        &self,
        tok: &Tokenizer,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special {
            out.extend_from_slice(&self.prefix);
        }
        let mut pieces = Vec::new();
        for split in self
            .added
            .split(text, self.normalizer.as_ref(), parse_special)
        {
            match split {
                Split::Token(id) => out.push(id),
                Split::Text { text, at_start } => {
                    pieces.clear();
                    pieces.push(Piece { text, at_start });
                    pretok::run(&self.stages, &mut pieces);
                    for p in &pieces {
                        self.bpe.encode(tok, &p.text, &mut out);
                    }
                }
            }
        }
        if add_special {
            out.extend_from_slice(&self.suffix);
        }
        out
    }
}

/// Builds a tokenizer from the bytes of a tokenizer.json and the special-token names of
/// its directory's config files.
pub(crate) fn from_json(json: &[u8], cfg: &HfTokenizerConfig) -> Result<Tokenizer, TokenizerError> {
    if json.len() > MAX_JSON_BYTES {
        return Err(bad(
            "tokenizer.json",
            format!(
                "{} bytes is more than the {MAX_JSON_BYTES} Kiln reads",
                json.len()
            ),
        ));
    }
    let file: TokenizerJson =
        serde_json::from_slice(json).map_err(|e| bad("tokenizer.json", e.to_string()))?;
    let model_type = file.model.kind.as_deref().unwrap_or("BPE");
    if model_type != "BPE" {
        return Err(TokenizerError::UnsupportedTokenizerJson {
            component: "model",
            found: model_type.to_owned(),
            supported: "BPE",
        });
    }
    let decoder = decoder_from_json(file.decoder.as_ref())?;
    let post = post_from_json(file.post_processor.as_ref())?;
    let normalizer = file
        .normalizer
        .as_ref()
        .filter(|v| !v.is_null())
        .map(Normalizer::from_json)
        .transpose()?;
    let mut stages = Vec::new();
    if let Some(p) = file.pre_tokenizer.as_ref().filter(|v| !v.is_null()) {
        pretok::stages_from_json(p, &mut stages)?;
    }

    // The vocabulary: the model's tokens and the added ones, by id.
    let vocab = bpe_vocab(file.model.vocab.as_ref())?;
    let max_id = vocab
        .values()
        .copied()
        .chain(file.added_tokens.iter().map(|t| t.id))
        .max()
        .ok_or(TokenizerError::EmptyVocabulary)?;
    let n = usize::try_from(max_id)
        .ok()
        .and_then(|m| m.checked_add(1))
        .ok_or(TokenizerError::TooManyTokens {
            count: usize::MAX,
            max: u32::MAX,
        })?;
    if n > vocab.len() + file.added_tokens.len() {
        // Gaps are allowed, but not a sparse id space that would allocate wildly.
        let filled = vocab.len() + file.added_tokens.len();
        if n > filled.saturating_mul(2).max(1024) {
            return Err(bad(
                "model.vocab",
                format!("ids reach {max_id} for {filled} tokens"),
            ));
        }
    }
    let mut tokens: Vec<Option<String>> = vec![None; n];
    let mut types = vec![5i32; n]; // unused until filled
    let mut in_model = vec![false; n];
    for (&text, &id) in &vocab {
        let i = id as usize;
        if let Some(prev) = &tokens[i] {
            return Err(bad(
                "model.vocab",
                format!("id {id} is both {prev:?} and {text:?}"),
            ));
        }
        tokens[i] = Some(text.to_owned());
        in_model[i] = true;
        types[i] = if decoder.byte_fallback && is_byte_token(text) {
            6
        } else {
            1
        };
    }
    for t in &file.added_tokens {
        let i = t.id as usize;
        match &tokens[i] {
            Some(prev) if *prev != t.content => {
                return Err(bad(
                    format!("added_tokens (id {})", t.id),
                    format!(
                        "{:?}, but the model's token {} is {prev:?}",
                        t.content, t.id
                    ),
                ));
            }
            _ => tokens[i] = Some(t.content.clone()),
        }
        types[i] = if t.special { 3 } else { 4 };
    }
    let mut warnings = Vec::new();
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.unwrap_or_else(|| {
                warnings.push(format!("no token has id {i}"));
                format!("<kiln:missing:{i}>")
            })
        })
        .collect();

    let find = |name: &Option<String>, key: &str, warnings: &mut Vec<String>| -> Option<u32> {
        let name = name.as_deref()?;
        let id = tokens.iter().position(|t| t == name);
        if id.is_none() {
            warnings.push(format!("{key} {name:?} is not in the vocabulary"));
        }
        id.and_then(|i| u32::try_from(i).ok())
    };
    let mut ids = SpecialIds {
        bos: find(&cfg.bos_token, "bos_token", &mut warnings),
        eos: find(&cfg.eos_token, "eos_token", &mut warnings),
        unk: find(&cfg.unk_token, "unk_token", &mut warnings)
            .or_else(|| find(&file.model.unk_token, "model.unk_token", &mut warnings)),
        pad: find(&cfg.pad_token, "pad_token", &mut warnings),
        ..SpecialIds::default()
    };
    // Without a config, the post-processor's leading token is the BOS.
    if ids.bos.is_none() && cfg.bos_token.is_none() {
        ids.bos = post.prefix.first().copied();
    }
    let add_bos = ids.bos.is_some() && post.prefix.first().copied() == ids.bos;
    let add_eos = ids.eos.is_some() && post.suffix.last().copied() == ids.eos;

    let kind = if decoder.byte_level {
        VocabKind::Bpe(family(&stages))
    } else {
        VocabKind::Spm
    };
    let mut tok = build(SpecRef {
        model: "",
        pre: None,
        tokens: &tokens,
        scores: None,
        token_types: Some(&types),
        merges: None,
        ids,
        add_bos: Some(add_bos),
        add_eos: Some(add_eos),
        add_space_prefix: Some(false),
        hf_kind: Some(kind),
    })?;
    for &id in &cfg.eos_token_ids {
        if (id as usize) < tok.texts.len() && !tok.eog.contains(&id) {
            tok.eog.push(id);
        }
    }
    tok.eog.sort_unstable();
    tok.warnings.extend(warnings);
    if decoder.byte_level {
        rebuild_byte_level_pieces(&mut tok);
    }
    tok.first_piece = decoder.first;

    let bpe = HfBpe::new(&file.model, &tok.texts, &tok.index, in_model)?;
    let added = AddedVocab::new(file.added_tokens, normalizer.as_ref());
    tok.hf = Some(Box::new(Encoder {
        normalizer,
        added,
        stages,
        bpe,
        prefix: post.prefix,
        suffix: post.suffix,
    }));
    Ok(tok)
}

fn is_byte_token(t: &str) -> bool {
    t.len() == 6
        && t.starts_with("<0x")
        && t.ends_with('>')
        && t.get(3..5)
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The GGUF pre-tokenizer family a byte-level pipeline corresponds to (informational:
/// encoding runs the tokenizer.json stages themselves).
fn family(stages: &[Stage]) -> crate::PreTokenizer {
    use crate::PreTokenizer as P;
    use crate::pretok::Regex;
    let mut digits = false;
    for s in stages {
        match s {
            Stage::Digits { individual: true } => digits = true,
            Stage::Regex(Regex::Llama3) => return P::Llama3,
            Stage::Regex(Regex::Qwen2) => return P::Qwen2,
            _ => {}
        }
    }
    if digits { P::Smollm } else { P::Gpt2 }
}

/// `tokenizers`' ByteLevel decoder: a token whose every character is in the byte alphabet
/// decodes to those bytes; any other token to its own text.
fn rebuild_byte_level_pieces(tok: &mut Tokenizer) {
    let mut pieces = Vec::with_capacity(tok.pieces.len());
    let mut ends = Vec::with_capacity(tok.piece_ends.len());
    for (id, text) in tok.texts.iter().enumerate() {
        let a = tok.attrs.get(id).copied().unwrap_or(0);
        if a & attr::NORMAL != 0 {
            let bytes: Option<Vec<u8>> = text.chars().map(char_to_byte).collect();
            let bytes = bytes.map_or(Cow::Borrowed(text.as_bytes()), Cow::Owned);
            pieces.extend_from_slice(&bytes);
        } else if a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
            pieces.extend_from_slice(text.as_bytes());
        }
        ends.push(u32::try_from(pieces.len()).unwrap_or(u32::MAX));
    }
    tok.pieces = pieces;
    tok.piece_ends = ends;
}
