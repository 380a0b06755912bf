//! The soak load generator, shared by `cargo xtask bench soak` (against a real `kiln serve`
//! process) and `crates/kiln-server/tests/soak.rs` (against the server in-process). It
//! speaks HTTP only (`ureq`, `serde`, `serde_json`), so it builds without the `server`
//! feature.
//!
//! `clients` threads stream until the deadline (greedy streams, and streams they drop
//! mid-way); `mixed_clients` more threads loop over the whole mix, picking at random: greedy
//! streaming and
//! non-streaming requests to both endpoints whose text must equal a reference computed
//! beforehand by a lone request for the same prompt; sampled multi-choice bursts; streams the
//! client drops mid-way; malformed JSON; and requests over every limit (body size, prompt
//! tokens, context, `n`, `max_tokens` 0). Every answer is classified: completed (and checked:
//! SSE chunks parse, `data: [DONE]` ends the stream, one `finish_reason` per choice, usage
//! consistent, greedy text equal to its reference), refused (status and code as expected for
//! the action), disconnected by the client, or **lost** (neither a complete response nor a
//! proper error: a transport error, a stream without `[DONE]`, an unexpected status, an
//! unparsable body). A wrong refusal or a wrong answer is a failure too.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

/// The prompts of the greedy requests (each with its own `max_tokens`).
pub const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at",
    "A haiku about autumn leaves:",
    "To make a cup of tea, first",
    "The largest planet in the solar system is",
];

/// The server's limits the load must know to go over them.
#[derive(Clone, Debug, Serialize)]
pub struct Limits {
    pub n_ctx: usize,
    pub max_n: usize,
    pub max_body_bytes: usize,
    pub max_prompt_tokens: usize,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// Clients that only stream (greedy streams checked against their reference, and
    /// streams they drop mid-way): the concurrent streams.
    pub clients: usize,
    /// Clients that run the whole mix (non-streaming, bursts, malformed, over the limits).
    pub mixed_clients: usize,
    pub duration: Duration,
    pub seed: u64,
    pub limits: Limits,
    /// The server's process id, for its RSS (`None`: in-process, not measured).
    pub pid: Option<u32>,
}

/// The answer of a lone greedy request.
#[derive(Clone, Debug, Serialize)]
pub struct Reference {
    pub chat: bool,
    pub prompt: usize,
    pub max_tokens: usize,
    pub text: String,
    pub finish: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Latency percentiles, milliseconds (nearest rank).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Pcts {
    pub samples: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Everything the load saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Tally {
    pub clients: usize,
    pub mixed_clients: usize,
    pub seconds: f64,
    pub sent: u64,
    pub completed: u64,
    /// Completed streams (part of `completed`).
    pub completed_streams: u64,
    /// Greedy answers compared with their reference (part of `completed`).
    pub checked_against_reference: u64,
    /// Refusals by reason (`code`, else `param`, else `malformed_json`).
    pub refused: BTreeMap<String, u64>,
    pub disconnected_by_client: u64,
    pub lost: u64,
    /// Failures: what was lost, refused for the wrong reason, or answered wrongly.
    pub failures: Vec<String>,
    /// Failures beyond the first 50 are only counted.
    pub failures_total: u64,
    pub wrong_answers: u64,
    pub wrong_refusals: u64,
    pub malformed_responses: u64,
    pub peak_open_streams: usize,
    pub ttft_ms: Pcts,
    pub itl_ms: Pcts,
}

impl Tally {
    fn fail(&mut self, what: String) {
        self.failures_total += 1;
        if self.failures.len() < 50 {
            self.failures.push(what);
        }
    }

    fn merge(&mut self, o: Tally) {
        self.sent += o.sent;
        self.completed += o.completed;
        self.completed_streams += o.completed_streams;
        self.checked_against_reference += o.checked_against_reference;
        for (k, v) in o.refused {
            *self.refused.entry(k).or_default() += v;
        }
        self.disconnected_by_client += o.disconnected_by_client;
        self.lost += o.lost;
        self.wrong_answers += o.wrong_answers;
        self.wrong_refusals += o.wrong_refusals;
        self.malformed_responses += o.malformed_responses;
        for f in o.failures {
            if self.failures.len() < 50 {
                self.failures.push(f);
            }
        }
        self.failures_total += o.failures_total;
    }

    /// Refusals in total.
    pub fn refused_total(&self) -> u64 {
        self.refused.values().sum()
    }

    /// Whether nothing was lost, answered wrongly or refused for the wrong reason.
    pub fn clean(&self) -> bool {
        self.lost == 0
            && self.wrong_answers == 0
            && self.wrong_refusals == 0
            && self.malformed_responses == 0
            && self.failures_total == 0
    }
}

/// A tiny deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(300)))
        .build()
        .into()
}

/// `GET base+path`: status and body.
pub fn get(base: &str, path: &str) -> Option<(u16, String)> {
    let mut r = agent().get(format!("{base}{path}")).call().ok()?;
    let s = r.status().as_u16();
    Some((s, r.body_mut().read_to_string().ok()?))
}

/// A metric's value in a Prometheus text exposition.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

/// `VmRSS` and `VmHWM` of a process, bytes.
pub fn rss(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let l = s.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn max_tokens_for(prompt: usize) -> usize {
    8 + 4 * (prompt % 3)
}

fn body_for(chat: bool, prompt: usize, stream: bool) -> Value {
    let mut b = if chat {
        json!({"messages":[{"role":"user","content":PROMPTS[prompt]}]})
    } else {
        json!({"prompt":PROMPTS[prompt]})
    };
    b["max_tokens"] = json!(max_tokens_for(prompt));
    b["temperature"] = json!(0);
    if stream {
        b["stream"] = json!(true);
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

fn path(chat: bool) -> &'static str {
    if chat {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    }
}

/// Computes every reference by lone, sequential, non-streaming requests.
pub fn references(base: &str) -> Result<Vec<Reference>, String> {
    let mut out = Vec::new();
    for chat in [false, true] {
        for prompt in 0..PROMPTS.len() {
            let body = body_for(chat, prompt, false);
            let mut r = agent()
                .post(format!("{base}{}", path(chat)))
                .content_type("application/json")
                .send(body.to_string())
                .map_err(|e| format!("reference request: {e}"))?;
            let status = r.status().as_u16();
            let text = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
            if status != 200 {
                return Err(format!("reference request answered {status}: {text}"));
            }
            let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
            let c = &v["choices"][0];
            let t = if chat {
                c["message"]["content"].as_str()
            } else {
                c["text"].as_str()
            };
            out.push(Reference {
                chat,
                prompt,
                max_tokens: max_tokens_for(prompt),
                text: t.unwrap_or_default().to_string(),
                finish: c["finish_reason"].as_str().unwrap_or_default().to_string(),
                prompt_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
                completion_tokens: v["usage"]["completion_tokens"].as_u64().unwrap_or(0),
            });
        }
    }
    Ok(out)
}

/// What a client does next.
#[derive(Clone, Copy, Debug)]
enum Action {
    Greedy {
        chat: bool,
        prompt: usize,
        stream: bool,
    },
    /// Several prompts × `n` sampled choices in one non-streaming completion.
    Burst,
    /// A stream the client drops after `after` chunks.
    Disconnect {
        chat: bool,
        after: usize,
    },
    Malformed(usize),
    BodyTooLarge,
    PromptTooLong,
    OverContext,
    TooManyChoices,
    ZeroMaxTokens,
}

/// The first requests of every mixed client: one over each limit.
const COVER: [Action; 6] = [
    Action::Malformed(0),
    Action::BodyTooLarge,
    Action::PromptTooLong,
    Action::OverContext,
    Action::TooManyChoices,
    Action::ZeroMaxTokens,
];

fn pick(rng: &mut Rng, streams_only: bool) -> Action {
    let chat = rng.below(2) == 1;
    if streams_only {
        return if rng.below(4) == 0 {
            Action::Disconnect {
                chat,
                after: 1 + rng.below(6),
            }
        } else {
            Action::Greedy {
                chat,
                prompt: rng.below(PROMPTS.len()),
                stream: true,
            }
        };
    }
    match rng.below(100) {
        0..=44 => Action::Greedy {
            chat,
            prompt: rng.below(PROMPTS.len()),
            stream: true,
        },
        45..=59 => Action::Greedy {
            chat,
            prompt: rng.below(PROMPTS.len()),
            stream: false,
        },
        60..=64 => Action::Burst,
        65..=79 => Action::Disconnect {
            chat,
            after: 1 + rng.below(6),
        },
        80..=84 => Action::Malformed(rng.below(1 << 16)),
        85..=87 => Action::BodyTooLarge,
        88..=90 => Action::PromptTooLong,
        91..=93 => Action::OverContext,
        94..=96 => Action::TooManyChoices,
        _ => Action::ZeroMaxTokens,
    }
}

/// The malformed bodies: broken JSON, wrong types, random bytes.
fn malformed(k: usize) -> Vec<u8> {
    const FIXED: [&str; 7] = [
        "{\"prompt\": ",
        "not json at all",
        "{\"prompt\": 12}",
        "[]",
        "{\"prompt\": [\"a\", 1, {}]}",
        "{\"prompt\": \"a\", \"max_tokens\": \"many\"}",
        "",
    ];
    if k % 8 < FIXED.len() {
        return FIXED[k % 8].as_bytes().to_vec();
    }
    let mut r = Rng::new(k as u64);
    let mut b: Vec<u8> = (0..1 + r.below(200)).map(|_| r.next_u64() as u8).collect();
    // Never a valid JSON document by accident.
    b.insert(0, b'{');
    b.push(b'\0');
    b
}

/// The expected refusal of an invalid action: (status, code or param).
fn expected_refusal(a: Action) -> Option<(u16, &'static str)> {
    match a {
        Action::Malformed(_) => Some((400, "malformed_json")),
        Action::BodyTooLarge => Some((413, "request_too_large")),
        Action::PromptTooLong => Some((400, "prompt_too_long")),
        Action::OverContext => Some((400, "context_length_exceeded")),
        Action::TooManyChoices => Some((400, "n")),
        Action::ZeroMaxTokens => Some((400, "max_tokens")),
        _ => None,
    }
}

/// The reason an error body names: its `code`, else its `param`, else `malformed_json`
/// for a JSON parse error or an unrecognized field.
fn reason(v: &Value) -> Option<String> {
    let e = v.get("error")?;
    e["message"].as_str()?;
    if let Some(c) = e["code"].as_str() {
        return Some(c.to_string());
    }
    if let Some(p) = e["param"].as_str() {
        return Some(p.to_string());
    }
    let m = e["message"].as_str().unwrap_or("");
    // A body with a field neither endpoint knows is refused as OpenAI does
    // ("Unrecognized request argument supplied: …"): malformed too.
    Some(
        if m.contains("parse the JSON") || m.starts_with("Unrecognized request argument") {
            "malformed_json".to_string()
        } else {
            e["type"].as_str().unwrap_or("unknown").to_string()
        },
    )
}

struct Client<'a> {
    plan: &'a Plan,
    refs: &'a [Reference],
    rng: Rng,
    streams_only: bool,
    t: Tally,
    ttft: Vec<f64>,
    itl: Vec<f64>,
    open: &'a AtomicUsize,
    peak: &'a AtomicUsize,
}

/// Counts an open stream while alive.
struct OpenStream<'a>(&'a AtomicUsize);

impl<'a> OpenStream<'a> {
    fn new(open: &'a AtomicUsize, peak: &AtomicUsize) -> OpenStream<'a> {
        let now = open.fetch_add(1, Ordering::AcqRel) + 1;
        peak.fetch_max(now, Ordering::AcqRel);
        OpenStream(open)
    }
}

impl Drop for OpenStream<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Client<'_> {
    fn reference(&self, chat: bool, prompt: usize) -> &Reference {
        &self.refs[usize::from(chat) * PROMPTS.len() + prompt]
    }

    fn body(&mut self, a: Action) -> (bool, Vec<u8>) {
        let l = &self.plan.limits;
        let word = |n: usize| "word ".repeat(n);
        match a {
            Action::Greedy {
                chat,
                prompt,
                stream,
            } => (
                chat,
                body_for(chat, prompt, stream).to_string().into_bytes(),
            ),
            Action::Burst => {
                // 2 prompts × n 2 = 4 choices (`max_n` bounds prompts × n).
                let prompts: Vec<&str> = (0..2)
                    .map(|_| PROMPTS[self.rng.below(PROMPTS.len())])
                    .collect();
                let b = json!({"prompt":prompts,"n":2,"max_tokens":6,"temperature":0.8,
                               "seed": self.rng.next_u64() >> 12});
                (false, b.to_string().into_bytes())
            }
            Action::Disconnect { chat, .. } => {
                let mut b = body_for(chat, self.rng.below(PROMPTS.len()), true);
                b["max_tokens"] = json!(48);
                b["temperature"] = json!(0.7);
                (chat, b.to_string().into_bytes())
            }
            Action::Malformed(k) => (k % 2 == 1, malformed(k)),
            Action::BodyTooLarge => (
                false,
                json!({"prompt": "x".repeat(l.max_body_bytes + 1024), "max_tokens": 4})
                    .to_string()
                    .into_bytes(),
            ),
            Action::PromptTooLong => {
                let chat = self.rng.below(2) == 1;
                let text = word(l.max_prompt_tokens + 16);
                let b = if chat {
                    json!({"messages":[{"role":"user","content":text}],"max_tokens":4})
                } else {
                    json!({"prompt":text,"max_tokens":4})
                };
                (chat, b.to_string().into_bytes())
            }
            Action::OverContext => (
                false,
                json!({"prompt":PROMPTS[0],"max_tokens":l.n_ctx + 1})
                    .to_string()
                    .into_bytes(),
            ),
            Action::TooManyChoices => (
                true,
                json!({"messages":[{"role":"user","content":"hi"}],"n":l.max_n + 1})
                    .to_string()
                    .into_bytes(),
            ),
            Action::ZeroMaxTokens => (
                false,
                json!({"prompt":PROMPTS[1],"max_tokens":0})
                    .to_string()
                    .into_bytes(),
            ),
        }
    }

    fn one(&mut self) {
        // A mixed client opens with one request over each limit, so every refusal kind is
        // exercised however short the run; then the random mix.
        let a = match usize::try_from(self.t.sent).ok().and_then(|i| COVER.get(i)) {
            Some(&a) if !self.streams_only => a,
            _ => pick(&mut self.rng, self.streams_only),
        };
        let (chat, body) = self.body(a);
        self.t.sent += 1;
        let stream = matches!(
            a,
            Action::Greedy { stream: true, .. } | Action::Disconnect { .. }
        );
        let sent = Instant::now();
        let _open = stream.then(|| OpenStream::new(self.open, self.peak));
        let resp = agent()
            .post(format!("{}{}", self.plan.base, path(chat)))
            .content_type("application/json")
            .send(&body[..]);
        let mut resp = match resp {
            Ok(r) => r,
            Err(e) => {
                self.t.lost += 1;
                self.t.fail(format!("{a:?}: transport error: {e}"));
                return;
            }
        };
        let status = resp.status().as_u16();
        if status != 200 {
            let text = match resp.body_mut().read_to_string() {
                Ok(t) => t,
                Err(e) => {
                    self.t.lost += 1;
                    self.t
                        .fail(format!("{a:?}: {status} with an unreadable body: {e}"));
                    return;
                }
            };
            let Some(why) = serde_json::from_str::<Value>(&text)
                .ok()
                .as_ref()
                .and_then(reason)
            else {
                self.t.lost += 1;
                self.t
                    .fail(format!("{a:?}: {status} without an error body: {text}"));
                return;
            };
            *self.t.refused.entry(why.clone()).or_default() += 1;
            let ok = match expected_refusal(a) {
                Some((s, r)) => s == status && r == why,
                // Any generation request may meet a full queue.
                None => {
                    status == 429 && (why == "queue_full" || why == "concurrency_limit_exceeded")
                }
            };
            if !ok {
                self.t.wrong_refusals += 1;
                self.t
                    .fail(format!("{a:?}: refused {status} {why}: {text}"));
            }
            if status == 429 {
                // Back off as a client told "retry later" does (not a busy loop of 429s).
                let ms = 100 + self.rng.below(200) as u64;
                std::thread::sleep(Duration::from_millis(ms));
            }
            return;
        }
        if let Some((s, r)) = expected_refusal(a) {
            self.t.wrong_refusals += 1;
            self.t
                .fail(format!("{a:?}: answered 200, expected {s} {r}"));
            return;
        }
        if stream {
            self.stream(a, chat, resp, sent);
        } else {
            let text = match resp.body_mut().read_to_string() {
                Ok(t) => t,
                Err(e) => {
                    self.t.lost += 1;
                    self.t.fail(format!("{a:?}: body broke: {e}"));
                    return;
                }
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(v) => self.check_body(a, chat, &v),
                Err(e) => {
                    self.t.lost += 1;
                    self.t
                        .fail(format!("{a:?}: 200 with unparsable JSON ({e}): {text}"));
                }
            }
        }
    }

    fn check_usage(&mut self, a: Action, u: &Value) -> Option<(u64, u64)> {
        let (p, c, t) = (
            u["prompt_tokens"].as_u64(),
            u["completion_tokens"].as_u64(),
            u["total_tokens"].as_u64(),
        );
        match (p, c, t) {
            (Some(p), Some(c), Some(t)) if p > 0 && c > 0 && p + c == t => Some((p, c)),
            _ => {
                self.t.malformed_responses += 1;
                self.t.fail(format!("{a:?}: inconsistent usage {u}"));
                None
            }
        }
    }

    /// Compares a greedy answer with its lone reference.
    fn compare(
        &mut self,
        a: Action,
        chat: bool,
        prompt: usize,
        text: &str,
        finish: &str,
        usage: Option<(u64, u64)>,
    ) {
        let r = self.reference(chat, prompt).clone();
        self.t.checked_against_reference += 1;
        let usage_ok = usage.is_none_or(|u| u == (r.prompt_tokens, r.completion_tokens));
        if text != r.text || finish != r.finish || !usage_ok {
            self.t.wrong_answers += 1;
            self.t.fail(format!(
                "{a:?}: got {text:?} ({finish}, usage {usage:?}), the lone request got {:?} ({}, usage {:?})",
                r.text,
                r.finish,
                (r.prompt_tokens, r.completion_tokens)
            ));
        }
    }

    fn check_body(&mut self, a: Action, chat: bool, v: &Value) {
        let object = if chat {
            "chat.completion"
        } else {
            "text_completion"
        };
        let choices = v["choices"].as_array().cloned().unwrap_or_default();
        let want_choices = match a {
            Action::Burst => None,
            _ => Some(1),
        };
        let finishes_ok = choices.iter().all(|c| {
            matches!(c["finish_reason"].as_str(), Some("stop" | "length"))
                && if chat {
                    c["message"]["content"].is_string() && c["message"]["role"] == "assistant"
                } else {
                    c["text"].is_string()
                }
        });
        let indexes_ok = choices
            .iter()
            .enumerate()
            .all(|(i, c)| c["index"].as_u64() == Some(i as u64));
        if v["object"] != object
            || choices.is_empty()
            || want_choices.is_some_and(|n| choices.len() != n)
            || !finishes_ok
            || !indexes_ok
            || !v["id"].is_string()
        {
            self.t.malformed_responses += 1;
            self.t.fail(format!("{a:?}: malformed body {v}"));
            return;
        }
        let Some(usage) = self.check_usage(a, &v["usage"]) else {
            return;
        };
        self.t.completed += 1;
        if let Action::Greedy { prompt, .. } = a {
            let c = &choices[0];
            let text = if chat {
                c["message"]["content"].as_str()
            } else {
                c["text"].as_str()
            }
            .unwrap_or_default()
            .to_string();
            let finish = c["finish_reason"].as_str().unwrap_or_default().to_string();
            self.compare(a, chat, prompt, &text, &finish, Some(usage));
        }
    }

    fn stream(
        &mut self,
        a: Action,
        chat: bool,
        resp: ureq::http::Response<ureq::Body>,
        sent: Instant,
    ) {
        let drop_after = match a {
            Action::Disconnect { after, .. } => Some(after),
            _ => None,
        };
        let mut lines = BufReader::new(resp.into_body().into_reader()).lines();
        let (mut text, mut finish, mut usage) = (String::new(), None::<String>, None);
        let (mut chunks, mut done, mut role) = (0usize, false, false);
        let mut last: Option<Instant> = None;
        let (mut ttft, mut itl) = (None, Vec::new());
        let mut bad: Option<String> = None;
        let mut error_event: Option<String> = None;
        loop {
            let line = match lines.next() {
                None => break,
                Some(Ok(l)) => l,
                Some(Err(e)) => {
                    bad = Some(format!("stream broke: {e}"));
                    break;
                }
            };
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            if done {
                bad = Some(format!("data after [DONE]: {data}"));
                break;
            }
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = match serde_json::from_str(data) {
                Ok(v) => v,
                Err(e) => {
                    bad = Some(format!("chunk does not parse ({e}): {data}"));
                    break;
                }
            };
            if v.get("error").is_some() {
                error_event = Some(data.to_string());
                continue;
            }
            if v["usage"].is_object() {
                usage = Some(v["usage"].clone());
                continue;
            }
            let c = &v["choices"][0];
            let piece = if chat {
                if c["delta"]["role"] == "assistant" {
                    role = true;
                }
                c["delta"]["content"].as_str()
            } else {
                c["text"].as_str()
            };
            if let Some(p) = piece
                && !p.is_empty()
            {
                let now = Instant::now();
                match last {
                    None => ttft = Some(now.duration_since(sent).as_secs_f64() * 1e3),
                    Some(prev) => itl.push(now.duration_since(prev).as_secs_f64() * 1e3),
                }
                last = Some(now);
                text.push_str(p);
                chunks += 1;
            }
            if let Some(f) = c["finish_reason"].as_str() {
                if finish.is_some() {
                    bad = Some(format!("two finish_reason chunks: {data}"));
                }
                finish = Some(f.to_string());
            }
            if drop_after.is_some_and(|k| chunks >= k) && finish.is_none() {
                self.t.disconnected_by_client += 1;
                return; // dropping the reader closes the connection mid-stream
            }
        }
        if let Some(b) = bad {
            self.t.lost += 1;
            self.t.fail(format!("{a:?}: {b}"));
            return;
        }
        if let Some(e) = error_event {
            // A proper error, but none is expected here.
            *self.t.refused.entry("error_in_stream".into()).or_default() += 1;
            self.t.wrong_refusals += 1;
            self.t
                .fail(format!("{a:?}: error event in the stream: {e}"));
            return;
        }
        if !done {
            self.t.lost += 1;
            self.t
                .fail(format!("{a:?}: the stream ended without data: [DONE]"));
            return;
        }
        let Some(finish) = finish else {
            self.t.malformed_responses += 1;
            self.t.fail(format!("{a:?}: no finish_reason"));
            return;
        };
        if chat && !role {
            self.t.malformed_responses += 1;
            self.t.fail(format!("{a:?}: no assistant role chunk"));
            return;
        }
        let Some(u) = usage else {
            self.t.malformed_responses += 1;
            self.t
                .fail(format!("{a:?}: no usage chunk (include_usage)"));
            return;
        };
        let Some(u) = self.check_usage(a, &u) else {
            return;
        };
        self.t.completed += 1;
        self.t.completed_streams += 1;
        self.ttft.extend(ttft);
        self.itl.extend(itl);
        if let Action::Greedy { prompt, .. } = a {
            self.compare(a, chat, prompt, &text, &finish, Some(u));
        }
    }
}

/// Nearest-rank percentiles.
pub fn pcts(v: &mut [f64]) -> Pcts {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| {
        if v.is_empty() {
            return f64::NAN;
        }
        let rank = (v.len() as f64 * p / 100.0).ceil() as usize;
        v[rank.saturating_sub(1).min(v.len() - 1)]
    };
    Pcts {
        samples: v.len(),
        p50: at(50.0),
        p99: at(99.0),
        max: v.last().copied().unwrap_or(f64::NAN),
    }
}

/// One client's tally, TTFT and ITL samples.
type ClientResult = (Tally, Vec<f64>, Vec<f64>);

/// Runs the load until the deadline; every client finishes its request in flight.
pub fn run(plan: &Plan, refs: &[Reference]) -> Tally {
    let open = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let deadline = Instant::now() + plan.duration;
    let started = Instant::now();
    let results: Arc<Mutex<Vec<ClientResult>>> = Arc::default();
    std::thread::scope(|s| {
        for i in 0..plan.clients + plan.mixed_clients {
            let (open, peak, results) = (&open, &peak, Arc::clone(&results));
            std::thread::Builder::new()
                .name(format!("soak-client-{i}"))
                .stack_size(256 << 10)
                .spawn_scoped(s, move || {
                    let mut c = Client {
                        plan,
                        refs,
                        rng: Rng::new(plan.seed.wrapping_add(i as u64 * 7919)),
                        streams_only: i < plan.clients,
                        t: Tally::default(),
                        ttft: Vec::new(),
                        itl: Vec::new(),
                        open,
                        peak,
                    };
                    while Instant::now() < deadline {
                        c.one();
                    }
                    if let Ok(mut r) = results.lock() {
                        r.push((c.t, c.ttft, c.itl));
                    }
                })
                .expect("spawn a soak client");
        }
    });
    let mut total = Tally {
        clients: plan.clients,
        mixed_clients: plan.mixed_clients,
        seconds: started.elapsed().as_secs_f64(),
        peak_open_streams: peak.load(Ordering::Acquire),
        ..Tally::default()
    };
    let (mut ttft, mut itl) = (Vec::new(), Vec::new());
    let parts = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
    for (t, a, b) in parts {
        total.merge(t);
        ttft.extend(a);
        itl.extend(b);
    }
    total.ttft_ms = pcts(&mut ttft);
    total.itl_ms = pcts(&mut itl);
    total
}

/// The engine's state once the load is over: waits (up to `wait`) until no KV block is
/// used and nothing runs or waits. Returns (kv_blocks_used, running, waiting).
pub fn settle(base: &str, wait: Duration) -> Option<(f64, f64, f64)> {
    let deadline = Instant::now() + wait;
    loop {
        let m = get(base, "/metrics").map(|(_, t)| t)?;
        let state = (
            metric(&m, "kiln_kv_blocks_used")?,
            metric(&m, "kiln_requests_running")?,
            metric(&m, "kiln_requests_waiting")?,
        );
        if state == (0.0, 0.0, 0.0) || Instant::now() > deadline {
            return Some(state);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
