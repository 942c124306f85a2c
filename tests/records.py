"""Request records built by hand with known times, for the tests of statistics, SLOs and the
metric registry."""

from measurement.record import RequestRecord

MS = 1_000_000


def record(i: int, sent_ms: int, ttft: int, gaps: list[int], **usage: int | None) -> RequestRecord:
    """A successful record: sent at `sent_ms`, first token `ttft` ms later, then `gaps` (ms)."""
    tokens = [sent_ms + ttft]
    for gap in gaps:
        tokens.append(tokens[-1] + gap)
    return RequestRecord(
        index=i,
        prefix_id=0,
        intended_ns=(sent_ms - 1) * MS,
        sent_ns=sent_ms * MS,
        first_chunk_ns=(sent_ms + ttft - 1) * MS,
        first_token_ns=tokens[0] * MS,
        token_ns=[t * MS for t in tokens],
        last_token_ns=tokens[-1] * MS,
        end_ns=(tokens[-1] + 2) * MS,
        prompt_tokens=usage.get("prompt", 1000),
        completion_tokens=usage.get("completion", len(tokens)),
        cached_tokens=usage.get("cached"),
    )
