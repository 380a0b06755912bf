//! What a target scoring pass costs by its token count, against a one-token pass: the
//! curve [`kiln_spec::PassCost`] measures before generating, here measured in CPU time as
//! well as wall time, best of many rounds, every size once per round (so a change of the
//! machine's load touches every size alike).
//!
//! `cargo run --release -p kiln-spec --example pass_cost -- [MODEL] [THREADS] [ROUNDS] [MAX]
//! [CONTEXT]`
//!
//! For each `n` in `1..=MAX` (default 17) it prints the best wall and CPU time of a scoring
//! pass of `n` tokens ([`kiln_model::Session::forward_scored`], logits for every token,
//! rolled back at once) and of a pass of the same tokens with logits for the last token
//! only ([`kiln_model::Session::forward_batch`]), each also over the one-token pass.

use std::sync::Arc;
use std::time::Instant;

use kiln_model::{BatchSeq, Logits, Model, Session};

/// Prompt text: source code, as a code edit sends.
const TEXT: &str = include_str!("../src/adapt.rs");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("qwen2.5-coder-0.5b", String::as_str);
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20);
    let max: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(17);
    // Positions before the scored row's end (at most the text's length).
    let context: usize = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(400);
    let model = Arc::new(Model::open(kiln_testkit::model_path(name)).expect("model loads"));
    let tokenizer = kiln_tokenizer::Tokenizer::from_gguf(model.gguf().expect("GGUF").metadata())
        .expect("tokenizer");
    let mut tokens = tokenizer.encode(TEXT, true, false).expect("encodes");
    while tokens.len() < context {
        tokens.extend_from_within(1..);
    }
    tokens.truncate(context);
    let (prompt, row) = tokens.split_at(tokens.len() - max);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    // Per size: best (wall, cpu) of the all-logits pass and of the last-logits pass.
    let mut best = vec![[(f64::MAX, f64::MAX); 2]; max + 1];
    pool.install(|| {
        let mut s = Session::new(Arc::clone(&model), prompt.len() + max + 64, 64);
        s.forward(prompt, Logits::Last).expect("prompt");
        let seq = s.sequence();
        let pos0 = s.pos();
        for round in 0..rounds + 1 {
            for n in 1..=max {
                for (mode, slot) in best[n].iter_mut().enumerate() {
                    let rows = [BatchSeq {
                        seq,
                        tokens: &row[..n],
                        logits: true,
                        prompt_rows: 0,
                    }];
                    let (t, c) = (Instant::now(), process_cpu_seconds());
                    if mode == 0 {
                        s.forward_scored(&rows).expect("pass");
                    } else {
                        s.forward_batch(&rows).expect("pass");
                    }
                    let (wall, cpu) = (t.elapsed().as_secs_f64(), process_cpu_seconds() - c);
                    s.settle(seq, pos0).expect("roll back");
                    // The first round warms the buffers up.
                    if round > 0 {
                        slot.0 = slot.0.min(wall);
                        slot.1 = slot.1.min(cpu);
                    }
                }
            }
        }
    });
    let [(w1, c1), _] = best[1];
    println!(
        "{name}, {threads} threads, best of {rounds} rounds; ms and decode steps (over n = 1)"
    );
    println!("| n | wall ms | steps | cpu ms | cpu steps | last-only cpu ms | cpu steps |");
    println!("|---|---|---|---|---|---|---|");
    for (n, &[(w, c), (_, cl)]) in best.iter().enumerate().skip(1) {
        println!(
            "| {n} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            w * 1e3,
            w / w1,
            c * 1e3,
            c / c1,
            cl * 1e3,
            cl / c1
        );
    }
}

/// CPU time of the whole process (all threads), immune to time spent preempted.
fn process_cpu_seconds() -> f64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec (64-bit Linux layout).
    unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}
