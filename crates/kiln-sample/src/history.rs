//! The recent-token window the penalties and DRY look at (prompt tokens included).

use std::collections::VecDeque;

#[derive(Clone, Debug, Default)]
pub(crate) struct History {
    tokens: VecDeque<u32>,
    cap: usize,
}

impl History {
    pub fn new(cap: usize) -> History {
        History {
            tokens: VecDeque::with_capacity(cap),
            cap,
        }
    }

    pub fn push(&mut self, id: u32) {
        if self.cap == 0 {
            return;
        }
        if self.tokens.len() == self.cap {
            self.tokens.pop_front();
        }
        self.tokens.push_back(id);
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The last `n` tokens, oldest first.
    pub fn last(&self, n: usize) -> impl Iterator<Item = u32> + '_ {
        self.tokens
            .iter()
            .skip(self.tokens.len().saturating_sub(n))
            .copied()
    }

    /// The last `n` tokens, newest first.
    pub fn last_rev(&self, n: usize) -> impl Iterator<Item = u32> + '_ {
        self.tokens.iter().rev().take(n).copied()
    }
}
