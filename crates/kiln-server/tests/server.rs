//! The server over real HTTP on 127.0.0.1:0 with SmolLM2-135M: greedy text equal to the
//! engine's, streaming equal to non-streaming, chat through the template, every error
//! status, /metrics and KV blocks freed after a client disconnects mid-stream, /health.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_engine::{Engine, EngineConfig, Event, FaultPlan, Request};
use kiln_model::Model;
use kiln_server::{AppState, Backend, ServerConfig};
use kiln_testkit::server::Loaded;
use kiln_tokenizer::Tokenizer;
use kiln_tokenizer::chat::{ChatTemplate, Conversation, RenderOptions};
use serde_json::{Value, json};

const PROMPT: &str = "The capital of France is";

struct Server {
    addr: SocketAddr,
    state: AppState,
    engine: Engine,
    tokenizer: Arc<Tokenizer>,
    template: Arc<ChatTemplate>,
}

/// A 512-token context with KV room for 8 of them.
fn engine_config(model: &Model) -> EngineConfig {
    let mut cfg = EngineConfig::for_model(model);
    cfg.n_ctx = 512;
    cfg.threads = 2;
    let shape = cfg.kv.config(model.config(), 0);
    cfg.kv.memory = Some(shape.blocks_for_tokens(512) * 8 * shape.block_bytes());
    cfg
}

/// A server on a free loopback port, running on its own thread and runtime.
fn start(config: ServerConfig, tweak: impl FnOnce(&mut EngineConfig)) -> Server {
    let Loaded {
        model,
        tokenizer,
        template,
    } = kiln_testkit::server::load("smollm2-135m");
    let mut cfg = engine_config(&model);
    tweak(&mut cfg);
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    let state = AppState::ready(
        config,
        Backend {
            engine: engine.clone(),
            tokenizer: Arc::clone(&tokenizer),
            template: Some(Arc::clone(&template)),
            model_id: "smollm2-135m".into(),
            aliases: vec!["smollm2".into()],
        },
    );
    let addr = kiln_testkit::server::serve(state.clone());
    Server {
        addr,
        state,
        engine,
        tokenizer,
        template,
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// POSTs a JSON text; returns the status and the body.
fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut r = agent()
        .post(format!("http://{addr}{path}"))
        .content_type("application/json")
        .send(body)
        .expect("request");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().expect("body"))
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut r = agent()
        .get(format!("http://{addr}{path}"))
        .call()
        .expect("request");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().expect("body"))
}

fn post_json(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (s, text) = post(addr, path, &body.to_string());
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (s, v)
}

/// The `data:` payloads of an SSE body, in order.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|ev| {
            ev.lines()
                .find_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .map(str::to_string)
        })
        .collect()
}

fn greedy_engine_text(s: &Server, prompt: Vec<u32>, max_tokens: usize) -> String {
    let h = s
        .engine
        .submit(Request::greedy(prompt, max_tokens))
        .expect("submit");
    let mut text = String::new();
    while let Some(ev) = h.recv() {
        match ev {
            Event::Token { text: t, .. } => text.push_str(&t),
            Event::Done { .. } => break,
            Event::Error(e) => panic!("{e}"),
        }
    }
    text
}

fn error_of(v: &Value) -> (&str, Option<&str>) {
    let e = &v["error"];
    assert!(e["message"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    (e["type"].as_str().unwrap_or(""), e["code"].as_str())
}

fn metric(text: &str, name: &str) -> f64 {
    kiln_server::metrics::parse(text)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

#[test]
fn greedy_completion_equals_the_engines_text_and_streaming_concatenates_to_it() {
    let s = start(ServerConfig::default(), |_| {});
    let ids = s.tokenizer.encode(PROMPT, true, true).unwrap();
    let expected = greedy_engine_text(&s, ids.clone(), 24);
    assert!(!expected.is_empty());

    let req = json!({"model":"smollm2-135m","prompt":PROMPT,"max_tokens":24,"temperature":0});
    let (status, v) = post_json(s.addr, "/v1/completions", &req);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], expected.as_str());
    assert_eq!(v["usage"]["prompt_tokens"], ids.len());
    let completion_tokens = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=24).contains(&completion_tokens));
    let finish = v["choices"][0]["finish_reason"].as_str().unwrap();
    assert_eq!(finish == "length", completion_tokens == 24, "{v}");

    // The same request streamed: chunks concatenate to the same text, the last choice
    // chunk has the finish reason, then the usage chunk, then [DONE].
    let mut streamed = req.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (status, body) = post(s.addr, "/v1/completions", &streamed.to_string());
    assert_eq!(status, 200, "{body}");
    let data = sse_data(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, expected);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], completion_tokens);
    let last_choice = &chunks[chunks.len() - 2]["choices"][0];
    assert_eq!(last_choice["finish_reason"], finish);

    // Token-id prompts, an alias, and logprobs.
    let (status, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"model":"smollm2","prompt":ids,"max_tokens":4,"temperature":0,"logprobs":2}),
    );
    assert_eq!(status, 200, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 4, "{v}");
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2, "{v}");
    assert!(expected.starts_with(v["choices"][0]["text"].as_str().unwrap()));
}

#[test]
fn chat_completion_uses_the_template_and_streams_role_then_content() {
    let s = start(ServerConfig::default(), |_| {});
    let messages = json!([{"role":"system","content":"You are terse."},
                          {"role":"user","content":"Name a colour."}]);
    let conv = Conversation::from_json(&messages.to_string()).unwrap();
    let text = s
        .template
        .render(&conv, &RenderOptions::generation())
        .unwrap();
    let ids = s.template.prompt_tokens(&s.tokenizer, &text).unwrap();
    let expected = greedy_engine_text(&s, ids.clone(), 16);

    let req = json!({"model":"smollm2-135m","messages":messages,"max_completion_tokens":16,"temperature":0});
    let (status, v) = post_json(s.addr, "/v1/chat/completions", &req);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], expected.as_str());
    assert_eq!(v["usage"]["prompt_tokens"], ids.len());

    let mut streamed = req.clone();
    streamed["stream"] = json!(true);
    let (status, body) = post(s.addr, "/v1/chat/completions", &streamed.to_string());
    assert_eq!(status, 200, "{body}");
    let data = sse_data(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, expected);
    assert!(chunks.last().unwrap()["choices"][0]["finish_reason"].is_string());

    // n = 2 sampled choices, and a JSON-schema constrained reply.
    let (status, v) = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages":messages,"max_tokens":8,"n":2,"seed":5,"temperature":1.0}),
    );
    assert_eq!(status, 200, "{v}");
    let idx: Vec<u64> = v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, [0, 1]);
    let schema = json!({"type":"object","properties":{"colour":{"type":"string","maxLength":12}},"required":["colour"]});
    let (status, v) = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages":messages,"max_tokens":40,"temperature":0,
                "response_format":{"type":"json_schema","json_schema":{"name":"c","schema":schema}}}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let reply: Value =
        serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {v}"));
    assert!(reply["colour"].is_string(), "{reply}");
}

#[test]
fn errors_use_openai_json_with_the_right_status() {
    let s = start(
        ServerConfig {
            max_body_bytes: 4096,
            ..ServerConfig::default()
        },
        |_| {},
    );
    let (status, body) = post(s.addr, "/v1/completions", "{\"prompt\": ");
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error_of(&v).0, "invalid_request_error");

    let (status, v) = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}),
    );
    assert_eq!(status, 404, "{v}");
    assert_eq!(error_of(&v).1, Some("model_not_found"));

    let long = "word ".repeat(600);
    let (status, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt":long,"max_tokens":8}),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(error_of(&v).1, Some("context_length_exceeded"));
    let (status, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt":PROMPT,"max_tokens":600}),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(error_of(&v).1, Some("context_length_exceeded"));

    let (status, body) = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt":"x".repeat(5000)}).to_string(),
    );
    assert_eq!(status, 413, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error_of(&v).1, Some("request_too_large"));

    let (status, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt":PROMPT,"temperature":9}),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "temperature");

    // Shutting down: new requests 503, /health 503.
    s.state.begin_shutdown();
    let (status, v) = post_json(s.addr, "/v1/completions", &json!({"prompt":PROMPT}));
    assert_eq!(status, 503, "{v}");
    assert_eq!(error_of(&v).0, "service_unavailable_error");
    assert_eq!(get(s.addr, "/health").0, 503);

    // A full queue: 429.
    let q = start(ServerConfig::default(), |c| c.max_queue = 0);
    let (status, v) = post_json(
        q.addr,
        "/v1/completions",
        &json!({"prompt":PROMPT,"max_tokens":2}),
    );
    assert_eq!(status, 429, "{v}");
    assert_eq!(error_of(&v), ("rate_limit_error", Some("queue_full")));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_queue"),
        "{v}"
    );
}

#[test]
fn health_is_503_while_loading_and_200_once_ready() {
    let state = AppState::loading(ServerConfig::default());
    let addr = kiln_testkit::server::serve(state.clone());
    let (status, body) = get(addr, "/health");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("loading"));
    let (status, _) = post(
        addr,
        "/v1/completions",
        &json!({"prompt":PROMPT}).to_string(),
    );
    assert_eq!(status, 503);
    let (_, metrics) = get(addr, "/metrics");
    assert_eq!(metric(&metrics, "kiln_model_loaded"), 0.0);

    let Loaded {
        model,
        tokenizer,
        template,
    } = kiln_testkit::server::load("smollm2-135m");
    let cfg = engine_config(&model);
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    state.set_backend(Backend {
        engine,
        tokenizer,
        template: Some(template),
        model_id: "smollm2-135m".into(),
        aliases: Vec::new(),
    });
    let (status, body) = get(addr, "/health");
    assert_eq!(status, 200, "{body}");
    let (status, body) = get(addr, "/v1/models");
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"][0]["id"], "smollm2-135m");
    assert_eq!(v["object"], "list");
}

#[test]
fn kv_blocks_return_to_zero_after_a_client_disconnects_mid_stream() {
    let s = start(ServerConfig::default(), |_| {});
    let (status, metrics) = get(s.addr, "/metrics");
    assert_eq!(status, 200);
    assert!(metric(&metrics, "kiln_kv_blocks_total") > 0.0);
    assert_eq!(metric(&metrics, "kiln_kv_blocks_used"), 0.0);

    // Ban end-of-generation so the stream cannot end by itself before we leave.
    let bias: serde_json::Map<String, Value> = s
        .tokenizer
        .eog_ids()
        .iter()
        .map(|id| (id.to_string(), json!(-100)))
        .collect();
    let req = json!({"prompt":PROMPT,"max_tokens":400,"stream":true,"logit_bias":bias});
    let resp = agent()
        .post(format!("http://{}/v1/completions", s.addr))
        .content_type("application/json")
        .send(req.to_string())
        .expect("stream");
    assert_eq!(resp.status().as_u16(), 200);
    let mut lines = BufReader::new(resp.into_body().into_reader()).lines();
    let mut data_lines = 0;
    while data_lines < 3 {
        let line = lines.next().expect("a line").expect("read");
        if line.starts_with("data: ") {
            assert_ne!(line, "data: [DONE]");
            data_lines += 1;
        }
    }
    let (_, during) = get(s.addr, "/metrics");
    assert!(metric(&during, "kiln_kv_blocks_used") > 0.0, "{during}");
    assert_eq!(metric(&during, "kiln_requests_running"), 1.0);
    drop(lines); // the client goes away mid-stream

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, m) = get(s.addr, "/metrics");
        if metric(&m, "kiln_kv_blocks_used") == 0.0 && metric(&m, "kiln_requests_running") == 0.0 {
            assert_eq!(
                metric(&m, "kiln_requests_total{outcome=\"cancelled\"}"),
                1.0,
                "{m}"
            );
            assert_eq!(metric(&m, "kiln_client_disconnects_total"), 1.0, "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "KV blocks were not freed:\n{m}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // And the server still answers.
    let (status, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt":PROMPT,"max_tokens":2}),
    );
    assert_eq!(status, 200, "{v}");
}

/// A streaming completion that cannot end by itself soon (end-of-generation banned),
/// read up to its first `data:` line.
fn open_stream(s: &Server, prompt: &str) -> std::io::Lines<BufReader<impl std::io::Read>> {
    let bias: serde_json::Map<String, Value> = s
        .tokenizer
        .eog_ids()
        .iter()
        .map(|id| (id.to_string(), json!(-100)))
        .collect();
    let req = json!({"prompt":prompt,"max_tokens":400,"stream":true,"logit_bias":bias});
    let resp = agent()
        .post(format!("http://{}/v1/completions", s.addr))
        .content_type("application/json")
        .send(req.to_string())
        .expect("stream");
    assert_eq!(resp.status().as_u16(), 200);
    let mut lines = BufReader::new(resp.into_body().into_reader()).lines();
    loop {
        let line = lines.next().expect("a line").expect("read");
        if line.starts_with("data: ") {
            return lines;
        }
    }
}

/// Polls `/metrics` until no KV block is used and nothing runs or waits.
fn assert_idle_soon(s: &Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, m) = get(s.addr, "/metrics");
        if metric(&m, "kiln_kv_blocks_used") == 0.0
            && metric(&m, "kiln_requests_running") == 0.0
            && metric(&m, "kiln_requests_waiting") == 0.0
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not go idle:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A chat stream's body starts with its first token, not before: the role chunk goes out
/// with it (as vLLM's does). A router reads a stream's first body byte as the end of the
/// request's prefill (vllm-router's `kv_aware` then stops counting its prompt tokens as the
/// replica's pending prefill), so a role chunk sent up front would report a queued or
/// prefilling request as done. One running sequence: a long completion holds the engine
/// while the chat waits in the queue, and the chat's connection must see the response
/// headers and then nothing until the long completion ends.
#[test]
fn a_chat_stream_sends_no_body_before_its_first_token() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    let s = start(ServerConfig::default(), |c| c.max_running = 1);
    let addr = s.addr;
    let blocker_done = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let done = Arc::clone(&blocker_done);
    let blocker = std::thread::spawn(move || {
        let body = json!({"prompt":PROMPT,"max_tokens":400,"ignore_eos":true,"temperature":0,"stream":true});
        let r = agent()
            .post(format!("http://{addr}/v1/completions"))
            .content_type("application/json")
            .send(body.to_string().as_bytes())
            .expect("blocker request");
        let mut first = Some(started_tx);
        for line in BufReader::new(r.into_body().into_reader()).lines() {
            let line = line.expect("blocker stream");
            if line.starts_with("data: ")
                && let Some(tx) = first.take()
            {
                let _ = tx.send(());
            }
        }
        done.store(true, Ordering::SeqCst);
    });
    started_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the long completion started streaming");

    let body = json!({"messages":[{"role":"user","content":"Name a colour."}],
                      "max_tokens":4,"temperature":0,"stream":true})
    .to_string();
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = c.read(&mut buf).expect("response headers");
        assert!(
            n > 0,
            "closed before the headers: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        got.len(),
        head_end,
        "body bytes with the headers while the request waits: {:?}",
        String::from_utf8_lossy(&got[head_end..])
    );
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    match c.read(&mut buf) {
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
        Ok(n) => panic!(
            "{n} body bytes before the chat's first token: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
    }
    // The silence above means something only while the long completion still held the
    // engine (400 tokens take far longer than half a second here).
    assert!(
        !blocker_done.load(Ordering::SeqCst),
        "the long completion ended within the window; the check saw nothing"
    );
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    c.read_to_end(&mut got).expect("the rest of the stream");
    blocker.join().expect("blocker");
    let rest = String::from_utf8_lossy(&got[head_end..]).to_string();
    let first = rest.find("data: ").expect("a data event");
    let role = rest.find("\"role\":\"assistant\"").expect("a role chunk");
    assert!(
        role < rest[first..].find("\n\n").map_or(rest.len(), |e| first + e),
        "the first event is the role chunk: {rest}"
    );
    assert!(rest.contains("[DONE]"), "{rest}");
}

#[test]
fn a_panic_in_one_request_answers_500_and_the_server_keeps_serving() {
    const VICTIM: &str = "Tell me a story about a zebra";
    let tok = kiln_testkit::server::load("smollm2-135m").tokenizer;
    let marker = *tok
        .encode(VICTIM, true, true)
        .unwrap()
        .last()
        .expect("tokens");
    assert!(!tok.encode(PROMPT, true, true).unwrap().contains(&marker));
    let s = start(ServerConfig::default(), |c| {
        c.fault = Some(FaultPlan {
            prompt_token: marker,
            after_tokens: 2,
        })
    });
    let want = greedy_engine_text(&s, s.tokenizer.encode(PROMPT, true, true).unwrap(), 8);

    // Not streaming: 500 in OpenAI's error JSON, naming the panic.
    let (status, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt":VICTIM,"max_tokens":8,"temperature":0}),
    );
    assert_eq!(status, 500, "{v}");
    assert_eq!(error_of(&v).0, "server_error");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("panic"),
        "{v}"
    );

    // Streaming: the first tokens, then an error event, then the stream ends.
    let (status, body) = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt":VICTIM,"max_tokens":8,"temperature":0,"stream":true}).to_string(),
    );
    assert_eq!(status, 200, "{body}");
    let data = sse_data(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{body}");
    let events: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    let (last, tokens) = events.split_last().expect("events");
    assert_eq!(error_of(last).0, "server_error", "{body}");
    assert!(!tokens.is_empty(), "tokens came before the panic: {body}");
    assert!(
        tokens
            .iter()
            .all(|t| t["choices"][0]["finish_reason"].is_null()),
        "{body}"
    );

    // The process, /health and the other requests are unaffected.
    assert_eq!(get(s.addr, "/health").0, 200);
    let (status, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt":PROMPT,"max_tokens":8,"temperature":0}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], want);
    assert_idle_soon(&s);
    let (_, m) = get(s.addr, "/metrics");
    assert_eq!(
        metric(&m, "kiln_requests_total{outcome=\"failed\"}"),
        2.0,
        "{m}"
    );
}

#[test]
fn every_request_limit_is_refused_with_an_error_naming_it() {
    let s = start(
        ServerConfig {
            max_n: 2,
            max_prompt_tokens: Some(32),
            max_concurrent_requests: 1,
            ..ServerConfig::default()
        },
        |_| {},
    );
    let refused =
        |body: Value, status: u16, param: Option<&str>, code: Option<&str>, names: &str| {
            let (st, v) = post_json(s.addr, "/v1/completions", &body);
            assert_eq!(st, status, "{v}");
            assert_eq!(v["error"]["param"].as_str(), param, "{v}");
            assert_eq!(v["error"]["code"].as_str(), code, "{v}");
            assert!(
                v["error"]["message"].as_str().unwrap().contains(names),
                "{v} should name {names}"
            );
        };
    refused(
        json!({"prompt":PROMPT,"n":3}),
        400,
        Some("n"),
        None,
        "max_n",
    );
    refused(
        json!({"prompt":[PROMPT, PROMPT, PROMPT]}),
        400,
        Some("n"),
        None,
        "max_n",
    );
    refused(
        json!({"prompt":PROMPT,"max_tokens":0}),
        400,
        Some("max_tokens"),
        None,
        "at least 1",
    );
    refused(
        json!({"prompt":"word ".repeat(40),"max_tokens":4}),
        400,
        Some("prompt"),
        Some("prompt_too_long"),
        "max_prompt_tokens",
    );
    refused(
        json!({"prompt":PROMPT,"max_tokens":600}),
        400,
        Some("messages"),
        Some("context_length_exceeded"),
        "maximum context length is 512",
    );
    let (st, v) = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages":[{"role":"user","content":"word ".repeat(40)}]}),
    );
    assert_eq!((st, error_of(&v).1), (400, Some("prompt_too_long")), "{v}");
    // n at the limit is served.
    let (st, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt":PROMPT,"n":2,"max_tokens":2}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"].as_array().unwrap().len(), 2);

    // One request in flight (a stream being read): the next one is refused with 429 …
    let stream = open_stream(&s, PROMPT);
    assert_eq!(s.state.in_flight(), 1);
    refused(
        json!({"prompt":PROMPT,"max_tokens":2}),
        429,
        None,
        Some("concurrency_limit_exceeded"),
        "max_concurrent_requests",
    );
    // … and once that client leaves, its slot is free again.
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.state.in_flight() > 0 {
        assert!(Instant::now() < deadline, "the slot was not freed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (st, v) = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt":PROMPT,"max_tokens":2}),
    );
    assert_eq!(st, 200, "{v}");
    assert_idle_soon(&s);
}
