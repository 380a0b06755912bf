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
//!
//! **Edits of a copy.** An output that copies its input with changes (a rename, `//!`
//! comments rewritten as `///`) departs from the copied text at one token and returns to
//! it right after. Two rules keep the copy going across such an edit:
//!
//! - *Re-sync*: when the text without its last token (or last two,
//!   [`NgramDrafter::MAX_EDIT`]) matches an earlier place at least
//!   [`NgramDrafter::SYNC_MIN`] tokens long, longer than any match of the whole text, those
//!   tokens are taken as substitutes for as many tokens that followed that place, and the
//!   draft continues after them, as long as that match allows. Without it the copy would
//!   restart from a one- or two-token match of the edited token, drafting short or from
//!   the wrong place.
//! - *Substitutions*: a re-sync the output then follows for [`NgramDrafter::CONFIRM`]
//!   tokens, as the copied text goes on, is remembered (source token → the output's
//!   token, the latest one per source token, a bounded set); one the output leaves at once
//!   was no substitution (an insertion, a longer rewrite) and is not. Matching counts a
//!   remembered token's substitute as equal to it, and drafts emit the substitute: an edit
//!   made once is drafted wherever the copied text has the token again (every later
//!   `//!` line, every later use of a renamed identifier). When the output emits a
//!   remembered source token itself, the substitution is forgotten.
//!
//! Verification keeps every output exactly the target's whatever is drafted; these rules
//! only change how much of a draft is accepted.

/// An n-gram drafter over the tokens so far (prompt and generated), with the
/// substitutions it has seen the output make to the text it copies.
#[derive(Clone, Debug)]
pub struct NgramDrafter {
    min_n: usize,
    max_n: usize,
    /// Remembered substitutions, `(source token, output token)`, oldest first.
    subs: Vec<(u32, u32)>,
    /// The history's length at the last draft: the tokens after it are new output.
    seen: Option<usize>,
    /// The last re-sync, remembered once the output confirms it.
    resync: Option<Resync>,
}

/// A re-sync across edited tokens, not yet confirmed by the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resync {
    /// Where the output's edited tokens start in the history, where the source tokens
    /// they replaced start, and how many there are.
    at: usize,
    src_at: usize,
    n: usize,
}

/// An earlier place matching the text's end: its length and where what followed it
/// starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Match {
    len: usize,
    next: usize,
}

impl NgramDrafter {
    /// The shortest match of the text before its edited tokens that re-syncs a copy
    /// across them (shorter ones are too often chance).
    pub const SYNC_MIN: usize = 4;
    /// How many tokens after the edited ones must follow the copied text, as the re-sync
    /// predicted, before the substitution is remembered.
    pub const CONFIRM: usize = 2;
    /// The most consecutive edited tokens a re-sync steps over (token for token).
    pub const MAX_EDIT: usize = 2;
    /// The most substitutions remembered (the oldest is forgotten first).
    pub const MAX_SUBS: usize = 32;

    /// Matches suffixes of `max_n` down to `min_n` tokens (`1 ≤ min_n ≤ max_n`).
    pub fn new(min_n: usize, max_n: usize) -> NgramDrafter {
        let min_n = min_n.max(1);
        NgramDrafter {
            min_n,
            max_n: max_n.max(min_n),
            // Sized once: drafting allocates nothing afterwards (an engine step must not).
            subs: Vec::with_capacity(Self::MAX_SUBS),
            seen: None,
            resync: None,
        }
    }

    /// The most tokens drafted after a match of `m` tokens.
    pub fn cap(m: usize) -> usize {
        m.saturating_mul(2)
    }

    /// The remembered substitutions, `(source token, output token)`, oldest first.
    pub fn substitutions(&self) -> &[(u32, u32)] {
        &self.subs
    }

    /// What the output writes for the copied token `t`.
    fn sub(&self, t: u32) -> u32 {
        self.subs
            .iter()
            .find(|&&(s, _)| s == t)
            .map_or(t, |&(_, o)| o)
    }

    /// Whether the text's token `txt` copies the earlier token `src`.
    fn same(&self, src: u32, txt: u32) -> bool {
        src == txt || (!self.subs.is_empty() && self.sub(src) == txt)
    }

    fn learn(&mut self, src: u32, out: u32) {
        self.subs.retain(|&(s, _)| s != src);
        if self.subs.len() == Self::MAX_SUBS {
            self.subs.remove(0);
        }
        self.subs.push((src, out));
    }

    /// The longest earlier match of `h`'s last tokens (up to `max_n`; the most recent
    /// among equally long ones), each earlier occurrence with a next token inside `h`.
    fn longest(&self, h: &[u32]) -> Match {
        let len = h.len();
        let mut best = Match::default();
        if len < 2 {
            return best;
        }
        let last = h[len - 1];
        let max_n = self.max_n.min(len - 1);
        // `i`: where an earlier occurrence ends (it has a next token: `i + 1 < len`).
        // Whether a remembered substitution writes `last` (else only `last` itself can end
        // a match, and the scan skips the substitution lookups).
        let substituted = self.subs.iter().any(|&(_, o)| o == last);
        for i in (0..len - 1).rev() {
            if h[i] != last && !(substituted && self.sub(h[i]) == last) {
                continue;
            }
            let mut m = 1;
            while m < max_n && m <= i && self.same(h[i - m], h[len - 1 - m]) {
                m += 1;
            }
            if m > best.len {
                best = Match {
                    len: m,
                    next: i + 1,
                };
                if m == max_n {
                    break;
                }
            }
        }
        best
    }

    /// Appends up to `k` drafted tokens continuing `history` to `out` (at most
    /// [`NgramDrafter::cap`] of the match length), and returns the match length: 0, and
    /// nothing drafted, when no suffix of at least `min_n` tokens occurs earlier. Learns
    /// and forgets substitutions from the output as it goes (see the module's notes), so
    /// call it with the same sequence's history each time, grown by the tokens emitted
    /// since. The search is at most three passes over `history` and allocates nothing
    /// (the set of substitutions is sized when the drafter is made).
    pub fn draft(&mut self, history: &[u32], k: usize, out: &mut Vec<u32>) -> usize {
        let len = history.len();
        // The output emitted since the last draft: a remembered source token written as
        // it is means the substitution no longer holds.
        let new = self.seen.filter(|&s| s <= len).unwrap_or(len);
        self.seen = Some(len);
        if !self.subs.is_empty() {
            for &t in &history[new..] {
                self.subs.retain(|&(s, _)| s != t);
            }
        }
        // A re-sync the output has followed for `CONFIRM` tokens since: its substitution
        // holds. One it left at once (an insertion, a different rewrite) is dropped.
        if let Some(r) = self.resync
            && len >= r.at + r.n + Self::CONFIRM
        {
            self.resync = None;
            let followed = (r.n..r.n + Self::CONFIRM).all(|j| {
                r.src_at + j < r.at && self.same(history[r.src_at + j], history[r.at + j])
            });
            if followed {
                for j in 0..r.n {
                    let (src, out) = (history[r.src_at + j], history[r.at + j]);
                    if src != out {
                        self.learn(src, out);
                    }
                }
            }
        }
        if k == 0 || len < 2 {
            return 0;
        }
        let mut best = self.longest(history);
        // Re-sync: the text before its last `n` tokens matches longer than the whole text
        // does, so those tokens replaced the `n` that followed that match.
        for n in 1..=Self::MAX_EDIT.min(len - 1) {
            let before = self.longest(&history[..len - n]);
            if before.len >= Self::SYNC_MIN.max(self.min_n) && before.len > best.len {
                self.resync = Some(Resync {
                    at: len - n,
                    src_at: before.next,
                    n,
                });
                best = Match {
                    len: before.len,
                    next: before.next + n,
                };
                break;
            }
        }
        if best.len < self.min_n {
            return 0;
        }
        let to = (best.next + k.min(Self::cap(best.len))).min(len);
        for &t in &history[best.next..to] {
            out.push(self.sub(t));
        }
        best.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_what_followed_the_longest_recent_match() {
        let mut d = NgramDrafter::new(1, 3);
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
        let mut d = NgramDrafter::new(1, 8);
        let mut out = Vec::new();
        // "4 1 2 3" matches at the start (followed by 8); "1 2 3" alone, later, by 9.
        let h = [4, 1, 2, 3, 8, 0, 1, 2, 3, 9, 4, 1, 2, 3];
        assert_eq!(d.draft(&h, 2, &mut out), 4);
        assert_eq!(out, [8, 0]);
    }

    #[test]
    fn drafts_at_most_twice_the_match_length() {
        let mut d = NgramDrafter::new(1, 4);
        let mut out = Vec::new();
        // "5" matches once, one token long: two tokens at most, however many are asked.
        assert_eq!(d.draft(&[5, 1, 2, 3, 4, 6, 7, 5], 8, &mut out), 1);
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn falls_back_to_shorter_suffixes_and_drafts_nothing_without_a_match() {
        let mut d = NgramDrafter::new(1, 3);
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

    /// A source "file" of three comment lines, each `C w w w w w NL` with the comment token
    /// `C` = 100 and newline `NL` = 10, words distinct per line.
    fn file() -> Vec<u32> {
        let mut f = Vec::new();
        for line in 0..3u32 {
            f.push(100);
            f.extend((0..5).map(|w| 20 + 10 * line + w));
            f.push(10);
        }
        f
    }

    #[test]
    fn a_repeated_closing_line_does_not_draft_the_first_occurrences_continuation() {
        let mut d = NgramDrafter::new(1, 8);
        let mut out = Vec::new();
        // Two blocks end with `} NL`: after the first comes `7 8`, after the second `5 6`.
        // The text's end matches the second block longer: its continuation is drafted.
        let h = [1, 2, 90, 10, 7, 8, 3, 4, 90, 10, 5, 6, 9, 3, 4, 90, 10];
        assert_eq!(d.draft(&h, 2, &mut out), 4);
        assert_eq!(out, [5, 6]);
    }

    /// A drafter, and the text "the file, its copy up to `copied` tokens, then `tail`".
    fn copying(copied: usize, tail: &[u32]) -> (NgramDrafter, Vec<u32>) {
        let f = file();
        let mut h = f.clone();
        h.extend_from_slice(&f[..copied]);
        h.extend_from_slice(tail);
        (NgramDrafter::new(1, 16), h)
    }

    /// The copy with the first line's comment token written as 101 and followed past the
    /// edit (the re-sync's draft accepted), so the substitution 100 → 101 is remembered;
    /// with the draft made at that point.
    fn with_confirmed_substitution() -> (NgramDrafter, Vec<u32>, Vec<u32>) {
        let (mut d, mut h) = copying(7, &[101]);
        let mut out = Vec::new();
        d.draft(&h, 4, &mut out);
        h.extend_from_slice(&file()[8..14]);
        out.clear();
        d.draft(&h, 4, &mut out);
        assert_eq!(d.substitutions(), &[(100, 101)]);
        (d, h, out)
    }

    #[test]
    fn re_syncs_the_copy_after_an_edited_token() {
        // The output copies the file but writes 101 where the file has the comment token
        // 100: without a re-sync only the one-token match of 101 would be drafted from.
        let (mut d, h) = copying(7, &[101]);
        let mut out = Vec::new();
        let m = d.draft(&h, 6, &mut out);
        assert!(m >= NgramDrafter::SYNC_MIN, "match {m}");
        assert_eq!(out, file()[8..14]);
    }

    #[test]
    fn re_syncs_over_two_edited_tokens() {
        let (mut d, h) = copying(7, &[101, 55]);
        let mut out = Vec::new();
        d.draft(&h, 4, &mut out);
        assert_eq!(out, file()[9..13]);
    }

    #[test]
    fn an_edit_the_output_followed_is_drafted_where_the_source_repeats_it() {
        // Drafting up to the next comment line writes it with the output's token.
        let (mut d, mut h, mut out) = with_confirmed_substitution();
        assert_eq!(out, [101, 40, 41, 42]);
        // Matching counts the substitute as the source token: the whole copy matches.
        h.extend([101, 40]);
        out.clear();
        assert!(d.draft(&h, 2, &mut out) >= 8);
        assert_eq!(out, [41, 42]);
    }

    #[test]
    fn an_insertion_is_not_remembered_as_a_substitution() {
        // The output inserts 77 (taken for a substitution of the file's next token, 10, at
        // first) and then goes on with the file where it left it.
        let f = file();
        let (mut d, mut h) = copying(6, &[77]);
        let mut out = Vec::new();
        d.draft(&h, 2, &mut out);
        assert_eq!(out, f[7..9]);
        h.extend_from_slice(&f[6..9]);
        out.clear();
        d.draft(&h, 2, &mut out);
        assert!(d.substitutions().is_empty());
        assert_eq!(out, f[9..11]);
    }

    #[test]
    fn a_substitution_is_forgotten_when_the_output_writes_the_source_token() {
        let (mut d, mut h, _) = with_confirmed_substitution();
        // The next line keeps the file's comment token.
        h.extend([100, 40]);
        let mut out = Vec::new();
        d.draft(&h, 2, &mut out);
        assert!(d.substitutions().is_empty());
        assert_eq!(out, [41, 42]);
    }
}
