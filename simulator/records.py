"""A simulated run as loadgen's request records (:func:`timing_records`), so that a measured
run's statistics and SLO judgement read it: what a routing run's retiming
(:mod:`simulator.retime`) and the search's runs (:mod:`recommend.load_search`) both turn their
timing into.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from measurement.errors import ErrorKind
from measurement.record import RequestRecord
from simulator.timing_model import Outcome, RunTiming, SimRequest


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _ns_all(offset_s: float, seconds: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """``_ns(offset_s + t)`` of each of ``seconds``, array-wise (int64): the same sums and
    products, rounded half to even as ``round`` rounds."""
    return np.rint((offset_s + seconds) * 1e9).astype(np.int64)


def timing_records(
    timing: RunTiming, requests: Sequence[SimRequest], offset_s: float
) -> list[RequestRecord]:
    """loadgen :class:`RequestRecord`\\ s of a simulated run, its clock starting at ``offset_s``
    (seconds since the grid started; the records' "monotonic" ns count from the grid start).
    A record's cached tokens are those a real deployment's client would be told
    (``Outcome.cached_tokens``: disaggregated, the prefill worker's modelled hit, not the routing
    run's decode-side figure)."""
    by_index = {r.index: r for r in requests}
    records = []
    for o in timing.outcomes:
        spec = by_index[o.index]
        sent = _ns(offset_s + o.sent_s)
        due = sent if o.intended_s is None else _ns(offset_s + o.intended_s)
        record = RequestRecord(index=o.index, prefix_id=spec.prefix_id, intended_ns=due)
        record.sent_ns = sent
        if o.error is None:
            tokens = _ns_all(offset_s, o.token_s)
            record.status = 200
            record.first_byte_ns = record.first_chunk_ns = record.first_token_ns = int(tokens[0])
            record.token_ns = tokens
            record.chunks = len(tokens) + 1
            record.end_ns = record.last_token_ns = int(tokens[-1])
            record.finish_reason = "length"
            record.prompt_tokens = spec.prompt_tokens
            record.completion_tokens = len(tokens)
            record.cached_tokens = o.cached_tokens
            _frontend_timing(record, o)
        else:
            record.status = 503 if o.error_kind == ErrorKind.HTTP_STATUS else 200
            record.error_kind = ErrorKind(o.error_kind or ErrorKind.IN_BAND)
            record.error = o.error
            record.error_ns = record.end_ns = _ns(offset_s + (o.error_s or o.sent_s))
        records.append(record)
    return records


def _frontend_timing(record: RequestRecord, o: Outcome) -> None:
    """What a Dynamo frontend returns of a successful simulated request
    (``measurement.record.RequestRecord``'s frontend fields), from its outcome: the replicas'
    names as worker ids; the prefill wait to ``routed_s``; the frontend's TTFT to the first
    token (aggregated) or to the prefill leg's return (disaggregated), and there the transfer
    estimate from that return to the decode worker's first token, as the real frontend's runs.
    Left empty without a frontend (``routed_s`` None)."""
    record.prefill_worker_id, record.decode_worker_id = o.prefill_worker, o.decode_worker
    if o.routed_s is None:
        return
    tokens = o.token_s
    first = float(tokens[0])
    record.frontend_prefill_wait_ms = (o.routed_s - o.sent_s) * 1e3
    ttft_end = first if o.prefill_done_s is None else o.prefill_done_s
    record.frontend_ttft_ms = (ttft_end - o.sent_s) * 1e3
    record.frontend_prefill_ms = (ttft_end - o.routed_s) * 1e3
    record.frontend_total_ms = (float(tokens[-1]) - o.sent_s) * 1e3
    if o.prefill_done_s is not None:
        record.kv_transfer_estimated_ms = (first - o.prefill_done_s) * 1e3
