"""A local OpenAI-style streaming server that measures its own truth, for the loadgen benchmark.

Run as `python bench/mock_server.py PORT FIRST_TOKEN_DELAY_MS TOKENS [TOKEN_GAP_MS]`. `POST
/v1/chat/completions` (or `/v1/completions`) gets, after FIRST_TOKEN_DELAY_MS (ms), a
role+content first chunk, TOKENS-1 more content chunks TOKEN_GAP_MS apart (default 0: no
delay), a finish chunk, a usage chunk and `[DONE]`, as OpenAI-style `chat.completion.chunk`
objects. `GET /v1/models` lists model "m" and `GET /health` answers 200 (clients such as
AIPerf probe them); other paths get 404.

It records, per streamed request, the true delay from the request being fully read from its
socket (in `data_received`, so the server's own scheduling delay counts) to the first token
being written (ms), the largest number of requests in flight, and the time-weighted
mean number in flight from the first request's arrival to the last one's end. `GET /stats`
returns them as JSON; `POST /reset` clears them. asyncio protocols, HTTP/1.1 keep-alive,
chunked responses: one process, one core.
"""

import asyncio
import json
import sys
import time

_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
_STREAM_PATHS = (b"/v1/chat/completions", b"/v1/completions")
_MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "bench"}]}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(choices: list[object], **extra: object) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    data = json.dumps({**obj, "choices": choices, **extra}, separators=(",", ":"))
    return _chunk(b"data: " + data.encode() + b"\n\n")


def _json_response(status: bytes, obj: object) -> bytes:
    body = json.dumps(obj).encode()
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


class Stats:
    """The server's truth: first-token delays (ms) and requests in flight over time."""

    def __init__(self) -> None:
        self.delays_ms: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.first_ns: int | None = None
        self.changed_ns = 0
        self.area = 0  # integral of in_flight over time, request x ns

    def change(self, delta: int) -> None:
        """One request started (+1) or ended (-1) now."""
        now = time.monotonic_ns()
        if self.first_ns is None:
            self.first_ns = now
        else:
            self.area += self.in_flight * (now - self.changed_ns)
        self.changed_ns = now
        self.in_flight += delta
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def report(self) -> dict[str, object]:
        """The JSON of `GET /stats`."""
        span = self.changed_ns - (self.first_ns or 0)
        return {
            "delays_ms": self.delays_ms,
            "max_in_flight": self.max_in_flight,
            "mean_in_flight": self.area / span if span > 0 else 0.0,
        }


class StreamProtocol(asyncio.Protocol):
    """One connection: parse requests (Content-Length bodies) and answer them."""

    def __init__(self, stats: Stats, delay_s: float, tokens: int, gap_s: float = 0.0) -> None:
        self.stats, self.delay_s, self.tokens, self.gap_s = stats, delay_s, tokens, gap_s
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
            method, path = head.split(b" ")[:2]
            received = time.monotonic_ns()
            task = self.respond(method, path.split(b"?")[0], received)
            asyncio.get_running_loop().create_task(task)

    async def respond(self, method: bytes, path: bytes, received: int) -> None:
        """Answer one request (see the module docstring for the routes); `received` is when
        its last byte was read (monotonic ns)."""
        assert self.transport is not None
        if method == b"POST" and path in _STREAM_PATHS:
            await self.stream(received)
        elif path in (b"/stats", b"/reset"):
            if path == b"/reset":
                self.stats.__init__()  # type: ignore[misc]
            self.transport.write(_json_response(b"200 OK", self.stats.report()))
        elif path == b"/v1/models":
            self.transport.write(_json_response(b"200 OK", _MODELS))
        elif path == b"/health":
            self.transport.write(_json_response(b"200 OK", {"status": "healthy"}))
        else:
            self.transport.write(_json_response(b"404 Not Found", {"error": "not found"}))

    async def stream(self, received: int) -> None:
        """One streamed completion; records the true first-token delay from `received`."""
        assert self.transport is not None
        self.stats.change(+1)
        self.transport.write(_STREAM_HEAD)
        await asyncio.sleep(self.delay_s)
        first = _event([{"index": 0, "delta": {"role": "assistant", "content": "t"}}])
        self.stats.delays_ms.append((time.monotonic_ns() - received) / 1e6)
        self.transport.write(first)
        rest = _event([{"index": 0, "delta": {"content": "t"}}])
        for _ in range(self.tokens - 1):
            await asyncio.sleep(self.gap_s)
            self.transport.write(rest)
        done = _event([{"index": 0, "delta": {}, "finish_reason": "length"}])
        usage = _event([], usage={"prompt_tokens": 10, "completion_tokens": self.tokens})
        self.transport.write(done + usage + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self.stats.change(-1)


async def serve(port: int, delay_ms: float, tokens: int, gap_ms: float = 0.0) -> None:
    """Serve forever on 127.0.0.1:`port`."""
    stats = Stats()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: StreamProtocol(stats, delay_ms / 1e3, tokens, gap_ms / 1e3),
        "127.0.0.1",
        port,
        backlog=4096,
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    gap = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    asyncio.run(serve(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), gap))
