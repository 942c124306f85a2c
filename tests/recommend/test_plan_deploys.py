"""plan.md deploys as written: its commands run in its order against a fake cluster (the fake
Kubernetes API, tests/fake_kube_api.py) whose pods follow its steps, each `pulumi up` as
`pulumi preview` runs the program (under Pulumi's mocks, the cluster checks on: what the
cluster's nodes and the other stacks' running workers leave this stack). A stack plan.md
deploys beside the ones still up passes with their workers holding their GPU shares; a stack
it deploys only after `pulumi destroy` of another is refused while that one's workers are there,
naming it, and passes once they are gone. The stack files and plan.md are the program's own,
written in the test: by `testbed recommend` on the seed's cluster, and by recommend's writers
for a ranking whose measurement deploys four stacks over the two GPUs."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_kube_api import FakeKubeApi, fake_kube_api
from search_inputs import lab_inputs

from components.program import main
from recommend.outputs import plan_text, write_stacks
from recommend.search import Figures, Result, check
from recommend.space import candidates
from stackmodel.config import project_values
from stackmodel.errors import PROJECT, StackConfigError
from stackmodel.stacks import REPO, stack_config
from stackmodel.validation import validate_stack
from testbed.cli import main as cli_main
from testbed.render import EchoMocks, Rendered, _referenced_stacks, run_under_mocks
from workload.config import LoadConfig


def _node(name: str, node_class: str, units: int) -> dict[str, Any]:
    """A node of the seed's cluster as ``GET /api/v1/nodes`` lists it, time-sliced into
    ``units`` ``nvidia.com/gpu``."""
    return {
        "metadata": {"name": name, "labels": {"dynamo-testbed/node-class": node_class}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "16", "memory": "62Gi", "nvidia.com/gpu": str(units)}},
    }


SEED_NODES = [_node("main", "gpu-24gb", 4), _node("laptop", "gpu-8gb", 2)]
"""The seed's 24 GB server (4 units a GPU) and 8 GB laptop (2), as kv-routing's classes say."""


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with fake_kube_api() as server:
        server.nodes = SEED_NODES
        yield server


def _project(tmp_path: Path) -> Path:
    """A project folder: Pulumi.yaml and the platform stack, as plan.md's `cp` finds them."""
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", project / "Pulumi.yaml")
    shutil.copy(REPO / "stacks/Pulumi.platform.yaml", project / "stacks/Pulumi.platform.yaml")
    return project


def _worker_pods(rendered: Rendered, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The running pods the operator makes of the stack's DGD: each component's ``replicas``
    pods from its ``podTemplate``, bound to the first node its ``nodeSelector`` selects (the
    seed has one node a class)."""
    pods = []
    for dgd in rendered.kubernetes_objects():
        if dgd.get("kind") != "DynamoGraphDeployment":
            continue
        for component in dgd["spec"]["components"]:
            template = component["podTemplate"]
            selector = template["spec"].get("nodeSelector", {})
            bound = [n for n in nodes if selector.items() <= n["metadata"]["labels"].items()]
            for i in range(component["replicas"]):
                pods.append(
                    {
                        "metadata": {
                            "name": f"{dgd['metadata']['name']}-{component['name']}-{i}",
                            "namespace": dgd["metadata"]["namespace"],
                            "labels": dict(template["metadata"]["labels"]),
                        },
                        "spec": {**template["spec"], "nodeName": bound[0]["metadata"]["name"]},
                        "status": {"phase": "Running"},
                    }
                )
    return pods


@dataclass
class Deployed:
    """What plan.md's walk did: each stack it deployed with the stacks up beside it, the
    stacks each was refused beside before plan.md's `pulumi destroy` of them, the stacks it
    destroyed (in order) and the results folders it copied (`out/load/<stack>`)."""

    beside: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[str, list[str]] = field(default_factory=dict)
    destroyed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def _commands(plan: str) -> list[str]:
    """plan.md's shell lines, in order (every ```sh block), each `a && b` as two."""
    lines, inside = [], False
    for line in plan.splitlines():
        if line.startswith("```"):
            inside = line == "```sh"
        elif inside:
            lines += line.split(" && ")
    return lines


OUTPUT = re.compile(r'^cp -r "\$\(pulumi stack output loadResultsDir -s (\S+)\)" out/load/(\S+)$')
"""plan.md's copy of a stack's results folder, named by its stack output."""


def walk_plan(
    plan: str, project: Path, api: FakeKubeApi, kubeconfig: str, up_first: Sequence[str] = ()
) -> Deployed:
    """Run plan.md's commands in order, ``up_first`` (stacks of ``project``) up before them, their
    workers on the cluster: `cp` copies the stack file into ``project``, `pulumi config set
    --secret` sets the stack's secret, `pulumi destroy` marks the stack to go and `pulumi up`
    previews the stack with the cluster checks; each stack marked to go must refuse it first
    (its workers still there), then its workers go, then it must pass, and its workers join the
    cluster. The copy of a stack's results folder reads its stack output, so that stack must be
    up; `testbed compare` and `calibrate` read only folders copied before them. At the end the
    stacks destroyed last have gone, and no stack's workers are left."""
    done = Deployed()
    up: dict[str, list[str]] = {}
    leaving: list[str] = []
    secrets: dict[str, dict[str, str]] = {}

    def preview(stack: str) -> Rendered:
        config, secret_keys = stack_config(stack, project)
        config["kubernetes:kubeconfig"] = kubeconfig
        for key, value in secrets.get(stack, {}).items():
            config[f"{PROJECT}:{key}"] = value
            secret_keys.append(f"{PROJECT}:{key}")
        return run_under_mocks(
            partial(main, cluster_checks=True),
            stack=stack,
            config=config,
            secret_keys=secret_keys,
            mocks=EchoMocks(_referenced_stacks(project_values(config), project)),
        )

    def deploy(stack: str) -> None:
        rendered = preview(stack)
        done.beside[stack] = sorted(up)
        pods = _worker_pods(rendered, api.nodes)
        for pod in pods:
            api.put(pod)
        up[stack] = [p["metadata"]["name"] for p in pods]

    for stack in up_first:
        deploy(stack)
    done.beside.clear()
    for command in _commands(plan):
        words = command.split()
        kept = OUTPUT.match(command)
        if kept:
            assert kept[1] in up, f"plan.md reads {kept[1]}'s outputs while it is not up"
            assert kept[1] == kept[2], command
            done.kept.append(kept[2])
        elif words[:3] == ["uv", "run", "testbed"]:
            folders = [w.removeprefix("out/load/") for w in words if w.startswith("out/load/")]
            assert set(folders) <= set(done.kept), f"{command}: not copied before it"
        elif words[0] == "cp":
            shutil.copy(words[1], project / words[2])
        elif words[:2] == ["pulumi", "destroy"]:
            assert words[-1] in up, f"plan.md destroys {words[-1]}, which is not up"
            leaving.append(words[-1])
            done.destroyed.append(words[-1])
        elif words[:4] == ["pulumi", "config", "set", "--secret"]:
            secrets.setdefault(words[5], {})[words[6]] = "hf_testtoken"
        elif words[:2] == ["pulumi", "up"]:
            stack = words[-1]
            for other in leaving:
                with pytest.raises(StackConfigError) as caught:
                    preview(stack)
                assert f"`pulumi destroy -s {other}`" in str(caught.value)
                done.refused.setdefault(stack, []).append(other)
                for name in up.pop(other):
                    api.pods.pop(name)
            leaving = []
            deploy(stack)
    for other in leaving:  # the teardown
        for name in up.pop(other):
            api.pods.pop(name)
    assert not up, f"plan.md leaves {sorted(up)} up"
    assert not api.pods, sorted(api.pods)
    return done


TINY = "prefixKinds: [2]\nconcurrency: [1]\nrequestsPerRun: 4\nmaxTokens: 8\n"


def test_recommend_s_plan_on_the_seed_cluster_deploys_as_written(
    tmp_path: Path, api: FakeKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    """`testbed recommend --cluster kv-routing`, with kv-routing up (its workers hold both
    GPUs): plan.md destroys kv-routing first (rank 1's preview refuses it while its workers are
    there); rank 1 on the 8 GB laptop, its A / B partner (disaggregated) on the 24 GB server;
    plan.md deploys the partner beside rank 1, and its preview passes with rank 1's worker on
    the laptop; each stack's results folder is copied while it is up; the teardown destroys
    both, leaving no worker. Every emitted stack renders."""
    from testbed.render import render_stack

    workload = tmp_path / "load.yaml"
    workload.write_text(TINY)
    out = tmp_path / "out"
    args = ["--cluster", "kv-routing", "--workload", str(workload), "--out", str(out)]
    args += ["--slo", "ttft_p99_ms=5000", "--jobs", "1", "--validate-top", "0"]
    args += ["--fix", "router=kv", "--fix", "kvEvents=true"]
    assert cli_main(["recommend", *args]) == 0, capsys.readouterr().err
    project = _project(tmp_path)
    shutil.copy(REPO / "stacks/Pulumi.kv-routing.yaml", project / "stacks")
    plan = (out / "plan.md").read_text()
    kubeconfig = str(api.kubeconfig(tmp_path))
    done = walk_plan(plan, project, api, kubeconfig, up_first=["kv-routing"])
    first, partner = done.beside
    assert first.endswith("-rank1") and done.beside[first] == []
    assert done.beside[partner] == [first]  # the partner beside rank 1
    assert done.refused == {first: ["kv-routing"]}
    assert done.destroyed == ["kv-routing", first, partner]
    assert done.kept == [first, partner]
    assert "`pulumi up -s kv-routing` brings the cluster's own stack back" in plan
    for path in (out / "stacks").iterdir():
        shutil.copy(path, project / "stacks")
        name = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        assert render_stack(name, project).registrations


BOTH = "1 x TP1 aggregated on gpu-24gb + 1 x TP1 aggregated on gpu-8gb; router kv"
ON_24GB = "1 x TP1 aggregated on gpu-24gb; router kv"
ON_8GB = "1 x TP1 aggregated on gpu-8gb; router kv"
DISAGG_8GB = (
    "1 x TP1 prefill on gpu-8gb, 2 a GPU + 1 x TP1 decode on gpu-8gb, 2 a GPU; router kv; "
    "GPU buffers over TCP"
)


def _ranked(cluster: Mapping[str, Any], *labels: str) -> list[Result]:
    """The candidates of ``labels`` on ``cluster`` (a stack's config, project keys), checked,
    ranked in that order."""
    cfg = validate_stack("lab", cluster).cfg
    by_label = {c.label(): c for c in candidates(cfg)}
    results = []
    for rank, label in enumerate(labels, 1):
        plan = check(f"lab-x{rank}", cluster, by_label[label], LoadConfig())
        assert not isinstance(plan, str), plan
        best = Figures(8, 100.0 / rank, 110.0, 50.0, 1.0, 0.5, 1.0, {"ttft_p99_ms": 900.0})
        result = Result(by_label[label], "ranked", 2, best=best, value=100.0 / rank, plan=plan)
        result.rank = rank
        results.append(result)
    return results


def test_a_plan_over_two_gpus_destroys_each_stack_on_the_gpus_it_needs(
    tmp_path: Path, api: FakeKubeApi
) -> None:
    """The 24 GB server names its GPU (rtx-3090), so rank 1 (one worker on each server) is
    calibrated GPU by GPU. plan.md deploys rank 1; its A / B partner, disaggregated on the
    laptop, after rank 1 is destroyed (refused beside it); rank 2 on the 24 GB server beside the
    partner, to calibrate that GPU; and rank 3 on the laptop, to calibrate the laptop's GPU,
    only after the partner, still up there, is destroyed (vLLM 0.31.0 would refuse rank 3's 0.9
    share beside the partner's 0.45, and the laptop's 2 units are the partner's)."""
    text = (REPO / "stacks" / "Pulumi.kv-routing.yaml").read_text()
    text = text.replace("      gpuMemoryGiB: 24\n", "      gpu: rtx-3090\n      gpuMemoryGiB: 24\n")
    cluster_file = tmp_path / "Pulumi.lab.yaml"
    cluster_file.write_text(text)
    cluster = project_values(yaml.safe_load(text)["config"])
    results = _ranked(cluster, BOTH, ON_24GB, ON_8GB, DISAGG_8GB)
    inputs = lab_inputs(cluster_file)
    out = tmp_path / "out"
    write_stacks(out, inputs, results, results[0], 1)
    plan = plan_text(inputs, results, results[0], out)
    done = walk_plan(plan, _project(tmp_path), api, str(api.kubeconfig(tmp_path)))
    rank = {f"lab-5e3a1c-rank{r.rank}": r.rank for r in results}
    assert [(rank[s], [rank[b] for b in beside]) for s, beside in done.beside.items()] == [
        (1, []),
        (4, []),
        (2, [4]),
        (3, [2]),
    ]
    assert {rank[s]: [rank[o] for o in others] for s, others in done.refused.items()} == {
        4: [1],
        3: [4],
    }
    assert [rank[s] for s in done.destroyed] == [1, 4, 2, 3]  # the last two: the teardown
    assert [rank[s] for s in done.kept] == [1, 4, 2, 3]
    assert "kv-routing" not in plan  # the cluster file is no stack of the project


TWO_ON_8GB = "2 x TP1 aggregated on gpu-8gb, 2 a GPU; router kv"


def test_a_stack_whose_units_another_stack_holds_is_refused_until_it_is_destroyed(
    tmp_path: Path, api: FakeKubeApi
) -> None:
    """Rank 1's two workers take the laptop's 2 time-sliced units at 0.45 each; its A / B
    partner's prefill and decode (0.45 each) would fit the GPU's memory beside them, but no unit
    is free, so the scheduler would leave them Pending: preview refuses the partner while rank
    1 is up, naming it, and passes once plan.md has destroyed it."""
    text = (REPO / "stacks" / "Pulumi.kv-routing.yaml").read_text()
    cluster_file = tmp_path / "Pulumi.lab.yaml"
    cluster_file.write_text(text)
    results = _ranked(project_values(yaml.safe_load(text)["config"]), TWO_ON_8GB, DISAGG_8GB)
    inputs = lab_inputs(cluster_file)
    out = tmp_path / "out"
    write_stacks(out, inputs, results, results[0], 2)
    plan = plan_text(inputs, results, results[0], out)
    done = walk_plan(plan, _project(tmp_path), api, str(api.kubeconfig(tmp_path)))
    assert done.beside == {"lab-5e3a1c-rank1": [], "lab-5e3a1c-rank2": []}
    assert done.refused == {"lab-5e3a1c-rank2": ["lab-5e3a1c-rank1"]}
    assert done.destroyed == ["lab-5e3a1c-rank1", "lab-5e3a1c-rank2"]
