//! The command's error: one variant per crate it composes, so messages keep their facts.

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Hub(#[from] kiln_hub::HubError),
    #[error(transparent)]
    Format(#[from] kiln_format::FormatError),
    #[error(transparent)]
    Model(#[from] kiln_model::ModelError),
    #[error(transparent)]
    Tokenizer(#[from] kiln_tokenizer::TokenizerError),
    #[error(transparent)]
    Sampler(#[from] kiln_sample::SamplerConfigError),
    #[error(transparent)]
    Sample(#[from] kiln_sample::SampleError),
    #[error(transparent)]
    Grammar(#[from] kiln_sample::MatchError),
    #[error(transparent)]
    Spec(#[from] kiln_spec::SpecError),
    #[error(transparent)]
    Bench(#[from] kiln_bench::BenchError),
    #[error(transparent)]
    Chat(#[from] kiln_tokenizer::chat::ChatError),
    #[error(transparent)]
    Tls(#[from] kiln_server::tls::TlsError),
    #[error("{0}")]
    Usage(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
