//! The JSON-schema and GBNF compilers, and the matcher on what they compile.

use std::sync::{Arc, OnceLock};

use kiln_sample::{Grammar, Matcher, TokenMask, Vocab};

/// A small vocabulary: every single byte, some JSON-ish multi-byte pieces, and an
/// end-of-generation token (the last id).
fn vocab() -> Arc<Vocab> {
    static V: OnceLock<Arc<Vocab>> = OnceLock::new();
    Arc::clone(V.get_or_init(|| {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for piece in [
            "true", "false", "null", "\"", "{\"", "\": ", ", ", "\"}", "[", "]", "0", "12", "-1",
            "e+5", ".5", "abc", "\\n", "\\u00e9", "é", "😀", " ",
        ] {
            tokens.push(piece.as_bytes().to_vec());
        }
        tokens.push(Vec::new());
        let eog = tokens.len() as u32 - 1;
        Arc::new(Vocab::new(tokens, &[eog]))
    }))
}

/// Byte 0 bit 0: clear, the rest is a JSON schema; set, GBNF. A grammar that compiles
/// drives a matcher for up to 64 tokens, always taking the first allowed one.
pub fn grammar(data: &[u8]) {
    let (mode, rest) = crate::split_mode(data);
    let Ok(src) = std::str::from_utf8(rest) else {
        return;
    };
    let compiled = if mode & 1 == 0 {
        Grammar::from_json_schema(src)
    } else {
        Grammar::from_gbnf(src)
    };
    let Ok(g) = compiled else {
        return;
    };
    let _ = (g.num_states(), g.rule_names());
    let vocab = vocab();
    let g = Arc::new(g);
    if let Ok(mut bytes) = Matcher::new(Arc::clone(&g), Arc::clone(&vocab)) {
        let _ = bytes.accept_bytes(b"{\"a\": [1, \"x\"]}");
        let _ = (bytes.is_accepting(), bytes.can_continue());
    }
    let Ok(mut m) = Matcher::new(g, Arc::clone(&vocab)) else {
        return;
    };
    let mut mask = TokenMask::new(vocab.len());
    for _ in 0..64 {
        if m.fill_mask(&mut mask).is_err() {
            return;
        }
        let Some(id) = mask.iter().next() else {
            return;
        };
        if m.accept_token(id).is_err() || m.is_finished() {
            return;
        }
    }
}
