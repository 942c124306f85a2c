"""What one grid run sends, without running it: the grid's runs in order, how they are named,
the prompt sizer calibrated against the server, and a run's `Share` (its salted prompts, warm-up
and request bodies).

Light on purpose (aiohttp, pydantic and tokenizers; no pandas, no rich): the in-cluster load pod
(`incluster.pod`) imports it as `loadgen.runner` does, so both build byte-identical requests.
"""

import itertools
import time

from loadgen.api import API_PATHS, request_body, short_message
from loadgen.loops import Share, make_client
from loadgen.prompts import PromptCache, TextSizer, WordSizer, build_prompts, calibration_texts
from loadgen.request import stream_request
from measurement.record import RequestRecord
from workload.config import LoadConfig


def grid_keys(config: LoadConfig) -> list[tuple[int, int, int]]:
    """Every run of the grid in the order it runs: (prefix kinds, concurrency, repetition),
    points in `prefix_kinds` x `concurrency` order, repetitions together."""
    points = itertools.product(config.prefix_kinds, config.concurrency)
    return [
        (k, c, rep) for (k, c), rep in itertools.product(points, range(1, config.repetitions + 1))
    ]


def run_salt(key: tuple[int, int, int]) -> str:
    """What seeds run `key`'s prompts and lengths besides the grid's seed: "k2-c4-r1"."""
    kinds, conc, rep = key
    return f"k{kinds}-c{conc}-r{rep}"


def run_label(key: tuple[int, int, int]) -> str:
    """How warnings name a run: "K=2 c=4 rep 1"."""
    return f"K={key[0]} c={key[1]} rep {key[2]}"


def share_for_run(
    url: str,
    model: str,
    config: LoadConfig,
    sizer: TextSizer,
    key: tuple[int, int, int],
    prompts_from: PromptCache | None = None,
) -> Share:
    """The whole of run `key` = (prefix kinds, concurrency, repetition) as one `Share` against
    `url` (a `base_url`): its `config.requests_per_run` prompts salted by the key (so no earlier
    run sent their prefixes: `loadgen.runner`'s module docstring), each at its length
    (`LoadConfig.request_lengths`: fixed, or drawn), its warm-up prompts (another salt, the
    mean lengths; `warmup_requests`, default one per stream) and the Poisson seed of the
    repetition.
    `prompts_from`: a cache shared with other grids that send the same prompts (else they
    are built here)."""
    kinds, conc, rep = key
    salt = run_salt(key)
    prefix = config.prefix_tokens
    lengths = config.request_lengths(config.requests_per_run, salt)
    shape = dict(prefix_kinds=kinds, prefix_tokens=prefix, seed=config.seed)
    build = build_prompts if prompts_from is None else prompts_from.build
    prompts = build(
        sizer,
        n=config.requests_per_run,
        salt=salt,
        suffix_tokens=[p - prefix for p, _ in lengths],
        **shape,
    )
    warmup = build(
        sizer,
        n=config.warmup_count(conc),
        salt=f"warmup-{salt}",
        suffix_tokens=config.suffix_tokens,
        **shape,
    )
    return Share(
        url=url,
        path=API_PATHS[config.api],
        config=config,
        concurrency=conc,
        warmup=[
            request_body(config.api, model, p.text, config.max_tokens, plain=config.plain_openai)
            for p in warmup
        ],
        bodies=[
            request_body(config.api, model, p.text, out, plain=config.plain_openai)
            for p, (_, out) in zip(prompts, lengths, strict=True)
        ],
        records=[RequestRecord(index=i, prefix_id=p.prefix_id) for i, p in enumerate(prompts)],
        arrival_seed=f"{config.seed}:arrivals:{rep}",
    )


async def calibrate_word_sizer(url: str, model: str, config: LoadConfig) -> WordSizer:
    """Measure tokens per word from the server's `usage.prompt_tokens` for two prompts of
    different length (see `calibration_texts`); sends 2 requests with max_tokens=1 to `url`
    (a `base_url`). Falls back to 1 token/word, its `source` saying why: a calibration request
    failed (the first error's kind and message), the server reported no usage, or its
    prompt_tokens did not grow with the prompt. Never raises for request failures.
    """
    short, long = calibration_texts()
    path = API_PATHS[config.api]
    records = []
    async with make_client(url, config, 1) as client:
        for i, text in enumerate((short, long)):
            record = RequestRecord(index=i, prefix_id=0, intended_ns=time.monotonic_ns())
            body = request_body(config.api, model, text, 1, plain=config.plain_openai)
            await stream_request(client, path, body, record, config.request_timeout_s)
            records.append(record)
            if not record.ok:
                break
    fallback = "approximate:1 token/word"
    failed = [r for r in records if not r.ok]
    if failed:
        reason = f"{failed[0].error_kind}: {short_message(failed[0].error or '')}"
        return WordSizer(1.0, f"{fallback} (calibration request failed: {reason})")
    counts = [r.prompt_tokens for r in records]
    if counts[0] is None or counts[1] is None:
        return WordSizer(1.0, f"{fallback} (server reported no usage)")
    if counts[1] <= counts[0]:
        return WordSizer(
            1.0,
            f"{fallback} (server's prompt_tokens did not grow with the prompt: "
            f"{counts[0]} then {counts[1]})",
        )
    words = (len(short.split()), len(long.split()))
    per_word = (counts[1] - counts[0]) / (words[1] - words[0])
    return WordSizer(per_word, f"server-calibrated:{per_word:.3f} tokens/word")
