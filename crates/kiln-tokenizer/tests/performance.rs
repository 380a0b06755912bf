//! Encoding and loading stay fast: a 4,000-token text encodes in milliseconds, and the
//! 262k-token Gemma vocabulary builds in well under 100 ms (in release builds).

mod common;

use std::time::{Duration, Instant};

use common::{MODELS, tokenizer};
use kiln_tokenizer::Tokenizer;

/// About 4,000 tokens of mixed prose, code, numbers and non-Latin text.
fn long_text() -> String {
    let para = "The quick brown fox jumps over the lazy dog, again and again: 1234567 times! \
                def f(x):\n    return x ** 2  # square\n\n\
                Привет, мир! 你好世界。 こんにちは 🦙🚀 naïve café résumé — \"quoted\" 'text'.\n";
    para.repeat(64)
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..runs {
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed());
        out = Some(r);
    }
    (best, out.expect("at least one run"))
}

#[test]
fn encoding_four_thousand_tokens_takes_milliseconds() {
    let text = long_text();
    for &(_, name) in MODELS {
        let tok = tokenizer(name);
        let (t, ids) = best_of(5, || tok.encode(&text, true, true).expect("encode"));
        eprintln!(
            "{name}: {} tokens encoded in {:.2} ms",
            ids.len(),
            t.as_secs_f64() * 1e3
        );
        assert!(ids.len() > 4000, "{name}: {} tokens", ids.len());
        assert!(t < Duration::from_secs(1), "{name}: encoding took {t:?}");
        let (t, s) = best_of(5, || tok.decode(&ids));
        eprintln!("{name}: decoded in {:.2} ms", t.as_secs_f64() * 1e3);
        assert_eq!(s, text);
    }
}

#[test]
fn gemma_vocabulary_builds_in_well_under_100_ms() {
    let path = kiln_hub::resolve("gemma3-270m").expect("gemma3-270m is required");
    let file = kiln_format::GgufFile::open(&path).expect("read gemma");
    // Best of several: the machine is shared, and one slow run says little.
    let (t, tok) = best_of(10, || Tokenizer::from_gguf(file.metadata()).expect("build"));
    eprintln!(
        "gemma3: {} tokens built in {:.1} ms",
        tok.vocab_size(),
        t.as_secs_f64() * 1e3
    );
    if !cfg!(debug_assertions) {
        assert!(t < Duration::from_millis(100), "building took {t:?}");
    }
    for name in ["smollm2-135m", "qwen2.5-coder-0.5b"] {
        let path = kiln_hub::resolve(name).expect("model is required");
        let file = kiln_format::GgufFile::open(&path).expect("read");
        let (t, tok) = best_of(3, || Tokenizer::from_gguf(file.metadata()).expect("build"));
        eprintln!(
            "{name}: {} tokens built in {:.1} ms",
            tok.vocab_size(),
            t.as_secs_f64() * 1e3
        );
    }
}
