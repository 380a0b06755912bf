//! KV cache arguments: `--kv-type K[,V] --kv-block-size N --kv-memory SIZE
//! --kv-rotation on|off --samples N`,
//! and their translation into a session's [`KvOptions`].

use std::sync::Arc;

use kiln_model::{KvOptions, KvType, Model, ModelError, Session};

use crate::error::CliError;

#[derive(clap::Args, Debug, Clone)]
pub struct KvArgs {
    /// KV cache types, K[,V]: f32, f16, q8_0, q4_0, q4_1 or q5_0.
    #[arg(long = "kv-type", default_value = "f16", value_parser = parse_kv_types)]
    pub kv_type: (KvType, KvType),
    /// Tokens per KV cache page.
    #[arg(long = "kv-block-size", default_value_t = 16)]
    pub kv_block_size: usize,
    /// Memory for the KV cache, e.g. 64M, 1.5G, 1073741824 (default: enough for the
    /// context of every continuation).
    #[arg(long = "kv-memory", value_parser = parse_size)]
    pub kv_memory: Option<usize>,
    /// Store quantized K/V rotated by a Walsh–Hadamard transform, as llama.cpp does (much
    /// closer to f16 for q4/q5 keys); no effect on f16/f32 caches.
    #[arg(long = "kv-rotation", value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub kv_rotation: bool,
    /// Continuations of the prompt, sharing its KV pages; continuation i samples with a seed
    /// derived from (--seed, i) (continuation 0 uses --seed itself).
    #[arg(long, default_value_t = 1)]
    pub samples: usize,
}

/// `on` / `off` (also `true`/`false`, `1`/`0`).
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("'{s}' is neither on nor off")),
    }
}

fn parse_kv_types(s: &str) -> Result<(KvType, KvType), String> {
    KvType::parse_pair(s).map_err(|e| e.to_string())
}

/// Parses a byte count: a number with an optional K/M/G/T suffix (powers of 1024; `KiB`,
/// `MB`, … accepted), fractions allowed (`1.5G`).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 512M, 1.5G, 1048576)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0f64.powi(4),
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{s}' (use K, M, G or T)"
            ));
        }
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 1.0 || bytes > usize::MAX as f64 {
        return Err(format!("'{s}' is not a usable size"));
    }
    Ok(bytes as usize)
}

/// The seed of continuation `i`: `seed` itself for the first, a SplitMix64 mix of
/// `(seed, i)` for the others, so continuations are independent yet reproducible.
pub fn sample_seed(seed: u64, i: usize) -> u64 {
    if i == 0 {
        return seed;
    }
    let mut z = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl KvArgs {
    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), CliError> {
        if self.samples == 0 {
            return Err(CliError::Usage("--samples must be at least 1".into()));
        }
        if self.kv_block_size == 0 {
            return Err(CliError::Usage("--kv-block-size must be at least 1".into()));
        }
        Ok(())
    }

    /// The cache options for a prompt of `prompt_len` tokens in a context of `n_ctx`: the
    /// requested budget, or room for the prompt once plus every continuation's own pages.
    pub fn options(&self, model: &Model, n_ctx: usize, prompt_len: usize) -> KvOptions {
        let mut o = KvOptions {
            k_type: self.kv_type.0,
            v_type: self.kv_type.1,
            block_size: self.kv_block_size,
            memory: self.kv_memory,
            rotation: self.kv_rotation,
        };
        if o.memory.is_none() {
            let shape = o.config(model.config(), 0);
            let total = shape.blocks_for_tokens(n_ctx);
            // Continuations share the prompt's full pages and copy its last one.
            let shared = prompt_len / shape.block_size;
            let blocks = total + (self.samples - 1) * (total - shared);
            o.memory = Some(blocks * shape.block_bytes());
        }
        o
    }

    /// A session for `model` with these options.
    pub fn session(
        &self,
        model: &Arc<Model>,
        n_ctx: usize,
        n_batch: usize,
        prompt_len: usize,
    ) -> Result<Session, ModelError> {
        Session::with_kv(
            Arc::clone(model),
            n_ctx,
            n_batch,
            &self.options(model, n_ctx, prompt_len),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn kv_types_parse_and_name_the_supported_ones() {
        assert_eq!(parse_kv_types("q8_0,f16"), Ok((KvType::Q8_0, KvType::F16)));
        let e = parse_kv_types("q8_0,bf16").expect_err("bf16");
        assert!(
            e.contains("supported: f32, f16, q8_0, q4_0, q4_1, q5_0"),
            "{e}"
        );
    }

    #[test]
    fn rotation_switch_parses_on_and_off() {
        assert_eq!(parse_on_off("on"), Ok(true));
        assert_eq!(parse_on_off("OFF"), Ok(false));
        assert!(parse_on_off("maybe").is_err());
    }

    #[test]
    fn continuation_seeds_are_distinct_and_the_first_is_the_seed() {
        assert_eq!(sample_seed(42, 0), 42);
        let s: std::collections::HashSet<u64> = (0..100).map(|i| sample_seed(42, i)).collect();
        assert_eq!(s.len(), 100);
    }
}
