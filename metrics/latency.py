"""The per-request formulas of the latencies: from one request's timestamps and token counts
(a `measurement.record.RequestRecord`, or any object with the fields `Timed` names) to its
TTFT, ITLs, TPOT, E2E and client queue time in milliseconds (docs/metrics.md). The metric
registry (`metrics.registry`) names each by its key; `measurement.stats` reduces them to
percentiles over a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:  # annotations only: numpy is imported where an array is computed
    import numpy as np
    import numpy.typing as npt

_NS_PER_MS = 1e6


class Timed(Protocol):
    """The fields of a request's record the formulas read (`measurement.record.RequestRecord`'s
    names and meaning: timestamps from `time.monotonic_ns()`)."""

    intended_ns: int
    sent_ns: int | None
    first_token_ns: int | None
    first_output_ns: int | None
    last_token_ns: int | None
    error_ns: int | None
    token_ns: list[int] | npt.NDArray[np.int64]
    chunk_tokens: list[int]
    completion_tokens: int | None
    reasoning_tokens: int | None
    reasoning_events: int
    censored: bool

    @property
    def ok(self) -> bool: ...


Counts: TypeAlias = "Sequence[float] | npt.NDArray[np.float64]"
"""Tokens per content chunk (`chunk_tokens` or `chunk_array`), one per `token_ns` entry."""


def between_ms(start: int | None, end: int | None) -> float | None:
    """`end - start` (ns) in ms; None when either is missing."""
    if start is None or end is None:
        return None
    return (end - start) / _NS_PER_MS


def ttft_ms(record: Timed) -> float | None:
    """Time to first token (ms): sent to first non-empty content/reasoning text, a token of any
    kind, as AIPerf 0.13.0 defines it (`aiperf/metrics/types/ttft_metric.py` L10-56: the first
    content response, reasoning included)."""
    return between_ms(record.sent_ns, record.first_token_ns)


def first_output_ns(record: Timed) -> int | None:
    """When the first visible token came (ns): `first_output_ns` in a stream that carried
    reasoning text (`reasoning_events` > 0; None when no visible token followed it), else the
    first token (`first_token_ns`): without reasoning, every token is visible."""
    return record.first_output_ns if record.reasoning_events else record.first_token_ns


def ttfo_ms(record: Timed) -> float | None:
    """Time to first output token (ms): sent to the first visible token, reasoning left out
    (`first_output_ns`); AIPerf 0.13.0's `time_to_first_output_token`
    (`aiperf/metrics/types/time_to_first_output_token_metric.py` L15-86: the first response
    with non-empty text or `content`, not `reasoning`), equal to TTFT without reasoning."""
    return between_ms(record.sent_ns, first_output_ns(record))


def hidden_tokens(record: Timed) -> int:
    """Output tokens the server counted and the client never saw: the usage's reasoning tokens
    (`reasoning_tokens`) when the stream carried no reasoning text (the reasoning stayed
    hidden, as OpenAI's reasoning models keep it), else 0 (streamed reasoning is in
    `token_ns`)."""
    reasoning = record.reasoning_tokens
    return reasoning if reasoning and reasoning > 0 and not record.reasoning_events else 0


def seen_tokens(record: Timed) -> int | None:
    """The output tokens the client saw streamed: `completion_tokens` less `hidden_tokens`
    (never below 0); None without a count."""
    out = record.completion_tokens
    return None if out is None else max(0, out - hidden_tokens(record))


def answered(record: Timed) -> bool:
    """True when the reply showed a visible token: a stream with reasoning text also carried
    `content` (`first_output_ns`); one without reasoning text streamed some token, or its
    usage counts tokens that were not all hidden reasoning (a text-less stream such as the
    Dynamo mocker's). A reply that spent its whole output on reasoning is not answered: it
    misses every TTFT and E2E objective and earns no goodput (`measurement.goodput`)."""
    if record.reasoning_events:
        return record.first_output_ns is not None
    return len(record.token_ns) > 0 or seen_tokens(record) != 0


def e2e_ms(record: Timed) -> float | None:
    """End-to-end latency (ms): sent to the last generated token (`last_token_ns`), so a usage
    chunk sent after the tokens does not stretch it; the body's end is `end_ns`."""
    return between_ms(record.sent_ns, record.last_token_ns)


def queue_ms(record: Timed) -> float | None:
    """Client queue time (ms): intended send to the request headers going out on a connection."""
    return between_ms(record.intended_ns, record.sent_ns)


def chunk_tokens(record: Timed) -> list[float]:
    """The tokens each content-bearing chunk carried (one value per `token_ns` entry): the
    server's own per-chunk counts (`Timed.chunk_tokens`) when every content chunk had
    one (the first less `hidden_tokens`: hidden reasoning precedes it and its usage counts
    it), else the tokens the client saw (`seen_tokens`: hidden reasoning left out, so it is
    never spread over the gaps between visible chunks) spread evenly over the k chunks (the
    final usage says how many tokens, not which chunk held them): `spread_tokens(N / k, k)`;
    [] without content chunks or a token count. A list of `chunk_array`."""
    return list(chunk_array(record).tolist())


def chunk_array(record: Timed) -> npt.NDArray[np.float64]:
    """`chunk_tokens` as a numpy float64 array: the one implementation, array-wise for a
    run's many chunks."""
    import numpy as np

    chunks = len(record.token_ns)
    if chunks and len(record.chunk_tokens) == chunks and sum(record.chunk_tokens) > 0:
        counts = np.array([float(n) for n in record.chunk_tokens])
        counts[0] = max(1.0, counts[0] - hidden_tokens(record))  # what came before it, unseen
        return counts
    out = seen_tokens(record)
    if not chunks or not out:
        return np.empty(0)
    return np.full(chunks, spread_tokens(out / chunks, chunks))


def spread_tokens(per_chunk: float, chunks: int) -> float:
    """Tokens per content chunk from N / k (`per_chunk`) over k `chunks`: 1 up to
    (k + 1) / k (a token without text of its own, such as the end-of-sequence token vLLM
    counts, makes N = k + 1 with one token per chunk), N / k from 2 on, and linear in between,
    so the figure is continuous in N / k: a speculative decoder's 1.2, 1.4 or 1.6 tokens per
    chunk divide ITL by a little less than that, with no jump at any threshold."""
    low = 1 + 1 / chunks
    if per_chunk >= 2 or low >= 2:
        return max(1.0, per_chunk)
    if per_chunk <= low:
        return 1.0
    return 1 + (per_chunk - low) / (2 - low)


def content_reads(record: Timed, tokens: Counts | None = None) -> tuple[list[int], list[float]]:
    """The network reads that carried content: each one's time (ns) and the tokens its
    content-bearing events carried (`tokens`: `chunk_tokens` or `chunk_array`, one per event;
    empty or None counts each event as 1). The clock is read once per read (`loadgen.request`),
    so events delivered in one read share its time and make one entry: a proxy that buffers
    the stream delivers many events per read, and the gaps between them were never seen by
    the client. Lists of `read_arrays`."""
    times, carried = read_arrays(record, tokens)
    return times.tolist(), carried.tolist()


def read_arrays(record: Timed, tokens: Counts | None = None) -> tuple[Any, Any]:
    """`content_reads` as numpy arrays (int64 times in ns, float64 tokens carried): the one
    implementation, array-wise for a run's many tokens (a record's `token_ns` array, and an
    array `tokens`, are read as they are, not copied)."""
    import numpy as np

    times = np.asarray(record.token_ns, dtype=np.int64)
    counts = (
        np.asarray(tokens, dtype=np.float64)
        if tokens is not None and len(tokens)
        else np.ones(len(times))
    )
    if len(times) < 2 or bool(np.all(times[1:] != times[:-1])):  # one event per read
        return times, counts
    reads: list[int] = []
    carried: list[float] = []
    for t, n in zip(times.tolist(), counts.tolist(), strict=True):
        if reads and reads[-1] == t:
            carried[-1] += n
        else:
            reads.append(t)
            carried.append(n)
    return np.asarray(reads, dtype=np.int64), np.asarray(carried, dtype=np.float64)


def icl_ms(record: Timed) -> list[float]:
    """Inter-chunk latencies (ms): gaps between consecutive network reads that carried content
    (`content_reads`); with one event per read these are the gaps between content-bearing
    chunks (vLLM bench's `itl`, AIPerf's inter-chunk latency), equal to ITL when every chunk is
    one token. Events that arrived in one read have no gap the client could measure: none is
    counted (AIPerf and vLLM bench count a 0 ms gap for each). A list of `icl_array`."""
    return list(icl_array(record).tolist())


def icl_array(record: Timed, reads: tuple[Any, Any] | None = None) -> Any:
    """`icl_ms` as a numpy float64 array: each gap (ns, exact in int64) over 1e6, the same
    float as ``(b - a) / 1e6``; `reads`: the record's `read_arrays` when computed already."""
    import numpy as np

    times = (read_arrays(record) if reads is None else reads)[0]
    return np.diff(times) / _NS_PER_MS


def itl_ms(record: Timed, tokens: Counts | None = None) -> list[float]:
    """Inter-token latencies (ms), one per content read after the first: the gap to the
    previous content read divided by the tokens the later read carried (`content_reads` over
    `chunk_tokens`), so a chunk of 8 tokens 80 ms after the previous one gives 10 ms. With one
    token per chunk and one chunk per read this is vLLM bench's per-chunk ITL; without a token
    count, the gaps themselves. `tokens`: the record's `chunk_tokens` when already computed.
    A list of `itl_array`."""
    return list(itl_array(record, tokens).tolist())


def itl_array(
    record: Timed, tokens: Counts | None = None, reads: tuple[Any, Any] | None = None
) -> Any:
    """`itl_ms` as a numpy float64 array (each the same float as ``gap / n``); `reads`: the
    record's `read_arrays` over `tokens` when computed already."""
    tokens = chunk_array(record) if tokens is None else tokens
    reads = read_arrays(record, tokens) if reads is None else reads
    gaps = icl_array(record, reads)
    if not len(tokens):
        return gaps
    after = reads[1][1:]
    kept = after > 0
    return gaps[kept] / after[kept]


def tpot_ms(
    record: Timed, tokens: Counts | None = None, reads: tuple[Any, Any] | None = None
) -> float | None:
    """Time per output token (ms) after the first content read: (E2E - TTFT) /
    (tokens seen - tokens of the first read) (`seen_tokens`: hidden reasoning left out;
    `content_reads` over `chunk_tokens`, or `tokens` when already computed). With one token
    per chunk and one chunk per read this is vLLM bench's and AIPerf's (E2E - TTFT) /
    (completion_tokens - 1); with N tokens in k equal chunks it is the mean chunk gap / (N / k).
    None with no usage, or no tokens after the first read (a response delivered in one read:
    its E2E - TTFT is 0, not a measured time). `reads`: the record's `read_arrays` over
    `tokens` when computed already."""
    ttft, e2e, out = ttft_ms(record), e2e_ms(record), seen_tokens(record)
    if ttft is None or e2e is None or out is None:
        return None
    tokens = chunk_array(record) if tokens is None else tokens
    times, carried = read_arrays(record, tokens) if reads is None else reads
    if len(times) < 2:
        return None
    first = float(carried[0]) if len(tokens) else 1.0
    if out - first < 1:
        return None
    return (e2e - ttft) / (out - first)


def cut_ms(record: Timed) -> float | None:
    """For a censored request (`Timed.censored`: cut by the client's deadline or read
    timeout after it was sent), the time from sent to the cut (ms): a lower bound of its E2E,
    and of its TTFT when no token came; None for any other request."""
    if not record.censored:
        return None
    return between_ms(record.sent_ns, record.error_ns)


def ttft_sample(record: Timed) -> tuple[float, bool] | None:
    """The request's TTFT (ms) as the TTFT percentiles count it, and whether it is a lower
    bound: a successful request's TTFT (False); a censored request's measured TTFT when its
    first token came before the cut (False), else the time to the cut (True); None for other
    failures and for requests without content text."""
    if record.ok or (record.censored and record.first_token_ns is not None):
        ttft = ttft_ms(record)
        return None if ttft is None else (ttft, False)
    cut = cut_ms(record)
    return None if cut is None else (cut, True)


def e2e_sample(record: Timed) -> tuple[float, bool] | None:
    """The request's E2E (ms) as the E2E percentiles count it: a successful request's (False),
    a censored request's time to the cut (True, a lower bound); None for other failures."""
    if record.ok:
        e2e = e2e_ms(record)
        return None if e2e is None else (e2e, False)
    cut = cut_ms(record)
    return None if cut is None else (cut, True)
