//! After warm-up, a decode step of a [`Session`] allocates nothing on the heap: a counting
//! global allocator over whole steps (embedding, every layer, KV cache, attention, head),
//! on a llama model (SmolLM2) and a Gemma 3 model (sliding-window and global layers with
//! their two RoPE bases, per-head Q/K norms, post-norms), and on mixture-of-experts
//! fixtures, with two threads.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_model::{Logits, Model, Session};

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

/// Warms a session up (a prompt, then decode steps), then counts the allocations of
/// `steps` more decode steps; they cross a KV page boundary (16 tokens).
fn allocations_of_decode_steps(name: &str, steps: usize) -> usize {
    let path = kiln_hub::resolve(name).unwrap_or_else(|e| panic!("model {name}: {e}"));
    allocations_of_decode_steps_at(&path, steps)
}

/// [`allocations_of_decode_steps`] for the model at `path`.
fn allocations_of_decode_steps_at(path: &std::path::Path, steps: usize) -> usize {
    let model = Arc::new(Model::open(path).expect("model loads"));
    // One pool for every model: a pool dropped after one model would wind its threads down
    // (and they may allocate doing so) while the next model's steps are counted.
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool")
    });
    // The whole run inside the pool: rayon's jobs then go through its workers' own queues
    // (a call from outside the pool injects each job through a shared queue that allocates
    // now and then).
    pool.install(|| {
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

// One test, models one after the other: the allocator counts every thread of the process,
// so nothing else may run while a model's steps are counted.
#[test]
fn a_decode_step_allocates_nothing_after_warm_up_on_llama_gemma3_and_mixtures_of_experts() {
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
