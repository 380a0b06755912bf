//! OpenAI's request and response bodies, as far as Kiln supports them. Which request
//! fields exist, and which are honoured, no-ops or refused, is decided by the list in
//! [`crate::fields`] before a body reaches these types (so they need not reject unknown
//! fields themselves).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `prompt`: a string, an array of strings, an array of token ids, or an array of arrays
/// of token ids.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `response_format`: `{"type":"text"}`, `{"type":"json_object"}` or
/// `{"type":"json_schema","json_schema":{"name":…,"schema":{…}}}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub json_schema: Option<JsonSchemaFormat>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct JsonSchemaFormat {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub schema: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

/// The sampling fields both endpoints share.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Common {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    #[serde(default)]
    pub logit_bias: Option<HashMap<String, f32>>,
    /// Keep generating past end-of-generation tokens until `max_tokens` (the extension
    /// vLLM and llama.cpp's server accept; benchmarks use it for fixed-length outputs).
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Speculative decoding for this request (`false` opts out of the server's default,
    /// `true` opts in when it is off); output is the same either way.
    #[serde(default)]
    pub speculative: Option<bool>,
    // llama.cpp / vLLM sampling extensions.
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub typical_p: Option<f32>,
    #[serde(default)]
    pub repeat_penalty: Option<f32>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub repeat_last_n: Option<i64>,
    #[serde(default)]
    pub dry_multiplier: Option<f32>,
    #[serde(default)]
    pub dry_base: Option<f32>,
    #[serde(default)]
    pub dry_allowed_length: Option<i64>,
    #[serde(default)]
    pub dry_penalty_last_n: Option<i64>,
    #[serde(default)]
    pub dry_sequence_breakers: Option<Vec<String>>,
    // Constrained output (llama.cpp's `grammar` / `json_schema`, vLLM's `guided_*` and
    // `structured_outputs`); at most one of them and `response_format`.
    #[serde(default)]
    pub grammar: Option<String>,
    #[serde(default)]
    pub json_schema: Option<Value>,
    #[serde(default)]
    pub guided_json: Option<Value>,
    #[serde(default)]
    pub guided_grammar: Option<String>,
    #[serde(default)]
    pub structured_outputs: Option<Value>,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(flatten)]
    pub common: Common,
    #[serde(default)]
    pub prompt: Option<Prompt>,
    /// How many alternatives to report per token (0–20).
    #[serde(default)]
    pub logprobs: Option<i64>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub best_of: Option<i64>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub common: Common,
    #[serde(default)]
    pub messages: Option<Vec<Value>>,
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    #[serde(default)]
    pub tools: Option<Value>,
    /// End the prompt with the assistant's header (default true).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Continue the last message rather than start a new one.
    #[serde(default)]
    pub continue_final_message: Option<bool>,
    /// `"auto"`, `"none"`, `"required"` or `{"type":"function","function":{"name":…}}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Extra chat-template variables (`{"enable_thinking": false}`), as vLLM and
    /// llama.cpp's server accept them.
    #[serde(default)]
    pub chat_template_kwargs: Option<Value>,
}

#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq, Eq)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq, Eq)]
pub struct UsageJson {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

impl UsageJson {
    pub fn add(&mut self, u: &kiln_engine::Usage, count_prompt: bool) {
        if count_prompt {
            self.prompt_tokens += u.prompt_tokens;
            self.prompt_tokens_details.cached_tokens += u.cached_tokens;
        }
        self.completion_tokens += u.completion_tokens;
        self.total_tokens = self.prompt_tokens + self.completion_tokens;
    }
}

/// Completions' `logprobs` object (the legacy format).
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<HashMap<String, f32>>,
    pub text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    pub fn extend(&mut self, other: CompletionLogprobs) {
        self.tokens.extend(other.tokens);
        self.token_logprobs.extend(other.token_logprobs);
        self.top_logprobs.extend(other.top_logprobs);
        self.text_offset.extend(other.text_offset);
    }
}

/// One alternative in chat's `logprobs.content[i].top_logprobs`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatTopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// One generated token in chat's `logprobs.content`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatTopLogprob>,
}

#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageJson>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A call's function: its name and its arguments as JSON text.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// One entry of `message.tool_calls`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

/// A streamed piece of a call: the first piece of call `index` carries its id, type and
/// name; later pieces append to its arguments.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatMessageOut {
    pub role: &'static str,
    /// `null` when the reply is only tool calls.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatMessageOut,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: UsageJson,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageJson>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// The served model this name stands for.
    pub root: String,
    /// For an alias: the served model's id.
    pub parent: Option<String>,
    /// Most tokens per request (prompt plus completion).
    pub max_model_len: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_parse_in_all_four_shapes() {
        let p = |s: &str| serde_json::from_str::<Prompt>(s).unwrap();
        assert_eq!(p(r#""hi""#), Prompt::Text("hi".into()));
        assert_eq!(
            p(r#"["a","b"]"#),
            Prompt::Texts(vec!["a".into(), "b".into()])
        );
        assert_eq!(p("[1,2,3]"), Prompt::Tokens(vec![1, 2, 3]));
        assert_eq!(
            p("[[1],[2,3]]"),
            Prompt::TokenLists(vec![vec![1], vec![2, 3]])
        );
    }

    #[test]
    fn chat_requests_keep_openai_field_names_and_leave_unknown_ones_to_the_field_list() {
        let r: ChatRequest = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":5,
                "logprobs":true,"top_logprobs":3,"stop":"\n","stream":true,
                "stream_options":{"include_usage":true},"user":"someone",
                "response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"}}}}"#,
        )
        .unwrap();
        assert_eq!(r.common.model.as_deref(), Some("m"));
        assert_eq!(r.max_completion_tokens, Some(5));
        assert_eq!(r.top_logprobs, Some(3));
        assert_eq!(r.common.stop, Some(Stop::One("\n".into())));
        assert!(r.common.stream_options.unwrap().include_usage);
        let f = r.common.response_format.unwrap();
        assert_eq!(f.kind, "json_schema");
        assert_eq!(
            f.json_schema.unwrap().schema,
            Some(serde_json::json!({"type":"object"}))
        );
    }

    #[test]
    fn chat_chunks_serialize_role_and_content_only_when_present() {
        let c = ChatChunkChoice {
            index: 0,
            delta: Delta {
                role: Some("assistant"),
                ..Delta::default()
            },
            logprobs: None,
            finish_reason: None,
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["delta"], serde_json::json!({"role":"assistant"}));
        assert!(v["finish_reason"].is_null());
    }
}
