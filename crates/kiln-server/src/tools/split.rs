//! The reply, as it arrives, split into reasoning (`<think>…</think>`), content and tool
//! calls. Content is released as soon as it cannot be the start of a call or of a closing
//! `</think>`; from a call's trigger on, the text is held and parsed when the reply ends,
//! and meanwhile read by a [`CallScanner`] so a stream can forward each call's name and
//! arguments as they are generated. Streaming and one-body answers both use it, so they
//! split the same text the same way.

use std::sync::Arc;

use super::OutputSpec;
use super::deltas::{CallDelta, CallScanner};
use super::family::Family;
use super::parse::{ParsedCall, parse};

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const PYTHON_TAG: &str = "<|python_tag|>";

/// Released text.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Content(String),
    Reasoning(String),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    /// Nothing released yet: a `<think>` or a leading JSON call may still start.
    Start,
    Think,
    Text,
    Call,
}

/// One choice's splitter.
#[derive(Debug)]
pub struct Splitter {
    spec: Arc<OutputSpec>,
    state: State,
    buf: String,
    call: String,
    /// A `</think>` was read: whitespace after it is not content.
    after_think: bool,
    /// Reads the call text as it grows (when the reply may hold calls).
    scanner: Option<CallScanner>,
    /// Call deltas found and not taken yet.
    deltas: Vec<CallDelta>,
}

/// The length of the longest suffix of `s` that is a proper prefix of `pat` (text to hold
/// back because `pat` may be completing).
fn partial_suffix(s: &str, pat: &str) -> usize {
    (1..pat.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && pat.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

impl Splitter {
    pub fn new(spec: Arc<OutputSpec>) -> Splitter {
        let (state, call) = if spec.family.is_some() && !spec.forced_prefix.is_empty() {
            (State::Call, spec.forced_prefix.clone())
        } else if spec.think_open {
            (State::Think, String::new())
        } else {
            (State::Start, String::new())
        };
        Splitter {
            scanner: spec.family.map(CallScanner::new),
            spec,
            state,
            buf: String::new(),
            call,
            after_think: false,
            deltas: Vec::new(),
        }
    }

    /// Takes the next text; appends what can be released to `out`.
    pub fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.buf.push_str(text);
        loop {
            let before = (self.state, self.buf.len());
            self.step(out);
            if (self.state, self.buf.len()) == before {
                break;
            }
        }
        if self.state == State::Call
            && let Some(sc) = &mut self.scanner
        {
            sc.scan(&self.call, &mut self.deltas);
        }
    }

    /// The call deltas found since the last call (streams send them as they come).
    pub fn take_deltas(&mut self) -> Vec<CallDelta> {
        std::mem::take(&mut self.deltas)
    }

    fn release(&mut self, n: usize, out: &mut Vec<Piece>, reasoning: bool) {
        if n == 0 {
            return;
        }
        let s: String = self.buf.drain(..n).collect();
        let piece = if reasoning {
            Piece::Reasoning(s)
        } else {
            Piece::Content(s)
        };
        match (out.last_mut(), piece) {
            (Some(Piece::Content(a)), Piece::Content(b))
            | (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => a.push_str(&b),
            (_, p) => out.push(p),
        }
    }

    fn step(&mut self, out: &mut Vec<Piece>) {
        match self.state {
            State::Start => {
                if self.buf.trim_start().is_empty() {
                    return;
                }
                if self.after_think {
                    let kept = self.buf.trim_start().len();
                    self.buf.drain(..self.buf.len() - kept);
                    self.after_think = false;
                }
                let t = self.buf.trim_start();
                if self.spec.think {
                    if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                        self.buf = rest.to_string();
                        self.state = State::Think;
                        return;
                    }
                    if THINK_OPEN.starts_with(t) {
                        return;
                    }
                }
                if self.spec.family.is_some_and(Family::may_start_bare) {
                    if t.starts_with('{') || t.starts_with(PYTHON_TAG) {
                        self.call = std::mem::take(&mut self.buf);
                        self.state = State::Call;
                        return;
                    }
                    if PYTHON_TAG.starts_with(t) {
                        return;
                    }
                }
                self.state = State::Text;
            }
            State::Think => match self.buf.find(THINK_CLOSE) {
                Some(i) => {
                    self.release(i, out, true);
                    self.buf.drain(..THINK_CLOSE.len());
                    let kept = self.buf.trim_start().len();
                    self.buf.drain(..self.buf.len() - kept);
                    self.state = State::Start;
                    self.after_think = true;
                }
                None => {
                    let n = self.buf.len() - partial_suffix(&self.buf, THINK_CLOSE);
                    self.release(n, out, true);
                }
            },
            State::Text => {
                let Some(trigger) = self.spec.family.and_then(Family::trigger) else {
                    let n = self.buf.len();
                    self.release(n, out, false);
                    return;
                };
                match self.buf.find(trigger) {
                    Some(i) => {
                        let kept = self.buf[..i].trim_end().len();
                        self.release(kept, out, false);
                        self.call = std::mem::take(&mut self.buf);
                        self.state = State::Call;
                    }
                    None => {
                        // Whitespace before a call is not content: hold it until text
                        // follows.
                        let n = self.buf.len() - partial_suffix(&self.buf, trigger);
                        let n = self.buf[..n].trim_end().len();
                        self.release(n, out, false);
                    }
                }
            }
            State::Call => {
                let rest = std::mem::take(&mut self.buf);
                self.call.push_str(&rest);
            }
        }
    }

    /// Ends the reply: releases what was held and returns the calls (none when the held
    /// text does not parse as calls; it is then content).
    pub fn finish(self, out: &mut Vec<Piece>) -> Vec<ParsedCall> {
        self.finish_streamed(out).0
    }

    /// [`Splitter::finish`], with the call deltas a stream still owes: those not taken
    /// yet, then what completes the parsed calls.
    pub fn finish_streamed(mut self, out: &mut Vec<Piece>) -> (Vec<ParsedCall>, Vec<CallDelta>) {
        let calls = self.finish_inner(out);
        let mut deltas = std::mem::take(&mut self.deltas);
        if let Some(sc) = &self.scanner {
            deltas.extend(sc.reconcile(&calls));
        }
        (calls, deltas)
    }

    fn finish_inner(&mut self, out: &mut Vec<Piece>) -> Vec<ParsedCall> {
        match self.state {
            State::Start | State::Text => {
                let n = self.buf.len();
                self.release(n, out, false);
                Vec::new()
            }
            State::Think => {
                let n = self.buf.len();
                self.release(n, out, true);
                Vec::new()
            }
            State::Call => {
                let family = self.spec.family.unwrap_or(Family::Generic);
                let (content, calls) = parse(family, &self.call);
                if calls.is_empty() {
                    let text = self
                        .call
                        .strip_prefix(self.spec.forced_prefix.as_str())
                        .unwrap_or(&self.call);
                    self.buf = text.to_string();
                } else {
                    self.buf = content;
                }
                let n = self.buf.len();
                self.release(n, out, false);
                calls
            }
        }
    }
}

/// The whole reply at once: reasoning (if any), content, calls.
pub fn split_all(spec: &Arc<OutputSpec>, text: &str) -> (Option<String>, String, Vec<ParsedCall>) {
    let mut s = Splitter::new(Arc::clone(spec));
    let mut out = Vec::new();
    s.push(text, &mut out);
    let calls = s.finish(&mut out);
    let (mut reasoning, mut content) = (None::<String>, String::new());
    for p in out {
        match p {
            Piece::Reasoning(r) => reasoning.get_or_insert_default().push_str(&r),
            Piece::Content(c) => content.push_str(&c),
        }
    }
    (reasoning.map(|r| r.trim().to_string()), content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(family: Option<Family>, think: bool, forced: &str) -> Arc<OutputSpec> {
        Arc::new(OutputSpec {
            family,
            think,
            think_open: false,
            forced_prefix: forced.to_string(),
            markers: Vec::new(),
        })
    }

    /// Feeds `text` one character at a time, as a stream would.
    fn stream(spec: &Arc<OutputSpec>, text: &str) -> (Vec<Piece>, Vec<ParsedCall>) {
        let mut s = Splitter::new(Arc::clone(spec));
        let mut out = Vec::new();
        for c in text.chars() {
            s.push(&c.to_string(), &mut out);
        }
        let calls = s.finish(&mut out);
        (out, calls)
    }

    #[test]
    fn streamed_hermes_text_releases_content_before_the_call_and_parses_the_call() {
        let sp = spec(Some(Family::Hermes), false, "");
        let text = "Checking <tool>s.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let (out, calls) = stream(&sp, text);
        assert_eq!(out, [Piece::Content("Checking <tool>s.".into())]);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, r#"{"a":1}"#);
        let (_, content, all) = split_all(&sp, text);
        assert_eq!((content.as_str(), all), ("Checking <tool>s.", calls));
    }

    #[test]
    fn a_forced_call_starts_inside_the_call_and_a_broken_one_is_content() {
        let sp = spec(Some(Family::Hermes), false, "<tool_call>\n");
        let (_, content, calls) = split_all(&sp, "{\"name\": \"f\", \"arguments\": {}}\n");
        assert_eq!(content, "");
        assert_eq!(calls[0].name, "f");
        let (_, content, calls) = split_all(&sp, "oops");
        assert_eq!((content.as_str(), calls.len()), ("oops", 0));
    }

    #[test]
    fn think_blocks_become_reasoning_also_when_streamed() {
        let sp = spec(None, true, "");
        let text = "<think>\nPlan: say hi.\n</think>\n\nHi there";
        let (r, c, _) = split_all(&sp, text);
        assert_eq!(r.as_deref(), Some("Plan: say hi."));
        assert_eq!(c, "Hi there");
        let (out, _) = stream(&sp, text);
        let reasoning: String = out
            .iter()
            .filter_map(|p| match p {
                Piece::Reasoning(r) => Some(r.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning.trim(), "Plan: say hi.");
        assert_eq!(out.last(), Some(&Piece::Content("Hi there".into())));
    }

    #[test]
    fn without_tools_or_thinking_everything_is_content() {
        let sp = spec(None, false, "");
        let (r, c, calls) = split_all(&sp, "<think>x</think>{\"name\":\"f\"}");
        assert_eq!(
            (r, c.as_str(), calls.len()),
            (None, "<think>x</think>{\"name\":\"f\"}", 0)
        );
    }

    #[test]
    fn llama3_calls_start_only_at_the_beginning_of_the_reply() {
        let sp = spec(Some(Family::Llama3), false, "");
        let (_, c, calls) = split_all(&sp, "{\"name\": \"f\", \"parameters\": {\"x\": 2}}");
        assert_eq!((c.as_str(), calls.len()), ("", 1));
        let (_, c, calls) = split_all(&sp, "Sure: {\"name\": \"f\", \"parameters\": {}}");
        assert_eq!(calls.len(), 0);
        assert!(c.starts_with("Sure"));
    }
}
