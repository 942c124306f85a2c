"""The documented seed sequence (platform, kv-routing, park, disagg-same-node, ...: the section
"The seed's sequence on one cluster" of ``docs/shared-cluster.md``) run under Pulumi's mocks,
command by command, with a mock engine that keeps each stack's state.

What the mocks stand in for:
- reads of another stack (the platform's ``pulumi:pulumi:StackReference``, the baseline's
  ``pulumi:pulumi:readStackOutputs`` invoke) answer with its outputs as the commands before
  left them (``{}`` after ``pulumi destroy``; a stack never initialised fails the read with
  ``unknown stack``, as the engine does: :class:`testbed.render.EchoMocks`);
- the load step (a dynamic resource) is treated as the engine treats one: the first
  registration creates it; later ones call the real provider's ``diff`` with the stored outputs
  and keep them when it reports no change (the engine's ``SameStep``); a create or update of an
  unparked step "runs the grid", answering with the seed's numbers (simulator.seed) for that stack;
  ``pulumi preview`` runs neither.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pytest
from docs_text import doc_files
from test_load_step_comparison import SEED_DISAGG, SEED_KV_ROUTING, points

from components.load_provider import LoadStepProvider
from components.program import main
from stackmodel.stack_layout import stack_reference_name
from stackmodel.stacks import stack_config
from testbed.render import EchoMocks, Rendered, run_under_mocks

STEP_TYPE = "pulumi-python:dynamic/testbed:LoadStep"
DGD_TYPE = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
RAN_AT = "2026-11-13T10:00:00+00:00"

SEED_RESULTS: dict[str, list[dict[str, Any]]] = {
    "kv-routing": points(SEED_KV_ROUTING),
    "disagg-same-node": points(SEED_DISAGG),
    # The seed, cross node at concurrency 4: 2 requests succeeded (2,039 and 2,040 ms).
    "disagg-cross-node": [
        {"prefix_kinds": 2, "concurrency": 4, "ttft_p50_ms": 2039.5, "samples": 2, "errors": 0}
    ],
}
"""What a load run "returns" for each stack under these mocks."""


def doc_commands(heading: str) -> list[list[str]]:
    """The commands of the first ``sh`` block after the docs' line matching ``heading`` (a
    regular expression of the whole line), each as its argument list."""
    text = "\n".join(path.read_text() for path in doc_files())
    section = re.split(rf"^{heading}$", text, maxsplit=1, flags=re.M)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    commands = []
    for line in block.group(1).splitlines():
        line = line.split("#", 1)[0]  # comments; no command has a '#'
        for part in line.split("&&"):
            if part.strip():
                commands.append(shlex.split(part.split("|", 1)[0]))
    return commands


def sequence_commands() -> list[list[str]]:
    """The commands of the docs' seed-sequence block."""
    return doc_commands(r"#+ The seed's sequence on one cluster")


@dataclass
class Cluster:
    """The stacks as the commands leave them, and every load run."""

    initialised: set[str] = field(default_factory=set)
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    rendered: dict[str, Rendered] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    history: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def references(self) -> dict[str, dict[str, Any]]:
        """StackReference answers: each initialised stack's outputs by full name."""
        return {
            stack_reference_name(stack, None, "dynamo-testbed"): self.outputs.get(stack, {})
            for stack in self.initialised
        }

    def up(self, stack: str, *, preview: bool = False) -> Rendered:
        """``pulumi up`` (or, with ``preview``, ``pulumi preview``: nothing is kept)."""
        config, secrets = stack_config(stack)
        for path, value in self.overrides.get(stack, {}).items():
            # `pulumi config set [--path] KEY VALUE` (a string; `section.key` with --path).
            key, _, inner = path.partition(".")
            full = f"dynamo-testbed:{key}"
            if inner:
                config[full] = json.dumps({**json.loads(config[full]), inner: value})
            else:
                config[full] = value
        rendered = run_under_mocks(
            main,
            stack=stack,
            config=config,
            secret_keys=secrets,
            preview=preview,
            mocks=EngineMocks(self),
        )
        if preview:
            return rendered
        self.rendered[stack] = rendered
        self.outputs[stack] = rendered.outputs
        self.history.append((stack, rendered.outputs))
        return rendered


class EngineMocks(EchoMocks):
    """Echo mocks plus the engine's handling of the load step (see the module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster.references())
        self.cluster = cluster

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        if args.typ != STEP_TYPE:
            return super().new_resource(args)
        stack = pulumi.get_stack()
        news = {k: v for k, v in args.inputs.items() if k != "__provider"}
        provider = LoadStepProvider()
        olds = self.cluster.steps.get(stack)
        if pulumi.runtime.is_dry_run():  # a preview runs no create or update
            return f"{args.name}-id", dict(olds or news)
        if olds is None and news["parked"]:
            outs = provider.create(news).outs
        elif olds is None or provider.diff("id", olds, news).changes:
            self.cluster.runs.append(stack)
            outs = {
                **news,
                "results": SEED_RESULTS[stack],
                "status": {"state": "ok", "message": f"run {len(self.cluster.runs)}"},
                "ranAt": RAN_AT,
                "finishedAt": RAN_AT,
                "resultsDir": f"/results/{stack}/{len(self.cluster.runs)}",
            }
        else:
            outs = olds  # SameStep: the stored outputs are kept
        assert outs is not None
        self.cluster.steps[stack] = dict(outs)
        return f"{args.name}-id", dict(outs)


def gpu_units_by_class(rendered: Rendered) -> Counter[str]:
    """``nvidia.com/gpu`` the stack's DGD requests per node class (0 when parked)."""
    units: Counter[str] = Counter()
    for obj in rendered.kubernetes_objects():
        if obj["kind"] != "DynamoGraphDeployment":
            continue
        for component in obj["spec"]["components"]:
            pod = component["podTemplate"]["spec"]
            limits = pod["containers"][0].get("resources", {}).get("limits", {})
            if "nvidia.com/gpu" in limits:
                node_class = pod["nodeSelector"]["dynamo-testbed/node-class"]
                units[node_class] += component["replicas"] * int(limits["nvidia.com/gpu"])
    return units


SEED_GPU_UNITS = {"gpu-24gb": 4, "gpu-8gb": 2}
"""The seed cluster's time-sliced slots: 1 GPU x 4 replicas on the 24 GB server, 1 x 2 on the
8 GB server (the stacks' nodeClasses)."""


def run_sequence(commands: list[list[str]]) -> tuple[Cluster, list[str]]:
    """Run the commands; returns the cluster and what was printed (``stack output`` tables)."""
    cluster = Cluster()
    printed: list[str] = []
    for command in commands:
        assert command[0] == "pulumi", command
        verb, stack = command[1:3], command[command.index("-s") + 1] if "-s" in command else None
        if verb == ["stack", "init"]:
            cluster.initialised.add(command[3])
        elif verb[0] == "up" and stack is not None:
            assert stack in cluster.initialised, f"{stack} is brought up before `stack init`"
            cluster.up(stack)
            in_use: Counter[str] = Counter()
            for name, rendered in cluster.rendered.items():
                if name not in cluster.destroyed:
                    in_use += gpu_units_by_class(rendered)
            assert all(in_use[c] <= n for c, n in SEED_GPU_UNITS.items()), (command, in_use)
        elif verb == ["config", "set"] and stack is not None:
            key, value = command[-2:]
            cluster.overrides.setdefault(stack, {})[key] = value
        elif verb[0] == "preview" and stack is not None:
            assert stack in cluster.initialised, f"{stack} is previewed before `stack init`"
            cluster.up(stack, preview=True)
        elif verb == ["stack", "output"] and stack is not None:
            output = cluster.outputs[stack][command[3]]
            printed.append(output["table"] if command[3] == "comparison" else output)
        elif verb[0] == "destroy" and stack is not None:
            users = [
                name
                for name, out in cluster.outputs.items()
                if name not in cluster.destroyed
                and (out.get("platform") or {}).get("stack") == stack
            ]
            assert users == [], f"{stack} destroyed while {users} run under it"
            # The engine refuses to delete a protected resource (tests/cli_rules/
            # test_destroy_order.py): the platform's release until `platform.protect: false`.
            kept = [r.urn for r in cluster.rendered[stack].registrations if r.protect]
            assert kept == [], f"{stack}: `pulumi destroy` refused, protected: {kept}"
            cluster.destroyed.append(stack)
            cluster.outputs[stack] = {}  # a destroyed stack has no outputs
        else:
            raise AssertionError(f"unexpected command {command}")
    return cluster, printed


@pytest.fixture(scope="module")
def sequence() -> tuple[Cluster, list[str]]:
    return run_sequence(sequence_commands())


def test_the_readme_block_is_the_seed_sequence() -> None:
    ups = [c[-1] for c in sequence_commands() if c[1] == "up"]
    assert ups == [
        "platform",
        "kv-routing",
        "kv-routing",
        "disagg-same-node",
        "disagg-same-node",
        "disagg-cross-node",
        "platform",  # platform.protect: false, before `pulumi destroy -s platform`
    ]


def test_the_grid_runs_once_per_graph_stack_never_on_a_park(
    sequence: tuple[Cluster, list[str]],
) -> None:
    cluster, _ = sequence
    assert cluster.runs == ["kv-routing", "disagg-same-node", "disagg-cross-node"]


def test_the_platform_is_registered_once_and_read_by_every_graph(
    sequence: tuple[Cluster, list[str]],
) -> None:
    cluster, _ = sequence
    releases = {s: len(r.helm_releases()) for s, r in cluster.rendered.items()}
    assert releases == {
        "platform": 1,
        "kv-routing": 0,
        "disagg-same-node": 0,
        "disagg-cross-node": 0,
    }
    for stack in ("kv-routing", "disagg-same-node", "disagg-cross-node"):
        assert cluster.rendered[stack].outputs["platform"]["stack"] == "platform"
        assert cluster.rendered[stack].outputs["namespace"] == f"testbed-{stack}"


def test_a_parked_stack_keeps_its_results_and_frees_its_gpus(
    sequence: tuple[Cluster, list[str]],
) -> None:
    cluster, _ = sequence
    kv = cluster.rendered["kv-routing"]  # its last `up`: parked
    assert kv.outputs["parked"] is True
    assert kv.outputs["dgdName"] is None
    assert not [r for r in kv.registrations if r.type == DGD_TYPE]
    assert gpu_units_by_class(kv) == Counter()
    kinds = sorted(o["kind"] for o in kv.kubernetes_objects())
    assert kinds == ["Namespace", "Service"]
    # The outputs of its first `up`, exactly (no second run: see the run count above).
    first, parked = [out for stack, out in cluster.history if stack == "kv-routing"]
    assert first["parked"] is False and parked["parked"] is True
    for key in ("results", "loadStatus", "loadRanAt", "loadResultsDir"):
        assert parked[key] == first[key], key
    assert [p["ttft_p50_ms"] for p in parked["results"]] == [r[2] for r in SEED_KV_ROUTING]
    assert parked["loadStatus"] == {"state": "ok", "message": "run 1"}
    assert cluster.steps["kv-routing"]["parked"] is False  # the stored inputs: the last run's
    # Parked, the step is registered with the unparked topology's fingerprint and the same URL.
    (step,) = [r for r in kv.registrations if r.type == STEP_TYPE]
    assert step.inputs["parked"] is True
    for key in ("fingerprint", "url", "grid"):
        assert step.inputs.get(key) == cluster.steps["kv-routing"].get(key), key


def test_the_comparison_reads_the_parked_baseline(sequence: tuple[Cluster, list[str]]) -> None:
    cluster, printed = sequence
    comparison = cluster.rendered["disagg-same-node"].outputs["comparison"]
    assert (comparison["baseline"], comparison["this"]) == ("kv-routing", "disagg-same-node")
    rows = {(r["prefix_kinds"], r["concurrency"]): r for r in comparison["rows"]}
    assert len(rows) == 8
    pair = rows[(2, 4)]["ttft_p50_ms"]
    assert (pair["baseline"], pair["this"], pair["ratio"]) == (34, 286, 8.412)
    assert rows[(24, 8)]["requests_per_s"]["ratio"] == 0.522
    assert "34 / 286 (x8.41)" in printed[0]
    # The parked baseline's `resources` output says what the ratios include.
    assert comparison["resources"]["differences"][0] == (
        "kv-routing also used node class gpu-8gb: 2 workers on 1 GPU"
    )
    assert set(comparison["resources"]["affects"]) == {"requests_per_s", "cached_ratio"}
    assert "Resources differ (kv-routing / disagg-same-node)" in printed[0]
    cross = cluster.rendered["disagg-cross-node"].outputs["comparison"]
    assert cross["baseline"] == "disagg-same-node"  # parked before cross-node came up
    pair = cross["rows"][0]["ttft_p50_ms"]
    assert (pair["baseline"], pair["this"], pair["ratio"]) == (286, 2039.5, 7.131)


def test_without_the_park_the_gpus_would_not_fit() -> None:
    unparked = [c for c in sequence_commands() if "parked" not in c or "kv-routing" not in c]
    with pytest.raises(AssertionError, match="gpu-24gb"):
        run_sequence(unparked)


def commands(*lines: str) -> list[list[str]]:
    """``pulumi ...`` command lines as argument lists."""
    return [shlex.split(line) for line in lines]


def test_unparking_redeploys_and_keeps_the_results_until_run_id_changes() -> None:
    steps = commands(
        "pulumi stack init platform",
        "pulumi up -s platform",
        "pulumi stack init kv-routing",
        "pulumi config set --path -s kv-routing load.nodeAddress 10.0.0.5",
        "pulumi up -s kv-routing",
        "pulumi config set -s kv-routing parked true",
        "pulumi up -s kv-routing",
        "pulumi config set -s kv-routing parked false",
        "pulumi up -s kv-routing",
    )
    cluster, _ = run_sequence(steps)
    kv = cluster.rendered["kv-routing"]
    assert [r.type for r in kv.registrations].count(DGD_TYPE) == 1  # redeployed
    assert cluster.runs == ["kv-routing"]  # same fingerprint, same runId: the old results
    assert kv.outputs["loadStatus"]["message"] == "run 1"
    # A runId changed while parked runs on unpark.
    cluster, _ = run_sequence(
        [
            *steps[:6],
            *commands("pulumi config set --path -s kv-routing load.runId 2"),
            *steps[6:],
        ]
    )
    assert cluster.runs == ["kv-routing", "kv-routing"]


def test_a_graph_before_its_platform_fails_naming_it() -> None:
    with pytest.raises(Exception, match=r"Bring it up first: `pulumi up -s platform`"):
        run_sequence(
            commands(
                "pulumi stack init platform",
                "pulumi stack init kv-routing",
                "pulumi up -s kv-routing",
            )
        )


@pytest.mark.parametrize(
    ("graph", "refusal"),
    [
        ([], r"platform: `pulumi destroy` refused, protected"),  # protect (the engine's)
        (["pulumi stack init kv-routing", "pulumi up -s kv-routing"], r"platform destroyed while"),
    ],
)
def test_destroying_the_platform_first_is_refused(graph: list[str], refusal: str) -> None:
    with pytest.raises(AssertionError, match=refusal):
        run_sequence(
            commands(
                "pulumi stack init platform",
                "pulumi up -s platform",
                *graph,
                "pulumi destroy -s platform",
            )
        )


WALKTHROUGH = "## With a cluster: `pulumi up`"
"""The README's walk-through (its first ``sh`` block): the platform, then one graph stack whose
config names a baseline."""


def test_the_walkthrough_runs_from_an_empty_backend() -> None:
    """Its graph stack names a baseline (``disagg-same-node``) that the walk-through never
    creates: the comparison says so and the deploy goes on (a StackReference would have failed
    the preview with ``unknown stack``)."""
    commands = doc_commands(re.escape(WALKTHROUGH))
    assert [c[1:3] for c in commands[:2]] == [["stack", "init"], ["up", "-s"]]
    cluster, printed = run_sequence(commands)  # an empty backend: Cluster() knows no stack
    assert cluster.initialised == {"platform", "disagg-cross-node"}
    assert cluster.runs == ["disagg-cross-node"]
    (up,) = [out for stack, out in cluster.history if stack == "disagg-cross-node"]
    assert up["results"] == SEED_RESULTS["disagg-cross-node"]
    comparison = up["comparison"]
    assert comparison["baseline"] == "disagg-same-node"
    assert comparison["note"].startswith(
        "no baseline: stack 'disagg-same-node' could not be read (invoke of "
        "pulumi:pulumi:readStackOutputs failed: invocation of pulumi:pulumi:readStackOutputs "
        'returned an error: unknown stack "disagg-same-node")'
    )
    assert [row["ttft_p50_ms"]["this"] for row in comparison["rows"]] == [2039.5]
    assert printed == [up["placement"]]
    assert cluster.destroyed == ["disagg-cross-node", "platform"]
