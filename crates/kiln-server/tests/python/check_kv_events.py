"""Subscribes to a KV-event publisher with pyzmq and checks what arrives with msgpack.

Arguments: the endpoint to bind (the publisher connects to it), the expected topic, the
block size. Prints `ready` once bound; reads until no message came for 4 seconds (or 180
seconds in all); then checks and prints a JSON summary, or exits non-zero naming the first
failure. Checks: three frames per message (topic, 8-byte big-endian sequence number,
msgpack payload); sequence numbers consecutive; each payload `[ts, [events]]` in vLLM's
array-like layout; a stored block's parent was stored before it and is still stored
(parents before children); every removal names a stored block; token ids fill the blocks.
"""

import json
import sys
import time

import msgpack
import zmq


def fail(why):
    print(f"kv events: {why}", file=sys.stderr)
    sys.exit(1)


def main():
    endpoint, topic, block_size = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind(endpoint)
    print("ready", flush=True)
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    start = time.time()
    last_msg = None
    messages = []
    while time.time() - start < 180:
        if last_msg is not None and time.time() - last_msg > 4:
            break
        if poller.poll(200):
            messages.append(sub.recv_multipart())
            last_msg = time.time()
    if not messages:
        fail("no message arrived")

    live, ever = set(), set()
    stored = removed = cleared = 0
    last_seq = None
    for frames in messages:
        if len(frames) != 3:
            fail(f"a message has {len(frames)} frames, expected 3")
        t, seq_bytes, payload = frames
        if t != topic:
            fail(f"topic {t!r}, expected {topic!r}")
        if len(seq_bytes) != 8:
            fail(f"sequence frame of {len(seq_bytes)} bytes")
        seq = int.from_bytes(seq_bytes, "big")
        if last_seq is not None and seq != last_seq + 1:
            fail(f"sequence {seq} after {last_seq}")
        last_seq = seq
        batch = msgpack.unpackb(payload, raw=False)
        if not (isinstance(batch, list) and len(batch) == 2):
            fail(f"batch is not [ts, events]: {batch!r}")
        ts, events = batch
        if not isinstance(ts, float) or abs(ts - time.time()) > 600:
            fail(f"ts {ts!r} is not a current Unix time")
        if seq == 0 and events != [["AllBlocksCleared"]]:
            fail(f"the first batch is {events!r}, expected AllBlocksCleared")
        for e in events:
            kind = e[0]
            if kind == "BlockStored":
                hashes, parent, tokens, bs = e[1], e[2], e[3], e[4]
                if bs != block_size:
                    fail(f"block_size {bs}, expected {block_size}")
                if len(tokens) != bs * len(hashes):
                    fail(f"{len(tokens)} token ids for {len(hashes)} blocks of {bs}")
                if parent is not None and parent not in live:
                    fail(f"block {hashes[0]} names parent {parent}, not a stored block")
                for h in hashes:
                    if not isinstance(h, int) or h in live:
                        fail(f"block hash {h!r} stored twice or not an integer")
                    live.add(h)
                    ever.add(h)
                    stored += 1
            elif kind == "BlockRemoved":
                for h in e[1]:
                    if h not in live:
                        fail(f"removal of {h}, which is not stored")
                    live.remove(h)
                    removed += 1
            elif kind == "AllBlocksCleared":
                live.clear()
                cleared += 1
            else:
                fail(f"unknown event {e!r}")
    print(json.dumps({"messages": len(messages), "first_seq": int.from_bytes(messages[0][1], "big"),
                      "stored": stored, "removed": removed, "cleared": cleared}))


main()
