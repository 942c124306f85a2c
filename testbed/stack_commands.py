"""``testbed render``, ``testbed diff`` and ``testbed simulate``: stacks without a cluster.

This module is read for every ``testbed --help``: it imports only typer and :mod:`testbed.console`
at the top, and each command imports what it runs
inside its function (``tests/test_cli_help.py`` checks that help loads none of the heavy
modules).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from testbed.compare import print_settings_note
from testbed.console import EXIT_INTERRUPTED, fail, int_list, stderr_line
from testbed.slo_option import SloOption, slo_of

if TYPE_CHECKING:
    from configkeys.key_paths import Setting
    from simulator.simulate import Simulation
    from stackmodel.config import StackLoadConfig
    from stackmodel.plan import StackPlan
    from testbed.render import Rendered

GRID = "Grid"
STACK = "Stack"
OUTPUT = "Output"

SET_HELP = (
    "Set a stack key for this command only, KEY=VALUE, the key as `pulumi config set --path` "
    "spells it: e.g. topology.workers[0].replicas=2 (repeatable). In every command of two "
    "stacks (diff, simulate) --set applies to both, --set-b to the second only."
)
SET_B_HELP = (
    "Set a stack key of the second stack only (as --set; repeatable, applied after --set). "
    "Without STACK_B the second stack is STACK with these values: `testbed simulate STACK "
    "--set-b KEY=VALUE` runs a one-line change beside the stack as it is."
)
SET_B_SUFFIX = "+set-b"
"""The name the second stack takes where it is the first with ``--set-b`` values (its results
folder, its tables)."""
RENDER_OUT = Path("out/render")
SIMULATE_OUT = Path("out/simulate")
AGAINST_OUT = Path("out/against")
"""The default ``--out`` folders, in the project folder (:func:`under_project`); ``render``
writes into ``RENDER_OUT/STACK``, one folder per stack, as ``simulate`` does;
``simulate --against RESULTS`` into ``AGAINST_OUT/<RESULTS' folder name>``."""


def under_project(out: Path, default: Path) -> Path:
    """``out`` of a command: its default lies in the project folder whatever the working
    directory (run from ``docs/``, still the project's ``out/``, not ``docs/out/``); a folder the
    user names is theirs, relative to the working directory as usual."""
    from stackmodel.stacks import REPO

    return REPO / out if out == default else out


def _set_option(more: str = "") -> Any:
    """The ``--set`` option, its help :data:`SET_HELP` and ``more``."""
    return typer.Option("--set", metavar="KEY=VALUE", help=SET_HELP + more, rich_help_panel=STACK)


SetOption = Annotated[list[str] | None, _set_option()]
SetBOption = Annotated[
    list[str] | None,
    typer.Option("--set-b", metavar="KEY=VALUE", help=SET_B_HELP, rich_help_panel=STACK),
]


def _second_stack(
    stack_a: str, stack_b: str | None, settings_b: Sequence[Setting]
) -> tuple[str, str]:
    """(the second stack's file, its name in tables and folders): STACK_B, or STACK itself
    with ``--set-b`` values, named ``STACK+set-b`` (:data:`SET_B_SUFFIX`) where the names
    would otherwise be one."""
    file = stack_b or stack_a
    return file, f"{file}{SET_B_SUFFIX}" if file == stack_a and settings_b else file


def _stack_files(
    stacks: list[str], settings: list[Setting], settings_b: list[Setting]
) -> tuple[dict[str, str], dict[str, list[Setting]]]:
    """(each stack's name in tables and folders -> its file, and -> its settings) for
    ``simulate STACK...``: ``--set`` applies to every stack; ``--set-b`` to the second of two,
    or with one STACK adds STACK with those values (:func:`_second_stack`); refused with three
    or more stacks, and a stack named twice."""
    twice = next((name for name in stacks if stacks.count(name) > 1), None)
    if twice is not None:
        fail(
            f"{twice} is named twice: name different stacks, or simulate {twice} beside a "
            f"changed copy with --set-b (testbed simulate {twice} --set-b KEY=VALUE)"
        )
    if settings_b and len(stacks) > 2:
        fail(
            "--set-b changes the second of two stacks: with three or more, make the changed "
            "copy with `testbed init-stack NEW --from STACK` and name it"
        )
    files = {stacks[0]: stacks[0]}
    each = {stacks[0]: settings}
    if len(stacks) > 1 or settings_b:
        file_b, name_b = _second_stack(
            stacks[0], stacks[1] if len(stacks) > 1 else None, settings_b
        )
        files[name_b] = file_b
        each[name_b] = [*settings, *settings_b]
    for name in stacks[2:]:
        files[name], each[name] = name, settings
    return files, each


def _settings(items: Sequence[str] | None) -> list[Setting]:
    from configkeys.key_paths import KeyPathError, parse_settings

    try:
        return parse_settings(items or ())
    except KeyPathError as exc:
        fail(str(exc))


def _stack_errors() -> tuple[type[Exception], ...]:
    """What a bad stack name, file, config or ``--set`` raises, or the version gate's refusal
    (worded as a config error, raised once the platform's version is read): one ``error:``
    line, exit 2."""
    from configkeys.key_paths import KeyPathError
    from stackmodel.errors import StackConfigError
    from stackmodel.stack_layout import VersionGateError
    from stackmodel.stacks import StackFileError

    return (FileNotFoundError, StackFileError, StackConfigError, KeyPathError, VersionGateError)


def say_settings(stack: str, settings: Sequence[Setting]) -> None:
    """Say where each ``--set`` value came from: ``kv-routing: load.concurrency = [8] (--set;
    the stack file has [4, 8])``."""
    from outputs.tables import table_console
    from stackmodel.config import project_values, stack_role
    from stackmodel.stacks import platform_settings, stack_config

    if not settings:
        return
    raw = project_values(stack_config(stack)[0])
    console = table_console(highlight=False)
    for_platform = platform_settings(settings) if stack_role(raw) == "graph" else []
    for setting in settings:
        if any(setting.text == s.text for s in for_platform):
            platform = raw.get("platformStack") or "platform"
            where = f"for its platform stack '{platform}', which render and diff apply it to"
            console.print(
                f"{stack}: {setting.key} = {setting.value} (--set; {where})", soft_wrap=True
            )
            continue
        node: Any = raw
        for part in setting.path:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        before = "not set in the stack file" if node is None else f"the stack file has {node}"
        console.print(f"{stack}: {setting.key} = {setting.value} (--set; {before})", soft_wrap=True)


def _render_or_exit(stack: str, settings: Sequence[Setting] = ()) -> Rendered:
    """Render a stack; a bad stack name, file, config or --set prints one line, exits 2."""
    from testbed.render import render_stack

    try:
        return render_stack(stack, settings=settings)
    except _stack_errors() as exc:
        fail(str(exc))


def warn(message: str) -> None:
    """Print ``warning: <message>`` (verbatim)."""
    from rich.text import Text

    from outputs.tables import table_console

    table_console(highlight=False).print(
        Text("warning: ", style="yellow") + Text(message), soft_wrap=True
    )


def load_step_note(rendered: Sequence[Rendered]) -> None:
    """Offline, the load step cannot run: say so once, at the end, for every stack it concerns
    (the program exports why as ``loadStatus``; ``pulumi preview`` logs it itself)."""
    waiting = [r for r in rendered if isinstance(r.outputs.get("loadStatus"), str)]
    if waiting:
        names = ", ".join(r.stack for r in waiting)
        warn(
            f"load step not run ({names}): on a cluster, set load.nodeAddress (any node's "
            "address) or load.url, then pulumi up"
        )


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
    settings = _settings(overrides)
    rendered = _render_or_exit(stack, settings)
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


def diff_command(
    stack_a: Annotated[str, typer.Argument(help="First stack.")],
    stack_b: Annotated[
        str | None,
        typer.Argument(help="Second stack (default: STACK_A, with the --set-b values)."),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print every changed field as JSON.", rich_help_panel=OUTPUT),
    ] = False,
    overrides: SetOption = None,
    overrides_b: SetBOption = None,
) -> None:
    """Show what changes from STACK_A to STACK_B: a summary (the model, workers, GPUs, links,
    time-slicing and every other config change, with what it changes on the cluster and in the
    sizing), then component by component (role, replicas, placement, image, args, env,
    resources; an added component with its args and env); differences that are only the
    stacks' names are folded into one line. --set changes both stacks, --set-b STACK_B only.

    Example: testbed diff kv-routing disagg-same-node;
    testbed diff kv-routing --set-b topology.workers[0].replicas=2
    """
    import json

    from outputs.tables import table_console
    from testbed.component_diff import diff_lines
    from testbed.render_files import diff_rendered

    settings, settings_b = _settings(overrides), _settings(overrides_b)
    if stack_b is None and settings and not settings_b:
        fail(
            "--set applies to both stacks, so `testbed diff STACK --set ...` compares the stack "
            "with itself; to preview a change, use --set-b (the second stack only): testbed "
            f"diff {stack_a} " + " ".join(f"--set-b {s.text}" for s in settings)
        )
    stack_b = stack_b or stack_a
    a = _render_or_exit(stack_a, settings)
    b = _render_or_exit(stack_b, [*settings, *settings_b])
    changes = diff_rendered(a, b)
    if as_json:
        typer.echo(json.dumps([c.__dict__ for c in changes], indent=2, default=str))
        return
    say_settings(stack_a, settings)
    say_settings(stack_b, [*settings, *settings_b])
    console = table_console(highlight=False)
    if settings_b:
        console.print(
            f"--set-b applies to B ({stack_b}) only"
            + (f"; --set to A ({stack_a}) and B alike" if settings else ""),
            soft_wrap=True,
            markup=False,
        )
    from stackmodel.stacks import load_stack
    from testbed.config_diff import config_lines, config_summary

    plans = load_stack(stack_a, settings), load_stack(stack_b, [*settings, *settings_b])
    config = (
        config_summary(stack_a, stack_b, *plans),
        config_lines(stack_a, stack_b, *plans),
    )
    for line in diff_lines(stack_a, stack_b, a, b, changes, config):
        console.print(line, soft_wrap=True, markup=False)
    console.print(f"({len(changes)} field changes in all: testbed diff --json lists them)")
    load_step_note([a, b])


def _grid(
    prefix_kinds: str | None, concurrency: str | None, repetitions: int | None, requests: int | None
) -> dict[str, Any]:
    try:
        values = {
            "prefix_kinds": int_list("prefix-kinds", prefix_kinds),
            "concurrency": int_list("concurrency", concurrency),
            "repetitions": repetitions,
            "requests_per_run": requests,
        }
    except ValueError as exc:
        fail(str(exc))
    for name, text in (("prefix-kinds", prefix_kinds), ("concurrency", concurrency)):
        parsed = values[name.replace("-", "_")]
        if isinstance(parsed, list) and (not parsed or min(parsed) < 1):
            fail(f"--{name} takes integers >= 1, got {text!r}; e.g. --{name} 4,8")
    return {key: value for key, value in values.items() if value is not None}


def comparison_report(out: Path, names: Sequence[str]) -> Path:
    """Where ``testbed simulate A B ...`` writes the report of its stacks side by side: named
    after them (``report-A-vs-B.html``)."""
    return out / f"report-{'-vs-'.join(names)}.html"


def simulate_command(
    stacks: Annotated[
        list[str],
        typer.Argument(
            metavar="STACK...",
            help="Stacks to simulate: one, two (shown as A / B), or more (one table per "
            "metric with every stack); one STACK with --set-b: STACK beside STACK with those "
            "values.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Results folder (one folder per stack). [default: out/simulate; with "
            "--against RESULTS: out/against/<RESULTS' folder name>]",
            show_default=False,
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Keep the complete runs in --out (same settings) and run only the others.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="kv-routing and disagg-same-node (the seed's stacks, simulated on a reduced "
            "grid by default): their whole grid (4 x 2 x 3 runs). Other stacks always run "
            "their own load grid.",
            rich_help_panel=GRID,
        ),
    ] = False,
    prefix_kinds: Annotated[
        str | None,
        typer.Option(
            metavar="N,N",
            help="Prefix kinds, e.g. 2,24. [default: the stack's load.prefixKinds; the seed's "
            "stacks: 2,24]",
            rich_help_panel=GRID,
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            metavar="N,N",
            help="Requests in flight, e.g. 4,8. [default: the stack's; the seed's stacks: 4]",
            rich_help_panel=GRID,
        ),
    ] = None,
    repetitions: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Runs per grid point. [default: the stack's; the seed's stacks: 1]",
            rich_help_panel=GRID,
        ),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(
            "--requests",
            min=1,
            help="Requests per run. [default: the stack's; the seed's stacks: 100]",
            rich_help_panel=GRID,
        ),
    ] = None,
    overrides: SetOption = None,
    overrides_b: SetBOption = None,
    speedup: Annotated[
        float,
        typer.Option(
            min=0.001, help="Mocker --speedup-ratio of the routing run.", rich_help_panel=STACK
        ),
    ] = 100.0,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="No progress bar.", rich_help_panel=OUTPUT)
    ] = False,
    against: Annotated[
        Path | None,
        typer.Option(
            "--against",
            metavar="RESULTS",
            help="A measured results folder: simulate at its grid points and print each "
            "figure beside the measured one with its error.",
            rich_help_panel=GRID,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --against: compare a folder whose model, prompt or output lengths or "
            "engine differ from the stack's.",
            rich_help_panel=GRID,
        ),
    ] = False,
    slo: SloOption = None,
) -> None:
    """Simulate stacks on this machine: routing and prefix-cache hits from the real Dynamo
    frontend with CPU-only mocker workers, timing from a model of the stack's GPUs, KV link and
    host memory. Each stack runs its own load grid (the seed's two stacks a reduced one unless
    --full). Prints the seed-style table and the tails per stack (two stacks also as "A / B",
    more in one table per metric, ranked by goodput with an SLO; with --against, beside the
    measured figures).
    --set changes every stack, --set-b the second of two only (with one STACK: STACK with those
    values, beside STACK as it is).

    Example: testbed simulate kv-routing disagg-same-node --out out/sim;
    testbed simulate kv-routing --set-b topology.workers[0].replicas=2
    """
    from contextlib import ExitStack

    from outputs.folder_lock import FolderBusyError, folder_lock
    from outputs.folder_writer import complete_runs
    from outputs.resume import ResumeError
    from outputs.tables import table_console
    from simulator.routing import ROUTING_DIR
    from simulator.stack_values import (
        other_stack_values,
        refuse_other_stack_values,
        stack_values,
    )
    from stackmodel.stack_warnings import sizing_warnings
    from stackmodel.stacks import load_stack
    from testbed.dependency_groups import missing_group
    from testbed.load_command import resumed_line

    out = _simulate_out(out, against)
    settings, settings_b = _settings(overrides), _settings(overrides_b)
    files, each = _stack_files(list(stacks), settings, settings_b)
    names = list(files)
    missing = missing_group(
        "sim",
        "the simulation needs the Dynamo frontend and mocker (ai-dynamo)",
        f"testbed simulate {' '.join(names)}",
    )
    if missing:
        fail(missing)
    grid = _grid(prefix_kinds, concurrency, repetitions, requests)
    if against is not None:
        grid = _against_grid(against, names, grid, full)
    objectives = slo_of(slo)
    if objectives is not None:
        grid["slo"] = objectives
    _refuse_twice_set(grid, [*settings, *settings_b])
    plans = {}
    for name, file in files.items():  # every stack and its grid is checked before anything
        try:  # is printed or written
            plans[name] = load_stack(file, each[name])
        except _stack_errors() as exc:
            fail(str(exc))
        _check_grid(name, plans[name], grid, each[name], full)
    for name, file in files.items():
        say_settings(file, each[name])
        noted = sizing_warnings(plans[name])
        for warning in noted:
            warn(f"{name}: {warning.render()}")
    if against is not None:
        _refuse_other_runs(against, names[0], plans[names[0]], force)
    kept: dict[str, int] = {}
    with ExitStack() as locks:
        for name in names:
            try:
                locks.enter_context(folder_lock(out / name))
            except FolderBusyError as exc:
                fail(str(exc))
            except OSError as exc:
                fail(f"cannot write the results to --out {out}: {exc.strerror or exc}")
            earlier = complete_runs(out / name / ROUTING_DIR)
            values = stack_values(plans[name], each[name])
            if earlier and not resume:
                other = other_stack_values(out / name, values)
                fail(
                    f"{out / name} already holds {earlier} complete run(s) of an earlier "
                    + (
                        f"simulation that --resume cannot continue ({'; '.join(other)}): "
                        "choose another --out"
                        if other
                        else "simulation: add --resume to continue it (runs at other grid "
                        "points are kept), or choose another --out"
                    )
                )
            try:
                if resume:
                    refuse_other_stack_values(out / name, values)
            except ResumeError as exc:
                fail(str(exc))
            kept[name] = earlier
        results = _simulate(
            plans, out, grid, each, full, speedup, not no_progress, resume, against is None
        )
    for name, count in kept.items():
        if count:
            total = complete_runs(out / name / ROUTING_DIR)
            table_console(highlight=False).print(resumed_line(out / name, count, total))
    if against is not None:
        _print_against(results[0], against)


def _simulate_out(out: Path | None, against: Path | None) -> Path:
    """``testbed simulate``'s ``--out``: the one given, else :data:`SIMULATE_OUT`, or with
    ``--against RESULTS`` :data:`AGAINST_OUT`/<RESULTS' folder name>, so that a comparison
    (the stack as the folder ran it, often with other ``--set`` values) never meets the stack's
    plain simulation in one folder; a default lies in the project folder."""
    from stackmodel.stacks import REPO

    if out is not None:
        return out
    if against is None:
        return REPO / SIMULATE_OUT
    return REPO / AGAINST_OUT / (against.resolve().name or "results")


def _against_grid(
    against: Path, names: Sequence[str], grid: dict[str, Any], full: bool
) -> dict[str, Any]:
    """The grid ``--against`` sets (the measured folder's); refused beside a second stack,
    --full or a grid option."""
    from testbed.against import measured_grid

    if len(names) > 1:
        fail(f"--against compares one stack with measured runs: name only {names[0]}")
    if full or grid:
        fail(
            "--against simulates at the measured folder's grid points: drop --full, "
            "--prefix-kinds, --concurrency, --repetitions and --requests"
        )
    try:
        return measured_grid(against)
    except (FileNotFoundError, ValueError) as exc:
        fail(f"--against {against}: {exc}")


def _refuse_other_runs(against: Path, stack: str, plan: StackPlan, force: bool) -> None:
    """A folder ``--against`` whose model, load settings or engine differ from the stack's
    (:func:`simulator.folder_labels.differences`) is refused, or with ``force`` warned."""
    from simulator.folder_labels import differences, fix_phrase, folder_labels

    try:
        labels = folder_labels(against)
    except (FileNotFoundError, ValueError) as exc:
        fail(f"--against {against}: {exc}")
    differ = differences(labels, plan)
    if not differ:
        return
    what = f"--against {against} measured other requests than stack {stack!r} sends: "
    what += "; ".join(differ)
    if not force:
        fail(
            f"{what}: the comparison would be of different loads; compare with the stack as "
            f"it ran: {fix_phrase(labels, plan, stack)}, or add --force to compare anyway"
        )
    warn(f"{what} (--force: compared anyway)")


def _print_against(sim: Simulation, against: Path) -> None:
    """The simulated figures beside the measured ones, the verdict, and the comparison's
    files (:mod:`testbed.against`)."""
    from rich.text import Text

    from outputs.folder_reader import load_results
    from outputs.tables import table_console, table_text
    from simulator.calibration_fit import score_points
    from simulator.phase_scores import missing_phases, score_phases
    from testbed.against import (
        loads_line,
        measured_on,
        phases_table,
        phases_tally,
        point_workers,
        simulated_warning,
        values_table,
        verdict,
        write_against,
    )

    measured = load_results(against)
    values = score_points(str(against), measured.points, sim.result.points)
    table = values_table(f"{sim.stack} SIMULATED vs measured {against}", values, folders=False)
    console = table_console(highlight=False)
    console.print(table)
    console.print(Text(verdict(values, str(against))), soft_wrap=True)
    phases = score_phases(str(against), measured.points, sim.result.points)
    phase_note = missing_phases(str(against), measured.points, sim.result.points)
    workers = point_workers(measured.points, sim.result.points)
    text = table_text(table)
    if phases:
        by_phase = phases_table(
            f"{sim.stack} TTFT phases: measured vs SIMULATED", phases, folders=False
        )
        console.print(by_phase)
        tally = f"phases: {phases_tally(phases)}"
        console.print(Text(tally), soft_wrap=True)
        text += table_text(by_phase) + tally + "\n"
    for point in workers:
        line = loads_line(point)
        console.print(Text(line), soft_wrap=True)
        text += line + "\n"
    if phase_note is not None:
        console.print(Text(phase_note), soft_wrap=True)
        text += phase_note + "\n"
    where = measured_on(against)
    if where is not None:
        console.print(Text(f"{against}: {where}"), soft_wrap=True)
    warning = simulated_warning(against)
    if warning:
        warn(warning)
    print_settings_note(sim.out_dir, against, (f"{sim.stack} (simulated)", "measured"))
    try:
        folder = write_against(sim.out_dir, against, values, text, phases, phase_note, workers)
    except (OSError, ValueError) as exc:
        warn(f"the comparison was printed, not written: {exc}")
        return
    console.print(f"comparison in {folder}/ (summary.json, table.txt, report.html)")


def _invalid_grid(exc: Any, stack: str | None = None) -> NoReturn:
    """Exit 2 with the first problem of a grid's `LoadConfig` validation, naming `stack`."""
    from configkeys.key_paths import show_path
    from workload.config import error_message

    error = exc.errors()[0]
    where = show_path(error["loc"]) or "load"
    named = f"stack {stack!r}: " if stack else ""
    fail(f"{named}invalid grid: {where}: {error_message(error)}")


def _check_grid(
    name: str, plan: StackPlan, grid: dict[str, Any], settings: Sequence[Setting], full: bool
) -> None:
    """The grid `name` would run (`simulator.simulate.stack_load`, as `simulate_stacks` makes
    it), validated before anything is printed or a folder touched."""
    from pydantic import ValidationError

    from simulator.simulate import stack_load
    from workload.slo import SloError

    try:
        stack_load(name, plan.cfg, full=full, grid=grid, settings=settings)
    except ValidationError as exc:
        _invalid_grid(exc, name)
    except SloError as exc:
        fail(f"stack {name!r}: {exc}")


def _refuse_twice_set(grid: dict[str, Any], settings: Sequence[Setting]) -> None:
    """An option and a ``--set load.<key>`` for the same grid field: refuse, naming both."""
    from simulator.simulate import set_load_fields

    for setting in settings:
        for name in set_load_fields([setting]):
            if name in grid:
                option = {"requests_per_run": "requests"}.get(name, name).replace("_", "-")
                fail(f"--{option} and --set {setting.key} both set it: keep one")


def _simulate(
    plans: dict[str, StackPlan],
    out: Path,
    grid: dict[str, Any],
    settings: dict[str, list[Setting]],
    full: bool,
    speedup: float,
    progress: bool,
    resume: bool,
    grid_length: bool = True,
) -> list[Simulation]:
    """Run the simulations (the caller holds the folders' locks), print the tables and return
    the results; ``settings``: each stack's ``--set`` values, by name; ``grid_length``: say how
    long each stack's own grid would take (not for ``--against``, which runs the measured
    folder's grid). Each warning of the results is printed once, naming the stacks it came
    from."""
    from contextlib import suppress

    from pydantic import ValidationError
    from rich.text import Text

    from measurement.incidents import describe
    from measurement.intervals import ab_comparisons
    from outputs.resume import ResumeError
    from outputs.slo_tables import slo_table
    from outputs.tables import (
        client_server_table,
        comparison_table,
        phases_table,
        seed_table,
        stacks_tables,
        table_console,
        tail_comparison_table,
        tail_table,
    )
    from simulator.localgraph import LocalGraphError
    from simulator.seed import seed_accuracy_note
    from simulator.simulate import TimingError, simulate_stacks
    from testbed.compare import print_resource_note, print_verdicts, resource_note_text

    console = table_console(highlight=False)
    names = list(plans)
    report_notes: list[str] = []
    side_by_side = " and ".join(names) + (" side by side" if len(names) > 1 else "")
    console.print(f"simulating {side_by_side} ...")
    try:
        results = simulate_stacks(
            plans,
            out,
            full=full,
            grid=grid,
            settings=settings,
            speedup_ratio=speedup,
            progress=progress,
            resume=resume,
        )
    except (LocalGraphError, ResumeError, TimingError) as exc:
        fail(str(exc))
    except ValidationError as exc:
        _invalid_grid(exc)
    except KeyboardInterrupt:
        _say_kept(names, out)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    said: dict[str, list[str]] = {}
    for sim in results:
        name = sim.stack
        groups = ", ".join(f"{g.replicas} {g.role} ({g.name})" for g in sim.spec.groups)
        console.print(f"{name}: router {sim.spec.router_mode}; {groups}")
        table = seed_table(
            sim.result.points,
            title=f"{name} (SIMULATED)",
            incidents=sim.result.incidents,
            simulated=True,
        )
        console.print(table)
        console.print(tail_table(sim.result.points, title=f"{name}: tails (SIMULATED)"))
        judged = slo_table(sim.result.points, title=f"{name}: against the SLO (SIMULATED)")
        if judged is not None:
            console.print(judged)
        console.print(Text(f"SIMULATED by {sim.result.simulated}"), soft_wrap=True)
        if grid_length:
            load = plans[name].cfg.load
            console.print(Text(grid_length_line(name, load, sim.result.points)), soft_wrap=True)
        phases = phases_table(sim.result.points, title=f"{name}: TTFT phases (ms, SIMULATED)")
        if phases is not None:
            console.print(phases)
        server_side = client_server_table(sim.result.runs, title=f"{name}: client vs server")
        if server_side is not None:
            console.print(server_side)
        for warning in sim.result.warnings:
            said.setdefault(warning, []).append(name)
        for incident in sim.result.incidents:
            warn(f"{name}: {describe(incident)}: {incident.message}")
    for warning, stacks in said.items():  # once each, naming the stacks it came from
        warn(warning if len(names) == 1 else f"{', '.join(stacks)}: {warning}")
    if len(results) == 2:
        a, b = results
        console.print(
            comparison_table(
                a.result.points, b.result.points, title=f"{a.stack} / {b.stack} (SIMULATED)"
            )
        )
        console.print(
            tail_comparison_table(
                a.result.points, b.result.points, title=f"tails {a.stack} / {b.stack} (SIMULATED)"
            )
        )
        note = seed_accuracy_note({a.stack: a.result.points, b.stack: b.result.points})
        if note is not None:
            console.print(Text(note), soft_wrap=True)
            report_notes.append(note)
        both = (a.result.points, b.result.points)
        print_verdicts(both, ab_comparisons(*both), simulated=True)
        print_settings_note(a.out_dir, b.out_dir, (a.stack, b.stack))
        print_resource_note(a.out_dir, b.out_dir)
        with suppress(ValueError):  # unreadable: printed as a warning above
            report_notes.append(resource_note_text(a.out_dir, b.out_dir))
    if len(results) > 2:
        for table in stacks_tables([(r.stack, r.result.points) for r in results], simulated=True):
            console.print(table)
    comparison = comparison_report(out, names) if len(names) > 1 else None
    images = _crossover_images(results)
    _write_reports(
        [sim.out_dir for sim in results], comparison, [n for n in report_notes if n], images
    )
    console.print(f"results in {out}/")
    return results


def grid_length_line(name: str, load: StackLoadConfig, points: Sequence[Any]) -> str:
    """How long stack ``name``'s own grid (its ``load``, as ``pulumi up`` runs it) would serve
    on the cluster at the simulated rates (:func:`simulator.simulate.grid_length_s`), beside the
    load step's deadline."""
    from loadstep.inputs import step_deadline_minutes
    from simulator.simulate import grid_length_s

    grid = load.grid()
    runs = len(grid.prefix_kinds) * len(grid.concurrency) * grid.repetitions
    length = grid_length_s(points, grid)
    about = (
        "cannot be estimated (no request completed)"
        if length is None
        else (
            f"would take about {length / 60:.0f} min of serving on the cluster at these simulated "
            "rates"
        )
    )
    return (
        f"{name}: its grid ({runs} runs of {grid.requests_per_run} requests) {about}; the load "
        f"step allows {step_deadline_minutes(load):g} min (load.deadlineMinutes), and a first "
        '`pulumi up` adds the image pull and the model download (docs/load-step.md, "How long '
        'things take")'
    )


def _say_kept(names: list[str], out: Path) -> None:
    """After Ctrl-C: what each stack's folder kept (every process was stopped)."""
    from outputs.folder_writer import complete_runs
    from simulator.routing import ROUTING_DIR

    counts = {name: complete_runs(out / name / ROUTING_DIR) for name in names}
    if not any(counts.values()):
        stderr_line(
            f"interrupted; every process was stopped. Nothing complete was kept in {out} "
            "(run the same command again)"
        )
        return
    first, *others = counts.items()
    kept = f"{first[1]} complete run{'s' if first[1] != 1 else ''} of {first[0]}"
    kept += "".join(f" and {count} of {name}" for name, count in others)
    stderr_line(
        f"interrupted; every process was stopped. Kept {kept} in {out} (the same command with "
        "--resume runs only the others)"
    )


def _crossover_images(sims: Sequence[Simulation]) -> list[list[Any]]:
    """Each simulated stack's crossover figure for its report, from the
    :data:`stackmodel.crossover.CROSSOVER_FILE` the simulation recorded (``[]`` and a warning
    where it cannot be drawn)."""
    from testbed.crossover_figure import folder_crossover_image

    images: list[list[Any]] = []
    for sim in sims:
        image, why = folder_crossover_image(sim.out_dir, sim.stack)
        if why:
            warn(why)
        images.append([] if image is None else [image])
    return images


def _write_reports(
    folders: list[Path],
    comparison: Path | None,
    notes: Sequence[str] = (),
    images: Sequence[Sequence[Any]] = (),
) -> None:
    """``report.html`` in each stack's results folder and, for two stacks, the A / B report
    at ``comparison`` with ``notes`` (the caveats printed under the A / B table) and each
    folder's ``images`` (:class:`outputs.html_report.ReportImage`); a failure is a warning
    (the results are already written)."""
    from outputs.html_report import write_folder_reports
    from outputs.tables import table_console

    try:
        reports = write_folder_reports(folders, comparison, notes, images)
    except (OSError, ValueError) as exc:
        warn(f"no report written: {exc}")
        return
    table_console(highlight=False).print(
        f"report{'s' if len(reports) > 1 else ''} in {', '.join(map(str, reports))}", soft_wrap=True
    )
