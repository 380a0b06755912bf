//! tokenizer.json decoders and post-processors, reduced to what Kiln's piece-based
//! decoding and encoding need: how a token's text becomes bytes, what happens to the
//! first token's leading space, and which ids `add_special` puts around the text.

use serde_json::Value;

use super::json::{Pattern, array_field, bad, pattern_field, str_field, type_of, usize_field};
use super::pretok::{Prepend, metaspace_prepend};
use crate::TokenizerError;
use crate::decode::FirstPiece;

const SUPPORTED_DECODERS: &str = "ByteLevel, Metaspace ('▁'), or a Sequence of Replace('▁' → \
                                  ' '), ByteFallback, Fuse and Strip(' ', n, 0)";

/// How the decoder turns tokens into text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecoderSpec {
    /// Byte-level (GPT-2 alphabet) rather than SentencePiece-style (`▁` for a space).
    pub(crate) byte_level: bool,
    /// `<0xXX>` tokens decode to their byte.
    pub(crate) byte_fallback: bool,
    pub(crate) first: FirstPiece,
}

pub(crate) fn decoder_from_json(v: Option<&Value>) -> Result<DecoderSpec, TokenizerError> {
    const WHAT: &str = "decoder";
    let unsupported = |found: String| TokenizerError::UnsupportedTokenizerJson {
        component: WHAT,
        found,
        supported: SUPPORTED_DECODERS,
    };
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Err(unsupported("no decoder (tokens joined by spaces)".into()));
    };
    let spm = |first| DecoderSpec {
        byte_level: false,
        byte_fallback: false,
        first,
    };
    match type_of(v, WHAT)? {
        "ByteLevel" => Ok(DecoderSpec {
            byte_level: true,
            byte_fallback: false,
            first: FirstPiece::Keep,
        }),
        "Metaspace" => {
            check_marker(v, "replacement", WHAT)?;
            Ok(spm(match metaspace_prepend(v, WHAT)? {
                Prepend::Never => FirstPiece::Keep,
                _ => FirstPiece::DropMarkers,
            }))
        }
        "Sequence" => {
            let steps = array_field(v, "decoders", WHAT)?;
            if let [only] = steps
                && type_of(only, WHAT)? == "ByteLevel"
            {
                return decoder_from_json(Some(only));
            }
            let mut spec = spm(FirstPiece::Keep);
            let mut replaced = false;
            for step in steps {
                match type_of(step, WHAT)? {
                    "Replace" => {
                        let Pattern::Literal("\u{2581}") = pattern_field(step, WHAT)? else {
                            return Err(unsupported("Replace of something other than '▁'".into()));
                        };
                        if str_field(step, "content", WHAT)? != " " {
                            return Err(unsupported(
                                "Replace of '▁' by something other than ' '".into(),
                            ));
                        }
                        replaced = true;
                    }
                    "ByteFallback" => spec.byte_fallback = true,
                    "Fuse" => {}
                    "Strip" => {
                        let content = str_field(step, "content", WHAT)?;
                        let start = usize_field(step, "start", 0, WHAT)?;
                        let stop = usize_field(step, "stop", 0, WHAT)?;
                        if content != " " || start > 1 || stop != 0 {
                            return Err(unsupported(format!(
                                "Strip({content:?}, {start}, {stop})"
                            )));
                        }
                        if start == 1 {
                            spec.first = FirstPiece::StripSpace;
                        }
                    }
                    other => return Err(unsupported(format!("{other} in a Sequence"))),
                }
            }
            if !replaced {
                return Err(unsupported("a Sequence without Replace('▁' → ' ')".into()));
            }
            Ok(spec)
        }
        other => Err(unsupported(other.to_owned())),
    }
}

fn check_marker(v: &Value, key: &str, what: &str) -> Result<(), TokenizerError> {
    match v.get(key).and_then(Value::as_str) {
        Some("\u{2581}") => Ok(()),
        _ => Err(bad(
            format!("{what}.{key}"),
            "'▁' (the only marker Kiln supports)",
        )),
    }
}

/// The ids `add_special` puts before and after a single sequence.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PostSpec {
    pub(crate) prefix: Vec<u32>,
    pub(crate) suffix: Vec<u32>,
}

const SUPPORTED_POST: &str = "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, \
                              Sequence";

pub(crate) fn post_from_json(v: Option<&Value>) -> Result<PostSpec, TokenizerError> {
    const WHAT: &str = "post_processor";
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(PostSpec::default());
    };
    match type_of(v, WHAT)? {
        "ByteLevel" => Ok(PostSpec::default()),
        "TemplateProcessing" => {
            let single = array_field(v, "single", WHAT)?;
            let specials = v.get("special_tokens");
            let mut spec = PostSpec::default();
            let mut seen_sequence = false;
            for item in single {
                if item.get("Sequence").is_some() {
                    if seen_sequence {
                        return Err(bad("post_processor.single", "one Sequence"));
                    }
                    seen_sequence = true;
                    continue;
                }
                let name = item
                    .get("SpecialToken")
                    .and_then(|s| s.get("id"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        bad("post_processor.single", "SpecialToken or Sequence items")
                    })?;
                let ids = specials
                    .and_then(|s| s.get(name))
                    .and_then(|s| s.get("ids"))
                    .and_then(Value::as_array)
                    .ok_or_else(|| {
                        bad(
                            format!("post_processor.special_tokens[{name:?}]"),
                            "an entry with ids",
                        )
                    })?;
                let target = if seen_sequence {
                    &mut spec.suffix
                } else {
                    &mut spec.prefix
                };
                for id in ids {
                    target.push(id.as_u64().and_then(|i| u32::try_from(i).ok()).ok_or_else(
                        || {
                            bad(
                                format!("post_processor.special_tokens[{name:?}].ids"),
                                "token ids",
                            )
                        },
                    )?);
                }
            }
            Ok(spec)
        }
        "RobertaProcessing" | "BertProcessing" => {
            let id = |key: &str| {
                v.get(key)
                    .and_then(|p| p.get(1))
                    .and_then(Value::as_u64)
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or_else(|| bad(format!("post_processor.{key}"), "[text, id]"))
            };
            Ok(PostSpec {
                prefix: vec![id("cls")?],
                suffix: vec![id("sep")?],
            })
        }
        "Sequence" => {
            let mut spec = PostSpec::default();
            for p in array_field(v, "processors", WHAT)? {
                let inner = post_from_json(Some(p))?;
                let mut prefix = inner.prefix;
                prefix.extend(spec.prefix);
                spec.prefix = prefix;
                spec.suffix.extend(inner.suffix);
            }
            Ok(spec)
        }
        other => Err(TokenizerError::UnsupportedTokenizerJson {
            component: WHAT,
            found: other.to_owned(),
            supported: SUPPORTED_POST,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn llama_style_decoder_strips_the_first_space() {
        let d = json(
            r#"{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},
                {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}"#,
        );
        let spec = decoder_from_json(Some(&d)).unwrap();
        assert!(!spec.byte_level && spec.byte_fallback);
        assert_eq!(spec.first, FirstPiece::StripSpace);
    }

    #[test]
    fn template_processing_gives_prefix_and_suffix() {
        let p = json(
            r#"{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},
                {"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"</s>","type_id":0}}],
                "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]},
                                  "</s>":{"id":"</s>","ids":[2],"tokens":["</s>"]}}}"#,
        );
        let spec = post_from_json(Some(&p)).unwrap();
        assert_eq!(spec.prefix, [1]);
        assert_eq!(spec.suffix, [2]);
    }

    #[test]
    fn a_missing_decoder_is_refused() {
        let err = decoder_from_json(None).unwrap_err().to_string();
        assert!(err.contains("ByteLevel"), "{err}");
    }
}
