//! tokenizer.json vocabularies against Hugging Face `tokenizers` (fixtures made by
//! `tests/fixtures/hf/gen_hf_fixtures.py`): stories260K's SentencePiece-style BPE with byte
//! fallback, and the byte-level BPE files `gguf_to_hf_safetensors.py` writes for SmolLM2
//! and Qwen2.5, which must also give the same ids as the GGUF path on the same model.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{gguf, ids, tokenizer};
use kiln_testkit::hf_tokenizer as gguf_to_hf;
use kiln_tokenizer::Tokenizer;
use unicode_normalization::UnicodeNormalization;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf")
}

struct Case {
    text: String,
    parse_special: bool,
    ids: Vec<u32>,
    decoded: String,
}

fn cases(model: &str) -> Vec<Case> {
    let path = fixture_dir().join(format!("{model}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().expect("text").to_owned(),
            parse_special: c["parse_special"].as_bool().expect("parse_special"),
            ids: ids(&c["ids"]),
            decoded: c["decoded"].as_str().expect("decoded").to_owned(),
        })
        .collect()
}

/// The HF-path tokenizer of a GGUF model, built from the script's tokenizer.json.
fn hf_from_gguf(model: &str) -> &'static Tokenizer {
    static CACHE: OnceLock<Vec<(String, Tokenizer)>> = OnceLock::new();
    let all = CACHE.get_or_init(|| {
        ["smollm2-135m", "qwen2.5-coder-0.5b"]
            .iter()
            .map(|&name| {
                let md = gguf(name).metadata();
                let json = gguf_to_hf::tokenizer_json(md);
                let tok = Tokenizer::from_tokenizer_json_with(&json, &gguf_to_hf::config(md))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                (name.to_owned(), tok)
            })
            .collect()
    });
    all.iter()
        .find(|(n, _)| n == model)
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("unknown model {model}"))
}

fn check(model: &str, tok: &Tokenizer) {
    let cases = cases(model);
    let mut failures = Vec::new();
    let mut decode_failures = Vec::new();
    for c in &cases {
        let got = tok.encode(&c.text, true, c.parse_special).expect("encode");
        if got != c.ids {
            failures.push(format!(
                "{:?} (parse_special {}):\n   got  {got:?}\n   want {:?}",
                c.text, c.parse_special, c.ids
            ));
        }
        let decoded = tok.decode(&c.ids);
        if decoded != c.decoded {
            decode_failures.push(format!(
                "{:?}: got {decoded:?}, want {:?}",
                c.text, c.decoded
            ));
        }
    }
    eprintln!(
        "{model}: {} of {} encodings and {} decodings match tokenizers",
        cases.len() - failures.len(),
        cases.len(),
        cases.len() - decode_failures.len()
    );
    assert!(
        failures.is_empty() && decode_failures.is_empty(),
        "{model}: {} encode and {} decode mismatches:\n{}\n{}",
        failures.len(),
        decode_failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        decode_failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn stories260k_sentencepiece_bpe_matches_tokenizers() {
    let tok = Tokenizer::from_hf_dir(&fixture_dir().join("stories260K")).expect("load");
    check("stories260K", &tok);
}

#[test]
fn smollm2_tokenizer_json_matches_tokenizers() {
    check("smollm2-135m", hf_from_gguf("smollm2-135m"));
}

#[test]
fn qwen25_tokenizer_json_matches_tokenizers() {
    check("qwen2.5-coder-0.5b", hf_from_gguf("qwen2.5-coder-0.5b"));
}

/// The same text through the GGUF vocabulary (llama.cpp's rules) and through the
/// tokenizer.json converted from it gives the same ids, with two differences of rule,
/// not of implementation: Qwen's tokenizer.json normalizes to NFC first and llama.cpp
/// does not (so the GGUF side gets the NFC text), and a few tokens are special on one
/// side only (llama.cpp makes a plain `</s>` a control token by its text; the script
/// marks user-defined tokens such as `<tool_call>` special, so they are not matched
/// without special-token parsing). Texts with those tokens are counted, not compared.
fn same_as_gguf(model: &str, nfc: bool) {
    let hf = hf_from_gguf(model);
    let gg = tokenizer(model);
    // Which tokens each side cuts out of the text before BPE: the script's added tokens
    // (types 3 and 4, all marked special), and llama.cpp's control tokens (by type or by
    // text) and user-defined ones (type 4, cut even without special-token parsing).
    let types = gguf(model)
        .metadata()
        .opt_i32_array("tokenizer.ggml.token_type")
        .expect("types")
        .expect("types present");
    let n = u32::try_from(gg.vocab_size()).expect("fits");
    let added =
        |id: u32| matches!(types[id as usize], 3 | 4) && !gg.token_text(id).starts_with("[PAD");
    let user_defined = |id: u32| types[id as usize] == 4;
    let differ_always: Vec<&str> = (0..n)
        .filter(|&id| added(id) != (gg.is_control(id) || user_defined(id)))
        .map(|id| gg.token_text(id))
        .collect();
    let differ_unparsed: Vec<&str> = (0..n)
        .filter(|&id| user_defined(id))
        .map(|id| gg.token_text(id))
        .collect();
    let cases = cases(model);
    let mut differ = Vec::new();
    let (mut normalized, mut skipped) = (0, 0);
    for c in &cases {
        let holds = |list: &[&str]| list.iter().any(|t| c.text.contains(t));
        if holds(&differ_always) || (!c.parse_special && holds(&differ_unparsed)) {
            skipped += 1;
            continue;
        }
        let a = hf.encode(&c.text, true, c.parse_special).expect("encode");
        let text: String = if nfc {
            c.text.nfc().collect()
        } else {
            c.text.clone()
        };
        normalized += usize::from(text != c.text);
        let b = gg.encode(&text, true, c.parse_special).expect("encode");
        if a != b {
            differ.push(format!("{:?}:\n   json {a:?}\n   gguf {b:?}", c.text));
        }
    }
    eprintln!(
        "{model}: {} of {} texts ({normalized} changed by NFC) give the same ids from \
         tokenizer.json and GGUF; {skipped} hold one of {differ_always:?} (or, unparsed, \
         {differ_unparsed:?})",
        cases.len() - skipped - differ.len(),
        cases.len() - skipped,
    );
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    assert!(skipped * 10 < cases.len(), "too few texts compared");
    assert_eq!(hf.eog_ids(), gg.eog_ids(), "end-of-generation ids");
    assert_eq!(hf.vocab_size(), gg.vocab_size());
}

#[test]
fn smollm2_tokenizer_json_and_gguf_agree() {
    same_as_gguf("smollm2-135m", false);
}

#[test]
fn qwen25_tokenizer_json_and_gguf_agree() {
    same_as_gguf("qwen2.5-coder-0.5b", true);
}

/// A minimal tokenizer.json around `model`, `pre_tokenizer` and `decoder` objects.
fn tiny(model: &str, pre: &str, decoder: &str) -> Vec<u8> {
    format!(
        r#"{{"added_tokens": [], "normalizer": null, "pre_tokenizer": {pre},
            "post_processor": null, "decoder": {decoder}, "model": {model}}}"#
    )
    .into_bytes()
}

const BPE: &str = r#"{"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}"#;
const BYTE_LEVEL: &str = r#"{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}"#;

#[test]
fn unigram_and_wordpiece_models_are_refused_by_name() {
    for model in [
        r#"{"type": "Unigram", "vocab": [["a", 0.0]], "unk_id": 0}"#,
        r#"{"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "a"}"#,
    ] {
        let err = Tokenizer::from_tokenizer_json(&tiny(model, "null", BYTE_LEVEL)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("model") && msg.contains("supported: BPE"),
            "{msg}"
        );
    }
}

#[test]
fn a_merge_outside_the_vocabulary_names_the_piece() {
    let model = r#"{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}"#;
    let err = Tokenizer::from_tokenizer_json(&tiny(model, "null", BYTE_LEVEL)).unwrap_err();
    assert!(err.to_string().contains("\"ab\""), "{err}");
}

#[test]
fn an_unsupported_pre_tokenizer_is_an_error_not_a_fallback() {
    let pre = r#"{"type": "Whitespace"}"#;
    let err = Tokenizer::from_tokenizer_json(&tiny(BPE, pre, BYTE_LEVEL)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("Whitespace") && msg.contains("Metaspace"),
        "{msg}"
    );
}

#[test]
fn merges_apply_in_both_file_spellings() {
    let tok = Tokenizer::from_tokenizer_json(&tiny(BPE, "null", BYTE_LEVEL)).expect("load");
    assert_eq!(tok.encode("ab", true, true).expect("encode"), [2]);
    let pairs = BPE.replace(r#"["a b"]"#, r#"[["a", "b"]]"#);
    let tok = Tokenizer::from_tokenizer_json(&tiny(&pairs, "null", BYTE_LEVEL)).expect("load");
    assert_eq!(tok.encode("aab", true, true).expect("encode"), [0, 2]);
}

#[test]
fn a_missing_directory_names_the_file() {
    let err = Tokenizer::from_hf_dir(Path::new("/nonexistent/model")).unwrap_err();
    assert!(
        err.to_string()
            .contains("/nonexistent/model/tokenizer.json"),
        "{err}"
    );
}

#[test]
fn stories260k_knows_its_special_tokens_from_the_config_files() {
    let tok = Tokenizer::from_hf_dir(&fixture_dir().join("stories260K")).expect("load");
    assert_eq!(
        (tok.bos(), tok.eos(), tok.unk()),
        (Some(1), Some(2), Some(0))
    );
    assert!(tok.add_bos() && !tok.add_eos());
    assert!(tok.is_eog(2) && !tok.is_eog(1));
    // Streaming gives the same text as a whole decode, leading space rule included.
    let ids = tok
        .encode(" Once upon a time, Lily saw 🦙.", true, true)
        .expect("encode");
    let mut stream = tok.stream_decoder();
    let mut text: String = ids.iter().map(|&i| stream.push(i)).collect();
    text.push_str(&stream.finish());
    assert_eq!(text, tok.decode(&ids));
    assert_eq!(text, " Once upon a time, Lily saw 🦙.");
}
