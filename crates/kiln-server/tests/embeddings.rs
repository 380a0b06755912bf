//! `/v1/embeddings` and `/embedding` on the three real models: every prompt's pooled,
//! normalised embedding has cosine similarity ≥ 0.999 with llama.cpp's `llama-embedding`
//! (fixtures in `tests/fixtures/embeddings`, with the command that made them), for mean,
//! last and cls pooling, or where llama.cpp itself agrees less across its two attention
//! paths (Gemma-3, last pooling), at least as much as llama.cpp does. llama.cpp's attention arithmetic depends on how many query rows a
//! pass has (under 64: f16 query and accumulator), so the same prompt alone and in a batch
//! of six agree only to 0.983 (Qwen2.5-Coder, "Hello, world!", last pooling): the mean and
//! last references are one prompt per run, as a server request is, and Kiln embeds a
//! prompt in the arithmetic llama.cpp gives a prompt of its length (numbers in the
//! fixtures' README). The refusals (no pooling, other dimensions, over-long input) are 400s
//! that name what was wrong; and the official `openai` Python client's
//! `client.embeddings.create` works (needs `pip install openai`; fails without it).

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

use common::post;
use kiln_engine::{Engine, EngineConfig};
use kiln_model::{Model, Pooling};
use kiln_server::{AppState, Backend, ServerConfig};
use kiln_tokenizer::Tokenizer;
use kiln_tokenizer::chat::ChatTemplate;
use serde_json::{Value, json};

const MODELS: &[(&str, usize)] = &[
    ("smollm2-135m", 576),
    ("gemma3-270m", 640),
    ("qwen2.5-coder-0.5b", 896),
];

const N_CTX: usize = 512;

/// Serves `name` (Gemma-3-270M's file has no chat template, so none is required).
fn start(name: &str, pooling: Option<Pooling>) -> SocketAddr {
    let path = kiln_testkit::model_path(name);
    let model = Arc::new(
        Model::open(&path).unwrap_or_else(|e| panic!("cannot load {}: {e}", path.display())),
    );
    let md = model.gguf().expect("a GGUF model").metadata();
    let tokenizer = Arc::new(Tokenizer::from_gguf(md).expect("tokenizer"));
    let template = ChatTemplate::from_gguf(md, &tokenizer)
        .expect("chat template")
        .map(Arc::new);
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = N_CTX;
    cfg.threads = 2;
    let shape = cfg.kv.config(model.config(), 0);
    cfg.kv.memory = Some(shape.blocks_for_tokens(N_CTX) * shape.block_bytes());
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg).expect("engine");
    let state = AppState::ready(
        ServerConfig {
            pooling,
            ..ServerConfig::default()
        },
        Backend {
            engine,
            tokenizer,
            template,
            model_id: name.into(),
            aliases: vec![],
        },
    );
    kiln_testkit::server::serve(state)
}

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/embeddings")
        .join(name)
}

fn prompts() -> Vec<String> {
    let text = std::fs::read_to_string(fixture("prompts.json")).expect("prompts.json");
    serde_json::from_str(&text).expect("prompts.json is a list of strings")
}

/// llama.cpp's vectors for `model` and `pooling`, one per prompt.
fn reference(model: &str, pooling: &str, dim: usize) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(fixture(&format!("{model}.{pooling}.f32"))).expect("fixture");
    let values: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(values.len() % dim, 0, "{model}.{pooling}");
    values.chunks(dim).map(<[f32]>::to_vec).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// The bar: cosine similarity with llama.cpp's vector.
const BAR: f64 = 0.999;

/// The model and pooling pairs on which llama.cpp does not meet [`BAR`] against itself,
/// with its noise floor there: the lowest cosine similarity, over the six prompts, between
/// two of llama.cpp's own vectors for the same prompt and build — flash attention on (the
/// reference) against off, and the prompt alone against the same prompt in the batch of
/// all six (the table in `fixtures/embeddings/README.md`). Gemma-3's last-token states
/// move this much between llama.cpp's attention paths (lowest: prompt 2 alone vs batched,
/// 0.99425; on vs off there 0.99567); such vectors are held to that floor, the others to
/// [`BAR`].
const LLAMA_CPP_NOISE_FLOOR: &[(&str, &str, f64)] = &[("gemma3-270m", "last", 0.99425)];

/// The least cosine similarity a vector must have with llama.cpp's: [`BAR`], or
/// llama.cpp's own noise floor for the model and pooling where that is lower.
fn bar(model: &str, pooling: &str) -> f64 {
    LLAMA_CPP_NOISE_FLOOR
        .iter()
        .find(|&&(m, p, _)| m == model && p == pooling)
        .map_or(BAR, |&(_, _, own)| own.min(BAR))
}

fn vector(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("an embedding is an array")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

#[test]
fn pooled_embeddings_match_llama_cpp_on_every_prompt_of_the_three_models() {
    let prompts = prompts();
    assert_eq!(prompts.len(), 6);
    let mut worst = f64::INFINITY;
    let mut below = Vec::new();
    for &(model, dim) in MODELS {
        for pooling in [Pooling::Mean, Pooling::Last, Pooling::Cls] {
            let want = reference(model, pooling.name(), dim);
            assert_eq!(want.len(), prompts.len(), "{model}.{}", pooling.name());
            let addr = start(model, Some(pooling));
            let (status, text) = post(addr, "/v1/embeddings", &json!({"input": prompts}));
            assert_eq!(status, 200, "{model} {}: {text}", pooling.name());
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["object"], "list");
            assert_eq!(v["model"], model);
            let data = v["data"].as_array().unwrap();
            assert_eq!(data.len(), prompts.len());
            for (i, (d, want)) in data.iter().zip(&want).enumerate() {
                assert_eq!(d["object"], "embedding");
                assert_eq!(d["index"], i);
                let got = vector(&d["embedding"]);
                assert_eq!(got.len(), dim, "{model}");
                let cos = cosine(&got, want);
                println!("{model} {} prompt {i}: cosine {cos:.6}", pooling.name());
                let bar = bar(model, pooling.name());
                if cos < bar {
                    below.push(format!(
                        "{model} {} prompt {i} ({:?}): cosine {cos} with llama.cpp, bar {bar}",
                        pooling.name(),
                        prompts[i]
                    ));
                }
                worst = worst.min(cos);
            }
            assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
        }
    }
    println!("lowest cosine similarity with llama.cpp: {worst:.6}");
    assert!(below.is_empty(), "below the bar:\n{}", below.join("\n"));
}

#[test]
fn a_model_without_pooling_is_refused_by_v1_embeddings_and_gives_token_vectors_on_embedding() {
    let addr = start("smollm2-135m", None);
    let (status, text) = post(addr, "/v1/embeddings", &json!({"input": "Hello"}));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("--pooling"), "{text}");
    let (status, ids) = post(
        addr,
        "/tokenize",
        &json!({"content": "Hello, world!", "add_special": true}),
    );
    assert_eq!(status, 200);
    let n_tokens = serde_json::from_str::<Value>(&ids).unwrap()["tokens"]
        .as_array()
        .unwrap()
        .len();
    let (status, text) = post(addr, "/embedding", &json!({"content": "Hello, world!"}));
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let rows = v[0]["embedding"].as_array().unwrap();
    assert_eq!(rows.len(), n_tokens, "one vector per token");
    assert!(rows.iter().all(|r| r.as_array().unwrap().len() == 576));
}

#[test]
fn base64_dimensions_and_limits_answer_as_documented() {
    let addr = start("smollm2-135m", Some(Pooling::Last));
    let (_, text) = post(
        addr,
        "/v1/embeddings",
        &json!({"input": "Hello", "encoding_format": "float", "dimensions": 576, "user": "u"}),
    );
    let floats = vector(&serde_json::from_str::<Value>(&text).unwrap()["data"][0]["embedding"]);
    let (status, text) = post(
        addr,
        "/v1/embeddings",
        &json!({"input": "Hello", "encoding_format": "base64"}),
    );
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let b64 = v["data"][0]["embedding"].as_str().expect("a base64 string");
    let decoded = decode_base64(b64);
    let from_b64: Vec<f32> = decoded
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(from_b64, floats);

    // Token ids are embedded as given; the text's ids give the same vector.
    let (_, ids) = post(
        addr,
        "/tokenize",
        &json!({"content": "Hello", "add_special": true}),
    );
    let ids = serde_json::from_str::<Value>(&ids).unwrap()["tokens"].clone();
    let (_, text) = post(addr, "/v1/embeddings", &json!({"input": [ids]}));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(vector(&v["data"][0]["embedding"]), floats);

    let refusals = [
        (
            json!({"input": "Hello", "dimensions": 64}),
            "dimensions",
            "576",
        ),
        (
            json!({"input": "Hello", "encoding_format": "hex"}),
            "encoding_format",
            "base64",
        ),
        (json!({"input": []}), "input", "empty"),
        (json!({"input": [[]]}), "input", "no tokens"),
        (json!({"input": [[999999]]}), "input", "vocabulary"),
        (
            json!({"input": vec![1u32; N_CTX + 1]}),
            "input",
            &format!("at most {N_CTX}"),
        ),
        (
            json!({"input": "Hello", "embd_normalize": -2}),
            "embd_normalize",
            "-1",
        ),
        (json!({}), "input", "required"),
    ];
    for (body, param, says) in refusals {
        let (status, text) = post(addr, "/v1/embeddings", &body);
        assert_eq!(status, 400, "{body} → {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], param, "{body} → {text}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{body} → {text}"
        );
    }
}

#[test]
fn the_openai_python_client_creates_embeddings() {
    let addr = start("qwen2.5-coder-0.5b", Some(Pooling::Last));
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_embeddings.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(format!("http://{addr}"))
        .arg("qwen2.5-coder-0.5b")
        .arg("896")
        .output()
        .expect("python3 is required by this test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the openai client failed (needs `pip install openai`)\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("openai embeddings: ok"),
        "stdout:\n{stdout}"
    );
}

fn decode_base64(s: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).expect("base64") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
