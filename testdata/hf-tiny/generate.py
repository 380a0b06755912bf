#!/usr/bin/env python3
"""Tiny random Hugging Face checkpoints of every architecture Kiln supports or is about to,
with transformers' logits as the oracle (testdata/hf-tiny/<name>/{config.json,
model.safetensors, golden.json}).

Needs: pip install torch transformers safetensors (CPU). Deterministic: fixed seeds,
float32, eager attention and eager experts. Weights are drawn wider than transformers'
default init so that every block moves the logits (norm weights near 1, or near 0 for
Gemma's `1 + w`).
golden.json: the input ids and the logits of one forward pass over all of them
(`logits[t][v]`, float32), plus the dtype the weights are stored in.

Two families of fixtures:
- MODELS: vocab 64, no tokenizer (the first fixtures; Kiln's safetensors path only).
- MODELS_SPM: vocab 512 with the 512-token Llama sentencepiece tokenizer of
  testdata/hf/stories260K copied in, so that llama.cpp's convert_hf_to_gguf.py accepts the
  directory and the same checkpoint also has a GGUF-path reference (llamacpp.json, written by
  llamacpp_refs.py; see README.md). Their ids are real text ("Once upon a time, there was a
  little"), and their logits are written with float32's shortest round-trip digits.

Generation is per name, so adding a fixture never rewrites the others' bytes:
usage: python generate.py [--out OUTDIR] NAME... | --all"""
import argparse
import json
import math
import os
import shutil

import torch
import transformers as tf

HERE = os.path.dirname(os.path.abspath(__file__))
IDS = [1, 17, 42, 5, 33, 60, 2, 9, 51, 23, 8, 47, 30, 11]
VOCAB = 64
# "<s> Once upon a time, there was a little" in the SPM tokenizer (10 ids keep the two
# full-logit JSON files of a vocab-512 fixture near 55 KB each).
IDS_SPM = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376]
VOCAB_SPM = 512
TOKENIZER_DIR = os.path.join(HERE, "..", "hf", "stories260K")
TOKENIZER_FILES = ["tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                   "special_tokens_map.json"]

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


# llama.cpp's graphs fix some choices the Hugging Face configs leave open; these fixtures use
# the values llama.cpp hard-codes, so one checkpoint is a reference for both paths:
# top-k renormalisation on for qwen3moe and Mixtral, off for qwen2moe and OLMoE; SmolLM3
# drops RoPE on every 4th layer; Granite has no separate head_dim.
COMMON_SPM = dict(vocab_size=VOCAB_SPM, tie_word_embeddings=False, bos_token_id=1,
                  eos_token_id=2, rms_norm_eps=1e-6, max_position_embeddings=64)
MODELS_SPM = {
    # Stored as BF16 like the real checkpoints (exact: the logits come from the BF16-rounded
    # weights, and the f32 GGUF widens them), except Granite (F32), to keep each folder
    # under 300 KB with two full-logit JSON files.
    # 8 experts, top-2, renormalised top-k weights (norm_topk_prob), per-head Q/K norm,
    # head_dim 16 × 4 heads = q_dim 64 ≠ hidden 32, expert FFN 16 ≠ dense FFN.
    "qwen3moe": (tf.Qwen3MoeConfig, dict(hidden_size=32, intermediate_size=48,
                 moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                 rope_theta=1e6), torch.bfloat16),
    # 4 routed experts, top-2, weights not renormalised, plus a shared expert (FFN 24)
    # scaled by sigmoid(shared_expert_gate · x); Q/K/V biases.
    "qwen2moe": (tf.Qwen2MoeConfig, dict(hidden_size=32, intermediate_size=48,
                 moe_intermediate_size=16, shared_expert_intermediate_size=24,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                 decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1e6),
                 torch.bfloat16),
    # Llama with 4 experts, top-2 (softmax over the top-2 router logits), GQA.
    "mixtral": (tf.MixtralConfig, dict(hidden_size=32, intermediate_size=16,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
                rope_theta=1e6), torch.bfloat16),
    # 8 experts, top-2, weights not renormalised; Q/K RMSNorm over the whole projection
    # (not per head); MHA.
    "olmoe": (tf.OlmoeConfig, dict(hidden_size=32, intermediate_size=16, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=4, num_experts=8,
              num_experts_per_tok=2, norm_topk_prob=False, rms_norm_eps=1e-5),
              torch.bfloat16),
    # Llama-shaped with RoPE skipped on every 4th layer (layer 3 of 4: no_rope_layers
    # [1, 1, 1, 0]), GQA, tied head.
    "smollm3": (tf.SmolLM3Config, dict(hidden_size=32, intermediate_size=48,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                no_rope_layer_interval=4, use_sliding_window=False, rope_theta=1e6,
                pad_token_id=None, tie_word_embeddings=True), torch.bfloat16),
    # Norms after attention and after the FFN (no pre-norms), Q/K RMSNorm over the whole
    # projection; GQA.
    "olmo2": (tf.Olmo2Config, dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rope_theta=5e5), torch.bfloat16),
    # Llama with multipliers that all differ from 1 and from the usual defaults: embeddings
    # × 0.6, residual branches × 1.7, attention scale 0.3 (not 1/sqrt(head_dim) = 0.35),
    # logits ÷ 4; tied head. (A large embedding multiplier, as the real models use, would
    # make the tied head echo the input token here.)
    "granite": (tf.GraniteConfig, dict(hidden_size=32, intermediate_size=48,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                embedding_multiplier=0.6, residual_multiplier=1.7, attention_multiplier=0.3,
                logits_scaling=4.0, rope_theta=1e4, tie_word_embeddings=True), torch.float32),
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
            elif p.dim() == 3:  # fused experts: [experts, out, in]
                p.copy_(r * 1.5 / math.sqrt(p.shape[-1]))
            else:
                fan_in = p.shape[1] if p.dim() == 2 else p.shape[0]
                if "c_attn" in name or "c_proj" in name or "c_fc" in name:
                    fan_in = p.shape[0]  # Conv1D: [in, out]
                p.copy_(r * 1.5 / math.sqrt(fan_in))


def generate(out, name):
    spm = name in MODELS_SPM
    cls, kw, dtype = MODELS_SPM[name] if spm else MODELS[name]
    ids = IDS_SPM if spm else IDS
    args = dict(COMMON_SPM if spm else COMMON)
    args.update(kw)
    cfg = cls(**args)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    extra = dict(experts_implementation="eager") if spm else {}
    model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", **extra)
    randomize(model, name.startswith("gemma"))
    model = model.to(dtype).to(torch.float32).eval()
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.to(dtype).save_pretrained(d, safe_serialization=True)
    model = model.to(torch.float32)
    if dtype != torch.float32:
        # `.to(dtype)` also rounds float buffers such as RoPE's inverse frequencies, which a
        # loader computes afresh in f32; evaluate what a loader sees instead. (The qwen3 and
        # phi3 golden.json predate this: their RoPE frequencies were rounded to BF16/F16,
        # which moves their logits by up to 0.0017/0.0021. f32 fixtures are unaffected.)
        model = tf.AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager",
            **(dict(experts_implementation="eager") if spm else {})).eval()
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    if spm:
        for f in TOKENIZER_FILES:
            shutil.copyfile(os.path.join(TOKENIZER_DIR, f), os.path.join(d, f))
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    golden = {
        "generator": f"transformers {tf.__version__}, torch {torch.__version__}, CPU fp32, eager attention",
        "dtype": str(dtype).replace("torch.", ""),
        "ids": ids,
        "logits": [[float(str(v)) if spm else float(v) for v in row.numpy()] for row in logits],
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f)
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    print(f"{name}: {size} bytes, argmax {logits.argmax(-1).tolist()}")


def main():
    names = list(MODELS) + list(MODELS_SPM)
    ap = argparse.ArgumentParser(
        description="Write tiny random Hugging Face checkpoints with transformers' logits.")
    ap.add_argument("--out", default=HERE, help="parent directory of the fixture folders")
    ap.add_argument("--all", action="store_true", help="generate every fixture")
    ap.add_argument("names", nargs="*", metavar="NAME", help=", ".join(names))
    a = ap.parse_args()
    todo = names if a.all else a.names
    unknown = [n for n in todo if n not in names]
    if unknown or not todo:
        what = f"unknown fixture(s) {', '.join(unknown)}; " if unknown else ""
        ap.error(f"{what}name one or more of: {', '.join(names)} (or --all)")
    for name in todo:
        generate(a.out, name)


if __name__ == "__main__":
    main()
