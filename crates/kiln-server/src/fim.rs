//! Fill-in-the-middle prompts and llama-server's `n_indent` stop, shared by `POST /infill`
//! (`infill.rs`) and `suffix` on `/v1/completions` (`handlers.rs`); a model whose vocabulary
//! lacks FIM tokens is a 400 naming the missing ones.
//!
//! The prompt is built as llama-server builds it (the repository-level layout of
//! Qwen2.5-Coder, arXiv 2409.12186), without its truncation (a prompt over the context is
//! a 400, as everywhere in Kiln):
//!
//! ```text
//! [FIM_REP]myproject\n                       (when the vocabulary has FIM_REP)
//! [FIM_SEP]{filename}\n{text}                (each input_extra chunk; without FIM_SEP,
//!                                             a "--- snippet ---" line instead)
//! [FIM_SEP]filename\n                        (when the vocabulary has FIM_SEP)
//! [BOS][FIM_PRE]{prefix}{prompt}[FIM_SUF]{suffix}[FIM_MID]
//! ```
//!
//! The prefix, suffix, file names and texts are tokenized as plain text (special-token
//! markup in them is not parsed); `prompt`, the text the completion continues from, parses
//! special tokens.

use kiln_tokenizer::Tokenizer;
use serde::Deserialize;

use crate::error::ApiError;

/// One `input_extra` chunk: another file of the project, as context.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraChunk {
    #[serde(default)]
    pub filename: Option<String>,
    pub text: String,
}

/// llama-server's `n_indent`: once the text has a line break, each new line must start
/// with at least `n` spaces or tabs; a line with less stops the generation and is cut
/// (its leading whitespace kept), which ends a function body where the code returns to
/// the outer level instead of running on into the suffix. Checked once per token, in
/// llama-server's order: the line that starts at the last line break seen, then one more
/// line break looked for.
pub(crate) struct IndentLimit {
    n: usize,
    /// A line break has been generated (checked before this token's text counts).
    has_new_line: bool,
    /// Where the line being checked starts (0: none yet).
    line_start: usize,
}

impl IndentLimit {
    pub(crate) fn new(n: usize) -> IndentLimit {
        IndentLimit {
            n,
            has_new_line: false,
            line_start: 0,
        }
    }

    /// After `piece` was appended to `text`: whether generation stops here (`text` is then
    /// cut at the offending line's first non-blank character).
    pub(crate) fn stops(&mut self, text: &mut String, piece: &str) -> bool {
        let mut stop = false;
        if self.has_new_line {
            if self.line_start > 0 {
                let bytes = text.as_bytes();
                let mut pos = self.line_start;
                while pos < bytes.len() && (bytes[pos] == b' ' || bytes[pos] == b'\t') {
                    pos += 1;
                }
                if pos < bytes.len() && pos - self.line_start < self.n {
                    // `pos` follows ASCII whitespace after a line break: a char boundary.
                    text.truncate(pos);
                    stop = true;
                }
            }
            if let Some(i) = text.get(self.line_start..).and_then(|t| t.find('\n')) {
                self.line_start += i + 1;
            }
        }
        if piece.contains('\n') {
            self.has_new_line = true;
        }
        stop
    }
}

/// The text parts of a fill-in-the-middle prompt.
pub(crate) struct FimInput<'a> {
    pub prefix: &'a str,
    pub suffix: &'a str,
    pub extra: &'a [ExtraChunk],
    /// Text after the prefix that the completion continues from.
    pub prompt: &'a str,
}

/// The token ids of a fill-in-the-middle prompt (see the module docs); a 400 naming
/// `param` when the vocabulary lacks a FIM prefix, suffix or middle token.
pub(crate) fn fim_prompt(
    tokenizer: &Tokenizer,
    input: &FimInput<'_>,
    param: &'static str,
) -> Result<Vec<u32>, ApiError> {
    let fim = tokenizer.fim();
    let (Some(pre), Some(suf), Some(mid)) = (fim.pre, fim.suf, fim.mid) else {
        let missing: Vec<&str> = [
            (fim.pre, "prefix (FIM_PRE, e.g. <|fim_prefix|>)"),
            (fim.suf, "suffix (FIM_SUF, e.g. <|fim_suffix|>)"),
            (fim.mid, "middle (FIM_MID, e.g. <|fim_middle|>)"),
        ]
        .into_iter()
        .filter(|(id, _)| id.is_none())
        .map(|(_, name)| name)
        .collect();
        return Err(ApiError::bad_request(
            format!(
                "fill-in-the-middle is not supported by this model: its vocabulary has no {} token",
                missing.join(", no ")
            ),
            Some(param),
        ));
    };
    let encode = |text: &str, parse_special: bool| {
        tokenizer
            .encode(text, false, parse_special)
            .map_err(|e| ApiError::bad_request(format!("cannot tokenize: {e}"), Some(param)))
    };
    let mut ids = Vec::new();
    if let Some(rep) = fim.rep {
        ids.push(rep);
        ids.extend(encode("myproject\n", false)?);
    }
    for chunk in input.extra {
        match fim.sep {
            Some(sep) => {
                ids.push(sep);
                let name = chunk.filename.as_deref().unwrap_or("tmp");
                ids.extend(encode(&format!("{name}\n"), false)?);
            }
            None => ids.extend(encode("\n\n--- snippet ---\n\n", false)?),
        }
        ids.extend(encode(&chunk.text, false)?);
    }
    if let Some(sep) = fim.sep {
        ids.push(sep);
        ids.extend(encode("filename\n", false)?);
    }
    if tokenizer.add_bos()
        && let Some(bos) = tokenizer.bos()
    {
        ids.push(bos);
    }
    ids.push(pre);
    ids.extend(encode(input.prefix, false)?);
    ids.extend(encode(input.prompt, true)?);
    ids.push(suf);
    ids.extend(encode(input.suffix, false)?);
    ids.push(mid);
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::IndentLimit;

    fn run(n: usize, pieces: &[&str]) -> (String, Option<usize>) {
        let mut limit = IndentLimit::new(n);
        let mut text = String::new();
        for (i, piece) in pieces.iter().enumerate() {
            text.push_str(piece);
            if limit.stops(&mut text, piece) {
                return (text, Some(i));
            }
        }
        (text, None)
    }

    #[test]
    fn a_line_back_at_the_outer_level_stops_and_is_cut() {
        let (text, at) = run(
            4,
            &["    a = 1", "\n", "    b = 2", "\n\n", "if", " x:", "\n"],
        );
        assert_eq!(text, "    a = 1\n    b = 2\n");
        assert_eq!(at, Some(4));
    }

    #[test]
    fn indented_lines_and_the_first_line_never_stop() {
        let (text, at) = run(
            4,
            &["x = 1", "\n", "    y", "\n", "\t\t\t\tz", "\n", "     w"],
        );
        assert_eq!(at, None, "{text:?}");
        // A shallower line keeps its leading blanks when cut.
        let (text, at) = run(4, &["    a", "\n", "  b", "\n", "  c"]);
        assert_eq!((text.as_str(), at), ("    a\n  ", Some(3)));
    }
}
