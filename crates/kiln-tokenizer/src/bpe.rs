//! GPT-2 byte-level BPE: each pre-tokenized word becomes one symbol per UTF-8 byte (in
//! GPT-2's byte alphabet), and adjacent pairs merge by rank, lowest first, as llama.cpp's
//! `llm_tokenizer_bpe_session` does, with a priority queue so a word of n bytes costs
//! O(n log n).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use foldhash::fast::FixedState;

use crate::index::{StrIndex, Strings};
use crate::pretok::{self, Chars, PreConfig};
use crate::unicode::BYTE_TO_CHAR;
use crate::{Tokenizer, TokenizerError};

/// No piece: a byte-level character that is neither a token nor part of any merge.
const NO_PIECE: u32 = u32::MAX;

pub(crate) struct Bpe {
    pub(crate) pre: PreConfig,
    /// `(left piece, right piece)` → `(rank, merged piece)`. Piece ids below the vocabulary
    /// size are token ids; the others index `extra`.
    ranks: HashMap<(u32, u32), (u32, u32), FixedState>,
    /// Merge parts and results that are not tokens themselves.
    extra: Strings,
    extra_index: StrIndex,
    byte_piece: [u32; 256],
    n_vocab: u32,
}

impl Bpe {
    pub(crate) fn new(
        texts: &Strings,
        index: &StrIndex,
        merges: &[String],
        pre: PreConfig,
    ) -> Result<Bpe, TokenizerError> {
        let n_vocab = u32::try_from(texts.len()).unwrap_or(u32::MAX);
        let mut bpe = Bpe {
            pre,
            ranks: HashMap::with_capacity_and_hasher(merges.len(), FixedState::default()),
            extra: Strings::default(),
            extra_index: StrIndex::default(),
            byte_piece: [NO_PIECE; 256],
            n_vocab,
        };
        let mut merged = String::new();
        for (i, merge) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte.
            let split = merge
                .as_bytes()
                .iter()
                .skip(1)
                .position(|&b| b == b' ')
                .map(|p| p + 1);
            let (Some(split), Ok(rank)) = (split, u32::try_from(i)) else {
                return Err(TokenizerError::BadMerge {
                    index: i,
                    merge: merge.clone(),
                });
            };
            let (left, right) = (&merge[..split], &merge[split + 1..]);
            if right.is_empty() {
                continue; // can never apply: symbols are never empty
            }
            let l = bpe.intern(texts, index, left);
            let r = bpe.intern(texts, index, right);
            merged.clear();
            merged.push_str(left);
            merged.push_str(right);
            let m = bpe.intern(texts, index, &merged);
            // The first rule for a pair wins, as with llama.cpp's `emplace`.
            bpe.ranks.entry((l, r)).or_insert((rank, m));
        }
        let mut buf = [0u8; 4];
        for b in 0..=255u8 {
            let s: &str = BYTE_TO_CHAR[b as usize].encode_utf8(&mut buf);
            bpe.byte_piece[b as usize] = bpe.lookup(texts, index, s).unwrap_or(NO_PIECE);
        }
        Ok(bpe)
    }

    fn lookup(&self, texts: &Strings, index: &StrIndex, s: &str) -> Option<u32> {
        index.get(texts, s).or_else(|| {
            self.extra_index
                .get(&self.extra, s)
                .map(|i| self.n_vocab.saturating_add(i))
        })
    }

    fn intern(&mut self, texts: &Strings, index: &StrIndex, s: &str) -> u32 {
        if let Some(id) = self.lookup(texts, index, s) {
            return id;
        }
        let i = u32::try_from(self.extra.len()).unwrap_or(u32::MAX);
        self.extra.push(s);
        // A fresh string cannot collide.
        let _ = self.extra_index.insert(&self.extra, i);
        self.n_vocab.saturating_add(i)
    }

    /// Tokenizes one fragment of raw text (no special tokens in it).
    pub(crate) fn encode(&self, tok: &Tokenizer, text: &str, out: &mut Vec<u32>) {
        let chars = Chars::new(text);
        let ends = pretok::split(self.pre.kind, &chars);
        let mut scratch = Scratch::default();
        let mut start = 0;
        for end in ends {
            let word = text
                .get(chars.byte(start)..chars.byte(end))
                .unwrap_or_default();
            start = end;
            self.encode_word(tok, word, &mut scratch, out);
        }
    }

    fn encode_word(&self, tok: &Tokenizer, word: &str, s: &mut Scratch, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if self.pre.ignore_merges {
            s.encoded.clear();
            s.encoded
                .extend(word.bytes().map(|b| BYTE_TO_CHAR[b as usize]));
            if let Some(id) = tok.index.get(&tok.texts, &s.encoded) {
                out.push(id);
                return;
            }
        }
        s.symbols.clear();
        s.heap.clear();
        let n = word.len();
        s.symbols
            .extend(word.bytes().enumerate().map(|(i, b)| Symbol {
                piece: self.byte_piece[b as usize],
                byte: b,
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
                alive: true,
            }));
        for i in 1..n {
            self.push_pair(s, i - 1, i);
        }
        while let Some(pair) = s.heap.pop() {
            let (l, r) = (pair.left, pair.right);
            let (Some(left), Some(right)) = (s.symbols.get(l), s.symbols.get(r)) else {
                continue;
            };
            if !left.alive
                || !right.alive
                || left.piece != pair.left_piece
                || right.piece != pair.right_piece
            {
                continue; // outdated
            }
            let next = right.next;
            s.symbols[r].alive = false;
            s.symbols[l].piece = pair.merged;
            s.symbols[l].next = next;
            if let Some(nx) = next {
                s.symbols[nx].prev = Some(l);
            }
            if let Some(pv) = s.symbols[l].prev {
                self.push_pair(s, pv, l);
            }
            if let Some(nx) = next {
                self.push_pair(s, l, nx);
            }
        }
        let mut i = Some(0);
        while let Some(k) = i {
            let Some(sym) = s.symbols.get(k) else { break };
            i = sym.next;
            if sym.piece < self.n_vocab {
                out.push(sym.piece);
                continue;
            }
            // Not a token: llama.cpp looks each byte of the symbol's text up as a
            // one-byte token, and drops the bytes that are not.
            let mut buf = [0u8; 4];
            let text: &str = if sym.piece == NO_PIECE {
                BYTE_TO_CHAR[sym.byte as usize].encode_utf8(&mut buf)
            } else {
                let extra = sym.piece - self.n_vocab;
                self.extra.str(extra)
            };
            for b in text.bytes().filter(u8::is_ascii) {
                let one = [b];
                let one = std::str::from_utf8(&one).unwrap_or_default();
                out.extend(tok.index.get(&tok.texts, one));
            }
        }
    }

    fn push_pair(&self, s: &mut Scratch, left: usize, right: usize) {
        let (Some(l), Some(r)) = (s.symbols.get(left), s.symbols.get(right)) else {
            return;
        };
        if let Some(&(rank, merged)) = self.ranks.get(&(l.piece, r.piece)) {
            s.heap.push(Pair {
                rank,
                left,
                right,
                left_piece: l.piece,
                right_piece: r.piece,
                merged,
            });
        }
    }
}

#[derive(Default)]
struct Scratch {
    symbols: Vec<Symbol>,
    heap: BinaryHeap<Pair>,
    encoded: String,
}

struct Symbol {
    piece: u32,
    /// The first byte of the symbol (its only one while it has no piece).
    byte: u8,
    prev: Option<usize>,
    next: Option<usize>,
    alive: bool,
}

struct Pair {
    rank: u32,
    left: usize,
    right: usize,
    left_piece: u32,
    right_piece: u32,
    merged: u32,
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
    /// The max-heap pops the lowest rank first, and of equal ranks the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}
