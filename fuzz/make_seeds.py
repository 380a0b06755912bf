#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<target>/ from the real files.

Run from the repository root: python3 fuzz/make_seeds.py. Needs the three cached models
(~/.cache/kiln/models, `cargo xtask models`) and the `gguf` Python package. Every seed is
kept under 100 KB; the whole corpus under 2 MB. Seeds are reproducible: names are the
sha1 of their content (libFuzzer's convention), so rerunning replaces identical files.
"""
import hashlib, json, os, struct, sys

import numpy as np
import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
MODELS = os.path.expanduser("~/.cache/kiln/models")
MAX = 100_000


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= MAX, (target, len(data))
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


# --- gguf: truncated real headers, and small valid files carrying the real metadata ----
for name in ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"]:
    path = os.path.join(MODELS, name + ".gguf")
    with open(path, "rb") as f:
        head = f.read(MAX)
    for n in (24, 512, 4096, 32768, MAX):
        put("gguf", head[:n])
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()
    out = "/tmp/kiln-seed.gguf"
    w = gguf.GGUFWriter(out, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vt = field.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            et = field.types[-1]
            items = [field.parts[i] for i in field.data[:24]]
            if et == gguf.GGUFValueType.STRING:
                w.add_array(key, [bytes(x).decode("utf-8", "replace") for x in items])
            else:
                w.add_array(key, [x.tolist()[0] for x in items])
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(key, bytes(field.parts[field.data[0]]).decode()[:2000])
        else:
            w.add_key_value(key, field.parts[field.data[0]].tolist()[0], vt)
    rng = np.random.default_rng(7)
    w.add_tensor("token_embd.weight", rng.standard_normal((4, 64)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(64, dtype=np.float16))
    q = gguf.quants.quantize(rng.standard_normal((2, 256)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.attn_q.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(out, "rb") as f:
        put("gguf", f.read())


# --- safetensors: real headers with a little data, small valid files -------------------
def st_file(tensors, meta=None):
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


for rel in ["testdata/hf/stories260K/model.safetensors", "testdata/hf-tiny/llama/model.safetensors",
            "testdata/hf-tiny/gemma3/model.safetensors"]:
    b = read(rel)
    (n,) = struct.unpack("<Q", b[:8])
    put("safetensors_header", b[: min(8 + n + 256, MAX)])
put("safetensors_header", st_file(
    [("a", "F32", [2, 3], bytes(24)), ("b", "BF16", [4], bytes(8)), ("c", "I8", [], bytes(1)),
     ("d", "F16", [0, 5], b"")], {"format": "pt"}))
put("safetensors_header", st_file([("model.embed_tokens.weight", "F16", [8, 4], bytes(64))]))
put("safetensors_header", st_file([]))

# --- safetensors_index ------------------------------------------------------------------
header = json.loads(read("testdata/hf-tiny/llama/model.safetensors")[8:][: struct.unpack("<Q", read("testdata/hf-tiny/llama/model.safetensors")[:8])[0]])
names = sorted(k for k in header if k != "__metadata__")
put("safetensors_index", json.dumps({
    "metadata": {"total_size": 80000},
    "weight_map": {n: "model-%05d-of-00002.safetensors" % (1 + i % 2) for i, n in enumerate(names)}}, indent=2))
put("safetensors_index", json.dumps({"weight_map": {"a": "model.safetensors"}}))
put("safetensors_index", json.dumps({"weight_map": {"a": "../etc/passwd", "b": 3}}))
put("safetensors_index", json.dumps({"weight_map": []}))

# --- model_config: [arch] then 10-byte records [key, kind, payload x 8] ------------------
for arch in range(9):
    put("model_config", bytes([arch]))
    put("model_config", bytes([arch, 3, 7]) + bytes([2, 0, 0, 0, 0, 0, 0]) + bytes([11, 1, 255, 255, 255, 255, 0, 0, 0, 0]))
    put("model_config", bytes([arch, 20, 0]) + bytes(8) + bytes([5, 4]) + struct.pack("<f", float("nan")) + bytes(4))

# --- tokenizer_json ---------------------------------------------------------------------
put("tokenizer_json", read("testdata/hf/stories260K/tokenizer.json"))
put("tokenizer_json", json.dumps({
    "version": "1.0", "added_tokens": [{"id": 3, "content": "<|end|>", "special": True,
                                        "single_word": False, "lstrip": False, "rstrip": False, "normalized": False}],
    "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
    "post_processor": None, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<|end|>": 3, "Ġ": 4},
              "merges": ["a b"], "byte_fallback": False}}))
put("tokenizer_json", json.dumps({
    "added_tokens": [], "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated", "invert": False},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "vocab": {"<unk>": 0, "<0x41>": 1, "▁": 2, "a": 3, "▁a": 4},
              "merges": [["▁", "a"]], "byte_fallback": True, "unk_token": "<unk>"}}))

# --- encode_decode: [mode] + text, or [mode|4] + u32 ids --------------------------------
texts = json.loads(read("crates/kiln-tokenizer/tests/fixtures/corpus.json"))
for i, t in enumerate(texts[:40]):
    put("encode_decode", bytes([i % 4]) + str(t).encode())
put("encode_decode", bytes([3]) + "<s>Once upon a time</s> <unk>".encode())
put("encode_decode", bytes([4]) + struct.pack("<8I", 1, 2, 300, 511, 512, 0xFFFFFFFF, 3, 259))

# --- chat_template: [template | 0x80 gen-prompt] + messages JSON [\0 tools JSON] ----------
rend = json.loads(read("crates/kiln-tokenizer/tests/fixtures/chat/renderings.json"))
i = 0
for model, doc in rend["models"].items():
    for case in doc["cases"]:
        for t in range(3):
            data = bytes([t | (0x80 if case.get("add_generation_prompt") else 0)]) + case["messages"].encode()
            if case.get("tools"):
                data += b"\0" + case["tools"].encode()
            if i % 3 == t:
                put("chat_template", data)
        i += 1

# --- grammar: [0] + JSON schema, [1] + GBNF ----------------------------------------------
schemas = [
    "{}", '{"type":"string"}', '{"type":"integer","minimum":-5,"maximum":300}',
    '{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"},'
    '"tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3}},"required":["name"]}',
    '{"anyOf":[{"type":"null"},{"$ref":"#/$defs/p"}],"$defs":{"p":{"type":"number"}}}',
    '{"enum":["a",1,null,true]}', '{"const":{"k":[1,2]}}',
    '{"type":"object","additionalProperties":{"type":"boolean"}}',
    '{"type":"string","format":"date"}', '{"type":"string","pattern":"^[a-z]+$"}',
]
for s in schemas:
    put("grammar", b"\0" + s.encode())
gbnfs = [
    'root ::= "a" [b-d]* "e"{2,3}', 'root ::= [^a\\n]+ "\\x41" "\\u00e9" [\\]-]', "root ::= .{3}",
    'root ::= "(" root ")" | "x"', 'root ::= obj\nobj ::= "{" ws (str ":" ws val)? "}"\n'
    'str ::= "\\"" [a-z]* "\\""\nval ::= str | [0-9]+ | obj\nws ::= [ \\t\\n]*',
    '# comment\nroot ::= x? "b"\nx ::= "x"', 'root ::= [a-z]{0,40}',
]
for g in gbnfs:
    put("grammar", b"\1" + g.encode())

total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(CORPUS) for f in fs)
print("corpus bytes:", total, file=sys.stderr)
assert total < 2_000_000

# --- server_request: [endpoint bit 0 | template bits 1-2 | context bits 3-4] + body ------
# Bodies from the server's tests and docs and OpenAI's API reference examples, valid and
# invalid; each for both endpoints where it makes sense.
SERVER_BODIES = [
    (0, {"model": "smollm2-135m", "prompt": "The capital of France is", "max_tokens": 8,
         "temperature": 0}),
    (0, {"prompt": ["Say this is a test", "Once upon a time"], "max_tokens": 7,
         "temperature": 0, "n": 2}),
    (0, {"prompt": [1, 2, 3, 4], "max_tokens": 4, "logprobs": 2, "stream": True,
         "stream_options": {"include_usage": True}}),
    (0, {"prompt": [[1, 2], [3, 4]], "max_tokens": 2, "stop": ["\n", "."], "seed": 7}),
    (0, {"prompt": "x", "max_tokens": 0}),
    (0, {"prompt": "x", "n": 9}),
    (0, {"prompt": "x", "echo": True}),
    (0, {"prompt": "x", "suffix": "y", "best_of": 3}),
    (0, {"prompt": "x", "logit_bias": {"5": -100, "3": 2.5}, "frequency_penalty": 0.5,
         "presence_penalty": -0.5, "top_p": 0.9}),
    (0, {"prompt": "word " * 100, "max_tokens": 4}),
    (0, {"prompt": "", "max_tokens": 1}),
    (0, {"prompt": [99999999]}),
    (1, {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello!"}]}),
    (1, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                   {"type": "text", "text": "b"}]}],
         "max_completion_tokens": 8, "logprobs": True, "top_logprobs": 2}),
    (1, {"messages": [{"role": "user", "content": "Give me a colour as JSON"}],
         "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": {
             "type": "object", "properties": {"colour": {"type": "string"}},
             "required": ["colour"]}}}}),
    (1, {"messages": [{"role": "user", "content": "hi"}],
         "response_format": {"type": "json_object"}, "stream": True}),
    (1, {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function",
         "function": {"name": "f", "parameters": {}}}]}),
    (1, {"messages": [{"role": "user", "content": [{"type": "image_url",
                                                    "image_url": {"url": "x"}}]}]}),
    (1, {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
         "content": "hello"}, {"role": "user", "content": "more"}], "n": 3, "seed": 1,
         "temperature": 1.0, "stop": "END"}),
    (1, {"messages": []}),
    (1, {"messages": [{"content": "no role"}]}),
    (1, {"messages": [{"role": "user", "content": "hi"}], "temperature": 3}),
]
for mode, body in SERVER_BODIES:
    text = json.dumps(body)
    for ctx in (0, 1):
        put("server_request", bytes([mode | (ctx << 3)]) + text.encode())
for raw in ['{"prompt": ', "not json", "[]", '{"prompt": 12}', "",
            '{"messages": "hello"}', '{"prompt": "a", "max_tokens": "many"}']:
    put("server_request", b"\x00" + raw.encode())
    put("server_request", b"\x01" + raw.encode())
