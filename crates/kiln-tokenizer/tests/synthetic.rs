//! Behaviour on small hand-made vocabularies: the errors, and the rules that the real
//! models only exercise by chance.

use kiln_tokenizer::{Tokenizer, TokenizerError, VocabSpec};

/// GPT-2's byte alphabet: the 256 single-character byte-level tokens, by byte.
fn byte_chars() -> Vec<String> {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut n = 0;
    (0..256u32)
        .map(|b| {
            let cp = if printable(b) {
                b
            } else {
                n += 1;
                255 + n
            };
            char::from_u32(cp).expect("valid").to_string()
        })
        .collect()
}

/// A BPE vocabulary: the byte alphabet, then `extra` tokens (ids 256..), with `merges`.
fn bpe(pre: &str, extra: &[&str], types: &[(usize, i32)], merges: &[&str]) -> VocabSpec {
    let mut tokens = byte_chars();
    tokens.extend(extra.iter().map(|s| s.to_string()));
    let mut token_types = vec![1; tokens.len()];
    for &(id, t) in types {
        token_types[id] = t;
    }
    VocabSpec {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        tokens,
        token_types: Some(token_types),
        merges: Some(merges.iter().map(|s| s.to_string()).collect()),
        ..VocabSpec::default()
    }
}

/// A SentencePiece vocabulary: `<unk> <s> </s>`, the 256 `<0xXX>` byte tokens (ids
/// 3..259), then `pieces` with their scores.
fn spm(pieces: &[(&str, f32)], add_space_prefix: bool) -> VocabSpec {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    tokens.extend((0..256).map(|b| format!("<0x{b:02X}>")));
    types.extend(std::iter::repeat_n(6, 256));
    let mut scores = vec![0.0; tokens.len()];
    for &(p, s) in pieces {
        tokens.push(p.into());
        types.push(1);
        scores.push(s);
    }
    VocabSpec {
        model: "llama".into(),
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        add_space_prefix: Some(add_space_prefix),
        ..VocabSpec::default()
    }
}

fn id_of(tok: &Tokenizer, s: &str) -> u32 {
    tok.token_id(s).unwrap_or_else(|| panic!("no token {s:?}"))
}

#[test]
fn unknown_model_type_names_the_supported_ones() {
    let spec = VocabSpec {
        model: "bert".into(),
        tokens: vec!["a".into()],
        ..VocabSpec::default()
    };
    let err = Tokenizer::from_vocab(spec).unwrap_err();
    assert!(matches!(err, TokenizerError::UnsupportedModel { ref model, .. } if model == "bert"));
    let msg = err.to_string();
    assert!(msg.contains("llama") && msg.contains("gpt2"), "{msg}");
}

#[test]
fn unknown_pre_tokenizer_is_an_error_naming_the_supported_ones() {
    let err = Tokenizer::from_vocab(bpe("gpt-5", &[], &[], &[])).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, TokenizerError::UnsupportedPreTokenizer { .. }),
        "{msg}"
    );
    for name in ["gpt-5", "smollm", "qwen2", "llama-bpe", "gpt-2", "default"] {
        assert!(msg.contains(name), "{msg} names {name}");
    }
}

#[test]
fn bad_merge_line_names_its_index() {
    let err = Tokenizer::from_vocab(bpe("gpt-2", &["ab"], &[], &["a b", "ab"])).unwrap_err();
    assert!(
        matches!(err, TokenizerError::BadMerge { index: 1, ref merge } if merge == "ab"),
        "{err}"
    );
}

#[test]
fn bpe_without_merges_names_the_key() {
    let mut spec = bpe("gpt-2", &[], &[], &[]);
    spec.merges = None;
    let err = Tokenizer::from_vocab(spec).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");
}

#[test]
fn duplicate_token_names_both_ids() {
    let err = Tokenizer::from_vocab(bpe("gpt-2", &["a"], &[], &[])).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::DuplicateToken {
                first: 97,
                second: 256,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn short_per_token_array_names_the_key() {
    let mut spec = spm(&[], false);
    spec.scores = Some(vec![0.0; 3]);
    let err = Tokenizer::from_vocab(spec).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.scores"), "{err}");
}

#[test]
fn adding_bos_without_a_bos_id_is_an_error() {
    // The BPE default BOS id (11) is in range here; one past the vocabulary is not.
    let mut spec = bpe("gpt-2", &[], &[], &[]);
    spec.tokens.truncate(11);
    spec.token_types = None;
    spec.add_bos = Some(true);
    let err = Tokenizer::from_vocab(spec).unwrap_err();
    assert!(
        matches!(err, TokenizerError::AddedTokenMissing { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("tokenizer.ggml.bos_token_id"),
        "{err}"
    );
}

#[test]
fn bpe_merges_apply_lowest_rank_first() {
    // "abc": "b c" (rank 0) beats "a b" (rank 1), then "a bc" (rank 2).
    let tok = Tokenizer::from_vocab(bpe(
        "gpt-2",
        &["ab", "bc", "abc"],
        &[],
        &["b c", "a b", "a bc"],
    ))
    .unwrap();
    assert_eq!(
        tok.encode("abc", false, false).unwrap(),
        [id_of(&tok, "abc")]
    );
    // Without "a bc", the leftover is "a" + "bc".
    let tok = Tokenizer::from_vocab(bpe("gpt-2", &["ab", "bc"], &[], &["b c", "a b"])).unwrap();
    assert_eq!(
        tok.encode("abc", false, false).unwrap(),
        [97, id_of(&tok, "bc")]
    );
    assert_eq!(
        tok.decode(&tok.encode("abc abc", false, false).unwrap()),
        "abc abc"
    );
}

#[test]
fn llama3_pre_tokenizer_takes_a_word_that_is_a_token_whole() {
    // "abc" is a token but no merge reaches it: llama-bpe ignores merges for whole words.
    let spec = bpe("llama-bpe", &["abc"], &[], &[]);
    let tok = Tokenizer::from_vocab(spec.clone()).unwrap();
    assert!(
        tok.add_bos(),
        "llama-bpe adds BOS unless the file says otherwise"
    );
    assert_eq!(tok.encode("abc", false, false).unwrap(), [256]);
    let gpt2 = Tokenizer::from_vocab(VocabSpec {
        pre: Some("gpt-2".into()),
        ..spec
    })
    .unwrap();
    assert_eq!(gpt2.encode("abc", false, false).unwrap(), [97, 98, 99]);
}

#[test]
fn special_tokens_match_longest_first_and_control_ones_only_when_parsing() {
    let extra = ["<x>", "<x>y", "[u]"];
    // 256 "<x>" control, 257 "<x>y" control, 258 "[u]" user-defined
    let tok =
        Tokenizer::from_vocab(bpe("gpt-2", &extra, &[(256, 3), (257, 3), (258, 4)], &[])).unwrap();
    assert_eq!(tok.encode("<x>y<x>", false, true).unwrap(), [257, 256]);
    // Not parsing: control tokens are plain text, user-defined ones still match.
    let plain = tok.encode("<x>[u]", false, false).unwrap();
    assert_eq!(plain, [b'<' as u32, b'x' as u32, b'>' as u32, 258]);
    // Control tokens decode to nothing; their bytes are still there for token_bytes.
    assert_eq!(tok.decode(&[256, 258]), "[u]");
    assert_eq!(tok.token_bytes(256), b"<x>");
    assert_eq!(tok.detokenize(&[256, 258], false, true), "<x>[u]");
}

#[test]
fn sentencepiece_merges_by_score_and_spells_unknown_characters_in_bytes() {
    let pieces = [
        ("▁", -1.0),
        ("a", -1.0),
        ("b", -1.0),
        ("▁a", -2.0),
        ("ab", -0.5),
        ("▁ab", -3.0),
    ];
    let tok = Tokenizer::from_vocab(spm(&pieces, false)).unwrap();
    // "ab" (-0.5) merges before "▁a" (-2.0); then "▁" + "ab" → "▁ab".
    assert_eq!(
        tok.encode(" ab", false, false).unwrap(),
        [id_of(&tok, "▁ab")]
    );
    // 'é' is not a piece: its two UTF-8 bytes.
    assert_eq!(tok.encode("é", false, false).unwrap(), [3 + 0xC3, 3 + 0xA9]);
    assert_eq!(
        tok.decode(&tok.encode("ab é", true, false).unwrap()),
        "ab é"
    );
}

#[test]
fn sentencepiece_space_prefix_follows_bos_and_special_tokens_and_decode_drops_it_once() {
    let pieces = [("▁", -1.0), ("a", -1.0), ("▁a", -0.5)];
    let tok = Tokenizer::from_vocab(spm(&pieces, true)).unwrap();
    assert!(tok.add_bos());
    let a = id_of(&tok, "a");
    let space_a = id_of(&tok, "▁a");
    assert_eq!(tok.encode("a", true, false).unwrap(), [1, space_a]);
    assert_eq!(tok.encode("a", false, false).unwrap(), [space_a]);
    // After a special token the next text gets the prefix again.
    assert_eq!(
        tok.encode("a</s>a", false, true).unwrap(),
        [space_a, 2, space_a]
    );
    assert_eq!(
        tok.encode("a</s>a", false, false).unwrap().first(),
        Some(&space_a)
    );
    // decode drops the first token's leading space only.
    assert_eq!(tok.decode(&[space_a, space_a]), "a a");
    assert_eq!(tok.decode(&[a, space_a]), "a a");
    // With BOS first, llama.cpp's rule spends the strip on BOS (which renders as nothing).
    assert_eq!(tok.decode(&[1, space_a]), " a");
    let mut stream = tok.stream_decoder();
    let streamed: String = [space_a, space_a].iter().map(|&t| stream.push(t)).collect();
    assert_eq!(streamed + &stream.finish(), "a a");
    let mut cont = kiln_tokenizer::StreamDecoder::continuing(&tok);
    assert_eq!(cont.push(space_a), " a");
}

#[test]
fn missing_byte_fallback_token_is_reported() {
    let mut spec = spm(&[("a", -1.0)], false);
    spec.tokens[3 + 0xC3] = "<0xC3-gone>".into();
    let tok = Tokenizer::from_vocab(spec).unwrap();
    let err = tok.encode("é", false, false).unwrap_err();
    assert!(
        matches!(err, TokenizerError::MissingByteToken { byte: 0xC3 }),
        "{err}"
    );
}

#[test]
fn ids_outside_the_vocabulary_decode_to_nothing() {
    let tok = Tokenizer::from_vocab(spm(&[("a", -1.0)], false)).unwrap();
    assert_eq!(tok.token_bytes(u32::MAX), b"");
    assert_eq!(tok.token_text(1 << 20), "");
    assert_eq!(tok.decode(&[u32::MAX, 1 << 20]), "");
    assert!(!tok.is_eog(u32::MAX));
}

#[test]
fn stream_decoder_holds_incomplete_characters() {
    let tok = Tokenizer::from_vocab(spm(&[("a", -1.0)], false)).unwrap();
    let byte = |b: u32| 3 + b;
    let mut s = tok.stream_decoder();
    // "😀" is F0 9F 98 80.
    assert_eq!(s.push(byte(0xF0)), "");
    assert_eq!(s.push(byte(0x9F)), "");
    assert_eq!(s.push(byte(0x98)), "");
    assert_eq!(s.push(byte(0x80)), "😀");
    // An invalid byte comes out as U+FFFD at once; a dangling lead byte at finish().
    assert_eq!(s.push(byte(0xFF)), "\u{FFFD}");
    assert_eq!(s.push(byte(0xE2)), "");
    assert_eq!(s.finish(), "\u{FFFD}");
}

#[test]
fn end_of_generation_includes_tokens_known_by_their_text() {
    let extra = ["<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|im_start|>"];
    let tok = Tokenizer::from_vocab(bpe(
        "qwen2",
        &extra,
        &[(256, 1), (257, 3), (258, 3), (259, 3)],
        &[],
    ))
    .unwrap();
    for id in [256, 257, 258] {
        assert!(tok.is_eog(id), "{}", tok.token_text(id));
    }
    assert!(!tok.is_eog(259));
    assert_eq!(tok.eot(), Some(256));
    // "<|im_end|>" was typed as normal: llama.cpp makes it a control token.
    assert!(tok.is_control(256));
    assert_eq!(tok.encode("<|im_end|>", false, true).unwrap(), [256]);
}

#[test]
fn clean_up_spaces_applies_where_the_pre_tokenizer_asks_for_it() {
    let extra = ["Ġ,", "Ġ's"];
    let gpt2 = Tokenizer::from_vocab(bpe("gpt-2", &extra, &[], &[])).unwrap();
    let ids = [b'a' as u32, 256, 257];
    assert_eq!(gpt2.decode(&ids), "a , 's");
    assert_eq!(gpt2.detokenize(&ids, false, false), "a,'s");
    let smollm = Tokenizer::from_vocab(bpe("smollm", &extra, &[], &[])).unwrap();
    assert_eq!(smollm.detokenize(&ids, false, false), "a , 's");
}
