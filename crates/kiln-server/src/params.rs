//! Turning a request's OpenAI fields into engine requests: sampling settings, stop strings,
//! grammar, logprobs, `n`, and the context-length check (never truncation).

use std::sync::Arc;

use kiln_engine::{Grammar, Request, SamplerConfig};
use kiln_sample::SamplerConfigError;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::ServerConfig;
use crate::wire::{Common, ResponseFormat};

/// The most alternatives per token a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// The most stop strings (OpenAI allows 4; Kiln is generous).
pub const MAX_STOP: usize = 16;
/// The most DRY sequence breakers one request may give.
pub const MAX_DRY_BREAKERS: usize = 64;

/// Settings shared by all the engine requests of one HTTP request.
#[derive(Debug, Clone)]
pub struct Params {
    pub sampling: SamplerConfig,
    pub stop: Vec<String>,
    pub grammar: Option<Arc<Grammar>>,
    pub logprobs: Option<usize>,
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
    /// `None`: as much as the context leaves.
    pub max_tokens: Option<usize>,
    pub ignore_eos: bool,
    /// `None`: the server's default (`kiln serve --spec`).
    pub speculate: Option<bool>,
}

/// Reads the shared fields. `max_tokens` is the endpoint's (completions: `max_tokens`,
/// default 16; chat: `max_completion_tokens` or `max_tokens`, default the rest of the
/// context).
pub fn parse(
    c: &Common,
    max_tokens: Option<i64>,
    logprobs: Option<usize>,
    vocab_size: usize,
    limits: &ServerConfig,
) -> Result<Params, ApiError> {
    let max_n = limits.max_n;
    let max_tokens = match max_tokens {
        None => None,
        Some(m) if m >= 1 => Some(m as usize),
        Some(m) => {
            return Err(ApiError::bad_request(
                format!("max_tokens must be at least 1 (got {m})"),
                Some("max_tokens"),
            ));
        }
    };
    let n = match c.n {
        None => 1,
        Some(n) if (1..=max_n as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::bad_request(
                format!("n must be between 1 and {max_n} (got {n}; the server's max_n limit)"),
                Some("n"),
            ));
        }
    };
    let d = &limits.sampling;
    let temperature = c.temperature.unwrap_or(d.temperature);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad_request(
            format!("temperature must be between 0 and 2 (got {temperature})"),
            Some("temperature"),
        ));
    }
    let top_p = c.top_p.unwrap_or(d.top_p);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_request(
            format!("top_p must be in (0, 1] (got {top_p})"),
            Some("top_p"),
        ));
    }
    let penalty = |name: &'static str, v: Option<f32>, default: f32| -> Result<f32, ApiError> {
        let v = v.unwrap_or(default);
        if (-2.0..=2.0).contains(&v) {
            Ok(v)
        } else {
            Err(ApiError::bad_request(
                format!("{name} must be between -2 and 2 (got {v})"),
                Some(name),
            ))
        }
    };
    let frequency_penalty = penalty(
        "frequency_penalty",
        c.frequency_penalty,
        d.frequency_penalty,
    )?;
    let presence_penalty = penalty("presence_penalty", c.presence_penalty, d.presence_penalty)?;
    let mut logit_bias = Vec::new();
    for (k, &v) in c.logit_bias.iter().flatten() {
        let id: u32 = k.parse().map_err(|_| {
            ApiError::bad_request(
                format!("logit_bias key {k:?} is not a token id"),
                Some("logit_bias"),
            )
        })?;
        if id as usize >= vocab_size || !(-100.0..=100.0).contains(&v) {
            return Err(ApiError::bad_request(
                format!(
                    "logit_bias {id}: {v} is out of range (ids below {vocab_size}, values -100..100)"
                ),
                Some("logit_bias"),
            ));
        }
        // OpenAI: -100 bans the token.
        logit_bias.push((id, if v <= -100.0 { f32::NEG_INFINITY } else { v }));
    }
    logit_bias.sort_by_key(|&(id, _)| id);
    let seed = match c.seed {
        Some(s) => s as u64,
        None => random_seed(),
    };
    let top_k = match c.top_k {
        None => d.top_k,
        // llama.cpp: a negative k keeps every token.
        Some(k) if k <= 0 => 0,
        Some(k) => usize::try_from(k).unwrap_or(usize::MAX).min(vocab_size),
    };
    let repeat_penalty = match (c.repeat_penalty, c.repetition_penalty) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give repeat_penalty or repetition_penalty, not both",
                Some("repetition_penalty"),
            ));
        }
        (Some(v), None) | (None, Some(v)) => v,
        (None, None) => d.repeat_penalty,
    };
    let breakers = match &c.dry_sequence_breakers {
        None => d.dry_sequence_breakers.clone(),
        Some(b) if b.len() > MAX_DRY_BREAKERS => {
            return Err(ApiError::bad_request(
                format!(
                    "at most {MAX_DRY_BREAKERS} DRY sequence breakers (got {})",
                    b.len()
                ),
                Some("dry_sequence_breakers"),
            ));
        }
        Some(b) => b.clone(),
    };
    let sampling = SamplerConfig {
        temperature,
        top_p,
        top_k,
        min_p: c.min_p.unwrap_or(d.min_p),
        typical_p: c.typical_p.unwrap_or(d.typical_p),
        repeat_penalty,
        repeat_last_n: window("repeat_last_n", c.repeat_last_n, d.repeat_last_n)?,
        frequency_penalty,
        presence_penalty,
        dry_multiplier: c.dry_multiplier.unwrap_or(d.dry_multiplier),
        dry_base: c.dry_base.unwrap_or(d.dry_base),
        dry_allowed_length: match c.dry_allowed_length {
            None => d.dry_allowed_length,
            Some(n) => usize::try_from(n).map_err(|_| {
                ApiError::bad_request(
                    format!("dry_allowed_length must be at least 0 (got {n})"),
                    Some("dry_allowed_length"),
                )
            })?,
        },
        dry_last_n: window("dry_penalty_last_n", c.dry_penalty_last_n, d.dry_last_n)?,
        dry_sequence_breakers: breakers,
        logit_bias,
        order: d.order.clone(),
        seed,
    };
    sampling.validate().map_err(|e| {
        let param = match &e {
            SamplerConfigError::OutOfRange { name, .. } => Some(*name),
            SamplerConfigError::EmptyBreaker => Some("dry_sequence_breakers"),
            _ => None,
        };
        ApiError::bad_request(e.to_string(), param)
    })?;
    let stop: Vec<String> = c
        .stop
        .clone()
        .map(|s| s.into_vec())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    if stop.len() > MAX_STOP {
        return Err(ApiError::bad_request(
            format!("at most {MAX_STOP} stop strings (got {})", stop.len()),
            Some("stop"),
        ));
    }
    if let Some(k) = logprobs
        && k > MAX_TOP_LOGPROBS
    {
        return Err(ApiError::bad_request(
            format!("at most {MAX_TOP_LOGPROBS} log-probabilities per token (got {k})"),
            Some("logprobs"),
        ));
    }
    let grammar = constraint(c)?;
    let stream = c.stream.unwrap_or(false);
    let include_usage = c.stream_options.as_ref().is_some_and(|o| o.include_usage);
    Ok(Params {
        sampling,
        stop,
        grammar,
        logprobs,
        n,
        stream,
        include_usage,
        max_tokens,
        ignore_eos: c.ignore_eos.unwrap_or(false),
        speculate: c.speculative,
    })
}

/// A `-1 = the context` window (`repeat_last_n`, `dry_penalty_last_n`): -1 becomes
/// `usize::MAX`, which [`requests`] bounds by the context.
fn window(name: &'static str, v: Option<i64>, default: usize) -> Result<usize, ApiError> {
    match v {
        None => Ok(default),
        Some(-1) => Ok(usize::MAX),
        Some(n) => usize::try_from(n).map_err(|_| {
            ApiError::bad_request(
                format!("{name} must be a count, 0 to disable or -1 for the context (got {n})"),
                Some(name),
            )
        }),
    }
}

/// The one output constraint a request asks for: `response_format`, `grammar`,
/// `json_schema`, `guided_json`, `guided_grammar` or `structured_outputs` (more than one
/// is a 400).
fn constraint(c: &Common) -> Result<Option<Arc<Grammar>>, ApiError> {
    let mut given: Vec<&'static str> = Vec::new();
    let mut out = None;
    if let Some(f) = &c.response_format {
        out = grammar(f)?;
        if out.is_some() {
            given.push("response_format");
        }
    }
    let schema = |v: &Value, param: &'static str| -> Result<Arc<Grammar>, ApiError> {
        let text = match v {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        compile(GrammarSource::Schema(&text), param)
    };
    if let Some(g) = &c.grammar {
        given.push("grammar");
        out = Some(compile(GrammarSource::Gbnf(g), "grammar")?);
    }
    if let Some(s) = &c.json_schema {
        given.push("json_schema");
        out = Some(schema(s, "json_schema")?);
    }
    if let Some(s) = &c.guided_json {
        given.push("guided_json");
        out = Some(schema(s, "guided_json")?);
    }
    if let Some(g) = &c.guided_grammar {
        given.push("guided_grammar");
        out = Some(compile(GrammarSource::Gbnf(g), "guided_grammar")?);
    }
    if let Some(so) = &c.structured_outputs {
        let p = "structured_outputs";
        let obj = so.as_object().ok_or_else(|| {
            ApiError::bad_request("structured_outputs must be an object", Some(p))
        })?;
        for (k, v) in obj {
            if v.is_null() || v == &Value::Bool(false) {
                continue;
            }
            given.push(p);
            out = Some(match k.as_str() {
                "json" => schema(v, p)?,
                "json_object" => compile(GrammarSource::Schema(r#"{"type":"object"}"#), p)?,
                "grammar" => match v.as_str() {
                    Some(g) => compile(GrammarSource::Gbnf(g), p)?,
                    None => {
                        return Err(ApiError::bad_request(
                            "structured_outputs.grammar must be a GBNF string",
                            Some(p),
                        ));
                    }
                },
                "choice" => {
                    let choices: Vec<&str> = v
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .filter(|c: &Vec<&str>| !c.is_empty())
                        .ok_or_else(|| {
                            ApiError::bad_request(
                                "structured_outputs.choice must be a non-empty array of strings",
                                Some(p),
                            )
                        })?;
                    compile(GrammarSource::Gbnf(&choice_gbnf(&choices)), p)?
                }
                other => {
                    return Err(ApiError::bad_request(
                        format!(
                            "structured_outputs.{other} is not supported (json, grammar, choice, json_object)"
                        ),
                        Some(p),
                    ));
                }
            });
        }
    }
    if given.len() > 1 {
        return Err(ApiError::bad_request(
            format!(
                "give at most one output constraint (got {})",
                given.join(", ")
            ),
            given.last().copied(),
        ));
    }
    Ok(out)
}

enum GrammarSource<'a> {
    Gbnf(&'a str),
    Schema(&'a str),
}

fn compile(src: GrammarSource<'_>, param: &'static str) -> Result<Arc<Grammar>, ApiError> {
    let g = match src {
        GrammarSource::Gbnf(g) => {
            Grammar::from_gbnf(g).map_err(|e| format!("cannot use this grammar: {e}"))
        }
        GrammarSource::Schema(s) => {
            Grammar::from_json_schema(s).map_err(|e| format!("cannot use this JSON schema: {e}"))
        }
    };
    g.map(Arc::new)
        .map_err(|m| ApiError::bad_request(m, Some(param)))
}

/// A GBNF grammar matching exactly one of `choices`.
fn choice_gbnf(choices: &[&str]) -> String {
    let alts: Vec<String> = choices
        .iter()
        .map(|c| {
            let mut s = String::from("\"");
            for ch in c.chars() {
                match ch {
                    '"' => s.push_str("\\\""),
                    '\\' => s.push_str("\\\\"),
                    '\n' => s.push_str("\\n"),
                    '\r' => s.push_str("\\r"),
                    '\t' => s.push_str("\\t"),
                    c => s.push(c),
                }
            }
            s.push('"');
            s
        })
        .collect();
    format!("root ::= {}", alts.join(" | "))
}

/// The grammar of a `response_format` (`None` for plain text).
pub fn grammar(f: &ResponseFormat) -> Result<Option<Arc<Grammar>>, ApiError> {
    let schema = match f.kind.as_str() {
        "text" => return Ok(None),
        "json_object" => String::from(r#"{"type":"object"}"#),
        "json_schema" => {
            let s = f
                .json_schema
                .as_ref()
                .and_then(|j| j.schema.as_ref())
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "response_format json_schema needs json_schema.schema",
                        Some("response_format"),
                    )
                })?;
            s.to_string()
        }
        other => {
            return Err(ApiError::bad_request(
                format!(
                    "response_format type {other:?} is not supported (text, json_object, json_schema)"
                ),
                Some("response_format"),
            ));
        }
    };
    Grammar::from_json_schema(&schema)
        .map(|g| Some(Arc::new(g)))
        .map_err(|e| {
            ApiError::bad_request(
                format!("cannot use this JSON schema: {e}"),
                Some("response_format"),
            )
        })
}

/// The engine requests for one prompt: `n` of them, choice `i` seeded `seed + i`.
/// Refuses (never truncates) a prompt over `limits.max_prompt_tokens` or that leaves no
/// room for `max_tokens`; `param` names the prompt's field (`prompt` or `messages`).
pub fn requests(
    p: &Params,
    prompt: Vec<u32>,
    n_ctx: usize,
    limits: &ServerConfig,
    param: &'static str,
) -> Result<Vec<Request>, ApiError> {
    if prompt.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty", Some(param)));
    }
    if let Some(limit) = limits.max_prompt_tokens
        && prompt.len() > limit
    {
        return Err(ApiError::prompt_too_long(prompt.len(), limit, param));
    }
    let max_tokens = match p.max_tokens {
        Some(m) => m,
        None if prompt.len() < n_ctx => n_ctx - prompt.len(),
        None => return Err(ApiError::context_length(prompt.len(), 1, n_ctx)),
    };
    if prompt.len() + max_tokens > n_ctx {
        return Err(ApiError::context_length(prompt.len(), max_tokens, n_ctx));
    }
    Ok((0..p.n)
        .map(|i| Request {
            prompt: prompt.clone(),
            max_tokens,
            sampling: SamplerConfig {
                seed: p.sampling.seed.wrapping_add(i as u64),
                // No window reaches past the context (and -1 means the context).
                repeat_last_n: p.sampling.repeat_last_n.min(n_ctx),
                dry_last_n: p.sampling.dry_last_n.min(n_ctx),
                ..p.sampling.clone()
            },
            stop: p.stop.clone(),
            grammar: p.grammar.clone(),
            logprobs: p.logprobs,
            ignore_eos: p.ignore_eos,
            speculate: p.speculate,
        })
        .collect())
}

/// A seed for requests that give none: the clock mixed with a counter.
fn random_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = t ^ COUNTER
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{JsonSchemaFormat, Stop};

    fn common(json: &str) -> Common {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn n_choices_get_consecutive_seeds_and_share_the_settings() {
        let p = parse(
            &common(r#"{"n":3,"seed":7,"temperature":0.5,"stop":["a","b"]}"#),
            Some(4),
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap();
        let r = requests(&p, vec![1, 2], 64, &ServerConfig::default(), "prompt").unwrap();
        let seeds: Vec<u64> = r.iter().map(|r| r.sampling.seed).collect();
        assert_eq!(seeds, [7, 8, 9]);
        assert!(r.iter().all(|r| r.max_tokens == 4 && r.stop == ["a", "b"]));
        assert_eq!(r[0].sampling.temperature, 0.5);
        assert_eq!(r[0].sampling.top_k, 0);
        assert!(r.iter().all(|r| !r.ignore_eos));
    }

    #[test]
    fn ignore_eos_reaches_every_choice() {
        let p = parse(
            &common(r#"{"n":2,"ignore_eos":true}"#),
            Some(8),
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap();
        let r = requests(&p, vec![1, 2], 64, &ServerConfig::default(), "prompt").unwrap();
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|r| r.ignore_eos && r.max_tokens == 8));
    }

    #[test]
    fn a_prompt_over_the_context_is_refused_not_truncated() {
        let p = parse(&common("{}"), Some(10), None, 100, &ServerConfig::default()).unwrap();
        let e = requests(&p, vec![1; 60], 64, &ServerConfig::default(), "prompt").unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
        assert!(e.message.contains("70 tokens"), "{}", e.message);
        let unbounded = parse(&common("{}"), None, None, 100, &ServerConfig::default()).unwrap();
        assert_eq!(
            requests(
                &unbounded,
                vec![1; 60],
                64,
                &ServerConfig::default(),
                "prompt"
            )
            .unwrap()[0]
                .max_tokens,
            4
        );
        assert!(
            requests(
                &unbounded,
                vec![1; 64],
                64,
                &ServerConfig::default(),
                "prompt"
            )
            .is_err()
        );
    }

    #[test]
    fn out_of_range_fields_name_the_parameter() {
        let e = parse(
            &common(r#"{"temperature":3}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap_err();
        assert_eq!(e.param, Some("temperature"));
        let e = parse(
            &common(r#"{"n":0}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap_err();
        assert_eq!(e.param, Some("n"));
        let e = parse(&common("{}"), Some(0), None, 100, &ServerConfig::default()).unwrap_err();
        assert_eq!(e.param, Some("max_tokens"));
        let e = parse(
            &common(r#"{"logit_bias":{"500":1}}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap_err();
        assert_eq!(e.param, Some("logit_bias"));
        let e = parse(&common("{}"), None, Some(21), 100, &ServerConfig::default()).unwrap_err();
        assert_eq!(e.param, Some("logprobs"));
    }

    #[test]
    fn n_and_prompt_tokens_over_the_configured_limits_are_refused_naming_the_limit() {
        let limits = ServerConfig {
            max_n: 2,
            max_prompt_tokens: Some(8),
            ..ServerConfig::default()
        };
        let e = parse(&common(r#"{"n":3}"#), None, None, 100, &limits).unwrap_err();
        assert_eq!(e.param, Some("n"));
        assert!(e.message.contains("max_n"), "{}", e.message);
        let p = parse(&common(r#"{"n":2}"#), Some(4), None, 100, &limits).unwrap();
        assert_eq!(
            requests(&p, vec![1; 8], 64, &limits, "prompt")
                .unwrap()
                .len(),
            2
        );
        let e = requests(&p, vec![1; 9], 64, &limits, "messages").unwrap_err();
        assert_eq!(e.code, Some("prompt_too_long"));
        assert_eq!(e.param, Some("messages"));
        assert!(e.message.contains("max_prompt_tokens"), "{}", e.message);
        let e = parse(&common("{}"), Some(0), None, 100, &limits).unwrap_err();
        assert!(e.message.contains("at least 1"), "{}", e.message);
    }

    #[test]
    fn logit_bias_of_minus_100_bans_the_token() {
        let p = parse(
            &common(r#"{"logit_bias":{"5":-100,"3":2.5}}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap();
        assert_eq!(
            p.sampling.logit_bias,
            vec![(3, 2.5), (5, f32::NEG_INFINITY)]
        );
    }

    #[test]
    fn response_formats_compile_to_grammars() {
        let f = |kind: &str, schema: Option<serde_json::Value>| ResponseFormat {
            kind: kind.into(),
            json_schema: schema.map(|s| JsonSchemaFormat {
                name: None,
                schema: Some(s),
                strict: None,
            }),
        };
        assert!(grammar(&f("text", None)).unwrap().is_none());
        assert!(grammar(&f("json_object", None)).unwrap().is_some());
        let schema = serde_json::json!({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]});
        assert!(grammar(&f("json_schema", Some(schema))).unwrap().is_some());
        assert_eq!(
            grammar(&f("json_schema", None)).unwrap_err().param,
            Some("response_format")
        );
        assert!(grammar(&f("xml", None)).is_err());
        let _ = Stop::One(String::new());
    }

    #[test]
    fn llama_cpp_and_vllm_sampling_extensions_reach_the_sampler() {
        let p = parse(
            &common(
                r#"{"top_k":20,"min_p":0.05,"typical_p":0.9,"repetition_penalty":1.1,
                    "repeat_last_n":-1,"dry_multiplier":0.8,"dry_base":2,"dry_allowed_length":3,
                    "dry_penalty_last_n":32,"dry_sequence_breakers":["\n"]}"#,
            ),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap();
        let s = &p.sampling;
        assert_eq!((s.top_k, s.min_p, s.typical_p), (20, 0.05, 0.9));
        assert_eq!(s.repeat_penalty, 1.1);
        assert_eq!(
            (s.dry_multiplier, s.dry_base, s.dry_allowed_length),
            (0.8, 2.0, 3)
        );
        assert_eq!(s.dry_sequence_breakers, ["\n"]);
        // -1 is the context, bounded when the engine request is made.
        let r = requests(&p, vec![1], 64, &ServerConfig::default(), "prompt").unwrap();
        assert_eq!(
            (r[0].sampling.repeat_last_n, r[0].sampling.dry_last_n),
            (64, 32)
        );
        let e = parse(
            &common(r#"{"repeat_penalty":1.1,"repetition_penalty":1.2}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap_err();
        assert_eq!(e.param, Some("repetition_penalty"));
        let e = parse(
            &common(r#"{"min_p":2}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap_err();
        assert_eq!(e.param, Some("min_p"));
    }

    #[test]
    fn fields_a_request_leaves_out_take_the_servers_defaults() {
        let limits = ServerConfig {
            sampling: SamplerConfig {
                temperature: 0.3,
                top_k: 40,
                min_p: 0.1,
                repeat_penalty: 1.2,
                ..crate::state::openai_sampling_defaults()
            },
            ..ServerConfig::default()
        };
        let p = parse(&common(r#"{"top_k":5}"#), None, None, 100, &limits).unwrap();
        let s = &p.sampling;
        assert_eq!(
            (s.temperature, s.top_k, s.min_p, s.repeat_penalty),
            (0.3, 5, 0.1, 1.2)
        );
        let p = parse(&common("{}"), None, None, 100, &ServerConfig::default()).unwrap();
        let s = &p.sampling;
        assert_eq!(
            (s.temperature, s.top_p, s.top_k, s.min_p),
            (1.0, 1.0, 0, 0.0)
        );
    }

    #[test]
    fn every_constraint_field_compiles_and_two_at_once_are_refused() {
        for body in [
            r#"{"grammar":"root ::= \"a\""}"#,
            r#"{"json_schema":{"type":"object"}}"#,
            r#"{"guided_json":"{\"type\":\"object\"}"}"#,
            r#"{"guided_grammar":"root ::= \"a\""}"#,
            r#"{"structured_outputs":{"choice":["yes","no \"quoted\"\n"]}}"#,
            r#"{"structured_outputs":{"json":{"type":"object"}}}"#,
            r#"{"structured_outputs":{"json_object":true}}"#,
        ] {
            let p = parse(&common(body), None, None, 100, &ServerConfig::default())
                .unwrap_or_else(|e| panic!("{body}: {e:?}"));
            assert!(p.grammar.is_some(), "{body}");
        }
        let e = parse(
            &common(r#"{"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap_err();
        assert!(e.message.contains("at most one"), "{}", e.message);
        let e = parse(
            &common(r#"{"grammar":"root ::= undefined-rule"}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap_err();
        assert_eq!(e.param, Some("grammar"));
        let e = parse(
            &common(r#"{"structured_outputs":{"regex":"a+"}}"#),
            None,
            None,
            100,
            &ServerConfig::default(),
        )
        .unwrap_err();
        assert!(e.message.contains("regex"), "{}", e.message);
    }
}
