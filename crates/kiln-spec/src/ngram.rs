//! Prompt lookup: the draft is what followed the earlier occurrence of the text's end that
//! matches it longest (up to `max_n` tokens; among equally long matches the most recent).
//! No second model; it wins where the output repeats the input (code edits, summaries,
//! quoting).
//!
//! How much to draft follows how much matched: a match of `m` tokens drafts at most
//! `2·m` ([`NgramDrafter::cap`]). A one-token match is weak evidence (a common token such
//! as `///` or a newline recurs all over the text, followed by something else each time),
//! while a long match pins down the place being copied, whose continuation the output
//! then follows for as long as the copy lasts. So a copy starts with short drafts and
//! reaches long ones within a few steps, and a chance match costs one or two positions.

/// An n-gram drafter over the tokens so far (prompt and generated).
#[derive(Clone, Debug)]
pub struct NgramDrafter {
    min_n: usize,
    max_n: usize,
}

impl NgramDrafter {
    /// Matches suffixes of `max_n` down to `min_n` tokens (`1 ≤ min_n ≤ max_n`).
    pub fn new(min_n: usize, max_n: usize) -> NgramDrafter {
        let min_n = min_n.max(1);
        NgramDrafter {
            min_n,
            max_n: max_n.max(min_n),
        }
    }

    /// The most tokens drafted after a match of `m` tokens.
    pub fn cap(m: usize) -> usize {
        m.saturating_mul(2)
    }

    /// Appends up to `k` drafted tokens continuing `history` to `out` (at most
    /// [`NgramDrafter::cap`] of the match length), and returns the match length: 0, and
    /// nothing drafted, when no suffix of at least `min_n` tokens occurs earlier. The
    /// search is one pass over `history` and allocates nothing.
    pub fn draft(&self, history: &[u32], k: usize, out: &mut Vec<u32>) -> usize {
        let len = history.len();
        if k == 0 || len < 2 {
            return 0;
        }
        let last = history[len - 1];
        let max_n = self.max_n.min(len - 1);
        // (match length, where its continuation starts)
        let mut best = (0usize, 0usize);
        // `i`: where an earlier occurrence ends (it has a continuation: `i + 1 < len`).
        for i in (0..len - 1).rev() {
            if history[i] != last {
                continue;
            }
            let mut m = 1;
            while m < max_n && m <= i && history[i - m] == history[len - 1 - m] {
                m += 1;
            }
            if m > best.0 {
                best = (m, i + 1);
                if m == max_n {
                    break;
                }
            }
        }
        let (m, from) = best;
        if m < self.min_n {
            return 0;
        }
        let to = (from + k.min(Self::cap(m))).min(len);
        out.extend_from_slice(&history[from..to]);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_what_followed_the_longest_recent_match() {
        let d = NgramDrafter::new(1, 3);
        let mut out = Vec::new();
        // "1 2 3 9 | 5 1 2 3 7 | 1 2 3": the last "1 2 3" was followed by 7 most recently.
        assert_eq!(
            d.draft(&[1, 2, 3, 9, 5, 1, 2, 3, 7, 1, 2, 3], 4, &mut out),
            3
        );
        assert_eq!(out, [7, 1, 2, 3]);
    }

    #[test]
    fn prefers_the_longer_match_over_the_more_recent_one() {
        let d = NgramDrafter::new(1, 8);
        let mut out = Vec::new();
        // "4 1 2 3" matches at the start (followed by 8); "1 2 3" alone, later, by 9.
        let h = [4, 1, 2, 3, 8, 0, 1, 2, 3, 9, 4, 1, 2, 3];
        assert_eq!(d.draft(&h, 2, &mut out), 4);
        assert_eq!(out, [8, 0]);
    }

    #[test]
    fn drafts_at_most_twice_the_match_length() {
        let d = NgramDrafter::new(1, 4);
        let mut out = Vec::new();
        // "5" matches once, one token long: two tokens at most, however many are asked.
        assert_eq!(d.draft(&[5, 1, 2, 3, 4, 6, 7, 5], 8, &mut out), 1);
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn falls_back_to_shorter_suffixes_and_drafts_nothing_without_a_match() {
        let d = NgramDrafter::new(1, 3);
        let mut out = Vec::new();
        assert_eq!(d.draft(&[4, 5, 6, 8, 6], 2, &mut out), 1);
        assert_eq!(out, [8, 6]);
        out.clear();
        assert_eq!(d.draft(&[1, 2, 3], 2, &mut out), 0);
        assert!(out.is_empty());
        assert_eq!(
            NgramDrafter::new(2, 3).draft(&[4, 5, 6, 8, 6], 2, &mut out),
            0
        );
        assert!(out.is_empty());
    }
}
