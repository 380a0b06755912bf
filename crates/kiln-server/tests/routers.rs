//! What a router in front of many replicas reads and calls, over real HTTP on 127.0.0.1
//! with SmolLM2-135M: `/metrics` parsed by `prometheus_client`'s text parser in Python (as
//! routers parse it) with vLLM's names, and a scrape that never waits for a scheduler step;
//! the render endpoints give the token ids generation uses; `/health/live`, `/v1/models`;
//! the shutdown delay keeps serving while `/health` sends routers elsewhere; KV-cache events
//! reach an independent pyzmq + msgpack subscriber in vLLM's format.
//! The Python checks need `pip install prometheus_client pyzmq msgpack`; without them they
//! fail, naming them.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_engine::{Engine, EngineConfig};
use kiln_server::{AppState, Backend, MetricsCompat, ServerConfig};
use kiln_testkit::server::Loaded;
use serde_json::{Value, json};

/// A served model with its engine (for comparisons against it).
struct Server {
    addr: SocketAddr,
    engine: Engine,
    tokenizer: Arc<kiln_tokenizer::Tokenizer>,
}

/// A 512-token context with KV room for 8 of them, 16-token blocks.
fn start(config: ServerConfig, tweak: impl FnOnce(&mut EngineConfig)) -> Server {
    let Loaded {
        model,
        tokenizer,
        template,
    } = kiln_testkit::server::load("smollm2-135m");
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = 512;
    cfg.threads = 2;
    let shape = cfg.kv.config(model.config(), 0);
    cfg.kv.memory = Some(shape.blocks_for_tokens(512) * 8 * shape.block_bytes());
    tweak(&mut cfg);
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    let state = AppState::ready(
        config,
        Backend {
            engine: engine.clone(),
            tokenizer: Arc::clone(&tokenizer),
            template: Some(template),
            model_id: "smollm2-135m".into(),
            aliases: vec!["smollm2".into()],
        },
    );
    Server {
        addr: kiln_testkit::server::serve(state),
        engine,
        tokenizer,
    }
}

fn post_json(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = common::post(addr, path, body);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, v)
}

/// Runs `tests/python/<script>` with `args`, `stdin` on its standard input; returns its
/// standard output, or panics with its standard error.
fn python(script: &str, args: &[&str], stdin: &str) -> String {
    use std::io::Write;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let mut child = Command::new("python3")
        .arg(&path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run python3 (needed by {script}): {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("python3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed ({}); it needs `pip install prometheus_client pyzmq msgpack`:\n{stderr}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A prompt of a few hundred tokens: many whole blocks to share.
fn long_prompt() -> String {
    "You are a careful assistant who answers questions about the history of bridges, \
     rivers and the towns that grew around them. "
        .repeat(6)
}

#[test]
fn metrics_parse_strictly_with_vllm_names_types_ranges_and_labels() {
    let s = start(ServerConfig::default(), |_| {});
    let prefix = long_prompt();
    for tail in ["Tell me about Paris.", "Tell me about Rome."] {
        let (status, v) = post_json(
            s.addr,
            "/v1/completions",
            &json!({"prompt": format!("{prefix}{tail}"), "max_tokens": 2, "temperature": 0}),
        );
        assert_eq!(status, 200, "{v}");
    }
    let (status, text) = common::get(s.addr, "/metrics");
    assert_eq!(status, 200);
    // The second prompt shares at least 5 whole 16-token blocks with the first.
    let out = python("check_metrics.py", &["smollm2-135m", "80"], &text);
    assert!(out.starts_with("ok:"), "{out}");
    // The engine's own view agrees with the published one.
    let m = s.engine.metrics();
    assert!(m.prefix_tokens_saved >= 80, "{m:?}");
    assert!(m.prefix_query_tokens > m.prefix_tokens_saved, "{m:?}");
}

#[test]
fn metrics_compat_none_publishes_only_kilns_names() {
    let s = start(
        ServerConfig {
            metrics_compat: MetricsCompat::None,
            ..ServerConfig::default()
        },
        |_| {},
    );
    let (status, text) = common::get(s.addr, "/metrics");
    assert_eq!(status, 200);
    assert!(!text.contains("vllm:"), "{text}");
    assert!(text.contains("kiln_kv_cache_usage_ratio "), "{text}");
}

#[test]
fn metrics_answer_at_once_while_the_engine_is_saturated() {
    // Whole 512-token prefill chunks with no step target: steps of a few hundred ms each
    // on this model, while the queue stays full.
    let s = start(ServerConfig::default(), |c| {
        c.max_batch_tokens = 512;
        c.step_target_ms = 0.0;
        c.max_running = 4;
    });
    let prompt = long_prompt().repeat(2);
    let addr = s.addr;
    let load: Vec<_> = (0..8)
        .map(|i| {
            let prompt = format!("{i} {prompt}");
            std::thread::spawn(move || {
                post_json(
                    addr,
                    "/v1/completions",
                    &json!({"prompt": prompt, "max_tokens": 24, "temperature": 0}),
                )
            })
        })
        .collect();
    // Wait until the engine is busy.
    let busy = Instant::now();
    while s.engine.metrics().running == 0 {
        assert!(
            busy.elapsed() < Duration::from_secs(60),
            "engine never busy"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut times = Vec::new();
    let steps_before = s.engine.metrics().steps;
    while times.len() < 40 && load.iter().any(|h| !h.is_finished()) {
        let t = Instant::now();
        let (status, text) = common::get(addr, "/metrics");
        times.push(t.elapsed());
        assert_eq!(status, 200);
        assert!(text.contains("vllm:num_requests_running{"), "{text}");
    }
    let steps = s.engine.metrics().steps - steps_before;
    for h in load {
        let (status, v) = h.join().expect("client");
        assert_eq!(status, 200, "{v}");
    }
    times.sort();
    let p99 = times[(times.len() * 99).div_ceil(100) - 1];
    let step = s.engine.metrics().step_seconds.sum / s.engine.metrics().steps.max(1) as f64;
    // Many scrapes per step: none of them waited for a step to end.
    assert!(times.len() >= 10, "only {} scrapes", times.len());
    assert!(
        (times.len() as u64) > steps,
        "{} scrapes over {steps} steps: scrapes wait for steps",
        times.len()
    );
    assert!(
        p99.as_secs_f64() < 0.05_f64.max(step / 2.0),
        "scrape p99 {p99:?} with steps of {step:.3} s"
    );
}

/// Greedy text of a request (`max_tokens` 12).
fn greedy(addr: SocketAddr, path: &str, mut body: Value) -> String {
    body["max_tokens"] = json!(12);
    body["temperature"] = json!(0);
    let (status, v) = post_json(addr, path, &body);
    assert_eq!(status, 200, "{v}");
    let c = &v["choices"][0];
    c["text"]
        .as_str()
        .or_else(|| c["message"]["content"].as_str())
        .expect("text")
        .to_string()
}

fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v["prompt_token_ids"].clone()).expect("prompt_token_ids")
}

#[test]
fn render_gives_the_token_ids_generation_uses() {
    let s = start(ServerConfig::default(), |_| {});
    // Completions: the ids are the tokenizer's, and generating from them as ids gives the
    // same text as generating from the text.
    let text = "The capital of France is";
    let (status, v) = post_json(
        s.addr,
        "/v1/completions/render",
        &json!({"model": "smollm2", "prompt": text, "max_tokens": 4}),
    );
    assert_eq!(status, 200, "{v}");
    let rendered = ids(&v);
    assert_eq!(rendered, s.tokenizer.encode(text, true, true).unwrap());
    assert_eq!(v["prompts"][0]["num_tokens"], rendered.len());
    assert_eq!(
        greedy(s.addr, "/v1/completions", json!({"prompt": text})),
        greedy(s.addr, "/v1/completions", json!({"prompt": rendered}))
    );
    // Several prompts: one entry each, in order.
    let (_, v) = post_json(
        s.addr,
        "/v1/completions/render",
        &json!({"prompt": ["a b", "c"], "n": 2}),
    );
    assert_eq!(v["prompts"].as_array().map(Vec::len), Some(2), "{v}");

    // Chat: generating from the rendered ids through /v1/completions gives the chat's text
    // (and prompt token count).
    let chat = json!({"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a colour."}
    ]});
    let (status, v) = post_json(s.addr, "/v1/chat/completions/render", &chat);
    assert_eq!(status, 200, "{v}");
    let rendered = ids(&v);
    assert_eq!(
        greedy(s.addr, "/v1/chat/completions", chat.clone()),
        greedy(s.addr, "/v1/completions", json!({"prompt": rendered}))
    );
    let mut one = chat.clone();
    one["max_tokens"] = json!(1);
    let (_, v) = post_json(s.addr, "/v1/chat/completions", &one);
    assert_eq!(v["usage"]["prompt_tokens"], rendered.len(), "{v}");

    // Refusals are generation's: the same status, type and param.
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": text, "max_tokens": 600}),
        ),
        ("/v1/chat/completions", json!({"messages": []})),
        ("/v1/completions", json!({"prompt": text, "model": "other"})),
        ("/v1/completions", json!({"prompt": text, "echo": true})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hi"}], "audio": {}}),
        ),
    ] {
        let (a, va) = post_json(s.addr, path, &body);
        let (b, vb) = post_json(s.addr, &format!("{path}/render"), &body);
        assert_eq!(
            (a, &va["error"]["param"]),
            (b, &vb["error"]["param"]),
            "{va} {vb}"
        );
        assert!(a >= 400, "{va}");
    }
    // Nothing was generated by a render.
    assert_eq!(s.engine.metrics().kv_blocks_used, 0);
}

#[test]
fn models_list_aliases_with_the_context_length_and_liveness_is_always_200() {
    let s = start(ServerConfig::default(), |_| {});
    let (status, body) = common::get(s.addr, "/v1/models");
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    let data = v["data"].as_array().expect("data");
    let ids: Vec<&str> = data.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, ["smollm2-135m", "smollm2"]);
    for c in data {
        assert_eq!(c["max_model_len"], 512, "{c}");
        assert_eq!(c["root"], "smollm2-135m", "{c}");
        assert_eq!(c["object"], "model", "{c}");
    }
    assert_eq!(data[1]["parent"], "smollm2-135m");
    let (status, body) = common::get(s.addr, "/health/live");
    assert_eq!((status, body.as_str()), (200, r#"{"status":"alive"}"#));
}

/// The server on a free port with a shutdown the test triggers.
fn start_with_shutdown(
    config: ServerConfig,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let Loaded {
        model,
        tokenizer,
        template,
    } = kiln_testkit::server::load("smollm2-135m");
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = 512;
    cfg.threads = 2;
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    let state = AppState::ready(
        config,
        Backend {
            engine,
            tokenizer,
            template: Some(template),
            model_id: "smollm2-135m".into(),
            aliases: Vec::new(),
        },
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            addr_tx
                .send(listener.local_addr().expect("addr"))
                .expect("send");
            kiln_server::run(listener, state, async {
                let _ = stop_rx.await;
            })
            .await
            .expect("serve");
        });
    });
    (addr_rx.recv().expect("address"), stop_tx, thread)
}

#[test]
fn during_the_shutdown_delay_health_is_503_and_every_request_is_still_served() {
    let delay = Duration::from_secs(3);
    let (addr, stop, server) = start_with_shutdown(ServerConfig {
        shutdown_delay: delay,
        drain_timeout: Duration::from_secs(60),
        ..ServerConfig::default()
    });
    let request = move || {
        post_json(
            addr,
            "/v1/completions",
            &json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
                    "ignore_eos": true}),
        )
    };
    let (status, reference) = request();
    assert_eq!(status, 200, "{reference}");
    // Requests running when the signal comes.
    let before: Vec<_> = (0..4).map(|_| std::thread::spawn(request)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let signalled = Instant::now();
    stop.send(()).expect("signal");
    std::thread::sleep(Duration::from_millis(100));
    let (status, body) = common::get(addr, "/health");
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"status":"shutting_down"}"#)
    );
    assert_eq!(common::get(addr, "/health/live").0, 200);
    // Requests a router sends before it notices: accepted and answered in full.
    let mut during = Vec::new();
    while signalled.elapsed() + Duration::from_millis(800) < delay {
        during.push(std::thread::spawn(request));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(during.len() >= 5, "{} requests in the delay", during.len());
    for h in before.into_iter().chain(during) {
        let (status, v) = h.join().expect("client");
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["text"], reference["choices"][0]["text"]);
        assert_eq!(v["usage"]["completion_tokens"], 24, "{v}");
    }
    server.join().expect("server thread");
    assert!(
        signalled.elapsed() >= delay,
        "the server stopped {:?} after the signal, before its delay of {delay:?}",
        signalled.elapsed()
    );
}

#[test]
fn kv_events_reach_a_pyzmq_subscriber_parents_first_and_removals_name_stored_blocks() {
    use std::io::{BufRead, BufReader};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let endpoint = format!("tcp://127.0.0.1:{port}");
    let topic = "kv@127.0.0.1@smollm2-135m";
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/check_kv_events.py");
    let mut sub = Command::new("python3")
        .arg(&script)
        .args([endpoint.as_str(), topic, "16"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (needs `pip install pyzmq msgpack`)");
    let mut lines = BufReader::new(sub.stdout.take().expect("stdout")).lines();
    let ready = lines.next().and_then(Result::ok).unwrap_or_default();
    if ready != "ready" {
        let out = sub.wait_with_output().expect("python3");
        panic!(
            "the subscriber did not start (needs `pip install pyzmq msgpack`): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A pool of 24 blocks of 16 tokens: eight distinct ~100-token prompts in turn evict.
    let Loaded {
        model, tokenizer, ..
    } = kiln_testkit::server::load("smollm2-135m");
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = 128;
    cfg.threads = 2;
    let shape = cfg.kv.config(model.config(), 0);
    cfg.kv.memory = Some(24 * shape.block_bytes());
    cfg.kv_events = Some(64);
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    kiln_server::kv_events::start(
        engine.kv_events().expect("events asked for"),
        kiln_server::kv_events::KvEventsConfig {
            endpoint: endpoint.clone(),
            topic: topic.into(),
            encoding: kiln_server::kv_events::KvEventEncoding::Array,
        },
    )
    .expect("publisher");
    // Time for the subscription to reach the publisher (a PUB socket drops what it sends
    // before): a missed store would make its later removal look unknown.
    std::thread::sleep(Duration::from_secs(1));
    let run = |i: usize| {
        let text = format!("Story number {i}: {}", &long_prompt()[..300]);
        let ids = tokenizer.encode(&text, true, true).unwrap();
        let h = engine
            .submit(kiln_engine::Request::greedy(ids, 2))
            .expect("submit");
        while let Some(ev) = h.recv() {
            if let kiln_engine::Event::Error(e) = ev {
                panic!("{e}");
            }
        }
    };
    for i in 0..8 {
        run(i);
    }
    run(0);
    let m = engine.metrics();
    let out = sub.wait_with_output().expect("python3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the subscriber failed: {stderr}");
    let summary: Value = lines
        .next()
        .and_then(Result::ok)
        .and_then(|l| serde_json::from_str(&l).ok())
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    // The pool holds 24 blocks, so all but 24 of the stored blocks must have been removed.
    let stored = summary["stored"].as_u64().unwrap_or(0);
    assert!(stored > 24, "{summary}");
    assert!(
        summary["removed"].as_u64().unwrap_or(0) >= stored - 24,
        "{summary}"
    );
    assert_eq!(m.kv_event_batches_dropped, 0);
}

#[test]
fn deploy_manifests_and_dockerfile_have_the_structure_kubernetes_and_routers_need() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .arg(root.join("deploy/check_deploy.py"))
        .arg(&root)
        .output()
        .expect("python3 (needs `pip install pyyaml`)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}
