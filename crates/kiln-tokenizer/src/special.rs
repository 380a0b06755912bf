//! Special-token partitioning (llama.cpp's `tokenizer_st_partition`): before any BPE or
//! SentencePiece work, every control, user-defined and unknown token written in the text
//! is cut out as a token of its own. Tokens are taken longest first; each splits every
//! remaining text fragment at all of its (non-overlapping, left to right) occurrences.
//! Control and unknown tokens are only matched when `parse_special`; user-defined ones
//! always.

use std::ops::Range;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, MatchKind};

use crate::index::Strings;
use crate::{Tokenizer, attr};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(u32),
}

pub(crate) struct Specials {
    /// Control, user-defined and unknown tokens, longest text first (ties by id).
    order: Vec<u32>,
    /// Finds which of them occur in a text at all, so the exact (and slower) partition
    /// only runs over those. Built on first use.
    finder: OnceLock<Option<AhoCorasick>>,
}

impl Specials {
    pub(crate) fn new(texts: &Strings, attrs: &[u16]) -> Specials {
        let mut order: Vec<u32> = (0..texts.len())
            .filter(|&i| attrs[i] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
            .filter_map(|i| u32::try_from(i).ok())
            .collect();
        order.sort_by_key(|&id| std::cmp::Reverse(texts.str(id).len()));
        Specials {
            order,
            finder: OnceLock::new(),
        }
    }

    pub(crate) fn partition(
        &self,
        tok: &Tokenizer,
        text: &str,
        parse_special: bool,
    ) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(0..text.len())];
        let wanted = |id: u32| parse_special || tok.attr(id) & (attr::CONTROL | attr::UNKNOWN) == 0;
        let finder = self.finder.get_or_init(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .build(self.order.iter().map(|&id| tok.token_text(id)))
                .ok()
        });
        let candidates: Vec<u32> = match finder {
            Some(ac) => {
                let mut present = vec![false; self.order.len()];
                for m in ac.find_overlapping_iter(text) {
                    if let Some(p) = present.get_mut(m.pattern().as_usize()) {
                        *p = true;
                    }
                }
                self.order
                    .iter()
                    .zip(present)
                    .filter_map(|(&id, p)| p.then_some(id))
                    .collect()
            }
            None => self.order.clone(),
        };
        for id in candidates.into_iter().filter(|&id| wanted(id)) {
            let needle = tok.token_text(id);
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for f in fragments {
                let Fragment::Text(range) = f else {
                    next.push(f);
                    continue;
                };
                let Some(hay) = text.get(range.clone()) else {
                    continue;
                };
                let mut at = range.start;
                for (offset, _) in hay.match_indices(needle) {
                    let start = range.start + offset;
                    if start > at {
                        next.push(Fragment::Text(at..start));
                    }
                    next.push(Fragment::Token(id));
                    at = start + needle.len();
                }
                if at < range.end {
                    next.push(Fragment::Text(at..range.end));
                }
            }
            fragments = next;
        }
        fragments
    }
}
