"""`testbed load` (run a grid against an endpoint), `testbed compare` (two results as A / B)
and `testbed report` (one or two results as an HTML report with plots).

Exit codes: 0 done (failed requests are results: counted, printed, written); 1 no request
succeeded; 2 a bad option, URL, file or folder, or a `--resume` with other settings (one
`error: ...` line, no traceback); 130 interrupted (Ctrl-C; the finished runs are saved).
"""

import logging
import socket
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from loadgen.api import base_url
from loadgen.config import LoadConfig, ReadyCheck
from loadgen.html_report import write_folder_reports, write_report
from loadgen.kube_watch import pod_watch
from loadgen.output import ResumeError, complete_runs
from loadgen.prompts import load_tokenizer_sizer
from loadgen.readiness import NotServingError
from loadgen.report import (
    client_server_table,
    comparison_table,
    load_points,
    seed_table,
    table_console,
)
from loadgen.results import GridResult, Readiness
from loadgen.results_folder import load_config, load_results
from loadgen.runner import run_grid
from loadgen.settings_diff import nothing_comparable, settings_note

EXIT_USAGE = 2
EXIT_NO_SUCCESS = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

STACK_LOAD_KEY = "dynamo-testbed:load"
# Keys that a stack's `load` section holds for the post-deploy load step, beyond LoadConfig's:
# the fields of StackLoadConfig in components/config.py (loadgen does not import components;
# tests/loadgen/test_cli.py checks this set against it). `testbed load` ignores them.
STACK_LOAD_STEP_KEYS = frozenset(
    {
        "enabled",
        "url",
        "nodeAddress",
        "runId",
        "failOnErrors",
        "deadlineMinutes",
        "modelWaitMinutes",
        "readyCheck",
        "readySuccesses",
        "tokenizer",
        "resultsDir",
    }
)
ERRORS_SHOWN = 3  # first error messages printed after the table


def _stderr_line(markup: str) -> None:
    Console(stderr=True, soft_wrap=True, highlight=False).print(markup)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `error: <message>` to stderr (taken literally, never hard-wrapped) and exit with
    `code` (default 2, a usage error)."""
    _stderr_line(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def _int_list(option: str, text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--{option} expects comma-separated integers, got {text!r}") from None


def _validation_message(exc: ValidationError, source: str) -> str:
    lines = [f"invalid load config{source} ({exc.error_count()} error(s)):"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(config)"
        lines.append(f"  {where}: {error['msg']}")
    return "\n".join(lines)


def _without_step_keys(section: Any, config_file: Path, where: str) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise ValueError(f"{where} in {config_file} is not a mapping of load settings")
    return {key: value for key, value in section.items() if key not in STACK_LOAD_STEP_KEYS}


def read_load_settings(config_file: Path) -> dict[str, Any]:
    """The load settings (LoadConfig's camelCase keys) in a YAML file, which is one of:

    - a Pulumi stack file (`stacks/Pulumi.<stack>.yaml`): its `config: dynamo-testbed:load`
      section, without the load step's own keys (`STACK_LOAD_STEP_KEYS`); a stack file without
      that section gives {} (the stack runs the default grid);
    - a stack's project values holding a `load:` section (same keys dropped);
    - the settings themselves, e.g. `prefixKinds: [2, 12]` (an empty file gives {}).

    Raises ValueError (one line, naming the file) when the file is missing, not YAML, or not a
    mapping.
    """
    if not config_file.is_file():
        what = "is not a file" if config_file.exists() else "does not exist"
        raise ValueError(f"config file {config_file} {what} (expected a YAML of LoadConfig keys)")
    try:
        loaded = yaml.safe_load(config_file.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{config_file} is not valid YAML: {' '.join(str(exc).split())}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{config_file} does not hold a mapping of load settings")
    stack_config = loaded.get("config")
    if isinstance(stack_config, dict) and any(":" in str(key) for key in stack_config):
        return _without_step_keys(stack_config.get(STACK_LOAD_KEY, {}), config_file, STACK_LOAD_KEY)
    if "load" in loaded:
        return _without_step_keys(loaded["load"], config_file, "load")
    return loaded


def build_config(config_file: Path | None, overrides: dict[str, Any]) -> LoadConfig:
    """A `LoadConfig` from an optional YAML file (see `read_load_settings`) with `overrides`
    (field names; None = unset) on top. Raises ValueError: the file's problem in one line, or
    each invalid field path and its allowed values."""
    data = read_load_settings(config_file) if config_file is not None else {}
    data |= {key: value for key, value in overrides.items() if value is not None}
    try:
        return LoadConfig.model_validate(data)
    except ValidationError as exc:
        source = f" (from {config_file} and the options)" if config_file is not None else ""
        raise ValueError(_validation_message(exc, source)) from None


def _default_text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def _field_help(name: str, text: str | None = None) -> str:
    """Help for the option of LoadConfig field `name`: `text` or the field's description, then
    its default (from LoadConfig, so help and behaviour cannot drift)."""
    field = LoadConfig.model_fields[name]
    help_text = text or field.description or ""
    if field.default is None:
        return help_text
    return f"{help_text} Default: {_default_text(field.default)}."


def _check_tokenizer(tokenizer: str, model: str) -> None:
    """Raise FileNotFoundError (no tokenizer.json found) or ValueError (not readable)."""
    try:
        load_tokenizer_sizer(tokenizer, model)
    except FileNotFoundError:
        raise
    except Exception as exc:  # the tokenizers library raises a bare Exception for a bad file
        message = " ".join(str(exc).split())[:200]
        raise ValueError(f"cannot read the tokenizer {tokenizer!r}: {message}") from None


def check_reachable(url: str, timeout_s: float) -> None:
    """Open (and close) one TCP connection to the server before the grid; no HTTP is sent.

    An address that refuses or never answers would otherwise cost every request of the grid
    its connect timeout. Exits with a one-line error (code 2) when the connection fails.
    """
    parts = urllib.parse.urlsplit(base_url(url))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        fail(f"cannot reach {url} ({parts.hostname}:{port}): {exc}; no request was sent")


def _print_result(result: GridResult, out: Path, title: str) -> None:
    console = table_console()
    console.print(seed_table(result.points, title=title, incidents=result.incidents))
    server_side = client_server_table(result.runs, title="client vs server (/metrics)")
    if server_side is not None:
        console.print(server_side)
    console.print(f"prompt sizes: {escape(result.token_count_source)}", soft_wrap=True)
    if result.readiness is not None:
        console.print(readiness_line(result.readiness), soft_wrap=True)
    console.print(f"results in {escape(str(out))}", soft_wrap=True)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    failed = sum(result.errors_by_kind.values())
    if failed:
        total = failed + sum(p.samples for p in result.points)
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(result.errors_by_kind.items()))
        console.print(f"[red]errors:[/] {failed} of {total} requests failed ({kinds})")
    for sample in result.first_errors[:ERRORS_SHOWN]:
        console.print(f"[red]error[/] {sample.kind}: {escape(sample.message)}", soft_wrap=True)


def readiness_line(readiness: Readiness) -> str:
    """One line on the readiness gate, e.g. "ready after 5.2 s: 3 completions in a row
    succeeded (14 sent; failed: http_status 11)"."""
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(readiness.failures_by_kind.items()))
    return (
        f"ready after {readiness.waited_s:.1f} s: {readiness.successes} completions in a row "
        f"succeeded ({readiness.attempts} sent; failed: {kinds or 'none'})"
    )


def _report_beside(out: Path) -> None:
    """Write `out/report.html` (loadgen.html_report); a failure is a warning, never an exit:
    the results are already written."""
    console = table_console()
    try:
        (report,) = write_folder_reports([out])
        console.print(f"report in {escape(str(report))}", soft_wrap=True)
    except (OSError, ValueError) as exc:
        console.print(f"[yellow]warning:[/] no report written: {escape(str(exc))}", soft_wrap=True)


def load_command(
    url: Annotated[
        str,
        typer.Option(
            help="Base URL of the OpenAI-compatible server, http:// or https://HOST:PORT, "
            "with or without a trailing /v1."
        ),
    ],
    model: Annotated[str, typer.Option(help="Model name sent in each request.")],
    out: Annotated[
        Path,
        typer.Option(
            help="Result folder, created if needed: summary.json, result.json, runs.csv, "
            "requests.parquet, table.txt, runs/ (written after every run)."
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            help="YAML of load settings: LoadConfig keys in camelCase (e.g. prefixKinds: "
            "[2, 12]), or a stack file, stacks/Pulumi.*.yaml, whose dynamo-testbed:load "
            "section is used. Options given here override it."
        ),
    ] = None,
    prefix_kinds: Annotated[
        str | None, typer.Option(help=_field_help("prefix_kinds", "Comma-separated grid axis."))
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(help=_field_help("concurrency", "Comma-separated requests in flight.")),
    ] = None,
    repetitions: Annotated[int | None, typer.Option(help=_field_help("repetitions"))] = None,
    requests_per_run: Annotated[
        int | None, typer.Option(help=_field_help("requests_per_run"))
    ] = None,
    duration_s: Annotated[
        float | None,
        typer.Option(help="Optional run length (s): no request starts after it. Default: none."),
    ] = None,
    warmup_requests: Annotated[
        int | None, typer.Option(help=_field_help("warmup_requests"))
    ] = None,
    prompt_tokens: Annotated[int | None, typer.Option(help=_field_help("prompt_tokens"))] = None,
    prefix_share: Annotated[float | None, typer.Option(help=_field_help("prefix_share"))] = None,
    max_tokens: Annotated[int | None, typer.Option(help=_field_help("max_tokens"))] = None,
    api: Annotated[str | None, typer.Option(help=_field_help("api"))] = None,
    arrival: Annotated[
        str | None,
        typer.Option(help=_field_help("arrival", "closed (fixed concurrency) or poisson.")),
    ] = None,
    request_rate: Annotated[
        float | None,
        typer.Option(help="Requests/s for --arrival poisson (required there). Default: none."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help=_field_help("seed"))] = None,
    connect_timeout_s: Annotated[
        float | None,
        typer.Option(help=_field_help("connect_timeout_s", "TCP connect timeout (s).")),
    ] = None,
    read_timeout_s: Annotated[
        float | None,
        typer.Option(help=_field_help("read_timeout_s", "Longest silence between reads (s).")),
    ] = None,
    request_timeout_s: Annotated[
        float | None,
        typer.Option(
            help=_field_help("request_timeout_s", "Per-request deadline (s) from its send time.")
        ),
    ] = None,
    max_connections: Annotated[
        int | None, typer.Option(help=_field_help("max_connections"))
    ] = None,
    workers: Annotated[int | None, typer.Option(help=_field_help("workers"))] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="tokenizer.json, its folder, or a model id in the local Hugging Face cache, "
            "for exact prompt lengths. Default: the --model id's cache entry, else tokens per "
            "word calibrated against the server."
        ),
    ] = None,
    ready_check: Annotated[
        bool,
        typer.Option(
            help="Before the grid, wait until --ready-successes streamed completions in a row "
            "succeed (a server may list the model and still answer 500/404 for a while)."
        ),
    ] = True,
    ready_successes: Annotated[
        int, typer.Option(min=1, help="Completions in a row the readiness check needs.")
    ] = ReadyCheck.model_fields["successes"].default,
    ready_timeout_s: Annotated[
        float, typer.Option(min=0.001, help="Deadline of the readiness check (s).")
    ] = ReadyCheck.model_fields["timeout_s"].default,
    kube_namespace: Annotated[
        str | None,
        typer.Option(
            help="Watch the pods of this Kubernetes namespace during the load and record what "
            "they did (OOMKilled, restarts, readiness lost) as incidents, placed on the grid. "
            "Uses $KUBECONFIG (else ~/.kube/config). Default: no watch."
        ),
    ] = None,
    kube_context: Annotated[
        str | None,
        typer.Option(help="kubeconfig context for --kube-namespace. Default: the current one."),
    ] = None,
    prefill_metrics: Annotated[
        list[str] | None,
        typer.Option(
            help="Base URL of a prefill worker's /metrics (vLLM's), repeatable: its "
            "vllm:prefix_cache_hits / queries are the prefix-cache hit rate where prefixes are "
            "looked up (a disaggregated decode worker reports received KV as cached). "
            "Default: none."
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    resume: Annotated[
        bool,
        typer.Option(
            help="Continue the grid in --out: keep its complete runs (same settings, checked) "
            "and measure only the others."
        ),
    ] = False,
) -> None:
    """Run the prefix-kinds x concurrency x repetitions grid and print the seed-style table.

    Exit codes: 0 done (failed requests count as results), 1 no request succeeded, 2 bad input.
    """
    try:
        base_url(url)
        load_config = build_config(
            config,
            {
                "prefix_kinds": _int_list("prefix-kinds", prefix_kinds),
                "concurrency": _int_list("concurrency", concurrency),
                "repetitions": repetitions,
                "requests_per_run": requests_per_run,
                "duration_s": duration_s,
                "warmup_requests": warmup_requests,
                "prompt_tokens": prompt_tokens,
                "prefix_share": prefix_share,
                "max_tokens": max_tokens,
                "api": api,
                "arrival": arrival,
                "request_rate": request_rate,
                "seed": seed,
                "connect_timeout_s": connect_timeout_s,
                "read_timeout_s": read_timeout_s,
                "request_timeout_s": request_timeout_s,
                "max_connections": max_connections,
                "workers": workers,
            },
        )
        if tokenizer is not None:
            _check_tokenizer(tokenizer, model)
        out.mkdir(parents=True, exist_ok=True)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    earlier = complete_runs(out)
    if earlier and not resume:
        fail(
            f"{out} already holds {earlier} complete run(s) of an earlier grid: add --resume to "
            "continue it (same settings), or choose another --out folder"
        )
    check_reachable(url, load_config.connect_timeout_s)
    ready = (
        ReadyCheck(successes=ready_successes, timeout_s=ready_timeout_s) if ready_check else None
    )
    if ready is not None:  # the gate can wait up to its timeout: say so before it starts
        table_console(highlight=False).print(
            f"waiting until {url} serves {model}: {ready.successes} streamed completions in a "
            f"row, for up to {ready.timeout_s:g} s (--no-ready-check skips this)",
            soft_wrap=True,
        )
    # The runner logs what it sees before a run (e.g. a load too big for the client's CPUs).
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    try:
        with pod_watch(kube_namespace, context=kube_context) as pods:
            result = run_grid(
                url,
                model,
                load_config,
                out,
                tokenizer=tokenizer,
                progress=progress,
                resume=resume,
                ready=ready,
                observers=[pods],
                prefill_metrics=prefill_metrics or (),
            )
    except NotServingError as exc:
        fail(f"{exc}; no grid point was run (--no-ready-check skips this check)", EXIT_NO_SUCCESS)
    except ResumeError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        _stderr_line(
            f"interrupted; {complete_runs(out)} complete run(s) are saved in {escape(str(out))} "
            "(run the same command with --resume to measure the rest)"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    _print_result(result, out, title=f"{model} at {url}")
    _report_beside(out)
    if not any(p.samples for p in result.points):
        fail(
            f"no request succeeded: is the server at {url} up and serving model {model!r}?",
            EXIT_NO_SUCCESS,
        )


def compare_command(
    a: Annotated[Path, typer.Argument(help="Result folder A (holding summary.json).")],
    b: Annotated[Path, typer.Argument(help="Result folder B (holding summary.json).")],
) -> None:
    """Print two `testbed load` results side by side, each cell "A / B" as in the seed, then
    which load settings differ and which metrics that invalidates
    (`loadgen.settings_diff.settings_note`, from each folder's result.json).

    Exit code 2 with one `error:` line when a folder has no readable summary.json, or when the
    two share no grid point (nothing is comparable).
    """
    try:
        points_a, points_b = load_points(a), load_points(b)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    refusal = nothing_comparable(points_a, points_b)
    if refusal is not None:
        fail(f"nothing to compare between {a} and {b}: {refusal}")
    table_console().print(comparison_table(points_a, points_b, title=f"{a} / {b}"))
    print_settings_note(a, b)


def print_settings_note(a: Path, b: Path, names: tuple[str, str] | None = None) -> None:
    """After an A / B table of results folders `a` and `b` (called `names`, default their
    paths): print which load settings differ and which metrics that invalidates
    (`loadgen.settings_diff.settings_note`, from each folder's result.json); nothing when they
    match. An unreadable result.json is a warning line."""
    name_a, name_b = names or (str(a), str(b))
    try:
        note = settings_note(load_config(a), load_config(b), name_a, name_b)
    except ValueError as exc:
        table_console().print(f"[yellow]warning:[/] {escape(str(exc))}")
        return
    if note:
        table_console(highlight=False).print(escape(note), soft_wrap=True)


def report_command(
    results: Annotated[
        Path,
        typer.Argument(
            help="Results folder A: written by `testbed load --out`, `testbed simulate` "
            "(<out>/<stack>) or the load step (<resultsDir>/<stack>/<time>)."
        ),
    ],
    results_b: Annotated[
        Path | None, typer.Argument(help="Optional results folder B, drawn beside A.")
    ] = None,
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("report.html"),
    png: Annotated[
        bool,
        typer.Option("--png", help="Also write each figure as <out stem>-<figure>.png beside it."),
    ] = False,
) -> None:
    """Write one self-contained HTML report (opens offline): the seed-style table, TTFT p50/p99,
    requests/s and cached-token ratio vs prefix kinds, TTFT distributions, a timeline per result.

    Exit code 2 with one `error:` line when a folder holds no readable results.
    """
    try:
        folders = [load_results(folder) for folder in (results, results_b) if folder is not None]
        html, pngs = write_report(folders, out, png=png)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    console = table_console(highlight=False)
    console.print(f"report in {escape(str(html))}", soft_wrap=True)
    for path in pngs:
        console.print(f"figure in {escape(str(path))}", soft_wrap=True)
