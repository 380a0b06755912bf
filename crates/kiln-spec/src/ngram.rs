//! Prompt lookup: the draft is what followed the most recent earlier occurrence of the
//! text's last `n` tokens, trying the longest `n` first. No second model; it wins where
//! the output repeats the input (code edits, summaries, quoting).

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

    /// Appends up to `k` drafted tokens continuing `history` to `out` (none when no suffix
    /// of it occurs earlier).
    pub fn draft(&self, history: &[u32], k: usize, out: &mut Vec<u32>) {
        let len = history.len();
        if k == 0 {
            return;
        }
        for n in (self.min_n..=self.max_n).rev() {
            if n >= len {
                continue;
            }
            let key = &history[len - n..];
            // The most recent earlier occurrence that has a continuation.
            if let Some(i) = (0..len - n).rev().find(|&i| &history[i..i + n] == key) {
                let from = i + n;
                let to = (from + k).min(len);
                out.extend_from_slice(&history[from..to]);
                return;
            }
        }
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
        d.draft(&[1, 2, 3, 9, 5, 1, 2, 3, 7, 1, 2, 3], 4, &mut out);
        assert_eq!(out, [7, 1, 2, 3]);
    }

    #[test]
    fn falls_back_to_shorter_suffixes_and_drafts_nothing_without_a_match() {
        let d = NgramDrafter::new(1, 3);
        let mut out = Vec::new();
        d.draft(&[4, 5, 6, 8, 6], 2, &mut out);
        assert_eq!(out, [8, 6]);
        out.clear();
        d.draft(&[1, 2, 3], 2, &mut out);
        assert!(out.is_empty());
        NgramDrafter::new(2, 3).draft(&[4, 5, 6, 8, 6], 2, &mut out);
        assert!(out.is_empty());
    }
}
