"""Checks a /metrics exposition (read from stdin) the way routers read it.

Parses the text with prometheus_client's text parser (which raises on any malformed
line) and checks that every family a router reads exists with the right type, range and
labels. Arguments: the expected model_name label, then the least prefix-cache hit tokens
expected. Prints what was checked; exits non-zero naming the first failure.
"""

import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def fail(why):
    print(f"metrics conformance: {why}", file=sys.stderr)
    sys.exit(1)


def main():
    model, min_hits = sys.argv[1], float(sys.argv[2])
    text = sys.stdin.read()
    try:
        families = {f.name: f for f in text_string_to_metric_families(text)}
    except Exception as e:  # the parser's own error: a malformed exposition
        fail(f"the exposition does not parse: {e!r}")
    for name, f in families.items():
        if f.type == "unknown":
            fail(f"family {name} has no TYPE line")
        for s in f.samples:
            if math.isnan(s.value):
                fail(f"{s.name} is NaN")

    def one(name, kind, labels=("model_name",)):
        f = families.get(name)
        if f is None:
            fail(f"family {name} is missing")
        if f.type != kind:
            fail(f"{name} is a {f.type}, expected {kind}")
        samples = [s for s in f.samples if not s.name.endswith("_created")]
        if len(samples) != 1:
            fail(f"{name} has {len(samples)} samples, expected 1")
        s = samples[0]
        if set(s.labels) != set(labels):
            fail(f"{name} has labels {sorted(s.labels)}, expected {sorted(labels)}")
        if "model_name" in labels and s.labels["model_name"] != model:
            fail(f"{name} has model_name {s.labels['model_name']!r}, expected {model!r}")
        if s.value < 0:
            fail(f"{name} is negative: {s.value}")
        return s

    ratio = one("kiln_kv_cache_usage_ratio", "gauge", labels=())
    for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        s = one(name, "gauge")
        if not 0.0 <= s.value <= 1.0:
            fail(f"{name} = {s.value} is outside 0-1")
        if s.value != ratio.value:
            fail(f"{name} = {s.value} differs from kiln_kv_cache_usage_ratio = {ratio.value}")
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        s = one(name, "gauge")
        if s.value != int(s.value):
            fail(f"{name} = {s.value} is not a count")
    info = one("vllm:cache_config_info", "gauge",
               labels=("model_name", "block_size", "num_gpu_blocks"))
    if info.value != 1:
        fail(f"vllm:cache_config_info = {info.value}, expected 1")
    for label in ("block_size", "num_gpu_blocks"):
        if not info.labels[label].isdigit() or int(info.labels[label]) < 1:
            fail(f"cache_config_info label {label}={info.labels[label]!r} is not a positive integer")
    # prometheus_client names a counter family without its _total suffix.
    queries = one("vllm:prefix_cache_queries", "counter")
    hits = one("vllm:prefix_cache_hits", "counter")
    if hits.value > queries.value:
        fail(f"prefix-cache hit tokens {hits.value} exceed queried tokens {queries.value}")
    if hits.value < min_hits:
        fail(f"prefix-cache hit tokens {hits.value}, expected at least {min_hits}")
    if queries.value != families["kiln_prefix_cache_query_tokens"].samples[0].value:
        fail("vllm:prefix_cache_queries differs from kiln_prefix_cache_query_tokens_total")
    print(f"ok: {len(families)} families; usage {ratio.value}, "
          f"prefix tokens {hits.value}/{queries.value}, blocks {info.labels['num_gpu_blocks']}")


main()
