//! The vocabulary as the constrained sampler and DRY see it: each token's bytes, the
//! end-of-generation ids, and a byte trie over all tokens for the grammar mask.
//!
//! The caller builds it from its tokenizer (`kiln-sample` does not depend on
//! `kiln-tokenizer`): give each token the bytes it renders to, and an empty string for
//! tokens that must never be produced under a grammar (control tokens).

use std::sync::{Arc, Mutex, OnceLock};

const NO_TOKEN: u32 = u32::MAX;

/// Token byte strings plus the end-of-generation set. Build once per model and share it
/// (`Arc<Vocab>`): the trie is built lazily on first use and kept.
#[derive(Debug)]
pub struct Vocab {
    bytes: Vec<u8>,
    ends: Vec<u32>,
    /// Sorted, deduplicated.
    eog: Vec<u32>,
    trie: OnceLock<Trie>,
    /// Token sets by the strings they contain (DRY sequence breakers), computed once.
    containing: Mutex<Vec<(Vec<String>, Arc<TokenMask>)>>,
}

impl Vocab {
    /// `tokens[id]` is the byte string of token `id`; `eog` the end-of-generation ids.
    pub fn new<I, B>(tokens: I, eog: &[u32]) -> Vocab
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for t in tokens {
            bytes.extend_from_slice(t.as_ref());
            ends.push(bytes.len() as u32);
        }
        let mut eog = eog.to_vec();
        eog.sort_unstable();
        eog.dedup();
        Vocab {
            bytes,
            ends,
            eog,
            trie: OnceLock::new(),
            containing: Mutex::new(Vec::new()),
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of token `id` (empty outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        let Some(&end) = self.ends.get(i) else {
            return &[];
        };
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start as usize..end as usize]
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// The tokens whose bytes contain any of `needles` (cached per list).
    pub fn tokens_containing(&self, needles: &[String]) -> Arc<TokenMask> {
        let mut cache = self.containing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, m)) = cache.iter().find(|(k, _)| k == needles) {
            return Arc::clone(m);
        }
        let mut mask = TokenMask::new(self.len());
        for id in 0..self.len() as u32 {
            let b = self.token_bytes(id);
            let hit = needles.iter().any(|n| {
                let n = n.as_bytes();
                !n.is_empty() && n.len() <= b.len() && b.windows(n.len()).any(|w| w == n)
            });
            if hit {
                mask.insert(id);
            }
        }
        let mask = Arc::new(mask);
        cache.push((needles.to_vec(), Arc::clone(&mask)));
        mask
    }

    pub(crate) fn trie(&self) -> &Trie {
        self.trie.get_or_init(|| Trie::build(self))
    }
}

/// One trie node, stored in depth-first preorder. A node's subtree is the run of nodes
/// after it up to `skip`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Node {
    /// The first token whose bytes end here, or `NO_TOKEN` (more in `Trie::dup_next`).
    pub token: u32,
    /// Index of the first node after this one's subtree.
    pub skip: u32,
    pub byte: u8,
    /// 1 when more tokens than `token` end here (see `Trie::dup_next`).
    pub dups: u8,
    /// 1 for a child of the root.
    pub depth: u16,
}
const _: () = assert!(std::mem::size_of::<Node>() == 12);

/// Byte trie over all non-empty tokens of at most `u16::MAX` bytes, except the
/// end-of-generation ones (those are allowed only when the grammar is complete).
#[derive(Debug)]
pub(crate) struct Trie {
    pub nodes: Vec<Node>,
    /// For each token id: the next token with the same bytes, or `NO_TOKEN`.
    pub dup_next: Vec<u32>,
    pub max_depth: usize,
}

impl Trie {
    fn build(v: &Vocab) -> Trie {
        let n = v.len();
        let mut ids: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                let l = v.token_bytes(id).len();
                l > 0 && l <= u16::MAX as usize && !v.is_eog(id)
            })
            .collect();
        ids.sort_unstable_by(|&a, &b| v.token_bytes(a).cmp(v.token_bytes(b)).then(a.cmp(&b)));
        let mut nodes: Vec<Node> = Vec::new();
        let mut dup_next = vec![NO_TOKEN; n];
        // open[d] = index of the open node at depth d+1 on the current path.
        let mut open: Vec<usize> = Vec::new();
        let mut prev: &[u8] = &[];
        let mut prev_id = NO_TOKEN;
        let mut max_depth = 0;
        for &id in &ids {
            let b = v.token_bytes(id);
            if b == prev {
                dup_next[prev_id as usize] = id;
                prev_id = id;
                if let Some(&i) = open.last() {
                    nodes[i].dups = 1;
                }
                continue;
            }
            let lcp = prev.iter().zip(b).take_while(|(x, y)| x == y).count();
            while open.len() > lcp {
                if let Some(i) = open.pop() {
                    nodes[i].skip = nodes.len() as u32;
                }
            }
            for (d, &byte) in b.iter().enumerate().skip(lcp) {
                open.push(nodes.len());
                nodes.push(Node {
                    token: NO_TOKEN,
                    skip: 0,
                    byte,
                    dups: 0,
                    depth: (d + 1) as u16,
                });
            }
            if let Some(&i) = open.last() {
                nodes[i].token = id;
            }
            max_depth = max_depth.max(b.len());
            prev = b;
            prev_id = id;
        }
        let end = nodes.len() as u32;
        for i in open {
            nodes[i].skip = end;
        }
        Trie {
            nodes,
            dup_next,
            max_depth,
        }
    }

    /// Calls `f` for every token whose bytes end at `node`.
    #[inline]
    pub fn for_tokens(&self, node: &Node, mut f: impl FnMut(u32)) {
        if node.token == NO_TOKEN {
            return;
        }
        f(node.token);
        if node.dups != 0 {
            let mut t = self.dup_next[node.token as usize];
            while t != NO_TOKEN {
                f(t);
                t = self.dup_next[t as usize];
            }
        }
    }
}

/// A set of allowed token ids (a bitset over the vocabulary).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenMask {
    words: Vec<u64>,
    len: usize,
}

impl TokenMask {
    /// An empty mask over `len` ids.
    pub fn new(len: usize) -> TokenMask {
        TokenMask {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// Empties the mask, resizing it to `len` ids.
    pub fn clear(&mut self, len: usize) {
        self.words.clear();
        self.words.resize(len.div_ceil(64), 0);
        self.len = len;
    }

    #[inline]
    pub fn insert(&mut self, id: u32) {
        if (id as usize) < self.len {
            self.words[id as usize / 64] |= 1 << (id % 64);
        }
    }

    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        (id as usize) < self.len && self.words[id as usize / 64] & (1 << (id % 64)) != 0
    }

    /// Number of allowed ids.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Number of ids the mask ranges over.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The allowed ids, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }

    pub(crate) fn copy_from(&mut self, other: &TokenMask) {
        self.words.clear();
        self.words.extend_from_slice(&other.words);
        self.len = other.len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trie_is_preorder_with_subtree_skips_and_shared_bytes() {
        let v = Vocab::new(["ab", "a", "b", "abc", "", "ab"], &[]);
        let t = v.trie();
        let bytes: Vec<(u8, u16)> = t.nodes.iter().map(|n| (n.byte, n.depth)).collect();
        assert_eq!(
            bytes,
            vec![(b'a', 1), (b'b', 2), (b'c', 3), (b'b', 1)],
            "one node per distinct prefix, in preorder"
        );
        assert_eq!(t.nodes[0].skip, 3);
        assert_eq!(t.nodes[1].skip, 3);
        assert_eq!(t.nodes[3].skip, 4);
        let mut at_ab = Vec::new();
        t.for_tokens(&t.nodes[1], |id| at_ab.push(id));
        assert_eq!(at_ab, vec![0, 5]);
    }

    #[test]
    fn mask_iterates_its_ids_in_order() {
        let mut m = TokenMask::new(200);
        for id in [3, 64, 199, 0] {
            m.insert(id);
        }
        m.insert(500);
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![0, 3, 64, 199]);
        assert_eq!(m.count(), 4);
        assert!(m.contains(64) && !m.contains(65) && !m.contains(500));
    }
}
