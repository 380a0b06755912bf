//! Why a request was refused or failed.

/// A refused submission or a failed request.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum EngineError {
    /// The prompt plus `max_tokens` does not fit the context.
    #[error(
        "the prompt has {prompt_tokens} tokens; with max_tokens {max_tokens} it exceeds the context of {n_ctx}"
    )]
    PromptTooLong {
        prompt_tokens: usize,
        max_tokens: usize,
        n_ctx: usize,
    },
    /// A request with no prompt token.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The waiting queue is full.
    #[error("the engine is overloaded: {waiting} requests waiting (at most {max_queue})")]
    QueueFull { waiting: usize, max_queue: usize },
    /// The engine is shutting down (or has stopped).
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// A request the engine cannot run (bad sampler settings, an empty stop string, …).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The model failed inside a step.
    #[error("model error: {0}")]
    Model(String),
    /// A panic inside this request's work (its step's forward pass, or its sampling).
    #[error("internal error (panic): {0}")]
    Panic(String),
}
