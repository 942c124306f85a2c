"""What ``testbed recommend`` leaves in its folder, every file labelled SIMULATED:
``candidates.json`` and ``candidates.csv`` (every candidate: knobs, status, figures at the
highest load meeting the SLO, what binds, the reason line), the top candidates as stack files
(``stacks/Pulumi.<name>.yaml``, each with a header comment of its rank, figures and reason),
``plan.md`` (the commands that deploy and measure the A / B stacks and compare them, the
``testbed calibrate`` step that feeds the measurement back, and the teardown), ``pareto.png``
and ``report.html`` (tokens/s per GPU against tokens/s per user with the ITL/TPOT bounds'
per-user lines, a panel per TTFT or E2E bound, the margin band: :func:`chart_data`; under the
capacity question the load each candidate holds against the GPUs it uses, the load needed as a
line: :func:`capacity_chart_data`).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from metrics import registry
from recommend.claims import SlicingCost, gpus_text, ratio, reason_line, trade, verdict
from recommend.search import (
    DEFAULT_HEADROOM,
    Objective,
    Result,
    held_load,
    left_untimed,
    needed_load,
    objective_value,
    pareto_front,
    saturated_line,
    stated_load,
)
from recommend.validate import Validation
from recommend.workload import MEASURED_PER_CLIENT, Workload
from simulator.provenance import step_sources
from stackmodel.config import StackConfig, config_key
from stackmodel.errors import PROJECT
from stackmodel.log_budget import logged_load
from stackmodel.models import GATED_MODELS
from stackmodel.stacks import REPO
from workload.config import Arrival, LoadConfig
from workload.slo import Slo, bound_text

_UNRUN = (
    "SIMULATED: the timing model's figures for stacks that have not run; confirm on the cluster"
)
SIMULATED = f"{_UNRUN} (plan.md)"
"""The label every output carries (plan.md's own: its steps)."""

CANDIDATES_JSON = "candidates.json"
CANDIDATES_CSV = "candidates.csv"
PLAN_MD = "plan.md"
PARETO_PNG = "pareto.png"
REPORT_HTML = "report.html"
STACKS_DIR = "stacks"


@dataclass(frozen=True)
class Inputs:
    """What the search was asked: the cluster stack, the workload (its load settings and its
    run length, ``per_client`` measured requests per client at least), the SLO, the objective
    and the margin; ``caveats``: what every output says beside the ranking (the model or GPU
    outside the calibration, the margin's source: :func:`recommend.run.caveats`); ``command``,
    the command line as given (default: ``testbed recommend --cluster <cluster>``);
    ``cluster_file``, the stack file ``--cluster-file`` named (None:
    ``stacks/Pulumi.<cluster>.yaml``), which each emitted stack edits; ``search_id``, a short
    hash of the search's inputs in each emitted stack's name ('' : none), so two searches of
    one cluster emit stacks of different names; ``headroom``, the capacity question's
    (:func:`recommend.search.needed_load`); ``slicing``, what time-slicing buys rank 1 on each
    time-sliced class it splits a GPU of (:func:`recommend.run.slicing_off`);
    ``prerequisites``, what the cluster must have before plan.md's first ``pulumi up``
    (:func:`prerequisites`)."""

    cluster: str
    load: LoadConfig
    slo: Slo
    objective: Objective
    margin: float
    cluster_gpus: int
    model: str
    per_client: int = MEASURED_PER_CLIENT
    caveats: tuple[str, ...] = ()
    command: str = ""
    cluster_file: Path | None = None
    search_id: str = ""
    headroom: float = DEFAULT_HEADROOM
    slicing: tuple[SlicingCost, ...] = ()
    prerequisites: tuple[str, ...] = ()

    @property
    def invocation(self) -> str:
        """The command line the outputs name (``command``, or the default's)."""
        return self.command or f"testbed recommend --cluster {self.cluster}"

    @property
    def source(self) -> Path:
        """The cluster's stack file: ``cluster_file``, else ``stacks/Pulumi.<cluster>.yaml``."""
        return self.cluster_file or REPO / "stacks" / f"Pulumi.{self.cluster}.yaml"

    def load_at(self, result: Result) -> LoadConfig:
        """The load settings that measure ``result`` (ranked) as the search timed it: the
        workload at its highest load meeting the SLO, each run as long as the search's there
        (:meth:`recommend.workload.Workload.load_at`)."""
        assert result.best is not None
        sent = Workload(self.load, per_client=self.per_client)
        return sent.load_at(result.best.concurrency, result.best.rate)

    def stack_load(self, result: Result) -> tuple[LoadConfig, dict[str, int | str]]:
        """(the grid, the load step's keys) ``result``'s emitted stack runs: :meth:`load_at`
        as in-cluster load clients whose logs hold its records run it
        (:func:`stackmodel.log_budget.logged_load`)."""
        return logged_load(self.load_at(result), 1)


def per_gpu_name(objective: Objective) -> str:
    """What ``objective`` ranks by, as the outputs name it: ``goodput tok/s per cluster GPU``
    (``pareto`` ranks its front by goodput too), or ``output tok/s per cluster GPU``."""
    if objective == "tokens-per-gpu":
        return "output tok/s per cluster GPU"
    return "goodput tok/s per cluster GPU"


def candidate_row(result: Result, first: Result | None, inputs: Inputs) -> dict[str, Any]:
    """One candidate as a JSON-ready mapping."""
    c, margin = result.candidate, inputs.margin
    return {
        "key": c.key,
        "label": c.label(),
        "rank": result.rank,
        "status": result.status,
        "verdict": verdict(result, first, margin) if result.rank is not None else None,
        "ratio": ratio(result, first),
        "value": result.value,
        "gpus": result.gpus,
        "binding": result.binding,
        "line": reason_line(result, first, margin, inputs.objective),
        "reason": result.reason,
        "knobs": c.knobs(),
        "groups": [asdict(g) for g in c.groups],
        "best": asdict(result.best) if result.best else None,
        "over": asdict(result.over) if result.over else None,
        "bounds": asdict(result.bounds) if result.bounds else None,
        "ceiling": (
            {"limit": result.ceiling_limit, "tokensPerSPerGpu": result.ceiling_value}
            if result.ceiling_value is not None
            else None
        ),
        "crossover": result.crossover_summary or None,
        "runs": result.runs,
        "stepTimes": None if result.plan is None else step_sources(result.plan),
    }


def write_candidates(
    out: Path,
    inputs: Inputs,
    results: Sequence[Result],
    first: Result | None,
    validations: Mapping[str, Validation] | None = None,
) -> None:
    """``candidates.json`` (with the inputs) and ``candidates.csv`` (one row a candidate);
    ``validations``: candidate key -> its run with the real Dynamo routing (``realRouting``)."""
    import pandas as pd

    rows = [candidate_row(r, first, inputs) for r in results]
    for row in rows:
        done = (validations or {}).get(row["key"])
        row["realRouting"] = asdict(done) if done is not None else None
    document = {
        "simulated": SIMULATED,
        "cluster": inputs.cluster,
        "clusterGpus": inputs.cluster_gpus,
        "workload": inputs.load.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "requestsPerClient": inputs.per_client,
        "slo": inputs.slo.option(),
        "objective": inputs.objective,
        "margin": inputs.margin,
        "caveats": list(inputs.caveats),
        "timeSlicing": [cost.as_json() for cost in inputs.slicing],
        "candidates": rows,
    }
    (out / CANDIDATES_JSON).write_text(json.dumps(document, indent=2) + "\n")
    flat = []
    for row in rows:
        best = row["best"] or {}
        flat.append(
            {
                "simulated": True,
                **{k: row[k] for k in ("key", "rank", "status", "verdict", "ratio", "value")},
                **{k: row[k] for k in ("gpus", "binding", "label", "line")},
                **row["knobs"],
                "concurrency": best.get("concurrency"),
                "request_rate": best.get("rate"),
                "goodput_tokens_per_s_per_gpu": best.get("goodput_tokens_per_s_per_gpu"),
                "tokens_per_s_per_gpu": best.get("tokens_per_s_per_gpu"),
                "tokens_per_s_per_user": best.get("tokens_per_s_per_user"),
                "requests_per_s": best.get("requests_per_s"),
                **{k: v for k, v in (best.get("values_ms") or {}).items()},
            }
        )
    table = pd.DataFrame(flat)
    for column in ("rank", "concurrency", "gpus"):  # counts: integers, blank where none
        table[column] = table[column].astype("Int64")
    table.to_csv(out / CANDIDATES_CSV, index=False)


Validations = Mapping[str, Validation]
"""Candidate key -> its run with the real Dynamo routing (``--validate-top``)."""


def shown_line(
    result: Result,
    first: Result | None,
    inputs: Inputs,
    validations: Validations | None = None,
    noted: bool = True,
) -> str:
    """A candidate's line as every output presents it: its reason line
    (:func:`recommend.claims.reason_line`), led by its real-routing verdict where
    ``--validate-top`` ran it (:meth:`recommend.validate.Validation.verdict`), else followed by
    :func:`stand_in_note` (``noted`` False: not; a table that says it once under its rows).
    The ranking stays the model's."""
    line = reason_line(result, first, inputs.margin, inputs.objective)
    done = (validations or {}).get(result.candidate.key)
    if not has_figures(result):
        return line
    if done is None:
        return f"{line}; {stand_in_note(validations or {})}" if noted else line
    moved = done.moved()
    return f"{done.verdict(inputs.slo)}; model: {line}" + (f"; {moved}" if moved else "")


def has_figures(result: Result) -> bool:
    """Whether ``result``'s line gives timed figures (the stand-in's or the real routing's):
    not for one the checks refused, a bound screened or the validation took its rank from."""
    return result.status not in ("refused", "screened", "validation-failed")


def stand_in_note(validations: Validations) -> str:
    """What an unvalidated candidate's figures are: ``stand-in timing, not validated``, with
    how far the real routing moved each objective's figure on the validated candidates
    (``...: on the 3 validated the real routing moved ITL p99 +79% to +82%, TTFT p99 +10% to
    +15%``): the stand-in's figures, ITL p99 above all, can sit on the other side of a bound
    (docs/recommend.md, "How the routing stand-in compares")."""
    moves: dict[str, list[float]] = {}
    for done in validations.values():
        for key, value in done.values_ms.items():
            stand_in = done.stand_in_values_ms.get(key)
            if value is not None and stand_in:
                moves.setdefault(key, []).append(value / stand_in - 1)
    note = "stand-in timing, not validated"
    if not moves:
        return note
    spans = [
        f"{registry.objectives()[key].name} {min(m):+.0%}"
        + (f" to {max(m):+.0%}" if max(m) - min(m) >= 0.005 else "")
        for key, m in moves.items()
    ]
    return f"{note}: on the {len(validations)} validated the real routing moved {', '.join(spans)}"


def validation_summary(
    results: Sequence[Result], first: Result | None, inputs: Inputs, validations: Validations
) -> str:
    """'' unless ``--validate-top`` ran rank 1 and it missed the SLO with the real routing;
    then a sentence saying so and which validated candidate, if any, held."""
    done = validations.get(first.candidate.key) if first is not None else None
    if first is None or done is None or done.holds:
        return ""
    held = next(
        (
            r
            for r in results
            if r.rank is not None
            and (v := validations.get(r.candidate.key)) is not None
            and v.holds
        ),
        None,
    )
    missed = done.verdict(inputs.slo).removeprefix("real routing: SLO missed")
    return (
        f"Rank 1 ({first.candidate.key}) misses the SLO with the real Dynamo routing at the load "
        f"found{missed}; "
        + (
            f"rank {held.rank} ({held.candidate.key}) holds it, the best-ranked validated "
            "candidate that does. "
            if held is not None
            else "no validated candidate holds it. "
        )
        + "The ranking is the model's (the routing stand-in's): the measurement below decides."
    )


def stack_header(
    result: Result, first: Result | None, inputs: Inputs, validations: Validations | None = None
) -> str:
    """The comment at the top of an emitted stack file."""
    best = result.best
    lines = [
        SIMULATED,
        f"{inputs.invocation}: rank {result.rank} of the candidates for SLO "
        f"{inputs.slo.describe()} ({inputs.objective}, margin {inputs.margin:g})",
        result.candidate.label(),
    ]
    if result.plan is not None:
        sources = step_sources(result.plan)
        lines.append("step times: " + ", ".join(f"{g} {s}" for g, s in sources.items()))
    if best is not None:
        lines.append(
            f"at {best.load_text()}: {objective_value(best, inputs.objective):,.0f} "
            f"{per_gpu_name(inputs.objective)}, {best.tokens_per_s_per_user:,.1f} tok/s per "
            f"user, {best.requests_per_s:,.2f} req/s"
        )
        lines.append(
            f"load: {best.load_text()}, requestsPerRun "
            f"{inputs.load_at(result).requests_per_run}: the load found and the run length "
            f"timed there (at least {inputs.per_client} measured requests per client)"
        )
    lines.append(shown_line(result, first, inputs, validations))
    lines.append(
        f"edited from {typed_path(inputs.source)}, its comments kept: topology and load are "
        "the candidate's"
    )
    done = (validations or {}).get(result.candidate.key)
    if done is not None:
        lines.append(done.line())
    return "".join(f"# {line}\n" for line in lines)


def emitted_stack_text(
    result: Result, first: Result | None, inputs: Inputs, validations: Validations | None = None
) -> str:
    """A stack file of ``result`` under its header comment: the cluster's stack file
    (:attr:`Inputs.source`; a cluster file of the keys alone under ``config:``, each key
    namespaced, :func:`stackmodel.config.config_key`) edited as YAML with its comments and
    sections kept, its
    ``topology`` the candidate's (each group's ``memoryLimit`` its sizing floor,
    :func:`recommend.search.check`; the graph named as the stack), ``model.name`` the model
    searched, ``baselineStack`` dropped (as :func:`recommend.space.candidate_raw` does), the
    ``hfToken`` secret dropped (its ciphertext is the cluster stack's: plan.md sets it for
    the new stack); a cluster that joins a namespace it is given (``createNamespace: false``,
    namespaced permissions) keeps its ``namespace``, one that creates its own gets the
    default, following the emitted stack's name (two stacks creating one namespace are
    refused, :func:`stackmodel.stacks.namespace_problems_of`); its load grid the workload at the
    load found, each run as long as the search timed it there (:meth:`Inputs.load_at`), with
    as many in-cluster load clients as their logs need to hold the records, fewer requests a
    run or the runner local where even the most cannot (:meth:`Inputs.stack_load`), and
    ``load.slo`` the SLO the search judged by
    (camelCase, :data:`workload.slo.STACK_KEYS`), so ``pulumi up`` and ``testbed load
    --config`` judge goodput against it."""
    import io

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    assert result.plan is not None
    cfg = result.plan.cfg
    topology = cfg.topology.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    measured, step = inputs.stack_load(result)
    load = {
        **cfg.load.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "concurrency": measured.concurrency,
        "requestsPerRun": measured.requests_per_run,
        "slo": inputs.slo.model_dump(mode="json", by_alias=True, exclude_none=True),
        **step,
    }
    if measured.request_rate is not None:
        load["requestRate"] = measured.request_rate
    editor = YAML()  # round-trip: the cluster file's comments, order, quotes and sections kept
    editor.preserve_quotes = True
    editor.indent(mapping=2, sequence=4, offset=2)
    document = editor.load(inputs.source.read_text())
    if not isinstance(document.get("config"), dict):  # a cluster file of the keys alone
        document = CommentedMap(config=document)
    config = document["config"]
    if any(":" not in str(key) for key in config):  # the project's keys written without it
        document["config"] = config = CommentedMap(
            (config_key(str(key)), value) for key, value in config.items()
        )
    for key in ("baselineStack", "hfToken"):
        config.pop(f"{PROJECT}:{key}", None)
    if str(config.get(f"{PROJECT}:createNamespace", True)).lower() != "false":
        # A stack that creates its namespace owns it: its own, following its name.
        config.pop(f"{PROJECT}:namespace", None)
    for key, value in (
        ("topology", {**topology, "name": emitted_name(inputs, result)}),
        ("load", load),
    ):
        config.ca.items.pop(f"{PROJECT}:{key}", None)  # the comments on the cluster's own
        config[f"{PROJECT}:{key}"] = value
    model = config.setdefault(f"{PROJECT}:model", {})
    if model.get("name") != cfg.model.name:
        model["name"] = cfg.model.name
    body = io.StringIO()
    editor.dump(document, body)
    return stack_header(result, first, inputs, validations) + body.getvalue()


def emitted_name(inputs: Inputs, result: Result) -> str:
    """The emitted stack's name: ``<cluster>-<search id>-rank<N>`` (:attr:`Inputs.search_id`:
    two searches of one cluster name their stacks apart)."""
    search = f"-{inputs.search_id}" if inputs.search_id else ""
    return f"{inputs.cluster}{search}-rank{result.rank}"


@dataclass(frozen=True)
class CalibrationSource:
    """What calibrates rank 1's node classes on one GPU: ``gpu`` (its catalog name), those
    ``node_classes``, and ``result``, the ranked candidate whose measurement is fitted (None:
    none on that GPU alone meets the SLO)."""

    gpu: str
    node_classes: tuple[str, ...]
    result: Result | None


def gpus_of(result: Result) -> dict[str, str]:
    """``result``'s node classes -> their GPU (catalog name)."""
    if result.plan is None:
        return {g.node_class: g.node_class for g in result.candidate.groups}
    return {g.group.node_class: g.gpu.name for g in result.plan.groups}


def calibration_sources(results: Sequence[Result], first: Result) -> list[CalibrationSource]:
    """Per GPU of rank 1, the candidate whose measurement calibrates it: rank 1 itself when
    it runs on one GPU; else, as a calibration fits one GPU (``testbed calibrate`` refuses a
    stack on two), the best-ranked candidate on that GPU alone."""
    by_gpu: dict[str, list[str]] = {}
    for node_class, gpu in sorted(gpus_of(first).items()):
        by_gpu.setdefault(gpu, []).append(node_class)
    ranked = [r for r in results if r.rank is not None]
    return [
        CalibrationSource(
            gpu,
            tuple(classes),
            first
            if len(by_gpu) == 1
            else next((r for r in ranked if set(gpus_of(r).values()) == {gpu}), None),
        )
        for gpu, classes in by_gpu.items()
    ]


def write_stacks(
    out: Path,
    inputs: Inputs,
    results: Sequence[Result],
    first: Result | None,
    count: int,
    validations: Validations | None = None,
) -> list[Path]:
    """The top ``count`` ranked candidates as stack files under ``out/stacks``, and those
    plan.md measures to calibrate rank 1's node classes (:func:`calibration_sources`); the
    stack files an earlier search left there are removed (their names carry its id)."""
    folder = out / STACKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("Pulumi.*.yaml"):
        stale.unlink()
    chosen = [r for r in results if r.rank is not None][:count]
    if first is not None:
        partner = ab_partner(results, first)
        extra = [partner] + [c.result for c in calibration_sources(results, first)]
        for result in extra:
            if result is not None and all(result is not r for r in chosen):
                chosen.append(result)
    paths = []
    for result in chosen:
        path = folder / f"Pulumi.{emitted_name(inputs, result)}.yaml"
        path.write_text(emitted_stack_text(result, first, inputs, validations))
        paths.append(path)
    return paths


def typed_path(folder: Path) -> str:
    """``folder`` as typed from the project root (absolute where it lies outside it)."""
    try:
        return str(folder.resolve().relative_to(REPO.resolve()))
    except ValueError:
        return str(folder.resolve())


TESTBED = "uv run testbed"
"""The ``testbed`` command as plan.md types it: through the project's environment, as the
README does (a bare ``testbed`` is on PATH only inside it)."""


def _node_classes(result: Result) -> set[str]:
    return {g.node_class for g in result.candidate.groups}


def _needs_token(inputs: Inputs) -> bool:
    """Whether each emitted stack needs the ``hfToken`` secret set: the model is a gated
    catalog model (:data:`stackmodel.models.GATED_MODELS`), or the cluster's stack file sets
    one (the emitted file drops its ciphertext, :func:`emitted_stack_text`)."""
    import yaml

    config = yaml.safe_load(inputs.source.read_text()).get("config") or {}
    return inputs.model in GATED_MODELS or f"{PROJECT}:hfToken" in config


UpStack = tuple[str, frozenset[str]]
"""A stack plan.md's commands find or leave up: its name and the node classes its workers hold."""


def prerequisites(cfg: StackConfig) -> tuple[str, ...]:
    """What must exist before plan.md's first ``pulumi up``, each as a check with the command
    that shows it (markdown list items): a graph stack's platform stack (``platformStack``: the
    Dynamo operator and CRDs, brought up as README.md's "With a cluster" does; a standalone
    stack installs the release itself), and per node class its nodes, found by its
    ``nodeSelector``, advertising ``nvidia.com/gpu`` through the NVIDIA device plugin: its GPUs
    a node, times ``replicasPerGpu`` on a time-sliced class (the plugin's
    ``sharing.timeSlicing.resources[].replicas``, NVIDIA/k8s-device-plugin README.md "Shared
    Access to GPUs with CUDA Time-Slicing"), as ``pulumi preview`` checks them
    (``clusterread/checks.py``)."""
    lines = []
    if cfg.stack_role == "graph":
        platform = cfg.platform_stack
        lines.append(
            f"The Dynamo platform (operator, CRDs), once per cluster: the stacks read it from "
            f"the stack `{platform}`. Check that `pulumi stack output -s {platform}` lists its "
            f"outputs; if not, `pulumi stack init {platform} && pulumi up -s {platform}` (an "
            "operator installed by hand: `platform.install: false` in "
            + (f"`stacks/Pulumi.{platform}.yaml`" if "/" not in platform else "its stack file")
            + " first)."
        )
    for name, nc in cfg.node_classes.items():
        selector = ",".join(f"{k}={v}" for k, v in nc.node_selector.items())
        per_node = nc.gpus_per_node * (nc.time_slicing.replicas_per_gpu if nc.time_slicing else 1)
        nodes = f"{nc.nodes} nodes" if nc.nodes != 1 else "1 node"
        each = ", each" if nc.nodes != 1 else ""
        where = f"labelled `{selector}`" if selector else "(no nodeSelector: any node)"
        sliced = (
            f" ({nc.gpus_per_node} GPU{'s' if nc.gpus_per_node != 1 else ''} x replicasPerGpu "
            f"{nc.time_slicing.replicas_per_gpu}: its time-slicing config, "
            "`sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: "
            f"{nc.time_slicing.replicas_per_gpu}}}]}}}}`)"
            if nc.time_slicing
            else ""
        )
        relabel = (
            f"; label a node with `kubectl label node <node> {selector}`"
            if selector and "kubernetes.io/hostname" not in nc.node_selector
            else ""
        )
        lines.append(
            f"Node class `{name}`: {nodes} {where}{each} advertising {per_node} "
            f"`nvidia.com/gpu` through the NVIDIA device plugin{sliced}. Check: `kubectl get nodes"
            + (f" -l {selector}" if selector else "")
            + " -o 'custom-columns=NODE:.metadata.name,GPUS:.status.allocatable.nvidia\\.com/gpu'`"
            + f"{relabel}."
        )
    return tuple(lines)


def cluster_stack(inputs: Inputs) -> list[UpStack]:
    """The cluster's own stack as plan.md's commands find it, up: its name and the node classes
    its workers hold (``topology.workers[].nodeClass``), when the cluster file is the project's
    stack ``stacks/Pulumi.<cluster>.yaml`` and not ``parked``; [] otherwise (a file elsewhere
    names no stack that plan.md could destroy)."""
    import yaml

    if inputs.source.resolve() != (REPO / "stacks" / f"Pulumi.{inputs.cluster}.yaml").resolve():
        return []
    config = yaml.safe_load(inputs.source.read_text()).get("config") or {}
    if str(config.get(f"{PROJECT}:parked", False)).lower() == "true":
        return []
    workers = (config.get(f"{PROJECT}:topology") or {}).get("workers") or []
    return [(inputs.cluster, frozenset(str(w.get("nodeClass")) for w in workers))]


def _measure(inputs: Inputs, result: Result, stacks: str, up: list[UpStack]) -> list[str]:
    """The commands that deploy ``result``'s emitted stack and keep its measurement: each stack
    still up (``up``, in the order deployed; the cluster's own first, :func:`cluster_stack`)
    whose workers hold a node class ``result`` uses is destroyed first (vLLM refuses to start
    a worker whose GPU has less free memory than its share: vLLM 0.31.0
    ``vllm/v1/worker/gpu_worker.py``, ``Worker.init_device``, "Free memory on device ... on
    startup is less than desired GPU memory utilization"; preview refuses it naming that
    ``pulumi destroy``), and leaves ``up``, which ``result`` then joins; a gated model's
    ``hfToken`` secret is set before ``pulumi up`` (:func:`_needs_token`). ``pulumi up`` runs
    the stack's grid (its load step); its results folder (the stack output ``loadResultsDir``,
    kept on disk after a destroy) is copied to ``out/load/<stack>`` while the stack is up."""
    name = emitted_name(inputs, result)
    classes = frozenset(_node_classes(result))
    gone = [stack for stack, held in up if held & classes]
    up[:] = [*((s, held) for s, held in up if s not in gone), (name, classes)]
    token = (
        [f"pulumi config set --secret -s {name} hfToken <your hf_ token>"]
        if _needs_token(inputs)
        else []
    )
    return [
        *(f"pulumi destroy -s {stack}" for stack in gone),
        f"cp {stacks}/Pulumi.{name}.yaml stacks/",
        f"pulumi stack init {name}",
        *token,
        f"pulumi up -s {name}",
        f'mkdir -p out/load && cp -r "$(pulumi stack output loadResultsDir -s {name})" '
        f"out/load/{name}",
    ]


def ab_partner(results: Sequence[Result], first: Result) -> Result | None:
    """What plan.md's A / B measures against rank 1: the best ranked candidate of the other
    kind (disaggregated against an aggregated rank 1, aggregated against a disaggregated one),
    every ranked one holding the SLO; rank 2 when none of the other kind holds (None: no
    rank 2 either)."""
    ranked = [r for r in results if r.rank is not None and r is not first]
    other = [r for r in ranked if r.candidate.disaggregated != first.candidate.disaggregated]
    return other[0] if other else ranked[0] if ranked else None


def held_text(inputs: Inputs, result: Result) -> str:
    """Where ``result``'s emitted stack measures otherwise than the search timed it, as its
    in-cluster load clients' logs cannot hold the records (:meth:`Inputs.stack_load`): its
    stack's requests a run, or its load run from the machine running Pulumi; else ""."""
    grid, step = inputs.stack_load(result)
    if step.get("runner") == "local":
        return (
            " (its stack runs the grid from the machine running Pulumi, `load.runner: local`: "
            "an in-cluster load client's log cannot hold even one request of each run)"
        )
    timed = inputs.load_at(result).requests_per_run
    if grid.requests_per_run < timed:
        return (
            f" (its stack measures {grid.requests_per_run}: the most the logs of its "
            f"{step.get('clients', 1)} in-cluster load clients hold, one a request in flight)"
        )
    return ""


def plan_text(
    inputs: Inputs,
    results: Sequence[Result],
    first: Result | None,
    out: Path | None = None,
    validations: Validations | None = None,
) -> str:
    """``plan.md``: the measurement that confirms (or overturns) the choice on the cluster,
    every command run from the project root (``out``: the output folder, default
    ``out/recommend/<cluster>``), what ``--validate-top``'s real-routing runs found, and the
    ``pulumi destroy`` of each stack its commands brought up."""
    ranked = [r for r in results if r.rank is not None]
    lines = [f"# Measurement plan ({_UNRUN} (the steps below))", ""]
    if first is None:
        lines += [
            "No candidate meets the SLO: nothing to confirm (candidates.json says what binds).",
            *(f"- Caveat: {c}" for c in inputs.caveats),
        ]
        return "\n".join(lines) + "\n"
    stacks = f"{typed_path(out) if out else f'out/recommend/{inputs.cluster}'}/{STACKS_DIR}"
    runner_up = ab_partner(ranked, first)
    found = cluster_stack(inputs)
    up = list(found)  # the stacks up, in the order deployed: the cluster's own first
    a = emitted_name(inputs, first)
    timed = [
        f"rank {r.rank} at {r.best.load_text()}, {inputs.load_at(r).requests_per_run} measured "
        "requests a run" + held_text(inputs, r)
        for r in (first, runner_up)
        if r is not None and r.best is not None
    ]
    if inputs.prerequisites:
        lines += [
            "Before you start (skip what the cluster already has; `pulumi preview` checks "
            "each and names what is missing):",
            "",
            *(f"- {line}" for line in inputs.prerequisites),
            "",
        ]
    lines += [f"Rank 1: {first.candidate.label()}. Timed: {'; '.join(timed)}.", ""]
    lines += [*(f"- Caveat: {c}" for c in inputs.caveats), ""] if inputs.caveats else []
    lines += [*(f"- {cost.line()}" for cost in inputs.slicing), ""] if inputs.slicing else []
    summary = validation_summary(results, first, inputs, validations or {})
    if summary:
        lines += [f"**{summary}**", ""]
    checked = [
        f"rank {r.rank} ({r.candidate.key}): {done.verdict(inputs.slo)}"
        for r in ranked
        if (done := (validations or {}).get(r.candidate.key)) is not None
    ]
    if checked:
        lines += [
            "With the real Dynamo routing (`--validate-top`): " + "; ".join(checked) + ".",
            "",
        ]
    lines += [
        "Run every command from the project root (the folder of `Pulumi.yaml`). The stacks' "
        f"names carry this search's id, `{inputs.search_id}` (a hash of its inputs), so "
        "another search's stacks do not overwrite them. The stacks share the cluster's GPUs: "
        "the commands destroy each stack still up on a node class the next one uses before "
        "deploying it (stacks on separate node classes run side by side)"
        + (
            f", the cluster's own stack `{inputs.cluster}` first (skip that `pulumi destroy` if "
            "it is not up)"
            if found
            else ""
        )
        + ": vLLM refuses to start a worker whose GPU has less free memory than its "
        "share, and `pulumi preview` refuses a stack whose share another stack's workers on its "
        "nodes leave too small, naming that stack; destroy any other stack holding these GPUs "
        "first the same way. Copy the emitted stack files into `stacks/`, then deploy and "
        "measure each in turn: `pulumi up` runs the stack's own load grid (in the cluster, "
        "as a Job: no address to find), the workload at the load found, each run as long as "
        f"the search timed it there (`load.requestsPerRun`, at least {inputs.per_client} "
        "measured requests per client; its `load.slo` the SLO searched), and the next line "
        "copies its results folder (the stack output `loadResultsDir`) to `out/load/<stack>`:",
        "",
        "```sh",
        *_measure(inputs, first, stacks, up),
    ]
    measured = {first.candidate.key}
    if runner_up is not None:
        b = emitted_name(inputs, runner_up)
        lines += [
            *_measure(inputs, runner_up, stacks, up),
            f"{TESTBED} compare out/load/{a} out/load/{b}",
        ]
        measured.add(runner_up.candidate.key)
    lines += ["```", ""]
    if runner_up is not None:
        untimed = sum(
            left_untimed(r) and r.candidate.disaggregated == runner_up.candidate.disaggregated
            for r in results
        )
        lines += [_runner_up_text(runner_up, first, inputs.margin, ranked, untimed), ""]
    sources = calibration_sources(results, first)
    lines.append(
        "Feed the measurement back, so the next search steps with the cluster's own figures"
        + (
            ": rank 1 runs on more than one GPU and a calibration fits one, so each GPU is "
            "calibrated on a measurement of a candidate on it alone:"
            if len(sources) > 1
            else ":"
        )
    )
    commands = []
    for source in sources:
        if source.result is None:
            lines += [
                "",
                f"No candidate on {source.gpu} alone ({', '.join(source.node_classes)}) meets "
                "the SLO: calibrate it on measured runs of a stack on that GPU alone.",
            ]
            continue
        name = emitted_name(inputs, source.result)
        if source.result.candidate.key not in measured:
            commands += _measure(inputs, source.result, stacks, up)
            measured.add(source.result.candidate.key)
        commands.append(
            f"{TESTBED} calibrate out/load/{name} --stack {name} --out calib/{source.gpu}.json"
        )
    if commands:
        lines += ["", "```sh", *commands, "```"]
    named = [
        f"`nodeClasses.{c}.calibration: calib/{source.gpu}.json`"
        for source in sources
        if source.result is not None
        for c in source.node_classes
    ]
    if named:
        lines += ["", f"Then name each profile in the cluster stack: {', '.join(named)}."]
    brought = [stack for stack, _ in up if all(stack != s for s, _ in found)]
    back = (
        f" (`pulumi up -s {inputs.cluster}` brings the cluster's own stack back)"
        if found and found[0] not in up
        else ""
    )
    lines += [
        "",
        f"Tear down the stacks this plan brought up{back}; the results folders stay:",
        "",
        "```sh",
        *(f"pulumi destroy -s {stack}" for stack in brought),
        "```",
    ]
    return "\n".join(lines) + "\n"


def _runner_up_text(
    runner_up: Result, first: Result, margin: float, ranked: Sequence[Result], untimed: int = 0
) -> str:
    """plan.md's sentence on what the A / B compares (:func:`ab_partner`) and what the model
    claims of it against rank 1; ``untimed``: the candidates of its kind a bound left untimed
    (:func:`recommend.search.left_untimed`)."""
    kind = "disaggregated" if runner_up.candidate.disaggregated else "aggregated"
    if runner_up.candidate.disaggregated != first.candidate.disaggregated:
        who = f"Rank {runner_up.rank}, the best {kind} candidate that holds the SLO,"
        if untimed:
            who = (
                f"Rank {runner_up.rank}, the best {kind} candidate timed that holds the SLO "
                f"({untimed} more {kind} the bounds left untimed: none of them can rank first),"
            )
    else:
        other = "aggregated" if kind == "disaggregated" else "disaggregated"
        who = f"No {other} candidate holds the SLO, so the A / B measures rank {runner_up.rank}; it"
    v = verdict(runner_up, first, margin)
    if v == "on the Pareto front":
        return (
            f"{who} is on the Pareto front beside rank 1: it trades {trade(runner_up, first)}, so "
            "neither beats the other on both; the A / B comparison above measures that trade."
        )
    if runner_up.needed is not None and runner_up.gpus > first.gpus:
        return (
            f"{who} holds the load too, on {gpus_text(runner_up.gpus)} against rank 1's "
            f"{first.gpus}: it loses on GPUs, whatever its goodput "
            f"({ratio(runner_up, first):.2f}x of rank 1's in the model); the A / B comparison "
            "above measures what the extra GPUs buy."
        )
    head = f"{who} reads {ratio(runner_up, first):.2f}x of rank 1 in the model: "
    if v == "too close to call":
        return (
            f"{head}**too close to call** (within the margin {margin:g}); the A / B "
            "comparison above decides."
        )
    return f"{head}beyond the margin {margin:g}; the comparison should confirm it."


Axis = Literal["x", "y"]


@dataclass(frozen=True)
class ChartPoint:
    """A ranked candidate as the figure draws it (under the capacity question also one that
    holds part of the load needed, ``rank`` None): ``per_gpu`` is the objective's figure
    (output or goodput tokens/s per cluster GPU, what the ranking and the margin read),
    ``per_user`` 1 / TPOT p50 (tokens/s), ``values_ms`` the worst figure of each SLO objective
    (ms, at the objective's own percentile)."""

    key: str
    rank: int | None
    disaggregated: bool
    on_front: bool
    per_gpu: float
    per_user: float
    values_ms: Mapping[str, float | None]


@dataclass(frozen=True)
class SloLine:
    """One SLO bound drawn as a line: vertical at ``value`` on the x axis, or horizontal on
    the y axis, in the panel's units; ``key`` the objective's (under the capacity question
    also ``needed``, ``stated`` and ``cluster``, the loads and the cluster's GPUs drawn:
    :data:`CAPACITY_LINES`)."""

    key: str
    axis: Axis
    value: float
    label: str


CAPACITY_LINES = ("needed", "stated", "cluster")
"""The keys of the capacity figure's lines that are no SLO's (:func:`capacity_chart_data`)."""

LINE_STYLES = {"needed": ("tab:red", "-"), "stated": ("tab:red", ":"), "cluster": ("black", ":")}
"""How the figure draws those lines (color, line style); an SLO's bound is grey and dashed."""


def _line_label(line: SloLine) -> str:
    """How the figure and its legend name ``line``: ``SLO TTFT p99 <= 1,000 ms``, a load
    line by its own label."""
    return line.label if line.key in CAPACITY_LINES else f"SLO {line.label}"


LABELLED = 3
"""The points a panel names: ranks 1 to 3."""

LABEL_STEP_PT = 12.0
"""Points a label stands above the one before it when their points crowd each other."""

CROWDED = 0.08
"""Two points crowd each other within this share of the panel's width and of its height."""


@dataclass(frozen=True)
class Label:
    """A point's name on a panel (``#1 c005``), ``offset`` (dx, dy) in points from ``anchor``
    (x, y in the panel's units: the point, or for points crowding one another the top right
    of them all, so their labels stack in a column), with a leader line back to the point."""

    key: str
    text: str
    anchor: tuple[float, float]
    offset: tuple[float, float]


@dataclass(frozen=True)
class Panel:
    """One panel of ``pareto.png``: ``xy`` each point's coordinates (candidate key -> (x, y);
    a point without the panel's figure is left out), the SLO's ``lines``, the margin ``band``
    (axis, low, high: the objective from rank 1's / the margin up to rank 1's), the
    ``labels`` of the top :data:`LABELLED` (one crowding another stands higher, by
    :data:`LABEL_STEP_PT`), and ``limits`` (the x and y axes' upper ends; both start at 0:
    every figure drawn is a rate or a time)."""

    title: str
    x_label: str
    y_label: str
    xy: Mapping[str, tuple[float, float]]
    lines: tuple[SloLine, ...]
    band: tuple[Axis, float, float] | None
    labels: tuple[Label, ...] = ()
    limits: tuple[float, float] = (1.0, 1.0)


@dataclass(frozen=True)
class ChartData:
    """What ``pareto.png`` draws: the ranked candidates, the panels (the Pareto panel first,
    then one per TTFT or E2E bound of the SLO), the kinds present (the legend's entries:
    ``aggregated``, ``disaggregated``) and ``note``, what an empty figure says ('' when a
    candidate met the SLO)."""

    points: tuple[ChartPoint, ...]
    panels: tuple[Panel, ...]
    kinds: tuple[str, ...] = ()
    note: str = ""


def _laid_out(panel: Panel, points: Sequence[ChartPoint]) -> Panel:
    """``panel`` with its :class:`Label` s and its ``limits`` (10% right of the largest x of
    a point, line or band, 20% above the largest y, room for the labels; 1 where there is
    none)."""
    xs = [x for x, _ in panel.xy.values()]
    ys = [y for _, y in panel.xy.values()]
    for line in panel.lines:
        (xs if line.axis == "x" else ys).append(line.value)
    if panel.band is not None:
        (ys if panel.band[0] == "y" else xs).append(panel.band[2])
    x_max = max(xs, default=0.0) * 1.1 or 1.0
    y_max = max(ys, default=0.0) * 1.2 or 1.0  # room for a column of labels
    crowds: list[list[ChartPoint]] = []
    ranked = (p for p in points if p.key in panel.xy and p.rank is not None)
    for p in sorted(ranked, key=lambda p: p.rank or 0):
        if (p.rank or 0) > LABELLED:
            break
        x, y = panel.xy[p.key]
        home = next(
            (
                crowd
                for crowd in crowds
                if any(
                    abs(x - panel.xy[o.key][0]) <= CROWDED * x_max
                    and abs(y - panel.xy[o.key][1]) <= CROWDED * y_max
                    for o in crowd
                )
            ),
            None,
        )
        if home is None:
            crowds.append([p])
        else:
            home.append(p)
    labels = []
    for crowd in crowds:
        anchor = (
            max(panel.xy[p.key][0] for p in crowd),
            max(panel.xy[p.key][1] for p in crowd),
        )
        labels += [
            Label(p.key, f"#{p.rank} {p.key}", anchor, (6.0, 6.0 + LABEL_STEP_PT * i))
            for i, p in enumerate(crowd)
        ]
    labels.sort(key=lambda label: label.text)
    return replace(panel, labels=tuple(labels), limits=(x_max, y_max))


def chart_data(inputs: Inputs, results: Sequence[Result], first: Result | None) -> ChartData:
    """The figure's data: each ranked candidate at its highest load meeting the SLO; the
    Pareto panel (tokens/s per cluster GPU against tokens/s per user) with every bound of the
    SLO on a latency between tokens (ITL, TPOT at any percentile: `Metric.two_tokens`) as the
    per-user line it sets (a request within the bound streams at least 1000 / bound tokens/s to
    its user) and the margin band under rank 1; a panel per bound on any other latency (TTFT,
    E2E at any percentile: no rate on the tokens/s axes shows it), each ranked candidate's
    figure of it against its tokens/s per GPU, with the bound as a line and the same band
    across. The objectives come from `metrics.registry.objectives`, in its order. Under the
    capacity question: :func:`capacity_chart_data`."""
    if inputs.objective == "capacity":
        return capacity_chart_data(inputs, results)
    front = pareto_front(results)
    points = tuple(
        _point(r, inputs, r.candidate.key in front)
        for r in results
        if r.best is not None and r.rank is not None
    )
    top = objective_value(first.best, inputs.objective) if first and first.best else None
    band_low = top / inputs.margin if top is not None else None
    per_gpu = per_gpu_name(inputs.objective)
    objectives = inputs.slo.objectives()
    chosen = {k: o for k, o in registry.objectives().items() if k in objectives}
    pareto = Panel(
        title="tokens/s per cluster GPU against tokens/s per user",
        x_label=f"output tok/s per user (1 / {registry.figure_name('tpot', 50)})",
        y_label=per_gpu,
        xy={p.key: (p.per_user, p.per_gpu) for p in points},
        lines=tuple(
            SloLine(
                k,
                "x",
                1e3 / objectives[k],
                f"{bound_text(k, objectives[k])}: >= {1e3 / objectives[k]:,.1f} tok/s per user",
            )
            for k, o in chosen.items()
            if o.metric.two_tokens
        ),
        band=("y", band_low, top) if top is not None and band_low is not None else None,
    )
    latency = tuple(
        Panel(
            title=f"{o.name} against tokens/s per cluster GPU",
            x_label=per_gpu,
            y_label=f"{o.name} ({o.metric.unit}) at the highest load meeting the SLO",
            xy={p.key: (p.per_gpu, v) for p in points if (v := p.values_ms.get(k)) is not None},
            lines=(SloLine(k, "y", objectives[k], bound_text(k, objectives[k])),),
            band=("x", band_low, top) if top is not None and band_low is not None else None,
        )
        for k, o in chosen.items()
        if not o.metric.two_tokens
    )
    return _chart_data(inputs, points, (pareto, *latency))


def _point(result: Result, inputs: Inputs, on_front: bool) -> ChartPoint:
    """``result`` (timed: its ``best`` figures) as the figure draws it."""
    assert result.best is not None
    return ChartPoint(
        key=result.candidate.key,
        rank=result.rank,
        disaggregated=result.candidate.disaggregated,
        on_front=on_front,
        per_gpu=objective_value(result.best, inputs.objective),
        per_user=result.best.tokens_per_s_per_user,
        values_ms=dict(result.best.values_ms),
    )


def _chart_data(
    inputs: Inputs, points: tuple[ChartPoint, ...], panels: Sequence[Panel]
) -> ChartData:
    """The figure of ``points`` on ``panels``, each laid out (:func:`_laid_out`), with the
    kinds present and the note of an empty figure."""
    kinds = tuple(
        kind
        for kind, disaggregated in (("aggregated", False), ("disaggregated", True))
        if any(p.disaggregated == disaggregated for p in points)
    )
    note = "" if points else f"no candidate met the SLO ({inputs.slo.describe()})"
    return ChartData(points, tuple(_laid_out(panel, points) for panel in panels), kinds, note)


CAPACITY_SHOWN = ("ranked", "validation-failed", "short-of-load")
"""The statuses the capacity figure draws: each held some load within the SLO."""


def capacity_chart_data(inputs: Inputs, results: Sequence[Result]) -> ChartData:
    """The capacity question's figure: each candidate that held some load within the SLO
    (:data:`CAPACITY_SHOWN`) at the load it held (clients, or an open loop's requests/s)
    against the GPUs it uses, with the load needed (the stated load x the headroom,
    :func:`recommend.search.needed_load`) and the workload's stated load as lines and the
    cluster's GPUs as a vertical one; then a panel per SLO objective, its worst figure at that
    load against the GPUs, the bound as a line. No band: the ranking is by GPUs, not by a ratio
    of goodputs."""
    shown = [r for r in results if r.best is not None and r.status in CAPACITY_SHOWN]
    points = tuple(_point(r, inputs, False) for r in shown)
    gpus = {r.candidate.key: float(r.gpus) for r in shown}
    held = {r.candidate.key: held_load(r.best) for r in shown if r.best is not None}
    open_loop = inputs.load.arrival is Arrival.POISSON and inputs.load.request_rate is not None
    unit = "requests/s" if open_loop else "clients"
    needed = needed_load(inputs.load, inputs.headroom)
    stated = stated_load(inputs.load)
    load = Panel(
        title="load held within the SLO against GPUs used",
        x_label="GPUs the candidate uses",
        y_label=f"load held within the SLO ({unit})",
        xy={key: (gpus[key], held[key]) for key in held},
        lines=(
            SloLine(
                "needed",
                "y",
                needed,
                f"the load needed: {needed:g} {unit} (the stated load x the headroom "
                f"{inputs.headroom:g})",
            ),
            SloLine("stated", "y", stated, f"the workload's stated load: {stated:g} {unit}"),
            SloLine(
                "cluster",
                "x",
                inputs.cluster_gpus,
                f"the cluster's {gpus_text(inputs.cluster_gpus)}",
            ),
        ),
        band=None,
    )
    objectives = inputs.slo.objectives()
    figures = tuple(
        Panel(
            title=f"{o.name} against GPUs used",
            x_label="GPUs the candidate uses",
            y_label=f"{o.name} ({o.metric.unit}) at the load held",
            xy={p.key: (gpus[p.key], v) for p in points if (v := p.values_ms.get(k)) is not None},
            lines=(SloLine(k, "y", objectives[k], bound_text(k, objectives[k])),),
            band=None,
        )
        for k, o in registry.objectives().items()
        if k in objectives
    )
    return _chart_data(inputs, points, (load, *figures))


def _chart(inputs: Inputs, data: ChartData) -> bytes:
    """``pareto.png`` drawn from :func:`chart_data`: one panel beside the other, aggregated
    candidates as circles and disaggregated as squares (a legend entry only for a kind
    present), the Pareto front outlined, the top 3 named (each label offset with a leader
    line), the SLO's lines dashed, the margin band shaded, and the note of an empty figure."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import OffsetFrom
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(data.panels), figsize=(8 * len(data.panels), 5), squeeze=False)
    for ax, panel in zip(axes[0], data.panels, strict=True):
        for p in data.points:
            if p.key not in panel.xy:
                continue
            x, y = panel.xy[p.key]
            ax.scatter(
                x,
                y,
                marker="s" if p.disaggregated else "o",
                color="tab:orange" if p.disaggregated else "tab:blue",
                edgecolors="black" if p.on_front else "none",
                s=60 if p.rank == 1 else 30,
            )
        for label in panel.labels:
            ax.annotate(
                label.text,
                panel.xy[label.key],
                xytext=label.offset,
                textcoords=OffsetFrom(ax.transData, label.anchor, unit="points"),
                fontsize=8,
                arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5},
            )
        for line in panel.lines:
            draw = ax.axvline if line.axis == "x" else ax.axhline
            color, style = LINE_STYLES.get(line.key, ("grey", "--"))
            draw(line.value, color=color, linestyle=style, label=_line_label(line))
        if panel.band is not None:
            axis, low, high = panel.band
            shade = ax.axhspan if axis == "y" else ax.axvspan
            shade(
                low,
                high,
                color="tab:green",
                alpha=0.15,
                label=f"within {inputs.margin:g}x of rank 1",
            )
        if "aggregated" in data.kinds:
            ax.scatter([], [], marker="o", color="tab:blue", label="aggregated")
        if "disaggregated" in data.kinds:
            ax.scatter([], [], marker="s", color="tab:orange", label="disaggregated")
        if data.note:
            ax.text(0.5, 0.5, data.note, transform=ax.transAxes, ha="center", va="center")
        if inputs.objective == "capacity":  # GPUs on x: whole numbers
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(0, panel.limits[0])
        ax.set_ylim(0, panel.limits[1])
        ax.set_xlabel(panel.x_label)
        ax.set_ylabel(panel.y_label)
        ax.set_title(panel.title, fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
    fig.suptitle(f"SIMULATED: {inputs.cluster}, SLO {inputs.slo.describe()}", fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def chart_legend(inputs: Inputs, data: ChartData) -> list[str]:
    """What the figure's lines and band are, one sentence each (for ``report.html``)."""
    lines = [
        f"{panel.title}: {_line_label(line)} "
        + ("(vertical dashed line)" if line.axis == "x" else "(horizontal dashed line)")
        for panel in data.panels
        for line in panel.lines
    ]
    band = next((p.band for p in data.panels if p.band is not None), None)
    if band is not None:
        lines.append(
            f"shaded: {band[1]:,.0f} to {band[2]:,.0f} tok/s per cluster GPU, within the margin "
            f"{inputs.margin:g} of rank 1 (too close to call)"
        )
    return lines


def write_report(
    out: Path,
    inputs: Inputs,
    results: Sequence[Result],
    first: Result | None,
    validations: Validations | None = None,
) -> None:
    """``pareto.png`` and ``report.html`` (the figure and the table, each line led by its
    real-routing verdict where ``--validate-top`` ran it, :func:`shown_line`)."""
    data = chart_data(inputs, results, first)
    png = _chart(inputs, data)
    (out / PARETO_PNG).write_bytes(png)
    legend = "".join(f"<li>{html.escape(line)}</li>" for line in chart_legend(inputs, data))
    rows = "".join(
        f"<tr><td>{r.rank or ''}</td><td>{html.escape(r.status)}</td>"
        f"<td>{html.escape(r.candidate.label())}</td>"
        f"<td>{html.escape(shown_line(r, first, inputs, validations))}</td></tr>"
        for r in results
        if r.status != "refused"
    )
    refused = sum(r.status == "refused" for r in results)
    summary = validation_summary(results, first, inputs, validations or {})
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>testbed recommend</title>"
        "</head><body>"
        f"<h1>testbed recommend: {html.escape(inputs.cluster)}</h1>"
        f"<p><strong>{html.escape(SIMULATED)}</strong></p>"
        f"<p>SLO {html.escape(inputs.slo.describe())}; objective {inputs.objective}; margin "
        f"{inputs.margin:g}; {refused} candidates refused by the checks (candidates.json).</p>"
        + (f"<p><strong>{html.escape(summary)}</strong></p>" if summary else "")
        + "".join(f"<p>Caveat: {html.escape(c)}</p>" for c in inputs.caveats)
        + "".join(f"<p>{html.escape(cost.line())}</p>" for cost in inputs.slicing)
        + (f"<p>{html.escape(line)}</p>" if (line := saturated_line(results)) else "")
        + f"<img alt='pareto' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
        f"<ul>{legend}</ul>"
        "<table border='1'><tr><th>rank</th><th>status</th><th>candidate</th><th>why</th></tr>"
        f"{rows}</table></body></html>\n"
    )
    (out / REPORT_HTML).write_text(page)
