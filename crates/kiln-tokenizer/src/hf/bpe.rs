//! The tokenizer.json `BPE` model as `tokenizers` runs it: a word starts as one symbol per
//! character (its token, else its `<0xXX>` byte tokens with `byte_fallback`, else the
//! unknown token, consecutive ones fused with `fuse_unk`), then the adjacent pair with
//! the lowest merge rank merges, leftmost first on ties, until none applies.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use foldhash::fast::FixedState;

use super::json::{MergeJson, ModelJson, bad};
use crate::index::{StrIndex, Strings};
use crate::{Tokenizer, TokenizerError};

pub(crate) struct HfBpe {
    /// `(left, right)` → `(rank, merged)`; of duplicate rules the last wins, as in
    /// `tokenizers` (its map is collected in file order).
    merges: HashMap<(u32, u32), (u32, u32), FixedState>,
    /// Ids that are the model's own tokens (added tokens are not looked up by BPE).
    in_model: Vec<bool>,
    unk: Option<u32>,
    byte_fallback: bool,
    fuse_unk: bool,
    ignore_merges: bool,
    /// `<0xXX>` for each byte the vocabulary has.
    byte_tokens: Box<[Option<u32>; 256]>,
}

impl HfBpe {
    /// `texts`/`index` hold the whole vocabulary (model and added tokens); `in_model`
    /// marks the model's own.
    pub(crate) fn new(
        model: &ModelJson,
        texts: &Strings,
        index: &StrIndex,
        in_model: Vec<bool>,
    ) -> Result<HfBpe, TokenizerError> {
        if model
            .continuing_subword_prefix
            .as_deref()
            .is_some_and(|s| !s.is_empty())
            || model
                .end_of_word_suffix
                .as_deref()
                .is_some_and(|s| !s.is_empty())
        {
            return Err(TokenizerError::UnsupportedTokenizerJson {
                component: "model",
                found: "BPE with continuing_subword_prefix or end_of_word_suffix".into(),
                supported: "BPE without subword prefixes or word suffixes",
            });
        }
        if model.dropout.is_some_and(|d| d != 0.0) {
            return Err(TokenizerError::UnsupportedTokenizerJson {
                component: "model",
                found: "BPE with dropout (random merges)".into(),
                supported: "BPE with dropout null or 0",
            });
        }
        let lookup = |s: &str| {
            index
                .get(texts, s)
                .filter(|&id| in_model.get(id as usize).copied().unwrap_or(false))
        };
        let list = model.merges.as_deref().unwrap_or_default();
        let mut merges = HashMap::with_capacity_and_hasher(list.len(), FixedState::default());
        let mut joined = String::new();
        for (rank, m) in list.iter().enumerate() {
            let (a, b) = match m {
                MergeJson::Pair(a, b) => (a.as_str(), b.as_str()),
                MergeJson::Legacy(s) => {
                    let mut parts = s.split(' ');
                    match (parts.next(), parts.next(), parts.next()) {
                        (Some(a), Some(b), None) => (a, b),
                        _ => {
                            return Err(bad(
                                format!("model.merges[{rank}]"),
                                format!("two pieces separated by one space, not {s:?}"),
                            ));
                        }
                    }
                }
            };
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            let missing = |t: &str| TokenizerError::MergeOutOfVocabulary {
                index: rank,
                token: t.to_owned(),
            };
            let l = lookup(a).ok_or_else(|| missing(a))?;
            let r = lookup(b).ok_or_else(|| missing(b))?;
            let n = lookup(&joined).ok_or_else(|| missing(&joined))?;
            let rank = u32::try_from(rank).map_err(|_| bad("model.merges", "too many merges"))?;
            merges.insert((l, r), (rank, n));
        }
        let unk = match &model.unk_token {
            Some(t) => Some(lookup(t).ok_or_else(|| {
                bad("model.unk_token", format!("{t:?} is not in the vocabulary"))
            })?),
            None => None,
        };
        let mut byte_tokens = Box::new([None; 256]);
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = lookup(&format!("<0x{b:02X}>"));
        }
        Ok(HfBpe {
            merges,
            in_model,
            unk,
            byte_fallback: model.byte_fallback,
            fuse_unk: model.fuse_unk,
            ignore_merges: model.ignore_merges,
            byte_tokens,
        })
    }

    fn id(&self, tok: &Tokenizer, s: &str) -> Option<u32> {
        tok.index
            .get(&tok.texts, s)
            .filter(|&id| self.in_model.get(id as usize).copied().unwrap_or(false))
    }

    /// Tokenizes one pre-tokenized piece.
    pub(crate) fn encode(&self, tok: &Tokenizer, word: &str, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if self.ignore_merges
            && let Some(id) = self.id(tok, word)
        {
            out.push(id);
            return;
        }
        let mut symbols: Vec<Symbol> = Vec::with_capacity(word.len());
        let mut unk: Option<u32> = None;
        let mut buf = [0u8; 4];
        for c in word.chars() {
            let s: &str = c.encode_utf8(&mut buf);
            if let Some(id) = self.id(tok, s) {
                if let Some(u) = unk.take() {
                    symbols.push(Symbol::new(u));
                }
                symbols.push(Symbol::new(id));
                continue;
            }
            if self.byte_fallback && s.bytes().all(|b| self.byte_tokens[b as usize].is_some()) {
                // A pending unknown token stays pending here, as in `tokenizers`.
                symbols.extend(
                    s.bytes()
                        .filter_map(|b| self.byte_tokens[b as usize])
                        .map(Symbol::new),
                );
                continue;
            }
            if let Some(u) = self.unk {
                match unk {
                    Some(_) if self.fuse_unk => {}
                    Some(prev) => {
                        symbols.push(Symbol::new(prev));
                        unk = Some(u);
                    }
                    None => unk = Some(u),
                }
            }
        }
        if let Some(u) = unk {
            symbols.push(Symbol::new(u));
        }
        self.merge_all(&mut symbols);
        out.extend(symbols.iter().filter(|s| s.alive).map(|s| s.id));
    }

    fn merge_all(&self, symbols: &mut [Symbol]) {
        let n = symbols.len();
        for (i, s) in symbols.iter_mut().enumerate() {
            s.prev = i.checked_sub(1);
            s.next = (i + 1 < n).then_some(i + 1);
        }
        let mut heap = BinaryHeap::with_capacity(n);
        for i in 1..n {
            if let Some(&(rank, new_id)) = self.merges.get(&(symbols[i - 1].id, symbols[i].id)) {
                heap.push(Merge {
                    pos: i - 1,
                    rank,
                    new_id,
                });
            }
        }
        while let Some(top) = heap.pop() {
            let Some(cur) = symbols.get(top.pos) else {
                continue;
            };
            let Some(next) = cur.next.filter(|_| cur.alive) else {
                continue;
            };
            // An outdated entry: the pair there no longer merges into this token.
            let pair = (cur.id, symbols[next].id);
            if self.merges.get(&pair).is_none_or(|m| m.1 != top.new_id) {
                continue;
            }
            let after = symbols[next].next;
            symbols[next].alive = false;
            symbols[top.pos].id = top.new_id;
            symbols[top.pos].next = after;
            if let Some(a) = after {
                symbols[a].prev = Some(top.pos);
            }
            if let Some(p) = symbols[top.pos].prev
                && let Some(&(rank, new_id)) = self.merges.get(&(symbols[p].id, top.new_id))
            {
                heap.push(Merge {
                    pos: p,
                    rank,
                    new_id,
                });
            }
            if let Some(a) = after
                && let Some(&(rank, new_id)) = self.merges.get(&(top.new_id, symbols[a].id))
            {
                heap.push(Merge {
                    pos: top.pos,
                    rank,
                    new_id,
                });
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: Option<usize>,
    next: Option<usize>,
    alive: bool,
}

impl Symbol {
    fn new(id: u32) -> Symbol {
        Symbol {
            id,
            prev: None,
            next: None,
            alive: true,
        }
    }
}

struct Merge {
    pos: usize,
    rank: u32,
    new_id: u32,
}

impl PartialEq for Merge {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Merge {}
impl PartialOrd for Merge {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Merge {
    /// The max-heap pops the lowest rank first, and of equal ranks the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.pos.cmp(&self.pos))
    }
}
