"""Output tokens of the requests whose stream carried no `usage`, or one the stream contradicts.

Some servers ignore `stream_options.include_usage` (the request asks for it: `loadgen.api`),
so a stream ends with no `completion_tokens`: output tokens/s would be 0, TPOT and output
length missing. Others send a usage the stream shows to be wrong: 0 tokens after content was
streamed, more than the request's `max_tokens` allows (a server summing running totals), or
more tokens than the streamed text can hold (`capacity`). Such a request's output is counted
from what it streamed: with the model's tokenizer when the run has one (the streamed text
joined and encoded without special tokens, so the end-of-sequence token, which has no text, is
not counted), else one token per content-bearing chunk. `RequestRecord.completion_tokens_from`
says which, `usage_completion_tokens` keeps the server's contradicted figure; the run warns.
"""

from collections.abc import Callable, Sequence

from measurement.record import RequestRecord
from metrics.latency import hidden_tokens

CHUNKS = "content chunks"
"""`completion_tokens_from` of a request counted one token per content-bearing chunk."""


def capacity(record: RequestRecord) -> int | None:
    """The most output tokens the streamed text can hold: its UTF-8 bytes (a byte-level
    tokenizer's every token decodes to at least one byte) plus one token without text (the
    end-of-sequence token a server counts), plus the hidden reasoning tokens
    (`metrics.latency.hidden_tokens`); None for a stream without text (the Dynamo mocker's)."""
    if not record.text:
        return None
    return sum(len(t.encode()) for t in record.text) + 1 + hidden_tokens(record)


def contradicted(record: RequestRecord, max_tokens: int | None) -> bool:
    """True when the request streamed content and its usage's `completion_tokens` cannot be
    what it produced: 0, above `max_tokens` (what the request asked for at most; None: not
    checked), or above what the streamed text can hold (`capacity`)."""
    out = record.completion_tokens
    if out is None or not record.token_ns:
        return False
    room = capacity(record)
    above_max = max_tokens is not None and out > max_tokens
    return out == 0 or above_max or (room is not None and out > room)


def count_output_tokens(
    records: Sequence[RequestRecord],
    tokenizer: tuple[str, Callable[[str], int]] | None,
    max_tokens: int | None = None,
) -> None:
    """Fill `completion_tokens` (and `completion_tokens_from`) in place for every record that
    streamed content but reported no usage, or a usage the stream contradicts (`contradicted`
    against `max_tokens`, the request's limit; its figure goes to `usage_completion_tokens`,
    its per-chunk counts are dropped, its hidden reasoning tokens are added to the count):
    `tokenizer` = (its source, e.g. "tokenizer:<path>", and a text -> token count function),
    else `CHUNKS`."""
    for record in records:
        if not record.token_ns:
            continue
        if record.completion_tokens is not None:
            if not contradicted(record, max_tokens):
                continue
            record.usage_completion_tokens = record.completion_tokens
            record.chunk_tokens = []
        if tokenizer is None or not record.text:
            counted, record.completion_tokens_from = len(record.token_ns), CHUNKS
        else:
            source, count = tokenizer
            counted, record.completion_tokens_from = count("".join(record.text)), source
        record.completion_tokens = counted + hidden_tokens(record)
