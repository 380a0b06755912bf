//! # kiln-tokenizer
//!
//! Turns text into token ids and back exactly as llama.cpp does (`llama_tokenize`,
//! `llama_token_to_piece`, `llama_detokenize`): GPT-2 byte-level BPE with the
//! pre-tokenizer the vocabulary names, and SentencePiece (score-ordered bigram merges with
//! byte fallback), both with llama.cpp's special-token partitioning, BOS/EOS rules and
//! end-of-generation set.
//!
//! **Owns:** vocabularies read from GGUF metadata ([`Tokenizer::from_gguf`]) or from any
//! other source ([`Tokenizer::from_vocab`]), encoding, decoding (whole and streamed), the
//! Unicode class tables the pre-tokenizers split by, and the export of a tokenizer.json
//! vocabulary as `tokenizer.ggml.*` metadata ([`gguf_metadata_from_hf_dir`], proved to
//! encode alike before it is returned).
//!
//! **Must never:** see weights or run a model, read files other than through
//! `kiln-format`'s metadata, panic on any input text or id, or silently fall back to
//! another tokenizer or pre-tokenizer when the vocabulary names one it does not know.
//!
//! ```no_run
//! let file = kiln_format::GgufFile::open("model.gguf")?;
//! let tok = kiln_tokenizer::Tokenizer::from_gguf(file.metadata())?;
//! let ids = tok.encode("<|im_start|>user\nHi<|im_end|>", true, true)?;
//! assert_eq!(tok.decode(&ids), "user\nHi");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bpe;
#[cfg(feature = "chat")]
pub mod chat;
mod decode;
mod error;
mod gguf;
mod hf;
mod index;
mod known_tokens;
mod load;
mod pretok;
mod special;
mod spm;
mod unicode;
mod unicode_data;

pub use decode::StreamDecoder;
pub use error::TokenizerError;
pub use hf::{EXPORT_PROBES, HfTokenizerConfig, gguf_metadata_from_hf_dir};
pub use pretok::PreTokenizer;

use std::path::Path;

use bpe::Bpe;
use index::{StrIndex, Strings};

/// A vocabulary and its settings, independent of the file format it came from. Absent
/// (`None`) settings take the defaults llama.cpp applies for the model type.
#[derive(Clone, Debug, Default)]
pub struct VocabSpec {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) or `"llama"` (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: the BPE pre-tokenizer; absent means `"default"`.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores` (SentencePiece merge priorities); absent means all 0.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type` (1 normal, 2 unknown, 3 control, 4 user-defined,
    /// 5 unused, 6 byte); absent means all normal.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges` (`"left right"`, by rank); required for BPE.
    pub merges: Option<Vec<String>>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`
    pub add_space_prefix: Option<bool>,
}

/// A vocabulary's fill-in-the-middle tokens ([`Tokenizer::fim`]): prefix, suffix and
/// middle (all three needed for infill), pad, and the repository-level ones (`rep` starts
/// the repository name, `sep` each file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FimTokens {
    pub pre: Option<u32>,
    pub suf: Option<u32>,
    pub mid: Option<u32>,
    pub pad: Option<u32>,
    pub rep: Option<u32>,
    pub sep: Option<u32>,
}

/// The tokenizer family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// SentencePiece-style (`tokenizer.ggml.model = llama`).
    Spm,
    /// GPT-2 byte-level BPE (`tokenizer.ggml.model = gpt2`) with its pre-tokenizer.
    Bpe(PreTokenizer),
}

/// Token attributes (llama.cpp's `llama_token_attr` bits that matter here).
pub(crate) mod attr {
    pub(crate) const UNKNOWN: u16 = 1 << 0;
    pub(crate) const UNUSED: u16 = 1 << 1;
    pub(crate) const NORMAL: u16 = 1 << 2;
    pub(crate) const CONTROL: u16 = 1 << 3;
    pub(crate) const USER_DEFINED: u16 = 1 << 4;
    pub(crate) const BYTE: u16 = 1 << 5;
}

/// The special token ids after llama.cpp's defaults and range checks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SpecialIds {
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) eot: Option<u32>,
    pub(crate) eom: Option<u32>,
    pub(crate) unk: Option<u32>,
    pub(crate) sep: Option<u32>,
    pub(crate) pad: Option<u32>,
    pub(crate) mask: Option<u32>,
    pub(crate) fim_pre: Option<u32>,
    pub(crate) fim_suf: Option<u32>,
    pub(crate) fim_mid: Option<u32>,
    pub(crate) fim_pad: Option<u32>,
    pub(crate) fim_rep: Option<u32>,
    pub(crate) fim_sep: Option<u32>,
}

/// A loaded vocabulary: encodes and decodes text. Cheap to share across threads.
pub struct Tokenizer {
    pub(crate) kind: VocabKind,
    pub(crate) bpe: Option<Bpe>,
    pub(crate) texts: Strings,
    pub(crate) scores: Vec<f32>,
    pub(crate) attrs: Vec<u16>,
    pub(crate) index: StrIndex,
    pub(crate) specials: special::Specials,
    /// Every token's piece as `token_to_piece(special = true)` renders it, back to back.
    pub(crate) pieces: Vec<u8>,
    /// `pieces[piece_ends[i - 1]..piece_ends[i]]` is token `i`'s piece.
    pub(crate) piece_ends: Vec<u32>,
    pub(crate) ids: SpecialIds,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_space_prefix: bool,
    pub(crate) clean_spaces: bool,
    /// Sorted.
    pub(crate) eog: Vec<u32>,
    /// SentencePiece byte fallback: the token for each byte.
    pub(crate) byte_tokens: Box<[Option<u32>; 256]>,
    pub(crate) warnings: Vec<String>,
    /// The leading-space rule of decoding.
    pub(crate) first_piece: decode::FirstPiece,
    /// The encoding pipeline of a tokenizer.json (GGUF vocabularies have none).
    pub(crate) hf: Option<Box<hf::Encoder>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("vocab_size", &self.texts.len())
            .field("bos", &self.ids.bos)
            .field("eos", &self.ids.eos)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("add_space_prefix", &self.add_space_prefix)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Reads the `tokenizer.ggml.*` keys of a GGUF file.
    pub fn from_gguf(md: &kiln_format::Metadata) -> Result<Tokenizer, TokenizerError> {
        gguf::build(md)
    }

    /// Builds a tokenizer from a vocabulary in any format.
    pub fn from_vocab(spec: VocabSpec) -> Result<Tokenizer, TokenizerError> {
        load::build(load::SpecRef::of(&spec))
    }

    /// Reads a Hugging Face `tokenizer.json` (its bytes), encoding as the `tokenizers`
    /// library does. Without the directory's config files the BOS token is the one the
    /// post-processor adds, and the end-of-generation set is found by token text (see
    /// [`Tokenizer::from_hf_dir`] for the full picture).
    pub fn from_tokenizer_json(json: &[u8]) -> Result<Tokenizer, TokenizerError> {
        hf::from_json(json, &HfTokenizerConfig::default())
    }

    /// [`Tokenizer::from_tokenizer_json`] with the special tokens of the config files.
    pub fn from_tokenizer_json_with(
        json: &[u8],
        config: &HfTokenizerConfig,
    ) -> Result<Tokenizer, TokenizerError> {
        hf::from_json(json, config)
    }

    /// Reads a `tokenizer.json` file.
    pub fn from_tokenizer_json_file(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let bytes = read_tokenizer_json(path)?;
        hf::from_json(&bytes, &HfTokenizerConfig::default())
    }

    /// A Hugging Face model directory: `tokenizer.json`, with the special tokens of
    /// `tokenizer_config.json` (or `special_tokens_map.json`) and the end-of-sequence ids
    /// of `generation_config.json` / `config.json` added to the end-of-generation set.
    pub fn from_hf_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
        let config = HfTokenizerConfig::from_dir(dir)?;
        let bytes = read_tokenizer_json(&dir.join("tokenizer.json"))?;
        hf::from_json(&bytes, &config)
    }

    /// `llama_tokenize(text, add_special, parse_special)`: adds BOS/EOS when
    /// `add_special` and the vocabulary asks for them; matches special tokens written in
    /// the text when `parse_special` (user-defined tokens are always matched).
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        if let Some(hf) = &self.hf {
            return Ok(hf.encode(self, text, add_special, parse_special));
        }
        let fragments = self.specials.partition(self, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.ids.bos);
        }
        match self.kind {
            VocabKind::Spm => {
                let mut prev_special = true;
                for f in fragments {
                    match f {
                        special::Fragment::Text(range) => {
                            let raw = text.get(range).unwrap_or_default();
                            let mut escaped = String::with_capacity(raw.len() + 3);
                            if self.add_space_prefix && prev_special {
                                escaped.push('\u{2581}');
                            }
                            for c in raw.chars() {
                                escaped.push(if c == ' ' { '\u{2581}' } else { c });
                            }
                            spm::encode(self, &escaped, &mut out)?;
                            prev_special = false;
                        }
                        special::Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            VocabKind::Bpe(_) => {
                let Some(bpe) = &self.bpe else {
                    return Ok(out);
                };
                for f in fragments {
                    match f {
                        special::Fragment::Text(range) => {
                            bpe.encode(self, text.get(range).unwrap_or_default(), &mut out);
                        }
                        special::Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.ids.eos);
        }
        Ok(out)
    }

    /// The raw bytes of a token's piece as `llama_token_to_piece(special = true)` renders
    /// it: byte-level BPE mapped back to bytes, `▁` as a space, `<0xXX>` as the byte,
    /// special tokens as their text. Empty for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        let (Some(&end), start) = (
            self.piece_ends.get(i),
            i.checked_sub(1)
                .and_then(|p| self.piece_ends.get(p))
                .copied()
                .unwrap_or(0),
        ) else {
            return &[];
        };
        self.pieces
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }

    /// The text of `ids` as llama.cpp's `common_detokenize(ids, special = false)` without
    /// its space clean-up (which none of the `smollm`, `qwen2` or SentencePiece
    /// vocabularies use): control tokens render as nothing, and a SentencePiece
    /// vocabulary with `add_space_prefix` drops the first token's leading space. Bytes
    /// that do not form UTF-8 become U+FFFD, only here at the end.
    ///
    /// A tokenizer.json vocabulary decodes as its decoder does with
    /// `skip_special_tokens`: special tokens render as nothing, and the first leading
    /// space the decoder strips is that of the first rendered token.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        let mut first = true;
        for &id in ids {
            decode::push_piece(self, id, &mut first, &mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Exactly `llama_detokenize(ids, remove_special, unparse_special)`, including the
    /// vocabulary's `clean_up_tokenization_spaces` rules.
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> String {
        decode::detokenize(self, ids, remove_special, unparse_special)
    }

    /// An incremental decoder over this vocabulary; see [`StreamDecoder`].
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    pub fn kind(&self) -> VocabKind {
        self.kind
    }

    pub fn bos(&self) -> Option<u32> {
        self.ids.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.ids.eos
    }

    /// End of turn (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>`, …), from the file or
    /// found by its text.
    pub fn eot(&self) -> Option<u32> {
        self.ids.eot
    }

    pub fn pad(&self) -> Option<u32> {
        self.ids.pad
    }

    pub fn unk(&self) -> Option<u32> {
        self.ids.unk
    }

    /// The fill-in-the-middle tokens: from the file's `tokenizer.ggml.fim_*_token_id`, or
    /// found by their text (`<|fim_prefix|>`, `<fim_prefix>`, …) as llama.cpp does.
    pub fn fim(&self) -> FimTokens {
        FimTokens {
            pre: self.ids.fim_pre,
            suf: self.ids.fim_suf,
            mid: self.ids.fim_mid,
            pad: self.ids.fim_pad,
            rep: self.ids.fim_rep,
            sep: self.ids.fim_sep,
        }
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether SentencePiece encoding prefixes a space to text that follows BOS or a
    /// special token.
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// End of generation: EOS, EOT, EOM and the tokens llama.cpp recognises by their text
    /// (`<|im_end|>`, `<end_of_turn>`, `<|endoftext|>`, the FIM pad/repo/file-separator
    /// tokens, …).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// A control token (rendered as nothing by [`Tokenizer::decode`]).
    pub fn is_control(&self, id: u32) -> bool {
        self.attr(id) & attr::CONTROL != 0
    }

    /// The vocabulary string as stored (empty for an id outside the vocabulary).
    pub fn token_text(&self, id: u32) -> &str {
        self.texts.str(id)
    }

    /// The id whose vocabulary string is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.index.get(&self.texts, text)
    }

    /// Things llama.cpp would log while loading this vocabulary (ids out of range, a
    /// missing pre-tokenizer name, …).
    pub fn load_warnings(&self) -> &[String] {
        &self.warnings
    }

    pub(crate) fn attr(&self, id: u32) -> u16 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }
}

/// Reads a tokenizer.json file, bounded in size.
fn read_tokenizer_json(path: &Path) -> Result<Vec<u8>, TokenizerError> {
    hf::config::read_bounded(path, 512 << 20).map_err(|source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    })
}

// The tokenizer is shared by reference between threads (server workers, the CLI).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
};
