//! kiln-tokenizer
