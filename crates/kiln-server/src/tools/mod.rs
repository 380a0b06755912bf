//! Tool calling and reasoning on `/v1/chat/completions`.
//!
//! - Request side ([`prepare`]): `tools`, `tool_choice`, `parallel_tool_calls` and
//!   `chat_template_kwargs` checked; messages with `tool_calls` / role `tool` rendered
//!   through the model's own template (which receives `tools`, as Hugging Face's
//!   `apply_chat_template` passes them); with `required` or a named function, the prompt
//!   ends inside the call syntax and a grammar built from the tool schemas constrains the
//!   reply so its arguments always parse.
//! - Reply side ([`split`]): the text split into `reasoning_content`, `content` and
//!   `tool_calls` by the template's [`Family`], incrementally for streams; a streamed
//!   call's name and arguments are forwarded as they are generated ([`deltas`]).

pub mod deltas;
mod family;
mod parse;
pub mod split;

use std::sync::Arc;

use kiln_engine::{FinishReason, Grammar};
use kiln_tokenizer::chat::{ChatTemplate, Conversation, RenderOptions};
use serde_json::Value;

pub use family::Family;
pub use parse::ParsedCall;

use crate::error::ApiError;
use crate::wire::{ChatMessageOut, FunctionCall, ToolCallOut};

/// How a reply is to be split (shared by the choices of one request).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutputSpec {
    /// The call syntax to look for (`None`: no tools, or `tool_choice: none`).
    pub family: Option<Family>,
    /// The template writes `<think>` blocks.
    pub think: bool,
    /// The prompt ends inside an open `<think>` block.
    pub think_open: bool,
    /// Call syntax already put at the end of the prompt (a required call).
    pub forced_prefix: String,
    /// Markup the model writes as control tokens (whose text a reply leaves out), by id:
    /// the splitter needs to see them.
    pub markers: Vec<(u32, String)>,
}

/// Markup that splits a reply, when the vocabulary has it as one token.
const MARKERS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    "<think>",
    "</think>",
];

impl OutputSpec {
    /// The text a token contributes to the split reply: its released `text`, or the
    /// markup a control token stands for.
    pub fn token_text<'a>(&'a self, id: u32, text: &'a str) -> &'a str {
        match self.markers.iter().find(|(m, _)| *m == id) {
            Some((_, t)) if text.is_empty() => t,
            _ => text,
        }
    }
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Named(String),
}

/// One function from `tools`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub parameters: Value,
}

/// The request fields this module reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct ToolFields<'a> {
    pub tools: Option<&'a Value>,
    pub tool_choice: Option<&'a Value>,
    pub parallel_tool_calls: Option<bool>,
    pub chat_template_kwargs: Option<&'a Value>,
}

/// How the messages are rendered: end with the assistant's header
/// (`add_generation_prompt`), or continue the last message (`continue_final_message`:
/// the prompt is cut right after its content).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatRender {
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
}

/// A rendered prompt and how to treat its reply.
#[derive(Debug)]
pub struct Rendered {
    pub text: String,
    pub grammar: Option<Arc<Grammar>>,
    pub spec: Arc<OutputSpec>,
}

fn bad(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// The functions of `tools` (OpenAI's `[{"type":"function","function":{…}}]`).
pub fn parse_tools(v: &Value) -> Result<Vec<Tool>, ApiError> {
    let list = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(l) => l,
        _ => return Err(bad("tools must be an array", "tools")),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let kind = t.get("type").and_then(Value::as_str);
        if kind != Some("function") {
            return Err(bad(
                format!(
                    "tools[{i}].type must be \"function\" (got {})",
                    t.get("type").unwrap_or(&Value::Null)
                ),
                "tools",
            ));
        }
        let f = t
            .get("function")
            .filter(|f| f.is_object())
            .ok_or_else(|| bad(format!("tools[{i}].function must be an object"), "tools"))?;
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                bad(
                    format!("tools[{i}].function.name must be a string"),
                    "tools",
                )
            })?;
        if out.iter().any(|t: &Tool| t.name == name) {
            return Err(bad(
                format!("tools: the function {name:?} is listed twice"),
                "tools",
            ));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(bad(
                    format!("tools[{i}].function.parameters must be a JSON schema object"),
                    "tools",
                ));
            }
        };
        out.push(Tool {
            name: name.to_string(),
            parameters,
        });
    }
    Ok(out)
}

/// `tool_choice` (`"auto"` when absent), checked against the tools.
pub fn parse_choice(v: Option<&Value>, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
    let choice = match v {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(bad(
                    format!(
                        "tool_choice {other:?} is not one of \"auto\", \"none\", \"required\" or {{\"type\":\"function\",\"function\":{{\"name\":…}}}}"
                    ),
                    "tool_choice",
                ));
            }
        },
        Some(o) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| o.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    bad(
                        "tool_choice must be a string or {\"type\":\"function\",\"function\":{\"name\":…}}",
                        "tool_choice",
                    )
                })?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(bad(
                    format!("tool_choice names the function {name:?}, which is not in tools"),
                    "tool_choice",
                ));
            }
            ToolChoice::Named(name.to_string())
        }
    };
    if tools.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Err(bad(
            "tool_choice requires a call but tools is empty",
            "tool_choice",
        ));
    }
    Ok(choice)
}

/// Templates expect a call's `arguments` as an object (Hugging Face's convention); OpenAI
/// clients send a JSON string. Parses it; anything else is left as sent.
fn arguments_as_objects(m: &mut Value) {
    let Some(Value::Array(calls)) = m.get_mut("tool_calls") else {
        return;
    };
    for c in calls {
        if let Some(f) = c.get_mut("function")
            && let Some(Value::String(s)) = f.get("arguments")
            && let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(s)
        {
            f["arguments"] = v;
        }
    }
}

/// For templates that know no tools: calls written as the reply Kiln asks for, results as
/// user turns.
fn generic_message(m: &mut Value) {
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if role == "assistant"
        && let Some(Value::Array(calls)) = m.get("tool_calls")
    {
        let calls: Vec<Value> = calls
            .iter()
            .filter_map(|c| c.get("function"))
            .map(|f| serde_json::json!({"name": f.get("name"), "arguments": f.get("arguments")}))
            .collect();
        let text = serde_json::json!({ "tool_calls": calls }).to_string();
        m["content"] = Value::String(text);
        if let Some(o) = m.as_object_mut() {
            o.remove("tool_calls");
        }
    } else if role == "tool" {
        let content = m
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        m["role"] = Value::String("user".into());
        m["content"] = Value::String(format!("Tool result: {content}"));
    }
}

/// The system text that describes the tools to a model whose template does not.
fn generic_system_text(tools: &[Tool], parallel: bool) -> String {
    let mut s = String::from(
        "You can call these functions. To call, reply with only a JSON object \
         {\"tool_calls\": [{\"name\": <function name>, \"arguments\": <arguments object>}]}",
    );
    s.push_str(if parallel {
        " (one or more calls)"
    } else {
        " (exactly one call)"
    });
    s.push_str(". Otherwise reply normally.\nFunctions:\n");
    for t in tools {
        s.push_str(&format!(
            "{}\n",
            serde_json::json!({"name": t.name, "parameters": t.parameters})
        ));
    }
    s
}

/// The JSON schema of one call of `family` (name first, then the arguments).
fn call_schema(family: Family, tools: &[&Tool]) -> String {
    let key = family.arguments_key();
    let one = |t: &Tool| {
        format!(
            r#"{{"type":"object","properties":{{"name":{{"const":{}}},"{key}":{}}},"required":["name","{key}"],"additionalProperties":false}}"#,
            Value::String(t.name.clone()),
            t.parameters
        )
    };
    if tools.len() == 1 {
        one(tools[0])
    } else {
        let alts: Vec<String> = tools.iter().map(|t| one(t)).collect();
        format!(r#"{{"anyOf":[{}]}}"#, alts.join(","))
    }
}

/// The grammar a required call is held to, from the text after the family's forced prefix.
fn call_grammar(family: Family, tools: &[&Tool], parallel: bool) -> Result<Grammar, ApiError> {
    let call = call_schema(family, tools);
    let max = if parallel { "" } else { r#","maxItems":1"# };
    let schema = match family {
        Family::Hermes | Family::Llama3 => call,
        Family::Mistral => format!(r#"{{"type":"array","items":{call},"minItems":1{max}}}"#),
        Family::Generic => format!(
            r#"{{"type":"object","properties":{{"tool_calls":{{"type":"array","items":{call},"minItems":1{max}}}}},"required":["tool_calls"],"additionalProperties":false}}"#
        ),
    };
    Grammar::from_json_schema(&schema).map_err(|e| {
        bad(
            format!("cannot constrain calls to these tool schemas: {e}"),
            "tools",
        )
    })
}

/// The template that renders a conversation (the `tool_use` one when there are tools and
/// the model has it).
fn template_source(template: &ChatTemplate, with_tools: bool) -> String {
    let names = template.names();
    let name = if with_tools && names.iter().any(|n| n == "tool_use") {
        "tool_use"
    } else if names.iter().any(|n| n == "default") {
        "default"
    } else {
        names.first().map_or("default", String::as_str)
    };
    template.source(name).unwrap_or_default()
}

/// Renders `messages` (already checked and flattened) with the tool fields applied;
/// `control_id` gives the id of a control token with this text, if the vocabulary has one.
pub fn render(
    template: &ChatTemplate,
    control_id: &dyn Fn(&str) -> Option<u32>,
    mut messages: Vec<Value>,
    f: ToolFields<'_>,
    opts: &ChatRender,
) -> Result<Rendered, ApiError> {
    let tools = f.tools.map(parse_tools).transpose()?.unwrap_or_default();
    let choice = parse_choice(f.tool_choice, &tools)?;
    if matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) && !opts.add_generation_prompt
    {
        // A required call is written in a new assistant turn, after its header.
        return Err(bad(
            "a required tool call starts a new assistant turn: not with add_generation_prompt: false or continue_final_message: true",
            "tool_choice",
        ));
    }
    // The text `continue_final_message` continues, as the client sent it.
    let last = messages
        .last()
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let parallel = f.parallel_tool_calls.unwrap_or(true);
    let use_tools = !tools.is_empty() && choice != ToolChoice::None;
    let source = template_source(template, use_tools);
    let family = Family::of_template(&source);
    let think = source.contains("<think>");
    for m in &mut messages {
        arguments_as_objects(m);
        if family == Family::Generic {
            generic_message(m);
        }
    }
    if use_tools && !family.template_renders_tools() {
        let text = generic_system_text(&tools, parallel);
        match messages.first_mut() {
            Some(m) if m.get("role").and_then(Value::as_str) == Some("system") => {
                let old = m.get("content").and_then(Value::as_str).unwrap_or("");
                m["content"] = Value::String(format!("{old}\n\n{text}"));
            }
            _ => messages.insert(0, serde_json::json!({"role": "system", "content": text})),
        }
    }
    let mut conv = Conversation::from_json(&Value::Array(messages).to_string())
        .map_err(|e| bad(e.to_string(), "messages"))?;
    if use_tools && family.template_renders_tools() {
        let list: Vec<Value> = f
            .tools
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        conv.set_tools_json(&Value::Array(list).to_string())
            .map_err(|e| bad(e.to_string(), "tools"))?;
    }
    match f.chat_template_kwargs {
        None | Some(Value::Null) => {}
        Some(Value::Object(kw)) => {
            for (k, v) in kw {
                conv.set_var_json(k, &v.to_string())
                    .map_err(|e| bad(e.to_string(), "chat_template_kwargs"))?;
            }
        }
        Some(_) => {
            return Err(bad(
                "chat_template_kwargs must be an object",
                "chat_template_kwargs",
            ));
        }
    }
    let options = RenderOptions {
        add_generation_prompt: opts.add_generation_prompt,
        ..RenderOptions::default()
    };
    let mut text = template.render(&conv, &options).map_err(|e| {
        bad(
            format!("the chat template rejected the messages: {e}"),
            "messages",
        )
    })?;
    if opts.continue_final_message {
        // Cut after the last message's content: the model continues it (its end-of-turn
        // marker, which the template wrote, goes).
        let needle = last.trim_end();
        let at = (!needle.is_empty())
            .then(|| text.rfind(needle))
            .flatten()
            .ok_or_else(|| {
                bad(
                    "continue_final_message: the last message's content is empty or not in the rendered prompt",
                    "continue_final_message",
                )
            })?;
        text.truncate(at + needle.len());
    }
    let forced: Vec<&Tool> = match &choice {
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(n) => tools.iter().filter(|t| &t.name == n).collect(),
        ToolChoice::Auto | ToolChoice::None => Vec::new(),
    };
    let (grammar, forced_prefix) = if forced.is_empty() {
        (None, String::new())
    } else {
        let g = call_grammar(family, &forced, parallel)?;
        let prefix = family.forced_prefix().to_string();
        text.push_str(&prefix);
        (Some(Arc::new(g)), prefix)
    };
    let think_open = think && {
        let t = text.trim_end();
        t.ends_with("<think>")
    };
    let markers = if use_tools || think {
        MARKERS
            .iter()
            .filter_map(|m| control_id(m).map(|id| (id, m.to_string())))
            .collect()
    } else {
        Vec::new()
    };
    Ok(Rendered {
        text,
        grammar,
        spec: Arc::new(OutputSpec {
            family: use_tools.then_some(family),
            think,
            think_open,
            forced_prefix,
            markers,
        }),
    })
}

/// The finish reason a choice reports: `tool_calls` when it ended normally with calls.
pub fn finish_reason(finish: FinishReason, has_calls: bool) -> &'static str {
    if has_calls && finish == FinishReason::Stop {
        "tool_calls"
    } else {
        finish.as_str()
    }
}

/// A finished reply as `message` (content `null` when it is only calls).
pub fn message(
    spec: Option<&Arc<OutputSpec>>,
    text: &str,
    finish: FinishReason,
) -> (ChatMessageOut, &'static str) {
    let Some(spec) = spec else {
        return (
            ChatMessageOut {
                role: "assistant",
                content: Some(text.to_string()),
                reasoning_content: None,
                tool_calls: Vec::new(),
            },
            finish.as_str(),
        );
    };
    let (reasoning_content, content, calls) = split::split_all(spec, text);
    let tool_calls: Vec<ToolCallOut> = calls.into_iter().map(call_out).collect();
    let content = (tool_calls.is_empty() || !content.is_empty()).then_some(content);
    let reason = finish_reason(finish, !tool_calls.is_empty());
    (
        ChatMessageOut {
            role: "assistant",
            content,
            reasoning_content,
            tool_calls,
        },
        reason,
    )
}

/// A parsed call with a fresh id.
pub fn call_out(c: ParsedCall) -> ToolCallOut {
    ToolCallOut {
        id: call_id(),
        kind: "function",
        function: FunctionCall {
            name: c.name,
            arguments: c.arguments,
        },
    }
}

/// A fresh call id, `call_` and 24 letters and digits.
pub fn call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = t ^ COUNTER
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut id = String::from("call_");
    for _ in 0..24 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        id.push(ALPHABET[(z % ALPHABET.len() as u64) as usize] as char);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Value {
        json!([{"type":"function","function":{"name":"get_weather","description":"Weather",
            "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])
    }

    #[test]
    fn tools_and_tool_choice_are_checked_naming_the_field() {
        let tools = parse_tools(&weather()).unwrap();
        assert_eq!(tools[0].name, "get_weather");
        let e = parse_tools(&json!([{"type":"retrieval"}])).unwrap_err();
        assert_eq!(e.param, Some("tools"));
        let e = parse_tools(&json!([{"type":"function","function":{}}])).unwrap_err();
        assert!(e.message.contains("name"), "{}", e.message);
        assert_eq!(parse_choice(None, &tools).unwrap(), ToolChoice::Auto);
        assert_eq!(
            parse_choice(Some(&json!("required")), &tools).unwrap(),
            ToolChoice::Required
        );
        assert_eq!(
            parse_choice(
                Some(&json!({"type":"function","function":{"name":"get_weather"}})),
                &tools
            )
            .unwrap(),
            ToolChoice::Named("get_weather".into())
        );
        let e = parse_choice(
            Some(&json!({"type":"function","function":{"name":"nope"}})),
            &tools,
        )
        .unwrap_err();
        assert_eq!(e.param, Some("tool_choice"));
        assert!(parse_choice(Some(&json!("sometimes")), &tools).is_err());
        assert!(parse_choice(Some(&json!("required")), &[]).is_err());
    }

    #[test]
    fn string_arguments_become_objects_for_the_template() {
        let mut m = json!({"role":"assistant","tool_calls":[{"id":"call_1","type":"function",
            "function":{"name":"f","arguments":"{\"a\": 1}"}}]});
        arguments_as_objects(&mut m);
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], json!({"a": 1}));
    }

    #[test]
    fn call_grammars_compile_for_every_family() {
        let tools = parse_tools(&weather()).unwrap();
        let refs: Vec<&Tool> = tools.iter().collect();
        for family in [
            Family::Hermes,
            Family::Llama3,
            Family::Mistral,
            Family::Generic,
        ] {
            for parallel in [false, true] {
                call_grammar(family, &refs, parallel).unwrap();
            }
        }
    }

    const HERMES: &str = "{%- if tools %}TOOLS{% for t in tools %} {{ t.function.name }}{% endfor %}\n{% endif %}\
{%- for m in messages %}<{{ m.role }}>{{ m.content }}\
{%- for c in m.tool_calls %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}\n{% endfor %}\
{%- if enable_thinking is defined %}THINK={{ enable_thinking }}\n{% endif %}<assistant>";

    /// A new assistant turn (the default of both endpoints).
    const GEN: ChatRender = ChatRender {
        add_generation_prompt: true,
        continue_final_message: false,
    };

    fn template(src: &str) -> ChatTemplate {
        ChatTemplate::new(src, "test", kiln_tokenizer::chat::SpecialTokens::default()).unwrap()
    }

    fn conversation() -> Vec<Value> {
        vec![
            json!({"role":"user","content":"Weather in Paris?"}),
            json!({"role":"assistant","tool_calls":[{"id":"call_1","type":"function",
                "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]}),
            json!({"role":"tool","tool_call_id":"call_1","content":"18C"}),
        ]
    }

    #[test]
    fn the_template_renders_tools_calls_and_kwargs_and_required_ends_inside_the_call() {
        let t = template(HERMES);
        let tools = weather();
        let kwargs = json!({"enable_thinking": false});
        let fields = |choice: Option<&'static Value>| ToolFields {
            tools: Some(&tools),
            tool_choice: choice,
            parallel_tool_calls: None,
            chat_template_kwargs: Some(&kwargs),
        };
        let r = render(&t, &|_| None, conversation(), fields(None), &GEN).unwrap();
        assert!(r.text.starts_with("TOOLS get_weather<user>"), "{}", r.text);
        assert!(
            r.text.contains(
                r#"<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><tool>18C"#
            ),
            "{}",
            r.text
        );
        assert!(r.text.ends_with("THINK=False\n<assistant>"), "{}", r.text);
        assert_eq!(r.spec.family, Some(Family::Hermes));
        assert!(r.grammar.is_none());
        static REQUIRED: std::sync::LazyLock<Value> =
            std::sync::LazyLock::new(|| json!("required"));
        let r = render(&t, &|_| None, conversation(), fields(Some(&REQUIRED)), &GEN).unwrap();
        assert!(r.text.ends_with("<assistant><tool_call>\n"), "{}", r.text);
        let g = r.grammar.unwrap();
        assert!(g.matches(br#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#));
        assert!(!g.matches(br#"{"name": "get_weather", "arguments": {}}"#));
        assert!(!g.matches(br#"{"name": "other", "arguments": {"city": "Paris"}}"#));
        static NONE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!("none"));
        let r = render(&t, &|_| None, conversation(), fields(Some(&NONE)), &GEN).unwrap();
        assert!(!r.text.starts_with("TOOLS") && r.spec.family.is_none());
    }

    #[test]
    fn templates_without_tools_get_them_described_in_a_system_message() {
        let t = template("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}>");
        let tools = weather();
        let r = render(
            &t,
            &|_| None,
            conversation(),
            ToolFields {
                tools: Some(&tools),
                ..ToolFields::default()
            },
            &GEN,
        )
        .unwrap();
        assert_eq!(r.spec.family, Some(Family::Generic));
        assert!(
            r.text.starts_with("[system] You can call these functions"),
            "{}",
            r.text
        );
        assert!(r.text.contains(r#"[assistant] {"tool_calls":[{"arguments":{"city":"Paris"},"name":"get_weather"}]}"#), "{}", r.text);
        assert!(r.text.contains("[user] Tool result: 18C"), "{}", r.text);
    }

    #[test]
    fn render_options_apply_with_tools_and_a_required_call_needs_a_new_turn() {
        let t = template(HERMES);
        let tools = weather();
        let mut msgs = conversation();
        msgs.push(json!({"role":"assistant","content":"It is"}));
        let auto = ToolFields {
            tools: Some(&tools),
            ..ToolFields::default()
        };
        let cont = ChatRender {
            add_generation_prompt: false,
            continue_final_message: true,
        };
        let r = render(&t, &|_| None, msgs.clone(), auto, &cont).unwrap();
        assert!(r.text.starts_with("TOOLS get_weather"), "{}", r.text);
        assert!(r.text.ends_with("<assistant>It is"), "{}", r.text);
        let no_header = ChatRender {
            add_generation_prompt: false,
            continue_final_message: false,
        };
        let required = json!("required");
        for opts in [cont, no_header] {
            let e = render(
                &t,
                &|_| None,
                msgs.clone(),
                ToolFields {
                    tool_choice: Some(&required),
                    ..auto
                },
                &opts,
            )
            .unwrap_err();
            assert_eq!(e.param, Some("tool_choice"), "{opts:?}");
        }
    }

    #[test]
    fn call_ids_have_openais_shape_and_differ() {
        let (a, b) = (call_id(), call_id());
        assert!(a.starts_with("call_") && a.len() == 29, "{a}");
        assert_ne!(a, b);
    }
}
