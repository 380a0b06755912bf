//! After warm-up, a decode step of a [`Session`] allocates nothing on the heap: a counting
//! global allocator over whole steps (embedding, every layer, KV cache, attention, head),
//! on a llama model (SmolLM2) and a Gemma 3 model (sliding-window and global layers with
//! their two RoPE bases, per-head Q/K norms, post-norms), and on mixture-of-experts
//! fixtures, with two threads; and a batched decode step of fewer sequences than the
//! warm-up's (sequences finishing, drafts running out), whose smaller pass takes other
//! paths than the larger one.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_model::{BatchSeq, KvOptions, Logits, Model, SeqId, Session};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The most likely next token, without allocating.
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Held by each test: the allocator counts every thread of the process, so nothing else
/// may run while a test counts.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The two-thread pool every test runs in. One pool for every model: a pool dropped after
/// one model would wind its threads down (and they may allocate doing so) while the next
/// model's steps are counted.
fn pool() -> &'static rayon::ThreadPool {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool")
    })
}

/// Warms a session up (a prompt, then decode steps), then counts the allocations of
/// `steps` more decode steps; they cross a KV page boundary (16 tokens).
fn allocations_of_decode_steps(name: &str, steps: usize) -> usize {
    let path = kiln_hub::resolve(name).unwrap_or_else(|e| panic!("model {name}: {e}"));
    allocations_of_decode_steps_at(&path, steps)
}

/// [`allocations_of_decode_steps`] for the model at `path`.
fn allocations_of_decode_steps_at(path: &std::path::Path, steps: usize) -> usize {
    let model = Arc::new(Model::open(path).expect("model loads"));
    // The whole run inside the pool: rayon's jobs then go through its workers' own queues
    // (a call from outside the pool injects each job through a shared queue that allocates
    // now and then).
    pool().install(|| {
        let mut s = Session::new(model, 256, 32);
        let prompt: Vec<u32> = (1..12).collect();
        let mut next = argmax(s.forward(&prompt, Logits::Last).expect("prompt"));
        for _ in 0..8 {
            next = argmax(s.forward(&[next], Logits::Last).expect("warm-up step"));
        }
        let before = ALLOCS.load(Ordering::Relaxed);
        for _ in 0..steps {
            next = argmax(s.forward(&[next], Logits::Last).expect("decode step"));
        }
        ALLOCS.load(Ordering::Relaxed) - before
    })
}

// Models one after the other.
#[test]
fn a_decode_step_allocates_nothing_after_warm_up_on_llama_gemma3_and_mixtures_of_experts() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let steps = 24;
    for name in ["smollm2-135m", "gemma3-270m"] {
        let n = allocations_of_decode_steps(name, steps);
        assert_eq!(n, 0, "{name}: {n} allocations in {steps} decode steps");
    }
    // Mixtures of experts (a decode step routes to experts it has not run before, so its
    // buffers must not depend on which): 3-D GGUF experts, and per-expert safetensors with a
    // shared expert.
    let tiny = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/hf-tiny/");
    for rel in ["qwen3moe/model-f32.gguf", "qwen2moe"] {
        let path = std::path::PathBuf::from(tiny).join(rel);
        let n = allocations_of_decode_steps_at(&path, steps);
        assert_eq!(n, 0, "{rel}: {n} allocations in {steps} decode steps");
    }
}

/// Sequences of the batched warm-up.
const WIDE: usize = 12;

/// One batched decode step of the first `k` of `seqs`, each fed its `next` token, which
/// becomes the step's most likely one (without allocating: the rows live on the stack).
fn batch_step(s: &mut Session, seqs: &[SeqId; WIDE], next: &mut [u32; WIDE], k: usize) {
    let mut picked = [0u32; WIDE];
    {
        let tokens = *next;
        let mut rows = [BatchSeq {
            seq: seqs[0],
            tokens: &[],
            logits: true,
            prompt_rows: 0,
        }; WIDE];
        for (i, r) in rows.iter_mut().enumerate().take(k) {
            r.seq = seqs[i];
            r.tokens = std::slice::from_ref(&tokens[i]);
        }
        let logits = s.forward_batch(&rows[..k]).expect("batched decode step");
        let vocab = logits.len() / k;
        for (i, p) in picked.iter_mut().enumerate().take(k) {
            *p = argmax(&logits[i * vocab..(i + 1) * vocab]);
        }
    }
    next[..k].copy_from_slice(&picked[..k]);
}

/// Warms a session up with `WIDE` sequences (their prompts, then batched decode steps of
/// all of them: more tokens per pass than the fused small-batch path takes), then counts
/// the allocations of decode steps of fewer of them (8, 3, then 1 sequence), each shape
/// for the first time; the first sequence crosses a KV page boundary (16 tokens) in the
/// warm-up and again in the counted steps.
fn allocations_of_narrower_batch_steps(name: &str) -> usize {
    let path = kiln_hub::resolve(name).unwrap_or_else(|e| panic!("model {name}: {e}"));
    let model = Arc::new(Model::open(path).expect("model loads"));
    pool().install(|| {
        let kv = KvOptions {
            memory: Some(64 << 20),
            ..KvOptions::default()
        };
        let mut s = Session::with_kv(model, 128, 64, &kv).expect("session");
        let seqs: [SeqId; WIDE] = std::array::from_fn(|_| s.new_sequence());
        let prompts: Vec<Vec<u32>> = (0..WIDE as u32).map(|i| (1 + i..4 + i).collect()).collect();
        let mut next = [0u32; WIDE];
        {
            let rows: Vec<BatchSeq> = seqs
                .iter()
                .zip(&prompts)
                .map(|(&seq, p)| BatchSeq {
                    seq,
                    tokens: p,
                    logits: true,
                    prompt_rows: 0,
                })
                .collect();
            let logits = s.forward_batch(&rows).expect("prompts");
            let vocab = logits.len() / WIDE;
            for (i, n) in next.iter_mut().enumerate() {
                *n = argmax(&logits[i * vocab..(i + 1) * vocab]);
            }
        }
        for _ in 0..16 {
            batch_step(&mut s, &seqs, &mut next, WIDE);
        }
        let before = ALLOCS.load(Ordering::Relaxed);
        for k in [8, 3, 1] {
            for _ in 0..5 {
                batch_step(&mut s, &seqs, &mut next, k);
            }
        }
        ALLOCS.load(Ordering::Relaxed) - before
    })
}

#[test]
fn a_batched_decode_step_of_fewer_sequences_than_warm_up_allocates_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for name in ["smollm2-135m", "gemma3-270m"] {
        let n = allocations_of_narrower_batch_steps(name);
        assert_eq!(
            n, 0,
            "{name}: {n} allocations in narrower batched decode steps"
        );
    }
}
