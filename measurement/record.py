"""One request's record as the load client fills it and every measurement reads it: its
timestamps (`time.monotonic_ns()`), usage, error and the frontend's own figures
(`loadgen.request.stream_request` fills it; the simulator writes the same records).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from measurement.errors import ErrorKind

if TYPE_CHECKING:  # annotations only: the load client's pods need no numpy to fill a record
    import numpy as np
    import numpy.typing as npt

UNKEPT_FIELDS = ("text",)
"""`RequestRecord` fields that stay in memory: not in requests.parquet, not in a pod's log."""
FRONTEND_FIELDS = (
    "response_id",
    "prefill_worker_id",
    "decode_worker_id",
    "frontend_prefill_wait_ms",
    "frontend_prefill_ms",
    "frontend_ttft_ms",
    "frontend_total_ms",
    "kv_transfer_estimated_ms",
    "router_kv_hit_rate",
)
"""`RequestRecord` fields the server returned of itself (a Dynamo frontend's `nvext`, and the
response id): a pod's log writes them as one list (`incluster.wire.record_line`)."""


@dataclass(slots=True)
class RequestRecord:
    """Timing and usage of one request.

    `intended_ns`: when the load pattern wanted it sent. `sent_ns`: when the request (headers and
    JSON body in one write) went to the socket of a connection taken from the pool (aiohttp's
    `on_request_chunk_sent` trace), so time spent waiting for a connection or opening one is
    client queue time (`sent - intended`), never TTFT.
    `connect_ns`: when a new TCP connection was opened for it (None: a reused connection).
    `first_byte_ns`: first body bytes; `first_chunk_ns`: first data event of any kind;
    `first_token_ns`: first event with non-empty `content`/`reasoning_content`/`reasoning`
    (chat) or `text` (completions), a token of any kind (AIPerf's TTFT);
    `first_output_ns`: first event with non-empty `content` (chat) or `text` (completions),
    the first visible token, reasoning left out (AIPerf's time to first output token; None:
    no visible token came); read only where `reasoning_events` > 0, as without reasoning it is
    `first_token_ns` (a record made without it, by the simulator or an older version, leaves
    it None); `reasoning_events`: content-bearing events that carried reasoning text only
    (`reasoning_content` or `reasoning`, no `content`); `token_ns`: arrival of every
    content-bearing event (reasoning included): a list the client appends to, or an int64
    numpy array where the times come as one (the simulator's records,
    `simulator.records.timing_records`; read it with `len()`, never as a truth value);
    `last_token_ns`: the last generated token, where E2E ends: the last content-bearing event,
    or, in a stream that carried no text at all (the Dynamo mocker's), the last event with a
    `choices` entry; never the usage-only chunk, which only supplies counts.
    `chunks`: all data events (including role-only and usage chunks); `end_ns`: `[DONE]`, or
    the end of the body without one.
    `chunk_tokens`: the tokens each content-bearing event carried, where the server says so
    (a `usage` on that event, cumulative, as vLLM's `stream_options.continuous_usage_stats`
    sends it: the difference to the previous usage); empty when only a final usage came.
    `retried`: sent a second time, on a fresh connection, after writing it to the reused one
    failed (the server had closed it: `stream_request`). `redirected_to`: the URL a redirect
    took it to (None: not redirected).
    `response_id`: the response's `id` (a Dynamo frontend's request id, which its prefill and
    decode workers log too). The frontend's per-request figures, where the request asked for
    them (`loadgen.api.SERVER_FIELDS`) and the server sent them (`nvext`, on the chunk with
    the finish_reason; None otherwise): `prefill_worker_id` / `decode_worker_id`, the workers
    that served it (decimal text: Dynamo's ids are unsigned 64-bit; the same worker twice when
    aggregated), and in milliseconds from the frontend's receipt of the request
    (`nvext.timing`: `lib/llm/src/protocols/common/timing.rs`, `TimingInfo` L609-646, filled by
    `RequestTracker::get_timing_info` L587-600): `frontend_prefill_wait_ms` to the prefill's
    start (`prefill_wait_time_ms` L260-265), `frontend_prefill_ms` from there to the first
    token (`prefill_time_ms` L267-272; disaggregated: the prefill leg's return),
    `frontend_ttft_ms` their sum (`ttft_ms` L274-282), `frontend_total_ms` to the end,
    `kv_transfer_estimated_ms` the frontend's estimate of the KV transfer to the decode worker
    (disaggregated only: the decode worker's first token less the prefill leg's return,
    `kv_transfer_estimated_latency_secs` L484-493), `router_kv_hit_rate` the router's overlap
    estimate at routing time (0..1). `measurement.phases` splits TTFT with them. Lines at
    zinuga/dynamo 62d17a12, a mirror of ai-dynamo/dynamo's main line: the v1.6.2 tag's source
    was not at hand (the ai-dynamo/dynamo versions read predate the transfer estimate); the
    fields' meaning at 1.6.1 is checked against the real frontend with mocker workers
    (tests/loadgen/test_dynamo_e2e.py).
    `censored`: the client cut the request at its deadline or read timeout after sending it
    (`ErrorKind.TIMEOUT` with `sent_ns` set), or it failed after a wait
    (`measurement.errors.after_a_wait`: a gateway's 502 / 503 / 504, a connection lost after a
    wait): `error_ns` is the cut, so its TTFT (when `first_token_ns` is None) and its E2E are at
    least `error_ns - sent_ns`; the server may still be running it (abandoned work).
    `retry_after_s`: what a 429 / 503 answer's `Retry-After` asked the client to wait (s; None:
    no such header).
    `completion_tokens_from`: None when `completion_tokens` is the server's usage, else how
    it was counted from the stream (`loadgen.output_tokens`): the server sent no usage, or one
    the stream contradicts, whose `completion_tokens` is then kept in
    `usage_completion_tokens` (None: not contradicted). `reasoning_tokens`: the usage's
    `completion_tokens_details.reasoning_tokens` (part of `completion_tokens`; None: not
    sent): streamed as reasoning text when the stream carried any (`reasoning_events` > 0),
    else hidden, never seen by the client (`metrics.latency.hidden_tokens`).
    `ignored_events`: events of the stream named other than `message` (an `event:` field such
    as `ping`), which carry no message and were skipped (`error` is not skipped: it fails the
    request). `text`: the content text of each
    content-bearing event, for that count; not kept in results or logs (`UNKEPT_FIELDS`).
    Usage fields keep the last `usage` seen; `cached_tokens` is None when
    `usage.prompt_tokens_details.cached_tokens` was absent or null, distinct from 0.
    """

    index: int
    prefix_id: int
    intended_ns: int = 0
    connect_ns: int | None = None
    sent_ns: int | None = None
    first_byte_ns: int | None = None
    first_chunk_ns: int | None = None
    first_token_ns: int | None = None
    first_output_ns: int | None = None
    last_token_ns: int | None = None
    end_ns: int | None = None
    token_ns: list[int] | npt.NDArray[np.int64] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    chunks: int = 0
    reasoning_events: int = 0
    status: int | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    error_ns: int | None = None
    retried: bool = False
    censored: bool = False
    retry_after_s: float | None = None
    redirected_to: str | None = None
    completion_tokens_from: str | None = None
    usage_completion_tokens: int | None = None
    ignored_events: int = 0
    response_id: str | None = None
    prefill_worker_id: str | None = None
    decode_worker_id: str | None = None
    frontend_prefill_wait_ms: float | None = None
    frontend_prefill_ms: float | None = None
    frontend_ttft_ms: float | None = None
    frontend_total_ms: float | None = None
    kv_transfer_estimated_ms: float | None = None
    router_kv_hit_rate: float | None = None
    text: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the request completed without any error."""
        return self.error_kind is None

    def fail(self, kind: ErrorKind, message: str) -> None:
        """Record the first error of this request (later ones are ignored)."""
        if self.error_kind is None:
            self.error_kind = kind
            self.error = message[:500]
            self.error_ns = time.monotonic_ns()
