"""A local OpenAI-style streaming server that measures its own truth, for the loadgen benchmark.

Run as `python bench/mock_server.py PORT FIRST_TOKEN_DELAY_MS TOKENS`. Each chat request gets a
role+content first chunk after FIRST_TOKEN_DELAY_MS (ms), TOKENS-1 more content chunks with no
delay, a finish chunk, a usage chunk and `[DONE]`. It records, per request, the true delay from
the request being fully received to the first token being written (ms), and the largest number
of requests in flight. `GET /stats` returns them as JSON; `POST /reset` clears them.
asyncio protocols, HTTP/1.1 keep-alive, chunked responses: one process, one core.
"""

import asyncio
import json
import sys
import time

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: object) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class Stats:
    """The server's truth: first-token delays (ms) and in-flight counts."""

    def __init__(self) -> None:
        self.delays_ms: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0


class StreamProtocol(asyncio.Protocol):
    """One connection: parse requests (Content-Length bodies) and stream responses."""

    def __init__(self, stats: Stats, delay_s: float, tokens: int) -> None:
        self.stats, self.delay_s, self.tokens = stats, delay_s, tokens
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            asyncio.get_running_loop().create_task(self.respond(head.split(b" ")[1]))

    async def respond(self, path: bytes) -> None:
        assert self.transport is not None
        if path in (b"/stats", b"/reset"):
            if path == b"/reset":
                self.stats.__init__()  # type: ignore[misc]
            body = json.dumps(
                {"delays_ms": self.stats.delays_ms, "max_in_flight": self.stats.max_in_flight}
            ).encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            return
        received = time.monotonic()
        stats = self.stats
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        self.transport.write(_HEAD)
        await asyncio.sleep(self.delay_s)
        first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "t"}}]}
        stats.delays_ms.append((time.monotonic() - received) * 1e3)
        self.transport.write(_event(first))
        rest = {"choices": [{"index": 0, "delta": {"content": "t"}}]}
        for _ in range(self.tokens - 1):
            self.transport.write(_event(rest))
            await asyncio.sleep(0)
        done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        usage = {
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": self.tokens},
        }
        self.transport.write(_event(done) + _event(usage) + _chunk(b"data: [DONE]\n\n"))
        self.transport.write(b"0\r\n\r\n")
        stats.in_flight -= 1


async def serve(port: int, delay_ms: float, tokens: int) -> None:
    """Serve forever on 127.0.0.1:`port`."""
    stats = Stats()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: StreamProtocol(stats, delay_ms / 1e3, tokens), "127.0.0.1", port, backlog=4096
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])))
