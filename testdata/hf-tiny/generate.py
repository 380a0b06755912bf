#!/usr/bin/env python3
"""Tiny random Hugging Face checkpoints of every architecture Kiln supports, with
transformers' logits as the oracle (testdata/hf-tiny/<name>/{config.json,
model.safetensors, golden.json}).

Needs: pip install torch transformers safetensors (CPU). Deterministic: fixed seeds,
float32, eager attention. Weights are drawn wider than transformers' default init so that
every block moves the logits (norm weights near 1, or near 0 for Gemma's `1 + w`).
golden.json: the input ids and the logits of one forward pass over all of them
(`logits[t][v]`, float32), plus the dtype the weights are stored in.
usage: python generate.py [OUTDIR]"""
import json
import math
import os
import sys

import torch
import transformers as tf

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
IDS = [1, 17, 42, 5, 33, 60, 2, 9, 51, 23, 8, 47, 30, 11]
VOCAB = 64

COMMON = dict(vocab_size=VOCAB, tie_word_embeddings=False)
MODELS = {
    # GQA, Llama 3 RoPE scaling with a short original context so the factors bite.
    "llama": (tf.LlamaConfig, dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              rms_norm_eps=1e-5, rope_theta=10000.0,
              rope_scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0,
                                high_freq_factor=4.0, original_max_position_embeddings=16)),
              torch.float32),
    # Sliding window on every layer (4 < sequence length).
    "mistral": (tf.MistralConfig, dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=1, sliding_window=4,
                max_position_embeddings=64, head_dim=8), torch.float32),
    # Q/K/V biases, GQA, tied head.
    "qwen2": (tf.Qwen2Config, dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              rope_theta=1e6, tie_word_embeddings=True), torch.float32),
    # head_dim 16 × 4 heads = q_dim 64 ≠ hidden 32; per-head Q/K norm; stored as BF16.
    "qwen3": (tf.Qwen3Config, dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=64), torch.bfloat16),
    # q_dim 64 ≠ hidden 48; query_pre_attn_scalar ≠ head_dim; both soft-caps small enough
    # to bite; sliding window 4 on layers 0 and 2.
    "gemma2": (tf.Gemma2Config, dict(hidden_size=48, intermediate_size=64, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               query_pre_attn_scalar=24, attn_logit_softcapping=1.0,
               final_logit_softcapping=2.0, sliding_window=4, max_position_embeddings=64,
               tie_word_embeddings=True), torch.float32),
    # Q/K norms, local/global RoPE bases, a sliding window on layers 0 and 1.
    "gemma3": (tf.Gemma3TextConfig, dict(hidden_size=32, intermediate_size=64,
               num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
               query_pre_attn_scalar=16, sliding_window=4, max_position_embeddings=64,
               layer_types=["sliding_attention", "sliding_attention", "full_attention"],
               tie_word_embeddings=True), torch.float32),
    # Fused qkv_proj and gate_up_proj; stored as F16.
    "phi3": (tf.Phi3Config, dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             pad_token_id=0, bos_token_id=1, eos_token_id=2), torch.float16),
    # Parallel attention + FFN, LayerNorm with bias, partial rotary (8 of 16), GELU.
    "phi2": (tf.PhiConfig, dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=2, partial_rotary_factor=0.5, max_position_embeddings=64),
             torch.float32),
    # Learned positions, Conv1D weights, LayerNorm, GELU, tied head.
    "gpt2": (tf.GPT2Config, dict(n_embd=32, n_layer=2, n_head=4, n_positions=32,
             tie_word_embeddings=True), torch.float32),
}


def randomize(model, gemma):
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if "norm" in name or ".ln_" in name or name.endswith("ln_f.weight"):
                if name.endswith("bias"):
                    p.copy_(0.1 * r)
                else:
                    p.copy_((0.0 if gemma else 1.0) + 0.2 * r)
            elif name.endswith("bias"):
                p.copy_(0.2 * r)
            elif "embed" in name or "wte" in name or "wpe" in name:
                p.copy_(0.8 * r)
            else:
                fan_in = p.shape[1] if p.dim() == 2 else p.shape[0]
                if "c_attn" in name or "c_proj" in name or "c_fc" in name:
                    fan_in = p.shape[0]  # Conv1D: [in, out]
                p.copy_(r * 1.5 / math.sqrt(fan_in))


def main():
    for name, (cls, kw, dtype) in MODELS.items():
        args = dict(COMMON)
        args.update(kw)
        cfg = cls(**args)
        cfg._attn_implementation = "eager"
        torch.manual_seed(0)
        model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
        randomize(model, name.startswith("gemma"))
        model = model.to(dtype).to(torch.float32).eval()
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        model.to(dtype).save_pretrained(d, safe_serialization=True)
        model = model.to(torch.float32)
        gc = os.path.join(d, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)
        with torch.no_grad():
            logits = model(torch.tensor([IDS])).logits[0]
        golden = {
            "generator": f"transformers {tf.__version__}, torch {torch.__version__}, CPU fp32, eager attention",
            "dtype": str(dtype).replace("torch.", ""),
            "ids": IDS,
            "logits": [[float(v) for v in row] for row in logits],
        }
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f)
        size = os.path.getsize(os.path.join(d, "model.safetensors"))
        print(f"{name}: {size} bytes, argmax {logits.argmax(-1).tolist()}")


if __name__ == "__main__":
    main()
