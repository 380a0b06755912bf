#!/usr/bin/env python3
"""Embeddings with the official `openai` client against a Kiln server.

    python3 openai_embeddings.py BASE_URL MODEL DIMENSIONS

Needs: pip install openai. `client.embeddings.create` with one string and with a list, as
floats and as base64 (the client's default, which it decodes itself): every vector has
DIMENSIONS values of unit length, and both encodings agree. Prints each input's first
values; exits non-zero, naming the failure, on any mismatch.
"""

import math
import sys

from openai import OpenAI

BASE, MODEL, DIM = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = OpenAI(base_url=BASE + "/v1", api_key="unused")


def check(vec, what):
    if len(vec) != DIM:
        sys.exit(f"{what}: {len(vec)} values, expected {DIM}")
    norm = math.sqrt(sum(x * x for x in vec))
    if abs(norm - 1.0) > 1e-4:
        sys.exit(f"{what}: length {norm}, expected 1")


one = client.embeddings.create(model=MODEL, input="Hello, world!", encoding_format="float")
check(one.data[0].embedding, "one string")
if one.usage.prompt_tokens <= 0:
    sys.exit(f"usage: {one.usage}")

inputs = ["The quick brown fox", "def main():\n    pass"]
floats = client.embeddings.create(model=MODEL, input=inputs, encoding_format="float")
b64 = client.embeddings.create(model=MODEL, input=inputs)  # base64 on the wire
if [d.index for d in floats.data] != [0, 1]:
    sys.exit(f"indices: {[d.index for d in floats.data]}")
for f, b in zip(floats.data, b64.data):
    check(f.embedding, f"float {f.index}")
    check(b.embedding, f"base64 {b.index}")
    if max(abs(x - y) for x, y in zip(f.embedding, b.embedding)) > 1e-6:
        sys.exit(f"input {f.index}: base64 and float differ")
    print(f"input {f.index}: {f.embedding[:3]}")
print("openai embeddings: ok")
