//! Ids back to text: pieces, llama.cpp's `llama_detokenize`, and a streaming decoder that
//! never splits a UTF-8 character.

use crate::unicode::char_to_byte;
use crate::{Tokenizer, VocabKind, attr};

/// What becomes of the leading space of a decoded text's first piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FirstPiece {
    /// llama.cpp: with `add_space_prefix`, the first id's piece loses one leading space.
    Llama,
    /// Nothing is dropped.
    Keep,
    /// `tokenizers`' `Strip(' ', 1, 0)` after `Fuse`: the text's first character, if a
    /// space, is dropped (control tokens, skipped, do not count).
    StripSpace,
    /// `tokenizers`' `Metaspace` decoder: the first rendered token loses its markers.
    DropMarkers,
}

/// Appends the decoded piece of `id` (`special = false`) to `out`; `first` says the
/// first-piece rule still applies and is cleared once it has.
pub(crate) fn push_piece(tok: &Tokenizer, id: u32, first: &mut bool, out: &mut Vec<u8>) {
    match tok.first_piece {
        FirstPiece::Llama => {
            let lstrip = *first && tok.add_space_prefix;
            *first = false;
            out.extend_from_slice(piece(tok, id, lstrip, false));
        }
        FirstPiece::Keep => out.extend_from_slice(piece(tok, id, false, false)),
        FirstPiece::StripSpace | FirstPiece::DropMarkers => {
            let p = piece(tok, id, false, false);
            if !*first || p.is_empty() {
                out.extend_from_slice(p);
                return;
            }
            *first = false;
            if tok.first_piece == FirstPiece::StripSpace {
                out.extend_from_slice(p.strip_prefix(b" ").unwrap_or(p));
            } else if tok.attr(id) & attr::NORMAL != 0 {
                out.extend(p.iter().copied().filter(|&b| b != b' '));
            } else {
                out.extend_from_slice(p);
            }
        }
    }
}

/// `token_to_piece(id, lstrip, special)` over the piece cache.
pub(crate) fn piece(tok: &Tokenizer, id: u32, lstrip: bool, special: bool) -> &[u8] {
    if !special && tok.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0 {
        return &[];
    }
    let p = tok.token_bytes(id);
    if lstrip {
        p.strip_prefix(b" ").unwrap_or(p)
    } else {
        p
    }
}

/// A token's piece with `special = true`, as llama.cpp caches it at load.
pub(crate) fn render(kind: VocabKind, text: &str, token_attr: u16, out: &mut Vec<u8>) {
    if token_attr & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
        out.extend_from_slice(text.as_bytes());
    } else if token_attr & attr::NORMAL != 0 {
        match kind {
            VocabKind::Spm => {
                let mut parts = text.split('\u{2581}');
                out.extend_from_slice(parts.next().unwrap_or_default().as_bytes());
                for part in parts {
                    out.push(b' ');
                    out.extend_from_slice(part.as_bytes());
                }
            }
            VocabKind::Bpe(_) => {
                for c in text.chars() {
                    match char_to_byte(c) {
                        Some(b) => out.push(b),
                        None => {
                            // llama.cpp's marker for a character outside the byte alphabet.
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(b"[UNK_BYTE_0x");
                            for b in c.encode_utf8(&mut buf).bytes() {
                                out.extend_from_slice(format!("{b:02x}").as_bytes());
                            }
                            out.extend_from_slice(text.as_bytes());
                            out.push(b']');
                        }
                    }
                }
            }
        }
    } else if token_attr & attr::BYTE != 0 {
        // `<0xXX>`: the two hex digits after "<0x".
        let byte = text
            .get(3..5)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0);
        out.push(byte);
    }
}

pub(crate) fn detokenize(
    tok: &Tokenizer,
    ids: &[u32],
    remove_special: bool,
    unparse_special: bool,
) -> String {
    let mut ids = ids;
    let mut remove_space = tok.add_space_prefix;
    if remove_special && tok.add_bos && ids.first().is_some_and(|&id| Some(id) == tok.ids.bos) {
        remove_space = false;
        ids = &ids[1..];
    }
    if remove_special && tok.add_eos && ids.last().is_some_and(|&id| Some(id) == tok.ids.eos) {
        ids = &ids[..ids.len() - 1];
    }
    let mut text = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        text.extend_from_slice(piece(tok, id, remove_space && i == 0, unparse_special));
    }
    if tok.clean_spaces {
        clean_up_spaces(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// llama.cpp's three `clean_spaces` passes, each rewriting the buffer in place: drop the
/// space before `? ! . ,`; drop both spaces around a lone `'`; drop the space before
/// `'s 'm 're 've`.
fn clean_up_spaces(t: &mut Vec<u8>) {
    // Pass 1: " ?", " !", " .", " ,"
    let n = t.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);

    // Pass 2: " ' " → "'". The skipped space is overwritten with NUL, which the next
    // step then sees as its left neighbour (as llama.cpp does).
    let n = t.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = t[i];
        if x == b'\'' && i + 1 < n && t[i - 1] == b' ' && t[i + 1] == b' ' {
            total -= 1;
            i += 1;
            t[i] = 0;
        }
        t[total] = x;
        total += 1;
        i += 1;
    }
    t.truncate(total);

    // Pass 3: " 's", " 'm", " 're", " 've" lose their space (" 't", " 'd", " 'll" keep it).
    let n = t.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = t[i + 1];
            if matches!(x1, b's' | b'm') {
                total -= 1;
            } else if !matches!(x1, b't' | b'd') && i + 2 < n {
                let x2 = t[i + 2];
                if matches!((x1, x2), (b'r', b'e') | (b'v', b'e')) {
                    total -= 1;
                }
            }
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);
}

/// Decodes ids one at a time, for streaming generated text.
///
/// [`push`](StreamDecoder::push) returns the text completed by each id and holds back the
/// bytes of a UTF-8 character that is still incomplete (an emoji spread over several
/// byte tokens); [`finish`](StreamDecoder::finish) flushes what is left, with U+FFFD for
/// bytes that never formed a character. Over any sequence, the concatenated output equals
/// [`Tokenizer::decode`] of the whole sequence.
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    pending: Vec<u8>,
    /// The first-piece rule (SentencePiece's leading space) still applies.
    first: bool,
    strip_first: bool,
}

impl<'t> StreamDecoder<'t> {
    /// Decodes like [`Tokenizer::decode`], including its first-token space rule.
    pub fn new(tok: &'t Tokenizer) -> StreamDecoder<'t> {
        StreamDecoder {
            tok,
            pending: Vec::new(),
            first: true,
            strip_first: true,
        }
    }

    /// For ids that continue a text already decoded (generated tokens after a prompt):
    /// no leading space is ever dropped, as in llama-server's streamed content.
    pub fn continuing(tok: &'t Tokenizer) -> StreamDecoder<'t> {
        StreamDecoder {
            first: false,
            strip_first: false,
            ..StreamDecoder::new(tok)
        }
    }

    /// Reserves room for `bytes` bytes of an incomplete character's pending pieces, so
    /// that pieces up to that long never grow the decoder's buffer.
    pub fn reserve(&mut self, bytes: usize) {
        self.pending.reserve(bytes);
    }

    /// Adds one id; returns the text it completes (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        let mut out = String::new();
        self.push_into(id, &mut out);
        out
    }

    /// [`StreamDecoder::push`] appending to `out`, so a caller that keeps one buffer
    /// allocates nothing per token.
    pub fn push_into(&mut self, id: u32, out: &mut String) {
        push_piece(self.tok, id, &mut self.first, &mut self.pending);
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = after.get(n..).unwrap_or_default();
                        }
                        None => {
                            rest = after; // an incomplete character: wait for more
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
    }

    /// Flushes held bytes (an incomplete character becomes U+FFFD) and starts over.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.first = self.strip_first;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::clean_up_spaces;

    fn clean(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_up_spaces(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn clean_up_drops_spaces_before_punctuation_and_some_contractions() {
        assert_eq!(clean("Hello , world !"), "Hello, world!");
        assert_eq!(clean("it ' s"), "it's");
        assert_eq!(
            clean("he 's here , I 'm sure they 've we 'll"),
            "he's here, I'm sure they've we 'll"
        );
        assert_eq!(clean("don 't"), "don 't");
    }
}
