//! Why a request was refused or failed.

use std::sync::Arc;

use kiln_model::ModelError;
use kiln_sample::SampleError;

/// A refused submission or a failed request. Cheap to clone: a request's error goes to its
/// stream and, when one step fails many requests, to each of them.
#[derive(Debug, Clone)]
pub enum EngineError {
    /// The prompt plus `max_tokens` does not fit the context.
    PromptTooLong {
        prompt_tokens: usize,
        max_tokens: usize,
        n_ctx: usize,
    },
    /// A request with no prompt token.
    EmptyPrompt,
    /// The waiting queue is full.
    QueueFull { waiting: usize, max_queue: usize },
    /// The engine is shutting down (or has stopped).
    ShuttingDown,
    /// A request the engine cannot run (bad sampler settings, an empty stop string, …).
    InvalidRequest(String),
    /// The model failed: building the session, or inside a step. The model's error is kept
    /// whole (its [`std::error::Error::source`] chain included); every request of a failed
    /// step shares it.
    Model(Arc<ModelError>),
    /// The sampler could draw no token for this request.
    Sampling(SampleError),
    /// The engine could not start its threads (the scheduler thread, or the pool of
    /// `threads` workers the forward pass runs on).
    ThreadStart {
        what: String,
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// A panic inside this request's work (its step's forward pass, or its sampling).
    Panic(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::PromptTooLong {
                prompt_tokens,
                max_tokens,
                n_ctx,
            } => write!(
                f,
                "the prompt has {prompt_tokens} tokens; with max_tokens {max_tokens} it exceeds the context of {n_ctx}"
            ),
            EngineError::EmptyPrompt => f.write_str("the prompt is empty"),
            EngineError::QueueFull { waiting, max_queue } => write!(
                f,
                "the engine is overloaded: {waiting} requests waiting (at most {max_queue})"
            ),
            EngineError::ShuttingDown => f.write_str("the engine is shutting down"),
            EngineError::InvalidRequest(m) => write!(f, "invalid request: {m}"),
            EngineError::Model(e) => write!(f, "model error: {e}"),
            EngineError::Sampling(e) => write!(f, "sampling failed: {e}"),
            EngineError::ThreadStart { what, source } => write!(f, "cannot start {what}: {source}"),
            EngineError::Panic(m) => write!(f, "internal error (panic): {m}"),
        }
    }
}

/// Written out rather than derived so that [`std::error::Error::source`] of a
/// [`EngineError::Model`] is the [`ModelError`] itself (not the `Arc` around it), and
/// `downcast_ref::<ModelError>()` finds it.
impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Model(e) => Some(&**e),
            EngineError::Sampling(e) => Some(e),
            EngineError::ThreadStart { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

impl From<ModelError> for EngineError {
    fn from(e: ModelError) -> Self {
        EngineError::Model(Arc::new(e))
    }
}

/// Two errors are equal when they are the same kind with the same facts; the wrapped
/// model and thread errors (which are not comparable themselves) by what they say.
impl From<SampleError> for EngineError {
    fn from(e: SampleError) -> Self {
        EngineError::Sampling(e)
    }
}

impl PartialEq for EngineError {
    fn eq(&self, other: &Self) -> bool {
        use EngineError as E;
        match (self, other) {
            (
                E::PromptTooLong {
                    prompt_tokens: a,
                    max_tokens: b,
                    n_ctx: c,
                },
                E::PromptTooLong {
                    prompt_tokens: x,
                    max_tokens: y,
                    n_ctx: z,
                },
            ) => (a, b, c) == (x, y, z),
            (E::EmptyPrompt, E::EmptyPrompt) | (E::ShuttingDown, E::ShuttingDown) => true,
            (
                E::QueueFull {
                    waiting: a,
                    max_queue: b,
                },
                E::QueueFull {
                    waiting: x,
                    max_queue: y,
                },
            ) => (a, b) == (x, y),
            (E::InvalidRequest(a), E::InvalidRequest(b)) | (E::Panic(a), E::Panic(b)) => a == b,
            (E::Model(a), E::Model(b)) => Arc::ptr_eq(a, b) || a.to_string() == b.to_string(),
            (E::Sampling(a), E::Sampling(b)) => a == b,
            (E::ThreadStart { what: a, source: s }, E::ThreadStart { what: b, source: t }) => {
                a == b && s.to_string() == t.to_string()
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn model_errors_keep_their_source_and_message() {
        let model = ModelError::from(kiln_model::KvError::OutOfMemory {
            needed: 3,
            available: 1,
        });
        let text = model.to_string();
        let e = EngineError::from(model);
        assert_eq!(e.to_string(), format!("model error: {text}"));
        let source = e.source().expect("the model error is the source");
        assert_eq!(source.to_string(), text);
        assert!(matches!(
            source.downcast_ref::<ModelError>(),
            Some(ModelError::Kv(kiln_model::KvError::OutOfMemory {
                needed: 3,
                ..
            }))
        ));
        assert_eq!(e.clone(), e);
    }
}
