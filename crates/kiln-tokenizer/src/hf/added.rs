//! Added tokens (`added_tokens` of a tokenizer.json) cut out of the text before anything
//! else, as `tokenizers`' `AddedVocabulary` does: first the tokens matched on the raw text
//! (`normalized: false`), then, in each remaining stretch once normalized, the tokens
//! matched on normalized text. Matching is leftmost-longest; `single_word`, `lstrip` and
//! `rstrip` are honoured; special tokens are skipped when special-token parsing is off.

use aho_corasick::{AhoCorasick, MatchKind};

use super::json::AddedTokenJson;
use super::normalizer::Normalizer;

pub(crate) struct AddedVocab {
    tokens: Vec<AddedTokenJson>,
    /// Over the raw-text tokens; pattern `i` is `raw_ids[i]` (an index into `tokens`).
    raw: Option<(AhoCorasick, Vec<usize>)>,
    /// Over the normalized forms of the other tokens.
    normalized: Option<(AhoCorasick, Vec<usize>)>,
}

/// A stretch of input: plain text (to be normalized and tokenized) or an added token.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Split {
    Text { text: String, at_start: bool },
    Token(u32),
}

impl AddedVocab {
    pub(crate) fn new(tokens: Vec<AddedTokenJson>, normalizer: Option<&Normalizer>) -> AddedVocab {
        let mut raw = (Vec::new(), Vec::new());
        let mut norm = (Vec::new(), Vec::new());
        for (i, t) in tokens.iter().enumerate() {
            if t.content.is_empty() {
                continue;
            }
            if t.normalized {
                let pattern = normalizer.map_or_else(|| t.content.clone(), |n| n.apply(&t.content));
                if !pattern.is_empty() {
                    norm.0.push(pattern);
                    norm.1.push(i);
                }
            } else {
                raw.0.push(t.content.clone());
                raw.1.push(i);
            }
        }
        let build = |(patterns, ids): (Vec<String>, Vec<usize>)| {
            if patterns.is_empty() {
                return None;
            }
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .ok()
                .map(|ac| (ac, ids))
        };
        AddedVocab {
            tokens,
            raw: build(raw),
            normalized: build(norm),
        }
    }

    /// Splits `text` into added tokens and normalized text stretches.
    pub(crate) fn split(
        &self,
        text: &str,
        normalizer: Option<&Normalizer>,
        parse_special: bool,
    ) -> Vec<Split> {
        let mut out = Vec::new();
        for s in self.find(text, self.raw.as_ref(), parse_special, true) {
            match s {
                Split::Text { text, at_start } => {
                    let normalized = match normalizer {
                        Some(n) => n.apply(&text),
                        None => text,
                    };
                    out.extend(self.find(
                        &normalized,
                        self.normalized.as_ref(),
                        parse_special,
                        at_start,
                    ));
                }
                token => out.push(token),
            }
        }
        out
    }

    fn find(
        &self,
        text: &str,
        matcher: Option<&(AhoCorasick, Vec<usize>)>,
        parse_special: bool,
        at_start: bool,
    ) -> Vec<Split> {
        let mut out = Vec::new();
        let Some((ac, ids)) = matcher else {
            if !text.is_empty() {
                out.push(Split::Text {
                    text: text.to_owned(),
                    at_start,
                });
            }
            return out;
        };
        let mut offset = 0;
        let push_text = |out: &mut Vec<Split>, start: usize, end: usize| {
            if start < end {
                out.push(Split::Text {
                    text: text.get(start..end).unwrap_or_default().to_owned(),
                    at_start: at_start && start == 0,
                });
            }
        };
        for m in ac.find_iter(text) {
            let Some(t) = ids
                .get(m.pattern().as_usize())
                .and_then(|&i| self.tokens.get(i))
            else {
                continue;
            };
            let (mut start, mut stop) = (m.start(), m.end());
            if t.special && !parse_special {
                continue;
            }
            if t.single_word {
                let before = text.get(..start).unwrap_or_default();
                let after = text.get(stop..).unwrap_or_default();
                let left_ok = before.chars().next_back().is_none_or(|c| !is_word(c));
                let right_ok = after.chars().next().is_none_or(|c| !is_word(c));
                if !left_ok || !right_ok {
                    continue;
                }
            }
            if t.lstrip {
                let before = text.get(..start).unwrap_or_default();
                start = before.trim_end().len().max(offset);
            }
            if t.rstrip {
                let after = text.get(stop..).unwrap_or_default();
                stop += after.len() - after.trim_start().len();
            }
            push_text(&mut out, offset, start);
            out.push(Split::Token(t.id));
            offset = stop;
        }
        push_text(&mut out, offset, text.len());
        out
    }
}

/// `\w` of the `regex` crate: alphanumeric, a mark, or connector punctuation.
fn is_word(c: char) -> bool {
    c.is_alphanumeric()
        || c == '_'
        || unicode_normalization::char::is_combining_mark(c)
        || matches!(
            c,
            '\u{203F}' | '\u{2040}' | '\u{2054}' | '\u{FE33}' | '\u{FE34}' | '\u{FE4D}'
                ..='\u{FE4F}' | '\u{FF3F}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(id: u32, content: &str, special: bool) -> AddedTokenJson {
        AddedTokenJson {
            id,
            content: content.into(),
            single_word: false,
            lstrip: false,
            rstrip: false,
            normalized: !special,
            special,
        }
    }

    fn text(s: &str, at_start: bool) -> Split {
        Split::Text {
            text: s.into(),
            at_start,
        }
    }

    #[test]
    fn longest_token_wins_and_special_parsing_can_be_off() {
        let v = AddedVocab::new(vec![tok(1, "<s>", true), tok(2, "<s>x", true)], None);
        assert_eq!(
            v.split("a<s>xb<s>", None, true),
            [
                text("a", true),
                Split::Token(2),
                text("b", false),
                Split::Token(1)
            ]
        );
        assert_eq!(v.split("a<s>b", None, false), [text("a<s>b", true)]);
    }

    #[test]
    fn lstrip_and_rstrip_swallow_neighbouring_spaces() {
        let mut mask = tok(5, "<mask>", true);
        mask.lstrip = true;
        mask.rstrip = true;
        let v = AddedVocab::new(vec![mask], None);
        assert_eq!(
            v.split("a  <mask>  b", None, true),
            [text("a", true), Split::Token(5), text("b", false)]
        );
    }

    #[test]
    fn single_word_tokens_match_only_between_non_word_characters() {
        let mut w = tok(7, "ab", false);
        w.single_word = true;
        let v = AddedVocab::new(vec![w], None);
        assert_eq!(
            v.split("xab ab", None, true),
            [text("xab ", true), Split::Token(7)]
        );
    }
}
