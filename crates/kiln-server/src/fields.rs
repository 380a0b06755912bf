//! Every request field of `/v1/completions`, `/v1/chat/completions`, `/infill` and the
//! embeddings endpoints ([`FIELDS`]), and of Anthropic's `/v1/messages` and
//! `/v1/messages/count_tokens` ([`ANTHROPIC_FIELDS`]): what Kiln does with it (honoured,
//! accepted as a no-op, or refused) and an example value. The lists decide which fields are
//! known (anything else is a 400: OpenAI's "Unrecognized request argument supplied",
//! Anthropic's "Extra inputs are not permitted"; or a warning under `--lenient-params`),
//! which are refused, and they are the tables in `docs/serving.md` ([`markdown_table`],
//! [`anthropic_markdown_table`]; a test checks the copies are equal). Adding a field: one
//! row here, its parsing in `wire.rs` (or `anthropic.rs`), its effect in `params.rs` or the
//! handler.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// Which endpoint a body is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
    /// `/v1/embeddings` and `/embedding`.
    Embeddings,
    /// llama-server's `/infill`.
    Infill,
    /// Anthropic's `POST /v1/messages`.
    Messages,
    /// Anthropic's `POST /v1/messages/count_tokens`.
    CountTokens,
}

impl Endpoint {
    /// Anthropic's endpoints (their errors say "Extra inputs are not permitted").
    fn is_anthropic(self) -> bool {
        matches!(self, Endpoint::Messages | Endpoint::CountTokens)
    }
}

/// Where a field is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    /// Every generation endpoint of OpenAI's API: completions, chat (and `/infill`).
    Both,
    Completions,
    Chat,
    Embeddings,
    Infill,
    /// `/v1/messages` only.
    Messages,
    /// `/v1/messages` and `/v1/messages/count_tokens`.
    Anthropic,
}

impl On {
    fn includes(self, e: Endpoint) -> bool {
        matches!(
            (self, e),
            (
                On::Both,
                Endpoint::Completions | Endpoint::Chat | Endpoint::Infill
            ) | (On::Completions, Endpoint::Completions)
                | (On::Chat, Endpoint::Chat)
                | (On::Embeddings, Endpoint::Embeddings)
                | (On::Infill, Endpoint::Infill)
                | (On::Messages, Endpoint::Messages)
                | (On::Anthropic, Endpoint::Messages | Endpoint::CountTokens)
        )
    }

    fn label(self) -> &'static str {
        match self {
            On::Both => "both",
            On::Completions => "completions",
            On::Chat => "chat",
            On::Embeddings => "embeddings",
            On::Infill => "infill",
            On::Messages => "messages",
            On::Anthropic => "messages, count_tokens",
        }
    }
}

/// What Kiln does with a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// It changes the answer as documented.
    Honoured,
    /// Accepted and documented as having no effect on a local server (`user`, `store`, …).
    NoOp,
    /// A 400 naming the field, except for the values [`accepted_anyway`] lists (the
    /// defaults that ask for nothing, like `echo: false`).
    Refused,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Honoured => "honoured",
            Status::NoOp => "no-op",
            Status::Refused => "refused",
        }
    }
}

/// One request field.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub name: &'static str,
    pub on: On,
    pub status: Status,
    /// A JSON value that exercises `status` (for a refused field, one that is refused).
    pub example: &'static str,
    pub meaning: &'static str,
}

const fn f(
    name: &'static str,
    on: On,
    status: Status,
    example: &'static str,
    meaning: &'static str,
) -> Field {
    Field {
        name,
        on,
        status,
        example,
        meaning,
    }
}

use On::{Anthropic, Both, Chat, Completions, Embeddings, Infill, Messages};
use Status::{Honoured, NoOp, Refused};

/// Every field both endpoints know, OpenAI's first, then the llama.cpp / vLLM extensions.
pub const FIELDS: &[Field] = &[
    // OpenAI, both endpoints.
    f(
        "model",
        Both,
        Honoured,
        r#""smollm2-135m""#,
        "the served id or an alias; absent: the served model; else 404",
    ),
    f(
        "max_tokens",
        Both,
        Honoured,
        "4",
        "most generated tokens (completions: default 16; chat: default the rest of the context)",
    ),
    f("temperature", Both, Honoured, "0.5", "0–2; 0 is greedy"),
    f("top_p", Both, Honoured, "0.9", "nucleus sampling, (0, 1]"),
    f(
        "frequency_penalty",
        Both,
        Honoured,
        "0.5",
        "−2…2, over the last `repeat_last_n` tokens",
    ),
    f(
        "presence_penalty",
        Both,
        Honoured,
        "0.5",
        "−2…2, over the last `repeat_last_n` tokens",
    ),
    f(
        "stop",
        Both,
        Honoured,
        r#"["\n\n"]"#,
        "string or array (at most 16); never part of the returned text",
    ),
    f(
        "seed",
        Both,
        Honoured,
        "7",
        "choice *i* is sampled with `seed + i` (default: random)",
    ),
    f(
        "n",
        Both,
        Honoured,
        "2",
        "choices per prompt (1 … `--max-n`)",
    ),
    f(
        "stream",
        Both,
        Honoured,
        "true",
        "server-sent events; the headers go out at once, the body with the first token (a chat stream's `delta.role` chunk too, as vLLM sends it: routers read the first body byte as the end of prefill)",
    ),
    f(
        "stream_options",
        Both,
        Honoured,
        r#"{"include_usage":true}"#,
        "`include_usage`: a last chunk with `usage`",
    ),
    f(
        "logit_bias",
        Both,
        Honoured,
        r#"{"13":-100}"#,
        "token id → −100…100; −100 bans the token",
    ),
    f(
        "user",
        Both,
        NoOp,
        r#""someone""#,
        "an end-user id; nothing is stored",
    ),
    f(
        "response_format",
        Both,
        Honoured,
        r#"{"type":"json_object"}"#,
        "`text`, `json_object`, `json_schema` (enforced by a grammar)",
    ),
    // OpenAI, completions.
    f(
        "prompt",
        Completions,
        Honoured,
        r#""Hello""#,
        "string, strings, token ids, or lists of token ids",
    ),
    f(
        "logprobs",
        Completions,
        Honoured,
        "2",
        "0–20 alternatives per token (the legacy object)",
    ),
    f(
        "echo",
        Completions,
        Refused,
        "true",
        "returning the prompt with the completion is not supported (`false` is accepted)",
    ),
    f(
        "best_of",
        Completions,
        Refused,
        "3",
        "server-side best-of is not supported (`best_of` equal to `n` is accepted)",
    ),
    f(
        "suffix",
        Completions,
        Honoured,
        r#""\n}""#,
        "fill in the middle: the text after the completion, `prompt` the text before (strings only; a model without FIM tokens: 400; empty: a plain completion)",
    ),
    // OpenAI, chat.
    f(
        "messages",
        Chat,
        Honoured,
        r#"[{"role":"user","content":"Hi"}]"#,
        "rendered with the model's chat template; roles system, developer, user, assistant, tool, function; other roles are a 400",
    ),
    f(
        "max_completion_tokens",
        Chat,
        Honoured,
        "4",
        "as `max_tokens` (wins over it)",
    ),
    f(
        "logprobs",
        Chat,
        Honoured,
        "true",
        "`logprobs.content[]` per token",
    ),
    f(
        "top_logprobs",
        Chat,
        Honoured,
        "2",
        "0–20 alternatives per token (needs `logprobs: true`)",
    ),
    f("metadata", Chat, NoOp, r#"{"k":"v"}"#, "nothing is stored"),
    f("store", Chat, NoOp, "false", "nothing is stored"),
    f("service_tier", Chat, NoOp, r#""auto""#, "one tier"),
    f(
        "safety_identifier",
        Chat,
        NoOp,
        r#""someone""#,
        "an end-user id; nothing is stored",
    ),
    f(
        "prompt_cache_key",
        Chat,
        NoOp,
        r#""k""#,
        "the prefix cache is automatic",
    ),
    f(
        "prediction",
        Chat,
        NoOp,
        r#"{"type":"content","content":"x"}"#,
        "a latency hint; the answer is the same without it",
    ),
    f(
        "verbosity",
        Chat,
        NoOp,
        r#""low""#,
        "a hint for reasoning models; the prompt is not changed",
    ),
    f(
        "modalities",
        Chat,
        Refused,
        r#"["text","audio"]"#,
        "text output only (`[\"text\"]` is accepted)",
    ),
    f(
        "audio",
        Chat,
        Refused,
        r#"{"voice":"alloy","format":"mp3"}"#,
        "audio output is not supported",
    ),
    f(
        "web_search_options",
        Chat,
        Refused,
        "{}",
        "web search is not supported",
    ),
    f(
        "tools",
        Chat,
        Honoured,
        r#"[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]"#,
        "functions the model may call, rendered by the model's chat template; calls come back as `tool_calls`",
    ),
    f(
        "tool_choice",
        Chat,
        Honoured,
        r#""auto""#,
        "`auto` (default), `none`, `required` or `{\"type\":\"function\",\"function\":{\"name\":…}}`; a required call is held to the tool schemas by a grammar",
    ),
    f(
        "parallel_tool_calls",
        Chat,
        Honoured,
        "false",
        "whether one reply may hold several calls (default true)",
    ),
    f(
        "functions",
        Chat,
        Refused,
        r#"[{"name":"f"}]"#,
        "the deprecated form of `tools`, not supported: use `tools` (an empty list is accepted)",
    ),
    f(
        "function_call",
        Chat,
        Refused,
        r#""auto""#,
        "the deprecated form of `tool_choice`, not supported: use `tool_choice` (`none` is accepted)",
    ),
    f(
        "reasoning_effort",
        Chat,
        Refused,
        r#""low""#,
        "reasoning controls are not supported",
    ),
    f(
        "chat_template_kwargs",
        Chat,
        Honoured,
        r#"{"enable_thinking":false}"#,
        "extra chat-template variables (an object)",
    ),
    // llama.cpp / vLLM extensions, both endpoints.
    f(
        "top_k",
        Both,
        Honoured,
        "20",
        "keep the k most likely tokens (0 disables)",
    ),
    f(
        "min_p",
        Both,
        Honoured,
        "0.05",
        "drop tokens below this fraction of the best one's probability, 0–1",
    ),
    f(
        "typical_p",
        Both,
        Honoured,
        "0.9",
        "locally typical sampling mass, 0–1 (1 disables)",
    ),
    f(
        "repeat_penalty",
        Both,
        Honoured,
        "1.1",
        "llama.cpp's repetition penalty (> 0; 1 disables)",
    ),
    f(
        "repetition_penalty",
        Both,
        Honoured,
        "1.1",
        "vLLM's name for `repeat_penalty` (give one of the two)",
    ),
    f(
        "repeat_last_n",
        Both,
        Honoured,
        "32",
        "tokens the penalties look back over (0 disables, −1 the context)",
    ),
    f(
        "dry_multiplier",
        Both,
        Honoured,
        "0.8",
        "DRY repetition penalty (0 disables)",
    ),
    f("dry_base", Both, Honoured, "1.75", "DRY base (≥ 1)"),
    f(
        "dry_allowed_length",
        Both,
        Honoured,
        "2",
        "repeats up to this long are not penalised by DRY",
    ),
    f(
        "dry_penalty_last_n",
        Both,
        Honoured,
        "64",
        "tokens DRY scans (0 disables, −1 the context)",
    ),
    f(
        "dry_sequence_breakers",
        Both,
        Honoured,
        r#"["\n"]"#,
        "strings that end a DRY match",
    ),
    f(
        "grammar",
        Both,
        Honoured,
        r#""root ::= \"yes\" | \"no\"""#,
        "a GBNF grammar (rule `root`) the output must match",
    ),
    f(
        "json_schema",
        Both,
        Honoured,
        r#"{"type":"object"}"#,
        "llama.cpp's: a JSON schema the output must match",
    ),
    f(
        "guided_json",
        Both,
        Honoured,
        r#"{"type":"object"}"#,
        "vLLM's: a JSON schema (object or string)",
    ),
    f(
        "guided_grammar",
        Both,
        Honoured,
        r#""root ::= \"yes\" | \"no\"""#,
        "vLLM's: a GBNF grammar",
    ),
    f(
        "structured_outputs",
        Both,
        Honoured,
        r#"{"choice":["yes","no"]}"#,
        "vLLM's: one of `json`, `grammar`, `choice`, `json_object`",
    ),
    f(
        "ignore_eos",
        Both,
        Honoured,
        "true",
        "keep generating past end-of-generation tokens up to `max_tokens`",
    ),
    f(
        "speculative",
        Both,
        Honoured,
        "false",
        "speculative decoding for this request: `false` opts out of the server's default (`kiln serve --spec`), `true` opts in when it is off (n-gram drafts); the output is the same either way",
    ),
    // Fields vllm-router (SGLang's request types) adds to every body it forwards, with
    // these defaults; each is Kiln's behaviour.
    f(
        "no_stop_trim",
        Both,
        Refused,
        "true",
        "stop strings are always trimmed from the text (`false` is accepted)",
    ),
    f(
        "skip_special_tokens",
        Both,
        Refused,
        "false",
        "special tokens are always left out of the text (`true` is accepted)",
    ),
    f(
        "return_hidden_states",
        Both,
        Refused,
        "true",
        "hidden states are not returned (`false` is accepted)",
    ),
    // Extensions, chat.
    f(
        "add_generation_prompt",
        Chat,
        Honoured,
        "false",
        "end the prompt with the assistant header (default true)",
    ),
    f(
        "continue_final_message",
        Chat,
        Honoured,
        "true",
        "continue the last message instead of starting a new one (not with `add_generation_prompt: true`)",
    ),
    // vllm-router's defaults again (reasoning is split into `reasoning_content` when the
    // template has it, and streamed).
    f(
        "separate_reasoning",
        Chat,
        Refused,
        "false",
        "reasoning is always split into `reasoning_content` (`true` is accepted)",
    ),
    f(
        "stream_reasoning",
        Chat,
        Refused,
        "false",
        "reasoning is always streamed as it comes (`true` is accepted)",
    ),
    f(
        "include_reasoning",
        Chat,
        Refused,
        "false",
        "reasoning is always included (`true` is accepted)",
    ),
    // llama-server's `/infill` (and every generation field of "both").
    f(
        "input_prefix",
        Infill,
        Honoured,
        r#""def f():\n""#,
        "the code before the cursor (required)",
    ),
    f(
        "input_suffix",
        Infill,
        Honoured,
        r#""\n""#,
        "the code after the cursor (required)",
    ),
    f(
        "input_extra",
        Infill,
        Honoured,
        r#"[{"filename":"util.py","text":"X = 1\n"}]"#,
        "other files as context, `[{\"filename\", \"text\"}]`, before the prefix (repository-level FIM)",
    ),
    f(
        "prompt",
        Infill,
        Honoured,
        r#""    ""#,
        "text after the prefix that the completion continues from (a string)",
    ),
    f(
        "n_predict",
        Infill,
        Honoured,
        "4",
        "llama-server's name for `max_tokens` (−1: no limit; default: until end of generation)",
    ),
    f(
        "n_indent",
        Infill,
        Honoured,
        "4",
        "llama-server's: stop at the first new line indented by fewer spaces/tabs, cutting it (not with `stream`)",
    ),
    // Embeddings (`/v1/embeddings`, and llama-server's `/embedding`).
    f(
        "model",
        Embeddings,
        Honoured,
        r#""smollm2-135m""#,
        "the served id or an alias; absent: the served model; else 404",
    ),
    f(
        "input",
        Embeddings,
        Honoured,
        r#"["Hello","world"]"#,
        "string, strings, token ids, or lists of token ids; one embedding each (special tokens added as the model says)",
    ),
    f(
        "content",
        Embeddings,
        Honoured,
        r#""Hello""#,
        "llama-server's name for `input`",
    ),
    f(
        "encoding_format",
        Embeddings,
        Honoured,
        r#""base64""#,
        "`float` (default) or `base64` (little-endian f32)",
    ),
    f(
        "dimensions",
        Embeddings,
        Honoured,
        "576",
        "must equal the model's embedding length (reducing it is not supported: 400)",
    ),
    f(
        "user",
        Embeddings,
        NoOp,
        r#""someone""#,
        "an end-user id; nothing is stored",
    ),
    f(
        "embd_normalize",
        Embeddings,
        Honoured,
        "2",
        "llama.cpp's: −1 none, 0 int16 range, 1 taxicab, 2 Euclidean (default), p > 2 p-norm; pooled vectors only",
    ),
];

/// Every field of Anthropic's Messages API (`/v1/messages` and its `count_tokens`).
pub const ANTHROPIC_FIELDS: &[Field] = &[
    f(
        "model",
        Anthropic,
        Honoured,
        r#""smollm2-135m""#,
        "the served id or an alias; absent: the served model; else 404 `not_found_error`",
    ),
    f(
        "max_tokens",
        Messages,
        Honoured,
        "4",
        "required; most generated tokens (at least 1, within the context)",
    ),
    f(
        "messages",
        Anthropic,
        Honoured,
        r#"[{"role":"user","content":"Hi"}]"#,
        "roles `user` and `assistant`; content a string or `text`, `tool_use`, `tool_result` blocks (`thinking` blocks of earlier turns are dropped); other blocks (`image`, `document`, …) are a 400",
    ),
    f(
        "system",
        Anthropic,
        Honoured,
        r#""Be concise.""#,
        "a string or `text` blocks: the chat template's system message",
    ),
    f(
        "stop_sequences",
        Messages,
        Honoured,
        r#"["\n\n"]"#,
        "strings that end the reply (at most 16; never part of the text); `stop_reason: \"stop_sequence\"` names the one met",
    ),
    f(
        "stream",
        Messages,
        Honoured,
        "true",
        "Anthropic's server-sent events",
    ),
    f("temperature", Messages, Honoured, "0.5", "0–1; 0 is greedy"),
    f(
        "top_p",
        Messages,
        Honoured,
        "0.9",
        "nucleus sampling, (0, 1]",
    ),
    f(
        "top_k",
        Messages,
        Honoured,
        "20",
        "keep the k most likely tokens (0 disables)",
    ),
    f(
        "metadata",
        Messages,
        NoOp,
        r#"{"user_id":"someone"}"#,
        "nothing is stored",
    ),
    f("service_tier", Messages, NoOp, r#""auto""#, "one tier"),
    f(
        "tools",
        Anthropic,
        Honoured,
        r#"[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]"#,
        "custom tools (`name`, `description`, `input_schema`), rendered by the model's chat template; calls come back as `tool_use` blocks; Anthropic's server tools (`web_search`, `bash`, …) are a 400",
    ),
    f(
        "tool_choice",
        Anthropic,
        Honoured,
        r#"{"type":"auto"}"#,
        "`auto` (default), `any`, `tool` (with `name`) or `none`; `any` and `tool` hold the call to the tool schemas by a grammar; `disable_parallel_tool_use` honoured",
    ),
    f(
        "thinking",
        Anthropic,
        Honoured,
        r#"{"type":"disabled"}"#,
        "`disabled` sets the template's `enable_thinking` false; `enabled` sets it true for templates with `<think>` blocks (reasoning comes back as `thinking` blocks; `budget_tokens` is not enforced) and is a 400 for others",
    ),
    f(
        "cache_control",
        Anthropic,
        NoOp,
        r#"{"type":"ephemeral"}"#,
        "the prefix cache is automatic (per-block `cache_control` likewise)",
    ),
    f(
        "inference_geo",
        Messages,
        NoOp,
        r#""us""#,
        "inference runs on this server",
    ),
    f("speed", Messages, NoOp, r#""fast""#, "one speed"),
    f(
        "user_profile_id",
        Messages,
        NoOp,
        r#""someone""#,
        "nothing is stored",
    ),
    f(
        "diagnostics",
        Messages,
        Refused,
        r#"{"previous_message_id":"msg_1"}"#,
        "prompt-cache diagnostics are not supported",
    ),
    f(
        "output_config",
        Anthropic,
        Refused,
        r#"{"effort":"low"}"#,
        "output settings (`effort`, `format`) are not supported",
    ),
    f(
        "output_format",
        Anthropic,
        Refused,
        r#"{"type":"json_schema","schema":{"type":"object"}}"#,
        "structured output through this field is not supported",
    ),
    f(
        "container",
        Messages,
        Refused,
        r#""container_1""#,
        "code-execution containers are not supported",
    ),
    f(
        "mcp_servers",
        Anthropic,
        Refused,
        r#"[{"type":"url","url":"https://example.com/sse","name":"x"}]"#,
        "MCP servers are not supported (an empty list is accepted)",
    ),
    f(
        "context_management",
        Messages,
        Refused,
        r#"{"edits":[{"type":"clear_tool_uses_20250919"}]}"#,
        "context editing is not supported",
    ),
];

/// The rows of [`FIELDS`] and [`ANTHROPIC_FIELDS`] for one endpoint.
pub fn of(endpoint: Endpoint) -> impl Iterator<Item = &'static Field> {
    FIELDS
        .iter()
        .chain(ANTHROPIC_FIELDS)
        .filter(move |f| f.on.includes(endpoint))
}

/// A refused field's values that ask for nothing and are accepted (`obj` is the body).
fn accepted_anyway(name: &str, v: &Value, obj: &Map<String, Value>) -> bool {
    match name {
        "echo" => v == &Value::Bool(false),
        "best_of" => v.as_i64() == Some(obj.get("n").and_then(Value::as_i64).unwrap_or(1)),
        "functions" => v.as_array().is_some_and(Vec::is_empty),
        "function_call" => v.as_str() == Some("none"),
        "modalities" => v.as_array().is_some_and(|a| a.iter().all(|m| m == "text")),
        "mcp_servers" => v.as_array().is_some_and(Vec::is_empty),
        "no_stop_trim" | "return_hidden_states" => v == &Value::Bool(false),
        "skip_special_tokens" | "separate_reasoning" | "stream_reasoning" | "include_reasoning" => {
            v == &Value::Bool(true)
        }
        _ => false,
    }
}

/// Checks a body's fields against [`FIELDS`]: an unknown field is a 400 (or, when
/// `lenient`, removed and logged), a refused field with a value that asks for something is
/// a 400 naming it. `null` counts as absent.
pub fn check(endpoint: Endpoint, body: &mut Value, lenient: bool) -> Result<(), ApiError> {
    let Some(obj) = body.as_object_mut() else {
        return Err(ApiError::bad_request(
            "We could not parse the JSON body of your request: it must be a JSON object",
            None,
        ));
    };
    let mut unknown = Vec::new();
    for (name, v) in obj.iter() {
        let Some(field) = of(endpoint).find(|f| f.name == name) else {
            unknown.push(name.clone());
            continue;
        };
        if field.status == Status::Refused && !v.is_null() && !accepted_anyway(name, v, obj) {
            return Err(ApiError::bad_request(
                format!("{name}: {}", field.meaning),
                Some(field.name),
            ));
        }
    }
    if let Some(first) = unknown.first() {
        if !lenient {
            let message = if endpoint.is_anthropic() {
                format!("{first}: Extra inputs are not permitted")
            } else {
                format!("Unrecognized request argument supplied: {first}")
            };
            return Err(ApiError::bad_request(message, None));
        }
        for name in &unknown {
            eprintln!(
                "kiln serve: ignoring the unrecognized request argument {name:?} (--lenient-params)"
            );
            obj.remove(name);
        }
    }
    Ok(())
}

/// The table of every OpenAI field, as `docs/serving.md` has it.
pub fn markdown_table() -> String {
    table(FIELDS)
}

/// The table of every Anthropic field, as `docs/serving.md` has it.
pub fn anthropic_markdown_table() -> String {
    table(ANTHROPIC_FIELDS)
}

fn table(fields: &[Field]) -> String {
    let mut s = String::from("| field | endpoint | status | meaning |\n|---|---|---|---|\n");
    for f in fields {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            f.name,
            f.on.label(),
            f.status.label(),
            f.meaning
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serving_docs_table_is_the_field_list() {
        let docs = include_str!("../../../docs/serving.md");
        for (name, table) in [
            ("markdown_table", markdown_table()),
            ("anthropic_markdown_table", anthropic_markdown_table()),
        ] {
            assert!(
                docs.contains(&table),
                "docs/serving.md must contain the field table exactly as fields::{name}() \
                 prints it:\n{table}"
            );
        }
    }

    #[test]
    fn every_example_is_json_and_no_field_is_listed_twice_for_an_endpoint() {
        for e in [
            Endpoint::Completions,
            Endpoint::Chat,
            Endpoint::Embeddings,
            Endpoint::Infill,
            Endpoint::Messages,
            Endpoint::CountTokens,
        ] {
            let names: Vec<&str> = of(e).map(|f| f.name).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len(), "{e:?}: {names:?}");
        }
        for f in FIELDS.iter().chain(ANTHROPIC_FIELDS) {
            let v: Value = serde_json::from_str(f.example)
                .unwrap_or_else(|e| panic!("{}: example {:?}: {e}", f.name, f.example));
            let mut obj = Map::new();
            obj.insert(f.name.into(), v.clone());
            if f.status == Status::Refused {
                assert!(
                    !accepted_anyway(f.name, &v, &obj),
                    "{}: a refused field's example must be refused",
                    f.name
                );
            }
        }
    }

    #[test]
    fn an_unknown_field_is_openais_400_unless_lenient() {
        let mut body = serde_json::json!({"prompt":"x","foo_bar":1});
        let e = check(Endpoint::Completions, &mut body, false).unwrap_err();
        assert_eq!(e.message, "Unrecognized request argument supplied: foo_bar");
        check(Endpoint::Completions, &mut body, true).unwrap();
        assert!(body.get("foo_bar").is_none());
        // A chat-only field is unknown to completions.
        let mut body = serde_json::json!({"prompt":"x","messages":[]});
        assert!(check(Endpoint::Completions, &mut body, false).is_err());
    }

    #[test]
    fn anthropic_fields_are_known_only_to_anthropics_endpoints() {
        let mut body = serde_json::json!({"messages":[],"max_tokens":1,"foo_bar":1});
        let e = check(Endpoint::Messages, &mut body, false).unwrap_err();
        assert_eq!(e.message, "foo_bar: Extra inputs are not permitted");
        // OpenAI's names are unknown to Anthropic's endpoint and the other way round.
        for (e, field) in [
            (Endpoint::Messages, "stop"),
            (Endpoint::Chat, "stop_sequences"),
            (Endpoint::Chat, "system"),
            (Endpoint::CountTokens, "max_tokens"),
            (Endpoint::CountTokens, "stream"),
        ] {
            let mut body = serde_json::json!({"messages":[]});
            body[field] = serde_json::json!(1);
            assert!(check(e, &mut body, false).is_err(), "{e:?} {field}");
        }
        let mut body = serde_json::json!({"messages":[],"tools":[],"thinking":{"type":"disabled"}});
        check(Endpoint::CountTokens, &mut body, false).unwrap();
        let mut body = serde_json::json!({"messages":[],"max_tokens":1,"mcp_servers":[]});
        check(Endpoint::Messages, &mut body, false).unwrap();
        let mut body = serde_json::json!({"messages":[],"max_tokens":1,"container":"c"});
        assert_eq!(
            check(Endpoint::Messages, &mut body, false)
                .unwrap_err()
                .param,
            Some("container")
        );
    }

    #[test]
    fn refused_fields_name_themselves_and_their_neutral_values_pass() {
        let mut body = serde_json::json!({"messages":[],"functions":[{"name":"f"}]});
        let e = check(Endpoint::Chat, &mut body, false).unwrap_err();
        assert_eq!(e.param, Some("functions"));
        for ok in [
            serde_json::json!({"messages":[],"functions":[],"function_call":"none","modalities":["text"]}),
            // Honoured: checked by the tools module, not refused here.
            serde_json::json!({"messages":[],"tools":[{"type":"function"}],"tool_choice":"required",
                "parallel_tool_calls":true,"chat_template_kwargs":{"enable_thinking":false}}),
            serde_json::json!({"messages":[],"audio":null}),
        ] {
            let mut b = ok.clone();
            check(Endpoint::Chat, &mut b, false).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
        }
        let mut body = serde_json::json!({"prompt":"x","n":2,"best_of":2,"echo":false});
        check(Endpoint::Completions, &mut body, false).unwrap();
        let mut body = serde_json::json!({"prompt":"x","best_of":2});
        assert_eq!(
            check(Endpoint::Completions, &mut body, false)
                .unwrap_err()
                .param,
            Some("best_of")
        );
    }
}
