"""A scriptable, fault-injecting OpenAI-style streaming server for the loadgen tests.

Speaks just enough HTTP/1.1 (keep-alive, chunked responses) over asyncio streams. A handler maps
each request (its JSON body and arrival number) to a script of `Send` (one HTTP chunk written
and flushed on its own), `Sleep`, `Wait` (for an asyncio.Event), `Close` (cut the connection) and
`Status` (a non-200 response; `Close` first: no response at all). The server counts
connections and requests in flight.

Faults of the transport, set on the server rather than per request: `redirects` (an ingress
that answers a path with a redirect, after `redirect_s`), `responses_per_connection` (a server
that closes a kept-alive connection after that many responses without saying so: the next
request written to it is reset unread, and counted in `unread`), `idle_close_s` (a server that
closes a kept-alive connection idle that long, with a FIN and without `Connection: close`, as
an idle keep-alive timeout does: counted in `idle_closed`, `idle_closes` set on each), `tls` (an
`ssl.SSLContext`: the server speaks HTTPS), `metrics` (what GET /metrics
answers, made from the server's state: Prometheus text, or a `Status` for a failed scrape).
A GET to a completions path is answered 405, as an OpenAI-compatible server's POST-only route
is. A script of `Sleep`s then `Close` reads the request, works on it a while and drops it
unanswered; `Sleep`s then a `Status` answers that status after the wait (a gateway's timeout).
"""

import asyncio
import contextlib
import json
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

ABSENT = object()


@dataclass(frozen=True)
class Send:
    data: bytes


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Wait:
    event: asyncio.Event
    timeout_s: float = 10.0


@dataclass(frozen=True)
class Close:
    pass


@dataclass(frozen=True)
class Header:
    """A response header line (e.g. `content-encoding: gzip`): only as a 200 script's first
    steps, before any `Send`."""

    line: str


@dataclass(frozen=True)
class Status:
    code: int
    body: bytes = b'{"error": "unavailable"}'
    headers: tuple[str, ...] = ()  # extra header lines, e.g. "Retry-After: 1"


Step = Send | Sleep | Wait | Close | Status | Header
Handler = Callable[[dict[str, Any], int], Sequence[Step] | Awaitable[Sequence[Step]]]


def event(obj: object) -> bytes:
    """One `data:` event with its blank line."""
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def named_event(name: str, data: str) -> bytes:
    """An event with an `event:` field (not a message unless `name` is "message"), e.g. a
    keep-alive `ping` whose data is a timestamp, not JSON."""
    return f"event: {name}\ndata: {data}\n\n".encode()


def chat_chunk(
    content: str | None = None,
    *,
    role: str | None = None,
    finish: str | None = None,
    reasoning: str | None = None,
) -> bytes:
    """A chat completion chunk; `reasoning` as `delta.reasoning_content` (Dynamo's and vLLM's
    reasoning parsers' field)."""
    delta: dict[str, str] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return event({"id": "x", "object": "chat.completion.chunk", "choices": [choice]})


def usage_chunk(
    prompt: int, completion: int, cached: object = ABSENT, reasoning: int | None = None
) -> bytes:
    """The include_usage chunk (`choices: []`); `cached` ABSENT omits prompt_tokens_details;
    `reasoning` as `completion_tokens_details.reasoning_tokens` (None: omitted)."""
    usage: dict[str, object] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cached is not ABSENT:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return event({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage})


def normal_stream(tokens: Sequence[str], prompt: int = 100, cached: object = 40) -> list[Step]:
    """Role-only first chunk, one chunk per token, finish_reason, usage chunk, [DONE]."""
    steps: list[Step] = [Send(chat_chunk(role="assistant"))]
    steps += [Send(chat_chunk(t)) for t in tokens]
    steps += [Send(chat_chunk(finish="length")), Send(usage_chunk(prompt, len(tokens), cached))]
    return [*steps, Send(DONE)]


def paced_stream(
    tokens: int,
    *,
    token_s: float,
    usage: int | None = None,
    hidden: int = 0,
    streamed_reasoning: int = 0,
    ping: bool = False,
) -> list[Step]:
    """What a server that makes one visible token every `token_s` seconds sends: role chunk,
    `streamed_reasoning` chunks of `delta.reasoning_content`, then `tokens` content chunks of
    one character each, finish, a usage chunk, [DONE]. `usage`: its completion_tokens
    (default: every token it made, `streamed_reasoning` + `hidden` + `tokens`); `hidden`:
    reasoning tokens it counted and never streamed (thought before the first chunk, and said in
    `completion_tokens_details.reasoning_tokens`, as are streamed ones); `ping`: a keep-alive
    `event: ping` with a timestamp between every two chunks."""
    reasoning = streamed_reasoning + hidden
    made = reasoning + tokens if usage is None else usage
    ping_step = [Send(named_event("ping", "2026-12-07T01:00:00Z"))] if ping else []
    steps: list[Step] = [Send(chat_chunk(role="assistant"))]
    for n in range(streamed_reasoning):
        steps += [*ping_step, Sleep(token_s), Send(chat_chunk(reasoning=f"r{n}"))]
    for _ in range(tokens):
        steps += [*ping_step, Sleep(token_s), Send(chat_chunk("t"))]
    finish = [Send(chat_chunk(finish="length"))]
    last = usage_chunk(100, made, 0, reasoning if reasoning else None)
    return [*steps, *finish, Send(last), Send(DONE)]


@dataclass
class FakeServer:
    """`async with FakeServer(handler) as server:` serves on 127.0.0.1 at `server.url`."""

    handler: Handler
    connections: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # each request's target, e.g. /v1/...
    headers: list[dict[str, str]] = field(default_factory=list)  # each request's, lower-case names
    in_flight: int = 0
    max_in_flight: int = 0
    redirects: dict[str, tuple[int, str]] = field(default_factory=dict)  # path -> (code, to)
    redirect_s: float = 0.0
    responses_per_connection: int | None = None
    unread: int = 0  # requests written to a connection this server had given up
    idle_close_s: float | None = None
    idle_closed: int = 0  # kept-alive connections closed for being idle `idle_close_s`
    idle_closes: threading.Event = field(default_factory=threading.Event)
    tls: ssl.SSLContext | None = None
    # GET /metrics: Prometheus text, or a `Status` to answer instead (a failed scrape)
    metrics: "Callable[[FakeServer], str | Status] | None" = None
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"

    async def __aenter__(self) -> "FakeServer":
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, backlog=1024, ssl=self.tls
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        served = 0
        try:
            while True:
                if served == self.responses_per_connection:
                    if await reader.read(1):  # a request arrives at a closed socket: reset
                        self.unread += 1
                    writer.transport.abort()
                    return
                served += 1
                try:
                    head = await asyncio.wait_for(
                        reader.readuntil(b"\r\n\r\n"), self.idle_close_s if served > 1 else None
                    )
                except TimeoutError:  # idle too long: closed (FIN), nothing said
                    self.idle_closed += 1
                    writer.close()
                    await writer.wait_closed()
                    self.idle_closes.set()
                    return
                self.paths.append(head.split(b" ", 2)[1].decode())
                fields = (line.partition(b":") for line in head.split(b"\r\n")[1:] if line)
                self.headers.append(
                    {
                        name.strip().lower().decode(): value.strip().decode()
                        for name, _, value in fields
                    }
                )
                if head.startswith(b"GET ") and self.paths[-1].endswith("completions"):
                    writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                if head.startswith(b"GET /metrics") and self.metrics is not None:
                    answer = self.metrics(self)
                    if isinstance(answer, Status):
                        writer.write(
                            b"HTTP/1.1 %d Error\r\nContent-Length: %d\r\n\r\n%s"
                            % (answer.code, len(answer.body), answer.body)
                        )
                        await writer.drain()
                        continue
                    text = answer.encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
                    writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(text), text))
                    await writer.drain()
                    continue
                if head.startswith(b"GET "):  # e.g. /metrics: this server has none
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
                    await writer.drain()
                    continue
                length = int(self.headers[-1].get("content-length", 0))
                raw = await reader.readexactly(length)
                if self.paths[-1] in self.redirects:
                    code, to = self.redirects[self.paths[-1]]
                    await asyncio.sleep(self.redirect_s)
                    writer.write(
                        f"HTTP/1.1 {code} Moved\r\nLocation: {to}\r\n"
                        "Content-Length: 0\r\n\r\n".encode()
                    )
                    await writer.drain()
                    continue
                body = json.loads(raw)
                number = len(self.requests)
                self.requests.append(body)
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    if not await self._respond(writer, body, number):
                        return
                finally:
                    self.in_flight -= 1
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._tasks.discard(task)  # type: ignore[arg-type]
            writer.close()

    async def _respond(self, writer: asyncio.StreamWriter, body: dict[str, Any], n: int) -> bool:
        """Play the handler's script; False when the connection must be dropped."""
        script = self.handler(body, n)
        steps = await script if isinstance(script, Awaitable) else script
        if steps and isinstance(steps[-1], Close) and all(isinstance(x, Sleep) for x in steps[:-1]):
            for pause in steps[:-1]:  # read, worked on for a while, dropped without any answer
                await asyncio.sleep(cast(Sleep, pause).seconds)
            writer.transport.abort()
            return False
        while steps and isinstance(steps[0], Sleep) and isinstance(steps[-1], Status):
            await asyncio.sleep(steps[0].seconds)  # waited, then answered (a gateway's 504)
            steps = steps[1:]
        if steps and isinstance(steps[0], Status):
            status = steps[0]
            lines = "".join(f"{line}\r\n" for line in status.headers)
            writer.write(
                f"HTTP/1.1 {status.code} Error\r\nContent-Type: application/json\r\n{lines}"
                f"Content-Length: {len(status.body)}\r\n\r\n".encode()
                + status.body
            )
            await writer.drain()
            return True
        extra = "".join(f"{s.line}\r\n" for s in steps if isinstance(s, Header)).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n" + extra + b"\r\n"
        )
        await writer.drain()
        for step in steps:
            if isinstance(step, Send):
                writer.write(b"%x\r\n%s\r\n" % (len(step.data), step.data))
                await writer.drain()
            elif isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Wait):
                await asyncio.wait_for(step.event.wait(), step.timeout_s)
            elif isinstance(step, Close):
                writer.transport.abort()
                return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def fragments(data: bytes, size: int) -> list[Step]:
    """`data` cut into HTTP chunks of `size` bytes, with a pause so each is read on its own."""
    steps: list[Step] = []
    for i in range(0, len(data), size):
        steps += [Send(data[i : i + size]), Sleep(0.0005)]
    return steps


@contextlib.contextmanager
def serve_in_thread(handler: Handler, **faults: Any) -> Iterator[FakeServer]:
    """A `FakeServer` on its own event loop in a daemon thread, for synchronous callers such as
    typer's CliRunner, with `faults` (its transport fault fields); stopped on exit."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        async with FakeServer(handler, **faults) as server:
            holder["server"], holder["stop"] = server, stop
            started.set()
            await stop.wait()

    def run() -> None:
        loop.run_until_complete(serve())
        # Connections accepted as the server closed (e.g. a bare TCP reachability check) may
        # still have a handler task: finish them before the loop is closed.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(5), "the fake server did not start"
    try:
        yield holder["server"]
    finally:
        loop.call_soon_threadsafe(holder["stop"].set)
        thread.join(5)
        loop.close()


def clumped_stream(
    tokens: int, *, clump: int, token_s: float = 0.01, first_s: float = 0.05
) -> list[Step]:
    """What a client behind a buffering intermediary (an ingress or gateway with response
    buffering) receives from a server that makes one token every `token_s` seconds after
    `first_s`: the events held back and written `clump` at a time, each clump in one write
    (so one read), the rest (finish, usage, [DONE]) with the last clump. `clump` >= `tokens`:
    the whole response in one piece."""
    steps: list[Step] = [Sleep(first_s)]
    held = [chat_chunk(role="assistant")]
    for n in range(tokens):
        if n:
            steps.append(Sleep(token_s))
        held.append(chat_chunk("t"))
        if (n + 1) % clump == 0 or n == tokens - 1:
            if n == tokens - 1:
                held += [chat_chunk(finish="length"), usage_chunk(100, tokens, 0), DONE]
            steps.append(Send(b"".join(held)))
            held = []
    return steps
