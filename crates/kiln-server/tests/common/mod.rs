//! A SmolLM2-135M server on a free loopback port, and blocking HTTP helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::{Engine, EngineConfig};
use kiln_server::{AppState, Backend, ServerConfig};
use kiln_testkit::server::Loaded;
use serde_json::Value;

/// A 256-token context with KV room for 4 of them.
pub fn start(config: ServerConfig) -> SocketAddr {
    let Loaded {
        model,
        tokenizer,
        template,
    } = kiln_testkit::server::load("smollm2-135m");
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = 256;
    cfg.threads = 2;
    let shape = cfg.kv.config(model.config(), 0);
    cfg.kv.memory = Some(shape.blocks_for_tokens(256) * 4 * shape.block_bytes());
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    let state = AppState::ready(
        config,
        Backend {
            engine,
            tokenizer,
            template: Some(template),
            model_id: "smollm2-135m".into(),
            aliases: vec![],
        },
    );
    kiln_testkit::server::serve(state)
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
