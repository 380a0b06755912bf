//! Tool calling through the official `openai` Python client against Qwen2.5-Coder: a call,
//! its result, and the answer, with `tool_choice` auto and required, streamed and not; and
//! 20 seeded sampled runs with `required` whose arguments validate against the schema; a
//! streamed call's arguments arrive in several deltas as they are generated.
//! Needs `python3` with `pip install openai jsonschema`; fails (never skips) without them.

mod common;

use common::{run_client, start_model};
use kiln_server::ServerConfig;

const MODEL: &str = "qwen2.5-coder-0.5b";

#[test]
fn the_openai_client_runs_a_tool_calling_loop_and_required_arguments_always_validate() {
    let addr = start_model(MODEL, ServerConfig::default(), 2048, 2);
    let stdout = run_client(
        "openai_tools.py",
        &[format!("http://{addr}"), MODEL.into()],
        "openai jsonschema",
        "schema-valid arguments: 20/20",
    );
    println!("{stdout}");
    streamed_arguments_arrive_in_several_deltas(addr);
}

/// A raw SSE stream (no client library): the call's first delta names it, and its
/// arguments arrive in more than one delta, adding up to JSON that names the city.
fn streamed_arguments_arrive_in_several_deltas(addr: std::net::SocketAddr) {
    let body = serde_json::json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "What is the weather like in Paris right now, in celsius?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"]}}}],
        "tool_choice": "required",
        "max_tokens": 96,
        "temperature": 0,
        "stream": true,
    });
    let mut r = ureq::post(format!("http://{addr}/v1/chat/completions"))
        .content_type("application/json")
        .send(body.to_string())
        .expect("request");
    let text = r.body_mut().read_to_string().expect("body");
    let (mut name, mut arguments, mut argument_deltas, mut finish) =
        (String::new(), String::new(), 0, String::new());
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(chunk) = serde_json::from_str::<serde_json::Value>(data) else {
            continue;
        };
        let choice = &chunk["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(call["index"], 0, "{data}");
            if let Some(n) = call["function"]["name"].as_str() {
                assert!(name.is_empty(), "the name comes once: {data}");
                assert_eq!(call["type"], "function", "{data}");
                assert!(
                    call["id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with("call_"))
                );
                name = n.to_string();
            }
            let a = call["function"]["arguments"].as_str().unwrap_or("");
            if !a.is_empty() {
                assert!(!name.is_empty(), "arguments before the name: {data}");
                arguments.push_str(a);
                argument_deltas += 1;
            }
        }
    }
    assert_eq!(
        (name.as_str(), finish.as_str()),
        ("get_weather", "tool_calls"),
        "{text}"
    );
    let args: serde_json::Value = serde_json::from_str(&arguments).expect("arguments are JSON");
    assert!(
        args["city"].as_str().is_some_and(|c| c.contains("Paris")),
        "{arguments}"
    );
    assert!(
        argument_deltas > 1,
        "arguments in {argument_deltas} delta(s): {text}"
    );
}
