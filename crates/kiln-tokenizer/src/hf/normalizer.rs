//! tokenizer.json normalizers: the text rewrites applied to each stretch of input between
//! added tokens, before pre-tokenization (Hugging Face `tokenizers`' `normalizers`).

use serde_json::Value;
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

use super::json::{Pattern, array_field, bool_field, pattern_field, str_field, type_of};
use crate::TokenizerError;

const SUPPORTED: &str = "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace (string \
                         pattern), Prepend, Sequence";

#[derive(Clone, Debug)]
pub(crate) enum Normalizer {
    Nfc,
    Nfd,
    Nfkc,
    Nfkd,
    Lowercase,
    Strip { left: bool, right: bool },
    StripAccents,
    Replace { pattern: String, content: String },
    Prepend(String),
    Sequence(Vec<Normalizer>),
}

impl Normalizer {
    pub(crate) fn from_json(v: &Value) -> Result<Normalizer, TokenizerError> {
        const WHAT: &str = "normalizer";
        let ty = type_of(v, WHAT)?;
        Ok(match ty {
            "NFC" => Normalizer::Nfc,
            "NFD" => Normalizer::Nfd,
            "NFKC" => Normalizer::Nfkc,
            "NFKD" => Normalizer::Nfkd,
            "Lowercase" => Normalizer::Lowercase,
            "Strip" => Normalizer::Strip {
                left: bool_field(v, "strip_left", true, WHAT)?,
                right: bool_field(v, "strip_right", true, WHAT)?,
            },
            "StripAccents" => Normalizer::StripAccents,
            "Replace" => match pattern_field(v, WHAT)? {
                Pattern::Literal(p) => Normalizer::Replace {
                    pattern: p.to_owned(),
                    content: str_field(v, "content", WHAT)?.to_owned(),
                },
                Pattern::Regex(r) => {
                    return Err(TokenizerError::UnsupportedTokenizerJson {
                        component: WHAT,
                        found: format!("Replace with the regex {r:?}"),
                        supported: SUPPORTED,
                    });
                }
            },
            "Prepend" => Normalizer::Prepend(str_field(v, "prepend", WHAT)?.to_owned()),
            "Sequence" => Normalizer::Sequence(
                array_field(v, "normalizers", WHAT)?
                    .iter()
                    .map(Normalizer::from_json)
                    .collect::<Result<_, _>>()?,
            ),
            other => {
                return Err(TokenizerError::UnsupportedTokenizerJson {
                    component: WHAT,
                    found: other.to_owned(),
                    supported: SUPPORTED,
                });
            }
        })
    }

    pub(crate) fn apply(&self, text: &str) -> String {
        match self {
            Normalizer::Nfc => text.nfc().collect(),
            Normalizer::Nfd => text.nfd().collect(),
            Normalizer::Nfkc => text.nfkc().collect(),
            Normalizer::Nfkd => text.nfkd().collect(),
            // Char by char, as `tokenizers` does (no final-sigma rule).
            Normalizer::Lowercase => text.chars().flat_map(char::to_lowercase).collect(),
            Normalizer::Strip { left, right } => {
                let mut t = text;
                if *left {
                    t = t.trim_start();
                }
                if *right {
                    t = t.trim_end();
                }
                t.to_owned()
            }
            Normalizer::StripAccents => text.chars().filter(|&c| !is_combining_mark(c)).collect(),
            Normalizer::Replace { pattern, content } => {
                if pattern.is_empty() {
                    text.to_owned()
                } else {
                    text.replace(pattern.as_str(), content)
                }
            }
            Normalizer::Prepend(p) => {
                if text.is_empty() {
                    String::new()
                } else {
                    format!("{p}{text}")
                }
            }
            Normalizer::Sequence(list) => {
                let mut s = text.to_owned();
                for n in list {
                    s = n.apply(&s);
                }
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(json: &str, text: &str) -> String {
        let v: Value = serde_json::from_str(json).unwrap();
        Normalizer::from_json(&v).unwrap().apply(text)
    }

    #[test]
    fn sentencepiece_style_sequence_prepends_and_escapes_spaces() {
        let seq = r#"{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},
                     {"type":"Replace","pattern":{"String":" "},"content":"▁"}]}"#;
        assert_eq!(norm(seq, "Hello world"), "▁Hello▁world");
        assert_eq!(norm(seq, ""), "");
    }

    #[test]
    fn nfc_composes_decomposed_accents() {
        assert_eq!(norm(r#"{"type":"NFC"}"#, "e\u{301}"), "\u{e9}");
    }

    #[test]
    fn regex_replace_is_refused_with_the_supported_list() {
        let v: Value =
            serde_json::from_str(r#"{"type":"Replace","pattern":{"Regex":" {2,}"},"content":" "}"#)
                .unwrap();
        let err = Normalizer::from_json(&v).unwrap_err().to_string();
        assert!(err.contains("Replace") && err.contains("NFC"), "{err}");
    }

    #[test]
    fn malformed_objects_name_the_field() {
        let v: Value = serde_json::from_str(r#"{"type":"Prepend"}"#).unwrap();
        let err = Normalizer::from_json(&v).unwrap_err().to_string();
        assert!(err.contains("normalizer.prepend"), "{err}");
    }
}
