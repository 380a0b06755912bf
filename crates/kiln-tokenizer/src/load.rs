//! Building a [`Tokenizer`] from a [`VocabSpec`], step for step as llama.cpp's
//! `llama_vocab::impl::load`: model-type defaults, token attributes, merges, special ids
//! with their range checks, BOS/EOS flags, the tokens recognised by their text (EOT, FIM,
//! end of generation), the special-token order and the piece cache.

use std::borrow::Cow;

use crate::bpe::Bpe;
use crate::decode::{FirstPiece, render};
use crate::index::{StrIndex, Strings};
use crate::known_tokens::{
    EOG_TEXTS, EOM_TEXTS, EOT_TEXTS, FIM_MID_TEXTS, FIM_PAD_TEXTS, FIM_PRE_TEXTS, FIM_REP_TEXTS,
    FIM_SEP_TEXTS, FIM_SUF_TEXTS,
};
use crate::pretok::PreConfig;
use crate::special::Specials;
use crate::{SpecialIds, Tokenizer, TokenizerError, VocabKind, VocabSpec, attr};

/// A vocabulary borrowed from wherever it lives (a [`VocabSpec`], or GGUF metadata
/// directly, so the 262k strings of a large vocabulary are copied once, into the
/// tokenizer's own storage).
pub(crate) struct SpecRef<'a> {
    pub(crate) model: &'a str,
    pub(crate) pre: Option<&'a str>,
    pub(crate) tokens: &'a [String],
    pub(crate) scores: Option<Cow<'a, [f32]>>,
    pub(crate) token_types: Option<&'a [i32]>,
    pub(crate) merges: Option<&'a [String]>,
    pub(crate) ids: SpecialIds,
    pub(crate) add_bos: Option<bool>,
    pub(crate) add_eos: Option<bool>,
    pub(crate) add_space_prefix: Option<bool>,
    /// Set for a tokenizer.json: the family is given, llama.cpp's model-type defaults
    /// (BOS/EOS/UNK ids, BOS added, space prefix) do not apply, and no llama.cpp BPE is
    /// built (the tokenizer.json pipeline encodes).
    pub(crate) hf_kind: Option<VocabKind>,
}

impl<'a> SpecRef<'a> {
    pub(crate) fn of(spec: &'a VocabSpec) -> SpecRef<'a> {
        SpecRef {
            model: &spec.model,
            pre: spec.pre.as_deref(),
            tokens: &spec.tokens,
            scores: spec.scores.as_deref().map(Cow::Borrowed),
            token_types: spec.token_types.as_deref(),
            merges: spec.merges.as_deref(),
            ids: SpecialIds {
                bos: spec.bos,
                eos: spec.eos,
                eot: spec.eot,
                eom: spec.eom,
                unk: spec.unk,
                sep: spec.sep,
                pad: spec.pad,
                mask: spec.mask,
                fim_pre: spec.fim_pre,
                fim_suf: spec.fim_suf,
                fim_mid: spec.fim_mid,
                fim_pad: spec.fim_pad,
                fim_rep: spec.fim_rep,
                fim_sep: spec.fim_sep,
            },
            add_bos: spec.add_bos,
            add_eos: spec.add_eos,
            add_space_prefix: spec.add_space_prefix,
            hf_kind: None,
        }
    }
}

const SUPPORTED_MODELS: &str = "llama (SentencePiece), gpt2 (byte-level BPE)";

/// llama.cpp's `llama_token_type` → attribute.
fn attr_of_type(t: i32) -> u16 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0, // undefined
    }
}

pub(crate) fn build(spec: SpecRef<'_>) -> Result<Tokenizer, TokenizerError> {
    let mut warnings = Vec::new();
    let n = spec.tokens.len();
    if n == 0 {
        return Err(TokenizerError::EmptyVocabulary);
    }
    let n32 = u32::try_from(n).map_err(|_| TokenizerError::TooManyTokens {
        count: n,
        max: u32::MAX,
    })?;

    // Model type and its defaults.
    let (kind, pre, mut ids) = match (spec.hf_kind, spec.model) {
        (Some(kind), _) => (kind, None, SpecialIds::default()),
        (None, model) => match model {
            "llama" => (
                VocabKind::Spm,
                None,
                SpecialIds {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                    ..SpecialIds::default()
                },
            ),
            "gpt2" => {
                if spec.pre.is_none() {
                    warnings.push("missing pre-tokenizer type, using 'default'".to_owned());
                }
                let pre = PreConfig::from_name(spec.pre)?;
                (
                    VocabKind::Bpe(pre.kind),
                    Some(pre),
                    SpecialIds {
                        bos: Some(11),
                        eos: Some(11),
                        ..SpecialIds::default()
                    },
                )
            }
            other => {
                return Err(TokenizerError::UnsupportedModel {
                    model: other.to_owned(),
                    supported: SUPPORTED_MODELS.to_owned(),
                });
            }
        },
    };
    let (mut add_bos, mut add_eos, mut add_space_prefix, clean_spaces) = match pre {
        _ if spec.hf_kind.is_some() => (false, false, false, false),
        Some(p) => (p.add_bos, false, false, p.clean_spaces),
        None => (true, false, true, false),
    };
    if let Some(v) = spec.add_space_prefix {
        add_space_prefix = v;
    }

    // Tokens, scores and attributes.
    let scores = match spec.scores {
        Some(s) if s.len() < n => {
            return Err(TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.scores",
                expected: n,
                found: s.len(),
            });
        }
        Some(s) => s[..n].to_vec(),
        None => vec![0.0; n],
    };
    let mut attrs: Vec<u16> = match spec.token_types {
        Some(t) if t.len() < n => {
            return Err(TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.token_type",
                expected: n,
                found: t.len(),
            });
        }
        Some(t) => t.iter().take(n).map(|&t| attr_of_type(t)).collect(),
        None => vec![attr::NORMAL; n],
    };
    let mut texts = Strings::with_capacity(n, spec.tokens.iter().map(String::len).sum());
    for (i, t) in spec.tokens.iter().enumerate() {
        if t.is_empty() {
            warnings.push(format!("empty token at index {i}"));
            texts.push(&format!("[EMPTY_{i}]"));
        } else {
            texts.push(t);
        }
    }
    let mut index = StrIndex::with_capacity(n);
    for id in 0..n32 {
        if let Err(first) = index.insert(&texts, id) {
            return Err(TokenizerError::DuplicateToken {
                text: texts.str(id).to_owned(),
                first,
                second: id,
            });
        }
    }

    let bpe = match pre {
        Some(pre) => {
            let merges = spec.merges.ok_or(TokenizerError::MissingMerges {
                key: "tokenizer.ggml.merges",
            })?;
            Some(Bpe::new(&texts, &index, merges, pre)?)
        }
        None => None,
    };

    // Special ids: a default outside the vocabulary is dropped; a given id outside it is
    // ignored in favour of the default.
    let given = [
        ("tokenizer.ggml.bos_token_id", &mut ids.bos, spec.ids.bos),
        ("tokenizer.ggml.eos_token_id", &mut ids.eos, spec.ids.eos),
        ("tokenizer.ggml.eot_token_id", &mut ids.eot, spec.ids.eot),
        ("tokenizer.ggml.eom_token_id", &mut ids.eom, spec.ids.eom),
        (
            "tokenizer.ggml.unknown_token_id",
            &mut ids.unk,
            spec.ids.unk,
        ),
        (
            "tokenizer.ggml.seperator_token_id",
            &mut ids.sep,
            spec.ids.sep,
        ),
        (
            "tokenizer.ggml.padding_token_id",
            &mut ids.pad,
            spec.ids.pad,
        ),
        ("tokenizer.ggml.mask_token_id", &mut ids.mask, spec.ids.mask),
        (
            "tokenizer.ggml.fim_pre_token_id",
            &mut ids.fim_pre,
            spec.ids.fim_pre,
        ),
        (
            "tokenizer.ggml.fim_suf_token_id",
            &mut ids.fim_suf,
            spec.ids.fim_suf,
        ),
        (
            "tokenizer.ggml.fim_mid_token_id",
            &mut ids.fim_mid,
            spec.ids.fim_mid,
        ),
        (
            "tokenizer.ggml.fim_pad_token_id",
            &mut ids.fim_pad,
            spec.ids.fim_pad,
        ),
        (
            "tokenizer.ggml.fim_rep_token_id",
            &mut ids.fim_rep,
            spec.ids.fim_rep,
        ),
        (
            "tokenizer.ggml.fim_sep_token_id",
            &mut ids.fim_sep,
            spec.ids.fim_sep,
        ),
    ];
    for (key, slot, value) in given {
        if let Some(d) = *slot
            && d >= n32
        {
            warnings.push(format!(
                "default special token '{key}' = {d} out of vocab range, disabling"
            ));
            *slot = None;
        }
        match value {
            Some(v) if v >= n32 => {
                warnings.push(format!(
                    "bad special token: '{key}' = {v}, using default id {slot:?}"
                ));
            }
            Some(v) => *slot = Some(v),
            None => {}
        }
    }

    if let Some(v) = spec.add_bos {
        add_bos = v;
    }
    if let Some(v) = spec.add_eos {
        add_eos = v;
    }
    if add_bos && ids.bos.is_none() {
        return Err(TokenizerError::AddedTokenMissing {
            add_key: "tokenizer.ggml.add_bos_token",
            id_key: "tokenizer.ggml.bos_token_id",
        });
    }
    if add_eos && ids.eos.is_none() {
        return Err(TokenizerError::AddedTokenMissing {
            add_key: "tokenizer.ggml.add_eos_token",
            id_key: "tokenizer.ggml.eos_token_id",
        });
    }

    // Tokens recognised by their text; each becomes a control token if it was not one.
    // Where several texts match, llama.cpp takes whichever its hash map yields first; Kiln
    // takes the first in the list's order (so `<|im_end|>` over `<|endoftext|>`).
    let find = |slot: &mut Option<u32>, names: &[&str], attrs: &mut [u16]| {
        if slot.is_some() {
            return;
        }
        if let Some(id) = names.iter().find_map(|name| index.get(&texts, name)) {
            *slot = Some(id);
            attrs[id as usize] |= attr::CONTROL;
        }
    };
    find(&mut ids.eot, EOT_TEXTS, &mut attrs);
    find(&mut ids.eom, EOM_TEXTS, &mut attrs);
    find(&mut ids.fim_pre, FIM_PRE_TEXTS, &mut attrs);
    find(&mut ids.fim_suf, FIM_SUF_TEXTS, &mut attrs);
    find(&mut ids.fim_mid, FIM_MID_TEXTS, &mut attrs);
    find(&mut ids.fim_pad, FIM_PAD_TEXTS, &mut attrs);
    find(&mut ids.fim_rep, FIM_REP_TEXTS, &mut attrs);
    find(&mut ids.fim_sep, FIM_SEP_TEXTS, &mut attrs);

    // Control tokens named "unused…" are unused.
    for (t, a) in texts.iter().zip(attrs.iter_mut()) {
        if *a & attr::CONTROL != 0 && t.contains("unused") {
            *a |= attr::UNUSED;
        }
    }

    // End of generation.
    let mut eog: Vec<u32> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for id in EOG_TEXTS.iter().filter_map(|t| index.get(&texts, t)) {
        eog.push(id);
        attrs[id as usize] |= attr::CONTROL;
    }
    // gpt-oss: these are always rendered.
    for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = index.get(&texts, t) {
            attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();
    // o200k_harmony / solar-open: "<|end|>" is not the end when "<|return|>" and "<|call|>"
    // (or "<|calls|>" and "<|flush|>") are there.
    let eog_text = |eog: &[u32], s: &str| eog.iter().position(|&id| texts.str(id) == s);
    let has = |eog: &[u32], s: &str| eog_text(eog, s).is_some();
    if has(&eog, "<|end|>")
        && ((has(&eog, "<|return|>") && (has(&eog, "<|call|>") || has(&eog, "<|calls|>")))
            || ((has(&eog, "<|call|>") || has(&eog, "<|calls|>")) && has(&eog, "<|flush|>")))
        && let Some(pos) = eog_text(&eog, "<|end|>")
    {
        let id = eog.remove(pos);
        attrs[id as usize] = attr::USER_DEFINED;
    }
    // Gemma 4 and PLaMo have an ordinary "</s>" (paddleocr's ends generation).
    if (has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>"))
        && let Some(pos) = eog_text(&eog, "</s>")
    {
        let id = eog.remove(pos);
        attrs[id as usize] = attr::NORMAL;
    }

    // SentencePiece byte fallback: "<0xXX>", else the raw byte as a one-byte token.
    let mut byte_tokens = Box::new([None; 256]);
    if kind == VocabKind::Spm {
        for b in 0..=255u8 {
            let hex = format!("<0x{b:02X}>");
            let raw = [b];
            byte_tokens[b as usize] = index.get(&texts, &hex).or_else(|| {
                std::str::from_utf8(&raw)
                    .ok()
                    .and_then(|s| index.get(&texts, s))
            });
        }
    }

    let specials = Specials::new(&texts, &attrs);

    let mut pieces = Vec::with_capacity(spec.tokens.iter().map(String::len).sum());
    let mut piece_ends = Vec::with_capacity(n);
    for (t, &a) in texts.iter().zip(&attrs) {
        render(kind, t, a, &mut pieces);
        piece_ends.push(u32::try_from(pieces.len()).unwrap_or(u32::MAX));
    }

    Ok(Tokenizer {
        kind,
        bpe,
        texts,
        scores,
        attrs,
        index,
        specials,
        pieces,
        piece_ends,
        ids,
        add_bos,
        add_eos,
        add_space_prefix,
        clean_spaces,
        eog,
        byte_tokens,
        warnings,
        first_piece: FirstPiece::Llama,
        hf: None,
    })
}
