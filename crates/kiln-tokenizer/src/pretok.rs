//! Pre-tokenizers: the word splits that BPE runs inside, one family per regex list that
//! llama.cpp assigns to a `tokenizer.ggml.pre` name.
//!
//! llama.cpp applies its regexes one after another: each regex splits every piece left
//! by the previous one into its matches and the gaps between them. Two regexes it runs
//! with hand-written code (GPT-2's and Llama 3's), the rest with `std::regex` over a text
//! where every non-ASCII code point stands in as a byte for its class. Both are
//! reproduced here as explicit scanners over code point classes, one per regex, with the
//! regex each implements written above it.

use crate::TokenizerError;
use crate::unicode::Flags;

/// The regex family a vocabulary's `tokenizer.ggml.pre` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    Gpt2,
    /// Llama 3: contractions (any case), `[^\r\n\p{L}\p{N}]?\p{L}+`, `\p{N}{1,3}`,
    /// ` ?[^\s\p{L}\p{N}]+[\r\n]*`, `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`.
    Llama3,
    /// Qwen 2: the Llama 3 regex with single digits (`\p{N}`).
    Qwen2,
    /// StarCoder / SmolLM: every digit apart (`\p{N}`), then the GPT-2 regex.
    Smollm,
    /// llama.cpp's fallback list: `[\p{P}\$\+<=>\^~\|]+`, the GPT-2 regex, `\p{N}+`,
    /// `[0-9][0-9][0-9]`.
    Default,
}

/// What a `tokenizer.ggml.pre` name sets besides the regexes (llama.cpp's loader).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PreConfig {
    pub(crate) kind: PreTokenizer,
    /// A word that is itself a token is emitted whole, before any merge.
    pub(crate) ignore_merges: bool,
    /// `clean_up_tokenization_spaces`, used by [`crate::Tokenizer::detokenize`].
    pub(crate) clean_spaces: bool,
    /// BOS is added when the file does not say (`add_bos_token` absent).
    pub(crate) add_bos: bool,
}

/// The `tokenizer.ggml.pre` names Kiln accepts, with the family each selects.
const NAMES: &[(&str, PreTokenizer, bool, bool, bool)] = &[
    // name, family, ignore_merges, clean_spaces, add_bos default
    ("default", PreTokenizer::Default, false, true, false),
    ("llama3", PreTokenizer::Llama3, true, true, true),
    ("llama-v3", PreTokenizer::Llama3, true, true, true),
    ("llama-bpe", PreTokenizer::Llama3, true, true, true),
    ("falcon3", PreTokenizer::Llama3, true, true, true),
    ("pixtral", PreTokenizer::Llama3, true, true, true),
    ("gpt-2", PreTokenizer::Gpt2, false, true, false),
    ("phi-2", PreTokenizer::Gpt2, false, true, false),
    ("mpt", PreTokenizer::Gpt2, false, true, false),
    ("olmo", PreTokenizer::Gpt2, false, true, false),
    ("exaone4", PreTokenizer::Gpt2, false, true, false),
    ("starcoder", PreTokenizer::Smollm, false, true, false),
    ("refact", PreTokenizer::Smollm, false, true, false),
    ("smollm", PreTokenizer::Smollm, false, false, false),
    ("codeshell", PreTokenizer::Smollm, false, true, false),
    ("command-r", PreTokenizer::Smollm, false, false, false),
    ("qwen2", PreTokenizer::Qwen2, false, false, false),
    ("deepseek-r1-qwen", PreTokenizer::Qwen2, false, false, false),
    ("stablelm2", PreTokenizer::Qwen2, false, true, false),
    ("megrez", PreTokenizer::Qwen2, false, true, false),
];

/// The names [`PreConfig::from_name`] accepts, for error messages.
pub(crate) fn supported_names() -> String {
    NAMES.iter().map(|n| n.0).collect::<Vec<_>>().join(", ")
}

impl PreConfig {
    /// llama.cpp treats an absent `tokenizer.ggml.pre` as `default` (with a loud warning);
    /// an unknown name is an error.
    pub(crate) fn from_name(name: Option<&str>) -> Result<PreConfig, TokenizerError> {
        let name = name.filter(|n| !n.is_empty()).unwrap_or("default");
        let &(_, kind, ignore_merges, clean_spaces, add_bos) =
            NAMES.iter().find(|n| n.0 == name).ok_or_else(|| {
                TokenizerError::UnsupportedPreTokenizer {
                    pre: name.to_owned(),
                    supported: supported_names(),
                }
            })?;
        Ok(PreConfig {
            kind,
            ignore_merges,
            clean_spaces,
            add_bos,
        })
    }
}

/// A text's code points and their classes, with the byte offset of each.
pub(crate) struct Chars {
    flags: Vec<Flags>,
    chars: Vec<char>,
    /// `offsets[i]` is the byte offset of char `i`; one extra entry holds the text length.
    offsets: Vec<usize>,
}

impl Chars {
    pub(crate) fn new(text: &str) -> Chars {
        let n = text.chars().count();
        let mut chars = Vec::with_capacity(n);
        let mut flags = Vec::with_capacity(n);
        let mut offsets = Vec::with_capacity(n + 1);
        for (i, c) in text.char_indices() {
            chars.push(c);
            flags.push(Flags::of(c));
            offsets.push(i);
        }
        offsets.push(text.len());
        Chars {
            flags,
            chars,
            offsets,
        }
    }

    /// Byte offset of char index `i` (`i` may be the length).
    pub(crate) fn byte(&self, i: usize) -> usize {
        self.offsets.get(i).copied().unwrap_or(0)
    }
}

/// Splits `text` into words; returns the end of each word as a char index.
pub(crate) fn split(kind: PreTokenizer, chars: &Chars) -> Vec<usize> {
    let all = vec![chars.chars.len()];
    let stages: &[Stage] = match kind {
        PreTokenizer::Gpt2 => &[gpt2],
        PreTokenizer::Llama3 => &[llama3],
        PreTokenizer::Qwen2 => &[qwen2],
        PreTokenizer::Smollm => &[each_number, gpt2],
        PreTokenizer::Default => &[punctuation_runs, gpt2, number_runs, ascii_digit_triples],
    };
    stages.iter().fold(all, |ends, stage| {
        let mut out = Vec::with_capacity(ends.len() * 2);
        let mut start = 0;
        for &end in &ends {
            let span = Span {
                c: chars,
                start,
                end,
            };
            stage(&span, &mut out);
            start = end;
        }
        out
    })
}

/// One of the pre-tokenizer regexes on its own, as a tokenizer.json `Split` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Regex {
    /// GPT-2's regex (also what `ByteLevel` with `use_regex` runs).
    Gpt2,
    /// Llama 3's regex (`\p{N}{1,3}`).
    Llama3,
    /// Qwen 2's regex (single digits).
    Qwen2,
}

/// The matches of `re` in `text`, as byte ranges; together they cover the whole text.
pub(crate) fn regex_matches(re: Regex, text: &str) -> Vec<std::ops::Range<usize>> {
    let chars = Chars::new(text);
    let span = Span {
        c: &chars,
        start: 0,
        end: chars.chars.len(),
    };
    let mut ends = Vec::new();
    match re {
        Regex::Gpt2 => gpt2(&span, &mut ends),
        Regex::Llama3 => llama3(&span, &mut ends),
        Regex::Qwen2 => qwen2(&span, &mut ends),
    }
    let mut start = 0;
    ends.into_iter()
        .map(|end| {
            let r = chars.byte(start)..chars.byte(end);
            start = end;
            r
        })
        .collect()
}

type Stage = fn(&Span<'_>, &mut Vec<usize>);

/// One piece left by the previous stage; positions outside it have no class.
struct Span<'a> {
    c: &'a Chars,
    start: usize,
    end: usize,
}

impl Span<'_> {
    fn flags(&self, pos: usize) -> Flags {
        if pos >= self.start && pos < self.end {
            self.c.flags[pos]
        } else {
            Flags::NONE
        }
    }
    fn char(&self, pos: usize) -> Option<char> {
        (pos >= self.start && pos < self.end).then(|| self.c.chars[pos])
    }
    fn is(&self, pos: usize, c: char) -> bool {
        self.char(pos) == Some(c)
    }
    fn is_cr_or_lf(&self, pos: usize) -> bool {
        matches!(self.char(pos), Some('\r' | '\n'))
    }
    /// Length of a contraction (`'s 't 'm 'd 're 've 'll`) starting at `pos`, if any;
    /// `any_case` also accepts upper case letters.
    fn contraction(&self, pos: usize, any_case: bool) -> Option<usize> {
        if !self.is(pos, '\'') || pos + 1 >= self.end {
            return None;
        }
        let fold = |c: Option<char>| c.map(|c| if any_case { c.to_ascii_lowercase() } else { c });
        let a = fold(self.char(pos + 1));
        if matches!(a, Some('s' | 't' | 'm' | 'd')) {
            return Some(2);
        }
        if pos + 2 < self.end {
            let b = fold(self.char(pos + 2));
            if matches!(
                (a, b),
                (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
            ) {
                return Some(3);
            }
        }
        None
    }
    /// The run of whitespace starting at `pos`: its length, and the end of its last
    /// `\r` or `\n` (0 when it has none).
    fn whitespace_run(&self, pos: usize) -> (usize, usize) {
        let mut n = 0;
        let mut last_cr_lf_end = 0;
        while self.flags(pos + n).is_whitespace() {
            if self.is_cr_or_lf(pos + n) {
                last_cr_lf_end = pos + n + 1;
            }
            n += 1;
        }
        (n, last_cr_lf_end)
    }
}

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
fn gpt2(s: &Span<'_>, out: &mut Vec<usize>) {
    let mut pos = s.start;
    while pos < s.end {
        if let Some(n) = s.contraction(pos, false) {
            pos += n;
            out.push(pos);
            continue;
        }
        let space = s.is(pos, ' ');
        let head = if space {
            s.flags(pos + 1)
        } else {
            s.flags(pos)
        };
        let class: Option<fn(Flags) -> bool> = if head.is_letter() {
            Some(Flags::is_letter)
        } else if head.is_number() {
            Some(Flags::is_number)
        } else if head.is_other() {
            Some(Flags::is_other)
        } else {
            None
        };
        if let Some(class) = class {
            pos += usize::from(space);
            while class(s.flags(pos)) {
                pos += 1;
            }
            out.push(pos);
            continue;
        }
        pos = whitespace_or_single(s, pos, false);
        out.push(pos);
    }
}

/// The whitespace alternatives shared by the regexes, at a position where no earlier
/// alternative matched: `\s*[\r\n]+` (when `cr_lf`), `\s+(?!\S)`, `\s+`, else one
/// character on its own. Returns the end of the match.
fn whitespace_or_single(s: &Span<'_>, pos: usize, cr_lf: bool) -> usize {
    let (n, last_cr_lf_end) = s.whitespace_run(pos);
    if cr_lf && last_cr_lf_end > 0 {
        last_cr_lf_end
    } else if n > 1 && pos + n < s.end {
        pos + n - 1
    } else if n > 0 {
        pos + n
    } else {
        pos + 1
    }
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
fn llama3(s: &Span<'_>, out: &mut Vec<usize>) {
    llama3_like(s, out, 3);
}

/// `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
fn qwen2(s: &Span<'_>, out: &mut Vec<usize>) {
    llama3_like(s, out, 1);
}

fn llama3_like(s: &Span<'_>, out: &mut Vec<usize>, max_digits: usize) {
    let mut pos = s.start;
    while pos < s.end {
        let flags = s.flags(pos);
        if let Some(n) = s.contraction(pos, true) {
            pos += n;
            out.push(pos);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !s.is_cr_or_lf(pos)
            && !flags.is_number()
            && (flags.is_letter() || s.flags(pos + 1).is_letter())
        {
            pos += 1;
            while s.flags(pos).is_letter() {
                pos += 1;
            }
            out.push(pos);
            continue;
        }
        // \p{N}{1,max_digits}
        if flags.is_number() {
            let mut run = 0;
            while s.flags(pos).is_number() {
                pos += 1;
                run += 1;
                if run == max_digits {
                    out.push(pos);
                    run = 0;
                }
            }
            if run > 0 {
                out.push(pos);
            }
            continue;
        }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*'; a lone space at the very end lands here too.
        let space = s.is(pos, ' ');
        let head = if space { s.flags(pos + 1) } else { flags };
        if head.is_other() || (space && !head.is_some()) {
            pos += usize::from(space);
            while s.flags(pos).is_other() {
                pos += 1;
            }
            while s.is_cr_or_lf(pos) {
                pos += 1;
            }
            out.push(pos);
            continue;
        }
        pos = whitespace_or_single(s, pos, true);
        out.push(pos);
    }
}

/// Splits a span into the matches of a one-character class and the gaps between them;
/// with `runs`, consecutive matching characters form one match.
fn class_matches(s: &Span<'_>, out: &mut Vec<usize>, class: impl Fn(usize) -> bool, runs: bool) {
    let mut pos = s.start;
    while pos < s.end {
        if class(pos) {
            pos += 1;
            while runs && pos < s.end && class(pos) {
                pos += 1;
            }
        } else {
            while pos < s.end && !class(pos) {
                pos += 1;
            }
        }
        out.push(pos);
    }
}

/// `\p{N}`: every number character on its own.
fn each_number(s: &Span<'_>, out: &mut Vec<usize>) {
    class_matches(s, out, |p| s.flags(p).is_number(), false);
}

/// `\p{N}+`
fn number_runs(s: &Span<'_>, out: &mut Vec<usize>) {
    class_matches(s, out, |p| s.flags(p).is_number(), true);
}

/// `[\p{P}\$\+<=>\^~\|]+`
fn punctuation_runs(s: &Span<'_>, out: &mut Vec<usize>) {
    class_matches(
        s,
        out,
        |p| {
            s.flags(p).is_punctuation()
                || matches!(
                    s.char(p),
                    Some('$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
                )
        },
        true,
    );
}

/// `[0-9][0-9][0-9]`: groups of three ASCII digits, from the left of each run.
fn ascii_digit_triples(s: &Span<'_>, out: &mut Vec<usize>) {
    let digit = |p: usize| s.char(p).is_some_and(|c| c.is_ascii_digit());
    let mut pos = s.start;
    let mut gap_start = pos;
    while pos < s.end {
        if digit(pos) && digit(pos + 1) && digit(pos + 2) {
            if gap_start < pos {
                out.push(pos);
            }
            pos += 3;
            out.push(pos);
            gap_start = pos;
        } else {
            pos += 1;
        }
    }
    if gap_start < s.end {
        out.push(s.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(kind: PreTokenizer, text: &str) -> Vec<String> {
        let chars = Chars::new(text);
        let mut start = 0;
        split(kind, &chars)
            .into_iter()
            .map(|end| {
                let w = text[chars.byte(start)..chars.byte(end)].to_owned();
                start = end;
                w
            })
            .collect()
    }

    #[test]
    fn gpt2_keeps_a_leading_space_with_its_word_and_leaves_one_before_the_next() {
        assert_eq!(
            words(PreTokenizer::Gpt2, "Hello  world's 12!!\n"),
            ["Hello", " ", " world", "'s", " 12", "!!", "\n"]
        );
        assert_eq!(words(PreTokenizer::Gpt2, "   "), ["   "]);
        assert_eq!(words(PreTokenizer::Gpt2, "a \n b"), ["a", " \n", " b"]);
    }

    #[test]
    fn llama3_groups_digits_by_three_and_newlines_with_preceding_space() {
        assert_eq!(
            words(PreTokenizer::Llama3, "3333333 x"),
            ["333", "333", "3", " x"]
        );
        assert_eq!(
            words(PreTokenizer::Llama3, "a  \n\n b"),
            ["a", "  \n\n", " b"]
        );
        assert_eq!(
            words(PreTokenizer::Llama3, "I'VE (ok)\n"),
            ["I", "'VE", " (", "ok", ")\n"]
        );
        assert_eq!(words(PreTokenizer::Llama3, "\tHi"), ["\tHi"]);
    }

    #[test]
    fn qwen2_splits_every_digit() {
        assert_eq!(
            words(PreTokenizer::Qwen2, "ab 123"),
            ["ab", " ", "1", "2", "3"]
        );
    }

    #[test]
    fn smollm_splits_digits_before_the_gpt2_regex() {
        assert_eq!(
            words(PreTokenizer::Smollm, "x 42 ½y"),
            ["x", " ", "4", "2", " ", "½", "y"]
        );
    }

    #[test]
    fn default_splits_punctuation_runs_and_digit_triples() {
        assert_eq!(
            words(PreTokenizer::Default, "a+=b 12345"),
            ["a", "+=", "b", " ", "123", "45"]
        );
    }

    #[test]
    fn unknown_pre_tokenizer_names_the_supported_ones() {
        let e = PreConfig::from_name(Some("nope")).unwrap_err().to_string();
        assert!(
            e.contains("'nope'") && e.contains("smollm") && e.contains("qwen2"),
            "{e}"
        );
    }
}
