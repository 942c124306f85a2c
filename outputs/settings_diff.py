"""Whether two load results can be compared: which load settings differ and which metrics each
difference invalidates.

Read by `testbed compare` / `testbed report A B` (from each folder's `result.json`) and by the
load step's `comparison` output (from each stack's `loadSettings` output). A difference is said
beside the resource note (`stackmodel.resources.resource_note`); only two results with no
grid point in common are refused (`nothing_comparable`): every other difference leaves some
metric comparable. A simulated result beside a measured one is said too (`provenance_note`).
"""

from collections.abc import Sequence

from pydantic import BaseModel

from measurement.results import PointSummary
from workload.config import LoadConfig

TTFT = "TTFT p50/p99"
TTFT_P99 = "TTFT p99"
RATE = "requests/s"
CACHED = "cached ratio"

SETTING_EFFECTS: dict[str, tuple[tuple[str, ...], str]] = {
    "prompt_tokens": ((TTFT, RATE, CACHED), "prefill work and cacheable share per request"),
    "prefix_share": ((TTFT, CACHED), "the share of each prompt a prefix cache can hold"),
    "max_tokens": ((TTFT, RATE), "decode work per request, and so what is in flight"),
    "prompt_lengths": ((TTFT, RATE, CACHED), "how prefill work varies from request to request"),
    "output_lengths": ((TTFT, RATE), "how decode work varies from request to request"),
    "api": ((TTFT, RATE, CACHED), "chat wraps every prompt in the model's chat template"),
    "arrival": ((TTFT, RATE), "a closed loop and an open loop offer different load"),
    "request_rate": ((TTFT, RATE), "the open loop's offered load"),
    "warmup_requests": ((TTFT, CACHED), "how warm the prefix cache is when measuring starts"),
    "requests_per_run": ((TTFT_P99,), "the samples a p99 rests on"),
    "duration_s": ((TTFT_P99,), "the samples a p99 rests on"),
    "repetitions": ((TTFT_P99,), "the runs a grid point's median rests on"),
}
"""LoadConfig field -> (the metrics a difference invalidates, why). The grid axes
(`prefix_kinds`, `concurrency`) only decide which points both sides have; the seed, timeouts,
connection pool and client processes change how the client sends, not what is measured."""


class SettingDifference(BaseModel):
    """One load setting that differs: its config key (camelCase, as in a stack's config), A's
    and B's values (as JSON), the metrics it invalidates, and why."""

    setting: str
    a: object
    b: object
    invalidates: list[str]
    why: str


def settings_differences(a: LoadConfig | None, b: LoadConfig | None) -> list[SettingDifference]:
    """The `SETTING_EFFECTS` settings whose values differ between A and B, in that order; []
    when either side's settings are unknown (`settings_note` says so)."""
    if a is None or b is None:
        return []
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    return [
        SettingDifference(
            setting=LoadConfig.model_fields[name].alias or name,
            a=da[name],
            b=db[name],
            invalidates=list(metrics),
            why=why,
        )
        for name, (metrics, why) in SETTING_EFFECTS.items()
        if da[name] != db[name]
    ]


def settings_note(a: LoadConfig | None, b: LoadConfig | None, name_a: str, name_b: str) -> str:
    """The lines printed beside the resource note under an A / B table: which load settings
    differ and what each invalidates; one line when a side's settings are unknown; '' when
    they match."""
    unknown = [name for name, config in ((name_a, a), (name_b, b)) if config is None]
    if unknown:
        return (
            f"Load settings of {' and '.join(unknown)} unknown (no result.json or loadSettings): "
            "whether both used the same prompts, output length and loop is not known."
        )
    differences = settings_differences(a, b)
    if not differences:
        return ""
    shown = ", ".join(f"{d.setting} {d.a} / {d.b}" for d in differences)
    lines = [f"Load settings differ ({name_a} / {name_b}): {shown}."]
    lines += [
        f"- {d.setting}: {', '.join(d.invalidates)} not comparable ({d.why})." for d in differences
    ]
    return "\n".join(lines)


def nothing_comparable(a: Sequence[PointSummary], b: Sequence[PointSummary]) -> str | None:
    """Why A and B cannot be compared at all (no grid point in common), else None."""
    keys_a = {(p.prefix_kinds, p.concurrency) for p in a}
    keys_b = {(p.prefix_kinds, p.concurrency) for p in b}
    if keys_a & keys_b:
        return None

    def points(keys: set[tuple[int, int]]) -> str:
        return ", ".join(f"K={k} c={c}" for k, c in sorted(keys)) or "none"

    return f"no grid point in common: A measured {points(keys_a)}; B measured {points(keys_b)}"


def provenance_note(name_a: str, a: str | None, name_b: str, b: str | None) -> str:
    """The lines under an A / B table saying which side is simulated and by what ('' when both
    were measured): a simulated folder beside a measured one is a warning, since the two
    differ by more than the stacks."""
    if a is None and b is None:
        return ""
    if a is not None and b is not None:
        return f"SIMULATED: both; {name_a}: {a}" + ("" if a == b else f"; {name_b}: {b}")
    simulated, measured = (name_a, name_b) if a is not None else (name_b, name_a)
    return (
        f"warning: {simulated} is SIMULATED ({a or b}); {measured} was measured against a "
        "server. The ratios compare a model with real hardware, not two stacks: read them as "
        "a check of the simulation"
    )
