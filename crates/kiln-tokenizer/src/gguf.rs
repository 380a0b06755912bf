//! The `tokenizer.ggml.*` keys of a GGUF file, read in place (nothing is copied before the
//! tokenizer copies the token texts into its own storage).

use std::borrow::Cow;

use kiln_format::{Array, Metadata, Value};

use crate::load::{SpecRef, build as build_spec};
use crate::{SpecialIds, Tokenizer, TokenizerError};

const SCORES: &str = "tokenizer.ggml.scores";

pub(crate) fn build(md: &Metadata) -> Result<Tokenizer, TokenizerError> {
    let id = |key: &str| md.opt_u32(key);
    let scores = match md.get(SCORES) {
        None => None,
        Some(Value::Array(Array::F32(v))) => Some(Cow::Borrowed(v.as_slice())),
        Some(Value::Array(Array::I32(v))) => {
            Some(Cow::Owned(v.iter().map(|&s| s as f32).collect()))
        }
        Some(v) => {
            return Err(TokenizerError::BadScores {
                key: SCORES,
                found: v.type_name(),
            });
        }
    };
    let model = md.str("tokenizer.ggml.model")?;
    // The deprecated names are read after (so over) the fim_* ones, as llama.cpp does.
    let fim =
        |new: &str, old: &str| -> Result<Option<u32>, TokenizerError> { Ok(id(old)?.or(id(new)?)) };
    build_spec(SpecRef {
        model,
        pre: md.opt_str("tokenizer.ggml.pre")?,
        tokens: md.str_array("tokenizer.ggml.tokens")?,
        scores,
        token_types: md.opt_i32_array("tokenizer.ggml.token_type")?,
        merges: if model == "gpt2" {
            md.opt_str_array("tokenizer.ggml.merges")?
        } else {
            None
        },
        ids: SpecialIds {
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            eot: id("tokenizer.ggml.eot_token_id")?,
            eom: id("tokenizer.ggml.eom_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            sep: id("tokenizer.ggml.seperator_token_id")?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            mask: id("tokenizer.ggml.mask_token_id")?,
            fim_pre: fim(
                "tokenizer.ggml.fim_pre_token_id",
                "tokenizer.ggml.prefix_token_id",
            )?,
            fim_suf: fim(
                "tokenizer.ggml.fim_suf_token_id",
                "tokenizer.ggml.suffix_token_id",
            )?,
            fim_mid: fim(
                "tokenizer.ggml.fim_mid_token_id",
                "tokenizer.ggml.middle_token_id",
            )?,
            fim_pad: id("tokenizer.ggml.fim_pad_token_id")?,
            fim_rep: id("tokenizer.ggml.fim_rep_token_id")?,
            fim_sep: id("tokenizer.ggml.fim_sep_token_id")?,
        },
        add_bos: md.opt_bool("tokenizer.ggml.add_bos_token")?,
        add_eos: md.opt_bool("tokenizer.ggml.add_eos_token")?,
        add_space_prefix: md.opt_bool("tokenizer.ggml.add_space_prefix")?,
        hf_kind: None,
    })
}
