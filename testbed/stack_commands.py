"""``testbed render`` and ``testbed diff``: the Pulumi program offline, no cluster, no CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from components.errors import StackConfigError
from testbed.render import Rendered, render_stack
from testbed.render_files import diff_rendered, write_rendered

console = Console()


def _render_or_exit(stack: str) -> Rendered:
    """Render a stack; a bad stack name or config prints the message and exits with 2."""
    try:
        return render_stack(stack)
    except (FileNotFoundError, StackConfigError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def _sizing_table(sizing: dict[str, Any]) -> Table:
    table = Table(title="sizing", show_header=True)
    table.add_column("component")
    table.add_column("memory limit")
    table.add_column("floor (host-buffered KV)")
    table.add_column("fits")
    for c in sizing["components"]:
        table.add_row(
            c["name"],
            f"{c['memory_limit_bytes'] / 2**20:,.0f}Mi",
            c["memory_floor_quantity"] or "-",
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
    paths = write_rendered(rendered, out)
    placement = Table(title=f"stack {stack}: placement")
    for col in ("component", "type", "replicas", "nodeClass", "gpus"):
        placement.add_column(col)
    for row in rendered.outputs.get("placement", []):
        placement.add_row(
            *(str(row[c]) for c in ("component", "type", "replicas", "nodeClass", "gpus"))
        )
    console.print(placement)
    sizing = rendered.outputs["sizing"]
    console.print(_sizing_table(sizing))
    console.print(
        f"KV per token {sizing['kv_bytes_per_token']:,} B; per request "
        f"({sizing['prompt_tokens']:,} tokens) {sizing['kv_mb_per_request']:,.1f} MB; "
        f"highest concurrency {sizing['concurrency']}.",
        highlight=False,
    )
    console.print(sizing["disaggregation"]["summary"], highlight=False, soft_wrap=True)
    for warning in rendered.outputs.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    console.print(f"wrote {len(paths)} files to {out}/", highlight=False)


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
        table.add_row(c.object, c.path or "(whole object)", _show(c.a), _show(c.b))
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
    speedup: Annotated[
        float | None, typer.Option(help="Mocker --speedup-ratio (default: the stack's).")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Run a stack's topology on this machine (real Dynamo frontend, CPU-only mocker workers)
    with its load grid, and print the seed-style table; with STACK_B, both as "A / B"."""
    from components.errors import StackConfigError
    from loadgen.report import comparison_table, seed_table
    from testbed.localgraph import LocalGraphError
    from testbed.simulate import simulate_stack

    results = []
    for name in [stack, *([stack_b] if stack_b else [])]:
        console.print(f"simulating {name} ...", highlight=False)
        try:
            sim = simulate_stack(name, out, full=full, speedup_ratio=speedup, progress=progress)
        except (FileNotFoundError, StackConfigError, LocalGraphError) as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        groups = ", ".join(f"{g.replicas} {g.role} ({g.name})" for g in sim.spec.groups)
        console.print(f"{name}: router {sim.spec.router_mode}; {groups}", highlight=False)
        console.print(seed_table(sim.result.points, title=f"{name} (simulated)"))
        for warning in sim.result.warnings:
            console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
        results.append(sim)
    if len(results) == 2:
        a, b = results
        console.print(
            comparison_table(a.result.points, b.result.points, title=f"{a.stack} / {b.stack}")
        )
    console.print(f"results in {out}/", highlight=False)
