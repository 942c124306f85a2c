"""CPU per event: our byte-level SSE parser vs httpx-sse's decoders, on the same reads.

Run: `uv run python bench/sse_cpu.py`. Feeds 20,000 copies of a 16-token chat stream (one event
per network read, as a streaming server writes them) through `loadgen.sse.SSEParser` and through
httpx-sse's `SSELineDecoder` + `SSEDecoder` (their synchronous core only, after UTF-8 decoding,
without the async-generator layers `aiter_sse()` adds on top) and prints microseconds per event.
"""

import json
import time

from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from loadgen.sse import SSEParser

STREAMS = 20_000


def reads() -> list[bytes]:
    """One response: role+content chunk, 15 content chunks, finish, usage, [DONE]."""
    chunk: dict[str, object] = {"id": "chatcmpl-1", "object": "chat.completion.chunk"}
    out = [{**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "t"}}]}]
    out += [{**chunk, "choices": [{"index": 0, "delta": {"content": "tok"}}]}] * 15
    out += [{**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}]
    out += [{**chunk, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 16}}]
    return [b"data: " + json.dumps(o).encode() + b"\n\n" for o in out] + [b"data: [DONE]\n\n"]


def ours(stream: list[bytes]) -> int:
    parser = SSEParser()
    return sum(len(parser.feed(read)) for read in stream)


def httpx_sse(stream: list[bytes]) -> int:
    lines, decoder = SSELineDecoder(), SSEDecoder()
    count = 0
    for read in stream:
        for line in lines.decode(read.decode()):
            if decoder.decode(line) is not None:
                count += 1
    return count


def main() -> None:
    """Print microseconds per event for both parsers."""
    stream = reads()
    for name, parse in (("loadgen.sse.SSEParser", ours), ("httpx-sse decoders", httpx_sse)):
        start = time.process_time()
        events = sum(parse(stream) for _ in range(STREAMS))
        elapsed = time.process_time() - start
        print(f"{name:24s} {elapsed / events * 1e6:6.2f} us/event ({events} events)")


if __name__ == "__main__":
    main()
