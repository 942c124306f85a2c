"""A tiny streaming chat client for the local-graph tests (not a load generator)."""

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class ChatStream:
    """One streamed chat completion as the client saw it.

    ttft_s: seconds from sending the request to the first `data:` chunk.
    chunks: every decoded `data:` JSON chunk, in order (without `[DONE]`).
    done: whether the stream ended with `data: [DONE]`.
    """

    ttft_s: float
    chunks: list[dict[str, Any]]
    done: bool

    @property
    def usage(self) -> dict[str, Any]:
        """The `usage` of the final usage chunk (KeyError if there is none)."""
        return next(c["usage"] for c in reversed(self.chunks) if c.get("usage"))


def stream_chat(url: str, model: str, content: str, max_tokens: int) -> ChatStream:
    """POST one user message to `url`/v1/chat/completions, streamed with usage; 30 s timeout.

    Raises httpx.HTTPStatusError on a non-2xx status.
    """
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks: list[dict[str, Any]] = []
    ttft_s = float("nan")
    done = False
    started = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30.0) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if not chunks and not done:
                ttft_s = time.perf_counter() - started
            if line == "data: [DONE]":
                done = True
            else:
                chunks.append(json.loads(line.removeprefix("data: ")))
    return ChatStream(ttft_s, chunks, done)
