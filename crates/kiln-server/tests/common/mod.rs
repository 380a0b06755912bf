//! A SmolLM2-135M (or any shipped model's) server on a free loopback port, blocking HTTP
//! helpers, the request-field table walk, and the runner of the Python client scripts.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::{Engine, EngineConfig};
use kiln_server::fields::{self, Endpoint, Status};
use kiln_server::{AppState, Backend, ServerConfig};
use kiln_testkit::server::Loaded;
use serde_json::Value;

/// A 256-token context with KV room for 4 of them.
pub fn start(config: ServerConfig) -> SocketAddr {
    start_with_context(config, 256)
}

/// An `n_ctx`-token context with KV room for 4 of them.
pub fn start_with_context(config: ServerConfig, n_ctx: usize) -> SocketAddr {
    start_model("smollm2-135m", config, n_ctx, 4)
}

/// `model` (a shipped model's name, also the served id) with an `n_ctx`-token context and
/// KV room for `sequences` of them.
pub fn start_model(
    model_id: &str,
    config: ServerConfig,
    n_ctx: usize,
    sequences: usize,
) -> SocketAddr {
    let Loaded {
        model,
        tokenizer,
        template,
    } = kiln_testkit::server::load(model_id);
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = n_ctx;
    cfg.threads = 2;
    let shape = cfg.kv.config(model.config(), 0);
    cfg.kv.memory = Some(shape.blocks_for_tokens(n_ctx) * sequences * shape.block_bytes());
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    let state = AppState::ready(
        config,
        Backend {
            engine,
            tokenizer,
            template: Some(template),
            model_id: model_id.into(),
            aliases: vec![],
        },
    );
    kiln_testkit::server::serve(state)
}

/// Runs `tests/clients/SCRIPT` with `args`; it must succeed and print `marker`. Returns
/// its output. Python and the script's packages (`needs`) are required: a missing one
/// fails the test, never skips it.
pub fn run_client(script: &str, args: &[String], needs: &str, marker: &str) -> String {
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .expect("python3 is required by this test");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed (needs `pip install {needs}`)\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains(marker), "stdout:\n{stdout}");
    stdout
}

/// Sends every row of the request-field table of `endpoints` (its example value added to
/// the endpoint's `base` body): honoured and no-op rows must answer 200, refused rows 400,
/// whose body `refused` checks (endpoint, field, body). Returns how many rows were sent.
pub fn send_field_table(
    addr: SocketAddr,
    endpoints: &[Endpoint],
    base: fn(Endpoint) -> (&'static str, Value),
    refused: impl Fn(Endpoint, &str, &str),
) -> usize {
    let mut checked = 0;
    for &e in endpoints {
        let (path, base) = base(e);
        for f in fields::of(e) {
            let mut body = base.clone();
            body[f.name] = serde_json::from_str(f.example).expect("the example is JSON");
            if f.name == "top_logprobs" {
                body["logprobs"] = serde_json::json!(true);
            }
            let (status, text) = post(addr, path, &body);
            match f.status {
                Status::Honoured | Status::NoOp => {
                    assert_eq!(status, 200, "{e:?} {}: {body} → {text}", f.name);
                }
                Status::Refused => {
                    assert_eq!(status, 400, "{e:?} {}: {body} → {text}", f.name);
                    refused(e, f.name, &text);
                }
            }
            checked += 1;
        }
    }
    checked
}

/// A client that returns every status as a response, with a 2-minute limit per request.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, String) {
    let mut r = agent()
        .post(format!("http://{addr}{path}"))
        .content_type("application/json")
        .send(body.to_string())
        .expect("request");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().expect("body"))
}

pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut r = agent()
        .get(format!("http://{addr}{path}"))
        .call()
        .expect("request");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().expect("body"))
}
