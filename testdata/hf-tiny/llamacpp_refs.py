#!/usr/bin/env python3
"""GGUF-path references for the vocab-512 fixtures of generate.py (MODELS_SPM): convert each
checkpoint to an f32 GGUF with llama.cpp's own convert_hf_to_gguf.py, evaluate the fixture's
ids with llama.cpp, and write testdata/hf-tiny/<name>/llamacpp.json.

llama.cpp is a yardstick outside this repository. Needs a llama.cpp source tree (for
convert_hf_to_gguf.py and gguf-py) and a program linked against its libllama that loads a
GGUF, evaluates the comma-separated ids given on its command line in one batch with logits
for every position (context 256, default context parameters otherwise: f16 KV cache, flash
attention `auto`, 2 threads) and prints
`{"n_vocab":N,"flash_attn":"..","threads":T,"ids":[..],"logits":[[..],..]}`; with
`--fa off --kv-f32 1` it runs without flash attention and with an f32 KV cache instead.

llamacpp.json: the ids, llama.cpp's logits (`logits[t][v]`, float32 shortest digits), the
llama.cpp build, the converter command, the GGUF's size and sha256, and `vs_transformers`:
how far llama.cpp's logits are from transformers' (golden.json) on the same checkpoint —
the largest |Δ logit| over all positions and the vocabulary, and the largest |Δ log-prob|
over each position's top-10 tokens (union of both sides' top 10). That is the noise floor
a Kiln comparison on the fixture can be held to. `vs_transformers_exact_attention` gives the
same two figures for llama.cpp without flash attention and with an f32 KV cache: what is left
once llama.cpp's f16 attention roundings are taken out (about 1e-5: the two implementations
agree on every architecture).

Converter route: llama.cpp's converter classes for qwen2moe, qwen3moe, olmoe and olmo2 only
accept a byte-level BPE tokenizer whose pre-tokenizer hash it knows (plain runs stop with
"NotImplementedError: BPE pre-tokenizer was not recognized - update
get_vocab_base_pre()"); no tokenizer that small is known to it. For those four the
converter runs with its base class's `set_vocab` pointed at its own sentencepiece path
(`_set_vocab_sentencepiece`, the path its dense Qwen2 class tries first). Only the
tokenizer metadata differs; every tensor and hyperparameter goes through the converter
unchanged, and no token text enters the logits.

usage: python llamacpp_refs.py --llama-cpp DIR --refdump PROG --build TAG
                               [--gguf-dir DIR] [NAME...]   (default: every MODELS_SPM name)"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ["qwen3moe", "qwen2moe", "mixtral", "olmoe", "smollm3", "olmo2", "granite"]
SPM_VOCAB_ROUTE = {"qwen3moe", "qwen2moe", "olmoe", "olmo2"}
SHIM = (
    "import runpy, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from conversion.base import TextModel\n"
    "TextModel.set_vocab = lambda self: self._set_vocab_sentencepiece()\n"
    "script = sys.argv[1] + '/convert_hf_to_gguf.py'\n"
    "sys.argv = [script] + sys.argv[2:]\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


def log_softmax(row):
    row = np.asarray(row, dtype=np.float64)
    m = row.max()
    return row - m - math.log(np.exp(row - m).sum())


def compare(ref, got):
    """(max |Δ logit|, max |Δ log-prob| over each position's top-10 union)."""
    max_abs = 0.0
    max_lp = 0.0
    for r, g in zip(ref, got):
        r = np.asarray(r, dtype=np.float64)
        g = np.asarray(g, dtype=np.float64)
        max_abs = max(max_abs, float(np.abs(r - g).max()))
        top = set(np.argsort(-r)[:10].tolist()) | set(np.argsort(-g)[:10].tolist())
        lr, lg = log_softmax(r), log_softmax(g)
        max_lp = max(max_lp, max(abs(lr[t] - lg[t]) for t in top))
    return max_abs, max_lp


def convert(llama_cpp, name, outfile):
    args = [name, "--outtype", "f32", "--outfile", outfile]
    env = dict(os.environ, PYTHONPATH=os.path.join(llama_cpp, "gguf-py"))
    if name in SPM_VOCAB_ROUTE:
        cmd = [sys.executable, "-c", SHIM, llama_cpp] + args
        shown = ("convert_hf_to_gguf.py " + " ".join(args[:1] + ["--outtype", "f32"])
                 + " with TextModel.set_vocab = _set_vocab_sentencepiece (see llamacpp_refs.py)")
    else:
        cmd = [sys.executable, os.path.join(llama_cpp, "convert_hf_to_gguf.py")] + args
        shown = "convert_hf_to_gguf.py " + " ".join(args[:1] + ["--outtype", "f32"])
    r = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: convert_hf_to_gguf.py failed:\n{r.stderr[-3000:]}")
    return shown


def main():
    ap = argparse.ArgumentParser(
        description="llama.cpp references (llamacpp.json) for the vocab-512 fixtures.")
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree")
    ap.add_argument("--refdump", required=True, help="the logits-dumping program (see above)")
    ap.add_argument("--build", required=True, help="llama.cpp build tag, e.g. b10573")
    ap.add_argument("--gguf-dir", help="keep the converted GGUFs here")
    ap.add_argument("names", nargs="*", metavar="NAME", help=", ".join(NAMES))
    a = ap.parse_args()
    for name in a.names or NAMES:
        if name not in NAMES:
            ap.error(f"unknown fixture {name}; known: {', '.join(NAMES)}")
        golden = json.load(open(os.path.join(HERE, name, "golden.json")))
        with tempfile.TemporaryDirectory() as tmp:
            gguf = os.path.join(a.gguf_dir or tmp, f"{name}.gguf")
            shown = convert(os.path.abspath(a.llama_cpp), name, gguf)
            data = open(gguf, "rb").read()
            ids = ",".join(str(i) for i in golden["ids"])
            r = subprocess.run([a.refdump, gguf, ids], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{name}: llama.cpp failed:\n{r.stderr[-3000:]}")
            r32 = subprocess.run([a.refdump, gguf, ids, "--fa", "off", "--kv-f32", "1"],
                                 capture_output=True, text=True)
            if r32.returncode != 0:
                sys.exit(f"{name}: llama.cpp (f32 KV) failed:\n{r32.stderr[-3000:]}")
        dump = json.loads(r.stdout)
        assert dump["ids"] == golden["ids"], (dump["ids"], golden["ids"])
        logits = [[float(str(v)) for v in np.asarray(row, dtype=np.float32)]
                  for row in dump["logits"]]
        max_abs, max_lp = compare(golden["logits"], logits)
        exact_abs, exact_lp = compare(golden["logits"], json.loads(r32.stdout)["logits"])
        ref = {
            "generator": f"llama.cpp {a.build}, CPU, one batch of all ids, context 256, "
                         f"f16 KV cache, flash attention {dump['flash_attn']}, "
                         f"{dump['threads']} threads",
            "converter": f"llama.cpp {a.build}'s {shown}",
            "gguf": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
            "vs_transformers": {"max_abs_logit": float(f"{max_abs:.3g}"),
                                "max_abs_top10_logprob": float(f"{max_lp:.3g}")},
            "vs_transformers_exact_attention": {"max_abs_logit": float(f"{exact_abs:.3g}"),
                                                "max_abs_top10_logprob": float(f"{exact_lp:.3g}")},
            "ids": dump["ids"],
            "logits": logits,
        }
        with open(os.path.join(HERE, name, "llamacpp.json"), "w") as f:
            json.dump(ref, f)
        same = sum(int(np.argmax(g) == np.argmax(t)) for g, t in zip(golden["logits"], logits))
        print(f"{name}: max |Δlogit| {max_abs:.3g}, max top-10 |Δlogprob| {max_lp:.3g} "
              f"(f32 KV, no flash attention: {exact_abs:.3g}, {exact_lp:.3g}), "
              f"argmax agree {same}/{len(logits)}, gguf {len(data)} bytes")


if __name__ == "__main__":
    main()
