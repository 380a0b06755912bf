//! The kernels sum in one canonical order whatever the instruction set (kiln-quant's
//! `scalar::lanes` documents it), so `KILN_ISA=scalar` and every SIMD path must give the
//! same logits bit for bit, hence the same greedy tokens, on the three real models.
//!
//! The ISA is chosen once per process, so each (model, ISA) pair runs in a child process of
//! this test binary: [`isa_child_process_entry`] does the work when the child's environment
//! variable is set (and nothing otherwise), and prints a digest — the greedy tokens and a
//! hash of the bits of every logit vector — that the parent compares.

use std::process::Command;
use std::sync::Arc;

use kiln_model::{Logits, Model, Session};
use kiln_quant::{Isa, available_isas};
use serde_json::Value;

const CHILD_ENV: &str = "KILN_ISA_INVARIANCE_MODEL";
const MODELS: &[(&str, &str)] = &[
    ("smollm2-135m", "smollm2"),
    ("gemma3-270m", "gemma3"),
    ("qwen2.5-coder-0.5b", "qwen2.5"),
];
/// Greedy tokens generated after the prompt.
const N_GEN: usize = 3;

/// The first reference prompt's tokens (llama.cpp's tokenization) for a model.
fn prompt_tokens(reference: &str) -> Vec<u32> {
    let path = format!(
        "{}/../../testdata/ref/{reference}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let refs: Value = serde_json::from_str(&text).expect("reference JSON");
    refs["results"][0]["prompt_tokens"]
        .as_array()
        .expect("prompt_tokens")
        .iter()
        .map(|v| v.as_u64().expect("token id") as u32)
        .collect()
}

/// FNV-1a over the bits of a logit vector, folded into `h`.
fn fold_bits(h: u64, logits: &[f32]) -> u64 {
    logits.iter().fold(h, |h, v| {
        v.to_bits()
            .to_le_bytes()
            .iter()
            .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    })
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Child side: prompt, then `N_GEN` greedy steps (batched prompt, then single tokens, so both
/// the GEMM and the GEMV paths run), on two threads.
#[test]
fn isa_child_process_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // not a child: the parent test below does the work
    };
    let (name, reference) = MODELS
        .iter()
        .find(|(n, _)| *n == spec)
        .expect("known model");
    let path = kiln_hub::resolve(name).unwrap_or_else(|e| panic!("model {name}: {e}"));
    let model = Arc::new(Model::open(&path).expect("model loads"));
    let prompt = prompt_tokens(reference);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let (tokens, hash) = pool.install(|| {
        let mut s = Session::new(Arc::clone(&model), prompt.len() + N_GEN + 1, 64);
        let mut logits = s.forward(&prompt, Logits::Last).expect("prompt").to_vec();
        let mut hash = fold_bits(0xcbf2_9ce4_8422_2325, &logits);
        let mut tokens = Vec::new();
        for _ in 0..N_GEN {
            let t = argmax(&logits);
            tokens.push(t);
            logits = s.forward(&[t], Logits::Last).expect("step").to_vec();
            hash = fold_bits(hash, &logits);
        }
        (tokens, hash)
    });
    println!(
        "DIGEST isa={} tokens={tokens:?} logits={hash:016x}",
        kiln_quant::active_isa()
    );
}

fn digest(model: &str, isa: Isa) -> String {
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args([
            "--exact",
            "isa_child_process_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, model)
        .env("KILN_ISA", isa.name())
        .output()
        .expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{model} under KILN_ISA={isa} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness prints the test's name on the same line before the test's own output.
    let line = stdout
        .lines()
        .find_map(|l| l.find("DIGEST ").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("{model} under {isa}: no digest in\n{stdout}"));
    assert!(line.contains(&format!("isa={isa} ")), "child ran {line}");
    line.split_once(' ')
        .map(|(_, rest)| rest.replacen(&format!("isa={isa} "), "", 1))
        .unwrap_or_default()
}

#[test]
fn every_isa_gives_the_scalar_logits_bit_for_bit_on_the_real_models() {
    let isas = available_isas();
    assert!(isas.contains(&Isa::Scalar));
    #[cfg(target_arch = "x86_64")]
    assert!(
        isas.len() > 1 || !Isa::Avx2.cpu_has(),
        "only scalar kernels available on an AVX2 machine: nothing to compare"
    );
    for (model, _) in MODELS {
        let want = digest(model, Isa::Scalar);
        for &isa in isas.iter().filter(|&&i| i != Isa::Scalar) {
            let got = digest(model, isa);
            assert_eq!(got, want, "{model}: {isa} differs from scalar");
        }
    }
}
