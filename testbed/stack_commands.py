"""``testbed render``, ``testbed diff`` and ``testbed simulate``: stacks without a cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.table import Table
from rich.text import Text

from components.errors import StackConfigError
from components.sizing import format_quantity
from components.stack_sizing import stack_sizing
from loadgen.cli import _int_list, fail, print_settings_note
from loadgen.html_report import write_folder_reports
from loadgen.incidents import describe
from loadgen.report import client_server_table, comparison_table, seed_table, table_console
from loadgen.results_folder import REPORT_FILE
from testbed.compare import print_resource_note
from testbed.localgraph import LocalGraphError
from testbed.render import Rendered, StackFileError, render_stack
from testbed.render_files import diff_rendered, write_rendered
from testbed.seed import seed_accuracy_note
from testbed.simulate import load_stack, simulate_stack

console = table_console(highlight=False)

STACK_ERRORS = (FileNotFoundError, StackFileError, StackConfigError)
"""What a bad stack name, file or config raises: one ``error:`` line (``loadgen.cli.fail``),
exit code 2."""


def warn(message: str) -> None:
    """Print ``warning: <message>`` (verbatim)."""
    console.print(Text("warning: ", style="yellow") + Text(message), soft_wrap=True)


def _render_or_exit(stack: str) -> Rendered:
    """Render a stack; a bad stack name, file or config prints the message and exits with 2."""
    try:
        return render_stack(stack)
    except STACK_ERRORS as exc:
        fail(str(exc))


def _sizing_table(sizing: dict[str, Any]) -> Table:
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


def render_command(
    stack: Annotated[str, typer.Argument(help="Stack name (stacks/Pulumi.<stack>.yaml).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the rendered files.")] = Path(
        "out/render"
    ),
) -> None:
    """Write every object the stack would apply (a YAML file each), its Helm release, outputs."""
    rendered = _render_or_exit(stack)
    try:
        paths = write_rendered(rendered, out)
    except OSError as exc:  # --out names a file, or a folder that cannot be written
        fail(f"cannot write the rendered files to --out {out}: {exc.strerror or exc}")
    if rendered.outputs.get("stackRole") == "platform":
        outputs = rendered.outputs
        console.print(
            f"platform stack {stack}: dynamo-platform chart {outputs['chartVersion']}, release "
            f"{outputs['releaseName']} in {outputs['operatorNamespace']}, operator scope "
            f"{outputs['operatorScope']}; graph stacks read it with platformStack: {stack}."
        )
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
    for warning in rendered.outputs.get("warnings", []):
        warn(warning)
    console.print(f"wrote {len(paths)} files to {out}/")


def diff_command(
    stack_a: Annotated[str, typer.Argument(help="First stack.")],
    stack_b: Annotated[str, typer.Argument(help="Second stack.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the changes as JSON.")] = False,
) -> None:
    """Show, object by object and field by field, what changes from STACK_A to STACK_B."""
    changes = diff_rendered(_render_or_exit(stack_a), _render_or_exit(stack_b))
    if as_json:
        typer.echo(json.dumps([c.__dict__ for c in changes], indent=2, default=str))
        return
    table = Table(title=f"{stack_a} -> {stack_b}: {len(changes)} changes")
    for col in ("object", "field", stack_a, stack_b):
        table.add_column(col, overflow="fold")
    for c in changes:
        table.add_row(
            Text(c.object), Text(c.path or "(whole object)"), Text(_show(c.a)), Text(_show(c.b))
        )
    console.print(table)


def _show(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value)


def simulate_command(
    stack: Annotated[str, typer.Argument(help="Stack to simulate.")],
    stack_b: Annotated[
        str | None, typer.Argument(help="Optional second stack, shown side by side as A / B.")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="Results folder.")] = Path("out/simulate"),
    full: Annotated[
        bool, typer.Option("--full", help="The stack's whole grid (seed: 4 x 2 x 3 runs).")
    ] = False,
    prefix_kinds: Annotated[
        str | None, typer.Option(help="Grid: prefix kinds, comma-separated (e.g. 2,24).")
    ] = None,
    concurrency: Annotated[
        str | None, typer.Option(help="Grid: concurrencies, comma-separated (e.g. 4,1).")
    ] = None,
    repetitions: Annotated[int | None, typer.Option(min=1, help="Runs per grid point.")] = None,
    requests: Annotated[
        int | None, typer.Option("--requests", min=1, help="Requests per run.")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a stack config key for this simulation, KEY=VALUE in `pulumi config "
            "set --path` syntax, e.g. --set topology.workers[0].memoryLimit=3584Mi "
            "--set sizing.allowUnsafeMemory=true (repeatable).",
        ),
    ] = None,
    speedup: Annotated[
        float,
        typer.Option(help="Mocker --speedup-ratio of the routing run (its timing is not used)."),
    ] = 10.0,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Simulate a stack on this machine: routing and prefix-cache hits from the real Dynamo
    frontend with CPU-only mocker workers, timing from a model of the stack's shared GPUs, KV
    link and host memory; print the seed-style table (with STACK_B, both as "A / B") and any
    OOMKill the memory model saw."""
    if not speedup > 0:
        raise typer.BadParameter(f"must be > 0, got {speedup:g}", param_hint="--speedup")
    try:
        grid = {
            key: value
            for key, value in {
                "prefix_kinds": _int_list("prefix-kinds", prefix_kinds),
                "concurrency": _int_list("concurrency", concurrency),
                "repetitions": repetitions,
                "requests_per_run": requests,
            }.items()
            if value is not None
        }
    except ValueError as exc:
        fail(str(exc))
    names = [stack, *([stack_b] if stack_b else [])]
    for name in names:  # every stack is checked before anything starts
        try:
            cfg = load_stack(name, overrides or ())
        except STACK_ERRORS as exc:
            fail(str(exc))
        for message in stack_sizing(cfg).warnings:
            warn(f"{name}: {message}")
    results = []
    for name in names:
        console.print(f"simulating {name} ...")
        try:
            sim = simulate_stack(
                name,
                out,
                full=full,
                grid=grid,
                overrides=overrides or (),
                speedup_ratio=speedup,
                progress=progress,
            )
        except LocalGraphError as exc:
            fail(str(exc))
        except ValidationError as exc:
            fail(f"invalid grid: {exc.errors()[0]['msg']}")
        except KeyboardInterrupt:
            console.print(f"interrupted; every process of {name}'s graph was stopped")
            raise typer.Exit(130) from None
        groups = ", ".join(f"{g.replicas} {g.role} ({g.name})" for g in sim.spec.groups)
        console.print(f"{name}: router {sim.spec.router_mode}; {groups}")
        table = seed_table(
            sim.result.points, title=f"{name} (SIMULATED)", incidents=sim.result.incidents
        )
        console.print(table)
        console.print(Text(f"SIMULATED by {sim.result.simulated}"), soft_wrap=True)
        server_side = client_server_table(sim.result.runs, title=f"{name}: client vs server")
        if server_side is not None:
            console.print(server_side)
        for warning in sim.result.warnings:
            warn(warning)
        for incident in sim.result.incidents:
            warn(f"{name}: {describe(incident)}: {incident.message}")
        results.append(sim)
    if len(results) == 2:
        a, b = results
        console.print(
            comparison_table(
                a.result.points, b.result.points, title=f"{a.stack} / {b.stack} (SIMULATED)"
            )
        )
        note = seed_accuracy_note({a.stack: a.result.points, b.stack: b.result.points})
        if note is not None:
            console.print(Text(note), soft_wrap=True)
        print_settings_note(a.out_dir, b.out_dir, (a.stack, b.stack))
        print_resource_note(a.out_dir, b.out_dir)
    _write_reports([sim.out_dir for sim in results], out / REPORT_FILE)
    console.print(f"results in {out}/")


def _write_reports(folders: list[Path], comparison: Path) -> None:
    """``report.html`` in each stack's results folder and, for two stacks, the A / B report
    at ``comparison``; a failure is a warning (the results are already written)."""
    try:
        reports = write_folder_reports(folders, comparison)
    except (OSError, ValueError) as exc:
        warn(f"no report written: {exc}")
        return
    console.print(
        f"report{'s' if len(reports) > 1 else ''} in {', '.join(map(str, reports))}", soft_wrap=True
    )
