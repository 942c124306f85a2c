"""`testbed recommend`: which topology to deploy on a cluster for a workload and an SLO, and why
the others lose (docs/recommend.md). Everything it prints and writes is SIMULATED.

Exit codes: 0 a candidate meets the SLO (under ``--objective capacity``, the default: at the
workload's stated load x the headroom); 1 none does (what the best holds, the nearest candidates
and what binds are printed; the SLO is never relaxed); 2 a bad option, stack, file or SLO.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from testbed.console import EXIT_INTERRUPTED, EXIT_NO_SUCCESS, fail

if TYPE_CHECKING:
    from recommend.outputs import Inputs, Validations
    from recommend.run import Recommendation
    from recommend.search import Result
    from recommend.space import Candidate
    from recommend.workload import Workload
    from workload.slo import Slo, TooFewTokensError

INPUTS = "Inputs"
SEARCH = "Search"
OUTPUT = "Output"
RECOMMEND_OUT = Path("out/recommend")
"""The default ``--out``: ``out/recommend/<cluster>`` in the project folder."""


def _headroom(given: str | float) -> float:
    """``--headroom`` (as typed, or its default as a number): a multiplier of at least 1
    (``1.2`` holds 20% more than the stated load); a percentage (``20%``), a word or a value
    below 1 is refused in one line that names the multiplier meant."""
    import math

    text = str(given)
    number = text.strip().removesuffix("%")
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise typer.BadParameter(
            f"{text!r} is no number: it takes a multiplier of at least 1; for 20% more than "
            "the stated load write --headroom 1.2"
        )
    if number != text.strip():
        raise typer.BadParameter(
            f"{text!r} is a percentage: it takes a multiplier; for {value:g}% more than the "
            f"stated load write --headroom {1 + value / 100:g}"
        )
    if value < 1:
        more = value if value > 0 else 0.2
        raise typer.BadParameter(
            f"{value:g} is below 1 (the stated load itself): it takes a multiplier of at "
            f"least 1; for {more:.0%} more than the stated load write --headroom {1 + more:g}"
        )
    return value


def _cluster(
    stack: str | None, stack_file: Path | None, model: str | None
) -> tuple[str, dict[str, Any], Any]:
    """(name, raw config, validated config) of the cluster, ``model.name`` replaced by
    ``model``; exits 2 on a bad stack or file, naming the stack file read (``--cluster-file``'s
    own path: :func:`_cluster_file`). A model name outside the catalog beside its geometry is warned
    (:func:`stackmodel.stack_warnings.model_name_warnings`)."""
    from stackmodel.config import project_values
    from stackmodel.stack_warnings import model_name_warnings
    from stackmodel.stacks import StackFileError, stack_config

    if (stack is None) == (stack_file is None):
        fail("give the cluster as one of --cluster STACK or --cluster-file FILE")
    namespaced = True
    if stack is not None:
        if Path(stack).is_file():
            fail(f"--cluster {stack}: a file, not a stack name; give it as --cluster-file {stack}")
        name, where = stack, f"--cluster {stack} (stacks/Pulumi.{stack}.yaml)"
        try:
            config_map: dict[str, Any] = dict(stack_config(stack)[0])
        except (FileNotFoundError, StackFileError, OSError) as exc:
            fail(" ".join(str(exc).split()))
    else:
        assert stack_file is not None
        name = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
        name = name.removesuffix(".yml")
        where = f"--cluster-file {stack_file}"
        config_map, namespaced = _cluster_file(stack_file, where)
    base = project_values(config_map)
    name = _emitted_base(name, where)
    if model is not None:
        base["model"] = {**(base.get("model") or {}), "name": model}
        where = f"{where} with --model {model}"
    cfg = _cluster_config(name, base, config_map, where, namespaced)
    for warning in model_name_warnings(cfg):
        typer.echo(f"warning: {where}: {warning.render()}", err=True)
    return name, base, cfg


def _cluster_file(path: Path, where: str) -> tuple[dict[str, Any], bool]:
    """(the config map, ``dynamo-testbed:<key>`` -> value, of a ``--cluster-file``; whether
    the file namespaces its keys): a stack file (its ``config:`` mapping), or the same keys as
    a plain mapping (``nodeClasses:``, ``links:``, ``model:``, ...), each key without a
    namespace the project's (:func:`stackmodel.config.config_key`). Exits 2, one line naming
    the file and the fix, on a directory, a missing file, YAML it cannot parse, an empty file,
    or a file that is not a mapping."""
    import yaml

    from stackmodel.config import NODE_CLASSES_EXAMPLE, config_key

    example = f"e.g. nodeClasses: {NODE_CLASSES_EXAMPLE}"
    if path.is_dir():
        fail(f"{where}: a directory; give the cluster's YAML file in it (docs/recommend.md)")
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        fail(f"{where}: no such file; give the cluster's YAML file, or --cluster STACK")
    except yaml.YAMLError as exc:
        fail(f"{where}: not YAML: {' '.join(str(exc).split())}")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{where}: cannot be read: {' '.join(str(exc).split())}")
    if document is None:
        fail(f"{where}: empty; a cluster file holds its nodeClasses ({example})")
    config = document.get("config", document) if isinstance(document, dict) else None
    if not isinstance(config, dict):
        fail(f"{where}: not a mapping of the cluster's keys ({example})")
    full = {config_key(str(key)): value for key, value in config.items()}
    return full, config is not document or any(":" in str(key) for key in config)


EMITTED_TAIL = "-000000-rank99"
"""The longest tail :func:`recommend.outputs.emitted_name` puts after the cluster's name: the
search's six-hex-digit id and a rank of two digits."""


def _emitted_base(name: str, where: str) -> str:
    """The name the search's emitted stacks, ``<name>-<search id>-rank<N>``
    (:func:`recommend.outputs.emitted_name`), start with: each one's ``topology.name``, a DNS
    label of limited length (:class:`stackmodel.config.TopologyConfig`), which a cluster file's
    own name (``my_lab.yaml``, ``Pulumi.HomeLab.yaml``) need not be. Such a name is taken
    lower-cased, other characters as ``-``, cut to the length left, and a note says so."""
    import re

    from pydantic import TypeAdapter, ValidationError

    from stackmodel.config import TopologyConfig

    field = TopologyConfig.model_fields["name"]
    try:
        TypeAdapter(Annotated[str, *field.metadata]).validate_python(name + EMITTED_TAIL)
    except ValidationError:
        longest = next(int(m.max_length) for m in field.metadata if hasattr(m, "max_length"))
        room = longest - len(EMITTED_TAIL)
        plain = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:room].rstrip("-")
        plain = plain if plain[:1].isalpha() else f"cluster-{plain}"[:room].rstrip("-")
        typer.echo(
            f"note: {where}: the stacks it emits are named {plain}-<id>-rank<N> (a DNS label of "
            f"at most {longest} characters: lower-case letters, digits, '-')",
            err=True,
        )
        return plain
    return name


def _workers_problem(problem: Any) -> bool:
    """Whether a check's ``problem`` is about the cluster stack's own workers or load, not its
    cluster: one under ``topology`` or ``load``, or a node's host memory its workers' memory
    limits overfill (:func:`stackmodel.checks.host_memory_problems`, keyed under the node
    class's ``hostMemoryGiB`` at its valid, positive value; a value the schema refuses is the
    cluster's)."""
    if problem.key.startswith(("topology", "load")):
        return True
    value = problem.value
    return (
        problem.key.startswith("nodeClasses.")
        and problem.key.endswith(".hostMemoryGiB")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and value > 0
    )


DEPLOYMENT_KEYS = ("topology", "load", "baselineStack")
"""A stack's keys that describe its own deployment, not its cluster: a cluster file need not
have them, and one that has them (a stack file as it is deployed) is not checked as a
deployment; each candidate's workers and the workload stand in (:func:`_cluster_config`). Of a
``topology`` the candidates keep its frontend and ready timeout
(:func:`recommend.space.candidate_raw`) and try its prefill workers' KV transport
(:func:`recommend.space.own_transports`)."""

STAND_IN_WORKER = {"name": "cluster", "role": "aggregated", "replicas": 1}
"""The worker group a cluster file without a ``topology`` is validated with, on its first node
class: a stack has workers, a cluster need not. Nothing reads it: each candidate has its own
workers, and it is no prefill worker whose KV transport the search would try
(:func:`recommend.space.own_transports`)."""


def _cluster_config(
    name: str, base: dict[str, Any], config_map: dict[str, Any], where: str, namespaced: bool
) -> Any:
    """The cluster's config, checked as a cluster, not as a deployment: its node classes,
    links, model, engine and platform settings are checked as ``testbed render`` checks them
    (a key of a namespace nothing reads among ``config_map``'s included); its own workers and
    load are replaced by each candidate's and the workload's, so neither is required (a cluster
    without ``topology`` is checked with :data:`STAND_IN_WORKER`) and a problem of its workers
    (:func:`_workers_problem`: its workers too small for the model, a memory floor, more memory
    limits than a node's ``hostMemoryGiB``) is not the cluster's, and each candidate is checked
    instead. Exits 2 on any other problem, naming ``where`` (the stack file and ``--model``),
    each key as the file spells it (``namespaced``: ``dynamo-testbed:links``, else ``links``)."""
    from pydantic import ValidationError

    from stackmodel.config import StackConfig
    from stackmodel.errors import StackConfigError
    from stackmodel.validation import shape_problem, validate_stack

    checked = dict(base)
    if "topology" not in checked:
        classes = base.get("nodeClasses")
        first = next(iter(classes), "") if isinstance(classes, dict) else ""
        checked["topology"] = {"workers": [{**STAND_IN_WORKER, "nodeClass": first}]}
    try:
        return validate_stack(name, checked, config_map).cfg
    except StackConfigError as exc:
        own = [p for p in exc.problems if not _workers_problem(p)]
        if own:
            fail(f"{where}: " + "; ".join(_cluster_problem(p, namespaced) for p in own))
    shape = {k: v for k, v in checked.items() if k not in ("load", "baselineStack")}
    try:
        return StackConfig.model_validate(shape, context={"stack": name})
    except ValidationError as exc:
        problem = shape_problem(exc.errors()[0], StackConfig)
        fail(f"{where}: {_cluster_problem(problem, namespaced)}")


def _cluster_problem(problem: Any, namespaced: bool) -> str:
    """A cluster's problem as one line, its key as the file spells it (``namespaced``: with
    ``dynamo-testbed:``); a missing model names ``--model`` too, which gives it."""
    if problem.key == "model" and problem.value is None:
        return (
            "no model: give --model MODEL (a catalog name, e.g. Qwen/Qwen3-0.6B) or write "
            "model: {name: MODEL} in the file"
        )
    return " ".join(problem.render(namespaced).split())


def _too_few_tokens(
    few: TooFewTokensError, slo_from: str, workload: str, *, drawn: bool, folder: bool
) -> str:
    """``few``'s line for recommend: its objective as ``slo_from`` spells it (``--slo``, or the
    ``--workload`` file's own ``slo``, whose line the caller leads with the file), then the
    workload's key that sets the output tokens and the fix there: a file's ``maxTokens``, or its
    ``outputLengths`` (``drawn``: their mean is the count), or the ``maxTokens`` a results
    folder (``folder``) ran with."""
    where = f" of --workload {workload}" if slo_from == "--slo" else ""
    inside = f" in {workload}" if where else ""
    if folder:
        tokens = f"the maxTokens --workload {workload} ran with"
        fix = "give a --workload measured with maxTokens 2 or more"
    elif drawn:
        tokens = f"the mean of outputLengths{where}"
        fix = f"give outputLengths values averaging 2 or more{inside}"
    else:
        tokens, fix = f"maxTokens{where}", f"set maxTokens to 2{inside}"
    return few.said(slo_from, tokens, fix)


def _workload(text: str, own_slo: bool = True) -> tuple[Workload, dict[str, Any] | None]:
    """(what ``--workload`` sends, the settings its file wrote: None for ``seed`` and a results
    folder). ``--workload``: ``seed`` (the seed's grid), a YAML file of load settings (as
    ``testbed load --config`` reads one, a stack file's ``load`` section included) or a results
    folder (:func:`recommend.replay.replayed`); exits 2 on a bad one, naming the fix (a
    section's ``clients`` too: the search sets the emitted stacks' load clients itself, so a
    file's would be ignored). ``own_slo`` False (``--slo`` given, which replaces it): a file's
    ``slo`` is not checked."""
    from pydantic import ValidationError

    from recommend.replay import FOLDER_FILES, HINT, WorkloadError, replayed
    from recommend.workload import Workload
    from testbed.load_command import load_problem, read_load_settings
    from workload.config import Arrival, LoadConfig
    from workload.slo import too_few_tokens

    if text == "seed":
        return Workload(LoadConfig()), None
    path = Path(text)
    if path.is_dir():
        try:
            return replayed(path), None
        except WorkloadError as exc:
            fail(str(exc))
    if path.name in FOLDER_FILES and (path.parent / "summary.json").is_file():
        fail(
            f"--workload {text}: a file of a results folder; give the folder: "
            f"--workload {path.parent}"
        )
    try:
        written = read_load_settings(path, kept=("clients",))  # refused: the stacks' own
        settings = {k: v for k, v in written.items() if own_slo or k != "slo"}
        if not settings:
            fail(
                f"--workload {text}: no load settings (a stack file without a `load:` section, "
                "or an empty file); give a file with a `load:` section or load settings, or "
                "--workload seed"
            )
        load = LoadConfig.model_validate(settings)
    except ValidationError as exc:
        few = too_few_tokens(exc)
        if few is not None:
            drawn = "outputLengths" in settings
            fail(
                f"--workload {text}: {_too_few_tokens(few, 'slo', text, drawn=drawn, folder=False)}"
            )
        fail(f"--workload {text}: {load_problem(exc.errors()[0])}")
    except ValueError as exc:
        fail(f"--workload {text}: {exc}; {HINT}")
    if load.request_rate is not None and load.arrival is not Arrival.POISSON:
        typer.echo(
            f"warning: --workload {text}: requestRate {load.request_rate:g} is ignored: the "
            "closed loop (arrival: closed) searches the concurrency; a rate applies only with "
            "arrival: poisson",
            err=True,
        )
    return Workload(load, text), written


def _said(value: object, written: bool) -> str:
    """``value`` as the inputs' block shows it, `` (default)`` after it where the user's file
    did not write it."""
    return f"{value}{'' if written else ' (default)'}"


def _inputs_block(
    name: str, base: dict[str, Any], cfg: Any, sent: Workload, written: dict[str, Any] | None
) -> list[str]:
    """The lines printed once the inputs are checked, before the search: each node class read
    (its GPU and GPU memory, ``gpusPerNode`` x ``nodes``, time-slicing, host memory), the links,
    the cluster file's own deployment that is not searched (:data:`DEPLOYMENT_KEYS` it sets),
    the model, the load searched and the shared prefix, each value a default filled in (a key
    the files did not write) marked ``(default)``. The workload's lengths and the SLO, with
    where it came from, follow from :func:`recommend.run.recommend`."""
    from steptime.gpus import DEFAULT_GPU

    lines = [f"cluster {name}:"]
    classes = base.get("nodeClasses") or {}
    for key, nc in cfg.node_classes.items():
        raw = classes.get(key) or {}
        gpu = nc.gpu_name or f"{DEFAULT_GPU} (default: no gpu named)"
        shared = nc.time_slicing.replicas_per_gpu if nc.time_slicing else None
        host = f"{nc.host_memory_gib:g} GiB" if nc.host_memory_gib else "unset (unchecked offline)"
        lines.append(
            f"  node class {key}: {gpu}, {nc.gpu_memory_gib:g} GiB a GPU; gpusPerNode "
            f"{_said(nc.gpus_per_node, 'gpusPerNode' in raw)} x nodes "
            f"{_said(nc.nodes, 'nodes' in raw)}; time-slicing "
            f"{f'{shared} workers a GPU' if shared else 'off'}; host memory {host}"
        )
    links = base.get("links") or {}
    lines.append(
        f"  links: sameNode {_said(cfg.links.same_node, 'sameNode' in links)}, "
        f"crossNode {_said(cfg.links.cross_node, 'crossNode' in links)}"
    )
    deployed = [key for key in DEPLOYMENT_KEYS if base.get(key)]
    if deployed:
        lines.append(
            f"  not searched: its own {', '.join(deployed)} (each candidate's workers and the "
            "workload stand in)"
        )
    lines.append(f"model: {cfg.model.name}")
    load = sent.load
    shown = sent.in_flight_cap if sent.open_loop else load.concurrency
    if written is None:
        concurrency = f"{shown} ({'the seed' if sent.replay is None else 'the folder'}'s)"
    else:
        concurrency = _said(shown, "concurrency" in written)
    searched = (
        f"request rate from {load.request_rate:g}/s, at most {concurrency} in flight"
        if sent.open_loop
        else f"concurrency {concurrency}"
    )
    prefix = _said(f"{load.prefix_share:.0%}", written is None or "prefixShare" in written)
    lines.append(f"load: {searched}; each prompt's shared prefix {prefix}")
    return lines


def _close(value: str, accepted: list[str]) -> str:
    """``; did you mean X?`` for the accepted value ``value`` begins or resembles ('' if none)."""
    from configkeys.suggest import closest

    begun = next((a for a in accepted if value and a.startswith(value)), None)
    close = begun or closest(value, accepted)
    return f"; did you mean {close}?" if close else ""


def _fixes(items: list[str] | None, space: list[Candidate]) -> dict[str, str]:
    """``--fix`` KEY=VALUE items as knob -> value; exits 2 on an unknown key, a repeated one, or
    a value no candidate of ``space`` (the whole search space) has, naming those accepted."""
    from recommend.space import FIX_KEYS

    fixes: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or key not in FIX_KEYS:
            fail(
                f"--fix {item!r}: expected KEY=VALUE with KEY one of {', '.join(FIX_KEYS)}"
                + _close(key, list(FIX_KEYS))
            )
        if key in fixes:
            fail(f"--fix {key}: given twice ({fixes[key]!r} and {value!r}); keep one")
        accepted = sorted({c.knobs()[key] for c in space} - {""}, key=lambda v: (len(v), v))
        if value not in accepted:
            has = ", ".join(repr(a) for a in accepted) or "none set"
            what = "; search a value with --batched-tokens" if key == "maxNumBatchedTokens" else ""
            fail(
                f"--fix {key}={value}: no candidate has it; this cluster's candidates have "
                f"{key} {has}{what}{_close(value, accepted)}"
            )
        fixes[key] = value
    return fixes


def _print_table(
    results: list[Result], first: Result | None, inputs: Inputs, top: int, validations: Validations
) -> None:
    from rich.table import Table

    from outputs.tables import table_console
    from recommend.outputs import has_figures, per_gpu_name, shown_line, stand_in_note
    from recommend.search import saturated_line

    console = table_console(highlight=False)
    table = Table(title="SIMULATED: testbed recommend")
    for col in ("rank", "candidate", per_gpu_name(inputs.objective), "load", "why"):
        table.add_column(col)
    shown = [r for r in results if r.rank is not None][:top]
    others = ("validation-failed", "short-of-load", "slo-not-met", "screened")
    shown += [r for r in results if r.status in others][: max(0, top - len(shown))]
    for r in shown:
        table.add_row(
            str(r.rank or "-"),
            f"{r.candidate.key}: {r.candidate.label()}",
            f"{r.value:,.0f}" if r.value is not None else "-",
            r.best.load_text() if r.best else "-",
            shown_line(r, first, inputs, validations, noted=False),
        )
    console.print(table)
    if any(has_figures(r) and r.candidate.key not in validations for r in shown):
        rows = "The rows not validated" if validations else "Every row"
        console.print(f"{rows}: {stand_in_note(validations)}")
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    console.print(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    if saturated := saturated_line(results):
        console.print(saturated)


def _nearest(results: list[Result], slo: Any, top: int = 3) -> list[str]:
    """The candidates nearest the SLO and what binds, closest first: under the capacity
    question those that hold part of the load needed (``short-of-load``), the most of it first,
    each with what it holds and what binds (:func:`recommend.claims.reason_line`), ties by the
    objective's figure as :func:`_best_held` breaks them; then by how far their worst objective
    is over its bound of ``slo`` (its figure at the lowest load that misses it, or a floor over
    it, ``Result.floor_over``); ties by key."""
    from recommend.claims import reason_line
    from recommend.search import held_load

    bounds = slo.objectives()
    lines: list[tuple[int, float, float, str, str]] = []
    for r in results:
        if r.status == "short-of-load" and r.needed:
            held = held_load(r.best) if r.best is not None else 0.0
            lines.append(
                (
                    0,
                    -held / r.needed,
                    -(r.value or 0.0),
                    r.candidate.key,
                    f"{r.candidate.key} ({r.candidate.label()}): {reason_line(r, None)}",
                )
            )
        elif r.status == "slo-not-met" and r.over is not None:
            over = [v / bounds[k] for k, v in r.over.values_ms.items() if v and k in bounds]
            lines.append(
                (
                    1,
                    max(over, default=float("inf")),
                    0.0,
                    r.candidate.key,
                    f"{r.candidate.key} ({r.candidate.label()}): {r.binding} at "
                    f"{r.over.load_text()}: "
                    + ", ".join(
                        f"{k} {v:,.0f} ms" for k, v in r.over.values_ms.items() if v is not None
                    ),
                )
            )
        elif r.status == "screened" and r.floor_over is not None:
            lines.append(
                (
                    1,
                    r.floor_over,
                    0.0,
                    r.candidate.key,
                    f"{r.candidate.key} ({r.candidate.label()}): {r.reason}",
                )
            )
    return [line for *_, line in sorted(lines)[:top]]


def _best_held(results: list[Result]) -> str:
    """Under the capacity question, what the candidate holding the most of the load needed
    holds: ``the best, c004 (...), holds 6 of the 10 clients needed`` ('' when none was timed
    or under another objective)."""
    from recommend.claims import holds_text
    from recommend.search import held_load

    timed = [
        (held_load(r.best), r.value or 0.0, r.candidate.key, r)
        for r in results
        if r.needed is not None and r.best is not None
    ]
    if not timed:
        return ""
    best = max(timed, key=lambda t: t[:3])[3]
    return f"the best, {best.candidate.key} ({best.candidate.label()}), {holds_text(best)}"


def _refusals(results: list[Result], top: int = 5) -> list[str]:
    """When none is near (every candidate refused): the refusals' distinct reasons, most
    frequent first, each with its count."""
    from collections import Counter

    counts = Counter(r.reason for r in results if r.status == "refused")
    lines = [f"{n} refused: {reason}" for reason, n in counts.most_common(top)]
    if len(counts) > top:
        lines.append(f"{len(counts) - top} more distinct reasons: candidates.json")
    return lines


def _check_lengths(cfg: Any, sent: Workload) -> None:
    """Exit 2 when the workload's prompts reach the model's max model length (``maxModelLen``,
    else the model's context): vLLM refuses every such request, on any candidate
    (:func:`stackmodel.checks.prompt_length_problems`)."""
    from stackmodel.checks import prompt_length_problems
    from stackmodel.plan import max_model_len, model_geometry

    context = max_model_len(cfg, model_geometry(cfg))
    problems = prompt_length_problems(sent.load, context) if context else []
    for p in problems[:1]:
        key = p.key.removeprefix("load.")
        fail(f"--workload {sent.source}: {key} = {p.value}: {p.message.replace(p.key, key)}")


def _one_slo(given: list[str] | None) -> str:
    """``--slo``'s value ('' when not given); exits 2 when it is given more than once, which
    would otherwise keep the last alone, naming the one option that holds them all."""
    if given and len(given) > 1:
        fail(
            f"--slo given {len(given)} times ({', '.join(given)}); give one, its objectives "
            f"comma-separated: --slo {','.join(given)}"
        )
    return given[0] if given else ""


def _sent(
    workload: str, slo: str, requests_per_client: int | None, batched_tokens: str | None
) -> tuple[Workload, dict[str, Any] | None, list[int]]:
    """(what is sent, its load's ``slo`` the SLO searched for: ``--slo``, else the workload's;
    the settings its file wrote (None: not a file); the ``--batched-tokens`` values); exits 2
    on a bad option. ``--slo`` replaces a file's ``slo`` whole: a warning names the objectives
    of the file's that it drops and the ``--slo`` that keeps them."""
    from recommend.workload import MEASURED_PER_CLIENT
    from testbed.console import int_list
    from testbed.slo_option import slo_of
    from workload.slo import SloError, TooFewTokensError

    per_client = MEASURED_PER_CLIENT if requests_per_client is None else requests_per_client
    if per_client < 1:
        fail(
            f"--requests-per-client {per_client}: a run needs at least 1 measured request per "
            f"client; give 1 or more (default {MEASURED_PER_CLIENT})"
        )
    given = slo_of(slo or None)
    sent, written = _workload(workload, own_slo=given is None)
    if given is not None and written is not None and (dropped := _dropped(given, written)):
        typer.echo(f"warning: --workload {workload}: {dropped}", err=True)
    target = given or sent.load.slo
    if target is None:
        fail(
            f"--slo is required: the workload ({workload}) sets no slo; give e.g. --slo "
            "ttft_p99_ms=1000 (the search never relaxes it)"
        )
    # The SLO used travels with the workload's settings: what the outputs and emitted stacks read.
    load = sent.load.model_copy(update={"slo": target})
    sent = dataclasses.replace(sent, load=load, per_client=per_client)
    try:
        target.check_outputs(load.max_tokens)  # a file's own slo was checked reading it
        budgets = int_list("batched-tokens", batched_tokens) or []
    except TooFewTokensError as few:
        drawn, folder = load.output_lengths is not None, sent.replay is not None
        fail(_too_few_tokens(few, "--slo", workload, drawn=drawn, folder=folder))
    except (SloError, ValueError) as exc:
        fail(str(exc))
    for budget in budgets:
        if budget <= 0:
            fail(
                f"--batched-tokens {batched_tokens}: {budget} is not a token budget; give "
                "positive integers, e.g. --batched-tokens 2048,8192"
            )
    return sent, written, budgets


def _dropped(given: Slo, written: dict[str, Any]) -> str:
    """What ``--slo`` (``given``) drops of a workload file's ``slo`` (its ``written``
    settings'), which it replaces whole: the file's objectives ``--slo`` does not bound, by
    their keys in the file, and the ``--slo`` that keeps them; '' when none is dropped or the
    file's ``slo`` is not one (unchecked: ``--slo`` replaces it)."""
    from pydantic import ValidationError

    from metrics.registry import objectives
    from workload.slo import Slo, plain

    try:
        own = Slo.model_validate(written.get("slo"))
    except ValidationError:
        return ""
    dropped = {k: v for k, v in own.objectives().items() if k not in given.bounds}
    if not dropped:
        return ""
    named = ", ".join(f"{objectives()[k].stack_key} {plain(v)}" for k, v in dropped.items())
    both = Slo.model_validate({**dropped, **given.bounds})
    return (
        f"--slo replaces its slo, so {named} is not searched; to keep it give --slo {both.option()}"
    )


def _space(
    cfg: Any, budgets: list[int], load: Any, fix: list[str] | None, objective: str
) -> tuple[dict[str, str], list[Candidate]]:
    """(the ``--fix`` values, the candidates that have them all); exits 2 when none has. Under
    ``capacity`` groups on part of a class's GPUs are candidates too."""
    from recommend.space import candidates, with_fixes

    partial = objective == "capacity"
    everything = candidates(cfg, budgets, shared_prefix=load.prefix_tokens > 0, partial=partial)
    fixes = _fixes(fix, everything)
    space = with_fixes(everything, fixes)
    if not space:
        given = " ".join(f"--fix {k}={v}" for k, v in fixes.items())
        fail(f"{given}: each value is some candidate's, but no candidate has them all; drop one")
    return fixes, space


def recommend_command(
    ctx: typer.Context,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="The cluster as an existing stack's nodeClasses and links (stack name).",
            rich_help_panel=INPUTS,
        ),
    ] = None,
    cluster_file: Annotated[
        Path | None,
        typer.Option(
            "--cluster-file",
            help="The cluster as a YAML file: its nodeClasses (and links, model, ...), as a "
            "plain mapping or a stack file; no topology needed.",
            rich_help_panel=INPUTS,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="The model (a catalog name); default: the cluster stack's.", rich_help_panel=INPUTS
        ),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            help="seed (the seed's grid), a YAML file of load settings (or a stack file's "
            "load section), or a results folder (its requests replayed).",
            rich_help_panel=INPUTS,
        ),
    ] = "seed",
    slo: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SLO",
            help="The SLO, e.g. ttft_p99_ms=1000,itl_p99_ms=50 (ms); default: the workload's "
            "slo (its load settings'), which --slo replaces whole.",
            rich_help_panel=INPUTS,
        ),
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            help="capacity (the fewest GPUs that serve the workload's stated load within the "
            "SLO, with the headroom), goodput-per-gpu or tokens-per-gpu (the most from the "
            "cluster at the highest load each holds), or pareto.",
            rich_help_panel=SEARCH,
        ),
    ] = "capacity",
    headroom: Annotated[
        float,
        typer.Option(
            parser=_headroom,
            metavar="FLOAT",
            help="capacity: hold the workload's stated load (its largest concurrency, or an "
            "open loop's request rate) times this.",
            rich_help_panel=SEARCH,
        ),
    ] = 1.2,
    fix: Annotated[
        list[str] | None,
        typer.Option(
            "--fix",
            metavar="KEY=VALUE",
            help="Keep only candidates with this knob (repeatable), e.g. kind=aggregated.",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    batched_tokens: Annotated[
        str | None,
        typer.Option(
            "--batched-tokens",
            metavar="N,N",
            help="Values of vLLM's max-num-batched-tokens to try besides its default.",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    margin: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="The ratio a claim needs (the model's error on published pairs).",
            rich_help_panel=SEARCH,
        ),
    ] = 1.25,
    requests_per_client: Annotated[
        int | None,
        typer.Option(
            "--requests-per-client",
            metavar="N",
            help="A run's measured requests per client at least (its length; plan.md's "
            "measurement sends the same); default 2.",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    jobs: Annotated[
        int, typer.Option(min=1, help="Processes timing candidates.", rich_help_panel=SEARCH)
    ] = 2,
    validate_top: Annotated[
        int,
        typer.Option(
            min=0,
            help="Run the top K with the real Dynamo routing (the sim group) at the load found; "
            "one over the SLO loses its rank; 0: none.",
            rich_help_panel=SEARCH,
        ),
    ] = 3,
    emit_stacks: Annotated[
        int,
        typer.Option(
            min=0,
            help="The top N as stack files (and those plan.md measures).",
            rich_help_panel=OUTPUT,
        ),
    ] = 3,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Output folder (default out/recommend/STACK, the cluster stack's name).",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Take the candidates an earlier search with the same inputs timed in --out "
            "(interrupted or not) from there.",
            rich_help_panel=OUTPUT,
        ),
    ] = False,
) -> None:
    """Search the topologies a cluster can hold for the one that serves the workload's load
    (times --headroom) within an SLO on the fewest GPUs, validated with the real routing; rank
    them and say why each loses. SIMULATED.

    Example: testbed recommend --cluster kv-routing --workload seed --slo ttft_p99_ms=1000
    """
    from outputs.resume import ResumeError
    from recommend.run import RecommendRequest, SearchInterrupted, recommend
    from recommend.search import OBJECTIVES_RANKED
    from testbed.dependency_groups import missing_group
    from testbed.stack_options import under_project

    if validate_top:
        missing = missing_group(
            "sim",
            "--validate-top (default 3) runs the real Dynamo routing; --validate-top 0 skips it",
            "testbed recommend ...",
        )
        if missing is not None:
            fail(missing)
    chosen = next((o for o in OBJECTIVES_RANKED if o == objective), None)
    if chosen is None:
        fail(f"--objective {objective!r}: one of {', '.join(OBJECTIVES_RANKED)}")
    slo_text = _one_slo(slo)
    name, base, cfg = _cluster(cluster, cluster_file, model)
    sent, written, budgets = _sent(workload, slo_text, requests_per_client, batched_tokens)
    _check_lengths(cfg, sent)
    fixes, space = _space(cfg, budgets, sent.load, fix, chosen)
    for line in _inputs_block(name, base, cfg, sent, written):
        typer.echo(line, err=True)
    folder = (
        under_project(out, RECOMMEND_OUT / name)
        if out
        else under_project(RECOMMEND_OUT / name, RECOMMEND_OUT / name)
    )
    assert sent.load.slo is not None  # _sent sets it
    request = RecommendRequest(
        name,
        base,
        cfg,
        sent,
        sent.load.slo,
        "--slo" if slo_text else f"the workload's slo, {workload}",
        space,
        fixes,
        budgets,
        chosen,
        margin,
        jobs,
        validate_top,
        emit_stacks,
        folder,
        resume,
        headroom=headroom,
        command=_command_line(ctx),
        cluster_file=cluster_file,
    )
    try:
        found = recommend(request, _Printer())
    except ResumeError as exc:
        fail(str(exc))
    except SearchInterrupted as exc:
        typer.echo(
            f"interrupted (Ctrl-C): the {exc.count} candidates timed are kept in "
            f"{exc.path}; the same command with --resume goes on from them",
            err=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    _print_outcome(found, folder)


def _command_line(ctx: typer.Context) -> str:
    """The command line as given (the options given on it, not their defaults), as the
    outputs name it: ``testbed recommend --cluster-file c.yaml --slo ttft_p99_ms=1000``."""
    import shlex

    words = ["testbed", ctx.info_name or "recommend"]
    for param in ctx.command.params:
        name = param.name or ""
        source = ctx.get_parameter_source(name)
        if source is None or source.name != "COMMANDLINE":
            continue
        value, option = ctx.params[name], param.opts[0]
        if getattr(param, "is_flag", False):
            words.append(option)
        else:
            for item in value if isinstance(value, list | tuple) else [value]:
                words += [option, str(item)]
    return shlex.join(words)


class _Printer:
    """What ``testbed recommend`` prints while :func:`recommend.run.recommend` runs
    (:class:`recommend.run.RecommendObserver`): the inputs' lines on stderr, a transient
    progress bar over the search on a terminal, else (a CI log, ``nohup``) a plain line on
    stderr per batch of candidates (:data:`recommend.search.BATCH`) and at the end; each
    validation's line."""

    def __init__(self) -> None:
        import sys

        self.bar: Any = None
        self.task: Any = None
        self.plain = not sys.stderr.isatty()
        self.cluster = ""

    def note(self, line: str) -> None:
        typer.echo(line, err=True)

    def on_search(self, cluster: str) -> None:
        from rich.progress import Progress

        self.cluster = cluster
        if self.plain:
            return
        self.bar = Progress(transient=True)
        self.bar.start()
        self.task = self.bar.add_task(f"timing the candidates of {cluster}", total=None)

    def on_candidate(self, done: int, total: int) -> None:
        from recommend.search import BATCH

        if not self.plain:
            self.bar.update(self.task, completed=done, total=total)
        elif done % BATCH == 0 or done == total:
            typer.echo(f"timing the candidates of {self.cluster}: {done} of {total}", err=True)

    def on_search_end(self) -> None:
        if self.bar is not None:
            self.bar.stop()

    def on_validated(self, line: str) -> None:
        typer.echo(f"SIMULATED: {line}")


def _print_outcome(found: Recommendation, folder: Path) -> None:
    """The ranking, the validations' summary and what was written; none that meets the SLO:
    the nearest candidates (or the refusals), exit 1."""
    from recommend.outputs import validation_summary

    results, first, inputs, validations = (
        found.results,
        found.first,
        found.inputs,
        found.validations,
    )
    _print_table(results, first, inputs, 10, validations)
    if summary := validation_summary(results, first, inputs, validations):
        typer.echo(f"SIMULATED: {summary}")
    for caveat in inputs.caveats:
        typer.echo(f"caveat: {caveat}", err=True)
    for cost in inputs.slicing:
        typer.echo(f"SIMULATED: {cost.line()}")
    if first is None:
        if most := _best_held(results):
            typer.echo(f"SIMULATED: no candidate holds the load needed: {most}", err=True)
        refused = all(r.status == "refused" for r in results)
        said = "the checks refuse every candidate, for" if refused else "the nearest"
        needed = " at the load needed" if most else ""
        typer.echo(
            f"SIMULATED: no candidate meets the SLO ({inputs.slo.describe()}){needed}; {said}:",
            err=True,
        )
        for line in _refusals(results) if refused else _nearest(results, inputs.slo):
            typer.echo(f"  {line}", err=True)
        typer.echo(f"wrote {folder}/ (candidates.json says what binds each)", err=True)
        raise typer.Exit(EXIT_NO_SUCCESS)
    typer.echo(
        f"wrote {folder}/: candidates.json, candidates.csv, plan.md, pareto.png, report.html, "
        f"{len(found.stacks)} stack files"
    )
