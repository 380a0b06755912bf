#!/usr/bin/env python3
"""The official `anthropic` client against a Kiln server's Messages API.

    python3 anthropic_messages.py BASE_URL MODEL API_KEY

Needs: pip install anthropic jsonschema. The client sends the key as `x-api-key`. Checks a
non-streamed reply; the same request streamed (`client.messages.stream`: the accumulated
text equals the non-streamed greedy text, and the raw events come in Anthropic's order);
`stop_sequences`; a tool_use round trip (the model calls get_weather, the result goes
back as a `tool_result` block, the model answers from it), non-streamed and streamed;
`count_tokens`; and the error shape of a bad field, an image block and a wrong key.
Exits non-zero, naming the failure, on any mismatch. This client version has no typed
`temperature` parameter, so greedy decoding is asked for through `extra_body`.
"""

import sys

import anthropic
import jsonschema

BASE, MODEL, KEY = sys.argv[1], sys.argv[2], sys.argv[3]
client = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)

PROMPT = [{"role": "user", "content": "Write one sentence about the sea."}]
SYSTEM = "You are a helpful assistant."
GREEDY = {"temperature": 0}


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


# A non-streamed greedy reply.
r = client.messages.create(
    model=MODEL, max_tokens=24, system=SYSTEM, messages=PROMPT, extra_body=GREEDY
)
assert r.type == "message" and r.role == "assistant", r
assert r.id.startswith("msg_"), r.id
assert r.model == MODEL, r.model
assert r.stop_reason in ("end_turn", "max_tokens"), r.stop_reason
assert r.stop_sequence is None, r.stop_sequence
assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 24, r.usage
greedy = text_of(r)
assert greedy.strip(), f"empty reply: {r}"
print(f"ok create: {greedy!r} ({r.stop_reason}, {r.usage.output_tokens} tokens)")

# The same request streamed: the text accumulated is the greedy text.
with client.messages.stream(
    model=MODEL, max_tokens=24, system=SYSTEM, messages=PROMPT, extra_body=GREEDY
) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
assert streamed == greedy, f"streamed {streamed!r} != non-streamed {greedy!r}"
assert text_of(final) == greedy, final
assert final.stop_reason == r.stop_reason, final.stop_reason
assert final.usage.output_tokens == r.usage.output_tokens, final.usage
assert final.usage.input_tokens == r.usage.input_tokens, final.usage
print("ok stream: same text, stop reason and usage")

# The raw events, in Anthropic's order.
kinds = [
    e.type
    for e in client.messages.create(
        model=MODEL, max_tokens=8, messages=PROMPT, extra_body=GREEDY, stream=True
    )
]
assert kinds[0] == "message_start", kinds
assert kinds[-2:] == ["message_delta", "message_stop"], kinds
body = [k for k in kinds[1:-2] if k != "ping"]
assert body[0] == "content_block_start" and body[-1] == "content_block_stop", kinds
assert all(k == "content_block_delta" for k in body[1:-1]), kinds
print(f"ok events: {len(kinds)} in order")

# stop_sequences: a piece of the greedy text ends the reply before it.
words = greedy.split()
stop = " " + words[len(words) // 2] if len(words) > 2 else greedy[len(greedy) // 2 :]
expected = greedy[: greedy.find(stop)]
for stream in (False, True):
    args = dict(
        model=MODEL,
        max_tokens=24,
        system=SYSTEM,
        messages=PROMPT,
        extra_body=GREEDY,
        stop_sequences=["<never>", stop],
    )
    if stream:
        with client.messages.stream(**args) as s:
            m = s.get_final_message()
    else:
        m = client.messages.create(**args)
    assert m.stop_reason == "stop_sequence", (stream, m)
    assert m.stop_sequence == stop, (stream, m.stop_sequence, stop)
    assert text_of(m) == expected, (stream, text_of(m), expected)
print(f"ok stop_sequences: stopped at {stop!r}")

# count_tokens: the prompt /v1/messages gives the engine.
c = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=PROMPT)
assert c.input_tokens == r.usage.input_tokens, (c, r.usage)
print(f"ok count_tokens: {c.input_tokens}")

# A tool_use round trip.
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
}
TOOLS = [
    {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "input_schema": SCHEMA,
    }
]
TOOL_SYSTEM = (
    "You are a helpful assistant. When a tool result arrives, answer the user's question "
    "from it in one sentence."
)
QUESTION = [{"role": "user", "content": "What is the weather like in Paris right now, in celsius?"}]


def ask(messages, choice, stream):
    args = dict(
        model=MODEL,
        max_tokens=96,
        system=TOOL_SYSTEM,
        messages=messages,
        tools=TOOLS,
        tool_choice=choice,
        extra_body=GREEDY,
    )
    if not stream:
        return client.messages.create(**args)
    with client.messages.stream(**args) as s:
        return s.get_final_message()


for choice in ({"type": "auto"}, {"type": "any"}):
    for stream in (False, True):
        what = f"tool_choice={choice['type']} stream={stream}"
        m = ask(QUESTION, choice, stream)
        assert m.stop_reason == "tool_use", f"{what}: {m}"
        uses = [b for b in m.content if b.type == "tool_use"]
        assert len(uses) >= 1, f"{what}: {m}"
        use = uses[0]
        assert use.id.startswith("toolu_") and use.name == "get_weather", f"{what}: {use}"
        jsonschema.validate(use.input, SCHEMA)
        history = QUESTION + [
            {"role": "assistant", "content": [b.model_dump() for b in m.content]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": '{"city": "Paris", "temperature": 18, "sky": "sunny"}',
                    }
                ],
            },
        ]
        # The answer turn asks for text (this 0.5B model, offered the tool again, calls
        # it again rather than answer).
        a = ask(history, {"type": "none"}, stream)
        assert a.stop_reason in ("end_turn", "max_tokens"), f"{what}: {a}"
        answer = text_of(a)
        assert "18" in answer, f"{what}: the answer does not use the result: {answer!r}"
        print(f"ok tool_use {what}: {use.input} -> {answer!r}")

# Errors in Anthropic's shape.
try:
    client.messages.create(
        model=MODEL, max_tokens=4, messages=PROMPT, extra_body={"foo_bar": 1}
    )
    raise AssertionError("an unknown field was accepted")
except anthropic.BadRequestError as e:
    assert e.status_code == 400, e
    assert e.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "foo_bar: Extra inputs are not permitted",
        },
    }, e.body
try:
    client.messages.create(
        model=MODEL,
        max_tokens=4,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    }
                ],
            }
        ],
    )
    raise AssertionError("an image block was accepted")
except anthropic.BadRequestError as e:
    message = e.body["error"]["message"]
    assert "image" in message and "text" in message, message
try:
    anthropic.Anthropic(base_url=BASE, api_key="wrong", max_retries=0).messages.create(
        model=MODEL, max_tokens=4, messages=PROMPT
    )
    raise AssertionError("a wrong key was accepted")
except anthropic.AuthenticationError as e:
    assert e.body["type"] == "error", e.body
    assert e.body["error"]["type"] == "authentication_error", e.body
print("ok errors: Anthropic's shape")
print("all anthropic client checks passed")
