//! The llama.cpp reference outputs in `testdata/ref/`: prompt ids from `/tokenize` and the
//! text of generated ids from `/completion`.

mod common;

use common::{MODELS, ids, reference, tokenizer};

#[test]
fn prompts_encode_to_llama_cpp_prompt_tokens() {
    let mut failures = Vec::new();
    for &(ref_name, hub_name) in MODELS {
        let tok = tokenizer(hub_name);
        let doc = reference(ref_name);
        for r in doc["results"].as_array().expect("results") {
            let prompt = r["prompt"].as_str().expect("prompt");
            let want = ids(&r["prompt_tokens"]);
            let got = tok.encode(prompt, true, true).expect("encode");
            if got != want {
                failures.push(format!("{ref_name} {prompt:?}: got {got:?}, want {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn generated_tokens_decode_to_llama_cpp_content() {
    let mut failures = Vec::new();
    for &(ref_name, hub_name) in MODELS {
        let tok = tokenizer(hub_name);
        let doc = reference(ref_name);
        for r in doc["results"].as_array().expect("results") {
            let tokens = ids(&r["tokens"]);
            let want = r["content"].as_str().expect("content");
            let got = tok.decode(&tokens);
            if got != want {
                failures.push(format!("{ref_name}: got {got:?}, want {want:?}"));
            }
            let mut stream = tok.stream_decoder();
            let mut streamed: String = tokens.iter().map(|&t| stream.push(t)).collect();
            streamed.push_str(&stream.finish());
            if streamed != want {
                failures.push(format!(
                    "{ref_name} (streamed): got {streamed:?}, want {want:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bos_and_end_of_generation_follow_llama_cpp() {
    let smol = tokenizer("smollm2-135m");
    assert!(!smol.add_bos());
    assert_eq!(smol.bos(), Some(1));
    assert_eq!(smol.eos(), Some(2));
    assert!(smol.is_eog(2)); // <|im_end|>
    assert!(smol.is_eog(0)); // <|endoftext|>
    assert!(!smol.is_eog(1));

    let gemma = tokenizer("gemma3-270m");
    assert!(gemma.add_bos());
    assert!(!gemma.add_space_prefix());
    assert_eq!(gemma.bos(), Some(2));
    assert!(gemma.is_eog(1)); // <eos>
    assert!(gemma.is_eog(106)); // <end_of_turn>
    assert_eq!(gemma.eot(), Some(106));

    let qwen = tokenizer("qwen2.5-coder-0.5b");
    assert!(!qwen.add_bos());
    for text in [
        "<|im_end|>",
        "<|endoftext|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
    ] {
        let id = qwen.token_id(text).expect(text);
        assert!(qwen.is_eog(id), "{text} ends generation");
    }
    assert!(!qwen.is_eog(qwen.token_id("<|im_start|>").expect("im_start")));
}
