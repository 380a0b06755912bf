//! kiln-model
