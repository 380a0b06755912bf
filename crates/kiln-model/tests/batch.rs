//! Batched forward passes on a real model (SmolLM2): sequences of different lengths
//! decoded together, with another prompt prefilled in chunks in the same passes, give
//! every row the logits it gets alone, bit for bit; malformed batches are refused.

use std::sync::Arc;

use kiln_model::{BatchSeq, KvOptions, Logits, Model, ModelError, SeqId, Session};

fn model() -> Arc<Model> {
    let path = kiln_hub::resolve("smollm2-135m").expect("smollm2-135m must be available");
    Arc::new(Model::open(path).expect("model loads"))
}

/// A deterministic token stream inside the vocabulary.
fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| {
            1000 + (i
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503))
                >> 7)
                % 20000
        })
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

const STEPS: usize = 6;

/// Greedy decoding of `prompt` alone with [`Session::forward`]: the logits of every step.
fn alone(model: &Arc<Model>, prompt: &[u32]) -> Vec<Vec<u32>> {
    let mut s = Session::new(Arc::clone(model), 128, 64);
    let mut out = Vec::new();
    let mut l = s.forward(prompt, Logits::Last).expect("prompt").to_vec();
    for _ in 0..STEPS {
        out.push(bits(&l));
        let next = argmax(&l);
        l = s.forward(&[next], Logits::Last).expect("decode").to_vec();
    }
    out.push(bits(&l));
    out
}

/// A sequence inside the shared session.
struct Row {
    seq: SeqId,
    prompt: Vec<u32>,
    /// Prompt tokens evaluated so far.
    fed: usize,
    /// Tokens to evaluate this step.
    next: Vec<u32>,
    /// Whether `next` is a chunk of the prompt (else one decoded token).
    prefill: bool,
    logits: Vec<Vec<u32>>,
}

#[test]
fn sequences_decoded_together_get_the_logits_they_get_alone_bit_for_bit() {
    let model = model();
    // 70 tokens: a prompt long enough for the prompt arithmetic of attention, fed in chunks.
    let prompts: Vec<Vec<u32>> = [(3, 1), (17, 2), (40, 3), (9, 4), (33, 5), (70, 6)]
        .iter()
        .map(|&(n, seed)| tokens(n, seed))
        .collect();
    let expected: Vec<Vec<Vec<u32>>> = prompts.iter().map(|p| alone(&model, p)).collect();

    let kv = KvOptions {
        memory: Some(64 << 20),
        ..KvOptions::default()
    };
    let mut s = Session::with_kv(Arc::clone(&model), 128, 64, &kv).expect("session");
    let mut rows: Vec<Row> = prompts
        .iter()
        .map(|p| Row {
            seq: s.new_sequence(),
            prompt: p.clone(),
            fed: 0,
            next: Vec::new(),
            prefill: false,
            logits: Vec::new(),
        })
        .collect();
    // Sequence i joins at step i; its prompt is fed in chunks of at most 7 tokens while
    // the others decode, so passes mix decode rows with prefill chunks.
    for step in 0.. {
        let mut batch = Vec::new();
        let mut members = Vec::new();
        for (i, r) in rows.iter_mut().enumerate() {
            if i > step || r.logits.len() > STEPS {
                continue;
            }
            if r.fed < r.prompt.len() {
                let n = (r.prompt.len() - r.fed).min(7);
                r.next = r.prompt[r.fed..r.fed + n].to_vec();
                r.fed += n;
                r.prefill = true;
            } else {
                r.prefill = false;
            }
            members.push(i);
        }
        if members.is_empty() {
            break;
        }
        for &i in &members {
            let r = &rows[i];
            let prompt_rows = if r.prefill {
                BatchSeq::prompt_rows_of(r.fed - r.next.len(), r.next.len(), r.prompt.len())
            } else {
                0
            };
            batch.push(BatchSeq {
                seq: r.seq,
                tokens: &r.next,
                logits: r.fed == r.prompt.len(),
                prompt_rows,
            });
        }
        let wants: Vec<bool> = batch.iter().map(|b| b.logits).collect();
        let logits = s.forward_batch(&batch).expect("batched pass").to_vec();
        let vocab = model.config().vocab_size;
        assert_eq!(logits.len(), wants.iter().filter(|&&w| w).count() * vocab);
        let mut k = 0;
        for (&i, &want) in members.iter().zip(&wants) {
            if want {
                let l = &logits[k * vocab..(k + 1) * vocab];
                k += 1;
                rows[i].logits.push(bits(l));
                rows[i].next = vec![argmax(l)];
            }
        }
    }
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.logits.len(), STEPS + 1, "sequence {i} ran every step");
        for (step, (got, want)) in r.logits.iter().zip(&expected[i]).enumerate() {
            assert!(
                got == want,
                "sequence {i} (prompt of {} tokens), step {step}: batched logits differ from alone",
                r.prompt.len()
            );
        }
    }
}

#[test]
fn malformed_batches_are_refused_and_keep_no_position() {
    let model = model();
    let kv = KvOptions {
        memory: Some(16 << 20),
        ..KvOptions::default()
    };
    let mut s = Session::with_kv(Arc::clone(&model), 64, 8, &kv).expect("session");
    let a = s.new_sequence();
    let b = s.new_sequence();
    let t = tokens(6, 9);
    let too_many = [
        BatchSeq {
            seq: a,
            tokens: &t,
            logits: true,
            prompt_rows: 0,
        },
        BatchSeq {
            seq: b,
            tokens: &t,
            logits: true,
            prompt_rows: 0,
        },
    ];
    assert!(matches!(
        s.forward_batch(&too_many),
        Err(ModelError::InvalidBatch(_))
    ));
    let twice = [
        BatchSeq {
            seq: a,
            tokens: &t[..2],
            logits: true,
            prompt_rows: 0,
        },
        BatchSeq {
            seq: a,
            tokens: &t[2..4],
            logits: true,
            prompt_rows: 0,
        },
    ];
    assert!(matches!(
        s.forward_batch(&twice),
        Err(ModelError::InvalidBatch(_))
    ));
    let out_of_vocab = [BatchSeq {
        seq: b,
        tokens: &[u32::MAX],
        logits: true,
        prompt_rows: 0,
    }];
    assert!(matches!(
        s.forward_batch(&out_of_vocab),
        Err(ModelError::TokenOutOfRange { .. })
    ));
    assert_eq!(s.seq_len(a).expect("a"), 0);
    assert_eq!(s.seq_len(b).expect("b"), 0);
}
