//! Chat templates: the model's own Jinja template, rendered as Hugging Face transformers'
//! `apply_chat_template` renders it, byte for byte.
//!
//! The template comes from the GGUF (`tokenizer.chat_template`, and named ones such as
//! `tokenizer.chat_template.tool_use`) or from a Hugging Face directory
//! (`chat_template.jinja`, `chat_template.json`, or `tokenizer_config.json`'s
//! `chat_template`, a string or a list of named templates). It runs in minijinja set up
//! like transformers' Jinja2 environment: `trim_blocks` and `lstrip_blocks`, loop
//! controls, Python's string and dict methods (minijinja-contrib's `pycompat`),
//! `raise_exception`, `strftime_now`, a `tojson` that is `json.dumps`, Python's `str()` of
//! printed values, and the variables `messages`, `tools`, `documents`,
//! `add_generation_prompt`, `bos_token`, `eos_token`, `unk_token`, `pad_token`.
//!
//! A template that does not parse, or that fails while rendering (including its own
//! `raise_exception`), is a [`ChatError::Template`] naming the line; Kiln never switches
//! to another template on its own.
//!
//! ```no_run
//! use kiln_tokenizer::chat::{ChatTemplate, Conversation, RenderOptions};
//! let file = kiln_format::GgufFile::open("model.gguf")?;
//! let tok = kiln_tokenizer::Tokenizer::from_gguf(file.metadata())?;
//! let tmpl = ChatTemplate::from_gguf(file.metadata(), &tok)?.expect("the model has a template");
//! let mut chat = Conversation::new();
//! chat.push("user", "Hi!");
//! let prompt = tmpl.render(&chat, &RenderOptions::generation())?;
//! let ids = tmpl.prompt_tokens(&tok, &prompt)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod python;
mod strftime;

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Environment, ErrorKind, State, UndefinedBehavior, Value};
use serde::Serialize;

use crate::hf::config::read_json;
use crate::{HfTokenizerConfig, Tokenizer, TokenizerError};

/// What can go wrong finding or rendering a chat template.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChatError {
    /// The template does not parse, or failed while rendering.
    #[error("chat template ({origin}){}: {message}{}",
        line.map(|l| format!(", line {l}")).unwrap_or_default(),
        source_line.as_ref().map(|s| format!("\n    {s}")).unwrap_or_default())]
    Template {
        /// Where the template came from (a GGUF key, a file).
        origin: String,
        /// 1-based line of the template, when known.
        line: Option<usize>,
        message: String,
        /// The text of that line.
        source_line: Option<String>,
    },

    /// The rendered prompt grew past the output limit (see [`MAX_TEMPLATE_OUTPUT_BYTES`]).
    #[error(
        "chat template ({origin}): the rendered prompt exceeds {limit} bytes (the chat-template output limit, MAX_TEMPLATE_OUTPUT_BYTES)"
    )]
    OutputTooLarge { origin: String, limit: usize },

    /// A template name that the model does not have.
    #[error("no chat template named {name:?} in {origin}; the model has: {available}")]
    UnknownTemplate {
        name: String,
        origin: String,
        available: String,
    },

    /// Messages, tools or a variable given as JSON that does not parse.
    #[error("{what} is not valid JSON: {reason}")]
    BadJson { what: String, reason: String },

    /// A GGUF metadata key of the wrong type.
    #[error(transparent)]
    Metadata(#[from] kiln_format::FormatError),

    /// A config file of a model directory could not be read.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

/// A conversation to render: messages (maps with at least `role` and `content`), and
/// optionally tools, documents and extra template variables (`enable_thinking`, …).
#[derive(Clone, Debug, Default)]
pub struct Conversation {
    messages: Vec<Value>,
    tools: Option<Value>,
    documents: Option<Value>,
    vars: Vec<(String, Value)>,
}

impl Conversation {
    pub fn new() -> Conversation {
        Conversation::default()
    }

    /// Appends a plain text message.
    pub fn push(&mut self, role: &str, content: &str) {
        self.messages
            .push(Value::from_pairs([("role", role), ("content", content)]));
    }

    /// Appends a message given as a JSON object (`tool_calls`, structured content, …).
    /// Keys whose value is `null` are dropped, as transformers drops them.
    pub fn push_json(&mut self, message: &str) -> Result<(), ChatError> {
        let v = parse_json(message, "the message")?;
        if v.kind() != ValueKind::Map {
            return Err(ChatError::BadJson {
                what: "the message".into(),
                reason: "it must be an object".into(),
            });
        }
        self.messages.push(drop_null_keys(&v));
        Ok(())
    }

    /// A conversation from a JSON array of message objects.
    pub fn from_json(messages: &str) -> Result<Conversation, ChatError> {
        let v = parse_json(messages, "the messages")?;
        let items = match v.kind() {
            ValueKind::Seq => v.try_iter().map_err(|e| ChatError::BadJson {
                what: "the messages".into(),
                reason: e.to_string(),
            })?,
            _ => {
                return Err(ChatError::BadJson {
                    what: "the messages".into(),
                    reason: "it must be an array of objects".into(),
                });
            }
        };
        let mut conv = Conversation::new();
        for m in items {
            if m.kind() != ValueKind::Map {
                return Err(ChatError::BadJson {
                    what: "the messages".into(),
                    reason: "every message must be an object".into(),
                });
            }
            conv.messages.push(drop_null_keys(&m));
        }
        Ok(conv)
    }

    /// Messages from any serializable list (struct fields keep their declared order).
    pub fn from_serialize<T: Serialize>(messages: &T) -> Conversation {
        let v = Value::from(minijinja::value::Serde(messages));
        Conversation {
            messages: v.try_iter().map(|it| it.collect()).unwrap_or_default(),
            ..Conversation::default()
        }
    }

    /// The tools (a JSON array of function schemas) the template may describe.
    pub fn set_tools_json(&mut self, tools: &str) -> Result<(), ChatError> {
        self.tools = Some(parse_json(tools, "the tools")?);
        Ok(())
    }

    /// Documents for retrieval templates (a JSON array).
    pub fn set_documents_json(&mut self, documents: &str) -> Result<(), ChatError> {
        self.documents = Some(parse_json(documents, "the documents")?);
        Ok(())
    }

    /// An extra template variable, as JSON (`true`, `"text"`, `{…}`).
    pub fn set_var_json(&mut self, name: &str, value: &str) -> Result<(), ChatError> {
        let v = parse_json(value, &format!("the variable {name}"))?;
        self.vars.retain(|(n, _)| n != name);
        self.vars.push((name.to_owned(), v));
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The role of message `i`.
    pub fn role(&self, i: usize) -> Option<String> {
        let m = self.messages.get(i)?;
        m.get_attr("role").ok()?.as_str().map(str::to_owned)
    }

    /// Removes message `i`; false when there is none.
    pub fn remove(&mut self, i: usize) -> bool {
        if i < self.messages.len() {
            self.messages.remove(i);
            true
        } else {
            false
        }
    }

    /// Drops the messages from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.messages.truncate(len);
    }
}

fn parse_json(text: &str, what: &str) -> Result<Value, ChatError> {
    serde_json::from_str::<Value>(text).map_err(|e| ChatError::BadJson {
        what: what.to_owned(),
        reason: e.to_string(),
    })
}

fn drop_null_keys(m: &Value) -> Value {
    let keys: Vec<Value> = m.try_iter().map(|k| k.collect()).unwrap_or_default();
    Value::from_pairs(keys.into_iter().filter_map(|k| {
        let v = m.get_item(&k).ok()?;
        (!v.is_none()).then_some((k, v))
    }))
}

/// How to render.
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    /// End with the header of an assistant turn, for the model to write it.
    pub add_generation_prompt: bool,
    /// Use this named template (`tool_use`, …) rather than the default.
    pub template_name: Option<String>,
    /// The time `strftime_now` sees (Unix seconds, UTC); the clock when `None`.
    pub now: Option<i64>,
}

impl RenderOptions {
    /// A prompt for the next assistant turn.
    pub fn generation() -> RenderOptions {
        RenderOptions {
            add_generation_prompt: true,
            ..RenderOptions::default()
        }
    }
}

/// The special-token strings a template sees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    pub pad_token: Option<String>,
}

impl SpecialTokens {
    /// The texts of the vocabulary's BOS/EOS/UNK/PAD ids (what llama.cpp passes).
    pub fn of(tok: &Tokenizer) -> SpecialTokens {
        let text = |id: Option<u32>| id.map(|i| tok.token_text(i).to_owned());
        SpecialTokens {
            bos_token: text(tok.bos()),
            eos_token: text(tok.eos()),
            unk_token: text(tok.unk()),
            pad_token: text(tok.pad()),
        }
    }

    /// The names a Hugging Face directory's config gives (what transformers passes).
    pub fn from_hf_config(cfg: &HfTokenizerConfig) -> SpecialTokens {
        SpecialTokens {
            bos_token: cfg.bos_token.clone(),
            eos_token: cfg.eos_token.clone(),
            unk_token: cfg.unk_token.clone(),
            pad_token: cfg.pad_token.clone(),
        }
    }
}

/// Most template instructions one render may execute (minijinja "fuel"). A chat template
/// comes from a model file, that is from a stranger: nested loops over `range()` would
/// otherwise hang the caller. Real templates use a few thousand per message (a
/// 200-message Qwen2.5 conversation with tools stays far below this).
pub const MAX_TEMPLATE_STEPS: u64 = 20_000_000;

/// Most bytes one render may produce (the default of
/// [`ChatTemplate::set_max_output_bytes`]). The template comes from a model file: a loop
/// printing a long value would otherwise build a prompt of any size within the step
/// limit. Real prompts are the messages plus a few hundred bytes per message, and a
/// request body is itself bounded (the server's 4 MiB by default).
pub const MAX_TEMPLATE_OUTPUT_BYTES: usize = 16 << 20;

/// A writer that refuses to grow past `limit` bytes.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
    over: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + b.len() > self.limit {
            self.over = true;
            return Err(std::io::Error::other("the chat-template output limit"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The variable `strftime_now` reads the render time from.
const NOW_VAR: &str = "__kiln_strftime_now__";

/// A model's chat template(s), compiled.
pub struct ChatTemplate {
    origin: String,
    /// `(name, source)`; the default one is named `default`.
    names: Vec<String>,
    env: Environment<'static>,
    special: SpecialTokens,
    /// Most bytes one render may produce.
    max_output: usize,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("names", &self.names)
            .field("special", &self.special)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// One template (named `default`); `origin` says where it came from, for errors.
    pub fn new(
        source: impl Into<String>,
        origin: impl Into<String>,
        special: SpecialTokens,
    ) -> Result<ChatTemplate, ChatError> {
        ChatTemplate::with_names(vec![("default".into(), source.into())], origin, special)
    }

    /// Several named templates; the one named `default` is used unless told otherwise.
    pub fn with_names(
        templates: Vec<(String, String)>,
        origin: impl Into<String>,
        special: SpecialTokens,
    ) -> Result<ChatTemplate, ChatError> {
        let origin = origin.into();
        let mut env = environment();
        let mut names = Vec::with_capacity(templates.len());
        for (name, source) in templates {
            let template_origin = if name == "default" {
                origin.clone()
            } else {
                format!("{origin}, template {name:?}")
            };
            env.add_template_owned(name.clone(), source.clone())
                .map_err(|e| template_error(&e, &template_origin, &source))?;
            names.push(name);
        }
        Ok(ChatTemplate {
            origin,
            names,
            env,
            special,
            max_output: MAX_TEMPLATE_OUTPUT_BYTES,
        })
    }

    /// Sets the most bytes one render may produce (default [`MAX_TEMPLATE_OUTPUT_BYTES`]);
    /// a longer prompt is a [`ChatError::OutputTooLarge`].
    pub fn set_max_output_bytes(&mut self, limit: usize) {
        self.max_output = limit;
    }

    /// The GGUF's `tokenizer.chat_template` (and its named `tokenizer.chat_template.*`
    /// ones), with the vocabulary's special-token texts; `None` when it has none.
    pub fn from_gguf(
        md: &kiln_format::Metadata,
        tok: &Tokenizer,
    ) -> Result<Option<ChatTemplate>, ChatError> {
        let mut templates = Vec::new();
        if let Some(t) = md.opt_str("tokenizer.chat_template")? {
            templates.push(("default".to_owned(), t.to_owned()));
        }
        for (key, _) in md.iter() {
            if let Some(name) = key.strip_prefix("tokenizer.chat_template.")
                && let Some(t) = md.opt_str(key)?
            {
                templates.push((name.to_owned(), t.to_owned()));
            }
        }
        if templates.is_empty() {
            return Ok(None);
        }
        ChatTemplate::with_names(
            templates,
            "GGUF tokenizer.chat_template",
            SpecialTokens::of(tok),
        )
        .map(Some)
    }

    /// The template(s) of a Hugging Face model directory, found as transformers finds
    /// them: `chat_template.jinja` (with `additional_chat_templates/*.jinja`), else
    /// `chat_template.json`, else `tokenizer_config.json`'s `chat_template`. The special
    /// tokens are those of the directory's config files. `None` when it has none.
    pub fn from_hf_dir(dir: &Path) -> Result<Option<ChatTemplate>, ChatError> {
        let special = SpecialTokens::from_hf_config(&HfTokenizerConfig::from_dir(dir)?);
        let jinja = dir.join("chat_template.jinja");
        if let Some(source) = read_text(&jinja)? {
            let mut templates = vec![("default".to_owned(), source)];
            let extra = dir.join("additional_chat_templates");
            if let Ok(entries) = std::fs::read_dir(&extra) {
                let mut found: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
                found.sort();
                for path in found {
                    if path.extension().is_some_and(|e| e == "jinja")
                        && let Some(name) = path.file_stem().and_then(|s| s.to_str())
                        && let Some(source) = read_text(&path)?
                    {
                        templates.push((name.to_owned(), source));
                    }
                }
            }
            return ChatTemplate::with_names(templates, jinja.display().to_string(), special)
                .map(Some);
        }
        for file in ["chat_template.json", "tokenizer_config.json"] {
            let Some(v) = read_json(dir, file)? else {
                continue;
            };
            let origin = dir.join(file).display().to_string();
            match v.get("chat_template") {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::String(s)) => {
                    return ChatTemplate::new(s.clone(), origin, special).map(Some);
                }
                Some(serde_json::Value::Array(list)) => {
                    let mut templates = Vec::new();
                    for item in list {
                        let (Some(name), Some(t)) = (
                            item.get("name").and_then(serde_json::Value::as_str),
                            item.get("template").and_then(serde_json::Value::as_str),
                        ) else {
                            return Err(ChatError::BadJson {
                                what: format!("{origin} chat_template"),
                                reason: "a list of {\"name\", \"template\"} objects".into(),
                            });
                        };
                        templates.push((name.to_owned(), t.to_owned()));
                    }
                    return ChatTemplate::with_names(templates, origin, special).map(Some);
                }
                Some(_) => {
                    return Err(ChatError::BadJson {
                        what: format!("{origin} chat_template"),
                        reason: "a string or a list of named templates".into(),
                    });
                }
            }
        }
        Ok(None)
    }

    /// Where the template came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The template names (`default` first when present).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The source of template `name`.
    pub fn source(&self, name: &str) -> Option<String> {
        self.env
            .get_template(name)
            .ok()
            .map(|t| t.source().to_owned())
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    /// Renders `conv`. Which template: the one named in `opts`, else `tool_use` when
    /// there are tools and the model has one, else `default`.
    pub fn render(&self, conv: &Conversation, opts: &RenderOptions) -> Result<String, ChatError> {
        let name = match &opts.template_name {
            Some(n) => n.as_str(),
            None if conv.tools.is_some() && self.names.iter().any(|n| n == "tool_use") => {
                "tool_use"
            }
            None if self.names.iter().any(|n| n == "default") => "default",
            None => self.names.first().map_or("default", String::as_str),
        };
        let template = self
            .env
            .get_template(name)
            .map_err(|_| ChatError::UnknownTemplate {
                name: name.to_owned(),
                origin: self.origin.clone(),
                available: self.names.join(", "),
            })?;
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        let s = &self.special;
        for (k, v) in [
            ("bos_token", &s.bos_token),
            ("eos_token", &s.eos_token),
            ("unk_token", &s.unk_token),
            ("pad_token", &s.pad_token),
        ] {
            if let Some(v) = v {
                ctx.insert(k.into(), Value::from(v.as_str()));
            }
        }
        for (k, v) in &conv.vars {
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), Value::from(conv.messages.clone()));
        ctx.insert(
            "tools".into(),
            conv.tools.clone().unwrap_or(Value::from(())),
        );
        ctx.insert(
            "documents".into(),
            conv.documents.clone().unwrap_or(Value::from(())),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(opts.add_generation_prompt),
        );
        let now = opts.now.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        });
        ctx.insert(NOW_VAR.into(), Value::from(now));
        let origin = if name == "default" {
            self.origin.clone()
        } else {
            format!("{}, template {name:?}", self.origin)
        };
        let mut out = Capped {
            buf: Vec::new(),
            limit: self.max_output,
            over: false,
        };
        match template.render_captured_to(Value::from(ctx), &mut out) {
            Ok(_) => {}
            Err(_) if out.over => {
                return Err(ChatError::OutputTooLarge {
                    origin,
                    limit: self.max_output,
                });
            }
            Err(e) => return Err(template_error(&e, &origin, template.source())),
        }
        // minijinja writes whole `str` pieces: the bytes are UTF-8.
        Ok(String::from_utf8(out.buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// The ids of a rendered prompt, as llama.cpp's chat path makes them: a leading BOS
    /// text is dropped when the vocabulary adds BOS itself (and a trailing EOS when it adds
    /// EOS), then the text is encoded with special tokens added and parsed.
    pub fn prompt_tokens(
        &self,
        tok: &Tokenizer,
        rendered: &str,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut text = rendered;
        if tok.add_bos()
            && let Some(b) = self.special.bos_token.as_deref().filter(|b| !b.is_empty())
        {
            text = text.strip_prefix(b).unwrap_or(text);
        }
        if tok.add_eos()
            && let Some(e) = self.special.eos_token.as_deref().filter(|e| !e.is_empty())
        {
            text = text.strip_suffix(e).unwrap_or(text);
        }
        tok.encode(text, true, true)
    }
}

fn read_text(path: &Path) -> Result<Option<String>, ChatError> {
    match crate::hf::config::read_bounded(path, 16 << 20) {
        Ok(b) => String::from_utf8(b).map(Some).map_err(|e| {
            ChatError::Tokenizer(TokenizerError::BadTokenizerJson {
                what: path.display().to_string(),
                reason: format!("UTF-8 text ({e})"),
            })
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ChatError::Tokenizer(TokenizerError::Io {
            path: path.to_owned(),
            source,
        })),
    }
}

/// A minijinja error as a [`ChatError::Template`] with the line and its text.
fn template_error(e: &minijinja::Error, origin: &str, source: &str) -> ChatError {
    let mut message = match (e.kind(), e.detail()) {
        (ErrorKind::OutOfFuel, _) => format!(
            "the template ran more than {MAX_TEMPLATE_STEPS} steps (the chat-template step limit, MAX_TEMPLATE_STEPS)"
        ),
        (ErrorKind::InvalidOperation, Some(d)) => d.to_owned(),
        (kind, Some(d)) => format!("{kind}: {d}"),
        (kind, None) => kind.to_string(),
    };
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        message.push_str(&format!(" ({c})"));
        cause = c.source();
    }
    let line = e.line();
    let source_line = line
        .and_then(|l| source.lines().nth(l.saturating_sub(1)))
        .map(|s| s.trim().to_owned());
    ChatError::Template {
        origin: origin.to_owned(),
        line,
        message,
        source_line,
    }
}

/// minijinja set up as transformers' sandboxed Jinja2 environment.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(MAX_TEMPLATE_STEPS));
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .unwrap_or_default(),
    );
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(|out, _state, value| {
        let mut s = String::new();
        python::str_of(value, &mut s);
        out.write_str(&s)
            .map_err(|_| minijinja::Error::from(ErrorKind::WriteFailure))
    });
    env.add_function(
        "raise_exception",
        |msg: String| -> Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_function(
        "strftime_now",
        |state: &State, format: String| -> Result<Value, minijinja::Error> {
            let now = state
                .lookup(NOW_VAR)
                .and_then(|v| v.as_i64())
                .unwrap_or_default();
            Ok(Value::from(strftime::strftime(&format, now)))
        },
    );
    env.add_filter(
        "tojson",
        |value: Value, args: Rest<Value>, kwargs: Kwargs| python::tojson(value, &args, kwargs),
    );
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, conv: &Conversation, generation: bool) -> Result<String, ChatError> {
        let special = SpecialTokens {
            bos_token: Some("<s>".into()),
            eos_token: Some("</s>".into()),
            ..SpecialTokens::default()
        };
        let t = ChatTemplate::new(src, "test", special)?;
        let opts = RenderOptions {
            add_generation_prompt: generation,
            now: Some(1_721_997_296),
            ..RenderOptions::default()
        };
        t.render(conv, &opts)
    }

    fn hello() -> Conversation {
        let mut c = Conversation::new();
        c.push("user", "Hello");
        c
    }

    #[test]
    fn raise_exception_is_an_error_naming_the_line() {
        let src = "{{ bos_token }}\n{% if messages[0].role == 'user' %}\n{{ raise_exception('System role required') }}\n{% endif %}";
        let err = render(src, &hello(), false).unwrap_err();
        let ChatError::Template {
            line,
            ref message,
            ref source_line,
            ..
        } = err
        else {
            panic!("{err:?}");
        };
        assert_eq!(line, Some(3));
        assert_eq!(message, "System role required");
        assert_eq!(
            source_line.as_deref(),
            Some("{{ raise_exception('System role required') }}")
        );
        assert!(err.to_string().contains("line 3"), "{err}");
    }

    #[test]
    fn a_render_over_the_output_limit_is_an_error_naming_it() {
        let src = "{% for i in range(100000) %}{{ messages[0].content }}{% endfor %}";
        let special = SpecialTokens::default();
        let mut t = ChatTemplate::new(src, "test", special).unwrap();
        let mut c = Conversation::new();
        c.push("user", &"x".repeat(1000));
        // 100 MB of output in ~300k steps (under the step limit): stopped at the default.
        let err = t.render(&c, &RenderOptions::default()).unwrap_err();
        assert!(
            matches!(
                err,
                ChatError::OutputTooLarge {
                    limit: MAX_TEMPLATE_OUTPUT_BYTES,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("MAX_TEMPLATE_OUTPUT_BYTES"),
            "{err}"
        );
        // A lower limit, and a render that fits it exactly.
        t.set_max_output_bytes(2500);
        assert!(matches!(
            t.render(&c, &RenderOptions::default()),
            Err(ChatError::OutputTooLarge { limit: 2500, .. })
        ));
        let small = ChatTemplate::new(
            "{% for i in range(2) %}{{ messages[0].content }}{% endfor %}",
            "test",
            SpecialTokens::default(),
        )
        .map(|mut t| {
            t.set_max_output_bytes(2000);
            t
        })
        .unwrap();
        assert_eq!(
            small.render(&c, &RenderOptions::default()).unwrap().len(),
            2000
        );
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let err = ChatTemplate::new("ok\n{% if x %}\n{{ y", "test", SpecialTokens::default())
            .unwrap_err();
        assert!(
            matches!(err, ChatError::Template { line: Some(3), .. }),
            "{err}"
        );
    }

    #[test]
    fn printed_values_and_tojson_follow_python() {
        let mut c = hello();
        c.set_tools_json(r#"[{"name": "f", "z": 1, "a": [1.0, true, null, "é\n"]}]"#)
            .unwrap();
        let out = render(
            "{{ tools[0] | tojson }}|{{ true }}|{{ none }}|{{ [1, 'a'] }}|{{ 1.5e-7 }}",
            &c,
            false,
        )
        .unwrap();
        assert_eq!(
            out,
            r#"{"name": "f", "z": 1, "a": [1.0, true, null, "é\n"]}|True|None|[1, 'a']|1.5e-07"#
        );
        let out = render(
            "{{ tools[0] | tojson(indent=2, sort_keys=true) }}",
            &c,
            false,
        )
        .unwrap();
        assert_eq!(
            out,
            "{\n  \"a\": [\n    1.0,\n    true,\n    null,\n    \"é\\n\"\n  ],\n  \"name\": \"f\",\n  \"z\": 1\n}"
        );
    }

    #[test]
    fn python_string_methods_and_strftime_work() {
        let src = "{{ messages[0].content.upper().strip() }} {{ '  a b '.split() }} {{ strftime_now('%d %b %Y') }}";
        assert_eq!(
            render(src, &hello(), false).unwrap(),
            "HELLO ['a', 'b'] 26 Jul 2024"
        );
    }

    #[test]
    fn blocks_trim_like_transformers() {
        let src = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n";
        assert_eq!(render(src, &hello(), false).unwrap(), "[Hello]\n");
    }

    #[test]
    fn null_keys_are_dropped_and_tools_default_to_none() {
        let c =
            Conversation::from_json(r#"[{"role": "assistant", "content": null, "x": 1}]"#).unwrap();
        let src = "{{ messages[0].content is defined }} {{ tools is none }} {{ messages[0].x }}";
        assert_eq!(render(src, &c, false).unwrap(), "False True 1");
    }
}
