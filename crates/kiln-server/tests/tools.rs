//! Tool calling through the official `openai` Python client against Qwen2.5-Coder: a call,
//! its result, and the answer, with `tool_choice` auto and required, streamed and not; and
//! 20 seeded sampled runs with `required` whose arguments validate against the schema.
//! Needs `python3` with `pip install openai jsonschema`; fails (never skips) without them.

use std::process::Command;
use std::sync::Arc;

use kiln_engine::{Engine, EngineConfig};
use kiln_server::{AppState, Backend, ServerConfig};
use kiln_testkit::server::Loaded;

const MODEL: &str = "qwen2.5-coder-0.5b";

#[test]
fn the_openai_client_runs_a_tool_calling_loop_and_required_arguments_always_validate() {
    let Loaded {
        model,
        tokenizer,
        template,
    } = kiln_testkit::server::load(MODEL);
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = 2048;
    cfg.threads = 2;
    let shape = cfg.kv.config(model.config(), 0);
    cfg.kv.memory = Some(shape.blocks_for_tokens(2048) * 2 * shape.block_bytes());
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    let state = AppState::ready(
        ServerConfig::default(),
        Backend {
            engine,
            tokenizer,
            template: Some(template),
            model_id: MODEL.into(),
            aliases: Vec::new(),
        },
    );
    let addr = kiln_testkit::server::serve(state);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/openai_tools.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(format!("http://{addr}"))
        .arg(MODEL)
        .output()
        .expect("python3 is required by this test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the openai client loop failed (needs `pip install openai jsonschema`)\n\
         stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("schema-valid arguments: 20/20"),
        "stdout:\n{stdout}"
    );
    println!("{stdout}");
}
