//! Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`): every row of its
//! request-field table sent to a real server with SmolLM2-135M and answered exactly as the
//! row says; the stream's events in Anthropic's order with the non-streamed text; stop
//! sequences; errors in Anthropic's shape; `x-api-key`. Then the official `anthropic`
//! Python client against Qwen2.5-Coder (`tests/clients/anthropic_messages.py`; needs
//! `pip install anthropic jsonschema`, fails, never skips, without them).

mod common;

use common::{agent, post, run_client, send_field_table, start, start_model};
use kiln_server::ServerConfig;
use kiln_server::fields::{self, Endpoint};
use serde_json::{Value, json};

fn base(e: Endpoint) -> (&'static str, Value) {
    let messages = json!([{"role":"user","content":"Hi"}]);
    match e {
        Endpoint::Messages => (
            "/v1/messages",
            json!({"model":"smollm2-135m","max_tokens":2,"messages":messages,"temperature":0}),
        ),
        Endpoint::CountTokens => (
            "/v1/messages/count_tokens",
            json!({"model":"smollm2-135m","messages":messages}),
        ),
        _ => unreachable!("only Anthropic's endpoints"),
    }
}

/// An error body in Anthropic's shape; returns its message.
fn anthropic_error(text: &str, kind: &str) -> String {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["type"], "error", "{text}");
    assert_eq!(v["error"]["type"], kind, "{text}");
    assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{text}");
    v["error"]["message"]
        .as_str()
        .expect("a message")
        .to_string()
}

/// The text blocks of a message, joined.
fn text_of(message: &Value) -> String {
    message["content"]
        .as_array()
        .expect("content blocks")
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// The `(event, data)` pairs of an SSE body.
fn events(body: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for frame in body.split("\n\n").filter(|f| !f.trim().is_empty()) {
        let mut name = None;
        let mut data: Option<Value> = None;
        for line in frame.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = Some(n.to_string());
            } else if let Some(d) = line.strip_prefix("data: ") {
                data = Some(serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")));
            }
        }
        let (Some(name), Some(data)) = (name, data) else {
            panic!("a frame without an event name or data: {frame:?}");
        };
        assert_eq!(data["type"], name.as_str(), "{frame}");
        out.push((name, data));
    }
    out
}

#[test]
fn every_anthropic_field_in_the_table_gets_exactly_the_answer_its_row_says() {
    let addr = start(ServerConfig::default());
    let checked = send_field_table(
        addr,
        &[Endpoint::Messages, Endpoint::CountTokens],
        base,
        |_, name, text| {
            let m = anthropic_error(text, "invalid_request_error");
            assert!(m.starts_with(&format!("{name}: ")), "{m}");
        },
    );
    assert_eq!(
        checked,
        fields::of(Endpoint::Messages).count() + fields::of(Endpoint::CountTokens).count()
    );
    // An unknown field, and OpenAI's name for a field Anthropic names otherwise.
    for field in ["foo_bar", "stop"] {
        let (path, mut body) = base(Endpoint::Messages);
        body[field] = json!(["x"]);
        let (status, text) = post(addr, path, &body);
        assert_eq!(status, 400, "{text}");
        let m = anthropic_error(&text, "invalid_request_error");
        assert_eq!(m, format!("{field}: Extra inputs are not permitted"));
    }
}

#[test]
fn a_reply_is_a_message_and_its_stream_has_anthropics_events_in_order() {
    let addr = start(ServerConfig::default());
    let (path, mut body) = base(Endpoint::Messages);
    body["max_tokens"] = json!(12);
    body["system"] = json!([{"type":"text","text":"You are concise."}]);
    let (status, text) = post(addr, path, &body);
    assert_eq!(status, 200, "{text}");
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["type"], "message");
    assert_eq!(r["role"], "assistant");
    assert_eq!(r["model"], "smollm2-135m");
    assert!(r["id"].as_str().unwrap().starts_with("msg_"), "{r}");
    let reason = r["stop_reason"].as_str().unwrap();
    assert!(reason == "end_turn" || reason == "max_tokens", "{r}");
    assert_eq!(r["stop_sequence"], Value::Null);
    let content = r["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{r}");
    assert_eq!(content[0]["type"], "text");
    let greedy = content[0]["text"].as_str().unwrap();
    let (_, count) = post(
        addr,
        "/v1/messages/count_tokens",
        &json!({"messages": body["messages"], "system": body["system"]}),
    );
    let count: Value = serde_json::from_str(&count).unwrap();
    assert_eq!(count, json!({"input_tokens": r["usage"]["input_tokens"]}));

    body["stream"] = json!(true);
    let (status, sse) = post(addr, path, &body);
    assert_eq!(status, 200, "{sse}");
    let ev = events(&sse);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..3],
        ["message_start", "ping", "content_block_start"],
        "{names:?}"
    );
    let n = names.len();
    assert_eq!(
        names[n - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{names:?}"
    );
    assert!(
        names[3..n - 3].iter().all(|&n| n == "content_block_delta"),
        "{names:?}"
    );
    let start = &ev[0].1["message"];
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert_eq!(start["usage"]["input_tokens"], r["usage"]["input_tokens"]);
    assert_eq!(ev[2].1["content_block"], json!({"type":"text","text":""}));
    let mut streamed = String::new();
    for (_, d) in &ev[3..n - 3] {
        assert_eq!(d["index"], 0);
        assert_eq!(d["delta"]["type"], "text_delta");
        streamed.push_str(d["delta"]["text"].as_str().unwrap());
    }
    assert_eq!(streamed, greedy);
    let delta = &ev[n - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], reason);
    assert_eq!(delta["usage"]["output_tokens"], r["usage"]["output_tokens"]);
}

#[test]
fn a_stop_sequence_ends_the_reply_and_is_named_streamed_or_not() {
    let addr = start(ServerConfig::default());
    let (path, mut body) = base(Endpoint::Messages);
    body["max_tokens"] = json!(16);
    let (_, text) = post(addr, path, &body);
    let r: Value = serde_json::from_str(&text).unwrap();
    let greedy = text_of(&r);
    // The second half of the greedy text's middle word.
    let words: Vec<&str> = greedy.split_whitespace().collect();
    assert!(words.len() >= 3, "too short a reply to cut: {greedy:?}");
    let word: Vec<char> = words[words.len() / 2].chars().collect();
    let stop: String = word[word.len() / 2..].iter().collect();
    let expected = &greedy[..greedy.find(&stop).unwrap()];
    body["stop_sequences"] = json!(["<never>", stop]);
    let (_, text) = post(addr, path, &body);
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["stop_reason"], "stop_sequence", "{r}");
    assert_eq!(r["stop_sequence"], stop.as_str(), "{r}");
    assert_eq!(text_of(&r), expected, "{r}");
    body["stream"] = json!(true);
    let (_, sse) = post(addr, path, &body);
    let ev = events(&sse);
    let delta = &ev[ev.len() - 2].1;
    assert_eq!(
        delta["delta"],
        json!({"stop_reason":"stop_sequence","stop_sequence":stop})
    );
}

#[test]
fn bad_requests_are_answered_in_anthropics_shape_with_anthropics_status() {
    let addr = start(ServerConfig::default());
    let (path, body) = base(Endpoint::Messages);
    let mut no_max = body.clone();
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let (status, text) = post(addr, path, &no_max);
    assert_eq!(status, 400);
    assert_eq!(
        anthropic_error(&text, "invalid_request_error"),
        "max_tokens: Field required"
    );
    let mut image = body.clone();
    image["messages"] = json!([{"role":"user","content":[{"type":"image","source":
        {"type":"base64","media_type":"image/png","data":"AAAA"}}]}]);
    let (status, text) = post(addr, path, &image);
    assert_eq!(status, 400);
    let m = anthropic_error(&text, "invalid_request_error");
    assert!(
        m.contains("image") && m.contains("text, tool_result"),
        "{m}"
    );
    let mut model = body.clone();
    model["model"] = json!("claude-sonnet-4-5");
    let (status, text) = post(addr, path, &model);
    assert_eq!(status, 404);
    let m = anthropic_error(&text, "not_found_error");
    assert!(m.contains("claude-sonnet-4-5"), "{m}");
    let mut hot = body.clone();
    hot["temperature"] = json!(1.5);
    let (status, text) = post(addr, path, &hot);
    assert_eq!(status, 400);
    anthropic_error(&text, "invalid_request_error");
    let mut thinking = body.clone();
    thinking["thinking"] = json!({"type":"enabled","budget_tokens":1024});
    let (status, text) = post(addr, path, &thinking);
    assert_eq!(
        status, 400,
        "SmolLM2's template has no reasoning blocks: {text}"
    );
    assert!(anthropic_error(&text, "invalid_request_error").starts_with("thinking: "));
    let (status, text) = post(addr, path, &json!([1]));
    assert_eq!(status, 400);
    anthropic_error(&text, "invalid_request_error");
}

#[test]
fn x_api_key_is_accepted_and_a_missing_key_is_anthropics_401() {
    let addr = start(ServerConfig {
        api_keys: vec!["sk-test".into()],
        ..ServerConfig::default()
    });
    let (path, body) = base(Endpoint::Messages);
    let send = |key: Option<&str>| {
        let mut req = agent()
            .post(format!("http://{addr}{path}"))
            .content_type("application/json");
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        let mut r = req.send(body.to_string()).expect("request");
        let status = r.status().as_u16();
        (status, r.body_mut().read_to_string().expect("body"))
    };
    let (status, text) = send(Some("sk-test"));
    assert_eq!(status, 200, "{text}");
    for key in [None, Some("sk-wrong")] {
        let (status, text) = send(key);
        assert_eq!(status, 401, "{key:?}: {text}");
        anthropic_error(&text, "authentication_error");
    }
}

const QWEN: &str = "qwen2.5-coder-0.5b";

#[test]
fn the_anthropic_client_streams_stops_calls_tools_and_counts_tokens() {
    let addr = start_model(
        QWEN,
        ServerConfig {
            api_keys: vec!["sk-kiln-test".into()],
            ..ServerConfig::default()
        },
        2048,
        2,
    );
    let stdout = run_client(
        "anthropic_messages.py",
        &[format!("http://{addr}"), QWEN.into(), "sk-kiln-test".into()],
        "anthropic jsonschema",
        "all anthropic client checks passed",
    );
    println!("{stdout}");
}
