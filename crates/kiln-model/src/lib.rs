//! # kiln-model
//!
//! Model architectures and the forward pass: reads a model's configuration from GGUF
//! metadata, binds its weight tensors (left quantized in the mapped file), and evaluates
//! batches of tokens into logits.
//!
//! **Owns:** architecture definitions (one module each, in [`arch`]), the shared decoder
//! blocks (attention, feed-forward, norms, RoPE), per-sequence sessions.
//!
//! **Must never:** copy weight matrices to f32, allocate per generated token, run an
//! architecture it does not know as another one, tokenize text, or choose tokens.

mod arch;
mod attention;
mod config;
mod error;
mod kv;
mod model;
pub mod ops;
mod trace;
mod weights;

pub use arch::SUPPORTED_ARCHITECTURES;
pub use config::{Activation, ModelConfig, RopeStyle};
pub use error::ModelError;
pub use model::{Logits, Model, Session};
