//! After warm-up, a whole engine step — planning, the batched forward pass, sampling,
//! stop strings, streaming text, sending the events, metrics — allocates nothing on the
//! heap, for a steady decode of several concurrent sequences whose receivers keep up. A
//! counting global allocator counts the allocations of every engine thread (the scheduler
//! and its two compute threads) between the start and the end of each step, as the
//! engine's step probe reports them; the test thread, which receives and drops the events,
//! is not counted. On a llama model (SmolLM2) and a Gemma 3 model, and with n-gram
//! speculation on SmolLM2 (steps whose rows carry drafts, verified and rolled back).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use kiln_engine::{Engine, EngineConfig, Event, Request, SpecConfig, SpecMethod, StepProbe};
use kiln_model::Model;
use kiln_tokenizer::Tokenizer;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Allocations of this thread are not counted (the test thread).
    static EXEMPT: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if !EXEMPT.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Steps recorded at most.
const MAX_STEPS: usize = 256;

/// What the probe records, step by step (fixed arrays: the probe must not allocate).
struct Record {
    steps: AtomicUsize,
    start: AtomicUsize,
    allocs: [AtomicUsize; MAX_STEPS],
    texts: [AtomicUsize; MAX_STEPS],
    done: AtomicBool,
}

static RECORD: Record = Record {
    steps: AtomicUsize::new(0),
    start: AtomicUsize::new(0),
    allocs: [const { AtomicUsize::new(0) }; MAX_STEPS],
    texts: [const { AtomicUsize::new(0) }; MAX_STEPS],
    done: AtomicBool::new(false),
};

fn probe(at: Option<usize>) {
    match at {
        None => RECORD
            .start
            .store(ALLOCS.load(Ordering::SeqCst), Ordering::SeqCst),
        Some(texts) => {
            let n = ALLOCS.load(Ordering::SeqCst) - RECORD.start.load(Ordering::SeqCst);
            let i = RECORD.steps.load(Ordering::SeqCst);
            if i < MAX_STEPS {
                RECORD.allocs[i].store(n, Ordering::SeqCst);
                RECORD.texts[i].store(texts, Ordering::SeqCst);
            }
            RECORD.steps.store(i + 1, Ordering::SeqCst);
        }
    }
}

const SEQUENCES: usize = 3;
const MAX_TOKENS: usize = 48;
/// Steps before counting: the prompts' prefill, the first decode steps (sampler, stop
/// strings, text pool and channel queues grow to their working size).
const WARM_UP: usize = 12;
/// Steps counted: all of them decode every sequence (none has finished yet), and they
/// cross KV page boundaries (16 tokens).
const COUNTED: usize = 24;

/// What a run did besides its counted steps.
struct Run {
    /// Allocations and text events of every step in `WARM_UP..WARM_UP + COUNTED`.
    counted: Vec<(usize, usize)>,
    /// Every step of the run.
    steps: usize,
    /// Drafted and accepted tokens (speculation).
    drafted: u64,
    accepted: u64,
}

/// Runs `SEQUENCES` greedy requests of `max_tokens` each on `name` (speculating with
/// `spec`, on `prompts`).
fn steady_decode_steps(
    name: &str,
    spec: Option<SpecConfig>,
    prompts: &[&str],
    max_tokens: usize,
) -> Run {
    RECORD.steps.store(0, Ordering::SeqCst);
    RECORD.done.store(false, Ordering::SeqCst);
    let path = kiln_testkit::model_path(name);
    let model = Arc::new(Model::open(path).expect("model loads"));
    let md = model.gguf().expect("a GGUF model").metadata();
    let tok = Arc::new(Tokenizer::from_gguf(md).expect("tokenizer"));
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = 256;
    cfg.kv.memory = Some(32 << 20);
    cfg.threads = 2;
    cfg.spec = spec;
    cfg.step_probe = Some(StepProbe(Arc::new(probe)));
    let engine = Engine::start(model, Arc::clone(&tok), cfg).expect("engine starts");
    let handles: Vec<_> = prompts
        .iter()
        .take(SEQUENCES)
        .map(|p| {
            let ids = tok.encode(p, true, false).expect("encodes");
            let mut r = Request::greedy(ids, max_tokens);
            r.ignore_eos = true;
            // A stop string that never matches: text is held back and released as it
            // is decided.
            r.stop = vec!["\u{1F600}never".to_string()];
            engine.submit(r).expect("submitted")
        })
        .collect();
    // Receive (and drop) every event as it comes, uncounted.
    EXEMPT.with(|e| e.set(true));
    let mut ended = 0;
    let mut tokens = 0;
    while ended < handles.len() {
        let mut got = false;
        for h in &handles {
            while let Some(ev) = h.try_recv() {
                got = true;
                match ev {
                    Event::Token { .. } => tokens += 1,
                    Event::Done { .. } => ended += 1,
                    Event::Error(e) => panic!("{name}: {e}"),
                }
            }
        }
        if !got {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    EXEMPT.with(|e| e.set(false));
    assert_eq!(tokens, SEQUENCES * max_tokens);
    drop(handles);
    let spec = engine.metrics().spec;
    engine.shutdown(false);
    let steps = RECORD.steps.load(Ordering::SeqCst);
    assert!(steps >= WARM_UP + COUNTED, "{name}: only {steps} steps");
    let counted = (WARM_UP..WARM_UP + COUNTED)
        .map(|i| {
            (
                RECORD.allocs[i].load(Ordering::SeqCst),
                RECORD.texts[i].load(Ordering::SeqCst),
            )
        })
        .collect();
    Run {
        counted,
        steps,
        drafted: spec.drafted,
        accepted: spec.accepted,
    }
}

const PROMPTS: [&str; 3] = [
    "Once upon a time",
    "The capital of France is",
    "fn main() { println!(",
];

/// Held by each test: the allocator counts every engine thread of the process, so no other
/// engine may run meanwhile.
static ONE_ENGINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

// Models one after the other.
#[test]
fn an_engine_step_allocates_nothing_after_warm_up_on_llama_and_gemma3() {
    let _one = ONE_ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    for name in ["smollm2-135m", "gemma3-270m"] {
        let steps = steady_decode_steps(name, None, &PROMPTS, MAX_TOKENS).counted;
        let texts: usize = steps.iter().map(|s| s.1).sum();
        eprintln!("{name}: (allocations, text events) per step: {steps:?}");
        assert!(texts > 0, "{name}: the counted steps streamed text");
        assert!(
            steps.iter().all(|s| s.0 == 0),
            "{name}: steps allocated: {steps:?}"
        );
    }
}

/// Tokens per speculating request: enough steps to warm up and count even when most steps
/// emit several tokens.
const SPEC_MAX_TOKENS: usize = 200;

// Prompts whose greedy continuations repeat, so n-gram drafts are made and accepted
// throughout the run (the drafted rows, their verification and the cut of rejected
// positions all run in the counted steps).
#[test]
fn a_speculating_engine_step_allocates_nothing_after_warm_up() {
    let _one = ONE_ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    let mut spec = SpecConfig::new(SpecMethod::Ngram);
    spec.draft_max = 4;
    let prompts = [
        "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2",
        "red green blue red green blue red green blue red",
        "a b c d a b c d a b c d a b",
    ];
    let run = steady_decode_steps("smollm2-135m", Some(spec), &prompts, SPEC_MAX_TOKENS);
    eprintln!(
        "speculating: {} steps for {SPEC_MAX_TOKENS} tokens, drafted {}, accepted {}; \
         (allocations, text events) per counted step: {:?}",
        run.steps, run.drafted, run.accepted, run.counted
    );
    assert!(
        run.accepted > 0 && run.steps < SPEC_MAX_TOKENS * 3 / 4,
        "drafts were accepted throughout: {} steps, {} accepted",
        run.steps,
        run.accepted
    );
    assert!(
        run.counted.iter().all(|s| s.0 == 0),
        "speculating steps allocated: {:?}",
        run.counted
    );
}
