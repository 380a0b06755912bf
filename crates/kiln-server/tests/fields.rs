//! Every row of the request-field table (`kiln_server::fields::FIELDS`, printed in
//! docs/serving.md) sent to a real server with SmolLM2-135M: honoured and no-op fields are
//! answered 200, refused ones 400 naming the field; an unknown field is OpenAI's 400 (or
//! dropped under `lenient_params`); a message role OpenAI does not have is a 400.

mod common;

use common::{post, start, start_model};
use kiln_server::ServerConfig;
use kiln_server::fields::{self, Endpoint, Status};
use serde_json::{Value, json};

fn base(e: Endpoint) -> (&'static str, Value) {
    match e {
        Endpoint::Completions => (
            "/v1/completions",
            json!({"prompt":"The capital of France is","max_tokens":2,"temperature":0}),
        ),
        Endpoint::Chat => (
            "/v1/chat/completions",
            json!({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"temperature":0}),
        ),
        Endpoint::Embeddings => ("/v1/embeddings", json!({"input":"Hello"})),
        Endpoint::Infill => (
            "/infill",
            json!({"input_prefix":"def add(a, b):\n","input_suffix":"\n","max_tokens":2,"temperature":0}),
        ),
        Endpoint::Messages | Endpoint::CountTokens => {
            unreachable!("Anthropic's endpoints: tests/anthropic.rs")
        }
    }
}

/// Qwen2.5-Coder (it has fill-in-the-middle tokens; SmolLM2 has none).
fn start_fim_model() -> std::net::SocketAddr {
    start_model("qwen2.5-coder-0.5b", ServerConfig::default(), 256, 4)
}

#[test]
fn every_field_in_the_table_gets_exactly_the_answer_its_row_says() {
    // SmolLM2 declares no pooling: the embeddings rows need one chosen.
    let addr = start(ServerConfig {
        pooling: Some(kiln_model::Pooling::Mean),
        ..ServerConfig::default()
    });
    // Fill in the middle needs a model with FIM tokens.
    let fim = start_fim_model();
    let mut checked = 0;
    let endpoints = [
        Endpoint::Completions,
        Endpoint::Chat,
        Endpoint::Embeddings,
        Endpoint::Infill,
    ];
    for e in endpoints {
        let (path, base) = base(e);
        for f in fields::of(e) {
            let addr = if e == Endpoint::Infill || f.name == "suffix" {
                fim
            } else {
                addr
            };
            let mut body = base.clone();
            let mut value: Value = serde_json::from_str(f.example).unwrap();
            if f.name == "model" && addr == fim {
                value = json!("qwen2.5-coder-0.5b");
            }
            body[f.name] = value;
            if f.name == "top_logprobs" {
                body["logprobs"] = json!(true);
            }
            if f.name == "n_predict" {
                // llama-server's name for max_tokens: the two together are a 400.
                if let Some(o) = body.as_object_mut() {
                    o.remove("max_tokens");
                }
            }
            let (status, text) = post(addr, path, &body);
            match f.status {
                Status::Honoured | Status::NoOp => {
                    assert_eq!(status, 200, "{e:?} {}: {body} → {text}", f.name);
                }
                Status::Refused => {
                    assert_eq!(status, 400, "{e:?} {}: {body} → {text}", f.name);
                    let v: Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(v["error"]["param"], f.name, "{e:?}: {text}");
                    assert_eq!(v["error"]["type"], "invalid_request_error", "{text}");
                }
            }
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        endpoints
            .iter()
            .map(|&e| fields::of(e).count())
            .sum::<usize>()
    );
}

#[test]
fn an_unknown_field_is_openais_400_and_lenient_params_drops_it() {
    let strict = start(ServerConfig {
        pooling: Some(kiln_model::Pooling::Mean),
        ..ServerConfig::default()
    });
    for e in [Endpoint::Completions, Endpoint::Chat, Endpoint::Embeddings] {
        let (path, mut body) = base(e);
        body["foo_bar"] = json!(1);
        let (status, text) = post(strict, path, &body);
        assert_eq!(status, 400, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["error"]["message"],
            "Unrecognized request argument supplied: foo_bar"
        );
    }
    let lenient = start(ServerConfig {
        lenient_params: true,
        pooling: Some(kiln_model::Pooling::Mean),
        ..ServerConfig::default()
    });
    for e in [Endpoint::Completions, Endpoint::Chat, Endpoint::Embeddings] {
        let (path, mut body) = base(e);
        body["foo_bar"] = json!(1);
        let (status, text) = post(lenient, path, &body);
        assert_eq!(status, 200, "{text}");
    }
}

#[test]
fn the_chat_only_tools_fields_are_unrecognized_on_completions() {
    let addr = start(ServerConfig::default());
    for name in [
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "chat_template_kwargs",
    ] {
        let f = fields::of(Endpoint::Chat)
            .find(|f| f.name == name)
            .expect("a chat field");
        assert_eq!(f.status, Status::Honoured, "{name}");
        assert!(fields::of(Endpoint::Completions).all(|f| f.name != name));
        let (path, mut body) = base(Endpoint::Completions);
        body[name] = serde_json::from_str(f.example).unwrap();
        let (status, text) = post(addr, path, &body);
        assert_eq!(status, 400, "{name}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["error"]["message"],
            format!("Unrecognized request argument supplied: {name}")
        );
    }
}

#[test]
fn a_message_with_a_role_openai_does_not_have_is_a_400() {
    let addr = start(ServerConfig::default());
    let (status, text) = post(
        addr,
        "/v1/chat/completions",
        &json!({"messages":[{"role":"wizard","content":"Hi"}],"max_tokens":2}),
    );
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["param"], "messages");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("'wizard'"),
        "{text}"
    );
}

#[test]
fn a_grammar_and_a_choice_constrain_the_output_on_both_endpoints() {
    let addr = start(ServerConfig::default());
    for e in [Endpoint::Completions, Endpoint::Chat] {
        let (path, mut body) = base(e);
        body["max_tokens"] = json!(8);
        body["grammar"] = json!("root ::= \"yes\" | \"no\"");
        let (status, text) = post(addr, path, &body);
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let out = match e {
            Endpoint::Completions => v["choices"][0]["text"].clone(),
            Endpoint::Chat => v["choices"][0]["message"]["content"].clone(),
            _ => unreachable!("not iterated here"),
        };
        assert!(out == "yes" || out == "no", "{e:?}: {out}");
        let (path, mut body) = base(e);
        body["max_tokens"] = json!(8);
        body["structured_outputs"] = json!({"choice":["Paris","Lyon"]});
        let (_, text) = post(addr, path, &body);
        let v: Value = serde_json::from_str(&text).unwrap();
        let out = match e {
            Endpoint::Completions => v["choices"][0]["text"].clone(),
            Endpoint::Chat => v["choices"][0]["message"]["content"].clone(),
            _ => unreachable!("not iterated here"),
        };
        assert!(out == "Paris" || out == "Lyon", "{e:?}: {out}");
    }
}

#[test]
fn continue_final_message_continues_the_assistants_text() {
    let addr = start(ServerConfig::default());
    let msgs = json!([{"role":"user","content":"Name a colour."},
                      {"role":"assistant","content":"My favourite colour is"}]);
    let (status, text) = post(
        addr,
        "/v1/chat/completions",
        &json!({"messages":msgs,"continue_final_message":true,"add_generation_prompt":false,
                "max_tokens":4,"temperature":0}),
    );
    assert_eq!(status, 200, "{text}");
    // The same prompt by hand: the rendered conversation cut after the last content.
    let (status, text2) = post(
        addr,
        "/v1/completions",
        &json!({"prompt":"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\nMy favourite colour is",
                "max_tokens":4,"temperature":0}),
    );
    assert_eq!(status, 200, "{text2}");
    let a: Value = serde_json::from_str(&text).unwrap();
    let b: Value = serde_json::from_str(&text2).unwrap();
    assert_eq!(
        a["choices"][0]["message"]["content"],
        b["choices"][0]["text"]
    );
    let (status, _) = post(
        addr,
        "/v1/chat/completions",
        &json!({"messages":msgs,"continue_final_message":true,"add_generation_prompt":true}),
    );
    assert_eq!(status, 400);
}
