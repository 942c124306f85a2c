"""The `--slo` option of `testbed load`, `simulate`, `compare` and `report`: its help and its
parsing (`workload.slo.parse_slo`), one `error:` line on bad input."""

from __future__ import annotations

from typing import Annotated

import typer

from testbed.console import fail
from workload.slo import Slo, SloError, keys_text, parse_slo

SLO_HELP = (
    "Service-level objectives: KEY=MS items, comma-separated, each an upper bound in ms on a "
    f"percentile of a latency; keys {keys_text()} (e.g. ttft_p99_ms=1000 or tpot_p95_ms=40). "
    "Default: the stack's load.slo. Adds attainment, goodput and whether each grid point met it."
)

SloOption = Annotated[str | None, typer.Option("--slo", metavar="SLO", help=SLO_HELP)]
"""The option as each command declares it."""


def slo_of(text: str | None) -> Slo | None:
    """`--slo`'s value as an `Slo` (None when not given); exit 2 with one line naming the key
    and the fix when it is not one."""
    if text is None:
        return None
    try:
        return parse_slo(text)
    except SloError as exc:
        message = str(exc)
        fail(message if message.startswith("--slo") else f"--slo: {message}")
