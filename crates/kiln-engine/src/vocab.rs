//! The tokenizer as the sampler sees it.

use std::sync::Arc;

use kiln_sample::Vocab;
use kiln_tokenizer::Tokenizer;

/// The vocabulary a [`kiln_sample::Sampler`] masks and a grammar matches against: each
/// token's bytes as the tokenizer renders them, none for control tokens (a grammar never
/// produces them), and the end-of-generation ids. The engine builds its samplers' vocabulary
/// with this; `kiln generate` and `kiln chat` use it too, so all agree.
pub fn sampler_vocab(tok: &Tokenizer) -> Arc<Vocab> {
    let n = tok.vocab_size() as u32;
    Arc::new(Vocab::new(
        (0..n).map(|id| {
            if tok.is_control(id) {
                &[][..]
            } else {
                tok.token_bytes(id)
            }
        }),
        tok.eog_ids(),
    ))
}
