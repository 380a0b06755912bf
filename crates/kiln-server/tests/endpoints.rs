//! llama-server's utility endpoints on a real server with SmolLM2-135M: `/tokenize`,
//! `/detokenize`, `/apply-template`.

mod common;

use common::{post, start};
use kiln_server::ServerConfig;
use serde_json::{Value, json};

#[test]
fn tokenize_and_detokenize_round_trip_with_llama_servers_shapes() {
    let addr = start(ServerConfig::default());
    let text = "Hello world, héllo!";
    let (status, body) = post(addr, "/tokenize", &json!({"content": text}));
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<u64> = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert!(ids.len() >= 4, "{body}");
    let (status, body) = post(addr, "/detokenize", &json!({"tokens": ids}));
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["content"], text);

    let (_, body) = post(
        addr,
        "/tokenize",
        &json!({"content": text, "with_pieces": true}),
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    let pieces = v["tokens"].as_array().unwrap();
    assert_eq!(pieces.len(), ids.len());
    assert_eq!(pieces[0]["id"], ids[0]);
    let joined: String = pieces
        .iter()
        .map(|p| p["piece"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(joined, text);

    // Special tokens are matched in the text unless parse_special is false.
    let (_, a) = post(addr, "/tokenize", &json!({"content": "<|im_start|>"}));
    let (_, b) = post(
        addr,
        "/tokenize",
        &json!({"content": "<|im_start|>", "parse_special": false}),
    );
    let a: Value = serde_json::from_str(&a).unwrap();
    let b: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(a["tokens"].as_array().unwrap().len(), 1, "{a}");
    assert!(b["tokens"].as_array().unwrap().len() > 1, "{b}");

    let (status, body) = post(addr, "/detokenize", &json!({"tokens": [99999999]}));
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(addr, "/tokenize", &json!({"text": "x"}));
    assert_eq!(status, 400, "{body}");
}

#[test]
fn apply_template_returns_the_prompt_chat_completions_would_use() {
    let addr = start(ServerConfig::default());
    let messages = json!([{"role":"user","content":"Hi there"}]);
    let (status, body) = post(addr, "/apply-template", &json!({"messages": messages}));
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let prompt = v["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("<|im_start|>user\nHi there<|im_end|>"),
        "{prompt}"
    );
    assert!(prompt.ends_with("<|im_start|>assistant\n"), "{prompt}");
    // The chat endpoint's prompt token count equals the template's tokens.
    let (_, t) = post(addr, "/tokenize", &json!({"content": prompt}));
    let t: Value = serde_json::from_str(&t).unwrap();
    let (_, c) = post(
        addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 1}),
    );
    let c: Value = serde_json::from_str(&c).unwrap();
    assert_eq!(
        c["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
        t["tokens"].as_array().unwrap().len()
    );
    let (status, _) = post(
        addr,
        "/apply-template",
        &json!({"messages": [{"role":"wizard","content":"x"}]}),
    );
    assert_eq!(status, 400);
}

#[test]
fn apply_template_and_render_take_the_tools_fields_as_chat_does() {
    let addr = start(ServerConfig::default());
    let tools = json!([{"type":"function","function":{"name":"get_weather","parameters":
        {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]);
    let messages = json!([{"role":"user","content":"Weather in Paris?"}]);
    for choice in ["auto", "required"] {
        let body = json!({"messages": messages, "tools": tools, "tool_choice": choice,
                          "chat_template_kwargs": {"enable_thinking": false}});
        let (status, text) = post(addr, "/apply-template", &body);
        assert_eq!(status, 200, "{choice}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let prompt = v["prompt"].as_str().unwrap();
        assert!(prompt.contains("get_weather"), "{choice}: {prompt}");
        let (_, t) = post(addr, "/tokenize", &json!({"content": prompt}));
        let t: Value = serde_json::from_str(&t).unwrap();
        let (status, r) = post(addr, "/v1/chat/completions/render", &body);
        assert_eq!(status, 200, "{choice}: {r}");
        let r: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(r["prompt_token_ids"], t["tokens"], "{choice}");
        let mut one = body.clone();
        one["max_tokens"] = json!(1);
        let (status, c) = post(addr, "/v1/chat/completions", &one);
        assert_eq!(status, 200, "{choice}: {c}");
        let c: Value = serde_json::from_str(&c).unwrap();
        assert_eq!(
            c["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
            r["prompt_token_ids"].as_array().unwrap().len(),
            "{choice}"
        );
    }
    // A required call starts a new assistant turn: not after a continued message.
    let body = json!({"messages": [{"role":"user","content":"Hi"},
                                   {"role":"assistant","content":"Hello"}],
                      "tools": tools, "tool_choice": "required",
                      "continue_final_message": true});
    for path in [
        "/apply-template",
        "/v1/chat/completions/render",
        "/v1/chat/completions",
    ] {
        let (status, text) = post(addr, path, &body);
        assert_eq!(status, 400, "{path}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], "tool_choice", "{path}: {text}");
    }
}
