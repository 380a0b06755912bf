//! Stopping: stop strings with a holdback buffer, and the reason generation ended.
//!
//! Text goes in piece by piece (as the stream decoder produces it); what comes out never
//! contains any part of a stop string and never splits a UTF-8 character. A piece that
//! might begin a stop string is held back until the next piece decides. The first stop
//! string to *complete* ends the text; if several complete at the same position the
//! longest wins, and the text is cut where it begins. Streaming in any chunking therefore
//! yields exactly the whole text truncated there.

/// Why generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (EOS, EOT, end of turn, …).
    EndOfGeneration { token: u32 },
    /// Stop string `index` (in the order given) appeared in the output.
    StopString { index: usize },
    /// The token limit (or the context) was reached.
    Length,
}

impl StopReason {
    /// The OpenAI-style `finish_reason`: `"stop"` or `"length"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::EndOfGeneration { .. } | StopReason::StopString { .. } => "stop",
            StopReason::Length => "length",
        }
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum StopError {
    #[error("a stop string is empty")]
    Empty,
}

/// Stop-string matcher with holdback.
#[derive(Clone, Debug, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
    longest: usize,
    stopped: bool,
}

impl StopStrings {
    pub fn new<I, S>(stops: I) -> Result<StopStrings, StopError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let stops: Vec<String> = stops.into_iter().map(Into::into).collect();
        if stops.iter().any(String::is_empty) {
            return Err(StopError::Empty);
        }
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        Ok(StopStrings {
            held: String::with_capacity(longest * 2 + 16),
            stops,
            longest,
            stopped: false,
        })
    }

    pub fn stops(&self) -> &[String] {
        &self.stops
    }

    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// The longest stop string's length in bytes (0 without stop strings).
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// Reserves room for `bytes` more bytes of held-back text, so that pieces up to that
    /// long never grow the buffer.
    pub fn reserve(&mut self, bytes: usize) {
        self.held.reserve(bytes);
    }

    /// The text held back so far.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Adds `piece` and appends what may now be emitted to `out`. Returns the index of the
    /// stop string that ended the text: `out` then ends just before it, and everything
    /// after is dropped (further pushes emit nothing).
    pub fn push(&mut self, piece: &str, out: &mut String) -> Option<usize> {
        if self.stopped {
            return None;
        }
        if self.stops.is_empty() {
            out.push_str(piece);
            return None;
        }
        let old = self.held.len();
        self.held.push_str(piece);
        let bytes = self.held.as_bytes();
        // The held text had no complete stop string, so any new one ends past `old`.
        for end in old + 1..=bytes.len() {
            let mut hit: Option<(usize, usize)> = None;
            for (i, s) in self.stops.iter().enumerate() {
                let s = s.as_bytes();
                if bytes[..end].ends_with(s) && hit.is_none_or(|(_, l)| s.len() > l) {
                    hit = Some((i, s.len()));
                }
            }
            if let Some((i, len)) = hit {
                out.push_str(&self.held[..end - len]);
                self.held.clear();
                self.stopped = true;
                return Some(i);
            }
        }
        // Hold back the longest suffix that could still begin a stop string.
        let len = self.held.len();
        let mut keep = 0;
        for k in (1..self.longest.min(len + 1)).rev() {
            let at = len - k;
            if self.held.is_char_boundary(at) {
                let suffix = &self.held.as_bytes()[at..];
                if self.stops.iter().any(|s| s.as_bytes().starts_with(suffix)) {
                    keep = k;
                    break;
                }
            }
        }
        let cut = len - keep;
        out.push_str(&self.held[..cut]);
        self.held.drain(..cut);
        None
    }

    /// The text ended without a stop string: emits what was held back.
    pub fn finish(&mut self, out: &mut String) {
        if !self.stopped {
            out.push_str(&self.held);
        }
        self.held.clear();
    }

    /// Ready for a new text.
    pub fn reset(&mut self) {
        self.held.clear();
        self.stopped = false;
    }
}

/// The whole-text rule streaming must agree with: the text before the first stop string
/// to complete (the longest of those completing at the same place), and its index.
pub fn truncate_at_stop<'a>(text: &'a str, stops: &[String]) -> (&'a str, Option<usize>) {
    let bytes = text.as_bytes();
    for end in 1..=bytes.len() {
        let mut hit: Option<(usize, usize)> = None;
        for (i, s) in stops.iter().enumerate() {
            let s = s.as_bytes();
            if !s.is_empty() && bytes[..end].ends_with(s) && hit.is_none_or(|(_, l)| s.len() > l) {
                hit = Some((i, s.len()));
            }
        }
        if let Some((i, len)) = hit {
            return (&text[..end - len], Some(i));
        }
    }
    (text, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stream(stops: &[String], pieces: &[&str]) -> (String, Option<usize>) {
        let mut s = StopStrings::new(stops.iter().cloned()).unwrap();
        let mut out = String::new();
        for p in pieces {
            if let Some(i) = s.push(p, &mut out) {
                return (out, Some(i));
            }
            // Nothing emitted so far may contain the start of a stop string that the
            // rest could complete: that is what the holdback guarantees.
        }
        s.finish(&mut out);
        (out, None)
    }

    #[test]
    fn a_stop_string_split_across_pieces_is_never_emitted() {
        let stops = vec!["</end>".to_string()];
        let mut s = StopStrings::new(stops.clone()).unwrap();
        let mut out = String::new();
        assert_eq!(s.push("hello </", &mut out), None);
        assert_eq!(out, "hello ");
        assert_eq!(s.push("en", &mut out), None);
        assert_eq!(out, "hello ");
        assert_eq!(s.push("d> tail", &mut out), Some(0));
        assert_eq!(out, "hello ");
    }

    #[test]
    fn held_text_that_turns_out_harmless_is_released() {
        let mut s = StopStrings::new(["ab"]).unwrap();
        let mut out = String::new();
        s.push("xa", &mut out);
        assert_eq!(out, "x");
        s.push("c", &mut out);
        assert_eq!(out, "xac");
    }

    #[test]
    fn holdback_never_splits_a_character() {
        // "é" is two bytes; the stop begins with the same lead byte as "è".
        let mut s = StopStrings::new(["éa"]).unwrap();
        let mut out = String::new();
        s.push("xè", &mut out);
        assert_eq!(out, "xè");
        s.push("é", &mut out);
        assert_eq!(out, "xè");
        assert!(std::str::from_utf8(out.as_bytes()).is_ok());
    }

    #[test]
    fn the_first_completed_stop_wins_and_the_longest_at_a_tie() {
        let stops: Vec<String> = ["abcd", "c", "bc"].map(String::from).to_vec();
        assert_eq!(truncate_at_stop("xabcd", &stops), ("xa", Some(2)));
        assert_eq!(stream(&stops, &["xabcd"]), ("xa".to_string(), Some(2)));
    }

    fn text_strategy() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![Just("a"), Just("b"), Just("é"), Just("😀"), Just("\n")],
            0..40,
        )
        .prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn streamed_output_equals_the_whole_text_truncated_at_the_stop(
            text in text_strategy(),
            stops in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just("a"), Just("b"), Just("é"), Just("😀"), Just("\n")], 1..4)
                    .prop_map(|v| v.concat()), 0..4),
            cuts in proptest::collection::vec(0usize..64, 0..12),
        ) {
            // Chunk at random character boundaries.
            let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
            let mut at: Vec<usize> = cuts.iter().map(|c| bounds[c % bounds.len()]).collect();
            at.push(0);
            at.push(text.len());
            at.sort_unstable();
            at.dedup();
            let pieces: Vec<&str> = at.windows(2).map(|w| &text[w[0]..w[1]]).collect();
            let (want, want_stop) = truncate_at_stop(&text, &stops);
            let (got, got_stop) = stream(&stops, &pieces);
            prop_assert_eq!(got, want);
            prop_assert_eq!(got_stop, want_stop);
        }
    }
}
