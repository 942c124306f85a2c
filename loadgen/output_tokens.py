"""Output tokens of the requests whose stream carried no `usage`.

Some servers ignore `stream_options.include_usage` (the request asks for it: `loadgen.api`),
so a stream ends with no `completion_tokens`: output tokens/s would be 0, TPOT and output
length missing. Such a request's output is counted from what it streamed: with the model's
tokenizer when the run has one (the streamed content text joined and encoded without special
tokens, so the end-of-sequence token, which has no text, is not counted), else one token per
content-bearing chunk. `RequestRecord.completion_tokens_from` says which; the run warns.
"""

from collections.abc import Callable, Sequence

from measurement.record import RequestRecord

CHUNKS = "content chunks"
"""`completion_tokens_from` of a request counted one token per content-bearing chunk."""


def count_output_tokens(
    records: Sequence[RequestRecord], tokenizer: tuple[str, Callable[[str], int]] | None
) -> None:
    """Fill `completion_tokens` (and `completion_tokens_from`) in place for every record that
    streamed content but reported no usage: `tokenizer` = (its source, e.g.
    "tokenizer:<path>", and a text -> token count function), else `CHUNKS`."""
    for record in records:
        if record.completion_tokens is not None or not record.token_ns:
            continue
        if tokenizer is None or not record.text:
            record.completion_tokens, record.completion_tokens_from = len(record.token_ns), CHUNKS
        else:
            source, count = tokenizer
            record.completion_tokens = count("".join(record.text))
            record.completion_tokens_from = source
