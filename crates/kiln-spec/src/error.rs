//! What can go wrong when speculating.

use kiln_model::ModelError;
use kiln_sample::SampleError;

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(
        "the draft model's vocabulary has {draft} tokens, the target's {target}: a draft model must share the target's vocabulary"
    )]
    VocabSize { target: usize, draft: usize },
    #[error(
        "the draft model's token {id} is {draft:?}, the target's is {target:?}: a draft model must share the target's vocabulary"
    )]
    VocabToken {
        id: u32,
        target: String,
        draft: String,
    },
    #[error(
        "the draft model ends generation on tokens {draft:?}, the target on {target:?}: a draft model must share the target's vocabulary"
    )]
    VocabEog { target: Vec<u32>, draft: Vec<u32> },
    #[error(
        "the draft model produces {draft} logits per token, the target {target}: a draft model must share the target's vocabulary"
    )]
    LogitCount { target: usize, draft: usize },
    #[error("invalid speculative decoding setting: {0}")]
    Config(String),
    #[error("the draft model failed: {0}")]
    Draft(#[source] ModelError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Sample(#[from] SampleError),
}
