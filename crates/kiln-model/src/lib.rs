//! # kiln-model
//!
//! Model architectures and the forward pass: reads a model's configuration from GGUF
//! metadata or a Hugging Face `config.json`, binds its weight tensors (left in the mapped
//! GGUF or safetensors file, or quantized once on request), and evaluates batches of tokens
//! into logits.
//!
//! **Owns:** architecture definitions (one module each, in `arch`), the Hugging Face
//! config and tensor-name translation (`hf`), quantize-on-load, the shared decoder
//! blocks (attention, feed-forward, norms, RoPE), per-sequence sessions.
//!
//! **Must never:** copy weight matrices to f32, allocate per generated token, run an
//! architecture it does not know as another one, tokenize text, or choose tokens.

mod arch;
mod attention;
mod blocks;
mod config;
pub mod convert;
mod error;
mod hf;
mod kv;
mod model;
mod moe;
mod pooling;
pub mod quantize;
mod spec;
mod trace;
mod weights;

pub use arch::{ARCHITECTURES, ArchDescriptor, supported_architectures, supported_hf_model_types};
pub use config::{Activation, ModelConfig, NormKind, RopeStyle, SUPPORTED_ROPE_SCALING};
pub use error::ModelError;
pub use kiln_kv::{KvCache, KvError, KvStats, KvType, SeqId};
pub use kiln_quant::quantize_types;
pub use kv::{KvOptions, MemoryPlan};
pub use model::{BatchSeq, ExpertsInfo, Logits, Model, PROMPT_ATTENTION_MIN_ROWS, Session};
pub use pooling::{Pooling, SUPPORTED_POOLING, normalize as normalize_embedding};
pub use trace::{TracePoint, TraceSink};
pub use weights::{LoadOptions, SourceKind};
