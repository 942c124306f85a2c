"""``testbed render``: every object a stack would apply, without a cluster.

Read for every ``testbed --help``: the command imports what it runs inside its function
(``tests/test_cli_help.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from testbed.console import fail
from testbed.stack_options import (
    OUTPUT,
    SetOption,
    load_step_note,
    render_or_exit,
    say_settings,
    set_settings,
    under_project,
    warn,
)

if TYPE_CHECKING:
    from configkeys.key_paths import Setting

RENDER_OUT = Path("out/render")
"""The default ``--out``, in the project folder (:func:`~testbed.stack_options.under_project`):
``RENDER_OUT/STACK``, one folder per stack."""


def _sizing_table(sizing: dict[str, Any]) -> Any:
    from rich.table import Table

    from stackmodel.quantities import format_quantity

    table = Table(title="sizing")
    for col in ("component", "memory limit", "memory floor", "why", "fits"):
        table.add_column(col)
    for c in sizing["components"]:
        table.add_row(
            c["name"],
            format_quantity(c["memory_limit_bytes"]),
            c["memory_floor_quantity"] or "-",
            "base + /dev/shm + host-buffered KV" if c["host_buffers_kv"] else "base + /dev/shm",
            "yes" if c["fits"] else "NO",
        )
    return table


def _crossover(console: Any, stack: str, settings: Sequence[Setting], out: Path | None) -> None:
    """Print the crossover sentence; with ``out``, the sweep's table and its figure there."""
    from rich.table import Table
    from rich.text import Text

    from stackmodel.crossover import SWEEP_LINKS, crossover
    from stackmodel.stacks import load_stack

    result = crossover(load_stack(stack, settings))
    console.print(Text(result.summary()), soft_wrap=True)
    if out is None:
        return
    from testbed.crossover_figure import draw_crossover
    from testbed.render_files import add_written

    table = Table(title="crossover: KV path cost / prefill saved, ms (yes: it pays)")
    table.add_column("prompt tokens")
    for name in SWEEP_LINKS:
        table.add_column(name)
    for prompt in sorted({p.prompt_tokens for p in result.points}):
        row = {p.link: p for p in result.points if p.prompt_tokens == prompt}
        table.add_row(
            f"{prompt:,}",
            *(
                f"{row[n].cost_s * 1e3:,.1f} / {row[n].gain_s * 1e3:,.1f}"
                + (" yes" if row[n].pays else "")
                for n in SWEEP_LINKS
            ),
        )
    console.print(table)
    path = draw_crossover(result, stack, out / "crossover.png")
    add_written(out, path)
    console.print(f"wrote the crossover figure to {path}")


def render_command(
    stack: Annotated[str, typer.Argument(help="Stack name (stacks/Pulumi.STACK.yaml).")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Folder for the rendered files [default: out/render/STACK, one folder per stack].",
            show_default=False,
            rich_help_panel=OUTPUT,
        ),
    ] = RENDER_OUT,
    overrides: SetOption = None,
    sweep: Annotated[
        bool,
        typer.Option(
            "--crossover",
            help="Also print where disaggregation pays over prompt length and link speed, and "
            "write the figure (crossover.png in --out).",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
) -> None:
    """Write every object the stack would apply (a YAML file each), its Helm release and its
    outputs; print the placement, the sizing and where disaggregation starts to pay.

    Example: testbed render kv-routing --set topology.workers[0].replicas=2
    """
    from rich.table import Table
    from rich.text import Text

    from outputs.tables import table_console
    from testbed.render_files import RenderFolderError, write_rendered

    console = table_console(highlight=False)
    out = under_project(out, RENDER_OUT) / stack if out == RENDER_OUT else out
    settings = set_settings(overrides)
    rendered = render_or_exit(stack, settings)
    say_settings(stack, settings)
    try:
        paths = write_rendered(rendered, out)
    except RenderFolderError as exc:
        fail(str(exc))
    except OSError as exc:  # --out names a file, or a folder that cannot be written
        fail(f"cannot write the rendered files to --out {out}: {exc.strerror or exc}")
    if rendered.outputs.get("stackRole") == "platform":
        outputs = rendered.outputs
        console.print(
            f"platform stack {stack}: dynamo-platform chart {outputs['chartVersion']}, release "
            f"{outputs['releaseName']} in {outputs['operatorNamespace']}, operator scope "
            f"{outputs['operatorScope']}; graph stacks read it with platformStack: {stack}."
        )
        for warning in outputs.get("warnings", []):
            warn(warning)
        if sweep:
            warn("--crossover: a platform stack runs no workers, so there is no crossover")
        console.print(f"wrote {len(paths)} files to {out}/")
        return
    placement = Table(title=f"stack {stack}: placement")
    columns = ("component", "type", "replicas", "nodeClass", "gpus")
    for col in columns:
        placement.add_column(col)
    for row in rendered.outputs.get("placement", []):
        placement.add_row(*(Text("-" if row[c] is None else str(row[c])) for c in columns))
    console.print(placement)
    sizing = rendered.outputs["sizing"]
    console.print(_sizing_table(sizing))
    console.print(
        f"KV per token {sizing['kv_bytes_per_token']:,} B; per request "
        f"({sizing['prompt_tokens']:,} tokens) {sizing['kv_mb_per_request']:,.1f} MB; "
        f"highest concurrency {sizing['concurrency']}."
    )
    verdict = sizing["disaggregation"]["summary"]
    if not any(row["type"] == "prefill" for row in rendered.outputs.get("placement", [])):
        verdict = f"(aggregated stack, no KV transfer) if it were disaggregated: {verdict}"
    console.print(Text(verdict), soft_wrap=True)
    _crossover(console, stack, settings, out if sweep else None)
    for warning in rendered.outputs.get("warnings", []):
        warn(warning)
    console.print(f"wrote {len(paths)} files to {out}/")
    load_step_note([rendered])
