"""Bad stack configs: each raises one StackConfigError naming the stack, the key path and the bad
value, before the program registers anything."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pulumi
import pytest
from pulumi.runtime.mocks import MockMonitor

from stackmodel.errors import StackConfigError
from stackmodel.validation import validate_stack
from testbed.render import render_stack

Raw = dict[str, Any]


def workers(raw: Raw) -> list[dict[str, Any]]:
    workers_: list[dict[str, Any]] = raw["topology"]["workers"]
    return workers_


def setting(*path: str | int, value: Any) -> Callable[[Raw], None]:
    """A mutation that sets ``raw[path...] = value``."""

    def mutate(raw: Raw) -> None:
        node: Any = raw
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


def removing(*path: str | int) -> Callable[[Raw], None]:
    """A mutation that deletes ``raw[path...]``."""

    def mutate(raw: Raw) -> None:
        node: Any = raw
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return mutate


def rename_replicas(raw: Raw) -> None:
    workers(raw)[1]["replica"] = workers(raw)[1].pop("replicas")


class BadConfig(NamedTuple):
    """A shipped stack, a change that breaks it, and the problem it must produce."""

    stack: str
    mutate: Callable[[Raw], None]
    key: str
    value: str | None  # repr of the bad value in the message; None: not checked
    message: str  # a fragment of the problem's message


W = ("topology", "workers")
CROSS = "disagg-cross-node"
LATEST = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"

BAD_CONFIGS = {
    "unknown-top-level-key": BadConfig(
        CROSS,
        setting("nodeClass", value={"x": 1}),
        "nodeClass",
        "{'x': 1}",
        "unknown key; did you mean nodeClasses? allowed here:",
    ),
    "unknown-nested-key-typo": BadConfig(
        CROSS,
        rename_replicas,
        "topology.workers[1].replica",
        "2",
        "unknown key; did you mean replicas? allowed here: baseMemory, cpu",
    ),
    "memory-key-of-a-node-class-is-gpu-or-host": BadConfig(
        CROSS,
        setting("nodeClasses", "gpu-24gb", "memoryGiB", value=24),
        "nodeClasses.gpu-24gb.memoryGiB",
        "24",
        "unknown key; did you mean gpuMemoryGiB (the memory of one GPU) or hostMemoryGiB (the "
        "memory of one node for its pods)? allowed here: calibration,",
    ),
    "key-of-a-section-written-beside-it": BadConfig(
        CROSS,
        setting("nodeClasses", "gpu-24gb", "replicasPerGpu", value=2),
        "nodeClasses.gpu-24gb.replicasPerGpu",
        "2",
        "unknown key here; it belongs under timeSlicing: write timeSlicing: {replicasPerGpu: 2}; "
        "allowed here: calibration,",
    ),
    "slo-objective-written-beside-slo": BadConfig(
        CROSS,
        setting("load", "ttftP99Ms", value=500),
        "load.ttftP99Ms",
        "500",
        "unknown key here; it belongs under slo: write slo: {ttftP99Ms: 500}; allowed here: api,",
    ),
    "unknown-node-class": BadConfig(
        CROSS,
        setting(*W, 0, "nodeClass", value="gpu-80gb"),
        "topology.workers[0].nodeClass",
        "'gpu-80gb'",
        "unknown node class; defined in nodeClasses: gpu-24gb, gpu-8gb",
    ),
    "unknown-frontend-node-class": BadConfig(
        CROSS,
        setting("topology", "frontend", value={"nodeClass": "cpu"}),
        "topology.frontend.nodeClass",
        "'cpu'",
        "unknown node class",
    ),
    "prefill-without-decode": BadConfig(
        CROSS, removing(*W, 1), "topology.workers", "['prefill']", "prefill workers without decode"
    ),
    "decode-without-prefill": BadConfig(
        CROSS, removing(*W, 0), "topology.workers", "['decode']", "decode workers without prefill"
    ),
    "zero-replicas": BadConfig(
        CROSS,
        setting(*W, 1, "replicas", value=0),
        "topology.workers[1].replicas",
        "0",
        "greater than or equal to 1",
    ),
    "gpu-memory-overcommitted-on-time-sliced-gpu": BadConfig(
        CROSS,
        setting(*W, 1, "gpuMemoryUtilization", value=0.6),  # 2 decode x 0.6 on one 24 GB GPU
        "topology.workers[1].gpuMemoryUtilization",
        "0.6",
        "the GPU of node class 'gpu-24gb' (24 GiB = 25,769,803,776 B) is overcommitted",
    ),
    "more-replicas-than-gpus-without-time-slicing": BadConfig(
        CROSS,
        removing("nodeClasses", "gpu-24gb", "timeSlicing"),
        "topology.workers[1].replicas",
        "2",
        "GPU oversubscription on node class 'gpu-24gb': workers decode need 2 nvidia.com/gpu",
    ),
    "latest-tag-without-runtime-version-override": BadConfig(
        CROSS,
        setting("engine", "image", value=LATEST),
        "engine.image",
        repr(LATEST),
        "DGD admission needs engine.runtimeVersionOverride",
    ),
    "missing-model": BadConfig(
        CROSS, removing("model"), "model", "(missing)", "required key is missing"
    ),
    "empty-model-name": BadConfig(
        CROSS, setting("model", "name", value=""), "model.name", "''", "at least 1 character"
    ),
    "kv-transfer-role-mismatch": BadConfig(
        CROSS,
        setting(*W, 0, "kvTransfer", "role", value="kv_consumer"),
        "topology.workers[0].kvTransfer.role",
        "'kv_consumer'",
        "does not match worker role prefill; allowed: kv_producer, kv_both",
    ),
    "aggregated-worker-with-kv-transfer": BadConfig(
        "kv-routing",
        setting(*W, 0, "kvTransfer", value={"role": "kv_producer"}),
        "topology.workers[0].kvTransfer",
        None,
        "aggregated workers transfer no KV",
    ),
    "prefill-without-kv-transfer": BadConfig(
        CROSS,
        removing(*W, 0, "kvTransfer"),
        "topology.workers[0].kvTransfer",
        "(missing)",
        "a prefill worker needs kvTransfer",
    ),
    "bad-memory-quantity": BadConfig(
        CROSS,
        setting(*W, 0, "memoryLimit", value="8GB"),
        "topology.workers[0].memoryLimit",
        "'8GB'",
        "invalid memory quantity '8GB'",
    ),
    "misspelt-gpu-name": BadConfig(
        CROSS,
        setting("nodeClasses", "gpu-24gb", "gpu", value="h100-pice"),
        "nodeClasses.gpu-24gb.gpu",
        "'h100-pice'",
        "unknown GPU 'h100-pice'; did you mean h100-pcie? known: a10, ",
    ),
    "bad-link-name": BadConfig(
        CROSS,
        setting("links", value={"crossNode": "2gbe"}),
        "links.crossNode",
        "'2gbe'",
        "unknown link profile '2gbe'",
    ),
    "unknown-model-without-geometry": BadConfig(
        CROSS,
        setting("model", "name", value="acme/unknown-7b"),
        "model.geometry",
        "(missing)",
        "unknown model 'acme/unknown-7b'",
    ),
    "vllm-service-with-prefill-role": BadConfig(
        "vllm-service",
        setting(*W, 0, "role", value="prefill"),
        "topology.workers",
        "['aggregated', 'prefill']",
        "topology kind vllm-service runs plain vLLM replicas: every role must be aggregated",
    ),
    "vllm-service-with-mocker-engine": BadConfig(
        "vllm-service",
        setting("engine", "kind", value="mocker"),
        "engine.kind",
        "'mocker'",
        "topology kind vllm-service needs engine kind vllm",
    ),
    "duplicate-worker-names": BadConfig(
        CROSS,
        setting(*W, 1, "name", value="prefill"),
        "topology.workers",
        None,
        "worker names must be unique; repeated: prefill",
    ),
    "namespace-scope-without-crds-preinstalled": BadConfig(
        CROSS,
        lambda raw: raw.update(stackRole="standalone", platform={"operatorScope": "namespace"}),
        "platform",
        "{'operatorScope': 'namespace'}",
        "operatorScope='namespace' with install=true needs crdsPreinstalled=true",
    ),
    "platform-section-in-a-graph-stack": BadConfig(
        CROSS,
        setting("platform", value={"chartVersion": "1.6.1"}),
        "platform",
        "{'chartVersion': '1.6.1'}",
        "a graph stack installs no platform: it uses the operator of its platform stack",
    ),
    "bad-stack-role": BadConfig(
        CROSS,
        setting("stackRole", value="platfrom"),
        "stackRole",
        "'platfrom'",
        "allowed: platform (the Dynamo platform, once per cluster), graph",
    ),
    "bad-router-mode": BadConfig(
        CROSS,
        setting("topology", "routerMode", value="kv-aware"),
        "topology.routerMode",
        "'kv-aware'",
        "'kv', 'round-robin' or 'random'",
    ),
    "gpu-memory-utilization-above-1": BadConfig(
        CROSS,
        setting(*W, 0, "gpuMemoryUtilization", value=1.5),
        "topology.workers[0].gpuMemoryUtilization",
        "1.5",
        "less than or equal to 1",
    ),
    "bad-namespace-name": BadConfig(
        CROSS,
        setting("namespace", value="Dynamo_Testbed"),
        "namespace",
        "'Dynamo_Testbed'",
        "should match pattern",
    ),
    "bad-toleration-operator": BadConfig(
        CROSS,
        setting("nodeClasses", "gpu-8gb", "tolerations", 0, "operator", value="Exist"),
        "nodeClasses.gpu-8gb.tolerations[0].operator",
        "'Exist'",
        "'Exists' or 'Equal'",
    ),
    "one-number-where-a-list-belongs": BadConfig(
        CROSS,
        setting("load", "concurrency", value=30),
        "load.concurrency",
        "30",
        "Input should be a valid list; write it as a list: [30] (concurrency: Grid axis",
    ),
    "zero-load-concurrency": BadConfig(
        CROSS,
        setting("load", "concurrency", value=[0]),
        "load.concurrency[0]",
        "0",
        "greater than 0",
    ),
}


def assert_names_problem(exc: StackConfigError, bad: BadConfig) -> None:
    """The error names the stack, the key path, the bad value and what is wrong."""
    text = str(exc)
    assert exc.stack == bad.stack
    assert text.startswith(f"stack '{bad.stack}': invalid config")
    assert "nothing was deployed" in text
    assert f"stacks/Pulumi.{bad.stack}.yaml" in text
    # A custom validator's own text, without pydantic's "Value error, " prefix.
    assert not [p for p in exc.problems if p.message.startswith(("Value error", "Assertion"))]
    matching = [p for p in exc.problems if p.key == bad.key and bad.message in p.message]
    assert matching, f"no problem at {bad.key} with {bad.message!r} in:\n{text}"
    line = f"dynamo-testbed:{bad.key} = "
    if bad.value is not None:
        line += bad.value
    assert line in text


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_names_stack_key_and_value(case: str, raw_config: Callable[[str], Raw]) -> None:
    bad = BAD_CONFIGS[case]
    raw = raw_config(bad.stack)
    validate_stack(bad.stack, raw)  # the shipped stack is valid before the change
    bad.mutate(raw)
    with pytest.raises(StackConfigError) as info:
        validate_stack(bad.stack, raw)
    assert_names_problem(info.value, bad)


def test_runtime_version_override_fixes_a_latest_tag(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config(CROSS)
    raw["engine"]["image"] = LATEST
    raw["engine"]["runtimeVersionOverride"] = "1.6.2"
    plan = validate_stack(CROSS, raw)
    assert plan.cfg.engine.resolved_image == LATEST
    assert plan.cfg.engine.runtime_version_override == "1.6.2"


def test_every_problem_is_reported_at_once(raw_config: Callable[[str], Raw]) -> None:
    raw = raw_config(CROSS)
    raw["namespace"] = "Bad_Name"
    raw["topology"]["routerMode"] = "kv-aware"
    with pytest.raises(StackConfigError) as info:
        validate_stack(CROSS, raw)
    assert sorted(p.key for p in info.value.problems) == ["namespace", "topology.routerMode"]
    assert "(2 problems)" in str(info.value)


# --- through the Pulumi program: nothing is registered ------------------------------------------


@pytest.fixture
def registered_types(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The resource types every mock monitor is asked to register (the Stack excluded)."""
    types: list[str] = []
    register = MockMonitor.RegisterResource

    def recording(self: MockMonitor, request: Any) -> Any:
        # Only the stack under test: rendering a graph stack renders its platform stack first.
        if request.type != "pulumi:pulumi:Stack" and pulumi.get_stack() != "platform":
            types.append(request.type)
        return register(self, request)

    monkeypatch.setattr(MockMonitor, "RegisterResource", recording)
    yield types


@pytest.mark.parametrize(
    "case", ["unknown-node-class", "gpu-memory-overcommitted-on-time-sliced-gpu", "missing-model"]
)
def test_program_raises_before_registering_anything(
    case: str,
    raw_config: Callable[[str], Raw],
    project_with: Callable[[str, Raw], Path],
    registered_types: list[str],
) -> None:
    bad = BAD_CONFIGS[case]
    raw = raw_config(bad.stack)
    bad.mutate(raw)
    project = project_with(bad.stack, raw)
    with pytest.raises(StackConfigError) as info:
        render_stack(bad.stack, project)
    assert_names_problem(info.value, bad)
    assert registered_types == []


def test_registration_spy_sees_a_good_stack(
    raw_config: Callable[[str], Raw],
    project_with: Callable[[str, Raw], Path],
    registered_types: list[str],
) -> None:
    """The control for the test above: the same spy records a valid stack's resources."""
    config = raw_config(CROSS)
    config["load"]["nodeAddress"] = "10.0.0.5"  # the shipped stacks leave it to the user
    rendered = render_stack(CROSS, project_with(CROSS, config))
    # Namespace, Service, the TestbedGraph component and its DGD + the post-deploy load step (a
    # dynamic resource); the platform stack reference is read, not registered.
    assert len(registered_types) == len(rendered.registrations) == 5
    assert "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment" in registered_types


def test_memory_in_plain_bytes_is_accepted(raw_config: Callable[[str], Raw]) -> None:
    config = raw_config(CROSS)
    config["topology"]["workers"][0]["memoryLimit"] = 9 * 2**30
    plan = validate_stack(CROSS, config)
    assert plan.cfg.topology.workers[0].memory_limit == str(9 * 2**30)


def test_a_misspelled_section_is_shown_short(raw_config: Callable[[str], Raw]) -> None:
    config = raw_config(CROSS)
    config["topolgy"] = config.pop("topology")
    with pytest.raises(StackConfigError) as err:
        validate_stack(CROSS, config)
    line = next(x for x in str(err.value).splitlines() if "topolgy" in x)
    assert "did you mean topology?" in line
    value = line.split(" = ", 1)[1].split(": unknown key", 1)[0]
    assert len(value) <= 80 and value.endswith("...")


def test_one_problem_per_worker_group_not_per_replica(raw_config: Callable[[str], Raw]) -> None:
    config = raw_config("disagg-same-node")
    config["topology"]["workers"][0]["gpuMemoryUtilization"] = 0.01
    with pytest.raises(StackConfigError) as err:
        validate_stack("disagg-same-node", config)
    keys = [p.key for p in err.value.problems]
    assert keys == ["topology.workers[0].gpuMemoryUtilization"]


def test_a_list_refused_for_its_items_errors_is_not_a_third_problem(
    raw_config: Callable[[str], Raw],
) -> None:
    config = raw_config("disagg-same-node")
    for worker in workers(config):
        worker["gpuMemoryUtilisation"] = worker.pop("gpuMemoryUtilization")
    with pytest.raises(StackConfigError) as err:
        validate_stack("disagg-same-node", config)
    keys = [p.key for p in err.value.problems]  # not topology.workers: "at least 1 item"
    assert keys == [f"topology.workers[{i}].gpuMemoryUtilisation" for i in (0, 1)]
    assert "did you mean gpuMemoryUtilization?" in err.value.problems[0].message


@pytest.mark.parametrize(
    ("slo", "message"),
    [
        # as typed: "did you mean ttft_p90_ms?", the snake_case keys and the field's description
        (
            {"ttftP90ms": 800},
            "unknown SLO key 'ttftP90ms': did you mean ttftP90Ms? the keys are LATENCYPQMs for "
            "LATENCY ttft, itl, tpot or e2e and Q 50, 90, 95 or 99 (ms; e.g. ttftP90Ms)",
        ),
        # as typed: NaN compares false with every bound and was taken
        (
            {"ttftP90Ms": float("nan")},
            "ttftP90Ms=nan is not a number of milliseconds: write e.g. ttftP90Ms=1000",
        ),
        ({"itlP95Ms": "inf"}, "itlP95Ms='inf' is not a number of milliseconds"),  # held out
        (
            {"ttftP90Ms": "0.8s"},
            "ttftP90Ms='0.8s' is not a number of milliseconds: write ttftP90Ms=800",
        ),
    ],
)
def test_a_bad_load_slo_is_one_short_line_in_the_stack_files_spelling(
    slo: dict[str, Any], message: str, raw_config: Callable[[str], Raw]
) -> None:
    raw = raw_config("kv-routing")
    raw["load"]["slo"] = slo
    with pytest.raises(StackConfigError) as info:
        validate_stack("kv-routing", raw)
    text = str(info.value)
    assert message in text
    assert "\n" not in text and len(text) < 400
    assert "_ms" not in text and "Service-level objectives" not in text  # no description
