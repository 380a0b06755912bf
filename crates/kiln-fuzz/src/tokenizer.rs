//! tokenizer.json loading, encode/decode on a real vocabulary, chat-template rendering.

use std::sync::OnceLock;

use kiln_tokenizer::Tokenizer;
use kiln_tokenizer::chat::{ChatTemplate, Conversation, RenderOptions, SpecialTokens};

/// Arbitrary bytes as a `tokenizer.json`; a tokenizer that loads encodes and decodes a
/// fixed text with special tokens.
pub fn tokenizer_json(data: &[u8]) {
    let Ok(tok) = Tokenizer::from_tokenizer_json(data) else {
        return;
    };
    let Ok(ids) = tok.encode("Hello, world! <s> 12 345  \u{e9}\u{1F600}\n", true, true) else {
        return;
    };
    check_ids(&tok, &ids);
    let _ = tok.decode(&ids);
    let _ = tok.detokenize(&ids, true, true);
    let _ = tok.decode(&[u32::MAX, tok.vocab_size() as u32]);
}

fn check_ids(tok: &Tokenizer, ids: &[u32]) {
    let n = tok.vocab_size();
    assert!(
        ids.iter().all(|&id| (id as usize) < n),
        "encode produced an id outside the vocabulary of {n}: {ids:?}"
    );
}

/// The real TinyStories-260K `tokenizer.json` (SentencePiece-style BPE with byte fallback,
/// Hugging Face form), loaded once.
pub(crate) fn stories() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = crate::testdata("hf/stories260K");
        match Tokenizer::from_hf_dir(&path) {
            Ok(t) => t,
            Err(e) => panic!("kiln-fuzz fixture {} does not load: {e}", path.display()),
        }
    })
}

/// Byte 0: bit 0 `add_special`, bit 1 `parse_special`, bit 2 chooses the input form: clear,
/// the rest is text to encode (then decoded again); set, the rest is little-endian `u32`
/// ids (any value) to decode, detokenize and stream-decode.
pub fn encode_decode(data: &[u8]) {
    let tok = stories();
    let (mode, rest) = crate::split_mode(data);
    let (add_special, parse_special) = (mode & 1 != 0, mode & 2 != 0);
    if mode & 4 == 0 {
        let text = String::from_utf8_lossy(rest);
        let Ok(ids) = tok.encode(&text, add_special, parse_special) else {
            return;
        };
        check_ids(tok, &ids);
        let _ = tok.decode(&ids);
        let mut stream = tok.stream_decoder();
        for &id in &ids {
            let _ = stream.push(id);
        }
    } else {
        let ids: Vec<u32> = rest
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let _ = tok.decode(&ids);
        let _ = tok.detokenize(&ids, add_special, parse_special);
        let mut stream = tok.stream_decoder();
        for &id in &ids {
            let _ = (stream.push(id), tok.token_bytes(id), tok.is_eog(id));
            let _ = (tok.is_control(id), tok.token_text(id));
        }
    }
}

/// The real templates: SmolLM2's and Qwen2.5-Coder's (from their GGUFs) and Gemma 3's.
pub(crate) fn templates() -> &'static [ChatTemplate] {
    static T: OnceLock<Vec<ChatTemplate>> = OnceLock::new();
    T.get_or_init(|| {
        let special = SpecialTokens {
            bos_token: Some("<s>".into()),
            eos_token: Some("</s>".into()),
            unk_token: Some("<unk>".into()),
            pad_token: None,
        };
        [
            crate::crate_file("kiln-fuzz/fixtures/smollm2-135m.jinja"),
            crate::crate_file("kiln-fuzz/fixtures/qwen2.5-coder-0.5b.jinja"),
            crate::crate_file("kiln-tokenizer/tests/fixtures/chat/gemma3.jinja"),
        ]
        .iter()
        .map(|path| {
            let source = String::from_utf8_lossy(&crate::read_fixture(path)).into_owned();
            match ChatTemplate::new(source, path.display().to_string(), special.clone()) {
                Ok(t) => t,
                Err(e) => panic!("kiln-fuzz fixture {} does not compile: {e}", path.display()),
            }
        })
        .collect()
    })
}

/// Byte 0: the template (mod 3), bit 7 `add_generation_prompt`. The rest is the messages
/// as JSON; a NUL byte in it splits off a tools JSON after it.
pub fn chat_template(data: &[u8]) {
    let (mode, rest) = crate::split_mode(data);
    let templates = templates();
    let tmpl = &templates[(mode & 0x7f) as usize % templates.len()];
    let text = String::from_utf8_lossy(rest);
    let (messages, tools) = match text.split_once('\0') {
        Some((m, t)) => (m, Some(t)),
        None => (&*text, None),
    };
    let Ok(mut conv) = Conversation::from_json(messages) else {
        return;
    };
    if let Some(t) = tools
        && conv.set_tools_json(t).is_err()
    {
        return;
    }
    let opts = RenderOptions {
        add_generation_prompt: mode & 0x80 != 0,
        template_name: None,
        now: Some(1_700_000_000),
    };
    let _ = tmpl.render(&conv, &opts);
}
