//! tokenizer.json pre-tokenizers: each stage splits every piece left by the one before
//! (and `ByteLevel` / `Metaspace` also rewrite the pieces), as `tokenizers`'
//! `PreTokenizedString::split` does. The regexes of `Split` and `ByteLevel` run on the
//! same scanners as the GGUF pre-tokenizers (`crate::pretok`), so only the regexes those
//! implement are accepted; any other is refused by name.

use std::ops::Range;

use serde_json::Value;

use super::json::{Pattern, array_field, bad, bool_field, pattern_field, type_of};
use crate::TokenizerError;
use crate::pretok::{Regex, regex_matches};
use crate::unicode::BYTE_TO_CHAR;

const SUPPORTED: &str = "ByteLevel, Split (string patterns, or the GPT-2 / Llama 3 / Qwen 2 \
                         regexes), Digits, Metaspace, Sequence";

/// The regexes a `Split` may name, exactly as the files spell them.
const KNOWN_REGEXES: &[(&str, Regex)] = &[
    (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
        Regex::Gpt2,
    ),
    (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        Regex::Llama3,
    ),
    (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        Regex::Qwen2,
    ),
];

/// `SplitDelimiterBehavior`: what becomes of the matches when a piece is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Behavior {
    Removed,
    Isolated,
    MergedWithPrevious,
    MergedWithNext,
    Contiguous,
}

impl Behavior {
    fn from_json(v: &Value, what: &str) -> Result<Behavior, TokenizerError> {
        Ok(match v.get("behavior").and_then(Value::as_str) {
            Some("Removed") => Behavior::Removed,
            Some("Isolated") => Behavior::Isolated,
            Some("MergedWithPrevious") => Behavior::MergedWithPrevious,
            Some("MergedWithNext") => Behavior::MergedWithNext,
            Some("Contiguous") => Behavior::Contiguous,
            _ => {
                return Err(bad(
                    format!("{what}.behavior"),
                    "one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                ));
            }
        })
    }
}

/// `Metaspace`'s `prepend_scheme`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prepend {
    Always,
    First,
    Never,
}

#[derive(Clone, Debug)]
pub(crate) enum Stage {
    /// Split at a regex's matches (each match a piece: `Isolated`, not inverted).
    Regex(Regex),
    /// Split at a literal string.
    Literal { pattern: String, behavior: Behavior },
    /// Split at every numeric character (`char::is_numeric`), each on its own or in runs.
    Digits { individual: bool },
    /// GPT-2's byte-level stage: optional leading space, optional GPT-2 regex, then every
    /// byte written as its character of the byte alphabet.
    ByteLevel {
        add_prefix_space: bool,
        use_regex: bool,
    },
    /// SentencePiece's space marker: spaces become `replacement`, one is prepended per
    /// the scheme, and pieces split before each marker.
    Metaspace {
        replacement: char,
        prepend: Prepend,
        split: bool,
    },
}

/// A piece of text on its way through the pre-tokenizer, with whether it starts at the
/// very beginning of the input (Metaspace's `first` scheme prepends only there).
#[derive(Clone, Debug)]
pub(crate) struct Piece {
    pub(crate) text: String,
    pub(crate) at_start: bool,
}

/// Parses a `pre_tokenizer` object into its stages, in order.
pub(crate) fn stages_from_json(v: &Value, out: &mut Vec<Stage>) -> Result<(), TokenizerError> {
    const WHAT: &str = "pre_tokenizer";
    let unsupported = |found: String| TokenizerError::UnsupportedTokenizerJson {
        component: WHAT,
        found,
        supported: SUPPORTED,
    };
    match type_of(v, WHAT)? {
        "Sequence" => {
            for p in array_field(v, "pretokenizers", WHAT)? {
                stages_from_json(p, out)?;
            }
        }
        "ByteLevel" => out.push(Stage::ByteLevel {
            add_prefix_space: bool_field(v, "add_prefix_space", true, WHAT)?,
            use_regex: bool_field(v, "use_regex", true, WHAT)?,
        }),
        "Digits" => out.push(Stage::Digits {
            individual: bool_field(v, "individual_digits", false, WHAT)?,
        }),
        "Split" => {
            let behavior = Behavior::from_json(v, WHAT)?;
            let invert = bool_field(v, "invert", false, WHAT)?;
            match pattern_field(v, WHAT)? {
                Pattern::Literal(p) if !invert => out.push(Stage::Literal {
                    pattern: p.to_owned(),
                    behavior,
                }),
                Pattern::Regex(r) if !invert && behavior == Behavior::Isolated => {
                    let re = KNOWN_REGEXES
                        .iter()
                        .find(|k| k.0 == r)
                        .map(|k| k.1)
                        .ok_or_else(|| unsupported(format!("Split with the regex {r:?}")))?;
                    out.push(Stage::Regex(re));
                }
                _ => {
                    return Err(unsupported(format!(
                        "Split with behavior {behavior:?} and invert {invert}"
                    )));
                }
            }
        }
        "Metaspace" => {
            let replacement = v
                .get("replacement")
                .and_then(Value::as_str)
                .and_then(|s| {
                    let mut c = s.chars();
                    c.next().filter(|_| c.next().is_none())
                })
                .ok_or_else(|| bad("pre_tokenizer.replacement", "a single character"))?;
            let prepend = metaspace_prepend(v, WHAT)?;
            out.push(Stage::Metaspace {
                replacement,
                prepend,
                split: bool_field(v, "split", true, WHAT)?,
            });
        }
        other => return Err(unsupported(other.to_owned())),
    }
    Ok(())
}

/// `prepend_scheme` (default `always`), or the older `add_prefix_space` (false = never).
pub(crate) fn metaspace_prepend(v: &Value, what: &str) -> Result<Prepend, TokenizerError> {
    let scheme = match v.get("prepend_scheme").and_then(Value::as_str) {
        None | Some("always") => Prepend::Always,
        Some("first") => Prepend::First,
        Some("never") => Prepend::Never,
        Some(other) => {
            return Err(bad(
                format!("{what}.prepend_scheme"),
                format!("always, first or never, not {other:?}"),
            ));
        }
    };
    if !bool_field(v, "add_prefix_space", true, what)? {
        return Ok(Prepend::Never);
    }
    Ok(scheme)
}

/// Runs the stages over `pieces` in place; empty pieces are dropped.
pub(crate) fn run(stages: &[Stage], pieces: &mut Vec<Piece>) {
    for stage in stages {
        let mut next = Vec::with_capacity(pieces.len() * 2);
        for piece in pieces.drain(..) {
            apply(stage, piece, &mut next);
        }
        next.retain(|p| !p.text.is_empty());
        *pieces = next;
    }
}

fn apply(stage: &Stage, piece: Piece, out: &mut Vec<Piece>) {
    match stage {
        Stage::Regex(re) => {
            let matches = regex_matches(*re, &piece.text);
            split_by(piece, &matches, Behavior::Isolated, out);
        }
        Stage::Literal { pattern, behavior } => {
            let matches: Vec<Range<usize>> = if pattern.is_empty() {
                Vec::new()
            } else {
                piece
                    .text
                    .match_indices(pattern.as_str())
                    .map(|(i, m)| i..i + m.len())
                    .collect()
            };
            split_by(piece, &matches, *behavior, out);
        }
        Stage::Digits { individual } => {
            let matches = char_matches(&piece.text, char::is_numeric);
            let b = if *individual {
                Behavior::Isolated
            } else {
                Behavior::Contiguous
            };
            split_by(piece, &matches, b, out);
        }
        Stage::ByteLevel {
            add_prefix_space,
            use_regex,
        } => {
            let mut piece = piece;
            if *add_prefix_space && !piece.text.starts_with(' ') {
                piece.text.insert(0, ' ');
            }
            let mut parts = Vec::new();
            if *use_regex {
                let matches = regex_matches(Regex::Gpt2, &piece.text);
                split_by(piece, &matches, Behavior::Isolated, &mut parts);
            } else {
                parts.push(piece);
            }
            for p in parts {
                let text = p.text.bytes().map(|b| BYTE_TO_CHAR[b as usize]).collect();
                out.push(Piece {
                    text,
                    at_start: p.at_start,
                });
            }
        }
        Stage::Metaspace {
            replacement,
            prepend,
            split,
        } => {
            let mut text: String = piece
                .text
                .chars()
                .map(|c| if c == ' ' { *replacement } else { c })
                .collect();
            let wants = match prepend {
                Prepend::Always => true,
                Prepend::First => piece.at_start,
                Prepend::Never => false,
            };
            if wants && !text.starts_with(*replacement) {
                text.insert(0, *replacement);
            }
            let piece = Piece {
                text,
                at_start: piece.at_start,
            };
            if *split {
                let r = *replacement;
                let matches = char_matches(&piece.text, |c| c == r);
                split_by(piece, &matches, Behavior::MergedWithNext, out);
            } else {
                out.push(piece);
            }
        }
    }
}

/// Every character for which `f` holds, as a one-character match.
fn char_matches(text: &str, f: impl Fn(char) -> bool) -> Vec<Range<usize>> {
    text.char_indices()
        .filter(|&(_, c)| f(c))
        .map(|(i, c)| i..i + c.len_utf8())
        .collect()
}

/// Splits a piece at `matches` (sorted, disjoint) the way `NormalizedString::split`
/// treats them under `behavior`.
fn split_by(piece: Piece, matches: &[Range<usize>], behavior: Behavior, out: &mut Vec<Piece>) {
    // The piece as alternating (range, is_match) segments.
    let mut segs: Vec<(Range<usize>, bool)> = Vec::with_capacity(matches.len() * 2 + 1);
    let mut at = 0;
    for m in matches {
        if m.start > at {
            segs.push((at..m.start, false));
        }
        segs.push((m.clone(), true));
        at = m.end;
    }
    if at < piece.text.len() {
        segs.push((at..piece.text.len(), false));
    }
    let mut kept: Vec<Range<usize>> = Vec::with_capacity(segs.len());
    match behavior {
        Behavior::Isolated => kept.extend(segs.into_iter().map(|s| s.0)),
        Behavior::Removed => kept.extend(segs.into_iter().filter(|s| !s.1).map(|s| s.0)),
        Behavior::Contiguous => {
            let mut prev_match = false;
            for (r, m) in segs {
                match kept.last_mut() {
                    Some(last) if m == prev_match => last.end = r.end,
                    _ => kept.push(r),
                }
                prev_match = m;
            }
        }
        Behavior::MergedWithPrevious => {
            let mut prev_match = false;
            for (r, m) in segs {
                match kept.last_mut() {
                    Some(last) if m && !prev_match => last.end = r.end,
                    _ => kept.push(r),
                }
                prev_match = m;
            }
        }
        Behavior::MergedWithNext => {
            let mut prev_match = false;
            for (r, m) in segs.into_iter().rev() {
                match kept.last_mut() {
                    Some(last) if m && !prev_match => last.start = r.start,
                    _ => kept.push(r),
                }
                prev_match = m;
            }
            kept.reverse();
        }
    }
    for r in kept {
        let text = piece.text.get(r.clone()).unwrap_or_default().to_owned();
        out.push(Piece {
            text,
            at_start: piece.at_start && r.start == 0,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(stages: &[Stage], text: &str) -> Vec<String> {
        let mut pieces = vec![Piece {
            text: text.to_owned(),
            at_start: true,
        }];
        run(stages, &mut pieces);
        pieces.into_iter().map(|p| p.text).collect()
    }

    #[test]
    fn metaspace_splits_before_each_marker() {
        let m = Stage::Metaspace {
            replacement: '▁',
            prepend: Prepend::Always,
            split: true,
        };
        assert_eq!(texts(&[m], "Hey  friend"), ["▁Hey", "▁", "▁friend"]);
    }

    #[test]
    fn digits_isolated_or_contiguous() {
        let each = Stage::Digits { individual: true };
        let runs = Stage::Digits { individual: false };
        assert_eq!(texts(&[each], "a123b"), ["a", "1", "2", "3", "b"]);
        assert_eq!(texts(&[runs], "a123b"), ["a", "123", "b"]);
    }

    #[test]
    fn literal_split_behaviors_follow_tokenizers() {
        let lit = |behavior| Stage::Literal {
            pattern: "-".into(),
            behavior,
        };
        let t = "the-final--countdown";
        assert_eq!(
            texts(&[lit(Behavior::Removed)], t),
            ["the", "final", "countdown"]
        );
        assert_eq!(
            texts(&[lit(Behavior::Isolated)], t),
            ["the", "-", "final", "-", "-", "countdown"]
        );
        assert_eq!(
            texts(&[lit(Behavior::MergedWithPrevious)], t),
            ["the-", "final-", "-", "countdown"]
        );
        assert_eq!(
            texts(&[lit(Behavior::MergedWithNext)], t),
            ["the", "-final", "-", "-countdown"]
        );
        assert_eq!(
            texts(&[lit(Behavior::Contiguous)], t),
            ["the", "-", "final", "--", "countdown"]
        );
    }

    #[test]
    fn byte_level_maps_bytes_to_the_byte_alphabet() {
        let bl = Stage::ByteLevel {
            add_prefix_space: false,
            use_regex: true,
        };
        assert_eq!(texts(&[bl], "Hi there"), ["Hi", "Ġthere"]);
    }

    #[test]
    fn an_unknown_regex_is_refused_with_the_supported_list() {
        let v: Value = serde_json::from_str(
            r#"{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":false}"#,
        )
        .unwrap();
        let err = stages_from_json(&v, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("\\\\w+") && err.contains("Metaspace"), "{err}");
    }
}
