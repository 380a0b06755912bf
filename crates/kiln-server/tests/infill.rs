//! Fill-in-the-middle on Qwen2.5-Coder: `/infill` completes a function body between its
//! signature and docstring (prefix) and its return and caller (suffix) so that the whole
//! file runs under `python3` and passes its own check, greedy; streamed the same;
//! `suffix` on `/v1/completions` builds the same prompt; `input_extra` files come before
//! the prefix; a model without FIM tokens is a 400 naming them.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

use common::post;
use kiln_engine::{Engine, EngineConfig};
use kiln_server::{AppState, Backend, ServerConfig};
use kiln_testkit::server::Loaded;
use serde_json::{Value, json};

const MODEL: &str = "qwen2.5-coder-0.5b";

const PREFIX: &str = "def average(values):\n    \"\"\"Return the arithmetic mean of a non-empty list of numbers.\"\"\"\n";
const SUFFIX: &str = "    return total / len(values)\n\n\nif __name__ == \"__main__\":\n    assert average([1, 2, 3, 4]) == 2.5\n    assert average([5]) == 5\n    print(\"infill ok\")\n";

fn start_qwen() -> SocketAddr {
    let Loaded {
        model,
        tokenizer,
        template,
    } = kiln_testkit::server::load(MODEL);
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = 1024;
    cfg.threads = 2;
    let shape = cfg.kv.config(model.config(), 0);
    cfg.kv.memory = Some(shape.blocks_for_tokens(1024) * 2 * shape.block_bytes());
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    let state = AppState::ready(
        ServerConfig::default(),
        Backend {
            engine,
            tokenizer,
            template: Some(template),
            model_id: MODEL.into(),
            aliases: vec![],
        },
    );
    kiln_testkit::server::serve(state)
}

fn text_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body).expect("json");
    v["choices"][0]["text"]
        .as_str()
        .expect("choices[0].text")
        .to_string()
}

/// Runs `source` with python3; its stdout.
fn run_python(source: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("kiln-infill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("average.py");
    std::fs::write(&file, source).expect("write");
    let out = Command::new("python3")
        .arg(&file)
        .output()
        .expect("python3 is required by this test");
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn infill_completes_a_function_body_that_makes_the_file_run_and_pass_its_check() {
    let addr = start_qwen();
    let req = json!({"input_prefix": PREFIX, "input_suffix": SUFFIX, "temperature": 0,
                     "max_tokens": 64});
    let (status, body) = post(addr, "/infill", &req);
    assert_eq!(status, 200, "{body}");
    let middle = text_of(&body);
    println!("infill middle: {middle:?}");
    let source = format!("{PREFIX}{middle}{SUFFIX}");
    let (ok, out) = run_python(&source);
    assert!(ok && out.contains("infill ok"), "{source}\n---\n{out}");

    // `suffix` on /v1/completions: the same prompt, so the same greedy middle.
    let (status, body) = post(
        addr,
        "/v1/completions",
        &json!({"prompt": PREFIX, "suffix": SUFFIX, "temperature": 0, "max_tokens": 64}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(text_of(&body), middle);

    // Streamed: the pieces add up to the same text.
    let mut r = common::agent()
        .post(format!("http://{addr}/infill"))
        .content_type("application/json")
        .send(
            json!({"input_prefix": PREFIX, "input_suffix": SUFFIX, "temperature": 0,
                     "max_tokens": 64, "stream": true})
            .to_string(),
        )
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let sse = r.body_mut().read_to_string().expect("body");
    let streamed: String = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| {
            let v: Value = serde_json::from_str(d).expect("chunk");
            v["choices"][0]["text"].as_str().unwrap_or("").to_string()
        })
        .collect();
    assert_eq!(streamed, middle);
}

#[test]
fn the_fim_prompt_is_llama_servers_repository_layout() {
    let addr = start_qwen();
    let tokenize = |text: &str| -> Vec<Value> {
        let (_, t) = post(
            addr,
            "/tokenize",
            &json!({"content": text, "parse_special": true}),
        );
        serde_json::from_str::<Value>(&t).unwrap()["tokens"]
            .as_array()
            .unwrap()
            .clone()
    };
    // The prompt /v1/completions/render shows for a suffix request, spelled out.
    let (status, body) = post(
        addr,
        "/v1/completions/render",
        &json!({"prompt": "def f():\n", "suffix": "\n    return 1\n"}),
    );
    assert_eq!(status, 200, "{body}");
    let got = serde_json::from_str::<Value>(&body).unwrap()["prompt_token_ids"].clone();
    let want = tokenize(
        "<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>def f():\n<|fim_suffix|>\n    return 1\n<|fim_middle|>",
    );
    assert_eq!(got, Value::Array(want));

    // input_extra files come first, each after a file separator and its name; markup in
    // the code is text, not control tokens.
    let (status, body) = post(
        addr,
        "/infill",
        &json!({"input_prefix": "x = ", "input_suffix": "\n",
                "input_extra": [{"filename": "a.py", "text": "A = 1 # <|fim_pad|>\n"}],
                "max_tokens": 1, "temperature": 0}),
    );
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    let plain = |s: &str| {
        let (_, t) = post(
            addr,
            "/tokenize",
            &json!({"content": s, "parse_special": false}),
        );
        serde_json::from_str::<Value>(&t).unwrap()["tokens"]
            .as_array()
            .unwrap()
            .len()
    };
    let expected = 1
        + plain("myproject\n")
        + 1
        + plain("a.py\n")
        + plain("A = 1 # <|fim_pad|>\n")
        + 1
        + plain("filename\n")
        + 1
        + plain("x = ")
        + 1
        + plain("\n")
        + 1;
    assert_eq!(prompt_tokens, expected, "{body}");
}

#[test]
fn a_model_without_fim_tokens_is_refused_naming_them_and_required_fields_are_checked() {
    let smollm = common::start(ServerConfig::default());
    let (status, body) = post(
        smollm,
        "/infill",
        &json!({"input_prefix": "def f():\n", "input_suffix": "\n"}),
    );
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("FIM_PRE") && msg.contains("FIM_SUF") && msg.contains("FIM_MID"),
        "{msg}"
    );
    assert_eq!(v["error"]["param"], "input_prefix");
    let (status, body) = post(
        smollm,
        "/v1/completions",
        &json!({"prompt": "def f():\n", "suffix": "\n"}),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["param"],
        "suffix"
    );
    // An empty suffix is a plain completion.
    let (status, _) = post(
        smollm,
        "/v1/completions",
        &json!({"prompt": "Hello", "suffix": "", "max_tokens": 1}),
    );
    assert_eq!(status, 200);

    let qwen = start_qwen();
    for (body, param) in [
        (json!({"input_suffix": "\n"}), "input_prefix"),
        (json!({"input_prefix": "x"}), "input_suffix"),
        (
            json!({"input_prefix": "x", "input_suffix": "", "n_predict": 2, "max_tokens": 2}),
            "n_predict",
        ),
    ] {
        let (status, text) = post(qwen, "/infill", &body);
        assert_eq!(status, 400, "{body} → {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], param, "{text}");
    }
    let (status, text) = post(
        qwen,
        "/v1/completions",
        &json!({"prompt": [1, 2, 3], "suffix": "\n"}),
    );
    assert_eq!(status, 400, "{text}");
}
