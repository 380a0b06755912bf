//! The three cached real models parse, with known facts. Run in release:
//! `cargo test --release -p kiln-format`. A missing model fails the test.

use kiln_format::{GgmlType, GgufFile};

fn open(name: &str) -> GgufFile {
    let path = kiln_testkit::model_path(name);
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks every tensor's data slice and returns the file.
fn open_checked(name: &str) -> GgufFile {
    let file = open(name);
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    for t in file.tensors() {
        let data = file.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes, "{name}: {}", t.name);
        assert_eq!(
            Some(t.n_bytes),
            t.ty.row_bytes(t.row_len()).map(|r| r * t.n_rows())
        );
        assert_eq!(
            data.as_ptr() as usize % 32,
            0,
            "{name}: {} is not 32-byte aligned in memory",
            t.name
        );
    }
    file
}

#[test]
fn smollm2_parses_with_known_facts() {
    let f = open_checked("smollm2-135m");
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.data_offset(), 1_785_664);
    let md = f.metadata();
    assert_eq!(md.len(), 33);
    assert_eq!(md.u32("llama.block_count").unwrap(), 30);
    assert_eq!(md.u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(md.str("tokenizer.ggml.model").unwrap(), "gpt2");
    let tokens = md.str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(
        &tokens[..3],
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    );
    assert_eq!(md.str_array("tokenizer.ggml.merges").unwrap().len(), 48900);
    assert_eq!(
        md.i32_array("tokenizer.ggml.token_type").unwrap().len(),
        49152
    );
    assert!(
        md.str("tokenizer.chat_template")
            .unwrap()
            .contains("im_start")
    );
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.info.ty, GgmlType::Q8_0);
    assert_eq!(embd.info.dims, [576, 49152]);
    assert_eq!(embd.data.len(), 30_081_024);
    assert_eq!(
        f.tensor_info("blk.0.ffn_down.weight").unwrap().ty,
        GgmlType::Q4_1
    );
}

#[test]
fn gemma3_parses_its_262144_token_vocabulary() {
    let f = open_checked("gemma3-270m");
    assert_eq!(f.architecture().unwrap(), "gemma3");
    assert_eq!(f.tensors().len(), 236);
    let md = f.metadata();
    let tokens = md.str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 262_144);
    assert_eq!(&tokens[..4], ["<pad>", "<eos>", "<bos>", "<unk>"]);
    assert_eq!(
        md.f32_array("tokenizer.ggml.scores").unwrap().len(),
        262_144
    );
    assert_eq!(md.u32("gemma3.attention.sliding_window").unwrap(), 512);
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embd.info.ty, embd.info.dims.as_slice()),
        (GgmlType::Q8_0, &[640, 262_144][..])
    );
    assert_eq!(
        f.tensor_info("output_norm.weight").unwrap().ty,
        GgmlType::F32
    );
}

#[test]
fn qwen2_parses_with_a_q8_0_output() {
    let f = open_checked("qwen2.5-coder-0.5b");
    assert_eq!(f.architecture().unwrap(), "qwen2");
    assert_eq!(f.tensors().len(), 291);
    assert_eq!(f.data_offset(), 5_947_776);
    let out = f.tensor("output.weight").unwrap();
    assert_eq!(
        (out.info.ty, out.info.dims.as_slice()),
        (GgmlType::Q8_0, &[896, 151_936][..])
    );
    assert_eq!(out.info.offset, 0);
    let md = f.metadata();
    assert_eq!(md.u32("qwen2.block_count").unwrap(), 24);
    assert_eq!(
        md.str_array("tokenizer.ggml.tokens").unwrap().len(),
        151_936
    );
    assert_eq!(
        md.str_array("tokenizer.ggml.merges").unwrap().len(),
        151_387
    );
}
