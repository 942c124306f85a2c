"""The readiness gate (loadgen.readiness) against a server that lists the model but is not
serving yet: from its first completion request, 500 for 3 s, then 404 for 2 s, then streams
(as a Dynamo frontend may answer right after its DGD turns Ready). Fault injection, so a stub
server."""

import json
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from loadgen.readiness import NotServingError, wait_for_model, wait_until_serving
from loadgen.runner import GridRun, run_grid_async
from workload.config import LoadConfig, ReadyCheck

pytestmark = pytest.mark.asyncio

MODEL = "m"
FAIL_500_S, FAIL_404_S = 3.0, 2.0
TINY = LoadConfig(
    prefix_kinds=[1], concurrency=[2], repetitions=1, requests_per_run=6, prompt_tokens=40
)


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def phased_app(
    serve_after_s: float = FAIL_500_S + FAIL_404_S, listed: list[float] | None = None
) -> web.Application:
    """Lists MODEL from the start (each listing's time appended to `listed`); completions
    answer 500 until FAIL_500_S after the first completion request, 404 until `serve_after_s`
    after it, then stream two tokens with usage. Timed from the first completion request, so
    a gate that starts late on a busy machine still waits the whole phases out."""
    started: list[float] = []

    async def models(_: web.Request) -> web.Response:
        if listed is not None:
            listed.append(time.monotonic())
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        started[:] = started or [time.monotonic()]
        age = time.monotonic() - started[0]
        if age < min(FAIL_500_S, serve_after_s):
            return web.json_response({"error": "engine not ready"}, status=500)
        if age < serve_after_s:
            return web.json_response({"error": f"model {body['model']} not found"}, status=404)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        words = len(body["messages"][0]["content"].split())
        for token in ("a", "b"):
            delta = {"content": token}
            await response.write(_event({"choices": [{"index": 0, "delta": delta}]}))
        await response.write(
            _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        )
        usage = {"prompt_tokens": words, "completion_tokens": 2}
        await response.write(_event({"choices": [], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def test_first_grid_point_has_no_errors_and_the_wait_is_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A proxy variable that leads nowhere: the gate and the load share one client
    # configuration that does not follow it, so neither is affected.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    listed: list[float] = []
    async for phased_url in serve(phased_app(listed=listed)):
        # listed at the first poll: one listing, no POLL_INTERVAL_S pause
        before = time.monotonic()
        waited_s = await wait_for_model(phased_url, MODEL, TINY, timeout_s=5)
        assert len(listed) == 1 and 0 <= waited_s <= time.monotonic() - before
        result = await run_grid_async(
            GridRun(
                phased_url,
                MODEL,
                TINY,
                None,
                progress=False,
                ready=ReadyCheck(successes=3, timeout_s=30),
            )
        )
    readiness = result.readiness
    assert readiness is not None
    # At least the phases (timed from the gate's first request); late by one POLL_INTERVAL_S
    # pause after its last failure and its 3 streamed requests, which 3 s (six pauses) holds.
    assert FAIL_500_S + FAIL_404_S <= readiness.waited_s < FAIL_500_S + FAIL_404_S + 3
    assert set(readiness.failures_by_kind) == {"http_status"}
    assert readiness.attempts == readiness.failures_by_kind["http_status"] + 3
    assert readiness.first_failure is not None and "HTTP 500" in readiness.first_failure
    assert readiness.last_failure is not None and "HTTP 404" in readiness.last_failure
    (point,) = result.points
    assert (point.errors, point.samples) == (0, 6)
    assert result.token_count_source.startswith("server-calibrated")


async def test_without_the_gate_the_first_point_fails() -> None:
    """A server not serving yet (it never does here, so no load makes the grid late enough to
    find it serving) fails every request of the first point."""
    async for url in serve(phased_app(serve_after_s=1e9)):
        result = await run_grid_async(GridRun(url, MODEL, TINY, None, progress=False))
        assert result.readiness is None
        assert result.points[0].errors == 6
        assert result.errors_by_kind == {"http_status": 6}


async def test_a_server_that_never_serves_fails_the_gate_with_what_it_saw() -> None:
    async for url in serve(phased_app(serve_after_s=1e9)):
        with pytest.raises(NotServingError, match=r"3 streamed completions in a row") as info:
            await wait_until_serving(url, MODEL, TINY, ReadyCheck(successes=3, timeout_s=1.0))
        assert "http_status" in str(info.value) and "HTTP 500" in str(info.value)
