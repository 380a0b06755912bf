//! SentencePiece as llama.cpp runs it (`llm_tokenizer_spm_session`): start from one symbol
//! per character, repeatedly merge the adjacent pair whose concatenation is the
//! highest-scoring token (leftmost on ties), and spell any character that never became a
//! token with its UTF-8 bytes' `<0xXX>` tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::{Tokenizer, TokenizerError};

/// Tokenizes one fragment whose spaces are already escaped as `▁`.
pub(crate) fn encode(
    tok: &Tokenizer,
    text: &str,
    out: &mut Vec<u32>,
) -> Result<(), TokenizerError> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    let n = text.chars().count();
    for (i, (start, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: (i + 1 < n).then_some(i + 1),
        });
    }
    let mut heap = BinaryHeap::new();
    for i in 1..symbols.len() {
        push_pair(tok, text, &symbols, &mut heap, i - 1, i);
    }
    while let Some(pair) = heap.pop() {
        let (l, r) = (pair.left, pair.right);
        let (Some(left), Some(right)) = (symbols.get(l), symbols.get(r)) else {
            continue;
        };
        // Either side already merged elsewhere: the pair is outdated.
        if left.len == 0 || right.len == 0 || left.len + right.len != pair.len {
            continue;
        }
        let next = right.next;
        symbols[l].len += symbols[r].len;
        symbols[r].len = 0;
        symbols[l].next = next;
        if let Some(nx) = next {
            symbols[nx].prev = Some(l);
        }
        if let Some(pv) = symbols[l].prev {
            push_pair(tok, text, &symbols, &mut heap, pv, l);
        }
        if let Some(nx) = next {
            push_pair(tok, text, &symbols, &mut heap, l, nx);
        }
    }
    let mut i = (!symbols.is_empty()).then_some(0);
    while let Some(k) = i {
        let Some(sym) = symbols.get(k) else { break };
        i = sym.next;
        let piece = text.get(sym.start..sym.start + sym.len).unwrap_or_default();
        match tok.index.get(&tok.texts, piece) {
            Some(id) => out.push(id),
            None => {
                for b in piece.bytes() {
                    out.push(
                        tok.byte_tokens[b as usize]
                            .ok_or(TokenizerError::MissingByteToken { byte: b })?,
                    );
                }
            }
        }
    }
    Ok(())
}

fn push_pair(
    tok: &Tokenizer,
    text: &str,
    symbols: &[Symbol],
    heap: &mut BinaryHeap<Pair>,
    left: usize,
    right: usize,
) {
    let (Some(l), Some(r)) = (symbols.get(left), symbols.get(right)) else {
        return;
    };
    let len = l.len + r.len;
    let Some(joined) = text.get(l.start..l.start + len) else {
        return;
    };
    if let Some(id) = tok.index.get(&tok.texts, joined) {
        heap.push(Pair {
            score: tok.scores.get(id as usize).copied().unwrap_or(0.0),
            left,
            right,
            len,
        });
    }
}

struct Symbol {
    start: usize,
    /// Byte length; 0 once merged into the symbol on its left.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Pair {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Pair {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Pair {}
impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pair {
    /// The max-heap pops the highest score first, and of equal scores the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        // `partial_cmp` as C++'s `<` sees floats: 0.0 and -0.0 tie.
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}
