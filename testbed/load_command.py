"""`testbed load`: run a load grid against an OpenAI-compatible endpoint and write its results
folder (:mod:`loadgen`).
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from workload.config import LoadConfig, ReadyCheck, TlsConflictError, error_message

if TYPE_CHECKING:
    from configkeys.key_paths import Setting
    from measurement.results import GridResult, Readiness, RunSummary
from testbed.console import EXIT_INTERRUPTED, EXIT_NO_SUCCESS, fail, int_list, stderr_line
from testbed.slo_option import SloOption, slo_of

SERVER = "Server"


GRID = "Grid"


REQUESTS = "Requests"


CLIENT = "Client"


OUTPUT = "Output"


STACK_LOAD_KEY = "dynamo-testbed:load"


ERRORS_SHOWN = 3  # first error messages printed after the table


LOAD_SYNONYMS = (
    {
        word: "unknown key; a closed loop's users are its requests in flight: write "
        "concurrency: [{value}]"
        for word in ("users", "concurrentusers", "concurrentrequests")
    }
    | {
        word: "unknown key; an open loop's rate: write requestRate: {value} (requests/s) with "
        "arrival: poisson"
        for word in ("rate", "qps", "rps", "requestspersecond")
    }
    | {
        "clients": "the number of in-cluster load client pods, a stack's setting (its "
        "load.clients, which testbed recommend sets itself for the stacks it emits, as many as "
        "their logs need), not one of the load sent; drop it (the requests in flight are "
        "concurrency)"
    }
)
"""Load-settings keys that name a setting in other words or another command's (lower-cased) ->
what it is and the fix, with the value written (``{value}``) in the key that takes it."""


def load_problem(error: Any) -> str:
    """A refused load setting (a pydantic error of :class:`workload.config.LoadConfig`
    validated from its camelCase keys) as one line, the key as a file of load settings spells
    it, as the stack's checks word a key of theirs
    (:func:`stackmodel.validation.shape_problem`): an unknown key with the closest key and every
    key allowed there, or the fix for a key that names a setting in other words
    (:data:`LOAD_SYNONYMS`); a refused value as ``key = value: what is accepted (what the key
    is)``, with the value to write where the input shows it (``concurrency = 30: ...; write it
    as a list: [30]``); an SLO's own line, which names its objective and the fix, after its key;
    a rule across keys (no key) as it is."""
    from stackmodel.validation import shape_problem
    from workload.slo import SloError

    loc = tuple(error["loc"])
    if not loc:
        return error_message(error)
    if error["type"] == "extra_forbidden" and len(loc) == 1:
        meant = LOAD_SYNONYMS.get(str(loc[0]).casefold())
        if meant is not None:
            return f"{loc[0]}: {meant.format(value=error.get('input'))}"
    problem = shape_problem(error, LoadConfig)
    slo = isinstance((error.get("ctx") or {}).get("error"), SloError)
    if slo or error["type"] == "extra_forbidden":
        return f"{problem.key}: {problem.message}"
    return problem.render(namespaced=False)


def step_keys() -> frozenset[str]:
    """The keys a stack's ``load`` section holds for the post-deploy load step beside the grid's:
    :class:`~stackmodel.config.StackLoadConfig`'s fields that :class:`~workload.config.
    LoadConfig` lacks (``enabled``, ``url``, ``runner``, ...), camelCase. `testbed load` ignores
    them."""
    from stackmodel.config import StackLoadConfig

    def aliases(model: type[LoadConfig]) -> set[str]:
        return {field.alias or name for name, field in model.model_fields.items()}

    return frozenset(aliases(StackLoadConfig) - aliases(LoadConfig))


def _without_step_keys(
    section: Any, config_file: Path, where: str, kept: Collection[str]
) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise ValueError(f"{where} in {config_file} is not a mapping of load settings")
    ignored = step_keys() - set(kept)
    return {key: value for key, value in section.items() if key not in ignored}


def read_load_settings(config_file: Path, kept: Collection[str] = ()) -> dict[str, Any]:
    """The load settings (LoadConfig's camelCase keys) in a YAML file, which is one of:

    - a Pulumi stack file (`stacks/Pulumi.<stack>.yaml`): its `config: dynamo-testbed:load`
      section, without the load step's own keys (:func:`step_keys`); a stack file without
      that section gives {} (the stack runs the default grid); the same for a stack file's
      `config:` body copied without its `config:` line (a `dynamo-testbed:load:` block);
    - a stack's project values holding a `load:` section (same keys dropped);
    - the settings themselves, e.g. `prefixKinds: [2, 12]` (an empty file gives {}).

    ``kept``: load step keys kept where a section holds them (the caller refuses them).

    Raises ValueError (one line, naming the file) when the file is missing, not YAML, or not a
    mapping.
    """
    import yaml

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
    stack_config = loaded.get("config", loaded)
    if isinstance(stack_config, dict) and any(":" in str(key) for key in stack_config):
        section = stack_config.get(STACK_LOAD_KEY, {})
        return _without_step_keys(section, config_file, STACK_LOAD_KEY, kept)
    if "load" in loaded:
        beside = sorted(str(key) for key in loaded if key != "load")
        if beside:
            raise ValueError(
                f"{config_file}: {', '.join(beside)} beside its load: section would be ignored: "
                "move them under load:"
            )
        return _without_step_keys(loaded["load"], config_file, "load", kept)
    return loaded


def build_config(
    config_file: Path | None, overrides: dict[str, Any], settings: Sequence[Setting] = ()
) -> LoadConfig:
    """A `LoadConfig` from an optional YAML file (see `read_load_settings`) with the `--set
    load.<key>=VALUE` items `settings` applied and `overrides` (field names; None = unset) on
    top. Raises ValueError: the file's problem in one line; a `--set` outside `load.` (a
    `KeyPathError`); an SLO objective that needs more output tokens than asked for, naming where
    the SLO came from and `--max-tokens`; else one line per refused setting, naming where it was
    given (the option, the `--set` item, or `--config FILE`) and the key's problem
    (:func:`load_problem`)."""
    from pydantic import ValidationError

    from workload.slo import too_few_tokens

    data = read_load_settings(config_file) if config_file is not None else {}
    data = _with_settings(data, settings)
    # The file's keys are camelCase; the options' too, or an option would meet its own key as
    # an "extra input".
    keys = {name: field.alias or name for name, field in LoadConfig.model_fields.items()}
    options = {k for k, v in overrides.items() if v is not None}
    data |= {keys[key]: overrides[key] for key in options}
    try:
        return LoadConfig.model_validate(data)
    except ValidationError as exc:
        few = too_few_tokens(exc)
        if few is not None:  # --max-tokens overrides whatever set the count
            slo_from = "--slo" if "slo" in options else "load.slo"
            tokens = "--max-tokens" if "max_tokens" in options else "maxTokens"
            raise ValueError(few.said(slo_from, tokens, "give --max-tokens 2")) from None
        (error, *_) = exc.errors()
        if isinstance((error.get("ctx") or {}).get("error"), TlsConflictError):
            raise ValueError(_tls_conflict(options, config_file)) from None
        typed = {keys[name]: "--" + name.replace("_", "-") for name in options}
        set_by = {setting.path[1]: f"--set {setting.text}" for setting in settings}
        lines = []
        for error in exc.errors():
            key = str(error["loc"][0]) if error["loc"] else ""
            if key in typed:  # an option's value: name the option
                lines.append(f"{typed[key]}: {error_message(error)}; see testbed load --help")
                continue
            where = set_by.get(key) or (f"--config {config_file}" if config_file else "")
            lines.append(f"{where + ': ' if where else ''}{load_problem(error)}")
        raise ValueError("\n".join(lines)) from None


def _tls_conflict(options: set[str], config_file: Path | None) -> str:
    """`TlsConflictError`'s line naming `--ca-file` / `--insecure` where they were typed
    (`options`), the keys `caFile` / `insecure` where they came from `config_file`."""
    ca_file = "--ca-file" if "ca_file" in options else "caFile"
    insecure = "--insecure" if "insecure" in options else "insecure"
    keys = [name for name in (ca_file, insecure) if not name.startswith("--")]
    where = ""
    if keys and config_file is not None:
        where = f" in {config_file}" if len(keys) == 2 else f" ({keys[0]} in {config_file})"
    return TlsConflictError.said(ca_file, insecure, where)


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
    from loadgen.prompts import load_tokenizer_sizer

    try:
        load_tokenizer_sizer(tokenizer, model)
    except FileNotFoundError:
        raise
    except Exception as exc:  # the tokenizers library raises a bare Exception for a bad file
        message = " ".join(str(exc).split())[:200]
        raise ValueError(f"cannot read the tokenizer {tokenizer!r}: {message}") from None


def _check_tls(config: LoadConfig) -> None:
    """Raise ValueError naming `--ca-file` when its file is not a readable PEM of CAs."""
    from loadgen.loops import tls_setting

    try:
        tls_setting(config)
    except OSError as exc:
        raise ValueError(
            f"--ca-file {config.ca_file}: {exc.strerror or exc}; give a PEM file of the CA "
            "certificate(s) that signed the server's certificate"
        ) from None


INSECURE_LINE = (
    "warning: --insecure: the server's TLS certificate is not checked (anyone on the path can "
    "read and answer these requests); recorded as insecure: true in the results folder"
)


def check_reachable(url: str, timeout_s: float) -> None:
    """Open (and close) one TCP connection to the server before the grid; no HTTP is sent.

    An address that refuses or never answers would otherwise cost every request of the grid
    its connect timeout. Exits with a one-line error (code 2) when the connection fails.
    """
    from loadgen.api import base_url

    parts = urllib.parse.urlsplit(base_url(url))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        fail(f"cannot reach {url} ({parts.hostname}:{port}): {exc}; no request was sent")


def _print_result(result: GridResult, out: Path, title: str) -> None:
    from rich.markup import escape

    from outputs.slo_tables import slo_table
    from outputs.tables import (
        client_server_table,
        phases_table,
        prompt_sizes,
        seed_table,
        table_console,
        tail_table,
    )

    console = table_console()
    console.print(seed_table(result.points, title=title, incidents=result.incidents))
    console.print(tail_table(result.points, title="tails"))
    judged = slo_table(result.points, title="against the SLO")
    if judged is not None:
        console.print(judged)
    phases = phases_table(result.points, title="TTFT phases (ms)")
    if phases is not None:
        console.print(phases)
    server_side = client_server_table(result.runs, title="client vs server (/metrics)")
    if server_side is not None:
        console.print(server_side)
    console.print(f"prompt sizes: {escape(prompt_sizes(result))}", soft_wrap=True)
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
    """Write `out/report.html` (outputs.html_report); a failure is a warning, never an exit:
    the results are already written."""
    from rich.markup import escape

    from outputs.html_report import write_folder_reports
    from outputs.tables import table_console

    console = table_console()
    try:
        (report,) = write_folder_reports([out])
        console.print(f"report in {escape(str(report))}", soft_wrap=True)
    except (OSError, ValueError) as exc:
        console.print(f"[yellow]warning:[/] no report written: {escape(str(exc))}", soft_wrap=True)


def _option(name: str, panel: str, text: str | None = None, **kwargs: Any) -> Any:
    """The option of LoadConfig field `name`, in help panel `panel`, with `_field_help`."""
    return typer.Option(help=_field_help(name, text), rich_help_panel=panel, **kwargs)


def _with_settings(data: dict[str, Any], settings: Sequence[Setting]) -> dict[str, Any]:
    """The load settings ``data`` with the ``--set load.<key>=VALUE`` items applied. Raises
    `configkeys.key_paths.KeyPathError` for a key outside `load.`."""
    from configkeys.key_paths import KeyPathError, Setting, apply_settings

    if not settings:
        return data
    ours = []
    for setting in settings:
        if setting.path[0] != "load" or len(setting.path) < 2:
            raise KeyPathError(
                f"--set {setting.text}: testbed load reads only load.<key> settings (the "
                "stack's grid and request shape); render and simulate take the others"
            )
        ours.append(Setting(setting.text, setting.path[1:], setting.value))
    return apply_settings(data, ours)


def _bar_shows(progress: bool) -> bool:
    """Whether the grid's progress bar shows: asked for, and stdout a terminal (rich draws no
    bar elsewhere)."""
    from rich.console import Console

    return progress and Console().is_terminal


def _run_line(summary: RunSummary, done: int, total: int) -> None:
    """One line per finished run where no bar shows (``--no-progress``, or output to a file or
    pipe): ``run K=2 c=4 rep 1 done (3 of 24): 200 requests, 0 failed, 41.2 s``."""
    from loadgen.plan import run_label
    from outputs.tables import table_console

    key = (summary.prefix_kinds, summary.concurrency, summary.repetition)
    table_console(highlight=False).print(
        f"run {run_label(key)} done ({done} of {total}): {summary.requests} requests, "
        f"{summary.errors} failed, {summary.duration_s:.1f} s",
        soft_wrap=True,
    )


def load_command(
    url: Annotated[
        str,
        typer.Option(
            help="Base URL of the OpenAI-compatible server: http://HOST:PORT, /v1 optional.",
            rich_help_panel=SERVER,
        ),
    ],
    model: Annotated[
        str, typer.Option(help="Model name sent in each request.", rich_help_panel=SERVER)
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Result folder (created; written after every run).", rich_help_panel=OUTPUT
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            help="YAML of load settings (camelCase LoadConfig keys), or a stack file "
            "(its load section). Options override it.",
            rich_help_panel=GRID,
        ),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="A load.KEY on top of --config, e.g. load.concurrency=[8] (repeatable).",
            rich_help_panel=GRID,
        ),
    ] = None,
    prefix_kinds: Annotated[
        str | None, _option("prefix_kinds", GRID, "Prefix kinds, comma-separated.", metavar="N,N")
    ] = None,
    concurrency: Annotated[
        str | None,
        _option("concurrency", GRID, "Requests in flight, comma-separated.", metavar="N,N"),
    ] = None,
    repetitions: Annotated[int | None, _option("repetitions", GRID)] = None,
    requests_per_run: Annotated[int | None, _option("requests_per_run", GRID)] = None,
    duration_s: Annotated[
        float | None,
        typer.Option(help="Run length (s): no request starts after it.", rich_help_panel=GRID),
    ] = None,
    warmup_requests: Annotated[int | None, _option("warmup_requests", GRID)] = None,
    prompt_tokens: Annotated[int | None, _option("prompt_tokens", REQUESTS)] = None,
    prefix_share: Annotated[float | None, _option("prefix_share", REQUESTS)] = None,
    max_tokens: Annotated[int | None, _option("max_tokens", REQUESTS)] = None,
    api: Annotated[str | None, _option("api", REQUESTS)] = None,
    plain_openai: Annotated[
        bool,
        typer.Option("--plain-openai", help=_field_help("plain_openai"), rich_help_panel=REQUESTS),
    ] = False,
    arrival: Annotated[
        str | None, _option("arrival", REQUESTS, "closed (fixed concurrency) or poisson.")
    ] = None,
    request_rate: Annotated[
        float | None,
        typer.Option(
            help="Requests/s for --arrival poisson (required there).", rich_help_panel=REQUESTS
        ),
    ] = None,
    seed: Annotated[int | None, _option("seed", REQUESTS)] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="tokenizer.json, its folder or a cached model id, for exact prompt lengths. "
            "Default: --model's cache entry, else calibrated against the server.",
            rich_help_panel=REQUESTS,
        ),
    ] = None,
    connect_timeout_s: Annotated[
        float | None, _option("connect_timeout_s", CLIENT, "TCP connect timeout (s).")
    ] = None,
    read_timeout_s: Annotated[
        float | None, _option("read_timeout_s", CLIENT, "Longest silence between reads (s).")
    ] = None,
    request_timeout_s: Annotated[
        float | None, _option("request_timeout_s", CLIENT, "Deadline per request (s).")
    ] = None,
    max_connections: Annotated[int | None, _option("max_connections", CLIENT)] = None,
    ca_file: Annotated[str | None, _option("ca_file", CLIENT, metavar="PATH")] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help=_field_help("insecure"), rich_help_panel=CLIENT)
    ] = False,
    workers: Annotated[int | None, _option("workers", CLIENT)] = None,
    no_ready_check: Annotated[
        bool,
        typer.Option(
            "--no-ready-check",
            help="Skip the readiness gate (streamed completions in a row before the grid).",
            rich_help_panel=SERVER,
        ),
    ] = False,
    ready_successes: Annotated[
        int,
        typer.Option(min=1, help="Completions in a row the gate needs.", rich_help_panel=SERVER),
    ] = ReadyCheck.model_fields["successes"].default,
    ready_timeout_s: Annotated[
        float,
        typer.Option(min=0.001, help="Deadline of the readiness gate (s).", rich_help_panel=SERVER),
    ] = ReadyCheck.model_fields["timeout_s"].default,
    kube_namespace: Annotated[
        str | None,
        typer.Option(
            help="Record what this namespace's pods did (OOMKilled, restarts) as incidents; "
            "uses $KUBECONFIG.",
            rich_help_panel=SERVER,
        ),
    ] = None,
    kube_context: Annotated[
        str | None,
        typer.Option(help="kubeconfig context for --kube-namespace.", rich_help_panel=SERVER),
    ] = None,
    prefill_metrics: Annotated[
        list[str] | None,
        typer.Option(
            help="Base URL of a prefill worker's /metrics (vLLM's), repeatable: its "
            "vllm:prefix_cache_hits / queries are the hit rate where prefixes are looked up.",
            rich_help_panel=SERVER,
        ),
    ] = None,
    decode_metrics: Annotated[
        list[str] | None,
        typer.Option(
            help="Base URL of a decode worker's /metrics (vLLM's), repeatable: its queue time "
            "(where the KV read lands) and NIXL's transfer time, bytes and failures per run.",
            rich_help_panel=SERVER,
        ),
    ] = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="No progress bar.", rich_help_panel=OUTPUT)
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Keep the complete runs in --out (same settings, checked); run the others.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
    stack: Annotated[
        str | None,
        typer.Option(
            "--stack",
            help="The stack the server runs: its GPU, model, engine, versions and resources "
            "go to the folder's stack.json, which calibrate and simulate --against read.",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    mocker: Annotated[
        bool,
        typer.Option(
            "--mocker",
            help="With --stack: Dynamo mocker workers serve it (testbed serve), not GPUs; "
            "recorded as such.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
    slo: SloOption = None,
) -> None:
    """Run the prefix-kinds x concurrency x repetitions grid and print the seed-style table.

    Exit codes: 0 done (failed requests count as results), 1 no request succeeded, 2 bad input.

    Example: testbed load --url http://10.0.0.5:30080 --model Qwen/Qwen3-0.6B --out out/kv
    """
    from configkeys.key_paths import parse_settings
    from loadgen.api import base_url
    from outputs.folder_lock import FolderBusyError, folder_lock

    try:
        base_url(url)
        settings = parse_settings(overrides or ())
        grid_options = {
            "prefix_kinds": int_list("prefix-kinds", prefix_kinds),
            "concurrency": int_list("concurrency", concurrency),
        }
        load_config = build_config(
            config,
            {
                **grid_options,
                "repetitions": repetitions,
                "requests_per_run": requests_per_run,
                "duration_s": duration_s,
                "warmup_requests": warmup_requests,
                "prompt_tokens": prompt_tokens,
                "prefix_share": prefix_share,
                "max_tokens": max_tokens,
                "api": api,
                "plain_openai": plain_openai or None,
                "arrival": arrival,
                "request_rate": request_rate,
                "seed": seed,
                "connect_timeout_s": connect_timeout_s,
                "read_timeout_s": read_timeout_s,
                "request_timeout_s": request_timeout_s,
                "max_connections": max_connections,
                "ca_file": ca_file,
                "insecure": insecure or None,
                "workers": workers,
                "slo": slo_of(slo),
            },
            settings,
        )
        _check_tls(load_config)
        if tokenizer is not None:
            _check_tokenizer(tokenizer, model)
        stack_text = _stack_text(stack, mocker)
        out.mkdir(parents=True, exist_ok=True)
        if stack_text is not None:
            from outputs.folder_reader import STACK_FILE
            from outputs.folder_writer import write_text_atomic

            write_text_atomic(out / STACK_FILE, stack_text)
    except (ValueError, OSError) as exc:  # KeyPathError is a ValueError
        fail(str(exc))
    try:
        with folder_lock(out):
            _load(
                url,
                model,
                load_config,
                out,
                tokenizer,
                resume,
                not no_ready_check,
                ready_successes,
                ready_timeout_s,
                kube_namespace,
                kube_context,
                prefill_metrics or (),
                not no_progress,
                decode_metrics or (),
            )
    except FolderBusyError as exc:
        fail(str(exc))


def _stack_text(stack: str | None, mocker: bool) -> str | None:
    """``stack.json`` for ``--stack`` (None without it): the stack's resources and what it ran
    on (:attr:`stackmodel.plan.StackPlan.run_labels`; ``mocker``: as the stack with
    ``engine.kind=mocker``, Dynamo's mocker workers).

    Raises:
        ValueError: ``--mocker`` without ``--stack``, or a stack that does not validate.
    """
    if stack is None:
        if mocker:
            raise ValueError("--mocker says what served --stack: add --stack STACK")
        return None
    from configkeys.key_paths import parse_settings
    from stackmodel.resources import stack_file_text, stack_resources
    from stackmodel.stacks import load_stack
    from stackmodel.topology import build_topology

    plan = load_stack(stack, parse_settings(["engine.kind=mocker"] if mocker else []))
    resources = stack_resources(plan.cfg, build_topology(plan))
    return stack_file_text(stack, resources, labels=plan.run_labels)


def resumed_line(out: Path, kept: int, runs: int) -> str:
    """What a successful ``--resume`` did: ``resumed out/x: kept 3 complete run(s), measured 5
    more (8 in all)``."""
    return (
        f"resumed {out}: kept {kept} complete run(s), measured {runs - kept} more ({runs} in all)"
    )


def _load(
    url: str,
    model: str,
    load_config: LoadConfig,
    out: Path,
    tokenizer: str | None,
    resume: bool,
    ready_check: bool,
    ready_successes: int,
    ready_timeout_s: float,
    kube_namespace: str | None,
    kube_context: str | None,
    prefill_metrics: Sequence[str],
    progress: bool,
    decode_metrics: Sequence[str] = (),
) -> None:
    """`testbed load` once its options are checked, holding `out`'s lock."""
    import logging

    from rich.markup import escape

    from kubeclient.pod_watch import pod_watch
    from loadgen.readiness import NotServingError, RefusedAtOnceError
    from loadgen.runner import GridRun, run_grid
    from outputs.folder_writer import ResultsFolder, complete_runs, grid_settings
    from outputs.resume import ResumeError
    from outputs.tables import table_console

    earlier = complete_runs(out)
    if earlier and not resume:
        fail(
            f"{out} already holds {earlier} complete run(s) of an earlier grid: add --resume to "
            "continue it (same settings), or choose another --out folder"
        )
    if earlier:  # other settings are refused before the server is contacted
        try:
            ResultsFolder(out, grid_settings(url, model, load_config, tokenizer), resume=True)
        except ResumeError as exc:
            fail(str(exc))
    check_reachable(url, load_config.connect_timeout_s)
    if not url.lower().startswith("https://") and (load_config.ca_file or load_config.insecure):
        stderr_line(
            f"warning: {url} is plain HTTP: --ca-file and --insecure (caFile, insecure) apply to "
            "https:// URLs only; no TLS is used"
        )
    elif load_config.insecure:
        stderr_line(INSECURE_LINE)
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
                GridRun(
                    url,
                    model,
                    load_config,
                    out,
                    tokenizer=tokenizer,
                    progress=progress,
                    resume=resume,
                    ready=ready,
                    observers=[pods],
                    prefill_metrics=prefill_metrics,
                    decode_metrics=decode_metrics,
                    on_run=None if _bar_shows(progress) else _run_line,
                )
            )
    except RefusedAtOnceError as exc:
        fail(f"{exc}; no grid point was run", EXIT_NO_SUCCESS)
    except NotServingError as exc:
        fail(f"{exc}; no grid point was run (--no-ready-check skips this check)", EXIT_NO_SUCCESS)
    except ResumeError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        stderr_line(
            f"interrupted; {complete_runs(out)} complete run(s) are saved in {escape(str(out))} "
            "(run the same command with --resume to measure the rest)"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    _print_result(result, out, title=f"{model} at {url}")
    if earlier:
        table_console(highlight=False).print(resumed_line(out, earlier, len(result.runs)))
    _report_beside(out)
    if not any(p.samples for p in result.points):
        fail(
            f"no request succeeded: is the server at {url} up and serving model {model!r}?",
            EXIT_NO_SUCCESS,
        )
