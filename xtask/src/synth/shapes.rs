//! The model shapes `cargo xtask synth` knows: every dimension of the real model (from its
//! Hugging Face `config.json`) except the vocabulary, which is the borrowed tokenizer's.

/// An architecture family: the GGUF architecture name, what its tensors and metadata look
/// like, and the shipped model whose tokenizer its shapes borrow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Llama 3: gated SiLU FFN, Llama 3 RoPE frequency factors (`rope_freqs.weight`).
    Llama,
    /// Qwen2: as Llama plus Q/K/V biases.
    Qwen2,
    /// Gemma 2: post-norms around attention and FFN, soft-capped scores and logits, a
    /// sliding window on every other layer.
    Gemma2,
    /// OLMoE: RMSNorm of Q and K over the whole projection, a mixture of experts.
    Olmoe,
    /// Qwen3-MoE: per-head RMSNorm of Q and K, a mixture of experts.
    Qwen3Moe,
}

impl Family {
    /// `general.architecture`.
    pub fn arch(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Gemma2 => "gemma2",
            Family::Olmoe => "olmoe",
            Family::Qwen3Moe => "qwen3moe",
        }
    }

    /// The known model (kiln-hub name) whose tokenizer and vocabulary the shape borrows.
    pub fn donor(self) -> &'static str {
        match self {
            Family::Llama => "smollm2-135m",
            Family::Qwen2 => "qwen2.5-coder-0.5b",
            Family::Gemma2 => "gemma3-270m",
            // OLMoE's own vocabulary is 50 304 (GPT-NeoX's); SmolLM2's 49 152 is the
            // nearest shipped one.
            Family::Olmoe => "smollm2-135m",
            // Qwen3 and Qwen2.5 share their 151 936-entry vocabulary.
            Family::Qwen3Moe => "qwen2.5-coder-0.5b",
        }
    }
}

/// Llama 3's RoPE frequency scaling (`rope_scaling` of type `llama3`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_context: f32,
}

impl Llama3Rope {
    /// The per-pair divisors of the rotation frequencies (`rope_freqs.weight`, `head_dim / 2`
    /// values): 1 for short wavelengths, `factor` for long ones, a smooth blend between.
    pub fn freq_factors(&self, head_dim: u64, theta: f32) -> Vec<f32> {
        let low_wavelen = self.original_context / self.low_freq_factor;
        let high_wavelen = self.original_context / self.high_freq_factor;
        (0..head_dim / 2)
            .map(|i| {
                let freq = theta.powf(-2.0 * i as f32 / head_dim as f32);
                let wavelen = 2.0 * std::f32::consts::PI / freq;
                if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    self.factor
                } else {
                    let smooth = (self.original_context / wavelen - self.low_freq_factor)
                        / (self.high_freq_factor - self.low_freq_factor);
                    1.0 / ((1.0 - smooth) / self.factor + smooth)
                }
            })
            .collect()
    }
}

/// The mixture-of-experts part of a shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    pub n_expert: u64,
    /// Experts per token (top-k).
    pub n_expert_used: u64,
    /// Inner size of one expert.
    pub n_ff_exp: u64,
}

/// One model shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub name: &'static str,
    pub family: Family,
    pub n_embd: u64,
    pub n_ff: u64,
    pub n_layer: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    pub rope_theta: f32,
    pub norm_eps: f32,
    /// The output projection is the token embedding (no `output.weight`).
    pub tied: bool,
    pub n_ctx_train: u64,
    pub llama3_rope: Option<Llama3Rope>,
    /// Experts in place of the dense FFN on every layer (`n_ff` is then only metadata).
    pub moe: Option<MoeShape>,
}

const LLAMA_3_2_ROPE: Llama3Rope = Llama3Rope {
    factor: 32.0,
    low_freq_factor: 1.0,
    high_freq_factor: 4.0,
    original_context: 8192.0,
};

const LLAMA_3_1_ROPE: Llama3Rope = Llama3Rope {
    factor: 8.0,
    ..LLAMA_3_2_ROPE
};

/// Every known shape.
pub const SHAPES: &[Shape] = &[
    Shape {
        name: "llama-3.2-1b",
        family: Family::Llama,
        n_embd: 2048,
        n_ff: 8192,
        n_layer: 16,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 64,
        rope_theta: 500_000.0,
        norm_eps: 1e-5,
        tied: true,
        n_ctx_train: 131_072,
        llama3_rope: Some(LLAMA_3_2_ROPE),
        moe: None,
    },
    Shape {
        name: "llama-3.2-3b",
        family: Family::Llama,
        n_embd: 3072,
        n_ff: 8192,
        n_layer: 28,
        n_head: 24,
        n_head_kv: 8,
        head_dim: 128,
        rope_theta: 500_000.0,
        norm_eps: 1e-5,
        tied: true,
        n_ctx_train: 131_072,
        llama3_rope: Some(LLAMA_3_2_ROPE),
        moe: None,
    },
    Shape {
        name: "llama-3.1-8b",
        family: Family::Llama,
        n_embd: 4096,
        n_ff: 14336,
        n_layer: 32,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        rope_theta: 500_000.0,
        norm_eps: 1e-5,
        tied: false,
        n_ctx_train: 131_072,
        llama3_rope: Some(LLAMA_3_1_ROPE),
        moe: None,
    },
    Shape {
        name: "qwen2.5-1.5b",
        family: Family::Qwen2,
        n_embd: 1536,
        n_ff: 8960,
        n_layer: 28,
        n_head: 12,
        n_head_kv: 2,
        head_dim: 128,
        rope_theta: 1_000_000.0,
        norm_eps: 1e-6,
        tied: true,
        n_ctx_train: 32_768,
        llama3_rope: None,
        moe: None,
    },
    Shape {
        name: "qwen2.5-3b",
        family: Family::Qwen2,
        n_embd: 2048,
        n_ff: 11008,
        n_layer: 36,
        n_head: 16,
        n_head_kv: 2,
        head_dim: 128,
        rope_theta: 1_000_000.0,
        norm_eps: 1e-6,
        tied: true,
        n_ctx_train: 32_768,
        llama3_rope: None,
        moe: None,
    },
    Shape {
        name: "qwen2.5-7b",
        family: Family::Qwen2,
        n_embd: 3584,
        n_ff: 18944,
        n_layer: 28,
        n_head: 28,
        n_head_kv: 4,
        head_dim: 128,
        rope_theta: 1_000_000.0,
        norm_eps: 1e-6,
        tied: false,
        n_ctx_train: 32_768,
        llama3_rope: None,
        moe: None,
    },
    Shape {
        name: "gemma-2-2b",
        family: Family::Gemma2,
        n_embd: 2304,
        n_ff: 9216,
        n_layer: 26,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 256,
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        tied: true,
        n_ctx_train: 8192,
        llama3_rope: None,
        moe: None,
    },
    // allenai/OLMoE-1B-7B-0924.
    Shape {
        name: "olmoe-1b-7b",
        family: Family::Olmoe,
        n_embd: 2048,
        n_ff: 1024,
        n_layer: 16,
        n_head: 16,
        n_head_kv: 16,
        head_dim: 128,
        rope_theta: 10_000.0,
        norm_eps: 1e-5,
        tied: false,
        n_ctx_train: 4096,
        llama3_rope: None,
        moe: Some(MoeShape {
            n_expert: 64,
            n_expert_used: 8,
            n_ff_exp: 1024,
        }),
    },
    // Qwen/Qwen3-30B-A3B.
    Shape {
        name: "qwen3-30b-a3b",
        family: Family::Qwen3Moe,
        n_embd: 2048,
        n_ff: 6144,
        n_layer: 48,
        n_head: 32,
        n_head_kv: 4,
        head_dim: 128,
        rope_theta: 1_000_000.0,
        norm_eps: 1e-6,
        tied: false,
        n_ctx_train: 40_960,
        llama3_rope: None,
        moe: Some(MoeShape {
            n_expert: 128,
            n_expert_used: 8,
            n_ff_exp: 768,
        }),
    },
];

/// Gemma 2's attention-score and final-logit soft caps and its sliding window.
pub const GEMMA2_ATTN_SOFTCAP: f32 = 50.0;
pub const GEMMA2_FINAL_SOFTCAP: f32 = 30.0;
pub const GEMMA2_SLIDING_WINDOW: u32 = 4096;

/// The shape called `name`.
pub fn shape(name: &str) -> Option<&'static Shape> {
    SHAPES.iter().find(|s| s.name == name)
}

/// The known shape names, comma-separated (for errors).
pub fn shape_names() -> String {
    SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}
