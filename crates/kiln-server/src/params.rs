//! Turning a request's OpenAI fields into engine requests: sampling settings, stop strings,
//! grammar, logprobs, `n`, and the context-length check (never truncation).

use std::sync::Arc;

use kiln_engine::{Grammar, Request, SamplerConfig};

use crate::error::ApiError;
use crate::state::ServerConfig;
use crate::wire::{Common, ResponseFormat};

/// The most alternatives per token a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// The most stop strings (OpenAI allows 4; Kiln is generous).
pub const MAX_STOP: usize = 16;

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
    let temperature = c.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad_request(
            format!("temperature must be between 0 and 2 (got {temperature})"),
            Some("temperature"),
        ));
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad_request(
            format!("top_p must be in (0, 1] (got {top_p})"),
            Some("top_p"),
        ));
    }
    let penalty = |name: &'static str, v: Option<f32>| -> Result<f32, ApiError> {
        let v = v.unwrap_or(0.0);
        if (-2.0..=2.0).contains(&v) {
            Ok(v)
        } else {
            Err(ApiError::bad_request(
                format!("{name} must be between -2 and 2 (got {v})"),
                Some(name),
            ))
        }
    };
    let frequency_penalty = penalty("frequency_penalty", c.frequency_penalty)?;
    let presence_penalty = penalty("presence_penalty", c.presence_penalty)?;
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
    let sampling = SamplerConfig {
        temperature,
        top_p,
        top_k: 0,
        min_p: 0.0,
        frequency_penalty,
        presence_penalty,
        logit_bias,
        seed,
        ..SamplerConfig::default()
    };
    sampling
        .validate()
        .map_err(|e| ApiError::bad_request(e.to_string(), None))?;
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
    let grammar = c
        .response_format
        .as_ref()
        .map(grammar)
        .transpose()?
        .flatten();
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
    })
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
                ..p.sampling.clone()
            },
            stop: p.stop.clone(),
            grammar: p.grammar.clone(),
            logprobs: p.logprobs,
            ignore_eos: p.ignore_eos,
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
}
