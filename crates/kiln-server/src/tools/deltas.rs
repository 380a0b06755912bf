//! Tool calls read as they are generated: the first delta of a call (its index and name)
//! as soon as its name is known and its arguments have started, then the arguments text as
//! it arrives, as OpenAI streams `tool_calls`. The arguments are forwarded in
//! [`compact`](super::parse::compact) form, the form the whole-reply parse gives them, so
//! the fragments of a call add up to its `arguments` exactly; [`reconcile`] sends what a
//! stream still owes once the reply is parsed whole.
//!
//! The scanner reads the call text of a reply (from its trigger on) one character at a
//! time, tracking only what it needs of JSON: strings, nesting, the current key of each
//! object. Which objects are calls depends on the [`Family`]: top-level objects (Hermes,
//! Llama 3), top-level or array items (Mistral), items of `tool_calls` (generic).

use super::family::Family;
use super::parse::ParsedCall;

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const MISTRAL_TRIGGER: &str = "[TOOL_CALLS]";

/// A piece of a streamed call.
#[derive(Clone, Debug, PartialEq)]
pub enum CallDelta {
    /// A new call (index in the reply's calls, from 0) and its function's name.
    Start { index: usize, name: String },
    /// More of a call's arguments text.
    Arguments { index: usize, text: String },
}

#[derive(Clone, Debug)]
struct Frame {
    object: bool,
    /// The key whose value comes next (objects).
    key: Option<String>,
    /// A key is expected (after `{` or `,` in an object).
    expecting_key: bool,
    /// The current key's (or array item's) value has started.
    value_started: bool,
}

/// What the current call's arguments value is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Args {
    None,
    /// An object, streamed; its frame is at this stack depth.
    Object {
        depth: usize,
        done: bool,
    },
    /// A JSON string (quoted arguments): sent whole when the call ends.
    Quoted,
    /// Anything else (not a call).
    Other,
}

/// The string being read and what it is for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Capture {
    None,
    Key,
    Name,
    QuotedArgs,
}

/// One choice's call scanner.
#[derive(Debug)]
pub struct CallScanner {
    family: Family,
    /// Bytes of the call text read so far.
    pos: usize,
    stack: Vec<Frame>,
    in_string: bool,
    escape: bool,
    capture: Capture,
    captured: String,
    /// Hermes: a `<tool_call>` tag was seen, and whether the text is inside a block.
    tagged: bool,
    in_block: bool,
    /// The stack depth of the current call object's frame.
    call_depth: Option<usize>,
    name: Option<String>,
    args: Args,
    /// The current call's arguments (compact) and how much of them was sent.
    args_text: String,
    sent: usize,
    started: bool,
    /// The calls streamed so far: name and the arguments text sent.
    streamed: Vec<(String, String)>,
}

impl CallScanner {
    pub fn new(family: Family) -> CallScanner {
        CallScanner {
            family,
            pos: 0,
            stack: Vec::new(),
            in_string: false,
            escape: false,
            capture: Capture::None,
            captured: String::new(),
            tagged: false,
            in_block: false,
            call_depth: None,
            name: None,
            args: Args::None,
            args_text: String::new(),
            sent: 0,
            started: false,
            streamed: Vec::new(),
        }
    }

    /// Whether an object opening here (at the current stack) is a call.
    fn opens_call(&self) -> bool {
        if self.call_depth.is_some() {
            return false;
        }
        let s = &self.stack;
        match self.family {
            Family::Hermes | Family::Llama3 => s.is_empty(),
            Family::Mistral => s.is_empty() || (s.len() == 1 && !s[0].object),
            Family::Generic => match s.as_slice() {
                [top] => top.object && top.key.as_deref() == Some("tool_call"),
                [top, list] => {
                    top.object && top.key.as_deref() == Some("tool_calls") && !list.object
                }
                _ => false,
            },
        }
    }

    /// Reads `text` (the whole call text so far; it only grows) from where the last call
    /// stopped, appending the deltas found to `out`.
    pub fn scan(&mut self, text: &str, out: &mut Vec<CallDelta>) {
        while let Some(c) = text.get(self.pos..).and_then(|r| r.chars().next()) {
            let rest = &text[self.pos..];
            if self.stack.is_empty() {
                // Between values: markup, separators, and (Hermes) text outside the blocks.
                let tags: &[&str] = match self.family {
                    Family::Hermes => &[HERMES_OPEN, HERMES_CLOSE],
                    Family::Mistral => &[MISTRAL_TRIGGER],
                    _ => &[],
                };
                if let Some(tag) = tags.iter().find(|t| rest.starts_with(**t)) {
                    if *tag == HERMES_OPEN {
                        (self.tagged, self.in_block) = (true, true);
                    } else if *tag == HERMES_CLOSE {
                        self.in_block = false;
                    }
                    self.pos += tag.len();
                    continue;
                }
                if tags.iter().any(|t| t.starts_with(rest)) {
                    // A tag may be arriving: wait for more text.
                    break;
                }
                self.pos += c.len_utf8();
                if (self.tagged && !self.in_block) || !(c == '{' || c == '[') {
                    continue;
                }
                self.open(c == '{');
            } else {
                self.pos += c.len_utf8();
                self.step(c, out);
            }
            self.maybe_start(out);
        }
        self.flush(out);
    }

    fn open(&mut self, object: bool) {
        if object && self.opens_call() {
            self.call_depth = Some(self.stack.len());
        }
        self.stack.push(Frame {
            object,
            key: None,
            expecting_key: object,
            value_started: false,
        });
    }

    /// Whether the top frame is the call object, its next value not started yet.
    fn at_call_value(&self) -> bool {
        self.call_depth.is_some_and(|d| self.stack.len() == d + 1)
            && self
                .stack
                .last()
                .is_some_and(|f| f.object && !f.expecting_key && !f.value_started)
    }

    fn in_args(&self) -> bool {
        matches!(self.args, Args::Object { depth, done: false } if self.stack.len() > depth)
    }

    fn step(&mut self, c: char, out: &mut Vec<CallDelta>) {
        if self.in_string {
            if self.in_args() {
                self.args_text.push(c);
            }
            if self.escape {
                self.escape = false;
            } else if c == '\\' {
                self.escape = true;
            } else if c == '"' {
                self.in_string = false;
                self.end_string();
                return;
            }
            if self.capture != Capture::None {
                self.captured.push(c);
            }
            return;
        }
        if matches!(c, ' ' | '\t' | '\n' | '\r') {
            return;
        }
        // A value starting right in the call object: its name or arguments?
        let call_value = self.at_call_value();
        let key = self
            .stack
            .last()
            .and_then(|f| f.key.clone())
            .unwrap_or_default();
        let expecting_key = self.stack.last().is_some_and(|f| f.expecting_key);
        if let Some(f) = self.stack.last_mut()
            && !expecting_key
            && !matches!(c, ',' | ':' | '}' | ']')
        {
            f.value_started = true;
        }
        let args_key = key == "arguments" || key == "parameters";
        if call_value && args_key && self.args == Args::None {
            self.args = match c {
                '{' => Args::Object {
                    depth: self.stack.len(),
                    done: false,
                },
                '"' => Args::Quoted,
                _ => Args::Other,
            };
        }
        if self.in_args()
            || matches!(self.args, Args::Object { depth, done: false } if self.stack.len() == depth && c == '{')
        {
            self.args_text.push(c);
        }
        match c {
            '"' => {
                self.in_string = true;
                self.capture = if expecting_key {
                    Capture::Key
                } else if call_value && key == "name" {
                    Capture::Name
                } else if call_value && args_key && self.args == Args::Quoted {
                    Capture::QuotedArgs
                } else {
                    Capture::None
                };
                self.captured.clear();
                self.captured.push('"');
            }
            '{' | '[' => self.open(c == '{'),
            '}' | ']' => {
                self.stack.pop();
                if let Args::Object { depth, done: false } = self.args
                    && self.stack.len() == depth
                {
                    self.args = Args::Object { depth, done: true };
                }
                if self.call_depth == Some(self.stack.len()) {
                    self.end_call(out);
                }
            }
            ':' => {
                if let Some(f) = self.stack.last_mut() {
                    f.expecting_key = false;
                    f.value_started = false;
                }
            }
            ',' => {
                if let Some(f) = self.stack.last_mut() {
                    f.expecting_key = f.object;
                    f.key = None;
                    f.value_started = false;
                }
            }
            _ => {}
        }
    }

    fn end_string(&mut self) {
        if self.capture == Capture::None {
            return;
        }
        self.captured.push('"');
        let value = serde_json::from_str::<String>(&self.captured).ok();
        match std::mem::replace(&mut self.capture, Capture::None) {
            Capture::Key => {
                if let Some(f) = self.stack.last_mut() {
                    f.key = value;
                }
            }
            Capture::Name => {
                if self.name.is_none() {
                    self.name = value;
                }
            }
            Capture::QuotedArgs => {
                // Kept only if the string is JSON, as the whole-reply parse does.
                if let Some(v) =
                    value.filter(|v| serde_json::from_str::<serde_json::Value>(v).is_ok())
                {
                    self.args_text = v;
                }
            }
            Capture::None => {}
        }
    }

    /// Sends the call's first delta once its name is known and its arguments have begun.
    fn maybe_start(&mut self, out: &mut Vec<CallDelta>) {
        if self.started || !matches!(self.args, Args::Object { .. }) {
            return;
        }
        if let Some(name) = &self.name {
            out.push(CallDelta::Start {
                index: self.streamed.len(),
                name: name.clone(),
            });
            self.started = true;
        }
    }

    /// Sends the arguments text not sent yet.
    fn flush(&mut self, out: &mut Vec<CallDelta>) {
        if self.started && self.sent < self.args_text.len() {
            out.push(CallDelta::Arguments {
                index: self.streamed.len(),
                text: self.args_text[self.sent..].to_string(),
            });
            self.sent = self.args_text.len();
        }
    }

    /// The call object closed: its remaining arguments are sent (quoted ones whole, with
    /// the call's first delta), before the next call's index is used.
    fn end_call(&mut self, out: &mut Vec<CallDelta>) {
        self.call_depth = None;
        if self.args == Args::Quoted
            && !self.started
            && let Some(name) = &self.name
        {
            out.push(CallDelta::Start {
                index: self.streamed.len(),
                name: name.clone(),
            });
            self.started = true;
        }
        self.flush(out);
        let name = self.name.take();
        self.args = Args::None;
        let text = std::mem::take(&mut self.args_text);
        if self.started
            && let Some(name) = name
        {
            self.streamed.push((name, text));
        }
        self.started = false;
        self.sent = 0;
    }

    /// The calls streamed so far (name and the arguments text sent), the one in progress
    /// included.
    fn streamed(&self) -> Vec<(&str, &str)> {
        let mut v: Vec<(&str, &str)> = self
            .streamed
            .iter()
            .map(|(n, a)| (n.as_str(), a.as_str()))
            .collect();
        if self.started
            && let Some(name) = &self.name
        {
            v.push((name, &self.args_text[..self.sent]));
        }
        v
    }

    /// What a stream still owes once the whole reply parsed as `calls`: the rest of each
    /// call's arguments, and the calls not started yet. (A call streamed under a different
    /// name or arguments than the parse gives cannot be taken back; the scanner reads the
    /// same text the parse does, so that does not happen for calls that parse.)
    pub fn reconcile(&self, calls: &[ParsedCall]) -> Vec<CallDelta> {
        let streamed = self.streamed();
        let mut out = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            match streamed.get(index) {
                Some(&(name, sent)) => {
                    if name == call.name
                        && let Some(rest) = call.arguments.strip_prefix(sent)
                        && !rest.is_empty()
                    {
                        out.push(CallDelta::Arguments {
                            index,
                            text: rest.to_string(),
                        });
                    }
                }
                None => {
                    out.push(CallDelta::Start {
                        index,
                        name: call.name.clone(),
                    });
                    if !call.arguments.is_empty() {
                        out.push(CallDelta::Arguments {
                            index,
                            text: call.arguments.clone(),
                        });
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::tools::OutputSpec;
    use crate::tools::split::{Splitter, split_all};

    fn spec(family: Family, forced: &str) -> Arc<OutputSpec> {
        Arc::new(OutputSpec {
            family: Some(family),
            forced_prefix: forced.to_string(),
            ..OutputSpec::default()
        })
    }

    /// A streamed call as a client accumulates it, and how many deltas carried arguments
    /// text before the reply ended.
    #[derive(Debug, Default, PartialEq)]
    struct Accumulated {
        name: String,
        arguments: String,
        early_argument_deltas: usize,
    }

    /// Streams `text` in pieces of `step` characters; the calls as a client accumulates
    /// them from the deltas.
    fn stream(spec: &Arc<OutputSpec>, text: &str, step: usize) -> Vec<Accumulated> {
        let mut s = Splitter::new(Arc::clone(spec));
        let mut pieces = Vec::new();
        let mut calls: Vec<Accumulated> = Vec::new();
        let apply = |deltas: Vec<CallDelta>, early: bool, calls: &mut Vec<Accumulated>| {
            for d in deltas {
                match d {
                    CallDelta::Start { index, name } => {
                        assert_eq!(index, calls.len(), "calls start in order");
                        calls.push(Accumulated {
                            name,
                            ..Accumulated::default()
                        });
                    }
                    CallDelta::Arguments { index, text } => {
                        let c = &mut calls[index];
                        c.arguments.push_str(&text);
                        c.early_argument_deltas += usize::from(early);
                    }
                }
            }
        };
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(step) {
            s.push(&chunk.iter().collect::<String>(), &mut pieces);
            apply(s.take_deltas(), true, &mut calls);
        }
        let (_, deltas) = s.finish_streamed(&mut pieces);
        apply(deltas, false, &mut calls);
        calls
    }

    /// Streamed at several piece sizes, the calls equal the whole-reply parse's, and a
    /// call with a long argument got its arguments in more than one delta as they came.
    fn check(spec: &Arc<OutputSpec>, text: &str) {
        let (_, _, parsed) = split_all(spec, text);
        assert!(!parsed.is_empty(), "{text}");
        for step in [1, 2, 3, 7, 1000] {
            let got = stream(spec, text, step);
            let names: Vec<(&str, &str)> = got
                .iter()
                .map(|c| (c.name.as_str(), c.arguments.as_str()))
                .collect();
            let want: Vec<(&str, &str)> = parsed
                .iter()
                .map(|c| (c.name.as_str(), c.arguments.as_str()))
                .collect();
            assert_eq!(names, want, "step {step}: {text}");
            if step == 1 {
                for c in &got {
                    if c.arguments.len() > 20 {
                        assert!(
                            c.early_argument_deltas > 1,
                            "{c:?} was not streamed as generated"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn hermes_calls_stream_name_first_then_arguments_adding_up_to_the_parse() {
        let sp = spec(Family::Hermes, "");
        check(
            &sp,
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris, France\", \"unit\": \"celsius\", \"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"name\": \"t\", \"arguments\": {}}\n</tool_call>",
        );
        // Untagged (as Qwen2.5-Coder writes them), quoted arguments, a forced call.
        check(
            &sp,
            "{\"name\": \"f\", \"arguments\": {\"text\": \"a \\\"quoted\\\" {brace} \\u00e9 and more words\"}}",
        );
        check(
            &sp,
            "<tool_call>{\"arguments\": \"{\\\"a\\\": 1}\", \"name\": \"q\"}</tool_call>",
        );
        check(
            &spec(Family::Hermes, "<tool_call>\n"),
            "{\"name\": \"f\", \"arguments\": {\"path\": \"src/main.rs\", \"line\": 12}}\n</tool_call>",
        );
    }

    #[test]
    fn llama3_mistral_and_generic_calls_stream_by_index() {
        check(
            &spec(Family::Llama3, ""),
            "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1, \"note\": \"twenty characters or more\"}}; {\"name\": \"g\", \"parameters\": {}}",
        );
        check(
            &spec(Family::Mistral, ""),
            "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": \"b c d e f g h i j k l m\"}}, {\"name\": \"g\", \"arguments\": \"{}\"}]",
        );
        check(
            &spec(Family::Generic, ""),
            "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"q\": [1, {\"r\": \"long enough text here\"}]}}, {\"name\": \"h\", \"arguments\": {\"z\": null}}]}",
        );
    }

    #[test]
    fn a_json_answer_that_is_not_a_call_streams_no_call() {
        let sp = spec(Family::Hermes, "");
        assert!(stream(&sp, "{\"name\": \"Bob\", \"age\": 3}", 1).is_empty());
        assert!(
            stream(
                &spec(Family::Generic, ""),
                "{\"name\": \"x\", \"arguments\": {}}",
                1
            )
            .is_empty()
        );
    }
}
