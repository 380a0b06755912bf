//! The KV cache figures of `docs/kv-cache.md` that no CLI command shows:
//!
//! 1. time to first token with a 512-token shared prefix, cold (whole prompt evaluated)
//!    vs warm (the prefix's pages found in the prefix cache, only the suffix evaluated),
//!    on SmolLM2 with real text;
//! 2. memory waste (allocated but unused token slots / allocated slots) of the paged cache
//!    under a mixed workload, against a contiguous cache reserving the maximum length per
//!    sequence.
//!
//! `cargo run --release -p kiln-model --example kv_figures [-- <text file>]`

use std::sync::Arc;
use std::time::Instant;

use kiln_kv::{KvCache, KvConfig, KvType};
use kiln_model::{KvOptions, Logits, Model, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text_path = std::env::args().nth(1).unwrap_or_else(|| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/wikitext-2/wiki.test.head.raw"
        )
        .to_string()
    });
    let model = Arc::new(Model::open(kiln_hub::resolve("smollm2-135m")?)?);
    let tok = kiln_tokenizer::Tokenizer::from_gguf(
        model.gguf().ok_or("a GGUF model is needed")?.metadata(),
    )?;
    let text = std::fs::read_to_string(&text_path)?;
    let all = tok.encode(&text, true, false)?;
    let (prefix_len, suffix_len, reps) = (512, 16, 5);
    if all.len() < prefix_len + suffix_len * (reps + 1) {
        return Err("the text is too short".into());
    }
    let prefix = &all[..prefix_len];

    // 1. TTFT cold vs warm. The session's cache holds the prefix's pages after each cold
    //    run (cached blocks stay until space is needed).
    let n_ctx = 1024;
    let kv = KvOptions {
        memory: Some(64 << 20),
        ..KvOptions::default()
    };
    let mut s = Session::with_kv(Arc::clone(&model), n_ctx, 512, &kv)?;
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    let mut identical = true;
    for r in 0..reps {
        let suffix = &all[prefix_len + r * suffix_len..prefix_len + (r + 1) * suffix_len];
        let prompt: Vec<u32> = prefix.iter().chain(suffix).copied().collect();
        // Cold: a fresh session, nothing cached.
        let mut c = Session::with_kv(Arc::clone(&model), n_ctx, 512, &kv)?;
        let t = Instant::now();
        let cold_logits = c.forward(&prompt, Logits::Last)?.to_vec();
        cold.push(t.elapsed().as_secs_f64());
        // Warm: the long-lived session has seen the prefix (first round: prime it).
        if r == 0 {
            s.forward(prefix, Logits::Last)?;
        }
        let old = s.sequence();
        let seq = s.new_sequence();
        s.select(seq)?;
        s.free_sequence(old)?;
        let t = Instant::now();
        let reused = s.reuse_prefix(&prompt)?;
        let warm_logits = s.forward(&prompt[reused..], Logits::Last)?.to_vec();
        warm.push(t.elapsed().as_secs_f64());
        assert_eq!(reused, prefix_len, "the whole prefix is found");
        identical &= cold_logits == warm_logits;
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (c, w) = (med(&mut cold), med(&mut warm));
    let st = s.kv().stats().prefix;
    println!(
        "TTFT, {prefix_len}-token shared prefix + {suffix_len}-token suffix, median of {reps}: \
         cold {:.1} ms, warm {:.1} ms, {:.1}x; warm logits identical to cold: {identical}; \
         prefix cache: {} queries, {} hits, {} tokens saved",
        c * 1e3,
        w * 1e3,
        c / w,
        st.queries,
        st.hits,
        st.tokens_saved
    );

    // 2. Waste under a mixed workload: 64 sequences of lengths spread over 1..=2048
    //    (deterministic), a fifth of them forked mid-way, half the forks extended.
    let max_len = 2048;
    let cfg = KvConfig {
        n_layer: 1,
        n_kv_head: 1,
        head_dim_k: 32,
        head_dim_v: 32,
        k_type: KvType::F16,
        v_type: KvType::F16,
        block_size: KvConfig::DEFAULT_BLOCK_SIZE,
        n_blocks: 64 * max_len / KvConfig::DEFAULT_BLOCK_SIZE,
        rotate: true,
    };
    let mut cache = KvCache::new(cfg)?;
    let mut z = 0x2545_f491_4f6c_dd1d_u64;
    let mut lens = Vec::new();
    for i in 0..64 {
        z ^= z << 13;
        z ^= z >> 7;
        z ^= z << 17;
        let len = 1 + (z % max_len as u64) as usize;
        let id = cache.create_sequence(max_len);
        cache.append(id, &vec![1; len])?;
        lens.push(len);
        if i % 5 == 0 {
            let f = cache.fork_sequence(id)?;
            let extra = (len / 3).min(max_len - len);
            if i % 10 == 0 && extra > 0 {
                cache.append(f, &vec![2; extra])?;
            }
            lens.push(len + if i % 10 == 0 { extra } else { 0 });
        }
    }
    let st = cache.stats();
    let used: usize = lens.iter().sum();
    let contiguous = 1.0 - used as f64 / (lens.len() * max_len) as f64;
    println!(
        "waste, {} sequences (lengths 1..={max_len}, forks sharing pages): paged {:.2}% \
         ({} of {} slots of {} blocks unused; {} positions, {} shared blocks); contiguous \
         {max_len}-token reservations {:.1}%",
        st.active_sequences,
        100.0 * st.waste(),
        st.slots_allocated - st.slots_used,
        st.slots_allocated,
        st.used_blocks,
        st.tokens,
        st.shared_blocks,
        100.0 * contiguous
    );
    Ok(())
}
